//! A BMP encoder for tests (here and director-ctl's listener test): just enough of RFC 7854
//! and RFC 4271 to build the messages a router sends, by hand, so that the tests do not
//! depend on the parser's own encoder. Its arguments are the tests' literals: it panics on a
//! malformed address or prefix. Nothing else uses it.

use std::net::IpAddr;

use super::view::Policy;

/// A monitored peer as the per-peer header shows it, and the RIB a message is about.
#[derive(Clone, Copy, Debug)]
pub struct Peer {
    pub addr: IpAddr,
    pub asn: u32,
    pub distinguisher: u64,
    pub view: Policy,
}

pub fn peer(addr: &str, asn: u32, view: Policy) -> Peer {
    Peer {
        addr: addr.parse().unwrap(),
        asn,
        distinguisher: 0,
        view,
    }
}

/// A route-monitoring UPDATE's content.
#[derive(Clone, Debug, Default)]
pub struct Update {
    pub announce: Vec<String>,
    pub withdraw: Vec<String>,
    pub path: Vec<u32>,
    pub local_pref: Option<u32>,
    pub med: Option<u32>,
    pub origin: u8,
    pub next_hop: Option<IpAddr>,
}

pub fn ann(prefixes: &[&str], path: &[u32]) -> Update {
    Update {
        announce: prefixes.iter().map(ToString::to_string).collect(),
        path: path.to_vec(),
        ..Update::default()
    }
}

pub fn wd(prefixes: &[&str]) -> Update {
    Update {
        withdraw: prefixes.iter().map(ToString::to_string).collect(),
        ..Update::default()
    }
}

fn message(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![3];
    m.extend_from_slice(&((body.len() + 6) as u32).to_be_bytes());
    m.push(kind);
    m.extend_from_slice(body);
    m
}

fn addr16(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v4) => {
            let mut b = [0u8; 16];
            b[12..].copy_from_slice(&v4.octets());
            b
        }
        IpAddr::V6(v6) => v6.octets(),
    }
}

fn per_peer(p: &Peer) -> Vec<u8> {
    let mut h = Vec::with_capacity(42);
    let loc_rib = p.view == Policy::LocRib;
    h.push(if loc_rib {
        3
    } else {
        u8::from(p.distinguisher != 0)
    });
    let mut flags = 0u8;
    if !loc_rib && p.addr.is_ipv6() {
        flags |= 0x80;
    }
    if p.view == Policy::Post {
        flags |= 0x40;
    }
    h.push(flags);
    h.extend_from_slice(&p.distinguisher.to_be_bytes());
    h.extend_from_slice(&if loc_rib { [0; 16] } else { addr16(p.addr) });
    h.extend_from_slice(&p.asn.to_be_bytes());
    h.extend_from_slice(&[192, 0, 2, 1]); // BGP id
    h.extend_from_slice(&[0; 8]); // timestamp
    h
}

fn bgp(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![0xff; 16];
    m.extend_from_slice(&((body.len() + 19) as u16).to_be_bytes());
    m.push(kind);
    m.extend_from_slice(body);
    m
}

/// An OPEN from `asn` with a 4-octet AS capability and multiprotocol unicast for `afis`.
fn open(asn: u32, afis: &[u16]) -> Vec<u8> {
    let mut caps = Vec::new();
    for afi in afis {
        caps.extend_from_slice(&[1, 4]);
        caps.extend_from_slice(&afi.to_be_bytes());
        caps.extend_from_slice(&[0, 1]);
    }
    caps.extend_from_slice(&[65, 4]);
    caps.extend_from_slice(&asn.to_be_bytes());
    let mut b = vec![4];
    let two = u16::try_from(asn).unwrap_or(23456);
    b.extend_from_slice(&two.to_be_bytes());
    b.extend_from_slice(&180u16.to_be_bytes());
    b.extend_from_slice(&[192, 0, 2, 9]);
    b.push((caps.len() + 2) as u8);
    b.push(2);
    b.push(caps.len() as u8);
    b.extend_from_slice(&caps);
    bgp(1, &b)
}

pub fn initiation(sys_name: &str) -> Vec<u8> {
    let mut b = Vec::new();
    for (t, v) in [(1u16, "test router"), (2, sys_name)] {
        b.extend_from_slice(&t.to_be_bytes());
        b.extend_from_slice(&(v.len() as u16).to_be_bytes());
        b.extend_from_slice(v.as_bytes());
    }
    message(4, &b)
}

pub fn termination() -> Vec<u8> {
    // One reason TLV: 0, administratively closed.
    message(5, &[0, 1, 0, 2, 0, 0])
}

