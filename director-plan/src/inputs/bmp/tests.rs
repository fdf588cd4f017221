//! The collector on hand-built BMP messages (see `encode`), and on the full-table file.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::collector::Collector;
use super::encode::{self, ann, eor, peer, peer_down, peer_up, route, wd, Update};
use super::frame::{Framer, MAX_MESSAGE_LEN};
use super::view::{Policy, RouterRef, Settings, ViewSpec};
use crate::inputs::decision::{self, Attrs, Ranked};
use crate::inputs::mrt::PeerSelector;
use crate::model::{IpNet, Route};

const R: &str = "192.0.2.100";
const OWN: u32 = 65000;

fn r() -> IpAddr {
    R.parse().unwrap()
}

fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}

fn view(policy: Option<Policy>) -> ViewSpec {
    ViewSpec {
        router: RouterRef::Addr(r()),
        peer: None,
        policy,
    }
}

/// A collector with router R connected at `t0`.
fn up(t0: Instant) -> Collector {
    let mut c = Collector::new(Settings {
        hold: Duration::from_secs(300),
        quiet: Duration::from_secs(5),
    });
    c.session_up(r(), t0);
    c
}

fn feed(c: &mut Collector, msgs: &[Vec<u8>], now: Instant) {
    for m in msgs {
        c.message(r(), m, now).unwrap();
    }
}

fn best(c: &Collector, p: &str) -> Option<Route> {
    c.best(&view(None), &net(p))
}

// ---- framing ----

fn sample_stream() -> Vec<Vec<u8>> {
    let a = peer("10.0.0.1", 65001, Policy::Pre);
    vec![
        encode::initiation("r1"),
        peer_up(&a, OWN, &[1, 2]),
        route(
            &a,
            &ann(&["192.0.2.0/24", "2001:db8::/32"], &[OWN, 65001, 7]),
        ),
        route(&a, &wd(&["192.0.2.0/24"])),
        eor(&a, false),
        encode::termination(),
    ]
}

proptest! {
    /// Whatever the read boundaries, the framer hands out exactly the messages sent.
    #[test]
    fn inputs_bmp_frame_any_split(cuts in prop::collection::vec(0usize..400, 0..12)) {
        let msgs = sample_stream();
        let stream: Vec<u8> = msgs.concat();
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (stream.len() + 1)).collect();
        cuts.push(0);
        cuts.push(stream.len());
        cuts.sort_unstable();
        let mut f = Framer::new();
        let mut got = Vec::new();
        for w in cuts.windows(2) {
            f.push(&stream[w[0]..w[1]]);
            while let Some(m) = f.next_message().unwrap() {
                got.push(m.to_vec());
            }
        }
        prop_assert_eq!(got, msgs);
        prop_assert_eq!(f.pending(), 0);
    }
}

#[test]
fn inputs_bmp_frame_refuses_bad_headers() {
    let mut f = Framer::new();
    f.push(&[4, 0, 0, 0, 6, 4]);
    let e = f.next_message().unwrap_err().to_string();
    assert!(e.contains("version"), "{e}");
    // Stays broken: the stream cannot be resynchronised.
    f.push(&encode::termination());
    assert!(f.next_message().is_err());
    for len in [0u32, 5, MAX_MESSAGE_LEN as u32 + 1, u32::MAX] {
        let mut f = Framer::new();
        let mut h = vec![3];
        h.extend_from_slice(&len.to_be_bytes());
        h.push(0);
        f.push(&h);
        let e = f.next_message().unwrap_err().to_string();
        assert!(e.contains("length"), "{len}: {e}");
    }
    // Not yet a whole header: wait.
    let mut f = Framer::new();
    f.push(&[3, 0, 0]);
    assert!(f.next_message().unwrap().is_none());
}

// ---- routes ----

