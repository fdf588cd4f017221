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
//! - Before the levels, when `med` is on (DistributedDirector's step, "not weightable or
//!   prioritizable"): among servers whose sites are in the same AS but reach the client
//!   through different exit points (BGP next hops), those with a MED above the lowest of
//!   them are out of the tier. Servers alone in their AS, sharing one exit point, or
//!   without a route are not touched. Unlike RFC 4271 §9.1.2.2, where MEDs compare only
//!   among routes from the same neighbouring AS inside one router's decision, this compares
//!   routes seen at different sites of one AS, by the sites' AS and exit points.
//! - `rtt`: a server is out only when its rtt is greater than lowest × (1 + tolerance/100)
//!   (tolerance 10: lowest 20 ms → everything ≤ 22 ms ties). RTTs are whole nanoseconds and
//!   the comparison is integer arithmetic, exact on the boundary. In a composite, an rtt
//!   within tolerance counts as the lowest one; later ones keep their own value.
//! - `portion` and `random` end the sort: the kernel draws among what is left, per query,
//!   by portion or uniformly. Each stands alone at its priority. Levels after the first
//!   draw are not reached.
//! - What is left after the last level is tier 0, the set the kernel picks from: by the
//!   draw, or, without one, by a hash of the client (see `select`) so that one client's
//!   answer does not change from query to query. Tier 1 is the best of the rest (the same
//!   sort re-run on the servers not yet ranked), and so on until every candidate is in a
//!   tier. Later tiers serve further answers and failover when servers go down, until the
//!   controller re-sorts without them.
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

#[cfg(test)]
mod conformance;
mod explain;
mod metric;
mod policy;
mod rank;
#[cfg(test)]
mod tests;

pub use explain::{
    explain, Chosen, Explanation, LevelInfo, MedRow, MedStep, Outcome, Row, Step, Term,
    TierExplanation,
};
pub use metric::{Candidate, MedRoute, Metric, Metrics, Rtt, MAX_PRIORITY, UNPRIORITISED};
pub use policy::{Policy, MAX_RTT_TOLERANCE};
pub use rank::{decide, rank, rank_into, to_decision, Ranking};
