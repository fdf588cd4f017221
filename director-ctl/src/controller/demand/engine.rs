//! One cycle of demand: the kernel's counters read and turned into rates since the last
//! read, the sampled records drained, then capacity spill and replicas decided on them.
//! What it changes leaves here as data (`Outcome`); `run` writes it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Instant;

use anyhow::Result;
use director_common::demand::Sample;
use director_common::maps::{Decision, MAX_CANDIDATES};
use director_plan::data::Data;
use director_plan::decide::{Computed, Ids};
use director_plan::demand::replicas::{
    ReplicaAction, ReplicaSettings, ReplicaState, Replicas, Visitor,
};
use director_plan::demand::spill::{SiteLoad, Spill, SpillSettings};
use director_plan::demand::{site_shares, Group};
use director_plan::model::Location;
use director_plan::prefix::sweep;
use ipnet::IpNet;

use super::config::DemandConfig;
use super::hooks::{Hook, HookCall};
use super::samples::Samples;
use crate::api::{self, Event, Log};
use crate::controller::config::Config;
use crate::kernel::{DemandRing, Maps};

/// The decision as stored: the scope belongs to the entry.
pub fn stored(d: &Decision) -> Decision {
    Decision {
        prefix_len: 0,
        ..*d
    }
}

/// Cumulative counts at one read.
#[derive(Default)]
struct Reading {
    /// Per choice index.
    choices: HashMap<u32, u64>,
    answers: HashMap<u16, u64>,
    flows: HashMap<u16, u64>,
    services: HashMap<u32, u64>,
}

/// What a cycle changed, for `run` to write.
#[derive(Default)]
pub struct Outcome {
    /// Groups (service, planned decision) whose override came or went.
    pub regrouped: Vec<(u32, Decision)>,
    /// The replicas that hold their service changed: the servers that are out changed.
    pub replicas_changed: bool,
}

/// What the cycle needs of `run`'s state.
pub struct Ctx<'a> {
    pub cfg: &'a Config,
    pub data: &'a Data,
    /// The planned tables (before spill).
    pub computed: &'a Computed,
    pub ids: &'a Ids,
    /// A server's health verdict for a service: up, down or not checked yet.
    pub verdict: &'a dyn Fn(u32, u16) -> Option<bool>,
    pub log: Log,
}

pub struct Demand {
    pub cfg: DemandConfig,
    epoch: Instant,
    last: Option<(f64, Reading)>,
    ring: Option<DemandRing>,
    samples: Samples,
    spill: Spill,
    replicas: Replicas,
    copy: Hook,
    retire: Hook,
    report: api::Demand,
    /// Each service's rate in the last cycle (what sampled prefixes are scaled to).
    service_rates: BTreeMap<u32, f64>,
}

impl Demand {
    pub fn new(pin_dir: &std::path::Path, cfg: &DemandConfig, log: Log) -> Demand {
        let ring = match DemandRing::open(pin_dir) {
            Ok(r) => Some(r),
            Err(e) => {
                log.event(
                    Event::Refused {
                        error: format!("{e:#}"),
                    },
                    format!("demand: no sampled client prefixes: {e:#}"),
                );
                None
            }
        };
        let mut d = Demand::idle(cfg);
        d.ring = ring;
        d.reconfigure(cfg);
        d
    }

    /// A reloaded config's `[demand]`: state is kept.
    pub fn reconfigure(&mut self, cfg: &DemandConfig) {
        let r = &cfg.replicas;
        let timeout = std::time::Duration::from_secs_f64(r.hook_timeout);
        self.copy = Hook {
            command: r.copy_command.clone(),
            url: r.copy_url.clone(),
            timeout,
        };
        self.retire = Hook {
            command: r.retire_command.clone(),
            url: r.retire_url.clone(),
            timeout,
        };
        self.cfg = cfg.clone();
    }

