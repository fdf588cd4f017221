//! `run`: computes, applies, then keeps the kernel equal to the inputs. On a changed file
//! or SIGHUP it recomputes and rewrites only the decisions that changed; when only RTT
//! files changed, only the prefixes under the changed measurements are recomputed. When a
//! server goes down or comes back up (`server set`, by anyone), the decisions are sorted
//! again over the servers that are up: the kernel skips a down server at once, and this
//! makes the table converge to DistributedDirector's sort over what is available. A bad
//! config or input is logged and the kernel keeps the last good decisions. Stops on SIGINT
//! or SIGTERM.
//!
//! Half-written inputs: a changed file is read only once its size, mtime and inode have
//! stayed the same for the settle interval, and a change that would remove more than
//! `--max-removal-share` of the services, servers, decisions or an input's records is
//! refused (see [`super::guard`]) until the operator confirms it with SIGUSR1.
//!
//! Other writers (CLI commands) may change the maps at any time: every read-modify-write
//! here holds the pin directory's [`WriteLock`]. Computations run without it, and are
//! redone if the ids or server states they were made for changed meanwhile.

use std::{
    collections::{HashMap, HashSet},
    path::{Path, PathBuf},
    sync::atomic::{AtomicBool, Ordering},
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use anyhow::{anyhow, bail, Context, Result};
use director_common::maps::Decision;
use ipnet::IpNet;

use director_plan::compile::{diff, replace_subtree, Diff, Table};
use director_plan::data::{load_rtt, Data};
use director_plan::decide::{compute, plans, subtree, Computed, Ids, Unavailable};
use director_plan::guard::{self, Refusal, Removal};

use super::apply::{assign_ids, overlaid, publish_fronts, sync, update, write_objects, Overlay};
use super::checks::health_plan;
use super::config::Config;
use super::demand::config::DemandConfig;
use super::demand::Demand;
use super::live::{self, Live, SUBTREE_LIMIT};
use crate::api::{self, Event, Log};
use crate::dns;
use crate::health::{self, Runner, Shared};
use crate::kernel::{DecisionChange, Maps, TableSource, WriteLock};
use crate::metrics;
use crate::redirect;

/// How `run` behaves, from its command line.
#[derive(Clone, Debug)]
pub struct Options {
    /// How often the input files and the servers' states are looked at.
    pub poll: Duration,
    /// How long a changed file must stay unchanged before it is read.
    pub settle: Duration,
    /// The largest share (0..=1) of services, servers, decisions or an input's records a
    /// change may remove without confirmation.
    pub max_removal_share: f64,
    /// Let the first apply remove more than that (a restart that confirms a removal).
    pub accept_removal: bool,
    pub log: Log,
}

/// Writes one service's changed entries (through capacity spill's overrides) and logs
/// them.
fn write_diff(
    m: &mut Maps,
    log: Log,
    service: u32,
    name: &str,
    under: Option<IpNet>,
    d: &Diff,
    over: Overlay<'_>,
) -> Result<()> {
    if d.is_empty() {
        return Ok(());
    }
    let put = overlaid(service, &d.put, over);
    m.apply_decisions(DecisionChange {
        service,
        put: &put,
        delete: &d.delete,
    })?;
    let (rewritten, deleted) = (d.put.len(), d.delete.len());
    let at = under.map_or(String::new(), |p| format!(" {p}:"));
    log.event(
        Event::Changed {
            service: name.to_string(),
            prefix: under,
            rewritten,
            deleted,
        },
        format!("{name}:{at} {rewritten} entries rewritten, {deleted} deleted"),
    );
    Ok(())
}

/// Each service's entries, as `publish_fronts` takes them.
fn tables_of(c: &Computed) -> impl Iterator<Item = (u32, &[(IpNet, Decision)])> {
    c.tables.iter().map(|(id, _, t)| (*id, &t.entries[..]))
}

/// Files whose change means a recompute: the config and every input it names.
pub fn watched(path: &Path, cfg: &Config) -> Vec<PathBuf> {
    let mut v = vec![path.to_path_buf()];
    v.extend(
        cfg.plan
            .geo
            .database
            .iter()
            .chain(&cfg.plan.geo.locations)
            .chain(&cfg.plan.geo.graph)
            .cloned(),
    );
    for s in &cfg.plan.sites {
        v.extend(s.bgp.iter().cloned());
    }
    v.extend(cfg.plan.rtt.files.iter().cloned());
    v
}

/// What tells a file changed: its inode (a rename onto it), size and mtime.
pub type Stamp = Option<(u64, u64, u64, SystemTime)>;

pub fn stamps(files: &[PathBuf]) -> Vec<Stamp> {
    use std::os::unix::fs::MetadataExt;
    files
        .iter()
        .map(|f| {
            let m = std::fs::metadata(f).ok()?;
            Some((m.dev(), m.ino(), m.len(), m.modified().ok()?))
        })
        .collect()
}

/// Whether every file that changed since `before` is another inode now (replaced by a
/// rename, or deleted and made again).
fn all_renamed(before: &[Stamp], now: &[Stamp]) -> bool {
    before.iter().zip(now).all(|(b, n)| match (b, n) {
        (Some(b), Some(n)) => b == n || (b.0, b.1) != (n.0, n.1),
        (a, b) => a == b,
    })
}

/// Waits until none of `files` changes over one `settle` interval: a file still being
/// written is not read half-way (a writer that renames a finished file into place never
/// makes this wait more than once). Bounded: after `max(5 s, 4 x settle)` the files are
/// read as they are and the removal guard has the last word. Files whose mtime is already
/// a `settle` interval old have stayed the same that long: no wait (start-up on inputs
/// written long ago). Returns their stamps then.
fn settled(files: &[PathBuf], mut last: Vec<Stamp>, settle: Duration) -> Vec<Stamp> {
    let now = SystemTime::now();
    let quiet = |s: &Stamp| {
        s.is_some_and(|(.., mtime)| now.duration_since(mtime).is_ok_and(|age| age >= settle))
    };
    if last.iter().all(quiet) {
        return last;
    }
    let limit = Instant::now() + (4 * settle).max(Duration::from_secs(5));
    while Instant::now() < limit && !STOP.load(Ordering::Relaxed) {
        std::thread::sleep(settle);
        let now = stamps(files);
        if now == last {
            break;
        }
        last = now;
    }
    last
}

/// Computes, applies, then keeps the kernel equal to the inputs: on a changed file or
/// SIGHUP it recomputes and rewrites only the decisions that changed. When only RTT files
/// changed, only the prefixes under the changed measurements are recomputed. A bad config
/// or input is logged and the kernel keeps the last good decisions; so is a change that
/// removes too much, until SIGUSR1 confirms it. Stops on SIGINT/SIGTERM.
/// `run --json`: log lines are JSON objects with an `event` key.
pub fn run(path: &Path, pin_dir: &Path, o: &Options) -> Result<()> {
    if !(0.0..=1.0).contains(&o.max_removal_share) {
        bail!(
            "--max-removal-share {} is not from 0 to 1",
            o.max_removal_share
        );
    }
    let log = o.log;
    install_signals();
    raise_fd_limit();
    // A config (and then its inputs) being written as run starts is read once it is whole.
    let config = [path.to_path_buf()];
    settled(&config, stamps(&config), o.settle);
    let cfg = Config::load(path)?;
    let files = watched(path, &cfg);
    settled(&files, stamps(&files), o.settle);
    let mut m = Maps::open(pin_dir)?;
    // The zones' listeners bind first: an address the host does not have is an error before
    // anything is written. Until the first apply they answer from what the kernel holds.
    let dns = if cfg.zones.is_empty() {
        None
    } else {
        let zones = cfg.build_zones(cfg.zone_serial())?;
        let server = dns::Server::start(pin_dir, zones, dns::PORT)?;
        let addrs: Vec<String> = server.addresses.iter().map(ToString::to_string).collect();
        log.event(
            Event::Listening {
                addresses: addrs.clone(),
            },
            format!("answering the zones on {} (UDP, TCP)", addrs.join(", ")),
        );
        Some(server)
    };
    // Checks start before the data is read (seconds at full scale), so their first round
    // overlaps it; nothing is published before that round is complete.
    let shared = Shared::default();
    let checks = start_checks(pin_dir, &m, &cfg, shared.clone(), log)?;
    // Routers' BMP sessions and the agents' polls start before the files are read, so
    // that the routers' tables come in meanwhile.
    let mut live = Live::start(&cfg.plan, log)?;
    let mut data = Data::load(&cfg.plan)?;
    if let Some(l) = &mut live {
        // On a restart the kernel holds the last decisions: they stay until the routers
        // have sent their tables again (or their hold time passed), rather than being
        // replaced by decisions made without them.
        if !m.services()?.is_empty() && !l.bgp_ready() {
            log.event(
                Event::Refused {
                    error: "waiting for BMP routers".into(),
                },
                format!(
                    "keeping the kernel's decisions until the BMP routers have sent their \
                     tables (at most {} s)",
                    cfg.plan.bgp.hold
                ),
            );
            while !l.bgp_ready() && !stopping() {
                l.wait(Duration::from_millis(100));
            }
        }
        l.overlay(&mut data);
    }
    if let Some(r) = &checks {
        let limit = r.first_round_limit();
        if !r.wait_first_round(limit) {
            log.event(
                Event::Refused {
                    error: "first round incomplete".into(),
                },
                format!(
                    "health: the first round of checks did not finish in {} ms; servers \
                     not checked yet stay out",
                    limit.as_millis()
                ),
            );
        }
    }
    let (lock, ids, down, computed) =
        compute_for_kernel(&m, pin_dir, &cfg, &data, &shared, &Held::new())?;
    // On a restart, what the kernel holds is the last applied state; a config cut short
    // since would drop its services and servers.
    let removals = guard::removals_from_kernel(
        m.services()?.into_iter().map(|s| s.name),
        m.servers()?.into_iter().map(|s| s.name),
        &cfg.plan,
    );
    let share = (!o.accept_removal).then_some(o.max_removal_share);
    guard::check(&removals, share).map_err(|e| {
        anyhow!(
            "refusing to start on {}: {e}, or start with --accept-removal",
            path.display()
        )
    })?;
    let t = Instant::now();
    // Only the difference to what the kernel holds: a restart on the same inputs writes
    // nothing and queries are answered throughout.
    let written = sync(&mut m, &cfg, &computed, &ids)?;
    drop(lock);
    // The first hops are waited for (a neighbour being resolved takes milliseconds); later
    // ones are looked at on each poll and never block it.
    let mut hops = Hopper::default();
    hops.follow(&mut m, pin_dir, log, Duration::from_secs(1));
    if o.accept_removal {
        accepted(log, "--accept-removal", &removals);
    }
    let entries = computed
        .tables
        .iter()
        .map(|t| t.2.entries.len())
        .sum::<usize>();
    let saved = computed.tables.iter().map(|t| t.2.saved).sum::<usize>();
    let (prefixes, load_s, compute_s, apply_s) = (
        computed.prefixes,
        data.load_time.as_secs_f64(),
        computed.seconds,
        t.elapsed().as_secs_f64(),
    );
    log.event(
        Event::Applied {
            prefixes,
            entries,
            written,
            saved,
            load_s,
            compute_s,
            apply_s,
        },
        format!(
            "{prefixes} prefixes, {entries} entries ({saved} saved), {written} entries written \
             in {load_s:.1} s read + {compute_s:.1} s compute + {apply_s:.1} s apply"
        ),
    );
    let table = metrics::SharedTable::default();
    let http = start_http(pin_dir, &cfg, log)?;
    let (explain_ask, explains) = std::sync::mpsc::channel();
    let (run_ask, asked) = std::sync::mpsc::channel();
    let sources = metrics::Sources {
        pin_dir: pin_dir.to_path_buf(),
        health: shared.clone(),
        table: table.clone(),
        zones: dns.as_ref().map(|d| Arc::clone(&d.stats)),
        http: http.as_ref().map(|h| h.1.clone()),
        explain: Some(explain_ask),
        ask: Some(run_ask),
    };
    let ui = cfg.ui.as_ref();
    let guard = crate::web::Guard::new(&cfg.web).context("[web]")?;
    let shared_listener = matches!((&cfg.metrics, ui), (Some(m), Some(u)) if m.listen == u.listen);
    if let Some(mc) = &cfg.metrics {
        let serves = metrics::Serves {
            metrics: true,
            ui: ui.filter(|_| shared_listener).map(|u| u.refresh),
        };
        metrics::serve(mc.listen, sources.clone(), serves, Arc::clone(&guard))?;
    }
    if let Some(u) = ui.filter(|_| !shared_listener) {
        let serves = metrics::Serves {
            metrics: false,
            ui: Some(u.refresh),
        };
        metrics::serve(u.listen, sources, serves, Arc::clone(&guard))?;
    }
    if let Some(u) = ui {
        log.event(
            Event::UiListening { listen: u.listen },
            format!("the map page on {}://{}/", guard.scheme(), u.listen),
        );
    }
    let cfg_demand = cfg.demand.clone();
    let mut state = State {
        dns,
        files,
        cfg,
        data,
        computed,
        ids,
        down,
        log,
        pin_dir: pin_dir.to_path_buf(),
        checks,
        shared,
        table,
        http: http.map(|h| h.0),
        live,
        explains,
        asked,
        demand: Demand::new(pin_dir, &cfg_demand, log),
        held: Held::new(),
        atlas: Default::default(),
        resign_failed: None,
    };
    state.note_table(compute_s);
    let mut seen = stamps(&state.files);
    let mut looked = Instant::now();
    let mut demand_at = Instant::now();
    // The first cycle takes the starting counts.
    if let Err(e) = state.demand_cycle(&mut m) {
        log.event(
            Event::Refused {
                error: format!("{e:#}"),
            },
            format!("demand: reading the counters failed: {e:#}"),
        );
    }
    while !STOP.load(Ordering::Relaxed) {
        let mut now = stamps(&state.files);
        let hupped = HUP.swap(false, Ordering::Relaxed);
        let confirmed = ACCEPT.swap(false, Ordering::Relaxed);
        if now == seen && !hupped && !confirmed {
            state.answer_explains();
            state.answer_asks(&mut m);
            state.demand.drain();
            if demand_at.elapsed().as_secs_f64() >= state.demand.cfg.interval {
                demand_at = Instant::now();
                if let Err(e) = state.demand_cycle(&mut m) {
                    log.event(
                        Event::Refused {
                            error: format!("{e:#}"),
                        },
                        format!("demand: the cycle failed: {e:#}"),
                    );
                }
            }
            if let Err(e) = state.follow_live(&mut m) {
                log.event(
                    Event::Refused {
                        error: format!("{e:#}"),
                    },
                    format!("taking a live input's change failed: {e:#}"),
                );
            }
            if looked.elapsed() < o.poll {
                match &state.live {
                    Some(l) => l.wait(live::DEBOUNCE.min(o.poll)),
                    None => std::thread::sleep(o.poll.saturating_sub(looked.elapsed())),
                }
                continue;
            }
            looked = Instant::now();
            state.note_live();
            // Queries to an address the host gained are answered from the next poll on;
            // to one it lost, passed to the host.
            if let Err(e) = follow_addresses(&mut m, pin_dir) {
                log.event(
                    Event::Refused {
                        error: format!("{e:#}"),
                    },
                    format!("updating the edge's addresses failed: {e:#}"),
                );
            }
            hops.follow(&mut m, pin_dir, log, Duration::ZERO);
            state.follow_signatures(log);
            if let Err(e) = state.follow_server_states(&mut m) {
                log.event(
                    Event::Refused {
                        error: format!("{e:#}"),
                    },
                    format!("re-sorting after a server state change failed: {e:#}"),
                );
            }
            continue;
        }
        // A file renamed into place (another inode) was written whole before it got its
        // name: no need to wait. One written in place may still be being written.
        if now != seen && !all_renamed(&seen, &now) {
            now = settled(&state.files, now, o.settle);
        }
        let changed: Vec<PathBuf> = state
            .files
            .iter()
            .zip(now.iter().zip(&seen))
            .filter(|(_, (a, b))| a != b)
            .map(|(f, _)| f.clone())
            .collect();
        let only_rtt = !hupped
            && !confirmed
            && !changed.is_empty()
            && changed.iter().all(|f| state.cfg.plan.rtt.files.contains(f));
        if confirmed {
            if let Some(l) = &mut state.live {
                l.confirmed = true;
            }
        }
        // SIGUSR1 is the operator's confirmation: this one recompute may remove anything.
        let share = (!confirmed).then_some(o.max_removal_share);
        let t = Instant::now();
        let r = if only_rtt {
            state.rtt_changed(&mut m, share)
        } else {
            Err(anyhow!("full"))
        };
        let r = match r {
            Ok(()) => Ok(()),
            Err(e) if e.is::<Refusal>() => Err(e),
            Err(_) => recompute(path, &mut state, &mut m, share),
        };
        match r {
            Ok(()) => {
                let ms = t.elapsed().as_secs_f64() * 1e3;
                log.event(
                    Event::Updated { ms },
                    format!("up to date again in {ms:.0} ms"),
                );
            }
            Err(e) if e.is::<Refusal>() => {
                let what = if changed.is_empty() {
                    "the inputs (reloaded on SIGHUP)".to_string()
                } else {
                    let names: Vec<String> =
                        changed.iter().map(|f| f.display().to_string()).collect();
                    names.join(", ")
                };
                log.event(
                    Event::Refused {
                        error: format!("{e:#}"),
                    },
                    format!(
                        "keeping the last good decisions: refusing the change to {what}: {e:#}"
                    ),
                );
            }
            Err(e) => log.event(
                Event::Refused {
                    error: format!("{e:#}"),
                },
                format!("keeping the last good decisions: {e:#}"),
            ),
        }
        seen = stamps(&state.files);
    }
    Ok(())
}

/// Logs a removal beyond the share that the operator confirmed (`how`).
fn accepted(log: Log, how: &str, removals: &[Removal]) {
    let removed = guard::nonzero(removals);
    if removed.is_empty() {
        return;
    }
    log.event(
        Event::Accepted {
            removed: removed.clone(),
        },
        format!("removal confirmed by {how}: {}", removed.join(", ")),
    );
}

/// Computes `cfg` for the kernel as it is, and returns holding the write lock, so that the
/// ids and server states the computation assumed are still true while it is written. The
/// computation (seconds at full scale) runs without the lock, so CLI writers are not kept
/// waiting for it; if one of them changed ids or server states meanwhile it is redone, the
/// last time under the lock.
fn compute_for_kernel(
    m: &Maps,
    pin_dir: &Path,
    cfg: &Config,
    data: &Data,
    shared: &Shared,
    held: &Held,
) -> Result<(WriteLock, Ids, Unavailable, Computed)> {
    const UNLOCKED_TRIES: usize = 2;
    for attempt in 0..=UNLOCKED_TRIES {
        let early = if attempt == UNLOCKED_TRIES {
            Some(WriteLock::take(pin_dir)?)
        } else {
            None
        };
        let ids = assign_ids(m, cfg)?;
        let down = down_servers(m, cfg, &ids, shared, held)?;
        let computed = compute(&cfg.plan, data, &ids, &down)?;
        let lock = match early {
            Some(l) => l,
            None => WriteLock::take(pin_dir)?,
        };
        if assign_ids(m, cfg)? == ids && down_servers(m, cfg, &ids, shared, held)? == down {
            return Ok((lock, ids, down, computed));
        }
    }
    bail!("the kernel's servers and services kept changing under the lock")
}

/// What `run` keeps between changes.
struct State {
    cfg: Config,
    data: Data,
    computed: Computed,
    ids: Ids,
    /// The config's servers that get no new clients: left out of the sort.
    down: Unavailable,
    files: Vec<PathBuf>,
    log: Log,
    pin_dir: PathBuf,
    /// The health checks, when the config has any.
    checks: Option<Runner>,
    /// What they found, for the metrics endpoint.
    shared: Shared,
    /// The table's size and last recompute, for the metrics endpoint.
    table: metrics::SharedTable,
    /// The zones' listeners, when the config has zones.
    dns: Option<dns::Server>,
    /// What the HTTP redirector reads from the config, when `[http]` is configured.
    http: Option<redirect::SharedSettings>,
    /// BGP over BMP and RTT agents, when the config has them.
    live: Option<Live>,
    /// `/explain` asked on the metrics listener.
    explains: std::sync::mpsc::Receiver<metrics::ExplainQuery>,
    /// `/demand` and `/impact` asked there.
    asked: std::sync::mpsc::Receiver<metrics::RunAsked>,
    /// Counted demand, capacity spill and replicas.
    demand: Demand,
    /// The replicas that hold their service now (the others are out of its answers).
    held: Held,
    /// The map page's cells, until the table changes.
    atlas: super::atlas::Cache,
    /// When signing the zones anew last failed (tried again a minute later).
    resign_failed: Option<Instant>,
}

/// Starts the HTTP redirector when the config has `[http]` (its listen addresses are read
/// once, here; hostnames and trusted proxies on every reload).
fn start_http(
    pin_dir: &Path,
    cfg: &Config,
    log: Log,
) -> Result<Option<(redirect::SharedSettings, Arc<redirect::Counters>)>> {
    let Some(h) = &cfg.http else { return Ok(None) };
    let listen = h.addresses()?;
    let settings = redirect::SharedSettings::new(cfg.redirect()?.into());
    let counters = Arc::<redirect::Counters>::default();
    redirect::serve(&listen, pin_dir, settings.clone(), counters.clone())?;
    let list: Vec<String> = listen.iter().map(ToString::to_string).collect();
    log.event(
        Event::HttpListening {
            listen: listen.clone(),
        },
        format!("HTTP redirects on {}", list.join(", ")),
    );
    Ok(Some((settings, counters)))
}

/// Starts the config's health checks (none: `None`), on the ids the kernel has or will
/// give its servers and services.
fn start_checks(
    pin_dir: &Path,
    m: &Maps,
    cfg: &Config,
    shared: Shared,
    log: Log,
) -> Result<Option<Runner>> {
    let ids = assign_ids(m, cfg)?;
    let r = Runner::start(pin_dir, health_plan(cfg, &ids), shared, log)?;
    Ok((!r.plan.is_empty()).then_some(r))
}

/// Makes the kernel's host addresses the host's (see `kernel::host`), under the write lock
/// only when they differ.
pub fn follow_addresses(m: &mut Maps, pin_dir: &Path) -> Result<()> {
    let now = crate::kernel::host::addresses()?;
    let have: Vec<std::net::IpAddr> = m
        .local_addresses()?
        .into_iter()
        .filter(|(_, f)| f & director_common::maps::LOCAL_HOST != 0)
        .map(|(a, _)| a)
        .collect();
    if have != now {
        let _lock = WriteLock::take(pin_dir)?;
        m.set_host_addresses(&now)?;
    }
    Ok(())
}

/// Keeps `DIR_HOPS` current for the VIPs in the kernel: at most once a second, and each
/// problem logged when it starts, not on every look.
#[derive(Default)]
pub struct Hopper {
    resolver: Option<crate::kernel::nexthop::Resolver>,
    last: Option<Instant>,
    problems: Vec<String>,
}

impl Hopper {
    pub fn follow(&mut self, m: &mut Maps, pin_dir: &Path, log: Log, wait: Duration) {
        if self
            .last
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            return;
        }
        self.last = Some(Instant::now());
        let problems = match self.refresh(m, pin_dir, wait) {
            Ok(p) => p,
            Err(e) => vec![format!("{e:#}")],
        };
        for p in problems.iter().filter(|p| !self.problems.contains(p)) {
            log.event(
                Event::Refused { error: p.clone() },
                format!("forwarding to a VIP's server: {p}"),
            );
        }
        self.problems = problems;
    }

    fn refresh(&mut self, m: &mut Maps, pin_dir: &Path, wait: Duration) -> Result<Vec<String>> {
        use crate::kernel::hops;
        let want = hops::Want::of(&m.steer().vips()?);
        if !want.any() {
            return Ok(Vec::new());
        }
        if self.resolver.is_none() {
            self.resolver = Some(crate::kernel::nexthop::Resolver::new()?);
        }
        let Some(r) = self.resolver.as_mut() else {
            return Ok(Vec::new());
        };
        let servers = m.servers()?;
        let _lock = WriteLock::take(pin_dir)?;
        hops::refresh(r, m.steer_mut(), &servers, want, wait)
    }
}

