//! A zone's DNSSEC in text: key files made (`dnssec keygen`), the DS for the parent
//! (`dnssec ds`), and every signed RRset as a zone file (`dnssec dump`), in the
//! presentation formats of RFC 4034 §2.2, §3.2, §4.2 and §5.3.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use director_plan::dnssec::{key::ZoneKey, wire};
use hickory_proto::rr::{RData, RecordType};

use super::presentation::{dnskey_text, ds_text};
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
