//! Replacing the attached program with another build's without a gap in answers.
//!
//! Every interface director is attached to holds a pinned bpf_link. `BPF_LINK_UPDATE`
//! points a link at another program in one step: the next packet runs the new program, no
//! packet finds the interface without one. The new program is loaded against the pinned
//! maps (the loader reuses a map pinned under its name rather than making one), so it
//! reads and writes the very entries the old one did: decisions, counters, rate-limit
//! buckets, steered flows. That is only sound when both builds lay the maps out the same
//! way, so the new object's map definitions (type, key and value size, entries, flags)
//! are compared with the pinned maps' first, and any difference refuses the upgrade
//! before anything is loaded; `DIR_LAYOUT`'s size (`LAYOUT_VERSION`) is one of them.
//!
//! The update names the program each link is expected to run (`BPF_F_REPLACE`): a link
//! someone else changed meanwhile is refused by the kernel rather than overwritten. With
//! several interfaces each link is swapped in turn (microseconds apart), then the
//! program's pin is replaced by a rename, so a later `attach` uses the new build too. A
//! swap that fails puts the links already swapped back.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use aya::maps::MapInfo;
use aya::programs::{ProgramInfo, Xdp};
use aya_obj::maps::PinningType;
use director_common::maps::MAP_LAYOUT;

use super::program::{
    self, attached, link_pin, open_object_from, program_mut, verifier_error, LINK_PREFIX, PROG_PIN,
};
use super::WriteLock;
use crate::EBPF_OBJECT;

/// Where the new program is pinned until every link runs it; renamed over `program` then.
/// bpffs names take no dot, and no map or link pin starts with this.
const NEXT_PIN: &str = "program-next";

/// What an upgrade did.
#[derive(Debug, Clone)]
pub struct Upgraded {
    /// The interfaces whose links now run the new program.
    pub interfaces: Vec<String>,
    /// The program each of them ran before (in `interfaces`' order).
    pub old_programs: Vec<u32>,
    pub program: u32,
    /// The new program's tag (a hash of its instructions: equal tags, equal code).
    pub tag: u64,
    pub old_tag: Option<u64>,
    /// Pinned maps the new program took over.
    pub maps: usize,
    /// Loading and verifying the new program (answers go on meanwhile).
    pub load_ms: f64,
    /// From the first link's swap to the last's.
    pub swap_us: f64,
}

/// Swaps every interface's link to a newly loaded program, from `object` (a file) or this
/// binary's own object, reusing the pinned maps. Refused, with nothing changed, when the
/// object's maps differ from the pinned ones or nothing is attached.
pub fn upgrade(pin_dir: &Path, object: Option<&Path>, log_level: u8) -> Result<Upgraded> {
    program::require_privileges("upgrade")?;
    let bytes: Cow<'_, [u8]> = match object {
        Some(path) => {
            Cow::Owned(std::fs::read(path).with_context(|| format!("reading {}", path.display()))?)
        }
        None => Cow::Borrowed(EBPF_OBJECT),
    };
    // No attach, detach or other upgrade between the comparison and the last swap.
    let _lock = WriteLock::take(pin_dir)?;
    let interfaces = attached(pin_dir)?;
    if interfaces.is_empty() {
        bail!(
            "director is not attached to any interface in {} (attach it: there is nothing \
             to upgrade)",
            pin_dir.display()
        );
    }
    let wanted = object_maps(&bytes)?;
    let pinned = pinned_maps(pin_dir)?;
    let diff = differences(&wanted, &pinned);
    if !diff.is_empty() {
        bail!(
            "refusing to upgrade: the new program's maps are not the pinned ones ({}). It \
             could not read what the running program's maps hold. Upgrade through detach \
             and attach instead: detach director from every interface ({}), attach the new \
             build and fill its maps again (`run` does on start); queries are not answered \
             in between",
            diff.join("; "),
            interfaces.join(", ")
        );
    }
    let old_tag = program::program_info(pin_dir)?.map(|i| i.tag());

    let t = Instant::now();
    let mut ebpf = open_object_from(pin_dir, log_level, &bytes)?;
    let prog: &mut Xdp = program_mut(&mut ebpf)?;
    prog.load()
        .map_err(verifier_error)
        .context("the kernel refused the new XDP program (nothing was changed)")?;
    let load_ms = t.elapsed().as_secs_f64() * 1e3;
    let info = prog.info().context("reading the new program's info")?;
    check_maps_reused(&info, &pinned)?;
    let next = pin_dir.join(NEXT_PIN);
    // A pin an interrupted upgrade left.
    let _ = std::fs::remove_file(&next);
    prog.pin(&next)
        .with_context(|| format!("pinning the new program at {}", next.display()))?;
    let new_fd = prog.fd().context("the new program's descriptor")?.as_fd();

    let t = Instant::now();
    let swapped = match swap_all(pin_dir, &interfaces, new_fd) {
        Ok(s) => s,
        Err(e) => {
            let _ = std::fs::remove_file(&next);
            return Err(e);
        }
    };
    let swap_us = t.elapsed().as_secs_f64() * 1e6;
    let current = pin_dir.join(PROG_PIN);
    std::fs::rename(&next, &current).with_context(|| {
        format!(
            "every link runs the new program, but replacing the pin {} failed (a later \
             attach would load the old one: run upgrade again)",
            current.display()
        )
    })?;
    Ok(Upgraded {
        interfaces,
        old_programs: swapped.into_iter().map(|s| s.old_id).collect(),
        program: info.id(),
        tag: info.tag(),
        old_tag,
        maps: pinned.len(),
        load_ms,
        swap_us,
    })
}

