//! The bench's ceiling: a DNS query (UDP to port 53, QR clear) is turned around in place
//! (MACs, addresses and ports swapped, QR set so that load generators count it as a
//! response) and sent back. Nothing is parsed beyond those fields; swapping keeps every
//! checksum, and QR is patched into the UDP checksum incrementally (RFC 1624). What
//! director costs above this program, measured in the same run, is what answering costs.

use aya_ebpf::programs::XdpContext;
use director_common::{
    checksum,
    counters::Reason,
    headers::{eth, ipv4, ipv6, udp},
};

use crate::packet::{at, be16, put16};

/// Headers and the DNS ID and flags words.
const V4: usize = eth::LEN + ipv4::LEN + udp::LEN + 4;
const V6: usize = eth::LEN + ipv6::LEN + udp::LEN + 4;

/// Sets QR in the flags word at `flags` and patches the UDP checksum at `sum` for it
/// (RFC 1624: HC' = ~(~HC + ~m + m')); an IPv4 checksum of 0 (none) stays 0. Refuses
/// a packet that is already a response (turning those around would loop).
#[inline(always)]
fn set_qr<const N: usize>(p: *mut [u8; N], flags: usize, sum: usize) -> Result<(), Reason> {
    let old = be16(p, flags);
    if old & 0x8000 != 0 {
        return Err(Reason::NotQuery);
    }
    let new = old | 0x8000;
    put16(p, flags, new);
    let hc = be16(p, sum);
    if hc != 0 {
        let s = u64::from(!hc) + u64::from(!old) + u64::from(new);
        put16(p, sum, checksum::finish_udp(s));
    }
    Ok(())
}

/// Swaps `len` bytes at `a` with those at `b` (constant offsets once inlined).
#[inline(always)]
fn swap<const N: usize>(p: *mut [u8; N], a: usize, b: usize, len: usize) {
    let mut i = 0;
    while i < len {
        // SAFETY: the caller's `at` checked the N bytes; a + len and b + len are <= N.
        unsafe { core::ptr::swap(&mut (*p)[a + i], &mut (*p)[b + i]) };
        i += 1;
    }
}

/// Turns the packet around, or says why not (then it is passed).
#[inline(always)]
pub fn turn(ctx: &XdpContext) -> Result<(), Reason> {
    let e = at::<{ eth::LEN }>(ctx, 0, Reason::NotIp)?;
    match be16(e, eth::TYPE) {
        eth::P_IPV4 => {
            let p = at::<V4>(ctx, 0, Reason::Malformed)?;
            let ip = eth::LEN;
            let u = ip + ipv4::LEN;
            // SAFETY: `at` checked the V4 bytes.
            let (vihl, proto) = unsafe { ((*p)[ip], (*p)[ip + ipv4::PROTOCOL]) };
            if vihl != 0x45 || proto != udp::PROTOCOL || be16(p, u + udp::DST_PORT) != 53 {
                return Err(Reason::NotDns);
            }
            set_qr(p, u + udp::LEN + 2, u + udp::CHECKSUM)?;
            swap(p, eth::DST, eth::SRC, eth::ADDR_LEN);
            swap(p, ip + ipv4::SRC, ip + ipv4::DST, ipv4::ADDR_LEN);
            swap(p, u + udp::SRC_PORT, u + udp::DST_PORT, 2);
        }
        eth::P_IPV6 => {
            let p = at::<V6>(ctx, 0, Reason::Malformed)?;
            let ip = eth::LEN;
            let u = ip + ipv6::LEN;
            // SAFETY: `at` checked the V6 bytes.
            let next = unsafe { (*p)[ip + ipv6::NEXT_HEADER] };
            if next != udp::PROTOCOL || be16(p, u + udp::DST_PORT) != 53 {
                return Err(Reason::NotDns);
            }
            set_qr(p, u + udp::LEN + 2, u + udp::CHECKSUM)?;
            swap(p, eth::DST, eth::SRC, eth::ADDR_LEN);
            swap(p, ip + ipv6::SRC, ip + ipv6::DST, ipv6::ADDR_LEN);
            swap(p, u + udp::SRC_PORT, u + udp::DST_PORT, 2);
        }
        _ => return Err(Reason::NotIp),
    }
    Ok(())
}
