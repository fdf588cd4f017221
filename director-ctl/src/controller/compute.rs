//! Per client prefix and service: every candidate server's metrics, the engine's sort, a
//! decision; compressed into kernel entries as the prefixes go by in order.
//!
//! The prefixes considered are those of the sites' BGP tables, of the GeoIP data and the
//! operator's locations, and of the RTT data, plus 0.0.0.0/0 and ::/0 (so every client has
//! a decision). Each source is matched to a prefix by longest-prefix match.

use std::{collections::HashMap, net::IpAddr, time::Instant};

use anyhow::{Context, Result};
use director_common::maps::Decision;
use ipnet::IpNet;
use serde::Serialize;

use super::data::{Data, SiteData};
use super::sweep::{self, Sweep};
use crate::compile::{sort_key, Compressor, Table};
use crate::config::{self, Config};
use crate::engine::{self, Candidate, Metric, Metrics, Policy, Ranking};
use crate::model::{Location, Route};

/// One service's sort settings and servers, resolved against the config.
pub struct ServicePlan {
    /// Kernel id (1-based position in the config).
    pub id: u32,
    pub name: String,
    pub policy: Policy,
    /// (server id, site index, portion, agent_distance, preference)
    pub servers: Vec<(u16, usize, u16, u32, u32)>,
}

/// Kernel ids of the config's servers and services, by position in the config. `run` keeps
/// the ids already in the kernel for names it knows, so that a reordered config or an added
/// server never makes an id mean another server while queries are being answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ids {
    pub servers: Vec<u16>,
    pub services: Vec<u32>,
}

impl Ids {
    /// 1, 2, 3... in config order (for check and explain, which touch no kernel).
    pub fn positional(cfg: &Config) -> Ids {
        Ids {
            servers: (1..=cfg.servers.len() as u16).collect(),
            services: (1..=cfg.services.len() as u32).collect(),
        }
    }
}

pub fn plans(cfg: &Config, ids: &Ids) -> Result<Vec<ServicePlan>> {
    let site_of: HashMap<&str, usize> = cfg
        .sites
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.as_str(), i))
        .collect();
    let server_of: HashMap<&str, (usize, &config::Server)> = cfg
        .servers
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.as_str(), (i, s)))
        .collect();
    cfg.services
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let at = || format!("[[service]] {:?}", s.name);
            let metric = |m: &String| {
                m.parse::<Metric>()
                    .map_err(|e| anyhow::anyhow!("{}: {e}", at()))
            };
            let prio = s
                .priority
                .iter()
                .map(|(m, p)| Ok((metric(m)?, *p)))
                .collect::<Result<Vec<_>>>()?;
            let weights = s
                .weights
                .iter()
                .map(|(m, w)| Ok((metric(m)?, *w)))
                .collect::<Result<Vec<_>>>()?;
            let policy = Policy::new(&prio, &weights, s.rtt_tolerance, s.med)
                .map_err(|e| anyhow::anyhow!("{}: {e}", at()))?;
            let servers = s
                .servers
                .iter()
                .map(|n| {
                    let (idx, srv) = server_of[n.as_str()];
                    (
                        ids.servers[idx],
                        site_of[srv.site.as_str()],
                        srv.portion,
                        srv.agent_distance,
                        srv.preference,
                    )
                })
                .collect();
            Ok(ServicePlan {
                id: ids.services[i],
                name: s.name.clone(),
                policy,
                servers,
            })
        })
        .collect()
}

/// What the whole computation produced.
pub struct Computed {
    pub tables: Vec<(u32, String, Table)>,
    /// Client prefixes considered.
    pub prefixes: usize,
    /// Those prefixes, in sweep order (kept for incremental recomputation).
    pub all: Vec<IpNet>,
    pub seconds: f64,
}

#[derive(Serialize)]
pub struct TableSummary {
    pub service: String,
    pub entries: usize,
    pub saved: usize,
}

impl Computed {
    /// Refuses a result the kernel's tables cannot hold (checked before anything is written).
    pub fn fits(&self) -> Result<()> {
        let (mut v4, mut v6) = (0usize, 0usize);
        for (_, _, t) in &self.tables {
            for (p, _) in &t.entries {
                if matches!(p, IpNet::V4(_)) {
                    v4 += 1;
                } else {
                    v6 += 1;
                }
            }
        }
        let max = director_common::maps::MAX_DECISIONS as usize;
        if v4 > max || v6 > max {
            anyhow::bail!("{v4} IPv4 and {v6} IPv6 decision entries: the kernel's tables hold {max} per family");
        }
        Ok(())
    }

    pub fn summary(&self) -> Vec<TableSummary> {
        self.tables
            .iter()
            .map(|(_, n, t)| TableSummary {
                service: n.clone(),
                entries: t.entries.len(),
                saved: t.saved,
            })
            .collect()
    }
}

