//! Frames passed to the host unchanged, under the right counter.
//!
//! Each table is every frame one part of the parser must give up on, with the counter it
//! must count it under. One test per table runs every row and reports all rows that fail,
//! by name, so one regression shows its whole extent at once.

use std::net::Ipv4Addr;

use director_common::counters::Reason;
use director_tests::fixture::XDP_TX;
use director_tests::packets::*;
use hickory_proto::op::{MessageType, OpCode};
use hickory_proto::rr::{DNSClass, Name, RData, RecordType};

use crate::runner::{
    a_query_with, expect_answer, expect_pass_table, flow_name, pass_case, pass_table_failures,
    PassCase,
};
use crate::setup::{a_query, all_flows, frame_of, hex, ip, setup, setup_fra, v4, v6};
use crate::{FRA, ID, NYC, OPTION_ECS, QNAME};

/// The table runner must report a row whose expectation is wrong, or a table could pass
/// without checking anything.
#[test]
fn pass_tables_report_every_wrong_row_by_name() {
    let fx = setup_fra();
    let unknown = frame_of(&v4(), &query(ID, "other.example.com.", RecordType::A));
    let table = [
        pass_case("right reason", unknown.clone(), Reason::UnknownName),
        pass_case("wrong reason", unknown, Reason::NotDns),
        pass_case("answered", frame_of(&v4(), &a_query()), Reason::UnknownName),
    ];
    let failures = pass_table_failures(&fx, &table);
    assert_eq!(failures.len(), 2, "{failures:#?}");
    assert!(
        failures[0].starts_with("wrong reason (") && failures[0].contains("counters moved"),
        "{}",
        failures[0]
    );
    assert!(
        failures[1].starts_with("answered (") && failures[1].contains(&format!("verdict {XDP_TX}")),
        "{}",
        failures[1]
    );
}

/// Frames that are not DNS over UDP to port 53 in a shape director parses: other
/// ethertypes, other transports and ports, IP options, fragments, lengths that disagree.
fn not_dns_over_udp_table() -> Vec<PassCase> {
    let mut table = vec![pass_case("ARP", arp_frame(), Reason::NotIp)];
    let single_tagged = frame_of(&v4().with_vlan(10), &a_query());
    for outer in [ETHERTYPE_VLAN, 0x88a8] {
        let mut frame = single_tagged[..12].to_vec();
        frame.extend(outer.to_be_bytes());
        frame.extend(20u16.to_be_bytes());
        frame.extend(&single_tagged[12..]);
        table.push(pass_case(
            format!("double tagged, outer {outer:#06x}"),
            frame,
            Reason::NotIp,
        ));
    }

    let dns = wire(&a_query());
    let mut stream = (dns.len() as u16).to_be_bytes().to_vec();
    stream.extend(&dns);
    for flow in all_flows() {
        table.push(pass_case(
            format!("TCP to port 53 over {}", flow_name(&flow)),
            ip_frame(&flow, IPPROTO_TCP, &tcp_segment(&flow, &stream)),
            Reason::NotDns,
        ));
        for port in [5353, 54, 0] {
            let flow = flow.to_port(port);
            table.push(pass_case(
                format!("UDP over {}", flow_name(&flow)),
                frame_of(&flow, &a_query()),
                Reason::NotDns,
            ));
        }
    }
    // Hop-by-hop (0) and destination options (60), each carrying UDP after a PadN.
    let udp6 = udp_segment(&v6(), &dns);
    for next in [0u8, 60] {
        let mut l4 = vec![IPPROTO_UDP, 0, 1, 4, 0, 0, 0, 0];
        l4.extend(&udp6);
        table.push(pass_case(
            format!("IPv6 extension header {next} before UDP"),
            ip_frame(&v6(), next, &l4),
            Reason::NotDns,
        ));
    }

    let udp4 = udp_segment(&v4(), &dns);
    // NOP, NOP, NOP, End of options: IHL 6.
    let with_options = ip_frame_with(&v4(), IPPROTO_UDP, &udp4, &[1, 1, 1, 0], IPV4_DF);
    assert_eq!(with_options[ETH_LEN], 0x46);
    verify_checksums(&ip_frame_with(&v4(), IPPROTO_UDP, &udp4, &[], IPV4_DF)).unwrap();
    table.push(pass_case(
        "IPv4 with options",
        with_options,
        Reason::IpFragmentOrOptions,
    ));
    for flow in [v4(), v4().with_vlan(12)] {
        let udp = udp_segment(&flow, &dns);
        // First fragment (MF), a later one (offset), and the last one (offset, no MF).
        for flags in [IPV4_MF, IPV4_MF | 0x0010, 0x0010, IPV4_DF | 0x0001] {
            table.push(pass_case(
                format!("fragment, flags {flags:#06x}, over {}", flow_name(&flow)),
                ip_frame_with(&flow, IPPROTO_UDP, &udp, &[], flags),
                Reason::IpFragmentOrOptions,
            ));
        }
    }

    for flow in [v4(), v6()] {
        let frame = frame_of(&flow, &a_query());
        let f = parse_udp(&frame).unwrap();
        // The UDP length one short and one long of the IP length.
        for delta in [-1i32, 1] {
            let mut bad = frame.clone();
            let len = (frame.len() - f.udp) as i32 + delta;
            bad[f.udp + 4..f.udp + 6].copy_from_slice(&(len as u16).to_be_bytes());
            table.push(pass_case(
                format!("UDP length {delta:+} over {}", flow_name(&flow)),
                bad,
                Reason::Malformed,
            ));
        }
    }
    let mut ihl_4 = frame_of(&v4(), &a_query());
    ihl_4[ETH_LEN] = 0x44;
    table.push(pass_case("IPv4 with IHL 4", ihl_4, Reason::Malformed));
    table
}

