//! director-ctl as operators and scripts use it: many writers at once, an unprivileged user,
//! a reader that stops reading, and clean-up after itself.
//!
//! Run as root: `cargo test -p director-tests --test cli -- --test-threads=1`.

use std::collections::BTreeSet;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use std::time::Duration;

use director_common::select::Mode;
use director_ctl::kernel::{Maps, WriteLock};
use director_ctl::{api, ops};
use director_tests::netns::{ctl_binary, describe, workspace_root, Lab, EDGE_V4};
use director_tests::netns::{Reply, PREFIX};
use director_tests::pins;

/// Writers of each kind started at once.
const WRITERS: usize = 12;

/// Starts every command at once, then waits for all; fails naming any that failed.
fn race(dir: &Path, commands: &[Vec<String>]) {
    let children: Vec<_> = commands
        .iter()
        .map(|args| (args, spawn(dir, args)))
        .collect();
    for (args, child) in children {
        let out = child.wait_with_output().expect("waiting for director-ctl");
        assert!(
            out.status.success(),
            "director-ctl {args:?}: {}",
            describe(&out)
        );
    }
}

/// `director-ctl --pin-dir DIR ARGS`, from the root namespace (writing maps needs none).
fn spawn(dir: &Path, args: &[String]) -> Child {
    Command::new(ctl_binary())
        .arg("--pin-dir")
        .arg(dir)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting director-ctl")
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(ToString::to_string).collect()
}

/// Concurrent `server add`, `service add` and `route set`, each of which reads (a free id,
/// the routes around a prefix) and then writes what the read decided: every object gets an
/// id of its own and every name answers with its own server.
///
/// Which writer runs when is left to chance in a plain race, and the window between a read
/// and its write is a few microseconds, so a race alone rarely catches a missing lock. The
/// test therefore holds the write lock itself while the writers start: they must all still
/// be waiting after half a second, and the objects it adds meanwhile must not share ids with
/// theirs, which they would if a writer read the free ids before taking the lock. Then they
/// all go at once.
#[test]
fn concurrent_writers_wait_for_the_lock_and_get_ids_of_their_own() {
    let lab = Lab::new();
    lab.attach();
    let dir = &lab.pin_dir;
    let server = |i: usize| format!("s{i}");
    let name = |i: usize| format!("svc{i}.example.net");
    let addr = |i: usize| format!("198.51.100.{}", 10 + i);
    let inside = WRITERS;
    let mut all = Vec::new();
    for i in 0..WRITERS {
        all.push(strings(&["server", "add", &server(i), "--ipv4", &addr(i)]));
        all.push(strings(&["service", "add", &name(i)]));
    }
    let lock = WriteLock::take(dir).expect("the write lock");
    let mut children: Vec<_> = all.iter().map(|args| (args, spawn(dir, args))).collect();
    std::thread::sleep(Duration::from_millis(500));
    let mut early = Vec::new();
    for (args, child) in &mut children {
        if child.try_wait().expect("looking at a writer").is_some() {
            early.push(format!("{args:?}"));
        }
    }
    // Objects of this test's own, written under the lock, at the lowest free ids.
    let mut m = Maps::open(dir).expect("the lab's maps");
    let v4 = addr(inside).parse().unwrap();
    ops::server_add(&mut m, &server(inside), Some(v4), None).expect("server add");
    ops::service_add(&mut m, &name(inside), 30, 1, Mode::Random).expect("service add");
    drop(lock);
    for (args, child) in children {
        let out = child.wait_with_output().expect("waiting for director-ctl");
        assert!(
            out.status.success(),
            "director-ctl {args:?}: {}",
            describe(&out)
        );
    }
    assert!(
        early.is_empty(),
        "writers finished while another held the write lock: {early:?}"
    );
    let routes: Vec<Vec<String>> = (0..=inside)
        .map(|i| strings(&["route", "set", &name(i), "0.0.0.0/0", &server(i)]))
        .collect();
    race(dir, &routes);

    let count = WRITERS + 1;
    let list: api::ServerList =
        serde_json::from_str(&lab.ctl_ok(&["server", "list", "--json"])).unwrap();
    let ids: BTreeSet<u16> = list.servers.iter().map(|s| s.id).collect();
    assert_eq!(
        (list.servers.len(), ids.len()),
        (count, count),
        "servers and their distinct ids: {list:?}"
    );
    let list: api::ServiceList =
        serde_json::from_str(&lab.ctl_ok(&["service", "list", "--json"])).unwrap();
    let ids: BTreeSet<u32> = list.services.iter().map(|s| s.id).collect();
    assert_eq!(
        (list.services.len(), ids.len()),
        (count, count),
        "services and their distinct ids: {list:?}"
    );
    let mut wrong = Vec::new();
    for i in 0..=inside {
        let r = Reply::parse(&lab.dig(&[&format!("@{EDGE_V4}"), &name(i), "A"]));
        if r.data("A") != [addr(i)] {
            wrong.push(format!(
                "{} -> {:?} (want {})",
                name(i),
                r.data("A"),
                addr(i)
            ));
        }
    }
    assert!(wrong.is_empty(), "names answered wrongly: {wrong:#?}");
}

