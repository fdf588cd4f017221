//! The few pieces of DNS wire format signing needs, in canonical form (RFC 4034 §6): names
//! in lower case and uncompressed, records as owner, type, class, TTL, length and RDATA.

use anyhow::{bail, Result};

pub const CLASS_IN: u16 = 1;

/// Record types a signed zone of director's holds.
pub mod rtype {
    pub const A: u16 = 1;
    pub const NS: u16 = 2;
    pub const CNAME: u16 = 5;
    pub const SOA: u16 = 6;
    pub const MX: u16 = 15;
    pub const TXT: u16 = 16;
    pub const AAAA: u16 = 28;
    pub const DS: u16 = 43;
    pub const RRSIG: u16 = 46;
    pub const NSEC: u16 = 47;
    pub const DNSKEY: u16 = 48;
    pub const CDS: u16 = 59;
    pub const CDNSKEY: u16 = 60;
}

/// A domain name in canonical wire form: lower case, uncompressed, ending with the root.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Name(Vec<u8>);

impl Name {
    /// From presentation form (`www.example.com`, a trailing dot optional; `.` or `` for
    /// the root). Escapes are not taken: director's names are host names.
    pub fn parse(text: &str) -> Result<Name> {
        let t = text.strip_suffix('.').unwrap_or(text);
        let mut w = Vec::with_capacity(t.len() + 2);
        if !t.is_empty() {
            for label in t.split('.') {
                if label.is_empty() || label.len() > 63 {
                    bail!("{text:?}: a label is empty or over 63 bytes");
                }
                if label.bytes().any(|b| b == b'\\' || b <= b' ' || b >= 0x7f) {
                    bail!("{text:?}: only printable ASCII without escapes in names");
                }
                w.push(label.len() as u8);
                w.extend(label.bytes().map(|b| b.to_ascii_lowercase()));
            }
        }
        w.push(0);
        if w.len() > 255 {
            bail!("{text:?}: over 255 bytes on the wire");
        }
        Ok(Name(w))
    }

    /// From wire form (uncompressed), lowered.
    pub fn from_wire(w: &[u8]) -> Result<Name> {
        let mut i = 0;
        loop {
            let Some(&n) = w.get(i) else {
                bail!("a name runs past its end");
            };
            if n == 0 {
                break;
            }
            if n > 63 {
                bail!("a name with a pointer or a label over 63 bytes");
            }
            i += 1 + n as usize;
        }
        if i + 1 != w.len() || w.len() > 255 {
            bail!("a name of {} bytes does not end where it should", w.len());
        }
        Ok(Name(w.iter().map(u8::to_ascii_lowercase).collect()))
    }

    pub fn wire(&self) -> &[u8] {
        &self.0
    }

    /// The labels from the left, without the root.
    pub fn labels(&self) -> Vec<&[u8]> {
        let mut out = Vec::new();
        let mut i = 0;
        while let Some(&n) = self.0.get(i) {
            if n == 0 {
                break;
            }
            out.push(&self.0[i + 1..i + 1 + n as usize]);
            i += 1 + n as usize;
        }
        out
    }

    /// RRSIG's Labels field: the labels less the root and a leading wildcard.
    pub fn label_count(&self) -> u8 {
        let l = self.labels();
        (l.len() - usize::from(l.first() == Some(&&b"*"[..]))) as u8
    }

    /// Whether `self` is `zone` or under it.
    pub fn is_under(&self, zone: &Name) -> bool {
        self.0.ends_with(&zone.0)
            && (self.0.len() == zone.0.len() || {
                // The suffix must start at a label boundary.
                let mut i = 0;
                let start = self.0.len() - zone.0.len();
                while i < start {
                    i += 1 + self.0[i] as usize;
                }
                i == start
            })
    }

    /// Presentation form, with the trailing dot.
    pub fn text(&self) -> String {
        let mut s = String::new();
        for l in self.labels() {
            s.push_str(&String::from_utf8_lossy(l));
            s.push('.');
        }
        if s.is_empty() {
            s.push('.');
        }
        s
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text())
    }
}

