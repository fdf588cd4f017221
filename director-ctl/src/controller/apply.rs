//! A computed state into the kernel: ids for the config's objects, the objects, then the
//! decisions, then the removal of what the config no longer has. The only part of the
//! controller that writes, and it writes through `kernel::Maps`.

use std::collections::{HashMap, HashSet};

use anyhow::{anyhow, Context, Result};
use director_common::{
    maps::{MAX_SERVERS, MAX_SERVICES},
    name,
};

use super::config::Config;
use super::decide::{Computed, Ids};
use crate::kernel::{DecisionChange, Maps, ServerEntry, ServiceEntry};

/// Ids for the config's servers and services: the kernel's id for a name it already has,
/// else one no object in the kernel uses now (not even one about to be removed), so that an
/// id never means another object while queries are being answered.
pub fn assign_ids(m: &Maps, cfg: &Config) -> Result<Ids> {
    let known: HashMap<String, u16> = m.servers()?.into_iter().map(|s| (s.name, s.id)).collect();
    let mut used: HashSet<u32> = known.values().map(|&i| u32::from(i)).collect();
    let mut servers = Vec::with_capacity(cfg.servers.len());
    for s in &cfg.servers {
        servers.push(match known.get(&s.name) {
            Some(&id) => id,
            None => fresh(&mut used, MAX_SERVERS)? as u16,
        });
    }
    // Service names compare as wire names (case and a trailing dot do not matter).
    let known: HashMap<Vec<u8>, u32> = m
        .services()?
        .into_iter()
        .filter_map(|s| name::encode(&s.name).ok().map(|w| (w, s.id)))
        .collect();
    let mut used: HashSet<u32> = known.values().copied().collect();
    let mut services = Vec::with_capacity(cfg.services.len());
    for s in &cfg.services {
        let wire = name::encode(&s.name).map_err(|e| anyhow!("{}: {e}", s.name))?;
        services.push(match known.get(&wire) {
            Some(&id) => id,
            None => fresh(&mut used, MAX_SERVICES)?,
        });
    }
    Ok(Ids { servers, services })
}

/// The lowest id from 1 not in `used`, taken.
fn fresh(used: &mut HashSet<u32>, max: u32) -> Result<u32> {
    let id = (1..max)
        .find(|i| !used.contains(i))
        .with_context(|| format!("no free id left (at most {})", max - 1))?;
    used.insert(id);
    Ok(id)
}

/// Writes the config's servers and services at their ids. Nothing is removed here: the
/// decisions in use may still point at servers the config dropped. A server the operator
/// set down with `server set --down` stays down.
fn write_objects(m: &mut Maps, cfg: &Config, ids: &Ids) -> Result<()> {
    let down: HashSet<String> = m
        .servers()?
        .into_iter()
        .filter(|s| !s.up)
        .map(|s| s.name)
        .collect();
    for (s, &id) in cfg.servers.iter().zip(&ids.servers) {
        m.put_server(&ServerEntry {
            id,
            name: s.name.clone(),
            ipv4: s.ipv4,
            ipv6: s.ipv6,
            up: !down.contains(&s.name),
        })?;
    }
    for (s, &id) in cfg.services.iter().zip(&ids.services) {
        let select = s.select_mode(&s.policy(cfg)?)?;
        m.put_service(&ServiceEntry {
            id,
            name: s.name.trim_end_matches('.').to_string(),
            ttl: s.ttl,
            answers: s.answers,
            select,
        })?;
    }
    Ok(())
}

/// Applies a full computation: new objects, then the decisions atomically (see
/// `Maps::apply_decisions`), then the removal of what is gone, once no decision in use
/// refers to it. Returns the number of entries written.
pub fn apply_full(m: &mut Maps, cfg: &Config, c: &Computed, ids: &Ids) -> Result<usize> {
    c.fits()?;
    write_objects(m, cfg, ids)?;
    let tables: Vec<(u32, &[_])> = c
        .tables
        .iter()
        .map(|(id, _, t)| (*id, t.entries.as_slice()))
        .collect();
    let n = m.apply_decisions(DecisionChange::Replace(&tables))?;
    let services: HashSet<u32> = ids.services.iter().copied().collect();
    let servers: HashSet<u16> = ids.servers.iter().copied().collect();
    m.retain(&services, &servers)?;
    Ok(n)
}
