//! Mutation fuzz against a model written from the RFCs.

use std::net::IpAddr;

use director_common::counters::Reason;
use director_common::select::Mode;
use director_ctl::ops;
use director_tests::fixture::{route_set, XDP_DROP, XDP_PASS, XDP_TX};
use director_tests::packets::*;
use hickory_proto::op::{Message, MessageType, OpCode};
use hickory_proto::rr::rdata::opt::EdnsOption;
use hickory_proto::rr::{DNSClass, RecordType};

use crate::check::check_answer;
use crate::setup::{addr_set, hex, ip, setup, v4, v6};
use crate::{FRA, NAME, NYC, QNAME, TTL};

/// xorshift64*: deterministic, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn byte(&mut self) -> u8 {
        self.next() as u8
    }
}

/// The fuzzed services: names of odd (17) and even (16) wire length, so the answer's
/// checksum is exercised at both byte parities.
const FUZZ_NAMES: [&str; 2] = [NAME, EVEN_NAME];
const EVEN_NAME: &str = "ab.example.com";

/// Byte values that mean something somewhere in these frames.
const INTERESTING: [u8; 12] = [
    0x00, 0x01, 0x08, 0x11, 0x1c, 0x20, 0x29, 0x3f, 0x40, 0x80, 0xc0, 0xff,
];

/// One to three random edits, never making `b` shorter than `min_len`.
fn mutate_bytes(rng: &mut Rng, b: &mut Vec<u8>, min_len: usize) {
    for _ in 0..1 + rng.below(3) {
        if b.is_empty() {
            b.push(rng.byte());
            continue;
        }
        let at = rng.below(b.len());
        match rng.below(8) {
            0 => b[at] ^= 1 << rng.below(8),
            1 => b[at] = rng.byte(),
            2 => b[at] = INTERESTING[rng.below(INTERESTING.len())],
            // Letter case: the edit most likely to leave a query answerable.
            3 => b[at] ^= 0x20,
            4 if b.len() > min_len => b.truncate(min_len + rng.below(b.len() - min_len)),
            5 => (0..1 + rng.below(8)).for_each(|_| b.push(rng.byte())),
            6 => b.insert(at, rng.byte()),
            7 if b.len() > min_len => {
                b.remove(at);
            }
            _ => {}
        }
    }
}

/// Either the frame's own bytes (headers and lengths included), or only the DNS message
/// with the frame rebuilt around it, so that lengths agree and edits reach the DNS parser.
fn mutate(rng: &mut Rng, flow: &Flow, dns: &[u8]) -> Vec<u8> {
    if rng.below(2) == 0 {
        let mut f = udp_frame(flow, dns);
        mutate_bytes(rng, &mut f, ETH_LEN);
        f
    } else {
        let mut d = dns.to_vec();
        mutate_bytes(rng, &mut d, 0);
        udp_frame(flow, &d)
    }
}

/// The model's view of a frame: UDP to port 53 in a frame shape director parses, and a
/// message that director_common::query::parse accepts for the owned name.
fn model_query(frame: &[u8]) -> Result<(UdpFrame, director_common::query::ParsedQuery), String> {
    let f = parse_udp(frame)?;
    ensure!(f.dst_port == DNS_PORT, "UDP to port {}", f.dst_port);
    let q = director_common::query::parse(&f.payload)
        .map_err(|r| format!("query::parse: {}", r.name()))?;
    let name = &q.name.lower[..q.name.len];
    ensure!(
        FUZZ_NAMES
            .iter()
            .any(|n| director_common::name::encode(n).unwrap() == name),
        "not an owned name"
    );
    Ok((f, q))
}

/// hickory's view of the same input: a standard query with one A/AAAA IN question.
fn hickory_query(dns: &[u8]) -> Result<Message, String> {
    let m = Message::from_vec(dns).map_err(|e| format!("hickory cannot read the query: {e}"))?;
    ensure!(
        m.message_type() == MessageType::Query && m.op_code() == OpCode::Query,
        "not a standard query"
    );
    ensure!(m.queries().len() == 1, "{} questions", m.queries().len());
    let q = &m.queries()[0];
    ensure!(
        matches!(q.query_type(), RecordType::A | RecordType::AAAA),
        "type {}",
        q.query_type()
    );
    ensure!(q.query_class() == DNSClass::IN, "class {}", q.query_class());
    let name = q.name().to_lowercase().to_ascii();
    ensure!(
        FUZZ_NAMES.iter().any(|n| format!("{n}.") == name),
        "name {}",
        q.name()
    );
    Ok(m)
}

