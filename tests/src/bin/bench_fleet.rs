//! Fleet benchmark (part of `cargo xtask bench`, section `fleet`): a real three-member etcd
//! cluster in a hub namespace, one publisher and one edge (director attached in its lab),
//! the full-scale table of `bench::scale` (RouteViews as every site's view, GeoLite2 City,
//! five sites, three services). Prints the publish (compile, ship, flip) and fetch (fetch,
//! check, apply) time and bytes, for the first version and for a regional change (one RTT
//! measurement), and the store's size, then after 100 more publishes of a small fleet
//! sharing the cluster (old versions deleted, history compacted).

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    thread::sleep,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use director_ctl::api::FleetStatus;
use director_tests::bench::scale::{rtt_file, write_config};
use director_tests::bench::table::Table;
use director_tests::fleet::{Etcd, Hub, Keys};
use director_tests::netns::{describe, Controller, Lab};
use director_tests::tempdir::{replace_file, TempDir};
use serde_json::Value;

/// The `event` lines of a `run --json` log.
fn events(c: &Controller, kind: &str) -> Vec<Value> {
    c.log()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["event"] == kind)
        .collect()
}

/// Waits (at most `within`) for the `n`th `kind` event, and returns it.
fn wait_event(c: &mut Controller, kind: &str, n: usize, within: Duration) -> Result<Value> {
    let t = Instant::now();
    loop {
        let e = events(c, kind);
        if e.len() >= n {
            return Ok(e[n - 1].clone());
        }
        c.assert_alive();
        if t.elapsed() > within {
            bail!("no {kind} event #{n} in {within:?}:\n{}", c.log());
        }
        sleep(Duration::from_millis(100));
    }
}

fn status(lab: &Lab, url: &str, fleet: &str) -> Result<FleetStatus> {
    let out = lab.ctl(&[
        "fleet", "status", "--store", url, "--fleet", fleet, "--json",
    ]);
    if !out.status.success() {
        bail!("fleet status: {}", describe(&out));
    }
    serde_json::from_slice(&out.stdout).context("fleet status --json")
}

fn mib(v: &Value) -> String {
    format!("{:.2}", v.as_f64().unwrap_or(0.0) / (1024.0 * 1024.0))
}

fn publisher(
    hub: &Hub,
    etcd: &Etcd,
    keys: &Keys,
    fleet: &str,
    config: &Path,
    log: PathBuf,
) -> Controller {
    let (url, config) = (etcd.url(), config.display().to_string());
    let sign = keys.sign_args();
    Controller::start_in(
        hub.ns(),
        Path::new("/nonexistent"),
        &[
            "run",
            &sign[0],
            &sign[1],
            "--json",
            "--store",
            &url,
            "--fleet",
            fleet,
            "--role",
            "publisher",
            "--config",
            &config,
            "--name",
            "p1",
            "--poll-ms",
            "100",
        ],
        &log,
    )
}

fn small_config(pref: u32) -> String {
    format!(
        "[[site]]\nname = \"a\"\n\n[[server]]\nname = \"x\"\nsite = \"a\"\nipv4 = \"198.51.100.50\"\n\
         preference = {pref}\n\n[[server]]\nname = \"y\"\nsite = \"a\"\nipv4 = \"198.51.100.60\"\n\
         preference = 50\n\n[[service]]\nname = \"small.example\"\nservers = [\"x\", \"y\"]\n\
         priority = {{ admin = 1 }}\n"
    )
}