#[test]
fn inputs_bmp_announce_withdraw_replace_and_dirty() {
    let t = Instant::now();
    let mut c = up(t);
    let a = peer("10.0.0.1", 65001, Policy::Pre);
    feed(
        &mut c,
        &[encode::initiation("r1"), peer_up(&a, OWN, &[1, 2])],
        t,
    );
    let mut u = ann(
        &["198.51.100.0/24", "192.0.2.0/24", "2001:db8:1::/48"],
        &[OWN, 65001, 7],
    );
    u.med = Some(5);
    feed(&mut c, &[route(&a, &u)], t);
    assert_eq!(
        best(&c, "192.0.2.0/24").unwrap(),
        Route {
            path_len: 2,
            neighbor_as: 65001,
            peer_as: 65001,
            next_hop: "10.9.9.9".parse().unwrap(),
            med: Some(5)
        }
    );
    assert_eq!(
        best(&c, "2001:db8:1::/48").unwrap().next_hop,
        "2001:db8:9::9".parse::<IpAddr>().unwrap()
    );
    // Sorted (the planner's order: IPv4 first) and deduplicated.
    assert_eq!(
        c.take_dirty(),
        vec![
            net("192.0.2.0/24"),
            net("198.51.100.0/24"),
            net("2001:db8:1::/48")
        ]
    );
    // Same attributes again: no change to decide on.
    feed(&mut c, &[route(&a, &u)], t);
    assert!(c.take_dirty().is_empty());
    // Replace: the peer's route is the new one.
    feed(
        &mut c,
        &[route(&a, &ann(&["192.0.2.0/24"], &[OWN, 65001, 8, 9]))],
        t,
    );
    assert_eq!(best(&c, "192.0.2.0/24").unwrap().path_len, 3);
    assert_eq!(c.take_dirty(), vec![net("192.0.2.0/24")]);
    // Withdraw, IPv4 and IPv6 (MP_UNREACH); a withdrawal of nothing changes nothing.
    feed(
        &mut c,
        &[route(
            &a,
            &wd(&["192.0.2.0/24", "2001:db8:1::/48", "10.0.0.0/8"]),
        )],
        t,
    );
    assert!(best(&c, "192.0.2.0/24").is_none() && best(&c, "2001:db8:1::/48").is_none());
    assert_eq!(
        c.take_dirty(),
        vec![net("192.0.2.0/24"), net("2001:db8:1::/48")]
    );
    assert_eq!(c.routes(), 1);
    assert_eq!(c.attribute_sets(), 1, "released sets are dropped");
    assert_eq!(c.router_name(r()), Some("r1"));
}

#[test]
fn inputs_bmp_peer_down_removes_its_routes() {
    let t = Instant::now();
    let mut c = up(t);
    let a = peer("10.0.0.1", 65001, Policy::Pre);
    let b = peer("10.0.0.2", 65002, Policy::Pre);
    feed(
        &mut c,
        &[
            peer_up(&a, OWN, &[1]),
            peer_up(&b, OWN, &[1]),
            route(&a, &ann(&["192.0.2.0/24"], &[OWN, 65001])),
            route(
                &b,
                &ann(&["192.0.2.0/24", "198.51.100.0/24"], &[OWN, 65002, 1, 2]),
            ),
        ],
        t,
    );
    assert_eq!(best(&c, "192.0.2.0/24").unwrap().peer_as, 65001);
    c.take_dirty();
    feed(&mut c, &[peer_down(&a)], t);
    assert_eq!(best(&c, "192.0.2.0/24").unwrap().peer_as, 65002);
    assert_eq!(c.take_dirty(), vec![net("192.0.2.0/24")]);
    feed(&mut c, &[peer_down(&b)], t);
    assert_eq!(c.routes(), 0);
    let st = c.status(t);
    assert!(st[0].peers.iter().all(|p| !p.up && p.routes == 0), "{st:?}");
}

