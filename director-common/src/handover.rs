//! What the XDP program's stages hand each other (parse → policy → rewrite), and how it is
//! packed into the words of `Scratch::hidden`.
//!
//! The program stores each hand-over and reads it back (see its `opaque` module) so that the
//! verifier checks every stage once, from one state, whatever paths led to it. What comes
//! back is unknown to the verifier, so `unpack` bounds every field with a mask it can see:
//! an offset masked to 7 bits is at most 127 on every path, which is what lets it accept
//! the packet accesses made with it. `pack` takes fields in their valid ranges (documented
//! on each) and does not mask them again: that would cost instructions on every packet.

use crate::dns;
use crate::fallback::Kinds;
use crate::headers::{eth, ipv6, udp, vlan};
use crate::limits::{MAX_CANDIDATES, MAX_SERVERS, MAX_WIRE_LEN};
use crate::maps::MAX_CHOICES;
// The program and tests name it from here, beside the slots it sizes.
pub use crate::limits::HIDDEN_WORDS;

/// The words of `Scratch::hidden`, each with one meaning. A hand-over takes `WORDS`
/// consecutive words from its slot.
#[repr(usize)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// Policy: the candidates that are up with an address of the asked family (a bit each).
    Usable = 0,
    /// Policy: the sum of the usable primary candidates' weights.
    WeightTotal = 1,
    /// Policy: the candidate the weighted pick starts at.
    Start = 2,
    /// Policy: how many addresses have been taken into `Scratch::addrs` so far.
    Taken = 3,
    /// Rewrite: how many bytes from the packet's start to move when it grew at the front.
    Keep = 4,
    /// Rewrite: how many records the answer holds.
    Records = 5,
    /// Rewrite: whether the records are AAAA.
    Aaaa = 6,
    /// Parse: the `Layout`, once the headers before the DNS message are known.
    Layout = 7,
    /// Parse → policy → rewrite: the `Query`.
    Query = 8,
    /// Policy → rewrite: the `Plan`.
    Plan = 10,
}

impl Slot {
    pub const ALL: [Slot; 10] = [
        Slot::Usable,
        Slot::WeightTotal,
        Slot::Start,
        Slot::Taken,
        Slot::Keep,
        Slot::Records,
        Slot::Aaaa,
        Slot::Layout,
        Slot::Query,
        Slot::Plan,
    ];

    /// How many words the slot takes.
    pub const fn words(self) -> usize {
        match self {
            Slot::Layout => Layout::WORDS,
            Slot::Query => Query::WORDS,
            Slot::Plan => Plan::WORDS,
            _ => 1,
        }
    }

    #[inline(always)]
    pub const fn index(self) -> usize {
        self as usize
    }
}

/// Where a field sits in a word: `bits` wide, starting at bit `shift`.
#[derive(Clone, Copy)]
struct Field {
    shift: u32,
    bits: u32,
}

impl Field {
    const fn at(shift: u32, bits: u32) -> Field {
        assert!(bits > 0 && shift + bits <= 64);
        Field { shift, bits }
    }

    /// The field that starts where this one ends.
    const fn next(self, bits: u32) -> Field {
        Field::at(self.shift + self.bits, bits)
    }

    const fn mask(self) -> u64 {
        u64::MAX >> (64 - self.bits)
    }

    /// The largest value the field holds.
    const fn max(self) -> u64 {
        self.mask()
    }

    /// `v` must fit (`v <= max()`).
    #[inline(always)]
    const fn put(self, v: u64) -> u64 {
        v << self.shift
    }

    #[inline(always)]
    const fn flag(self, b: bool) -> u64 {
        self.put(b as u64)
    }

    #[inline(always)]
    const fn get(self, w: u64) -> u64 {
        (w >> self.shift) & self.mask()
    }

    #[inline(always)]
    const fn is_set(self, w: u64) -> bool {
        w & (self.mask() << self.shift) != 0
    }
}

/// Widths of the offsets carried, from the largest each can be: the IP header starts after
/// Ethernet and at most one VLAN tag (18), the DNS message after IPv6 and UDP (66), the
/// question ends after the 12-byte header, a 255-byte name and type and class (337), and
/// frames longer than 16 KiB are left to the host.
const L3_BITS: u32 = 5;
const DNS_BITS: u32 = 7;
const QUESTION_END_BITS: u32 = 9;
const MSG_END_BITS: u32 = 14;
/// A wire name is at most 255 bytes.
const NAME_LEN_BITS: u32 = 8;

