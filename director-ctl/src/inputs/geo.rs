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
        let Some(offset) = lookup.offset() else { continue };
        let point = match cache.get(&offset) {
            Some(p) => *p,
            None => {
                let rec: Option<Record> = lookup
                    .decode()
                    .map_err(|e| anyhow::anyhow!("{file}: record of network {network} does not decode: {e}"))?;
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
        let (Some(lat), Some(lon)) = (self.lat, self.lon) else { return Ok(None) };
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
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
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
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a record")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Record, A::Error> {
                let mut location = None;
                let flat = read_coords(map, |k, map| {
                    if k == "location" {
                        location = map.next_value::<OptCoords>()?.0;
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

/// `location`: a map with the coordinates, or anything else (no coordinates).
struct OptCoords(Option<Coords>);

impl<'de> Deserialize<'de> for OptCoords {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = OptCoords;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a location map")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<OptCoords, A::Error> {
                Ok(OptCoords(Some(read_coords(map, |_, _| Ok(false))?)))
            }
        }
        d.deserialize_map(V)
    }
}

/// A coordinate stored as double, float, integer or numeric string.
struct Number(Option<f64>);

impl<'de> Deserialize<'de> for Number {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Number;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
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

    #[test]
    fn inputs_geo_explore() {
        for f in ["GeoLite2-City-Test.mmdb", "GeoIP2-City-Test.mmdb", "GeoLite2-Country-Test.mmdb", "GeoLite2-ASN-Test.mmdb", "GeoIP2-City-Test-Broken-Double-Format.mmdb", "GeoIP2-City-Test-Invalid-Node-Count.mmdb", "MaxMind-DB-test-broken-pointers-24.mmdb"] {
            match load(&test_data(&format!("geo/test/{f}"))) {
                Ok(t) => eprintln!("{f}: {} networks ({} v4), {} without; {:?}", t.networks.len(), t.networks.iter().filter(|n| n.0.addr().is_ipv4()).count(), t.without_location, t.networks.first()),
                Err(e) => eprintln!("{f}: ERR {e}"),
            }
        }
        let t = std::time::Instant::now();
        let g = load(&test_data("geo/GeoLite2-City.mmdb")).unwrap();
        eprintln!("full: {} networks ({} v4), {} without, {:?}", g.networks.len(), g.networks.iter().filter(|n| n.0.addr().is_ipv4()).count(), g.without_location, t.elapsed());
        let t = std::time::Instant::now();
        let g = load(&test_data("geo/GeoLite2-Country.mmdb")).unwrap();
        eprintln!("country: {} networks, {} without, {:?}", g.networks.len(), g.without_location, t.elapsed());
    }
}
