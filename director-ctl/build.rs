//! Builds the XDP program (see the ebpf-build crate) and hands its path to the crate, which
//! embeds it. Cargo reruns this whenever the program's or the shared crate's sources change,
//! so `cargo build` never ships a stale object.

use std::{env, path::PathBuf};

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let root = manifest
        .parent()
        .expect("director-ctl has a parent")
        .to_path_buf();
    for p in ebpf_build::sources(&root) {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    let target = env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
        .join("ebpf");
    match ebpf_build::build(&root, &target) {
        Ok(obj) => println!("cargo:rustc-env=DIRECTOR_EBPF_OBJ={}", obj.display()),
        Err(e) => panic!("{e}"),
    }
}
