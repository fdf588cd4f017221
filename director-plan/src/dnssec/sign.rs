//! Signatures made ahead: an RRset's RRSIG (RFC 4034 §3, RFC 6605) over its canonical
//! form, in fixed validity windows so that an unchanged set signs to the same bytes all
//! day, and what a holder without the key checks of one.

use anyhow::{bail, Result};

use super::key::{self, ZoneKey, ALGORITHM};
use super::wire::{rtype, Name, Record};

/// When a signature holds: from `inception` to `expiration` (Unix seconds, as RRSIG
/// carries them, modulo 2^32; serial arithmetic, RFC 1982, holds until 2106).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub inception: u32,
    pub expiration: u32,
}

/// Validity settings: signatures last `validity_s` (7 days by default) and are made anew
/// once a day, in windows that start at a fixed hour of the day (00:00 UTC) an hour back.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Validity {
    pub validity_s: u32,
    /// Inception this far before the window's start, for clocks behind ours.
    pub backdate_s: u32,
    /// Windows start every `refresh_s` (one day).
    pub refresh_s: u32,
}

impl Default for Validity {
    fn default() -> Self {
        Validity {
            validity_s: 7 * 86_400,
            backdate_s: 3_600,
            refresh_s: 86_400,
        }
    }
}

impl Validity {
    /// The window signatures made at `now` (Unix seconds) carry: every signature made the
    /// same day carries the same one, so the same set signs to the same bytes.
    pub fn window(&self, now: u64) -> Window {
        let refresh = u64::from(self.refresh_s.max(1));
        let start = now - now % refresh;
        let inception = start.saturating_sub(u64::from(self.backdate_s));
        Window {
            inception: inception as u32,
            expiration: (start + u64::from(self.validity_s)) as u32,
        }
    }
}

/// An RRSIG's RDATA up to, not including, the signature: what is signed first.
fn rrsig_head(covered: u16, owner: &Name, ttl: u32, w: Window, tag: u16, signer: &Name) -> Vec<u8> {
    let mut r = Vec::with_capacity(18 + signer.wire().len() + 64);
    r.extend_from_slice(&covered.to_be_bytes());
    r.push(ALGORITHM);
    r.push(owner.label_count());
    r.extend_from_slice(&ttl.to_be_bytes());
    r.extend_from_slice(&w.expiration.to_be_bytes());
    r.extend_from_slice(&w.inception.to_be_bytes());
    r.extend_from_slice(&tag.to_be_bytes());
    r.extend_from_slice(signer.wire());
    r
}

/// The data an RRSIG over `set` signs (RFC 4034 §3.1.8.1): its RDATA less the signature,
/// then each record with the original TTL, in canonical order of RDATA, duplicates once.
fn signed_data(head: &[u8], set: &[Record], ttl: u32) -> Vec<u8> {
    let mut rdatas: Vec<&Record> = set.iter().collect();
    rdatas.sort_by(|a, b| a.rdata.cmp(&b.rdata));
    rdatas.dedup_by(|a, b| a.rdata == b.rdata);
    let mut data = head.to_vec();
    for r in rdatas {
        r.wire_with_ttl(ttl, &mut data);
    }
    data
}

/// Checks that `set` is one RRset: one owner and one type, non-empty.
fn one_set(set: &[Record]) -> Result<(&Name, u16)> {
    let Some(first) = set.first() else {
        bail!("an empty RRset has no signature");
    };
    if set
        .iter()
        .any(|r| r.owner != first.owner || r.rtype != first.rtype)
    {
        bail!(
            "records of {} type {} mixed with others: not one RRset",
            first.owner,
            first.rtype
        );
    }
    if first.rtype == rtype::RRSIG {
        bail!("RRSIG sets are not signed");
    }
    Ok((&first.owner, first.rtype))
}

/// The RRSIG RDATA over `set` (one owner, one type) with `ttl` as its original TTL, by
/// `key` for the zone `signer`, valid in `w`.
pub fn rrsig(set: &[Record], ttl: u32, w: Window, key: &ZoneKey, signer: &Name) -> Result<Vec<u8>> {
    let (owner, covered) = one_set(set)?;
    if !owner.is_under(signer) {
        bail!("{owner} is not in the zone {signer}");
    }
    let head = rrsig_head(covered, owner, ttl, w, key.tag(), signer);
    let sig = key.sign(&signed_data(&head, set, ttl));
    let mut r = head;
    r.extend_from_slice(&sig);
    Ok(r)
}

/// What an RRSIG RDATA says of itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RrsigFields {
    pub covered: u16,
    pub labels: u8,
    pub ttl: u32,
    pub window: Window,
    pub tag: u16,
    pub signer: Name,
}

pub fn rrsig_fields(rdata: &[u8]) -> Result<(RrsigFields, &[u8])> {
    if rdata.len() < 18 + 1 + 64 {
        bail!("an RRSIG of {} bytes is too short", rdata.len());
    }
    if rdata[2] != ALGORITHM {
        bail!("an RRSIG of algorithm {}, not 13", rdata[2]);
    }
    let be32 = |i: usize| u32::from_be_bytes([rdata[i], rdata[i + 1], rdata[i + 2], rdata[i + 3]]);
    let signer_end = rdata.len() - 64;
    let signer = Name::from_wire(&rdata[18..signer_end])?;
    Ok((
        RrsigFields {
            covered: u16::from_be_bytes([rdata[0], rdata[1]]),
            labels: rdata[3],
            ttl: be32(4),
            window: Window {
                expiration: be32(8),
                inception: be32(12),
            },
            tag: u16::from_be_bytes([rdata[16], rdata[17]]),
            signer,
        },
        &rdata[signer_end..],
    ))
}

