//! Response rate limiting in the config: `[rrl]` (defaults, prefix lengths, exemptions)
//! and each `[[service]]`'s `rrl = { ... }`, turned into the kernel's `rrl::Limit`s.

use anyhow::{bail, Result};
use director_common::rrl::{Limit, DEFAULT_V4_PREFIX, DEFAULT_V6_PREFIX};
use ipnet::IpNet;
use serde::Deserialize;

use crate::checked;

/// Slip when neither `[rrl]` nor the service says: every second limited response goes out
/// truncated (BIND's default), so a real resolver behind a busy prefix still gets through
/// over TCP while a spoofed flood's victim gets half the packets, each no larger than the
/// query.
pub const DEFAULT_SLIP: u32 = 2;

/// `[rrl]`: the defaults of every service's limit.
#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Defaults {
    /// Answers per second per source prefix and service; 0 (the default): no limit.
    #[serde(default)]
    pub rate: u32,
    /// Answers at once after a quiet spell; default: the rate (one second's worth).
    pub burst: Option<u32>,
    #[serde(default = "default_slip")]
    pub slip: u32,
    #[serde(default = "default_v4")]
    pub ipv4_prefix: u8,
    #[serde(default = "default_v6")]
    pub ipv6_prefix: u8,
    /// Source prefixes never limited (monitoring, your own resolvers).
    #[serde(default)]
    pub exempt: Vec<String>,
}

impl Default for Defaults {
    fn default() -> Defaults {
        Defaults {
            rate: 0,
            burst: None,
            slip: DEFAULT_SLIP,
            ipv4_prefix: DEFAULT_V4_PREFIX,
            ipv6_prefix: DEFAULT_V6_PREFIX,
            exempt: Vec::new(),
        }
    }
}

fn default_slip() -> u32 {
    DEFAULT_SLIP
}
fn default_v4() -> u8 {
    DEFAULT_V4_PREFIX
}
fn default_v6() -> u8 {
    DEFAULT_V6_PREFIX
}

/// A `[[service]]`'s `rrl = { rate, burst, slip }`: what it gives wins over `[rrl]`.
#[derive(Debug, Deserialize, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct ServiceLimit {
    pub rate: Option<u32>,
    pub burst: Option<u32>,
    pub slip: Option<u32>,
}

/// Slip ratios beyond this make no difference worth a knob (Knot allows up to 100).
pub const MAX_SLIP: u32 = 100;

impl Defaults {
    pub fn validate(&self) -> Result<()> {
        if self.ipv4_prefix > 32 || self.ipv6_prefix > 128 {
            bail!(
                "[rrl]: ipv4_prefix is 0 to 32 and ipv6_prefix 0 to 128 (got {} and {})",
                self.ipv4_prefix,
                self.ipv6_prefix
            );
        }
        check_slip(self.slip).map_err(|e| anyhow::anyhow!("[rrl]: {e}"))?;
        self.exempt_prefixes()?;
        Ok(())
    }

    /// The exemptions, checked as the CLI checks a prefix.
    pub fn exempt_prefixes(&self) -> Result<Vec<IpNet>> {
        self.exempt
            .iter()
            .map(|p| {
                checked::prefix(p)
                    .map(checked::canonical)
                    .map_err(|e| anyhow::anyhow!("[rrl] exempt: {e}"))
            })
            .collect()
    }

    /// The kernel's limit for a service with `own` settings.
    pub fn limit(&self, own: Option<&ServiceLimit>) -> Limit {
        let own = own.cloned().unwrap_or_default();
        Limit::new(
            own.rate.unwrap_or(self.rate),
            own.burst.or(self.burst).unwrap_or(0),
            own.slip.unwrap_or(self.slip),
            self.ipv4_prefix,
            self.ipv6_prefix,
        )
    }
}

impl ServiceLimit {
    pub fn validate(&self) -> Result<()> {
        if let Some(s) = self.slip {
            check_slip(s)?;
        }
        Ok(())
    }
}

pub fn check_slip(slip: u32) -> Result<()> {
    if slip > MAX_SLIP {
        bail!("slip {slip} is over {MAX_SLIP} (0 drops every limited response, 1 truncates every one)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_wins_key_by_key() {
        let d = Defaults {
            rate: 50,
            burst: Some(10),
            ..Defaults::default()
        };
        let l = d.limit(Some(&ServiceLimit {
            rate: Some(100),
            ..Default::default()
        }));
        assert_eq!((l.rate, l.burst, l.slip), (100, 10, DEFAULT_SLIP));
        assert_eq!((l.v4_prefix, l.v6_prefix), (24, 56));
        let off = Defaults::default().limit(None);
        assert!(!off.is_limited());
        let zero = d.limit(Some(&ServiceLimit {
            rate: Some(0),
            ..Default::default()
        }));
        assert!(!zero.is_limited(), "rate 0 is unlimited");
    }

    #[test]
    fn bad_settings_are_refused() {
        let mut d = Defaults {
            ipv4_prefix: 33,
            ..Defaults::default()
        };
        assert!(d.validate().is_err());
        d.ipv4_prefix = 24;
        d.exempt = vec!["192.0.2.1/24".into()];
        assert!(d.validate().is_err(), "host bits");
        d.exempt = vec!["192.0.2.0/24".into(), "2001:db8::/32".into()];
        d.validate().unwrap();
        assert!(ServiceLimit {
            slip: Some(101),
            ..Default::default()
        }
        .validate()
        .is_err());
    }
}
