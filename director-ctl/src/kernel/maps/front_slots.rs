//! The program's front slots (`DIR_LOCAL_SLOTS`, `DIR_NAME_SLOTS`): direct-mapped copies
//! of `DIR_LOCAL` and `DIR_NAMES` that spare most queries a hash lookup, kept twice so
//! that one is rewritten while `DIR_FRONT` sends queries to the other.

use anyhow::{Context, Result};
use aya::maps::{Array, MapData};
use director_common::{
    maps::{
        FrontSwitch, LocalSlot, NameEntry, NameSlot, LOCAL_SLOTS, NAME_SLOTS, SLOT_OVERFLOW,
        SLOT_USED,
    },
    name,
};

use super::clock::monotonic_ns;
use super::syscall::{batch, batch_unsupported, pod_bytes, BPF_MAP_UPDATE_BATCH};
use super::Maps;

impl Maps {
    /// Brings the program's front slots (`DIR_LOCAL_SLOTS`, `DIR_NAME_SLOTS`) in line with
    /// the tables they front (`DIR_LOCAL`, `DIR_NAMES`) when they differ: the copies not in
    /// use are rewritten whole, then `DIR_FRONT` flips to them. An address or name added
    /// is answered once the flip is done; one removed is refused from then on. Queries
    /// read one copy or the other, never a slot being written: the copy rewritten was last
    /// read before the previous flip, at least `FRONT_GRACE` ago. Also makes sure every
    /// name's service has it in `DIR_SERVICE_NAMES` (maps pinned by an older build lack it).
    pub(super) fn sync_front(&mut self) -> Result<()> {
        let mut keys: Vec<[u8; 16]> = self
            .local
            .keys()
            .collect::<Result<_, _>>()
            .context("reading the local address table")?;
        keys.sort_unstable();
        let mut names: Vec<(u64, NameEntry)> = self
            .names
            .iter()
            .collect::<Result<_, _>>()
            .context("reading the name table")?;
        names.sort_unstable_by_key(|(h, _)| *h);
        for (_, e) in &names {
            let have = self
                .service_names
                .get(&e.service, 0)
                .context("reading the service names")?;
            if have != *e {
                self.service_names
                    .set(e.service, *e, 0)
                    .context("writing the service names")?;
            }
        }
        let want_local = local_slots(&keys);
        let want_names = name_slots(&names);
        let sw = self.front.get(&0, 0).context("reading the front switch")?;
        let active = sw.active & 1;
        if self.front_is(active, &want_local, &want_names)? {
            return Ok(());
        }
        let since = monotonic_ns().saturating_sub(sw.published_ns);
        if since < FRONT_GRACE.as_nanos() as u64 {
            std::thread::sleep(FRONT_GRACE - std::time::Duration::from_nanos(since));
        }
        let spare = 1 - active;
        write_copy(
            &self.batch_local_slots,
            &mut self.local_slots,
            spare * LOCAL_SLOTS,
            &want_local,
        )
        .context("writing the local address slots")?;
        write_copy(
            &self.batch_name_slots,
            &mut self.name_slots,
            spare * NAME_SLOTS,
            &want_names,
        )
        .context("writing the name slots")?;
        let flipped = FrontSwitch {
            active: spare,
            _pad: 0,
            published_ns: monotonic_ns(),
        };
        self.front
            .set(0, flipped, 0)
            .context("writing the front switch")
    }

    /// Whether copy `c` of the front slots holds exactly these.
    fn front_is(&self, c: u32, local: &[LocalSlot], names: &[NameSlot]) -> Result<bool> {
        Ok(copy_is(&self.local_slots, c * LOCAL_SLOTS, local)
            .context("reading the local address slots")?
            && copy_is(&self.name_slots, c * NAME_SLOTS, names)
                .context("reading the name slots")?)
    }
}

/// How long a copy of the front slots stays untouched after queries stop being sent to it:
/// programs run for microseconds, so none still reads it by then.
const FRONT_GRACE: std::time::Duration = std::time::Duration::from_millis(20);

/// The `DIR_LOCAL_SLOTS` copy for `keys` (sorted, so the same addresses always give the
/// same slots): each address in its slot, the first come keeping it; a slot claimed
/// again is marked so the program asks `DIR_LOCAL` for the others.
fn local_slots(keys: &[[u8; 16]]) -> Vec<LocalSlot> {
    let mut slots = vec![LocalSlot::default(); LOCAL_SLOTS as usize];
    for k in keys {
        let words = director_common::peers::local_words(k);
        let slot = &mut slots[director_common::peers::local_slot(words) as usize];
        if slot.flags & SLOT_USED == 0 {
            slot.key = words;
            slot.flags |= SLOT_USED;
        } else {
            slot.flags |= SLOT_OVERFLOW;
        }
    }
    slots
}

/// The `DIR_NAME_SLOTS` copy for `names` (sorted by hash): as `local_slots`.
fn name_slots(names: &[(u64, NameEntry)]) -> Vec<NameSlot> {
    let mut slots = vec![NameSlot::default(); NAME_SLOTS as usize];
    for (hash, e) in names {
        let slot = &mut slots[name::slot(*hash) as usize];
        if slot.flags & SLOT_USED == 0 {
            slot.hash = *hash;
            slot.service = e.service;
            slot.flags |= SLOT_USED;
        } else {
            slot.flags |= SLOT_OVERFLOW;
        }
    }
    slots
}

/// Whether an array holds `values` at consecutive indexes from `first`.
fn copy_is<T: Copy + PartialEq + aya::Pod>(
    map: &Array<MapData, T>,
    first: u32,
    values: &[T],
) -> Result<bool> {
    for (i, w) in values.iter().enumerate() {
        if map.get(&(first + i as u32), 0)? != *w {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Writes `values` at consecutive indexes of an array from `first`: one batch, or one by
/// one where the kernel takes no batch.
fn write_copy<T: Copy + aya::Pod>(
    batch_map: &MapData,
    map: &mut Array<MapData, T>,
    first: u32,
    values: &[T],
) -> Result<()> {
    let (mut k, mut v) = (Vec::new(), Vec::new());
    for (i, w) in values.iter().enumerate() {
        k.extend_from_slice(&(first + i as u32).to_ne_bytes());
        v.extend_from_slice(pod_bytes(w));
    }
    match batch(
        BPF_MAP_UPDATE_BATCH,
        batch_map,
        &k,
        Some(&v),
        values.len() as u32,
    ) {
        Ok(()) => Ok(()),
        Err(e) if batch_unsupported(&e) => {
            for (i, w) in values.iter().enumerate() {
                map.set(first + i as u32, *w, 0)?;
            }
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}
