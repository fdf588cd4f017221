//! The sampled uses of decisions (`DIR_DEMAND_RING`, a BPF ring buffer the program writes
//! one `demand::Sample` to per sampled answer or new flow), drained without blocking; a
//! caller that wants to sleep until samples come waits on its file descriptor.

use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use aya::maps::{MapData, RingBuf};
use director_common::demand::{Sample, MAP_DEMAND_RING};

use super::pins::{check_layout, open};

pub struct DemandRing {
    ring: RingBuf<MapData>,
}

impl DemandRing {
    /// The pinned ring of the pin set in `pin_dir`. One reader at a time: two would each
    /// take a share of the samples.
    pub fn open(pin_dir: &Path) -> Result<DemandRing> {
        check_layout(pin_dir)?;
        Ok(DemandRing {
            ring: open(pin_dir, MAP_DEMAND_RING)?,
        })
    }

    /// Up to `max` samples, oldest first; what is not taken stays for the next call. A
    /// record of another size (not this build's layout) is skipped.
    pub fn drain(&mut self, max: usize) -> Vec<Sample> {
        let mut out = Vec::new();
        while out.len() < max {
            let Some(item) = self.ring.next() else {
                break;
            };
            if item.len() == size_of::<Sample>() {
                // SAFETY: `Sample` is plain data of exactly this many bytes; the ring's
                // record may be unaligned for it, hence the unaligned read.
                out.push(unsafe { std::ptr::read_unaligned(item.as_ptr().cast::<Sample>()) });
            }
        }
        out
    }

    /// Waits until the ring has a sample or `timeout` passes; whether one is there.
    /// Returns at once if samples are already waiting.
    pub fn wait(&mut self, timeout: Duration) -> Result<bool> {
        let mut pfd = libc::pollfd {
            fd: self.ring.as_fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd for the duration of the call.
        let r = unsafe { libc::poll(&mut pfd, 1, ms) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                return Ok(false);
            }
            return Err(e.into());
        }
        Ok(r > 0 && pfd.revents & libc::POLLIN != 0)
    }
}
