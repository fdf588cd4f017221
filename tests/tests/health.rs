//! Health checks end to end: `director-ctl run` checks real nginx servers in their own
//! namespace and the XDP program's answers follow — a stopped server, a port down for one
//! service only, a blackholed server, a recovery, a drain, a controller restart, and
//! fail-open when every server of a service is down.
//!
//! Run as root: `cargo test -p director-tests --test health -- --test-threads=1`.

use std::{
    path::Path,
    thread::sleep,
    time::{Duration, Instant},
};

use director_ctl::api;
use director_tests::farm::Farm;
use director_tests::metrics::{self, Sample};
use director_tests::netns::{Controller, Lab, Reply, Zone, EDGE_V4, RESOLVER, RESOLVER_PORT};
use director_tests::tempdir::TempDir;

const WWW: &str = "www.example.com";
const VIDEO: &str = "video.example.com";
const AUTO: &str = "auto.example.com";

/// The kernel's weights for fra-1 and nyc-1 in AUTO's decision for IPv4 clients.
fn auto_weights(lab: &Lab) -> (u16, u16) {
    let routes: api::RouteList =
        serde_json::from_str(&lab.ctl_ok(&["route", "list", AUTO, "--json"])).unwrap();
    let r = routes
        .routes
        .iter()
        .find(|r| r.prefix.to_string() == "0.0.0.0/0")
        .expect("a default route for auto");
    let w = |name: &str| {
        r.primary
            .iter()
            .find(|s| s.server == name)
            .map_or(0, |s| s.weight)
    };
    (w("fra-1"), w("nyc-1"))
}
/// Check timing in the config: interval 1 s (jitter 0.1), timeout 0.5 s, rise 2, fall 2.
const INTERVAL: f64 = 1.0;
const TIMEOUT: f64 = 0.5;
const RISE: f64 = 2.0;
const FALL: f64 = 2.0;
/// Beyond the checks' own time: the publisher's write, dig's process start, and this
/// shared 2-core machine's scheduling.
const MARGIN: f64 = 2.0;

fn config() -> String {
    format!(
        "[health]\ninterval = {INTERVAL}\ntimeout = {TIMEOUT}\nrise = {RISE}\nfall = {FALL}\n\
         jitter = 0.1\n\
         [[site]]\nname = \"fra\"\n[[site]]\nname = \"nyc\"\n\
         [[server]]\nname = \"fra-1\"\nsite = \"fra\"\nipv4 = \"203.0.113.10\"\npreference = 1\n\
         [[server]]\nname = \"nyc-1\"\nsite = \"nyc\"\nipv4 = \"203.0.113.20\"\npreference = 2\n\
         [[service]]\nname = \"{WWW}\"\nservers = [\"fra-1\", \"nyc-1\"]\n\
         priority = {{ admin = 1 }}\n\
         health = {{ type = \"http\", port = 80, path = \"/health\", body = \"ok\" }}\n\
         [[service]]\nname = \"{VIDEO}\"\nservers = [\"fra-1\", \"nyc-1\"]\n\
         priority = {{ admin = 1 }}\nhealth = {{ type = \"tcp\", port = 8080 }}\n"
    )
}

/// The A records director answers for `name`, joined by commas; empty when it did not
/// answer.
fn answer(lab: &Lab, name: &str) -> String {
    let r = Reply::parse(&lab.dig(&[&format!("@{EDGE_V4}"), name, "A"]));
    if r.status.as_deref() != Some("NOERROR") {
        return String::new();
    }
    r.data("A").join(",")
}

/// Asks every 100 ms until `name` is answered with exactly `want`; returns how long it
/// took. Fails after `within`. `meanwhile` runs at every try (to check other names).
fn until(
    lab: &Lab,
    ctl: &Controller,
    name: &str,
    want: &str,
    within: Duration,
    meanwhile: &mut dyn FnMut(),
) -> Duration {
    let t = Instant::now();
    loop {
        let got = answer(lab, name);
        if got == want {
            return t.elapsed();
        }
        assert!(
            t.elapsed() < within,
            "{name} still answered {got:?}, not {want:?}, after {within:?}; run's log:\n{}",
            ctl.log()
        );
        meanwhile();
        sleep(Duration::from_millis(100));
    }
}

