//! The program's life: load (maps pinned by name under the pin directory), attach to an
//! interface through a pinned bpf_link (so it stays attached when this process exits),
//! detach, and unpin everything once no interface uses it.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use aya::{
    programs::{
        links::{FdLink, PinnedLink},
        xdp::XdpMode,
        ProgramInfo, Xdp,
    },
    Ebpf, EbpfLoader,
};
use aya_obj::programs::XdpAttachType;

use super::{host, Maps};
use director_common::{
    maps::PROGRAM,
    rrl::{RRL_SEED, RRL_TICK_NS},
};

use super::WriteLock;
use crate::EBPF_OBJECT;

pub(super) const PROG_PIN: &str = "program";
pub(super) const LINK_PREFIX: &str = "link_";

/// How the program is attached to an interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Driver (native) XDP.
    Native,
    /// Generic XDP in the stack (any interface, slower).
    Skb,
}

/// The XDP object with its maps pinned (or reused) under `dir` and the aya-log level
/// compiled into this load: the one place the object is opened.
fn open_object(dir: &Path, log_level: u8) -> Result<Ebpf> {
    open_object_from(dir, log_level, EBPF_OBJECT)
}

/// [`open_object`] for another build's object (`upgrade --object`): maps pinned under
/// `dir` by name are reused, not created.
pub(super) fn open_object_from(dir: &Path, log_level: u8, object: &[u8]) -> Result<Ebpf> {
    // A new seed per load: whoever cannot read it cannot aim sources at one bucket set.
    let seed = std::hash::BuildHasher::hash_one(
        &std::hash::RandomState::new(),
        std::time::SystemTime::now(),
    );
    EbpfLoader::new()
        .default_map_pin_directory(dir)
        .override_global(aya_log::LEVEL, &log_level, true)
        // Absent from an older build's object (`upgrade --object`): its buckets were a hash.
        .override_global(RRL_SEED, &seed, false)
        .override_global(RRL_TICK_NS, &super::tick::tick_ns(), false)
        .load(object)
        .context("loading the XDP object (are you root?)")
}

/// Loads the object with its maps pinned (or reused) under `pin_dir`. `log_level` is the
/// aya-log level compiled into this load (0 = off: the verifier removes the log calls).
pub fn load(pin_dir: &Path, log_level: u8) -> Result<Ebpf> {
    ensure_bpffs_dir(pin_dir)?;
    let mut ebpf = open_object(pin_dir, log_level)?;
    let prog: &mut Xdp = program_mut(&mut ebpf)?;
    prog.load()
        .map_err(verifier_error)
        .context("the kernel refused the XDP program")?;
    Ok(ebpf)
}

pub fn program_mut(ebpf: &mut Ebpf) -> Result<&mut Xdp> {
    Ok(ebpf
        .program_mut(PROGRAM)
        .context("the object has no program named director")?
        .try_into()?)
}

pub(super) fn verifier_error(e: aya::programs::ProgramError) -> anyhow::Error {
    // The verifier log is long; its last lines say what failed.
    let text = format!("{e:#?}");
    let tail: Vec<&str> = text.lines().rev().take(25).collect();
    anyhow::anyhow!(
        "{e}\n{}",
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    )
}

const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

fn is_bpffs(path: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    unsafe { libc::statfs(c.as_ptr(), &mut st) == 0 && st.f_type as i64 == BPF_FS_MAGIC }
}

/// Pins need a bpffs; many machines mount one at /sys/fs/bpf, some do not.
pub(super) fn ensure_bpffs_dir(dir: &Path) -> Result<()> {
    let mount = Path::new("/sys/fs/bpf");
    if dir.starts_with(mount) && !is_bpffs(mount) {
        let (src, fstype) = (c"bpf", c"bpf");
        let target = c"/sys/fs/bpf";
        if unsafe {
            libc::mount(
                src.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                0,
                std::ptr::null(),
            )
        } != 0
        {
            return Err(std::io::Error::last_os_error()).context("mounting bpffs at /sys/fs/bpf");
        }
    }
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating the pin directory {}", dir.display()))
}

pub(super) fn link_pin(pin_dir: &Path, iface: &str) -> PathBuf {
    pin_dir.join(format!("{LINK_PREFIX}{iface}"))
}

