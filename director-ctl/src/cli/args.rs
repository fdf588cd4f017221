//! The command line's arguments: every command, subcommand and option, as clap derives
//! them. The doc comments are the text of `--help` and of the man pages (`generate`), so
//! every subcommand has one (a test below walks the tree).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use director_common::{
    maps::PIN_DIR,
    rrl::{DEFAULT_V4_PREFIX, DEFAULT_V6_PREFIX},
    select::Mode,
    steer::Forward,
};

use crate::kernel::program;
use crate::rrl::DEFAULT_SLIP;

/// director: answers DNS for the names it owns from an XDP program, with the best server
/// for each client prefix.
#[derive(Parser)]
#[command(name = "director-ctl", version)]
pub struct Cli {
    /// bpffs directory where the program, its links and its maps are pinned.
    #[arg(long, global = true, env = "DIRECTOR_PIN_DIR", default_value = PIN_DIR)]
    pub(super) pin_dir: PathBuf,
    #[command(subcommand)]
    pub(super) cmd: Cmd,
}

#[derive(Subcommand)]
pub(super) enum Cmd {
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
        #[command(flatten)]
        web: super::web::WebClientArgs,
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
        #[command(flatten)]
        web: super::web::WebClientArgs,
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
        #[command(flatten)]
        web: super::web::WebClientArgs,
        /// How many of the prefixes that move the most to list.
        #[arg(long, default_value_t = 20)]
        top: usize,
        #[arg(long)]
        json: bool,
    },
    /// Print the XDP program's log (needs `attach --log-level debug|info`) until Ctrl-C.
    Log,
    /// The HTTP listeners' credentials (`[web]`, `--web-config`): make a password's hash.
    #[command(subcommand)]
    Web(super::web::WebCmd),
    /// The zones director answers in full: `[[zone]]` in `run`'s config, or a zones file
    /// for `serve`.
    #[command(subcommand)]
    Zone(ZoneCmd),
    /// DNSSEC for the zones: keys, the DS for the parent, every signed RRset.
    #[command(subcommand)]
    Dnssec(DnssecCmd),
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
        /// Where `GET /rtt` and `POST /probe` are served: ADDR:PORT, or PORT alone for
        /// 127.0.0.1:PORT. Beyond loopback only with --web-config giving TLS and a client
        /// CA or bearer tokens.
        #[arg(long, default_value = "127.0.0.1:9470", value_parser = listen_addr)]
        listen: std::net::SocketAddr,
        /// TLS and credentials for --listen: a file with the keys of `[web]`
        /// (docs/config.md): tls_cert, tls_key, and client_ca (mutual TLS) or
        /// bearer_tokens.
        #[arg(long, value_name = "FILE")]
        web_config: Option<PathBuf>,
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
        /// Only global unicast /24s and /48s are probed; a lab may let this prefix be
        /// probed too although it is private or documentation space (repeat for more; never
        /// loopback, multicast or a wider unit). Off by default.
        #[arg(long, value_name = "PREFIX")]
        probe_allow: Vec<ipnet::IpNet>,
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
pub(super) enum ZoneCmd {
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

#[derive(Subcommand)]
pub(super) enum DnssecCmd {
    /// Make a zone's key (ECDSA P-256, algorithm 13, flags 257): writes
    /// K<zone>.+013+<tag>.private (mode 0600; name it in `[[zone]] dnssec.keys`) and .key
    /// (its DNSKEY) into DIR, and prints the DS for the parent.
    Keygen {
        /// The zone's origin.
        #[arg(long)]
        zone: String,
        /// Where the key files go.
        #[arg(long, default_value = ".")]
        dir: PathBuf,
    },
    /// Print the DS records (SHA-256) the parent publishes for each signed zone's keys.
    Ds {
        /// A config or zones file.
        #[arg(long)]
        config: PathBuf,
        /// Only this zone.
        #[arg(long)]
        zone: Option<String>,
    },
    /// Print every RRset a signed zone serves with its signatures, as a zone file
    /// (kzonecheck and ldns-verify-zone read it): SOA, NS, glue, records, DNSKEY, CDS,
    /// CDNSKEY and the NSEC chain.
    Dump {
        /// A config or zones file.
        #[arg(long)]
        config: PathBuf,
        /// Only this zone.
        #[arg(long)]
        zone: Option<String>,
    },
}

/// `run` in a fleet (see docs/fleet.md); without `--store` run works alone.
#[derive(clap::Args, Debug)]
pub(super) struct FleetArgs {
    /// The fleet's store: etcd://HOST:PORT[,HOST:PORT...].
    #[arg(long)]
    pub(super) store: Option<String>,
    /// publisher: compile and publish (one leads at a time); edge: answer from the fleet.
    #[arg(long, value_enum, requires = "store")]
    pub(super) role: Option<Role>,
    #[command(flatten)]
    pub(super) common: FleetCommon,
    /// This process's name in the fleet (default: the host's name).
    #[arg(long)]
    pub(super) name: Option<String>,
    /// Edge: its site, for spreading a server's observers over sites.
    #[arg(long, default_value = "default")]
    pub(super) site: String,
    /// Edge: where its copy of the current version is kept.
    #[arg(long, default_value = "/var/lib/director/fleet")]
    pub(super) state_dir: PathBuf,
    /// Edge: serve Prometheus text (GET /metrics) here: ADDR:PORT, or PORT alone for
    /// 127.0.0.1:PORT; the flag alone: 127.0.0.1:9273. Credentials and TLS: --web-config.
    #[arg(long, value_name = "ADDR:PORT", num_args = 0..=1, default_missing_value = "127.0.0.1:9273", value_parser = listen_addr)]
    pub(super) metrics_listen: Option<std::net::SocketAddr>,
    /// Edge: TLS and credentials for --metrics-listen, a file with the keys of `[web]`
    /// (docs/config.md); publishers and `run` take `[web]` from their config.
    #[arg(long, value_name = "FILE")]
    pub(super) web_config: Option<PathBuf>,
    /// Seconds a lease outlives its holder (leadership, liveness, votes).
    #[arg(long, default_value_t = 3)]
    pub(super) lease_seconds: i64,
    /// Publisher: versions kept in the store, the current one included (at least 3).
    #[arg(long, default_value_t = 3)]
    pub(super) keep_versions: u64,
    /// Observers per server.
    #[arg(long, default_value_t = 3)]
    pub(super) observers: usize,
    /// Down votes that take a server out (default: a majority of its observers).
    #[arg(long)]
    pub(super) quorum: Option<usize>,
    #[command(flatten)]
    pub(super) signing: Signing,
}

/// Who signs what edges take, and whom edges believe (docs/fleet.md, "Signed versions").
#[derive(clap::Args, Debug)]
pub(super) struct Signing {
    /// Publisher: the private key (PEM; `director-ctl fleet keygen`) that signs every
    /// version and overlay. Read again when the file changes.
    #[arg(long, value_name = "FILE")]
    pub(super) sign_key: Option<PathBuf>,
    /// Edge: the publishers' public keys, one `ed25519 <base64> <name>` a line, given out
    /// of band (never read from the store). Read again when the file changes.
    #[arg(long, value_name = "FILE")]
    pub(super) trust: Option<PathBuf>,
    /// Labs only: a publisher signs nothing, an edge takes versions and overlays nobody
    /// signed (anyone who can write to the store decides its answers).
    #[arg(long, conflicts_with_all = ["sign_key", "trust"])]
    pub(super) insecure_unsigned: bool,
}

/// A listener's address: ADDR:PORT, or PORT alone for loopback (127.0.0.1:PORT).
pub(super) fn listen_addr(s: &str) -> Result<std::net::SocketAddr, String> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(std::net::SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port));
    }
    s.parse()
        .map_err(|_| format!("{s:?}: give ADDR:PORT ([ADDR]:PORT for IPv6) or a port alone"))
}

