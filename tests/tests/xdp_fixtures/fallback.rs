//! When no server can be answered: the alternate (a CNAME), else the origin.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use director_common::counters::Reason;
use director_common::maps::Fallback;
use director_common::select::Mode;
use director_ctl::ops;
use director_tests::fixture::{route_set, Fixture, XDP_TX};
use director_tests::packets::*;
use hickory_proto::rr::{Name, RData, RecordType};

use crate::check::{check_answer, check_opt_wire, check_turned_around, decode_all, Answer};
use crate::runner::{expect_answer, expect_pass, moved};
use crate::setup::{a_query, all_flows, both, frame_of, hex, ip, setup, v4, v6, with_both_types};
use crate::{AA, CD, FRA, ID, NAME, NYC, QNAME, QR, RD, TTL};

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
