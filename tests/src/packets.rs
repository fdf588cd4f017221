//! Test frames: Ethernet (optionally with one 802.1Q tag) / IPv4 or IPv6 / UDP (or TCP)
//! carrying DNS messages built with hickory-proto, and the reverse: taking a frame apart
//! and checking its IPv4 and UDP checksums.
//!
//! Nothing here uses director-common's wire or checksum code: this module is the
//! independent reference the XDP program is checked against.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query};
use hickory_proto::rr::rdata::opt::{ClientSubnet, EdnsOption};
use hickory_proto::rr::{Name, RecordType};

pub const ETH_LEN: usize = 14;
pub const VLAN_LEN: usize = 4;
pub const IPV4_LEN: usize = 20;
pub const IPV6_LEN: usize = 40;
pub const UDP_LEN: usize = 8;
pub const TCP_LEN: usize = 20;
pub const DNS_HEADER_LEN: usize = 12;

pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
pub const ETHERTYPE_VLAN: u16 = 0x8100;
pub const ETHERTYPE_ARP: u16 = 0x0806;
pub const IPPROTO_TCP: u8 = 6;
pub const IPPROTO_UDP: u8 = 17;

/// IPv4 flags/fragment-offset field: Don't Fragment, which DNS clients commonly set.
pub const IPV4_DF: u16 = 0x4000;
/// More Fragments.
pub const IPV4_MF: u16 = 0x2000;

/// Locally administered MACs.
pub const CLIENT_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x01];
pub const SERVER_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x53];
pub const CLIENT_PORT: u16 = 40_000;
pub const DNS_PORT: u16 = 53;
/// director's own addresses: the destination of queries.
pub const SERVER_V4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 53);
pub const SERVER_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x53, 0, 0, 0, 0, 0x53);

/// One direction of a conversation: client to server, both of one family, and an optional
/// VLAN id for the tag.
#[derive(Clone, Copy, Debug)]
pub struct Flow {
    pub client: SocketAddr,
    pub server: SocketAddr,
    pub vlan: Option<u16>,
}

impl Flow {
    pub fn v4(client: Ipv4Addr) -> Flow {
        Flow {
            client: (client, CLIENT_PORT).into(),
            server: (SERVER_V4, DNS_PORT).into(),
            vlan: None,
        }
    }

    pub fn v6(client: Ipv6Addr) -> Flow {
        Flow {
            client: (client, CLIENT_PORT).into(),
            server: (SERVER_V6, DNS_PORT).into(),
            vlan: None,
        }
    }

    pub fn with_vlan(mut self, id: u16) -> Flow {
        self.vlan = Some(id);
        self
    }

    pub fn to_port(mut self, port: u16) -> Flow {
        self.server.set_port(port);
        self
    }

    pub fn is_v6(&self) -> bool {
        self.client.is_ipv6()
    }
}

// ---------------------------------------------------------------------------------------
// Checksums (RFC 1071), written out here rather than taken from director-common.

/// One's-complement sum of big-endian 16-bit words; an odd last byte is padded with zero.
fn ones_sum(data: &[u8]) -> u64 {
    data.chunks(2)
        .map(|w| u64::from(w[0]) << 8 | u64::from(*w.get(1).unwrap_or(&0)))
        .sum()
}

fn fold(mut sum: u64) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// The checksum over the concatenation of `parts`, each of which must have even length
/// except the last (true of the pseudo-header and headers used here).
fn checksum(parts: &[&[u8]]) -> u16 {
    let whole: Vec<u8> = parts.concat();
    !fold(ones_sum(&whole))
}

/// The TCP/UDP pseudo-header (RFC 768 for IPv4, RFC 8200 §8.1 for IPv6).
fn pseudo_header(src: IpAddr, dst: IpAddr, proto: u8, len: usize) -> Vec<u8> {
    let mut p = Vec::with_capacity(40);
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            p.extend(s.octets());
            p.extend(d.octets());
            p.extend([0, proto]);
            p.extend((len as u16).to_be_bytes());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            p.extend(s.octets());
            p.extend(d.octets());
            p.extend((len as u32).to_be_bytes());
            p.extend([0, 0, 0, proto]);
        }
        _ => panic!("pseudo-header with mixed families: {src} -> {dst}"),
    }
    p
}

