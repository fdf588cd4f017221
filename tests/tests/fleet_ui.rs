//! The map page of a fleet, in a real browser: a three-member etcd cluster, a publisher in
//! the hub serving the page from `[ui] listen`, a standby publisher, and two edges (each a
//! lab with director attached). Headless Chromium loads the page from the leader and the
//! test reads the fleet panel: each edge with the version it applied, as `fleet status
//! --json` says; a new version's edges moving to it without a reload, and the cells with
//! them; a stopped edge shown silent while the other takes the next version. An edge's own
//! `--metrics-listen` serves its metrics and no page.
//!
//! Run as root: `cargo test -p director-tests --test fleet_ui -- --nocapture`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use director_ctl::api::{Atlas, FleetStatus};
use director_tests::browser::{png_size, Browser};
use director_tests::fleet::{Etcd, Hub, Keys};
use director_tests::metrics;
use director_tests::netns::{ctl_binary, describe, workspace_root, Controller, Lab};
use director_tests::tempdir::{replace_file, TempDir};

const NAME: &str = "www.fleet.example";
const X: &str = "198.51.100.50";
const Y: &str = "198.51.100.60";
/// Every publisher's page, each in its own namespace.
const UI_PORT: u16 = 9292;
const METRICS: &str = "192.0.2.1:9109";
const DRIVER_PORT: u16 = 9516;
const LEASE: &str = "2";

/// Sites a (Frankfurt) and b (Tokyo); the server with the lower preference answers
/// everyone, so every cell is the preferred server's site.
fn policy(clients: &Path, x_pref: u32, y_pref: u32) -> String {
    format!(
        "[geo]\nlocations = {:?}\n\n[ui]\nlisten = \"0.0.0.0:{UI_PORT}\"\ngrid = 2\nrefresh = 0.5\n\n\
         [[site]]\nname = \"a\"\nlat = 50.03\nlon = 8.54\n\n\
         [[site]]\nname = \"b\"\nlat = 35.76\nlon = 140.39\n\n\
         [[server]]\nname = \"x\"\nsite = \"a\"\nipv4 = \"{X}\"\npreference = {x_pref}\n\n\
         [[server]]\nname = \"y\"\nsite = \"b\"\nipv4 = \"{Y}\"\npreference = {y_pref}\n\n\
         [[service]]\nname = \"{NAME}\"\nttl = 30\nservers = [\"x\", \"y\"]\n\
         priority = {{ admin = 1 }}\n",
        clients.display().to_string()
    )
}

/// Client networks in three places (Paris, New York, Sydney), for the cells.
const CLIENTS: &str = "203.0.113.0/24,48.85,2.35\n198.51.100.128/25,40.71,-74.01\n\
                       2001:db8:77::/48,-33.87,151.21\n";

struct Fleet {
    config: PathBuf,
    clients: PathBuf,
    url: String,
    dir: TempDir,
    /// The publishers' key and the edges' trust file.
    keys: Keys,
}

impl Fleet {
    fn set_policy(&self, x_pref: u32, y_pref: u32) {
        replace_file(&self.config, &policy(&self.clients, x_pref, y_pref));
    }

    fn publisher(&self, ns: &str, name: &str) -> Controller {
        let config = self.config.display().to_string();
        let sign = self.keys.sign_args();
        Controller::start_in(
            ns,
            Path::new("/nonexistent"),
            &[
                "run",
                &sign[0],
                &sign[1],
                "--store",
                &self.url,
                "--role",
                "publisher",
                "--config",
                &config,
                "--name",
                name,
                "--poll-ms",
                "100",
                "--lease-seconds",
                LEASE,
            ],
            &self.dir.path(&format!("publisher-{name}.log")),
        )
    }

