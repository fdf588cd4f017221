//! Section 1: what steering a TCP packet to a VIP costs the XDP program, from
//! BPF_PROG_TEST_RUN, beside the turn-around-only program and the empty one.
//!
//! Two methods, both timed by the kernel:
//! - `repeat N` (one call, N runs on one buffer): right only where a run leaves the frame
//!   as something that takes the same path again. In l2 mode director rewrites the MACs
//!   alone and test runs check no MAC, so a SYN or an ACK of a recorded flow is steered
//!   the same way N times. An ipip run moves the packet's head: the next run would see
//!   the encapsulated packet, so ipip is timed by the second method only.
//! - `repeat=1, N calls`: a fresh frame per call, the median call; the empty program's
//!   median by the same method (timer reads, call) is the per-call floor. A fresh SYN,
//!   one that records a new flow, needs a new 4-tuple each call: only this method has it.

use std::borrow::Cow;
use std::net::{Ipv4Addr, SocketAddr};

use anyhow::{ensure, Result};
use aya::programs::Xdp;
use director_common::maps::PROGRAM;
use director_common::select::Mode;
use director_common::steer::{Forward, GuardLimit, Hop, Hops, MAX_FLOWS};
use director_ctl::kernel::Maps;
use director_ctl::ops::{self, steer::VipSettings};
use director_tests::bench::table::{thousands, Spread, Table};
use director_tests::bench::testrun::{
    self as tr, Loaded, CALLS_LABEL, EMPTY, REPEAT_LABEL, TURNAROUND, XDP_PASS, XDP_TX,
};
use director_tests::fixture::route_set;
use director_tests::packets::{self, Flow, IPPROTO_TCP, TCP_ACK, TCP_SYN};
use hickory_proto::rr::RecordType;

/// Where the measurements run (the edge's CPU in section 2).
const CPU: usize = 1;
/// BPF_PROG_TEST_RUN runs on loopback: a hop through ifindex 1 goes back out (XDP_TX).
const LOOPBACK: u32 = 1;
/// Katran's published cost of its L4 path per packet, the figure to compare with.
const KATRAN_NS: (f64, f64) = (100.0, 120.0);

const L2_SERVICE: &str = "l2.bench.example";
const IPIP_SERVICE: &str = "ipip.bench.example";
const L2_VIP: &str = "203.0.113.80:80";
const IPIP_VIP: &str = "203.0.113.81:80";
const EDGE_MAC: [u8; 6] = [0x02, 0xed, 0, 0, 0, 1];
const ROUTER_MAC: [u8; 6] = [0x02, 0x77, 0, 0, 0, 1];

pub struct Options {
    /// `repeat` for the repeat method.
    pub packets: u32,
    /// Calls per measurement for the repeat=1 method.
    pub calls: u32,
    pub runs: usize,
}

/// director loaded on its own, its maps pinned in a directory of ours, with the empty and
/// the turn-around programs beside it.
fn load() -> Result<Loaded> {
    let mut l = Loaded::new("steer-bench", &[EMPTY, TURNAROUND])?;
    configure(&mut l.maps)?;
    Ok(l)
}

/// Three servers, a service per forwarding mode with its VIP, every client to all three
/// (rendezvous by flow), and hops that send the frames back out of loopback.
fn configure(m: &mut Maps) -> Result<()> {
    m.set_configured_address(packets::SERVER_V4.into(), true)?;
    for i in 1..=3u8 {
        ops::server_add(
            m,
            &format!("s{i}"),
            Some(Ipv4Addr::new(198, 51, 100, 10 + i)),
            None,
        )?;
    }
    for (service, vip, mode) in [
        (L2_SERVICE, L2_VIP, Forward::L2),
        (IPIP_SERVICE, IPIP_VIP, Forward::Ipip),
    ] {
        let vips = VipSettings {
            vips: vec![vip.parse()?],
            mode,
            mss: None,
            sources: vec!["198.51.100.240/28".parse()?],
        };
        ops::service_add_with(m, service, 30, 1, Mode::Random, Some(&vips), false)?;
        route_set(m, service, "0.0.0.0/0", "s1,s2,s3")?;
    }
    for s in m.servers()? {
        let mac = [0x02, 0x5e, 0, 0, 0, s.id as u8];
        let router = Hop {
            dst_mac: ROUTER_MAC,
            src_mac: EDGE_MAC,
            ifindex: LOOPBACK,
        };
        let hops = Hops {
            l2: Hop {
                dst_mac: mac,
                src_mac: EDGE_MAC,
                ifindex: LOOPBACK,
            },
            ipip4: router,
            ipip6: router,
        };
        m.steer_mut().set_hops(s.id, &hops)?;
    }
    Ok(())
}

