//! DNS names in wire format: the per-byte walk the kernel runs over a question name, and the
//! text-to-wire encoding the CLI uses. Both lower-case and hash the same way, so a name the
//! CLI stores is found by the kernel whatever case a client (or a 0x20 resolver) sends.

/// Longest wire-format name, root label included (RFC 1035 §3.1).
pub const MAX_WIRE_LEN: usize = 255;
/// Longest label (RFC 1035 §2.3.4).
pub const MAX_LABEL_LEN: usize = 63;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

pub const HASH_INIT: u64 = FNV_OFFSET;

/// One FNV-1a step over a lower-cased byte.
#[inline(always)]
pub fn hash_step(h: u64, b: u8) -> u64 {
    (h ^ b as u64).wrapping_mul(FNV_PRIME)
}

/// ASCII lower-casing only: DNS compares names ASCII case-insensitively (RFC 4343).
#[inline(always)]
pub fn lower(b: u8) -> u8 {
    if b.wrapping_sub(b'A') < 26 {
        b | 0x20
    } else {
        b
    }
}

/// What one byte of a question name turned out to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Part of the name: store (and hash) this byte.
    Byte(u8),
    /// The root label: the name ends here (this zero byte is part of it).
    End,
    /// A compression pointer or an extended label type: not for us.
    Invalid,
}

/// Advances the walk by one byte. `left` is how many bytes remain in the current label
/// (0 when the next byte is a length byte).
#[inline(always)]
pub fn step(left: &mut u8, b: u8) -> Step {
    if *left == 0 {
        if b == 0 {
            Step::End
        } else if b & 0xc0 != 0 {
            Step::Invalid
        } else {
            *left = b;
            Step::Byte(b)
        }
    } else {
        *left -= 1;
        Step::Byte(lower(b))
    }
}

/// A question name parsed from wire bytes (host side of the same walk the kernel does).
#[derive(Clone, Copy)]
pub struct Walked {
    pub lower: [u8; 256],
    /// Wire length, root label included.
    pub len: usize,
    pub hash: u64,
}

/// Walks a name at the start of `wire`. `None` for a pointer, an extended label, a name
/// longer than 255 bytes or one cut short.
pub fn walk(wire: &[u8]) -> Option<Walked> {
    let mut out = Walked {
        lower: [0; 256],
        len: 0,
        hash: HASH_INIT,
    };
    let mut left = 0u8;
    let mut i = 0;
    while i < MAX_WIRE_LEN {
        let b = *wire.get(i)?;
        match step(&mut left, b) {
            Step::Byte(c) => {
                out.lower[i] = c;
                out.hash = hash_step(out.hash, c);
            }
            Step::End => {
                out.hash = hash_step(out.hash, 0);
                out.len = i + 1;
                return Some(out);
            }
            Step::Invalid => return None,
        }
        i += 1;
    }
    None
}

#[cfg(feature = "user")]
pub use text::*;

#[cfg(feature = "user")]
mod text {
    use super::*;

    /// Encodes a presentation-format name ("www.Example.com" or with a trailing dot) as a
    /// lower-cased wire name. Refuses empty labels, labels over 63 bytes, names over 255.
    pub fn encode(text: &str) -> Result<Vec<u8>, String> {
        let t = text.strip_suffix('.').unwrap_or(text);
        if t.is_empty() {
            return Err("the root name cannot be a service".into());
        }
        let mut wire = Vec::with_capacity(t.len() + 2);
        for label in t.split('.') {
            if label.is_empty() {
                return Err(format!("empty label in {text:?}"));
            }
            if label.len() > MAX_LABEL_LEN {
                return Err(format!(
                    "label {label:?} is {} bytes, over the limit of {MAX_LABEL_LEN}",
                    label.len()
                ));
            }
            if !label.bytes().all(|b| b.is_ascii_graphic() && b != b'\\') {
                return Err(format!(
                    "label {label:?} has a character that is not printable ASCII"
                ));
            }
            wire.push(label.len() as u8);
            wire.extend(label.bytes().map(lower));
        }
        wire.push(0);
        if wire.len() > MAX_WIRE_LEN {
            return Err(format!(
                "name is {} bytes in wire format, over the limit of {MAX_WIRE_LEN}",
                wire.len()
            ));
        }
        Ok(wire)
    }

    /// The kernel's lookup hash of a lower-cased wire name.
    pub fn hash(wire: &[u8]) -> u64 {
        wire.iter().fold(HASH_INIT, |h, &b| hash_step(h, b))
    }

    /// Wire to presentation format, for listing.
    pub fn decode(wire: &[u8]) -> String {
        let mut out = String::new();
        let mut i = 0;
        while i < wire.len() && wire[i] != 0 {
            let n = wire[i] as usize;
            let end = (i + 1 + n).min(wire.len());
            out.push_str(&String::from_utf8_lossy(&wire[i + 1..end]));
            out.push('.');
            i = end;
        }
        if out.is_empty() {
            out.push('.');
        }
        out
    }
}

#[cfg(all(test, feature = "user"))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn encode_and_walk_agree_case_insensitively() {
        let wire = encode("WWW.Example.COM.").unwrap();
        assert_eq!(wire, b"\x03www\x07example\x03com\x00");
        let mixed = b"\x03wWw\x07ExAmPlE\x03cOm\x00";
        let w = walk(mixed).unwrap();
        assert_eq!(w.len, wire.len());
        assert_eq!(&w.lower[..w.len], &wire[..]);
        assert_eq!(w.hash, hash(&wire));
        assert_eq!(decode(&wire), "www.example.com.");
    }

    #[test]
    fn encode_refuses_bad_names() {
        assert!(encode("").is_err());
        assert!(encode("a..b").is_err());
        assert!(encode(&"a".repeat(64))
            .unwrap_err()
            .contains("over the limit of 63"));
        let long = vec!["a".repeat(63); 4].join(".");
        assert!(encode(&long).unwrap_err().contains("over the limit of 255"));
        let ok = [
            "a".repeat(63),
            "a".repeat(63),
            "a".repeat(63),
            "a".repeat(61),
        ]
        .join(".");
        assert_eq!(encode(&ok).unwrap().len(), 255);
    }

    #[test]
    fn walk_refuses_pointers_and_long_names() {
        assert!(walk(b"\x03www\xc0\x0c").is_none());
        assert!(walk(b"\x03www\x40abc").is_none());
        assert!(walk(b"\x03www").is_none());
        let mut long = Vec::new();
        for _ in 0..5 {
            long.push(63);
            long.extend([b'a'; 63]);
        }
        long.push(0);
        assert!(walk(&long).is_none());
    }

    proptest! {
        #[test]
        fn walk_never_panics_and_round_trips(
            bytes in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            if let Some(w) = walk(&bytes) {
                prop_assert!(w.len <= MAX_WIRE_LEN);
                prop_assert_eq!(w.lower[w.len - 1], 0);
                prop_assert_eq!(w.hash, hash(&w.lower[..w.len]));
                let text = decode(&w.lower[..w.len]);
                if let Ok(again) = encode(&text) {
                    prop_assert_eq!(&again[..], &w.lower[..w.len]);
                }
            }
        }
    }
}
