//! What every answer must be, checked field by field against the query, raw and as
//! hickory reads it.

use std::net::IpAddr;

use director_tests::packets::*;
use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::opt::{ClientSubnet, EdnsCode, EdnsOption};
use hickory_proto::rr::{DNSClass, RData, RecordType};
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder};

use crate::setup::hex;
use crate::{AA, ANSWER_TTL, CD, OPTION_ECS, OPT_TYPE, QR, RD};

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

/// What an answer said, once everything any answer must satisfy has been checked.
#[derive(Debug)]
pub(crate) struct Answer {
    /// Addresses of the answer records, in order.
    pub(crate) addrs: Vec<IpAddr>,
    pub(crate) ttls: Vec<u32>,
    /// The answer's OPT record, read raw.
    pub(crate) opt: Option<RawOpt>,
    /// Its ECS option, as hickory reads it.
    pub(crate) ecs: Option<ClientSubnet>,
    pub(crate) msg: Message,
}

impl Answer {
    pub(crate) fn ecs_scope(&self) -> Option<u8> {
        self.opt.as_ref()?.option(OPTION_ECS).map(|b| b[3])
    }
}

/// Checks `answer` as the reply to `query`: the frame turned around with valid checksums,
/// then the DNS message both byte by byte and through hickory.
pub(crate) fn check_answer(query: &[u8], answer: &[u8]) -> Result<Answer, String> {
    let q = parse_udp(query).map_err(|e| format!("query frame: {e}"))?;
    let a = parse_udp(answer).map_err(|e| format!("answer frame: {e}"))?;
    check_turned_around(&q, &a, answer.len())?;
    verify_checksums(answer)?;
    let wire = check_dns_wire(&q.payload, &a.payload)?;
    let (msg, ecs) = check_dns_hickory(&q.payload, &a.payload, &wire.records)?;
    Ok(Answer {
        addrs: wire.records.iter().map(|r| r.1).collect(),
        ttls: wire.records.iter().map(|r| r.0).collect(),
        opt: wire.opt,
        ecs,
        msg,
    })
}

/// Ethernet, IP and UDP of the answer: the query's, addressed back to the client.
pub(crate) fn check_turned_around(
    q: &UdpFrame,
    a: &UdpFrame,
    answer_len: usize,
) -> Result<(), String> {
    ensure!(
        a.dst_mac == q.src_mac && a.src_mac == q.dst_mac,
        "MACs not swapped: {:?} -> {:?}",
        a.src_mac,
        a.dst_mac
    );
    ensure!(
        a.vlan == q.vlan,
        "VLAN tag {:?}, the query had {:?}",
        a.vlan,
        q.vlan
    );
    ensure!(
        a.src == q.dst && a.dst == q.src,
        "IPs not swapped: {} -> {}",
        a.src,
        a.dst
    );
    ensure!(
        a.src_port == q.dst_port && a.dst_port == q.src_port,
        "ports not swapped: {} -> {}",
        a.src_port,
        a.dst_port
    );
    ensure!(
        a.end == answer_len,
        "the IP packet ends at {} but the frame is {answer_len} bytes",
        a.end
    );
    ensure!(
        a.ttl == ANSWER_TTL,
        "TTL/hop limit {} rather than a fresh {ANSWER_TTL}",
        a.ttl
    );
    // Everything else in the IP header is the query's: version, DSCP, ID and flags for
    // IPv4 (length, TTL, checksum and addresses change); version, class and flow label,
    // next header for IPv6 (length, hop limit and addresses change).
    let same: &[usize] = if a.src.is_ipv4() {
        &[0, 1, 4, 5, 6, 7, 9]
    } else {
        &[0, 1, 2, 3, 6]
    };
    for &i in same {
        ensure!(
            a.ip_header[i] == q.ip_header[i],
            "IP header byte {i} changed: {:#04x} -> {:#04x}",
            q.ip_header[i],
            a.ip_header[i]
        );
    }
    Ok(())
}

/// The answer section as (TTL, address) per record, and the OPT record, read raw.
struct WireAnswer {
    pub(crate) records: Vec<(u32, IpAddr)>,
    pub(crate) opt: Option<RawOpt>,
}

