//! TSIG (RFC 8945) as far as a server without keys needs it: finding a query's TSIG record
//! on the wire, and the unsigned error record that answers it. director holds no TSIG keys,
//! so every signed query is signed under a key it does not know (§5.2.2: NOTAUTH, BADKEY).
//! hickory-proto reads a TSIG record (without its `dnssec` feature) as an unknown one and
//! does not check where it sits, and it writes OPT after every other additional record,
//! where TSIG must come last: so both directions are done here, on the raw message.

use hickory_proto::rr::Name;
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder, BinEncodable};

pub const TYPE_TSIG: u16 = 250;
const CLASS_ANY: u16 = 255;
/// TSIG error: the key is not known (RFC 8945 §5.2.2).
pub const BADKEY: u16 = 17;

/// The fields of a query's TSIG record that an error answer repeats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tsig {
    /// The key's name and the algorithm's, uncompressed, in the letter case they came in.
    pub key: Vec<u8>,
    pub algorithm: Vec<u8>,
    /// Time Signed (48 bits) and Fudge as the query had them.
    pub time_signed: [u8; 6],
    pub fudge: u16,
}

/// The query's TSIG record, if it has one. `Err` when one cannot be used, which RFC 8945
/// §5.2 answers with FORMERR: a TSIG record that is not the last of the additional section
/// (or not in it), or whose RDATA does not read to its length.
pub fn find(msg: &[u8]) -> Result<Option<Tsig>, ()> {
    let count = |at: usize| -> Result<usize, ()> {
        let b = msg.get(at..at + 2).ok_or(())?;
        Ok(u16::from_be_bytes([b[0], b[1]]) as usize)
    };
    let (qd, ar) = (count(4)?, count(10)?);
    let records = count(6)? + count(8)? + ar;
    if records == 0 {
        // Most queries: no record to look at, nothing to walk.
        return Ok(None);
    }
    let mut d = BinDecoder::new(msg);
    d.read_slice(12).map_err(drop)?;
    for _ in 0..qd {
        Name::read(&mut d).map_err(drop)?;
        d.read_slice(4).map_err(drop)?;
    }
    let mut found = None;
    for i in 0..records {
        let owner = Name::read(&mut d).map_err(drop)?;
        let rtype = d.read_u16().map_err(drop)?.unverified();
        // CLASS and TTL: ANY and 0 in a TSIG record, not checked (nothing here depends on
        // them).
        d.read_slice(6).map_err(drop)?;
        let rdlen = d.read_u16().map_err(drop)?.unverified() as usize;
        let rdata_at = d.index();
        d.read_slice(rdlen).map_err(drop)?;
        if rtype != TYPE_TSIG {
            continue;
        }
        if ar == 0 || i + 1 != records {
            return Err(());
        }
        // Names in the RDATA may (wrongly) be compressed: read from the whole message.
        let mut r = d.clone(u16::try_from(rdata_at).map_err(drop)?);
        let algorithm = Name::read(&mut r).map_err(drop)?;
        let mut time_signed = [0u8; 6];
        time_signed.copy_from_slice(r.read_slice(6).map_err(drop)?.unverified());
        let fudge = r.read_u16().map_err(drop)?.unverified();
        let mac = r.read_u16().map_err(drop)?.unverified() as usize;
        r.read_slice(mac).map_err(drop)?;
        // Original ID and Error.
        r.read_slice(4).map_err(drop)?;
        let other = r.read_u16().map_err(drop)?.unverified() as usize;
        r.read_slice(other).map_err(drop)?;
        if r.index() != rdata_at + rdlen {
            return Err(());
        }
        found = Some(Tsig {
            key: owner.to_bytes().map_err(drop)?,
            algorithm: algorithm.to_bytes().map_err(drop)?,
            time_signed,
            fudge,
        });
    }
    Ok(found)
}

/// The TSIG record of an unsigned error answer (RFC 8945 §5.3.2: MAC size 0, no MAC):
/// the query's key name and algorithm, its Time Signed and Fudge, the answer's `id` as
/// Original ID, and `error`. Knot writes the same fields.
pub fn error_record(t: &Tsig, id: u16, error: u16) -> Vec<u8> {
    let mut rdata = t.algorithm.clone();
    rdata.extend_from_slice(&t.time_signed);
    rdata.extend_from_slice(&t.fudge.to_be_bytes());
    rdata.extend_from_slice(&0u16.to_be_bytes()); // MAC size
    rdata.extend_from_slice(&id.to_be_bytes());
    rdata.extend_from_slice(&error.to_be_bytes());
    rdata.extend_from_slice(&0u16.to_be_bytes()); // Other Len
    let mut rr = t.key.clone();
    rr.extend_from_slice(&TYPE_TSIG.to_be_bytes());
    rr.extend_from_slice(&CLASS_ANY.to_be_bytes());
    rr.extend_from_slice(&0u32.to_be_bytes()); // TTL
                                               // Two names of at most 255 bytes and 16 fixed: always fits.
    rr.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
    rr.extend_from_slice(&rdata);
    rr
}

