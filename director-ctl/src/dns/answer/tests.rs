use std::collections::HashMap;

use hickory_proto::op::{Message, Query};
use hickory_proto::rr::rdata::opt::{ClientSubnet, EdnsOption};

use super::*;
use crate::dns::zone::ZoneConfig;

/// Service answers from a table: name → (TTL, answer for A, answer for AAAA).
struct Table(HashMap<Name, (u32, Answer, Answer)>);

impl Services for Table {
    fn select(&self, wire: &[u8], aaaa: bool, _client: Client) -> Result<Selected> {
        let name = Name::read(&mut BinDecoder::new(wire))?.to_lowercase();
        Ok(match self.0.get(&name) {
            None => Selected::NotAService,
            Some((ttl, a, aaaa_answer)) => Selected::Service {
                service: 1,
                ttl: *ttl,
                answer: if aaaa { aaaa_answer.clone() } else { a.clone() },
            },
        })
    }
}

fn n(s: &str) -> Name {
    Name::from_ascii(s).unwrap()
}

fn zones() -> Zones {
    let mut c: ZoneConfig = toml::from_str(
        r#"
origin = "gslb.example.com"
ns = [ { name = "ns1.gslb.example.com", addresses = ["198.51.100.53"] },
       { name = "ns2.gslb.example.com", addresses = ["198.51.100.54"] } ]
serial = 42
records = [
  { name = "mail", type = "A", data = "192.0.2.25" },
  { name = "alias", type = "CNAME", data = "www" },
  { name = "gone", type = "CNAME", data = "nothing" },
]
"#,
    )
    .unwrap();
    let long = "x".repeat(200);
    for i in 0..4 {
        c.records.push(crate::dns::zone::StaticRecord {
            name: "big".into(),
            rtype: "TXT".into(),
            data: format!("\"{i}{long}\""),
            ttl: None,
        });
    }
    let services = [
        "www.gslb.example.com".to_string(),
        "v4only.gslb.example.com".into(),
        "down.gslb.example.com".into(),
    ];
    Zones::new(vec![c.build(&services, 1).unwrap()])
}

fn table() -> Table {
    let addrs = |a: &[&str]| Answer::Addresses {
        addrs: a.iter().map(|s| s.parse().unwrap()).collect(),
        servers: vec![1; a.len()],
        ttl: 30,
        scope: 24,
    };
    let mut t = HashMap::new();
    t.insert(
        n("www.gslb.example.com."),
        (
            30,
            addrs(&["192.0.2.10", "192.0.2.11"]),
            addrs(&["2001:db8::10"]),
        ),
    );
    t.insert(
        n("v4only.gslb.example.com."),
        (
            20,
            addrs(&["192.0.2.12"]),
            Answer::NoServer {
                scope: 0,
                lacks_family: true,
            },
        ),
    );
    t.insert(
        n("down.gslb.example.com."),
        (
            20,
            Answer::NoServer {
                scope: 0,
                lacks_family: false,
            },
            Answer::NoDecision,
        ),
    );
    Table(t)
}

fn query(name: &str, t: RecordType, edns: Option<Edns>) -> Vec<u8> {
    let mut m = Message::new();
    m.set_id(4242).set_recursion_desired(true);
    m.add_query(Query::query(n(name), t));
    if let Some(e) = edns {
        m.set_edns(e);
    }
    m.to_vec().unwrap()
}

fn edns(size: u16) -> Edns {
    let mut e = Edns::new();
    e.set_max_payload(size);
    e
}

fn ask(q: &[u8], t: Transport) -> (Message, Outcome, usize) {
    let (bytes, outcome) = respond(&zones(), &table(), q, "203.0.113.9".parse().unwrap(), t);
    let bytes = bytes.expect("an answer");
    (Message::from_vec(&bytes).unwrap(), outcome, bytes.len())
}

fn udp(name: &str, t: RecordType) -> (Message, Outcome) {
    let (m, o, _) = ask(&query(name, t, Some(edns(1232))), Transport::Udp);
    (m, o)
}