/// A transport checksum (field zeroed in `segment`); 0 is sent as 0xffff (RFC 768).
fn transport_checksum(src: IpAddr, dst: IpAddr, proto: u8, segment: &[u8]) -> u16 {
    match checksum(&[&pseudo_header(src, dst, proto, segment.len()), segment]) {
        0 => 0xffff,
        c => c,
    }
}

// ---------------------------------------------------------------------------------------
// Building frames.

pub fn udp_segment(flow: &Flow, payload: &[u8]) -> Vec<u8> {
    let len = UDP_LEN + payload.len();
    let mut s = Vec::with_capacity(len);
    s.extend(flow.client.port().to_be_bytes());
    s.extend(flow.server.port().to_be_bytes());
    s.extend((len as u16).to_be_bytes());
    s.extend([0, 0]);
    s.extend(payload);
    let c = transport_checksum(flow.client.ip(), flow.server.ip(), IPPROTO_UDP, &s);
    s[6..8].copy_from_slice(&c.to_be_bytes());
    s
}

/// A TCP segment (PSH+ACK) carrying `payload`, e.g. a length-prefixed DNS message.
pub fn tcp_segment(flow: &Flow, payload: &[u8]) -> Vec<u8> {
    let mut s = Vec::with_capacity(TCP_LEN + payload.len());
    s.extend(flow.client.port().to_be_bytes());
    s.extend(flow.server.port().to_be_bytes());
    s.extend(1u32.to_be_bytes()); // sequence
    s.extend(1u32.to_be_bytes()); // acknowledgement
    s.extend([(TCP_LEN as u8 / 4) << 4, 0x18]); // data offset, PSH|ACK
    s.extend(65535u16.to_be_bytes()); // window
    s.extend([0, 0, 0, 0]); // checksum, urgent pointer
    s.extend(payload);
    let c = transport_checksum(flow.client.ip(), flow.server.ip(), IPPROTO_TCP, &s);
    s[16..18].copy_from_slice(&c.to_be_bytes());
    s
}

fn ethernet_header(flow: &Flow, ethertype: u16) -> Vec<u8> {
    let mut h = Vec::with_capacity(ETH_LEN + VLAN_LEN);
    h.extend(SERVER_MAC);
    h.extend(CLIENT_MAC);
    if let Some(id) = flow.vlan {
        h.extend(ETHERTYPE_VLAN.to_be_bytes());
        h.extend((id & 0x0fff).to_be_bytes()); // priority 0, DEI 0
    }
    h.extend(ethertype.to_be_bytes());
    h
}

fn ipv4_header(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    proto: u8,
    l4_len: usize,
    options: &[u8],
    flags_fragment: u16,
) -> Vec<u8> {
    assert!(
        options.len().is_multiple_of(4) && options.len() <= 40,
        "IPv4 options come in 32-bit words, at most 40 bytes"
    );
    let hlen = IPV4_LEN + options.len();
    let mut h = Vec::with_capacity(hlen);
    h.push(0x40 | (hlen / 4) as u8);
    h.push(0); // DSCP/ECN
    h.extend(((hlen + l4_len) as u16).to_be_bytes());
    h.extend(0x1c2bu16.to_be_bytes()); // identification
    h.extend(flags_fragment.to_be_bytes());
    h.push(61); // TTL: anything but what an answer gets, so a copied TTL shows
    h.push(proto);
    h.extend([0, 0]);
    h.extend(src.octets());
    h.extend(dst.octets());
    h.extend(options);
    let c = checksum(&[&h]);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h
}

fn ipv6_header(src: Ipv6Addr, dst: Ipv6Addr, next: u8, l4_len: usize) -> Vec<u8> {
    let mut h = Vec::with_capacity(IPV6_LEN);
    h.extend([0x60, 0x00, 0x12, 0x34]); // version 6, a flow label
    h.extend((l4_len as u16).to_be_bytes());
    h.push(next);
    h.push(61); // hop limit, see ipv4_header
    h.extend(src.octets());
    h.extend(dst.octets());
    h
}

