//! Health in a fleet. Each edge checks only the servers it observes (k per server, chosen
//! by [`observers`] over the live edges) and writes each verdict under its lease; the
//! leading publisher counts the votes of each server's observers and publishes the servers
//! a quorum found down as the overlay, which every edge applies to its health masks at
//! once. One edge that cannot reach a server takes it out for nobody, itself included; a
//! dead observer's votes go with its lease.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use director_common::maps::HealthMask;
use director_plan::decide::Ids;
use director_plan::fleet::envelope::{self, Kind};
use director_plan::fleet::observers::{is_down, majority, observers, Edge};
use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;

use super::keys::Sealer;
use super::store::{now_ms, Store};
use super::Options;
use crate::api::{Event, ServiceServer};
use crate::controller::checks::health_plan;
use crate::controller::config::Config;
use crate::health::track::{Track, Verdict};
use crate::health::Target;
use crate::health::{next, probe, unit};
use crate::kernel::Maps;

/// `overlay`: the servers out of their services by a quorum of observers, in a signed
/// envelope. `serial` grows with every overlay written (the leader's clock in ms, kept
/// above the store's), so an edge refuses an older one put back (a rollback).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overlay {
    #[serde(default)]
    pub serial: u64,
    pub down: Vec<ServiceServer>,
}

impl Overlay {
    pub fn parse(b: &[u8]) -> Result<Overlay> {
        serde_json::from_slice(b).context("not an overlay")
    }

    /// The overlay in the store's bytes without checking who signed it (`fleet status`).
    pub fn unchecked(b: &[u8]) -> Option<Overlay> {
        match envelope::peek(b) {
            Some((payload, _)) => Overlay::parse(&payload).ok(),
            None => Overlay::parse(b).ok(),
        }
    }
}

/// A serial in the store this far ahead of the leader's clock is not followed: only a
/// forgery (or a clock years off) has one, and edges never took it.
const SERIAL_AHEAD_MS: u64 = 3_600_000;

/// The live edges (`live/<name>` = site, under each edge's lease).
pub async fn live_edges(st: &mut Store) -> Result<Vec<Edge>> {
    Ok(st
        .list("live/")
        .await?
        .into_iter()
        .map(|(name, site)| Edge {
            name,
            site: String::from_utf8_lossy(&site).into_owned(),
        })
        .collect())
}

/// Publisher: the overlay from the votes, written when it changed, or when the store's is
/// not one this publisher's key signed (another leader's, or anybody's written straight
/// into the store: what edges refused is replaced at the next tally).
pub async fn tally(
    o: &Options,
    st: &mut Store,
    cfg: &Config,
    leader: &[u8],
    sealer: &Sealer,
) -> Result<()> {
    let edges = live_edges(st).await?;
    let mut votes: HashMap<(String, String), HashMap<String, bool>> = HashMap::new();
    for (k, v) in st.list("votes/").await? {
        let mut parts = k.splitn(3, '/');
        if let (Some(edge), Some(svc), Some(srv)) = (parts.next(), parts.next(), parts.next()) {
            votes
                .entry((svc.to_string(), srv.to_string()))
                .or_default()
                .insert(edge.to_string(), v == b"down");
        }
    }
    let mut down = Vec::new();
    let none = HashMap::new();
    for svc in cfg.services.iter().filter(|s| s.health.is_some()) {
        let name = svc.name.trim_end_matches('.');
        for srv in &svc.servers {
            let obs = observers(srv, &edges, o.observers);
            let q = o.quorum.unwrap_or_else(|| majority(obs.len()));
            let v = votes.get(&(name.to_string(), srv.clone())).unwrap_or(&none);
            if is_down(&obs, v, q) {
                down.push(ServiceServer {
                    service: name.to_string(),
                    server: srv.clone(),
                });
            }
        }
    }
    let key = st.key("overlay");
    let stored = st.get(&key, false).await?;
    let mine = stored
        .as_deref()
        .and_then(|b| sealer.mine(b, Kind::Overlay, &o.fleet))
        .and_then(|p| Overlay::parse(&p).ok());
    if mine.as_ref().map(|m| &m.down) != Some(&down) {
        let now = now_ms();
        let unchecked = stored.as_deref().and_then(Overlay::unchecked);
        let after = unchecked
            .as_ref()
            .map(|ov| ov.serial)
            .filter(|&s| s <= now + SERIAL_AHEAD_MS)
            .map_or(0, |s| s + 1);
        let same = unchecked.is_some_and(|ov| ov.down == down);
        let doc = Overlay {
            serial: now.max(after),
            down,
        };
        let sealed = sealer.seal(Kind::Overlay, &o.fleet, &serde_json::to_vec(&doc)?);
        if !st.leader_write(&key, Some(sealed), leader).await? {
            return Err(anyhow::Error::new(super::store::Deposed));
        }
        let names: Vec<String> = doc
            .down
            .iter()
            .map(|d| format!("{}/{}", d.service, d.server))
            .collect();
        let why = if same {
            format!(
                " (the same servers: the store's overlay was not signed by this \
                 publisher's key, signed again as serial {})",
                doc.serial
            )
        } else {
            String::new()
        };
        o.log.event(
            Event::Overlay {
                down: doc.down.clone(),
            },
            format!(
                "publisher {}: servers down by quorum: [{}]{why}",
                o.name,
                names.join(", ")
            ),
        );
    }
    Ok(())
}

