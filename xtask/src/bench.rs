//! `cargo xtask bench`: per-packet cost from BPF_PROG_TEST_RUN, answers per second on a veth
//! against knot in the same run, printed as tables (the bench program of the test crate).

use std::process::Command;

use anyhow::Result;

use crate::setup::{root, run};

pub fn run_bench(seconds: u32) -> Result<()> {
    run(Command::new("cargo").current_dir(root()).args([
        "run",
        "--quiet",
        "--release",
        "-p",
        "director-tests",
        "--bin",
        "bench",
        "--",
        "--seconds",
        &seconds.to_string(),
    ]))
}
