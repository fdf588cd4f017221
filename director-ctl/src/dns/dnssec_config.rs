//! `[[zone]] dnssec`: which keys sign a zone and how long their signatures hold. Apart
//! from the signing (`signed`) so the zone's config does not depend on it.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use director_plan::dnssec::{key::ZoneKey, sign::Validity};
use serde::Deserialize;

/// `[[zone]] dnssec = { keys = [...], validity = 604800 }`: the zone's keys (key files,
/// relative to the config; every one is published, the first signs) and how long a
/// signature holds.
#[derive(Debug, Deserialize, serde::Serialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DnssecConfig {
    pub keys: Vec<PathBuf>,
    /// Seconds a signature holds (7 days); signatures are made anew each day.
    pub validity: Option<u32>,
}

impl DnssecConfig {
    pub fn validity(&self) -> Result<Validity> {
        let mut v = Validity::default();
        if let Some(s) = self.validity {
            if !(2 * 86_400..=90 * 86_400).contains(&s) {
                bail!("dnssec validity {s} s: from 2 to 90 days (they are made anew daily)");
            }
            v.validity_s = s;
        }
        Ok(v)
    }

    /// The keys' files read, relative to `dir`; every error names its file.
    pub fn load_keys(&self, dir: &std::path::Path) -> Result<Vec<ZoneKey>> {
        if self.keys.is_empty() {
            bail!("dnssec: keys is empty (make one with `director-ctl dnssec keygen`)");
        }
        self.keys
            .iter()
            .map(|p| {
                let p = if p.is_relative() {
                    dir.join(p)
                } else {
                    p.clone()
                };
                let text = std::fs::read_to_string(&p)
                    .with_context(|| format!("dnssec key {}", p.display()))?;
                ZoneKey::from_file_text(&text)
                    .with_context(|| format!("dnssec key {}", p.display()))
            })
            .collect()
    }
}
