//! Response rate limiting: whether the answer policy decided on goes out, goes out
//! truncated, or not at all (`director_common::rrl` holds the rule; this is its maps and
//! clock). Only answers are limited: everything passed or dropped earlier costs nothing here.

use aya_ebpf::{bindings::BPF_NOEXIST, helpers::bpf_ktime_get_ns, maps::lpm_trie::Key};
use director_common::{
    maps::Scratch,
    rrl::{self, Bucket, Verdict},
};

use crate::maps::{DIR_RRL, DIR_RRL_BUCKETS, DIR_RRL_EXEMPT};

/// The verdict for an answer of `service` to the packet's source, as a `code`.
///
/// Not inlined: a called function's branches end at its return, so the verifier walks the
/// rest of the program once whatever path the bucket took (inlined, the source's family,
/// a new or a found bucket and the verdict each doubled what followed: +50 k instructions).
#[inline(never)]
pub fn check(service: u32, ip6: bool, s: *const Scratch) -> u32 {
    code(verdict(service, ip6, s))
}

/// Verdicts as `check` returns them.
pub const ANSWER: u32 = 0;
pub const SLIP: u32 = 1;
pub const DROP: u32 = 2;

#[inline(always)]
fn code(v: Verdict) -> u32 {
    match v {
        Verdict::Answer => ANSWER,
        Verdict::Slip => SLIP,
        Verdict::Drop => DROP,
    }
}

#[inline(always)]
fn verdict(service: u32, ip6: bool, s: *const Scratch) -> Verdict {
    let Some(limit) = DIR_RRL.get(service) else {
        return Verdict::Answer;
    };
    if !limit.is_limited() {
        return Verdict::Answer;
    }
    // SAFETY: `s` is the scratch map's value; `source` is 16 bytes, 8-aligned.
    let (lo, hi) = unsafe {
        let w = (*s).source.as_ptr() as *const u64;
        (
            core::ptr::read_volatile(w),
            core::ptr::read_volatile(w.add(1)),
        )
    };
    let v6 = ip6;
    let exempt = Key::new(128, rrl::exempt_key(v6, lo, hi));
    if DIR_RRL_EXEMPT.get(&exempt).is_some() {
        return Verdict::Answer;
    }
    let key = rrl::Key::new(service, v6, lo, hi, limit);
    // SAFETY: a helper without arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    match DIR_RRL_BUCKETS.get_ptr_mut(key) {
        // Shared by the CPUs and updated without a lock (spin locks need BTF-described
        // maps): two CPUs taking from one bucket in the same instant may both spend the
        // same token, so a source spread over N queues can get up to N - 1 extra answers
        // per such collision, never a multiple of the rate.
        // SAFETY: the map's value for `key`, valid for this program run.
        Some(b) => unsafe { (*b).take(now, limit) },
        None => {
            let mut b = Bucket::new();
            let v = b.take(now, limit);
            // Another CPU may have made it meanwhile: keep its bucket, the answer stands.
            let _ = DIR_RRL_BUCKETS.insert(key, b, BPF_NOEXIST as u64);
            v
        }
    }
}
