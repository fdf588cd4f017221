//! The bench's answer floor (built with the `floor` feature only, never shipped): what
//! answering costs with nothing decided. An IPv4 query of one question, with or without a
//! bare OPT, is turned around and grows one fixed A record (and the OPT echoed), as
//! director's usual answer does; the UDP checksum is left 0 (IPv4 allows it), so the floor
//! is a lower bound.

use aya_ebpf::{helpers::bpf_xdp_adjust_tail, programs::XdpContext};
use director_common::{
    checksum::finish_ip,
    counters::Reason,
    dns,
    headers::{eth, ipv4, udp},
};

use crate::packet::{at_fenced as at, be16, header_sum, ld, put16, st};

const DNS: usize = eth::LEN + ipv4::LEN + udp::LEN;
const HEAD: usize = DNS + dns::HEADER_LEN;
const RR: usize = 16;
const MASK: usize = 0x1ff;

#[inline(always)]
pub fn answer(ctx: &XdpContext) -> Result<(), Reason> {
    let p = at::<HEAD>(ctx, 0, Reason::NotIp)?;
    let ip = eth::LEN;
    let u = ip + ipv4::LEN;
    // SAFETY: `at` checked the HEAD bytes.
    let (vihl, proto) = unsafe { ((*p)[ip], (*p)[ip + ipv4::PROTOCOL]) };
    if be16(p, eth::TYPE) != eth::P_IPV4
        || vihl != 0x45
        || proto != udp::PROTOCOL
        || be16(p, u + udp::DST_PORT) != 53
    {
        return Err(Reason::NotDns);
    }
    let flags = be16(p, DNS + dns::header::FLAGS);
    let ar = be16(p, DNS + dns::header::ARCOUNT);
    if flags & 0x8000 != 0
        || be16(p, DNS + dns::header::QDCOUNT) != 1
        || be16(p, DNS + dns::header::ANCOUNT) != 0
        || ar > 1
    {
        return Err(Reason::NotQuery);
    }
    let len = ctx.data_end() - ctx.data();
    let opt = if ar == 1 { dns::OPT_FIXED_LEN } else { 0 };
    let q_end = (len - opt) & MASK;
    if q_end < HEAD + 5 {
        return Err(Reason::Malformed);
    }
    if opt != 0 {
        // Only a bare OPT at the very end (kxdpgun's): anything else is director's to answer.
        let o = at::<{ dns::OPT_FIXED_LEN }>(ctx, q_end, Reason::Malformed)?;
        // SAFETY: `at` checked the OPT's bytes.
        let owner = unsafe { (*o)[0] };
        if owner != 0 || be16(o, 1) != dns::TYPE_OPT || be16(o, 9) != 0 {
            return Err(Reason::Malformed);
        }
    }
    if unsafe { bpf_xdp_adjust_tail(ctx.ctx, RR as i32) } != 0 {
        return Err(Reason::ResizeFailed);
    }
    let p = at::<HEAD>(ctx, 0, Reason::Dropped)?;
    let (d4, d2) = (ld::<u32, HEAD>(p, 0), ld::<u16, HEAD>(p, 4));
    let (s4, s2) = (ld::<u32, HEAD>(p, 6), ld::<u16, HEAD>(p, 10));
    st(p, 0, s4);
    st(p, 4, s2);
    st(p, 6, d4);
    st(p, 10, d2);
    let (src, dst) = (
        ld::<u32, HEAD>(p, ip + ipv4::SRC),
        ld::<u32, HEAD>(p, ip + ipv4::DST),
    );
    st(p, ip + ipv4::SRC, dst);
    st(p, ip + ipv4::DST, src);
    let total = be16(p, ip + ipv4::TOTAL_LEN) + RR as u16;
    put16(p, ip + ipv4::TOTAL_LEN, total);
    put16(p, ip + ipv4::CHECKSUM, 0);
    let h = at::<{ ipv4::LEN }>(ctx, ip, Reason::Dropped)?;
    st(h, ipv4::CHECKSUM, finish_ip(header_sum(h)));
    let p = at::<HEAD>(ctx, 0, Reason::Dropped)?;
    let (sp, dp) = (be16(p, u + udp::SRC_PORT), be16(p, u + udp::DST_PORT));
    put16(p, u + udp::SRC_PORT, dp);
    put16(p, u + udp::DST_PORT, sp);
    put16(p, u + udp::LENGTH, be16(p, u + udp::LENGTH) + RR as u16);
    put16(p, u + udp::CHECKSUM, 0);
    put16(p, DNS + dns::header::FLAGS, flags | 0x8400);
    put16(p, DNS + dns::header::ANCOUNT, 1);
    let r = at::<RR>(ctx, q_end, Reason::Dropped)?;
    st(r, 0, u64::from_le_bytes([0xc0, 0x0c, 0, 1, 0, 1, 0, 0]));
    st(r, 8, u32::from_le_bytes([0, 60, 0, 4]));
    st(r, 12, u32::from_le_bytes([198, 51, 100, 10]));
    if opt != 0 {
        let o = at::<{ dns::OPT_FIXED_LEN }>(ctx, q_end + RR, Reason::Dropped)?;
        st(o, 0, u64::from_le_bytes([0, 0, 41, 0x04, 0xd0, 0, 0, 0]));
        st(o, 7, 0u32);
    }
    Ok(())
}
