//! The inputs that change while `run` runs: BGP from the sites' routers over BMP ([`bgp`])
//! and RTT from the sites' agents ([`agents`]). They are kept beside what the files give
//! (a live route or measurement wins for its prefix; when it goes, the file's applies
//! again), and each change patches [`Data`] and names the prefixes under it, so that `run`
//! decides only those again.

pub mod agents;
pub mod bgp;
pub mod probe;
pub mod wake;

pub use wake::Wake;

use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context, Result};
use director_plan::compile::{replace_subtree, Diff};
use director_plan::config::Config;
use director_plan::data::Data;
use director_plan::decide::{plans, subtree, Computed, Ids, Unavailable};
use director_plan::engine::Rtt;
use director_plan::fleet::manifest::LiveSources;
use director_plan::live::patch;
use director_plan::live::rtt::{Merge, Settings, Source};
use director_plan::model::Route;
use director_plan::prefix::order::sort_key;
use director_plan::prefix::sweep::covering;
use ipnet::IpNet;

use crate::api::{Event, Log};

/// Changes closer together than this are taken together (a burst of withdrawals, a
/// flapping peer): one re-sort, at most this long after the first.
pub const DEBOUNCE: Duration = Duration::from_millis(100);

/// More changed prefixes than this are decided again in one full pass (a peer's whole
/// table; a subtree at a time would cost more).
pub const FULL_PASS: usize = 20_000;

/// Subtrees larger than this are decided in one full pass instead (a sweep is faster then).
pub const SUBTREE_LIMIT: usize = 20_000;

/// Decides `prefixes` (sorted) and what lies under them again into `computed`'s tables
/// (`data` already holds the change), and returns each table's difference, in table order.
/// An error (a subtree too large) leaves the tables as they were, for a full pass; a
/// prefix no source knew before (a new announcement) has joined the decided ones then.
pub fn decide_under(
    plan: &Config,
    data: &Data,
    ids: &Ids,
    down: &Unavailable,
    computed: &mut Computed,
    prefixes: &[IpNet],
) -> Result<Vec<Diff>> {
    let all = &mut computed.all;
    let new: Vec<(IpNet, Option<()>)> = prefixes
        .iter()
        .filter(|p| all.binary_search_by_key(&sort_key(p), sort_key).is_err())
        .map(|p| (*p, Some(())))
        .collect();
    if !new.is_empty() {
        let mut keyed: Vec<(IpNet, ())> = all.iter().map(|p| (*p, ())).collect();
        patch(&mut keyed, new);
        *all = keyed.into_iter().map(|e| e.0).collect();
        computed.prefixes = all.len();
    }
    let plans = plans(plan, ids, down)?;
    let mut roots: Vec<IpNet> = Vec::new();
    for p in prefixes {
        if !roots.last().is_some_and(|r| r.contains(p)) {
            roots.push(*p);
        }
    }
    // Every subtree first: one too large leaves the tables as they were.
    let fresh = roots
        .iter()
        .map(|root| {
            subtree(&plans, data, &computed.all, root, SUBTREE_LIMIT)
                .context("a changed prefix's subtree is too large")
        })
        .collect::<Result<Vec<_>>>()?;
    let mut diffs: Vec<Diff> = computed.tables.iter().map(|_| Diff::default()).collect();
    for (root, fresh) in roots.iter().zip(fresh) {
        for ((_, _, table), (new, d)) in computed
            .tables
            .iter_mut()
            .zip(fresh.iter().zip(diffs.iter_mut()))
        {
            let one = replace_subtree(table, root, new);
            d.put.extend(one.put);
            d.delete.extend(one.delete);
        }
    }
    Ok(diffs)
}

/// What one look at the live inputs changed.
#[derive(Debug, Default)]
pub struct Changes {
    /// Prefixes whose route or measurement changed at some site, sorted.
    pub prefixes: Vec<IpNet>,
    /// So many that every prefix is decided again.
    pub full: bool,
    pub bgp: usize,
    pub rtt: usize,
}

