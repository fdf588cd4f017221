//! A signed zone's answers to DO queries carry what a validator needs, each signature
//! checks with the zone's key, and DO=0 answers are as unsigned ones.

use std::collections::BTreeMap;

use director_plan::dnssec::{key::ZoneKey, sign, wire};
use hickory_proto::op::{Edns, Message, Query};
use hickory_proto::rr::{Name, RData, Record, RecordType};

use super::super::answer::{respond, Outcome, Services, Transport, Zones};
use super::super::signed::{wire_name, Signed};
use super::super::zone::ZoneConfig;
use crate::kernel::resolve::{Client, Selected};

struct NoServices;

impl Services for NoServices {
    fn select(&self, _wire: &[u8], _aaaa: bool, _client: Client) -> anyhow::Result<Selected> {
        Ok(Selected::NotAService)
    }
}

const NOW: u64 = 1_800_000_000;

fn key() -> ZoneKey {
    ZoneKey::from_secret(&[3u8; 32]).unwrap()
}

fn zones() -> Zones {
    let c: ZoneConfig = toml::from_str(
        r#"
origin = "gslb.example.com"
ns = [ { name = "ns1.gslb.example.com", addresses = ["198.51.100.53"] },
       { name = "ns2.gslb.example.com", addresses = ["198.51.100.54"] } ]
serial = 42
records = [
  { name = "@", type = "MX", data = "10 mail" },
  { name = "mail", type = "A", data = "192.0.2.25" },
  { name = "info.deep", type = "TXT", data = "\"x\"" },
]
"#,
    )
    .unwrap();
    let mut z = c.build(&[], 1).unwrap();
    z.signed = Some(
        Signed::sign(
            z.apex(),
            &[key()],
            sign::Validity::default(),
            NOW,
            &BTreeMap::new(),
        )
        .unwrap(),
    );
    Zones::new(vec![z])
}

fn ask(name: &str, t: RecordType, dnssec_ok: bool) -> (Message, Outcome) {
    let mut m = Message::new();
    m.set_id(7);
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), t));
    let mut e = Edns::new();
    e.set_max_payload(1232);
    e.set_dnssec_ok(dnssec_ok);
    m.set_edns(e);
    let (bytes, outcome) = respond(
        &zones(),
        &NoServices,
        &m.to_vec().unwrap(),
        "203.0.113.9".parse().unwrap(),
        Transport::Tcp,
    );
    (Message::from_vec(&bytes.unwrap()).unwrap(), outcome)
}

fn raw(r: &Record) -> Vec<u8> {
    match r.data() {
        Some(RData::Unknown { rdata, .. }) => rdata.anything().to_vec(),
        _ => panic!("{r} is not held raw"),
    }
}

/// Every RRset of `section` has an RRSIG that checks with the key, at NOW.
fn all_signed(section: &[Record]) {
    let mut sets: BTreeMap<(Name, RecordType), Vec<Record>> = BTreeMap::new();
    let mut sigs = Vec::new();
    for r in section {
        if r.record_type() == RecordType::RRSIG {
            sigs.push(r.clone());
        } else {
            sets.entry((r.name().to_lowercase(), r.record_type()))
                .or_default()
                .push(r.clone());
        }
    }
    assert!(!sets.is_empty());
    for ((owner, t), set) in sets {
        let wires: Vec<wire::Record> = set
            .iter()
            .map(|r| {
                // The served set as a validator rebuilds it (RFC 4035 §5.3.2): owner, type,
                // RDATA as received, canonical; hickory gives the parsed data back.
                let rdata = match r.data() {
                    Some(RData::Unknown { rdata, .. }) => rdata.anything().to_vec(),
                    _ => {
                        let mut b = Vec::new();
                        let mut e = hickory_proto::serialize::binary::BinEncoder::new(&mut b);
                        e.set_canonical_names(true);
                        hickory_proto::serialize::binary::BinEncodable::emit(
                            r.data().unwrap(),
                            &mut e,
                        )
                        .unwrap();
                        b
                    }
                };
                wire::Record {
                    owner: wire_name(r.name()).unwrap(),
                    rtype: u16::from(r.record_type()),
                    ttl: r.ttl(),
                    rdata,
                }
            })
            .collect();
        let covering: Vec<&Record> = sigs
            .iter()
            .filter(|s| s.name().to_lowercase() == owner)
            .filter(|s| u16::from_be_bytes([raw(s)[0], raw(s)[1]]) == u16::from(t))
            .collect();
        assert!(!covering.is_empty(), "{owner} {t}: no RRSIG in {section:?}");
        for s in covering {
            let (f, _) = sign::rrsig_fields(&raw(s)).unwrap();
            // Served with a TTL at most the original (a negative SOA's is lowered).
            let mut w = wires.clone();
            for r in &mut w {
                r.ttl = f.ttl;
            }
            sign::check(&w, &raw(s), &key().public(), NOW)
                .unwrap_or_else(|e| panic!("{owner} {t}: {e:#}"));
        }
    }
}

#[test]
fn positive_answers_carry_checked_signatures() {
    let (m, o) = ask("gslb.example.com.", RecordType::MX, true);
    assert_eq!(o, Outcome::Answered);
    all_signed(m.answers());
    let (m, _) = ask("gslb.example.com.", RecordType::DNSKEY, true);
    assert!(m
        .answers()
        .iter()
        .any(|r| r.record_type() == RecordType::DNSKEY));
    all_signed(m.answers());
    let (m, _) = ask("gslb.example.com.", RecordType::CDS, true);
    all_signed(m.answers());
}

#[test]
fn nxdomain_and_nodata_are_proven() {
    let (m, o) = ask("nope.gslb.example.com.", RecordType::A, true);
    assert_eq!(o, Outcome::NxDomain);
    all_signed(m.name_servers());
    let nsec: Vec<&Record> = m
        .name_servers()
        .iter()
        .filter(|r| r.record_type() == RecordType::NSEC)
        .collect();
    // "nope" sorts between the apex... and info.deep: one NSEC covers it and the wildcard.
    assert!(!nsec.is_empty(), "{m:?}");

    let (m, o) = ask("mail.gslb.example.com.", RecordType::TXT, true);
    assert_eq!(o, Outcome::NoData);
    all_signed(m.name_servers());
    let own = m
        .name_servers()
        .iter()
        .find(|r| r.record_type() == RecordType::NSEC)
        .unwrap();
    assert_eq!(
        own.name().to_lowercase(),
        Name::from_ascii("mail.gslb.example.com.").unwrap()
    );

    // An empty non-terminal: NODATA, proven by the NSEC that covers it.
    let (m, o) = ask("deep.gslb.example.com.", RecordType::A, true);
    assert_eq!(o, Outcome::NoData);
    all_signed(m.name_servers());
}

#[test]
fn without_do_nothing_is_added() {
    for (name, t) in [
        ("gslb.example.com.", RecordType::MX),
        ("nope.gslb.example.com.", RecordType::A),
    ] {
        let (m, _) = ask(name, t, false);
        for r in m
            .answers()
            .iter()
            .chain(m.name_servers())
            .chain(m.additionals())
        {
            assert!(
                !matches!(r.record_type(), RecordType::RRSIG | RecordType::NSEC),
                "{r}"
            );
        }
    }
}