    fn spill_settings(&self) -> SpillSettings {
        let s = &self.cfg.spill;
        SpillSettings {
            target: s.target,
            low: s.low,
            hold_s: s.hold,
            max_step: s.max_step,
        }
    }

    fn replica_settings(&self) -> ReplicaSettings {
        let r = &self.cfg.replicas;
        ReplicaSettings {
            k: r.k,
            threshold: r.threshold,
            retire_below: r.retire_below,
            hold_s: r.retire_hold,
            half_life_s: r.half_life,
            drain_s: r.drain,
        }
    }

    pub fn now_s(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }

    /// The last cycle's report.
    pub fn report(&self) -> &api::Demand {
        &self.report
    }

    /// The override for a group, if spill moved it.
    pub fn effective(&self, service: u32, planned: &Decision) -> Option<Decision> {
        self.spill.effective(service, &stored(planned))
    }

    /// (service, server) names of replicas in their service's decisions: serving ones.
    /// A copying one waits for its health check to pass (then it serves); a draining one
    /// gets no new clients.
    pub fn held(&self, cfg: &Config, ids: &Ids) -> BTreeSet<(String, String)> {
        let serving: BTreeSet<(u32, u16)> = self
            .replicas
            .report()
            .iter()
            .filter(|r| r.state == ReplicaState::Serving)
            .map(|r| (r.service, r.server))
            .collect();
        let mut held = BTreeSet::new();
        for (svc, &sid) in cfg.services.iter().zip(&ids.services) {
            for r in &svc.replicas {
                let Some(i) = cfg.servers.iter().position(|s| &s.name == r) else {
                    continue;
                };
                if serving.contains(&(sid, ids.servers[i])) {
                    held.insert((svc.name.clone(), r.clone()));
                }
            }
        }
        held
    }

    /// Drains the sampled records (bounded: the rest wait for the next call).
    pub fn drain(&mut self) {
        if let Some(r) = &mut self.ring {
            let got: Vec<Sample> = r.drain(1 << 20);
            self.samples.add(&got);
        }
    }

