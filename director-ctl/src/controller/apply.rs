//! Writing a computed state into the kernel, and keeping it there: `run`.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant, SystemTime},
};

use anyhow::{Context, Result};
use director_common::{
    maps::{NameEntry, Server, Service, KIND_DNS, MAX_SERVERS, MAX_SERVICES, NAME_BUF, SERVER_EXISTS, SERVER_NAME_LEN, SERVER_UP, SERVER_V4, SERVER_V6, SERVICE_ACTIVE},
    name,
    select::Mode,
};

use super::compute::{compute, Computed};
use super::data::Data;
use crate::compile::{diff, Table};
use crate::config::Config;
use crate::kernel::Maps;

fn mode(s: Option<&str>) -> Mode {
    match s {
        Some("client") => Mode::Client,
        Some("name") => Mode::Name,
        _ => Mode::Random,
    }
}

/// Servers, services and names as the config says (ids are positions in the config).
/// A server the operator set down with `server set --down` stays down.
pub fn write_objects(m: &mut Maps, cfg: &Config) -> Result<()> {
    let down: Vec<String> = crate::control::servers(m)?.into_iter().filter(|s| !s.up).map(|s| s.name).collect();
    for (i, s) in cfg.servers.iter().enumerate() {
        let mut v = Server { flags: SERVER_EXISTS, _pad: [0; 3], ipv4: [0; 4], ipv6: [0; 16], name: [0; SERVER_NAME_LEN] };
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
        m.servers.set(i as u32 + 1, v, 0).context("writing the server table")?;
    }
    let empty = Server { flags: 0, _pad: [0; 3], ipv4: [0; 4], ipv6: [0; 16], name: [0; SERVER_NAME_LEN] };
    for id in cfg.servers.len() as u32 + 1..MAX_SERVERS {
        if m.servers.get(&id, 0)?.flags != 0 {
            m.servers.set(id, empty, 0)?;
        }
    }
    let mut wanted = HashMap::new();
    for (i, s) in cfg.services.iter().enumerate() {
        let id = i as u32 + 1;
        let wire = name::encode(&s.name).map_err(|e| anyhow::anyhow!("{}: {e}", s.name))?;
        let svc = Service { ttl: s.ttl, flags: SERVICE_ACTIVE, kind: KIND_DNS, answers: s.answers, select: mode(s.select.as_deref()) as u8 };
        m.services.set(id, svc, 0).context("writing the service table")?;
        let mut e = NameEntry { service: id, len: wire.len() as u32, name: [0; NAME_BUF] };
        e.name[..wire.len()].copy_from_slice(&wire);
        let h = name::hash(&wire);
        m.names.insert(h, e, 0).context("writing the name table")?;
        wanted.insert(h, ());
    }
    let stale: Vec<u64> = m.names.keys().filter_map(|k| k.ok()).filter(|k| !wanted.contains_key(k)).collect();
    for k in stale {
        m.names.remove(&k)?;
    }
    for id in cfg.services.len() as u32 + 1..MAX_SERVICES {
        if m.services.get(&id, 0)?.flags != 0 {
            m.services.set(id, Service::default(), 0)?;
        }
    }
    Ok(())
}

/// Applies a full computation atomically (see `Maps::replace_decisions`). Returns the
/// number of entries written.
pub fn apply_full(m: &mut Maps, cfg: &Config, c: &Computed) -> Result<usize> {
    write_objects(m, cfg)?;
    let tables: Vec<(u32, &[_])> = c.tables.iter().map(|(id, _, t)| (*id, t.entries.as_slice())).collect();
    m.replace_decisions(&tables)
}

/// Files whose change means a recompute: the config and every input it names.
fn watched(path: &Path, cfg: &Config) -> Vec<PathBuf> {
    let mut v = vec![path.to_path_buf()];
    v.extend(cfg.geo.database.iter().chain(&cfg.geo.locations).chain(&cfg.geo.graph).cloned());
    for s in &cfg.sites {
        v.extend(s.bgp.iter().cloned());
    }
    v.extend(cfg.rtt.files.iter().cloned());
    v
}

fn stamps(files: &[PathBuf]) -> Vec<Option<SystemTime>> {
    files.iter().map(|f| std::fs::metadata(f).and_then(|m| m.modified()).ok()).collect()
}

/// Computes, applies, then keeps the kernel equal to the inputs: on a changed file or
/// SIGHUP it recomputes and rewrites only the decisions that changed. A bad config or
/// input is logged and the kernel keeps the last good decisions. Stops on SIGINT/SIGTERM.
pub fn run(path: &Path, pin_dir: &Path, poll: Duration) -> Result<()> {
    let mut cfg = Config::load(path)?;
    let data = Data::load(&cfg)?;
    let mut computed = compute(&cfg, &data)?;
    drop(data);
    let mut m = Maps::open(pin_dir)?;
    let t = Instant::now();
    let n = apply_full(&mut m, &cfg, &computed)?;
    eprintln!(
        "director-ctl run: {} prefixes, {n} entries written ({} saved) in {:.1} s compute + {:.1} s apply",
        computed.prefixes,
        computed.tables.iter().map(|t| t.2.saved).sum::<usize>(),
        computed.seconds,
        t.elapsed().as_secs_f64()
    );
    install_signals();
    let mut files = watched(path, &cfg);
    let mut seen = stamps(&files);
    while !STOP.load(Ordering::Relaxed) {
        let now = stamps(&files);
        let hupped = HUP.swap(false, Ordering::Relaxed);
        if now == seen && !hupped {
            std::thread::sleep(poll);
            continue;
        }
        seen = now;
        match recompute(path, &cfg, &computed, &mut m) {
            Ok((new_cfg, new)) => {
                cfg = new_cfg;
                computed = new;
                files = watched(path, &cfg);
                seen = stamps(&files);
            }
            Err(e) => eprintln!("director-ctl run: keeping the last good decisions: {e:#}"),
        }
    }
    Ok(())
}

/// Loads everything again and writes what changed.
fn recompute(path: &Path, old_cfg: &Config, old: &Computed, m: &mut Maps) -> Result<(Config, Computed)> {
    let cfg = Config::load(path)?;
    let data = Data::load(&cfg)?;
    let new = compute(&cfg, &data)?;
    let same_objects = format!("{:?}{:?}", cfg.servers, cfg.services) == format!("{:?}{:?}", old_cfg.servers, old_cfg.services);
    if !same_objects {
        let n = apply_full(m, &cfg, &new)?;
        eprintln!("director-ctl run: servers or services changed: all {n} entries replaced");
        return Ok((cfg, new));
    }
    let before: HashMap<u32, &Table> = old.tables.iter().map(|(id, _, t)| (*id, t)).collect();
    for (id, name, t) in &new.tables {
        let d = diff(before.get(id).map_or(&[][..], |t| &t.entries), &t.entries);
        if !d.is_empty() {
            m.update_decisions(*id, &d)?;
            eprintln!("director-ctl run: {name}: {} entries rewritten, {} deleted", d.put.len(), d.delete.len());
        }
    }
    Ok((cfg, new))
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
