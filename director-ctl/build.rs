//! Builds the XDP program (nightly, bpfel-unknown-none) and hands its path to the crate,
//! which embeds it. Cargo reruns this whenever the program's or the shared crate's sources
//! change, so `cargo build` never ships a stale object.

use std::{env, path::PathBuf, process::Command};

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest.parent().unwrap().to_path_buf();
    let ebpf = root.join("director-ebpf");
    for p in ["src", "Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", ebpf.join(p).display());
    }
    for p in ["src", "Cargo.toml"] {
        println!(
            "cargo:rerun-if-changed={}",
            root.join("director-common").join(p).display()
        );
    }
    // A separate target dir: the outer cargo holds the lock on the workspace's.
    let target = env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
        .join("ebpf");

    let mut cmd = Command::new("rustup");
    cmd.args(["run", "nightly", "cargo", "build", "--release", "--locked"])
        .args(["-Z", "build-std=core", "--target", "bpfel-unknown-none"])
        .arg("--target-dir")
        .arg(&target)
        .current_dir(&ebpf);
    // The outer (stable) build's settings must not leak into the nightly BPF build.
    for (k, _) in env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if k.starts_with("CARGO_") && k != "CARGO_HOME"
            || k.starts_with("RUSTC")
            || k.starts_with("RUSTUP_TOOLCHAIN")
            || k == "RUSTFLAGS"
            || k == "RUSTDOC"
        {
            cmd.env_remove(&k);
        }
    }
    let status = cmd.status().unwrap_or_else(|e| {
        panic!("could not run `rustup run nightly cargo` to build the XDP program: {e}")
    });
    if !status.success() {
        panic!(
            "building the XDP program failed (see above). On a fresh machine run \
             `cargo xtask build-ebpf` once: it installs rust-src for nightly and bpf-linker."
        );
    }
    let obj = target.join("bpfel-unknown-none/release/director");
    println!("cargo:rustc-env=DIRECTOR_EBPF_OBJ={}", obj.display());
}
