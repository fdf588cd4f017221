//! Fresh-machine set-up: Debian packages the tests use, the nightly rust-src component,
//! bpf-linker built against nightly's own LLVM, and cargo-deb (the package and its test).
//! Each step checks first, so a second run does nothing.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context, Result};

/// Debian packages and a command each provides (to check without dpkg), or a file (an
/// absolute path) for a package without a command.
const PACKAGES: &[(&str, &str)] = &[
    ("dnsutils", "dig"),
    ("knot-dnsutils", "kdig"),
    ("knot", "knotd"),
    ("iproute2", "ip"),
    ("bpftool", "bpftool"),
    ("ethtool", "ethtool"),
    ("dnsperf", "dnsperf"),
    ("unbound", "unbound"),
    // The health tests' real HTTP servers.
    ("nginx-light", "nginx"),
    ("curl", "curl"),
    // Checks the zone `director-ctl zone export` writes.
    ("knot-dnssecutils", "kzonecheck"),
    // Checks the signatures `director-ctl dnssec dump` writes, with time moved on.
    ("ldnsutils", "ldns-verify-zone"),
    // SYN steering: the tests' capture of what reaches the edge, and the bench's peers
    // (an nftables DNAT balancer, a userspace TCP proxy) and load.
    ("tcpdump", "tcpdump"),
    ("iputils-ping", "ping"),
    ("nftables", "nft"),
    ("haproxy", "haproxy"),
    ("wrk", "wrk"),
    // The wire bench's split of the edge's CPU: the XDP program's own share (perf record).
    ("linux-perf", "perf"),
    // The fleet tests' store: a three-member cluster in a namespace (tests/src/fleet.rs).
    ("etcd-server", "etcd"),
    ("etcd-client", "etcdctl"),
    // The router lab's BGP speakers that send BMP (tests/src/routers.rs): FRR's bgpd (in
    // /usr/lib/frr, with its bmp module) and GoBGP (injectors, and a router of its own).
    ("frr", "vtysh"),
    ("gobgpd", "gobgpd"),
    // director-ctl's etcd client (etcd-client, tonic) compiles etcd's .proto files.
    ("protobuf-compiler", "protoc"),
    // ...and the well-known types they import, which protoc only recommends (and so
    // `--no-install-recommends` leaves out): a path, checked as a file.
    (
        "libprotobuf-dev",
        "/usr/include/google/protobuf/descriptor.proto",
    ),
    // The map page's test drives a real browser over WebDriver (tests/src/browser.rs).
    ("chromium", "chromium"),
    ("chromium-driver", "chromedriver"),
    // The Debian package (tests/tests/package.rs): cargo-deb computes Depends with
    // dpkg-shlibdeps; systemd-analyze verifies the unit, asking man for its Documentation=
    // pages; the unit reloads with procps's kill. Debian's base image has them all.
    ("dpkg-dev", "dpkg-shlibdeps"),
    ("systemd", "systemd-analyze"),
    ("man-db", "man"),
    ("procps", "pkill"),
    // ...but not lintian, whose errors (Debian policy) fail the package test.
    ("lintian", "lintian"),
];

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The cargo target directory cargo itself uses (CARGO_TARGET_DIR, else target/ in the
/// workspace); cargo-deb resolves it the same way.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"))
}

/// A command on PATH (or in /usr/sbin), or a file when given as an absolute path.
fn have(cmd: &str) -> bool {
    if cmd.starts_with('/') {
        return Path::new(cmd).exists();
    }
    Command::new("sh")
        .args([
            "-c",
            &format!("command -v {cmd} || test -x /usr/sbin/{cmd}"),
        ])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

pub fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("running {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed with {status}");
    }
    Ok(())
}