// The largest values the program produces fit their fields.
const _: () = {
    let l3 = eth::LEN + vlan::LEN;
    let dns = l3 + ipv6::LEN + udp::LEN;
    assert!(l3 <= Layout::MAX_L3);
    assert!(dns <= Layout::MAX_DNS);
    assert!(MAX_WIRE_LEN <= query_words::NAME_LEN.max() as usize);
    let question_end = dns + dns::HEADER_LEN + MAX_WIRE_LEN + dns::QUESTION_FIXED_LEN;
    assert!(question_end <= Query::MAX_QUESTION_END);
    assert!(MAX_CANDIDATES <= Plan::MAX_N);
    assert!(MAX_SERVERS as u64 - 1 <= plan_words::FIRST.max());
    assert!(Kinds::ALL.bits() as u64 <= plan_words::FALLBACK.max());
    assert!(2 * MAX_CHOICES as u64 - 1 <= plan_words::CHOICE.max());
    assert!(plan_words::TRUNCATE.shift + plan_words::TRUNCATE.bits <= plan_words::CHOICE.shift);
};

/// The headers in front of the DNS message, as parse found them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// IPv6 (else IPv4).
    pub ip6: bool,
    /// Offset of the IP header: 0..=31.
    pub l3: usize,
    /// Offset of the DNS message: 0..=127.
    pub dns: usize,
    /// Offset just past the DNS message (the UDP payload's end): below 16 KiB.
    pub msg_end: usize,
}

mod layout_word {
    use super::*;
    pub const L3: Field = Field::at(0, L3_BITS);
    pub const DNS: Field = L3.next(DNS_BITS);
    pub const MSG_END: Field = DNS.next(MSG_END_BITS);
    pub const IP6: Field = MSG_END.next(1);
}

impl Layout {
    pub const WORDS: usize = 1;
    pub const MAX_L3: usize = layout_word::L3.max() as usize;
    pub const MAX_DNS: usize = layout_word::DNS.max() as usize;
    pub const MAX_MSG_END: usize = layout_word::MSG_END.max() as usize;

    #[inline(always)]
    pub fn pack(&self) -> [u64; Self::WORDS] {
        use layout_word::*;
        [L3.put(self.l3 as u64)
            | DNS.put(self.dns as u64)
            | MSG_END.put(self.msg_end as u64)
            | IP6.flag(self.ip6)]
    }

    #[inline(always)]
    pub fn unpack(w: [u64; Self::WORDS]) -> Layout {
        use layout_word::*;
        let [a] = w;
        Layout {
            ip6: IP6.is_set(a),
            l3: L3.get(a) as usize,
            dns: DNS.get(a) as usize,
            msg_end: MSG_END.get(a) as usize,
        }
    }
}

/// A query director may answer, as parse read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Query {
    /// IPv6 packet (else IPv4).
    pub ip6: bool,
    /// Offsets of the IP header (0..=31) and the DNS message (0..=127), as in `Layout`.
    pub l3: usize,
    pub dns: usize,
    /// Offset just past the question (its type and class): where the answer's records go.
    /// 0..=511.
    pub question_end: usize,
    /// Wire length of the question name: 0..=255.
    pub name_len: usize,
    pub id: u16,
    pub flags: u16,
    /// AAAA (else A).
    pub aaaa: bool,
    /// Largest answer the client accepts.
    pub udp_size: u16,
    pub edns: bool,
    /// The query's DO bit, copied to the answer (RFC 3225 §3).
    pub dnssec_ok: bool,
    pub has_ecs: bool,
    pub ecs_family: u16,
    pub ecs_source: u8,
    /// Family and prefix length of the address the decision is for (`Scratch::client`).
    pub client_v6: bool,
    pub client_bits: u8,
}

mod query_words {
    use super::*;
    // Word 0: offsets and the fields of the DNS header.
    pub const L3: Field = Field::at(0, L3_BITS);
    pub const DNS: Field = L3.next(DNS_BITS);
    pub const NAME_LEN: Field = DNS.next(NAME_LEN_BITS);
    pub const QUESTION_END: Field = NAME_LEN.next(QUESTION_END_BITS);
    pub const UDP_SIZE: Field = QUESTION_END.next(16);
    pub const ID: Field = UDP_SIZE.next(16);
    // Word 1: EDNS, ECS and what the answer is for.
    pub const FLAGS: Field = Field::at(0, 16);
    pub const ECS_FAMILY: Field = FLAGS.next(16);
    pub const ECS_SOURCE: Field = ECS_FAMILY.next(8);
    pub const CLIENT_BITS: Field = ECS_SOURCE.next(8);
    pub const IP6: Field = CLIENT_BITS.next(1);
    pub const AAAA: Field = IP6.next(1);
    pub const EDNS: Field = AAAA.next(1);
    pub const HAS_ECS: Field = EDNS.next(1);
    pub const CLIENT_V6: Field = HAS_ECS.next(1);
    pub const DNSSEC_OK: Field = CLIENT_V6.next(1);
}

