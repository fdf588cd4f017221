//! Developer commands: `cargo xtask build-ebpf | setup | lint | test | demo | bench`.

mod bench;
mod demo;
mod layers;
mod setup;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install the eBPF toolchain if missing (rust-src, bpf-linker) and build the XDP object.
    BuildEbpf,
    /// Everything a fresh machine needs: Debian packages and the eBPF toolchain.
    Setup,
    /// The layer check (ARCHITECTURE.md's rules, no import cycles), then rustfmt and
    /// clippy (warnings denied) on both workspaces, as CI runs them.
    Lint,
    /// Set up, lint, then run every test (unit, BPF_PROG_TEST_RUN fixtures, namespaces).
    Test,
    /// Set up, then show director answering real dig queries in its own namespaces.
    Demo,
    /// Set up, then print per-packet cost and on-the-wire answer rates against knot.
    Bench {
        /// Seconds per load run.
        #[arg(long, default_value_t = 5)]
        seconds: u32,
        /// The commit whose program the per-answer cost is set beside (built once, into
        /// target/baseline/); "none" skips it.
        #[arg(long, default_value = bench::ISSUE8_START)]
        baseline: String,
        /// One section alone: testrun (per-packet cost from BPF_PROG_TEST_RUN, of bench and
        /// bench_steer), wire (load on a veth), controller or health.
        #[arg(long, value_parser = bench::SECTIONS)]
        only: Option<String>,
    },
}

fn main() {
    let cli = Cli::parse();
    let r: Result<()> = match cli.cmd {
        Cmd::BuildEbpf => setup::build_ebpf().map(|p| println!("XDP object: {}", p.display())),
        Cmd::Setup => setup::all(),
        Cmd::Lint => setup::all()
            .and_then(|_| layers::check())
            .and_then(|_| setup::lint()),
        Cmd::Test => setup::all()
            .and_then(|_| layers::check())
            .and_then(|_| setup::lint())
            .and_then(|_| setup::run_tests()),
        Cmd::Demo => setup::all().and_then(|_| demo::run_demo()),
        Cmd::Bench {
            seconds,
            baseline,
            only,
        } => setup::all().and_then(|_| {
            let rev = (baseline != "none").then_some(baseline.as_str());
            bench::run_bench(seconds, rev, only.as_deref())
        }),
    };
    if let Err(e) = r {
        eprintln!("xtask: {e:#}");
        std::process::exit(1);
    }
}
