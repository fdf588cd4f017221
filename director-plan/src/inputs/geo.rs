//! A MaxMind DB (.mmdb) GeoIP database to (network, point) pairs.
//!
//! Every network of the database is read (IPv4 and IPv6). Two schemas are understood:
//! MaxMind's City schema (`location.latitude` / `location.longitude`, doubles) and "flat"
//! databases that keep `latitude` / `longitude` (or `lat` / `lon` / `lng`) at the top level,
//! as 32-bit floats, doubles, integers or numeric strings. Networks whose record has no
//! location (country-only records, for instance) are skipped and counted.
//!
//! In an IPv6 database the IPv4 space lives under `::/96`, and the same subtree is usually
//! reachable again as `::ffff:0:0/96` (and `2002::/16`). The reader yields the `::/96`
//! networks as plain IPv4 prefixes and skips the aliases; a database that keeps IPv4 data
//! only under `::ffff:0:0/96` gets those mapped to IPv4 here, and any duplicate that results
//! is dropped (the first one seen wins).
//!
//! A database that cannot be read — bad metadata, a search tree or pointer that leads outside
//! the file, a value that does not decode, a coordinate out of range — is refused with the
//! file, the network (where there is one) and the reason. Nothing here panics on bad input.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use anyhow::{bail, Context, Result};
use maxminddb::{Reader, WithinOptions};
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;

use crate::model::{GeoPoint, IpNet};

/// What a GeoIP database gave.
#[derive(Clone, Debug, Default)]
pub struct GeoTable {
    /// Networks with a location, in the database's tree order (IPv4 networks as IPv4).
    pub networks: Vec<(IpNet, GeoPoint)>,
    /// Networks with a record but no (complete) latitude/longitude, skipped.
    pub without_location: usize,
    /// The metadata's `database_type`, e.g. "GeoLite2-City".
    pub database_type: String,
    /// The metadata's `ip_version`: 4 or 6.
    pub ip_version: u16,
}

/// Read every network with a location from a MaxMind DB file.
pub fn load(path: &Path) -> Result<GeoTable> {
    let file = path.display();
    let buf = std::fs::read(path).with_context(|| format!("cannot read GeoIP database {file}"))?;
    let reader = Reader::from_source(buf)
        .map_err(|e| anyhow::anyhow!("{file}: not a readable MaxMind DB: {e}"))?;
    let meta = reader.metadata();
    let mut table = GeoTable {
        networks: Vec::new(),
        without_location: 0,
        database_type: meta.database_type.clone(),
        ip_version: meta.ip_version,
    };
    // Data records are shared by many networks: decode each record once.
    let mut cache: HashMap<usize, Option<GeoPoint>> = HashMap::new();
    let mut mapped_v4 = false;
    let networks = reader
        .networks(WithinOptions::default())
        .map_err(|e| anyhow::anyhow!("{file}: cannot walk the search tree: {e}"))?;
    for item in networks {
        let lookup = item.map_err(|e| anyhow::anyhow!("{file}: broken search tree: {e}"))?;
        let network = lookup
            .network()
            .map_err(|e| anyhow::anyhow!("{file}: broken search tree: {e}"))?;
        let Some(offset) = lookup.offset() else {
            continue;
        };
        let point = match cache.get(&offset) {
            Some(p) => *p,
            None => {
                let rec: Option<Record> = lookup.decode().map_err(|e| {
                    anyhow::anyhow!("{file}: record of network {network} does not decode: {e}")
                })?;
                let p = rec
                    .map(|r| r.point())
                    .transpose()
                    .map_err(|e| anyhow::anyhow!("{file}: record of network {network}: {e}"))?
                    .flatten();
                cache.insert(offset, p);
                p
            }
        };
        let Some(point) = point else {
            table.without_location += 1;
            continue;
        };
        let net = match IpNet::new(network.network(), network.prefix()) {
            Ok(n) => n,
            Err(e) => bail!("{file}: bad network {network}: {e}"),
        };
        let net = match net {
            IpNet::V6(v6) if v6.prefix_len() >= 96 && v6.addr().to_ipv4_mapped().is_some() => {
                mapped_v4 = true;
                let v4: Ipv4Addr = v6.addr().to_ipv4_mapped().expect("checked");
                IpNet::new(IpAddr::V4(v4), v6.prefix_len() - 96).expect("length <= 32")
            }
            n => n,
        };
        table.networks.push((net, point));
    }
    if table.networks.is_empty() && table.without_location > 0 {
        bail!(
            "{file}: no network has a location (latitude/longitude) in this {} database: \
             a City database is needed",
            table.database_type
        );
    }
    if mapped_v4 {
        // ::ffff:0:0/96 may repeat what ::/96 already gave: keep each network once.
        let mut seen = std::collections::HashSet::with_capacity(table.networks.len());
        table.networks.retain(|(n, _)| seen.insert(*n));
    }
    Ok(table)
}

