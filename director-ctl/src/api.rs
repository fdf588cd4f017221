//! What `--json` prints: one typed document per command, with stable field names, numbers as
//! numbers, names where a reader needs names and objects rather than pairs.
//!
//! Every document carries `version`, [`VERSION`] when it was printed. It changes only when a
//! field changes meaning or disappears; adding a field does not change it, so readers
//! should ignore fields they do not know. The tests parse the output back into these same
//! types. docs/operating.md ("JSON output") lists the documents.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use director_common::select::Mode;
use ipnet::IpNet;
use serde::{Deserialize, Serialize};

// The planner's documents (explain, and the parts of check it computes) and the version
// every document carries are director-plan's: it builds them.
pub use director_plan::report::{
    BgpSource, Chosen, ClientLocation, Explain, ExplainReplica, ExplainServer, Inputs, Level,
    MedRow, Metric, MetricValues, Odds, Outcome, Pick, PickRule, Row, RowResult, RttAgent,
    RttMeasurement, SiteRoutes, Sort, Step, TableSummary, Term, Tier, VERSION,
};

/// `address list --json`: the addresses queries may be sent to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddressList {
    pub version: u32,
    pub addresses: Vec<ListedAddress>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedAddress {
    pub address: IpAddr,
    /// One of the host's own (read by `attach`, `run`, `address refresh`).
    pub host: bool,
    /// Added with `address add`.
    pub configured: bool,
}

/// A VIP of a service, as `service list` and `status` show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedVip {
    /// `ADDRESS:PORT` (`[ADDRESS]:PORT` for IPv6).
    pub vip: std::net::SocketAddr,
    pub service: String,
    pub mode: director_common::steer::Forward,
    /// SYNs' MSS is lowered to this; 0: left alone.
    pub mss: u16,
    /// `ipip`: the outer sources (a network; each flow takes one address of it).
    pub encap_source: Option<IpNet>,
}

/// `flows list --json`: the pinned TCP flows to VIPs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FlowList {
    pub version: u32,
    pub flows: Vec<ListedFlow>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ListedFlow {
    pub client: std::net::SocketAddr,
    pub vip: std::net::SocketAddr,
    pub service: String,
    pub server: String,
    /// Recorded from a packet other than a SYN (its entry was lost: a restart or an
    /// eviction); it got the same choice a SYN would have.
    pub midstream: bool,
    /// Its server went down and it was moved to the next choice.
    pub moved: bool,
    /// Seconds since it was recorded.
    pub age_s: f64,
}

/// `flows stats --json`: the steering counters (summed over CPUs) and flows per server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FlowStats {
    pub version: u32,
    /// Flow entries in the table now, and its capacity.
    pub flows: usize,
    pub capacity: u32,
    /// By counter name: `new_flows`, `pinned`, `midstream`, `moved`, `guarded`, `icmp`,
    /// `drop_no_server`, `drop_no_hop`, `drop_failed`, `mss_clamped`, `forwarded_l2`,
    /// `forwarded_ipip`.
    pub counters: BTreeMap<String, u64>,
    /// Connections steered to each server (new and moved flows), by name.
    pub servers: BTreeMap<String, u64>,
}

/// `nexthop ADDR --json`: where the kernel sends packets for an address.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Nexthop {
    pub version: u32,
    pub address: IpAddr,
    pub ifindex: u32,
    pub iface: String,
    /// `aa:bb:cc:dd:ee:ff`.
    pub src_mac: String,
    pub dst_mac: String,
    /// The router on the way; absent when the address is on the interface's segment.
    pub gateway: Option<IpAddr>,
}

/// `server list --json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServerList {
    pub version: u32,
    pub servers: Vec<ListedServer>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ListedServer {
    pub id: u16,
    pub name: String,
    pub ipv4: Option<Ipv4Addr>,
    pub ipv6: Option<Ipv6Addr>,
    /// Admin state (`server set`).
    pub up: bool,
    /// `server drain`: no new clients.
    #[serde(default)]
    pub drained: bool,
    /// Its last load read by `run` (null: none).
    #[serde(default)]
    pub load: Option<f64>,
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
    /// Its response rate limit; `null`: none.
    #[serde(default)]
    pub rrl: Option<RrlLimit>,
    /// Its name is answered in DNS (false: it is reached by its VIPs only).
    #[serde(default = "yes")]
    pub dns: bool,
    #[serde(default)]
    pub vips: Vec<ListedVip>,
}