/// Whether two configs read the same inputs (then `impact` decides over the data `run`
/// holds, live routes included, instead of reading the files again).
fn same_inputs(a: &director_plan::config::Config, b: &director_plan::config::Config) -> bool {
    a.geo == b.geo
        && a.rtt == b.rtt
        && a.sites.len() == b.sites.len()
        && a.sites.iter().zip(&b.sites).all(|(x, y)| {
            x.bgp == y.bgp
                && x.bgp_peer == y.bgp_peer
                && x.igp_cost == y.igp_cost
                && x.asn == y.asn
                && x.lat == y.lat
                && x.lon == y.lon
                && x.location == y.location
                && x.name == y.name
                && x.bmp_router == y.bmp_router
        })
}

/// (service, server) names of the replicas that hold their service.
pub type Held = std::collections::BTreeSet<(String, String)>;

/// The config's servers (by kernel id) that the kernel holds out: set down or drained,
/// and per service, out by health checks.
fn down_servers(
    m: &Maps,
    cfg: &Config,
    ids: &Ids,
    shared: &Shared,
    held: &Held,
) -> Result<Unavailable> {
    let ours: HashSet<u16> = ids.servers.iter().copied().collect();
    let servers = m
        .servers()?
        .into_iter()
        .filter(|s| (!s.up || s.drained) && ours.contains(&s.id))
        .map(|s| s.id)
        .collect();
    let mut health = HashMap::new();
    for (svc, &id) in cfg.services.iter().zip(&ids.services) {
        if svc.health.is_none() && svc.load_threshold.is_none() {
            continue;
        }
        let mask = m.health(id)?;
        let out: HashSet<u16> = ours.iter().copied().filter(|&s| mask.is_out(s)).collect();
        if !out.is_empty() {
            health.insert(id, out);
        }
    }
    // A replica candidate that does not hold its service is no server of it yet.
    for (svc, &id) in cfg.services.iter().zip(&ids.services) {
        for r in &svc.replicas {
            if held.contains(&(svc.name.clone(), r.clone())) {
                continue;
            }
            if let Some(i) = cfg.servers.iter().position(|s| &s.name == r) {
                health.entry(id).or_default().insert(ids.servers[i]);
            }
        }
    }
    let services: HashSet<u32> = ids.services.iter().copied().collect();
    let portions = shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .auto
        .iter()
        .filter(|((svc, srv), _)| services.contains(svc) && ours.contains(srv))
        .map(|(k, v)| (*k, *v))
        .collect();
    Ok(Unavailable {
        servers,
        health,
        portions,
    })
}

