//! Real points of presence (e.g. `shared/data/sites/cloudflare-colos.csv`), to place sites
//! at real places in tests and benchmarks.
//!
//! The file is CSV with a header naming the columns; fields may be double-quoted (a name like
//! `"Amsterdam, Netherlands"`), with `""` for a quote inside. Columns are found by name:
//! `colo` (or `iata`/`code`), `lat`, `lon` (or `lng`) are required; `name`, `region`, `city`,
//! `country`, `cca2` are optional and empty when missing (the Cloudflare list has rows with an
//! empty country, e.g. HKG and TPE). Codes must be unique.
//!
//! A row with both `lat` and `lon` empty cannot be placed: it is left out (logged, with its
//! code). The Cloudflare list has 31 such rows (KIV and 30 PoPs in mainland China, e.g. SHA,
//! CAN, CTU), so 308 of its 339 PoPs come out. A row with only one of them empty is an error.

use std::collections::HashSet;
use std::path::Path;

use anyhow::{bail, Result};

use crate::model::GeoPoint;

/// A point of presence.
#[derive(Clone, Debug, PartialEq)]
pub struct Pop {
    /// IATA code, e.g. "FRA".
    pub code: String,
    /// Display name, e.g. "Frankfurt, Germany".
    pub name: String,
    pub region: String,
    pub city: String,
    pub country: String,
    /// ISO 3166-1 alpha-2 country code, e.g. "DE".
    pub cca2: String,
    pub point: GeoPoint,
}

/// Read a PoP list; errors name `file:line` and the problem.
pub fn load_pops(path: &Path) -> Result<Vec<Pop>> {
    let file = path.display();
    let text = super::read_text(path, "PoP list")?;
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim_end_matches('\r')))
        .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
    let Some((hline, header)) = lines.next() else {
        bail!("{file}: empty, no header line")
    };
    let header = split_csv(header).map_err(|e| anyhow::anyhow!("{file}:{hline}: {e}"))?;
    let col = |names: &[&str]| {
        header.iter().position(|h| {
            names.iter().any(|n| {
                h.trim()
                    .trim_start_matches('\u{feff}')
                    .eq_ignore_ascii_case(n)
            })
        })
    };
    let need = |names: &[&str]| match col(names) {
        Some(i) => Ok(i),
        None => bail!(
            "{file}:{hline}: header lacks a {:?} column (it has {:?})",
            names[0],
            header
        ),
    };
    let (c_code, c_lat, c_lon) = (
        need(&["colo", "iata", "code"])?,
        need(&["lat", "latitude"])?,
        need(&["lon", "lng", "longitude"])?,
    );
    let opt = [
        col(&["name"]),
        col(&["region"]),
        col(&["city"]),
        col(&["country"]),
        col(&["cca2", "country_code"]),
    ];
    let mut seen = HashSet::new();
    let mut pops = Vec::new();
    let mut unplaced = Vec::new();
    for (n, line) in lines {
        let (code, pop) = (|| {
            let f = split_csv(line)?;
            if f.len() != header.len() {
                bail!(
                    "expected {} fields as in the header, found {}",
                    header.len(),
                    f.len()
                );
            }
            let code = f[c_code].trim().to_string();
            if code.is_empty() {
                bail!("empty code");
            }
            if !seen.insert(code.clone()) {
                bail!("duplicate code {code:?}");
            }
            if f[c_lat].trim().is_empty() && f[c_lon].trim().is_empty() {
                return Ok((code, None));
            }
            let num = |i: usize, what: &str| match f[i].trim().parse::<f64>() {
                Ok(x) if x.is_finite() => Ok(x),
                _ => bail!("bad number {:?} for {what}", f[i]),
            };
            let point = super::csv::check_lat_lon(num(c_lat, "lat")?, num(c_lon, "lon")?)?;
            let o = |k: usize| opt[k].map(|i| f[i].trim().to_string()).unwrap_or_default();
            let pop = Pop {
                code: code.clone(),
                name: o(0),
                region: o(1),
                city: o(2),
                country: o(3),
                cca2: o(4),
                point,
            };
            Ok((code, Some(pop)))
        })()
        .map_err(|e| anyhow::anyhow!("{file}:{n}: {e:#}"))?;
        match pop {
            Some(p) => pops.push(p),
            None => unplaced.push(code),
        }
    }
    if !unplaced.is_empty() {
        log::warn!(
            "{file}: {} PoPs without lat/lon left out: {}",
            unplaced.len(),
            unplaced.join(" ")
        );
    }
    if pops.is_empty() {
        bail!("{file}: no PoP rows after the header");
    }
    Ok(pops)
}