    /// Reads the counters and decides; the first call only takes the starting counts.
    pub fn cycle(&mut self, m: &mut Maps, ctx: &Ctx<'_>) -> Result<Outcome> {
        if m.demand_sampling()? != self.cfg.sample {
            m.set_demand_sampling(self.cfg.sample)?;
        }
        self.drain();
        let now = self.now_s();
        let reading = read(m, ctx)?;
        let Some((then, last)) = self.last.replace((now, reading)) else {
            self.samples.clear();
            return Ok(Outcome::default());
        };
        let dt = (now - then).max(1e-3);
        let cur = &self.last.as_ref().expect("just set").1;
        let rate = |a: u64, b: Option<&u64>| a.saturating_sub(b.copied().unwrap_or(0)) as f64 / dt;
        let site_of = site_index(ctx);
        let site_fn = |id: u16| site_of.get(&id).copied();

        // Groups: the planned decision each choice's counts belong to.
        let owners = m.choice_owners()?;
        let mut back: HashMap<(u32, Decision), Decision> = HashMap::new();
        let mut entries: HashMap<(u32, Decision), (usize, IpNet)> = HashMap::new();
        for (sid, _, t) in &ctx.computed.tables {
            for (p, d) in &t.entries {
                let planned = stored(d);
                let eff = self.spill.effective(*sid, &planned).unwrap_or(planned);
                back.entry((*sid, eff)).or_insert(planned);
                entries.entry((*sid, planned)).or_insert((0, *p)).0 += 1;
            }
        }
        // Keyed by the whole decision: two with the same servers differ in their primaries
        // or weights (a default route's all-equal list beside a prefix's ranked one).
        type GroupKey = (u32, [u16; MAX_CANDIDATES], u8, u8, [u16; MAX_CANDIDATES]);
        let mut groups: BTreeMap<GroupKey, Group> = BTreeMap::new();
        let mut decision_rates: HashMap<(u32, Decision), (f64, u64)> = HashMap::new();
        for (index, service, d) in &owners {
            let count = cur.choices.get(index).copied().unwrap_or(0);
            let r = rate(count, last.choices.get(index));
            let e = decision_rates.entry((*service, stored(d))).or_default();
            e.0 += r;
            e.1 += count;
            let Some(planned) = back.get(&(*service, stored(d))) else {
                continue;
            };
            let key = (
                *service,
                planned.servers,
                planned.count,
                planned.primary,
                planned.weights,
            );
            groups
                .entry(key)
                .or_insert(Group {
                    service: *service,
                    planned: *planned,
                    rate: 0.0,
                })
                .rate += r;
        }
        let groups: Vec<Group> = groups.into_values().collect();

        // Sites' loads from the per-server counters.
        let mut loads: Vec<f64> = vec![0.0; ctx.cfg.plan.sites.len()];
        let mut servers = Vec::new();
        for (s, &id) in ctx.cfg.servers.iter().zip(&ctx.ids.servers) {
            let a = rate(
                cur.answers.get(&id).copied().unwrap_or(0),
                last.answers.get(&id),
            );
            let f = rate(
                cur.flows.get(&id).copied().unwrap_or(0),
                last.flows.get(&id),
            );
            if let Some(&i) = site_of.get(&id) {
                loads[i] += a + f;
            }
            servers.push(api::ServerDemand {
                server: s.name.clone(),
                site: s.site.clone(),
                answers: a,
                flows: f,
                answers_total: cur.answers.get(&id).copied().unwrap_or(0),
                flows_total: cur.flows.get(&id).copied().unwrap_or(0),
                capacity: s.capacity,
            });
        }
        let caps = capacities(ctx.cfg);
        let sites: Vec<SiteLoad> = (0..loads.len())
            .map(|i| SiteLoad {
                site: i,
                capacity: caps[i],
                load: loads[i],
            })
            .collect();

        // Spill.
        let loss = |g: &Group, from: usize, to: usize| -> f64 {
            let Some((_, p)) = entries.get(&(g.service, g.planned)) else {
                return 0.0;
            };
            let Some(loc) = sweep::lookup(&ctx.data.locations, p) else {
                return 0.0;
            };
            let km = |i: usize| ctx.data.sites.get(i).and_then(|s| ctx.data.geo_km(s, loc));
            match (km(from), km(to)) {
                (Some(a), Some(b)) => b - a,
                _ => 0.0,
            }
        };
        let before: HashMap<(u32, Decision), Decision> = self
            .spill
            .overrides()
            .map(|o| ((o.service, o.planned), o.effective))
            .collect();
        let c = self.spill.cycle(
            now,
            &sites,
            &groups,
            &site_fn,
            &loss,
            &self.spill_settings(),
        );
        let after: HashMap<(u32, Decision), Decision> = self
            .spill
            .overrides()
            .map(|o| ((o.service, o.planned), o.effective))
            .collect();
        // Groups whose override came, went or changed (a further site demoted).
        let mut regrouped: Vec<(u32, Decision)> = before
            .iter()
            .filter(|(k, e)| after.get(k) != Some(e))
            .map(|(k, _)| *k)
            .chain(after.keys().filter(|k| !before.contains_key(k)).copied())
            .collect();
        regrouped.sort_by_key(|(s, d)| (*s, d.servers, d.count));
        let mut out = Outcome {
            regrouped,
            replicas_changed: false,
        };
        let site_name = |i: usize| {
            ctx.cfg
                .plan
                .sites
                .get(i)
                .map_or_else(|| format!("#{i}"), |s| s.name.clone())
        };
        let names = names_of(ctx);
        let service_name = |id: u32| names.services.get(&id).cloned().unwrap_or_default();
        let server_names = |d: &Decision| -> Vec<String> {
            d.servers[..(d.count as usize).min(d.servers.len())]
                .iter()
                .map(|s| {
                    names
                        .servers
                        .get(s)
                        .cloned()
                        .unwrap_or_else(|| format!("#{s}"))
                })
                .collect()
        };
        let as_move = |m: &director_plan::demand::spill::Move| api::SpillMove {
            service: service_name(m.service),
            from: site_name(m.from),
            to: site_name(m.to),
            rate: m.rate,
            loss: m.loss,
            servers: server_names(&m.planned),
        };
        if c.all_over {
            let sites: Vec<String> = c.over.iter().map(|&i| site_name(i)).collect();
            if self.report.spill.all_over != c.all_over {
                ctx.log.event(
                    Event::AllOverTarget {
                        sites: sites.clone(),
                    },
                    format!(
                        "demand: every site with a capacity is over its target ({}): nothing \
                         spills",
                        sites.join(", ")
                    ),
                );
            }
        }
        if !c.moves.is_empty() || !c.returns.is_empty() {
            let moved: Vec<api::SpillMove> = c.moves.iter().map(as_move).collect();
            let returned: Vec<api::SpillMove> = c.returns.iter().map(as_move).collect();
            let rate_of = |v: &[api::SpillMove]| v.iter().map(|m| m.rate).sum::<f64>();
            let msg = format!(
                "demand: spilled {} groups ({:.1}/s), returned {} ({:.1}/s)",
                moved.len(),
                rate_of(&moved),
                returned.len(),
                rate_of(&returned)
            );
            ctx.log.event(Event::Spilled { moved, returned }, msg);
        }

        // Replicas: every sampled visitor, placed, gives each candidate its bonus.
        let mut candidates = Vec::new();
        for (svc, &sid) in ctx.cfg.services.iter().zip(&ctx.ids.services) {
            for r in &svc.replicas {
                if let Some(i) = ctx.cfg.servers.iter().position(|s| &s.name == r) {
                    candidates.push((sid, ctx.ids.servers[i]));
                }
            }
        }
        let mut visitors = Vec::new();
        let mut place_locs: Vec<Location> = Vec::new();
        let mut place_index: HashMap<String, usize> = HashMap::new();
        let scale = self.cfg.sample.max(1) as f64;
        if !candidates.is_empty() {
            for ((service, prefix, _), n) in self.samples.iter() {
                let Some(loc) = sweep::lookup(&ctx.data.locations, prefix) else {
                    continue;
                };
                let key = format!("{loc:?}");
                let place = *place_index.entry(key).or_insert_with(|| {
                    place_locs.push(loc.clone());
                    place_locs.len() - 1
                });
                visitors.push(Visitor {
                    service: *service,
                    count: *n as f64 * scale,
                    place,
                });
            }
        }
        let distance = |place: usize, server: u16| -> Option<f64> {
            let site = *site_of.get(&server)?;
            ctx.data
                .geo_km(ctx.data.sites.get(site)?, place_locs.get(place)?)
        };
        let verdict = |svc: u32, srv: u16| (ctx.verdict)(svc, srv);
        let actions = self.replicas.cycle(
            now,
            &candidates,
            &visitors,
            &distance,
            &verdict,
            &self.replica_settings(),
        );
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        for a in &actions {
            let (what, service, server) = match a {
                ReplicaAction::Copy {
                    service, server, ..
                } => ("copy", *service, *server),
                ReplicaAction::Joined { service, server } => ("joined", *service, *server),
                ReplicaAction::Drain { service, server } => ("drain", *service, *server),
                ReplicaAction::Retire { service, server } => ("retire", *service, *server),
            };
            let bonus = self
                .replicas
                .report()
                .iter()
                .find(|r| r.service == service && r.server == server)
                .map_or(0.0, |r| r.bonus);
            out.replicas_changed = true;
            let call = HookCall {
                event: what.to_string(),
                service: service_name(service),
                server: names.servers.get(&server).cloned().unwrap_or_default(),
                site: site_of
                    .get(&server)
                    .map(|&i| site_name(i))
                    .unwrap_or_default(),
                bonus,
                time: wall,
            };
            ctx.log.event(
                Event::Replica {
                    action: what.to_string(),
                    service: call.service.clone(),
                    server: call.server.clone(),
                    bonus,
                },
                format!(
                    "replica {}: {} for {} (bonus {bonus:.0})",
                    what, call.server, call.service
                ),
            );
            match what {
                "copy" => self.copy.call(call, ctx.log),
                "retire" => self.retire.call(call, ctx.log),
                _ => {}
            }
        }

        // The report.
        let mut services: Vec<api::ServiceDemand> = Vec::new();
        for (svc, &sid) in ctx.cfg.services.iter().zip(&ctx.ids.services) {
            let total = cur.services.get(&sid).copied().unwrap_or(0);
            let mut decisions: Vec<api::DecisionDemand> = decision_rates
                .iter()
                .filter(|((s, _), (_, n))| *s == sid && *n > 0)
                .map(|((_, d), (r, count))| {
                    let planned = back.get(&(sid, *d)).copied();
                    let shares = site_shares(d, &site_fn);
                    api::DecisionDemand {
                        servers: server_names(d),
                        primary: d.primary,
                        sites: shares.iter().map(|(i, _)| site_name(*i)).collect(),
                        rate: *r,
                        count: *count,
                        entries: planned
                            .and_then(|p| entries.get(&(sid, p)))
                            .map_or(0, |e| e.0),
                        spilled: planned.is_some_and(|p| p != *d),
                    }
                })
                .collect();
            decisions.sort_by(|a, b| {
                b.rate
                    .total_cmp(&a.rate)
                    .then(b.count.cmp(&a.count))
                    .then(a.servers.cmp(&b.servers))
            });
            services.push(api::ServiceDemand {
                service: svc.name.clone(),
                // DIR_DEMAND counts answers and new flows; DIR_SVC_STATS answers only.
                rate: decisions.iter().map(|d| d.rate).sum(),
                total,
                decisions,
            });
        }
        let site_reports = ctx
            .cfg
            .plan
            .sites
            .iter()
            .enumerate()
            .map(|(i, s)| api::SiteDemand {
                site: s.name.clone(),
                location: s.location.clone().unwrap_or_else(|| s.name.clone()),
                rate: loads[i],
                capacity: caps[i],
                load: caps[i].map(|c| loads[i] / c),
                target: caps[i].map(|_| self.cfg.spill.target),
            })
            .collect();
        self.service_rates = services_rates(&services, ctx);
        let prefixes = self
            .samples
            .report(&|id| service_name(id), &self.service_rates, 200);
        let moved = self
            .spill
            .overrides()
            .map(|o| api::SpillOverride {
                group: api::SpillMove {
                    service: service_name(o.service),
                    from: o.away.first().map(|&i| site_name(i)).unwrap_or_default(),
                    to: site_shares(
                        &self
                            .spill
                            .effective(o.service, &o.planned)
                            .unwrap_or(o.planned),
                        &site_fn,
                    )
                    .first()
                    .map(|(i, _)| site_name(*i))
                    .unwrap_or_default(),
                    rate: o.rate,
                    loss: o.loss,
                    servers: server_names(&o.planned),
                },
                since: wall - (now - o.since),
            })
            .collect();
        let replicas = self
            .replicas
            .report()
            .into_iter()
            .map(|r| api::ReplicaState {
                service: service_name(r.service),
                server: names.servers.get(&r.server).cloned().unwrap_or_default(),
                site: site_of
                    .get(&r.server)
                    .map(|&i| site_name(i))
                    .unwrap_or_default(),
                bonus: r.bonus,
                state: match r.state {
                    ReplicaState::Absent => "absent",
                    ReplicaState::Copying => "copying",
                    ReplicaState::Serving => "serving",
                    ReplicaState::Draining => "draining",
                }
                .to_string(),
                since: (r.state != ReplicaState::Absent).then_some(wall - (now - r.since)),
            })
            .collect();
        self.report = api::Demand {
            window_s: dt,
            sample: self.cfg.sample,
            services,
            sites: site_reports,
            servers,
            prefixes,
            spill: api::SpillState {
                all_over: c.all_over,
                over: c.over.iter().map(|&i| site_name(i)).collect(),
                moved,
            },
            replicas,
        };
        self.samples.clear();
        Ok(out)
    }

