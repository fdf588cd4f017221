//! Health checks, run by `director-ctl run`: one check per (service, server), each on its
//! own interval with jitter, on a tokio runtime of their own. Results go to one publisher
//! thread, which keeps every check's [`track::Track`] and writes a service's
//! `HealthMask` to the kernel the moment a verdict changes, so the very next query already
//! skips (or takes) the server. `run`'s loop sees the new mask when it next polls and
//! re-sorts the decisions without the servers that are out.
//!
//! Verdicts live in the pinned mask, so a restarted controller starts from them: a server
//! that was down stays out until its checks bring it back, and nothing is marked up by a
//! restart. A check no verdict exists for is out until its first result.

pub mod probe;
pub mod track;

use std::collections::{hash_map::RandomState, HashMap, HashSet};
use std::hash::BuildHasher;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use director_common::maps::HealthMask;
use hickory_proto::rr::RecordType;

use crate::api::{self, Event};
use crate::controller::config::{CheckKind, Config, Timing};
use crate::controller::decide::Ids;
use crate::controller::run::Log;
use crate::kernel::{Maps, WriteLock};
use probe::Probe;
use track::{Track, Verdict};

/// One check: a server of a service, where and how to ask it.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    pub service: u32,
    pub server: u16,
    pub service_name: String,
    pub server_name: String,
    pub addr: SocketAddr,
    pub probe: Probe,
    pub timing: Timing,
    /// Answer with every server when all are down by checks (see [`mask`]).
    pub fail_open: bool,
}

/// Every check the config asks for, with kernel ids.
pub fn targets(cfg: &Config, ids: &Ids) -> Vec<Target> {
    let server_idx: HashMap<&str, usize> = cfg
        .servers
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.as_str(), i))
        .collect();
    let mut out = Vec::new();
    for (si, svc) in cfg.services.iter().enumerate() {
        let Some(check) = &svc.health else { continue };
        let probe = match check.kind {
            CheckKind::Tcp => Probe::Tcp,
            CheckKind::Http => Probe::Http {
                path: check.path.clone().unwrap_or_else(|| "/".into()),
                host: check
                    .host
                    .clone()
                    .unwrap_or_else(|| svc.name.trim_end_matches('.').to_string()),
                status: check.status.unwrap_or(200),
                body: check.body.clone(),
            },
            CheckKind::Dns => Probe::Dns {
                name: check.query.clone().unwrap_or_default(),
                qtype: check
                    .qtype
                    .as_deref()
                    .and_then(|t| t.to_ascii_uppercase().parse().ok())
                    .unwrap_or(RecordType::A),
            },
        };
        for name in &svc.servers {
            let i = server_idx[name.as_str()];
            let s = &cfg.servers[i];
            let Some(ip) = s
                .check_address
                .or(s.ipv4.map(IpAddr::V4))
                .or(s.ipv6.map(IpAddr::V6))
            else {
                continue;
            };
            out.push(Target {
                service: ids.services[si],
                server: ids.servers[i],
                service_name: svc.name.trim_end_matches('.').to_string(),
                server_name: name.clone(),
                addr: SocketAddr::new(ip, check.port),
                probe: probe.clone(),
                timing: check.timing(&cfg.health),
                fail_open: svc.fail_open,
            });
        }
    }
    out
}

/// A service's mask from its checks' verdicts. Unknown and down servers are out. When
/// every server of the service is down by its checks, all are answered instead (fail-open,
/// as gdnsd and Route 53 do: a checker cut off from the servers is likelier than all of
/// them failing at once), unless the service set `fail_open = false`.
pub fn mask(tracks: &[(&Target, Verdict)]) -> (HealthMask, bool) {
    let mut m = HealthMask::all_in();
    let all_down = !tracks.is_empty() && tracks.iter().all(|(_, v)| *v == Verdict::Down);
    let open = all_down && tracks.iter().all(|(t, _)| t.fail_open);
    for (t, v) in tracks {
        let out = !open && *v != Verdict::Up;
        m.set(t.server, out, *v != Verdict::Unknown);
    }
    (m, open)
}

/// The checks running, until dropped or [`Runner::stop`]ped.
pub struct Runner {
    pub targets: Vec<Target>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    first_round: Arc<(Mutex<bool>, Condvar)>,
}

struct Outcome {
    index: usize,
    result: std::result::Result<(), String>,
}

