//! SYN steering for virtual IPs: the maps' layouts and the pure rules the XDP program and
//! the controller share (which server a flow goes to, its outer source address, its MSS).
//!
//! A VIP (address, port) belongs to a service. A new connection to it gets the service's
//! decision for the client's prefix (the DNS path's tables) and one of its equally good
//! servers by weighted rendezvous hashing of the flow, so a retransmitted SYN, or a packet
//! of a flow the table forgot, lands on the same server, and a change in the candidate set
//! moves only the flows of the servers that changed. The flow table then pins the flow.

use core::num::NonZeroU64;

use crate::limits::MAX_CANDIDATES;
use crate::maps::Decision;

pub const MAP_VIPS: &str = "DIR_VIPS";
pub const MAP_FLOWS: &str = "DIR_FLOWS";
pub const MAP_HOPS: &str = "DIR_HOPS";
pub const MAP_STEER: &str = "DIR_STEER";
pub const MAP_STEER_COUNTERS: &str = "DIR_STEER_COUNTERS";
pub const MAP_FLOW_GUARD: &str = "DIR_FLOW_GUARD";
pub const MAP_SERVER_FLOWS: &str = "DIR_SRV_FLOWS";

/// VIPs (address, port) in all.
pub const MAX_VIPS: u32 = 4096;
/// Flows pinned at once (an LRU hash: the least recently used go first, and a packet of a
/// forgotten flow gets the same rendezvous choice again, so losing an entry only loses
/// the pin across a decision change). About 100 bytes a flow with the kernel's overhead,
/// all allocated when the object loads: 262,144 flows take about 26 MB.
pub const MAX_FLOWS: u32 = 1 << 18;

/// The only protocol steered: a `FlowKey`'s `proto`.
pub use crate::headers::tcp::PROTOCOL as TCP_PROTOCOL;
pub const FAMILY_V4: u8 = 4;
pub const FAMILY_V6: u8 = 6;

/// How a VIP's packets reach its servers.
#[repr(u8)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(
    feature = "host",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "lowercase")
)]
pub enum Forward {
    /// Servers on the edge's segment with the VIP on their loopback: the destination MAC
    /// becomes the server's, nothing else changes.
    #[default]
    L2 = 1,
    /// Encapsulated in an outer header of the same family to the server's address (it
    /// strips it with `director-decap` or a tunnel device), sent to the next hop's MAC.
    Ipip = 2,
}

impl Forward {
    pub const ALL: [Forward; 2] = [Forward::L2, Forward::Ipip];

    pub fn from_u8(v: u8) -> Option<Forward> {
        match v {
            1 => Some(Forward::L2),
            2 => Some(Forward::Ipip),
            _ => None,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            Forward::L2 => "l2",
            Forward::Ipip => "ipip",
        }
    }

    /// Bytes the mode adds in front of the client's packet, by family.
    pub const fn overhead(self, v6: bool) -> u16 {
        match (self, v6) {
            (Forward::L2, _) => 0,
            (Forward::Ipip, false) => 20,
            (Forward::Ipip, true) => 40,
        }
    }
}

#[cfg(feature = "host")]
impl core::str::FromStr for Forward {
    type Err = String;

    fn from_str(s: &str) -> Result<Forward, String> {
        Forward::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| format!("mode {s:?} is not one of l2, ipip"))
    }
}

#[cfg(feature = "host")]
impl core::fmt::Display for Forward {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// The MSS a SYN to a VIP is clamped to by default: what fits a 1500-byte MTU toward the
/// servers after the mode's overhead (none for `l2`: no clamp).
pub const fn default_mss(mode: Forward, v6: bool) -> u16 {
    match mode {
        Forward::L2 => 0,
        Forward::Ipip => {
            let ip = if v6 { 40 } else { 20 };
            1500 - ip - 20 - mode.overhead(v6)
        }
    }
}

/// Key of `DIR_VIPS`: a VIP's address (IPv4 in the first 4 bytes, the rest zero), port in
/// network order, family and protocol.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VipKey {
    pub addr: [u8; 16],
    pub port: [u8; 2],
    pub family: u8,
    pub proto: u8,
}

