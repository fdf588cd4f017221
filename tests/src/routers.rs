//! A lab of real BGP routers that send BMP (RFC 7854) to a collector the caller runs.
//!
//! ```text
//!   injector netns i (GoBGP)            router netns (FRR bgpd -M bmp, or GoBGP)     caller's netns
//!   <inj_if i> 203.0.113.(4i+2)/30 <-veth-> <rtr_if i> 203.0.113.(4i+1)/30
//!              2001:db8:ff0i::2/64                     2001:db8:ff0i::1/64
//!   AS INJECTOR_AS[i]                     AS ROUTER_AS
//!                                         <bmp_if> ROUTER_BMP_V4/V6 (n) <-veth-> <coll_if> collector
//! ```
//!
//! Each injector is a gobgpd that originates routes (the gobgp CLI on its gRPC port, inside
//! its namespace, adds and withdraws them, or loads an MRT file); the router peers with every
//! injector over eBGP and reports to the collector over BMP. [`RouterLab::start`] builds it
//! all and waits until every BGP session is established; `Drop` stops the daemons (by pid)
//! and deletes the namespaces, also when a test panics.
//!
//! Names: every namespace is `rl-<pid>-<tag><n>-<role>` and every interface `rl<pid%10000>x<n>…`
//! (`n` counts labs in this process), so labs of parallel tests and processes never meet. A
//! process killed before its labs dropped leaves namespaces with daemons in them: the first
//! lab of a later process kills those daemons (by pid, `ip netns pids`) and deletes them.
//!
//! The router's end of the collector link gets its own host address (unique per lab in this
//! process), so several labs can report to one collector namespace. If the collector's
//! address is not in that namespace yet, the lab adds it to its end of the link (and it goes
//! with the lab): a collector that starts before the lab should have it already (e.g. on
//! `lo`), or listen on the wildcard address.
//!
//! FRR quirks this harness works around or that tests should expect (FRR 8.4): without
//! `soft-reconfiguration inbound` FRR's pre-policy dump is empty; it prepends its own AS to
//! the AS path in route monitoring (pre-policy too). GoBGP sends no End-of-RIB after its dump.
//!
//! IPv6 prefixes ride the IPv4 sessions (both address families are active; the next hop is
//! the injector's IPv6 link address). FRR takes them and reports them over BMP (a standard
//! MP_REACH_NLRI, seen on the wire), but no test asserts them yet: in router_lab's reader
//! the bgpkit-parsed update had no elements, which is still to be explained.

use std::{
    collections::HashSet,
    fs,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener},
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    sync::{
        atomic::{AtomicUsize, Ordering},
        Once,
    },
    thread::sleep,
    time::{Duration, Instant},
};

use crate::{
    netns::{describe, nsenter, run},
    pins,
    tempdir::TempDir,
};

/// Prefix of every namespace and temp directory a router lab makes.
pub const PREFIX: &str = "rl";
/// The router's AS (FRR or GoBGP).
pub const ROUTER_AS: u32 = 65001;
/// Injector `i`'s AS.
pub const INJECTOR_AS: [u32; 2] = [65010, 65020];
/// The BGP port every daemon uses (each in its own namespace).
const BGP_PORT: u16 = 179;
/// gobgpd's gRPC port, on 127.0.0.1 of its namespace.
const GRPC_PORT: u16 = 50051;
/// How long daemons may take to start and sessions to come up.
const START_WITHIN: Duration = Duration::from_secs(20);
/// Lines of a daemon's log a failure message shows.
const LOG_TAIL: usize = 30;

static NEXT_LAB: AtomicUsize = AtomicUsize::new(0);

/// Injector `i`'s address on its link with the router.
pub fn injector_v4(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(203, 0, 113, 4 * i as u8 + 2)
}

/// The router's address on injector `i`'s link (its BGP router id is `router_v4(0)`).
pub fn router_v4(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(203, 0, 113, 4 * i as u8 + 1)
}

/// Injector `i`'s IPv6 address on its link (the next hop of IPv6 routes it announces).
pub fn injector_v6(i: usize) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, 0xff00 + i as u16, 0, 0, 0, 0, 2)
}

fn router_v6(i: usize) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, 0xff00 + i as u16, 0, 0, 0, 0, 1)
}

/// The router's source address towards an IPv4 collector in lab `n`: 203.0.113.128/25
/// (host addresses, so labs of one process differ within one collector namespace).
fn router_bmp_v4(n: usize) -> Ipv4Addr {
    Ipv4Addr::new(203, 0, 113, 129 + (n % 126) as u8)
}

fn router_bmp_v6(n: usize) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 1 + n as u16)
}

/// Which BGP daemon is the router.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouterKind {
    /// FRR bgpd with its BMP module, no zebra.
    Frr,
    /// gobgpd with a `[[bmp-servers]]` entry.
    Gobgp,
}

/// Which Adj-RIB-In views the router monitors over BMP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BmpPolicy {
    Pre,
    Post,
    Both,
}

/// How [`RouterLab::start_with`] builds the lab.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub kind: RouterKind,
    /// Injectors (BGP peers of the router): 1 or 2.
    pub peers: usize,
    pub policy: BmpPolicy,
}

impl Options {
    /// One injector, pre-policy monitoring.
    pub fn new(kind: RouterKind) -> Options {
        Options {
            kind,
            peers: 1,
            policy: BmpPolicy::Pre,
        }
    }
}

