//! MRT (RFC 6396) files to one best route per prefix.
//!
//! Reads TABLE_DUMP_V2 RIBs (with or without ADD-PATH, RFC 8050), the legacy TABLE_DUMP,
//! BGP4MP / BGP4MP_ET update files and the deprecated MRT type 5 (BGP) update files, plain,
//! gzip or bzip2 (recognised by their first bytes, not by their names). Parsing is done by
//! `bgpkit-parser`; this module keeps the routing state and chooses the routes.
//!
//! # Routing state
//! Every file is applied in the order given, record by record, to one table of candidate
//! routes keyed by (prefix, peer, ADD-PATH path id): a RIB entry or an announcement replaces
//! that peer's route, a withdrawal removes it, and a BGP4MP state change that takes a
//! session out of Established drops everything that peer had announced before (as its
//! routers would). So a RIB followed by the update files after it gives the final state.
//! Only unicast routes are kept (multicast RIBs and non-unicast MP_REACH are ignored).
//! Messages the collector itself sent (`*_LOCAL` BGP4MP subtypes) are ignored.
//!
//! # Choosing a route
//! With a [`PeerSelector`], only the routes of the matching peer(s) are kept. The best route
//! per prefix is chosen by the BGP decision process as far as MRT shows it (RFC 4271 §9.1.2.2),
//! simplified:
//! 1. highest LOCAL_PREF (a route without one counts as 100, the usual default);
//! 2. shortest AS path ([`Route::path_len`]: an AS_SET counts as one, confederation segments
//!    as nothing);
//! 3. lowest ORIGIN (IGP < EGP < INCOMPLETE);
//! 4. lowest MED, compared only between routes from the same neighbour AS (a route without
//!    MED counts as 0, RFC 4271 §9.1.2.2 c). To keep this well-defined the best route of each
//!    neighbour AS is chosen first and those winners are then compared without MED, which is
//!    what routers call "deterministic MED";
//! 5. lowest peer address, then lowest ADD-PATH path id.
//!
//! Left out, because MRT does not show them: eBGP over iBGP, the IGP cost to the next hop,
//! router ids / cluster lists, route age, and whether the next hop is reachable at all.
//!
//! # Damage
//! A missing file, a file that holds no MRT record at all (a text file, say) or an
//! unsupported compression is an error naming the file. Damaged records inside an otherwise
//! readable file are skipped with bgpkit-parser's framing recovery (it resynchronises on the
//! next chain of valid records): each skipped stretch counts once in [`BgpView::skipped`] and
//! is logged with the file and byte offset. If the recovery cannot find a next record, the
//! rest of that file is lost: that also counts as one skip and is logged, it does not fail.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::{bail, Context, Result};
use bgpkit_parser::models::{
    AttributeValue, Bgp4MpEnum, Bgp4MpType, BgpMessage, BgpState, BgpUpdateMessage, LegacyBgp,
    MrtMessage, NetworkPrefix, Safi, TableDumpMessage, TableDumpV2Message, TableDumpV2Type,
};
use bgpkit_parser::parser::iters::{RecoveryConfig, RecoveryEvent};
use bgpkit_parser::BgpkitParser;

use super::decision::{self, attrs_of, Attrs, Ranked};
use crate::model::{IpNet, Route};

/// Which peer's view to take: its address, or its AS number (all sessions of that AS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerSelector {
    Addr(IpAddr),
    Asn(u32),
}

impl FromStr for PeerSelector {
    type Err = anyhow::Error;

    /// "192.0.2.1", "2001:db8::1", "AS3356", "as3356" or "3356".
    fn from_str(text: &str) -> Result<Self> {
        let t = text.trim();
        if let Ok(addr) = t.parse::<IpAddr>() {
            return Ok(PeerSelector::Addr(addr));
        }
        let digits = t
            .strip_prefix("AS")
            .or_else(|| t.strip_prefix("as"))
            .unwrap_or(t);
        match digits.parse::<u32>() {
            Ok(asn) => Ok(PeerSelector::Asn(asn)),
            Err(_) => bail!(
                "peer {text:?} is neither an IP address nor an AS number \
                 (e.g. 192.0.2.1, AS3356 or 3356)"
            ),
        }
    }
}

impl fmt::Display for PeerSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerSelector::Addr(a) => write!(f, "peer {a}"),
            PeerSelector::Asn(n) => write!(f, "peer AS{n}"),
        }
    }
}

impl PeerSelector {
    pub(crate) fn matches(&self, ip: IpAddr, asn: u32) -> bool {
        match *self {
            PeerSelector::Addr(a) => a == ip,
            PeerSelector::Asn(n) => n == asn,
        }
    }
}

/// The routing view read from MRT files.
#[derive(Clone, Debug, Default)]
pub struct BgpView {
    /// One best route per prefix, IPv4 and IPv6, sorted by prefix (IPv4 first).
    pub routes: Vec<(IpNet, Route)>,
    /// MRT records read (all files, all types).
    pub records: usize,
    /// Damaged stretches of records skipped (see the module doc).
    pub skipped: usize,
    /// Peers whose routes were read (after the peer selection, if any).
    pub peers: usize,
}

/// Load MRT files (in the order given) into one view; see the module doc.
pub fn load(paths: &[PathBuf], peer: Option<&PeerSelector>) -> Result<BgpView> {
    if paths.is_empty() {
        bail!("no MRT file given");
    }
    let mut state = State::new(peer.copied());
    for path in paths {
        state.load_file(path)?;
    }
    state.finish()
}

