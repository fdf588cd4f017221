//! `run`: computes, applies, then keeps the kernel equal to the inputs. On a changed file
//! or SIGHUP it recomputes and rewrites only the decisions that changed; when only RTT
//! files changed, only the prefixes under the changed measurements are recomputed. When a
//! server goes down or comes back up (`server set`, by anyone), the decisions are sorted
//! again over the servers that are up: the kernel skips a down server at once, and this
//! makes the table converge to DistributedDirector's sort over what is available. A bad
//! config or input is logged and the kernel keeps the last good decisions. Stops on SIGINT
//! or SIGTERM.

use std::{
    collections::{HashMap, HashSet},
    path::{Path, PathBuf},
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant, SystemTime},
};

use anyhow::{anyhow, Context, Result};
use ipnet::IpNet;

use super::apply::{assign_ids, sync, update};
use super::compile::{diff, replace_subtree, Diff, Table};
use super::config::Config;
use super::data::Data;
use super::decide::{compute, plans, subtree, Computed, Ids};
use crate::api::{self, Event};
use crate::kernel::{DecisionChange, Maps};

/// How `run` logs its events (on stderr).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Log {
    /// One line of text per event.
    Text,
    /// One [`api::RunEvent`] JSON object per line.
    Json,
}

impl Log {
    fn event(self, event: Event, message: String) {
        match self {
            Log::Text => eprintln!("director-ctl run: {message}"),
            Log::Json => {
                let e = api::RunEvent {
                    version: api::VERSION,
                    event,
                    message,
                };
                match serde_json::to_string(&e) {
                    Ok(line) => eprintln!("{line}"),
                    Err(err) => eprintln!("director-ctl run: {} ({err})", e.message),
                }
            }
        }
    }
}

