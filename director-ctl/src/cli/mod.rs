//! The command line: arguments ([`Cli`]), operator text ([`text`]) and what each command
//! prints ([`print`]: plain text; `--json` prints the [`crate::api`] documents). Commands
//! call `ops` for operator operations and `controller` for `run`, `check` and `explain`.

pub mod generate;
pub mod print;
pub mod text;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use director_common::{
    maps::PIN_DIR,
    rrl::{DEFAULT_V4_PREFIX, DEFAULT_V6_PREFIX},
    select::Mode,
    steer::Forward,
};

use crate::checked;
use crate::controller;
use crate::fleet;
use crate::kernel::{self, program, Maps, WriteLock};
use crate::ops;
use crate::rrl::DEFAULT_SLIP;

/// director: answers DNS for the names it owns from an XDP program, with the best server
/// for each client prefix.
#[derive(Parser)]
#[command(name = "director-ctl", version)]
pub struct Cli {
    /// bpffs directory where the program, its links and its maps are pinned.
    #[arg(long, global = true, env = "DIRECTOR_PIN_DIR", default_value = PIN_DIR)]
    pin_dir: PathBuf,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Load (first time), pin and attach the XDP program to an interface.
    Attach {
        #[arg(long)]
        iface: String,
        #[arg(long, value_enum, default_value = "native")]
        mode: AttachMode,
        /// Kernel-side log level compiled in at load (see `director-ctl log`).
        #[arg(long, value_enum, default_value = "off")]
        log_level: LogLevel,
    },
    /// Swap in a new build's program on every interface without a gap in answers: it is
    /// loaded against the pinned maps (refused if their layout differs) and replaces the
    /// old one on each bpf_link atomically (BPF_LINK_UPDATE).
    Upgrade {
        /// The XDP object to load (default: the one built into this director-ctl).
        #[arg(long)]
        object: Option<PathBuf>,
        /// Kernel-side log level compiled in at load (see `director-ctl log`).
        #[arg(long, value_enum, default_value = "off")]
        log_level: LogLevel,
    },
    /// Detach from an interface; the last detach unpins the program and its maps.
    Detach {
        #[arg(long)]
        iface: String,
    },
    /// Interfaces, program and map fill.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Servers that answers point to.
    #[command(subcommand)]
    Server(ServerCmd),
    /// DNS names director answers for.
    #[command(subcommand)]
    Service(ServiceCmd),
    /// Which servers each client prefix gets, per service.
    #[command(subcommand)]
    Route(RouteCmd),
    /// Response rate limiting (answers per second per client prefix) and its exemptions.
    #[command(subcommand)]
    Rrl(RrlCmd),
    /// The addresses queries may be sent to (the edge's): the host's own, kept by `attach`
    /// and `run`, and ones added here.
    #[command(subcommand)]
    Address(AddressCmd),
    /// TCP flows to VIPs pinned to servers, and the steering counters.
    #[command(subcommand)]
    Flows(FlowsCmd),
    /// The hop the kernel's tables give toward an address (interface, MACs, gateway): what
    /// VIP forwarding writes for a server.
    Nexthop {
        address: IpAddr,
        /// Ask the kernel to resolve the neighbour and wait up to this many ms.
        #[arg(long, default_value_t = 1000)]
        wait_ms: u64,
        #[arg(long)]
        json: bool,
    },
    /// Answered and passed packets, by reason and by service.
    Stats {
        #[arg(long)]
        json: bool,
    },
    /// Attach (or with --detach remove) a pass-through XDP program on the client end of a
    /// veth pair, so the frames director sends back with XDP_TX are delivered at once.
    VethPeer {
        #[arg(long)]
        iface: String,
        #[arg(long)]
        detach: bool,
    },
    /// Attach (or --detach) the turn-around-only program: the bench's ceiling, which turns
    /// DNS queries around in place and answers nothing. Not for production.
    Ceiling {
        #[arg(long)]
        iface: String,
        #[arg(long)]
        detach: bool,
    },
    /// On a server behind `ipip` forwarding: attach or detach the XDP decapsulator, which
    /// strips the outer header of IPv4-in-IPv4 and IPv6-in-IPv6 so the client's packet to
    /// the VIP reaches the stack. For hosts without the ipip/ip6_tunnel modules.
    #[command(subcommand)]
    Decap(DecapCmd),
    /// Compute decisions from a config (BGP, GeoIP, RTT, preferences), write them to the
    /// kernel, and keep them equal to the inputs: a changed file or SIGHUP recomputes and
    /// rewrites what changed.
    Run {
        /// The config (a publisher's or a standalone run's; an edge takes the fleet's).
        #[arg(long, required_unless_present = "store")]
        config: Option<PathBuf>,
        #[command(flatten)]
        fleet: FleetArgs,
        /// Attach to this interface first if director is not attached to it.
        #[arg(long)]
        iface: Option<String>,
        #[arg(long, value_enum, default_value = "native")]
        mode: AttachMode,
        /// How often to look at the input files, in milliseconds.
        #[arg(long, default_value_t = 500)]
        poll_ms: u64,
        /// Log events as JSON objects (one per line, on stderr).
        #[arg(long)]
        json: bool,
        /// A changed file is read once its size and mtime have stayed the same this long,
        /// in milliseconds (at most 5 s, or 4 times this, is waited).
        #[arg(long, default_value_t = 300)]
        settle_ms: u64,
        /// Refuse a change that removes more than this share (0 to 1) of the services,
        /// servers, decisions or an input's records, until confirmed with SIGUSR1.
        #[arg(long, default_value_t = 0.25)]
        max_removal_share: f64,
        /// Let the first apply remove more than --max-removal-share of what the kernel
        /// holds (a restart that confirms a removal).
        #[arg(long)]
        accept_removal: bool,
    },
    /// A fleet of directors on etcd.
    #[command(subcommand)]
    Fleet(FleetCmd),
    /// Validate a config and everything it reads; print what it would write. Touches nothing.
    Check {
        #[arg(long)]
        config: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Every server's metrics for a client, the sort's levels, and why the winners won.
    Explain {
        /// Decide from this config and the files it names.
        #[arg(long, required_unless_present = "run")]
        config: Option<PathBuf>,
        /// Ask a running `run` instead (its `[metrics] listen` address): its decisions,
        /// live BGP routes and agents' RTT included.
        #[arg(long, conflicts_with = "config")]
        run: Option<std::net::SocketAddr>,
        #[arg(long)]
        service: String,
        #[arg(long)]
        client: IpAddr,
        #[arg(long)]
        json: bool,
    },
    /// Demand as a running `run` counted it over its last cycle: per service and decision,
    /// per site and server, the busiest client prefixes, capacity spill and replicas.
    Demand {
        /// The `run` to ask (its `[metrics] listen` address).
        #[arg(long)]
        run: std::net::SocketAddr,
        /// Only this service.
        #[arg(long)]
        service: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// What a candidate config would move, before it is applied: its table compiled
    /// beside the one in the kernel, every range that changes weighted by the demand a
    /// running `run` measured there, per site in and out against capacity.
    Impact {
        /// The candidate config.
        #[arg(long)]
        config: PathBuf,
        /// The `run` to ask (its `[metrics] listen` address).
        #[arg(long)]
        run: std::net::SocketAddr,
        /// How many of the prefixes that move the most to list.
        #[arg(long, default_value_t = 20)]
        top: usize,
        #[arg(long)]
        json: bool,
    },
    /// Print the XDP program's log (needs `attach --log-level debug|info`) until Ctrl-C.
    Log,
    /// The zones director answers in full: `[[zone]]` in `run`'s config, or a zones file
    /// for `serve`.
    #[command(subcommand)]
    Zone(ZoneCmd),
    /// Answer the zones of a zones file on their listen addresses (UDP and TCP port 53),
    /// with the services the CLI wrote to the kernel: `run`'s DNS listeners for setups
    /// without a config. Follows changes to the file and to the services; stops on Ctrl-C.
    Serve {
        #[arg(long)]
        zones: PathBuf,
    },
    /// On a site's servers: measure the handshake RTT of every accepted TCP connection (a
    /// cgroup sock_ops program), or on a host the connections pass, of every handshake
    /// passing an interface (`--observe`, tc), per client /24 and /48, and serve each
    /// prefix's last complete window as JSON at `GET /rtt` for the controller; probe the
    /// prefixes the controller asks about (`POST /probe`: TCP SYN, else ICMP echo, paced by
    /// `--probe-rate`) when they have no handshakes. Stops on SIGINT/SIGTERM.
    Agent {
        /// This site's name, as the controller knows it.
        #[arg(long)]
        site: String,
        /// The cgroup v2 directory whose sockets are measured (with its descendants').
        /// Default: the cgroup2 root found in /proc/mounts (every socket of the host).
        #[arg(long, conflicts_with = "observe")]
        cgroup: Option<PathBuf>,
        /// Instead of accepted connections: the handshakes passing this interface (the
        /// server's SYN-ACK out to the ACK back; repeat for more). Name the interfaces
        /// towards the clients, each path once: a handshake seen on two gives no sample.
        #[arg(long, value_name = "IFACE")]
        observe: Vec<String>,
        /// With --observe: handshakes waiting for their ACK at once (past it the oldest
        /// is forgotten).
        #[arg(long, default_value_t = director_common::rtt::MAX_PENDING_HANDSHAKES, requires = "observe")]
        max_pending: u32,
        /// Where `GET /rtt` is served.
        #[arg(long, default_value = "127.0.0.1:9470")]
        listen: std::net::SocketAddr,
        /// Window length in seconds; windows start at multiples of it in Unix time.
        #[arg(long, default_value_t = 10)]
        window_s: u64,
        /// How often the kernel's map is drained, in milliseconds (bounds how many
        /// prefixes it must hold at once).
        #[arg(long, default_value_t = 2000)]
        drain_ms: u64,
        /// A prefix's window is reported only with at least this many handshakes.
        #[arg(long, default_value_t = 1)]
        min_samples: u64,
        /// Client prefixes the kernel map holds between two drains (memory: this × CPUs ×
        /// 280 bytes); past it, the least recently used are evicted and counted as lost.
        #[arg(long, default_value_t = director_common::rtt::MAX_RTT_PREFIXES)]
        max_prefixes: u32,
        /// A prefix with no new window is still reported until its last ended this long
        /// ago, in seconds.
        #[arg(long, default_value_t = 300)]
        retain_s: u64,
        /// Also write each window's report into this fleet's store
        /// (etcd://HOST:PORT[,HOST:PORT...]), under rtt/SITE/NAME on a lease of three
        /// windows, for publishers with `[rtt] from_store`.
        #[arg(long)]
        store: Option<String>,
        #[command(flatten)]
        fleet: FleetCommon,
        /// This agent's name in the store (default: the host's name).
        #[arg(long, requires = "store")]
        name: Option<String>,
        /// Active probes of the prefixes the controller asks about (`POST /probe`, for
        /// prefixes with demand but no handshakes here): targets per second, each a TCP SYN
        /// to port 443, then 80, else an ICMP echo. 0 (the default): refuse probe
        /// requests; give a rate where the controller has `[rtt] probe`.
        #[arg(long, default_value_t = 0.0)]
        probe_rate: f64,
        /// How long each of a probe's tries waits for its answer, in milliseconds (below
        /// the 1 s after which the kernel sends a SYN again).
        #[arg(long, default_value_t = 900)]
        probe_timeout_ms: u64,
    },
    /// Print the completion script for a shell to stdout, e.g.
    /// `director-ctl completions bash > /etc/bash_completion.d/director-ctl`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the man pages (director-ctl.1 and one per subcommand) into a directory: what
    /// the Debian package ships. Hidden: it is for packaging, not operators.
    #[command(hide = true)]
    Man {
        /// Created if missing; pages already there are overwritten.
        #[arg(long)]
        dir: PathBuf,
    },
}

#[derive(Subcommand)]
enum ZoneCmd {
    /// Write the zones' static part (SOA, NS, glue, static records) in zone-file format.
    /// Service names are answered per client, so they are not in it.
    Export {
        /// A config or zones file.
        #[arg(long)]
        config: PathBuf,
        /// Only this zone (default: every zone of the file).
        #[arg(long)]
        origin: Option<String>,
    },
    /// Add a zone to a zones file (created if missing), or replace the one of its origin.
    Add {
        #[arg(long)]
        zones: PathBuf,
        origin: String,
        /// A name server: NAME, or NAME=ADDR[,ADDR] (addresses are needed inside the zone,
        /// and are where `serve` listens). At least two.
        #[arg(long = "ns", required = true)]
        ns: Vec<String>,
        /// The SOA's mailbox as a name (default: hostmaster.ORIGIN).
        #[arg(long)]
        rname: Option<String>,
    },
    /// Remove a zone from a zones file.
    Del {
        #[arg(long)]
        zones: PathBuf,
        origin: String,
    },
    /// The zones of a config or zones file: origin, serial, NS, listen addresses.
    List {
        #[arg(long)]
        config: PathBuf,
        #[arg(long)]
        json: bool,
    },
}

/// `run` in a fleet (see docs/fleet.md); without `--store` run works alone.
#[derive(clap::Args, Debug)]
struct FleetArgs {
    /// The fleet's store: etcd://HOST:PORT[,HOST:PORT...].
    #[arg(long)]
    store: Option<String>,
    /// publisher: compile and publish (one leads at a time); edge: answer from the fleet.
    #[arg(long, value_enum, requires = "store")]
    role: Option<Role>,
    #[command(flatten)]
    common: FleetCommon,
    /// This process's name in the fleet (default: the host's name).
    #[arg(long)]
    name: Option<String>,
    /// Edge: its site, for spreading a server's observers over sites.
    #[arg(long, default_value = "default")]
    site: String,
    /// Edge: where its copy of the current version is kept.
    #[arg(long, default_value = "/var/lib/director/fleet")]
    state_dir: PathBuf,
    /// Edge: serve Prometheus text (GET /metrics) here.
    #[arg(long)]
    metrics_listen: Option<std::net::SocketAddr>,
    /// Seconds a lease outlives its holder (leadership, liveness, votes).
    #[arg(long, default_value_t = 3)]
    lease_seconds: i64,
    /// Publisher: versions kept in the store, the current one included (at least 3).
    #[arg(long, default_value_t = 3)]
    keep_versions: u64,
    /// Observers per server.
    #[arg(long, default_value_t = 3)]
    observers: usize,
    /// Down votes that take a server out (default: a majority of its observers).
    #[arg(long)]
    quorum: Option<usize>,
}

/// What names a fleet in the store.
#[derive(clap::Args, Debug)]
struct FleetCommon {
    /// The fleet's key prefix: several fleets can share one etcd cluster.
    #[arg(long = "fleet", default_value = "director")]
    fleet: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Role {
    Publisher,
    Edge,
}

#[derive(Subcommand)]
enum FleetCmd {
    /// Every edge, its version and age; the leader, versions kept and the store's size.
    Status {
        #[arg(long)]
        store: String,
        #[command(flatten)]
        common: FleetCommon,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum AttachMode {
    /// Driver (native) XDP.
    Native,
    /// Generic XDP in the stack (any interface, slower).
    Skb,
}

impl From<AttachMode> for program::Mode {
    fn from(m: AttachMode) -> program::Mode {
        match m {
            AttachMode::Native => program::Mode::Native,
            AttachMode::Skb => program::Mode::Skb,
        }
    }
}

/// aya-log's levels, in its numbering (0 = off).
#[derive(Clone, Copy, ValueEnum)]
enum LogLevel {
    Off,
    Error,
    Warn,
    Info,
    Debug,
}

#[derive(Subcommand)]
enum ServerCmd {
    /// Add a server (or change an existing one's addresses).
    Add {
        name: String,
        #[arg(long)]
        ipv4: Option<Ipv4Addr>,
        #[arg(long)]
        ipv6: Option<Ipv6Addr>,
    },
    /// Delete a server no route uses.
    Del { name: String },
    List {
        #[arg(long)]
        json: bool,
    },
    /// Drain a server: no new clients for any service (answers skip it), until undrained.
    /// Drained and admin-down outlast controller restarts and config reloads.
    Drain { name: String },
    /// Give a drained server new clients again.
    Undrain { name: String },
    /// Mark a server up or down; the kernel never answers with a down server. `--down`
    /// wins over health checks; `--up` hands the server back to them.
    Set {
        name: String,
        #[arg(long, conflicts_with = "down", required_unless_present = "down")]
        up: bool,
        #[arg(long)]
        down: bool,
    },
}

#[derive(Subcommand)]
enum ServiceCmd {
    /// Own a DNS name (or change an owned name's settings).
    Add {
        dnsname: String,
        #[arg(long, default_value_t = 30)]
        ttl: u32,
        /// Addresses per answer.
        #[arg(long, default_value_t = 1)]
        answers: u8,
        /// How to pick among equally good servers: random, client or name.
        #[arg(long, default_value = "random")]
        select: Mode,
        /// Response rate limit: answers per second per client prefix (0: none). Without
        /// it a changed service keeps its limit; see `rrl set` for the other settings.
        #[arg(long)]
        rrl_rate: Option<u32>,
        /// Answers at once after a quiet spell (default: the rate).
        #[arg(long, default_value_t = 0, requires = "rrl_rate")]
        rrl_burst: u32,
        /// Every SLIP-th limited response is sent truncated (TC=1), the rest dropped.
        #[arg(long, default_value_t = DEFAULT_SLIP, requires = "rrl_rate")]
        rrl_slip: u32,
        /// A virtual IP and port (203.0.113.80:443, [2001:db8::80]:443) whose new TCP
        /// connections go to the client's best server; repeat for more. Given, they
        /// replace the service's VIPs; the name is then answered in DNS only with --dns.
        #[arg(long = "vip")]
        vips: Vec<String>,
        /// How a VIP's packets reach the servers: l2 (the servers share the edge's
        /// segment) or ipip (encapsulated to the server's address).
        #[arg(long, default_value = "l2", requires = "vips")]
        mode: Forward,
        /// Lower SYNs' MSS to this (0: leave it). Default: 1440 (IPv4) and 1400 (IPv6)
        /// for ipip, none for l2.
        #[arg(long, requires = "vips")]
        mss: Option<u16>,
        /// ipip's outer source network per family (each flow takes one address of it).
        #[arg(long, requires = "vips")]
        encap_source: Vec<String>,
        /// Answer the name in DNS too, though the service has VIPs.
        #[arg(long)]
        dns: bool,
    },
    Del {
        dnsname: String,
    },
    List {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum DecapCmd {
    /// Attach the decapsulator to an interface (its link pinned beside director's pins).
    Attach {
        #[arg(long)]
        iface: String,
        #[arg(long, value_enum, default_value = "native")]
        mode: AttachMode,
    },
    /// Detach it from an interface.
    Detach {
        #[arg(long)]
        iface: String,
    },
}

#[derive(Subcommand)]
enum FlowsCmd {
    /// Every pinned flow: client, VIP, service, server, age.
    List {
        /// Only this service's flows.
        #[arg(long)]
        service: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Steering counters (new, pinned, moved, guarded, dropped...) and flows per server.
    Stats {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum RrlCmd {
    /// Limit a service's answers per second per client prefix (the packet's source, never
    /// ECS); --rate 0 removes the limit.
    Set {
        dnsname: String,
        #[arg(long)]
        rate: u32,
        /// Answers at once after a quiet spell (default: the rate).
        #[arg(long, default_value_t = 0)]
        burst: u32,
        /// Every SLIP-th limited response is sent truncated (TC=1) so real resolvers retry
        /// over TCP; the rest are dropped. 0 drops all, 1 truncates all.
        #[arg(long, default_value_t = DEFAULT_SLIP)]
        slip: u32,
        /// Prefix length of an IPv4 client's bucket.
        #[arg(long, default_value_t = DEFAULT_V4_PREFIX)]
        ipv4_prefix: u8,
        /// Prefix length of an IPv6 client's bucket.
        #[arg(long, default_value_t = DEFAULT_V6_PREFIX)]
        ipv6_prefix: u8,
    },
    /// Source prefixes never limited.
    #[command(subcommand)]
    Exempt(ExemptCmd),
}

#[derive(Subcommand)]
enum ExemptCmd {
    Add {
        prefix: String,
    },
    Del {
        prefix: String,
    },
    List {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum RouteCmd {
    /// Give clients in PREFIX these servers: SERVER[=WEIGHT],... share answers by weight;
    /// servers after a '|' are fallbacks, in order (e.g. "fra-1=2,ams-1|nyc-1").
    Set {
        dnsname: String,
        prefix: String,
        servers: String,
    },
    Del {
        dnsname: String,
        prefix: String,
    },
    List {
        dnsname: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum AddressCmd {
    /// Answer queries sent to ADDR too (an address routed to this host but not on it).
    Add { address: String },
    /// Stop answering on an address added with `add` (the host's own stay).
    Del { address: String },
    /// Read the host's addresses again (what `run` does at every poll).
    Refresh,
    List {
        #[arg(long)]
        json: bool,
    },
}

fn print_json<T: serde::Serialize>(v: &T) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

/// Prints `doc` as JSON, or as the operator's text.
fn zone(c: ZoneCmd) -> Result<()> {
    use crate::dns::file::{self, ZoneFile};
    match c {
        ZoneCmd::Export { config, origin } => {
            let f = ZoneFile::load(&config)?;
            let zones = f.build(&[])?;
            let wanted = origin.map(|o| crate::dns::zone::absolute(&o)).transpose()?;
            let mut n = 0;
            for z in zones.all() {
                if wanted.as_ref().is_none_or(|w| *w == z.origin) {
                    print!("{}", z.export());
                    n += 1;
                }
            }
            if n == 0 {
                anyhow::bail!("{} has no such zone", config.display());
            }
        }
        ZoneCmd::Add {
            zones,
            origin,
            ns,
            rname,
        } => {
            let ns = ns
                .iter()
                .map(|s| text::name_server(s))
                .collect::<Result<_>>()?;
            file::add(&zones, &crate::dns::ZoneConfig::new(origin, ns, rname))?;
        }
        ZoneCmd::Del { zones, origin } => file::del(&zones, &origin)?,
        ZoneCmd::List { config, json } => {
            let f = ZoneFile::load(&config)?;
            let list = crate::dns::zone_list(&f.build(&[])?);
            show(json, &list, print::zones)?;
        }
    }
    Ok(())
}

/// A fleet member's default name.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "director".into())
}

/// `run --store`: a publisher or an edge.
fn run_fleet(
    store: String,
    a: FleetArgs,
    config: Option<PathBuf>,
    pin_dir: PathBuf,
    poll_ms: u64,
    log: crate::api::Log,
) -> Result<()> {
    let name = a.name.unwrap_or_else(host_name);
    if name.is_empty() || name.contains('/') {
        anyhow::bail!("--name {name:?}: must be non-empty and without '/'");
    }
    if a.lease_seconds < 1 {
        anyhow::bail!("--lease-seconds {}: at least 1", a.lease_seconds);
    }
    if a.observers < 1 {
        anyhow::bail!("--observers {}: at least 1", a.observers);
    }
    if a.quorum == Some(0) {
        anyhow::bail!("--quorum 0: at least 1 vote must take a server out");
    }
    if a.keep_versions < 3 {
        anyhow::bail!("--keep-versions {}: at least 3", a.keep_versions);
    }
    let o = fleet::Options {
        store,
        fleet: a.common.fleet,
        name,
        lease_ttl: a.lease_seconds,
        observers: a.observers,
        quorum: a.quorum,
        log,
    };
    fleet::store::check_fleet(&o.fleet)?;
    fleet::store::parse_url(&o.store)?;
    match a.role {
        Some(Role::Publisher) => {
            let Some(config) = config else {
                anyhow::bail!("--role publisher needs --config");
            };
            let p = fleet::publisher::Publisher {
                config,
                keep: a.keep_versions,
                poll: Duration::from_millis(poll_ms),
            };
            fleet::block_on(fleet::publisher::run(&o, &p))
        }
        Some(Role::Edge) => {
            if config.is_some() {
                anyhow::bail!("--role edge takes its config from the fleet: no --config");
            }
            let e = fleet::edge::Edge {
                pin_dir,
                state_dir: a.state_dir,
                site: a.site,
                metrics: a.metrics_listen,
            };
            fleet::block_on(fleet::edge::run(&o, &e))
        }
        None => anyhow::bail!("--store needs --role publisher or --role edge"),
    }
}

fn show<T: serde::Serialize>(json: bool, doc: &T, text: impl FnOnce(&T) -> String) -> Result<()> {
    if json {
        print_json(doc)
    } else {
        print!("{}", text(doc));
        Ok(())
    }
}

/// The pin directory's write lock for a command that changes the maps (held until the
/// command is done: its reads and writes are one step for every other writer).
fn write_lock(dir: &std::path::Path, writes: bool) -> Result<Option<WriteLock>> {
    writes.then(|| WriteLock::take(dir)).transpose()
}

fn run(cli: Cli) -> Result<()> {
    let dir = cli.pin_dir;
    match cli.cmd {
        Cmd::Attach {
            iface,
            mode,
            log_level,
        } => {
            program::attach(&dir, &iface, mode.into(), log_level as u8)?;
            println!(
                "attached to {iface} ({mode:?}); maps pinned in {}",
                dir.display()
            );
        }
        Cmd::Upgrade { object, log_level } => {
            let u = kernel::upgrade::upgrade(&dir, object.as_deref(), log_level as u8)?;
            print!("{}", print::upgraded(&u));
        }
        Cmd::Detach { iface } => {
            let last = program::detach(&dir, &iface)?;
            let unpinned = if last {
                "; program and maps unpinned"
            } else {
                ""
            };
            println!("detached from {iface}{unpinned}");
        }
        Cmd::Status { json } => show(json, &ops::status(&dir)?, print::status)?,
        Cmd::Server(c) => {
            let mut m = Maps::open(&dir)?;
            let _lock = write_lock(&dir, !matches!(c, ServerCmd::List { .. }))?;
            match c {
                ServerCmd::Add { name, ipv4, ipv6 } => {
                    ops::server_add(&mut m, &name, ipv4, ipv6)?;
                }
                ServerCmd::Del { name } => ops::server_del(&mut m, &name)?,
                ServerCmd::Set { name, up, .. } => ops::server_set(&mut m, &name, up)?,
                ServerCmd::Drain { name } => ops::server_drain(&mut m, &name, true)?,
                ServerCmd::Undrain { name } => ops::server_drain(&mut m, &name, false)?,
                ServerCmd::List { json } => show(json, &ops::servers(&m)?, print::servers)?,
            }
        }
        Cmd::Service(c) => {
            let mut m = Maps::open(&dir)?;
            let _lock = write_lock(&dir, !matches!(c, ServiceCmd::List { .. }))?;
            match c {
                ServiceCmd::Add {
                    dnsname,
                    ttl,
                    answers,
                    select,
                    rrl_rate,
                    rrl_burst,
                    rrl_slip,
                    vips,
                    mode,
                    mss,
                    encap_source,
                    dns,
                } => {
                    let rrl = rrl_rate.map(|rate| ops::RrlSettings {
                        rate,
                        burst: rrl_burst,
                        slip: rrl_slip,
                        ipv4_prefix: DEFAULT_V4_PREFIX,
                        ipv6_prefix: DEFAULT_V6_PREFIX,
                    });
                    // Checked before the service is written.
                    if let Some(r) = &rrl {
                        r.limit()?;
                    }
                    let vips = if vips.is_empty() {
                        None
                    } else {
                        Some(ops::steer::VipSettings {
                            vips: vips
                                .iter()
                                .map(|v| checked::vip(v))
                                .collect::<Result<_>>()?,
                            mode,
                            mss,
                            sources: encap_source
                                .iter()
                                .map(|p| checked::prefix(p))
                                .collect::<Result<_>>()?,
                        })
                    };
                    ops::service_add_with(
                        &mut m,
                        &dnsname,
                        ttl,
                        answers,
                        select,
                        vips.as_ref(),
                        dns,
                    )?;
                    if let Some(r) = &rrl {
                        ops::rrl_set(&mut m, &dnsname, r)?;
                    }
                    if vips.is_some() {
                        for p in ops::steer::refresh_hops(&mut m)? {
                            eprintln!("director-ctl: warning: {p}");
                        }
                    }
                }
                ServiceCmd::Del { dnsname } => ops::service_del(&mut m, &dnsname)?,
                ServiceCmd::List { json } => show(json, &ops::services(&m)?, print::services)?,
            }
        }
        Cmd::Flows(c) => {
            let m = Maps::open(&dir)?;
            match c {
                FlowsCmd::List { service, json } => show(
                    json,
                    &ops::steer::flows(&m, service.as_deref())?,
                    print::flows,
                )?,
                FlowsCmd::Stats { json } => {
                    show(json, &ops::steer::flow_stats(&m)?, print::flow_stats)?;
                }
            }
        }
        Cmd::Route(c) => {
            let mut m = Maps::open(&dir)?;
            let _lock = write_lock(&dir, !matches!(c, RouteCmd::List { .. }))?;
            match c {
                RouteCmd::Set {
                    dnsname,
                    prefix,
                    servers,
                } => {
                    // Both arguments are checked before the service is looked up.
                    let prefix = checked::prefix(&prefix)?;
                    let servers = text::server_list(&servers)?;
                    ops::route_set(&mut m, &dnsname, prefix, &servers)?;
                }
                RouteCmd::Del { dnsname, prefix } => {
                    ops::route_del(&mut m, &dnsname, checked::prefix(&prefix)?)?;
                }
                RouteCmd::List { dnsname, json } => {
                    show(json, &ops::routes(&m, dnsname.as_deref())?, print::routes)?;
                }
            }
        }
        Cmd::Rrl(c) => {
            let mut m = Maps::open(&dir)?;
            let writes = !matches!(c, RrlCmd::Exempt(ExemptCmd::List { .. }));
            let _lock = write_lock(&dir, writes)?;
            match c {
                RrlCmd::Set {
                    dnsname,
                    rate,
                    burst,
                    slip,
                    ipv4_prefix,
                    ipv6_prefix,
                } => {
                    let r = ops::RrlSettings {
                        rate,
                        burst,
                        slip,
                        ipv4_prefix,
                        ipv6_prefix,
                    };
                    ops::rrl_set(&mut m, &dnsname, &r)?;
                }
                RrlCmd::Exempt(ExemptCmd::Add { prefix }) => {
                    ops::rrl_exempt(&mut m, checked::prefix(&prefix)?, true)?;
                }
                RrlCmd::Exempt(ExemptCmd::Del { prefix }) => {
                    ops::rrl_exempt(&mut m, checked::prefix(&prefix)?, false)?;
                }
                RrlCmd::Exempt(ExemptCmd::List { json }) => {
                    show(json, &ops::rrl_exempt_list(&m)?, print::rrl_exempt)?;
                }
            }
        }
        Cmd::Address(c) => {
            let mut m = Maps::open(&dir)?;
            let _lock = write_lock(&dir, !matches!(c, AddressCmd::List { .. }))?;
            match c {
                AddressCmd::Add { address } => {
                    ops::address_set(&mut m, checked::address(&address)?, true)?;
                }
                AddressCmd::Del { address } => {
                    ops::address_set(&mut m, checked::address(&address)?, false)?;
                }
                AddressCmd::Refresh => ops::address_refresh(&mut m)?,
                AddressCmd::List { json } => {
                    show(json, &ops::addresses(&m)?, print::addresses)?;
                }
            }
        }
        Cmd::Nexthop {
            address,
            wait_ms,
            json,
        } => {
            let hop = ops::steer::nexthop(address, Duration::from_millis(wait_ms))?;
            show(json, &hop, print::nexthop)?;
        }
        Cmd::Stats { json } => show(json, &ops::stats(&Maps::open(&dir)?)?, print::stats)?,
        Cmd::VethPeer { iface, detach } => {
            if detach {
                program::detach_pass(&dir, &iface)?;
            } else {
                program::attach_pass(&dir, &iface)?;
            }
        }
        Cmd::Ceiling { iface, detach } => {
            let helper = program::Helper::Turnaround;
            if detach {
                program::detach_helper(&dir, &iface, helper)?;
            } else {
                program::attach_helper(&dir, &iface, helper)?;
            }
        }
        Cmd::Decap(c) => {
            let helper = program::Helper::Decap;
            match c {
                DecapCmd::Attach { iface, mode } => {
                    program::attach_helper_mode(&dir, &iface, helper, mode.into())?;
                    println!("decapsulator attached to {iface} ({mode:?})");
                }
                DecapCmd::Detach { iface } => {
                    program::detach_helper(&dir, &iface, helper)?;
                    println!("decapsulator detached from {iface}");
                }
            }
        }
        Cmd::Log => kernel::log::follow(&dir)?,
        Cmd::Run {
            config,
            fleet,
            iface,
            mode,
            poll_ms,
            json,
            settle_ms,
            max_removal_share,
            accept_removal,
        } => {
            if let Some(iface) = iface {
                if !program::attached(&dir)?.contains(&iface) {
                    program::attach(&dir, &iface, mode.into(), 0)?;
                }
            }
            let log = if json {
                crate::api::Log::Json
            } else {
                crate::api::Log::Text
            };
            let options = controller::run::Options {
                poll: Duration::from_millis(poll_ms),
                settle: Duration::from_millis(settle_ms),
                max_removal_share,
                accept_removal,
                log,
            };
            match fleet.store.clone() {
                Some(store) => run_fleet(store, fleet, config, dir, poll_ms, log)?,
                None => {
                    // clap requires --config without --store.
                    let config = config.unwrap_or_default();
                    controller::run::run(&config, &dir, &options)?;
                }
            }
        }
        Cmd::Fleet(FleetCmd::Status {
            store,
            common,
            json,
        }) => {
            let s = fleet::block_on(fleet::status::status(&store, &common.fleet))?;
            show(json, &s, print::fleet_status)?;
        }
        Cmd::Zone(c) => zone(c)?,
        Cmd::Serve { zones } => crate::dns::serve(&dir, &zones)?,
        Cmd::Agent {
            site,
            cgroup,
            observe,
            max_pending,
            listen,
            window_s,
            drain_ms,
            min_samples,
            max_prefixes,
            retain_s,
            store,
            fleet,
            name,
            probe_rate,
            probe_timeout_ms,
        } => crate::agent::run(&crate::agent::Options {
            site,
            cgroup,
            observe,
            max_pending,
            listen,
            window_s,
            drain_ms,
            min_samples,
            max_prefixes,
            retain_s,
            store: store.map(|url| crate::agent::store::Target {
                url,
                fleet: fleet.fleet,
                name: name.unwrap_or_else(host_name),
            }),
            probe_rate,
            probe_timeout_ms,
        })?,
        Cmd::Completions { shell } => {
            generate::completions(Cli::command(), shell, &mut std::io::stdout())?;
        }
        Cmd::Man { dir: out } => {
            let n = generate::man_pages(Cli::command(), &out)?;
            println!("{n} man pages written to {}", out.display());
        }
        Cmd::Check { config, json } => {
            let report = controller::check(&config)?;
            show(json, &report, |r| print::check(&config, r))?;
        }
        Cmd::Explain {
            config,
            run,
            service,
            client,
            json,
        } => {
            let e = match (config, run) {
                (Some(config), _) => controller::explain(&config, &service, client)?,
                (None, Some(addr)) => {
                    controller::live::agents::explain_from(addr, &service, client)?
                }
                (None, None) => anyhow::bail!("give --config or --run"),
            };
            show(json, &e, print::explain)?;
        }
        Cmd::Demand { run, service, json } => {
            let mut d: crate::api::Demand = controller::live::agents::ask_run(run, "/demand")?;
            if let Some(s) = &service {
                let want = s.trim_end_matches('.');
                if !d
                    .services
                    .iter()
                    .any(|x| x.service.trim_end_matches('.') == want)
                {
                    anyhow::bail!("run at {run} has no service {s:?}");
                }
                d.services
                    .retain(|x| x.service.trim_end_matches('.') == want);
                d.prefixes
                    .retain(|x| x.service.trim_end_matches('.') == want);
                d.replicas
                    .retain(|x| x.service.trim_end_matches('.') == want);
            }
            show(json, &d, print::demand)?;
        }
        Cmd::Impact {
            config,
            run,
            top,
            json,
        } => {
            let text = controller::config::Config::candidate_text(&config)?;
            let i: crate::api::Impact = controller::live::agents::post_run(
                run,
                &format!("/impact?top={top}"),
                text.as_bytes(),
            )?;
            show(json, &i, print::impact)?;
        }
    }
    Ok(())
}

/// The `director-ctl` binary: parse, run, and on failure print one line and exit non-zero.
pub fn main() {
    // Rust ignores SIGPIPE, so printing into a closed pipe (`director-ctl route list | head`)
    // fails, and println! panics. The default action ends the process quietly, as it does
    // for every other Unix filter.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            // One line naming the problem, like every other refusal: clap's first
            // paragraph, whose later lines may be what it names (missing arguments).
            let text = e.to_string();
            let first: Vec<&str> = text
                .lines()
                .take_while(|l| !l.trim().is_empty())
                .map(str::trim)
                .collect();
            eprintln!(
                "director-ctl: {}",
                first.join(" ").trim_start_matches("error: ")
            );
            std::process::exit(2);
        }
    };
    if matches!(cli.cmd, Cmd::Run { .. } | Cmd::Agent { .. }) {
        // `run` is a daemon: a reader of its log going away is no reason to die by signal.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    }
    if let Err(e) = run(cli) {
        eprintln!("director-ctl: {e:#}");
        std::process::exit(1);
    }
}
