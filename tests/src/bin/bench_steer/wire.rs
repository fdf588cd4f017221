//! Section 2: HTTP to a VIP through three edges in turn (topo: director l2, nftables DNAT,
//! HAProxy), with wrk and three nginx servers, and what each edge spends per connection.
//!
//! Edge CPU = the schedstat of bs-edge0's threaded NAPI thread (+ HAProxy's threads); CPU
//! 1's busy time, from its idle time, is printed beside it as a check (it also catches
//! softirq work outside those threads).

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Result};
use director_tests::bench::sys;
use director_tests::bench::table::{thousands, Spread, Table};
use director_tests::netns::ctl_binary;

use crate::topo::{edge_rx_packets, Edge, Topo, CLIENT_CPU, CLIENT_NS, EDGE_CPU, EDGE_NS, VIP};

const CONNECTIONS: &str = "50";

/// What wrk reported for one run, and what the edge spent meanwhile.
struct Sample {
    requests: u64,
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
    errors: u64,
    edge_ns: u64,
    cpu1_busy_ns: u64,
    wall_ns: u64,
    packets: u64,
}

/// wrk's text: "N requests in", "Requests/sec:", the latency distribution, errors.
fn parse_wrk(out: &str) -> Result<(u64, f64, f64, f64, u64)> {
    let mut requests = None;
    let mut rps = None;
    let (mut p50, mut p99) = (None, None);
    let mut errors = 0;
    let ms = |v: &str| -> Option<f64> {
        let (num, scale) = if let Some(n) = v.strip_suffix("us") {
            (n, 1e-3)
        } else if let Some(n) = v.strip_suffix("ms") {
            (n, 1.0)
        } else if let Some(n) = v.strip_suffix('s') {
            (n, 1e3)
        } else {
            (v, 1.0)
        };
        num.parse::<f64>().ok().map(|x| x * scale)
    };
    for line in out.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            [n, "requests", "in", ..] => requests = n.parse().ok(),
            ["Requests/sec:", v] => rps = v.parse().ok(),
            ["50%", v] => p50 = ms(v),
            ["99%", v] => p99 = ms(v),
            ["Socket", "errors:", rest @ ..] => {
                errors += rest
                    .iter()
                    .filter_map(|x| x.trim_end_matches(',').parse::<u64>().ok())
                    .sum::<u64>();
            }
            ["Non-2xx", "or", "3xx", "responses:", n] => errors += n.parse::<u64>().unwrap_or(0),
            _ => {}
        }
    }
    match (requests, rps, p50, p99) {
        (Some(r), Some(s), Some(a), Some(b)) => Ok((r, s, a, b, errors)),
        _ => bail!("cannot read wrk's output:\n{out}"),
    }
}

fn wrk_once(t: &Topo, edge: Edge, close: bool, seconds: u32, log: &mut String) -> Result<Sample> {
    let tids = t.edge_threads()?;
    let mut cmd = sys::nsenter(CLIENT_NS, "taskset");
    cmd.args([
        "-c",
        &CLIENT_CPU.to_string(),
        "wrk",
        "-t",
        "1",
        "-c",
        CONNECTIONS,
        "-d",
        &format!("{seconds}s"),
        "--latency",
    ]);
    if close {
        cmd.args(["-H", "Connection: close"]);
    }
    cmd.arg(format!("http://{VIP}/"));
    let (cpu0, idle0, pk0, t0) = (
        sys::cpu_ns(&tids),
        sys::cpu_idle_ns(EDGE_CPU)?,
        edge_rx_packets()?,
        Instant::now(),
    );
    let done = sys::run_bounded(
        cmd,
        t.dir.root(),
        "wrk",
        Duration::from_secs(seconds as u64 + 15),
    )?;
    let wall_ns = t0.elapsed().as_nanos() as u64;
    let (cpu1, idle1, pk1) = (
        sys::cpu_ns(&tids),
        sys::cpu_idle_ns(EDGE_CPU)?,
        edge_rx_packets()?,
    );
    ensure!(
        done.success,
        "wrk through {} failed ({}): {}{}",
        edge.name(),
        done.status,
        done.stdout,
        done.stderr
    );
    let (requests, rps, p50_ms, p99_ms, errors) = parse_wrk(&done.stdout)?;
    ensure!(
        cpu1 > cpu0 && pk1 > pk0,
        "{}: the edge's threads {tids:?} ran {} ns for {} packets: not the threads that \
         carry its traffic",
        edge.name(),
        cpu1 - cpu0,
        pk1 - pk0
    );
    let _ = writeln!(
        log,
        "{} ({}): {requests} requests, {errors} errors",
        edge.name(),
        if close { "close" } else { "keep-alive" }
    );
    Ok(Sample {
        requests,
        rps,
        p50_ms,
        p99_ms,
        errors,
        edge_ns: cpu1 - cpu0,
        cpu1_busy_ns: wall_ns.saturating_sub(idle1 - idle0),
        wall_ns,
        packets: pk1 - pk0,
    })
}

struct Point {
    edge: Edge,
    close: bool,
    samples: Vec<Sample>,
}

impl Point {
    fn spread(&self, f: impl Fn(&Sample) -> f64) -> Spread {
        Spread::of(&self.samples.iter().map(f).collect::<Vec<_>>())
    }
}

