//! Per-CPU counters: every module that counts bumps a slot the same way.

use aya_ebpf::maps::PerCpuArray;

/// Adds one to `map[key]` on this CPU; a key past the map's end is not counted.
#[inline(always)]
pub fn count(map: &PerCpuArray<u64>, key: u32) {
    if let Some(c) = map.get_ptr_mut(key) {
        // SAFETY: this CPU's slot, which no other program run touches meanwhile.
        unsafe { *c += 1 };
    }
}
