//! The controller: a config and its data in, kernel decisions out, kept equal as the inputs
//! change. The planning (inputs, the sort, the minimal tables) is director-plan's; here the
//! config file is read ([`config`], assembled from the parts each layer owns), the plan is
//! written to the kernel ([`apply`], the only part that writes, through `kernel::Maps`), and
//! [`run`] keeps it there as files and server states change, starting the health checks
//! ([`checks`]), the listeners and the metrics. [`check`] and [`explain`] stop before apply.

pub mod apply;
pub mod atlas;
pub mod checks;
pub mod config;
/// The test that keeps docs/config.md equal to the keys the config accepts.
#[cfg(test)]
mod config_doc;
pub mod demand;
pub mod live;
pub mod run;

use std::net::IpAddr;
use std::path::Path;

use anyhow::Result;
use director_plan::data::Data;
use director_plan::decide::{compute, Ids};

use crate::api;
use config::Config;

/// `check`: validates a config and everything it reads, and says what `run` would write.
/// Touches nothing.
pub fn check(path: &Path) -> Result<api::Check> {
    let cfg = Config::load(path)?;
    let data = Data::load(&cfg.plan)?;
    let c = compute(
        &cfg.plan,
        &data,
        &Ids::positional(&cfg.plan),
        &Default::default(),
    )?;
    c.fits()?;
    let tables = c.summary();
    Ok(api::Check {
        version: api::VERSION,
        sites: cfg.plan.sites.len(),
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
/// won; and how the service is reached (its VIPs, whether DNS answers it).
pub fn explain(path: &Path, service: &str, client: IpAddr) -> Result<api::Explain> {
    let cfg = Config::load(path)?;
    let data = Data::load(&cfg.plan)?;
    explain_with(&cfg, &data, service, client)
}

/// `explain` over data already read (`run`'s, with its live inputs).
pub fn explain_with(
    cfg: &Config,
    data: &Data,
    service: &str,
    client: IpAddr,
) -> Result<api::Explain> {
    let mut e = director_plan::explain::explain(&cfg.plan, data, service, client)?;
    let svc = cfg
        .services
        .iter()
        .find(|s| s.name.trim_end_matches('.') == e.service.trim_end_matches('.'));
    if let Some(s) = svc {
        e.vips = s.vips();
        e.mode = (!e.vips.is_empty()).then(|| s.forward());
        e.dns = s.answers_dns();
        e.replicas = s
            .replicas
            .iter()
            .map(|r| api::ExplainReplica {
                server: r.clone(),
                site: cfg
                    .servers
                    .iter()
                    .find(|x| &x.name == r)
                    .map_or_else(String::new, |x| x.site.clone()),
                bonus: None,
                state: "unknown".into(),
            })
            .collect();
    }
    Ok(e)
}