/// What [`RouterLab::inject_mrt`] loaded and how long it took.
#[derive(Debug, Clone, Copy)]
pub struct Injected {
    /// Distinct prefixes written for the injector (at most the limit).
    pub routes: usize,
    /// Reading and converting the MRT file.
    pub convert: Duration,
    /// How long `gobgp mrt inject` ran (it returns once the injector's RIB has them all).
    pub inject: Duration,
    /// From the start of `gobgp mrt inject` until the router counts them all as received.
    pub converged: Duration,
}

/// A daemon this lab started, with its log (all its lives, appended).
struct Daemon {
    child: Option<Child>,
    log: PathBuf,
    what: String,
}

impl Daemon {
    fn new(what: String, log: PathBuf) -> Daemon {
        Daemon {
            child: None,
            log,
            what,
        }
    }

    /// Starts `program args` in `ns`; nsenter execs it, so the child's pid is the daemon's.
    fn spawn(&mut self, ns: &str, program: &str, args: &[String]) {
        assert!(self.child.is_none(), "{} already runs", self.what);
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap_or_else(|e| panic!("opening {}: {e}", self.log.display()));
        let child = nsenter(ns, program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("cloning a log handle"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", self.what));
        self.child = Some(child);
    }

    /// SIGTERM (bgpd and gobgpd close their sessions with a NOTIFICATION), SIGKILL after 3 s.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            crate::netns::stop_child(&mut child, Duration::from_secs(3));
        }
    }

    /// SIGKILL: the sessions end without a word (the kernel still closes the sockets).
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Panics with the log's tail if the daemon has exited.
    fn assert_alive(&mut self) {
        if let Some(child) = self.child.as_mut() {
            if let Ok(Some(st)) = child.try_wait() {
                self.child = None;
                panic!("{} exited ({st})\n{}", self.what, self.tail());
            }
        }
    }