    /// Per-prefix demand over the last window, for `impact`: samples scaled to each
    /// service's counted rate.
    pub fn prefix_demand(&self) -> director_plan::demand::PrefixDemand {
        self.samples.demand(&self.service_rates)
    }

    /// A `Demand` that reads nothing (the placeholder while `run` rebuilds its state).
    pub fn idle(cfg: &DemandConfig) -> Demand {
        Demand {
            cfg: cfg.clone(),
            epoch: Instant::now(),
            last: None,
            ring: None,
            samples: Samples::default(),
            spill: Spill::new(),
            replicas: Replicas::new(),
            copy: Hook::default(),
            retire: Hook::default(),
            report: empty_report(cfg),
            service_rates: BTreeMap::new(),
        }
    }
}

fn services_rates(services: &[api::ServiceDemand], ctx: &Ctx<'_>) -> BTreeMap<u32, f64> {
    ctx.ids
        .services
        .iter()
        .zip(services)
        .map(|(&id, s)| (id, s.rate))
        .collect()
}

fn empty_report(cfg: &DemandConfig) -> api::Demand {
    api::Demand {
        window_s: 0.0,
        sample: cfg.sample,
        services: Vec::new(),
        sites: Vec::new(),
        servers: Vec::new(),
        prefixes: Vec::new(),
        spill: api::SpillState::default(),
        replicas: Vec::new(),
    }
}

