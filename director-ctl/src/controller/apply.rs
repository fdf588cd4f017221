//! A computed state into the kernel: ids for the config's objects, the objects, then the
//! decisions, then the removal of what the config no longer has. The only part of the
//! controller that writes, and it writes through `kernel::Maps`.

use std::collections::{BTreeMap, HashMap, HashSet};

use anyhow::{anyhow, Context, Result};
use director_common::{
    maps::{Decision, Fallback, MAX_SERVERS, MAX_SERVICES},
    name,
};
use ipnet::IpNet;

use director_plan::compile::diff;
use director_plan::decide::{Computed, Ids};
use director_plan::prefix::{cover16, order::sort_key};

use super::config::{self, Config};
use crate::kernel::steer::VipEntry;
use crate::kernel::{DecisionChange, Maps, ServerEntry, ServiceEntry, TableSource};
use director_common::steer::Forward;
use std::net::{Ipv4Addr, Ipv6Addr};

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

/// What the kernel answers for `s` when none of a client's servers can be (see
/// `maps::Fallback`).
pub fn fallback(s: &config::Service) -> Result<Fallback> {
    let target = match &s.alternate {
        Some(a) => Some(name::encode(a).map_err(|e| anyhow!("alternate {a:?}: {e}"))?),
        None => None,
    };
    Fallback::build(s.degraded_ttl(), target.as_deref(), &s.origin)
        .with_context(|| format!("alternate {:?} does not fit a record", s.alternate))
}

/// Writes the config's servers and services at their ids, and every other setting the
/// kernel holds (fallbacks, rate limits and exemptions, VIPs, the flood guard), those that
/// differ from what the kernel holds. Nothing is removed here: the decisions in use may
/// still point at servers the config dropped. A server the operator set down (`server set
/// --down`) or drained stays so: admin state belongs to the operator, not to the config.
pub fn write_objects(m: &mut Maps, cfg: &Config, ids: &Ids) -> Result<()> {
    let now: HashMap<u16, ServerEntry> = m.servers()?.into_iter().map(|s| (s.id, s)).collect();
    let down: HashSet<&str> = now
        .values()
        .filter(|s| !s.up)
        .map(|s| s.name.as_str())
        .collect();
    let drained: HashSet<&str> = now
        .values()
        .filter(|s| s.drained)
        .map(|s| s.name.as_str())
        .collect();
    let mut put = Vec::new();
    for (s, &id) in cfg.servers.iter().zip(&ids.servers) {
        let e = ServerEntry {
            id,
            name: s.name.clone(),
            ipv4: s.ipv4,
            ipv6: s.ipv6,
            up: !down.contains(s.name.as_str()),
            drained: drained.contains(s.name.as_str()),
            // Measured, not configured: kept as it is.
            load: now.get(&id).and_then(|e| e.load),
        };
        if now.get(&id) != Some(&e) {
            put.push(e);
        }
    }
    for e in &put {
        m.put_server(e)?;
    }
    let now: HashMap<u32, ServiceEntry> = m.services()?.into_iter().map(|s| (s.id, s)).collect();
    let mut changed = Vec::new();
    for (i, (s, &id)) in cfg.services.iter().zip(&ids.services).enumerate() {
        let select = cfg.select_mode(i)?;
        let e = ServiceEntry {
            id,
            name: s.name.trim_end_matches('.').to_string(),
            ttl: s.ttl,
            answers: s.answers,
            select,
            dns: s.answers_dns(),
        };
        if now.get(&id) != Some(&e) {
            changed.push(e);
        }
    }
    // Together: the program's name slots are published once for all of them.
    m.put_services(&changed)?;
    for (s, &id) in cfg.services.iter().zip(&ids.services) {
        let fb = fallback(s)?;
        if m.fallback(id)? != fb {
            m.set_fallback(id, &fb)?;
        }
        let limit = cfg.rrl.limit(s.rrl.as_ref());
        if m.rrl(id)? != limit {
            m.set_rrl(id, &limit)?;
        }
    }
    write_vips(m, cfg, ids)?;
    // Id 0 is no service's: its limit is the zones' listeners' for answers that belong to
    // no service (static data, negative answers, refusals), `[rrl]` as it stands.
    let zones = cfg.rrl.limit(None);
    if m.rrl(0)? != zones {
        m.set_rrl(0, &zones)?;
    }
    // The config's exemptions are the whole list: ones added by the CLI since go.
    let want: HashSet<IpNet> = cfg.rrl.exempt_prefixes()?.into_iter().collect();
    let have: HashSet<IpNet> = m.rrl_exempt()?.into_iter().collect();
    for net in want.difference(&have) {
        m.set_rrl_exempt(*net, true)?;
    }
    for net in have.difference(&want) {
        m.set_rrl_exempt(*net, false)?;
    }
    Ok(())
}

/// The config's VIPs are the whole table: new and changed ones written, the rest removed
/// (before their services are: a VIP never points at a service that is gone).
fn write_vips(m: &mut Maps, cfg: &Config, ids: &Ids) -> Result<()> {
    let mut want = BTreeMap::new();
    for (s, &service) in cfg.services.iter().zip(&ids.services) {
        for addr in s.vips() {
            let v6 = addr.is_ipv6();
            let (source, source_bits) = match s.forward() {
                Forward::Ipip => cfg
                    .steer
                    .source(v6)
                    .with_context(|| format!("service {}: vip {addr}: no encap source", s.name))?,
                Forward::L2 => (
                    if v6 {
                        Ipv6Addr::UNSPECIFIED.into()
                    } else {
                        Ipv4Addr::UNSPECIFIED.into()
                    },
                    0,
                ),
            };
            want.insert(
                addr,
                VipEntry {
                    addr,
                    service,
                    mode: s.forward(),
                    mss: s.mss_for(v6),
                    source,
                    source_bits,
                },
            );
        }
    }
    let have: BTreeMap<_, _> = m.steer().vips()?.into_iter().map(|v| (v.addr, v)).collect();
    for (a, v) in &want {
        if have.get(a) != Some(v) {
            m.steer_mut().put_vip(v)?;
        }
    }
    for a in have.keys().filter(|a| !want.contains_key(a)) {
        m.steer_mut().remove_vip(*a)?;
    }
    let guard = cfg.steer.guard();
    if m.steer().guard()? != guard {
        m.steer_mut().set_guard(&guard)?;
    }
    Ok(())
}