/// Open a file, plain, gzip or bzip2 (by its first bytes), as a stream of MRT bytes.
pub fn open_decompressed(path: &Path) -> Result<Box<dyn Read + Send>> {
    let file =
        File::open(path).with_context(|| format!("cannot open MRT file {}", path.display()))?;
    let mut reader = BufReader::with_capacity(1 << 16, file);
    let head = reader
        .fill_buf()
        .with_context(|| format!("cannot read MRT file {}", path.display()))?;
    Ok(match head {
        [0x1f, 0x8b, ..] => Box::new(flate2::read::MultiGzDecoder::new(reader)),
        [b'B', b'Z', b'h', ..] => Box::new(bzip2::read::MultiBzDecoder::new(reader)),
        [0xfd, b'7', b'z', b'X', b'Z', 0, ..] => {
            bail!(
                "{}: xz-compressed; only gzip, bzip2 or uncompressed MRT files are supported",
                path.display()
            )
        }
        [0x28, 0xb5, 0x2f, 0xfd, ..] => {
            bail!(
                "{}: zstd-compressed; only gzip, bzip2 or uncompressed MRT files are supported",
                path.display()
            )
        }
        _ => Box::new(reader),
    })
}

#[derive(Clone, Copy, Debug)]
struct Candidate {
    peer: u32,
    path_id: u32,
    /// The peer's session epoch when the route was learnt; stale if the session went down since.
    epoch: u32,
    attrs: Attrs,
}

struct PeerInfo {
    ip: IpAddr,
    asn: u32,
    epoch: u32,
    selected: bool,
    has_routes: bool,
}

struct State {
    selector: Option<PeerSelector>,
    peers: Vec<PeerInfo>,
    peer_index: HashMap<(IpAddr, u32), u32>,
    table: HashMap<IpNet, Vec<Candidate>>,
    records: usize,
    skipped: usize,
}

impl State {
    fn new(selector: Option<PeerSelector>) -> Self {
        State {
            selector,
            peers: Vec::new(),
            peer_index: HashMap::new(),
            table: HashMap::new(),
            records: 0,
            skipped: 0,
        }
    }

    fn peer(&mut self, ip: IpAddr, asn: u32) -> u32 {
        if let Some(&i) = self.peer_index.get(&(ip, asn)) {
            return i;
        }
        let i = self.peers.len() as u32;
        let selected = self.selector.is_none_or(|s| s.matches(ip, asn));
        self.peers.push(PeerInfo {
            ip,
            asn,
            epoch: 0,
            selected,
            has_routes: false,
        });
        self.peer_index.insert((ip, asn), i);
        i
    }

    fn announce(&mut self, prefix: IpNet, peer: u32, path_id: u32, attrs: Attrs) {
        let info = &mut self.peers[peer as usize];
        if !info.selected {
            return;
        }
        info.has_routes = true;
        let cand = Candidate {
            peer,
            path_id,
            epoch: info.epoch,
            attrs,
        };
        let list = self.table.entry(prefix.trunc()).or_default();
        match list
            .iter_mut()
            .find(|c| c.peer == peer && c.path_id == path_id)
        {
            Some(c) => *c = cand,
            None => list.push(cand),
        }
    }

    fn withdraw(&mut self, prefix: IpNet, peer: u32, path_id: u32) {
        if !self.peers[peer as usize].selected {
            return;
        }
        if let Some(list) = self.table.get_mut(&prefix.trunc()) {
            list.retain(|c| !(c.peer == peer && c.path_id == path_id));
        }
    }

    fn session_down(&mut self, peer: u32) {
        self.peers[peer as usize].epoch += 1;
    }

    fn load_file(&mut self, path: &Path) -> Result<()> {
        let reader = open_decompressed(path)?;
        let parser = BgpkitParser::from_reader(reader).disable_warnings();
        // Peer index tables are per file (a RIB's entries refer to its own table).
        let mut rib_peers: Option<Vec<u32>> = None;
        let mut records = 0usize;
        let mut first_problem: Option<String> = None;
        let mut skipped = 0usize;
        for event in parser.into_recovering_record_iter(RecoveryConfig::default()) {
            match event {
                Ok(RecoveryEvent::Item(record)) => {
                    records += 1;
                    if let Err(why) = self.apply(record.message, &mut rib_peers) {
                        skipped += 1;
                        log::warn!("{}: record {records} skipped: {why}", path.display());
                        first_problem.get_or_insert(why);
                    }
                }
                Ok(RecoveryEvent::Gap(gap)) => {
                    let what = format!(
                        "damaged records at bytes {}..{} (of the decompressed stream) skipped: {}",
                        gap.start_offset, gap.end_offset, gap.cause
                    );
                    log::warn!("{}: {what}", path.display());
                    skipped += 1;
                    first_problem.get_or_insert(what);
                }
                Err(err) => {
                    let what = format!(
                        "unreadable from byte {} on, rest of file lost: {}",
                        err.offset, err.error
                    );
                    log::warn!("{}: {what}", path.display());
                    skipped += 1;
                    first_problem.get_or_insert(what);
                    break;
                }
            }
        }
        if records == 0 {
            match first_problem {
                Some(why) => bail!(
                    "{}: not an MRT file (no readable MRT record): {why}",
                    path.display()
                ),
                None => bail!("{}: empty, no MRT record", path.display()),
            }
        }
        self.records += records;
        self.skipped += skipped;
        Ok(())
    }