struct RttLive {
    merge: Merge,
    polled: Receiver<agents::Polled>,
    site_index: HashMap<String, usize>,
    /// Each site's live table as last published into the data, with where each value came
    /// from (for `explain`).
    tables: Vec<Vec<(IpNet, Rtt, Source)>>,
    /// Agents whose last poll failed (logged once until they answer again).
    failing: HashSet<String>,
    changed: bool,
    /// `[rtt] probe`: active probes asked of the agents.
    probing: Option<Probing>,
}

struct Probing {
    limit: usize,
    hitlist: probe::Hitlist,
    asked: probe::Asked,
    pending: probe::Pending,
    /// Each agent's site, from its last report.
    agent_site: HashMap<String, usize>,
    /// The last demand cycle's client prefixes, busiest first.
    demand: Vec<IpNet>,
}

impl Probing {
    /// Chooses this poll's prefixes and leaves them for the poller to send.
    fn ask(&mut self, merge: &Merge, now: u64) {
        let mut sites: Vec<usize> = self.agent_site.values().copied().collect();
        sites.sort_unstable();
        sites.dedup();
        let state = |site: usize, p: &IpNet| merge.state(site, p);
        let chosen =
            self.asked
                .choose(&self.demand, &sites, &state, &self.hitlist, now, self.limit);
        if chosen.is_empty() {
            return;
        }
        let mut pending = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        pending.clear();
        for (site, t) in chosen {
            for (agent, _) in self.agent_site.iter().filter(|(_, s)| **s == site) {
                pending.entry(agent.clone()).or_default().push(t.clone());
            }
        }
    }
}

