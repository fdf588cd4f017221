//! DNSSEC's signed address sets as the kernel holds them (`DIR_SIGNED`): per stored
//! decision, family and the candidate `select` starts at, the addresses a DO answer carries
//! and its RRSIG record ready to append (the owner a pointer to the question). Made ahead
//! where the zone's key is; the kernel and the listeners only copy them.

/// An RRSIG record as appended: owner pointer (2), type, class, TTL, RDLENGTH (10), then
/// type covered .. key tag (18), the signer and the 64-byte P-256 signature; a multiple
/// of 8, so the value has no padding.
pub const RRSIG_RECORD_MAX: usize = 224;
/// The longest signer name a signed set carries: a zone's origin of at most this many
/// bytes on the wire (RRSIG's signer is never compressed).
pub const MAX_SIGNER: usize = RRSIG_RECORD_MAX - 2 - 10 - 18 - 64;
/// The most addresses a set holds (the most `select` answers with).
pub const MAX_SET: usize = crate::limits::MAX_CANDIDATES;

/// `DIR_SIGNED`'s key.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SignedKey {
    /// The stored decision's index (`DIR_CHOICES`).
    pub choice: u32,
    /// 4 or 6.
    pub family: u8,
    /// The candidate index `select` started at.
    pub start: u8,
    pub _pad: [u8; 2],
}

/// `DIR_SIGNED`'s value: the set and its signature.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SignedSet {
    /// Addresses in `addrs` (4 bytes each for IPv4, at the front of each slot).
    pub count: u8,
    pub family: u8,
    /// Bytes of `rrsig` in use.
    pub rrsig_len: u16,
    /// The TTL the set was signed with, which the answer's records carry.
    pub ttl: u32,
    pub addrs: [[u8; 16]; MAX_SET],
    pub rrsig: [u8; RRSIG_RECORD_MAX],
}

impl Default for SignedSet {
    fn default() -> Self {
        SignedSet {
            count: 0,
            family: 0,
            rrsig_len: 0,
            ttl: 0,
            addrs: [[0; 16]; MAX_SET],
            rrsig: [0; RRSIG_RECORD_MAX],
        }
    }
}

/// RRSIG's type: 46.
pub const TYPE_RRSIG: u16 = 46;

impl SignedSet {
    /// The RRSIG record for `rdata` as appended after the answers: a pointer to the
    /// question's name (offset 12), type RRSIG, class IN, the signed TTL, the RDATA.
    /// `None` when it does not fit (a signer longer than [`MAX_SIGNER`]).
    pub fn rrsig_record(ttl: u32, rdata: &[u8]) -> Option<([u8; RRSIG_RECORD_MAX], u16)> {
        let len = 12 + rdata.len();
        if len > RRSIG_RECORD_MAX {
            return None;
        }
        let mut r = [0u8; RRSIG_RECORD_MAX];
        r[0] = 0xc0;
        r[1] = 12;
        r[2..4].copy_from_slice(&TYPE_RRSIG.to_be_bytes());
        r[4..6].copy_from_slice(&1u16.to_be_bytes());
        r[6..10].copy_from_slice(&ttl.to_be_bytes());
        r[10..12].copy_from_slice(&(rdata.len() as u16).to_be_bytes());
        r[12..len].copy_from_slice(rdata);
        Some((r, len as u16))
    }
}

#[cfg(feature = "user")]
unsafe impl aya::Pod for SignedKey {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for SignedSet {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_has_no_holes() {
        assert_eq!(size_of::<SignedKey>(), 8);
        assert_eq!(size_of::<SignedSet>(), 8 + 16 * MAX_SET + RRSIG_RECORD_MAX);
        assert_eq!(size_of::<SignedSet>() % 8, 0);
        assert_eq!(MAX_SIGNER, 130);
    }

    #[test]
    fn the_record_points_at_the_question() {
        let (r, len) = SignedSet::rrsig_record(30, &[1, 2, 3]).unwrap();
        assert_eq!(
            &r[..len as usize],
            &[0xc0, 12, 0, 46, 0, 1, 0, 0, 0, 30, 0, 3, 1, 2, 3]
        );
        assert!(SignedSet::rrsig_record(30, &[0; RRSIG_RECORD_MAX]).is_none());
    }
}
