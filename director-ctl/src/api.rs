//! What `--json` prints: one typed document per command, with stable field names, numbers as
//! numbers, names where a reader needs names and objects rather than pairs.
//!
//! Every document carries `version`, [`VERSION`] when it was printed. It changes only when a
//! field changes meaning or disappears; adding a field does not change it, so readers
//! should ignore fields they do not know. The tests parse the output back into these same
//! types. The README's "JSON output" section lists the documents.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use director_common::select::Mode;
use ipnet::IpNet;
use serde::{Deserialize, Serialize};

pub use crate::controller::engine::{Metric, Outcome, Term};

pub const VERSION: u32 = 1;

/// `server list --json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServerList {
    pub version: u32,
    pub servers: Vec<ListedServer>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedServer {
    pub id: u16,
    pub name: String,
    pub ipv4: Option<Ipv4Addr>,
    pub ipv6: Option<Ipv6Addr>,
    pub up: bool,
}

/// `service list --json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServiceList {
    pub version: u32,
    pub services: Vec<ListedService>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedService {
    pub id: u32,
    /// The DNS name, without the trailing dot.
    pub name: String,
    pub ttl: u32,
    /// Addresses per answer.
    pub answers: u8,
    pub select: Mode,
}

/// `route list --json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RouteList {
    pub version: u32,
    pub routes: Vec<Route>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    pub service: String,
    pub prefix: IpNet,
    /// Equally good servers, sharing answers by weight.
    pub primary: Vec<RouteServer>,
    /// The next best, in order: answered when the primaries are down, or for more answers.
    pub fallback: Vec<RouteServer>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteServer {
    pub server: String,
    pub weight: u16,
}

/// `stats --json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    pub version: u32,
    /// Packets by verdict reason: `answered`, `pass_*`, `dropped` (the names `stats` prints).
    pub counters: BTreeMap<String, u64>,
    /// Answers sent, by service name.
    pub services: BTreeMap<String, u64>,
}

/// `status --json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    pub version: u32,
    pub pin_dir: PathBuf,
    /// Interfaces director is attached to.
    pub interfaces: Vec<String>,
    pub program_id: Option<u32>,
    pub verified_instructions: Option<u32>,
    pub servers: usize,
    pub services: usize,
    pub routes_v4: usize,
    pub routes_v6: usize,
    /// Which decision table queries read (`null` when nothing is attached).
    pub active_table: Option<DecisionTable>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DecisionTable {
    A,
    B,
}

/// `check --json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Check {
    pub version: u32,
    pub sites: usize,
    pub servers: usize,
    pub services: usize,
    /// Client prefixes considered.
    pub prefixes: usize,
    /// Kernel entries that would be written, and those left out because the entry covering
    /// them gives the same decision.
    pub entries: usize,
    pub saved: usize,
    pub tables: Vec<TableSummary>,
    pub inputs: Inputs,
    pub load_seconds: f64,
    pub compute_seconds: f64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSummary {
    pub service: String,
    pub entries: usize,
    pub saved: usize,
}

/// What the controller read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inputs {
    /// Best routes per site, in config order.
    pub bgp_routes: Vec<SiteRoutes>,
    /// MRT records read, and damaged ones skipped.
    pub bgp_records: usize,
    pub bgp_damaged_skipped: usize,
    pub geo_networks: usize,
    pub geo_without_location: usize,
    pub own_locations: usize,
    pub rtt_measurements: usize,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteRoutes {
    pub site: String,
    pub routes: usize,
}

/// `explain --json`: every server's metric values for one client, and the sort replayed
/// level by level.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Explain {
    pub version: u32,
    pub service: String,
    pub client: IpAddr,
    /// How the kernel picks among the final equals.
    pub select: Mode,
    pub servers: Vec<ExplainServer>,
    pub sort: Sort,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExplainServer {
    pub server: String,
    pub site: String,
    /// The most specific prefix of the site's BGP table holding the client.
    pub bgp_prefix: Option<IpNet>,
    pub location: Option<ClientLocation>,
    pub rtt: Option<RttMeasurement>,
    pub metrics: MetricValues,
}

/// Where the client is: the most specific located prefix holding it, with a point or a
/// node of the location graph.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClientLocation {
    pub prefix: IpNet,
    pub lat: Option<f64>,
    pub lon: Option<f64>,
    pub node: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RttMeasurement {
    pub prefix: IpNet,
    pub ms: f64,
}

/// One server's metric values; `null` is missing data.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MetricValues {
    pub ext: Option<u32>,
    pub int: Option<u32>,
    pub ser: Option<u32>,
    pub rtt: Option<f64>,
    pub med: Option<Med>,
    pub geo: Option<f64>,
    pub admin: Option<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Med {
    pub exit_as: u32,
    pub med: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sort {
    /// Whether the kernel picks among each final set at random (the policy uses `random`).
    pub random: bool,
    pub rtt_tolerance_percent: f64,
    /// The policy's levels, in order.
    pub levels: Vec<Level>,
    /// Tier 0 is what the kernel picks from; later tiers are fallbacks, in order.
    pub tiers: Vec<Tier>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Level {
    pub priority: u32,
    pub metrics: Vec<Term>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tier {
    pub tier: usize,
    /// One per policy level, in order.
    pub steps: Vec<Step>,
    pub chosen: Vec<Chosen>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub priority: u32,
    pub metrics: Vec<Term>,
    pub outcome: Outcome,
    /// At a level with rtt: the lowest rtt among the complete servers, and the highest rtt
    /// that counts as equal to it.
    pub rtt_lowest: Option<f64>,
    pub rtt_limit: Option<f64>,
    /// The servers still in the running at this level.
    pub rows: Vec<Row>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub server: String,
    /// Each of the step's metrics' values (`null` = missing); empty at a med step.
    pub values: BTreeMap<Metric, Option<f64>>,
    /// The server's route's exit AS and MED, at a med step.
    pub med: Option<Med>,
    /// What was compared at a sum step (the weighted sum, an rtt within tolerance counted
    /// as the lowest); `null` when data is missing.
    pub key: Option<f64>,
    pub result: RowResult,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RowResult {
    Kept,
    Out,
    /// Out because it lacks data the level needs.
    OutNoData,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chosen {
    pub server: String,
    /// Its share of answers among the tier (0 counts as 1).
    pub portion: u16,
}

/// `run --json`: one object per line on stderr, tagged by `event`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunEvent {
    pub version: u32,
    #[serde(flatten)]
    pub event: Event,
    /// The same line as the plain-text log.
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The first full computation is in the kernel.
    Applied {
        prefixes: usize,
        entries: usize,
        saved: usize,
        compute_s: f64,
        apply_s: f64,
    },
    /// Servers or services changed: every entry was replaced.
    Replaced { entries: usize },
    /// Some entries of a service were rewritten (under `prefix` when only RTT changed).
    Changed {
        service: String,
        prefix: Option<IpNet>,
        rewritten: usize,
        deleted: usize,
    },
    /// The kernel is equal to the inputs again.
    Updated { ms: f64 },
    /// A config or input was refused; the kernel keeps the last good decisions.
    Refused { error: String },
}
