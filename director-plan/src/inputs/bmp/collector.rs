//! The collector's state: every monitored router's peers and their RIBs, from BMP messages.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use bgpkit_parser::models::{
    Afi, AttributeValue, BgpMessage, BgpOpenMessage, BgpUpdateMessage, CapabilityValue,
    NetworkPrefix, NextHopAddress, ParamValue, Safi,
};
use bgpkit_parser::parser::bmp::messages::{
    BmpMessageBody, BmpMsgType, BmpPeerType, BmpPerPeerHeader, InitiationTlvType, PerPeerFlags,
};
use bgpkit_parser::parser::bmp::parse_bmp_msg;

use super::rib::{v4_net, Dirty, Gone, Interner, Rib, ID_MASK, STALE};
use super::view::{PeerStatus, Policy, RouterStatus, Settings, Synced, ViewSpec};
use crate::inputs::decision::{self, attrs_of, Attrs, Ranked};
use crate::inputs::mrt::PeerSelector;
use crate::model::{IpNet, Route};

/// Where a route-monitoring message's BGP message starts: common header (6) and per-peer
/// header (42).
const PEER_HEADER_END: usize = 48;

/// Address-family bits: which End-of-RIBs a peer's dump ends with.
const V4: u8 = 1;
const V6: u8 = 2;

/// A monitored peer, as RFC 7854's per-peer header identifies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PeerKey {
    addr: IpAddr,
    asn: u32,
    distinguisher: u64,
    /// Peer type 3: the router's Loc-RIB (RFC 9069), not a neighbour.
    loc_rib: bool,
}

#[derive(Debug, Default)]
struct RibState {
    rib: Rib,
    /// End-of-RIBs seen (address-family bits) in this session.
    eor: u8,
}

#[derive(Debug)]
struct Peer {
    key: PeerKey,
    up: bool,
    /// The router's own AS, from the OPEN it sent this peer (FRR prepends it; stripped).
    own_as: Option<u32>,
    /// Address families both OPENs name (IPv4 when neither has multiprotocol capabilities).
    families: u8,
    /// The router session in which it was last heard of; older ones are swept at sync end.
    session: u32,
    ribs: [Option<RibState>; 3],
}

impl Peer {
    fn synced(&self) -> bool {
        let mut ribs = self.ribs.iter().flatten().peekable();
        ribs.peek().is_some() && ribs.all(|r| r.eor & self.families == self.families)
    }

    fn routes(&self) -> usize {
        self.ribs.iter().flatten().map(|r| r.rib.len()).sum()
    }
}

#[derive(Debug)]
struct Router {
    addr: IpAddr,
    name: Option<String>,
    connected: bool,
    /// When it connected, or when it was lost.
    since: Instant,
    /// Counts sessions, to tell this session's peers from those of the one before.
    session: u32,
    synced: bool,
    /// The last route message of this session (or its start): the quiet period counts from it.
    last_route: Instant,
    peers: Vec<Peer>,
}

impl Router {
    fn routes(&self) -> usize {
        self.peers.iter().map(Peer::routes).sum()
    }
}

/// Live BGP routes from BMP sessions; see the module doc. Pure: the listener hands in framed
/// messages and the time.
#[derive(Debug, Default)]
pub struct Collector {
    settings: Settings,
    routers: Vec<Router>,
    attrs: Interner,
    dirty: Dirty,
    synced_events: Vec<Synced>,
}

impl Collector {
    pub fn new(settings: Settings) -> Collector {
        Collector {
            settings,
            ..Collector::default()
        }
    }

    /// A router connected. One already connected is lost first (a new TCP session replaces
    /// the old, as when a router restarts before the old socket times out).
    pub fn session_up(&mut self, router: IpAddr, now: Instant) {
        let i = match self.routers.iter().position(|r| r.addr == router) {
            Some(i) => {
                self.lose(i, now);
                i
            }
            None => {
                self.routers.push(Router {
                    addr: router,
                    name: None,
                    connected: false,
                    since: now,
                    session: 0,
                    synced: false,
                    last_route: now,
                    peers: Vec::new(),
                });
                self.routers.len() - 1
            }
        };
        let r = &mut self.routers[i];
        r.connected = true;
        r.since = now;
        r.session += 1;
        r.synced = false;
        r.last_route = now;
        for p in &mut r.peers {
            for rs in p.ribs.iter_mut().flatten() {
                rs.eor = 0;
            }
        }
    }

