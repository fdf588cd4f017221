//! Every map's name, size, key and value, defined once for the kernel and userspace.
//!
//! Index 0 of the id-indexed arrays is reserved so that a zeroed id never means a real
//! service or server. All layouts are `#[repr(C)]` with their padding spelled out.

use crate::fallback::Kinds;
use crate::limits::HIDDEN_WORDS;
// Limits other crates (and the program) have always named from here.
pub use crate::limits::{
    LOCAL_SLOTS, LOCAL_SLOT_BITS, MAX_CANDIDATES, MAX_SERVERS, NAME_SLOTS, NAME_SLOT_BITS,
};

/// Where the maps (and the program's link) are pinned by default.
pub const PIN_DIR: &str = "/sys/fs/bpf/director";

pub const MAP_NAMES: &str = "DIR_NAMES";
pub const MAP_SERVICES: &str = "DIR_SERVICES";
pub const MAP_SERVERS: &str = "DIR_SERVERS";
pub const MAP_DEC4: &str = "DIR_DEC4";
pub const MAP_DEC6: &str = "DIR_DEC6";
pub const MAP_DEC_GEN: &str = "DIR_DEC_GEN";
pub const MAP_DEC16: &str = "DIR_DEC16";
pub const MAP_CHOICES: &str = "DIR_CHOICES";
/// Per choice index (both halves of `DIR_CHOICES`), the service whose decision it stores
/// (0: none). The controller's only: the program never reads it.
pub const MAP_CHOICE_OWNER: &str = "DIR_CHOICE_OWNER";
pub const MAP_CONFIG: &str = "DIR_CONFIG";
pub const MAP_LOCAL: &str = "DIR_LOCAL";
pub const MAP_LOCAL_SLOTS: &str = "DIR_LOCAL_SLOTS";
pub const MAP_FRONT: &str = "DIR_FRONT";
pub const MAP_NAME_SLOTS: &str = "DIR_NAME_SLOTS";
pub const MAP_SERVICE_NAMES: &str = "DIR_SERVICE_NAMES";
pub const MAP_IFACES: &str = "DIR_IFACES";
pub const MAP_COUNTERS: &str = "DIR_COUNTERS";
pub const MAP_SERVICE_STATS: &str = "DIR_SVC_STATS";
pub const MAP_HEALTH: &str = "DIR_HEALTH";
pub const MAP_SERVER_STATS: &str = "DIR_SRV_STATS";
pub const MAP_FALLBACK: &str = "DIR_FALLBACK";
pub const MAP_SCRATCH: &str = "DIR_SCRATCH";
pub const MAP_RRL: &str = "DIR_RRL";
pub const MAP_RRL_SLOTS: &str = "DIR_RRL_SLOTS";
pub const MAP_RRL_EXEMPT: &str = "DIR_RRL_EXEMPT";
pub const MAP_LAYOUT: &str = "DIR_LAYOUT";

/// The pin set's layout, carried as `DIR_LAYOUT`'s max_entries, so it needs no write and
/// every pin set made by a program has it. A new map is already caught (an older pin set
/// lacks it); bump this when a map keeps its name and sizes but changes what its entries
/// mean, and every `director-ctl` of the other layout refuses the pin set instead of
/// writing entries the program reads otherwise.
/// 2: `DIR_CHOICES` ids are per service (`DIR_CHOICE_OWNER`); a controller of layout 1
/// would store shared ids without owners, which demand would count under no service.
/// 3: `DIR_RRL`'s `exemptions` byte (was padding) gates the exemption trie; a controller
/// of layout 2 would leave it 0 and its exemptions unread.
pub const LAYOUT_VERSION: u32 = 3;
pub const PROGRAM: &str = "director";

