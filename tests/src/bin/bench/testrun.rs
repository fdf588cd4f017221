//! Section 1: the XDP program's own cost per packet, from BPF_PROG_TEST_RUN.
//!
//! Three ways, because an XDP test run repeats on one buffer (after the first run an
//! answering program sees its own reply, which it passes):
//! - plain `repeat`: right for packets that are passed unchanged;
//! - BPF_F_TEST_XDP_LIVE_FRAMES: XDP_TX frames really go out of the ingress interface given
//!   in `ctx_in` (the lab's edge veth here). A fresh copy per frame only holds for pages the
//!   call's page pool allocates new: a page that comes back (the veth peer freed the answer)
//!   is reused with the answer still in it, so one long call mostly times director passing
//!   its own answers. Both are shown: one call of N frames, and calls of one batch each
//!   (fresh pages, but a page allocation and copy per frame, ~20 ms of setup per call). The
//!   `answered` column, from director's own counter, shows which path was timed;
//! - `repeat = 1` over many calls: a fresh frame per call, with the kernel's own timing of
//!   each call; the per-call floor (timer reads and call overhead) is measured with the
//!   empty `director_pass` program and subtracted.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use std::borrow::Cow;

use anyhow::{ensure, Context, Result};
use aya::programs::{TestRun, TestRunAttrs, TestRunOptions, Xdp};
use director_common::counters::Reason;
use director_common::maps::PROGRAM;
use director_common::select::Mode;
use director_ctl::kernel::Maps;
use director_ctl::ops;
use director_tests::bench::sys;
use director_tests::bench::table::{thousands, Spread, Table};
use director_tests::bench::testrun::{
    self as tr, Loaded, CALLS_LABEL, EMPTY, REPEAT_LABEL, XDP_DROP, XDP_PASS, XDP_TX,
};
use director_tests::fixture::route_set;
use director_tests::packets::{self, Flow};
use hickory_proto::op::Message;
use hickory_proto::rr::RecordType;

use crate::{FRA_V4, FRA_V6, NAME};

/// Frames per batch in live-frames mode (the kernel's default is 64, NAPI's budget).
const LIVE_BATCH: u32 = 64;
/// Live-frames calls per measurement when each call runs one batch (each call takes ~20 ms
/// of page-pool setup and teardown, so there cannot be many).
const LIVE_CALLS: u32 = 32;
/// The CPU the measurements run on (the server side's CPU in section 2).
const CPU: usize = 1;

#[derive(Clone)]
pub struct Options {
    /// Packets per measurement: `repeat` for the repeat methods, calls for repeat = 1.
    pub packets: u32,
    /// Measurements per point (median, min, max are printed).
    pub runs: usize,
    pub edge_ns: String,
    pub edge_if: String,
    /// The object built without demand counting (`cargo xtask bench` builds it), to
    /// measure beside this one.
    pub uncounted: Option<PathBuf>,
}

/// The program loaded on its own, maps pinned in a directory of ours, so nothing here
/// touches the director attached in the lab.
fn load() -> Result<Loaded> {
    let mut l = Loaded::new("bench", &[EMPTY])?;
    configure(&mut l.maps)?;
    Ok(l)
}

/// The same service as the lab's: one server, a default route for each family.
fn configure(m: &mut Maps) -> Result<()> {
    // The frames are sent to the packets module's server address: the edge's.
    m.set_configured_address(packets::SERVER_V4.into(), true)?;
    m.set_configured_address(packets::SERVER_V6.into(), true)?;
    ops::server_add(m, "fra-1", Some(FRA_V4.parse()?), Some(FRA_V6.parse()?))?;
    ops::service_add(m, NAME, 60, 1, Mode::Random)?;
    route_set(m, NAME, "0.0.0.0/0", "fra-1")?;
    route_set(m, NAME, "::/0", "fra-1")
}

/// director's own count of answers so far.
fn answered(l: &Loaded) -> Result<u64> {
    let s = ops::stats(&l.maps)?;
    Ok(s.counters
        .get(Reason::Answered.name())
        .copied()
        .unwrap_or(0))
}

