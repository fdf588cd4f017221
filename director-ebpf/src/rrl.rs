//! Response rate limiting: whether the answer policy decided on goes out, goes out
//! truncated, or not at all (`director_common::rrl` holds the rule; this is its maps and
//! clock). Only answers are limited: everything passed or dropped earlier costs nothing here.

use aya_ebpf::{
    helpers::{bpf_jiffies64, bpf_ktime_get_coarse_ns},
    maps::lpm_trie::Key,
};
use director_common::{
    maps::{Scratch, RRL_SLOTS},
    rrl::{self, Bucket, Verdict},
};

use crate::maps::{DIR_RRL, DIR_RRL_EXEMPT, DIR_RRL_SLOTS};

/// The seed of the buckets' tags (`rrl::Key::tag`), set by the loader from a random
/// number at each load, so that no one can choose sources whose prefixes share a set.
/// Its name is `rrl::RRL_SEED`.
#[unsafe(no_mangle)]
static DIR_RRL_SEED: u64 = 0;

/// The kernel's tick in ns, set by the loader (`rrl::RRL_TICK_NS`); 0: not known.
#[unsafe(no_mangle)]
static DIR_RRL_TICK_NS: u64 = 0;

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
    // Exempt sources spend no tokens (a resolver exempted inside a client's /24 leaves
    // the /24's bucket alone), so the trie comes first; while nothing is exempt it is not
    // walked at all.
    if limit.exemptions != 0 {
        let exempt = Key::new(128, rrl::exempt_key(v6, lo, hi));
        if DIR_RRL_EXEMPT.get(&exempt).is_some() {
            return Verdict::Answer;
        }
    }
    // SAFETY: a global the loader sets, read as it was set.
    let seed = unsafe { core::ptr::read_volatile(&DIR_RRL_SEED) };
    let tag = rrl::Key::new(service, v6, lo, hi, limit).tag(seed);
    // The tick's clock, not the nanosecond one: a bucket is not the worse for a reading up
    // to a tick old (it may grant up to rate x tick more over a short window), and the
    // fine clock cost more than the rest of the check. Read as the tick count, which the
    // verifier inlines as one load, where the coarse helper is a call (a third of the
    // limit's cost per answer).
    // SAFETY: a global the loader sets, read as it was set.
    let tick_ns = unsafe { core::ptr::read_volatile(&DIR_RRL_TICK_NS) };
    let now = if tick_ns != 0 {
        // SAFETY: helpers without arguments.
        unsafe { bpf_jiffies64() }.wrapping_mul(tick_ns)
    } else {
        unsafe { bpf_ktime_get_coarse_ns() }
    };
    match bucket(tag) {
        // Shared by the CPUs and updated without a lock (spin locks need BTF-described
        // maps): two CPUs taking from one bucket in the same instant may both spend the
        // same token, so a source spread over N queues can get up to N - 1 extra answers
        // per such collision, never a multiple of the rate.
        // SAFETY: the map's value, valid for this program run.
        Some(b) => unsafe { (*b).take(now, limit) },
        None => Verdict::Answer,
    }
}

/// The bucket of the prefix `tag` names: its slot in its set, else the set's slot
/// scheduled earliest (a never used one first), given to it fresh.
#[inline(always)]
fn bucket(tag: u64) -> Option<*mut Bucket> {
    let first = rrl::set_start(tag, RRL_SLOTS);
    let (mut oldest, mut oldest_tat) = (first, u64::MAX);
    let mut w = 0;
    while w < rrl::WAYS {
        let i = first + w;
        let slot = DIR_RRL_SLOTS.get_ptr_mut(i)?;
        // SAFETY: the map's value, valid for this run.
        unsafe {
            if (*slot).tag == tag {
                return Some(&mut (*slot).bucket);
            }
            if (*slot).bucket.tat_ns < oldest_tat {
                oldest_tat = (*slot).bucket.tat_ns;
                oldest = i;
            }
        }
        w += 1;
    }
    let slot = DIR_RRL_SLOTS.get_ptr_mut(oldest)?;
    // SAFETY: as above. Another CPU taking the same slot now writes the same or another
    // prefix's fresh bucket: either way one prefix starts afresh.
    unsafe {
        (*slot).tag = tag;
        (*slot).bucket = Bucket::new();
        Some(&mut (*slot).bucket)
    }
}
