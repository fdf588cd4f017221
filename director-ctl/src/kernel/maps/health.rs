//! Per service, the health checks' verdicts on its servers (`DIR_HEALTH`) and what it
//! answers with when none of them is up (`DIR_FALLBACK`).

use anyhow::{Context, Result};
use director_common::maps::{Fallback, HealthMask};

use super::Maps;

impl Maps {
    /// The health checks' verdicts for one service's servers.
    pub fn health(&self, service: u32) -> Result<HealthMask> {
        self.health
            .get(&service, 0)
            .with_context(|| format!("reading the health of service {service}"))
    }

    pub fn fallback(&self, service: u32) -> Result<Fallback> {
        self.fallback
            .get(&service, 0)
            .with_context(|| format!("reading the fallback of service {service}"))
    }

    pub fn set_fallback(&mut self, service: u32, f: &Fallback) -> Result<()> {
        self.fallback
            .set(service, *f, 0)
            .with_context(|| format!("writing the fallback of service {service}"))
    }

    pub fn set_health(&mut self, service: u32, mask: &HealthMask) -> Result<()> {
        self.health
            .set(service, *mask, 0)
            .with_context(|| format!("writing the health of service {service}"))
    }
}
