//! The next hop toward an address, as the kernel would send to it: the route's output
//! interface and gateway (RTM_GETROUTE), the neighbour's link-layer address (RTM_GETNEIGH)
//! and the interface's own address (RTM_GETLINK), over one rtnetlink socket.
//!
//! The XDP program cannot ask the kernel for a route per packet with what this kernel
//! offers for redirects to other interfaces, so the controller resolves the hop for each
//! server and writes it to a map; this module is the only place that reads the tables.

use std::net::{IpAddr, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_MULTIPART, NLM_F_REQUEST,
};
use netlink_packet_route::link::{LinkAttribute, LinkMessage};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteMessage, RouteType};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

/// Where a packet for an address leaves this host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hop {
    pub ifindex: u32,
    pub iface: String,
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    /// The router the route goes through; `None` when the address is on the segment.
    pub gateway: Option<IpAddr>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolved {
    Ready(Hop),
    /// The route is known, the neighbour's link-layer address is not (yet).
    Pending {
        ifindex: u32,
        iface: String,
        neighbour: IpAddr,
    },
}

pub struct Resolver {
    socket: Socket,
    seq: u32,
    buf: Vec<u8>,
}

impl Resolver {
    pub fn new() -> Result<Resolver> {
        let mut socket = Socket::new(NETLINK_ROUTE).context("opening an rtnetlink socket")?;
        socket.bind_auto().context("binding the rtnetlink socket")?;
        socket
            .connect(&SocketAddr::new(0, 0))
            .context("connecting the rtnetlink socket")?;
        Ok(Resolver {
            socket,
            seq: 0,
            buf: vec![0; 1 << 16],
        })
    }

    /// The hop as the tables hold it now.
    pub fn resolve(&mut self, addr: IpAddr) -> Result<Resolved> {
        let (ifindex, gateway) = self.route(addr)?;
        let (iface, src_mac) = self.link(ifindex)?;
        let neighbour = gateway.unwrap_or(addr);
        Ok(match self.neighbour(ifindex, neighbour)? {
            Some(dst_mac) => Resolved::Ready(Hop {
                ifindex,
                iface,
                src_mac,
                dst_mac,
                gateway,
            }),
            None => Resolved::Pending {
                ifindex,
                iface,
                neighbour,
            },
        })
    }

