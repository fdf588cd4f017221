//! `cargo run --release -p director-tests --bin bench -- --seconds N`: how fast director
//! answers, printed as tables (no pass/fail), everything measured in this one run:
//!
//! 1. the XDP program's cost per packet from BPF_PROG_TEST_RUN (passed packets, answers);
//! 2. answers per second on a veth pair between two namespaces, director against knotd
//!    answering the same query, with server CPU time per answer; 2b. director and the
//!    ceiling paced at half and four fifths of the ceiling's rate: what each loses there;
//!    2c. demand counting's cost; 2d. the answer floor (a fixed answer) against the ceiling;
//! 3. which of those figures the load generator limits.
//!
//! Needs root. Everything lives in a lab of namespaces made for this run; the lab's drop
//! removes it, also on a panic. Options: `--seconds N` (per load run, default 5),
//! `--runs N` (default 3), `--packets N` (per test-run measurement, default 1000000),
//! `--generator auto|kxdpgun|dnsperf` (default auto: kxdpgun, dnsperf if it cannot run),
//! `--only testrun` (section 1 alone: minutes shorter when only the program changed) or
//! `--only wire` (sections 2 and 3),
//! `--baseline DIR` (section 1b: issue 8's starting program, built in DIR by
//! `cargo xtask bench`, measured in turns with today's),
//! `--uncounted OBJECT` (the program built without demand counting, which `cargo xtask
//! bench` builds: measured in turns with today's in section 1, and on the wire in 2c).

mod baseline;
mod observer;
mod testrun;
mod wire;

use std::time::Instant;

use anyhow::{bail, Result};
use director_tests::bench::args::{Only, Parser, Section};
use director_tests::bench::sys;
use director_tests::netns::Lab;

use wire::{Generator, Load, Pace, Server};

/// The service both servers answer for, and the address both answer with.
pub const NAME: &str = "www.example.com";
pub const FRA_V4: &str = "198.51.100.10";
pub const FRA_V6: &str = "2001:db8:f::10";

struct Args {
    seconds: u32,
    runs: usize,
    packets: u32,
    generator: Option<Generator>,
    only: Only,
    baseline: Option<baseline::Baseline>,
    uncounted: Option<std::path::PathBuf>,
    floor: Option<std::path::PathBuf>,
}

fn args() -> Result<Args> {
    let mut a = Args {
        seconds: 5,
        runs: 3,
        packets: 1_000_000,
        generator: None,
        only: Only::default(),
        baseline: None,
        uncounted: None,
        floor: None,
    };
    let mut p = Parser::new(
        "bench [--seconds N] [--runs N] [--packets N] [--generator auto|kxdpgun|dnsperf] \
         [--only testrun|wire] [--baseline DIR] [--uncounted OBJECT] [--floor OBJECT]",
    );
    while let Some(flag) = p.next_flag() {
        match flag.as_str() {
            "--seconds" => a.seconds = p.positive(&flag)?,
            "--runs" => a.runs = p.positive(&flag)?,
            "--packets" => a.packets = p.positive(&flag)?,
            "--generator" => {
                a.generator = match p.value::<String>(&flag)?.as_str() {
                    "auto" => None,
                    "kxdpgun" => Some(Generator::Kxdpgun),
                    "dnsperf" => Some(Generator::Dnsperf),
                    other => bail!("--generator {other}: auto, kxdpgun or dnsperf"),
                }
            }
            "--only" => a.only = p.only(&flag, &[Section::Testrun, Section::Wire])?,
            "--baseline" => {
                a.baseline = Some(baseline::Baseline {
                    dir: p.value(&flag)?,
                });
            }
            "--uncounted" => a.uncounted = Some(p.value(&flag)?),
            "--floor" => a.floor = Some(p.value(&flag)?),
            other => return Err(p.unknown(other)),
        }
    }
    Ok(a)
}

