//! The decision table as chunks of at most [`MAX_CHUNK`] bytes, each named by its SHA-256.
//!
//! Entries are laid out service by service in table order, in a fixed big-endian format, so
//! the same table always gives the same bytes. A chunk ends where the next entry's prefix
//! (not its decision) hashes to a boundary, at a service change, or before it would outgrow
//! [`MAX_CHUNK`]: a boundary depends only on the addresses around it, so a change to the
//! decisions of one region rewrites only the chunks holding that region, and a prefix added
//! or removed moves at most the boundary it is.

use anyhow::{bail, Context, Result};
use director_common::limits::MAX_CANDIDATES;
use director_common::maps::Decision;
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use sha2::{Digest, Sha256};

/// The store refuses values of 1.5 MiB; a chunk stays at 1 MiB.
pub const MAX_CHUNK: usize = 1 << 20;
/// On average one entry in this many ends a chunk (about 150 KiB of IPv4 entries).
pub const BOUNDARY_EVERY: u64 = 4096;
/// First bytes of every chunk: the format's name and version.
pub const MAGIC: &[u8; 4] = b"DRT1";

/// One service's entries, its servers named by their 1-based position in the config's
/// `[[server]]` list (a publisher's ids, which every edge maps to its own).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceTable {
    /// 0-based position of the service in the config's `[[service]]` list.
    pub service: u16,
    pub entries: Vec<(IpNet, Decision)>,
}

/// A chunk and its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// Lower-case hex SHA-256 of `bytes`.
    pub digest: String,
    pub bytes: Vec<u8>,
}

impl Chunk {
    pub fn new(bytes: Vec<u8>) -> Chunk {
        Chunk {
            digest: digest(&bytes),
            bytes,
        }
    }
}

