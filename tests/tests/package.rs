//! The Debian package (`cargo xtask deb`, docs/install.md): built from the debug binary
//! (`--dev`, so CI pays for no release build), its control fields and contents read back
//! with dpkg-deb, its unit checked by `systemd-analyze verify`, and the package extracted
//! into a throw-away root whose `director-ctl` is run from there; lintian finds no error in
//! it (Debian policy). And the unit's
//! capabilities, tried: `run` with exactly them attaches and answers in a lab, and
//! without any one of them it fails.
//!
//! Run as root: `cargo test -p director-tests --test package -- --test-threads=1`.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use director_tests::netns::{ctl_binary, describe, workspace_root, Lab, EDGE_V4};
use director_tests::tempdir::TempDir;

/// The workspace's version, which the package and the binary must both carry.
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Files of the package every install needs (paths as `dpkg-deb -c` prints them, less "./").
const FILES: &[&str] = &[
    "usr/bin/director-ctl",
    "usr/lib/systemd/system/director.service",
    "etc/director/director.toml",
    "etc/default/director",
    "usr/share/man/man1/director-ctl.1.gz",
    "usr/share/man/man1/director-ctl-run.1.gz",
    "usr/share/man/man1/director-ctl-check.1.gz",
    "usr/share/man/man1/director-ctl-server-add.1.gz",
    "usr/share/bash-completion/completions/director-ctl",
    "usr/share/zsh/vendor-completions/_director-ctl",
    "usr/share/fish/vendor_completions.d/director-ctl.fish",
    // Debian policy: every package has a copyright file, and a non-native one (0.1.0-1)
    // its Debian changelog.
    "usr/share/doc/director/copyright",
    "usr/share/doc/director/changelog.Debian.gz",
    "usr/share/doc/director/README.md",
    "usr/share/doc/director/install.md",
    "usr/share/doc/director/config.md",
];

fn output(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("starting {cmd:?}: {e}"))
}