fn health(lab: &Lab) -> Vec<(String, String, api::Health)> {
    let st: api::Status = serde_json::from_str(&lab.ctl_ok(&["status", "--json"])).unwrap();
    st.health
        .into_iter()
        .map(|h| (h.service, h.server, h.health))
        .collect()
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

fn start(lab: &Lab, cfg: &Path, log: &Path) -> Controller {
    let mut c = Controller::start(lab, cfg, log);
    c.wait_for("entries written", 1, Duration::from_secs(60));
    c
}

#[test]
fn health_checks_steer_answers_end_to_end() {
    let lab = Lab::new();
    lab.attach();
    let mut farm = Farm::new(&lab, &[("fra-1", 10), ("nyc-1", 20)]);
    let (fra, nyc) = (
        farm.addr("fra-1").to_string(),
        farm.addr("nyc-1").to_string(),
    );
    // fra-1 is preferred for both services, but its web server is not running yet.
    farm.start("nyc-1", 80);
    farm.start("fra-1", 8080);
    farm.start("nyc-1", 8080);
    let dir = TempDir::new("health", "config");
    let cfg = dir.path("director.toml");
    std::fs::write(&cfg, config()).unwrap();
    let mut ctl = start(&lab, &cfg, &dir.path("run.log"));

    // Nothing is published before the first round: www's first answer is already nyc-1.
    assert!(
        ctl.log().contains("first round of 4 checks"),
        "{}",
        ctl.log()
    );
    assert_eq!(answer(&lab, WWW), nyc, "{}", ctl.log());
    assert_eq!(answer(&lab, VIDEO), fra);
    let h = health(&lab);
    assert!(
        h.contains(&(WWW.into(), "fra-1".into(), api::Health::Down)),
        "{h:?}"
    );
    assert!(
        h.contains(&(VIDEO.into(), "fra-1".into(), api::Health::Up)),
        "{h:?}"
    );

    // It comes up: back after `rise` successes.
    farm.start("fra-1", 80);
    let back = until(
        &lab,
        &ctl,
        WWW,
        &fra,
        secs(RISE * INTERVAL * 1.1 + MARGIN),
        &mut || {},
    );
    println!("fra-1 started: www answers it after {back:?}");

    // Its web server stops: out of www within fall x (interval + timeout), while video
    // (another port) keeps it throughout.
    farm.stop("fra-1", 80);
    let out_of_www = format!("fra-1 for {WWW}");
    let resorts_without = |ctl: &Controller| {
        ctl.log()
            .lines()
            .filter(|l| l.contains("re-sorted") && l.contains(&out_of_www))
            .count()
    };
    let before = resorts_without(&ctl);
    let bound = secs(FALL * (INTERVAL * 1.1 + TIMEOUT) + MARGIN);
    let mut video_kept = || assert_eq!(answer(&lab, VIDEO), fra);
    let gone = until(&lab, &ctl, WWW, &nyc, bound, &mut video_kept);
    let t = Instant::now();
    // The re-sort that counts is a new one naming fra-1 out of www: the one its coming up
    // caused may still be logged after the stop, and would satisfy a plain count.
    while resorts_without(&ctl) <= before {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "no re-sort without fra-1 for www:\n{}",
            ctl.log()
        );
        sleep(Duration::from_millis(20));
    }
    println!(
        "fra-1 stopped: first answer without it after {gone:?}, table re-sorted {:?} later",
        t.elapsed()
    );
    let routes: api::RouteList =
        serde_json::from_str(&lab.ctl_ok(&["route", "list", "--json"])).unwrap();
    for r in &routes.routes {
        let servers: Vec<&str> = r
            .primary
            .iter()
            .chain(&r.fallback)
            .map(|s| s.server.as_str())
            .collect();
        if r.service == WWW {
            assert_eq!(servers, ["nyc-1"], "www re-sorted without fra-1: {r:?}");
        } else {
            assert_eq!(
                servers,
                ["fra-1", "nyc-1"],
                "video keeps fra-1 first: {r:?}"
            );
        }
    }
    assert_eq!(answer(&lab, VIDEO), fra);

    // Blackholed: its checks time out (not refused), and video loses it too.
    farm.blackhole("fra-1");
    let gone = until(&lab, &ctl, VIDEO, &nyc, bound, &mut || {});
    println!("fra-1 blackholed: video answers without it after {gone:?}");
    assert!(
        ctl.log().contains("no answer within 500 ms"),
        "{}",
        ctl.log()
    );
    farm.restore("fra-1");
    until(
        &lab,
        &ctl,
        VIDEO,
        &fra,
        secs(RISE * INTERVAL * 1.1 + MARGIN),
        &mut || {},
    );

    // A controller killed and started again changes no state and no answer: www still
    // answers nyc-1 right after the restart, with no first round to wait for.
    let before = health(&lab);
    ctl.kill();
    let mut ctl = start(&lab, &cfg, &dir.path("run2.log"));
    assert_eq!(
        answer(&lab, WWW),
        nyc,
        "{}\n{:?}\n{}",
        ctl.log(),
        health(&lab),
        lab.ctl_ok(&["route", "list"])
    );
    assert_eq!(answer(&lab, VIDEO), fra);
    assert_eq!(health(&lab), before);
    assert!(!ctl.log().contains("first round"), "{}", ctl.log());

    // Drained: no new clients, at once; undrained: back.
    lab.ctl_ok(&["server", "drain", "fra-1"]);
    assert_eq!(answer(&lab, VIDEO), nyc);
    let st: api::Status = serde_json::from_str(&lab.ctl_ok(&["status", "--json"])).unwrap();
    assert_eq!(st.drained, ["fra-1"]);
    lab.ctl_ok(&["server", "undrain", "fra-1"]);
    assert_eq!(answer(&lab, VIDEO), fra);

    // Every server of www down by its checks: fail-open answers with all of them, so the
    // best ranked (fra-1) again.
    farm.stop("nyc-1", 80);
    until(&lab, &ctl, WWW, &fra, bound, &mut || {});
    ctl.wait_for("fail-open", 1, Duration::from_secs(5));
    // Not when the operator has set one of them down: then www has no usable server and
    // no fallback, so its queries go to the host (which has no DNS server here).
    lab.ctl_ok(&["server", "set", "fra-1", "--down"]);
    until(&lab, &ctl, WWW, "", secs(1.0 + MARGIN), &mut || {});
    lab.ctl_ok(&["server", "set", "fra-1", "--up"]);
    until(&lab, &ctl, WWW, &fra, secs(1.0 + MARGIN), &mut || {});
    // One comes back: fail-open ends and answers follow the checks again.
    farm.start("nyc-1", 80);
    until(
        &lab,
        &ctl,
        WWW,
        &nyc,
        secs(RISE * INTERVAL * 1.1 + MARGIN),
        &mut || {},
    );

    // Changes close together cost one re-sort, not one each: both servers drained 100 ms
    // apart, then both back.
    for drain in ["drain", "undrain"] {
        let resorts = ctl.count("re-sorted");
        lab.ctl_ok(&["server", drain, "fra-1"]);
        // Longer than run's poll (50 ms here), shorter than the quiet time run waits for
        // (200 ms): without coalescing these would be two re-sorts.
        sleep(Duration::from_millis(100));
        lab.ctl_ok(&["server", drain, "nyc-1"]);
        ctl.wait_for("re-sorted", resorts + 1, Duration::from_secs(5));
        sleep(Duration::from_secs(1));
        assert_eq!(
            ctl.count("re-sorted"),
            resorts + 1,
            "{drain} of two servers re-sorted more than once:\n{}",
            ctl.log()
        );
    }
    ctl.assert_alive();
}

