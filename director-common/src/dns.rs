//! The DNS message rules director answers by: what a query must look like to be answered,
//! and the exact layout (and checksum contribution) of what the answer appends.

use crate::checksum::{halves, le_to_network, shift_odd, sum16};
use crate::counters::Reason;

pub const PORT: u16 = 53;
pub const HEADER_LEN: usize = 12;
pub const TYPE_A: u16 = 1;
pub const TYPE_AAAA: u16 = 28;
pub const TYPE_OPT: u16 = 41;
pub const CLASS_IN: u16 = 1;
pub const OPTION_ECS: u16 = 8;
/// The UDP payload size advertised in answers (the DNS flag day 2020 value).
pub const EDNS_UDP_SIZE: u16 = 1232;
/// Without EDNS a UDP answer may be at most 512 bytes (RFC 1035 §4.2.1).
pub const CLASSIC_UDP_SIZE: u16 = 512;

/// Offsets of the DNS header's fields.
pub mod header {
    pub const ID: usize = 0;
    pub const FLAGS: usize = 2;
    pub const QDCOUNT: usize = 4;
    pub const ANCOUNT: usize = 6;
    pub const NSCOUNT: usize = 8;
    pub const ARCOUNT: usize = 10;
}

/// TYPE and CLASS after the question name.
pub const QUESTION_FIXED_LEN: usize = 4;
pub mod question {
    /// From the end of the name.
    pub const TYPE: usize = 0;
    pub const CLASS: usize = 2;
}

/// Offsets in an OPT record, from its one-byte (root) owner name.
pub mod opt {
    pub const OWNER: usize = 0;
    pub const TYPE: usize = 1;
    /// The requester's UDP payload size.
    pub const CLASS: usize = 3;
    /// Extended RCODE, version, DO and Z, as two 16-bit halves.
    pub const TTL: usize = 5;
    pub const RDLEN: usize = 9;
}

/// An EDNS option's header (RFC 6891 §6.1.2).
pub mod option {
    pub const CODE: usize = 0;
    pub const LEN: usize = 2;
    pub const HEADER_LEN: usize = 4;
}

/// The ECS option's body (RFC 7871 §6).
pub mod ecs {
    pub const FAMILY: usize = 0;
    pub const SOURCE: usize = 2;
    pub const SCOPE: usize = 3;
    pub const ADDR: usize = 4;
}

/// Offsets in an answer record whose name is a 2-byte pointer.
pub mod record {
    pub const NAME: usize = 0;
    pub const TYPE: usize = 2;
    pub const CLASS: usize = 4;
    pub const TTL: usize = 6;
    pub const RDLEN: usize = 10;
    pub const RDATA: usize = 12;
}

const QR: u16 = 0x8000;
const OPCODE: u16 = 0x7800;
const AA: u16 = 0x0400;
pub const TC: u16 = 0x0200;
const RD: u16 = 0x0100;
const Z: u16 = 0x0040;
const CD: u16 = 0x0010;
const RCODE: u16 = 0x000f;

/// A query director may answer: QR=0, OPCODE=QUERY, not truncated, Z and RCODE zero, one
/// question, no answers or authority, at most one additional record (which must be OPT).
#[inline(always)]
pub fn check_header(flags: u16, qd: u16, an: u16, ns: u16, ar: u16) -> Result<(), Reason> {
    if flags & (QR | OPCODE | TC | Z | RCODE) != 0 || qd != 1 || an != 0 || ns != 0 || ar > 1 {
        return Err(Reason::NotQuery);
    }
    Ok(())
}

/// Answer flags: QR and AA set, RD and CD copied (RFC 1035 §4.1.1, RFC 4035 §3.1.6),
/// RA, AD and RCODE zero.
#[inline(always)]
pub fn answer_flags(query_flags: u16) -> u16 {
    QR | AA | (query_flags & (RD | CD))
}