/// One of director's steering counters so far.
fn counter(l: &Loaded, name: &str) -> Result<u64> {
    Ok(ops::steer::flow_stats(&l.maps)?
        .counters
        .get(name)
        .copied()
        .unwrap_or(0))
}

fn tcp_flow(client: Ipv4Addr, port: u16, vip: &str) -> Flow {
    Flow {
        client: SocketAddr::new(client.into(), port),
        server: vip.parse().expect("a VIP"),
        vlan: None,
    }
}

/// A SYN as Linux sends it: MSS, SACK permitted, timestamps, window scale.
fn syn(f: &Flow) -> Vec<u8> {
    let opts = [
        2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7,
    ];
    packets::ip_frame(
        f,
        IPPROTO_TCP,
        &packets::tcp_segment_with(f, TCP_SYN, &opts, &[]),
    )
}

/// An established connection's request.
fn ack(f: &Flow) -> Vec<u8> {
    packets::ip_frame(
        f,
        IPPROTO_TCP,
        &packets::tcp_segment_with(f, TCP_ACK, &[], b"GET / HTTP/1.1\r\nHost: b\r\n\r\n"),
    )
}

/// The client of the pinned flows; fresh SYNs come from other addresses.
const CLIENT: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);

/// The n-th fresh flow: a 4-tuple no earlier call used (addresses from 10.0.0.0/8).
fn fresh_flow(n: u32, vip: &str) -> Flow {
    let client = Ipv4Addr::from(0x0a00_0000 | (n >> 14));
    tcp_flow(client, 1024 + (n & 0x3fff) as u16, vip)
}

/// Where the ipip rows' fresh flows start, apart from the l2 rows'.
const IPIP_BASE: u32 = 2_000_000_000;
/// How many of the latest recorded flows the "one of many" rows draw from: half the table,
/// so that the LRU has evicted none of them.
const MANY: u32 = MAX_FLOWS / 2;

/// One run with the output kept: the verdict and, for a forwarded frame, that it went where
/// this mode sends it (a server's MAC, or an outer header), so that the path timed is known.
fn check(prog: &Xdp, frame: &[u8], want: u32, mode: Option<Forward>) -> Result<()> {
    let (verdict, out) = tr::output(prog, frame)?;
    tr::expect_verdict(verdict, want)?;
    match mode {
        Some(Forward::L2) => {
            ensure!(
                out[..5] == [0x02, 0x5e, 0, 0, 0] && out[6..12] == EDGE_MAC,
                "l2: not sent to a server: {:02x?}",
                &out[..12]
            );
            ensure!(out[12..] == frame[12..], "l2 changed more than the MACs");
        }
        Some(Forward::Ipip) => {
            ensure!(
                out.len() == frame.len() + 20 && out[..6] == ROUTER_MAC && out[14 + 9] == 4,
                "ipip: no outer IPv4 header to the router"
            );
        }
        None => {}
    }
    Ok(())
}

/// How a measurement runs its frames.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Method {
    Repeat,
    Calls,
}

impl Method {
    fn label(self) -> &'static str {
        match self {
            Method::Repeat => REPEAT_LABEL,
            Method::Calls => CALLS_LABEL,
        }
    }
}

/// The frames of one row: the same frame every time, or a new one per call.
enum Frames<'a> {
    Same(&'a [u8]),
    Fresh(&'a dyn Fn(u32) -> Vec<u8>),
}

struct Row {
    packet: String,
    /// director's own row (not a floor's).
    director: bool,
    method: Method,
    frames: u32,
    ns: Spread,
    /// The empty program's and the turn-around program's medians by the same method.
    empty: Option<f64>,
    turnaround: Option<f64>,
}

struct Bench<'a> {
    l: &'a Loaded,
    o: &'a Options,
    /// How many fresh flows were made so far: each gets a 4-tuple of its own.
    fresh: std::cell::Cell<u32>,
}

