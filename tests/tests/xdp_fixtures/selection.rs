//! How many answers, and from which servers: down, health-out, drained, fallback,
//! weights, client selection.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};

use director_common::counters::Reason;
use director_common::maps::HealthMask;
use director_common::select::Mode;
use director_ctl::ops;
use director_tests::fixture::{route_set, Fixture};
use director_tests::packets::*;
use hickory_proto::rr::RecordType;

use crate::runner::{expect_answer, expect_pass_table, flow_name, pass_case};
use crate::setup::{
    a_query, addr_set, all_flows, both, frame_of, ip, setup, setup_fra, v4, v6, with_both_types,
};
use crate::{FRA, ID, NAME, NYC, QNAME, TTL};

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
