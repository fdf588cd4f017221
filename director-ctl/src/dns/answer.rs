//! One DNS query in, one answer out, for the zones director owns: the userspace half of the
//! authoritative server (the XDP program answers A/AAAA for service names over UDP; what it
//! passes and everything else lands here). Wire format by hickory-proto. Pure but for the
//! service answers, which come through [`Services`] (the kernel's maps, in `run`).

use std::borrow::Cow;
use std::net::IpAddr;

use anyhow::Result;
use hickory_proto::op::{Edns, Header, Message, ResponseCode};
use hickory_proto::rr::rdata::opt::{ClientSubnet, EdnsCode, EdnsOption};
use hickory_proto::rr::rdata::{A, AAAA, CNAME};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder, BinEncodable};

use super::tsig;
use super::zone::{negative_soa, Found, Zone};
use crate::kernel::resolve::{Answer, Client, Selected};

/// Our EDNS UDP payload size (the DNS flag day's 1232: no fragments on common paths).
pub const UDP_PAYLOAD: u16 = 1232;
/// Without EDNS a UDP answer is at most 512 bytes (RFC 1035).
const CLASSIC: usize = 512;
/// CNAMEs followed inside the zones before giving up (a loop, or a long chain).
const MAX_CHASE: usize = 8;

/// Where service answers come from: the kernel's policy (`kernel::resolve::Resolver`), or a
/// table in tests.
pub trait Services {
    /// `Selected::NotAService` when no service has the name (a wire name, any case).
    fn select(&self, wire: &[u8], aaaa: bool, client: Client) -> Result<Selected>;
}

impl Services for crate::kernel::resolve::Resolver {
    fn select(&self, wire: &[u8], aaaa: bool, client: Client) -> Result<Selected> {
        crate::kernel::resolve::Resolver::select(self, wire, aaaa, client)
    }
}

/// The zones served, the most specific origin first.
#[derive(Debug, Default, Clone)]
pub struct Zones(Vec<Zone>);

impl Zones {
    pub fn new(mut zones: Vec<Zone>) -> Zones {
        zones.sort_by_key(|z| std::cmp::Reverse(z.origin.num_labels()));
        Zones(zones)
    }

    pub fn all(&self) -> &[Zone] {
        &self.0
    }

    /// The zone `name` is in, if any.
    pub fn find(&self, name: &Name) -> Option<&Zone> {
        self.0.iter().find(|z| z.origin.zone_of(name))
    }
}

/// How a query arrived: UDP answers are held to the client's payload size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp,
}

pub use super::outcome::Outcome;

/// The answer to `query` from `peer`, or `None` when there must be none.
pub fn respond(
    zones: &Zones,
    services: &dyn Services,
    query: &[u8],
    peer: IpAddr,
    transport: Transport,
) -> (Option<Vec<u8>>, Outcome) {
    let (bytes, outcome, _) = respond_for(zones, services, query, peer, transport);
    (bytes, outcome)
}

