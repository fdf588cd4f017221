//! Frames a host would never answer: destinations, sources, ports, checksums, and the
//! edge's own addresses and MAC.

use std::net::{IpAddr, Ipv4Addr};

use director_common::counters::Reason;
use director_tests::packets::*;

use crate::runner::{
    expect_answer, expect_pass, expect_pass_table, pass_case, try_answer, PassCase,
};
use crate::setup::{a_query, edited, frame_of, from, from_port, hex, ip, setup_fra, to, v4, v6};

/// Every class of the hostile-frame review: destinations that are not this edge, sources
/// that cannot be clients, reflecting ports, bad checksums. Each is counted under its own
/// reason; sources, ports and checksums are dropped, destinations left to the host.
fn hostile_table() -> Vec<PassCase> {
    use Reason::*;
    let mut t = Vec::new();
    // The review's reproducer: a query to 255.255.255.255 from ff:ff:ff:ff:ff:ff, which
    // was answered from the broadcast address.
    let reproducer = "ffffffffffff32e9542986f308004500003d000100004011507bc6336401ffffffff9c40\
                      00350029dc6112340100000100000000000003777777076578616d706c6503636f6d0000\
                      010001";
    let bytes: Vec<u8> = (0..reproducer.len() / 2)
        .map(|i| u8::from_str_radix(&reproducer[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    t.push(pass_case(
        "the review's broadcast reproducer",
        bytes,
        GroupDestination,
    ));
    for dst in [
        "255.255.255.255",
        "224.0.0.251",
        "239.255.255.250",
        "ff02::1",
        "ff05::1:3",
    ] {
        let f = frame_of(&to(dst), &a_query());
        t.push(pass_case(format!("to {dst}"), f, GroupDestination));
    }
    for (name, flow) in [("IPv4", v4()), ("IPv6", v6())] {
        let f = edited(&flow, |f| f[0..6].copy_from_slice(&[0xff; 6]));
        t.push(pass_case(
            format!("{name} to the broadcast MAC"),
            f,
            GroupDestination,
        ));
        let f = edited(&flow, |f| {
            f[0..6].copy_from_slice(&[0x01, 0, 0x5e, 0, 0, 0xfb]);
        });
        t.push(pass_case(
            format!("{name} to a multicast MAC"),
            f,
            GroupDestination,
        ));
    }
    for dst in [
        "198.51.100.99",
        "192.0.2.1",
        "2001:db8::99",
        "2001:db8:53::54",
    ] {
        let f = frame_of(&to(dst), &a_query());
        t.push(pass_case(format!("to {dst}, not the edge's"), f, NotForUs));
    }
    for src in [
        "0.0.0.0",
        "0.1.2.3",
        "127.0.0.1",
        "224.0.0.1",
        "240.0.0.1",
        "255.255.255.255",
        "::",
        "::1",
        "ff02::1",
        "::ffff:192.0.2.1",
    ] {
        let f = frame_of(&from(src), &a_query());
        t.push(pass_case(format!("from {src}"), f, BadSource));
    }
    for (name, flow) in [("IPv4", v4()), ("IPv6", v6())] {
        let f = edited(&flow, |f| f[6..12].copy_from_slice(&[0xff; 6]));
        t.push(pass_case(
            format!("{name} from the broadcast MAC"),
            f,
            BadSource,
        ));
    }
    for port in [0, 7, 19] {
        let f = frame_of(&from_port(port), &a_query());
        t.push(pass_case(format!("from port {port}"), f, ReflectingPort));
    }
    // IPv4 header checksum at 14 + 10; the IPv6 UDP checksum at 14 + 40 + 6.
    let f = edited(&v4(), |f| f[24] ^= 0x01);
    t.push(pass_case(
        "IPv4 header checksum off by one bit",
        f,
        BadChecksum,
    ));
    let f = edited(&v6(), |f| f[60..62].copy_from_slice(&[0, 0]));
    t.push(pass_case("IPv6 UDP checksum 0", f, BadChecksum));
    t
}

#[test]
fn frames_a_host_would_not_answer_are_passed_or_dropped_by_reason() {
    expect_pass_table(&setup_fra(), &hostile_table());
}

/// The neighbours of every refused class are still answered: port 53 as the source, the
/// edge's own addresses, unicast clients at the edges of the refused ranges.
#[test]
fn the_nearest_good_frames_are_answered() {
    let fx = setup_fra();
    for (name, frame) in [
        ("from port 53", frame_of(&from_port(53), &a_query())),
        ("from port 1", frame_of(&from_port(1), &a_query())),
        ("from 1.0.0.1", frame_of(&from("1.0.0.1"), &a_query())),
        (
            "from 223.255.255.254",
            frame_of(&from("223.255.255.254"), &a_query()),
        ),
        (
            "from 126.255.255.254",
            frame_of(&from("126.255.255.254"), &a_query()),
        ),
        ("from fe80::1", frame_of(&from("fe80::1"), &a_query())),
        ("from ::2", frame_of(&from("::2"), &a_query())),
    ] {
        if let Err(e) = try_answer(&fx, &frame) {
            panic!(
                "{name}: not answered: {e}
frame {}",
                hex(&frame)
            );
        }
    }
}

/// The addresses are data: an address added is answered on, one removed no longer; and
/// once the interface is known, only its own MAC is.
#[test]
fn the_edges_addresses_and_mac_decide() {
    let mut fx = setup_fra();
    let other = frame_of(&to("198.51.100.99"), &a_query());
    expect_pass(&fx, &other, Reason::NotForUs);
    fx.maps()
        .set_configured_address(ip("198.51.100.99"), true)
        .unwrap();
    expect_answer(&fx, &other);
    fx.maps()
        .set_configured_address(ip("198.51.100.99"), false)
        .unwrap();
    expect_pass(&fx, &other, Reason::NotForUs);

    // BPF_PROG_TEST_RUN runs on the loopback device, ifindex 1.
    fx.maps().put_iface(1, SERVER_MAC).unwrap();
    expect_answer(&fx, &frame_of(&v4(), &a_query()));
    expect_answer(&fx, &frame_of(&v6(), &a_query()));
    let foreign = edited(&v4(), |f| f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 0x54]));
    expect_pass(&fx, &foreign, Reason::NotForUs);
    fx.maps().remove_iface(1).unwrap();
    expect_answer(&fx, &foreign);
}

/// The program checks a destination in its slot of `DIR_LOCAL_SLOTS` and asks the hash
/// map only for a slot more than one address fell in: every address sharing a slot is
/// answered, an address that is not the edge's is refused whether its slot is free, held
/// by another address, or shared; and removing the first of a shared slot's addresses
/// leaves the others answered.
#[test]
fn addresses_sharing_a_slot_are_all_answered() {
    use director_common::peers::{local_key_v4, local_slot, local_words};
    let mut fx = setup_fra();
    let slot = |a: Ipv4Addr| local_slot(local_words(&local_key_v4(a.octets())));
    // Three documentation addresses in one slot, none of them the edge's yet: two become
    // the edge's, the third stays a stranger.
    let have: Vec<IpAddr> = fx
        .maps()
        .local_addresses()
        .unwrap()
        .into_iter()
        .map(|(a, _)| a)
        .collect();
    let mut by_slot: std::collections::HashMap<u32, Vec<Ipv4Addr>> = Default::default();
    let mut shared = None;
    'search: for net in [[198, 51, 100], [203, 0, 113]] {
        for n in 1..=254u8 {
            let a = Ipv4Addr::new(net[0], net[1], net[2], n);
            if have.contains(&IpAddr::V4(a)) {
                continue;
            }
            let v = by_slot.entry(slot(a)).or_default();
            v.push(a);
            if v.len() == 3 {
                shared = Some(v.clone());
                break 'search;
            }
        }
    }
    let shared = shared.expect("three of 508 addresses in one of 256 slots");
    let (mine, stranger) = (&shared[..2], shared[2]);
    let query_to = |a: Ipv4Addr| frame_of(&to(&a.to_string()), &a_query());
    for a in mine {
        fx.maps()
            .set_configured_address(IpAddr::V4(*a), true)
            .unwrap();
    }
    for a in mine {
        expect_answer(&fx, &query_to(*a));
    }
    expect_pass(&fx, &query_to(stranger), Reason::NotForUs);
    fx.maps()
        .set_configured_address(IpAddr::V4(mine[0]), false)
        .unwrap();
    expect_pass(&fx, &query_to(mine[0]), Reason::NotForUs);
    for a in &mine[1..] {
        expect_answer(&fx, &query_to(*a));
    }
    expect_pass(&fx, &query_to(stranger), Reason::NotForUs);
}
