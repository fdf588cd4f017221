//! Controller benchmark (part of `cargo xtask bench`): a full-scale compile on real data —
//! the full IPv4 table (BGP4MP_ET updates, 577 k prefixes) as every site's view, the full
//! GeoLite2 City database (3.48 M networks), five sites at real PoPs, three services — with
//! time, peak memory and entries; the time to write it into the kernel; and the time from
//! one changed RTT value to the kernel's answer changing, measured with DNS queries from a
//! socket on a veth.

use std::{
    borrow::Cow,
    fmt::Write as _,
    path::Path,
    thread::sleep,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use director_common::maps::{Decision, DEC16_LANES, DEC16_SLOTS, MAX_CHOICES};
use director_ctl::{
    controller::{self, config::Config},
    kernel,
};
use director_plan::{data::Data, decide};
use director_tests::bench::scale::{rtt_file, sites_and_servers, write_config, SITES};
use director_tests::bench::sys;
use director_tests::bench::table::{print_pairs, Pair};
use director_tests::bench::testrun::{self as tr, EMPTY, XDP_PASS, XDP_TX};
use director_tests::netns::{self, Controller, Lab, EDGE_V4};
use director_tests::packets::{self, Flow};
use director_tests::pins::PinDir;
use hickory_proto::rr::RecordType;
use std::net::Ipv4Addr;

fn peak_rss_mb() -> f64 {
    sys::proc_kb("/proc/self/status", "VmHWM").map_or(0.0, |kb| kb as f64 / 1024.0)
}

/// The first table case: GeoLite2 City alone, three sites, one service sorted by
/// distance. Returns (GeoIP networks, entries, saved).
fn geo_alone(dir: &Path) -> Result<(usize, usize, usize)> {
    let mut c = String::new();
    let list = sites_and_servers(&mut c, &SITES[..3], None)?;
    writeln!(
        c,
        "[[service]]\nname = \"www.example.com\"\nservers = [{list}]\npriority = {{ geo = 1 }}"
    )?;
    let path = dir.join("geo-alone.toml");
    std::fs::write(&path, c)?;
    let cfg = Config::load(&path)?;
    let d = Data::load(&cfg.plan)?;
    let ids = decide::Ids::positional(&cfg.plan);
    let c = decide::compute(&cfg.plan, &d, &ids, &Default::default())?;
    let entries = c.tables.iter().map(|t| t.2.entries.len()).sum();
    let saved = c.tables.iter().map(|t| t.2.saved).sum();
    Ok((d.summary.geo_networks, entries, saved))
}

/// Compile and apply in this process, on pins of its own.
fn compile_and_apply(config: &Path) -> Result<Vec<Pair>> {
    let t = Instant::now();
    let cfg = Config::load(config)?;
    let d = Data::load(&cfg.plan)?;
    let load = t.elapsed().as_secs_f64();
    let ids = decide::Ids::positional(&cfg.plan);
    let c = decide::compute(&cfg.plan, &d, &ids, &Default::default())?;
    let entries: usize = c.tables.iter().map(|t| t.2.entries.len()).sum();
    let saved: usize = c.tables.iter().map(|t| t.2.saved).sum();
    let peak = peak_rss_mb();
    // Named like a lab's pins, so that a later lab's sweep removes them if this process is
    // killed; removed on return however it ends.
    let pins = PinDir::new(netns::PREFIX, "controller");
    let slab0 = slab_kb()?;
    let mut ebpf = kernel::program::load(pins.path(), 0)?;
    let mut m = kernel::Maps::open(pins.path())?;
    // The test frames' destination (see `per_packet_full_table`) is the edge's address.
    m.set_configured_address(packets::SERVER_V4.into(), true)?;
    let t = Instant::now();
    // What `run` does at its first start: the difference to the (empty) kernel, in place.
    let written = controller::apply::sync(&mut m, &cfg, &c, &ids)?;
    let apply = t.elapsed().as_secs_f64();
    let one_table = slab_kb()?.saturating_sub(slab0) as f64 / 1024.0;
    // A compaction (what happens when decision ids run out): every entry rewritten in
    // place onto the other half of the stored decisions. The trie frees each replaced node
    // after an RCU grace period, so the peak is sampled while it runs.
    let done = std::sync::atomic::AtomicBool::new(false);
    let (replace_s, peak_kb) = std::thread::scope(|sc| -> Result<(f64, u64)> {
        let sampler = sc.spawn(|| {
            let mut peak = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(slab_kb().unwrap_or(0));
                sleep(Duration::from_millis(2));
            }
            peak
        });
        let t = Instant::now();
        let r = m.compact();
        let s = t.elapsed().as_secs_f64();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let peak = sampler.join().unwrap_or(0);
        r?;
        Ok((s, peak))
    })?;
    let compacting = peak_kb.saturating_sub(slab0) as f64 / 1024.0;
    let after = slab_kb()?.saturating_sub(slab0) as f64 / 1024.0;
    // The compaction cleared every /16 slot (it rewrote every entry); set them again the
    // way `run` does after its writes, from slots all empty: the most this takes.
    let t = Instant::now();
    let tables = || c.tables.iter().map(|(id, _, t)| (*id, &t.entries[..]));
    let front_written =
        controller::apply::publish_fronts(&mut m, tables(), kernel::TableSource::Kernel)?;
    let front_s = t.elapsed().as_secs_f64();
    // A full publication when no slot changes (a restart's first sync; `run`'s updates
    // only look at the /16s they cleared).
    let t = Instant::now();
    controller::apply::publish_fronts(&mut m, tables(), kernel::TableSource::Kernel)?;
    let again_ms = t.elapsed().as_secs_f64() * 1e3;
    let mut front_set = Vec::new();
    for (id, name, _) in &c.tables {
        let set = (0..1u32 << 16)
            .filter(|&n| m.front16_word(*id, n) != 0)
            .count();
        front_set.push(format!("{name} {set}"));
    }
    let (lookup, front, walk) = per_packet_full_table(&mut ebpf, &m)?;
    // What a restart of run on the same inputs writes: entries, and /16 slots changed.
    let words = |m: &kernel::Maps| -> Vec<u64> {
        c.tables
            .iter()
            .flat_map(|(id, _, _)| (0..1u32 << 16).map(|n| m.front16_word(*id, n)))
            .collect()
    };
    let front_before = words(&m);
    let t = Instant::now();
    let resync = controller::apply::sync(&mut m, &cfg, &c, &ids)?;
    let resync_s = t.elapsed().as_secs_f64();
    let front_changed = front_before
        .iter()
        .zip(words(&m))
        .filter(|(a, b)| **a != *b)
        .count();
    let mut rows = vec![
        Pair(
            "inputs",
            format!(
                "{} BGP routes per site x {}, {} GeoIP networks",
                d.summary.bgp_routes.first().map_or(0, |r| r.routes),
                SITES.len(),
                d.summary.geo_networks
            ),
        ),
        Pair("read inputs", format!("{load:.2} s")),
        Pair(
            "compute (sort + compress)",
            format!(
                "{:.2} s for {} client prefixes x {} services",
                c.seconds,
                c.prefixes,
                c.tables.len()
            ),
        ),
        Pair(
            "load + compute",
            format!("{:.2} s (aim <= 10 s)", load + c.seconds),
        ),
        Pair("peak memory", format!("{peak:.0} MB (aim <= 2048 MB)")),
        Pair(
            "entries written",
            format!(
                "{entries} ({saved} saved by compression, {:.0} %)",
                100.0 * saved as f64 / (entries + saved) as f64
            ),
        ),
        Pair(
            "apply to the kernel",
            format!(
                "{apply:.2} s for {written} entries, in place into an empty table (aim <= \
                 1 s); {replace_s:.2} s to compact them (every entry rewritten in place onto \
                 the other half of the stored decisions: only when decision ids run out)"
            ),
        ),
        Pair(
            "kernel memory (slab)",
            format!(
                "{one_table:.0} MB for the table ({:.0} B per entry); {compacting:.0} MB \
                 peak while compacting, {after:.0} MB just after it (aim <= 128 MB at \
                 every moment; there is no second table); plus {:.1} MB of stored decisions \
                 (an array, allocated whole)",
                one_table * 1024.0 * 1024.0 / written.max(1) as f64,
                (2 * MAX_CHOICES as usize * size_of::<Decision>()) as f64 / (1024.0 * 1024.0)
            ),
        ),
        Pair(
            "IPv4 /16 front (DIR_DEC16)",
            format!(
                "of the 65,536 /16s, answered whole by one entry: {}; set from empty in \
                 {front_s:.3} s ({front_written} slots written), a full pass with nothing \
                 to set {again_ms:.1} ms; {:.0} MB (one mapped array \
                 for the first {DEC16_LANES} services, not slab)",
                front_set.join(", "),
                (DEC16_LANES * DEC16_SLOTS * 8) as f64 / (1024.0 * 1024.0),
            ),
        ),
        Pair("per answer, full table (PROG_TEST_RUN)", lookup),
        Pair("per answer, full table, new clients, /16 front", front),
        Pair("per answer, full table, new clients, trie", walk),
        Pair(
            "restart on the same inputs",
            format!(
                "{resync} entries written, {front_changed} /16 slots changed, {resync_s:.2} s \
                 to compare (aim: 0 written)"
            ),
        ),
    ];
    for (_, name, t) in &c.tables {
        rows.push(Pair(
            "  per service",
            format!("{name}: {} entries", t.entries.len()),
        ));
    }
    let dir = config.parent().context("the config has no directory")?;
    let (networks, entries, saved) = geo_alone(dir)?;
    rows.push(Pair(
        "GeoLite2 City alone, 3 sites, 1 service",
        format!(
            "{entries} entries for {networks} networks ({saved} saved; {:.1}x fewer, aim >= 10x)",
            networks as f64 / entries.max(1) as f64
        ),
    ));
    Ok(rows)
}

