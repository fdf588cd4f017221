//! BPF_PROG_TEST_RUN fixtures for the XDP program: a frame in, the verdict and the frame
//! out, checked field by field. Answers are read back with hickory-proto and their
//! checksums recomputed by `director_tests::packets`, so no check leans on the wire code
//! the program itself is built from.
//!
//! Needs root (it loads the program): `cargo test -p director-tests --test xdp_fixtures --
//! --test-threads=1`.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use director_common::counters::Reason;
use director_common::maps::{Fallback, HealthMask};
use director_common::select::Mode;
use director_ctl::kernel::TableSource;
use director_ctl::ops;
use director_plan::prefix::cover16 as front16;
use director_tests::fixture::{route_set, Fixture, XDP_DROP, XDP_PASS, XDP_TX};
use director_tests::packets::*;
use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::opt::{ClientSubnet, EdnsCode, EdnsOption};
use hickory_proto::rr::{DNSClass, Name, RData, RecordType};
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder};
use ipnet::IpNet;

const NAME: &str = "www.example.com";
/// The owned name the way a 0x20-randomising resolver sends it.
const QNAME: &str = "wWw.ExAmPlE.cOm.";
const TTL: u32 = 42;
const ID: u16 = 0xbeef;

const CLIENT_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const CLIENT_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 0x10);

const OPTION_ECS: u16 = 8;
const OPT_TYPE: u16 = 41;
/// Header flag bits (RFC 1035 §4.1.1, RFC 4035 §3.1.6 for AD/CD).
const QR: u16 = 0x8000;
const AA: u16 = 0x0400;
const RD: u16 = 0x0100;
const CD: u16 = 0x0010;
/// Hop limit director gives its answers.
const ANSWER_TTL: u8 = 64;

struct Server {
    name: &'static str,
    v4: Ipv4Addr,
    v6: Ipv6Addr,
}

impl Server {
    fn addr(&self, rtype: RecordType) -> IpAddr {
        if rtype == RecordType::AAAA {
            self.v6.into()
        } else {
            self.v4.into()
        }
    }
}

const FRA: Server = Server {
    name: "fra-1",
    v4: Ipv4Addr::new(198, 51, 100, 1),
    v6: Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 1),
};
const NYC: Server = Server {
    name: "nyc-1",
    v4: Ipv4Addr::new(198, 51, 100, 2),
    v6: Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 2),
};

// ---------------------------------------------------------------------------------------
// Setup.

/// A fresh program owning NAME (TTL, `answers` per reply) with FRA and NYC as servers and
/// the given (prefix, server list) routes.
fn setup(answers: u8, routes: &[(&str, &str)]) -> Fixture {
    let mut fx = Fixture::new().expect("loading director for BPF_PROG_TEST_RUN (run as root)");
    let m = fx.maps();
    ops::server_add(m, FRA.name, Some(FRA.v4), Some(FRA.v6)).unwrap();
    ops::server_add(m, NYC.name, Some(NYC.v4), Some(NYC.v6)).unwrap();
    ops::service_add(m, NAME, TTL, answers, Mode::Random).unwrap();
    for (prefix, servers) in routes {
        route_set(m, NAME, prefix, servers).unwrap();
    }
    fx
}

/// Every client, of both families, is sent to FRA.
fn setup_fra() -> Fixture {
    setup(1, &[("0.0.0.0/0", FRA.name), ("::/0", FRA.name)])
}

fn v4() -> Flow {
    Flow::v4(CLIENT_V4)
}

fn v6() -> Flow {
    Flow::v6(CLIENT_V6)
}

/// IPv4 and IPv6, untagged and with an 802.1Q tag.
fn all_flows() -> [Flow; 4] {
    [v4(), v4().with_vlan(100), v6(), v6().with_vlan(4094)]
}