#[test]
fn inputs_bmp_frr_own_as_strip_ebgp_and_ibgp() {
    let t = Instant::now();
    let mut c = up(t);
    let e = peer("10.0.0.1", 65001, Policy::Pre);
    let i = peer("10.0.0.2", OWN, Policy::Pre); // iBGP: the peer's AS is the router's
    let g = peer("10.0.0.3", 65003, Policy::Pre); // no PeerUp seen: own AS unknown
    feed(
        &mut c,
        &[
            peer_up(&e, OWN, &[1]),
            peer_up(&i, OWN, &[1]),
            route(&e, &ann(&["192.0.2.0/24"], &[OWN, 65001, 7])),
            route(&i, &ann(&["198.51.100.0/24"], &[OWN, 65010, 7])),
            // Originated inside the AS: FRR shows just the prepend.
            route(&i, &ann(&["203.0.113.0/24"], &[OWN])),
            // iBGP path that (after the prepend) starts with the own AS again: only one goes.
            route(&i, &ann(&["10.1.0.0/16"], &[OWN, OWN, 7])),
            route(&g, &ann(&["10.2.0.0/16"], &[OWN, 65003])),
        ],
        t,
    );
    let rt = |p| best(&c, p).unwrap();
    assert_eq!(
        (rt("192.0.2.0/24").path_len, rt("192.0.2.0/24").neighbor_as),
        (2, 65001)
    );
    assert_eq!(
        (
            rt("198.51.100.0/24").path_len,
            rt("198.51.100.0/24").neighbor_as
        ),
        (2, 65010)
    );
    assert_eq!(
        (
            rt("203.0.113.0/24").path_len,
            rt("203.0.113.0/24").neighbor_as,
            rt("203.0.113.0/24").peer_as
        ),
        (0, OWN, OWN)
    );
    assert_eq!(
        (rt("10.1.0.0/16").path_len, rt("10.1.0.0/16").neighbor_as),
        (2, OWN)
    );
    assert_eq!(
        (rt("10.2.0.0/16").path_len, rt("10.2.0.0/16").neighbor_as),
        (2, OWN)
    );
}

// ---- sessions ----

#[test]
fn inputs_bmp_stale_during_hold_then_expiry() {
    let t = Instant::now();
    let mut c = up(t);
    let a = peer("10.0.0.1", 65001, Policy::Pre);
    feed(
        &mut c,
        &[
            peer_up(&a, OWN, &[1]),
            route(&a, &ann(&["192.0.2.0/24"], &[OWN, 65001])),
            eor(&a, false),
        ],
        t,
    );
    assert!(c.synced(r()) && c.all_synced());
    c.take_dirty();
    c.session_down(r(), t + Duration::from_secs(1));
    assert!(!c.synced(r()));
    // Stale routes still count, and losing them changes no decision yet.
    c.tick(t + Duration::from_secs(300));
    assert!(best(&c, "192.0.2.0/24").is_some());
    assert!(c.take_dirty().is_empty());
    let st = c.status(t + Duration::from_secs(2));
    assert!(!st[0].connected && st[0].since_ms == 1000, "{st:?}");
    c.tick(t + Duration::from_secs(301));
    assert!(best(&c, "192.0.2.0/24").is_none());
    assert_eq!(c.take_dirty(), vec![net("192.0.2.0/24")]);
    assert!(c.status(t).is_empty(), "the router is forgotten");
}

#[test]
fn inputs_bmp_reconnect_refreshes_and_sync_sweeps() {
    let t = Instant::now();
    let s = |n| t + Duration::from_secs(n);
    let mut c = up(t);
    let a = peer("10.0.0.1", 65001, Policy::Pre);
    let b = peer("10.0.0.2", 65002, Policy::Pre);
    feed(
        &mut c,
        &[
            peer_up(&a, OWN, &[1, 2]),
            peer_up(&b, OWN, &[1]),
            route(
                &a,
                &ann(
                    &["192.0.2.0/24", "198.51.100.0/24", "2001:db8::/32"],
                    &[OWN, 65001],
                ),
            ),
            route(&b, &ann(&["203.0.113.0/24"], &[OWN, 65002])),
            eor(&a, false),
            eor(&b, false),
        ],
        t,
    );
    assert!(!c.synced(r()), "a still owes its IPv6 End-of-RIB");
    feed(&mut c, &[eor(&a, true)], t);
    assert!(c.synced(r()));
    assert_eq!(c.take_synced().len(), 1);
    c.take_dirty();
    // Termination: stale. Then a new session where b never comes back and a re-sends only
    // part of its routes, one changed.
    feed(&mut c, &[encode::termination()], s(1));
    c.session_down(r(), s(1));
    c.session_up(r(), s(10));
    feed(
        &mut c,
        &[
            peer_up(&a, OWN, &[1, 2]),
            route(&a, &ann(&["192.0.2.0/24"], &[OWN, 65001])),
            route(&a, &ann(&["2001:db8::/32"], &[OWN, 65001, 5])),
            eor(&a, false),
        ],
        s(11),
    );
    // Not synced yet: the stale routes still count.
    assert!(best(&c, "198.51.100.0/24").is_some() && best(&c, "203.0.113.0/24").is_some());
    assert_eq!(c.take_dirty(), vec![net("2001:db8::/32")]);
    feed(&mut c, &[eor(&a, true)], s(12));
    assert!(c.synced(r()));
    assert!(best(&c, "198.51.100.0/24").is_none() && best(&c, "203.0.113.0/24").is_none());
    assert!(best(&c, "192.0.2.0/24").is_some());
    assert_eq!(
        c.take_dirty(),
        vec![net("198.51.100.0/24"), net("203.0.113.0/24")]
    );
    let ev = c.take_synced();
    assert_eq!(
        (ev[0].peers, ev[0].routes, ev[0].ms),
        (1, 2, 2000),
        "{ev:?}"
    );
    assert_eq!(c.status(s(12))[0].peers.len(), 1, "b is forgotten");
    // Hold does not apply to a connected router.
    c.tick(s(1000));
    assert_eq!(c.routes(), 2);
}