/// Service ids are 1..MAX_SERVICES.
pub const MAX_SERVICES: u32 = 8192;
/// Decision entries per family, all services together (the tries allocate per
/// entry, so the bound costs nothing until used). Three services over a full table and
/// GeoLite2 City write about 3 M IPv4 entries.
pub const MAX_DECISIONS: u32 = 1 << 23;
/// Distinct decisions stored per half of `DIR_CHOICES` (ids 1..MAX_CHOICES of half A,
/// MAX_CHOICES + 1.. of half B; each half's first index is the empty decision). A full
/// table holds hundreds of thousands of prefixes but a few thousand distinct ranked lists,
/// so prefixes carry an id and each list is stored once. Ids are never rewritten while an
/// entry may refer to them: updates take fresh ones from the half in use, and when it runs
/// out every entry is rewritten in place onto the other half (see `TableSwitch`). One map,
/// so the program's later stages see one kind of pointer and the verifier walks them once;
/// it is allocated whole: 2 × 2^17 × 40 bytes = 10.5 MB.
pub const MAX_CHOICES: u32 = 1 << 17;
/// The edge's own addresses (`DIR_LOCAL`): the host's and configured ones.
pub const MAX_LOCAL: u32 = 4096;
/// Interfaces director is attached to (`DIR_IFACES`), indexed by ifindex: an array, whose
/// lookup the verifier inlines (a hash lookup per query cost tens of ns), 512 KB in all.
pub const MAX_IFACES: u32 = 1 << 16;
/// DNS names owned (one per DNS service).
pub const MAX_NAMES: u32 = 8192;
/// Rate-limit buckets (`DIR_RRL_SLOTS`, an array of `rrl::Slot` in sets of `rrl::WAYS`):
/// room for this many (service, client prefix) pairs over their rate at once, 24 bytes
/// each (6 MiB). A power of two.
pub const RRL_SLOTS: u32 = 1 << 18;
/// Prefixes never rate limited (`DIR_RRL_EXEMPT`).
pub const MAX_RRL_EXEMPT: u32 = 4096;
/// Bytes of a server's display name.
pub const SERVER_NAME_LEN: usize = 32;
/// A wire-format name (at most 255 bytes) in a buffer padded for 8-byte word compares.
pub const NAME_BUF: usize = 256;

/// Value of `DIR_NAMES`, keyed by `name::hash` of the lower-cased wire name, and of
/// `DIR_SERVICE_NAMES`, indexed by service id. The kernel compares `name` in full, so a
/// hash collision can never answer for the wrong name.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct NameEntry {
    pub service: u32,
    /// Wire length including the root label.
    pub len: u32,
    /// Lower-cased wire name, zero after `len`.
    pub name: [u8; NAME_BUF],
}

pub const SERVICE_ACTIVE: u8 = 1;

/// What a service is reached by: its DNS name (and any VIPs it has), or its VIPs only
/// (the name only names it; queries for it pass).
pub const KIND_DNS: u8 = 1;
pub const KIND_VIP: u8 = 2;

/// Value of `DIR_SERVICES`, indexed by service id.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServiceRecord {
    pub ttl: u32,
    pub flags: u8,
    pub kind: u8,
    /// Addresses to return per answer (1..=8).
    pub answers: u8,
    /// `select::Mode` as u8.
    pub select: u8,
}

pub const SERVER_EXISTS: u8 = 1;
pub const SERVER_UP: u8 = 2;
pub const SERVER_V4: u8 = 4;
pub const SERVER_V6: u8 = 8;
/// Drained (`server drain`): no new clients. Answers skip it like a down server; SYN
/// steering will keep its existing flows.
pub const SERVER_DRAINED: u8 = 16;

/// Value of `DIR_SERVERS`, indexed by server id. Aligned so the kernel copies the
/// addresses in words (byte-aligned copies become calls to a looping memcpy).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerRecord {
    pub flags: u8,
    pub _pad: [u8; 3],
    pub ipv4: [u8; 4],
    pub ipv6: [u8; 16],
    /// The operator's name for it, NUL-padded; the kernel never reads it.
    pub name: [u8; SERVER_NAME_LEN],
    /// Its last load read by a controller, as `f32::to_bits` (of NaN: none); the kernel
    /// never reads it.
    pub load: u32,
    pub _pad2: u32,
}

