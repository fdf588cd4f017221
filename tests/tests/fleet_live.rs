//! A fleet's publisher on live inputs, end to end: routes from a real router over BMP (FRR
//! with its BMP module, fed by a GoBGP injector) and RTT from agents reach the publisher in
//! the fleet's hub namespace; it decides again, publishes a version through etcd, and the
//! edge (XDP in its own lab) answers dig's queries from it.
//!
//! ```text
//!   injector ── FRR ──BMP──► publisher (hub netns, 198.51.100.9)  ──► etcd ×3 ──► edge ── dig
//!   stand-in agents (HTTP, hub) ─┘                                    ▲
//!   clients ─delay─► servers (a cgroup) ◄── director-ctl agent (hub) ──┘ rtt/<site>/<agent>
//! ```
//!
//! The config is the shared two-site one: x at site a, y at site b. For BGP, www sorts by
//! `ext` (AS-path length) then `admin` (y first), and site a's view is the router: a client
//! in an announced prefix gets x, and y once it is withdrawn. For RTT, www sorts by `rtt`
//! then `admin`: the agents say which site is nearer. The client prefixes are in
//! 198.18.0.0/15 (benchmarking): they only name clients in EDNS Client Subnet.
//!
//! Names: the router lab's namespaces are tagged `flv`, the fleet is `flv` in the store;
//! the hub's and the lab's namespaces and interfaces are the shared harnesses', named after
//! this process's pid, and all of it is removed on drop, also when a test fails.
//!
//! Run as root: `cargo test -p director-tests --test fleet_live -- --test-threads=1`.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpListener},
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    thread::{sleep, JoinHandle},
    time::{Duration, Instant, SystemTime},
};

use director_ctl::api::FleetStatus;
use director_tests::config::Doc;
use director_tests::fleet::{Etcd, Hub, Keys, PUBLISHER_V4};
use director_tests::netns::{describe, Controller, Lab};
use director_tests::routers::{listen_in, Options, RouterKind, RouterLab};
use director_tests::rtt::{agent_in, connect_until, spawn_agent, MeasuredSite};
use director_tests::tempdir::{replace_file, TempDir};

const WWW: &str = "www.example.com";
const X_V4: &str = "198.51.100.10";
const Y_V4: &str = "198.51.100.20";
const FLEET: &str = "flv";
/// Where the publisher listens for BMP, and where the stand-in agents answer (hub netns).
const BMP_PORT: u16 = 15_179;
const AGENT_PORT: u16 = 15_471;
/// The publisher's map page (`[ui] listen`, the BGP test's).
const UI_PORT: u16 = 15_180;
const PREFIX: &str = "198.18.0.0/16";
const BGP_CLIENT: &str = "198.18.5.0/24";
const RTT_CLIENT: &str = "198.18.7.0/24";
/// Leases: a stopped publisher's leadership lasts this long at most.
const LEASE: &str = "2";

/// Within this, a change at the router or an agent must be answered at the edge (the aim
/// is a second or two; the bound leaves room for a loaded 2-core machine).
const WITHIN: Duration = Duration::from_secs(10);

/// The hub with etcd, one edge lab joined to it, the publisher, and what feeds it. Dropped
/// in field order: the processes first, then what they ran in.
struct Fleet {
    publisher: Option<Controller>,
    /// A second publisher, standing by (the takeover test's).
    standby: Option<Controller>,
    edge: Controller,
    routers: Option<RouterLab>,
    agents: Option<Agents>,
    /// Real agents writing into the store (the store test's).
    sites: Vec<MeasuredSite>,
    lab: Lab,
    etcd: Etcd,
    hub: Hub,
    dir: TempDir,
    config: PathBuf,
    /// The publishers' key and the edge's trust file.
    keys: Keys,
}

