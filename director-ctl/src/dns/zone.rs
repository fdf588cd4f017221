//! A zone director owns: its `[[zone]]` config, checked, and the static data built from it
//! (SOA, NS, glue, static records) with the lookups an authoritative answer needs. Pure: the
//! service answers come from the kernel's maps, through the caller.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use anyhow::{anyhow, bail, Context, Result};
use hickory_proto::rr::rdata::{A, AAAA, NS, SOA};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use hickory_proto::serialize::txt::RDataParser;
use serde::Deserialize;

/// DistributedDirector's example SOA timers: refresh 6 h, retry 15 min, expire 90 days,
/// minimum 1 day.
fn refresh() -> u32 {
    6 * 3600
}
fn retry() -> u32 {
    15 * 60
}
fn expire() -> u32 {
    90 * 86400
}
fn minimum() -> u32 {
    86400
}
fn hour() -> u32 {
    3600
}

/// `[[zone]]` as the config spells it.
#[derive(Debug, Deserialize, serde::Serialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ZoneConfig {
    /// The zone's apex, e.g. `gslb.example.com`.
    pub origin: String,
    /// At least two name servers; those inside the zone need their addresses (glue).
    pub ns: Vec<NsConfig>,
    /// Where the userspace server listens (UDP and TCP port 53). Default: the addresses of
    /// the zone's NS entries.
    pub listen: Option<Vec<IpAddr>>,
    /// The SOA's primary name server (default: the first NS).
    pub mname: Option<String>,
    /// The SOA's mailbox as a name (default: `hostmaster.<origin>`).
    pub rname: Option<String>,
    #[serde(default = "refresh")]
    pub refresh: u32,
    #[serde(default = "retry")]
    pub retry: u32,
    #[serde(default = "expire")]
    pub expire: u32,
    /// The SOA's minimum: with its TTL, the negative-caching TTL (RFC 2308).
    #[serde(default = "minimum")]
    pub minimum: u32,
    /// A fixed serial; default: the time of the last change (the config file's mtime).
    pub serial: Option<u32>,
    /// TTL of the SOA, NS, glue and static records without their own.
    #[serde(default = "hour")]
    pub ttl: u32,
    #[serde(default)]
    pub records: Vec<StaticRecord>,
    /// DNSSEC: the zone's keys and signatures' validity; without it, answers are unsigned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dnssec: Option<super::dnssec_config::DnssecConfig>,
}

#[derive(Debug, Deserialize, serde::Serialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NsConfig {
    pub name: String,
    #[serde(default)]
    pub addresses: Vec<IpAddr>,
}

/// A record for a name that is not a service: `name` relative to the origin (`@` for the
/// apex) or absolute with a trailing dot; `data` in zone-file syntax.
#[derive(Debug, Deserialize, serde::Serialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StaticRecord {
    pub name: String,
    #[serde(rename = "type")]
    pub rtype: String,
    pub data: String,
    pub ttl: Option<u32>,
}

/// Record types a static record may have.
const STATIC_TYPES: [RecordType; 5] = [
    RecordType::A,
    RecordType::AAAA,
    RecordType::CNAME,
    RecordType::TXT,
    RecordType::MX,
];

/// A built zone: the static data by owner name (lower case), and the names that exist
/// without data of their own (empty non-terminals, service names).
#[derive(Debug, Clone)]
pub struct Zone {
    pub origin: Name,
    pub soa: Record,
    pub ns: Vec<Record>,
    /// Every static RRset, glue included, by owner; the apex's SOA and NS too.
    pub data: BTreeMap<Name, Vec<Record>>,
    /// Names that exist: owners of data, service names, and every name between them and
    /// the apex.
    pub exists: BTreeSet<Name>,
    pub listen: Vec<IpAddr>,
    /// Its signatures, when it is signed (see [`super::signed`]).
    pub signed: Option<super::signed::Signed>,
}

impl Zone {
    /// The parts signing reads and adds to.
    pub fn apex(&mut self) -> super::signed::Apex<'_> {
        super::signed::Apex {
            origin: &self.origin,
            soa: &self.soa,
            data: &mut self.data,
        }
    }
}

