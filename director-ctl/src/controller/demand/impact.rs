//! `impact`: the candidate config's table beside the one in the kernel, each address range
//! that changes weighted by the demand measured there, summed per site (by name: the two
//! configs may number sites and servers differently).

use std::collections::BTreeMap;

use anyhow::Result;
use director_common::maps::Decision;
use director_plan::decide::Ids;
use director_plan::demand::impact::impact;
use director_plan::demand::spill::SiteLoad;
use ipnet::IpNet;

use super::engine::capacities;
use super::Demand;
use crate::api;
use crate::controller::config::Config;

/// One side of the comparison: a config, its kernel ids and its tables.
pub struct Sides<'a> {
    pub cfg: &'a Config,
    pub ids: &'a Ids,
    pub tables: &'a [(u32, Vec<(IpNet, Decision)>)],
}

pub fn preview(
    now: &Sides<'_>,
    next: &Sides<'_>,
    demand: &Demand,
    top: usize,
) -> Result<api::Impact> {
    // Sites by name over both configs: the current ones first, in their order.
    let mut names: Vec<String> = now.cfg.plan.sites.iter().map(|s| s.name.clone()).collect();
    for s in &next.cfg.plan.sites {
        if !names.contains(&s.name) {
            names.push(s.name.clone());
        }
    }
    let index = |name: &str| names.iter().position(|n| n == name);
    // Server ids come from the kernel (`assign_ids`): a server in both configs has one id,
    // so one map serves both sides; where a server moved site, the candidate's site wins.
    let mut site_of: BTreeMap<u16, usize> = BTreeMap::new();
    for side in [now, next] {
        for (s, &id) in side.cfg.servers.iter().zip(&side.ids.servers) {
            if let Some(i) = index(&s.site) {
                site_of.insert(id, i);
            }
        }
    }
    let measured: BTreeMap<String, f64> = demand
        .report()
        .sites
        .iter()
        .map(|s| (s.site.clone(), s.rate))
        .collect();
    let caps = capacities(next.cfg);
    let sites: Vec<SiteLoad> = names
        .iter()
        .enumerate()
        .map(|(i, n)| SiteLoad {
            site: i,
            capacity: next
                .cfg
                .plan
                .sites
                .iter()
                .position(|s| &s.name == n)
                .and_then(|j| caps[j]),
            load: measured.get(n).copied().unwrap_or(0.0),
        })
        .collect();
    let current: Vec<(u32, &[(IpNet, Decision)])> =
        now.tables.iter().map(|(id, t)| (*id, &t[..])).collect();
    let candidate: Vec<(u32, &[(IpNet, Decision)])> =
        next.tables.iter().map(|(id, t)| (*id, &t[..])).collect();
    let pd = demand.prefix_demand();
    let t = std::time::Instant::now();
    let r = impact(
        &current,
        &candidate,
        &pd,
        &|id| site_of.get(&id).copied(),
        &sites,
        top,
    );
    let service_name = |id: u32| {
        [now, next]
            .iter()
            .find_map(|side| {
                side.ids
                    .services
                    .iter()
                    .position(|&s| s == id)
                    .map(|i| side.cfg.services[i].name.clone())
            })
            .unwrap_or_else(|| format!("#{id}"))
    };
    let site_names = |v: &[usize]| v.iter().map(|&i| names[i].clone()).collect::<Vec<_>>();
    Ok(api::Impact {
        seconds: t.elapsed().as_secs_f64(),
        window_s: demand.report().window_s,
        demand_prefixes: pd.len(),
        moved_rate: r.moved_rate,
        changed_ranges: r.changed_ranges,
        sites: r
            .sites
            .iter()
            .map(|s| api::SiteImpact {
                site: names[s.site].clone(),
                load: s.load,
                moving_in: s.moving_in,
                moving_out: s.moving_out,
                projected: s.projected,
                capacity: s.capacity,
                projected_share: s.capacity.map(|c| s.projected / c),
            })
            .collect(),
        moves: r
            .moves
            .iter()
            .map(|m| api::PrefixMove {
                service: service_name(m.service),
                prefix: m.prefix,
                from: site_names(&m.from),
                to: site_names(&m.to),
                rate: m.rate,
            })
            .collect(),
    })
}