/// Everything an XDP_TX must satisfy for this input.
fn check_fuzz_answer(input: &[u8], output: &[u8]) -> Result<(), String> {
    let (f, _) = model_query(input)?;
    let qm = hickory_query(&f.payload)?;
    let a = check_answer(input, output)?;
    let rtype = qm.queries()[0].query_type();
    let allowed = addr_set(&[FRA.addr(rtype), NYC.addr(rtype)]);
    ensure!(
        !a.addrs.is_empty() && addr_set(&a.addrs).is_subset(&allowed),
        "addresses {:?}",
        a.addrs
    );
    ensure!(
        a.addrs.len() == addr_set(&a.addrs).len(),
        "an address repeated: {:?}",
        a.addrs
    );
    ensure!(a.ttls.iter().all(|t| *t == TTL), "TTLs {:?}", a.ttls);
    Ok(())
}

/// Whether the model expects an answer: a query for the owned name whose answer fits.
/// Every client has a decision and both servers are up with both families, so nothing
/// else can stop it.
fn model_answers(frame: &[u8]) -> bool {
    let Ok((_, q)) = model_query(frame) else {
        return false;
    };
    let records = 2 * if q.v6 { 28 } else { 16 };
    let opt = match (q.edns, q.ecs) {
        (None, _) => 0,
        (Some(_), None) => 11,
        (Some(_), Some(e)) => 11 + 8 + e.addr_len(),
    };
    q.question_end + records + opt <= q.edns.unwrap_or(512) as usize
}

/// The model's view of who may be answered (written from the RFCs with std's address
/// predicates, not from director-common's `peers`): `None` when the frame's addresses,
/// port and checksum allow an answer, else the reason the kernel gives, checked in the
/// kernel's order. Only for frames to UDP port 53.
fn model_peer(frame: &[u8]) -> Option<Reason> {
    let f = parse_udp(frame).ok()?;
    if f.dst_port != DNS_PORT {
        return None;
    }
    let group_mac = |m: &[u8; 6]| m[0] & 1 == 1;
    match (f.src, f.dst) {
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            if f.udp_checksum == 0 {
                return Some(Reason::BadChecksum);
            }
            if src.is_unspecified()
                || src.is_loopback()
                || src.is_multicast()
                || src.to_ipv4_mapped().is_some()
            {
                return Some(Reason::BadSource);
            }
            if group_mac(&f.src_mac) {
                return Some(Reason::BadSource);
            }
            if [0, 7, 19].contains(&f.src_port) {
                return Some(Reason::ReflectingPort);
            }
            if group_mac(&f.dst_mac) || dst.is_multicast() {
                return Some(Reason::GroupDestination);
            }
            (dst != SERVER_V6).then_some(Reason::NotForUs)
        }
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            let sum: u32 = f
                .ip_header
                .chunks(2)
                .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
                .sum();
            if (sum & 0xffff) + (sum >> 16) != 0xffff {
                return Some(Reason::BadChecksum);
            }
            let o = src.octets()[0];
            if o == 0 || src.is_loopback() || src.is_multicast() || o >= 240 {
                return Some(Reason::BadSource);
            }
            if dst.is_multicast() || dst.is_broadcast() || dst.octets()[0] >= 240 {
                return Some(Reason::GroupDestination);
            }
            if group_mac(&f.src_mac) {
                return Some(Reason::BadSource);
            }
            if [0, 7, 19].contains(&f.src_port) {
                return Some(Reason::ReflectingPort);
            }
            if group_mac(&f.dst_mac) {
                return Some(Reason::GroupDestination);
            }
            (dst != SERVER_V4).then_some(Reason::NotForUs)
        }
        _ => None,
    }
}

