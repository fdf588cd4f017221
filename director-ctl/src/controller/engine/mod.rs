//! The metric sort: ranks one service's candidate servers for one client prefix, with
//! Cisco DistributedDirector's semantics. Pure: no I/O, no aya, no files.
//!
//! The caller computes each candidate's metric values ([`Metrics`]) and the service's
//! [`Policy`]; [`rank_into`] ranks them into tiers of equally good servers and
//! [`to_decision`] turns the ranking into the kernel's [`Decision`]. [`explain`] replays
//! the same sort step by step for operators.
//!
//! # Sorting rules
//!
//! - Metrics are considered in ascending priority (lower priority number first).
//! - Metrics with the same priority are multiplied by their weights and added into one
//!   composite value (a metric with a priority and no weight counts with weight 1).
//! - A metric with a weight and no priority gets priority 101 (after all others; given
//!   priorities are 1 to 100).
//! - With no priorities at all, every weighted metric is added into one composite.
//! - Servers equal on one level go to the next; the others are out of this tier.
//! - What is left after the last level is the set the kernel picks from (by portion).
//!   It is tier 0; tier 1 is the best of the rest (the same sort re-run on the servers not
//!   yet ranked), and so on until every candidate is in a tier. Later tiers serve further
//!   answers and failover when servers go down.
//! - `rtt`: servers within `rtt_tolerance_percent` of the lowest rtt among the servers
//!   compared count as equal (tolerance 10: lowest 20 ms → everything ≤ 22 ms ties). In a
//!   composite, such an rtt counts as the lowest one; later ones keep their own value.
//! - `med`: among servers whose sites reach the prefix through the same neighbouring AS
//!   (same exit AS), those whose route has the lowest BGP MED win; servers with different
//!   exit ASes are not compared by it. It needs `ext` and `int` in the policy, takes a
//!   priority of its own and no weight.
//! - `random`: the sort stops there (a random draw leaves no ties for later levels); the
//!   kernel picks among what is left at random by portion. The engine does not reorder for
//!   it; [`Ranking::random`] records it.
//! - `portion` is a weight in the decision, never a sort key.
//! - Missing data (`None`, NaN, infinities): at a level, a server without a value (in a
//!   composite: missing any of its metrics) ranks after every server that has them all.
//!   When no server has them, the level cannot tell the servers apart and all go on.
//! - Values are compared after rounding to 40 significant bits (about 12 decimal digits),
//!   so that the last-bit rounding of a weighted sum does not split servers that are
//!   equal; "equal" stays an equivalence, and the ranking does not depend on the order of
//!   the candidates (except for the order within a tier, which is the candidates' order).
//!
//! # Cost
//!
//! [`rank_into`] reuses the buffers of the [`Ranking`] it is given: after the first calls
//! it does not allocate. Sets of servers are bit sets; when the first level's values are
//! fixed per server (anything but med or rtt mixed into a sum), the servers are sorted by
//! them once and each run of equal values is split into tiers by the later levels, instead
//! of re-comparing every server for every tier. See the `bench_one_million_ranks` test for
//! timings.

mod explain;
mod metric;
mod policy;
mod rank;
#[cfg(test)]
mod tests;

pub use explain::{
    explain, Chosen, Explanation, LevelInfo, Outcome, Row, Step, Term, TierExplanation,
};
pub use metric::{med_key, Candidate, Metric, Metrics, MAX_PRIORITY, UNPRIORITISED};
pub use policy::Policy;
pub use rank::{decide, rank, rank_into, to_decision, Ranking};
