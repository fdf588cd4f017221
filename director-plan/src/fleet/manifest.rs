//! A published version: which chunks make its table, the config it was compiled with, and
//! what it was compiled from. Written to the store before the current pointer names it, and
//! never changed after: an edge that reads a manifest can fetch and check everything in it.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::chunks::{self, Chunk};

/// A chunk as a manifest names it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkRef {
    pub digest: String,
    pub bytes: u64,
}

impl From<&Chunk> for ChunkRef {
    fn from(c: &Chunk) -> ChunkRef {
        ChunkRef {
            digest: c.digest.clone(),
            bytes: c.bytes.len() as u64,
        }
    }
}

/// What a version was compiled from: equal for equal inputs, so a publisher that takes over
/// can tell it has nothing new to publish.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sources {
    /// The config's text, stored as a chunk of its own (edges build their objects from it).
    pub config: ChunkRef,
    /// Every input file the config names, as written there, with its SHA-256.
    pub inputs: BTreeMap<String, String>,
    /// The compiler: director's version.
    pub compiler: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// 1, 2, 3...: one more than the version it replaced.
    pub version: u64,
    /// SHA-256 over the table's chunks in order.
    pub table: String,
    pub chunks: Vec<ChunkRef>,
    pub entries: u64,
    pub sources: Sources,
    /// Who published it, and when (Unix milliseconds).
    pub publisher: String,
    pub published_ms: u64,
}

impl Manifest {
    /// Every chunk digest the version needs, the config's included.
    pub fn digests(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.sources.config.digest.as_str())
            .chain(self.chunks.iter().map(|c| c.digest.as_str()))
    }

    pub fn bytes(&self) -> u64 {
        self.sources.config.bytes + self.chunks.iter().map(|c| c.bytes).sum::<u64>()
    }

    pub fn parse(text: &[u8]) -> Result<Manifest> {
        serde_json::from_slice(text).context("not a director manifest")
    }

    pub fn to_json(&self) -> Vec<u8> {
        // A struct of strings and numbers always serialises.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Checks fetched bytes against the manifest: each chunk's digest and size, then the
    /// table's digest. Returns the config's text.
    pub fn check<'a>(&self, config: &'a [u8], table: &[&[u8]]) -> Result<&'a str> {
        check_chunk(&self.sources.config, config).context("config")?;
        if table.len() != self.chunks.len() {
            bail!("{} chunks for {} named", table.len(), self.chunks.len());
        }
        for (i, (r, b)) in self.chunks.iter().zip(table).enumerate() {
            check_chunk(r, b).with_context(|| format!("chunk {i}"))?;
        }
        let whole = chunks::table_digest(table.iter().copied());
        if whole != self.table {
            bail!("table digest {whole}, manifest says {}", self.table);
        }
        std::str::from_utf8(config).context("config is not UTF-8")
    }
}

/// A chunk's bytes against its reference.
pub fn check_chunk(r: &ChunkRef, b: &[u8]) -> Result<()> {
    if b.len() as u64 != r.bytes {
        bail!("{} bytes, {} expected", b.len(), r.bytes);
    }
    let d = chunks::digest(b);
    if d != r.digest {
        bail!("digest {d}, {} expected", r.digest);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_every_digest() {
        let config = b"[[site]]".to_vec();
        let c = [
            Chunk::new(b"DRT1abc".to_vec()),
            Chunk::new(b"DRT1de".to_vec()),
        ];
        let m = Manifest {
            version: 7,
            table: chunks::table_digest(c.iter().map(|c| &c.bytes[..])),
            chunks: c.iter().map(ChunkRef::from).collect(),
            entries: 0,
            sources: Sources {
                config: ChunkRef::from(&Chunk::new(config.clone())),
                ..Sources::default()
            },
            publisher: "p1".into(),
            published_ms: 1,
        };
        let parts: Vec<&[u8]> = c.iter().map(|c| &c.bytes[..]).collect();
        assert_eq!(m.check(&config, &parts).unwrap(), "[[site]]");
        assert!(m.check(b"[[sitE]]", &parts).is_err());
        let swapped = [parts[1], parts[0]];
        assert!(m.check(&config, &swapped).is_err());
        assert!(m.check(&config, &parts[..1]).is_err());
        assert_eq!(Manifest::parse(&m.to_json()).unwrap(), m);
        assert!(Manifest::parse(b"{}").is_err());
    }
}
