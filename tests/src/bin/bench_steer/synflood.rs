//! Section 3: a SYN flood to the VIP through each edge of the wire topology (topo) while
//! 200 established keep-alive connections run through it, and what the edge spends per SYN.
//!
//! Edges, one after the other in one run: director (l2) with the flood guard on
//! (`DIR_STEER[0]`, [`GUARD_RATE`] new flow entries a second per CPU), director with it off,
//! nftables DNAT (conntrack), HAProxy in TCP mode (the kernel's SYN cookies in front).
//!
//! - The established connections: a thread of ours in bs-cli on CPU 0 opens 200 connections
//!   to the VIP, then sends a request on each every [`PERIOD`], notes which server answered
//!   (nginx's `X-Server` header) and counts resets, closes, timeouts and server changes.
//! - The flood: `director_synflood` (director-ebpf's `synflood`), run by BPF_PROG_TEST_RUN
//!   with live frames in bs-br on bs-pedge, the bridge's end of the edge's veth, on CPU 0:
//!   each run makes one SYN from a random source of 192.0.2.0/24 and a random port and sends
//!   it straight into the edge's receive ring (no bridge, no socket), as fast as CPU 0
//!   goes, for `--flood-seconds` or [`MAX_SYNS`], whichever ends first. SYN-ACKs to those
//!   sources go from the edge to bs-cli, which forwards nothing and drops them, and from the
//!   servers into a blackhole (via the edge for DNAT, which must un-NAT them).
//! - The edge's CPU: schedstat of bs-edge0's threaded NAPI thread (+ HAProxy's threads) over
//!   the flood, per SYN received on bs-edge0; CPU 1's busy time beside it as a check. Those
//!   threads run at nice -20 here, so that other processes of a shared machine that land on
//!   CPU 1 do not decide how much of the flood the edge takes.
//! - After the flood, for director: which of the 200 connections' flows `DIR_FLOWS` still
//!   holds as recorded from their SYN, and the guard's `guarded` counter.
//!
//! Fails when a connection through director is reset, closed, stalls or changes server, or
//! when, with the guard on, a flow of theirs is missing afterwards; what happened to the
//! connections through DNAT and HAProxy is reported only.

use std::collections::HashSet;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::{self, sleep, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use aya::programs::{TestRun, TestRunAttrs, TestRunOptions};
use director_common::steer::{Count, GuardLimit};
use director_ctl::kernel::Maps;
use director_tests::bench::sys;
use director_tests::bench::table::{thousands, Table};
use director_tests::bench::testrun::Loaded;

use crate::topo::{
    edge_rx, Edge, Topo, BRIDGE_NS, CLIENT, CLIENT_CPU, CLIENT_NS, EDGE_CPU, EDGE_IF, EDGE_NS,
    EDGE_PORT, VIP,
};

/// The flood's sources: the documentation range the topology does not use otherwise.
const SOURCES: &str = "192.0.2.0/24";
const SOURCE_BASE: [u8; 4] = [192, 0, 2, 0];
const CONNECTIONS: usize = 200;
/// How often each established connection sends a request.
const PERIOD: Duration = Duration::from_millis(250);
/// A response later than this ends its connection (counted as a stall).
const READ_TIMEOUT: Duration = Duration::from_secs(15);
/// The flood guard of the guarded run: new flow entries a second per CPU (and burst).
const GUARD_RATE: u32 = 1000;
/// The flood's bound in count (the time bound is `--flood-seconds`).
const MAX_SYNS: u64 = 200_000_000;
/// Frames per test-run call: one call takes tens of ms, so the time bound is kept closely.
const CHUNK: u32 = 1 << 16;
const BATCH: u32 = 64;
const GENERATOR: &str = "director_synflood";
/// Ethernet + IPv4 + TCP, no options (director-ebpf's `synflood::FRAME`).
const FRAME: usize = 54;
/// Requests the established connections send.
const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: web.bench.example\r\n\r\n";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Flooded {
    Guarded,
    Unguarded,
    Nat,
    Haproxy,
}

impl Flooded {
    const ALL: [Flooded; 4] = [
        Flooded::Guarded,
        Flooded::Unguarded,
        Flooded::Nat,
        Flooded::Haproxy,
    ];

