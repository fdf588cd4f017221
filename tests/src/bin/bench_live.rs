//! Live BGP over BMP at full table scale (part of `cargo xtask bench`, section `live`).
//!
//! No real router: a replayer in this process is the router. It connects to `director-ctl
//! run`'s BMP listener from its own address in the edge namespace (the site's
//! `bmp_router`), and sends Initiation, PeerUp for two peers, the full IPv4 table
//! (`updates.et-header.2015.gz`, every BGP4MP UPDATE wrapped as route monitoring) for each
//! peer and End-of-RIB per peer. Every message is encoded in memory before the connection,
//! so that the send rate is the collector's (TCP backpressure), not the MRT parser's.
//!
//! The config is `bench::scale`'s (five PoPs, GeoLite2 City, three services), but site fra
//! takes its view from the replayer instead of the file. Printed: the ingest rate, End-of-RIB
//! to the decisions applied (a full pass), the RIB's bytes per route and run's RSS, withdraw
//! and announce to dig's answer changing (20 rounds; the table's default route is withdrawn
//! at fra first, or a withdrawn prefix's clients would fall back to it), one peer going down,
//! and a restart of run (resync time, and whether any answer changed meanwhile; the replayer
//! resends the whole table, default route included, so the resync rewrites those entries).
//!
//! Run as root: `cargo run --release -p director-tests --bin bench_live` (or `cargo xtask
//! bench --only live`). A release bench runs a release director-ctl (built if stale), unless
//! `$DIRECTOR_CTL` names another.

use std::{
    collections::HashSet,
    io::Write as _,
    net::{Ipv4Addr, SocketAddr, TcpStream},
    path::{Path, PathBuf},
    process::Command,
    sync::atomic::{AtomicBool, Ordering},
    thread::sleep,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use bgpkit_parser::BgpkitParser;
use director_plan::inputs::bmp::encode::{self, Peer};
use director_plan::inputs::bmp::Policy;
use director_tests::bench::args::Parser;
use director_tests::bench::scale::{data, write_config};
use director_tests::bench::table::{print_pairs, thousands, Pair, Table};
use director_tests::metrics;
use director_tests::netns::{workspace_root, Controller, Lab, EDGE_V4};
use director_tests::tempdir::{replace_file, TempDir};

const COLLECTOR: &str = "198.51.100.250";
const ROUTER: &str = "198.51.100.251";
const BMP_PORT: u16 = 5000;
const METRICS: &str = "127.0.0.1:19181";
/// fra is the first site: its server's address.
const FRA_V4: &str = "198.51.100.10";
const API: &str = "api.example.com";
const WWW: &str = "www.example.com";
const OWN_AS: u32 = 64500;

/// The table, parsed once: every BGP UPDATE's bytes, and the prefixes announced at its end.
struct Dump {
    updates: Vec<Vec<u8>>,
    prefixes: HashSet<(u32, u8)>,
}

/// IPv4 NLRI (withdrawn routes or announced ones) as (address, length).
fn nlri(mut b: &[u8], out: &mut Vec<(u32, u8)>) {
    while let Some((&len, rest)) = b.split_first() {
        let n = usize::from(len).div_ceil(8);
        if len > 32 || rest.len() < n {
            return;
        }
        let mut a = [0u8; 4];
        a[..n].copy_from_slice(&rest[..n]);
        out.push((u32::from_be_bytes(a), len));
        b = &rest[n..];
    }
}

fn read_dump(path: &Path) -> Result<Dump> {
    let reader = director_plan::inputs::mrt::open_decompressed(path)?;
    let mut updates = Vec::new();
    let mut prefixes = HashSet::new();
    let (mut w, mut a) = (Vec::new(), Vec::new());
    for raw in BgpkitParser::from_reader(reader).into_raw_record_iter() {
        // BGP4MP_ET (17) MESSAGE_AS4 (4): peer and local AS, ifindex, AFI, the addresses,
        // then the BGP message.
        if raw.common_header.entry_type as u16 != 17 || raw.common_header.entry_subtype != 4 {
            continue;
        }
        let body = &raw.message_bytes;
        let afi = u16::from_be_bytes([body[10], body[11]]);
        let bgp = &body[12 + if afi == 1 { 8 } else { 32 }..];
        if bgp.get(18) != Some(&2) {
            continue;
        }
        // The UPDATE: withdrawn routes, attributes, NLRI.
        let u = &bgp[19..];
        let wl = usize::from(u16::from_be_bytes([u[0], u[1]]));
        let al = usize::from(u16::from_be_bytes([u[2 + wl], u[3 + wl]]));
        w.clear();
        a.clear();
        nlri(&u[2..2 + wl], &mut w);
        nlri(&u[4 + wl + al..], &mut a);
        for p in &w {
            prefixes.remove(p);
        }
        prefixes.extend(a.iter().copied());
        updates.push(bgp.to_vec());
    }
    Ok(Dump { updates, prefixes })
}

fn prefix_str((a, l): (u32, u8)) -> String {
    format!("{}/{l}", Ipv4Addr::from(a))
}

/// The client subnet dig names for a prefix: its first /24.
fn subnet((a, _): (u32, u8)) -> String {
    format!("{}/24", Ipv4Addr::from(a))
}

/// Prefixes of 16 to 24 bits in RIPE's space (European clients, near fra) that no shorter
/// announced prefix covers but the default route (withdrawn at fra before the rounds):
/// withdrawn at fra, fra has no route for their clients at all.
fn candidates(d: &Dump, n: usize) -> Vec<(u32, u8)> {
    let ripe =
        |o: u32| (80..=95).contains(&o) || (193..=195).contains(&o) || (212..=217).contains(&o);
    let mut v: Vec<(u32, u8)> = d
        .prefixes
        .iter()
        .copied()
        .filter(|&(a, l)| (16..=24).contains(&l) && ripe(a >> 24))
        .filter(|&(a, l)| (1..l).all(|s| !d.prefixes.contains(&(a & (u32::MAX << (32 - s)), s))))
        .collect();
    v.sort_unstable();
    let step = (v.len() / n.max(1)).max(1);
    v.into_iter().step_by(step).take(n).collect()
}

/// dig from the client namespace: the A records (`+short`) for a client in `subnet`.
fn answer(client_ns: &str, name: &str, subnet: &str) -> String {
    let out = Command::new("ip")
        .args([
            "netns", "exec", client_ns, "dig", "+tries=1", "+time=1", "+short",
        ])
        .arg(format!("@{EDGE_V4}"))
        .args([name, "A"])
        .arg(format!("+subnet={subnet}"))
        .output();
    match out {
        Ok(o) => String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with(';'))
            .collect::<Vec<_>>()
            .join(","),
        Err(_) => String::new(),
    }
}

