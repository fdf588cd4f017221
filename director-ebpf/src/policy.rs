//! Policy: map lookups only. Which service owns the name, which decision covers the client,
//! and which of its servers answer.

use aya_ebpf::maps::lpm_trie::Key;
use director_common::{
    counters::Reason,
    fallback::Kinds,
    handover::{Plan, Query, Slot},
    maps::{
        dec16_index, DecCacheSlot, DecisionKeyV4, DecisionKeyV6, DecisionRef, Scratch,
        ServerRecord, DEC_CACHE_BLOCKS, DEC_CACHE_SLOTS, KIND_DNS, MAX_CANDIDATES, NAME_BUF,
        NAME_SLOTS, SERVICE_ACTIVE, SERVICE_BITS, SLOT_OVERFLOW, SLOT_USED,
    },
    name,
    select::{self, Mode},
};

use crate::maps::*;
use crate::opaque::{self, hide};

pub fn decide(q: &Query, s: *mut Scratch) -> Result<Plan, Reason> {
    let hash = unsafe { core::ptr::read_volatile(&(*s).name_hash) };
    // SAFETY: `s` is the scratch map's value.
    let copy = unsafe { core::ptr::read_volatile(&(*s).front) } & 1;
    let service_id = owner(hash, copy).ok_or(Reason::UnknownName)?;
    let entry = DIR_SERVICE_NAMES
        .get(service_id)
        .ok_or(Reason::UnknownName)?;
    if entry.len as usize != q.name_len || !same_name(&entry.name, s, q.name_len) {
        return Err(Reason::UnknownName);
    }
    let service = DIR_SERVICES.get(service_id).ok_or(Reason::UnknownName)?;
    if service.flags & SERVICE_ACTIVE == 0 || service.kind != KIND_DNS {
        return Err(Reason::UnknownName);
    }

    let found = lookup(q, s, service_id).ok_or(Reason::NoDecision)?;
    let scope = found.scope;
    let decision = DIR_CHOICES.get(found.id).ok_or(Reason::NoDecision)?;

    let aaaa = q.aaaa;
    // Once per query: the service's health verdicts for all its servers. (An array entry
    // exists for every service id; the check is for the verifier.)
    let health = DIR_HEALTH.get(service_id).ok_or(Reason::NoServer)?;
    // Fail-open answers carry the service's degraded TTL.
    let ttl = if health.ttl != 0 {
        health.ttl
    } else {
        service.ttl
    };
    // One answer from a decision with one primary (most of them), that server able to
    // answer: it is the answer whatever the key, so the key, the mask and the weighted pick
    // (7 % of an answer's cost) are left out. Returned from here: joined with the end
    // of the ranked walk below, what follows was walked by the verifier once more (+14 k
    // instructions).
    if let Some(id) = select::sole_primary(decision, service.answers) {
        if !health.is_out(id) {
            if let Some(sv) = DIR_SERVERS.get(id as u32) {
                if sv.is_usable() && sv.has_family(aaaa) {
                    put_address(s, 0, sv, aaaa);
                    return Ok(Plan {
                        service: service_id,
                        ttl,
                        scope,
                        n: 1,
                        first: id,
                        fallback: Kinds::NONE,
                        truncate: false,
                        choice: found.id,
                    });
                }
            }
        }
    }
    let key = match Mode::from_u8(service.select) {
        Mode::Random => random(s),
        Mode::Client => select::client_key(unsafe { &(*s).client }),
        Mode::Name => select::name_key(hash),
    };
    // Each phase's result goes through memory: the verifier then sees one unknown value
    // instead of walking every combination of usable servers (2^8) through the rest.
    let (ok, total) = select::usable_mask(decision, |id| {
        DIR_SERVERS
            .get(id as u32)
            .is_some_and(|sv| sv.is_usable() && sv.has_family(aaaa))
            && !health.is_out(id)
    });
    let ok = hide(s, Slot::Usable, ok as u64) as u32 & 0xff;
    let total = hide(s, Slot::WeightTotal, total as u64) as u32;
    let start = hide(
        s,
        Slot::Start,
        select::pick_start(decision, ok, total, key) as u64,
    ) as usize
        & (MAX_CANDIDATES - 1);
    let want = (service.answers as u64).clamp(1, MAX_CANDIDATES as u64);
    // The count of addresses taken stays in map memory: in a register it would be a
    // different constant on every path through the candidates.
    opaque::put(s, Slot::Taken, 0);
    let offer = |id: u16| {
        let n = opaque::get(s, Slot::Taken);
        if n >= want {
            return true;
        }
        // Read again: a server set down since the first read is still not answered.
        let Some(sv) = DIR_SERVERS.get(id as u32) else {
            return false;
        };
        // Health is not read again: the mask above already left out who it keeps out.
        if !(sv.is_usable() && sv.has_family(aaaa)) {
            return false;
        }
        put_address(s, n as usize, sv, aaaa);
        // Every id taken, without a branch for the first (each one doubles the verifier's
        // paths through the candidates).
        unsafe { core::ptr::write_volatile(&mut (*s).ids[n as usize & (MAX_CANDIDATES - 1)], id) };
        opaque::put(s, Slot::Taken, n + 1);
        n + 1 >= want
    };
    // One answer (most services): the usable primary the weights picked is it, which the
    // ranked walk would only reach after a remainder and its bookkeeping.
    let primary = select::primaries(decision);
    if !(want == 1 && start < primary && ok & (1 << start) != 0 && offer(decision.servers[start])) {
        select::emit_ranked(decision, ok, start, offer);
    }
    let n = opaque::get(s, Slot::Taken) as usize & Plan::MAX_N;
    if n == 0 {
        return fallback(service_id, scope, found.id, aaaa, s);
    }
    Ok(Plan {
        service: service_id,
        ttl,
        scope,
        n,
        first: unsafe { core::ptr::read_volatile(&(*s).ids[0]) },
        fallback: Kinds::NONE,
        truncate: false,
        choice: found.id,
    })
}