/// Value of `DIR_VIPS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VipRecord {
    pub service: u32,
    /// `Forward` as u8.
    pub mode: u8,
    pub _pad: u8,
    /// SYNs' MSS option is lowered to this (0: left alone).
    pub mss: u16,
    /// `ipip`: the outer source is `src` with its low `src_bits` bits (at most 32) taken
    /// from the flow's hash, so a server's NIC spreads flows over its queues.
    pub src_bits: u32,
    pub _pad2: u32,
    pub src: [u8; 16],
}

/// Key of `DIR_FLOWS`: one TCP connection as the client sent it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FlowKey {
    pub client: [u8; 16],
    pub vip: [u8; 16],
    /// Ports in network order.
    pub client_port: [u8; 2],
    pub vip_port: [u8; 2],
    pub family: u8,
    pub proto: u8,
    pub _pad: [u8; 2],
}

/// The flow was recorded from a packet other than a SYN (no entry: a restart or an
/// eviction); its server is the same rendezvous choice a SYN would have got.
pub const FLOW_FROM_MIDSTREAM: u8 = 1;
/// The flow's server went down and the flow was moved to the next choice.
pub const FLOW_MOVED: u8 = 2;

/// Value of `DIR_FLOWS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flow {
    pub service: u32,
    pub server: u16,
    /// `FLOW_*` bits.
    pub flags: u8,
    pub _pad: u8,
    /// When it was recorded (CLOCK_MONOTONIC ns).
    pub since_ns: u64,
}

/// A VIP's packet whose flow needs a server chosen (a new flow, or a pinned one whose
/// server is gone), as the XDP program's first steering stage leaves it in a per-CPU map
/// (`DIR_HANDOVER`, unpinned) for the second: each stage runs in a stack frame of its own, and the choice's
/// frame under the first one's would pass the kernel's 512 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Handover {
    pub key: FlowKey,
    pub vip: VipRecord,
    pub service: u32,
    /// `flow_hash` of the packet's 4-tuple.
    pub flow: u32,
    /// Offset of the IP header.
    pub l3: u16,
    pub v6: u8,
    /// A SYN without ACK.
    pub syn: u8,
    /// An ICMP error about the flow.
    pub icmp: u8,
    /// The flow has an entry (its server can no longer take it).
    pub pinned: u8,
    pub _pad: [u8; 2],
}

/// Where packets for a server leave the edge: the interface (its index; 0: not resolved,
/// the packet is dropped and counted) and the Ethernet addresses to write.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hop {
    pub dst_mac: [u8; 6],
    pub src_mac: [u8; 6],
    pub ifindex: u32,
}

/// Value of `DIR_HOPS`, indexed by server id: its hop per way of reaching it. The
/// controller resolves them from the kernel's route and neighbour tables.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hops {
    /// `l2`: the server's own MAC on the edge's segment.
    pub l2: Hop,
    /// `ipip`: the next hop toward the server's IPv4 and IPv6 addresses.
    pub ipip4: Hop,
    pub ipip6: Hop,
}

impl Hops {
    #[inline(always)]
    pub fn get(&self, mode: Forward, v6: bool) -> &Hop {
        match (mode, v6) {
            (Forward::L2, _) => &self.l2,
            (Forward::Ipip, false) => &self.ipip4,
            (Forward::Ipip, true) => &self.ipip6,
        }
    }
}

/// Value of `DIR_STEER[0]`: the flood guard, new flow entries per second per CPU. Past it
/// packets are still steered (by the same rendezvous choice) but no entry is made, so a
/// SYN flood cannot push real flows out of the table.
pub type GuardLimit = crate::rrl::Limit;

