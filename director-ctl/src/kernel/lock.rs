//! One writer at a time: an exclusive `flock` on the pin directory itself.
//!
//! Every command that changes the pinned maps reads them first (a free id, the routes around
//! a prefix, the servers that are down) and writes what it decided; two such commands at
//! once could both take the same free id. Each holds a [`WriteLock`] from its first read to
//! its last write. The lock is on the directory because bpffs holds only pins and
//! directories (a regular lock file cannot be created there), and a directory can be
//! `flock`ed like any file: no file to create, clean up or put elsewhere, and the kernel
//! drops the lock when the holder exits, however it exits. Readers (`list`, `stats`,
//! `status`) take no lock: every map write is whole, so they see one state or the next.

use std::fs::File;
use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use anyhow::{bail, Context, Result};

/// Held while alive; dropping it (or exiting) releases the lock.
#[derive(Debug)]
pub struct WriteLock {
    _dir: File,
}

impl WriteLock {
    /// Waits for the pin directory's write lock. `dir` must exist (a command that writes
    /// needs the maps pinned in it anyway).
    pub fn take(dir: &Path) -> Result<WriteLock> {
        // `detach` removes the directory when it detaches the last interface, and `attach`
        // may make a new one: a lock won on a directory that is no longer the one at `dir`
        // guards nothing, so take it again on the current one.
        for _ in 0..10 {
            let f = open_dir(dir)?;
            flock(&f, dir)?;
            let held = f.metadata().context("reading the locked directory")?;
            match std::fs::metadata(dir) {
                Ok(now) if now.dev() == held.dev() && now.ino() == held.ino() => {
                    return Ok(WriteLock { _dir: f });
                }
                Ok(_) => continue,
                Err(e) if e.kind() == ErrorKind::NotFound => bail!(not_attached(dir)),
                Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
            }
        }
        bail!(
            "{} was replaced ten times while waiting for its write lock",
            dir.display()
        )
    }
}

fn not_attached(dir: &Path) -> String {
    format!(
        "nothing is attached: {} does not exist (run `director-ctl attach --iface IF` first)",
        dir.display()
    )
}

fn open_dir(dir: &Path) -> Result<File> {
    match File::open(dir) {
        Ok(f) => Ok(f),
        Err(e) if e.kind() == ErrorKind::NotFound => bail!(not_attached(dir)),
        Err(e) => Err(e).with_context(|| format!("opening {} to lock it", dir.display())),
    }
}

fn flock(f: &File, dir: &Path) -> Result<()> {
    loop {
        // Blocks until the holder is done; a holder that dies releases it.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != ErrorKind::Interrupted {
            return Err(e).with_context(|| format!("locking {}", dir.display()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lock excludes a second holder (another open of the same directory, as another
    /// process makes) until the first is dropped.
    #[test]
    fn a_second_writer_waits_for_the_first() {
        let dir = std::env::temp_dir().join(format!("director-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let first = WriteLock::take(&dir).unwrap();
        let other = File::open(&dir).unwrap();
        let busy = unsafe { libc::flock(other.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        assert_eq!(
            busy, -1,
            "a second lock was granted while the first is held"
        );
        drop(first);
        let free = unsafe { libc::flock(other.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        assert_eq!(free, 0, "the lock was not released on drop");
        drop(other);
        let gone = dir.join("missing");
        let e = WriteLock::take(&gone).unwrap_err().to_string();
        assert!(e.contains("nothing is attached"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