/// How long the states must stay unchanged after a change before `run` re-sorts, so that
/// a burst of changes (a fleet flapping, a site going dark, an operator draining servers
/// one command after another) costs one re-sort.
const COALESCE: Duration = Duration::from_millis(200);

/// The longest a burst may postpone its re-sort: states that never settle are sorted
/// anyway, at this pace.
const COALESCE_MAX: Duration = Duration::from_secs(1);

impl State {
    /// Records the table's size and the time of this write for the metrics.
    fn note_table(&self, seconds: f64) {
        let entries = self.computed.tables.iter().map(|t| t.2.entries.len()).sum();
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        *self
            .table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = metrics::Table {
            entries,
            last_recompute: now,
            last_recompute_seconds: seconds,
            fleet: None,
            live: self.live.as_ref().map(|l| l.stats(&self.cfg.plan)),
            demand: Some(self.demand.report().clone()),
            refused: Default::default(),
        };
    }

    /// The live inputs' state for the metrics (sessions come and go between changes).
    fn note_live(&self) {
        if let Some(l) = &self.live {
            self.table
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .live = Some(l.stats(&self.cfg.plan));
        }
    }

    /// Re-sorts every decision when a server went down or came back up since the last
    /// sort, and writes what changed.
    fn follow_server_states(&mut self, m: &mut Maps) -> Result<()> {
        if down_servers(m, &self.cfg, &self.ids, &self.shared, &self.held)? == self.down {
            return Ok(());
        }
        // Wait for a quiet window, not a fixed one: a change that lands just after the
        // first look restarts the wait instead of costing a re-sort of its own.
        let first = Instant::now();
        let mut down = down_servers(m, &self.cfg, &self.ids, &self.shared, &self.held)?;
        loop {
            std::thread::sleep(COALESCE);
            let now = down_servers(m, &self.cfg, &self.ids, &self.shared, &self.held)?;
            let settled = now == down;
            down = now;
            if settled || first.elapsed() >= COALESCE_MAX {
                break;
            }
        }
        if down == self.down {
            return Ok(());
        }
        let t = Instant::now();
        let new = compute(&self.cfg.plan, &self.data, &self.ids, &down)?;
        let _lock = WriteLock::take(&self.pin_dir)?;
        if down_servers(m, &self.cfg, &self.ids, &self.shared, &self.held)? != down {
            // Changed again while sorting: the next look sorts for the newest states.
            return Ok(());
        }
        let mut rewritten = 0;
        let dm = &self.demand;
        for ((id, name, old), (_, _, t)) in self.computed.tables.iter().zip(&new.tables) {
            let d = diff(&old.entries, &t.entries);
            rewritten += d.put.len() + d.delete.len();
            write_diff(m, self.log, *id, name, None, &d, &|sv, d| {
                dm.effective(sv, d)
            })?;
        }
        publish_fronts(m, tables_of(&new), TableSource::Own)?;
        let name_of: HashMap<u16, &str> = self
            .ids
            .servers
            .iter()
            .zip(&self.cfg.servers)
            .map(|(&id, s)| (id, s.name.as_str()))
            .collect();
        let service_of: HashMap<u32, &str> = self
            .ids
            .services
            .iter()
            .zip(&self.cfg.services)
            .map(|(&id, s)| (id, s.name.trim_end_matches('.')))
            .collect();
        let mut names: Vec<String> = down
            .servers
            .iter()
            .map(|id| name_of[id].to_string())
            .collect();
        names.sort();
        let mut health_out: Vec<api::ServiceServer> = down
            .health
            .iter()
            .flat_map(|(svc, out)| {
                out.iter().map(|s| api::ServiceServer {
                    service: service_of[svc].to_string(),
                    server: name_of[s].to_string(),
                })
            })
            .collect();
        health_out.sort();
        let portions: Vec<String> = down
            .portions
            .iter()
            .map(|((svc, srv), p)| format!("{} {p} for {}", name_of[srv], service_of[svc]))
            .collect();
        let portions = if portions.is_empty() {
            String::new()
        } else {
            format!("; auto portions: {}", portions.join(", "))
        };
        self.computed = new;
        self.down = down;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        self.note_table(ms / 1e3);
        let mut what: Vec<String> = names.clone();
        what.extend(
            health_out
                .iter()
                .map(|h| format!("{} for {}", h.server, h.service)),
        );
        self.log.event(
            Event::Resorted {
                down: names,
                health_out,
                entries: rewritten,
                ms,
            },
            format!(
                "re-sorted without the servers that are out ({}){portions}: {rewritten} \
                 entries changed in {ms:.0} ms",
                if what.is_empty() {
                    "none".to_string()
                } else {
                    what.join(", ")
                }
            ),
        );
        Ok(())
    }

