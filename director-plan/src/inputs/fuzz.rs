//! Mutation fuzzing of every input reader an operator's files reach (bounded, seeded by
//! proptest; director-ctl fuzzes the config file's reader the same way): the RTT and
//! location CSVs, the location graph, MRT dumps and
//! MaxMind databases, each from a real or example file with bytes flipped, replaced,
//! inserted, removed or cut off. A reader must return its value or an error with a
//! message, never panic; a panic fails the case with the input that caused it.

use std::path::{Path, PathBuf};

use proptest::prelude::*;

use super::{csv, geo, graph, mrt, test_data};

/// One edit of a byte string.
#[derive(Clone, Debug)]
enum Edit {
    Flip(usize, u8),
    Set(usize, u8),
    Insert(usize, u8),
    Remove(usize),
    Cut(usize),
}

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    let edit = prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(i, b)| Edit::Flip(i, b)),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Edit::Set(i, b)),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Edit::Insert(i, b)),
        any::<usize>().prop_map(Edit::Remove),
        any::<usize>().prop_map(Edit::Cut),
    ];
    proptest::collection::vec(edit, 1..6)
}

fn apply(mut b: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for e in edits {
        if b.is_empty() {
            break;
        }
        let at = |i: &usize| i % b.len();
        match e {
            Edit::Flip(i, bit) => {
                let i = at(i);
                b[i] ^= 1 << bit;
            }
            Edit::Set(i, v) => {
                let i = at(i);
                b[i] = *v;
            }
            Edit::Insert(i, v) => {
                let i = at(i);
                b.insert(i, *v);
            }
            Edit::Remove(i) => {
                let i = at(i);
                b.remove(i);
            }
            Edit::Cut(i) => {
                let i = at(i);
                b.truncate(i);
            }
        }
    }
    b
}

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name)
}

/// Runs `read` on `bytes` as a file of this process, removed again afterwards (the
/// readers take paths; hundreds of cases must not leave hundreds of files behind).
fn as_file<T>(name: &str, bytes: &[u8], read: impl FnOnce(&Path) -> T) -> T {
    let p = std::env::temp_dir().join(format!("director-fuzz-{}-{name}", std::process::id()));
    std::fs::write(&p, bytes).unwrap();
    let r = read(&p);
    let _ = std::fs::remove_file(&p);
    r
}

/// Runs a reader on a mutated file: it may fail, with a message, but not panic.
fn survives<T>(r: anyhow::Result<T>) -> Result<(), TestCaseError> {
    if let Err(e) = r {
        prop_assert!(!format!("{e:#}").is_empty(), "an error without a message");
    }
    Ok(())
}

fn decompressed(rel: &str) -> Vec<u8> {
    let mut out = Vec::new();
    std::io::Read::read_to_end(
        &mut mrt::open_decompressed(&test_data(rel)).unwrap(),
        &mut out,
    )
    .unwrap();
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn csv_readers_never_panic(e in edits()) {
        let rtt = apply(std::fs::read(example("rtt.csv")).unwrap(), &e);
        survives(as_file("rtt.csv", &rtt, csv::load_rtt))?;
        let loc = apply(std::fs::read(example("locations.csv")).unwrap(), &e);
        survives(as_file("locations.csv", &loc, csv::load_locations))?;
    }

    #[test]
    fn graph_reader_never_panics(e in edits()) {
        let text = b"[[node]]\nname = \"fra\"\nlat = 50.1\nlon = 8.7\n[[node]]\nname = \"nyc\"\n\
                     [[edge]]\nfrom = \"fra\"\nto = \"nyc\"\ncost = 80.5\n".to_vec();
        let text = String::from_utf8_lossy(&apply(text, &e)).into_owned();
        if let Ok(g) = graph::parse(&text, "fuzz.toml") {
            for n in g.nodes() {
                survives(g.shortest_from(&n.name))?;
            }
        }
    }
}

proptest! {
    // Each case reads a whole file: fewer cases, still seeded and repeatable.
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn mrt_reader_never_panics(e in edits()) {
        let bytes = apply(decompressed("bgp/bview.ipv4_unicast_add_path.gz"), &e);
        survives(as_file("bview.mrt", &bytes, |p| mrt::load(&[p.to_path_buf()], None)))?;
        let bytes = apply(decompressed("bgp/ris.rrc06.updates.1427846400.gz"), &e);
        survives(as_file("updates.mrt", &bytes, |p| mrt::load(&[p.to_path_buf()], None)))?;
    }

    #[test]
    fn geoip_reader_never_panics(e in edits()) {
        let db = std::fs::read(test_data("geo/test/GeoIP2-City-Test.mmdb")).unwrap();
        survives(as_file("city.mmdb", &apply(db, &e), geo::load))?;
    }
}

/// The seeds themselves read: otherwise every mutated case could fail at the first byte
/// and the fuzz would prove little.
#[test]
fn the_unedited_seeds_read() {
    assert!(!csv::load_rtt(&example("rtt.csv")).unwrap().is_empty());
    assert!(!csv::load_locations(&example("locations.csv"))
        .unwrap()
        .is_empty());
    let bytes = decompressed("bgp/bview.ipv4_unicast_add_path.gz");
    let v = as_file("seed-bview.mrt", &bytes, |p| {
        mrt::load(&[p.to_path_buf()], None)
    })
    .unwrap();
    assert!(!v.routes.is_empty());
    let bytes = decompressed("bgp/ris.rrc06.updates.1427846400.gz");
    let v = as_file("seed-updates.mrt", &bytes, |p| {
        mrt::load(&[p.to_path_buf()], None)
    })
    .unwrap();
    assert!(!v.routes.is_empty());
    let t = geo::load(&test_data("geo/test/GeoIP2-City-Test.mmdb")).unwrap();
    assert!(!t.networks.is_empty());
}