impl Fleet {
    /// The hub, etcd and the edge's lab; `feed` starts the router or the agents (given the
    /// hub's namespace) and returns the config; then the publisher and the edge start.
    fn start(tag: &str, feed: impl FnOnce(&Hub, &mut Fleet0) -> String) -> Fleet {
        let dir = TempDir::new(FLEET, tag);
        let hub = Hub::new();
        let etcd = Etcd::start_with(
            &hub,
            &["--heartbeat-interval", "50", "--election-timeout", "500"],
        );
        let lab = Lab::new();
        lab.attach();
        hub.join(&lab, 1);
        let mut f0 = Fleet0 {
            routers: None,
            agents: None,
        };
        let text = feed(&hub, &mut f0);
        let config = dir.path("fleet.toml");
        replace_file(&config, &text);
        let keys = Keys::make(&dir.path(""), "p");
        let trust = keys.trust_args();
        let mut f = Fleet {
            publisher: None,
            standby: None,
            edge: Controller::start_command(
                &lab,
                &[
                    "run",
                    &trust[0],
                    &trust[1],
                    "--store",
                    &etcd.url(),
                    "--role",
                    "edge",
                    "--fleet",
                    FLEET,
                    "--name",
                    "flv-e1",
                    "--site",
                    "a",
                    "--state-dir",
                    &dir.path("edge-state").display().to_string(),
                    "--lease-seconds",
                    LEASE,
                ],
                &dir.path("edge.log"),
            ),
            routers: f0.routers,
            agents: f0.agents,
            sites: Vec::new(),
            lab,
            etcd,
            hub,
            dir,
            config,
            keys,
        };
        f.publisher = Some(f.start_publisher("flv-p1", &f.config, "publisher.log"));
        f
    }

    fn start_publisher(&self, name: &str, config: &std::path::Path, log: &str) -> Controller {
        let sign = self.keys.sign_args();
        Controller::start_in(
            self.hub.ns(),
            std::path::Path::new("/nonexistent"),
            &[
                "run",
                &sign[0],
                &sign[1],
                "--store",
                &self.etcd.url(),
                "--role",
                "publisher",
                "--fleet",
                FLEET,
                "--config",
                &config.display().to_string(),
                "--name",
                name,
                "--poll-ms",
                "100",
                "--lease-seconds",
                LEASE,
            ],
            &self.dir.path(log),
        )
    }

    fn publisher(&mut self) -> &mut Controller {
        self.publisher.as_mut().expect("the publisher runs")
    }

    /// Waits until the router's BMP session is up and the publisher made a version current.
    fn routers_in(&mut self) {
        self.routers
            .as_mut()
            .expect("the router lab runs")
            .wait_bmp_connected(Duration::from_secs(30));
        self.publisher()
            .wait_for("is current", 1, Duration::from_secs(30));
    }

    /// The edge's A answer for a client in `subnet` (ECS), or "" when it did not answer.
    fn answer(&self, subnet: &str) -> String {
        self.lab.answer_a(WWW, subnet)
    }

    /// Polls the edge until the answer for `subnet` is `want`; how long it took.
    fn until(&self, subnet: &str, want: &str, within: Duration) -> Duration {
        let t0 = Instant::now();
        loop {
            let got = self.answer(subnet);
            if got == want {
                return t0.elapsed();
            }
            assert!(
                t0.elapsed() < within,
                "{subnet}: the edge still answers {got:?} after {within:?}, want {want:?}\n{}",
                self.logs()
            );
            sleep(Duration::from_millis(10));
        }
    }

    /// The publisher's map page's table generation (`GET /ui/feed`), once it answers and,
    /// with `not`, once it differs from that (each bounded by [`WITHIN`]).
    fn page_generation(&self, not: Option<&str>) -> String {
        let url = format!("http://{PUBLISHER_V4}:{UI_PORT}/ui/feed");
        let t0 = Instant::now();
        loop {
            let out = std::process::Command::new("nsenter")
                .arg(format!("--net=/run/netns/{}", self.hub.ns()))
                .args(["curl", "-sS", "--max-time", "5", "--fail", &url])
                .output()
                .expect("curl");
            let feed = serde_json::from_slice::<director_ctl::api::Atlas>(&out.stdout).ok();
            if let Some(a) = feed {
                if not != Some(a.generation.as_str()) {
                    return a.generation;
                }
            }
            assert!(
                t0.elapsed() < WITHIN,
                "the map page's feed: {} (not {not:?}) after {WITHIN:?}\n{}",
                describe(&out),
                self.logs()
            );
            sleep(Duration::from_millis(100));
        }
    }

