//! Response rate limiting (as Knot and BIND do it): answers per second per client prefix
//! and service, a token bucket, and a `slip` ratio of truncated answers for what is over.
//!
//! The bucket is GCRA (the "virtual scheduling" form of a token bucket): one word, the
//! theoretical arrival time (TAT) of the next conforming answer. A bucket with `burst`
//! tokens refilled at `rate` per second is exactly "the next answer may not be scheduled
//! more than `burst` intervals ahead of now". One word and no division on the packet path
//! (the interval is computed once, by whoever writes the limit), so the kernel and a
//! userspace server run the same few instructions, each with its own map.
//!
//! Whatever the sequence of times, a bucket grants at most `burst + rate * t` answers over
//! any window of `t` seconds (the property tests check it): the interval is rounded up.
//!
//! The source address is the packet's, masked to the limit's prefix length: never the ECS
//! address, which the sender chooses freely.

/// Nanoseconds per second.
pub const NS_PER_S: u64 = 1_000_000_000;

/// Default prefix lengths a bucket covers (Knot's and BIND's defaults).
pub const DEFAULT_V4_PREFIX: u8 = 24;
pub const DEFAULT_V6_PREFIX: u8 = 56;

/// A service's limit (`DIR_RRL`, indexed by service id). `rate` 0: unlimited, the kernel
/// looks no further. Build it with [`Limit::new`], which computes the derived fields.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limit {
    /// Nanoseconds between two answers at `rate`, rounded up.
    pub interval_ns: u64,
    /// How far ahead of now the bucket may be scheduled: `burst` intervals.
    pub window_ns: u64,
    /// Answers per second; 0 is unlimited.
    pub rate: u32,
    /// Answers that may go at once after a quiet spell (at least 1 when limited).
    pub burst: u32,
    /// Of the responses over the limit, every `slip`-th is sent truncated (TC=1, no
    /// records) so a real resolver retries over TCP; the rest are dropped. 0 drops all, 1
    /// truncates all.
    pub slip: u32,
    /// Prefix lengths a bucket covers, per family of the packet's source.
    pub v4_prefix: u8,
    pub v6_prefix: u8,
    /// Set (1) by whoever writes the map while any source prefix is exempt: the kernel then
    /// asks the exemption trie before the bucket, and not at all while none is.
    pub exemptions: u8,
    pub _pad: u8,
}

impl Limit {
    /// No limit.
    pub const fn unlimited() -> Limit {
        Limit {
            interval_ns: 0,
            window_ns: 0,
            rate: 0,
            burst: 0,
            slip: 0,
            v4_prefix: DEFAULT_V4_PREFIX,
            v6_prefix: DEFAULT_V6_PREFIX,
            exemptions: 0,
            _pad: 0,
        }
    }

    /// `rate` answers per second (0: unlimited), `burst` at once (0: one second's worth),
    /// `slip` as on the field; prefix lengths are clamped to their family's width.
    pub const fn new(rate: u32, burst: u32, slip: u32, v4_prefix: u8, v6_prefix: u8) -> Limit {
        let v4_prefix = if v4_prefix > 32 { 32 } else { v4_prefix };
        let v6_prefix = if v6_prefix > 128 { 128 } else { v6_prefix };
        if rate == 0 {
            let mut l = Limit::unlimited();
            l.v4_prefix = v4_prefix;
            l.v6_prefix = v6_prefix;
            return l;
        }
        let burst = if burst == 0 { rate } else { burst };
        // Rounded up: a shorter interval would grant more than `rate` per second.
        let interval_ns = NS_PER_S.div_ceil(rate as u64);
        Limit {
            interval_ns,
            window_ns: interval_ns.saturating_mul(burst as u64),
            rate,
            burst,
            slip,
            v4_prefix,
            v6_prefix,
            exemptions: 0,
            _pad: 0,
        }
    }

    #[inline(always)]
    pub const fn is_limited(&self) -> bool {
        self.rate != 0
    }
}

/// What to do with one response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Within the limit: answer.
    Answer,
    /// Over the limit, and this one slips through truncated (TC=1).
    Slip,
    /// Over the limit: send nothing.
    Drop,
}

/// One client prefix's state for one service (in a `DIR_RRL_SLOTS` slot).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bucket {
    /// Theoretical arrival time of the next conforming answer (ns on the caller's clock;
    /// the kernel's is the tick count times the tick, see [`RRL_TICK_NS`]). 0: a fresh
    /// bucket, full.
    pub tat_ns: u64,
    /// Responses over the limit so far (wrapping): which of them slip.
    pub limited: u32,
    pub _pad: u32,
}

