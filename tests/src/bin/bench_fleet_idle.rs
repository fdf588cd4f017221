//! An idle fleet's cost to its store (part of `cargo xtask bench`, section `fleet`): a real
//! three-member etcd cluster in a hub namespace, one publisher, `--edges` edges (default
//! 50; each a lab with director attached) and health checks on (two servers checked over
//! HTTP once a second by three observers each). Once every edge holds the version and
//! every vote is in, nothing is published for `--seconds` (default 120): the table prints
//! what the fleet wrote and read meanwhile (the store's revision, its size in use, range
//! requests and etcd's CPU), and how long etcd's quota would last at that rate.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use director_tests::bench::args::Parser;
use director_tests::bench::sys::{nsenter, proc_kb, run_ok};
use director_tests::bench::table::Table;
use director_tests::fleet::{Etcd, Hub, Keys};
use director_tests::netns::{Controller, Lab};
use director_tests::nginx::Nginx;
use director_tests::tempdir::{replace_file, TempDir};

/// The servers, below the edges' addresses (198.51.100.21 and up).
const X: &str = "198.51.100.10";
const Y: &str = "198.51.100.11";
/// etcd's default backend quota.
const QUOTA: f64 = 2.0 * 1024.0 * 1024.0 * 1024.0;

fn config() -> String {
    format!(
        "[health]\ninterval = 1\ntimeout = 0.5\n\n\
         [[site]]\nname = \"a\"\n\n[[site]]\nname = \"b\"\n\n\
         [[server]]\nname = \"x\"\nsite = \"a\"\nipv4 = \"{X}\"\npreference = 10\n\n\
         [[server]]\nname = \"y\"\nsite = \"b\"\nipv4 = \"{Y}\"\npreference = 20\n\n\
         [[service]]\nname = \"www.idle.example\"\nservers = [\"x\", \"y\"]\n\
         priority = {{ admin = 1 }}\nhealth = {{ type = \"http\", port = 8080 }}\n"
    )
}

/// What the store says of itself: (revision, bytes in use), from member 0.
fn store(etcd: &Etcd) -> Result<(u64, u64)> {
    let out = etcd.ctl(&["endpoint", "status", "-w", "json"]);
    if !out.status.success() {
        bail!("etcdctl endpoint status failed");
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let s = &v[0]["Status"];
    Ok((
        s["header"]["revision"].as_u64().context("no revision")?,
        s["dbSizeInUse"].as_u64().unwrap_or(0),
    ))
}

/// The sum over the members of a counter from etcd's `/metrics` (every series of it).
fn counter(hub: &Hub, names: &[&str]) -> Result<f64> {
    let mut sum = 0.0;
    for i in 0..3 {
        let text = run_ok(nsenter(hub.ns(), "curl").args([
            "-s",
            "-m",
            "5",
            &format!("http://{}/metrics", Etcd::endpoint(i)),
        ]))?;
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((series, value)) = l.rsplit_once(' ') else {
                continue;
            };
            let name = series.split('{').next().unwrap_or("");
            if names.contains(&name) {
                sum += value.parse::<f64>().unwrap_or(0.0);
            }
        }
    }
    Ok(sum)
}

/// The members' CPU time so far (user + system), in seconds.
fn etcd_cpu(etcd: &Etcd) -> f64 {
    let tick = 100.0;
    (0..3)
        .filter_map(|i| etcd.pid(i))
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .filter_map(|s| {
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some((f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?) / tick)
        })
        .sum()
}