/// Like [`respond`], with the service whose addresses (or lack of them) answered, if one
/// did: its rate limit applies.
pub fn respond_for(
    zones: &Zones,
    services: &dyn Services,
    query: &[u8],
    peer: IpAddr,
    transport: Transport,
) -> (Option<Vec<u8>>, Outcome, Option<u32>) {
    // A response, or something without a header, gets nothing: answering either can loop
    // two servers into each other.
    if query.len() < 12 || query[2] & 0x80 != 0 {
        return (None, Outcome::Ignored, None);
    }
    // The opcode from the raw header: hickory-proto 0.24 refuses to read a message with an
    // opcode it has no name for (1, 3, 6-15), which would make it FORMERR. The rest is
    // read as a query's, so that NOTIMP echoes the question and OPT as Knot's does.
    let opcode = query[2] & OPCODE;
    let as_query = clear_opcode(query);
    let req = match Message::from_vec(&as_query) {
        Ok(req) => req,
        // Another opcode's sections may follow its own rules: NOTIMP all the same.
        Err(_) if opcode != 0 => {
            return (
                header_only(query, ResponseCode::NotImp),
                Outcome::NotImp,
                None,
            )
        }
        Err(_) => {
            return (
                header_only(query, ResponseCode::FormErr),
                Outcome::FormErr,
                None,
            )
        }
    };
    let mut service = None;
    let mut resp = Message::new();
    let mut header = Header::response_from_request(req.header());
    header.set_authoritative(false);
    header.set_recursion_available(false);
    resp.set_header(header);
    resp.add_queries(req.queries().iter().cloned());

    let tsig = tsig::find(query);
    let edns = req.extensions().as_ref();
    let limit = match (transport, edns) {
        (Transport::Tcp, _) => u16::MAX as usize,
        (Transport::Udp, Some(e)) => (e.max_payload().min(UDP_PAYLOAD) as usize).max(CLASSIC),
        (Transport::Udp, None) => CLASSIC,
    };
    let mut opt = edns.map(|e| {
        let mut o = Edns::new();
        o.set_max_payload(UDP_PAYLOAD);
        o.set_version(0);
        o.set_dnssec_ok(e.dnssec_ok());
        o
    });

    let outcome = (|| {
        if let Some(e) = edns {
            if e.version() > 0 {
                return Outcome::BadVers;
            }
        }
        if opcode != 0 {
            return Outcome::NotImp;
        }
        let [q] = req.queries() else {
            return Outcome::FormErr;
        };
        let Ok(signed) = &tsig else {
            return Outcome::FormErr;
        };
        if q.query_type() == RecordType::ZERO {
            // Type 0 is reserved, never a type of data (RFC 6895 §3.1): no zone can hold
            // it, so this is no query for data at all. NOTIMP, before the class and zone
            // are looked at, as Knot answers (NODATA would be cached as if the name had
            // been searched).
            return Outcome::NotImp;
        }
        let ecs = match edns.map(client_subnet).transpose() {
            Ok(ecs) => ecs.flatten(),
            Err(()) => return Outcome::FormErr,
        };
        if edns.is_some() && !ecs_shape_ok(query) {
            return Outcome::FormErr;
        }
        let client = ecs.unwrap_or(Client::host(peer));
        if q.query_class() != DNSClass::IN {
            return Outcome::Refused;
        }
        let qname = q.name().to_lowercase();
        let Some(zone) = zones.find(&qname) else {
            return Outcome::Refused;
        };
        if matches!(q.query_type(), RecordType::AXFR | RecordType::IXFR) {
            // Answers differ per client: there is no one zone to transfer.
            return Outcome::NotImp;
        }
        if signed.is_some() {
            // director has no TSIG keys: every key is one it does not know (RFC 8945
            // §5.2.2). Only for a zone of ours, as Knot: others were refused above.
            return Outcome::NotAuth;
        }
        resp.set_authoritative(true);
        let mut scope = 0;
        let outcome = answer(
            zone,
            services,
            &qname,
            q.query_type(),
            client,
            &mut resp,
            (&mut scope, &mut service),
        );
        if let (Some(signed), true) = (&zone.signed, edns.is_some_and(Edns::dnssec_ok)) {
            super::prove::prove(zone, signed, &qname, outcome, &mut resp);
        }
        if let (Some(o), Some(c)) = (opt.as_mut(), ecs) {
            o.options_mut()
                .insert(EdnsOption::Subnet(ClientSubnet::new(c.addr, c.bits, scope)));
        }
        outcome
    })();
    let rcode = match outcome {
        Outcome::NxDomain => ResponseCode::NXDomain,
        Outcome::Refused => ResponseCode::Refused,
        Outcome::NotImp => ResponseCode::NotImp,
        Outcome::FormErr => ResponseCode::FormErr,
        Outcome::ServFail => ResponseCode::ServFail,
        Outcome::BadVers => ResponseCode::BADVERS,
        Outcome::NotAuth => ResponseCode::NotAuth,
        _ => ResponseCode::NoError,
    };
    resp.set_response_code(rcode);
    if let Some(o) = opt.take() {
        resp.set_edns(o);
    }
    let Ok(mut bytes) = resp.to_vec() else {
        return (None, Outcome::ServFail, service);
    };
    if let (Outcome::NotAuth, Ok(Some(t))) = (outcome, &tsig) {
        // Unsigned (RFC 8945 §5.3.2), after the OPT record: TSIG comes last.
        let record = tsig::error_record(t, req.id(), tsig::BADKEY);
        if tsig::append_last(&mut bytes, &record).is_none() {
            return (None, Outcome::ServFail, service);
        }
    }
    restore_opcode(&mut bytes, query);
    if bytes.len() <= limit {
        return (Some(bytes), outcome, service);
    }
    // Too big for this client over UDP: the question (and OPT) with TC set, so it asks
    // again over TCP (RFC 7766).
    let mut short = truncate(resp);
    if let Some(b) = short.as_mut() {
        restore_opcode(b, query);
    }
    (short, Outcome::Truncated, service)
}

