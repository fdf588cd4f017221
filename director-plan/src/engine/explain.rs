//! The sort replayed step by step for `explain`: the same levels and tiers as [`rank`],
//! with every remaining server's values and who survived each level.
//!
//! [`rank`]: super::rank

use serde::{Deserialize, Serialize};

use super::metric::{Candidate, MedRoute, Metric, Rtt};
use super::policy::{Kind, Policy};
use super::rank::{bits_of, contains, each, SortBuffers, MISSING};

/// The sort replayed step by step (for `explain`): every tier, every level, each remaining
/// server's values and who survived. Serializable; `Display` prints a table in the manner
/// of Cisco's `debug ip director sort`.
#[derive(Clone, Debug, PartialEq)]
pub struct Explanation {
    /// The draw that ends the sort, if the sort reaches one.
    pub draw: Option<Metric>,
    /// The rtt tolerance, when rtt is in the policy.
    pub rtt_tolerance_percent: Option<u32>,
    pub med: bool,
    /// The policy's levels, in order.
    pub levels: Vec<LevelInfo>,
    pub tiers: Vec<TierExplanation>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct LevelInfo {
    pub priority: u32,
    /// The level's metrics with their weights (1 for a lone metric without one).
    pub metrics: Vec<Term>,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Term {
    pub metric: Metric,
    pub weight: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TierExplanation {
    pub tier: usize,
    /// The med step before the levels, when med is on.
    pub med: Option<MedStep>,
    /// One per policy level, in order.
    pub steps: Vec<Step>,
    /// The tier: what the kernel picks from (tier 0) or falls back to.
    pub chosen: Vec<Chosen>,
}

/// The med step of one tier: each server left, with a route or without.
#[derive(Clone, Debug, PartialEq)]
pub struct MedStep {
    pub rows: Vec<MedRow>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MedRow {
    pub index: usize,
    pub server: u16,
    /// The site's AS, exit point and MED; `None` without a route.
    pub route: Option<MedRoute>,
    pub survived: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub priority: u32,
    pub metrics: Vec<Term>,
    pub outcome: Outcome,
    /// For levels with rtt: the lowest rtt among the complete servers and the highest that
    /// ties with it (exact).
    pub rtt_lowest: Option<Rtt>,
    pub rtt_limit: Option<Rtt>,
    pub rows: Vec<Row>,
}

/// What a sort level did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The servers were compared by the level's metrics.
    Compared,
    /// `portion` or `random`: the sort stops here and the kernel draws among these.
    Draw,
    /// After a draw.
    NotReached,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub index: usize,
    pub server: u16,
    /// Each of the step's metrics' values (`None` = missing; rtt in ms).
    pub values: Vec<Option<f64>>,
    /// What was compared at a sum step (the weighted sum, rtt within tolerance counted as
    /// the lowest); `None` when data is missing.
    pub key: Option<f64>,
    pub survived: bool,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Chosen {
    pub index: usize,
    pub server: u16,
    pub portion: u16,
}

/// Replays [`rank`] recording every step. Its tiers are exactly `rank`'s.
pub fn explain(policy: &Policy, cands: &[Candidate]) -> Explanation {
    let n = cands.len();
    let levels: Vec<LevelInfo> = policy
        .levels
        .iter()
        .map(|l| LevelInfo {
            priority: l.priority,
            metrics: l
                .metrics()
                .into_iter()
                .map(|(metric, weight)| Term { metric, weight })
                .collect(),
        })
        .collect();
    let mut out = Explanation {
        draw: policy.draw,
        rtt_tolerance_percent: policy.uses_rtt.then_some(policy.rtt_tolerance_percent),
        med: policy.med,
        levels: levels.clone(),
        tiers: Vec::new(),
    };
    let mut s = SortBuffers::default();
    s.prepare(policy, cands);
    let mut left = bits_of(n, 0..n);
    while left.iter().any(|&w| w != 0) {
        s.set.clone_from(&left);
        let med = policy.med.then(|| {
            let mut before = Vec::new();
            each(&s.set, |i| before.push(i));
            s.med_step();
            MedStep {
                rows: before
                    .into_iter()
                    .map(|i| MedRow {
                        index: i,
                        server: cands[i].server,
                        route: cands[i].metrics.med,
                        survived: contains(&s.set, i),
                    })
                    .collect(),
            }
        });
        let mut steps = Vec::new();
        let mut stopped = false;
        for (l, info) in levels.iter().enumerate() {
            let mut step = Step {
                priority: info.priority,
                metrics: info.metrics.clone(),
                outcome: Outcome::Compared,
                rtt_lowest: None,
                rtt_limit: None,
                rows: Vec::new(),
            };
            if stopped {
                step.outcome = Outcome::NotReached;
                steps.push(step);
                continue;
            }
            let mut before = Vec::new();
            each(&s.set, |i| before.push(i));
            let base = &s.base[l * n..(l + 1) * n];
            let rtt = match &policy.levels[l].kind {
                Kind::Sum { rtt, .. } => {
                    rtt.map(|w| (w, s.rtt_cut(base, &s.set, policy.rtt_tolerance_percent)))
                }
                Kind::Draw(_) => None,
            };
            if let Some((_, Some(cut))) = rtt {
                step.rtt_lowest = Some(cut.lowest);
                step.rtt_limit = Some(cut.limit);
            }
            let keys: Vec<Option<f64>> = match &policy.levels[l].kind {
                Kind::Sum { .. } => before
                    .iter()
                    .map(|&i| Some(s.key(base, i, rtt)).filter(|&k| k != MISSING))
                    .collect(),
                _ => vec![None; before.len()],
            };
            if !s.apply(policy, cands, l) {
                step.outcome = Outcome::Draw;
                stopped = true;
            }
            for (&i, key) in before.iter().zip(keys) {
                step.rows.push(Row {
                    index: i,
                    server: cands[i].server,
                    values: info
                        .metrics
                        .iter()
                        .map(|t| t.metric.value(&cands[i].metrics))
                        .collect(),
                    key,
                    survived: contains(&s.set, i),
                });
            }
            steps.push(step);
        }
        let mut chosen = Vec::new();
        each(&s.set, |i| {
            chosen.push(Chosen {
                index: i,
                server: cands[i].server,
                portion: cands[i].portion,
            });
        });
        for (l, t) in left.iter_mut().zip(&s.set) {
            *l &= !t;
        }
        out.tiers.push(TierExplanation {
            tier: out.tiers.len(),
            med,
            steps,
            chosen,
        });
    }
    out
}