#[test]
fn apex_soa_and_ns_with_glue_are_authoritative() {
    let (m, o) = udp("gslb.example.com.", RecordType::SOA);
    assert_eq!(o, Outcome::Answered);
    assert!(m.authoritative() && !m.recursion_available() && m.recursion_desired());
    assert_eq!(m.id(), 4242);
    assert_eq!(m.answers().len(), 1);
    assert_eq!(m.answers()[0].record_type(), RecordType::SOA);
    assert_eq!(
        m.extensions().as_ref().map(Edns::max_payload),
        Some(UDP_PAYLOAD)
    );

    let (m, _) = udp("GSLB.example.com.", RecordType::NS);
    assert_eq!(m.answers().len(), 2);
    // The question is echoed as asked.
    assert_eq!(m.queries()[0].name().to_string(), "GSLB.example.com.");
    let glue: Vec<String> = m.additionals().iter().map(ToString::to_string).collect();
    assert_eq!(glue.len(), 2, "{glue:?}");
    assert!(glue[0].contains("198.51.100.53") && glue[1].contains("198.51.100.54"));
}

#[test]
fn missing_names_and_types_get_the_soa_with_the_negative_ttl() {
    let (m, o) = udp("nope.gslb.example.com.", RecordType::A);
    assert_eq!(
        (o, m.response_code()),
        (Outcome::NxDomain, ResponseCode::NXDomain)
    );
    assert!(m.answers().is_empty());
    assert_eq!(m.name_servers()[0].record_type(), RecordType::SOA);
    assert_eq!(m.name_servers()[0].ttl(), 3600);

    let (m, o) = udp("mail.gslb.example.com.", RecordType::TXT);
    assert_eq!(
        (o, m.response_code()),
        (Outcome::NoData, ResponseCode::NoError)
    );
    assert!(m.answers().is_empty() && m.name_servers().len() == 1);

    // A service name never gets NXDOMAIN; other types are NODATA with its own short TTL.
    let (m, o) = udp("www.gslb.example.com.", RecordType::MX);
    assert_eq!(o, Outcome::NoData);
    assert_eq!(m.name_servers()[0].ttl(), 30);
    let (m, o) = udp("v4only.gslb.example.com.", RecordType::AAAA);
    assert_eq!(o, Outcome::NoData);
    assert_eq!(m.name_servers()[0].ttl(), 20);
    // Down with no fallback: SERVFAIL, which resolvers do not cache for everyone.
    let (m, o) = udp("down.gslb.example.com.", RecordType::A);
    assert_eq!(
        (o, m.response_code()),
        (Outcome::ServFail, ResponseCode::ServFail)
    );
    assert!(m.name_servers().is_empty());
    let (_, o) = udp("down.gslb.example.com.", RecordType::AAAA);
    assert_eq!(o, Outcome::ServFail);
}

#[test]
fn services_answer_from_the_policy_with_ecs_scope() {
    let mut e = edns(1232);
    e.options_mut().insert(EdnsOption::Subnet(ClientSubnet::new(
        "198.51.100.0".parse().unwrap(),
        24,
        0,
    )));
    let (m, o, _) = ask(
        &query("www.gslb.example.com.", RecordType::A, Some(e)),
        Transport::Udp,
    );
    assert_eq!(o, Outcome::Answered);
    let got: Vec<String> = m
        .answers()
        .iter()
        .map(|r| r.data().unwrap().to_string())
        .collect();
    assert_eq!(got, ["192.0.2.10", "192.0.2.11"]);
    assert!(m.answers().iter().all(|r| r.ttl() == 30));
    let Some(EdnsOption::Subnet(cs)) = m.extensions().as_ref().unwrap().option(EdnsCode::Subnet)
    else {
        panic!("no ECS in the answer")
    };
    let wire: Vec<u8> = cs.try_into().unwrap();
    assert_eq!(wire, [0, 1, 24, 24, 198, 51, 100]);

    // A CNAME inside the zone is followed to the service.
    let (m, o) = udp("alias.gslb.example.com.", RecordType::AAAA);
    assert_eq!(o, Outcome::Answered);
    let types: Vec<RecordType> = m.answers().iter().map(Record::record_type).collect();
    assert_eq!(types, [RecordType::CNAME, RecordType::AAAA]);
    // ... and to a missing name: the target's NXDOMAIN, the CNAME kept.
    let (m, o) = udp("gone.gslb.example.com.", RecordType::A);
    assert_eq!((o, m.answers().len()), (Outcome::NxDomain, 1));
}

