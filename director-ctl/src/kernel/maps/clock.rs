//! The one clock of `maps` that other modules read too (steering's flow ages); in a file
//! of its own so that `maps` re-exports it from a file that imports no sibling.

/// CLOCK_MONOTONIC in ns: one clock for every process that flips `DIR_FRONT`, and the one
/// the kernel stamps flows with.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
