//! Writing a computed state into the kernel, and keeping it there: `run`.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant, SystemTime},
};

use anyhow::{Context, Result};
use director_common::{
    maps::{
        NameEntry, Server, Service, KIND_DNS, MAX_SERVERS, MAX_SERVICES, NAME_BUF, SERVER_EXISTS,
        SERVER_NAME_LEN, SERVER_UP, SERVER_V4, SERVER_V6, SERVICE_ACTIVE,
    },
    name,
    select::Mode,
};

use super::compute::{compute, plans, subtree, Computed, Ids};
use super::data::Data;
use crate::compile::{diff, subtree_range, Table};
use crate::config::Config;
use crate::kernel::Maps;
use ipnet::IpNet;

fn mode(s: Option<&str>) -> Mode {
    match s {
        Some("client") => Mode::Client,
        Some("name") => Mode::Name,
        _ => Mode::Random,
    }
}

/// Ids for the config's servers and services: the kernel's id for a name it already has,
/// else one no object in the kernel uses now (not even one about to be removed).
pub fn assign_ids(m: &Maps, cfg: &Config) -> Result<Ids> {
    let known: HashMap<String, u16> = crate::control::servers(m)?
        .into_iter()
        .map(|s| (s.name, s.id))
        .collect();
    let mut used: std::collections::HashSet<u32> = known.values().map(|&i| i as u32).collect();
    let mut servers = Vec::with_capacity(cfg.servers.len());
    for s in &cfg.servers {
        servers.push(match known.get(&s.name) {
            Some(&id) => id,
            None => fresh(&mut used, MAX_SERVERS)? as u16,
        });
    }
    let known: HashMap<Vec<u8>, u32> = crate::control::services(m)?
        .into_iter()
        .filter_map(|s| name::encode(&s.name).ok().map(|w| (w, s.id)))
        .collect();
    let mut used: std::collections::HashSet<u32> = known.values().copied().collect();
    let mut services = Vec::with_capacity(cfg.services.len());
    for s in &cfg.services {
        let wire = name::encode(&s.name).map_err(|e| anyhow::anyhow!("{}: {e}", s.name))?;
        services.push(match known.get(&wire) {
            Some(&id) => id,
            None => fresh(&mut used, MAX_SERVICES)?,
        });
    }
    Ok(Ids { servers, services })
}

/// The lowest id from 1 not in `used`, taken.
fn fresh(used: &mut std::collections::HashSet<u32>, max: u32) -> Result<u32> {
    let id = (1..max)
        .find(|i| !used.contains(i))
        .with_context(|| format!("no free id left (at most {})", max - 1))?;
    used.insert(id);
    Ok(id)
}

/// Writes the config's servers, services and names at their ids. Nothing is removed here:
/// the decisions in use may still point at servers the config dropped (see `remove_stale`).
/// A server the operator set down with `server set --down` stays down.
fn write_objects(m: &mut Maps, cfg: &Config, ids: &Ids) -> Result<()> {
    let down: Vec<String> = crate::control::servers(m)?
        .into_iter()
        .filter(|s| !s.up)
        .map(|s| s.name)
        .collect();
    for (s, &id) in cfg.servers.iter().zip(&ids.servers) {
        let mut v = Server {
            flags: SERVER_EXISTS,
            _pad: [0; 3],
            ipv4: [0; 4],
            ipv6: [0; 16],
            name: [0; SERVER_NAME_LEN],
        };
        v.name[..s.name.len()].copy_from_slice(s.name.as_bytes());
        if !down.contains(&s.name) {
            v.flags |= SERVER_UP;
        }
        if let Some(a) = s.ipv4 {
            v.flags |= SERVER_V4;
            v.ipv4 = a.octets();
        }
        if let Some(a) = s.ipv6 {
            v.flags |= SERVER_V6;
            v.ipv6 = a.octets();
        }
        m.servers
            .set(id as u32, v, 0)
            .context("writing the server table")?;
    }
    for (s, &id) in cfg.services.iter().zip(&ids.services) {
        let wire = name::encode(&s.name).map_err(|e| anyhow::anyhow!("{}: {e}", s.name))?;
        let svc = Service {
            ttl: s.ttl,
            flags: SERVICE_ACTIVE,
            kind: KIND_DNS,
            answers: s.answers,
            select: mode(s.select.as_deref()) as u8,
        };
        // The service before its name: the kernel never finds a name without its service.
        m.services
            .set(id, svc, 0)
            .context("writing the service table")?;
        let mut e = NameEntry {
            service: id,
            len: wire.len() as u32,
            name: [0; NAME_BUF],
        };
        e.name[..wire.len()].copy_from_slice(&wire);
        m.names
            .insert(name::hash(&wire), e, 0)
            .context("writing the name table")?;
    }
    Ok(())
}

/// Removes what the config no longer has, once no decision in use refers to it: names
/// first (queries for them then pass), then services and servers.
fn remove_stale(m: &mut Maps, cfg: &Config, ids: &Ids) -> Result<()> {
    let wanted: std::collections::HashSet<u64> = cfg
        .services
        .iter()
        .filter_map(|s| name::encode(&s.name).ok())
        .map(|w| name::hash(&w))
        .collect();
    let stale: Vec<u64> = m
        .names
        .keys()
        .filter_map(|k| k.ok())
        .filter(|k| !wanted.contains(k))
        .collect();
    for k in stale {
        m.names.remove(&k)?;
    }
    let services: std::collections::HashSet<u32> = ids.services.iter().copied().collect();
    for id in 1..MAX_SERVICES {
        if !services.contains(&id) && m.services.get(&id, 0)?.flags != 0 {
            m.services.set(id, Service::default(), 0)?;
        }
    }
    let servers: std::collections::HashSet<u16> = ids.servers.iter().copied().collect();
    let empty = Server {
        flags: 0,
        _pad: [0; 3],
        ipv4: [0; 4],
        ipv6: [0; 16],
        name: [0; SERVER_NAME_LEN],
    };
    for id in 1..MAX_SERVERS {
        if !servers.contains(&(id as u16)) && m.servers.get(&id, 0)?.flags != 0 {
            m.servers.set(id, empty, 0)?;
        }
    }
    Ok(())
}

