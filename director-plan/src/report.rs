//! The `--json` documents the planner builds: `explain`, and the tables and inputs of
//! `check` (director-ctl's `api` re-exports them beside its own documents). Every document
//! carries `version`, [`VERSION`] when it was printed. It changes only when a field changes
//! meaning or disappears; adding a field does not change it, so readers should ignore
//! fields they do not know.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use director_common::select::Mode;
use ipnet::IpNet;
use serde::{Deserialize, Serialize};

pub use crate::engine::{Metric, Outcome, Term};

/// 2: `explain` gives each metric's source (`bgp`, files), the med step, `draw` for
/// `random` and the kernel's `pick`; `check` and `run` are unchanged.
/// 3: `run`'s `replaced` event (every entry rewritten through the spare table) is now
/// `reconfigured` (`entries`, `written`: servers or services changes are written in place).
/// 4: `status`'s `active_table` names the half of the stored decisions new ids come from
/// (there is one decision table, written in place; the half flips when ids run out).
pub const VERSION: u32 = 4;

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

/// `explain --json`: every server's metric values with where each came from, the sort
/// replayed level by level (DistributedDirector's `debug ip director sort`), and how the
/// kernel picks among the winners.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Explain {
    pub version: u32,
    pub service: String,
    pub client: IpAddr,
    /// How the kernel picks among the final equals.
    pub select: Mode,
    pub servers: Vec<ExplainServer>,
    pub sort: Sort,
    pub pick: Pick,
    /// `portion = "auto"`: the portions shown are where a running controller starts; it
    /// moves them toward each server's headroom (`director_auto_portion` in the metrics).
    #[serde(default)]
    pub portion_auto: bool,
    /// The service's VIPs: a new TCP connection to one gets a server among the final
    /// equals of `pick` by weighted rendezvous hashing of its addresses and ports.
    #[serde(default)]
    pub vips: Vec<std::net::SocketAddr>,
    /// How the VIPs' packets reach the server; absent without VIPs.
    #[serde(default)]
    pub mode: Option<director_common::steer::Forward>,
    /// Whether the name is answered in DNS.
    #[serde(default = "yes")]
    pub dns: bool,
    /// The service's replica candidates (servers that may be copied to where demand is),
    /// with their bonus and state as a running `run` has them.
    #[serde(default)]
    pub replicas: Vec<ExplainReplica>,
}

/// A replica candidate in `explain`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExplainReplica {
    pub server: String,
    pub site: String,
    /// Unknown without a running `run` (`explain --config`).
    pub bonus: Option<f64>,
    /// "absent", "copying", "serving" or "draining"; "unknown" without `run`.
    pub state: String,
}

fn yes() -> bool {
    true
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExplainServer {
    pub server: String,
    pub site: String,
    /// The site's route to the client (`ext`, `int`, `med`), if it has one.
    pub bgp: Option<BgpSource>,
    pub location: Option<ClientLocation>,
    pub rtt: Option<RttMeasurement>,
    /// The portion and admin preference this service gives it.
    pub portion: u16,
    pub metrics: MetricValues,
}

/// The most specific prefix of the site's BGP table holding the client, and its route.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BgpSource {
    pub prefix: IpNet,
    /// The site's MRT files.
    pub files: Vec<PathBuf>,
    pub next_hop: IpAddr,
    /// The neighbouring AS the route was learnt from (the path's first AS).
    pub exit_as: u32,
    /// The site's own AS (configured `asn`, else the BGP peer's AS).
    pub site_as: u32,
    pub as_path_len: u32,
    /// `null`: the route carried no MED (med counts it as 0).
    pub med: Option<u32>,
    /// The BMP router whose live table is the site's view (its routes win over the files').
    #[serde(default)]
    pub router: Option<String>,
}

/// Where the client is: the most specific located prefix holding it, with a point or a
/// node of the location graph, and the file it came from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClientLocation {
    pub prefix: IpNet,
    pub lat: Option<f64>,
    pub lon: Option<f64>,
    pub node: Option<String>,
    pub file: Option<PathBuf>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RttMeasurement {
    pub prefix: IpNet,
    pub ms: f64,
    /// The RTT file that holds this measurement (the last one, if several do).
    pub file: Option<PathBuf>,
    /// The agent that measured it, when it is live (it wins over the files').
    #[serde(default)]
    pub agent: Option<RttAgent>,
}

/// A live measurement's source: an RTT agent at the site.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RttAgent {
    /// The agent's URL.
    pub url: String,
    /// The /24s (/48s) measured that the value stands for (rolled up to the route prefix).
    pub measured: Vec<IpNet>,
    /// Handshakes in the windows taken.
    pub samples: u64,
    /// Active probes' RTTs in them (prefixes the agent probed, having no handshakes).
    #[serde(default)]
    pub probes: u64,
    /// When the newest window ended (the agent's clock, ms since the Unix epoch).
    pub window_end_ms: u64,
    /// Seconds since the controller took that window.
    pub age_s: f64,
}

/// One server's metric values; `null` is missing data.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MetricValues {
    pub ext: Option<u32>,
    pub int: Option<u32>,
    pub ser: Option<u32>,
    /// Milliseconds.
    pub rtt: Option<f64>,
    pub geo: Option<f64>,
    pub admin: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sort {
    /// The draw that ends the sort (`portion` or `random`), `null` without one.
    pub draw: Option<Metric>,
    /// `null` when rtt is not in the policy.
    pub rtt_tolerance_percent: Option<u32>,
    /// Whether the med step runs before the levels.
    pub med: bool,
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
    /// The med step, when med is on: every server still in the running.
    pub med: Option<Vec<MedRow>>,
    /// One per policy level, in order.
    pub steps: Vec<Step>,
    pub chosen: Vec<Chosen>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MedRow {
    pub server: String,
    /// `null` without a route (then the step does not touch it).
    pub site_as: Option<u32>,
    pub exit_point: Option<IpAddr>,
    pub med: Option<u32>,
    pub result: RowResult,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub priority: u32,
    pub metrics: Vec<Term>,
    pub outcome: Outcome,
    /// At a level with rtt: the lowest rtt (ms) among the complete servers, and the highest
    /// rtt that counts as equal to it (exact to the nanosecond).
    pub rtt_lowest: Option<f64>,
    pub rtt_limit: Option<f64>,
    /// The servers still in the running at this level.
    pub rows: Vec<Row>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub server: String,
    /// Each of the step's metrics' values (`null` = missing; rtt in ms).
    pub values: BTreeMap<Metric, Option<f64>>,
    /// What was compared at a sum step (the weighted sum, an rtt within tolerance counted
    /// as the lowest); `null` when data is missing or at a draw.
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
    pub portion: u16,
}

/// How the kernel picks among tier 0, and each server's odds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pick {
    pub rule: PickRule,
    /// Tier 0's servers with their share of answers (of queries for a draw, of clients for
    /// a client hash, of names for a name hash), summing to 1.
    pub odds: Vec<Odds>,
    /// With a client hash: the server this address gets when it asks without ECS and all
    /// of tier 0 is up; with a name hash: the server this service's name gets.
    pub this_client: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PickRule {
    /// Drawn per query by portion (`portion` ended the sort, select random).
    PortionDraw,
    /// Drawn per query, uniformly (`random` ended the sort).
    UniformDraw,
    /// A hash of the client's address (the ECS subnet, else the source) picks, weighted by
    /// portion when `portion` ended the sort: one client always gets the same server.
    ClientHash,
    /// A hash of the queried name picks: every client gets the same server.
    NameHash,
    /// Tier 0 has one server.
    Single,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Odds {
    pub server: String,
    pub share: f64,
}
