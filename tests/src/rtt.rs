//! The RTT agent's test fixture: a cgroup v2 child of this test's own (so parallel tests do
//! not see each other's connections), a server process in it, `director-ctl agent`
//! attached to it, and the agent's `GET /rtt` read back as the API type; a site measured
//! over a delay line ([`MeasuredSite`]), and `run`'s `explain` of what the agents measured.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use director_ctl::api::{Explain, RttAgent, RttMeasurement, RttReport};

use crate::delay::{enter, DelayLink};
use crate::netns::{ctl_binary, Lab};

/// The cgroup2 mount (`/sys/fs/cgroup/unified` on hybrid hosts like these).
pub fn cgroup2_root() -> PathBuf {
    let mounts = std::fs::read_to_string("/proc/mounts").expect("reading /proc/mounts");
    mounts
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(2) == Some(&"cgroup2")).then(|| PathBuf::from(f[1]))
        })
        .expect("a cgroup2 mount")
}

/// `director-test-<pid>-<tag>` under the cgroup2 root; removed on drop (once its
/// processes are gone, which the fixture's other parts see to first).
pub struct Cgroup(pub PathBuf);

impl Cgroup {
    pub fn new(tag: &str) -> Cgroup {
        let p = cgroup2_root().join(format!("director-test-{}-{tag}", std::process::id()));
        std::fs::create_dir(&p).unwrap_or_else(|e| panic!("creating {}: {e}", p.display()));
        Cgroup(p)
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // A killed process leaves the cgroup a moment after it is reaped.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.0).is_ok() || !self.0.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A child process stopped by its pid on drop: SIGTERM, then SIGKILL after a grace.
pub struct Process {
    pub child: Child,
    /// Where its stderr goes (read for assertion messages), removed on drop.
    pub log: PathBuf,
}

impl Process {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM; true if it exited within `grace` (else it is killed).
    pub fn stop(&mut self, grace: Duration) -> bool {
        if let Ok(Some(_)) = self.child.try_wait() {
            return true;
        }
        // SAFETY: a signal to a child of this process, by its pid.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        false
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(3));
        let _ = std::fs::remove_file(&self.log);
    }
}

/// A TCP counter of the network namespace process `pid` is in, from its `/proc/PID/net`
/// (`table` "Tcp" in snmp, "TcpExt" in netstat; e.g. `PassiveOpens`, `ListenOverflows`).
pub fn tcp_counter(pid: u32, file: &str, table: &str, name: &str) -> u64 {
    let path = format!("/proc/{pid}/net/{file}");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    let prefix = format!("{table}:");
    // Each table is two lines: the names, then the values, both after "Table:".
    let mut rows = text.lines().filter(|l| l.starts_with(&prefix));
    let (names, values) = (rows.next(), rows.next());
    let (Some(names), Some(values)) = (names, values) else {
        panic!("{path} has no {table} table");
    };
    let at = names
        .split_whitespace()
        .position(|n| n == name)
        .unwrap_or_else(|| panic!("{path}: {table} has no {name}"));
    values
        .split_whitespace()
        .nth(at)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{path}: {table} {name} is not a number"))
}

fn log_path(what: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "{what}-{}-{:?}.log",
        std::process::id(),
        Instant::now()
    ))
}

/// The accept sink (tests/src/bin/accept_sink.rs) in the namespace `ns` and `cgroup`,
/// listening on `addrs`; returns once it listens.
pub fn start_sink(sink_bin: &Path, ns: &str, cgroup: &Cgroup, addrs: &[SocketAddr]) -> Process {
    let log = log_path("accept-sink");
    let mut child = Command::new("nsenter")
        .arg(format!("--net=/run/netns/{ns}"))
        .arg(sink_bin)
        .arg(&cgroup.0)
        .args(addrs.iter().map(ToString::to_string))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("a log file"))
        .spawn()
        .expect("starting the accept sink");
    let out = child.stdout.take().expect("piped stdout");
    let mut line = String::new();
    let _ = BufReader::new(out).read_line(&mut line);
    let p = Process { child, log };
    assert_eq!(line.trim(), "ready", "the sink did not start: {}", p.log());
    p
}

