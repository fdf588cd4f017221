//! VIP steering end to end: a real client (curl, and a few hundred kept-alive connections
//! of our own), director attached to the edge under `director-ctl run`, and three servers
//! on a bridge running nginx with the VIPs on their loopback, in both forwarding modes and
//! both address families (see `director_tests::vipnet` for the topology).
//!
//! What must hold: each client prefix lands on its best server; established connections
//! stay on their server while the decisions are replaced and a server is drained, none
//! reset or stalled; new connections follow the new decisions; a server whose health check
//! fails loses new connections within the check bound; what is not for a VIP reaches the
//! edge's own stack; and the edge never carries an answer (direct server return).

use std::{
    path::Path,
    process::Command,
    thread::sleep,
    time::{Duration, Instant},
};

use director_ctl::api;
use director_tests::{
    netns::Controller,
    tempdir::{replace_file, TempDir},
    vipnet::{
        keepalive, ConnReport, VipNet, CLIENT_HIGH4, CLIENT_HIGH6, CLIENT_LOW4, CLIENT_LOW6, VIP4,
        VIP6,
    },
};

/// Health checks: every second (the shortest allowed), 0.5 s timeout, down after 2 failures.
const INTERVAL: f64 = 1.0;
const TIMEOUT: f64 = 0.5;
const FALL: f64 = 2.0;
/// Beyond the checks' own time: the publisher's write, curl's start, and this shared
/// 2-core machine's scheduling.
const MARGIN: f64 = 2.0;

/// RTT per (client half, site): the lower half of each family is nearest `low`, the upper
/// half nearest b, then c, then a.
fn rtt(low: &str) -> String {
    let mut s = String::from("# prefix,site,rtt_ms\n");
    let low_order: Vec<&str> = match low {
        "a" => vec!["a", "b", "c"],
        _ => vec!["c", "a", "b"],
    };
    for net in ["192.0.2.0/25", "2001:db8::/65"] {
        for (site, ms) in low_order.iter().zip([10, 50, 60]) {
            s.push_str(&format!("{net},{site},{ms}\n"));
        }
    }
    for net in ["192.0.2.128/25", "2001:db8:0:0:8000::/65"] {
        for (site, ms) in ["b", "c", "a"].iter().zip([10, 20, 50]) {
            s.push_str(&format!("{net},{site},{ms}\n"));
        }
    }
    s
}

fn config(mode: &str, rtt: &Path) -> String {
    let servers: String = (0..3)
        .map(|i| {
            format!(
                "[[server]]\nname = \"s{n}\"\nsite = \"{site}\"\nipv4 = \"198.51.100.{o}\"\n\
                 ipv6 = \"2001:db8:b::{o}\"\npreference = {n}\n",
                n = i + 1,
                site = ["a", "b", "c"][i],
                o = 11 + i,
            )
        })
        .collect();
    format!(
        "[health]\ninterval = {INTERVAL}\ntimeout = {TIMEOUT}\nrise = 2\nfall = {FALL}\n\
         jitter = 0.1\n\n\
         [steer]\nencap_source4 = \"198.51.100.128/28\"\n\
         encap_source6 = \"2001:db8:b::100:0/112\"\n\n\
         [[site]]\nname = \"a\"\n[[site]]\nname = \"b\"\n[[site]]\nname = \"c\"\n\n\
         {servers}\n\
         [[service]]\nname = \"web.example.com\"\nservers = [\"s1\", \"s2\", \"s3\"]\n\
         priority = {{ rtt = 1, admin = 2 }}\n\
         vip = [\"{VIP4}:80\", \"[{VIP6}]:80\"]\nmode = \"{mode}\"\n\
         health = {{ type = \"tcp\", port = 80 }}\n\n\
         [rtt]\nfiles = [{:?}]\n",
        rtt.display().to_string()
    )
}