/// Polls (every 5 ms, at most `within`) until the answer is `want` (or, with `differ`, is
/// anything but `want`); the time it took, None if it never did.
fn until(ns: &str, subnet: &str, want: &str, differ: bool, within: Duration) -> Option<Duration> {
    let t = Instant::now();
    while t.elapsed() < within {
        let got = answer(ns, API, subnet);
        if !got.is_empty() && (got == want) != differ {
            return Some(t.elapsed());
        }
        sleep(Duration::from_millis(5));
    }
    None
}

/// A TCP connection to the collector from `ROUTER`, made in the edge namespace (a thread
/// enters it; the socket stays there). Retried while run is not listening yet.
fn connect(ns: &str, within: Duration) -> Result<TcpStream> {
    let path = format!("/run/netns/{ns}");
    let t = Instant::now();
    loop {
        let p = path.clone();
        let r = std::thread::spawn(move || -> std::io::Result<TcpStream> {
            let f = std::fs::File::open(&p)?;
            // SAFETY: setns on a namespace file this thread opened; only this thread moves.
            if unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&f), libc::CLONE_NEWNET) } != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
            let src: SocketAddr = format!("{ROUTER}:0").parse().unwrap();
            let dst: SocketAddr = format!("{COLLECTOR}:{BMP_PORT}").parse().unwrap();
            s.bind(&src.into())?;
            s.connect(&dst.into())?;
            Ok(s.into())
        })
        .join()
        .expect("the connecting thread panicked");
        match r {
            Ok(s) => return Ok(s),
            Err(e) if t.elapsed() > within => bail!("connecting to the collector: {e}"),
            Err(_) => sleep(Duration::from_millis(100)),
        }
    }
}

