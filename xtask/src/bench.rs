//! `cargo xtask bench`: per-packet cost from BPF_PROG_TEST_RUN, answers per second on a veth
//! against knot in the same run, TCP steering to a VIP (its cost per packet, and HTTP through
//! director, nftables DNAT and HAProxy with the edge's CPU per connection), the
//! controller's full-scale compile, and health checks at scale (1,000 servers x 3 services
//! every second), printed as tables
//! (the bench programs of the test crate).

use std::process::Command;

use anyhow::Result;

use crate::setup::{root, run};

pub fn run_bench(seconds: u32) -> Result<()> {
    let bench = |bin: &str, args: &[&str]| {
        run(Command::new("cargo")
            .current_dir(root())
            .args([
                "run",
                "--quiet",
                "--release",
                "-p",
                "director-tests",
                "--bin",
                bin,
                "--",
            ])
            .args(args))
    };
    bench("bench", &["--seconds", &seconds.to_string()])?;
    bench("bench_steer", &["--seconds", &seconds.to_string()])?;
    bench("bench_controller", &[])?;
    bench("bench_health", &["--seconds", "10"])
}