fn check_iface(iface: &str) -> Result<()> {
    if iface.is_empty() || iface.len() >= libc::IFNAMSIZ || iface.contains('/') {
        bail!("{iface:?} is not a valid interface name");
    }
    Ok(())
}

/// Capability bits (linux/capability.h) that loading and attaching XDP needs.
const CAP_NET_ADMIN: u32 = 12;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_BPF: u32 = 39;

/// Refuses `what` up front without the privileges it needs, before anything is created:
/// otherwise an unprivileged run fails half-way, after making a pin directory (bpffs at
/// /sys/fs/bpf is often world-writable), or reports what it cannot see ("already
/// attached", from a pin it may stat but not open).
pub fn require_privileges(what: &str) -> Result<()> {
    let status =
        std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .context("no CapEff in /proc/self/status")?;
    let has = |cap: u32| eff & (1u64 << cap) != 0;
    if !(has(CAP_NET_ADMIN) && (has(CAP_BPF) || has(CAP_SYS_ADMIN))) {
        bail!("{what} needs root (CAP_BPF and CAP_NET_ADMIN)");
    }
    Ok(())
}

/// Attaches director to `iface`, loading and pinning it first if nothing is pinned yet.
/// Holds the pin directory's write lock, so two attaches never load two programs; if this
/// call made the pin directory and fails, it removes the directory and what it pinned.
pub fn attach(pin_dir: &Path, iface: &str, mode: Mode, log_level: u8) -> Result<()> {
    check_iface(iface)?;
    require_privileges("attach")?;
    let made = !pin_dir.exists();
    ensure_bpffs_dir(pin_dir)?;
    let r =
        WriteLock::take(pin_dir).and_then(|_lock| attach_locked(pin_dir, iface, mode, log_level));
    if r.is_err() && made {
        remove_pins(pin_dir);
    }
    r
}

/// Removes the pins in `dir` and then `dir`, best effort (only on paths where `dir` is ours).
fn remove_pins(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    let _ = std::fs::remove_dir(dir);
}

fn attach_locked(pin_dir: &Path, iface: &str, mode: Mode, log_level: u8) -> Result<()> {
    let link_path = link_pin(pin_dir, iface);
    if link_path.exists() {
        bail!("director is already attached to {iface} (detach it first)");
    }
    let prog_path = pin_dir.join(PROG_PIN);
    let mut ebpf_holder;
    let mut pinned_prog;
    let prog: &mut Xdp = if prog_path.exists() {
        pinned_prog = Xdp::from_pin(&prog_path, XdpAttachType::Interface)
            .with_context(|| format!("opening the pinned program {}", prog_path.display()))?;
        &mut pinned_prog
    } else {
        ebpf_holder = load(pin_dir, log_level)?;
        let prog = program_mut(&mut ebpf_holder)?;
        prog.pin(&prog_path)
            .with_context(|| format!("pinning the program at {}", prog_path.display()))?;
        prog
    };
    // Before the first packet: which MAC and addresses are this edge's (queries to any
    // other are not answered).
    register_edge(pin_dir, iface)?;
    let flags = match mode {
        Mode::Native => XdpMode::Driver,
        Mode::Skb => XdpMode::Skb,
    };
    let id = prog
        .attach(iface, flags)
        .with_context(|| format!("attaching to {iface} in {mode:?} mode"))?;
    let link: FdLink = prog
        .take_link(id)?
        .try_into()
        .context("the kernel attached without a bpf_link; director needs bpf_link (kernel 5.9+)")?;
    link.pin(&link_path)
        .with_context(|| format!("pinning the link at {}", link_path.display()))?;
    Ok(())
}

/// Records `iface`'s MAC and the host's addresses in the program's maps.
fn register_edge(pin_dir: &Path, iface: &str) -> Result<()> {
    let (ifindex, mac) = host::link(iface)?;
    let mut m = Maps::open(pin_dir)?;
    m.put_iface(ifindex, mac)?;
    m.set_host_addresses(&host::addresses()?)?;
    Ok(())
}

