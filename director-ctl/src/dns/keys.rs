//! A zone's DNSSEC in text: key files made (`dnssec keygen`), the DS for the parent
//! (`dnssec ds`), and every signed RRset as a zone file (`dnssec dump`), in the
//! presentation formats of RFC 4034 §2.2, §3.2, §4.2 and §5.3.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use director_plan::dnssec::{
    key::{base64_encode, ZoneKey},
    sign::rrsig_fields,
    wire::{self, rtype},
};
use hickory_proto::rr::{RData, RecordType};

use super::zone::Zone;

/// 32 bytes from the kernel's random source.
fn random_secret() -> Result<[u8; 32]> {
    use std::io::Read;
    let mut b = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .context("reading /dev/urandom")?;
    Ok(b)
}

/// Makes a key for `zone` in `dir`: the private file (0600, never overwritten), the
/// public one, and the DS line.
pub fn generate(zone: &str, dir: &Path) -> Result<(PathBuf, PathBuf, String)> {
    let origin = wire::Name::parse(zone).with_context(|| format!("--zone {zone:?}"))?;
    let key = loop {
        // A scalar out of range is rare enough to draw again.
        if let Ok(k) = ZoneKey::from_secret(&random_secret()?) {
            break k;
        }
    };
    let base = format!("K{}+013+{:05}", origin.text(), key.tag());
    let private = dir.join(format!("{base}.private"));
    let public = dir.join(format!("{base}.key"));
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&private)
        .with_context(|| format!("writing {}", private.display()))?;
    f.write_all(key.to_bind_private().as_bytes())
        .with_context(|| format!("writing {}", private.display()))?;
    let line = format!(
        "{} 3600 IN DNSKEY {}\n",
        origin.text(),
        dnskey_text(&key.dnskey_rdata())
    );
    std::fs::write(&public, line).with_context(|| format!("writing {}", public.display()))?;
    let ds = format!(
        "{} IN DS {}",
        origin.text(),
        ds_text(&key.ds_rdata(&origin))
    );
    Ok((private, public, ds))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02X}")).collect()
}

fn dnskey_text(r: &[u8]) -> String {
    format!(
        "{} {} {} {}",
        u16::from_be_bytes([r[0], r[1]]),
        r[2],
        r[3],
        base64_encode(&r[4..])
    )
}

fn ds_text(r: &[u8]) -> String {
    format!(
        "{} {} {} {}",
        u16::from_be_bytes([r[0], r[1]]),
        r[2],
        r[3],
        hex(&r[4..])
    )
}

/// YYYYMMDDHHmmSS (UTC) of Unix seconds.
fn stamp(t: u32) -> String {
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

fn type_name(t: u16) -> String {
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

/// The DS (and the zone's CDS) lines of a signed zone's keys.
pub fn ds_lines(z: &Zone) -> Result<String> {
    let mut out = String::new();
    let apex = z.data.get(&z.origin).map(Vec::as_slice).unwrap_or_default();
    let mut n = 0;
    for r in apex.iter().filter(|r| r.record_type() == RecordType::CDS) {
        if let Some(RData::Unknown { rdata, .. }) = r.data() {
            let _ = writeln!(out, "{} IN DS {}", z.origin, ds_text(rdata.anything()));
            n += 1;
        }
    }
    if n == 0 {
        bail!("{} is not signed", z.origin);
    }
    Ok(out)
}

/// Every RRset the zone serves from its static data, with the DNSSEC records and every
/// signature, as a zone file: the SOA first.
pub fn dump(z: &Zone) -> String {
    let mut out = z.export();
    let Some(s) = &z.signed else {
        return out;
    };
    for r in s.all_nsec().chain(s.all_sigs()) {
        out.push_str(&super::zone::zone_line(r));
        out.push('\n');
    }
    out
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
