//! A service's sort policy: which metrics, at which priority, with which weights, checked
//! once and turned into the sort's levels.

use super::metric::{Metric, MAX_PRIORITY, UNPRIORITISED};

/// One level of the sort: the metrics that share a priority.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Level {
    pub(super) priority: u32,
    pub(super) kind: Kind,
}

#[derive(Clone, Debug, PartialEq)]
pub(super) enum Kind {
    /// Sum of weight × value over `terms`, plus `rtt` × (rtt with tolerance) when rtt is in
    /// the level (rtt is kept apart because its tolerance depends on who is compared).
    Sum {
        terms: Vec<(Metric, f64)>,
        rtt: Option<f64>,
    },
    Med,
    Random,
}

impl Level {
    /// The level's metrics and their weights, in `Metric` order.
    pub(super) fn metrics(&self) -> Vec<(Metric, f64)> {
        match &self.kind {
            Kind::Sum { terms, rtt } => {
                let mut v = terms.clone();
                if let Some(w) = rtt {
                    v.push((Metric::Rtt, *w));
                }
                v.sort_by_key(|(m, _)| *m);
                v
            }
            Kind::Med => vec![(Metric::Med, 1.0)],
            Kind::Random => vec![(Metric::Random, 1.0)],
        }
    }
}

/// A service's sort policy, checked: build it with [`Policy::new`].
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    priority: [Option<u32>; 8],
    weight: [Option<f64>; 8],
    pub(super) rtt_tolerance_percent: f64,
    pub(super) med: bool,
    /// Derived: the levels in ascending priority, whether one is `random`, whether one
    /// has `rtt`.
    pub(super) levels: Vec<Level>,
    pub(super) random: bool,
    pub(super) uses_rtt: bool,
}

