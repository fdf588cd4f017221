//! Maps of another build (name hash, layout stamp) are refused before anything changes.

use director_tests::fixture::XDP_TX;

use crate::runner::expect_answer;
use crate::setup::{a_query, frame_of, setup_fra, v4};

/// Maps written by a build that hashed names differently (the byte-at-a-time FNV-1a before
/// the word walk) are refused by name, not silently left unanswerable.
#[test]
fn names_keyed_by_another_builds_hash_are_refused() {
    use aya::maps::{HashMap, Map, MapData};
    use director_common::maps::{NameEntry, MAP_NAMES, NAME_BUF};
    let mut fx = setup_fra();
    // The service answers, keyed as this build keys it.
    expect_answer(&fx, &frame_of(&v4(), &a_query()));
    let path = fx.pin_dir().join(MAP_NAMES);
    let mut names: HashMap<MapData, u64, NameEntry> =
        HashMap::try_from(Map::HashMap(MapData::from_pin(&path).unwrap())).unwrap();
    let wire = director_common::name::encode("old.example.com").unwrap();
    let mut entry = NameEntry {
        service: 1,
        len: wire.len() as u32,
        name: [0; NAME_BUF],
    };
    entry.name[..wire.len()].copy_from_slice(&wire);
    let fnv = wire.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    names.insert(fnv, entry, 0).unwrap();
    let err = director_ctl::kernel::Maps::open(fx.pin_dir())
        .err()
        .expect("maps with another build's name keys must be refused");
    assert!(
        format!("{err:#}").contains("another build of director"),
        "{err:#}"
    );
    names.remove(&fnv).unwrap();
    director_ctl::kernel::Maps::open(fx.pin_dir()).expect("the same maps, once consistent");
    let _ = fx.maps();
}

/// A pin set whose layout stamp is another build's is refused before anything is written,
/// and the program answers on as before; with the stamp back, the same maps open again.
#[test]
fn a_pin_set_of_another_layout_is_refused_and_left_as_it_was() {
    use aya::maps::MapData;
    use director_common::maps::{LAYOUT_VERSION, MAP_IFACES, MAP_LAYOUT};
    let fx = setup_fra();
    let before = fx.run(&frame_of(&v4(), &a_query()));
    assert_eq!(before.0, XDP_TX);
    let stamp = fx.pin_dir().join(MAP_LAYOUT);
    let ours = MapData::from_pin(&stamp).unwrap();
    assert_eq!(ours.info().unwrap().max_entries(), LAYOUT_VERSION);
    // Another layout's stamp: a map of another size at the stamp's path.
    std::fs::remove_file(&stamp).unwrap();
    let other = MapData::from_pin(fx.pin_dir().join(MAP_IFACES)).unwrap();
    assert_ne!(other.info().unwrap().max_entries(), LAYOUT_VERSION);
    other.pin(&stamp).unwrap();
    let err = director_ctl::kernel::Maps::open(fx.pin_dir())
        .err()
        .expect("a pin set of another layout must be refused");
    let text = format!("{err:#}");
    assert!(
        text.contains(&format!("this director-ctl writes layout {LAYOUT_VERSION}"))
            && text.contains("another version of director"),
        "{text}"
    );
    // Refused before any write: the same answer, byte for byte.
    assert_eq!(fx.run(&frame_of(&v4(), &a_query())), before);
    std::fs::remove_file(&stamp).unwrap();
    ours.pin(&stamp).unwrap();
    director_ctl::kernel::Maps::open(fx.pin_dir()).expect("the same maps, stamped as ours");
}