pub struct Live {
    bgp: Option<bgp::Bgp>,
    rtt: Option<RttLive>,
    /// Per site: what its files give, where a live input may override it.
    file_routes: Vec<Option<Vec<(IpNet, Route)>>>,
    file_rtt: Vec<Vec<(IpNet, Rtt)>>,
    wake: Arc<Wake>,
    /// When the oldest change not yet taken was first seen.
    since: Option<Instant>,
    /// The loss of every view's peers was refused (logged once).
    refused: bool,
    /// The operator confirmed a removal (SIGUSR1): the next change is taken whatever it
    /// removes.
    pub confirmed: bool,
    log: Log,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Live {
    /// Starts what `cfg` asks for (the BMP listener, the agents' poller); `None` when it
    /// asks for neither.
    pub fn start(cfg: &Config, log: Log) -> Result<Option<Live>> {
        Live::start_with(cfg, log, None)
    }

    /// [`Live::start`], with `store` giving the reports agents wrote into a fleet's store
    /// (`[rtt] from_store`: only a fleet's publisher has one).
    pub fn start_with(cfg: &Config, log: Log, store: Option<agents::Feed>) -> Result<Option<Live>> {
        if cfg.rtt.from_store && store.is_none() {
            bail!(
                "[rtt] from_store: only a fleet's publishers read the agents' reports from \
                 its store (run --store ... --role publisher); alone, list them in [rtt] agents"
            );
        }
        let wake = Arc::new(Wake::default());
        let bgp = bgp::Bgp::start(cfg, log, Arc::clone(&wake))?;
        let rtt = if cfg.rtt.agents.is_empty() && !cfg.rtt.from_store {
            None
        } else {
            let (tx, rx) = channel();
            let probing = if cfg.rtt.probe > 0 {
                let hitlist = match &cfg.rtt.probe_targets {
                    Some(path) => probe::Hitlist::read(path)?,
                    None => probe::Hitlist::default(),
                };
                Some(Probing {
                    limit: cfg.rtt.probe,
                    hitlist,
                    asked: probe::Asked::new(probe::reask_ms(cfg.rtt.poll, cfg.rtt.expire)),
                    pending: probe::Pending::default(),
                    agent_site: HashMap::new(),
                    demand: Vec::new(),
                })
            } else {
                None
            };
            if !cfg.rtt.agents.is_empty() {
                let w = Arc::clone(&wake);
                agents::start(
                    cfg.rtt.agents.clone(),
                    Duration::from_secs_f64(cfg.rtt.poll),
                    tx.clone(),
                    move || w.notify(),
                    probing.as_ref().map(|p| Arc::clone(&p.pending)),
                    agents::client(&cfg.rtt)?,
                );
            }
            if let (true, Some(feed)) = (cfg.rtt.from_store, store) {
                let w = Arc::clone(&wake);
                feed(tx, Box::new(move || w.notify()));
            }
            Some(RttLive {
                merge: Merge::new(
                    cfg.sites.len(),
                    Settings {
                        min_samples: cfg.rtt.min_samples,
                        expire_ms: cfg.rtt.expire.saturating_mul(1000),
                    },
                ),
                polled: rx,
                site_index: site_index(cfg),
                tables: vec![Vec::new(); cfg.sites.len()],
                failing: HashSet::new(),
                changed: false,
                probing,
            })
        };
        if bgp.is_none() && rtt.is_none() {
            return Ok(None);
        }
        Ok(Some(Live {
            bgp,
            rtt,
            file_routes: Vec::new(),
            file_rtt: Vec::new(),
            wake,
            since: None,
            refused: false,
            confirmed: false,
            log,
        }))
    }

    /// Keeps up without deciding (a fleet's publisher standing by): the agents' reports are
    /// merged as they come and the collector's timers run, so that nothing piles up and a
    /// takeover starts from the routers' and agents' state of now.
    pub fn keep_up(&mut self) {
        self.poll_agents();
        if let Some(b) = &mut self.bgp {
            b.tick(Instant::now());
        }
    }

    /// Whether the config has routers over BMP (then a first table waits for them).
    pub fn has_bgp(&self) -> bool {
        self.bgp.is_some()
    }

    /// What `data` (overlaid and kept up by this) took from the live inputs, for a fleet's
    /// manifest.
    pub fn sources(&self, cfg: &Config, data: &Data) -> LiveSources {
        let view = |i: usize| self.bgp.as_ref().is_some_and(|b| b.has_view(i));
        let routers = cfg
            .sites
            .iter()
            .enumerate()
            .filter(|(i, _)| view(*i))
            .filter_map(|(_, s)| Some(format!("{}={}", s.name, s.bmp_router.as_deref()?)))
            .collect();
        // The agents polled, and those from the store that stand behind a value now (the
        // store's set comes and goes with their leases; the values are the live state).
        let agents = match &self.rtt {
            Some(r) => {
                let stored: std::collections::BTreeSet<&str> = r
                    .tables
                    .iter()
                    .flatten()
                    .map(|(_, _, src)| src.agent.as_str())
                    .filter(|a| a.starts_with(agents::FROM_STORE))
                    .collect();
                let mut all = cfg.rtt.agents.clone();
                all.extend(stored.into_iter().map(str::to_string));
                all
            }
            None => Vec::new(),
        };
        let digest = director_plan::live::digest(data.sites.iter().enumerate().map(|(i, s)| {
            let routes: &[(IpNet, Route)] = if view(i) { &s.routes } else { &[] };
            let rtt: &[(IpNet, Rtt)] = if self.rtt.is_some() { &s.rtt } else { &[] };
            (routes, rtt)
        }));
        LiveSources {
            routers,
            agents,
            routes: self.bgp.as_ref().map_or(0, |b| b.size().0 as u64),
            measurements: self
                .rtt
                .as_ref()
                .map_or(0, |r| r.tables.iter().map(Vec::len).sum::<usize>() as u64),
            digest,
        }
    }

    /// Sleeps up to `timeout`, less when a live input changed.
    pub fn wait(&self, timeout: Duration) {
        self.wake.wait(timeout);
    }

    /// Whether BGP has every configured router's table (or gave up waiting for it), so
    /// that decisions made now do not drop routes a router is about to send.
    pub fn bgp_ready(&mut self) -> bool {
        self.bgp
            .as_mut()
            .is_none_or(|b| b.all_synced(Instant::now()))
    }

    /// A config was (re)loaded: its sites' views and agents. The listener and the agents'
    /// list are the start's (a change needs a restart, like the other listeners).
    pub fn reconfigure(&mut self, cfg: &Config) {
        if let Some(b) = &mut self.bgp {
            b.reconfigure(cfg);
        }
        if let Some(r) = &mut self.rtt {
            r.site_index = site_index(cfg);
            // The bound follows a reload (0 stops asking); probing that was off at the start
            // needs a restart, as the agents' list does.
            if let Some(p) = &mut r.probing {
                p.limit = cfg.rtt.probe;
            }
            if r.tables.len() != cfg.sites.len() {
                // Sites were added or removed: measurements are per site index.
                r.merge = Merge::new(
                    cfg.sites.len(),
                    Settings {
                        min_samples: cfg.rtt.min_samples,
                        expire_ms: cfg.rtt.expire.saturating_mul(1000),
                    },
                );
                r.tables = vec![Vec::new(); cfg.sites.len()];
            }
        }
    }

    /// Data freshly read from the files: keeps what they give, and lays the live routes
    /// and measurements over it.
    pub fn overlay(&mut self, data: &mut Data) {
        if let Some(b) = &mut self.bgp {
            b.take_dirty();
        }
        let routes = self.live_routes(data.sites.len());
        self.file_routes = data
            .sites
            .iter()
            .zip(&routes)
            .map(|(s, live)| live.as_ref().map(|_| s.routes.clone()))
            .collect();
        self.file_rtt = data.sites.iter().map(|s| s.rtt.clone()).collect();
        let merge = self.rtt.as_ref().map(|r| &r.merge);
        if let (Some(tables), Some(r)) = (lay_over(routes, merge, data), &mut self.rtt) {
            r.tables = tables;
        }
    }

    /// The first `sites` sites' live routes: each view's table, None for a site without one.
    fn live_routes(&self, sites: usize) -> Vec<Option<Vec<(IpNet, Route)>>> {
        (0..sites)
            .map(|i| {
                let b = self.bgp.as_ref().filter(|b| b.has_view(i))?;
                Some(b.table(i))
            })
            .collect()
    }

    /// What the live inputs hold now, to lay over another copy of the files' data (a
    /// standby's map page explains with it).
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            routes: self.live_routes(self.bgp.as_ref().map_or(0, bgp::Bgp::sites)),
            merge: self.rtt.as_ref().map(|r| r.merge.clone()),
        }
    }

    /// Takes what changed since the last look into `data`, [`DEBOUNCE`] after the first of
    /// it (so a burst is one change); the caller decides the prefixes again.
    pub fn take(&mut self, data: &mut Data) -> Changes {
        let fresh_rtt = self.poll_agents();
        let dirty_bgp = match &mut self.bgp {
            Some(b) => {
                b.tick(Instant::now());
                b.dirty()
            }
            None => false,
        };
        if !fresh_rtt && !dirty_bgp {
            self.since = None;
            return Changes::default();
        }
        let first = *self.since.get_or_insert_with(Instant::now);
        if first.elapsed() < DEBOUNCE {
            return Changes::default();
        }
        if self.bgp.as_ref().is_some_and(|b| !b.settled()) {
            // A router is sending its table: decide once it has sent all of it.
            return Changes::default();
        }
        self.since = None;
        let mut out = Changes::default();
        if let Some(b) = &mut self.bgp {
            if b.every_view_lost_its_peers() && !self.confirmed {
                // Withdrawals and a peer going down are taken as they come; every site
                // losing every peer at once looks like the collector's side of the network,
                // not the Internet's: the routes stand until a peer is back or an operator
                // confirms (SIGUSR1).
                if !self.refused {
                    self.refused = true;
                    self.log.event(
                        Event::Refused {
                            error: "every BMP view lost all its peers".into(),
                        },
                        "every site's BMP router lost all its peers at once: keeping their \
                         routes until a peer is back (SIGUSR1 to take the loss)"
                            .into(),
                    );
                }
                return out;
            }
            self.refused = false;
            self.confirmed = false;
            let dirty = b.take_dirty();
            // The collector names every prefix whose candidates changed; only those whose
            // best route at a site changed are decided again (a peer going down while
            // another has the same routes changes none).
            let mut changed: Vec<IpNet> = Vec::new();
            for (i, site) in data.sites.iter_mut().enumerate() {
                let Some(files) = &self.file_routes[i] else {
                    continue;
                };
                let live = b.best_of(i, &dirty);
                let mut changes = Vec::new();
                for (p, now) in dirty.iter().zip(live) {
                    let now = now.or_else(|| {
                        files
                            .binary_search_by_key(&sort_key(p), |e| sort_key(&e.0))
                            .ok()
                            .map(|j| files[j].1.clone())
                    });
                    let before = site
                        .routes
                        .binary_search_by_key(&sort_key(p), |e| sort_key(&e.0))
                        .ok()
                        .map(|j| &site.routes[j].1);
                    if now.as_ref() != before {
                        changes.push((*p, now));
                    }
                }
                changed.extend(changes.iter().map(|c| c.0));
                patch(&mut site.routes, changes);
            }
            changed.sort_unstable_by_key(sort_key);
            changed.dedup();
            out.bgp = changed.len();
            out.prefixes = changed;
        }
        if let Some(r) = &mut self.rtt {
            if r.changed || out.bgp > 0 {
                r.changed = false;
                let mut fresh = Vec::with_capacity(data.sites.len());
                for (i, site) in data.sites.iter().enumerate() {
                    let t = r.merge.table(i, |p| covering(&site.routes, p).map(|e| e.0));
                    let mut rtt = self.file_rtt.get(i).cloned().unwrap_or_default();
                    patch(&mut rtt, t.iter().map(|(p, v, _)| (*p, Some(*v))).collect());
                    r.tables[i] = t;
                    fresh.push(rtt);
                }
                let changed = data.replace_rtt(fresh);
                for (site, t) in data.sites.iter_mut().zip(&r.tables) {
                    site.rtt_live = t.iter().map(|(p, _, src)| (*p, src.clone())).collect();
                }
                out.rtt = changed.len();
                out.prefixes.extend(changed);
            }
        }
        out.prefixes.sort_unstable_by_key(sort_key);
        out.prefixes.dedup();
        out.full |= out.prefixes.len() > FULL_PASS;
        out
    }

    /// Merges every report that came in; whether a published value changed.
    fn poll_agents(&mut self) -> bool {
        let Some(r) = &mut self.rtt else {
            return false;
        };
        let now = now_ms();
        let mut reported = false;
        while let Ok(p) = r.polled.try_recv() {
            match p.report {
                Ok(report) => {
                    if r.failing.remove(&p.agent) {
                        self.log.event(
                            Event::AgentReached {
                                agent: p.agent.clone(),
                            },
                            format!("RTT agent {} answers again", p.agent),
                        );
                    }
                    let Some(&site) = r.site_index.get(&report.site) else {
                        if r.failing.insert(p.agent.clone()) {
                            let error = format!(
                                "it measures from site {:?}, which the config does not have",
                                report.site
                            );
                            self.log.event(
                                Event::AgentFailing {
                                    agent: p.agent.clone(),
                                    error: error.clone(),
                                },
                                format!("RTT agent {}: {error}", p.agent),
                            );
                        }
                        continue;
                    };
                    r.changed |= r.merge.take(site, &p.agent, &report.records, now);
                    if let Some(pr) = &mut r.probing {
                        pr.agent_site.insert(p.agent.clone(), site);
                    }
                    reported = true;
                }
                Err(e) => {
                    if r.failing.insert(p.agent.clone()) {
                        self.log.event(
                            Event::AgentFailing {
                                agent: p.agent.clone(),
                                error: format!("{e:#}"),
                            },
                            format!("RTT agent unreachable: {e:#}"),
                        );
                    }
                }
            }
        }
        r.changed |= r.merge.expire(now);
        if let Some(pr) = r.probing.as_mut().filter(|_| reported) {
            pr.ask(&r.merge, now);
        }
        r.changed
    }

    /// The last demand cycle's client prefixes (busiest first), for `[rtt] probe` to
    /// choose from.
    pub fn probe_demand(&mut self, prefixes: Vec<IpNet>) {
        if let Some(p) = self.rtt.as_mut().and_then(|r| r.probing.as_mut()) {
            p.demand = prefixes;
        }
    }

    /// Where a site's live measurement of a prefix came from, for `explain`.
    pub fn rtt_source(&self, site: usize, prefix: &IpNet) -> Option<&Source> {
        let t = self.rtt.as_ref()?.tables.get(site)?;
        t.binary_search_by_key(&sort_key(prefix), |e| sort_key(&e.0))
            .ok()
            .map(|i| &t[i].2)
    }

    /// What the metrics show of the live inputs.
    pub fn stats(&self, cfg: &Config) -> crate::metrics::LiveTable {
        let mut t = crate::metrics::LiveTable::default();
        if let Some(b) = &self.bgp {
            t.routers = b
                .status()
                .into_iter()
                .map(|r| {
                    let routes = r.peers.iter().map(|p| p.routes).sum();
                    let name = r.name.unwrap_or_else(|| r.address.to_string());
                    (name, r.connected, r.synced, routes)
                })
                .collect();
            t.rib_bytes = b.size().1;
            t.bmp_refused = b.refused();
        }
        if let Some(r) = &self.rtt {
            t.rtt = cfg
                .sites
                .iter()
                .zip(&r.tables)
                .map(|(s, t)| (s.name.clone(), t.len()))
                .collect();
            t.agents_failing = r.failing.len();
        }
        t
    }
}