    fn tail(&self) -> String {
        format!("--- {} log tail\n{}", self.what, tail(&self.log, LOG_TAIL))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The last `lines` lines of a file (empty if it cannot be read).
fn tail(path: &Path, lines: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// One injector: a gobgpd in a namespace of its own.
struct Injector {
    ns: String,
    daemon: Daemon,
    conf: PathBuf,
}

/// Routers, injectors and their links; see the module docs.
pub struct RouterLab {
    pub kind: RouterKind,
    /// The router's namespace.
    pub router_ns: String,
    /// The caller's namespace, where the collector runs.
    pub collector_ns: String,
    pub collector: SocketAddr,
    /// The router's source address for BMP (its end of the collector link).
    pub router_bmp_addr: IpAddr,
    /// The router's end of the collector link (in `router_ns`) and the caller's end.
    bmp_if: String,
    coll_if: String,
    /// `(injector end, router end)` of each injector's link.
    links: Vec<(String, String)>,
    policy: BmpPolicy,
    injectors: Vec<Injector>,
    router: Daemon,
    router_conf: PathBuf,
    /// Configs, logs, pid file, vty sockets, converted MRT files. Removed after the daemons.
    dir: TempDir,
}

impl RouterLab {
    /// A lab of `kind` with one injector, reporting pre-policy routes to
    /// `collector_addr:port` in `collector_ns`; returns once the BGP session is established
    /// (the BMP session comes up whenever the collector listens).
    pub fn start(
        tag: &str,
        collector_ns: &str,
        collector_addr: IpAddr,
        port: u16,
        kind: RouterKind,
    ) -> RouterLab {
        RouterLab::start_with(
            tag,
            collector_ns,
            SocketAddr::new(collector_addr, port),
            Options::new(kind),
        )
    }

    /// Like [`RouterLab::start`], with more choices (peers, monitored views).
    pub fn start_with(
        tag: &str,
        collector_ns: &str,
        collector: SocketAddr,
        opts: Options,
    ) -> RouterLab {
        assert!(
            (1..=INJECTOR_AS.len()).contains(&opts.peers),
            "a router lab has 1 or 2 peers, not {}",
            opts.peers
        );
        assert!(
            tag.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
            "tag {tag:?}: letters, digits and '-' only"
        );
        sweep_stale();
        let n = NEXT_LAB.fetch_add(1, Ordering::Relaxed);
        let id = format!("{tag}{n}");
        let ifbase = format!("{PREFIX}{}x{n}", std::process::id() % 10000);
        let dir = TempDir::new(PREFIX, &id);
        let router_bmp_addr = match collector {
            SocketAddr::V4(_) => IpAddr::V4(router_bmp_v4(n)),
            SocketAddr::V6(_) => IpAddr::V6(router_bmp_v6(n)),
        };
        // The lab exists before the first command, so a failing setup is still cleaned up.
        let mut lab = RouterLab {
            kind: opts.kind,
            router_ns: pins::name(PREFIX, format!("{id}-rtr")),
            collector_ns: collector_ns.to_string(),
            collector,
            router_bmp_addr,
            bmp_if: format!("{ifbase}b"),
            coll_if: format!("{ifbase}c"),
            links: (0..opts.peers)
                .map(|i| (format!("{ifbase}i{i}"), format!("{ifbase}r{i}")))
                .collect(),
            policy: opts.policy,
            injectors: (0..opts.peers)
                .map(|i| Injector {
                    ns: pins::name(PREFIX, format!("{id}-inj{i}")),
                    daemon: Daemon::new(
                        format!("injector {i} (gobgpd)"),
                        dir.path(&format!("inj{i}.log")),
                    ),
                    conf: dir.path(&format!("inj{i}.toml")),
                })
                .collect(),
            router: Daemon::new(format!("router ({:?})", opts.kind), dir.path("router.log")),
            router_conf: dir.path(match opts.kind {
                RouterKind::Frr => "bgpd.conf",
                RouterKind::Gobgp => "router.toml",
            }),
            dir,
        };
        lab.setup_network();
        for i in 0..lab.injectors.len() {
            lab.start_injector(i);
        }
        lab.write_router_config();
        lab.spawn_router();
        lab.wait_established(START_WITHIN);
        lab
    }

    // -----------------------------------------------------------------------------------
    // Network

    fn setup_network(&self) {
        for ns in self.namespaces() {
            ip(&["netns", "add", &ns]);
            // No duplicate address detection: nothing else can claim these addresses, and
            // tentative ones cannot be bound.
            for conf in ["all", "default"] {
                run_ok(nsenter(&ns, "sysctl").args([
                    "-q",
                    "-w",
                    &format!("net.ipv6.conf.{conf}.accept_dad=0"),
                ]));
            }
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
        }
        let rtr = self.router_ns.as_str();
        for (i, (inj_if, rtr_if)) in self.links.iter().enumerate() {
            let inj = self.injectors[i].ns.as_str();
            veth(inj, inj_if, rtr, rtr_if);
            for (ns, ifname, v4, v6) in [
                (inj, inj_if, injector_v4(i), injector_v6(i)),
                (rtr, rtr_if, router_v4(i), router_v6(i)),
            ] {
                ip(&["-n", ns, "addr", "add", &format!("{v4}/30"), "dev", ifname]);
                ip(&[
                    "-n",
                    ns,
                    "addr",
                    "add",
                    &format!("{v6}/64"),
                    "dev",
                    ifname,
                    "nodad",
                ]);
                ip(&["-n", ns, "link", "set", ifname, "up"]);
            }
        }
        // The collector link: host addresses and a host route on each end, so nothing else
        // in the caller's namespace (its own links, other labs) is routed through it.
        let coll = self.collector_ns.as_str();
        veth(rtr, &self.bmp_if, coll, &self.coll_if);
        let (caddr, raddr) = (self.collector.ip(), self.router_bmp_addr);
        let host = if caddr.is_ipv4() { 32 } else { 128 };
        let family = if caddr.is_ipv4() { "-4" } else { "-6" };
        add_address(rtr, &self.bmp_if, raddr, host);
        ip(&["-n", rtr, "link", "set", &self.bmp_if, "up"]);
        if !has_address(coll, caddr) {
            add_address(coll, &self.coll_if, caddr, host);
        }
        ip(&["-n", coll, "link", "set", &self.coll_if, "up"]);
        let r = format!("{raddr}/{host}");
        self.route_to_collector();
        ip(&["-n", coll, family, "route", "add", &r, "dev", &self.coll_if]);
        let mut ends: Vec<(&str, &str)> = vec![(rtr, &self.bmp_if), (coll, &self.coll_if)];
        for (i, (inj_if, rtr_if)) in self.links.iter().enumerate() {
            ends.push((&self.injectors[i].ns, inj_if));
            ends.push((rtr, rtr_if));
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ends.iter().all(|(ns, ifname)| has_carrier(ns, ifname)) {
            assert!(
                Instant::now() < deadline,
                "router lab {}: links without carrier after 10 s: {ends:?}",
                self.router_ns
            );
            sleep(Duration::from_millis(20));
        }
    }

    /// The router's host route to the collector, from its own address on the link.
    fn route_to_collector(&self) {
        let (caddr, raddr) = (self.collector.ip(), self.router_bmp_addr);
        let (family, host) = if caddr.is_ipv4() {
            ("-4", 32)
        } else {
            ("-6", 128)
        };
        ip(&[
            "-n",
            &self.router_ns,
            family,
            "route",
            "replace",
            &format!("{caddr}/{host}"),
            "dev",
            &self.bmp_if,
            "src",
            &raddr.to_string(),
        ]);
    }

    /// Every namespace this lab made (not the caller's).
    fn namespaces(&self) -> Vec<String> {
        let mut v = vec![self.router_ns.clone()];
        v.extend(self.injectors.iter().map(|i| i.ns.clone()));
        v
    }

    /// Cuts the collector link (the router's end goes down) and aborts the router's BMP
    /// sockets, so that it reconnects (every 0.1–1 s for FRR) once [`RouterLab::bmp_up`]
    /// restores the link; the collector gets nothing, as after a real cut: its end of the
    /// old session stays open until it times it out. The BGP sessions stay up.
    pub fn bmp_down(&self) {
        ip(&["-n", &self.router_ns, "link", "set", &self.bmp_if, "down"]);
        self.kill_bmp_sockets();
    }

    /// Restores the link [`RouterLab::bmp_down`] cut; the router reconnects by itself.
    pub fn bmp_up(&self) {
        ip(&["-n", &self.router_ns, "link", "set", &self.bmp_if, "up"]);
        // The kernel dropped the route with the link.
        self.route_to_collector();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !has_carrier(&self.router_ns, &self.bmp_if) {
            assert!(
                Instant::now() < deadline,
                "{} has no carrier after 10 s",
                self.bmp_if
            );
            sleep(Duration::from_millis(20));
        }
    }

    /// Aborts the router's BMP sessions with a TCP reset the collector sees (link up); the
    /// router reconnects and sends a fresh Initiation, peer ups and dump.
    pub fn bmp_reset(&self) {
        self.kill_bmp_sockets();
    }

    fn kill_bmp_sockets(&self) {
        // ss -K destroys matching sockets (SOCK_DESTROY); the owner sees an error.
        let port = self.collector.port().to_string();
        run_ok(nsenter(&self.router_ns, "ss").args([
            "-K",
            "-t",
            "dst",
            &self.collector.ip().to_string(),
            "dport",
            "=",
            &port,
        ]));
    }

    /// FRR only: reports to `also` as well, a second collector in the caller's namespace
    /// (a fleet's second publisher: BMP has one collector per session, so a router sends
    /// to each), as a second `bmp connect` of the same targets. The caller gives `also`'s
    /// address to its namespace first. Returns once that session is established, or
    /// panics with the router's log after `within`.
    pub fn also_report_to(&mut self, also: SocketAddr, within: Duration) {
        let host = if also.is_ipv4() { 32 } else { 128 };
        ip(&[
            "-n",
            &self.router_ns,
            "route",
            "replace",
            &format!("{}/{host}", also.ip()),
            "dev",
            &self.bmp_if,
            "src",
            &self.router_bmp_addr.to_string(),
        ]);
        assert_eq!(self.kind, RouterKind::Frr, "a second target is FRR's");
        let out = run(Command::new("vtysh")
            .arg("--vty_socket")
            .arg(self.dir.path("vty"))
            .args(["-d", "bgpd"])
            .args(["-c", "configure terminal"])
            .args(["-c", &format!("router bgp {ROUTER_AS}")])
            .args(["-c", "bmp targets collector"])
            .args([
                "-c",
                &format!(
                    "bmp connect {} port {} min-retry 100 max-retry 1000",
                    also.ip(),
                    also.port()
                ),
            ]));
        assert!(
            out.status.success(),
            "adding a BMP target: {}",
            describe(&out)
        );
        let deadline = Instant::now() + within;
        while !self.connected_to(also) {
            self.router.assert_alive();
            assert!(
                Instant::now() < deadline,
                "router's BMP session to {also} not up within {within:?}\n{}",
                self.router.tail()
            );
            sleep(Duration::from_millis(20));
        }
    }

    /// Whether the router has an established TCP session to the collector.
    pub fn bmp_connected(&self) -> bool {
        self.connected_to(self.collector)
    }

    fn connected_to(&self, collector: SocketAddr) -> bool {
        let out = run_ok(nsenter(&self.router_ns, "ss").args([
            "-H",
            "-t",
            "-n",
            "state",
            "established",
            "dst",
            &collector.ip().to_string(),
            "dport",
            "=",
            &collector.port().to_string(),
        ]));
        !String::from_utf8_lossy(&out.stdout).trim().is_empty()
    }

    /// Waits until [`RouterLab::bmp_connected`]; panics with the router's log after `within`.
    pub fn wait_bmp_connected(&mut self, within: Duration) {
        let deadline = Instant::now() + within;
        while !self.bmp_connected() {
            self.router.assert_alive();
            assert!(
                Instant::now() < deadline,
                "router's BMP session to {} not up within {within:?}\n{}",
                self.collector,
                self.router.tail()
            );
            sleep(Duration::from_millis(20));
        }
    }

    // -----------------------------------------------------------------------------------
    // Injectors

    fn start_injector(&mut self, i: usize) {
        let conf = format!(
            "[global.config]\n  as = {as_}\n  router-id = \"{me}\"\n  port = {BGP_PORT}\n\
             \x20 local-address-list = [\"{me}\"]\n\n\
             [[neighbors]]\n  [neighbors.config]\n    neighbor-address = \"{peer}\"\n\
             \x20   peer-as = {ROUTER_AS}\n\
             {timers}{afis}",
            as_ = INJECTOR_AS[i],
            me = injector_v4(i),
            peer = router_v4(i),
            timers = GOBGP_TIMERS,
            afis = GOBGP_AFIS,
        );
        fs::write(&self.injectors[i].conf, conf).expect("writing an injector's config");
        self.spawn_injector(i);
    }

    fn spawn_injector(&mut self, i: usize) {
        let inj = &mut self.injectors[i];
        inj.daemon.spawn(&inj.ns, "gobgpd", &gobgpd_args(&inj.conf));
        wait_grpc(&inj.ns, &mut inj.daemon);
    }

    /// `gobgp ARGS` against injector `i`'s gRPC port, in its namespace.
    pub fn gobgp(&self, i: usize, args: &[&str]) -> Output {
        run(nsenter(&self.injectors[i].ns, "gobgp")
            .args(["-u", "127.0.0.1", "-p", &GRPC_PORT.to_string()])
            .args(args))
    }

    fn gobgp_ok(&self, i: usize, args: &[&str]) -> String {
        let out = self.gobgp(i, args);
        assert!(
            out.status.success(),
            "gobgp {args:?} at injector {i} failed: {}\n{}",
            describe(&out),
            self.injectors[i].daemon.tail()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Injector 0 originates `prefix` (IPv4 or IPv6) with `as_path` behind its own AS (the
    /// router receives `[INJECTOR_AS[0], as_path..]`), `med`, and `next_hop` (default: the
    /// injector's link address of the prefix's family).
    pub fn announce(
        &self,
        prefix: &str,
        as_path: &[u32],
        med: Option<u32>,
        next_hop: Option<IpAddr>,
    ) {
        self.announce_from(0, prefix, as_path, med, next_hop);
    }

    /// Like [`RouterLab::announce`], from injector `i`.
    pub fn announce_from(
        &self,
        i: usize,
        prefix: &str,
        as_path: &[u32],
        med: Option<u32>,
        next_hop: Option<IpAddr>,
    ) {
        let v6 = prefix.contains(':');
        let nh = next_hop.unwrap_or(if v6 {
            IpAddr::V6(injector_v6(i))
        } else {
            IpAddr::V4(injector_v4(i))
        });
        let mut args: Vec<String> = ["global", "rib", "add", "-a", family(v6), prefix]
            .map(String::from)
            .to_vec();
        if !as_path.is_empty() {
            let path: Vec<String> = as_path.iter().map(u32::to_string).collect();
            args.extend(["aspath".into(), path.join(",")]);
        }
        if let Some(m) = med {
            args.extend(["med".into(), m.to_string()]);
        }
        args.extend(["nexthop".into(), nh.to_string()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.gobgp_ok(i, &args);
    }

    /// Injector 0 withdraws `prefix`.
    pub fn withdraw(&self, prefix: &str) {
        self.withdraw_from(0, prefix);
    }

    /// Injector `i` withdraws `prefix`.
    pub fn withdraw_from(&self, i: usize, prefix: &str) {
        let v6 = prefix.contains(':');
        self.gobgp_ok(i, &["global", "rib", "del", "-a", family(v6), prefix]);
    }

    /// Injector 0 closes its session with the router (a Cease NOTIFICATION) and keeps it
    /// down: the router sends a BMP Peer Down.
    pub fn peer_down(&self) {
        self.peer_down_at(0);
    }

    pub fn peer_down_at(&self, i: usize) {
        self.gobgp_ok(i, &["neighbor", &router_v4(i).to_string(), "disable"]);
    }

    /// Undoes [`RouterLab::peer_down`]; waits (up to `START_WITHIN`) until it is established.
    pub fn peer_up(&mut self) {
        self.peer_up_at(0);
    }

    pub fn peer_up_at(&mut self, i: usize) {
        self.gobgp_ok(i, &["neighbor", &router_v4(i).to_string(), "enable"]);
        self.wait_established(START_WITHIN);
    }

    /// Kills injector `i`'s gobgpd (SIGKILL) and starts it again with an empty RIB; waits
    /// until its session is established again.
    pub fn injector_restart(&mut self, i: usize) {
        self.injectors[i].daemon.kill();
        self.spawn_injector(i);
        self.wait_established(START_WITHIN);
    }

    /// Whether injector `i` reports its session with the router established.
    pub fn established(&self, i: usize) -> bool {
        let out = self.gobgp(i, &["-j", "neighbor", &router_v4(i).to_string()]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        // apipb.PeerState.SessionState: 6 is ESTABLISHED.
        v["state"]["session_state"] == 6
    }

    /// Waits until every injector's session is established; panics after `within` with the
    /// daemons' log tails.
    pub fn wait_established(&mut self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            self.router.assert_alive();
            for inj in &mut self.injectors {
                inj.daemon.assert_alive();
            }
            if (0..self.injectors.len()).all(|i| self.established(i)) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "BGP sessions not established within {within:?}\n{}",
                self.log_tails()
            );
            sleep(Duration::from_millis(50));
        }
    }

    /// Injector 0 loads the routes of an MRT file (TABLE_DUMP_V2 or BGP4MP updates, plain,
    /// .gz or .bz2): the first announcement of each prefix, `limit` prefixes at most, with
    /// the injector as next hop. Returns when the router counts them all as received.
    pub fn inject_mrt(&mut self, path: &Path, limit: Option<usize>) -> Injected {
        let t0 = Instant::now();
        let dump = self.dir.path("inject.mrt");
        let routes = rib_dump(path, limit, &dump);
        let convert = t0.elapsed();
        let before = self.router_received(0);
        let in_rib = self.injector_rib(0);
        let t1 = Instant::now();
        // gobgp reads only TABLE_DUMP_V2 (not BGP4MP_ET), hence the conversion above. Its
        // CLI sometimes exits before the daemon has taken a last few hundred paths (seen
        // with gobgp 3.10: 19,691 and 19,862 of 20,000); injecting again is harmless (the
        // same paths replace themselves), so it retries until the RIB has them all.
        for attempt in 1.. {
            self.gobgp_ok(
                0,
                &[
                    "mrt",
                    "inject",
                    "global",
                    "--nexthop",
                    &injector_v4(0).to_string(),
                    &dump.display().to_string(),
                ],
            );
            let have = self.settled_injector_rib(0);
            if have >= in_rib + routes {
                break;
            }
            assert!(
                attempt < 3,
                "injector 0 has {have} of {} routes after {attempt} injections\n{}",
                in_rib + routes,
                self.injectors[0].daemon.tail()
            );
        }
        let inject = t1.elapsed();
        let within = Duration::from_secs(30) + Duration::from_micros(100 * routes as u64);
        let deadline = Instant::now() + within;
        loop {
            let now = self.router_received(0);
            if now >= before + routes {
                break;
            }
            self.router.assert_alive();
            assert!(
                Instant::now() < deadline,
                "router has {now} of {} routes from injector 0 after {within:?}; the \
                 injector's RIB: {}\n{}",
                before + routes,
                self.gobgp_ok(0, &["global", "rib", "summary", "-a", "ipv4"]),
                self.log_tails()
            );
            sleep(Duration::from_millis(100));
        }
        let _ = fs::remove_file(&dump);
        Injected {
            routes,
            convert,
            inject,
            converged: t1.elapsed(),
        }
    }

    /// IPv4 destinations in injector `i`'s global RIB.
    pub fn injector_rib(&self, i: usize) -> usize {
        let text = self.gobgp_ok(i, &["global", "rib", "summary", "-a", "ipv4"]);
        // "Destination: 19862, Path: 19862"
        text.split("Destination: ")
            .nth(1)
            .and_then(|r| r.split(',').next())
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no destination count in {text:?}"))
    }

    /// [`RouterLab::injector_rib`] once it has not changed for half a second (the daemon
    /// may still be taking paths the CLI sent), 30 s at most.
    fn settled_injector_rib(&self, i: usize) -> usize {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut last = self.injector_rib(i);
        loop {
            sleep(Duration::from_millis(500));
            let now = self.injector_rib(i);
            if now == last || Instant::now() > deadline {
                return now;
            }
            last = now;
        }
    }

    // -----------------------------------------------------------------------------------
    // Router

    fn write_router_config(&self) {
        let conf = match self.kind {
            RouterKind::Frr => self.frr_config(),
            RouterKind::Gobgp => self.gobgp_router_config(),
        };
        fs::write(&self.router_conf, conf).expect("writing the router's config");
    }

    fn frr_config(&self) -> String {
        let mut c = format!(
            "hostname {ns}\nlog file {log}\n!\nrouter bgp {ROUTER_AS}\n bgp router-id {id}\n\
             \x20no bgp ebgp-requires-policy\n no bgp default ipv4-unicast\n",
            ns = self.router_ns,
            log = self.router.log.display(),
            id = router_v4(0),
        );
        for (i, as_) in INJECTOR_AS.iter().enumerate().take(self.injectors.len()) {
            let peer = injector_v4(i);
            c += &format!(" neighbor {peer} remote-as {as_}\n neighbor {peer} timers connect 1\n");
        }
        for af in ["ipv4", "ipv6"] {
            c += &format!(" address-family {af} unicast\n");
            for i in 0..self.injectors.len() {
                let peer = injector_v4(i);
                // soft-reconfiguration: without it FRR's pre-policy dump is empty.
                // sender-as-path-loop-detection: do not send the injector its own routes
                // back (it would drop them; a full table would cross the link twice).
                c += &format!(
                    "  neighbor {peer} activate\n  neighbor {peer} soft-reconfiguration inbound\n\
                     \x20 neighbor {peer} sender-as-path-loop-detection\n"
                );
            }
            c += " exit-address-family\n";
        }
        // min-retry/max-retry in ms: reconnect within a second after a cut.
        c += &format!(
            " bmp targets collector\n  bmp connect {} port {} min-retry 100 max-retry 1000\n",
            self.collector.ip(),
            self.collector.port()
        );
        for af in ["ipv4", "ipv6"] {
            for p in self.policies() {
                c += &format!("  bmp monitor {af} unicast {p}\n");
            }
        }
        c + " exit\n!\n"
    }

    fn policies(&self) -> &'static [&'static str] {
        match self.policy {
            BmpPolicy::Pre => &["pre-policy"],
            BmpPolicy::Post => &["post-policy"],
            BmpPolicy::Both => &["pre-policy", "post-policy"],
        }
    }

    fn gobgp_router_config(&self) -> String {
        let mut c = format!(
            "[global.config]\n  as = {ROUTER_AS}\n  router-id = \"{}\"\n  port = {BGP_PORT}\n",
            router_v4(0)
        );
        for (i, as_) in INJECTOR_AS.iter().enumerate().take(self.injectors.len()) {
            c += &format!(
                "\n[[neighbors]]\n  [neighbors.config]\n    neighbor-address = \"{}\"\n\
                 \x20   peer-as = {as_}\n{GOBGP_TIMERS}{GOBGP_AFIS}",
                injector_v4(i),
            );
        }
        let policy = match self.policy {
            BmpPolicy::Pre => "pre-policy",
            BmpPolicy::Post => "post-policy",
            BmpPolicy::Both => "both",
        };
        c + &format!(
            "\n[[bmp-servers]]\n  [bmp-servers.config]\n    address = \"{}\"\n    port = {}\n\
             \x20   route-monitoring-policy = \"{policy}\"\n",
            self.collector.ip(),
            self.collector.port()
        )
    }

    fn spawn_router(&mut self) {
        match self.kind {
            RouterKind::Frr => {
                let vty = self.dir.path("vty");
                fs::create_dir_all(&vty).expect("creating the vty socket directory");
                let pid = self.dir.path("bgpd.pid");
                let _ = fs::remove_file(&pid);
                // -Z: no zebra (nothing to install routes into); -n: no kernel routes;
                // -S: no user switch (runs as the test's root); -P 0: no vty TCP port.
                // Config, pid file and vty socket are the lab's, nothing of /etc/frr or
                // /var/run/frr is used.
                let args: Vec<String> = ["-M", "bmp", "-Z", "-n", "-S", "-P", "0", "-f"]
                    .iter()
                    .map(ToString::to_string)
                    .chain([
                        self.router_conf.display().to_string(),
                        "-i".into(),
                        pid.display().to_string(),
                        "--vty_socket".into(),
                        vty.display().to_string(),
                    ])
                    .collect();
                self.router
                    .spawn(&self.router_ns, "/usr/lib/frr/bgpd", &args);
                self.wait_vty();
            }
            RouterKind::Gobgp => {
                self.router
                    .spawn(&self.router_ns, "gobgpd", &gobgpd_args(&self.router_conf));
                wait_grpc(&self.router_ns, &mut self.router);
            }
        }
    }

    /// FRR: waits until vtysh can talk to bgpd (its config is read by then).
    fn wait_vty(&mut self) {
        let deadline = Instant::now() + START_WITHIN;
        loop {
            self.router.assert_alive();
            if self.vtysh("show bgp summary").status.success() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "bgpd's vty not up within {START_WITHIN:?}\n{}",
                self.router.tail()
            );
            sleep(Duration::from_millis(50));
        }
    }

    /// FRR only: `vtysh -c COMMAND` on this lab's bgpd.
    pub fn vtysh(&self, command: &str) -> Output {
        assert_eq!(self.kind, RouterKind::Frr, "vtysh is for an FRR router");
        run(Command::new("vtysh")
            .arg("--vty_socket")
            .arg(self.dir.path("vty"))
            .args(["-d", "bgpd", "-c", command]))
    }

    /// Routes (IPv4 unicast) the router has received from injector `i` (before policy).
    pub fn router_received(&self, i: usize) -> usize {
        match self.kind {
            RouterKind::Frr => {
                let out = self.vtysh("show bgp ipv4 unicast summary json");
                let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
                v["peers"][injector_v4(i).to_string()]["pfxRcd"]
                    .as_u64()
                    .unwrap_or(0) as usize
            }
            RouterKind::Gobgp => {
                let out = run(nsenter(&self.router_ns, "gobgp").args([
                    "-j",
                    "neighbor",
                    &injector_v4(i).to_string(),
                ]));
                let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
                v["afi_safis"]
                    .as_array()
                    .and_then(|a| a.iter().find(|s| s["config"]["family"]["afi"] == 1))
                    .and_then(|s| s["state"]["received"].as_u64())
                    .unwrap_or(0) as usize
            }
        }
    }

    /// Restarts the router (SIGTERM, then the same config): its BMP session ends and comes
    /// back with a fresh Initiation, peer ups and dump. Waits until the BGP sessions are up.
    pub fn router_restart(&mut self) {
        self.router.stop();
        self.spawn_router();
        self.wait_established(START_WITHIN);
    }

    /// The router's log so far (all its lives).
    pub fn router_log(&self) -> String {
        fs::read_to_string(&self.router.log).unwrap_or_default()
    }

    /// Every daemon's log tail, for failure messages.
    pub fn log_tails(&self) -> String {
        let mut s = self.router.tail();
        for inj in &self.injectors {
            s += "\n";
            s += &inj.daemon.tail();
        }
        s
    }

    /// The lab's temp directory (configs, logs): kept until the lab drops.
    pub fn dir(&self) -> &Path {
        self.dir.root()
    }
}

impl Drop for RouterLab {
    fn drop(&mut self) {
        // Daemons first: a process left in a namespace keeps it alive.
        self.router.stop();
        for inj in &mut self.injectors {
            inj.daemon.stop();
        }
        // Deleting the router's namespace deletes both veths to the caller's namespace and
        // the injectors' (and with the caller's end, the address and route the lab added).
        for ns in self.namespaces() {
            let _ = run(Command::new("ip").args(["netns", "del", &ns]));
        }
    }
}

/// Retry a connection every second, and leave Idle one second after a session ends
/// (GoBGP waits 30 s by default, which would slow every peer_up and restart).
const GOBGP_TIMERS: &str = "  [neighbors.timers.config]\n    connect-retry = 1\n\
     \x20   idle-hold-time-after-reset = 1\n";
const GOBGP_AFIS: &str = "  [[neighbors.afi-safis]]\n    [neighbors.afi-safis.config]\n\
     \x20     afi-safi-name = \"ipv4-unicast\"\n\
     \x20 [[neighbors.afi-safis]]\n    [neighbors.afi-safis.config]\n\
     \x20     afi-safi-name = \"ipv6-unicast\"\n";

fn gobgpd_args(conf: &Path) -> Vec<String> {
    vec![
        "-f".into(),
        conf.display().to_string(),
        "-t".into(),
        "toml".into(),
        "-p".into(),
        format!("--api-hosts=127.0.0.1:{GRPC_PORT}"),
        "--pprof-disable".into(),
    ]
}

/// Waits until gobgpd in `ns` answers on its gRPC port.
fn wait_grpc(ns: &str, daemon: &mut Daemon) {
    let deadline = Instant::now() + START_WITHIN;
    loop {
        daemon.assert_alive();
        let out = run(nsenter(ns, "gobgp").args(["-p", &GRPC_PORT.to_string(), "global"]));
        if out.status.success() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{} gRPC not up within {START_WITHIN:?}: {}\n{}",
            daemon.what,
            describe(&out),
            daemon.tail()
        );
        sleep(Duration::from_millis(50));
    }
}

fn family(v6: bool) -> &'static str {
    if v6 {
        "ipv6"
    } else {
        "ipv4"
    }
}

/// Writes a TABLE_DUMP_V2 file to `out` with the first announcement of each prefix in the
/// MRT file `path` (decompressed first if it ends in .gz or .bz2), `limit` at most; returns
/// how many. gobgp's `mrt inject` reads only TABLE_DUMP_V2, and one path per prefix is what
/// a single peer announces.
pub fn rib_dump(path: &Path, limit: Option<usize>, out: &Path) -> usize {
    assert!(
        path.exists(),
        "MRT file {} is missing (see the shared data's README)",
        path.display()
    );
    let plain = out.with_extension("src");
    let name = path.to_string_lossy();
    let tool = if name.ends_with(".gz") {
        Some("zcat")
    } else if name.ends_with(".bz2") {
        Some("bzcat")
    } else {
        None
    };
    let source = match tool {
        Some(tool) => {
            let file = fs::File::create(&plain).expect("creating the decompressed MRT file");
            let st = Command::new(tool)
                .arg(path)
                .stdout(file)
                .status()
                .unwrap_or_else(|e| panic!("running {tool}: {e}"));
            assert!(st.success(), "{tool} {} failed: {st}", path.display());
            plain.clone()
        }
        None => path.to_path_buf(),
    };
    let file = fs::File::open(&source).expect("opening the MRT file");
    let limit = limit.unwrap_or(usize::MAX);
    let mut seen = HashSet::new();
    let mut encoder = bgpkit_parser::encoder::MrtRibEncoder::new();
    // gobgp's `mrt inject` (3.10) loses the last few hundred paths of a file (the CLI ends
    // its stream before the daemon has them): the file ends with the first PADDING routes
    // again, which the injector already has, so what is lost is nothing new.
    let mut padding = bgpkit_parser::encoder::MrtRibEncoder::new();
    const PADDING: usize = 4096;
    for elem in bgpkit_parser::BgpkitParser::from_reader(std::io::BufReader::new(file)) {
        if seen.len() >= limit {
            break;
        }
        if elem.elem_type != bgpkit_parser::models::ElemType::ANNOUNCE {
            continue;
        }
        if seen.insert(elem.prefix.prefix) {
            for e in [&mut encoder]
                .into_iter()
                .chain((seen.len() <= PADDING).then_some(&mut padding))
            {
                e.process_elem(&elem)
                    .unwrap_or_else(|err| panic!("encoding {}: {err:?}", elem.prefix));
            }
        }
    }
    let mut bytes = encoder
        .export_bytes()
        .expect("encoding the RIB dump")
        .to_vec();
    bytes.extend_from_slice(&padding.export_bytes().expect("encoding the padding"));
    fs::write(out, &bytes).unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
    let _ = fs::remove_file(&plain);
    seen.len()
}

/// A TCP listener bound to `addr` in the network namespace `ns`: a thread enters the
/// namespace, binds and returns the socket, which stays in that namespace wherever it is
/// used. For tests that read BMP themselves.
pub fn listen_in(ns: &str, addr: SocketAddr) -> TcpListener {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let f = fs::File::open(&path).unwrap_or_else(|e| panic!("opening {path}: {e}"));
        let rc = unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&f), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
        TcpListener::bind(addr).unwrap_or_else(|e| panic!("binding {addr} in {path}: {e}"))
    })
    .join()
    .expect("the listening thread panicked")
}

/// A namespace of its own (for a collector), with `lo` up; deleted on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    /// `rl-<pid>-<tag><n>-col`.
    pub fn new(tag: &str) -> Netns {
        sweep_stale();
        let n = NEXT_LAB.fetch_add(1, Ordering::Relaxed);
        let ns = Netns {
            name: pins::name(PREFIX, format!("{tag}{n}-col")),
        };
        ip(&["netns", "add", &ns.name]);
        ip(&["-n", &ns.name, "link", "set", "lo", "up"]);
        ns
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run(Command::new("ip").args(["netns", "del", &self.name]));
    }
}

