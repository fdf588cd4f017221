//! Passive RTT at the sites (`director-ctl agent`): the sock_ops program's map layouts and
//! the histogram both it and the agent use.
//!
//! The program takes each accepted connection's handshake RTT (SYN-ACK sent to ACK
//! received, what the kernel stores as the first `srtt_us` sample) and adds it to the
//! entry of the client's prefix (/24, /48) in `DIR_RTT`: a count, minimum, maximum, sum and
//! a log histogram of 8 sub-buckets per power of two from 64 µs to 4 s. The median read
//! from it is within 4.5 % of the true one (see [`Hist::median_us`]).
//!
//! Draining: every key carries a generation; the program writes under the one in
//! `DIR_RTT_GEN[0]`, and the agent flips it before it reads and deletes the other's
//! entries, so no sample lands in an entry being deleted.

/// The sock_ops program in director's object.
pub const PROGRAM_RTT: &str = "director_rtt";
/// Client prefix → this CPU's [`RttStats`] (an LRU per-CPU hash keyed by [`RttKey`]).
pub const MAP_RTT: &str = "DIR_RTT";
/// `[0]`: the generation the program writes under (0 or 1).
pub const MAP_RTT_GEN: &str = "DIR_RTT_GEN";
/// Per-CPU counters, by [`Count`].
pub const MAP_RTT_COUNTERS: &str = "DIR_RTT_COUNTERS";

/// The tc program for an observer that is not the connections' end (`agent --observe`).
pub const PROGRAM_RTT_TC: &str = "director_rtt_tc";
/// Handshakes between their SYN-ACK and its ACK: [`HandshakeKey`] → [`SynAckSeen`] (an LRU
/// hash shared by every CPU: the SYN-ACK and the ACK may be taken on different ones).
pub const MAP_RTT_SYNACK: &str = "DIR_RTT_SYNACK";
/// Handshakes `DIR_RTT_SYNACK` holds by default: those whose ACK has not come yet, so
/// this × 1 s is the handshake rate it covers at a 1 s RTT (the agent's `--max-pending`).
pub const MAX_PENDING_HANDSHAKES: u32 = 1 << 16;

/// Prefixes `DIR_RTT` holds by default. Entries are deleted at every drain (2 s), so this
/// bounds the distinct client prefixes seen between two drains, not over time: 65,536 is
/// more than 6 times what 5,000 handshakes/s can bring in 2 s even if every one came
/// from another prefix. Memory is this × CPUs × 280 bytes (about 18 MB per CPU): the
/// object declares one entry and the agent sizes the map at load (`--max-prefixes`).
pub const MAX_RTT_PREFIXES: u32 = 1 << 16;

/// Prefix lengths the samples are aggregated under.
pub const V4_PREFIX_LEN: u8 = 24;
pub const V6_PREFIX_LEN: u8 = 48;

pub const FAMILY_V4: u8 = 4;
pub const FAMILY_V6: u8 = 6;

/// Sub-buckets per power of two (log-spaced) and powers of two covered: 2^6 µs .. 2^22 µs.
pub const SUB_BUCKETS: usize = 8;
pub const OCTAVES: usize = 16;
pub const HIST_BUCKETS: usize = SUB_BUCKETS * OCTAVES;
/// log2 of the first bucket's lower bound in µs (64 µs); smaller RTTs count in bucket 0.
pub const FIRST_OCTAVE: u32 = 6;

/// A value's mantissa is scaled to [1024, 2048); sub-bucket `s` starts at `SUB_START[s]`,
/// `ceil(1024 × 2^(s/8))`, so the buckets of an octave have about the same width ratio (2^(1/8), at most
/// 1.0912) and the bounds are exact in integers.
pub const MANTISSA_ONE: u32 = 1024;
const MANTISSA_BITS: u32 = 10;
pub const SUB_START: [u32; SUB_BUCKETS + 1] =
    [1024, 1117, 1218, 1328, 1449, 1580, 1723, 1879, 2048];

/// Key of `DIR_RTT`: the generation and the client prefix, its address words as the kernel
/// gives them (network byte order), bits past the prefix zeroed.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RttKey {
    /// 0 or 1 (see the module docs).
    pub gen: u8,
    /// [`FAMILY_V4`] (address in `addr[0]`, the rest zero) or [`FAMILY_V6`].
    pub family: u8,
    pub _pad: [u8; 2],
    pub addr: [u32; 4],
}

