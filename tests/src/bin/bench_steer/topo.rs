//! The namespaces, addresses and edges the wire sections share (S2 HTTP, S3 SYN flood):
//! a bridge with the client, the edge and three nginx servers, and the edge set up as
//! director (l2), nftables DNAT or HAProxy.
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
//! Each nginx names itself in an `X-Server: sN` header. Placement: CPU 1 holds the edge
//! alone (its NAPI thread, HAProxy); CPU 0 everything else (clients, nginx, the bridge's
//! NAPI thread).

use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use director_tests::bench::sys;
use director_tests::netns::ctl_binary;
use director_tests::pins;
use director_tests::tempdir::TempDir;

pub(crate) const CLIENT_CPU: usize = 0;
pub(crate) const EDGE_CPU: usize = 1;
pub(crate) const VIP: &str = "203.0.113.80";
pub(crate) const CLIENT: &str = "198.51.100.2";
pub(crate) const EDGE: &str = "198.51.100.1";
pub(crate) const SERVERS: [&str; 3] = ["198.51.100.11", "198.51.100.12", "198.51.100.13"];
pub(crate) const BRIDGE_NS: &str = "bs-br";
pub(crate) const CLIENT_NS: &str = "bs-cli";
pub(crate) const EDGE_NS: &str = "bs-edge";
pub(crate) const CLIENT_IF: &str = "bs-cli0";
pub(crate) const EDGE_IF: &str = "bs-edge0";
/// The bridge's port toward the edge: director's XDP_TX frames arrive here, which a veth
/// only delivers to a peer that runs an XDP program.
pub(crate) const EDGE_PORT: &str = "bs-pedge";
pub(crate) const SERVICE: &str = "web.bench.example";
/// The static body each server answers (a small page).
pub(crate) const BODY: &str = "<html><body>director bench: a small static page</body></html>\n";

pub(crate) fn server_ns(i: usize) -> String {
    format!("bs-s{}", i + 1)
}

pub(crate) fn ip(args: &[&str]) -> Result<String> {
    sys::run_ok(Command::new("ip").args(args))
}

/// `sysctl -w` in a namespace.
pub(crate) fn sysctl(ns: &str, settings: &[&str]) -> Result<()> {
    for s in settings {
        sys::run_ok(sys::netns_exec(ns, "sysctl").args(["-q", "-w", s]))?;
    }
    Ok(())
}

/// The topology and everything started in it; drop stops the processes (by pid), detaches
/// director, deletes the namespaces and removes the pins, also on an error or a panic.
pub(crate) struct Topo {
    pub(crate) dir: TempDir,
    pub(crate) pin_dir: PathBuf,
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
pub(crate) fn stop(c: &mut Child) {
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
    pub(crate) fn ctl(&self, ns: &str, args: &[&str]) -> Result<String> {
        sys::run_ok(
            sys::nsenter(ns, &ctl_binary().to_string_lossy())
                .arg("--pin-dir")
                .arg(&self.pin_dir)
                .args(args),
        )
    }

    pub(crate) fn new() -> Result<Topo> {
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
               server {{ listen 80 backlog=4096; root {d}/www; add_header X-Server s{n}; }}\n}}\n",
            d = dir.display(),
            n = i + 1
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

    /// Where answers to addresses of `net` (a SYN flood's sources) go: from the edge to the
    /// client, whose namespace forwards nothing and drops them (the edge pays for sending
    /// them, as it would on a real link); from the servers via the edge where it must see
    /// them to un-NAT them (`via_edge`), else into a blackhole (a DSR server's SYN-ACKs
    /// leave by a router the edge never sees).
    pub(crate) fn route_replies_to(&self, net: &str, via_edge: bool) -> Result<()> {
        ip(&["-n", EDGE_NS, "route", "replace", net, "via", CLIENT])?;
        for i in 0..3 {
            let ns = server_ns(i);
            if via_edge {
                ip(&["-n", &ns, "route", "replace", net, "via", EDGE])?;
            } else {
                ip(&["-n", &ns, "route", "replace", "blackhole", net])?;
            }
        }
        Ok(())
    }

    pub(crate) fn setup_edge(&mut self, e: Edge) -> Result<()> {
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

    pub(crate) fn teardown_edge(&mut self, e: Edge) -> Result<()> {
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
    pub(crate) fn edge_threads(&self) -> Result<Vec<u32>> {
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

pub(crate) fn edge_rx_packets() -> Result<u64> {
    edge_rx("packets")
}

/// A receive counter of bs-edge0 (`packets`, `dropped`: on a veth, also the frames that
/// found its ring full).
pub(crate) fn edge_rx(field: &str) -> Result<u64> {
    let out = ip(&["-n", EDGE_NS, "-s", "-j", "link", "show", "dev", EDGE_IF])?;
    let v: serde_json::Value = serde_json::from_str(&out)?;
    v[0]["stats64"]["rx"][field]
        .as_u64()
        .with_context(|| format!("no rx {field} in ip -s -j link"))
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Edge {
    Director,
    Nat,
    Haproxy,
}

impl Edge {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Edge::Director => "director XDP, l2 (DSR)",
            Edge::Nat => "nftables DNAT",
            Edge::Haproxy => "HAProxy, TCP mode",
        }
    }
}
