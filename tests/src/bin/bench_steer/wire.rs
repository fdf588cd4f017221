//! Section 2: HTTP to a VIP through three edges in turn, with wrk and three nginx servers,
//! and what each edge spends per connection.
//!
//! ```text
//!   bs-cli  bs-cli0 198.51.100.2 ─┐
//!   bs-edge bs-edge0 198.51.100.1 ─┤  bridge br0 in bs-br (ports bs-p*)
//!   bs-s1..3 bs-sNe 198.51.100.1N ─┘  203.0.113.80/32 on lo (arp_ignore=1, arp_announce=2)
//! ```
//!
//! The client routes the VIP 203.0.113.80 via the edge. Edges:
//! - director in l2 mode on bs-edge0: SYNs and the rest of each connection go out again
//!   (XDP_TX) to the chosen server's MAC; the server answers the client directly (DSR);
//! - nftables DNAT (`numgen random mod 3`): the servers route the client via the edge, so
//!   replies come back through it to be un-NATed;
//! - HAProxy in TCP mode, the VIP on the edge's lo: two connections per request.
//!
//! Placement: CPU 1 holds the edge alone (its NAPI thread, HAProxy); CPU 0 everything else
//! (wrk, nginx, the bridge's NAPI thread). Edge CPU = the schedstat of bs-edge0's threaded
//! NAPI thread (+ HAProxy's threads); CPU 1's busy time, from its idle time, is printed
//! beside it as a check (it also catches softirq work outside those threads).

use std::fmt::Write as _;
use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use director_tests::netns::ctl_binary;
use director_tests::pins;

use director_tests::bench::sys;
use director_tests::bench::table::{thousands, Spread, Table};
use director_tests::tempdir::TempDir;

const CLIENT_CPU: usize = 0;
const EDGE_CPU: usize = 1;
const VIP: &str = "203.0.113.80";
const CLIENT: &str = "198.51.100.2";
const EDGE: &str = "198.51.100.1";
const SERVERS: [&str; 3] = ["198.51.100.11", "198.51.100.12", "198.51.100.13"];
const BRIDGE_NS: &str = "bs-br";
const CLIENT_NS: &str = "bs-cli";
const EDGE_NS: &str = "bs-edge";
const CLIENT_IF: &str = "bs-cli0";
const EDGE_IF: &str = "bs-edge0";
/// The bridge's port toward the edge: director's XDP_TX frames arrive here, which a veth
/// only delivers to a peer that runs an XDP program.
const EDGE_PORT: &str = "bs-pedge";
const SERVICE: &str = "web.bench.example";
const CONNECTIONS: &str = "50";
/// The static body each server answers (a small page).
const BODY: &str = "<html><body>director bench: a small static page</body></html>\n";

fn server_ns(i: usize) -> String {
    format!("bs-s{}", i + 1)
}

fn ip(args: &[&str]) -> Result<String> {
    sys::run_ok(Command::new("ip").args(args))
}

/// `sysctl -w` in a namespace.
fn sysctl(ns: &str, settings: &[&str]) -> Result<()> {
    for s in settings {
        sys::run_ok(sys::netns_exec(ns, "sysctl").args(["-q", "-w", s]))?;
    }
    Ok(())
}

/// The topology and everything started in it; drop stops the processes (by pid), detaches
/// director, deletes the namespaces and removes the pins, also on an error or a panic.
struct Topo {
    dir: TempDir,
    pin_dir: PathBuf,
    nginx: Vec<Child>,
    haproxy: Option<Child>,
    namespaces: Vec<String>,
}

impl Drop for Topo {
    fn drop(&mut self) {
        if let Some(mut h) = self.haproxy.take() {
            stop(&mut h);
        }
        for n in &mut self.nginx {
            stop(n);
        }
        let _ = self.ctl(EDGE_NS, &["detach", "--iface", EDGE_IF]);
        let _ = self.ctl(BRIDGE_NS, &["veth-peer", "--iface", EDGE_PORT, "--detach"]);
        for ns in self.namespaces.iter().rev() {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status();
        }
        pins::remove(&self.pin_dir);
        pins::remove(&pins::pass_dir(&self.pin_dir));
    }
}

