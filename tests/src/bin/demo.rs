//! `cargo xtask demo`: director answering real dig queries in namespaces of its own.
//!
//! Creates a client and an edge namespace, attaches director to the edge, and runs the
//! controller (`director-ctl run`) on the example config in examples/ (three sites, client
//! locations and RTTs of its own, so nothing outside the repository is needed). Then asks
//! with dig from the client's own address and, as a resolver would, with EDNS Client Subnet
//! for networks on other continents, and prints which server each got; changes an RTT
//! measurement and takes a server down to show the answers follow. Everything it made is
//! removed at the end.

use std::{
    path::{Path, PathBuf},
    process::Command,
    thread::sleep,
    time::{Duration, Instant},
};

use director_tests::netns::{
    ctl_binary, workspace_root, Controller, Lab, Reply, CLIENT_V4, EDGE_V4, EDGE_V6,
};

/// The example's servers, to name the addresses in answers.
const SERVERS: [(&str, &str, &str); 4] = [
    ("fra-1", "198.51.100.10", "2001:db8:f::10"),
    ("fra-2", "198.51.100.11", "2001:db8:f::11"),
    ("nyc-1", "198.51.100.20", "2001:db8:f::20"),
    ("sin-1", "198.51.100.30", "2001:db8:f::30"),
];

fn server_of(addr: &str) -> &'static str {
    SERVERS
        .iter()
        .find(|s| s.1 == addr || s.2 == addr)
        .map_or("?", |s| s.0)
}

