//! `explain`: for one client and service, every server's data and metric values with where
//! each came from, the engine's sort replayed level by level and the kernel's pick among
//! the winners, as the [`report::Explain`] document, with server names where the engine
//! speaks of candidate indexes.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::{anyhow, Context, Result};
use director_common::maps::{Decision, MAX_CANDIDATES};
use director_common::{name, select};

use crate::config::Config;
use crate::data::Data;
use crate::decide::{candidates, plans, Ids, SiteView};
use crate::engine::{self, Explanation, Metric, Metrics, Rtt};
use crate::inputs;
use crate::model::{IpNet, Location};
use crate::prefix::order::sort_key;
use crate::prefix::sweep::{covering, host};
use crate::report;
use director_common::select::Mode;

pub fn explain(cfg: &Config, data: &Data, service: &str, addr: IpAddr) -> Result<report::Explain> {
    let plans = plans(cfg, &Ids::positional(cfg), &Default::default())?;
    let wire = name::encode(service).map_err(|e| anyhow!("bad DNS name {service:?}: {e}"))?;
    let plan = plans
        .iter()
        .find(|p| name::encode(&p.name).is_ok_and(|w| w == wire))
        .with_context(|| format!("no service {service:?} in the config"))?;
    let client = host(addr);
    let loc = covering(&data.locations, &client);
    // Per site: the most specific route and RTT prefixes holding the client.
    let found: Vec<_> = data
        .sites
        .iter()
        .map(|s| (covering(&s.routes, &client), covering(&s.rtt, &client)))
        .collect();
    let views: Vec<SiteView<'_>> = data
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
    // Positional ids: server id `n` is the config's server `n - 1`.
    let server_name = |id: u16| cfg.servers[usize::from(id) - 1].name.clone();
    let location = loc.map(|(prefix, l)| {
        let file = location_file(cfg, prefix)?;
        Ok::<_, anyhow::Error>(match l {
            Location::Point(p) => report::ClientLocation {
                prefix: *prefix,
                lat: Some(p.lat),
                lon: Some(p.lon),
                node: None,
                file,
            },
            Location::Named(n) => report::ClientLocation {
                prefix: *prefix,
                lat: None,
                lon: None,
                node: Some(n.clone()),
                file,
            },
        })
    });
    let location = location.transpose()?;
    // Which file each measurement came from: every RTT file read once, here.
    let rtt_files = cfg
        .rtt
        .files
        .iter()
        .map(|f| Ok((f, inputs::csv::load_rtt(f)?)))
        .collect::<Result<Vec<_>>>()?;
    let servers = plan
        .servers
        .iter()
        .zip(&cands)
        .map(|(s, c)| {
            let (route, rtt) = found[s.site];
            let site = &cfg.sites[s.site];
            report::ExplainServer {
                server: server_name(s.id),
                site: site.name.clone(),
                bgp: route.map(|(prefix, r)| report::BgpSource {
                    prefix: *prefix,
                    files: site.bgp.clone(),
                    next_hop: r.next_hop,
                    exit_as: r.neighbor_as,
                    site_as: site.asn.unwrap_or(r.peer_as),
                    as_path_len: r.path_len,
                    med: r.med,
                    router: data.sites[s.site].bmp_router.clone(),
                }),
                location: location.clone(),
                rtt: rtt.map(|&(prefix, rtt)| report::RttMeasurement {
                    prefix,
                    ms: rtt.ms(),
                    file: rtt_file(&rtt_files, &site.name, &prefix),
                    agent: rtt_agent(&data.sites[s.site].rtt_live, &prefix),
                }),
                portion: c.portion,
                metrics: metric_values(&c.metrics),
            }
        })
        .collect();
    let replay = engine::explain(&plan.policy, &cands);
    let decision = engine::decide(&plan.policy, &cands, 0, &mut engine::Ranking::new());
    let svc = cfg
        .services
        .iter()
        .find(|s| s.name.trim_end_matches('.') == plan.name.trim_end_matches('.'));
    Ok(report::Explain {
        // How the service is reached (VIPs, DNS) is not the sort's: director-ctl adds it.
        vips: Vec::new(),
        mode: None,
        dns: true,
        replicas: Vec::new(),
        version: report::VERSION,
        service: plan.name.clone(),
        client: addr,
        select: plan.select,
        servers,
        pick: pick(&replay, plan.select, &decision, &wire, addr, &server_name),
        sort: sort(&replay, &server_name),
        portion_auto: svc.is_some_and(|s| s.portion.auto),
    })
}

/// The operator's locations file when it holds `prefix` (it wins over the database), else
/// the database.
fn location_file(cfg: &Config, prefix: &IpNet) -> Result<Option<PathBuf>> {
    if let Some(f) = &cfg.geo.locations {
        if inputs::csv::load_locations(f)?
            .iter()
            .any(|(p, _)| p == prefix)
        {
            return Ok(Some(f.clone()));
        }
    }
    Ok(cfg.geo.database.clone())
}

/// The last RTT file that measures `prefix` from `site` (the last one wins when loading).
/// An RTT file and its lines (prefix, site, rtt).
type RttFile<'a> = (&'a PathBuf, Vec<(IpNet, String, Rtt)>);