/// Counters of `DIR_STEER_COUNTERS` (per CPU, fixed keys).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Count {
    /// A SYN to a VIP forwarded to a server chosen for it (a new flow).
    NewFlow = 0,
    /// A packet of a pinned flow forwarded to its server.
    Pinned = 1,
    /// A packet other than a SYN with no flow entry: forwarded by the rendezvous choice
    /// and recorded.
    Midstream = 2,
    /// A pinned flow whose server is down, moved to the next choice.
    Moved = 3,
    /// Forwarded without recording the flow: the flood guard's rate was exceeded.
    Guarded = 4,
    /// An ICMP error about a VIP flow (fragmentation needed, packet too big) forwarded.
    Icmp = 5,
    /// Dropped: no decision or no usable server for the client.
    NoServer = 6,
    /// Dropped: the chosen server's hop is not resolved yet.
    NoHop = 7,
    /// Dropped: the packet could not be resized for encapsulation or forwarded.
    Failed = 8,
    /// SYNs whose MSS option was lowered.
    MssClamped = 9,
    /// Forwarded by `l2` (XDP_TX or XDP_REDIRECT).
    ForwardedL2 = 10,
    /// Forwarded encapsulated.
    ForwardedIpip = 11,
}

pub const COUNT_SLOTS: u32 = 16;

pub const ALL_COUNTS: [Count; 12] = [
    Count::NewFlow,
    Count::Pinned,
    Count::Midstream,
    Count::Moved,
    Count::Guarded,
    Count::Icmp,
    Count::NoServer,
    Count::NoHop,
    Count::Failed,
    Count::MssClamped,
    Count::ForwardedL2,
    Count::ForwardedIpip,
];

impl Count {
    pub const fn name(self) -> &'static str {
        match self {
            Count::NewFlow => "new_flows",
            Count::Pinned => "pinned",
            Count::Midstream => "midstream",
            Count::Moved => "moved",
            Count::Guarded => "guarded",
            Count::Icmp => "icmp",
            Count::NoServer => "drop_no_server",
            Count::NoHop => "drop_no_hop",
            Count::Failed => "drop_failed",
            Count::MssClamped => "mss_clamped",
            Count::ForwardedL2 => "forwarded_l2",
            Count::ForwardedIpip => "forwarded_ipip",
        }
    }
}

/// A 32-bit hash of a flow, the same for every packet of it. Words of the key in host
/// order: only equality matters, never the byte order.
#[inline(always)]
pub fn flow_hash(client: &[u32; 4], vip: &[u32; 4], ports: u32) -> u32 {
    let mut h: u64 = 0x243f_6a88_85a3_08d3 ^ ports as u64;
    let mut i = 0;
    while i < 4 {
        h = mix(h ^ (((client[i] as u64) << 32) | vip[i] as u64));
        i += 1;
    }
    (h >> 32) as u32
}

pub use crate::hash::mix;

/// Fraction bits of [`neg_log2`].
pub const LOG_FRACTION_BITS: u32 = 12;

/// -log2(u) in fixed point (`LOG_FRACTION_BITS` fraction bits) for u = (h + 1) / 2^32, an
/// exponentially distributed value (times ln 2) from a uniform hash. Branch-free: the
/// verifier sees one path whatever the hash.
#[inline(always)]
pub fn neg_log2(h: u32) -> u64 {
    let x = h as u64 + 1;
    let int = 63 - x.leading_zeros() as u64;
    // The mantissa in [1, 2) with 31 fraction bits; squaring it doubles its logarithm, and
    // a square of 2 or more gives the next fraction bit (the classic binary logarithm).
    let mut y = (x << 31) >> int;
    let mut frac = 0u64;
    let mut i = 0;
    while i < LOG_FRACTION_BITS {
        y = (y * y) >> 31;
        let bit = y >> 32;
        frac = (frac << 1) | bit;
        y >>= bit;
        i += 1;
    }
    (32 << LOG_FRACTION_BITS) - ((int << LOG_FRACTION_BITS) | frac)
}

/// A candidate's rendezvous hash for a flow.
#[inline(always)]
pub fn candidate_hash(flow: u32, server: u16) -> u32 {
    (mix(((flow as u64) << 16) | server as u64) >> 32) as u32
}

