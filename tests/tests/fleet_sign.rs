//! Signed versions and overlays, end to end, on a real three-member etcd cluster in the hub
//! namespace and edges in labs of their own (XDP attached, a client querying it):
//! - what anyone who can write to the store writes straight into it with etcdctl (a bare
//!   version, one signed by a key no edge trusts, one signed for another fleet, one signed
//!   as another kind, one whose payload was changed after signing, `current` put back to an
//!   older properly signed version; overlays likewise, one taking every server out) is
//!   refused by every edge, once, while a steady stream of queries at each edge gets no
//!   wrong answer; the edges say so (log, metric, `fleet status`), their disk copies stay
//!   as they were, and the next properly signed version is taken;
//! - a restarted edge checks its disk copy against its trust file again;
//! - a publisher's key is rotated (the new key added at the edges, the publishers switched
//!   to it, the old key removed) under the same stream: no wrong answer, nothing refused.
//!
//! Run as root: `cargo test -p director-tests --test fleet_sign -- --test-threads=1`.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use director_ctl::api::FleetStatus;
use director_plan::fleet::envelope::{self, secret_from_pem, Kind, SigningKey};
use director_plan::fleet::manifest::Manifest;
use director_tests::{
    fleet::{Etcd, Hub, Keys},
    metrics,
    netns::{describe, Controller, Lab, CLIENT_V4, EDGE_V4},
    tempdir::{replace_file, TempDir},
};
use serde_json::Value;

const NAME: &str = "www.sign.example";
const X: &str = "198.51.100.50";
const Y: &str = "198.51.100.60";
/// What every edge would answer if it took an overlay with every server out: the
/// service's origin (it does not fail open).
const ORIGIN: &str = "198.51.100.99";
const METRICS: &str = "192.0.2.1:9109";
const LEASE: &str = "2";
/// Queries a second in each edge's stream.
const RATE: u32 = 500;

/// x and y by preference (the lower answers), no health checks; with both out (only an
/// overlay does that) the origin answers.
fn policy(x_pref: u32, y_pref: u32) -> String {
    format!(
        "[[site]]\nname = \"a\"\n\n[[site]]\nname = \"b\"\n\n\
         [[server]]\nname = \"x\"\nsite = \"a\"\nipv4 = \"{X}\"\npreference = {x_pref}\n\n\
         [[server]]\nname = \"y\"\nsite = \"b\"\nipv4 = \"{Y}\"\npreference = {y_pref}\n\n\
         [[service]]\nname = \"{NAME}\"\nttl = 30\nservers = [\"x\", \"y\"]\n\
         priority = {{ admin = 1 }}\nfail_open = false\norigin = [\"{ORIGIN}\"]\n"
    )
}

struct Fleet {
    // Dropped in this order: processes first, then what they ran in.
    publishers: Vec<Option<Controller>>,
    edges: Vec<Option<Controller>>,
    labs: Vec<Lab>,
    etcd: Etcd,
    hub: Hub,
    dir: TempDir,
    config: PathBuf,
}

impl Fleet {
    /// The store, `edges` edge labs, no process yet.
    fn new(test: &str, edges: usize) -> Fleet {
        let dir = TempDir::new("sign", test);
        let hub = Hub::new();
        let etcd = Etcd::start_with(
            &hub,
            &["--heartbeat-interval", "50", "--election-timeout", "500"],
        );
        let config = dir.path("fleet.toml");
        replace_file(&config, &policy(10, 20));
        let mut labs = Vec::new();
        for n in 1..=edges {
            let lab = Lab::new();
            lab.attach();
            hub.join(&lab, n as u8);
            labs.push(lab);
        }
        Fleet {
            publishers: Vec::new(),
            edges: (0..edges).map(|_| None).collect(),
            labs,
            etcd,
            hub,
            dir,
            config,
        }
    }

