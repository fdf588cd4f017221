//! Health checks and load, run by `director-ctl run`: one check per (service, server) and
//! one load poll per server that publishes its load, each on its own interval with
//! jitter, on a tokio runtime of their own. Results go to one publisher thread, which keeps
//! every check's [`track::Track`] and every server's load, and writes a service's
//! `HealthMask` to the kernel the moment what it says changes, so the very next query
//! already skips (or takes) the server. `run`'s loop sees the new mask when it next polls
//! and re-sorts the decisions without the servers that are out.
//!
//! Verdicts live in the pinned mask, so a restarted controller starts from them: a server
//! that was down stays out until its checks bring it back, and nothing is marked up by a
//! restart. A check no verdict exists for is out until its first result.

pub mod config;
pub mod probe;
pub mod track;

use std::collections::{hash_map::RandomState, BTreeMap, HashMap, HashSet};
use std::hash::BuildHasher;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use director_common::maps::HealthMask;

use crate::api::Log;
use crate::api::{self, Event};
use crate::kernel::{Maps, WriteLock};
use config::{HttpUrl, Timing};
use probe::Probe;
use track::{Track, Verdict};

/// One check: a server of a service, where and how to ask it.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    pub service: u32,
    pub server: u16,
    pub addr: SocketAddr,
    pub probe: Probe,
    pub timing: Timing,
}

/// One server's load source.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadTarget {
    pub server: u16,
    pub url: HttpUrl,
    pub metric: Option<String>,
    pub interval: Duration,
    pub timeout: Duration,
}

/// A service whose mask the publisher keeps: its servers, whether it has checks, and its
/// load limits.
#[derive(Clone, Debug, PartialEq)]
pub struct Watched {
    pub id: u32,
    pub name: String,
    pub servers: Vec<u16>,
    pub checked: bool,
    pub fail_open: bool,
    /// (threshold, resume).
    pub load: Option<(f64, f64)>,
    /// The TTL of fail-open answers.
    pub degraded_ttl: u32,
    /// What the kernel answers when no server is usable: "alternate", "origin" or "pass".
    pub fallback: &'static str,
    /// `portion = "auto"`.
    pub auto: bool,
}

/// Everything the config asks to watch, with kernel ids.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub targets: Vec<Target>,
    pub loads: Vec<LoadTarget>,
    pub services: Vec<Watched>,
    /// Server names by id (for logs and metrics).
    pub names: BTreeMap<u16, String>,
}

impl Plan {
    /// Whether anything is watched at all (else no threads are needed).
    pub fn is_empty(&self) -> bool {
        self.targets.is_empty() && self.loads.is_empty()
    }
}

/// What the publisher knows, for the metrics endpoint.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Per (service name, server name).
    pub checks: BTreeMap<(String, String), CheckState>,
    /// Per server name: the last load read.
    pub load: BTreeMap<String, f64>,
    /// Per service name: times it went fail-open, and whether it is now.
    pub fail_open: BTreeMap<String, (u64, bool)>,
    /// `portion = "auto"`: (service id, server id) → the portion now.
    pub auto: BTreeMap<(u32, u16), u16>,
    /// The same by names, for the metrics.
    pub auto_named: BTreeMap<(String, String), u16>,
    /// Checks finished, and those that failed.
    pub checks_done: u64,
    pub checks_failed: u64,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct CheckState {
    /// Up (`Some(true)`), down, or not checked yet.
    pub verdict: Option<bool>,
    /// Out of the service's answers.
    pub out: bool,
    /// How long the last check took.
    pub seconds: Option<f64>,
}

pub type Shared = Arc<Mutex<Snapshot>>;