/// Each flow with each record type director answers, so that a test over both is one loop.
fn with_both_types(
    flows: impl IntoIterator<Item = Flow>,
) -> impl Iterator<Item = (Flow, RecordType)> {
    flows
        .into_iter()
        .flat_map(|flow| [RecordType::A, RecordType::AAAA].map(|rtype| (flow, rtype)))
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

// ---------------------------------------------------------------------------------------
// What every answer must be.

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

/// What an answer said, once everything any answer must satisfy has been checked.
#[derive(Debug)]
struct Answer {
    /// Addresses of the answer records, in order.
    addrs: Vec<IpAddr>,
    ttls: Vec<u32>,
    /// The answer's OPT record, read raw.
    opt: Option<RawOpt>,
    /// Its ECS option, as hickory reads it.
    ecs: Option<ClientSubnet>,
    msg: Message,
}

impl Answer {
    fn ecs_scope(&self) -> Option<u8> {
        self.opt.as_ref()?.option(OPTION_ECS).map(|b| b[3])
    }
}

/// Checks `answer` as the reply to `query`: the frame turned around with valid checksums,
/// then the DNS message both byte by byte and through hickory.
fn check_answer(query: &[u8], answer: &[u8]) -> Result<Answer, String> {
    let q = parse_udp(query).map_err(|e| format!("query frame: {e}"))?;
    let a = parse_udp(answer).map_err(|e| format!("answer frame: {e}"))?;
    check_turned_around(&q, &a, answer.len())?;
    verify_checksums(answer)?;
    let wire = check_dns_wire(&q.payload, &a.payload)?;
    let (msg, ecs) = check_dns_hickory(&q.payload, &a.payload, &wire.records)?;
    Ok(Answer {
        addrs: wire.records.iter().map(|r| r.1).collect(),
        ttls: wire.records.iter().map(|r| r.0).collect(),
        opt: wire.opt,
        ecs,
        msg,
    })
}

/// Ethernet, IP and UDP of the answer: the query's, addressed back to the client.
fn check_turned_around(q: &UdpFrame, a: &UdpFrame, answer_len: usize) -> Result<(), String> {
    ensure!(
        a.dst_mac == q.src_mac && a.src_mac == q.dst_mac,
        "MACs not swapped: {:?} -> {:?}",
        a.src_mac,
        a.dst_mac
    );
    ensure!(
        a.vlan == q.vlan,
        "VLAN tag {:?}, the query had {:?}",
        a.vlan,
        q.vlan
    );
    ensure!(
        a.src == q.dst && a.dst == q.src,
        "IPs not swapped: {} -> {}",
        a.src,
        a.dst
    );
    ensure!(
        a.src_port == q.dst_port && a.dst_port == q.src_port,
        "ports not swapped: {} -> {}",
        a.src_port,
        a.dst_port
    );
    ensure!(
        a.end == answer_len,
        "the IP packet ends at {} but the frame is {answer_len} bytes",
        a.end
    );
    ensure!(
        a.ttl == ANSWER_TTL,
        "TTL/hop limit {} rather than a fresh {ANSWER_TTL}",
        a.ttl
    );
    // Everything else in the IP header is the query's: version, DSCP, ID and flags for
    // IPv4 (length, TTL, checksum and addresses change); version, class and flow label,
    // next header for IPv6 (length, hop limit and addresses change).
    let same: &[usize] = if a.src.is_ipv4() {
        &[0, 1, 4, 5, 6, 7, 9]
    } else {
        &[0, 1, 2, 3, 6]
    };
    for &i in same {
        ensure!(
            a.ip_header[i] == q.ip_header[i],
            "IP header byte {i} changed: {:#04x} -> {:#04x}",
            q.ip_header[i],
            a.ip_header[i]
        );
    }
    Ok(())
}

/// The answer section as (TTL, address) per record, and the OPT record, read raw.
struct WireAnswer {
    records: Vec<(u32, IpAddr)>,
    opt: Option<RawOpt>,
}

/// The DNS answer byte by byte: header, the question echoed as sent (letter case too),
/// records whose owner is a pointer to the question name, and the OPT record.
fn check_dns_wire(q: &[u8], a: &[u8]) -> Result<WireAnswer, String> {
    let q_end = question_end(q).ok_or("the query has no plain question")?;
    ensure!(
        a.len() >= q_end,
        "answer of {} bytes is shorter than the question",
        a.len()
    );
    ensure!(
        a[0..2] == q[0..2],
        "ID {:#06x}, the query's is {:#06x}",
        be16(a, 0),
        be16(q, 0)
    );
    let (qflags, aflags) = (be16(q, 2), be16(a, 2));
    // QR and AA set; RD and CD copied; opcode, TC, RA, Z, AD and RCODE zero.
    let want = QR | AA | (qflags & (RD | CD));
    ensure!(
        aflags == want,
        "flags {aflags:#06x}, expected {want:#06x} for query flags {qflags:#06x}"
    );
    let (qd, an, ns, ar) = (be16(a, 4), be16(a, 6) as usize, be16(a, 8), be16(a, 10));
    ensure!(
        qd == 1 && ns == 0 && an >= 1,
        "counts QD={qd} AN={an} NS={ns}"
    );
    ensure!(
        ar == be16(q, 10),
        "ARCOUNT {ar}: an OPT record is answered with one, else none"
    );
    ensure!(
        a[12..q_end] == q[12..q_end],
        "question not echoed: {} vs {}",
        hex(&a[12..q_end]),
        hex(&q[12..q_end])
    );

    let qtype = be16(q, q_end - 4);
    let rdlen = if qtype == u16::from(RecordType::AAAA) {
        16
    } else {
        4
    };
    let mut at = q_end;
    let mut records = Vec::new();
    for i in 0..an {
        ensure!(a.len() >= at + 12 + rdlen, "answer record {i} cut short");
        let r = &a[at..at + 12 + rdlen];
        ensure!(
            r[0..2] == [0xc0, 0x0c],
            "record {i} owner {} is not a pointer to offset 12",
            hex(&r[0..2])
        );
        ensure!(
            be16(r, 2) == qtype && be16(r, 4) == 1,
            "record {i} type/class {}/{}",
            be16(r, 2),
            be16(r, 4)
        );
        ensure!(
            be16(r, 10) as usize == rdlen,
            "record {i} RDLENGTH {}",
            be16(r, 10)
        );
        let addr = if rdlen == 4 {
            IpAddr::from(<[u8; 4]>::try_from(&r[12..16]).unwrap())
        } else {
            IpAddr::from(<[u8; 16]>::try_from(&r[12..28]).unwrap())
        };
        records.push((u32::from_be_bytes(r[6..10].try_into().unwrap()), addr));
        at += 12 + rdlen;
    }

    let (opt, limit) = if ar == 1 {
        let qo = read_opt(q, q_end)?;
        let o = read_opt(a, at)?;
        check_opt_wire(&qo, &o)?;
        at = o.end;
        // Sizes under 512 mean 512 (RFC 6891 §6.2.5).
        (Some(o), qo.udp_size.max(512))
    } else {
        (None, 512)
    };
    ensure!(
        at == a.len(),
        "{} bytes after the last record",
        a.len() - at
    );
    ensure!(
        a.len() <= limit as usize,
        "answer of {} bytes, the client takes {limit}",
        a.len()
    );
    Ok(WireAnswer { records, opt })
}

/// The answer's OPT: payload size 1232, version 0, no extended RCODE, Z clear, DO clear
/// unless the query set it, and the query's ECS option with the scope filled in.
fn check_opt_wire(q: &RawOpt, a: &RawOpt) -> Result<(), String> {
    ensure!(
        a.owner == 0 && a.rtype == OPT_TYPE,
        "OPT owner {} type {}",
        a.owner,
        a.rtype
    );
    ensure!(
        a.udp_size == 1232,
        "OPT UDP payload size {}, not 1232",
        a.udp_size
    );
    ensure!(
        a.ttl & !0x8000 == 0,
        "OPT TTL field {:#010x}: extended RCODE, version and Z must be 0",
        a.ttl
    );
    ensure!(
        q.dnssec_ok() || !a.dnssec_ok(),
        "DO set in the answer to a query without it"
    );
    match q.option(OPTION_ECS) {
        Some(qe) => {
            ensure!(
                a.options.len() == 1,
                "answer OPT options {:?}, expected only ECS",
                a.options
            );
            let ae = a
                .option(OPTION_ECS)
                .ok_or("no ECS in the answer to an ECS query")?;
            ensure!(
                ae.len() == qe.len(),
                "ECS of {} bytes, the query's had {}",
                ae.len(),
                qe.len()
            );
            // FAMILY, SOURCE PREFIX-LENGTH and ADDRESS echoed; SCOPE is the answer's own.
            ensure!(
                ae[..3] == qe[..3] && ae[4..] == qe[4..],
                "ECS {} does not echo the query's {}",
                hex(ae),
                hex(qe)
            );
        }
        None => ensure!(
            a.options.is_empty(),
            "options {:?} in the answer to a query without ECS",
            a.options
        ),
    }
    Ok(())
}

/// Reads a message and requires that it used every byte.
fn decode_all(dns: &[u8]) -> Result<Message, String> {
    let mut d = BinDecoder::new(dns);
    let m = Message::read(&mut d).map_err(|e| format!("hickory cannot read it: {e}"))?;
    ensure!(d.is_empty(), "hickory left {} bytes unread", d.len());
    Ok(m)
}

/// The same answer as hickory reads it, against the query as hickory reads it.
fn check_dns_hickory(
    q: &[u8],
    a: &[u8],
    records: &[(u32, IpAddr)],
) -> Result<(Message, Option<ClientSubnet>), String> {
    let qm = Message::from_vec(q).map_err(|e| format!("hickory cannot read the query: {e}"))?;
    let am = decode_all(a)?;
    ensure!(am.id() == qm.id(), "ID {} vs {}", am.id(), qm.id());
    ensure!(am.message_type() == MessageType::Response, "not a response");
    ensure!(am.op_code() == OpCode::Query, "opcode {:?}", am.op_code());
    ensure!(am.authoritative(), "AA clear");
    ensure!(!am.truncated(), "TC set");
    ensure!(
        am.recursion_desired() == qm.recursion_desired(),
        "RD not copied"
    );
    ensure!(!am.recursion_available(), "RA set");
    ensure!(!am.authentic_data(), "AD set");
    ensure!(
        am.checking_disabled() == qm.checking_disabled(),
        "CD not copied"
    );
    ensure!(
        am.response_code() == ResponseCode::NoError,
        "RCODE {:?}",
        am.response_code()
    );
    ensure!(
        am.queries() == qm.queries(),
        "question {:?} vs {:?}",
        am.queries(),
        qm.queries()
    );
    let question = &qm.queries()[0];
    ensure!(
        am.answers().len() == records.len(),
        "hickory sees {} answers",
        am.answers().len()
    );
    for (r, (ttl, addr)) in am.answers().iter().zip(records) {
        ensure!(
            r.name() == question.name(),
            "answer owner {} for question {}",
            r.name(),
            question.name()
        );
        ensure!(
            r.record_type() == question.query_type() && r.dns_class() == DNSClass::IN,
            "answer {r}"
        );
        ensure!(r.ttl() == *ttl, "hickory TTL {} vs wire {ttl}", r.ttl());
        let got = match r.data() {
            Some(RData::A(x)) => IpAddr::V4(x.0),
            Some(RData::AAAA(x)) => IpAddr::V6(x.0),
            other => return Err(format!("answer data {other:?}")),
        };
        ensure!(got == *addr, "hickory address {got} vs wire {addr}");
    }
    ensure!(
        am.name_servers().is_empty() && am.additionals().is_empty(),
        "extra records"
    );
    let ecs = match (qm.extensions(), am.extensions()) {
        (None, None) => None,
        (Some(qe), Some(ae)) => {
            ensure!(
                ae.max_payload() == 1232 && ae.version() == 0 && ae.rcode_high() == 0,
                "EDNS {ae:?}"
            );
            ensure!(
                qe.dnssec_ok() || !ae.dnssec_ok(),
                "DO set in the answer to a query without it"
            );
            match ae.option(EdnsCode::Subnet) {
                Some(EdnsOption::Subnet(cs)) => Some(*cs),
                Some(other) => return Err(format!("ECS option read as {other:?}")),
                None => None,
            }
        }
        (q, a) => {
            return Err(format!(
                "EDNS in query {} but in answer {}",
                q.is_some(),
                a.is_some()
            ))
        }
    };
    Ok((am, ecs))
}

// ---------------------------------------------------------------------------------------
// Running frames.

/// The counters that moved between two snapshots, by name.
fn moved(
    before: &BTreeMap<&'static str, u64>,
    after: &BTreeMap<&'static str, u64>,
) -> Vec<(&'static str, u64)> {
    after
        .iter()
        .filter(|(k, v)| before[*k] != **v)
        .map(|(k, v)| (*k, v - before[k]))
        .collect()
}

/// Runs a frame that must be answered; the checked answer, or what is wrong.
fn try_answer(fx: &Fixture, frame: &[u8]) -> Result<Answer, String> {
    let before = fx.counters();
    let (verdict, out) = fx.try_run(frame).map_err(|e| format!("{e:#}"))?;
    let moved = moved(&before, &fx.counters());
    ensure!(
        verdict == XDP_TX,
        "expected an answer, got verdict {verdict}; counters moved: {moved:?}\nquery {}",
        hex(frame)
    );
    ensure!(
        moved == vec![(Reason::Answered.name(), 1)],
        "counters moved: {moved:?}, expected the answered counter only"
    );
    check_answer(frame, &out)
        .map_err(|e| format!("{e}\nquery  {}\nanswer {}", hex(frame), hex(&out)))
}

/// Runs a frame that must be answered; returns the checked answer.
fn expect_answer(fx: &Fixture, frame: &[u8]) -> Answer {
    try_answer(fx, frame).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs a frame that must be passed to the host untouched (or dropped, for a reason that
/// drops), counted under `reason` only; what is wrong if it is not.
fn check_pass(fx: &Fixture, frame: &[u8], reason: Reason) -> Result<(), String> {
    let before = fx.counters();
    let (verdict, out) = fx.try_run(frame).map_err(|e| format!("{e:#}"))?;
    let moved = moved(&before, &fx.counters());
    let (want, want_name) = if reason.drops() {
        (XDP_DROP, "XDP_DROP")
    } else {
        (XDP_PASS, "XDP_PASS")
    };
    ensure!(
        verdict == want,
        "verdict {verdict}, expected {want_name}; counters moved: {moved:?}"
    );
    ensure!(
        reason.drops() || out == frame,
        "a passed frame changed:\n  in  {}\n  out {}",
        hex(frame),
        hex(&out)
    );
    ensure!(
        moved == vec![(reason.name(), 1)],
        "counters moved: {moved:?}, expected {} only",
        reason.name()
    );
    Ok(())
}

/// `check_pass` for one frame, panicking with what is wrong.
fn expect_pass(fx: &Fixture, frame: &[u8], reason: Reason) {
    check_pass(fx, frame, reason).unwrap_or_else(|e| {
        panic!(
            "expected XDP_PASS for {}: {e}\nframe {}",
            reason.name(),
            hex(frame)
        )
    });
}

fn a_query() -> Message {
    query(ID, QNAME, RecordType::A)
}

fn frame_of(flow: &Flow, m: &Message) -> Vec<u8> {
    udp_frame(flow, &wire(m))
}

// ---------------------------------------------------------------------------------------
// Answers.

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

/// EDNS payload sizes under 512 mean 512 (RFC 6891 §6.2.5); hickory will not write them.
#[test]
fn edns_payload_size_below_512_is_read_as_512() {
    let fx = setup_fra();
    for size in [0u16, 1, 511] {
        let mut dns = wire(&with_edns(a_query(), 1232));
        let opt = question_end(&dns).unwrap();
        dns[opt + 3..opt + 5].copy_from_slice(&size.to_be_bytes());
        expect_answer(&fx, &udp_frame(&v4(), &dns));
    }
}

#[test]
fn edns_answer_has_opt_1232_version_0_do_clear() {
    let fx = setup_fra();
    for (flow, max_payload) in [
        (v4(), 4096),
        (v6().with_vlan(3), 512),
        (v4().with_vlan(9), 1232),
    ] {
        let a = expect_answer(&fx, &frame_of(&flow, &with_edns(a_query(), max_payload)));
        let opt = a.opt.as_ref().expect("an OPT record in the answer");
        assert_eq!(
            (opt.udp_size, opt.version(), opt.dnssec_ok()),
            (1232, 0, false)
        );
        assert!(opt.options.is_empty());
        let edns = a.msg.extensions().as_ref().expect("hickory sees EDNS");
        assert_eq!(
            (edns.max_payload(), edns.version(), edns.dnssec_ok()),
            (1232, 0, false)
        );
        assert_eq!(a.addrs, vec![FRA.addr(RecordType::A)]);
    }
}

/// RFC 3225 §3: "The DO bit of the query MUST be copied in the response."
#[test]
fn edns_do_bit_is_copied_from_the_query() {
    let fx = setup_fra();
    let mut m = with_edns(a_query(), 1232);
    m.extensions_mut().as_mut().unwrap().set_dnssec_ok(true);
    let a = expect_answer(&fx, &frame_of(&v4(), &m));
    assert!(
        a.opt.as_ref().unwrap().dnssec_ok(),
        "DO not copied from a query with DO=1 (RFC 3225 §3)"
    );
}

/// A query with ECS, and the server and scope its answer must carry.
struct EcsCase {
    flow: Flow,
    rtype: RecordType,
    /// The ECS subnet: address and source prefix length.
    ecs: (&'static str, u8),
    server: &'static Server,
    /// The length of the route that matched, 0 for a default route.
    scope: u8,
}

/// Runs every case and reports all that fail, by flow, type and subnet: the server's
/// address, and the query's subnet echoed with the scope, raw and as hickory reads it.
fn expect_ecs_table(fx: &Fixture, table: &[EcsCase]) {
    let failures: Vec<String> = table
        .iter()
        .filter_map(|c| {
            let (addr, source) = c.ecs;
            check_ecs_case(fx, c).err().map(|e| {
                format!(
                    "{} from {} with ECS {addr}/{source}: {e}",
                    c.rtype, c.flow.client
                )
            })
        })
        .collect();
    assert_no_failed_rows(&failures, table.len());
}

fn check_ecs_case(fx: &Fixture, c: &EcsCase) -> Result<(), String> {
    let (addr, source) = c.ecs;
    let m = with_ecs(query(ID, QNAME, c.rtype), ip(addr), source, 0);
    let a = try_answer(fx, &frame_of(&c.flow, &m))?;
    ensure!(
        a.addrs == vec![c.server.addr(c.rtype)],
        "addresses {:?}, expected {}'s",
        a.addrs,
        c.server.name
    );
    ensure!(
        a.ecs_scope() == Some(c.scope),
        "scope {:?}, expected the matched route's length {}",
        a.ecs_scope(),
        c.scope
    );
    ensure!(
        a.ecs == Some(ClientSubnet::new(ip(addr), source, c.scope)),
        "hickory reads the ECS option as {:?}",
        a.ecs
    );
    // The address is cut to the source prefix: a /0 carries no address bytes at all.
    let ecs_len = a
        .opt
        .as_ref()
        .and_then(|o| o.option(OPTION_ECS))
        .map(<[u8]>::len);
    let want_len = 4 + usize::from(source.div_ceil(8));
    ensure!(
        ecs_len == Some(want_len),
        "ECS option of {ecs_len:?} bytes, expected {want_len}"
    );
    Ok(())
}

#[test]
fn ecs_decides_by_the_subnet_not_the_packet_source() {
    let fx = setup(
        1,
        &[
            ("0.0.0.0/0", FRA.name),
            ("203.0.113.0/24", NYC.name),
            ("::/0", FRA.name),
        ],
    );
    // (client, ECS subnet) -> (server, scope). The default's answers are scoped to /24:
    // it holds 203.0.113.0/24, which answers otherwise, so its answer is true only for
    // networks of that length outside it (scope 0 would let a resolver serve FRA to
    // 203.0.113.0/24 from its cache).
    let cases = [
        (CLIENT_V4, ("203.0.113.0", 24), &NYC, 24),
        (CLIENT_V4, ("203.0.113.128", 25), &NYC, 24),
        (CLIENT_V4, ("203.0.113.7", 32), &NYC, 24),
        (CLIENT_V4, ("203.0.112.0", 23), &FRA, 24),
        (Ipv4Addr::new(203, 0, 113, 9), ("192.0.2.0", 24), &FRA, 24),
    ];
    let mut table = Vec::new();
    for (client, ecs, server, scope) in cases {
        for rtype in [RecordType::A, RecordType::AAAA] {
            table.push(EcsCase {
                flow: Flow::v4(client),
                rtype,
                ecs,
                server,
                scope,
            });
        }
    }
    expect_ecs_table(&fx, &table);
    // Without ECS the packet's source decides.
    let from_b = Flow::v4(Ipv4Addr::new(203, 0, 113, 9));
    let a = expect_answer(&fx, &frame_of(&from_b, &with_edns(a_query(), 1232)));
    assert_eq!(a.addrs, vec![NYC.addr(RecordType::A)]);
    assert_eq!(a.ecs_scope(), None);
}

#[test]
fn ecs_with_an_ipv6_subnet() {
    let fx = setup(
        1,
        &[
            ("0.0.0.0/0", FRA.name),
            ("::/0", FRA.name),
            ("2001:db8:1::/48", NYC.name),
        ],
    );
    let aaaa = |flow, ecs, server, scope| EcsCase {
        flow,
        rtype: RecordType::AAAA,
        ecs,
        server,
        scope,
    };
    expect_ecs_table(
        &fx,
        &[
            aaaa(v6(), ("2001:db8:1:ab00::", 56), &NYC, 48),
            aaaa(v4(), ("2001:db8:1::", 48), &NYC, 48),
            aaaa(v6().with_vlan(5), ("2001:db8:1:2:3:4:5:6", 128), &NYC, 48),
            aaaa(
                Flow::v6("2001:db8:1::5".parse().unwrap()),
                ("2001:db8:ff::", 48),
                &FRA,
                48,
            ),
        ],
    );
}

#[test]
fn ecs_with_a_zero_prefix_uses_the_default_route() {
    // The client's own prefix has a route; ECS /0 says "do not use my address".
    let fx = setup(
        1,
        &[
            ("0.0.0.0/0", FRA.name),
            ("192.0.2.0/24", NYC.name),
            ("::/0", FRA.name),
            ("2001:db8:2::/48", NYC.name),
        ],
    );
    let table = [
        (v4(), "0.0.0.0"),
        (v6(), "::"),
        (v4(), "::"),
        (v6(), "0.0.0.0"),
    ]
    .map(|(flow, addr)| EcsCase {
        flow,
        rtype: RecordType::A,
        ecs: (addr, 0),
        server: &FRA,
        // The default holds a nested route: its answers hold over networks of that length.
        scope: if addr.contains(':') { 48 } else { 24 },
    });
    expect_ecs_table(&fx, &table);
    // And without ECS the same client gets its own prefix's server.
    let a = expect_answer(&fx, &frame_of(&v4(), &a_query()));
    assert_eq!(a.addrs, vec![NYC.addr(RecordType::A)]);
}

/// The slot of `DIR_DEC16` (the IPv4 /16 front of the trie) for `a`'s /16.
fn front_word(fx: &mut Fixture, a: Ipv4Addr) -> u64 {
    let m = fx.maps();
    let svc = m.find_service(NAME).unwrap().expect("the service");
    m.front16_word(svc, u32::from(a) >> 16)
}

fn a_from(fx: &Fixture, client: Ipv4Addr) -> Vec<IpAddr> {
    expect_answer(fx, &frame_of(&Flow::v4(client), &a_query())).addrs
}

#[test]
fn the_16_front_answers_as_the_trie_and_is_cleared_before_a_route_lands_inside() {
    let mut fx = setup(1, &[("0.0.0.0/0", FRA.name), ("::/0", FRA.name)]);
    let (client, other) = (CLIENT_V4, Ipv4Addr::new(192, 1, 2, 3));
    let fra = vec![FRA.addr(RecordType::A)];
    let nyc = vec![NYC.addr(RecordType::A)];
    // The default route answers every /16 whole.
    assert_ne!(front_word(&mut fx, client), 0);
    assert_eq!(a_from(&fx, client), fra);

    // A route inside the client's /16: its slot is cleared and the trie answers there;
    // every other /16 keeps its slot.
    route_set(fx.maps(), NAME, "192.0.2.0/24", NYC.name).unwrap();
    assert_eq!(front_word(&mut fx, client), 0);
    assert_ne!(front_word(&mut fx, other), 0);
    assert_eq!(a_from(&fx, client), nyc);
    assert_eq!(a_from(&fx, other), fra);

    // A /16 route around the /24 leaves its /16 split (the trie answers the rest of it
    // with the /16 route); one elsewhere is its own /16's slot, with its own answer.
    route_set(fx.maps(), NAME, "192.0.0.0/16", NYC.name).unwrap();
    assert_eq!(front_word(&mut fx, client), 0);
    assert_eq!(a_from(&fx, Ipv4Addr::new(192, 0, 3, 1)), nyc);
    route_set(fx.maps(), NAME, "192.1.0.0/16", NYC.name).unwrap();
    assert_ne!(front_word(&mut fx, other), 0);
    assert_eq!(a_from(&fx, other), nyc);
    assert_eq!(a_from(&fx, Ipv4Addr::new(192, 2, 0, 1)), fra);

    // The nested route gone, the client's /16 is answered whole again, by its /16 route.
    ops::route_del(fx.maps(), NAME, "192.0.2.0/24".parse().unwrap()).unwrap();
    assert_ne!(front_word(&mut fx, client), 0);
    assert_eq!(a_from(&fx, client), nyc);

    // A compaction rewrites every entry, so it clears every slot; the next write of the
    // table sets them again.
    fx.maps().compact().unwrap();
    assert_eq!(front_word(&mut fx, client), 0);
    assert_eq!(a_from(&fx, client), nyc);
    route_set(fx.maps(), NAME, "10.0.0.0/8", NYC.name).unwrap();
    assert_ne!(front_word(&mut fx, client), 0);
    assert_eq!(a_from(&fx, client), nyc);
    assert_eq!(a_from(&fx, Ipv4Addr::new(10, 9, 8, 7)), nyc);

    // The program reads the slot, not the trie: with the default route taken out of the
    // trie behind the controller's back (slots left set), a /16 only it covers is still
    // answered, while an ECS source shorter than 16 bits, which the slots do not cover,
    // finds no route.
    let lone = Ipv4Addr::new(192, 2, 0, 1);
    assert_ne!(front_word(&mut fx, lone), 0);
    let path = fx.pin_dir().join(director_common::maps::MAP_DEC4);
    let map = aya::maps::Map::from_map_data(aya::maps::MapData::from_pin(&path).unwrap()).unwrap();
    let mut trie: aya::maps::LpmTrie<
        _,
        director_common::maps::DecisionKeyV4,
        director_common::maps::DecisionRef,
    > = map.try_into().unwrap();
    let svc = fx.maps().find_service(NAME).unwrap().unwrap();
    let default = aya::maps::lpm_trie::Key::new(
        director_common::maps::SERVICE_BITS,
        director_common::maps::DecisionKeyV4 {
            service: svc.to_be_bytes(),
            addr: [0; 4],
        },
    );
    trie.remove(&default).unwrap();
    assert_eq!(a_from(&fx, lone), fra);
    let wide = with_ecs(query(ID, QNAME, RecordType::A), ip("192.2.0.0"), 8, 0);
    expect_pass(&fx, &frame_of(&Flow::v4(lone), &wide), Reason::NoDecision);
}

#[test]
fn a_table_of_its_own_sets_no_slot_after_another_writer_changed_the_trie() {
    let mut fx = setup(1, &[("0.0.0.0/0", FRA.name), ("::/0", FRA.name)]);
    let svc = fx.maps().find_service(NAME).unwrap().unwrap();
    // What `run` keeps as its table: the default route alone. The slots come from the
    // kernel's table once (a full sync).
    let own: Vec<IpNet> = vec!["0.0.0.0/0".parse().unwrap(), "::/0".parse().unwrap()];
    let covers = front16::covers(&own);
    fx.maps()
        .set_front16(svc, &covers, TableSource::Kernel)
        .unwrap();
    assert_ne!(front_word(&mut fx, CLIENT_V4), 0);

    // Another process (a `route` command) puts a route inside the client's /16.
    let mut cli = director_ctl::kernel::Maps::open(fx.pin_dir()).unwrap();
    route_set(&mut cli, NAME, "192.0.2.0/24", NYC.name).unwrap();
    drop(cli);
    assert_eq!(front_word(&mut fx, CLIENT_V4), 0);

    // Nor may a process that never read the kernel's table, or saw its own writes.
    let mut fresh = director_ctl::kernel::Maps::open(fx.pin_dir()).unwrap();
    fresh.set_front16(svc, &covers, TableSource::Own).unwrap();
    drop(fresh);
    assert_eq!(front_word(&mut fx, CLIENT_V4), 0);

    // `run` publishing from its own table, which lacks that route, must not call the /16
    // whole again: the route stays answered.
    fx.maps()
        .set_front16(svc, &covers, TableSource::Own)
        .unwrap();
    assert_eq!(front_word(&mut fx, CLIENT_V4), 0);
    assert_eq!(a_from(&fx, CLIENT_V4), vec![NYC.addr(RecordType::A)]);
    // A slot its table splits is still cleared meanwhile.
    let mut split = own.clone();
    split.push("192.1.2.0/24".parse().unwrap());
    let other = Ipv4Addr::new(192, 1, 9, 9);
    assert_ne!(front_word(&mut fx, other), 0);
    fx.maps()
        .set_front16(svc, &front16::covers(&split), TableSource::Own)
        .unwrap();
    assert_eq!(front_word(&mut fx, other), 0);
}

// ---------------------------------------------------------------------------------------
// How many answers, and from which servers.

fn both() -> [(&'static str, &'static str); 2] {
    [("0.0.0.0/0", "fra-1,nyc-1"), ("::/0", "fra-1,nyc-1")]
}

fn addr_set(addrs: &[IpAddr]) -> BTreeSet<IpAddr> {
    addrs.iter().copied().collect()
}

#[test]
fn two_answers_from_two_servers() {
    let fx = setup(2, &both());
    for (flow, rtype) in with_both_types(all_flows()) {
        let a = expect_answer(&fx, &frame_of(&flow, &query(ID, QNAME, rtype)));
        assert_eq!(a.addrs.len(), 2, "{rtype} over {flow:?}: {:?}", a.addrs);
        assert_eq!(
            addr_set(&a.addrs),
            addr_set(&[FRA.addr(rtype), NYC.addr(rtype)])
        );
        assert_eq!(a.ttls, vec![TTL, TTL]);
    }
}

#[test]
fn a_server_set_down_is_never_answered() {
    for answers in [1, 2] {
        let mut fx = setup(answers, &both());
        ops::server_set(fx.maps(), FRA.name, false).unwrap();
        for i in 0..64 {
            let rtype = if i % 2 == 0 {
                RecordType::A
            } else {
                RecordType::AAAA
            };
            let a = expect_answer(&fx, &frame_of(&v4(), &query(i, QNAME, rtype)));
            assert_eq!(
                a.addrs,
                vec![NYC.addr(rtype)],
                "with {answers} answers and fra-1 down"
            );
        }
        // Back up, it is answered again: with random selection both show up in 64 tries.
        ops::server_set(fx.maps(), FRA.name, true).unwrap();
        let mut seen = BTreeSet::new();
        for i in 0..64 {
            seen.extend(
                expect_answer(&fx, &frame_of(&v4(), &query(i, QNAME, RecordType::A))).addrs,
            );
        }
        assert_eq!(
            seen,
            addr_set(&[FRA.addr(RecordType::A), NYC.addr(RecordType::A)])
        );
    }
}

/// A server out by health checks for one service is skipped for that service only, from
/// the next query on; drained, it is skipped for every service.
#[test]
fn health_out_and_drained_servers_are_skipped_per_service() {
    const OTHER: &str = "video.example.com";
    let mut fx = setup(1, &both());
    let m = fx.maps();
    ops::service_add(m, OTHER, TTL, 1, Mode::Random).unwrap();
    for (prefix, servers) in both() {
        route_set(m, OTHER, prefix, servers).unwrap();
    }
    let www = m.find_service(NAME).unwrap().unwrap();
    let fra = m.servers().unwrap();
    let fra = fra.iter().find(|s| s.name == FRA.name).unwrap().id;
    let mut mask = HealthMask::all_in();
    mask.set(fra, true, Some(false));
    m.set_health(www, &mask).unwrap();
    // Every address answered for `name` over 64 queries of each type (random selection:
    // with two usable servers both show up).
    let answered = |fx: &Fixture, name: &str| -> BTreeSet<IpAddr> {
        let mut seen = BTreeSet::new();
        for i in 0..64 {
            for rtype in [RecordType::A, RecordType::AAAA] {
                let q = frame_of(&v4(), &query(i, &format!("{name}."), rtype));
                seen.extend(expect_answer(fx, &q).addrs);
            }
        }
        seen
    };
    let nyc = addr_set(&[NYC.addr(RecordType::A), NYC.addr(RecordType::AAAA)]);
    let all = addr_set(&[
        FRA.addr(RecordType::A),
        FRA.addr(RecordType::AAAA),
        NYC.addr(RecordType::A),
        NYC.addr(RecordType::AAAA),
    ]);
    assert_eq!(answered(&fx, NAME), nyc, "out of www by health");
    assert_eq!(answered(&fx, OTHER), all, "still in for the other service");
    ops::server_drain(fx.maps(), FRA.name, true).unwrap();
    assert_eq!(answered(&fx, OTHER), nyc, "drained: out of every service");
    ops::server_drain(fx.maps(), FRA.name, false).unwrap();
    fx.maps().set_health(www, &HealthMask::all_in()).unwrap();
    assert_eq!(answered(&fx, NAME), all, "back in by health");
}

/// A server's load, recorded by `run` in its server record, is kept by `server add` (new
/// addresses) and never changes what is answered.
#[test]
fn a_recorded_load_is_kept_and_answers_do_not_change() {
    let mut fx = setup_fra();
    let m = fx.maps();
    let id = m.servers().unwrap()[0].id;
    m.set_server_load(id, 0.5).unwrap();
    ops::server_add(m, FRA.name, Some(FRA.v4), None).unwrap();
    let s = m.servers().unwrap();
    let fra = s.iter().find(|s| s.name == FRA.name).unwrap();
    assert_eq!(fra.load, Some(0.5), "{s:?}");
    let a = expect_answer(&fx, &frame_of(&v4(), &a_query()));
    assert_eq!(a.addrs, vec![FRA.addr(RecordType::A)]);
}

/// `a|b`: b is a fallback, answered only when a is down or for a second answer.
#[test]
fn fallback_servers_answer_only_when_the_primaries_cannot() {
    let routes = [("0.0.0.0/0", "fra-1|nyc-1"), ("::/0", "fra-1|nyc-1")];
    let mut one = setup(1, &routes);
    for i in 0..32 {
        let a = expect_answer(&one, &frame_of(&v4(), &query(i, QNAME, RecordType::A)));
        assert_eq!(
            a.addrs,
            vec![FRA.addr(RecordType::A)],
            "the fallback answered while the primary was up"
        );
    }
    ops::server_set(one.maps(), FRA.name, false).unwrap();
    let a = expect_answer(&one, &frame_of(&v6(), &query(ID, QNAME, RecordType::AAAA)));
    assert_eq!(a.addrs, vec![NYC.addr(RecordType::AAAA)]);

    let two = setup(2, &routes);
    let a = expect_answer(&two, &frame_of(&v4(), &a_query()));
    assert_eq!(
        a.addrs,
        vec![FRA.addr(RecordType::A), NYC.addr(RecordType::A)],
        "primary first, then the fallback"
    );
}

/// A sole primary is answered without the weighted pick only while it can answer: out by
/// health, or without an address of the asked family, the fallback after it answers.
#[test]
fn a_sole_primary_that_cannot_answer_leaves_it_to_the_fallback() {
    let routes = [("0.0.0.0/0", "fra-1|nyc-1"), ("::/0", "fra-1|nyc-1")];
    let mut fx = setup(1, &routes);
    let www = fx.maps().find_service(NAME).unwrap().unwrap();
    let fra = fx.maps().servers().unwrap();
    let fra = fra.iter().find(|s| s.name == FRA.name).unwrap().id;
    let mut mask = HealthMask::all_in();
    mask.set(fra, true, Some(false));
    fx.maps().set_health(www, &mask).unwrap();
    for rtype in [RecordType::A, RecordType::AAAA] {
        let a = expect_answer(&fx, &frame_of(&v4(), &query(ID, QNAME, rtype)));
        assert_eq!(a.addrs, vec![NYC.addr(rtype)], "fra-1 out by health");
    }
    fx.maps().set_health(www, &HealthMask::all_in()).unwrap();
    // fra-1 with an IPv4 address only: AAAA goes to nyc-1, A stays with fra-1.
    ops::server_add(fx.maps(), FRA.name, Some(FRA.v4), None).unwrap();
    let a = expect_answer(&fx, &frame_of(&v4(), &query(ID, QNAME, RecordType::AAAA)));
    assert_eq!(
        a.addrs,
        vec![NYC.addr(RecordType::AAAA)],
        "fra-1 has no IPv6"
    );
    let a = expect_answer(&fx, &frame_of(&v4(), &query(ID, QNAME, RecordType::A)));
    assert_eq!(a.addrs, vec![FRA.addr(RecordType::A)]);
}

/// `fra-1=3,nyc-1`: three answers in four go to fra-1 (random selection, so loose bounds:
/// 800 draws put fra-1 at 600 +- 12; 480..720 is ten standard deviations either way).
#[test]
fn weights_share_answers() {
    let fx = setup(1, &[("0.0.0.0/0", "fra-1=3,nyc-1")]);
    let fra = (0..800)
        .filter(|&i| {
            expect_answer(&fx, &frame_of(&v4(), &query(i, QNAME, RecordType::A))).addrs
                == vec![FRA.addr(RecordType::A)]
        })
        .count();
    assert!(
        (480..=720).contains(&fra),
        "fra-1 answered {fra} of 800 with weight 3:1"
    );
}

/// `--select client` keeps a client (its address, or its ECS subnet) on one server, and
/// still spreads different clients over both.
#[test]
fn client_selection_keeps_a_client_on_one_server() {
    let mut fx = setup(1, &both());
    ops::service_add(fx.maps(), NAME, TTL, 1, Mode::Client).unwrap();
    let mut chosen = BTreeSet::new();
    for subnet in 0..64u8 {
        let ecs = IpAddr::V4(Ipv4Addr::new(203, 0, subnet, 0));
        let mut seen = BTreeSet::new();
        for i in 0..8 {
            let m = with_ecs(query(i, QNAME, RecordType::A), ecs, 24, 0);
            seen.extend(expect_answer(&fx, &frame_of(&v4(), &m)).addrs);
        }
        assert_eq!(
            seen.len(),
            1,
            "client {ecs}/24 moved between servers: {seen:?}"
        );
        chosen.extend(seen);
    }
    assert_eq!(
        chosen,
        addr_set(&[FRA.addr(RecordType::A), NYC.addr(RecordType::A)]),
        "64 clients, one server"
    );
}

#[test]
fn all_servers_down_passes_unchanged() {
    let mut fx = setup(2, &both());
    ops::server_set(fx.maps(), FRA.name, false).unwrap();
    ops::server_set(fx.maps(), NYC.name, false).unwrap();
    let mut table = Vec::new();
    for flow in all_flows() {
        for (what, m) in [
            ("no ECS", a_query()),
            ("ECS", with_ecs(a_query(), ip("203.0.113.0"), 24, 0)),
        ] {
            table.push(pass_case(
                format!("{what} over {}", flow_name(&flow)),
                frame_of(&flow, &m),
                Reason::NoServer,
            ));
        }
    }
    expect_pass_table(&fx, &table);
}

// ---------------------------------------------------------------------------------------
// When no server can be answered: the alternate (a CNAME), else the origin.

const ALTERNATE: &str = "www.cdn-b.example.net";
const DEGRADED_TTL: u32 = 7;
const ORIGIN_V4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 99);
const ORIGIN_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x99, 0, 0, 0, 0, 0x99);

/// NAME with both servers set down and the given fallback.
fn setup_fallback(alternate: Option<&str>, origin: &[IpAddr]) -> Fixture {
    let mut fx = setup(1, &both());
    let wire = alternate.map(|a| director_common::name::encode(a).unwrap());
    let f = Fallback::build(DEGRADED_TTL, wire.as_deref(), origin).expect("a name that fits");
    let m = fx.maps();
    let id = m.find_service(NAME).unwrap().unwrap();
    m.set_fallback(id, &f).unwrap();
    ops::server_set(m, FRA.name, false).unwrap();
    ops::server_set(m, NYC.name, false).unwrap();
    fx
}

/// Checks a CNAME answer field by field: turned around with valid checksums, the header
/// and question as for any answer, one record owned by a pointer to the question, type
/// CNAME, class IN, the degraded TTL, RDATA the alternate's wire name, then the OPT; and
/// hickory reads the same.
fn check_cname(query: &[u8], answer: &[u8], target: &str) -> Result<(), String> {
    let q = parse_udp(query).map_err(|e| format!("query frame: {e}"))?;
    let a = parse_udp(answer).map_err(|e| format!("answer frame: {e}"))?;
    check_turned_around(&q, &a, answer.len())?;
    verify_checksums(answer)?;
    let (qd, ad) = (&q.payload, &a.payload);
    let q_end = question_end(qd).ok_or("the query has no plain question")?;
    ensure!(ad[0..2] == qd[0..2], "ID changed");
    let want = QR | AA | (be16(qd, 2) & (RD | CD));
    ensure!(
        be16(ad, 2) == want,
        "flags {:#06x}, want {want:#06x}",
        be16(ad, 2)
    );
    ensure!(
        (be16(ad, 4), be16(ad, 6), be16(ad, 8), be16(ad, 10)) == (1, 1, 0, be16(qd, 10)),
        "counts {:?}",
        (be16(ad, 4), be16(ad, 6), be16(ad, 8), be16(ad, 10))
    );
    ensure!(ad[12..q_end] == qd[12..q_end], "question not echoed");
    let wire = director_common::name::encode(target).unwrap();
    let r = &ad[q_end..];
    ensure!(r.len() >= 12 + wire.len(), "record cut short");
    ensure!(
        r[0..2] == [0xc0, 0x0c],
        "owner {} is not the question",
        hex(&r[0..2])
    );
    ensure!(
        (be16(r, 2), be16(r, 4)) == (5, 1),
        "type/class {}/{}",
        be16(r, 2),
        be16(r, 4)
    );
    let ttl = u32::from_be_bytes(r[6..10].try_into().unwrap());
    ensure!(ttl == DEGRADED_TTL, "TTL {ttl}");
    ensure!(
        be16(r, 10) as usize == wire.len(),
        "RDLENGTH {}",
        be16(r, 10)
    );
    ensure!(
        r[12..12 + wire.len()] == wire[..],
        "RDATA {}",
        hex(&r[12..12 + wire.len()])
    );
    let mut at = q_end + 12 + wire.len();
    if be16(qd, 10) == 1 {
        let qo = read_opt(qd, q_end)?;
        let o = read_opt(ad, at)?;
        check_opt_wire(&qo, &o)?;
        at = o.end;
    }
    ensure!(at == ad.len(), "{} bytes after the records", ad.len() - at);
    let m = decode_all(ad)?;
    ensure!(
        m.answers().len() == 1,
        "hickory sees {} answers",
        m.answers().len()
    );
    let rec = &m.answers()[0];
    ensure!(rec.name() == m.queries()[0].name(), "owner {}", rec.name());
    match rec.data() {
        Some(RData::CNAME(c)) => ensure!(
            c.0 == Name::from_ascii(format!("{target}.")).unwrap(),
            "hickory CNAME {}",
            c.0
        ),
        other => return Err(format!("answer data {other:?}")),
    }
    Ok(())
}

#[test]
fn no_usable_server_answers_a_cname_to_the_alternate() {
    let fx = setup_fallback(Some(ALTERNATE), &[IpAddr::V4(ORIGIN_V4)]);
    // Every flow, both types, with and without EDNS and ECS, and names of both lengths'
    // parities (the record lands at either parity; so does the OPT after it).
    let mut rows = 0;
    for (flow, rtype) in with_both_types(all_flows()) {
        for qname in [QNAME, "WWW.example.COM."] {
            for (what, m) in [
                ("plain", query(ID, qname, rtype)),
                ("EDNS", with_edns(query(ID, qname, rtype), 1232)),
                (
                    "ECS",
                    with_ecs(query(ID, qname, rtype), ip("203.0.113.0"), 24, 0),
                ),
            ] {
                let frame = frame_of(&flow, &m);
                let before = fx.counters();
                let (verdict, out) = fx.run(&frame);
                let moved = moved(&before, &fx.counters());
                assert_eq!(verdict, XDP_TX, "{what} {rtype} over {flow:?}: {moved:?}");
                assert_eq!(
                    moved,
                    vec![("answered", 1), ("answered_alternate", 1)],
                    "counted as answered and as a fallback"
                );
                check_cname(&frame, &out, ALTERNATE).unwrap_or_else(|e| {
                    panic!(
                        "{what} {rtype} over {flow:?}: {e}\nquery  {}\nanswer {}",
                        hex(&frame),
                        hex(&out)
                    )
                });
                rows += 1;
            }
        }
    }
    assert_eq!(rows, 48);
    // Alternates of every length parity and up to the longest name.
    for target in [
        "a.io",
        "ab.io",
        &format!("{}.example", "x".repeat(60)),
        &long_name(),
    ] {
        let fx = setup_fallback(Some(target), &[]);
        let frame = frame_of(&v4(), &with_edns(a_query(), 1232));
        let (verdict, out) = fx.run(&frame);
        assert_eq!(verdict, XDP_TX, "alternate {target}");
        check_cname(&frame, &out, target).unwrap_or_else(|e| panic!("{target}: {e}"));
    }
}

/// A name of 253 characters (255 bytes on the wire).
fn long_name() -> String {
    let label = "y".repeat(63);
    format!("{label}.{label}.{label}.{}", "z".repeat(61))
}

#[test]
fn no_usable_server_and_no_alternate_answers_the_origin() {
    let fx = setup_fallback(None, &[IpAddr::V4(ORIGIN_V4), IpAddr::V6(ORIGIN_V6)]);
    for (flow, rtype) in with_both_types(all_flows()) {
        let frame = frame_of(&flow, &query(ID, QNAME, rtype));
        let before = fx.counters();
        let a = expect_answer_counting(&fx, &frame, &before, Reason::FallbackOrigin);
        let want = if rtype == RecordType::AAAA {
            IpAddr::V6(ORIGIN_V6)
        } else {
            IpAddr::V4(ORIGIN_V4)
        };
        assert_eq!(a.addrs, vec![want], "{rtype} over {flow:?}");
        assert_eq!(a.ttls, vec![DEGRADED_TTL]);
    }
    // An origin of one family only: the other is passed, as with no fallback.
    let fx = setup_fallback(None, &[IpAddr::V4(ORIGIN_V4)]);
    expect_pass(
        &fx,
        &frame_of(&v4(), &query(ID, QNAME, RecordType::AAAA)),
        Reason::NoServer,
    );
    // A server back up is answered again, not the fallback.
    let mut fx = setup_fallback(Some(ALTERNATE), &[IpAddr::V4(ORIGIN_V4)]);
    ops::server_set(fx.maps(), NYC.name, true).unwrap();
    let a = expect_answer(&fx, &frame_of(&v4(), &a_query()));
    assert_eq!(a.addrs, vec![NYC.addr(RecordType::A)]);
}

/// Like [`expect_answer`] for a fallback answer, counted under `answered` and `fallback`.
fn expect_answer_counting(
    fx: &Fixture,
    frame: &[u8],
    before: &BTreeMap<&'static str, u64>,
    fallback: Reason,
) -> Answer {
    let (verdict, out) = fx.run(frame);
    let moved = moved(before, &fx.counters());
    assert_eq!(verdict, XDP_TX, "{moved:?}");
    assert_eq!(moved, vec![("answered", 1), (fallback.name(), 1)]);
    check_answer(frame, &out).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn aaaa_without_a_server_with_ipv6_passes() {
    let mut fx = Fixture::new().unwrap();
    let m = fx.maps();
    ops::server_add(m, FRA.name, Some(FRA.v4), None).unwrap();
    ops::service_add(m, NAME, TTL, 1, Mode::Random).unwrap();
    route_set(m, NAME, "0.0.0.0/0", FRA.name).unwrap();
    expect_pass(
        &fx,
        &frame_of(&v4(), &query(ID, QNAME, RecordType::AAAA)),
        Reason::NoServer,
    );
    expect_answer(&fx, &frame_of(&v4(), &query(ID, QNAME, RecordType::A)));
}

/// The largest answer director can give: a 255-byte name, 8 AAAA records, and ECS for
/// a /128. Without EDNS it fits in 512 bytes; with EDNS advertising 512 and the ECS
/// option it does not, and is left to the host.
#[test]
fn answers_that_do_not_fit_the_clients_size_pass() {
    let long = [
        "a".repeat(63),
        "b".repeat(63),
        "c".repeat(63),
        "d".repeat(61),
    ]
    .join(".");
    let mut fx = Fixture::new().unwrap();
    let m = fx.maps();
    let mut list = Vec::new();
    for i in 1..=8u16 {
        let name = format!("s{i}");
        let v6 = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, i);
        ops::server_add(m, &name, None, Some(v6)).unwrap();
        list.push(name);
    }
    ops::service_add(m, &long, TTL, 8, Mode::Random).unwrap();
    route_set(m, &long, "::/0", &list.join(",")).unwrap();
    let q = query(ID, &format!("{long}."), RecordType::AAAA);
    assert_eq!(question_end(&wire(&q)), Some(12 + 255 + 4));

    let a = expect_answer(&fx, &frame_of(&v6(), &q));
    assert_eq!(a.addrs.len(), 8);
    assert_eq!(
        parse_udp(&frame_of(&v6(), &q)).unwrap().payload.len() + 8 * 28,
        495
    );

    let mut big = with_ecs(q.clone(), ip("2001:db8:2::10"), 128, 0);
    big.extensions_mut().as_mut().unwrap().set_max_payload(512);
    expect_pass(&fx, &frame_of(&v6(), &big), Reason::TooBig);
    // The same with room to spare is answered.
    big.extensions_mut().as_mut().unwrap().set_max_payload(1232);
    assert_eq!(expect_answer(&fx, &frame_of(&v6(), &big)).addrs.len(), 8);
}

// ---------------------------------------------------------------------------------------
// Passed to the host, unchanged, under the right counter.
//
// Each table is every frame one part of the parser must give up on, with the counter it
// must count it under. One test per table runs every row and reports all rows that fail,
// by name, so one regression shows its whole extent at once.

/// One frame the program must pass to the host untouched, counted under `reason` alone.
struct PassCase {
    /// What the frame is; unique within its table, so a failure names one row.
    name: String,
    frame: Vec<u8>,
    reason: Reason,
}

fn pass_case(name: impl Into<String>, frame: Vec<u8>, reason: Reason) -> PassCase {
    PassCase {
        name: name.into(),
        frame,
        reason,
    }
}

/// How a flow shows in a case name: family, VLAN tag, and the port if it is not 53.
fn flow_name(flow: &Flow) -> String {
    let mut name = String::from(if flow.is_v6() { "IPv6" } else { "IPv4" });
    if let Some(id) = flow.vlan {
        name += &format!(" VLAN {id}");
    }
    if flow.server.port() != DNS_PORT {
        name += &format!(" to port {}", flow.server.port());
    }
    name
}

/// `a_query()` with one change made to it.
fn a_query_with(change: impl FnOnce(&mut Message)) -> Message {
    let mut m = a_query();
    change(&mut m);
    m
}

/// Runs `table` and returns one line per row that was not passed untouched under its
/// reason alone, naming the row.
fn pass_table_failures(fx: &Fixture, table: &[PassCase]) -> Vec<String> {
    let names: BTreeSet<&str> = table.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names.len(), table.len(), "two rows share a name");
    table
        .iter()
        .filter_map(|c| {
            check_pass(fx, &c.frame, c.reason).err().map(|e| {
                format!(
                    "{} ({}): {e}\n  frame {}",
                    c.name,
                    c.reason.name(),
                    hex(&c.frame)
                )
            })
        })
        .collect()
}

/// Fails naming every failed row of a table at once.
fn assert_no_failed_rows(failures: &[String], rows: usize) {
    assert!(
        failures.is_empty(),
        "{} of {rows} rows failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn expect_pass_table(fx: &Fixture, table: &[PassCase]) {
    let failures = pass_table_failures(fx, table);
    assert_no_failed_rows(&failures, table.len());
}

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

// ---------------------------------------------------------------------------------------
// Frames a host would never answer.

/// A well-formed query for NAME in `flow`, then `edit` applied to the frame's bytes.
fn edited(flow: &Flow, edit: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut f = frame_of(flow, &a_query());
    edit(&mut f);
    f
}

fn to(server: &str) -> Flow {
    let server: IpAddr = ip(server);
    let mut f = if server.is_ipv6() { v6() } else { v4() };
    f.server = (server, DNS_PORT).into();
    f
}

fn from(client: &str) -> Flow {
    let client: IpAddr = ip(client);
    let mut f = if client.is_ipv6() { v6() } else { v4() };
    f.client = (client, f.client.port()).into();
    f
}

fn from_port(port: u16) -> Flow {
    let mut f = v4();
    f.client.set_port(port);
    f
}

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

// ---------------------------------------------------------------------------------------
// Mutation fuzz.

/// xorshift64*: deterministic, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn byte(&mut self) -> u8 {
        self.next() as u8
    }
}

