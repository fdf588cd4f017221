//! The SYN flood bench's generator (`bench_steer --only synflood`), never attached: run by
//! BPF_PROG_TEST_RUN with BPF_F_TEST_XDP_LIVE_FRAMES on the far end of the edge's veth, each
//! run turns its frame into a SYN from a random source and sends it (XDP_TX, which a live
//! test run makes a redirect out of that interface).
//!
//! The input holds the frame twice: an Ethernet + IPv4 + TCP SYN (no options) and, after it,
//! the same bytes again as a template. A live test run reuses a page with whatever the
//! receivers wrote into it (the edge's new MACs, a DNAT's address), so every run copies the
//! template over the frame first, then sets the source address's last byte, the source port
//! and the sequence number from the kernel's prandom, patches both checksums (RFC 1624; the
//! template has those fields zero and its checksums computed so), and cuts the template off.

use aya_ebpf::{
    helpers::{bpf_get_prandom_u32, bpf_xdp_adjust_tail},
    programs::XdpContext,
};
use director_common::{checksum, counters::Reason};

use crate::packet::{at, be16, ld, put16, put32, st};

/// Ethernet (14) + IPv4 without options (20) + TCP without options (20).
pub const FRAME: usize = 54;
/// The IPv4 header checksum, the source address's second half, the TCP source port,
/// sequence number and checksum.
const IP_SUM: usize = 24;
const SRC_LOW: usize = 28;
const SPORT: usize = 34;
const SEQ: usize = 38;
const TCP_SUM: usize = 50;

/// Writes the next SYN over the frame and cuts the template off, or says why not.
#[inline(always)]
pub fn next(ctx: &XdpContext) -> Result<(), Reason> {
    let p = at::<{ 2 * FRAME }>(ctx, 0, Reason::Malformed)?;
    let mut i = 0;
    while i < FRAME {
        st::<u16, { 2 * FRAME }>(p, i, ld::<u16, { 2 * FRAME }>(p, FRAME + i));
        i += 2;
    }
    // SAFETY: helpers without arguments.
    let (r, seq) = unsafe { (bpf_get_prandom_u32(), bpf_get_prandom_u32()) };
    let host = r & 0xff;
    // At least 1024: no well-known port, never 0.
    let sport = (r >> 16) | 0x400;
    let src_low = be16(p, SRC_LOW) as u32 | host;
    put16(p, SRC_LOW, src_low as u16);
    put16(p, SPORT, sport as u16);
    put32(p, SEQ, seq);
    let ip = u64::from(!be16(p, IP_SUM)) + u64::from(host);
    put16(p, IP_SUM, !checksum::fold(ip));
    let tcp = u64::from(!be16(p, TCP_SUM))
        + u64::from(host)
        + u64::from(sport)
        + u64::from(seq >> 16)
        + u64::from(seq & 0xffff);
    put16(p, TCP_SUM, !checksum::fold(tcp));
    // SAFETY: shrinks the frame by the template's length; no packet pointer is used after.
    if unsafe { bpf_xdp_adjust_tail(ctx.ctx, -(FRAME as i32)) } != 0 {
        return Err(Reason::Malformed);
    }
    Ok(())
}