/// SIGTERM to a process we started, SIGKILL if it is not gone in 3 s.
fn stop(c: &mut Child) {
    if let Ok(Some(_)) = c.try_wait() {
        return;
    }
    // SAFETY: a plain kill(2) of our own child's pid, which we have not reaped yet.
    unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = c.try_wait() {
            return;
        }
        sleep(Duration::from_millis(20));
    }
    let _ = c.kill();
    let _ = c.wait();
}

impl Topo {
    fn ctl(&self, ns: &str, args: &[&str]) -> Result<String> {
        sys::run_ok(
            sys::nsenter(ns, &ctl_binary().to_string_lossy())
                .arg("--pin-dir")
                .arg(&self.pin_dir)
                .args(args),
        )
    }

    fn new() -> Result<Topo> {
        // A run that was killed (no drop) leaves its namespaces: they are ours by name.
        let list = ip(&["netns", "list"])?;
        for line in list.lines() {
            let name = line.split_whitespace().next().unwrap_or("");
            if name.starts_with("bs-") {
                eprintln!("removing namespace {name} left by an earlier bench_steer run");
                let _ = ip(&["netns", "del", name]);
            }
        }
        let pin_dir = pins::dir("bs-director");
        pins::remove(&pin_dir);
        pins::remove(&pins::pass_dir(&pin_dir));
        let mut t = Topo {
            dir: TempDir::new("bs", "bench"),
            pin_dir,
            nginx: Vec::new(),
            haproxy: None,
            namespaces: Vec::new(),
        };
        let mut all = vec![BRIDGE_NS.to_string(), CLIENT_NS.into(), EDGE_NS.into()];
        all.extend((0..3).map(server_ns));
        for ns in &all {
            ip(&["netns", "add", ns])?;
            t.namespaces.push(ns.clone());
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        ip(&[
            "-n",
            BRIDGE_NS,
            "link",
            "add",
            "br0",
            "type",
            "bridge",
            "forward_delay",
            "0",
        ])?;
        ip(&["-n", BRIDGE_NS, "link", "set", "br0", "up"])?;
        let mut hosts = vec![
            (
                CLIENT_NS.to_string(),
                CLIENT_IF.to_string(),
                "bs-pcli".to_string(),
                CLIENT,
            ),
            (EDGE_NS.into(), EDGE_IF.into(), EDGE_PORT.into(), EDGE),
        ];
        for (i, addr) in SERVERS.iter().enumerate() {
            hosts.push((
                server_ns(i),
                format!("bs-s{}e", i + 1),
                format!("bs-ps{}", i + 1),
                *addr,
            ));
        }
        for (ns, ifname, port, addr) in &hosts {
            ip(&[
                "link", "add", ifname, "netns", ns, "type", "veth", "peer", "name", port, "netns",
                BRIDGE_NS,
            ])?;
            ip(&["-n", BRIDGE_NS, "link", "set", port, "master", "br0", "up"])?;
            ip(&[
                "-n",
                ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                ifname,
            ])?;
            ip(&["-n", ns, "link", "set", ifname, "up"])?;
            sysctl(
                ns,
                &[
                    "net.ipv4.conf.all.rp_filter=0",
                    "net.ipv4.conf.default.rp_filter=0",
                ],
            )?;
        }
        // Offloads stay at their defaults but for the client's: a CHECKSUM_PARTIAL packet that
        // director forwards with XDP_TX leaves with a checksum never completed.
        sys::run_ok(sys::nsenter(CLIENT_NS, "ethtool").args(["-K", CLIENT_IF, "tx", "off"]))?;
        ip(&[
            "-n",
            CLIENT_NS,
            "route",
            "add",
            &format!("{VIP}/32"),
            "via",
            EDGE,
        ])?;
        sysctl(
            CLIENT_NS,
            &[
                "net.ipv4.ip_local_port_range=1024 65000",
                "net.ipv4.tcp_tw_reuse=1",
            ],
        )?;
        sysctl(
            EDGE_NS,
            &[
                "net.ipv4.ip_forward=1",
                // The client and the servers share the edge's segment: a forwarded packet
                // would earn its sender a redirect past the edge.
                "net.ipv4.conf.all.send_redirects=0",
                &format!("net.ipv4.conf.{EDGE_IF}.send_redirects=0"),
                "net.ipv4.ip_local_port_range=1024 65000",
            ],
        )?;
        for i in 0..3 {
            let ns = server_ns(i);
            let dev = format!("bs-s{}e", i + 1);
            ip(&["-n", &ns, "addr", "add", &format!("{VIP}/32"), "dev", "lo"])?;
            sysctl(
                &ns,
                &[
                    "net.ipv4.conf.all.arp_ignore=1",
                    "net.ipv4.conf.all.arp_announce=2",
                    &format!("net.ipv4.conf.{dev}.arp_ignore=1"),
                    &format!("net.ipv4.conf.{dev}.arp_announce=2"),
                    "net.ipv4.conf.all.accept_redirects=0",
                ],
            )?;
            t.start_nginx(i)?;
        }
        // The edge's NAPI thread on the edge's CPU; the bridge port's (director's XDP_TX
        // frames land there, and it carries the bridge and the servers' receive path) off it.
        sys::run_ok(sys::nsenter(EDGE_NS, "ethtool").args(["-K", EDGE_IF, "gro", "on"]))?;
        // A veth without XDP takes a packet into its NAPI only if the sending end has no TSO;
        // otherwise it goes to the backlog of the sender's CPU, and the edge's forwarding (DNAT)
        // would run in the bridge's thread on CPU 0, billed to nobody's edge.
        sys::run_ok(sys::nsenter(BRIDGE_NS, "ethtool").args(["-K", EDGE_PORT, "tso", "off"]))?;
        t.ctl(BRIDGE_NS, &["veth-peer", "--iface", EDGE_PORT])?;
        let edge_napi = sys::threaded_napi(EDGE_NS, EDGE_IF)?;
        sys::pin_to_cpu(edge_napi, EDGE_CPU)?;
        let port_napi = sys::threaded_napi(BRIDGE_NS, EDGE_PORT)?;
        sys::pin_to_cpu(port_napi, CLIENT_CPU)?;
        t.wait_reachable()?;
        Ok(t)
    }

    fn start_nginx(&mut self, i: usize) -> Result<()> {
        let dir = self.dir.path(&format!("s{}", i + 1));
        fs::create_dir_all(dir.join("www"))?;
        fs::create_dir_all(dir.join("logs"))?;
        fs::write(dir.join("www/index.html"), BODY)?;
        let conf = format!(
            "worker_processes 1;\nuser root;\npid {d}/nginx.pid;\nerror_log {d}/logs/error.log;\n\
             events {{ worker_connections 8192; }}\n\
             http {{\n  access_log off;\n  default_type text/html;\n  keepalive_requests 1000000;\n\
               server {{ listen 80 backlog=4096; root {d}/www; }}\n}}\n",
            d = dir.display()
        );
        fs::write(dir.join("nginx.conf"), conf)?;
        let child = sys::nsenter(&server_ns(i), "taskset")
            .args(["-c", &CLIENT_CPU.to_string(), "nginx", "-p"])
            .arg(&dir)
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .args(["-g", "daemon off;"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(dir.join("logs/stderr"))?)
            .spawn()
            .context("starting nginx")?;
        self.nginx.push(child);
        Ok(())
    }

    /// Every server answers HTTP on its own address from the edge (nginx is up, ARP done).
    fn wait_reachable(&mut self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        for s in SERVERS {
            loop {
                let ok = sys::nsenter(EDGE_NS, "curl")
                    .args(["-s", "-m", "1", "-o", "/dev/null", &format!("http://{s}/")])
                    .stdin(Stdio::null())
                    .status()
                    .is_ok_and(|st| st.success());
                if ok {
                    break;
                }
                for c in &mut self.nginx {
                    if let Some(st) = c.try_wait()? {
                        bail!("nginx exited ({st}): see its stderr");
                    }
                }
                ensure!(
                    Instant::now() < deadline,
                    "server {s} unreachable after 10 s"
                );
                sleep(Duration::from_millis(100));
            }
        }
        Ok(())
    }

    /// Replies from the servers to the client: through the edge (NAT, which must see
    /// them), or directly (DSR, and the proxy's own connections).
    fn servers_reply_via_edge(&self, via_edge: bool) -> Result<()> {
        for i in 0..3 {
            let ns = server_ns(i);
            if via_edge {
                ip(&[
                    "-n",
                    &ns,
                    "route",
                    "replace",
                    &format!("{CLIENT}/32"),
                    "via",
                    EDGE,
                ])?;
            } else {
                let _ = Command::new("ip")
                    .args(["-n", &ns, "route", "del", &format!("{CLIENT}/32")])
                    .stderr(Stdio::null())
                    .status();
            }
        }
        Ok(())
    }

    fn setup_edge(&mut self, e: Edge) -> Result<()> {
        match e {
            Edge::Director => {
                self.servers_reply_via_edge(false)?;
                self.ctl(EDGE_NS, &["attach", "--iface", EDGE_IF, "--mode", "native"])?;
                for (i, s) in SERVERS.iter().enumerate() {
                    self.ctl(
                        EDGE_NS,
                        &["server", "add", &format!("s{}", i + 1), "--ipv4", s],
                    )?;
                }
                let vip = format!("{VIP}:80");
                let out = self.ctl(
                    EDGE_NS,
                    &["service", "add", SERVICE, "--vip", &vip, "--mode", "l2"],
                )?;
                if !out.trim().is_empty() {
                    eprintln!("{out}");
                }
                self.ctl(EDGE_NS, &["route", "set", SERVICE, "0.0.0.0/0", "s1,s2,s3"])?;
            }
            Edge::Nat => {
                self.servers_reply_via_edge(true)?;
                let rules = format!(
                    "table ip bs_nat {{\n  chain pre {{\n    type nat hook prerouting priority dstnat;\n\
                       ip daddr {VIP} tcp dport 80 dnat to numgen random mod 3 map {{ 0 : {}, 1 : {}, 2 : {} }}\n\
                     }}\n}}\n",
                    SERVERS[0], SERVERS[1], SERVERS[2]
                );
                let file = self.dir.path("nat.nft");
                fs::write(&file, rules)?;
                sys::run_ok(sys::nsenter(EDGE_NS, "nft").arg("-f").arg(&file))?;
                // Connection: close leaves one TIME_WAIT entry per request: short-lived here,
                // or the table fills within a run and new connections are dropped.
                sysctl(
                    EDGE_NS,
                    &[
                        "net.netfilter.nf_conntrack_tcp_timeout_time_wait=1",
                        "net.netfilter.nf_conntrack_tcp_timeout_close=1",
                    ],
                )?;
            }
            Edge::Haproxy => {
                self.servers_reply_via_edge(false)?;
                ip(&[
                    "-n",
                    EDGE_NS,
                    "addr",
                    "add",
                    &format!("{VIP}/32"),
                    "dev",
                    "lo",
                ])?;
                let cfg = format!(
                    "global\n  nbthread 1\n  maxconn 8000\n\
                     defaults\n  mode tcp\n  timeout connect 2s\n  timeout client 10s\n  timeout server 10s\n\
                     frontend f\n  bind {VIP}:80\n  default_backend b\n\
                     backend b\n  balance roundrobin\n  server s1 {}:80\n  server s2 {}:80\n  server s3 {}:80\n",
                    SERVERS[0], SERVERS[1], SERVERS[2]
                );
                let file = self.dir.path("haproxy.cfg");
                fs::write(&file, cfg)?;
                let child = sys::nsenter(EDGE_NS, "taskset")
                    .args(["-c", &EDGE_CPU.to_string(), "haproxy", "-db", "-f"])
                    .arg(&file)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(fs::File::create(self.dir.path("haproxy.err"))?)
                    .spawn()
                    .context("starting haproxy")?;
                self.haproxy = Some(child);
            }
        }
        // The edge answers on the VIP: the first request may wait for ARP and the program.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let r = sys::run_ok(sys::nsenter(CLIENT_NS, "curl").args([
                "-s",
                "-m",
                "2",
                &format!("http://{VIP}/"),
            ]));
            match r {
                Ok(body) if body == BODY => return Ok(()),
                _ if Instant::now() < deadline => sleep(Duration::from_millis(200)),
                r => bail!(
                    "{}: no page from the VIP through the edge after 10 s ({}); haproxy: {}",
                    e.name(),
                    r.map_or_else(|e| format!("{e:#}"), |b| format!("body {b:?}")),
                    fs::read_to_string(self.dir.path("haproxy.err")).unwrap_or_default()
                ),
            }
        }
    }

    fn teardown_edge(&mut self, e: Edge) -> Result<()> {
        match e {
            Edge::Director => {
                self.ctl(EDGE_NS, &["detach", "--iface", EDGE_IF])?;
            }
            Edge::Nat => {
                sys::run_ok(
                    sys::nsenter(EDGE_NS, "nft").args(["delete", "table", "ip", "bs_nat"]),
                )?;
                self.servers_reply_via_edge(false)?;
            }
            Edge::Haproxy => {
                if let Some(mut h) = self.haproxy.take() {
                    stop(&mut h);
                }
                ip(&[
                    "-n",
                    EDGE_NS,
                    "addr",
                    "del",
                    &format!("{VIP}/32"),
                    "dev",
                    "lo",
                ])?;
            }
        }
        Ok(())
    }

    /// The edge's threads now: bs-edge0's NAPI thread (a new one when an XDP program comes
    /// or goes), pinned to the edge's CPU, and HAProxy's.
    fn edge_threads(&self) -> Result<Vec<u32>> {
        let napi = sys::current_napi(EDGE_IF)?;
        sys::pin_to_cpu(napi, EDGE_CPU)?;
        let mut t = vec![napi];
        if let Some(h) = &self.haproxy {
            for tid in sys::threads(h.id()) {
                sys::pin_to_cpu(tid, EDGE_CPU)?;
                t.push(tid);
            }
        }
        Ok(t)
    }
}