/// A service's response rate limit, per source prefix of these lengths.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RrlLimit {
    /// Answers per second.
    pub rate: u32,
    pub burst: u32,
    /// Every `slip`-th limited response is sent truncated; 0: all dropped.
    pub slip: u32,
    pub ipv4_prefix: u8,
    pub ipv6_prefix: u8,
}

/// `rrl exempt list --json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RrlExemptList {
    pub version: u32,
    /// Source prefixes never rate limited.
    pub exempt: Vec<IpNet>,
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

/// What the health checks say of a server for one service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    Up,
    Down,
    /// Not checked yet: kept out of answers until its first check.
    Unchecked,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ServiceServer {
    pub service: String,
    pub server: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceHealth {
    pub service: String,
    pub server: String,
    pub health: Health,
    /// Kept out of this service's answers: down, not checked yet, or over its load
    /// threshold (false under fail-open).
    pub out: bool,
}

/// `status --json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
    /// Decisions (ranked server lists) stored in the half in use: each is stored once, and
    /// every prefix with that decision refers to it by id.
    pub stored_decisions: u32,
    /// The half of the stored decisions new ids come from (`null` when nothing is
    /// attached); it flips each time ids run out and every entry moves to the other half.
    pub active_table: Option<DecisionTable>,
    /// Servers drained (`server drain`) or set down (`server set --down`), by name.
    #[serde(default)]
    pub drained: Vec<String>,
    #[serde(default)]
    pub admin_down: Vec<String>,
    /// Every (service, server) that health checks have a say on, by service then server.
    #[serde(default)]
    pub health: Vec<ServiceHealth>,
    /// Each server's last load read by `run`, by name.
    #[serde(default)]
    pub load: BTreeMap<String, f64>,
    /// Every VIP, by address.
    #[serde(default)]
    pub vips: Vec<ListedVip>,
    /// TCP flows pinned now (see `flows list`).
    #[serde(default)]
    pub flows: usize,
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
    /// The first computation is in the kernel.
    Applied {
        prefixes: usize,
        /// Entries in the table now.
        entries: usize,
        /// Entries written or deleted to get there (0 on a restart with the same inputs).
        written: usize,
        saved: usize,
        /// Reading the inputs (BGP, GeoIP, RTT, locations).
        load_s: f64,
        compute_s: f64,
        apply_s: f64,
    },
    /// Servers or services changed: the table was brought to the new computation in
    /// place; `entries` in it now, `written` of them written or deleted.
    Reconfigured { entries: usize, written: usize },
    /// Some entries of a service were rewritten (under `prefix` when only RTT changed).
    Changed {
        service: String,
        prefix: Option<IpNet>,
        rewritten: usize,
        deleted: usize,
    },
    /// The kernel is equal to the inputs again.
    Updated { ms: f64 },
    /// A server went down or came back up: every decision was sorted again over the
    /// servers that are up (`down`, by name), `entries` written or deleted.
    Resorted {
        down: Vec<String>,
        /// Servers out of one service by its health checks.
        #[serde(default)]
        health_out: Vec<ServiceServer>,
        entries: usize,
        ms: f64,
    },
    /// A health check changed a server's state for a service (the kernel already skips or
    /// takes it; a re-sort follows). `error` says why a check failed.
    Health {
        service: String,
        server: String,
        health: Health,
        error: Option<String>,
    },
    /// A server's load crossed a service's threshold (`over`) or came back under its
    /// resume level.
    Load {
        service: String,
        server: String,
        load: f64,
        over: bool,
    },
    /// A server's load could not be read (it keeps its last value and its state).
    LoadUnreadable { server: String, error: String },
    /// Every server of a service is down by its checks: all are answered (`open`), or
    /// one is up again and fail-open ends.
    FailOpen { service: String, open: bool },
    /// No server of a service is usable by its checks and load (`active`), so the kernel
    /// answers its `fallback` (`alternate`, `origin` or `pass`); or one is usable again.
    Fallback {
        service: String,
        fallback: String,
        active: bool,
    },
    /// The zones' UDP and TCP listeners are bound (`ADDR:PORT` each).
    Listening { addresses: Vec<String> },
    /// Every check has given its first verdict (at start): only now is anything published.
    FirstRound {
        checks: usize,
        up: usize,
        down: usize,
        ms: f64,
    },
    /// A config or input was refused (also one that would remove too much, until
    /// confirmed); the kernel keeps the last good decisions.
    Refused { error: String },
    /// The HTTP redirector listens (`[http] listen`).
    HttpListening { listen: Vec<std::net::SocketAddr> },
    /// The map page is served (`[ui] listen`).
    UiListening { listen: std::net::SocketAddr },
    /// The operator confirmed a change that removes more than `--max-removal-share`
    /// (SIGUSR1, or `--accept-removal` at start); `removed` says what, e.g. "1 of 2 services
    /// (b.example.com)".
    Accepted { removed: Vec<String> },
    /// DNSSEC: the signed zones were signed anew for a new daily window; `expires` is the
    /// earliest expiration of their signatures (Unix seconds).
    Resigned { zones: Vec<String>, expires: u64 },
    /// Fleet: this publisher leads (`--role publisher`); it alone publishes.
    Leading { publisher: String },
    /// Fleet: a version is current. `new_chunks` of its `chunks` were not in the store;
    /// `compile_s` read and compiled the inputs, `ms` shipped and flipped it.
    Published {
        version: u64,
        compile_s: f64,
        entries: u64,
        chunks: usize,
        new_chunks: usize,
        bytes: u64,
        new_bytes: u64,
        ms: f64,
    },
    /// Fleet: the inputs compile to the current version's table: nothing published.
    Unchanged { version: u64 },
    /// Fleet: an edge answers from `version` now; `fetched_*` came from the store, the rest
    /// from its own copy.
    Took {
        version: u64,
        entries: u64,
        written: usize,
        fetched_chunks: usize,
        fetched_bytes: u64,
        ms: f64,
    },
    /// Fleet: the store cannot be reached; answering goes on from `version`.
    StoreUnreachable { version: Option<u64>, error: String },
    /// Fleet: the store is reached again.
    StoreReached { version: Option<u64> },
    /// Fleet: a watch was cancelled (compaction) or ended; reading the current pointer anew.
    Resync { reason: String },
    /// Fleet: the servers a quorum of observers found down (publisher: published; edge:
    /// taken).
    Overlay { down: Vec<ServiceServer> },
    /// Fleet: an edge refused a `version`, an `overlay`, or at start its disk `copy`, for
    /// `reason` (see [`Refusal`]); it answers on from what it holds. Each is refused once.
    FleetRefused {
        what: String,
        version: Option<u64>,
        reason: String,
        error: String,
    },
    /// Fleet: the keys an edge takes versions and overlays from (its trust file, read at
    /// start and again when it changes), by name and id; empty with `--insecure-unsigned`.
    Trusting { keys: Vec<String> },
    /// Fleet: the key id a publisher signs with (at start, when its key file changed, and
    /// when it signs the current table again under it), or "unsigned".
    Signing { key: String },
    /// Fleet: this edge's verdict on a server it observes, written for the quorum.
    Vote {
        service: String,
        server: String,
        down: bool,
    },
    /// Live inputs changed (`bgp` prefixes' routes from BMP, `rtt` prefixes' agent
    /// measurements): `prefixes` decided again (all of them when `full`), `entries` written
    /// or deleted.
    Live {
        bgp: usize,
        rtt: usize,
        prefixes: usize,
        full: bool,
        entries: usize,
        ms: f64,
    },
    /// An RTT agent's poll failed (logged once until it answers again); its measurements
    /// stay until they expire.
    AgentFailing { agent: String, error: String },
    /// An RTT agent answers again.
    AgentReached { agent: String },
    /// A replica hook ended (`error` unless it succeeded).
    ReplicaHook {
        hook: String,
        service: String,
        server: String,
        error: Option<String>,
    },
    /// A replica changed state: `copy` (its bonus crossed the threshold: the copy hook
    /// runs), `joined` (its health check passes: it gets clients), `drain` (its bonus
    /// stayed low: no new clients), `retire` (drained: the retire hook runs).
    Replica {
        action: String,
        service: String,
        server: String,
        bonus: f64,
    },
    /// Capacity spill moved demand: groups of client prefixes of a service (those that
    /// share a decision) from a site over its target to their next site, or back.
    Spilled {
        moved: Vec<SpillMove>,
        returned: Vec<SpillMove>,
    },
    /// Every site with a capacity is over its target: nothing spills (there is nowhere
    /// to send it).
    AllOverTarget { sites: Vec<String> },
    /// A router opened a BMP session (`name`: the sysName of its Initiation, if sent).
    BmpUp {
        router: IpAddr,
        name: Option<String>,
    },
    /// A BMP session was closed before its first message was read: `reason` is
    /// `not_allowed` (its address is not in `[bgp] bmp_allow`) or `over_cap`
    /// (`bmp_max_sessions` reached).
    BmpRefused { router: IpAddr, reason: String },
    /// A router's BMP session ended (`error` says why, unless it closed cleanly); its routes
    /// are stale until it comes back or the hold time passes.
    BmpDown {
        router: IpAddr,
        error: Option<String>,
    },
    /// A router's initial dump is in: `routes` from `peers` peers, `ms` after it connected.
    BmpSynced {
        router: IpAddr,
        peers: usize,
        routes: usize,
        ms: u64,
    },
}