    fn status(&self) -> FleetStatus {
        let out = self.lab.ctl(&[
            "fleet",
            "status",
            "--store",
            &self.etcd.url(),
            "--fleet",
            FLEET,
            "--json",
        ]);
        assert!(out.status.success(), "fleet status: {}", describe(&out));
        serde_json::from_slice(&out.stdout).expect("fleet status --json")
    }

    fn logs(&self) -> String {
        let mut s = String::new();
        if let Some(p) = &self.publisher {
            s += &format!("--- publisher:\n{}\n", p.log());
        }
        if let Some(p) = &self.standby {
            s += &format!("--- standby:\n{}\n", p.log());
        }
        s += &format!("--- edge:\n{}\n", self.edge.log());
        if let Some(r) = &self.routers {
            s += &format!("--- routers:\n{}\n", r.log_tails());
        }
        s
    }

    /// The versions the publisher's log names as made current, in order.
    fn published(log: &str) -> Vec<u64> {
        log.lines()
            .filter_map(|l| {
                let rest = l.split(": version ").nth(1)?;
                let (n, tail) = rest.split_once(' ')?;
                tail.starts_with("is current").then(|| n.parse().ok())?
            })
            .collect()
    }
}

/// What a feed adds to the fleet before the publisher starts.
struct Fleet0 {
    routers: Option<RouterLab>,
    agents: Option<Agents>,
}

/// The router lab reporting to the publisher's address in the hub, and the config: site
/// a's view is the router, www sorts by `ext` then `admin`.
fn bgp_feed(hub: &Hub, f0: &mut Fleet0) -> String {
    let collector = SocketAddr::new(PUBLISHER_V4.parse().unwrap(), BMP_PORT);
    let routers = RouterLab::start_with(
        "flv",
        hub.ns(),
        collector,
        Options {
            peers: 1,
            ..Options::new(RouterKind::Frr)
        },
    );
    let text = bgp_config(&routers, collector);
    f0.routers = Some(routers);
    text
}

fn bgp_config(routers: &RouterLab, collector: SocketAddr) -> String {
    let mut c = Doc::two_sites();
    c.set(
        "site",
        "a",
        "bmp_router",
        routers.router_bmp_addr.to_string(),
    );
    c.set(
        "service",
        WWW,
        "priority",
        toml::Value::Table(
            [
                ("ext".to_string(), toml::Value::Integer(1)),
                ("admin".to_string(), toml::Value::Integer(2)),
            ]
            .into_iter()
            .collect(),
        ),
    );
    c.add(&format!(
        "[bgp]\nbmp_listen = \"{collector}\"\nhold = 300\nquiet = 2\n"
    ));
    c.text()
}