#[inline(always)]
pub fn check_question(qtype: u16, qclass: u16) -> Result<bool, Reason> {
    if qclass != CLASS_IN {
        return Err(Reason::QType);
    }
    match qtype {
        TYPE_A => Ok(false),
        TYPE_AAAA => Ok(true),
        _ => Err(Reason::QType),
    }
}

/// Fixed part of an OPT record after its (root, one zero byte) owner name.
pub const OPT_FIXED_LEN: usize = 11;

/// The DO bit in the OPT record's TTL field (RFC 3225).
pub const EDNS_DO: u32 = 0x8000;
/// EDNS options looked at before giving up on a query (the kernel loop's bound).
pub const MAX_OPTIONS: usize = 8;

/// Checks the OPT record's fixed fields; returns the client's UDP payload size.
/// An unknown EDNS version is passed to the host rather than answered BADVERS.
#[inline(always)]
pub fn check_opt(owner: u8, rtype: u16, class: u16, ttl: u32) -> Result<u16, Reason> {
    let version = (ttl >> 16) & 0xff;
    let ext_rcode = ttl >> 24;
    if owner != 0 || rtype != TYPE_OPT || version != 0 || ext_rcode != 0 {
        return Err(Reason::Edns);
    }
    Ok(if class < CLASSIC_UDP_SIZE {
        CLASSIC_UDP_SIZE
    } else {
        class
    })
}

pub const ECS_FAMILY_V4: u16 = 1;
pub const ECS_FAMILY_V6: u16 = 2;

/// An EDNS Client Subnet option from a query (RFC 7871 §6), address zero-padded. Aligned,
/// address first: the kernel reads and sums the address as two words, where a byte array
/// of unknown alignment is read a byte at a time.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Ecs {
    pub addr: [u8; 16],
    pub family: u16,
    pub source: u8,
}

impl Ecs {
    #[inline(always)]
    pub fn is_v6(&self) -> bool {
        self.family == ECS_FAMILY_V6
    }
    /// Address bytes on the wire for this source prefix length.
    #[inline(always)]
    pub fn addr_len(&self) -> usize {
        (self.source as usize).div_ceil(8)
    }
    /// The address as the two host-order words that hold its bytes.
    #[inline(always)]
    pub fn addr_words(&self) -> (u64, u64) {
        let w = self.addr.as_ptr() as *const u64;
        // SAFETY: `addr` is 16 bytes at the start of an 8-aligned struct.
        unsafe { (*w, *w.add(1)) }
    }
    /// The checksum sum of the address bytes (as `sum16`), from its words.
    #[inline(always)]
    pub fn addr_sum(&self) -> u64 {
        let (lo, hi) = self.addr_words();
        le_to_network(halves(lo) + halves(hi))
    }
}

/// Validates an ECS option's fixed fields against its length (RFC 7871 §6: SCOPE must be 0
/// in a query, ADDRESS exactly as long as SOURCE PREFIX-LENGTH needs). Returns the address
/// length. Anything else is FORMERR territory, which director leaves to the host.
#[inline(always)]
pub fn check_ecs(family: u16, source: u8, scope: u8, opt_len: u16) -> Result<usize, Reason> {
    let max = match family {
        ECS_FAMILY_V4 => 32,
        ECS_FAMILY_V6 => 128,
        _ => return Err(Reason::Edns),
    };
    let addr_len = (source as usize).div_ceil(8);
    if source > max || scope != 0 || opt_len as usize != 4 + addr_len {
        return Err(Reason::Edns);
    }
    Ok(addr_len)
}

/// The bits past SOURCE PREFIX-LENGTH in the last address byte must be zero (RFC 7871 §6).
#[inline(always)]
pub fn ecs_last_byte_ok(source: u8, last: u8) -> bool {
    let used = source % 8;
    used == 0 || last & (0xffu8 >> used) == 0
}

/// Length of one answer record: a pointer to the question name, then TYPE, CLASS, TTL,
/// RDLENGTH and the address.
#[inline(always)]
pub const fn record_len(v6: bool) -> usize {
    if v6 {
        record::RDATA + 16
    } else {
        record::RDATA + 4
    }
}

