//! Making the verifier forget constants.
//!
//! The verifier follows every path with every constant it can track; where paths differ
//! only in such constants (which of 255 bytes ended the name, which servers are up, whether
//! there was a VLAN tag) it cannot merge them and runs out of its 1 M instruction budget.
//! A value written to a map and read back is unknown to it, so the paths merge. The reads
//! are volatile so the compiler does not forward the written value instead.

use director_common::maps::Scratch;

use crate::parse::Query;

pub const SLOT_OK: usize = 0;
pub const SLOT_TOTAL: usize = 1;
pub const SLOT_START: usize = 2;
pub const SLOT_COUNT: usize = 3;
const SLOT_OFFSETS: usize = 4;
const SLOT_FLAGS: usize = 5;
const SLOT_ECS: usize = 6;
pub const SLOT_LAYOUT: usize = 7;

#[inline(always)]
pub fn hide(s: *mut Scratch, slot: usize, v: u64) -> u64 {
    unsafe {
        core::ptr::write_volatile(&mut (*s).hidden[slot & 7], v);
        core::ptr::read_volatile(&(*s).hidden[slot & 7])
    }
}

/// Forgets which of the parse paths produced `q`: offsets and flags become bounded unknowns.
#[inline(always)]
pub fn hide_query(s: *mut Scratch, q: &mut Query) {
    let offsets = hide(s, SLOT_OFFSETS, (q.l3 as u64) | ((q.dns as u64) << 16));
    q.l3 = (offsets & 0x1f) as usize;
    q.dns = ((offsets >> 16) & 0x7f) as usize;
    let flags = hide(
        s,
        SLOT_FLAGS,
        (q.ip6 as u64) | (q.aaaa as u64) << 1 | (q.edns as u64) << 2 | (q.has_ecs as u64) << 3 | (q.client_v6 as u64) << 4,
    );
    q.ip6 = flags & 1 != 0;
    q.aaaa = flags & 2 != 0;
    q.edns = flags & 4 != 0;
    q.has_ecs = flags & 8 != 0;
    q.client_v6 = flags & 16 != 0;
    let ecs = hide(s, SLOT_ECS, (q.ecs.source as u64) | (q.client_bits as u64) << 8);
    q.ecs.source = (ecs & 0xff) as u8;
    q.client_bits = ((ecs >> 8) & 0xff) as u8;
}
