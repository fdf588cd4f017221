//! A lab for VIP steering: the two-namespace [`Lab`] (client ↔ edge) plus a server segment,
//! a bridge in a namespace of its own that the edge, the client and three servers are
//! plugged into, each server running nginx with the VIPs on its loopback.
//!
//! ```text
//!  client ──veth── edge (director on edge_if)
//!  192.0.2.2, .130       │ srv 198.51.100.1
//!  2001:db8::2, ::8000:0:0:2
//!    │ cb 198.51.100.2   │
//!  ──┴───── br0 (bridge netns) ─────┬──────────┬──────────┐
//!                               s1 .11     s2 .12     s3 .13   VIPs on lo, nginx
//! ```
//!
//! Packets to a VIP go client → edge → (director: l2 or ipip) → bridge → server; the
//! server answers the client directly over the bridge (direct server return), so the edge
//! never sees the answers. Names: the lab's id plus `-br`, `-s1`.. for namespaces;
//! interfaces are named inside their own namespaces (`srv`, `cb`, `s1`.., `pe`, `pc`,
//! `p1`..), distinct within the lab because helper programs pin by interface name.

use std::{
    fs,
    path::PathBuf,
    process::{Child, Command, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use crate::netns::{describe, nsenter, run, run_ok, stop_child, Lab};
use crate::nginx::Nginx;

pub const VIP4: &str = "203.0.113.80";
pub const VIP6: &str = "2001:db8:80::80";
pub const PORT: u16 = 80;
/// Client sources in two halves of 192.0.2.0/24 and of 2001:db8::/64.
pub const CLIENT_LOW4: &str = "192.0.2.2";
pub const CLIENT_HIGH4: &str = "192.0.2.130";
pub const CLIENT_LOW6: &str = "2001:db8::2";
pub const CLIENT_HIGH6: &str = "2001:db8::8000:0:0:2";
pub const SERVERS: [&str; 3] = ["s1", "s2", "s3"];
/// Bytes of `/big`: enough that a keep-alive connection moves data all the time.
pub const BIG: usize = 16 * 1024;

pub fn server_v4(i: usize) -> String {
    format!("198.51.100.{}", 11 + i)
}

pub fn server_v6(i: usize) -> String {
    format!("2001:db8:b::{}", 11 + i)
}

pub struct VipNet {
    pub lab: Lab,
    pub bridge_ns: String,
    pub server_ns: Vec<String>,
    nginx: Vec<Option<Nginx>>,
}

fn ip(args: &[&str]) {
    run_ok(Command::new("ip").args(args));
}

fn sysctl(ns: &str, settings: &[&str]) {
    for s in settings {
        run_ok(nsenter(ns, "sysctl").args(["-q", "-w", s]));
    }
}

fn veth(a: &str, a_ns: &str, b: &str, b_ns: &str) {
    ip(&[
        "link", "add", a, "netns", a_ns, "type", "veth", "peer", "name", b, "netns", b_ns,
    ]);
}

fn addr(ns: &str, cidr: &str, dev: &str) {
    if cidr.contains(':') {
        ip(&["-n", ns, "addr", "add", cidr, "dev", dev, "nodad"]);
    } else {
        ip(&["-n", ns, "addr", "add", cidr, "dev", dev]);
    }
}

fn up(ns: &str, dev: &str) {
    ip(&["-n", ns, "link", "set", dev, "up"]);
}

impl VipNet {
    /// The namespaces, links, addresses, routes and server settings, and nginx on every
    /// server. director is attached to the edge (with the pass-through program on the
    /// client end and on the edge's bridge port, which frames redirected into a veth need).
    pub fn new() -> VipNet {
        let lab = Lab::new();
        let mut net = VipNet {
            bridge_ns: format!("{}-br", lab.id),
            server_ns: (1..=3).map(|i| format!("{}-s{i}", lab.id)).collect(),
            lab,
            nginx: Vec::new(),
        };
        net.build();
        for i in 0..SERVERS.len() {
            net.nginx.push(None);
            net.start_nginx(i);
        }
        net
    }

    fn build(&self) {
        let (edge, client, br) = (&self.lab.edge_ns, &self.lab.client_ns, &self.bridge_ns);
        for ns in std::iter::once(br).chain(&self.server_ns) {
            ip(&["netns", "add", ns]);
            up(ns, "lo");
            sysctl(
                ns,
                &[
                    "net.ipv6.conf.all.accept_dad=0",
                    "net.ipv6.conf.default.accept_dad=0",
                ],
            );
        }
        ip(&["-n", br, "link", "add", "br0", "type", "bridge"]);
        up(br, "br0");
        let mut ports = vec![("srv", edge.as_str(), "pe"), ("cb", client.as_str(), "pc")];
        let names: Vec<(String, String)> = (1..=3)
            .map(|i| (format!("s{i}"), format!("p{i}")))
            .collect();
        for ((inner, port), ns) in names.iter().zip(&self.server_ns) {
            ports.push((inner, ns, port));
        }
        for (inner, ns, port) in &ports {
            veth(inner, ns, port, br);
            ip(&["-n", br, "link", "set", port, "master", "br0"]);
            up(br, port);
        }
        addr(edge, "198.51.100.1/24", "srv");
        addr(edge, "2001:db8:b::1/64", "srv");
        up(edge, "srv");

        // The client: a second source in each family's upper half, the VIPs routed to the
        // edge, answers taken on the bridge (loose reverse-path checks: they come in where
        // the VIP is not routed).
        let cif = &self.lab.client_if;
        addr(client, &format!("{CLIENT_HIGH4}/24"), cif);
        addr(client, &format!("{CLIENT_HIGH6}/64"), cif);
        addr(client, "198.51.100.2/24", "cb");
        addr(client, "2001:db8:b::2/64", "cb");
        up(client, "cb");
        ip(&[
            "-n",
            client,
            "route",
            "add",
            &format!("{VIP4}/32"),
            "via",
            "192.0.2.1",
        ]);
        ip(&[
            "-n",
            client,
            "route",
            "add",
            &format!("{VIP6}/128"),
            "via",
            "2001:db8::1",
        ]);
        sysctl(
            client,
            &[
                "net.ipv4.conf.all.rp_filter=0",
                "net.ipv4.conf.default.rp_filter=0",
                "net.ipv4.conf.cb.rp_filter=0",
            ],
        );
        // veth hands TCP segments over with the checksum left to the receiver
        // (CHECKSUM_PARTIAL); a frame XDP sends on from the edge would keep it unfinished.
        run_ok(nsenter(client, "ethtool").args(["-K", cif, "tx", "off"]));

        for (i, ns) in self.server_ns.iter().enumerate() {
            let dev = format!("s{}", i + 1);
            addr(ns, &format!("{}/24", server_v4(i)), &dev);
            addr(ns, &format!("{}/64", server_v6(i)), &dev);
            up(ns, &dev);
            addr(ns, &format!("{VIP4}/32"), "lo");
            addr(ns, &format!("{VIP6}/128"), "lo");
            // The VIP is on every server: none may claim it on the segment.
            sysctl(
                ns,
                &[
                    "net.ipv4.conf.all.arp_ignore=1",
                    "net.ipv4.conf.all.arp_announce=2",
                    &format!("net.ipv4.conf.{dev}.arp_ignore=1"),
                    &format!("net.ipv4.conf.{dev}.arp_announce=2"),
                    "net.ipv4.conf.all.rp_filter=0",
                    &format!("net.ipv4.conf.{dev}.rp_filter=0"),
                ],
            );
            ip(&[
                "-n",
                ns,
                "route",
                "add",
                "192.0.2.0/24",
                "via",
                "198.51.100.2",
            ]);
            ip(&[
                "-n",
                ns,
                "route",
                "add",
                "2001:db8::/64",
                "via",
                "2001:db8:b::2",
            ]);
        }
        self.wait_ready();
    }

    /// Every server reaches the client over the bridge (IPv6 addresses usable, neighbours
    /// resolvable).
    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(15);
        for ns in &self.server_ns {
            for target in ["198.51.100.2", "2001:db8:b::2"] {
                loop {
                    let ok = run(nsenter(ns, "ping").args(["-c", "1", "-W", "1", target]))
                        .status
                        .success();
                    if ok {
                        break;
                    }
                    assert!(
                        Instant::now() < deadline,
                        "{ns} cannot reach the client's {target} over the bridge"
                    );
                    sleep(Duration::from_millis(100));
                }
            }
        }
    }

    /// Attaches director to the edge, the pass-through program to the client end and to
    /// the edge's bridge port.
    pub fn attach(&self) {
        self.lab.attach();
        let out = self
            .lab
            .ctl_in(&self.bridge_ns, &["veth-peer", "--iface", "pe"]);
        assert!(out.status.success(), "veth-peer pe: {}", describe(&out));
    }

    /// Attaches the decapsulating program to every server's interface (ipip mode).
    pub fn attach_decap(&self) {
        for (i, ns) in self.server_ns.iter().enumerate() {
            let dev = format!("s{}", i + 1);
            let out = self.lab.ctl_in(ns, &["decap", "attach", "--iface", &dev]);
            assert!(
                out.status.success(),
                "decap attach {dev}: {}",
                describe(&out)
            );
        }
    }

    /// nginx on server `i` (0-based): the VIPs and the server's own addresses on port 80;
    /// `/` answers the server's name, `/big` [`BIG`] bytes with an `X-Server` header.
    pub fn start_nginx(&mut self, i: usize) {
        self.nginx[i] = None;
        let ns = &self.server_ns[i];
        let name = SERVERS[i];
        let dir = std::env::temp_dir().join(format!("{ns}-nginx"));
        let d = dir.display().to_string();
        let (v4, v6) = (server_v4(i), server_v6(i));
        let http = format!(
            "  keepalive_requests 1000000;\n  keepalive_timeout 120s;\n\
               server {{\n    listen {VIP4}:{PORT};\n    listen [{VIP6}]:{PORT};\n\
                 listen {v4}:{PORT};\n    listen [{v6}]:{PORT};\n\
                 add_header X-Server {name} always;\n\
                 location = /big {{ default_type application/octet-stream; alias {d}/big; }}\n\
                 location / {{ return 200 \"{name}\\n\"; }}\n  }}\n"
        );
        let nginx = Nginx::start(ns, dir, &http, (&v4, PORT), &format!("on {name}"));
        fs::write(nginx.dir().join("big"), vec![b'x'; BIG]).expect("nginx body");
        self.nginx[i] = Some(nginx);
    }

    /// Stops server `i`'s nginx (its port then refuses connections).
    pub fn stop_nginx(&mut self, i: usize) {
        self.nginx[i] = None;
    }

    /// `curl` from the client with source `src` to `http://VIP/`: the body (the server's
    /// name), or the error.
    pub fn curl(&self, src: &str, vip: &str) -> Result<String, String> {
        let url = if vip.contains(':') {
            format!("http://[{vip}]:{PORT}/")
        } else {
            format!("http://{vip}:{PORT}/")
        };
        let out = run(nsenter(&self.lab.client_ns, "curl").args([
            "-sS",
            "--max-time",
            "3",
            "--interface",
            src,
            &url,
        ]));
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(describe(&out))
        }
    }

    /// Starts tcpdump on the edge's client-facing interface, counting packets whose source
    /// is a VIP: answers that went through the edge instead of straight to the client.
    pub fn watch_edge(&self) -> Capture {
        let file = std::env::temp_dir().join(format!("{}-edge.pcap", self.lab.id));
        let child = nsenter(&self.lab.edge_ns, "tcpdump")
            .args(["-i", &self.lab.edge_if, "-n", "-U", "-w"])
            .arg(&file)
            .args([&format!("src host {VIP4} or src host {VIP6}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting tcpdump");
        // tcpdump says "listening on" once its filter is in place.
        let mut cap = Capture { child, file };
        cap.wait_listening();
        cap
    }

    pub fn ctl_ok(&self, args: &[&str]) -> String {
        self.lab.ctl_ok(args)
    }
}

impl Default for VipNet {
    fn default() -> Self {
        VipNet::new()
    }
}

impl Drop for VipNet {
    fn drop(&mut self) {
        self.nginx.clear();
        let _ = self
            .lab
            .ctl_in(&self.bridge_ns, &["veth-peer", "--iface", "pe", "--detach"]);
        for (i, ns) in self.server_ns.iter().enumerate() {
            let dev = format!("s{}", i + 1);
            let _ = self.lab.ctl_in(ns, &["decap", "detach", "--iface", &dev]);
        }
        for ns in self
            .server_ns
            .iter()
            .chain(std::iter::once(&self.bridge_ns))
        {
            let _ = run(Command::new("ip").args(["netns", "del", ns]));
        }
        // The Lab (client, edge, pins) goes after this.
    }
}

/// A running tcpdump; [`Capture::count`] stops it and counts what it saw.
pub struct Capture {
    child: Child,
    file: PathBuf,
}

impl Capture {
    fn wait_listening(&mut self) {
        use std::io::Read;
        let mut err = self.child.stderr.take().expect("tcpdump stderr");
        let mut seen = Vec::new();
        let mut buf = [0u8; 256];
        let deadline = Instant::now() + Duration::from_secs(10);
        while !String::from_utf8_lossy(&seen).contains("listening on") {
            assert!(Instant::now() < deadline, "tcpdump did not start");
            match err.read(&mut buf) {
                Ok(0) => panic!("tcpdump exited: {}", String::from_utf8_lossy(&seen)),
                Ok(n) => seen.extend_from_slice(&buf[..n]),
                Err(e) => panic!("reading tcpdump: {e}"),
            }
        }
        // Keep draining its stderr so it never blocks on a full pipe.
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut err, &mut std::io::sink());
        });
    }

    /// Stops tcpdump (SIGINT flushes the file) and returns the packets it captured.
    pub fn count(mut self) -> usize {
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            sleep(Duration::from_millis(20));
        }
        let out = run_ok(Command::new("tcpdump").args(["-n", "-r"]).arg(&self.file));
        String::from_utf8_lossy(&out.stdout).lines().count()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        stop_child(&mut self.child, Duration::from_secs(2));
        let _ = fs::remove_file(&self.file);
    }
}

