//! BPF_PROG_TEST_RUN fixtures for SYN steering: TCP frames to a VIP in, the verdict and the
//! frame out (new Ethernet addresses, or an outer header), the flow table and counters
//! read back. Headers and checksums are checked with `director_tests::packets`, not with
//! the code the program is built from.
//!
//! Needs root: `cargo test -p director-tests --test steer_fixtures -- --test-threads=1`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use director_common::select::Mode;
use director_common::steer::{Forward, Hop, Hops};
use director_ctl::ops::{self, steer::VipSettings};
use director_tests::fixture::{route_set, Fixture, XDP_DROP, XDP_PASS, XDP_TX};
use director_tests::packets::*;

const SERVICE: &str = "web.example.com";
const VIP4: &str = "203.0.113.80:443";
const VIP6: &str = "[2001:db8::80]:443";
const EDGE_MAC: [u8; 6] = [0x02, 0xed, 0, 0, 0, 1];
/// BPF_PROG_TEST_RUN runs on loopback: a hop through ifindex 1 is sent back out (XDP_TX).
const LOOPBACK: u32 = 1;
const XDP_REDIRECT: u32 = 4;

struct Srv {
    name: &'static str,
    v4: Ipv4Addr,
    v6: Ipv6Addr,
    mac: [u8; 6],
}

const A: Srv = Srv {
    name: "a",
    v4: Ipv4Addr::new(192, 0, 2, 11),
    v6: Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x11),
    mac: [0x02, 0x5e, 0, 0, 0, 0x11],
};
const B: Srv = Srv {
    name: "b",
    v4: Ipv4Addr::new(192, 0, 2, 12),
    v6: Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x12),
    mac: [0x02, 0x5e, 0, 0, 0, 0x12],
};
const C: Srv = Srv {
    name: "c",
    v4: Ipv4Addr::new(192, 0, 2, 13),
    v6: Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x13),
    mac: [0x02, 0x5e, 0, 0, 0, 0x13],
};
const SERVERS: [&Srv; 3] = [&A, &B, &C];

/// The gateway toward the servers in ipip mode.
const ROUTER_MAC: [u8; 6] = [0x02, 0x77, 0, 0, 0, 1];

/// A program with servers a, b, c, the service's VIPs in `mode`, hops for every server,
/// and these routes.
fn setup(mode: Forward, mss: Option<u16>, routes: &[(&str, &str)]) -> Fixture {
    let mut fx = Fixture::new().expect("loading director for BPF_PROG_TEST_RUN (run as root)");
    let m = fx.maps();
    for s in SERVERS {
        ops::server_add(m, s.name, Some(s.v4), Some(s.v6)).unwrap();
    }
    let vips = VipSettings {
        vips: vec![VIP4.parse().unwrap(), VIP6.parse().unwrap()],
        mode,
        mss,
        sources: vec![
            "198.51.100.0/28".parse().unwrap(),
            "2001:db8:ff::/120".parse().unwrap(),
        ],
    };
    ops::service_add_with(m, SERVICE, 30, 1, Mode::Random, Some(&vips), false).unwrap();
    for (prefix, servers) in routes {
        route_set(m, SERVICE, prefix, servers).unwrap();
    }
    for s in m.servers().unwrap() {
        let srv = SERVERS.iter().find(|x| x.name == s.name).unwrap();
        let via_router = Hop {
            dst_mac: ROUTER_MAC,
            src_mac: EDGE_MAC,
            ifindex: LOOPBACK,
        };
        let hops = Hops {
            l2: Hop {
                dst_mac: srv.mac,
                src_mac: EDGE_MAC,
                ifindex: LOOPBACK,
            },
            ipip4: via_router,
            ipip6: via_router,
        };
        m.steer_mut().set_hops(s.id, &hops).unwrap();
    }
    fx
}

fn flow(client: &str, port: u16, vip: &str) -> Flow {
    Flow {
        client: SocketAddr::new(client.parse().unwrap(), port),
        server: vip.parse().unwrap(),
        vlan: None,
    }
}

/// MSS 1460 first (at an even offset), or after a NOP (odd), then what Linux sends.
fn syn_options(mss: u16, odd: bool) -> Vec<u8> {
    let m = mss.to_be_bytes();
    if odd {
        vec![1, 2, 4, m[0], m[1], 4, 2, 1, 1, 1, 1, 1]
    } else {
        vec![
            2, 4, m[0], m[1], 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7,
        ]
    }
}