/// `veth-peer --detach` leaves nothing pinned: no map pins beside its link while attached,
/// and no directory once its last link is gone.
#[test]
fn veth_peer_detach_removes_its_pins() {
    let lab = Lab::new();
    lab.attach();
    let pass = pins::pass_dir(&lab.pin_dir);
    let names: Vec<String> = std::fs::read_dir(&pass)
        .expect("the pass directory")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        std::slice::from_ref(&lab.client_if),
        "pinned beside the link"
    );
    let out = Command::new("nsenter")
        .arg(format!("--net=/run/netns/{}", lab.client_ns))
        .arg(ctl_binary())
        .arg("--pin-dir")
        .arg(&lab.pin_dir)
        .args(["veth-peer", "--iface", &lab.client_if, "--detach"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        !pass.exists(),
        "{} is still there: {:?}",
        pass.display(),
        std::fs::read_dir(&pass).map(Iterator::count)
    );
}

/// The binary as user nobody.
fn as_nobody(args: &[&str]) -> Output {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(ctl_binary())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running setpriv")
}

/// Without privileges `attach` says it needs root, makes no pin directory, and says so
/// also where director is attached already (not "already attached").
#[test]
fn unprivileged_attach_needs_root_and_makes_nothing() {
    let fresh = pins::dir(&pins::name(PREFIX, "nobody"));
    let out = as_nobody(&[
        "--pin-dir",
        fresh.to_str().unwrap(),
        "attach",
        "--iface",
        "lo",
    ]);
    let exists = fresh.exists();
    pins::remove(&fresh);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("needs root") && err.lines().count() == 1,
        "{}",
        describe(&out)
    );
    assert!(!exists, "an unprivileged attach left {}", fresh.display());

    let lab = Lab::new();
    lab.attach();
    let out = as_nobody(&[
        "--pin-dir",
        lab.pin_dir.to_str().unwrap(),
        "attach",
        "--iface",
        &lab.edge_if,
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("needs root") && !err.contains("already"),
        "{}",
        describe(&out)
    );
}

/// Output into a pipe nobody reads any more (`director-ctl ... | head` after head exits)
/// ends the command quietly: no panic, no message.
#[test]
fn a_closed_pipe_ends_output_quietly() {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let config = workspace_root().join("examples/director.toml");
    let out = Command::new(ctl_binary())
        .args(["check", "--config"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("running director-ctl check");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.is_empty() && (out.status.success() || out.status.signal() == Some(libc::SIGPIPE)),
        "{}",
        describe(&out)
    );
}

/// The MAC of `ifname` in `ns`, as `ip` prints it.
fn mac_of(ns: &str, ifname: &str) -> String {
    let out = Command::new("ip")
        .args(["-n", ns, "-j", "link", "show", "dev", ifname])
        .output()
        .expect("running ip");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("ip -j output");
    v[0]["address"]
        .as_str()
        .unwrap_or_else(|| panic!("no address for {ifname} in {ns}: {v}"))
        .to_string()
}

/// `nexthop` reads one neighbour entry by its address: a neighbour never seen is resolved
/// (the kernel is nudged) and named by its MAC, for both families; an address nobody holds
/// on the segment is an error that names it.
#[test]
fn nexthop_names_the_neighbour_resolving_it_first() {
    let lab = Lab::new();
    let client_mac = mac_of(&lab.client_ns, &lab.client_if);
    let edge_mac = mac_of(&lab.edge_ns, &lab.edge_if);
    for addr in [
        director_tests::netns::CLIENT_V4,
        director_tests::netns::CLIENT_V6,
    ] {
        let out = lab.ctl(&["nexthop", addr, "--json"]);
        assert!(out.status.success(), "nexthop {addr}: {}", describe(&out));
        let hop: api::Nexthop = serde_json::from_slice(&out.stdout).expect("nexthop --json");
        assert_eq!(hop.address.to_string(), addr);
        assert_eq!(hop.iface, lab.edge_if);
        assert_eq!(hop.dst_mac, client_mac, "{addr}");
        assert_eq!(hop.src_mac, edge_mac, "{addr}");
        assert_eq!(hop.gateway, None);
    }
    let out = lab.ctl(&["nexthop", "192.0.2.77"]);
    assert!(!out.status.success(), "an absent neighbour resolved");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("192.0.2.77") && err.contains("did not resolve"),
        "{err}"
    );
}