/// A route announced and withdrawn at the router's BGP peer reaches the edge through the
/// publisher (BMP → decided again → a version in etcd → the edge's XDP): 5 rounds each way,
/// timed from the injector's command to dig's new answer. Each version ships only the
/// chunks that changed. `fleet status` names the router. A restarted publisher waits for
/// the router's table before it publishes, so the edge never answers from a table made
/// without it.
#[test]
fn a_withdrawal_at_the_router_reaches_the_edge_through_the_publisher() {
    let mut f = Fleet::start("bgp", |hub, f0| {
        let text = bgp_feed(hub, f0);
        format!("{text}\n[ui]\nlisten = \"{PUBLISHER_V4}:{UI_PORT}\"\n")
    });
    f.routers_in();
    f.until(BGP_CLIENT, Y_V4, WITHIN);

    // The map page draws what the leader published: its table's generation follows.
    let without = f.page_generation(None);

    let mut announce = Vec::new();
    let mut withdraw = Vec::new();
    for round in 0..5 {
        let t = Instant::now();
        f.routers
            .as_ref()
            .unwrap()
            .announce(PREFIX, &[64501], None, None);
        f.until(BGP_CLIENT, X_V4, WITHIN);
        announce.push(t.elapsed());
        if round == 0 {
            let with = f.page_generation(Some(&without));
            assert_ne!(with, without);
        }
        let t = Instant::now();
        f.routers.as_ref().unwrap().withdraw(PREFIX);
        f.until(BGP_CLIENT, Y_V4, WITHIN);
        withdraw.push(t.elapsed());
    }
    // The same table as before the first announcement: the same generation.
    let back = f.page_generation(None);
    assert_eq!(back, without, "the page does not draw the table published");
    announce.sort();
    withdraw.sort();
    eprintln!(
        "through the fleet: announce → edge answer {announce:?}; withdraw → edge answer \
         {withdraw:?}"
    );
    // Space nobody announced is not touched.
    assert_eq!(f.answer("198.19.0.0/24"), Y_V4);
    let log = f.publisher().log();
    assert!(
        log.contains("live inputs changed"),
        "the publisher took no live change:\n{log}"
    );
    // A one-prefix change ships a chunk or two, not the table (the test's table is one
    // chunk: it must not ship the config again).
    for l in log.lines().filter(|l| l.contains("is current")).skip(1) {
        let new: usize = l
            .split(" chunks, ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no chunk count in {l:?}"));
        assert!(new <= 2, "a live change shipped {new} chunks: {l}");
    }

    let st = f.status();
    let live = st
        .live_inputs
        .as_ref()
        .expect("the current version names its live inputs");
    let router = f.routers.as_ref().unwrap().router_bmp_addr.to_string();
    assert_eq!(live.routers, vec![format!("a={router}")], "{live:?}");
    assert!(!live.digest.is_empty());

    // Announced, then the publisher restarts: the version it finds stands until the
    // router has sent its table again, so the edge answers x throughout.
    f.routers
        .as_ref()
        .unwrap()
        .announce(PREFIX, &[64501], None, None);
    f.until(BGP_CLIENT, X_V4, WITHIN);
    let before = Fleet::published(&f.publisher().log());
    f.publisher().stop();
    let t = Instant::now();
    f.publisher = Some(f.start_publisher("flv-p1", &f.config, "publisher-2.log"));
    let mut asked = 0;
    while t.elapsed() < Duration::from_secs(8) {
        assert_eq!(
            f.answer(BGP_CLIENT),
            X_V4,
            "during the publisher's restart, at {:?}\n{}",
            t.elapsed(),
            f.logs()
        );
        asked += 1;
        sleep(Duration::from_millis(50));
    }
    let log = f.publisher().log();
    assert!(
        log.contains("leading the fleet"),
        "the restarted publisher does not lead:\n{log}"
    );
    assert!(
        log.contains("already this table") || !Fleet::published(&log).is_empty(),
        "the restarted publisher neither found its table current nor published:\n{log}"
    );
    eprintln!(
        "{asked} answers during the publisher's restart, all x (versions before: {before:?}, \
         after: {:?}); the restarted publisher said:\n{}",
        Fleet::published(&log),
        log.lines()
            .filter(|l| l.contains("BMP") || l.contains("version") || l.contains("live"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // And it follows the router again.
    let t = Instant::now();
    f.routers.as_ref().unwrap().withdraw(PREFIX);
    f.until(BGP_CLIENT, Y_V4, WITHIN);
    eprintln!(
        "after the restart: withdraw → edge answer {:?}",
        t.elapsed()
    );
    f.publisher().assert_alive();
    f.edge.assert_alive();
}

/// The leading publisher dies (SIGKILL: its lease runs out): the standby, which the router
/// has been sending to all along, takes over with the router's table and publishes
/// nothing made without it (it does not wait for a resend), so the edge answers from the
/// version with the route throughout; then a withdrawal reaches the edge through it.
///
/// The two publishers share the hub's namespace, so each listens on an address of its own
/// there (two config files that differ only in `bmp_listen`); on hosts of their own they
/// would share one config listening on the wildcard address.
#[test]
fn a_standby_takes_over_with_the_routers_table() {
    const STANDBY_V4: &str = "198.51.100.8";
    let mut f = Fleet::start("takeover", bgp_feed);
    f.routers_in();
    f.hub.add_address(&format!("{STANDBY_V4}/24"));
    let second = SocketAddr::new(STANDBY_V4.parse().unwrap(), BMP_PORT);
    let standby_config = f.dir.path("fleet-standby.toml");
    replace_file(
        &standby_config,
        &bgp_config(f.routers.as_ref().unwrap(), second),
    );
    f.standby = Some(f.start_publisher("flv-p2", &standby_config, "standby.log"));
    f.routers
        .as_mut()
        .unwrap()
        .also_report_to(second, Duration::from_secs(30));
    f.routers
        .as_ref()
        .unwrap()
        .announce(PREFIX, &[64501], None, None);
    f.until(BGP_CLIENT, X_V4, WITHIN);
    // The standby has the route (its collector synced) before the leader goes.
    f.standby
        .as_mut()
        .unwrap()
        .wait_for("synced", 1, Duration::from_secs(10));
    sleep(Duration::from_millis(500));

    let t = Instant::now();
    f.publisher().kill();
    let mut asked = 0;
    let standby = f.standby.as_ref().unwrap();
    while standby.count("leading the fleet") == 0 || t.elapsed() < Duration::from_secs(4) {
        assert_eq!(
            f.answer(BGP_CLIENT),
            X_V4,
            "during the takeover, at {:?}\n{}",
            t.elapsed(),
            f.logs()
        );
        asked += 1;
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the standby did not lead within 20 s\n{}",
            f.logs()
        );
        sleep(Duration::from_millis(50));
    }
    let log = standby.log();
    assert!(
        !log.contains("stands until the BMP routers"),
        "the standby waited for a resend it did not need:\n{log}"
    );
    eprintln!(
        "{asked} answers during the takeover, all x; the standby said:\n{}",
        log.lines()
            .filter(|l| l.contains("version") || l.contains("leading"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let t = Instant::now();
    f.routers.as_ref().unwrap().withdraw(PREFIX);
    let took = f.until(BGP_CLIENT, Y_V4, WITHIN);
    eprintln!(
        "after the takeover: withdraw → edge answer {took:?} ({:?} with the command)",
        t.elapsed()
    );
    f.standby.as_mut().unwrap().assert_alive();
    f.edge.assert_alive();
}

/// Stand-ins for `director-ctl agent` at sites a and b (`GET /a`, `GET /b` on one port in
/// the hub): each answers the report the agent's HTTP endpoint serves, with the RTT the
/// test sets for `RTT_CLIENT`, in a window ending at the current second.
struct Agents {
    rtt_ms: Arc<Mutex<(f64, f64)>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Agents {
    fn start(ns: &str, addr: SocketAddr, a_ms: f64, b_ms: f64) -> Agents {
        let listener = listen_in(ns, addr);
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let rtt_ms = Arc::new(Mutex::new((a_ms, b_ms)));
        let stop = Arc::new(AtomicBool::new(false));
        let (r, s) = (Arc::clone(&rtt_ms), Arc::clone(&stop));
        let thread = std::thread::spawn(move || serve(&listener, &r, &s));
        Agents {
            rtt_ms,
            stop,
            thread: Some(thread),
        }
    }

    fn set(&self, a_ms: f64, b_ms: f64) {
        *self.rtt_ms.lock().unwrap() = (a_ms, b_ms);
    }
}

impl Drop for Agents {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(l: &TcpListener, rtt: &Mutex<(f64, f64)>, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        let Ok((mut c, _)) = l.accept() else {
            sleep(Duration::from_millis(10));
            continue;
        };
        let _ = c.set_nonblocking(false);
        let _ = c.set_read_timeout(Some(Duration::from_secs(1)));
        let mut buf = [0u8; 2048];
        let n = c.read(&mut buf).unwrap_or(0);
        let req = String::from_utf8_lossy(&buf[..n]);
        let (a, b) = *rtt.lock().unwrap();
        let (site, ms) = if req.starts_with("GET /b ") {
            ("b", b)
        } else {
            ("a", a)
        };
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let end = now / 1000 * 1000;
        let body = format!(
            "{{\"site\":\"{site}\",\"records\":[{{\"prefix\":\"{RTT_CLIENT}\",\"min_ms\":{ms},\
             \"median_ms\":{ms},\"samples\":50,\"window_start_ms\":{},\"window_end_ms\":{end}}}]}}",
            end - 1000
        );
        let _ = write!(
            c,
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n{body}",
            body.len()
        );
    }
}

/// Three rounds of site a's RTT stepping up (`slow(true)`: y answers) and back
/// (`slow(false)`: x answers), each timed from the change to the edge's new answer, which
/// `until` waits for; the times printed, as `what` reached the edge.
fn step_rounds(what: &str, slow: impl Fn(bool), until: impl Fn(&str)) {
    let mut steps = Vec::new();
    for _ in 0..3 {
        for (is_slow, want) in [(true, Y_V4), (false, X_V4)] {
            let t = Instant::now();
            slow(is_slow);
            until(want);
            steps.push(t.elapsed());
        }
    }
    eprintln!(
        "{what} → edge answer max {:?} ({steps:?})",
        steps.iter().max().unwrap()
    );
}

/// An agent's RTT change reaches the edge through the publisher: site a nearer (x), then
/// a's path slower than b's (y), then back, each timed from the agent's change to dig's
/// new answer (the agents are polled every 0.5 s).
#[test]
fn an_agents_rtt_change_reaches_the_edge_through_the_publisher() {
    let mut f = Fleet::start("rtt", |hub, f0| {
        let addr = SocketAddr::new(PUBLISHER_V4.parse().unwrap(), AGENT_PORT);
        f0.agents = Some(Agents::start(hub.ns(), addr, 10.0, 50.0));
        let mut c = Doc::two_sites();
        c.add(&format!(
            "[rtt]\nagents = [\"http://{addr}/a\", \"http://{addr}/b\"]\npoll = 0.5\n\
             min_samples = 1\nexpire = 120\n"
        ));
        c.text()
    });
    f.publisher()
        .wait_for("is current", 1, Duration::from_secs(30));
    let first = f.until(RTT_CLIENT, X_V4, WITHIN);
    eprintln!("first measurements answered at the edge {first:?} after the first version");
    let agents = f.agents.as_ref().unwrap();
    step_rounds(
        "through the fleet: agent's RTT change",
        |slow| agents.set(if slow { 80.0 } else { 10.0 }, 50.0),
        |want| {
            f.until(RTT_CLIENT, want, WITHIN);
        },
    );
    let st = f.status();
    let live = st
        .live_inputs
        .as_ref()
        .expect("the current version names its live inputs");
    assert_eq!(live.agents.len(), 2, "{live:?}");
    assert!(live.measurements >= 2, "{live:?}");
    f.publisher().assert_alive();
    f.edge.assert_alive();
}

/// The store test's client (one /24 in ECS) and its site's server, on each delay line.
const STORE_CLIENT: &str = "203.0.113.10";
const STORE_CLIENT_NET: &str = "203.0.113.0/24";
const STORE_SERVER: &str = "198.51.100.1";

/// A site measured by a real agent that writes into the store: clients reach the site's
/// server over a delay line, the server (the accept sink) runs in a cgroup of the test's
/// own, and `director-ctl agent --store` (in the hub, where etcd is) measures it.
fn store_site(f: &Fleet, site: &str, one_way_ms: u64, port: u16) -> MeasuredSite {
    MeasuredSite::start(
        env!("CARGO_BIN_EXE_accept_sink").as_ref(),
        &format!("flv-{site}"),
        (STORE_CLIENT.parse().unwrap(), STORE_SERVER.parse().unwrap()),
        Duration::from_millis(one_way_ms),
        |cgroup| {
            let mut agent = agent_in(f.hub.ns(), site, cgroup);
            agent
                .args(["--store", &f.etcd.url(), "--fleet", FLEET])
                .args(["--name", &format!("agent-{site}")]);
            spawn_agent(
                agent,
                SocketAddr::new([127, 0, 0, 1].into(), port),
                1,
                250,
                f.dir.path(&format!("agent-{site}.log")),
            )
        },
    )
}

impl Fleet {
    /// Keeps every store site's client connecting (a few handshakes each per 200 ms) until
    /// the edge answers `want` for the store test's client; how long it took.
    fn until_measured(&self, want: &str, within: Duration) -> Duration {
        let sites: Vec<&MeasuredSite> = self.sites.iter().collect();
        connect_until(
            &sites,
            || self.answer(STORE_CLIENT_NET),
            want,
            within,
            || self.logs(),
        )
    }

    /// The agents' keys in the store (under `/<fleet>/rtt/`).
    fn agent_keys(&self) -> Vec<String> {
        let out = self
            .etcd
            .ctl_ok(&["get", "--prefix", &format!("/{FLEET}/rtt/"), "--keys-only"]);
        out.lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect()
    }

    /// Polls the store until the agents' keys are `want`; how long it took.
    fn until_keys(&self, want: &[&str], within: Duration) -> Duration {
        let t0 = Instant::now();
        loop {
            let keys = self.agent_keys();
            if keys == want {
                return t0.elapsed();
            }
            assert!(
                t0.elapsed() < within,
                "the agents' keys are {keys:?} after {within:?}, want {want:?}"
            );
            sleep(Duration::from_millis(50));
        }
    }
}

/// Agents that write into the store, and a publisher that polls none of them: the
/// publisher reads their reports from etcd (`[rtt] from_store`), and the edge's answer
/// follows an RTT step measured by the real agents (site a's path from 40 to 80 ms, b's
/// 60 ms). A killed agent's key goes when its lease runs out; a stopped one revokes it.
#[test]
fn agents_write_into_the_store_and_the_edge_follows_their_rtt() {
    let mut f = Fleet::start("store", |_, _| {
        let mut c = Doc::two_sites();
        c.add("[rtt]\nfrom_store = true\npoll = 0.5\nmin_samples = 1\nexpire = 120\n");
        c.text()
    });
    f.publisher()
        .wait_for("is current", 1, Duration::from_secs(30));
    // Nothing measured yet: the administrative order picks y, once the edge has fetched
    // the first version (a moment after the publisher made it current).
    f.until(STORE_CLIENT_NET, Y_V4, WITHIN);
    f.sites.push(store_site(&f, "a", 20, AGENT_PORT + 1));
    f.sites.push(store_site(&f, "b", 30, AGENT_PORT + 2));
    let first = f.until_measured(X_V4, Duration::from_secs(30));
    eprintln!("first measurements through the store answered at the edge after {first:?}");
    let keys = [
        format!("/{FLEET}/rtt/a/agent-a"),
        format!("/{FLEET}/rtt/b/agent-b"),
    ];
    assert_eq!(f.agent_keys(), keys);

    step_rounds(
        "through the store: the path's RTT step",
        |slow| {
            let one_way = if slow { 40 } else { 20 };
            f.sites[0].link.set_delay(Duration::from_millis(one_way));
        },
        |want| {
            f.until_measured(want, Duration::from_secs(20));
        },
    );
    let st = f.status();
    let live = st
        .live_inputs
        .as_ref()
        .expect("the current version names its live inputs");
    assert_eq!(
        live.agents,
        ["store:a/agent-a", "store:b/agent-b"],
        "{live:?}"
    );
    let seen: Vec<(&str, &str)> = st
        .agents
        .iter()
        .map(|a| (a.site.as_str(), a.name.as_str()))
        .collect();
    assert_eq!(seen, [("a", "agent-a"), ("b", "agent-b")], "{st:?}");
    let log = f.publisher().log();
    assert!(
        log.contains("live inputs changed") && !log.contains("RTT agent unreachable"),
        "{log}"
    );

    // Killed: nothing revokes its lease, which runs out (three 1 s windows).
    f.sites[0].agent.child.kill().expect("killing agent a");
    let _ = f.sites[0].agent.child.wait();
    let t = Instant::now();
    let gone = f.until_keys(&[keys[1].as_str()], Duration::from_secs(15));
    assert!(
        gone >= Duration::from_secs(1),
        "agent a's key went {gone:?} after SIGKILL: not by its lease"
    );
    eprintln!(
        "a killed agent's key gone {gone:?} after SIGKILL ({:?})",
        t.elapsed()
    );
    // Stopped: it revokes its lease on the way out.
    let t = Instant::now();
    assert!(
        f.sites[1].agent.stop(Duration::from_secs(10)),
        "agent b did not stop on SIGTERM: {}",
        f.sites[1].agent.log()
    );
    let gone = f.until_keys(&[], Duration::from_secs(5));
    assert!(f.status().agents.is_empty());
    eprintln!(
        "a stopped agent's key gone {gone:?} after it exited ({:?} after SIGTERM)",
        t.elapsed()
    );
    f.publisher().assert_alive();
    f.edge.assert_alive();
}
