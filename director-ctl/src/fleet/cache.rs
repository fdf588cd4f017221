//! An edge's copy of the version it answers from, on disk (`--state-dir`): its chunks by
//! digest, its manifest in the envelope it was signed in (`manifest.signed`) and the last
//! overlay taken (`overlay.signed`), written after the kernel took them. A restarted edge
//! checks both envelopes against its trust file again, then answers from its pinned maps
//! and applies this copy, also when it cannot reach the store; one that can fetches only
//! the chunks this copy lacks. A refused version or overlay writes nothing here.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use director_plan::fleet::manifest::{check_chunk, ChunkRef, Manifest};

/// The manifest's envelope, as signed.
const SIGNED: &str = "manifest.signed";
/// Where an edge before signing kept its bare manifest (removed at the next version).
const LEGACY: &str = "manifest.json";
const OVERLAY: &str = "overlay.signed";

pub struct Cache {
    dir: PathBuf,
}

/// Writes `bytes` to `path` whole or not at all (a crash leaves the old file or none).
fn replace(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("partial");
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming onto {}", path.display()))
}

impl Cache {
    pub fn open(dir: &Path) -> Result<Cache> {
        std::fs::create_dir_all(dir.join("chunks"))
            .with_context(|| format!("--state-dir {}", dir.display()))?;
        Ok(Cache {
            dir: dir.to_path_buf(),
        })
    }

    fn chunk_path(&self, digest: &str) -> PathBuf {
        self.dir.join("chunks").join(digest)
    }

    /// Where the config of the version answered from is kept (messages name it).
    pub fn config_path(&self) -> PathBuf {
        self.dir.join("config.toml")
    }

    /// A chunk this copy holds and that still matches its digest.
    pub fn chunk(&self, r: &ChunkRef) -> Option<Vec<u8>> {
        let b = std::fs::read(self.chunk_path(&r.digest)).ok()?;
        check_chunk(r, &b).ok().map(|()| b)
    }

    pub fn put_chunk(&self, digest: &str, bytes: &[u8]) -> Result<()> {
        replace(&self.chunk_path(digest), bytes)
    }

    /// The envelope of the version last applied, unchecked (the edge opens it).
    pub fn signed(&self) -> Option<Vec<u8>> {
        std::fs::read(self.dir.join(SIGNED)).ok()
    }

    /// A bare manifest an edge kept before versions were signed: never applied.
    pub fn legacy(&self) -> Option<Manifest> {
        let b = std::fs::read(self.dir.join(LEGACY)).ok()?;
        Manifest::parse(&b).ok()
    }

    /// The envelope of the overlay last taken, unchecked.
    pub fn overlay(&self) -> Option<Vec<u8>> {
        std::fs::read(self.dir.join(OVERLAY)).ok()
    }

    /// Records the overlay taken (its envelope, as signed).
    pub fn put_overlay(&self, signed: &[u8]) -> Result<()> {
        replace(&self.dir.join(OVERLAY), signed)
    }

    /// Unix seconds when the version last applied was recorded.
    pub fn taken_at(&self) -> Option<f64> {
        let t = std::fs::metadata(self.dir.join(SIGNED))
            .ok()?
            .modified()
            .ok()?;
        Some(t.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs_f64())
    }

    /// Records `m` (signed as `signed`) as applied, with its config as a readable file, and
    /// drops the chunks no longer in it.
    pub fn applied(&self, m: &Manifest, signed: &[u8], config: &[u8]) -> Result<()> {
        // The same version again (a restart): its files keep their time, when it was taken.
        if self.signed().as_deref() == Some(signed) {
            return Ok(());
        }
        replace(&self.config_path(), config)?;
        replace(&self.dir.join(SIGNED), signed)?;
        let _ = std::fs::remove_file(self.dir.join(LEGACY));
        let keep: std::collections::HashSet<&str> = m.digests().collect();
        let dir = self.dir.join("chunks");
        for e in std::fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))? {
            let e = e?;
            let name = e.file_name();
            if !keep.contains(name.to_string_lossy().as_ref()) {
                let _ = std::fs::remove_file(e.path());
            }
        }
        Ok(())
    }
}
