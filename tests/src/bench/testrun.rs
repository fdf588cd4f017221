//! Timing the XDP program with BPF_PROG_TEST_RUN, as every bench binary does it: the
//! program loaded on pins of its own (nothing touches a director attached in a lab), the
//! kernel's own timing by `repeat` or by one call per frame, and measurements on a thread
//! pinned to one CPU.

use std::borrow::Cow;

use anyhow::{ensure, Context, Result};
use aya::programs::{TestRun, TestRunOptions, Xdp};
use aya::Ebpf;
use director_ctl::kernel::{program, Maps};

use super::sys;
use super::table::Spread;
use crate::netns;
use crate::pins::PinDir;

pub use crate::fixture::{XDP_DROP, XDP_PASS, XDP_TX};

/// The object's empty program: its time is the per-call floor (timer reads, the call).
pub const EMPTY: &str = "director_pass";
/// The object's program that only turns a DNS query around: the wire bench's ceiling.
pub const TURNAROUND: &str = "director_turnaround";

/// How the tables name the two timing methods; the baseline reads the starting program's
/// table by these labels, so they stay as its bench printed them.
pub const REPEAT_LABEL: &str = "repeat N";
pub const CALLS_LABEL: &str = "repeat=1, N calls";

/// director loaded on its own, its maps pinned in a directory of ours.
pub struct Loaded {
    pub ebpf: Ebpf,
    pub maps: Maps,
    // Last: the pins go after the descriptors are closed.
    pub pins: PinDir,
}

impl Loaded {
    /// Named like the labs' pins (`tag` tells the binaries apart), so that a lab's sweep
    /// removes them if this process is killed before its drop runs; `extra` are further
    /// programs of the object to load beside director.
    pub fn new(tag: &str, extra: &[&str]) -> Result<Loaded> {
        let pins = PinDir::new(netns::PREFIX, tag);
        let mut ebpf = program::load(pins.path(), 0)?;
        for name in extra {
            load_extra(&mut ebpf, name)?;
        }
        let maps = Maps::open(pins.path())?;
        Ok(Loaded { ebpf, maps, pins })
    }

    pub fn xdp(&self, name: &str) -> Result<&Xdp> {
        Ok(self
            .ebpf
            .program(name)
            .with_context(|| format!("no program {name}"))?
            .try_into()?)
    }

    /// Another handle on the same pinned maps, for writing while `maps` is borrowed.
    pub fn reopen(&self) -> Result<Maps> {
        Maps::open(self.pins.path())
    }
}

/// Loads program `name` of the object `ebpf` holds (director itself is loaded already).
pub fn load_extra(ebpf: &mut Ebpf, name: &str) -> Result<()> {
    let p: &mut Xdp = ebpf
        .program_mut(name)
        .with_context(|| format!("no program {name}"))?
        .try_into()?;
    p.load().with_context(|| format!("loading {name}"))
}

/// How the tables show a verdict.
pub fn verdict_name(v: u32) -> &'static str {
    match v {
        XDP_TX => "TX",
        XDP_DROP => "DROP",
        _ => "PASS",
    }
}

pub fn expect_verdict(got: u32, want: u32) -> Result<()> {
    ensure!(got == want, "verdict {got} where {want} was expected");
    Ok(())
}

/// One run with the output kept, so that a bench can check the path it is about to time:
/// the verdict and the frame out.
pub fn output(prog: &Xdp, frame: &[u8]) -> Result<(u32, Vec<u8>)> {
    let mut out = vec![0u8; 4096];
    let r = prog.test_run(TestRunOptions {
        data_in: Some(frame),
        data_out: Some(&mut out),
        ..TestRunOptions::new()
    })?;
    out.truncate(r.data_size_out as usize);
    Ok((r.return_value, out))
}

/// One call, `n` runs on the same buffer: the kernel's mean ns per run. Right only where a
/// run leaves the frame as something that takes the same path again.
pub fn repeat(prog: &Xdp, frame: &[u8], n: u32, want: u32) -> Result<f64> {
    let r = prog.test_run(TestRunOptions {
        data_in: Some(frame),
        repeat: n,
        ..TestRunOptions::new()
    })?;
    expect_verdict(r.return_value, want)?;
    Ok(r.duration.as_nanos() as f64)
}

/// `n` calls of one run each, call `i` on `frame(i)` (a fresh copy every call): the
/// kernel's ns for each call.
pub fn calls<'f>(
    prog: &Xdp,
    n: u32,
    mut frame: impl FnMut(u32) -> Cow<'f, [u8]>,
    want: u32,
) -> Result<Vec<u64>> {
    let mut each = Vec::with_capacity(n as usize);
    for i in 0..n {
        let f = frame(i);
        let r = prog.test_run(TestRunOptions {
            data_in: Some(&f),
            ..TestRunOptions::new()
        })?;
        expect_verdict(r.return_value, want)?;
        each.push(r.duration.as_nanos() as u64);
    }
    Ok(each)
}

/// [`calls`] summed up by the median call, not the mean: on a shared machine a few calls
/// are interrupted or preempted inside the timed window and would dominate a mean.
pub fn median_call<'f>(
    prog: &Xdp,
    n: u32,
    frame: impl FnMut(u32) -> Cow<'f, [u8]>,
    want: u32,
) -> Result<f64> {
    let mut each = calls(prog, n, frame, want)?;
    let mid = each.len() / 2;
    Ok(*each.select_nth_unstable(mid).1 as f64)
}

/// `runs` measurements by `f`, as median, min and max.
pub fn spread(runs: usize, mut f: impl FnMut() -> Result<f64>) -> Result<Spread> {
    let v = (0..runs).map(|_| f()).collect::<Result<Vec<f64>>>()?;
    Ok(Spread::of(&v))
}

/// Runs `f` on a thread of its own pinned to `cpu` (where the server side runs in the wire
/// sections), so that the caller stays where it was; `f` may also enter a namespace.
pub fn on_cpu<T: Send + 'static>(
    cpu: usize,
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    std::thread::spawn(move || {
        sys::pin_to_cpu(0, cpu)?;
        f()
    })
    .join()
    .unwrap_or_else(|p| std::panic::resume_unwind(p))
}
