//! Restarts and upgrades without a gap in answers, measured: a client namespace sends a
//! steady stream of queries (`dns_stream`: 1000 a second, each matched to its reply and
//! checked) while
//!
//! - `run` is stopped with SIGTERM (as systemd stops it), nothing runs for a while, and a
//!   new `run` starts on the same pins: the program stays attached, answers from the
//!   maps, and the new `run` writes nothing (same ids, same entries);
//! - `upgrade` swaps a newly loaded program in on two interfaces, twice (an explicit object
//!   file, then the built-in one): every link runs the new program, the maps' ids are
//!   unchanged and their counters went on;
//! - for comparison, the old way: detach, attach, `run` fills the new maps. That one loses
//!   answers, which also shows the stream sees a gap when there is one.
//!
//! Each test prints what it measured (`--nocapture`). Run as root:
//! `cargo test -p director-tests --test upgrade -- --test-threads=1 --nocapture`.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use aya::maps::MapInfo;
use aya::programs::links::{FdLink, PinnedLink};
use aya::programs::ProgramInfo;
use director_common::maps::LAYOUT_VERSION;
use director_tests::config::Doc;
use director_tests::netns::{describe, Controller, Lab, Reply, CLIENT_V4, EDGE_V4};
use director_tests::tempdir::TempDir;
use serde_json::Value;

const WWW: &str = "www.example.com";
/// Queries a second: a millisecond between queries is the resolution of every gap measured.
const RATE: u32 = 1000;

/// A `dns_stream` running in the client namespace.
struct Stream(Option<Child>);

/// What a stream measured.
#[derive(Debug)]
struct Gap {
    sent: u64,
    answered: u64,
    wrong: u64,
    lost: u64,
    silence_ms: f64,
    loss_ms: f64,
    pause_ms: f64,
    raw: Value,
}

impl Stream {
    /// `seconds` of queries for www, each reply expected to hold `expect`.
    fn start(lab: &Lab, expect: &str, seconds: u32) -> Stream {
        let child = Command::new("ip")
            .args(["netns", "exec", &lab.client_ns])
            .arg(env!("CARGO_BIN_EXE_dns_stream"))
            .args([
                CLIENT_V4,
                EDGE_V4,
                WWW,
                expect,
                &RATE.to_string(),
                &seconds.to_string(),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting dns_stream");
        Stream(Some(child))
    }

    fn finish(mut self) -> Gap {
        let child = self.0.take().expect("a stream is finished once");
        let out = child.wait_with_output().expect("waiting for dns_stream");
        assert!(out.status.success(), "dns_stream: {}", describe(&out));
        let raw: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("dns_stream printed {}: {e}", describe(&out)));
        let n = |k: &str| raw[k].as_u64().unwrap_or_else(|| panic!("no {k} in {raw}"));
        let f = |k: &str| raw[k].as_f64().unwrap_or_else(|| panic!("no {k} in {raw}"));
        Gap {
            sent: n("sent"),
            answered: n("answered"),
            wrong: n("wrong"),
            lost: n("lost"),
            silence_ms: f("longest_silence_ms"),
            loss_ms: f("longest_loss_ms"),
            pause_ms: f("longest_send_pause_ms"),
            raw,
        }
    }
}

impl Drop for Stream {
    /// A test that fails before finishing its stream stops it (it is bounded anyway).
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The pinned maps by name, with their ids.
fn map_ids(pin_dir: &Path) -> BTreeMap<String, u32> {
    fs::read_dir(pin_dir)
        .expect("reading the pin directory")
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("DIR_").then(|| {
                let info = MapInfo::from_pin(e.path()).expect("reading a pinned map");
                (name, info.id())
            })
        })
        .collect()
}

fn program_id(pin_dir: &Path) -> u32 {
    ProgramInfo::from_pin(pin_dir.join("program"))
        .expect("reading the pinned program")
        .id()
}

/// The program `iface`'s pinned link runs, and the link's id.
fn link(pin_dir: &Path, iface: &str) -> (u32, u32) {
    let l: FdLink = PinnedLink::from_pin(pin_dir.join(format!("link_{iface}")))
        .expect("opening a pinned link")
        .into();
    let info = l.info().expect("reading a link");
    (info.program_id(), info.id())
}

/// www's first A record as the client gets it now.
fn answer(lab: &Lab) -> String {
    let r = Reply::parse(&lab.dig(&[&format!("@{EDGE_V4}"), WWW, "A"]));
    r.data("A")
        .first()
        .cloned()
        .unwrap_or_else(|| panic!("www is not answered:\n{}", r.text))
}

fn report(what: &str, g: &Gap) {
    eprintln!(
        "{what}: {} queries, {} answered, {} lost, {} wrong; longest silence {:.1} ms \
         (the client's own longest pause between sends {:.1} ms), longest loss {:.1} ms; {}",
        g.sent, g.answered, g.lost, g.wrong, g.silence_ms, g.pause_ms, g.loss_ms, g.raw
    );
}