/// The OPCODE bits of the header's third byte (RFC 1035 §4.1.1).
const OPCODE: u8 = 0x78;

/// `msg` with OPCODE 0 (QUERY), for hickory to read; unchanged (not copied) when it is.
fn clear_opcode(msg: &[u8]) -> Cow<'_, [u8]> {
    match msg.get(2) {
        Some(b) if b & OPCODE != 0 => {
            let mut m = msg.to_vec();
            m[2] &= !OPCODE;
            Cow::Owned(m)
        }
        _ => Cow::Borrowed(msg),
    }
}

/// Puts `from`'s opcode back into the answer built from its copy with OPCODE 0.
fn restore_opcode(answer: &mut [u8], from: &[u8]) {
    if let (Some(a), Some(f)) = (answer.get_mut(2), from.get(2)) {
        *a = (*a & !OPCODE) | (f & OPCODE);
    }
}

/// The answer without its records and with TC set: the client asks again over TCP.
fn truncate(mut resp: Message) -> Option<Vec<u8>> {
    resp.take_answers();
    resp.take_name_servers();
    resp.take_additionals();
    resp.set_truncated(true);
    resp.to_vec().ok()
}

/// `answer` (one of ours) cut to its question and OPT with TC set: what a rate-limited
/// response slips out as.
pub fn truncated(answer: &[u8]) -> Option<Vec<u8>> {
    let mut short = truncate(Message::from_vec(&clear_opcode(answer)).ok()?)?;
    restore_opcode(&mut short, answer);
    Some(short)
}

/// `rcode` for a query hickory could not read: its ID, opcode and RD, nothing else.
fn header_only(query: &[u8], rcode: ResponseCode) -> Option<Vec<u8>> {
    let mut h = [0u8; 12];
    h[..2].copy_from_slice(query.get(..2)?);
    // QR, the opcode and RD as asked.
    h[2] = 0x80 | (query.get(2)? & (OPCODE | 0x01));
    h[3] = rcode.low();
    Some(h.to_vec())
}

/// The ECS option's client, if the query has one; `Err` for one that is not valid
/// (RFC 7871 §7.1.2: FORMERR).
fn client_subnet(e: &Edns) -> Result<Option<Client>, ()> {
    let Some(EdnsOption::Subnet(cs)) = e.option(EdnsCode::Subnet) else {
        return Ok(None);
    };
    let wire: Vec<u8> = cs.try_into().map_err(|_| ())?;
    // FAMILY, SOURCE PREFIX-LENGTH, SCOPE PREFIX-LENGTH, ADDRESS (as hickory wrote it).
    let (family, source, scope) = (u16::from_be_bytes([wire[0], wire[1]]), wire[2], wire[3]);
    let mut octets = [0u8; 16];
    let addr = &wire[4..];
    octets[..addr.len()].copy_from_slice(addr);
    let ip = match family {
        1 if source <= 32 => IpAddr::from([octets[0], octets[1], octets[2], octets[3]]),
        2 if source <= 128 => IpAddr::from(octets),
        _ => return Err(()),
    };
    if scope != 0 {
        return Err(());
    }
    // Bits past SOURCE must be zero.
    if source % 8 != 0 {
        let last = addr.last().copied().unwrap_or(0);
        if last & (0xffu8 >> (source % 8)) != 0 {
            return Err(());
        }
    }
    Ok(Some(Client {
        addr: ip,
        bits: source,
    }))
}

