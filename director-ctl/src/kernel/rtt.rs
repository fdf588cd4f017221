//! The agent's programs: `director_rtt` (sock_ops, on the servers: attached to a cgroup)
//! or `director_rtt_tc` (tc, on a gateway the handshakes pass: attached to both directions
//! of interfaces), loaded from director's object, attached through bpf_links only this
//! process holds (the kernel detaches them when the process ends, however it ends), and
//! their map drained.
//!
//! The object's maps are made by any load of it. The pinned ones (the edge's) go into a
//! directory of this process's own, unpinned once loaded, so an edge's pins on the same
//! host are neither reused nor touched, and each is sized to one entry: this process reads
//! only the unpinned RTT maps, which are its own.

use std::collections::HashSet;
use std::fs::File;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use aya::maps::{Array, MapData, MapError, PerCpuArray, PerCpuHashMap};
use aya::programs::{tc, CgroupAttachMode, SchedClassifier, SockOps, TcAttachType};
use aya::util::KernelVersion;
use aya::{Ebpf, EbpfLoader};
use director_common::rtt::{
    self, Count, Hist, RttKey, RttStats, FAMILY_V4, MAP_RTT, MAP_RTT_COUNTERS, MAP_RTT_GEN,
    MAP_RTT_SYNACK, PROGRAM_RTT, PROGRAM_RTT_TC, V4_PREFIX_LEN, V6_PREFIX_LEN,
};
use ipnet::IpNet;

use super::program::{
    ensure_bpffs_dir, object_map_names, require_privileges, verifier_error, MapPins,
};
use crate::EBPF_OBJECT;

const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

/// The cgroup2 mount point in /proc/mounts (/sys/fs/cgroup on unified hosts,
/// /sys/fs/cgroup/unified on hybrid ones).
pub fn cgroup2_root() -> Result<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/mounts").context("reading /proc/mounts")?;
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, at, fstype) = (f.next()?, f.next()?, f.next()?);
            (fstype == "cgroup2").then(|| PathBuf::from(at))
        })
        .next()
        .context("no cgroup2 file system is mounted (see /proc/mounts): give --cgroup")
}

fn is_cgroup2(path: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: a C string and a zeroed statfs that live across the call.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    unsafe { libc::statfs(c.as_ptr(), &mut st) == 0 && st.f_type as i64 == CGROUP2_SUPER_MAGIC }
}

/// Where the handshakes are taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Watch {
    /// Connections accepted by the processes of a cgroup v2 directory (and its
    /// descendants'): the kernel's own sample, on the servers.
    Cgroup(PathBuf),
    /// Handshakes passing these interfaces, either way: SYN-ACK to ACK as seen here, on a
    /// host the connections pass (at most `pending` waiting for their ACK at once).
    Interfaces { names: Vec<String>, pending: u32 },
}

impl std::fmt::Display for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Watch::Cgroup(p) => write!(f, "connections accepted in {}", p.display()),
            Watch::Interfaces { names, .. } => {
                write!(f, "handshakes passing {}", names.join(", "))
            }
        }
    }
}

/// What the kernel counted since the attach, all CPUs together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counted {
    /// Samples written (both generations).
    pub samples: u64,
    /// Handshakes without an RTT (retransmitted SYN-ACK, SYN cookie).
    pub no_rtt: u64,
    /// Samples dropped because the map refused their prefix an entry.
    pub no_entry: u64,
    /// SYN-ACKs seen passing (interfaces only).
    pub syn_acks: u64,
}

/// One drain: per prefix, what the handshakes since the last drain measured.
#[derive(Debug, Default)]
pub struct Drained {
    pub prefixes: Vec<(IpNet, Hist)>,
    pub samples: u64,
    /// Samples counted by the program but not found: their entries were evicted (the map
    /// was full) before this drain read them.
    pub lost: u64,
    pub counted: Counted,
}

/// The attached program and its maps; dropping it detaches the program.
pub struct HandshakeRtt {
    stats: PerCpuHashMap<MapData, RttKey, RttStats>,
    gen: Array<MapData, u32>,
    counters: PerCpuArray<MapData, u64>,
    /// The generation the program writes under now.
    writing: u8,
    /// Per generation, its samples counter when it was last drained.
    drained_at: [u64; 2],
    max_prefixes: u32,
    /// Last: holds the program and its link (dropped after the maps).
    _ebpf: Ebpf,
}