/// A site's view of one client prefix.
#[derive(Clone, Copy, Default)]
struct SiteView<'a> {
    route: Option<&'a Route>,
    rtt: Option<f64>,
    geo: Option<f64>,
}

fn metrics(site: &SiteData, v: &SiteView, agent_distance: u32, preference: u32) -> Metrics {
    Metrics {
        ext: v.route.map(|r| r.path_len),
        int: v.route.and_then(|r| site.igp.get(&r.next_hop).copied()),
        ser: Some(agent_distance),
        rtt: v.rtt,
        med: v.route.map(engine::med_key),
        geo: v.geo,
        admin: Some(preference),
    }
}

fn candidates(plan: &ServicePlan, data: &Data, views: &[SiteView], out: &mut Vec<Candidate>) {
    out.clear();
    for &(server, site, portion, agent, pref) in &plan.servers {
        out.push(Candidate {
            server,
            portion,
            metrics: metrics(&data.sites[site], &views[site], agent, pref),
        });
    }
}

/// Every prefix any source knows, plus the two defaults, in sweep order.
fn all_prefixes(data: &Data) -> Vec<IpNet> {
    let mut all: Vec<IpNet> = Vec::with_capacity(
        data.locations.len() + data.sites.iter().map(|s| s.routes.len()).sum::<usize>(),
    );
    all.push("0.0.0.0/0".parse().unwrap());
    all.push("::/0".parse().unwrap());
    all.extend(data.locations.iter().map(|e| e.0));
    for s in &data.sites {
        all.extend(s.routes.iter().map(|e| e.0));
        all.extend(s.rtt.iter().map(|e| e.0));
    }
    all.sort_unstable_by_key(sort_key);
    all.dedup();
    all
}

pub fn compute(cfg: &Config, data: &Data, ids: &Ids) -> Result<Computed> {
    let start = Instant::now();
    let plans = plans(cfg, ids)?;
    let prefixes = all_prefixes(data);
    let mut routes: Vec<Sweep<Route>> = data.sites.iter().map(|s| Sweep::new(&s.routes)).collect();
    let mut rtts: Vec<Sweep<f64>> = data.sites.iter().map(|s| Sweep::new(&s.rtt)).collect();
    let mut locs = Sweep::new(&data.locations);
    let mut out: Vec<Compressor> = plans.iter().map(|_| Compressor::default()).collect();
    let mut views = vec![SiteView::default(); data.sites.len()];
    let mut cands = Vec::with_capacity(8);
    let mut ranking = Ranking::new();
    for p in &prefixes {
        let loc = locs.at(p);
        for (i, site) in data.sites.iter().enumerate() {
            views[i] = SiteView {
                route: routes[i].at(p),
                rtt: rtts[i].at(p).copied(),
                geo: loc.and_then(|l| data.geo_km(site, l)),
            };
        }
        for (plan, c) in plans.iter().zip(out.iter_mut()) {
            candidates(plan, data, &views, &mut cands);
            let d: Decision = engine::decide(&plan.policy, &cands, p.prefix_len(), &mut ranking);
            c.push(*p, d);
        }
    }
    let tables = plans
        .iter()
        .zip(out)
        .map(|(p, c)| (p.id, p.name.clone(), c.finish()))
        .collect();
    Ok(Computed {
        tables,
        prefixes: prefixes.len(),
        all: prefixes,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// Decisions for the prefixes under `root` only, after an input changed there. Each
/// source is matched by direct longest-prefix lookup, so this is for small subtrees.
/// Returns the new entries of `root`'s subtree for each service, compressed against what
/// covers `root`, or None when `root` is not a prefix the full computation knew.
pub fn subtree(
    plans: &[ServicePlan],
    data: &Data,
    all: &[IpNet],
    root: &IpNet,
    limit: usize,
) -> Option<Vec<Vec<(IpNet, Decision)>>> {
    let start = all.binary_search_by_key(&sort_key(root), sort_key).ok()?;
    let end = start
        + all[start..]
            .iter()
            .take_while(|p| root.contains(*p))
            .count();
    if end - start > limit {
        return None;
    }
    let mut views = vec![SiteView::default(); data.sites.len()];
    let mut cands = Vec::with_capacity(8);
    let mut ranking = Ranking::new();
    let mut decide_at = |p: &IpNet, plan: &ServicePlan| -> Decision {
        let loc = sweep::lookup(&data.locations, p);
        for (i, site) in data.sites.iter().enumerate() {
            views[i] = SiteView {
                route: sweep::lookup(&site.routes, p),
                rtt: sweep::lookup(&site.rtt, p).copied(),
                geo: loc.and_then(|l| data.geo_km(site, l)),
            };
        }
        candidates(plan, data, &views, &mut cands);
        engine::decide(&plan.policy, &cands, p.prefix_len(), &mut ranking)
    };
    // What covers the subtree: the nearest prefix above `root` that the computation knew.
    let parent = (0..root.prefix_len()).rev().find_map(|len| {
        let q = IpNet::new(root.addr(), len).ok()?.trunc();
        all.binary_search_by_key(&sort_key(&q), sort_key)
            .ok()
            .map(|_| q)
    });
    let mut out = Vec::with_capacity(plans.len());
    for plan in plans {
        let mut c = Compressor::default();
        if let Some(q) = parent {
            c.seed(q, decide_at(&q, plan));
        }
        for p in &all[start..end] {
            c.push(*p, decide_at(p, plan));
        }
        out.push(c.finish().entries);
    }
    Some(out)
}

/// The most specific prefix of a sorted source that holds `addr` (for explain).
fn lookup<'a, V>(source: &'a [(IpNet, V)], addr: IpAddr) -> Option<&'a (IpNet, V)> {
    source
        .iter()
        .filter(|(n, _)| n.contains(&addr))
        .max_by_key(|(n, _)| n.prefix_len())
}

#[derive(Serialize)]
pub struct Explained {
    pub service: String,
    pub client: IpAddr,
    /// Per server: its site and the data behind its metrics.
    pub servers: Vec<ServerData>,
    pub sort: engine::Explanation,
    #[serde(skip)]
    names: HashMap<u16, String>,
}

#[derive(Serialize)]
pub struct ServerData {
    pub server: String,
    pub site: String,
    pub bgp_prefix: Option<String>,
    pub location_prefix: Option<String>,
    pub rtt_prefix: Option<String>,
    pub metrics: String,
}

impl std::fmt::Display for Explained {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{} for {}", self.service, self.client)?;
        for s in &self.servers {
            writeln!(
                f,
                "  {:<12} site {:<8} bgp {:<20} location {:<20} rtt {:<20}",
                s.server,
                s.site,
                s.bgp_prefix.as_deref().unwrap_or("-"),
                s.location_prefix.as_deref().unwrap_or("-"),
                s.rtt_prefix.as_deref().unwrap_or("-")
            )?;
        }
        let names = &self.names;
        write!(
            f,
            "{}",
            self.sort
                .table(&|id| names.get(&id).cloned().unwrap_or_else(|| format!("#{id}")))
        )
    }
}