fn edge_rx_packets() -> Result<u64> {
    let out = ip(&["-n", EDGE_NS, "-s", "-j", "link", "show", "dev", EDGE_IF])?;
    let v: serde_json::Value = serde_json::from_str(&out)?;
    v[0]["stats64"]["rx"]["packets"]
        .as_u64()
        .context("no rx packets in ip -s -j link")
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Edge {
    Director,
    Nat,
    Haproxy,
}

impl Edge {
    fn name(self) -> &'static str {
        match self {
            Edge::Director => "director XDP, l2 (DSR)",
            Edge::Nat => "nftables DNAT",
            Edge::Haproxy => "HAProxy, TCP mode",
        }
    }
}

/// What wrk reported for one run, and what the edge spent meanwhile.
struct Sample {
    requests: u64,
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
    errors: u64,
    edge_ns: u64,
    cpu1_busy_ns: u64,
    wall_ns: u64,
    packets: u64,
}

/// wrk's text: "N requests in", "Requests/sec:", the latency distribution, errors.
fn parse_wrk(out: &str) -> Result<(u64, f64, f64, f64, u64)> {
    let mut requests = None;
    let mut rps = None;
    let (mut p50, mut p99) = (None, None);
    let mut errors = 0;
    let ms = |v: &str| -> Option<f64> {
        let (num, scale) = if let Some(n) = v.strip_suffix("us") {
            (n, 1e-3)
        } else if let Some(n) = v.strip_suffix("ms") {
            (n, 1.0)
        } else if let Some(n) = v.strip_suffix('s') {
            (n, 1e3)
        } else {
            (v, 1.0)
        };
        num.parse::<f64>().ok().map(|x| x * scale)
    };
    for line in out.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            [n, "requests", "in", ..] => requests = n.parse().ok(),
            ["Requests/sec:", v] => rps = v.parse().ok(),
            ["50%", v] => p50 = ms(v),
            ["99%", v] => p99 = ms(v),
            ["Socket", "errors:", rest @ ..] => {
                errors += rest
                    .iter()
                    .filter_map(|x| x.trim_end_matches(',').parse::<u64>().ok())
                    .sum::<u64>();
            }
            ["Non-2xx", "or", "3xx", "responses:", n] => errors += n.parse::<u64>().unwrap_or(0),
            _ => {}
        }
    }
    match (requests, rps, p50, p99) {
        (Some(r), Some(s), Some(a), Some(b)) => Ok((r, s, a, b, errors)),
        _ => bail!("cannot read wrk's output:\n{out}"),
    }
}