/// Edge: the overlay into the kernel's health masks, where they differ. A service all of
/// whose servers are down keeps them all when it fails open (as standalone checks do).
pub fn apply_overlay(m: &mut Maps, cfg: &Config, ids: &Ids, ov: &Overlay) -> Result<()> {
    let server_id: HashMap<&str, u16> = cfg
        .servers
        .iter()
        .zip(&ids.servers)
        .map(|(s, &id)| (s.name.as_str(), id))
        .collect();
    for (svc, &id) in cfg.services.iter().zip(&ids.services) {
        let name = svc.name.trim_end_matches('.');
        let out: Vec<u16> = ov
            .down
            .iter()
            .filter(|d| d.service == name)
            .filter_map(|d| server_id.get(d.server.as_str()).copied())
            .collect();
        let all = !svc.servers.is_empty() && out.len() >= svc.servers.len();
        let mut mask = HealthMask::all_in();
        if !(all && svc.fail_open) {
            for s in &out {
                mask.set(*s, true, Some(false));
            }
        }
        if m.health(id)? != mask {
            m.set_health(id, &mask)?;
        }
    }
    Ok(())
}

/// One check this edge may run, and what it found so far.
struct Check {
    service: String,
    server: String,
    target: Target,
    track: Track,
    /// The vote written, if any.
    voted: Option<bool>,
    /// Whether this edge is one of the server's observers now (its task checks only then).
    observed: Arc<AtomicBool>,
    /// When its last check began (carried to the next version's task, so the next check
    /// keeps its time).
    began: Arc<Mutex<Option<tokio::time::Instant>>>,
}

/// What the checks' tasks found since the edge's loop last looked, and the bell they ring.
/// One per edge, shared by each version's observer: each result carries the generation of
/// the observer whose task found it, so a result of a replaced observer's task is dropped.
#[derive(Default)]
pub struct Results {
    found: Mutex<Vec<(u64, usize, bool)>>,
    generation: std::sync::atomic::AtomicU64,
    pub bell: tokio::sync::Notify,
}

/// Edge: runs the checks of the servers it observes, each in a task of its own timed as
/// standalone `run` times its checks (the interval give or take the jitter, from when the
/// last check began; the first within the jitter share of the interval), so that checks
/// are neither late nor in lockstep. The edge's loop takes their results when the bell
/// rings and writes the votes that changed.
#[derive(Default)]
pub struct Observer {
    checks: Vec<Check>,
    tasks: JoinSet<()>,
    results: Arc<Results>,
    generation: u64,
    /// Votes written for checks the config no longer has: deleted at the next step.
    orphans: Vec<(String, String)>,
    /// The live edges, as the edge last saw them (from its watch of `live/`).
    edges: Vec<Edge>,
}

/// Where an edge's vote on a server of a service lives: under the edge's own prefix, so
/// the store can grant each edge its own votes and no one else's.
pub fn vote_key(edge: &str, service: &str, server: &str) -> String {
    format!("votes/{edge}/{service}/{server}")
}

impl Observer {
    pub fn new(cfg: &Config, ids: &Ids, results: Arc<Results>) -> Observer {
        let plan = health_plan(cfg, ids);
        let service_name: HashMap<u32, &str> = plan
            .services
            .iter()
            .map(|w| (w.id, w.name.as_str()))
            .collect();
        let checks = plan
            .targets
            .iter()
            .filter_map(|t| {
                Some(Check {
                    service: service_name.get(&t.service)?.to_string(),
                    server: plan.names.get(&t.server)?.clone(),
                    target: t.clone(),
                    track: Track::new(Verdict::Unknown),
                    voted: None,
                    observed: Arc::default(),
                    began: Arc::default(),
                })
            })
            .collect();
        let generation = results.generation.fetch_add(1, Ordering::Relaxed) + 1;
        Observer {
            checks,
            results,
            generation,
            ..Observer::default()
        }
    }

