//! The metrics DistributedDirector sorts by, and one candidate server's values of them.

use std::fmt;
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
    /// Measured round-trip time from the site, ms (with `rtt_tolerance_percent`).
    Rtt,
    /// BGP MED among servers with the same exit AS.
    Med,
    /// Distance from the client's location to the site, km.
    Geo,
    /// The server's administrative preference.
    Admin,
    /// Pick at random (by portion) among what is left.
    Random,
}

impl Metric {
    pub const ALL: [Metric; 8] = [
        Metric::Ext,
        Metric::Int,
        Metric::Ser,
        Metric::Rtt,
        Metric::Med,
        Metric::Geo,
        Metric::Admin,
        Metric::Random,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Metric::Ext => "ext",
            Metric::Int => "int",
            Metric::Ser => "ser",
            Metric::Rtt => "rtt",
            Metric::Med => "med",
            Metric::Geo => "geo",
            Metric::Admin => "admin",
            Metric::Random => "random",
        }
    }

    /// This metric's value in `m` as a number, when it is a plain "lower is better" one
    /// and present and finite; `None` for missing data and for `med` and `random`.
    #[inline(always)]
    pub(super) fn value(self, m: &Metrics) -> Option<f64> {
        let v = match self {
            Metric::Ext => m.ext.map(f64::from),
            Metric::Int => m.int.map(f64::from),
            Metric::Ser => m.ser.map(f64::from),
            Metric::Rtt => m.rtt,
            Metric::Geo => m.geo,
            Metric::Admin => m.admin.map(f64::from),
            Metric::Med | Metric::Random => None,
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

/// One candidate server's metric values for one client prefix. `None` = no data (no route,
/// no location, no measurement); NaN and infinities count as `None`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Metrics {
    pub ext: Option<u32>,
    pub int: Option<u32>,
    pub ser: Option<u32>,
    pub rtt: Option<f64>,
    /// (exit AS, MED) of the site's best route: build it with [`med_key`].
    pub med: Option<(u32, u32)>,
    pub geo: Option<f64>,
    pub admin: Option<u32>,
}

/// The `med` value of a route: its exit AS (the neighbouring AS it was learnt from) and its
/// MED. A route without MED counts as MED 0, as most BGP implementations do by default
/// (RFC 4271 leaves it to the implementation; Cisco's `bgp bestpath med missing-as-worst`
/// is the opposite choice, which director does not offer).
pub fn med_key(exit_as: u32, med: Option<u32>) -> (u32, u32) {
    (exit_as, med.unwrap_or(0))
}

/// A server to rank.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Candidate {
    /// The caller's id, copied into decisions.
    pub server: u16,
    /// Share of answers among the final equals (0 counts as 1).
    pub portion: u16,
    pub metrics: Metrics,
}
