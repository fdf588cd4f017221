//! Demand end to end: the XDP program counts every answer at its decision and samples
//! (here: every one of) its client prefixes; `run` turns that into rates per decision, site
//! and prefix (`demand --json`, Prometheus), and `impact` predicts what a candidate config
//! moves per site, checked against what is counted once it is applied.
//!
//! Real queries: `udp_flood` (a bounded, paced generator, with or without ECS) and unbound
//! as a caching resolver that sends ECS.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use director_tests::config::Doc;
use director_tests::netns::{describe, Controller, Lab, EDGE_V4, RESOLVER, RESOLVER_PORT};
use director_tests::tempdir::{replace_file, TempDir};
use serde_json::Value;

const WWW: &str = "www.example.com";
/// In the edge namespace, where `run` serves it and `director-ctl demand --run` asks.
const METRICS: &str = "127.0.0.1:9281";

/// x (site a) is nearer 10.1.0.0/16 and 10.3.0.0/16, y (site b) nearer 10.2.0.0/16 (and
/// without an RTT, y's preference wins).
const RTT_A: &str = "10.1.0.0/16,a,10\n10.1.0.0/16,b,50\n\
                     10.2.0.0/16,a,50\n10.2.0.0/16,b,10\n\
                     10.3.0.0/16,a,10\n10.3.0.0/16,b,50\n";
fn config(rtt: &Path, interval: f64) -> String {
    doc(rtt, interval).text()
}

/// The candidate `impact` is asked about: www by preference alone, so every client goes to
/// y (b). Over HTTP a candidate reads only the data files `run`'s own config reads, so the
/// change is one of the config, not of the RTT file.
fn candidate(rtt: &Path, interval: f64) -> String {
    let mut c = doc(rtt, interval);
    let mut admin_only = toml::Table::new();
    admin_only.insert("admin".into(), 1.into());
    c.set("service", WWW, "priority", admin_only);
    c.text()
}

fn doc(rtt: &Path, interval: f64) -> Doc {
    let mut c = Doc::two_sites();
    c.add(&format!(
        "[metrics]\nlisten = {METRICS:?}\n\n\
         [demand]\ninterval = {interval:?}\nsample = 1\n\n\
         [rtt]\nfiles = [{:?}]\n",
        rtt.display().to_string()
    ));
    c
}

fn start(lab: &Lab, dir: &TempDir, rtt: &str, interval: f64) -> Controller {
    lab.attach();
    let rtt_path = dir.path("rtt.csv");
    fs::write(&rtt_path, rtt).unwrap();
    let cfg = dir.path("director.toml");
    fs::write(&cfg, config(&rtt_path, interval)).unwrap();
    let mut run = Controller::start(lab, &cfg, &dir.path("run.log"));
    run.wait_for("entries written", 1, Duration::from_secs(60));
    run
}

/// `count` queries for www from the client, paced over `seconds`, with ECS `ecs` if given.
fn flood(lab: &Lab, count: u64, seconds: f64, ecs: Option<&str>) -> std::process::Child {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &lab.client_ns])
        .arg(env!("CARGO_BIN_EXE_udp_flood"))
        .args([
            "192.0.2.2",
            EDGE_V4,
            WWW,
            &count.to_string(),
            &seconds.to_string(),
        ]);
    if let Some(e) = ecs {
        c.arg(e);
    }
    c.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting udp_flood")
}

/// Waits for a flood and returns how many of its queries were answered.
fn answered(child: std::process::Child) -> u64 {
    let out = child.wait_with_output().expect("waiting for udp_flood");
    assert!(out.status.success(), "udp_flood: {}", describe(&out));
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("udp_flood printed {}: {e}", describe(&out)));
    v["answers"].as_u64().expect("answers")
}

fn demand(lab: &Lab) -> Value {
    let out = lab.ctl_in(&lab.edge_ns, &["demand", "--run", METRICS, "--json"]);
    assert!(out.status.success(), "demand: {}", describe(&out));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("demand --json printed {}: {e}", describe(&out)))
}