fn name_in(text: &str, origin: &Name) -> Result<Name> {
    let text = text.trim();
    if text == "@" {
        return Ok(origin.clone());
    }
    let n = Name::from_ascii(text).map_err(|e| anyhow!("bad name {text:?}: {e}"))?;
    let n = if n.is_fqdn() {
        n
    } else {
        n.append_domain(origin)
            .map_err(|e| anyhow!("{text:?} under {origin}: {e}"))?
    };
    Ok(n.to_lowercase())
}

pub(crate) fn absolute(text: &str) -> Result<Name> {
    let mut n = Name::from_ascii(text.trim().trim_end_matches('.'))
        .map_err(|e| anyhow!("bad name {text:?}: {e}"))?;
    n.set_fqdn(true);
    Ok(n.to_lowercase())
}

impl ZoneConfig {
    /// A zone with the defaults for everything but its origin, NS and mailbox (`zone add`).
    pub fn new(origin: String, ns: Vec<NsConfig>, rname: Option<String>) -> ZoneConfig {
        ZoneConfig {
            origin,
            ns,
            listen: None,
            mname: None,
            rname,
            refresh: refresh(),
            retry: retry(),
            expire: expire(),
            minimum: minimum(),
            serial: None,
            ttl: hour(),
            records: Vec::new(),
            dnssec: None,
        }
    }

    /// The zone's apex as a name.
    pub fn origin_name(&self) -> Result<Name> {
        absolute(&self.origin)
    }