/// Detaches from `iface`; when no interface is left, unpins the program and every map.
pub fn detach(pin_dir: &Path, iface: &str) -> Result<bool> {
    check_iface(iface)?;
    require_privileges("detach")?;
    let link_path = link_pin(pin_dir, iface);
    if !link_path.exists() {
        bail!("director is not attached to {iface}");
    }
    // A writer waiting for the lock finds the directory gone when this removes it.
    let _lock = WriteLock::take(pin_dir)?;
    if !link_path.exists() {
        bail!("director is not attached to {iface}");
    }
    let link = PinnedLink::from_pin(&link_path)
        .with_context(|| format!("opening {}", link_path.display()))?;
    drop(link.unpin().context("unpinning the link")?);
    if !attached(pin_dir)?.is_empty() {
        if let Ok((ifindex, _)) = host::link(iface) {
            Maps::open(pin_dir)?.remove_iface(ifindex)?;
        }
        return Ok(false);
    }
    for entry in std::fs::read_dir(pin_dir)? {
        let path = entry?.path();
        std::fs::remove_file(&path).with_context(|| format!("unpinning {}", path.display()))?;
    }
    let _ = std::fs::remove_dir(pin_dir);
    Ok(true)
}

/// Interfaces with a pinned link.
pub fn attached(pin_dir: &Path) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(pin_dir) else {
        return Ok(out);
    };
    for entry in rd {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if let Some(iface) = name.strip_prefix(LINK_PREFIX) {
            out.push(iface.to_string());
        }
    }
    out.sort();
    Ok(out)
}

pub fn program_info(pin_dir: &Path) -> Result<Option<ProgramInfo>> {
    let path = pin_dir.join(PROG_PIN);
    if !path.exists() {
        return Ok(None);
    }
    Ok(Some(
        ProgramInfo::from_pin(&path).context("reading the pinned program's info")?,
    ))
}

/// Where pass-through links live: beside the main pin directory, so that detaching director
/// does not take them along.
pub fn pass_dir(pin_dir: &Path) -> PathBuf {
    let mut d = pin_dir.as_os_str().to_owned();
    d.push("-pass");
    PathBuf::from(d)
}

/// The helper programs of director's object, each attached on its own (pinned beside
/// director's pins, so a lab's clean-up finds them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Helper {
    /// `director_pass`, for the far end of a veth pair.
    Pass,
    /// `director_turnaround`, the bench's ceiling: queries turned around, nothing answered.
    Turnaround,
    /// `director_decap`, for the servers behind `ipip` forwarding: the outer header of
    /// IPv4-in-IPv4 and IPv6-in-IPv6 removed, everything else passed.
    Decap,
}

impl Helper {
    fn program(self) -> &'static str {
        match self {
            Helper::Pass => "director_pass",
            Helper::Turnaround => "director_turnaround",
            Helper::Decap => "director_decap",
        }
    }
    /// The CLI command that attaches it, for messages.
    fn command(self) -> &'static str {
        match self {
            Helper::Pass => "veth-peer",
            Helper::Turnaround => "ceiling",
            Helper::Decap => "decap",
        }
    }
    fn what(self) -> &'static str {
        match self {
            Helper::Pass => "pass-through program",
            Helper::Turnaround => "turn-around program",
            Helper::Decap => "decapsulator",
        }
    }
    /// The link's pin in the pass directory. The decapsulator's is named apart, so that
    /// detaching it never takes a pass-through or ceiling link on the same interface along
    /// (and attaching it is not mistaken for one already there).
    fn link_name(self, iface: &str) -> String {
        match self {
            Helper::Pass | Helper::Turnaround => iface.to_string(),
            Helper::Decap => format!("{DECAP_PREFIX}{iface}"),
        }
    }
}

/// Prefix of a decapsulator's link pin (bpffs refuses names with a dot).
const DECAP_PREFIX: &str = "decap_";

/// Attaches the pass-through program to `iface` (the client end of a veth pair).
pub fn attach_pass(pin_dir: &Path, iface: &str) -> Result<()> {
    attach_helper(pin_dir, iface, Helper::Pass)
}

pub fn detach_pass(pin_dir: &Path, iface: &str) -> Result<()> {
    detach_helper(pin_dir, iface, Helper::Pass)
}

/// Attaches a helper program to `iface` in driver mode, its link pinned under
/// [`pass_dir`].
pub fn attach_helper(pin_dir: &Path, iface: &str, helper: Helper) -> Result<()> {
    attach_helper_mode(pin_dir, iface, helper, Mode::Native)
}

