//! Forwarding a VIP's packet to its server: the MSS of a SYN clamped, then either new
//! Ethernet addresses (`l2`) or an outer IP header to the server's address (`ipip`), and
//! out of the interface the controller resolved for that server.

use aya_ebpf::{
    bindings::{xdp_action, xdp_md},
    helpers::{bpf_redirect, bpf_xdp_adjust_head},
    programs::XdpContext,
};
use director_common::{
    checksum::{finish_ip, fold},
    counters::Reason,
    headers::{eth, ipip, ipv4, ipv6, tcp},
    steer::{self, Count, Forward, Hop, VipRecord},
};

use crate::counter::count;
use crate::maps::{DIR_HOPS, DIR_SERVERS, DIR_STEER_COUNTERS};
use crate::packet::{at, at_fenced, be16, header_sum, ld, put16, put32, st};

const OUTER_TTL: u8 = 64;
/// Options a SYN may carry before its MSS: 40 bytes of options hold at most this many
/// that are not NOPs, and NOPs are stepped over in the same count.
const OPTION_STEPS: usize = 12;

/// What forwarding needs of the packet's parse.
#[derive(Clone, Copy)]
pub struct Shape {
    pub v6: bool,
    /// Offset of the IP header.
    pub l3: usize,
    /// A SYN: its MSS may be clamped.
    pub syn: bool,
}

/// Sends the packet to `server` the way `mode` says: an XDP action, or the counter of why
/// it cannot go (dropped by the caller).
#[inline(always)]
pub fn to_server(
    ctx: &XdpContext,
    p: Shape,
    vip: &VipRecord,
    mode: Forward,
    server: u16,
    flow: u32,
) -> Result<u32, Option<Count>> {
    let hop = *DIR_HOPS
        .get(server as u32)
        .ok_or(Some(Count::NoHop))?
        .get(mode, p.v6);
    if hop.ifindex == 0 {
        return Err(Some(Count::NoHop));
    }
    if p.syn && vip.mss != 0 {
        let tcp_at = p.l3 + if p.v6 { ipv6::LEN } else { ipv4::LEN };
        if clamp_mss(ctx.ctx, tcp_at as u64, vip.mss as u64) != 0 {
            count(&DIR_STEER_COUNTERS, Count::MssClamped as u32);
        }
    }
    match mode {
        Forward::L2 => count(&DIR_STEER_COUNTERS, Count::ForwardedL2 as u32),
        Forward::Ipip => {
            let dst = DIR_SERVERS.get(server as u32).ok_or(Some(Count::NoHop))?;
            let src = steer::outer_source(&vip.src, vip.src_bits, p.v6, flow);
            let ok = if p.v6 {
                encap6(ctx, &src, &dst.ipv6, flow)
            } else {
                let mut d = [0u8; 16];
                d[..4].copy_from_slice(&dst.ipv4);
                encap4(ctx, &src, &d)
            };
            ok.map_err(|_| Some(Count::Failed))?;
            count(&DIR_STEER_COUNTERS, Count::ForwardedIpip as u32);
        }
    }
    ethernet(ctx, &hop).map_err(|_| Some(Count::Failed))?;
    // SAFETY: the context's field, readable in XDP.
    let ingress = unsafe { (*ctx.ctx).ingress_ifindex };
    if hop.ifindex == ingress {
        Ok(xdp_action::XDP_TX)
    } else {
        // SAFETY: a helper taking plain values.
        Ok(unsafe { bpf_redirect(hop.ifindex, 0) } as u32)
    }
}