impl Bucket {
    pub const fn new() -> Bucket {
        Bucket {
            tat_ns: 0,
            limited: 0,
            _pad: 0,
        }
    }

    /// Takes a token at `now_ns` under `limit`: `Answer` (the token is spent), or for a
    /// response over the limit `Slip` or `Drop` by the slip ratio (no token is spent, so a
    /// flood does not push the bucket further into the future). An unlimited `limit`
    /// always answers and leaves the bucket alone. Times may go backwards (another CPU's
    /// earlier reading): the bucket then simply stays ahead.
    #[inline(always)]
    pub fn take(&mut self, now_ns: u64, limit: &Limit) -> Verdict {
        if !limit.is_limited() {
            return Verdict::Answer;
        }
        let start = if self.tat_ns > now_ns {
            self.tat_ns
        } else {
            now_ns
        };
        let next = start.saturating_add(limit.interval_ns);
        if next <= now_ns.saturating_add(limit.window_ns) {
            self.tat_ns = next;
            return Verdict::Answer;
        }
        self.limited = self.limited.wrapping_add(1);
        slip(self.limited, limit.slip)
    }
}

/// The slip decision for the `n`-th (from 1) limited response: every `slip`-th slips.
#[inline(always)]
pub const fn slip(n: u32, slip: u32) -> Verdict {
    if slip != 0 && n.is_multiple_of(slip) {
        Verdict::Slip
    } else {
        Verdict::Drop
    }
}

/// Buckets in the kernel: `DIR_RRL_SLOTS`, an array of slots in sets of `WAYS`, each
/// source prefix's bucket in the set its tag picks. An array and not a hash map: finding a
/// bucket is then a few loads (a hash map's lookup was most of the limit's cost per
/// answer). A prefix that finds no slot of its own takes the set's slot scheduled
/// earliest, which when that is no later than now is a bucket as good as new (nothing
/// answered changes); only when all `WAYS` prefixes of a set are over their rate at once
/// does one of them start afresh.
pub const WAYS: u32 = 4;

/// The object's global the loader sets to the tags' seed (`Key::tag`).
pub const RRL_SEED: &str = "DIR_RRL_SEED";

/// The object's global the loader sets to the kernel's tick in ns (10^9 / CONFIG_HZ): the
/// buckets' clock is then the tick count (`bpf_jiffies64`, which the verifier turns into
/// one load) times it. 0 (a kernel whose HZ the loader could not read) keeps the coarse
/// clock helper, a call per limited answer.
pub const RRL_TICK_NS: &str = "DIR_RRL_TICK_NS";

/// A `DIR_RRL_SLOTS` value: a source prefix's bucket and whose it is.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Slot {
    /// [`Key::tag`] of the prefix; 0: never used.
    pub tag: u64,
    pub bucket: Bucket,
}

/// The first slot of the set of `tag` in a table of `slots` slots (a power of two).
#[inline(always)]
pub const fn set_start(tag: u64, slots: u32) -> u32 {
    ((tag >> 32) as u32 & (slots / WAYS - 1)) * WAYS
}

/// Family tags of [`Key::family`].
pub const FAMILY_V4: u32 = 4;
pub const FAMILY_V6: u32 = 6;

/// A bucket's key (hashed to its `Slot::tag`): the service and the source's prefix (address bits past the
/// limit's prefix length zero). Per service, as each service has its own limit.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Key {
    pub service: u32,
    /// `FAMILY_V4` (address in the first 4 bytes) or `FAMILY_V6`.
    pub family: u32,
    pub addr: [u8; 16],
}

impl Key {
    /// The bucket for `service` and a source address given as two words loaded natively
    /// from its network-order bytes (an IPv4 address in the low four bytes of `lo`, the
    /// rest zero), masked to the limit's prefix length for its family.
    #[inline(always)]
    pub fn new(service: u32, v6: bool, lo: u64, hi: u64, limit: &Limit) -> Key {
        let bits = if v6 {
            limit.v6_prefix as u32
        } else {
            limit.v4_prefix as u32
        };
        let (lo, hi) = mask_words(lo, hi, bits);
        Key {
            service,
            family: if v6 { FAMILY_V6 } else { FAMILY_V4 },
            addr: bytes(lo, hi),
        }
    }

