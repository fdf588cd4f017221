//! Passive RTT where the observer is not the connections' end (`director_rtt_tc`, tc on
//! both directions of a site gateway's interface, for `director-ctl agent --observe`): a
//! server's SYN-ACK passing starts the clock, the client's ACK of it stops it, and the
//! time between is the client's RTT from here, added to its prefix's histogram in
//! `DIR_RTT` as the sock_ops program adds the kernel's. Nothing about a packet changes.
//!
//! Headers are read relative to the network header (`bpf_skb_load_bytes_relative`), so the
//! same program works on Ethernet and on layer-3 devices (tun, wireguard), whatever the
//! link header, and on non-linear packets.

use aya_ebpf::{
    bindings::{bpf_hdr_start_off::BPF_HDR_START_NET, BPF_ANY},
    helpers::{bpf_ktime_get_ns, bpf_skb_load_bytes_relative},
    programs::TcContext,
    EbpfContext,
};
use director_common::headers::{eth, ipv4, ipv6, tcp};
use director_common::rtt::{
    self, handshake_end, Count, HandshakeEnd, HandshakeKey, SynAckSeen, FAMILY_V4, FAMILY_V6,
};

use crate::counter::count;
use crate::maps::{DIR_RTT_COUNTERS, DIR_RTT_SYNACK};
use crate::rtt::{add, generation};

/// A TCP segment's addresses, ports, flags and numbers, as the wire has them.
struct Segment {
    family: u8,
    src: [u32; 4],
    dst: [u32; 4],
    src_port: u16,
    dst_port: u16,
    flags: u8,
    seq: u32,
    ack: u32,
}

/// Which end of a [`Segment`] is the client's.
#[derive(Clone, Copy)]
enum Client {
    Source,
    Destination,
}

impl Segment {
    /// The handshake this segment belongs to, named from the client's side.
    #[inline(always)]
    fn key(&self, client: Client) -> HandshakeKey {
        let (client_port, server_port, client, server) = match client {
            Client::Source => (self.src_port, self.dst_port, self.src, self.dst),
            Client::Destination => (self.dst_port, self.src_port, self.dst, self.src),
        };
        HandshakeKey {
            family: self.family,
            _pad: [0; 3],
            client_port,
            server_port,
            client,
            server,
        }
    }
}

/// Looks at one packet in either direction.
#[inline(always)]
pub fn observe(ctx: &TcContext) {
    let Some(s) = segment(ctx) else {
        return;
    };
    let syn_ack = tcp::SYN | tcp::ACK;
    if s.flags & syn_ack == syn_ack {
        syn_ack_passed(&s);
    } else if s.flags & (tcp::SYN | tcp::RST | tcp::FIN | tcp::ACK) == tcp::ACK {
        ack_passed(&s);
    }
}

/// A server's SYN-ACK: the clock starts, or, if the same SYN-ACK passed before, the
/// handshake is marked as resent (its ACK will give no sample).
#[inline(always)]
fn syn_ack_passed(s: &Segment) {
    // The SYN-ACK goes to the client.
    let key = s.key(Client::Destination);
    let ack = s.seq.wrapping_add(1);
    if let Some(seen) = DIR_RTT_SYNACK.get_ptr_mut(key) {
        // SAFETY: the map's value for this program run; two CPUs racing on one handshake's
        // retransmission can at worst both mark it.
        let seen = unsafe { &mut *seen };
        if seen.ack == ack {
            seen.resent = 1;
            return;
        }
    }
    count(&DIR_RTT_COUNTERS, Count::SynAcks as u32);
    let seen = SynAckSeen {
        // SAFETY: a helper without arguments.
        at_ns: unsafe { bpf_ktime_get_ns() },
        ack,
        resent: 0,
    };
    // A full map evicts the oldest waiting handshake (most likely one that never ends).
    let _ = DIR_RTT_SYNACK.insert(key, seen, u64::from(BPF_ANY));
}