/// A service's mask from its servers' verdicts and loads. Unknown and down servers are
/// out, and so are overloaded ones unless every server that is up is overloaded (then the
/// load says nothing about where to send clients). When every server is down by its checks,
/// all are answered instead (fail-open, as gdnsd and Route 53 do: a checker cut off from
/// the servers is likelier than all of them failing at once), unless the service set
/// `fail_open = false`. Returns the mask and whether it is fail-open.
pub fn mask(
    w: &Watched,
    verdict: &dyn Fn(u16) -> Verdict,
    over: &dyn Fn(u16) -> bool,
    admin_out: &dyn Fn(u16) -> bool,
) -> (HealthMask, bool) {
    let mut m = HealthMask::all_in();
    let v: Vec<(u16, Verdict)> = w.servers.iter().map(|&s| (s, verdict(s))).collect();
    let all_down = !v.is_empty() && v.iter().all(|(_, v)| *v == Verdict::Down);
    // Unavailable by checks alone: with a server set down or drained, the operator is at
    // work and the fallback answers instead.
    let by_checks_alone = !w.servers.iter().any(|&s| admin_out(s));
    let open = all_down && by_checks_alone && w.fail_open;
    let up_not_over = v.iter().any(|&(s, v)| v == Verdict::Up && !over(s));
    for (s, v) in v {
        let out = !open && (v != Verdict::Up || (up_not_over && over(s)));
        let known = match v {
            Verdict::Unknown => None,
            Verdict::Up => Some(true),
            Verdict::Down => Some(false),
        };
        m.set(s, out, if w.checked { known } else { None });
    }
    if open {
        m.ttl = w.degraded_ttl;
    }
    (m, open)
}

/// The checks running, until dropped or [`Runner::stop`]ped.
pub struct Runner {
    pub plan: Plan,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    first_round: Arc<(Mutex<bool>, Condvar)>,
}

enum Outcome {
    Check {
        index: usize,
        result: std::result::Result<(), String>,
        seconds: f64,
    },
    Load {
        server: u16,
        result: std::result::Result<f64, String>,
    },
}

