//! Opening director's pinned maps by name. Every map the kernel code touches comes through
//! here, so a missing pin is always explained the same way: nothing attached, or pins left
//! by another version of director (whose program would misread this build's entries).

use std::path::Path;

use anyhow::{bail, Context, Result};
use aya::maps::{Map, MapData, MapError};
use director_common::maps::{LAYOUT_VERSION, MAP_LAYOUT, MAP_NAMES};

pub(super) fn open<T: TryFrom<Map, Error = MapError>>(dir: &Path, name: &str) -> Result<T> {
    let data = open_pinned(dir, name)?;
    let path = dir.join(name);
    let map = Map::from_map_data(data).with_context(|| format!("reading {}", path.display()))?;
    T::try_from(map).with_context(|| format!("{} has an unexpected type", path.display()))
}

/// The pinned map `name`, untyped; a missing pin is named as "nothing attached" or as a
/// pin set of another version.
pub(super) fn open_pinned(dir: &Path, name: &str) -> Result<MapData> {
    let path = dir.join(name);
    if !path.exists() {
        // Other pins without this one: a build of director that did not have the map
        // (an upgrade over a running one), not a missing attach.
        if other_pins(dir) {
            bail!(
                "the maps pinned in {} are from another version of director (it has no map \
                 {name}): detach director from every interface and attach it again",
                dir.display()
            );
        }
        bail!(
            "nothing is attached: no map {name} pinned in {} (run `director-ctl attach --iface \
             IF` first)",
            dir.display()
        );
    }
    MapData::from_pin(&path).with_context(|| format!("opening {}", path.display()))
}

/// A second handle on a map already opened with [`open`] (so its pin is known to exist),
/// for the raw bpf(2) calls aya has no API for.
pub(super) fn open_data(dir: &Path, name: &str) -> Result<MapData> {
    let path = dir.join(name);
    MapData::from_pin(&path).with_context(|| format!("opening {}", path.display()))
}

/// Refuses a pin set of another layout (`LAYOUT_VERSION`) before anything is opened or
/// written: its program would read this build's entries otherwise.
pub(super) fn check_layout(dir: &Path) -> Result<()> {
    let map = open_pinned(dir, MAP_LAYOUT)?;
    let info = map
        .info()
        .with_context(|| format!("reading {}", dir.join(MAP_LAYOUT).display()))?;
    let have = info.max_entries();
    if have != LAYOUT_VERSION {
        bail!(
            "the maps pinned in {} have layout {have} and this director-ctl writes layout \
             {LAYOUT_VERSION} (another version of director): detach director from every \
             interface and attach it again",
            dir.display()
        );
    }
    Ok(())
}

/// Whether `dir` holds director's maps at all (every version has had `DIR_NAMES`).
fn other_pins(dir: &Path) -> bool {
    dir.join(MAP_NAMES).exists()
}

#[cfg(test)]
mod tests {
    use super::*;
    use aya::maps::Array;
    use director_common::maps::MAP_DEC_GEN;

    #[test]
    fn a_pin_set_of_another_version_is_named_as_such() {
        let dir = std::env::temp_dir().join(format!("director-pins-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = |dir: &Path| {
            open::<Array<MapData, u64>>(dir, MAP_DEC_GEN)
                .err()
                .map(|e| format!("{e:#}"))
                .unwrap_or_default()
        };
        let empty = missing(&dir);
        std::fs::write(dir.join(MAP_NAMES), b"").unwrap();
        let partial = missing(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            empty.starts_with("nothing is attached: no map DIR_DEC_GEN"),
            "{empty}"
        );
        assert!(partial.contains("another version of director"), "{partial}");
        assert!(partial.contains("DIR_DEC_GEN"), "{partial}");
    }
}
