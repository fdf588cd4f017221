//! Small comma-separated inputs: measured RTTs and operator-given client locations.
//!
//! Plain lines, fields separated by commas and trimmed; no quoting. Blank lines and lines
//! whose first non-blank character is '#' are ignored, and so is a first line whose first
//! field is `prefix` (a header). Every error names `file:line` and what is wrong.
//!
//! - RTT: `prefix,site,rtt_ms`, e.g. `192.0.2.0/24,fra,12.5` (rtt a finite number >= 0).
//! - Locations: `prefix,lat,lon` (degrees, -90..90 and -180..180) or `prefix,location-name`
//!   (a node of the location graph, see [`super::graph`]).
//!
//! A prefix is `ADDRESS/LENGTH` with no host bits set: `192.0.2.0/24`, `2001:db8::/32`.

use std::path::Path;

use anyhow::{bail, Result};

use crate::controller::model::{GeoPoint, IpNet, Location};

/// `prefix,site,rtt_ms` lines.
pub fn load_rtt(path: &Path) -> Result<Vec<(IpNet, String, f64)>> {
    let mut out = Vec::new();
    for_each_line(path, |fields| {
        let [p, site, rtt] = fields else {
            bail!(
                "expected 3 fields (prefix,site,rtt_ms), found {}",
                fields.len()
            );
        };
        let prefix = parse_prefix(p)?;
        let site = name(site, "site")?;
        let rtt = number(rtt, "rtt_ms")?;
        if rtt < 0.0 {
            bail!("rtt_ms {rtt} is negative");
        }
        out.push((prefix, site, rtt));
        Ok(())
    })?;
    Ok(out)
}

/// `prefix,lat,lon` or `prefix,location-name` lines.
pub fn load_locations(path: &Path) -> Result<Vec<(IpNet, Location)>> {
    let mut out = Vec::new();
    for_each_line(path, |fields| {
        let loc = match fields {
            [p, n] => (parse_prefix(p)?, Location::Named(name(n, "location name")?)),
            [p, lat, lon] => (parse_prefix(p)?, Location::Point(point(lat, lon)?)),
            _ => bail!(
                "expected 2 fields (prefix,location-name) or 3 (prefix,lat,lon), found {}",
                fields.len()
            ),
        };
        out.push(loc);
        Ok(())
    })?;
    Ok(out)
}

/// Call `f` with the trimmed fields of each data line; errors get `file:line: `.
fn for_each_line(path: &Path, mut f: impl FnMut(&[&str]) -> Result<()>) -> Result<()> {
    let text = super::read_text(path, "file")?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let mut first = true;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = t.split(',').map(str::trim).collect();
        if std::mem::take(&mut first) && fields[0].eq_ignore_ascii_case("prefix") {
            continue;
        }
        // One message, so that `{}` shows it all, not only the outer context.
        f(&fields).map_err(|e| anyhow::anyhow!("{}:{}: {e:#}", path.display(), i + 1))?;
    }
    Ok(())
}

/// `ADDRESS/LENGTH` with no host bits.
pub(crate) fn parse_prefix(text: &str) -> Result<IpNet> {
    let Some((a, l)) = text.split_once('/') else {
        bail!("bad prefix {text:?}: expected ADDRESS/LENGTH, e.g. 192.0.2.0/24 or 2001:db8::/32");
    };
    let Ok(addr) = a.parse::<std::net::IpAddr>() else {
        bail!("bad prefix {text:?}: {a:?} is not an IPv4 or IPv6 address");
    };
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let len = match l.parse::<u8>() {
        Ok(n) if n <= max => n,
        _ => bail!("bad prefix {text:?}: length {l:?} is not a number from 0 to {max}"),
    };
    let net = IpNet::new(addr, len).expect("length checked");
    if net.trunc() != net {
        bail!(
            "bad prefix {text:?}: host bits are set (the network is {})",
            net.trunc()
        );
    }
    Ok(net)
}

fn number(text: &str, what: &str) -> Result<f64> {
    match text.parse::<f64>() {
        Ok(x) if x.is_finite() => Ok(x),
        _ => bail!("bad number {text:?} for {what}"),
    }
}

fn name(text: &str, what: &str) -> Result<String> {
    if text.is_empty() {
        bail!("empty {what}");
    }
    Ok(text.to_string())
}

pub(crate) fn check_lat_lon(lat: f64, lon: f64) -> Result<GeoPoint> {
    if !(-90.0..=90.0).contains(&lat) {
        bail!("latitude {lat} is out of range (-90 to 90)");
    }
    if !(-180.0..=180.0).contains(&lon) {
        bail!("longitude {lon} is out of range (-180 to 180)");
    }
    Ok(GeoPoint { lat, lon })
}