/// The fuzzed services: names of odd (17) and even (16) wire length, so the answer's
/// checksum is exercised at both byte parities.
const FUZZ_NAMES: [&str; 2] = [NAME, EVEN_NAME];
const EVEN_NAME: &str = "ab.example.com";

/// Byte values that mean something somewhere in these frames.
const INTERESTING: [u8; 12] = [
    0x00, 0x01, 0x08, 0x11, 0x1c, 0x20, 0x29, 0x3f, 0x40, 0x80, 0xc0, 0xff,
];

/// One to three random edits, never making `b` shorter than `min_len`.
fn mutate_bytes(rng: &mut Rng, b: &mut Vec<u8>, min_len: usize) {
    for _ in 0..1 + rng.below(3) {
        if b.is_empty() {
            b.push(rng.byte());
            continue;
        }
        let at = rng.below(b.len());
        match rng.below(8) {
            0 => b[at] ^= 1 << rng.below(8),
            1 => b[at] = rng.byte(),
            2 => b[at] = INTERESTING[rng.below(INTERESTING.len())],
            // Letter case: the edit most likely to leave a query answerable.
            3 => b[at] ^= 0x20,
            4 if b.len() > min_len => b.truncate(min_len + rng.below(b.len() - min_len)),
            5 => (0..1 + rng.below(8)).for_each(|_| b.push(rng.byte())),
            6 => b.insert(at, rng.byte()),
            7 if b.len() > min_len => {
                b.remove(at);
            }
            _ => {}
        }
    }
}