    /// The router's TCP session ended: its routes turn stale (see the module doc).
    pub fn session_down(&mut self, router: IpAddr, now: Instant) {
        if let Some(i) = self.routers.iter().position(|r| r.addr == router) {
            self.lose(i, now);
        }
    }

    fn lose(&mut self, i: usize, now: Instant) {
        let r = &mut self.routers[i];
        if !r.connected {
            return;
        }
        r.connected = false;
        r.synced = false;
        r.since = now;
        for p in &mut r.peers {
            for rs in p.ribs.iter_mut().flatten() {
                rs.rib.mark_stale();
            }
        }
    }

    /// One whole BMP message (see [`super::frame`]) from `router`. A message that does not
    /// parse is an error and changes nothing; the listener drops the session.
    pub fn message(&mut self, router: IpAddr, msg: &[u8], now: Instant) -> Result<()> {
        let parsed = parse_bmp_msg(&mut bytes::Bytes::copy_from_slice(msg))
            .map_err(|e| anyhow!("BMP message from {router} does not parse: {e}"))?;
        if parsed.common_header.msg_len as usize != msg.len() {
            bail!(
                "BMP message from {router}: header says {} bytes, {} given",
                parsed.common_header.msg_len,
                msg.len()
            );
        }
        // bgpkit reads what a BGP message's own length says and ignores the rest: a route
        // monitoring message whose BGP length disagrees with the BMP length is damaged.
        if parsed.common_header.msg_type == BmpMsgType::RouteMonitoring {
            let bgp = msg.get(PEER_HEADER_END..).unwrap_or_default();
            let said = bgp
                .get(16..18)
                .map(|l| usize::from(u16::from_be_bytes([l[0], l[1]])));
            if said != Some(bgp.len()) {
                bail!(
                    "BMP route monitoring from {router}: BGP message length {said:?}, {} bytes \
                     left in the BMP message",
                    bgp.len()
                );
            }
        }
        if !self.routers.iter().any(|r| r.addr == router && r.connected) {
            // Messages without session_up (a caller's slip): start one rather than lose them.
            self.session_up(router, now);
        }
        let i = self
            .routers
            .iter()
            .position(|r| r.addr == router)
            .ok_or_else(|| anyhow!("BMP router {router} has no state after session_up"))?;
        let header = parsed.per_peer_header;
        match parsed.message_body {
            BmpMessageBody::InitiationMessage(m) => {
                if let Some(t) = m
                    .tlvs
                    .iter()
                    .find(|t| t.info_type == InitiationTlvType::SysName)
                {
                    self.routers[i].name = Some(t.info.clone());
                }
            }
            BmpMessageBody::TerminationMessage(_) => self.lose(i, now),
            BmpMessageBody::PeerUpNotification(up) => {
                let h = header
                    .ok_or_else(|| anyhow!("BMP peer up from {router} without peer header"))?;
                let session = self.routers[i].session;
                let j = self.peer(i, &h);
                let p = &mut self.routers[i].peers[j];
                p.up = true;
                p.session = session;
                p.own_as = open_of(&up.sent_open).map(own_as);
                p.families = families(open_of(&up.sent_open), open_of(&up.received_open));
            }
            BmpMessageBody::PeerDownNotification(_) => {
                let h = header
                    .ok_or_else(|| anyhow!("BMP peer down from {router} without peer header"))?;
                let key = peer_key(&h);
                if let Some(j) = self.routers[i].peers.iter().position(|p| p.key == key) {
                    self.routers[i].peers[j].up = false;
                    for v in Policy::ALL {
                        self.clear_rib(i, j, v, |_| true);
                    }
                }
                self.check_sync(i, now);
            }
            BmpMessageBody::RouteMonitoring(rm) => {
                let h = header.ok_or_else(|| {
                    anyhow!("BMP route monitoring from {router} without peer header")
                })?;
                let Some(view) = view_of(&h) else {
                    return Ok(()); // Adj-RIB-Out (RFC 8671): what the router sends, not uses
                };
                if let BgpMessage::Update(u) = rm.bgp_message {
                    self.routers[i].last_route = now;
                    self.update(i, &h, view, u);
                    self.check_sync(i, now);
                }
            }
            BmpMessageBody::RouteMirroring(_) | BmpMessageBody::StatsReport(_) => {}
        }
        Ok(())
    }