pub fn run(seconds: u32, runs: usize) -> Result<()> {
    eprintln!("building director-ctl for the topology (cargo build -p director-ctl)");
    if std::panic::catch_unwind(ctl_binary).is_err() {
        bail!("no director-ctl to run (see the build error above)");
    }
    eprintln!("section 2: setting up bs-* namespaces, nginx x3");
    let mut t = Topo::new()?;
    let edges = [Edge::Director, Edge::Nat, Edge::Haproxy];
    let mut points: Vec<Point> = edges
        .iter()
        .flat_map(|&edge| {
            [false, true].map(|close| Point {
                edge,
                close,
                samples: Vec::new(),
            })
        })
        .collect();
    let mut log = String::new();
    let mut steer_stats = String::new();
    // Rounds of all three edges rather than each edge's runs together: the machine's other
    // load comes and goes, and then moves every edge's figures alike.
    for round in 1..=runs {
        for edge in edges {
            eprintln!("section 2: round {round} of {runs}: {}", edge.name());
            t.setup_edge(edge)?;
            for p in points.iter_mut().filter(|p| p.edge == edge) {
                p.samples
                    .push(wrk_once(&t, edge, p.close, seconds, &mut log)?);
            }
            if edge == Edge::Director {
                steer_stats = t.ctl(EDGE_NS, &["flows", "stats"])?;
            }
            t.teardown_edge(edge)?;
        }
    }
    drop(t);
    table(&points, seconds, runs).print();
    println!("\n  director's steering counters after its last round (flows stats):");
    for l in steer_stats.lines() {
        println!("    {l}");
    }
    eprint!("{log}");
    Ok(())
}

fn table(points: &[Point], seconds: u32, runs: usize) -> Table {
    let mut t = Table::new(
        format!(
            "S2. HTTP to a VIP through an edge: wrk -t 1 -c {CONNECTIONS} -d {seconds}s, 3 nginx \
             servers, {runs} rounds of the three edges (median, min-max). Edge alone on CPU {EDGE_CPU}; wrk, \
             nginx, bridge on CPU {CLIENT_CPU}. Aim: the least edge CPU per connection."
        ),
        &[
            "edge",
            "requests",
            "req/s",
            "min-max",
            "p50 ms",
            "p99 ms",
            "edge us/req",
            "min-max",
            "edge ns/pkt",
            "pkts/req",
            "edge load",
            "CPU1 busy",
            "errors",
        ],
    );
    let range = |s: Spread, f: &dyn Fn(f64) -> String| format!("{}-{}", f(s.min), f(s.max));
    let us_per_req =
        |ns: fn(&Sample) -> u64| move |s: &Sample| ns(s) as f64 / 1e3 / s.requests.max(1) as f64;
    for p in points {
        let rps = p.spread(|s| s.rps);
        let edge_us = p.spread(us_per_req(|s| s.edge_ns));
        let load = p.spread(|s| s.edge_ns as f64 / s.wall_ns as f64);
        let per_pkt = p.spread(|s| s.edge_ns as f64 / s.packets.max(1) as f64);
        let pkts = p.spread(|s| s.packets as f64 / s.requests.max(1) as f64);
        let busy = p.spread(|s| s.cpu1_busy_ns as f64 / s.wall_ns as f64);
        let errors: u64 = p.samples.iter().map(|s| s.errors).sum();
        t.row(vec![
            p.edge.name().into(),
            if p.close {
                "close (1 conn each)".into()
            } else {
                "keep-alive".into()
            },
            thousands(rps.median as u64),
            range(rps, &|v| thousands(v as u64)),
            format!("{:.2}", p.spread(|s| s.p50_ms).median),
            format!("{:.2}", p.spread(|s| s.p99_ms).median),
            format!("{:.2}", edge_us.median),
            range(edge_us, &|v| format!("{v:.2}")),
            format!("{:.0}", per_pkt.median),
            format!("{:.1}", pkts.median),
            format!("{:.0}%", 100.0 * load.median),
            format!("{:.0}%", 100.0 * busy.median),
            thousands(errors),
        ]);
    }
    for close in [true, false] {
        let of = |e: Edge| {
            points
                .iter()
                .find(|p| p.edge == e && p.close == close)
                .map(|p| p.spread(us_per_req(|s| s.edge_ns)).median)
        };
        if let (Some(d), Some(n), Some(h)) = (of(Edge::Director), of(Edge::Nat), of(Edge::Haproxy))
        {
            t.note(format!(
                "{}: edge CPU per request, director = {:.2}x nftables DNAT's and {:.2}x HAProxy's.",
                if close {
                    "Connection: close (one connection per request)"
                } else {
                    "keep-alive"
                },
                d / n.max(1e-9),
                d / h.max(1e-9)
            ));
        }
    }
    t.note(
        "edge us/req: schedstat of bs-edge0's threaded NAPI thread (+ HAProxy's threads) over the \
         run, per completed request; with close, per connection.",
    );
    t.note(
        "edge ns/pkt: the same time per packet received on bs-edge0 (director sees only the \
         client's half: servers answer directly; DNAT and HAProxy see both).",
    );
    t.note(
        "edge load: those threads' share of one CPU over the run. CPU1 busy: CPU 1's busy time \
         from its idle time: the edge, softirqs and timers, and any other process of the machine.",
    );
    t
}
