//! The server's side of `ipip` forwarding: IPv4 in IPv4 (RFC 2003) and IPv6 in IPv6
//! (RFC 2473) lose their outer header here, so the client's packet (to the VIP, which the
//! server holds on `lo`) reaches the host's stack as if it had arrived bare. Kernels
//! without the ipip and ip6_tunnel modules have nothing else that would do it.
//!
//! Any outer destination is accepted. A kernel tunnel device would only take packets to
//! its local addresses; keeping a list of those in a map is the refinement this leaves
//! out, since whoever can send to this interface can reach the VIP without a tunnel too.
//! What is checked is that the outer header is one the stack itself would accept (and not
//! a fragment, which only the stack can reassemble) and that a whole inner header of the
//! same family follows, so nothing is handed on that the stack could misread. Everything
//! else (VLAN-tagged frames too) is left to the stack exactly as it came.

use aya_ebpf::{helpers::bpf_xdp_adjust_head, programs::XdpContext};
use director_common::{
    checksum::fold,
    counters::Reason,
    headers::{eth, ipip, ipv4, ipv6},
};

use crate::packet::{at, at_fenced, be16, header_sum, ld, put16, st};

const IPV4_MAX_WORDS: usize = ipv4::MAX_LEN / 4;

/// Removes the outer header if the frame is a tunnelled packet of ours; an error means
/// the frame was not touched.
#[inline(always)]
pub fn strip(ctx: &XdpContext) -> Result<(), Reason> {
    let e = at::<{ eth::LEN }>(ctx, 0, Reason::NotIp)?;
    let (outer, ethertype) = match be16(e, eth::TYPE) {
        eth::P_IPV4 => (outer4(ctx)?, eth::P_IPV4),
        eth::P_IPV6 => (outer6(ctx)?, eth::P_IPV6),
        _ => return Err(Reason::NotIp),
    };
    // The Ethernet header is read before the head moves: afterwards its bytes lie in the
    // headroom, out of reach. Nothing is written until the move has succeeded, so a
    // failure leaves the frame as it was.
    let (a, b, c) = (
        ld::<u64, { eth::LEN }>(e, 0),
        ld::<u32, { eth::LEN }>(e, 8),
        ld::<u16, { eth::LEN }>(e, 12),
    );
    // SAFETY: a helper on this program's own context; `outer` is at most 60 and the
    // frame was checked to hold it and more.
    if unsafe { bpf_xdp_adjust_head(ctx.ctx, outer as i32) } != 0 {
        return Err(Reason::ResizeFailed);
    }
    // Every packet pointer is void after the move: checked again from the new start.
    let e = at::<{ eth::LEN }>(ctx, 0, Reason::ResizeFailed)?;
    st(e, 0, a);
    st(e, 8, b);
    st(e, 12, c);
    // Already right for the two same-family tunnels taken; written so that the header
    // always names what now follows it.
    put16(e, eth::TYPE, ethertype);
    Ok(())
}

/// The outer IPv4 header's length, if it carries IPv4 in IPv4 that may be decapsulated.
#[inline(always)]
fn outer4(ctx: &XdpContext) -> Result<usize, Reason> {
    let ip = at::<{ ipv4::LEN }>(ctx, eth::LEN, Reason::Malformed)?;
    // SAFETY: `at` checked the header's fixed part.
    let (vihl, proto) = unsafe { ((*ip)[ipv4::VERSION_IHL], (*ip)[ipv4::PROTOCOL]) };
    if vihl >> 4 != ipv4::VERSION || vihl & 0xf < ipv4::IHL_MIN {
        return Err(Reason::Malformed);
    }
    if proto != ipip::V4 {
        return Err(Reason::NotDns);
    }
    // A fragment's inner packet is incomplete: the stack reassembles, then a tunnel would
    // take it; this program cannot.
    if be16(ip, ipv4::FRAGMENT) & ipv4::FRAGMENT_MASK != 0 {
        return Err(Reason::IpFragmentOrOptions);
    }
    let words = (vihl & 0xf) as usize;
    let hlen = words * 4;
    let total = be16(ip, ipv4::TOTAL_LEN) as usize;
    if total < hlen + ipv4::LEN || ctx.data() + eth::LEN + total > ctx.data_end() {
        return Err(Reason::Malformed);
    }
    // The stack drops an outer header with a bad sum; so does a tunnel device behind it.
    let mut sum = header_sum(ip);
    for i in ipv4::IHL_MIN as usize..IPV4_MAX_WORDS {
        if i >= words {
            break;
        }
        // Fenced: the compiler knows the total length covers this word and would drop the
        // check, which the verifier needs (it does not follow that reasoning).
        let w = at_fenced::<4>(ctx, eth::LEN + i * 4, Reason::Malformed)?;
        sum += ld::<u32, 4>(w, 0) as u64;
    }
    if fold(sum) != 0xffff {
        return Err(Reason::BadChecksum);
    }
    // Forgotten and bounded again, so the verifier sees one offset range, not 11 paths.
    let hlen = core::hint::black_box(hlen).min(ipv4::MAX_LEN);
    let inner = at_fenced::<{ ipv4::LEN }>(ctx, eth::LEN + hlen, Reason::Malformed)?;
    // SAFETY: `at` checked the inner header's fixed part.
    let ivihl = unsafe { (*inner)[ipv4::VERSION_IHL] };
    if ivihl >> 4 != ipv4::VERSION || ivihl & 0xf < ipv4::IHL_MIN {
        return Err(Reason::Malformed);
    }
    // The inner header and packet must lie within the outer packet (and so the frame).
    let room = total - hlen;
    if (ivihl & 0xf) as usize * 4 > room || be16(inner, ipv4::TOTAL_LEN) as usize > room {
        return Err(Reason::Malformed);
    }
    Ok(hlen)
}

/// The outer IPv6 header's length, if it carries IPv6 in IPv6 that may be decapsulated.
/// Only a tunnel header directly after the outer one is taken: director's `ipip` mode
/// sends no extension headers, and an outer fragment header means a fragment.
#[inline(always)]
fn outer6(ctx: &XdpContext) -> Result<usize, Reason> {
    const BOTH: usize = ipv6::LEN * 2;
    let ip = at::<BOTH>(ctx, eth::LEN, Reason::Malformed)?;
    // SAFETY: `at` checked both headers.
    let (v, next, iv) = unsafe {
        (
            (*ip)[ipv6::VERSION_BYTE],
            (*ip)[ipv6::NEXT_HEADER],
            (*ip)[ipv6::LEN + ipv6::VERSION_BYTE],
        )
    };
    if v >> 4 != ipv6::VERSION {
        return Err(Reason::Malformed);
    }
    if next != ipip::V6 {
        return Err(Reason::NotDns);
    }
    // A payload length of 0 (a jumbogram) falls out here as too short.
    let payload = be16(ip, ipv6::PAYLOAD_LEN) as usize;
    if payload < ipv6::LEN || ctx.data() + eth::LEN + ipv6::LEN + payload > ctx.data_end() {
        return Err(Reason::Malformed);
    }
    let inner_payload = be16(ip, ipv6::LEN + ipv6::PAYLOAD_LEN) as usize;
    if iv >> 4 != ipv6::VERSION || ipv6::LEN + inner_payload > payload {
        return Err(Reason::Malformed);
    }
    Ok(ipv6::LEN)
}