/// The `n`th log line (1-based) containing `needle`, waited for (at most `within`).
fn nth_line(c: &mut Controller, needle: &str, n: usize, within: Duration) -> Result<String> {
    let t = Instant::now();
    loop {
        if let Some(l) = c.log().lines().filter(|l| l.contains(needle)).nth(n - 1) {
            return Ok(l.to_string());
        }
        c.assert_alive();
        if t.elapsed() > within {
            bail!("no {needle:?} line #{n} in {within:?}:\n{}", tail(&c.log()));
        }
        sleep(Duration::from_millis(10));
    }
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// The number after `before` in `line` (e.g. "written in " -> the ms).
fn number_after(line: &str, before: &str) -> Option<f64> {
    let rest = line.split(before).nth(1)?;
    let num: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    num.parse().ok()
}

fn rss_mib(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn pct(v: &[Duration], p: usize) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    v[(v.len() * p).div_ceil(100).max(1) - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1e3)
}

/// The whole session a router sends: Initiation, PeerUp per peer, each peer's table, then
/// End-of-RIB per peer.
fn session(peers: &[Peer], d: &Dump) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let mut head = encode::initiation("bench-replayer");
    for p in peers {
        head.extend(encode::peer_up(p, OWN_AS, &[1]));
    }
    let mut table = Vec::new();
    for p in peers {
        for u in &d.updates {
            table.extend(encode::raw_route(p, u));
        }
    }
    let mut eor = Vec::new();
    for p in peers {
        eor.extend(encode::eor(p, false));
    }
    (head, table, eor)
}

struct Sync {
    send: Duration,
    synced_line: String,
    eor_to_decided: Duration,
    decided_line: String,
}

/// Sends the session on a new connection; the send time, the synced line and End-of-RIB to
/// the full pass's line.
fn replay(
    run: &mut Controller,
    ns: &str,
    parts: &(Vec<u8>, Vec<u8>, Vec<u8>),
    within: Duration,
) -> Result<(TcpStream, Sync)> {
    let synced_before = run.count("synced:");
    // After a sync: the live pass ("live inputs changed ... entries written in N ms"), or
    // after a restart the first compile, which waited for the router's table.
    let live_before = run.count("entries written in");
    let mut s = connect(ns, within)?;
    let t = Instant::now();
    s.write_all(&parts.0)?;
    s.write_all(&parts.1)?;
    let send = t.elapsed();
    let eor = Instant::now();
    s.write_all(&parts.2)?;
    s.flush()?;
    let synced_line = nth_line(run, "synced:", synced_before + 1, within)?;
    let decided_line = nth_line(run, "entries written in", live_before + 1, within)?;
    Ok((
        s,
        Sync {
            send,
            synced_line,
            eor_to_decided: eor.elapsed(),
            decided_line,
        },
    ))
}

