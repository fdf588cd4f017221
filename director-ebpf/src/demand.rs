//! Demand: each use of a stored decision counted at its choice index (`DIR_DEMAND`, per
//! CPU), and one use in N (`DIR_DEMAND_SAMPLE[0]`, per CPU countdown in scratch) written
//! whole to `DIR_DEMAND_RING`. What counts as a use is in `director_common::demand`: a DNS
//! answer sent with the decision's addresses or its fallback, a new flow's SYN.

use director_common::{
    demand::{
        countdown, Sample, FLAG_ECS, FLAG_SOURCE_V6, FLAG_SYN, FLAG_V6, OFF_CHOICE, OFF_CLIENT,
        OFF_CLIENT_LEN, OFF_SERVICE, OFF_SOURCE,
    },
    handover::{Plan, Query},
    maps::Scratch,
};

use crate::counter::count;
use crate::maps::{DIR_DEMAND, DIR_DEMAND_RING, DIR_DEMAND_SAMPLE};

/// A DNS answer of `plan` (sent, not slipped) to the query `q`.
#[inline(always)]
pub fn answered(s: *mut Scratch, q: &Query, plan: &Plan) {
    if cfg!(feature = "uncounted") {
        return;
    }
    count(&DIR_DEMAND, plan.choice);
    if !due(s) {
        return;
    }
    let flags = if q.client_v6 { FLAG_V6 } else { 0 }
        | if q.has_ecs { FLAG_ECS } else { 0 }
        | if q.ip6 { FLAG_SOURCE_V6 } else { 0 };
    sample_dns(
        s,
        plan.service,
        plan.choice,
        q.client_bits as u64 | (flags as u64) << 8,
    );
}

/// A new flow's SYN steered by `choice` of `service`, from the client whose address words
/// are `lo`, `hi` (IPv4 in the first four bytes).
#[inline(always)]
pub fn new_flow(service: u32, choice: u32, v6: bool, lo: u64, hi: u64) {
    if cfg!(feature = "uncounted") {
        return;
    }
    count(&DIR_DEMAND, choice);
    let Some(s) = crate::maps::DIR_SCRATCH.get_ptr_mut(0) else {
        return;
    };
    if !due(s) {
        return;
    }
    let meta = if v6 {
        128 | ((FLAG_SYN | FLAG_V6 | FLAG_SOURCE_V6) as u64) << 8
    } else {
        32 | (FLAG_SYN as u64) << 8
    };
    put(service, choice, [lo, hi], meta, [lo, hi]);
}

/// Whether this use is sampled: this CPU's countdown through the period, which is read
/// once (an inlined array read) and never when sampling is off.
#[inline(always)]
fn due(s: *mut Scratch) -> bool {
    let n = DIR_DEMAND_SAMPLE.get(0).map_or(0, |n| *n);
    if n == 0 {
        return false;
    }
    // SAFETY: `s` is this CPU's scratch value; nothing else runs on this CPU meanwhile.
    let left = unsafe { core::ptr::read_volatile(&(*s).demand_left) } as u32;
    let (left, hit) = countdown(left, n);
    // SAFETY: as above.
    unsafe { core::ptr::write_volatile(&mut (*s).demand_left, left as u64) };
    hit
}

/// The sampled DNS answer's record, from the addresses parse left in scratch. Not
/// inlined: the reservation's branches are verified once, not on every path to the answer.
#[inline(never)]
fn sample_dns(s: *const Scratch, service: u32, choice: u32, meta: u64) {
    // SAFETY: `s` is the scratch map's value; both addresses are 16 bytes, 8-aligned.
    let (client, source) = unsafe {
        let c = (*s).client.as_ptr() as *const u64;
        let r = (*s).source.as_ptr() as *const u64;
        ([*c, *c.add(1)], [*r, *r.add(1)])
    };
    put(service, choice, client, meta, source);
}

/// Reserves a `Sample` in the ring and writes it in words (a full ring drops the sample).
/// `meta`: the client's prefix length in its low byte, the flags in the next, zero above
/// (the padding).
#[inline(always)]
fn put(service: u32, choice: u32, client: [u64; 2], meta: u64, source: [u64; 2]) {
    let Some(mut e) = DIR_DEMAND_RING.reserve::<Sample>(0) else {
        return;
    };
    let p = e.as_mut_ptr() as *mut u8;
    // SAFETY: the reservation is a `Sample`'s 48 bytes, 8-aligned; the offsets are its
    // fields' (checked in director-common), each word inside it and aligned.
    unsafe {
        core::ptr::write(p.add(OFF_SERVICE) as *mut u32, service);
        core::ptr::write(p.add(OFF_CHOICE) as *mut u32, choice);
        core::ptr::write(p.add(OFF_CLIENT) as *mut u64, client[0]);
        core::ptr::write(p.add(OFF_CLIENT + 8) as *mut u64, client[1]);
        // Prefix length, flags and the six bytes of padding in one word (little-endian).
        core::ptr::write(p.add(OFF_CLIENT_LEN) as *mut u64, meta);
        core::ptr::write(p.add(OFF_SOURCE) as *mut u64, source[0]);
        core::ptr::write(p.add(OFF_SOURCE + 8) as *mut u64, source[1]);
    }
    e.submit(0);
}
