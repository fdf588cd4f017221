//! Per client prefix and service: every candidate server's metrics, the engine's sort, a
//! decision; compressed into kernel entries as the prefixes go by in order.
//!
//! The prefixes considered are those of the sites' BGP tables, of the GeoIP data and the
//! operator's locations, and of the RTT data, plus 0.0.0.0/0 and ::/0 (so every client has
//! a decision). Each source is matched to a prefix by longest-prefix match.

use std::{
    collections::{HashMap, HashSet},
    time::Instant,
};

use anyhow::{bail, Context, Result};
use director_common::maps::{Decision, MAX_DECISIONS};
use director_common::select::Mode;
use ipnet::IpNet;

use crate::compile::{Compressor, Interned, Table};
use crate::config::{self, Config};
use crate::data::{Data, SiteData};
use crate::engine::{self, Candidate, MedRoute, Metrics, Policy, Ranking, Rtt};
use crate::minimal;
use crate::model::{Location, Route};
use crate::prefix::order::sort_key;
use crate::prefix::sweep::{self, Sweep};
use crate::report;

/// One service's sort settings and servers, resolved against the config.
pub struct ServicePlan {
    /// Kernel id (1-based position in the config).
    pub id: u32,
    pub name: String,
    pub policy: Policy,
    /// How the kernel picks among the final equals.
    pub select: Mode,
    /// The servers sorted: the service's servers that are up (all of them when none is).
    pub servers: Vec<PlannedServer>,
}

/// A server of a service, with what the sort needs of its config.
#[derive(Clone, Copy, Debug)]
pub struct PlannedServer {
    /// Kernel id.
    pub id: u16,
    /// Index of its site in the config (and in `Data::sites`).
    pub site: usize,
    pub portion: u16,
    pub agent_distance: u32,
    pub preference: u32,
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

/// The servers (kernel ids) that get no new clients: for every service (set down or
/// drained), or for one service (its health checks).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unavailable {
    pub servers: HashSet<u16>,
    /// By service id.
    pub health: HashMap<u32, HashSet<u16>>,
    /// `portion = "auto"`: each (service, server)'s portion now (from measured load).
    pub portions: std::collections::BTreeMap<(u32, u16), u16>,
}

impl Unavailable {
    pub fn contains(&self, service: u32, server: u16) -> bool {
        self.servers.contains(&server)
            || self
                .health
                .get(&service)
                .is_some_and(|s| s.contains(&server))
    }
}

/// The services' plans. Unavailable servers are left out of the sort, so that the
/// decisions are DistributedDirector's sort over the servers still available; a service
/// whose servers are all unavailable keeps them all (the kernel skips them anyway).
pub fn plans(cfg: &Config, ids: &Ids, down: &Unavailable) -> Result<Vec<ServicePlan>> {
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
            let at = || format!("{}: [[service]] {:?}", cfg.path.display(), s.name);
            let policy = s.policy(cfg).with_context(at)?;
            let select = s.select_mode(&policy).with_context(at)?;
            let mut servers: Vec<PlannedServer> = s
                .servers
                .iter()
                .map(|n| {
                    let (idx, srv) = server_of[n.as_str()];
                    PlannedServer {
                        id: ids.servers[idx],
                        site: site_of[srv.site.as_str()],
                        portion: if s.portion.auto {
                            down.portions
                                .get(&(ids.services[i], ids.servers[idx]))
                                .copied()
                                .unwrap_or(config::AUTO_PORTION_START)
                        } else {
                            s.portion.each.get(n).copied().unwrap_or(srv.portion)
                        },
                        agent_distance: srv.agent_distance,
                        preference: s.admin.get(n).copied().unwrap_or(srv.preference),
                    }
                })
                .collect();
            let service = ids.services[i];
            if servers.iter().any(|p| !down.contains(service, p.id)) {
                servers.retain(|p| !down.contains(service, p.id));
            }
            Ok(ServicePlan {
                id: service,
                name: s.name.clone(),
                policy,
                select,
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
        let max = MAX_DECISIONS as usize;
        if v4 > max || v6 > max {
            bail!(
                "{v4} IPv4 and {v6} IPv6 decision entries: the kernel's tables hold {max} per \
                 family"
            );
        }
        Ok(())
    }

    pub fn summary(&self) -> Vec<report::TableSummary> {
        self.tables
            .iter()
            .map(|(_, n, t)| report::TableSummary {
                service: n.clone(),
                entries: t.entries.len(),
                saved: t.saved,
            })
            .collect()
    }
}

/// A site's view of one client prefix.
#[derive(Clone, Copy, Default)]
pub(super) struct SiteView<'a> {
    pub(super) route: Option<&'a Route>,
    pub(super) rtt: Option<Rtt>,
    pub(super) geo: Option<f64>,
}

