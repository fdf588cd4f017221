//! `cargo run --release -p director-tests --bin bench_steer`: what TCP steering to a VIP
//! costs, printed as tables (no pass/fail), everything measured in this one run:
//!
//! S1. the XDP program's cost per steered packet from BPF_PROG_TEST_RUN (l2 and ipip: SYN
//!     of a recorded flow, SYN of a new flow, established packets), beside the empty and
//!     the turn-around-only programs, and as a ratio to Katran's published cost;
//! S2. HTTP through three edges in turn on one namespace topology with wrk and nginx:
//!     director (l2, servers answer the client directly), nftables DNAT and HAProxy,
//!     with the edge's CPU time per connection and per packet.
//!
//! Needs root. Options: `--seconds N` (per wrk run, default 5), `--runs N` (default 3),
//! `--packets N` (repeat per test-run measurement, default 1000000), `--calls N` (calls per
//! repeat=1 measurement, default 200000), `--only testrun|wire`.

#[allow(dead_code)]
#[path = "../bench/sys.rs"]
mod sys;
#[allow(dead_code)]
#[path = "../bench/table.rs"]
mod table;
mod testrun;
mod wire;

use std::time::Instant;

use anyhow::{bail, Context, Result};

struct Args {
    seconds: u32,
    runs: usize,
    packets: u32,
    calls: u32,
    testrun: bool,
    wire: bool,
}

fn args() -> Result<Args> {
    let mut a = Args {
        seconds: 5,
        runs: 3,
        packets: 1_000_000,
        calls: 200_000,
        testrun: true,
        wire: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--seconds" => a.seconds = value()?.parse().context("--seconds")?,
            "--runs" => a.runs = value()?.parse().context("--runs")?,
            "--packets" => a.packets = value()?.parse().context("--packets")?,
            "--calls" => a.calls = value()?.parse().context("--calls")?,
            "--only" => match value()?.as_str() {
                "testrun" => a.wire = false,
                "wire" => a.testrun = false,
                other => bail!("--only {other}: testrun or wire"),
            },
            "-h" | "--help" => {
                println!(
                    "bench_steer [--seconds N] [--runs N] [--packets N] [--calls N] \
                     [--only testrun|wire]"
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other} (see --help)"),
        }
    }
    if a.seconds == 0 || a.runs == 0 || a.packets == 0 || a.calls == 0 {
        bail!("--seconds, --runs, --packets and --calls must be positive");
    }
    Ok(a)
}

fn main() -> Result<()> {
    let a = args()?;
    let start = Instant::now();
    if std::thread::available_parallelism().map_or(0, std::num::NonZero::get) < 2 {
        bail!("the bench places the client on CPU 0 and the edge on CPU 1: it needs 2 CPUs");
    }
    if a.testrun {
        testrun::run(testrun::Options {
            packets: a.packets,
            calls: a.calls,
            runs: a.runs,
        })?
        .print();
    }
    if a.wire {
        wire::run(a.seconds, a.runs)?;
    }
    println!(
        "\n(bench_steer took {:.0} s)",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