/// A frame from the client to the server with `l4` as the IP payload. For IPv4,
/// `options` (a multiple of 4 bytes) and the flags/fragment field can be chosen.
pub fn ip_frame_with(
    flow: &Flow,
    proto: u8,
    l4: &[u8],
    options: &[u8],
    flags_fragment: u16,
) -> Vec<u8> {
    let mut f = match (flow.client.ip(), flow.server.ip()) {
        (IpAddr::V4(c), IpAddr::V4(s)) => {
            let mut f = ethernet_header(flow, ETHERTYPE_IPV4);
            f.extend(ipv4_header(c, s, proto, l4.len(), options, flags_fragment));
            f
        }
        (IpAddr::V6(c), IpAddr::V6(s)) => {
            assert!(
                options.is_empty() && flags_fragment == 0,
                "IPv6 frames have no IPv4 options"
            );
            let mut f = ethernet_header(flow, ETHERTYPE_IPV6);
            f.extend(ipv6_header(c, s, proto, l4.len()));
            f
        }
        _ => panic!("a flow with mixed families: {flow:?}"),
    };
    f.extend(l4);
    f
}

pub fn ip_frame(flow: &Flow, proto: u8, l4: &[u8]) -> Vec<u8> {
    let flags = if flow.is_v6() { 0 } else { IPV4_DF };
    ip_frame_with(flow, proto, l4, &[], flags)
}

/// The usual case: a UDP datagram carrying `payload` (a DNS message).
pub fn udp_frame(flow: &Flow, payload: &[u8]) -> Vec<u8> {
    ip_frame(flow, IPPROTO_UDP, &udp_segment(flow, payload))
}

/// A non-IP frame (ARP request shape; the content does not matter to director).
pub fn arp_frame() -> Vec<u8> {
    let mut f = Vec::new();
    f.extend([0xff; 6]);
    f.extend(CLIENT_MAC);
    f.extend(ETHERTYPE_ARP.to_be_bytes());
    f.extend([0, 1, 8, 0, 6, 4, 0, 1]);
    f.extend(CLIENT_MAC);
    f.extend([192, 0, 2, 10]);
    f.extend([0; 6]);
    f.extend(SERVER_V4.octets());
    f
}

// ---------------------------------------------------------------------------------------
// DNS messages (hickory-proto), and the few raw edits hickory cannot express.

/// A standard query with RD set. `name` keeps its letter case on the wire.
pub fn query(id: u16, name: &str, rtype: RecordType) -> Message {
    let mut m = Message::new();
    m.set_id(id)
        .set_message_type(MessageType::Query)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(true);
    m.add_query(Query::query(
        Name::from_ascii(name).expect("a valid test name"),
        rtype,
    ));
    m
}

/// Adds an OPT record (version 0, DO clear) advertising `max_payload`.
pub fn with_edns(mut m: Message, max_payload: u16) -> Message {
    let mut e = Edns::new();
    e.set_max_payload(max_payload)
        .set_version(0)
        .set_dnssec_ok(false);
    m.set_edns(e);
    m
}

/// Adds an OPT record with an EDNS Client Subnet option. hickory writes the first
/// ceil(source/8) bytes of `addr` as given, so host bits past the prefix can be sent.
pub fn with_ecs(m: Message, addr: IpAddr, source: u8, scope: u8) -> Message {
    let mut m = if m.extensions().is_some() {
        m
    } else {
        with_edns(m, 1232)
    };
    m.extensions_mut()
        .as_mut()
        .expect("OPT present")
        .options_mut()
        .insert(EdnsOption::Subnet(ClientSubnet::new(addr, source, scope)));
    m
}

pub fn wire(m: &Message) -> Vec<u8> {
    m.to_vec().expect("hickory encodes the test message")
}

/// Where the (uncompressed) question ends: after its name, type and class.
pub fn question_end(dns: &[u8]) -> Option<usize> {
    let mut at = DNS_HEADER_LEN;
    loop {
        let len = *dns.get(at)? as usize;
        if len & 0xc0 != 0 {
            return None;
        }
        at += 1 + len;
        if len == 0 {
            break;
        }
    }
    (at + 4 <= dns.len()).then_some(at + 4)
}

