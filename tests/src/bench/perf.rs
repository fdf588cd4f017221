//! Where a CPU's time went while the load was on, by `perf record -e cpu-clock` (sampled
//! on one CPU, all tasks): which share of a thread's samples fell in the attached XDP
//! program itself (the JIT's `bpf_prog_<tag>_<name>` symbols) rather than in the driver
//! and kernel around it. schedstat gives the thread's time exactly; this only splits it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{ensure, Context, Result};

/// Samples per second: enough for a few thousand samples in a run, few enough that the
/// sampling interrupts cost the sampled CPU well under 1 %.
const FREQUENCY: &str = "999";

/// A `perf record` running on one CPU; `finish` waits for it and reads the split.
pub struct Recording {
    child: Child,
    file: PathBuf,
}

/// A thread's samples, and those of them that fell in BPF programs.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Split {
    pub thread: u64,
    pub program: u64,
}

impl Split {
    /// The program's share of the thread's time; None without samples.
    pub fn share(&self) -> Option<f64> {
        (self.thread > 0).then(|| self.program as f64 / self.thread as f64)
    }
}

/// Whether `perf` can be run here (the bench then leaves the column empty, not failing).
pub fn available() -> bool {
    Command::new("perf")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl Recording {
    /// Records `cpu` for `length` into `dir/tag.data`.
    pub fn start(cpu: usize, length: Duration, dir: &Path, tag: &str) -> Result<Recording> {
        let file = dir.join(format!("{tag}.data"));
        let child = Command::new("perf")
            .args(["record", "-q", "-e", "cpu-clock", "-F", FREQUENCY, "-C"])
            .arg(cpu.to_string())
            .arg("-o")
            .arg(&file)
            .args(["--", "sleep"])
            .arg(format!("{:.3}", length.as_secs_f64()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting perf record")?;
        Ok(Recording { child, file })
    }

    /// Waits for the recording (it ends on its own) and splits `tid`'s samples.
    pub fn finish(mut self, tid: u32) -> Result<Split> {
        let st = self.child.wait().context("waiting for perf record")?;
        ensure!(st.success(), "perf record: {st}");
        let out = Command::new("perf")
            .args(["report", "--stdio", "-q", "--no-children", "-g", "none"])
            // perf's "pid" key is the thread's id (with its comm).
            .args(["--sort", "pid,sym", "-F", "sample,pid,sym", "-i"])
            .arg(&self.file)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .context("running perf report")?;
        ensure!(out.status.success(), "perf report: {}", out.status);
        let _ = std::fs::remove_file(&self.file);
        Ok(split(&String::from_utf8_lossy(&out.stdout), tid))
    }
}

/// Sums `tid`'s sample counts from `perf report -F sample,pid,sym` lines such as
/// `  1234  4321:napi/veth0-6  [k] bpf_prog_0123456789abcdef_F`.
pub fn split(report: &str, tid: u32) -> Split {
    let mut s = Split::default();
    for line in report.lines() {
        let mut words = line.split_whitespace();
        let (Some(n), Some(who)) = (words.next(), words.next()) else {
            continue;
        };
        let (Ok(n), Some(Ok(t))) = (
            n.parse::<u64>(),
            who.split(':').next().map(str::parse::<u32>),
        ) else {
            continue;
        };
        if t != tid {
            continue;
        }
        s.thread += n;
        if words.any(|w| w.starts_with("bpf_prog_")) {
            s.program += n;
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_threads_samples_and_its_programs_count() {
        let report = "\
     900  4321:napi/de9366x0-6  [k] bpf_prog_fe45374f4425e806_F
     300  4321:napi/de9366x0-6  [k] veth_xdp_rcv_skb
      50  4321:napi/de9366x0-6  [k] bpf_xdp_adjust_tail
     700  999:rustc             [.] llvm::InstCombinePass::run
      20  999:rustc             [k] bpf_prog_0000000000000000_other
";
        assert_eq!(
            split(report, 4321),
            Split {
                thread: 1250,
                program: 900
            }
        );
        assert_eq!(split(report, 4321).share(), Some(0.72));
        assert_eq!(split(report, 1).share(), None);
    }
}