impl Runner {
    /// Seeds every check from the pinned masks, writes the masks of every service of the
    /// plan (those with neither checks nor load get none out), and starts watching.
    pub fn start(pin_dir: &Path, plan: Plan, shared: Shared, log: Log) -> Result<Runner> {
        let m = Maps::open(pin_dir)?;
        let mut tracks = Vec::with_capacity(plan.targets.len());
        let mut masks: HashMap<u32, HealthMask> = HashMap::new();
        for t in &plan.targets {
            if let std::collections::hash_map::Entry::Vacant(e) = masks.entry(t.service) {
                e.insert(m.health(t.service)?);
            }
            let v = match masks[&t.service].verdict(t.server) {
                None => Verdict::Unknown,
                Some(true) => Verdict::Up,
                Some(false) => Verdict::Down,
            };
            tracks.push(Track::new(v));
        }
        let pending: HashSet<usize> = tracks
            .iter()
            .enumerate()
            .filter(|(_, t)| t.verdict == Verdict::Unknown)
            .map(|(i, _)| i)
            .collect();
        let mut publisher = Publisher {
            pin_dir: pin_dir.to_path_buf(),
            maps: m,
            plan: plan.clone(),
            tracks,
            over: HashSet::new(),
            open: HashSet::new(),
            unreadable: HashSet::new(),
            degraded: HashSet::new(),
            admin_out: HashSet::new(),
            shared,
            log,
        };
        publisher.read_admin();
        {
            let _lock = WriteLock::take(pin_dir)?;
            for w in &plan.services {
                publisher.publish(w.id)?;
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let first_round = Arc::new((Mutex::new(pending.is_empty()), Condvar::new()));
        let mut threads = Vec::new();
        if !plan.is_empty() {
            let (tx, rx) = mpsc::channel::<Outcome>();
            let (p, s) = (plan.clone(), stop.clone());
            threads.push(
                std::thread::Builder::new()
                    .name("health-checks".into())
                    .spawn(move || run_probes(p, tx, s))
                    .context("starting the health checks")?,
            );
            let (s, first) = (stop.clone(), first_round.clone());
            threads.push(
                std::thread::Builder::new()
                    .name("health-publish".into())
                    .spawn(move || publisher.serve(rx, pending, first, s))
                    .context("starting the health publisher")?,
            );
        }
        Ok(Runner {
            plan,
            stop,
            threads,
            first_round,
        })
    }

    /// Waits until every check that had no verdict has one, at most `limit`. True when
    /// the round is complete.
    pub fn wait_first_round(&self, limit: Duration) -> bool {
        let (done, cv) = &*self.first_round;
        let guard = done
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (guard, _) = cv
            .wait_timeout_while(guard, limit, |d| !*d)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *guard
    }

    /// The longest the first round can take: every check's first start (jitter) plus its
    /// timeout, and a margin for scheduling.
    pub fn first_round_limit(&self) -> Duration {
        self.plan
            .targets
            .iter()
            .map(|t| t.timing.interval.mul_f64(t.timing.jitter) + t.timing.timeout)
            .max()
            .unwrap_or_default()
            + Duration::from_secs(1)
    }

    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        self.halt();
    }
}

/// A number from 0 to 1, different at every call (for jitter; no need for quality).
pub fn unit() -> f64 {
    (RandomState::new().hash_one(Instant::now()) >> 11) as f64 / (1u64 << 53) as f64
}

/// Sleeps until `began` plus the interval, give or take the jitter share.
pub async fn next(began: tokio::time::Instant, interval: Duration, jitter: f64) {
    let j = jitter * (2.0 * unit() - 1.0);
    tokio::time::sleep_until(began + interval.mul_f64(1.0 + j)).await;
}

fn run_probes(plan: Plan, tx: mpsc::Sender<Outcome>, stop: Arc<AtomicBool>) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("director-ctl run: health checks cannot start: {e}");
            return;
        }
    };
    rt.block_on(async move {
        for (index, t) in plan.targets.into_iter().enumerate() {
            let (tx, stop) = (tx.clone(), stop.clone());
            tokio::spawn(async move {
                // The first check starts within the jitter share of the interval, so the
                // first round is quick and checks start spread out.
                let spread = t.timing.interval.mul_f64(t.timing.jitter * unit());
                tokio::time::sleep(spread).await;
                while !stop.load(Ordering::Relaxed) {
                    let began = tokio::time::Instant::now();
                    let result = probe::run(&t.probe, t.addr, t.timing.timeout).await;
                    let seconds = began.elapsed().as_secs_f64();
                    if tx
                        .send(Outcome::Check {
                            index,
                            result,
                            seconds,
                        })
                        .is_err()
                    {
                        return;
                    }
                    next(began, t.timing.interval, t.timing.jitter).await;
                }
            });
        }
        for l in plan.loads {
            let (tx, stop) = (tx.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let began = tokio::time::Instant::now();
                    let result = probe::load(&l.url, l.metric.as_deref(), l.timeout).await;
                    let server = l.server;
                    if tx.send(Outcome::Load { server, result }).is_err() {
                        return;
                    }
                    next(began, l.interval, 0.1).await;
                }
            });
        }
        drop(tx);
        while !stop.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}

struct Publisher {
    pin_dir: PathBuf,
    maps: Maps,
    plan: Plan,
    tracks: Vec<Track>,
    /// (service, server) over the service's load threshold, until under its resume level.
    over: HashSet<(u32, u16)>,
    /// Services answered fail-open now.
    open: HashSet<u32>,
    /// Servers whose load endpoint failed at the last poll.
    unreadable: HashSet<u16>,
    /// Services with no usable server (answered by their fallback).
    degraded: HashSet<u32>,
    /// The plan's servers set down or drained (read from the kernel every second).
    admin_out: HashSet<u16>,
    shared: Shared,
    log: Log,
}

impl Publisher {
    fn name(&self, server: u16) -> String {
        self.plan.names.get(&server).cloned().unwrap_or_default()
    }