/// The DNS answer byte by byte: header, the question echoed as sent (letter case too),
/// records whose owner is a pointer to the question name, and the OPT record.
fn check_dns_wire(q: &[u8], a: &[u8]) -> Result<WireAnswer, String> {
    let q_end = question_end(q).ok_or("the query has no plain question")?;
    ensure!(
        a.len() >= q_end,
        "answer of {} bytes is shorter than the question",
        a.len()
    );
    ensure!(
        a[0..2] == q[0..2],
        "ID {:#06x}, the query's is {:#06x}",
        be16(a, 0),
        be16(q, 0)
    );
    let (qflags, aflags) = (be16(q, 2), be16(a, 2));
    // QR and AA set; RD and CD copied; opcode, TC, RA, Z, AD and RCODE zero.
    let want = QR | AA | (qflags & (RD | CD));
    ensure!(
        aflags == want,
        "flags {aflags:#06x}, expected {want:#06x} for query flags {qflags:#06x}"
    );
    let (qd, an, ns, ar) = (be16(a, 4), be16(a, 6) as usize, be16(a, 8), be16(a, 10));
    ensure!(
        qd == 1 && ns == 0 && an >= 1,
        "counts QD={qd} AN={an} NS={ns}"
    );
    ensure!(
        ar == be16(q, 10),
        "ARCOUNT {ar}: an OPT record is answered with one, else none"
    );
    ensure!(
        a[12..q_end] == q[12..q_end],
        "question not echoed: {} vs {}",
        hex(&a[12..q_end]),
        hex(&q[12..q_end])
    );

    let qtype = be16(q, q_end - 4);
    let rdlen = if qtype == u16::from(RecordType::AAAA) {
        16
    } else {
        4
    };
    let mut at = q_end;
    let mut records = Vec::new();
    for i in 0..an {
        ensure!(a.len() >= at + 12 + rdlen, "answer record {i} cut short");
        let r = &a[at..at + 12 + rdlen];
        ensure!(
            r[0..2] == [0xc0, 0x0c],
            "record {i} owner {} is not a pointer to offset 12",
            hex(&r[0..2])
        );
        ensure!(
            be16(r, 2) == qtype && be16(r, 4) == 1,
            "record {i} type/class {}/{}",
            be16(r, 2),
            be16(r, 4)
        );
        ensure!(
            be16(r, 10) as usize == rdlen,
            "record {i} RDLENGTH {}",
            be16(r, 10)
        );
        let addr = if rdlen == 4 {
            IpAddr::from(<[u8; 4]>::try_from(&r[12..16]).unwrap())
        } else {
            IpAddr::from(<[u8; 16]>::try_from(&r[12..28]).unwrap())
        };
        records.push((u32::from_be_bytes(r[6..10].try_into().unwrap()), addr));
        at += 12 + rdlen;
    }

    let (opt, limit) = if ar == 1 {
        let qo = read_opt(q, q_end)?;
        let o = read_opt(a, at)?;
        check_opt_wire(&qo, &o)?;
        at = o.end;
        // Sizes under 512 mean 512 (RFC 6891 §6.2.5).
        (Some(o), qo.udp_size.max(512))
    } else {
        (None, 512)
    };
    ensure!(
        at == a.len(),
        "{} bytes after the last record",
        a.len() - at
    );
    ensure!(
        a.len() <= limit as usize,
        "answer of {} bytes, the client takes {limit}",
        a.len()
    );
    Ok(WireAnswer { records, opt })
}

/// The answer's OPT: payload size 1232, version 0, no extended RCODE, Z clear, DO clear
/// unless the query set it, and the query's ECS option with the scope filled in.
pub(crate) fn check_opt_wire(q: &RawOpt, a: &RawOpt) -> Result<(), String> {
    ensure!(
        a.owner == 0 && a.rtype == OPT_TYPE,
        "OPT owner {} type {}",
        a.owner,
        a.rtype
    );
    ensure!(
        a.udp_size == 1232,
        "OPT UDP payload size {}, not 1232",
        a.udp_size
    );
    ensure!(
        a.ttl & !0x8000 == 0,
        "OPT TTL field {:#010x}: extended RCODE, version and Z must be 0",
        a.ttl
    );
    ensure!(
        q.dnssec_ok() || !a.dnssec_ok(),
        "DO set in the answer to a query without it"
    );
    match q.option(OPTION_ECS) {
        Some(qe) => {
            ensure!(
                a.options.len() == 1,
                "answer OPT options {:?}, expected only ECS",
                a.options
            );
            let ae = a
                .option(OPTION_ECS)
                .ok_or("no ECS in the answer to an ECS query")?;
            ensure!(
                ae.len() == qe.len(),
                "ECS of {} bytes, the query's had {}",
                ae.len(),
                qe.len()
            );
            // FAMILY, SOURCE PREFIX-LENGTH and ADDRESS echoed; SCOPE is the answer's own.
            ensure!(
                ae[..3] == qe[..3] && ae[4..] == qe[4..],
                "ECS {} does not echo the query's {}",
                hex(ae),
                hex(qe)
            );
        }
        None => ensure!(
            a.options.is_empty(),
            "options {:?} in the answer to a query without ECS",
            a.options
        ),
    }
    Ok(())
}

