//! Live BGP over BMP, end to end: a GoBGP injector originates routes to a real router (FRR
//! with its BMP module, or GoBGP), the router reports them over BMP to `director-ctl run`
//! in the edge namespace, and dig's answers (with an EDNS Client Subnet in the announced
//! prefixes) follow the router's table.
//!
//! The config: site a's view is the router; site b has no routes. www sorts by `ext` (the
//! AS-path length) then `admin` (y at b wins). So a client in an announced prefix gets x
//! (a has a route, b none), and once it is withdrawn everywhere y. The announced prefixes
//! are in 198.18.0.0/15 (benchmarking): no packet goes there, they only name clients.
//!
//! Run as root: `cargo test -p director-tests --test live_bgp`.

use std::{
    net::IpAddr,
    path::Path,
    thread::sleep,
    time::{Duration, Instant},
};

use director_tests::config::Doc;
use director_tests::netns::{Controller, Lab, Reply, EDGE_V4};
use director_tests::routers::{Options, RouterKind, RouterLab};
use director_tests::tempdir::{replace_file, TempDir};

const WWW: &str = "www.example.com";
const X_V4: &str = "198.51.100.10";
const Y_V4: &str = "198.51.100.20";
const COLLECTOR: &str = "198.51.100.250";
const BMP_PORT: u16 = 5000;
const PREFIX: &str = "198.18.0.0/16";
const CLIENT: &str = "198.18.5.0/24";

fn config(router: IpAddr, hold: u64, metrics_port: u16) -> String {
    let mut c = Doc::two_sites();
    c.set("site", "a", "bmp_router", router.to_string());
    c.set(
        "service",
        WWW,
        "priority",
        toml::Value::Table(
            [
                ("ext".to_string(), toml::Value::Integer(1)),
                ("admin".to_string(), toml::Value::Integer(2)),
            ]
            .into_iter()
            .collect(),
        ),
    );
    c.add(&format!(
        "[bgp]\nbmp_listen = \"{COLLECTOR}:{BMP_PORT}\"\nhold = {hold}\nquiet = 2\n\n\
         [metrics]\nlisten = \"127.0.0.1:{metrics_port}\"\n"
    ));
    c.text()
}

/// The A answer for a client in `subnet` (ECS), or "" when director did not answer.
fn answer(lab: &Lab, subnet: &str) -> String {
    let r = Reply::parse(&lab.dig(&[
        &format!("@{EDGE_V4}"),
        WWW,
        "A",
        &format!("+subnet={subnet}"),
        "+tries=1",
        "+time=1",
    ]));
    r.data("A").join(",")
}

/// Polls until the answer for `subnet` is `want`; the time it took.
fn until(lab: &Lab, subnet: &str, want: &str, within: Duration) -> Duration {
    let t0 = Instant::now();
    loop {
        let got = answer(lab, subnet);
        if got == want {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < within,
            "{subnet}: still {got:?} after {within:?}, want {want:?}"
        );
        sleep(Duration::from_millis(5));
    }
}

fn p95(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[(v.len() * 95).div_ceil(100) - 1]
}

struct Setup {
    lab: Lab,
    routers: RouterLab,
    run: Controller,
    dir: TempDir,
    metrics_port: u16,
}

/// The edge lab, a router of `kind` with two injector peers reporting to `run`, and `run`
/// with the router's first table in.
fn setup(tag: &str, kind: RouterKind, hold: u64) -> Setup {
    let dir = TempDir::new("dlive", tag);
    let lab = Lab::new();
    lab.attach();
    let mut routers = RouterLab::start_with(
        tag,
        &lab.edge_ns,
        std::net::SocketAddr::new(COLLECTOR.parse().unwrap(), BMP_PORT),
        Options {
            peers: 2,
            ..Options::new(kind)
        },
    );
    let metrics_port = 19_180;
    let cfg = dir.path("director.toml");
    replace_file(&cfg, &config(routers.router_bmp_addr, hold, metrics_port));
    let mut run = Controller::start(&lab, &cfg, &dir.path("run.log"));
    run.wait_for("entries written", 1, Duration::from_secs(30));
    routers.wait_bmp_connected(Duration::from_secs(30));
    run.wait_for("synced", 1, Duration::from_secs(30));
    Setup {
        lab,
        routers,
        run,
        dir,
        metrics_port,
    }
}