/// What names a fleet in the store.
#[derive(clap::Args, Debug)]
pub(super) struct FleetCommon {
    /// The fleet's key prefix: several fleets can share one etcd cluster.
    #[arg(long = "fleet", default_value = "director")]
    pub(super) fleet: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(super) enum Role {
    Publisher,
    Edge,
}

#[derive(Subcommand)]
pub(super) enum FleetCmd {
    /// Every edge, its version and age; the leader, versions kept and the store's size.
    Status {
        #[arg(long)]
        store: String,
        #[command(flatten)]
        common: FleetCommon,
        #[arg(long)]
        json: bool,
    },
    /// Make a publisher's signing key: the private key in FILE (mode 0600, never
    /// overwritten) and its trust file line in FILE.pub, also printed, for the edges'
    /// --trust files.
    Keygen {
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        /// The name on the key's line (default: FILE's stem).
        #[arg(long)]
        name: Option<String>,
    },
    /// Print the trust file line of a private key (one made with `openssl genpkey
    /// -algorithm ed25519`, or whose .pub was lost).
    Pubkey {
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
        /// The name on the line (default: FILE's stem).
        #[arg(long)]
        name: Option<String>,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub(super) enum AttachMode {
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
pub(super) enum LogLevel {
    Off,
    Error,
    Warn,
    Info,
    Debug,
}

#[derive(Subcommand)]
pub(super) enum ServerCmd {
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
    /// List the servers: their addresses and state (up, down or drained).
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
pub(super) enum ServiceCmd {
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
    /// Stop answering for a DNS name: the service and its routes are deleted.
    Del { dnsname: String },
    /// List the owned DNS names: TTL, answers, selection, rate limit and VIPs.
    List {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
pub(super) enum DecapCmd {
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
pub(super) enum FlowsCmd {
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
pub(super) enum RrlCmd {
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
pub(super) enum ExemptCmd {
    /// Never limit queries from PREFIX.
    Add { prefix: String },
    /// Limit queries from PREFIX again (it must be exempt).
    Del { prefix: String },
    /// List the exempt source prefixes.
    List {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
pub(super) enum RouteCmd {
    /// Give clients in PREFIX these servers: SERVER[=WEIGHT],... share answers by weight;
    /// servers after a '|' are fallbacks, in order (e.g. "fra-1=2,ams-1|nyc-1").
    Set {
        dnsname: String,
        prefix: String,
        servers: String,
    },
    /// Delete a service's route for the clients in PREFIX.
    Del { dnsname: String, prefix: String },
    /// List the routes (client prefix, servers and fallbacks) of every service, or of
    /// DNSNAME.
    List {
        dnsname: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
pub(super) enum AddressCmd {
    /// Answer queries sent to ADDR too (an address routed to this host but not on it).
    Add { address: String },
    /// Stop answering on an address added with `add` (the host's own stay).
    Del { address: String },
    /// Read the host's addresses again (what `run` does at every poll).
    Refresh,
    /// List the addresses queries are answered on: the host's own and the added ones.
    List {
        #[arg(long)]
        json: bool,
    },
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    /// The path (`director-ctl server list`) of every command under `cmd`, at any depth,
    /// that has no about: its `--help` line and its man page's NAME would be empty.
    fn without_about(cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
        for sub in cmd.get_subcommands() {
            let path = format!("{path} {}", sub.get_name());
            if sub
                .get_about()
                .is_none_or(|a| a.to_string().trim().is_empty())
            {
                out.push(path.clone());
            }
            without_about(sub, &path, out);
        }
    }

    #[test]
    fn every_subcommand_has_help_text() {
        let cli = Cli::command();
        assert!(cli.get_about().is_some(), "director-ctl has no about");
        let mut missing = Vec::new();
        without_about(&cli, "director-ctl", &mut missing);
        assert!(
            missing.is_empty(),
            "subcommands without help text (give each a doc comment):\n{}",
            missing.join("\n")
        );
    }
}