/// Reads a message and requires that it used every byte.
pub(crate) fn decode_all(dns: &[u8]) -> Result<Message, String> {
    let mut d = BinDecoder::new(dns);
    let m = Message::read(&mut d).map_err(|e| format!("hickory cannot read it: {e}"))?;
    ensure!(d.is_empty(), "hickory left {} bytes unread", d.len());
    Ok(m)
}

/// The same answer as hickory reads it, against the query as hickory reads it.
fn check_dns_hickory(
    q: &[u8],
    a: &[u8],
    records: &[(u32, IpAddr)],
) -> Result<(Message, Option<ClientSubnet>), String> {
    let qm = Message::from_vec(q).map_err(|e| format!("hickory cannot read the query: {e}"))?;
    let am = decode_all(a)?;
    ensure!(am.id() == qm.id(), "ID {} vs {}", am.id(), qm.id());
    ensure!(am.message_type() == MessageType::Response, "not a response");
    ensure!(am.op_code() == OpCode::Query, "opcode {:?}", am.op_code());
    ensure!(am.authoritative(), "AA clear");
    ensure!(!am.truncated(), "TC set");
    ensure!(
        am.recursion_desired() == qm.recursion_desired(),
        "RD not copied"
    );
    ensure!(!am.recursion_available(), "RA set");
    ensure!(!am.authentic_data(), "AD set");
    ensure!(
        am.checking_disabled() == qm.checking_disabled(),
        "CD not copied"
    );
    ensure!(
        am.response_code() == ResponseCode::NoError,
        "RCODE {:?}",
        am.response_code()
    );
    ensure!(
        am.queries() == qm.queries(),
        "question {:?} vs {:?}",
        am.queries(),
        qm.queries()
    );
    let question = &qm.queries()[0];
    ensure!(
        am.answers().len() == records.len(),
        "hickory sees {} answers",
        am.answers().len()
    );
    for (r, (ttl, addr)) in am.answers().iter().zip(records) {
        ensure!(
            r.name() == question.name(),
            "answer owner {} for question {}",
            r.name(),
            question.name()
        );
        ensure!(
            r.record_type() == question.query_type() && r.dns_class() == DNSClass::IN,
            "answer {r}"
        );
        ensure!(r.ttl() == *ttl, "hickory TTL {} vs wire {ttl}", r.ttl());
        let got = match r.data() {
            Some(RData::A(x)) => IpAddr::V4(x.0),
            Some(RData::AAAA(x)) => IpAddr::V6(x.0),
            other => return Err(format!("answer data {other:?}")),
        };
        ensure!(got == *addr, "hickory address {got} vs wire {addr}");
    }
    ensure!(
        am.name_servers().is_empty() && am.additionals().is_empty(),
        "extra records"
    );
    let ecs = match (qm.extensions(), am.extensions()) {
        (None, None) => None,
        (Some(qe), Some(ae)) => {
            ensure!(
                ae.max_payload() == 1232 && ae.version() == 0 && ae.rcode_high() == 0,
                "EDNS {ae:?}"
            );
            ensure!(
                qe.dnssec_ok() || !ae.dnssec_ok(),
                "DO set in the answer to a query without it"
            );
            match ae.option(EdnsCode::Subnet) {
                Some(EdnsOption::Subnet(cs)) => Some(*cs),
                Some(other) => return Err(format!("ECS option read as {other:?}")),
                None => None,
            }
        }
        (q, a) => {
            return Err(format!(
                "EDNS in query {} but in answer {}",
                q.is_some(),
                a.is_some()
            ))
        }
    };
    Ok((am, ecs))
}