    fn edge(self) -> Edge {
        match self {
            Flooded::Guarded | Flooded::Unguarded => Edge::Director,
            Flooded::Nat => Edge::Nat,
            Flooded::Haproxy => Edge::Haproxy,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Flooded::Guarded => "director l2, guard on",
            Flooded::Unguarded => "director l2, guard off",
            Flooded::Nat => "nftables DNAT",
            Flooded::Haproxy => "HAProxy, TCP mode",
        }
    }

    fn director(self) -> bool {
        self.edge() == Edge::Director
    }
}

/// What the established connections saw.
#[derive(Clone, Copy, Default)]
struct Tally {
    ok: u64,
    resets: u64,
    /// Closed by the other end (EOF).
    closed: u64,
    /// No whole response within READ_TIMEOUT.
    stalls: u64,
    errors: u64,
    /// Answered by another server than the connection's first answer.
    moves: u64,
    max_ms: f64,
}

impl Tally {
    fn since(&self, before: &Tally) -> Tally {
        Tally {
            ok: self.ok - before.ok,
            resets: self.resets - before.resets,
            closed: self.closed - before.closed,
            stalls: self.stalls - before.stalls,
            errors: self.errors - before.errors,
            moves: self.moves - before.moves,
            max_ms: self.max_ms,
        }
    }

    fn failures(&self) -> u64 {
        self.resets + self.closed + self.stalls + self.errors + self.moves
    }
}

/// One request on `s` and its whole response: the server that answered.
fn exchange(s: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<String> {
    s.write_all(REQUEST)?;
    buf.clear();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "closed"));
        }
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let field = |name: &str| {
            head.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_string())
        };
        let len: usize = field("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if buf.len() < end + 4 + len {
            continue;
        }
        if !head.starts_with("http/1.1 200") {
            return Err(io::Error::other(format!(
                "answer {:?}",
                head.lines().next()
            )));
        }
        return field("x-server").ok_or_else(|| io::Error::other("no X-Server header"));
    }
}

/// The established connections: a thread in the client's namespace.
struct Client {
    stop: Arc<AtomicBool>,
    tally: Arc<Mutex<Tally>>,
    thread: Option<JoinHandle<Result<usize>>>,
}

impl Client {
    /// Opens the connections and gets a first answer on each; returns with the client
    /// running and the connections' local ports.
    fn start() -> Result<(Client, Vec<u16>)> {
        let stop = Arc::new(AtomicBool::new(false));
        let tally = Arc::new(Mutex::new(Tally::default()));
        let (tx, rx) = mpsc::channel();
        let (s, t) = (stop.clone(), tally.clone());
        let thread = thread::spawn(move || client(tx, &s, &t));
        let mut c = Client {
            stop,
            tally,
            thread: Some(thread),
        };
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(ports) => Ok((c, ports)),
            Err(_) => Err(c.finish().err().unwrap_or_else(|| {
                anyhow::anyhow!("the established connections did not open within 60 s")
            })),
        }
    }

    fn tally(&self) -> Tally {
        *self.tally.lock().unwrap()
    }

    /// Stops the requests: how many connections were still open.
    fn finish(&mut self) -> Result<usize> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take() {
            Some(t) => t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
            None => bail!("the client has finished already"),
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if self.thread.is_some() {
            let _ = self.finish();
        }
    }
}

