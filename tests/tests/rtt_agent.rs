//! `director-ctl agent` end to end (root): handshakes through a userspace delay line
//! (`director_tests::delay`) to a server in a cgroup of the test's own, measured by the
//! agent's sock_ops program and read back from `GET /rtt`.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use director_ctl::api::{RttRecord, RttReport};
use director_tests::delay::{enter, DelayLink};
use director_tests::rtt::{
    connect_all, cpu_ns, into_next_window, report, report_in, start_agent, start_observer,
    start_sink, tcp_counter, Cgroup, Process,
};

const SINK: &str = env!("CARGO_BIN_EXE_accept_sink");

fn ips(list: &[&str]) -> Vec<IpAddr> {
    list.iter()
        .map(|s| s.parse().expect("an address"))
        .collect()
}

/// Polls `/rtt` until every prefix of `want` has a record of the window ending at
/// `end_ms`; returns those records by prefix.
fn window_records(
    read: impl Fn() -> std::io::Result<RttReport>,
    end_ms: u64,
    want: &[&str],
    log: impl Fn() -> String,
) -> BTreeMap<String, RttRecord> {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut last: Option<RttReport> = None;
    while Instant::now() < deadline {
        if let Ok(r) = read() {
            let got: BTreeMap<String, RttRecord> = r
                .records
                .iter()
                .filter(|x| x.window_end_ms == end_ms)
                .map(|x| (x.prefix.to_string(), x.clone()))
                .collect();
            if want.iter().all(|p| got.contains_key(*p)) {
                return got;
            }
            last = Some(r);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!(
        "no window ending at {end_ms} for all of {want:?}; last report {last:#?}\nagent log:\n{}",
        log()
    );
}

/// Whether a record's minimum and median are near `want_ms`, or what is off: no less than
/// max(2 ms, 5 %) under it (the delay line never delivers early), and no more than 2.5
/// times that over it (the median half as much again): the delay line is a thread of this
/// test's process, and on a busy machine its own latency adds to the path, steadily (a CI
/// run measured 42.2 ms on a 40 ms path in two windows in a row, the same at both agents).
/// An agent measuring the wrong packets is off by a whole leg (20 ms) or more.
fn near(r: &RttRecord, want_ms: f64) -> Result<(), String> {
    let tol = (want_ms * 0.05).max(2.0);
    let (low, high) = (want_ms - tol, want_ms + 2.5 * tol);
    if r.min_ms < low || r.min_ms > high {
        return Err(format!(
            "{}: min {} ms, configured {want_ms} ms ({low} to {high})",
            r.prefix, r.min_ms
        ));
    }
    if r.median_ms < r.min_ms || r.median_ms > want_ms + 2.5 * tol * 1.5 {
        return Err(format!(
            "{}: median {} ms, configured {want_ms} ms",
            r.prefix, r.median_ms
        ));
    }
    Ok(())
}

/// An agent [`one_window`] reads: its name in messages, how its `/rtt` is read, and its
/// process (for its log).
struct Watched<'a> {
    name: &'a str,
    read: &'a dyn Fn() -> std::io::Result<RttReport>,
    agent: &'a Process,
}

/// Measures one window of `per_source` connections from each client: every agent has, for
/// every prefix, a record of exactly its handshakes, each counted once, of that window
/// (asserted), and the RTTs are near `want_ms` (returned: on this shared machine a window
/// can catch the relay thread starved, so the caller tries the next window once before
/// failing, with [`in_one_of_two_windows`]; a CI run saw every handshake of one window
/// 10 ms late).
fn one_window(
    link: &DelayLink,
    clients: &[IpAddr],
    dst: &[SocketAddr],
    agents: &[Watched<'_>],
    want: &BTreeMap<&str, u64>,
    per_source: usize,
    want_ms: f64,
) -> Result<(), String> {
    let window_ms = 3000;
    let prefixes: Vec<&str> = want.keys().copied().collect();
    let start = into_next_window(window_ms, 300);
    connect_all(&link.client_ns, clients, dst, per_source);
    assert!(
        now_before(start + window_ms - 500),
        "the connections took too long"
    );
    let mut off = Vec::new();
    for w in agents {
        let got = window_records(w.read, start + window_ms, &prefixes, || w.agent.log());
        for (p, r) in &got {
            println!(
                "{}: {p}: min {:.3} ms, median {:.3} ms, {} samples (configured {want_ms} ms)",
                w.name, r.min_ms, r.median_ms, r.samples
            );
            assert_eq!(
                r.samples,
                want[p.as_str()] * per_source as u64,
                "{}: {p}: every handshake once",
                w.name
            );
            assert_eq!(r.window_start_ms, start, "{}: {p}", w.name);
            if let Err(e) = near(r, want_ms) {
                off.push(format!("{}: {e}", w.name));
            }
        }
    }
    if off.is_empty() {
        Ok(())
    } else {
        Err(off.join("; "))
    }
}

/// `measure` once, and once more if its window was off; fails if both were.
fn in_one_of_two_windows(measure: impl Fn() -> Result<(), String>) {
    if let Err(e) = measure() {
        println!("one window off ({e}); measuring the next");
        let again = measure();
        assert!(
            again.is_ok(),
            "two windows in a row off: {e}; then {again:?}"
        );
    }
}

/// Connections from three IPv4 /24s (one with two addresses) and two IPv6 /48s over a
/// 20 ms + 20 ms path: each prefix's window has exactly its connections and a minimum
/// within 2 ms (or 5 %) of 40 ms. Then the delay steps to 40 ms each way, and the first
/// window that starts after the step shows 80 ms.
#[test]
fn handshake_rtt_per_prefix_and_a_step_change() {
    let clients = ips(&[
        "192.0.2.10",
        "192.0.2.11",
        "198.51.100.10",
        "203.0.113.10",
        "2001:db8:1::10",
        "2001:db8:2::10",
    ]);
    let servers = ips(&["198.18.0.1", "2001:db8:ff::1"]);
    let link = DelayLink::new(&clients, &servers, Duration::from_millis(20));
    let cg = Cgroup::new("rtt-step");
    let dst: Vec<SocketAddr> = servers.iter().map(|a| SocketAddr::new(*a, 8080)).collect();
    let _sink = start_sink(SINK.as_ref(), &link.server_ns, &cg, &dst);
    let (agent, listen) = start_agent(&cg, 3, 500);
    // Connections per client address of each prefix.
    let want: BTreeMap<&str, u64> = [
        ("192.0.2.0/24", 2),
        ("198.51.100.0/24", 1),
        ("203.0.113.0/24", 1),
        ("2001:db8:1::/48", 1),
        ("2001:db8:2::/48", 1),
    ]
    .into();
    let read = || report(listen);
    let agents = [Watched {
        name: "sock_ops",
        read: &read,
        agent: &agent,
    }];
    for (delay_ms, per_source) in [(20, 6), (40, 2)] {
        // The first pass at 20 ms each way; then the delay steps to 40 ms, and the first
        // window that starts after the step shows 80 ms.
        link.set_delay(Duration::from_millis(delay_ms));
        let want_ms = 2.0 * delay_ms as f64;
        in_one_of_two_windows(|| {
            one_window(&link, &clients, &dst, &agents, &want, per_source, want_ms)
        });
    }
    let r = report(listen).expect("a report");
    assert_eq!(r.site, "test-site");
    assert_eq!(r.window_s, 3);
    assert_eq!(r.counters.lost, 0);
    assert!(link.relayed() > 0);
}

/// On a host the connections pass but do not end (a gateway between the delay line and
/// the server's host), `agent --observe` takes each handshake's RTT from the server's
/// SYN-ACK passing to the client's ACK of it. Two agents, one on the gateway's TUN towards
/// the clients (a layer-3 device, no link header) and one on its veth towards the host
/// (Ethernet), each see every handshake once: per prefix exactly its connections, at the
/// path's 40 ms.
#[test]
fn a_gateway_measures_the_handshakes_it_forwards() {
    let clients = ips(&[
        "192.0.2.20",
        "198.51.100.20",
        "198.51.100.21",
        "2001:db8:1::20",
    ]);
    let servers = ips(&["198.18.0.1", "2001:db8:ff::1"]);
    let link = DelayLink::new(&clients, &servers, Duration::from_millis(20));
    let host = link.host_behind(&servers);
    let cg = Cgroup::new("rtt-gw");
    let dst: Vec<SocketAddr> = servers.iter().map(|a| SocketAddr::new(*a, 8080)).collect();
    let _sink = start_sink(SINK.as_ref(), &host.host_ns, &cg, &dst);
    // Neighbours resolved on every hop before anything is measured.
    connect_all(&link.client_ns, &clients, &dst, 1);
    let gw = link.server_ns.clone();
    let (tun, tun_at) = start_observer(&gw, &[&link.server_if], 3, 500);
    let (eth, eth_at) = start_observer(&gw, &[&host.gateway_if], 3, 500);
    let per_source = 3;
    let want: BTreeMap<&str, u64> = [
        ("192.0.2.0/24", 1),
        ("198.51.100.0/24", 2),
        ("2001:db8:1::/48", 1),
    ]
    .into();
    let (read_tun, read_eth) = (|| report_in(&gw, tun_at), || report_in(&gw, eth_at));
    let agents = [
        Watched {
            name: "tun",
            read: &read_tun,
            agent: &tun,
        },
        Watched {
            name: "veth",
            read: &read_eth,
            agent: &eth,
        },
    ];
    // As in the test above: a window can catch the relay thread starved; one more chance.
    in_one_of_two_windows(|| one_window(&link, &clients, &dst, &agents, &want, per_source, 40.0));
    for at in [tun_at, eth_at] {
        let r = report_in(&gw, at).expect("a report");
        assert!(
            r.counters.syn_acks >= (clients.len() * per_source) as u64,
            "{:?}",
            r.counters
        );
        assert_eq!(
            (r.counters.no_rtt, r.counters.lost),
            (0, 0),
            "{:?}",
            r.counters
        );
    }
}

/// What `--observe` refuses, naming it, before anything is attached.
#[test]
fn observe_refuses_what_it_cannot_watch() {
    let run = |args: &[&str]| {
        std::process::Command::new(director_tests::netns::ctl_binary())
            .args(["agent", "--site", "s"])
            .args(args)
            .output()
            .expect("running director-ctl agent")
    };
    let out = run(&["--observe", "nosuchif0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("--observe nosuchif0") && err.contains("no interface"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    let out = run(&["--observe", "lo", "--observe", "lo"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("given twice"),
        "{err}"
    );
    let out = run(&["--observe", "lo", "--cgroup", "/sys/fs/cgroup"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--cgroup"), "{err}");
    let out = run(&["--max-pending", "100"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--observe"), "{err}");
}

fn now_before(t: u64) -> bool {
    director_tests::rtt::now_ms() < t
}

/// The agent detaches on SIGTERM: it exits 0 and says so.
#[test]
fn agent_stops_on_sigterm() {
    let cg = Cgroup::new("rtt-stop");
    let (mut agent, _) = start_agent(&cg, 2, 500);
    assert!(
        agent.stop(Duration::from_secs(5)),
        "still running after SIGTERM"
    );
    let st = agent.child.wait().expect("its status");
    assert!(st.success(), "exit {st}: {}", agent.log());
    assert!(agent.log().contains("detached"), "{}", agent.log());
}

/// A rate figure: many short connections on the server namespace's loopback, from 1,024
/// /24s of 127/8 (bounded in count and time); every handshake the server establishes is
/// counted, and the agent's own CPU (all its threads, from schedstat) stays small. Prints
/// samples/s and CPU.
#[test]
fn rate_and_agent_cpu() {
    const CONNECTIONS: usize = 30_000;
    const THREADS: usize = 4;
    const PREFIXES: usize = 1024;
    let link = DelayLink::new(&[], &[], Duration::ZERO);
    let cg = Cgroup::new("rtt-rate");
    let port = 8081;
    let dst: SocketAddr = ([127, 0, 0, 1], port).into();
    let sink = start_sink(SINK.as_ref(), &link.server_ns, &cg, &[dst]);
    // The server's side of each handshake: a connect that returned can still find the
    // sink's accept queue full (two cores, four client threads), and then the server
    // drops the final ACK and never establishes, so there is no handshake to sample.
    let server_counts =
        |file: &str, table: &str, name: &str| tcp_counter(sink.pid(), file, table, name);
    let opened0 = server_counts("snmp", "Tcp", "PassiveOpens");
    let overflows0 = server_counts("netstat", "TcpExt", "ListenOverflows");
    let (agent, listen) = start_agent(&cg, 2, 2000);
    let cpu0 = cpu_ns(agent.pid());
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(30);
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let ns = link.server_ns.clone();
            std::thread::spawn(move || -> usize {
                enter(&ns).expect("entering the namespace");
                let mut made = 0;
                for i in 0..CONNECTIONS / THREADS {
                    if Instant::now() > deadline {
                        break;
                    }
                    // 1,024 client /24s, so that each drain has many entries to read.
                    let k = (t * CONNECTIONS / THREADS + i) % PREFIXES;
                    let src: IpAddr = format!("127.{}.{}.1", 1 + k / 256, k % 256)
                        .parse()
                        .expect("an address");
                    let s =
                        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
                            .expect("a socket");
                    // Reset on close: no TIME_WAIT piles up on either side.
                    s.set_linger(Some(Duration::ZERO)).expect("linger");
                    s.bind(&SocketAddr::new(src, 0).into()).expect("bind");
                    if s.connect(&dst.into()).is_ok() {
                        made += 1;
                    }
                }
                made
            })
        })
        .collect();
    let made: usize = threads
        .into_iter()
        .map(|t| t.join().expect("a client thread"))
        .sum();
    let load = t0.elapsed();
    let opened = server_counts("snmp", "Tcp", "PassiveOpens") - opened0;
    let overflows = server_counts("netstat", "TcpExt", "ListenOverflows") - overflows0;
    // Until the agent has drained (and published) every sample.
    let wait = Instant::now() + Duration::from_secs(10);
    let counters = loop {
        let c = report(listen).expect("a report").counters;
        if c.samples >= opened || Instant::now() > wait {
            break c;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let wall = t0.elapsed();
    let cpu = cpu_ns(agent.pid()) - cpu0;
    let rate = made as f64 / load.as_secs_f64();
    let share = cpu as f64 / wall.as_nanos() as f64;
    println!(
        "rate: {made} connections in {:.2} s = {rate:.0} handshake samples/s; server: {opened} \
         established, {overflows} accept-queue overflows; agent CPU {:.1} ms over {:.2} s = \
         {:.2} % of a core; counters {counters:?}",
        load.as_secs_f64(),
        cpu as f64 / 1e6,
        wall.as_secs_f64(),
        share * 100.0
    );
    // Nearly every connect is a server-side handshake; each of those is one sample.
    assert!(
        opened * 100 >= made as u64 * 99,
        "the server established {opened} of {made} connections ({overflows} overflows)"
    );
    assert_eq!(
        counters.samples, opened,
        "every established handshake sampled"
    );
    assert_eq!(counters.lost, 0);
    assert!(
        share < 0.10,
        "the agent used {:.1} % of a core",
        share * 100.0
    );
}
