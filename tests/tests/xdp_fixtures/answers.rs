//! Answers: letter case, header flags, checksums, padding.

use director_common::select::Mode;
use director_ctl::ops;
use director_tests::fixture::{route_set, XDP_TX};
use director_tests::packets::*;
use hickory_proto::rr::rdata::opt::ClientSubnet;
use hickory_proto::rr::RecordType;

use crate::check::check_answer;
use crate::runner::expect_answer;
use crate::setup::{a_query, all_flows, frame_of, ip, setup_fra, v4, v6, with_both_types};
use crate::{FRA, ID, QNAME, TTL};

#[test]
fn answers_a_and_aaaa_over_ipv4_and_ipv6_with_and_without_vlan() {
    let fx = setup_fra();
    for (flow, rtype) in with_both_types(all_flows()) {
        let a = expect_answer(&fx, &frame_of(&flow, &query(ID, QNAME, rtype)));
        assert_eq!(a.addrs, vec![FRA.addr(rtype)], "{rtype} over {flow:?}");
        assert_eq!(a.ttls, vec![TTL]);
        assert!(
            a.opt.is_none() && a.msg.extensions().is_none(),
            "no OPT without EDNS in the query"
        );
    }
}

#[test]
fn answer_keeps_the_clients_letter_case_and_points_at_the_question() {
    let fx = setup_fra();
    for name in ["WWW.EXAMPLE.COM.", "www.example.com.", QNAME] {
        let frame = frame_of(&v4(), &query(ID, name, RecordType::A));
        let (verdict, out) = fx.run(&frame);
        assert_eq!(verdict, XDP_TX, "{name}");
        let dns = parse_udp(&out).unwrap().payload;
        // check_answer compares the question bytes; here the raw layout is spelled out.
        let mut want = vec![];
        for label in name.trim_end_matches('.').split('.') {
            want.push(label.len() as u8);
            want.extend(label.as_bytes());
        }
        want.extend([0, 0, 1, 0, 1]);
        assert_eq!(&dns[12..12 + want.len()], &want[..], "question of {name}");
        assert_eq!(
            &dns[12 + want.len()..12 + want.len() + 2],
            &[0xc0, 0x0c],
            "answer owner of {name}"
        );
        check_answer(&frame, &out).unwrap();
    }
}

#[test]
fn header_flags_copy_rd_and_cd_only() {
    let fx = setup_fra();
    let mut no_rd = a_query();
    no_rd.set_recursion_desired(false);
    let a = expect_answer(&fx, &frame_of(&v4(), &no_rd));
    assert!(!a.msg.recursion_desired() && a.msg.authoritative() && !a.msg.recursion_available());

    // dig's default sets AD in queries; an answer must not claim authenticated data.
    let mut cd_ad = a_query();
    cd_ad.set_checking_disabled(true).set_authentic_data(true);
    let a = expect_answer(&fx, &frame_of(&v6(), &cd_ad));
    assert!(a.msg.recursion_desired() && a.msg.checking_disabled() && !a.msg.authentic_data());
    assert_eq!(a.msg.id(), ID);
}

/// The UDP checksum covers the echoed name and the appended records at either byte parity:
/// names of odd and even wire length, ECS addresses of every length.
#[test]
fn checksums_hold_for_every_name_and_ecs_length_parity() {
    let names = [
        "a.example.com",
        "ab.example.com",
        "abc.example.com",
        "abcd.example.com",
    ];
    let mut fx = setup_fra();
    for name in names {
        ops::service_add(fx.maps(), name, TTL, 2, Mode::Random).unwrap();
        route_set(fx.maps(), name, "0.0.0.0/0", "fra-1,nyc-1").unwrap();
        route_set(fx.maps(), name, "::/0", "fra-1,nyc-1").unwrap();
    }
    let ecs = [
        ("0.0.0.0", 0),
        ("192.0.0.0", 7),
        ("203.0.0.0", 16),
        ("203.0.113.0", 24),
        ("203.0.113.7", 32),
        ("2001:db8::", 33),
        ("2001:db8:1:2::", 64),
        ("2001:db8::1", 128),
    ];
    for name in names {
        let qname = name.to_uppercase() + ".";
        for (flow, rtype) in with_both_types([v4(), v6().with_vlan(8)]) {
            let a = expect_answer(&fx, &frame_of(&flow, &query(ID, &qname, rtype)));
            assert_eq!(a.addrs.len(), 2);
            for (addr, source) in ecs {
                let a = expect_answer(
                    &fx,
                    &frame_of(
                        &flow,
                        &with_ecs(query(ID, &qname, rtype), ip(addr), source, 0),
                    ),
                );
                assert_eq!(a.ecs, Some(ClientSubnet::new(ip(addr), source, 0)));
            }
        }
    }
}

/// The answer's checksum is computed over the answer, whatever the query's said: none
/// (IPv4 allows it), a wrong one, or only the pseudo-header sum a veth with checksum
/// offload leaves in it.
#[test]
fn answer_checksum_does_not_depend_on_the_querys() {
    let fx = setup_fra();
    for flow in [v4(), v6()] {
        let frame = frame_of(&flow, &with_ecs(a_query(), ip("203.0.113.0"), 24, 0));
        let f = parse_udp(&frame).unwrap();
        let good = f.udp_checksum;
        for field in [0u16, 0x1234, !good, good.wrapping_add(1)] {
            // Over IPv6 a UDP checksum of 0 is discarded (RFC 8200): the hostile table.
            if field == 0 && flow.is_v6() {
                continue;
            }
            let mut q = frame.clone();
            q[f.udp + 6..f.udp + 8].copy_from_slice(&field.to_be_bytes());
            expect_answer(&fx, &q);
        }
    }
}

/// Frames shorter than 60 bytes arrive padded; the padding is not part of the query and
/// must not be part of the answer.
#[test]
fn ethernet_padding_is_left_out_of_the_answer() {
    let fx = setup_fra();
    for flow in [v4(), v6().with_vlan(2)] {
        let mut frame = frame_of(&flow, &a_query());
        frame.extend([0u8; 18]);
        let (verdict, out) = fx.run(&frame);
        assert_eq!(verdict, XDP_TX);
        // check_answer requires the IP packet to end where the frame does.
        check_answer(&frame, &out).unwrap();
    }
}

/// A query padded (RFC 7830) to 468 bytes gets an answer far shorter than itself.
#[test]
fn a_padded_query_gets_a_shorter_answer() {
    let fx = setup_fra();
    let mut dns = wire(&with_ecs(a_query(), ip("203.0.113.0"), 24, 0));
    let pad = 468 - dns.len() - 4;
    push_edns_option(&mut dns, 12, &vec![0; pad]);
    assert_eq!(dns.len(), 468);
    let frame = udp_frame(&v6(), &dns);
    let a = expect_answer(&fx, &frame);
    assert_eq!(
        a.opt.unwrap().options.len(),
        1,
        "only ECS is echoed, not the padding"
    );
    // Question, one A record, OPT with a /24 ECS: the frame shrinks to fit.
    let answer = fx.run(&frame).1;
    assert_eq!(
        parse_udp(&answer).unwrap().payload.len(),
        question_end(&dns).unwrap() + 16 + 11 + 8 + 3
    );
}