/// The frames timed: what a resolver sends (EDNS, 1232-byte payload), from documentation
/// addresses.
struct Frames {
    a4: Vec<u8>,
    aaaa6: Vec<u8>,
    ecs4: Vec<u8>,
    unowned4: Vec<u8>,
    tcp4: Vec<u8>,
}

fn frames() -> Frames {
    let v4 = Flow::v4(Ipv4Addr::new(192, 0, 2, 2));
    let v6 = Flow::v6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2));
    let q =
        |name: &str, t| packets::wire(&packets::with_edns(packets::query(0x5eed, name, t), 1232));
    let ecs = packets::with_ecs(
        packets::query(0x5eed, &format!("{NAME}."), RecordType::A),
        "203.0.113.0".parse().unwrap(),
        24,
        0,
    );
    let mut tcp_payload = Vec::new();
    let dns = q(&format!("{NAME}."), RecordType::A);
    tcp_payload.extend((dns.len() as u16).to_be_bytes());
    tcp_payload.extend(&dns);
    Frames {
        a4: packets::udp_frame(&v4, &q(&format!("{NAME}."), RecordType::A)),
        aaaa6: packets::udp_frame(&v6, &q(&format!("{NAME}."), RecordType::AAAA)),
        ecs4: packets::udp_frame(&v4, &packets::wire(&ecs)),
        unowned4: packets::udp_frame(&v4, &q("mail.example.net.", RecordType::A)),
        tcp4: packets::ip_frame(
            &v4,
            packets::IPPROTO_TCP,
            &packets::tcp_segment(&v4, &tcp_payload),
        ),
    }
}

/// One run with the output kept: the verdict must be `want`, and an answer must be a
/// well-formed reply with an address, so that the timings are of the path we think.
fn check(prog: &Xdp, frame: &[u8], want: u32) -> Result<()> {
    let (verdict, out) = tr::output(prog, frame)?;
    tr::expect_verdict(verdict, want)?;
    if want == XDP_TX {
        packets::verify_checksums(&out).map_err(anyhow::Error::msg)?;
        let reply = Message::from_vec(
            &packets::parse_udp(&out)
                .map_err(anyhow::Error::msg)?
                .payload,
        )?;
        ensure!(
            !reply.answers().is_empty(),
            "the answer has no records: {reply:?}"
        );
    }
    Ok(())
}

/// How a measurement runs the frame. Every one reports the kernel's own timing.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Method {
    /// One call, `repeat` = N on the same buffer.
    Repeat,
    /// N calls of one run each, a fresh frame every call.
    Calls,
    /// Live frames, one call of N frames.
    LiveOneCall,
    /// Live frames, calls of one batch each (a new page pool, so fresh pages).
    LiveBatches,
}

impl Method {
    fn label(self) -> String {
        match self {
            Method::Repeat => REPEAT_LABEL.into(),
            Method::Calls => CALLS_LABEL.into(),
            Method::LiveOneCall => "live, 1 call of N".into(),
            Method::LiveBatches => format!("live, {LIVE_CALLS} calls of {LIVE_BATCH}"),
        }
    }

    /// Frames one measurement runs, given N.
    fn frames(self, n: u32) -> u32 {
        match self {
            Method::LiveBatches => LIVE_CALLS * LIVE_BATCH,
            _ => n,
        }
    }

    /// Mean ns per frame over one measurement; `want` is the verdict where the kernel
    /// reports one (live mode does not).
    fn time(self, prog: &Xdp, frame: &[u8], n: u32, ifindex: u32, want: u32) -> Result<f64> {
        match self {
            Method::Repeat => tr::repeat(prog, frame, n, want),
            Method::Calls => tr::median_call(prog, n, |_| Cow::Borrowed(frame), want),
            Method::LiveOneCall => live(prog, frame, n, ifindex),
            Method::LiveBatches => {
                let mut total = 0.0;
                for _ in 0..LIVE_CALLS {
                    total += live(prog, frame, LIVE_BATCH, ifindex)?;
                }
                Ok(total / LIVE_CALLS as f64)
            }
        }
    }
}