    /// The key's tag: a 64-bit hash of it under `seed` (so that no one who does not know
    /// the seed can pick addresses that share a set), never 0.
    #[inline(always)]
    pub fn tag(&self, seed: u64) -> u64 {
        // SAFETY: 16 plain bytes read as two words.
        let [lo, hi] = unsafe { core::mem::transmute::<[u8; 16], [u64; 2]>(self.addr) };
        let mut h = crate::hash::mix(seed ^ (self.service as u64) << 8 ^ self.family as u64);
        h = crate::hash::mix(h ^ lo);
        h = crate::hash::mix(h ^ hi);
        h | 1
    }

    /// The bucket of an address as userspace has it.
    pub fn for_addr(service: u32, a: core::net::IpAddr, limit: &Limit) -> Key {
        let (v6, lo, hi) = source_words(a);
        Key::new(service, v6, lo, hi, limit)
    }
}

/// An address as the kernel loads it: two native words of its network-order bytes (an
/// IPv4 address in the first four bytes).
pub fn source_words(a: core::net::IpAddr) -> (bool, u64, u64) {
    let mut b = [0u8; 16];
    let v6 = match a {
        core::net::IpAddr::V4(v4) => {
            b[..4].copy_from_slice(&v4.octets());
            false
        }
        core::net::IpAddr::V6(v6) => {
            b = v6.octets();
            true
        }
    };
    let (lo, hi) = b.split_at(8);
    let word = |s: &[u8]| {
        let mut w = [0u8; 8];
        w.copy_from_slice(s);
        u64::from_ne_bytes(w)
    };
    (v6, word(lo), word(hi))
}

/// The first `bits` bits (network order) of a 16-byte address held as two native words.
#[inline(always)]
pub fn mask_words(lo: u64, hi: u64, bits: u32) -> (u64, u64) {
    let bits = if bits > 128 { 128 } else { bits };
    let lo_bits = if bits > 64 { 64 } else { bits };
    let hi_bits = bits - lo_bits;
    (lo & word_mask(lo_bits), hi & word_mask(hi_bits))
}

/// A mask of the first `bits` (0..=64) network-order bits of a natively loaded word.
#[inline(always)]
fn word_mask(bits: u32) -> u64 {
    let be = if bits == 0 {
        0
    } else {
        u64::MAX << (64 - bits)
    };
    u64::from_ne_bytes(be.to_be_bytes())
}

/// Exemption trie (`DIR_RRL_EXEMPT`) key data: one trie for both families, IPv4 as
/// IPv4-mapped IPv6 (`::ffff:a.b.c.d`, prefix length + 96).
pub const EXEMPT_V4_MAPPED_BITS: u32 = 96;

