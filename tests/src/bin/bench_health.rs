//! Health checks at scale: 1,000 servers x 3 services checked every second by
//! `director-ctl run` (its checks run on one tokio thread), against one nginx holding 1,000
//! IPv6 addresses in a namespace of its own. Prints checks per second sustained and the CPU
//! time of run's threads, read from /proc/<pid>/task/*/schedstat (exact, in ns).
//!
//! Run as root: `cargo run --release -p director-tests --bin bench_health [-- --seconds N]`.

use std::path::Path;
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use director_tests::bench::args::Parser;
use director_tests::bench::sys;
use director_tests::farm::Farm;
use director_tests::metrics;
use director_tests::netns::{Controller, Lab};
use director_tests::tempdir::TempDir;

const SERVERS: usize = 1000;
const SERVICES: usize = 3;
const LISTEN: &str = "127.0.0.1:9274";

fn config(addrs: &[String]) -> String {
    let mut c = String::from("[health]\ninterval = 1\ntimeout = 0.5\n[[site]]\nname = \"lab\"\n");
    for (i, a) in addrs.iter().enumerate() {
        c.push_str(&format!(
            "[[server]]\nname = \"s{i}\"\nsite = \"lab\"\nipv6 = \"{a}\"\n"
        ));
    }
    let names: Vec<String> = (0..addrs.len()).map(|i| format!("\"s{i}\"")).collect();
    for s in 0..SERVICES {
        c.push_str(&format!(
            "[[service]]\nname = \"svc{s}.example.com\"\nservers = [{}]\n\
             priority = {{ admin = 1 }}\nhealth = {{ type = \"tcp\", port = 80 }}\n",
            names.join(", ")
        ));
    }
    c + &format!("[metrics]\nlisten = \"{LISTEN}\"\n")
}

/// `director_health_checks_total` by result (ok, failed), from the metrics endpoint.
fn checks(lab: &Lab) -> Result<(f64, f64)> {
    let m = metrics::scrape(&lab.edge_ns, LISTEN).map_err(anyhow::Error::msg)?;
    let of = |result| metrics::value(&m, "director_health_checks_total", &[("result", result)]);
    match (of("ok"), of("failed")) {
        (Some(ok), Some(failed)) => Ok((ok, failed)),
        _ => bail!("no checks counter at {LISTEN}"),
    }
}

fn run(seconds: u64) -> Result<()> {
    let lab = Lab::new();
    lab.attach();
    let mut farm = Farm::new(&lab, &[]);
    let addrs = farm.add_v6_hosts(&lab, SERVERS);
    farm.start_on("all", "[::]", 80);
    let dir = TempDir::new("bench", "health");
    let cfg = dir.path("director.toml");
    std::fs::write(&cfg, config(&addrs))?;
    let log = dir.path("run.log");
    let mut ctl = Controller::start(&lab, &cfg, Path::new(&log));
    let t = Instant::now();
    ctl.wait_for("first round", 1, Duration::from_secs(60));
    let first = t.elapsed().as_secs_f64();
    ctl.wait_for("entries written", 1, Duration::from_secs(60));
    // Let the checks spread out over the interval before measuring.
    sleep(Duration::from_secs(3));
    let pid = ctl.pid();
    let (ok0, failed0) = checks(&lab)?;
    let cpu0 = sys::cpu_ns_by_name(pid)?;
    let t0 = Instant::now();
    sleep(Duration::from_secs(seconds));
    let (ok1, failed1) = checks(&lab)?;
    let cpu1 = sys::cpu_ns_by_name(pid)?;
    let wall = t0.elapsed().as_secs_f64();
    ctl.assert_alive();
    let done = (ok1 + failed1) - (ok0 + failed0);
    if failed1 - failed0 > 0.0 {
        bail!(
            "{} checks failed during the bench; run's log:\n{}",
            failed1 - failed0,
            ctl.log()
        );
    }
    let want = (SERVERS * SERVICES) as f64;
    println!(
        "\nhealth checks at scale: {SERVERS} servers x {SERVICES} services, TCP, interval 1 s \
         (jitter 0.1), one nginx on 1,000 IPv6 addresses, {seconds} s"
    );
    println!(
        "  first round of {} checks   {first:.2} s after start",
        SERVERS * SERVICES
    );
    println!(
        "  checks per second          {:.0} sustained (aim {want:.0}: every check once a second)",
        done / wall
    );
    let total: u64 = cpu1
        .iter()
        .map(|(k, v)| v - cpu0.get(k).copied().unwrap_or(0))
        .sum();
    for (name, v) in &cpu1 {
        let d = v - cpu0.get(name).copied().unwrap_or(0);
        if d == 0 {
            continue;
        }
        println!(
            "  CPU, thread {name:<14} {:.1} % of one core ({:.1} us per check)",
            d as f64 / 1e9 / wall * 100.0,
            d as f64 / 1e3 / done.max(1.0)
        );
    }
    println!(
        "  CPU, all of run            {:.1} % of one core",
        total as f64 / 1e9 / wall * 100.0
    );
    Ok(())
}

fn main() -> Result<()> {
    let mut seconds = 10;
    let mut p = Parser::new("bench_health [--seconds N]");
    while let Some(flag) = p.next_flag() {
        match flag.as_str() {
            "--seconds" => seconds = p.positive(&flag)?,
            other => return Err(p.unknown(other)),
        }
    }
    run(seconds)
}