fn ok(cmd: &mut Command) -> String {
    let out = output(cmd);
    assert!(out.status.success(), "{cmd:?}: {}", describe(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `cargo xtask deb --dev --output DIR`: the package of the debug build, as CI makes it.
fn build_package(out: &Path) -> PathBuf {
    // The binary the package takes is the one every other test runs, fresh.
    ctl_binary();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let started = Instant::now();
    let stdout = ok(Command::new(cargo)
        .current_dir(workspace_root())
        .args([
            "run", "--quiet", "-p", "xtask", "--", "deb", "--dev", "--output",
        ])
        .arg(out));
    eprintln!(
        "package built in {:.1} s: {}",
        started.elapsed().as_secs_f64(),
        stdout.trim()
    );
    let debs: Vec<PathBuf> = std::fs::read_dir(out)
        .expect("the output directory")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "deb"))
        .collect();
    assert_eq!(debs.len(), 1, "packages in {}: {debs:?}", out.display());
    debs.into_iter().next().expect("one package")
}

/// A control field of the package.
fn field(deb: &Path, name: &str) -> String {
    ok(Command::new("dpkg-deb").arg("-f").arg(deb).arg(name))
        .trim()
        .to_string()
}

/// A gzipped file's text.
fn gunzip(path: &Path) -> String {
    let out = ok(Command::new("gzip").arg("-dc").arg(path));
    assert!(!out.is_empty(), "{} is empty", path.display());
    out
}

/// lintian's report on the package, failing on an error (an `E:` line: Debian policy
/// broken); warnings are printed, not failed on.
fn lintian(deb: &Path) {
    let out = output(Command::new("lintian").arg(deb));
    let report = String::from_utf8_lossy(&out.stdout);
    eprintln!("lintian:\n{report}");
    let errors: Vec<&str> = report.lines().filter(|l| l.starts_with("E:")).collect();
    assert!(errors.is_empty(), "lintian errors:\n{}", errors.join("\n"));
    // 1 is its exit for errors; anything else is lintian itself failing.
    assert!(out.status.success(), "lintian: {}", describe(&out));
}

/// `systemd-analyze verify` of the unit inside the extracted root: the ExecStart binary
/// and the man pages of Documentation= must resolve there. A unit needs systemd's own
/// targets (its default dependencies) and the reload's /bin/kill, which every Debian
/// system has and the package rightly does not ship: they are copied from this host's.
fn verify_unit(root: &Path) -> Output {
    let units = root.join("usr/lib/systemd/system");
    for entry in std::fs::read_dir("/lib/systemd/system").expect("the host's systemd units") {
        let path = entry.expect("a unit").path();
        if path.extension().is_some_and(|x| x == "target") {
            let to = units.join(path.file_name().expect("a name"));
            // Resolved: some targets are links to others.
            if let Ok(text) = std::fs::read(&path) {
                std::fs::write(&to, text).expect("copying a target");
            }
        }
    }
    let bin = root.join("usr/bin");
    std::fs::copy("/usr/bin/kill", bin.join("kill")).expect("copying kill");
    // /bin is /usr/bin on Debian 12 (merged /usr).
    let _ = std::os::unix::fs::symlink("usr/bin", root.join("bin"));
    output(
        Command::new("systemd-analyze")
            .arg("verify")
            .arg(format!("--root={}", root.display()))
            .arg("director.service")
            // systemd-analyze checks the man pages with man(1), which must look in the root.
            .env("MANPATH", root.join("usr/share/man")),
    )
}

#[test]
fn the_package_installs_a_working_controller_unit_config_man_pages_and_completions() {
    let work = TempDir::new("director-package", "build");
    let deb = build_package(&work.path("out"));
    let size = std::fs::metadata(&deb).expect("the package").len();
    eprintln!("{}: {size} bytes", deb.display());

    // Control fields.
    assert_eq!(field(&deb, "Package"), "director");
    assert_eq!(field(&deb, "Version"), format!("{VERSION}-1"));
    let arch = ok(Command::new("dpkg").arg("--print-architecture"));
    assert_eq!(field(&deb, "Architecture"), arch.trim());
    assert_eq!(field(&deb, "Section"), "net");
    let depends = field(&deb, "Depends");
    for dep in ["libc6", "procps"] {
        assert!(depends.contains(dep), "Depends lacks {dep}: {depends}");
    }
    assert!(
        !field(&deb, "Maintainer").is_empty(),
        "the package names no maintainer"
    );

    // Contents.
    let listing = ok(Command::new("dpkg-deb").arg("-c").arg(&deb));
    let files: BTreeSet<String> = listing
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .map(|p| p.trim_start_matches("./").to_string())
        .collect();
    let missing: Vec<&&str> = FILES.iter().filter(|f| !files.contains(**f)).collect();
    assert!(
        missing.is_empty(),
        "the package lacks {missing:?}:\n{listing}"
    );
    let pages = files
        .iter()
        .filter(|f| f.starts_with("usr/share/man/man1/director-ctl") && f.ends_with(".1.gz"))
        .count();
    assert!(pages > 20, "only {pages} man pages:\n{listing}");
    assert!(
        !files.contains("usr/share/man/man1/director-ctl-man.1.gz"),
        "the hidden man command got a page"
    );
    let binary = listing
        .lines()
        .find(|l| l.ends_with("./usr/bin/director-ctl"))
        .expect("the binary's line");
    assert!(binary.starts_with("-rwxr-xr-x"), "{binary}");

    // Conffiles: the config and the defaults file survive upgrades.
    let control = work.path("control");
    ok(Command::new("dpkg-deb").arg("-e").arg(&deb).arg(&control));
    let conffiles = std::fs::read_to_string(control.join("conffiles")).expect("conffiles");
    for f in ["/etc/director/director.toml", "/etc/default/director"] {
        assert!(
            conffiles.lines().any(|l| l.trim() == f),
            "{f} is not a conffile:\n{conffiles}"
        );
    }

    lintian(&deb);

    // Extracted into a throw-away root.
    let root = work.path("root");
    ok(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root));
    let unit = std::fs::read_to_string(root.join("usr/lib/systemd/system/director.service"))
        .expect("the unit");
    // The packaged unit is packaging/'s, whose capabilities the other test tries.
    assert_eq!(
        unit,
        source_unit(),
        "the packaged unit is not packaging/director.service"
    );
    for line in [
        "ExecStart=/usr/bin/director-ctl run --config /etc/director/director.toml $DIRECTOR_RUN_OPTS",
        "Restart=on-failure",
        "ProtectSystem=strict",
        "ReadWritePaths=/sys/fs/bpf",
        "NoNewPrivileges=yes",
    ] {
        assert!(
            unit.lines().any(|l| l == line),
            "the unit lacks {line:?}:\n{unit}"
        );
    }
    let verified = verify_unit(&root);
    assert!(
        verified.status.success() && verified.stderr.is_empty(),
        "systemd-analyze verify: {}",
        describe(&verified)
    );

    // The man pages are roff and name what they describe; the completions are scripts
    // for the installed name.
    let top = gunzip(&root.join("usr/share/man/man1/director-ctl.1.gz"));
    assert!(top.contains(".TH director-ctl 1"), "{top}");
    let run = gunzip(&root.join("usr/share/man/man1/director-ctl-run.1.gz"));
    assert!(
        run.contains("director\\-ctl\\-run") && run.contains("config"),
        "{run}"
    );
    let completion = |p: &str| {
        let mut s = String::new();
        std::fs::File::open(root.join(p))
            .and_then(|mut f| f.read_to_string(&mut s))
            .unwrap_or_else(|e| panic!("{p}: {e}"));
        s
    };
    let bash = completion("usr/share/bash-completion/completions/director-ctl");
    assert!(
        bash.contains("complete -F _director__ctl") && bash.contains("attach"),
        "{bash}"
    );
    let zsh = completion("usr/share/zsh/vendor-completions/_director-ctl");
    assert!(zsh.starts_with("#compdef director-ctl"), "{zsh}");
    let fish = completion("usr/share/fish/vendor_completions.d/director-ctl.fish");
    assert!(fish.contains("complete -c director-ctl"), "{fish}");

    // The installed binary, run from the root: its version, and the shipped config, which
    // must pass `check` with nothing else installed.
    let ctl = root.join("usr/bin/director-ctl");
    let version = ok(Command::new(&ctl).arg("--version"));
    assert_eq!(version.trim(), format!("director-ctl {VERSION}"));
    let config = root.join("etc/director/director.toml");
    let check = ok(Command::new(&ctl)
        .args(["check", "--json", "--config"])
        .arg(&config));
    let report: serde_json::Value = serde_json::from_str(&check).expect("check's JSON");
    assert_eq!(
        (report["services"].as_u64(), report["servers"].as_u64()),
        (Some(1), Some(3)),
        "{report}"
    );
}

