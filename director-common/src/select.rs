//! Picking the servers to answer with from a decision, the kernel's half of the metric sort:
//! the controller ranks, the kernel shares answers among the equally good by weight and
//! skips servers that are down or lack the asked address family.

use crate::limits::MAX_CANDIDATES;
use crate::maps::Decision;

/// How a service picks among its equally good servers. Its names (`name`, `FromStr`, serde)
/// are the ones the CLI, the config and `--json` output use.
#[repr(u8)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(
    feature = "host",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "lowercase")
)]
pub enum Mode {
    /// Weighted random (DistributedDirector's "portion").
    #[default]
    Random = 0,
    /// Hash of the client address: a client keeps its server.
    Client = 1,
    /// Hash of the queried name: content affinity.
    Name = 2,
}

impl Mode {
    pub const ALL: [Mode; 3] = [Mode::Random, Mode::Client, Mode::Name];

    pub fn from_u8(v: u8) -> Mode {
        match v {
            1 => Mode::Client,
            2 => Mode::Name,
            _ => Mode::Random,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            Mode::Random => "random",
            Mode::Client => "client",
            Mode::Name => "name",
        }
    }
}

#[cfg(feature = "host")]
impl core::str::FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Mode, String> {
        Mode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Mode::ALL.iter().map(|m| m.name()).collect();
                format!("select {s:?} is not one of {}", names.join(", "))
            })
    }
}

#[cfg(feature = "host")]
impl core::fmt::Display for Mode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// A 32-bit key from a client address (already masked to its prefix).
#[inline(always)]
pub fn client_key(addr: &[u8; 16]) -> u32 {
    let mut h: u32 = 0x9e37_79b9;
    let mut i = 0;
    while i < 16 {
        let w = u32::from_be_bytes([addr[i], addr[i + 1], addr[i + 2], addr[i + 3]]);
        h = (h ^ w).wrapping_mul(0x85eb_ca6b);
        h ^= h >> 13;
        i += 4;
    }
    h
}

/// The next state and a 32-bit random key of a SplitMix64 generator: a handful of
/// multiplies and shifts the kernel inlines, where the prandom helper is a call. Any state
/// works, 0 included; successive keys pass as independent for sharing answers by weight.
#[inline(always)]
pub fn next_random(state: u64) -> (u64, u32) {
    let next = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = next;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (next, ((z ^ (z >> 31)) >> 32) as u32)
}

/// A 32-bit key from a name hash.
#[inline(always)]
pub fn name_key(hash: u64) -> u32 {
    (hash ^ (hash >> 32)) as u32
}

/// Emits up to `answers` server ids: first one of the primary candidates chosen by weight
/// with `key`, then the other usable primaries after it in rotation, then the usable
/// fallbacks in rank order. `usable` says whether a server is up and has an address of the
/// asked family; `take` returns whether it took the server. Returns how many were taken.
///
/// The three phases are public so the kernel can hide each phase's result from the
/// verifier's constant tracking (otherwise it walks every combination of usable servers).
#[inline(always)]
pub fn select(
    d: &Decision,
    key: u32,
    answers: u8,
    usable: impl Fn(u16) -> bool,
    mut take: impl FnMut(u16) -> bool,
) -> usize {
    let (ok, total) = usable_mask(d, usable);
    let start = pick_start(d, ok, total, key);
    let want = (answers as usize).clamp(1, MAX_CANDIDATES);
    let mut n = 0;
    emit_ranked(d, ok, start, |id| {
        if take(id) {
            n += 1;
        }
        n >= want
    });
    n
}

/// Which candidates are usable (bit i for candidate i), and the primaries' total weight.
/// A bit mask, not a `[bool; 8]`: the compiler turns variable indexes into stack arrays
/// into pointer arithmetic the verifier refuses.
#[inline(always)]
pub fn usable_mask(d: &Decision, usable: impl Fn(u16) -> bool) -> (u32, u32) {
    let count = (d.count as usize).min(MAX_CANDIDATES);
    let primary = (d.primary as usize).min(count);
    let mut ok: u32 = 0;
    let mut total: u32 = 0;
    let mut i = 0;
    while i < MAX_CANDIDATES {
        if i < count && usable(d.servers[i]) {
            ok |= 1 << i;
            if i < primary {
                total += d.weights[i] as u32;
            }
        }
        i += 1;
    }
    (ok, total)
}

