//! What a DO query's answer from a signed zone carries besides the data (RFC 4035 §3.1):
//! the RRSIGs of every RRset in the answer, authority and additional sections, and for a
//! negative answer the NSEC records that prove it, with theirs. Everything comes from the
//! signatures made ahead ([`super::signed::Signed`]).

use std::collections::BTreeSet;

use hickory_proto::op::Message;
use hickory_proto::rr::rdata::CNAME;
use hickory_proto::rr::{Name, RData, Record, RecordType};

use super::outcome::Outcome;
use super::signed::Signed;
use super::zone::Zone;

/// The RRsets of `records`, by owner (lower case) and type, with the TTL served, in order.
fn sets(records: &[Record]) -> Vec<(Name, RecordType, u32)> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for r in records {
        let key = (r.name().to_lowercase(), r.record_type());
        if r.record_type() != RecordType::RRSIG && seen.insert(key.clone()) {
            out.push((key.0, key.1, r.ttl()));
        }
    }
    out
}

/// Adds the signatures and denial proofs `signed` holds to `resp`, the answer to `qname`
/// with `outcome`.
pub fn prove(zone: &Zone, signed: &Signed, qname: &Name, outcome: Outcome, resp: &mut Message) {
    let mut answers = Vec::new();
    for (owner, t, ttl) in sets(resp.answers()) {
        answers.extend(signed.rrsigs(&owner, t, ttl));
    }
    resp.add_answers(answers);
    // Where a CNAME chain inside the zone ended: the name a denial is about.
    let mut last = qname.to_lowercase();
    for r in resp.answers() {
        if let Some(RData::CNAME(CNAME(t))) = r.data() {
            if r.name().to_lowercase() == last {
                last = t.to_lowercase();
            }
        }
    }
    let mut authority = Vec::new();
    for (owner, t, ttl) in sets(resp.name_servers()) {
        authority.extend(signed.rrsigs(&owner, t, ttl));
    }
    let mut nsecs: Vec<Record> = Vec::new();
    let mut add = |r: Option<&Record>| {
        if let Some(r) = r {
            if !nsecs.contains(r) {
                nsecs.push(r.clone());
            }
        }
    };
    match outcome {
        Outcome::NxDomain => {
            // The name does not exist, and no wildcard at its closest encloser could have
            // made it (RFC 4035 §3.1.3.2).
            add(signed.covering(&last));
            let mut ce = last.base_name();
            while !zone.exists.contains(&ce) && zone.origin.zone_of(&ce) && !ce.is_root() {
                ce = ce.base_name();
            }
            if let Ok(wild) = Name::from_ascii("*").and_then(|s| s.append_domain(&ce)) {
                add(signed.covering(&wild));
            }
        }
        Outcome::NoData => {
            // The name's own NSEC lacks the type; a name between others (an empty
            // non-terminal) has none, and the NSEC covering it shows names below it.
            add(signed.nsec(&last).or_else(|| signed.covering(&last)));
        }
        _ => {}
    }
    for n in &nsecs {
        authority.extend(signed.rrsigs(n.name(), RecordType::NSEC, n.ttl()));
    }
    resp.add_name_servers(nsecs);
    resp.add_name_servers(authority);
    let mut additional = Vec::new();
    for (owner, t, ttl) in sets(resp.additionals()) {
        if t != RecordType::OPT {
            additional.extend(signed.rrsigs(&owner, t, ttl));
        }
    }
    resp.add_additionals(additional);
}

#[cfg(test)]
mod tests;
