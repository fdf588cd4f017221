//! `DIR_DEC16`, the IPv4 /16 front of the decision trie (see `director_common::maps`),
//! memory-mapped: its slots are read and written in place, one word each, with no
//! syscall. `Maps` clears a slot before any trie write that touches its /16 and sets it
//! only from the trie's own value after the writes.

use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;
use std::sync::atomic::{fence, AtomicU64, Ordering};

use anyhow::{bail, Context, Result};
use aya::maps::MapData;
use director_common::maps::{dec16_index, dec16_range, DEC16_LANES, DEC16_SLOTS, MAP_DEC16};
use ipnet::IpNet;

pub struct Dec16Mmap {
    words: *const AtomicU64,
    len: usize,
    /// One bit per slot cleared (or about to be) by this process since the slot was last
    /// set from a table: the only slots an update can have changed.
    touched: Vec<u64>,
    /// Keeps the map alive as long as the mapping (the mapping would too; this is explicit).
    _map: MapData,
}

// SAFETY: the mapping is shared memory read and written only through atomics.
unsafe impl Send for Dec16Mmap {}
unsafe impl Sync for Dec16Mmap {}

impl Dec16Mmap {
    pub fn open(dir: &Path) -> Result<Dec16Mmap> {
        let map = super::pins::open_pinned(dir, MAP_DEC16)?;
        let path = dir.join(MAP_DEC16);
        let len = (DEC16_LANES * DEC16_SLOTS) as usize;
        // The mapping below is sized from this build's layout: the pinned map must have it.
        let info = map
            .info()
            .with_context(|| format!("reading {}", path.display()))?;
        if info.value_size() != 8 || info.max_entries() as usize != len {
            bail!("{} has an unexpected layout", path.display());
        }
        // SAFETY: a shared read-write mapping of an mmapable array of `len` u64 values;
        // the kernel keeps the memory while the mapping exists.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len * 8,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                map.fd().as_fd().as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("mapping {} into memory", path.display()));
        }
        Ok(Dec16Mmap {
            words: p as *const AtomicU64,
            len,
            touched: vec![0; len / 64],
            _map: map,
        })
    }

    fn slot(&self, i: u32) -> &AtomicU64 {
        let i = i as usize;
        assert!(i < self.len, "DIR_DEC16 slot {i} out of range");
        // SAFETY: in range of the mapping, which lives as long as `self`.
        unsafe { &*self.words.add(i) }
    }

    /// The word in `service`'s slot for `net16` (0 where the service has no lane).
    pub fn get(&self, service: u32, net16: u32) -> u64 {
        dec16_index(service, net16).map_or(0, |i| self.slot(i).load(Ordering::Acquire))
    }

    pub fn set(&self, service: u32, net16: u32, word: u64) {
        if let Some(i) = dec16_index(service, net16) {
            self.slot(i).store(word, Ordering::Release);
        }
    }

    /// Clears the slots of the /16s an entry of `service` for `net` touches, before the
    /// entry is written or deleted: from then on queries there ask the trie.
    pub fn clear(&mut self, service: u32, net: &IpNet) {
        let IpNet::V4(n) = net else { return };
        if dec16_index(service, 0).is_none() {
            return;
        }
        for net16 in dec16_range(u32::from(n.network()), n.prefix_len()) {
            if let Some(i) = dec16_index(service, net16) {
                self.touched[i as usize / 64] |= 1 << (i % 64);
                let s = self.slot(i);
                if s.load(Ordering::Relaxed) != 0 {
                    s.store(0, Ordering::Release);
                }
            }
        }
    }

    /// The /16s of `service` cleared since its slots were last set, forgotten as they are
    /// returned.
    pub fn take_touched(&mut self, service: u32) -> Vec<u32> {
        let Some(base) = dec16_index(service, 0) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let words = base as usize / 64..(base + DEC16_SLOTS) as usize / 64;
        for (w, bits) in self.touched[words].iter_mut().enumerate() {
            let mut b = std::mem::take(bits);
            while b != 0 {
                out.push((w * 64) as u32 + b.trailing_zeros());
                b &= b - 1;
            }
        }
        out
    }

    /// Orders the clears before the trie writes that follow (syscalls).
    pub fn cleared(&self) {
        fence(Ordering::SeqCst);
    }
}

impl Drop for Dec16Mmap {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `open`, unmapped once.
        unsafe { libc::munmap(self.words as *mut libc::c_void, self.len * 8) };
    }
}
