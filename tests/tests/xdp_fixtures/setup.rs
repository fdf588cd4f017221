//! Fixture setup: a fresh program owning NAME, with FRA and NYC, the flows the tests send
//! from, and the route sets they give.

use std::collections::BTreeSet;
use std::net::IpAddr;

use director_common::select::Mode;
use director_ctl::ops;
use director_tests::fixture::{route_set, Fixture};
use director_tests::packets::*;
use hickory_proto::op::Message;
use hickory_proto::rr::RecordType;

use crate::{CLIENT_V4, CLIENT_V6, FRA, ID, NAME, NYC, QNAME, TTL};

/// A fresh program owning NAME (TTL, `answers` per reply) with FRA and NYC as servers and
/// the given (prefix, server list) routes.
pub(crate) fn setup(answers: u8, routes: &[(&str, &str)]) -> Fixture {
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
pub(crate) fn setup_fra() -> Fixture {
    setup(1, &[("0.0.0.0/0", FRA.name), ("::/0", FRA.name)])
}

pub(crate) fn v4() -> Flow {
    Flow::v4(CLIENT_V4)
}

pub(crate) fn v6() -> Flow {
    Flow::v6(CLIENT_V6)
}

/// IPv4 and IPv6, untagged and with an 802.1Q tag.
pub(crate) fn all_flows() -> [Flow; 4] {
    [v4(), v4().with_vlan(100), v6(), v6().with_vlan(4094)]
}

/// Each flow with each record type director answers, so that a test over both is one loop.
pub(crate) fn with_both_types(
    flows: impl IntoIterator<Item = Flow>,
) -> impl Iterator<Item = (Flow, RecordType)> {
    flows
        .into_iter()
        .flat_map(|flow| [RecordType::A, RecordType::AAAA].map(|rtype| (flow, rtype)))
}

pub(crate) fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub(crate) fn a_query() -> Message {
    query(ID, QNAME, RecordType::A)
}

pub(crate) fn frame_of(flow: &Flow, m: &Message) -> Vec<u8> {
    udp_frame(flow, &wire(m))
}

pub(crate) fn both() -> [(&'static str, &'static str); 2] {
    [("0.0.0.0/0", "fra-1,nyc-1"), ("::/0", "fra-1,nyc-1")]
}

pub(crate) fn addr_set(addrs: &[IpAddr]) -> BTreeSet<IpAddr> {
    addrs.iter().copied().collect()
}

/// A well-formed query for NAME in `flow`, then `edit` applied to the frame's bytes.
pub(crate) fn edited(flow: &Flow, edit: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut f = frame_of(flow, &a_query());
    edit(&mut f);
    f
}

pub(crate) fn to(server: &str) -> Flow {
    let server: IpAddr = ip(server);
    let mut f = if server.is_ipv6() { v6() } else { v4() };
    f.server = (server, DNS_PORT).into();
    f
}

pub(crate) fn from(client: &str) -> Flow {
    let client: IpAddr = ip(client);
    let mut f = if client.is_ipv6() { v6() } else { v4() };
    f.client = (client, f.client.port()).into();
    f
}

pub(crate) fn from_port(port: u16) -> Flow {
    let mut f = v4();
    f.client.set_port(port);
    f
}
