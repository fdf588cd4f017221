//! A two-namespace lab for end-to-end tests with real DNS clients and servers.
//!
//! ```text
//!   client netns                         edge netns
//!   <client_if> 192.0.2.2/24  <--veth-->  <edge_if> 192.0.2.1/24
//!               2001:db8::2/64                     2001:db8::1/64
//!   dig, kdig                             director (XDP), knotd
//! ```
//!
//! Every lab has its own namespaces, interfaces and bpffs pin directories, all named after
//! the test process's pid and a counter, so tests never see each other's state. `Drop`
//! undoes everything (also when a test panics): it stops the processes the lab started, by
//! pid, detaches director, deletes the namespaces and removes the pins.
//!
//! director-ctl runs through `nsenter --net=...`, not `ip netns exec`: the latter gives the
//! command a private mount namespace with its own /sys, so pins it makes would vanish.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    sync::{
        atomic::{AtomicUsize, Ordering},
        Once, OnceLock,
    },
    thread::sleep,
    time::{Duration, Instant},
};

use crate::pins;

pub const EDGE_V4: &str = "192.0.2.1";
pub const EDGE_V6: &str = "2001:db8::1";
pub const CLIENT_V4: &str = "192.0.2.2";
pub const CLIENT_V6: &str = "2001:db8::2";

/// Prefix of every name a lab creates (namespaces, pin directories, temp directories).
pub const PREFIX: &str = "dlab";

static NEXT_LAB: AtomicUsize = AtomicUsize::new(0);

/// The workspace root: this crate lives in `<root>/tests`.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// A file of the shared data set (`../shared/data` beside the checkout); fails the test,
/// saying where it was looked for, if it is missing.
pub fn shared_data(rel: &str) -> PathBuf {
    let p = workspace_root().join("../shared/data").join(rel);
    assert!(
        p.is_file(),
        "real data file {} is missing (expected beside the checkout, see ../shared/data/README.md)",
        p.display()
    );
    p
}

/// director-ctl from this workspace, built once per test process. The test crate cannot use
/// `CARGO_BIN_EXE_*` for another package's binary; building (a no-op when it is fresh) also
/// keeps the tests from running a binary older than the sources. `DIRECTOR_CTL=<path>`
/// runs the tests against that binary instead (e.g. one built from another revision).
/// Set once `ctl_binary` has built the binary; `Drop` only uses a binary that exists, so a
/// failed build never makes cleanup panic (and abort) in turn.
static CTL_BIN: OnceLock<PathBuf> = OnceLock::new();

pub fn ctl_binary() -> &'static Path {
    CTL_BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("DIRECTOR_CTL") {
            return PathBuf::from(bin);
        }
        let root = workspace_root();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        // Not --quiet: on a fresh machine this takes minutes, which cargo's progress
        // explains (a no-op build prints one line).
        eprintln!(
            "director-tests: building director-ctl (debug) with its XDP object; the first \
             build takes several minutes"
        );
        let status = Command::new(cargo)
            .args(["build", "-p", "director-ctl"])
            .current_dir(&root)
            .status()
            .expect("running cargo build -p director-ctl");
        assert!(status.success(), "cargo build -p director-ctl failed");
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("target"));
        let bin = target.join("debug/director-ctl");
        assert!(bin.exists(), "{} missing after the build", bin.display());
        bin
    })
}

/// Runs a command to completion, panicking only if it cannot be started.
pub(crate) fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

/// Runs a command and panics with its output unless it succeeds.
pub(crate) fn run_ok(cmd: &mut Command) -> Output {
    let out = run(cmd);
    assert!(out.status.success(), "{cmd:?} failed: {}", describe(&out));
    out
}

/// Exit status, stdout and stderr, for assertion messages.
pub fn describe(out: &Output) -> String {
    format!(
        "{}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `program` in the network namespace `ns` (and nothing else of it: see the module docs).
pub(crate) fn nsenter(ns: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new("nsenter");
    c.arg(format!("--net=/run/netns/{ns}")).arg(program);
    c
}

fn ip(args: &[&str]) -> Output {
    run_ok(Command::new("ip").args(args))
}

/// Labs (and fleet hubs) of test processes that were killed (no Drop ran) leave namespaces
/// and pins named after a pid that no longer exists; remove those once per process so they
/// do not pile up.
pub(crate) fn sweep_stale() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let list = run(Command::new("ip").args(["netns", "list"]));
        for line in String::from_utf8_lossy(&list.stdout).lines() {
            let name = line.split_whitespace().next().unwrap_or("");
            if pins::owner_is_gone(name, PREFIX) {
                let _ = run(Command::new("ip").args(["netns", "del", name]));
            }
        }
        pins::sweep_stale(PREFIX);
    });
}