/// The exemption key of a source given as native words (as [`Key::new`] takes it).
#[inline(always)]
pub fn exempt_key(v6: bool, lo: u64, hi: u64) -> [u8; 16] {
    if v6 {
        return bytes(lo, hi);
    }
    // Bytes 8..16 of ::ffff:a.b.c.d are 0, 0, ff, ff, a, b, c, d; a.b.c.d are the first
    // four bytes of `lo`.
    let mapped = u64::from_ne_bytes([0, 0, 0xff, 0xff, 0, 0, 0, 0]);
    let v4 = lo & u64::from_ne_bytes([0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
    #[cfg(target_endian = "little")]
    let moved = v4 << 32;
    #[cfg(target_endian = "big")]
    let moved = v4 >> 32;
    bytes(0, mapped | moved)
}

/// Two native words as the 16 bytes they were loaded from: two stores, where a byte copy
/// would become a call to a looping memcpy in the kernel.
#[inline(always)]
fn bytes(lo: u64, hi: u64) -> [u8; 16] {
    // SAFETY: both are 16 plain bytes with no invalid values.
    unsafe { core::mem::transmute::<[u64; 2], [u8; 16]>([lo, hi]) }
}

/// The same rule for a userspace server (UDP answers given outside the kernel): its own
/// buckets, its own clock, the limits and exemptions read from the kernel's maps (or the
/// config). TCP answers need no limit: a TCP client has shown it owns its address.
#[cfg(feature = "host")]
pub mod user {
    use super::{Bucket, Key, Limit, Verdict};
    use std::collections::HashMap;
    use std::net::IpAddr;

    /// Buckets per (service, source prefix), at most `capacity` of them.
    pub struct Limiter {
        buckets: HashMap<Key, Bucket>,
        capacity: usize,
        /// Source prefixes never limited: (network, prefix length).
        exempt: Vec<(IpAddr, u8)>,
    }

    impl Limiter {
        pub fn new(capacity: usize) -> Limiter {
            Limiter {
                buckets: HashMap::new(),
                capacity: capacity.max(1),
                exempt: Vec::new(),
            }
        }

        /// Replaces the exemptions (e.g. with `Maps::rrl_exempt`'s list).
        pub fn set_exempt(&mut self, nets: impl IntoIterator<Item = (IpAddr, u8)>) {
            self.exempt = nets.into_iter().collect();
        }

        pub fn is_exempt(&self, source: IpAddr) -> bool {
            let (v6, lo, hi) = super::source_words(source);
            self.exempt.iter().any(|&(net, bits)| {
                let (nv6, nlo, nhi) = super::source_words(net);
                nv6 == v6 && super::mask_words(lo, hi, bits as u32) == (nlo, nhi)
            })
        }

        /// The verdict for one UDP response of `service` to `source` at `now_ns` (any
        /// monotonic clock in ns, e.g. from an `Instant` taken at start).
        pub fn check(
            &mut self,
            service: u32,
            source: IpAddr,
            limit: &Limit,
            now_ns: u64,
        ) -> Verdict {
            if !limit.is_limited() || self.is_exempt(source) {
                return Verdict::Answer;
            }
            let key = Key::for_addr(service, source, limit);
            if !self.buckets.contains_key(&key) && self.buckets.len() >= self.capacity {
                // A bucket scheduled no later than now is as good as a new one: forgetting
                // it changes which responses are answered in no way. (Its count of limited
                // responses goes, so where the slip pattern next starts may move.)
                self.buckets.retain(|_, b| b.tat_ns > now_ns);
                if self.buckets.len() >= self.capacity {
                    // Every bucket is busy: this prefix is answered uncounted rather than
                    // another's state forgotten. Size the table for the answer rate times
                    // the longest burst window.
                    return Verdict::Answer;
                }
            }
            self.buckets.entry(key).or_default().take(now_ns, limit)
        }

        /// Whether a bucket is kept for `source`'s prefix: false right after `check`
        /// answered it uncounted (every bucket busy).
        pub fn tracks(&self, service: u32, source: IpAddr, limit: &Limit) -> bool {
            self.buckets
                .contains_key(&Key::for_addr(service, source, limit))
        }

        pub fn len(&self) -> usize {
            self.buckets.len()
        }

        pub fn is_empty(&self) -> bool {
            self.buckets.is_empty()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::size_of;
    use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    use proptest::prelude::*;

    #[test]
    fn layouts_have_no_hidden_padding() {
        assert_eq!(size_of::<Limit>(), 8 + 8 + 4 * 3 + 4);
        assert_eq!(size_of::<Bucket>(), 16);
        assert_eq!(size_of::<Key>(), 24);
        assert_eq!(size_of::<Slot>(), 24);
    }

    #[test]
    fn tags_tell_prefixes_and_seeds_apart() {
        let l = Limit::new(10, 10, 2, 24, 56);
        let a = |s: &str| s.parse::<IpAddr>().unwrap();
        let k = |s| Key::for_addr(3, a(s), &l);
        assert_eq!(k("192.0.2.1").tag(7), k("192.0.2.200").tag(7));
        assert_ne!(k("192.0.2.1").tag(7), k("192.0.3.1").tag(7));
        assert_ne!(k("192.0.2.1").tag(7), k("192.0.2.1").tag(8));
        assert_ne!(
            k("192.0.2.1").tag(7),
            Key::for_addr(4, a("192.0.2.1"), &l).tag(7)
        );
        assert_eq!(k("192.0.2.1").tag(7) & 1, 1);
        let slots = 1 << 18;
        let start = set_start(k("192.0.2.1").tag(7), slots);
        assert_eq!(start % WAYS, 0);
        assert!(start + WAYS <= slots);
    }

    #[test]
    fn burst_then_the_slip_pattern() {
        let l = Limit::new(1, 3, 2, 24, 56);
        let mut b = Bucket::new();
        let t = 5 * NS_PER_S;
        let got: Vec<Verdict> = (0..8).map(|i| b.take(t + i, &l)).collect();
        use Verdict::*;
        assert_eq!(got, [Answer, Answer, Answer, Drop, Slip, Drop, Slip, Drop]);
        // One interval later one more token.
        assert_eq!(b.take(t + NS_PER_S + 10, &l), Answer);
        assert_eq!(b.take(t + NS_PER_S + 11, &l), Slip);
    }

    #[test]
    fn slip_ratios() {
        for (ratio, want) in [
            (0, [Verdict::Drop; 4]),
            (1, [Verdict::Slip; 4]),
            (
                3,
                [Verdict::Drop, Verdict::Drop, Verdict::Slip, Verdict::Drop],
            ),
        ] {
            let got: Vec<Verdict> = (1..=4).map(|n| slip(n, ratio)).collect();
            assert_eq!(got, want, "slip {ratio}");
        }
    }

    #[test]
    fn unlimited_always_answers_and_keeps_no_state() {
        let l = Limit::new(0, 5, 2, 24, 56);
        let mut b = Bucket::new();
        for i in 0..1000 {
            assert_eq!(b.take(i, &l), Verdict::Answer);
        }
        assert_eq!(b, Bucket::new());
    }

    #[test]
    fn burst_defaults_to_the_rate() {
        let l = Limit::new(100, 0, 2, 24, 56);
        assert_eq!((l.burst, l.interval_ns), (100, 10_000_000));
        assert_eq!(l.window_ns, NS_PER_S);
    }

    #[test]
    fn keys_cover_the_prefix() {
        let l = Limit::new(10, 10, 2, 24, 56);
        let a = |s: &str| s.parse::<IpAddr>().unwrap();
        let k = |s| Key::for_addr(7, a(s), &l);
        assert_eq!(k("192.0.2.1"), k("192.0.2.254"));
        assert_ne!(k("192.0.2.1"), k("198.51.100.1"));
        assert_eq!(&k("192.0.2.99").addr[..4], &[192, 0, 2, 0]);
        assert_eq!(k("2001:db8:0:1200::1"), k("2001:db8:0:12ff::2"));
        assert_ne!(k("2001:db8:0:1200::1"), k("2001:db8:0:1300::1"));
        assert_ne!(
            Key::for_addr(7, a("192.0.2.1"), &l),
            Key::for_addr(8, a("192.0.2.1"), &l)
        );
    }

    #[test]
    fn exempt_keys_map_ipv4() {
        let (v6, lo, hi) = source_words(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7)));
        let k = exempt_key(v6, lo, hi);
        assert_eq!(
            Ipv6Addr::from(k),
            Ipv4Addr::new(192, 0, 2, 7).to_ipv6_mapped()
        );
        let six: Ipv6Addr = "2001:db8::5".parse().unwrap();
        let (v6, lo, hi) = source_words(IpAddr::V6(six));
        assert_eq!(Ipv6Addr::from(exempt_key(v6, lo, hi)), six);
    }

    proptest! {
        /// Masking the native words is masking the address.
        #[test]
        fn mask_is_the_prefix(addr: u128, bits in 0u32..=128) {
            let (_, lo, hi) = source_words(IpAddr::V6(Ipv6Addr::from(addr)));
            let (lo, hi) = mask_words(lo, hi, bits);
            let mut b = [0u8; 16];
            b[..8].copy_from_slice(&lo.to_ne_bytes());
            b[8..].copy_from_slice(&hi.to_ne_bytes());
            let want = if bits == 0 { 0 } else { addr & (u128::MAX << (128 - bits)) };
            prop_assert_eq!(u128::from_be_bytes(b), want);
        }

        /// Over any window of any sequence of times, at most burst + rate × t answers.
        #[test]
        fn never_more_than_rate_times_t_plus_burst(
            rate in 1u32..5000,
            burst in 1u32..50,
            start in 0u64..(1 << 40),
            gaps in proptest::collection::vec(0u64..5_000_000, 1..400),
        ) {
            let l = Limit::new(rate, burst, 2, 24, 56);
            let mut b = Bucket::new();
            let mut now = start;
            let mut granted = Vec::new();
            for g in gaps {
                now += g;
                if b.take(now, &l) == Verdict::Answer {
                    granted.push(now);
                }
            }
            for i in 0..granted.len() {
                for j in i..granted.len() {
                    let n = (j - i + 1) as u128;
                    let span = (granted[j] - granted[i]) as u128;
                    prop_assert!(
                        n * NS_PER_S as u128 <= burst as u128 * NS_PER_S as u128 + rate as u128 * span,
                        "{} answers in {} ns at rate {} burst {}", n, span, rate, burst
                    );
                }
            }
        }

        /// A steady load above the rate gets the rate (less the rounding of the interval),
        /// not much less: the limit holds clients to it, it does not starve them. (With a
        /// burst of 1 arrivals that miss the schedule by a little lose a whole slot: two
        /// tokens absorb that jitter.)
        #[test]
        fn a_flood_gets_the_rate(rate in 1u32..20_000, over in 2u64..10, secs in 1u64..5) {
            let l = Limit::new(rate, 2, 0, 24, 56);
            let mut b = Bucket::new();
            let step = (NS_PER_S / (rate as u64 * over)).max(1);
            let end = secs * NS_PER_S;
            let (mut now, mut granted) = (NS_PER_S, 0u64);
            while now < NS_PER_S + end {
                granted += (b.take(now, &l) == Verdict::Answer) as u64;
                now += step;
            }
            let want = end / l.interval_ns;
            prop_assert!(granted + 1 >= want && granted <= want + 2, "{} of {}", granted, want);
        }
    }
}

#[cfg(all(test, feature = "host"))]
mod user_tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::{IpAddr, Ipv4Addr};

    #[test]
    fn userspace_exemptions() {
        let mut lim = user::Limiter::new(16);
        let a = |s: &str| s.parse::<IpAddr>().unwrap();
        lim.set_exempt([(a("192.0.2.0"), 24), (a("2001:db8::"), 32)]);
        assert!(lim.is_exempt(a("192.0.2.77")) && lim.is_exempt(a("2001:db8:1::1")));
        assert!(!lim.is_exempt(a("198.51.100.1")) && !lim.is_exempt(a("2001:db9::1")));
        let l = Limit::new(1, 1, 0, 24, 56);
        assert_eq!(lim.check(1, a("192.0.2.1"), &l, NS_PER_S), Verdict::Answer);
        assert_eq!(lim.check(1, a("192.0.2.1"), &l, NS_PER_S), Verdict::Answer);
        assert_eq!(
            lim.check(1, a("198.51.100.1"), &l, NS_PER_S),
            Verdict::Answer
        );
        assert_eq!(lim.check(1, a("198.51.100.2"), &l, NS_PER_S), Verdict::Drop);
    }

    /// The case that broke the old form of the property below: prefix 3 answered uncounted
    /// while both buckets were busy, then tracked again from a fresh bucket.
    #[test]
    fn an_uncounted_answer_starts_the_prefix_afresh() {
        let l = Limit::new(700, 3, 2, 24, 56);
        let mut lim = user::Limiter::new(2);
        let mut now = NS_PER_S;
        let src = |who: u8| IpAddr::V4(Ipv4Addr::new(198, 51, who, 9));
        for who in [1, 0] {
            assert_eq!(lim.check(1, src(who), &l, now), Verdict::Answer);
        }
        assert_eq!(lim.check(1, src(3), &l, now), Verdict::Answer);
        assert!(!lim.tracks(1, src(3), &l), "all buckets busy: uncounted");
        assert_eq!(lim.check(1, src(3), &l, now), Verdict::Answer);
        assert!(!lim.tracks(1, src(3), &l));
        // Once the others are idle, prefix 3 gets a fresh bucket: its whole burst again.
        now += 1_964_697;
        let mut fresh = Bucket::new();
        for _ in 0..5 {
            assert_eq!(lim.check(1, src(3), &l, now), fresh.take(now, &l));
            assert!(lim.tracks(1, src(3), &l));
        }
    }

    proptest! {
        /// The userspace limiter answers exactly what the kernel's bucket answers for every
        /// request it counts, and forgetting idle buckets when full changes none of those
        /// answers (only the phase of the slip pattern among the limited ones, whose count a
        /// forgotten bucket loses). A request answered uncounted (every bucket busy) leaves
        /// the limiter with no bucket for its prefix, so the reference forgets it too.
        #[test]
        fn the_userspace_limiter_agrees(
            times in proptest::collection::vec((0u64..3_000_000, 0u8..4), 1..300),
        ) {
            let l = Limit::new(700, 3, 2, 24, 56);
            let mut lim = user::Limiter::new(2);
            let mut own = std::collections::HashMap::<u8, Bucket>::new();
            let mut now = NS_PER_S;
            for (gap, who) in times {
                now += gap;
                let src = IpAddr::V4(Ipv4Addr::new(198, 51, who, 9));
                let want = own.entry(who).or_default().take(now, &l);
                let got = lim.check(1, src, &l, now);
                let answered = |v: Verdict| v == Verdict::Answer;
                if lim.tracks(1, src, &l) {
                    prop_assert_eq!(answered(got), answered(want), "{:?} vs {:?}", got, want);
                } else {
                    prop_assert_eq!(got, Verdict::Answer);
                    own.remove(&who);
                }
            }
        }

    }
}
