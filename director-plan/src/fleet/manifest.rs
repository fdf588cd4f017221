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
    /// The live inputs laid over the files' (routers over BMP, agents' RTT), when the
    /// config has them. Absent from older manifests and from a fleet without live inputs,
    /// whose manifests stay as they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<LiveSources>,
}

/// What a version took from the live inputs: who sent it, how much of it there was, and a
/// digest of the routes and measurements as decided (so a publisher that takes over with
/// the same live state finds the version already current).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveSources {
    /// Per site with a `bmp_router`: `site=router` (as the config names the router).
    #[serde(default)]
    pub routers: Vec<String>,
    /// `[rtt] agents`' URLs, then the agents read from the store (`[rtt] from_store`) behind
    /// a value, as `store:<site>/<agent>`.
    #[serde(default)]
    pub agents: Vec<String>,
    /// Routes the routers gave, summed over the sites that have a view.
    #[serde(default)]
    pub routes: u64,
    /// RTT values the agents gave, summed over the sites.
    #[serde(default)]
    pub measurements: u64,
    /// SHA-256 over those sites' routes and RTT values as decided (files and live merged).
    #[serde(default)]
    pub digest: String,
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

    /// A manifest without live inputs says nothing of them (its bytes are what they were
    /// before the field existed), and one written before it parses.
    #[test]
    fn live_sources_are_optional() {
        let m = Manifest {
            version: 1,
            table: String::new(),
            chunks: Vec::new(),
            entries: 0,
            sources: Sources::default(),
            publisher: "p1".into(),
            published_ms: 1,
        };
        let text = String::from_utf8(m.to_json()).unwrap();
        assert!(!text.contains("live"), "{text}");
        let old = r#"{"version":3,"table":"t","chunks":[],"entries":0,
            "sources":{"config":{"digest":"d","bytes":1},"inputs":{},"compiler":"director 0.1.0"},
            "publisher":"p1","published_ms":5}"#;
        assert_eq!(Manifest::parse(old.as_bytes()).unwrap().sources.live, None);
        let with = Manifest {
            sources: Sources {
                live: Some(LiveSources {
                    routers: vec!["a=203.0.113.129".into()],
                    routes: 2,
                    digest: "x".into(),
                    ..LiveSources::default()
                }),
                ..Sources::default()
            },
            ..m
        };
        assert_eq!(Manifest::parse(&with.to_json()).unwrap(), with);
    }
}