fn ip(args: &[&str]) -> Output {
    run_ok(Command::new("ip").args(args))
}

fn run_ok(cmd: &mut Command) -> Output {
    let out = run(cmd);
    assert!(out.status.success(), "{cmd:?} failed: {}", describe(&out));
    out
}

fn veth(ns_a: &str, a: &str, ns_b: &str, b: &str) {
    ip(&[
        "link", "add", a, "netns", ns_a, "type", "veth", "peer", "name", b, "netns", ns_b,
    ]);
}

fn has_carrier(ns: &str, ifname: &str) -> bool {
    let out = run(Command::new("ip").args(["-n", ns, "-o", "link", "show", "dev", ifname]));
    out.status.success() && String::from_utf8_lossy(&out.stdout).contains("LOWER_UP")
}

/// `addr/len` on `ifname` in `ns` (IPv6 without duplicate address detection).
fn add_address(ns: &str, ifname: &str, addr: IpAddr, len: u8) {
    let cidr = format!("{addr}/{len}");
    let mut args = vec!["-n", ns, "addr", "add", &cidr, "dev", ifname];
    if addr.is_ipv6() {
        args.push("nodad");
    }
    ip(&args);
}

fn has_address(ns: &str, addr: IpAddr) -> bool {
    let out =
        run(Command::new("ip").args(["-n", ns, "-o", "addr", "show", "to", &addr.to_string()]));
    !String::from_utf8_lossy(&out.stdout).trim().is_empty()
}

/// Namespaces of router labs whose process is gone: their daemons are killed (by pid:
/// `ip netns pids`, only those namespaces' processes, which only these labs start) and the
/// namespaces deleted. Once per process.
fn sweep_stale() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let list = run(Command::new("ip").args(["netns", "list"]));
        for line in String::from_utf8_lossy(&list.stdout).lines() {
            let name = line.split_whitespace().next().unwrap_or("");
            if !pins::owner_is_gone(name, PREFIX) {
                continue;
            }
            let pids = run(Command::new("ip").args(["netns", "pids", name]));
            for pid in String::from_utf8_lossy(&pids.stdout).split_whitespace() {
                if let Ok(pid) = pid.parse::<libc::pid_t>() {
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
            let _ = run(Command::new("ip").args(["netns", "del", name]));
        }
    });
}
