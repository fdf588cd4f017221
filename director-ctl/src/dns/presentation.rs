//! DNSSEC rdata in the presentation formats of RFC 4034 (§2.2 DNSKEY, §3.2 RRSIG, §4.2
//! NSEC, §5.3 DS), for `dnssec dump`, `dnssec ds` and the zone's record listings.

use director_plan::dnssec::{
    key::base64_encode,
    sign::rrsig_fields,
    wire::{self, rtype},
};
use hickory_proto::rr::RecordType;

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02X}")).collect()
}

pub fn dnskey_text(r: &[u8]) -> String {
    format!(
        "{} {} {} {}",
        u16::from_be_bytes([r[0], r[1]]),
        r[2],
        r[3],
        base64_encode(&r[4..])
    )
}

pub fn ds_text(r: &[u8]) -> String {
    format!(
        "{} {} {} {}",
        u16::from_be_bytes([r[0], r[1]]),
        r[2],
        r[3],
        hex(&r[4..])
    )
}

/// YYYYMMDDHHmmSS (UTC) of Unix seconds.
pub fn stamp(t: u32) -> String {
    let secs = i64::from(t);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}{:02}{:02}{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

pub fn type_name(t: u16) -> String {
    RecordType::from(t).to_string()
}

/// Presentation text of the DNSSEC records director makes (held as raw RDATA).
pub fn rdata_text(code: u16, r: &[u8]) -> Option<String> {
    Some(match code {
        rtype::DNSKEY | rtype::CDNSKEY if r.len() > 4 => dnskey_text(r),
        rtype::DS | rtype::CDS if r.len() > 4 => ds_text(r),
        rtype::RRSIG => {
            let (f, sig) = rrsig_fields(r).ok()?;
            format!(
                "{} 13 {} {} {} {} {} {} {}",
                type_name(f.covered),
                f.labels,
                f.ttl,
                stamp(f.window.expiration),
                stamp(f.window.inception),
                f.tag,
                f.signer.text(),
                base64_encode(sig)
            )
        }
        rtype::NSEC => {
            let mut i = 0;
            while *r.get(i)? != 0 {
                i += 1 + r[i] as usize;
            }
            let next = wire::Name::from_wire(&r[..=i]).ok()?;
            let mut types = Vec::new();
            let mut b = &r[i + 1..];
            while b.len() >= 2 {
                let (window, len) = (u16::from(b[0]), b[1] as usize);
                for (j, byte) in b.get(2..2 + len)?.iter().enumerate() {
                    for bit in 0..8 {
                        if byte & (0x80 >> bit) != 0 {
                            types.push(type_name(window * 256 + (j * 8 + bit) as u16));
                        }
                    }
                }
                b = &b[2 + len..];
            }
            format!("{} {}", next.text(), types.join(" "))
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps() {
        assert_eq!(stamp(0), "19700101000000");
        assert_eq!(stamp(1_284_026_679), "20100909100439");
        assert_eq!(stamp(1_709_251_199), "20240229235959");
    }
}
