//! `cargo run --release -p director-tests --bin bench_steer`: what TCP steering to a VIP
//! costs, printed as tables (no pass/fail), everything measured in this one run:
//!
//! S1. the XDP program's cost per steered packet from BPF_PROG_TEST_RUN (l2 and ipip: SYN
//!     of a recorded flow, SYN of a new flow, established packets), beside the empty and
//!     the turn-around-only programs, and as a ratio to Katran's published cost;
//! S2. HTTP through three edges in turn on one namespace topology with wrk and nginx:
//!     director (l2, servers answer the client directly), nftables DNAT and HAProxy,
//!     with the edge's CPU time per connection and per packet;
//! S3. a SYN flood to the VIP through the same edges (director with and without its flood
//!     guard) while 200 established connections run: the edge's CPU per SYN, and whether the
//!     connections and director's flow entries came through.
//!
//! Needs root. Options: `--seconds N` (per wrk run, default 5), `--runs N` (default 3),
//! `--packets N` (repeat per test-run measurement, default 1000000), `--calls N` (calls per
//! repeat=1 measurement, default 200000), `--flood-seconds N` (default 10), `--only
//! testrun|wire|synflood`.

mod synflood;
mod testrun;
mod topo;
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
    flood_seconds: u32,
    only: Only,
}

fn args() -> Result<Args> {
    let mut a = Args {
        seconds: 5,
        runs: 3,
        packets: 1_000_000,
        calls: 200_000,
        flood_seconds: 10,
        only: Only::default(),
    };
    let mut p = Parser::new(
        "bench_steer [--seconds N] [--runs N] [--packets N] [--calls N] [--flood-seconds N] \
         [--only testrun|wire|synflood]",
    );
    while let Some(flag) = p.next_flag() {
        match flag.as_str() {
            "--seconds" => a.seconds = p.positive(&flag)?,
            "--runs" => a.runs = p.positive(&flag)?,
            "--packets" => a.packets = p.positive(&flag)?,
            "--calls" => a.calls = p.positive(&flag)?,
            "--flood-seconds" => a.flood_seconds = p.positive(&flag)?,
            "--only" => {
                a.only = p.only(&flag, &[Section::Testrun, Section::Wire, Section::Synflood])?;
            }
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
    if a.only.wants(Section::Synflood) {
        synflood::run(a.flood_seconds)?;
    }
    println!(
        "\n(bench_steer took {:.0} s)",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
