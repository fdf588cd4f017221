//! The stored decisions: the /16 front of the trie, compaction of decision ids, the
//! per-CPU cache of trie reads, and tables larger than a batch.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use director_common::counters::Reason;
use director_ctl::kernel::TableSource;
use director_ctl::ops;
use director_plan::prefix::cover16 as front16;
use director_tests::fixture::{route_set, Fixture};
use director_tests::packets::*;
use hickory_proto::rr::RecordType;
use ipnet::IpNet;

use crate::runner::{expect_answer, expect_pass};
use crate::setup::{a_query, frame_of, ip, setup, setup_fra, v4, v6, with_both_types};
use crate::{Server, CLIENT_V4, FRA, ID, NAME, NYC, QNAME};

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