    /// One demand cycle: rates, spill and replicas; writes the groups whose override came
    /// or went, and lets the next look at the servers' states take replicas in or out.
    fn demand_cycle(&mut self, m: &mut Maps) -> Result<()> {
        let mut verdicts: HashMap<(u32, u16), Option<bool>> = HashMap::new();
        for (svc, &sid) in self.cfg.services.iter().zip(&self.ids.services) {
            if svc.replicas.is_empty() {
                continue;
            }
            let mask = m.health(sid)?;
            for r in &svc.replicas {
                if let Some(i) = self.cfg.servers.iter().position(|s| &s.name == r) {
                    let id = self.ids.servers[i];
                    verdicts.insert((sid, id), mask.verdict(id));
                }
            }
        }
        let verdict = |svc: u32, srv: u16| verdicts.get(&(svc, srv)).copied().flatten();
        let ctx = super::demand::Ctx {
            cfg: &self.cfg,
            data: &self.data,
            computed: &self.computed,
            ids: &self.ids,
            verdict: &verdict,
            log: self.log,
        };
        let out = self.demand.cycle(m, &ctx)?;
        if let Some(l) = &mut self.live {
            let r = self.demand.report();
            l.probe_demand(
                r.prefixes
                    .iter()
                    .filter(|p| p.samples > 0)
                    .map(|p| p.prefix)
                    .collect(),
            );
        }
        self.table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .demand = Some(self.demand.report().clone());
        if out.replicas_changed {
            self.held = self.demand.held(&self.cfg, &self.ids);
        }
        if out.regrouped.is_empty() {
            return Ok(());
        }
        let _lock = WriteLock::take(&self.pin_dir)?;
        let dm = &self.demand;
        for (id, name, t) in &self.computed.tables {
            let put: Vec<(IpNet, Decision)> = t
                .entries
                .iter()
                .filter(|(_, d)| {
                    let s = super::demand::engine::stored(d);
                    out.regrouped.iter().any(|(sv, p)| sv == id && *p == s)
                })
                .copied()
                .collect();
            let d = Diff {
                put,
                delete: Vec::new(),
            };
            write_diff(m, self.log, *id, name, None, &d, &|sv, d| {
                dm.effective(sv, d)
            })?;
        }
        publish_fronts(m, tables_of(&self.computed), TableSource::Own)?;
        Ok(())
    }

