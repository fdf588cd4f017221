//! Health in a fleet. Each edge checks only the servers it observes (k per server, chosen
//! by [`observers`] over the live edges) and writes each verdict under its lease; the
//! leading publisher counts the votes of each server's observers and publishes the servers
//! a quorum found down as the overlay, which every edge applies to its health masks at
//! once. One edge that cannot reach a server takes it out for nobody, itself included; a
//! dead observer's votes go with its lease.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use anyhow::Result;
use director_common::maps::HealthMask;
use director_plan::decide::Ids;
use director_plan::fleet::observers::{is_down, majority, observers, Edge};
use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;

use super::store::Store;
use super::Options;
use crate::api::{Event, ServiceServer};
use crate::controller::checks::health_plan;
use crate::controller::config::Config;
use crate::health::probe;
use crate::health::track::{Track, Verdict};
use crate::health::Target;
use crate::kernel::Maps;

/// `overlay`: the servers out of their services by a quorum of observers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overlay {
    pub down: Vec<ServiceServer>,
}

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

fn vote_key(service: &str, server: &str, edge: &str) -> String {
    format!("votes/{service}/{server}/{edge}")
}

/// Publisher: the overlay from the votes, written when it changed.
pub async fn tally(o: &Options, st: &mut Store, cfg: &Config, leader: &[u8]) -> Result<()> {
    let edges = live_edges(st).await?;
    let mut votes: HashMap<(String, String), HashMap<String, bool>> = HashMap::new();
    for (k, v) in st.list("votes/").await? {
        let mut parts = k.splitn(3, '/');
        if let (Some(svc), Some(srv), Some(edge)) = (parts.next(), parts.next(), parts.next()) {
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
    let doc = Overlay { down };
    let key = st.key("overlay");
    let have = st
        .get(&key, false)
        .await?
        .and_then(|b| serde_json::from_slice::<Overlay>(&b).ok());
    if have.as_ref() != Some(&doc) {
        if !st
            .leader_write(&key, Some(serde_json::to_vec(&doc)?), leader)
            .await?
        {
            return Err(anyhow::Error::new(super::store::Deposed));
        }
        let names: Vec<String> = doc
            .down
            .iter()
            .map(|d| format!("{}/{}", d.service, d.server))
            .collect();
        o.log.event(
            Event::Overlay {
                down: doc.down.clone(),
            },
            format!(
                "publisher {}: servers down by quorum: [{}]",
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
    due: Instant,
    /// The vote written, if any.
    voted: Option<bool>,
    /// A check is under way.
    busy: bool,
}

/// Edge: runs the checks of the servers it observes.
#[derive(Default)]
pub struct Observer {
    checks: Vec<Check>,
    running: JoinSet<(usize, bool)>,
    /// Votes written for checks the config no longer has: deleted at the next tick.
    orphans: Vec<(String, String)>,
}

impl Observer {
    pub fn new(cfg: &Config, ids: &Ids) -> Observer {
        let plan = health_plan(cfg, ids);
        let service_name: HashMap<u32, &str> = plan
            .services
            .iter()
            .map(|w| (w.id, w.name.as_str()))
            .collect();
        let now = Instant::now();
        let checks = plan
            .targets
            .iter()
            .filter_map(|t| {
                Some(Check {
                    service: service_name.get(&t.service)?.to_string(),
                    server: plan.names.get(&t.server)?.clone(),
                    target: t.clone(),
                    track: Track::new(Verdict::Unknown),
                    due: now,
                    voted: None,
                    busy: false,
                })
            })
            .collect();
        Observer {
            checks,
            running: JoinSet::new(),
            orphans: Vec::new(),
        }
    }

    /// Takes over what `old` (the previous version's) knew of the checks both have: each
    /// check's verdict with its rise/fall count, its vote and its next time, so a new
    /// version neither resets verdicts nor lets one result decide. Votes for checks that
    /// are gone are deleted at the next tick.
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
                c.due = o.due;
            }
        }
        self.orphans = old.orphans;
        self.orphans.extend(
            by.into_values()
                .filter(|c| c.voted.is_some())
                .map(|c| (c.service, c.server)),
        );
    }

    /// Forgets which votes were written: a new lease holds none of them yet.
    pub fn rebind(&mut self) {
        for c in &mut self.checks {
            c.voted = None;
        }
    }

    /// Takes finished checks, writes changed votes, starts the checks that are due.
    pub async fn tick(&mut self, o: &Options, st: &mut Store, lease: i64) -> Result<()> {
        for (service, server) in std::mem::take(&mut self.orphans) {
            st.delete(&st.key(&vote_key(&service, &server, &o.name)), false)
                .await?;
        }
        if self.checks.is_empty() {
            return Ok(());
        }
        let edges = live_edges(st).await?;
        while let Some(r) = self.running.try_join_next() {
            let Ok((i, ok)) = r else { continue };
            let c = &mut self.checks[i];
            c.busy = false;
            c.track
                .observe(ok, c.target.timing.rise, c.target.timing.fall);
        }
        let mut mine: BTreeMap<String, bool> = BTreeMap::new();
        for c in &mut self.checks {
            let me = *mine.entry(c.server.clone()).or_insert_with(|| {
                observers(&c.server, &edges, o.observers).contains(&o.name.as_str())
            });
            let key = st.key(&vote_key(&c.service, &c.server, &o.name));
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
        let now = Instant::now();
        for (i, c) in self.checks.iter_mut().enumerate() {
            let observed = mine.get(c.server.as_str()).copied().unwrap_or(false);
            if c.due > now || c.busy || !observed {
                continue;
            }
            c.busy = true;
            c.due = now + c.target.timing.interval.max(Duration::from_millis(100));
            let (probe, addr, timeout) = (
                c.target.probe.clone(),
                c.target.addr,
                c.target.timing.timeout,
            );
            self.running.spawn(async move {
                let ok = probe::run(&probe, addr, timeout).await.is_ok();
                (i, ok)
            });
        }
        Ok(())
    }
}
