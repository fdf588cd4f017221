//! `[demand]`: how often demand is read and decided on, how much of it is sampled, and the
//! settings of capacity spill (`[demand.spill]`) and replica placement
//! (`[demand.replicas]`), with the hooks replicas run. Capacities are the servers' and
//! sites' own keys (`[[server]] capacity`, `[[site]] capacity`).

use anyhow::{bail, Result};
use serde::Deserialize;

use crate::health::config::HttpUrl;

fn interval() -> f64 {
    5.0
}
fn sample() -> u32 {
    64
}

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DemandConfig {
    /// Seconds between reads of the kernel's counters; each read is one cycle of spill and
    /// replica decisions, and rates are over the last cycle.
    #[serde(default = "interval")]
    pub interval: f64,
    /// One answer (or new flow) in this many is recorded with its client prefix, for
    /// per-prefix demand (`impact`, replicas); 0: none.
    #[serde(default = "sample")]
    pub sample: u32,
    #[serde(default)]
    pub spill: SpillConfig,
    #[serde(default)]
    pub replicas: ReplicaConfig,
}

impl Default for DemandConfig {
    fn default() -> Self {
        DemandConfig {
            interval: interval(),
            sample: sample(),
            spill: SpillConfig::default(),
            replicas: ReplicaConfig::default(),
        }
    }
}

fn target() -> f64 {
    0.85
}
fn low() -> f64 {
    0.70
}
fn hold() -> f64 {
    60.0
}
fn max_step() -> f64 {
    0.25
}

/// Capacity spill: a site over `target` of its capacity sends its least hurt client
/// groups to their next site.
#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SpillConfig {
    /// Share of capacity a site is kept under.
    #[serde(default = "target")]
    pub target: f64,
    /// Moved demand comes back only while the site stays under this share ...
    #[serde(default = "low")]
    pub low: f64,
    /// ... for this many seconds.
    #[serde(default = "hold")]
    pub hold: f64,
    /// At most this share of a site's demand moves per cycle.
    #[serde(default = "max_step")]
    pub max_step: f64,
}

impl Default for SpillConfig {
    fn default() -> Self {
        SpillConfig {
            target: target(),
            low: low(),
            hold: hold(),
            max_step: max_step(),
        }
    }
}

fn k() -> f64 {
    1000.0
}
fn threshold() -> f64 {
    1000.0
}
fn retire_below() -> f64 {
    100.0
}
fn retire_hold() -> f64 {
    600.0
}
fn half_life() -> f64 {
    300.0
}
fn drain() -> f64 {
    60.0
}
fn hook_timeout() -> f64 {
    60.0
}

/// Replicas where demand is (the DIY-CDN design's bonus): every answer adds
/// `k / distance` to each candidate server of its service, bonuses fade with `half_life`.
#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ReplicaConfig {
    #[serde(default = "k")]
    pub k: f64,
    /// A candidate whose bonus reaches this is copied to (the copy hook runs).
    #[serde(default = "threshold")]
    pub threshold: f64,
    /// A replica whose bonus stays under this for `retire_hold` seconds is drained, then
    /// retired (the retire hook runs).
    #[serde(default = "retire_below")]
    pub retire_below: f64,
    #[serde(default = "retire_hold")]
    pub retire_hold: f64,
    /// Seconds in which a bonus halves: old demand fades.
    #[serde(default = "half_life")]
    pub half_life: f64,
    /// Seconds a retiring replica gets no new clients before the retire hook runs (at
    /// least the service's TTL, so resolvers' cached answers have expired).
    #[serde(default = "drain")]
    pub drain: f64,
    /// A program and its arguments, run with the event as JSON on its standard input.
    #[serde(default)]
    pub copy_command: Vec<String>,
    /// An `http://` URL the event is POSTed to as JSON.
    pub copy_url: Option<String>,
    #[serde(default)]
    pub retire_command: Vec<String>,
    pub retire_url: Option<String>,
    /// Seconds a hook may take before it is killed (and counted failed).
    #[serde(default = "hook_timeout")]
    pub hook_timeout: f64,
}

impl Default for ReplicaConfig {
    fn default() -> Self {
        ReplicaConfig {
            k: k(),
            threshold: threshold(),
            retire_below: retire_below(),
            retire_hold: retire_hold(),
            half_life: half_life(),
            drain: drain(),
            copy_command: Vec::new(),
            copy_url: None,
            retire_command: Vec::new(),
            retire_url: None,
            hook_timeout: hook_timeout(),
        }
    }
}

fn positive(what: &str, v: f64) -> Result<()> {
    if !(v.is_finite() && v > 0.0) {
        bail!("{what} {v} must be above 0");
    }
    Ok(())
}

fn share(what: &str, v: f64) -> Result<()> {
    if !(v.is_finite() && v > 0.0 && v <= 1.0) {
        bail!("{what} {v} must be above 0 and at most 1");
    }
    Ok(())
}

impl DemandConfig {
    pub fn validate(&self) -> Result<()> {
        if !(self.interval.is_finite() && (0.2..=3600.0).contains(&self.interval)) {
            bail!(
                "[demand]: interval {} must be from 0.2 to 3600 seconds",
                self.interval
            );
        }
        let s = &self.spill;
        share("[demand.spill]: target", s.target)?;
        share("[demand.spill]: low", s.low)?;
        if s.low >= s.target {
            bail!(
                "[demand.spill]: low {} must be below target {} (else moved demand would \
                 come back as soon as it left)",
                s.low,
                s.target
            );
        }
        if !(s.hold.is_finite() && s.hold >= 0.0) {
            bail!("[demand.spill]: hold {} must be 0 or more seconds", s.hold);
        }
        share("[demand.spill]: max_step", s.max_step)?;
        let r = &self.replicas;
        positive("[demand.replicas]: k", r.k)?;
        positive("[demand.replicas]: threshold", r.threshold)?;
        if !(r.retire_below.is_finite() && r.retire_below >= 0.0 && r.retire_below < r.threshold) {
            bail!(
                "[demand.replicas]: retire_below {} must be from 0 to below threshold {}",
                r.retire_below,
                r.threshold
            );
        }
        positive("[demand.replicas]: half_life", r.half_life)?;
        for (what, v) in [
            ("retire_hold", r.retire_hold),
            ("drain", r.drain),
            ("hook_timeout", r.hook_timeout),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                bail!("[demand.replicas]: {what} {v} must be 0 or more seconds");
            }
        }
        for (what, url) in [("copy_url", &r.copy_url), ("retire_url", &r.retire_url)] {
            if let Some(u) = url {
                HttpUrl::parse(u)
                    .map_err(|e| anyhow::anyhow!("[demand.replicas]: {what}: {e:#}"))?;
            }
        }
        for (what, cmd) in [
            ("copy_command", &r.copy_command),
            ("retire_command", &r.retire_command),
        ] {
            if cmd.first().is_some_and(String::is_empty) {
                bail!("[demand.replicas]: {what}: the program is empty");
            }
        }
        Ok(())
    }

    /// Whether anything replicas do reaches the operator's copy step.
    pub fn has_copy_hook(&self) -> bool {
        !self.replicas.copy_command.is_empty() || self.replicas.copy_url.is_some()
    }
}