    /// Apply one record. An error means the record was unusable (counted as skipped).
    fn apply(
        &mut self,
        message: MrtMessage,
        rib_peers: &mut Option<Vec<u32>>,
    ) -> Result<(), String> {
        match message {
            MrtMessage::TableDumpV2Message(TableDumpV2Message::PeerIndexTable(table)) => {
                let max = table
                    .id_peer_map
                    .keys()
                    .copied()
                    .max()
                    .map_or(0, |m| m as usize + 1);
                let mut ids = vec![u32::MAX; max];
                for (id, p) in &table.id_peer_map {
                    ids[*id as usize] = self.peer(p.peer_ip, u32::from(p.peer_asn));
                }
                *rib_peers = Some(ids);
            }
            MrtMessage::TableDumpV2Message(TableDumpV2Message::RibAfi(rib)) => {
                let unicast = matches!(
                    rib.rib_type,
                    TableDumpV2Type::RibIpv4Unicast
                        | TableDumpV2Type::RibIpv6Unicast
                        | TableDumpV2Type::RibIpv4UnicastAddPath
                        | TableDumpV2Type::RibIpv6UnicastAddPath
                );
                if !unicast {
                    return Ok(());
                }
                let Some(ids) = rib_peers.as_ref() else {
                    return Err(format!(
                        "RIB entry for {} before any PEER_INDEX_TABLE",
                        rib.prefix.prefix
                    ));
                };
                let prefix = rib.prefix.prefix;
                let mut unknown = 0;
                for entry in rib.rib_entries {
                    let Some(&peer) = ids
                        .get(entry.peer_index as usize)
                        .filter(|&&p| p != u32::MAX)
                    else {
                        unknown += 1;
                        continue;
                    };
                    let attrs = attrs_of(&entry.attributes, self.peers[peer as usize].asn, None);
                    let path_id = entry.path_id.or(rib.prefix.path_id).unwrap_or(0);
                    self.announce(prefix, peer, path_id, attrs);
                }
                if unknown > 0 {
                    return Err(format!(
                        "{unknown} RIB entries for {prefix} name a peer index the \
                         PEER_INDEX_TABLE lacks"
                    ));
                }
            }
            MrtMessage::TableDumpV2Message(_) => {} // RIB_GENERIC, geo peer table
            MrtMessage::TableDumpMessage(m) => self.table_dump_v1(m),
            MrtMessage::TableDumpMessageBatch(ms) => {
                for m in ms {
                    self.table_dump_v1(m);
                }
            }
            MrtMessage::Bgp4Mp(Bgp4MpEnum::Message(m)) => {
                let local = matches!(
                    m.msg_type,
                    Bgp4MpType::MessageLocal
                        | Bgp4MpType::MessageAs4Local
                        | Bgp4MpType::MessageLocalAddpath
                        | Bgp4MpType::MessageLocalAs4Addpath
                );
                if local {
                    return Ok(());
                }
                if let BgpMessage::Update(update) = m.bgp_message {
                    let peer = self.peer(m.peer_ip, u32::from(m.peer_asn));
                    self.update(peer, update);
                }
            }
            MrtMessage::Bgp4Mp(Bgp4MpEnum::StateChange(s)) => {
                if s.old_state == BgpState::Established && s.new_state != BgpState::Established {
                    let peer = self.peer(s.peer_ip, u32::from(s.peer_asn));
                    self.session_down(peer);
                }
            }
            MrtMessage::LegacyBgp(LegacyBgp::Message(m)) => {
                if let BgpMessage::Update(update) = m.bgp_message {
                    let peer = self.peer(m.peer_ip, u32::from(m.peer_asn));
                    self.update(peer, update);
                }
            }
            MrtMessage::LegacyBgp(LegacyBgp::StateChange(s)) => {
                if s.old_state == BgpState::Established && s.new_state != BgpState::Established {
                    let peer = self.peer(s.peer_ip, u32::from(s.peer_asn));
                    self.session_down(peer);
                }
            }
        }
        Ok(())
    }

    fn table_dump_v1(&mut self, m: TableDumpMessage) {
        let peer = self.peer(m.peer_ip, u32::from(m.peer_asn));
        let attrs = attrs_of(&m.attributes, u32::from(m.peer_asn), None);
        self.announce(m.prefix.prefix, peer, 0, attrs);
    }

    /// Withdrawals first, then announcements (as routers process an UPDATE).
    fn update(&mut self, peer: u32, update: BgpUpdateMessage) {
        if !self.peers[peer as usize].selected {
            return;
        }
        for p in &update.withdrawn_prefixes {
            self.withdraw(p.prefix, peer, p.path_id.unwrap_or(0));
        }
        let mut mp_announced: &[NetworkPrefix] = &[];
        for attr in update.attributes.iter() {
            match attr {
                AttributeValue::MpUnreachNlri(nlri) if nlri.safi == Safi::Unicast => {
                    for p in &nlri.prefixes {
                        self.withdraw(p.prefix, peer, p.path_id.unwrap_or(0));
                    }
                }
                AttributeValue::MpReachNlri(nlri) if nlri.safi == Safi::Unicast => {
                    mp_announced = &nlri.prefixes;
                }
                _ => {}
            }
        }
        if update.announced_prefixes.is_empty() && mp_announced.is_empty() {
            return;
        }
        let attrs = attrs_of(&update.attributes, self.peers[peer as usize].asn, None);
        for p in update.announced_prefixes.iter().chain(mp_announced) {
            self.announce(p.prefix, peer, p.path_id.unwrap_or(0), attrs);
        }
    }

    fn finish(self) -> Result<BgpView> {
        if let Some(sel) = self.selector {
            if !self.peers.iter().any(|p| p.selected) {
                let mut seen: Vec<String> = self
                    .peers
                    .iter()
                    .take(12)
                    .map(|p| format!("{} AS{}", p.ip, p.asn))
                    .collect();
                if self.peers.len() > 12 {
                    seen.push(format!("… ({} peers)", self.peers.len()));
                }
                bail!(
                    "no {sel} in the MRT files; their peers are: {}",
                    seen.join(", ")
                );
            }
        }
        let peers = &self.peers;
        let mut routes: Vec<(IpNet, Route)> = Vec::with_capacity(self.table.len());
        for (prefix, list) in &self.table {
            if let Some(best) = best(list, peers) {
                let info = &peers[best.peer as usize];
                routes.push((
                    *prefix,
                    Route {
                        path_len: best.attrs.path_len,
                        neighbor_as: best.attrs.neighbor_as,
                        peer_as: info.asn,
                        next_hop: best.attrs.next_hop.unwrap_or(info.ip),
                        med: best.attrs.med,
                    },
                ));
            }
        }
        routes.sort_unstable_by_key(|r| r.0);
        Ok(BgpView {
            routes,
            records: self.records,
            skipped: self.skipped,
            peers: self.peers.iter().filter(|p| p.has_routes).count(),
        })
    }
}