/// Peer Up: the router (`own_as`) and the peer exchanged OPENs naming `afis` (1 IPv4, 2 IPv6).
pub fn peer_up(p: &Peer, own_as: u32, afis: &[u16]) -> Vec<u8> {
    let mut b = per_peer(p);
    let local: IpAddr = if p.addr.is_ipv6() {
        "2001:db8::ffff".parse().unwrap()
    } else {
        "10.255.0.1".parse().unwrap()
    };
    b.extend_from_slice(&addr16(local));
    b.extend_from_slice(&179u16.to_be_bytes());
    b.extend_from_slice(&40000u16.to_be_bytes());
    b.extend_from_slice(&open(own_as, afis));
    b.extend_from_slice(&open(p.asn, afis));
    message(3, &b)
}

pub fn peer_down(p: &Peer) -> Vec<u8> {
    let mut b = per_peer(p);
    b.push(4); // the remote end closed, no data
    message(2, &b)
}

fn nlri(prefixes: &[String]) -> Vec<u8> {
    let mut b = Vec::new();
    for s in prefixes {
        let n: ipnet::IpNet = s.parse().unwrap();
        let len = n.prefix_len();
        b.push(len);
        let bytes = match n.network() {
            IpAddr::V4(a) => a.octets().to_vec(),
            IpAddr::V6(a) => a.octets().to_vec(),
        };
        b.extend_from_slice(&bytes[..usize::from(len).div_ceil(8)]);
    }
    b
}

fn attr(flags: u8, kind: u8, value: &[u8]) -> Vec<u8> {
    let mut a = vec![flags | 0x10, kind];
    a.extend_from_slice(&(value.len() as u16).to_be_bytes());
    a.extend_from_slice(value);
    a
}

fn is_v6(s: &str) -> bool {
    s.contains(':')
}

/// A route-monitoring message with one UPDATE: IPv4 in the classic fields, IPv6 in
/// MP_REACH / MP_UNREACH.
pub fn route(p: &Peer, u: &Update) -> Vec<u8> {
    let (a6, a4): (Vec<String>, Vec<String>) = u.announce.iter().cloned().partition(|s| is_v6(s));
    let (w6, w4): (Vec<String>, Vec<String>) = u.withdraw.iter().cloned().partition(|s| is_v6(s));
    let mut attrs = Vec::new();
    if !u.announce.is_empty() {
        attrs.extend(attr(0x40, 1, &[u.origin]));
        let mut path = Vec::new();
        if !u.path.is_empty() {
            path.push(2);
            path.push(u.path.len() as u8);
            for a in &u.path {
                path.extend_from_slice(&a.to_be_bytes());
            }
        }
        attrs.extend(attr(0x40, 2, &path));
        if !a4.is_empty() {
            let nh = match u.next_hop {
                Some(IpAddr::V4(a)) => a.octets(),
                _ => [10, 9, 9, 9],
            };
            attrs.extend(attr(0x40, 3, &nh));
        }
        if let Some(m) = u.med {
            attrs.extend(attr(0x80, 4, &m.to_be_bytes()));
        }
        if let Some(l) = u.local_pref {
            attrs.extend(attr(0x40, 5, &l.to_be_bytes()));
        }
    }
    if !a6.is_empty() {
        let nh = match u.next_hop {
            Some(IpAddr::V6(a)) => a.octets(),
            _ => "2001:db8:9::9"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets(),
        };
        let mut v = vec![0, 2, 1, 16];
        v.extend_from_slice(&nh);
        v.push(0);
        v.extend(nlri(&a6));
        attrs.extend(attr(0x80, 14, &v));
    }
    if !w6.is_empty() {
        let mut v = vec![0, 2, 1];
        v.extend(nlri(&w6));
        attrs.extend(attr(0x80, 15, &v));
    }
    update_message(p, &nlri(&w4), &attrs, &nlri(&a4))
}

fn update_message(p: &Peer, withdrawn: &[u8], attrs: &[u8], nlri: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&(withdrawn.len() as u16).to_be_bytes());
    b.extend_from_slice(withdrawn);
    b.extend_from_slice(&(attrs.len() as u16).to_be_bytes());
    b.extend_from_slice(attrs);
    b.extend_from_slice(nlri);
    let mut m = per_peer(p);
    m.extend(bgp(2, &b));
    message(0, &m)
}

/// End-of-RIB for IPv4 (an empty UPDATE) or IPv6 (an empty MP_UNREACH).
pub fn eor(p: &Peer, v6: bool) -> Vec<u8> {
    if v6 {
        update_message(p, &[], &attr(0x80, 15, &[0, 2, 1]), &[])
    } else {
        update_message(p, &[], &[], &[])
    }
}

/// A route-monitoring message around raw BGP UPDATE bytes (the full-table test's).
pub fn raw_route(p: &Peer, bgp_message: &[u8]) -> Vec<u8> {
    let mut m = per_peer(p);
    m.extend_from_slice(bgp_message);
    message(0, &m)
}