fn client(ready: mpsc::Sender<Vec<u16>>, stop: &AtomicBool, tally: &Mutex<Tally>) -> Result<usize> {
    sys::enter_netns(CLIENT_NS)?;
    sys::pin_to_cpu(0, CLIENT_CPU)?;
    let vip: SocketAddr = format!("{VIP}:80").parse()?;
    let mut conns = Vec::with_capacity(CONNECTIONS);
    let mut buf = Vec::new();
    for i in 0..CONNECTIONS {
        let mut s = TcpStream::connect_timeout(&vip, Duration::from_secs(3))
            .with_context(|| format!("connection {i} to the VIP"))?;
        s.set_read_timeout(Some(READ_TIMEOUT))?;
        s.set_nodelay(true)?;
        let server = exchange(&mut s, &mut buf)
            .with_context(|| format!("the first request on connection {i}"))?;
        conns.push((Some(s), server));
    }
    let ports = conns
        .iter()
        .map(|(s, _)| Ok(s.as_ref().unwrap().local_addr()?.port()))
        .collect::<Result<Vec<u16>>>()?;
    let _ = ready.send(ports);
    while !stop.load(Ordering::Relaxed) {
        let sweep = Instant::now();
        for (slot, first) in &mut conns {
            let Some(s) = slot else { continue };
            let t0 = Instant::now();
            let r = exchange(s, &mut buf);
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            let mut t = tally.lock().unwrap();
            t.max_ms = t.max_ms.max(ms);
            match r {
                Ok(server) => {
                    t.ok += 1;
                    if server != *first {
                        t.moves += 1;
                        *first = server;
                    }
                    continue;
                }
                Err(e) => match e.kind() {
                    io::ErrorKind::ConnectionReset => t.resets += 1,
                    io::ErrorKind::UnexpectedEof => t.closed += 1,
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => t.stalls += 1,
                    _ => t.errors += 1,
                },
            }
            // A connection that failed is not used again: it no longer survives.
            *slot = None;
        }
        if let Some(rest) = PERIOD.checked_sub(sweep.elapsed()) {
            sleep(rest);
        }
    }
    Ok(conns.iter().filter(|(s, _)| s.is_some()).count())
}

/// The SYN template (see director-ebpf's `synflood`): source x.x.x.0, port 0, sequence 0,
/// checksums for those; the frame, then the template.
fn template(dst_mac: [u8; 6], src_mac: [u8; 6]) -> Result<Vec<u8>> {
    let vip: std::net::Ipv4Addr = VIP.parse()?;
    let mut f = Vec::with_capacity(FRAME);
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&[0x08, 0x00]);
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&40u16.to_be_bytes());
    ip[6] = 0x40; // DF
    ip[8] = 64;
    ip[9] = 6;
    ip[12..16].copy_from_slice(&SOURCE_BASE);
    ip[16..20].copy_from_slice(&vip.octets());
    let s = csum(&ip, 0);
    ip[10..12].copy_from_slice(&s.to_be_bytes());
    let mut tcp = [0u8; 20];
    tcp[2..4].copy_from_slice(&80u16.to_be_bytes());
    tcp[12] = 5 << 4;
    tcp[13] = 0x02; // SYN
    tcp[14..16].copy_from_slice(&64240u16.to_be_bytes());
    let mut pseudo = Vec::from(&ip[12..20]);
    pseudo.extend_from_slice(&[0, 6, 0, 20]);
    let s = csum(&tcp, sum(&pseudo));
    tcp[16..18].copy_from_slice(&s.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&tcp);
    let copy = f.clone();
    f.extend_from_slice(&copy);
    Ok(f)
}

fn sum(b: &[u8]) -> u64 {
    b.chunks(2)
        .map(|c| u64::from(c[0]) << 8 | u64::from(*c.get(1).unwrap_or(&0)))
        .sum()
}