impl HandshakeRtt {
    /// Loads the program `watch` needs with a `DIR_RTT` of `max_prefixes` entries and
    /// attaches it there.
    pub fn attach(watch: &Watch, max_prefixes: u32) -> Result<HandshakeRtt> {
        require_privileges("agent")?;
        let pending = match watch {
            Watch::Cgroup(_) => 1,
            Watch::Interfaces { pending, .. } => *pending,
        };
        let mut ebpf = load(max_prefixes, pending)?;
        match watch {
            Watch::Cgroup(cgroup) => attach_cgroup(&mut ebpf, cgroup)?,
            Watch::Interfaces { names, .. } => attach_interfaces(&mut ebpf, names)?,
        }
        let mut take = |name: &str| {
            ebpf.take_map(name)
                .with_context(|| format!("the object has no map {name}"))
        };
        let stats = PerCpuHashMap::try_from(take(MAP_RTT)?)?;
        let gen = Array::try_from(take(MAP_RTT_GEN)?)?;
        let counters = PerCpuArray::try_from(take(MAP_RTT_COUNTERS)?)?;
        Ok(HandshakeRtt {
            stats,
            gen,
            counters,
            writing: 0,
            drained_at: [0; 2],
            max_prefixes,
            _ebpf: ebpf,
        })
    }

    /// Flips the generation, waits `grace` for program runs that read the old one to end,
    /// then reads and deletes every entry of the old one.
    ///
    /// Why a flip rather than reading and deleting entries in place: a program run that
    /// found an entry just before the delete would write its sample into memory already
    /// read (and, in an LRU map, possibly reused), and the sample would be lost unseen.
    /// After the flip nothing writes the old generation's entries (a run takes
    /// microseconds; the grace is milliseconds), so every one is read whole.
    pub fn drain(&mut self, grace: Duration) -> Result<Drained> {
        let old = self.writing;
        self.writing = old ^ 1;
        self.gen
            .set(0, u32::from(self.writing), 0)
            .context("flipping DIR_RTT_GEN")?;
        std::thread::sleep(grace);
        let mut out = Drained::default();
        let mut prefixes = Vec::new();
        for key in self.keys_of(old) {
            let values = match self.stats.get(&key, 0) {
                Ok(v) => v,
                // Evicted since it was listed: counted as lost below.
                Err(MapError::KeyNotFound) => continue,
                Err(e) => return Err(e).context("reading DIR_RTT"),
            };
            let mut h = Hist::default();
            for v in values.iter() {
                h.add_stats(v);
            }
            match self.stats.remove(&key) {
                Ok(()) | Err(MapError::KeyNotFound) => {}
                Err(e) => return Err(e).context("deleting from DIR_RTT"),
            }
            out.samples += h.samples;
            prefixes.push((prefix_of(&key), h));
        }
        out.prefixes = prefixes;
        let total = self.count(rtt::samples_slot(old))?;
        let written = total.saturating_sub(self.drained_at[usize::from(old)]);
        self.drained_at[usize::from(old)] = total;
        out.lost = written.saturating_sub(out.samples);
        out.counted = Counted {
            samples: self.count(rtt::samples_slot(0))? + self.count(rtt::samples_slot(1))?,
            no_rtt: self.count(Count::NoRtt as u32)?,
            no_entry: self.count(Count::NoEntry as u32)?,
            syn_acks: self.count(Count::SynAcks as u32)?,
        };
        Ok(out)
    }

    /// The keys of generation `gen`, each once. Listing walks the hash with get_next_key;
    /// a key evicted under it restarts the walk, so the walk is bounded and deduplicated.
    fn keys_of(&self, gen: u8) -> HashSet<RttKey> {
        let bound = 4 * self.max_prefixes as usize + 16;
        self.stats
            .keys()
            .take(bound)
            .filter_map(Result::ok)
            .filter(|k| k.gen == gen)
            .collect()
    }

    fn count(&self, slot: u32) -> Result<u64> {
        let per_cpu = self
            .counters
            .get(&slot, 0)
            .context("reading DIR_RTT_COUNTERS")?;
        Ok(per_cpu.iter().sum())
    }
}

fn attach_cgroup(ebpf: &mut Ebpf, cgroup: &Path) -> Result<()> {
    if !is_cgroup2(cgroup) {
        bail!(
            "{} is not a cgroup v2 directory (the cgroup2 mount is in /proc/mounts)",
            cgroup.display()
        );
    }
    let prog: &mut SockOps = ebpf
        .program_mut(PROGRAM_RTT)
        .with_context(|| format!("the object has no program named {PROGRAM_RTT}"))?
        .try_into()?;
    prog.load()
        .map_err(verifier_error)
        .context("the kernel refused the sock_ops program")?;
    let dir = File::open(cgroup).with_context(|| format!("opening {}", cgroup.display()))?;
    // A bpf_link (kernel 5.7+): it goes beside any other sock_ops program of the cgroup
    // whatever the mode, and the kernel refuses link flags, so the mode must be Single
    // (no flags), not AllowMultiple.
    prog.attach(dir, CgroupAttachMode::Single)
        .with_context(|| format!("attaching to the cgroup {}", cgroup.display()))?;
    Ok(())
}