/// What one keep-alive connection of [`keepalive`] saw.
#[derive(Debug, Clone)]
pub struct ConnReport {
    pub src: String,
    pub vip: String,
    /// `X-Server` of every answer, in order (deduplicated runs).
    pub servers: Vec<String>,
    pub requests: u64,
    /// The longest wait for one answer.
    pub max_wait: Duration,
    /// Why it ended before time, if it did (reset, timeout, short answer).
    pub error: Option<String>,
}

/// `per_pair` connections for each (source, VIP), from the client's namespace, each
/// requesting `/big` over and over on one kept-alive connection until `until`; `started`
/// is called once every connection got its first answer. Every read waits at most 5 s:
/// longer is a stall.
pub fn keepalive(
    client_ns: &str,
    pairs: &[(&str, &str)],
    per_pair: usize,
    until: Instant,
) -> Vec<ConnReport> {
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(pairs.len() * per_pair));
    let mut threads = Vec::new();
    for (src, vip) in pairs {
        for _ in 0..per_pair {
            let (src, vip, ns) = (src.to_string(), vip.to_string(), client_ns.to_string());
            let barrier = barrier.clone();
            threads.push(std::thread::spawn(move || {
                let mut r = ConnReport {
                    src: src.clone(),
                    vip: vip.clone(),
                    servers: Vec::new(),
                    requests: 0,
                    max_wait: Duration::ZERO,
                    error: None,
                };
                let conn = enter(&ns).and_then(|()| connect(&src, &vip));
                let mut conn = match conn {
                    Ok(c) => Some(c),
                    Err(e) => {
                        r.error = Some(format!("connect: {e}"));
                        None
                    }
                };
                let mut first = true;
                loop {
                    if let Some(c) = conn.as_mut() {
                        let t = Instant::now();
                        match request(c) {
                            Ok(server) => {
                                r.requests += 1;
                                r.max_wait = r.max_wait.max(t.elapsed());
                                if r.servers.last() != Some(&server) {
                                    r.servers.push(server);
                                }
                            }
                            Err(e) => {
                                r.error = Some(format!("request {}: {e}", r.requests + 1));
                                conn = None;
                            }
                        }
                    }
                    if first {
                        // Every connection is up (or failed) before the test changes things.
                        barrier.wait();
                        first = false;
                    }
                    if conn.is_none() || Instant::now() >= until {
                        return r;
                    }
                }
            }));
        }
    }
    threads
        .into_iter()
        .map(|t| t.join().expect("a keep-alive thread panicked"))
        .collect()
}

