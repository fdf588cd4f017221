//! Parse for SYN steering: from the Ethernet header to a TCP flow's key, or, for an ICMP
//! error about a packet a server sent from a VIP, the key of the flow it belongs to.
//! Nothing here writes to the packet.

use aya_ebpf::programs::XdpContext;
use director_common::{
    counters::Reason,
    headers::{eth, icmp, icmpv6, ipv4, ipv6, tcp},
    steer::{FlowKey, FAMILY_V4, FAMILY_V6, TCP_PROTOCOL},
};

use crate::packet::{at, be16, ld};

/// A packet that may belong to a VIP.
pub struct Packet {
    pub v6: bool,
    /// Offset of the (outer) IP header: the packet is untagged Ethernet.
    pub l3: usize,
    /// A SYN without ACK: the start of a connection.
    pub syn: bool,
    /// An ICMP error about a flow, not the flow's own packet.
    pub icmp: bool,
    pub key: FlowKey,
}

/// The flow a TCP or ICMP packet belongs to, or None for anything else (VLAN-tagged
/// frames, IPv4 options and fragments, IPv6 extension headers are left to the host).
#[inline(always)]
pub fn packet(ctx: &XdpContext) -> Option<Packet> {
    let frame = at::<{ eth::LEN }>(ctx, 0, Reason::NotDns).ok()?;
    let l3 = eth::LEN;
    match be16(frame, eth::TYPE) {
        eth::P_IPV4 => v4(ctx, l3),
        eth::P_IPV6 => v6(ctx, l3),
        _ => None,
    }
}

#[inline(always)]
fn v4(ctx: &XdpContext, l3: usize) -> Option<Packet> {
    let ip = at::<{ ipv4::LEN }>(ctx, l3, Reason::NotDns).ok()?;
    // SAFETY: `at` checked the header is in the packet.
    let (vihl, proto) = unsafe { ((*ip)[ipv4::VERSION_IHL], (*ip)[ipv4::PROTOCOL]) };
    if vihl != (ipv4::VERSION << 4 | ipv4::IHL_MIN)
        || be16(ip, ipv4::FRAGMENT) & ipv4::FRAGMENT_MASK != 0
    {
        return None;
    }
    let l4 = l3 + ipv4::LEN;
    let mut key = FlowKey {
        family: FAMILY_V4,
        proto: TCP_PROTOCOL,
        ..FlowKey::default()
    };
    if proto == tcp::PROTOCOL {
        let hdr = at::<{ tcp::LEN }>(ctx, l4, Reason::NotDns).ok()?;
        put_v4(&mut key.client, ld::<u32, { ipv4::LEN }>(ip, ipv4::SRC));
        put_v4(&mut key.vip, ld::<u32, { ipv4::LEN }>(ip, ipv4::DST));
        key.client_port = ld(hdr, tcp::SRC_PORT);
        key.vip_port = ld(hdr, tcp::DST_PORT);
        return Some(Packet {
            v6: false,
            l3,
            syn: is_syn(hdr),
            icmp: false,
            key,
        });
    }
    if proto != icmp::PROTOCOL {
        return None;
    }
    // The error quotes the server's packet: VIP → client. Its header and the first 8
    // bytes of TCP (the ports) are all an ICMP error must carry.
    const QUOTE: usize = icmp::LEN + ipv4::LEN + 8;
    let quote = at::<QUOTE>(ctx, l4, Reason::NotDns).ok()?;
    // SAFETY: `at` checked the quote is in the packet.
    let (ty, code, ivihl, iproto) = unsafe {
        (
            (*quote)[icmp::TYPE],
            (*quote)[icmp::CODE],
            (*quote)[icmp::LEN + ipv4::VERSION_IHL],
            (*quote)[icmp::LEN + ipv4::PROTOCOL],
        )
    };
    if ty != icmp::UNREACHABLE
        || code != icmp::FRAG_NEEDED
        || ivihl != (ipv4::VERSION << 4 | ipv4::IHL_MIN)
        || iproto != tcp::PROTOCOL
    {
        return None;
    }
    put_v4(&mut key.vip, ld::<u32, QUOTE>(quote, icmp::LEN + ipv4::SRC));
    put_v4(
        &mut key.client,
        ld::<u32, QUOTE>(quote, icmp::LEN + ipv4::DST),
    );
    let quoted_tcp = icmp::LEN + ipv4::LEN;
    key.vip_port = ld(quote, quoted_tcp + tcp::SRC_PORT);
    key.client_port = ld(quote, quoted_tcp + tcp::DST_PORT);
    Some(Packet {
        v6: false,
        l3,
        syn: false,
        icmp: true,
        key,
    })
}