    /// Builds the zone. `services` are the service names the kernel answers (any case,
    /// without a trailing dot); those under the origin exist in it. `serial` is used when
    /// the config gives none.
    pub fn build(&self, services: &[String], serial: u32) -> Result<Zone> {
        let origin = self.origin_name()?;
        if origin.is_root() {
            bail!("origin must not be the root");
        }
        if self.ns.len() < 2 {
            bail!(
                "needs at least two NS names (RFC 1034 §4.1), has {}",
                self.ns.len()
            );
        }
        let mut data: BTreeMap<Name, Vec<Record>> = BTreeMap::new();
        let mut ns = Vec::new();
        let mut listen = Vec::new();
        let mut seen_ns = BTreeSet::new();
        for (i, n) in self.ns.iter().enumerate() {
            let at = || format!("ns #{} ({:?})", i + 1, n.name);
            let name = absolute(&n.name).with_context(at)?;
            if !seen_ns.insert(name.clone()) {
                bail!("{}: listed twice", at());
            }
            ns.push(Record::from_rdata(
                origin.clone(),
                self.ttl,
                RData::NS(NS(name.clone())),
            ));
            if origin.zone_of(&name) && n.addresses.is_empty() {
                bail!(
                    "{}: a name server inside the zone needs its addresses (glue)",
                    at()
                );
            }
            // Out-of-zone addresses are not served as data, but they are still where this
            // server is asked: they count as listen addresses like the glue.
            for a in &n.addresses {
                if origin.zone_of(&name) {
                    let rdata = match a {
                        IpAddr::V4(v4) => RData::A(A(*v4)),
                        IpAddr::V6(v6) => RData::AAAA(AAAA(*v6)),
                    };
                    data.entry(name.clone())
                        .or_default()
                        .push(Record::from_rdata(name.clone(), self.ttl, rdata));
                }
                if !listen.contains(a) {
                    listen.push(*a);
                }
            }
        }
        if let Some(l) = &self.listen {
            if l.is_empty() {
                bail!("listen is empty");
            }
            listen = l.clone();
        }
        if listen.is_empty() {
            bail!("no listen addresses: give the NS entries their addresses, or listen");
        }
        let mname = match &self.mname {
            Some(m) => absolute(m).context("mname")?,
            None => absolute(&self.ns[0].name)?,
        };
        let rname = match &self.rname {
            Some(r) => absolute(r).context("rname")?,
            None => Name::from_ascii("hostmaster")
                .and_then(|h| h.append_domain(&origin))
                .map_err(|e| anyhow!("rname: {e}"))?,
        };
        let soa = Record::from_rdata(
            origin.clone(),
            self.ttl,
            RData::SOA(SOA::new(
                mname,
                rname,
                self.serial.unwrap_or(serial),
                self.refresh as i32,
                self.retry as i32,
                self.expire as i32,
                self.minimum,
            )),
        );
        for (what, v) in [
            ("refresh", self.refresh),
            ("retry", self.retry),
            ("expire", self.expire),
        ] {
            if v == 0 || v > i32::MAX as u32 {
                bail!("{what} {v} must be from 1 to {}", i32::MAX);
            }
        }
        data.entry(origin.clone()).or_default().push(soa.clone());
        data.entry(origin.clone())
            .or_default()
            .extend(ns.iter().cloned());

        let mut service_names = BTreeSet::new();
        for s in services {
            let n = absolute(s).with_context(|| format!("service {s:?}"))?;
            if n == origin {
                bail!(
                    "the origin is the service {s:?}: its SOA and NS would be hidden by the \
                     service's answers; make the zone its parent (e.g. the service under \
                     {origin})"
                );
            }
            if origin.zone_of(&n) {
                service_names.insert(n);
            }
        }
        for (i, r) in self.records.iter().enumerate() {
            let at = || format!("records #{} ({:?} {})", i + 1, r.name, r.rtype);
            let owner = name_in(&r.name, &origin).with_context(at)?;
            if !origin.zone_of(&owner) {
                bail!("{}: {owner} is not inside the zone {origin}", at());
            }
            let rtype: RecordType = r
                .rtype
                .to_ascii_uppercase()
                .parse()
                .map_err(|_| anyhow!("{}: unknown type {:?}", at(), r.rtype))?;
            if !STATIC_TYPES.contains(&rtype) {
                bail!(
                    "{}: type {rtype} is not one of A, AAAA, CNAME, TXT, MX",
                    at()
                );
            }
            if service_names.contains(&owner) {
                bail!(
                    "{}: {owner} is a service; its answers come from its decisions",
                    at()
                );
            }
            if rtype == RecordType::CNAME && owner == origin {
                bail!("{}: a CNAME at the apex would hide its SOA and NS", at());
            }
            let rdata = parse_rdata(rtype, &r.data, &origin)
                .with_context(|| format!("{}: data {:?}", at(), r.data))?;
            let rec = Record::from_rdata(owner.clone(), r.ttl.unwrap_or(self.ttl), rdata);
            let set = data.entry(owner.clone()).or_default();
            let has_cname = set.iter().any(|x| x.record_type() == RecordType::CNAME);
            if (rtype == RecordType::CNAME && !set.is_empty()) || has_cname {
                bail!("{}: a CNAME cannot share its name with other data", at());
            }
            if set.iter().any(|x| x.data() == rec.data()) {
                bail!("{}: the same record is given twice", at());
            }
            set.push(rec);
        }
        // An RRset has one TTL (RFC 2181 §5.2): the lowest given wins for all of them.
        for set in data.values_mut() {
            let types: BTreeSet<RecordType> = set.iter().map(Record::record_type).collect();
            for t in types {
                let ttl = set
                    .iter()
                    .filter(|r| r.record_type() == t)
                    .map(Record::ttl)
                    .min()
                    .unwrap_or(self.ttl);
                for r in set.iter_mut().filter(|r| r.record_type() == t) {
                    r.set_ttl(ttl);
                }
            }
        }
        let mut exists = BTreeSet::new();
        for n in data.keys().chain(service_names.iter()) {
            let mut n = n.clone();
            while origin.zone_of(&n) && exists.insert(n.clone()) && n != origin {
                n = n.base_name();
            }
        }
        Ok(Zone {
            origin,
            soa,
            ns,
            data,
            exists,
            listen,
            signed: None,
        })
    }
}

fn parse_rdata(rtype: RecordType, text: &str, origin: &Name) -> Result<RData> {
    let mut lexer_tokens = Vec::new();
    // Zone-file syntax: quoted strings for TXT, names relative to the origin.
    let mut rest = text.trim();
    while !rest.is_empty() {
        if let Some(q) = rest.strip_prefix('"') {
            let end = q
                .find('"')
                .ok_or_else(|| anyhow!("an unterminated quoted string"))?;
            lexer_tokens.push(q[..end].to_string());
            rest = q[end + 1..].trim_start();
        } else {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            lexer_tokens.push(rest[..end].to_string());
            rest = rest[end..].trim_start();
        }
    }
    if lexer_tokens.is_empty() {
        bail!("empty");
    }
    RData::parse(rtype, lexer_tokens.iter().map(String::as_str), Some(origin))
        .map_err(|e| anyhow!("{e}"))
}