impl ServerRecord {
    #[inline(always)]
    pub fn is_up(&self) -> bool {
        self.flags & (SERVER_EXISTS | SERVER_UP) == (SERVER_EXISTS | SERVER_UP)
    }
    /// Up and not drained: may get new clients.
    #[inline(always)]
    pub fn is_usable(&self) -> bool {
        self.flags & (SERVER_EXISTS | SERVER_UP | SERVER_DRAINED) == (SERVER_EXISTS | SERVER_UP)
    }
    #[inline(always)]
    pub fn has_family(&self, v6: bool) -> bool {
        self.flags & if v6 { SERVER_V6 } else { SERVER_V4 } != 0
    }
}

/// Words of a per-service server bitmap: one bit per server id.
pub const SERVER_WORDS: usize = MAX_SERVERS as usize / 64;

/// Value of `DIR_HEALTH`, indexed by service id: which of the service's servers get no
/// answers, and the health checks' verdicts. One lookup per query gives the kernel every
/// server's state for the service (a flat services x servers array would be 8192^2
/// entries, a lookup per candidate a cost per answer). Pinned, so a restarted controller
/// starts from the verdicts instead of from "everything up". 3 KB per service.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthMask {
    /// The TTL of answers while the service is degraded (fail-open), 0: the service's own.
    pub ttl: u32,
    pub _pad: u32,
    /// Bit set: the server gets no answers for this service (down, not yet checked, or
    /// over its load threshold). The only part the kernel reads.
    pub out: [u64; SERVER_WORDS],
    /// Bit set: a check has given a verdict; `down` says which.
    pub known: [u64; SERVER_WORDS],
    pub down: [u64; SERVER_WORDS],
}

impl HealthMask {
    pub const fn all_in() -> HealthMask {
        HealthMask {
            ttl: 0,
            _pad: 0,
            out: [0; SERVER_WORDS],
            known: [0; SERVER_WORDS],
            down: [0; SERVER_WORDS],
        }
    }

    #[inline(always)]
    fn at(server: u16) -> (usize, u64) {
        (
            (server as usize >> 6) & (SERVER_WORDS - 1),
            1u64 << (server & 63),
        )
    }

    #[inline(always)]
    pub fn is_out(&self, server: u16) -> bool {
        let (w, bit) = Self::at(server);
        self.out[w] & bit != 0
    }

    /// The checks' verdict is down: its pinned VIP flows move to another server (a server
    /// held out for load or not yet checked keeps them).
    #[inline(always)]
    pub fn is_down(&self, server: u16) -> bool {
        let (w, bit) = Self::at(server);
        self.down[w] & bit != 0
    }

    /// The checks' verdict: up (`Some(true)`), down, or none yet.
    pub fn verdict(&self, server: u16) -> Option<bool> {
        let (w, bit) = Self::at(server);
        (self.known[w] & bit != 0).then_some(self.down[w] & bit == 0)
    }

    pub fn set(&mut self, server: u16, out: bool, verdict: Option<bool>) {
        let (w, bit) = Self::at(server);
        let put = |word: &mut u64, on: bool| *word = if on { *word | bit } else { *word & !bit };
        put(&mut self.out[w], out);
        put(&mut self.known[w], verdict.is_some());
        put(&mut self.down[w], verdict == Some(false));
    }
}

/// Room for a CNAME record as answered: the 12 fixed bytes and a name of up to 255, in
/// whole words.
pub const CNAME_RECORD_BUF: usize = 272;

/// Value of `DIR_FALLBACK`, indexed by service id: what the kernel answers when none of a
/// decision's servers can be (the CDS service router's order): a CNAME to an alternate
/// domain, else the origin's address, else nothing (the query is passed).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fallback {
    /// The kinds the service has. A byte and explicit padding where a `u32` of the same
    /// bits was: entries pinned by either layout read the same (BPF is little-endian here).
    pub kinds: Kinds,
    pub _pad: [u8; 3],
    /// Bytes of `cname`: the whole record (pointer to the question, type, class, TTL,
    /// length, the alternate's wire name).
    pub cname_len: u32,
    /// The record's checksum sum as 16-bit big-endian words from an even offset.
    pub cname_sum: u64,
    /// The TTL of origin answers.
    pub ttl: u32,
    pub origin4: [u8; 4],
    pub origin6: [u8; 16],
    pub cname: [u8; CNAME_RECORD_BUF],
}