/// Either the frame's own bytes (headers and lengths included), or only the DNS message
/// with the frame rebuilt around it, so that lengths agree and edits reach the DNS parser.
fn mutate(rng: &mut Rng, flow: &Flow, dns: &[u8]) -> Vec<u8> {
    if rng.below(2) == 0 {
        let mut f = udp_frame(flow, dns);
        mutate_bytes(rng, &mut f, ETH_LEN);
        f
    } else {
        let mut d = dns.to_vec();
        mutate_bytes(rng, &mut d, 0);
        udp_frame(flow, &d)
    }
}

/// The model's view of a frame: UDP to port 53 in a frame shape director parses, and a
/// message that director_common::query::parse accepts for the owned name.
fn model_query(frame: &[u8]) -> Result<(UdpFrame, director_common::query::ParsedQuery), String> {
    let f = parse_udp(frame)?;
    ensure!(f.dst_port == DNS_PORT, "UDP to port {}", f.dst_port);
    let q = director_common::query::parse(&f.payload)
        .map_err(|r| format!("query::parse: {}", r.name()))?;
    let name = &q.name.lower[..q.name.len];
    ensure!(
        FUZZ_NAMES
            .iter()
            .any(|n| director_common::name::encode(n).unwrap() == name),
        "not an owned name"
    );
    Ok((f, q))
}