/// RFC 4034 §6.1: names are ordered by their labels from the right, each compared as
/// lower-case octets, a shorter label before a longer one it begins.
pub fn canonical_cmp(a: &Name, b: &Name) -> std::cmp::Ordering {
    let (la, lb) = (a.labels(), b.labels());
    for (x, y) in la.iter().rev().zip(lb.iter().rev()) {
        match x.cmp(y) {
            std::cmp::Ordering::Equal => {}
            o => return o,
        }
    }
    la.len().cmp(&lb.len())
}

/// One record's data in canonical form (names inside it already lower case, uncompressed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub owner: Name,
    pub rtype: u16,
    pub ttl: u32,
    pub rdata: Vec<u8>,
}

impl Record {
    /// Owner, type, class IN, `ttl`, RDLENGTH and RDATA, as a signature covers it.
    pub fn wire_with_ttl(&self, ttl: u32, out: &mut Vec<u8>) {
        out.extend_from_slice(self.owner.wire());
        out.extend_from_slice(&self.rtype.to_be_bytes());
        out.extend_from_slice(&CLASS_IN.to_be_bytes());
        out.extend_from_slice(&ttl.to_be_bytes());
        out.extend_from_slice(&(self.rdata.len() as u16).to_be_bytes());
        out.extend_from_slice(&self.rdata);
    }
}

/// An RR type bitmap (RFC 4034 §4.1.2): window blocks of the types present.
pub fn type_bitmap(types: &[u16]) -> Vec<u8> {
    let mut t: Vec<u16> = types.to_vec();
    t.sort_unstable();
    t.dedup();
    let mut out = Vec::new();
    let mut i = 0;
    while i < t.len() {
        let window = (t[i] >> 8) as u8;
        let mut bits = [0u8; 32];
        let mut last = 0usize;
        while i < t.len() && (t[i] >> 8) as u8 == window {
            let low = (t[i] & 0xff) as usize;
            bits[low / 8] |= 0x80 >> (low % 8);
            last = low / 8;
            i += 1;
        }
        out.push(window);
        out.push((last + 1) as u8);
        out.extend_from_slice(&bits[..=last]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let n = Name::parse("WWW.Example.com.").unwrap();
        assert_eq!(n.wire(), b"\x03www\x07example\x03com\x00");
        assert_eq!(n.text(), "www.example.com.");
        assert_eq!(n.label_count(), 3);
        assert_eq!(Name::parse("*.example.com").unwrap().label_count(), 2);
        assert_eq!(Name::parse(".").unwrap().wire(), b"\x00");
        let zone = Name::parse("example.com").unwrap();
        assert!(n.is_under(&zone));
        assert!(zone.is_under(&zone));
        assert!(!Name::parse("www.xexample.com").unwrap().is_under(&zone));
        assert!(Name::parse("a..b").is_err());
        assert_eq!(Name::from_wire(b"\x01A\x00").unwrap().wire(), b"\x01a\x00");
        assert!(Name::from_wire(b"\x01a").is_err());
        assert!(Name::from_wire(b"\xc0\x0c").is_err());
    }

    #[test]
    fn canonical_order_is_rfc_4034s_example() {
        // RFC 4034 §6.1's example, in its order (escapes aside).
        let order = [
            "example",
            "a.example",
            "yljkjljk.a.example",
            "z.a.example",
            "zabc.a.example",
            "z.example",
            "*.z.example",
        ];
        let mut names: Vec<Name> = order.iter().map(|s| Name::parse(s).unwrap()).collect();
        names.reverse();
        names.sort_by(canonical_cmp);
        let got: Vec<String> = names.iter().map(Name::text).collect();
        let want: Vec<String> = order.iter().map(|s| format!("{s}.")).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn bitmaps() {
        // RFC 4034 §4.3's example: A MX RRSIG NSEC TYPE1234.
        let b = type_bitmap(&[1, 15, 46, 47, 1234]);
        assert_eq!(
            b,
            [
                0x00, 0x06, 0x40, 0x01, 0x00, 0x00, 0x00, 0x03, 0x04, 0x1b, 0x00, 0x00, 0x00, 0x00,
                0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x20
            ]
        );
    }
}