impl Fallback {
    pub const fn none() -> Fallback {
        Fallback {
            kinds: Kinds::NONE,
            _pad: [0; 3],
            cname_len: 0,
            cname_sum: 0,
            ttl: 0,
            origin4: [0; 4],
            origin6: [0; 16],
            cname: [0; CNAME_RECORD_BUF],
        }
    }

    /// What the kernel answers with for a service: a CNAME record to `alternate` (a wire
    /// name) with `ttl`, and the `origin` addresses (one per family). None when the
    /// alternate does not fit a record.
    pub fn build(
        ttl: u32,
        alternate: Option<&[u8]>,
        origin: &[core::net::IpAddr],
    ) -> Option<Fallback> {
        let mut f = Fallback::none();
        f.ttl = ttl;
        if let Some(target) = alternate {
            let (len, sum) = crate::dns::cname_record(ttl, target, &mut f.cname)?;
            f.kinds |= Kinds::ALTERNATE;
            f.cname_len = len as u32;
            f.cname_sum = sum;
        }
        for a in origin {
            match a {
                core::net::IpAddr::V4(v4) => {
                    f.kinds |= Kinds::ORIGIN4;
                    f.origin4 = v4.octets();
                }
                core::net::IpAddr::V6(v6) => {
                    f.kinds |= Kinds::ORIGIN6;
                    f.origin6 = v6.octets();
                }
            }
        }
        Some(f)
    }
}

/// The ranked candidates for one service and client prefix. The kernel stores each distinct
/// one once, in `DIR_CHOICES` at an id, with `prefix_len` 0; the controller carries the
/// entry's ECS scope in `prefix_len`, and the decision tries hold it in [`DecisionRef`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Decision {
    /// The ECS scope of this entry's answers: a prefix length over which every address
    /// gets the same answer (the controller's minimal table sets it, see its `minimal`).
    pub prefix_len: u8,
    /// Candidates in use.
    pub count: u8,
    /// The first `primary` candidates are equally good and share answers by weight; the
    /// rest are the next best, in order, used when those are down or for more answers.
    pub primary: u8,
    pub _pad: u8,
    pub servers: [u16; MAX_CANDIDATES],
    pub weights: [u16; MAX_CANDIDATES],
}

/// Value of `DIR_LOCAL`, keyed by an address (`peers::local_key_v4` for IPv4): where it
/// came from, so a refresh of the host's addresses leaves configured ones alone.
pub const LOCAL_HOST: u32 = 1;
pub const LOCAL_CONFIGURED: u32 = 2;

/// `LocalSlot::flags`, `NameSlot::flags`: the slot holds an address (a name).
pub const SLOT_USED: u32 = 1;
/// `LocalSlot::flags`, `NameSlot::flags`: more addresses (names) than the one held fall in
/// this slot; they are only in `DIR_LOCAL` (`DIR_NAMES`), which the program then asks.
pub const SLOT_OVERFLOW: u32 = 2;

/// Value of `DIR_NAME_SLOTS`: which service owns the name with this hash, by `name::slot`,
/// the front of `DIR_NAMES` as `LocalSlot` is of `DIR_LOCAL` (two copies, `DIR_FRONT`
/// naming the one read). The program then compares the question with the service's name
/// in `DIR_SERVICE_NAMES`, whichever way it found the service.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NameSlot {
    pub hash: u64,
    pub service: u32,
    /// `SLOT_*` bits.
    pub flags: u32,
}

/// Value of `DIR_LOCAL_SLOTS`: the edge's addresses again, each in the slot its
/// `peers::local_slot` names, so the program checks a destination with two array reads
/// it inlines instead of a hash lookup (a chain of kernel calls, which cost most where
/// returns go through a mitigation thunk). `DIR_LOCAL` stays the whole truth. Two copies
/// (copy c's slot i at `c * LOCAL_SLOTS + i`), `DIR_FRONT` naming the one read: the
/// controller rewrites the other and flips, so no query reads a half-written slot.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LocalSlot {
    /// The `DIR_LOCAL` key as two native-endian words.
    pub key: [u64; 2],
    /// `SLOT_*` bits.
    pub flags: u32,
    pub _pad: u32,
}