/// How `run` and what it starts (the health checks) log their events, on stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Log {
    /// One line of text per event.
    Text,
    /// One [`RunEvent`] JSON object per line.
    Json,
}

impl Log {
    pub fn event(self, event: Event, message: String) {
        match self {
            Log::Text => eprintln!("director-ctl run: {message}"),
            Log::Json => {
                let e = RunEvent {
                    version: VERSION,
                    event,
                    message,
                };
                match serde_json::to_string(&e) {
                    Ok(line) => eprintln!("{line}"),
                    Err(err) => eprintln!("director-ctl run: {} ({err})", e.message),
                }
            }
        }
    }
}

/// `zone list --json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ZoneList {
    pub zones: Vec<ListedZone>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ListedZone {
    /// The apex, with its trailing dot.
    pub origin: String,
    pub serial: u32,
    pub ns: Vec<String>,
    pub listen: Vec<IpAddr>,
    /// Static records, SOA, NS and glue included.
    pub records: usize,
}

fn yes() -> bool {
    true
}

/// `fleet status --json`: the fleet as the store holds it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FleetStatus {
    pub version: u32,
    pub fleet: String,
    /// The version edges should answer from, and who published it when.
    pub current: Option<u64>,
    pub published_by: Option<String>,
    pub published_ms: Option<u64>,
    /// The publisher leading now.
    pub leader: Option<String>,
    /// Every publisher in the election now, the leader first (the others stand by).
    #[serde(default)]
    pub publishers: Vec<FleetPublisher>,
    /// Versions kept in the store.
    pub versions: Vec<u64>,
    pub edges: Vec<FleetEdge>,
    /// The key ids the current version's envelope names as its signers (as the store
    /// holds it: edges check; their reports say what they refused).
    #[serde(default)]
    pub signed_by: Vec<String>,
    /// Servers out by a quorum of their observers.
    pub overlay: Vec<ServiceServer>,
    /// The overlay's serial (each overlay written has a higher one), and its signers.
    #[serde(default)]
    pub overlay_serial: u64,
    #[serde(default)]
    pub overlay_signed_by: Vec<String>,
    /// The answering member's database: file size and the part in use, in bytes.
    pub store_bytes: i64,
    pub store_bytes_in_use: i64,
    /// What the current version took from live inputs (BMP routers, RTT agents), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_inputs: Option<director_plan::fleet::manifest::LiveSources>,
    /// RTT agents whose report is in the store now (`agent --store`: its key lives while
    /// its lease does), by site then name.
    #[serde(default)]
    pub agents: Vec<FleetAgent>,
}