/// The best live candidate (routes of a session that went down since do not count).
fn best<'a>(list: &'a [Candidate], peers: &[PeerInfo]) -> Option<&'a Candidate> {
    let live = list
        .iter()
        .filter(|c| c.epoch == peers[c.peer as usize].epoch)
        .map(|c| {
            let ranked = Ranked {
                attrs: &c.attrs,
                peer_ip: peers[c.peer as usize].ip,
                path_id: c.path_id,
            };
            (c, ranked)
        });
    decision::best(live)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::test_data;
    use bgpkit_parser::models::{
        Afi, AsPath, AsPathSegment, Asn, Attributes, Bgp4MpMessage, Bgp4MpStateChange,
        CommonHeader, ElemType, EntryType, MrtRecord, NextHopAddress, Nlri, Origin,
    };
    use std::collections::{BTreeMap, HashSet};
    use std::io::Write;

    fn bgp(name: &str) -> PathBuf {
        test_data(&format!("bgp/{name}"))
    }

    fn route<'a>(v: &'a BgpView, prefix: &str) -> Option<&'a Route> {
        let p: IpNet = prefix.parse().unwrap();
        v.routes
            .binary_search_by(|r| r.0.cmp(&p))
            .ok()
            .map(|i| &v.routes[i].1)
    }

    /// bgpkit's own elements of a file, per prefix: (peer ip, peer AS, path len, first AS,
    /// next hop, local pref).
    type Elem = (IpAddr, u32, u32, Option<u32>, Option<IpAddr>, Option<u32>);
    fn elems(path: &Path) -> BTreeMap<IpNet, Vec<Elem>> {
        let mut m: BTreeMap<IpNet, Vec<Elem>> = BTreeMap::new();
        for e in BgpkitParser::from_reader(open_decompressed(path).unwrap()).into_elem_iter() {
            assert_eq!(
                e.elem_type,
                ElemType::ANNOUNCE,
                "a RIB has only announcements"
            );
            let p = e.as_path.as_ref().unwrap();
            let first = p.iter_segments().find_map(|s| match s {
                AsPathSegment::AsSequence(v) | AsPathSegment::AsSet(v) => {
                    v.first().map(|a| u32::from(*a))
                }
                _ => None,
            });
            m.entry(e.prefix.prefix).or_default().push((
                e.peer_ip,
                u32::from(e.peer_asn),
                p.route_len() as u32,
                first,
                e.next_hop,
                e.local_pref,
            ));
        }
        m
    }

    /// Our per-peer view against bgpkit's elements for a few prefixes, and the best route
    /// against the shortest path where local-pref does not decide.
    /// The file decompressed once into the temp dir: the bzip2 decoder is slow in debug
    /// builds, and the per-peer checks read a file several times.
    fn plain(name: &str) -> PathBuf {
        static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _guard = LOCK
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Shared by test runs (not per process), so that they do not pile up in the temp dir.
        let dir = std::env::temp_dir().join("director-inputs-mrt-plain");
        std::fs::create_dir_all(&dir).unwrap();
        let src = bgp(name);
        let out = dir.join(format!(
            "{name}.{}.mrt",
            std::fs::metadata(&src).unwrap().len()
        ));
        if !out.exists() {
            let mut bytes = Vec::new();
            open_decompressed(&src)
                .unwrap()
                .read_to_end(&mut bytes)
                .unwrap();
            let part = dir.join(format!("{name}.{}.part", std::process::id()));
            std::fs::write(&part, bytes).unwrap();
            std::fs::rename(&part, &out).unwrap();
        }
        out
    }

    fn check_rib_against_elements(file: &str, v: &BgpView) {
        let path = plain(file);
        let el = elems(&path);
        assert_eq!(el.len(), v.routes.len(), "{file}: one route per prefix");
        // Best = shortest where every entry has the same LOCAL_PREF.
        let mut compared = 0;
        for (prefix, es) in &el {
            let r = route(v, &prefix.to_string()).unwrap_or_else(|| panic!("{prefix} missing"));
            if es.iter().all(|e| e.5 == es[0].5) {
                let min = es.iter().map(|e| e.2).min().unwrap();
                assert_eq!(
                    r.path_len, min,
                    "{file} {prefix}: best path is not the shortest of {es:?}"
                );
                compared += 1;
            }
        }
        assert!(
            compared * 10 > el.len() * 9,
            "{file}: only {compared} of {} prefixes compared",
            el.len()
        );
        // Spot checks, one peer's view at a time.
        for nth in [0usize, el.len() / 3, el.len() - 1] {
            let (prefix, es) = el.iter().nth(nth).unwrap();
            let e = es[es.len() / 2];
            let one = load(std::slice::from_ref(&path), Some(&PeerSelector::Addr(e.0))).unwrap();
            assert_eq!(one.peers, 1);
            let r = route(&one, &prefix.to_string()).unwrap();
            assert_eq!(r.path_len, e.2, "{file} {prefix} via {}: path length", e.0);
            assert_eq!(
                r.neighbor_as,
                e.3.unwrap_or(e.1),
                "{file} {prefix} via {}: neighbour AS",
                e.0
            );
            assert_eq!(
                Some(r.next_hop),
                e.4,
                "{file} {prefix} via {}: next hop",
                e.0
            );
            let of_peer = el
                .values()
                .filter(|es| es.iter().any(|x| x.0 == e.0))
                .count();
            assert_eq!(one.routes.len(), of_peer, "{file}: routes of peer {}", e.0);
        }
    }

    #[test]
    fn inputs_mrt_rib_v4_slice() {
        let f = "rib.20140523.0600.slice-clean.bz2";
        let v = load(&[bgp(f)], None).unwrap();
        assert_eq!(
            (v.routes.len(), v.records, v.skipped, v.peers),
            (9072, 9073, 0, 35)
        );
        assert!(v.routes.iter().all(|r| r.0.addr().is_ipv4()));
        assert!(
            v.routes.windows(2).all(|w| w[0].0 < w[1].0),
            "sorted, one per prefix"
        );
        check_rib_against_elements(f, &v);
    }

    #[test]
    fn inputs_mrt_rib_v6_slice() {
        let f = "rib6.20151101.0600.slice-clean.bz2";
        let v = load(&[bgp(f)], None).unwrap();
        assert_eq!(
            (v.routes.len(), v.records, v.skipped, v.peers),
            (6870, 6871, 0, 27)
        );
        assert!(v
            .routes
            .iter()
            .all(|r| r.0.addr().is_ipv6() && r.1.next_hop.is_ipv6()));
        check_rib_against_elements(f, &v);
    }

    #[test]
    fn inputs_mrt_rib_peer_selection() {
        let f = plain("rib.20140523.0600.slice-clean.bz2");
        let el = elems(&f);
        // The AS with the most sessions in this view.
        let mut sessions: BTreeMap<u32, HashSet<IpAddr>> = BTreeMap::new();
        for e in el.values().flatten() {
            sessions.entry(e.1).or_default().insert(e.0);
        }
        let (&asn, ips) = sessions.iter().max_by_key(|(_, s)| s.len()).unwrap();
        let by_as = load(
            std::slice::from_ref(&f),
            Some(&format!("AS{asn}").parse().unwrap()),
        )
        .unwrap();
        assert_eq!(by_as.peers, ips.len());
        let covered = el
            .values()
            .filter(|es| es.iter().any(|e| e.1 == asn))
            .count();
        assert_eq!(by_as.routes.len(), covered);
        let same = load(
            std::slice::from_ref(&f),
            Some(&asn.to_string().parse().unwrap()),
        )
        .unwrap();
        assert_eq!(same.routes, by_as.routes);
        // By address: a single session.
        let ip = *ips.iter().next().unwrap();
        let by_ip = load(
            std::slice::from_ref(&f),
            Some(&ip.to_string().parse().unwrap()),
        )
        .unwrap();
        assert_eq!(by_ip.peers, 1);
        assert_eq!(
            by_ip.routes.len(),
            el.values()
                .filter(|es| es.iter().any(|e| e.0 == ip))
                .count()
        );
        // Nobody.
        let e = load(std::slice::from_ref(&f), Some(&PeerSelector::Asn(64512)))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no peer AS64512 in the MRT files; their peers are: "),
            "{e}"
        );
        let e = load(&[f], Some(&"192.0.2.99".parse().unwrap()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no peer 192.0.2.99"), "{e}");
        assert!("ASx".parse::<PeerSelector>().is_err());
        assert_eq!(
            "as3356".parse::<PeerSelector>().unwrap(),
            PeerSelector::Asn(3356)
        );
        assert_eq!(
            "2001:db8::1".parse::<PeerSelector>().unwrap(),
            PeerSelector::Addr("2001:db8::1".parse().unwrap())
        );
    }

    #[test]
    fn inputs_mrt_add_path_bviews() {
        for (f, v6) in [
            ("bview.ipv4_unicast_add_path.gz", false),
            ("bview.ipv6_unicast_add_path.gz", true),
        ] {
            let path = bgp(f);
            // The file really has several paths per (prefix, peer).
            // (bgpkit's elements do not carry a RIB entry's path id: count entries instead.)
            let mut ids: BTreeMap<(IpNet, IpAddr), Vec<()>> = BTreeMap::new();
            for e in BgpkitParser::from_reader(open_decompressed(&path).unwrap()).into_elem_iter() {
                ids.entry((e.prefix.prefix, e.peer_ip))
                    .or_default()
                    .push(());
            }
            assert!(
                ids.values().any(|s| s.len() > 1),
                "{f}: no ADD-PATH prefix with several paths"
            );
            let prefixes: HashSet<IpNet> = ids.keys().map(|k| k.0).collect();
            let v = load(std::slice::from_ref(&path), None).unwrap();
            assert_eq!(
                (v.routes.len(), v.records, v.skipped, v.peers),
                (31, 32, 0, 3),
                "{f}"
            );
            assert_eq!(v.routes.len(), prefixes.len());
            assert!(v.routes.iter().all(|r| r.0.addr().is_ipv6() == v6));
            // One peer, several paths per prefix: still one route per prefix.
            let peer = ids.iter().find(|(_, s)| s.len() > 1).unwrap().0 .1;
            let one = load(&[path], Some(&PeerSelector::Addr(peer))).unwrap();
            assert_eq!(one.routes.len(), ids.keys().filter(|k| k.1 == peer).count());
        }
    }

    /// The full-table BGP4MP_ET file. Debug build: ~5 s here; release: well under a second.
    #[test]
    fn inputs_mrt_bgp4mp_et_full_table() {
        let t = std::time::Instant::now();
        let v = load(&[bgp("updates.et-header.2015.gz")], None).unwrap();
        let took = t.elapsed();
        eprintln!(
            "updates.et-header.2015.gz: {} routes, {} records in {took:?}, peak RSS {}",
            v.routes.len(),
            v.records,
            crate::inputs::peak_rss()
        );
        // 577,706 distinct prefixes are announced; 3 of them are withdrawn later in the file
        // (84.205.78.0/24, 202.155.148.0/24, 114.57.40.0/22), so the final table has 577,703.
        assert_eq!(
            (v.routes.len(), v.records, v.skipped, v.peers),
            (577_703, 89_686, 0, 1)
        );
        for gone in ["84.205.78.0/24", "202.155.148.0/24", "114.57.40.0/22"] {
            assert!(route(&v, gone).is_none(), "{gone} was withdrawn");
        }
        assert!(v.routes.iter().all(|r| r.0.addr().is_ipv4()));
        // AS3856 (PCH) feeds like a route server: it does not prepend itself, so the first AS
        // of the path, the neighbour, varies (AS2914 on ~114 k prefixes, AS5580 on ~65 k, …).
        let neighbours: HashSet<u32> = v.routes.iter().map(|r| r.1.neighbor_as).collect();
        let own = v.routes.iter().filter(|r| r.1.neighbor_as == 3856).count();
        assert!(
            neighbours.len() > 1000 && own < 100,
            "{} neighbour ASes, AS3856 on {own}",
            neighbours.len()
        );
        // Every route as bgpkit's own elements leave it (last announcement, unless withdrawn).
        type Seen = (u32, Option<u32>, Option<IpAddr>); // path length, first AS, next hop
        let mut last: HashMap<IpNet, Option<Seen>> = HashMap::new();
        let path = bgp("updates.et-header.2015.gz");
        for e in BgpkitParser::from_reader(open_decompressed(&path).unwrap()).into_elem_iter() {
            let val = match e.elem_type {
                ElemType::ANNOUNCE => {
                    let p = e.as_path.as_ref().unwrap();
                    let first = p.iter_segments().find_map(|s| match s {
                        AsPathSegment::AsSequence(v) | AsPathSegment::AsSet(v) => {
                            v.first().map(|a| u32::from(*a))
                        }
                        _ => None,
                    });
                    Some((p.route_len() as u32, first.or(Some(3856)), e.next_hop))
                    // empty path: the peer
                }
                ElemType::WITHDRAW => None,
            };
            last.insert(e.prefix.prefix, val);
        }
        let live: BTreeMap<IpNet, Seen> = last
            .into_iter()
            .filter_map(|(p, v)| Some((p, v?)))
            .collect();
        assert_eq!(live.len(), v.routes.len());
        for ((p, want), (q, got)) in live.iter().zip(&v.routes) {
            assert_eq!(p, q);
            assert_eq!(
                (got.path_len, Some(got.neighbor_as), Some(got.next_hop)),
                *want,
                "{p}"
            );
        }
        let mean =
            v.routes.iter().map(|r| r.1.path_len as f64).sum::<f64>() / v.routes.len() as f64;
        assert!((2.0..8.0).contains(&mean), "mean AS path length {mean}");
        let by_as = load(
            &[bgp("updates.et-header.2015.gz")],
            Some(&PeerSelector::Asn(3856)),
        )
        .unwrap();
        assert_eq!(by_as.routes.len(), 577_703);
    }

    #[test]
    fn inputs_mrt_update_files() {
        let v = load(&[bgp("updates.20160811.1600.gz")], None).unwrap();
        assert_eq!((v.records, v.skipped, v.peers), (17_406, 0, 35));
        let v6 = v.routes.iter().filter(|r| r.0.addr().is_ipv6()).count();
        assert!(
            v6 > 0 && v6 < v.routes.len(),
            "{v6} IPv6 of {}",
            v.routes.len()
        );
        assert!(v
            .routes
            .iter()
            .all(|r| r.0.addr().is_ipv6() == r.1.next_hop.is_ipv6() || r.0.addr().is_ipv6()));
        // Several files in order: RIS then RouteViews, both IPv4 + IPv6.
        let a = load(&[bgp("ris.rrc06.updates.1427846400.gz")], None).unwrap();
        let b = load(
            &[bgp("routeviews.route-views.jinx.updates.1427846400.bz2")],
            None,
        )
        .unwrap();
        let ab = load(
            &[
                bgp("ris.rrc06.updates.1427846400.gz"),
                bgp("routeviews.route-views.jinx.updates.1427846400.bz2"),
            ],
            None,
        )
        .unwrap();
        assert_eq!(ab.records, a.records + b.records);
        assert_eq!(ab.peers, a.peers + b.peers);
        assert!(ab.routes.len() >= a.routes.len().max(b.routes.len()));
    }

    #[test]
    fn inputs_mrt_damaged_file_skips_and_counts() {
        let v = load(&[bgp("damaged.updates.20000325.0345.gz")], None).unwrap();
        // Two stretches with broken record boundaries, the rest read (legacy MRT type 5 BGP).
        assert_eq!((v.records, v.skipped), (2580, 2));
        assert!(
            v.routes.len() > 500 && v.peers > 1,
            "{} routes, {} peers",
            v.routes.len(),
            v.peers
        );
    }

    #[test]
    fn inputs_mrt_refuses_what_is_not_mrt() {
        let readme = test_data("README.md");
        let e = load(std::slice::from_ref(&readme), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&readme.display().to_string()) && e.contains("not an MRT file"),
            "{e}"
        );
        let e = load(&[PathBuf::from("/nonexistent/rib.bz2")], None).unwrap_err();
        assert!(
            format!("{e:#}").contains("/nonexistent/rib.bz2")
                && format!("{e:#}").contains("No such file"),
            "{e:#}"
        );
        let dir = tmp_dir();
        let empty = dir.join("empty.mrt");
        std::fs::write(&empty, b"").unwrap();
        let e = load(&[empty], None).unwrap_err().to_string();
        assert!(e.contains("empty.mrt: empty"), "{e}");
        let xz = dir.join("x.xz");
        std::fs::write(&xz, b"\xfd7zXZ\x00rest").unwrap();
        let e = load(&[xz], None).unwrap_err().to_string();
        assert!(e.contains("x.xz: xz-compressed"), "{e}");
        // A good file then a bad one: the error names the bad one.
        let e = load(
            &[bgp("ris.rrc06.updates.1427846400.gz"), readme.clone()],
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("README.md"), "{e}");
        assert!(load(&[], None).is_err());
    }

    // ---- synthetic update files: decision process and update semantics ----

    fn tmp_dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("director-inputs-mrt-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    struct Ann<'a> {
        peer: (&'a str, u32),
        prefixes: &'a [&'a str],
        withdrawn: &'a [&'a str],
        path: Vec<AsPathSegment>,
        lp: Option<u32>,
        med: Option<u32>,
        origin: Origin,
    }

    fn ann<'a>(peer: (&'a str, u32), prefixes: &'a [&'a str], path: &[u32]) -> Ann<'a> {
        Ann {
            peer,
            prefixes,
            withdrawn: &[],
            path: vec![AsPathSegment::sequence(path)],
            lp: None,
            med: None,
            origin: Origin::IGP,
        }
    }

    fn wd<'a>(peer: (&'a str, u32), withdrawn: &'a [&'a str]) -> Ann<'a> {
        Ann {
            peer,
            prefixes: &[],
            withdrawn,
            path: vec![],
            lp: None,
            med: None,
            origin: Origin::IGP,
        }
    }

    fn record(message: MrtMessage, entry_type: EntryType, subtype: u16) -> Vec<u8> {
        MrtRecord {
            common_header: CommonHeader {
                timestamp: 1,
                microsecond_timestamp: None,
                entry_type,
                entry_subtype: subtype,
                length: 0,
            },
            message,
        }
        .encode()
        .unwrap()
        .to_vec()
    }

    fn update(a: &Ann<'_>) -> Vec<u8> {
        let peer_ip: IpAddr = a.peer.0.parse().unwrap();
        let np = |p: &&str| NetworkPrefix::new(p.parse().unwrap(), None);
        let (v4, v6): (Vec<&&str>, Vec<&&str>) = a.prefixes.iter().partition(|p| !p.contains(':'));
        let (w4, w6): (Vec<&&str>, Vec<&&str>) = a.withdrawn.iter().partition(|p| !p.contains(':'));
        let mut attrs = Vec::new();
        if !a.prefixes.is_empty() {
            attrs.push(AttributeValue::Origin(a.origin));
            attrs.push(AttributeValue::AsPath(AsPath::from_segments(
                a.path.clone(),
            )));
            if !v4.is_empty() {
                attrs.push(AttributeValue::NextHop(peer_ip));
            }
            if let Some(m) = a.med {
                attrs.push(AttributeValue::MultiExitDiscriminator(m));
            }
            if let Some(l) = a.lp {
                attrs.push(AttributeValue::LocalPreference(l));
            }
        }
        let nlri = |prefixes: Vec<NetworkPrefix>, nh| Nlri {
            afi: Afi::Ipv6,
            safi: Safi::Unicast,
            next_hop: nh,
            prefixes,
            labeled_prefixes: None,
            link_state_nlris: None,
            flowspec_nlris: None,
        };
        if !v6.is_empty() {
            let nh = NextHopAddress::Ipv6("2001:db8:ffff::1".parse().unwrap());
            attrs.push(AttributeValue::MpReachNlri(nlri(
                v6.into_iter().map(np).collect(),
                Some(nh),
            )));
        }
        if !w6.is_empty() {
            attrs.push(AttributeValue::MpUnreachNlri(nlri(
                w6.into_iter().map(np).collect(),
                None,
            )));
        }
        let msg = BgpUpdateMessage {
            withdrawn_prefixes: w4.into_iter().map(np).collect(),
            attributes: Attributes::from_iter(attrs),
            announced_prefixes: v4.into_iter().map(np).collect(),
        };
        let m = Bgp4MpMessage {
            msg_type: Bgp4MpType::MessageAs4,
            peer_asn: Asn::new_32bit(a.peer.1),
            local_asn: Asn::new_32bit(65000),
            interface_index: 0,
            peer_ip,
            local_ip: if peer_ip.is_ipv4() {
                "10.255.255.254".parse().unwrap()
            } else {
                "::1".parse().unwrap()
            },
            bgp_message: BgpMessage::Update(msg),
        };
        record(
            MrtMessage::Bgp4Mp(Bgp4MpEnum::Message(m)),
            EntryType::BGP4MP,
            Bgp4MpType::MessageAs4 as u16,
        )
    }

    fn session_down(peer: (&str, u32)) -> Vec<u8> {
        let s = Bgp4MpStateChange {
            msg_type: Bgp4MpType::StateChangeAs4,
            peer_asn: Asn::new_32bit(peer.1),
            local_asn: Asn::new_32bit(65000),
            interface_index: 0,
            peer_ip: peer.0.parse().unwrap(),
            local_addr: "10.255.255.254".parse().unwrap(),
            old_state: BgpState::Established,
            new_state: BgpState::Idle,
        };
        record(
            MrtMessage::Bgp4Mp(Bgp4MpEnum::StateChange(s)),
            EntryType::BGP4MP,
            Bgp4MpType::StateChangeAs4 as u16,
        )
    }

    fn file(name: &str, records: &[Vec<u8>], gzip: bool) -> PathBuf {
        let p = tmp_dir().join(name);
        let bytes: Vec<u8> = records.concat();
        if gzip {
            let mut w = flate2::write::GzEncoder::new(
                File::create(&p).unwrap(),
                flate2::Compression::fast(),
            );
            w.write_all(&bytes).unwrap();
            w.finish().unwrap();
        } else {
            std::fs::write(&p, bytes).unwrap();
        }
        p
    }

    const A: (&str, u32) = ("10.0.0.1", 65001);
    const A2: (&str, u32) = ("10.0.0.5", 65001);
    const B: (&str, u32) = ("10.0.0.2", 65002);
    const C: (&str, u32) = ("2001:db8::3", 65003);

    #[test]
    fn inputs_mrt_decision_process() {
        let mut lp = ann(A, &["192.0.2.0/24"], &[65001, 1, 2, 3]);
        lp.lp = Some(200);
        let mut incomplete = ann(A, &["198.51.100.0/24"], &[65001, 9]);
        incomplete.origin = Origin::INCOMPLETE;
        let mut med_a = ann(A, &["203.0.113.0/24", "203.0.114.0/24"], &[65001, 9]);
        med_a.med = Some(50);
        let mut med_a2 = ann(A2, &["203.0.113.0/24"], &[65001, 8]);
        med_a2.med = Some(10);
        let mut med_b = ann(B, &["203.0.114.0/24"], &[65002, 9]);
        med_b.med = Some(10);
        let mut set = ann(A, &["10.1.0.0/16"], &[]);
        set.path = vec![
            AsPathSegment::sequence([65001, 4]),
            AsPathSegment::set([7, 8, 9]),
        ];
        let mut confed = ann(B, &["10.2.0.0/16"], &[]);
        confed.path = vec![
            AsPathSegment::ConfedSequence([64512u32, 64513].into_iter().map(Asn::from).collect()),
            AsPathSegment::sequence([65009, 5]),
        ];
        let f = file(
            "decision.mrt",
            &[
                update(&lp),
                update(&ann(B, &["192.0.2.0/24", "198.51.100.0/24"], &[65002, 9])),
                update(&incomplete),
                update(&med_a),
                update(&med_a2),
                update(&med_b),
                update(&set),
                update(&confed),
                update(&ann(A, &["10.3.0.0/16"], &[])),
                update(&ann(C, &["2001:db8:100::/40"], &[65003, 7])),
                update(&ann(A, &["10.4.0.0/16"], &[65001, 7])),
                update(&ann(B, &["10.4.0.0/16"], &[65002, 7])),
            ],
            false,
        );
        let v = load(std::slice::from_ref(&f), None).unwrap();
        let nh = |s: &str| s.parse::<IpAddr>().unwrap();
        // LOCAL_PREF beats a shorter path.
        assert_eq!(
            route(&v, "192.0.2.0/24").unwrap(),
            &Route {
                path_len: 4,
                neighbor_as: 65001,
                peer_as: A.1,
                next_hop: nh(A.0),
                med: None
            }
        );
        // Same length: IGP beats INCOMPLETE.
        assert_eq!(route(&v, "198.51.100.0/24").unwrap().next_hop, nh(B.0));
        // MED between two sessions of the same neighbour AS: lower MED wins despite the higher
        // address.
        assert_eq!(
            route(&v, "203.0.113.0/24").unwrap(),
            &Route {
                path_len: 2,
                neighbor_as: 65001,
                peer_as: A2.1,
                next_hop: nh(A2.0),
                med: Some(10)
            }
        );
        // MED not compared across neighbour ASes: the lower peer address wins.
        assert_eq!(route(&v, "203.0.114.0/24").unwrap().next_hop, nh(A.0));
        // AS_SET counts one; confederation segments count nothing and are not the neighbour.
        assert_eq!(route(&v, "10.1.0.0/16").unwrap().path_len, 3);
        assert_eq!(
            route(&v, "10.2.0.0/16").unwrap(),
            &Route {
                path_len: 2,
                neighbor_as: 65009,
                peer_as: B.1,
                next_hop: nh(B.0),
                med: None
            }
        );
        // Empty path: the peer's AS is the neighbour.
        assert_eq!(
            route(&v, "10.3.0.0/16").unwrap(),
            &Route {
                path_len: 0,
                neighbor_as: 65001,
                peer_as: A.1,
                next_hop: nh(A.0),
                med: None
            }
        );
        // IPv6 through MP_REACH.
        assert_eq!(
            route(&v, "2001:db8:100::/40").unwrap().next_hop,
            nh("2001:db8:ffff::1")
        );
        // Full tie: lowest peer address.
        assert_eq!(route(&v, "10.4.0.0/16").unwrap().next_hop, nh(A.0));
        assert_eq!((v.routes.len(), v.records, v.peers), (9, 12, 4));
        // Only B: its routes, whatever A had.
        let b = load(&[f], Some(&PeerSelector::Addr(nh(B.0)))).unwrap();
        assert_eq!(route(&b, "192.0.2.0/24").unwrap().next_hop, nh(B.0));
        assert_eq!(b.routes.len(), 5);
    }

    #[test]
    fn inputs_mrt_updates_apply_in_order() {
        let p1 = &["192.0.2.0/24", "2001:db8:1::/48"];
        let f1 = file(
            "order1.mrt.gz",
            &[
                update(&ann(A, &["192.0.2.0/24"], &[65001, 1])),
                update(&ann(C, &["2001:db8:1::/48"], &[65003, 1])),
                update(&ann(B, &["198.51.100.0/24"], &[65002, 1])),
                update(&ann(A, &["203.0.113.0/24"], &[65001, 1, 2, 3])),
                update(&ann(A, &["203.0.113.0/24"], &[65001, 3])), // replaces A's earlier path
            ],
            true,
        );
        let f2 = file(
            "order2.mrt",
            &[
                update(&wd(A, &["192.0.2.0/24"])),
                update(&wd(C, &["2001:db8:1::/48"])),
                session_down(B),
                update(&wd(A, &["10.9.0.0/16"])), // never announced: no effect
            ],
            false,
        );
        let v = load(std::slice::from_ref(&f1), None).unwrap();
        assert!(p1.iter().all(|p| route(&v, p).is_some()));
        assert_eq!(route(&v, "203.0.113.0/24").unwrap().path_len, 2);
        let v = load(&[f1.clone(), f2.clone()], None).unwrap();
        assert!(
            p1.iter().all(|p| route(&v, p).is_none()),
            "withdrawn in the second file"
        );
        assert!(
            route(&v, "198.51.100.0/24").is_none(),
            "B's session went down"
        );
        assert_eq!(v.routes.len(), 1);
        assert_eq!(v.records, 9);
        // The other order: the withdrawals come first and the announcements stand.
        let v = load(&[f2, f1.clone()], None).unwrap();
        assert_eq!(v.routes.len(), 4);
        // Re-announced after the session came back.
        let f3 = file(
            "order3.mrt",
            &[
                session_down(B),
                update(&ann(B, &["198.51.100.0/24"], &[65002, 1, 1])),
            ],
            false,
        );
        let v = load(&[f1, f3], None).unwrap();
        assert_eq!(route(&v, "198.51.100.0/24").unwrap().path_len, 3);
    }

    #[test]
    fn inputs_mrt_damaged_synthetic() {
        // A record whose body does not parse between good ones, then a truncated tail.
        let good = update(&ann(A, &["192.0.2.0/24"], &[65001, 1]));
        let mut bad = update(&ann(B, &["198.51.100.0/24"], &[65002, 1]));
        let n = bad.len();
        bad[n - 8..].fill(0xff); // garbage inside the BGP message, framing intact
        let tail = good[..good.len() - 5].to_vec();
        let f = file(
            "damaged.mrt",
            &[
                good.clone(),
                bad,
                update(&ann(B, &["203.0.113.0/24"], &[65002, 1])),
                good.clone(),
                good.clone(),
                good,
                tail,
            ],
            false,
        );
        let v = load(&[f], None).unwrap();
        assert!(route(&v, "192.0.2.0/24").is_some() && route(&v, "203.0.113.0/24").is_some());
        assert!(v.skipped >= 1, "skipped {}", v.skipped);
    }
}
