//! The map page's feed: one service's table as `run` wrote it (spill's overrides included),
//! laid over the client locations by director-plan's `atlas`, with each site's servers as
//! the health checks and the demand counters last saw them.
//!
//! The cells cost a pass over every GeoIP network (about 0.3 s at full scale), so they are
//! kept per service until the table's digest changes; sites and servers are fresh at every
//! request because health and demand move without the table moving.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::time::Instant;

use director_common::maps::Decision;
use director_plan::atlas::{atlas, Cell};
use director_plan::data::Data;
use director_plan::decide::{Ids, Unavailable};
use ipnet::IpNet;

use super::config::Config;
use crate::api;
use crate::health::Snapshot;

/// What [`feed`] reads of `run`.
pub struct Inputs<'a> {
    pub cfg: &'a Config,
    pub data: &'a Data,
    pub ids: &'a Ids,
    pub down: &'a Unavailable,
    pub health: &'a Snapshot,
    /// The last demand cycle's rates (none: a fleet's publisher counts no demand).
    pub demand: Option<&'a api::Demand>,
    pub fleet_version: Option<u64>,
    pub grid: f64,
}

/// The cells of one service's table, kept until the table changes.
#[derive(Default)]
pub struct Cache {
    key: Option<(String, u64)>,
    cells: Vec<api::AtlasCell>,
    per_site: Vec<f64>,
    uncovered: f64,
}

/// A digest of the entries (prefix and every field the kernel answers from).
fn digest(entries: &[(IpNet, Decision)], grid: f64) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    grid.to_bits().hash(&mut h);
    for (p, d) in entries {
        p.hash(&mut h);
        (d.prefix_len, d.count, d.primary).hash(&mut h);
        d.servers[..usize::from(d.count)].hash(&mut h);
        d.weights[..usize::from(d.count)].hash(&mut h);
    }
    h.finish()
}

/// How a decision's first choice divides among sites: its equal-best candidates by their
/// weights (all equal when none has one).
fn site_shares(d: &Decision, site_of: &HashMap<u16, usize>) -> Vec<(usize, f64)> {
    let n = usize::from(d.primary.max(1).min(d.count));
    let firsts = &d.servers[..n];
    let weights: Vec<f64> = d.weights[..n].iter().map(|w| f64::from(*w)).collect();
    let sum: f64 = weights.iter().sum();
    let mut out: Vec<(usize, f64)> = Vec::new();
    for (i, s) in firsts.iter().enumerate() {
        let Some(&site) = site_of.get(s) else {
            continue;
        };
        let share = if sum > 0.0 {
            weights[i] / sum
        } else {
            1.0 / n as f64
        };
        match out.iter_mut().find(|(x, _)| *x == site) {
            Some(e) => e.1 += share,
            None => out.push((site, share)),
        }
    }
    out
}

/// The feed for `service` (the first service when `None`).
pub fn feed(
    inp: &Inputs<'_>,
    tables: &[(u32, Vec<(IpNet, Decision)>)],
    service: Option<&str>,
    cache: &mut Cache,
) -> anyhow::Result<api::Atlas> {
    let services: Vec<String> = inp.cfg.services.iter().map(|s| s.name.clone()).collect();
    let svc_index = match service {
        Some(s) => services
            .iter()
            .position(|n| n.trim_end_matches('.') == s.trim_end_matches('.'))
            .ok_or_else(|| anyhow::anyhow!("no service {s:?} in the config"))?,
        None if services.is_empty() => anyhow::bail!("the config has no services"),
        None => 0,
    };
    let name = services[svc_index].clone();
    let svc_id = inp.ids.services.get(svc_index).copied();
    let empty = Vec::new();
    let entries = tables
        .iter()
        .find(|(id, _)| Some(*id) == svc_id)
        .map_or(&empty, |t| &t.1);
    let sites = &inp.cfg.plan.sites;
    let site_index: HashMap<&str, usize> = sites
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.as_str(), i))
        .collect();
    let site_of: HashMap<u16, usize> = inp
        .ids
        .servers
        .iter()
        .zip(&inp.cfg.servers)
        .filter_map(|(id, s)| Some((*id, *site_index.get(s.site.as_str())?)))
        .collect();

    let key = (name.clone(), digest(entries, inp.grid));
    let start = Instant::now();
    let mut build_s = 0.0;
    if cache.key.as_ref() != Some(&key) {
        let shares: Vec<Vec<(usize, f64)>> = entries
            .iter()
            .map(|(_, d)| site_shares(d, &site_of))
            .collect();
        let indexed: Vec<(IpNet, usize)> = entries
            .iter()
            .enumerate()
            .map(|(i, (p, _))| (*p, i))
            .collect();
        let cells = atlas(
            &inp.data.locations,
            &inp.data.graph_points,
            &indexed,
            &shares,
            sites.len(),
            inp.grid,
        );
        let mut per_site = vec![0.0; sites.len()];
        let mut uncovered = 0.0;
        cache.cells = cells
            .iter()
            .map(|c| {
                for (i, w) in c.weights.iter().enumerate() {
                    match per_site.get_mut(i) {
                        Some(s) => *s += w,
                        None => uncovered += w,
                    }
                }
                cell(c, sites)
            })
            .collect();
        cache.per_site = per_site;
        cache.uncovered = uncovered;
        cache.key = Some(key.clone());
        build_s = start.elapsed().as_secs_f64();
    }
    let clients = cache.per_site.iter().sum::<f64>() + cache.uncovered;

    let svc = &inp.cfg.services[svc_index];
    let members: HashSet<&str> = svc.servers.iter().map(String::as_str).collect();
    let id_of: HashMap<&str, u16> = inp
        .cfg
        .servers
        .iter()
        .zip(&inp.ids.servers)
        .map(|(s, id)| (s.name.as_str(), *id))
        .collect();
    let health_out = svc_id.and_then(|id| inp.down.health.get(&id));
    let atlas_sites = sites
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let point = inp.data.sites.get(i).and_then(|d| d.point);
            let demand = inp
                .demand
                .and_then(|d| d.sites.iter().find(|d| d.site == s.name));
            let servers = inp
                .cfg
                .servers
                .iter()
                .filter(|x| x.site == s.name && members.contains(x.name.as_str()))
                .map(|x| {
                    let id = id_of.get(x.name.as_str()).copied();
                    let check = inp.health.checks.get(&(name.clone(), x.name.clone()));
                    let health = match check {
                        None => "unwatched",
                        Some(c) => match c.verdict {
                            Some(true) => "up",
                            Some(false) => "down",
                            None => "unchecked",
                        },
                    };
                    let out = id.is_some_and(|id| {
                        inp.down.servers.contains(&id)
                            || health_out.is_some_and(|h| h.contains(&id))
                    }) || check.is_some_and(|c| c.out);
                    let d = inp
                        .demand
                        .and_then(|d| d.servers.iter().find(|d| d.server == x.name));
                    api::AtlasServer {
                        name: x.name.clone(),
                        health: health.into(),
                        out,
                        load: inp.health.load.get(&x.name).copied(),
                        answers: d.map(|d| d.answers),
                        flows: d.map(|d| d.flows),
                    }
                })
                .collect();
            let sent = cache.per_site.get(i).copied().unwrap_or(0.0);
            api::AtlasSite {
                name: s.name.clone(),
                lat: point.map(|p| p.lat),
                lon: point.map(|p| p.lon),
                clients: sent,
                share: if clients > 0.0 { sent / clients } else { 0.0 },
                rate: demand.map(|d| d.rate),
                capacity: demand.and_then(|d| d.capacity),
                load: demand.and_then(|d| d.load),
                servers,
            }
        })
        .collect();
    Ok(api::Atlas {
        version: api::VERSION,
        service: name,
        services,
        generation: format!("{:016x}", key.1),
        grid: inp.grid,
        sites: atlas_sites,
        cells: cache.cells.clone(),
        clients,
        uncovered: cache.uncovered,
        fleet_version: inp.fleet_version,
        build_s,
        fleet: None,
        fleet_error: None,
    })
}