#[test]
fn refuses_other_zones_classes_and_transfers() {
    assert_eq!(udp("example.org.", RecordType::A).1, Outcome::Refused);
    assert_eq!(udp("example.com.", RecordType::SOA).1, Outcome::Refused);
    let (m, o) = udp("gslb.example.com.", RecordType::AXFR);
    assert_eq!(
        (o, m.response_code()),
        (Outcome::NotImp, ResponseCode::NotImp)
    );
    assert!(!m.authoritative() && m.answers().is_empty());
    let mut q = Message::new();
    q.add_query({
        let mut x = Query::query(n("gslb.example.com."), RecordType::SOA);
        x.set_query_class(DNSClass::CH);
        x
    });
    let (_, o, _) = ask(&q.to_vec().unwrap(), Transport::Udp);
    assert_eq!(o, Outcome::Refused);
}

#[test]
fn edns_versions_sizes_and_truncation() {
    let mut v1 = edns(1232);
    v1.set_version(1);
    let (m, o, _) = ask(
        &query("gslb.example.com.", RecordType::SOA, Some(v1)),
        Transport::Udp,
    );
    // BADVERS and BADSIG share 16 (RFC 6891, RFC 8945); hickory reads it back as BADSIG.
    assert_eq!((o, u16::from(m.response_code())), (Outcome::BadVers, 16));
    assert_eq!(m.extensions().as_ref().map(Edns::version), Some(0));
    assert!(m.answers().is_empty());

    // Four ~200-byte TXT strings: over 512 without EDNS, under 1232 with it.
    let (m, o, len) = ask(
        &query("big.gslb.example.com.", RecordType::TXT, None),
        Transport::Udp,
    );
    assert_eq!(o, Outcome::Truncated);
    assert!(
        m.truncated() && m.answers().is_empty() && m.extensions().as_ref().is_none() && len <= 512
    );
    let (m, o, len) = ask(
        &query("big.gslb.example.com.", RecordType::TXT, Some(edns(1232))),
        Transport::Udp,
    );
    assert_eq!((o, m.answers().len()), (Outcome::Answered, 4));
    assert!(len > 512 && len <= 1232);
    let (m, o, _) = ask(
        &query("big.gslb.example.com.", RecordType::TXT, None),
        Transport::Tcp,
    );
    assert_eq!(
        (o, m.answers().len(), m.truncated()),
        (Outcome::Answered, 4, false)
    );
}

#[test]
fn any_gets_one_rrset() {
    let (m, o) = udp("gslb.example.com.", RecordType::ANY);
    assert_eq!(o, Outcome::Answered);
    assert_eq!(m.answers().len(), 1);
    assert_eq!(m.answers()[0].record_type(), RecordType::SOA);
    let (m, _) = udp("www.gslb.example.com.", RecordType::ANY);
    assert!(m.answers().iter().all(|r| r.record_type() == RecordType::A));
}

#[test]
fn garbage_gets_formerr_or_nothing_and_never_another_zones_answer() {
    let mut q = query("gslb.example.com.", RecordType::SOA, None);
    q.truncate(q.len() - 3);
    let (bytes, o) = respond(
        &zones(),
        &table(),
        &q,
        "192.0.2.9".parse().unwrap(),
        Transport::Udp,
    );
    let b = bytes.unwrap();
    assert_eq!((o, b.len(), b[3] & 0xf), (Outcome::FormErr, 12, 1));
    assert_eq!(&b[..2], &q[..2]);
    let (bytes, o) = respond(
        &zones(),
        &table(),
        &q[..5],
        "192.0.2.9".parse().unwrap(),
        Transport::Udp,
    );
    assert_eq!((bytes, o), (None, Outcome::Ignored));
    // A response is never answered.
    let mut r = query("gslb.example.com.", RecordType::SOA, None);
    r[2] |= 0x80;
    let (bytes, _) = respond(
        &zones(),
        &table(),
        &r,
        "192.0.2.9".parse().unwrap(),
        Transport::Udp,
    );
    assert!(bytes.is_none());
    // Random bytes never panic, and never answer with data for a zone not ours.
    let mut seed = 0x1234_5678_u64;
    for _ in 0..20_000 {
        let len = (seed % 300) as usize;
        let mut buf = Vec::with_capacity(len);
        for _ in 0..len {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            buf.push(seed as u8);
        }
        if buf.len() > 2 {
            buf[2] &= 0x7f;
        }
        if let (Some(out), _) = respond(
            &zones(),
            &table(),
            &buf,
            "192.0.2.9".parse().unwrap(),
            Transport::Udp,
        ) {
            if let Ok(m) = Message::from_vec(&out) {
                for r in m.all_sections() {
                    assert!(n("gslb.example.com.").zone_of(r.name()), "{r}");
                }
            }
        }
    }
}