    /// Quiet-period sync ends and hold-time expiry; call it every second or so.
    pub fn tick(&mut self, now: Instant) {
        let hold = self.settings.hold;
        let mut i = 0;
        while i < self.routers.len() {
            let r = &self.routers[i];
            if !r.connected && now.saturating_duration_since(r.since) >= hold {
                for j in 0..self.routers[i].peers.len() {
                    for v in Policy::ALL {
                        self.clear_rib(i, j, v, |_| true);
                    }
                }
                log::info!(
                    "BMP router {} gone for {hold:?}: its routes are removed",
                    self.routers[i].addr
                );
                self.routers.remove(i);
                continue;
            }
            self.check_sync(i, now);
            i += 1;
        }
    }

    /// Prefixes whose candidate routes changed since the last call, in the planner's order.
    pub fn take_dirty(&mut self) -> Vec<IpNet> {
        self.dirty.take()
    }

    /// Prefixes waiting in [`Collector::take_dirty`].
    pub fn dirty_len(&self) -> usize {
        self.dirty.len()
    }

    /// Sync ends since the last call (for the run log).
    pub fn take_synced(&mut self) -> Vec<Synced> {
        std::mem::take(&mut self.synced_events)
    }

    /// `router` is connected and its current session's initial dump is over.
    pub fn synced(&self, router: IpAddr) -> bool {
        self.routers
            .iter()
            .any(|r| r.addr == router && r.connected && r.synced)
    }

    /// Every connected router is synced (lost ones count as synced: their routes stand as
    /// they were until the hold time).
    pub fn all_synced(&self) -> bool {
        self.routers.iter().all(|r| !r.connected || r.synced)
    }

    /// The sysName a router gave in its Initiation.
    pub fn router_name(&self, router: IpAddr) -> Option<&str> {
        self.routers
            .iter()
            .find(|r| r.addr == router)
            .and_then(|r| r.name.as_deref())
    }

    /// Routes held, all routers, peers and views.
    pub fn routes(&self) -> usize {
        self.routers.iter().map(Router::routes).sum()
    }

    /// Heap bytes of the routing state (RIB tables, attribute table, dirty set), from their
    /// capacities: what the per-route memory figure is made of.
    pub fn heap_bytes(&self) -> usize {
        let ribs: usize = self
            .routers
            .iter()
            .flat_map(|r| &r.peers)
            .flat_map(|p| p.ribs.iter().flatten())
            .map(|rs| rs.rib.heap_bytes())
            .sum();
        ribs + self.attrs.heap_bytes() + self.dirty.heap_bytes()
    }

    /// Distinct attribute sets in use.
    pub fn attribute_sets(&self) -> usize {
        self.attrs.len()
    }

    /// The best route for exactly `prefix` among the view's routes.
    pub fn best(&self, view: &ViewSpec, prefix: &IpNet) -> Option<Route> {
        let prefix = prefix.trunc();
        let ribs = self.view_ribs(view);
        let cands = ribs.iter().filter_map(|&(p, rib)| {
            let id = rib.get(&prefix)? & ID_MASK;
            Some(((p, id), self.ranked(p, id)))
        });
        decision::best(cands).map(|(p, id)| self.route(p, id))
    }

    /// The view's best route for every prefix, in the planner's order (IPv4 first, then by
    /// address and length), for a full rebuild.
    pub fn table(&self, view: &ViewSpec) -> Vec<(IpNet, Route)> {
        let ribs = self.view_ribs(view);
        let mut v4: Vec<(u64, u32, u32)> = Vec::new();
        let mut v6: Vec<((u128, u8), u32, u32)> = Vec::new();
        for (n, (_, rib)) in ribs.iter().enumerate() {
            v4.extend(rib.v4.iter().map(|(k, v)| (*k, n as u32, *v & ID_MASK)));
            v6.extend(
                rib.v6
                    .iter()
                    .map(|(k, v)| (k.order(), n as u32, *v & ID_MASK)),
            );
        }
        v4.sort_unstable();
        v6.sort_unstable();
        let mut out = Vec::with_capacity(v4.len() + v6.len());
        for group in v4.chunk_by(|a, b| a.0 == b.0) {
            if let Some(route) = self.pick(&ribs, group.iter().map(|g| (g.1, g.2))) {
                out.push((v4_net(group[0].0), route));
            }
        }
        for group in v6.chunk_by(|a, b| a.0 == b.0) {
            if let Some(route) = self.pick(&ribs, group.iter().map(|g| (g.1, g.2))) {
                let (addr, len) = group[0].0;
                out.push((
                    IpNet::V6(ipnet::Ipv6Net::new_assert(addr.into(), len)),
                    route,
                ));
            }
        }
        out
    }