/// A free TCP port on 127.0.0.1 (bound and released: good enough for one test process).
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("binding port 0");
    l.local_addr().expect("its address").port()
}

/// `director-ctl agent` on `cgroup`, serving on 127.0.0.1; returns once `/rtt` answers.
pub fn start_agent(cgroup: &Cgroup, window_s: u64, drain_ms: u64) -> (Process, SocketAddr) {
    let listen: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let mut cmd = Command::new(ctl_binary());
    cmd.args(["agent", "--site", "test-site", "--cgroup"])
        .arg(&cgroup.0);
    let mut p = spawn_agent(cmd, listen, window_s, drain_ms, log_path("rtt-agent"));
    wait_served(&mut p, || report(listen));
    (p, listen)
}

/// `director-ctl agent --observe` on `ifaces` of the namespace `ns`, serving on that
/// namespace's 127.0.0.1 (read it with [`report_in`]); returns once `/rtt` answers.
pub fn start_observer(
    ns: &str,
    ifaces: &[&str],
    window_s: u64,
    drain_ms: u64,
) -> (Process, SocketAddr) {
    let listen: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns])
        .arg(ctl_binary())
        .args(["agent", "--site", "test-site"]);
    for i in ifaces {
        cmd.args(["--observe", i]);
    }
    let mut p = spawn_agent(cmd, listen, window_s, drain_ms, log_path("rtt-agent"));
    wait_served(&mut p, || report_in(ns, listen));
    (p, listen)
}

/// `director-ctl agent --site <site> --cgroup <cgroup>` run in the namespace `ns`: add
/// what else it takes (probing, a store), then [`spawn_agent`].
pub fn agent_in(ns: &str, site: &str, cgroup: &Cgroup) -> Command {
    let mut cmd = Command::new("nsenter");
    cmd.arg(format!("--net=/run/netns/{ns}"))
        .arg(ctl_binary())
        .args(["agent", "--site", site, "--cgroup"])
        .arg(&cgroup.0);
    cmd
}