impl Query {
    pub const WORDS: usize = 2;
    pub const MAX_QUESTION_END: usize = query_words::QUESTION_END.max() as usize;

    #[inline(always)]
    pub fn pack(&self) -> [u64; Self::WORDS] {
        use query_words::*;
        [
            L3.put(self.l3 as u64)
                | DNS.put(self.dns as u64)
                | NAME_LEN.put(self.name_len as u64)
                | QUESTION_END.put(self.question_end as u64)
                | UDP_SIZE.put(self.udp_size as u64)
                | ID.put(self.id as u64),
            FLAGS.put(self.flags as u64)
                | ECS_FAMILY.put(self.ecs_family as u64)
                | ECS_SOURCE.put(self.ecs_source as u64)
                | CLIENT_BITS.put(self.client_bits as u64)
                | IP6.flag(self.ip6)
                | AAAA.flag(self.aaaa)
                | EDNS.flag(self.edns)
                | HAS_ECS.flag(self.has_ecs)
                | CLIENT_V6.flag(self.client_v6)
                | DNSSEC_OK.flag(self.dnssec_ok),
        ]
    }

    #[inline(always)]
    pub fn unpack(w: [u64; Self::WORDS]) -> Query {
        use query_words::*;
        let [a, b] = w;
        Query {
            ip6: IP6.is_set(b),
            l3: L3.get(a) as usize,
            dns: DNS.get(a) as usize,
            question_end: QUESTION_END.get(a) as usize,
            name_len: NAME_LEN.get(a) as usize,
            id: ID.get(a) as u16,
            flags: FLAGS.get(b) as u16,
            aaaa: AAAA.is_set(b),
            udp_size: UDP_SIZE.get(a) as u16,
            edns: EDNS.is_set(b),
            dnssec_ok: DNSSEC_OK.is_set(b),
            has_ecs: HAS_ECS.is_set(b),
            ecs_family: ECS_FAMILY.get(b) as u16,
            ecs_source: ECS_SOURCE.get(b) as u8,
            client_v6: CLIENT_V6.is_set(b),
            client_bits: CLIENT_BITS.get(b) as u8,
        }
    }
}

/// Who answers, as policy decided it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub service: u32,
    pub ttl: u32,
    /// ECS scope: the prefix length of the decision entry that matched.
    pub scope: u8,
    /// How many addresses were put in `Scratch::addrs`: 0..=15 (at most `MAX_CANDIDATES`).
    pub n: usize,
    /// The server id of the first address (counted as the one the client was sent to):
    /// one found in `DIR_SERVERS`, so below `MAX_SERVERS`.
    pub first: u16,
    /// The one kind that answered instead of the decision's servers, or none:
    /// `ALTERNATE` (one CNAME record from `DIR_FALLBACK`) or the origin of the asked
    /// family (its address in `Scratch::addrs[0]`).
    pub fallback: Kinds,
    /// Over the rate limit and slipped (`rrl`): the answer is truncated (TC=1) with no
    /// records; `n` is 0 and `fallback` none.
    pub truncate: bool,
    /// The choice index (`DecisionRef::id`) that decided, fallbacks included: where the
    /// answer is counted in `DIR_DEMAND`. Below `2 * MAX_CHOICES` (2^18).
    pub choice: u32,
}

mod plan_words {
    use super::*;
    pub const SERVICE: Field = Field::at(0, 32);
    pub const TTL: Field = SERVICE.next(32);
    pub const SCOPE: Field = Field::at(0, 8);
    pub const N: Field = SCOPE.next(4);
    // 15 bits, not 16, leave the last field below bit 31: the program's masks of the word
    // then fit an instruction's 32-bit immediate (bit 31 took two more on every answer).
    pub const FIRST: Field = N.next(15);
    pub const FALLBACK: Field = FIRST.next(3);
    pub const TRUNCATE: Field = FALLBACK.next(1);
    // From bit 32: read with a shift and a mask that fits an immediate.
    pub const CHOICE: Field = Field::at(32, 18);
}