#[test]
fn inputs_bmp_quiet_period_ends_sync() {
    let t = Instant::now();
    let ms = |n| t + Duration::from_millis(n);
    let mut c = up(t);
    let a = peer("10.0.0.1", 65001, Policy::Post);
    feed(
        &mut c,
        &[
            peer_up(&a, OWN, &[1]),
            route(&a, &ann(&["192.0.2.0/24"], &[65001])),
        ],
        ms(1000),
    );
    c.tick(ms(5999));
    assert!(!c.synced(r()));
    feed(
        &mut c,
        &[route(&a, &ann(&["198.51.100.0/24"], &[65001]))],
        ms(4000),
    );
    c.tick(ms(8999));
    assert!(
        !c.synced(r()),
        "the quiet period counts from the last route"
    );
    c.tick(ms(9000));
    assert!(c.synced(r()));
    assert_eq!(c.take_synced()[0].routes, 2);
    // A router with no peers at all syncs after the quiet period too.
    let mut c = up(t);
    c.tick(ms(5000));
    assert!(c.synced(r()));
}

#[test]
fn inputs_bmp_view_selection() {
    let t = Instant::now();
    let mut c = up(t);
    let a_pre = peer("10.0.0.1", 65001, Policy::Pre);
    let a_post = peer("10.0.0.1", 65001, Policy::Post);
    let b_pre = peer("10.0.0.2", 65002, Policy::Pre);
    let loc = peer("0.0.0.0", OWN, Policy::LocRib);
    feed(
        &mut c,
        &[
            encode::initiation("edge1"),
            peer_up(&a_pre, OWN, &[1]),
            peer_up(&b_pre, OWN, &[1]),
            route(&a_pre, &ann(&["192.0.2.0/24"], &[OWN, 65001, 1, 2, 3])),
            route(&b_pre, &ann(&["192.0.2.0/24"], &[OWN, 65002, 3])),
        ],
        t,
    );
    // Only pre-policy routes: the default takes them.
    assert_eq!(best(&c, "192.0.2.0/24").unwrap().peer_as, 65002);
    // The inbound policy raised a's LOCAL_PREF: post-policy shows it.
    let mut u = ann(&["192.0.2.0/24"], &[OWN, 65001, 1, 2, 3]);
    u.local_pref = Some(200);
    feed(&mut c, &[route(&a_post, &u)], t);
    assert_eq!(
        best(&c, "192.0.2.0/24").unwrap().peer_as,
        65001,
        "default: post"
    );
    let pre = ViewSpec::parse("edge1", None, Some("pre")).unwrap();
    assert_eq!(c.best(&pre, &net("192.0.2.0/24")).unwrap().peer_as, 65002);
    let post_b = ViewSpec::parse(R, Some("AS65002"), None).unwrap();
    assert_eq!(
        c.best(&post_b, &net("192.0.2.0/24")).unwrap().peer_as,
        65002,
        "b has no post-policy routes: its pre-policy ones"
    );
    // Loc-RIB, once the router sends one, is the default.
    let mut l = ann(&["192.0.2.0/24"], &[65001, 1, 2, 3]);
    l.next_hop = Some("10.0.0.1".parse().unwrap());
    feed(&mut c, &[peer_up(&loc, OWN, &[1]), route(&loc, &l)], t);
    let got = best(&c, "192.0.2.0/24").unwrap();
    assert_eq!(
        (got.peer_as, got.neighbor_as, got.path_len),
        (OWN, 65001, 4)
    );
    let lr = ViewSpec::parse(R, None, Some("loc-rib")).unwrap();
    assert_eq!(c.table(&lr).len(), 1);
    let post = ViewSpec::parse(R, None, Some("post")).unwrap();
    assert_eq!(c.best(&post, &net("192.0.2.0/24")).unwrap().path_len, 4);
    // Unknown router or name: nothing.
    assert!(c
        .table(&ViewSpec::parse("nope", None, None).unwrap())
        .is_empty());
    assert!("sideways".parse::<Policy>().is_err());
    assert_eq!(
        ViewSpec::parse(R, Some("10.0.0.1"), Some("post"))
            .unwrap()
            .peer,
        Some(PeerSelector::Addr("10.0.0.1".parse().unwrap()))
    );
    // Status names every peer's views.
    let st = c.status(t);
    assert_eq!(st[0].name.as_deref(), Some("edge1"));
    let views: Vec<(IpAddr, Policy, usize)> = st[0]
        .peers
        .iter()
        .map(|p| (p.address, p.view, p.routes))
        .collect();
    assert_eq!(views.len(), 4, "{views:?}");
    let json = serde_json::to_string(&st).unwrap();
    assert!(json.contains("\"view\":\"loc-rib\""), "{json}");
}