#[test]
fn frames_that_are_not_dns_over_udp_pass() {
    expect_pass_table(&setup_fra(), &not_dns_over_udp_table());
}

/// DNS messages that are not one plain query: responses, other opcodes, header bits a
/// query does not set, more than one question, records in a query, bytes after the end.
fn not_a_plain_query_table() -> Vec<PassCase> {
    let mut table = Vec::new();
    let response = a_query_with(|m| {
        m.set_message_type(MessageType::Response);
    });
    for flow in all_flows() {
        table.push(pass_case(
            format!("response over {}", flow_name(&flow)),
            frame_of(&flow, &response),
            Reason::NotQuery,
        ));
    }
    for op in [OpCode::Update, OpCode::Notify, OpCode::Status] {
        table.push(pass_case(
            format!("opcode {op:?}"),
            frame_of(
                &v4(),
                &a_query_with(|m| {
                    m.set_op_code(op);
                }),
            ),
            Reason::NotQuery,
        ));
    }
    // Opcodes hickory has no name for (IQUERY, the unassigned 3, 6, 15), set on the wire:
    // the listeners answer them NOTIMP.
    for op in [1u16, 3, 6, 15] {
        let mut dns = wire(&a_query());
        let flags = be16(&dns, 2) | op << 11;
        dns[2..4].copy_from_slice(&flags.to_be_bytes());
        table.push(pass_case(
            format!("opcode {op} on the wire"),
            udp_frame(&v4(), &dns),
            Reason::NotQuery,
        ));
    }
    table.push(pass_case(
        "TC set by hickory",
        frame_of(
            &v4(),
            &a_query_with(|m| {
                m.set_truncated(true);
            }),
        ),
        Reason::NotQuery,
    ));
    // TC, the Z bit, and a nonzero RCODE in a query, set on the wire.
    for bits in [0x0200u16, 0x0040, 0x0001, 0x000f] {
        let mut dns = wire(&a_query());
        let flags = be16(&dns, 2) | bits;
        dns[2..4].copy_from_slice(&flags.to_be_bytes());
        table.push(pass_case(
            format!("header bits {bits:#06x}"),
            udp_frame(&v4(), &dns),
            Reason::NotQuery,
        ));
    }
    let two_questions = a_query_with(|m| {
        m.add_query(hickory_proto::op::Query::query(
            Name::from_ascii(QNAME).unwrap(),
            RecordType::AAAA,
        ));
    });
    table.push(pass_case(
        "two questions",
        frame_of(&v4(), &two_questions),
        Reason::NotQuery,
    ));
    let record = owned_a_record();
    let with_answer = a_query_with(|m| {
        m.add_answer(record.clone());
    });
    let with_authority = a_query_with(|m| {
        m.add_name_server(record.clone());
    });
    let mut two_additional = with_edns(a_query(), 1232);
    two_additional.add_additional(record);
    for (name, m) in [
        ("an answer record", with_answer),
        ("an authority record", with_authority),
        ("OPT and another additional record", two_additional),
    ] {
        table.push(pass_case(
            format!("query carrying {name}"),
            frame_of(&v4(), &m),
            Reason::NotQuery,
        ));
    }
    // Signed with TSIG (a key director does not have; the listeners answer NOTAUTH): alone
    // the one additional record is not an OPT record; after OPT it is a second one.
    for (what, m, reason) in [
        ("TSIG", a_query(), Reason::Edns),
        ("OPT and TSIG", with_edns(a_query(), 1232), Reason::NotQuery),
    ] {
        let mut dns = wire(&m);
        let ar = be16(&dns, 10) + 1;
        dns[10..12].copy_from_slice(&ar.to_be_bytes());
        dns.extend(tsig_record());
        table.push(pass_case(
            format!("query carrying {what}"),
            udp_frame(&v4(), &dns),
            reason,
        ));
    }
    for (what, m) in [
        ("no EDNS", a_query()),
        ("EDNS", with_edns(a_query(), 1232)),
        ("ECS", with_ecs(a_query(), ip("203.0.113.0"), 24, 0)),
    ] {
        let mut dns = wire(&m);
        dns.push(0);
        for flow in [v4(), v6()] {
            table.push(pass_case(
                format!("a byte after a query with {what} over {}", flow_name(&flow)),
                udp_frame(&flow, &dns),
                Reason::Malformed,
            ));
        }
    }
    table
}

