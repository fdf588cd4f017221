//! The sort replayed step by step for `explain`: the same levels and tiers as [`rank`],
//! with every remaining server's values and who survived each level.
//!
//! [`rank`]: super::rank

use serde::{Deserialize, Serialize};

use super::metric::{Candidate, Metric};
use super::policy::{Kind, Policy};
use super::rank::{bits_of, contains, each, SortBuffers, MISSING};

/// The sort replayed step by step (for `explain`): every tier, every level, each remaining
/// server's values and who survived. Serializable; `Display` prints a table in the manner
/// of Cisco's `debug ip director sort`.
#[derive(Clone, Debug, PartialEq)]
pub struct Explanation {
    pub random: bool,
    pub rtt_tolerance_percent: f64,
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
    /// One per policy level, in order.
    pub steps: Vec<Step>,
    /// The tier: what the kernel picks from (tier 0) or falls back to.
    pub chosen: Vec<Chosen>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub priority: u32,
    pub metrics: Vec<Term>,
    pub outcome: Outcome,
    /// For levels with rtt: the lowest rtt among the complete servers and the highest that
    /// ties with it.
    pub rtt_lowest: Option<f64>,
    pub rtt_limit: Option<f64>,
    pub rows: Vec<Row>,
}

/// What a sort level did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The servers were compared by the level's metrics.
    Compared,
    /// `random`: the sort stops here and the kernel picks among these.
    Random,
    /// After `random`.
    NotReached,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub index: usize,
    pub server: u16,
    /// Each of the step's metrics' values (`None` = missing; `med` is in `med`).
    pub values: Vec<Option<f64>>,
    /// (exit AS, MED) at a med step.
    pub med: Option<(u32, u32)>,
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
        random: policy.random(),
        rtt_tolerance_percent: policy.rtt_tolerance_percent,
        levels: levels.clone(),
        tiers: Vec::new(),
    };
    let mut s = SortBuffers::default();
    s.prepare(policy, cands);
    let mut left = bits_of(n, 0..n);
    while left.iter().any(|&w| w != 0) {
        s.set.clone_from(&left);
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
            let (rtt, is_med) = match &policy.levels[l].kind {
                Kind::Sum { rtt, .. } => (
                    rtt.map(|w| (w, s.rtt_cut(base, &s.set, policy.rtt_tolerance_percent))),
                    false,
                ),
                Kind::Med => (None, true),
                Kind::Random => (None, false),
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
                step.outcome = Outcome::Random;
                stopped = true;
            }
            for (&i, key) in before.iter().zip(keys) {
                step.rows.push(Row {
                    index: i,
                    server: cands[i].server,
                    values: if is_med {
                        vec![]
                    } else {
                        info.metrics
                            .iter()
                            .map(|t| t.metric.value(&cands[i].metrics))
                            .collect()
                    },
                    med: if is_med { cands[i].metrics.med } else { None },
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
            steps,
            chosen,
        });
    }
    out
}