/// Announce and withdraw at the injector, 20 times each: the answers follow, each within
/// 5 s (the times, from the injector's command to dig's answer, are printed; the aim of
/// 1 s at the 95th percentile is `cargo xtask bench --only live`'s to measure, with the
/// full table); a peer going down takes its routes with it; both going down at once is
/// refused; `explain --run` names the router behind the route.
#[test]
fn frr_routes_steer_answers_and_withdrawals_and_peer_down_follow() {
    let mut s = setup("frr", RouterKind::Frr, 300);
    assert_eq!(answer(&s.lab, CLIENT), Y_V4, "no route yet: admin picks y");
    let mut announce = Vec::new();
    let mut withdraw = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        s.routers.announce(PREFIX, &[64501], None, None);
        until(&s.lab, CLIENT, X_V4, Duration::from_secs(5));
        announce.push(t.elapsed());
        let t = Instant::now();
        s.routers.withdraw(PREFIX);
        until(&s.lab, CLIENT, Y_V4, Duration::from_secs(5));
        withdraw.push(t.elapsed());
    }
    let (pa, pw) = (p95(announce.clone()), p95(withdraw.clone()));
    eprintln!(
        "announce → answer: p95 {pa:?} (max {:?}); withdraw → answer: p95 {pw:?} (max {:?})",
        announce.iter().max().unwrap(),
        withdraw.iter().max().unwrap()
    );
    // Unannounced space is not touched: another client keeps y throughout.
    assert_eq!(answer(&s.lab, "198.19.0.0/24"), Y_V4);

    s.routers.announce(PREFIX, &[64501], None, None);
    until(&s.lab, CLIENT, X_V4, Duration::from_secs(5));
    let e = s.lab.ctl_in(
        &s.lab.edge_ns,
        &[
            "explain",
            "--run",
            &format!("127.0.0.1:{}", s.metrics_port),
            "--service",
            WWW,
            "--client",
            "198.18.5.1",
            "--json",
        ],
    );
    assert!(e.status.success(), "{}", String::from_utf8_lossy(&e.stderr));
    let e: director_ctl::api::Explain = serde_json::from_slice(&e.stdout).unwrap();
    let x = e.servers.iter().find(|v| v.server == "x").unwrap();
    let bgp = x.bgp.as_ref().expect("x's site has the route");
    assert_eq!(bgp.prefix.to_string(), PREFIX);
    assert_eq!(bgp.router, Some(s.routers.router_bmp_addr.to_string()));
    // The router's own AS, which FRR puts in front in BMP, is not counted.
    assert_eq!(bgp.as_path_len, 2, "{bgp:?}");

    // The peer that announced it goes down: its routes go with it.
    let t = Instant::now();
    s.routers.peer_down_at(0);
    until(&s.lab, CLIENT, Y_V4, Duration::from_secs(5));
    let down = t.elapsed();
    eprintln!("peer down → answer: {down:?}");
    s.routers.peer_up_at(0);
    s.routers.announce(PREFIX, &[64501], None, None);
    until(&s.lab, CLIENT, X_V4, Duration::from_secs(20));

    // Both peers down at once: every site would lose everything; the routes stand.
    s.routers.peer_down_at(0);
    s.routers.peer_down_at(1);
    s.run
        .wait_for("lost all its peers", 1, Duration::from_secs(10));
    for _ in 0..10 {
        assert_eq!(answer(&s.lab, CLIENT), X_V4, "refused loss applied");
        sleep(Duration::from_millis(100));
    }
    s.run.assert_alive();
    drop(s.dir);
}

/// A lost BMP session keeps its routes for the hold time, then they go; the router coming
/// back restores them. A restart of `run` changes no answer while the router resends.
#[test]
fn a_lost_session_keeps_routes_for_the_hold_time_and_a_restart_keeps_decisions() {
    let hold = 6;
    let mut s = setup("hold", RouterKind::Frr, hold);
    s.routers.announce(PREFIX, &[64501], None, None);
    until(&s.lab, CLIENT, X_V4, Duration::from_secs(5));

    // The router's BMP socket is reset (the collector sees the session end at once; after
    // a silent cut TCP keepalive takes about two minutes to tell), then the link is cut so
    // that the router cannot come back.
    let cut = Instant::now();
    s.routers.bmp_reset();
    s.routers.bmp_down();
    // Until the hold time has passed, the stale routes stand.
    while cut.elapsed() < Duration::from_secs(hold - 1) {
        assert_eq!(answer(&s.lab, CLIENT), X_V4, "at {:?}", cut.elapsed());
        sleep(Duration::from_millis(200));
    }
    let gone =
        until(&s.lab, CLIENT, Y_V4, Duration::from_secs(hold + 5)) + Duration::from_secs(hold - 1);
    eprintln!("routes removed {gone:?} after the BMP link was cut (hold {hold} s)");
    s.routers.bmp_up();
    until(&s.lab, CLIENT, X_V4, Duration::from_secs(30));

    // run restarted: the kernel's decisions stand until the router has resent its table.
    let cfg = s.dir.path("director.toml");
    s.run.stop();
    let t = Instant::now();
    let mut run = Controller::start(&s.lab, &cfg, &s.dir.path("run2.log"));
    let mut asked = 0;
    while run.count("synced") == 0 {
        assert_eq!(
            answer(&s.lab, CLIENT),
            X_V4,
            "during the restart, at {:?}",
            t.elapsed()
        );
        asked += 1;
        assert!(t.elapsed() < Duration::from_secs(30), "{}", run.log());
    }
    run.wait_for("entries written", 1, Duration::from_secs(30));
    for _ in 0..20 {
        assert_eq!(answer(&s.lab, CLIENT), X_V4, "after the restart");
    }
    eprintln!("{asked} answers during the restart, all x");
    run.assert_alive();
}