    fn serve(
        mut self,
        rx: mpsc::Receiver<Outcome>,
        mut pending: HashSet<usize>,
        first: Arc<(Mutex<bool>, Condvar)>,
        stop: Arc<AtomicBool>,
    ) {
        let began = Instant::now();
        let waiting = pending.len();
        let mut admin_read = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            let o = match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(o) => Some(o),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            };
            let mut changed = Vec::new();
            if admin_read.elapsed() >= Duration::from_secs(1) {
                admin_read = Instant::now();
                changed.extend(self.read_admin());
            }
            let Some(o) = o else {
                self.write(changed);
                continue;
            };
            changed.extend(match o {
                Outcome::Check {
                    index,
                    result,
                    seconds,
                } => {
                    let c = self.check(index, &result, seconds);
                    if pending.remove(&index) && pending.is_empty() && waiting > 0 {
                        self.first_round_done(began, &first);
                    }
                    c
                }
                Outcome::Load { server, result } => self.loaded(server, result),
            });
            self.write(changed);
        }
    }

    /// Publishes the masks of `services` under the write lock.
    fn write(&mut self, mut services: Vec<u32>) {
        if services.is_empty() {
            return;
        }
        services.sort_unstable();
        services.dedup();
        let r = WriteLock::take(&self.pin_dir).and_then(|_lock| {
            for s in services {
                self.publish(s)?;
            }
            Ok(())
        });
        if let Err(e) = r {
            self.log.event(
                Event::Refused {
                    error: format!("{e:#}"),
                },
                format!("writing health verdicts failed: {e:#}"),
            );
        }
    }

    /// Reads which of the plan's servers are set down or drained; returns the services
    /// of those that changed (fail-open depends on it).
    fn read_admin(&mut self) -> Vec<u32> {
        let mut now = HashSet::new();
        for &id in self.plan.names.keys() {
            match self.maps.server(id) {
                Ok(Some(s)) if !s.up || s.drained => {
                    now.insert(id);
                }
                Ok(_) => {}
                Err(_) => return Vec::new(),
            }
        }
        if now == self.admin_out {
            return Vec::new();
        }
        let moved: HashSet<u16> = now.symmetric_difference(&self.admin_out).copied().collect();
        self.admin_out = now;
        self.plan
            .services
            .iter()
            .filter(|w| w.servers.iter().any(|s| moved.contains(s)))
            .map(|w| w.id)
            .collect()
    }

    /// Takes one check's result; returns the services whose masks may have changed.
    fn check(
        &mut self,
        index: usize,
        result: &std::result::Result<(), String>,
        seconds: f64,
    ) -> Vec<u32> {
        let t = self.plan.targets[index].clone();
        let (rise, fall) = (t.timing.rise, t.timing.fall);
        let service = self.service_name(t.service);
        let server = self.name(t.server);
        {
            let mut sh = self
                .shared
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            sh.checks_done += 1;
            sh.checks_failed += u64::from(result.is_err());
            let e = sh
                .checks
                .entry((service.clone(), server.clone()))
                .or_default();
            e.seconds = Some(seconds);
        }
        let Some(v) = self.tracks[index].observe(result.is_ok(), rise, fall) else {
            return Vec::new();
        };
        let health = match v {
            Verdict::Up => api::Health::Up,
            Verdict::Down => api::Health::Down,
            Verdict::Unknown => api::Health::Unchecked,
        };
        let error = result.as_ref().err().cloned();
        let why = error.as_ref().map_or(String::new(), |e| format!(": {e}"));
        let word = if v == Verdict::Up { "up" } else { "down" };
        self.log.event(
            Event::Health {
                service: service.clone(),
                server: server.clone(),
                health,
                error,
            },
            format!("health: {server} is {word} for {service}{why}"),
        );
        vec![t.service]
    }

    /// Takes one load reading; returns the services whose masks may have changed.
    fn loaded(&mut self, server: u16, result: std::result::Result<f64, String>) -> Vec<u32> {
        let value = match result {
            Ok(v) => v,
            Err(e) => {
                // Once per outage, not once per poll.
                if self.unreadable.insert(server) {
                    let name = self.name(server);
                    self.log.event(
                        Event::LoadUnreadable {
                            server: name.clone(),
                            error: e.clone(),
                        },
                        format!("load: cannot read {name}'s load ({e}); keeping the last value"),
                    );
                }
                return Vec::new();
            }
        };
        self.unreadable.remove(&server);
        // For status and server list; a failed write is retried at the next reading.
        let pin_dir = self.pin_dir.clone();
        if let Err(e) =
            WriteLock::take(&pin_dir).and_then(|_l| self.maps.set_server_load(server, value))
        {
            self.log.event(
                Event::Refused {
                    error: format!("{e:#}"),
                },
                format!("recording a load failed: {e:#}"),
            );
        }
        let name = self.name(server);
        self.shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .load
            .insert(name.clone(), value);
        let mut changed = Vec::new();
        for w in &self.plan.services {
            let Some((threshold, resume)) = w.load else {
                continue;
            };
            if !w.servers.contains(&server) {
                continue;
            }
            if w.auto {
                self.step_portion(w.id, &w.name, server, &name, value, threshold);
            }
            let key = (w.id, server);
            let was = self.over.contains(&key);
            let now = if was {
                value >= resume
            } else {
                value > threshold
            };
            if now == was {
                continue;
            }
            if now {
                self.over.insert(key);
            } else {
                self.over.remove(&key);
            }
            let what = if now {
                format!("over the threshold {threshold}: no new clients")
            } else {
                format!("under {resume} again: back")
            };
            self.log.event(
                Event::Load {
                    service: w.name.clone(),
                    server: name.clone(),
                    load: value,
                    over: now,
                },
                format!("load: {name} at {value} for {}: {what}", w.name),
            );
            changed.push(w.id);
        }
        changed
    }

    /// Moves an auto portion toward the server's headroom, at most a bounded step per
    /// reading (a load that jumps does not swing every client at once). `run` re-sorts when
    /// it sees the portions change.
    fn step_portion(
        &self,
        service: u32,
        sname: &str,
        server: u16,
        name: &str,
        load: f64,
        threshold: f64,
    ) {
        let target = director_plan::config::auto_portion_target(load, threshold);
        let step = director_plan::config::AUTO_PORTION_STEP;
        let mut sh = self
            .shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = *sh
            .auto
            .get(&(service, server))
            .unwrap_or(&director_plan::config::AUTO_PORTION_START);
        let next = if target > now {
            now + (target - now).min(step)
        } else {
            now - (now - target).min(step)
        };
        sh.auto.insert((service, server), next);
        sh.auto_named
            .insert((sname.to_string(), name.to_string()), next);
    }

    fn service_name(&self, id: u32) -> String {
        self.plan
            .services
            .iter()
            .find(|w| w.id == id)
            .map_or(String::new(), |w| w.name.clone())
    }

    fn first_round_done(&self, began: Instant, first: &Arc<(Mutex<bool>, Condvar)>) {
        let up = self
            .tracks
            .iter()
            .filter(|t| t.verdict == Verdict::Up)
            .count();
        let (checks, ms) = (self.tracks.len(), began.elapsed().as_secs_f64() * 1e3);
        let down = checks - up;
        self.log.event(
            Event::FirstRound {
                checks,
                up,
                down,
                ms,
            },
            format!(
                "health: first round of {checks} checks done in {ms:.0} ms: {up} up, {down} down"
            ),
        );
        let (done, cv) = &**first;
        *done
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = true;
        cv.notify_all();
    }

    /// Writes one service's mask if the kernel's differs. The caller holds the write lock.
    fn publish(&mut self, service: u32) -> Result<()> {
        let Some(w) = self.plan.services.iter().find(|w| w.id == service).cloned() else {
            return Ok(());
        };
        let verdicts: HashMap<u16, Verdict> = self
            .plan
            .targets
            .iter()
            .zip(&self.tracks)
            .filter(|(t, _)| t.service == service)
            .map(|(t, k)| (t.server, k.verdict))
            .collect();
        let verdict = |s: u16| {
            if w.checked {
                verdicts.get(&s).copied().unwrap_or(Verdict::Unknown)
            } else {
                Verdict::Up
            }
        };
        let over = |s: u16| self.over.contains(&(service, s));
        let admin = |s: u16| self.admin_out.contains(&s);
        let (mask, open) = mask(&w, &verdict, &over, &admin);
        if open != self.open.contains(&service) {
            let what = if open {
                "every server is down by its checks: answering with all of them (fail-open)"
            } else {
                "a server is up again: fail-open ends"
            };
            self.log.event(
                Event::FailOpen {
                    service: w.name.clone(),
                    open,
                },
                format!("health: {}: {what}", w.name),
            );
            if open {
                self.open.insert(service);
            } else {
                self.open.remove(&service);
            }
            let mut sh = self
                .shared
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let e = sh.fail_open.entry(w.name.clone()).or_default();
            e.0 += u64::from(open);
            e.1 = open;
        }
        {
            let mut sh = self
                .shared
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for &s in &w.servers {
                if !w.checked {
                    continue;
                }
                let e = sh.checks.entry((w.name.clone(), self.name(s))).or_default();
                e.verdict = mask.verdict(s);
                e.out = mask.is_out(s);
            }
        }
        // No server usable by checks or load (admin state aside): the kernel answers the
        // fallback from the next query on. Not while a verdict is missing: before the
        // first round nothing is published at all.
        let none = !w.servers.is_empty()
            && w.servers.iter().all(|&s| mask.is_out(s))
            && w.servers.iter().all(|&s| verdict(s) != Verdict::Unknown);
        if none != self.degraded.contains(&service) {
            let what = if none {
                format!(
                    "no server is usable: answering with the fallback ({})",
                    w.fallback
                )
            } else if open {
                "fail-open answers every server instead of the fallback".to_string()
            } else {
                "a server is usable again: the fallback ends".to_string()
            };
            self.log.event(
                Event::Fallback {
                    service: w.name.clone(),
                    fallback: w.fallback.to_string(),
                    active: none,
                },
                format!("health: {}: {what}", w.name),
            );
            if none {
                self.degraded.insert(service);
            } else {
                self.degraded.remove(&service);
            }
        }
        if self.maps.health(service)? != mask {
            self.maps.set_health(service, &mask)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watched(servers: &[u16], fail_open: bool) -> Watched {
        Watched {
            id: 1,
            name: "www.example.com".into(),
            servers: servers.to_vec(),
            checked: true,
            fail_open,
            load: Some((0.8, 0.7)),
            degraded_ttl: 5,
            fallback: "pass",
            auto: false,
        }
    }

    #[test]
    fn masks_follow_verdicts_load_and_fail_open() {
        use Verdict::*;
        let w = watched(&[1, 2, 3], true);
        let of = |v: [Verdict; 3], over: [bool; 3]| {
            let (m, open) = mask(
                &w,
                &|s| v[s as usize - 1],
                &|s| over[s as usize - 1],
                &|_| false,
            );
            ([1, 2, 3].map(|s| m.is_out(s)), open)
        };
        assert_eq!(
            of([Up, Down, Unknown], [false; 3]),
            ([false, true, true], false)
        );
        // Overloaded is out while an up server is not overloaded.
        assert_eq!(
            of([Up, Up, Down], [true, false, false]),
            ([true, false, true], false)
        );
        // Every up server overloaded: load says nothing, they stay in.
        assert_eq!(
            of([Up, Up, Down], [true, true, false]),
            ([false, false, true], false)
        );
        // Every server down: fail-open answers all.
        assert_eq!(of([Down, Down, Down], [false; 3]), ([false; 3], true));
        let (m, _) = mask(&w, &|_| Down, &|_| false, &|_| false);
        assert_eq!(m.ttl, 5, "fail-open answers carry the degraded TTL");
        let (m, _) = mask(&w, &|_| Up, &|_| false, &|_| false);
        assert_eq!(m.ttl, 0);
        // A server set down: not "by checks alone", so no fail-open (the fallback answers).
        let (m, open) = mask(&w, &|_| Down, &|_| false, &|s| s == 2);
        assert!(!open && m.is_out(1) && m.is_out(3));
        assert_eq!(m.ttl, 0);
        // Not fail-open while a verdict is missing (the first round), nor when refused.
        assert_eq!(of([Down, Down, Unknown], [false; 3]), ([true; 3], false));
        let w = watched(&[1, 2], false);
        let (m, open) = mask(&w, &|_| Down, &|_| false, &|_| false);
        assert!(!open && m.is_out(1) && m.is_out(2));
        assert_eq!(m.verdict(1), Some(false));
    }
}
