//! Demand: how often each stored decision is used, counted by the program per choice index
//! (`DIR_DEMAND`, per CPU), and one in N uses sampled whole into a ring buffer
//! (`DIR_DEMAND_RING`) for the controller to aggregate by client prefix.
//!
//! What counts as a use: a DNS answer sent with the decision's addresses, or with its
//! service's fallback (alternate CNAME or origin address) because none of them could be
//! answered; and the SYN of a new flow steered to a VIP by the decision. Not counted: a
//! query the rate limit slipped (TC=1, no addresses) or dropped, a query passed or dropped
//! for any other reason, and a steered packet that is not a new flow's SYN (a pinned flow,
//! a flow moved off a down server, a midstream packet, an ICMP error).

/// Per-CPU counters, indexed by the choice index (`DecisionRef::id`, both halves).
pub const MAP_DEMAND: &str = "DIR_DEMAND";
/// Ring buffer of `Sample`s.
pub const MAP_DEMAND_RING: &str = "DIR_DEMAND_RING";
/// `[0]`: the sampling period N (one use in N is sampled, per CPU); 0 samples nothing.
pub const MAP_DEMAND_SAMPLE: &str = "DIR_DEMAND_SAMPLE";

/// Size of `DIR_DEMAND_RING` in bytes (a power of two, a multiple of the page size): room
/// for 21 k samples between two drains.
pub const RING_BYTES: u32 = 1 << 20;

/// `Sample::flags`: the client address is IPv6 (else IPv4 in its first 4 bytes).
pub const FLAG_V6: u8 = 1;
/// The client address is a query's ECS subnet (else the packet's source).
pub const FLAG_ECS: u8 = 2;
/// A steered flow's SYN (else a DNS answer).
pub const FLAG_SYN: u8 = 4;
/// The packet's source (`Sample::source`) is IPv6. With ECS it may differ from `FLAG_V6`.
pub const FLAG_SOURCE_V6: u8 = 8;

/// One sampled use of a decision, as the program writes it into `DIR_DEMAND_RING`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Sample {
    /// The service whose decision it was.
    pub service: u32,
    /// The choice index (`DIR_CHOICES`, both halves) that decided.
    pub choice: u32,
    /// The address the decision was made for: the ECS subnet (zero past its prefix) if the
    /// query had one, else the packet's source. IPv4 in the first 4 bytes.
    pub client: [u8; 16],
    /// The ECS source prefix length with ECS, else 32 or 128.
    pub client_len: u8,
    /// `FLAG_*`.
    pub flags: u8,
    pub _pad: [u8; 6],
    /// The packet's source (for DNS the resolver; for a SYN the client itself). IPv4 in the
    /// first 4 bytes.
    pub source: [u8; 16],
}

/// Byte offsets of `Sample`'s fields, for the program's word-sized writes.
pub const OFF_SERVICE: usize = 0;
pub const OFF_CHOICE: usize = 4;
pub const OFF_CLIENT: usize = 8;
pub const OFF_CLIENT_LEN: usize = 24;
pub const OFF_FLAGS: usize = 25;
pub const OFF_SOURCE: usize = 32;
pub const SAMPLE_LEN: usize = 48;

/// The per-CPU countdown's next state and whether this use is sampled: `left` is what the
/// CPU has left of its period (0 at start), `n` the period (not 0). Exactly one use in
/// every `n` consecutive ones on a CPU is sampled; a smaller `n` takes effect at once.
#[inline(always)]
pub const fn countdown(left: u32, n: u32) -> (u32, bool) {
    let left = if left > n { n } else { left };
    if left <= 1 {
        (n, true)
    } else {
        (left - 1, false)
    }
}

impl Sample {
    pub fn is_v6(&self) -> bool {
        self.flags & FLAG_V6 != 0
    }

    pub fn has_ecs(&self) -> bool {
        self.flags & FLAG_ECS != 0
    }

    pub fn is_syn(&self) -> bool {
        self.flags & FLAG_SYN != 0
    }

    pub fn source_is_v6(&self) -> bool {
        self.flags & FLAG_SOURCE_V6 != 0
    }

    /// The prefix length demand is aggregated at: /24 (IPv4) or /48 (IPv6), or the ECS
    /// prefix where the resolver sent a shorter one (nothing finer is known then).
    pub fn aggregate_len(&self) -> u8 {
        let full = if self.is_v6() { 48 } else { 24 };
        self.client_len.min(full)
    }