/// Split one CSV line, honouring double quotes.
fn split_csv(line: &str) -> Result<Vec<String>> {
    let mut fields = Vec::new();
    let mut cur = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (false, ',') => fields.push(std::mem::take(&mut cur)),
            (false, '"') if cur.trim().is_empty() => {
                cur.clear();
                quoted = true;
            }
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                cur.push('"');
            }
            (true, '"') => {
                quoted = false;
                // only spaces may follow a closing quote before the comma
                while let Some(&n) = chars.peek() {
                    if n == ',' {
                        break;
                    }
                    if !n.is_whitespace() {
                        bail!("text after a closing quote: {line:?}");
                    }
                    chars.next();
                }
            }
            (_, c) => cur.push(c),
        }
    }
    if quoted {
        bail!("unterminated quote: {line:?}");
    }
    fields.push(cur);
    Ok(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_sites_cloudflare_colos() {
        let pops = load_pops(&crate::inputs::test_data("sites/cloudflare-colos.csv")).unwrap();
        // 339 rows, 31 of them without coordinates (left out).
        assert_eq!(pops.len(), 308);
        assert!(!pops.iter().any(|p| p.code == "SHA" || p.code == "KIV"));
        let ams = pops.iter().find(|p| p.code == "AMS").unwrap();
        assert_eq!(ams.name, "Amsterdam, Netherlands");
        assert_eq!(ams.city, "Amsterdam");
        assert_eq!(ams.country, "Netherlands");
        assert_eq!(ams.cca2, "NL");
        assert_eq!(
            ams.point,
            GeoPoint {
                lat: 52.308601,
                lon: 4.76389
            }
        );
        let fra = pops.iter().find(|p| p.code == "FRA").unwrap();
        assert_eq!(fra.cca2, "DE");
        assert!(
            (fra.point.lat - 50.0).abs() < 0.5 && (fra.point.lon - 8.6).abs() < 0.5,
            "{fra:?}"
        );
        let hkg = pops.iter().find(|p| p.code == "HKG").unwrap();
        assert_eq!((hkg.country.as_str(), hkg.cca2.as_str()), ("", "HK"));
        assert!(pops
            .iter()
            .all(|p| p.code.len() == 3 && p.code.chars().all(|c| c.is_ascii_uppercase())));
    }

    #[test]
    fn inputs_sites_errors() {
        let dir =
            std::env::temp_dir().join(format!("director-inputs-sites-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cases = [
            (
                "colo,name,lat,lon\nAMS,\"Amsterdam, NL\",52.3,4.7\nAMS,x,1,2\n",
                ":3: duplicate code \"AMS\"",
            ),
            (
                "colo,name,lat,lon\nAMS,\"Amsterdam, NL,52.3,4.7\n",
                ":2: unterminated quote",
            ),
            (
                "colo,name,lat,lon\nAMS,x,95,4.7\n",
                ":2: latitude 95 is out of range",
            ),
            (
                "colo,name,lat,lon\nAMS,x,52\n",
                ":2: expected 4 fields as in the header, found 3",
            ),
            (
                "colo,name,lat,lon\nAMS,x,52,\n",
                ":2: bad number \"\" for lon",
            ),
            ("colo,name,lat,lon\nAMS,x,,\n", "no PoP rows"),
            ("colo,name,latitude\n", ":1: header lacks a \"lon\" column"),
            ("colo,name,lat,lon\n", "no PoP rows"),
        ];
        for (i, (text, want)) in cases.iter().enumerate() {
            let p = dir.join(format!("pops-{i}.csv"));
            std::fs::write(&p, text).unwrap();
            let e = load_pops(&p).unwrap_err().to_string();
            assert!(e.starts_with(&p.display().to_string()), "{e}");
            assert!(e.contains(want), "case {i}: {e:?} lacks {want:?}");
        }
        let q = split_csv(r#"a, "b ""c"", d" ,e"#).unwrap();
        assert_eq!(q, vec!["a", "b \"c\", d", "e"]);
    }
}
