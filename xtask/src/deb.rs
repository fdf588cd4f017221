//! `cargo xtask deb`: the Debian package. Builds director-ctl (the XDP object is embedded by
//! its build script), has the built binary write its man pages and shell completions (from
//! the clap definitions, so they match the binary), then lets cargo-deb assemble the .deb
//! from `[package.metadata.deb]` in director-ctl/Cargo.toml.
//!
//! `--dev` packages the debug build instead of a release one: the package test uses it, so
//! CI, which has already built the debug binary, does not pay for a release build. Such a
//! package is for tests, not for machines.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::setup::{root, run, target_dir};

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root());
    c
}

/// Builds the package into `output` (default: target/debian) and returns its path.
pub fn build(dev: bool, output: Option<&Path>) -> Result<PathBuf> {
    let started = Instant::now();
    let profile_dir = if dev { "debug" } else { "release" };
    let mut b = cargo();
    b.args(["build", "--locked", "-p", "director-ctl"]);
    if !dev {
        b.arg("--release");
    }
    run(&mut b)?;
    let bin = target_dir().join(profile_dir).join("director-ctl");
    if !bin.exists() {
        bail!("{} is missing after the build", bin.display());
    }

    // The assets cargo-deb takes from `target/release/packaging/` (its name for the
    // profile directory), written anew so no page of a removed subcommand stays behind.
    let assets = target_dir().join(profile_dir).join("packaging");
    let _ = std::fs::remove_dir_all(&assets);
    let man = assets.join("man");
    run(Command::new(&bin).arg("man").arg("--dir").arg(&man))?;
    // Debian installs man pages compressed; -n leaves the name and time out, so the same
    // sources give the same bytes.
    let mut pages = Vec::new();
    for entry in std::fs::read_dir(&man).with_context(|| format!("reading {}", man.display()))? {
        pages.push(entry?.path());
    }
    pages.sort();
    if pages.is_empty() {
        bail!("director-ctl man wrote no page into {}", man.display());
    }
    run(Command::new("gzip").args(["-9", "-n", "-f"]).args(&pages))?;
    let completions = assets.join("completions");
    std::fs::create_dir_all(&completions)?;
    // The file names each shell looks for in its vendor directory.
    for (shell, file) in [
        ("bash", "director-ctl"),
        ("zsh", "_director-ctl"),
        ("fish", "director-ctl.fish"),
    ] {
        let out = Command::new(&bin)
            .args(["completions", shell])
            .output()
            .with_context(|| format!("running {} completions {shell}", bin.display()))?;
        if !out.status.success() || out.stdout.is_empty() {
            bail!(
                "director-ctl completions {shell} failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let path = completions.join(file);
        std::fs::write(&path, &out.stdout)
            .with_context(|| format!("writing {}", path.display()))?;
    }

    let output = output.map_or_else(|| target_dir().join("debian"), Path::to_path_buf);
    std::fs::create_dir_all(&output).with_context(|| format!("creating {}", output.display()))?;
    let mut d = cargo();
    d.args(["deb", "-p", "director-ctl", "--no-build", "--locked"])
        .arg("--output")
        .arg(&output);
    if dev {
        // cargo-deb maps `dev` to target/debug (and warns that it is meant for
        // releases); a fast compression, since the unoptimised binary is large and the
        // package is thrown away by the test that made it.
        d.args(["--profile", "dev", "--fast", "--quiet"]);
    }
    let out = d
        .output()
        .context("running cargo deb (cargo xtask setup installs it)")?;
    if !out.status.success() {
        bail!(
            "cargo deb failed with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    // cargo-deb prints the path of the package it wrote as its last line.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let path = stdout
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.ends_with(".deb"))
        .map(PathBuf::from)
        .with_context(|| format!("cargo deb printed no .deb path: {stdout}"))?;
    let bytes = std::fs::metadata(&path)
        .with_context(|| format!("{} (from cargo deb)", path.display()))?
        .len();
    println!(
        "xtask: {} ({:.1} MiB) in {:.1} s",
        path.display(),
        bytes as f64 / (1024.0 * 1024.0),
        started.elapsed().as_secs_f64()
    );
    Ok(path)
}