/// A running knotd, stopped (by pid) and its files removed on drop.
/// A daemon a lab runs (knotd, unbound), with its own directory.
struct Daemon {
    child: Child,
    dir: PathBuf,
}

/// Stops a process this lab started, by its pid: SIGTERM lets it finish cleanly (knotd
/// closes its databases, director-ctl run its maps); SIGKILL if it is not gone in `grace`.
pub(crate) fn stop_child(child: &mut Child, grace: Duration) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

impl Daemon {
    fn stop(&mut self) {
        stop_child(&mut self.child, Duration::from_secs(3));
    }

    fn log(&self) -> String {
        fs::read_to_string(self.dir.join("knotd.log")).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// One zone for Knot: `origin` with a trailing dot, `records` in zone-file syntax relative to
/// it (SOA, NS and ns A are added).
pub struct Zone<'a> {
    pub origin: &'a str,
    pub records: &'a str,
}

/// A zone file for [`Lab::start_knot_files`]: `origin` with a trailing dot, `text` whole.
pub struct KnotZone {
    pub origin: String,
    pub text: String,
    pub signed: bool,
}

pub struct Lab {
    pub id: String,
    pub edge_ns: String,
    pub client_ns: String,
    pub edge_if: String,
    pub client_if: String,
    /// director's pin directory (the pass-through program pins into `<pin_dir>-pass`).
    pub pin_dir: PathBuf,
    knot: Option<Daemon>,
    unbound: Option<Daemon>,
}

impl Lab {
    /// Creates both namespaces, the veth pair and the addresses, and waits until IPv4 and
    /// IPv6 are usable on both ends. Nothing is attached yet (see [`Lab::attach`]).
    pub fn new() -> Lab {
        sweep_stale();
        let pid = std::process::id();
        let n = NEXT_LAB.fetch_add(1, Ordering::Relaxed);
        let id = pins::name(PREFIX, n);
        // The lab exists before the first command, so a failing setup is still cleaned up.
        let lab = Lab {
            edge_ns: format!("{id}-edge"),
            client_ns: format!("{id}-client"),
            // At most 15 bytes (IFNAMSIZ - 1): "de" + 4 + "x" + counter.
            edge_if: format!("de{}x{n}", pid % 10000),
            client_if: format!("dc{}x{n}", pid % 10000),
            pin_dir: pins::dir(&id),
            knot: None,
            unbound: None,
            id,
        };
        lab.setup_network();
        lab
    }

    fn setup_network(&self) {
        for ns in [&self.edge_ns, &self.client_ns] {
            ip(&["netns", "add", ns]);
            // Duplicate address detection would keep addresses (the link-local one too)
            // tentative for a second or more; nothing else can claim them here.
            for conf in ["all", "default"] {
                run_ok(nsenter(ns, "sysctl").args([
                    "-q",
                    "-w",
                    &format!("net.ipv6.conf.{conf}.accept_dad=0"),
                ]));
            }
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        ip(&[
            "link",
            "add",
            &self.edge_if,
            "netns",
            &self.edge_ns,
            "type",
            "veth",
            "peer",
            "name",
            &self.client_if,
            "netns",
            &self.client_ns,
        ]);
        for (ns, ifname, v4, v6) in [
            (&self.edge_ns, &self.edge_if, EDGE_V4, EDGE_V6),
            (&self.client_ns, &self.client_if, CLIENT_V4, CLIENT_V6),
        ] {
            ip(&["-n", ns, "addr", "add", &format!("{v4}/24"), "dev", ifname]);
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
        self.wait_links_ready();
    }

    /// Both veth ends have carrier and no tentative IPv6 address (a tentative address cannot
    /// be bound or used as a source, which would make the first queries fail).
    fn wait_links_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let ready = [
                (&self.edge_ns, &self.edge_if),
                (&self.client_ns, &self.client_if),
            ]
            .iter()
            .all(|(ns, ifname)| {
                let link = String::from_utf8_lossy(
                    &ip(&["-n", ns, "-o", "link", "show", "dev", ifname]).stdout,
                )
                .into_owned();
                let addrs = String::from_utf8_lossy(
                    &ip(&["-n", ns, "-o", "-6", "addr", "show", "dev", ifname]).stdout,
                )
                .into_owned();
                link.contains("LOWER_UP")
                    && addrs.contains("scope global")
                    && !addrs.contains("tentative")
            });
            if ready {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "lab {}: links or IPv6 addresses not ready after 10 s",
                self.id
            );
            sleep(Duration::from_millis(50));
        }
    }

