//! The controller: a config and its data in, kernel decisions out, kept equal as the inputs
//! change. Data flows one way:
//!
//! config + inputs (files → plain data, [`model`]) → data (everything arranged by prefix)
//! → decide (per prefix and service: metrics and the [`engine`]'s sort, no I/O) → compile
//! (decisions to the fewest LPM entries, and diffs) → apply (the only part that writes,
//! through `kernel::Maps`). [`run`] drives it; [`check`] and [`explain`] stop before apply.

pub mod apply;
pub mod compile;
pub mod config;
pub mod data;
pub mod decide;
pub mod engine;
pub mod explain;
pub mod inputs;
pub mod model;
pub mod run;
pub mod sweep;

use std::net::IpAddr;
use std::path::Path;

use anyhow::Result;

use crate::api;
use config::Config;
use data::Data;
use decide::{compute, Ids};

/// `check`: validates a config and everything it reads, and says what `run` would write.
/// Touches nothing.
pub fn check(path: &Path) -> Result<api::Check> {
    let cfg = Config::load(path)?;
    let data = Data::load(&cfg)?;
    let c = compute(&cfg, &data, &Ids::positional(&cfg))?;
    c.fits()?;
    let tables = c.summary();
    Ok(api::Check {
        version: api::VERSION,
        sites: cfg.sites.len(),
        servers: cfg.servers.len(),
        services: cfg.services.len(),
        prefixes: c.prefixes,
        entries: tables.iter().map(|t| t.entries).sum(),
        saved: tables.iter().map(|t| t.saved).sum(),
        tables,
        load_seconds: data.load_time.as_secs_f64(),
        inputs: data.summary,
        compute_seconds: c.seconds,
    })
}

/// `explain`: every server's metrics for `client`, the sort's levels, and why the winners
/// won.
pub fn explain(path: &Path, service: &str, client: IpAddr) -> Result<api::Explain> {
    let cfg = Config::load(path)?;
    let data = Data::load(&cfg)?;
    explain::explain(&cfg, &data, service, client)
}
