//! `explain`: for one client and service, every server's data and metric values and the
//! engine's sort replayed level by level, as the [`api::Explain`] document, with server names
//! where the engine speaks of candidate indexes.

use std::collections::BTreeMap;
use std::net::IpAddr;

use anyhow::{anyhow, Context, Result};
use director_common::name;

use super::config::Config;
use super::data::Data;
use super::decide::{candidates, plans, Ids, SiteView};
use super::engine::{self, Explanation, Metrics};
use super::model::Location;
use super::sweep::{covering, host};
use crate::api;

pub fn explain(cfg: &Config, data: &Data, service: &str, addr: IpAddr) -> Result<api::Explain> {
    let plans = plans(cfg, &Ids::positional(cfg))?;
    let wire = name::encode(service).map_err(|e| anyhow!("bad DNS name {service:?}: {e}"))?;
    let (index, plan) = plans
        .iter()
        .enumerate()
        .find(|(_, p)| name::encode(&p.name).is_ok_and(|w| w == wire))
        .with_context(|| format!("no service {service:?} in the config"))?;
    let client = host(addr);
    let loc = covering(&data.locations, &client);
    // Per site: the most specific route and RTT prefixes holding the client.
    let found: Vec<_> = data
        .sites
        .iter()
        .map(|s| (covering(&s.routes, &client), covering(&s.rtt, &client)))
        .collect();
    let views: Vec<SiteView<'_>> = data
        .sites
        .iter()
        .zip(&found)
        .map(|(site, (route, rtt))| SiteView {
            route: route.map(|r| &r.1),
            rtt: rtt.map(|r| r.1),
            geo: loc.and_then(|l| data.geo_km(site, &l.1)),
        })
        .collect();
    let mut cands = Vec::new();
    candidates(plan, data, &views, &mut cands);
    // Positional ids: server id `n` is the config's server `n - 1`.
    let server_name = |id: u16| cfg.servers[usize::from(id) - 1].name.clone();
    let location = loc.map(|(prefix, l)| match l {
        Location::Point(p) => api::ClientLocation {
            prefix: *prefix,
            lat: Some(p.lat),
            lon: Some(p.lon),
            node: None,
        },
        Location::Named(n) => api::ClientLocation {
            prefix: *prefix,
            lat: None,
            lon: None,
            node: Some(n.clone()),
        },
    });
    let servers = plan
        .servers
        .iter()
        .zip(&cands)
        .map(|(s, c)| {
            let (route, rtt) = found[s.site];
            api::ExplainServer {
                server: server_name(s.id),
                site: cfg.sites[s.site].name.clone(),
                bgp_prefix: route.map(|r| r.0),
                location: location.clone(),
                rtt: rtt.map(|&(prefix, ms)| api::RttMeasurement { prefix, ms }),
                metrics: metric_values(&c.metrics),
            }
        })
        .collect();
    Ok(api::Explain {
        version: api::VERSION,
        service: plan.name.clone(),
        client: addr,
        select: cfg.services[index].select.unwrap_or_default(),
        servers,
        sort: sort(&engine::explain(&plan.policy, &cands), &server_name),
    })
}

fn metric_values(m: &Metrics) -> api::MetricValues {
    api::MetricValues {
        ext: m.ext,
        int: m.int,
        ser: m.ser,
        rtt: m.rtt,
        med: m.med.map(|(exit_as, med)| api::Med { exit_as, med }),
        geo: m.geo,
        admin: m.admin,
    }
}

/// The engine's replay with server names.
pub fn sort(e: &Explanation, name: &dyn Fn(u16) -> String) -> api::Sort {
    api::Sort {
        random: e.random,
        rtt_tolerance_percent: e.rtt_tolerance_percent,
        levels: e
            .levels
            .iter()
            .map(|l| api::Level {
                priority: l.priority,
                metrics: l.metrics.clone(),
            })
            .collect(),
        tiers: e
            .tiers
            .iter()
            .map(|t| api::Tier {
                tier: t.tier,
                steps: t.steps.iter().map(|s| step(s, name)).collect(),
                chosen: t
                    .chosen
                    .iter()
                    .map(|c| api::Chosen {
                        server: name(c.server),
                        portion: c.portion,
                    })
                    .collect(),
            })
            .collect(),
    }
}

fn step(s: &engine::Step, name: &dyn Fn(u16) -> String) -> api::Step {
    let med = s.metrics.iter().any(|t| t.metric == engine::Metric::Med);
    api::Step {
        priority: s.priority,
        metrics: s.metrics.clone(),
        outcome: s.outcome,
        rtt_lowest: s.rtt_lowest,
        rtt_limit: s.rtt_limit,
        rows: s
            .rows
            .iter()
            .map(|r| {
                let values: BTreeMap<_, _> = s
                    .metrics
                    .iter()
                    .zip(&r.values)
                    .map(|(t, v)| (t.metric, *v))
                    .collect();
                let missing = if med {
                    r.med.is_none()
                } else {
                    r.key.is_none()
                };
                api::Row {
                    server: name(r.server),
                    values,
                    med: r.med.map(|(exit_as, med)| api::Med { exit_as, med }),
                    key: r.key,
                    result: match (r.survived, missing) {
                        (true, _) => api::RowResult::Kept,
                        (false, true) => api::RowResult::OutNoData,
                        (false, false) => api::RowResult::Out,
                    },
                }
            })
            .collect(),
    }
}