/// Value of `DIR_RTT` (one per CPU): what the handshakes of one prefix measured since the
/// entry was made. `min_us`/`max_us` mean nothing while `samples` is 0 (another CPU's).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RttStats {
    pub samples: u32,
    pub min_us: u32,
    pub max_us: u32,
    pub _pad: u32,
    pub sum_us: u64,
    /// Per bucket ([`bucket`]); saturating (65,535 per bucket per CPU between two drains).
    pub hist: [u16; HIST_BUCKETS],
}

impl Default for RttStats {
    fn default() -> Self {
        RttStats {
            samples: 0,
            min_us: 0,
            max_us: 0,
            _pad: 0,
            sum_us: 0,
            hist: [0; HIST_BUCKETS],
        }
    }
}

/// Slots of `DIR_RTT_COUNTERS`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Count {
    /// Samples written under generation 0 and 1 (the agent compares them with what it
    /// drained: the difference is what the LRU evicted before it was read).
    SamplesGen0 = 0,
    SamplesGen1 = 1,
    /// Handshakes the kernel had no RTT for (0: a retransmitted SYN-ACK, a SYN cookie).
    NoRtt = 2,
    /// Samples whose prefix could not get an entry (the map refused the insert).
    NoEntry = 3,
    /// Sockets of a family other than IPv4/IPv6.
    OtherFamily = 4,
    /// SYN-ACKs the tc observer saw (each starts a handshake's clock).
    SynAcks = 5,
}

pub const COUNT_SLOTS: u32 = 8;

/// The counter slot of generation `gen`'s samples.
pub const fn samples_slot(gen: u8) -> u32 {
    if gen == 0 {
        Count::SamplesGen0 as u32
    } else {
        Count::SamplesGen1 as u32
    }
}

/// The key of an IPv4 client's /24; `ip` as `bpf_sock_ops.remote_ip4` has it.
#[inline(always)]
pub fn key_v4(gen: u8, ip: u32) -> RttKey {
    RttKey {
        gen,
        family: FAMILY_V4,
        _pad: [0; 2],
        addr: [ip & u32::from_ne_bytes([0xff, 0xff, 0xff, 0]), 0, 0, 0],
    }
}

/// The key of an IPv6 client's /48, or of the IPv4 /24 of an IPv4-mapped address (an IPv4
/// client of a dual-stack listener); `ip` as `bpf_sock_ops.remote_ip6` has it.
#[inline(always)]
pub fn key_v6(gen: u8, ip: [u32; 4]) -> RttKey {
    if ip[0] == 0 && ip[1] == 0 && ip[2] == u32::from_ne_bytes([0, 0, 0xff, 0xff]) {
        return key_v4(gen, ip[3]);
    }
    RttKey {
        gen,
        family: FAMILY_V6,
        _pad: [0; 2],
        addr: [ip[0], ip[1] & u32::from_ne_bytes([0xff, 0xff, 0, 0]), 0, 0],
    }
}

/// Key of `DIR_RTT_SYNACK`: one connection, named from the client's side. Addresses and
/// ports as on the wire (IPv4 in `client[0]`/`server[0]`, the rest zero).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct HandshakeKey {
    /// [`FAMILY_V4`] or [`FAMILY_V6`].
    pub family: u8,
    pub _pad: [u8; 3],
    pub client_port: u16,
    pub server_port: u16,
    pub client: [u32; 4],
    pub server: [u32; 4],
}

/// Value of `DIR_RTT_SYNACK`: the server's SYN-ACK as the observer saw it pass.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SynAckSeen {
    /// When it passed (`bpf_ktime_get_ns`).
    pub at_ns: u64,
    /// The acknowledgment number that completes the handshake: its sequence number + 1.
    pub ack: u32,
    /// Nonzero once the same SYN-ACK passed again (a retransmission).
    pub resent: u32,
}

/// What a client's ACK means for a handshake the observer saw the SYN-ACK of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandshakeEnd {
    /// It acknowledges another sequence number: not this handshake's end.
    NotIt,
    /// It ends a handshake whose SYN-ACK was sent more than once: which copy it answers is
    /// unknown (Karn's rule), so there is no sample, as the kernel's own has none.
    Ambiguous,
    /// The RTT in µs (at least 1: 0 means "no sample" to the histogram's readers).
    Rtt(u32),
}

/// The sample an ACK (`ack`, host order) seen at `now_ns` gives the handshake `seen`.
#[inline(always)]
pub fn handshake_end(seen: &SynAckSeen, ack: u32, now_ns: u64) -> HandshakeEnd {
    if ack != seen.ack {
        return HandshakeEnd::NotIt;
    }
    if seen.resent != 0 {
        return HandshakeEnd::Ambiguous;
    }
    let us = now_ns.saturating_sub(seen.at_ns) / 1000;
    HandshakeEnd::Rtt(if us > u32::MAX as u64 {
        u32::MAX
    } else if us == 0 {
        1
    } else {
        us as u32
    })
}