#[test]
fn inputs_bmp_damaged_message_errors_and_changes_nothing() {
    let t = Instant::now();
    let mut c = up(t);
    let a = peer("10.0.0.1", 65001, Policy::Pre);
    feed(
        &mut c,
        &[
            peer_up(&a, OWN, &[1]),
            route(&a, &ann(&["192.0.2.0/24"], &[OWN, 65001])),
        ],
        t,
    );
    c.take_dirty();
    let before = (c.table(&view(None)), c.status(t));
    let good = route(
        &a,
        &ann(&["198.51.100.0/24", "203.0.113.0/24"], &[OWN, 65001]),
    );
    let mut bad_bgp_type = good.clone();
    bad_bgp_type[6 + 42 + 18] = 9; // no such BGP message type
    let mut bad_len = good.clone();
    let n = bad_len.len();
    bad_len.truncate(n - 3); // the BGP length says more than the message holds
    let l = (bad_len.len() as u32).to_be_bytes();
    bad_len[1..5].copy_from_slice(&l);
    let mut bad_type = good.clone();
    bad_type[5] = 9;
    let mut short = good.clone();
    short.truncate(20);
    for (what, m) in [
        ("BGP type", bad_bgp_type),
        ("length", bad_len),
        ("type", bad_type),
        ("short", short),
    ] {
        assert!(c.message(r(), &m, t).is_err(), "{what}");
        assert_eq!((c.table(&view(None)), c.status(t)), before, "{what}");
        assert!(c.take_dirty().is_empty(), "{what}");
    }
}

// ---- the decision process ----

fn arb_update() -> impl Strategy<Value = (usize, usize, Update)> {
    (
        0usize..3,
        0usize..3,
        prop::collection::vec(65001u32..65004, 1..4),
        prop::option::of(prop_oneof![Just(100u32), Just(200)]),
        prop::option::of(0u32..3),
        0u8..3,
    )
        .prop_map(|(peer, prefix, path, local_pref, med, origin)| {
            let mut u = ann(&[PREFIXES[prefix]], &path);
            u.local_pref = local_pref;
            u.med = med;
            u.origin = origin;
            (peer, prefix, u)
        })
}

const PREFIXES: [&str; 3] = ["192.0.2.0/24", "198.51.100.0/24", "2001:db8::/32"];
const PEERS: [(&str, u32); 3] = [
    ("10.0.0.3", 65001),
    ("10.0.0.1", 65001),
    ("10.0.0.2", 65002),
];