/// Applies a full computation: new objects, then the decisions atomically (see
/// `Maps::replace_decisions`), then the removal of what is gone. Returns the number of
/// entries written.
pub fn apply_full(m: &mut Maps, cfg: &Config, c: &Computed, ids: &Ids) -> Result<usize> {
    c.fits()?;
    write_objects(m, cfg, ids)?;
    let tables: Vec<(u32, &[_])> = c
        .tables
        .iter()
        .map(|(id, _, t)| (*id, t.entries.as_slice()))
        .collect();
    let n = m.replace_decisions(&tables)?;
    remove_stale(m, cfg, ids)?;
    Ok(n)
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
pub static JSON_LOG: AtomicBool = AtomicBool::new(false);

fn log(event: &str, text: String, mut fields: serde_json::Value) {
    if JSON_LOG.load(Ordering::Relaxed) {
        fields["event"] = event.into();
        fields["message"] = text.into();
        eprintln!("{fields}");
    } else {
        eprintln!("director-ctl run: {text}");
    }
}

pub fn run(path: &Path, pin_dir: &Path, poll: Duration) -> Result<()> {
    let cfg = Config::load(path)?;
    let data = Data::load(&cfg)?;
    let mut m = Maps::open(pin_dir)?;
    let ids = assign_ids(&m, &cfg)?;
    let computed = compute(&cfg, &data, &ids)?;
    let t = Instant::now();
    let n = apply_full(&mut m, &cfg, &computed, &ids)?;
    let saved = computed.tables.iter().map(|t| t.2.saved).sum::<usize>();
    let apply_s = t.elapsed().as_secs_f64();
    log(
        "applied",
        format!("{} prefixes, {n} entries written ({saved} saved) in {:.1} s compute + {apply_s:.1} s apply", computed.prefixes, computed.seconds),
        serde_json::json!({"prefixes": computed.prefixes, "entries": n, "saved": saved, "compute_s": computed.seconds, "apply_s": apply_s}),
    );
    install_signals();
    let mut state = State {
        files: watched(path, &cfg),
        cfg,
        data,
        computed,
        ids,
    };
    let mut seen = stamps(&state.files);
    while !STOP.load(Ordering::Relaxed) {
        let now = stamps(&state.files);
        let hupped = HUP.swap(false, Ordering::Relaxed);
        if now == seen && !hupped {
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
            Err(anyhow::anyhow!("full"))
        };
        let r = match r {
            Ok(()) => Ok(()),
            Err(_) => recompute(path, &mut state, &mut m),
        };
        match r {
            Ok(()) => {
                let ms = t.elapsed().as_secs_f64() * 1e3;
                log(
                    "updated",
                    format!("up to date again in {ms:.0} ms"),
                    serde_json::json!({"ms": ms}),
                )
            }
            Err(e) => log(
                "refused",
                format!("keeping the last good decisions: {e:#}"),
                serde_json::json!({"error": format!("{e:#}")}),
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
    files: Vec<PathBuf>,
}

/// Subtrees larger than this are recomputed in full instead (a sweep is faster then).
const SUBTREE_LIMIT: usize = 20_000;

impl State {
    /// Only RTT files changed: recompute the prefixes under the changed measurements.
    /// An error means "do a full recompute" (a new prefix, a large subtree, a bad file).
    fn rtt_changed(&mut self, m: &mut Maps) -> Result<()> {
        let changed = self.data.reload_rtt(&self.cfg)?;
        let plans = plans(&self.cfg, &self.ids)?;
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
                let range = subtree_range(&table.entries, &root);
                let d = diff(&table.entries[range.clone()], &new);
                if !d.is_empty() {
                    m.update_decisions(*id, &d)?;
                    log(
                        "changed",
                        format!(
                            "{name}: {root}: {} entries rewritten, {} deleted",
                            d.put.len(),
                            d.delete.len()
                        ),
                        serde_json::json!({"service": name, "prefix": root.to_string(), "rewritten": d.put.len(), "deleted": d.delete.len()}),
                    );
                }
                table.entries.splice(range, new);
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
    let new = compute(&cfg, &data, &ids)?;
    let same_objects = format!("{:?}{:?}", cfg.servers, cfg.services)
        == format!("{:?}{:?}", state.cfg.servers, state.cfg.services);
    if !same_objects {
        let n = apply_full(m, &cfg, &new, &ids)?;
        log(
            "replaced",
            format!("servers or services changed: all {n} entries replaced"),
            serde_json::json!({"entries": n}),
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
            if !d.is_empty() {
                m.update_decisions(*id, &d)?;
                log(
                    "changed",
                    format!(
                        "{name}: {} entries rewritten, {} deleted",
                        d.put.len(),
                        d.delete.len()
                    ),
                    serde_json::json!({"service": name, "rewritten": d.put.len(), "deleted": d.delete.len()}),
                );
            }
        }
    }
    *state = State {
        files: watched(path, &cfg),
        cfg,
        data,
        computed: new,
        ids,
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