#[test]
fn messages_that_are_not_a_plain_query_pass() {
    expect_pass_table(&setup_fra(), &not_a_plain_query_table());
}

/// A TSIG record (RFC 8945 §4.2) under `unknown-key.`, hmac-sha256, a 32-byte MAC.
fn tsig_record() -> Vec<u8> {
    let mut rdata = b"\x0bhmac-sha256\x00".to_vec();
    rdata.extend([0, 0, 0x6b, 0x49, 0xd2, 0, 0x01, 0x2c, 0, 32]);
    rdata.extend([0xaa; 32]);
    rdata.extend(ID.to_be_bytes());
    rdata.extend([0, 0, 0, 0]);
    let mut rr = b"\x0bunknown-key\x00\x00\xfa\x00\xff\x00\x00\x00\x00".to_vec();
    rr.extend((rdata.len() as u16).to_be_bytes());
    rr.extend(rdata);
    rr
}

/// An A record for the owned name, for queries that carry records.
fn owned_a_record() -> hickory_proto::rr::Record {
    use hickory_proto::rr::{rdata::A, Name, Record};
    Record::from_rdata(Name::from_ascii(QNAME).unwrap(), 60, RData::A(A(FRA.v4)))
}

/// Questions director does not answer: names it does not own (near misses included),
/// other types and classes, and names that are not plain labels.
fn question_table() -> Vec<PassCase> {
    let mut table = Vec::new();
    for name in [
        "other.example.com.",
        "example.com.",
        "www.example.org.",
        "com.",
    ] {
        table.push(pass_case(
            format!("unknown name {name}"),
            frame_of(&v4(), &query(ID, name, RecordType::A)),
            Reason::UnknownName,
        ));
    }
    let near = [
        "ww.example.com.",
        "wwww.example.com.",
        "www.example.com.evil.",
        "www.example.co.",
        "www.example.comm.",
        "xwww.example.com.",
        "a.www.example.com.",
        "www.examplf.com.",
        "www-example.com.",
    ];
    for flow in [v4(), v6()] {
        for name in near {
            table.push(pass_case(
                format!("near name {name} over {}", flow_name(&flow)),
                frame_of(&flow, &query(ID, name, RecordType::A)),
                Reason::UnknownName,
            ));
        }
    }
    // A label boundary in a different place: "www.example.com" as "wwwe.xample.com".
    table.push(pass_case(
        "label boundary moved: wwwe.xample.com.",
        frame_of(&v4(), &query(ID, "wwwe.xample.com.", RecordType::A)),
        Reason::UnknownName,
    ));

    for rtype in [
        // Type 0, reserved (RFC 6895 §3.1): the listeners answer it NOTIMP.
        RecordType::ZERO,
        RecordType::MX,
        RecordType::ANY,
        RecordType::TXT,
        RecordType::NS,
        RecordType::CNAME,
    ] {
        table.push(pass_case(
            format!("type {rtype}"),
            frame_of(&v4(), &query(ID, QNAME, rtype)),
            Reason::QType,
        ));
    }
    for class in [DNSClass::CH, DNSClass::HS, DNSClass::ANY] {
        let m = a_query_with(|m| {
            m.queries_mut()[0].set_query_class(class);
        });
        table.push(pass_case(
            format!("class {class} over IPv6"),
            frame_of(&v6(), &m),
            Reason::QType,
        ));
    }

    let plain = wire(&a_query());
    let tail = &plain[question_end(&plain).unwrap() - 4..];
    // "www" then a pointer to offset 16 ("example.com" as it would sit in a real message),
    // a name that is only a pointer, and "www" then the two reserved label types.
    for name in [
        &b"\x03www\xc0\x10"[..],
        &b"\xc0\x0c"[..],
        &b"\x03www\x80\x10"[..],
        &b"\x03www\x40\x10"[..],
    ] {
        let mut dns = plain[..12].to_vec();
        dns.extend(name);
        dns.extend(tail);
        table.push(pass_case(
            format!("question name {}", hex(name)),
            udp_frame(&v4(), &dns),
            Reason::BadName,
        ));
    }
    table
}

