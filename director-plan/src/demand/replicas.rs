//! Where to copy a resource: the DIY-CDN rule (`shared/seeds/diy-cdn.txt`): "when a
//! visitor applies for a resource, all geographic places where the resource could be, but
//! is not currently located, receive a bonus" of k / distance, zero where there is no path;
//! once the bonus crosses a threshold the resource is copied there. Here a place is a
//! candidate server of a service, the bonus fades with a half-life so old demand stops
//! counting, and a copy no longer wanted is drained and retired.
//!
//! Units: `count` is visitors (answers) in the window, `distance` whatever the caller's
//! graph measures (graph cost, or km), so a bonus is Σ k × visitors / distance, decayed.
//! Distances below 1 count as 1, so a visitor on top of a server gives k, not infinity.
//!
//! The controller acts on the actions: `Copy` starts a copy; a `Copying` server stays out
//! of answers until it reports healthy (so a failed copy never receives clients): only
//! [`Replicas::holds`] servers go into decisions, and `Draining` ones get no new clients.

use std::collections::BTreeMap;

use serde::Serialize;

/// The rule's knobs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReplicaSettings {
    /// Bonus per visitor at distance 1.
    pub k: f64,
    /// Copy when the bonus reaches this (and a draining copy is kept again).
    pub threshold: f64,
    /// A serving copy whose bonus stays below this ...
    pub retire_below: f64,
    /// ... for this many seconds is drained.
    pub hold_s: f64,
    /// Bonus halves every `half_life_s` seconds: demand an hour old barely counts.
    pub half_life_s: f64,
    /// How long a drained copy keeps its existing clients before it is retired.
    pub drain_s: f64,
}

impl Default for ReplicaSettings {
    /// With distances in km: 1000 visitors in a window from 1000 km away give 1000; a copy
    /// is made at 10 000 (ten such windows without fading, or 1000 visitors from 100 km) and
    /// retired below 1 000 for 10 minutes. The band between keeps a copy from flapping.
    fn default() -> Self {
        ReplicaSettings {
            k: 1000.0,
            threshold: 10_000.0,
            retire_below: 1_000.0,
            hold_s: 600.0,
            half_life_s: 300.0,
            drain_s: 60.0,
        }
    }
}

/// One window's visitors of a service from one place.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Visitor {
    pub service: u32,
    /// Visitors (answers) in this window.
    pub count: f64,
    /// An opaque place index the caller's `distance` understands.
    pub place: usize,
}

/// Where a copy stands.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplicaState {
    Absent,
    Copying,
    Serving,
    Draining,
}

/// What the controller should do.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "action")]
pub enum ReplicaAction {
    /// Copy the resource to the server (it stays out of answers until it is healthy).
    Copy {
        service: u32,
        server: u16,
        bonus: f64,
    },
    /// The copy is healthy (or a draining one is wanted again): put it in decisions.
    Joined { service: u32, server: u16 },
    /// No new clients for the copy; existing ones finish.
    Drain { service: u32, server: u16 },
    /// Remove the copy.
    Retire { service: u32, server: u16 },
}

/// A copy's state for reports.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReplicaStatus {
    pub service: u32,
    pub server: u16,
    pub bonus: f64,
    pub state: ReplicaState,
    /// When it entered that state.
    pub since: f64,
}

#[derive(Clone, Debug, PartialEq)]
struct Entry {
    bonus: f64,
    state: ReplicaState,
    since: f64,
    /// Serving: since when the bonus has been below `retire_below`.
    below_since: Option<f64>,
}

/// The state per (service, candidate server), across cycles.
#[derive(Clone, Debug, Default)]
pub struct Replicas {
    entries: BTreeMap<(u32, u16), Entry>,
    last: Option<f64>,
}

impl Replicas {
    pub fn new() -> Replicas {
        Replicas::default()
    }