    /// Publisher `name` signing with the key in `key`.
    fn publisher(&self, name: &str, key: &Path, log: &str) -> Controller {
        let (url, config) = (self.etcd.url(), self.config.display().to_string());
        Controller::start_in(
            self.hub.ns(),
            Path::new("/nonexistent"),
            &[
                "run",
                "--sign-key",
                &key.display().to_string(),
                "--store",
                &url,
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
            &self.dir.path(log),
        )
    }

    /// Edge `n` (1-based) trusting the keys in `trust`.
    fn edge(&self, n: usize, trust: &Path, log: &str) -> Controller {
        let state = self.state(n).display().to_string();
        Controller::start_command(
            &self.labs[n - 1],
            &[
                "run",
                "--trust",
                &trust.display().to_string(),
                "--store",
                &self.etcd.url(),
                "--role",
                "edge",
                "--name",
                &format!("e{n}"),
                "--site",
                &format!("s{n}"),
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

    fn state(&self, n: usize) -> PathBuf {
        self.dir.path(&format!("state-{n}"))
    }

    fn edge_mut(&mut self, n: usize) -> &mut Controller {
        self.edges[n - 1].as_mut().expect("the edge runs")
    }

    fn set_policy(&self, x_pref: u32, y_pref: u32) {
        replace_file(&self.config, &policy(x_pref, y_pref));
    }

    fn answer(&self, n: usize) -> String {
        let out = self.labs[n - 1].dig(&[&format!("@{EDGE_V4}"), NAME, "A", "+short"]);
        out.trim().to_string()
    }

    /// Waits until every edge answers `want`.
    fn wait_answer(&self, want: &str, within: Duration) {
        let t = Instant::now();
        loop {
            let now: Vec<String> = (1..=self.labs.len()).map(|n| self.answer(n)).collect();
            if now.iter().all(|a| a == want) {
                return;
            }
            assert!(
                t.elapsed() < within,
                "the edges answer {now:?}, not {want}, after {within:?}\n{}",
                self.logs()
            );
            sleep(Duration::from_millis(50));
        }
    }

    fn status(&self) -> FleetStatus {
        let out = self.labs[0].ctl(&["fleet", "status", "--store", &self.etcd.url(), "--json"]);
        assert!(out.status.success(), "fleet status: {}", describe(&out));
        serde_json::from_slice(&out.stdout).expect("fleet status --json")
    }

    /// `fleet status` once `ok` holds, at most `within`.
    fn status_when(&self, within: Duration, ok: impl Fn(&FleetStatus) -> bool) -> FleetStatus {
        let t = Instant::now();
        loop {
            let st = self.status();
            if ok(&st) {
                return st;
            }
            assert!(
                t.elapsed() < within,
                "fleet status after {within:?}: {st:#?}\n{}",
                self.logs()
            );
            sleep(Duration::from_millis(100));
        }
    }

    /// A key's value, as etcdctl prints it.
    fn get(&self, key: &str) -> String {
        let v = self.etcd.ctl_ok(&["get", "--print-value-only", key]);
        v.strip_suffix('\n').unwrap_or(&v).to_string()
    }

    /// Writes `value` at `key` with etcdctl: the store's own client, no director involved.
    fn put(&self, key: &str, value: &[u8]) {
        let value = std::str::from_utf8(value).expect("JSON");
        self.etcd.ctl_ok(&["put", key, value]);
    }

    /// Edge `n`'s counts of `director_fleet_refused_total` by (what, reason).
    fn refused(&self, n: usize) -> BTreeMap<(String, String), f64> {
        let m = metrics::scrape(&self.labs[n - 1].client_ns, METRICS).expect("the edge's metrics");
        m.iter()
            .filter(|(name, _, _)| name == "director_fleet_refused_total")
            .map(|(_, labels, v)| {
                let label = |k: &str| {
                    labels
                        .iter()
                        .find(|(n, _)| n == k)
                        .map(|(_, v)| v.clone())
                        .unwrap_or_default()
                };
                ((label("what"), label("reason")), *v)
            })
            .collect()
    }

    fn logs(&self) -> String {
        let mut s = String::new();
        for (i, p) in self.publishers.iter().enumerate() {
            if let Some(p) = p {
                s += &format!("--- publisher {}:\n{}\n", i + 1, p.log());
            }
        }
        for (i, e) in self.edges.iter().enumerate() {
            if let Some(e) = e {
                s += &format!("--- edge e{}:\n{}\n", i + 1, e.log());
            }
        }
        s
    }
}

/// A `dns_stream` at an edge's client: `seconds` of queries for NAME at [`RATE`] a second,
/// every answer expected to hold `expect`.
struct Stream(Option<Child>);

impl Stream {
    fn start(lab: &Lab, expect: &str, seconds: u32) -> Stream {
        let child = Command::new("ip")
            .args(["netns", "exec", &lab.client_ns])
            .arg(env!("CARGO_BIN_EXE_dns_stream"))
            .args([
                CLIENT_V4,
                EDGE_V4,
                NAME,
                expect,
                &RATE.to_string(),
                &seconds.to_string(),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting dns_stream");
        Stream(Some(child))
    }

    /// (sent, wrong, lost).
    fn finish(mut self) -> (u64, u64, u64) {
        let child = self.0.take().expect("finished once");
        let out = child.wait_with_output().expect("dns_stream");
        assert!(out.status.success(), "dns_stream: {}", describe(&out));
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("dns_stream printed {}: {e}", describe(&out)));
        let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("no {k} in {v}"));
        (n("sent"), n("wrong"), n("lost"))
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn read_key(path: &Path) -> SigningKey {
    secret_from_pem(&std::fs::read_to_string(path).expect("the key file")).expect("a key")
}

/// What an edge keeps on disk, file by file (chunks by name).
fn disk_copy(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for f in ["manifest.signed", "config.toml", "overlay.signed"] {
        out.insert(
            f.to_string(),
            std::fs::read(dir.join(f)).unwrap_or_default(),
        );
    }
    let mut chunks: Vec<String> = std::fs::read_dir(dir.join("chunks"))
        .expect("the copy's chunks")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    chunks.sort();
    out.insert("chunks/".into(), chunks.join("\n").into_bytes());
    out
}

fn version_key(v: u64) -> String {
    format!("/director/versions/{v:020}")
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as u64
}

/// `payload` as an envelope's `payload` field holds it (base64), to swap into a signed one.
fn encoded(payload: &[u8]) -> Value {
    let unsigned = envelope::seal(Kind::Manifest, "director", payload, &[]);
    serde_json::from_slice::<Value>(&unsigned).expect("JSON")["payload"].clone()
}

/// An overlay taking every server out, with `serial`.
fn all_out(serial: u64) -> Vec<u8> {
    format!(
        "{{\"serial\":{serial},\"down\":[{{\"service\":\"{NAME}\",\"server\":\"x\"}},\
         {{\"service\":\"{NAME}\",\"server\":\"y\"}}]}}"
    )
    .into_bytes()
}

#[test]
fn forged_versions_and_overlays_are_refused_by_every_edge() {
    let mut f = Fleet::new("forged", 3);
    let keys = Keys::make(f.dir.root(), "p1");
    let p = f.publisher("p1", &keys.key, "publisher.log");
    f.publishers.push(Some(p));
    for n in 1..=3 {
        f.edges[n - 1] = Some(f.edge(n, &keys.trust, &format!("edge-{n}.log")));
    }
    f.wait_answer(X, Duration::from_secs(30));
    // Three properly signed versions, the second answering y: an older signed version
    // that would change every answer is in the store.
    f.set_policy(30, 20);
    f.wait_answer(Y, Duration::from_secs(10));
    f.set_policy(10, 20);
    f.wait_answer(X, Duration::from_secs(10));
    let id = envelope::key_id(&read_key(&keys.key).verifying_key());
    let st = f.status_when(Duration::from_secs(5), |s| {
        s.current == Some(3) && s.edges.iter().filter(|e| e.current).count() == 3
    });
    assert_eq!(st.signed_by, vec![id.clone()], "{st:?}");
    assert_eq!(st.overlay_signed_by, vec![id.clone()], "{st:?}");
    // The publisher stops, so nothing it would write again (the overlay) hides what the
    // edges do with what is written behind its back.
    f.publishers[0].as_mut().expect("p1").stop();
    sleep(Duration::from_secs(1));
    let before: Vec<_> = (1..=3).map(|n| disk_copy(&f.state(n))).collect();
    let held_overlay = f.get("/director/overlay");
    let held_serial = envelope::peek(held_overlay.as_bytes())
        .and_then(|(p, _)| serde_json::from_slice::<Value>(&p).ok())
        .and_then(|v| v["serial"].as_u64())
        .expect("the overlay's serial");

    // Version 2's manifest (answers y) renumbered: what each forgery carries.
    let v2 = f.get(&version_key(2));
    let (payload, _) = envelope::peek(v2.as_bytes()).expect("version 2 is an envelope");
    let forged = |n: u64| {
        let mut m = Manifest::parse(&payload).expect("version 2's manifest");
        m.version = n;
        m.to_json()
    };
    let fleet_key = read_key(&keys.key);
    let stranger = Keys::make(f.dir.root(), "stranger");
    let stranger_key = read_key(&stranger.key);
    // Signed by the fleet's key as version 3's manifest renumbered, then its payload swapped.
    let v3 = f.get(&version_key(3));
    let (p3, _) = envelope::peek(v3.as_bytes()).expect("version 3 is an envelope");
    let mut m3 = Manifest::parse(&p3).expect("version 3's manifest");
    m3.version = 8;
    let mut swapped: Value = serde_json::from_slice(&envelope::seal(
        Kind::Manifest,
        "director",
        &m3.to_json(),
        &[&fleet_key],
    ))
    .expect("JSON");
    swapped["payload"] = encoded(&forged(8));
    let versions: Vec<(u64, Vec<u8>, &str)> = vec![
        (4, forged(4), "unsigned"),
        (
            5,
            envelope::seal(Kind::Manifest, "director", &forged(5), &[&stranger_key]),
            "unknown_key",
        ),
        (
            6,
            envelope::seal(Kind::Manifest, "other", &forged(6), &[&fleet_key]),
            "other_fleet",
        ),
        (
            7,
            envelope::seal(Kind::Overlay, "director", &forged(7), &[&fleet_key]),
            "wrong_type",
        ),
        (
            8,
            serde_json::to_vec(&swapped).expect("JSON"),
            "bad_signature",
        ),
    ];
    let soon = now_ms() + 60_000;
    let overlays: Vec<(Option<Vec<u8>>, &str)> = vec![
        (Some(all_out(u64::MAX / 2)), "unsigned"),
        (
            Some(envelope::seal(
                Kind::Overlay,
                "director",
                &all_out(soon),
                &[&stranger_key],
            )),
            "unknown_key",
        ),
        (
            Some(envelope::seal(
                Kind::Overlay,
                "other",
                &all_out(soon),
                &[&fleet_key],
            )),
            "other_fleet",
        ),
        (
            Some(envelope::seal(
                Kind::Manifest,
                "director",
                &all_out(soon),
                &[&fleet_key],
            )),
            "wrong_type",
        ),
        // Properly signed, but older than the overlay held: a rollback.
        (
            Some(envelope::seal(
                Kind::Overlay,
                "director",
                &all_out(held_serial - 1),
                &[&fleet_key],
            )),
            "rollback",
        ),
        (None, "unsigned"),
    ];

    const SECONDS: u32 = 45;
    let streams: Vec<Stream> = f
        .labs
        .iter()
        .map(|l| Stream::start(l, X, SECONDS))
        .collect();
    let t = Instant::now();
    sleep(Duration::from_secs(1));
    for (v, bytes, reason) in &versions {
        f.put(&version_key(*v), bytes);
        f.put("/director/current", v.to_string().as_bytes());
        for n in 1..=3 {
            f.edge_mut(n).wait_for(
                &format!("refusing version {v}: "),
                1,
                Duration::from_secs(10),
            );
            let log = f.edges[n - 1].as_ref().expect("edge").log();
            let line = log
                .lines()
                .find(|l| l.contains(&format!("refusing version {v}: ")))
                .expect("the refusal");
            assert!(
                line.contains(&format!("({reason}); answering from version 3")),
                "edge {n}: {line}"
            );
        }
    }
    // `current` put back to version 2, properly signed: a rollback.
    f.put("/director/current", b"2");
    for n in 1..=3 {
        f.edge_mut(n).wait_for(
            "refusing version 2: older than version 3, which this edge holds (rollback)",
            1,
            Duration::from_secs(10),
        );
    }
    for (i, (bytes, reason)) in overlays.iter().enumerate() {
        match bytes {
            Some(b) => f.put("/director/overlay", b),
            None => {
                f.etcd.ctl_ok(&["del", "/director/overlay"]);
            }
        }
        for n in 1..=3 {
            f.edge_mut(n)
                .wait_for("refusing the overlay", i + 1, Duration::from_secs(10));
            let log = f.edges[n - 1].as_ref().expect("edge").log();
            let line = log
                .lines()
                .filter(|l| l.contains("refusing the overlay"))
                .nth(i)
                .expect("the refusal");
            assert!(line.contains(&format!("({reason}); ")), "edge {n}: {line}");
        }
    }
    let attacked = t.elapsed();
    // Each read of `current` (every second) and of the overlay (each session) finds the
    // same refused things again: said and counted once.
    sleep(Duration::from_secs(3));
    assert!(
        attacked < Duration::from_secs(u64::from(SECONDS) - 5),
        "the forgeries took {attacked:?}, longer than the stream"
    );
    for (n, s) in streams.into_iter().enumerate() {
        let (sent, wrong, lost) = s.finish();
        println!("edge {}: {sent} queries while forged versions and overlays were written: {wrong} wrong, {lost} lost", n + 1);
        assert_eq!((wrong, lost), (0, 0), "edge {}", n + 1);
        assert!(sent >= u64::from(RATE * SECONDS) * 9 / 10, "{sent} sent");
    }
    let mut want: BTreeMap<(String, String), f64> = BTreeMap::new();
    for (_, _, reason) in &versions {
        *want
            .entry(("version".into(), reason.to_string()))
            .or_default() += 1.0;
    }
    *want
        .entry(("version".into(), "rollback".into()))
        .or_default() += 1.0;
    for (_, reason) in &overlays {
        *want
            .entry(("overlay".into(), reason.to_string()))
            .or_default() += 1.0;
    }
    let st = f.status();
    for n in 1..=3 {
        let e = f.edges[n - 1].as_ref().expect("edge");
        for v in [2, 4, 5, 6, 7, 8] {
            assert_eq!(
                e.count(&format!("refusing version {v}: ")),
                1,
                "{}",
                e.log()
            );
        }
        assert_eq!(
            e.count("refusing the overlay"),
            overlays.len(),
            "{}",
            e.log()
        );
        assert_eq!(
            f.refused(n),
            want,
            "edge {n}'s director_fleet_refused_total"
        );
        assert_eq!(f.answer(n), X);
        // Nothing refused reached the disk copy.
        assert_eq!(disk_copy(&f.state(n)), before[n - 1], "edge {n}'s copy");
        let r = st
            .edges
            .iter()
            .find(|r| r.name == format!("e{n}"))
            .expect("the edge in fleet status");
        assert_eq!(r.version, Some(3), "{r:?}");
        let last = r.refused.as_ref().expect("its last refusal");
        assert_eq!(
            (last.what.as_str(), last.reason.as_str()),
            ("overlay", "unsigned"),
            "{last:?}"
        );
    }
    println!("fleet status after the forgeries:\n{}", {
        let out = f.labs[0].ctl(&["fleet", "status", "--store", &f.etcd.url()]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    });

    // The publisher is back: the next properly signed version is taken by every edge, and
    // the overlay is signed again.
    let p = f.publisher("p1", &keys.key, "publisher-2.log");
    f.publishers[0] = Some(p);
    f.set_policy(30, 20);
    f.wait_answer(Y, Duration::from_secs(20));
    let st = f.status_when(Duration::from_secs(5), |s| {
        s.edges.iter().filter(|e| e.current).count() == 3 && !s.overlay_signed_by.is_empty()
    });
    let current = st.current.expect("a current version");
    assert!(current > 8, "{st:?}");
    assert_eq!(st.signed_by, vec![id.clone()]);
    assert_eq!(st.overlay_signed_by, vec![id.clone()]);
    assert!(st.overlay_serial > held_serial, "{st:?}");

    // Restarted trusting only a key that did not sign its copy (the fleet's key removed
    // from its trust file meanwhile): the copy is refused, the pinned maps answer on, and
    // the store's version too is refused, until the trust file holds the key again.
    f.edges[0] = None;
    let lone = f.dir.path("e1.trust");
    replace_file(&lone, &format!("{}\n", stranger.line));
    f.edges[0] = Some(f.edge(1, &lone, "edge-1-restarted.log"));
    f.edge_mut(1).wait_for(
        &format!("refusing its copy of version {current}: "),
        1,
        Duration::from_secs(10),
    );
    f.edge_mut(1).wait_for(
        &format!("refusing version {current}: "),
        1,
        Duration::from_secs(10),
    );
    for _ in 0..5 {
        assert_eq!(f.answer(1), Y, "the pinned maps answer");
        sleep(Duration::from_millis(100));
    }
    // The copy's manifest and its overlay, each refused once.
    let r = f.refused(1);
    assert_eq!(
        r.get(&("copy".into(), "unknown_key".into())),
        Some(&2.0),
        "{r:?}"
    );
    assert_eq!(
        r.get(&("version".into(), "unknown_key".into())),
        Some(&1.0),
        "{r:?}"
    );
    replace_file(&lone, &format!("{}\n{}\n", stranger.line, keys.line));
    f.edge_mut(1).wait_for(
        &format!("answering from version {current}"),
        1,
        Duration::from_secs(10),
    );

    // A disk copy changed after it was signed (its payload swapped for version 2's): refused
    // at start; the store's own version is taken, its chunks from the copy.
    f.edges[1] = None;
    let signed = f.state(2).join("manifest.signed");
    let mut env: Value =
        serde_json::from_slice(&std::fs::read(&signed).expect("the copy")).expect("JSON");
    env["payload"] = encoded(&forged(current));
    std::fs::write(&signed, serde_json::to_vec(&env).expect("JSON")).expect("writing");
    f.edges[1] = Some(f.edge(2, &keys.trust, "edge-2-restarted.log"));
    f.edge_mut(2).wait_for(
        &format!("refusing its copy of version {current}: "),
        1,
        Duration::from_secs(10),
    );
    f.edge_mut(2).wait_for(
        &format!("answering from version {current}"),
        1,
        Duration::from_secs(10),
    );
    let log = f.edges[1].as_ref().expect("edge 2").log();
    assert!(log.contains("(bad_signature)"), "{log}");
    f.wait_answer(Y, Duration::from_secs(5));
    for e in f.edges.iter_mut().flatten() {
        e.assert_alive();
    }
}

#[test]
fn a_publisher_key_is_rotated_without_a_gap() {
    let mut f = Fleet::new("rotate", 2);
    let old = Keys::make(f.dir.root(), "old");
    // Each publisher its own key file, each edge its own trust file, as on real hosts.
    let root = f.dir.root().to_path_buf();
    let key_file = |p: usize| root.join(format!("p{p}.key"));
    let trust_file = |n: usize| root.join(format!("e{n}.trust"));
    // A key file stays readable by its owner alone: copied (mode and all), then renamed.
    let install = |from: &Path, to: &Path| {
        let tmp = to.with_extension("new");
        std::fs::copy(from, &tmp).expect("copying the key");
        std::fs::rename(&tmp, to).expect("renaming the key");
    };
    for p in 1..=2 {
        install(&old.key, &key_file(p));
    }
    for n in 1..=2 {
        replace_file(&trust_file(n), &format!("{}\n", old.line));
    }
    for p in 1..=2 {
        let c = f.publisher(
            &format!("p{p}"),
            &key_file(p),
            &format!("publisher-{p}.log"),
        );
        f.publishers.push(Some(c));
        // p1 leads.
        if p == 1 {
            f.publishers[0].as_mut().expect("p1").wait_for(
                "is current",
                1,
                Duration::from_secs(30),
            );
        }
    }
    for n in 1..=2 {
        f.edges[n - 1] = Some(f.edge(n, &trust_file(n), &format!("edge-{n}.log")));
    }
    f.wait_answer(X, Duration::from_secs(30));
    let old_id = envelope::key_id(&read_key(&old.key).verifying_key());
    f.status_when(Duration::from_secs(5), |s| {
        s.signed_by == [old_id.clone()] && s.edges.iter().filter(|e| e.current).count() == 2
    });

    const SECONDS: u32 = 40;
    let streams: Vec<Stream> = f
        .labs
        .iter()
        .map(|l| Stream::start(l, X, SECONDS))
        .collect();
    let t = Instant::now();
    sleep(Duration::from_secs(1));
    // 1. The new key is added at every edge (its trust file read again).
    let new = Keys::make(f.dir.root(), "new");
    let new_id = envelope::key_id(&read_key(&new.key).verifying_key());
    for n in 1..=2 {
        replace_file(&trust_file(n), &format!("{}\n{}\n", old.line, new.line));
    }
    for n in 1..=2 {
        f.edge_mut(n).wait_for(
            "taking versions and overlays signed by",
            2,
            Duration::from_secs(5),
        );
    }
    // 2. The publishers are switched to it: the leader signs the current table and the
    // overlay again under it.
    for p in 1..=2 {
        install(&new.key, &key_file(p));
    }
    let st = f.status_when(Duration::from_secs(15), |s| {
        s.signed_by == [new_id.clone()]
            && s.overlay_signed_by == [new_id.clone()]
            && s.edges.iter().filter(|e| e.current).count() == 2
    });
    println!(
        "switched: version {:?} signed by {:?}, overlay serial {} by {:?}",
        st.current, st.signed_by, st.overlay_serial, st.overlay_signed_by
    );
    // 3. The old key is removed at every edge.
    for n in 1..=2 {
        replace_file(&trust_file(n), &format!("{}\n", new.line));
    }
    for n in 1..=2 {
        f.edge_mut(n).wait_for(
            "taking versions and overlays signed by",
            3,
            Duration::from_secs(5),
        );
    }
    let rotated = t.elapsed();
    assert!(
        rotated < Duration::from_secs(u64::from(SECONDS) - 5),
        "the rotation took {rotated:?}, longer than the stream"
    );
    println!("rotated in {rotated:?} under {RATE} queries a second at each edge");
    for (n, s) in streams.into_iter().enumerate() {
        let (sent, wrong, lost) = s.finish();
        println!(
            "edge {}: {sent} queries during the rotation: {wrong} wrong, {lost} lost",
            n + 1
        );
        assert_eq!((wrong, lost), (0, 0), "edge {}", n + 1);
    }
    let published = |s: &str| s.lines().filter(|l| l.contains("is current")).count();
    let p1 = f.publishers[0].as_ref().expect("p1").log();
    assert!(
        p1.contains("signing it again as the next version"),
        "the leader did not sign the current table again:\n{p1}"
    );

    // The leader goes; the standby (switched too) publishes the next change, and every
    // edge takes it under the new key alone.
    f.publishers[0].as_mut().expect("p1").kill();
    f.set_policy(30, 20);
    f.wait_answer(Y, Duration::from_secs(20));
    let p2 = f.publishers[1].as_ref().expect("p2").log();
    assert!(published(&p2) >= 1, "{p2}");
    f.status_when(Duration::from_secs(5), |s| {
        s.signed_by == [new_id.clone()] && s.edges.iter().filter(|e| e.current).count() == 2
    });
    // A restarted edge takes its disk copy (signed by the new key) with the old one gone.
    f.edges[0] = None;
    f.edges[0] = Some(f.edge(1, &trust_file(1), "edge-1-restarted.log"));
    f.edge_mut(1)
        .wait_for("0 chunks (0 bytes) fetched", 1, Duration::from_secs(10));
    // Nothing was refused anywhere, at any step.
    for n in 1..=2 {
        assert!(f.refused(n).is_empty(), "edge {n}: {:?}", f.refused(n));
    }
    for e in f.edges.iter().flatten() {
        assert_eq!(e.count("refusing"), 0, "{}", e.log());
    }
    let st = f.status();
    assert!(st.edges.iter().all(|e| e.refused.is_none()), "{st:?}");
}
