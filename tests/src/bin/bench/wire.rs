//! Section 2: answers per second over the lab's veth pair, director against knotd answering
//! the same query, with the server side's CPU time per answer.
//!
//! Placement (benchmarking.md): generator on CPU 0, server side on CPU 1; threaded NAPI on
//! both veth ends, the edge's NAPI thread on CPU 1 (it runs director, and the stack for
//! knotd), the client's on CPU 0 at SCHED_FIFO 50 (with kxdpgun's busy loop beside it,
//! replies were lost otherwise). Server CPU = the edge NAPI thread + knotd's threads, from
//! their schedstat.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use director_tests::netns::{ctl_binary, Lab, Reply, Stats, Zone, CLIENT_V4, EDGE_V4};

use crate::{FRA_V4, FRA_V6, NAME};
use director_tests::bench::perf::{self, Recording};
use director_tests::bench::sys;
use director_tests::bench::table::{thousands, Spread, Table};
use director_tests::tempdir::TempDir;

const GEN_CPU: usize = 0;
const SERVER_CPU: usize = 1;
/// Above what kxdpgun can send from one core, so it sends as fast as it can.
const KXDPGUN_QPS: &str = "2000000";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Generator {
    Kxdpgun,
    Dnsperf,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Server {
    /// director's turn-around-only program (`director-ctl ceiling`): no answering at all.
    Ceiling,
    Director,
    Knot,
}

impl Server {
    fn name(self) -> &'static str {
        match self {
            Server::Ceiling => "turn-around only (ceiling)",
            Server::Director => "director (XDP)",
            Server::Knot => "knotd (UDP, 1 worker)",
        }
    }
}

/// How fast the generator sends: as fast as it can, or at a set rate (queries/s).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Pace {
    Max,
    Qps(u64),
}

/// One load run's length and pace.
#[derive(Clone, Copy, Debug)]
pub struct Load {
    pub seconds: u32,
    pub pace: Pace,
}

/// The lab made ready for load, and what the runs need to know about it.
pub struct Wire<'a> {
    lab: &'a mut Lab,
    dir: TempDir,
    query_file: PathBuf,
    edge_mac: String,
    client_mac: String,
    /// The edge veth's NAPI thread (it changes when the edge's XDP program is replaced).
    edge_napi: std::cell::Cell<u32>,
    knotd: u32,
    /// Whether the pass-through program is on the client end now (Lab::attach puts it there).
    client_pass: std::cell::Cell<bool>,
    /// Whether director is attached with the bench's service (the ceiling detaches it).
    director_up: std::cell::Cell<bool>,
    /// Whether perf can split the NAPI thread's time (the program's share column).
    perf: bool,
    /// The twin object attached in place of director's own build now (sections 2c, 2d).
    twin: std::cell::RefCell<Option<PathBuf>>,
}

/// One load run.
pub struct Sample {
    sent: u64,
    replies: u64,
    seconds: f64,
    /// Server-side CPU time during the run, and the edge NAPI thread's part of it.
    cpu_ns: u64,
    napi_ns: u64,
    /// director's `answered` counter over the run (shows who answered).
    director_answered: u64,
    /// How CPU 1 was used while the load was on.
    window: Window,
    /// The XDP program's own share of the edge NAPI thread's time (perf), when perf ran.
    program_share: Option<f64>,
}

/// How the server CPU was used in the middle of a run, while the load was on: the
/// server's threads, and everything else that ran there (other processes on this machine,
/// kernel workers), from the CPU's idle time.
#[derive(Clone, Copy)]
struct Window {
    server_ns: u64,
    idle_ns: u64,
    wall_ns: u64,
}

impl Window {
    fn server(&self) -> f64 {
        self.server_ns as f64 / self.wall_ns as f64
    }
    fn others(&self) -> f64 {
        self.wall_ns.saturating_sub(self.idle_ns + self.server_ns) as f64 / self.wall_ns as f64
    }
}

/// Watches the edge NAPI thread (every query passes it) until the load starts, then
/// measures a window that starts 0.2 s later and ends before the generator's run time
/// does, so that the generator's start-up and wind-down are left out. None if no load
/// was seen within 10 s.
fn watch_load(napi: u32, tids: Vec<u32>, seconds: u32) -> std::thread::JoinHandle<Option<Window>> {
    std::thread::spawn(move || {
        let give_up = Instant::now() + Duration::from_secs(10);
        let mut last = sys::thread_cpu_ns(napi)?;
        loop {
            std::thread::sleep(Duration::from_millis(50));
            let now = sys::thread_cpu_ns(napi)?;
            // An idle NAPI thread does not run at all; 1 ms in 50 ms is traffic.
            if now - last > 1_000_000 {
                break;
            }
            if Instant::now() > give_up {
                return None;
            }
            last = now;
        }
        std::thread::sleep(Duration::from_millis(200));
        let length = Duration::from_millis((seconds as u64 * 1000).saturating_sub(600).max(200));
        let (cpu0, idle0, t0) = (
            sys::cpu_ns(&tids),
            sys::cpu_idle_ns(SERVER_CPU).ok()?,
            Instant::now(),
        );
        std::thread::sleep(length);
        let (cpu1, idle1) = (sys::cpu_ns(&tids), sys::cpu_idle_ns(SERVER_CPU).ok()?);
        Some(Window {
            server_ns: cpu1 - cpu0,
            idle_ns: idle1 - idle0,
            wall_ns: t0.elapsed().as_nanos() as u64,
        })
    })
}

