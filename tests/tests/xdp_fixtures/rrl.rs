//! Response rate limiting.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use director_ctl::ops;
use director_tests::fixture::{Fixture, XDP_DROP, XDP_TX};
use director_tests::packets::*;
use hickory_proto::op::Message;
use hickory_proto::rr::RecordType;

use crate::check::{check_answer, check_opt_wire, check_turned_around, decode_all};
use crate::setup::{a_query, frame_of, hex, setup_fra, v4, v6};
use crate::{AA, CD, ID, NAME, QNAME, QR, RD, TC};

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

/// The buckets refill on the kernel's clock at the configured rate: a token back after one
/// interval, not two (a tick misread by the loader would refill several times faster or
/// not at all). Rate 10/s, burst 2: 100 ms a token, the bucket 200 ms deep; 130 ms later
/// (the sleep may overrun by up to 70 ms) exactly one more answer is due.
#[test]
fn buckets_refill_at_the_rate_on_the_kernels_clock() {
    use std::time::{Duration, Instant};
    let mut fx = setup_fra();
    limit(&mut fx, 10, 2, 0);
    let a = a_query();
    // A fresh /24 per attempt; an attempt whose sleep overran is not judged.
    for i in 0..3u8 {
        let source = Flow::v4(Ipv4Addr::new(203, 0, 113 - i, 9));
        assert_eq!(outcomes(&fx, &source, &a, 3), [An, An, Dr]);
        let t = Instant::now();
        std::thread::sleep(Duration::from_millis(130));
        let got = outcomes(&fx, &source, &a, 2);
        let waited = t.elapsed();
        if waited < Duration::from_millis(196) {
            assert_eq!(got, [An, Dr], "after {waited:?}");
            return;
        }
        eprintln!("slept {waited:?}: past the second token's time, trying again");
    }
    eprintln!("every sleep overran: the refill was not judged on this loaded machine");
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
