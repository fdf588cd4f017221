//! Builds the XDP object from director-ebpf: the nightly toolchain, `-Z build-std=core`,
//! `--target bpfel-unknown-none`, director-ebpf's own lock file. director-ctl's build script
//! (which embeds the object) and `cargo xtask build-ebpf` both call [`build`], so the object
//! is built one way whichever asked for it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What the object is built from: a build script reruns when one of these changes.
pub fn sources(workspace: &Path) -> Vec<PathBuf> {
    let ebpf = workspace.join("director-ebpf");
    let common = workspace.join("director-common");
    vec![
        ebpf.join("src"),
        ebpf.join("Cargo.toml"),
        ebpf.join("Cargo.lock"),
        common.join("src"),
        common.join("Cargo.toml"),
    ]
}

/// Whether an outer cargo's variable must be kept from the nightly build: its toolchain,
/// flags and package settings belong to the stable build that runs this.
fn inherited_setting(name: &str) -> bool {
    (name.starts_with("CARGO_") && name != "CARGO_HOME")
        || name == "CARGO"
        || name.starts_with("RUSTC")
        || name.starts_with("RUSTUP_TOOLCHAIN")
        || name == "RUSTFLAGS"
        || name == "RUSTDOC"
}

/// Builds the object under `target_dir` (not the calling cargo's own target directory:
/// that cargo holds its lock) and returns its path.
pub fn build(workspace: &Path, target_dir: &Path) -> Result<PathBuf, String> {
    build_with(workspace, target_dir, &[])
}

/// [`build`] with director-ebpf's cargo `features` (the bench's variants); each set of
/// features wants its own `target_dir`, or the builds would replace each other's object.
pub fn build_with(
    workspace: &Path,
    target_dir: &Path,
    features: &[&str],
) -> Result<PathBuf, String> {
    let mut cmd = Command::new("rustup");
    cmd.args(["run", "nightly", "cargo", "build", "--release", "--locked"])
        .args(["-Z", "build-std=core", "--target", "bpfel-unknown-none"])
        .arg("--target-dir")
        .arg(target_dir)
        .current_dir(workspace.join("director-ebpf"));
    if !features.is_empty() {
        cmd.arg("--features").arg(features.join(","));
    }
    let inherited: Vec<OsString> = std::env::vars_os()
        .map(|(k, _)| k)
        .filter(|k| inherited_setting(&k.to_string_lossy()))
        .collect();
    for k in inherited {
        cmd.env_remove(k);
    }
    let status = cmd.status().map_err(|e| {
        format!("could not run `rustup run nightly cargo` to build the XDP program: {e}")
    })?;
    if !status.success() {
        return Err(format!(
            "building the XDP program failed ({status}; see above). On a fresh machine run \
             `cargo xtask build-ebpf` once: it installs rust-src for nightly and bpf-linker."
        ));
    }
    Ok(target_dir.join("bpfel-unknown-none/release/director"))
}