/// Appends an EDNS option to a message whose last record is its OPT (as hickory writes
/// queries), fixing up RDLENGTH. For what hickory will not write: a repeated option.
pub fn push_edns_option(dns: &mut Vec<u8>, code: u16, data: &[u8]) {
    let opt = question_end(dns).expect("a question");
    assert_eq!(
        u16::from_be_bytes([dns[10], dns[11]]),
        1,
        "one additional record, the OPT"
    );
    assert_eq!(
        &dns[opt..opt + 3],
        &[0, 0, 41],
        "the OPT record follows the question"
    );
    let rdlen = u16::from_be_bytes([dns[opt + 9], dns[opt + 10]]) as usize;
    assert_eq!(
        opt + 11 + rdlen,
        dns.len(),
        "the OPT record ends the message"
    );
    dns.extend(code.to_be_bytes());
    dns.extend((data.len() as u16).to_be_bytes());
    dns.extend(data);
    let rdlen = (rdlen + 4 + data.len()) as u16;
    dns[opt + 9..opt + 11].copy_from_slice(&rdlen.to_be_bytes());
}

/// An OPT record read straight off the wire (RFC 6891 §6.1.2), options in order and
/// repeats kept: what hickory's option map cannot show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawOpt {
    pub owner: u8,
    pub rtype: u16,
    /// The CLASS field: the sender's UDP payload size.
    pub udp_size: u16,
    /// The TTL field: extended RCODE, version, DO and Z.
    pub ttl: u32,
    pub options: Vec<(u16, Vec<u8>)>,
    /// Offset just past the record.
    pub end: usize,
}

impl RawOpt {
    pub fn version(&self) -> u8 {
        (self.ttl >> 16) as u8
    }
    pub fn dnssec_ok(&self) -> bool {
        self.ttl & 0x8000 != 0
    }
    pub fn option(&self, code: u16) -> Option<&[u8]> {
        self.options
            .iter()
            .find(|(c, _)| *c == code)
            .map(|(_, d)| d.as_slice())
    }
}

/// Reads an OPT record (root owner, one byte) at `at`.
pub fn read_opt(dns: &[u8], at: usize) -> Result<RawOpt, String> {
    if dns.len() < at + 11 {
        return Err(format!(
            "OPT record at {at} cut short ({} bytes)",
            dns.len()
        ));
    }
    let rdlen = be16(dns, at + 9) as usize;
    let end = at + 11 + rdlen;
    if dns.len() < end {
        return Err(format!("OPT RDATA of {rdlen} bytes runs past the message"));
    }
    let mut options = Vec::new();
    let mut o = at + 11;
    while o < end {
        if o + 4 > end {
            return Err("an EDNS option header runs past the OPT RDATA".into());
        }
        let (code, len) = (be16(dns, o), be16(dns, o + 2) as usize);
        if o + 4 + len > end {
            return Err(format!("EDNS option {code} runs past the OPT RDATA"));
        }
        options.push((code, dns[o + 4..o + 4 + len].to_vec()));
        o += 4 + len;
    }
    Ok(RawOpt {
        owner: dns[at],
        rtype: be16(dns, at + 1),
        udp_size: be16(dns, at + 3),
        ttl: u32::from_be_bytes(dns[at + 5..at + 9].try_into().unwrap()),
        options,
        end,
    })
}

/// The body of an ECS option exactly as given (RFC 7871 §6).
pub fn ecs_body(family: u16, source: u8, scope: u8, addr: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(4 + addr.len());
    b.extend(family.to_be_bytes());
    b.push(source);
    b.push(scope);
    b.extend(addr);
    b
}

// ---------------------------------------------------------------------------------------
// Taking frames apart.

/// A UDP frame of the shapes director answers and sends: Ethernet, at most one 802.1Q tag,
/// IPv4 without options and not a fragment, or IPv6 with UDP as the next header; with
/// consistent IP and UDP lengths and all the bytes they announce present.
#[derive(Clone, Debug)]
pub struct UdpFrame {
    pub dst_mac: [u8; 6],
    pub src_mac: [u8; 6],
    /// The 802.1Q tag's TCI.
    pub vlan: Option<u16>,
    /// Offset of the IP header.
    pub l3: usize,
    /// The IP header bytes (20 or 40).
    pub ip_header: Vec<u8>,
    pub src: IpAddr,
    pub dst: IpAddr,
    /// TTL or hop limit.
    pub ttl: u8,
    pub src_port: u16,
    pub dst_port: u16,
    /// Offset of the UDP header.
    pub udp: usize,
    pub udp_checksum: u16,
    /// The UDP payload, as long as the UDP length says.
    pub payload: Vec<u8>,
    /// Offset just past the IP packet; the frame may be longer (Ethernet padding).
    pub end: usize,
}