/// Brings the kernel to a computed state by writing only what differs from what it holds,
/// in the table queries read now (see `Maps::apply_decisions`: every address keeps its old
/// answer or gets its new one at every moment). A restart of `run` on unchanged config and
/// inputs writes nothing, and answering never pauses. Returns the number of entries
/// written or deleted.
pub fn sync(m: &mut Maps, cfg: &Config, c: &Computed, ids: &Ids) -> Result<usize> {
    c.fits()?;
    let mut current: BTreeMap<u32, Vec<(IpNet, Decision)>> = BTreeMap::new();
    for (service, p, d) in m.decisions()? {
        current.entry(service).or_default().push((p, d));
    }
    for old in current.values_mut() {
        old.sort_unstable_by_key(|(p, _)| sort_key(p));
    }
    let current = current.iter().map(|(id, v)| (*id, v.as_slice())).collect();
    converge(m, cfg, c, ids, current, TableSource::Kernel, &|_, _| None)
}

/// As [`sync`], from `before`, the computation the kernel holds (`run` keeps it), so the
/// kernel's table need not be read back: a change of servers or services.
pub fn update(
    m: &mut Maps,
    cfg: &Config,
    before: &Computed,
    c: &Computed,
    ids: &Ids,
    over: &dyn Fn(u32, &Decision) -> Option<Decision>,
) -> Result<usize> {
    c.fits()?;
    let current = before
        .tables
        .iter()
        .map(|(id, _, t)| (*id, t.entries.as_slice()))
        .collect();
    converge(m, cfg, c, ids, current, TableSource::Own, over)
}

/// New objects first, then each service's changed entries in place, then the objects the
/// config dropped (names first, so their queries pass), then the entries of services it
/// dropped. No entry ever refers to a server that is not in the kernel.
fn converge(
    m: &mut Maps,
    cfg: &Config,
    c: &Computed,
    ids: &Ids,
    mut current: BTreeMap<u32, &[(IpNet, Decision)]>,
    from: TableSource,
    over: &dyn Fn(u32, &Decision) -> Option<Decision>,
) -> Result<usize> {
    write_objects(m, cfg, ids)?;
    let mut n = 0;
    for (id, _, t) in &c.tables {
        let old = current.remove(id).unwrap_or_default();
        let d = diff(old, &t.entries);
        n += d.put.len() + d.delete.len();
        if !d.is_empty() {
            // Entries of groups capacity spill moved get the moved decision.
            let put = overlaid(*id, &d.put, over);
            m.apply_decisions(DecisionChange {
                service: *id,
                put: &put,
                delete: &d.delete,
            })?;
        }
    }
    let services: HashSet<u32> = ids.services.iter().copied().collect();
    let servers: HashSet<u16> = ids.servers.iter().copied().collect();
    m.retain(&services, &servers)?;
    for (id, old) in current {
        let delete: Vec<_> = old.iter().map(|(p, _)| *p).collect();
        n += delete.len();
        m.apply_decisions(DecisionChange {
            service: id,
            put: &[],
            delete: &delete,
        })?;
    }
    publish_fronts(
        m,
        c.tables.iter().map(|(id, _, t)| (*id, &t.entries[..])),
        from,
    )?;
    Ok(n)
}

/// Sets the services' /16 fronts (`DIR_DEC16`) from their tables, once those are in the
/// tries: every write to the tries cleared the /16s it touched, and this sets again those
/// that one entry answers whole. Returns the number of slots written (none when nothing
/// changed since the last call).
pub fn publish_fronts<'a>(
    m: &mut Maps,
    tables: impl Iterator<Item = (u32, &'a [(IpNet, Decision)])>,
    from: TableSource,
) -> Result<usize> {
    // Also with no table: the source is noted either way.
    m.front16_source(from)?;
    let mut n = 0;
    for (id, entries) in tables {
        n += match from {
            // A table read back from the kernel: every slot, some may have been left
            // cleared by a writer killed before it set them again.
            TableSource::Kernel => {
                m.set_front16(id, &cover16::covers(entries.iter().map(|(p, _)| p)), from)?
            }
            // Our own updates: only the /16s they cleared (a few binary searches each,
            // not a pass over the table: `run` does this after every RTT change).
            TableSource::Own => {
                m.set_front16_touched(id, |s| cover16::cover_of(entries, s), from)?
            }
        };
    }
    Ok(n)
}

/// A group's decision as capacity spill has it, if spill moved the group.
pub type Overlay<'a> = &'a dyn Fn(u32, &Decision) -> Option<Decision>;

/// The entries as the kernel gets them: each planned decision through `over`, with the
/// entry's own scope.
pub fn overlaid(
    service: u32,
    put: &[(IpNet, Decision)],
    over: Overlay<'_>,
) -> Vec<(IpNet, Decision)> {
    put.iter()
        .map(|(p, d)| match over(service, d) {
            Some(e) => (
                *p,
                Decision {
                    prefix_len: d.prefix_len,
                    ..e
                },
            ),
            None => (*p, *d),
        })
        .collect()
}