fn metrics(site: &SiteData, v: &SiteView<'_>, agent_distance: u32, preference: u32) -> Metrics {
    Metrics {
        ext: v.route.map(|r| r.path_len),
        int: v.route.and_then(|r| site.igp.get(&r.next_hop).copied()),
        ser: Some(agent_distance),
        rtt: v.rtt,
        med: v.route.map(|r| MedRoute {
            site_as: site.asn.unwrap_or(r.peer_as),
            exit: r.next_hop,
            med: r.med.unwrap_or(0),
        }),
        geo: v.geo,
        admin: Some(preference),
    }
}

pub(super) fn candidates(
    plan: &ServicePlan,
    data: &Data,
    views: &[SiteView<'_>],
    out: &mut Vec<Candidate>,
) {
    out.clear();
    for s in &plan.servers {
        let site = &data.sites[s.site];
        out.push(Candidate {
            server: s.id,
            portion: s.portion,
            metrics: metrics(site, &views[s.site], s.agent_distance, s.preference),
        });
    }
}

/// Every prefix any source knows, plus the two defaults, in sweep order. Each source is
/// sorted already, so they are merged (a sort of the ~4 M prefixes of a full-scale
/// config took a tenth of a full pass).
fn all_prefixes(data: &Data) -> Vec<IpNet> {
    let defaults: [IpNet; 2] = ["0.0.0.0/0".parse().unwrap(), "::/0".parse().unwrap()];
    let mut sources: Vec<Box<dyn Iterator<Item = IpNet> + '_>> = vec![
        Box::new(defaults.into_iter()),
        Box::new(data.locations.iter().map(|e| e.0)),
    ];
    for s in &data.sites {
        sources.push(Box::new(s.routes.iter().map(|e| e.0)));
        sources.push(Box::new(s.rtt.iter().map(|e| e.0)));
    }
    merge_sorted(sources)
}