/// Whether the destination MAC is `mac`.
#[inline(always)]
pub fn dst_mac_is(ctx: &XdpContext, mac: &[u8; 6]) -> bool {
    let Ok(e) = at::<{ eth::LEN }>(ctx, 0, Reason::NotDns) else {
        return false;
    };
    let (a, b) = (ld::<u32, { eth::LEN }>(e, 0), ld::<u16, { eth::LEN }>(e, 4));
    // SAFETY: 6 bytes read as a word and a half-word.
    let (ma, mb) = unsafe {
        (
            core::ptr::read_unaligned(mac.as_ptr() as *const u32),
            core::ptr::read_unaligned(mac.as_ptr().add(4) as *const u16),
        )
    };
    a == ma && b == mb
}

#[inline(always)]
fn ethernet(ctx: &XdpContext, hop: &Hop) -> Result<(), Reason> {
    let e = at_fenced::<{ eth::LEN }>(ctx, 0, Reason::Dropped)?;
    // SAFETY: word copies of the 6-byte addresses into the checked header.
    unsafe {
        st(
            e,
            eth::DST,
            core::ptr::read_unaligned(hop.dst_mac.as_ptr() as *const u32),
        );
        st(
            e,
            eth::DST + 4,
            core::ptr::read_unaligned(hop.dst_mac.as_ptr().add(4) as *const u16),
        );
        st(
            e,
            eth::SRC,
            core::ptr::read_unaligned(hop.src_mac.as_ptr() as *const u32),
        );
        st(
            e,
            eth::SRC + 4,
            core::ptr::read_unaligned(hop.src_mac.as_ptr().add(4) as *const u16),
        );
    }
    Ok(())
}

/// IPv4 in IPv4 (RFC 2003): room for the outer header made in front, the Ethernet header
/// written again ahead of it (its addresses are set by `ethernet`).
#[inline(always)]
fn encap4(ctx: &XdpContext, src: &[u8; 16], dst: &[u8; 16]) -> Result<(), Reason> {
    const L: usize = ipv4::LEN;
    // SAFETY: a helper on this program's own context.
    if unsafe { bpf_xdp_adjust_head(ctx.ctx, -(L as i32)) } != 0 {
        return Err(Reason::Dropped);
    }
    let inner = at_fenced::<L>(ctx, eth::LEN + L, Reason::Dropped)?;
    let total = be16(inner, ipv4::TOTAL_LEN);
    let e = at_fenced::<{ eth::LEN }>(ctx, 0, Reason::Dropped)?;
    put16(e, eth::TYPE, eth::P_IPV4);
    let ip = at_fenced::<L>(ctx, eth::LEN, Reason::Dropped)?;
    put32(ip, 0, (0x45 << 24) | (total as u32 + L as u32));
    // No identification, fragments allowed: the inner packet's own DF and the clamped
    // MSS are what keep it whole.
    st::<u32, L>(ip, 4, 0);
    put16(ip, ipv4::TTL, (OUTER_TTL as u16) << 8 | ipip::V4 as u16);
    put16(ip, ipv4::CHECKSUM, 0);
    // SAFETY: 4-byte reads of the 16-byte addresses.
    unsafe {
        st(
            ip,
            ipv4::SRC,
            core::ptr::read_unaligned(src.as_ptr() as *const u32),
        );
        st(
            ip,
            ipv4::DST,
            core::ptr::read_unaligned(dst.as_ptr() as *const u32),
        );
    }
    st(ip, ipv4::CHECKSUM, finish_ip(header_sum(ip)));
    Ok(())
}