/// What a name holds in a zone.
#[derive(Debug, PartialEq)]
pub enum Found<'a> {
    /// Records of the asked type (or the name's CNAME when it has one).
    Records(&'a [Record], Vec<&'a Record>),
    /// The name exists without the asked type.
    NoData,
    /// No such name.
    NxDomain,
}

impl Zone {
    /// The static data for `name` (lower case) and `rtype`.
    pub fn find(&self, name: &Name, rtype: RecordType) -> Found<'_> {
        let Some(set) = self.data.get(name) else {
            return if self.exists.contains(name) {
                Found::NoData
            } else {
                Found::NxDomain
            };
        };
        let hits: Vec<&Record> = set
            .iter()
            .filter(|r| {
                r.record_type() == rtype
                    || (r.record_type() == RecordType::CNAME && rtype != RecordType::CNAME)
            })
            .collect();
        if hits.is_empty() {
            Found::NoData
        } else {
            Found::Records(set, hits)
        }
    }

    /// Address records for in-zone NS names (glue).
    pub fn glue(&self) -> Vec<&Record> {
        self.ns
            .iter()
            .filter_map(|r| match r.data() {
                Some(RData::NS(NS(n))) => self.data.get(&n.to_lowercase()),
                _ => None,
            })
            .flatten()
            .filter(|r| matches!(r.record_type(), RecordType::A | RecordType::AAAA))
            .collect()
    }

    pub fn serial(&self) -> u32 {
        match self.soa.data() {
            Some(RData::SOA(s)) => s.serial(),
            _ => 0,
        }
    }

    /// The zone's static part as a zone file (RFC 1035 master format): the SOA first.
    pub fn export(&self) -> String {
        let mut out = format!("$ORIGIN {}\n{}\n", self.origin, zone_line(&self.soa));
        for set in self.data.values() {
            for r in set.iter().filter(|r| r.record_type() != RecordType::SOA) {
                out.push_str(&zone_line(r));
                out.push('\n');
            }
        }
        out
    }
}

/// One record in master-file syntax. TXT strings are quoted and escaped here: hickory's
/// `Display` runs them together; DNSSEC records (held as raw RDATA) are written here too.
pub(crate) fn zone_line(r: &Record) -> String {
    let data = match r.data() {
        Some(RData::TXT(t)) => t
            .iter()
            .map(|s| {
                let mut q = String::from("\"");
                for &b in s.iter() {
                    match b {
                        b'"' | b'\\' => {
                            q.push('\\');
                            q.push(b as char);
                        }
                        0x20..=0x7e => q.push(b as char),
                        _ => q.push_str(&format!("\\{b:03}")),
                    }
                }
                q.push('"');
                q
            })
            .collect::<Vec<_>>()
            .join(" "),
        Some(RData::Unknown { code, rdata }) => {
            super::presentation::rdata_text(u16::from(*code), rdata.anything()).unwrap_or_default()
        }
        Some(d) => d.to_string(),
        None => String::new(),
    };
    format!("{} {} IN {} {data}", r.name(), r.ttl(), r.record_type())
}

