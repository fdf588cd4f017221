//! Making the verifier forget constants.
//!
//! The verifier follows every path with every constant it can track; where paths differ
//! only in such constants (which of 255 bytes ended the name, which servers are up, whether
//! there was a VLAN tag, how long the ECS address was) it cannot merge them and runs out of
//! its 1 M instruction budget. A value written to a map and read back is unknown to it, so
//! the paths merge. Reads are volatile so the compiler does not forward the written value.
//!
//! Between the stages (parse → policy → rewrite) the whole hand-over goes through memory,
//! so each stage is verified from one state, whatever paths led to it.

use director_common::maps::Scratch;

use crate::parse::Query;
use crate::policy::Plan;

pub const SLOT_OK: usize = 0;
pub const SLOT_TOTAL: usize = 1;
pub const SLOT_START: usize = 2;
pub const SLOT_COUNT: usize = 3;
pub const SLOT_SHAPE: usize = 4;
pub const SLOT_LAYOUT: usize = 7;
const SLOT_QUERY: usize = 8;
const SLOT_PLAN: usize = 11;

#[inline(always)]
pub fn hide(s: *mut Scratch, slot: usize, v: u64) -> u64 {
    put(s, slot, v);
    get(s, slot)
}

#[inline(always)]
fn put(s: *mut Scratch, slot: usize, v: u64) {
    unsafe { core::ptr::write_volatile(&mut (*s).hidden[slot & 15], v) }
}

#[inline(always)]
fn get(s: *const Scratch, slot: usize) -> u64 {
    unsafe { core::ptr::read_volatile(&(*s).hidden[slot & 15]) }
}

fn bit(b: bool, at: u32) -> u64 {
    (b as u64) << at
}

pub fn save_query(s: *mut Scratch, q: &Query) {
    put(
        s,
        SLOT_QUERY,
        q.l3 as u64
            | (q.dns as u64) << 8
            | (q.name_len as u64) << 16
            | (q.udp_size as u64) << 32
            | (q.id as u64) << 48,
    );
    put(
        s,
        SLOT_QUERY + 1,
        q.flags as u64
            | (q.ecs_family as u64) << 16
            | (q.ecs_source as u64) << 32
            | (q.client_bits as u64) << 40
            | bit(q.ip6, 48)
            | bit(q.aaaa, 49)
            | bit(q.edns, 50)
            | bit(q.has_ecs, 51)
            | bit(q.client_v6, 52)
            | bit(q.dnssec_ok, 53),
    );
}

/// The query as saved, every field bounded by a mask the verifier can see.
pub fn load_query(s: *const Scratch) -> Query {
    let a = get(s, SLOT_QUERY);
    let b = get(s, SLOT_QUERY + 1);
    Query {
        l3: (a & 0x1f) as usize,
        dns: ((a >> 8) & 0x7f) as usize,
        name_len: ((a >> 16) & 0xff) as usize,
        udp_size: (a >> 32) as u16,
        id: (a >> 48) as u16,
        flags: b as u16,
        ecs_family: (b >> 16) as u16,
        ecs_source: (b >> 32) as u8,
        client_bits: (b >> 40) as u8,
        ip6: b & (1 << 48) != 0,
        aaaa: b & (1 << 49) != 0,
        edns: b & (1 << 50) != 0,
        has_ecs: b & (1 << 51) != 0,
        client_v6: b & (1 << 52) != 0,
        dnssec_ok: b & (1 << 53) != 0,
    }
}

pub fn save_plan(s: *mut Scratch, p: &Plan) {
    put(s, SLOT_PLAN, p.service as u64 | (p.ttl as u64) << 32);
    put(s, SLOT_PLAN + 1, p.scope as u64 | (p.n as u64) << 8);
}

pub fn load_plan(s: *const Scratch) -> Plan {
    let a = get(s, SLOT_PLAN);
    let b = get(s, SLOT_PLAN + 1);
    Plan {
        service: a as u32,
        ttl: (a >> 32) as u32,
        scope: b as u8,
        n: ((b >> 8) & 15) as usize,
    }
}