fn cell(c: &Cell, sites: &[director_plan::config::Site]) -> api::AtlasCell {
    let total = c.total();
    let share = |w: f64| if total > 0.0 { w / total } else { 0.0 };
    let mut shares: Vec<api::AtlasShare> = c
        .weights
        .iter()
        .enumerate()
        .filter(|(i, w)| **w > 0.0 && *i < sites.len())
        .map(|(i, w)| api::AtlasShare {
            site: sites[i].name.clone(),
            share: share(*w),
        })
        .collect();
    shares.sort_by(|a, b| b.share.total_cmp(&a.share).then(a.site.cmp(&b.site)));
    let dominant = c.dominant();
    api::AtlasCell {
        lat: c.lat,
        lon: c.lon,
        site: sites.get(dominant).map(|s| s.name.clone()),
        share: share(c.weights[dominant]),
        clients: total,
        sites: shares,
        sample: c.sample,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(servers: &[u16], weights: &[u16], primary: u8) -> Decision {
        let mut d = Decision {
            prefix_len: 0,
            count: servers.len() as u8,
            primary,
            _pad: 0,
            servers: [0; director_common::maps::MAX_CANDIDATES],
            weights: [0; director_common::maps::MAX_CANDIDATES],
        };
        d.servers[..servers.len()].copy_from_slice(servers);
        d.weights[..weights.len()].copy_from_slice(weights);
        d
    }

    #[test]
    fn the_first_choice_is_split_by_weight_among_equals_only() {
        let site_of: HashMap<u16, usize> = [(1, 0), (2, 1), (3, 1), (4, 2)].into();
        // Two equals 3:1, then a backup that takes nothing.
        let d = decision(&[1, 2, 4], &[3, 1, 1], 2);
        assert_eq!(site_shares(&d, &site_of), vec![(0, 0.75), (1, 0.25)]);
        // Equal servers without weights share evenly; two at one site add up.
        let d = decision(&[2, 3, 1], &[0, 0, 0], 3);
        let s = site_shares(&d, &site_of);
        assert_eq!(s.len(), 2);
        assert!((s[0].1 - 2.0 / 3.0).abs() < 1e-9 && s[0].0 == 1);
        // A ranked list: only the best.
        let d = decision(&[4, 1], &[0, 0], 1);
        assert_eq!(site_shares(&d, &site_of), vec![(2, 1.0)]);
        // Nothing to answer with.
        assert!(site_shares(&decision(&[], &[], 0), &site_of).is_empty());
    }

    #[test]
    fn the_digest_follows_what_the_kernel_answers_from() {
        let p: IpNet = "192.0.2.0/24".parse().unwrap();
        let a = vec![(p, decision(&[1, 2], &[1, 1], 2))];
        let b = vec![(p, decision(&[2, 1], &[1, 1], 2))];
        assert_ne!(digest(&a, 2.0), digest(&b, 2.0));
        assert_eq!(digest(&a, 2.0), digest(&a.clone(), 2.0));
        assert_ne!(digest(&a, 2.0), digest(&a, 1.0));
    }
}