fn main() -> Result<()> {
    let dir = TempDir::new("bench", "fleet");
    let hub = Hub::new();
    let etcd = Etcd::start_with(
        &hub,
        &["--heartbeat-interval", "50", "--election-timeout", "500"],
    );
    let lab = Lab::new();
    lab.attach();
    hub.join(&lab, 1);
    let url = etcd.url();
    let config = write_config(dir.root())?;
    let keys = Keys::make(dir.root(), "p");
    let mut p = publisher(
        &hub,
        &etcd,
        &keys,
        "bench",
        &config,
        dir.path("publisher.log"),
    );
    let state = dir.path("edge-state").display().to_string();
    let trust = keys.trust_args();
    let mut e = Controller::start_command(
        &lab,
        &[
            "run",
            &trust[0],
            &trust[1],
            "--json",
            "--store",
            &url,
            "--fleet",
            "bench",
            "--role",
            "edge",
            "--name",
            "e1",
            "--state-dir",
            &state,
        ],
        &dir.path("edge.log"),
    );
    let mut t = Table::new(
        "fleet: full-scale table through etcd (3 members, one publisher, one edge; MiB = 2^20 bytes)",
        &["version", "what", "entries", "chunks", "new chunks", "new MiB", "compile s", "publish ms", "fetched chunks", "fetched MiB", "edge ms"],
    );
    let full = Duration::from_secs(600);
    for (v, what) in [(1u64, "first version"), (2, "one RTT row changed")] {
        if v == 2 {
            // fra was the best site for 192.0.2.0/24 (40 ms against 80): now the worst.
            replace_file(&dir.path("rtt.csv"), &rtt_file(200.0));
        }
        let pubd = wait_event(&mut p, "published", v as usize, full)?;
        let took = wait_event(&mut e, "took", v as usize, Duration::from_secs(120))?;
        t.row(vec![
            v.to_string(),
            what.into(),
            pubd["entries"].to_string(),
            pubd["chunks"].to_string(),
            pubd["new_chunks"].to_string(),
            mib(&pubd["new_bytes"]),
            format!("{:.1}", pubd["compile_s"].as_f64().unwrap_or(0.0)),
            format!("{:.0}", pubd["ms"].as_f64().unwrap_or(0.0)),
            took["fetched_chunks"].to_string(),
            mib(&took["fetched_bytes"]),
            format!("{:.0}", took["ms"].as_f64().unwrap_or(0.0)),
        ]);
    }
    t.note("publish ms: the chunks the store lacks, the manifest and the compare-and-swap flip; edge ms: fetch, digest checks, decode and the in-place apply");
    let full_status = status(&lab, &url, "bench")?;
    t.print();

    // The store's size over 100 publishes of a small fleet on the same cluster.
    let small = dir.path("small.toml");
    replace_file(&small, &small_config(10));
    let mut q = publisher(&hub, &etcd, &keys, "small", &small, dir.path("small.log"));
    wait_event(&mut q, "published", 1, Duration::from_secs(30))?;
    let before = status(&lab, &url, "small")?;
    let t0 = Instant::now();
    for i in 2..=101 {
        replace_file(&small, &small_config(10 + i as u32));
        wait_event(&mut q, "published", i, Duration::from_secs(30))?;
    }
    let secs = t0.elapsed().as_secs_f64();
    let after = status(&lab, &url, "small")?;
    let mut s = Table::new(
        "fleet: the store's size (the answering member's database)",
        &["when", "file MiB", "in use MiB", "versions kept"],
    );
    let row = |when: &str, st: &FleetStatus| {
        vec![
            when.to_string(),
            format!("{:.2}", st.store_bytes as f64 / 1048576.0),
            format!("{:.2}", st.store_bytes_in_use as f64 / 1048576.0),
            format!("{:?}", st.versions),
        ]
    };
    s.row(row("after the 2 full-scale versions", &full_status));
    s.row(row("small fleet: after its first version", &before));
    s.row(row("small fleet: after 100 more publishes", &after));
    let mut note = String::new();
    let _ = write!(
        note,
        "100 publishes in {secs:.1} s ({:.0} ms each, config change to flip); kept: the last 3 versions per fleet, history compacted one publish behind",
        secs * 10.0
    );
    s.note(note);
    s.print();
    drop(q);
    drop(e);
    drop(p);
    Ok(())
}