/// Prometheus text with a node_load1 gauge.
fn node_load(v: f64) -> String {
    format!("# HELP node_load1 1m load average.\n# TYPE node_load1 gauge\nnode_load1 {v}\n")
}

fn scrape(lab: &Lab, listen: &str) -> Vec<Sample> {
    metrics::scrape(&lab.edge_ns, listen).unwrap_or_else(|e| panic!("{e}"))
}

fn sample(samples: &[Sample], metric: &str, labels: &[(&str, &str)]) -> f64 {
    metrics::value(samples, metric, labels)
        .unwrap_or_else(|| panic!("no {metric} {labels:?} in {samples:?}"))
}

#[test]
fn load_thresholds_and_metrics() {
    const LOAD_PORT: u16 = 9100;
    const LISTEN: &str = "127.0.0.1:9273";
    let lab = Lab::new();
    lab.attach();
    let mut farm = Farm::new(&lab, &[("fra-1", 10), ("nyc-1", 20)]);
    let (fra, nyc) = (
        farm.addr("fra-1").to_string(),
        farm.addr("nyc-1").to_string(),
    );
    for s in ["fra-1", "nyc-1"] {
        farm.start(s, 80);
        farm.start(s, LOAD_PORT);
        farm.set_load(s, LOAD_PORT, &node_load(0.1));
    }
    let load = |s: &str| {
        format!(
            "load = {{ url = \"http://{}:{LOAD_PORT}/load\", metric = \"node_load1\" }}\n",
            farm.addr(s)
        )
    };
    let text = config()
        .replace(
            "preference = 1\n",
            &format!("preference = 1\n{}", load("fra-1")),
        )
        .replace(
            "preference = 2\n",
            &format!("preference = 2\n{}", load("nyc-1")),
        )
        .replace(
            "body = \"ok\" }\n",
            "body = \"ok\" }\nload_threshold = 0.8\n",
        )
        + &format!(
            "[[service]]\nname = \"{AUTO}\"\nservers = [\"fra-1\", \"nyc-1\"]\n\
             priority = {{ portion = 1 }}\nportion = \"auto\"\nload_threshold = 0.8\n\
             [metrics]\nlisten = \"{LISTEN}\"\n"
        );
    let dir = TempDir::new("health", "config");
    let cfg = dir.path("director.toml");
    std::fs::write(&cfg, &text).unwrap();
    let ctl = start(&lab, &cfg, &dir.path("run.log"));
    let poll = secs(INTERVAL * 1.1 + MARGIN);
    until(&lab, &ctl, WWW, &fra, poll, &mut || {});

    // Over the threshold: no new clients for www (video has no threshold: it keeps it).
    farm.set_load("fra-1", LOAD_PORT, &node_load(0.95));
    until(&lab, &ctl, WWW, &nyc, poll, &mut || {});
    assert_eq!(answer(&lab, VIDEO), fra);
    // Between the resume level (0.72) and the threshold: still out (hysteresis).
    farm.set_load("fra-1", LOAD_PORT, &node_load(0.75));
    let t = Instant::now();
    while t.elapsed() < secs(2.5 * INTERVAL) {
        assert_eq!(
            answer(&lab, WWW),
            nyc,
            "back before the load fell under 0.72"
        );
        sleep(Duration::from_millis(200));
    }
    farm.set_load("fra-1", LOAD_PORT, &node_load(0.5));
    until(&lab, &ctl, WWW, &fra, poll, &mut || {});
    // A load endpoint that stops answering takes nobody out by itself.
    farm.stop("fra-1", LOAD_PORT);
    let t = Instant::now();
    while t.elapsed() < secs(2.5 * INTERVAL) {
        assert_eq!(
            answer(&lab, WWW),
            fra,
            "out because its load was unreadable"
        );
        sleep(Duration::from_millis(200));
    }
    assert!(
        ctl.log().contains("cannot read fra-1's load"),
        "{}",
        ctl.log()
    );

    // portion = "auto": the least loaded (nyc-1 at 0.1: headroom 88 %) gets the largest
    // share; fra-1 (last read 0.5, or lower on its way up from overload) less.
    let t = Instant::now();
    let (fra_w, nyc_w) = loop {
        let w = auto_weights(&lab);
        if w.1 == 88 && w.0 < w.1 {
            break w;
        }
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "auto weights {w:?}\n{}",
            ctl.log()
        );
        sleep(Duration::from_millis(200));
    };

    // The metrics agree with the kernel's counters and with what the test did.
    let stats = lab.stats();
    let m = scrape(&lab, LISTEN);
    let www = [("service", WWW)];
    assert_eq!(
        sample(&m, "director_answers_total", &www) as u64,
        stats.service(WWW)
    );
    assert_eq!(
        sample(&m, "director_packets_total", &[("reason", "answered")]) as u64,
        stats.get("answered")
    );
    let per_server: f64 = ["fra-1", "nyc-1"]
        .iter()
        .map(|s| sample(&m, "director_server_answers_total", &[("server", s)]))
        .sum();
    assert_eq!(
        per_server as u64,
        stats.get("answered"),
        "each answer sends to one server"
    );
    assert!(sample(&m, "director_server_answers_total", &[("server", "nyc-1")]) > 0.0);
    let fra_www = [("service", WWW), ("server", "fra-1")];
    assert_eq!(sample(&m, "director_health_up", &fra_www), 1.0);
    assert_eq!(sample(&m, "director_health_out", &fra_www), 0.0);
    assert!(sample(&m, "director_health_check_seconds", &fra_www) < TIMEOUT);
    assert_eq!(
        sample(&m, "director_server_load", &[("server", "fra-1")]),
        0.5
    );
    let st: api::Status = serde_json::from_str(&lab.ctl_ok(&["status", "--json"])).unwrap();
    assert_eq!(
        st.load.get("fra-1"),
        Some(&0.5),
        "status shows the load: {st:?}\n{}",
        ctl.log()
    );
    // 0.1 has no exact f32: it shows as read, not as the widened 0.10000000149011612.
    assert_eq!(st.load.get("nyc-1"), Some(&0.1), "status: {st:?}");
    let listed: api::ServerList =
        serde_json::from_str(&lab.ctl_ok(&["server", "list", "--json"])).unwrap();
    let nyc_load = listed
        .servers
        .iter()
        .find(|s| s.name == "nyc-1")
        .map(|s| s.load);
    assert_eq!(nyc_load, Some(Some(0.1)), "server list: {listed:?}");
    assert!(sample(&m, "director_decision_entries", &[]) >= 4.0);
    // run set the /16 slots after writing the table: AUTO's default route answers whole
    // every /16 its table does not split.
    let front = sample(&m, "director_decision_front16_slots", &[("service", AUTO)]);
    assert!(
        (1.0..=65536.0).contains(&front),
        "{front} /16 slots set for {AUTO}"
    );
    for (server, w) in [("fra-1", fra_w), ("nyc-1", nyc_w)] {
        let l = [("service", AUTO), ("server", server)];
        assert_eq!(sample(&m, "director_auto_portion", &l), f64::from(w));
    }
    assert!(sample(&m, "director_last_recompute_timestamp_seconds", &[]) > 1.7e9);

    // A server stopped for www shows as down and out.
    farm.stop("fra-1", 80);
    until(
        &lab,
        &ctl,
        WWW,
        &nyc,
        secs(FALL * (INTERVAL * 1.1 + TIMEOUT) + MARGIN),
        &mut || {},
    );
    let m = scrape(&lab, LISTEN);
    assert_eq!(sample(&m, "director_health_up", &fra_www), 0.0);
    assert_eq!(sample(&m, "director_health_out", &fra_www), 1.0);
}

