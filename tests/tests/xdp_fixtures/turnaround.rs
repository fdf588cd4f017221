//! The bench's ceiling program.

use director_tests::fixture::{Fixture, XDP_PASS, XDP_TX};
use director_tests::packets::*;
use hickory_proto::op::MessageType;

use crate::setup::{a_query, frame_of, v4, v6};

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