/// The key an RTT sample of client `addr` (wire order) counts under: its /24 or /48.
#[inline(always)]
pub fn key_of(gen: u8, family: u8, addr: [u32; 4]) -> RttKey {
    if family == FAMILY_V4 {
        key_v4(gen, addr[0])
    } else {
        key_v6(gen, addr)
    }
}

/// floor(log2(v)) for v > 0, without loops (the verifier walks straight code fastest).
#[inline(always)]
fn log2(mut v: u32) -> u32 {
    let mut l = 0;
    if v >= 1 << 16 {
        v >>= 16;
        l += 16;
    }
    if v >= 1 << 8 {
        v >>= 8;
        l += 8;
    }
    if v >= 1 << 4 {
        v >>= 4;
        l += 4;
    }
    if v >= 1 << 2 {
        v >>= 2;
        l += 2;
    }
    if v >= 1 << 1 {
        l += 1;
    }
    l
}

/// The histogram bucket of an RTT of `us` microseconds: octave × 8 + sub-bucket, clamped
/// to the first (under 64 µs) and last (4.19 s and over) buckets.
#[inline(always)]
pub fn bucket(us: u32) -> usize {
    if us < 1 << FIRST_OCTAVE {
        return 0;
    }
    let l = log2(us);
    let octave = l - FIRST_OCTAVE;
    if octave as usize >= OCTAVES {
        return HIST_BUCKETS - 1;
    }
    let m = if l >= MANTISSA_BITS {
        us >> (l - MANTISSA_BITS)
    } else {
        us << (MANTISSA_BITS - l)
    };
    // Straight comparisons rather than a search loop; each adds 0 or 1.
    let sub = (m >= SUB_START[1]) as usize
        + (m >= SUB_START[2]) as usize
        + (m >= SUB_START[3]) as usize
        + (m >= SUB_START[4]) as usize
        + (m >= SUB_START[5]) as usize
        + (m >= SUB_START[6]) as usize
        + (m >= SUB_START[7]) as usize;
    octave as usize * SUB_BUCKETS + sub
}

/// Adds one sample of `us` to `s` (the kernel's per-CPU value).
#[inline(always)]
pub fn record(s: &mut RttStats, us: u32) {
    if s.samples == 0 || us < s.min_us {
        s.min_us = us;
    }
    if us > s.max_us {
        s.max_us = us;
    }
    s.samples = s.samples.wrapping_add(1);
    s.sum_us = s.sum_us.wrapping_add(us as u64);
    if let Some(h) = s.hist.get_mut(bucket(us)) {
        *h = h.saturating_add(1);
    }
}

#[cfg(any(feature = "host", test))]
pub use host::Hist;

#[cfg(any(feature = "host", test))]
mod host {
    use super::*;

    /// A bucket's bounds in µs, [lower, upper): exact, from the integer thresholds.
    /// The first starts at 0 and the last ends at infinity (they take what is clamped).
    pub fn bounds(b: usize) -> (f64, f64) {
        let octave = (b / SUB_BUCKETS) as i32;
        let sub = b % SUB_BUCKETS;
        let scale = 2f64.powi(octave + FIRST_OCTAVE as i32) / MANTISSA_ONE as f64;
        let lo = if b == 0 {
            0.0
        } else {
            SUB_START[sub] as f64 * scale
        };
        let hi = if b + 1 == HIST_BUCKETS {
            f64::INFINITY
        } else {
            SUB_START[sub + 1] as f64 * scale
        };
        (lo, hi)
    }

    /// A prefix's samples over any span: the per-CPU values of one or more drains, merged.
    #[derive(Clone, Debug, PartialEq)]
    pub struct Hist {
        pub samples: u64,
        pub min_us: u32,
        pub max_us: u32,
        pub sum_us: u64,
        pub counts: [u64; HIST_BUCKETS],
    }

    impl Default for Hist {
        fn default() -> Self {
            Hist {
                samples: 0,
                min_us: 0,
                max_us: 0,
                sum_us: 0,
                counts: [0; HIST_BUCKETS],
            }
        }
    }

    impl Hist {
        /// Adds one CPU's value (skipped when that CPU had no sample).
        pub fn add_stats(&mut self, s: &RttStats) {
            if s.samples == 0 {
                return;
            }
            self.add_extremes(u64::from(s.samples), s.min_us, s.max_us, s.sum_us);
            for (c, h) in self.counts.iter_mut().zip(s.hist.iter()) {
                *c += u64::from(*h);
            }
        }