/// An RTT agent writing into the fleet's store, in `fleet status`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FleetAgent {
    pub site: String,
    pub name: String,
}

/// One edge in `fleet status`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FleetEdge {
    pub name: String,
    pub site: String,
    /// Holds a lease now (reachable, observing).
    pub live: bool,
    pub version: Option<u64>,
    /// Whether `version` is the current one.
    pub current: bool,
    /// Seconds since it last reported, and since it took its version.
    pub report_age_s: f64,
    pub version_age_s: f64,
    /// "current" (holds the current version and reports), "lagging" (reports, holds an
    /// older version or none) or "silent" (no lease).
    #[serde(default)]
    pub state: String,
    /// The program it runs (`director 0.1.0`), when its report says.
    #[serde(default)]
    pub program: Option<String>,
    /// The last version or overlay it refused, when its report says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<Refusal>,
}

/// What an edge refused last: in its report (`edges/<edge>`), in `fleet status`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Refusal {
    /// `version`, `overlay`, or `copy` (its disk copy, at start).
    pub what: String,
    /// The version's number, or the overlay's serial, when it could be read.
    pub version: Option<u64>,
    /// `unsigned`, `unknown_key`, `bad_signature`, `other_fleet`, `wrong_type`,
    /// `malformed`, `rollback` (older than what it holds) or `invalid` (a digest, the
    /// config).
    pub reason: String,
    pub error: String,
    /// Unix ms.
    pub at_ms: u64,
}

