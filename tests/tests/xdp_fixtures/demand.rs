//! Demand: every answer counted at the choice index of the decision that made it, per
//! service, and sampled whole into the ring one in N.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use director_common::counters::Reason;
use director_common::demand::{Sample, FLAG_ECS, FLAG_SOURCE_V6, FLAG_V6};
use director_common::select::Mode;
use director_ctl::kernel::DemandRing;
use director_ctl::ops;
use director_tests::fixture::{route_set, Fixture};
use director_tests::packets::*;
use hickory_proto::rr::RecordType;

use crate::runner::{expect_answer, expect_pass};
use crate::setup::{a_query, frame_of, setup_fra, v4, v6};
use crate::{CLIENT_V4, CLIENT_V6, ID, NAME, TTL};

const OTHER: &str = "other.example.com";

fn service_id(fx: &Fixture, name: &str) -> u32 {
    fx_maps(fx).find_service(name).unwrap().unwrap()
}

fn fx_maps(fx: &Fixture) -> &director_ctl::kernel::Maps {
    fx.maps_read()
}

/// The choice indexes `service` owns.
fn owned(fx: &Fixture, service: u32) -> Vec<u32> {
    fx_maps(fx)
        .choice_owners()
        .unwrap()
        .into_iter()
        .filter(|(_, s, _)| *s == service)
        .map(|(i, _, _)| i)
        .collect()
}

fn demand(fx: &Fixture) -> Vec<(u32, u64)> {
    fx_maps(fx).demand_counts().unwrap()
}

#[test]
fn answers_count_at_their_choice_index_and_passes_count_nothing() {
    let fx = setup_fra();
    let svc = service_id(&fx, NAME);
    // One decision (FRA) for both families of one service: one index.
    let idx = owned(&fx, svc);
    assert_eq!(idx.len(), 1, "{:?}", fx_maps(&fx).choice_owners().unwrap());
    assert_eq!(demand(&fx), vec![]);
    for _ in 0..3 {
        expect_answer(&fx, &frame_of(&v4(), &a_query()));
    }
    for _ in 0..2 {
        expect_answer(
            &fx,
            &frame_of(&v6(), &query(ID, &format!("{NAME}."), RecordType::AAAA)),
        );
    }
    assert_eq!(demand(&fx), vec![(idx[0], 5)]);
    // Not a name of ours: passed, not counted.
    let unknown = frame_of(&v4(), &query(ID, "nope.example.com.", RecordType::A));
    expect_pass(&fx, &unknown, Reason::UnknownName);
    assert_eq!(demand(&fx), vec![(idx[0], 5)]);
}

#[test]
fn services_with_the_same_servers_get_their_own_choice_and_count() {
    let mut fx = setup_fra();
    ops::service_add(fx.maps(), OTHER, TTL, 1, Mode::Random).unwrap();
    route_set(fx.maps(), OTHER, "0.0.0.0/0", "fra-1").unwrap();
    let (a, b) = (service_id(&fx, NAME), service_id(&fx, OTHER));
    let (ia, ib) = (owned(&fx, a), owned(&fx, b));
    assert_eq!((ia.len(), ib.len()), (1, 1));
    assert_ne!(ia[0], ib[0], "one index for two services");
    let owners = fx_maps(&fx).choice_owners().unwrap();
    let content = |i: u32| owners.iter().find(|o| o.0 == i).unwrap().2;
    assert_eq!(content(ia[0]), content(ib[0]), "the same ranked list");
    for _ in 0..2 {
        expect_answer(&fx, &frame_of(&v4(), &a_query()));
    }
    for _ in 0..3 {
        expect_answer(
            &fx,
            &frame_of(&v4(), &query(ID, &format!("{OTHER}."), RecordType::A)),
        );
    }
    let mut want = vec![(ia[0], 2), (ib[0], 3)];
    want.sort();
    assert_eq!(demand(&fx), want);
}

/// Keeps the calling thread on one CPU: the sampling countdown is per CPU, and
/// BPF_PROG_TEST_RUN runs on the caller's.
fn pin_to_one_cpu() {
    // SAFETY: a zeroed cpu_set_t with one bit set, for this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set),
            0
        );
    }
}

/// A query's flow and ECS (address, prefix), and the sample it must give: client, its
/// prefix length, flags, source.
type Case = (Flow, Option<(IpAddr, u8)>, IpAddr, u8, u8, IpAddr);

