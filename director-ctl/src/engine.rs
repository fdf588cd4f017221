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

use std::fmt;
use std::str::FromStr;

use director_common::maps::{Decision, MAX_CANDIDATES};
use serde::{Deserialize, Serialize};

use crate::model::Route;

/// A sort metric (DistributedDirector's names, without the `drp-` prefix).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Metric {
    /// AS-path length of the site's best route to the prefix.
    Ext,
    /// IGP cost from the site to that route's BGP next hop.
    Int,
    /// The server's `agent_distance`.
    Ser,
    /// Measured round-trip time from the site, ms (with `rtt_tolerance_percent`).
    Rtt,
    /// BGP MED among servers with the same exit AS.
    Med,
    /// Distance from the client's location to the site, km.
    Geo,
    /// The server's administrative preference.
    Admin,
    /// Pick at random (by portion) among what is left.
    Random,
}

impl Metric {
    pub const ALL: [Metric; 8] = [
        Metric::Ext,
        Metric::Int,
        Metric::Ser,
        Metric::Rtt,
        Metric::Med,
        Metric::Geo,
        Metric::Admin,
        Metric::Random,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Metric::Ext => "ext",
            Metric::Int => "int",
            Metric::Ser => "ser",
            Metric::Rtt => "rtt",
            Metric::Med => "med",
            Metric::Geo => "geo",
            Metric::Admin => "admin",
            Metric::Random => "random",
        }
    }

    /// This metric's value in `m` as a number, when it is a plain "lower is better" one
    /// and present and finite; `None` for missing data and for `med` and `random`.
    #[inline(always)]
    fn value(self, m: &Metrics) -> Option<f64> {
        let v = match self {
            Metric::Ext => m.ext.map(f64::from),
            Metric::Int => m.int.map(f64::from),
            Metric::Ser => m.ser.map(f64::from),
            Metric::Rtt => m.rtt,
            Metric::Geo => m.geo,
            Metric::Admin => m.admin.map(f64::from),
            Metric::Med | Metric::Random => None,
        };
        v.filter(|v| v.is_finite())
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Metric {
    type Err = String;
    fn from_str(s: &str) -> Result<Metric, String> {
        Metric::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                let known: Vec<&str> = Metric::ALL.iter().map(|m| m.name()).collect();
                format!("unknown metric {s:?} (known: {})", known.join(", "))
            })
    }
}

/// Priority given to metrics that have a weight and no priority.
pub const UNPRIORITISED: u32 = 101;
/// Highest priority an operator may give.
pub const MAX_PRIORITY: u32 = 100;

/// One level of the sort: the metrics that share a priority.
#[derive(Clone, Debug, PartialEq)]
struct Level {
    priority: u32,
    kind: Kind,
}

#[derive(Clone, Debug, PartialEq)]
enum Kind {
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
    fn metrics(&self) -> Vec<(Metric, f64)> {
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
    rtt_tolerance_percent: f64,
    med: bool,
    /// Derived: the levels in ascending priority, whether one is `random`, whether one
    /// has `rtt`.
    levels: Vec<Level>,
    random: bool,
    uses_rtt: bool,
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

/// One candidate server's metric values for one client prefix. `None` = no data (no route,
/// no location, no measurement); NaN and infinities count as `None`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Metrics {
    pub ext: Option<u32>,
    pub int: Option<u32>,
    pub ser: Option<u32>,
    pub rtt: Option<f64>,
    /// (exit AS, MED) of the site's best route: build it with [`med_key`].
    pub med: Option<(u32, u32)>,
    pub geo: Option<f64>,
    pub admin: Option<u32>,
}

/// The `med` value of a route: its exit AS (the neighbouring AS it was learnt from) and its
/// MED. A route without MED counts as MED 0, as most BGP implementations do by default
/// (RFC 4271 leaves it to the implementation; Cisco's `bgp bestpath med missing-as-worst`
/// is the opposite choice, which director does not offer).
pub fn med_key(route: &Route) -> (u32, u32) {
    (route.neighbor_as, route.med.unwrap_or(0))
}

/// A server to rank.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Candidate {
    /// The caller's id, copied into decisions.
    pub server: u16,
    /// Share of answers among the final equals (0 counts as 1).
    pub portion: u16,
    pub metrics: Metrics,
}

/// Missing (or overflowed) values compare as +inf: after every real value.
const MISSING: f64 = f64::INFINITY;

#[inline(always)]
fn finite_or_missing(v: f64) -> f64 {
    if v.is_finite() {
        v
    } else {
        MISSING
    }
}

/// What values are compared by: `v` rounded to 40 significant bits (about 12 decimal
/// digits, so the last-bit errors of a weighted sum do not split servers that are equal),
/// as an integer in the same order; missing (NaN, infinite) is `u64::MAX`, after all.
/// Equality of these is exact, so "equal" is an equivalence and the tiers do not depend
/// on the order servers are compared in.
#[inline(always)]
fn quantize(v: f64) -> u64 {
    if !v.is_finite() {
        return u64::MAX;
    }
    // Round the magnitude to a multiple of 2^12 units in the last place (a carry into the
    // exponent is the next binade, or infinity); `+ 0.0` turns -0 into +0.
    let r = f64::from_bits((v.to_bits() + (1 << 11)) & !((1 << 12) - 1)) + 0.0;
    if !r.is_finite() {
        return u64::MAX;
    }
    total_order(r)
}

/// The rtt tie of a set: the lowest rtt among its complete servers and the highest rtt
/// that counts as equal to it.
#[derive(Clone, Copy, Debug, PartialEq)]
struct RttCut {
    lowest: f64,
    limit: f64,
}

/// Working memory reused across calls. Sets of candidates are bit sets (bit `i % 64` of
/// word `i / 64` is candidate `i`): narrowing a set and taking a tier out of what is left
/// are a few word operations, and iterating one goes in candidate order.
#[derive(Clone, Debug, Default)]
struct Scratch {
    /// Per level and candidate (`level * n + i`): the sum of a sum level's non-rtt terms,
    /// `MISSING` when one is missing (rows of other levels: unused).
    base: Vec<f64>,
    /// Per candidate: rtt, `MISSING` when missing (when the policy uses rtt).
    rtt: Vec<f64>,
    /// Per candidate: (exit AS, MED), valid for the members of `has_med` (when med is on).
    med: Vec<(u32, u32)>,
    has_med: Vec<u64>,
    /// The members of `set` with a route, at a med level.
    routed: Vec<u64>,
    /// Candidates not ranked yet.
    left: Vec<u64>,
    /// The set being narrowed down.
    set: Vec<u64>,
    /// Candidates ranked so far (when the first level is rtt alone).
    taken: Vec<u64>,
    /// Candidates by the first level's key, when it is fixed per candidate: see `sort_by`.
    sorted: Vec<u128>,
}

/// Calls `f` with each member of `set`, in ascending order.
#[inline(always)]
fn each(set: &[u64], mut f: impl FnMut(usize)) {
    for (w, &word) in set.iter().enumerate() {
        let mut bits = word;
        while bits != 0 {
            f(w * 64 + bits.trailing_zeros() as usize);
            bits &= bits - 1;
        }
    }
}

/// Removes from `set` the members for which `keep` is false.
#[inline(always)]
fn retain(set: &mut [u64], mut keep: impl FnMut(usize) -> bool) {
    for (w, word) in set.iter_mut().enumerate() {
        let mut bits = *word;
        while bits != 0 {
            let b = bits.trailing_zeros();
            if !keep(w * 64 + b as usize) {
                *word &= !(1u64 << b);
            }
            bits &= bits - 1;
        }
    }
}

/// Whether `set` has at most one member.
#[inline(always)]
fn at_most_one(set: &[u64]) -> bool {
    match set {
        [w] => w & w.wrapping_sub(1) == 0,
        _ => set.iter().map(|w| w.count_ones()).sum::<u32>() <= 1,
    }
}

/// `dst = src` (a plain store for one word; `copy_from_slice` is a call to memcpy); an
/// empty `src` clears `dst`.
#[inline(always)]
fn copy_bits(dst: &mut [u64], src: &[u64]) {
    match (dst, src) {
        ([d], [s]) => *d = *s,
        ([d], []) => *d = 0,
        (d, []) => d.fill(0),
        (d, s) => d.copy_from_slice(s),
    }
}

/// The bit set of `members` among `n` candidates.
fn bits_of(n: usize, members: impl IntoIterator<Item = usize>) -> Vec<u64> {
    let mut set = vec![0u64; n.div_ceil(64)];
    for i in members {
        set[i / 64] |= 1 << (i % 64);
    }
    set
}