/// [`attach_helper`] in the given mode.
pub fn attach_helper_mode(pin_dir: &Path, iface: &str, helper: Helper, mode: Mode) -> Result<()> {
    check_iface(iface)?;
    require_privileges(helper.command())?;
    // Before anything is made: aya's own error for this names no interface.
    let name = std::ffi::CString::new(iface).context("an interface name with a NUL byte")?;
    // SAFETY: a C string that lives across the call.
    if unsafe { libc::if_nametoindex(name.as_ptr()) } == 0 {
        bail!("no interface named {iface} in this network namespace");
    }
    let dir = pass_dir(pin_dir);
    let made = !dir.exists();
    ensure_bpffs_dir(&dir)?;
    let r = WriteLock::take(&dir).and_then(|_lock| attach_helper_locked(&dir, iface, helper, mode));
    if r.is_err() && made {
        remove_pins(&dir);
    }
    r
}

fn attach_helper_locked(dir: &Path, iface: &str, helper: Helper, mode: Mode) -> Result<()> {
    let link_path = dir.join(helper.link_name(iface));
    if link_path.exists() {
        return Ok(());
    }
    // The object pins its maps by name when it loads. A helper uses none of them, so they
    // go into a directory of this process's own that is removed once the link is pinned:
    // nothing but links is left in `dir`, and no other process's maps are reused.
    let maps = MapPins(dir.join(format!("{HELPER_MAPS}{}", std::process::id())));
    std::fs::create_dir(&maps.0).with_context(|| format!("creating {}", maps.0.display()))?;
    let mut ebpf = open_object(&maps.0, 0)?;
    let name = helper.program();
    let prog: &mut Xdp = ebpf
        .program_mut(name)
        .with_context(|| format!("the object has no program named {name}"))?
        .try_into()?;
    prog.load()
        .with_context(|| format!("loading the {}", helper.what()))?;
    let flags = match mode {
        Mode::Native => XdpMode::Driver,
        Mode::Skb => XdpMode::Skb,
    };
    let id = prog.attach(iface, flags).with_context(|| {
        format!(
            "attaching the {} to {iface} in {mode:?} mode",
            helper.what()
        )
    })?;
    let link: FdLink = prog.take_link(id)?.try_into()?;
    link.pin(&link_path)
        .with_context(|| format!("pinning the link at {}", link_path.display()))?;
    Ok(())
}

/// Prefix of a helper attach's own map directory. bpffs refuses names with a dot, and with
/// the pid this is longer than an interface name can be (15 bytes), so never a link's.
const HELPER_MAPS: &str = "helper-maps-";

/// A directory of map pins removed on drop (on every path out of a helper's attach).
pub(super) struct MapPins(pub(super) PathBuf);

impl Drop for MapPins {
    fn drop(&mut self) {
        remove_pins(&self.0);
    }
}

/// Removes the helper's link from `iface`. When no helper link is left, the pass directory
/// goes too, with any map pins an older director-ctl left in it (it pinned the object's
/// maps there).
pub fn detach_helper(pin_dir: &Path, iface: &str, helper: Helper) -> Result<()> {
    check_iface(iface)?;
    require_privileges(helper.command())?;
    let dir = pass_dir(pin_dir);
    let link_path = dir.join(helper.link_name(iface));
    if !link_path.exists() {
        bail!("no {} on {iface}", helper.what());
    }
    let _lock = WriteLock::take(&dir)?;
    drop(
        PinnedLink::from_pin(&link_path)
            .with_context(|| format!("opening {}", link_path.display()))?
            .unpin()
            .context("unpinning the link")?,
    );
    let maps = object_map_names()?;
    let mut links = 0;
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if maps.contains(&name) {
            let path = entry.path();
            std::fs::remove_file(&path).with_context(|| format!("unpinning {}", path.display()))?;
        } else if !name.starts_with(HELPER_MAPS) {
            links += 1;
        }
    }
    if links == 0 {
        // Fails harmlessly if another helper's attach is making its map directory now.
        let _ = std::fs::remove_dir(&dir);
    }
    Ok(())
}

/// The names of the maps in director's object (what a load pins).
pub(super) fn object_map_names() -> Result<Vec<String>> {
    let obj = aya_obj::Object::parse(EBPF_OBJECT).context("reading the XDP object")?;
    Ok(obj.maps.keys().cloned().collect())
}