/// Starts the agent `cmd` serving on `listen`, with windows of `window_s` drained every
/// `drain_ms`, its stderr into `log`; returns at once ([`wait_served`] waits for `/rtt`).
pub fn spawn_agent(
    mut cmd: Command,
    listen: SocketAddr,
    window_s: u64,
    drain_ms: u64,
    log: PathBuf,
) -> Process {
    let child = cmd
        .args(["--listen", &listen.to_string()])
        .args(["--window-s", &window_s.to_string()])
        .args(["--drain-ms", &drain_ms.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("a log file"))
        .spawn()
        .expect("starting director-ctl agent");
    Process { child, log }
}

/// Waits until `reach` reads the agent's `/rtt`; panics if the agent exits first or 15 s
/// pass.
pub fn wait_served(p: &mut Process, reach: impl Fn() -> std::io::Result<RttReport>) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if reach().is_ok() {
            return;
        }
        if let Ok(Some(st)) = p.child.try_wait() {
            panic!("the agent exited ({st}): {}", p.log());
        }
        assert!(
            Instant::now() < deadline,
            "the agent never served /rtt: {}",
            p.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// [`report`] from inside the namespace `ns` (an agent listening on its loopback).
pub fn report_in(ns: &str, agent: SocketAddr) -> std::io::Result<RttReport> {
    parsed(&request_in(ns, agent, "GET", "/rtt", "")?)
}

/// `GET /rtt`, parsed as the controller parses it.
pub fn report(agent: SocketAddr) -> std::io::Result<RttReport> {
    parsed(&request(agent, "GET", "/rtt", "")?)
}

fn parsed(body: &str) -> std::io::Result<RttReport> {
    serde_json::from_str(body).map_err(std::io::Error::other)
}

/// [`request`] from inside the namespace `ns`.
pub fn request_in(
    ns: &str,
    agent: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
) -> std::io::Result<String> {
    let (ns, method, path, body) = (
        ns.to_string(),
        method.to_string(),
        path.to_string(),
        body.to_string(),
    );
    std::thread::spawn(move || {
        enter(&ns)?;
        request(agent, &method, &path, &body)
    })
    .join()
    .map_err(|_| std::io::Error::other("the requesting thread panicked"))?
}

/// One HTTP/1.1 request to the agent (a JSON `body`, empty for none): the body of its 200
/// answer, else an error with the answer's head and body.
pub fn request(agent: SocketAddr, method: &str, path: &str, body: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect_timeout(&agent, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: agent\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no end of head"))?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(std::io::Error::other(format!("{head}\n{body}")));
    }
    Ok(body.to_string())
}

/// Unix time in ms (the agent's windows are on this clock).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as u64
}

/// Sleeps until `offset_ms` into the next window of `window_ms` (windows start at
/// multiples of their length); returns that window's start.
pub fn into_next_window(window_ms: u64, offset_ms: u64) -> u64 {
    let now = now_ms();
    let start = now - now % window_ms + window_ms;
    std::thread::sleep(Duration::from_millis(start + offset_ms - now));
    start
}

/// Opens `per_source` connections from each source to `server` at once (a thread per
/// connection, each in the namespace `ns`) and closes them; panics on any failure.
pub fn connect_all(ns: &str, sources: &[IpAddr], server: &[SocketAddr], per_source: usize) {
    let mut threads = Vec::new();
    for &src in sources {
        let dst = *server
            .iter()
            .find(|d| d.is_ipv4() == src.is_ipv4())
            .expect("a server address of the source's family");
        for _ in 0..per_source {
            let ns = ns.to_string();
            threads.push(std::thread::spawn(move || -> std::io::Result<()> {
                enter(&ns)?;
                let s = socket2::Socket::new(
                    socket2::Domain::for_address(dst),
                    socket2::Type::STREAM,
                    None,
                )?;
                s.bind(&SocketAddr::new(src, 0).into())?;
                s.connect_timeout(&dst.into(), Duration::from_secs(5))?;
                Ok(())
            }));
        }
    }
    for t in threads {
        t.join()
            .expect("a connecting thread panicked")
            .expect("a connection failed");
    }
}

/// CPU time of every thread of `pid` so far, from /proc/PID/task/*/schedstat (ns).
pub fn cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// A site measured over a delay line: one client and one server (port 80) at its two
/// ends, the accept sink as the server, in a cgroup of its own, and an agent measuring
/// that cgroup. Dropped in field order: the agent first (an agent writing into a store
/// revokes its lease on SIGTERM), the cgroup last.
pub struct MeasuredSite {
    pub agent: Process,
    pub sink: Process,
    pub link: DelayLink,
    pub cgroup: Cgroup,
    client: IpAddr,
    server: SocketAddr,
}

impl MeasuredSite {
    /// The delay line (`one_way` each way), the cgroup `tag`, the sink (`sink_bin`) in the
    /// server's namespace, and then `agent`, given the cgroup, starts the agent.
    pub fn start(
        sink_bin: &Path,
        tag: &str,
        (client, server): (IpAddr, IpAddr),
        one_way: Duration,
        agent: impl FnOnce(&Cgroup) -> Process,
    ) -> MeasuredSite {
        let server = SocketAddr::new(server, 80);
        let link = DelayLink::new(&[client], &[server.ip()], one_way);
        let cgroup = Cgroup::new(tag);
        let sink = start_sink(sink_bin, &link.server_ns, &cgroup, &[server]);
        let agent = agent(&cgroup);
        MeasuredSite {
            agent,
            sink,
            link,
            cgroup,
            client,
            server,
        }
    }

    /// `n` connections from the client to the server at once (see [`connect_all`]).
    pub fn connect(&self, n: usize) {
        connect_all(&self.link.client_ns, &[self.client], &[self.server], n);
    }
}

/// Keeps every site's client connecting (two handshakes each per 200 ms) until `answer`
/// says `want`; how long it took. Past `within` it panics, with `logs` and the agents'.
pub fn connect_until(
    sites: &[&MeasuredSite],
    answer: impl Fn() -> String,
    want: &str,
    within: Duration,
    logs: impl Fn() -> String,
) -> Duration {
    let t0 = Instant::now();
    loop {
        for s in sites {
            s.connect(2);
        }
        if answer() == want {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < within,
            "still {:?} after {within:?}, want {want}\n{}\n{}",
            answer(),
            logs(),
            sites
                .iter()
                .map(|s| s.agent.log())
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn explain_out(lab: &Lab, metrics: &str, service: &str, client: &str, json: bool) -> String {
    let mut args = vec![
        "explain",
        "--run",
        metrics,
        "--service",
        service,
        "--client",
        client,
    ];
    if json {
        args.push("--json");
    }
    let out = lab.ctl_in(&lab.edge_ns, &args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `director-ctl explain --run <metrics> --json` in the lab's edge namespace: why a
/// `client` gets `service`'s servers, from the running controller.
pub fn explain(lab: &Lab, metrics: &str, service: &str, client: &str) -> Explain {
    let text = explain_out(lab, metrics, service, client, true);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The same as text, as an operator reads it.
pub fn explain_text(lab: &Lab, metrics: &str, service: &str, client: &str) -> String {
    explain_out(lab, metrics, service, client, false)
}

/// `server`'s RTT in `e`, measured live by the agent at `url` (asserted): the value and
/// its agent.
pub fn live_rtt<'a>(e: &'a Explain, server: &str, url: &str) -> (&'a RttMeasurement, &'a RttAgent) {
    let s = e
        .servers
        .iter()
        .find(|v| v.server == server)
        .unwrap_or_else(|| panic!("{server}: not in {e:?}"));
    let rtt = s.rtt.as_ref().unwrap_or_else(|| panic!("{server}: no rtt"));
    let agent = rtt.agent.as_ref().expect("a live measurement");
    assert_eq!(agent.url, url);
    (rtt, agent)
}

/// Asserts `server`'s published RTT is within max(4 ms, 10 %) of its path's `path_ms`.
/// The published value is smoothed and moves only beyond max(1 ms, 5 %): it may lag the
/// path by that much more than the agent's own ±5 % (rtt_agent.rs checks the agent's
/// accuracy).
pub fn assert_published_near(server: &str, published_ms: f64, path_ms: f64) {
    assert!(
        (published_ms - path_ms).abs() <= (path_ms * 0.10).max(4.0),
        "{server}: {published_ms} ms published over a {path_ms} ms path"
    );
}

/// One request with `client` (TLS and a credential, as the controller sends them) from
/// inside the namespace `ns`: the body of a 200 answer, else the error (the status, or
/// the failed handshake).
pub fn request_with_in(
    ns: &str,
    agent: SocketAddr,
    client: &director_ctl::web::Client,
    method: &str,
    path: &str,
    body: &str,
) -> Result<String, String> {
    let (ns, client, method, path, body) = (
        ns.to_string(),
        client.clone(),
        method.to_string(),
        path.to_string(),
        body.to_string(),
    );
    std::thread::spawn(move || {
        enter(&ns).map_err(|e| e.to_string())?;
        client
            .request(
                agent,
                &method,
                &path,
                body.as_bytes(),
                Duration::from_secs(5),
            )
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .map_err(|e| format!("{e:#}"))
    })
    .join()
    .map_err(|_| "the requesting thread panicked".to_string())?
}
