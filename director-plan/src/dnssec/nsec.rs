//! Authenticated denial made ahead: an NSEC chain (RFC 4034 §4) over the zone's names. A
//! zone of director's has few names, all public (the apex, its NS hosts, its records and
//! its service names), so the chain gives nothing away that walking it would find, and it
//! is made where the key is, like every other signature: compact denial (RFC 9824) and
//! white lies (RFC 4470) would need the key online.

use std::collections::BTreeMap;

use super::wire::{canonical_cmp, rtype, type_bitmap, Name, Record};

/// The NSEC records of a zone whose names hold `types` (each name's types, RRSIG and NSEC
/// added), each pointing at the next name in canonical order, the last at the apex; the
/// TTL is the negative TTL (RFC 9077: the SOA's minimum, at most its TTL).
pub fn chain(names: &BTreeMap<Name, Vec<u16>>, ttl: u32) -> Vec<Record> {
    let mut order: Vec<&Name> = names.keys().collect();
    order.sort_by(|a, b| canonical_cmp(a, b));
    let mut out = Vec::with_capacity(order.len());
    for (i, n) in order.iter().enumerate() {
        let next = order[(i + 1) % order.len()];
        let mut types = names[*n].clone();
        types.extend([rtype::RRSIG, rtype::NSEC]);
        let mut rdata = next.wire().to_vec();
        rdata.extend(type_bitmap(&types));
        out.push(Record {
            owner: (*n).clone(),
            rtype: rtype::NSEC,
            ttl,
            rdata,
        });
    }
    out
}

/// The NSEC that proves `qname` does not exist: the one whose owner sorts before it and
/// whose next name after it (the chain's last for a name past the end). `None` when
/// `qname` is one of the names.
pub fn covering<'a>(nsecs: &'a [Record], qname: &Name) -> Option<&'a Record> {
    let mut best: Option<&Record> = None;
    for r in nsecs {
        match canonical_cmp(&r.owner, qname) {
            std::cmp::Ordering::Equal => return None,
            std::cmp::Ordering::Less => {
                if best.is_none_or(|b| canonical_cmp(&b.owner, &r.owner).is_lt()) {
                    best = Some(r);
                }
            }
            std::cmp::Ordering::Greater => {}
        }
    }
    // Before the first name (cannot happen under the apex, which sorts first): the last.
    best.or_else(|| {
        nsecs
            .iter()
            .max_by(|a, b| canonical_cmp(&a.owner, &b.owner))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_over_a_zone() {
        let n = |s: &str| Name::parse(s).unwrap();
        let mut names = BTreeMap::new();
        names.insert(n("z.example"), vec![rtype::SOA, rtype::NS, rtype::DNSKEY]);
        names.insert(n("www.z.example"), vec![rtype::A, rtype::AAAA]);
        names.insert(n("a.z.example"), vec![rtype::TXT]);
        let c = chain(&names, 300);
        let owners: Vec<String> = c.iter().map(|r| r.owner.text()).collect();
        assert_eq!(owners, ["z.example.", "a.z.example.", "www.z.example."]);
        // Each points at the next, the last back at the apex.
        assert!(c[0].rdata.starts_with(n("a.z.example").wire()));
        assert!(c[2].rdata.starts_with(n("z.example").wire()));
        // www: A AAAA RRSIG NSEC.
        let bits = &c[2].rdata[n("z.example").wire().len()..];
        assert_eq!(bits, type_bitmap(&[1, 28, 46, 47]));
        assert_eq!(
            covering(&c, &n("b.z.example")).unwrap().owner,
            n("a.z.example")
        );
        assert_eq!(
            covering(&c, &n("zz.z.example")).unwrap().owner,
            n("www.z.example")
        );
        assert_eq!(
            covering(&c, &n("deep.a.z.example")).unwrap().owner,
            n("a.z.example")
        );
        assert!(covering(&c, &n("www.z.example")).is_none());
    }
}