/// Value of `DIR_FRONT[0]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrontSwitch {
    /// The copy of `DIR_LOCAL_SLOTS` and `DIR_NAME_SLOTS` the program reads (bit 0).
    pub active: u32,
    pub _pad: u32,
    /// CLOCK_MONOTONIC of the last flip: the other copy is rewritten only once no query can
    /// still be reading it (programs run for microseconds; the controller waits 20 ms).
    pub published_ns: u64,
}

/// Value of `DIR_IFACES`, indexed by ifindex: the interface's MAC address, which a query's
/// destination MAC must equal, when `attached` is 1.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Iface {
    pub mac: [u8; 6],
    pub attached: u8,
    pub _pad: u8,
}

/// Value of the decision tries: which stored decision a client prefix gets, and the ECS
/// scope of its answers. Eight bytes keep a trie node of either family in the 64-byte
/// allocation class (a 36-byte value put every node in the 96-byte one).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DecisionRef {
    /// The decision's index in `DIR_CHOICES` (either half).
    pub id: u32,
    pub scope: u8,
    pub _pad: [u8; 3],
}

impl DecisionRef {
    /// As one word, the way `DIR_DEC16` holds it: read and written whole, so a reader
    /// never sees one reference's id with another's scope.
    pub const fn to_word(self) -> u64 {
        self.id as u64 | (self.scope as u64) << 32
    }

    pub const fn from_word(w: u64) -> DecisionRef {
        DecisionRef {
            id: w as u32,
            scope: (w >> 32) as u8,
            _pad: [0; 3],
        }
    }
}

/// `DIR_DEC16`, the IPv4 front of the decision trie: for each of the first `DEC16_LANES`
/// service ids, one word per /16 (`DecisionRef::to_word`), set where one entry of length
/// 16 or less covers the whole /16 and no longer entry lies inside it, so that every
/// address in it, and every ECS source of 16 bits or more, gets that entry from the trie.
/// There the program reads one array slot instead of walking the trie (hundreds of ns
/// when the walk misses the CPU cache). 0 (the reserved decision id) means "ask the
/// trie". The controller clears a /16's slot before it writes any trie entry that
/// touches it and sets it again only after the writes, so a set slot always holds what
/// the trie holds. Memory-mapped by the controller: 4 MB, written without syscalls.
pub const DEC16_LANES: u32 = 8;
pub const DEC16_SLOTS: u32 = 1 << 16;

/// `DIR_DEC16`'s index for `service`'s /16 `net16` (the address's first two bytes, in
/// network order), if the service has a lane.
#[inline(always)]
pub const fn dec16_index(service: u32, net16: u32) -> Option<u32> {
    if service == 0 || service > DEC16_LANES {
        return None;
    }
    Some((service - 1) * DEC16_SLOTS + (net16 & (DEC16_SLOTS - 1)))
}

/// The /16s (as `dec16_index` takes them) an IPv4 prefix touches: those it covers whole,
/// or the one it lies in.
pub const fn dec16_range(addr: u32, len: u8) -> core::ops::Range<u32> {
    let first = addr >> 16;
    let count = if len >= 16 { 1 } else { 1 << (16 - len) };
    // A short prefix's host bits may be set: its range starts at its network's /16.
    let first = first & !(count - 1);
    first..first + count
}

/// The per-CPU decision cache (`DIR_DEC_CACHE`, not pinned): blocks of slots, each the
/// result of one trie read, keyed by exactly what the read was given (service, family,
/// client prefix and its length) and the tries' generation. The same input to the same
/// table gives the same entry, so a hit is the trie's answer without its walk, which at
/// full scale is most of an answer's cost.
pub const DEC_CACHE_SLOTS: usize = 256;
pub const DEC_CACHE_BLOCKS: u32 = 16;

/// One cached trie read.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecCacheSlot {
    /// service id << 32 | client prefix length << 8 | 1 for IPv6; 0 is never a key
    /// (service ids start at 1).
    pub k0: u64,
    /// The client prefix as the trie read it (zero past its length; IPv4 in the first four
    /// bytes), in two native words.
    pub lo: u64,
    pub hi: u64,
    /// `DIR_DEC_GEN` as read before the trie: every later write to the tries bumps it.
    pub gen: u64,
    pub found: DecisionRef,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct DecCacheBlock {
    pub slots: [DecCacheSlot; DEC_CACHE_SLOTS],
}

