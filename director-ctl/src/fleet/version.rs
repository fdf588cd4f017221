//! A version's content: the publisher builds it from a config and its inputs (always with
//! the config's own ids, 1, 2, 3... in file order, so equal inputs give equal bytes), and an
//! edge turns it back into a computation on the ids its kernel uses.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use director_plan::compile::{diff, Table};
use director_plan::data::Data;
use director_plan::decide::{compute, Computed, Ids, Unavailable};
use director_plan::fleet::chunks::{self, Chunk, ServiceTable};
use director_plan::fleet::envelope;
use director_plan::fleet::manifest::{ChunkRef, LiveSources, Manifest, Sources};

use super::store::now_ms;
use crate::controller::config::Config;
use crate::controller::live::{decide_under, Live};
use crate::controller::run::watched;

/// A compiled version, before it has a number.
pub struct Built {
    pub config: Chunk,
    pub chunks: Vec<Chunk>,
    pub table: String,
    pub entries: u64,
    pub sources: Sources,
}

impl Built {
    pub fn manifest(&self, version: u64, publisher: &str) -> Manifest {
        Manifest {
            version,
            table: self.table.clone(),
            chunks: self.chunks.iter().map(ChunkRef::from).collect(),
            entries: self.entries,
            sources: self.sources.clone(),
            publisher: publisher.to_string(),
            published_ms: now_ms(),
        }
    }
}

/// Reads everything `cfg` (loaded from `path`) names, and compiles the table.
pub fn build(path: &Path, cfg: &Config) -> Result<Built> {
    Ok(compile(path, cfg)?.built)
}

/// A compile's version with what it was compiled from and to, for the map page: the data
/// read, and each service's entries on the config's own ids (service id, entries).
pub struct Compiled {
    pub built: Built,
    pub data: Data,
    pub tables: Vec<(u32, Vec<(ipnet::IpNet, director_common::maps::Decision)>)>,
}

/// [`build`], keeping the data and the entries (moved out of the encoding, not copied).
pub fn compile(path: &Path, cfg: &Config) -> Result<Compiled> {
    let (config, inputs) = read_sources(path, cfg)?;
    let data = Data::load(&cfg.plan)?;
    let c = decide(cfg, &data)?;
    let tables: Vec<ServiceTable> = c
        .tables
        .into_iter()
        .map(|(id, _, t)| ServiceTable {
            service: (id - 1) as u16,
            entries: t.entries,
        })
        .collect();
    let built = Built::new(
        config,
        chunks::encode(&tables),
        inputs,
        None,
        tables.iter().map(|t| t.entries.len() as u64).sum(),
    );
    Ok(Compiled {
        built,
        data,
        tables: tables
            .into_iter()
            .map(|t| (u32::from(t.service) + 1, t.entries))
            .collect(),
    })
}

/// The config's text as a chunk, and the SHA-256 of every input file it names.
fn read_sources(path: &Path, cfg: &Config) -> Result<(Chunk, BTreeMap<String, String>)> {
    let text = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    // Keyed relative to the config's directory where they are under it, so publishers
    // that keep the same files in different places agree on the sources.
    let base = path.parent().unwrap_or(Path::new(""));
    let mut inputs = BTreeMap::new();
    for f in watched(path, cfg).iter().skip(1) {
        let bytes = std::fs::read(f).with_context(|| format!("reading {}", f.display()))?;
        let name = f.strip_prefix(base).unwrap_or(f);
        inputs.insert(name.display().to_string(), chunks::digest(&bytes));
    }
    Ok((Chunk::new(text), inputs))
}

/// Every prefix decided on the config's own ids, every server available (the fleet's
/// health is the observers' overlay, applied at the edges).
fn decide(cfg: &Config, data: &Data) -> Result<Computed> {
    let c = compute(
        &cfg.plan,
        data,
        &Ids::positional(&cfg.plan),
        &Unavailable::default(),
    )?;
    c.fits()?;
    Ok(c)
}

impl Built {
    fn new(
        config: Chunk,
        chunks: Vec<Chunk>,
        inputs: BTreeMap<String, String>,
        live: Option<LiveSources>,
        entries: u64,
    ) -> Built {
        Built {
            table: chunks::table_digest(chunks.iter().map(|c| &c.bytes[..])),
            sources: Sources {
                config: ChunkRef::from(&config),
                inputs,
                compiler: program(),
                live,
            },
            config,
            chunks,
            entries,
        }
    }
}

/// The leading publisher's table when the config has live inputs: the data (the files'
/// with the live routes and measurements laid over them) and the decisions, kept between
/// versions, so that a live change is decided again only under the prefixes it touched
/// (as standalone `run` does) and published as a new version.
pub struct LiveTable {
    pub cfg: Config,
    pub data: Data,
    computed: Computed,
    config: Chunk,
    inputs: BTreeMap<String, String>,
}

/// What one live change did to a [`LiveTable`].
pub struct Followed {
    pub bgp: usize,
    pub rtt: usize,
    pub prefixes: usize,
    /// Every prefix was decided again (many changed, or a subtree too large).
    pub full: bool,
    /// Entries that changed, removed ones included.
    pub entries: usize,
}

