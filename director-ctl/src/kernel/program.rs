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
use director_common::maps::PROGRAM;

use crate::EBPF_OBJECT;

const PROG_PIN: &str = "program";
const LINK_PREFIX: &str = "link_";

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
    EbpfLoader::new()
        .default_map_pin_directory(dir)
        .override_global(aya_log::LEVEL, &log_level, true)
        .load(EBPF_OBJECT)
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

fn verifier_error(e: aya::programs::ProgramError) -> anyhow::Error {
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
fn ensure_bpffs_dir(dir: &Path) -> Result<()> {
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

fn link_pin(pin_dir: &Path, iface: &str) -> PathBuf {
    pin_dir.join(format!("{LINK_PREFIX}{iface}"))
}

pub fn attach(pin_dir: &Path, iface: &str, mode: Mode, log_level: u8) -> Result<()> {
    if iface.is_empty() || iface.len() >= libc::IFNAMSIZ || iface.contains('/') {
        bail!("{iface:?} is not a valid interface name");
    }
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
    let link_path = link_pin(pin_dir, iface);
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
}

impl Helper {
    fn program(self) -> &'static str {
        match self {
            Helper::Pass => "director_pass",
            Helper::Turnaround => "director_turnaround",
        }
    }
    fn what(self) -> &'static str {
        match self {
            Helper::Pass => "pass-through program",
            Helper::Turnaround => "turn-around program",
        }
    }
}

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
    let dir = pass_dir(pin_dir);
    ensure_bpffs_dir(&dir)?;
    let link_path = dir.join(iface);
    if link_path.exists() {
        return Ok(());
    }
    let mut ebpf = open_object(&dir, 0)?;
    let name = helper.program();
    let prog: &mut Xdp = ebpf
        .program_mut(name)
        .with_context(|| format!("the object has no program named {name}"))?
        .try_into()?;
    prog.load()?;
    let id = prog
        .attach(iface, XdpMode::Driver)
        .with_context(|| format!("attaching to {iface}"))?;
    let link: FdLink = prog.take_link(id)?.try_into()?;
    link.pin(&link_path)?;
    Ok(())
}

pub fn detach_helper(pin_dir: &Path, iface: &str, helper: Helper) -> Result<()> {
    let dir = pass_dir(pin_dir);
    let link_path = dir.join(iface);
    if !link_path.exists() {
        bail!("no {} on {iface}", helper.what());
    }
    drop(PinnedLink::from_pin(&link_path)?.unpin()?);
    Ok(())
}
