//! The RTT agent's test fixture: a cgroup v2 child of this test's own (so parallel tests do
//! not see each other's connections), a server process in it, `director-ctl agent`
//! attached to it, and the agent's `GET /rtt` read back as the API type.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use director_ctl::api::RttReport;

use crate::delay::enter;
use crate::netns::ctl_binary;

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
    spawn_agent(cmd, listen, window_s, drain_ms, || report(listen))
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
    spawn_agent(cmd, listen, window_s, drain_ms, || report_in(ns, listen))
}

fn spawn_agent(
    mut cmd: Command,
    listen: SocketAddr,
    window_s: u64,
    drain_ms: u64,
    reach: impl Fn() -> std::io::Result<RttReport>,
) -> (Process, SocketAddr) {
    let log = log_path("rtt-agent");
    let child = cmd
        .args(["--listen", &listen.to_string()])
        .args(["--window-s", &window_s.to_string()])
        .args(["--drain-ms", &drain_ms.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("a log file"))
        .spawn()
        .expect("starting director-ctl agent");
    let mut p = Process { child, log };
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if reach().is_ok() {
            return (p, listen);
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
    let ns = ns.to_string();
    std::thread::spawn(move || {
        enter(&ns)?;
        report(agent)
    })
    .join()
    .map_err(|_| std::io::Error::other("the reading thread panicked"))?
}

/// `GET /rtt`, parsed as the controller parses it.
pub fn report(agent: SocketAddr) -> std::io::Result<RttReport> {
    let mut s = TcpStream::connect_timeout(&agent, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(b"GET /rtt HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no end of head"))?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(std::io::Error::other(head.to_string()));
    }
    serde_json::from_str(body).map_err(std::io::Error::other)
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
