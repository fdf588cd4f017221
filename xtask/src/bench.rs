//! `cargo xtask bench`: per-packet cost from BPF_PROG_TEST_RUN, answers per second on a veth
//! against knot in the same run, TCP steering to a VIP (its cost per packet, and HTTP through
//! director, nftables DNAT and HAProxy with the edge's CPU per connection), the
//! controller's full-scale compile, and health checks at scale (1,000 servers x 3 services
//! every second), printed as tables
//! (the bench programs of the test crate). Issue 8's starting program is built from its
//! commit beside ours, so that its cost per answer is measured in the same run.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result};

use crate::setup::{root, run};

/// The commit issue 8 was filed against: its program is the one "today's" cost per answer
/// is compared with.
pub const ISSUE8_START: &str = "67bce300b82330989b8f359ad24364c34e545c96";

/// Builds `rev`'s bench and controller (release) in `target/baseline/<rev>` from
/// `git archive`, once; returns the directory holding both binaries.
fn build_baseline(rev: &str) -> Result<PathBuf> {
    let src = root().join("target/baseline").join(rev);
    let bin = src.join("target/release");
    if bin.join("bench").exists() && bin.join("director-ctl").exists() {
        return Ok(bin);
    }
    std::fs::create_dir_all(&src).with_context(|| format!("creating {}", src.display()))?;
    eprintln!(
        "building the starting program's bench from {rev} in {} (once)",
        src.display()
    );
    run(Command::new("sh").current_dir(root()).args([
        "-c",
        &format!("git archive {rev} | tar -x -C '{}'", src.display()),
    ]))?;
    run(Command::new("cargo")
        .current_dir(&src)
        .env_remove("CARGO_TARGET_DIR")
        .args([
            "build",
            "--release",
            "-p",
            "director-tests",
            "--bin",
            "bench",
        ])
        .args(["-p", "director-ctl", "--bin", "director-ctl"]))?;
    std::fs::write(bin.join("REV"), &rev[..rev.len().min(12)])?;
    Ok(bin)
}

pub fn run_bench(seconds: u32, baseline: Option<&str>) -> Result<()> {
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
    let mut args = vec!["--seconds".to_string(), seconds.to_string()];
    if let Some(rev) = baseline {
        args.push("--baseline".into());
        let dir = build_baseline(rev).with_context(|| {
            format!("building the starting program of commit {rev} (--baseline none skips it)")
        })?;
        args.push(dir.display().to_string());
    }
    bench(
        "bench",
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    )?;
    bench("bench_steer", &["--seconds", &seconds.to_string()])?;
    bench("bench_controller", &[])?;
    bench("bench_health", &["--seconds", "10"])
}