/// One dig from the client namespace, printed as a table row.
fn ask(lab: &Lab, who: &str, name: &str, rtype: &str, subnet: Option<&str>) {
    let server = if rtype == "AAAA" { EDGE_V6 } else { EDGE_V4 };
    let mut args = vec![format!("@{server}"), name.to_string(), rtype.to_string()];
    if let Some(s) = subnet {
        args.push(format!("+subnet={s}"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = Reply::parse(&lab.dig(&args));
    let got: Vec<String> = r
        .answers
        .iter()
        .map(|rr| format!("{} {}", server_of(&rr.data), rr.data))
        .collect();
    let answer = match &r.status {
        None => "no answer (passed to the host, where nothing listens)".to_string(),
        Some(s) if got.is_empty() => s.clone(),
        Some(_) => got.join(", "),
    };
    println!(
        "  {:<30} {:<18} {:<5} {:<46} {}",
        who,
        r.question.first().map_or(name, |q| q.0.as_str()),
        rtype,
        answer,
        r.client_subnet
            .as_deref()
            .map_or(String::new(), |s| format!("ECS {s}"))
    );
}

fn queries(lab: &Lab) {
    ask(
        lab,
        &format!("client {CLIENT_V4} (Berlin)"),
        "www.example.com",
        "A",
        None,
    );
    ask(
        lab,
        "resolver for Boston",
        "www.example.com",
        "A",
        Some("198.51.100.0/24"),
    );
    ask(
        lab,
        "resolver for Tokyo",
        "WwW.ExAmPlE.cOm",
        "A",
        Some("203.0.113.7/32"),
    );
    ask(
        lab,
        "resolver for Chicago",
        "www.example.com",
        "AAAA",
        Some("2001:db8:b::/48"),
    );
    ask(
        lab,
        "resolver for Sydney",
        "video.example.com",
        "A",
        Some("203.0.113.200/32"),
    );
    ask(
        lab,
        "resolver for Singapore",
        "video.example.com",
        "AAAA",
        Some("2001:db8:a:1::/64"),
    );
}

/// Waits until the kernel answers `name` A for the ECS `subnet` with `want` first (the
/// controller's change is in; which prefix holds it depends on the minimal table).
fn wait_for_answer(lab: &Lab, name: &str, subnet: &str, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = Reply::parse(&lab.dig(&[
            &format!("@{EDGE_V4}"),
            name,
            "A",
            &format!("+subnet={subnet}"),
        ]));
        if r.answers.first().is_some_and(|a| a.data == want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the controller's change did not reach the answers within 20 s"
        );
        sleep(Duration::from_millis(100));
    }
}

/// Waits until `route list` shows `want` in the kernel's table (what `run` wrote).
fn wait_for_routes(lab: &Lab, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !lab.ctl_ok(&["route", "list"]).contains(want) {
        assert!(
            Instant::now() < deadline,
            "the controller did not write {want:?} within 20 s"
        );
        sleep(Duration::from_millis(100));
    }
}

fn copy_example(to: &Path) {
    std::fs::create_dir_all(to).expect("creating the demo's directory");
    for f in ["director.toml", "locations.csv", "rtt.csv"] {
        std::fs::copy(workspace_root().join("examples").join(f), to.join(f))
            .expect("copying the example");
    }
}

fn main() {
    let lab = Lab::new();
    let dir: PathBuf = std::env::temp_dir().join(format!("{}-demo", lab.id));
    copy_example(&dir);
    println!(
        "director demo: client namespace {} <-> edge namespace {}",
        lab.client_ns, lab.edge_ns
    );
    lab.attach();
    println!(
        "attached director to {} (edge, {EDGE_V4} / {EDGE_V6})",
        lab.edge_if
    );
    println!("$ director-ctl run --config examples/director.toml   (sites fra, nyc, sin)\n");
    let controller =
        Controller::start_polling(&lab, &dir.join("director.toml"), &dir.join("run.log"), 200);
    wait_for_routes(&lab, "video.example.com");
    println!("\n$ director-ctl route list");
    print!("{}", lab.ctl_ok(&["route", "list"]));

    println!("\nqueries (dig from the client namespace):");
    queries(&lab);

    println!(
        "\n$ director-ctl explain --service video.example.com --client 203.0.113.200 (abridged)"
    );
    let out = Command::new(ctl_binary())
        .args([
            "explain",
            "--service",
            "video.example.com",
            "--client",
            "203.0.113.200",
            "--config",
        ])
        .arg(dir.join("director.toml"))
        .output()
        .expect("running explain");
    for line in String::from_utf8_lossy(&out.stdout).lines().take(12) {
        println!("  {line}");
    }

    println!("\nsin now measures 300 ms to Sydney (rtt.csv changed; run notices and rewrites):");
    let rtt = std::fs::read_to_string(dir.join("rtt.csv"))
        .unwrap()
        .replace("203.0.113.128/25,sin,96", "203.0.113.128/25,sin,300");
    std::fs::write(dir.join("rtt.csv"), rtt).unwrap();
    wait_for_answer(&lab, "video.example.com", "203.0.113.200/32", SERVERS[2].1);
    for line in controller
        .log()
        .lines()
        .filter(|l| l.contains("203.0.113.128/25") || l.contains("up to date"))
    {
        println!("  {line}");
    }
    ask(
        &lab,
        "resolver for Sydney",
        "video.example.com",
        "A",
        Some("203.0.113.200/32"),
    );

    println!("\n$ director-ctl server set sin-1 --down");
    lab.ctl_ok(&["server", "set", "sin-1", "--down"]);
    ask(
        &lab,
        "resolver for Tokyo",
        "www.example.com",
        "A",
        Some("203.0.113.7/32"),
    );
    ask(
        &lab,
        "resolver for Singapore",
        "video.example.com",
        "AAAA",
        Some("2001:db8:a:1::/64"),
    );

    println!("\nthe whole zone, answered by run's listeners (UDP and TCP on the NS addresses):");
    for args in [
        &["example.com", "SOA", "+short"][..],
        &["example.com", "TXT", "+short"],
        &["nope.example.com", "A"],
        &["+tcp", "video.example.com", "A", "+short"],
    ] {
        let mut all = vec![format!("@{EDGE_V4}")];
        all.extend(args.iter().map(ToString::to_string));
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        let out = lab.dig(&all);
        let shown = if args.contains(&"+short") {
            out.trim().replace('\n', " ")
        } else {
            format!("status {}", Reply::parse(&out).status.unwrap_or_default())
        };
        println!("  $ dig {:<40} {shown}", args.join(" "));
    }

    println!("\n$ director-ctl stats");
    for line in lab
        .ctl_ok(&["stats"])
        .lines()
        .filter(|l| !l.trim_end().ends_with(" 0"))
    {
        println!("  {line}");
    }
    drop(controller);
    let _ = std::fs::remove_dir_all(&dir);
    println!("\ncleaning up namespaces and pins");
}