    /// Answers `/demand` and `/impact`.
    fn answer_asks(&mut self, m: &mut Maps) {
        while let Ok(q) = self.asked.try_recv() {
            let r = match &q.what {
                metrics::RunQuery::Demand => {
                    serde_json::to_string_pretty(self.demand.report()).map_err(|e| e.to_string())
                }
                metrics::RunQuery::Impact { config, top } => self
                    .impact(m, config, *top)
                    .and_then(|i| Ok(serde_json::to_string_pretty(&i)?))
                    .map_err(|e| format!("{e:#}")),
                metrics::RunQuery::Atlas { service } => self
                    .atlas(service.as_deref())
                    .and_then(|a| Ok(serde_json::to_string(&a)?))
                    .map_err(|e| format!("{e:#}")),
            };
            let _ = q.reply.send(r);
        }
    }

    /// The map page's feed: the table as written (spill's overrides included) over the
    /// client locations.
    fn atlas(&mut self, service: Option<&str>) -> Result<api::Atlas> {
        let dm = &self.demand;
        let tables: Vec<(u32, Vec<(IpNet, Decision)>)> = self
            .computed
            .tables
            .iter()
            .map(|(id, _, t)| (*id, overlaid(*id, &t.entries, &|sv, d| dm.effective(sv, d))))
            .collect();
        let health = self
            .shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let fleet_version = self
            .table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .fleet
            .map(|f| f.version);
        let inputs = super::atlas::Inputs {
            cfg: &self.cfg,
            data: &self.data,
            ids: &self.ids,
            down: &self.down,
            health: &health,
            demand: Some(self.demand.report()),
            fleet_version,
            grid: self.cfg.ui.as_ref().map_or(2.0, |u| u.grid),
        };
        super::atlas::feed(&inputs, &tables, service, &mut self.atlas)
    }