/// One live-frames call of `frames` frames, XDP_TX going out of interface `ifindex` (of
/// the calling thread's namespace): the kernel's mean ns per frame.
fn live(prog: &Xdp, frame: &[u8], frames: u32, ifindex: u32) -> Result<f64> {
    // struct xdp_md: data, data_end, data_meta, ingress_ifindex, rx_queue_index,
    // egress_ifindex. The kernel wants data_end = frame length and no metadata.
    let md: Vec<u8> = [0, frame.len() as u32, 0, ifindex, 0, 0]
        .iter()
        .flat_map(|v| v.to_ne_bytes())
        .collect();
    let r = prog
        .test_run(TestRunOptions {
            data_in: Some(frame),
            ctx_in: Some(&md),
            repeat: frames,
            attrs: TestRunAttrs::new().xdp_live_frames(LIVE_BATCH),
            ..TestRunOptions::new()
        })
        .context("BPF_PROG_TEST_RUN with live frames")?;
    Ok(r.duration.as_nanos() as f64)
}

struct Row {
    packet: String,
    verdict: &'static str,
    method: Method,
    frames: u32,
    ns: Spread,
    /// Share of the frames director's `answered` counter counted (None: not director).
    answered: Option<f64>,
    /// The empty program's median by the same method, to subtract.
    floor: Option<f64>,
}

struct Bench<'a> {
    l: &'a Loaded,
    n: u32,
    runs: usize,
    ifindex: u32,
}

impl Bench<'_> {
    fn row(
        &self,
        packet: &'static str,
        prog: &str,
        method: Method,
        frame: &[u8],
        want: u32,
        floor: Option<f64>,
    ) -> Result<Row> {
        let director = prog == PROGRAM;
        let before = answered(self.l)?;
        let xdp = self.l.xdp(prog)?;
        let ns = tr::spread(self.runs, || {
            method.time(xdp, frame, self.n, self.ifindex, want)
        })?;
        let frames = method.frames(self.n);
        let counted = (answered(self.l)? - before) as f64;
        Ok(Row {
            packet: packet.into(),
            verdict: tr::verdict_name(want),
            method,
            frames,
            ns,
            answered: director.then(|| counted / (frames as f64 * self.runs as f64)),
            floor,
        })
    }
}

/// What the live-frames runs did to the edge veth, to show the kernel took the ifindex.
struct LiveCheck {
    ifindex: u32,
    xmit: u64,
    xmit_errors: u64,
}

pub fn run(opts: &Options) -> Result<Table> {
    let opts = opts.clone();
    // In a thread of its own: it enters the edge namespace (live frames look the ingress
    // ifindex up in the caller's namespace); the rest of the bench stays where it was.
    tr::on_cpu(CPU, move || measure(&opts))
}