/// The report once `until` holds, within 15 s.
fn demand_until(lab: &Lab, what: &str, until: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let d = demand(lab);
        if until(&d) {
            return d;
        }
        assert!(Instant::now() < deadline, "{what}: never seen in\n{d:#}");
        sleep(Duration::from_millis(200));
    }
}

/// The count of the decision whose first server is `first`.
fn decision_count(d: &Value, first: &str) -> u64 {
    let Some(s) = d["services"].as_array().and_then(|v| {
        v.iter()
            .find(|s| s["service"].as_str().unwrap_or("").trim_end_matches('.') == WWW)
    }) else {
        return 0;
    };
    s["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["servers"][0] == first)
        .map(|x| x["count"].as_u64().unwrap())
        .sum()
}

fn prefix_total(d: &Value, prefix: &str, by: &str) -> u64 {
    d["prefixes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["prefix"] == prefix && p["by"] == by)
        .map(|p| p["total"].as_u64().unwrap())
        .sum()
}

fn server_total(d: &Value, name: &str) -> u64 {
    d["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["server"] == name)
        .unwrap_or_else(|| panic!("no server {name} in\n{d:#}"))["answers_total"]
        .as_u64()
        .unwrap()
}

/// A site's rate (0 before the first cycle has sites).
fn site_rate(d: &Value, name: &str) -> f64 {
    d["sites"]
        .as_array()
        .and_then(|v| v.iter().find(|s| s["site"] == name))
        .and_then(|s| s["rate"].as_f64())
        .unwrap_or(0.0)
}

#[test]
fn demand_is_counted_per_decision_and_server_and_sampled_per_resolver_or_client_subnet() {
    let mut lab = Lab::new();
    let dir = TempDir::new("demand", "count");
    let mut run = start(&lab, &dir, RTT_A, 1.0);
    // Exact numbers: every query answered is counted once at its decision, and sampled.
    let floods = [
        flood(&lab, 30, 0.5, Some("10.1.0.0/24")),
        flood(&lab, 20, 0.5, Some("10.2.0.0/24")),
        flood(&lab, 10, 0.5, None),
    ];
    let got: Vec<u64> = floods.into_iter().map(answered).collect();
    assert_eq!(got, [30, 20, 10], "every query is answered");
    let d = demand_until(&lab, "60 answers counted", |d| {
        decision_count(d, "x") + decision_count(d, "y") >= 60
    });
    // 10.1/16 is x's first; 10.2/16 and the plain source (no RTT: y's preference) y's.
    assert_eq!(decision_count(&d, "x"), 30, "{d:#}");
    assert_eq!(decision_count(&d, "y"), 30, "{d:#}");
    assert_eq!(server_total(&d, "x"), 30, "{d:#}");
    assert_eq!(server_total(&d, "y"), 30, "{d:#}");
    // ECS subnets are the clients; a query without ECS is its resolver's (the source's /24).
    assert_eq!(prefix_total(&d, "10.1.0.0/24", "ecs"), 30, "{d:#}");
    assert_eq!(prefix_total(&d, "10.2.0.0/24", "ecs"), 20, "{d:#}");
    assert_eq!(prefix_total(&d, "192.0.2.0/24", "resolver"), 10, "{d:#}");
    assert_eq!(d["sample"], 1);

    // Through a real resolver that sends ECS (unbound's subnetcache): the subnet its client
    // gave it is what is counted, not the resolver.
    lab.start_unbound(WWW, WWW);
    let out = lab.client(&[
        "dig",
        "+tries=1",
        "+timeout=2",
        &format!("@{RESOLVER}"),
        "-p",
        RESOLVER_PORT,
        "+subnet=10.3.7.0/24",
        WWW,
        "A",
    ]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("198.51.100.10"),
        "10.3/16 is x's: {}",
        describe(&out)
    );
    let d = demand_until(&lab, "the resolver's ECS query sampled", |d| {
        prefix_total(d, "10.3.7.0/24", "ecs") >= 1
    });
    assert_eq!(prefix_total(&d, "10.3.7.0/24", "ecs"), 1, "{d:#}");

    // The same in Prometheus.
    let m = director_tests::metrics::scrape(&lab.edge_ns, METRICS).expect("scraping");
    assert!(
        director_tests::metrics::value(&m, "director_demand_site_rate", &[("site", "a")]).is_some(),
        "no director_demand_site_rate for site a"
    );
    run.assert_alive();
}

#[test]
fn impact_predicts_each_sites_demand_after_the_change_within_ten_percent() {
    let lab = Lab::new();
    let dir = TempDir::new("demand", "impact");
    // Windows of 3 s: a paced generator that fell behind catches up in a burst, which
    // moves a few queries from one window to the next; over 3 s that is under 1 %.
    let mut run = start(&lab, &dir, RTT_A, 3.0);
    // Steady demand: 10.1/24 300/s, 10.2/24 200/s, 10.3/24 100/s, for 20 s.
    let load = |lab: &Lab| {
        [
            flood(lab, 6000, 20.0, Some("10.1.0.0/24")),
            flood(lab, 4000, 20.0, Some("10.2.0.0/24")),
            flood(lab, 2000, 20.0, Some("10.3.0.0/24")),
        ]
    };
    // A window wholly inside the load: 600/s in all (the generators start one by one).
    let whole = |lab: &Lab| {
        demand_until(lab, "a window wholly inside the load", |d| {
            let sum: f64 = ["a", "b"].iter().map(|s| site_rate(d, s)).sum();
            (sum - 600.0).abs() <= 0.03 * 600.0
                && d["sites"].as_array().is_some_and(|v| !v.is_empty())
        })
    };
    let floods = load(&lab);
    whole(&lab);
    let candidate_path = dir.path("candidate.toml");
    let candidate_text = candidate(&dir.path("rtt.csv"), 3.0);
    fs::write(&candidate_path, &candidate_text).unwrap();
    let out = lab.ctl_in(
        &lab.edge_ns,
        &[
            "impact",
            "--run",
            METRICS,
            "--config",
            &candidate_path.display().to_string(),
            "--json",
        ],
    );
    assert!(out.status.success(), "impact: {}", describe(&out));
    let i: Value = serde_json::from_slice(&out.stdout).unwrap();
    for f in floods {
        answered(f);
    }
    let projected = |site: &str| {
        i["sites"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["site"] == site)
            .unwrap_or_else(|| panic!("no site {site} in\n{i:#}"))["projected"]
            .as_f64()
            .unwrap()
    };
    let (pa, pb) = (projected("a"), projected("b"));
    // What moves most is 10.1/24's demand (300/s), from a to b; 10.3/24's moves too.
    let top = &i["moves"][0];
    assert_eq!(top["prefix"], "10.1.0.0/24", "{i:#}");
    assert_eq!(top["from"][0], "a", "{i:#}");
    assert_eq!(top["to"][0], "b", "{i:#}");

    // A quiet window first, so that the next whole one is after the change.
    demand_until(&lab, "a quiet window", |d| {
        ["a", "b"].iter().map(|s| site_rate(d, s)).sum::<f64>() < 1.0
    });
    // Apply the candidate, and the same load again.
    replace_file(&dir.path("director.toml"), &candidate_text);
    run.wait_for("up to date again", 1, Duration::from_secs(30));
    let floods = load(&lab);
    let d = whole(&lab);
    for f in floods {
        answered(f);
    }
    let (ma, mb) = (site_rate(&d, "a"), site_rate(&d, "b"));
    println!("projected a {pa:.1}/s b {pb:.1}/s; measured a {ma:.1}/s b {mb:.1}/s\n{i:#}");
    // Within 10 % of what is measured; a site the change empties within 1 % of all demand
    // (10 % of nothing would ask for exactly nothing).
    let total = ma + mb;
    for (site, p, m) in [("a", pa, ma), ("b", pb, mb)] {
        assert!(
            (p - m).abs() <= (0.10 * m).max(0.01 * total),
            "site {site}: projected {p:.1}/s, measured {m:.1}/s after the change\n{i:#}\n{d:#}"
        );
    }
    run.assert_alive();
}

/// The answer (A) director gives a client in `subnet`.
fn answer_for(lab: &Lab, subnet: &str) -> String {
    let out = lab.dig(&[
        &format!("@{EDGE_V4}"),
        WWW,
        "A",
        &format!("+subnet={subnet}"),
        "+short",
    ]);
    out.lines()
        .find(|l| l.parse::<std::net::Ipv4Addr>().is_ok())
        .unwrap_or_default()
        .to_string()
}

/// The replica calls the hook script recorded, one JSON document per line.
fn hook_calls(path: &Path) -> Vec<Value> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn wait_until(what: &str, within: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !f() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_replica_is_copied_where_demand_is_joins_once_healthy_and_is_retired_when_it_fades() {
    use director_tests::farm::Farm;
    let lab = Lab::new();
    lab.attach();
    let mut farm = Farm::new(&lab, &[("fra-1", 10), ("nyc-1", 20), ("ams-1", 30)]);
    farm.start("fra-1", 8080);
    farm.start("nyc-1", 8080);
    let dir = TempDir::new("demand", "replica");
    let calls = dir.path("calls.jsonl");
    let hook = dir.path("hook.sh");
    fs::write(
        &hook,
        format!("#!/bin/sh\ncat >> {c}\necho >> {c}\n", c = calls.display()),
    )
    .unwrap();
    Command::new("chmod").arg("+x").arg(&hook).status().unwrap();
    // Clients of 10.9.0.0/16 are in Amsterdam; fra-1 is the nearest server holding www.
    let locations = dir.path("locations.csv");
    fs::write(&locations, "10.9.0.0/16,52.37,4.90\n").unwrap();
    let cfg = dir.path("director.toml");
    fs::write(
        &cfg,
        format!(
            "[geo]\nlocations = {loc:?}\n\
             [health]\ninterval = 1\ntimeout = 0.5\nrise = 1\nfall = 1\njitter = 0.1\n\
             [metrics]\nlisten = {METRICS:?}\n\
             [demand]\ninterval = 0.5\nsample = 1\n\
             [demand.replicas]\nk = 1000\nthreshold = 2000\nretire_below = 500\n\
             retire_hold = 1\nhalf_life = 1\ndrain = 1\n\
             copy_command = [{h:?}]\nretire_command = [{h:?}]\n\
             [[site]]\nname = \"fra\"\nlat = 50.11\nlon = 8.68\n\
             [[site]]\nname = \"nyc\"\nlat = 40.71\nlon = -74.0\n\
             [[site]]\nname = \"ams\"\nlat = 52.37\nlon = 4.90\n\
             [[server]]\nname = \"fra-1\"\nsite = \"fra\"\nipv4 = \"203.0.113.10\"\n\
             [[server]]\nname = \"nyc-1\"\nsite = \"nyc\"\nipv4 = \"203.0.113.20\"\n\
             [[server]]\nname = \"ams-1\"\nsite = \"ams\"\nipv4 = \"203.0.113.30\"\n\
             [[service]]\nname = \"{WWW}\"\nservers = [\"fra-1\", \"nyc-1\"]\n\
             replicas = [\"ams-1\"]\npriority = {{ geo = 1 }}\n\
             health = {{ type = \"tcp\", port = 8080 }}\n",
            loc = locations.display().to_string(),
            h = hook.display().to_string(),
        ),
    )
    .unwrap();
    let mut run = Controller::start(&lab, &cfg, &dir.path("run.log"));
    run.wait_for("entries written", 1, Duration::from_secs(60));
    let amsterdam = "10.9.1.0/24";
    assert_eq!(
        answer_for(&lab, amsterdam),
        "203.0.113.10",
        "fra-1 before any copy"
    );

    // Demand from Amsterdam: 100 visitors ~1 km from ams give it 100 × 1000 / 1 ≫ 2000.
    answered(flood(&lab, 100, 0.3, Some(amsterdam)));
    wait_until("the copy hook", Duration::from_secs(10), || {
        hook_calls(&calls).iter().any(|c| c["event"] == "copy")
    });
    let copy = hook_calls(&calls)
        .into_iter()
        .find(|c| c["event"] == "copy")
        .unwrap();
    assert_eq!(copy["server"], "ams-1", "{copy}");
    assert_eq!(copy["site"], "ams", "{copy}");
    assert!(copy["bonus"].as_f64().unwrap() >= 2000.0, "{copy}");
    // The copy is not done (ams-1 does not pass its check): it gets no client.
    for _ in 0..5 {
        assert_eq!(
            answer_for(&lab, amsterdam),
            "203.0.113.10",
            "ams-1 before its check"
        );
        sleep(Duration::from_millis(200));
    }
    // Now it holds www: its check passes and Amsterdam's clients go to it.
    farm.start("ams-1", 8080);
    wait_until("Amsterdam sent to ams-1", Duration::from_secs(10), || {
        // Queries keep its bonus up meanwhile.
        answer_for(&lab, amsterdam) == "203.0.113.30"
    });
    let d = demand(&lab);
    let r = &d["replicas"][0];
    assert_eq!(r["server"], "ams-1", "{d:#}");
    assert_eq!(r["state"], "serving", "{d:#}");
    // explain, asked of run, shows the candidate with its state and bonus too.
    let out = lab.ctl_in(
        &lab.edge_ns,
        &[
            "explain",
            "--run",
            METRICS,
            "--service",
            WWW,
            "--client",
            "10.9.1.1",
            "--json",
        ],
    );
    assert!(out.status.success(), "explain: {}", describe(&out));
    let e: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(e["replicas"][0]["server"], "ams-1", "{e:#}");
    assert_eq!(e["replicas"][0]["state"], "serving", "{e:#}");
    assert!(e["replicas"][0]["bonus"].as_f64().unwrap() > 0.0, "{e:#}");

    // No more demand: the bonus fades (half-life 1 s) under 500, and after a 1 s hold and
    // a 1 s drain the retire hook runs; clients are back on fra-1 before it.
    wait_until("the retire hook", Duration::from_secs(20), || {
        hook_calls(&calls).iter().any(|c| c["event"] == "retire")
    });
    // Drained before the hook: its clients were back on fra-1 already (a re-sort takes a
    // few hundred ms after the drain; the hook comes a second after it).
    assert_eq!(answer_for(&lab, amsterdam), "203.0.113.10", "ams-1 retired");
    let log = run.log();
    let drained = log.find("replica drain").expect("a drain in the log");
    let retired = log.find("replica retire").expect("a retire in the log");
    assert!(drained < retired, "drained before retired:\n{log}");
    run.assert_alive();
}

/// Four sites; x (site a) is every client's first, with capacity 200 answers/s (target
/// 85 %: 170). 10.1/16 next prefers b, 10.3/16 c, 10.4/16 d.
const RTT_SPILL: &str = "10.1.0.0/16,a,10\n10.1.0.0/16,b,20\n10.1.0.0/16,c,30\n10.1.0.0/16,d,40\n\
                         10.3.0.0/16,a,10\n10.3.0.0/16,c,20\n10.3.0.0/16,b,30\n10.3.0.0/16,d,40\n\
                         10.4.0.0/16,a,10\n10.4.0.0/16,d,20\n10.4.0.0/16,b,30\n10.4.0.0/16,c,40\n";

#[test]
fn a_site_over_its_target_spills_the_groups_that_fit_its_excess_to_their_next_site() {
    let lab = Lab::new();
    lab.attach();
    let dir = TempDir::new("demand", "spill");
    let rtt = dir.path("rtt.csv");
    fs::write(&rtt, RTT_SPILL).unwrap();
    let cfg = dir.path("director.toml");
    fs::write(
        &cfg,
        format!(
            "[metrics]\nlisten = {METRICS:?}\n\
             [demand]\ninterval = 2.0\nsample = 1\n\
             [demand.spill]\ntarget = 0.85\nlow = 0.5\nhold = 60\nmax_step = 0.25\n\
             [rtt]\nfiles = [{rtt:?}]\n\
             [[site]]\nname = \"a\"\n[[site]]\nname = \"b\"\n\
             [[site]]\nname = \"c\"\n[[site]]\nname = \"d\"\n\
             [[server]]\nname = \"x\"\nsite = \"a\"\nipv4 = \"198.51.100.10\"\ncapacity = 200\n\
             [[server]]\nname = \"y\"\nsite = \"b\"\nipv4 = \"198.51.100.20\"\n\
             [[server]]\nname = \"z\"\nsite = \"c\"\nipv4 = \"198.51.100.30\"\n\
             [[server]]\nname = \"w\"\nsite = \"d\"\nipv4 = \"198.51.100.40\"\n\
             [[service]]\nname = \"{WWW}\"\nservers = [\"x\", \"y\", \"z\", \"w\"]\n\
             priority = {{ rtt = 1 }}\n",
            rtt = rtt.display().to_string(),
        ),
    )
    .unwrap();
    let mut run = Controller::start(&lab, &cfg, &dir.path("run.log"));
    run.wait_for("entries written", 1, Duration::from_secs(60));
    // 150 % of a's target: 175 + 50 + 30 = 255/s for 20 s. The excess is 85/s and a cycle
    // moves at most a quarter of the site's demand: the first cycle can take 10.3's 50/s
    // (10.4's 30/s on top would pass the quarter), the second 10.4's 30/s (the excess then
    // is 35/s); 10.1's 175/s never fits. Then a is at 175/s, 103 % of its target.
    let floods = [
        flood(&lab, 3500, 20.0, Some("10.1.0.0/24")),
        flood(&lab, 1000, 20.0, Some("10.3.0.0/24")),
        flood(&lab, 600, 20.0, Some("10.4.0.0/24")),
    ];
    // Two cycles (2 s each) to get there. A report shows the moves its cycle decided
    // beside the rates measured before them: a is measured in the window after the
    // report that first shows both moves, when that window is whole (255/s in all).
    let moved = |d: &Value| d["spill"]["moved"].as_array().map_or(0, Vec::len);
    let first = demand_until(&lab, "both groups moved", |d| moved(d) == 2);
    let answers = |d: &Value| {
        d["servers"]
            .as_array()
            .map(|v| {
                v.iter()
                    .map(|s| s["answers_total"].as_u64().unwrap_or(0))
                    .sum::<u64>()
            })
            .unwrap_or(0)
    };
    let before = answers(&first);
    let d = demand_until(&lab, "a whole window after the moves", |d| {
        let sum: f64 = ["a", "b", "c", "d"].iter().map(|s| site_rate(d, s)).sum();
        answers(d) > before && (sum - 255.0).abs() <= 0.03 * 255.0
    });
    let after_moves = (
        answer_for(&lab, "10.1.0.0/24"),
        answer_for(&lab, "10.3.0.0/24"),
        answer_for(&lab, "10.4.0.0/24"),
    );
    for f in floods {
        answered(f);
    }
    let a = site_rate(&d, "a");
    assert!(
        (a - 170.0).abs() <= 0.05 * 170.0,
        "site a at {a:.1}/s, not its target 170 ± 5 %\n{d:#}"
    );
    let log = run.log();
    assert_eq!(
        log.matches("demand: spilled").count(),
        2,
        "two cycles moved a group each, and none moved back:\n{log}\n{d:#}"
    );
    // Each moved group went to its next site in DD order.
    assert_eq!(
        after_moves,
        (
            "198.51.100.10".to_string(),
            "198.51.100.30".to_string(),
            "198.51.100.40".to_string()
        ),
        "10.1 stays on x, 10.3 goes to z (c), 10.4 to w (d)\n{d:#}"
    );
    let moved: Vec<(String, String)> = d["spill"]["moved"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["from"].as_str().unwrap().into(),
                m["to"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(moved.len(), 2, "{d:#}");
    assert!(moved.contains(&("a".into(), "c".into())), "{d:#}");
    assert!(moved.contains(&("a".into(), "d".into())), "{d:#}");
    let rate_moved: f64 = d["spill"]["moved"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["rate"].as_f64().unwrap())
        .sum();
    assert!(
        rate_moved <= (255.0 - 170.0) * 1.10,
        "moved {rate_moved:.1}/s, more than the excess + 10 %\n{d:#}"
    );
    run.assert_alive();
}

#[test]
fn new_flows_to_a_vip_are_counted_per_decision_and_sampled_by_client() {
    use director_tests::vipnet::{VipNet, CLIENT_HIGH4, CLIENT_LOW4, VIP4};
    let dir = TempDir::new("demand", "syn");
    let rtt = dir.path("rtt.csv");
    // The lower half of 192.0.2.0/24 is nearest s1 (site a), the upper half s2 (b).
    fs::write(
        &rtt,
        "192.0.2.0/25,a,10\n192.0.2.0/25,b,50\n192.0.2.0/25,c,60\n\
         192.0.2.128/25,b,10\n192.0.2.128/25,a,50\n192.0.2.128/25,c,60\n",
    )
    .unwrap();
    let servers: String = (0..3)
        .map(|i| {
            format!(
                "[[server]]\nname = \"s{n}\"\nsite = \"{site}\"\nipv4 = \"198.51.100.{o}\"\n",
                n = i + 1,
                site = ["a", "b", "c"][i],
                o = 11 + i,
            )
        })
        .collect();
    let cfg = dir.path("director.toml");
    fs::write(
        &cfg,
        format!(
            "[metrics]\nlisten = {METRICS:?}\n[demand]\ninterval = 0.5\nsample = 1\n\
             [[site]]\nname = \"a\"\n[[site]]\nname = \"b\"\n[[site]]\nname = \"c\"\n\
             {servers}\
             [[service]]\nname = \"web.example.com\"\nservers = [\"s1\", \"s2\", \"s3\"]\n\
             priority = {{ rtt = 1 }}\nvip = [\"{VIP4}:80\"]\nmode = \"l2\"\n\
             [rtt]\nfiles = [{:?}]\n",
            rtt.display().to_string()
        ),
    )
    .unwrap();
    let net = VipNet::new();
    net.attach();
    let mut run = Controller::start(&net.lab, &cfg, &dir.path("run.log"));
    run.wait_for("entries written", 1, Duration::from_secs(30));
    // Every curl is one connection: one SYN of a new flow.
    for (src, n, want) in [(CLIENT_LOW4, 20, "s1"), (CLIENT_HIGH4, 10, "s2")] {
        for _ in 0..n {
            assert_eq!(net.curl(src, VIP4).as_deref(), Ok(want), "from {src}");
        }
    }
    let lab = &net.lab;
    let d = demand_until(lab, "30 new flows counted", |d| {
        let s = d["services"].as_array().and_then(|v| v.first());
        s.and_then(|s| s["decisions"].as_array()).is_some_and(|v| {
            v.iter()
                .map(|x| x["count"].as_u64().unwrap_or(0))
                .sum::<u64>()
                >= 30
        })
    });
    let decisions = d["services"][0]["decisions"].as_array().unwrap();
    let count = |first: &str| -> u64 {
        decisions
            .iter()
            .filter(|x| x["servers"][0] == first)
            .map(|x| x["count"].as_u64().unwrap())
            .sum()
    };
    assert_eq!(count("s1"), 20, "{d:#}");
    assert_eq!(count("s2"), 10, "{d:#}");
    assert_eq!(prefix_total(&d, "192.0.2.0/24", "client"), 30, "{d:#}");
    let flows = |name: &str| {
        d["servers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["server"] == name)
            .unwrap()["flows_total"]
            .as_u64()
            .unwrap()
    };
    assert_eq!((flows("s1"), flows("s2")), (20, 10), "{d:#}");
    run.assert_alive();
}

/// `curl` in the edge namespace against `run`'s listener: (status, body).
fn curl(lab: &Lab, args: &[&str]) -> (u16, String) {
    let out = Command::new("ip")
        .args(["netns", "exec", &lab.edge_ns, "curl", "-sS", "-m", "30"])
        .args(["-w", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("running curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

#[test]
fn impact_reads_no_file_a_request_names() {
    let lab = Lab::new();
    let dir = TempDir::new("demand", "no-file");
    let mut run = start(&lab, &dir, RTT_A, 3.0);
    // A file on the host whose first line is not TOML (a TOML error quotes it), nor CSV,
    // nor anything else a data reader takes.
    const SECRET: &str = "s3cret-first-line: only root may read this";
    let secret = dir.path("secret");
    fs::write(&secret, format!("{SECRET}\nmore\n")).unwrap();
    let secret_path = secret.display().to_string();
    let base = format!("http://{METRICS}");
    let mut asked = Vec::new();

    // The old form, a path in the query, with and without a body: refused with 400.
    for args in [
        vec![format!("{base}/impact?config={secret_path}")],
        vec![format!("{base}/impact?config={secret_path}&top=5")],
        vec![
            "-X".into(),
            "POST".into(),
            "--data-binary".into(),
            "[[site]]\nname = \"a\"\n".into(),
            format!("{base}/impact?config={secret_path}"),
        ],
    ] {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, body) = curl(&lab, &refs);
        assert_eq!(code, 400, "{args:?}: {body}");
        asked.push(body);
    }
    // A candidate that names the file as its data, in every place a config names one,
    // absolute and relative: refused before anything is read.
    let ours = fs::read_to_string(dir.path("director.toml")).unwrap();
    let candidates = [
        ours.replace(&dir.path("rtt.csv").display().to_string(), &secret_path),
        ours.replace(&dir.path("rtt.csv").display().to_string(), "secret"),
        format!("{ours}\n[geo]\ndatabase = {secret_path:?}\n"),
        ours.replacen(
            "name = \"a\"",
            &format!("name = \"a\"\nbgp = [{secret_path:?}]"),
            1,
        ),
    ];
    for c in &candidates {
        let (code, body) = curl(
            &lab,
            &["-X", "POST", "--data-binary", c, &format!("{base}/impact")],
        );
        assert_eq!(code, 422, "{c}\n{body}");
        assert!(body.contains("does not"), "{body}");
        asked.push(body);
    }
    // The file itself as the candidate's text is the requester's own: its error may quote
    // it. A path-looking body is just text: never opened.
    let (code, body) = curl(
        &lab,
        &[
            "-X",
            "POST",
            "--data-binary",
            &secret_path,
            &format!("{base}/impact"),
        ],
    );
    assert_eq!(code, 422, "{body}");
    asked.push(body);
    // Other paths with the parameter get nothing of the file either.
    for p in ["/demand", "/metrics", "/explain", "/ui/feed", "/nope"] {
        let (_, body) = curl(&lab, &[&format!("{base}{p}?config={secret_path}")]);
        asked.push(body);
    }
    for body in &asked {
        assert!(
            !body.contains("s3cret"),
            "a response quoted the file: {body}"
        );
    }
    // And the CLI's own way still works: it sends the file's text.
    let cand = dir.path("candidate.toml");
    fs::write(&cand, candidate(&dir.path("rtt.csv"), 3.0)).unwrap();
    let out = lab.ctl_in(
        &lab.edge_ns,
        &[
            "impact",
            "--run",
            METRICS,
            "--config",
            &cand.display().to_string(),
            "--json",
        ],
    );
    assert!(out.status.success(), "impact: {}", describe(&out));
    let i: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        i["sites"].as_array().is_some_and(|s| !s.is_empty()),
        "{i:#}"
    );
    run.assert_alive();
}
