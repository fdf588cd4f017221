//! `cargo xtask demo`: runs the demo program of the test crate (it needs the namespace lab
//! the end-to-end tests use).

use std::process::Command;

use anyhow::{bail, Result};

use crate::setup::{root, run, target_dir};

fn cargo() -> Command {
    let mut c = Command::new("cargo");
    c.current_dir(root());
    c
}

pub fn run_demo() -> Result<()> {
    // On a fresh machine these builds take minutes: said first, and with cargo's progress
    // shown, so a silent terminal is never mistaken for a hung demo.
    println!(
        "xtask: building director-ctl (debug) with its XDP object, and the demo; the first \
         build takes several minutes"
    );
    // The binary the demo's lab runs, built here and handed over (DIRECTOR_CTL) so the lab
    // does not build it again, quietly, between the demo's first lines.
    run(cargo().args(["build", "-p", "director-ctl"]))?;
    let ctl = target_dir().join("debug/director-ctl");
    if !ctl.exists() {
        bail!("{} is missing after the build", ctl.display());
    }
    run(cargo().args(["build", "-p", "director-tests", "--bin", "demo"]))?;
    run(cargo()
        .args(["run", "--quiet", "-p", "director-tests", "--bin", "demo"])
        .env("DIRECTOR_CTL", &ctl))
}
