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
    /// `portion` or `random`: the sort ends, the kernel draws among what is left.
    Draw(Metric),
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
            Kind::Draw(m) => vec![(*m, 1.0)],
        }
    }
}

/// A service's sort policy, checked: build it with [`Policy::new`].
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    priority: [Option<u32>; 8],
    weight: [Option<f64>; 8],
    pub(super) rtt_tolerance_percent: u32,
    pub(super) med: bool,
    /// Derived: the levels in ascending priority, the first draw level's metric, whether
    /// a level has `rtt`.
    pub(super) levels: Vec<Level>,
    pub(super) draw: Option<Metric>,
    pub(super) uses_rtt: bool,
}

/// Highest rtt tolerance DistributedDirector accepts, percent.
pub const MAX_RTT_TOLERANCE: u32 = 100;

impl Policy {
    /// A policy from each metric's priority (1 to 100, lower first) and weight (a finite
    /// number >= 0), the rtt tolerance in percent (0 to 100) and whether `med` is on.
    ///
    /// Weights mix metrics that share a priority. A weight of 0 turns a metric off: it is
    /// left out of its level (and a level left with no metric is dropped). A metric with
    /// a weight and no priority goes to priority 101.
    ///
    /// `portion` and `random` end the sort: the kernel draws among what is left per query,
    /// so neither can be added into a composite computed beforehand; each must stand alone
    /// at its priority (a weight on one alone only turns it on or, at 0, off).
    ///
    /// `med` is DistributedDirector's step before the sort (not weightable or
    /// prioritizable) and needs `ext` and `int` in the policy (a priority or a weight > 0).
    ///
    /// Refused with a message naming the problem: a metric listed twice, a priority outside
    /// 1..=100, a negative, NaN or infinite weight, a draw sharing its level, med without
    /// ext and int, a tolerance above 100.
    pub fn new(
        priority: &[(Metric, u32)],
        weights: &[(Metric, f64)],
        rtt_tolerance_percent: u32,
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
            if !(w.is_finite() && w >= 0.0) {
                return Err(format!("weight {w} of {m} is not a finite number >= 0"));
            }
            weight[m as usize] = Some(w);
        }
        if rtt_tolerance_percent > MAX_RTT_TOLERANCE {
            return Err(format!(
                "rtt tolerance {rtt_tolerance_percent} is not from 0 to {MAX_RTT_TOLERANCE} \
                 percent"
            ));
        }
        let used = |m: Metric| match (prio[m as usize], weight[m as usize]) {
            (_, Some(w)) => w > 0.0,
            (Some(_), None) => true,
            (None, None) => false,
        };
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
            let kind = match m {
                Metric::Portion | Metric::Random => Kind::Draw(m),
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
                    let draw = |k: &Kind| matches!(k, Kind::Draw(_));
                    if draw(&kind) || draw(&level.kind) {
                        let other = level.metrics()[0].0;
                        let (d, o) = if draw(&kind) { (m, other) } else { (other, m) };
                        let at = if p == UNPRIORITISED {
                            "the weighted metrics' composite (no priority given)".to_string()
                        } else {
                            format!("priority {p}")
                        };
                        return Err(format!(
                            "{d} cannot share {at} with {o}: {d} ends the sort with a draw \
                             the kernel makes per query, which is no number to add into a \
                             composite computed beforehand; give {d} a priority of its own"
                        ));
                    }
                    match (&mut level.kind, m) {
                        (Kind::Sum { rtt, .. }, Metric::Rtt) => *rtt = Some(w),
                        (Kind::Sum { terms, .. }, _) => terms.push((m, w)),
                        (Kind::Draw(_), _) => unreachable!("draw levels are refused above"),
                    }
                }
            }
        }
        levels.sort_by_key(|l| l.priority);
        let draw = levels.iter().find_map(|l| match l.kind {
            Kind::Draw(m) => Some(m),
            Kind::Sum { .. } => None,
        });
        let uses_rtt = levels
            .iter()
            .any(|l| matches!(l.kind, Kind::Sum { rtt: Some(_), .. }));
        Ok(Policy {
            priority: prio,
            weight,
            rtt_tolerance_percent,
            med,
            levels,
            draw,
            uses_rtt,
        })
    }

    pub fn priority(&self, m: Metric) -> Option<u32> {
        self.priority[m as usize]
    }
    pub fn weight(&self, m: Metric) -> Option<f64> {
        self.weight[m as usize]
    }
    pub fn rtt_tolerance_percent(&self) -> u32 {
        self.rtt_tolerance_percent
    }
    pub fn med(&self) -> bool {
        self.med
    }
    /// The draw that ends the sort (`portion` or `random`), if the sort reaches one.
    pub fn draw(&self) -> Option<Metric> {
        self.draw
    }
    /// Whether rtt is in a level (and its tolerance applies).
    pub fn uses_rtt(&self) -> bool {
        self.uses_rtt
    }
    /// The sort's levels in order: priority and (metric, weight) pairs.
    pub fn levels(&self) -> Vec<(u32, Vec<(Metric, f64)>)> {
        self.levels
            .iter()
            .map(|l| (l.priority, l.metrics()))
            .collect()
    }
}