    /// Takes over what `old` (the previous version's) knew of the checks both have: each
    /// check's verdict with its rise/fall count, its vote and when it last began, so a new
    /// version neither resets verdicts, nor lets one result decide, nor moves a check's
    /// time. Votes for checks that are gone are deleted at the next step.
    pub fn carry(&mut self, old: Observer) {
        let mut by: HashMap<(String, String), Check> = old
            .checks
            .into_iter()
            .map(|c| ((c.service.clone(), c.server.clone()), c))
            .collect();
        for c in &mut self.checks {
            if let Some(o) = by.remove(&(c.service.clone(), c.server.clone())) {
                c.track = o.track;
                c.voted = o.voted;
                c.began = o.began;
            }
        }
        self.edges = old.edges;
        self.orphans = old.orphans;
        self.orphans.extend(
            by.into_values()
                .filter(|c| c.voted.is_some())
                .map(|c| (c.service, c.server)),
        );
        // The old tasks end with `old.tasks`, dropped here.
    }

    /// Starts a task per check (once; the tasks check only while their server is
    /// observed). Needs the runtime: called from the edge's loop.
    fn start(&mut self) {
        if !self.tasks.is_empty() || self.checks.is_empty() {
            return;
        }
        for (i, c) in self.checks.iter().enumerate() {
            let (probe, addr, timing) = (c.target.probe.clone(), c.target.addr, c.target.timing);
            let (observed, began, results, generation) = (
                c.observed.clone(),
                c.began.clone(),
                self.results.clone(),
                self.generation,
            );
            self.tasks.spawn(async move {
                let interval = timing.interval.max(Duration::from_millis(100));
                loop {
                    if !observed.load(Ordering::Relaxed) {
                        *lock(&began) = None;
                        tokio::time::sleep(Duration::from_millis(200).min(interval)).await;
                        continue;
                    }
                    // The next check's time: from the last one's start when there was one,
                    // else within the jitter share of the interval from now.
                    let last = *lock(&began);
                    match last {
                        Some(t) => next(t, interval, timing.jitter).await,
                        None => tokio::time::sleep(interval.mul_f64(timing.jitter * unit())).await,
                    }
                    if !observed.load(Ordering::Relaxed) {
                        continue;
                    }
                    *lock(&began) = Some(tokio::time::Instant::now());
                    let ok = probe::run(&probe, addr, timing.timeout).await.is_ok();
                    lock(&results.found).push((generation, i, ok));
                    results.bell.notify_one();
                }
            });
        }
    }

    /// Forgets which votes were written: a new lease holds none of them yet.
    pub fn rebind(&mut self) {
        for c in &mut self.checks {
            c.voted = None;
        }
    }

    /// The live edges changed: which servers this edge observes follows.
    pub fn set_edges(&mut self, edges: Vec<Edge>) {
        self.edges = edges;
    }

    /// Takes the checks' results, writes the votes that changed, deletes orphaned ones,
    /// and tells each check's task whether to check.
    pub async fn step(&mut self, o: &Options, st: &mut Store, lease: i64) -> Result<()> {
        for (service, server) in std::mem::take(&mut self.orphans) {
            st.delete(&st.key(&vote_key(&o.name, &service, &server)), false)
                .await?;
        }
        if self.checks.is_empty() {
            return Ok(());
        }
        self.start();
        let found = std::mem::take(&mut *lock(&self.results.found));
        for (_, i, ok) in found.into_iter().filter(|r| r.0 == self.generation) {
            if let Some(c) = self.checks.get_mut(i) {
                c.track
                    .observe(ok, c.target.timing.rise, c.target.timing.fall);
            }
        }
        let mut mine: BTreeMap<String, bool> = BTreeMap::new();
        for c in &mut self.checks {
            let me = *mine.entry(c.server.clone()).or_insert_with(|| {
                observers(&c.server, &self.edges, o.observers).contains(&o.name.as_str())
            });
            c.observed.store(me, Ordering::Relaxed);
            let key = st.key(&vote_key(&o.name, &c.service, &c.server));
            let want = match (me, c.track.verdict) {
                (true, Verdict::Up) => Some(false),
                (true, Verdict::Down) => Some(true),
                _ => None,
            };
            if want != c.voted {
                match want {
                    Some(down) => {
                        let v = if down { "down" } else { "up" };
                        st.put(&key, v.into(), Some(lease)).await?;
                        o.log.event(
                            Event::Vote {
                                service: c.service.clone(),
                                server: c.server.clone(),
                                down,
                            },
                            format!(
                                "edge {}: {}/{} is {v} by this observer's checks",
                                o.name, c.service, c.server
                            ),
                        );
                    }
                    None => st.delete(&key, false).await?,
                }
                c.voted = want;
            }
            if !me {
                c.track = Track::new(Verdict::Unknown);
            }
        }
        Ok(())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
