//! The bpf(2) calls aya has no API for, on raw bytes: batched lookups, updates and
//! deletes (a system call per chunk, where aya makes one or two per element), and one
//! element update for when the kernel takes no batches. The unsafe code of the table
//! writes is kept here, under safe functions the table files call.

use anyhow::{Context, Result};
use aya::maps::MapData;

/// One BPF_MAP_UPDATE_ELEM (any flags: insert or replace).
pub(super) fn update_one(map: &MapData, key: &[u8], value: &[u8]) -> std::io::Result<()> {
    use std::os::fd::{AsFd, AsRawFd};
    /// The map-element member of `union bpf_attr`.
    #[repr(C)]
    struct ElemAttr {
        map_fd: u32,
        _pad: u32,
        key: u64,
        value: u64,
        flags: u64,
    }
    let mut attr = ElemAttr {
        map_fd: map.fd().as_fd().as_raw_fd() as u32,
        _pad: 0,
        key: key.as_ptr() as u64,
        value: value.as_ptr() as u64,
        flags: 0,
    };
    // SAFETY: key and value hold one element of the map's key and value sizes and
    // outlive the call.
    unsafe { sys_bpf(BPF_MAP_UPDATE_ELEM, &mut attr) }
}

/// bpf(2) with `attr`, a prefix of `union bpf_attr` for `cmd`.
///
/// # Safety
/// Every pointer in `attr` must be valid for what `cmd` reads and writes through it.
unsafe fn sys_bpf<A>(cmd: libc::c_long, attr: &mut A) -> std::io::Result<()> {
    // SAFETY: attr is `size_of::<A>()` bytes the kernel may read and write back; the
    // pointers in it are the caller's to vouch for.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *mut A, size_of::<A>()) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The bytes of a plain-old-data value (map keys and values are `#[repr(C)]`).
pub(super) fn pod_bytes<T: Copy>(v: &T) -> &[u8] {
    // SAFETY: T is a repr(C) map key or value without padding bytes that could be
    // uninitialised (the layouts spell their padding out), read as bytes for its size.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }
}

const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
pub(super) const BPF_MAP_UPDATE_BATCH: libc::c_long = 26;
const BPF_MAP_DELETE_BATCH: libc::c_long = 27;

/// Deletes keys (all present) in batches; false when the kernel takes no batch (then
/// nothing was deleted).
pub(super) fn delete_batched<K: Copy>(map: &MapData, keys: &[K]) -> Result<bool> {
    for (i, chunk) in keys.chunks(4096).enumerate() {
        let bytes: Vec<u8> = chunk.iter().flat_map(|k| pod_bytes(k).to_vec()).collect();
        match batch(BPF_MAP_DELETE_BATCH, map, &bytes, None, chunk.len() as u32) {
            Ok(()) => {}
            // Only the first call can find batches unsupported: nothing is deleted yet.
            Err(e) if i == 0 && batch_unsupported(&e) => return Ok(false),
            Err(e) => return Err(e).context("deleting decisions"),
        }
    }
    Ok(true)
}

/// The `batch` member of `union bpf_attr`, for the BPF_MAP_*_BATCH commands.
#[repr(C)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// A batch command (`cmd`) over `count` keys (and values) laid out back to back.
pub(super) fn batch(
    cmd: libc::c_long,
    map: &MapData,
    keys: &[u8],
    values: Option<&[u8]>,
    count: u32,
) -> std::io::Result<()> {
    use std::os::fd::{AsFd, AsRawFd};
    let mut attr = BatchAttr {
        in_batch: 0,
        out_batch: 0,
        keys: keys.as_ptr() as u64,
        values: values.map_or(0, |v| v.as_ptr() as u64),
        count,
        map_fd: map.fd().as_fd().as_raw_fd() as u32,
        elem_flags: 0,
        flags: 0,
    };
    // SAFETY: keys and values hold `count` elements of the map's key and value sizes and
    // outlive the call.
    unsafe { sys_bpf(cmd, &mut attr) }?;
    if attr.count != count {
        return Err(std::io::Error::other(format!(
            "the kernel took {} of {count} decisions",
            attr.count
        )));
    }
    Ok(())
}

/// The sum of every entry of a per-CPU array of `u64` with `len` entries over all CPUs,
/// read with BPF_MAP_LOOKUP_BATCH.
pub(super) fn per_cpu_total(map: &MapData, len: u32) -> std::io::Result<u64> {
    let mut total = 0u64;
    per_cpu_each(map, len, |_, n| total = total.wrapping_add(n))?;
    Ok(total)
}

/// Every entry of a per-CPU array of `u64` with `len` entries, summed over CPUs and handed
/// to `f` with its index, in the order read, with BPF_MAP_LOOKUP_BATCH (a system call per
/// 1024 entries).
pub(super) fn per_cpu_each(
    map: &MapData,
    len: u32,
    mut f: impl FnMut(u32, u64),
) -> std::io::Result<()> {
    use std::os::fd::{AsFd, AsRawFd};
    const CHUNK: u32 = 1024;
    let cpus = aya::util::nr_cpus().map_err(|(what, e)| std::io::Error::new(e.kind(), what))?;
    let mut keys = vec![0u32; CHUNK as usize];
    let mut values = vec![0u64; CHUNK as usize * cpus];
    let (mut cursor, mut next) = (0u32, 0u32);
    let mut seen = 0u32;
    while seen < len {
        let mut attr = BatchAttr {
            // The first call starts at the beginning (no batch position yet).
            in_batch: if seen == 0 {
                0
            } else {
                &mut cursor as *mut u32 as u64
            },
            out_batch: &mut next as *mut u32 as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count: CHUNK,
            map_fd: map.fd().as_fd().as_raw_fd() as u32,
            elem_flags: 0,
            flags: 0,
        };
        // SAFETY: keys and values have room for CHUNK keys and CHUNK values of `cpus`
        // 8-byte slots each (a per-CPU value of u64 per possible CPU), and the batch
        // positions are u32 for an array; all outlive the call.
        let r = unsafe { sys_bpf(BPF_MAP_LOOKUP_BATCH, &mut attr) };
        let got = attr.count.min(CHUNK) as usize;
        for (k, v) in keys[..got].iter().zip(values.chunks_exact(cpus)) {
            f(*k, v.iter().fold(0u64, |t, n| t.wrapping_add(*n)));
        }
        seen += got as u32;
        match r {
            Ok(()) => cursor = next,
            // The end of the array: the last entries came with it.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => break,
            Err(e) => return Err(e),
        }
        if got == 0 {
            break;
        }
    }
    Ok(())
}

/// Every key and value of `map`, read with BPF_MAP_LOOKUP_BATCH: a system call per
/// `CHUNK` entries, where an iterator makes two per entry (a restart's first sync and a
/// compaction read the whole table back). `None` where the kernel takes no batches for
/// it. Like any walk of a map, it must not race a writer (the caller holds the write
/// lock).
pub(super) fn read_batched<K: aya::Pod, V: aya::Pod>(
    map: &MapData,
) -> std::io::Result<Option<Vec<(K, V)>>> {
    use std::os::fd::{AsFd, AsRawFd};
    const CHUNK: usize = 8192;
    let (ks, vs) = (size_of::<K>(), size_of::<V>());
    let mut keys = vec![0u8; CHUNK * ks];
    let mut values = vec![0u8; CHUNK * vs];
    // Where the next call goes on from: the kernel writes its position to `next`.
    let (mut cursor, mut next) = (vec![0u8; ks], vec![0u8; ks]);
    let mut all = Vec::new();
    let mut first = true;
    loop {
        let mut attr = BatchAttr {
            in_batch: if first { 0 } else { cursor.as_mut_ptr() as u64 },
            out_batch: next.as_mut_ptr() as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count: CHUNK as u32,
            map_fd: map.fd().as_fd().as_raw_fd() as u32,
            elem_flags: 0,
            flags: 0,
        };
        // SAFETY: keys and values have room for CHUNK keys and values of the map's sizes
        // (the caller's K and V), the positions for one key; all outlive the call.
        let r = unsafe { sys_bpf(BPF_MAP_LOOKUP_BATCH, &mut attr) };
        let got = (attr.count as usize).min(CHUNK);
        for i in 0..got {
            // SAFETY: the kernel wrote `got` keys and values back to back; K and V are
            // plain data of those sizes.
            all.push(unsafe {
                (
                    std::ptr::read_unaligned(keys[i * ks..].as_ptr().cast::<K>()),
                    std::ptr::read_unaligned(values[i * vs..].as_ptr().cast::<V>()),
                )
            });
        }
        match r {
            Ok(()) if got > 0 => {}
            // The end of the map: the last entries came with it.
            Ok(()) => return Ok(Some(all)),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(Some(all)),
            Err(e) if first && batch_unsupported(&e) => return Ok(None),
            Err(e) => return Err(e),
        }
        cursor.copy_from_slice(&next);
        first = false;
    }
}

/// Whether a batch call failed because the kernel or map takes no batches.
pub(super) fn batch_unsupported(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        // 524: the kernel's own ENOTSUPP, which bpf(2) lets through.
        Some(libc::EINVAL | libc::EOPNOTSUPP | libc::ENOSYS | 524)
    )
}