    /// Marks a server as already holding the resource (at start-up, from what the servers
    /// report). Origins need not be candidates at all: they always hold it.
    pub fn set_serving(&mut self, service: u32, server: u16, now_s: f64) {
        let e = self.entries.entry((service, server)).or_insert(Entry {
            bonus: 0.0,
            state: ReplicaState::Absent,
            since: now_s,
            below_since: None,
        });
        e.state = ReplicaState::Serving;
        e.since = now_s;
        e.below_since = None;
    }

    /// One cycle. `candidates`: the servers each service may be copied to (others are
    /// forgotten, whatever their state: the controller stops using what it no longer
    /// lists); `visitors`: this window's; `distance(place, server)`: `None` when there is
    /// no path (no bonus); `healthy(service, server)`: the copy's health check, `None` when
    /// not known yet.
    ///
    /// Every candidate gets the bonus, present or not (the seed gives it only where the
    /// resource is absent; the same figure here also tells when a copy is no longer
    /// wanted). Actions come in (service, server) order.
    pub fn cycle(
        &mut self,
        now_s: f64,
        candidates: &[(u32, u16)],
        visitors: &[Visitor],
        distance: &dyn Fn(usize, u16) -> Option<f64>,
        healthy: &dyn Fn(u32, u16) -> Option<bool>,
        s: &ReplicaSettings,
    ) -> Vec<ReplicaAction> {
        let dt = self.last.map_or(0.0, |t| (now_s - t).max(0.0));
        self.last = Some(now_s);
        let decay = if dt <= 0.0 {
            1.0
        } else if s.half_life_s > 0.0 {
            0.5f64.powf(dt / s.half_life_s)
        } else {
            0.0
        };

        let wanted: std::collections::BTreeSet<(u32, u16)> = candidates.iter().copied().collect();
        self.entries.retain(|k, _| wanted.contains(k));
        for &k in &wanted {
            self.entries.entry(k).or_insert(Entry {
                bonus: 0.0,
                state: ReplicaState::Absent,
                since: now_s,
                below_since: None,
            });
        }
        for e in self.entries.values_mut() {
            e.bonus *= decay;
        }

        // Visitors summed per (service, place) first, so their order cannot change a sum.
        let mut per_place: BTreeMap<(u32, usize), f64> = BTreeMap::new();
        for v in visitors {
            if v.count.is_finite() && v.count > 0.0 {
                *per_place.entry((v.service, v.place)).or_default() += v.count;
            }
        }
        for (&(service, place), &count) in &per_place {
            for ((_, server), e) in self.entries.range_mut((service, 0)..=(service, u16::MAX)) {
                if let Some(d) = distance(place, *server).filter(|d| !d.is_nan()) {
                    e.bonus += s.k * count / d.max(1.0);
                }
            }
        }

        let mut actions = Vec::new();
        for (&(service, server), e) in &mut self.entries {
            match e.state {
                ReplicaState::Absent if e.bonus >= s.threshold => {
                    actions.push(ReplicaAction::Copy {
                        service,
                        server,
                        bonus: e.bonus,
                    });
                    e.state = ReplicaState::Copying;
                    e.since = now_s;
                }
                ReplicaState::Copying if healthy(service, server) == Some(true) => {
                    actions.push(ReplicaAction::Joined { service, server });
                    e.state = ReplicaState::Serving;
                    e.since = now_s;
                    e.below_since = None;
                }
                ReplicaState::Serving => {
                    if e.bonus < s.retire_below {
                        let since = *e.below_since.get_or_insert(now_s);
                        if now_s - since >= s.hold_s {
                            actions.push(ReplicaAction::Drain { service, server });
                            e.state = ReplicaState::Draining;
                            e.since = now_s;
                            e.below_since = None;
                        }
                    } else {
                        e.below_since = None;
                    }
                }
                ReplicaState::Draining if e.bonus >= s.threshold => {
                    actions.push(ReplicaAction::Joined { service, server });
                    e.state = ReplicaState::Serving;
                    e.since = now_s;
                }
                ReplicaState::Draining if now_s - e.since >= s.drain_s => {
                    actions.push(ReplicaAction::Retire { service, server });
                    e.state = ReplicaState::Absent;
                    e.since = now_s;
                }
                _ => {}
            }
        }
        actions
    }

