//! The metrics DistributedDirector sorts by, and one candidate server's values of them.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A sort metric (DistributedDirector's names, without the `drp-` prefix).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Metric {
    /// AS-path length of the site's best route to the prefix.
    Ext,
    /// IGP cost from the site to that route's BGP next hop.
    Int,
    /// The server's `agent_distance`.
    Ser,
    /// Measured round-trip time from the site (with the rtt tolerance).
    Rtt,
    /// Distance from the client's location to the site, km.
    Geo,
    /// The server's administrative preference.
    Admin,
    /// Ends the sort: the kernel shares answers among what is left by the servers'
    /// portions, drawing per query.
    Portion,
    /// Ends the sort: the kernel draws among what is left uniformly, per query.
    Random,
}

impl Metric {
    pub const ALL: [Metric; 8] = [
        Metric::Ext,
        Metric::Int,
        Metric::Ser,
        Metric::Rtt,
        Metric::Geo,
        Metric::Admin,
        Metric::Portion,
        Metric::Random,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Metric::Ext => "ext",
            Metric::Int => "int",
            Metric::Ser => "ser",
            Metric::Rtt => "rtt",
            Metric::Geo => "geo",
            Metric::Admin => "admin",
            Metric::Portion => "portion",
            Metric::Random => "random",
        }
    }

    /// Whether reaching this metric ends the sort with a per-query draw in the kernel.
    pub fn is_draw(self) -> bool {
        matches!(self, Metric::Portion | Metric::Random)
    }

    /// This metric's value in `m` as a number, when it is a plain "lower is better" one
    /// and present and finite (rtt in ms); `None` for missing data and for the draws.
    #[inline(always)]
    pub(super) fn value(self, m: &Metrics) -> Option<f64> {
        let v = match self {
            Metric::Ext => m.ext.map(f64::from),
            Metric::Int => m.int.map(f64::from),
            Metric::Ser => m.ser.map(f64::from),
            Metric::Rtt => m.rtt.map(Rtt::ms),
            Metric::Geo => m.geo,
            Metric::Admin => m.admin.map(f64::from),
            Metric::Portion | Metric::Random => None,
        };
        v.filter(|v| v.is_finite())
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Metric {
    type Err = String;
    fn from_str(s: &str) -> Result<Metric, String> {
        if s == "med" {
            return Err(
                "med is not a metric to prioritise or weigh (DistributedDirector: \"not \
                        weightable or prioritizable\"): turn it on with `med = true`, a step \
                        before the sort"
                    .into(),
            );
        }
        Metric::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                let known: Vec<&str> = Metric::ALL.iter().map(|m| m.name()).collect();
                format!("unknown metric {s:?} (known: {})", known.join(", "))
            })
    }
}

/// Priority given to metrics that have a weight and no priority.
pub const UNPRIORITISED: u32 = 101;
/// Highest priority an operator may give.
pub const MAX_PRIORITY: u32 = 100;

/// A round-trip time in whole nanoseconds. RTT files give milliseconds with up to six
/// decimals, so every value a file can hold is exact here and the tolerance comparison is
/// integer arithmetic: no value on the boundary can round to the wrong side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rtt(pub u64);

impl Rtt {
    pub const NS_PER_MS: u64 = 1_000_000;

    /// Milliseconds, for display and weighted sums (the nearest f64).
    pub fn ms(self) -> f64 {
        self.0 as f64 / Self::NS_PER_MS as f64
    }

    /// Whether `self` is within `tolerance_percent` of `lowest`: DistributedDirector
    /// eliminates a server only when its rtt is "greater than" lowest × (1 + tol/100).
    #[inline(always)]
    pub fn within(self, lowest: Rtt, tolerance_percent: u32) -> bool {
        u128::from(self.0) * 100 <= u128::from(lowest.0) * (100 + u128::from(tolerance_percent))
    }

    /// The highest rtt within `tolerance_percent` of `self` (exact: the floor of
    /// self × (100 + tol) / 100, and `within` holds for it and for nothing above).
    pub fn limit(self, tolerance_percent: u32) -> Rtt {
        let l = u128::from(self.0) * (100 + u128::from(tolerance_percent)) / 100;
        Rtt(u64::try_from(l).unwrap_or(u64::MAX))
    }
}

/// What `med` looks at for one server: its site's AS (the DRP agent's AS), the exit point
/// (the BGP next hop of the site's route to the client) and that route's MED.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MedRoute {
    pub site_as: u32,
    pub exit: IpAddr,
    /// A route without MED counts as MED 0, as most BGP implementations do by default
    /// (RFC 4271 leaves it to the implementation; Cisco's `bgp bestpath med
    /// missing-as-worst` is the opposite choice, which director does not offer).
    pub med: u32,
}

/// One candidate server's metric values for one client prefix. `None` = no data (no route,
/// no location, no measurement); NaN and infinities count as `None`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Metrics {
    pub ext: Option<u32>,
    pub int: Option<u32>,
    pub ser: Option<u32>,
    pub rtt: Option<Rtt>,
    pub med: Option<MedRoute>,
    pub geo: Option<f64>,
    pub admin: Option<u32>,
}

/// A server to rank.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Candidate {
    /// The caller's id, copied into decisions.
    pub server: u16,
    /// Share of answers among the final equals when the policy uses `portion`; a server
    /// with portion 0 gets answers only while no usable server of its set has more.
    pub portion: u16,
    pub metrics: Metrics,
}