/// A release bench measures a release `run`: unless `$DIRECTOR_CTL` names one, director-ctl
/// is built with `--release` (a no-op when fresh) and the lab runs that one.
fn release_ctl() -> Result<()> {
    if cfg!(debug_assertions) || std::env::var_os("DIRECTOR_CTL").is_some() {
        return Ok(());
    }
    let root = workspace_root();
    let st = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        // With director-tests, as the bench itself was built: the same features, so that
        // only director-ctl's binary is new.
        .args(["build", "--quiet", "--release", "-p", "director-ctl", "--bin", "director-ctl"])
        .args(["-p", "director-tests", "--bin", "bench_live"])
        .current_dir(&root)
        .status()
        .context("running cargo build --release -p director-ctl")?;
    if !st.success() {
        bail!("cargo build --release -p director-ctl failed");
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    // Set before any thread starts; ctl_binary reads it.
    std::env::set_var("DIRECTOR_CTL", target.join("release/director-ctl"));
    Ok(())
}

fn main() -> Result<()> {
    let mut args = Parser::new("bench_live [--rounds N]");
    let mut rounds = 20usize;
    while let Some(flag) = args.next_flag() {
        match flag.as_str() {
            "--rounds" => rounds = args.positive("--rounds")?,
            "--only" => {
                let s: String = args.value("--only")?;
                if s != "live" {
                    bail!("--only {s}: this bench has live");
                }
            }
            _ => return Err(args.unknown(&flag)),
        }
    }
    release_ctl()?;
    let table = data("bgp/updates.et-header.2015.gz")?;
    let t = Instant::now();
    let dump = read_dump(&table)?;
    eprintln!(
        "{} UPDATEs, {} prefixes at the end, read in {:.1} s",
        dump.updates.len(),
        dump.prefixes.len(),
        t.elapsed().as_secs_f64()
    );
    let peers = [
        encode::peer("10.0.0.1", 3856, Policy::Pre),
        encode::peer("10.0.0.2", 3856, Policy::Pre),
    ];
    let parts = session(&peers, &dump);
    eprintln!(
        "session encoded: {:.1} MiB",
        (parts.0.len() + parts.1.len() + parts.2.len()) as f64 / 1048576.0
    );
    let cands = candidates(&dump, 40);

    let dir = TempDir::new("bench", "live");
    let lab = Lab::new();
    lab.attach();
    for a in [COLLECTOR, ROUTER] {
        let st = Command::new("ip")
            .args([
                "-n",
                &lab.edge_ns,
                "addr",
                "add",
                &format!("{a}/32"),
                "dev",
                "lo",
            ])
            .status()?;
        if !st.success() {
            bail!("adding {a} in {}", lab.edge_ns);
        }
    }
    // scale's config, with fra's view from the replayer instead of the file.
    let cfg = write_config(dir.root())?;
    let text = std::fs::read_to_string(&cfg)?;
    let at = text.find("name = \"fra\"").context("fra in the config")?;
    let bgp = at + text[at..].find("bgp = [").context("fra's bgp line")?;
    let end = bgp + text[bgp..].find('\n').context("line end")?;
    let text = format!(
        "{}bmp_router = \"{ROUTER}\"{}\n[bgp]\nbmp_listen = \"{COLLECTOR}:{BMP_PORT}\"\nhold = 300\n\n\
         [metrics]\nlisten = \"{METRICS}\"\n",
        &text[..bgp],
        &text[end..]
    );
    replace_file(&cfg, &text);
    let ns = lab.edge_ns.clone();
    let cns = lab.client_ns.clone();

    let long = Duration::from_secs(600);
    let t = Instant::now();
    let mut run = Controller::start(&lab, &cfg, &dir.path("run.log"));
    run.wait_for("entries written", 1, long);
    let startup = t.elapsed();
    let rss_before = rss_mib(run.pid());

    // 1-3: the table, its full pass, memory.
    let (stream, first) = replay(&mut run, &ns, &parts, long)?;
    let rss_after = rss_mib(run.pid());
    let samples = metrics::scrape(&ns, METRICS).map_err(anyhow::Error::msg)?;
    let rib_bytes = metrics::value(&samples, "director_bmp_rib_bytes", &[]).unwrap_or(0.0);
    let routes: f64 = samples
        .iter()
        .filter(|s| s.0 == "director_bmp_routes")
        .map(|s| s.2)
        .sum();
    let synced_routes = number_after(&first.synced_line, "synced: ").unwrap_or(0.0);
    let synced_ms = number_after(&first.synced_line, "peers in ").unwrap_or(0.0);
    let full_ms = number_after(&first.decided_line, "written in ").unwrap_or(0.0);
    let mut s1 = Table::new(
        "live: the full IPv4 table from one BMP router (2 peers), site fra of 5",
        &["what", "figure"],
    );
    let sent = 2.0 * dump.updates.len() as f64;
    s1.row(vec![
        "routes held after the sync (director_bmp_routes)".into(),
        thousands(routes as u64),
    ]);
    s1.row(vec![
        "UPDATEs sent (2 peers)".into(),
        thousands(sent as u64),
    ]);
    s1.row(vec![
        "send s (all UPDATEs written, TCP backpressure)".into(),
        format!("{:.2}", first.send.as_secs_f64()),
    ]);
    s1.row(vec![
        "collector's sync s (its log: first message to End-of-RIB)".into(),
        format!("{:.2}", synced_ms / 1e3),
    ]);
    s1.row(vec![
        "routes/s (routes / sync s)".into(),
        thousands((synced_routes / (synced_ms / 1e3).max(1e-9)) as u64),
    ]);
    s1.row(vec![
        "End-of-RIB -> decisions applied s".into(),
        format!("{:.2}", first.eor_to_decided.as_secs_f64()),
    ]);
    s1.row(vec![
        "  of which the full pass (run's ms)".into(),
        format!("{full_ms:.0}"),
    ]);
    s1.row(vec![
        "RIB bytes (director_bmp_rib_bytes)".into(),
        thousands(rib_bytes as u64),
    ]);
    s1.row(vec![
        "bytes per route".into(),
        format!("{:.1}", rib_bytes / routes.max(1.0)),
    ]);
    s1.row(vec![
        "run's RSS MiB before the table".into(),
        format!("{rss_before:.0}"),
    ]);
    s1.row(vec![
        "run's RSS MiB after it".into(),
        format!("{rss_after:.0}"),
    ]);
    s1.note(format!(
        "run's start (files for the 4 other sites, GeoLite2, first compile): {:.1} s",
        startup.as_secs_f64()
    ));
    s1.note(format!("synced: {}", first.synced_line.trim()));
    s1.note(format!("decided: {}", first.decided_line.trim()));
    s1.print();

    // 4: withdraw / announce one prefix that only fra's view decides. The table has a
    // default route (AS path 2): with it, a withdrawn prefix's clients would keep a route at
    // fra, as short as the others' or shorter. It goes first (decided under 0.0.0.0/0: all).
    let mut stream = stream;
    let before = run.count("live inputs changed");
    let t = Instant::now();
    for peer in &peers {
        stream.write_all(&encode::route(peer, &encode::wd(&["0.0.0.0/0"])))?;
    }
    let line = nth_line(&mut run, "live inputs changed", before + 1, long)?;
    let default_gone = (t.elapsed(), line);
    let mut chosen = None;
    let mut tried = 0;
    for &c in &cands {
        if tried >= 15 {
            break;
        }
        let sub = subnet(c);
        if answer(&cns, API, &sub) != FRA_V4 {
            continue;
        }
        tried += 1;
        let p = prefix_str(c);
        for peer in &peers {
            stream.write_all(&encode::route(peer, &encode::wd(&[&p])))?;
        }
        let changed = until(&cns, &sub, FRA_V4, true, Duration::from_secs(2));
        if changed.is_none() && tried == 1 {
            let client = Ipv4Addr::from(c.0 + 1).to_string();
            let e = lab.ctl_in(
                &ns,
                &[
                    "explain",
                    "--run",
                    METRICS,
                    "--service",
                    API,
                    "--client",
                    &client,
                ],
            );
            eprintln!(
                "{p} withdrawn, answer unchanged; explain:\n{}",
                String::from_utf8_lossy(&e.stdout)
                    .lines()
                    .take(14)
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
        for peer in &peers {
            stream.write_all(&encode::route(peer, &encode::ann(&[&p], &[3856])))?;
        }
        until(&cns, &sub, FRA_V4, false, Duration::from_secs(5));
        if changed.is_some() {
            chosen = Some(c);
            break;
        }
    }
    let mut pairs = vec![Pair(
        "default route withdrawn at fra -> decided",
        format!(
            "{} ms: {}",
            ms(default_gone.0),
            default_gone.1.trim_start_matches("director-ctl run: ")
        ),
    )];
    if let Some(c) = chosen {
        let (p, sub) = (prefix_str(c), subnet(c));
        let (mut wd, mut ann) = (Vec::new(), Vec::new());
        let mut missed = 0;
        for _ in 0..rounds {
            let t = Instant::now();
            for peer in &peers {
                stream.write_all(&encode::route(peer, &encode::wd(&[&p])))?;
            }
            match until(&cns, &sub, FRA_V4, true, Duration::from_secs(5)) {
                Some(_) => wd.push(t.elapsed()),
                None => missed += 1,
            }
            let t = Instant::now();
            for peer in &peers {
                stream.write_all(&encode::route(peer, &encode::ann(&[&p], &[3856])))?;
            }
            match until(&cns, &sub, FRA_V4, false, Duration::from_secs(5)) {
                Some(_) => ann.push(t.elapsed()),
                None => missed += 1,
            }
        }
        let fig = |v: &[Duration]| {
            if v.is_empty() {
                "-".to_string()
            } else {
                format!(
                    "p50 {} ms, p95 {} ms, max {} ms ({} rounds)",
                    ms(pct(v, 50)),
                    ms(pct(v, 95)),
                    ms(*v.iter().max().unwrap()),
                    v.len()
                )
            }
        };
        pairs.push(Pair(
            "prefix (api answer fra <-> other)",
            format!("{p}, client {sub}; {missed} rounds timed out (5 s)"),
        ));
        pairs.push(Pair("withdraw (both peers) -> answer", fig(&wd)));
        pairs.push(Pair("announce (both peers) -> answer", fig(&ann)));
    } else {
        pairs.push(Pair(
            "withdraw -> answer",
            format!("no prefix found among {tried} tried where fra's answer changes"),
        ));
    }

    // 5: one peer down. The other peer has the same routes (same AS, same next hops), so
    // no site's best route changes: run must decide nothing again (it used to re-sort
    // every prefix, a full pass).
    let before = run.count("live inputs changed");
    let probe: Vec<String> = cands.iter().take(20).map(|&c| subnet(c)).collect();
    let answers_before: Vec<String> = probe.iter().map(|s| answer(&cns, API, s)).collect();
    stream.write_all(&encode::peer_down(&peers[1]))?;
    sleep(Duration::from_secs(3));
    let passes = run.count("live inputs changed") - before;
    let answers_after: Vec<String> = probe.iter().map(|s| answer(&cns, API, s)).collect();
    let moved = answers_before
        .iter()
        .zip(&answers_after)
        .filter(|(a, b)| a != b)
        .count();
    pairs.push(Pair(
        "peer down (1 of 2, same routes as the other)",
        format!(
            "{passes} passes in the 3 s after it (0: no best route changed), {moved} of {} \
             sampled answers moved",
            probe.len()
        ),
    ));

    // 6: restart run: answers stand while the replayer resends.
    let sample: Vec<String> = cands.iter().take(20).map(|&c| subnet(c)).collect();
    let want: Vec<(String, String)> = sample
        .iter()
        .map(|s| (answer(&cns, API, s), answer(&cns, WWW, s)))
        .collect();
    let stop = AtomicBool::new(false);
    let (restart, asked, changed, empty) = std::thread::scope(|sc| -> Result<_> {
        let checker = sc.spawn(|| {
            let (mut asked, mut changed, mut empty) = (0usize, Vec::new(), 0usize);
            let mut changed_n = 0usize;
            let t = Instant::now();
            'outer: while !stop.load(Ordering::Relaxed) && t.elapsed() < long {
                for (s, w) in sample.iter().zip(&want) {
                    if stop.load(Ordering::Relaxed) {
                        break 'outer;
                    }
                    let got = (answer(&cns, API, s), answer(&cns, WWW, s));
                    asked += 2;
                    if got.0.is_empty() || got.1.is_empty() {
                        empty += 1;
                    } else if got != *w {
                        changed_n += 1;
                        if changed.len() < 5 {
                            changed.push(format!("{s}: {w:?} -> {got:?}"));
                        }
                    }
                }
            }
            (asked, (changed_n, changed), empty)
        });
        let r = (|| -> Result<_> {
            run.stop();
            drop(stream);
            let t = Instant::now();
            let mut run2 = Controller::start(&lab, &cfg, &dir.path("run2.log"));
            let (s, sync) = replay(&mut run2, &ns, &parts, long)?;
            let total = t.elapsed();
            Ok((run2, s, sync, total))
        })();
        stop.store(true, Ordering::Relaxed);
        let (asked, changed, empty) = checker.join().expect("checker panicked");
        Ok((r?, asked, changed, empty))
    })?;
    let (mut run2, s2, sync2, total) = restart;
    pairs.push(Pair(
        "restart: run started -> resynced and decided",
        format!(
            "{:.1} s (send {:.1} s, End-of-RIB -> decided {:.2} s): {}",
            total.as_secs_f64(),
            sync2.send.as_secs_f64(),
            sync2.eor_to_decided.as_secs_f64(),
            sync2.decided_line.trim_start_matches("director-ctl run: ")
        ),
    ));
    pairs.push(Pair(
        "restart: answers meanwhile",
        format!(
            "{asked} asked ({} clients x www, api), {} changed, {empty} without an answer{}",
            sample.len(),
            changed.0,
            if changed.1.is_empty() {
                String::new()
            } else {
                format!(": {}", changed.1.join("; "))
            }
        ),
    ));
    print_pairs("live: changes with the full table loaded", &pairs);
    run2.assert_alive();
    drop(s2);
    drop(run2);
    drop(lab);
    Ok(())
}