fn syn(f: &Flow) -> Vec<u8> {
    ip_frame(
        f,
        IPPROTO_TCP,
        &tcp_segment_with(f, TCP_SYN, &syn_options(1460, false), &[]),
    )
}

fn ack(f: &Flow) -> Vec<u8> {
    ip_frame(
        f,
        IPPROTO_TCP,
        &tcp_segment_with(f, TCP_ACK, &[], b"GET / HTTP/1.1\r\n\r\n"),
    )
}

/// The server a frame forwarded in l2 mode went to, by its destination MAC; the rest of
/// the frame must be the input's.
fn l2_server(input: &[u8], verdict: u32, out: &[u8]) -> &'static str {
    assert_eq!(
        verdict, XDP_TX,
        "forwarded frames go back out (hop on loopback)"
    );
    assert_eq!(&out[6..12], &EDGE_MAC, "source MAC is the edge's");
    assert_eq!(
        &out[12..],
        &input[12..],
        "nothing but the MACs changes in l2 mode"
    );
    SERVERS
        .iter()
        .find(|s| out[..6] == s.mac)
        .unwrap_or_else(|| panic!("destination MAC {:02x?} is no server's", &out[..6]))
        .name
}

fn counter(fx: &mut Fixture, name: &str) -> u64 {
    ops::steer::flow_stats(fx.maps()).unwrap().counters[name]
}

fn flows(fx: &mut Fixture) -> Vec<director_ctl::api::ListedFlow> {
    ops::steer::flows(fx.maps(), None).unwrap().flows
}

#[test]
fn a_syn_goes_to_the_clients_best_server_and_its_flow_stays_there() {
    let mut fx = setup(
        Forward::L2,
        None,
        &[("0.0.0.0/0", "a"), ("198.51.100.0/24", "b"), ("::/0", "c")],
    );
    for (client, want) in [
        ("192.0.2.200", "a"),
        ("198.51.100.7", "b"),
        ("2001:db8:9::7", "c"),
    ] {
        let vip = if client.contains(':') { VIP6 } else { VIP4 };
        let f = flow(client, 40_001, vip);
        let frame = syn(&f);
        let (v, out) = fx.run(&frame);
        assert_eq!(l2_server(&frame, v, &out), want, "SYN from {client}");
        // The rest of the connection follows the pin, even after the decision changes.
        route_set(fx.maps(), SERVICE, "0.0.0.0/0", "c").unwrap();
        route_set(fx.maps(), SERVICE, "198.51.100.0/24", "c").unwrap();
        route_set(fx.maps(), SERVICE, "::/0", "a").unwrap();
        let data = ack(&f);
        let (v, out) = fx.run(&data);
        assert_eq!(
            l2_server(&data, v, &out),
            want,
            "data from {client} after a change"
        );
        route_set(fx.maps(), SERVICE, "0.0.0.0/0", "a").unwrap();
        route_set(fx.maps(), SERVICE, "198.51.100.0/24", "b").unwrap();
        route_set(fx.maps(), SERVICE, "::/0", "c").unwrap();
    }
    let listed = flows(&mut fx);
    assert_eq!(listed.len(), 3, "{listed:?}");
    assert!(listed
        .iter()
        .all(|f| f.service == SERVICE && !f.midstream && !f.moved));
    assert_eq!(counter(&mut fx, "new_flows"), 3);
    assert_eq!(counter(&mut fx, "pinned"), 3);
    assert_eq!(counter(&mut fx, "forwarded_l2"), 6);
}

#[test]
fn equal_servers_share_flows_by_weight_and_a_retransmitted_syn_lands_on_the_same_one() {
    let fx = setup(Forward::L2, None, &[("0.0.0.0/0", "a=1,b=1,c=2")]);
    let mut hits = std::collections::BTreeMap::<&str, u32>::new();
    for port in 0..400u16 {
        let f = flow("192.0.2.77", 20_000 + port, VIP4);
        let frame = syn(&f);
        let (v, out) = fx.run(&frame);
        let first = l2_server(&frame, v, &out);
        let (v, out) = fx.run(&frame);
        assert_eq!(
            l2_server(&frame, v, &out),
            first,
            "retransmitted SYN, port {port}"
        );
        *hits.entry(first).or_default() += 1;
    }
    // Expected 100 / 100 / 200: each within a wide band (a fixed set of flows, no luck).
    for (s, lo, hi) in [("a", 60, 140), ("b", 60, 140), ("c", 150, 250)] {
        let n = hits.get(s).copied().unwrap_or(0);
        assert!(
            (lo..=hi).contains(&n),
            "server {s} got {n} of 400 flows: {hits:?}"
        );
    }
}