    /// Every router, for operators.
    pub fn status(&self, now: Instant) -> Vec<RouterStatus> {
        self.routers
            .iter()
            .map(|r| RouterStatus {
                address: r.addr,
                name: r.name.clone(),
                connected: r.connected,
                since_ms: ms(now.saturating_duration_since(r.since)),
                synced: r.connected && r.synced,
                peers: r
                    .peers
                    .iter()
                    .flat_map(|p| {
                        Policy::ALL.into_iter().filter_map(move |v| {
                            let rs = p.ribs[v.index()].as_ref()?;
                            Some(PeerStatus {
                                address: p.key.addr,
                                asn: p.key.asn,
                                distinguisher: p.key.distinguisher,
                                view: v,
                                routes: rs.rib.len(),
                                up: p.up,
                                synced: rs.eor & p.families == p.families,
                            })
                        })
                    })
                    .collect(),
            })
            .collect()
    }

    // ---- inside ----

    /// The best of one prefix's candidates (index into `ribs`, attribute id).
    fn pick(
        &self,
        ribs: &[(&Peer, &Rib)],
        group: impl Iterator<Item = (u32, u32)> + Clone,
    ) -> Option<Route> {
        let cands = group.map(|(n, id)| {
            let p = ribs[n as usize].0;
            ((p, id), self.ranked(p, id))
        });
        decision::best(cands).map(|(p, id)| self.route(p, id))
    }

    fn ranked<'a>(&'a self, p: &'a Peer, id: u32) -> Ranked<'a> {
        Ranked {
            attrs: self.attrs.get(id),
            peer_ip: p.key.addr,
            path_id: 0,
        }
    }

    fn route(&self, p: &Peer, id: u32) -> Route {
        let a = self.attrs.get(id);
        Route {
            path_len: a.path_len,
            neighbor_as: a.neighbor_as,
            peer_as: p.key.asn,
            next_hop: a.next_hop.unwrap_or(p.key.addr),
            med: a.med,
        }
    }

    /// The RIBs a view takes, with their peers.
    fn view_ribs(&self, view: &ViewSpec) -> Vec<(&Peer, &Rib)> {
        let Some(r) = self.routers.iter().find(|r| match &view.router {
            super::view::RouterRef::Addr(a) => r.addr == *a,
            super::view::RouterRef::Name(n) => r.name.as_deref() == Some(n.as_str()),
        }) else {
            return Vec::new();
        };
        let matches = |p: &&Peer| {
            view.peer
                .is_none_or(|s: PeerSelector| s.matches(p.key.addr, p.key.asn))
        };
        let policy = view.policy.unwrap_or_else(|| {
            let has = |v: Policy| {
                r.peers.iter().filter(matches).any(|p| {
                    p.ribs[v.index()]
                        .as_ref()
                        .is_some_and(|rs| rs.rib.len() > 0)
                })
            };
            if view.peer.is_none() && r.peers.iter().any(|p| p.key.loc_rib) {
                Policy::LocRib
            } else if has(Policy::Post) {
                Policy::Post
            } else {
                Policy::Pre
            }
        });
        r.peers
            .iter()
            .filter(matches)
            .filter_map(|p| Some((p, &p.ribs[policy.index()].as_ref()?.rib)))
            .collect()
    }

    /// The index of the peer of a per-peer header, added if new.
    fn peer(&mut self, i: usize, h: &BmpPerPeerHeader) -> usize {
        let key = peer_key(h);
        let r = &mut self.routers[i];
        let j = match r.peers.iter().position(|p| p.key == key) {
            Some(j) => j,
            None => {
                r.peers.push(Peer {
                    key,
                    up: true,
                    own_as: None,
                    families: V4,
                    session: r.session,
                    ribs: [None, None, None],
                });
                r.peers.len() - 1
            }
        };
        j
    }