    /// What applying the candidate config `text` would move, weighted by the demand
    /// measured. The candidate comes from a request: its paths are taken relative to the
    /// running config's directory, and it may read only data files the running config
    /// reads, so a request cannot make `run` open (and quote, in an error) any other file.
    fn impact(&self, m: &Maps, text: &str, top: usize) -> Result<api::Impact> {
        let mut cfg = Config::parse(text).context("the candidate config")?;
        cfg.path = self.cfg.path.clone();
        cfg.plan.path = self.cfg.plan.path.clone();
        let dir = self
            .cfg
            .path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        cfg.plan.resolve_paths(&dir);
        // Compared as the files they are (one may be named by two paths); a path that does
        // not resolve is refused with the same words as any other, so the answer does not
        // tell which files exist.
        let real = |p: &PathBuf| std::fs::canonicalize(p).ok();
        let ours: std::collections::BTreeSet<PathBuf> =
            self.cfg.plan.data_files().iter().filter_map(real).collect();
        let foreign = |p: &PathBuf| real(p).is_none_or(|r| !ours.contains(&r));
        if let Some(p) = cfg.plan.data_files().into_iter().find(foreign) {
            bail!(
                "the candidate config reads {}, which the running config does not: \
                 impact reads only the data files run's own config names",
                p.display()
            );
        }
        let fresh;
        let data = if same_inputs(&cfg.plan, &self.cfg.plan) {
            &self.data
        } else {
            fresh = Data::load(&cfg.plan)?;
            &fresh
        };
        let ids = assign_ids(m, &cfg)?;
        let down = down_servers(m, &cfg, &ids, &self.shared, &self.held)?;
        let candidate = compute(&cfg.plan, data, &ids, &down)?;
        let dm = &self.demand;
        let current: Vec<(u32, Vec<(IpNet, Decision)>)> = self
            .computed
            .tables
            .iter()
            .map(|(id, _, t)| (*id, overlaid(*id, &t.entries, &|sv, d| dm.effective(sv, d))))
            .collect();
        super::demand::impact::preview(
            &super::demand::impact::Sides {
                cfg: &self.cfg,
                ids: &self.ids,
                tables: &current,
            },
            &super::demand::impact::Sides {
                cfg: &cfg,
                ids: &ids,
                tables: &candidate
                    .tables
                    .iter()
                    .map(|(id, _, t)| (*id, t.entries.clone()))
                    .collect::<Vec<_>>(),
            },
            &self.demand,
            top,
        )
    }

    /// Answers `/explain` from the data the decisions are made with.
    fn answer_explains(&self) {
        while let Ok(q) = self.explains.try_recv() {
            let r = super::explain_with(&self.cfg, &self.data, &q.service, q.client)
                .map(|mut e| {
                    // The replicas' bonus and state as this run's demand cycles have them.
                    let report = self.demand.report();
                    for r in &mut e.replicas {
                        if let Some(s) = report.replicas.iter().find(|s| {
                            s.server == r.server
                                && s.service.trim_end_matches('.')
                                    == e.service.trim_end_matches('.')
                        }) {
                            r.bonus = Some(s.bonus);
                            r.state = s.state.clone();
                        } else {
                            r.bonus = Some(0.0);
                            r.state = "absent".into();
                        }
                    }
                    e
                })
                .and_then(|e| Ok(serde_json::to_string_pretty(&e)?))
                .map_err(|e| format!("{e:#}"));
            let _ = q.reply.send(r);
        }
    }

    /// Takes the live inputs' changes (debounced) and decides the prefixes under them
    /// again: their subtrees when few, every prefix when many or when a subtree cannot be
    /// done alone (ids or server states changed under it).
    fn follow_live(&mut self, m: &mut Maps) -> Result<()> {
        let Some(live) = &mut self.live else {
            return Ok(());
        };
        let t = Instant::now();
        let ch = live.take(&mut self.data);
        if ch.prefixes.is_empty() {
            return Ok(());
        }
        let mut full = ch.full;
        let entries = if full {
            self.resort_all(m)?
        } else {
            match self.resort_under(m, &ch.prefixes) {
                Ok(n) => n,
                Err(_) => {
                    full = true;
                    self.resort_all(m)?
                }
            }
        };
        let ms = t.elapsed().as_secs_f64() * 1e3;
        self.note_table(ms / 1e3);
        let prefixes = ch.prefixes.len();
        self.log.event(
            Event::Live {
                bgp: ch.bgp,
                rtt: ch.rtt,
                prefixes,
                full,
                entries,
                ms,
            },
            format!(
                "live inputs changed ({} routes, {} RTT measurements): {prefixes} prefixes \
                 decided again{}, {entries} entries written in {ms:.0} ms",
                ch.bgp,
                ch.rtt,
                if full { " (all of them)" } else { "" }
            ),
        );
        Ok(())
    }

    /// Decides `prefixes` (sorted) and what lies under them again, and writes what
    /// changed; the number of entries written or deleted.
    fn resort_under(&mut self, m: &mut Maps, prefixes: &[IpNet]) -> Result<usize> {
        let _lock = WriteLock::take(&self.pin_dir)?;
        if assign_ids(m, &self.cfg)? != self.ids
            || down_servers(m, &self.cfg, &self.ids, &self.shared, &self.held)? != self.down
        {
            bail!("servers or services changed in the kernel");
        }
        let diffs = live::decide_under(
            &self.cfg.plan,
            &self.data,
            &self.ids,
            &self.down,
            &mut self.computed,
            prefixes,
        )?;
        let mut written = 0;
        let dm = &self.demand;
        for ((id, name, _), d) in self.computed.tables.iter().zip(&diffs) {
            written += d.put.len() + d.delete.len();
            write_diff(m, self.log, *id, name, None, d, &|sv, d| {
                dm.effective(sv, d)
            })?;
        }
        publish_fronts(m, tables_of(&self.computed), TableSource::Own)?;
        Ok(written)
    }