/// Checks an RRSIG RDATA over `set` against the zone's public key at time `now`, as a
/// validator would (the signature, the covered type, labels, TTL, key tag, signer, the
/// window): what an edge that holds no key checks of a signature it is handed.
pub fn check(set: &[Record], rrsig_rdata: &[u8], public: &[u8; 64], now: u64) -> Result<()> {
    let (owner, covered) = one_set(set)?;
    let (f, sig) = rrsig_fields(rrsig_rdata)?;
    if f.covered != covered || f.labels != owner.label_count() {
        bail!(
            "an RRSIG for type {} of {} labels covers type {covered} of {owner}",
            f.covered,
            f.labels
        );
    }
    if set.iter().any(|r| r.ttl != f.ttl) {
        bail!("served with a TTL other than the signed {}", f.ttl);
    }
    if f.tag != key::key_tag(&key::dnskey_rdata(public)) {
        bail!("signed by key {}, not the zone's", f.tag);
    }
    let now = now as u32;
    // Serial arithmetic: inception <= now <= expiration.
    if (now.wrapping_sub(f.window.inception) as i32) < 0 {
        bail!("not valid before {}", f.window.inception);
    }
    if (f.window.expiration.wrapping_sub(now) as i32) < 0 {
        bail!("expired at {}", f.window.expiration);
    }
    let head = &rrsig_rdata[..rrsig_rdata.len() - 64];
    if !key::verify(public, &signed_data(head, set, f.ttl), sig) {
        bail!("the signature over {owner} type {covered} does not verify");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dnssec::key::base64_decode;

    fn a(owner: &str, addr: [u8; 4], ttl: u32) -> Record {
        Record {
            owner: Name::parse(owner).unwrap(),
            rtype: rtype::A,
            ttl,
            rdata: addr.to_vec(),
        }
    }

    /// RFC 6605 §6.1: the A record of www.example.net signed with its example key. ECDSA
    /// signatures differ from run to run in the RFC (it signed with random k), so the RFC's
    /// own signature is checked, and ours must verify.
    #[test]
    fn rfc_6605_example_verifies() {
        let k = ZoneKey::from_secret(
            &base64_decode("GU6SnQ/Ou+xC5RumuIUIuJZteXT2z0O/ok1s38Et6mQ=").unwrap(),
        )
        .unwrap();
        let zone = Name::parse("example.net.").unwrap();
        let set = [a("www.example.net", [192, 0, 2, 1], 3600)];
        // The RFC's 20100812100439 and 20100909100439, as RRSIG carries them.
        let w = Window {
            inception: 1_281_607_479,
            expiration: 1_284_026_679,
        };
        let mut rdata = rrsig_head(rtype::A, &set[0].owner, 3600, w, 55648, &zone);
        rdata.extend_from_slice(
            &base64_decode(
                "qx6wLYqmh+l9oCKTN6qIc+bw6ya+KJ8oMz0YP107epXAyGmt+3SNruPFKG7tZoLBLlUzGGus7ZwmwWep666VCw==",
            )
            .unwrap(),
        );
        let now = u64::from(w.inception) + 10;
        check(&set, &rdata, &k.public(), now).unwrap();
        let ours = rrsig(&set, 3600, w, &k, &zone).unwrap();
        check(&set, &ours, &k.public(), now).unwrap();
        assert_eq!(ours, rrsig(&set, 3600, w, &k, &zone).unwrap());
    }

    #[test]
    fn any_order_the_same_signature_and_what_fails() {
        let k = ZoneKey::from_secret(&[5u8; 32]).unwrap();
        let zone = Name::parse("gslb.example.com").unwrap();
        let w = Validity::default().window(1_800_000_000);
        let x = a("www.gslb.example.com", [203, 0, 113, 10], 30);
        let y = a("www.gslb.example.com", [203, 0, 113, 20], 30);
        let s = rrsig(&[x.clone(), y.clone()], 30, w, &k, &zone).unwrap();
        assert_eq!(s, rrsig(&[y.clone(), x.clone()], 30, w, &k, &zone).unwrap());
        let now = 1_800_000_000;
        check(&[y.clone(), x.clone()], &s, &k.public(), now).unwrap();
        // A member less, another TTL, a flipped bit, out of the window: refused.
        assert!(check(std::slice::from_ref(&x), &s, &k.public(), now).is_err());
        let mut x60 = x.clone();
        x60.ttl = 60;
        assert!(check(&[x60, y.clone()], &s, &k.public(), now).is_err());
        let mut bad = s.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(check(&[x.clone(), y.clone()], &bad, &k.public(), now).is_err());
        let end = u64::from(w.expiration) + 1;
        assert!(check(&[x.clone(), y.clone()], &s, &k.public(), end).is_err());
        // Not one set, not in the zone.
        let mut other = y.clone();
        other.rtype = rtype::AAAA;
        assert!(rrsig(&[x.clone(), other], 30, w, &k, &zone).is_err());
        let outside = a("www.example.org", [203, 0, 113, 1], 30);
        assert!(rrsig(&[outside], 30, w, &k, &zone).is_err());
    }

    #[test]
    fn windows_are_fixed_per_day() {
        let v = Validity::default();
        let day = 1_800_000_000 - 1_800_000_000 % 86_400;
        let w = v.window(day + 5);
        assert_eq!(w, v.window(day + 86_399));
        assert_eq!(w.inception as u64, day - 3_600);
        assert_eq!(w.expiration as u64, day + 7 * 86_400);
        assert_ne!(w, v.window(day + 86_400));
    }
}