/// One interface's link, swapped: what it ran before, to put it back.
struct Swapped {
    link: OwnedFd,
    old: OwnedFd,
    old_id: u32,
}

/// Points every interface's link at `new`; on a failure puts the ones done back.
fn swap_all(pin_dir: &Path, interfaces: &[String], new: BorrowedFd<'_>) -> Result<Vec<Swapped>> {
    let mut done: Vec<Swapped> = Vec::with_capacity(interfaces.len());
    for iface in interfaces {
        match swap(pin_dir, iface, new) {
            Ok(s) => done.push(s),
            Err(e) => {
                let mut back = Vec::new();
                for s in &done {
                    if let Err(b) = link_update(s.link.as_fd(), s.old.as_fd(), new) {
                        back.push(format!("{b}"));
                    }
                }
                let undone = if back.is_empty() {
                    format!(
                        "the {} interface(s) swapped before it run the old program again",
                        done.len()
                    )
                } else {
                    format!(
                        "putting the old program back failed too: {}",
                        back.join("; ")
                    )
                };
                return Err(e.context(undone));
            }
        }
    }
    Ok(done)
}

fn swap(pin_dir: &Path, iface: &str, new: BorrowedFd<'_>) -> Result<Swapped> {
    let path = link_pin(pin_dir, iface);
    let link = obj_get(&path).with_context(|| format!("opening {}", path.display()))?;
    let old_id = link_program(link.as_fd())
        .with_context(|| format!("reading the link {}", path.display()))?;
    let old = prog_fd_by_id(old_id)
        .with_context(|| format!("opening program {old_id}, which {iface}'s link runs"))?;
    link_update(link.as_fd(), new, old.as_fd()).with_context(|| {
        format!(
            "swapping the program on {iface} (BPF_LINK_UPDATE of {})",
            path.display()
        )
    })?;
    Ok(Swapped { link, old, old_id })
}

/// A map's definition as the kernel holds it, what the loader would make of the object's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct MapDef {
    pub(super) map_type: u32,
    pub(super) key_size: u32,
    pub(super) value_size: u32,
    pub(super) max_entries: u32,
    pub(super) flags: u32,
}

const BPF_MAP_TYPE_RINGBUF: u32 = 27;

/// The object's maps that are pinned by name, as the loader would create them.
fn object_maps(object: &[u8]) -> Result<BTreeMap<String, MapDef>> {
    let obj = aya_obj::Object::parse(object).context("reading the new XDP object")?;
    if !obj.programs.contains_key(director_common::maps::PROGRAM) {
        bail!("the object has no program named director");
    }
    let page = u32::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    Ok(obj
        .maps
        .iter()
        .filter(|(_, m)| m.pinning() == PinningType::ByName)
        .map(|(name, m)| {
            let mut def = MapDef {
                map_type: m.map_type(),
                key_size: m.key_size(),
                value_size: m.value_size(),
                max_entries: m.max_entries(),
                flags: m.map_flags(),
            };
            // The loader's own adjustments (as libbpf's): a ring buffer has no value and
            // a power-of-two number of pages.
            if def.map_type == BPF_MAP_TYPE_RINGBUF {
                def.value_size = 0;
                def.max_entries = ring_size(def.max_entries, page);
            }
            (name.clone(), def)
        })
        .collect())
}

fn ring_size(bytes: u32, page: u32) -> u32 {
    if bytes == 0 || page == 0 {
        return bytes;
    }
    page * bytes.div_ceil(page).next_power_of_two()
}