/// hickory's view of the same input: a standard query with one A/AAAA IN question.
fn hickory_query(dns: &[u8]) -> Result<Message, String> {
    let m = Message::from_vec(dns).map_err(|e| format!("hickory cannot read the query: {e}"))?;
    ensure!(
        m.message_type() == MessageType::Query && m.op_code() == OpCode::Query,
        "not a standard query"
    );
    ensure!(m.queries().len() == 1, "{} questions", m.queries().len());
    let q = &m.queries()[0];
    ensure!(
        matches!(q.query_type(), RecordType::A | RecordType::AAAA),
        "type {}",
        q.query_type()
    );
    ensure!(q.query_class() == DNSClass::IN, "class {}", q.query_class());
    let name = q.name().to_lowercase().to_ascii();
    ensure!(
        FUZZ_NAMES.iter().any(|n| format!("{n}.") == name),
        "name {}",
        q.name()
    );
    Ok(m)
}

/// Everything an XDP_TX must satisfy for this input.
fn check_fuzz_answer(input: &[u8], output: &[u8]) -> Result<(), String> {
    let (f, _) = model_query(input)?;
    let qm = hickory_query(&f.payload)?;
    let a = check_answer(input, output)?;
    let rtype = qm.queries()[0].query_type();
    let allowed = addr_set(&[FRA.addr(rtype), NYC.addr(rtype)]);
    ensure!(
        !a.addrs.is_empty() && addr_set(&a.addrs).is_subset(&allowed),
        "addresses {:?}",
        a.addrs
    );
    ensure!(
        a.addrs.len() == addr_set(&a.addrs).len(),
        "an address repeated: {:?}",
        a.addrs
    );
    ensure!(a.ttls.iter().all(|t| *t == TTL), "TTLs {:?}", a.ttls);
    Ok(())
}