/// A client's ACK: if it ends a handshake whose SYN-ACK passed here, that is a sample.
#[inline(always)]
fn ack_passed(s: &Segment) {
    let key = s.key(Client::Source);
    // Most ACKs are of established connections: one lookup that misses.
    let Some(seen) = DIR_RTT_SYNACK.get_ptr(key) else {
        return;
    };
    // SAFETY: the map's value for this program run.
    let seen = unsafe { *seen };
    // SAFETY: a helper without arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    let us = match handshake_end(&seen, s.ack, now) {
        HandshakeEnd::NotIt => return,
        HandshakeEnd::Ambiguous => {
            count(&DIR_RTT_COUNTERS, Count::NoRtt as u32);
            let _ = DIR_RTT_SYNACK.remove(key);
            return;
        }
        HandshakeEnd::Rtt(us) => us,
    };
    // Removed first: a duplicate of this ACK (or a later one) must not count again.
    if DIR_RTT_SYNACK.remove(key).is_err() {
        return;
    }
    let gen = generation();
    if add(&rtt::key_of(gen, s.family, s.src), us) {
        count(&DIR_RTT_COUNTERS, rtt::samples_slot(gen));
    } else {
        count(&DIR_RTT_COUNTERS, Count::NoEntry as u32);
    }
}

/// Reads `buf.len()` bytes at `offset` from the network header; false if the packet is
/// shorter.
#[inline(always)]
fn load(ctx: &TcContext, offset: u32, buf: &mut [u8]) -> bool {
    // SAFETY: the context's skb and a buffer of exactly the length given.
    unsafe {
        bpf_skb_load_bytes_relative(
            ctx.as_ptr(),
            offset,
            buf.as_mut_ptr().cast(),
            buf.len() as u32,
            BPF_HDR_START_NET,
        ) == 0
    }
}

#[inline(always)]
fn word(b: &[u8], at: usize) -> u32 {
    match b.get(at..at + 4) {
        Some(w) => u32::from_ne_bytes([w[0], w[1], w[2], w[3]]),
        None => 0,
    }
}

#[inline(always)]
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be(word(b, at))
}

#[inline(always)]
fn port(b: &[u8], at: usize) -> u16 {
    match b.get(at..at + 2) {
        Some(p) => u16::from_ne_bytes([p[0], p[1]]),
        None => 0,
    }
}

/// The packet's TCP segment, if it is one: IPv4 (not a fragment past the first) or IPv6
/// whose first next header is TCP. Anything else (other protocols, extension headers,
/// truncated) is not looked at.
#[inline(always)]
fn segment(ctx: &TcContext) -> Option<Segment> {
    // skb->protocol: the ethertype in network order, whatever the device's link header.
    let proto = u16::from_be(ctx.skb.protocol() as u16);
    let (family, tcp_at, src, dst) = if proto == eth::P_IPV4 {
        let mut ip = [0u8; ipv4::LEN];
        if !load(ctx, 0, &mut ip) {
            return None;
        }
        let ihl = ip[ipv4::VERSION_IHL] & 0x0f;
        if ip[ipv4::VERSION_IHL] >> 4 != ipv4::VERSION
            || ihl < ipv4::IHL_MIN
            || ip[ipv4::PROTOCOL] != tcp::PROTOCOL
            || u16::from_be_bytes([ip[ipv4::FRAGMENT], ip[ipv4::FRAGMENT + 1]]) & 0x1fff != 0
        {
            return None;
        }
        (
            FAMILY_V4,
            u32::from(ihl) * 4,
            [word(&ip, ipv4::SRC), 0, 0, 0],
            [word(&ip, ipv4::DST), 0, 0, 0],
        )
    } else if proto == eth::P_IPV6 {
        let mut ip = [0u8; ipv6::LEN];
        if !load(ctx, 0, &mut ip) {
            return None;
        }
        if ip[ipv6::VERSION_BYTE] >> 4 != ipv6::VERSION || ip[ipv6::NEXT_HEADER] != tcp::PROTOCOL {
            return None;
        }
        let addr = |at: usize| {
            [
                word(&ip, at),
                word(&ip, at + 4),
                word(&ip, at + 8),
                word(&ip, at + 12),
            ]
        };
        (
            FAMILY_V6,
            ipv6::LEN as u32,
            addr(ipv6::SRC),
            addr(ipv6::DST),
        )
    } else {
        return None;
    };
    let mut hdr = [0u8; tcp::LEN];
    if !load(ctx, tcp_at, &mut hdr) {
        return None;
    }
    Some(Segment {
        family,
        src,
        dst,
        src_port: port(&hdr, tcp::SRC_PORT),
        dst_port: port(&hdr, tcp::DST_PORT),
        flags: hdr[tcp::FLAGS],
        seq: be32(&hdr, tcp::SEQ),
        ack: be32(&hdr, tcp::ACK_NUM),
    })
}