fn rtt_file(files: &[RttFile<'_>], site: &str, prefix: &IpNet) -> Option<PathBuf> {
    files
        .iter()
        .rev()
        .find(|(_, lines)| lines.iter().any(|(p, s, _)| p == prefix && s == site))
        .map(|(f, _)| (*f).clone())
}

/// The agent behind a site's live measurement of `prefix`, if it is live.
fn rtt_agent(
    live: &[(IpNet, crate::live::rtt::Source)],
    prefix: &IpNet,
) -> Option<report::RttAgent> {
    let i = live
        .binary_search_by_key(&sort_key(prefix), |e| sort_key(&e.0))
        .ok()?;
    let src = &live[i].1;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    Some(report::RttAgent {
        url: src.agent.clone(),
        measured: src.measured.clone(),
        samples: src.samples,
        probes: src.probes,
        window_end_ms: src.window_end_ms,
        age_s: now.saturating_sub(src.taken_ms) as f64 / 1e3,
    })
}

fn metric_values(m: &Metrics) -> report::MetricValues {
    report::MetricValues {
        ext: m.ext,
        int: m.int,
        ser: m.ser,
        rtt: m.rtt.map(Rtt::ms),
        geo: m.geo,
        admin: m.admin,
    }
}

/// How the kernel picks among tier 0 (the decision's primaries), with every server's odds
/// and, for a hash, what this client or name gets.
fn pick(
    e: &Explanation,
    mode: Mode,
    d: &Decision,
    wire: &[u8],
    addr: IpAddr,
    name_of: &dyn Fn(u16) -> String,
) -> report::Pick {
    let primary = &d.servers[..usize::from(d.primary).min(MAX_CANDIDATES)];
    let weights = &d.weights[..primary.len()];
    let total: u32 = weights.iter().map(|&w| u32::from(w)).sum();
    // The kernel's rule: by weight, or evenly when no weight is above 0.
    let odds = primary
        .iter()
        .zip(weights)
        .map(|(&s, &w)| report::Odds {
            server: name_of(s),
            share: if total == 0 {
                1.0 / primary.len() as f64
            } else {
                f64::from(w) / f64::from(total)
            },
        })
        .collect();
    let rule = match (primary.len(), mode, e.draw) {
        (1, _, _) => report::PickRule::Single,
        (_, Mode::Random, Some(Metric::Random)) => report::PickRule::UniformDraw,
        (_, Mode::Random, _) => report::PickRule::PortionDraw,
        (_, Mode::Client, _) => report::PickRule::ClientHash,
        (_, Mode::Name, _) => report::PickRule::NameHash,
    };
    let key = match mode {
        Mode::Random => None,
        Mode::Client => {
            let mut a = [0u8; 16];
            match addr {
                IpAddr::V4(v4) => a[..4].copy_from_slice(&v4.octets()),
                IpAddr::V6(v6) => a = v6.octets(),
            }
            Some(select::client_key(&a))
        }
        Mode::Name => Some(select::name_key(name::hash(&wire.to_ascii_lowercase()))),
    };
    let this_client = key.and_then(|key| {
        let mut got = None;
        select::select(d, key, 1, |_| true, |s| got.get_or_insert(s) == &s);
        got.map(name_of)
    });
    report::Pick {
        rule,
        odds,
        this_client,
    }
}

/// The engine's replay with server names.
pub fn sort(e: &Explanation, name: &dyn Fn(u16) -> String) -> report::Sort {
    report::Sort {
        draw: e.draw,
        rtt_tolerance_percent: e.rtt_tolerance_percent,
        med: e.med,
        levels: e
            .levels
            .iter()
            .map(|l| report::Level {
                priority: l.priority,
                metrics: l.metrics.clone(),
            })
            .collect(),
        tiers: e
            .tiers
            .iter()
            .map(|t| report::Tier {
                tier: t.tier,
                med: t.med.as_ref().map(|m| {
                    m.rows
                        .iter()
                        .map(|r| report::MedRow {
                            server: name(r.server),
                            site_as: r.route.map(|m| m.site_as),
                            exit_point: r.route.map(|m| m.exit),
                            med: r.route.map(|m| m.med),
                            result: if r.survived {
                                report::RowResult::Kept
                            } else {
                                report::RowResult::Out
                            },
                        })
                        .collect()
                }),
                steps: t.steps.iter().map(|s| step(s, name)).collect(),
                chosen: t
                    .chosen
                    .iter()
                    .map(|c| report::Chosen {
                        server: name(c.server),
                        portion: c.portion,
                    })
                    .collect(),
            })
            .collect(),
    }
}

fn step(s: &engine::Step, name: &dyn Fn(u16) -> String) -> report::Step {
    report::Step {
        priority: s.priority,
        metrics: s.metrics.clone(),
        outcome: s.outcome,
        rtt_lowest: s.rtt_lowest.map(Rtt::ms),
        rtt_limit: s.rtt_limit.map(Rtt::ms),
        rows: s
            .rows
            .iter()
            .map(|r| {
                let values: BTreeMap<_, _> = s
                    .metrics
                    .iter()
                    .zip(&r.values)
                    .map(|(t, v)| (t.metric, *v))
                    .collect();
                report::Row {
                    server: name(r.server),
                    values,
                    key: r.key,
                    result: match (r.survived, r.key.is_none()) {
                        (true, _) => report::RowResult::Kept,
                        (false, true) => report::RowResult::OutNoData,
                        (false, false) => report::RowResult::Out,
                    },
                }
            })
            .collect(),
    }
}