impl Bench<'_> {
    /// One measurement: mean ns per run (repeat) or the median call's ns (calls).
    fn time(&self, prog: &Xdp, method: Method, frames: &Frames<'_>, want: u32) -> Result<f64> {
        match (method, frames) {
            (Method::Repeat, Frames::Same(frame)) => tr::repeat(prog, frame, self.o.packets, want),
            (Method::Repeat, Frames::Fresh(_)) => unreachable!("fresh frames need calls"),
            (Method::Calls, Frames::Same(frame)) => {
                tr::median_call(prog, self.o.calls, |_| Cow::Borrowed(*frame), want)
            }
            (Method::Calls, Frames::Fresh(make)) => {
                let frame = |_| {
                    let n = self.fresh.get();
                    self.fresh.set(n + 1);
                    Cow::Owned(make(n))
                };
                tr::median_call(prog, self.o.calls, frame, want)
            }
        }
    }

    fn row(
        &self,
        packet: impl Into<String>,
        prog: &str,
        method: Method,
        frames: Frames<'_>,
        want: u32,
        floors: (Option<f64>, Option<f64>),
    ) -> Result<Row> {
        let xdp = self.l.xdp(prog)?;
        let ns = tr::spread(self.o.runs, || self.time(xdp, method, &frames, want))?;
        Ok(Row {
            packet: packet.into(),
            director: prog == PROGRAM,
            method,
            frames: match method {
                Method::Repeat => self.o.packets,
                Method::Calls => self.o.calls,
            },
            ns,
            empty: floors.0,
            turnaround: floors.1,
        })
    }
}

pub fn run(o: Options) -> Result<Table> {
    // On the edge's CPU (section 2's); the caller stays where it was.
    tr::on_cpu(CPU, move || measure(&o))
}