fn wrk_once(t: &Topo, edge: Edge, close: bool, seconds: u32, log: &mut String) -> Result<Sample> {
    let tids = t.edge_threads()?;
    let mut cmd = sys::nsenter(CLIENT_NS, "taskset");
    cmd.args([
        "-c",
        &CLIENT_CPU.to_string(),
        "wrk",
        "-t",
        "1",
        "-c",
        CONNECTIONS,
        "-d",
        &format!("{seconds}s"),
        "--latency",
    ]);
    if close {
        cmd.args(["-H", "Connection: close"]);
    }
    cmd.arg(format!("http://{VIP}/"));
    let (cpu0, idle0, pk0, t0) = (
        sys::cpu_ns(&tids),
        sys::cpu_idle_ns(EDGE_CPU)?,
        edge_rx_packets()?,
        Instant::now(),
    );
    let done = sys::run_bounded(
        cmd,
        t.dir.root(),
        "wrk",
        Duration::from_secs(seconds as u64 + 15),
    )?;
    let wall_ns = t0.elapsed().as_nanos() as u64;
    let (cpu1, idle1, pk1) = (
        sys::cpu_ns(&tids),
        sys::cpu_idle_ns(EDGE_CPU)?,
        edge_rx_packets()?,
    );
    ensure!(
        done.success,
        "wrk through {} failed ({}): {}{}",
        edge.name(),
        done.status,
        done.stdout,
        done.stderr
    );
    let (requests, rps, p50_ms, p99_ms, errors) = parse_wrk(&done.stdout)?;
    ensure!(
        cpu1 > cpu0 && pk1 > pk0,
        "{}: the edge's threads {tids:?} ran {} ns for {} packets: not the threads that \
         carry its traffic",
        edge.name(),
        cpu1 - cpu0,
        pk1 - pk0
    );
    let _ = writeln!(
        log,
        "{} ({}): {requests} requests, {errors} errors",
        edge.name(),
        if close { "close" } else { "keep-alive" }
    );
    Ok(Sample {
        requests,
        rps,
        p50_ms,
        p99_ms,
        errors,
        edge_ns: cpu1 - cpu0,
        cpu1_busy_ns: wall_ns.saturating_sub(idle1 - idle0),
        wall_ns,
        packets: pk1 - pk0,
    })
}