impl FleetEdge {
    /// [`FleetEdge::state`] from the rest.
    pub fn judge(&self) -> &'static str {
        // The lease is renewed only while the edge's loop turns: without one it is gone
        // or wedged. Its report is written only when it changes, so its age says nothing.
        if !self.live {
            "silent"
        } else if self.current {
            "current"
        } else {
            "lagging"
        }
    }
}

/// A publisher in `fleet status`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FleetPublisher {
    pub name: String,
    pub leader: bool,
}

/// `GET /rtt` of `director-ctl agent`: per client prefix, the handshake RTTs of its last
/// complete window at this site. The controller reads it with this same type.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RttReport {
    pub version: u32,
    pub site: String,
    /// Window length; windows start at multiples of it (Unix time), at every site alike.
    pub window_s: u64,
    /// The agent's clock when it answered (Unix ms), to judge the records' age by.
    pub now_ms: u64,
    /// Sorted by prefix.
    pub records: Vec<RttRecord>,
    pub counters: RttCounters,
}

/// One prefix's last complete window with at least `--min-samples` handshakes: the
/// planner's record, which the controller's merge takes as the agent serves it.
pub use director_plan::live::rtt::Record as RttRecord;

/// Totals since the agent attached.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RttCounters {
    /// Handshake RTTs taken by the kernel program.
    pub samples: u64,
    /// Samples whose prefix's entry was evicted before a drain read it (map too small).
    pub lost: u64,
    /// Handshakes the kernel had no RTT for (retransmitted SYN-ACK, SYN cookie).
    pub no_rtt: u64,
    /// Samples the map refused an entry for.
    pub no_entry: u64,
    /// Windows closed.
    pub windows: u64,
    /// With `--observe`: SYN-ACKs seen passing (each a handshake's start; those whose ACK
    /// came give the samples).
    #[serde(default)]
    pub syn_acks: u64,
    /// Active probes (`POST /probe`): targets probed; those whose RTT came from a SYN-ACK,
    /// a RST or an ICMP echo reply, and those that gave none; targets refused (past a
    /// request's or the queue's bound, or not a host of their prefix).
    #[serde(default)]
    pub probed: u64,
    #[serde(default)]
    pub probe_syn_ack: u64,
    #[serde(default)]
    pub probe_reset: u64,
    #[serde(default)]
    pub probe_echo: u64,
    #[serde(default)]
    pub probe_failed: u64,
    #[serde(default)]
    pub probe_refused: u64,
    /// Of `probe_refused`, why: a prefix that is not a /24 (/48); an address outside its
    /// prefix; not global unicast (private, loopback, link-local, multicast, reserved,
    /// documentation space, unless `--probe-allow` names it); past a request's or the
    /// queue's bound.
    #[serde(default)]
    pub probe_refused_not_unit: u64,
    #[serde(default)]
    pub probe_refused_outside: u64,
    #[serde(default)]
    pub probe_refused_not_global: u64,
    #[serde(default)]
    pub probe_refused_bound: u64,
    /// Requests to the agent's listener refused for want of a valid credential (401), and
    /// TLS handshakes that failed (no client certificate, or one no `client_ca` signed).
    #[serde(default)]
    pub unauthorized: u64,
    #[serde(default)]
    pub handshakes_refused: u64,
}

/// `POST /probe` to `director-ctl agent`: hosts to probe for their prefixes, from the
/// controller (prefixes with demand but without a live RTT at this site).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProbeRequest {
    pub targets: Vec<ProbeTarget>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProbeTarget {
    /// The client prefix the probe stands for; the RTT is reported for the /24 (/48)
    /// holding `address`, which must lie in it.
    pub prefix: IpNet,
    pub address: IpAddr,
}