        pub fn merge(&mut self, o: &Hist) {
            if o.samples == 0 {
                return;
            }
            self.add_extremes(o.samples, o.min_us, o.max_us, o.sum_us);
            for (c, h) in self.counts.iter_mut().zip(o.counts.iter()) {
                *c += *h;
            }
        }

        fn add_extremes(&mut self, samples: u64, min: u32, max: u32, sum: u64) {
            if self.samples == 0 || min < self.min_us {
                self.min_us = min;
            }
            if self.samples == 0 || max > self.max_us {
                self.max_us = max;
            }
            self.samples += samples;
            self.sum_us += sum;
        }

        /// The median in µs (the lower one for an even count), or `None` without samples.
        ///
        /// The bucket holding the median's rank is known exactly; its bounds, narrowed to
        /// [min, max], hold the true median, and the estimate is their geometric middle. A
        /// bucket spans a ratio of at most 1.0912, so the estimate is within
        /// sqrt(1.0912) - 1 = 4.46 % of the true median for RTTs of 64 µs to 4 s (and
        /// exact when all samples are equal: then min = max).
        pub fn median_us(&self) -> Option<f64> {
            // Saturated buckets (per CPU and drain) can make the counts sum short of
            // `samples`: rank within what the buckets hold.
            let total: u64 = self.counts.iter().sum();
            if total == 0 {
                return None;
            }
            let rank = (total - 1) / 2;
            let mut seen = 0;
            for (b, &c) in self.counts.iter().enumerate() {
                if seen + c > rank {
                    let (lo, hi) = bounds(b);
                    let lo = lo.max(f64::from(self.min_us)).max(1.0);
                    let hi = hi.min(f64::from(self.max_us)).max(lo);
                    return Some((lo * hi).sqrt());
                }
                seen += c;
            }
            None
        }
    }
}

#[cfg(any(feature = "host", test))]
pub use host::bounds;

#[cfg(feature = "user")]
mod pod {
    // SAFETY: `#[repr(C)]`, integers only, padding spelled out as fields.
    unsafe impl aya::Pod for super::RttKey {}
    unsafe impl aya::Pod for super::RttStats {}
    unsafe impl aya::Pod for super::HandshakeKey {}
    unsafe impl aya::Pod for super::SynAckSeen {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_have_no_hidden_padding() {
        assert_eq!(size_of::<RttKey>(), 20);
        assert_eq!(size_of::<RttStats>(), 24 + 2 * HIST_BUCKETS);
        assert_eq!(align_of::<RttStats>(), 8);
        assert_eq!(size_of::<HandshakeKey>(), 40);
        assert_eq!(size_of::<SynAckSeen>(), 16);
    }

    #[test]
    fn a_handshake_ends_only_at_the_ack_of_its_syn_ack() {
        let seen = SynAckSeen {
            at_ns: 5_000_000,
            ack: 1001,
            resent: 0,
        };
        assert_eq!(handshake_end(&seen, 1000, 6_000_000), HandshakeEnd::NotIt);
        assert_eq!(handshake_end(&seen, 1002, 6_000_000), HandshakeEnd::NotIt);
        assert_eq!(
            handshake_end(&seen, 1001, 45_123_456),
            HandshakeEnd::Rtt(40_123)
        );
        // Under a microsecond is still a sample; a clock read before the SYN-ACK's (another
        // CPU's) is not negative.
        assert_eq!(handshake_end(&seen, 1001, 5_000_400), HandshakeEnd::Rtt(1));
        assert_eq!(handshake_end(&seen, 1001, 4_000_000), HandshakeEnd::Rtt(1));
        assert_eq!(
            handshake_end(&seen, 1001, u64::MAX),
            HandshakeEnd::Rtt(u32::MAX)
        );
        let resent = SynAckSeen { resent: 1, ..seen };
        assert_eq!(
            handshake_end(&resent, 1001, 45_000_000),
            HandshakeEnd::Ambiguous
        );
        assert_eq!(handshake_end(&resent, 7, 45_000_000), HandshakeEnd::NotIt);
        // Sequence numbers wrap: a SYN-ACK at 2^32 - 1 is acknowledged with 0.
        let wrapped = SynAckSeen {
            ack: u32::MAX.wrapping_add(1),
            ..seen
        };
        assert_eq!(
            handshake_end(&wrapped, 0, 6_000_000),
            HandshakeEnd::Rtt(1000)
        );
    }

