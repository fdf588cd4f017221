//! Live RTT, end to end: clients connect to servers at two sites over paths with a real
//! delay (a userspace TUN relay: this kernel has no netem), each site's `director-ctl agent`
//! takes the handshake RTT of every accepted connection in the kernel, `run` polls both
//! agents, and dig's answers (EDNS Client Subnet = the clients' /24) follow the measured
//! RTT: the nearer site, then the other one after a step change of the delay, and no flip
//! under jitter.
//!
//! Run as root: `cargo test -p director-tests --test live_rtt`.

use std::{
    net::{IpAddr, SocketAddr},
    process::{Command, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use director_tests::config::Doc;
use director_tests::delay::DelayLink;
use director_tests::netns::{ctl_binary, Controller, Lab, Reply, EDGE_V4};
use director_tests::rtt::{connect_all, free_port, start_sink, Cgroup, Process};
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
    link: DelayLink,
    _sink: Process,
    _agent: Process,
    _cgroup: Cgroup,
    url: String,
}

fn sink_binary() -> std::path::PathBuf {
    env!("CARGO_BIN_EXE_accept_sink").into()
}

fn site(lab: &Lab, name: &str, one_way_ms: u64) -> Site {
    let link = DelayLink::new(
        &[CLIENT.parse().unwrap()],
        &[SERVER.parse().unwrap()],
        Duration::from_millis(one_way_ms),
    );
    let cgroup = Cgroup::new(&format!("live-{name}"));
    let sink = start_sink(
        &sink_binary(),
        &link.server_ns,
        &cgroup,
        &[SocketAddr::new(SERVER.parse().unwrap(), 80)],
    );
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let log =
        std::env::temp_dir().join(format!("live-rtt-agent-{}-{name}.log", std::process::id()));
    let child = Command::new("nsenter")
        .arg(format!("--net=/run/netns/{}", lab.edge_ns))
        .arg(ctl_binary())
        .args(["agent", "--site", name, "--cgroup"])
        .arg(&cgroup.0)
        .args(["--listen", &listen, "--window-s", &WINDOW.to_string()])
        .args(["--drain-ms", "500"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("starting director-ctl agent");
    Site {
        link,
        _sink: sink,
        _agent: Process { child, log },
        _cgroup: cgroup,
        url: format!("http://{listen}/rtt"),
    }
}

impl Site {
    fn connect(&self, n: usize) {
        let ip: IpAddr = CLIENT.parse().unwrap();
        connect_all(
            &self.link.client_ns,
            &[ip],
            &[SocketAddr::new(SERVER.parse().unwrap(), 80)],
            n,
        );
    }
}

fn answer(lab: &Lab) -> String {
    let r = Reply::parse(&lab.dig(&[
        &format!("@{EDGE_V4}"),
        WWW,
        "A",
        &format!("+subnet={CLIENT_NET}"),
        "+tries=1",
        "+time=1",
    ]));
    r.data("A").join(",")
}

/// Keeps both sites' clients connecting (a few handshakes each per 200 ms) until the
/// answer is `want`; the time it took.
fn until(lab: &Lab, sites: &[&Site], want: &str, within: Duration) -> Duration {
    let t0 = Instant::now();
    loop {
        for s in sites {
            s.connect(2);
        }
        if answer(lab) == want {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < within,
            "still {:?} after {within:?}, want {want}",
            answer(lab)
        );
        sleep(Duration::from_millis(200));
    }
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
    let explain = || -> director_ctl::api::Explain {
        let e = lab.ctl_in(
            &lab.edge_ns,
            &[
                "explain",
                "--run",
                &format!("127.0.0.1:{metrics_port}"),
                "--service",
                WWW,
                "--client",
                CLIENT,
                "--json",
            ],
        );
        assert!(e.status.success(), "{}", String::from_utf8_lossy(&e.stderr));
        serde_json::from_slice(&e.stdout).unwrap()
    };
    let t0 = Instant::now();
    let e = loop {
        let e = explain();
        if e.servers.iter().all(|s| s.rtt.is_some()) || t0.elapsed() > Duration::from_secs(10) {
            break e;
        }
        for s in [&a, &b] {
            s.connect(2);
        }
        sleep(Duration::from_millis(200));
    };
    for (server, url, ms) in [("x", &a.url, 40.0), ("y", &b.url, 60.0)] {
        let s = e.servers.iter().find(|v| v.server == server).unwrap();
        let rtt = s.rtt.as_ref().unwrap_or_else(|| panic!("{server}: no rtt"));
        let agent = rtt.agent.as_ref().expect("a live measurement");
        assert_eq!(&agent.url, url);
        assert!(agent.samples >= 3 && agent.age_s < 10.0, "{agent:?}");
        // The published value is smoothed and moves only beyond max(1 ms, 5 %): it may
        // lag the path by that much more than the agent's own ±5 % (rtt_agent.rs checks
        // the agent's accuracy).
        assert!(
            (rtt.ms - ms).abs() <= (ms * 0.10).max(4.0),
            "{server}: {} ms measured over a {ms} ms path",
            rtt.ms
        );
    }

    // A step: a's path becomes 80 ms: y, about two windows and a poll later (the window
    // the step falls in may still hold a's old minimum).
    a.link.set_delay(Duration::from_millis(40));
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
    a.link.set_delay(Duration::from_millis(20));
    until(&lab, &[&a, &b], X_V4, Duration::from_secs(15));
    a.link.set_jitter(Duration::from_millis(1));
    b.link.set_jitter(Duration::from_micros(1500));
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
