//! The full-scale benchmark data every controller-side bench reads: the full IPv4 table
//! (BGP4MP_ET updates) as every site's view, the full GeoLite2 City database, five sites at
//! real PoPs (their servers in 198.51.100.0/24), three services, and an RTT file.

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};
use director_plan::inputs::sites::load_pops;

use crate::netns::workspace_root;

pub const SITES: [&str; 5] = ["FRA", "IAD", "GRU", "SIN", "SYD"];

pub fn data(rel: &str) -> Result<PathBuf> {
    let p = workspace_root().join("../shared/data").join(rel);
    if !p.is_file() {
        bail!(
            "{} is missing: the checkout needs shared/ beside it (shared/data/README.md)",
            p.display()
        );
    }
    Ok(p)
}

/// The benchmark's config: five PoPs, one server each, three services sorting differently.
pub fn write_config(dir: &Path) -> Result<PathBuf> {
    let table = data("bgp/updates.et-header.2015.gz")?;
    let mut c = String::new();
    let list = sites_and_servers(&mut c, &SITES, Some(&table))?;
    writeln!(
        c,
        "[[service]]\nname = \"www.example.com\"\nservers = [{list}]\n\
         priority = {{ geo = 1, admin = 2 }}\n"
    )?;
    writeln!(
        c,
        "[[service]]\nname = \"video.example.com\"\nservers = [{list}]\n\
         priority = {{ rtt = 1, geo = 2 }}\n"
    )?;
    writeln!(
        c,
        "[[service]]\nname = \"api.example.com\"\nservers = [{list}]\n\
         weights = {{ ext = 1, geo = 0.01 }}\n"
    )?;
    writeln!(c, "[rtt]\nfiles = [\"rtt.csv\"]")?;
    std::fs::write(dir.join("rtt.csv"), rtt_file(40.0))?;
    let path = dir.join("director.toml");
    std::fs::write(&path, c)?;
    Ok(path)
}

/// The GeoLite2 database, then for each PoP code a site (with `bgp`'s table, if given) and
/// one server `<code>-1` (preference by position) written to `c`; returns the servers as
/// a TOML list's items.
pub fn sites_and_servers(c: &mut String, codes: &[&str], bgp: Option<&Path>) -> Result<String> {
    let pops = load_pops(&data("sites/cloudflare-colos.csv")?)?;
    writeln!(
        c,
        "[geo]\ndatabase = {:?}\n",
        data("geo/GeoLite2-City.mmdb")?
    )?;
    let mut servers = Vec::new();
    for (i, code) in codes.iter().enumerate() {
        let p = pops
            .iter()
            .find(|p| p.code == *code)
            .with_context(|| format!("PoP {code} not in the list"))?;
        let name = code.to_lowercase();
        writeln!(
            c,
            "[[site]]\nname = {name:?}\nlat = {}\nlon = {}",
            p.point.lat, p.point.lon
        )?;
        if let Some(table) = bgp {
            writeln!(c, "bgp = [{table:?}]")?;
        }
        writeln!(
            c,
            "\n[[server]]\nname = \"{name}-1\"\nsite = {name:?}\n\
             ipv4 = \"198.51.100.{}\"\npreference = {}\n",
            10 + i,
            i
        )?;
        servers.push(format!("\"{name}-1\""));
    }
    Ok(servers.join(", "))
}

/// RTTs for the client network 192.0.2.0/24 (where the lab's client lives): `fra_ms` from
/// fra, 80 ms from every other site.
pub fn rtt_file(fra_ms: f64) -> String {
    let mut s = String::new();
    for code in SITES {
        let ms = if code == "FRA" { fra_ms } else { 80.0 };
        let _ = writeln!(s, "192.0.2.0/24,{},{ms}", code.to_lowercase());
    }
    s
}
