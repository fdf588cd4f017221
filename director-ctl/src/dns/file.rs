//! The zones of a file: `run`'s config, or a zones file of `[[zone]]` entries alone for
//! `serve` (setups driven by the CLI), which `zone add` and `zone del` edit.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use serde::Deserialize;

use super::answer::Zones;
use super::zone::ZoneConfig;

/// The parts of a config (or zones file) the zones need; every other key is left to the
/// config's own loader.
#[derive(Debug, Deserialize, Default)]
struct Parts {
    #[serde(default, rename = "zone")]
    zones: Vec<ZoneConfig>,
    #[serde(default, rename = "service")]
    services: Vec<ServiceName>,
}

#[derive(Debug, Deserialize)]
struct ServiceName {
    name: String,
}

pub struct ZoneFile {
    pub path: PathBuf,
    pub zones: Vec<ZoneConfig>,
    /// Service names the file defines (a config's `[[service]]`s).
    pub services: Vec<String>,
}

impl ZoneFile {
    /// Reads `path`; a missing zones file is an empty one.
    pub fn load(path: &Path) -> Result<ZoneFile> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let parts: Parts = toml::from_str(&text)
            .map_err(|e| anyhow!("{}: {}", path.display(), e.to_string().trim_end()))?;
        Ok(ZoneFile {
            path: path.to_path_buf(),
            zones: parts.zones,
            services: parts.services.into_iter().map(|s| s.name).collect(),
        })
    }

    /// The zones built with `services` (the kernel's) besides the file's own; the serial,
    /// where a zone gives none, is the file's mtime.
    pub fn build(&self, services: &[String]) -> Result<Zones> {
        let mut all = self.services.clone();
        all.extend(services.iter().cloned());
        let serial = mtime_serial(&self.path);
        let mut origins = std::collections::HashSet::new();
        let mut zones = Vec::new();
        for (i, z) in self.zones.iter().enumerate() {
            let at = || {
                format!(
                    "{}: [[zone]] #{} ({:?})",
                    self.path.display(),
                    i + 1,
                    z.origin
                )
            };
            let built = z.build(&all, serial).with_context(at)?;
            if !origins.insert(built.origin.clone()) {
                bail!("{}: another [[zone]] has that origin", at());
            }
            zones.push(built);
        }
        Ok(Zones::new(zones))
    }
}

impl ZoneFile {
    /// [`ZoneFile::build`], with the zones that have `dnssec` signed now (keys relative to
    /// the file). The file does not say which families a service answers, so each
    /// service name's NSEC lists A and AAAA.
    pub fn build_signed(&self, services: &[String]) -> Result<Zones> {
        let mut zones: Vec<super::zone::Zone> = self.build(services)?.all().to_vec();
        let dir = self
            .path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let mut all = self.services.clone();
        all.extend(services.iter().cloned());
        for z in zones.iter_mut() {
            let Some(c) = self
                .zones
                .iter()
                .find(|c| c.origin_name().is_ok_and(|o| o == z.origin))
            else {
                continue;
            };
            let Some(d) = &c.dnssec else { continue };
            let at = || format!("{}: [[zone]] {:?}", self.path.display(), c.origin);
            let keys = d.load_keys(&dir).with_context(at)?;
            let mut types = std::collections::BTreeMap::new();
            for s in &all {
                let n = super::zone::absolute(s)?;
                if z.origin.zone_of(&n) {
                    use hickory_proto::rr::RecordType;
                    types.insert(n, vec![RecordType::A, RecordType::AAAA]);
                }
            }
            let now = super::signed::unix_now();
            z.signed = Some(
                super::signed::Signed::sign(z.apex(), &keys, d.validity()?, now, &types)
                    .with_context(at)?,
            );
        }
        Ok(Zones::new(zones))
    }
}

/// Seconds of the file's mtime: the time of its last change.
pub fn mtime_serial(path: &Path) -> u32 {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(1, |d| d.as_secs() as u32)
}

/// Adds `zone` to the zones file at `path` (created if missing), or replaces the zone of
/// the same origin; refused, and the file left as it was, if the result does not build.
pub fn add(path: &Path, zone: &ZoneConfig) -> Result<()> {
    let mut table = read_table(path)?;
    let origin = zone.origin_name()?;
    let mut list = take_zones(&mut table, path)?;
    list.retain(|z| z.origin_name().map(|o| o != origin).unwrap_or(true));
    list.push(zone.clone());
    write(path, table, &list)
}

/// Removes the zone `origin` from the zones file; an error if it has none.
pub fn del(path: &Path, origin: &str) -> Result<()> {
    let mut table = read_table(path)?;
    let mut list = take_zones(&mut table, path)?;
    let before = list.len();
    let wanted = super::zone::absolute(origin)?;
    list.retain(|z| z.origin_name().map(|o| o != wanted).unwrap_or(true));
    if list.len() == before {
        bail!("{} has no zone {origin:?}", path.display());
    }
    write(path, table, &list)
}

fn read_table(path: &Path) -> Result<toml::Table> {
    match std::fs::read_to_string(path) {
        Ok(t) => t
            .parse::<toml::Table>()
            .map_err(|e| anyhow!("{}: {}", path.display(), e.to_string().trim_end())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(toml::Table::new()),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

fn take_zones(table: &mut toml::Table, path: &Path) -> Result<Vec<ZoneConfig>> {
    match table.remove("zone") {
        None => Ok(Vec::new()),
        Some(v) => v
            .try_into()
            .map_err(|e: toml::de::Error| anyhow!("{}: [[zone]]: {e}", path.display())),
    }
}

fn write(path: &Path, mut table: toml::Table, zones: &[ZoneConfig]) -> Result<()> {
    let file = ZoneFile {
        path: path.to_path_buf(),
        zones: zones.to_vec(),
        services: Vec::new(),
    };
    file.build(&[])?;
    let value =
        toml::Value::try_from(ZonesOut { zone: zones }).context("writing the zones as TOML")?;
    if let toml::Value::Table(t) = value {
        table.extend(t);
    }
    let text = toml::to_string(&table).context("writing the zones as TOML")?;
    // Written whole under another name first: `serve` never reads half a file.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))
}

#[derive(serde::Serialize)]
struct ZonesOut<'a> {
    zone: &'a [ZoneConfig],
}