/// Every metric of every server of `service` for the client `addr`, the sort's levels, and
/// why the winners won.
pub fn explain(cfg: &Config, data: &Data, service: &str, addr: IpAddr) -> Result<Explained> {
    let plans = plans(cfg, &Ids::positional(cfg))?;
    let wire = director_common::name::encode(service)
        .map_err(|e| anyhow::anyhow!("bad DNS name {service:?}: {e}"))?;
    let plan = plans
        .iter()
        .find(|p| director_common::name::encode(&p.name).is_ok_and(|w| w == wire))
        .with_context(|| format!("no service {service:?} in the config"))?;
    let loc = lookup(&data.locations, addr);
    // Per site: the most specific route and RTT prefixes holding the client.
    let found: Vec<_> = data
        .sites
        .iter()
        .map(|s| (lookup(&s.routes, addr), lookup(&s.rtt, addr)))
        .collect();
    let views: Vec<SiteView> = data
        .sites
        .iter()
        .zip(&found)
        .map(|(site, (route, rtt))| SiteView {
            route: route.map(|r| &r.1),
            rtt: rtt.map(|r| r.1),
            geo: loc.and_then(|l| data.geo_km(site, &l.1)),
        })
        .collect();
    let mut cands = Vec::new();
    candidates(plan, data, &views, &mut cands);
    let mut servers = Vec::new();
    for (&(server, site, ..), c) in plan.servers.iter().zip(&cands) {
        let (route, rtt) = found[site];
        servers.push(ServerData {
            server: cfg.servers[server as usize - 1].name.clone(),
            site: cfg.sites[site].name.clone(),
            bgp_prefix: route.map(|r| r.0.to_string()),
            location_prefix: loc.map(|l| match &l.1 {
                Location::Point(p) => format!("{} ({:.2},{:.2})", l.0, p.lat, p.lon),
                Location::Named(n) => format!("{} ({n})", l.0),
            }),
            rtt_prefix: rtt.map(|r| format!("{} ({} ms)", r.0, r.1)),
            metrics: format!("{:?}", c.metrics),
        });
    }
    let names = plan
        .servers
        .iter()
        .map(|&(id, ..)| (id, cfg.servers[id as usize - 1].name.clone()))
        .collect();
    Ok(Explained {
        service: plan.name.clone(),
        client: addr,
        servers,
        sort: engine::explain(&plan.policy, &cands),
        names,
    })
}