#[test]
fn a_flow_without_an_entry_gets_the_same_choice_a_syn_would() {
    let mut fx = setup(Forward::L2, None, &[("0.0.0.0/0", "a,b,c")]);
    for port in 0..40u16 {
        let f = flow("192.0.2.99", 30_000 + port, VIP4);
        let data = ack(&f);
        let (v, out) = fx.run(&data);
        let midstream = l2_server(&data, v, &out);
        let g = flow("192.0.2.99", 30_000 + port, VIP4);
        let fx2 = setup(Forward::L2, None, &[("0.0.0.0/0", "a,b,c")]);
        let frame = syn(&g);
        let (v, out) = fx2.run(&frame);
        assert_eq!(l2_server(&frame, v, &out), midstream, "port {port}");
        if port == 0 {
            let listed = flows(&mut fx);
            assert!(listed[0].midstream, "{listed:?}");
        }
    }
}

#[test]
fn drained_servers_keep_their_flows_and_down_servers_lose_them() {
    let mut fx = setup(Forward::L2, None, &[("0.0.0.0/0", "a|b")]);
    let f = flow("192.0.2.50", 41_000, VIP4);
    let frame = syn(&f);
    let (v, out) = fx.run(&frame);
    assert_eq!(l2_server(&frame, v, &out), "a");
    ops::server_drain(fx.maps(), "a", true).unwrap();
    let data = ack(&f);
    let (v, out) = fx.run(&data);
    assert_eq!(
        l2_server(&data, v, &out),
        "a",
        "a drained server keeps its flows"
    );
    let g = flow("192.0.2.50", 41_001, VIP4);
    let (v, out) = fx.run(&syn(&g));
    assert_eq!(
        l2_server(&syn(&g), v, &out),
        "b",
        "new flows skip a drained server"
    );
    ops::server_set(fx.maps(), "a", false).unwrap();
    let (v, out) = fx.run(&data);
    assert_eq!(l2_server(&data, v, &out), "b", "a down server's flows move");
    ops::server_set(fx.maps(), "a", true).unwrap();
    ops::server_drain(fx.maps(), "a", false).unwrap();
    let (v, out) = fx.run(&data);
    assert_eq!(l2_server(&data, v, &out), "b", "a moved flow stays moved");
    assert_eq!(counter(&mut fx, "moved"), 1);
    let moved: Vec<_> = flows(&mut fx).into_iter().filter(|f| f.moved).collect();
    assert_eq!(moved.len(), 1);
    assert_eq!(moved[0].server, "b");
}