/// Every silence in the answers is one of the client's own pauses (it sends and reads in
/// one thread: when it is not scheduled it neither asks nor hears), give or take 10 ms.
fn no_silence_of_its_own(g: &Gap) {
    assert!(
        g.silence_ms <= g.pause_ms + 10.0,
        "{:.1} ms without an answer while the client paused at most {:.1} ms: {g:?}",
        g.silence_ms,
        g.pause_ms
    );
}

/// `run` on the shared two-site config (www on x and y) in the lab, its entries written.
fn start_run(lab: &Lab, config: &Path, log: &Path) -> Controller {
    let mut run = Controller::start(lab, config, log);
    run.wait_for("entries written", 1, Duration::from_secs(30));
    run
}

#[test]
fn run_stopped_and_started_again_keeps_answering() {
    let dir = TempDir::new("upgrade", "restart");
    let config = dir.path("director.toml");
    fs::write(&config, Doc::two_sites().text()).unwrap();
    let lab = Lab::new();
    lab.attach();
    let mut run = start_run(&lab, &config, &dir.path("run-1.log"));
    let expect = answer(&lab);
    let maps = map_ids(&lab.pin_dir);
    let program = program_id(&lab.pin_dir);

    let stream = Stream::start(&lab, &expect, 6);
    sleep(Duration::from_secs(1));
    // SIGTERM, as systemd stops the unit.
    let t = Instant::now();
    run.stop();
    let stopped_ms = t.elapsed().as_secs_f64() * 1e3;
    let status = lab.ctl_ok(&["status"]);
    assert!(
        status.contains(&lab.edge_if),
        "not attached after run stopped:\n{status}"
    );
    // Nothing runs: the program answers from its maps alone.
    sleep(Duration::from_millis(1500));
    let t = Instant::now();
    let run = start_run(&lab, &config, &dir.path("run-2.log"));
    let started_ms = t.elapsed().as_secs_f64() * 1e3;
    let gap = stream.finish();
    report("run stopped (SIGTERM) and started again", &gap);
    eprintln!("run stopped in {stopped_ms:.0} ms; the new one applied in {started_ms:.0} ms");

    assert!(
        run.log().contains(" 0 entries written"),
        "the new run wrote entries over the same inputs:\n{}",
        run.log()
    );
    assert_eq!(map_ids(&lab.pin_dir), maps, "the maps were made again");
    assert_eq!(program_id(&lab.pin_dir), program);
    assert!(gap.sent >= 5900, "{gap:?}");
    assert_eq!(gap.wrong, 0, "wrong answers: {gap:?}");
    assert_eq!(gap.lost, 0, "answers lost across the restart: {gap:?}");
    no_silence_of_its_own(&gap);
}

#[test]
fn upgrade_swaps_the_program_on_every_interface_without_a_gap() {
    let dir = TempDir::new("upgrade", "swap");
    let lab = Lab::new();
    lab.attach();
    // A second interface director is attached to (generic XDP, one end of a veth pair
    // inside the edge namespace): the upgrade must swap it too.
    let second = format!("ug{}", &lab.edge_if[2..]);
    let peer = format!("uh{}", &lab.edge_if[2..]);
    for args in [
        vec![
            "-n",
            &lab.edge_ns,
            "link",
            "add",
            &second,
            "type",
            "veth",
            "peer",
            "name",
            &peer,
        ],
        vec!["-n", &lab.edge_ns, "link", "set", &second, "up"],
    ] {
        let out = Command::new("ip").args(&args).output().unwrap();
        assert!(out.status.success(), "ip {args:?}: {}", describe(&out));
    }
    lab.ctl_ok(&["attach", "--iface", &second, "--mode", "skb"]);
    lab.ctl_ok(&["server", "add", "fra-1", "--ipv4", "198.51.100.10"]);
    lab.ctl_ok(&["service", "add", WWW, "--ttl", "60"]);
    lab.ctl_ok(&["route", "set", WWW, "0.0.0.0/0", "fra-1"]);
    let expect = answer(&lab);
    assert_eq!(expect, "198.51.100.10");

    let maps = map_ids(&lab.pin_dir);
    let p0 = program_id(&lab.pin_dir);
    let links0: Vec<(u32, u32)> = [&lab.edge_if, &second]
        .iter()
        .map(|i| link(&lab.pin_dir, i))
        .collect();
    assert!(links0.iter().all(|l| l.0 == p0), "{links0:?} {p0}");
    let answered0 = lab.stats().get("answered");
    // Another load of the program: a file (as a new package's object would be given).
    let object = dir.path("director.o");
    fs::write(&object, director_ctl::EBPF_OBJECT).unwrap();

    let stream = Stream::start(&lab, &expect, 6);
    sleep(Duration::from_secs(1));
    let t = Instant::now();
    let first = lab.ctl_ok(&["upgrade", "--object", &object.display().to_string()]);
    let first_ms = t.elapsed().as_secs_f64() * 1e3;
    let p1 = program_id(&lab.pin_dir);
    sleep(Duration::from_secs(2));
    // And again, the program built into director-ctl.
    let second_out = lab.ctl_ok(&["upgrade"]);
    let p2 = program_id(&lab.pin_dir);
    let gap = stream.finish();
    report("two upgrades", &gap);
    eprintln!("upgrade --object took {first_ms:.0} ms:\n{first}{second_out}");

    assert!(p0 != p1 && p1 != p2 && p0 != p2, "programs {p0} {p1} {p2}");
    for (iface, before) in [&lab.edge_if, &second].iter().zip(&links0) {
        let (prog, id) = link(&lab.pin_dir, iface);
        assert_eq!(prog, p2, "{iface}'s link runs program {prog}, not {p2}");
        assert_eq!(id, before.1, "{iface}'s link was made again");
    }
    // What bpftool says about the link, where it is installed: the same program.
    if let Ok(out) = Command::new("bpftool")
        .args(["link", "show", "pinned"])
        .arg(lab.pin_dir.join(format!("link_{}", lab.edge_if)))
        .output()
    {
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            !out.status.success() || text.contains(&format!("prog {p2}")),
            "bpftool link show: {text}"
        );
    }
    assert_eq!(map_ids(&lab.pin_dir), maps, "the maps were made again");
    assert!(first.contains(&format!("{p0} → {p1}")), "{first}");
    assert!(first.contains("the same code"), "{first}");
    assert!(gap.sent >= 5900, "{gap:?}");
    assert_eq!(gap.wrong, 0, "wrong answers: {gap:?}");
    assert_eq!(gap.lost, 0, "answers lost across the upgrades: {gap:?}");
    no_silence_of_its_own(&gap);
    // The counters are the same map: every answer of the stream is in them.
    let answered = lab.stats().get("answered") - answered0;
    assert!(
        answered >= gap.answered,
        "the counters saw {answered} answers of the stream's {}",
        gap.answered
    );
    // The old programs are gone with their last link: only p2 is loaded.
    assert!(ProgramInfo::from_pin(lab.pin_dir.join("program")).is_ok());
    assert!(!lab.pin_dir.join("program-next").exists());
}

