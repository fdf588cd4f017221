//! EDNS and client subnet (ECS): the OPT record answered, and routes chosen by subnet.

use std::net::Ipv4Addr;

use director_tests::fixture::Fixture;
use director_tests::packets::*;
use hickory_proto::rr::rdata::opt::ClientSubnet;
use hickory_proto::rr::RecordType;

use crate::runner::{assert_no_failed_rows, expect_answer, try_answer};
use crate::setup::{a_query, frame_of, ip, setup, setup_fra, v4, v6};
use crate::{Server, CLIENT_V4, FRA, ID, NYC, OPTION_ECS, QNAME};

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