/// Data of an IPv4 decision key: the service id (big endian, always fully matched) then
/// the client address. The LPM prefix length is 32 + the client prefix length.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecisionKeyV4 {
    pub service: [u8; 4],
    pub addr: [u8; 4],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecisionKeyV6 {
    pub service: [u8; 4],
    pub addr: [u8; 16],
}

/// Bits of the LPM prefix taken by the service id.
pub const SERVICE_BITS: u32 = 32;

/// Value of `DIR_CONFIG[0]`: the controller's bookkeeping of `DIR_CHOICES` (the program
/// never reads it; an entry's id names its decision's index directly).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableSwitch {
    /// The half of `DIR_CHOICES` (0 = A, 1 = B) new decision ids come from. When it runs
    /// out, every entry is rewritten onto the other half and this flips, so at rest all
    /// entries refer to this half.
    pub active_table: u32,
    pub _pad: u32,
    /// Per half, the lowest id never handed out since the half was last taken into use:
    /// ids below it hold decisions (some perhaps no longer referenced), ids from it on are
    /// referenced by no entry.
    pub next_choice: [u32; 2],
}

/// Per-CPU working memory of the XDP program (`DIR_SCRATCH[0]`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Scratch {
    /// The question name, lower-cased.
    pub name: [u8; NAME_BUF],
    pub name_len: u32,
    /// The copy of the front slots (`FrontSwitch::active`) this packet reads: `DIR_FRONT`
    /// is read once per packet, and the address and the name come from the same copy.
    pub front: u32,
    pub name_hash: u64,
    /// Checksum sum of the question name as it came (original case), from DNS offset 12.
    pub name_sum: u64,
    /// The chosen servers' addresses (IPv4 in the first 4 bytes): too big for the stack.
    pub addrs: [[u8; 16]; MAX_CANDIDATES],
    /// Values written and read back so the verifier stops tracking them as constants:
    /// `handover::Slot` says which word holds what.
    pub hidden: [u64; HIDDEN_WORDS],
    /// The address the decision is for (the ECS subnet, else the packet's source), and the
    /// ECS address as it came. Kept here, not on the stack, so that the verifier does not
    /// carry each parse path's different stack contents through the rest of the program.
    pub client: [u8; 16],
    pub ecs_addr: [u8; 16],
    /// The packet's source address (IPv4 in the first 4 bytes): whom rate limiting counts,
    /// whatever ECS says.
    pub source: [u8; 16],
    /// The chosen servers' ids, in the order of `addrs`.
    pub ids: [u16; MAX_CANDIDATES],
    /// This CPU's random generator state (`select::next_random`), from 0.
    pub rng: u64,
    /// This CPU's demand sampling countdown (`demand::countdown`), from 0.
    pub demand_left: u64,
}

#[cfg(feature = "user")]
mod pod {
    use super::*;
    unsafe impl aya::Pod for NameEntry {}
    unsafe impl aya::Pod for ServiceRecord {}
    unsafe impl aya::Pod for ServerRecord {}
    unsafe impl aya::Pod for Decision {}
    unsafe impl aya::Pod for DecisionRef {}
    unsafe impl aya::Pod for Iface {}
    unsafe impl aya::Pod for LocalSlot {}
    unsafe impl aya::Pod for NameSlot {}
    unsafe impl aya::Pod for FrontSwitch {}
    unsafe impl aya::Pod for DecisionKeyV4 {}
    unsafe impl aya::Pod for DecisionKeyV6 {}
    unsafe impl aya::Pod for TableSwitch {}
    unsafe impl aya::Pod for HealthMask {}
    unsafe impl aya::Pod for Fallback {}
    unsafe impl aya::Pod for crate::rrl::Limit {}
    unsafe impl aya::Pod for crate::rrl::Bucket {}
    unsafe impl aya::Pod for crate::rrl::Key {}
    unsafe impl aya::Pod for crate::rrl::Slot {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{align_of, size_of};