/// The RFC 1071 checksum of `b` with `start` (an unfolded sum) added.
fn csum(b: &[u8], start: u64) -> u16 {
    let mut s = start + sum(b);
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

fn mac(ns: &str, ifname: &str) -> Result<[u8; 6]> {
    let text = sys::mac_of(ns, ifname)?;
    let v: Vec<u8> = text
        .split(':')
        .map(|h| u8::from_str_radix(h, 16))
        .collect::<Result<_, _>>()
        .with_context(|| format!("MAC {text}"))?;
    v.try_into()
        .map_err(|_| anyhow::anyhow!("MAC {text}: not 6 bytes"))
}

/// The generator on a thread of its own (CPU 0, bs-br): loads, reports ready, waits for the
/// go, floods; returns the SYNs sent and the seconds it took.
fn generator(
    seconds: u32,
    frame: Vec<u8>,
    ready: mpsc::Sender<()>,
    go: mpsc::Receiver<()>,
) -> JoinHandle<Result<(u64, f64)>> {
    thread::spawn(move || {
        sys::pin_to_cpu(0, CLIENT_CPU)?;
        sys::enter_netns(BRIDGE_NS)?;
        let ifindex = sys::ifindex(EDGE_PORT)?;
        let loaded = Loaded::new("synflood", &[GENERATOR])?;
        let prog = loaded.xdp(GENERATOR)?;
        // struct xdp_md: data, data_end, data_meta, ingress_ifindex, rx_queue_index,
        // egress_ifindex.
        let md: Vec<u8> = [0, frame.len() as u32, 0, ifindex, 0, 0]
            .iter()
            .flat_map(|w| w.to_ne_bytes())
            .collect();
        let _ = ready.send(());
        go.recv().context("no go for the flood")?;
        let t0 = Instant::now();
        let limit = Duration::from_secs(seconds.into());
        let mut sent = 0u64;
        while t0.elapsed() < limit && sent < MAX_SYNS {
            prog.test_run(TestRunOptions {
                data_in: Some(&frame),
                ctx_in: Some(&md),
                repeat: CHUNK,
                attrs: TestRunAttrs::new().xdp_live_frames(BATCH),
                ..TestRunOptions::new()
            })
            .context("BPF_PROG_TEST_RUN with live frames")?;
            sent += u64::from(CHUNK);
        }
        Ok((sent, t0.elapsed().as_secs_f64()))
    })
}

/// director's flow table after the flood: of the connections' flows, those recorded from
/// their SYN, those recorded again mid-stream, those marked moved.
#[derive(Clone, Copy, Default)]
struct Flows {
    from_syn: usize,
    midstream: usize,
    moved: usize,
    table: usize,
}

fn flows_of(t: &Topo, ports: &[u16]) -> Result<Flows> {
    let m = Maps::open(&t.pin_dir)?;
    let ours: HashSet<u16> = ports.iter().copied().collect();
    let client: IpAddr = CLIENT.parse()?;
    let all = m.steer().flows()?;
    let mut f = Flows {
        table: all.len(),
        ..Flows::default()
    };
    for e in all {
        if e.client.ip() == client && ours.contains(&e.client.port()) {
            if e.midstream {
                f.midstream += 1;
            } else {
                f.from_syn += 1;
            }
            f.moved += usize::from(e.moved);
        }
    }
    Ok(f)
}

fn steer_count(t: &Topo, c: Count) -> Result<u64> {
    Ok(Maps::open(&t.pin_dir)?
        .steer()
        .counters()?
        .into_iter()
        .find(|(k, _)| *k == c)
        .map_or(0, |(_, n)| n))
}

fn conntrack_count() -> Result<u64> {
    let out = sys::run_ok(
        sys::nsenter(EDGE_NS, "cat").arg("/proc/sys/net/netfilter/nf_conntrack_count"),
    )?;
    Ok(out.trim().parse()?)
}

struct Measured {
    edge: Flooded,
    sent: u64,
    secs: f64,
    received: u64,
    ring_drops: u64,
    edge_ns: u64,
    busy_ns: u64,
    wall_ns: u64,
    /// The connections' requests during the flood and the 2 s after it.
    during: Tally,
    alive: usize,
    flows: Option<Flows>,
    guarded: u64,
    new_flows: u64,
    conntrack: Option<u64>,
}

fn measure(t: &mut Topo, e: Flooded, seconds: u32) -> Result<Measured> {
    let (mut client, ports) = Client::start()?;
    sleep(Duration::from_secs(1));
    let frame = template(mac(EDGE_NS, EDGE_IF)?, mac(BRIDGE_NS, EDGE_PORT)?)?;
    let (ready_tx, ready) = mpsc::channel();
    let (go, go_rx) = mpsc::channel();
    let gen = generator(seconds, frame, ready_tx, go_rx);
    if ready.recv_timeout(Duration::from_secs(60)).is_err() {
        drop(go);
        return Err(gen
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
            .err()
            .unwrap_or_else(|| anyhow::anyhow!("the generator did not load within 60 s")));
    }
    let tids = t.edge_threads()?;
    // The machine is shared: at nice -20 the edge's threads keep CPU 1 against whatever
    // else lands there (the flood makes them want all of it), and still share it with each
    // other as a kernel's softirq thread and a proxy would.
    for &tid in &tids {
        sys::set_nice(tid, -20)?;
    }
    let counts = |t: &Topo| -> Result<(u64, u64)> {
        if e.director() {
            Ok((
                steer_count(t, Count::Guarded)?,
                steer_count(t, Count::NewFlow)?,
            ))
        } else {
            Ok((0, 0))
        }
    };
    let (g0, n0) = counts(t)?;
    let before = client.tally();
    let (cpu0, idle0, rx0, drop0, w0) = (
        sys::cpu_ns(&tids),
        sys::cpu_idle_ns(EDGE_CPU)?,
        edge_rx("packets")?,
        edge_rx("dropped")?,
        Instant::now(),
    );
    let _ = go.send(());
    let (sent, secs) = gen
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))?;
    let wall_ns = w0.elapsed().as_nanos() as u64;
    let (cpu1, idle1, rx1, drop1) = (
        sys::cpu_ns(&tids),
        sys::cpu_idle_ns(EDGE_CPU)?,
        edge_rx("packets")?,
        edge_rx("dropped")?,
    );
    let (g1, n1) = counts(t)?;
    // At once, before the connections' next requests could record a lost flow again.
    let flows = if e.director() {
        Some(flows_of(t, &ports)?)
    } else {
        None
    };
    let conntrack = if e == Flooded::Nat {
        Some(conntrack_count()?)
    } else {
        None
    };
    sleep(Duration::from_secs(2));
    let during = client.tally().since(&before);
    let alive = client.finish()?;
    Ok(Measured {
        edge: e,
        sent,
        secs,
        received: rx1 - rx0,
        ring_drops: drop1 - drop0,
        edge_ns: cpu1 - cpu0,
        busy_ns: wall_ns.saturating_sub(idle1 - idle0),
        wall_ns,
        during,
        alive,
        flows,
        guarded: g1 - g0,
        new_flows: n1 - n0,
        conntrack,
    })
}