/// director's cost per answer with the full-scale table loaded (the lookup walks a deep
/// trie): A queries with ECS from client networks spread over the address space, one
/// fresh frame per BPF_PROG_TEST_RUN call, minus the empty program's cost per call. Three
/// times: ten client /24s in turn (after the first, the program's per-CPU cache of trie
/// reads answers them), then a new /24 on every call, from /16s whose `DIR_DEC16` slot is
/// set (one array read), and from the others (every lookup walks the trie).
fn per_packet_full_table(
    ebpf: &mut aya::Ebpf,
    m: &kernel::Maps,
) -> Result<(String, String, String)> {
    const CALLS: u32 = 20_000;
    tr::load_extra(ebpf, EMPTY)?;
    let subnets = [
        "1.1.1.0",
        "8.8.8.0",
        "31.13.64.0",
        "81.2.69.0",
        "103.86.96.0",
        "151.101.1.0",
        "177.71.128.0",
        "193.0.0.0",
        "203.0.113.0",
        "212.58.224.0",
    ];
    let flow = Flow::v4(Ipv4Addr::new(192, 0, 2, 2));
    let frame = |a: std::net::IpAddr| {
        let q = packets::query(0x5eed, "video.example.com.", RecordType::A);
        let q = packets::with_ecs(q, a, 24, 0);
        packets::udp_frame(&flow, &packets::wire(&q))
    };
    let few: Vec<Vec<u8>> = subnets
        .iter()
        .map(|a| frame(a.parse().expect("an address")))
        .collect();
    // Distinct /24s spread over 1.0.0.0-222.255.255.255 (a stride prime to the range),
    // sorted by whether their /16 has a slot, until each kind has CALLS of them.
    let service = m
        .find_service("video.example.com")?
        .context("no service video.example.com")?;
    let (mut front, mut walk) = (Vec::new(), Vec::new());
    let mut sampled = 0u32;
    for k in 0..CALLS * 40 {
        if front.len() >= CALLS as usize && walk.len() >= CALLS as usize {
            break;
        }
        let n = (u64::from(k) * 40_503) % (222 << 16) + (1 << 16);
        let a = Ipv4Addr::from((n as u32) << 8);
        sampled += 1;
        let kind = if m.front16_word(service, u32::from(a) >> 16) != 0 {
            &mut front
        } else {
            &mut walk
        };
        if kind.len() < CALLS as usize {
            kind.push(frame(a.into()));
        }
    }
    let front_share = front.len() as f64 / f64::from(sampled);
    let mean = |name: &str, want: u32, frames: &[Vec<u8>]| -> Result<f64> {
        let prog: &aya::programs::Xdp = ebpf
            .program(name)
            .with_context(|| format!("no program {name}"))?
            .try_into()?;
        let each = tr::calls(
            prog,
            CALLS,
            |k| Cow::Borrowed(&frames[k as usize % frames.len()]),
            want,
        )
        .with_context(|| format!("running {name}"))?;
        Ok(each.iter().map(|&ns| u128::from(ns)).sum::<u128>() as f64 / f64::from(CALLS))
    };
    let floor = mean(EMPTY, XDP_PASS, &few)?;
    let director = mean(director_common::maps::PROGRAM, XDP_TX, &few)?;
    let by_front = mean(director_common::maps::PROGRAM, XDP_TX, &front)?;
    let by_trie = mean(director_common::maps::PROGRAM, XDP_TX, &walk)?;
    Ok((
        format!(
            "{:.0} ns minus floor ({director:.0} - {floor:.0} ns; {CALLS} calls over {} client \
             /24s, answered from the /16 front or the per-CPU cache after the first; compare \
             section 1's 2-entry table)",
            director - floor,
            few.len()
        ),
        format!(
            "{:.0} ns minus floor ({by_front:.0} - {floor:.0} ns; {} calls, each from a /24 \
             not seen before in a /16 with a slot: {:.0} % of /24s sampled evenly over the \
             space)",
            by_front - floor,
            front.len(),
            100.0 * front_share
        ),
        format!(
            "{:.0} ns minus floor ({by_trie:.0} - {floor:.0} ns; {} calls, each from a /24 \
             not seen before in a /16 without one: the trie walked every time)",
            by_trie - floor,
            walk.len()
        ),
    ))
}

