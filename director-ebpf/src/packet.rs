//! Bounds-checked access to the packet. Every read or write goes through a pointer that was
//! compared against `data_end` itself, which is what the verifier tracks.

use aya_ebpf::programs::XdpContext;
use director_common::{counters::Reason, headers::ipv4};

/// A pointer to `N` packet bytes at `off`, or `err` when the packet is shorter.
///
/// Never used with N = 1: the compiler rewrites `p + 1 > end` as `p >= end`, from which
/// the verifier learns no range. Single bytes are read as the second of a pair.
#[inline(always)]
pub fn at<const N: usize>(
    ctx: &XdpContext,
    off: usize,
    err: Reason,
) -> Result<*mut [u8; N], Reason> {
    let p = ctx.data() + off;
    if p + N > ctx.data_end() {
        return Err(err);
    }
    Ok(p as *mut [u8; N])
}

/// Like `at`, but the pointer is opaque to the compiler, so it cannot derive it from
/// another packet pointer (for example at a negative offset from a later one), which the
/// verifier would refuse. The rewrite path needs this. An empty asm on the register, where
/// `black_box` took a store, a load and an address computation each time.
#[inline(always)]
pub fn at_fenced<const N: usize>(
    ctx: &XdpContext,
    off: usize,
    err: Reason,
) -> Result<*mut [u8; N], Reason> {
    let mut p = ctx.data() + off;
    // SAFETY: no instructions: `p` comes out as it went in, unknown to the compiler.
    unsafe {
        core::arch::asm!("/* {0} */", inout(reg) p, options(nomem, nostack, preserves_flags))
    };
    if p + N > ctx.data_end() {
        return Err(err);
    }
    Ok(p as *mut [u8; N])
}

/// Big-endian fields as one 16- or 32-bit access and a byte swap: built from single
/// bytes they took two loads or stores, shifts and ors each, about thirty instructions on
/// every answer's path. Packet fields are unaligned at times, which BPF allows on this
/// target (as for `ld`); volatile keeps the compiler from splitting them back into bytes.
#[inline(always)]
pub fn be16<const N: usize>(p: *const [u8; N], i: usize) -> u16 {
    u16::from_be(ld(p, i))
}

#[inline(always)]
pub fn put16<const N: usize>(p: *mut [u8; N], i: usize, v: u16) {
    st(p, i, v.to_be())
}

#[inline(always)]
pub fn put32<const N: usize>(p: *mut [u8; N], i: usize, v: u32) {
    st(p, i, v.to_be())
}

/// Whole-word access in host order, for bytes that are moved or summed rather than read as
/// numbers. One load or store each: a byte-aligned copy would become a load and a store per
/// byte. Packet words are unaligned, which BPF allows on this target; volatile keeps the
/// compiler from splitting them.
#[inline(always)]
pub fn ld<T: Copy, const N: usize>(p: *const [u8; N], i: usize) -> T {
    // SAFETY: callers pass `i + size_of::<T>() <= N` with `p` checked by `at`.
    unsafe { core::ptr::read_volatile((p as *const u8).add(i) as *const T) }
}

#[inline(always)]
pub fn st<T: Copy, const N: usize>(p: *mut [u8; N], i: usize, v: T) {
    // SAFETY: as in `ld`.
    unsafe { core::ptr::write_volatile((p as *mut u8).add(i) as *mut T, v) }
}

/// The one's-complement sum of an IPv4 header in host-order 32-bit words: five loads where
/// big-endian 16-bit reads took ten pairs of byte loads. The sum comes out byte-swapped,
/// which a check against all ones does not see and a native store puts right.
#[inline(always)]
pub fn header_sum(ip: *const [u8; ipv4::LEN]) -> u64 {
    let w = ip as *const u32;
    let mut sum = 0u64;
    let mut i = 0;
    while i < ipv4::LEN / 4 {
        // SAFETY: the caller checked the header is in the packet; BPF allows the unaligned
        // loads on this target (`read_unaligned` would load bytes).
        sum += unsafe { core::ptr::read_volatile(w.add(i)) } as u64;
        i += 1;
    }
    sum
}