    fn update(&mut self, i: usize, h: &BmpPerPeerHeader, view: Policy, u: BgpUpdateMessage) {
        let session = self.routers[i].session;
        let j = self.peer(i, h);
        let p = &mut self.routers[i].peers[j];
        p.session = session;
        let (peer_as, own_as) = (p.key.asn, p.own_as);
        if let Some(afi) = end_of_rib(&u) {
            let rs =
                self.routers[i].peers[j].ribs[view.index()].get_or_insert_with(RibState::default);
            rs.eor |= afi;
            return;
        }
        let mut announced: &[NetworkPrefix] = &[];
        let mut mp_next_hop = None;
        for p in &u.withdrawn_prefixes {
            self.withdraw(i, j, view, &p.prefix);
        }
        for attr in u.attributes.iter() {
            match attr {
                AttributeValue::MpUnreachNlri(n) if n.safi == Safi::Unicast => {
                    for p in &n.prefixes {
                        self.withdraw(i, j, view, &p.prefix);
                    }
                }
                AttributeValue::MpReachNlri(n) if n.safi == Safi::Unicast => {
                    announced = &n.prefixes;
                    mp_next_hop = n.next_hop.as_ref().map(NextHopAddress::global_addr);
                }
                _ => {}
            }
        }
        if u.announced_prefixes.is_empty() && announced.is_empty() {
            return;
        }
        let attrs = attrs_of(&u.attributes, peer_as, own_as);
        // MP_REACH prefixes take its next hop, even beside IPv4 NLRI with a NEXT_HOP.
        let mp_attrs = Attrs {
            next_hop: mp_next_hop.or(attrs.next_hop),
            ..attrs
        };
        let classic = u.announced_prefixes.iter().map(|p| (p, attrs));
        for (p, a) in classic.chain(announced.iter().map(|p| (p, mp_attrs))) {
            self.announce(i, j, view, &p.prefix.trunc(), a);
        }
    }

    /// Stores the peer's route; the prefix is dirty unless the same route was there.
    fn announce(&mut self, i: usize, j: usize, view: Policy, prefix: &IpNet, attrs: Attrs) {
        let id = self.attrs.intern(attrs);
        let rs = self.routers[i].peers[j].ribs[view.index()].get_or_insert_with(RibState::default);
        match rs.rib.insert(prefix, id) {
            Some(old) => {
                self.attrs.release(old & ID_MASK);
                // A refresh with the same attributes changes no decision.
                if old & ID_MASK != id {
                    self.dirty.add(prefix);
                }
            }
            None => self.dirty.add(prefix),
        }
    }

    fn withdraw(&mut self, i: usize, j: usize, view: Policy, prefix: &IpNet) {
        let Some(rs) = self.routers[i].peers[j].ribs[view.index()].as_mut() else {
            return;
        };
        if let Some(old) = rs.rib.remove(&prefix.trunc()) {
            self.attrs.release(old & ID_MASK);
            self.dirty.add(&prefix.trunc());
        }
    }

    /// Removes the routes of one RIB that `doomed` picks (by their value, [`STALE`] bit
    /// included), marking their prefixes dirty.
    fn clear_rib(&mut self, i: usize, j: usize, view: Policy, doomed: impl Fn(u32) -> bool) {
        let Some(rs) = self.routers[i].peers[j].ribs[view.index()].as_mut() else {
            return;
        };
        let (attrs, dirty) = (&mut self.attrs, &mut self.dirty);
        rs.rib.remove_where(doomed, |g: Gone| {
            let id = match g {
                Gone::V4(_, id) | Gone::V6(_, id) => id,
            };
            attrs.release(id);
            dirty.add_gone(&g);
        });
    }