/// The kernel's slab memory, kB: BPF map elements live there.
fn slab_kb() -> Result<u64> {
    sys::proc_kb("/proc/meminfo", "Slab")
}

/// Polls the edge with `video.example.com A` from a socket in the client's namespace until
/// `done` accepts the first address answered (None: no answer): returns when (since
/// `start`) and that answer. Each reply is waited for 50 ms (dig waits a second or more for
/// a query that is not answered, and the edge's stack rate-limits the port-unreachable
/// errors that would end its wait early); between tries it sleeps `every`. A socket rather
/// than dig: starting dig in the namespace takes 10-20 ms, which the latencies measured
/// here would include.
fn poll_answer(
    client_ns: &str,
    start: Instant,
    limit: Duration,
    every: Duration,
    done: impl Fn(Option<Ipv4Addr>) -> bool + Send,
) -> Result<(f64, Option<Ipv4Addr>)> {
    let ns = client_ns.to_string();
    std::thread::scope(|s| {
        s.spawn(move || -> Result<(f64, Option<Ipv4Addr>)> {
            // A network namespace belongs to the thread: this one moves into the client's.
            let f = std::fs::File::open(format!("/run/netns/{ns}"))
                .with_context(|| format!("opening namespace {ns}"))?;
            use std::os::fd::AsRawFd;
            // SAFETY: setns on a namespace file this thread opened; only this thread moves.
            if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(std::io::Error::last_os_error()).context("setns");
            }
            let sock = std::net::UdpSocket::bind("0.0.0.0:0")?;
            sock.connect((EDGE_V4, 53))?;
            sock.set_read_timeout(Some(Duration::from_millis(50)))?;
            let mut buf = [0u8; 1500];
            let mut id: u16 = 0;
            loop {
                id = id.wrapping_add(1);
                let q = packets::query(id, "video.example.com", RecordType::A);
                // A refused send (port unreachable from the last try) is one more try.
                let _ = sock.send(&packets::wire(&q));
                let mut got = None;
                if let Ok(n) = sock.recv(&mut buf) {
                    if let Ok(m) = hickory_proto::op::Message::from_vec(&buf[..n]) {
                        if m.id() == id {
                            got = m.answers().iter().find_map(|r| match r.data() {
                                Some(hickory_proto::rr::RData::A(a)) => Some(a.0),
                                _ => None,
                            });
                        }
                    }
                }
                if done(got) {
                    return Ok((start.elapsed().as_secs_f64(), got));
                }
                if start.elapsed() > limit {
                    bail!("no such answer within {} s", limit.as_secs());
                }
                sleep(every);
            }
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
    })
}

/// `run` on the config in a lab; one RTT value changes; how long until a client on the veth sees it.
fn change_latency(config: &Path) -> Result<Vec<Pair>> {
    let lab = Lab::new();
    lab.attach();
    let run = Controller::start_polling(&lab, config, &config.with_extension("log"), 10);
    let start = Instant::now();
    let ns = lab.client_ns.clone();
    let (first, _) = poll_answer(
        &ns,
        start,
        Duration::from_secs(120),
        Duration::from_millis(20),
        |a| a.is_some(),
    )
    .context("run did not answer")?;
    // run writes in place, most specific entries first: wait until all are in.
    while !run.log().contains("entries written") {
        if start.elapsed() > Duration::from_secs(300) {
            bail!("run did not finish writing within 300 s:\n{}", run.log());
        }
        sleep(Duration::from_millis(50));
    }
    let complete = start.elapsed().as_secs_f64();
    let (_, before) = poll_answer(
        &ns,
        Instant::now(),
        Duration::from_secs(10),
        Duration::from_millis(20),
        |a| a.is_some(),
    )
    .context("no answer once the table was complete")?;
    let before = before.context("no answer once the table was complete")?;
    // fra was closest by RTT; make it the slowest. Written as an operator should (a temp
    // file renamed into place), so run reads it without waiting for it to settle.
    let tmp = config.with_file_name("rtt.csv.tmp");
    std::fs::write(&tmp, rtt_file(400.0))?;
    std::fs::rename(&tmp, config.with_file_name("rtt.csv"))?;
    let changed = Instant::now();
    let (latency, after) = poll_answer(
        &ns,
        changed,
        Duration::from_secs(120),
        Duration::from_millis(1),
        |a| a.is_some_and(|a| a != before),
    )
    .with_context(|| {
        format!(
            "the answer did not change from {before}; run's log:\n{}",
            run.log()
        )
    })?;
    let after = after.context("no answer after the change")?;
    // The server answering now goes down (CLI): the kernel skips it from the next query
    // on; run then re-sorts every decision without it (DD's sort over what is available).
    let octet = after.octets()[3] as usize;
    let down = format!("{}-1", SITES[octet - 10].to_lowercase());
    let resorts = run.count("re-sorted");
    let t = Instant::now();
    let out = lab.ctl(&["server", "set", &down, "--down"]);
    if !out.status.success() {
        bail!("server set {down} --down failed: {}", netns::describe(&out));
    }
    let (skip, _) = poll_answer(
        &ns,
        t,
        Duration::from_secs(60),
        Duration::from_millis(1),
        |a| a.is_some_and(|a| a != after),
    )
    .with_context(|| format!("the answer did not move off {down}"))?;
    let converged = loop {
        if run.count("re-sorted") > resorts {
            break t.elapsed().as_secs_f64();
        }
        if t.elapsed() > Duration::from_secs(300) {
            bail!("run did not re-sort within 300 s");
        }
        sleep(Duration::from_millis(5));
    };
    let log = run.log();
    drop(run);
    Ok(vec![
        Pair(
            "start to first answer",
            format!(
                "{first:.1} s (read, compute, then the first entries written; aim: read + \
                 compute + <= 1 s, see run's first apply)"
            ),
        ),
        Pair(
            "start to table complete",
            format!("{complete:.1} s (every entry written)"),
        ),
        Pair(
            "one RTT changed -> answer changed",
            format!(
                "{:.0} ms ({before} -> {after}; aim <= 50 ms)",
                latency * 1000.0
            ),
        ),
        Pair(
            "server set --down -> answer off it",
            format!("{:.0} ms (the kernel skips a down server)", skip * 1000.0),
        ),
        Pair(
            "server set --down -> table re-sorted",
            format!("{converged:.2} s (every decision sorted again without it)"),
        ),
        Pair(
            "run's first apply",
            log.lines()
                .find(|l| l.contains("entries written"))
                .unwrap_or("")
                .to_string(),
        ),
        Pair("run's log", log.lines().last().unwrap_or("").to_string()),
    ])
}

fn main() -> Result<()> {
    let dir =
        std::env::temp_dir().join(format!("director-bench-controller-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let config = write_config(&dir)?;
    let r = compile_and_apply(&config).and_then(|rows| {
        print_pairs(
            "controller: full-scale compile (5 sites, 3 services; RouteViews, GeoLite2 City)",
            &rows,
        );
        change_latency(&config)
    });
    let _ = std::fs::remove_dir_all(&dir);
    print_pairs(
        "controller: a change reaching the kernel (director-ctl run, queries from a socket on a veth every ms)",
        &r?,
    );
    Ok(())
}
