//! DNS names in wire format: the per-byte walk the kernel runs over a question name, and the
//! text-to-wire encoding the CLI uses. Both lower-case and hash the same way, so a name the
//! CLI stores is found by the kernel whatever case a client (or a 0x20 resolver) sends.

// Named from here by the program's name walk, beside the other name bounds.
pub use crate::limits::MAX_WIRE_LEN;
/// Longest label (RFC 1035 §2.3.4).
pub const MAX_LABEL_LEN: usize = 63;

/// Longest name walk in labels: 127 one-byte labels and the root fill 255 bytes.
pub const MAX_LABELS: usize = 128;

/// Start value of the name hash (any odd constant; this one is the golden ratio's).
pub const HASH_INIT: u64 = 0x9e37_79b9_7f4a_7c15;
const HASH_MUL: u64 = 0xff51_afd7_ed55_8ccd;

/// One step of the name hash over 8 bytes of the lower-cased wire name (little-endian, zero
/// past the name's end). The kernel reads names a word at a time: a byte-at-a-time hash
/// was the largest single cost of the answer path.
#[inline(always)]
pub fn hash_word(h: u64, w: u64) -> u64 {
    let x = (h ^ w).wrapping_mul(HASH_MUL);
    x ^ (x >> 29)
}

/// The hash after the last word: the length goes in, so trailing zero words count.
#[inline(always)]
pub fn hash_finish(h: u64, len: usize) -> u64 {
    hash_word(h, len as u64)
}

/// The `DIR_NAME_SLOTS` slot of a name, from its `hash`: the top bits of a multiply.
#[inline(always)]
pub fn slot(hash: u64) -> u32 {
    (hash.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - crate::limits::NAME_SLOT_BITS)) as u32
}

/// ASCII lower-casing of 8 bytes at once. Length bytes (at most 63) are never letters, so a
/// whole wire name can be lowered word by word with the same result as label by label.
#[inline(always)]
pub fn lower_word(w: u64) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let low = w & LOW7;
    // A byte's high bit set in each: its low 7 bits are >= 'A', > 'Z'; no carry crosses bytes.
    let ge_a = low + 0x3f3f_3f3f_3f3f_3f3f;
    let gt_z = low + 0x2525_2525_2525_2525;
    let upper = (ge_a ^ gt_z) & !w & HIGH;
    w | (upper >> 2)
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
        hash: 0,
    };
    let mut left = 0u8;
    let mut i = 0;
    while i < MAX_WIRE_LEN {
        let b = *wire.get(i)?;
        match step(&mut left, b) {
            Step::Byte(c) => out.lower[i] = c,
            Step::End => {
                out.len = i + 1;
                out.hash = hash(&out.lower[..out.len]);
                return Some(out);
            }
            Step::Invalid => return None,
        }
        i += 1;
    }
    None
}

/// The kernel's lookup hash of a lower-cased wire name: its 8-byte little-endian words, the
/// last one zero-padded, then its length.
pub fn hash(wire: &[u8]) -> u64 {
    let mut h = HASH_INIT;
    for chunk in wire.chunks(8) {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        h = hash_word(h, u64::from_le_bytes(w));
    }
    hash_finish(h, wire.len())
}

#[cfg(feature = "host")]
pub use text::*;

#[cfg(feature = "host")]
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

#[cfg(all(test, feature = "host"))]
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

    #[test]
    fn lower_word_lowers_every_byte_value_in_every_position() {
        for b in 0..=255u8 {
            for pos in 0..8 {
                // Neighbours that sit at the edges of the letter range, to catch carries.
                let mut bytes = [b'@', b'Z', 0xff, b'[', b'A', 0x80, b'`', b'z'];
                bytes[pos] = b;
                let want = bytes.map(lower);
                let got = lower_word(u64::from_le_bytes(bytes)).to_le_bytes();
                assert_eq!(got, want, "byte {b:#x} at {pos}");
            }
        }
    }

    /// The kernel's way: the raw wire name read in words (the last one shifted down from
    /// the 8 bytes that end at the name's end), each lowered whole, then hashed.
    fn kernel_hash(raw: &[u8]) -> u64 {
        let mut h = HASH_INIT;
        let mut base = 0;
        while base < raw.len() {
            let w = if base + 8 <= raw.len() {
                u64::from_le_bytes(raw[base..base + 8].try_into().unwrap())
            } else {
                let mut tail = [0u8; 8];
                let rem = raw.len() - base;
                tail[8 - rem..].copy_from_slice(&raw[base..]);
                u64::from_le_bytes(tail) >> (8 * (8 - rem))
            };
            h = hash_word(h, lower_word(w));
            base += 8;
        }
        hash_finish(h, raw.len())
    }

    proptest! {
        #[test]
        fn the_kernels_word_walk_hashes_like_the_host(
            labels in proptest::collection::vec("[a-zA-Z0-9_-]{1,20}", 1..6),
        ) {
            let text = labels.join(".");
            let mut raw = Vec::new();
            for l in &labels {
                raw.push(l.len() as u8);
                raw.extend(l.bytes());
            }
            raw.push(0);
            let w = walk(&raw).unwrap();
            prop_assert_eq!(kernel_hash(&raw), w.hash);
            prop_assert_eq!(w.hash, hash(&encode(&text).unwrap()));
        }

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