struct Point {
    edge: Edge,
    close: bool,
    samples: Vec<Sample>,
}

impl Point {
    fn spread(&self, f: impl Fn(&Sample) -> f64) -> Spread {
        Spread::of(&self.samples.iter().map(f).collect::<Vec<_>>())
    }
}

pub fn run(seconds: u32, runs: usize) -> Result<()> {
    eprintln!("building director-ctl for the topology (cargo build -p director-ctl)");
    if std::panic::catch_unwind(ctl_binary).is_err() {
        bail!("no director-ctl to run (see the build error above)");
    }
    eprintln!("section 2: setting up bs-* namespaces, nginx x3");
    let mut t = Topo::new()?;
    let edges = [Edge::Director, Edge::Nat, Edge::Haproxy];
    let mut points: Vec<Point> = edges
        .iter()
        .flat_map(|&edge| {
            [false, true].map(|close| Point {
                edge,
                close,
                samples: Vec::new(),
            })
        })
        .collect();
    let mut log = String::new();
    let mut steer_stats = String::new();
    // Rounds of all three edges rather than each edge's runs together: the machine's other
    // load comes and goes, and then moves every edge's figures alike.
    for round in 1..=runs {
        for edge in edges {
            eprintln!("section 2: round {round} of {runs}: {}", edge.name());
            t.setup_edge(edge)?;
            for p in points.iter_mut().filter(|p| p.edge == edge) {
                p.samples
                    .push(wrk_once(&t, edge, p.close, seconds, &mut log)?);
            }
            if edge == Edge::Director {
                steer_stats = t.ctl(EDGE_NS, &["flows", "stats"])?;
            }
            t.teardown_edge(edge)?;
        }
    }
    drop(t);
    table(&points, seconds, runs).print();
    println!("\n  director's steering counters after its last round (flows stats):");
    for l in steer_stats.lines() {
        println!("    {l}");
    }
    eprint!("{log}");
    Ok(())
}