fn addr16(a: IpAddr) -> [u8; 16] {
    let mut out = [0u8; 16];
    match a {
        IpAddr::V4(a) => out[..4].copy_from_slice(&a.octets()),
        IpAddr::V6(a) => out = a.octets(),
    }
    out
}

#[test]
fn sampling_one_in_one_records_each_answer_whole() {
    pin_to_one_cpu();
    let mut fx = setup_fra();
    let svc = service_id(&fx, NAME);
    let idx = owned(&fx, svc)[0];
    let mut ring = DemandRing::open(fx.pin_dir()).unwrap();
    assert_eq!(fx.maps().demand_sampling().unwrap(), 0);
    fx.maps().set_demand_sampling(1).unwrap();
    assert_eq!(fx.maps().demand_sampling().unwrap(), 1);
    let ecs4 = Ipv4Addr::new(203, 0, 113, 0);
    let ecs6 = Ipv6Addr::new(0x2001, 0xdb8, 1, 2, 0, 0, 0, 0);
    let cases: [Case; 5] = [
        (v4(), None, CLIENT_V4.into(), 32, 0, CLIENT_V4.into()),
        (
            v4(),
            Some((ecs4.into(), 24)),
            ecs4.into(),
            24,
            FLAG_ECS,
            CLIENT_V4.into(),
        ),
        (
            v6(),
            None,
            CLIENT_V6.into(),
            128,
            FLAG_V6 | FLAG_SOURCE_V6,
            CLIENT_V6.into(),
        ),
        (
            v6(),
            Some((ecs4.into(), 24)),
            ecs4.into(),
            24,
            FLAG_ECS | FLAG_SOURCE_V6,
            CLIENT_V6.into(),
        ),
        (
            v4(),
            Some((ecs6.into(), 64)),
            ecs6.into(),
            64,
            FLAG_ECS | FLAG_V6,
            CLIENT_V4.into(),
        ),
    ];
    for (flow, ecs, client, len, flags, source) in cases {
        let mut q = a_query();
        if let Some((a, p)) = ecs {
            q = with_ecs(q, a, p, 0);
        }
        expect_answer(&fx, &frame_of(&flow, &q));
        let got = ring.drain(10);
        let want = Sample {
            service: svc,
            choice: idx,
            client: addr16(client),
            client_len: len,
            flags,
            _pad: [0; 6],
            source: addr16(source),
        };
        assert_eq!(got, vec![want], "{flow:?} ECS {ecs:?}");
    }
    // A pass is no answer: nothing sampled.
    let unknown = frame_of(&v4(), &query(ID, "nope.example.com.", RecordType::A));
    expect_pass(&fx, &unknown, Reason::UnknownName);
    assert_eq!(ring.drain(10), vec![]);
    assert!(!ring.wait(std::time::Duration::from_millis(1)).unwrap());
}

#[test]
fn sampling_off_records_nothing_and_one_in_four_records_a_quarter() {
    pin_to_one_cpu();
    let mut fx = setup_fra();
    let mut ring = DemandRing::open(fx.pin_dir()).unwrap();
    let frame = frame_of(&v4(), &a_query());
    for _ in 0..8 {
        expect_answer(&fx, &frame);
    }
    assert_eq!(ring.drain(100).len(), 0, "sampling is off by default");
    fx.maps().set_demand_sampling(4).unwrap();
    for _ in 0..16 {
        expect_answer(&fx, &frame);
    }
    assert!(ring.wait(std::time::Duration::from_millis(100)).unwrap());
    assert_eq!(
        ring.drain(100).len(),
        4,
        "one in four of 16 answers on one CPU"
    );
    // `max` leaves the rest for the next call.
    for _ in 0..8 {
        expect_answer(&fx, &frame);
    }
    assert_eq!(ring.drain(1).len(), 1);
    assert_eq!(ring.drain(100).len(), 1);
    fx.maps().set_demand_sampling(0).unwrap();
    for _ in 0..8 {
        expect_answer(&fx, &frame);
    }
    assert_eq!(ring.drain(100).len(), 0);
    // Every answer was counted either way.
    assert_eq!(demand(&fx).iter().map(|(_, n)| n).sum::<u64>(), 40);
}