#[inline(always)]
fn contains(set: &[u64], i: usize) -> bool {
    set[i / 64] & (1 << (i % 64)) != 0
}

#[inline(always)]
fn insert(set: &mut [u64], i: usize) {
    set[i / 64] |= 1 << (i % 64);
}

#[inline(always)]
fn is_empty(set: &[u64]) -> bool {
    set.iter().all(|&w| w == 0)
}

impl Scratch {
    fn prepare(&mut self, policy: &Policy, cands: &[Candidate]) {
        /// Puts weight × the metric `get` reads into (`first`) or adds it to each
        /// candidate's sum, one loop per metric so that the match on the metric stays out
        /// of the loop. After the `last` term, NaN or infinite inputs, and sums that
        /// overflow (inf - inf = NaN included), become missing.
        #[inline(always)]
        fn term(
            row: &mut [f64],
            cands: &[Candidate],
            w: f64,
            first: bool,
            last: bool,
            get: impl Fn(&Metrics) -> Option<f64>,
        ) {
            for (b, c) in row.iter_mut().zip(cands) {
                let v = match get(&c.metrics) {
                    Some(v) => (if first { 0.0 } else { *b }) + w * v,
                    None => MISSING,
                };
                *b = if last { finite_or_missing(v) } else { v };
            }
        }
        let n = cands.len();
        if n == 0 {
            return;
        }
        // Rows of levels that are no sums are never read: not cleared.
        if self.base.len() < policy.levels.len() * n {
            self.base.resize(policy.levels.len() * n, 0.0);
        }
        for (level, row) in policy.levels.iter().zip(self.base.chunks_exact_mut(n)) {
            let Kind::Sum { terms, .. } = &level.kind else {
                continue;
            };
            if terms.is_empty() {
                row.fill(0.0);
            }
            for (k, &(m, w)) in terms.iter().enumerate() {
                let (first, last) = (k == 0, k + 1 == terms.len());
                match m {
                    Metric::Ext => term(row, cands, w, first, last, |x| x.ext.map(f64::from)),
                    Metric::Int => term(row, cands, w, first, last, |x| x.int.map(f64::from)),
                    Metric::Ser => term(row, cands, w, first, last, |x| x.ser.map(f64::from)),
                    Metric::Geo => term(row, cands, w, first, last, |x| x.geo),
                    Metric::Admin => term(row, cands, w, first, last, |x| x.admin.map(f64::from)),
                    Metric::Rtt | Metric::Med | Metric::Random => {
                        unreachable!("rtt, med and random are no sum terms")
                    }
                }
            }
        }
        if policy.uses_rtt {
            self.rtt.clear();
            self.rtt.extend(
                cands
                    .iter()
                    .map(|c| c.metrics.rtt.map_or(MISSING, finite_or_missing)),
            );
        }
        if policy.med {
            self.med.clear();
            self.med
                .extend(cands.iter().map(|c| c.metrics.med.unwrap_or_default()));
            self.has_med.clear();
            self.has_med.resize(n.div_ceil(64), 0);
            for (i, c) in cands.iter().enumerate() {
                if c.metrics.med.is_some() {
                    self.has_med[i / 64] |= 1 << (i % 64);
                }
            }
        }
    }

    /// The rtt cut over `set` for a level whose non-rtt sums are `base`.
    fn rtt_cut(&self, base: &[f64], set: &[u64], tolerance: f64) -> Option<RttCut> {
        rtt_cut(&self.rtt, base, set, tolerance)
    }

    /// What candidate `i` is compared by at a sum level (`rtt`: the level's rtt weight and
    /// the set's cut, when rtt is in the level).
    fn key(&self, base: &[f64], i: usize, rtt: Option<(f64, Option<RttCut>)>) -> f64 {
        match rtt {
            None => base[i],
            Some((w, cut)) => sum_key(base[i], self.rtt[i], w, cut),
        }
    }

    /// The candidate `k`-th in `sorted`.
    #[inline(always)]
    fn at(&self, k: usize) -> usize {
        self.sorted[k] as u64 as usize
    }

    /// One tier: the servers of `left` narrowed level by level from level `from` on,
    /// appended to `order` and taken out of `left`.
    fn tier(
        &mut self,
        policy: &Policy,
        cands: &[Candidate],
        from: usize,
        order: &mut Vec<usize>,
        ends: &mut Vec<usize>,
    ) {
        copy_bits(&mut self.set, &self.left);
        for l in from..policy.levels.len() {
            if at_most_one(&self.set) || !self.apply(policy, cands, l) {
                break;
            }
        }
        // A level always keeps its best (at least one server); were that ever broken, the
        // servers left would make the tier rather than the loop never ending.
        debug_assert!(!is_empty(&self.set), "a level kept no server");
        if is_empty(&self.set) {
            copy_bits(&mut self.set, &self.left);
        }
        each(&self.set, |i| order.push(i));
        ends.push(order.len());
        for (l, t) in self.left.iter_mut().zip(&self.set) {
            *l &= !t;
        }
    }

    /// Narrows `self.set` to the best at `level` (index `l`). Returns false for `random`:
    /// the sort stops there.
    fn apply(&mut self, policy: &Policy, cands: &[Candidate], l: usize) -> bool {
        let n = cands.len();
        let Scratch {
            base,
            rtt,
            set,
            med,
            has_med,
            routed,
            ..
        } = self;
        match &policy.levels[l].kind {
            Kind::Random => return false,
            Kind::Sum { rtt: None, .. } => {
                let base = &base[l * n..(l + 1) * n];
                keep_lowest(set, |i| base[i]);
            }
            Kind::Sum { rtt: Some(w), .. } => {
                let base = &base[l * n..(l + 1) * n];
                let cut = rtt_cut(rtt, base, set, policy.rtt_tolerance_percent);
                keep_lowest(set, |i| sum_key(base[i], rtt[i], *w, cut));
            }
            Kind::Med => {
                // Only servers with a route take part; if none has one, all go on.
                routed.resize(set.len(), 0);
                let mut any = 0;
                for ((r, s), h) in routed.iter_mut().zip(set.iter()).zip(has_med.iter()) {
                    *r = s & h;
                    any |= *r;
                }
                if any != 0 {
                    // Kept: the routed servers that no routed server of the same exit AS
                    // beats with a lower MED.
                    copy_bits(set, routed);
                    retain(set, |i| {
                        let (exit, m) = med[i];
                        let mut beaten = false;
                        each(routed, |j| beaten |= med[j].0 == exit && med[j].1 < m);
                        !beaten
                    });
                }
            }
        }
        true
    }
}

/// Keeps in `set` the servers whose `key` is lowest (after [`quantize`]), or all when no
/// server has one.
#[inline(always)]
fn keep_lowest(set: &mut [u64], key: impl Fn(usize) -> f64) {
    let mut min = u64::MAX;
    each(set, |i| min = min.min(quantize(key(i))));
    if min != u64::MAX {
        retain(set, |i| quantize(key(i)) == min);
    }
}

/// The lowest rtt among the servers of `set` complete at a level (non-rtt sum `base` not
/// missing) and the highest rtt that ties with it; `None` when no server is complete.
#[inline(always)]
fn rtt_cut(rtt: &[f64], base: &[f64], set: &[u64], tolerance: f64) -> Option<RttCut> {
    let mut lowest = MISSING;
    each(set, |i| {
        if base[i] != MISSING && rtt[i] < lowest {
            lowest = rtt[i];
        }
    });
    (lowest != MISSING).then(|| RttCut {
        lowest,
        limit: lowest + lowest.abs() * (tolerance / 100.0),
    })
}

/// A sum level's key: the non-rtt sum plus weight × rtt, an rtt within the cut counting as
/// the lowest.
#[inline(always)]
fn sum_key(base: f64, rtt: f64, w: f64, cut: Option<RttCut>) -> f64 {
    match cut {
        Some(cut) if base != MISSING && rtt != MISSING => {
            let r = if rtt <= cut.limit { cut.lowest } else { rtt };
            finite_or_missing(base + w * r)
        }
        _ => MISSING,
    }
}

/// The candidates in tiers of equally good servers, best tier first. Reuse one across calls
/// with [`rank_into`]: it keeps its buffers.
#[derive(Clone, Default)]
pub struct Ranking {
    /// Candidate indexes, best tier first, ascending within a tier.
    order: Vec<usize>,
    /// End of each tier in `order`.
    ends: Vec<usize>,
    random: bool,
    scratch: Scratch,
}