/// Appends `record` to `msg`'s additional section, after everything else in it (where a
/// TSIG record must be); `None` if the count would overflow or `msg` has no header.
pub fn append_last(msg: &mut Vec<u8>, record: &[u8]) -> Option<()> {
    let ar = msg.get(10..12)?;
    let ar = u16::from_be_bytes([ar[0], ar[1]]).checked_add(1)?;
    msg[10..12].copy_from_slice(&ar.to_be_bytes());
    msg.extend_from_slice(record);
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A query for `gslb.example.com. SOA` (ID 0x1234) with `additional` records after it.
    fn signed(additional: &[&[u8]]) -> Vec<u8> {
        let mut m = vec![
            0x12,
            0x34,
            0x01,
            0,
            0,
            1,
            0,
            0,
            0,
            0,
            0,
            additional.len() as u8,
        ];
        m.extend_from_slice(b"\x04gslb\x07example\x03com\x00\x00\x06\x00\x01");
        for a in additional {
            m.extend_from_slice(a);
        }
        m
    }

    /// A TSIG record under `unknown-key.` with a 32-byte MAC and `other` as Other Data.
    fn tsig_rr(other: &[u8]) -> Vec<u8> {
        let mut rdata = b"\x0bhmac-sha256\x00".to_vec();
        rdata.extend_from_slice(&[0, 0, 0x6b, 0x49, 0xd2, 0]); // 1800000000
        rdata.extend_from_slice(&[0x01, 0x2c, 0, 32]);
        rdata.extend_from_slice(&[0xaa; 32]);
        rdata.extend_from_slice(&[0x12, 0x34, 0, 0]);
        rdata.extend_from_slice(&(other.len() as u16).to_be_bytes());
        rdata.extend_from_slice(other);
        let mut rr = b"\x0bUnknown-Key\x00\x00\xfa\x00\xff\x00\x00\x00\x00".to_vec();
        rr.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        rr.extend_from_slice(&rdata);
        rr
    }

    const OPT: &[u8] = b"\x00\x00\x29\x04\xd0\x00\x00\x00\x00\x00\x00";

    #[test]
    fn finds_the_last_additional_record_and_nothing_else() {
        let t = find(&signed(&[OPT, &tsig_rr(b"")])).unwrap().unwrap();
        assert_eq!(t.key, b"\x0bUnknown-Key\x00");
        assert_eq!(t.algorithm, b"\x0bhmac-sha256\x00");
        assert_eq!((t.time_signed, t.fudge), ([0, 0, 0x6b, 0x49, 0xd2, 0], 300));
        assert_eq!(find(&signed(&[&tsig_rr(b"xyz")])).unwrap(), Some(t));
        assert_eq!(find(&signed(&[OPT])), Ok(None));
        assert_eq!(find(&signed(&[])), Ok(None));
        // Not last, or not in the additional section: FORMERR (RFC 8945 §5.2).
        assert_eq!(find(&signed(&[&tsig_rr(b""), OPT])), Err(()));
        let mut in_answer = signed(&[&tsig_rr(b"")]);
        in_answer[7] = 1;
        in_answer[11] = 0;
        assert_eq!(find(&in_answer), Err(()));
        // RDATA shorter or longer than its length says, and every cut of the message.
        let whole = signed(&[&tsig_rr(b"")]);
        // RDLENGTH's low byte: after the owner (13 bytes), TYPE, CLASS, TTL and its high byte.
        let rdlen_at = whole.len() - tsig_rr(b"").len() + 22;
        for delta in [1u8, 0xff] {
            let mut m = whole.clone();
            m[rdlen_at] = m[rdlen_at].wrapping_add(delta);
            assert_eq!(find(&m), Err(()), "rdlen changed by {delta}");
        }
        for cut in 0..whole.len() {
            assert!(find(&whole[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn the_badkey_record_is_knots() {
        let t = find(&signed(&[&tsig_rr(b"other")])).unwrap().unwrap();
        let rr = error_record(&t, 0x1234, BADKEY);
        // Knot 3.2's record for the same query, but for the key name's letter case
        // (Knot writes its lower-cased form; the client's is kept here).
        let mut knot = b"\x0bUnknown-Key\x00\x00\xfa\x00\xff\x00\x00\x00\x00\x00\x1d".to_vec();
        knot.extend_from_slice(b"\x0bhmac-sha256\x00\x00\x00\x6b\x49\xd2\x00\x01\x2c\x00\x00");
        knot.extend_from_slice(&[0x12, 0x34, 0, 17, 0, 0]);
        assert_eq!(rr, knot);
        let mut m = signed(&[OPT]);
        append_last(&mut m, &rr).unwrap();
        assert_eq!((m[11], find(&m)), (2, Ok(Some(t))));
    }
}
