//! A fleet lab: a real three-member etcd cluster and any number of edge labs on one bridge.
//!
//! ```text
//!   hub netns (dlab-<pid>-hub<n>)                   edge netns of a Lab
//!   bridge 198.51.100.1/24  etcd m1                 <edge end> 198.51.100.(20+n)/24
//!          198.51.100.2/24  etcd m2   <--veth n-->   director-ctl, etcdctl
//!          198.51.100.3/24  etcd m3
//!          198.51.100.9/24  publishers' source
//! ```
//!
//! [`Hub`] owns the namespace and the bridge; [`Hub::join`] plugs a [`Lab`]'s edge namespace
//! into it, [`Hub::cut`] and [`Hub::restore`] partition that edge from the store and heal it.
//! [`Etcd`] runs the members in the hub namespace, each with its own data directory, and
//! kills (by pid), restarts and asks them who leads.
//!
//! Both clean up on drop, also when a test panics. Declare the `Etcd` after the `Hub`
//! (`let hub = Hub::new(); let etcd = Etcd::start(&hub);`) so it is dropped first: its
//! members are the processes that keep the hub's namespace alive.

use std::{
    fs,
    process::{Child, Command, Output, Stdio},
    sync::atomic::{AtomicUsize, Ordering},
    thread::sleep,
    time::{Duration, Instant},
};

use crate::{
    netns::{describe, nsenter, run, sweep_stale, Lab, PREFIX},
    pins,
    tempdir::TempDir,
};

/// The etcd members' addresses, on the hub's bridge: member `i` is `MEMBERS[i]`.
pub const MEMBERS: [&str; 3] = ["198.51.100.1", "198.51.100.2", "198.51.100.3"];
/// The hub's address for publishers (processes that write the store from the hub).
pub const PUBLISHER_V4: &str = "198.51.100.9";
pub const CLIENT_PORT: u16 = 2379;
pub const PEER_PORT: u16 = 2380;

/// How long a cluster (or a restarted member) may take to report healthy.
const HEALTHY_WITHIN: Duration = Duration::from_secs(20);

static NEXT_HUB: AtomicUsize = AtomicUsize::new(0);
static NEXT_ETCD: AtomicUsize = AtomicUsize::new(0);

/// The address [`Hub::join`] gives edge `n`: 198.51.100.(20+n).
pub fn edge_v4(n: u8) -> String {
    assert!(
        n <= 234,
        "edge {n}: 198.51.100.{} is no host address",
        20 + n as u32
    );
    format!("198.51.100.{}", 20 + n)
}

fn ip(args: &[&str]) -> Output {
    let out = run(Command::new("ip").args(args));
    assert!(
        out.status.success(),
        "ip {args:?} failed: {}",
        describe(&out)
    );
    out
}

/// The hub namespace with its bridge; deleted on drop.
pub struct Hub {
    ns: String,
    bridge: String,
    /// `<pid % 10000>x<counter>`: makes interface names unique per process and hub.
    tag: String,
}

impl Hub {
    /// Creates the namespace and the bridge with the members' and the publishers'
    /// addresses, up. No edge is joined yet.
    pub fn new() -> Hub {
        sweep_stale();
        let n = NEXT_HUB.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{}x{n}", std::process::id() % 10000);
        // The hub exists before the first command, so a failing setup is still cleaned up.
        let hub = Hub {
            ns: pins::name(PREFIX, format!("hub{n}")),
            bridge: format!("hb{tag}"),
            tag,
        };
        ip(&["netns", "add", &hub.ns]);
        ip(&["-n", &hub.ns, "link", "set", "lo", "up"]);
        // No STP, no forwarding delay: a port forwards as soon as it is up.
        ip(&[
            "-n",
            &hub.ns,
            "link",
            "add",
            "name",
            &hub.bridge,
            "type",
            "bridge",
            "forward_delay",
            "0",
            "stp_state",
            "0",
        ]);
        for addr in MEMBERS.iter().chain([&PUBLISHER_V4]) {
            ip(&[
                "-n",
                &hub.ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                &hub.bridge,
            ]);
        }
        ip(&["-n", &hub.ns, "link", "set", &hub.bridge, "up"]);
        hub
    }