/// Whether the model expects an answer: a query for the owned name whose answer fits.
/// Every client has a decision and both servers are up with both families, so nothing
/// else can stop it.
fn model_answers(frame: &[u8]) -> bool {
    let Ok((_, q)) = model_query(frame) else {
        return false;
    };
    let records = 2 * if q.v6 { 28 } else { 16 };
    let opt = match (q.edns, q.ecs) {
        (None, _) => 0,
        (Some(_), None) => 11,
        (Some(_), Some(e)) => 11 + 8 + e.addr_len(),
    };
    q.question_end + records + opt <= q.edns.unwrap_or(512) as usize
}

/// The model's view of who may be answered (written from the RFCs with std's address
/// predicates, not from director-common's `peers`): `None` when the frame's addresses,
/// port and checksum allow an answer, else the reason the kernel gives, checked in the
/// kernel's order. Only for frames to UDP port 53.
fn model_peer(frame: &[u8]) -> Option<Reason> {
    let f = parse_udp(frame).ok()?;
    if f.dst_port != DNS_PORT {
        return None;
    }
    let group_mac = |m: &[u8; 6]| m[0] & 1 == 1;
    match (f.src, f.dst) {
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            if f.udp_checksum == 0 {
                return Some(Reason::BadChecksum);
            }
            if src.is_unspecified()
                || src.is_loopback()
                || src.is_multicast()
                || src.to_ipv4_mapped().is_some()
            {
                return Some(Reason::BadSource);
            }
            if group_mac(&f.src_mac) {
                return Some(Reason::BadSource);
            }
            if [0, 7, 19].contains(&f.src_port) {
                return Some(Reason::ReflectingPort);
            }
            if group_mac(&f.dst_mac) || dst.is_multicast() {
                return Some(Reason::GroupDestination);
            }
            (dst != SERVER_V6).then_some(Reason::NotForUs)
        }
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            let sum: u32 = f
                .ip_header
                .chunks(2)
                .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
                .sum();
            if (sum & 0xffff) + (sum >> 16) != 0xffff {
                return Some(Reason::BadChecksum);
            }
            let o = src.octets()[0];
            if o == 0 || src.is_loopback() || src.is_multicast() || o >= 240 {
                return Some(Reason::BadSource);
            }
            if dst.is_multicast() || dst.is_broadcast() || dst.octets()[0] >= 240 {
                return Some(Reason::GroupDestination);
            }
            if group_mac(&f.src_mac) {
                return Some(Reason::BadSource);
            }
            if [0, 7, 19].contains(&f.src_port) {
                return Some(Reason::ReflectingPort);
            }
            if group_mac(&f.dst_mac) {
                return Some(Reason::GroupDestination);
            }
            (dst != SERVER_V4).then_some(Reason::NotForUs)
        }
        _ => None,
    }
}

#[test]
fn mutation_fuzz() {
    let routes = [
        ("0.0.0.0/0", "fra-1,nyc-1"),
        ("::/0", "fra-1,nyc-1"),
        ("203.0.113.0/24", NYC.name),
        ("2001:db8:1::/48", FRA.name),
    ];
    let mut fx = setup(2, &routes);
    ops::service_add(fx.maps(), EVEN_NAME, TTL, 2, Mode::Random).unwrap();
    for (prefix, servers) in routes {
        route_set(fx.maps(), EVEN_NAME, prefix, servers).unwrap();
    }
    let mut cookie = with_ecs(query(7, QNAME, RecordType::A), ip("203.0.113.0"), 24, 0);
    cookie
        .extensions_mut()
        .as_mut()
        .unwrap()
        .options_mut()
        .insert(EdnsOption::Unknown(10, vec![0x5a; 8]));
    let seeds: Vec<(Flow, Message)> = vec![
        (v4(), query(1, QNAME, RecordType::A)),
        (
            v6().with_vlan(42),
            with_edns(query(2, QNAME, RecordType::AAAA), 4096),
        ),
        (
            v4().with_vlan(43),
            with_ecs(query(3, QNAME, RecordType::A), ip("203.0.113.0"), 24, 0),
        ),
        (
            v6(),
            with_ecs(query(4, QNAME, RecordType::AAAA), ip("2001:db8:1::"), 48, 0),
        ),
        (
            v4(),
            with_ecs(query(5, QNAME, RecordType::AAAA), ip("0.0.0.0"), 0, 0),
        ),
        (v6(), cookie),
        (
            v4(),
            with_edns(query(8, "Ab.ExAmPlE.cOm.", RecordType::A), 1232),
        ),
        (
            v6().with_vlan(44),
            with_ecs(
                query(9, "aB.example.COM.", RecordType::AAAA),
                ip("2001:db8:1:2::"),
                63,
                0,
            ),
        ),
    ];
    const CASES_PER_SEED: usize = 20_000;
    let mut rng = Rng(0x0d15_ec7e_d00d_f00d);
    let (mut tx, mut pass, mut drop) = (0usize, 0usize, 0usize);
    let mut failures = Vec::new();
    for (flow, m) in &seeds {
        let dns = wire(m);
        // The seeds themselves are answered: otherwise the fuzz proves little.
        let seed = udp_frame(flow, &dns);
        let (verdict, out) = fx.run(&seed);
        assert_eq!(verdict, XDP_TX, "seed id {} not answered", m.id());
        check_fuzz_answer(&seed, &out).unwrap_or_else(|e| panic!("seed id {}: {e}", m.id()));
        for case in 0..CASES_PER_SEED {
            let input = mutate(&mut rng, flow, &dns);
            let (verdict, out) = fx.run(&input);
            let problem = match verdict {
                XDP_TX => {
                    tx += 1;
                    match model_peer(&input) {
                        Some(r) => Some(format!("answered what the model refuses: {}", r.name())),
                        None => check_fuzz_answer(&input, &out).err(),
                    }
                }
                XDP_PASS => {
                    pass += 1;
                    if out != input {
                        Some("passed but changed".to_string())
                    } else if model_answers(&input) && model_peer(&input).is_none() {
                        Some("passed a query the model answers".to_string())
                    } else {
                        None
                    }
                }
                XDP_DROP => {
                    drop += 1;
                    // The kernel checks addresses before it reads the message, so a cut
                    // frame with bad headers may be dropped rather than passed as cut:
                    // the model judges its headers as if the rest were there.
                    let mut whole = input.clone();
                    whole.resize(input.len() + 1500, 0);
                    match model_peer(&whole) {
                        Some(r) if r.drops() => None,
                        r => Some(format!("dropped; the model says {r:?}")),
                    }
                }
                v => Some(format!("verdict {v}")),
            };
            if let Some(p) = problem {
                failures.push(format!(
                    "seed id {} case {case}: {p}\n  in  {}\n  out {}",
                    m.id(),
                    hex(&input),
                    hex(&out)
                ));
            }
        }
    }
    eprintln!("mutation fuzz: {tx} answered, {pass} passed, {drop} dropped");
    assert!(
        failures.is_empty(),
        "{} of {} cases failed; first ones:\n{}",
        failures.len(),
        tx + pass + drop,
        failures[..failures.len().min(8)].join("\n")
    );
    // The mutations must leave a fair share answerable, or the answer checks go unused.
    assert!(
        tx * 10 >= tx + pass + drop,
        "only {tx} of {} mutated frames answered",
        tx + pass + drop
    );
}

// ---------------------------------------------------------------------------------------
// The bench's ceiling program.