impl Plan {
    pub const WORDS: usize = 2;
    pub const MAX_N: usize = plan_words::N.max() as usize;

    #[inline(always)]
    pub fn pack(&self) -> [u64; Self::WORDS] {
        use plan_words::*;
        [
            SERVICE.put(self.service as u64) | TTL.put(self.ttl as u64),
            SCOPE.put(self.scope as u64)
                | N.put(self.n as u64)
                | FIRST.put(self.first as u64)
                | FALLBACK.put(self.fallback.bits() as u64)
                | TRUNCATE.flag(self.truncate)
                | CHOICE.put(self.choice as u64),
        ]
    }

    #[inline(always)]
    pub fn unpack(w: [u64; Self::WORDS]) -> Plan {
        use plan_words::*;
        let [a, b] = w;
        Plan {
            service: SERVICE.get(a) as u32,
            ttl: TTL.get(a) as u32,
            scope: SCOPE.get(b) as u8,
            n: N.get(b) as usize,
            first: FIRST.get(b) as u16,
            fallback: Kinds::from_bits(FALLBACK.get(b) as u8),
            truncate: TRUNCATE.is_set(b),
            choice: CHOICE.get(b) as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn slots_do_not_overlap_and_fit() {
        let mut used = [false; HIDDEN_WORDS];
        for slot in Slot::ALL {
            assert!(
                slot.index() + slot.words() <= HIDDEN_WORDS,
                "{slot:?} past the end"
            );
            for w in used.iter_mut().skip(slot.index()).take(slot.words()) {
                assert!(!*w, "{slot:?} overlaps another slot");
                *w = true;
            }
        }
    }

    prop_compose! {
        fn layouts()(ip6: bool, l3 in 0..=Layout::MAX_L3, dns in 0..=Layout::MAX_DNS,
                     msg_end in 0..=Layout::MAX_MSG_END) -> Layout {
            Layout { ip6, l3, dns, msg_end }
        }
    }

    prop_compose! {
        fn queries()(
            ip6: bool, l3 in 0..=Layout::MAX_L3, dns in 0..=Layout::MAX_DNS,
            question_end in 0..=Query::MAX_QUESTION_END, name_len in 0..=255usize,
            id: u16, flags: u16, aaaa: bool, udp_size: u16, edns: bool, dnssec_ok: bool,
            has_ecs: bool, ecs_family: u16, ecs_source: u8, client_v6: bool, client_bits: u8,
        ) -> Query {
            Query {
                ip6, l3, dns, question_end, name_len, id, flags, aaaa, udp_size, edns,
                dnssec_ok, has_ecs, ecs_family, ecs_source, client_v6, client_bits,
            }
        }
    }

    prop_compose! {
        fn plans()(
            service: u32, ttl: u32, scope: u8, n in 0..=Plan::MAX_N,
            first in 0..MAX_SERVERS as u16,
            fallback in 0..=Kinds::ALL.bits(), truncate: bool,
            choice in 0..2 * MAX_CHOICES,
        ) -> Plan {
            let fallback = Kinds::from_bits(fallback);
            Plan { service, ttl, scope, n, first, fallback, truncate, choice }
        }
    }

    proptest! {
        #[test]
        fn layout_round_trips(l in layouts()) {
            prop_assert_eq!(Layout::unpack(l.pack()), l);
        }

        #[test]
        fn query_round_trips(q in queries()) {
            prop_assert_eq!(Query::unpack(q.pack()), q);
        }

        #[test]
        fn plan_round_trips(p in plans()) {
            prop_assert_eq!(Plan::unpack(p.pack()), p);
        }

        /// Whatever the words hold, what comes out is within the documented bounds: the
        /// verifier relies on these masks, not on what was written.
        #[test]
        fn unpack_bounds_offsets(a: u64, b: u64) {
            let l = Layout::unpack([a]);
            prop_assert!(l.l3 <= Layout::MAX_L3 && l.dns <= Layout::MAX_DNS);
            prop_assert!(l.msg_end <= Layout::MAX_MSG_END);
            let q = Query::unpack([a, b]);
            prop_assert!(q.l3 <= Layout::MAX_L3 && q.dns <= Layout::MAX_DNS);
            prop_assert!(q.question_end <= Query::MAX_QUESTION_END && q.name_len <= 255);
            let p = Plan::unpack([a, b]);
            prop_assert!(p.n <= Plan::MAX_N && Kinds::ALL.contains(p.fallback));
            prop_assert!(p.choice < 2 * MAX_CHOICES);
        }
    }
}