/// Lower-case hex SHA-256.
pub fn digest(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// The digest of a whole table: SHA-256 over its chunks' bytes in order (equal for equal
/// tables however they were fetched).
pub fn table_digest<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> String {
    let mut h = Sha256::new();
    for c in chunks {
        h.update(c);
    }
    hex(&h.finalize())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

const DECISION_BYTES: usize = 3 + 4 * MAX_CANDIDATES;

fn put_entry(out: &mut Vec<u8>, service: u16, p: &IpNet, d: &Decision) {
    out.extend_from_slice(&service.to_be_bytes());
    match p {
        IpNet::V4(n) => {
            out.extend_from_slice(&[4, n.prefix_len()]);
            out.extend_from_slice(&n.network().octets());
        }
        IpNet::V6(n) => {
            out.extend_from_slice(&[6, n.prefix_len()]);
            out.extend_from_slice(&n.network().octets());
        }
    }
    out.extend_from_slice(&[d.prefix_len, d.count, d.primary]);
    for s in d.servers {
        out.extend_from_slice(&s.to_be_bytes());
    }
    for w in d.weights {
        out.extend_from_slice(&w.to_be_bytes());
    }
}

/// FNV-1a over the entry's key bytes (service, family, length, address).
fn key_hash(key: &[u8]) -> u64 {
    key.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The table's chunks, in order. Entries must be in table order within each service.
pub fn encode(tables: &[ServiceTable]) -> Vec<Chunk> {
    encode_parts(tables.iter().map(|t| (t.service, &t.entries[..])))
}

/// [`encode`] of tables held elsewhere (service, its entries), borrowed.
pub fn encode_parts<'a>(
    tables: impl IntoIterator<Item = (u16, &'a [(IpNet, Decision)])>,
) -> Vec<Chunk> {
    let mut out = Vec::new();
    let mut cur: Vec<u8> = MAGIC.to_vec();
    let mut last_service = None;
    let mut entry = Vec::with_capacity(4 + 16 + DECISION_BYTES);
    for (service, entries) in tables {
        for (p, d) in entries {
            entry.clear();
            put_entry(&mut entry, service, p, d);
            let key_len = entry.len() - DECISION_BYTES;
            let boundary = key_hash(&entry[..key_len]).is_multiple_of(BOUNDARY_EVERY)
                || last_service != Some(service)
                || cur.len() + entry.len() > MAX_CHUNK;
            if boundary && cur.len() > MAGIC.len() {
                out.push(Chunk::new(std::mem::replace(&mut cur, MAGIC.to_vec())));
            }
            cur.extend_from_slice(&entry);
            last_service = Some(service);
        }
    }
    if cur.len() > MAGIC.len() || out.is_empty() {
        out.push(Chunk::new(cur));
    }
    out
}

/// A cursor over one chunk's bytes.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let s = self
            .b
            .get(self.at..self.at + n)
            .with_context(|| format!("cut short at byte {}", self.at))?;
        self.at += n;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16> {
        let s = self.take(2)?;
        Ok(u16::from_be_bytes([s[0], s[1]]))
    }
}

/// The tables back from their chunks (in order), each chunk's format checked: a chunk that
/// does not parse, or entries out of order across chunks, is an error, never a table.
pub fn decode<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> Result<Vec<ServiceTable>> {
    let mut tables: Vec<ServiceTable> = Vec::new();
    for (i, c) in chunks.into_iter().enumerate() {
        decode_one(c, &mut tables).with_context(|| format!("chunk {i}"))?;
    }
    Ok(tables)
}

fn decode_one(c: &[u8], tables: &mut Vec<ServiceTable>) -> Result<()> {
    let mut r = Reader { b: c, at: 0 };
    if r.take(4)? != MAGIC {
        bail!(
            "not a table chunk (no {:?} header)",
            std::str::from_utf8(MAGIC)
        );
    }
    while r.at < c.len() {
        let service = r.u16()?;
        let family = r.u8()?;
        let len = r.u8()?;
        let p: IpNet = match family {
            4 => {
                let a: [u8; 4] = r.take(4)?.try_into()?;
                Ipv4Net::new(a.into(), len)
                    .with_context(|| format!("IPv4 prefix length {len}"))?
                    .into()
            }
            6 => {
                let a: [u8; 16] = r.take(16)?.try_into()?;
                Ipv6Net::new(a.into(), len)
                    .with_context(|| format!("IPv6 prefix length {len}"))?
                    .into()
            }
            f => bail!("address family {f} at byte {}", r.at - 2),
        };
        if p.trunc() != p {
            bail!("{p} has host bits set");
        }
        let mut d = Decision {
            prefix_len: r.u8()?,
            count: r.u8()?,
            primary: r.u8()?,
            ..Decision::default()
        };
        if usize::from(d.count) > MAX_CANDIDATES || d.primary > d.count {
            bail!("{p}: {} candidates, {} primary", d.count, d.primary);
        }
        for s in &mut d.servers {
            *s = r.u16()?;
        }
        for w in &mut d.weights {
            *w = r.u16()?;
        }
        match tables.last_mut() {
            Some(t) if t.service == service => t.entries.push((p, d)),
            Some(t) if t.service > service => {
                bail!("service {service} after service {}", t.service)
            }
            _ => tables.push(ServiceTable {
                service,
                entries: vec![(p, d)],
            }),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn decision(server: u16) -> Decision {
        let mut d = Decision {
            prefix_len: 24,
            count: 1,
            primary: 1,
            ..Decision::default()
        };
        d.servers[0] = server;
        d.weights[0] = 1;
        d
    }

    /// Two services over 60,000 /24s of 10.0.0.0/8 space and a few IPv6 prefixes.
    fn table(server_of: impl Fn(u32) -> u16) -> Vec<ServiceTable> {
        (0..2u16)
            .map(|service| {
                let mut entries: Vec<(IpNet, Decision)> = (0..60_000u32)
                    .map(|i| {
                        let a = std::net::Ipv4Addr::from((10 << 24) | (i << 8));
                        let p = IpNet::V4(Ipv4Net::new(a, 24).unwrap());
                        (p, decision(server_of(i)))
                    })
                    .collect();
                for i in 0..100u16 {
                    let a = std::net::Ipv6Addr::new(0x2001, 0xdb8, i, 0, 0, 0, 0, 0);
                    entries.push((IpNet::V6(Ipv6Net::new(a, 48).unwrap()), decision(2)));
                }
                ServiceTable { service, entries }
            })
            .collect()
    }

    #[test]
    fn round_trips_and_is_deterministic() {
        let t = table(|i| (i % 3) as u16 + 1);
        let a = encode(&t);
        let b = encode(&t);
        assert_eq!(a, b);
        assert!(a.len() > 4, "{} chunks", a.len());
        assert!(a.iter().all(|c| c.bytes.len() <= MAX_CHUNK));
        let back = decode(a.iter().map(|c| &c.bytes[..])).unwrap();
        assert_eq!(back, t);
        assert_eq!(
            table_digest(a.iter().map(|c| &c.bytes[..])),
            table_digest(b.iter().map(|c| &c.bytes[..]))
        );
    }

    #[test]
    fn a_regional_change_reships_only_its_chunks() {
        let before = encode(&table(|_| 1));
        // One /16's worth of /24s (256 entries) in service 0 changes its decision.
        let mut t = table(|_| 1);
        for (p, d) in t[0].entries.iter_mut().take(5_000).skip(4_744) {
            assert!(matches!(p, IpNet::V4(_)));
            *d = decision(3);
        }
        let after = encode(&t);
        let old: HashSet<&str> = before.iter().map(|c| c.digest.as_str()).collect();
        let new: Vec<&Chunk> = after
            .iter()
            .filter(|c| !old.contains(c.digest.as_str()))
            .collect();
        assert!(
            !new.is_empty() && new.len() <= 2,
            "{} of {} chunks changed",
            new.len(),
            after.len()
        );
    }

    #[test]
    fn a_chunk_never_outgrows_the_limit() {
        // Six copies of a table in one service: long runs between boundaries; the cap
        // still cuts every chunk at 1 MiB.
        let t = table(|_| 1);
        let mut big = t[0].clone();
        for _ in 0..5 {
            big.entries.extend(t[0].entries.iter().copied());
        }
        let c = encode(&[big]);
        assert!(c.iter().all(|c| c.bytes.len() <= MAX_CHUNK));
    }

    #[test]
    fn refuses_damaged_chunks() {
        let c = encode(&table(|_| 1));
        let mut cut = c[0].bytes.clone();
        cut.truncate(cut.len() - 3);
        assert!(decode([&cut[..]]).is_err());
        let mut bad = c[0].bytes.clone();
        bad[0] = b'X';
        assert!(decode([&bad[..]]).is_err());
        let mut host_bits = c[0].bytes.clone();
        // The first entry's last address byte (service 2, family 1, len 1, then 4 bytes).
        host_bits[4 + 2 + 2 + 3] = 1;
        assert!(decode([&host_bits[..]]).is_err());
        // Chunks out of order: service 1's before service 0's.
        let last = &c[c.len() - 1].bytes;
        assert!(decode([&last[..], &c[0].bytes[..]]).is_err());
    }

    /// What a fleet's publisher spends per live change on the table alone: cutting the
    /// whole table into chunks again and hashing them, at the full-scale size (755,979
    /// entries, three services). `cargo test --release -p director-plan encode_at_scale --
    /// --ignored --nocapture`.
    #[test]
    #[ignore]
    fn encode_at_scale() {
        let per = 755_979 / 3;
        let tables: Vec<ServiceTable> = (0..3u16)
            .map(|service| ServiceTable {
                service,
                entries: (0..per as u32)
                    .map(|i| {
                        let p = IpNet::V4(Ipv4Net::new((i << 8).into(), 24).unwrap());
                        (p, decision((i % 7) as u16 + 1))
                    })
                    .collect(),
            })
            .collect();
        let t = std::time::Instant::now();
        let c = encode_parts(tables.iter().map(|t| (t.service, &t.entries[..])));
        let digest = table_digest(c.iter().map(|c| &c.bytes[..]));
        let bytes: usize = c.iter().map(|c| c.bytes.len()).sum();
        eprintln!(
            "encode and hash: {:?} for {} entries, {} chunks, {bytes} bytes ({})",
            t.elapsed(),
            3 * per,
            c.len(),
            &digest[..12]
        );
    }
}
