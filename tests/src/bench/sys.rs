//! Small operating-system helpers: commands with a time bound, per-thread CPU time, CPU
//! pinning, threaded NAPI, entering a network namespace, reading /proc.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CString;
use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};

/// What a finished command printed.
pub struct Finished {
    pub success: bool,
    pub status: String,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `cmd` with its output in files under `dir` (a pipe could fill up and stall it while
/// we poll), killing it by pid if it is still running after `limit`.
pub fn run_bounded(mut cmd: Command, dir: &Path, tag: &str, limit: Duration) -> Result<Finished> {
    let out_path = dir.join(format!("{tag}.out"));
    let err_path = dir.join(format!("{tag}.err"));
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(fs::File::create(&out_path)?)
        .stderr(fs::File::create(&err_path)?)
        .spawn()
        .with_context(|| format!("starting {cmd:?}"))?;
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st.to_string();
        }
        if Instant::now() > deadline {
            // Child::kill sends SIGKILL to this child's pid only.
            let _ = child.kill();
            let _ = child.wait();
            break format!("killed after {limit:?}");
        }
        sleep(Duration::from_millis(20));
    };
    Ok(Finished {
        success: status == "exit status: 0",
        status,
        stdout: fs::read_to_string(&out_path).unwrap_or_default(),
        stderr: fs::read_to_string(&err_path).unwrap_or_default(),
    })
}

/// Runs a short command and fails unless it succeeds; returns stdout.
pub fn run_ok(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `nsenter --net=/run/netns/NS PROGRAM`: the namespace's network, the host's /sys and pins.
pub fn nsenter(ns: &str, program: &str) -> Command {
    let mut c = Command::new("nsenter");
    c.arg(format!("--net=/run/netns/{ns}")).arg(program);
    c
}

/// `ip netns exec NS PROGRAM`: also mounts the namespace's own /sys, which tools that look
/// up interfaces in /sys/class/net (kxdpgun, writes to `threaded`) need.
pub fn netns_exec(ns: &str, program: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, program]);
    c
}

/// CPU time a thread has run, in ns: the first field of its schedstat (exact, unlike the
/// tick-sampled /proc/stat). None once the thread is gone.
pub fn thread_cpu_ns(tid: u32) -> Option<u64> {
    let s = fs::read_to_string(format!("/proc/{tid}/schedstat")).ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// The thread ids of a process.
pub fn threads(pid: u32) -> Vec<u32> {
    let Ok(rd) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// Total CPU time of a set of threads.
pub fn cpu_ns(tids: &[u32]) -> u64 {
    tids.iter().filter_map(|t| thread_cpu_ns(*t)).sum()
}

/// CPU time (ns) of each thread of `pid`, summed by thread name.
pub fn cpu_ns_by_name(pid: u32) -> Result<BTreeMap<String, u64>> {
    let mut out = BTreeMap::new();
    for tid in threads(pid) {
        let name = fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))?;
        let ns = thread_cpu_ns(tid).with_context(|| format!("no schedstat for thread {tid}"))?;
        *out.entry(name.trim().to_string()).or_default() += ns;
    }
    Ok(out)
}

/// A `Key:  N kB` line of a /proc file such as /proc/self/status or /proc/meminfo.
pub fn proc_kb(file: &str, key: &str) -> Result<u64> {
    let text = fs::read_to_string(file).with_context(|| format!("reading {file}"))?;
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .with_context(|| format!("no {key} line in {file}"))
}

/// The benches that place a load generator on CPU 0 and the measured side on CPU 1 need
/// both; `what` says which two they place.
pub fn require_two_cpus(what: &str) -> Result<()> {
    if std::thread::available_parallelism().map_or(0, std::num::NonZero::get) < 2 {
        bail!("the bench places {what} on CPU 0 and CPU 1: it needs 2 CPUs");
    }
    Ok(())
}

/// Restricts a thread (or process) to one CPU.
pub fn pin_to_cpu(tid: u32, cpu: usize) -> Result<()> {
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(tid as libc::pid_t, size_of_val(&set), &set) != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("pinning thread {tid} to CPU {cpu}"));
        }
    }
    Ok(())
}

/// SCHED_FIFO at `priority` (what `chrt -f -p` does).
pub fn set_fifo(tid: u32, priority: i32) -> Result<()> {
    let p = libc::sched_param {
        sched_priority: priority,
    };
    if unsafe { libc::sched_setscheduler(tid as libc::pid_t, libc::SCHED_FIFO, &p) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("making thread {tid} SCHED_FIFO"));
    }
    Ok(())
}

/// Sets a thread's nice value (-20: CFS gives it about 88 times a default thread's share).
pub fn set_nice(tid: u32, nice: i32) -> Result<()> {
    // SAFETY: setpriority(2) on a thread id; no memory is passed.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, nice) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("setting thread {tid}'s nice value to {nice}"));
    }
    Ok(())
}

