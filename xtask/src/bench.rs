//! `cargo xtask bench`: per-packet cost from BPF_PROG_TEST_RUN, answers per second on a veth
//! against knot in the same run, TCP steering to a VIP (its cost per packet, and HTTP through
//! director, nftables DNAT and HAProxy with the edge's CPU per connection, and a SYN flood
//! through the same three edges while established connections run), the
//! controller's full-scale compile, health checks at scale (1,000 servers x 3 services
//! every second), and live BGP over BMP at full table scale (a replayer in the bench as the
//! router), printed as tables (the bench programs of the test crate). Issue 8's starting
//! program is built from its commit beside ours, so that its cost per answer is measured in
//! the same run.
//! `--only <section>` runs one part, e.g. `--only testrun` for the per-packet cost alone
//! (bench's section 1 and 1b, bench_steer's S1): minutes where the whole takes much longer.

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

/// The sections `--only` takes, as the bench binaries name them (director_tests::bench::args).
pub const SECTIONS: [&str; 8] = [
    "testrun",
    "wire",
    "synflood",
    "controller",
    "health",
    "fleet",
    "live",
    "demand",
];

/// Each bench binary with the sections it has, in the order they run.
const BINARIES: [(&str, &[&str]); 8] = [
    ("bench", &["testrun", "wire"]),
    ("bench_steer", &["testrun", "wire", "synflood"]),
    ("bench_controller", &["controller"]),
    ("bench_health", &["health"]),
    ("bench_fleet", &["fleet"]),
    ("bench_fleet_idle", &["fleet"]),
    ("bench_live", &["live"]),
    ("bench_demand", &["demand"]),
];

pub fn run_bench(seconds: u32, baseline: Option<&str>, only: Option<&str>) -> Result<()> {
    let bench = |bin: &str, args: &[String]| {
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
    for (bin, sections) in BINARIES {
        if only.is_some_and(|s| !sections.contains(&s)) {
            continue;
        }
        let mut args: Vec<String> = match bin {
            "bench" | "bench_steer" => vec!["--seconds".into(), seconds.to_string()],
            // Health checks run once a second: ten seconds of them, whatever a load run takes.
            "bench_health" => vec!["--seconds".into(), "10".into()],
            _ => Vec::new(),
        };
        // A binary with more than one section is told which one; the others have only it.
        if let Some(s) = only.filter(|_| sections.len() > 1) {
            args.extend(["--only".into(), s.into()]);
        }
        // The program without demand counting, whose difference is counting's cost: beside
        // section 1's and on the wire (2c).
        if bin == "bench" {
            let uncounted = ebpf_build::build_with(
                &root(),
                &root().join("target/ebpf-uncounted"),
                &["uncounted"],
            )
            .map_err(anyhow::Error::msg)
            .context("building the XDP program without demand counting")?;
            args.extend(["--uncounted".into(), uncounted.display().to_string()]);
        }
        // The answer floor (2d): what any answer costs on the wire, nothing decided.
        if bin == "bench" && only.is_none_or(|s| s == "wire") {
            let floor =
                ebpf_build::build_with(&root(), &root().join("target/ebpf-floor"), &["floor"])
                    .map_err(anyhow::Error::msg)
                    .context("building the XDP program's answer floor")?;
            args.extend(["--floor".into(), floor.display().to_string()]);
        }
        // The starting program's cost is set beside section 1's, so only where it runs.
        if bin == "bench" && only.is_none_or(|s| s == "testrun") {
            if let Some(rev) = baseline {
                let dir = build_baseline(rev).with_context(|| {
                    format!(
                        "building the starting program of commit {rev} (--baseline none skips it)"
                    )
                })?;
                args.extend(["--baseline".into(), dir.display().to_string()]);
            }
        }
        bench(bin, &args)?;
    }
    Ok(())
}