/// `director_turnaround` sends a query back with MACs, addresses and ports swapped and QR
/// set: byte for byte the frame the server would send on the reversed flow with that
/// response, checksums included (built from scratch here). Anything that is not a query
/// over UDP to port 53 is passed untouched.
#[test]
fn the_turnaround_program_reverses_queries_and_passes_the_rest() {
    const TURN: &str = "director_turnaround";
    let mut fx = Fixture::new().unwrap();
    fx.load_program(TURN).unwrap();
    for flow in [v4(), v6()] {
        let frame = frame_of(&flow, &a_query());
        let (verdict, out) = fx.try_run_program(TURN, &frame).unwrap();
        assert_eq!(verdict, XDP_TX, "{flow:?}");
        let back = Flow {
            client: flow.server,
            server: flow.client,
            vlan: None,
        };
        let mut response = a_query();
        response.set_message_type(MessageType::Response);
        let want = frame_of(&back, &response);
        assert_eq!(
            (&out[..6], &out[6..12]),
            (&frame[6..12], &frame[..6]),
            "{flow:?}"
        );
        assert_eq!(&out[12..], &want[12..], "{flow:?}");
    }
    let mut other = v4();
    other.server.set_port(54);
    let not_dns = frame_of(&other, &a_query());
    let mut response = a_query();
    response.set_message_type(MessageType::Response);
    let a_response = frame_of(&v4(), &response);
    for frame in [
        not_dns,
        a_response,
        arp_frame(),
        frame_of(&v4().with_vlan(7), &a_query()),
    ] {
        let (verdict, out) = fx.try_run_program(TURN, &frame).unwrap();
        assert_eq!((verdict, &out), (XDP_PASS, &frame));
    }
}

/// Decision ids are never reused while a half of the stored decisions is in use; when they
/// run out, an update rewrites every entry in place onto the other half, each ranked list
/// stored once again, and flips. Every answer stays right across it.
#[test]
fn stored_decisions_are_compacted_when_ids_run_out() {
    let mut fx = setup(1, &[("0.0.0.0/0", FRA.name), ("::/0", FRA.name)]);
    fx.maps().limit_stored_decisions(4);
    let table = |fx: &mut Fixture| ops::status(fx.pin_dir()).unwrap();
    let first = table(&mut fx).active_table;
    let mut flips = 0;
    let mut last = first;
    let nyc_client = frame_of(&Flow::v4(Ipv4Addr::new(203, 0, 113, 9)), &a_query());
    for i in 1..=12u16 {
        // A different ranked list each time (weights differ), alternating who leads.
        let servers = if i % 2 == 0 {
            format!("{}={i},{}=1", NYC.name, FRA.name)
        } else {
            NYC.name.to_string()
        };
        route_set(fx.maps(), NAME, "203.0.113.0/24", &servers).unwrap();
        let st = table(&mut fx);
        assert!(
            st.stored_decisions <= 3,
            "update {i}: {} stored",
            st.stored_decisions
        );
        if st.active_table != last {
            flips += 1;
            last = st.active_table;
        }
        let got = expect_answer(&fx, &nyc_client).addrs;
        let want: BTreeSet<IpAddr> = if i % 2 == 0 {
            [IpAddr::V4(NYC.v4), IpAddr::V4(FRA.v4)].into()
        } else {
            [IpAddr::V4(NYC.v4)].into()
        };
        assert!(
            got.iter().all(|a| want.contains(a)),
            "update {i}: answered {got:?}"
        );
        let others = expect_answer(&fx, &frame_of(&v4(), &a_query())).addrs;
        assert_eq!(
            others,
            [IpAddr::V4(FRA.v4)],
            "update {i}: the default route"
        );
    }
    assert!(
        flips >= 2,
        "compacted {flips} times in 12 updates with 3 ids"
    );
}

/// A compaction killed half way leaves entries on both halves of the stored decisions.
/// Every answer stays right, and a later compaction onto the same half keeps the ids those
/// entries use: storing its decisions there (cut short before any entry moves) changes no
/// answer, and finishing it leaves every entry on that half.
#[test]
fn a_compaction_cut_short_keeps_answers_and_the_next_one_finishes_it() {
    let mut fx = setup(1, &[("0.0.0.0/0", FRA.name), ("::/0", FRA.name)]);
    // Prefixes with decisions of their own, stored at ids 2.. after the default's.
    let routes = [
        ("203.0.113.0/24", NYC.name.to_string()),
        ("198.51.100.0/24", format!("{}=3,{}=1", NYC.name, FRA.name)),
        ("192.0.2.128/25", format!("{}=1,{}=3", NYC.name, FRA.name)),
    ];
    for (prefix, servers) in &routes {
        route_set(fx.maps(), NAME, prefix, servers).unwrap();
    }
    let clients = ["203.0.113.9", "198.51.100.7", "192.0.2.200", "192.0.2.9"];
    let answers = |fx: &Fixture| -> Vec<BTreeSet<IpAddr>> {
        clients
            .iter()
            .map(|c| {
                let f = frame_of(&Flow::v4(c.parse().unwrap()), &a_query());
                // Weighted picks vary per query: the set over a few is the decision's.
                (0..16)
                    .flat_map(|_| expect_answer(fx, &f).addrs)
                    .collect::<BTreeSet<_>>()
            })
            .collect()
    };
    let want = answers(&fx);
    let half = ops::status(fx.pin_dir()).unwrap().active_table;
    // Killed after two of the entries moved: answers as before, no flip.
    assert_eq!(fx.maps().compact_cut_short(2).unwrap(), 2);
    assert_eq!(answers(&fx), want, "after a compaction cut short");
    assert_eq!(ops::status(fx.pin_dir()).unwrap().active_table, half);
    // Again onto the same half, killed before any entry moved: its decisions are stored
    // there without touching the ids the two moved entries use.
    assert_eq!(fx.maps().compact_cut_short(0).unwrap(), 0);
    assert_eq!(answers(&fx), want, "after storing over a half entries use");
    // Finished: every entry on the other half, flipped, answers unchanged.
    let moved = fx.maps().compact().unwrap();
    assert!(moved >= 5, "{moved} entries moved");
    assert_eq!(answers(&fx), want, "after the compaction finished");
    assert_ne!(ops::status(fx.pin_dir()).unwrap().active_table, half);
}

/// Maps written by a build that hashed names differently (the byte-at-a-time FNV-1a before
/// the word walk) are refused by name, not silently left unanswerable.
#[test]
fn names_keyed_by_another_builds_hash_are_refused() {
    use aya::maps::{HashMap, Map, MapData};
    use director_common::maps::{NameEntry, MAP_NAMES, NAME_BUF};
    let mut fx = setup_fra();
    // The service answers, keyed as this build keys it.
    expect_answer(&fx, &frame_of(&v4(), &a_query()));
    let path = fx.pin_dir().join(MAP_NAMES);
    let mut names: HashMap<MapData, u64, NameEntry> =
        HashMap::try_from(Map::HashMap(MapData::from_pin(&path).unwrap())).unwrap();
    let wire = director_common::name::encode("old.example.com").unwrap();
    let mut entry = NameEntry {
        service: 1,
        len: wire.len() as u32,
        name: [0; NAME_BUF],
    };
    entry.name[..wire.len()].copy_from_slice(&wire);
    let fnv = wire.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    names.insert(fnv, entry, 0).unwrap();
    let err = director_ctl::kernel::Maps::open(fx.pin_dir())
        .err()
        .expect("maps with another build's name keys must be refused");
    assert!(
        format!("{err:#}").contains("another build of director"),
        "{err:#}"
    );
    names.remove(&fnv).unwrap();
    director_ctl::kernel::Maps::open(fx.pin_dir()).expect("the same maps, once consistent");
    let _ = fx.maps();
}

/// A pin set whose layout stamp is another build's is refused before anything is written,
/// and the program answers on as before; with the stamp back, the same maps open again.
#[test]
fn a_pin_set_of_another_layout_is_refused_and_left_as_it_was() {
    use aya::maps::MapData;
    use director_common::maps::{LAYOUT_VERSION, MAP_IFACES, MAP_LAYOUT};
    let fx = setup_fra();
    let before = fx.run(&frame_of(&v4(), &a_query()));
    assert_eq!(before.0, XDP_TX);
    let stamp = fx.pin_dir().join(MAP_LAYOUT);
    let ours = MapData::from_pin(&stamp).unwrap();
    assert_eq!(ours.info().unwrap().max_entries(), LAYOUT_VERSION);
    // Another layout's stamp: a map of another size at the stamp's path.
    std::fs::remove_file(&stamp).unwrap();
    let other = MapData::from_pin(fx.pin_dir().join(MAP_IFACES)).unwrap();
    assert_ne!(other.info().unwrap().max_entries(), LAYOUT_VERSION);
    other.pin(&stamp).unwrap();
    let err = director_ctl::kernel::Maps::open(fx.pin_dir())
        .err()
        .expect("a pin set of another layout must be refused");
    let text = format!("{err:#}");
    assert!(
        text.contains(&format!("this director-ctl writes layout {LAYOUT_VERSION}"))
            && text.contains("another version of director"),
        "{text}"
    );
    // Refused before any write: the same answer, byte for byte.
    assert_eq!(fx.run(&frame_of(&v4(), &a_query())), before);
    std::fs::remove_file(&stamp).unwrap();
    ours.pin(&stamp).unwrap();
    director_ctl::kernel::Maps::open(fx.pin_dir()).expect("the same maps, stamped as ours");
}

// ---------------------------------------------------------------------------------------
// Response rate limiting.

const TC: u16 = 0x0200;

/// Limits NAME: `rate` answers per second, `burst` at once, every `slip`-th limited
/// response truncated, per /24 and /56 of the source.
fn limit(fx: &mut Fixture, rate: u32, burst: u32, slip: u32) {
    let r = ops::RrlSettings {
        rate,
        burst,
        slip,
        ipv4_prefix: 24,
        ipv6_prefix: 56,
    };
    ops::rrl_set(fx.maps(), NAME, &r).unwrap();
}