#[inline(always)]
fn v6(ctx: &XdpContext, l3: usize) -> Option<Packet> {
    let ip = at::<{ ipv6::LEN }>(ctx, l3, Reason::NotDns).ok()?;
    // SAFETY: `at` checked the header is in the packet.
    let (version, next) = unsafe { ((*ip)[ipv6::VERSION_BYTE] >> 4, (*ip)[ipv6::NEXT_HEADER]) };
    if version != ipv6::VERSION {
        return None;
    }
    let l4 = l3 + ipv6::LEN;
    let mut key = FlowKey {
        family: FAMILY_V6,
        proto: TCP_PROTOCOL,
        ..FlowKey::default()
    };
    if next == tcp::PROTOCOL {
        let hdr = at::<{ tcp::LEN }>(ctx, l4, Reason::NotDns).ok()?;
        put_v6(&mut key.client, ip, ipv6::SRC);
        put_v6(&mut key.vip, ip, ipv6::DST);
        key.client_port = ld(hdr, tcp::SRC_PORT);
        key.vip_port = ld(hdr, tcp::DST_PORT);
        return Some(Packet {
            v6: true,
            l3,
            syn: is_syn(hdr),
            icmp: false,
            key,
        });
    }
    if next != icmpv6::PROTOCOL {
        return None;
    }
    const QUOTE: usize = icmpv6::LEN + ipv6::LEN + 8;
    let quote = at::<QUOTE>(ctx, l4, Reason::NotDns).ok()?;
    // SAFETY: `at` checked the quote is in the packet.
    let (ty, iversion, inext) = unsafe {
        (
            (*quote)[icmpv6::TYPE],
            (*quote)[icmpv6::LEN + ipv6::VERSION_BYTE] >> 4,
            (*quote)[icmpv6::LEN + ipv6::NEXT_HEADER],
        )
    };
    if ty != icmpv6::TOO_BIG || iversion != ipv6::VERSION || inext != tcp::PROTOCOL {
        return None;
    }
    put_v6(&mut key.vip, quote, icmpv6::LEN + ipv6::SRC);
    put_v6(&mut key.client, quote, icmpv6::LEN + ipv6::DST);
    let quoted_tcp = icmpv6::LEN + ipv6::LEN;
    key.vip_port = ld(quote, quoted_tcp + tcp::SRC_PORT);
    key.client_port = ld(quote, quoted_tcp + tcp::DST_PORT);
    Some(Packet {
        v6: true,
        l3,
        syn: false,
        icmp: true,
        key,
    })
}

#[inline(always)]
fn is_syn(hdr: *const [u8; tcp::LEN]) -> bool {
    // SAFETY: `at` checked the header is in the packet.
    let flags = unsafe { (*hdr)[tcp::FLAGS] };
    flags & (tcp::SYN | tcp::ACK) == tcp::SYN
}

/// Word copies into the key: byte copies would be a load and a store per byte.
#[inline(always)]
fn put_v4(dst: &mut [u8; 16], w: u32) {
    // SAFETY: 4 bytes within the 16-byte array.
    unsafe { core::ptr::write_unaligned(dst.as_mut_ptr() as *mut u32, w) }
}

#[inline(always)]
fn put_v6<const N: usize>(dst: &mut [u8; 16], p: *const [u8; N], at: usize) {
    let (lo, hi) = (ld::<u64, N>(p, at), ld::<u64, N>(p, at + 8));
    // SAFETY: two words within the 16-byte array.
    unsafe {
        core::ptr::write_unaligned(dst.as_mut_ptr() as *mut u64, lo);
        core::ptr::write_unaligned((dst.as_mut_ptr() as *mut u64).add(1), hi);
    }
}