impl Ranking {
    pub fn new() -> Ranking {
        Ranking::default()
    }
    /// Number of tiers (0 only for no candidates).
    pub fn tier_count(&self) -> usize {
        self.ends.len()
    }
    /// Tier `t`'s candidate indexes (ascending), or an empty slice past the last tier.
    pub fn tier(&self, t: usize) -> &[usize] {
        match self.ends.get(t) {
            Some(&end) => &self.order[if t == 0 { 0 } else { self.ends[t - 1] }..end],
            None => &[],
        }
    }
    /// The tiers, best first.
    pub fn tiers(&self) -> impl ExactSizeIterator<Item = &[usize]> + '_ {
        (0..self.ends.len()).map(|t| self.tier(t))
    }
    /// All candidate indexes, best tier first.
    pub fn order(&self) -> &[usize] {
        &self.order
    }
    /// Whether the kernel should pick among each tier at random (the policy uses `random`).
    pub fn random(&self) -> bool {
        self.random
    }
    /// The tiers as vectors (for tests and display; allocates).
    pub fn to_vecs(&self) -> Vec<Vec<usize>> {
        self.tiers().map(|t| t.to_vec()).collect()
    }
}

impl fmt::Debug for Ranking {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ranking")
            .field("tiers", &self.to_vecs())
            .field("random", &self.random)
            .finish()
    }
}

impl PartialEq for Ranking {
    fn eq(&self, other: &Ranking) -> bool {
        self.order == other.order && self.ends == other.ends && self.random == other.random
    }
}

/// Ranks `cands` under `policy` (allocates a new [`Ranking`]; in loops use [`rank_into`]).
pub fn rank(policy: &Policy, cands: &[Candidate]) -> Ranking {
    let mut r = Ranking::new();
    rank_into(policy, cands, &mut r);
    r
}

/// Ranks `cands` under `policy` into `out`, reusing its buffers (no allocation once they
/// have grown to the largest candidate count). Never panics on any metric values.
pub fn rank_into(policy: &Policy, cands: &[Candidate], out: &mut Ranking) {
    let n = cands.len();
    out.order.clear();
    out.ends.clear();
    out.random = policy.random;
    if n == 0 {
        return;
    }
    if policy.levels.is_empty() {
        out.order.extend(0..n);
        out.ends.push(n);
        return;
    }
    let Ranking {
        order,
        ends,
        scratch: s,
        ..
    } = out;
    s.prepare(policy, cands);
    let words = n.div_ceil(64);
    for v in [&mut s.set, &mut s.left, &mut s.taken] {
        v.clear();
        v.resize(words, 0);
    }
    match &policy.levels[0].kind {
        // The first level's key is fixed per candidate. Sorted by it, what the first level
        // keeps of the servers left is always the first run of equal keys among them: each
        // run is taken apart into tiers by the later levels, run after run.
        Kind::Sum { rtt: None, .. } => {
            sort_by(&mut s.sorted, &s.base[..n], quantize);
            let mut k = 0;
            while k < n {
                let run = s.sorted[k] >> 64;
                while k < n && s.sorted[k] >> 64 == run {
                    let i = s.at(k);
                    insert(&mut s.left, i);
                    k += 1;
                }
                while !is_empty(&s.left) {
                    s.tier(policy, cands, 1, order, ends);
                }
            }
        }
        // rtt alone: sorted by rtt, what the first level keeps of the servers left is those
        // from the lowest rtt left up to its tolerance, a prefix of those left in that order.
        Kind::Sum {
            terms,
            rtt: Some(w),
        } if terms.is_empty() => {
            sort_by(&mut s.sorted, &s.rtt, total_order);
            let mut head = 0;
            while head < n {
                if contains(&s.taken, s.at(head)) {
                    head += 1;
                    continue;
                }
                let lowest = s.rtt[s.at(head)];
                let cut = (lowest != MISSING).then(|| RttCut {
                    lowest,
                    limit: lowest + lowest.abs() * (policy.rtt_tolerance_percent / 100.0),
                });
                let key = |i: usize| quantize(sum_key(0.0, s.rtt[i], *w, cut));
                // Keys grow with rtt, except that w × rtt overflowing counts as missing: the
                // lowest is the first key left that is not missing.
                let mut min = u64::MAX;
                for k in head..n {
                    let i = s.at(k);
                    if !contains(&s.taken, i) && key(i) != u64::MAX {
                        min = key(i);
                        break;
                    }
                }
                for k in head..n {
                    let i = s.at(k);
                    if contains(&s.taken, i) {
                        continue;
                    }
                    let q = key(i);
                    if q == min || min == u64::MAX {
                        insert(&mut s.left, i);
                    } else if q != u64::MAX {
                        break;
                    }
                }
                let start = order.len();
                s.tier(policy, cands, 1, order, ends);
                for &i in &order[start..] {
                    insert(&mut s.taken, i);
                }
                // The rest of the prefix goes back: the next tier starts from the lowest
                // rtt left, with its own tolerance.
                copy_bits(&mut s.left, &[]);
            }
        }
        // med, or rtt in a sum: every tier compares every server left.
        _ => {
            for i in 0..n {
                insert(&mut s.left, i);
            }
            while !is_empty(&s.left) {
                s.tier(policy, cands, 0, order, ends);
            }
        }
    }
}

/// Fills `sorted` with the candidates in the order of `order(key)` (then of index), each
/// as that above its index: a plain integer sort.
#[inline(always)]
fn sort_by(sorted: &mut Vec<u128>, key: &[f64], order: impl Fn(f64) -> u64) {
    sorted.clear();
    sorted.extend(
        key.iter()
            .enumerate()
            .map(|(i, &k)| (u128::from(order(k)) << 64) | i as u128),
    );
    sorted.sort_unstable();
}

/// `v`'s bits as an integer in f64 total order.
#[inline(always)]
fn total_order(v: f64) -> u64 {
    let b = v.to_bits();
    if b >> 63 == 0 {
        b | 1 << 63
    } else {
        !b
    }
}

/// The kernel's decision for a ranking: tier 0 is the primary set, its portions the weights
/// (0 counts as 1); the following tiers come after it in order; at most
/// [`MAX_CANDIDATES`] in all (a tier 0 larger than that keeps its first ones by candidate
/// order). Fallbacks carry their portion too (the kernel ignores it).
///
/// # Panics
/// When `r` was not ranked from `cands` (an index out of range).
pub fn to_decision(r: &Ranking, cands: &[Candidate], prefix_len: u8) -> Decision {
    let count = r.order.len().min(MAX_CANDIDATES);
    let primary = r.ends.first().map_or(0, |&e| e.min(MAX_CANDIDATES));
    let mut d = Decision {
        prefix_len,
        count: count as u8,
        primary: primary as u8,
        ..Default::default()
    };
    for (k, &i) in r.order[..count].iter().enumerate() {
        d.servers[k] = cands[i].server;
        d.weights[k] = cands[i].portion.max(1);
    }
    d
}

/// [`rank_into`] then [`to_decision`]: one call per prefix and service.
pub fn decide(policy: &Policy, cands: &[Candidate], prefix_len: u8, buf: &mut Ranking) -> Decision {
    rank_into(policy, cands, buf);
    to_decision(buf, cands, prefix_len)
}

// ---------------------------------------------------------------------------------------
// explain