#[test]
fn questions_director_does_not_answer_pass() {
    expect_pass_table(&setup_fra(), &question_table());
}

/// EDNS that director does not take: version 1, a second ECS option, ECS with a scope,
/// host bits past its prefix or a length that disagrees, an additional record not OPT.
fn edns_table() -> Vec<PassCase> {
    let mut version_1 = with_edns(a_query(), 1232);
    version_1.extensions_mut().as_mut().unwrap().set_version(1);
    let mut table = vec![pass_case(
        "EDNS version 1",
        frame_of(&v4(), &version_1),
        Reason::Edns,
    )];

    let mut two_ecs = wire(&with_ecs(a_query(), ip("203.0.113.0"), 24, 0));
    push_edns_option(&mut two_ecs, OPTION_ECS, &second_ecs_body());
    table.push(pass_case(
        "two ECS options",
        udp_frame(&v4(), &two_ecs),
        Reason::Edns,
    ));

    for (addr, source, scope) in [
        ("203.0.113.0", 24, 24),
        ("203.0.113.0", 24, 1),
        ("2001:db8:1::", 48, 48),
    ] {
        table.push(pass_case(
            format!("ECS {addr}/{source} with scope {scope}"),
            frame_of(&v4(), &with_ecs(a_query(), ip(addr), source, scope)),
            Reason::Edns,
        ));
    }
    // 113 = 0b0111_0001: bits past /20 set; 129 past /25; 2001:db8:1:ab01:: past /55.
    for (addr, source) in [
        ("203.0.113.0", 20),
        ("203.0.113.129", 25),
        ("2001:db8:1:ab01::", 55),
    ] {
        table.push(pass_case(
            format!("ECS {addr}/{source}, host bits set"),
            frame_of(&v4(), &with_ecs(a_query(), ip(addr), source, 0)),
            Reason::Edns,
        ));
    }
    // /24 with 4 address bytes, /24 with 2, and a /33 IPv4 prefix.
    for (what, body) in [
        (
            "/24 with 4 address bytes",
            ecs_body(1, 24, 0, &[203, 0, 113, 0]),
        ),
        ("/24 with 2 address bytes", ecs_body(1, 24, 0, &[203, 0])),
        ("IPv4 /33", ecs_body(1, 33, 0, &[203, 0, 113, 0, 0])),
    ] {
        let mut dns = wire(&with_edns(a_query(), 1232));
        push_edns_option(&mut dns, OPTION_ECS, &body);
        table.push(pass_case(
            format!("ECS {what}"),
            udp_frame(&v4(), &dns),
            Reason::Edns,
        ));
    }
    // One additional record that is not OPT is an EDNS problem, not a query problem.
    let not_opt = a_query_with(|m| {
        m.add_additional(owned_a_record());
    });
    table.push(pass_case(
        "one additional record, not OPT",
        frame_of(&v4(), &not_opt),
        Reason::Edns,
    ));
    table
}