    /// The hub's network namespace.
    pub fn ns(&self) -> &str {
        &self.ns
    }

    /// The bridge's name (in [`Hub::ns`]).
    pub fn bridge(&self) -> &str {
        &self.bridge
    }

    /// The hub's end of edge `n`'s veth (a port of the bridge).
    pub fn hub_if(&self, n: u8) -> String {
        let name = format!("hv{}n{n}", self.tag);
        assert!(name.len() <= 15, "interface name {name} is too long");
        name
    }

    /// The edge's end of edge `n`'s veth (in the lab's edge namespace).
    pub fn edge_if(&self, n: u8) -> String {
        let name = format!("he{}n{n}", self.tag);
        assert!(name.len() <= 15, "interface name {name} is too long");
        name
    }

    /// Plugs `lab`'s edge namespace into the bridge as edge `n`: a veth pair, the hub's end
    /// a bridge port, the edge's end with [`edge_v4`]`(n)`/24, both up. Waits (up to 10 s)
    /// until both ends have carrier.
    pub fn join(&self, lab: &Lab, n: u8) {
        let (hub_if, edge_if) = (self.hub_if(n), self.edge_if(n));
        ip(&[
            "link",
            "add",
            &hub_if,
            "netns",
            &self.ns,
            "type",
            "veth",
            "peer",
            "name",
            &edge_if,
            "netns",
            &lab.edge_ns,
        ]);
        ip(&[
            "-n",
            &self.ns,
            "link",
            "set",
            &hub_if,
            "master",
            &self.bridge,
        ]);
        ip(&["-n", &self.ns, "link", "set", &hub_if, "up"]);
        ip(&[
            "-n",
            &lab.edge_ns,
            "addr",
            "add",
            &format!("{}/24", edge_v4(n)),
            "dev",
            &edge_if,
        ]);
        ip(&["-n", &lab.edge_ns, "link", "set", &edge_if, "up"]);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !(has_carrier(&self.ns, &hub_if) && has_carrier(&lab.edge_ns, &edge_if)) {
            assert!(
                Instant::now() < deadline,
                "hub {}: edge {n} ({hub_if} / {edge_if}) has no carrier after 10 s",
                self.ns
            );
            sleep(Duration::from_millis(20));
        }
    }

    /// Adds `cidr` to the bridge (a server's address the edges reach through the hub).
    pub fn add_address(&self, cidr: &str) {
        ip(&["-n", &self.ns, "addr", "add", cidr, "dev", &self.bridge]);
    }

    /// Partitions edge `n` from the store: the hub's end of its veth goes down.
    pub fn cut(&self, n: u8) {
        ip(&["-n", &self.ns, "link", "set", &self.hub_if(n), "down"]);
    }

    /// Heals [`Hub::cut`]: the hub's end goes up again.
    pub fn restore(&self, n: u8) {
        ip(&["-n", &self.ns, "link", "set", &self.hub_if(n), "up"]);
    }
}

impl Default for Hub {
    fn default() -> Self {
        Hub::new()
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        // The bridge and the hub's veth ends go with the namespace (their peers with them).
        let _ = run(Command::new("ip").args(["netns", "del", &self.ns]));
    }
}

fn has_carrier(ns: &str, ifname: &str) -> bool {
    let out = run(Command::new("ip").args(["-n", ns, "-o", "link", "show", "dev", ifname]));
    out.status.success() && String::from_utf8_lossy(&out.stdout).contains("LOWER_UP")
}

/// One member: its process while it runs.
struct Member {
    child: Option<Child>,
}

/// A three-member etcd cluster in a hub's namespace; its members are killed (by pid) and
/// their data directories removed on drop.
pub struct Etcd {
    ns: String,
    /// More flags for every member.
    extra: Vec<String>,
    token: String,
    members: Vec<Member>,
    /// Data directories (`m<i>.etcd`) and logs (`m<i>.log`). Removed after the members stop.
    dir: TempDir,
}

