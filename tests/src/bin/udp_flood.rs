//! A bounded DNS query flood for the rate-limiting tests: COUNT queries for NAME (type A)
//! from BIND to SERVER:53, evenly spread over SECONDS, every reply read and sorted (full
//! answer, truncated, other). Prints one JSON line when done. Run inside a namespace.
//!
//! udp_flood BIND SERVER NAME COUNT SECONDS [ECS-SUBNET]
//!
//! With ECS-SUBNET (`10.1.0.0/24`), every query carries it as its EDNS Client Subnet.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use director_tests::packets::{query, wire, with_ecs};
use hickory_proto::rr::RecordType;

const TC: u16 = 0x0200;
const QR: u16 = 0x8000;
/// Replies still in flight when the last query went are read for this long.
const DRAIN: Duration = Duration::from_millis(500);

#[derive(Default)]
struct Tally {
    answers: u64,
    truncated: u64,
    other: u64,
}

impl Tally {
    fn read(&mut self, sock: &UdpSocket, buf: &mut [u8]) {
        while let Ok(n) = sock.recv(buf) {
            let flags = if n >= 12 {
                u16::from_be_bytes([buf[2], buf[3]])
            } else {
                0
            };
            let ancount = if n >= 12 {
                u16::from_be_bytes([buf[6], buf[7]])
            } else {
                0
            };
            if flags & QR == 0 {
                self.other += 1;
            } else if flags & TC != 0 && ancount == 0 {
                self.truncated += 1;
            } else if ancount > 0 {
                self.answers += 1;
            } else {
                self.other += 1;
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if !(6..=7).contains(&args.len()) {
        eprintln!("usage: udp_flood BIND SERVER NAME COUNT SECONDS [ECS-SUBNET]");
        std::process::exit(2);
    }
    let ecs: Option<ipnet::IpNet> = args
        .get(6)
        .map(|s| s.parse().expect("ECS-SUBNET is a prefix"));
    let bind: std::net::IpAddr = args[1].parse().expect("BIND is an address");
    let server: std::net::IpAddr = args[2].parse().expect("SERVER is an address");
    let count: u64 = args[4].parse().expect("COUNT is a number");
    let seconds: f64 = args[5].parse().expect("SECONDS is a number");
    let sock = UdpSocket::bind(SocketAddr::new(bind, 0)).expect("binding");
    sock.connect(SocketAddr::new(server, 53))
        .expect("connecting");
    sock.set_nonblocking(true).expect("non-blocking");
    let mut buf = [0u8; 4096];
    let mut tally = Tally::default();
    let step = Duration::from_secs_f64(seconds / count as f64);
    let start = Instant::now();
    let (mut sent, mut unsent) = (0u64, 0u64);
    let mut last = start;
    while sent + unsent < count {
        let due = start + step * (sent + unsent) as u32;
        let now = Instant::now();
        if now < due {
            tally.read(&sock, &mut buf);
            std::thread::sleep((due - now).min(Duration::from_micros(200)));
            continue;
        }
        let mut m = query((sent + unsent) as u16, &args[3], RecordType::A);
        if let Some(n) = ecs {
            m = with_ecs(m, n.addr(), n.prefix_len(), 0);
        }
        let q = wire(&m);
        // A full socket buffer loses the query: counted apart.
        if sock.send(&q).is_ok() {
            last = Instant::now();
            sent += 1;
        } else {
            unsent += 1;
        }
        tally.read(&sock, &mut buf);
    }
    let span = last - start;
    let end = Instant::now() + DRAIN;
    while Instant::now() < end {
        tally.read(&sock, &mut buf);
        std::thread::sleep(Duration::from_millis(5));
    }
    println!(
        "{{\"sent\":{sent},\"unsent\":{unsent},\"answers\":{},\"truncated\":{},\"other\":{},\"span_s\":{}}}",
        tally.answers,
        tally.truncated,
        tally.other,
        span.as_secs_f64()
    );
}
