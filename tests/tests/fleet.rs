//! A fleet on one machine: a three-member etcd cluster and two publishers in a hub
//! namespace, three edges (each a lab: director attached, a client with dig and dnsperf)
//! joined to it. What the issue asks of a fleet, end to end: every edge answers each new
//! policy, publishing survives the loss of etcd's leader and of the leading publisher with
//! no version skipped or published twice, a store without quorum publishes nothing and
//! every edge keeps answering, a cut-off edge answers on its old version and catches up, a
//! restarted edge answers from its copy on disk, and a server is out everywhere only when
//! a quorum of its observers finds it down.
//!
//! Run as root: `cargo test -p director-tests --test fleet -- --test-threads=1 --nocapture`.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use director_ctl::api::FleetStatus;
use director_tests::{
    fleet::{Etcd, Hub, Keys},
    metrics,
    netns::{describe, Controller, Lab, EDGE_V4},
    nginx::Nginx,
    tempdir::{replace_file, TempDir},
};

const NAME: &str = "www.fleet.example";
const X: &str = "198.51.100.50";
const Y: &str = "198.51.100.60";
const METRICS: &str = "192.0.2.1:9109";
/// Leases in the test: a dead publisher's leadership and an edge's votes last this long.
const LEASE: &str = "2";

/// The fleet's config: x and y by preference (the lower answers), both checked over HTTP
/// once a second, give or take the default jitter (10 %).
fn policy(x_pref: u32, y_pref: u32) -> String {
    format!(
        "[health]\ninterval = 1\ntimeout = 0.5\nrise = 1\nfall = 1\n\n\
         [[site]]\nname = \"a\"\n\n[[site]]\nname = \"b\"\n\n\
         [[server]]\nname = \"x\"\nsite = \"a\"\nipv4 = \"{X}\"\npreference = {x_pref}\n\n\
         [[server]]\nname = \"y\"\nsite = \"b\"\nipv4 = \"{Y}\"\npreference = {y_pref}\n\n\
         [[service]]\nname = \"{NAME}\"\nttl = 30\nservers = [\"x\", \"y\"]\n\
         priority = {{ admin = 1 }}\nhealth = {{ type = \"http\", port = 8080 }}\n"
    )
}

struct Fleet {
    // Dropped in this order: processes first, then what they ran in.
    publishers: Vec<Controller>,
    edges: Vec<Option<Controller>>,
    _nginx: Nginx,
    labs: Vec<Lab>,
    etcd: Etcd,
    hub: Hub,
    dir: TempDir,
    config: PathBuf,
    /// The publishers' key and the edges' trust file.
    keys: Keys,
}

impl Fleet {
    fn start(test: &str) -> Fleet {
        let dir = TempDir::new("fleet", test);
        let hub = Hub::new();
        // Faster elections than etcd's defaults (1 s timeout): a dead leader is replaced
        // in about a second (docs/fleet.md recommends the same on a LAN).
        let etcd = Etcd::start_with(
            &hub,
            &["--heartbeat-interval", "50", "--election-timeout", "500"],
        );
        hub.add_address(&format!("{X}/24"));
        hub.add_address(&format!("{Y}/24"));
        let nginx = Nginx::start(
            hub.ns(),
            dir.path("nginx"),
            // Every check logged: when it came, from which edge, to which server.
            &format!(
                "  log_format checks '$msec $remote_addr $server_addr';\n\
                 \x20 server {{ listen {X}:8080; listen {Y}:8080; \
                 access_log {} checks; location / {{ return 200 ok; }} }}\n",
                dir.path("checks.log").display()
            ),
            (X, 8080),
            "the servers",
        );
        let config = dir.path("fleet.toml");
        replace_file(&config, &policy(10, 20));
        let keys = Keys::make(&dir.path(""), "p");
        let mut labs = Vec::new();
        for n in 1..=3u8 {
            let lab = Lab::new();
            lab.attach();
            hub.join(&lab, n);
            labs.push(lab);
        }
        let mut f = Fleet {
            publishers: Vec::new(),
            edges: Vec::new(),
            _nginx: nginx,
            labs,
            etcd,
            hub,
            dir,
            config,
            keys,
        };
        for p in 1..=2 {
            let c = f.publisher(p);
            f.publishers.push(c);
        }
        for n in 1..=3 {
            let e = f.edge(n, &format!("edge-{n}.log"));
            f.edges.push(Some(e));
        }
        f
    }