impl LiveTable {
    /// Reads everything `cfg` names, lays `live`'s state over it and decides every prefix.
    pub fn compile(path: &Path, cfg: Config, live: &mut Live) -> Result<LiveTable> {
        let (config, inputs) = read_sources(path, &cfg)?;
        let mut data = Data::load(&cfg.plan)?;
        live.reconfigure(&cfg.plan);
        live.overlay(&mut data);
        let computed = decide(&cfg, &data)?;
        Ok(LiveTable {
            cfg,
            data,
            computed,
            config,
            inputs,
        })
    }

    /// Takes what changed in the live inputs since the last look (debounced, and held back
    /// while a router sends its table or when every site would lose every peer, as `run`
    /// does) and decides again what lies under it. `None`: nothing changed. An error
    /// leaves the table unusable: compile again from the files.
    pub fn follow(&mut self, live: &mut Live) -> Result<Option<Followed>> {
        let ch = live.take(&mut self.data);
        if ch.prefixes.is_empty() {
            return Ok(None);
        }
        let (ids, down) = (Ids::positional(&self.cfg.plan), Unavailable::default());
        let under = if ch.full {
            None
        } else {
            decide_under(
                &self.cfg.plan,
                &self.data,
                &ids,
                &down,
                &mut self.computed,
                &ch.prefixes,
            )
            .ok()
        };
        let full = under.is_none();
        let entries = match under {
            Some(diffs) => {
                self.computed.fits()?;
                diffs.iter().map(|d| d.put.len() + d.delete.len()).sum()
            }
            None => {
                let fresh = decide(&self.cfg, &self.data)?;
                let n = self
                    .computed
                    .tables
                    .iter()
                    .zip(&fresh.tables)
                    .map(|(a, b)| {
                        let d = diff(&a.2.entries, &b.2.entries);
                        d.put.len() + d.delete.len()
                    })
                    .sum();
                self.computed = fresh;
                n
            }
        };
        Ok(Some(Followed {
            bgp: ch.bgp,
            rtt: ch.rtt,
            prefixes: ch.prefixes.len(),
            full,
            entries,
        }))
    }

    /// The version of the table as it is now.
    pub fn built(&self, live: &Live) -> Built {
        let parts = self
            .computed
            .tables
            .iter()
            .map(|(id, _, t)| ((id - 1) as u16, &t.entries[..]));
        Built::new(
            self.config.clone(),
            chunks::encode_parts(parts),
            self.inputs.clone(),
            Some(live.sources(&self.cfg.plan, &self.data)),
            self.computed
                .tables
                .iter()
                .map(|t| t.2.entries.len() as u64)
                .sum(),
        )
    }

    /// Each service's entries (the config's own ids), for the map page.
    pub fn tables(&self) -> Vec<(u32, Vec<(ipnet::IpNet, director_common::maps::Decision)>)> {
        self.computed
            .tables
            .iter()
            .map(|(id, _, t)| (*id, t.entries.clone()))
            .collect()
    }
}

/// A manifest from the store's bytes without checking who signed it, for what only reads
/// and never applies: the publisher's clean-up, `fleet status`, a standby's map page. An
/// edge applies only what `envelope::open` passed. A bare manifest (from a publisher
/// before signing) reads too.
pub fn manifest_unchecked(b: &[u8]) -> Result<Manifest> {
    match envelope::peek(b) {
        Some((payload, _)) => Manifest::parse(&payload),
        None => Manifest::parse(b),
    }
}

/// This program as a manifest's compiler and an edge's report name it.
pub fn program() -> String {
    format!("director {}", env!("CARGO_PKG_VERSION"))
}

/// A fetched version's config, parsed as an edge reads it: `path` names where its copy
/// lives (for messages); the input files it names are the publisher's, never read here.
pub fn config_of(text: &str, path: &Path) -> Result<Config> {
    let mut cfg = Config::parse(text).with_context(|| format!("{}", path.display()))?;
    cfg.path = path.to_path_buf();
    cfg.plan.path = path.to_path_buf();
    Ok(cfg)
}

/// The version's tables on the kernel's ids: the publisher's positional ids mapped through
/// `ids` (this edge's ids for the same config's servers and services).
pub fn computed_on(cfg: &Config, tables: Vec<ServiceTable>, ids: &Ids) -> Result<Computed> {
    let mut out = Vec::with_capacity(tables.len());
    for t in tables {
        let i = usize::from(t.service);
        let (Some(&id), Some(s)) = (ids.services.get(i), cfg.services.get(i)) else {
            bail!(
                "table names service #{i}, the config has {}",
                cfg.services.len()
            );
        };
        let mut entries = t.entries;
        for (p, d) in &mut entries {
            for s in d.servers.iter_mut().take(usize::from(d.count)) {
                let Some(&own) = usize::from(*s)
                    .checked_sub(1)
                    .and_then(|k| ids.servers.get(k))
                else {
                    bail!("{p}: server #{s}, the config has {}", ids.servers.len());
                };
                *s = own;
            }
        }
        out.push((id, s.name.clone(), Table { entries, saved: 0 }));
    }
    Ok(Computed {
        tables: out,
        prefixes: 0,
        all: Vec::new(),
        seconds: 0.0,
    })
}