/// This thread into the namespace `ns` (its sockets are made there).
fn enter(ns: &str) -> std::io::Result<()> {
    let f = fs::File::open(format!("/run/netns/{ns}"))?;
    use std::os::fd::AsRawFd;
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn connect(src: &str, vip: &str) -> std::io::Result<std::net::TcpStream> {
    use socket2::{Domain, Socket, Type};
    let src: std::net::IpAddr = src.parse().map_err(std::io::Error::other)?;
    let vip: std::net::IpAddr = vip.parse().map_err(std::io::Error::other)?;
    let s = Socket::new(Domain::for_address((vip, PORT).into()), Type::STREAM, None)?;
    s.bind(&std::net::SocketAddr::from((src, 0)).into())?;
    s.connect_timeout(
        &std::net::SocketAddr::from((vip, PORT)).into(),
        Duration::from_secs(5),
    )?;
    let s: std::net::TcpStream = s.into();
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    Ok(s)
}

/// One `GET /big` on the connection: the answer's `X-Server`, after reading all of it.
fn request(c: &mut std::net::TcpStream) -> std::io::Result<String> {
    use std::io::{BufRead, BufReader, Read, Write};
    c.write_all(b"GET /big HTTP/1.1\r\nHost: vip\r\n\r\n")?;
    let mut rd = BufReader::new(&mut *c);
    let mut server = None;
    let mut length = None;
    let mut status = String::new();
    rd.read_line(&mut status)?;
    if !status.starts_with("HTTP/1.1 200") {
        return Err(std::io::Error::other(format!("status {status:?}")));
    }
    loop {
        let mut line = String::new();
        if rd.read_line(&mut line)? == 0 {
            return Err(std::io::Error::other("closed in the headers"));
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("x-server:") {
            server = Some(v.trim().to_string());
        } else if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse::<usize>().ok();
        }
    }
    let length = length.ok_or_else(|| std::io::Error::other("no Content-Length"))?;
    let mut body = vec![0; length];
    rd.read_exact(&mut body)?;
    // BufReader may not read past the body: nginx sends nothing until the next request.
    if !rd.buffer().is_empty() {
        return Err(std::io::Error::other("bytes after the body"));
    }
    server.ok_or_else(|| std::io::Error::other("no X-Server header"))
}