/// Puts the server's address of the asked family into scratch as the answer's `n`th.
#[inline(always)]
fn put_address(s: *mut Scratch, n: usize, sv: &ServerRecord, aaaa: bool) {
    // Word copies, written volatile so they are not turned back into a memcpy call.
    // SAFETY: `s` is the scratch map's value; the mask keeps `n` inside `addrs`.
    unsafe {
        let dst = (*s).addrs[n & (MAX_CANDIDATES - 1)].as_mut_ptr() as *mut u64;
        let (lo, hi) = if aaaa {
            let src = sv.ipv6.as_ptr() as *const u64;
            (*src, *src.add(1))
        } else {
            (u32::from_ne_bytes(sv.ipv4) as u64, 0)
        };
        core::ptr::write_volatile(dst, lo);
        core::ptr::write_volatile(dst.add(1), hi);
    }
}

/// The service whose name has `hash`, if any: the name's slot in `copy` of
/// `DIR_NAME_SLOTS` (the one `parse` found in use; array reads the verifier inlines), and the hash map (a chain of
/// kernel calls) only for a slot more than one name fell in. Only the service id comes out,
/// so what follows is verified once whichever way it was found; the caller compares the
/// name itself.
#[inline(always)]
fn owner(hash: u64, copy: u32) -> Option<u32> {
    let slot = DIR_NAME_SLOTS.get(copy * NAME_SLOTS + name::slot(hash))?;
    if slot.flags & SLOT_USED != 0 && slot.hash == hash {
        return Some(slot.service);
    }
    if slot.flags & SLOT_OVERFLOW == 0 {
        return None;
    }
    // SAFETY: the map is only read.
    unsafe { DIR_NAMES.get(hash) }.map(|e| e.service)
}

/// A random key from the CPU's own generator in scratch (`select::next_random`): the
/// kernel's prandom helper is a function call per answer, and calls are what cost most on
/// kernels with return-thunk mitigations. Not seeded: every CPU's generator starts at 0
/// and walks the same sequence, which changes nothing in how answers share by weight (each
/// CPU's keys are as even as any), and saves the verifier a branch on every path here.
#[inline(always)]
fn random(s: *mut Scratch) -> u32 {
    // SAFETY: `s` is the scratch map's value.
    let state = unsafe { core::ptr::read_volatile(&(*s).rng) };
    let (next, key) = select::next_random(state);
    // SAFETY: as above.
    unsafe { core::ptr::write_volatile(&mut (*s).rng, next) };
    key
}

/// None of the decision's servers can be answered: the service's alternate (a CNAME),
/// else its origin's address of the asked family, else the query is passed.
#[inline(always)]
fn fallback(
    service: u32,
    scope: u8,
    choice: u32,
    aaaa: bool,
    s: *mut Scratch,
) -> Result<Plan, Reason> {
    let fb = DIR_FALLBACK.get(service).ok_or(Reason::NoServer)?;
    let mut plan = Plan {
        service,
        ttl: fb.ttl,
        scope,
        n: 0,
        first: 0,
        fallback: Kinds::ALTERNATE,
        truncate: false,
        choice,
    };
    if fb.kinds.contains(Kinds::ALTERNATE) {
        return Ok(plan);
    }
    let origin = Kinds::origin(aaaa);
    if !fb.kinds.contains(origin) {
        return Err(Reason::NoServer);
    }
    unsafe {
        let dst = (*s).addrs[0].as_mut_ptr() as *mut u64;
        let (lo, hi) = if aaaa {
            let src = fb.origin6.as_ptr() as *const u64;
            (*src, *src.add(1))
        } else {
            (u32::from_ne_bytes(fb.origin4) as u64, 0)
        };
        core::ptr::write_volatile(dst, lo);
        core::ptr::write_volatile(dst.add(1), hi);
    }
    plan.n = 1;
    plan.fallback = origin;
    Ok(plan)
}

