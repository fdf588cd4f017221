//! The controller (`director-ctl check | explain | run --config FILE`) on real data and in
//! network namespaces: decisions computed from GeoLite2 City, a RouteViews RIB and real
//! points of presence; `run` keeping the kernel's tables equal to its inputs, swapping them
//! atomically under concurrent queries, keeping the last good decisions on bad input; and
//! `check` on damaged and wrong input files.
//!
//! Real data is read in place from `../shared/data` beside the checkout (see its README);
//! a missing file fails the test naming it. Test hosts use the documentation ranges; the
//! EDNS Client Subnet prefixes are real public networks, but only data inside the lab.
//!
//! Run as root: `cargo test -p director-tests --test controller -- --test-threads=1`.

use std::{
    fs,
    io::ErrorKind,
    net::{IpAddr, UdpSocket},
    os::fd::AsRawFd,
    path::Path,
    process::{Command, Output, Stdio},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    thread::sleep,
    time::{Duration, Instant},
};

use director_ctl::api;
use director_tests::config::Doc;
use director_tests::netns::{
    ctl_binary, describe, shared_data, Controller, Lab, Reply, EDGE_V4, EDGE_V6,
};
use director_tests::packets::{query, wire};
use director_tests::tempdir::{replace_file, TempDir};
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{RData, RecordType};
use serde::de::DeserializeOwned;

const WWW: &str = "www.example.com";

// ---------------------------------------------------------------------------------------
// Real data, temp directories, files

// ---------------------------------------------------------------------------------------
// Geography: the PoP list, great-circle distance, prefixes

/// (lat, lon) of a PoP by IATA code, read from cloudflare-colos.csv (quoted fields with
/// commas in them; columns found by the header).
fn colo(code: &str) -> (f64, f64) {
    let path = shared_data("sites/cloudflare-colos.csv");
    let text =
        fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let mut lines = text.lines();
    let header = split_csv(lines.next().expect("a header line"));
    let col = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("no column {name} in {header:?}"))
    };
    let (c, la, lo) = (col("colo"), col("lat"), col("lon"));
    for line in lines {
        let f = split_csv(line);
        if f.get(c).map(String::as_str) == Some(code) {
            let lat: f64 = f[la]
                .parse()
                .unwrap_or_else(|_| panic!("bad lat in {line:?}"));
            let lon: f64 = f[lo]
                .parse()
                .unwrap_or_else(|_| panic!("bad lon in {line:?}"));
            return (lat, lon);
        }
    }
    panic!("no PoP {code} in {}", path.display());
}

fn split_csv(line: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut quoted = false;
    for ch in line.chars() {
        match ch {
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(String::new()),
            _ => out.last_mut().unwrap().push(ch),
        }
    }
    out
}

/// Great-circle distance in km (haversine, mean Earth radius), the test's own.
fn km(a: (f64, f64), b: (f64, f64)) -> f64 {
    let (la1, la2) = (a.0.to_radians(), b.0.to_radians());
    let dlat = la2 - la1;
    let dlon = (b.1 - a.1).to_radians();
    let h = (dlat / 2.0).sin().powi(2) + la1.cos() * la2.cos() * (dlon / 2.0).sin().powi(2);
    2.0 * 6371.0 * h.sqrt().min(1.0).asin()
}

fn bits(a: IpAddr) -> (u128, u8) {
    match a {
        IpAddr::V4(v) => (u32::from(v) as u128, 32),
        IpAddr::V6(v) => (u128::from(v), 128),
    }
}

fn mask(width: u8, len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        (!0u128 << (128 - len as u32)) >> (128 - width as u32)
    }
}

/// Whether "addr/len" contains `addr`.
fn contains(prefix: &str, addr: IpAddr) -> bool {
    let (net, len) = prefix
        .split_once('/')
        .unwrap_or_else(|| panic!("not a prefix: {prefix}"));
    let net: IpAddr = net
        .parse()
        .unwrap_or_else(|_| panic!("not a prefix: {prefix}"));
    let len: u8 = len
        .parse()
        .unwrap_or_else(|_| panic!("not a prefix: {prefix}"));
    let ((n, w), (a, w2)) = (bits(net), bits(addr));
    w == w2 && (n & mask(w, len)) == (a & mask(w, len))
}

/// The /24 (IPv4) or /48 (IPv6) holding `addr`, as a resolver would send it in ECS.
fn ecs_subnet(addr: IpAddr) -> String {
    match addr {
        IpAddr::V4(v) => format!(
            "{}/24",
            std::net::Ipv4Addr::from(u32::from(v) & 0xffff_ff00)
        ),
        IpAddr::V6(v) => format!(
            "{}/48",
            std::net::Ipv6Addr::from(u128::from(v) & mask(128, 48))
        ),
    }
}

// ---------------------------------------------------------------------------------------
// The real-data config: five sites at real PoPs, one server each

struct Site {
    /// IATA code in the PoP list.
    code: &'static str,
    name: String,
    server: String,
    v4: String,
    v6: String,
    at: (f64, f64),
}

const POPS: [&str; 5] = ["FRA", "IAD", "GRU", "NRT", "SYD"];
/// The site that takes its BGP view from the RouteViews RIB slice, and the peer it uses
/// (AS3257, one of the 35 peers of rib.20140523.0600).
const BGP_SITE: &str = "fra";
const BGP_PEER: &str = "89.149.178.10";

fn sites() -> Vec<Site> {
    POPS.iter()
        .enumerate()
        .map(|(i, code)| {
            let name = code.to_ascii_lowercase();
            Site {
                code,
                server: format!("{name}-1"),
                v4: format!("198.51.100.{}", 11 + i),
                v6: format!("2001:db8:100::{}", 11 + i),
                at: colo(code),
                name,
            }
        })
        .collect()
}