    fn publisher(&self, p: usize) -> Controller {
        let (url, config) = (self.etcd.url(), self.config.display().to_string());
        let name = format!("p{p}");
        let sign = self.keys.sign_args();
        Controller::start_in(
            self.hub.ns(),
            Path::new("/nonexistent"),
            &[
                "run",
                &sign[0],
                &sign[1],
                "--store",
                &url,
                "--role",
                "publisher",
                "--config",
                &config,
                "--name",
                &name,
                "--poll-ms",
                "100",
                "--lease-seconds",
                LEASE,
            ],
            &self.dir.path(&format!("publisher-{p}.log")),
        )
    }

    /// Edge `n` (1-based), its log in `log`.
    fn edge(&self, n: usize, log: &str) -> Controller {
        let url = self.etcd.url();
        let state = self.dir.path(&format!("state-{n}")).display().to_string();
        let (name, site) = (format!("e{n}"), format!("s{n}"));
        let trust = self.keys.trust_args();
        Controller::start_command(
            &self.labs[n - 1],
            &[
                "run",
                &trust[0],
                &trust[1],
                "--store",
                &url,
                "--role",
                "edge",
                "--name",
                &name,
                "--site",
                &site,
                "--state-dir",
                &state,
                "--metrics-listen",
                METRICS,
                "--lease-seconds",
                LEASE,
            ],
            &self.dir.path(log),
        )
    }

    fn set_policy(&self, x_pref: u32, y_pref: u32) {
        replace_file(&self.config, &policy(x_pref, y_pref));
    }

    fn answer(&self, n: usize) -> String {
        let out = self.labs[n].dig(&["@192.0.2.1", NAME, "A", "+short"]);
        out.trim().to_string()
    }

    /// Waits until every edge (in `edges`, 0-based) answers `want`; returns how long it took.
    fn wait_answer(&self, edges: &[usize], want: &str, within: Duration) -> Duration {
        let t = Instant::now();
        loop {
            let now: Vec<String> = edges.iter().map(|&n| self.answer(n)).collect();
            if now.iter().all(|a| a == want) {
                return t.elapsed();
            }
            assert!(
                t.elapsed() < within,
                "edges {edges:?} answer {now:?}, not {want}, after {within:?}\n{}",
                self.logs()
            );
            sleep(Duration::from_millis(30));
        }
    }

    fn status(&self) -> FleetStatus {
        let out = self.labs[0].ctl(&["fleet", "status", "--store", &self.etcd.url(), "--json"]);
        assert!(out.status.success(), "fleet status: {}", describe(&out));
        serde_json::from_slice(&out.stdout).expect("fleet status --json")
    }

    /// `fleet status` once `ok` holds (each edge reports once a second), at most 5 s.
    fn status_when(&self, ok: impl Fn(&FleetStatus) -> bool) -> FleetStatus {
        let t = Instant::now();
        loop {
            let st = self.status();
            if ok(&st) || t.elapsed() > Duration::from_secs(5) {
                return st;
            }
            sleep(Duration::from_millis(100));
        }
    }

    /// The store's revision and the bytes in use now (the member answering).
    fn store_revision(&self) -> (u64, u64) {
        let out = self.etcd.ctl_ok(&["endpoint", "status", "-w", "json"]);
        let v: serde_json::Value = serde_json::from_str(&out).expect("endpoint status -w json");
        let s = &v[0]["Status"];
        (
            s["header"]["revision"].as_u64().expect("a revision"),
            s["dbSizeInUse"].as_u64().unwrap_or(0),
        )
    }

    fn logs(&self) -> String {
        let mut s = String::new();
        for (i, p) in self.publishers.iter().enumerate() {
            s += &format!("--- publisher p{}:\n{}\n", i + 1, p.log());
        }
        for (i, e) in self.edges.iter().enumerate() {
            if let Some(e) = e {
                s += &format!("--- edge e{}:\n{}\n", i + 1, e.log());
            }
        }
        s
    }