#[test]
fn ecs_options_the_kernel_would_refuse_get_formerr() {
    let ask_ecs = |addr: &str, source: u8, scope: u8| {
        let mut e = edns(1232);
        e.options_mut().insert(EdnsOption::Subnet(ClientSubnet::new(
            addr.parse().unwrap(),
            source,
            scope,
        )));
        ask(
            &query("www.gslb.example.com.", RecordType::A, Some(e)),
            Transport::Udp,
        )
        .1
    };
    assert_eq!(ask_ecs("198.51.96.0", 20, 0), Outcome::Answered);
    // Address bits past SOURCE PREFIX-LENGTH, and a SCOPE in a query (RFC 7871 §7.1.2).
    assert_eq!(ask_ecs("198.51.100.0", 20, 0), Outcome::FormErr);
    assert_eq!(ask_ecs("198.51.96.0", 20, 8), Outcome::FormErr);
}

/// A query for www with an OPT record of `options` appended by hand.
fn with_opt(options: &[u8]) -> Vec<u8> {
    let mut q = query("www.gslb.example.com.", RecordType::A, None);
    q[11] = 1;
    q.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0]);
    q.extend_from_slice(&(options.len() as u16).to_be_bytes());
    q.extend_from_slice(options);
    q
}

#[test]
fn ecs_shapes_the_kernel_refuses_are_refused_here_too() {
    let ecs = |addr: &[u8], source: u8| {
        let mut o = vec![0, 8];
        o.extend_from_slice(&(4 + addr.len() as u16).to_be_bytes());
        o.extend_from_slice(&[0, 1, source, 0]);
        o.extend_from_slice(addr);
        o
    };
    let outcome = |opts: &[u8]| ask(&with_opt(opts), Transport::Udp).1;
    assert_eq!(outcome(&ecs(&[198, 51, 100], 24)), Outcome::Answered);
    assert_eq!(outcome(&[]), Outcome::Answered);
    // Other options pass untouched.
    let mut cookie = vec![0, 10, 0, 8];
    cookie.extend_from_slice(&[1; 8]);
    assert_eq!(
        outcome(&[cookie.clone(), ecs(&[198, 51, 100], 24)].concat()),
        Outcome::Answered
    );
    // An address longer than SOURCE needs, and two ECS options.
    assert_eq!(outcome(&ecs(&[198, 51, 100, 0], 24)), Outcome::FormErr);
    let two = [ecs(&[198, 51, 100], 24), ecs(&[203, 0, 113], 24)].concat();
    assert_eq!(outcome(&two), Outcome::FormErr);
}

/// Bytes from hex, for messages recorded from Knot 3.2.
fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn raw(q: &[u8]) -> (Vec<u8>, Outcome) {
    let (bytes, o) = respond(
        &zones(),
        &table(),
        q,
        "203.0.113.9".parse().unwrap(),
        Transport::Udp,
    );
    (bytes.expect("an answer"), o)
}

/// `gslb.example.com.` on the wire.
const APEX: &str = "0467736c62076578616d706c6503636f6d00";
/// An OPT record: UDP size 1232, version 0, no flags or options (dig's and ours).
const OPT: &str = "00002904d0000000000000";