impl Runner {
    /// Seeds every check from the pinned masks, writes the masks of `services` (those
    /// without checks get none out), and starts checking.
    pub fn start(
        pin_dir: &Path,
        targets: Vec<Target>,
        services: &[u32],
        log: Log,
    ) -> Result<Runner> {
        let m = Maps::open(pin_dir)?;
        let mut tracks = Vec::with_capacity(targets.len());
        let mut masks: HashMap<u32, HealthMask> = HashMap::new();
        for t in &targets {
            if let std::collections::hash_map::Entry::Vacant(e) = masks.entry(t.service) {
                e.insert(m.health(t.service)?);
            }
            let k = &masks[&t.service];
            let v = match (k.is_known(t.server), k.is_out(t.server)) {
                (false, _) => Verdict::Unknown,
                (true, false) => Verdict::Up,
                (true, true) => Verdict::Down,
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
            targets: targets.clone(),
            tracks,
            log,
            open: HashSet::new(),
        };
        {
            let _lock = WriteLock::take(pin_dir)?;
            let checked: HashSet<u32> = targets.iter().map(|t| t.service).collect();
            for &s in services {
                if !checked.contains(&s) && publisher.maps.health(s)? != HealthMask::all_in() {
                    publisher.maps.set_health(s, &HealthMask::all_in())?;
                }
            }
            for s in checked {
                publisher.publish(s)?;
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let first_round = Arc::new((Mutex::new(pending.is_empty()), Condvar::new()));
        if targets.is_empty() {
            return Ok(Runner {
                targets,
                stop,
                threads: Vec::new(),
                first_round,
            });
        }
        let (tx, rx) = mpsc::channel::<Outcome>();
        let probes = {
            let (targets, stop) = (targets.clone(), stop.clone());
            std::thread::Builder::new()
                .name("health-checks".into())
                .spawn(move || run_probes(targets, tx, stop))
                .context("starting the health checks")?
        };
        let publish = {
            let (stop, first) = (stop.clone(), first_round.clone());
            std::thread::Builder::new()
                .name("health-publish".into())
                .spawn(move || publisher.serve(rx, pending, first, stop))
                .context("starting the health publisher")?
        };
        Ok(Runner {
            targets,
            stop,
            threads: vec![probes, publish],
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
        self.targets
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
fn unit() -> f64 {
    (RandomState::new().hash_one(Instant::now()) >> 11) as f64 / (1u64 << 53) as f64
}

fn run_probes(targets: Vec<Target>, tx: mpsc::Sender<Outcome>, stop: Arc<AtomicBool>) {
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
        for (index, t) in targets.into_iter().enumerate() {
            let (tx, stop) = (tx.clone(), stop.clone());
            tokio::spawn(async move {
                // The first check starts within the jitter share of the interval, so the
                // first round is quick and checks start spread out.
                let spread = t.timing.interval.mul_f64(t.timing.jitter * unit());
                tokio::time::sleep(spread).await;
                while !stop.load(Ordering::Relaxed) {
                    let began = tokio::time::Instant::now();
                    let result = probe::run(&t.probe, t.addr, t.timing.timeout).await;
                    if tx.send(Outcome { index, result }).is_err() {
                        return;
                    }
                    let j = t.timing.jitter * (2.0 * unit() - 1.0);
                    let wait = t.timing.interval.mul_f64(1.0 + j);
                    tokio::time::sleep_until(began + wait).await;
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
    targets: Vec<Target>,
    tracks: Vec<Track>,
    log: Log,
    /// Services answered fail-open now.
    open: HashSet<u32>,
}

impl Publisher {
    fn serve(
        mut self,
        rx: mpsc::Receiver<Outcome>,
        mut pending: HashSet<usize>,
        first: Arc<(Mutex<bool>, Condvar)>,
        stop: Arc<AtomicBool>,
    ) {
        let began = Instant::now();
        let waiting = pending.len();
        while !stop.load(Ordering::Relaxed) {
            let o = match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(o) => o,
                Err(mpsc::RecvTimeoutError::Timeout) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            };
            let t = &self.targets[o.index];
            let (rise, fall) = (t.timing.rise, t.timing.fall);
            if let Some(v) = self.tracks[o.index].observe(o.result.is_ok(), rise, fall) {
                let health = match v {
                    Verdict::Up => api::Health::Up,
                    Verdict::Down => api::Health::Down,
                    Verdict::Unknown => api::Health::Unchecked,
                };
                let error = o.result.as_ref().err().cloned();
                let why = error.as_ref().map_or(String::new(), |e| format!(": {e}"));
                self.log.event(
                    Event::Health {
                        service: t.service_name.clone(),
                        server: t.server_name.clone(),
                        health,
                        error,
                    },
                    format!(
                        "health: {} is {} for {}{why}",
                        t.server_name,
                        if v == Verdict::Up { "up" } else { "down" },
                        t.service_name
                    ),
                );
                let service = t.service;
                let r = WriteLock::take(&self.pin_dir).and_then(|_lock| self.publish(service));
                if let Err(e) = r {
                    self.log.event(
                        Event::Refused {
                            error: format!("{e:#}"),
                        },
                        format!("writing health verdicts failed: {e:#}"),
                    );
                }
            }
            if pending.remove(&o.index) && pending.is_empty() && waiting > 0 {
                let up = self
                    .tracks
                    .iter()
                    .filter(|t| t.verdict == Verdict::Up)
                    .count();
                let (checks, ms) = (self.tracks.len(), began.elapsed().as_secs_f64() * 1e3);
                self.log.event(
                    Event::FirstRound {
                        checks,
                        up,
                        down: checks - up,
                        ms,
                    },
                    format!(
                        "health: first round of {checks} checks done in {ms:.0} ms: {up} up, {} \
                         down",
                        checks - up
                    ),
                );
                let (done, cv) = &*first;
                *done
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = true;
                cv.notify_all();
            }
        }
    }

    /// Writes one service's mask if the kernel's differs. The caller holds the write lock.
    fn publish(&mut self, service: u32) -> Result<()> {
        let of: Vec<(&Target, Verdict)> = self
            .targets
            .iter()
            .zip(&self.tracks)
            .filter(|(t, _)| t.service == service)
            .map(|(t, k)| (t, k.verdict))
            .collect();
        let (mask, open) = mask(&of);
        let name = of
            .first()
            .map_or(String::new(), |(t, _)| t.service_name.clone());
        if open != self.open.contains(&service) {
            let what = if open {
                "every server is down by its checks: answering with all of them (fail-open)"
            } else {
                "a server is up again: fail-open ends"
            };
            self.log.event(
                Event::FailOpen {
                    service: name.clone(),
                    open,
                },
                format!("health: {name}: {what}"),
            );
            if open {
                self.open.insert(service);
            } else {
                self.open.remove(&service);
            }
        }
        if self.maps.health(service)? != mask {
            self.maps.set_health(service, &mask)?;
        }
        Ok(())
    }
}