/// The sort replayed step by step (for `explain`): every tier, every level, each remaining
/// server's values and who survived. Serializable; `Display` prints a table in the manner
/// of Cisco's `debug ip director sort`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Explanation {
    pub random: bool,
    pub rtt_tolerance_percent: f64,
    /// The policy's levels, in order.
    pub levels: Vec<LevelInfo>,
    pub tiers: Vec<TierExplanation>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LevelInfo {
    pub priority: u32,
    /// The level's metrics with their weights (1 for a lone metric without one).
    pub metrics: Vec<Term>,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Term {
    pub metric: Metric,
    pub weight: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TierExplanation {
    pub tier: usize,
    /// One per policy level, in order.
    pub steps: Vec<Step>,
    /// The tier: what the kernel picks from (tier 0) or falls back to.
    pub chosen: Vec<Chosen>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Step {
    pub priority: u32,
    pub metrics: Vec<Term>,
    /// `compared`, `random` (the sort stops: the kernel picks at random) or `not reached`
    /// (after random).
    pub outcome: &'static str,
    /// For levels with rtt: the lowest rtt among the complete servers and the highest that
    /// ties with it.
    pub rtt_lowest: Option<f64>,
    pub rtt_limit: Option<f64>,
    pub rows: Vec<Row>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
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

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
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
    let mut s = Scratch::default();
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
                outcome: "compared",
                rtt_lowest: None,
                rtt_limit: None,
                rows: Vec::new(),
            };
            if stopped {
                step.outcome = "not reached";
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
                step.outcome = "random";
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
            })
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

/// A number as an operator reads it: integers without decimals, others to 3 places.
fn num(v: f64) -> String {
    if v != 0.0 && !(1e-3..1e15).contains(&v.abs()) {
        format!("{v:.1e}")
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), num)
}

fn terms(ts: &[Term]) -> String {
    match ts {
        [t] if t.weight == 1.0 => t.metric.to_string(),
        _ => ts
            .iter()
            .map(|t| format!("{}*{}", num(t.weight), t.metric))
            .collect::<Vec<_>>()
            .join(" + "),
    }
}

impl Explanation {
    /// The table with server names from `name` (`Display` shows `#id`).
    pub fn table(&self, name: &dyn Fn(u16) -> String) -> String {
        let mut o = String::new();
        let order: Vec<String> = self
            .levels
            .iter()
            .map(|l| format!("{}: {}", l.priority, terms(&l.metrics)))
            .collect();
        o += &format!(
            "sort by {} (rtt tolerance {}%)\n",
            if order.is_empty() {
                "nothing: all equal".to_string()
            } else {
                order.join(", ")
            },
            num(self.rtt_tolerance_percent)
        );
        for t in &self.tiers {
            o += &format!("tier {}\n", t.tier);
            for st in &t.steps {
                o += &format!("  priority {} {}", st.priority, terms(&st.metrics));
                match st.outcome {
                    "not reached" => {
                        o += ": not reached (after random)\n";
                        continue;
                    }
                    "random" => {
                        o += ": the kernel picks among these at random, by portion\n";
                        continue;
                    }
                    _ => {}
                }
                if let (Some(lo), Some(lim)) = (st.rtt_lowest, st.rtt_limit) {
                    o += &format!(
                        "  (lowest rtt {}, up to {} counts as {})",
                        num(lo),
                        num(lim),
                        num(lo)
                    );
                }
                o += "\n";
                let med = st.metrics.iter().any(|m| m.metric == Metric::Med);
                let mut head = vec![format!("{:<16}", "server")];
                if med {
                    head.push(format!("{:>10}", "exit AS"));
                    head.push(format!("{:>10}", "MED"));
                } else {
                    head.extend(
                        st.metrics
                            .iter()
                            .map(|m| format!("{:>10}", m.metric.name())),
                    );
                    head.push(format!(
                        "{:>10}",
                        if st.metrics.len() > 1 { "sum" } else { "key" }
                    ));
                }
                o += &format!("    {}  result\n", head.join(" "));
                for r in &st.rows {
                    let mut cols = vec![format!("{:<16}", name(r.server))];
                    if med {
                        let (a, m) = r.med.map_or(("-".into(), "-".into()), |(a, m)| {
                            (a.to_string(), m.to_string())
                        });
                        cols.push(format!("{a:>10}"));
                        cols.push(format!("{m:>10}"));
                    } else {
                        cols.extend(r.values.iter().map(|v| format!("{:>10}", opt(*v))));
                        cols.push(format!("{:>10}", opt(r.key)));
                    }
                    let missing = if med {
                        r.med.is_none()
                    } else {
                        r.key.is_none()
                    };
                    let res = match (r.survived, missing) {
                        (true, _) => "kept",
                        (false, true) => "out (no data)",
                        (false, false) => "out",
                    };
                    o += &format!("    {}  {res}\n", cols.join(" "));
                }
            }
            let chosen: Vec<String> = t
                .chosen
                .iter()
                .map(|c| format!("{} (portion {})", name(c.server), c.portion.max(1)))
                .collect();
            o += &format!("  => {}\n", chosen.join(", "));
        }
        o
    }
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.table(&|id| format!("#{id}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use Metric::*;

    fn m() -> Metrics {
        Metrics::default()
    }

    fn cand(server: u16, metrics: Metrics) -> Candidate {
        Candidate {
            server,
            portion: 1,
            metrics,
        }
    }

    /// The servers of each tier.
    fn tiers(p: &Policy, c: &[Candidate]) -> Vec<Vec<u16>> {
        rank(p, c)
            .tiers()
            .map(|t| t.iter().map(|&i| c[i].server).collect())
            .collect()
    }

    fn winners(p: &Policy, c: &[Candidate]) -> Vec<u16> {
        tiers(p, c).into_iter().next().unwrap_or_default()
    }

    fn pol(prio: &[(Metric, u32)], weights: &[(Metric, f64)]) -> Policy {
        Policy::new(prio, weights, 10.0, false).unwrap()
    }

    fn geo_admin(geo: f64, admin: u32) -> Metrics {
        Metrics {
            geo: Some(geo),
            admin: Some(admin),
            ..m()
        }
    }

    #[test]
    fn priorities_order_decides_the_winner() {
        let c = [cand(1, geo_admin(100.0, 5)), cand(2, geo_admin(900.0, 1))];
        assert_eq!(
            tiers(&pol(&[(Geo, 1), (Admin, 2)], &[]), &c),
            [vec![1], vec![2]]
        );
        assert_eq!(
            tiers(&pol(&[(Admin, 1), (Geo, 2)], &[]), &c),
            [vec![2], vec![1]]
        );
    }

    #[test]
    fn same_priority_metrics_add_by_weight() {
        // 1: geo 100, admin 50; 2: geo 300, admin 0.
        let c = [cand(1, geo_admin(100.0, 50)), cand(2, geo_admin(300.0, 0))];
        let prio = [(Geo, 1), (Admin, 1)];
        // 1*100 + 1*50 = 150 < 300.
        assert_eq!(winners(&pol(&prio, &[(Geo, 1.0), (Admin, 1.0)]), &c), [1]);
        // 1*100 + 10*50 = 600 > 300.
        assert_eq!(winners(&pol(&prio, &[(Geo, 1.0), (Admin, 10.0)]), &c), [2]);
        // No weights: each counts once.
        assert_eq!(winners(&pol(&prio, &[]), &c), [1]);
        // Equal composites tie: 0.5*100 + 1*50 = 100 = 0.5*200 + 0.
        let c2 = [cand(1, geo_admin(100.0, 50)), cand(2, geo_admin(200.0, 0))];
        assert_eq!(winners(&pol(&prio, &[(Geo, 0.5)]), &c2), [1, 2]);
    }

    #[test]
    fn weighted_metric_without_priority_comes_after_all_priorities() {
        // geo has only a weight: priority 101, after admin even at priority 100.
        let p = pol(&[(Admin, 100)], &[(Geo, 5.0)]);
        assert_eq!(
            p.levels(),
            vec![(100, vec![(Admin, 1.0)]), (101, vec![(Geo, 5.0)])]
        );
        let c = [cand(1, geo_admin(10.0, 2)), cand(2, geo_admin(500.0, 1))];
        assert_eq!(winners(&p, &c), [2]);
        // And it decides among those admin leaves tied.
        let c = [
            cand(1, geo_admin(10.0, 1)),
            cand(2, geo_admin(500.0, 1)),
            cand(3, geo_admin(1.0, 2)),
        ];
        assert_eq!(tiers(&p, &c), [vec![1], vec![2], vec![3]]);
    }

    #[test]
    fn without_priorities_all_weighted_metrics_make_one_composite() {
        let p = pol(&[], &[(Geo, 1.0), (Admin, 100.0), (Ser, 10.0)]);
        assert_eq!(
            p.levels(),
            vec![(101, vec![(Ser, 10.0), (Geo, 1.0), (Admin, 100.0)])]
        );
        let mk = |geo, admin, ser| Metrics {
            ser: Some(ser),
            ..geo_admin(geo, admin)
        };
        // 1: 50 + 100 + 10 = 160; 2: 0 + 0 + 200 = 200; 3: 150 + 0 + 0 = 150.
        let c = [
            cand(1, mk(50.0, 1, 1)),
            cand(2, mk(0.0, 0, 20)),
            cand(3, mk(150.0, 0, 0)),
        ];
        assert_eq!(tiers(&p, &c), [vec![3], vec![1], vec![2]]);
        // A lone metric with a weight and nothing else: still sorts.
        let p = pol(&[], &[(Geo, 2.0)]);
        assert_eq!(tiers(&p, &c), [vec![2], vec![1], vec![3]]);
    }

    fn rtt(ms: f64) -> Metrics {
        Metrics {
            rtt: Some(ms),
            ..m()
        }
    }

    #[test]
    fn rtt_within_tolerance_ties() {
        let p = Policy::new(&[(Rtt, 1)], &[], 10.0, false).unwrap();
        let c = [
            cand(1, rtt(20.0)),
            cand(2, rtt(22.0)),
            cand(3, rtt(22.5)),
            cand(4, rtt(30.0)),
        ];
        // 22 is within 10% of 20; 22.5 is not. The rest re-sorted: 22.5 is the lowest, 30 is
        // beyond 24.75.
        assert_eq!(tiers(&p, &c), [vec![1, 2], vec![3], vec![4]]);
        // Tolerance 0: only equal rtts tie.
        let p0 = Policy::new(&[(Rtt, 1)], &[], 0.0, false).unwrap();
        let c0 = [cand(1, rtt(20.0)), cand(2, rtt(20.0)), cand(3, rtt(20.001))];
        assert_eq!(tiers(&p0, &c0), [vec![1, 2], vec![3]]);
        // Tolerance 50: 30 ties with 20.
        let p50 = Policy::new(&[(Rtt, 1)], &[], 50.0, false).unwrap();
        assert_eq!(tiers(&p50, &c), [vec![1, 2, 3, 4]]);
    }

    #[test]
    fn rtt_ties_go_on_to_the_next_level() {
        let p = Policy::new(&[(Rtt, 1), (Admin, 2)], &[], 10.0, false).unwrap();
        let mk = |ms, admin| Metrics {
            rtt: Some(ms),
            admin: Some(admin),
            ..m()
        };
        let c = [
            cand(1, mk(20.0, 5)),
            cand(2, mk(21.0, 1)),
            cand(3, mk(40.0, 0)),
        ];
        assert_eq!(tiers(&p, &c), [vec![2], vec![1], vec![3]]);
    }

    #[test]
    fn rtt_tolerance_in_a_composite_counts_as_the_lowest() {
        // rtt + admin at one priority, tolerance 10: 21 counts as 20.
        let p = Policy::new(&[(Rtt, 1), (Admin, 1)], &[], 10.0, false).unwrap();
        let mk = |ms, admin| Metrics {
            rtt: Some(ms),
            admin: Some(admin),
            ..m()
        };
        let c = [
            cand(1, mk(20.0, 1)),
            cand(2, mk(21.0, 1)),
            cand(3, mk(25.0, 0)),
        ];
        // 1: 21, 2: 21 (20 + 1), 3: 25.
        assert_eq!(tiers(&p, &c), [vec![1, 2], vec![3]]);
        let p0 = Policy::new(&[(Rtt, 1), (Admin, 1)], &[], 0.0, false).unwrap();
        assert_eq!(tiers(&p0, &c), [vec![1], vec![2], vec![3]]);
    }

    fn bgp(ext: u32, int: u32, exit_as: u32, med: u32) -> Metrics {
        Metrics {
            ext: Some(ext),
            int: Some(int),
            med: Some((exit_as, med)),
            ..m()
        }
    }

    fn med_policy() -> Policy {
        Policy::new(&[(Ext, 1), (Med, 2), (Int, 3)], &[], 10.0, true).unwrap()
    }

    #[test]
    fn med_lower_wins_within_the_same_exit_as() {
        // Same path length, same exit AS: MED 10 beats MED 50 although its IGP cost is higher.
        let c = [
            cand(1, bgp(2, 5, 64500, 50)),
            cand(2, bgp(2, 100, 64500, 10)),
        ];
        assert_eq!(tiers(&med_policy(), &c), [vec![2], vec![1]]);
        // Without med, int decides.
        let p = Policy::new(&[(Ext, 1), (Int, 3)], &[], 10.0, false).unwrap();
        assert_eq!(tiers(&p, &c), [vec![1], vec![2]]);
    }

    #[test]
    fn med_does_not_compare_different_exit_ases() {
        // Different exit ASes: both survive med, int decides; the same-AS loser is out.
        let c = [
            cand(1, bgp(2, 50, 64500, 0)),
            cand(2, bgp(2, 10, 64501, 900)),
            cand(3, bgp(2, 5, 64500, 7)),
        ];
        assert_eq!(tiers(&med_policy(), &c), [vec![2], vec![1], vec![3]]);
        let e = explain(&med_policy(), &c);
        let med_step = &e.tiers[0].steps[1];
        assert_eq!(
            med_step.rows.iter().map(|r| r.survived).collect::<Vec<_>>(),
            [true, true, false]
        );
    }

    #[test]
    fn med_without_mediscriminator_counts_as_zero() {
        use crate::model::Route;
        let r = |med| Route {
            path_len: 2,
            neighbor_as: 64500,
            next_hop: "192.0.2.1".parse().unwrap(),
            med,
        };
        assert_eq!(med_key(&r(None)), (64500, 0));
        assert_eq!(med_key(&r(Some(30))), (64500, 30));
    }

    #[test]
    fn med_is_refused_unless_well_formed() {
        let e = Policy::new(&[(Ext, 1), (Med, 2)], &[], 10.0, true).unwrap_err();
        assert!(
            e.contains("med needs ext and int") && e.contains("int is not"),
            "{e}"
        );
        let e = Policy::new(&[(Int, 1), (Med, 2)], &[], 10.0, true).unwrap_err();
        assert!(e.contains("ext is not"), "{e}");
        // ext by weight only counts as in the policy; a weight of 0 does not.
        assert!(Policy::new(&[(Int, 1), (Med, 2)], &[(Ext, 1.0)], 10.0, true).is_ok());
        assert!(Policy::new(&[(Int, 1), (Med, 2)], &[(Ext, 0.0)], 10.0, true).is_err());
        let e =
            Policy::new(&[(Ext, 1), (Int, 2), (Med, 3)], &[(Med, 1.0)], 10.0, true).unwrap_err();
        assert!(e.contains("med takes no weight"), "{e}");
        let e = Policy::new(&[(Ext, 1), (Int, 2), (Med, 2)], &[], 10.0, true).unwrap_err();
        assert!(e.contains("med cannot share priority 2 with int"), "{e}");
        let e = Policy::new(&[(Ext, 1), (Int, 2)], &[], 10.0, true).unwrap_err();
        assert!(e.contains("med is on but has no priority"), "{e}");
        let e = Policy::new(&[(Ext, 1), (Int, 2), (Med, 3)], &[], 10.0, false).unwrap_err();
        assert!(e.contains("med has priority 3 but is off"), "{e}");
    }

    #[test]
    fn bad_policies_are_refused_with_the_reason() {
        let err = |prio: &[(Metric, u32)], w: &[(Metric, f64)], tol: f64| {
            Policy::new(prio, w, tol, false).unwrap_err()
        };
        assert!(err(&[(Geo, 1), (Geo, 2)], &[], 10.0).contains("geo is given two priorities"));
        assert!(err(&[], &[(Geo, 1.0), (Geo, 2.0)], 10.0).contains("geo is given two weights"));
        assert!(err(&[(Geo, 0)], &[], 10.0).contains("priority 0 of geo is not from 1 to 100"));
        assert!(err(&[(Geo, 101)], &[], 10.0).contains("priority 101 of geo"));
        assert!(err(&[], &[(Geo, -1.0)], 10.0).contains("weight -1 of geo"));
        assert!(err(&[], &[(Geo, f64::NAN)], 10.0).contains("weight NaN of geo"));
        assert!(err(&[], &[(Geo, f64::INFINITY)], 10.0).contains("weight inf of geo"));
        assert!(err(&[(Geo, 1)], &[], -1.0).contains("rtt tolerance -1"));
        assert!(err(&[(Geo, 1)], &[], f64::NAN).contains("rtt tolerance NaN"));
        assert!(err(&[(Random, 1)], &[(Random, 1.0)], 10.0).contains("random takes no weight"));
        assert!(err(&[(Random, 1), (Geo, 1)], &[], 10.0)
            .contains("random cannot share priority 1 with geo"));
        assert_eq!("geo".parse::<Metric>(), Ok(Geo));
        assert!("speed"
            .parse::<Metric>()
            .unwrap_err()
            .contains("unknown metric \"speed\""));
        assert_eq!(serde_json::to_string(&Admin).unwrap(), "\"admin\"");
        assert_eq!(serde_json::from_str::<Metric>("\"rtt\"").unwrap(), Rtt);
    }

    #[test]
    fn weight_zero_turns_a_metric_off() {
        let p = pol(&[(Geo, 1), (Admin, 1)], &[(Admin, 0.0)]);
        assert_eq!(p.levels(), vec![(1, vec![(Geo, 1.0)])]);
        // Missing admin does not count against a server when admin is off.
        let c = [
            cand(
                1,
                Metrics {
                    geo: Some(1.0),
                    ..m()
                },
            ),
            cand(2, geo_admin(2.0, 0)),
        ];
        assert_eq!(winners(&p, &c), [1]);
    }

    #[test]
    fn missing_data_ranks_last_and_never_panics() {
        let p = pol(&[(Geo, 1), (Admin, 2)], &[]);
        // Some missing: after those that have it, then sorted among themselves by admin.
        let c = [
            cand(
                1,
                Metrics {
                    admin: Some(1),
                    ..m()
                },
            ),
            cand(2, geo_admin(500.0, 9)),
            cand(
                3,
                Metrics {
                    geo: Some(f64::NAN),
                    admin: Some(0),
                    ..m()
                },
            ),
            cand(
                4,
                Metrics {
                    geo: Some(f64::INFINITY),
                    ..m()
                },
            ),
            cand(5, geo_admin(700.0, 0)),
        ];
        assert_eq!(tiers(&p, &c), [vec![2], vec![5], vec![3], vec![1], vec![4]]);
        // All missing: nobody is told apart.
        let c = [
            cand(1, m()),
            cand(2, m()),
            cand(
                3,
                Metrics {
                    rtt: Some(f64::NAN),
                    ..m()
                },
            ),
        ];
        assert_eq!(tiers(&p, &c), [vec![1, 2, 3]]);
        let every = Policy::new(
            &[(Ext, 1), (Med, 2), (Int, 3), (Rtt, 4), (Geo, 5), (Admin, 6)],
            &[(Ser, 1.0)],
            10.0,
            true,
        )
        .unwrap();
        assert_eq!(tiers(&every, &c), [vec![1, 2, 3]]);
        // Nothing to rank.
        assert_eq!(rank(&every, &[]).tier_count(), 0);
        assert_eq!(to_decision(&rank(&every, &[]), &[], 24).count, 0);
        // Extreme values: no overflow into NaN.
        let huge = Metrics {
            rtt: Some(f64::MAX),
            geo: Some(-f64::MAX),
            ..m()
        };
        let p = pol(&[(Rtt, 1), (Geo, 1)], &[(Rtt, 1e300), (Geo, 1e300)]);
        let c = [
            cand(1, huge),
            cand(2, rtt(1.0)),
            cand(
                3,
                Metrics {
                    geo: Some(1.0),
                    ..rtt(-f64::MAX)
                },
            ),
        ];
        let r = rank(&p, &c);
        assert_eq!(r.order().len(), 3);
    }

    #[test]
    fn composite_missing_any_metric_ranks_after_complete_ones() {
        let p = pol(&[(Geo, 1), (Admin, 1)], &[]);
        let c = [
            cand(
                1,
                Metrics {
                    geo: Some(1.0),
                    ..m()
                },
            ),
            cand(2, geo_admin(1000.0, 1000)),
            cand(
                3,
                Metrics {
                    admin: Some(0),
                    ..m()
                },
            ),
        ];
        assert_eq!(tiers(&p, &c), [vec![2], vec![1, 3]]);
    }

    #[test]
    fn ties_are_carried_to_the_next_level() {
        let p = pol(&[(Ext, 1), (Int, 2), (Admin, 3)], &[]);
        let mk = |ext, int, admin| Metrics {
            ext: Some(ext),
            int: Some(int),
            admin: Some(admin),
            ..m()
        };
        let c = [
            cand(1, mk(2, 10, 3)),
            cand(2, mk(2, 10, 1)),
            cand(3, mk(1, 99, 9)),
            cand(4, mk(1, 99, 9)),
            cand(5, mk(2, 20, 0)),
        ];
        assert_eq!(tiers(&p, &c), [vec![3, 4], vec![2], vec![1], vec![5]]);
    }

    #[test]
    fn random_is_recorded_and_ends_the_sort() {
        let p = pol(&[(Geo, 1), (Random, 2), (Admin, 3)], &[]);
        let c = [
            cand(1, geo_admin(10.0, 5)),
            cand(2, geo_admin(10.0, 1)),
            cand(3, geo_admin(50.0, 0)),
        ];
        let r = rank(&p, &c);
        assert!(r.random() && p.random());
        // Admin would split 1 and 2; after random it is not reached.
        assert_eq!(r.to_vecs(), vec![vec![0, 1], vec![2]]);
        assert!(!rank(&pol(&[(Geo, 1)], &[]), &c).random());
        let e = explain(&p, &c);
        assert_eq!(e.tiers[0].steps[1].outcome, "random");
        assert_eq!(e.tiers[0].steps[2].outcome, "not reached");
    }

    #[test]
    fn empty_policy_makes_everyone_equal() {
        let p = pol(&[], &[]);
        let c = [cand(1, m()), cand(2, geo_admin(1.0, 1))];
        assert_eq!(tiers(&p, &c), [vec![1, 2]]);
    }

    #[test]
    fn portions_become_weights() {
        let p = pol(&[(Geo, 1)], &[]);
        let mut c = [
            cand(7, geo_admin(1.0, 0)),
            cand(8, geo_admin(1.0, 0)),
            cand(9, geo_admin(5.0, 0)),
        ];
        c[0].portion = 3;
        c[1].portion = 0;
        c[2].portion = 40;
        let d = to_decision(&rank(&p, &c), &c, 24);
        assert_eq!((d.prefix_len, d.count, d.primary), (24, 3, 2));
        assert_eq!(d.servers[..3], [7, 8, 9]);
        assert_eq!(d.weights[..3], [3, 1, 40]);
        assert_eq!(decide(&p, &c, 24, &mut Ranking::new()), d);
    }

    #[test]
    fn fallback_tiers_follow_in_rank_order_and_at_most_eight() {
        let p = pol(&[(Admin, 1)], &[]);
        // 12 servers, admin 11 - i: server 11 is best.
        let c: Vec<Candidate> = (0..12)
            .map(|i| {
                cand(
                    100 + i,
                    Metrics {
                        admin: Some(11 - i as u32),
                        ..m()
                    },
                )
            })
            .collect();
        let r = rank(&p, &c);
        assert_eq!(r.tier_count(), 12);
        let d = to_decision(&r, &c, 16);
        assert_eq!((d.count, d.primary), (8, 1));
        assert_eq!(d.servers, [111, 110, 109, 108, 107, 106, 105, 104]);
        // A tier 0 of 10 keeps 8, all primary.
        let c: Vec<Candidate> = (0..10)
            .map(|i| {
                cand(
                    i,
                    Metrics {
                        admin: Some(0),
                        ..m()
                    },
                )
            })
            .collect();
        let d = to_decision(&rank(&p, &c), &c, 16);
        assert_eq!((d.count, d.primary), (8, 8));
        assert_eq!(d.servers, [0, 1, 2, 3, 4, 5, 6, 7]);
        // Tier 0 of 6 then a tier of 4: 8, 6 of them primary.
        let c: Vec<Candidate> = (0..10)
            .map(|i| {
                cand(
                    i,
                    Metrics {
                        admin: Some((i >= 6) as u32),
                        ..m()
                    },
                )
            })
            .collect();
        let d = to_decision(&rank(&p, &c), &c, 16);
        assert_eq!((d.count, d.primary), (8, 6));
    }

    #[test]
    fn explain_replays_the_sort_readably() {
        let p = Policy::new(
            &[(Ext, 1), (Med, 2), (Int, 3)],
            &[(Rtt, 2.0), (Geo, 0.1)],
            10.0,
            true,
        )
        .unwrap();
        let mut c = [
            cand(
                1,
                Metrics {
                    rtt: Some(20.0),
                    geo: Some(100.0),
                    ..bgp(2, 5, 64500, 50)
                },
            ),
            cand(
                2,
                Metrics {
                    rtt: Some(21.0),
                    geo: Some(300.0),
                    ..bgp(2, 5, 64501, 10)
                },
            ),
            cand(
                3,
                Metrics {
                    rtt: Some(10.0),
                    geo: Some(10.0),
                    ..bgp(3, 5, 64500, 0)
                },
            ),
            cand(4, m()),
        ];
        c[1].portion = 2;
        let e = explain(&p, &c);
        let got: Vec<Vec<usize>> = e
            .tiers
            .iter()
            .map(|t| t.chosen.iter().map(|c| c.index).collect())
            .collect();
        assert_eq!(got, rank(&p, &c).to_vecs());
        // 1: 2*20 + 10 = 50; 2: 2*20 (21 counts as 20) + 30 = 70.
        let sum = &e.tiers[0].steps[3];
        assert_eq!(sum.rtt_lowest, Some(20.0));
        assert_eq!(
            sum.rows.iter().map(|r| r.key).collect::<Vec<_>>(),
            [Some(50.0), Some(70.0)]
        );
        let text = e.to_string();
        for want in [
            "sort by 1: ext, 2: med, 3: int, 101: 2*rtt + 0.1*geo",
            "tier 0",
            "exit AS",
            "out (no data)",
            "lowest rtt 20, up to 22 counts as 20",
            "=> #1 (portion 1)",
        ] {
            assert!(text.contains(want), "{want:?} not in\n{text}");
        }
        let named = e.table(&|id| format!("srv-{id}"));
        assert!(named.contains("srv-2"), "{named}");
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["levels"][1]["metrics"][0]["metric"], "med");
        println!("{text}");
    }

    // ---- properties --------------------------------------------------------------------

    /// A straightforward re-implementation of the rules, from the policy's public levels.
    /// Returns the tiers and, for tier 0, the set compared at each level.
    fn naive(p: &Policy, c: &[Candidate]) -> (Vec<Vec<usize>>, Vec<Vec<usize>>) {
        let val = |i: usize, m: Metric| -> Option<f64> {
            let x = &c[i].metrics;
            let v = match m {
                Ext => x.ext.map(|v| v as f64),
                Int => x.int.map(|v| v as f64),
                Ser => x.ser.map(|v| v as f64),
                Rtt => x.rtt,
                Geo => x.geo,
                Admin => x.admin.map(|v| v as f64),
                Med | Random => unreachable!(),
            };
            v.filter(|v| v.is_finite())
        };
        let mut left: Vec<usize> = (0..c.len()).collect();
        let mut out = Vec::new();
        let mut compared0 = Vec::new();
        while !left.is_empty() {
            let mut set = left.clone();
            for (_, ms) in p.levels() {
                if out.is_empty() {
                    compared0.push(set.clone());
                }
                if ms[0].0 == Random {
                    break;
                }
                if ms[0].0 == Med {
                    let has: Vec<usize> = set
                        .iter()
                        .copied()
                        .filter(|&i| c[i].metrics.med.is_some())
                        .collect();
                    if !has.is_empty() {
                        set = has
                            .iter()
                            .copied()
                            .filter(|&i| {
                                let (a, m) = c[i].metrics.med.unwrap();
                                has.iter().all(|&j| {
                                    let (b, n) = c[j].metrics.med.unwrap();
                                    a != b || n >= m
                                })
                            })
                            .collect();
                    }
                    continue;
                }
                let complete: Vec<usize> = set
                    .iter()
                    .copied()
                    .filter(|&i| ms.iter().all(|&(m, _)| val(i, m).is_some()))
                    .collect();
                if complete.is_empty() {
                    continue;
                }
                let low = complete
                    .iter()
                    .filter_map(|&i| val(i, Rtt))
                    .fold(f64::INFINITY, f64::min);
                let lim = low + low.abs() * (p.rtt_tolerance_percent() / 100.0);
                // The other metrics in order, then rtt (the engine's order of additions).
                let key = |i: usize| -> f64 {
                    let others: f64 = ms
                        .iter()
                        .filter(|(m, _)| *m != Rtt)
                        .map(|&(m, w)| w * val(i, m).unwrap())
                        .sum();
                    let rtt = ms.iter().find(|(m, _)| *m == Rtt).map(|&(_, w)| {
                        let v = val(i, Rtt).unwrap();
                        w * if v <= lim { low } else { v }
                    });
                    others + rtt.unwrap_or(0.0)
                };
                // Equal: the same after rounding to 40 significant bits.
                let round = |v: f64| {
                    let r = f64::from_bits((v.to_bits() + (1 << 11)) & !((1 << 12) - 1)) + 0.0;
                    r.is_finite().then_some(r)
                };
                let min = complete
                    .iter()
                    .filter_map(|&i| round(key(i)))
                    .fold(f64::INFINITY, f64::min);
                if min == f64::INFINITY {
                    // Every sum overflowed: as if missing.
                    continue;
                }
                set = complete
                    .into_iter()
                    .filter(|&i| round(key(i)) == Some(min))
                    .collect();
            }
            left.retain(|i| !set.contains(i));
            out.push(set);
        }
        (out, compared0)
    }

    fn opt_u32(max: u32) -> impl Strategy<Value = Option<u32>> {
        prop_oneof![1 => Just(None), 6 => (0..=max).prop_map(Some)]
    }
    fn opt_f64() -> impl Strategy<Value = Option<f64>> {
        prop_oneof![
            1 => Just(None),
            1 => Just(Some(f64::NAN)),
            6 => prop::sample::select(vec![0.0, 10.0, 10.5, 11.0, 12.0, 20.0, 21.9, 22.0, 25.0, 100.0]).prop_map(Some),
        ]
    }
    fn metrics() -> impl Strategy<Value = Metrics> {
        (
            opt_u32(3),
            opt_u32(3),
            opt_u32(3),
            opt_f64(),
            prop::option::of((0..3u32, 0..3u32)),
            opt_f64(),
            opt_u32(3),
        )
            .prop_map(|(ext, int, ser, rtt, med, geo, admin)| Metrics {
                ext,
                int,
                ser,
                rtt,
                med,
                geo,
                admin,
            })
    }
    fn candidates() -> impl Strategy<Value = Vec<Candidate>> {
        candidates_in(0..12)
    }
    fn candidates_in(n: std::ops::Range<usize>) -> impl Strategy<Value = Vec<Candidate>> {
        prop::collection::vec((0..4u16, metrics()), n).prop_map(|v| {
            v.into_iter()
                .enumerate()
                .map(|(i, (portion, metrics))| Candidate {
                    server: i as u16,
                    portion,
                    metrics,
                })
                .collect()
        })
    }
    fn policy() -> impl Strategy<Value = Policy> {
        let plain = [Ext, Int, Ser, Rtt, Geo, Admin];
        (
            prop::collection::vec(
                (
                    prop::option::of(1..5u32),
                    prop::option::of(prop::sample::select(vec![0.0, 0.5, 1.0, 3.0])),
                ),
                6,
            ),
            prop::option::of(1..7u32),
            prop::option::of(1..8u32),
            prop::sample::select(vec![0.0, 10.0, 50.0]),
        )
            .prop_filter_map("not a valid policy", move |(pw, med, random, tol)| {
                let prio: Vec<(Metric, u32)> = plain
                    .iter()
                    .zip(&pw)
                    .filter_map(|(m, (p, _))| p.map(|p| (*m, p)))
                    .chain(med.map(|p| (Med, p)))
                    .chain(random.map(|p| (Random, p)))
                    .collect();
                let w: Vec<(Metric, f64)> = plain
                    .iter()
                    .zip(&pw)
                    .filter_map(|(m, (_, w))| w.map(|w| (*m, w)))
                    .collect();
                Policy::new(&prio, &w, tol, med.is_some()).ok()
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn ranking_is_a_permutation_and_matches_the_rules(p in policy(), c in candidates()) {
            let r = rank(&p, &c);
            let mut all = r.order().to_vec();
            all.sort_unstable();
            prop_assert_eq!(all, (0..c.len()).collect::<Vec<_>>());
            prop_assert!(r.tiers().all(|t| !t.is_empty()));
            prop_assert_eq!(r.tier_count() == 0, c.is_empty());
            prop_assert_eq!(r.random(), p.random());
            let (want, _) = naive(&p, &c);
            prop_assert_eq!(r.to_vecs(), want);
            // Reusing a buffer gives the same.
            let mut buf = rank(&p, &c[..c.len() / 2]);
            rank_into(&p, &c, &mut buf);
            prop_assert_eq!(&buf, &r);
            // explain agrees.
            let e = explain(&p, &c);
            let got: Vec<Vec<usize>> = e.tiers.iter().map(|t| t.chosen.iter().map(|c| c.index).collect()).collect();
            prop_assert_eq!(got, r.to_vecs());
            // The decision holds the ranking's first 8, tier 0 as primary.
            let d = to_decision(&r, &c, 20);
            let n = c.len().min(MAX_CANDIDATES);
            prop_assert_eq!(d.count as usize, n);
            prop_assert_eq!(d.primary as usize, r.tier(0).len().min(n));
            for (k, &i) in r.order().iter().take(n).enumerate() {
                prop_assert_eq!(d.servers[k], c[i].server);
                prop_assert_eq!(d.weights[k], c[i].portion.max(1));
            }
        }

        #[test]
        fn tier_zero_servers_are_equal_under_the_policy(p in policy(), c in candidates()) {
            let r = rank(&p, &c);
            let t0 = r.tier(0).to_vec();
            let (_, compared) = naive(&p, &c);
            let levels = p.levels();
            // At every level reached, the tier's servers were all kept: all have the data or
            // none of the compared did; equal keys (rtt within tolerance of the compared
            // set's lowest); none beaten on MED.
            for (set, (_, ms)) in compared.iter().zip(&levels) {
                for &i in &t0 {
                    prop_assert!(set.contains(&i));
                }
                if ms[0].0 == Random || ms[0].0 == Med {
                    continue;
                }
                let mut s = Scratch::default();
                s.prepare(&p, &c);
                let l = levels.iter().position(|(_, x)| x == ms).unwrap();
                let n = c.len();
                let base = &s.base[l * n..(l + 1) * n];
                let rtt = match &p.levels[l].kind {
                    Kind::Sum { rtt, .. } => rtt.map(|w| (w, s.rtt_cut(base, &bits_of(n, set.iter().copied()), p.rtt_tolerance_percent()))),
                    _ => None,
                };
                let keys: Vec<u64> = t0.iter().map(|&i| quantize(s.key(base, i, rtt))).collect();
                prop_assert!(keys.windows(2).all(|w| w[0] == w[1]), "{:?}", keys);
            }
            // Without rtt mixed into a composite, tier 0 is a fixed point: ranked alone it
            // stays one tier. (With it, the lowest rtt that set the tolerance may be gone.)
            let rtt_mixed = levels.iter().any(|(_, ms)| ms.len() > 1 && ms.iter().any(|(m, _)| *m == Rtt));
            if !rtt_mixed && !t0.is_empty() {
                let sub: Vec<Candidate> = t0.iter().map(|&i| c[i]).collect();
                prop_assert_eq!(rank(&p, &sub).tier_count(), 1);
            }
        }

        #[test]
        fn ranking_does_not_depend_on_input_order(
            p in policy(),
            (c, perm) in candidates().prop_flat_map(|c| {
                let n = c.len();
                (Just(c), Just((0..n).collect::<Vec<_>>()).prop_shuffle())
            }),
        ) {
            let shuffled: Vec<Candidate> = perm.iter().map(|&i| c[i]).collect();
            let sets = |r: &Ranking, c: &[Candidate]| -> Vec<Vec<u16>> {
                r.tiers().map(|t| {
                    let mut v: Vec<u16> = t.iter().map(|&i| c[i].server).collect();
                    v.sort_unstable();
                    v
                }).collect()
            };
            prop_assert_eq!(sets(&rank(&p, &c), &c), sets(&rank(&p, &shuffled), &shuffled));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Over 64 candidates sets take more than one word.
        #[test]
        fn many_candidates_rank_like_the_rules(p in policy(), c in candidates_in(60..140)) {
            let r = rank(&p, &c);
            prop_assert_eq!(r.to_vecs(), naive(&p, &c).0);
            let mut rev = c.clone();
            rev.reverse();
            let back: Vec<Vec<usize>> = rank(&p, &rev)
                .tiers()
                .map(|t| {
                    let mut v: Vec<usize> = t.iter().map(|&i| c.len() - 1 - i).collect();
                    v.sort_unstable();
                    v
                })
                .collect();
            prop_assert_eq!(back, r.to_vecs());
        }
    }

    /// The controller ranks prefixes on several threads: one shared policy, a ranking each.
    #[test]
    fn policies_are_shared_and_rankings_sent_between_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<Policy>();
        shared::<Ranking>();
        shared::<Explanation>();
    }

    #[test]
    fn quantize_keeps_order_and_ties_rounding_errors() {
        assert_eq!(quantize(0.1 * 3.0), quantize(0.3));
        assert_ne!(0.1 * 3.0, 0.3);
        assert_eq!(quantize(-0.0), quantize(0.0));
        assert!(quantize(4e9) < quantize(4e9 + 1.0));
        assert!(quantize(-2.0) < quantize(-1.0) && quantize(-1.0) < quantize(0.0));
        assert!(quantize(1e-300) > quantize(0.0) && quantize(1e300) < u64::MAX);
        for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, f64::MAX] {
            assert_eq!(quantize(v), u64::MAX, "{v}");
        }
    }

    #[test]
    fn rtt_first_with_extreme_values_ranks_like_the_rules() {
        let p = Policy::new(&[(Rtt, 1), (Admin, 2)], &[(Rtt, 10.0)], 10.0, false).unwrap();
        let values = [
            -f64::MAX,
            -1e300,
            -5.0,
            0.0,
            -0.0,
            1.0,
            1.05,
            1.2,
            1e300,
            f64::MAX,
            f64::NAN,
        ];
        let c: Vec<Candidate> = values
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                cand(
                    i as u16,
                    Metrics {
                        rtt: Some(v),
                        admin: Some((i % 3) as u32),
                        ..m()
                    },
                )
            })
            .collect();
        let r = rank(&p, &c);
        assert_eq!(r.to_vecs(), naive(&p, &c).0);
        // 10 × -1e300 is the lowest; 10 × ±f64::MAX overflows: missing like NaN, last, and
        // then told apart by admin.
        assert_eq!(r.tier(0), [1]);
        assert_eq!(r.to_vecs()[r.tier_count() - 2..], [vec![0, 9], vec![10]]);
        assert!(
            explain(&p, &c).to_string().contains("-1.8e308"),
            "{}",
            explain(&p, &c)
        );
    }

    // ---- timing ------------------------------------------------------------------------

    /// The policies timed: every kind of level, and a short everyday one.
    fn bench_policies() -> [(&'static str, Policy); 2] {
        [
            (
                "ext, med, int, 0.1*geo + rtt (10%), admin, random",
                Policy::new(
                    &[
                        (Ext, 1),
                        (Med, 2),
                        (Int, 3),
                        (Geo, 4),
                        (Rtt, 4),
                        (Admin, 5),
                        (Random, 6),
                    ],
                    &[(Geo, 0.1), (Rtt, 1.0)],
                    10.0,
                    true,
                )
                .unwrap(),
            ),
            (
                "geo, admin",
                Policy::new(&[(Geo, 1), (Admin, 2)], &[], 10.0, false).unwrap(),
            ),
        ]
    }

    fn bench(p: &Policy, n_cands: usize) -> std::time::Duration {
        // 1024 different candidate sets, cycled.
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        let sets: Vec<Vec<Candidate>> = (0..1024)
            .map(|_| {
                (0..n_cands)
                    .map(|s| Candidate {
                        server: s as u16 + 1,
                        portion: 1,
                        metrics: Metrics {
                            ext: Some(1 + next(4) as u32),
                            int: Some(next(50) as u32),
                            ser: None,
                            rtt: if next(10) == 0 {
                                None
                            } else {
                                Some(5.0 + next(200) as f64)
                            },
                            med: Some((64500 + next(3) as u32, next(3) as u32)),
                            geo: Some(next(10000) as f64),
                            admin: Some(next(3) as u32),
                        },
                    })
                    .collect()
            })
            .collect();
        let mut buf = Ranking::new();
        let mut sum = 0u64;
        let t = std::time::Instant::now();
        let iters: usize = std::env::var("ENGINE_BENCH_ITERS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1_000_000);
        for k in 0..iters {
            let c = &sets[k & 1023];
            let d = decide(p, c, 24, &mut buf);
            sum += d.servers[0] as u64 + d.count as u64;
        }
        let el = t.elapsed();
        std::hint::black_box(sum);
        el
    }

    /// `cargo test --release -p director-ctl engine::tests::bench -- --ignored --nocapture`
    /// (`ENGINE_BENCH_N=5,10`, `ENGINE_BENCH_POLICY=0|1`, `ENGINE_BENCH_ITERS` choose what
    /// runs). Each call ranks one of 1024 random candidate sets and builds the decision.
    #[test]
    #[ignore]
    fn bench_one_million_ranks() {
        let ns: Vec<usize> = match std::env::var("ENGINE_BENCH_N") {
            Ok(v) => v.split(',').filter_map(|x| x.parse().ok()).collect(),
            Err(_) => vec![5, 10],
        };
        let only: Option<usize> = std::env::var("ENGINE_BENCH_POLICY")
            .ok()
            .and_then(|v| v.parse().ok());
        for (k, (name, p)) in bench_policies().iter().enumerate() {
            if only.is_some_and(|o| o != k) {
                continue;
            }
            for &n in &ns {
                let el = bench(p, n);
                println!(
                    "1M rank+decision calls, {n} candidates, policy {name}: {el:?} ({:.0} ns/call)",
                    el.as_nanos() as f64 / 1e6
                );
            }
        }
    }
}