/// GoBGP as the router: it sends no End-of-RIB after its dump, so its sync ends after the
/// quiet period; its routes steer answers like FRR's.
#[test]
fn gobgp_as_the_router_steers_answers() {
    let s = setup("gobgp", RouterKind::Gobgp, 300);
    s.routers.announce(PREFIX, &[64501, 64502], None, None);
    until(&s.lab, CLIENT, X_V4, Duration::from_secs(5));
    s.routers.withdraw(PREFIX);
    until(&s.lab, CLIENT, Y_V4, Duration::from_secs(5));
}

/// A slice of the real IPv4 table (50,000 routes from a RouteViews dump) through the
/// router: `run` takes it at the router's pace and has decided it a few seconds after.
#[test]
fn a_slice_of_the_real_table_is_taken_and_decided() {
    let mut s = setup("slice", RouterKind::Frr, 300);
    let table = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data/bgp/rib.20140523.0600.slice-clean.bz2");
    assert!(
        table.is_file(),
        "{} is missing (shared/data)",
        table.display()
    );
    let before = s.run.count("live inputs changed");
    let t = Instant::now();
    let inj = s.routers.inject_mrt(&table, Some(50_000));
    s.run
        .wait_for("live inputs changed", before + 1, Duration::from_secs(60));
    // The last batch is decided after the router's last route arrived.
    sleep(Duration::from_secs(3));
    let log = s.run.log();
    let taken: usize = log
        .lines()
        .filter(|l| l.contains("live inputs changed ("))
        .filter_map(|l| {
            l.split("changed (")
                .nth(1)?
                .split(' ')
                .next()?
                .parse::<usize>()
                .ok()
        })
        .sum();
    eprintln!(
        "{} routes injected, at the router in {:?}, decided by run {:?} after the start ({} \
         route changes taken)",
        inj.routes,
        inj.converged,
        t.elapsed(),
        taken
    );
    assert!(
        taken >= inj.routes * 9 / 10,
        "run took {taken} route changes of {} injected:\n{log}",
        inj.routes
    );
    s.run.assert_alive();
}

/// A BMP session from an address not in `bmp_allow` (by default the sites' `bmp_router`
/// addresses) is closed before its first message is read, logged and counted; nothing it
/// sent reaches the routes, and the listed router still syncs and steers.
#[test]
fn a_session_from_an_address_not_allowed_is_closed_unread_and_counted() {
    use director_plan::inputs::bmp::encode::{ann, eor, initiation, peer, peer_up, route};
    use director_plan::inputs::bmp::Policy;
    use std::io::{Read, Write};

    let mut s = setup("allow", RouterKind::Gobgp, 300);
    // An intruder in the edge namespace, from 127.0.0.1: a whole dump of its own.
    let p = peer("192.0.2.66", 64666, Policy::Pre);
    let dump = [
        initiation("intruder"),
        peer_up(&p, 64666, &[1]),
        route(&p, &ann(&[CLIENT], &[64666])),
        eor(&p, false),
    ]
    .concat();
    let ns = s.lab.edge_ns.clone();
    let closed = std::thread::spawn(move || {
        director_tests::delay::enter(&ns).expect("entering the edge namespace");
        let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("a socket");
        sock.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
            .expect("binding 127.0.0.1");
        let to = std::net::SocketAddr::new(COLLECTOR.parse().unwrap(), BMP_PORT);
        sock.connect(&to.into()).expect("connecting to bmp_listen");
        let mut c: std::net::TcpStream = sock.into();
        let _ = c.write_all(&dump);
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut b = [0u8; 16];
        match c.read(&mut b) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        }
    })
    .join()
    .expect("the intruder's thread");
    assert!(closed, "the session from 127.0.0.1 was not closed");
    s.run.wait_for(
        "BMP session from 127.0.0.1 refused: not in [bgp] bmp_allow",
        1,
        Duration::from_secs(5),
    );
    let samples =
        director_tests::metrics::scrape(&s.lab.edge_ns, &format!("127.0.0.1:{}", s.metrics_port))
            .unwrap();
    let refused = |reason| {
        director_tests::metrics::value(
            &samples,
            "director_bmp_refused_total",
            &[("reason", reason)],
        )
    };
    assert_eq!(refused("not_allowed"), Some(1.0));
    assert_eq!(refused("over_cap"), Some(0.0));
    let routers: Vec<&String> = samples
        .iter()
        .filter(|(m, _, _)| m == "director_bmp_session_up")
        .flat_map(|(_, l, _)| l.iter().map(|(_, v)| v))
        .collect();
    assert!(
        routers.len() == 1
            && !routers
                .iter()
                .any(|r| *r == "intruder" || *r == "127.0.0.1"),
        "only the listed router has a session: {routers:?}"
    );
    assert_eq!(answer(&s.lab, CLIENT), Y_V4, "no route taken");
    // The listed router still steers.
    s.routers.announce(PREFIX, &[64501], None, None);
    until(&s.lab, CLIENT, X_V4, Duration::from_secs(5));
    s.run.assert_alive();
}
