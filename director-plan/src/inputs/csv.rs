//! Small comma-separated inputs: measured RTTs and operator-given client locations.
//!
//! Plain lines, fields separated by commas and trimmed; no quoting. Blank lines and lines
//! whose first non-blank character is '#' are ignored, and so is a first line whose first
//! field is `prefix` (a header). Every error names `file:line` and what is wrong.
//!
//! - RTT: `prefix,site,rtt_ms`, e.g. `192.0.2.0/24,fra,12.5`: a plain decimal >= 0 with at
//!   most six decimals (whole nanoseconds), read exactly (see [`parse_rtt`]).
//! - Locations: `prefix,lat,lon` (degrees, -90..90 and -180..180) or `prefix,location-name`
//!   (a node of the location graph, see [`super::graph`]).
//!
//! A prefix is `ADDRESS/LENGTH` with no host bits set: `192.0.2.0/24`, `2001:db8::/32`.

use std::path::Path;

use anyhow::{bail, Result};

use crate::engine::Rtt;
use crate::model::{GeoPoint, IpNet, Location};

/// `prefix,site,rtt_ms` lines.
pub fn load_rtt(path: &Path) -> Result<Vec<(IpNet, String, Rtt)>> {
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
        out.push((prefix, site, parse_rtt(rtt)?));
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

/// Highest RTT a file may give: 100 s, far above any network's. The bound keeps a
/// nanosecond apart in the sort's keys too (40 significant bits resolve 0.1 ns at 100 s).
const MAX_RTT_MS: u64 = 100_000;

/// Milliseconds as a plain decimal (`12`, `12.5`, `0.000001`) into exact nanoseconds: no
/// float is involved, so the rtt tolerance compares exactly the values the file holds.
/// Refused: a sign, an exponent, more than six decimals, more than 100 s.
pub(crate) fn parse_rtt(text: &str) -> Result<Rtt> {
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if text.starts_with('-') && text.len() > 1 {
        bail!("rtt_ms {text} is negative");
    }
    if int.is_empty() && frac.is_empty() || !digits(int) || !digits(frac) {
        bail!("bad number {text:?} for rtt_ms: expected a plain decimal such as 12.5");
    }
    if frac.len() > 6 {
        bail!(
            "rtt_ms {text} has {} decimals: at most 6 (whole nanoseconds) are kept exactly",
            frac.len()
        );
    }
    let ms: u64 = match int.trim_start_matches('0') {
        "" => 0,
        i if i.len() <= 9 => i.parse().unwrap_or(u64::MAX),
        _ => u64::MAX,
    };
    if ms > MAX_RTT_MS || ms == MAX_RTT_MS && frac.bytes().any(|b| b != b'0') {
        bail!("rtt_ms {text} is more than {MAX_RTT_MS} ms");
    }
    let mut ns = ms * Rtt::NS_PER_MS;
    let mut scale = Rtt::NS_PER_MS;
    for b in frac.bytes() {
        scale /= 10;
        ns += u64::from(b - b'0') * scale;
    }
    Ok(Rtt(ns))
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
                (
                    "192.0.2.0/24".parse().unwrap(),
                    "fra".to_string(),
                    Rtt(12_500_000)
                ),
                ("2001:db8::/32".parse().unwrap(), "ams".to_string(), Rtt(0)),
                (
                    "10.0.0.0/8".parse().unwrap(),
                    "lon".to_string(),
                    Rtt(3_000_000)
                ),
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
            ("10.0.0.0/8,fra,1e3\n", ":1: bad number \"1e3\" for rtt_ms"),
            ("10.0.0.0/8,fra,.\n", ":1: bad number \".\" for rtt_ms"),
            (
                "10.0.0.0/8,fra,1.0000001\n",
                ":1: rtt_ms 1.0000001 has 7 decimals",
            ),
            (
                "10.0.0.0/8,fra,100000.5\n",
                ":1: rtt_ms 100000.5 is more than 100000 ms",
            ),
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
    fn rtt_decimals_are_read_exactly() {
        let ns = |t: &str| parse_rtt(t).unwrap().0;
        assert_eq!(ns("10.2"), 10_200_000);
        assert_eq!(ns("11.22"), 11_220_000);
        assert_eq!(ns("0.000001"), 1);
        assert_eq!(ns("007.5"), 7_500_000);
        assert_eq!(ns("5."), 5_000_000);
        assert_eq!(ns(".5"), 500_000);
        assert_eq!(ns("100000"), 100_000 * 1_000_000);
        assert_eq!(ns("100000.000"), 100_000 * 1_000_000);
    }

    proptest::proptest! {
        /// Every value a file can hold reads back to exactly the nanoseconds it spells.
        #[test]
        fn any_six_decimal_rtt_is_exact(ms in 0u64..100_000, frac in 0u64..1_000_000) {
            let text = format!("{ms}.{frac:06}");
            proptest::prop_assert_eq!(parse_rtt(&text).unwrap().0, ms * 1_000_000 + frac);
        }
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