/// The SOA record of the negative answers: its TTL is what resolvers cache a negative
/// answer for (RFC 2308 §5: the lower of the SOA's TTL and its minimum), so `negative_ttl`
/// caps it.
pub fn negative_soa(zone: &Zone, negative_ttl: u32) -> Record {
    let mut soa = zone.soa.clone();
    let minimum = match soa.data() {
        Some(RData::SOA(s)) => s.minimum(),
        _ => negative_ttl,
    };
    soa.set_ttl(soa.ttl().min(minimum).min(negative_ttl));
    soa
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn config() -> ZoneConfig {
        toml::from_str(
            r#"
origin = "gslb.example.com"
ns = [ { name = "ns1.gslb.example.com", addresses = ["198.51.100.53", "2001:db8::53"] },
       { name = "ns2.example.net." } ]
serial = 7
records = [
  { name = "@", type = "MX", data = "10 mail" },
  { name = "mail", type = "A", data = "192.0.2.25" },
  { name = "info.deep", type = "TXT", data = "\"hello world\" \"two\"", ttl = 60 },
  { name = "alias", type = "CNAME", data = "www" },
]
"#,
        )
        .unwrap()
    }

    fn n(s: &str) -> Name {
        absolute(s).unwrap()
    }

    #[test]
    fn builds_soa_ns_glue_and_static_records_with_dd_defaults() {
        let z = config()
            .build(&["www.gslb.example.com".into()], 99)
            .unwrap();
        let Some(RData::SOA(soa)) = z.soa.data() else {
            panic!("no SOA")
        };
        assert_eq!(
            (
                soa.serial(),
                soa.refresh(),
                soa.retry(),
                soa.expire(),
                soa.minimum()
            ),
            (7, 21600, 900, 7_776_000, 86400)
        );
        assert_eq!(soa.mname(), &n("ns1.gslb.example.com"));
        assert_eq!(soa.rname(), &n("hostmaster.gslb.example.com"));
        assert_eq!(z.ns.len(), 2);
        assert_eq!(z.glue().len(), 2);
        assert_eq!(
            z.listen,
            vec![
                "198.51.100.53".parse::<IpAddr>().unwrap(),
                "2001:db8::53".parse().unwrap()
            ]
        );
        match z.find(&n("gslb.example.com"), RecordType::MX) {
            Found::Records(_, hits) => {
                assert_eq!(
                    hits[0].to_string().split_whitespace().last(),
                    Some("mail.gslb.example.com.")
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(z.find(&n("alias.gslb.example.com"), RecordType::A), Found::Records(_, h) if h[0].record_type() == RecordType::CNAME)
        );
        assert_eq!(
            z.find(&n("deep.gslb.example.com"), RecordType::A),
            Found::NoData
        );
        assert_eq!(
            z.find(&n("www.gslb.example.com"), RecordType::MX),
            Found::NoData
        );
        assert_eq!(
            z.find(&n("mail.gslb.example.com"), RecordType::TXT),
            Found::NoData
        );
        assert_eq!(
            z.find(&n("nope.gslb.example.com"), RecordType::A),
            Found::NxDomain
        );
    }

    #[test]
    fn refuses_what_a_zone_cannot_hold_naming_the_entry() {
        let err = |edit: &dyn Fn(&mut ZoneConfig)| {
            let mut c = config();
            edit(&mut c);
            format!(
                "{:#}",
                c.build(&["www.gslb.example.com".into()], 1).unwrap_err()
            )
        };
        assert!(err(&|c| c.ns.truncate(1)).contains("at least two NS"));
        assert!(err(&|c| c.ns[0].addresses.clear()).contains("needs its addresses (glue)"));
        assert!(err(&|c| c.records[1].data = "not-an-address".into()).contains("records #2"));
        assert!(err(&|c| c.records[0].rtype = "SRV".into()).contains("not one of A, AAAA"));
        assert!(err(&|c| c.records[1].name = "www".into()).contains("is a service"));
        assert!(err(&|c| c.records[1].name = "mail.example.org.".into()).contains("not inside"));
        assert!(err(&|c| c.records[3].name = "mail".into()).contains("CNAME cannot share"));
        assert!(err(&|c| c.records[3].name = "@".into()).contains("apex"));
        // A zone whose apex is a service: its SOA and NS would be hidden.
        let mut c = config();
        c.origin = "www.gslb.example.com".into();
        c.ns[0].name = "ns1.www.gslb.example.com".into();
        let e = format!(
            "{:#}",
            c.build(&["WWW.gslb.example.com".into()], 1).unwrap_err()
        );
        assert!(e.contains("the origin is the service"), "{e}");
    }

    #[test]
    fn an_rrset_gets_one_ttl_and_negative_answers_are_capped() {
        let mut c = config();
        c.records.push(StaticRecord {
            name: "mail".into(),
            rtype: "A".into(),
            data: "192.0.2.26".into(),
            ttl: Some(120),
        });
        let z = c.build(&[], 1).unwrap();
        let set = &z.data[&n("mail.gslb.example.com")];
        assert!(set.iter().all(|r| r.ttl() == 120));
        assert_eq!(negative_soa(&z, 30).ttl(), 30);
        assert_eq!(negative_soa(&z, 1_000_000).ttl(), 3600);
    }
}