/// Whether the query's ECS options have the shape the XDP program accepts: at most one,
/// of exactly 4 + ceil(SOURCE / 8) bytes (RFC 7871 §6). hickory reads an ADDRESS longer
/// than SOURCE needs without a word and keeps one of two options, so the raw message is
/// walked here; anything it cannot walk is refused too.
fn ecs_shape_ok(msg: &[u8]) -> bool {
    let be16 = |at: usize| -> Option<usize> {
        Some(u16::from_be_bytes([*msg.get(at)?, *msg.get(at + 1)?]) as usize)
    };
    // The end of the name at `at`: labels up to the root, or a pointer.
    let skip_name = |mut at: usize| -> Option<usize> {
        for _ in 0..128 {
            let len = *msg.get(at)? as usize;
            match len {
                0 => return Some(at + 1),
                l if l & 0xc0 == 0xc0 => return Some(at + 2),
                l if l & 0xc0 == 0 => at += l + 1,
                _ => return None,
            }
        }
        None
    };
    let walk = || -> Option<bool> {
        let (qd, records) = (be16(4)?, be16(6)? + be16(8)? + be16(10)?);
        let mut at = 12;
        for _ in 0..qd {
            at = skip_name(at)? + 4;
        }
        let mut seen = 0;
        for _ in 0..records {
            at = skip_name(at)?;
            let (rtype, rdlen) = (be16(at)?, be16(at + 8)?);
            let (mut opt, end) = (at + 10, at + 10 + rdlen);
            if end > msg.len() {
                return None;
            }
            if rtype == 41 {
                while opt < end {
                    let (code, len) = (be16(opt)?, be16(opt + 2)?);
                    if code == 8 {
                        seen += 1;
                        let source = *msg.get(opt + 6)? as usize;
                        if seen > 1 || len != 4 + source.div_ceil(8) {
                            return Some(false);
                        }
                    }
                    opt += 4 + len;
                }
            }
            at = end;
        }
        Some(true)
    };
    walk().unwrap_or(false)
}

fn wire(name: &Name) -> Vec<u8> {
    name.to_bytes().unwrap_or_default()
}

/// Fills the answer for `qname` in `zone` into `resp`; `scope` gets the ECS scope the
/// answer holds for.
fn answer(
    zone: &Zone,
    services: &dyn Services,
    qname: &Name,
    qtype: RecordType,
    client: Client,
    resp: &mut Message,
    (scope, service): (&mut u8, &mut Option<u32>),
) -> Outcome {
    let mut name = qname.clone();
    for _ in 0..MAX_CHASE {
        if let Some(o) =
            service_answer(zone, services, &name, qtype, client, resp, (scope, service))
        {
            return o;
        }
        if qtype == RecordType::ANY {
            // RFC 8482: one RRset of the name's (the apex's SOA comes first).
            return match zone.data.get(&name) {
                Some(set) => {
                    resp.add_answers(first_rrset(set));
                    Outcome::Answered
                }
                None => negative(zone, zone.find(&name, qtype), resp),
            };
        }
        match zone.find(&name, qtype) {
            Found::Records(_, hits) => {
                let cname = hits
                    .iter()
                    .find(|r| r.record_type() == RecordType::CNAME && qtype != RecordType::CNAME)
                    .and_then(|r| match r.data() {
                        Some(RData::CNAME(CNAME(t))) => Some(t.to_lowercase()),
                        _ => None,
                    });
                let is_ns = hits.iter().any(|r| r.record_type() == RecordType::NS);
                resp.add_answers(hits.into_iter().cloned());
                if is_ns {
                    resp.add_additionals(zone.glue().into_iter().cloned());
                }
                match cname {
                    Some(t) if zone.origin.zone_of(&t) => name = t,
                    _ => return Outcome::Answered,
                }
            }
            found => return negative(zone, found, resp),
        }
    }
    Outcome::Answered
}