fn source_unit() -> String {
    let path = workspace_root().join("packaging/director.service");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The unit's `CapabilityBoundingSet=`, as setpriv names capabilities (`bpf`, `net_admin`).
fn unit_capabilities() -> Vec<String> {
    let unit = source_unit();
    let set = unit
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .expect("the unit has a CapabilityBoundingSet=");
    set.split_whitespace()
        .map(|c| c.trim_start_matches("CAP_").to_ascii_lowercase())
        .collect()
}

/// A `run` of this test's, killed if the test ends first.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `director-ctl run --iface` on the lab's edge as root left with only `caps`: what systemd
/// does to a root service with `CapabilityBoundingSet=` (setpriv drops the others from the
/// bounding set before the exec, so the new program's permitted set is just these).
fn run_with(lab: &Lab, config: &Path, caps: &[&String]) -> Running {
    let bounding: Vec<String> = std::iter::once("-all".to_string())
        .chain(caps.iter().map(|c| format!("+{c}")))
        .collect();
    let mode = std::env::var("DIRECTOR_XDP_MODE").unwrap_or_else(|_| "native".into());
    let child = Command::new("nsenter")
        .arg(format!("--net=/run/netns/{}", lab.edge_ns))
        .args(["setpriv", "--bounding-set", &bounding.join(",")])
        .args(["--inh-caps", "-all", "--"])
        .arg(ctl_binary())
        .arg("--pin-dir")
        .arg(&lab.pin_dir)
        .args(["run", "--config"])
        .arg(config)
        .args(["--iface", &lab.edge_if, "--mode", &mode])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting setpriv director-ctl run");
    Running(child)
}

/// The server the XDP program answers `www.example.com` with, if it answers.
fn answer(lab: &Lab) -> String {
    lab.dig(&["+short", &format!("@{EDGE_V4}"), "www.example.com", "A"])
        .trim()
        .to_string()
}

/// The exit of a `run` (looked at once, then until `limit`), or None if it still runs;
/// with what it printed once it has exited.
fn exited(r: &mut Running, limit: Duration) -> Option<Output> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = r.0.try_wait().expect("looking at run") {
            // It has exited (setpriv execs it: no other holder of the pipes), so both
            // pipes end.
            let mut stdout = Vec::new();
            let mut stderr = Vec::new();
            if let Some(mut p) = r.0.stdout.take() {
                p.read_to_end(&mut stdout).expect("run's stdout");
            }
            if let Some(mut p) = r.0.stderr.take() {
                p.read_to_end(&mut stderr).expect("run's stderr");
            }
            return Some(Output {
                status,
                stdout,
                stderr,
            });
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What `run` says when a capability of the unit's is missing, so a failure is known to
/// come from that capability and not from something else.
fn refusal(cap: &str) -> &'static str {
    match cap {
        // attach checks both before it creates anything.
        "bpf" | "net_admin" => "needs root (CAP_BPF and CAP_NET_ADMIN)",
        // The verifier's unprivileged mode refuses the program.
        "perfmon" => "the kernel refused the XDP program",
        // The zone's listener on port 53.
        "net_bind_service" => "cannot bind",
        other => panic!("the unit grants CAP_{other}, which this test does not know: say here what run needs it for"),
    }
}

#[test]
fn the_units_capabilities_are_what_run_needs() {
    let caps = unit_capabilities();
    assert!(!caps.is_empty());
    let lab = Lab::new();
    let out = lab.ctl_in(&lab.client_ns, &["veth-peer", "--iface", &lab.client_if]);
    assert!(out.status.success(), "veth-peer: {}", describe(&out));
    // The package's config would do, but its zone needs the lab's address: one service
    // answered by the XDP program, and a zone whose listener binds port 53.
    let dir = TempDir::new("director-package", "caps");
    let config = dir.path("director.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[[site]]
name = "fra"

[[server]]
name = "fra-1"
site = "fra"
ipv4 = "198.51.100.10"

[[service]]
name = "www.example.com"
servers = ["fra-1"]
priority = {{ admin = 1 }}

[[zone]]
origin = "example.com"
ns = [ {{ name = "ns1.example.com", addresses = ["{EDGE_V4}"] }},
       {{ name = "ns2.example.com", addresses = ["{EDGE_V4}"] }} ]
"#
        ),
    )
    .expect("writing the config");

    // With exactly the unit's capabilities: attached, answering from the kernel and from
    // the zone's listener.
    let all: Vec<&String> = caps.iter().collect();
    let mut r = run_with(&lab, &config, &all);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(out) = exited(&mut r, Duration::ZERO) {
            panic!("run with {caps:?} exited: {}", describe(&out));
        }
        if answer(&lab) == "198.51.100.10" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "run with {caps:?} gave no answer in 20 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let soa = lab.dig(&["+short", &format!("@{EDGE_V4}"), "example.com", "SOA"]);
    assert!(
        soa.contains("ns1.example.com."),
        "the zone's listener: {soa}"
    );
    // SIGTERM (systemctl stop) ends run cleanly, and the pinned program answers on: why
    // Restart=on-failure and a stopped service lose no answer.
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(r.0.id() as i32, libc::SIGTERM) };
    let out = exited(&mut r, Duration::from_secs(10)).expect("run stops on SIGTERM");
    assert!(
        out.status.success(),
        "run after SIGTERM: {}",
        describe(&out)
    );
    assert_eq!(answer(&lab), "198.51.100.10", "no answer once run stopped");
    lab.ctl_ok(&["detach", "--iface", &lab.edge_if]);

    // Without any one of them, run fails, and says why.
    for missing in &caps {
        let fewer: Vec<&String> = caps.iter().filter(|c| *c != missing).collect();
        let mut r = run_with(&lab, &config, &fewer);
        let out = exited(&mut r, Duration::from_secs(20));
        // Whatever it attached goes before the next try (it may have attached before
        // failing to bind).
        let _ = lab.ctl(&["detach", "--iface", &lab.edge_if]);
        let out = out.unwrap_or_else(|| {
            panic!("run without CAP_{missing} is still running: the unit need not grant it")
        });
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(refusal(missing)),
            "run without CAP_{missing}: {}",
            describe(&out)
        );
    }
}