/// A big-endian u16 at `at` (panics past the end).
pub fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn need(frame: &[u8], len: usize, what: &str) -> Result<(), String> {
    if frame.len() < len {
        return Err(format!(
            "frame of {} bytes cut short in the {what} (needs {len})",
            frame.len()
        ));
    }
    Ok(())
}

pub fn parse_udp(frame: &[u8]) -> Result<UdpFrame, String> {
    need(frame, ETH_LEN, "Ethernet header")?;
    let mut ethertype = be16(frame, 12);
    let mut l3 = ETH_LEN;
    let mut vlan = None;
    if ethertype == ETHERTYPE_VLAN {
        need(frame, ETH_LEN + VLAN_LEN, "VLAN tag")?;
        vlan = Some(be16(frame, 14));
        ethertype = be16(frame, 16);
        l3 += VLAN_LEN;
    }
    let (ip_len, udp_len_from_ip, src, dst, ttl) = match ethertype {
        ETHERTYPE_IPV4 => {
            need(frame, l3 + IPV4_LEN, "IPv4 header")?;
            let h = &frame[l3..l3 + IPV4_LEN];
            if h[0] != 0x45 {
                return Err(format!("IPv4 version/IHL byte {:#04x}, not 0x45", h[0]));
            }
            if be16(h, 6) & 0x3fff != 0 {
                return Err("an IPv4 fragment".into());
            }
            if h[9] != IPPROTO_UDP {
                return Err(format!("IPv4 protocol {}, not UDP", h[9]));
            }
            let total = be16(h, 2) as usize;
            if total < IPV4_LEN + UDP_LEN {
                return Err(format!("IPv4 total length {total} too small for UDP"));
            }
            let src = Ipv4Addr::new(h[12], h[13], h[14], h[15]);
            let dst = Ipv4Addr::new(h[16], h[17], h[18], h[19]);
            (
                IPV4_LEN,
                total - IPV4_LEN,
                IpAddr::V4(src),
                IpAddr::V4(dst),
                h[8],
            )
        }
        ETHERTYPE_IPV6 => {
            need(frame, l3 + IPV6_LEN, "IPv6 header")?;
            let h = &frame[l3..l3 + IPV6_LEN];
            if h[0] >> 4 != 6 {
                return Err(format!("IPv6 version {}", h[0] >> 4));
            }
            if h[6] != IPPROTO_UDP {
                return Err(format!("IPv6 next header {}, not UDP", h[6]));
            }
            let src: [u8; 16] = h[8..24].try_into().unwrap();
            let dst: [u8; 16] = h[24..40].try_into().unwrap();
            (
                IPV6_LEN,
                be16(h, 4) as usize,
                IpAddr::from(src),
                IpAddr::from(dst),
                h[7],
            )
        }
        other => return Err(format!("ethertype {other:#06x} is not IP")),
    };
    let udp = l3 + ip_len;
    need(frame, udp + UDP_LEN, "UDP header")?;
    let udp_len = be16(frame, udp + 4) as usize;
    if udp_len != udp_len_from_ip || udp_len < UDP_LEN {
        return Err(format!(
            "UDP length {udp_len} disagrees with the IP length ({udp_len_from_ip})"
        ));
    }
    let end = udp + udp_len;
    need(frame, end, "UDP payload")?;
    Ok(UdpFrame {
        dst_mac: frame[0..6].try_into().unwrap(),
        src_mac: frame[6..12].try_into().unwrap(),
        vlan,
        l3,
        ip_header: frame[l3..udp].to_vec(),
        src,
        dst,
        ttl,
        src_port: be16(frame, udp),
        dst_port: be16(frame, udp + 2),
        udp,
        udp_checksum: be16(frame, udp + 6),
        payload: frame[udp + UDP_LEN..end].to_vec(),
        end,
    })
}

