//! bpffs pin directories of this process: named, removed, and swept when a killed process
//! left them behind.
//!
//! Every directory is `/sys/fs/bpf/<kind>-<pid>-<tag>`. The pid keeps test and bench
//! processes running side by side (other engineers' runs too) from sharing pins, and it is
//! how a sweep tells a directory whose owner died (no `Drop` ran) from one still in use.

use std::fmt::Display;
use std::fs;
use std::path::{Path, PathBuf};

/// Where bpffs is mounted on these machines.
const BPFFS: &str = "/sys/fs/bpf";

/// A pin directory of this process; what is pinned in it is removed on drop.
///
/// Only the name is reserved here: the loader creates the directory when it pins. Keep a
/// `PinDir` after the map and program descriptors that use it (declare it last in a struct),
/// so the pins go once nothing holds them open.
#[derive(Debug)]
pub struct PinDir(PathBuf);

impl PinDir {
    pub fn new(kind: &str, tag: impl Display) -> PinDir {
        PinDir(dir(&name(kind, tag)))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for PinDir {
    fn drop(&mut self) {
        remove(&self.0);
    }
}

/// `<kind>-<this process's pid>-<tag>`: the name of a pin directory, and of anything else a
/// test makes per process that a sweep should recognise (a lab's namespaces).
pub fn name(kind: &str, tag: impl Display) -> String {
    format!("{kind}-{}-{tag}", std::process::id())
}

/// The pin directory called `name`, for directories whose removal is arranged otherwise
/// (a lab removes its pins only after detaching).
pub fn dir(name: &str) -> PathBuf {
    Path::new(BPFFS).join(name)
}

/// Where director-ctl pins the pass-through program's links for `pin_dir` (its own rule).
pub use director_ctl::kernel::program::pass_dir;

/// Removes the pins in `dir`, then `dir` (bpffs removes a directory only once it is empty).
/// Best effort: cleanup runs in `Drop`, where a half-removed directory must not turn a
/// passing test into a panic.
pub fn remove(dir: &Path) {
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            let _ = fs::remove_file(entry.path());
        }
    }
    let _ = fs::remove_dir(dir);
}

/// Whether `name` is one of `kind`'s names (`<kind>-<pid>-...`) made by a process that no
/// longer exists. Also for other per-process names that follow the scheme (namespaces).
pub fn owner_is_gone(name: &str, kind: &str) -> bool {
    let Some(rest) = name.strip_prefix(kind).and_then(|r| r.strip_prefix('-')) else {
        return false;
    };
    let owner = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
    owner.is_some_and(|pid| {
        pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists()
    })
}

/// Removes `kind`'s pin directories whose owner is gone, so that killed runs do not leave
/// programs and maps pinned for good.
pub fn sweep_stale(kind: &str) {
    let Ok(entries) = fs::read_dir(BPFFS) else {
        return;
    };
    for entry in entries.flatten() {
        if owner_is_gone(&entry.file_name().to_string_lossy(), kind) {
            remove(&entry.path());
        }
    }
}
