//! The bench binaries' command lines: `--flag value` pairs, `-h` for the usage line, and
//! `--only <section>` naming one part of `cargo xtask bench` to run.

use std::fmt::Display;
use std::str::FromStr;

use anyhow::{bail, Context, Result};

/// A part of `cargo xtask bench`; each binary has some of them, and xtask passes `--only`
/// to the binaries that have the section asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Section {
    /// The per-packet cost from BPF_PROG_TEST_RUN (bench, bench_steer).
    Testrun,
    /// Load on a veth between namespaces (bench against knotd, bench_steer's HTTP).
    Wire,
    /// The controller's full-scale compile and change latency (bench_controller).
    Controller,
    /// Health checks at scale (bench_health).
    Health,
    /// A SYN flood to a VIP through each edge while established connections run
    /// (bench_steer).
    Synflood,
}

impl Section {
    pub const ALL: [Section; 5] = [
        Section::Testrun,
        Section::Wire,
        Section::Controller,
        Section::Health,
        Section::Synflood,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Section::Testrun => "testrun",
            Section::Wire => "wire",
            Section::Controller => "controller",
            Section::Health => "health",
            Section::Synflood => "synflood",
        }
    }
}

impl FromStr for Section {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Section> {
        Section::ALL
            .into_iter()
            .find(|v| v.name() == s)
            .with_context(|| {
                let names: Vec<&str> = Section::ALL.iter().map(|v| v.name()).collect();
                format!("--only {s}: one of {}", names.join(", "))
            })
    }
}

/// `--only`'s answer: every section unless one was named.
#[derive(Clone, Copy, Debug, Default)]
pub struct Only(Option<Section>);

impl Only {
    pub fn wants(self, s: Section) -> bool {
        self.0.is_none_or(|only| only == s)
    }
}

/// Walks the process's arguments flag by flag.
pub struct Parser {
    args: std::iter::Skip<std::env::Args>,
    usage: &'static str,
}

impl Parser {
    /// `usage` is printed for `-h`/`--help` and named in the error for an unknown flag.
    pub fn new(usage: &'static str) -> Parser {
        Parser {
            args: std::env::args().skip(1),
            usage,
        }
    }

    /// The next flag; `-h` prints the usage line and exits.
    pub fn next_flag(&mut self) -> Option<String> {
        let flag = self.args.next()?;
        if flag == "-h" || flag == "--help" {
            println!("{}", self.usage);
            std::process::exit(0);
        }
        Some(flag)
    }

    /// The value after `flag`, parsed.
    pub fn value<T>(&mut self, flag: &str) -> Result<T>
    where
        T: FromStr,
        T::Err: Display,
    {
        let v = self
            .args
            .next()
            .with_context(|| format!("{flag} needs a value"))?;
        v.parse().map_err(|e| anyhow::anyhow!("{flag} {v}: {e}"))
    }

    /// A count or a duration, which zero would make meaningless.
    pub fn positive<T>(&mut self, flag: &str) -> Result<T>
    where
        T: FromStr + Default + PartialEq,
        T::Err: Display,
    {
        let v: T = self.value(flag)?;
        if v == T::default() {
            bail!("{flag} must be positive");
        }
        Ok(v)
    }

    /// `--only`'s value, refused unless it is one of the sections this binary `has`.
    pub fn only(&mut self, flag: &str, has: &[Section]) -> Result<Only> {
        let s: Section = self.value(flag)?;
        if !has.contains(&s) {
            let names: Vec<&str> = has.iter().map(|v| v.name()).collect();
            bail!("{flag} {}: this bench has {}", s.name(), names.join(", "));
        }
        Ok(Only(Some(s)))
    }

    /// The error for a flag no arm took.
    pub fn unknown(&self, flag: &str) -> anyhow::Error {
        anyhow::anyhow!("unknown argument {flag}; usage: {}", self.usage)
    }
}