/// The live inputs at one moment (see [`Live::snapshot`]).
pub struct Snapshot {
    routes: Vec<Option<Vec<(IpNet, Route)>>>,
    merge: Option<Merge>,
}

impl Snapshot {
    /// Lays these routes and measurements over `data` (read from the files), as `run`'s
    /// data has them.
    pub fn lay_over(&self, data: &mut Data) {
        lay_over(self.routes.clone(), self.merge.as_ref(), data);
    }
}

/// Lays each site's live routes (None: the files' stand) and the merged measurements over
/// `data`: a live value wins for its prefix. Returns each site's live RTT table, with where
/// each value came from, when there is a merge.
fn lay_over(
    routes: Vec<Option<Vec<(IpNet, Route)>>>,
    merge: Option<&Merge>,
    data: &mut Data,
) -> Option<Vec<Vec<(IpNet, Rtt, Source)>>> {
    for (site, live) in data.sites.iter_mut().zip(routes) {
        if let Some(live) = live {
            patch(
                &mut site.routes,
                live.into_iter().map(|(p, r)| (p, Some(r))).collect(),
            );
        }
    }
    let tables = merge.map(|m| {
        data.sites
            .iter_mut()
            .enumerate()
            .map(|(i, site)| {
                let t = m.table(i, |p| covering(&site.routes, p).map(|e| e.0));
                patch(
                    &mut site.rtt,
                    t.iter().map(|(p, v, _)| (*p, Some(*v))).collect(),
                );
                site.rtt_live = t.iter().map(|(p, _, src)| (*p, src.clone())).collect();
                t
            })
            .collect()
    });
    data.summary.rtt_measurements = data.sites.iter().map(|s| s.rtt.len()).sum();
    tables
}