/// The maps pinned in `dir`, by name, with their ids.
fn pinned_maps(dir: &Path) -> Result<BTreeMap<String, (MapDef, u32)>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == PROG_PIN || name == NEXT_PIN || name.starts_with(LINK_PREFIX) {
            continue;
        }
        let path = entry.path();
        let info = MapInfo::from_pin(&path)
            .with_context(|| format!("reading {} (a pin that is not a map?)", path.display()))?;
        let def = MapDef {
            map_type: info.map_type().map(|t| t as u32).unwrap_or(u32::MAX),
            key_size: info.key_size(),
            value_size: info.value_size(),
            max_entries: info.max_entries(),
            flags: info.map_flags(),
        };
        out.insert(name, (def, info.id()));
    }
    Ok(out)
}

/// Each way the object's maps differ from the pinned ones, for the operator.
pub(super) fn differences(
    wanted: &BTreeMap<String, MapDef>,
    pinned: &BTreeMap<String, (MapDef, u32)>,
) -> Vec<String> {
    let mut out = Vec::new();
    // The layout stamp first: it says what the rest will.
    let layouts = (wanted.get(MAP_LAYOUT), pinned.get(MAP_LAYOUT));
    if let (Some(w), Some((have, _))) = layouts {
        if w.max_entries != have.max_entries {
            out.push(format!(
                "layout {} pinned, layout {} in the new program ({MAP_LAYOUT})",
                have.max_entries, w.max_entries
            ));
        }
    }
    for (name, w) in wanted {
        let Some((have, _)) = pinned.get(name) else {
            out.push(format!("{name} is new"));
            continue;
        };
        if name == MAP_LAYOUT && w.max_entries != have.max_entries {
            continue;
        }
        let fields = [
            ("type", have.map_type, w.map_type),
            ("key size", have.key_size, w.key_size),
            ("value size", have.value_size, w.value_size),
            ("entries", have.max_entries, w.max_entries),
            ("flags", have.flags, w.flags),
        ];
        for (what, h, n) in fields {
            if h != n {
                out.push(format!("{name}: {what} {h} pinned, {n} in the new program"));
            }
        }
    }
    for name in pinned.keys() {
        if !wanted.contains_key(name) {
            out.push(format!("{name} is pinned but not in the new program"));
        }
    }
    out
}

/// The loader reuses a pin by name; this makes sure no map the new program uses is a new
/// one under a pinned map's name (the kernel keeps 15 bytes of a name).
fn check_maps_reused(info: &ProgramInfo, pinned: &BTreeMap<String, (MapDef, u32)>) -> Result<()> {
    let ids: BTreeSet<u32> = pinned.values().map(|(_, id)| *id).collect();
    let names: BTreeSet<&[u8]> = pinned
        .keys()
        .map(|n| &n.as_bytes()[..n.len().min(15)])
        .collect();
    let used = info
        .map_ids()
        .context("reading the new program's maps")?
        .unwrap_or_default();
    for id in used.into_iter().filter(|id| !ids.contains(id)) {
        let map = MapInfo::from_id(id).with_context(|| format!("reading map {id}"))?;
        if names.contains(map.name()) {
            bail!(
                "the new program made its own map {} instead of using the pinned one \
                 (nothing was changed)",
                String::from_utf8_lossy(map.name())
            );
        }
    }
    Ok(())
}

// The bpf(2) commands aya has no API for on a pinned link: its program, and the swap
// that names the program it expects to replace.
const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
const BPF_OBJ_GET: libc::c_long = 7;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_LINK_UPDATE: libc::c_long = 29;
/// `BPF_LINK_UPDATE` only if the link still runs `old_prog_fd`'s program.
const BPF_F_REPLACE: u32 = 1 << 2;

/// bpf(2) with `attr` (a prefix of `union bpf_attr` for `cmd`); the returned descriptor or 0.
///
/// # Safety
/// Every pointer in `attr` must be valid for what `cmd` reads and writes through it.
unsafe fn sys_bpf<A>(cmd: libc::c_long, attr: &mut A) -> std::io::Result<i64> {
    // SAFETY: attr is `size_of::<A>()` bytes the kernel may read and write back; the
    // pointers in it are the caller's to vouch for.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *mut A, size_of::<A>()) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(r)
}

/// A descriptor the kernel just returned.
fn owned(fd: i64) -> std::io::Result<OwnedFd> {
    let fd = i32::try_from(fd).map_err(|_| std::io::Error::other("descriptor out of range"))?;
    // SAFETY: bpf(2) returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn obj_get(path: &Path) -> std::io::Result<OwnedFd> {
    #[repr(C)]
    struct ObjAttr {
        pathname: u64,
        bpf_fd: u32,
        file_flags: u32,
    }
    let c = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| std::io::Error::other("a path with a NUL byte"))?;
    let mut attr = ObjAttr {
        pathname: c.as_ptr() as u64,
        bpf_fd: 0,
        file_flags: 0,
    };
    // SAFETY: the path is a C string that outlives the call.
    owned(unsafe { sys_bpf(BPF_OBJ_GET, &mut attr) }?)
}

