//! What a site asks of the collector (a view), and what the collector tells operators.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{bail, Result};
use serde::Serialize;

use crate::inputs::mrt::PeerSelector;

/// Timings of the collector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// How long a lost router's routes keep counting (stale) before they are removed.
    pub hold: Duration,
    /// A session's initial dump ends after this long without route messages when the router
    /// sends no End-of-RIB (GoBGP sends none).
    pub quiet: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            hold: Duration::from_secs(300),
            quiet: Duration::from_secs(5),
        }
    }
}

/// Which of a peer's RIBs (RFC 7854 §2, RFC 9069): the routes as received (pre-policy
/// Adj-RIB-In), as accepted by the inbound policy (post-policy, the per-peer header's L
/// flag), or the router's own best routes (Loc-RIB, peer type 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    Pre,
    Post,
    LocRib,
}

impl Policy {
    pub(super) const ALL: [Policy; 3] = [Policy::Pre, Policy::Post, Policy::LocRib];

    pub(super) fn index(self) -> usize {
        self as usize
    }
}

impl FromStr for Policy {
    type Err = anyhow::Error;

    /// "pre", "post" or "loc-rib" (also "pre-policy", "post-policy", "locrib").
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s.trim().to_ascii_lowercase().as_str() {
            "pre" | "pre-policy" => Policy::Pre,
            "post" | "post-policy" => Policy::Post,
            "loc-rib" | "locrib" | "loc_rib" => Policy::LocRib,
            _ => bail!("BMP view {s:?} is none of \"pre\", \"post\" or \"loc-rib\""),
        })
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Policy::Pre => "pre",
            Policy::Post => "post",
            Policy::LocRib => "loc-rib",
        })
    }
}

/// A monitored router: the address it connects from, or the sysName of its Initiation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouterRef {
    Addr(IpAddr),
    Name(String),
}

impl FromStr for RouterRef {
    type Err = anyhow::Error;

    /// An IP address, else a sysName.
    fn from_str(s: &str) -> Result<Self> {
        let t = s.trim();
        if t.is_empty() {
            bail!("BMP router: empty (give its address or its sysName)");
        }
        Ok(match t.parse::<IpAddr>() {
            Ok(a) => RouterRef::Addr(a),
            Err(_) => RouterRef::Name(t.to_string()),
        })
    }
}

impl fmt::Display for RouterRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RouterRef::Addr(a) => write!(f, "{a}"),
            RouterRef::Name(n) => f.write_str(n),
        }
    }
}

/// A site's view: one router's routes, from some of its peers, in one RIB.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewSpec {
    pub router: RouterRef,
    /// Only these peers' routes (all peers when `None`). Loc-RIB routes have no peer of
    /// their own (RFC 9069 gives the router itself), so a selector and Loc-RIB match nothing.
    pub peer: Option<PeerSelector>,
    /// `None`: what the router sends: Loc-RIB if it sends one (and no peer is selected),
    /// else post-policy if the matching peers have any post-policy routes, else pre-policy.
    pub policy: Option<Policy>,
}

impl ViewSpec {
    /// From the config's strings: `router` (address or sysName), `peer` (as
    /// [`PeerSelector`]), `policy` ("pre", "post", "loc-rib").
    pub fn parse(router: &str, peer: Option<&str>, policy: Option<&str>) -> Result<ViewSpec> {
        Ok(ViewSpec {
            router: router.parse()?,
            peer: peer.map(str::parse).transpose()?,
            policy: policy.map(str::parse).transpose()?,
        })
    }
}

/// A router's state, for operators.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RouterStatus {
    pub address: IpAddr,
    /// The sysName of its Initiation message.
    pub name: Option<String>,
    /// Connected now; if not, its routes are stale (kept until the hold time passes).
    pub connected: bool,
    /// Milliseconds since it connected, or since it was lost.
    pub since_ms: u64,
    /// Its current session's initial dump is over.
    pub synced: bool,
    pub peers: Vec<PeerStatus>,
}

/// One peer's RIB in one view, for operators.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PeerStatus {
    pub address: IpAddr,
    pub asn: u32,
    /// The peer distinguisher (RFC 7854 §4.2; 0 for a global instance peer).
    pub distinguisher: u64,
    pub view: Policy,
    pub routes: usize,
    /// Its BGP session is up (Peer Up seen, no Peer Down since).
    pub up: bool,
    /// End-of-RIB seen for every address family the peer negotiated.
    pub synced: bool,
}

/// A router's initial dump ended (End-of-RIB from every peer, or the quiet period).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Synced {
    pub router: IpAddr,
    pub peers: usize,
    pub routes: usize,
    /// From the session's start to the end of its dump.
    pub ms: u64,
}
