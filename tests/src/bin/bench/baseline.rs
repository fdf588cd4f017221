//! Section 1b: today's program beside the one issue 8 started from, by the same method
//! (`repeat = 1` calls, the empty program's floor subtracted) and in turns, one
//! measurement each, which goes first alternating, so that the shared machine's load falls
//! on both alike.
//!
//! The starting program's maps have other layouts, so it is measured by its own bench
//! (`bench --only testrun`, built from that commit by `cargo xtask bench`), whose rows
//! are labelled as ours are.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};

use crate::testrun::{self, ANSWERS};
use director_tests::bench::table::{thousands, Spread, Table};

/// Where the starting commit was built: its release `bench` and `director-ctl`, and a
/// `REV` file naming the commit.
pub struct Baseline {
    pub dir: PathBuf,
}

/// The aim: at most this share of the starting program's cost per answer.
const AIM: f64 = 2.0 / 3.0;

/// Turns at least, whatever `--runs` says. Each turn loads both programs afresh, and where
/// a load lands matters: the same object loaded four times in one process measured up to
/// 5 % apart, steadily (JIT image and map placement). More loads average that out.
const MIN_TURNS: usize = 5;

struct Old {
    net: [f64; 3],
    insns: Option<u64>,
}

impl Baseline {
    fn rev(&self) -> String {
        std::fs::read_to_string(self.dir.join("REV"))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown commit".into())
    }

    fn run(&self, packets: u32) -> Result<Old> {
        let bin = self.dir.join("bench");
        let out = Command::new(&bin)
            .args(["--only", "testrun", "--runs", "1", "--packets"])
            .arg(packets.to_string())
            .env("DIRECTOR_CTL", self.dir.join("director-ctl"))
            .output()
            .with_context(|| format!("running {}", bin.display()))?;
        let text = String::from_utf8_lossy(&out.stdout);
        ensure!(
            out.status.success(),
            "{} failed: {}{}",
            bin.display(),
            text,
            String::from_utf8_lossy(&out.stderr)
        );
        parse(&text).with_context(|| format!("reading {}'s table:\n{text}", bin.display()))
    }
}

/// The starting bench's "minus floor" for each answer by `repeat=1, N calls`, and its
/// verifier count.
fn parse(text: &str) -> Result<Old> {
    let mut net = [f64::NAN; 3];
    for line in text.lines().map(str::trim) {
        let Some(i) = ANSWERS
            .iter()
            .position(|a| line.starts_with(&format!("{a} ")))
        else {
            continue;
        };
        if !line.contains("repeat=1, N calls") {
            continue;
        }
        let last = line.split_whitespace().last().unwrap_or_default();
        net[i] = last
            .parse()
            .with_context(|| format!("the net figure {last:?} of {line:?}"))?;
    }
    if net.iter().any(|v| v.is_nan()) {
        bail!("not every answer row was found");
    }
    let insns = text
        .split("Verifier: ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.replace(',', "").parse().ok());
    Ok(Old { net, insns })
}

pub fn compare(b: &Baseline, o: &testrun::Options) -> Result<Table> {
    let (mut old, mut new) = (Vec::new(), Vec::new());
    let (mut insns_old, mut insns_now) = (None, None);
    let turns = o.runs.max(MIN_TURNS);
    for run in 0..turns {
        eprintln!(
            "section 1b: the starting program and today's, turn {}",
            run + 1
        );
        // Which goes first alternates, so that neither always runs on a machine the other
        // has just warmed (or loaded).
        let order = if run % 2 == 1 {
            [true, false]
        } else {
            [false, true]
        };
        for ours in order {
            if ours {
                let (net, insns) = testrun::answers_net(o)?;
                insns_now = insns;
                new.push(net);
            } else {
                let r = b.run(o.packets)?;
                insns_old = r.insns;
                old.push(r.net);
            }
        }
    }
    let mut t = Table::new(
        format!(
            "1b. Per answer, today's program beside issue 8's starting one (commit {}, built \
             by its own bench): repeat=1 over N = {} calls, floor subtracted, {} turns each.",
            b.rev(),
            thousands(o.packets as u64),
            turns
        ),
        &[
            "packet (EDNS queries)",
            "start ns",
            "now ns",
            "now / start",
            "aim",
            "met",
        ],
    );
    for (i, label) in ANSWERS.iter().enumerate() {
        let of = |v: &[[f64; 3]]| Spread::of(&v.iter().map(|r| r[i]).collect::<Vec<_>>());
        let (s, n) = (of(&old).median, of(&new).median);
        let ratio = n / s;
        t.row(vec![
            (*label).into(),
            format!("{s:.1}"),
            format!("{n:.1}"),
            format!("{ratio:.2}"),
            format!("<= {AIM:.2}"),
            if ratio <= AIM { "yes" } else { "no" }.into(),
        ]);
    }
    let count = |v: Option<u64>| v.map_or("unknown".into(), thousands);
    t.note(format!(
        "verified instructions: start {}, now {} (the later issues' address checks, health, \
         CNAME answers, RRL and steering are in today's count).",
        count(insns_old),
        count(insns_now.map(u64::from))
    ));
    t.note(format!(
        "the starting program ran from {} (cargo xtask bench builds it there).",
        Path::new(&b.dir).display()
    ));
    Ok(t)
}