fn prog_fd_by_id(id: u32) -> std::io::Result<OwnedFd> {
    #[repr(C)]
    struct IdAttr {
        id: u32,
        next_id: u32,
        open_flags: u32,
    }
    let mut attr = IdAttr {
        id,
        next_id: 0,
        open_flags: 0,
    };
    // SAFETY: no pointers.
    owned(unsafe { sys_bpf(BPF_PROG_GET_FD_BY_ID, &mut attr) }?)
}

/// The id of the program `link` runs (`struct bpf_link_info`'s third word).
fn link_program(link: BorrowedFd<'_>) -> std::io::Result<u32> {
    #[repr(C)]
    struct InfoAttr {
        bpf_fd: u32,
        info_len: u32,
        info: u64,
    }
    // type, id, prog_id, then the union per link type (left zero: the kernel fills what
    // fits in the length given).
    let mut info = [0u32; 16];
    let mut attr = InfoAttr {
        bpf_fd: link.as_raw_fd() as u32,
        info_len: size_of_val(&info) as u32,
        info: info.as_mut_ptr() as u64,
    };
    // SAFETY: info has info_len writable bytes and outlives the call.
    unsafe { sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr) }?;
    Ok(info[2])
}

fn link_update(
    link: BorrowedFd<'_>,
    new: BorrowedFd<'_>,
    expected: BorrowedFd<'_>,
) -> std::io::Result<()> {
    #[repr(C)]
    struct UpdateAttr {
        link_fd: u32,
        new_prog_fd: u32,
        flags: u32,
        old_prog_fd: u32,
    }
    let mut attr = UpdateAttr {
        link_fd: link.as_raw_fd() as u32,
        new_prog_fd: new.as_raw_fd() as u32,
        flags: BPF_F_REPLACE,
        old_prog_fd: expected.as_raw_fd() as u32,
    };
    // SAFETY: no pointers.
    unsafe { sys_bpf(BPF_LINK_UPDATE, &mut attr) }.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(max_entries: u32, value_size: u32) -> MapDef {
        MapDef {
            map_type: 2,
            key_size: 4,
            value_size,
            max_entries,
            flags: 0,
        }
    }

    #[test]
    fn equal_maps_make_no_difference_and_each_difference_is_named() {
        let wanted: BTreeMap<String, MapDef> = [
            (MAP_LAYOUT.to_string(), def(2, 1)),
            ("DIR_A".to_string(), def(10, 8)),
        ]
        .into();
        let same: BTreeMap<String, (MapDef, u32)> =
            wanted.iter().map(|(n, d)| (n.clone(), (*d, 7))).collect();
        assert!(differences(&wanted, &same).is_empty());

        let mut other = same.clone();
        other.insert(MAP_LAYOUT.to_string(), (def(3, 1), 1));
        other.insert("DIR_A".to_string(), (def(10, 16), 2));
        other.insert("DIR_OLD".to_string(), (def(1, 1), 3));
        let d = differences(&wanted, &other);
        assert_eq!(
            d,
            [
                "layout 3 pinned, layout 2 in the new program (DIR_LAYOUT)",
                "DIR_A: value size 16 pinned, 8 in the new program",
                "DIR_OLD is pinned but not in the new program",
            ],
            "{d:?}"
        );
        let mut fewer = same;
        fewer.remove("DIR_A");
        assert_eq!(differences(&wanted, &fewer), ["DIR_A is new"]);
    }

    #[test]
    fn ring_buffers_are_sized_as_the_loader_sizes_them() {
        assert_eq!(ring_size(4096, 4096), 4096);
        assert_eq!(ring_size(5000, 4096), 8192);
        assert_eq!(ring_size(3 * 4096, 4096), 4 * 4096);
        assert_eq!(ring_size(0, 4096), 0);
    }

    /// This build's own object, compared with itself as the loader would pin it, differs
    /// in nothing (the comparison's reading of an object agrees with its reading of pins).
    #[test]
    fn this_build_matches_itself() {
        let maps = object_maps(EBPF_OBJECT).unwrap();
        assert!(maps.contains_key(MAP_LAYOUT));
        assert!(
            !maps.contains_key("DIR_DEC_CACHE"),
            "unpinned maps are not compared"
        );
        let pinned = maps.iter().map(|(n, d)| (n.clone(), (*d, 0))).collect();
        assert!(differences(&maps, &pinned).is_empty());
    }
}