/// How many of the decision's candidates are primaries (the rest are fallbacks).
#[inline(always)]
pub fn primaries(d: &Decision) -> usize {
    (d.primary.min(d.count) as usize).min(MAX_CANDIDATES)
}

/// The usable primary that `key` lands on when usable primaries share by weight. A weight
/// of 0 (DistributedDirector's default portion) gets no share while a usable primary has
/// more; when none has, the usable primaries share evenly.
/// The server a query for at most one answer gets from `d` whatever its key, when `d` has
/// a single primary: `select` takes it first whenever it is usable. The kernel answers it
/// without the key, the mask and the weighted pick; when it is not usable, `select` decides.
#[inline(always)]
pub fn sole_primary(d: &Decision, answers: u8) -> Option<u16> {
    if answers <= 1 && primaries(d) == 1 {
        Some(d.servers[0])
    } else {
        None
    }
}

#[inline(always)]
pub fn pick_start(d: &Decision, ok: u32, total: u32, key: u32) -> usize {
    let primary = primaries(d);
    let even = total == 0;
    let total = if even {
        (ok & ((1u32 << primary) - 1)).count_ones()
    } else {
        total
    };
    if total == 0 {
        return 0;
    }
    // Multiply-shift (Lemire) rather than a remainder: every key is a hash or random, so
    // its high bits spread as evenly as its low ones, and a 64-bit divide costs every
    // answer tens of cycles. (total < 2^20: the product fits.)
    let mut r = ((key as u64 * total as u64) >> 32) as u32;
    let mut j = 0;
    while j < MAX_CANDIDATES {
        if j < primary && ok & (1 << j) != 0 {
            // Sharing evenly, every usable primary's weight is 0: adding 1 gives each an
            // equal share without a second path through the loop for the verifier.
            let w = d.weights[j] as u32 + even as u32;
            if r < w {
                return j;
            }
            r -= w;
        }
        j += 1;
    }
    0
}