fn main() -> Result<()> {
    let a = args()?;
    let start = Instant::now();
    sys::require_two_cpus("the generator and the server")?;
    // The lab runs director-ctl from a debug build it makes (or $DIRECTOR_CTL): say so, as
    // that build waits for cargo's lock while another cargo command holds it.
    eprintln!("building director-ctl for the lab (cargo build -p director-ctl, or $DIRECTOR_CTL)");
    // Before any lab exists: a lab whose drop cannot run director-ctl cannot clean up.
    if std::panic::catch_unwind(director_tests::netns::ctl_binary).is_err() {
        bail!("no director-ctl to run (see the build error above)");
    }
    eprintln!("setting up the lab (namespaces, director, knotd)");
    let mut lab = Lab::new();
    let (edge_ns, edge_if) = (lab.edge_ns.clone(), lab.edge_if.clone());
    let opts = testrun::Options {
        packets: a.packets,
        runs: a.runs,
        edge_ns,
        edge_if,
        uncounted: a.uncounted.clone(),
    };
    let beside = |opts: &testrun::Options| -> Result<()> {
        if let Some(b) = &a.baseline {
            baseline::compare(b, opts)?.print();
        }
        Ok(())
    };
    if !a.only.wants(Section::Wire) {
        // As wire::prepare does: live frames sent out of the edge veth need its peer's XDP.
        lab.attach();
        testrun::run(&opts)?.print();
        beside(&opts)?;
        observer::run(a.packets, a.runs)?.print();
        drop(lab);
        println!("\n(bench took {:.0} s)", start.elapsed().as_secs_f64());
        return Ok(());
    }
    let w = wire::prepare(&mut lab)?;

    if a.only.wants(Section::Testrun) {
        testrun::run(&opts)?.print();
        beside(&opts)?;
        observer::run(a.packets, a.runs)?.print();
    }

    let mut gen = a.generator.unwrap_or(Generator::Kxdpgun);
    let mut log = String::new();
    // director and the ceiling take turns, one run each, so that load from the rest of a
    // shared machine falls on both alike (in blocks, their ratio swung from 1.0 to 1.3
    // between bench runs); Knot's runs come last, as they remove director's service.
    let max = Load {
        seconds: a.seconds,
        pace: Pace::Max,
    };
    let auto = a.generator.is_none();
    let (director, ceiling) = w.turns(&mut gen, auto, max, a.runs, &mut log)?;
    // The same two paced below what the ceiling answered: how much director loses where
    // the setup itself loses nothing (before knot's runs: they remove the service).
    let ceiling_rate = wire::Point::of(Server::Ceiling, &ceiling).answers_median();
    let mut paced = Vec::new();
    for share in wire::PACED_SHARES {
        let load = Load {
            seconds: a.seconds,
            pace: Pace::Qps((share * ceiling_rate) as u64),
        };
        let (d, c) = w.turns(&mut gen, false, load, a.runs, &mut log)?;
        paced.push(wire::Paced {
            share,
            director: wire::Point::of(Server::Director, &d),
            ceiling: wire::Point::of(Server::Ceiling, &c),
        });
    }
    // Before knot's runs too (they remove the service).
    let counting = match &a.uncounted {
        Some(u) => Some(w.counting_turns(u, &mut gen, max, a.runs, &mut log)?),
        None => None,
    };
    let floor = match &a.floor {
        Some(f) => Some(w.floor_turns(f, &mut gen, max, a.runs, &mut log)?),
        None => None,
    };
    let knot = w.samples(Server::Knot, &mut gen, auto, max, a.runs, &mut log)?;
    let points = [
        wire::Point::of(Server::Director, &director),
        wire::Point::of(Server::Knot, &knot),
        wire::Point::of(Server::Ceiling, &ceiling),
    ];
    let turns = wire::turn_ratios(&director, &ceiling);
    wire::table(&points, &turns, gen, a.seconds, a.runs, &log).print();
    wire::limits(&points, gen).print();
    wire::paced_table(&paced, gen).print();
    if let Some((with, without)) = &counting {
        wire::counting_table(with, without, gen).print();
    }
    if let Some((floor, ceiling)) = &floor {
        wire::floor_table(floor, ceiling, &turns, gen).print();
    }
    drop(w);
    drop(lab);
    println!("\n(bench took {:.0} s)", start.elapsed().as_secs_f64());
    Ok(())
}