/// Which candidate of `d` a flow goes to, among those `ok` marks usable (bit i for
/// candidate i): the usable primaries by weighted rendezvous (each scores
/// weight / -ln(u), the highest wins, so each gets flows in proportion to its weight and a
/// candidate's arrival or departure moves only the flows it wins or held), else the first
/// usable of the rest in rank order. `None` when nothing is usable. Weights of 0 get no
/// share while a usable primary has more; when all are 0 the usable primaries share evenly
/// (as `select` shares answers).
///
/// Two shortcuts give the same answer as the scores without computing them: a pool of one
/// wins outright, and in a pool of equal weights the lowest score is the highest hash
/// (`highest_hash`). Only a pool of unequal weights, or the rare near-tie of hashes, pays
/// for eight logarithms and divisions (`scored`).
#[inline(always)]
pub fn rendezvous(d: &Decision, ok: u32, flow: u32) -> Option<usize> {
    let count = (d.count as usize).min(MAX_CANDIDATES);
    let primary = (d.primary as usize).min(count);
    let primaries = ok & ((1u32 << primary) - 1);
    if primaries == 0 {
        let rest = ok & ((1u32 << count) - 1);
        return if rest == 0 {
            None
        } else {
            Some(rest.trailing_zeros() as usize)
        };
    }
    // Arithmetic, not branches, per candidate: the verifier walks every branch of an
    // unrolled loop, and a best index kept as a constant would keep its paths apart.
    let mut weighted = 0u32;
    // Over the weighted ones: the OR and the AND of their weights, equal when all are.
    let (mut any, mut all) = (0u16, u16::MAX);
    let mut j = 0;
    while j < MAX_CANDIDATES {
        let bit = (primaries >> j) & nonzero(d.weights[j]);
        weighted |= bit << j;
        let member = 0u16.wrapping_sub(bit as u16);
        any |= d.weights[j] & member;
        all &= d.weights[j] | !member;
        j += 1;
    }
    let even = weighted == 0;
    let pool = if even { primaries } else { weighted };
    if pool & (pool - 1) == 0 {
        return Some(pool.trailing_zeros() as usize);
    }
    if even || any == all {
        if let Some(i) = highest_hash(d, pool, flow) {
            return Some(i);
        }
    }
    scored(d, pool, even, flow)
}

/// The winner of a pool of two or more candidates of equal weight, or `None` when the two
/// highest hashes are too close to tell apart this way.
///
/// With one weight w for all, the scores (-log2(u) << 40) / w order as -log2(u), which
/// falls as the hash rises: the highest hash has the lowest score. But `neg_log2` keeps
/// 12 fraction bits, so two hashes within 2^-12 (relative) of each other may score the
/// same, and then the scores' tie-break (the lower rank) decides, not the hash. Hashes
/// more than 2^-10 apart differ by over five of those steps, so any such pair is left to
/// `scored`: about one flow in a hundred with eight candidates.
#[inline(always)]
pub fn highest_hash(d: &Decision, pool: u32, flow: u32) -> Option<usize> {
    // Each member's key: its hash above the complement of its rank (equal hashes: the
    // lower rank is higher), plus 1 so that 0 means not a member. Top two, branch-free.
    let (mut first, mut second) = (0u64, 0u64);
    let mut i = 0;
    while i < MAX_CANDIDATES {
        let member = 0u64.wrapping_sub(((pool >> i) & 1) as u64);
        let h = candidate_hash(flow, d.servers[i]) as u64;
        let key = (((h << 3) | (7 - i) as u64) + 1) & member;
        // Keys stay below 2^36: the sign of a difference says which is lower.
        let above_first = ((first.wrapping_sub(key) as i64) >> 63) as u64;
        let above_second = ((second.wrapping_sub(key) as i64) >> 63) as u64;
        let runner_up = second ^ ((second ^ key) & above_second);
        second = runner_up ^ ((runner_up ^ first) & above_first);
        first = first ^ ((first ^ key) & above_first);
        i += 1;
    }
    // u = (h + 1) / 2^32, as `neg_log2` takes it.
    let top = ((first - 1) >> 3) + 1;
    let next = (second.wrapping_sub(1) >> 3).wrapping_add(1);
    if second == 0 || top - next <= top >> 10 {
        return None;
    }
    Some(7 - ((first - 1) & 7) as usize)
}