/// Attaches `director_rtt_tc` to ingress and egress of every interface in `names`.
fn attach_interfaces(ebpf: &mut Ebpf, names: &[String]) -> Result<()> {
    // Refused before anything is attached, with the name that is wrong.
    for name in names {
        let c = std::ffi::CString::new(name.as_str())
            .with_context(|| format!("--observe {name:?}: a name with a NUL byte"))?;
        // SAFETY: a C string that lives across the call.
        if unsafe { libc::if_nametoindex(c.as_ptr()) } == 0 {
            bail!("--observe {name}: no interface of that name in this network namespace");
        }
    }
    let prog: &mut SchedClassifier = ebpf
        .program_mut(PROGRAM_RTT_TC)
        .with_context(|| format!("the object has no program named {PROGRAM_RTT_TC}"))?
        .try_into()?;
    prog.load()
        .map_err(verifier_error)
        .context("the kernel refused the tc program")?;
    // From 6.6 aya attaches through tcx links, held by this process like the sock_ops
    // link. Before, through netlink filters on a clsact qdisc, which a killed agent leaves
    // behind (harmless: the program counts into maps nobody reads).
    let tcx = KernelVersion::current().is_ok_and(|v| v >= KernelVersion::new(6, 6, 0));
    for name in names {
        if !tcx {
            // EEXIST when the interface has one already: that one is used.
            let _ = tc::qdisc_add_clsact(name);
        }
        for (way, dir) in [
            (TcAttachType::Ingress, "ingress"),
            (TcAttachType::Egress, "egress"),
        ] {
            prog.attach(name, way)
                .with_context(|| format!("attaching to {dir} of {name}"))?;
        }
    }
    Ok(())
}

/// The prefix a key stands for.
pub fn prefix_of(k: &RttKey) -> IpNet {
    let mut bytes = [0u8; 16];
    for (chunk, w) in bytes.chunks_exact_mut(4).zip(k.addr) {
        chunk.copy_from_slice(&w.to_ne_bytes());
    }
    let (ip, len) = if k.family == FAMILY_V4 {
        let b = [bytes[0], bytes[1], bytes[2], bytes[3]];
        (IpAddr::V4(Ipv4Addr::from(b)), V4_PREFIX_LEN)
    } else {
        (IpAddr::V6(Ipv6Addr::from(bytes)), V6_PREFIX_LEN)
    };
    // The lengths are constants within both families' bounds.
    IpNet::new(ip, len).unwrap_or_else(|_| IpNet::from(ip))
}

/// Loads the object with its pinned maps in a directory of this load's own (removed once
/// loaded) and every one of the edge's maps shrunk to one entry; `DIR_RTT` and
/// `DIR_RTT_SYNACK` with these sizes. Nothing is attached: BPF_PROG_TEST_RUN fixtures use
/// it as it is.
pub fn load(max_prefixes: u32, pending: u32) -> Result<Ebpf> {
    static LOADS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let names = object_map_names()?;
    // A fresh directory per load: loads in one process (fixtures in parallel) must not
    // pick up each other's pins.
    let pins = MapPins(PathBuf::from(format!(
        "/sys/fs/bpf/director-agent-{}-{}",
        std::process::id(),
        LOADS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )));
    ensure_bpffs_dir(&pins.0)?;
    let mut loader = EbpfLoader::new();
    loader.default_map_pin_directory(&pins.0);
    for name in names
        .iter()
        .filter(|n| n.starts_with("DIR_") && !n.starts_with("DIR_RTT"))
    {
        loader.map_max_entries(name, 1);
    }
    loader.map_max_entries(MAP_RTT, max_prefixes);
    loader.map_max_entries(MAP_RTT_SYNACK, pending.max(1));
    let ebpf = loader
        .load(EBPF_OBJECT)
        .context("loading director's object (are you root?)")?;
    drop(pins);
    Ok(ebpf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_their_prefixes() {
        let w = |b: [u8; 4]| u32::from_ne_bytes(b);
        let k = rtt::key_v4(0, w([198, 51, 100, 7]));
        assert_eq!(prefix_of(&k).to_string(), "198.51.100.0/24");
        let k = rtt::key_v6(1, [w([0x20, 0x01, 0x0d, 0xb8]), w([0, 2, 0, 9]), 0, 1]);
        assert_eq!(prefix_of(&k).to_string(), "2001:db8:2::/48");
    }
}