impl Sample {
    fn answers_per_s(&self) -> f64 {
        self.replies as f64 / self.seconds
    }
    fn sent_per_s(&self) -> f64 {
        self.sent as f64 / self.seconds
    }
    fn cpu_us_per_answer(&self) -> f64 {
        self.cpu_ns as f64 / 1e3 / self.replies.max(1) as f64
    }
    fn napi_us_per_answer(&self) -> f64 {
        self.napi_ns as f64 / 1e3 / self.replies.max(1) as f64
    }
    /// The program's own time per answer: its share of the NAPI thread's samples times
    /// the thread's exact time per answer.
    fn program_ns_per_answer(&self) -> Option<f64> {
        Some(self.program_share? * self.napi_us_per_answer() * 1e3)
    }
}

/// `runs` turns of one run each of two things (`each(false)`, `each(true)`), which goes
/// first alternating from turn to turn: a run right after the other's set-up or teardown
/// would otherwise always be the same one's. Returns (the false runs, the true runs).
fn in_turns(
    runs: usize,
    mut each: impl FnMut(bool) -> Result<Vec<Sample>>,
) -> Result<(Vec<Sample>, Vec<Sample>)> {
    let (mut first, mut second) = (Vec::new(), Vec::new());
    for turn in 0..runs {
        let mut order = [false, true];
        if turn % 2 == 1 {
            order.reverse();
        }
        for which in order {
            let got = each(which)?;
            if which {
                second.extend(got);
            } else {
                first.extend(got);
            }
        }
    }
    Ok((first, second))
}

/// director's CPU per answer over the ceiling's, turn by turn (runs next to each other in
/// time): load from the rest of the machine that changes between turns cancels out of
/// each ratio, where it only averages out of the ratio of the two medians.
pub fn turn_ratios(director: &[Sample], ceiling: &[Sample]) -> Vec<f64> {
    director
        .iter()
        .zip(ceiling)
        .map(|(d, c)| d.cpu_us_per_answer() / c.cpu_us_per_answer())
        .collect()
}

/// Everything section 2 found for one server.
pub struct Point {
    server: Server,
    answers: Spread,
    sent: Spread,
    replied: Spread,
    cpu_us: Spread,
    napi_us: Spread,
    busy: Spread,
    other: Spread,
    director_answered: Spread,
    /// The program's own share of the NAPI thread and its time per answer (perf): None
    /// for knot, or without perf.
    program_share: Option<Spread>,
    program_ns: Option<Spread>,
}

/// director attached to the edge with the bench's one server, service and routes (again
/// after the ceiling's runs detached it and dropped its maps).
fn director_setup(lab: &Lab) {
    lab.attach();
    for args in [
        vec!["server", "add", "fra-1", "--ipv4", FRA_V4, "--ipv6", FRA_V6],
        vec!["service", "add", NAME, "--ttl", "60"],
        vec!["route", "set", NAME, "0.0.0.0/0", "fra-1"],
        vec!["route", "set", NAME, "::/0", "fra-1"],
    ] {
        lab.ctl_ok(&args);
    }
}

pub fn prepare(lab: &mut Lab) -> Result<Wire<'_>> {
    let (edge_ns, edge_if) = (lab.edge_ns.clone(), lab.edge_if.clone());
    let (client_ns, client_if) = (lab.client_ns.clone(), lab.client_if.clone());
    // GRO gives the client veth a NAPI instance of its own, so its (threaded, pinned) NAPI
    // thread survives kxdpgun attaching and removing its XDP program on every run.
    sys::run_ok(sys::nsenter(&client_ns, "ethtool").args(["-K", &client_if, "gro", "on"]))?;
    director_setup(lab);
    let edge_napi = sys::threaded_napi(&edge_ns, &edge_if)?;
    let client_napi = sys::threaded_napi(&client_ns, &client_if)?;
    sys::pin_to_cpu(edge_napi, SERVER_CPU)?;
    sys::pin_to_cpu(client_napi, GEN_CPU)?;
    sys::set_fifo(client_napi, 50)?;

    let (edge_mac, client_mac) = (
        sys::mac_of(&edge_ns, &edge_if)?,
        sys::mac_of(&client_ns, &client_if)?,
    );
    // Static neighbours: no ARP exchange competes with (or is eaten by) the load.
    for (ns, ifname, addr, mac) in [
        (&edge_ns, &edge_if, CLIENT_V4, &client_mac),
        (&client_ns, &client_if, EDGE_V4, &edge_mac),
    ] {
        sys::run_ok(Command::new("ip").args([
            "-n",
            ns,
            "neigh",
            "replace",
            addr,
            "lladdr",
            mac,
            "dev",
            ifname,
            "nud",
            "permanent",
        ]))?;
    }

    let records = format!("www A {FRA_V4}\nwww AAAA {FRA_V6}\n");
    lab.start_knot(&[Zone {
        origin: "example.com.",
        records: &records,
    }]);
    let knotd = match sys::processes_in_netns(&edge_ns, "knotd")?.as_slice() {
        [pid] => *pid,
        other => bail!("expected one knotd in {edge_ns}, found {other:?}"),
    };

    let dir = TempDir::new(&lab.id, "bench");
    let query_file = dir.path("queries.txt");
    std::fs::write(&query_file, format!("{NAME} A\n"))?;
    Ok(Wire {
        lab,
        dir,
        query_file,
        edge_mac,
        client_mac,
        edge_napi: std::cell::Cell::new(edge_napi),
        knotd,
        client_pass: true.into(),
        director_up: true.into(),
        perf: perf::available(),
        twin: None.into(),
    })
}