/// Offers the usable primaries in rotation from `start`, then the usable fallbacks, to
/// `offer`, which returns true once it has enough. The count lives with the caller: kept
/// here it would be a constant the verifier tracks down every path.
#[inline(always)]
pub fn emit_ranked(d: &Decision, ok: u32, start: usize, mut offer: impl FnMut(u16) -> bool) {
    let count = (d.count as usize).min(MAX_CANDIDATES);
    let primary = (d.primary as usize).min(count);
    let start = start & (MAX_CANDIDATES - 1);
    let mut k = 0;
    while k < MAX_CANDIDATES {
        if k < primary {
            // A remainder rather than a compare-and-subtract: one path for the verifier,
            // which knows nothing of a remainder's range; the mask it needs must survive
            // the compiler, which knows the remainder is already below 8. (A subtract
            // under an arithmetic-shift mask is as exact, but the verifier tracks its
            // ranges and walked 40 % more instructions.)
            let idx = core::hint::black_box((start + k) % primary) & (MAX_CANDIDATES - 1);
            if ok & (1 << idx) != 0 && offer(d.servers[idx]) {
                return;
            }
        }
        k += 1;
    }
    let mut f = 0;
    while f < MAX_CANDIDATES {
        if f >= primary && ok & (1 << f) != 0 && offer(d.servers[f]) {
            return;
        }
        f += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn decision(servers: &[(u16, u16)], primary: u8) -> Decision {
        let mut d = Decision {
            prefix_len: 24,
            count: servers.len() as u8,
            primary,
            ..Default::default()
        };
        for (i, (s, w)) in servers.iter().enumerate() {
            d.servers[i] = *s;
            d.weights[i] = *w;
        }
        d
    }

    fn run(d: &Decision, key: u32, answers: u8, down: &[u16]) -> Vec<u16> {
        let mut out = Vec::new();
        let n = select(
            d,
            key,
            answers,
            |s| !down.contains(&s),
            |s| {
                out.push(s);
                true
            },
        );
        assert_eq!(n, out.len());
        out
    }

    /// Each server once, at its first place: a route lists a server at most once.
    fn distinct(servers: Vec<(u16, u16)>) -> Vec<(u16, u16)> {
        let mut seen = std::collections::HashSet::new();
        servers
            .into_iter()
            .filter(|(s, _)| seen.insert(*s))
            .collect()
    }

    /// The `i`th of `n` keys spread evenly over the key space, as hashes spread.
    fn spread(i: u32, n: u32) -> u32 {
        ((u64::from(i) << 32).div_ceil(u64::from(n))) as u32
    }

    #[test]
    fn weights_share_answers() {
        let d = decision(&[(1, 1), (2, 3)], 2);
        let mut hits = [0; 3];
        for i in 0..4000 {
            hits[run(&d, spread(i, 4000), 1, &[])[0] as usize] += 1;
        }
        assert_eq!(hits[1], 1000);
        assert_eq!(hits[2], 3000);
    }

    #[test]
    fn down_servers_are_skipped_and_fallbacks_follow() {
        let d = decision(&[(1, 1), (2, 1), (3, 1)], 2);
        assert_eq!(run(&d, 0, 1, &[1]), vec![2]);
        assert_eq!(run(&d, 0, 1, &[1, 2]), vec![3]);
        assert!(run(&d, 0, 1, &[1, 2, 3]).is_empty());
        assert_eq!(run(&d, 1 << 31, 3, &[]), vec![2, 1, 3]);
        assert_eq!(run(&d, 0, 8, &[]), vec![1, 2, 3]);
    }

    #[test]
    fn portion_zero_is_picked_only_when_no_usable_equal_has_more() {
        let d = decision(&[(1, 0), (2, 2), (3, 0)], 3);
        for i in 0..1000 {
            assert_eq!(run(&d, spread(i, 1000), 1, &[])[0], 2);
            let got = run(&d, spread(i, 1000), 1, &[2])[0];
            assert!(got == 1 || got == 3);
        }
        // Only zeros usable: an even share between them.
        let mut hits = [0; 4];
        for i in 0..1000 {
            hits[run(&d, spread(i, 1000), 1, &[2])[0] as usize] += 1;
        }
        assert_eq!((hits[1], hits[3]), (500, 500));
        // All weights 0: even among all.
        let d = decision(&[(1, 0), (2, 0), (3, 0)], 3);
        let mut hits = [0; 4];
        for i in 0..3000 {
            hits[run(&d, spread(i, 3000), 1, &[])[0] as usize] += 1;
        }
        assert_eq!(hits[1..], [1000, 1000, 1000]);
    }

    #[test]
    fn the_generator_shares_by_weight() {
        let d = decision(&[(1, 1), (2, 3)], 2);
        let mut hits = [0u32; 3];
        let mut state = 12345;
        for _ in 0..40_000 {
            let (next, key) = next_random(state);
            state = next;
            hits[run(&d, key, 1, &[])[0] as usize] += 1;
        }
        // 10,000 and 30,000 expected; a binomial's deviation here is about 87.
        assert!((9_600..=10_400).contains(&hits[1]), "{hits:?}");
        assert!((29_600..=30_400).contains(&hits[2]), "{hits:?}");
    }

    proptest! {
        #[test]
        fn only_usable_listed_servers_and_no_repeats(
            servers in proptest::collection::vec((1u16..20, 0u16..5), 0..=8),
            primary in 0u8..=9, key: u32, answers in 0u8..=9,
            down in proptest::collection::vec(1u16..20, 0..5),
        ) {
            let servers = distinct(servers);
            let d = decision(&servers, primary);
            let got = run(&d, key, answers, &down);
            prop_assert!(got.len() <= (answers as usize).clamp(1, 8));
            let mut uniq = std::collections::HashSet::new();
            for s in &got {
                prop_assert!(servers.iter().any(|(x, _)| x == s));
                prop_assert!(!down.contains(s));
                prop_assert!(uniq.insert(*s));
            }
            let usable = servers.iter().filter(|(s, _)| !down.contains(s)).count();
            prop_assert_eq!(got.len(), usable.min((answers as usize).clamp(1, 8)));
        }

        #[test]
        fn a_usable_sole_primary_is_what_select_takes(
            servers in proptest::collection::vec((1u16..20, 0u16..5), 0..=8),
            primary in 0u8..=9, key: u32, answers in 0u8..=9,
            down in proptest::collection::vec(1u16..20, 0..5),
        ) {
            let servers = distinct(servers);
            let d = decision(&servers, primary);
            let got = run(&d, key, answers, &down);
            match sole_primary(&d, answers) {
                Some(id) if !down.contains(&id) => prop_assert_eq!(got, vec![id]),
                Some(_) => {}
                // More than one answer wanted, or several primaries (or none): the key or
                // the count can change what is taken, so there is no shortcut.
                None => prop_assert!(answers > 1 || primaries(&d) != 1),
            }
        }
    }
}
