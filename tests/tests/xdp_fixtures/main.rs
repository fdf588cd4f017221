//! BPF_PROG_TEST_RUN fixtures for the XDP program: a frame in, the verdict and the frame
//! out, checked field by field. Answers are read back with hickory-proto and their
//! checksums recomputed by `director_tests::packets`, so no check leans on the wire code
//! the program itself is built from.
//!
//! Needs root (it loads the program): `cargo test -p director-tests --test xdp_fixtures --
//! --test-threads=1`. One module per feature; `check`, `runner` and `setup` are what the
//! others share.

#[macro_use]
mod check;
mod answers;
mod decisions;
mod demand;
mod edns;
mod fallback;
mod fuzz;
mod loading;
mod pass_tables;
mod peers;
mod rrl;
mod runner;
mod selection;
mod setup;
mod turnaround;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hickory_proto::rr::RecordType;

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
/// Truncated: the answer did not fit (RFC 1035 §4.1.1).
const TC: u16 = 0x0200;

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
