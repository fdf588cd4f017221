//! Response rate limiting end to end: a bounded flood from one client prefix over a veth,
//! answered by the XDP program, is held to the configured rate, while a client in another
//! prefix gets every answer. Needs root.

use std::process::{Command, Stdio};

use director_tests::netns::{describe, Lab, CLIENT_V4, EDGE_V4};
use serde::Deserialize;

const WWW: &str = "www.example.com";
const RATE: u64 = 400;
const BURST: u64 = 40;
/// The flood: five times the rate for two seconds.
const FLOOD: u64 = 4000;
const SECONDS: f64 = 2.0;
/// A client of another /24, under the rate, at the same time.
const OTHER_V4: &str = "203.0.113.2";
const OTHER: u64 = 300;

#[derive(Debug, Deserialize)]
struct Flood {
    sent: u64,
    unsent: u64,
    answers: u64,
    truncated: u64,
    other: u64,
    span_s: f64,
}

fn flood(lab: &Lab, from: &str, count: u64) -> std::process::Child {
    Command::new("ip")
        .args(["netns", "exec", &lab.client_ns])
        .arg(env!("CARGO_BIN_EXE_udp_flood"))
        .args([from, EDGE_V4, WWW, &count.to_string(), &SECONDS.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting udp_flood")
}

fn result(child: std::process::Child) -> Flood {
    let out = child.wait_with_output().expect("waiting for udp_flood");
    assert!(out.status.success(), "udp_flood: {}", describe(&out));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("udp_flood printed {}: {e}", describe(&out)))
}

#[test]
fn a_flood_from_one_prefix_is_held_to_the_rate_and_another_prefix_gets_every_answer() {
    let lab = Lab::new();
    lab.attach();
    lab.ctl_ok(&["server", "add", "fra-1", "--ipv4", "198.51.100.10"]);
    let (rate, burst) = (RATE.to_string(), BURST.to_string());
    lab.ctl_ok(&[
        "service",
        "add",
        WWW,
        "--rrl-rate",
        &rate,
        "--rrl-burst",
        &burst,
        "--rrl-slip",
        "2",
    ]);
    lab.ctl_ok(&["route", "set", WWW, "0.0.0.0/0", "fra-1"]);
    let listed = lab.ctl_ok(&["service", "list"]);
    assert!(listed.contains("rrl=400/s burst=40 slip=2"), "{listed}");
    // The CLI's exemptions, checked like every prefix; an unrelated one stays for the run.
    lab.ctl_ok(&["rrl", "exempt", "add", "198.51.100.0/24"]);
    let bad = lab.ctl(&["rrl", "exempt", "add", "198.51.100.1/24"]);
    assert!(
        !bad.status.success(),
        "host bits accepted: {}",
        describe(&bad)
    );
    let bad = lab.ctl(&["rrl", "set", WWW, "--rate", "5", "--slip", "101"]);
    assert!(
        !bad.status.success(),
        "slip 101 accepted: {}",
        describe(&bad)
    );
    let listed: director_ctl::api::RrlExemptList =
        serde_json::from_str(&lab.ctl_ok(&["rrl", "exempt", "list", "--json"])).unwrap();
    let listed: Vec<String> = listed.exempt.iter().map(ToString::to_string).collect();
    assert_eq!(listed, ["198.51.100.0/24"]);
    let out = lab.client(&[
        "ip",
        "addr",
        "add",
        &format!("{OTHER_V4}/32"),
        "dev",
        &lab.client_if,
    ]);
    assert!(out.status.success(), "{}", describe(&out));

    let flooder = flood(&lab, CLIENT_V4, FLOOD);
    let other = flood(&lab, OTHER_V4, OTHER);
    let (f, o) = (result(flooder), result(other));
    let stats = lab.stats();
    eprintln!(
        "flood {f:?}\nother {o:?}\nkernel: answered {}, truncated {}, dropped {}",
        stats.get("answered"),
        stats.get("truncated_rate_limited"),
        stats.get("drop_rate_limited")
    );

    // The other prefix: every query answered in full, none limited.
    assert_eq!(o.unsent, 0);
    assert_eq!((o.answers, o.truncated, o.other), (OTHER, 0, 0), "{o:?}");

    // The flood: a burst, then the rate over the time it was sent, within 10 %.
    assert!(f.sent >= FLOOD * 9 / 10 && f.other == 0, "{f:?}");
    let expected = BURST as f64 + RATE as f64 * f.span_s;
    let got = f.answers as f64;
    assert!(
        (got - expected).abs() <= expected * 0.10,
        "{} full answers to the flood over {:.3} s; the limit allows {expected:.0}",
        f.answers,
        f.span_s
    );
    // Every limited response is counted, and every second one slipped out truncated.
    let (slipped, dropped) = (
        stats.get("truncated_rate_limited"),
        stats.get("drop_rate_limited"),
    );
    assert_eq!(stats.get("answered"), f.answers + o.answers, "{f:?} {o:?}");
    assert_eq!(slipped, f.truncated, "{f:?}");
    assert_eq!(f.answers + slipped + dropped, f.sent, "{f:?}");
    assert!(
        slipped.abs_diff(dropped) <= 1,
        "slip 2: {slipped} truncated, {dropped} dropped"
    );
}
