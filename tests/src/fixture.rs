//! The XDP program loaded for BPF_PROG_TEST_RUN: a packet in, the verdict and the packet
//! out, with the program's maps open for configuration and counters.
//!
//! Every fixture pins its maps in a directory of its own, so fixtures never share state
//! with each other, with a running director (`/sys/fs/bpf/director`) or with other test
//! processes, and each starts with empty tables and zeroed counters.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{bail, Context, Result};
use aya::programs::{TestRun, TestRunOptions, Xdp};
use aya::Ebpf;
use director_common::counters::{self, Reason};
use director_common::maps::PROGRAM;
use director_ctl::kernel::{program, Maps};
use director_ctl::{checked, cli, ops};

use crate::packets;
use crate::pins::PinDir;

pub const XDP_DROP: u32 = 1;
pub const XDP_PASS: u32 = 2;
pub const XDP_TX: u32 = 3;

/// Room for any frame a test sends and its answer (BPF_PROG_TEST_RUN takes at most a page).
const OUT_BUF: usize = 4096;

/// Fixture pin directories are `director-fx-<pid>-<n>`, apart from a lab's (`dlab-...`).
const PIN_KIND: &str = "director-fx";
static NEXT_DIR: AtomicU32 = AtomicU32::new(0);

pub struct Fixture {
    maps: Maps,
    ebpf: Ebpf,
    // Last: dropped after the map and program descriptors are closed.
    pins: PinDir,
}

impl Fixture {
    /// Loads (and so verifies) the program with fresh maps.
    pub fn new() -> Result<Fixture> {
        let pins = PinDir::new(PIN_KIND, NEXT_DIR.fetch_add(1, Ordering::Relaxed));
        let ebpf =
            program::load(pins.path(), 0).context("loading director for BPF_PROG_TEST_RUN")?;
        let mut maps = Maps::open(pins.path())?;
        // The frames' destination is the edge (BPF_PROG_TEST_RUN's loopback has no
        // interface entry, so no MAC is checked unless a test adds one).
        for a in [
            IpAddr::V4(packets::SERVER_V4),
            IpAddr::V6(packets::SERVER_V6),
        ] {
            maps.set_configured_address(a, true)?;
        }
        Ok(Fixture { maps, ebpf, pins })
    }

    pub fn pin_dir(&self) -> &Path {
        self.pins.path()
    }

    /// The pinned maps, for `director_ctl::ops` operations.
    pub fn maps(&mut self) -> &mut Maps {
        &mut self.maps
    }

    /// The pinned maps, for reads.
    pub fn maps_read(&self) -> &Maps {
        &self.maps
    }

    fn program(&self, name: &str) -> Result<&Xdp> {
        let prog = self
            .ebpf
            .program(name)
            .with_context(|| format!("no program named {name}"))?;
        Ok(prog.try_into()?)
    }

    /// Loads (and so verifies) another program of director's object, to run with
    /// [`Fixture::try_run_program`].
    pub fn load_program(&mut self, name: &str) -> Result<()> {
        let prog: &mut Xdp = self
            .ebpf
            .program_mut(name)
            .with_context(|| format!("no program named {name}"))?
            .try_into()?;
        prog.load().with_context(|| format!("loading {name}"))?;
        Ok(())
    }

    /// Runs director once over `frame`: (verdict, frame as the program left it).
    pub fn try_run(&self, frame: &[u8]) -> Result<(u32, Vec<u8>)> {
        self.try_run_program(PROGRAM, frame)
    }

    /// Runs the loaded program `name` once over `frame`.
    pub fn try_run_program(&self, name: &str, frame: &[u8]) -> Result<(u32, Vec<u8>)> {
        let mut out = vec![0u8; OUT_BUF];
        let result = self
            .program(name)?
            .test_run(TestRunOptions {
                data_in: Some(frame),
                data_out: Some(&mut out),
                // One run: XDP test runs repeat on the same buffer, so a second run would
                // see the first run's answer rather than the query.
                repeat: 1,
                ..TestRunOptions::new()
            })
            .with_context(|| format!("BPF_PROG_TEST_RUN with a {}-byte frame", frame.len()))?;
        let len = result.data_size_out as usize;
        if len > out.len() {
            bail!("the kernel reports {len} output bytes, more than the {OUT_BUF}-byte buffer");
        }
        out.truncate(len);
        Ok((result.return_value, out))
    }

    /// `try_run` for frames the kernel accepts (at least an Ethernet header long).
    pub fn run(&self, frame: &[u8]) -> (u32, Vec<u8>) {
        self.try_run(frame).unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// Every verdict counter by its `stats` name, as the CLI reports them.
    pub fn counters(&self) -> BTreeMap<&'static str, u64> {
        let stats = ops::stats(&self.maps).expect("reading the counters");
        counters::ALL
            .iter()
            .map(|r| (r.name(), stats.counters.get(r.name()).copied().unwrap_or(0)))
            .collect()
    }

    pub fn counter(&self, reason: Reason) -> u64 {
        self.counters()[reason.name()]
    }
}

/// `route set` as the CLI takes it: the prefix and the servers as operator text.
pub fn route_set(m: &mut Maps, service: &str, prefix: &str, servers: &str) -> Result<()> {
    let servers = cli::text::server_list(servers)?;
    ops::route_set(m, service, checked::prefix(prefix)?, &servers)
}