    /// Ends the router's initial dump when every peer of this session has sent its
    /// End-of-RIBs, or no route came for the quiet period: then whatever was not refreshed
    /// since the reconnect is swept, and peers not heard of in this session are forgotten.
    fn check_sync(&mut self, i: usize, now: Instant) {
        let r = &self.routers[i];
        if !r.connected || r.synced {
            return;
        }
        let mut current = r
            .peers
            .iter()
            .filter(|p| p.session == r.session && p.up)
            .peekable();
        let eor = current.peek().is_some() && current.all(Peer::synced);
        let quiet = now.saturating_duration_since(r.last_route) >= self.settings.quiet;
        if !(eor || quiet) {
            return;
        }
        for j in 0..self.routers[i].peers.len() {
            for v in Policy::ALL {
                self.clear_rib(i, j, v, |val| val & STALE != 0);
            }
        }
        let r = &mut self.routers[i];
        let session = r.session;
        r.peers.retain(|p| p.session == session);
        r.synced = true;
        let event = Synced {
            router: r.addr,
            peers: r.peers.iter().filter(|p| p.up).count(),
            routes: r.routes(),
            ms: ms(now.saturating_duration_since(r.since)),
        };
        log::info!(
            "BMP router {} synced ({}): {} peers, {} routes",
            event.router,
            if eor { "End-of-RIB" } else { "quiet period" },
            event.peers,
            event.routes
        );
        self.synced_events.push(event);
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn peer_key(h: &BmpPerPeerHeader) -> PeerKey {
    PeerKey {
        addr: h.peer_ip,
        asn: u32::from(h.peer_asn),
        distinguisher: h.peer_distinguisher,
        loc_rib: h.peer_type == BmpPeerType::LocalRib,
    }
}

/// The RIB a route-monitoring message is about; `None` for Adj-RIB-Out.
fn view_of(h: &BmpPerPeerHeader) -> Option<Policy> {
    match h.peer_flags {
        PerPeerFlags::LocalRibPeerFlags(_) => Some(Policy::LocRib),
        PerPeerFlags::PeerFlags(_) if h.peer_type == BmpPeerType::LocalRib => Some(Policy::LocRib),
        PerPeerFlags::PeerFlags(f) if f.is_adj_rib_out() => None,
        PerPeerFlags::PeerFlags(f) if f.is_post_policy() => Some(Policy::Post),
        PerPeerFlags::PeerFlags(_) => Some(Policy::Pre),
    }
}

fn open_of(m: &BgpMessage) -> Option<&BgpOpenMessage> {
    match m {
        BgpMessage::Open(o) => Some(o),
        _ => None,
    }
}

fn capabilities(o: &BgpOpenMessage) -> impl Iterator<Item = &CapabilityValue> {
    o.opt_params.iter().flat_map(|p| match &p.param_value {
        ParamValue::Capacities(c) => c.iter().map(|c| &c.value).collect::<Vec<_>>(),
        _ => Vec::new(),
    })
}

/// The AS a router names in its OPEN: the 4-octet AS capability's, else the 2-byte field.
fn own_as(o: &BgpOpenMessage) -> u32 {
    capabilities(o)
        .find_map(|c| match c {
            CapabilityValue::FourOctetAs(f) => Some(f.asn),
            _ => None,
        })
        .unwrap_or(u32::from(o.asn))
}

/// Unicast address families an OPEN announces (IPv4 alone without multiprotocol capabilities).
fn open_families(o: &BgpOpenMessage) -> u8 {
    let mut any = false;
    let mut f = 0;
    for c in capabilities(o) {
        if let CapabilityValue::MultiprotocolExtensions(m) = c {
            any = true;
            if m.safi == Safi::Unicast {
                f |= match m.afi {
                    Afi::Ipv4 => V4,
                    Afi::Ipv6 => V6,
                    Afi::LinkState => 0,
                };
            }
        }
    }
    if any {
        f
    } else {
        V4
    }
}

/// The families both sides announce: those the session carries, each ending with an EoR.
fn families(sent: Option<&BgpOpenMessage>, received: Option<&BgpOpenMessage>) -> u8 {
    let f = sent.map_or(V4 | V6, open_families) & received.map_or(V4 | V6, open_families);
    if f == 0 {
        V4
    } else {
        f
    }
}

/// The address family of an End-of-RIB (RFC 4724 §2), `None` if `u` is none (or not unicast).
fn end_of_rib(u: &BgpUpdateMessage) -> Option<u8> {
    if !u.announced_prefixes.is_empty() || !u.withdrawn_prefixes.is_empty() {
        return None;
    }
    let mut attrs = u.attributes.iter();
    match (attrs.next(), attrs.next()) {
        (None, _) => Some(V4),
        (Some(AttributeValue::MpUnreachNlri(n)), None) if n.prefixes.is_empty() => {
            match (n.afi, n.safi) {
                (Afi::Ipv4, Safi::Unicast) => Some(V4),
                (Afi::Ipv6, Safi::Unicast) => Some(V6),
                _ => Some(0),
            }
        }
        _ => None,
    }
}