/// Writes one service's changed entries and logs them.
fn write_diff(
    m: &mut Maps,
    log: Log,
    service: u32,
    name: &str,
    under: Option<IpNet>,
    d: &Diff,
) -> Result<()> {
    if d.is_empty() {
        return Ok(());
    }
    m.apply_decisions(DecisionChange::Update {
        service,
        put: &d.put,
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

/// Files whose change means a recompute: the config and every input it names.
fn watched(path: &Path, cfg: &Config) -> Vec<PathBuf> {
    let mut v = vec![path.to_path_buf()];
    v.extend(
        cfg.geo
            .database
            .iter()
            .chain(&cfg.geo.locations)
            .chain(&cfg.geo.graph)
            .cloned(),
    );
    for s in &cfg.sites {
        v.extend(s.bgp.iter().cloned());
    }
    v.extend(cfg.rtt.files.iter().cloned());
    v
}

fn stamps(files: &[PathBuf]) -> Vec<Option<SystemTime>> {
    files
        .iter()
        .map(|f| std::fs::metadata(f).and_then(|m| m.modified()).ok())
        .collect()
}

/// Computes, applies, then keeps the kernel equal to the inputs: on a changed file or
/// SIGHUP it recomputes and rewrites only the decisions that changed. When only RTT files
/// changed, only the prefixes under the changed measurements are recomputed. A bad config
/// or input is logged and the kernel keeps the last good decisions. Stops on SIGINT/SIGTERM.
/// `run --json`: log lines are JSON objects with an `event` key.
pub fn run(path: &Path, pin_dir: &Path, poll: Duration, log: Log) -> Result<()> {
    let cfg = Config::load(path)?;
    let data = Data::load(&cfg)?;
    let mut m = Maps::open(pin_dir)?;
    let ids = assign_ids(&m, &cfg)?;
    let down = down_servers(&m, &ids)?;
    let computed = compute(&cfg, &data, &ids, &down)?;
    let t = Instant::now();
    // Only the difference to what the kernel holds: a restart on the same inputs writes
    // nothing and queries are answered throughout.
    let written = sync(&mut m, &cfg, &computed, &ids)?;
    let entries = computed
        .tables
        .iter()
        .map(|t| t.2.entries.len())
        .sum::<usize>();
    let saved = computed.tables.iter().map(|t| t.2.saved).sum::<usize>();
    let (prefixes, compute_s, apply_s) = (
        computed.prefixes,
        computed.seconds,
        t.elapsed().as_secs_f64(),
    );
    log.event(
        Event::Applied {
            prefixes,
            entries,
            written,
            saved,
            compute_s,
            apply_s,
        },
        format!(
            "{prefixes} prefixes, {entries} entries ({saved} saved), {written} entries written \
             in {compute_s:.1} s compute + {apply_s:.1} s apply"
        ),
    );
    install_signals();
    let mut state = State {
        files: watched(path, &cfg),
        cfg,
        data,
        computed,
        ids,
        down,
        log,
    };
    let mut seen = stamps(&state.files);
    while !STOP.load(Ordering::Relaxed) {
        let now = stamps(&state.files);
        let hupped = HUP.swap(false, Ordering::Relaxed);
        if now == seen && !hupped {
            // Queries to an address the host gained are answered from the next poll on;
            // to one it lost, passed to the host.
            if let Err(e) = crate::kernel::host::addresses().and_then(|a| m.set_host_addresses(&a))
            {
                log.event(
                    Event::Refused {
                        error: format!("{e:#}"),
                    },
                    format!("updating the edge's addresses failed: {e:#}"),
                );
            }
            if let Err(e) = state.follow_server_states(&mut m) {
                log.event(
                    Event::Refused {
                        error: format!("{e:#}"),
                    },
                    format!("re-sorting after a server state change failed: {e:#}"),
                );
            }
            std::thread::sleep(poll);
            continue;
        }
        let changed: Vec<&PathBuf> = state
            .files
            .iter()
            .zip(now.iter().zip(&seen))
            .filter(|(_, (a, b))| a != b)
            .map(|(f, _)| f)
            .collect();
        let only_rtt = !hupped
            && !changed.is_empty()
            && changed.iter().all(|f| state.cfg.rtt.files.contains(f));
        let t = Instant::now();
        let r = if only_rtt {
            state.rtt_changed(&mut m)
        } else {
            Err(anyhow!("full"))
        };
        let r = match r {
            Ok(()) => Ok(()),
            Err(_) => recompute(path, &mut state, &mut m),
        };
        match r {
            Ok(()) => {
                let ms = t.elapsed().as_secs_f64() * 1e3;
                log.event(
                    Event::Updated { ms },
                    format!("up to date again in {ms:.0} ms"),
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

/// What `run` keeps between changes.
struct State {
    cfg: Config,
    data: Data,
    computed: Computed,
    ids: Ids,
    /// Kernel ids of the config's servers that are down: left out of the sort.
    down: HashSet<u16>,
    files: Vec<PathBuf>,
    log: Log,
}

/// The config's servers (by kernel id) that the kernel has marked down.
fn down_servers(m: &Maps, ids: &Ids) -> Result<HashSet<u16>> {
    let ours: HashSet<u16> = ids.servers.iter().copied().collect();
    Ok(m.servers()?
        .into_iter()
        .filter(|s| !s.up && ours.contains(&s.id))
        .map(|s| s.id)
        .collect())
}

/// Subtrees larger than this are recomputed in full instead (a sweep is faster then).
const SUBTREE_LIMIT: usize = 20_000;

impl State {
    /// Re-sorts every decision when a server went down or came back up since the last
    /// sort, and writes what changed.
    fn follow_server_states(&mut self, m: &mut Maps) -> Result<()> {
        let down = down_servers(m, &self.ids)?;
        if down == self.down {
            return Ok(());
        }
        let t = Instant::now();
        let new = compute(&self.cfg, &self.data, &self.ids, &down)?;
        let mut rewritten = 0;
        for ((id, name, old), (_, _, t)) in self.computed.tables.iter().zip(&new.tables) {
            let d = diff(&old.entries, &t.entries);
            rewritten += d.put.len() + d.delete.len();
            write_diff(m, self.log, *id, name, None, &d)?;
        }
        let name_of: HashMap<u16, &str> = self
            .ids
            .servers
            .iter()
            .zip(&self.cfg.servers)
            .map(|(&id, s)| (id, s.name.as_str()))
            .collect();
        let mut names: Vec<String> = down.iter().map(|id| name_of[id].to_string()).collect();
        names.sort();
        self.computed = new;
        self.down = down;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        self.log.event(
            Event::Resorted {
                down: names.clone(),
                entries: rewritten,
                ms,
            },
            format!(
                "re-sorted without the servers that are down ({}): {rewritten} entries \
                 changed in {ms:.0} ms",
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ),
        );
        Ok(())
    }

    /// Only RTT files changed: recompute the prefixes under the changed measurements.
    /// An error means "do a full recompute" (a new prefix, a large subtree, a bad file).
    fn rtt_changed(&mut self, m: &mut Maps) -> Result<()> {
        let changed = self.data.reload_rtt(&self.cfg)?;
        let plans = plans(&self.cfg, &self.ids, &self.down)?;
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
        for (root, fresh) in updates {
            for ((id, name, table), new) in self.computed.tables.iter_mut().zip(fresh) {
                let d = replace_subtree(table, &root, &new);
                write_diff(m, self.log, *id, name, Some(root), &d)?;
            }
        }
        Ok(())
    }
}

/// Loads everything again and writes what changed.
fn recompute(path: &Path, state: &mut State, m: &mut Maps) -> Result<()> {
    let cfg = Config::load(path)?;
    let data = Data::load(&cfg)?;
    let ids = assign_ids(m, &cfg)?;
    let down = down_servers(m, &ids)?;
    let new = compute(&cfg, &data, &ids, &down)?;
    if cfg.servers != state.cfg.servers || cfg.services != state.cfg.services {
        // In place, like every other change: only one table ever holds entries, and each
        // address keeps its old answer or gets its new one at every moment.
        let written = update(m, &cfg, &state.computed, &new, &ids)?;
        let entries = new.tables.iter().map(|t| t.2.entries.len()).sum();
        state.log.event(
            Event::Reconfigured { entries, written },
            format!(
                "servers or services changed: {written} of {entries} entries written or deleted"
            ),
        );
    } else {
        let before: HashMap<u32, &Table> = state
            .computed
            .tables
            .iter()
            .map(|(id, _, t)| (*id, t))
            .collect();
        for (id, name, t) in &new.tables {
            let d = diff(before.get(id).map_or(&[][..], |t| &t.entries), &t.entries);
            write_diff(m, state.log, *id, name, None, &d)?;
        }
    }
    let log = state.log;
    *state = State {
        files: watched(path, &cfg),
        cfg,
        data,
        computed: new,
        ids,
        down,
        log,
    };
    Ok(())
}

static HUP: AtomicBool = AtomicBool::new(false);
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(sig: libc::c_int) {
    // Only stores to atomics: async-signal-safe.
    if sig == libc::SIGHUP {
        HUP.store(true, Ordering::Relaxed);
    } else {
        STOP.store(true, Ordering::Relaxed);
    }
}

fn install_signals() {
    for sig in [libc::SIGHUP, libc::SIGINT, libc::SIGTERM] {
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
}