pub fn run(seconds: u32) -> Result<()> {
    eprintln!("building director-ctl for the topology (cargo build -p director-ctl)");
    if std::panic::catch_unwind(director_tests::netns::ctl_binary).is_err() {
        bail!("no director-ctl to run (see the build error above)");
    }
    eprintln!("section 3: setting up bs-* namespaces, nginx x3");
    let mut t = Topo::new()?;
    let mut out = Vec::new();
    for e in Flooded::ALL {
        eprintln!(
            "section 3: {}: {CONNECTIONS} connections, then the flood",
            e.name()
        );
        t.setup_edge(e.edge())?;
        t.route_replies_to(SOURCES, e == Flooded::Nat)?;
        if e.director() {
            let limit = if e == Flooded::Guarded {
                GuardLimit::new(GUARD_RATE, GUARD_RATE, 0, 32, 128)
            } else {
                GuardLimit::unlimited()
            };
            Maps::open(&t.pin_dir)?.steer_mut().set_guard(&limit)?;
        }
        let m = measure(&mut t, e, seconds);
        t.teardown_edge(e.edge())?;
        out.push(m?);
    }
    drop(t);
    table(&out, seconds).print();
    let mut failed = Vec::new();
    for m in out.iter().filter(|m| m.edge.director()) {
        let d = &m.during;
        if d.failures() > 0 || m.alive < CONNECTIONS {
            failed.push(format!(
                "{}: {} of {CONNECTIONS} connections left, {} resets, {} closed, {} stalled, \
                 {} errors, {} moved",
                m.edge.name(),
                m.alive,
                d.resets,
                d.closed,
                d.stalls,
                d.errors,
                d.moves
            ));
        }
        if let (Flooded::Guarded, Some(f)) = (m.edge, m.flows) {
            if f.from_syn < CONNECTIONS {
                failed.push(format!(
                    "{}: {} of the {CONNECTIONS} established flows left in DIR_FLOWS",
                    m.edge.name(),
                    f.from_syn
                ));
            }
        }
    }
    if !failed.is_empty() {
        bail!(
            "established connections through director did not come through the flood:\n  {}",
            failed.join("\n  ")
        );
    }
    Ok(())
}