/// A slipped response: the query turned around with valid checksums, QR, AA and TC set
/// (RD and CD copied), no records, the question echoed byte for byte and the OPT (with
/// ECS) answered as in a full answer.
fn check_truncated(query: &[u8], answer: &[u8]) -> Result<(), String> {
    let q = parse_udp(query).map_err(|e| format!("query frame: {e}"))?;
    let a = parse_udp(answer).map_err(|e| format!("answer frame: {e}"))?;
    check_turned_around(&q, &a, answer.len())?;
    verify_checksums(answer)?;
    let (qd, ad) = (&q.payload, &a.payload);
    let q_end = question_end(qd).ok_or("the query has no plain question")?;
    ensure!(
        ad.len() >= q_end,
        "{} bytes, shorter than the question",
        ad.len()
    );
    ensure!(ad[0..2] == qd[0..2], "ID {:#06x}", be16(ad, 0));
    let want = QR | AA | TC | (be16(qd, 2) & (RD | CD));
    ensure!(
        be16(ad, 2) == want,
        "flags {:#06x}, expected {want:#06x}",
        be16(ad, 2)
    );
    let counts = [be16(ad, 4), be16(ad, 6), be16(ad, 8), be16(ad, 10)];
    ensure!(
        counts == [1, 0, 0, be16(qd, 10)],
        "counts QD/AN/NS/AR {counts:?}"
    );
    ensure!(
        ad[12..q_end] == qd[12..q_end],
        "question not echoed: {} vs {}",
        hex(&ad[12..q_end]),
        hex(&qd[12..q_end])
    );
    let mut at = q_end;
    if be16(qd, 10) == 1 {
        let o = read_opt(ad, at)?;
        check_opt_wire(&read_opt(qd, q_end)?, &o)?;
        at = o.end;
    }
    ensure!(
        at == ad.len(),
        "{} bytes after the question and OPT",
        ad.len() - at
    );
    let m = decode_all(ad)?;
    ensure!(m.truncated() && m.answers().is_empty(), "hickory: {m:?}");
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Got {
    Answer,
    Slip,
    Drop,
}
use Got::{Answer as An, Drop as Dr, Slip as Sl};

/// Runs `m` from `flow` and says what came back, every answer and truncation checked.
fn outcome(fx: &Fixture, flow: &Flow, m: &Message) -> Got {
    let frame = frame_of(flow, m);
    let (verdict, out) = fx.run(&frame);
    match verdict {
        XDP_DROP => Got::Drop,
        XDP_TX if be16(&parse_udp(&out).unwrap().payload, 2) & TC != 0 => {
            check_truncated(&frame, &out).unwrap_or_else(|e| panic!("{flow:?}: {e}"));
            Got::Slip
        }
        XDP_TX => {
            check_answer(&frame, &out).unwrap_or_else(|e| panic!("{flow:?}: {e}"));
            Got::Answer
        }
        v => panic!("{flow:?}: verdict {v}"),
    }
}

fn outcomes(fx: &Fixture, flow: &Flow, m: &Message, n: usize) -> Vec<Got> {
    (0..n).map(|_| outcome(fx, flow, m)).collect()
}

#[test]
fn rate_limited_sources_get_drops_and_truncated_answers_in_the_slip_pattern() {
    let mut fx = setup_fra();
    // One answer a second: nothing refills while the test runs.
    limit(&mut fx, 1, 3, 2);
    let a = a_query();
    let pattern = [An, An, An, Dr, Sl, Dr, Sl];
    assert_eq!(outcomes(&fx, &v4(), &a, 7), pattern);
    // The same /24 shares the bucket (and its place in the slip count); the VLAN tag
    // changes nothing.
    let neighbour = Flow::v4(Ipv4Addr::new(192, 0, 2, 200)).with_vlan(7);
    assert_eq!(outcomes(&fx, &neighbour, &a, 2), [Dr, Sl]);
    // Another /24 is not touched.
    let other = Flow::v4(Ipv4Addr::new(203, 0, 113, 5));
    assert_eq!(outcomes(&fx, &other, &a, 3), [An, An, An]);

    // Counted by the packet's source, never by ECS: an IPv6 client claiming a subnet
    // per query still has one bucket. The truncated answers echo the OPT and ECS.
    let ecs = |i: u8| {
        with_ecs(
            query(ID, QNAME, RecordType::AAAA),
            IpAddr::V4(Ipv4Addr::new(198, 18, i, 0)),
            24,
            0,
        )
    };
    let got: Vec<Got> = (0..7).map(|i| outcome(&fx, &v6(), &ecs(i))).collect();
    assert_eq!(got, pattern);
    // The same /56, EDNS without ECS.
    let near = Flow::v6(Ipv6Addr::new(0x2001, 0xdb8, 2, 0xff, 0, 0, 0, 1));
    let edns = with_edns(query(ID, QNAME, RecordType::A), 1232);
    assert_eq!(outcomes(&fx, &near, &edns, 2), [Dr, Sl]);

    let c = fx.counters();
    assert_eq!(c["answered"], 9);
    assert_eq!(c["truncated_rate_limited"], 6);
    assert_eq!(c["drop_rate_limited"], 6);
    assert_eq!(c["dropped"], 0);
}

#[test]
fn exempt_sources_and_unlimited_services_are_never_limited() {
    let mut fx = setup_fra();
    limit(&mut fx, 1, 1, 0);
    let m = fx.maps();
    ops::rrl_exempt(m, "192.0.2.0/24".parse().unwrap(), true).unwrap();
    ops::rrl_exempt(m, "2001:db8:2::/48".parse().unwrap(), true).unwrap();
    let a = a_query();
    assert_eq!(outcomes(&fx, &v4(), &a, 20), [An; 20]);
    assert_eq!(outcomes(&fx, &v6(), &a, 20), [An; 20]);
    // Not exempt: one answer, then (slip 0) nothing at all.
    let other = Flow::v4(Ipv4Addr::new(203, 0, 113, 77));
    let mut want = vec![An];
    want.extend([Dr; 9]);
    assert_eq!(outcomes(&fx, &other, &a, 10), want);
    let listed: Vec<String> = ops::rrl_exempt_list(fx.maps())
        .unwrap()
        .exempt
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(listed, ["192.0.2.0/24", "2001:db8:2::/48"]);

    // No longer exempt: limited from its next query.
    ops::rrl_exempt(fx.maps(), "192.0.2.0/24".parse().unwrap(), false).unwrap();
    assert_eq!(outcomes(&fx, &v4(), &a, 3), [An, Dr, Dr]);

    // Rate 0: the service is not limited, whatever the buckets hold.
    limit(&mut fx, 0, 0, 2);
    assert_eq!(outcomes(&fx, &other, &a, 20), [An; 20]);
    assert_eq!(outcomes(&fx, &v4(), &a, 20), [An; 20]);
    let c = fx.counters();
    assert_eq!(c["drop_rate_limited"], 11);
    assert_eq!(c["truncated_rate_limited"], 0);
    assert_eq!(c["answered"], 20 + 20 + 1 + 1 + 40);
}

/// What `run` writes: each service's limit from `[rrl]` and its own `rrl`, and the
/// exemptions as the whole list (one added by the CLI meanwhile goes), which the program
/// then applies.
#[test]
fn the_config_sets_limits_and_exemptions() {
    use director_ctl::controller::{apply, config::Config};
    use director_plan::{data::Data, decide};
    let cfg = Config::parse(
        r#"
[rrl]
rate = 1
burst = 2
slip = 1
exempt = ["203.0.113.0/24"]

[[site]]
name = "fra"
lat = 50.11
lon = 8.68

[[server]]
name = "fra-1"
site = "fra"
ipv4 = "198.51.100.1"

[[service]]
name = "www.example.com"
servers = ["fra-1"]
priority = { geo = 1 }

[[service]]
name = "api.example.com"
servers = ["fra-1"]
priority = { geo = 1 }
rrl = { rate = 0 }
"#,
    )
    .unwrap();
    let mut fx = Fixture::new().unwrap();
    ops::rrl_exempt(fx.maps(), "192.0.2.0/24".parse().unwrap(), true).unwrap();
    let ids = apply::assign_ids(fx.maps(), &cfg).unwrap();
    let data = Data::load(&cfg.plan).unwrap();
    let c = decide::compute(&cfg.plan, &data, &ids, &Default::default()).unwrap();
    apply::sync(fx.maps(), &cfg, &c, &ids).unwrap();
    let listed: Vec<String> = ops::rrl_exempt_list(fx.maps())
        .unwrap()
        .exempt
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(listed, ["203.0.113.0/24"]);
    let services = ops::services(fx.maps()).unwrap().services;
    let rrl = |name: &str| {
        services
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.rrl.clone())
            .unwrap()
    };
    let www = rrl(NAME).expect("www is limited");
    assert_eq!((www.rate, www.burst, www.slip), (1, 2, 1));
    assert_eq!(rrl("api.example.com"), None);

    let a = a_query();
    assert_eq!(outcomes(&fx, &v4(), &a, 4), [An, An, Sl, Sl]);
    let exempt = Flow::v4(Ipv4Addr::new(203, 0, 113, 9));
    assert_eq!(outcomes(&fx, &exempt, &a, 4), [An; 4]);
    let api = query(ID, "api.example.com.", RecordType::A);
    assert_eq!(outcomes(&fx, &v4(), &api, 4), [An; 4]);
}

/// Keeps the calling thread on one CPU: the program caches trie reads per CPU, so a test
/// of that cache must run its queries where the earlier ones ran.
fn stay_on_one_cpu() {
    // SAFETY: a zeroed cpu_set_t with one bit set, for this thread (pid 0).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set),
            0,
            "pinning the test to CPU 0"
        );
    }
}

#[test]
fn route_changes_reach_queries_the_cache_has_seen() {
    stay_on_one_cpu();
    // Routes elsewhere keep both decisions stored: a stale cached id then still names the
    // old decision, not one stored again in its place.
    let mut fx = setup(
        1,
        &[
            ("0.0.0.0/0", FRA.name),
            ("::/0", FRA.name),
            ("100.64.0.0/10", FRA.name),
            ("100.128.0.0/10", NYC.name),
        ],
    );
    // The same questions (plain and with ECS, both families) before and after each write:
    // answered from the cache the second time unless the write invalidated it.
    let questions = || {
        let mut q = Vec::new();
        for (flow, rtype) in with_both_types([v4(), v6()]) {
            q.push((flow, rtype, frame_of(&flow, &query(ID, QNAME, rtype))));
            let ecs = with_ecs(query(ID, QNAME, rtype), ip("203.0.113.0"), 24, 0);
            q.push((flow, rtype, frame_of(&flow, &ecs)));
        }
        q
    };
    let expect = |fx: &Fixture, want: &Server, when: &str| {
        for (flow, rtype, frame) in questions() {
            for round in 0..3 {
                let a = expect_answer(fx, &frame);
                assert_eq!(
                    a.addrs,
                    vec![want.addr(rtype)],
                    "{rtype} from {} ({} bytes), {when}, round {round}",
                    flow.client,
                    frame.len()
                );
            }
        }
    };
    expect(&fx, &FRA, "with every route to fra-1");
    for prefix in ["0.0.0.0/0", "::/0"] {
        route_set(fx.maps(), NAME, prefix, NYC.name).unwrap();
    }
    expect(&fx, &NYC, "after the defaults moved to nyc-1");
    // More specific routes, added and removed, over the clients and the ECS subnet.
    for prefix in ["192.0.2.0/24", "203.0.113.0/24", "2001:db8:2::/48"] {
        route_set(fx.maps(), NAME, prefix, FRA.name).unwrap();
    }
    expect(&fx, &FRA, "after more specific routes to fra-1");
    for prefix in ["192.0.2.0/24", "203.0.113.0/24", "2001:db8:2::/48"] {
        ops::route_del(fx.maps(), NAME, prefix.parse().unwrap()).unwrap();
    }
    expect(&fx, &NYC, "after the more specific routes were deleted");
}

/// A table larger than a batch, both ways: written by two threads (each family cut at an
/// address, see `Maps::put_all`) and read back in batches of the kernel's, it is exactly
/// what was written, every entry with its decision and scope.
#[test]
fn a_table_larger_than_a_batch_reads_back_as_written() {
    use director_common::maps::Decision;
    use director_ctl::kernel::DecisionChange;
    let mut fx = setup_fra();
    let before = fx.maps().decisions().unwrap();
    let (service, template) = (before[0].0, before[0].2);
    let decision = move |i: u32, scope: u8| {
        let mut d: Decision = template;
        d.prefix_len = scope;
        // A few different ranked lists, so entries refer to different stored ids.
        d.weights[0] = 1 + (i % 7) as u16;
        d
    };
    let mut put: Vec<(IpNet, Decision)> = (0..20_000u32)
        .map(|i| {
            let net = ipnet::Ipv4Net::new(Ipv4Addr::from(0x0a00_0000 | (i << 8)), 24).unwrap();
            (IpNet::V4(net), decision(i, 24))
        })
        .collect();
    put.extend((0..10_000u32).map(|i| {
        let addr = Ipv6Addr::from(0x2001_0db8u128 << 96 | u128::from(i) << 80);
        let net = ipnet::Ipv6Net::new(addr, 48).unwrap();
        (IpNet::V6(net), decision(i, 56))
    }));
    fx.maps()
        .apply_decisions(DecisionChange {
            service,
            put: &put,
            delete: &[],
        })
        .unwrap();
    let got: BTreeMap<IpNet, Decision> = fx
        .maps()
        .decisions()
        .unwrap()
        .into_iter()
        .map(|(s, p, d)| {
            assert_eq!(s, service);
            (p, d)
        })
        .collect();
    let want: BTreeMap<IpNet, Decision> = before
        .into_iter()
        .map(|(_, p, d)| (p, d))
        .chain(put)
        .collect();
    assert_eq!(got.len(), want.len());
    assert!(
        got == want,
        "the table read back differs from what was written"
    );
}