    /// The client address masked to `aggregate_len` (16 bytes; IPv4 in the first 4).
    pub fn aggregate(&self) -> [u8; 16] {
        let mut a = self.client;
        let bytes = if self.is_v6() { 16 } else { 4 };
        mask(&mut a[..bytes], self.aggregate_len());
        for b in a.iter_mut().skip(bytes) {
            *b = 0;
        }
        a
    }
}

/// Zeroes every bit of `a` past the first `len`.
fn mask(a: &mut [u8], len: u8) {
    for (i, b) in a.iter_mut().enumerate() {
        let start = i as u32 * 8;
        let keep = (len as u32).saturating_sub(start).min(8);
        *b &= if keep == 0 { 0 } else { 0xffu8 << (8 - keep) };
    }
}

#[cfg(feature = "user")]
unsafe impl aya::Pod for Sample {}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{align_of, offset_of, size_of};

    #[test]
    fn layout_is_fixed() {
        assert_eq!(size_of::<Sample>(), SAMPLE_LEN);
        assert_eq!(align_of::<Sample>(), 4);
        assert_eq!(offset_of!(Sample, service), OFF_SERVICE);
        assert_eq!(offset_of!(Sample, choice), OFF_CHOICE);
        assert_eq!(offset_of!(Sample, client), OFF_CLIENT);
        assert_eq!(offset_of!(Sample, client_len), OFF_CLIENT_LEN);
        assert_eq!(offset_of!(Sample, flags), OFF_FLAGS);
        assert_eq!(offset_of!(Sample, source), OFF_SOURCE);
        // The addresses are written as two 8-byte words each.
        assert_eq!(OFF_CLIENT % 8, 0);
        assert_eq!(OFF_SOURCE % 8, 0);
        // The program writes the prefix length, the flags and the padding as one word.
        assert_eq!(OFF_CLIENT_LEN + 8, OFF_SOURCE);
        assert!(RING_BYTES.is_power_of_two() && RING_BYTES >= 4096);
    }

    #[test]
    fn flags_are_distinct_bits() {
        let all = [FLAG_V6, FLAG_ECS, FLAG_SYN, FLAG_SOURCE_V6];
        for (i, a) in all.iter().enumerate() {
            assert_eq!(a.count_ones(), 1);
            for b in &all[i + 1..] {
                assert_eq!(a & b, 0);
            }
        }
        let s = Sample {
            flags: FLAG_ECS | FLAG_SOURCE_V6,
            ..Sample::default()
        };
        assert!(s.has_ecs() && s.source_is_v6() && !s.is_v6() && !s.is_syn());
    }

    #[test]
    fn countdown_samples_one_in_n() {
        for n in 1..=7u32 {
            for start in 0..=9u32 {
                let mut left = start;
                let mut hits = 0;
                for _ in 0..n * 5 {
                    let (l, hit) = countdown(left, n);
                    left = l;
                    hits += hit as u32;
                }
                assert_eq!(hits, 5, "n {n} start {start}");
            }
        }
        // From the start of a CPU's count, the first use is sampled.
        assert_eq!(countdown(0, 4), (4, true));
        assert_eq!(countdown(4, 4), (3, false));
        // A shorter period cuts what is left.
        assert_eq!(countdown(1000, 2), (1, false));
    }

    #[test]
    fn aggregates_at_24_48_or_a_shorter_ecs_prefix() {
        let v4 = Sample {
            client: [192, 0, 2, 77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            client_len: 32,
            ..Sample::default()
        };
        assert_eq!(v4.aggregate_len(), 24);
        assert_eq!(&v4.aggregate()[..4], &[192, 0, 2, 0]);
        let short = Sample {
            client: [198, 51, 100, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            client_len: 20,
            flags: FLAG_ECS,
            ..Sample::default()
        };
        assert_eq!(short.aggregate_len(), 20);
        assert_eq!(&short.aggregate()[..4], &[198, 51, 96, 0]);
        let mut a6 = [0u8; 16];
        a6[..8].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0x12, 0x34, 0x56, 0x78]);
        a6[15] = 1;
        let v6 = Sample {
            client: a6,
            client_len: 128,
            flags: FLAG_V6,
            ..Sample::default()
        };
        assert_eq!(v6.aggregate_len(), 48);
        let g = v6.aggregate();
        assert_eq!(&g[..6], &a6[..6]);
        assert!(g[6..].iter().all(|&b| b == 0));
    }
}