    /// The hop, asking the kernel to resolve the neighbour if it is not known and waiting
    /// up to `wait` for the answer.
    pub fn resolve_wait(&mut self, addr: IpAddr, wait: Duration) -> Result<Hop> {
        let deadline = Instant::now() + wait;
        let mut nudged = false;
        loop {
            match self.resolve(addr)? {
                Resolved::Ready(h) => return Ok(h),
                Resolved::Pending {
                    iface, neighbour, ..
                } => {
                    if Instant::now() >= deadline {
                        bail!(
                            "neighbour {neighbour} on {iface} did not resolve within {} ms",
                            wait.as_millis()
                        );
                    }
                    if !nudged {
                        nudge(addr);
                        nudged = true;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }

    fn route(&mut self, addr: IpAddr) -> Result<(u32, Option<IpAddr>)> {
        let mut m = RouteMessage::default();
        m.header.address_family = family(addr);
        m.header.destination_prefix_length = if addr.is_ipv4() { 32 } else { 128 };
        m.attributes
            .push(RouteAttribute::Destination(RouteAddress::from(addr)));
        let replies = self
            .ask(RouteNetlinkMessage::GetRoute(m))
            .with_context(|| format!("looking up the route to {addr}"))?;
        let Some(RouteNetlinkMessage::NewRoute(r)) = replies.into_iter().next() else {
            bail!("the kernel returned no route to {addr}");
        };
        match r.header.kind {
            RouteType::Unicast => {}
            RouteType::Local => bail!("{addr} is an address of this host"),
            k => bail!("the route to {addr} is of type {k:?}, not unicast"),
        }
        let mut oif = None;
        let mut gateway = None;
        for a in &r.attributes {
            match a {
                RouteAttribute::Oif(i) => oif = Some(*i),
                RouteAttribute::Gateway(g) => gateway = ip_of_route(g),
                _ => {}
            }
        }
        let oif = oif.with_context(|| format!("the route to {addr} names no interface"))?;
        Ok((oif, gateway))
    }

    fn link(&mut self, ifindex: u32) -> Result<(String, [u8; 6])> {
        let mut m = LinkMessage::default();
        m.header.index = ifindex;
        let replies = self
            .ask(RouteNetlinkMessage::GetLink(m))
            .with_context(|| format!("reading interface {ifindex}"))?;
        let Some(RouteNetlinkMessage::NewLink(l)) = replies.into_iter().next() else {
            bail!("the kernel returned no interface {ifindex}");
        };
        let mut name = format!("if{ifindex}");
        let mut mac = None;
        for a in &l.attributes {
            match a {
                LinkAttribute::IfName(n) => name = n.clone(),
                LinkAttribute::Address(b) => mac = <[u8; 6]>::try_from(b.as_slice()).ok(),
                _ => {}
            }
        }
        let mac = mac.with_context(|| format!("interface {name} has no Ethernet address"))?;
        Ok((name, mac))
    }

    /// The neighbour's MAC when its entry is usable; `None` while it is unknown, being
    /// resolved or failed. One entry asked for by its address (RTM_GETNEIGH with NDA_DST),
    /// not a dump of the table: `run` asks for every server's each second.
    fn neighbour(&mut self, ifindex: u32, addr: IpAddr) -> Result<Option<[u8; 6]>> {
        let mut m = NeighbourMessage::default();
        m.header.family = family(addr);
        m.header.ifindex = ifindex;
        m.attributes
            .push(NeighbourAttribute::Destination(NeighbourAddress::from(
                addr,
            )));
        let replies = match self.ask(RouteNetlinkMessage::GetNeighbour(m)) {
            Ok(r) => r,
            Err(e)
                if e.downcast_ref::<std::io::Error>()
                    .and_then(std::io::Error::raw_os_error)
                    == Some(libc::ENOENT) =>
            {
                return Ok(None)
            }
            Err(e) => return Err(e).with_context(|| format!("reading the neighbour {addr}")),
        };
        for r in replies {
            let RouteNetlinkMessage::NewNeighbour(n) = r else {
                continue;
            };
            if n.header.ifindex != ifindex {
                continue;
            }
            let mut dst = None;
            let mut lladdr = None;
            for a in &n.attributes {
                match a {
                    NeighbourAttribute::Destination(d) => dst = ip_of_neighbour(d),
                    NeighbourAttribute::LinkLayerAddress(b) => {
                        lladdr = <[u8; 6]>::try_from(b.as_slice()).ok();
                    }
                    _ => {}
                }
            }
            if dst != Some(addr) {
                continue;
            }
            let usable = matches!(
                n.header.state,
                NeighbourState::Reachable
                    | NeighbourState::Stale
                    | NeighbourState::Delay
                    | NeighbourState::Probe
                    | NeighbourState::Permanent
                    | NeighbourState::Noarp
            );
            return Ok(if usable { lladdr } else { None });
        }
        Ok(None)
    }

    /// One request (no dumps: every question names what it asks for); the replies up to
    /// its end.
    fn ask(&mut self, msg: RouteNetlinkMessage) -> Result<Vec<RouteNetlinkMessage>> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST;
        header.sequence_number = seq;
        let mut req = NetlinkMessage::new(header, NetlinkPayload::from(msg));
        req.finalize();
        let mut out = vec![0; req.header.length as usize];
        req.serialize(&mut out);
        self.socket.send(&out, 0).context("sending to rtnetlink")?;

        let mut replies = Vec::new();
        loop {
            let n = self
                .socket
                .recv(&mut &mut self.buf[..], 0)
                .context("reading from rtnetlink")?;
            let mut at = 0;
            while at < n {
                let m: NetlinkMessage<RouteNetlinkMessage> =
                    NetlinkMessage::deserialize(&self.buf[at..n])
                        .context("decoding an rtnetlink reply")?;
                let len = m.header.length as usize;
                let multipart = m.header.flags & NLM_F_MULTIPART != 0;
                let ours = m.header.sequence_number == seq;
                match m.payload {
                    _ if !ours => {}
                    NetlinkPayload::Done(_) => return Ok(replies),
                    NetlinkPayload::Error(e) => match e.code {
                        None => return Ok(replies),
                        Some(_) => return Err(e.to_io().into()),
                    },
                    NetlinkPayload::InnerMessage(inner) => {
                        replies.push(inner);
                        if !multipart {
                            return Ok(replies);
                        }
                    }
                    _ => {}
                }
                if len == 0 {
                    break;
                }
                at += (len + 3) & !3;
            }
        }
    }
}

/// Makes the kernel resolve the neighbour toward `addr`, as any first packet would: one
/// empty datagram to the discard port.
fn nudge(addr: IpAddr) {
    let bind: IpAddr = if addr.is_ipv4() {
        IpAddr::from([0u8; 4])
    } else {
        IpAddr::from([0u16; 8])
    };
    if let Ok(s) = UdpSocket::bind((bind, 0)) {
        let _ = s.send_to(&[], (addr, 9));
    }
}

fn family(addr: IpAddr) -> AddressFamily {
    if addr.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    }
}

fn ip_of_route(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(v) => Some(IpAddr::V4(*v)),
        RouteAddress::Inet6(v) => Some(IpAddr::V6(*v)),
        _ => None,
    }
}

fn ip_of_neighbour(a: &NeighbourAddress) -> Option<IpAddr> {
    match a {
        NeighbourAddress::Inet(v) => Some(IpAddr::V4(*v)),
        NeighbourAddress::Inet6(v) => Some(IpAddr::V6(*v)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Loopback is in every namespace: its route is local, which a hop must refuse.
    #[test]
    fn an_address_of_this_host_is_refused() {
        let mut r = Resolver::new().unwrap();
        let e = r.resolve("127.0.0.1".parse().unwrap()).unwrap_err();
        assert!(format!("{e:#}").contains("address of this host"), "{e:#}");
    }
}