    /// The versions every publisher logged as published, in order of version.
    fn published(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .publishers
            .iter()
            .flat_map(|p| {
                p.log()
                    .lines()
                    .filter_map(|l| {
                        let rest = l.split(": version ").nth(1)?;
                        let (n, tail) = rest.split_once(' ')?;
                        tail.starts_with("is current").then(|| n.parse().ok())?
                    })
                    .collect::<Vec<u64>>()
            })
            .collect();
        v.sort_unstable();
        v
    }
}

/// dnsperf at edge `n`'s client: `count` queries for NAME at most `qps` a second.
fn dnsperf(lab: &Lab, dir: &TempDir, n: usize, count: u32, qps: u32) -> Child {
    let queries = dir.path(&format!("queries-{n}.txt"));
    std::fs::write(&queries, format!("{NAME} A\n")).expect("query file");
    Command::new("ip")
        .args(["netns", "exec", &lab.client_ns, "dnsperf", "-s", EDGE_V4])
        .arg("-d")
        .arg(&queries)
        .args(["-n", &count.to_string(), "-Q", &qps.to_string(), "-t", "1"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting dnsperf")
}

/// dnsperf's (completed, lost) from its report.
fn dnsperf_result(child: Child) -> (u64, u64) {
    let out = child.wait_with_output().expect("dnsperf");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let field = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .and_then(|r| r.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {name:?} in dnsperf's report:\n{text}"))
    };
    (field("Queries completed:"), field("Queries lost:"))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

#[test]
fn publishing_survives_the_store_and_publisher_failing() {
    let mut f = Fleet::start("failover");
    f.wait_answer(&[0, 1, 2], X, Duration::from_secs(20));
    let st = f.status_when(|s| s.edges.iter().filter(|e| e.current).count() == 3);
    assert_eq!(st.current, Some(1), "{st:?}");
    assert_eq!(st.edges.len(), 3, "{st:?}");
    assert!(st.edges.iter().all(|e| e.live && e.current), "{st:?}");
    assert!(st.leader.is_some(), "{st:?}");

    // 20 policy changes: each reaches every edge.
    let mut took = Vec::new();
    for i in 0..20 {
        let (pref, want) = if i % 2 == 0 {
            ((30, 20), Y)
        } else {
            ((10, 20), X)
        };
        f.set_policy(pref.0, pref.1);
        let t = f.wait_answer(&[0, 1, 2], want, Duration::from_secs(15));
        took.push(t);
    }
    took.sort();
    println!(
        "policy change to every edge answering it, 20 changes: p50 {:.0} ms, p99 {:.0} ms",
        percentile(&took, 0.5).as_secs_f64() * 1e3,
        percentile(&took, 0.99).as_secs_f64() * 1e3
    );
    assert!(
        percentile(&took, 0.99) <= Duration::from_secs(5),
        "{took:?}"
    );

    // etcd's leader dies under a query loop at every edge: no query fails, and the next
    // change is published within 3 s of the kill.
    let perf: Vec<Child> = (0..3)
        .map(|n| dnsperf(&f.labs[n], &f.dir, n, 10_000, 2_000))
        .collect();
    sleep(Duration::from_millis(1500));
    let leader = f.etcd.wait_leader(Duration::from_secs(5));
    let killed = Instant::now();
    f.etcd.kill(leader);
    f.set_policy(30, 20);
    let resumed = f.wait_answer(&[0, 1, 2], Y, Duration::from_secs(15));
    let since_kill = killed.elapsed();
    for (n, p) in perf.into_iter().enumerate() {
        let (completed, lost) = dnsperf_result(p);
        println!("edge {n}: {completed} queries answered, {lost} lost while etcd's leader died");
        assert_eq!((completed, lost), (10_000, 0), "edge {n}");
    }
    println!(
        "etcd leader killed: the next change answered everywhere {:.0} ms later",
        since_kill.as_secs_f64() * 1e3
    );
    assert!(
        resumed <= Duration::from_secs(3),
        "{resumed:?}\n{}",
        f.logs()
    );
    f.etcd.restart(leader);

    // The leading publisher dies (SIGKILL): the other publishes the next change.
    let lead = f.status().leader.expect("a leader");
    let i = if lead == "p1" { 0 } else { 1 };
    f.publishers[i].kill();
    f.set_policy(10, 20);
    f.wait_answer(&[0, 1, 2], X, Duration::from_secs(15));
    let st = f.status();
    assert_ne!(st.leader.as_deref(), Some(lead.as_str()), "{st:?}");
    let published = f.published();
    let want: Vec<u64> = (1..=published.len() as u64).collect();
    assert_eq!(
        published,
        want,
        "versions skipped or published twice\n{}",
        f.logs()
    );
    assert_eq!(st.current, published.last().copied(), "{st:?}");
    assert!(
        st.versions.len() <= 3,
        "old versions kept: {:?}",
        st.versions
    );

    // Two of three members down: publishing fails cleanly, every edge keeps answering on
    // the version it has.
    let version = st.current;
    let live = 1 - i;
    let before = f.publishers[live].count("publishing failed");
    let (a, b) = match f.etcd.leader() {
        Some(l) => (l, (l + 1) % 3),
        None => (0, 1),
    };
    f.etcd.kill(a);
    f.etcd.kill(b);
    f.set_policy(30, 20);
    f.publishers[live].wait_for("publishing failed", before + 1, Duration::from_secs(15));
    for _ in 0..10 {
        for n in 0..3 {
            assert_eq!(f.answer(n), X, "edge {n} while the store has no quorum");
        }
        sleep(Duration::from_millis(200));
    }
    // The members come back: the change is published and taken.
    f.etcd.restart(a);
    f.etcd.restart(b);
    f.wait_answer(&[0, 1, 2], Y, Duration::from_secs(20));
    let st = f.status();
    assert_eq!(st.current, version.map(|v| v + 1), "{st:?}\n{}", f.logs());
    for e in &mut f.edges {
        e.as_mut().expect("running").assert_alive();
    }
}

#[test]
fn a_cut_off_edge_keeps_answering_and_catches_up() {
    let mut f = Fleet::start("partition");
    f.wait_answer(&[0, 1, 2], X, Duration::from_secs(20));
    f.hub.cut(3);
    let t = Instant::now();
    sleep(Duration::from_secs(3));
    f.set_policy(30, 20);
    f.wait_answer(&[0, 1], Y, Duration::from_secs(10));
    // 60 s cut off: the old version's answer all along, and it says it is stale.
    let mut stale = 0.0;
    while t.elapsed() < Duration::from_secs(60) {
        assert_eq!(f.answer(2), X, "the cut-off edge after {:?}", t.elapsed());
        let m = metrics::scrape(&f.labs[2].client_ns, METRICS).expect("the edge's metrics");
        let s = metrics::value(&m, "director_table_stale_seconds", &[]).expect("stale seconds");
        assert!(s >= stale - 1.5, "stale seconds went from {stale} to {s}");
        stale = s;
        sleep(Duration::from_millis(500));
    }
    assert!(stale > 50.0, "stale {stale} s after 60 s cut off");
    let e3 = f.edges[2].as_ref().expect("edge 3");
    assert!(
        e3.count("store unreachable, answering from version 1") >= 1,
        "{}",
        e3.log()
    );
    let st = f.status();
    let e = st
        .edges
        .iter()
        .find(|e| e.name == "e3")
        .expect("e3 in status");
    assert!(!e.current && e.report_age_s > 50.0, "{st:?}");
    // Back: it converges within 5 s.
    f.hub.restore(3);
    let back = f.wait_answer(&[2], Y, Duration::from_secs(15));
    println!(
        "edge cut off 60 s: answering the new version {:.0} ms after the link came back",
        back.as_secs_f64() * 1e3
    );
    assert!(back <= Duration::from_secs(5), "{back:?}");

    // Restarted while cut off: it answers from its pinned maps and its copy on disk.
    f.edges[2] = None;
    f.hub.cut(3);
    f.set_policy(10, 20);
    f.wait_answer(&[0, 1], X, Duration::from_secs(10));
    let mut e3 = f.edge(3, "edge-3-restarted.log");
    e3.wait_for("answering from version 2", 1, Duration::from_secs(10));
    e3.wait_for("store unreachable", 1, Duration::from_secs(10));
    assert!(
        e3.log().contains("0 chunks (0 bytes) fetched"),
        "{}",
        e3.log()
    );
    for _ in 0..5 {
        assert_eq!(f.answer(2), Y);
        sleep(Duration::from_millis(200));
    }
    f.hub.restore(3);
    f.edges[2] = Some(e3);
    f.wait_answer(&[2], X, Duration::from_secs(15));
}

/// Edge `n`'s (1-based) checks of x fail: its TCP to x is dropped in its namespace.
fn blind(f: &Fleet, n: usize) {
    let ns = &f.labs[n - 1].edge_ns;
    let rule = format!(
        "add table inet fleet_test\n\
         add chain inet fleet_test out {{ type filter hook output priority 0; }}\n\
         add rule inet fleet_test out ip daddr {X} tcp dport 8080 drop\n"
    );
    let file = f.dir.path(&format!("blind-{n}.nft"));
    std::fs::write(&file, rule).expect("nft file");
    let out = Command::new("nsenter")
        .arg(format!("--net=/run/netns/{ns}"))
        .args(["nft", "-f"])
        .arg(&file)
        .output()
        .expect("nft");
    assert!(out.status.success(), "nft: {}", describe(&out));
}

fn unblind(f: &Fleet, n: usize) {
    let ns = &f.labs[n - 1].edge_ns;
    let out = Command::new("nsenter")
        .arg(format!("--net=/run/netns/{ns}"))
        .args(["nft", "delete", "table", "inet", "fleet_test"])
        .output()
        .expect("nft");
    assert!(out.status.success(), "nft: {}", describe(&out));
}

#[test]
fn a_server_is_out_only_when_a_quorum_of_observers_agree() {
    let mut f = Fleet::start("quorum");
    f.wait_answer(&[0, 1, 2], X, Duration::from_secs(20));
    // Every edge votes x up first (three edges, three observers each).
    for e in f.edges.iter_mut().flatten() {
        e.wait_for(
            "x is up by this observer's checks",
            1,
            Duration::from_secs(10),
        );
    }
    // Dead for one observer: in everywhere, its own edge included.
    blind(&f, 1);
    f.edges[0].as_mut().expect("edge 1").wait_for(
        "x is down by this observer's checks",
        1,
        Duration::from_secs(10),
    );
    for _ in 0..10 {
        for n in 0..3 {
            assert_eq!(f.answer(n), X, "edge {n} with one observer voting x down");
        }
        sleep(Duration::from_millis(200));
    }
    assert!(f.status().overlay.is_empty());
    // Dead for two of three: out on every edge.
    blind(&f, 2);
    let t = f.wait_answer(&[0, 1, 2], Y, Duration::from_secs(10));
    println!(
        "x down for 2 of 3 observers: out on every edge in {:.0} ms",
        t.as_secs_f64() * 1e3
    );
    let st = f.status();
    assert_eq!(st.overlay.len(), 1, "{st:?}");
    assert_eq!(
        (
            st.overlay[0].service.as_str(),
            st.overlay[0].server.as_str()
        ),
        (NAME, "x")
    );
    // Back for one of them: one down vote left, x is in again.
    unblind(&f, 2);
    f.wait_answer(&[0, 1, 2], X, Duration::from_secs(10));
    unblind(&f, 1);

    // A version whose chunk does not match its digest, made current behind the publisher's
    // back: every edge refuses it once and answers on; the next publish moves past it.
    let bad = "0".repeat(64);
    let manifest = format!(
        "{{\"version\":99,\"table\":\"{bad}\",\"chunks\":[{{\"digest\":\"{bad}\",\"bytes\":8}}],\
         \"entries\":1,\"sources\":{{\"config\":{{\"digest\":\"{bad}\",\"bytes\":8}},\
         \"inputs\":{{}},\"compiler\":\"x\"}},\"publisher\":\"tamper\",\"published_ms\":0}}"
    );
    f.etcd
        .ctl_ok(&["put", &format!("/director/chunks/{bad}"), "DRT1junk"]);
    f.etcd
        .ctl_ok(&["put", "/director/versions/00000000000000000099", &manifest]);
    f.etcd.ctl_ok(&["put", "/director/current", "99"]);
    for e in f.edges.iter_mut().flatten() {
        e.wait_for("refusing version 99", 1, Duration::from_secs(10));
    }
    for _ in 0..5 {
        for n in 0..3 {
            assert_eq!(f.answer(n), X, "edge {n} after a bad version");
        }
        sleep(Duration::from_millis(200));
    }
    for e in f.edges.iter().flatten() {
        assert_eq!(e.count("refusing version 99"), 1, "{}", e.log());
    }
    f.set_policy(30, 20);
    f.wait_answer(&[0, 1, 2], Y, Duration::from_secs(10));
    assert_eq!(f.status().current, Some(100));
}

/// Each observer checks each server every interval × (1 ± jitter), counted from its last
/// check, and one edge's checks of its servers do not all start at the same instant.
#[test]
fn observers_check_on_time_and_spread_out() {
    let mut f = Fleet::start("timing");
    f.wait_answer(&[0, 1, 2], X, Duration::from_secs(20));
    for e in f.edges.iter_mut().flatten() {
        for srv in ["x", "y"] {
            e.wait_for(
                &format!("{srv} is up by this observer's checks"),
                1,
                Duration::from_secs(10),
            );
        }
    }
    let log = f.dir.path("checks.log");
    let lines = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    let start = lines(&log).lines().count();
    let (rev0, size0) = f.store_revision();
    sleep(Duration::from_secs(15));
    // Idle (nothing published, every vote as it was): nothing was written, so the
    // store's history does not grow.
    let (rev1, size1) = f.store_revision();
    println!("idle for 15 s: revision {rev0} → {rev1}, in use {size0} → {size1} bytes");
    assert_eq!(rev1, rev0, "an idle fleet wrote to the store\n{}", f.logs());
    let text = lines(&log);
    // (edge, server) → the times its checks came.
    let mut seen: std::collections::BTreeMap<(String, String), Vec<f64>> = Default::default();
    for l in text.lines().skip(start) {
        let mut w = l.split_whitespace();
        let (Some(t), Some(from), Some(to)) = (w.next(), w.next(), w.next()) else {
            continue;
        };
        let t: f64 = t.parse().expect("nginx's $msec");
        seen.entry((from.into(), to.into())).or_default().push(t);
    }
    // Three edges, each observing both servers (three observers a server).
    assert_eq!(seen.len(), 6, "{seen:?}\n{}", f.logs());
    // interval 1 s, jitter 0.1: each gap 0.9-1.1 s, with 0.15 s for scheduling on a
    // loaded 2-core machine.
    let (lo, hi) = (0.9 - 0.15, 1.1 + 0.15);
    let mut gaps = Vec::new();
    for (pair, times) in &seen {
        assert!(
            times.len() >= 12,
            "{pair:?}: {} checks in 15 s",
            times.len()
        );
        for w in times.windows(2) {
            let gap = w[1] - w[0];
            assert!(
                (lo..=hi).contains(&gap),
                "{pair:?}: a gap of {gap:.3} s between two checks (interval 1 s, jitter 0.1): {times:?}"
            );
            gaps.push(gap);
        }
    }
    let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
    println!(
        "{} gaps between checks: mean {mean:.3} s, min {:.3}, max {:.3}",
        gaps.len(),
        gaps.iter().copied().fold(f64::MAX, f64::min),
        gaps.iter().copied().fold(0.0, f64::max)
    );
    assert!((0.95..=1.05).contains(&mean), "mean gap {mean:.3} s");
    // Spread: an edge's check of x has a check of y within 20 ms less than half the time
    // (checks started in lockstep would always have one).
    for e in 1..=3 {
        let from = director_tests::fleet::edge_v4(e);
        let at = |srv: &str| {
            seen.get(&(from.clone(), srv.to_string()))
                .cloned()
                .unwrap_or_default()
        };
        let (xs, ys) = (at(X), at(Y));
        let together = xs
            .iter()
            .filter(|t| ys.iter().any(|u| (*t - u).abs() < 0.02))
            .count();
        println!(
            "edge {e}: {together} of {} checks of x within 20 ms of one of y",
            xs.len()
        );
        assert!(
            together * 2 < xs.len(),
            "edge {e}: {together} of {} checks of x start with one of y: {xs:?} {ys:?}",
            xs.len()
        );
    }
}

/// Wrong fleet arguments are refused before anything is touched, naming what is wrong.
#[test]
fn fleet_arguments_are_checked() {
    let ctl = director_tests::netns::ctl_binary();
    for (args, says) in [
        (
            vec!["run", "--store", "http://h:2379", "--role", "edge"],
            "--store",
        ),
        (vec!["run", "--store", "etcd://h"], "has no port"),
        (
            vec!["run", "--store", "etcd://h:2379"],
            "--role publisher or --role edge",
        ),
        (
            vec!["run", "--store", "etcd://h:2379", "--role", "publisher"],
            "--config",
        ),
        (
            vec![
                "run",
                "--store",
                "etcd://h:2379",
                "--role",
                "edge",
                "--config",
                "x.toml",
            ],
            "no --config",
        ),
        (
            vec![
                "run",
                "--store",
                "etcd://h:2379",
                "--role",
                "edge",
                "--fleet",
                "a/b",
            ],
            "--fleet",
        ),
        (
            vec![
                "run",
                "--store",
                "etcd://h:2379",
                "--role",
                "publisher",
                "--config",
                "x",
                "--keep-versions",
                "2",
            ],
            "--keep-versions 2",
        ),
        (vec!["run", "--role", "edge"], "required"),
        // Signing: an edge trusts keys, a publisher signs, or a lab says it wants neither.
        (
            vec!["run", "--store", "etcd://h:2379", "--role", "edge"],
            "--role edge needs --trust FILE",
        ),
        (
            vec![
                "run",
                "--store",
                "etcd://h:2379",
                "--role",
                "publisher",
                "--config",
                "x",
            ],
            "--role publisher needs --sign-key FILE",
        ),
        (
            vec![
                "run",
                "--store",
                "etcd://h:2379",
                "--role",
                "edge",
                "--trust",
                "/nonexistent/trust",
            ],
            "--trust /nonexistent/trust",
        ),
        (
            vec![
                "run",
                "--store",
                "etcd://h:2379",
                "--role",
                "edge",
                "--trust",
                "t",
                "--insecure-unsigned",
            ],
            "cannot be used with",
        ),
    ] {
        let out = Command::new(ctl)
            .args(&args)
            .output()
            .expect("director-ctl");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// Two publishers given the same inputs publish the same bytes: the table compiled twice
/// from real data (GeoLite2 City for five real PoPs, an RTT file) has one digest, and one
/// RTT row changed gives another digest that shares most chunks with the first.
#[test]
fn the_same_inputs_compile_to_the_same_digest() {
    use director_ctl::controller::config::Config;
    use director_ctl::fleet::version::build;
    use director_tests::bench::scale::{rtt_file, sites_and_servers, SITES};
    use std::fmt::Write as _;

    let dir = TempDir::new("fleet", "digest");
    let mut c = String::new();
    let list = sites_and_servers(&mut c, &SITES, None).expect("the real data");
    writeln!(
        c,
        "[[service]]\nname = \"www.example.com\"\nservers = [{list}]\n\
         priority = {{ rtt = 1, geo = 2 }}\n\n[rtt]\nfiles = [\"rtt.csv\"]"
    )
    .expect("text");
    let config = dir.path("director.toml");
    replace_file(&config, &c);
    replace_file(&dir.path("rtt.csv"), &rtt_file(40.0));
    let load = || Config::load(&config).expect("the config");
    let a = build(&config, &load()).expect("first compile");
    let b = build(&config, &load()).expect("second compile");
    assert!(a.entries > 10_000, "{} entries", a.entries);
    assert_eq!(a.table, b.table);
    assert_eq!(a.sources, b.sources);
    let digests = |x: &director_ctl::fleet::version::Built| -> Vec<String> {
        x.chunks.iter().map(|c| c.digest.clone()).collect()
    };
    assert_eq!(digests(&a), digests(&b));
    // One RTT measurement changed (fra from best to worst for 192.0.2.0/24): another table,
    // another inputs digest, few new chunks.
    replace_file(&dir.path("rtt.csv"), &rtt_file(200.0));
    let c2 = build(&config, &load()).expect("third compile");
    assert_ne!(c2.table, a.table);
    assert_ne!(c2.sources.inputs, a.sources.inputs);
    let old: std::collections::HashSet<String> = digests(&a).into_iter().collect();
    let new = digests(&c2).iter().filter(|d| !old.contains(*d)).count();
    println!(
        "{} entries in {} chunks; one RTT row changed: {new} new chunks",
        a.entries,
        a.chunks.len()
    );
    assert!(new <= 2, "{new} of {} chunks changed", c2.chunks.len());
}