    #[test]
    fn thresholds_are_the_rounded_up_powers() {
        for (s, &t) in SUB_START.iter().enumerate() {
            let want = (1024.0 * 2f64.powf(s as f64 / 8.0)).ceil() as u32;
            assert_eq!(t, want, "sub-bucket {s}");
        }
    }

    #[test]
    fn every_value_falls_within_its_bucket_bounds() {
        for us in (1..5_000_000u32)
            .step_by(7)
            .chain([63, 64, 65, 4_194_303, 4_194_304])
        {
            let b = bucket(us);
            let (lo, hi) = bounds(b);
            let v = f64::from(us);
            assert!(lo <= v && v < hi, "{us} µs in bucket {b} [{lo}, {hi})");
        }
        assert_eq!(bucket(63), 0);
        assert_eq!(bucket(64), 0);
        assert_eq!(bucket(u32::MAX), HIST_BUCKETS - 1);
    }

    #[test]
    fn buckets_are_monotonic_and_narrow() {
        let mut prev = 0;
        for us in 64..5_000_000u32 {
            let b = bucket(us);
            assert!(b >= prev && b <= prev + 1, "{us}: {b} after {prev}");
            prev = b;
        }
        for b in 1..HIST_BUCKETS - 1 {
            let (lo, hi) = bounds(b);
            assert!(hi / lo <= 1.0912, "bucket {b}: ratio {}", hi / lo);
        }
    }

    #[test]
    fn keys_mask_the_prefix_and_map_ipv4_in_ipv6() {
        let w = |b: [u8; 4]| u32::from_ne_bytes(b);
        let k = key_v4(1, w([203, 0, 113, 77]));
        assert_eq!((k.gen, k.family), (1, FAMILY_V4));
        assert_eq!(k.addr, [w([203, 0, 113, 0]), 0, 0, 0]);
        let mapped = [0, 0, w([0, 0, 0xff, 0xff]), w([203, 0, 113, 9])];
        assert_eq!(key_v6(1, mapped), k);
        let v6 = [w([0x20, 0x01, 0x0d, 0xb8]), w([0, 7, 0xab, 0xcd]), 1, 2];
        let k6 = key_v6(0, v6);
        assert_eq!(k6.family, FAMILY_V6);
        assert_eq!(k6.addr, [v6[0], w([0, 7, 0, 0]), 0, 0]);
    }

    /// A small deterministic generator (no dependency for the test).
    fn next(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    fn hist_of(values: &[u32]) -> Hist {
        let mut s = RttStats::default();
        for &v in values {
            record(&mut s, v);
        }
        let mut h = Hist::default();
        h.add_stats(&s);
        h
    }

    #[test]
    fn median_is_within_five_percent_of_the_true_one() {
        let mut st = 0x9e37_79b9_7f4a_7c15u64;
        for round in 0..2000 {
            let n = 1 + (next(&mut st) % 300) as usize;
            // Around a centre from 100 µs to 2 s, spread from none to +-50 %.
            let centre = 100.0 * 20_000f64.powf((next(&mut st) % 1000) as f64 / 1000.0);
            let spread = (next(&mut st) % 50) as f64 / 100.0;
            let mut v: Vec<u32> = (0..n)
                .map(|_| {
                    let u = (next(&mut st) % 2001) as f64 / 1000.0 - 1.0;
                    (centre * (1.0 + spread * u)).max(64.0) as u32
                })
                .collect();
            let h = hist_of(&v);
            v.sort_unstable();
            let truth = f64::from(v[(n - 1) / 2]);
            let est = h.median_us().expect("samples");
            let err = (est / truth - 1.0).abs();
            assert!(err < 0.05, "round {round}: median {est} vs {truth} ({err})");
        }
    }

    #[test]
    fn equal_samples_give_the_exact_median_and_merges_add_up() {
        let h = hist_of(&[40_650; 10]);
        assert_eq!(h.median_us(), Some(40_650.0));
        let mut a = hist_of(&[40_000, 41_000, 42_000]);
        a.merge(&hist_of(&[39_000, 80_000]));
        assert_eq!((a.samples, a.min_us, a.max_us), (5, 39_000, 80_000));
        assert_eq!(a.sum_us, 242_000);
        assert_eq!(Hist::default().median_us(), None);
    }

    #[test]
    fn another_cpus_empty_value_changes_nothing() {
        let mut h = hist_of(&[500, 700]);
        let before = h.clone();
        h.add_stats(&RttStats::default());
        assert_eq!(h, before);
    }
}