fn real_config_text(sites: &[Site]) -> String {
    let mut t = format!(
        "[geo]\ndatabase = {:?}\n\n",
        shared_data("geo/GeoLite2-City.mmdb").display().to_string()
    );
    let rib = shared_data("bgp/rib.20140523.0600.slice-clean.bz2");
    for s in sites {
        t.push_str(&format!(
            "[[site]]\nname = {:?}\nlat = {:.6}\nlon = {:.6}\n",
            s.name, s.at.0, s.at.1
        ));
        if s.name == BGP_SITE {
            t.push_str(&format!(
                "bgp = [{:?}]\nbgp_peer = {BGP_PEER:?}\n",
                rib.display().to_string()
            ));
        }
        t.push('\n');
    }
    for s in sites {
        t.push_str(&format!(
            "[[server]]\nname = {:?}\nsite = {:?}\nipv4 = {:?}\nipv6 = {:?}\n\n",
            s.server, s.name, s.v4, s.v6
        ));
    }
    let names: Vec<String> = sites.iter().map(|s| format!("{:?}", s.server)).collect();
    t.push_str(&format!(
        "[[service]]\nname = {WWW:?}\nttl = 30\nservers = [{}]\n\
         priority = {{ geo = 1, admin = 2 }}\n",
        names.join(", ")
    ));
    t
}

/// Real clients on several continents, with a box their GeoLite2 location must fall in.
struct Client {
    addr: &'static str,
    region: &'static str,
    lat: (f64, f64),
    lon: (f64, f64),
}

const CLIENTS: [Client; 6] = [
    Client {
        addr: "193.0.0.1",
        region: "Netherlands (RIPE NCC)",
        lat: (50.5, 53.7),
        lon: (3.0, 7.3),
    },
    Client {
        addr: "200.160.2.3",
        region: "Brazil (NIC.br)",
        lat: (-34.0, 5.5),
        lon: (-74.0, -34.0),
    },
    Client {
        addr: "133.11.0.1",
        region: "Japan (U. Tokyo)",
        lat: (30.0, 46.0),
        lon: (128.0, 146.0),
    },
    Client {
        addr: "1.1.1.1",
        region: "Australia (APNIC/Cloudflare)",
        lat: (-44.0, -10.0),
        lon: (112.0, 154.0),
    },
    Client {
        addr: "8.8.8.8",
        region: "United States (Google)",
        lat: (24.0, 50.0),
        lon: (-125.0, -66.0),
    },
    Client {
        addr: "2001:200:dff:fff1::1",
        region: "Japan (WIDE, IPv6)",
        lat: (30.0, 46.0),
        lon: (128.0, 146.0),
    },
];

/// What `explain --json` says about one client, and which site the test finds nearest.
#[derive(Debug)]
struct Expect {
    client: IpAddr,
    location_prefix: String,
    location: (f64, f64),
    /// The server `explain` puts first (tier 0); must be a single one.
    winner: Vec<String>,
    /// Index into `sites()` of the nearest site by the test's own computation.
    nearest: usize,
    distances: Vec<f64>,
}

fn ctl(args: &[&str]) -> Output {
    Command::new(ctl_binary())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running director-ctl {args:?}: {e}"))
}

/// A command's `--json` document, parsed into the type director-ctl prints it from.
fn ctl_json<T: DeserializeOwned>(args: &[&str]) -> T {
    let out = ctl(args);
    assert!(
        out.status.success(),
        "director-ctl {args:?} failed: {}",
        describe(&out)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let doc: T = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("director-ctl {args:?} printed no such document ({e}): {text}"));
    doc
}

fn explain(config: &Path, sites: &[Site], c: &Client) -> Expect {
    let cfg = config.display().to_string();
    let j: api::Explain = ctl_json(&[
        "explain",
        "--config",
        &cfg,
        "--service",
        WWW,
        "--client",
        c.addr,
        "--json",
    ]);
    assert_eq!(j.version, api::VERSION);
    let client: IpAddr = c.addr.parse().unwrap();
    assert_eq!(j.client, client);
    let servers = &j.servers;
    assert_eq!(
        servers.len(),
        sites.len(),
        "{}: one row per server: {j:?}",
        c.addr
    );
    // The same location for every server.
    let loc = servers[0]
        .location
        .clone()
        .unwrap_or_else(|| panic!("{}: GeoLite2 has no location for it: {j:?}", c.addr));
    assert!(
        servers.iter().all(|s| s.location.as_ref() == Some(&loc)),
        "{j:?}"
    );
    let prefix = loc.prefix;
    let location = match (loc.lat, loc.lon) {
        (Some(lat), Some(lon)) => (lat, lon),
        _ => panic!("{}: located by a node, not a point: {loc:?}", c.addr),
    };
    assert!(
        prefix.contains(&client),
        "{}: location prefix {prefix} does not contain the client",
        c.addr
    );
    assert!(
        (c.lat.0..=c.lat.1).contains(&location.0) && (c.lon.0..=c.lon.1).contains(&location.1),
        "{} should be in {} but GeoLite2 puts it at {location:?} ({prefix})",
        c.addr,
        c.region
    );
    let bgp_prefix = servers
        .iter()
        .find(|s| s.site == BGP_SITE)
        .and_then(|s| s.bgp.as_ref().map(|b| b.prefix.to_string()));
    // explain names the route it used: a prefix holding the client, from the site's file.
    if let Some(p) = &bgp_prefix {
        assert!(
            contains(p, client),
            "{}: BGP prefix {p} does not hold it",
            c.addr
        );
    }
    // The location came from the GeoIP database named in the config.
    assert!(
        loc.file
            .as_ref()
            .is_some_and(|f| f.ends_with("GeoLite2-City.mmdb")),
        "{}: location source {:?}",
        c.addr,
        loc.file
    );
    let distances: Vec<f64> = sites.iter().map(|s| km(s.at, location)).collect();
    let mut order: Vec<usize> = (0..sites.len()).collect();
    order.sort_by(|a, b| distances[*a].total_cmp(&distances[*b]));
    let nearest = order[0];
    // The test's choice must not depend on small differences in how distance is computed.
    assert!(
        distances[order[1]] - distances[nearest] > 50.0,
        "{}: the two nearest sites are too close to tell apart: {distances:?}",
        c.addr
    );
    // explain's geo metric for each server agrees with the test's own distance.
    for (row, (s, d)) in servers.iter().zip(sites.iter().zip(&distances)) {
        assert_eq!(row.server, s.server);
        let geo = row
            .metrics
            .geo
            .unwrap_or_else(|| panic!("{}: no geo metric in {row:?}", c.addr));
        assert!(
            (geo - d).abs() < 3.0,
            "{}: explain's geo for {} is {geo} km, the test computes {d:.1} km",
            c.addr,
            s.server
        );
    }
    let tiers = &j.sort.tiers;
    assert!(!tiers.is_empty(), "{}: no tiers in {j:?}", c.addr);
    let winner = tiers[0].chosen.iter().map(|ch| ch.server.clone()).collect();
    Expect {
        client,
        location_prefix: prefix.to_string(),
        location,
        winner,
        nearest,
        distances,
    }
}