impl Etcd {
    /// Starts members m1..m3 on [`MEMBERS`] in `hub`'s namespace as a new cluster and waits
    /// (up to 20 s) until all three report healthy.
    pub fn start(hub: &Hub) -> Etcd {
        Etcd::start_with(hub, &[])
    }

    /// Like [`Etcd::start`], with more etcd flags for every member (also on a restart),
    /// e.g. `["--heartbeat-interval", "50", "--election-timeout", "500"]`.
    pub fn start_with(hub: &Hub, extra: &[&str]) -> Etcd {
        let k = NEXT_ETCD.fetch_add(1, Ordering::Relaxed);
        let mut etcd = Etcd {
            ns: hub.ns.clone(),
            extra: extra.iter().map(ToString::to_string).collect(),
            token: pins::name(PREFIX, format!("etcd{k}")),
            members: (0..MEMBERS.len()).map(|_| Member { child: None }).collect(),
            dir: TempDir::new(PREFIX, &format!("etcd{k}")),
        };
        for i in 0..MEMBERS.len() {
            etcd.spawn(i, "new");
        }
        etcd.wait_healthy(&etcd.endpoints(), "the cluster");
        etcd
    }

    fn name(i: usize) -> String {
        format!("m{}", i + 1)
    }

    /// Member `i`'s data directory.
    pub fn data_dir(&self, i: usize) -> std::path::PathBuf {
        self.dir.path(&format!("{}.etcd", Etcd::name(i)))
    }

    fn log_path(&self, i: usize) -> std::path::PathBuf {
        self.dir.path(&format!("{}.log", Etcd::name(i)))
    }