fn measure(o: &Options) -> Result<Table> {
    sys::enter_netns(&o.edge_ns)?;
    let ifindex = sys::ifindex(&o.edge_if)?;
    let l = load()?;
    let f = frames();
    for (frame, want) in [
        (&f.a4, XDP_TX),
        (&f.aaaa6, XDP_TX),
        (&f.ecs4, XDP_TX),
        (&f.unowned4, XDP_PASS),
        (&f.tcp4, XDP_PASS),
    ] {
        check(l.xdp(PROGRAM)?, frame, want)?;
    }
    let b = Bench {
        l: &l,
        n: o.packets,
        runs: o.runs,
        ifindex,
    };
    let mut rows = Vec::new();

    eprintln!("section 1: repeat");
    let floor = b.row(
        "empty program (director_pass)",
        EMPTY,
        Method::Repeat,
        &f.a4,
        XDP_PASS,
        None,
    )?;
    let fl = Some(floor.ns.median);
    rows.push(floor);
    rows.push(b.row(
        "A, name not owned, IPv4",
        PROGRAM,
        Method::Repeat,
        &f.unowned4,
        XDP_PASS,
        fl,
    )?);
    rows.push(b.row(
        "TCP to port 53, IPv4",
        PROGRAM,
        Method::Repeat,
        &f.tcp4,
        XDP_PASS,
        fl,
    )?);

    eprintln!("section 1: repeat = 1 over {} calls", o.packets);
    let floor = b.row(
        "empty program (director_pass)",
        EMPTY,
        Method::Calls,
        &f.a4,
        XDP_PASS,
        None,
    )?;
    let fl = Some(floor.ns.median);
    rows.push(floor);
    for (packet, frame) in answer_frames(&f) {
        rows.push(b.row(packet, PROGRAM, Method::Calls, frame, XDP_TX, fl)?);
    }
    // The same answers with response rate limiting off and on, the two measured in turn
    // (off, on, off, on, ...) so that a machine getting busier or quieter during the run
    // moves both alike. On, at a rate no run reaches (one answer per ns, seconds of burst):
    // every answer also pays the limit's lookup, the tag's hash, the clock and the
    // bucket's update (the exemption trie is asked only over the limit). Then a source
    // over its limit, whose responses are dropped.
    for (packets, frame) in [
        (
            ["A, IPv4, RRL off", "A, IPv4, RRL on (within limit)"],
            &f.a4,
        ),
        (
            ["AAAA, IPv6, RRL off", "AAAA, IPv6, RRL on (within limit)"],
            &f.aaaa6,
        ),
    ] {
        rows.extend(paired_rrl(&b, packets, frame, fl)?);
    }
    set_rrl(&l, 1, 1, 0)?;
    exhaust_buckets(&l, Ipv4Addr::new(192, 0, 2, 2))?;
    rows.push(b.row(
        "A, IPv4, RRL: over the limit, dropped",
        PROGRAM,
        Method::Calls,
        &f.a4,
        XDP_DROP,
        fl,
    )?);
    set_rrl(&l, 0, 0, 0)?;
    rows.extend(paired_sampling(&b, &f.a4, fl)?);
    let base = base_object(&l)?;
    if let Some(base) = &base {
        eprintln!("section 1: this program beside $DIRECTOR_BASE_OBJECT's, in turns");
        rows.extend(paired_objects(&b, base, "base object", &f, fl)?);
    }
    // What demand counting costs an answer (issue 36's aim: 20 ns): the same program built
    // without it, side by side.
    let uncounted = o
        .uncounted
        .as_deref()
        .map(|p| other_object(&l, p))
        .transpose()?;
    if let Some(u) = &uncounted {
        eprintln!("section 1: this program beside the one without demand counting, in turns");
        rows.extend(paired_objects(&b, u, "without demand counting", &f, fl)?);
    }

    eprintln!("section 1: live frames");
    let stat = |name| sys::ethtool_stat(&o.edge_ns, &o.edge_if, name);
    let (xmit0, err0) = (
        stat("tx_queue_0_xdp_xmit")?,
        stat("tx_queue_0_xdp_xmit_errors")?,
    );
    for method in [Method::LiveOneCall, Method::LiveBatches] {
        for (packet, frame) in answer_frames(&f) {
            rows.push(b.row(packet, PROGRAM, method, frame, XDP_TX, None)?);
        }
    }
    let live = LiveCheck {
        ifindex,
        xmit: stat("tx_queue_0_xdp_xmit")? - xmit0,
        xmit_errors: stat("tx_queue_0_xdp_xmit_errors")? - err0,
    };

    let insns = l.xdp(PROGRAM)?.info()?.verified_instruction_count();
    Ok(table(&rows, o, insns, &live))
}