fn table(points: &[Point], seconds: u32, runs: usize) -> Table {
    let mut t = Table::new(
        format!(
            "S2. HTTP to a VIP through an edge: wrk -t 1 -c {CONNECTIONS} -d {seconds}s, 3 nginx \
             servers, {runs} rounds of the three edges (median, min-max). Edge alone on CPU {EDGE_CPU}; wrk, \
             nginx, bridge on CPU {CLIENT_CPU}. Aim: the least edge CPU per connection."
        ),
        &[
            "edge",
            "requests",
            "req/s",
            "min-max",
            "p50 ms",
            "p99 ms",
            "edge us/req",
            "min-max",
            "edge ns/pkt",
            "pkts/req",
            "edge load",
            "CPU1 busy",
            "errors",
        ],
    );
    let range = |s: Spread, f: &dyn Fn(f64) -> String| format!("{}-{}", f(s.min), f(s.max));
    let us_per_req =
        |ns: fn(&Sample) -> u64| move |s: &Sample| ns(s) as f64 / 1e3 / s.requests.max(1) as f64;
    for p in points {
        let rps = p.spread(|s| s.rps);
        let edge_us = p.spread(us_per_req(|s| s.edge_ns));
        let load = p.spread(|s| s.edge_ns as f64 / s.wall_ns as f64);
        let per_pkt = p.spread(|s| s.edge_ns as f64 / s.packets.max(1) as f64);
        let pkts = p.spread(|s| s.packets as f64 / s.requests.max(1) as f64);
        let busy = p.spread(|s| s.cpu1_busy_ns as f64 / s.wall_ns as f64);
        let errors: u64 = p.samples.iter().map(|s| s.errors).sum();
        t.row(vec![
            p.edge.name().into(),
            if p.close {
                "close (1 conn each)".into()
            } else {
                "keep-alive".into()
            },
            thousands(rps.median as u64),
            range(rps, &|v| thousands(v as u64)),
            format!("{:.2}", p.spread(|s| s.p50_ms).median),
            format!("{:.2}", p.spread(|s| s.p99_ms).median),
            format!("{:.2}", edge_us.median),
            range(edge_us, &|v| format!("{v:.2}")),
            format!("{:.0}", per_pkt.median),
            format!("{:.1}", pkts.median),
            format!("{:.0}%", 100.0 * load.median),
            format!("{:.0}%", 100.0 * busy.median),
            thousands(errors),
        ]);
    }
    for close in [true, false] {
        let of = |e: Edge| {
            points
                .iter()
                .find(|p| p.edge == e && p.close == close)
                .map(|p| p.spread(us_per_req(|s| s.edge_ns)).median)
        };
        if let (Some(d), Some(n), Some(h)) = (of(Edge::Director), of(Edge::Nat), of(Edge::Haproxy))
        {
            t.note(format!(
                "{}: edge CPU per request, director = {:.2}x nftables DNAT's and {:.2}x HAProxy's.",
                if close {
                    "Connection: close (one connection per request)"
                } else {
                    "keep-alive"
                },
                d / n.max(1e-9),
                d / h.max(1e-9)
            ));
        }
    }
    t.note(
        "edge us/req: schedstat of bs-edge0's threaded NAPI thread (+ HAProxy's threads) over the \
         run, per completed request; with close, per connection.",
    );
    t.note(
        "edge ns/pkt: the same time per packet received on bs-edge0 (director sees only the \
         client's half: servers answer directly; DNAT and HAProxy see both).",
    );
    t.note(
        "edge load: those threads' share of one CPU over the run. CPU1 busy: CPU 1's busy time \
         from its idle time: the edge, softirqs and timers, and any other process of the machine.",
    );
    t
}