/// The part of a record we read: a location, wherever the schema keeps it.
#[derive(Default)]
struct Record {
    location: Option<Coords>,
    flat: Coords,
}

#[derive(Default, Clone, Copy)]
struct Coords {
    lat: Option<f64>,
    lon: Option<f64>,
}

impl Coords {
    fn point(self) -> Result<Option<GeoPoint>, String> {
        let (Some(lat), Some(lon)) = (self.lat, self.lon) else {
            return Ok(None);
        };
        if !(-90.0..=90.0).contains(&lat) {
            return Err(format!("latitude {lat} is out of range (-90 to 90)"));
        }
        if !(-180.0..=180.0).contains(&lon) {
            return Err(format!("longitude {lon} is out of range (-180 to 180)"));
        }
        Ok(Some(GeoPoint { lat, lon }))
    }
}

impl Record {
    fn point(&self) -> Result<Option<GeoPoint>, String> {
        if let Some(p) = self.location.map(Coords::point).transpose()?.flatten() {
            return Ok(Some(p));
        }
        self.flat.point()
    }
}

/// Read a map's coordinate keys, ignore everything else (without expanding it).
fn read_coords<'de, A: MapAccess<'de>>(
    mut map: A,
    mut other: impl FnMut(&str, &mut A) -> Result<bool, A::Error>,
) -> Result<Coords, A::Error> {
    let mut c = Coords::default();
    while let Some(key) = map.next_key::<Key<'de>>()? {
        match key.0.as_ref() {
            "latitude" | "lat" => c.lat = map.next_value::<Number>()?.0,
            "longitude" | "lon" | "lng" => c.lon = map.next_value::<Number>()?.0,
            k => {
                if !other(k, &mut map)? {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
    }
    Ok(c)
}

/// A map key, borrowed from the database where possible.
struct Key<'de>(std::borrow::Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(v.into()))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(v.to_owned().into()))
            }
        }
        d.deserialize_str(V)
    }
}