/// Pointer to offset 12, where the question name starts.
pub const NAME_POINTER: u16 = 0xc00c;

/// Checksum sum of one answer record (it starts at an even offset of the appended part).
/// `addr` holds the IPv4 address in its first 4 bytes, zero after, or the IPv6 address.
#[inline(always)]
pub fn record_sum(v6: bool, ttl: u32, addr: &[u8; 16]) -> u64 {
    let (rtype, rdlen) = if v6 {
        (TYPE_AAAA, 16u16)
    } else {
        (TYPE_A, 4u16)
    };
    NAME_POINTER as u64
        + rtype as u64
        + CLASS_IN as u64
        + (ttl >> 16) as u64
        + (ttl & 0xffff) as u64
        + rdlen as u64
        + sum16(addr)
}

pub const TYPE_CNAME: u16 = 5;

/// A CNAME answer record for the question (its name by pointer) to `target` (a wire
/// name), written into `out`; returns its length and its checksum sum from an even offset.
/// The kernel copies these bytes as they are.
pub fn cname_record(ttl: u32, target: &[u8], out: &mut [u8]) -> Option<(usize, u64)> {
    let len = 12 + target.len();
    if target.is_empty() || target.len() > 255 || out.len() < len {
        return None;
    }
    out[0..2].copy_from_slice(&NAME_POINTER.to_be_bytes());
    out[2..4].copy_from_slice(&TYPE_CNAME.to_be_bytes());
    out[4..6].copy_from_slice(&CLASS_IN.to_be_bytes());
    out[6..10].copy_from_slice(&ttl.to_be_bytes());
    out[10..12].copy_from_slice(&(target.len() as u16).to_be_bytes());
    out[12..len].copy_from_slice(target);
    Some((len, crate::checksum::sum_bytes(&out[..len])))
}

/// Bytes of the answer's OPT record (and ECS option, when the query had one).
#[inline(always)]
pub fn opt_len(ecs: Option<&Ecs>) -> usize {
    match ecs {
        Some(e) => OPT_FIXED_LEN + 8 + e.addr_len(),
        None => OPT_FIXED_LEN,
    }
}

/// Checksum sum of the answer's OPT record (plus ECS with `scope`) when it starts at an
/// even offset. Its owner is one zero byte, so everything after it sits one byte over.
/// `dnssec_ok` is the query's DO bit, copied as RFC 3225 §3 requires.
#[inline(always)]
pub fn opt_sum(ecs: Option<&Ecs>, scope: u8, dnssec_ok: bool) -> u64 {
    // After the owner byte: TYPE, CLASS (UDP size), TTL (rcode, version: 0; DO, Z), RDLEN.
    let mut after_owner = TYPE_OPT as u64 + EDNS_UDP_SIZE as u64;
    if dnssec_ok {
        after_owner += EDNS_DO as u64;
    }
    if let Some(e) = ecs {
        let len = 4 + e.addr_len() as u64;
        after_owner += 4 + len; // RDLEN
        after_owner += OPTION_ECS as u64 + len + e.family as u64;
        after_owner += ((e.source as u64) << 8) | scope as u64;
        after_owner += e.addr_sum();
    }
    shift_odd(after_owner, true)
}