fn site_index(cfg: &Config) -> HashMap<String, usize> {
    cfg.sites
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.clone(), i))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn agents_from_the_store_need_a_fleets_publisher() {
        let cfg = crate::controller::config::Config::parse(
            "[rtt]\nfrom_store = true\n\n[[site]]\nname = \"a\"\n\n\
             [[server]]\nname = \"x\"\nsite = \"a\"\nipv4 = \"192.0.2.10\"\n\n\
             [[service]]\nname = \"www.example.com\"\nservers = [\"x\"]\n\
             priority = { rtt = 1 }\n",
        )
        .unwrap();
        let e = Live::start(&cfg.plan, Log::Text)
            .err()
            .expect("refused alone");
        assert!(format!("{e:#}").contains("from_store"), "{e:#}");
        // A publisher's feed is started with the channel the merge reads.
        let fed = Arc::new(AtomicBool::new(false));
        let f = Arc::clone(&fed);
        let feed: agents::Feed = Box::new(move |out, wake| {
            f.store(
                out.send(agents::Polled {
                    agent: "store:a/s1".into(),
                    report: Err(anyhow::anyhow!("no report yet")),
                })
                .is_ok(),
                Ordering::Relaxed,
            );
            wake();
        });
        let live = Live::start_with(&cfg.plan, Log::Text, Some(feed)).unwrap();
        assert!(live.is_some() && fed.load(Ordering::Relaxed));
    }
}