/// The sources (each in sweep order) as one list in sweep order without repeats.
fn merge_sorted<'a>(sources: Vec<Box<dyn Iterator<Item = IpNet> + 'a>>) -> Vec<IpNet> {
    type Key = (u8, u128, u8);
    let most = sources.iter().map(|s| s.size_hint().0).max().unwrap_or(0);
    let mut out: Vec<IpNet> = Vec::with_capacity(most);
    let mut heads: Vec<(Key, IpNet, Box<dyn Iterator<Item = IpNet> + 'a>)> = sources
        .into_iter()
        .filter_map(|mut s| {
            let p = s.next()?;
            Some((sort_key(&p), p, s))
        })
        .collect();
    let mut last: Option<Key> = None;
    while let Some(min) = heads.iter().map(|h| h.0).min() {
        // A prefix twice in one source is still taken once.
        let mut taken = last == Some(min);
        last = Some(min);
        heads.retain_mut(|(k, p, rest)| {
            if *k != min {
                return true;
            }
            if !taken {
                out.push(*p);
                taken = true;
            }
            let Some(next) = rest.next() else {
                return false;
            };
            (*k, *p) = (sort_key(&next), next);
            true
        });
    }
    out
}

/// Decisions for every prefix and service, sorting only the servers not in `down`.
pub fn compute(cfg: &Config, data: &Data, ids: &Ids, down: &Unavailable) -> Result<Computed> {
    let threads = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    compute_in(cfg, data, ids, down, threads)
}

/// As [`compute`], the prefixes cut into `runs` consecutive runs decided side by side, one
/// thread each (the decisions are most of the time at full scale). The result does not
/// depend on `runs`.
pub fn compute_in(
    cfg: &Config,
    data: &Data,
    ids: &Ids,
    down: &Unavailable,
    runs: usize,
) -> Result<Computed> {
    let start = Instant::now();
    let plans = plans(cfg, ids, down)?;
    let prefixes = all_prefixes(data);
    let out = decide_all(&plans, data, &prefixes, runs);
    let finished = minimize_all(out);
    let tables = plans
        .iter()
        .zip(finished)
        .map(|(p, t)| Ok((p.id, p.name.clone(), t?)))
        .collect::<Result<_>>()?;
    Ok(Computed {
        tables,
        prefixes: prefixes.len(),
        all: prefixes,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// Every service's minimal table. The construction works on one family of one service at
/// a time, so those parts are shared among as many threads as there are CPUs (not more:
/// each holds its construction while it works), largest first.
fn minimize_all(out: Vec<Compressor>) -> Vec<Result<Table>> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    // Each service's interning is a pass over its entries of its own: side by side.
    let interned: Vec<Interned> = std::thread::scope(|scope| {
        let handles: Vec<_> = out
            .into_iter()
            .map(|c| scope.spawn(move || c.intern()))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    let mut parts: Vec<(usize, usize)> =
        (0..interned.len()).flat_map(|s| [(s, 0), (s, 1)]).collect();
    parts.sort_by_key(|&(s, f)| std::cmp::Reverse(interned[s].part_len(f)));
    /// A family's part of a service's table, once a thread has built it.
    type Built = Option<Result<Vec<minimal::Entry>>>;
    let built: Mutex<Vec<[Built; 2]>> = Mutex::new(interned.iter().map(|_| [None, None]).collect());
    let next = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    std::thread::scope(|scope| {
        for _ in 0..threads.min(parts.len()) {
            scope.spawn(|| {
                while let Some(&(s, f)) = parts.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let r = interned[s].minimize(f);
                    if let Ok(mut b) = built.lock() {
                        b[s][f] = Some(r);
                    }
                }
            });
        }
    });
    let built = built
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    interned
        .into_iter()
        .zip(built)
        .map(|(i, [v4, v6])| {
            let missing = || anyhow::anyhow!("internal error: a part of the table was not built");
            Ok(i.assemble([v4.ok_or_else(missing)??, v6.ok_or_else(missing)??]))
        })
        .collect()
}

/// Every service's compressor over all `prefixes`, decided in `runs` consecutive runs side
/// by side and joined in order.
fn decide_all(
    plans: &[ServicePlan],
    data: &Data,
    prefixes: &[IpNet],
    runs: usize,
) -> Vec<Compressor> {
    let runs = runs.clamp(1, 64);
    let bounds: Vec<usize> = (0..=runs).map(|i| i * prefixes.len() / runs).collect();
    let pieces: Vec<Vec<Compressor>> = std::thread::scope(|scope| {
        let handles: Vec<_> = bounds
            .windows(2)
            .map(|w| {
                let (from, to) = (w[0], w[1]);
                scope.spawn(move || decide_run(plans, data, prefixes, from, to))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    let mut out: Vec<Compressor> = plans.iter().map(|_| Compressor::default()).collect();
    for piece in pieces {
        for (all, run) in out.iter_mut().zip(piece) {
            all.append(run);
        }
    }
    out
}

/// Each service's compressor over `prefixes[from..to]`, as one pass over all prefixes
/// would leave it for them: it starts from the prefixes before `from` that cover
/// `prefixes[from]` (decided again here, not written), which is all a pass keeps of what
/// came before (everything else before `from` lies outside what follows).
fn decide_run(
    plans: &[ServicePlan],
    data: &Data,
    prefixes: &[IpNet],
    from: usize,
    to: usize,
) -> Vec<Compressor> {
    let mut routes: Vec<Sweep<'_, Route>> =
        data.sites.iter().map(|s| Sweep::new(&s.routes)).collect();
    let mut rtts: Vec<Sweep<'_, Rtt>> = data.sites.iter().map(|s| Sweep::new(&s.rtt)).collect();
    let mut locs = Sweep::new(&data.locations);
    let mut out: Vec<Compressor> = plans.iter().map(|_| Compressor::default()).collect();
    let mut views = vec![SiteView::default(); data.sites.len()];
    let mut cands = Vec::with_capacity(8);
    let mut ranking = Ranking::new();
    let covering = prefixes
        .get(from)
        .filter(|_| from < to)
        .map_or_else(Vec::new, |p| covering_before(&prefixes[..from], p));
    // A prefix that sees what the one before it saw (GeoIP networks of one place under
    // one route) takes its decisions without sorting again; distances come from a cache
    // of the places seen lately.
    let mut last_loc: Option<&Location> = None;
    let mut geo: Vec<Option<f64>> = vec![None; data.sites.len()];
    let mut distances = Distances::new(data.sites.len());
    let mut last_views: Option<Vec<SiteView<'_>>> = None;
    let mut decided: Vec<Decision> = vec![Decision::default(); plans.len()];
    let seeds = covering.iter().map(|p| (p, true));
    for (p, seed) in seeds.chain(prefixes[from..to].iter().map(|p| (p, false))) {
        let loc = locs.at(p);
        if !same_ref(loc, last_loc) {
            distances.of(data, loc, &mut geo);
            last_loc = loc;
        }
        for (i, v) in views.iter_mut().enumerate() {
            *v = SiteView {
                route: routes[i].at(p),
                rtt: rtts[i].at(p).copied(),
                geo: geo[i],
            };
        }
        let again = last_views.as_ref().is_some_and(|l| same_views(l, &views));
        for ((plan, c), d) in plans.iter().zip(out.iter_mut()).zip(decided.iter_mut()) {
            if again {
                d.prefix_len = p.prefix_len();
            } else {
                candidates(plan, data, &views, &mut cands);
                *d = engine::decide(&plan.policy, &cands, p.prefix_len(), &mut ranking);
            }
            if seed {
                c.seed(*p, *d);
            } else {
                c.push(*p, *d);
            }
        }
        match &mut last_views {
            Some(l) if !again => l.copy_from_slice(&views),
            Some(_) => {}
            None => last_views = Some(views.clone()),
        }
    }
    out
}

/// Each site's `geo` metric for the client locations seen lately, in a direct-mapped cache:
/// a GeoIP database has far fewer places than networks (and neighbouring networks are
/// seldom of one place), and each distance is a haversine.
struct Distances {
    sites: usize,
    keys: Vec<Option<(u64, u64)>>,
    km: Vec<Option<f64>>,
}

impl Distances {
    const SLOTS: usize = 1 << 14;

    fn new(sites: usize) -> Distances {
        Distances {
            sites,
            keys: vec![None; Self::SLOTS],
            km: vec![None; Self::SLOTS * sites],
        }
    }

    /// Fills `out` (one per site) with the distances to `loc`.
    fn of(&mut self, data: &Data, loc: Option<&Location>, out: &mut [Option<f64>]) {
        let compute = |out: &mut [Option<f64>]| {
            for (g, site) in out.iter_mut().zip(&data.sites) {
                *g = loc.and_then(|l| data.geo_km(site, l));
            }
        };
        let Some(Location::Point(p)) = loc else {
            return compute(out);
        };
        let key = (p.lat.to_bits(), p.lon.to_bits());
        let mix = (key.0 ^ key.1.rotate_left(29)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let slot = (mix >> 50) as usize & (Self::SLOTS - 1);
        let km = &mut self.km[slot * self.sites..(slot + 1) * self.sites];
        if self.keys[slot] == Some(key) {
            out.copy_from_slice(km);
        } else {
            compute(out);
            km.copy_from_slice(out);
            self.keys[slot] = Some(key);
        }
    }
}

/// The same entry of a source (not merely an equal one).
fn same_ref<T>(a: Option<&T>, b: Option<&T>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => std::ptr::eq(a, b),
        (None, None) => true,
        _ => false,
    }
}

/// Whether two prefixes' views give every candidate the same metrics: the same route
/// entry, RTT and distance at every site.
fn same_views(a: &[SiteView<'_>], b: &[SiteView<'_>]) -> bool {
    a.iter().zip(b).all(|(a, b)| {
        same_ref(a.route, b.route)
            && a.rtt == b.rtt
            && a.geo.map(f64::to_bits) == b.geo.map(f64::to_bits)
    })
}

/// The prefixes of `before` (sorted) that cover `p`, in sweep order.
fn covering_before(before: &[IpNet], p: &IpNet) -> Vec<IpNet> {
    (0..p.prefix_len())
        .filter_map(|len| IpNet::new(p.addr(), len).ok().map(|q| q.trunc()))
        .filter(|q| before.binary_search_by_key(&sort_key(q), sort_key).is_ok())
        .collect()
}

/// Decisions for the client networks under `root` (inclusive) only, after an input
/// changed there, per service; `root` must be one the full computation knew (None
/// otherwise, or when the subtree holds more than `limit` networks). Each source is matched
/// by direct longest-prefix lookup, so this is for small subtrees.
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
    let mut out = vec![Vec::with_capacity(end - start); plans.len()];
    for p in &all[start..end] {
        let loc = sweep::lookup(&data.locations, p);
        for (i, site) in data.sites.iter().enumerate() {
            views[i] = SiteView {
                route: sweep::lookup(&site.routes, p),
                rtt: sweep::lookup(&site.rtt, p).copied(),
                geo: loc.and_then(|l| data.geo_km(site, l)),
            };
        }
        for (plan, o) in plans.iter().zip(out.iter_mut()) {
            candidates(plan, data, &views, &mut cands);
            o.push((
                *p,
                engine::decide(&plan.policy, &cands, p.prefix_len(), &mut ranking),
            ));
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{GeoPoint, Location};
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// Three sites with a server each, and two services over all three servers.
    fn config() -> Config {
        let site = |name: &str| config::Site {
            name: name.into(),
            lat: None,
            lon: None,
            location: None,
            bgp: Vec::new(),
            bgp_peer: None,
            igp_cost: Default::default(),
            asn: None,
            bmp_router: None,
            bmp_peer: None,
            bmp_policy: None,
            capacity: None,
        };
        let server = |name: &str, site: &str| config::Server {
            name: name.into(),
            site: site.into(),
            preference: 0,
            portion: 0,
            agent_distance: 0,
        };
        let service = |name: &str, priority: &[(&str, u32)]| config::Service {
            name: name.into(),
            servers: vec!["a-1".into(), "b-1".into(), "c-1".into()],
            priority: priority.iter().map(|&(m, p)| (m.to_string(), p)).collect(),
            weights: Default::default(),
            rtt_tolerance: 10,
            med: false,
            select: None,
            admin: Default::default(),
            portion: Default::default(),
        };
        let c = Config {
            sites: vec![site("a"), site("b"), site("c")],
            servers: vec![server("a-1", "a"), server("b-1", "b"), server("c-1", "c")],
            services: vec![
                service("www.example.com", &[("rtt", 1), ("geo", 2)]),
                service("api.example.com", &[("geo", 1)]),
            ],
            ..Config::default()
        };
        c.validate().expect("the test config");
        c
    }

    /// Nested and neighbouring prefixes of both families, each once, in sweep order, with
    /// a value each.
    fn arb_prefixes<V: std::fmt::Debug + Clone>(
        value: impl Strategy<Value = V> + Clone,
    ) -> impl Strategy<Value = Vec<(IpNet, V)>> {
        // Few distinct high bits, so that prefixes nest and neighbour.
        let v4 = (0u32..16, 0u8..=32, value.clone()).prop_map(|(hi, len, v)| {
            let net = IpNet::new(std::net::Ipv4Addr::from(hi << 28 | hi << 20).into(), len)
                .map(|n| n.trunc());
            (net, v)
        });
        let v6 = (0u128..8, 0u8..=64, value).prop_map(|(hi, len, v)| {
            let net = IpNet::new(std::net::Ipv6Addr::from(hi << 122 | hi << 100).into(), len)
                .map(|n| n.trunc());
            (net, v)
        });
        proptest::collection::vec(prop_oneof![v4, v6], 0..60).prop_map(|v| {
            let m: BTreeMap<(u8, u128, u8), (IpNet, V)> = v
                .into_iter()
                .filter_map(|(n, v)| n.ok().map(|n| (sort_key(&n), (n, v))))
                .collect();
            m.into_values().collect()
        })
    }

    fn data(rtt: [Vec<(IpNet, u64)>; 3], locations: Vec<(IpNet, (i16, i16))>) -> Data {
        let points = [(50.0, 8.6), (38.9, -77.0), (1.35, 103.9)];
        Data {
            sites: rtt
                .into_iter()
                .zip(points)
                .map(|(r, (lat, lon))| SiteData {
                    routes: Vec::new(),
                    igp: HashMap::new(),
                    asn: None,
                    point: Some(GeoPoint { lat, lon }),
                    graph: None,
                    rtt: r.into_iter().map(|(p, ms)| (p, Rtt(ms))).collect(),
                    rtt_live: Vec::new(),
                    bmp_router: None,
                })
                .collect(),
            locations: locations
                .into_iter()
                .map(|(p, (lat, lon))| {
                    let point = GeoPoint {
                        lat: f64::from(lat % 90),
                        lon: f64::from(lon % 180),
                    };
                    (p, Location::Point(point))
                })
                .collect(),
            graph_points: Vec::new(),
            summary: report::Inputs::default(),
            load_time: std::time::Duration::ZERO,
        }
    }

    proptest! {
        /// Deciding the prefixes in several runs side by side gives exactly the tables one
        /// pass gives, wherever the runs are cut (a cut inside a prefix's subtree included).
        #[test]
        fn runs_side_by_side_give_what_one_pass_gives(
            rtt_a in arb_prefixes(1u64..400_000),
            rtt_b in arb_prefixes(1u64..400_000),
            rtt_c in arb_prefixes(1u64..400_000),
            locations in arb_prefixes((any::<i16>(), any::<i16>())),
            runs in 2usize..9,
        ) {
            let cfg = config();
            let ids = Ids::positional(&cfg);
            let d = data([rtt_a, rtt_b, rtt_c], locations);
            let one = compute_in(&cfg, &d, &ids, &Default::default(), 1).expect("one run");
            let many = compute_in(&cfg, &d, &ids, &Default::default(), runs).expect("runs");
            prop_assert_eq!(&one.all, &many.all);
            prop_assert_eq!(&one.tables, &many.tables);
            // What each run keeps before the minimal construction is what one pass keeps
            // (the construction alone would hide a run that kept more than it needs).
            let plans = plans(&cfg, &ids, &Default::default()).expect("plans");
            let whole = decide_all(&plans, &d, &one.all, 1);
            let parts = decide_all(&plans, &d, &one.all, runs);
            for (a, b) in whole.iter().zip(&parts) {
                prop_assert_eq!(a.kept(), b.kept());
            }
            // The parts built side by side make the table each service builds alone.
            for (c, (_, _, t)) in whole.into_iter().zip(&many.tables) {
                prop_assert_eq!(&c.finish().expect("a minimal table"), t);
            }
        }
    }

    proptest! {
        /// A full pass, which uses a neighbour's distances and decisions again when its
        /// views are the same, keeps what deciding every prefix on its own keeps; and its
        /// prefixes are every source's, merged, without repeats.
        #[test]
        fn a_pass_decides_each_prefix_as_it_would_alone(
            rtt_a in arb_prefixes(1u64..4),
            rtt_b in arb_prefixes(1u64..4),
            rtt_c in arb_prefixes(1u64..400_000),
            // Few places, so that neighbours often share one.
            locations in arb_prefixes((0i16..3, 0i16..3)),
        ) {
            let cfg = config();
            let ids = Ids::positional(&cfg);
            let d = data([rtt_a, rtt_b, rtt_c], locations);
            let all = all_prefixes(&d);
            let mut sorted: Vec<IpNet> = ["0.0.0.0/0", "::/0"]
                .iter()
                .map(|s| s.parse().expect("a prefix"))
                .chain(d.locations.iter().map(|e| e.0))
                .chain(d.sites.iter().flat_map(|s| s.routes.iter().map(|e| e.0)))
                .chain(d.sites.iter().flat_map(|s| s.rtt.iter().map(|e| e.0)))
                .collect();
            sorted.sort_unstable_by_key(sort_key);
            sorted.dedup();
            prop_assert_eq!(&all, &sorted);
            let plans = plans(&cfg, &ids, &Default::default()).expect("plans");
            let pass = decide_all(&plans, &d, &all, 1);
            let mut alone: Vec<Compressor> = plans.iter().map(|_| Compressor::default()).collect();
            for root in ["0.0.0.0/0", "::/0"] {
                let root: IpNet = root.parse().expect("a root");
                let each = subtree(&plans, &d, &all, &root, usize::MAX).expect("the root");
                for (c, decided) in alone.iter_mut().zip(each) {
                    for (p, dec) in decided {
                        c.push(p, dec);
                    }
                }
            }
            for (a, b) in pass.iter().zip(&alone) {
                prop_assert_eq!(a.kept(), b.kept());
            }
        }
    }

    #[test]
    fn the_prefixes_covering_one_are_found_in_order() {
        let mut all: Vec<IpNet> = [
            "0.0.0.0/0",
            "10.0.0.0/8",
            "10.1.0.0/16",
            "10.2.0.0/16",
            "11.0.0.0/8",
        ]
        .iter()
        .map(|s| s.parse().expect("a prefix"))
        .collect();
        all.sort_by_key(sort_key);
        let p: IpNet = "10.1.2.0/24".parse().expect("a prefix");
        let want: Vec<IpNet> = ["0.0.0.0/0", "10.0.0.0/8", "10.1.0.0/16"]
            .iter()
            .map(|s| s.parse().expect("a prefix"))
            .collect();
        assert_eq!(covering_before(&all, &p), want);
        assert!(covering_before(&all[..1], &"::/1".parse().expect("a prefix")).is_empty());
    }
}