/// The decision entry covering the client: from this CPU's cache when the trie was read
/// with the same input at the same generation, else from the trie (and cached).
fn lookup(q: &Query, s: *const Scratch, service: u32) -> Option<DecisionRef> {
    // SAFETY: `s` is the scratch map's value; `client` is 16 bytes at an 8-aligned offset
    // (read as words: as bytes, each would be a load and a store).
    let (lo, hi) = unsafe {
        let w = (*s).client.as_ptr() as *const u64;
        (*w, *w.add(1))
    };
    // IPv4 clients with 16 bits or more: the /16's slot, where one entry answers it whole.
    if !q.client_v6 && q.client_bits >= 16 {
        if let Some(found) = front16(service, lo) {
            return Some(found);
        }
    }
    // Read before the trie: a write that overtakes this read bumps it, so what is cached
    // from the read is never used after the write.
    let gen = DIR_DEC_GEN.get(0).map_or(0, |g| *g);
    let k0 = ((service as u64) << 32) | ((q.client_bits as u64) << 8) | q.client_v6 as u64;
    let slot = cache_slot(k0, lo, hi);
    if let Some(c) = slot {
        // SAFETY: a slot of this CPU's cache block; nothing else runs on this CPU meanwhile.
        let c = unsafe { &*c };
        if c.k0 == k0 && c.lo == lo && c.hi == hi && c.gen == gen {
            return Some(c.found);
        }
    }
    let found = *trie(q, lo, hi, service)?;
    if let Some(c) = slot {
        // SAFETY: as above.
        unsafe {
            (*c).k0 = k0;
            (*c).lo = lo;
            (*c).hi = hi;
            (*c).gen = gen;
            (*c).found = found;
        }
    }
    Some(found)
}

/// The trie's entry for an IPv4 client's /16 (`lo`: its address word as loaded) from
/// `DIR_DEC16`, where the controller found one entry answering the whole /16 and the
/// service has a lane there.
#[inline(always)]
pub fn front16(service: u32, lo: u64) -> Option<DecisionRef> {
    let i = dec16_index(service, u16::from_be(lo as u16) as u32)?;
    // One load: the controller writes the word whole.
    // SAFETY: the map's value for `i`.
    let w = unsafe { core::ptr::read_volatile(DIR_DEC16.get(i)?) };
    if w == 0 {
        return None;
    }
    Some(DecisionRef::from_word(w))
}

/// This CPU's cache slot for a key.
#[inline(always)]
fn cache_slot(k0: u64, lo: u64, hi: u64) -> Option<*mut DecCacheSlot> {
    let h = (k0 ^ lo.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ hi).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let block = DIR_DEC_CACHE.get_ptr_mut((h >> 60) as u32 & (DEC_CACHE_BLOCKS - 1))?;
    let i = (h >> 52) as usize & (DEC_CACHE_SLOTS - 1);
    // SAFETY: the block is this CPU's value; the mask keeps `i` inside it.
    Some(unsafe { (*block).slots.as_mut_ptr().add(i) })
}

/// The trie entry covering the client. Two call sites, one per trie: where the compiler
/// merges the two lookups into one call, the verifier cannot tell which map it reads and
/// leaves the generic helper (an indirect call per answer) in place of a direct call to
/// the trie's lookup.
#[inline(always)]
fn trie(q: &Query, lo: u64, hi: u64, service: u32) -> Option<&'static DecisionRef> {
    let svc = service.to_be_bytes();
    let bits = SERVICE_BITS + q.client_bits as u32;
    if q.client_v6 {
        let mut addr = [0u8; 16];
        addr[..8].copy_from_slice(&lo.to_ne_bytes());
        addr[8..].copy_from_slice(&hi.to_ne_bytes());
        let key = Key::new(bits, DecisionKeyV6 { service: svc, addr });
        let found = DIR_DEC6.get(&key);
        fence();
        found
    } else {
        let addr = (lo as u32).to_ne_bytes();
        DIR_DEC4.get(Key::new(bits, DecisionKeyV4 { service: svc, addr }))
    }
}

/// An empty barrier the compiler cannot move code across: the call before it stays in its
/// own branch.
#[inline(always)]
fn fence() {
    // SAFETY: no instructions; it only orders what the compiler emits.
    unsafe { core::arch::asm!("", options(nostack, preserves_flags)) }
}

/// Compares the stored name with the walked one in 8-byte words, whole: both are zero past
/// `len` in their last word (`NameEntry` is stored so, and `parse` shifts the last word
/// read down), and words after it are not compared (the scratch buffer's are left over
/// from earlier packets).
#[inline(always)]
fn same_name(stored: &[u8; NAME_BUF], s: *const Scratch, len: usize) -> bool {
    let mut w = 0;
    while w < NAME_BUF / 8 {
        let base = w * 8;
        if base >= len {
            break;
        }
        let (a, b) = unsafe {
            (
                *(stored.as_ptr().add(base) as *const u64),
                *((*s).name.as_ptr().add(base) as *const u64),
            )
        };
        if a != b {
            return false;
        }
        w += 1;
    }
    true
}