/// IPv6 in IPv6 (RFC 2473), the flow label from the flow's hash so that routers and the
/// server's NIC that hash on it spread flows too.
#[inline(always)]
fn encap6(ctx: &XdpContext, src: &[u8; 16], dst: &[u8; 16], flow: u32) -> Result<(), Reason> {
    const L: usize = ipv6::LEN;
    // SAFETY: a helper on this program's own context.
    if unsafe { bpf_xdp_adjust_head(ctx.ctx, -(L as i32)) } != 0 {
        return Err(Reason::Dropped);
    }
    let inner = at_fenced::<L>(ctx, eth::LEN + L, Reason::Dropped)?;
    let payload = be16(inner, ipv6::PAYLOAD_LEN);
    let e = at_fenced::<{ eth::LEN }>(ctx, 0, Reason::Dropped)?;
    put16(e, eth::TYPE, eth::P_IPV6);
    let ip = at_fenced::<L>(ctx, eth::LEN, Reason::Dropped)?;
    put32(ip, 0, (6 << 28) | (flow & 0xf_ffff));
    put16(ip, ipv6::PAYLOAD_LEN, payload.wrapping_add(L as u16));
    put16(
        ip,
        ipv6::NEXT_HEADER,
        (ipip::V6 as u16) << 8 | OUTER_TTL as u16,
    );
    // SAFETY: 8-byte reads of the 16-byte addresses.
    unsafe {
        let (s, d) = (src.as_ptr() as *const u64, dst.as_ptr() as *const u64);
        st(ip, ipv6::SRC, core::ptr::read_unaligned(s));
        st(ip, ipv6::SRC + 8, core::ptr::read_unaligned(s.add(1)));
        st(ip, ipv6::DST, core::ptr::read_unaligned(d));
        st(ip, ipv6::DST + 8, core::ptr::read_unaligned(d.add(1)));
    }
    Ok(())
}

/// Lowers a SYN's MSS option to `limit` and corrects the TCP checksum (RFC 1624); 1 if it
/// changed. The TCP header is at `tcp_at`.
///
/// Not inlined: the option walk is verified once, as a function of its own, whichever
/// path reached it.
#[inline(never)]
fn clamp_mss(raw: *mut xdp_md, tcp_at: u64, limit: u64) -> u64 {
    let ctx = XdpContext::new(raw);
    // Bounded for the verifier: an Ethernet and an IPv6 header are all that come before.
    let tcp_at = core::hint::black_box(tcp_at as usize).min(eth::LEN + ipv6::LEN);
    let Ok(h) = at::<{ tcp::LEN }>(&ctx, tcp_at, Reason::NotDns) else {
        return 0;
    };
    // SAFETY: `at` checked the header.
    let end = (unsafe { (*h)[tcp::DATA_OFFSET] } >> 4) as usize * 4;
    let mut off = tcp::LEN;
    for _ in 0..OPTION_STEPS {
        if off + tcp::OPT_MSS_LEN as usize > end {
            return 0;
        }
        // The option's offset forgotten and bounded again, within the longest header.
        let o = core::hint::black_box(off).min(tcp::MAX_LEN - tcp::OPT_MSS_LEN as usize);
        let Ok(opt) = at::<4>(&ctx, tcp_at + o, Reason::NotDns) else {
            return 0;
        };
        // SAFETY: `at` checked the 4 bytes.
        let (kind, len) = unsafe { ((*opt)[0], (*opt)[1]) };
        match kind {
            tcp::OPT_END => return 0,
            tcp::OPT_NOP => off += 1,
            tcp::OPT_MSS => {
                if len != tcp::OPT_MSS_LEN {
                    return 0;
                }
                let old = be16(opt, 2);
                let new = steer::clamp_mss(old, limit as u16);
                if new == old {
                    return 0;
                }
                put16(opt, 2, new);
                // A value at an odd offset from the header's start lies across two words
                // of the sum, byte-swapped (RFC 1071 §2(B)).
                let (o16, n16) = if o & 1 == 1 {
                    (old.swap_bytes(), new.swap_bytes())
                } else {
                    (old, new)
                };
                let Ok(h) = at::<{ tcp::LEN }>(&ctx, tcp_at, Reason::NotDns) else {
                    return 0;
                };
                let sum = !be16(h, tcp::CHECKSUM) as u64 + !o16 as u64 + n16 as u64;
                put16(h, tcp::CHECKSUM, !fold(sum));
                return 1;
            }
            _ => {
                if len < 2 {
                    return 0;
                }
                off += len as usize;
            }
        }
    }
    0
}