impl Policy {
    /// A policy from each metric's priority (1 to 100, lower first) and weight (a finite
    /// number >= 0), the rtt tolerance in percent and whether `med` is on.
    ///
    /// Weights mix metrics that share a priority. A weight of 0 turns a metric off: it is
    /// left out of its level (and a level left with no metric is dropped). A metric with
    /// a weight and no priority goes to priority 101.
    ///
    /// `med` is on when `med` is true, and then needs a priority of its own (not shared),
    /// no weight, and `ext` and `int` in the policy (each with a priority or a weight > 0).
    /// `random` takes a priority of its own and no weight.
    ///
    /// Refused with a message naming the problem: a metric listed twice, a priority outside
    /// 1..=100, a negative, NaN or infinite weight, a weight for med or random, med or
    /// random sharing a priority, med without ext and int, med on without a priority or
    /// given a priority while off, a negative or non-finite tolerance.
    pub fn new(
        priority: &[(Metric, u32)],
        weights: &[(Metric, f64)],
        rtt_tolerance_percent: f64,
        med: bool,
    ) -> Result<Policy, String> {
        let mut prio = [None; 8];
        let mut weight = [None; 8];
        for &(m, p) in priority {
            if prio[m as usize].is_some() {
                return Err(format!("{m} is given two priorities"));
            }
            if !(1..=MAX_PRIORITY).contains(&p) {
                return Err(format!(
                    "priority {p} of {m} is not from 1 to {MAX_PRIORITY} \
                     ({UNPRIORITISED} is where weighted metrics without a priority go)"
                ));
            }
            prio[m as usize] = Some(p);
        }
        for &(m, w) in weights {
            if weight[m as usize].is_some() {
                return Err(format!("{m} is given two weights"));
            }
            if m == Metric::Med || m == Metric::Random {
                return Err(format!(
                    "{m} takes no weight, only a priority of its own: it is no number to add \
                     into a composite"
                ));
            }
            if !(w.is_finite() && w >= 0.0) {
                return Err(format!("weight {w} of {m} is not a finite number >= 0"));
            }
            weight[m as usize] = Some(w);
        }
        if !(rtt_tolerance_percent.is_finite() && rtt_tolerance_percent >= 0.0) {
            return Err(format!(
                "rtt tolerance {rtt_tolerance_percent} is not a finite percentage >= 0"
            ));
        }
        let used = |m: Metric| match (prio[m as usize], weight[m as usize]) {
            (_, Some(w)) => w > 0.0,
            (Some(_), None) => true,
            (None, None) => false,
        };
        let med_prio = prio[Metric::Med as usize];
        match (med, med_prio) {
            (true, None) => {
                return Err(
                    "med is on but has no priority: give it one of its own (it takes \
                            no weight), e.g. after ext and before int as BGP does"
                        .into(),
                )
            }
            (false, Some(p)) => {
                return Err(format!(
                    "med has priority {p} but is off: turn med on or drop its priority"
                ))
            }
            _ => {}
        }
        if med {
            for need in [Metric::Ext, Metric::Int] {
                if !used(need) {
                    return Err(format!(
                        "med needs ext and int in the policy (a priority or a weight > 0), \
                         and {need} is not"
                    ));
                }
            }
        }
        // Levels: every used metric at its priority, or 101 when it has only a weight.
        let mut levels: Vec<Level> = Vec::new();
        for m in Metric::ALL {
            if !used(m) {
                continue;
            }
            let p = prio[m as usize].unwrap_or(UNPRIORITISED);
            let w = weight[m as usize].unwrap_or(1.0);
            let special = |k: &Kind| matches!(k, Kind::Med | Kind::Random);
            let kind = match m {
                Metric::Med => Kind::Med,
                Metric::Random => Kind::Random,
                Metric::Rtt => Kind::Sum {
                    terms: Vec::new(),
                    rtt: Some(w),
                },
                _ => Kind::Sum {
                    terms: vec![(m, w)],
                    rtt: None,
                },
            };
            match levels.iter_mut().find(|l| l.priority == p) {
                None => levels.push(Level { priority: p, kind }),
                Some(level) => {
                    if special(&kind) || special(&level.kind) {
                        let other = level.metrics()[0].0;
                        let (s, o) = if special(&kind) {
                            (m, other)
                        } else {
                            (other, m)
                        };
                        return Err(format!(
                            "{s} cannot share priority {p} with {o}: it is no number to add \
                             into a composite, give it a priority of its own"
                        ));
                    }
                    match (&mut level.kind, m) {
                        (Kind::Sum { rtt, .. }, Metric::Rtt) => *rtt = Some(w),
                        (Kind::Sum { terms, .. }, _) => terms.push((m, w)),
                        _ => unreachable!("med and random levels are refused above"),
                    }
                }
            }
        }
        levels.sort_by_key(|l| l.priority);
        let random = levels.iter().any(|l| l.kind == Kind::Random);
        let uses_rtt = levels
            .iter()
            .any(|l| matches!(l.kind, Kind::Sum { rtt: Some(_), .. }));
        Ok(Policy {
            priority: prio,
            weight,
            rtt_tolerance_percent,
            med,
            levels,
            random,
            uses_rtt,
        })
    }

    pub fn priority(&self, m: Metric) -> Option<u32> {
        self.priority[m as usize]
    }
    pub fn weight(&self, m: Metric) -> Option<f64> {
        self.weight[m as usize]
    }
    pub fn rtt_tolerance_percent(&self) -> f64 {
        self.rtt_tolerance_percent
    }
    pub fn med(&self) -> bool {
        self.med
    }
    /// Whether the kernel should pick among the final set at random (`random` in use).
    pub fn random(&self) -> bool {
        self.random
    }
    /// The sort's levels in order: priority and (metric, weight) pairs.
    pub fn levels(&self) -> Vec<(u32, Vec<(Metric, f64)>)> {
        self.levels
            .iter()
            .map(|l| (l.priority, l.metrics()))
            .collect()
    }
}