/// One measurement of the three answers by `repeat = 1` calls, each minus the empty
/// program's floor measured just before: the figures set beside the starting program's;
/// and the program's verified instructions.
pub fn answers_net(o: &Options) -> Result<([f64; 3], Option<u32>)> {
    let (edge_ns, packets) = (o.edge_ns.clone(), o.packets);
    tr::on_cpu(CPU, move || -> Result<([f64; 3], Option<u32>)> {
        sys::enter_netns(&edge_ns)?;
        let l = load()?;
        let f = frames();
        let time = |prog: &str, frame: &[u8], want: u32| {
            let xdp = l.xdp(prog)?;
            check(xdp, frame, want)?;
            Method::Calls.time(xdp, frame, packets, 0, want)
        };
        let floor = time(EMPTY, &f.a4, XDP_PASS)?;
        let mut net = [0.0; 3];
        for (n, (_, frame)) in net.iter_mut().zip(answer_frames(&f)) {
            *n = time(PROGRAM, frame, XDP_TX)? - floor;
        }
        Ok((net, l.xdp(PROGRAM)?.info()?.verified_instruction_count()))
    })
}

/// Rows for `frame` answered with the service unlimited and limited, measured in turn.
fn paired_rrl(
    b: &Bench<'_>,
    packets: [&'static str; 2],
    frame: &[u8],
    floor: Option<f64>,
) -> Result<[Row; 2]> {
    let xdp = b.l.xdp(PROGRAM)?;
    let before = answered(b.l)?;
    let mut each = [Vec::new(), Vec::new()];
    for _ in 0..b.runs {
        for (on, times) in each.iter_mut().enumerate() {
            if on == 1 {
                set_rrl(b.l, u32::MAX, u32::MAX, 0)?;
            } else {
                set_rrl(b.l, 0, 0, 0)?;
            }
            times.push(Method::Calls.time(xdp, frame, b.n, b.ifindex, XDP_TX)?);
        }
    }
    set_rrl(b.l, 0, 0, 0)?;
    let share = (answered(b.l)? - before) as f64 / (2.0 * b.n as f64 * b.runs as f64);
    let row = |i: usize| Row {
        packet: packets[i].into(),
        verdict: "TX",
        method: Method::Calls,
        frames: b.n,
        ns: Spread::of(&each[i]),
        answered: Some(share),
        floor,
    };
    Ok([row(0), row(1)])
}

/// Another build's object (`$DIRECTOR_BASE_OBJECT`: e.g. main's, to time what a change
/// adds per answer).
fn base_object(l: &Loaded) -> Result<Option<aya::Ebpf>> {
    std::env::var_os("DIRECTOR_BASE_OBJECT")
        .map(|path| other_object(l, Path::new(&path)))
        .transpose()
}

/// Another build's object, its `director` program loaded over the same pinned maps as
/// ours, so that both answer from one configuration. Its maps must be a subset of ours
/// with the same definitions (unpinned ones, scratch and cache, are its own).
fn other_object(l: &Loaded, path: &Path) -> Result<aya::Ebpf> {
    let mut ebpf = aya::EbpfLoader::new()
        .default_map_pin_directory(l.pins.path())
        .override_global("AYA_LOG_LEVEL", &0u8, false)
        .load_file(path)
        .with_context(|| format!("loading {}", path.display()))?;
    let p: &mut Xdp = ebpf
        .program_mut(PROGRAM)
        .with_context(|| format!("no director in {}", path.display()))?
        .try_into()?;
    p.load()
        .with_context(|| format!("loading {}'s director", path.display()))?;
    Ok(ebpf)
}

/// The three answers by our program and `other`'s (rows labelled `label`), measured in
/// turn (ours, other, ours, other, ...): the difference is what tells them apart.
fn paired_objects(
    b: &Bench<'_>,
    other: &aya::Ebpf,
    label: &str,
    f: &Frames,
    floor: Option<f64>,
) -> Result<Vec<Row>> {
    let theirs: &Xdp = other.program(PROGRAM).context("no director")?.try_into()?;
    let ours = b.l.xdp(PROGRAM)?;
    eprintln!(
        "  verified instructions: this program {:?}, {label} {:?}",
        ours.info()?.verified_instruction_count(),
        theirs.info()?.verified_instruction_count()
    );
    let mut rows = Vec::new();
    for (packet, frame) in answer_frames(f) {
        check(theirs, frame, XDP_TX).with_context(|| format!("{label}: {packet}"))?;
        let mut each = [Vec::new(), Vec::new()];
        for _ in 0..b.runs {
            for (i, prog) in [ours, theirs].into_iter().enumerate() {
                each[i].push(Method::Calls.time(prog, frame, b.n, b.ifindex, XDP_TX)?);
            }
        }
        for (i, who) in ["this program", label].into_iter().enumerate() {
            rows.push(Row {
                packet: format!("{packet}: {who}"),
                verdict: "TX",
                method: Method::Calls,
                frames: b.n,
                ns: Spread::of(&each[i]),
                answered: None,
                floor,
            });
        }
    }
    Ok(rows)
}

/// A/IPv4 answers with demand sampling off and at 1 in 64 (the ring drained after each
/// measurement, so every sampled answer reserves and submits a record), in turn.
fn paired_sampling(b: &Bench<'_>, frame: &[u8], floor: Option<f64>) -> Result<[Row; 2]> {
    let xdp = b.l.xdp(PROGRAM)?;
    let mut maps = b.l.reopen()?;
    let mut ring = director_ctl::kernel::DemandRing::open(b.l.pins.path())?;
    let before = answered(b.l)?;
    let mut each = [Vec::new(), Vec::new()];
    let mut sampled = 0usize;
    for _ in 0..b.runs {
        for (on, times) in each.iter_mut().enumerate() {
            maps.set_demand_sampling(if on == 1 { 64 } else { 0 })?;
            times.push(Method::Calls.time(xdp, frame, b.n, b.ifindex, XDP_TX)?);
            sampled += ring.drain(usize::MAX).len();
        }
    }
    maps.set_demand_sampling(0)?;
    let answers = answered(b.l)? - before;
    // One in 64 of the sampled half's answers, give or take one per run.
    let want = (b.n as usize * b.runs) / 64;
    ensure!(
        sampled.abs_diff(want) <= b.runs,
        "{sampled} demand samples of {answers} answers, expected about {want}"
    );
    let share = answers as f64 / (2.0 * b.n as f64 * b.runs as f64);
    let row = |i: usize, packet: &str| Row {
        packet: packet.into(),
        verdict: "TX",
        method: Method::Calls,
        frames: b.n,
        ns: Spread::of(&each[i]),
        answered: Some(share),
        floor,
    };
    Ok([
        row(0, "A, IPv4, demand sampling off"),
        row(1, "A, IPv4, demand sampled 1 in 64"),
    ])
}

/// The service's rate limit (`rate` 0: none), per /24 and /56, every `slip`-th slipped.
fn set_rrl(l: &Loaded, rate: u32, burst: u32, slip: u32) -> Result<()> {
    let r = ops::RrlSettings {
        rate,
        burst,
        slip,
        ipv4_prefix: 24,
        ipv6_prefix: 56,
    };
    // Maps are shared descriptors: a second handle writes the same pinned maps.
    ops::rrl_set(&mut l.reopen()?, NAME, &r)
}

/// Schedules every bucket in use (the earlier rows' sources': `source`'s among them) far
/// ahead, so that no answer refills it however long the measurement takes (at any real
/// rate one would come every so often). The slots are found by scanning: a bucket's slot
/// depends on the seed the loader drew.
fn exhaust_buckets(l: &Loaded, source: Ipv4Addr) -> Result<()> {
    use aya::maps::{Array, Map, MapData};
    use director_common::maps::{MAP_RRL_SLOTS, RRL_SLOTS};
    use director_common::rrl::Slot;
    let data = MapData::from_pin(l.pins.path().join(MAP_RRL_SLOTS))?;
    let mut slots: Array<MapData, Slot> = Map::from_map_data(data)?.try_into()?;
    let mut used = 0;
    for i in 0..RRL_SLOTS {
        let mut slot = slots.get(&i, 0)?;
        if slot.tag != 0 {
            slot.bucket.tat_ns = u64::MAX / 2;
            slots.set(i, slot, 0)?;
            used += 1;
        }
    }
    ensure!(
        used > 0,
        "no bucket in use: {source} was never answered under a limit"
    );
    Ok(())
}

/// The answers' row labels; the starting program's bench labels its rows the same way.
pub const ANSWERS: [&str; 3] = ["A, IPv4", "AAAA, IPv6", "A with ECS /24, IPv4"];

fn answer_frames(f: &Frames) -> [(&'static str, &Vec<u8>); 3] {
    [
        (ANSWERS[0], &f.a4),
        (ANSWERS[1], &f.aaaa6),
        (ANSWERS[2], &f.ecs4),
    ]
}

fn table(rows: &[Row], o: &Options, insns: Option<u32>, live: &LiveCheck) -> Table {
    let insns = insns.map_or("unknown".into(), |i| thousands(i as u64));
    let mut t = Table::new(
        format!(
            "1. Per-packet cost from BPF_PROG_TEST_RUN: N = {}, {} measurements each, on CPU \
             {CPU}. Verifier: {insns} instructions processed. Aims: <= 150 ns per answer; \
             issue 8: <= 2/3 of its starting program's net cost per answer (section 1b, with \
             --baseline as cargo xtask bench runs it), and no more verified instructions.",
            thousands(o.packets as u64),
            o.runs
        ),
        &[
            "packet (EDNS queries)",
            "verdict",
            "method",
            "frames",
            "answered",
            "ns median",
            "min",
            "max",
            "minus floor",
        ],
    );
    let ns = |v: f64| format!("{v:.1}");
    for r in rows {
        let [med, min, max] = r.ns.cells(ns);
        let answered = r.answered.map_or("-".into(), |a| {
            if a < 0.01 {
                format!("{:.2}%", 100.0 * a)
            } else {
                format!("{:.1}%", 100.0 * a)
            }
        });
        let net = r.floor.map_or("-".into(), |fl| ns(r.ns.median - fl));
        t.row(vec![
            r.packet.clone(),
            r.verdict.into(),
            r.method.label(),
            thousands(r.frames as u64),
            answered,
            med,
            min,
            max,
            net,
        ]);
    }
    t.note(
        "answered: share of the frames director's own counter counted as answered (the check \
         that an answer path was timed).",
    );
    t.note(
        "repeat N: one call, N runs on the same buffer; right for passed packets only (an \
         answer would be re-run as a reply).",
    );
    t.note(
        "repeat=1, N calls: a fresh frame per call, each measurement the median call of N; \
         'minus floor' subtracts the empty program's (timer reads, call).",
    );
    if o.uncounted.is_some() {
        t.note(
            "'this program' beside 'without demand counting' (the same source built with \
             director-ebpf's `uncounted` feature, loaded over the same maps), one measurement \
             each in turn: the difference is what counting each answer's decision (and the \
             sampling check) costs; aim <= 20 ns (issue 36). The timer's steps are 10 ns.",
        );
    }
    t.note(format!(
        "live: BPF_F_TEST_XDP_LIVE_FRAMES with ingress ifindex {} ({} in the lab's edge \
         namespace; the kernel accepted it and the edge veth's ndo_xdp_xmit took {} frames, {} \
         errors).",
        live.ifindex,
        o.edge_if,
        thousands(live.xmit),
        thousands(live.xmit_errors)
    ));
    t.note(
        "  Not a fresh copy per run on this kernel: a page that comes back from the veth is \
         reused with the answer still in it,",
    );
    t.note(
        "  so '1 call of N' mostly times director passing its own earlier answers (see \
         'answered'). One batch per call gets",
    );
    t.note(
        "  fresh pages, but then each frame also pays a page allocation and copy, and each call \
         ~20 ms of setup; no floor is subtracted.",
    );
    t
}
