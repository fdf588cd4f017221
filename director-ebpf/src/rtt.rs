//! Passive RTT (`director_rtt`, a cgroup sock_ops program for `director-ctl agent`): when
//! an accepted connection's handshake completes, its RTT is added to the client prefix's
//! entry in `DIR_RTT` (see `director_common::rtt`). Nothing about the connection changes.

use aya_ebpf::{
    bindings::{BPF_NOEXIST, BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB},
    programs::SockOpsContext,
};
use director_common::rtt::{self, Count, RttKey};

use crate::counter::count;
use crate::maps::{DIR_RTT, DIR_RTT_COUNTERS, DIR_RTT_GEN, DIR_RTT_ZERO};

/// `AF_INET` and `AF_INET6` as `bpf_sock_ops.family` has them.
const AF_INET: u32 = 2;
const AF_INET6: u32 = 10;

/// Takes the sample if this callback is a passive open's end; every other op is ignored.
#[inline(always)]
pub fn observe(ctx: &SockOpsContext) {
    if ctx.op() != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB {
        return;
    }
    // At this callback the kernel has taken exactly one RTT sample, SYN-ACK to ACK
    // (tcp_synack_rtt_meas), and srtt_us holds it shifted left by 3 (srtt is kept in
    // eighths). 0: no sample (a retransmitted SYN-ACK, Karn's rule, or a SYN cookie).
    // SAFETY: the context pointer the kernel passed; srtt_us is readable at this op.
    let us = unsafe { (*ctx.ops).srtt_us } >> 3;
    if us == 0 {
        count(&DIR_RTT_COUNTERS, Count::NoRtt as u32);
        return;
    }
    let gen = generation();
    let key = match ctx.family() {
        AF_INET => rtt::key_v4(gen, ctx.remote_ip4()),
        AF_INET6 => rtt::key_v6(gen, ctx.remote_ip6()),
        _ => {
            count(&DIR_RTT_COUNTERS, Count::OtherFamily as u32);
            return;
        }
    };
    if add(&key, us) {
        count(&DIR_RTT_COUNTERS, rtt::samples_slot(gen));
    } else {
        count(&DIR_RTT_COUNTERS, Count::NoEntry as u32);
    }
}

/// The generation samples go under now (see `director_common::rtt`).
#[inline(always)]
pub fn generation() -> u8 {
    match DIR_RTT_GEN.get(0) {
        Some(g) => (*g & 1) as u8,
        None => 0,
    }
}

/// Adds the sample to this CPU's value of `key`, making the entry if it is new. Per-CPU
/// values: no other program run writes this one meanwhile, so no atomics.
#[inline(always)]
pub fn add(key: &RttKey, us: u32) -> bool {
    let mut entry = DIR_RTT.get_ptr_mut(key);
    if entry.is_none() {
        // A new entry starts from the never-written zero value (a 280-byte value built
        // on the stack would take half of it); other CPUs' copies start zeroed too.
        let Some(zero) = DIR_RTT_ZERO.get(0) else {
            return false;
        };
        // Another CPU may have made it meanwhile (EEXIST): the lookup below finds it.
        let _ = DIR_RTT.insert(key, zero, u64::from(BPF_NOEXIST));
        entry = DIR_RTT.get_ptr_mut(key);
    }
    let Some(s) = entry else {
        return false;
    };
    // SAFETY: this CPU's value in the map, valid for this program run.
    rtt::record(unsafe { &mut *s }, us);
    true
}
