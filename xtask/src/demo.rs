//! `cargo xtask demo`: runs the demo program of the test crate (it needs the namespace lab
//! the end-to-end tests use).

use std::process::Command;

use anyhow::Result;

use crate::setup::{root, run};

pub fn run_demo() -> Result<()> {
    run(Command::new("cargo").current_dir(root()).args([
        "run",
        "--quiet",
        "-p",
        "director-tests",
        "--bin",
        "demo",
    ]))
}