#[test]
fn ipip_puts_an_outer_header_to_the_server_in_front() {
    let mut fx = setup(Forward::Ipip, Some(0), &[("0.0.0.0/0", "b"), ("::/0", "c")]);
    // IPv4 in IPv4.
    let f = flow("192.0.2.200", 40_002, VIP4);
    let frame = syn(&f);
    let (v, out) = fx.run(&frame);
    assert_eq!(v, XDP_TX);
    assert_eq!(&out[..6], &ROUTER_MAC, "sent to the next hop");
    assert_eq!(&out[6..12], &EDGE_MAC);
    assert_eq!(&out[12..14], &ETHERTYPE_IPV4.to_be_bytes());
    let outer = &out[14..34];
    assert_eq!(outer[0], 0x45);
    assert_eq!(
        u16::from_be_bytes([outer[2], outer[3]]) as usize,
        frame.len() - 14 + 20
    );
    assert_eq!(outer[9], 4, "protocol IPIP");
    assert!(ipv4_checksum_ok(outer), "outer header checksum");
    assert_eq!(&outer[16..20], &B.v4.octets(), "to the server's address");
    assert_eq!(
        &outer[12..15],
        &[198, 51, 100],
        "from the encap source network"
    );
    assert!(outer[15] < 16, "within /28: {}", outer[15]);
    assert_eq!(
        &out[34..],
        &frame[14..],
        "the client's packet unchanged inside"
    );
    // IPv6 in IPv6.
    let f = flow("2001:db8:9::7", 40_003, VIP6);
    let frame = syn(&f);
    let (v, out) = fx.run(&frame);
    assert_eq!(v, XDP_TX);
    assert_eq!(&out[12..14], &ETHERTYPE_IPV6.to_be_bytes());
    let outer = &out[14..54];
    assert_eq!(outer[0] >> 4, 6);
    assert_eq!(
        u16::from_be_bytes([outer[4], outer[5]]) as usize,
        frame.len() - 14
    );
    assert_eq!(outer[6], 41, "next header IPv6");
    assert_eq!(&outer[24..40], &C.v6.octets());
    assert_eq!(
        &outer[8..23],
        &"2001:db8:ff::".parse::<Ipv6Addr>().unwrap().octets()[..15]
    );
    assert_eq!(&out[54..], &frame[14..]);
    // Outer sources spread over the network, per flow.
    let mut sources = std::collections::BTreeSet::new();
    for port in 0..64 {
        let (_, out) = fx.run(&syn(&flow("192.0.2.200", 50_000 + port, VIP4)));
        sources.insert(out[14 + 15]);
    }
    assert!(sources.len() >= 8, "outer sources used: {sources:?}");
    assert_eq!(counter(&mut fx, "forwarded_ipip"), 66);
}

#[test]
fn syns_get_their_mss_clamped_with_a_correct_checksum() {
    let mut fx = setup(Forward::Ipip, None, &[("0.0.0.0/0", "a"), ("::/0", "a")]);
    for (client, vip, odd, want) in [
        ("192.0.2.200", VIP4, false, 1440u16),
        ("192.0.2.201", VIP4, true, 1440),
        ("2001:db8:9::7", VIP6, false, 1400),
        ("2001:db8:9::8", VIP6, true, 1400),
    ] {
        let f = flow(client, 40_010, vip);
        let seg = tcp_segment_with(&f, TCP_SYN, &syn_options(1460, odd), &[]);
        let frame = ip_frame(&f, IPPROTO_TCP, &seg);
        let (v, out) = fx.run(&frame);
        assert_eq!(v, XDP_TX);
        let inner = if f.is_v6() {
            14 + 40 + 40
        } else {
            14 + 20 + 20
        };
        let tcp = &out[inner..];
        let at = if odd { 20 + 3 } else { 20 + 2 };
        assert_eq!(u16::from_be_bytes([tcp[at], tcp[at + 1]]), want, "{client}");
        assert!(
            transport_checksum_ok(f.client.ip(), f.server.ip(), IPPROTO_TCP, tcp),
            "TCP checksum after the clamp, {client} (odd offset: {odd})"
        );
    }
    // A smaller MSS is left alone, and so is the checksum.
    let f = flow("192.0.2.202", 40_011, VIP4);
    let seg = tcp_segment_with(&f, TCP_SYN, &syn_options(1200, false), &[]);
    let frame = ip_frame(&f, IPPROTO_TCP, &seg);
    let (_, out) = fx.run(&frame);
    assert_eq!(&out[14 + 20..], &frame[14..]);
    assert_eq!(counter(&mut fx, "mss_clamped"), 4);
}

#[test]
fn icmp_too_big_about_a_flow_goes_to_its_server() {
    let mut fx = setup(
        Forward::L2,
        None,
        &[("0.0.0.0/0", "a,b,c"), ("::/0", "a,b,c")],
    );
    for (client, vip, router) in [
        ("192.0.2.200", VIP4, "192.0.2.254"),
        ("2001:db8:9::7", VIP6, "2001:db8:1::fe"),
    ] {
        let f = flow(client, 40_020, vip);
        let frame = syn(&f);
        let (v, out) = fx.run(&frame);
        let server = l2_server(&frame, v, &out);
        // The server's reply (VIP → client), as a router quotes it.
        let reply = Flow {
            client: f.server,
            server: f.client,
            vlan: None,
        };
        let quoted = &ip_frame(
            &reply,
            IPPROTO_TCP,
            &tcp_segment_with(&reply, TCP_ACK, &[], &[0; 64]),
        )[14..];
        let icmp = icmp_too_big_frame(
            router.parse().unwrap(),
            f.server.ip(),
            1280,
            &quoted[..quoted.len().min(200)],
        );
        let (v, out) = fx.run(&icmp);
        assert_eq!(
            l2_server(&icmp, v, &out),
            server,
            "ICMP about {client}'s flow"
        );
    }
    assert_eq!(counter(&mut fx, "icmp"), 2);
    assert_eq!(flows(&mut fx).len(), 2, "an ICMP error records no flow");
}