fn measure(o: &Options) -> Result<Table> {
    let l = load()?;
    let dns = packets::udp_frame(
        &Flow::v4(CLIENT),
        &packets::wire(&packets::with_edns(
            packets::query(0x5eed, "www.example.com.", RecordType::A),
            1232,
        )),
    );
    let l2_flow = tcp_flow(CLIENT, 40_000, L2_VIP);
    let ipip_flow = tcp_flow(CLIENT, 40_001, IPIP_VIP);
    let (l2_syn, l2_ack) = (syn(&l2_flow), ack(&l2_flow));
    let (ipip_syn, ipip_ack) = (syn(&ipip_flow), ack(&ipip_flow));
    let director = l.xdp(PROGRAM)?;
    // The first SYN of each records the flow: every later run finds it.
    check(director, &l2_syn, XDP_TX, Some(Forward::L2))?;
    check(director, &l2_ack, XDP_TX, Some(Forward::L2))?;
    check(director, &ipip_syn, XDP_TX, Some(Forward::Ipip))?;
    check(director, &ipip_ack, XDP_TX, Some(Forward::Ipip))?;
    check(l.xdp(TURNAROUND)?, &dns, XDP_TX, None)?;
    ensure!(
        counter(&l, "new_flows")? == 2,
        "the checks should have recorded two flows"
    );
    let fresh_l2 = |n| syn(&fresh_flow(n, L2_VIP));
    let fresh_ipip = |n| syn(&fresh_flow(IPIP_BASE + n, IPIP_VIP));
    check(director, &fresh_l2(u32::MAX), XDP_TX, Some(Forward::L2))?;

    let b = Bench {
        l: &l,
        o,
        fresh: std::cell::Cell::new(0),
    };
    let mut rows = Vec::new();

    eprintln!("section 1: repeat N = {}", o.packets);
    let empty = b.row(
        "empty program (director_pass)",
        EMPTY,
        Method::Repeat,
        Frames::Same(&l2_syn),
        XDP_PASS,
        (None, None),
    )?;
    let fl = Some(empty.ns.median);
    rows.push(empty);
    // The turn-around program passes a TCP frame after its header checks, and a DNS query
    // it turned around once is a reply it passes: with repeat it never turns a frame
    // around. Its row here is that check-and-pass; its real floor is in the calls rows.
    rows.push(b.row(
        "turn-around (after run 1: sees its reply, passes)",
        TURNAROUND,
        Method::Repeat,
        Frames::Same(&dns),
        XDP_PASS,
        (fl, None),
    )?);
    rows.push(b.row(
        "l2: SYN (flow present)",
        PROGRAM,
        Method::Repeat,
        Frames::Same(&l2_syn),
        XDP_TX,
        (fl, None),
    )?);
    rows.push(b.row(
        "l2: ACK, established (pinned)",
        PROGRAM,
        Method::Repeat,
        Frames::Same(&l2_ack),
        XDP_TX,
        (fl, None),
    )?);

    eprintln!("section 1: repeat = 1 over {} calls", o.calls);
    let empty = b.row(
        "empty program (director_pass)",
        EMPTY,
        Method::Calls,
        Frames::Same(&l2_syn),
        XDP_PASS,
        (None, None),
    )?;
    let fl = Some(empty.ns.median);
    rows.push(empty);
    let turn = b.row(
        "turn-around (DNS query turned, TX)",
        TURNAROUND,
        Method::Calls,
        Frames::Same(&dns),
        XDP_TX,
        (fl, None),
    )?;
    let floors = (fl, Some(turn.ns.median));
    rows.push(turn);
    let new_before = counter(&l, "new_flows")?;
    let guarded_before = counter(&l, "guarded")?;
    // The fresh SYNs' flows fill the table: the ACK of one of the latest of them, another
    // flow each call ("one of many"), is a pinned packet whose entry is not in cache, as
    // most are at scale; the "established" rows read the same flow every time.
    let mut many_calls = 0;
    for (mode, syn_frame, fresh, ack_frame, base, vip) in [
        (
            "l2",
            &l2_syn,
            &fresh_l2 as &dyn Fn(u32) -> Vec<u8>,
            &l2_ack,
            0,
            L2_VIP,
        ),
        (
            "ipip",
            &ipip_syn,
            &fresh_ipip,
            &ipip_ack,
            IPIP_BASE,
            IPIP_VIP,
        ),
    ] {
        let mut timed = |packet: &str, frames| -> Result<()> {
            let row = b.row(
                format!("{mode}: {packet}"),
                PROGRAM,
                Method::Calls,
                frames,
                XDP_TX,
                floors,
            )?;
            rows.push(row);
            Ok(())
        };
        timed("SYN (flow present)", Frames::Same(syn_frame))?;
        timed("SYN, new flow (recorded)", Frames::Fresh(fresh))?;
        let latest = b.fresh.get();
        let one_of_many = |n: u32| {
            let back = n.wrapping_mul(0x9e37_79b1) % MANY.min(o.calls * o.runs as u32);
            ack(&fresh_flow(base + latest - 1 - back, vip))
        };
        let midstream = counter(&l, "midstream")?;
        timed("ACK, one of many (pinned)", Frames::Fresh(&one_of_many))?;
        many_calls += (b.fresh.get() - latest) as u64;
        let unpinned = counter(&l, "midstream")? - midstream;
        ensure!(
            unpinned * 100 <= o.calls as u64 * o.runs as u64,
            "{mode}: {unpinned} ACKs of recorded flows found no flow: not the pinned path"
        );
        timed("ACK, established (pinned)", Frames::Same(ack_frame))?;
    }
    let fresh = b.fresh.get() as u64 - many_calls;
    let new = counter(&l, "new_flows")? - new_before;
    let guarded = counter(&l, "guarded")? - guarded_before;
    ensure!(
        new == fresh && guarded == 0,
        "{fresh} fresh SYNs, {new} new flows, {guarded} guarded: not the recording path"
    );
    // The same fresh SYNs with the flood guard refusing every record: the choice and the
    // forwarding without the flow table's insert, to tell the two costs apart.
    let guard = |limit| -> Result<()> { l.reopen()?.steer_mut().set_guard(&limit) };
    guard(GuardLimit::new(1, 1, 0, 32, 128))?;
    let guarded_before = counter(&l, "guarded")?;
    rows.push(b.row(
        "l2: SYN, new flow, not recorded (guard)",
        PROGRAM,
        Method::Calls,
        Frames::Fresh(&fresh_l2),
        XDP_TX,
        floors,
    )?);
    guard(GuardLimit::unlimited())?;
    let refused = counter(&l, "guarded")? - guarded_before;
    ensure!(
        // At one record a second, a few get through while the measurements run.
        refused * 100 >= o.calls as u64 * o.runs as u64 * 99,
        "the guard refused {refused} of the unrecorded flows' records"
    );
    let insns = l.xdp(PROGRAM)?.info()?.verified_instruction_count();
    Ok(table(&rows, o, insns, new))
}