impl Wire<'_> {
    /// The pass-through program on the client end: needed for director's XDP_TX replies to
    /// reach sockets (dig, dnsperf); kxdpgun brings its own and cannot attach beside it.
    fn client_pass(&self, on: bool) -> Result<()> {
        if self.client_pass.get() == on {
            return Ok(());
        }
        let mut cmd = sys::nsenter(
            &self.lab.client_ns,
            ctl_binary().to_str().context("ctl path")?,
        );
        cmd.arg("--pin-dir").arg(&self.lab.pin_dir).args([
            "veth-peer",
            "--iface",
            &self.lab.client_if,
        ]);
        if !on {
            cmd.arg("--detach");
        }
        sys::run_ok(&mut cmd)?;
        self.client_pass.set(on);
        Ok(())
    }

    /// director's answered counter; 0 while director is not attached (the ceiling runs).
    fn answered(&self) -> u64 {
        let out = self.lab.ctl(&["stats", "--json"]);
        if !out.status.success() {
            return 0;
        }
        Stats::parse(&String::from_utf8_lossy(&out.stdout)).get("answered")
    }

    /// dig from the client: the reply must hold fra-1's address, and director's counter
    /// must show whether director or knot gave it.
    fn sanity(&self, server: Server) -> Result<()> {
        if server == Server::Ceiling {
            // It sends the query back as its own response: nothing for dig to check.
            return Ok(());
        }
        self.client_pass(true)?;
        let before = self.answered();
        let reply = Reply::parse(&self.lab.dig(&[&format!("@{EDGE_V4}"), NAME, "A"]));
        let by_director = self.answered() - before;
        ensure!(
            reply.data("A") == [FRA_V4],
            "{} did not answer {NAME} A with {FRA_V4}:\n{}",
            server.name(),
            reply.text
        );
        let want = u64::from(server == Server::Director);
        ensure!(
            by_director == want,
            "director's answered counter rose by {by_director} for a {} answer",
            server.name()
        );
        Ok(())
    }

    /// dig without EDNS from the client, answered by the floor itself: fra-1's address, and
    /// director's counter still (its path never ran).
    fn floor_sanity(&self) -> Result<()> {
        self.client_pass(true)?;
        let before = self.answered();
        let reply = Reply::parse(
            &self
                .lab
                .dig(&[&format!("@{EDGE_V4}"), "+noedns", NAME, "A"]),
        );
        ensure!(
            reply.data("A") == [FRA_V4] && self.answered() == before,
            "the answer floor did not answer {NAME} A with {FRA_V4} itself:\n{}",
            reply.text
        );
        Ok(())
    }

    /// knotd's threads (it may have started more since the last look), pinned to the
    /// server CPU, plus the edge NAPI thread.
    fn server_threads(&self, server: Server) -> Result<Vec<u32>> {
        let mut tids = vec![self.edge_napi.get()];
        if server == Server::Knot {
            for t in sys::threads(self.knotd) {
                sys::pin_to_cpu(t, SERVER_CPU)?;
                tids.push(t);
            }
        }
        Ok(tids)
    }

    fn sample(&self, server: Server, gen: Generator, seconds: u32, pace: Pace) -> Result<Sample> {
        let tids = self.server_threads(server)?;
        let answered0 = self.answered();
        let (cpu0, napi0) = (sys::cpu_ns(&tids), sys::cpu_ns(&[self.edge_napi.get()]));
        let watch = watch_load(self.edge_napi.get(), tids.clone(), seconds);
        // Only where the NAPI thread is the whole server (knot's work is in its own threads).
        let recording = (server != Server::Knot && self.perf)
            .then(|| {
                Recording::start(
                    SERVER_CPU,
                    Duration::from_secs(seconds as u64),
                    self.dir.root(),
                    "wire",
                )
            })
            .transpose()?;
        let (sent, replies, secs) = match gen {
            Generator::Kxdpgun => self.kxdpgun(seconds, pace)?,
            Generator::Dnsperf => self.dnsperf(seconds, pace)?,
        };
        let cpu_ns = sys::cpu_ns(&tids) - cpu0;
        let napi_ns = sys::cpu_ns(&[self.edge_napi.get()]) - napi0;
        let director_answered = self.answered() - answered0;
        let window = watch
            .join()
            .ok()
            .flatten()
            .context("the load never showed on the edge NAPI thread")?;
        let program_share = match recording {
            Some(r) => r.finish(self.edge_napi.get())?.share(),
            None => None,
        };
        Ok(Sample {
            sent,
            replies,
            seconds: secs,
            cpu_ns,
            napi_ns,
            director_answered,
            window,
            program_share,
        })
    }

    /// kxdpgun from CPU 0, at its maximum rate or paced: (queries sent, replies received,
    /// seconds).
    fn kxdpgun(&self, seconds: u32, pace: Pace) -> Result<(u64, u64, f64)> {
        let lab = &self.lab;
        let qps = match pace {
            Pace::Max => KXDPGUN_QPS.to_string(),
            Pace::Qps(q) => q.to_string(),
        };
        let mut cmd = sys::netns_exec(&lab.client_ns, "taskset");
        cmd.args([
            "-c",
            &GEN_CPU.to_string(),
            "kxdpgun",
            "-t",
            &seconds.to_string(),
            "-Q",
            &qps,
            "-b",
            "32",
        ])
        .arg("-i")
        .arg(&self.query_file)
        .args([
            "-I",
            &lab.client_if,
            "-F",
            &GEN_CPU.to_string(),
            "-l",
            CLIENT_V4,
        ])
        .args(["-L", &self.client_mac, "-R", &self.edge_mac, EDGE_V4]);
        let done = sys::run_bounded(
            cmd,
            self.dir.root(),
            "kxdpgun",
            Duration::from_secs(seconds as u64 + 20),
        );
        // kxdpgun leaves its XDP program attached when it exits.
        let off = sys::run_ok(Command::new("ip").args([
            "-n",
            &lab.client_ns,
            "link",
            "set",
            "dev",
            &lab.client_if,
            "xdp",
            "off",
        ]));
        let done = done?;
        off?;
        ensure!(
            done.success,
            "kxdpgun: {}\n{}{}",
            done.status,
            done.stdout,
            done.stderr
        );
        // "total queries:     1058087 (352695 pps)",
        // "total replies:     1035239 (345079 pps) (97%)"
        let total = |what: &str| -> Result<u64> {
            done.stdout
                .lines()
                .find_map(|l| {
                    l.strip_prefix(what)?
                        .split_whitespace()
                        .next()?
                        .parse()
                        .ok()
                })
                .with_context(|| format!("no {what:?} line in kxdpgun's output:\n{}", done.stdout))
        };
        Ok((
            total("total queries:")?,
            total("total replies:")?,
            seconds as f64,
        ))
    }

    /// dnsperf (the fallback): (queries sent, queries completed, run time).
    fn dnsperf(&self, seconds: u32, pace: Pace) -> Result<(u64, u64, f64)> {
        let mut cmd = sys::netns_exec(&self.lab.client_ns, "taskset");
        cmd.args(["-c", &GEN_CPU.to_string(), "dnsperf", "-s", EDGE_V4, "-d"])
            .arg(&self.query_file)
            .args([
                "-l",
                &seconds.to_string(),
                "-c",
                "8",
                "-T",
                "1",
                "-q",
                "100",
            ]);
        if let Pace::Qps(q) = pace {
            cmd.args(["-Q", &q.to_string()]);
        }
        let done = sys::run_bounded(
            cmd,
            self.dir.root(),
            "dnsperf",
            Duration::from_secs(seconds as u64 + 20),
        )?;
        ensure!(
            done.success,
            "dnsperf: {}\n{}{}",
            done.status,
            done.stdout,
            done.stderr
        );
        // "  Queries sent:         1503912", "  Queries completed:    1503812 (99.99%)",
        // "  Run time (s):         5.000116"
        let field = |what: &str| -> Result<f64> {
            done.stdout
                .lines()
                .find_map(|l| {
                    l.trim()
                        .strip_prefix(what)?
                        .split_whitespace()
                        .next()?
                        .parse()
                        .ok()
                })
                .with_context(|| format!("no {what:?} line in dnsperf's output:\n{}", done.stdout))
        };
        Ok((
            field("Queries sent:")? as u64,
            field("Queries completed:")? as u64,
            field("Run time (s):")?,
        ))
    }

    /// `runs` samples of one server; the generator is tried and, in auto mode, kxdpgun's
    /// failure switches to dnsperf (returned so both servers use the same generator).
    /// director is set up again first if the ceiling's runs detached it.
    pub fn samples(
        &self,
        server: Server,
        gen: &mut Generator,
        auto: bool,
        load: Load,
        runs: usize,
        log: &mut String,
    ) -> Result<Vec<Sample>> {
        let edge_if = self.lab.edge_if.clone();
        if server != Server::Ceiling && !self.director_up.get() {
            director_setup(self.lab);
            self.client_pass.set(true);
            let napi = sys::current_napi(&edge_if)?;
            sys::pin_to_cpu(napi, SERVER_CPU)?;
            self.edge_napi.set(napi);
            self.director_up.set(true);
            self.twin.replace(None);
        }
        if server == Server::Knot {
            // director stays attached (it now passes the query to the stack), as in a
            // real deployment where knot answers whatever director does not own. Last:
            // the service is not added back.
            self.lab.ctl_ok(&["service", "del", NAME]);
        }
        if server == Server::Ceiling {
            // Detaching director drops its maps; `samples` sets it up again after. (A
            // turn that starts with the ceiling finds it still detached from the last.)
            if self.director_up.get() {
                self.lab.ctl_ok(&["detach", "--iface", &edge_if]);
                self.director_up.set(false);
            }
            self.lab.ctl_ok(&["ceiling", "--iface", &edge_if]);
            let napi = sys::current_napi(&edge_if)?;
            sys::pin_to_cpu(napi, SERVER_CPU)?;
            self.edge_napi.set(napi);
        }
        let samples = self.samples_on(server, gen, auto, load, runs, log);
        if server == Server::Ceiling {
            self.lab
                .ctl_ok(&["ceiling", "--iface", &edge_if, "--detach"]);
        }
        samples
    }

    /// director's and the ceiling's samples, one run each per turn, which goes first
    /// alternating: a run right after the other server's set-up or teardown would
    /// otherwise always be the same server's.
    pub fn turns(
        &self,
        gen: &mut Generator,
        auto: bool,
        load: Load,
        runs: usize,
        log: &mut String,
    ) -> Result<(Vec<Sample>, Vec<Sample>)> {
        in_turns(runs, |ceiling| {
            let server = if ceiling {
                Server::Ceiling
            } else {
                Server::Director
            };
            self.samples(server, gen, auto, load, 1, log)
        })
    }

    /// Section 2c: director as built and its twin without demand counting (swapped in by
    /// `director-ctl upgrade --object`, over the same maps), one run each per turn, which
    /// goes first alternating: (with counting, without). director is as built after it.
    pub fn counting_turns(
        &self,
        uncounted: &Path,
        gen: &mut Generator,
        load: Load,
        runs: usize,
        log: &mut String,
    ) -> Result<(Vec<Sample>, Vec<Sample>)> {
        let both = in_turns(runs, |counting_off| {
            self.swap(counting_off.then_some(uncounted))?;
            self.samples(Server::Director, gen, false, load, 1, log)
        })?;
        self.swap(None)?;
        Ok(both)
    }

    /// Section 2d: the answer floor (director-ebpf's `floor` twin, swapped in over director
    /// as in 2c) and the ceiling, one run each per turn, which goes first alternating:
    /// (floor, ceiling). director is as built after it.
    pub fn floor_turns(
        &self,
        floor: &Path,
        gen: &mut Generator,
        load: Load,
        runs: usize,
        log: &mut String,
    ) -> Result<(Vec<Sample>, Vec<Sample>)> {
        let both = in_turns(runs, |ceiling| {
            if ceiling {
                return self.samples(Server::Ceiling, gen, false, load, 1, log);
            }
            self.swap(Some(floor))?;
            self.floor_sanity()?;
            self.samples(Server::Director, gen, false, load, 1, log)
        })?;
        self.swap(None)?;
        Ok(both)
    }

    /// Puts `object` (None: director-ctl's own build) in place of the attached program,
    /// with director set up first if it is not; the NAPI thread is pinned again.
    fn swap(&self, object: Option<&Path>) -> Result<()> {
        if !self.director_up.get() {
            director_setup(self.lab);
            self.client_pass.set(true);
            self.director_up.set(true);
            self.twin.replace(None);
            self.pin_napi()?;
        }
        if self.twin.borrow().as_deref() == object {
            return Ok(());
        }
        let mut args = vec!["upgrade".to_string()];
        if let Some(o) = object {
            args.extend(["--object".into(), o.display().to_string()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.lab.ctl_ok(&args);
        self.twin.replace(object.map(Path::to_path_buf));
        self.pin_napi()
    }

    /// Finds the edge veth's NAPI thread again (a new program may bring a new one) and
    /// pins it to the server's CPU.
    fn pin_napi(&self) -> Result<()> {
        let napi = sys::current_napi(&self.lab.edge_if)?;
        sys::pin_to_cpu(napi, SERVER_CPU)?;
        self.edge_napi.set(napi);
        Ok(())
    }

    fn samples_on(
        &self,
        server: Server,
        gen: &mut Generator,
        auto: bool,
        load: Load,
        runs: usize,
        log: &mut String,
    ) -> Result<Vec<Sample>> {
        let Load { seconds, pace } = load;
        self.sanity(server)?;
        let mut samples = Vec::new();
        while samples.len() < runs {
            // Only kxdpgun's own XDP program may be on the client end while it runs.
            self.client_pass(*gen == Generator::Dnsperf)?;
            eprintln!(
                "section 2: {} run {} of {runs} ({gen:?}, {seconds} s)",
                server.name(),
                samples.len() + 1
            );
            match self.sample(server, *gen, seconds, pace) {
                Ok(s) if s.replies > 0 => samples.push(s),
                r => {
                    let why = r.map_or_else(|e| format!("{e:#}"), |_| "no replies".into());
                    if !(auto
                        && *gen == Generator::Kxdpgun
                        && samples.is_empty()
                        && server == Server::Director)
                    {
                        bail!("{:?} against {}: {why}", gen, server.name());
                    }
                    let _ = writeln!(
                        log,
                        "kxdpgun could not be used ({why}); fell back to dnsperf."
                    );
                    *gen = Generator::Dnsperf;
                }
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        Ok(samples)
    }
}

impl Point {
    /// A server's figures over its samples.
    pub fn of(server: Server, samples: &[Sample]) -> Point {
        let s = |f: fn(&Sample) -> f64| Spread::of(&samples.iter().map(f).collect::<Vec<_>>());
        Point {
            server,
            answers: s(Sample::answers_per_s),
            sent: s(Sample::sent_per_s),
            replied: s(|x| 100.0 * x.replies as f64 / x.sent.max(1) as f64),
            cpu_us: s(Sample::cpu_us_per_answer),
            napi_us: s(Sample::napi_us_per_answer),
            busy: s(|x| x.window.server()),
            other: s(|x| x.window.others()),
            director_answered: s(|x| x.director_answered as f64),
            program_share: all(samples.iter().map(|x| x.program_share)),
            program_ns: all(samples.iter().map(Sample::program_ns_per_answer)),
        }
    }
}

/// The spread of a figure every sample has.
fn all(values: impl Iterator<Item = Option<f64>>) -> Option<Spread> {
    let v: Option<Vec<f64>> = values.collect();
    v.filter(|v| !v.is_empty()).map(|v| Spread::of(&v))
}

pub fn table(
    points: &[Point],
    turns: &[f64],
    gen: Generator,
    seconds: u32,
    runs: usize,
    log: &str,
) -> Table {
    let how = match gen {
        Generator::Kxdpgun => format!("kxdpgun -Q {KXDPGUN_QPS} -b 32 (AF_XDP, as fast as it can)"),
        Generator::Dnsperf => {
            "dnsperf -c 8 -T 1 -q 100 (FALLBACK: kxdpgun could not be used)".into()
        }
    };
    let mut t = Table::new(
        format!(
            "2. Answers per second over a veth pair: {how}, {runs} runs of {seconds} s; `{NAME} A` \
             from each server"
        ),
        &[
            "server",
            "answers/s median",
            "min",
            "max",
            "CPU us/answer median",
            "min",
            "max",
            "of it NAPI",
            "sent q/s",
            "replied",
            "CPU 1 server",
            "CPU 1 others",
            "director answered/run",
            "program share (perf)",
            "program ns/answer",
        ],
    );
    for p in points {
        let [a, amin, amax] = p.answers.cells(|v| thousands(v as u64));
        let [c, cmin, cmax] = p.cpu_us.cells(|v| format!("{v:.2}"));
        t.row(vec![
            p.server.name().into(),
            a,
            amin,
            amax,
            c,
            cmin,
            cmax,
            format!("{:.2}", p.napi_us.median),
            thousands(p.sent.median as u64),
            format!("{:.1}%", p.replied.median),
            format!("{:.0}%", 100.0 * p.busy.median),
            format!("{:.0}%", 100.0 * p.other.median),
            thousands(p.director_answered.median as u64),
            p.program_share
                .as_ref()
                .map_or("-".into(), |v| format!("{:.1}%", 100.0 * v.median)),
            p.program_ns
                .as_ref()
                .map_or("-".into(), |v| format!("{:.0}", v.median)),
        ]);
    }
    let of = |s: Server| points.iter().find(|p| p.server == s);
    if let (Some(c), Some(d)) = (of(Server::Ceiling), of(Server::Director)) {
        t.note(format!(
            "director/ceiling: CPU per answer x{:.2} (aim <= 1.10), answers/s {:.0}% of the \
             ceiling's (aim >= 90%) (medians, same run).",
            d.cpu_us.median / c.cpu_us.median,
            100.0 * d.answers.median / c.answers.median
        ));
    }
    if let (Some(c), Some(d)) = (of(Server::Ceiling), of(Server::Director)) {
        if let (Some(cp), Some(dp)) = (&c.program_ns, &d.program_ns) {
            t.note(format!(
                "director's CPU per answer over the ceiling's: {:.0} ns, of which {:.0} ns in the \
                 programs themselves (perf: {:.0} ns against {:.0} ns) and the rest around them \
                 (the driver, the longer answer).",
                1e3 * (d.cpu_us.median - c.cpu_us.median),
                dp.median - cp.median,
                dp.median,
                cp.median
            ));
        }
    }
    if !turns.is_empty() {
        let r = Spread::of(turns);
        t.note(format!(
            "director/ceiling CPU per answer turn by turn (each director run over the ceiling's \
             run beside it): median x{:.2}, min x{:.2}, max x{:.2} over {} turns.",
            r.median,
            r.min,
            r.max,
            turns.len()
        ));
    }
    if let (Some(d), Some(k)) = (of(Server::Director), of(Server::Knot)) {
        t.note(format!(
            "director/knot: answers/s x{:.2}, CPU per answer x{:.2} (medians).",
            d.answers.median / k.answers.median,
            d.cpu_us.median / k.cpu_us.median
        ));
    }
    t.note(
        "Order: director and the ceiling take turns, one run each (director set up again after \
         each ceiling run), which of the two goes first alternating from turn to turn, then \
         knot's runs: load from the rest of the machine falls on director and its ceiling \
         alike.",
    );
    t.note(
        "Under overload a server's CPU per answer includes receiving the queries it then drops \
         (the NAPI thread's share).",
    );
    t.note(
        "program share (perf): of the edge NAPI thread's cpu-clock samples (perf record on CPU 1 \
         through the run), those in the XDP program's JIT code (bpf_prog_*); program ns/answer \
         = that share x the thread's CPU per answer (schedstat). Helpers it calls (e.g. \
         bpf_xdp_adjust_tail) are the kernel's, not counted in it.",
    );
    t.note(
        "Server CPU = schedstat of the edge veth's NAPI thread (director's XDP, and the kernel's \
         receive path for knot) + knotd's threads, all on CPU 1; the generator and the client \
         NAPI thread are on CPU 0.",
    );
    t.note(
        "answers/s = replies the generator received / run time; the other columns are medians. \
         CPU 1 server / others: share of CPU 1 the server's threads / everything else (from CPU \
         1's idle time) used while the load was on; other processes on this machine compete \
         with the server there.",
    );
    for l in log.lines() {
        t.note(l);
    }
    t
}

/// The shares of the ceiling's answers/s at which both are also run paced.
pub const PACED_SHARES: [f64; 2] = [0.5, 0.8];

/// director and the ceiling at one paced rate.
pub struct Paced {
    pub share: f64,
    pub director: Point,
    pub ceiling: Point,
}

impl Point {
    pub fn answers_median(&self) -> f64 {
        self.answers.median
    }
}

/// Section 2b: loss below the ceiling's rate (the issue's "no loss below the ceiling's
/// rate"): at a pace the setup itself carries, what share director answers.
pub fn paced_table(paced: &[Paced], gen: Generator) -> Table {
    let mut t = Table::new(
        format!(
            "2b. Loss below the ceiling's rate: director and the ceiling paced ({gen:?} at a set \
             rate) at shares of the ceiling's median answers/s above. Aim: director answers \
             every query the ceiling turns around (replied within 0.1 % of the ceiling's)."
        ),
        &[
            "pace",
            "server",
            "sent q/s median",
            "replied median",
            "min",
            "CPU us/answer median",
            "CPU 1 server",
            "aim met",
        ],
    );
    for p in paced {
        for (pt, is_director) in [(&p.ceiling, false), (&p.director, true)] {
            let met = if is_director {
                let gap = p.ceiling.replied.median - pt.replied.median;
                if gap <= 0.1 { "yes" } else { "no" }.to_string()
            } else {
                "-".into()
            };
            t.row(vec![
                format!("{:.0}% of ceiling", 100.0 * p.share),
                pt.server.name().into(),
                thousands(pt.sent.median as u64),
                format!("{:.2}%", pt.replied.median),
                format!("{:.2}%", pt.replied.min),
                format!("{:.2}", pt.cpu_us.median),
                format!("{:.0}%", 100.0 * pt.busy.median),
                met,
            ]);
        }
    }
    t.note(
        "replied = replies the generator received / queries it sent, per run; the ceiling's \
         shows what the setup itself loses at that pace.",
    );
    t
}

/// Section 3: which of the figures above measure the generator rather than the server.
pub fn limits(points: &[Point], gen: Generator) -> Table {
    let mut t = Table::new(
        "3. What limits these numbers",
        &["figure", "limited by", "why"],
    );
    for p in points {
        let (server, other) = (100.0 * p.busy.median, 100.0 * p.other.median);
        let lost = 100.0 - p.replied.median;
        let cpu = format!(
            "CPU 1: {server:.0}% server, {other:.0}% other processes; {lost:.0}% of queries \
             unanswered"
        );
        let (by, why) = if server + other >= 85.0 && other >= 15.0 {
            (
                "server CPU, shared",
                format!("{cpu}: other processes took part of the server's CPU"),
            )
        } else if server + other >= 85.0 {
            ("server", format!("{cpu}: the server side is saturated"))
        } else if lost >= 5.0 {
            (
                "server",
                format!("{cpu}: a queue overflowed before the CPU was full"),
            )
        } else {
            (
                "generator",
                format!(
                    "{cpu}: room left while the generator sent {} q/s",
                    thousands(p.sent.median as u64)
                ),
            )
        };
        t.row(vec![
            format!("{} answers/s", p.server.name()),
            by.into(),
            why,
        ]);
        t.row(vec![
            format!("{} CPU us/answer", p.server.name()),
            "server".into(),
            "its own CPU time per answer: ranks servers even when the generator is the bottleneck"
                .into(),
        ]);
    }
    t.row(vec![
        "section 1".into(),
        "program".into(),
        "no network: the program (and test harness) alone".into(),
    ]);
    match gen {
        Generator::Kxdpgun => t.note(
            "benchmarking.md: with 2 cores kxdpgun runs out of CPU first (about 0.9-1.2 M q/s \
             alone on a core); here it also shares CPU 0 with the client NAPI thread that receives \
             the replies. A turn-around-only XDP program answered about 0.90 M/s on such a \
             machine: the ceiling of the setup, not of XDP.",
        ),
        Generator::Dnsperf => t.note(
            "benchmarking.md: dnsperf tops out near 0.25-0.30 M responses/s on these machines.",
        ),
    }
    t
}

/// A table of two programs run in turns on the wire (sections 2c and 2d): one row each,
/// `first` naming the first column.
fn turns_table(title: String, first: &str, rows: [(&str, &[Sample]); 2]) -> Table {
    let mut t = Table::new(
        title,
        &[
            first,
            "answers/s median",
            "CPU us/answer median",
            "min",
            "max",
            "program ns/answer (perf)",
            "CPU 1 others",
        ],
    );
    for (name, samples) in rows {
        let p = Point::of(Server::Director, samples);
        let [c, cmin, cmax] = p.cpu_us.cells(|v| format!("{v:.3}"));
        t.row(vec![
            name.into(),
            thousands(p.answers.median as u64),
            c,
            cmin,
            cmax,
            p.program_ns
                .as_ref()
                .map_or("-".into(), |v| format!("{:.0}", v.median)),
            format!("{:.0}%", 100.0 * p.other.median),
        ]);
    }
    t
}

/// Section 2c: what demand counting costs on the wire, director with and without it.
pub fn counting_table(with: &[Sample], without: &[Sample], gen: Generator) -> Table {
    let mut t = turns_table(
        format!(
            "2c. Demand counting on the wire: director as built and its twin without demand \
             counting (director-ebpf's `uncounted` feature, `director-ctl upgrade --object`), \
             one run each per turn, which goes first alternating ({gen:?} at its maximum rate)"
        ),
        "build",
        [
            ("with demand counting", with),
            ("without demand counting", without),
        ],
    );
    let r = Spread::of(&turn_ratios(with, without));
    t.note(format!(
        "with / without, CPU per answer turn by turn: median x{:.3}, min x{:.3}, max x{:.3} \
         over {} turns (issue 36's aim: no drop in the ratio to the ceiling, i.e. about x1.00 \
         here).",
        r.median,
        r.min,
        r.max,
        with.len().min(without.len())
    ));
    t
}

/// Section 2d: what answering costs on the wire when nothing is decided: the floor twin
/// against the ceiling, with director's own ratio from section 2 beside it.
pub fn floor_table(
    floor: &[Sample],
    ceiling: &[Sample],
    director_turns: &[f64],
    gen: Generator,
) -> Table {
    let mut t = turns_table(
        format!(
            "2d. The answer floor: director-ebpf's `floor` twin (an IPv4 query turned around with \
             one fixed A record appended and its OPT echoed, nothing parsed past the header, no \
             map read; swapped in by `director-ctl upgrade --object`) and the ceiling, one run \
             each per turn, which goes first alternating ({gen:?} at its maximum rate)"
        ),
        "program",
        [
            ("answer floor", floor),
            ("turn-around only (ceiling)", ceiling),
        ],
    );
    let f = Spread::of(&turn_ratios(floor, ceiling));
    let d = Spread::of(director_turns);
    t.note(format!(
        "floor / ceiling, CPU per answer turn by turn: median x{:.3}, min x{:.3}, max x{:.3} \
         over {} turns; director / ceiling (section 2): median x{:.3}, min x{:.3}, max x{:.3}.",
        f.median,
        f.min,
        f.max,
        floor.len().min(ceiling.len()),
        d.median,
        d.min,
        d.max
    ));
    t.note(
        "What the floor costs above the ceiling is what any answer costs here (a longer frame, \
         the resize); what director costs above the floor is its own work: parsing, the \
         lookups, the records, the checksum. The floor leaves the UDP checksum 0, so it is a \
         lower bound.",
    );
    t
}
