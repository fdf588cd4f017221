//! Throws malformed, truncated, huge and pipelined queries at a DNS server over UDP and
//! TCP (run inside a lab namespace by the zone tests), and checks what comes back: no
//! answer ever holds a record outside `ZONE`, and after all of it the server still answers
//! a plain query on both transports within 2 s. Bounded: `COUNT` queries per transport.
//!
//! `dnsfuzz SERVER_IP ZONE SEED COUNT` → prints a JSON summary; exits 1 on a violation.

use std::io::{Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use hickory_proto::op::{Edns, Message, Query};
use hickory_proto::rr::{Name, RecordType};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn query(name: &str, t: RecordType, id: u16, edns: bool) -> Vec<u8> {
    let mut m = Message::new();
    m.set_id(id);
    m.add_query(Query::query(
        Name::from_ascii(name).unwrap_or_else(|_| Name::root()),
        t,
    ));
    if edns {
        let mut e = Edns::new();
        e.set_max_payload(1232);
        m.set_edns(e);
    }
    m.to_vec().unwrap_or_default()
}

/// One query of the fuzz: a valid one for the zone or another, or one broken some way.
fn case(r: &mut Rng, zone: &str) -> Vec<u8> {
    let names = [
        zone.to_string(),
        format!("www.{zone}"),
        format!("nope.{zone}"),
        format!("big.{zone}"),
        "example.org.".to_string(),
        ".".to_string(),
    ];
    let types = [
        RecordType::A,
        RecordType::AAAA,
        RecordType::SOA,
        RecordType::NS,
        RecordType::TXT,
        RecordType::ANY,
        RecordType::AXFR,
        RecordType::MX,
    ];
    let name = &names[r.below(names.len() as u64) as usize];
    let t = types[r.below(types.len() as u64) as usize];
    let mut q = query(name, t, r.next() as u16, r.below(2) == 0);
    match r.below(6) {
        0 => {}
        1 => {
            let cut = r.below(q.len() as u64) as usize;
            q.truncate(cut);
        }
        2 => {
            for _ in 0..1 + r.below(4) {
                let i = r.below(q.len() as u64) as usize;
                if let Some(b) = q.get_mut(i) {
                    *b = r.next() as u8;
                }
            }
        }
        3 => {
            let n = r.below(4000) as usize;
            q = (0..n).map(|_| r.next() as u8).collect();
        }
        4 => {
            // Counts that promise more than is there.
            if q.len() >= 12 {
                q[5] = r.next() as u8;
                q[7] = r.next() as u8;
                q[11] = r.next() as u8;
            }
        }
        _ => {
            // Opcodes and flags of every kind (a response bit included).
            if q.len() >= 4 {
                q[2] = r.next() as u8;
                q[3] = r.next() as u8;
            }
        }
    }
    q
}

/// Every record of an answer lies in `zone`.
fn check(answer: &[u8], zone: &Name) -> Result<(), String> {
    let Ok(m) = Message::from_vec(answer) else {
        // Not readable by hickory (a FORMERR header echo is readable); count, not fail.
        return Ok(());
    };
    for r in m.all_sections() {
        if !zone.zone_of(r.name()) {
            return Err(format!("a record outside the zone: {r}"));
        }
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, server, zone, seed, count] = &args[..] else {
        eprintln!("usage: dnsfuzz SERVER_IP ZONE SEED COUNT");
        std::process::exit(2);
    };
    let server: IpAddr = server.parse().expect("SERVER_IP");
    let to = SocketAddr::new(server, 53);
    let zone_name = Name::from_ascii(zone).expect("ZONE");
    let mut r = Rng(seed.parse::<u64>().expect("SEED") | 1);
    let count: usize = count.parse().expect("COUNT");
    let started = Instant::now();
    let mut violations = Vec::new();

    // UDP: one query at a time; a reply is read with a short timeout (garbage gets none).
    let udp = UdpSocket::bind(if server.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    })
    .expect("a UDP socket");
    // Garbage gets no reply: wait briefly. A late reply is read after a later query, and is
    // checked all the same.
    udp.set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    let (mut udp_answers, mut buf) = (0usize, vec![0u8; 65536]);
    for _ in 0..count {
        let q = case(&mut r, zone);
        let _ = udp.send_to(&q, to);
        if let Ok((n, _)) = udp.recv_from(&mut buf) {
            udp_answers += 1;
            if let Err(e) = check(&buf[..n], &zone_name) {
                violations.push(e);
            }
        }
    }

    // TCP: batches of queries written at once (pipelined), some cut short or with a
    // length that promises more than follows, each connection then closed.
    let mut tcp_answers = 0usize;
    let mut sent = 0;
    while sent < count {
        let Ok(mut s) = TcpStream::connect_timeout(&to, Duration::from_secs(2)) else {
            violations.push("a TCP connection was refused".into());
            break;
        };
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let batch = 1 + r.below(16) as usize;
        let mut out = Vec::new();
        for _ in 0..batch {
            let q = case(&mut r, zone);
            let len = if r.below(20) == 0 {
                (q.len() + 1 + r.below(100) as usize) as u16
            } else {
                q.len() as u16
            };
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(&q);
        }
        sent += batch;
        let _ = s.write_all(&out);
        // Done writing: the server answers what it can read, then sees the end and closes.
        let _ = s.shutdown(Shutdown::Write);
        let mut got = Vec::new();
        let mut chunk = [0u8; 65536];
        while let Ok(n) = s.read(&mut chunk) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&chunk[..n]);
        }
        let mut at = 0;
        while at + 2 <= got.len() {
            let n = u16::from_be_bytes([got[at], got[at + 1]]) as usize;
            if at + 2 + n > got.len() {
                break;
            }
            tcp_answers += 1;
            if let Err(e) = check(&got[at + 2..at + 2 + n], &zone_name) {
                violations.push(e);
            }
            at += 2 + n;
        }
    }

    // Still answering, on both transports.
    let probe = query(zone, RecordType::SOA, 7, true);
    udp.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let _ = udp.send_to(&probe, to);
    let udp_alive = udp
        .recv_from(&mut buf)
        .ok()
        .and_then(|(n, _)| Message::from_vec(&buf[..n]).ok())
        .is_some_and(|m| m.id() == 7 && !m.answers().is_empty());
    let tcp_alive = (|| {
        let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(2)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        let mut framed = (probe.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(&probe);
        s.write_all(&framed).ok()?;
        let mut len = [0u8; 2];
        s.read_exact(&mut len).ok()?;
        let mut m = vec![0u8; u16::from_be_bytes(len) as usize];
        s.read_exact(&mut m).ok()?;
        Message::from_vec(&m)
            .ok()
            .map(|m| m.id() == 7 && !m.answers().is_empty())
    })()
    .unwrap_or(false);
    if !udp_alive {
        violations.push("no UDP answer to a plain query after the fuzz".into());
    }
    if !tcp_alive {
        violations.push("no TCP answer to a plain query after the fuzz".into());
    }
    println!(
        "{{\"udp_sent\":{count},\"udp_answers\":{udp_answers},\"tcp_sent\":{sent},\
         \"tcp_answers\":{tcp_answers},\"seconds\":{:.2},\"violations\":{}}}",
        started.elapsed().as_secs_f64(),
        violations.len()
    );
    for v in violations.iter().take(10) {
        eprintln!("{v}");
    }
    std::process::exit(if violations.is_empty() { 0 } else { 1 });
}