fn table(rows: &[Row], o: &Options, insns: Option<u32>, new_flows: u64) -> Table {
    let insns = insns.map_or("unknown".into(), |i| thousands(i as u64));
    let mut t = Table::new(
        format!(
            "S1. Steering cost per packet from BPF_PROG_TEST_RUN: {} measurements each, on CPU \
             {CPU}. Verifier: {insns} instructions processed. Katran's L4 path: ~{}-{} ns.",
            o.runs, KATRAN_NS.0, KATRAN_NS.1
        ),
        &[
            "packet (TCP to a VIP, port 80)",
            "method",
            "N",
            "ns median",
            "min",
            "max",
            "minus empty",
            "minus turn-around",
            "vs Katran",
        ],
    );
    let ns = |v: f64| format!("{v:.1}");
    for r in rows {
        let [med, min, max] = r.ns.cells(ns);
        let net = r.empty.map(|fl| r.ns.median - fl);
        t.row(vec![
            r.packet.clone(),
            r.method.label().into(),
            thousands(r.frames as u64),
            med,
            min,
            max,
            net.map_or("-".into(), ns),
            r.turnaround.map_or("-".into(), |fl| ns(r.ns.median - fl)),
            // Only director's own rows compare with Katran's L4 path.
            net.filter(|_| r.director).map_or("-".into(), |n| {
                format!("{:.2}-{:.2}x", n / KATRAN_NS.1, n / KATRAN_NS.0)
            }),
        ]);
    }
    t.note(
        "repeat N: one call, N runs on one buffer. l2 rewrites only the MACs, so every run takes \
         the same path; ipip cannot be timed so.",
    );
    t.note(
        "repeat=1, N calls: a fresh frame per call, each measurement the median call; 'minus \
         empty' takes off the per-call floor (timer reads, call).",
    );
    t.note(format!(
        "new flow: a 4-tuple of its own per call, {} flows recorded (director's new_flows \
         counter; the flood guard stopped none; the flow table is an LRU, so it evicts too).",
        thousands(new_flows)
    ));
    t.note(format!(
        "one of many: the ACK of one of the latest {} recorded flows, another each call, so its \
         flow-table entry is not in cache (the new flow's bucket is not either); established: \
         the same flow every call, its entry in cache.",
        thousands(MANY as u64)
    ));
    // Issue 38's ratio, both ways: the pinned packet as the rows above it time it.
    let net = |label: &str| {
        rows.iter()
            .find(|r| r.packet == label && r.method == Method::Calls)
            .and_then(|r| r.empty.map(|fl| r.ns.median - fl))
    };
    for mode in ["l2", "ipip"] {
        let new = net(&format!("{mode}: SYN, new flow (recorded)"));
        let many = net(&format!("{mode}: ACK, one of many (pinned)"));
        let same = net(&format!("{mode}: ACK, established (pinned)"));
        if let (Some(new), Some(many), Some(same)) = (new, many, same) {
            t.note(format!(
                "{mode}: a new flow's SYN over a pinned packet (minus empty): x{:.2} over one of \
                 many, x{:.2} over the same flow every call (issue 38's aim: <= x2).",
                new / many,
                new / same
            ));
        }
    }
    t.note(
        "not recorded (guard): the flood guard set to refuse every record, so the new flow is \
         chosen and forwarded without the flow table's insert.",
    );
    t.note(
        "vs Katran: 'minus empty' (the program's own time) over Katran's 120 and 100 ns. 'minus \
         turn-around': over the program that only turns a DNS query around (the wire bench's ceiling).",
    );
    t
}