/// curl from `src` to `vip` until it answers `want` (the server's name); panics after
/// `within`. Returns how long it took.
fn expect_server(net: &VipNet, src: &str, vip: &str, want: &str, within: Duration) -> Duration {
    let t0 = Instant::now();
    let mut last;
    loop {
        last = net.curl(src, vip);
        if last.as_deref() == Ok(want) {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < within,
            "from {src} to {vip}: wanted {want} within {within:?}, last got {last:?}; \
             flows stats: {}",
            net.lab
                .ctl(&["flows", "stats"])
                .stdout
                .iter()
                .map(|&b| b as char)
                .collect::<String>()
        );
        sleep(Duration::from_millis(100));
    }
}

fn expected_server(src: &str) -> &'static str {
    if src == CLIENT_LOW4 || src == CLIENT_LOW6 {
        "s1"
    } else {
        "s2"
    }
}

fn check_connections(reports: &[ConnReport], want_total: usize) {
    assert_eq!(reports.len(), want_total);
    let mut problems = Vec::new();
    for r in reports {
        let want = expected_server(&r.src);
        if let Some(e) = &r.error {
            problems.push(format!(
                "{} → {}: {e} (servers {:?})",
                r.src, r.vip, r.servers
            ));
        } else if r.servers != [want] {
            problems.push(format!(
                "{} → {}: answered by {:?}, wanted only {want}",
                r.src, r.vip, r.servers
            ));
        } else if r.max_wait > Duration::from_secs(3) {
            problems.push(format!(
                "{} → {}: stalled {:?} for one answer",
                r.src, r.vip, r.max_wait
            ));
        } else if r.requests < 3 {
            problems.push(format!(
                "{} → {}: only {} answers",
                r.src, r.vip, r.requests
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{} of {} kept-alive connections failed:\n{}",
        problems.len(),
        reports.len(),
        problems.join("\n")
    );
}

fn steer_end_to_end(mode: &str) {
    let dir = TempDir::new("dsteer", mode);
    let rtt_file = dir.path("rtt.csv");
    let config_file = dir.path("director.toml");
    replace_file(&rtt_file, &rtt("a"));
    replace_file(&config_file, &config(mode, &rtt_file));

    let mut net = VipNet::new();
    if mode == "ipip" {
        net.attach_decap();
    }
    net.attach();
    let mut run = Controller::start(&net.lab, &config_file, &dir.path("run.log"));
    run.wait_for("entries written", 1, Duration::from_secs(20));
    let edge = net.watch_edge();

    let cfg = config_file.display().to_string();
    let explained: api::Explain = serde_json::from_str(&net.ctl_ok(&[
        "explain",
        "--config",
        &cfg,
        "--service",
        "web.example.com",
        "--client",
        CLIENT_LOW4,
        "--json",
    ]))
    .expect("explain --json");
    assert_eq!(explained.vips.len(), 2, "{explained:?}");
    assert_eq!(
        explained.mode.map(director_common::steer::Forward::name),
        Some(mode)
    );
    assert!(
        !explained.dns,
        "a VIP service's name is not answered by default"
    );

    // 1. Each client half gets its nearest server, in both families.
    let first = Duration::from_secs(10);
    for (src, vip) in [
        (CLIENT_LOW4, VIP4),
        (CLIENT_HIGH4, VIP4),
        (CLIENT_LOW6, VIP6),
        (CLIENT_HIGH6, VIP6),
    ] {
        expect_server(&net, src, vip, expected_server(src), first);
    }

    // 2. 200 kept-alive connections move data while the decisions are replaced (the low
    // halves now nearest c) and s2 is drained.
    let pairs = [
        (CLIENT_LOW4, VIP4),
        (CLIENT_HIGH4, VIP4),
        (CLIENT_LOW6, VIP6),
        (CLIENT_HIGH6, VIP6),
    ];
    let per_pair = 50;
    let until = Instant::now() + Duration::from_secs(14);
    let client_ns = net.lab.client_ns.clone();
    let load = std::thread::spawn(move || keepalive(&client_ns, &pairs, per_pair, until));
    sleep(Duration::from_secs(3));
    replace_file(&rtt_file, &rtt("c"));
    let bound = Duration::from_secs(8);
    expect_server(&net, CLIENT_LOW4, VIP4, "s3", bound);
    expect_server(&net, CLIENT_LOW6, VIP6, "s3", bound);
    net.ctl_ok(&["server", "drain", "s2"]);
    expect_server(&net, CLIENT_HIGH4, VIP4, "s3", bound);
    expect_server(&net, CLIENT_HIGH6, VIP6, "s3", bound);
    assert!(
        Instant::now() + Duration::from_secs(1) < until,
        "the changes took longer than the load ran; nothing was shown"
    );
    let reports = load.join().expect("the keep-alive load panicked");
    check_connections(&reports, pairs.len() * per_pair);
    eprintln!(
        "{mode}: {} kept-alive connections, {} answers, none moved or stalled",
        reports.len(),
        reports.iter().map(|r| r.requests).sum::<u64>()
    );

    let flows: api::FlowList =
        serde_json::from_str(&net.ctl_ok(&["flows", "list", "--json"])).expect("flows list");
    for s in ["s1", "s2", "s3"] {
        assert!(
            flows.flows.iter().any(|f| f.server == s),
            "no flow pinned to {s}: {flows:?}"
        );
    }
    assert!(flows.flows.iter().all(|f| f.service == "web.example.com"));

    // 3. s3's web server stops: its check fails and new connections go to s1 (s2 is
    // drained) within the check bound.
    net.stop_nginx(2);
    let bound = Duration::from_secs_f64(INTERVAL * (FALL + 1.0) + TIMEOUT + MARGIN);
    let took = expect_server(&net, CLIENT_LOW4, VIP4, "s1", bound);
    expect_server(&net, CLIENT_LOW6, VIP6, "s1", bound);
    expect_server(&net, CLIENT_HIGH4, VIP4, "s1", bound);
    eprintln!("{mode}: a down server lost new connections after {took:?} (bound {bound:?})");

    // 4. What is not for a VIP reaches the edge's stack: pings, and a SYN to the edge's
    // own address, which its kernel refuses (a steered SYN would reach a server's nginx).
    for target in ["192.0.2.1", "2001:db8::1"] {
        let out = Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", net.lab.client_ns))
            .args(["ping", "-c", "1", "-W", "2", target])
            .output()
            .expect("ping");
        assert!(out.status.success(), "ping {target} from the client failed");
    }
    let t = Instant::now();
    let out = Command::new("nsenter")
        .arg(format!("--net=/run/netns/{}", net.lab.client_ns))
        .args(["curl", "-sS", "--max-time", "3", "http://192.0.2.1:80/"])
        .output()
        .expect("curl");
    // curl's 7 is "could not connect": the edge's kernel answered the SYN with a reset at
    // once (a lost SYN would take the whole --max-time and give 28).
    assert!(
        out.status.code() == Some(7) && t.elapsed() < Duration::from_secs(2),
        "a connection to the edge's own address was not refused by the edge: {:?} after \
         {:?}: {}",
        out.status.code(),
        t.elapsed(),
        String::from_utf8_lossy(&out.stderr)
    );

    let stats: api::FlowStats =
        serde_json::from_str(&net.ctl_ok(&["flows", "stats", "--json"])).expect("flows stats");
    let forwarded = stats.counters[if mode == "ipip" {
        "forwarded_ipip"
    } else {
        "forwarded_l2"
    }];
    assert!(
        stats.counters["new_flows"] >= (pairs.len() * per_pair) as u64,
        "{stats:?}"
    );
    assert!(forwarded > 1000, "{stats:?}");
    assert_eq!(stats.counters["drop_no_hop"], 0, "{stats:?}");

    // 5. Direct server return: not one answer crossed the edge.
    let through_edge = edge.count();
    assert_eq!(
        through_edge, 0,
        "{through_edge} packets from a VIP crossed the edge's client link"
    );
    run.assert_alive();
}

#[test]
fn l2_steering_pins_flows_follows_decisions_and_returns_directly() {
    steer_end_to_end("l2");
}

#[test]
fn ipip_steering_pins_flows_follows_decisions_and_returns_directly() {
    steer_end_to_end("ipip");
}