#[test]
fn mutation_fuzz() {
    let routes = [
        ("0.0.0.0/0", "fra-1,nyc-1"),
        ("::/0", "fra-1,nyc-1"),
        ("203.0.113.0/24", NYC.name),
        ("2001:db8:1::/48", FRA.name),
    ];
    let mut fx = setup(2, &routes);
    ops::service_add(fx.maps(), EVEN_NAME, TTL, 2, Mode::Random).unwrap();
    for (prefix, servers) in routes {
        route_set(fx.maps(), EVEN_NAME, prefix, servers).unwrap();
    }
    let mut cookie = with_ecs(query(7, QNAME, RecordType::A), ip("203.0.113.0"), 24, 0);
    cookie
        .extensions_mut()
        .as_mut()
        .unwrap()
        .options_mut()
        .insert(EdnsOption::Unknown(10, vec![0x5a; 8]));
    let seeds: Vec<(Flow, Message)> = vec![
        (v4(), query(1, QNAME, RecordType::A)),
        (
            v6().with_vlan(42),
            with_edns(query(2, QNAME, RecordType::AAAA), 4096),
        ),
        (
            v4().with_vlan(43),
            with_ecs(query(3, QNAME, RecordType::A), ip("203.0.113.0"), 24, 0),
        ),
        (
            v6(),
            with_ecs(query(4, QNAME, RecordType::AAAA), ip("2001:db8:1::"), 48, 0),
        ),
        (
            v4(),
            with_ecs(query(5, QNAME, RecordType::AAAA), ip("0.0.0.0"), 0, 0),
        ),
        (v6(), cookie),
        (
            v4(),
            with_edns(query(8, "Ab.ExAmPlE.cOm.", RecordType::A), 1232),
        ),
        (
            v6().with_vlan(44),
            with_ecs(
                query(9, "aB.example.COM.", RecordType::AAAA),
                ip("2001:db8:1:2::"),
                63,
                0,
            ),
        ),
    ];
    const CASES_PER_SEED: usize = 20_000;
    let mut rng = Rng(0x0d15_ec7e_d00d_f00d);
    let (mut tx, mut pass, mut drop) = (0usize, 0usize, 0usize);
    let mut failures = Vec::new();
    for (flow, m) in &seeds {
        let dns = wire(m);
        // The seeds themselves are answered: otherwise the fuzz proves little.
        let seed = udp_frame(flow, &dns);
        let (verdict, out) = fx.run(&seed);
        assert_eq!(verdict, XDP_TX, "seed id {} not answered", m.id());
        check_fuzz_answer(&seed, &out).unwrap_or_else(|e| panic!("seed id {}: {e}", m.id()));
        for case in 0..CASES_PER_SEED {
            let input = mutate(&mut rng, flow, &dns);
            let (verdict, out) = fx.run(&input);
            let problem = match verdict {
                XDP_TX => {
                    tx += 1;
                    match model_peer(&input) {
                        Some(r) => Some(format!("answered what the model refuses: {}", r.name())),
                        None => check_fuzz_answer(&input, &out).err(),
                    }
                }
                XDP_PASS => {
                    pass += 1;
                    if out != input {
                        Some("passed but changed".to_string())
                    } else if model_answers(&input) && model_peer(&input).is_none() {
                        Some("passed a query the model answers".to_string())
                    } else {
                        None
                    }
                }
                XDP_DROP => {
                    drop += 1;
                    // The kernel checks addresses before it reads the message, so a cut
                    // frame with bad headers may be dropped rather than passed as cut:
                    // the model judges its headers as if the rest were there.
                    let mut whole = input.clone();
                    whole.resize(input.len() + 1500, 0);
                    match model_peer(&whole) {
                        Some(r) if r.drops() => None,
                        r => Some(format!("dropped; the model says {r:?}")),
                    }
                }
                v => Some(format!("verdict {v}")),
            };
            if let Some(p) = problem {
                failures.push(format!(
                    "seed id {} case {case}: {p}\n  in  {}\n  out {}",
                    m.id(),
                    hex(&input),
                    hex(&out)
                ));
            }
        }
    }
    eprintln!("mutation fuzz: {tx} answered, {pass} passed, {drop} dropped");
    assert!(
        failures.is_empty(),
        "{} of {} cases failed; first ones:\n{}",
        failures.len(),
        tx + pass + drop,
        failures[..failures.len().min(8)].join("\n")
    );
    // The mutations must leave a fair share answerable, or the answer checks go unused.
    assert!(
        tx * 10 >= tx + pass + drop,
        "only {tx} of {} mutated frames answered",
        tx + pass + drop
    );
}