    /// Decides every prefix again over the data as it is, and writes what changed.
    fn resort_all(&mut self, m: &mut Maps) -> Result<usize> {
        let (_lock, ids, down, new) = compute_for_kernel(
            m,
            &self.pin_dir,
            &self.cfg,
            &self.data,
            &self.shared,
            &self.held,
        )?;
        if ids != self.ids {
            bail!("the kernel's ids changed: waiting for the next full recompute");
        }
        let mut written = 0;
        let dm = &self.demand;
        for ((id, name, old), (_, _, t)) in self.computed.tables.iter().zip(&new.tables) {
            let d = diff(&old.entries, &t.entries);
            written += d.put.len() + d.delete.len();
            write_diff(m, self.log, *id, name, None, &d, &|sv, d| {
                dm.effective(sv, d)
            })?;
        }
        publish_fronts(m, tables_of(&new), TableSource::Own)?;
        self.computed = new;
        self.down = down;
        Ok(written)
    }

    /// Only RTT files changed: recompute the prefixes under the changed measurements.
    /// A [`Refusal`] refuses the change (too many measurements gone); any other error means
    /// "do a full recompute" (a new prefix, a large subtree, a bad file, ids changed).
    fn rtt_changed(&mut self, m: &mut Maps, share: Option<f64>) -> Result<()> {
        if self.live.is_some() {
            // The files' measurements lie under the agents': the overlay is redone whole.
            bail!("full");
        }
        let t = Instant::now();
        let fresh = load_rtt(&self.cfg.plan)?;
        let before = self.data.summary.rtt_measurements;
        let after = fresh.iter().map(Vec::len).sum();
        guard::check(&[Removal::count("RTT measurements", before, after)], share)?;
        let _lock = WriteLock::take(&self.pin_dir)?;
        if assign_ids(m, &self.cfg)? != self.ids
            || down_servers(m, &self.cfg, &self.ids, &self.shared, &self.held)? != self.down
        {
            bail!("servers or services changed in the kernel");
        }
        let changed = self.data.replace_rtt(fresh);
        let plans = plans(&self.cfg.plan, &self.ids, &self.down)?;
        // Only the outermost changed prefixes: their subtrees hold the rest.
        let mut roots: Vec<IpNet> = Vec::new();
        for p in changed {
            if !roots.last().is_some_and(|r| r.contains(&p)) {
                roots.push(p);
            }
        }
        let mut updates = Vec::new();
        for root in &roots {
            let fresh = subtree(&plans, &self.data, &self.computed.all, root, SUBTREE_LIMIT)
                .context("a changed RTT prefix needs a full recompute")?;
            updates.push((*root, fresh));
        }
        let dm = &self.demand;
        for (root, fresh) in updates {
            for ((id, name, table), new) in self.computed.tables.iter_mut().zip(fresh) {
                let d = replace_subtree(table, &root, &new);
                write_diff(m, self.log, *id, name, Some(root), &d, &|sv, d| {
                    dm.effective(sv, d)
                })?;
            }
        }
        publish_fronts(m, tables_of(&self.computed), TableSource::Own)?;
        self.note_table(t.elapsed().as_secs_f64());
        Ok(())
    }
}

/// Loads everything again and writes what changed, unless it removes more than `share`
/// of what the last applied state had (`None`: the operator confirmed it).
fn recompute(path: &Path, state: &mut State, m: &mut Maps, share: Option<f64>) -> Result<()> {
    let cfg = Config::load(path)?;
    let mut data = Data::load(&cfg.plan)?;
    if let Some(l) = &mut state.live {
        l.reconfigure(&cfg.plan);
        l.overlay(&mut data);
    }
    let (lock, ids, down, new) =
        compute_for_kernel(m, &state.pin_dir, &cfg, &data, &state.shared, &state.held)?;
    let removals = guard::removals(
        &guard::State {
            cfg: &state.cfg.plan,
            data: &state.data,
            prefixes: &state.computed.all,
        },
        &guard::State {
            cfg: &cfg.plan,
            data: &data,
            prefixes: &new.all,
        },
    );
    guard::check(&removals, share)?;
    if share.is_none() {
        accepted(state.log, "SIGUSR1", &removals);
    }
    if cfg.servers != state.cfg.servers || cfg.services != state.cfg.services {
        // In place, like every other change: only one table ever holds entries, and each
        // address keeps its old answer or gets its new one at every moment.
        let dm = &state.demand;
        let written = update(m, &cfg, &state.computed, &new, &ids, &|sv, d| {
            dm.effective(sv, d)
        })?;
        let entries = new.tables.iter().map(|t| t.2.entries.len()).sum();
        state.log.event(
            Event::Reconfigured { entries, written },
            format!(
                "servers or services changed: {written} of {entries} entries written or deleted"
            ),
        );
    } else {
        // The same servers and services, but the sections around them may have changed
        // what the kernel holds: `[rrl]`, `[steer]`, or the select mode `default_priority`
        // implies. Each is compared with the kernel and written where it differs.
        write_objects(m, &cfg, &ids)?;
        let before: HashMap<u32, &Table> = state
            .computed
            .tables
            .iter()
            .map(|(id, _, t)| (*id, t))
            .collect();
        let dm = &state.demand;
        for (id, name, t) in &new.tables {
            let d = diff(before.get(id).map_or(&[][..], |t| &t.entries), &t.entries);
            write_diff(m, state.log, *id, name, None, &d, &|sv, d| {
                dm.effective(sv, d)
            })?;
        }
        publish_fronts(m, tables_of(&new), TableSource::Own)?;
    }
    drop(lock);
    let (log, pin_dir) = (state.log, state.pin_dir.clone());
    // New or changed checks start from the kernel's verdicts (the old runner's); new
    // servers of a service are out until their first check.
    let plan = health_plan(&cfg, &ids);
    let mut checks = state.checks.take();
    if checks
        .as_ref()
        .map_or(health::Plan::default(), |r| r.plan.clone())
        != plan
    {
        if let Some(r) = checks.take() {
            r.stop();
        }
        let r = Runner::start(&pin_dir, plan, state.shared.clone(), log)?;
        checks = (!r.plan.is_empty()).then_some(r);
    }
    let dns = follow_zones(state.dns.take(), &cfg, &pin_dir, log)?;
    listeners_kept(&state.cfg, &cfg, log);
    if let Some(h) = &state.http {
        let fresh = cfg.redirect()?;
        *h.write().unwrap_or_else(std::sync::PoisonError::into_inner) = fresh;
    }
    *state = State {
        dns,
        files: watched(path, &cfg),
        cfg,
        data,
        computed: new,
        ids,
        down,
        log,
        pin_dir,
        checks,
        shared: state.shared.clone(),
        table: state.table.clone(),
        http: state.http.take(),
        live: state.live.take(),
        explains: std::mem::replace(&mut state.explains, std::sync::mpsc::channel().1),
        asked: std::mem::replace(&mut state.asked, std::sync::mpsc::channel().1),
        demand: std::mem::replace(&mut state.demand, Demand::idle(&DemandConfig::default())),
        held: std::mem::take(&mut state.held),
        // New inputs may place clients elsewhere with the same table.
        atlas: Default::default(),
        resign_failed: None,
    };
    state.demand.reconfigure(&state.cfg.demand);
    state.note_table(state.computed.seconds);
    Ok(())
}