    fn spawn(&mut self, i: usize, state: &str) {
        assert!(
            self.members[i].child.is_none(),
            "etcd member {i} already runs"
        );
        let url = |port: u16| format!("http://{}:{port}", MEMBERS[i]);
        let cluster: Vec<String> = MEMBERS
            .iter()
            .enumerate()
            .map(|(j, a)| format!("{}=http://{a}:{PEER_PORT}", Etcd::name(j)))
            .collect();
        // Appending: a restarted member's log follows its first life's.
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(i))
            .unwrap_or_else(|e| panic!("opening {}: {e}", self.log_path(i).display()));
        let mut cmd = nsenter(&self.ns, "etcd");
        clear_etcd_env(&mut cmd);
        // nsenter execs etcd: the child's pid is the member's.
        cmd.arg("--name")
            .arg(Etcd::name(i))
            .arg("--data-dir")
            .arg(self.data_dir(i))
            .args(["--listen-client-urls", &url(CLIENT_PORT)])
            .args(["--advertise-client-urls", &url(CLIENT_PORT)])
            .args(["--listen-peer-urls", &url(PEER_PORT)])
            .args(["--initial-advertise-peer-urls", &url(PEER_PORT)])
            .args(["--initial-cluster", &cluster.join(",")])
            .args(["--initial-cluster-state", state])
            .args(["--initial-cluster-token", &self.token])
            .args(["--logger", "zap", "--log-outputs", "stderr"])
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("cloning the log's handle"))
            .stderr(log);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("starting etcd member {i}: {e}"));
        self.members[i].child = Some(child);
    }

    /// Member `i`'s client endpoint, `198.51.100.(i+1):2379`.
    pub fn endpoint(i: usize) -> String {
        format!("{}:{CLIENT_PORT}", MEMBERS[i])
    }

    /// Every member's client endpoint, comma-separated (etcdctl's `--endpoints`).
    pub fn endpoints(&self) -> String {
        (0..MEMBERS.len())
            .map(Etcd::endpoint)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The endpoints of the members this harness has not killed.
    pub fn live_endpoints(&self) -> String {
        self.live()
            .map(Etcd::endpoint)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `etcd://` and [`Etcd::endpoints`]: the store's URL for director's config.
    pub fn url(&self) -> String {
        format!("etcd://{}", self.endpoints())
    }

    /// Whether member `i` runs (it was not killed, or was restarted since).
    pub fn is_running(&self, i: usize) -> bool {
        self.members[i].child.is_some()
    }

    fn live(&self) -> impl Iterator<Item = usize> + '_ {
        (0..MEMBERS.len()).filter(|&i| self.is_running(i))
    }

    /// Member `i`'s pid, while it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.members[i].child.as_ref().map(Child::id)
    }

    /// Member `i`'s log (all its lives).
    pub fn log(&self, i: usize) -> String {
        fs::read_to_string(self.log_path(i)).unwrap_or_default()
    }

    /// The last lines of every member's log, for failure messages.
    pub fn log_tails(&self, lines: usize) -> String {
        (0..MEMBERS.len())
            .map(|i| {
                let log = self.log(i);
                let all: Vec<&str> = log.lines().collect();
                let tail = all[all.len().saturating_sub(lines)..].join("\n");
                format!("--- {} ({}) log tail\n{tail}\n", Etcd::name(i), MEMBERS[i])
            })
            .collect()
    }

    /// SIGKILL to member `i` (by its pid), and waits for it: no chance to say goodbye.
    pub fn kill(&mut self, i: usize) {
        let mut child = self.members[i]
            .child
            .take()
            .unwrap_or_else(|| panic!("etcd member {i} does not run"));
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Starts member `i` again on its data directory (`--initial-cluster-state existing`)
    /// and waits (up to 20 s) until every running member reports healthy.
    pub fn restart(&mut self, i: usize) {
        self.spawn(i, "existing");
        self.wait_healthy(
            &self.live_endpoints(),
            &format!("member {i} after a restart"),
        );
    }

    /// Polls `etcdctl endpoint health` on `endpoints` until it succeeds; panics with the
    /// logs' tails if a member exits or 20 s pass.
    fn wait_healthy(&mut self, endpoints: &str, what: &str) {
        let deadline = Instant::now() + HEALTHY_WITHIN;
        loop {
            for i in 0..MEMBERS.len() {
                if let Some(child) = self.members[i].child.as_mut() {
                    if let Ok(Some(st)) = child.try_wait() {
                        self.members[i].child = None;
                        panic!(
                            "etcd member {i} exited ({st}) while waiting for {what} to be \
                             healthy\n{}",
                            self.log_tails(30)
                        );
                    }
                }
            }
            let out = self.ctl_at(
                &self.ns,
                endpoints,
                &[
                    "--dial-timeout",
                    "1s",
                    "--command-timeout",
                    "2s",
                    "endpoint",
                    "health",
                ],
            );
            if out.status.success() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what} not healthy within {HEALTHY_WITHIN:?}: {}\n{}",
                describe(&out),
                self.log_tails(30)
            );
            sleep(Duration::from_millis(100));
        }
    }

    /// The index of the member that leads, as the running members report it
    /// (`etcdctl endpoint status -w json`); None while there is no leader, or when the
    /// leader is not among the running members.
    pub fn leader(&self) -> Option<usize> {
        let live = self.live_endpoints();
        if live.is_empty() {
            return None;
        }
        let out = self.ctl_at(
            &self.ns,
            &live,
            &[
                "--dial-timeout",
                "1s",
                "--command-timeout",
                "2s",
                "endpoint",
                "status",
                "-w",
                "json",
            ],
        );
        // Endpoints that fail are reported on stderr; stdout lists the others.
        let statuses: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        statuses.as_array()?.iter().find_map(|s| {
            let status = &s["Status"];
            let me = status["header"]["member_id"].as_u64()?;
            let leader = status["leader"].as_u64()?;
            if me != leader || leader == 0 {
                return None;
            }
            let endpoint = s["Endpoint"].as_str()?;
            (0..MEMBERS.len()).find(|&i| Etcd::endpoint(i) == endpoint)
        })
    }

    /// Waits until a running member leads and returns its index; panics after `within`.
    pub fn wait_leader(&self, within: Duration) -> usize {
        let deadline = Instant::now() + within;
        loop {
            if let Some(l) = self.leader() {
                return l;
            }
            assert!(
                Instant::now() < deadline,
                "no etcd leader within {within:?}\n{}",
                self.log_tails(30)
            );
            sleep(Duration::from_millis(100));
        }
    }

    /// `etcdctl ARGS` (v3 API) in the hub's namespace against [`Etcd::endpoints`].
    pub fn ctl(&self, args: &[&str]) -> Output {
        self.ctl_at(&self.ns, &self.endpoints(), args)
    }

    /// Like [`Etcd::ctl`], panicking unless it succeeds; returns stdout.
    pub fn ctl_ok(&self, args: &[&str]) -> String {
        let out = self.ctl(args);
        assert!(
            out.status.success(),
            "etcdctl {args:?} failed: {}",
            describe(&out)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `etcdctl ARGS` in the network namespace `ns` (e.g. a lab's edge) against
    /// [`Etcd::endpoints`].
    pub fn ctl_in(&self, ns: &str, args: &[&str]) -> Output {
        self.ctl_at(ns, &self.endpoints(), args)
    }

    /// `etcdctl --endpoints ENDPOINTS ARGS` in `ns` (e.g. only some members: etcdctl adds a
    /// second `--endpoints` to the first rather than replacing it).
    pub fn ctl_at(&self, ns: &str, endpoints: &str, args: &[&str]) -> Output {
        let mut cmd = nsenter(ns, "etcdctl");
        clear_etcd_env(&mut cmd);
        run(cmd
            .env("ETCDCTL_API", "3")
            .arg("--endpoints")
            .arg(endpoints)
            .args(args))
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        // Only the members this harness started, by their pids.
        for m in &mut self.members {
            if let Some(mut child) = m.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        // `dir` (data directories and logs) is removed when the fields drop, after this.
    }
}

/// etcd and etcdctl read `ETCD_*` / `ETCDCTL_*` variables as flags; none of the caller's
/// may leak into the cluster.
fn clear_etcd_env(cmd: &mut Command) {
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("ETCD") {
            cmd.env_remove(k);
        }
    }
}

/// A publisher's signing key and the edges' trust file holding its line, made by the
/// real `director-ctl fleet keygen` in `dir`: every fleet a test starts signs its versions
/// and overlays, as a real one must.
pub struct Keys {
    /// The private key (`--sign-key`).
    pub key: std::path::PathBuf,
    /// The trust file (`--trust`): this key's line, more with [`Keys::trust_also`].
    pub trust: std::path::PathBuf,
    /// The key's trust file line.
    pub line: String,
}

impl Keys {
    /// `dir/<name>.key`, its line in `dir/<name>.pub`, and the trust file `dir/<name>.trust`.
    pub fn make(dir: &std::path::Path, name: &str) -> Keys {
        let key = dir.join(format!("{name}.key"));
        let out = run(Command::new(crate::netns::ctl_binary())
            .args(["fleet", "keygen", "--out"])
            .arg(&key)
            .args(["--name", name]));
        assert!(out.status.success(), "fleet keygen: {}", describe(&out));
        let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(
            line.starts_with("ed25519 "),
            "fleet keygen printed {line:?}"
        );
        let trust = dir.join(format!("{name}.trust"));
        crate::tempdir::replace_file(&trust, &format!("{line}\n"));
        Keys { key, trust, line }
    }

    /// The publisher's arguments.
    pub fn sign_args(&self) -> [String; 2] {
        ["--sign-key".into(), self.key.display().to_string()]
    }

    /// The edge's arguments.
    pub fn trust_args(&self) -> [String; 2] {
        ["--trust".into(), self.trust.display().to_string()]
    }

    /// Writes the trust file with these lines (a rotation adds and removes keys).
    pub fn trust_lines(&self, lines: &[&str]) {
        crate::tempdir::replace_file(&self.trust, &format!("{}\n", lines.join("\n")));
    }
}
