//! Live RTT, end to end: clients connect to servers at two sites over paths with a real
//! delay (a userspace TUN relay: this kernel has no netem), each site's `director-ctl agent`
//! takes the handshake RTT of every accepted connection in the kernel, `run` polls both
//! agents, and dig's answers (EDNS Client Subnet = the clients' /24) follow the measured
//! RTT: the nearer site, then the other one after a step change of the delay, and no flip
//! under jitter.
//!
//! Run as root: `cargo test -p director-tests --test live_rtt`.

use std::{
    net::SocketAddr,
    thread::sleep,
    time::{Duration, Instant},
};

use director_tests::config::Doc;
use director_tests::netns::{Controller, Lab};
use director_tests::rtt::{
    agent_in, assert_published_near, connect_until, explain, free_port, live_rtt, spawn_agent,
    MeasuredSite,
};
use director_tests::tempdir::{replace_file, TempDir};

const WWW: &str = "www.example.com";
const X_V4: &str = "198.51.100.10";
const Y_V4: &str = "198.51.100.20";
const CLIENT: &str = "203.0.113.10";
const CLIENT_NET: &str = "203.0.113.0/24";
const SERVER: &str = "198.51.100.1";
/// Agents' windows, seconds.
const WINDOW: u64 = 2;
/// The controller's poll of the agents, seconds.
const POLL: f64 = 0.5;

/// One site: a delayed path from a client namespace to a server namespace, a sink in a
/// cgroup of its own, and the site's agent (in the edge namespace, where `run` reaches it).
struct Site {
    measured: MeasuredSite,
    url: String,
}

fn site(lab: &Lab, name: &str, one_way_ms: u64) -> Site {
    let listen = SocketAddr::new([127, 0, 0, 1].into(), free_port());
    let log =
        std::env::temp_dir().join(format!("live-rtt-agent-{}-{name}.log", std::process::id()));
    let measured = MeasuredSite::start(
        env!("CARGO_BIN_EXE_accept_sink").as_ref(),
        &format!("live-{name}"),
        (CLIENT.parse().unwrap(), SERVER.parse().unwrap()),
        Duration::from_millis(one_way_ms),
        |cgroup| {
            spawn_agent(
                agent_in(&lab.edge_ns, name, cgroup),
                listen,
                WINDOW,
                500,
                log,
            )
        },
    );
    Site {
        measured,
        url: format!("http://{listen}/rtt"),
    }
}

impl Site {
    fn connect(&self, n: usize) {
        self.measured.connect(n);
    }
}

fn answer(lab: &Lab) -> String {
    lab.answer_a(WWW, CLIENT_NET)
}

/// Keeps both sites' clients connecting (a few handshakes each per 200 ms) until the
/// answer is `want`; the time it took.
fn until(lab: &Lab, sites: &[&Site], want: &str, within: Duration) -> Duration {
    let sites: Vec<&MeasuredSite> = sites.iter().map(|s| &s.measured).collect();
    connect_until(&sites, || answer(lab), want, within, String::new)
}

#[test]
fn answers_follow_the_rtt_agents_measure() {
    let dir = TempDir::new("dlrtt", "follow");
    let lab = Lab::new();
    lab.attach();
    let a = site(&lab, "a", 20);
    let b = site(&lab, "b", 30);
    let metrics_port = 19_181;
    let mut c = Doc::two_sites();
    c.add(&format!(
        "[rtt]\nagents = [{:?}, {:?}]\npoll = {POLL}\nmin_samples = 3\nexpire = 30\n\n\
         [metrics]\nlisten = \"127.0.0.1:{metrics_port}\"\n",
        a.url, b.url
    ));
    let cfg = dir.path("director.toml");
    replace_file(&cfg, &c.text());
    let mut run = Controller::start(&lab, &cfg, &dir.path("run.log"));
    run.wait_for("entries written", 1, Duration::from_secs(30));
    assert_eq!(answer(&lab), Y_V4, "nothing measured: admin picks y");

    // a is 40 ms away, b 60 ms: a's x once both are measured.
    let first = until(&lab, &[&a, &b], X_V4, Duration::from_secs(15));
    eprintln!("first measurements answered after {first:?}");

    // A measured server ranks before an unmeasured one, so x can answer as soon as a's
    // agent is polled with its window and b's not yet (each agent closes its own): explain
    // is read once both are.
    let metrics = format!("127.0.0.1:{metrics_port}");
    let t0 = Instant::now();
    let e = loop {
        let e = explain(&lab, &metrics, WWW, CLIENT);
        if e.servers.iter().all(|s| s.rtt.is_some()) || t0.elapsed() > Duration::from_secs(10) {
            break e;
        }
        for s in [&a, &b] {
            s.connect(2);
        }
        sleep(Duration::from_millis(200));
    };
    for (server, url, ms) in [("x", &a.url, 40.0), ("y", &b.url, 60.0)] {
        let (rtt, agent) = live_rtt(&e, server, url);
        assert!(agent.samples >= 3 && agent.age_s < 10.0, "{agent:?}");
        assert_published_near(server, rtt.ms, ms);
    }

    // A step: a's path becomes 80 ms: y, about two windows and a poll later (the window
    // the step falls in may still hold a's old minimum).
    a.measured.link.set_delay(Duration::from_millis(40));
    let step = until(&lab, &[&a, &b], Y_V4, Duration::from_secs(15));
    eprintln!("step change answered after {step:?}");
    // The aim (two windows and a poll: 4.5 s here) is reported, not asserted: timing on
    // a shared machine is the bench's; `until` bounds it at 15 s.

    // Back to 40 ms, then ±5 % jitter on both paths for 30 s (DIRECTOR_JITTER_S to run
    // longer: the 10 minutes were run by hand, see docs/live.md): no flip.
    let jitter_s: u64 = std::env::var("DIRECTOR_JITTER_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    a.measured.link.set_delay(Duration::from_millis(20));
    until(&lab, &[&a, &b], X_V4, Duration::from_secs(15));
    a.measured.link.set_jitter(Duration::from_millis(1));
    b.measured.link.set_jitter(Duration::from_micros(1500));
    let before = run.count("live inputs changed");
    let t0 = Instant::now();
    let mut flips = 0;
    let mut last = answer(&lab);
    while t0.elapsed() < Duration::from_secs(jitter_s) {
        a.connect(2);
        b.connect(2);
        let now = answer(&lab);
        if now != last {
            flips += 1;
            last = now;
        }
        sleep(Duration::from_millis(200));
    }
    let rewrites = run.count("live inputs changed") - before;
    eprintln!("{jitter_s} s of ±5 % jitter: {flips} flips, {rewrites} table changes");
    assert_eq!(flips, 0, "{}", run.log());
    assert_eq!(last, X_V4);
    run.assert_alive();
}