fn point(lat: &str, lon: &str) -> Result<GeoPoint> {
    check_lat_lon(number(lat, "latitude")?, number(lon, "longitude")?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn write(name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("director-inputs-csv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    fn err(r: Result<impl std::fmt::Debug>) -> String {
        format!("{:#}", r.unwrap_err())
    }

    #[test]
    fn inputs_csv_rtt_ok() {
        let p = write(
            "rtt-ok.csv",
            "prefix,site,rtt_ms\n# measured\n\n192.0.2.0/24, fra ,12.5\r\n2001:db8::/32,ams,0\n  # \
             indented comment\n10.0.0.0/8,lon,3\n",
        );
        let v = load_rtt(&p).unwrap();
        assert_eq!(
            v,
            vec![
                ("192.0.2.0/24".parse().unwrap(), "fra".to_string(), 12.5),
                ("2001:db8::/32".parse().unwrap(), "ams".to_string(), 0.0),
                ("10.0.0.0/8".parse().unwrap(), "lon".to_string(), 3.0),
            ]
        );
    }

    #[test]
    fn inputs_csv_rtt_errors_name_file_and_line() {
        let cases = [
            (
                "192.0.2.0/24,fra,1\n10.0.0.1/8,fra,1\n",
                ":2: bad prefix \"10.0.0.1/8\": host bits are set (the network is 10.0.0.0/8)",
            ),
            ("# c\n\nfoo/8,fra,1\n", ":3: bad prefix \"foo/8\""),
            (
                "10.0.0.0,fra,1\n",
                ":1: bad prefix \"10.0.0.0\": expected ADDRESS/LENGTH",
            ),
            (
                "10.0.0.0/33,fra,1\n",
                ":1: bad prefix \"10.0.0.0/33\": length \"33\"",
            ),
            (
                "10.0.0.0/8,fra,fast\n",
                ":1: bad number \"fast\" for rtt_ms",
            ),
            ("10.0.0.0/8,fra,NaN\n", ":1: bad number \"NaN\" for rtt_ms"),
            ("10.0.0.0/8,fra,-1\n", ":1: rtt_ms -1 is negative"),
            (
                "10.0.0.0/8,fra\n",
                ":1: expected 3 fields (prefix,site,rtt_ms), found 2",
            ),
            (
                "10.0.0.0/8,fra,1,2\n",
                ":1: expected 3 fields (prefix,site,rtt_ms), found 4",
            ),
            ("10.0.0.0/8,,1\n", ":1: empty site"),
        ];
        for (i, (text, want)) in cases.iter().enumerate() {
            let p = write(&format!("rtt-bad-{i}.csv"), text);
            let e = err(load_rtt(&p));
            assert!(e.starts_with(&p.display().to_string()), "{e}");
            assert!(e.contains(want), "case {i}: {e:?} lacks {want:?}");
        }
        let e = err(load_rtt(Path::new("/nonexistent/rtt.csv")));
        assert!(e.contains("/nonexistent/rtt.csv"), "{e}");
    }

    #[test]
    fn inputs_csv_locations() {
        let p = write(
            "loc-ok.csv",
            "# where clients are\n192.0.2.0/24,50.11,8.68\n198.51.100.0/24,fra\n2001:db8::/32, \
             -33.9 , 151.2\n",
        );
        let v = load_locations(&p).unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!(
            v[0].1,
            Location::Point(GeoPoint {
                lat: 50.11,
                lon: 8.68
            })
        );
        assert_eq!(v[1].1, Location::Named("fra".into()));
        assert_eq!(v[2].0, "2001:db8::/32".parse::<IpNet>().unwrap());
        assert_eq!(
            v[2].1,
            Location::Point(GeoPoint {
                lat: -33.9,
                lon: 151.2
            })
        );

        let cases = [
            ("192.0.2.0/24,91,0\n", ":1: latitude 91 is out of range"),
            (
                "192.0.2.0/24,0,-180.5\n",
                ":1: longitude -180.5 is out of range",
            ),
            (
                "192.0.2.0/24,north,0\n",
                ":1: bad number \"north\" for latitude",
            ),
            (
                "192.0.2.0/24\n",
                ":1: expected 2 fields (prefix,location-name) or 3 (prefix,lat,lon), found 1",
            ),
            ("192.0.2.0/24,1,2,3\n", "found 4"),
            ("192.0.2.0/24,\n", ":1: empty location name"),
            (
                "\n\n2001:db8::1/32,fra\n",
                ":3: bad prefix \"2001:db8::1/32\": host bits are set",
            ),
        ];
        for (i, (text, want)) in cases.iter().enumerate() {
            let p = write(&format!("loc-bad-{i}.csv"), text);
            let e = err(load_locations(&p));
            assert!(e.starts_with(&p.display().to_string()), "{e}");
            assert!(e.contains(want), "case {i}: {e:?} lacks {want:?}");
        }
    }
}