#[test]
fn other_opcodes_get_notimp_with_the_header_echoed_as_knot_does() {
    for op in [1u8, 2, 3, 4, 5, 6, 7, 15] {
        // dig +header-only +opcode=N: RD and AD set, no question. Knot echoes the ID, the
        // opcode and RD.
        let (a, o) = raw(&[0xbe, 0xef, op << 3 | 1, 0x20, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(o, Outcome::NotImp, "opcode {op}");
        assert_eq!(
            a,
            [0xbe, 0xef, 0x80 | op << 3 | 1, 4, 0, 0, 0, 0, 0, 0, 0, 0],
            "opcode {op}"
        );
    }
    // With a question and OPT, both echoed: Knot's answer byte for byte.
    let (a, o) = raw(&unhex(&format!(
        "123409000001000000000001{APEX}00060001{OPT}"
    )));
    assert_eq!(o, Outcome::NotImp);
    assert_eq!(
        a,
        unhex(&format!("123489040001000000000001{APEX}00060001{OPT}"))
    );
    // TC and Z in the query are not echoed (Knot: f9 04).
    let (a, _) = raw(&[0x12, 0x34, 0x7b, 0x40, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(a[2..4], [0xf9, 0x04]);
    // What follows the header need not read as a query's: NOTIMP from the header alone.
    let (a, o) = raw(&[0x12, 0x34, 0x09, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
    assert_eq!(
        (o, &a[..]),
        (
            Outcome::NotImp,
            &[0x12, 0x34, 0x89, 4, 0, 0, 0, 0, 0, 0, 0, 0][..]
        )
    );
    // Slipped out by the rate limit, it keeps its opcode.
    let (a, _) = raw(&unhex(&format!("123431000001000000000000{APEX}00060001")));
    let short = truncated(&a).expect("a truncated answer");
    assert_eq!(short[2..4], [0xb3, 0x04]);
}

#[test]
fn type_0_gets_notimp_whatever_the_zone_or_class() {
    // Knot's answer byte for byte: the question and OPT echoed, not authoritative.
    let (a, o) = raw(&unhex(&format!(
        "123401000001000000000001{APEX}00000001{OPT}"
    )));
    assert_eq!(o, Outcome::NotImp);
    assert_eq!(
        a,
        unhex(&format!("123481040001000000000001{APEX}00000001{OPT}"))
    );
    for (name, t) in [
        ("www.gslb.example.com.", RecordType::ZERO),
        ("nope.gslb.example.com.", RecordType::ZERO),
        ("example.org.", RecordType::ZERO),
    ] {
        let (m, o) = udp(name, t);
        assert_eq!(
            (
                o,
                m.response_code(),
                m.authoritative(),
                m.name_servers().len()
            ),
            (Outcome::NotImp, ResponseCode::NotImp, false, 0),
            "{name}"
        );
    }
    let mut ch = query("gslb.example.com.", RecordType::ZERO, None);
    let len = ch.len();
    ch[len - 1] = 3;
    assert_eq!(raw(&ch).1, Outcome::NotImp);
}

/// A TSIG record under `unknown-key.` (hmac-sha256, signed at 1800000000, fudge 300, a
/// 32-byte MAC, original ID 0x1234): what `dig -y hmac-sha256:unknown-key.:...` sends.
const TSIG: &str = "0b756e6b6e6f776e2d6b65790000fa00ff00000000003d0b686d61632d7368613235360000006b49d200012c0020aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa123400000000";

#[test]
fn tsig_under_an_unknown_key_gets_notauth_and_badkey() {
    // Knot's answer byte for byte: NOTAUTH, not authoritative, the question and OPT, and
    // an unsigned TSIG record (same key and algorithm, MAC size 0, the ID, error 17).
    let (a, o) = raw(&unhex(&format!(
        "123401000001000000000002{APEX}00060001{OPT}{TSIG}"
    )));
    assert_eq!(
        a,
        unhex(&format!(
            "123481090001000000000002{APEX}00060001{OPT}\
             0b756e6b6e6f776e2d6b65790000fa00ff00000000001d0b686d61632d7368613235360000\
             006b49d200012c0000123400110000"
        ))
    );
    assert_ne!(o, Outcome::Answered);
    // Without EDNS, for a service name, for a name not there: the same.
    for name in ["03777777", "046e6f7065"] {
        let q = unhex(&format!(
            "123401000001000000000001{name}{APEX}00010001{TSIG}"
        ));
        let (a, _) = raw(&q);
        let m = Message::from_vec(&a).unwrap();
        assert_eq!(
            (m.response_code(), m.authoritative()),
            (ResponseCode::NotAuth, false)
        );
        assert!(m.answers().is_empty() && m.name_servers().is_empty());
        assert_eq!(a[a.len() - 6..], [0x12, 0x34, 0, 17, 0, 0]);
    }
    // Another zone is refused, unsigned, as Knot does.
    let (a, o) = raw(&unhex(&format!(
        "123401000001000000000001076578616d706c65036f72670000060001{TSIG}"
    )));
    assert_eq!((o, a[3], a[11]), (Outcome::Refused, 5, 0));
    // TSIG before OPT: FORMERR (RFC 8945 §5.2).
    let (a, o) = raw(&unhex(&format!(
        "123401000001000000000002{APEX}00060001{TSIG}{OPT}"
    )));
    assert_eq!((o, a[3] & 0xf), (Outcome::FormErr, 1));
}