#[test]
fn edns_director_does_not_take_passes() {
    expect_pass_table(&setup_fra(), &edns_table());
}

/// The ECS option the two-ECS row adds after the first.
fn second_ecs_body() -> Vec<u8> {
    ecs_body(1, 24, 0, &[198, 51, 100])
}

/// The two-ECS row's second option under another code is just an unknown option.
#[test]
fn an_unknown_option_beside_ecs_is_answered() {
    let fx = setup_fra();
    let mut dns = wire(&with_ecs(a_query(), ip("203.0.113.0"), 24, 0));
    push_edns_option(&mut dns, 65001, &second_ecs_body());
    expect_answer(&fx, &udp_frame(&v4(), &dns));
}

/// Every cut of an answerable query, from the Ethernet header on (BPF_PROG_TEST_RUN
/// refuses frames shorter than that).
#[test]
fn truncated_frames_pass() {
    let fx = setup_fra();
    let q = with_ecs(query(ID, QNAME, RecordType::AAAA), ip("203.0.113.0"), 24, 0);
    let mut table = Vec::new();
    for flow in [v4(), v6().with_vlan(7)] {
        let frame = frame_of(&flow, &q);
        // Uncut it is answered, so each cut is what makes its row pass.
        expect_answer(&fx, &frame);
        for cut in ETH_LEN..frame.len() {
            let reason = if flow.vlan.is_some() && cut < ETH_LEN + VLAN_LEN {
                Reason::NotIp
            } else {
                Reason::Malformed
            };
            table.push(pass_case(
                format!("{} cut to {cut} bytes", flow_name(&flow)),
                frame[..cut].to_vec(),
                reason,
            ));
        }
    }
    expect_pass_table(&fx, &table);
}

#[test]
fn a_client_without_a_decision_passes() {
    let fx = setup(
        1,
        &[("203.0.113.0/24", NYC.name), ("2001:db8:1::/48", NYC.name)],
    );
    expect_pass_table(
        &fx,
        &[
            pass_case(
                "IPv4 client",
                frame_of(&v4(), &a_query()),
                Reason::NoDecision,
            ),
            pass_case(
                "IPv6 client",
                frame_of(&v6(), &a_query()),
                Reason::NoDecision,
            ),
            pass_case(
                "ECS subnet",
                frame_of(&v4(), &with_ecs(a_query(), ip("198.51.100.0"), 24, 0)),
                Reason::NoDecision,
            ),
        ],
    );
    // The covered subnet is answered, by packet source or by ECS.
    expect_answer(
        &fx,
        &frame_of(&Flow::v4(Ipv4Addr::new(203, 0, 113, 1)), &a_query()),
    );
    expect_answer(
        &fx,
        &frame_of(&v4(), &with_ecs(a_query(), ip("203.0.113.0"), 24, 0)),
    );
}

/// director_common::query::parse is documented as the model of what the kernel answers.
/// They must agree on a query with nine EDNS options (a valid query).
#[test]
fn kernel_and_query_model_agree_on_many_edns_options() {
    let fx = setup_fra();
    for n in [7, 8, 9, 12] {
        let mut dns = wire(&with_edns(a_query(), 1232));
        for i in 0..n {
            push_edns_option(&mut dns, 65001 + i, &[]);
        }
        let model = director_common::query::parse(&dns)
            .map(|_| ())
            .map_err(Reason::name);
        let (verdict, _) = fx.run(&udp_frame(&v4(), &dns));
        assert_eq!(
            verdict == XDP_TX,
            model.is_ok(),
            "{n} EDNS options: kernel verdict {verdict}, model {model:?}"
        );
    }
}