fn output(cmd: &mut Command) -> Result<String> {
    let o = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !o.status.success() {
        bail!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

pub fn packages() -> Result<()> {
    let missing: Vec<&str> = PACKAGES
        .iter()
        .filter(|(_, c)| !have(c))
        .map(|(p, _)| *p)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    println!("xtask: installing Debian packages: {}", missing.join(" "));
    run(Command::new("apt-get").args(["update", "-qq"]))?;
    // The tests start knotd, unbound, nginx and etcd themselves, in namespaces: the packages' own
    // services must not start (unbound's would fetch the root trust anchor from the
    // Internet). policy-rc.d says so to invoke-rc.d; one already there is left alone.
    let policy = Path::new("/usr/sbin/policy-rc.d");
    let ours = !policy.exists();
    if ours {
        std::fs::write(
            policy,
            "#!/bin/sh\n# xtask setup: no services while installing\nexit 101\n",
        )
        .context("writing /usr/sbin/policy-rc.d")?;
        run(Command::new("chmod").args(["755", "/usr/sbin/policy-rc.d"]))?;
    }
    let r = run(Command::new("apt-get")
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive"));
    if ours {
        let _ = std::fs::remove_file(policy);
    }
    r
}

/// Adds the rustup components a toolchain lacks.
fn components(toolchain: &str, wanted: &[&str]) -> Result<()> {
    let installed = output(Command::new("rustup").args([
        "component",
        "list",
        "--toolchain",
        toolchain,
        "--installed",
    ]))
    .with_context(|| format!("the {toolchain} toolchain is needed"))?;
    for c in wanted {
        if !installed.lines().any(|l| l.starts_with(c)) {
            println!("xtask: adding {c} to the {toolchain} toolchain");
            run(Command::new("rustup").args(["component", "add", c, "--toolchain", toolchain]))?;
        }
    }
    Ok(())
}

fn toolchain() -> Result<()> {
    // rust-src builds core for the BPF target; clippy and rustfmt are what `lint` runs.
    components("nightly", &["rust-src", "clippy", "rustfmt"])?;
    let stable = output(Command::new("rustup").args(["show", "active-toolchain"]))?;
    let stable = stable
        .split_whitespace()
        .next()
        .unwrap_or("stable")
        .to_string();
    components(&stable, &["clippy", "rustfmt"])?;
    // bpf-linker loads nightly's libLLVM at run time, which only a nightly environment
    // puts on the library path (rustc runs it in one): check it the same way.
    if Command::new("rustup")
        .args(["run", "nightly", "bpf-linker", "--version"])
        .env_remove("RUSTUP_TOOLCHAIN")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return Ok(());
    }
    // bpf-linker must use the same LLVM as nightly rustc; no system LLVM of that version
    // exists here, so it links against the library nightly ships.
    let vv = output(Command::new("rustc").args(["+nightly", "-vV"]))?;
    let major = vv
        .lines()
        .find_map(|l| l.strip_prefix("LLVM version: "))
        .and_then(|v| v.split('.').next())
        .context("rustc +nightly -vV printed no LLVM version")?
        .to_string();
    let sysroot = PathBuf::from(
        output(Command::new("rustc").args(["+nightly", "--print", "sysroot"]))?.trim(),
    );
    let lib = std::fs::read_dir(sysroot.join("lib"))?
        .filter_map(std::result::Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name().is_some_and(|n| {
                n.to_string_lossy()
                    .starts_with(&format!("libLLVM.so.{major}"))
            })
        })
        .with_context(|| {
            format!(
                "no libLLVM.so.{major}* in {}",
                sysroot.join("lib").display()
            )
        })?;
    let prefix = root().join("target/llvm-prefix");
    std::fs::create_dir_all(prefix.join("lib"))?;
    let link = prefix.join("lib/libLLVM.so");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&lib, &link)?;
    println!("xtask: building bpf-linker against nightly's LLVM {major} (about a minute)");
    run(Command::new("cargo")
        .args([
            "install",
            "bpf-linker",
            "--version",
            "0.13.0",
            "--locked",
            "--no-default-features",
        ])
        .args(["--features", &format!("llvm-{major}")])
        .env("LLVM_PREFIX", &prefix))
}

/// Builds the XDP object as director-ctl's build script does (the same function), and
/// returns its path.
pub fn build_ebpf() -> Result<PathBuf> {
    toolchain()?;
    ebpf_build::build(&root(), &root().join("target/ebpf")).map_err(anyhow::Error::msg)
}

/// cargo-deb, which `cargo xtask deb` and the package test build the .deb with. The version
/// is pinned: `deb --dev` packages the debug build, which cargo-deb only warns about today.
const CARGO_DEB: &str = "3.8.0";

pub fn cargo_deb() -> Result<()> {
    let have = Command::new("cargo")
        .args(["deb", "--version"])
        .output()
        .is_ok_and(|o| {
            o.status.success()
                && String::from_utf8_lossy(&o.stdout).trim() == format!("cargo-deb {CARGO_DEB}")
        });
    if have {
        return Ok(());
    }
    println!("xtask: installing cargo-deb {CARGO_DEB} (about a minute)");
    run(Command::new("cargo").args(["install", "cargo-deb", "--version", CARGO_DEB, "--locked"]))
}

pub fn all() -> Result<()> {
    packages()?;
    build_ebpf()?;
    cargo_deb()?;
    Ok(())
}

/// Formatting and lints, as CI checks them (after the layer check, which main runs first):
/// rustfmt on both workspaces, clippy on the workspace (every target) and on the XDP program
/// for the BPF target (with every feature, so the bench's twins too), warnings denied.
pub fn lint() -> Result<()> {
    let cargo =
        |dir: PathBuf, args: &[&str]| run(Command::new("cargo").current_dir(dir).args(args));
    cargo(root(), &["fmt", "--all", "--check"])?;
    cargo(
        root(),
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
    )?;
    // director-ebpf is its own workspace on nightly; its toolchain file picks nightly.
    run(Command::new("rustup")
        .current_dir(root().join("director-ebpf"))
        .args(["run", "nightly", "cargo", "fmt", "--check"])
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("CARGO"))?;
    run(Command::new("rustup")
        .current_dir(root().join("director-ebpf"))
        .args(["run", "nightly", "cargo", "clippy", "--release", "--locked"])
        .args(["--all-features", "-Z", "build-std=core"])
        .args(["--target", "bpfel-unknown-none"])
        .args([
            "--target-dir",
            "../target/ebpf-clippy",
            "--",
            "-D",
            "warnings",
        ])
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("CARGO")
        .env_remove("RUSTC"))
}

pub fn run_tests() -> Result<()> {
    // Tests that load programs and make namespaces need root; run them one at a time so a
    // failure's output is readable and namespaces never compete for the CPU.
    run(Command::new("cargo").current_dir(root()).args([
        "test",
        "--workspace",
        "--",
        "--test-threads=1",
    ]))
}