    fn edge(&self, lab: &Lab, n: usize, site: &str) -> Controller {
        let state = self.dir.path(&format!("state-{n}")).display().to_string();
        let trust = self.keys.trust_args();
        Controller::start_command(
            lab,
            &[
                "run",
                &trust[0],
                &trust[1],
                "--store",
                &self.url,
                "--role",
                "edge",
                "--name",
                &format!("e{n}"),
                "--site",
                site,
                "--state-dir",
                &state,
                "--metrics-listen",
                METRICS,
                "--lease-seconds",
                LEASE,
            ],
            &self.dir.path(&format!("edge-{n}.log")),
        )
    }
}

fn status(lab: &Lab, url: &str) -> FleetStatus {
    let out = lab.ctl(&["fleet", "status", "--store", url, "--json"]);
    assert!(out.status.success(), "fleet status: {}", describe(&out));
    serde_json::from_slice(&out.stdout).expect("fleet status --json")
}

/// `fleet status` once `ok` holds, at most `within`.
fn status_when(
    lab: &Lab,
    url: &str,
    within: Duration,
    ok: impl Fn(&FleetStatus) -> bool,
) -> FleetStatus {
    let t = Instant::now();
    loop {
        let st = status(lab, url);
        if ok(&st) {
            return st;
        }
        assert!(
            t.elapsed() < within,
            "fleet status after {within:?}: {st:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `curl` in `ns`: (HTTP status, body).
fn get(ns: &str, url: &str) -> (u16, String) {
    let out = Command::new("nsenter")
        .arg(format!("--net=/run/netns/{ns}"))
        .args(["curl", "-sS", "--max-time", "20", "-w", "\n%{http_code}"])
        .arg(url)
        .output()
        .expect("curl");
    assert!(out.status.success(), "GET {url}: {}", describe(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').expect("curl's status line");
    (
        code.trim().parse().expect("an HTTP status"),
        body.to_string(),
    )
}

/// The fleet panel as drawn: edge name → (applied version, state, program).
fn drawn_edges(b: &Browser) -> BTreeMap<String, (String, String, String)> {
    let v = b
        .eval(
            "return [...document.querySelectorAll('#edges tr[data-edge]')].map(r => \
             [r.dataset.edge, r.dataset.version, r.dataset.state, r.dataset.program]);",
        )
        .unwrap();
    v.as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            let s = |i: usize| r[i].as_str().unwrap_or_default().to_string();
            (s(0), (s(1), s(2), s(3)))
        })
        .collect()
}

/// Waits until every drawn edge in `want` shows (version, state); returns how long it took.
fn wait_edges(b: &Browser, want: &[(&str, &str, &str)], within: Duration) -> Duration {
    let t = Instant::now();
    loop {
        let drawn = drawn_edges(b);
        let ok = want
            .iter()
            .all(|(name, v, state)| drawn.get(*name).is_some_and(|d| d.0 == *v && d.1 == *state));
        if ok {
            return t.elapsed();
        }
        assert!(
            t.elapsed() < within,
            "the panel shows {drawn:?}, not {want:?}, after {within:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The sites the drawn cells are coloured for.
fn cell_sites(b: &Browser) -> Vec<String> {
    let v = b
        .eval(
            "return [...new Set([...document.querySelectorAll('#cells rect.cell')]\
             .map(r => r.dataset.site))].sort();",
        )
        .unwrap();
    serde_json::from_value(v).unwrap()
}

/// What the panel shows of each edge equals what `fleet status --json` says.
fn assert_panel_is_status(b: &Browser, st: &FleetStatus) {
    let drawn = drawn_edges(b);
    assert_eq!(drawn.len(), st.edges.len(), "{drawn:?} vs {st:?}");
    for e in &st.edges {
        let d = &drawn[&e.name];
        let v = e.version.map_or(String::new(), |v| v.to_string());
        assert_eq!((&d.0, &d.1), (&v, &e.state), "edge {}: {st:?}", e.name);
        assert_eq!(Some(d.2.as_str()), e.program.as_deref(), "edge {}", e.name);
    }
}

#[test]
fn the_publishers_page_shows_each_edge_and_the_version_it_applied() {
    let dir = TempDir::new("fleetui", "page");
    let hub = Hub::new();
    let etcd = Etcd::start_with(
        &hub,
        &["--heartbeat-interval", "50", "--election-timeout", "500"],
    );
    let labs: Vec<Lab> = (1..=2u8)
        .map(|n| {
            let lab = Lab::new();
            lab.attach();
            hub.join(&lab, n);
            lab
        })
        .collect();
    let f = Fleet {
        config: dir.path("fleet.toml"),
        clients: dir.path("clients.csv"),
        url: etcd.url(),
        keys: Keys::make(&dir.path(""), "p"),
        dir,
    };
    replace_file(&f.clients, CLIENTS);
    f.set_policy(10, 20);
    let mut p1 = f.publisher(hub.ns(), "p1");
    p1.wait_for("the map page on", 1, Duration::from_secs(10));
    p1.wait_for("is current", 1, Duration::from_secs(30));
    // The standby runs elsewhere (here: the first edge's namespace), its page on its host.
    let mut p2 = f.publisher(&labs[0].edge_ns, "p2");
    p2.wait_for("the map page on", 1, Duration::from_secs(10));
    let mut edges = vec![f.edge(&labs[0], 1, "a"), f.edge(&labs[1], 2, "b")];
    let st = status_when(&labs[0], &f.url, Duration::from_secs(20), |s| {
        s.edges.len() == 2
            && s.edges.iter().all(|e| e.state == "current")
            && s.publishers.len() == 2
    });
    assert_eq!(st.current, Some(1), "{st:?}");
    assert_eq!(st.leader.as_deref(), Some("p1"), "{st:?}");
    let program = director_ctl::fleet::version::program();
    assert!(
        st.edges
            .iter()
            .all(|e| e.program.as_deref() == Some(program.as_str())),
        "{st:?}"
    );

    // The feed, as the page gets it: the fleet beside the cells of the published table.
    let page = format!("http://127.0.0.1:{UI_PORT}");
    let (code, body) = get(hub.ns(), &format!("{page}/ui/feed"));
    assert_eq!(code, 200, "{body}");
    let feed: Atlas = serde_json::from_str(&body).expect("the feed is an Atlas");
    assert_eq!(feed.fleet_version, Some(1));
    let fleet = feed
        .fleet
        .as_ref()
        .expect("the fleet in a publisher's feed");
    assert_eq!(fleet.edges.len(), 2, "{fleet:?}");
    assert_eq!(feed.fleet_error, None);
    assert!(feed.cells.len() >= 2, "{:?}", feed.cells);
    assert!(feed.cells.iter().all(|c| c.site.as_deref() == Some("a")));
    // The standby's page: the table it compiles itself from the same config, the same
    // fleet.
    let (code, body) = get(&labs[0].edge_ns, &format!("{page}/ui/feed"));
    assert_eq!(code, 200, "{body}");
    let standby: Atlas = serde_json::from_str(&body).expect("the standby's feed");
    assert_eq!(standby.generation, feed.generation);
    let pubs = &standby.fleet.as_ref().expect("the fleet").publishers;
    assert!(pubs.iter().any(|p| p.name == "p2" && !p.leader), "{pubs:?}");
    // Explain from the publisher's own data.
    let (code, body) = get(
        hub.ns(),
        &format!("{page}/explain?service={NAME}&client=203.0.113.7"),
    );
    assert_eq!(code, 200, "{body}");
    let e: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(e["pick"]["odds"][0]["server"], "x", "{e}");
    // A publisher has no kernel: its listener serves no metrics, and says where they are.
    assert_eq!(get(hub.ns(), &format!("{page}/metrics")).0, 404);

    let browser = Browser::start(hub.ns(), DRIVER_PORT, 1280, 860)
        .unwrap_or_else(|e| panic!("{e}\n{}", p1.log()));
    browser.open(&format!("{page}/")).unwrap();
    wait_edges(
        &browser,
        &[("e1", "1", "current"), ("e2", "1", "current")],
        Duration::from_secs(20),
    );
    assert_panel_is_status(&browser, &status(&labs[0], &f.url));
    let pubs = browser
        .eval(
            "return [...document.querySelectorAll('#publishers li')]\
             .map(l => [l.dataset.publisher, l.dataset.leader]);",
        )
        .unwrap();
    assert_eq!(pubs, serde_json::json!([["p1", "true"], ["p2", "false"]]));
    assert_eq!(cell_sites(&browser), vec!["a".to_string()]);

    // A new version: the edges move to it on the page, without a reload, and the cells
    // with them (y, at b, answers everyone now).
    browser
        .eval("window.notReloaded = true; return true;")
        .unwrap();
    let changed = Instant::now();
    f.set_policy(30, 20);
    wait_edges(
        &browser,
        &[("e1", "2", "current"), ("e2", "2", "current")],
        Duration::from_secs(15),
    );
    let moved = changed.elapsed();
    let st = status(&labs[0], &f.url);
    assert_eq!(st.current, Some(2), "{st:?}");
    assert_panel_is_status(&browser, &st);
    browser
        .wait_for(
            "return document.getElementById('fleet-current').dataset.current === '2';",
            Duration::from_secs(5),
        )
        .unwrap();
    browser
        .wait_for(
            "const s = new Set([...document.querySelectorAll('#cells rect.cell')]\
             .map(r => r.dataset.site)); return s.size === 1 && s.has('b');",
            Duration::from_secs(10),
        )
        .unwrap();
    assert_eq!(
        browser.eval("return window.notReloaded === true;").unwrap(),
        true,
        "the page reloaded"
    );

    // e2 stops: the panel shows it silent on version 2 while e1 takes version 3.
    edges[1].stop();
    let stopped = Instant::now();
    wait_edges(&browser, &[("e2", "2", "silent")], Duration::from_secs(15));
    let silent = stopped.elapsed();
    f.set_policy(10, 20);
    wait_edges(
        &browser,
        &[("e1", "3", "current"), ("e2", "2", "silent")],
        Duration::from_secs(15),
    );
    let st = status_when(&labs[0], &f.url, Duration::from_secs(5), |s| {
        s.current == Some(3)
    });
    assert_panel_is_status(&browser, &st);
    let row = browser
        .eval(
            "return document.querySelector('#edges tr[data-edge=\"e2\"] td.version').textContent;",
        )
        .unwrap();
    assert_eq!(row, "2 of 3");

    // An edge's metrics listener: its metrics, no page (the page is the publisher's).
    let m = metrics::scrape(&labs[0].client_ns, METRICS).expect("e1's metrics");
    assert_eq!(metrics::value(&m, "director_table_version", &[]), Some(3.0));
    let (code, body) = get(&labs[0].client_ns, &format!("http://{METRICS}/"));
    assert_eq!(code, 404, "{body}");
    assert_eq!(
        get(&labs[0].client_ns, &format!("http://{METRICS}/ui/feed")).0,
        404
    );

    let png = browser.screenshot().unwrap();
    let (w, _) = png_size(&png).expect("a PNG");
    assert_eq!(w, 1280);
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root().join("target"), PathBuf::from);
    std::fs::write(target.join("ui-fleet.png"), &png).unwrap();
    println!(
        "fleet page: version 2 shown applied at both edges {:.1} s after the config changed; \
         a stopped edge shown silent after {:.1} s",
        moved.as_secs_f64(),
        silent.as_secs_f64()
    );
    drop(browser);
    for e in &mut edges {
        e.stop();
    }
    p2.assert_alive();
    p1.assert_alive();
}

/// The live test's policy: www by RTT, then preference (x first); the agents' RTT comes
/// from the store (`[rtt] from_store`); the page on `port`.
fn live_policy(clients: &Path, port: u16) -> String {
    format!(
        "[geo]\nlocations = {:?}\n\n[ui]\nlisten = \"0.0.0.0:{port}\"\ngrid = 2\nrefresh = 0.5\n\n\
         [rtt]\nfrom_store = true\npoll = 0.5\nmin_samples = 1\n\n\
         [[site]]\nname = \"a\"\nlat = 50.03\nlon = 8.54\n\n\
         [[site]]\nname = \"b\"\nlat = 35.76\nlon = 140.39\n\n\
         [[server]]\nname = \"x\"\nsite = \"a\"\nipv4 = \"{X}\"\npreference = 10\n\n\
         [[server]]\nname = \"y\"\nsite = \"b\"\nipv4 = \"{Y}\"\npreference = 20\n\n\
         [[service]]\nname = \"{NAME}\"\nttl = 30\nservers = [\"x\", \"y\"]\n\
         priority = {{ rtt = 1, admin = 2 }}\n",
        clients.display().to_string()
    )
}

/// `fleet status --json` from the namespace `ns`.
fn status_in(ns: &str, url: &str) -> FleetStatus {
    let out = Command::new("nsenter")
        .arg(format!("--net=/run/netns/{ns}"))
        .arg(ctl_binary())
        .args(["fleet", "status", "--store", url, "--json"])
        .output()
        .expect("director-ctl fleet status");
    assert!(out.status.success(), "fleet status: {}", describe(&out));
    serde_json::from_slice(&out.stdout).expect("fleet status --json")
}

/// A page's feed, read in `ns`.
fn feed_at(ns: &str, port: u16) -> Atlas {
    let (code, body) = get(ns, &format!("http://127.0.0.1:{port}/ui/feed"));
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).expect("the feed is an Atlas")
}

/// The site the Paris cell (203.0.113.0/24's clients) is drawn for.
fn paris(a: &Atlas) -> Option<String> {
    a.cells
        .iter()
        .find(|c| c.sample.to_string().starts_with("203.0.113."))
        .and_then(|c| c.site.clone())
}

/// A standby's page draws what the fleet answers: the current version's table from the
/// store, with the leader's live RTT in it, not its own compile of the files (which has no
/// live input: Paris would stay at a). The agents' reports are written into the store as
/// `director-ctl agent --store` writes them (here by etcdctl, a stand-in).
#[test]
fn a_standbys_page_draws_the_live_version_the_leader_published() {
    const LEADER_PORT: u16 = 9293;
    const STANDBY_PORT: u16 = 9294;
    let dir = TempDir::new("fleetui", "standby");
    let hub = Hub::new();
    let etcd = Etcd::start_with(
        &hub,
        &["--heartbeat-interval", "50", "--election-timeout", "500"],
    );
    let f = Fleet {
        config: dir.path("p1.toml"),
        clients: dir.path("clients.csv"),
        url: etcd.url(),
        keys: Keys::make(&dir.path(""), "p"),
        dir,
    };
    replace_file(&f.clients, CLIENTS);
    replace_file(&f.config, &live_policy(&f.clients, LEADER_PORT));
    let mut p1 = f.publisher(hub.ns(), "p1");
    p1.wait_for("is current", 1, Duration::from_secs(30));
    // The standby beside it, its config the same but for its page's port.
    let standby_config = f.dir.path("p2.toml");
    replace_file(&standby_config, &live_policy(&f.clients, STANDBY_PORT));
    let sign = f.keys.sign_args();
    let mut p2 = Controller::start_in(
        hub.ns(),
        Path::new("/nonexistent"),
        &[
            "run",
            &sign[0],
            &sign[1],
            "--store",
            &f.url,
            "--role",
            "publisher",
            "--config",
            &standby_config.display().to_string(),
            "--name",
            "p2",
            "--poll-ms",
            "100",
            "--lease-seconds",
            LEASE,
        ],
        &f.dir.path("publisher-p2.log"),
    );
    p2.wait_for("the map page on", 1, Duration::from_secs(10));
    let leader = feed_at(hub.ns(), LEADER_PORT);
    assert_eq!(paris(&leader).as_deref(), Some("a"), "{:?}", leader.cells);

    // RTT from both sites for Paris's clients: b nearer. The leader publishes a version
    // with it; the standby's page must draw it.
    let report = |site: &str, ms: f64| {
        let end = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        format!(
            "{{\"site\":\"{site}\",\"records\":[{{\"prefix\":\"203.0.113.0/24\",\"min_ms\":{ms},\
             \"median_ms\":{ms},\"samples\":20,\"window_start_ms\":{},\"window_end_ms\":{end}}}]}}",
            end - 1000
        )
    };
    let mut took = Vec::new();
    for (a_ms, b_ms, want) in [(80.0, 10.0, "b"), (10.0, 80.0, "a"), (80.0, 10.0, "b")] {
        let before = status_in(hub.ns(), &f.url).current;
        let t = Instant::now();
        etcd.ctl_ok(&["put", "/director/rtt/a/t1", &report("a", a_ms)]);
        etcd.ctl_ok(&["put", "/director/rtt/b/t1", &report("b", b_ms)]);
        let st = loop {
            let st = status_in(hub.ns(), &f.url);
            if st.current > before {
                break st;
            }
            assert!(
                t.elapsed() < Duration::from_secs(15),
                "no version after {before:?}: {st:?}\n{}",
                p1.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        let (l, s) = loop {
            let l = feed_at(hub.ns(), LEADER_PORT);
            let s = feed_at(hub.ns(), STANDBY_PORT);
            if paris(&s).as_deref() == Some(want) && s.generation == l.generation {
                break (l, s);
            }
            assert!(
                t.elapsed() < Duration::from_secs(15),
                "version {:?}: the standby's page draws Paris at {:?} (the leader's at {:?}), \
                 want {want}; generations {} and {}\n{}",
                st.current,
                paris(&s),
                paris(&l),
                s.generation,
                l.generation,
                p2.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        assert_eq!(paris(&l).as_deref(), Some(want));
        assert_eq!(s.fleet_version, st.current);
        assert_eq!(s.fleet_error, None);
        took.push(t.elapsed());
        // The standby's explain decides with the agents' measurements too (its publisher
        // thread keeps them), not with its files alone, which have none.
        let first = if want == "a" { "x" } else { "y" };
        let e = loop {
            let (code, body) = get(
                hub.ns(),
                &format!(
                    "http://127.0.0.1:{STANDBY_PORT}/explain?service={NAME}&client=203.0.113.7"
                ),
            );
            assert_eq!(code, 200, "{body}");
            let e: serde_json::Value = serde_json::from_str(&body).unwrap();
            if e["pick"]["odds"][0]["server"] == first {
                break e;
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "the standby's explain still puts {} first, want {first}: {e}\n{}",
                e["pick"]["odds"][0]["server"],
                p2.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        for (server, site, ms) in [("x", "a", a_ms), ("y", "b", b_ms)] {
            let sv = e["servers"]
                .as_array()
                .and_then(|v| v.iter().find(|sv| sv["server"] == server))
                .unwrap_or_else(|| panic!("{server} in {e}"));
            assert_eq!(sv["rtt"]["ms"].as_f64(), Some(ms), "{server}: {e}");
            assert_eq!(
                sv["rtt"]["agent"]["url"],
                format!("store:{site}/t1"),
                "{server}: {e}"
            );
        }
    }
    println!("the standby's page drew each live version {took:?} after the agents' write");
    p2.assert_alive();
    p1.assert_alive();
}