fn main() -> Result<()> {
    let mut edges = 50u8;
    let mut seconds = 120u64;
    let mut p = Parser::new("bench_fleet_idle [--edges N] [--seconds S]");
    while let Some(flag) = p.next_flag() {
        match flag.as_str() {
            "--edges" => edges = p.positive("--edges")?,
            "--seconds" => seconds = p.positive("--seconds")?,
            _ => return Err(p.unknown(&flag)),
        }
    }
    let dir = TempDir::new("bench", "fleet-idle");
    let hub = Hub::new();
    let etcd = Etcd::start_with(
        &hub,
        &["--heartbeat-interval", "50", "--election-timeout", "500"],
    );
    hub.add_address(&format!("{X}/24"));
    hub.add_address(&format!("{Y}/24"));
    let _nginx = Nginx::start(
        hub.ns(),
        dir.path("nginx"),
        &format!(
            "  server {{ listen {X}:8080; listen {Y}:8080; location / {{ return 200 ok; }} }}\n"
        ),
        (X, 8080),
        "the servers",
    );
    let cfg = dir.path("fleet.toml");
    replace_file(&cfg, &config());
    let url = etcd.url();
    let keys = Keys::make(dir.root(), "p");
    let (sign, trust) = (keys.sign_args(), keys.trust_args());
    let mut publisher = Controller::start_in(
        hub.ns(),
        std::path::Path::new("/nonexistent"),
        &[
            "run",
            &sign[0],
            &sign[1],
            "--store",
            &url,
            "--role",
            "publisher",
            "--config",
            &cfg.display().to_string(),
            "--name",
            "p1",
        ],
        &dir.path("publisher.log"),
    );
    publisher.wait_for("is current", 1, Duration::from_secs(60));
    let t = Instant::now();
    let mut labs = Vec::new();
    let mut runs = Vec::new();
    for n in 1..=edges {
        let lab = Lab::new();
        lab.attach();
        hub.join(&lab, n);
        let state = dir.path(&format!("state-{n}")).display().to_string();
        let c = Controller::start_command(
            &lab,
            &[
                "run",
                &trust[0],
                &trust[1],
                "--store",
                &url,
                "--role",
                "edge",
                "--name",
                &format!("e{n}"),
                "--site",
                &format!("s{n}"),
                "--state-dir",
                &state,
            ],
            &dir.path(&format!("edge-{n}.log")),
        );
        labs.push(lab);
        runs.push(c);
    }
    // Every edge answers from the version, and has voted on the servers it observes.
    for c in &mut runs {
        c.wait_for("answering from version", 1, Duration::from_secs(120));
    }
    let settle = Instant::now();
    let mut last = store(&etcd)?;
    loop {
        std::thread::sleep(Duration::from_secs(3));
        let now = store(&etcd)?;
        if now.0 == last.0 || settle.elapsed() > Duration::from_secs(60) {
            break;
        }
        last = now;
    }
    let started = t.elapsed();
    let reads = ["etcd_debugging_mvcc_range_total", "etcd_mvcc_range_total"];
    let (rev0, size0) = store(&etcd)?;
    let (reads0, cpu0) = (counter(&hub, &reads)?, etcd_cpu(&etcd));
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(seconds));
    let secs = t0.elapsed().as_secs_f64();
    let (rev1, size1) = store(&etcd)?;
    let (reads1, cpu1) = (counter(&hub, &reads)?, etcd_cpu(&etcd));
    let rss: Vec<f64> = runs
        .iter()
        .filter_map(|c| proc_kb(&format!("/proc/{}/status", c.pid()), "VmRSS").ok())
        .map(|kb| kb as f64 / 1024.0)
        .collect();
    let growth = (size1 as f64 - size0 as f64) / secs;
    let days = if growth > 0.0 {
        format!("{:.1}", (QUOTA - size1 as f64) / growth / 86400.0)
    } else {
        "never (flat)".into()
    };
    let mut tab = Table::new(
        format!(
            "fleet: an idle fleet's store ({edges} edges, 1 publisher, 3 etcd members, health on: 2 servers checked every second by 3 observers each; {secs:.0} s with nothing published)"
        ),
        &[
            "writes/s",
            "revision",
            "in use KiB",
            "in-use growth B/s",
            "days to 2 GiB",
            "range reads/s",
            "etcd CPU %",
            "edge RSS MiB",
        ],
    );
    tab.row(vec![
        format!("{:.2}", (rev1 - rev0) as f64 / secs),
        format!("{rev0} → {rev1}"),
        format!("{} → {}", size0 / 1024, size1 / 1024),
        format!("{growth:.0}"),
        days,
        format!("{:.1}", (reads1 - reads0) / secs),
        format!("{:.1}", (cpu1 - cpu0) / secs * 100.0),
        format!("{:.1}", rss.iter().sum::<f64>() / rss.len().max(1) as f64),
    ]);
    tab.note(format!(
        "{edges} edges attached, started and settled in {:.0} s; range reads: etcd's own counter summed over the members (every read of any key, the publisher's included)",
        started.as_secs_f64()
    ));
    tab.print();
    drop(runs);
    drop(publisher);
    Ok(())
}