/// Kernel threads whose name starts like the NAPI thread of `ifname` (`napi/<if>-<id>`,
/// cut to the 15 characters a thread name keeps).
fn napi_threads(ifname: &str) -> BTreeSet<u32> {
    let prefix: String = format!("napi/{ifname}-").chars().take(15).collect();
    let Ok(rd) = fs::read_dir("/proc") else {
        return BTreeSet::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim_end().starts_with(&prefix))
        })
        .collect()
}

/// Turns on threaded NAPI for `ifname` in `ns` and returns the NAPI thread's id. The thread
/// is the one that appears after the switch, so a same-named interface of another
/// namespace cannot be mistaken for ours. The device must already have a NAPI instance
/// (on veth: XDP attached, or GRO on), or the kernel refuses.
pub fn threaded_napi(ns: &str, ifname: &str) -> Result<u32> {
    let before = napi_threads(ifname);
    run_ok(
        netns_exec(ns, "sh").args(["-c", &format!("echo 1 > /sys/class/net/{ifname}/threaded")]),
    )
    .with_context(|| format!("enabling threaded NAPI on {ifname}"))?;
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let new: Vec<u32> = napi_threads(ifname).difference(&before).copied().collect();
        match new.as_slice() {
            [tid] => return Ok(*tid),
            [] if Instant::now() < deadline => sleep(Duration::from_millis(20)),
            _ => bail!("expected one new NAPI thread for {ifname}, found {new:?}"),
        }
    }
}

/// The threaded NAPI thread `ifname` has now (a veth gets a new NAPI instance when its XDP
/// program is replaced), waiting up to 3 s for exactly one.
pub fn current_napi(ifname: &str) -> Result<u32> {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let now: Vec<u32> = napi_threads(ifname).into_iter().collect();
        match now.as_slice() {
            [tid] => return Ok(*tid),
            _ if Instant::now() < deadline => sleep(Duration::from_millis(20)),
            _ => bail!("expected one NAPI thread for {ifname}, found {now:?}"),
        }
    }
}

/// Moves the calling thread (only) into network namespace `ns`.
pub fn enter_netns(ns: &str) -> Result<()> {
    let f = fs::File::open(format!("/run/netns/{ns}"))
        .with_context(|| format!("opening namespace {ns}"))?;
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("entering namespace {ns}"));
    }
    Ok(())
}

/// An interface's index in the calling thread's network namespace.
pub fn ifindex(ifname: &str) -> Result<u32> {
    let c = CString::new(ifname)?;
    match unsafe { libc::if_nametoindex(c.as_ptr()) } {
        0 => bail!("no interface {ifname} in this thread's namespace"),
        i => Ok(i),
    }
}

/// Processes named `comm` whose network namespace is `ns` (compared by namespace inode).
pub fn processes_in_netns(ns: &str, comm: &str) -> Result<Vec<u32>> {
    let ino = fs::metadata(format!("/run/netns/{ns}"))?.ino();
    let want = format!("net:[{ino}]");
    let mut out = Vec::new();
    for e in fs::read_dir("/proc")?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let same_ns =
            fs::read_link(format!("/proc/{pid}/ns/net")).is_ok_and(|l| l.to_string_lossy() == want);
        let same_comm =
            fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim_end() == comm);
        if same_ns && same_comm {
            out.push(pid);
        }
    }
    Ok(out)
}

/// An interface's MAC address as `ip` prints it.
pub fn mac_of(ns: &str, ifname: &str) -> Result<String> {
    let out = run_ok(Command::new("ip").args(["-n", ns, "-o", "link", "show", "dev", ifname]))?;
    let mut words = out.split_whitespace();
    words.find(|w| *w == "link/ether");
    words
        .next()
        .map(str::to_string)
        .with_context(|| format!("no MAC address in {out:?}"))
}

/// One counter of `ethtool -S` (veth reports XDP_TX and ndo_xdp_xmit there).
pub fn ethtool_stat(ns: &str, ifname: &str, name: &str) -> Result<u64> {
    let out = run_ok(nsenter(ns, "ethtool").args(["-S", ifname]))?;
    out.lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix(name)?
                .strip_prefix(':')?
                .trim()
                .parse()
                .ok()
        })
        .with_context(|| format!("no {name} in ethtool -S {ifname}"))
}

/// Time CPU `cpu` has been idle, in ns: idle + iowait of /proc/stat, which a tickless kernel
/// measures at idle entry and exit (reported in USER_HZ ticks, 10 ms).
pub fn cpu_idle_ns(cpu: usize) -> Result<u64> {
    let stat = fs::read_to_string("/proc/stat")?;
    let line = stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&format!("cpu{cpu}")))
        .with_context(|| format!("no cpu{cpu} in /proc/stat"))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    ensure!(f.len() >= 5, "short cpu{cpu} line in /proc/stat: {line}");
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Ok((f[3] + f[4]) * (1_000_000_000 / tick))
}