    #[test]
    fn health_bits_are_per_server() {
        let mut m = HealthMask::all_in();
        for id in [1u16, 63, 64, 8191] {
            assert!(!m.is_out(id) && m.verdict(id).is_none());
            m.set(id, true, None);
            assert!(m.is_out(id) && m.verdict(id).is_none());
            m.set(id, false, Some(true));
            assert!(!m.is_out(id) && m.verdict(id) == Some(true));
            m.set(id, true, Some(false));
            assert!(m.is_out(id) && m.verdict(id) == Some(false));
        }
        assert!(!m.is_out(2) && !m.is_out(65) && !m.is_out(8190));
        assert!(m.verdict(2).is_none());
    }

    #[test]
    fn a_reference_survives_its_word_and_id_0_means_unset() {
        for r in [(1, 0), (0x0002_0001, 24), (u32::MAX, 255)] {
            let d = DecisionRef {
                id: r.0,
                scope: r.1,
                _pad: [0; 3],
            };
            assert_eq!(DecisionRef::from_word(d.to_word()), d);
            assert_ne!(d.to_word(), 0);
        }
        assert_eq!(DecisionRef::from_word(0).id, 0);
    }

    #[test]
    fn each_lane_has_its_own_slots_and_only_the_first_services_have_one() {
        assert_eq!(dec16_index(0, 5), None);
        assert_eq!(dec16_index(1, 0), Some(0));
        assert_eq!(dec16_index(1, 0xffff), Some(DEC16_SLOTS - 1));
        assert_eq!(dec16_index(2, 0), Some(DEC16_SLOTS));
        assert_eq!(
            dec16_index(DEC16_LANES, 0xffff),
            Some(DEC16_LANES * DEC16_SLOTS - 1)
        );
        assert_eq!(dec16_index(DEC16_LANES + 1, 0), None);
    }

    #[test]
    fn a_prefix_touches_the_16s_it_covers_or_the_one_it_is_in() {
        assert_eq!(dec16_range(0, 0), 0..DEC16_SLOTS);
        assert_eq!(dec16_range(0xcb00_7100, 24), 0xcb00..0xcb01);
        assert_eq!(dec16_range(0xc633_0000, 16), 0xc633..0xc634);
        assert_eq!(dec16_range(0x0a00_0000, 8), 0x0a00..0x0b00);
        assert_eq!(dec16_range(0x0a12_3456, 8), 0x0a00..0x0b00);
    }

    // The kernel and userspace agree on these by construction; the sizes pin the padding.
    #[test]
    fn layouts_have_no_hidden_padding() {
        assert_eq!(size_of::<NameEntry>(), 8 + NAME_BUF);
        assert_eq!(size_of::<ServiceRecord>(), 8);
        assert_eq!(size_of::<ServerRecord>(), 4 + 4 + 16 + SERVER_NAME_LEN + 8);
        assert_eq!(size_of::<Decision>(), 4 + 2 * 2 * MAX_CANDIDATES);
        assert_eq!(size_of::<DecisionKeyV4>(), 8);
        assert_eq!(size_of::<DecisionKeyV6>(), 20);
        assert_eq!(size_of::<DecisionRef>(), 8);
        assert_eq!(size_of::<Iface>(), 8);
        assert_eq!(size_of::<DecCacheSlot>(), 40);
        assert_eq!(size_of::<LocalSlot>(), 24);
        assert_eq!(size_of::<NameSlot>(), 16);
        assert_eq!(size_of::<FrontSwitch>(), 16);
        assert_eq!(size_of::<TableSwitch>(), 16);
        assert_eq!(size_of::<HealthMask>(), 8 + 3 * MAX_SERVERS as usize / 8);
        assert_eq!(size_of::<Fallback>(), 40 + CNAME_RECORD_BUF);
        // Where the kinds' byte and the `u32` flags before it start the same.
        assert_eq!(core::mem::offset_of!(Fallback, cname_len), 4);
        assert!(SERVER_WORDS.is_power_of_two());
        assert_eq!(
            size_of::<Scratch>(),
            NAME_BUF + 24 + 16 * MAX_CANDIDATES + 8 * HIDDEN_WORDS + 48 + 2 * MAX_CANDIDATES + 16
        );
        assert_eq!(align_of::<Scratch>(), 8);
    }
}