fn table(out: &[Measured], seconds: u32) -> Table {
    let mut t = Table::new(
        format!(
            "S3. SYN flood to a VIP: random-source SYNs (192.0.2.0/24, random ports) from \
             BPF_PROG_TEST_RUN live frames straight into the edge's veth for {seconds} s, while \
             {CONNECTIONS} keep-alive connections send a request every {} ms. Edge alone on CPU \
             {EDGE_CPU}; generator, client, nginx, bridge on CPU {CLIENT_CPU}. Aim: the least \
             edge CPU per SYN, and no established connection lost.",
            PERIOD.as_millis()
        ),
        &[
            "edge",
            "SYNs sent",
            "sent/s",
            "at edge/s",
            "ring drops",
            "edge ns/SYN",
            "edge load",
            "CPU1 busy",
            "req ok",
            "resets",
            "stalls",
            "moves",
            "conns left",
            "flows kept",
            "guarded",
        ],
    );
    let per_syn = |m: &Measured| m.edge_ns as f64 / m.received.max(1) as f64;
    for m in out {
        let d = &m.during;
        let flows = match (m.flows, m.conntrack) {
            (Some(f), _) => {
                let mut s = format!("{}/{CONNECTIONS}", f.from_syn);
                if f.midstream > 0 {
                    s += &format!(" (+{} mid)", f.midstream);
                }
                s
            }
            (None, Some(c)) => format!("ct {}", thousands(c)),
            _ => "-".into(),
        };
        t.row(vec![
            m.edge.name().into(),
            thousands(m.sent),
            thousands((m.sent as f64 / m.secs) as u64),
            thousands((m.received as f64 / (m.wall_ns as f64 / 1e9)) as u64),
            thousands(m.ring_drops),
            format!("{:.0}", per_syn(m)),
            format!("{:.0}%", 100.0 * m.edge_ns as f64 / m.wall_ns as f64),
            format!("{:.0}%", 100.0 * m.busy_ns as f64 / m.wall_ns as f64),
            thousands(d.ok),
            thousands(d.resets + d.closed + d.errors),
            thousands(d.stalls),
            thousands(d.moves),
            format!("{}", m.alive),
            flows,
            if m.edge.director() {
                thousands(m.guarded)
            } else {
                "-".into()
            },
        ]);
    }
    let of = |e: Flooded| out.iter().find(|m| m.edge == e).map(per_syn);
    if let (Some(g), Some(u), Some(n), Some(h)) = (
        of(Flooded::Guarded),
        of(Flooded::Unguarded),
        of(Flooded::Nat),
        of(Flooded::Haproxy),
    ) {
        t.note(format!(
            "Edge CPU per SYN: director with the guard = {:.2}x nftables DNAT's and {:.2}x \
             HAProxy's; without it {:.2}x and {:.2}x.",
            g / n.max(1e-9),
            g / h.max(1e-9),
            u / n.max(1e-9),
            u / h.max(1e-9)
        ));
    }
    for m in out.iter().filter(|m| m.edge.director()) {
        if let Some(f) = m.flows {
            t.note(format!(
                "{}: {} SYNs of new flows, {} of them steered but not recorded (guarded); \
                 DIR_FLOWS held {} entries after the flood, of the connections' flows {} from \
                 their SYN, {} recorded again mid-stream, {} marked moved.",
                m.edge.name(),
                thousands(m.new_flows),
                thousands(m.guarded),
                thousands(f.table as u64),
                f.from_syn,
                f.midstream,
                f.moved
            ));
        }
    }
    let worst = out.iter().map(|m| m.during.max_ms).fold(0.0, f64::max);
    t.note(format!(
        "at edge/s: packets bs-edge0 received over the flood (the SYNs and the connections' \
         few); ring drops: frames that found its receive ring full. edge ns/SYN: schedstat of \
         bs-edge0's threaded NAPI thread (+ HAProxy's threads) per packet received; CPU1 busy \
         from CPU 1's idle time. Requests counted over the flood and 2 s after it; slowest \
         request {worst:.0} ms."
    ));
    t.note(format!(
        "flows kept: director's connections' flows in DIR_FLOWS just after the flood, as \
         recorded from their SYN (mid: recorded again from a later packet after an eviction); \
         for DNAT the conntrack entries then (ct). Guard: {GUARD_RATE} new flows/s per CPU."
    ));
    t
}