    /// director-ctl in `ns` with this lab's pin directory.
    pub fn ctl_in(&self, ns: &str, args: &[&str]) -> Output {
        run(nsenter(ns, ctl_binary())
            .arg("--pin-dir")
            .arg(&self.pin_dir)
            .args(args))
    }

    /// director-ctl in the edge namespace with this lab's pin directory.
    pub fn ctl(&self, args: &[&str]) -> Output {
        self.ctl_in(&self.edge_ns, args)
    }

    /// Like [`Lab::ctl`], panicking unless it succeeds; returns stdout.
    pub fn ctl_ok(&self, args: &[&str]) -> String {
        let out = self.ctl(args);
        assert!(
            out.status.success(),
            "director-ctl {args:?} failed: {}",
            describe(&out)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Attaches director to the edge interface, and the pass-through program to the client
    /// end: without it the frames director sends back with XDP_TX are not delivered.
    /// Native mode unless `DIRECTOR_XDP_MODE=skb` (to tell driver-mode effects from others).
    pub fn attach(&self) {
        let mode = std::env::var("DIRECTOR_XDP_MODE").unwrap_or_else(|_| "native".into());
        self.ctl_ok(&["attach", "--iface", &self.edge_if, "--mode", &mode]);
        let out = self.ctl_in(&self.client_ns, &["veth-peer", "--iface", &self.client_if]);
        assert!(out.status.success(), "veth-peer failed: {}", describe(&out));
    }

    /// A command in the client namespace.
    pub fn client(&self, cmd: &[&str]) -> Output {
        run(Command::new("ip")
            .args(["netns", "exec", &self.client_ns])
            .args(cmd))
    }

    /// dig from the client, bounded to one try of 2 s; returns stdout (dig reports failures
    /// such as timeouts there too).
    pub fn dig(&self, args: &[&str]) -> String {
        let mut cmd = vec!["dig", "+tries=1", "+timeout=2"];
        cmd.extend_from_slice(args);
        String::from_utf8_lossy(&self.client(&cmd).stdout).into_owned()
    }

    /// director's A answer for `name` to a client in `subnet` (EDNS Client Subnet; one try
    /// of 1 s, from the client to the edge): the addresses joined by commas, "" for none.
    pub fn answer_a(&self, name: &str, subnet: &str) -> String {
        let r = Reply::parse(&self.dig(&[
            &format!("@{EDGE_V4}"),
            name,
            "A",
            &format!("+subnet={subnet}"),
            "+tries=1",
            "+time=1",
        ]));
        r.data("A").join(",")
    }

    /// dig inside the edge namespace: the query goes over loopback, where director is not
    /// attached, so this is what the servers behind director say.
    pub fn dig_in_edge(&self, args: &[&str]) -> String {
        let out = run(nsenter(&self.edge_ns, "dig")
            .args(["+tries=1", "+timeout=2"])
            .args(args));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Adds `cidr` (e.g. "192.0.2.53/24") to the edge's interface, where director's zone
    /// listeners bind.
    pub fn add_edge_address(&self, cidr: &str) {
        let mut args = vec![
            "-n",
            &self.edge_ns,
            "addr",
            "add",
            cidr,
            "dev",
            &self.edge_if,
        ];
        if cidr.contains(':') {
            args.push("nodad");
        }
        ip(&args);
    }

    /// kdig from the client, bounded like [`Lab::dig`].
    pub fn kdig(&self, args: &[&str]) -> String {
        let mut cmd = vec!["kdig", "+retry=0", "+timeout=2"];
        cmd.extend_from_slice(args);
        let out = self.client(&cmd);
        // kdig prints some diagnostics (e.g. timeouts) on stderr; keep them for the parser.
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    /// director's counters from `stats --json`.
    pub fn stats(&self) -> Stats {
        Stats::parse(&self.ctl_ok(&["stats", "--json"]))
    }

    /// Starts knotd in the edge namespace, authoritative for `zones`, listening on
    /// 192.0.2.1@53 and [2001:db8::1]@53, and waits until it answers on both.
    pub fn start_knot(&mut self, zones: &[Zone<'_>]) {
        let files: Vec<KnotZone> = zones
            .iter()
            .map(|z| KnotZone {
                origin: z.origin.to_string(),
                text: format!(
                    "$ORIGIN {o}\n$TTL 300\n@ SOA ns.{o} hostmaster.{o} 1 3600 600 86400 300\n\
                     @ NS ns.{o}\nns A {EDGE_V4}\n{}\n",
                    z.records,
                    o = z.origin
                ),
                signed: false,
            })
            .collect();
        self.start_knot_files(&files);
    }

    /// Like [`Lab::start_knot`], with each zone file given whole; a `signed` zone is signed
    /// by Knot (automatic DNSSEC signing, its default policy).
    pub fn start_knot_files(&mut self, zones: &[KnotZone]) {
        assert!(self.knot.is_none(), "knot already runs in lab {}", self.id);
        let dir = std::env::temp_dir().join(format!("{}-knot", self.id));
        let _ = fs::remove_dir_all(&dir);
        for sub in ["zones", "db", "run"] {
            fs::create_dir_all(dir.join(sub)).expect("creating knot's directories");
        }
        let mut conf = format!(
            "server:\n    rundir: \"{d}/run\"\n    listen: [ {EDGE_V4}@53, {EDGE_V6}@53 ]\n\
             \x20   udp-workers: 1\n    tcp-workers: 1\n    background-workers: 1\n\
             log:\n  - target: stderr\n    any: info\n\
             database:\n    storage: \"{d}/db\"\n\
             template:\n  - id: default\n    storage: \"{d}/zones\"\n\
             zone:\n",
            d = dir.display()
        );
        for z in zones {
            let file = format!("{}zone", z.origin);
            conf.push_str(&format!("  - domain: {}\n    file: \"{file}\"\n", z.origin));
            if z.signed {
                conf.push_str("    dnssec-signing: on\n    zonefile-sync: -1\n");
            }
            fs::write(dir.join("zones").join(file), &z.text).expect("writing a zone file");
        }
        let conf_path = dir.join("knot.conf");
        fs::write(&conf_path, conf).expect("writing knot.conf");
        let log = fs::File::create(dir.join("knotd.log")).expect("creating knotd.log");
        // nsenter execs knotd, so the child's pid is knotd's.
        let child = nsenter(&self.edge_ns, "knotd")
            .arg("-c")
            .arg(&conf_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting knotd");
        let first = zones.first().expect("knot needs a zone").origin.clone();
        self.knot = Some(Daemon { child, dir });
        let knot = self.knot.as_mut().unwrap();
        // Probe from inside the edge namespace: loopback traffic does not cross director.
        let deadline = Instant::now() + Duration::from_secs(10);
        for server in [EDGE_V4, EDGE_V6] {
            loop {
                if let Ok(Some(st)) = knot.child.try_wait() {
                    panic!("knotd exited ({st}):\n{}", knot.log());
                }
                let out = run(nsenter(&self.edge_ns, "dig").args([
                    "+tries=1",
                    "+timeout=1",
                    "+short",
                    &format!("@{server}"),
                    &first,
                    "SOA",
                ]));
                if out.status.success() && !out.stdout.is_empty() {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "knotd does not answer on {server}:\n{}",
                    knot.log()
                );
                sleep(Duration::from_millis(50));
            }
        }
    }
}

/// Where [`Lab::start_unbound`] listens, in the client namespace.
pub const RESOLVER: &str = "127.0.0.1";
pub const RESOLVER_PORT: &str = "5353";

impl Lab {
    /// Starts unbound in the client namespace as an ECS-caching resolver (its subnetcache
    /// module, RFC 7871): it listens on 127.0.0.1:5353, resolves `zone` from director at
    /// 192.0.2.1 (a stub zone), forwards the client's ECS option (at most /24 and /56),
    /// and caches answers by the scope director returns. Waits until it answers `probe`.
    pub fn start_unbound(&mut self, zone: &str, probe: &str) {
        self.start_unbound_for(&[zone], probe);
    }

    /// Like [`Lab::start_unbound`], with a stub zone at the edge for each of `zones`.
    pub fn start_unbound_for(&mut self, zones: &[&str], probe: &str) {
        let conf = format!(
            "\x20 module-config: \"subnetcache iterator\"\n\
             \x20 send-client-subnet: {EDGE_V4}\n\
             \x20 max-client-subnet-ipv4: 24\n  max-client-subnet-ipv6: 56\n"
        ) + &zones
            .iter()
            .map(|z| format!("stub-zone:\n  name: \"{z}\"\n  stub-addr: {EDGE_V4}\n"))
            .collect::<String>();
        self.start_unbound_with(&conf, probe);
    }

    /// Starts unbound in the client namespace as a validating resolver (DNSSEC), on
    /// 127.0.0.1:5353: `trust_anchor` (zone-file DNSKEY or DS lines) anchors the zone
    /// served at 192.0.2.1, a stub zone for `zone`; everything below it is found by
    /// following its delegations. Waits until it answers `probe`.
    pub fn start_validating_unbound(&mut self, zone: &str, trust_anchor: &str, probe: &str) {
        self.start_validating_unbound_at(zone, trust_anchor, probe, EDGE_V4);
    }

    /// Like [`Lab::start_validating_unbound`], with the stub zone's server at `server`.
    pub fn start_validating_unbound_at(
        &mut self,
        zone: &str,
        trust_anchor: &str,
        probe: &str,
        server: &str,
    ) {
        let anchors: String = trust_anchor
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| format!("  trust-anchor: \"{}\"\n", l.trim()))
            .collect();
        let conf = format!(
            "\x20 module-config: \"validator iterator\"\n{anchors}\
             \x20 val-log-level: 2\n\
             stub-zone:\n  name: \"{zone}\"\n  stub-addr: {server}\n"
        );
        self.start_unbound_with(&conf, probe);
    }

    fn start_unbound_with(&mut self, extra: &str, probe: &str) {
        assert!(
            self.unbound.is_none(),
            "unbound already runs in lab {}",
            self.id
        );
        let dir = std::env::temp_dir().join(format!("{}-unbound", self.id));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("creating unbound's directory");
        let conf = format!(
            "server:\n  interface: {RESOLVER}@{RESOLVER_PORT}\n  port: {RESOLVER_PORT}\n\
             \x20 do-ip6: no\n  access-control: 127.0.0.0/8 allow\n\
             \x20 username: \"\"\n  chroot: \"\"\n  directory: \"{d}\"\n\
             \x20 pidfile: \"{d}/unbound.pid\"\n  use-syslog: no\n  logfile: \"\"\n\
             \x20 verbosity: 1\n  num-threads: 1\n  qname-minimisation: no\n{extra}",
            d = dir.display()
        );
        let conf_path = dir.join("unbound.conf");
        fs::write(&conf_path, conf).expect("writing unbound.conf");
        let log = fs::File::create(dir.join("unbound.log")).expect("creating unbound.log");
        // nsenter execs unbound (-d: in the foreground), so the child's pid is unbound's.
        let child = nsenter(&self.client_ns, "unbound")
            .args(["-d", "-c"])
            .arg(&conf_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting unbound");
        self.unbound = Some(Daemon { child, dir });
        let u = self.unbound.as_mut().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(st)) = u.child.try_wait() {
                let log = fs::read_to_string(u.dir.join("unbound.log")).unwrap_or_default();
                panic!("unbound exited ({st}):\n{log}");
            }
            let out = run(nsenter(&self.client_ns, "dig").args([
                "+tries=1",
                "+timeout=1",
                &format!("@{RESOLVER}"),
                "-p",
                RESOLVER_PORT,
                probe,
                "A",
            ]));
            if String::from_utf8_lossy(&out.stdout).contains("status:") {
                break;
            }
            assert!(Instant::now() < deadline, "unbound does not answer");
            sleep(Duration::from_millis(50));
        }
    }

    /// unbound's log so far (for failure messages).
    pub fn unbound_log(&self) -> String {
        self.unbound
            .as_ref()
            .map(|u| fs::read_to_string(u.dir.join("unbound.log")).unwrap_or_default())
            .unwrap_or_default()
    }
}

impl Default for Lab {
    fn default() -> Self {
        Lab::new()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        // Stop knot and unbound first: a process left in a namespace keeps it alive.
        drop(self.knot.take());
        drop(self.unbound.take());
        // Best effort: the test may have detached already, or failed before attaching.
        if CTL_BIN.get().is_some() {
            let _ = self.ctl(&["detach", "--iface", &self.edge_if]);
            let _ = self.ctl_in(
                &self.client_ns,
                &["veth-peer", "--iface", &self.client_if, "--detach"],
            );
        }
        for ns in [&self.edge_ns, &self.client_ns] {
            let _ = run(Command::new("ip").args(["netns", "del", ns]));
        }
        // Pinned links keep programs alive after their interface is gone; remove every pin.
        pins::remove(&self.pin_dir);
        pins::remove(&pins::pass_dir(&self.pin_dir));
    }
}

/// director's counters from `stats --json` (parsed into `director_ctl::api::Stats`), with
/// the look-ups the tests make.
#[derive(Debug, Clone)]
pub struct Stats {
    pub counters: Vec<(String, u64)>,
    pub services: Vec<(String, u64)>,
}

impl Stats {
    pub fn parse(json: &str) -> Stats {
        let s: director_ctl::api::Stats = serde_json::from_str(json)
            .unwrap_or_else(|e| panic!("stats --json is not a Stats document ({e}): {json}"));
        Stats {
            counters: s.counters.into_iter().collect(),
            services: s.services.into_iter().collect(),
        }
    }

    /// A counter by name (`answered`, `pass_unknown_name`, ...); panics if there is none.
    pub fn get(&self, name: &str) -> u64 {
        self.counters
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no counter {name:?} in {:?}", self.counters))
            .1
    }

    /// Answers counted for a service (0 if it is not listed).
    pub fn service(&self, name: &str) -> u64 {
        self.services
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |s| s.1)
    }

    /// Sum of every `pass_*` counter.
    pub fn passed(&self) -> u64 {
        self.counters
            .iter()
            .filter(|(n, _)| n.starts_with("pass_"))
            .map(|c| c.1)
            .sum()
    }
}

/// One resource record from an answer section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub name: String,
    pub ttl: u32,
    pub rtype: String,
    pub data: String,
}

/// The parts of a dig or kdig reply the tests look at. Both tools print the same section
/// headings; they differ in separators (`,` vs `;`) and comment prefixes, handled here.
#[derive(Debug, Clone, Default)]
pub struct Reply {
    /// None when no reply arrived (timeout, unreachable).
    pub status: Option<String>,
    pub flags: Vec<String>,
    /// Question section as printed: `(name, type)`, with the reply's case.
    pub question: Vec<(String, String)>,
    pub answers: Vec<Record>,
    /// The EDNS Client Subnet option of the reply, e.g. `203.0.113.0/24/24`.
    pub client_subnet: Option<String>,
    pub text: String,
}

impl Reply {
    pub fn parse(text: &str) -> Reply {
        let mut r = Reply {
            text: text.to_string(),
            ..Default::default()
        };
        let mut section = "";
        for line in text.lines() {
            let l = line.trim();
            if let Some(i) = l.find("status: ") {
                let s = &l[i + 8..];
                r.status = Some(s.split([',', ';']).next().unwrap_or("").trim().to_string());
            }
            if let Some(i) = l.find("CLIENT-SUBNET:") {
                r.client_subnet = Some(l[i + 14..].trim().to_string());
            }
            if l.to_ascii_lowercase().starts_with(";; flags:") {
                let f = l[9..].split(';').next().unwrap_or("");
                r.flags = f.split_whitespace().map(str::to_string).collect();
            }
            if l.is_empty() {
                section = "";
            } else if l.starts_with(";; ") && l.ends_with(" SECTION:") {
                section = if l.contains("QUESTION") {
                    "question"
                } else if l.contains("ANSWER") {
                    "answer"
                } else {
                    "other"
                };
            } else if section == "question" {
                let f: Vec<&str> = l.trim_start_matches(';').split_whitespace().collect();
                if f.len() >= 3 {
                    r.question.push((f[0].to_string(), f[2].to_string()));
                }
            } else if section == "answer" && !l.starts_with(';') {
                let f: Vec<&str> = l.split_whitespace().collect();
                if f.len() >= 5 {
                    r.answers.push(Record {
                        name: f[0].to_string(),
                        ttl: f[1].parse().unwrap_or(u32::MAX),
                        rtype: f[3].to_string(),
                        data: f[4..].join(" "),
                    });
                }
            }
        }
        r
    }

    pub fn has_flag(&self, f: &str) -> bool {
        self.flags.iter().any(|x| x == f)
    }

    /// Data of the answer records of one type, sorted.
    pub fn data(&self, rtype: &str) -> Vec<String> {
        let mut v: Vec<String> = self
            .answers
            .iter()
            .filter(|a| a.rtype == rtype)
            .map(|a| a.data.clone())
            .collect();
        v.sort();
        v
    }
}

// ---------------------------------------------------------------------------------------
// `director-ctl run` in the edge namespace

/// The controller, running in the lab's edge namespace with its stderr in a file; stopped
/// by its pid (SIGTERM, then SIGKILL) on drop.
pub struct Controller {
    child: Child,
    log: PathBuf,
}

impl Controller {
    /// Starts `director-ctl run --config CONFIG` with its stderr in `log`, looking at its
    /// inputs every 50 ms.
    pub fn start(lab: &Lab, config: &Path, log: &Path) -> Controller {
        Controller::start_polling(lab, config, log, 50)
    }

    pub fn start_polling(lab: &Lab, config: &Path, log: &Path, poll_ms: u32) -> Controller {
        Controller::start_with(lab, config, log, poll_ms, &[])
    }

    /// Like [`Controller::start_polling`], with more `run` arguments (`extra`).
    pub fn start_with(
        lab: &Lab,
        config: &Path,
        log: &Path,
        poll_ms: u32,
        extra: &[&str],
    ) -> Controller {
        let poll = poll_ms.to_string();
        let config = config.display().to_string();
        let mut args = vec!["run", "--poll-ms", &poll];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--config", &config]);
        Controller::start_command(lab, &args, log)
    }

    /// Starts `director-ctl ARGS` (a long-running command: `run`, `serve`) in the edge
    /// namespace with the lab's pin directory, its stderr in `log`.
    pub fn start_command(lab: &Lab, args: &[&str], log: &Path) -> Controller {
        Controller::start_in(&lab.edge_ns, &lab.pin_dir, args, log)
    }

    /// Starts `director-ctl --pin-dir PIN_DIR ARGS` in the namespace `ns` (a fleet's
    /// publisher runs in the hub, with no pins of its own), its stderr in `log`.
    pub fn start_in(ns: &str, pin_dir: &Path, args: &[&str], log: &Path) -> Controller {
        let file =
            fs::File::create(log).unwrap_or_else(|e| panic!("creating {}: {e}", log.display()));
        // nsenter execs director-ctl: the child's pid is the controller's.
        let child = Command::new("nsenter")
            .arg(format!("--net=/run/netns/{ns}"))
            .arg(ctl_binary())
            .arg("--pin-dir")
            .arg(pin_dir)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("starting director-ctl {args:?}: {e}"));
        Controller {
            child,
            log: log.to_path_buf(),
        }
    }

    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The controller's pid (nsenter execs it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (e.g. `libc::SIGUSR1`) to the controller, which this lab started.
    pub fn signal(&self, signal: i32) {
        let pid = self.child.id() as i32;
        assert_eq!(
            unsafe { libc::kill(pid, signal) },
            0,
            "kill({pid}, {signal}): {}",
            std::io::Error::last_os_error()
        );
    }

    pub fn count(&self, needle: &str) -> usize {
        self.log().matches(needle).count()
    }

    /// Waits until `needle` occurs at least `n` times in the log; fails if the controller
    /// exits first or `within` passes.
    pub fn wait_for(&mut self, needle: &str, n: usize, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            if self.count(needle) >= n {
                return;
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!(
                    "director-ctl run exited ({st}) before logging {needle:?} {n} time(s); \
                     its stderr:\n{}",
                    self.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "director-ctl run did not log {needle:?} {n} time(s) within {within:?}; \
                 its stderr:\n{}",
                self.log()
            );
            sleep(Duration::from_millis(20));
        }
    }

    pub fn assert_alive(&mut self) {
        if let Ok(Some(st)) = self.child.try_wait() {
            panic!(
                "director-ctl run exited ({st}); its stderr:\n{}",
                self.log()
            );
        }
    }

    pub fn stop(&mut self) {
        stop_child(&mut self.child, Duration::from_secs(5));
    }

    /// SIGKILL, by pid: no chance to finish what it was writing.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.stop();
    }
}