/// With every server of a service down and no fail-open: the alternate's CNAME, which a
/// real resolver (unbound) follows to the alternate's address; with no alternate, the
/// origin's address; both with the degraded TTL, logged and counted.
#[test]
fn fallbacks_when_no_server_is_usable() {
    let mut lab = Lab::new();
    lab.attach();
    // Knot on the edge serves the alternate's zone (and the rest of example.com).
    lab.start_knot(&[
        Zone {
            origin: "example.com.",
            records: "mail A 192.0.2.25",
        },
        Zone {
            origin: "example.net.",
            records: "www.cdn-b A 198.51.100.77",
        },
    ]);
    let mut farm = Farm::new(&lab, &[("fra-1", 10), ("nyc-1", 20)]);
    let fra = farm.addr("fra-1").to_string();
    for s in ["fra-1", "nyc-1"] {
        farm.start(s, 80);
    }
    // video's port 8080 is served by nobody: down from the first round on.
    let text = config()
        .replace(
            "body = \"ok\" }\n",
            "body = \"ok\" }\nfail_open = false\nalternate = \"www.cdn-b.example.net\"\n\
             degraded_ttl = 5\n",
        )
        .replace(
            "health = { type = \"tcp\", port = 8080 }\n",
            "health = { type = \"tcp\", port = 8080 }\nfail_open = false\n\
             origin = [\"198.51.100.99\"]\ndegraded_ttl = 5\n",
        );
    let dir = TempDir::new("health", "config");
    let cfg = dir.path("director.toml");
    std::fs::write(&cfg, &text).unwrap();
    let ctl = start(&lab, &cfg, &dir.path("run.log"));
    lab.start_unbound_for(&["example.com", "example.net"], "mail.example.com");

    // No server of video can serve it: its origin, with the degraded TTL.
    let r = Reply::parse(&lab.dig(&[&format!("@{EDGE_V4}"), VIDEO, "A"]));
    assert_eq!(r.data("A"), ["198.51.100.99"], "{}\n{}", r.text, ctl.log());
    assert_eq!(r.answers[0].ttl, 5);
    assert!(r.has_flag("aa"));
    assert_eq!(answer(&lab, WWW), fra);

    // www's servers stop: the CNAME to the alternate, straight from director ...
    farm.stop("fra-1", 80);
    farm.stop("nyc-1", 80);
    let bound = secs(FALL * (INTERVAL * 1.1 + TIMEOUT) + MARGIN);
    let t = Instant::now();
    let r = loop {
        let r = Reply::parse(&lab.dig(&[&format!("@{EDGE_V4}"), WWW, "A"]));
        if !r.data("CNAME").is_empty() {
            break r;
        }
        assert!(
            t.elapsed() < bound,
            "no CNAME after {bound:?}: {}\n{}",
            r.text,
            ctl.log()
        );
        sleep(Duration::from_millis(100));
    };
    assert_eq!(r.data("CNAME"), ["www.cdn-b.example.net."], "{}", r.text);
    assert_eq!(r.answers[0].ttl, 5);
    assert!(r.has_flag("aa"), "{}", r.text);
    // ... which a resolver follows to the alternate's address.
    let via = Reply::parse(&lab.dig(&[&format!("@{RESOLVER}"), "-p", RESOLVER_PORT, WWW, "A"]));
    assert_eq!(
        via.status.as_deref(),
        Some("NOERROR"),
        "{}\n{}",
        via.text,
        lab.unbound_log()
    );
    assert_eq!(
        via.data("CNAME"),
        ["www.cdn-b.example.net."],
        "{}",
        via.text
    );
    assert_eq!(via.data("A"), ["198.51.100.77"], "{}", via.text);
    let log = ctl.log();
    for want in [
        "www.example.com: no server is usable: answering with the fallback (alternate)",
        "video.example.com: no server is usable: answering with the fallback (origin)",
    ] {
        assert!(log.contains(want), "{want:?} not logged:\n{log}");
    }
    let stats = lab.stats();
    assert!(stats.get("answered_alternate") >= 2, "{stats:?}");
    assert!(stats.get("answered_origin") >= 1, "{stats:?}");

    // A server back: answered again, the fallback ends.
    farm.start("fra-1", 80);
    until(
        &lab,
        &ctl,
        WWW,
        &fra,
        secs(RISE * INTERVAL * 1.1 + MARGIN),
        &mut || {},
    );
}