#[test]
fn what_is_not_a_vips_passes_untouched() {
    let mut fx = setup(Forward::L2, None, &[("0.0.0.0/0", "a")]);
    let frames = [
        syn(&flow("192.0.2.200", 40_030, "203.0.113.80:80")),
        syn(&flow("192.0.2.200", 40_030, "203.0.113.81:443")),
        syn(&flow("2001:db8:9::7", 40_030, "[2001:db8::81]:443")),
        udp_frame(&flow("192.0.2.200", 40_030, VIP4), b"not dns"),
        ip_frame_with(
            &flow("192.0.2.200", 40_030, VIP4),
            IPPROTO_TCP,
            &tcp_segment_with(&flow("192.0.2.200", 40_030, VIP4), TCP_SYN, &[], &[]),
            &[],
            IPV4_MF,
        ),
    ];
    for (i, frame) in frames.iter().enumerate() {
        let (v, out) = fx.run(frame);
        assert_eq!((v, &out), (XDP_PASS, frame), "frame {i}");
    }
    // Cut short inside the TCP header.
    let frame = syn(&flow("192.0.2.200", 40_031, VIP4));
    let (v, out) = fx.run(&frame[..14 + 20 + 10]);
    assert_eq!((v, &out[..]), (XDP_PASS, &frame[..44]));
    assert!(flows(&mut fx).is_empty());
}

#[test]
fn no_hop_or_no_server_drops_and_counts() {
    let mut fx = setup(Forward::L2, None, &[("0.0.0.0/0", "a")]);
    let id = fx
        .maps()
        .servers()
        .unwrap()
        .into_iter()
        .find(|s| s.name == "a")
        .unwrap()
        .id;
    fx.maps()
        .steer_mut()
        .set_hops(id, &Hops::default())
        .unwrap();
    let (v, _) = fx.run(&syn(&flow("192.0.2.200", 40_040, VIP4)));
    assert_eq!(v, XDP_DROP);
    assert_eq!(counter(&mut fx, "drop_no_hop"), 1);
    ops::server_set(fx.maps(), "a", false).unwrap();
    let (v, _) = fx.run(&syn(&flow("192.0.2.200", 40_041, VIP4)));
    assert_eq!(v, XDP_DROP);
    assert_eq!(counter(&mut fx, "drop_no_server"), 1);
}

#[test]
fn a_hop_on_another_interface_is_redirected() {
    let mut fx = setup(Forward::L2, None, &[("0.0.0.0/0", "a")]);
    let id = fx
        .maps()
        .servers()
        .unwrap()
        .into_iter()
        .find(|s| s.name == "a")
        .unwrap()
        .id;
    let mut h = fx.maps().steer().hops(id).unwrap();
    h.l2.ifindex = 7;
    fx.maps().steer_mut().set_hops(id, &h).unwrap();
    let (v, _) = fx.run(&syn(&flow("192.0.2.200", 40_050, VIP4)));
    assert_eq!(v, XDP_REDIRECT);
}

#[test]
fn the_flood_guard_stops_recording_but_not_steering() {
    let mut fx = setup(Forward::L2, None, &[("0.0.0.0/0", "a,b,c")]);
    let limit = director_common::rrl::Limit::new(1, 2, 0, 32, 128);
    fx.maps().steer_mut().set_guard(&limit).unwrap();
    let mut seen = Vec::new();
    for port in 0..20u16 {
        let f = flow("192.0.2.66", 10_000 + port, VIP4);
        let frame = syn(&f);
        let (v, out) = fx.run(&frame);
        seen.push(l2_server(&frame, v, &out));
    }
    let recorded = flows(&mut fx).len();
    assert!(
        (2..=3).contains(&recorded),
        "{recorded} flows recorded past a burst of 2"
    );
    assert!(counter(&mut fx, "guarded") >= 17);
    // Unrecorded flows keep their choice: a fresh program chooses the same.
    let fx2 = setup(Forward::L2, None, &[("0.0.0.0/0", "a,b,c")]);
    for (port, want) in seen.iter().enumerate() {
        let f = flow("192.0.2.66", 10_000 + port as u16, VIP4);
        let frame = syn(&f);
        let (v, out) = fx2.run(&frame);
        assert_eq!(l2_server(&frame, v, &out), *want);
    }
}