/// The winner of the pool by its members' scores, -log2(u) / w in fixed point (weights
/// all taken as 1 when `even`), ties to the lower rank.
#[inline(always)]
pub fn scored(d: &Decision, pool: u32, even: bool, flow: u32) -> Option<usize> {
    let even = even as u32;
    // Each candidate's key: its score in fixed point, the low 3 bits its rank (ties, a
    // chance of 2^-32, go to the lower rank); `OUT` for one not in the pool. The lowest
    // key wins. The minimum is taken without a branch too: a branch per candidate would
    // leave the verifier up to 2^8 paths through the loop.
    let mut best = OUT;
    let mut i = 0;
    while i < MAX_CANDIDATES {
        let w = d.weights[i] as u64 * (1 - even as u64) + even as u64;
        // A weight of 0 outside the pool divides by 1 (its key is thrown away).
        let w = w + 1 - nonzero(w as u16) as u64;
        // SAFETY: w >= 1: a weight of 0 was made 1 just above.
        let w = unsafe { NonZeroU64::new_unchecked(w) };
        let score = (neg_log2(candidate_hash(flow, d.servers[i])) << 40) / w;
        let in_pool = 0u64.wrapping_sub(((pool >> i) & 1) as u64);
        let key = (((score & !7) | i as u64) & in_pool) | (OUT & !in_pool);
        // Both below 2^63, so the sign of the difference says which is lower.
        let lower = ((best.wrapping_sub(key) as i64) >> 63) as u64;
        best = key ^ ((best ^ key) & lower);
        i += 1;
    }
    (best != OUT).then_some((best & 7) as usize)
}

/// The key of a candidate not in the pool: above every score (scores stay below 2^58,
/// 17 integer and fraction bits of -log2 shifted by 40) and below 2^63.
const OUT: u64 = 1 << 62;

/// 1 if `v` is not 0, else 0, without a branch.
#[inline(always)]
const fn nonzero(v: u16) -> u32 {
    (v as u32 + 0xffff) >> 16
}

/// The MSS a SYN carries after clamping to `limit` (0: no clamp).
#[inline(always)]
pub const fn clamp_mss(mss: u16, limit: u16) -> u16 {
    if limit != 0 && mss > limit {
        limit
    } else {
        mss
    }
}

/// The outer source of an encapsulated flow: `base` with its low `bits` bits (at most 32)
/// from the flow's hash. IPv4 addresses are the first 4 bytes.
#[inline(always)]
pub fn outer_source(base: &[u8; 16], bits: u32, v6: bool, flow: u32) -> [u8; 16] {
    let mut out = *base;
    let bits = bits.min(32);
    let mask = if bits == 32 {
        u32::MAX
    } else {
        (1u32 << bits) - 1
    };
    let end = if v6 { 16 } else { 4 };
    let low = u32::from_be_bytes([out[end - 4], out[end - 3], out[end - 2], out[end - 1]]);
    let v = ((low & !mask) | (flow & mask)).to_be_bytes();
    out[end - 4] = v[0];
    out[end - 3] = v[1];
    out[end - 2] = v[2];
    out[end - 1] = v[3];
    out
}

#[cfg(feature = "user")]
mod pod {
    use super::*;
    unsafe impl aya::Pod for VipKey {}
    unsafe impl aya::Pod for VipRecord {}
    unsafe impl aya::Pod for FlowKey {}
    unsafe impl aya::Pod for Flow {}
    unsafe impl aya::Pod for Hops {}
}

#[cfg(test)]
mod tests;