#[test]
fn upgrade_refuses_maps_of_another_layout_and_changes_nothing() {
    let lab = Lab::new();
    // Nothing attached: nothing to upgrade.
    let out = lab.ctl(&["upgrade"]);
    assert!(!out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("nothing is attached"),
        "{}",
        describe(&out)
    );
    lab.attach();
    let p0 = program_id(&lab.pin_dir);
    // Maps of another layout: DIR_LAYOUT of another size, as another build pins it.
    let layout = lab.pin_dir.join("DIR_LAYOUT");
    fs::remove_file(&layout).unwrap();
    let other = LAYOUT_VERSION + 7;
    let out = Command::new("bpftool")
        .args(["map", "create"])
        .arg(&layout)
        .args(["type", "array", "key", "4", "value", "1", "entries"])
        .arg(other.to_string())
        .args(["name", "DIR_LAYOUT"])
        .output()
        .expect("running bpftool");
    assert!(
        out.status.success(),
        "bpftool map create: {}",
        describe(&out)
    );
    let out = lab.ctl(&["upgrade"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{}", describe(&out));
    assert!(
        err.contains(&format!(
            "layout {other} pinned, layout {LAYOUT_VERSION} in the new program"
        )) && err.contains("detach"),
        "{err}"
    );
    assert_eq!(
        program_id(&lab.pin_dir),
        p0,
        "a refused upgrade changed the program"
    );
    assert_eq!(link(&lab.pin_dir, &lab.edge_if).0, p0);
    // Not an object at all.
    let dir = TempDir::new("upgrade", "bad");
    let bad = dir.path("bad.o");
    fs::write(&bad, b"not an ELF file").unwrap();
    let out = lab.ctl(&["upgrade", "--object", &bad.display().to_string()]);
    assert!(!out.status.success(), "{}", describe(&out));
    assert_eq!(program_id(&lab.pin_dir), p0);
}

/// The old way, for comparison: detach (the last detach unpins the maps), attach (new,
/// empty maps), and `run` fills them. Queries in between reach the host, where nothing
/// answers them.
#[test]
fn detach_and_attach_loses_answers() {
    let dir = TempDir::new("upgrade", "detach");
    let config = dir.path("director.toml");
    fs::write(&config, Doc::two_sites().text()).unwrap();
    let lab = Lab::new();
    lab.attach();
    let mut run = start_run(&lab, &config, &dir.path("run-1.log"));
    let expect = answer(&lab);
    let stream = Stream::start(&lab, &expect, 6);
    sleep(Duration::from_secs(1));
    let t = Instant::now();
    run.stop();
    lab.ctl_ok(&["detach", "--iface", &lab.edge_if]);
    lab.ctl_ok(&["attach", "--iface", &lab.edge_if]);
    let _run = start_run(&lab, &config, &dir.path("run-2.log"));
    let took_ms = t.elapsed().as_secs_f64() * 1e3;
    let gap = stream.finish();
    report("run stopped, detach, attach, run started", &gap);
    eprintln!("stop to applied again: {took_ms:.0} ms");
    assert!(gap.lost > 0, "the stream saw no gap: {gap:?}");
    assert_eq!(gap.wrong, 0, "{gap:?}");
}