/// Recomputes the IPv4 header checksum and the UDP checksum (over the pseudo-header) from
/// the frame's bytes. A UDP checksum of zero ("none") is refused for both families:
/// director always computes one, and IPv6 requires it.
pub fn verify_checksums(frame: &[u8]) -> Result<(), String> {
    let f = parse_udp(frame)?;
    if f.src.is_ipv4() {
        let sum = fold(ones_sum(&f.ip_header));
        if sum != 0xffff {
            return Err(format!(
                "IPv4 header checksum {:#06x} is wrong (header sums to {sum:#06x}, not 0xffff)",
                be16(&f.ip_header, 10)
            ));
        }
    }
    if f.udp_checksum == 0 {
        return Err("UDP checksum is zero (not computed)".into());
    }
    let segment = &frame[f.udp..f.end];
    let sum = fold(
        ones_sum(&pseudo_header(f.src, f.dst, IPPROTO_UDP, segment.len())) + ones_sum(segment),
    );
    if sum != 0xffff {
        let mut zeroed = segment.to_vec();
        zeroed[6..8].fill(0);
        let want = transport_checksum(f.src, f.dst, IPPROTO_UDP, &zeroed);
        return Err(format!(
            "UDP checksum {:#06x} is wrong, expected {want:#06x}",
            f.udp_checksum
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// TCP with flags and options, for SYN steering.

pub const TCP_SYN: u8 = 0x02;
pub const TCP_ACK: u8 = 0x10;

/// A TCP segment with these flags and options (a multiple of 4 bytes) and payload, its
/// checksum complete.
pub fn tcp_segment_with(flow: &Flow, flags: u8, options: &[u8], payload: &[u8]) -> Vec<u8> {
    tcp_segment_numbered(flow, flags, 0x1000_0000, 0, options, payload)
}

/// [`tcp_segment_with`] with this sequence and acknowledgment number.
pub fn tcp_segment_numbered(
    flow: &Flow,
    flags: u8,
    seq: u32,
    ack: u32,
    options: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    assert!(options.len().is_multiple_of(4) && options.len() <= 40);
    let hlen = TCP_LEN + options.len();
    let mut s = Vec::with_capacity(hlen + payload.len());
    s.extend(flow.client.port().to_be_bytes());
    s.extend(flow.server.port().to_be_bytes());
    s.extend(seq.to_be_bytes());
    s.extend(ack.to_be_bytes());
    s.extend([((hlen / 4) as u8) << 4, flags]);
    s.extend(64240u16.to_be_bytes());
    s.extend([0, 0, 0, 0]);
    s.extend(options);
    s.extend(payload);
    let c = transport_checksum(flow.client.ip(), flow.server.ip(), IPPROTO_TCP, &s);
    s[16..18].copy_from_slice(&c.to_be_bytes());
    s
}

/// Whether a TCP or UDP segment's checksum is right for these addresses.
pub fn transport_checksum_ok(src: IpAddr, dst: IpAddr, proto: u8, segment: &[u8]) -> bool {
    fold(ones_sum(
        &[&pseudo_header(src, dst, proto, segment.len()), segment].concat(),
    )) == 0xffff
}

/// Whether an IPv4 header's checksum is right.
pub fn ipv4_checksum_ok(header: &[u8]) -> bool {
    fold(ones_sum(header)) == 0xffff
}

/// An ICMP (IPv4 type 3 code 4, fragmentation needed) or ICMPv6 (type 2, packet too big)
/// error from `router` to the flow's server side, quoting `quoted` (the packet it is
/// about, from its IP header on). The frame's flow is router → `to`.
pub fn icmp_too_big_frame(router: IpAddr, to: IpAddr, mtu: u16, quoted: &[u8]) -> Vec<u8> {
    let v6 = router.is_ipv6();
    let mut m = Vec::new();
    if v6 {
        m.extend([2, 0, 0, 0]);
        m.extend((mtu as u32).to_be_bytes());
    } else {
        m.extend([3, 4, 0, 0, 0, 0]);
        m.extend(mtu.to_be_bytes());
    }
    m.extend(quoted);
    let c = if v6 {
        checksum(&[&pseudo_header(router, to, 58, m.len()), &m])
    } else {
        checksum(&[&m])
    };
    m[2..4].copy_from_slice(&c.to_be_bytes());
    let flow = Flow {
        client: SocketAddr::new(router, 0),
        server: SocketAddr::new(to, 0),
        vlan: None,
    };
    ip_frame(&flow, if v6 { 58 } else { 1 }, &m)
}

// ---------------------------------------------------------------------------------------
// Tunnels, as director's `ipip` forwarding sends them (for the server's decapsulator).

/// The IPv4 protocol number of IPv4 in IPv4 (RFC 2003).
pub const IPPROTO_IPIP: u8 = 4;
/// The IPv6 next header of IPv6 in IPv6 (RFC 2473).
pub const IPPROTO_IPV6: u8 = 41;

/// The IP packet (IP header on, no Ethernet header) of `flow` carrying `l4`: what a
/// tunnel carries. `flow` must have no VLAN tag.
pub fn ip_packet(flow: &Flow, proto: u8, l4: &[u8]) -> Vec<u8> {
    assert!(flow.vlan.is_none(), "an IP packet has no VLAN tag");
    ip_frame(flow, proto, l4).split_off(ETH_LEN)
}

/// A UDP datagram as an IP packet, its checksum complete.
pub fn udp_packet(flow: &Flow, payload: &[u8]) -> Vec<u8> {
    ip_packet(flow, IPPROTO_UDP, &udp_segment(flow, payload))
}

/// An Ethernet frame carrying `inner` in an outer header from `outer_src` to `outer_dst`:
/// IPv4 with protocol 4, or IPv6 with next header 41, by the outer family. Whether
/// `inner` is of the same family (or an IP packet at all) is the caller's choice.
pub fn encapsulated_frame(outer_src: IpAddr, outer_dst: IpAddr, inner: &[u8]) -> Vec<u8> {
    encapsulated_frame_with(outer_src, outer_dst, inner, &[], 0)
}

/// [`encapsulated_frame`] with IPv4 outer options and flags/fragment field (as in
/// [`ip_frame_with`]; director sends neither, with DF clear).
pub fn encapsulated_frame_with(
    outer_src: IpAddr,
    outer_dst: IpAddr,
    inner: &[u8],
    options: &[u8],
    flags_fragment: u16,
) -> Vec<u8> {
    let outer = Flow {
        client: SocketAddr::new(outer_src, 0),
        server: SocketAddr::new(outer_dst, 0),
        vlan: None,
    };
    let proto = if outer_src.is_ipv6() {
        IPPROTO_IPV6
    } else {
        IPPROTO_IPIP
    };
    ip_frame_with(&outer, proto, inner, options, flags_fragment)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_frames_parse_back_with_valid_checksums() {
        let m = with_ecs(
            query(7, "wWw.Example.COM.", RecordType::A),
            "203.0.113.0".parse().unwrap(),
            24,
            0,
        );
        let dns = wire(&m);
        for flow in [
            Flow::v4(Ipv4Addr::new(192, 0, 2, 10)),
            Flow::v4(Ipv4Addr::new(192, 0, 2, 10)).with_vlan(7),
            Flow::v6("2001:db8:2::10".parse().unwrap()),
            Flow::v6("2001:db8:2::10".parse().unwrap()).with_vlan(4094),
        ] {
            let frame = udp_frame(&flow, &dns);
            verify_checksums(&frame).unwrap();
            let f = parse_udp(&frame).unwrap();
            assert_eq!(f.payload, dns);
            assert_eq!(f.vlan, flow.vlan);
            assert_eq!((f.src, f.dst), (flow.client.ip(), flow.server.ip()));
            assert_eq!(f.end, frame.len());
            let mut bad = frame.clone();
            *bad.last_mut().unwrap() ^= 1;
            assert!(verify_checksums(&bad).is_err());
        }
    }

    #[test]
    fn names_keep_their_case_and_options_append() {
        let mut dns = wire(&with_edns(
            query(1, "wWw.ExAmPlE.cOm.", RecordType::AAAA),
            1232,
        ));
        assert_eq!(&dns[12..29], b"\x03wWw\x07ExAmPlE\x03cOm\x00");
        let before = dns.len();
        push_edns_option(&mut dns, 8, &ecs_body(1, 24, 0, &[203, 0, 113]));
        assert_eq!(dns.len(), before + 11);
        let m = Message::from_vec(&dns).unwrap();
        assert!(m
            .extensions()
            .as_ref()
            .unwrap()
            .option(hickory_proto::rr::rdata::opt::EdnsCode::Subnet)
            .is_some());
    }

    #[test]
    fn rfc1071_example() {
        assert_eq!(
            fold(ones_sum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7])),
            0xddf2
        );
    }
}