/// One dig from the client namespace, to director on the edge.
fn dig(lab: &Lab, rtype: &str, subnet: Option<&str>) -> Reply {
    let mut args = vec![format!("@{EDGE_V4}"), WWW.to_string(), rtype.to_string()];
    if let Some(s) = subnet {
        args.push(format!("+subnet={s}"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Reply::parse(&lab.dig(&args))
}

/// The answer's addresses of `rtype`, failing unless director answered.
fn answer(lab: &Lab, rtype: &str, subnet: Option<&str>) -> Vec<String> {
    let r = dig(lab, rtype, subnet);
    assert_eq!(
        r.status.as_deref(),
        Some("NOERROR"),
        "no answer for {rtype} (ECS {subnet:?}):\n{}",
        r.text
    );
    r.data(rtype)
}

// ---------------------------------------------------------------------------------------
// 1. check and explain on real data

#[test]
fn check_and_explain_on_real_data() {
    let t0 = Instant::now();
    let dir = TempDir::new("dctl", "real-check");
    let sites = sites();
    let config = dir.path("director.toml");
    fs::write(&config, real_config_text(&sites)).unwrap();
    let cfg = config.display().to_string();

    let t = Instant::now();
    let j: api::Check = ctl_json(&["check", "--config", &cfg, "--json"]);
    let check_s = t.elapsed().as_secs_f64();
    assert_eq!(j.version, api::VERSION);
    let (prefixes, entries, saved) = (j.prefixes, j.entries, j.saved);
    eprintln!("check: {prefixes} prefixes, {entries} entries, {saved} saved, in {check_s:.1} s");
    assert_eq!(j.sites, sites.len());
    assert_eq!(j.servers, sites.len());
    assert!(
        prefixes > 3_000_000,
        "only {prefixes} client prefixes from GeoLite2 City + the RIB: {j:?}"
    );
    assert!(
        entries < prefixes,
        "{entries} entries for {prefixes} prefixes: nothing compressed"
    );
    assert!(saved > 0, "nothing saved by compression");
    let tables = &j.tables;
    assert_eq!(tables.len(), 1);
    assert_eq!(tables[0].service, WWW);
    assert_eq!(tables[0].entries, entries);
    assert_eq!(
        entries + saved,
        prefixes,
        "every prefix is either an entry or saved"
    );
    let inputs = &j.inputs;
    assert!(
        inputs.geo_networks > 3_000_000,
        "GeoLite2 City has 3.48 M networks: {inputs:?}"
    );
    let bgp = &inputs.bgp_routes;
    for s in &sites {
        let n = bgp
            .iter()
            .find(|e| e.site == s.name)
            .unwrap_or_else(|| panic!("no bgp_routes entry for site {}: {bgp:?}", s.name))
            .routes;
        if s.name == BGP_SITE {
            assert!(
                n > 0,
                "site {} has no BGP routes from peer {BGP_PEER}",
                s.name
            );
            // One peer's view of the 9,072-prefix slice.
            assert!(
                n <= 9072,
                "site {}: {n} routes from a 9,072-prefix RIB",
                s.name
            );
        } else {
            assert_eq!(n, 0, "site {} has no bgp files but {n} routes", s.name);
        }
    }
    assert_eq!(inputs.bgp_damaged_skipped, 0);

    let t = Instant::now();
    for c in &CLIENTS {
        let e = explain(&config, &sites, c);
        let want = &sites[e.nearest];
        eprintln!(
            "explain {}: located {} {:?}, nearest {} ({:.0} km), explain chose {:?}",
            c.addr, e.location_prefix, e.location, want.code, e.distances[e.nearest], e.winner
        );
        assert_eq!(
            e.winner,
            vec![want.server.clone()],
            "{} ({}) at {:?}: the nearest site is {} ({:.0} km; all: {:?})",
            c.addr,
            c.region,
            e.location,
            want.code,
            e.distances[e.nearest],
            e.distances
        );
    }
    eprintln!(
        "explain: {} clients in {:.1} s; test total {:.1} s",
        CLIENTS.len(),
        t.elapsed().as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}

// ---------------------------------------------------------------------------------------
// 2. run on real data, answers checked with ECS from the client namespace

#[test]
fn run_on_real_data_answers_the_nearest_site() {
    let t0 = Instant::now();
    let dir = TempDir::new("dctl", "real-run");
    let sites = sites();
    let config = dir.path("director.toml");
    fs::write(&config, real_config_text(&sites)).unwrap();
    let lab = Lab::new();
    lab.attach();
    let mut run = Controller::start(&lab, &config, &dir.path("run.log"));
    // While run computes, find out what every client should get.
    let expects: Vec<Expect> = CLIENTS
        .iter()
        .map(|c| explain(&config, &sites, c))
        .collect();
    run.wait_for("entries written", 1, Duration::from_secs(150));
    let up = t0.elapsed().as_secs_f64();
    eprintln!("run: {}", run.log().trim_end());
    let status: api::Status = serde_json::from_str(&lab.ctl_ok(&["status", "--json"]))
        .expect("status --json is a Status document");
    let (v4, v6) = (status.routes_v4, status.routes_v6);
    // The kernel holds exactly the minimal table run computed ("N prefixes, M entries"),
    // far fewer than the 3.9 M client networks it decides for.
    let log = run.log();
    let entries: usize = log
        .split(" entries (")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no entry count in run's log:\n{log}"));
    assert!(
        v4 + v6 == entries && v4 > 100_000 && v6 > 10_000,
        "the kernel holds {v4} IPv4 and {v6} IPv6 decisions, run wrote {entries}: {status:?}"
    );

    for (c, e) in CLIENTS.iter().zip(&expects) {
        let want = &sites[e.nearest];
        let subnet = ecs_subnet(e.client);
        let (rtype, addr) = if e.client.is_ipv4() {
            ("A", &want.v4)
        } else {
            ("AAAA", &want.v6)
        };
        let r = dig(&lab, rtype, Some(&subnet));
        assert_eq!(
            r.status.as_deref(),
            Some("NOERROR"),
            "{} (ECS {subnet}): no answer from director:\n{}",
            c.addr,
            r.text
        );
        assert!(
            r.has_flag("aa"),
            "{}: not authoritative:\n{}",
            c.addr,
            r.text
        );
        assert_eq!(
            r.data(rtype),
            vec![addr.clone()],
            "{} ({}, ECS {subnet}) located at {:?}: want {} of the nearest site {} ({:.0} km)\n{}",
            c.addr,
            c.region,
            e.location,
            want.server,
            want.code,
            e.distances[e.nearest],
            r.text
        );
        assert!(
            r.answers.iter().all(|a| a.ttl == 30),
            "{}: TTL is not the service's 30:\n{}",
            c.addr,
            r.text
        );
        // "193.0.0.0/24/21": source and scope. The scope must be true: every address of
        // the client's network of that length gets the same answer (a resolver caches it
        // for all of them, RFC 7871 §7.3). Asked for the last address of the queried
        // subnet's network of that length, the kernel must answer the same.
        let ecs = r
            .client_subnet
            .as_deref()
            .unwrap_or_else(|| panic!("{}: no ECS in the reply:\n{}", c.addr, r.text));
        let scope: u8 = ecs
            .rsplit('/')
            .next()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("ECS {ecs:?}"));
        let queried: IpAddr = subnet
            .split('/')
            .next()
            .and_then(|a| a.parse().ok())
            .unwrap();
        let (bits, width) = bits(queried);
        assert!(
            (8..=width).contains(&scope),
            "{} (ECS {subnet}): scope /{scope} is not a network size\n{}",
            c.addr,
            r.text
        );
        let last = bits | !mask(width, scope) & mask(width, width);
        let last: IpAddr = if width == 32 {
            IpAddr::V4((last as u32).into())
        } else {
            IpAddr::V6(last.into())
        };
        let other = answer(&lab, rtype, Some(&format!("{last}/{width}")));
        assert_eq!(
            &other,
            &r.data(rtype),
            "{} (ECS {subnet}) got scope /{scope}, but {last} in that network is answered \
             otherwise",
            c.addr
        );
        eprintln!(
            "dig {rtype} +subnet={subnet}: {} ({}), scope /{scope}",
            addr, want.code
        );
    }
    run.assert_alive();
    run.stop();
    eprintln!(
        "run on real data: decisions in the kernel after {up:.1} s; test total {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}

// ---------------------------------------------------------------------------------------
// 3. servers changed under concurrent queries

/// x's and y's addresses, as tests/data/two_sites.toml gives them (swap_config writes
/// its own servers with the same ones).
const X_V4: &str = "198.51.100.10";
const X_V6: &str = "2001:db8:100::10";
const Y_V4: &str = "198.51.100.20";
const Y_V6: &str = "2001:db8:100::20";

/// Config A: one site, server x only, every client gets x.
/// Config B: server x and a new server y; every client gets y. Switching between them
/// changes the servers, so `run` rewrites every entry in place (apply.rs: `update`: the new
/// server first, then the decisions, then the removal of y only once nothing points at it),
/// and going back from B to A removes y.
fn swap_config(b: bool) -> String {
    let mut t = String::from("[[site]]\nname = \"edge\"\n\n");
    t.push_str(&format!(
        "[[server]]\nname = \"x\"\nsite = \"edge\"\nipv4 = {X_V4:?}\nipv6 = {X_V6:?}\n\n"
    ));
    if b {
        t.push_str(&format!(
            "[[server]]\nname = \"y\"\nsite = \"edge\"\nipv4 = {Y_V4:?}\nipv6 = {Y_V6:?}\n\n"
        ));
    }
    t.push_str(&format!(
        "[[service]]\nname = {WWW:?}\nttl = 30\nservers = [{}]\npriority = {{ admin = 1 }}\n",
        if b { "\"y\"" } else { "\"x\"" }
    ));
    t
}

#[derive(Default, Debug)]
struct Tally {
    queries: usize,
    x: usize,
    y: usize,
    /// Replies with no address, or another rcode.
    empty: Vec<String>,
    /// Addresses that are neither x's nor y's.
    other: Vec<String>,
    /// No reply within the timeout.
    timeouts: usize,
    /// ICMP port unreachable: director passed the query to the edge's stack, where nothing
    /// listens on port 53.
    refused: usize,
    /// When (since the loop started) each failed query was sent, and how it failed.
    failures: Vec<(Duration, &'static str)>,
}

/// Queries `www.example.com` from inside the client namespace, alternating A over IPv4 and
/// AAAA over IPv6, one at a time with a 1 s timeout each, until `stop` is set, `max`
/// queries were sent or `limit` passed. Runs on its own thread, which moves itself into the
/// client namespace (a network namespace belongs to the thread).
fn query_loop(ns: &str, stop: &AtomicBool, max: usize, limit: Duration) -> Tally {
    let f = fs::File::open(format!("/run/netns/{ns}")).expect("opening the client namespace");
    assert_eq!(
        unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) },
        0,
        "setns: {}",
        std::io::Error::last_os_error()
    );
    let v4 = UdpSocket::bind("0.0.0.0:0").expect("an IPv4 socket");
    v4.connect((EDGE_V4, 53)).unwrap();
    let v6 = UdpSocket::bind("[::]:0").expect("an IPv6 socket");
    v6.connect((EDGE_V6.parse::<IpAddr>().unwrap(), 53))
        .unwrap();
    for s in [&v4, &v6] {
        s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    }
    let start = Instant::now();
    let mut t = Tally::default();
    let mut buf = [0u8; 1500];
    let mut id: u16 = 0;
    while !stop.load(Ordering::Relaxed) && t.queries < max && start.elapsed() < limit {
        id = id.wrapping_add(1);
        let (sock, rtype, x, y) = if id.is_multiple_of(2) {
            (&v4, RecordType::A, X_V4, Y_V4)
        } else {
            (&v6, RecordType::AAAA, X_V6, Y_V6)
        };
        let sent = start.elapsed();
        sock.send(&wire(&query(id, WWW, rtype)))
            .expect("sending a query");
        t.queries += 1;
        // Read until the reply with this id (a late reply to an earlier query is skipped).
        let reply = loop {
            match sock.recv(&mut buf) {
                Ok(n) => match Message::from_vec(&buf[..n]) {
                    Ok(m) if m.id() == id => break Ok(m),
                    _ => continue,
                },
                Err(e) => break Err(e),
            }
        };
        let m = match reply {
            Ok(m) => m,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                t.timeouts += 1;
                t.failures.push((sent, "timeout"));
                continue;
            }
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                t.refused += 1;
                t.failures.push((sent, "refused (passed by director)"));
                continue;
            }
            Err(e) => panic!("receiving a reply: {e}"),
        };
        let addrs: Vec<String> = m
            .answers()
            .iter()
            .filter_map(|r| match r.data() {
                Some(RData::A(a)) => Some(a.0.to_string()),
                Some(RData::AAAA(a)) => Some(a.0.to_string()),
                _ => None,
            })
            .collect();
        if m.response_code() != ResponseCode::NoError || addrs.is_empty() {
            t.empty.push(format!(
                "{:?} {:?} {:?}",
                rtype,
                m.response_code(),
                m.answers()
            ));
            t.failures.push((sent, "empty"));
        } else if addrs == [x] {
            t.x += 1;
        } else if addrs == [y] {
            t.y += 1;
        } else {
            t.other.push(format!("{rtype:?} {addrs:?}"));
            t.failures.push((sent, "other address"));
        }
    }
    t
}

/// [`query_loop`] on a thread of its own, until [`Querier::finish`].
struct Querier {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Tally>,
}

impl Querier {
    fn start(lab: &Lab, limit: Duration) -> Querier {
        let stop = Arc::new(AtomicBool::new(false));
        let (ns, flag) = (lab.client_ns.clone(), stop.clone());
        let thread = std::thread::spawn(move || query_loop(&ns, &flag, 2_000_000, limit));
        Querier { stop, thread }
    }

    fn finish(self) -> Tally {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("the query thread panicked")
    }
}

#[test]
fn run_changes_servers_under_queries_without_a_wrong_answer() {
    let t0 = Instant::now();
    let dir = TempDir::new("dctl", "swap");
    let config = dir.path("director.toml");
    replace_file(&config, &swap_config(false));
    let lab = Lab::new();
    lab.attach();
    let mut run = swapping_controller(&lab, &config, &dir.path("run.log"));
    run.wait_for("entries written", 1, Duration::from_secs(20));
    assert_eq!(answer(&lab, "A", None), [X_V4]);

    let querier = Querier::start(&lab, Duration::from_secs(40));
    let started = Instant::now();
    // (when the new config was written, since the querier started; whether it was B)
    let mut swaps: Vec<(Duration, bool)> = Vec::new();
    const SWAPS: usize = 12;
    const REPLACED: &str = "servers or services changed:";
    let deadline = Instant::now() + Duration::from_secs(30);
    sleep(Duration::from_millis(200));
    for i in 0..SWAPS {
        let b = i % 2 == 0;
        swaps.push((started.elapsed(), b));
        replace_file(&config, &swap_config(b));
        run.wait_for(REPLACED, i + 1, Duration::from_secs(10));
        // Let queries see the new table for a while.
        sleep(Duration::from_millis(250));
        if Instant::now() > deadline {
            break;
        }
    }
    sleep(Duration::from_millis(200));
    let t = querier.finish();
    let swap_s = started.elapsed().as_secs_f64();
    run.assert_alive();
    eprintln!(
        "{} swaps in {swap_s:.1} s: {} queries, x {}, y {}, empty {}, other {}, \
         timeouts {}, refused {}",
        swaps.len(),
        t.queries,
        t.x,
        t.y,
        t.empty.len(),
        t.other.len(),
        t.timeouts,
        t.refused
    );
    // Each failure with the swap it fell in (the latest config write before it was sent).
    let located: Vec<String> = t
        .failures
        .iter()
        .take(20)
        .map(|(at, how)| {
            let last = swaps.iter().rev().find(|s| s.0 <= *at);
            match last {
                Some((w, b)) => format!(
                    "{how} {:.1} ms after writing config {}",
                    (*at - *w).as_secs_f64() * 1e3,
                    if *b { "B (x,y -> y)" } else { "A (x -> x)" }
                ),
                None => format!("{how} before the first swap"),
            }
        })
        .collect();
    assert!(
        t.queries >= 300,
        "only {} queries during the swaps",
        t.queries
    );
    assert!(
        t.x > 0 && t.y > 0,
        "answers never changed: x {} y {}",
        t.x,
        t.y
    );
    // Why director passed what it passed (pass_no_server: a decision whose servers are
    // all gone or down).
    let passes: Vec<(String, u64)> = lab
        .stats()
        .counters
        .into_iter()
        .filter(|(n, v)| n.starts_with("pass_") && *v > 0)
        .collect();
    assert!(
        t.timeouts == 0 && t.refused == 0 && t.empty.is_empty() && t.other.is_empty(),
        "of {} queries during {} server changes, {} timed out, {} were passed by director \
         (refused), {} had no address ({:?}), {} had another address ({:?}); first failures: \
         {located:#?}\ndirector's non-zero pass counters: {passes:?}\nrun's stderr:\n{}",
        t.queries,
        swaps.len(),
        t.timeouts,
        t.refused,
        t.empty.len(),
        t.empty.iter().take(3).collect::<Vec<_>>(),
        t.other.len(),
        t.other.iter().take(3).collect::<Vec<_>>(),
        run.log()
    );
    run.stop();
    eprintln!("swap test total {:.1} s", t0.elapsed().as_secs_f64());
}

/// `run` for an operator who swaps configs on purpose: going from B back to A removes
/// server y, half of the servers, which the removal guard (default share 0.25) would
/// otherwise hold back for confirmation.
fn swapping_controller(lab: &Lab, config: &Path, log: &Path) -> Controller {
    Controller::start_with(lab, config, log, 50, &["--max-removal-share", "1"])
}

/// `run` killed with SIGKILL at any moment and started again, on the same config or on
/// the other one, while queries keep coming: every query is answered, always with x or y
/// (the old table or the new one, never nothing and never a third answer), and a restart
/// on unchanged inputs writes nothing.
#[test]
fn run_killed_and_restarted_never_breaks_answers() {
    let dir = TempDir::new("dctl", "kill");
    let config = dir.path("director.toml");
    replace_file(&config, &swap_config(false));
    let lab = Lab::new();
    lab.attach();
    let mut run = swapping_controller(&lab, &config, &dir.path("run-0.log"));
    run.wait_for("entries written", 1, Duration::from_secs(20));
    let querier = Querier::start(&lab, Duration::from_secs(60));
    sleep(Duration::from_millis(200));
    const ROUNDS: usize = 10;
    let mut unchanged_writes = Vec::new();
    for i in 1..=ROUNDS {
        // Odd rounds switch config (the restart writes the difference), even rounds restart
        // on the same one; half of them are killed again a few ms into their start.
        let b = i.div_ceil(2) % 2 == 1;
        let same = i % 2 == 0;
        run.kill();
        replace_file(&config, &swap_config(b));
        run = swapping_controller(&lab, &config, &dir.path(&format!("run-{i}.log")));
        if i % 4 == 1 {
            sleep(Duration::from_millis(2 * i as u64));
            run.kill();
            run = swapping_controller(&lab, &config, &dir.path(&format!("run-{i}b.log")));
        }
        run.wait_for("entries written", 1, Duration::from_secs(20));
        if same {
            let log = run.log();
            unchanged_writes.push(log.contains(" 0 entries written"));
        }
        sleep(Duration::from_millis(150));
    }
    sleep(Duration::from_millis(200));
    let t = querier.finish();
    run.assert_alive();
    eprintln!(
        "{ROUNDS} kills and restarts: {} queries, x {}, y {}, empty {}, other {}, timeouts {}, \
         refused {}",
        t.queries,
        t.x,
        t.y,
        t.empty.len(),
        t.other.len(),
        t.timeouts,
        t.refused
    );
    assert!(t.queries >= 200, "only {} queries", t.queries);
    assert!(
        t.x > 0 && t.y > 0,
        "answers never changed: x {} y {}",
        t.x,
        t.y
    );
    assert!(
        t.timeouts == 0 && t.refused == 0 && t.empty.is_empty() && t.other.is_empty(),
        "{} timed out, {} passed, {} empty ({:?}), {} other ({:?})",
        t.timeouts,
        t.refused,
        t.empty.len(),
        t.empty.iter().take(3).collect::<Vec<_>>(),
        t.other.len(),
        t.other.iter().take(3).collect::<Vec<_>>()
    );
    assert!(
        unchanged_writes.iter().all(|&w| w),
        "a restart on unchanged inputs wrote entries: {unchanged_writes:?}\n{}",
        run.log()
    );
    run.stop();
}

// ---------------------------------------------------------------------------------------
// 4. bad input keeps the last good decisions

/// Two sites with a server each; the lowest RTT wins, then the lower preference (y has 10).
fn rtt_config(rtt: &Path, extra_server: Option<&str>, x_preference: u32) -> String {
    let mut c = Doc::two_sites();
    c.set("server", "x", "preference", i64::from(x_preference));
    if let Some(s) = extra_server {
        c.set("service", WWW, "servers", vec!["x", "y", s]);
    }
    c.add(&format!(
        "[rtt]\nfiles = [{:?}]\n",
        rtt.display().to_string()
    ));
    c.text()
}

#[test]
fn run_keeps_the_last_good_decisions_on_bad_input() {
    let t0 = Instant::now();
    let dir = TempDir::new("dctl", "bad-input");
    let config = dir.path("director.toml");
    let rtt = dir.path("rtt.csv");
    // The client's own network is nearer a (x); nothing is measured elsewhere, where the
    // preference picks y (x has 20). So the table has an entry of its own for 192.0.2.0/24.
    replace_file(
        &rtt,
        "# prefix,site,rtt_ms\n192.0.2.0/24,a,10\n192.0.2.0/24,b,50\n",
    );
    replace_file(&config, &rtt_config(&rtt, None, 20));
    let lab = Lab::new();
    lab.attach();
    let mut run = Controller::start(&lab, &config, &dir.path("run.log"));
    run.wait_for("entries written", 1, Duration::from_secs(20));
    let routes = |lab: &Lab| lab.ctl_ok(&["route", "list", "--json"]);
    let r0 = routes(&lab);
    assert!(
        r0.contains("192.0.2.0/24"),
        "no decision for the client's network: {r0}"
    );
    let elsewhere = "203.0.113.0/24";
    let before = (
        answer(&lab, "A", None),
        answer(&lab, "AAAA", None),
        answer(&lab, "A", Some(elsewhere)),
    );
    assert_eq!(
        before,
        (
            vec![X_V4.to_string()],
            vec![X_V6.to_string()],
            vec![Y_V4.to_string()]
        )
    );

    // A config naming a server that does not exist.
    const KEEP: &str = "keeping the last good decisions";
    replace_file(&config, &rtt_config(&rtt, Some("nope-1"), 20));
    run.wait_for(KEEP, 1, Duration::from_secs(10));
    let log = run.log();
    let line = log.lines().rfind(|l| l.contains(KEEP)).unwrap();
    assert!(
        line.contains("unknown server \"nope-1\"") && line.contains(&config.display().to_string()),
        "the error should name the file and the server: {line}"
    );
    sleep(Duration::from_millis(300));
    run.assert_alive();
    assert_eq!(
        routes(&lab),
        r0,
        "the kernel's decisions changed after a bad config"
    );
    assert_eq!(
        (
            answer(&lab, "A", None),
            answer(&lab, "AAAA", None),
            answer(&lab, "A", Some(elsewhere))
        ),
        before
    );

    // A good config again, with a change: x's preference (0) now beats y's where no RTT
    // decides (everyone but 192.0.2.0/24). Updates resume.
    replace_file(&config, &rtt_config(&rtt, None, 0));
    run.wait_for("servers or services changed", 1, Duration::from_secs(10));
    let r1 = routes(&lab);
    assert_ne!(r1, r0, "a good config after a bad one was not applied");
    assert_eq!(
        answer(&lab, "A", None),
        [X_V4],
        "the client's network still measures a faster"
    );
    assert_eq!(
        answer(&lab, "A", Some(elsewhere)),
        [X_V4],
        "elsewhere the preference now picks x"
    );

    // An RTT file with a bad prefix (a good line first: nothing of it may be used).
    replace_file(
        &rtt,
        "192.0.2.0/24,a,50\n192.0.2.0/24,b,10\n192.0.2.300/24,a,10\n",
    );
    run.wait_for(KEEP, 2, Duration::from_secs(10));
    let log = run.log();
    let line = log.lines().rfind(|l| l.contains(KEEP)).unwrap();
    assert!(
        line.contains(&rtt.display().to_string()) && line.contains("192.0.2.300/24"),
        "the error should name the RTT file and the prefix: {line}"
    );
    sleep(Duration::from_millis(300));
    run.assert_alive();
    assert_eq!(
        routes(&lab),
        r1,
        "the kernel's decisions changed after a bad RTT file"
    );
    assert_eq!(answer(&lab, "A", None), [X_V4]);
    assert_eq!(answer(&lab, "AAAA", None), [X_V6]);

    // A good RTT file: b is now faster for the client's network.
    let rewritten = run.count("entries rewritten");
    replace_file(&rtt, "192.0.2.0/24,a,50\n192.0.2.0/24,b,10\n");
    run.wait_for("entries rewritten", rewritten + 1, Duration::from_secs(10));
    assert_ne!(
        routes(&lab),
        r1,
        "a good RTT file after a bad one was not applied"
    );
    assert_eq!(answer(&lab, "A", None), [Y_V4]);
    assert_eq!(answer(&lab, "AAAA", None), [Y_V6]);
    assert_eq!(answer(&lab, "A", Some(elsewhere)), [X_V4]);
    assert_eq!(run.count(KEEP), 2, "unexpected errors: {}", run.log());
    run.stop();
    eprintln!(
        "run's stderr:\n{}bad-input test total {:.1} s",
        run.log(),
        t0.elapsed().as_secs_f64()
    );
}

const API: &str = "api.example.com";

/// [`rtt_config`] with a second service, last in the file, that always answers y: cut off
/// before it, the file is still a valid config, with one service fewer.
fn guarded_config(rtt: &Path) -> String {
    format!(
        "{}\n[[service]]\nname = {API:?}\nttl = 30\nservers = [\"y\"]\n\
         priority = {{ admin = 1 }}\n",
        rtt_config(rtt, None, 20)
    )
}

/// The A records director answers for `name` (failing unless it answers).
fn answer_a(lab: &Lab, name: &str, subnet: Option<&str>) -> Vec<String> {
    let mut args = vec![format!("@{EDGE_V4}"), name.to_string(), "A".to_string()];
    if let Some(s) = subnet {
        args.push(format!("+subnet={s}"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = Reply::parse(&lab.dig(&args));
    assert_eq!(
        r.status.as_deref(),
        Some("NOERROR"),
        "no answer for {name}:\n{}",
        r.text
    );
    r.data("A")
}

/// Half-written inputs: a config truncated in place to a valid prefix of itself (one
/// service fewer) and an emptied RTT file are refused with a line naming the file and what
/// would go, the kernel keeps answering as before; SIGUSR1 confirms the change.
#[test]
fn run_refuses_a_truncated_config_and_an_emptied_rtt_file() {
    let dir = TempDir::new("dctl", "guard");
    let config = dir.path("director.toml");
    let rtt = dir.path("rtt.csv");
    replace_file(&rtt, "192.0.2.0/24,a,10\n192.0.2.0/24,b,50\n");
    let full = guarded_config(&rtt);
    replace_file(&config, &full);
    let t0 = Instant::now();
    let lab = Lab::new();
    lab.attach();
    let mut run = Controller::start(&lab, &config, &dir.path("run.log"));
    run.wait_for("entries written", 1, Duration::from_secs(20));
    eprintln!("started in {:.1} s", t0.elapsed().as_secs_f64());
    let routes = |lab: &Lab| lab.ctl_ok(&["route", "list", "--json"]);
    let elsewhere = "203.0.113.0/24";
    let answers = |lab: &Lab| {
        (
            answer_a(lab, WWW, None),
            answer_a(lab, WWW, Some(elsewhere)),
            answer_a(lab, API, None),
        )
    };
    let r0 = routes(&lab);
    let before = answers(&lab);
    assert_eq!(
        before,
        (
            vec![X_V4.to_string()],
            vec![Y_V4.to_string()],
            vec![Y_V4.to_string()]
        )
    );

    // The config cut off before its second service, written in place (not renamed).
    const REFUSED: &str = "refusing the change to";
    let cut = full.find(&format!("[[service]]\nname = {API:?}")).unwrap();
    fs::write(&config, &full[..cut]).unwrap();
    run.wait_for(REFUSED, 1, Duration::from_secs(10));
    let log = run.log();
    let line = log.lines().rfind(|l| l.contains(REFUSED)).unwrap();
    assert!(
        line.contains(&config.display().to_string())
            && line.contains("1 of 2 services (api.example.com)"),
        "the refusal should name the config and the service it drops: {line}"
    );
    sleep(Duration::from_millis(300));
    run.assert_alive();
    assert_eq!(
        routes(&lab),
        r0,
        "the kernel's decisions changed after a truncated config"
    );
    assert_eq!(answers(&lab), before);

    // The whole config again: nothing to refuse (and nothing to write).
    replace_file(&config, &full);
    run.wait_for("up to date again", 1, Duration::from_secs(10));

    // The RTT file emptied in place, as `>` leaves it before the writer writes.
    fs::write(&rtt, "").unwrap();
    run.wait_for(REFUSED, 2, Duration::from_secs(10));
    let log = run.log();
    let line = log.lines().rfind(|l| l.contains(REFUSED)).unwrap();
    assert!(
        line.contains(&rtt.display().to_string()) && line.contains("2 of 2 RTT measurements"),
        "the refusal should name the RTT file and the measurements it drops: {line}"
    );
    sleep(Duration::from_millis(300));
    run.assert_alive();
    assert_eq!(
        routes(&lab),
        r0,
        "the kernel's decisions changed after an emptied RTT file"
    );
    assert_eq!(answers(&lab), before);
    // A plain reload does not confirm it.
    run.signal(libc::SIGHUP);
    run.wait_for(REFUSED, 3, Duration::from_secs(10));
    assert_eq!(answers(&lab), before);

    // The operator confirms: without RTT the preference decides (y's 10 beats x's 20).
    run.signal(libc::SIGUSR1);
    run.wait_for("removal confirmed by SIGUSR1", 1, Duration::from_secs(10));
    let log = run.log();
    let line = log.lines().rfind(|l| l.contains("confirmed")).unwrap();
    assert!(line.contains("2 of 2 RTT measurements"), "{line}");
    run.wait_for("up to date again", 2, Duration::from_secs(10));
    assert_eq!(answer_a(&lab, WWW, None), [Y_V4]);
    assert_eq!(answer_a(&lab, API, None), [Y_V4]);
    assert_eq!(run.count(REFUSED), 3, "unexpected refusals: {}", run.log());
    run.stop();
    eprintln!("guard test total {:.1} s", t0.elapsed().as_secs_f64());
}

// ---------------------------------------------------------------------------------------
// 5. check on damaged and wrong input files

fn small_config(bgp: Option<&Path>, database: Option<&Path>) -> String {
    let mut t = String::new();
    if let Some(db) = database {
        t.push_str(&format!(
            "[geo]\ndatabase = {:?}\n\n",
            db.display().to_string()
        ));
    }
    t.push_str("[[site]]\nname = \"fra\"\nlat = 50.026402\nlon = 8.54313\n");
    if let Some(f) = bgp {
        t.push_str(&format!("bgp = [{:?}]\n", f.display().to_string()));
    }
    t.push_str(&format!(
        "\n[[server]]\nname = \"fra-1\"\nsite = \"fra\"\nipv4 = {X_V4:?}\n\n\
         [[service]]\nname = {WWW:?}\nservers = [\"fra-1\"]\npriority = {{ geo = 1, admin = 2 }}\n"
    ));
    t
}

/// `check` must fail with one line on stderr that names `file`.
fn check_fails_naming(dir: &TempDir, what: &str, text: String, file: &Path) {
    let config = dir.path(&format!("{what}.toml"));
    fs::write(&config, text).unwrap();
    let out = ctl(&["check", "--config", &config.display().to_string(), "--json"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "check accepted {what}: {}",
        describe(&out)
    );
    assert!(
        out.stdout.is_empty(),
        "check printed a summary for {what}: {}",
        describe(&out)
    );
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "{what}: not one error line: {}",
        describe(&out)
    );
    assert!(err.starts_with("director-ctl: "), "{what}: {err}");
    assert!(
        err.contains(&file.display().to_string()),
        "{what}: the error does not name {}: {err}",
        file.display()
    );
    eprintln!("{what}: {}", err.trim_end());
}

#[test]
fn check_reports_damaged_and_refuses_wrong_input_files() {
    let dir = TempDir::new("dctl", "check-inputs");
    // A real RIPE file with broken record boundaries: read, damage skipped and counted.
    let damaged = shared_data("bgp/damaged.updates.20000325.0345.gz");
    let config = dir.path("damaged.toml");
    fs::write(&config, small_config(Some(&damaged), None)).unwrap();
    let j: api::Check = ctl_json(&["check", "--config", &config.display().to_string(), "--json"]);
    let inputs = &j.inputs;
    let skipped = inputs.bgp_damaged_skipped;
    let routes = inputs.bgp_routes[0].routes;
    eprintln!(
        "damaged MRT: {skipped} damaged stretches skipped, {routes} routes, {} records",
        inputs.bgp_records
    );
    assert!(
        skipped > 0,
        "no damage reported for {}: {inputs:?}",
        damaged.display()
    );
    assert!(
        routes > 0,
        "nothing read from {}: {inputs:?}",
        damaged.display()
    );

    // A text file given as MRT.
    let text = dir.path("routes.txt");
    fs::write(
        &text,
        "# not MRT\n192.0.2.0/24 via 198.51.100.1\n203.0.113.0/24 via 198.51.100.2\n",
    )
    .unwrap();
    check_fails_naming(&dir, "text-as-mrt", small_config(Some(&text), None), &text);
    // A GeoIP database that is not there.
    let missing = dir.path("missing/GeoLite2-City.mmdb");
    check_fails_naming(
        &dir,
        "missing-mmdb",
        small_config(None, Some(&missing)),
        &missing,
    );
    // A broken one (MaxMind's test database with a malformed double).
    let broken = shared_data("geo/test/GeoIP2-City-Test-Broken-Double-Format.mmdb");
    check_fails_naming(
        &dir,
        "broken-mmdb",
        small_config(None, Some(&broken)),
        &broken,
    );
}