/// The agent's answer to `POST /probe`.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProbeAccepted {
    /// Targets queued.
    pub accepted: usize,
    /// Already queued (or being probed).
    pub duplicate: usize,
    /// Refused: past the per-request bound or the queue's, or not to be probed.
    pub refused: usize,
    /// Of `refused`, why (as the report's `probe_refused_*` counters).
    #[serde(default)]
    pub refused_not_unit: usize,
    #[serde(default)]
    pub refused_outside: usize,
    #[serde(default)]
    pub refused_not_global: usize,
    #[serde(default)]
    pub refused_bound: usize,
    /// Targets waiting after this request.
    pub queued: usize,
}

/// One group of client prefixes moved by capacity spill (or back).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpillMove {
    pub service: String,
    pub from: String,
    pub to: String,
    /// Answers plus new flows per second the group had when it moved.
    pub rate: f64,
    /// What the move costs its clients: the difference in distance (km, or the location
    /// graph's cost) from their place to the two sites; lower moved first.
    pub loss: f64,
    /// Its decision as planned, servers best first.
    pub servers: Vec<String>,
}

/// `demand --json`, and `GET /demand` on `run`'s metrics listener: what the kernel
/// counted over the last cycle, as rates per second.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Demand {
    /// Seconds the rates are over (the last cycle).
    pub window_s: f64,
    /// One answer or new flow in `sample` is recorded with its client prefix; 0: none.
    pub sample: u32,
    pub services: Vec<ServiceDemand>,
    pub sites: Vec<SiteDemand>,
    pub servers: Vec<ServerDemand>,
    /// The sampled client prefixes with the most demand, most first.
    pub prefixes: Vec<PrefixDemand>,
    pub spill: SpillState,
    pub replicas: Vec<ReplicaState>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServiceDemand {
    pub service: String,
    /// Answers plus new flows per second.
    pub rate: f64,
    /// Counted since the program's maps were made.
    pub total: u64,
    /// Per decision (the group of its client prefixes that share one), most demand first.
    pub decisions: Vec<DecisionDemand>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecisionDemand {
    /// The decision as the kernel holds it: servers best first ...
    pub servers: Vec<String>,
    /// ... the first `primary` sharing answers.
    pub primary: u8,
    /// The sites of the primaries.
    pub sites: Vec<String>,
    pub rate: f64,
    /// Counted at its id since the id was given out (ids are reused only after a
    /// compaction).
    pub count: u64,
    /// Table entries that point at it.
    pub entries: usize,
    /// Capacity spill moved it here (from the decision planned for its prefixes).
    pub spilled: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SiteDemand {
    pub site: String,
    /// Its node in the location graph (or its name).
    pub location: String,
    /// Answers plus new flows per second sent to its servers.
    pub rate: f64,
    pub capacity: Option<f64>,
    /// `rate / capacity`.
    pub load: Option<f64>,
    /// The share of capacity spill keeps it under.
    pub target: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServerDemand {
    pub server: String,
    pub site: String,
    /// DNS answers that sent clients to it first, per second.
    pub answers: f64,
    /// New flows steered to it, per second.
    pub flows: f64,
    /// The same counted since the program's maps were made.
    pub answers_total: u64,
    pub flows_total: u64,
    pub capacity: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PrefixDemand {
    pub service: String,
    pub prefix: IpNet,
    /// Whom the prefix is: "resolver" (a DNS query without ECS: the resolver's address),
    /// "ecs" (the client subnet a resolver sent) or "client" (a new flow's source).
    pub by: String,
    /// Estimated answers plus new flows per second (samples scaled to the service's
    /// counted rate).
    pub rate: f64,
    /// Sampled records over the window ...
    pub samples: u64,
    /// ... and since `run` started.
    pub total: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SpillState {
    /// Every site with a capacity is over its target: nothing spills.
    pub all_over: bool,
    /// Sites over their target in the last cycle.
    pub over: Vec<String>,
    /// Groups moved now, and since when (Unix seconds).
    pub moved: Vec<SpillOverride>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpillOverride {
    #[serde(flatten)]
    pub group: SpillMove,
    pub since: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplicaState {
    pub service: String,
    pub server: String,
    pub site: String,
    pub bonus: f64,
    /// "absent", "copying", "serving" or "draining".
    pub state: String,
    /// Unix seconds since it is in that state (absent: null).
    pub since: Option<f64>,
}

/// `impact --json`: what a candidate config would move, by the demand measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Impact {
    /// Seconds the comparison took (the candidate's compile not included).
    pub seconds: f64,
    /// The demand window the weights come from, and its sampled prefixes.
    pub window_s: f64,
    pub demand_prefixes: usize,
    /// Answers plus new flows per second that would go to another site.
    pub moved_rate: f64,
    /// Prefixes whose answer would change.
    pub changed_ranges: usize,
    pub sites: Vec<SiteImpact>,
    /// The prefixes that move the most demand, most first.
    pub moves: Vec<PrefixMove>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SiteImpact {
    pub site: String,
    /// Measured now (per second).
    pub load: f64,
    pub moving_in: f64,
    pub moving_out: f64,
    /// `load - moving_out + moving_in`.
    pub projected: f64,
    /// In the candidate config.
    pub capacity: Option<f64>,
    /// `projected / capacity`.
    pub projected_share: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PrefixMove {
    pub service: String,
    pub prefix: IpNet,
    pub from: Vec<String>,
    pub to: Vec<String>,
    pub rate: f64,
}

/// `GET /ui/feed?service=S` on `run`'s `[ui]` listener: one service's table as the map page
/// draws it. The sites with their servers' state, and every grid cell the GeoIP data places
/// clients in, with the site the table sends them to. Client counts are in IPv4 /24s plus
/// IPv6 /48s (see director-plan's `atlas`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Atlas {
    pub version: u32,
    pub service: String,
    /// Every service the config has, for the page's selector.
    pub services: Vec<String>,
    /// Changes whenever the service's table does (a digest of the entries written, spill's
    /// overrides included); the page redraws the cells only then.
    pub generation: String,
    /// Cells are `grid` degrees square.
    pub grid: f64,
    pub sites: Vec<AtlasSite>,
    pub cells: Vec<AtlasCell>,
    /// Clients placed on the map, and those of them no entry covers.
    pub clients: f64,
    pub uncovered: f64,
    /// A fleet's publisher: the version current in the store (the cells are the table this
    /// publisher compiled last, `fleet.current` when it leads).
    pub fleet_version: Option<u64>,
    /// Seconds building the cells took (0 when they came from the cache).
    pub build_s: f64,
    /// A fleet's publisher: the fleet as `fleet status --json` gives it, read from the store
    /// at most once a second; none from a standalone `run`.
    #[serde(default)]
    pub fleet: Option<FleetStatus>,
    /// Why `fleet` is missing or old (the store did not answer), when it is.
    #[serde(default)]
    pub fleet_error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AtlasSite {
    pub name: String,
    /// Where it is drawn (none: no coordinates from `lat`/`lon` or its graph node).
    pub lat: Option<f64>,
    pub lon: Option<f64>,
    /// The service's clients the table sends here first, and their share of all placed.
    pub clients: f64,
    pub share: f64,
    /// Answers plus new flows per second over the last demand cycle, against capacity.
    pub rate: Option<f64>,
    pub capacity: Option<f64>,
    pub load: Option<f64>,
    /// The service's servers at this site.
    pub servers: Vec<AtlasServer>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AtlasServer {
    pub name: String,
    /// "up", "down", "unchecked" (no result yet) or "unwatched" (no health check).
    pub health: String,
    /// Out of the answers: down, overloaded, drained, or a replica not serving yet.
    pub out: bool,
    /// The last load its `load` check read.
    pub load: Option<f64>,
    /// Answers and new flows per second sent to it (last demand cycle).
    pub answers: Option<f64>,
    pub flows: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AtlasCell {
    /// The south-west corner, degrees.
    pub lat: f64,
    pub lon: f64,
    /// The site most of its clients are sent to; none when most are uncovered.
    pub site: Option<String>,
    /// That site's share of the cell's clients.
    pub share: f64,
    pub clients: f64,
    /// Every site with a share of the cell, most first.
    pub sites: Vec<AtlasShare>,
    /// An address that stands for the cell (its largest client network's first), to explain.
    pub sample: IpAddr,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AtlasShare {
    pub site: String,
    pub share: f64,
}