#[test]
fn vips_are_refused_with_a_reason_and_nothing_written() {
    let mut fx = Fixture::new().unwrap();
    let m = fx.maps();
    ops::server_add(m, "a", Some(A.v4), None).unwrap();
    let bad = VipSettings {
        vips: vec![VIP4.parse().unwrap()],
        mode: Forward::Ipip,
        mss: None,
        sources: vec![],
    };
    let e = ops::service_add_with(m, SERVICE, 30, 1, Mode::Random, Some(&bad), false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("--encap-source"), "{e}");
    assert!(m.services().unwrap().is_empty(), "nothing written");
    assert!(m.steer().vips().unwrap().is_empty());
    let _: IpAddr = A.v4.into();
}

/// Demand: a new flow's SYN counts once at the choice index of the decision that chose its
/// server; the pinned flow's later packets (and a retransmitted SYN) count nothing.
#[test]
fn a_new_flows_syn_counts_once_at_its_choice_index() {
    use director_common::demand::{FLAG_SOURCE_V6, FLAG_SYN, FLAG_V6};
    let mut fx = setup(
        Forward::L2,
        None,
        &[("0.0.0.0/0", "a"), ("198.51.100.0/24", "b"), ("::/0", "c")],
    );
    let svc = fx.maps().find_service(SERVICE).unwrap().unwrap();
    let owners = fx.maps().choice_owners().unwrap();
    let index_of = |server: &str| {
        let id = fx.maps_read().servers().unwrap();
        let id = id.iter().find(|s| s.name == server).unwrap().id;
        owners
            .iter()
            .find(|(_, s, d)| *s == svc && d.servers[0] == id)
            .unwrap()
            .0
    };
    let (ia, ib, ic) = (index_of("a"), index_of("b"), index_of("c"));
    let mut ring = director_ctl::kernel::DemandRing::open(fx.pin_dir()).unwrap();
    fx.maps().set_demand_sampling(1).unwrap();
    assert_eq!(fx.maps().demand_counts().unwrap(), vec![]);
    let f = flow("198.51.100.7", 40_002, VIP4);
    let (v, out) = fx.run(&syn(&f));
    assert_eq!(l2_server(&syn(&f), v, &out), "b");
    assert_eq!(fx.maps().demand_counts().unwrap(), vec![(ib, 1)]);
    for frame in [ack(&f), syn(&f), ack(&f)] {
        let (v, out) = fx.run(&frame);
        assert_eq!(l2_server(&frame, v, &out), "b");
    }
    assert_eq!(fx.maps().demand_counts().unwrap(), vec![(ib, 1)]);
    let f6 = flow("2001:db8:9::7", 40_003, VIP6);
    fx.run(&syn(&f6));
    fx.run(&ack(&f6));
    let mut want = vec![(ib, 1), (ic, 1)];
    want.sort();
    assert_eq!(fx.maps().demand_counts().unwrap(), want);
    let samples = ring.drain(10);
    assert_eq!(samples.len(), 2, "{samples:?}");
    let (s4, s6) = (samples[0], samples[1]);
    assert_eq!((s4.service, s4.choice, s4.client_len), (svc, ib, 32));
    assert_eq!(s4.flags, FLAG_SYN);
    assert_eq!(&s4.client[..4], &[198, 51, 100, 7]);
    assert_eq!(s4.source, s4.client);
    let c6: Ipv6Addr = "2001:db8:9::7".parse().unwrap();
    assert_eq!((s6.service, s6.choice, s6.client_len), (svc, ic, 128));
    assert_eq!(s6.flags, FLAG_SYN | FLAG_V6 | FLAG_SOURCE_V6);
    assert_eq!((s6.client, s6.source), (c6.octets(), c6.octets()));
    assert!(owners.iter().any(|o| o.0 == ia));
}