/// Writes the OPT record (and ECS) the way `opt_sum` counts it: the reference layout for
/// tests and the host.
pub fn write_opt(out: &mut [u8], ecs: Option<&Ecs>, scope: u8, dnssec_ok: bool) -> usize {
    out[0] = 0;
    out[1..3].copy_from_slice(&TYPE_OPT.to_be_bytes());
    out[3..5].copy_from_slice(&EDNS_UDP_SIZE.to_be_bytes());
    out[5..9].copy_from_slice(&(if dnssec_ok { EDNS_DO } else { 0 }).to_be_bytes());
    match ecs {
        Some(e) => {
            let alen = e.addr_len();
            out[9..11].copy_from_slice(&((8 + alen) as u16).to_be_bytes());
            out[11..13].copy_from_slice(&OPTION_ECS.to_be_bytes());
            out[13..15].copy_from_slice(&((4 + alen) as u16).to_be_bytes());
            out[15..17].copy_from_slice(&e.family.to_be_bytes());
            out[17] = e.source;
            out[18] = scope;
            out[19..19 + alen].copy_from_slice(&e.addr[..alen]);
            19 + alen
        }
        None => {
            out[9..11].copy_from_slice(&0u16.to_be_bytes());
            OPT_FIXED_LEN
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::{fold, sum_bytes};
    use proptest::prelude::*;

    fn serialize_record(v6: bool, ttl: u32, addr: &[u8; 16]) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend(NAME_POINTER.to_be_bytes());
        r.extend(if v6 { TYPE_AAAA } else { TYPE_A }.to_be_bytes());
        r.extend(CLASS_IN.to_be_bytes());
        r.extend(ttl.to_be_bytes());
        r.extend(if v6 { 16u16 } else { 4u16 }.to_be_bytes());
        r.extend(&addr[..if v6 { 16 } else { 4 }]);
        r
    }

    proptest! {
        #[test]
        fn record_sum_matches_bytes(v6: bool, ttl: u32, addr: [u8; 16]) {
            let mut a = addr;
            if !v6 { a[4..].fill(0); }
            let bytes = serialize_record(v6, ttl, &a);
            prop_assert_eq!(bytes.len(), record_len(v6));
            prop_assert_eq!(fold(record_sum(v6, ttl, &a)), fold(sum_bytes(&bytes)));
        }

        #[test]
        fn opt_sum_matches_bytes(
            with_ecs: bool,
            v6: bool,
            source in 0u8..=128,
            scope: u8,
            addr: [u8; 16],
            dnssec_ok: bool,
        ) {
            let source = if v6 { source } else { source % 33 };
            let mut e = Ecs {
                family: if v6 { ECS_FAMILY_V6 } else { ECS_FAMILY_V4 },
                source,
                addr,
            };
            let alen = e.addr_len();
            e.addr[alen..].fill(0);
            let ecs = with_ecs.then_some(&e);
            let mut buf = [0u8; 64];
            let n = write_opt(&mut buf, ecs, scope, dnssec_ok);
            prop_assert_eq!(n, opt_len(ecs));
            prop_assert_eq!(fold(opt_sum(ecs, scope, dnssec_ok)), fold(sum_bytes(&buf[..n])));
        }
    }

    #[test]
    fn header_rules() {
        assert!(check_header(0x0100, 1, 0, 0, 0).is_ok());
        assert!(check_header(0x0120, 1, 0, 0, 1).is_ok()); // RD + AD (dig's default)
        assert!(check_header(0x8100, 1, 0, 0, 0).is_err()); // a response
        assert!(check_header(0x2800, 1, 0, 0, 0).is_err()); // UPDATE
        assert!(check_header(0x0300, 1, 0, 0, 0).is_err()); // TC
        assert!(check_header(0x0100, 2, 0, 0, 0).is_err());
        assert!(check_header(0x0100, 1, 1, 0, 0).is_err());
        assert!(check_header(0x0100, 1, 0, 0, 2).is_err());
        assert_eq!(answer_flags(0x0130), 0x8510);
    }

    #[test]
    fn ecs_rules() {
        assert_eq!(check_ecs(1, 24, 0, 7), Ok(3));
        assert_eq!(check_ecs(2, 56, 0, 11), Ok(7));
        assert_eq!(check_ecs(1, 0, 0, 4), Ok(0));
        assert!(check_ecs(1, 33, 0, 9).is_err());
        assert!(check_ecs(1, 24, 24, 7).is_err());
        assert!(check_ecs(1, 24, 0, 8).is_err());
        assert!(check_ecs(3, 24, 0, 7).is_err());
        assert!(ecs_last_byte_ok(20, 0xf0));
        assert!(!ecs_last_byte_ok(20, 0xf8));
        assert!(ecs_last_byte_ok(24, 0xff));
    }
}