proptest! {
    /// The collector's best route and table are the shared decision process over the routes
    /// each peer holds last (what mrt.rs computes for the same routes).
    #[test]
    fn inputs_bmp_best_is_the_shared_decision(updates in prop::collection::vec(arb_update(), 1..12)) {
        let t = Instant::now();
        let mut c = up(t);
        let mut held: Vec<Vec<Option<Attrs>>> = vec![vec![None; 3]; 3];
        for (pi, xi, u) in &updates {
            let (addr, asn) = PEERS[*pi];
            let p = peer(addr, asn, Policy::Pre);
            c.message(r(), &route(&p, u), t).unwrap();
            let v6 = PREFIXES[*xi].contains(':');
            held[*pi][*xi] = Some(Attrs {
                path_len: u.path.len() as u32,
                neighbor_as: u.path[0],
                next_hop: Some(if v6 { "2001:db8:9::9" } else { "10.9.9.9" }.parse().unwrap()),
                med: u.med,
                local_pref: u.local_pref,
                origin: u.origin,
            });
        }
        let table = c.table(&view(None));
        let mut want_table = Vec::new();
        for (xi, prefix) in PREFIXES.iter().enumerate() {
            let cands = (0..3).filter_map(|pi| {
                let a = held[pi][xi].as_ref()?;
                let ip: IpAddr = PEERS[pi].0.parse().unwrap();
                Some((pi, Ranked { attrs: a, peer_ip: ip, path_id: 0 }))
            });
            let want = decision::best(cands).map(|pi| {
                let a = held[pi][xi].unwrap();
                Route { path_len: a.path_len, neighbor_as: a.neighbor_as, peer_as: PEERS[pi].1, next_hop: a.next_hop.unwrap(), med: a.med }
            });
            prop_assert_eq!(best(&c, prefix), want.clone());
            if let Some(w) = want {
                want_table.push((net(prefix), w));
            }
        }
        prop_assert_eq!(table, want_table);
    }
}

// ---- the full table ----

/// Every BGP UPDATE of the full-table file (one peer, AS3856, 577,703 IPv4 prefixes at the
/// end) as BMP route monitoring, twice (pre- and post-policy views, as FRR sends them):
/// the same table as the MRT reader, and the memory per route.
#[test]
fn inputs_bmp_full_table_memory() {
    use bgpkit_parser::BgpkitParser;
    let path = crate::inputs::test_data("bgp/updates.et-header.2015.gz");
    let t = Instant::now();
    let started = Instant::now();
    let mut c = up(t);
    let pre = peer("198.32.160.1", 3856, Policy::Pre);
    let post = peer("198.32.160.1", 3856, Policy::Post);
    c.message(r(), &peer_up(&pre, OWN, &[1]), t).unwrap();
    let reader = crate::inputs::mrt::open_decompressed(&path).unwrap();
    let mut messages = 0usize;
    for raw in BgpkitParser::from_reader(reader).into_raw_record_iter() {
        // BGP4MP_ET (17) MESSAGE_AS4 (4): 4-byte AS peer and local AS, ifindex, AFI, IPv4
        // addresses, then the BGP message.
        let body = &raw.message_bytes;
        if raw.common_header.entry_type as u16 != 17 || raw.common_header.entry_subtype != 4 {
            continue;
        }
        let afi = u16::from_be_bytes([body[10], body[11]]);
        let skip = 12 + if afi == 1 { 8 } else { 32 };
        let bgp = &body[skip..];
        if bgp.get(18) != Some(&2) {
            continue; // not an UPDATE
        }
        for p in [&pre, &post] {
            c.message(r(), &encode::raw_route(p, bgp), t).unwrap();
            messages += 1;
        }
    }
    let fed = started.elapsed();
    let dirty = c.take_dirty().len();
    let heap = c.heap_bytes();
    let routes = c.routes();
    let sets = c.attribute_sets();
    let per_route = heap as f64 / routes as f64;
    let t_table = Instant::now();
    let table = c.table(&ViewSpec::parse(R, None, Some("pre")).unwrap());
    let table_took = t_table.elapsed();
    eprintln!(
        "BMP full table: {messages} messages in {fed:?}; {routes} routes ({} per view), {sets} \
         attribute sets, {heap} heap bytes = {per_route:.1} B/route; table() {table_took:?}; \
         peak RSS {}",
        routes / 2,
        crate::inputs::peak_rss()
    );
    assert_eq!(routes, 2 * 577_703);
    assert_eq!(
        dirty, 577_706,
        "every prefix announced, the 3 later withdrawn too"
    );
    assert!(per_route <= 40.0, "{per_route:.1} bytes per route");
    // The MRT reader's table for the same file: identical (AS3856 does not prepend and is not
    // the router's AS here, so nothing is stripped).
    let mrt = crate::inputs::mrt::load(&[path], None).unwrap();
    assert_eq!(table.len(), mrt.routes.len());
    assert!(table.iter().zip(&mrt.routes).all(|(a, b)| a == b));
    // Both views, one route per prefix.
    assert_eq!(c.table(&view(None)).len(), 577_703);
}