/// NODATA or NXDOMAIN, with the SOA that says for how long (RFC 2308). After a CNAME the
/// rcode is the target's, the CNAME stays in the answer (RFC 6604).
fn negative(zone: &Zone, found: Found<'_>, resp: &mut Message) -> Outcome {
    resp.add_name_server(negative_soa(zone, u32::MAX));
    match found {
        Found::NxDomain => Outcome::NxDomain,
        _ if resp.answers().is_empty() => Outcome::NoData,
        _ => Outcome::Answered,
    }
}

fn first_rrset(set: &[Record]) -> Vec<Record> {
    let Some(t) = set.first().map(Record::record_type) else {
        return Vec::new();
    };
    set.iter()
        .filter(|r| r.record_type() == t)
        .cloned()
        .collect()
}

/// The answer for a service name, or `None` when `name` is not one. Its addresses come from
/// the kernel's policy, so they are the XDP program's for the same client.
fn service_answer(
    zone: &Zone,
    services: &dyn Services,
    name: &Name,
    qtype: RecordType,
    client: Client,
    resp: &mut Message,
    (scope, service): (&mut u8, &mut Option<u32>),
) -> Option<Outcome> {
    let aaaa = qtype == RecordType::AAAA;
    let wire = wire(name);
    let selected = match services.select(&wire, aaaa, client) {
        Ok(s) => s,
        Err(e) => {
            log::warn!("answering {name}: {e:#}");
            return Some(Outcome::ServFail);
        }
    };
    let Selected::Service {
        service: id,
        ttl,
        answer,
    } = selected
    else {
        return None;
    };
    *service = Some(id);
    if !matches!(qtype, RecordType::A | RecordType::AAAA | RecordType::ANY) {
        // Other types: this name has none, for every client. A short negative TTL: the
        // service's own.
        resp.add_name_server(negative_soa(zone, ttl));
        return Some(Outcome::NoData);
    }
    Some(match answer {
        Answer::Addresses {
            addrs,
            ttl,
            scope: s,
            ..
        } => {
            *scope = s;
            for a in addrs {
                let rdata = match a {
                    IpAddr::V4(v4) => RData::A(A(v4)),
                    IpAddr::V6(v6) => RData::AAAA(AAAA(v6)),
                };
                resp.add_answer(Record::from_rdata(name.clone(), ttl, rdata));
            }
            Outcome::Answered
        }
        Answer::Alternate {
            target,
            ttl,
            scope: s,
        } => {
            *scope = s;
            let mut d = BinDecoder::new(&target);
            match Name::read(&mut d) {
                Ok(t) => {
                    resp.add_answer(Record::from_rdata(
                        name.clone(),
                        ttl,
                        RData::CNAME(CNAME(t)),
                    ));
                    Outcome::Answered
                }
                Err(_) => Outcome::ServFail,
            }
        }
        Answer::NoServer {
            scope: s,
            lacks_family: true,
        } => {
            *scope = s;
            resp.add_name_server(negative_soa(zone, ttl));
            Outcome::NoData
        }
        // No usable server and no fallback: never a negative answer resolvers would cache
        // for every client.
        Answer::NoServer { .. } | Answer::NoDecision => Outcome::ServFail,
    })
}

#[cfg(test)]
pub(crate) mod tests;
