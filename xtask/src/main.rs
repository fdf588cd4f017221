//! Developer commands: `cargo xtask build-ebpf | setup | lint | test | demo | bench | deb`.

mod bench;
mod deb;
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
    /// Everything a fresh machine needs: Debian packages, the eBPF toolchain and cargo-deb.
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
    /// Build the Debian package (director-ctl with the XDP object, the director service,
    /// /etc/director/director.toml, man pages, completions) into target/debian.
    Deb {
        /// Package the debug build (for the package test; not for machines).
        #[arg(long)]
        dev: bool,
        /// Write the .deb into this directory instead.
        #[arg(long)]
        output: Option<std::path::PathBuf>,
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
        // The eBPF toolchain (director-ctl's build script needs it) and cargo-deb; not the
        // test packages.
        Cmd::Deb { dev, output } => setup::build_ebpf()
            .and_then(|_| setup::cargo_deb())
            .and_then(|_| deb::build(dev, output.as_deref()))
            .map(|_| ()),
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