    /// Whether the server is in the service's decisions: serving, or draining (still there
    /// for its existing clients, with no new ones). A copy being made is not.
    pub fn holds(&self, service: u32, server: u16) -> bool {
        self.entries
            .get(&(service, server))
            .is_some_and(|e| matches!(e.state, ReplicaState::Serving | ReplicaState::Draining))
    }

    /// Every candidate's bonus and state, in (service, server) order.
    pub fn report(&self) -> Vec<ReplicaStatus> {
        self.entries
            .iter()
            .map(|(&(service, server), e)| ReplicaStatus {
                service,
                server,
                bonus: e.bonus,
                state: e.state,
                since: e.since,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Places 0..: place p is at |p - server| km from server `server` (as numbers); place 99
    /// has no path anywhere.
    fn distance(place: usize, server: u16) -> Option<f64> {
        (place != 99).then(|| (place as f64 - f64::from(server)).abs() * 100.0)
    }

    fn up(_: u32, _: u16) -> Option<bool> {
        Some(true)
    }

    fn bonus(r: &Replicas, server: u16) -> f64 {
        r.report()
            .iter()
            .find(|x| x.server == server)
            .unwrap()
            .bonus
    }

    #[test]
    fn a_close_visitor_counts_more_and_no_path_counts_nothing() {
        let s = ReplicaSettings::default();
        let mut r = Replicas::new();
        let cands = [(1, 1), (1, 5)];
        let v = [Visitor {
            service: 1,
            count: 10.0,
            place: 2,
        }];
        r.cycle(0.0, &cands, &v, &distance, &up, &s);
        // 100 km from server 1, 300 km from server 5.
        assert!((bonus(&r, 1) - 100.0).abs() < 1e-9);
        assert!((bonus(&r, 5) - 1000.0 * 10.0 / 300.0).abs() < 1e-9);
        let mut far = Replicas::new();
        let v = [Visitor {
            service: 1,
            count: 10.0,
            place: 99,
        }];
        far.cycle(0.0, &cands, &v, &distance, &up, &s);
        assert!(far.report().iter().all(|x| x.bonus == 0.0));
        // Another service's visitors give nothing.
        let v = [Visitor {
            service: 2,
            count: 10.0,
            place: 1,
        }];
        far.cycle(0.0, &cands, &v, &distance, &up, &s);
        assert!(far.report().iter().all(|x| x.bonus == 0.0));
    }

    #[test]
    fn crossing_the_threshold_copies_once_and_an_unhealthy_copy_never_joins() {
        let s = ReplicaSettings::default();
        let mut r = Replicas::new();
        let cands = [(1, 3)];
        // 100 visitors on top of the server: 100 000 per window, well over the threshold.
        let v = [Visitor {
            service: 1,
            count: 100.0,
            place: 3,
        }];
        let down = |_: u32, _: u16| Some(false);
        let mut all = Vec::new();
        for i in 0..10 {
            all.extend(r.cycle(f64::from(i) * 5.0, &cands, &v, &distance, &down, &s));
            assert!(!r.holds(1, 3));
        }
        assert_eq!(all.len(), 1);
        assert!(matches!(
            all[0],
            ReplicaAction::Copy {
                service: 1,
                server: 3,
                ..
            }
        ));
        assert_eq!(r.report()[0].state, ReplicaState::Copying);
        // Healthy at last: it joins, once.
        let a = r.cycle(50.0, &cands, &v, &distance, &up, &s);
        assert_eq!(
            a,
            vec![ReplicaAction::Joined {
                service: 1,
                server: 3
            }]
        );
        assert!(r.holds(1, 3));
        assert!(r.cycle(55.0, &cands, &v, &distance, &up, &s).is_empty());
    }

    #[test]
    fn old_demand_fades() {
        let s = ReplicaSettings::default();
        let mut r = Replicas::new();
        let cands = [(1, 3)];
        let v = [Visitor {
            service: 1,
            count: 4.0,
            place: 3,
        }];
        r.cycle(0.0, &cands, &v, &distance, &up, &s);
        assert!((bonus(&r, 3) - 4000.0).abs() < 1e-9);
        r.cycle(300.0, &cands, &[], &distance, &up, &s);
        assert!((bonus(&r, 3) - 2000.0).abs() < 1e-9);
        r.cycle(900.0, &cands, &[], &distance, &up, &s);
        assert!((bonus(&r, 3) - 500.0).abs() < 1e-9);
    }

    #[test]
    fn a_copy_no_longer_wanted_drains_after_the_hold_then_retires() {
        let s = ReplicaSettings::default();
        let mut r = Replicas::new();
        let cands = [(1, 3)];
        r.set_serving(1, 3, 0.0);
        let mut log = Vec::new();
        let mut t = 0.0;
        while t <= 2000.0 {
            for a in r.cycle(t, &cands, &[], &distance, &up, &s) {
                log.push((t, a));
            }
            if t < 600.0 {
                assert!(r.holds(1, 3));
            }
            t += 5.0;
        }
        // Below retire_below from t = 0: drained after hold_s, retired drain_s later.
        assert_eq!(
            log,
            vec![
                (
                    600.0,
                    ReplicaAction::Drain {
                        service: 1,
                        server: 3
                    }
                ),
                (
                    660.0,
                    ReplicaAction::Retire {
                        service: 1,
                        server: 3
                    }
                ),
            ]
        );
        assert!(!r.holds(1, 3));
        // A draining copy wanted again serves again.
        let mut r = Replicas::new();
        r.set_serving(1, 3, 0.0);
        r.cycle(0.0, &cands, &[], &distance, &up, &s);
        r.cycle(600.0, &cands, &[], &distance, &up, &s);
        assert!(r.holds(1, 3));
        let v = [Visitor {
            service: 1,
            count: 100.0,
            place: 3,
        }];
        let a = r.cycle(610.0, &cands, &v, &distance, &up, &s);
        assert_eq!(
            a,
            vec![ReplicaAction::Joined {
                service: 1,
                server: 3
            }]
        );
        // Dropped from the candidates: forgotten.
        r.cycle(615.0, &[], &v, &distance, &up, &s);
        assert!(r.report().is_empty() && !r.holds(1, 3));
    }

    #[test]
    fn visitor_order_does_not_matter_and_reports_name_states() {
        let s = ReplicaSettings {
            threshold: 500.0,
            ..Default::default()
        };
        let cands = [(1, 1), (1, 5), (2, 2)];
        let mut v: Vec<Visitor> = (0..30)
            .map(|i| Visitor {
                service: 1 + (i % 2) as u32,
                count: 0.1 * f64::from(i),
                place: (i % 7) as usize,
            })
            .collect();
        let mut a = Replicas::new();
        let mut b = Replicas::new();
        let xa = a.cycle(0.0, &cands, &v, &distance, &up, &s);
        v.reverse();
        let xb = b.cycle(0.0, &cands, &v, &distance, &up, &s);
        assert_eq!(xa, xb);
        assert_eq!(a.report(), b.report());
        let json = serde_json::to_string(&a.report()[0]).unwrap();
        assert!(
            json.contains("\"state\":\"copying\"") || json.contains("\"state\":\"absent\""),
            "{json}"
        );
        let act = serde_json::to_string(&ReplicaAction::Drain {
            service: 1,
            server: 2,
        })
        .unwrap();
        assert_eq!(act, r#"{"action":"drain","service":1,"server":2}"#);
    }
}