impl<'de> Deserialize<'de> for Record {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Record;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a record")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Record, A::Error> {
                let mut location = None;
                let flat = read_coords(map, |k, map| {
                    if k == "location" {
                        // MaxMind's `location` map; anything else there has no coordinates.
                        location = Some(map.next_value::<Record>()?.flat);
                        Ok(true)
                    } else {
                        Ok(false)
                    }
                })?;
                Ok(Record { location, flat })
            }
            // A record that is not a map (a string, a number...) has no location.
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Record, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Record::default())
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Record, E> {
                Ok(Record::default())
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Record, E> {
                Ok(Record::default())
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Record, E> {
                Ok(Record::default())
            }
            fn visit_u128<E: de::Error>(self, _: u128) -> Result<Record, E> {
                Ok(Record::default())
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Record, E> {
                Ok(Record::default())
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Record, E> {
                Ok(Record::default())
            }
            fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<Record, E> {
                Ok(Record::default())
            }
            fn visit_unit<E: de::Error>(self) -> Result<Record, E> {
                Ok(Record::default())
            }
        }
        d.deserialize_any(V)
    }
}

/// A coordinate stored as double, float, integer or numeric string.
struct Number(Option<f64>);

impl<'de> Deserialize<'de> for Number {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Number;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number (double, float, integer or numeric string)")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Number, E> {
                if v.is_finite() {
                    Ok(Number(Some(v)))
                } else {
                    Err(E::custom(format!("coordinate {v} is not a finite number")))
                }
            }
            fn visit_f32<E: de::Error>(self, v: f32) -> Result<Number, E> {
                // Through its shortest decimal form: 52.5f32 is 52.5, not 52.500000xxx.
                self.visit_f64(v.to_string().parse::<f64>().unwrap_or(v as f64))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Number, E> {
                Ok(Number(Some(v as f64)))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Number, E> {
                Ok(Number(Some(v as f64)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Number, E> {
                match v.trim().parse::<f64>() {
                    Ok(x) => self.visit_f64(x),
                    Err(_) => Err(E::custom(format!("coordinate {v:?} is not a number"))),
                }
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::test_data;
    use std::collections::BTreeMap;
    use std::net::Ipv6Addr;

    fn find(t: &GeoTable, ip: &str) -> Option<(IpNet, GeoPoint)> {
        let ip: IpAddr = ip.parse().unwrap();
        t.networks.iter().find(|(n, _)| n.contains(&ip)).copied()
    }

    #[test]
    fn inputs_geo_city_test_db_matches_source_json() {
        let t = load(&test_data("geo/test/GeoLite2-City-Test.mmdb")).unwrap();
        let src: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(test_data("geo/test/GeoLite2-City-Test.source.json")).unwrap(),
        )
        .unwrap();
        let mut want: BTreeMap<IpNet, GeoPoint> = BTreeMap::new();
        for entry in src.as_array().unwrap() {
            for (net, rec) in entry.as_object().unwrap() {
                let loc = &rec["location"];
                if let (Some(lat), Some(lon)) =
                    (loc["latitude"].as_f64(), loc["longitude"].as_f64())
                {
                    want.insert(net.parse::<IpNet>().unwrap().trunc(), GeoPoint { lat, lon });
                }
            }
        }
        assert_eq!(want.len(), 242);
        let got: BTreeMap<IpNet, GeoPoint> = t.networks.iter().copied().collect();
        assert_eq!(got.len(), t.networks.len(), "no network twice");
        // Exactly the listed networks (IPv4 ones as IPv4, no ::ffff:0:0/96 or 2002::/16 aliases),
        // each with exactly its listed latitude and longitude.
        assert_eq!(got, want);
        assert_eq!(
            (t.without_location, t.ip_version, t.database_type.as_str()),
            (0, 6, "GeoLite2-City")
        );
        let nets = |s: &str| s.parse::<IpNet>().unwrap();
        assert_eq!(
            got[&nets("2.125.160.216/29")],
            GeoPoint {
                lat: 51.75,
                lon: -1.25
            }
        ); // Boxford, GB
        assert_eq!(
            got[&nets("81.2.69.160/27")],
            GeoPoint {
                lat: 51.5142,
                lon: -0.0931
            }
        ); // London
        assert_eq!(
            got[&nets("2001:220::/32")],
            GeoPoint {
                lat: 37.0,
                lon: 127.5
            }
        ); // KR
        assert_eq!(
            find(&t, "89.160.20.129").unwrap().0,
            nets("89.160.20.128/25")
        );
    }

    #[test]
    fn inputs_geo_refuses_broken_databases() {
        for (f, why) in [
            (
                "GeoIP2-City-Test-Broken-Double-Format.mmdb",
                "double of size 5",
            ),
            (
                "GeoIP2-City-Test-Invalid-Node-Count.mmdb",
                "search tree extends beyond the metadata section",
            ),
            (
                "MaxMind-DB-test-broken-pointers-24.mmdb",
                "unexpected end of buffer",
            ),
        ] {
            let path = test_data(&format!("geo/test/{f}"));
            let e = load(&path).unwrap_err().to_string();
            assert!(
                e.starts_with(&path.display().to_string()) && e.contains(why),
                "{f}: {e}"
            );
        }
        let e = format!(
            "{:#}",
            load(Path::new("/nonexistent/City.mmdb")).unwrap_err()
        );
        assert!(
            e.contains("/nonexistent/City.mmdb") && e.contains("No such file"),
            "{e}"
        );
        let readme = test_data("README.md");
        let e = load(&readme).unwrap_err().to_string();
        assert!(e.contains("README.md: not a readable MaxMind DB"), "{e}");
        // A database without any location (country-only) is refused, not silently empty.
        let country = test_data("geo/test/GeoLite2-Country-Test.mmdb");
        let e = load(&country).unwrap_err().to_string();
        assert!(
            e.contains("no network has a location") && e.contains("GeoLite2-Country"),
            "{e}"
        );
    }

    /// The real GeoLite2-City (3.48 M networks). ~10 s in a debug build, ~1 s in release.
    #[test]
    fn inputs_geo_full_geolite2_city() {
        let t0 = std::time::Instant::now();
        let t = load(&test_data("geo/GeoLite2-City.mmdb")).unwrap();
        eprintln!(
            "GeoLite2-City: {} networks with a location, {} without, in {:?}, peak RSS {}",
            t.networks.len(),
            t.without_location,
            t0.elapsed(),
            crate::inputs::peak_rss()
        );
        let v4 = t.networks.iter().filter(|n| n.0.addr().is_ipv4()).count();
        let v6 = t.networks.len() - v4;
        assert!(
            (3_300_000..3_600_000).contains(&t.networks.len()),
            "{}",
            t.networks.len()
        );
        assert!(
            (2_900_000..3_100_000).contains(&v4) && (400_000..600_000).contains(&v6),
            "{v4} IPv4, {v6} IPv6"
        );
        assert!(t.without_location < 10_000, "{}", t.without_location);
        // No alias subtree came out as IPv6.
        let mapped: IpNet = "::ffff:0:0/96".parse().unwrap();
        let six_to_four: IpNet = "2002::/16".parse().unwrap();
        let v4_compat: IpNet = "::/96".parse().unwrap();
        assert!(!t
            .networks
            .iter()
            .any(|(n, _)| mapped.contains(n) || six_to_four.contains(n) || v4_compat.contains(n)));
        // Known places (the test DB puts 2.125.160.216 in Boxford, GB).
        let (_, uk) = find(&t, "2.125.160.216").unwrap();
        assert!(
            (49.0..61.0).contains(&uk.lat) && (-9.0..2.0).contains(&uk.lon),
            "2.125.160.216 at {uk:?}"
        );
        let (_, br) = find(&t, "200.160.2.3").unwrap(); // registro.br, São Paulo
        assert!(
            (-34.0..5.0).contains(&br.lat) && (-74.0..-34.0).contains(&br.lon),
            "200.160.2.3 at {br:?}"
        );
        let (_, de) = find(&t, "2a01:4f8::1").unwrap(); // Hetzner, DE
        assert!(
            (47.0..55.5).contains(&de.lat) && (5.5..15.5).contains(&de.lon),
            "2a01:4f8::1 at {de:?}"
        );
    }

    // ---- a tiny MaxMind DB writer, for schemas the shared data lacks ----

    enum V {
        Str(&'static str),
        F32(f32),
        F64(f64),
        U16(u16),
        U32(u32),
        U64(u64),
        Arr(Vec<V>),
        Map(Vec<(&'static str, V)>),
    }

    fn ctrl(out: &mut Vec<u8>, ty: u8, size: usize) {
        assert!(size < 29);
        if ty <= 7 {
            out.push(ty << 5 | size as u8);
        } else {
            out.push(size as u8);
            out.push(ty - 7);
        }
    }

    fn enc(v: &V, out: &mut Vec<u8>) {
        match v {
            V::Str(s) => {
                ctrl(out, 2, s.len());
                out.extend(s.as_bytes());
            }
            V::F64(x) => {
                ctrl(out, 3, 8);
                out.extend(x.to_be_bytes());
            }
            V::F32(x) => {
                ctrl(out, 15, 4);
                out.extend(x.to_be_bytes());
            }
            V::U16(x) => {
                ctrl(out, 5, 2);
                out.extend(x.to_be_bytes());
            }
            V::U32(x) => {
                ctrl(out, 6, 4);
                out.extend(x.to_be_bytes());
            }
            V::U64(x) => {
                ctrl(out, 9, 8);
                out.extend(x.to_be_bytes());
            }
            V::Arr(items) => {
                ctrl(out, 11, items.len());
                for v in items {
                    enc(v, out);
                }
            }
            V::Map(kv) => {
                ctrl(out, 7, kv.len());
                for (k, v) in kv {
                    enc(&V::Str(k), out);
                    enc(v, out);
                }
            }
        }
    }

    /// An IPv6 (128-bit tree) or IPv4 database, 24-bit records, non-overlapping networks.
    fn mmdb(ip_version: u16, nets: &[(&str, V)]) -> Vec<u8> {
        #[derive(Clone, Copy)]
        enum R {
            Empty,
            Node(usize),
            Data(usize),
        }
        let bits = if ip_version == 6 { 128 } else { 32 };
        let mut nodes: Vec<[R; 2]> = vec![[R::Empty; 2]];
        let mut data = Vec::new();
        for (net, v) in nets {
            let net: IpNet = net.parse().unwrap();
            let (addr, len) = match net {
                IpNet::V4(n) if bits == 32 => {
                    (u128::from(u32::from(n.addr())) << 96, n.prefix_len())
                }
                IpNet::V6(n) if bits == 128 => (u128::from(n.addr()), n.prefix_len()),
                _ => panic!("{net} in an IPv{ip_version} tree"),
            };
            let off = data.len();
            enc(v, &mut data);
            let mut node = 0;
            for depth in 0..len as usize {
                let bit = (addr >> (127 - depth) & 1) as usize;
                if depth + 1 == len as usize {
                    nodes[node][bit] = R::Data(off);
                } else {
                    node = match nodes[node][bit] {
                        R::Node(n) => n,
                        R::Empty => {
                            nodes.push([R::Empty; 2]);
                            nodes[node][bit] = R::Node(nodes.len() - 1);
                            nodes.len() - 1
                        }
                        R::Data(_) => panic!("overlapping networks"),
                    };
                }
            }
        }
        let n = nodes.len();
        let mut out = Vec::new();
        for rec in nodes.iter().flatten() {
            let v = match *rec {
                R::Empty => n,
                R::Node(i) => i,
                R::Data(off) => n + 16 + off,
            } as u32;
            out.extend(&v.to_be_bytes()[1..]);
        }
        out.extend([0u8; 16]);
        out.extend(&data);
        out.extend(b"\xab\xcd\xefMaxMind.com");
        enc(
            &V::Map(vec![
                ("node_count", V::U32(n as u32)),
                ("record_size", V::U16(24)),
                ("ip_version", V::U16(ip_version)),
                ("database_type", V::Str("Flat-Test")),
                ("languages", V::Arr(vec![V::Str("en")])),
                ("binary_format_major_version", V::U16(2)),
                ("binary_format_minor_version", V::U16(0)),
                ("build_epoch", V::U64(1_700_000_000)),
                ("description", V::Map(vec![("en", V::Str("director test"))])),
            ]),
            &mut out,
        );
        out
    }

    fn write(name: &str, bytes: &[u8]) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("director-inputs-geo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    fn flat(lat: f32, lon: f32) -> V {
        V::Map(vec![
            ("country_code", V::Str("DE")),
            ("latitude", V::F32(lat)),
            ("longitude", V::F32(lon)),
            ("city", V::Str("x")),
        ])
    }

    #[test]
    fn inputs_geo_flat_f32_and_mixed_schemas() {
        let db = mmdb(
            6,
            &[
                // IPv4 under ::/96, flat f32 (as DB-IP Lite keeps them).
                ("::192.0.2.0/120", flat(52.52, 13.405)),
                // IPv4 only under ::ffff:0:0/96.
                ("::ffff:198.51.100.0/120", flat(-33.8688, 151.2093)),
                // The same IPv4 network twice: ::/96 and ::ffff:0:0/96 (not aliased): kept once.
                ("::203.0.113.0/120", flat(1.5, 2.5)),
                ("::ffff:203.0.113.0/120", flat(1.5, 2.5)),
                // Flat doubles, and MaxMind's City schema with doubles.
                (
                    "2001:db8:1::/48",
                    V::Map(vec![
                        ("latitude", V::F64(48.8566)),
                        ("longitude", V::F64(2.3522)),
                    ]),
                ),
                (
                    "2001:db8:2::/48",
                    V::Map(vec![
                        (
                            "city",
                            V::Map(vec![("names", V::Map(vec![("en", V::Str("Oslo"))]))]),
                        ),
                        (
                            "location",
                            V::Map(vec![
                                ("latitude", V::F64(59.9139)),
                                ("longitude", V::F64(10.7522)),
                                ("accuracy_radius", V::U16(20)),
                            ]),
                        ),
                    ]),
                ),
                // No location, and only half of one: skipped and counted.
                (
                    "2001:db8:3::/48",
                    V::Map(vec![("country_code", V::Str("NO"))]),
                ),
                ("2001:db8:4::/48", V::Map(vec![("latitude", V::F32(1.0))])),
                ("2001:db8:5::/48", V::Str("not a map")),
                (
                    "2001:db8:6::/48",
                    V::Map(vec![("location", V::Str("Berlin"))]),
                ),
            ],
        );
        let t = load(&write("flat6.mmdb", &db)).unwrap();
        let got: BTreeMap<String, (f64, f64)> = t
            .networks
            .iter()
            .map(|(n, p)| (n.to_string(), (p.lat, p.lon)))
            .collect();
        let want: BTreeMap<String, (f64, f64)> = [
            ("192.0.2.0/24", (52.52, 13.405)), // f32 52.52 read as 52.52, not 52.52000045776367
            ("198.51.100.0/24", (-33.8688, 151.2093)),
            ("203.0.113.0/24", (1.5, 2.5)),
            ("2001:db8:1::/48", (48.8566, 2.3522)),
            ("2001:db8:2::/48", (59.9139, 10.7522)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(got, want);
        assert_eq!(t.networks.len(), 5, "203.0.113.0/24 once");
        assert_eq!(t.without_location, 4);
        assert_eq!((t.ip_version, t.database_type.as_str()), (6, "Flat-Test"));

        // An IPv4-only database.
        let db = mmdb(
            4,
            &[
                ("10.0.0.0/8", flat(10.0, 20.0)),
                ("192.0.2.128/25", flat(-1.25, -179.5)),
            ],
        );
        let t = load(&write("flat4.mmdb", &db)).unwrap();
        assert_eq!(
            t.networks,
            vec![
                (
                    "10.0.0.0/8".parse().unwrap(),
                    GeoPoint {
                        lat: 10.0,
                        lon: 20.0
                    }
                ),
                (
                    "192.0.2.128/25".parse().unwrap(),
                    GeoPoint {
                        lat: -1.25,
                        lon: -179.5
                    }
                ),
            ]
        );

        // Out-of-range coordinates are refused, naming the network.
        let db = mmdb(4, &[("10.0.0.0/8", flat(95.0, 20.0))]);
        let p = write("bad-lat.mmdb", &db);
        let e = load(&p).unwrap_err().to_string();
        assert!(
            e.contains("bad-lat.mmdb: record of network 10.0.0.0/8: latitude 95 is out of range"),
            "{e}"
        );
        // A coordinate of the wrong type too.
        let db = mmdb(
            4,
            &[(
                "10.0.0.0/8",
                V::Map(vec![
                    ("latitude", V::Map(vec![])),
                    ("longitude", V::F32(1.0)),
                ]),
            )],
        );
        let e = load(&write("bad-type.mmdb", &db)).unwrap_err().to_string();
        assert!(
            e.contains("record of network 10.0.0.0/8 does not decode"),
            "{e}"
        );
        // And a truncated file.
        let db = mmdb(4, &[("10.0.0.0/8", flat(1.0, 2.0))]);
        let e = load(&write("truncated.mmdb", &db[..db.len() - 20]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("truncated.mmdb: not a readable MaxMind DB"),
            "{e}"
        );
    }

    #[test]
    fn inputs_geo_test_writer_agrees_with_maxminddb() {
        // The writer above is only a test helper: check it against the crate's own lookups.
        let db = mmdb(6, &[("2001:db8::/32", flat(3.0, 4.0))]);
        let r = Reader::from_source(db).unwrap();
        r.verify().unwrap();
        let hit = r
            .lookup(IpAddr::V6("2001:db8::1".parse::<Ipv6Addr>().unwrap()))
            .unwrap();
        assert!(hit.has_data());
        assert_eq!(hit.network().unwrap().to_string(), "2001:db8::/32");
    }
}