struct Names {
    services: HashMap<u32, String>,
    servers: HashMap<u16, String>,
}

fn names_of(ctx: &Ctx<'_>) -> Names {
    Names {
        services: ctx
            .ids
            .services
            .iter()
            .zip(&ctx.cfg.services)
            .map(|(&id, s)| (id, s.name.clone()))
            .collect(),
        servers: ctx
            .ids
            .servers
            .iter()
            .zip(&ctx.cfg.servers)
            .map(|(&id, s)| (id, s.name.clone()))
            .collect(),
    }
}

/// Server id → site index.
fn site_index(ctx: &Ctx<'_>) -> HashMap<u16, usize> {
    ctx.ids
        .servers
        .iter()
        .zip(&ctx.cfg.servers)
        .filter_map(|(&id, s)| {
            let i = ctx.cfg.plan.sites.iter().position(|x| x.name == s.site)?;
            Some((id, i))
        })
        .collect()
}

/// Each site's capacity: its own, else the sum of its servers' if every one has one.
pub fn capacities(cfg: &Config) -> Vec<Option<f64>> {
    cfg.plan
        .sites
        .iter()
        .map(|site| {
            site.capacity.or_else(|| {
                let mine: Vec<Option<f64>> = cfg
                    .servers
                    .iter()
                    .filter(|s| s.site == site.name)
                    .map(|s| s.capacity)
                    .collect();
                if mine.is_empty() || mine.iter().any(Option::is_none) {
                    None
                } else {
                    Some(mine.iter().flatten().sum())
                }
            })
        })
        .collect()
}

fn read(m: &Maps, ctx: &Ctx<'_>) -> Result<Reading> {
    let mut r = Reading {
        choices: m.demand_counts()?.into_iter().collect(),
        ..Reading::default()
    };
    let flows = m.steer().server_flows()?;
    for &id in &ctx.ids.servers {
        r.answers.insert(id, m.server_answers(id)?);
        r.flows.insert(id, flows.get(&id).copied().unwrap_or(0));
    }
    for &id in &ctx.ids.services {
        r.services.insert(id, m.service_answers(id)?);
    }
    Ok(r)
}