impl State {
    /// Signs the signed zones anew when their next daily window has begun, and says so
    /// (or why not: the signatures served stay until they expire, and `run` warns while
    /// they hold for less than three days).
    fn follow_signatures(&mut self, log: Log) {
        let Some(server) = &self.dns else { return };
        let now = dns::signed::unix_now();
        let zones = server.zones();
        let signed: Vec<&dns::signed::Signed> = zones
            .all()
            .iter()
            .filter_map(|z| z.signed.as_ref())
            .collect();
        if !signed.iter().any(|s| now >= s.next_at)
            || self
                .resign_failed
                .is_some_and(|t| t.elapsed() < Duration::from_secs(60))
        {
            return;
        }
        match self.cfg.build_zones_at(self.cfg.zone_serial(), now) {
            Ok(z) => {
                let names: Vec<String> = z
                    .all()
                    .iter()
                    .filter(|z| z.signed.is_some())
                    .map(|z| z.origin.to_string())
                    .collect();
                let expires = z
                    .all()
                    .iter()
                    .filter_map(|z| z.signed.as_ref())
                    .map(|s| u64::from(s.window.expiration))
                    .min()
                    .unwrap_or(0);
                server.set_zones(z);
                self.resign_failed = None;
                log.event(
                    Event::Resigned {
                        zones: names.clone(),
                        expires,
                    },
                    format!("zones signed anew for today's window: {}", names.join(", ")),
                );
            }
            Err(e) => {
                self.resign_failed = Some(Instant::now());
                let left = signed
                    .iter()
                    .map(|s| i64::from(s.window.expiration) - now as i64)
                    .min()
                    .unwrap_or(0);
                let warn = if left < 3 * 86_400 {
                    ": WARNING, under 3 days"
                } else {
                    ""
                };
                log.event(
                    Event::Refused {
                        error: format!("{e:#}"),
                    },
                    format!(
                        "signing the zones anew failed, the signatures served hold {:.1} \
                         more days{warn}: {e:#}",
                        left as f64 / 86_400.0
                    ),
                );
            }
        }
    }
}

/// Serves the reloaded config's zones from the next query on (the SOA serial follows the
/// config's mtime). The listen addresses are the start's: new ones need a restart.
fn follow_zones(
    dns: Option<dns::Server>,
    cfg: &Config,
    pin_dir: &Path,
    log: Log,
) -> Result<Option<dns::Server>> {
    let zones = cfg.build_zones(cfg.zone_serial())?;
    let Some(server) = dns else {
        if cfg.zones.is_empty() {
            return Ok(None);
        }
        return dns::Server::start(pin_dir, zones, dns::PORT).map(Some);
    };
    let mut wanted: Vec<std::net::SocketAddr> = zones
        .all()
        .iter()
        .flat_map(|z| {
            z.listen
                .iter()
                .map(|a| std::net::SocketAddr::new(*a, dns::PORT))
        })
        .collect();
    wanted.sort();
    wanted.dedup();
    if wanted != server.addresses {
        log.event(
            Event::Refused {
                error: "zone listen addresses changed".into(),
            },
            format!(
                "the zones' listen addresses changed; still answering on {:?} until run \
                 restarts",
                server.addresses
            ),
        );
    }
    server.set_zones(zones);
    Ok(Some(server))
}

/// `[metrics]` and `[http]` listen where they did at the start (as the zones' listeners
/// do): a reload that moves or adds them says so instead of seeming applied.
fn listeners_kept(old: &Config, new: &Config, log: Log) {
    let metrics = |c: &Config| c.metrics.as_ref().map(|m| m.listen);
    let http = |c: &Config| c.http.as_ref().map(|h| h.addresses().unwrap_or_default());
    let ui = |c: &Config| c.ui.as_ref().map(|u| (u.listen, u.refresh.to_bits()));
    for (section, changed) in [
        ("[metrics] listen", metrics(old) != metrics(new)),
        ("[ui] listen and refresh", ui(old) != ui(new)),
        ("[http] listen", http(old) != http(new)),
    ] {
        if changed {
            log.event(
                Event::Refused {
                    error: format!("{section} changed"),
                },
                format!("{section} changed; the listener stays as it was until run restarts"),
            );
        }
    }
}

/// The listeners (DNS over TCP, HTTP, metrics) and the checks all hold descriptors: the
/// usual soft limit of 1,024 is below what the HTTP listener alone may open, and running
/// out would fail health checks and reloads. Raised to the hard limit, as daemons do.
fn raise_fd_limit() {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a valid rlimit for both calls.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

static HUP: AtomicBool = AtomicBool::new(false);
static ACCEPT: AtomicBool = AtomicBool::new(false);
static STOP: AtomicBool = AtomicBool::new(false);

/// Whether SIGUSR1 (the operator's confirmation) came since the last look; takes it.
pub fn confirmation() -> bool {
    ACCEPT.swap(false, Ordering::Relaxed)
}

/// Whether SIGINT or SIGTERM asked `run` to stop.
pub fn stopping() -> bool {
    STOP.load(Ordering::Relaxed)
}

extern "C" fn on_signal(sig: libc::c_int) {
    // Only stores to atomics: async-signal-safe.
    match sig {
        libc::SIGHUP => HUP.store(true, Ordering::Relaxed),
        libc::SIGUSR1 => ACCEPT.store(true, Ordering::Relaxed),
        _ => STOP.store(true, Ordering::Relaxed),
    }
}

/// `run`'s signal handling, for every role.
pub fn install_signals() {
    for sig in [libc::SIGHUP, libc::SIGUSR1, libc::SIGINT, libc::SIGTERM] {
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Inputs written long ago are read at once; one just written is looked at again one
    /// settle interval later before it is read.
    #[test]
    fn only_recently_written_files_are_waited_for() {
        let dir = std::env::temp_dir().join(format!("director-settle-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temp dir");
        let old = dir.join("old.csv");
        std::fs::write(&old, "192.0.2.0/24,fra,40\n").expect("writing");
        let long_ago = SystemTime::now() - Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(&old)
            .and_then(|f| f.set_modified(long_ago))
            .expect("setting the mtime");
        let files = [old.clone()];
        let t = Instant::now();
        settled(&files, stamps(&files), Duration::from_secs(30));
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "waited for an old file"
        );

        let fresh = dir.join("fresh.csv");
        std::fs::write(&fresh, "192.0.2.0/24,fra,40\n").expect("writing");
        let files = [old, fresh];
        let settle = Duration::from_millis(200);
        let t = Instant::now();
        settled(&files, stamps(&files), settle);
        let waited = t.elapsed();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(waited >= settle, "read a file written just now at once");
    }
}
