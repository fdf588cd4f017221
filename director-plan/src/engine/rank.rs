//! The sort itself: candidates into tiers of equally good servers, with bit sets of
//! candidates and buffers reused across calls; and a ranking into the kernel's decision.

use std::fmt;

use director_common::maps::{Decision, MAX_CANDIDATES};

use super::metric::{Candidate, MedRoute, Metric, Metrics, Rtt};
use super::policy::{Kind, Policy};

/// Missing (or overflowed) values compare as +inf: after every real value.
pub(super) const MISSING: f64 = f64::INFINITY;

#[inline(always)]
pub(super) fn finite_or_missing(v: f64) -> f64 {
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
pub(super) fn quantize(v: f64) -> u64 {
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

/// An rtt that is missing, in the per-candidate rtt buffer (RTT files cannot hold it).
pub(super) const RTT_MISSING: u64 = u64::MAX;

/// The rtt tie of a set: the lowest rtt among its complete servers and the highest rtt
/// that counts as equal to it (exact: see [`Rtt::limit`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct RttCut {
    pub(super) lowest: Rtt,
    pub(super) limit: Rtt,
}

impl RttCut {
    pub(super) fn new(lowest: u64, tolerance_percent: u32) -> RttCut {
        RttCut {
            lowest: Rtt(lowest),
            limit: Rtt(lowest).limit(tolerance_percent),
        }
    }
}

/// Working memory reused across calls. Sets of candidates are bit sets (bit `i % 64` of
/// word `i / 64` is candidate `i`): narrowing a set and taking a tier out of what is left
/// are a few word operations, and iterating one goes in candidate order.
#[derive(Clone, Debug, Default)]
pub(super) struct SortBuffers {
    /// Per level and candidate (`level * n + i`): the sum of a sum level's non-rtt terms,
    /// `MISSING` when one is missing (rows of other levels: unused).
    pub(super) base: Vec<f64>,
    /// Per candidate: rtt in ns, `RTT_MISSING` when missing (when the policy uses rtt).
    pub(super) rtt: Vec<u64>,
    /// Per candidate: what med compares, valid for the members of `has_med` (med on).
    med: Vec<MedRoute>,
    has_med: Vec<u64>,
    /// The members of `set` with a route, at the med step.
    routed: Vec<u64>,
    /// Candidates not ranked yet.
    left: Vec<u64>,
    /// The set being narrowed down.
    pub(super) set: Vec<u64>,
    /// Candidates ranked so far (when the first level is rtt alone).
    taken: Vec<u64>,
    /// Candidates by the first level's key, when it is fixed per candidate: see `sort_by`.
    sorted: Vec<u128>,
}

/// Calls `f` with each member of `set`, in ascending order.
#[inline(always)]
pub(super) fn each(set: &[u64], mut f: impl FnMut(usize)) {
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
pub(super) fn retain(set: &mut [u64], mut keep: impl FnMut(usize) -> bool) {
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
pub(super) fn at_most_one(set: &[u64]) -> bool {
    match set {
        [w] => w & w.wrapping_sub(1) == 0,
        _ => set.iter().map(|w| w.count_ones()).sum::<u32>() <= 1,
    }
}

/// `dst = src` (a plain store for one word; `copy_from_slice` is a call to memcpy); an
/// empty `src` clears `dst`.
#[inline(always)]
pub(super) fn copy_bits(dst: &mut [u64], src: &[u64]) {
    match (dst, src) {
        ([d], [s]) => *d = *s,
        ([d], []) => *d = 0,
        (d, []) => d.fill(0),
        (d, s) => d.copy_from_slice(s),
    }
}

/// The bit set of `members` among `n` candidates.
pub(super) fn bits_of(n: usize, members: impl IntoIterator<Item = usize>) -> Vec<u64> {
    let mut set = vec![0u64; n.div_ceil(64)];
    for i in members {
        set[i / 64] |= 1 << (i % 64);
    }
    set
}

#[inline(always)]
pub(super) fn contains(set: &[u64], i: usize) -> bool {
    set[i / 64] & (1 << (i % 64)) != 0
}

#[inline(always)]
pub(super) fn insert(set: &mut [u64], i: usize) {
    set[i / 64] |= 1 << (i % 64);
}

#[inline(always)]
pub(super) fn is_empty(set: &[u64]) -> bool {
    set.iter().all(|&w| w == 0)
}

impl SortBuffers {
    pub(super) fn prepare(&mut self, policy: &Policy, cands: &[Candidate]) {
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
                    Metric::Rtt | Metric::Portion | Metric::Random => {
                        unreachable!("rtt and the draws are no sum terms")
                    }
                }
            }
        }
        if policy.uses_rtt {
            self.rtt.clear();
            self.rtt.extend(
                cands
                    .iter()
                    .map(|c| c.metrics.rtt.map_or(RTT_MISSING, |r| r.0)),
            );
        }
        if policy.med {
            self.med.clear();
            let none = MedRoute {
                site_as: 0,
                exit: std::net::Ipv4Addr::UNSPECIFIED.into(),
                med: 0,
            };
            self.med
                .extend(cands.iter().map(|c| c.metrics.med.unwrap_or(none)));
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
    pub(super) fn rtt_cut(&self, base: &[f64], set: &[u64], tolerance: u32) -> Option<RttCut> {
        rtt_cut(&self.rtt, base, set, tolerance)
    }

    /// What candidate `i` is compared by at a sum level (`rtt`: the level's rtt weight and
    /// the set's cut, when rtt is in the level).
    pub(super) fn key(&self, base: &[f64], i: usize, rtt: Option<(f64, Option<RttCut>)>) -> f64 {
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
        if policy.med {
            self.med_step();
        }
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

    /// DistributedDirector's med step, before the sort: among the servers of `self.set`
    /// whose sites are in the same AS and reach the client through different exit points,
    /// those with a MED above the lowest of them are out. Servers without a route, alone in
    /// their AS, or sharing one exit point with the rest of their AS are not touched.
    pub(super) fn med_step(&mut self) {
        let SortBuffers {
            set,
            med,
            has_med,
            routed,
            ..
        } = self;
        routed.resize(set.len(), 0);
        for ((r, s), h) in routed.iter_mut().zip(set.iter()).zip(has_med.iter()) {
            *r = s & h;
        }
        let routed = &*routed;
        retain(set, |i| {
            if !contains(routed, i) {
                return true;
            }
            let me = med[i];
            let (mut lowest, mut other_exit) = (me.med, false);
            each(routed, |j| {
                if med[j].site_as == me.site_as {
                    lowest = lowest.min(med[j].med);
                    other_exit |= med[j].exit != me.exit;
                }
            });
            !(other_exit && me.med > lowest)
        });
    }

    /// Narrows `self.set` to the best at `level` (index `l`). Returns false for a draw
    /// (`portion`, `random`): the sort stops there.
    pub(super) fn apply(&mut self, policy: &Policy, cands: &[Candidate], l: usize) -> bool {
        let n = cands.len();
        let SortBuffers { base, rtt, set, .. } = self;
        match &policy.levels[l].kind {
            Kind::Draw(_) => return false,
            Kind::Sum { rtt: None, .. } => {
                let base = &base[l * n..(l + 1) * n];
                keep_lowest(set, |i| base[i]);
            }
            Kind::Sum { rtt: Some(w), .. } => {
                let base = &base[l * n..(l + 1) * n];
                let cut = rtt_cut(rtt, base, set, policy.rtt_tolerance_percent);
                keep_lowest(set, |i| sum_key(base[i], rtt[i], *w, cut));
            }
        }
        true
    }
}

/// Keeps in `set` the servers whose `key` is lowest (after [`quantize`]), or all when no
/// server has one.
#[inline(always)]
pub(super) fn keep_lowest(set: &mut [u64], key: impl Fn(usize) -> f64) {
    let mut min = u64::MAX;
    each(set, |i| min = min.min(quantize(key(i))));
    if min != u64::MAX {
        retain(set, |i| quantize(key(i)) == min);
    }
}

/// The lowest rtt among the servers of `set` complete at a level (non-rtt sum `base` not
/// missing) and the highest rtt that ties with it; `None` when no server is complete.
#[inline(always)]
pub(super) fn rtt_cut(rtt: &[u64], base: &[f64], set: &[u64], tolerance: u32) -> Option<RttCut> {
    let mut lowest = RTT_MISSING;
    each(set, |i| {
        if base[i] != MISSING && rtt[i] < lowest {
            lowest = rtt[i];
        }
    });
    (lowest != RTT_MISSING).then(|| RttCut::new(lowest, tolerance))
}

/// A sum level's key: the non-rtt sum plus weight × rtt in ms, an rtt within the cut
/// counting as the lowest (the cut is decided in integers, before any rounding).
#[inline(always)]
pub(super) fn sum_key(base: f64, rtt: u64, w: f64, cut: Option<RttCut>) -> f64 {
    match cut {
        Some(cut) if base != MISSING && rtt != RTT_MISSING => {
            let r = if rtt <= cut.limit.0 {
                cut.lowest
            } else {
                Rtt(rtt)
            };
            finite_or_missing(base + w * r.ms())
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
    draw: Option<Metric>,
    scratch: SortBuffers,
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
    /// The draw the kernel makes among the first tier (`portion` or `random`), if any;
    /// without one, the answer is a function of the client.
    pub fn draw(&self) -> Option<Metric> {
        self.draw
    }
    /// The tiers as vectors (for tests and display; allocates).
    pub fn to_vecs(&self) -> Vec<Vec<usize>> {
        self.tiers().map(<[usize]>::to_vec).collect()
    }
}

impl fmt::Debug for Ranking {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ranking")
            .field("tiers", &self.to_vecs())
            .field("draw", &self.draw)
            .finish()
    }
}

impl PartialEq for Ranking {
    fn eq(&self, other: &Ranking) -> bool {
        self.order == other.order && self.ends == other.ends && self.draw == other.draw
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
    out.draw = policy.draw;
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
        // The med step first changes who is compared from tier to tier: the general path.
        _ if policy.med => {
            for i in 0..n {
                insert(&mut s.left, i);
            }
            while !is_empty(&s.left) {
                s.tier(policy, cands, 0, order, ends);
            }
        }
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
            sort_by(&mut s.sorted, &s.rtt, |v| v);
            let mut head = 0;
            while head < n {
                if contains(&s.taken, s.at(head)) {
                    head += 1;
                    continue;
                }
                let lowest = s.rtt[s.at(head)];
                let cut = (lowest != RTT_MISSING)
                    .then(|| RttCut::new(lowest, policy.rtt_tolerance_percent));
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
        // rtt in a sum, or a draw first: every tier compares every server left.
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
pub(super) fn sort_by<K: Copy>(sorted: &mut Vec<u128>, key: &[K], order: impl Fn(K) -> u64) {
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
pub(super) fn total_order(v: f64) -> u64 {
    let b = v.to_bits();
    if b >> 63 == 0 {
        b | 1 << 63
    } else {
        !b
    }
}

/// The kernel's decision for a ranking: tier 0 is the primary set; the following tiers come
/// after it in order; at most [`MAX_CANDIDATES`] in all (a tier 0 larger than that keeps
/// its first ones by candidate order). The weights are the portions when the sort ends in
/// `portion` (a portion of 0 is weight 0: the kernel picks such a server only when no
/// usable one of its set has more), else 1 each (an even share, drawn or hashed).
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
        d.weights[k] = if r.draw == Some(Metric::Portion) {
            cands[i].portion
        } else {
            1
        };
    }
    d
}

/// [`rank_into`] then [`to_decision`]: one call per prefix and service.
pub fn decide(policy: &Policy, cands: &[Candidate], prefix_len: u8, buf: &mut Ranking) -> Decision {
    rank_into(policy, cands, buf);
    to_decision(buf, cands, prefix_len)
}
