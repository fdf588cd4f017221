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

mod testrun;
mod wire;

use std::time::Instant;

use anyhow::Result;
use director_tests::bench::args::{Only, Parser, Section};
use director_tests::bench::sys;

struct Args {
    seconds: u32,
    runs: usize,
    packets: u32,
    calls: u32,
    only: Only,
}

fn args() -> Result<Args> {
    let mut a = Args {
        seconds: 5,
        runs: 3,
        packets: 1_000_000,
        calls: 200_000,
        only: Only::default(),
    };
    let mut p = Parser::new(
        "bench_steer [--seconds N] [--runs N] [--packets N] [--calls N] [--only testrun|wire]",
    );
    while let Some(flag) = p.next_flag() {
        match flag.as_str() {
            "--seconds" => a.seconds = p.positive(&flag)?,
            "--runs" => a.runs = p.positive(&flag)?,
            "--packets" => a.packets = p.positive(&flag)?,
            "--calls" => a.calls = p.positive(&flag)?,
            "--only" => a.only = p.only(&flag, &[Section::Testrun, Section::Wire])?,
            other => return Err(p.unknown(other)),
        }
    }
    Ok(a)
}

fn main() -> Result<()> {
    let a = args()?;
    let start = Instant::now();
    sys::require_two_cpus("the client and the edge")?;
    if a.only.wants(Section::Testrun) {
        testrun::run(testrun::Options {
            packets: a.packets,
            calls: a.calls,
            runs: a.runs,
        })?
        .print();
    }
    if a.only.wants(Section::Wire) {
        wire::run(a.seconds, a.runs)?;
    }
    println!(
        "\n(bench_steer took {:.0} s)",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
