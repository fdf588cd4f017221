//! The controller: a config and its data in, kernel decisions out, kept equal as the inputs
//! change. Data flows one way:
//!
//! config + inputs (files → plain data, [`model`]) → data (everything arranged by prefix)
//! → decide (per prefix and service: metrics and the [`engine`]'s sort, no I/O) → compile
//! (decisions to the fewest LPM entries, and diffs) → apply (the only part that writes,
//! through `kernel::Maps`). [`run`] drives it, with [`guard`] refusing changes that remove too
//! much; [`check`] and [`explain`] stop before apply.

pub mod apply;
pub mod compile;
pub mod config;
pub mod data;
pub mod decide;
pub mod engine;
pub mod explain;
pub mod front16;
pub mod guard;
pub mod inputs;
pub mod minimal;
pub mod model;
pub mod rrl;
pub mod run;
pub mod sweep;

use std::net::IpAddr;
use std::path::Path;

use anyhow::Result;

use crate::api;
use config::Config;
use data::Data;
use decide::{compute, Ids};

/// `check`: validates a config and everything it reads, and says what `run` would write.
/// Touches nothing.
pub fn check(path: &Path) -> Result<api::Check> {
    let cfg = Config::load(path)?;
    let data = Data::load(&cfg)?;
    let c = compute(&cfg, &data, &Ids::positional(&cfg), &Default::default())?;
    c.fits()?;
    let tables = c.summary();
    Ok(api::Check {
        version: api::VERSION,
        sites: cfg.sites.len(),
        servers: cfg.servers.len(),
        services: cfg.services.len(),
        prefixes: c.prefixes,
        entries: tables.iter().map(|t| t.entries).sum(),
        saved: tables.iter().map(|t| t.saved).sum(),
        tables,
        load_seconds: data.load_time.as_secs_f64(),
        inputs: data.summary,
        compute_seconds: c.seconds,
    })
}

/// `explain`: every server's metrics for `client`, the sort's levels, and why the winners
/// won.
pub fn explain(path: &Path, service: &str, client: IpAddr) -> Result<api::Explain> {
    let cfg = Config::load(path)?;
    let data = Data::load(&cfg)?;
    explain::explain(&cfg, &data, service, client)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The geo metric over a directed graph runs from the client's node to the site's
    /// (DIY-CDN: "from all vertices of the graph (where visitors of our site can be
    /// located) to the locations of resources"): on one-way edges the nearer site by that
    /// direction wins, whatever the way back costs.
    #[test]
    fn graph_distance_runs_from_the_client_to_the_site() {
        let dir = std::env::temp_dir().join(format!("director-graph-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();
        write(
            "graph.toml",
            "[[node]]\nname = \"ams\"\n[[node]]\nname = \"fra\"\n[[node]]\nname = \"nyc\"\n\
             [[edge]]\nfrom = \"ams\"\nto = \"fra\"\ncost = 50\n\
             [[edge]]\nfrom = \"fra\"\nto = \"ams\"\ncost = 1\n\
             [[edge]]\nfrom = \"ams\"\nto = \"nyc\"\ncost = 10\n\
             [[edge]]\nfrom = \"nyc\"\nto = \"ams\"\ncost = 100\n",
        );
        write("locations.csv", "192.0.2.0/24,ams\n");
        write(
            "director.toml",
            "[geo]\ngraph = \"graph.toml\"\nlocations = \"locations.csv\"\n\
             [[site]]\nname = \"fra\"\n[[site]]\nname = \"nyc\"\n\
             [[server]]\nname = \"fra-1\"\nsite = \"fra\"\nipv4 = \"198.51.100.10\"\n\
             [[server]]\nname = \"nyc-1\"\nsite = \"nyc\"\nipv4 = \"198.51.100.20\"\n\
             [[service]]\nname = \"www.example.com\"\nservers = [\"fra-1\", \"nyc-1\"]\n\
             priority = { geo = 1 }\n",
        );
        let client = "192.0.2.7".parse().unwrap();
        let e = explain(&dir.join("director.toml"), "www.example.com", client);
        let _ = std::fs::remove_dir_all(&dir);
        let e = e.unwrap();
        let geo: Vec<(&str, Option<f64>)> = e
            .servers
            .iter()
            .map(|s| (s.server.as_str(), s.metrics.geo))
            .collect();
        assert_eq!(geo, [("fra-1", Some(50.0)), ("nyc-1", Some(10.0))]);
        let winners: Vec<&str> = e.sort.tiers[0]
            .chosen
            .iter()
            .map(|c| c.server.as_str())
            .collect();
        assert_eq!(winners, ["nyc-1"]);
    }

    /// explain shows every value with its source, the true rtt limit (10.2 ms, tolerance
    /// 10: 11.22 ms, which keeps the row beneath it), the pick and its odds, and nothing
    /// that does not apply (no rtt tolerance for a service without rtt).
    #[test]
    fn explain_shows_sources_true_limits_and_the_pick() {
        let dir = std::env::temp_dir().join(format!("director-explain-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();
        write("locations.csv", "192.0.2.0/24,50.0,8.0\n");
        write(
            "rtt.csv",
            "192.0.2.0/24,fra,10.2\n192.0.2.0/24,ams,11.22\n192.0.2.0/24,nyc,11.220001\n",
        );
        write(
            "director.toml",
            "[geo]\nlocations = \"locations.csv\"\n[rtt]\nfiles = [\"rtt.csv\"]\n\
             [[site]]\nname = \"fra\"\nlat = 50.1\nlon = 8.7\n\
             [[site]]\nname = \"ams\"\nlat = 52.4\nlon = 4.9\n\
             [[site]]\nname = \"nyc\"\nlat = 40.7\nlon = -74.0\n\
             [[server]]\nname = \"fra-1\"\nsite = \"fra\"\nipv4 = \"198.51.100.10\"\n\
             [[server]]\nname = \"ams-1\"\nsite = \"ams\"\nipv4 = \"198.51.100.20\"\n\
             [[server]]\nname = \"nyc-1\"\nsite = \"nyc\"\nipv4 = \"198.51.100.30\"\n\
             [[service]]\nname = \"rtt.example.com\"\nservers = [\"fra-1\", \"ams-1\", \"nyc-1\"]\n\
             priority = { rtt = 1, portion = 2 }\nportion = { \"fra-1\" = 1, \"ams-1\" = 3 }\n\
             [[service]]\nname = \"geo.example.com\"\nservers = [\"fra-1\", \"ams-1\"]\n\
             priority = { admin = 1 }\n",
        );
        let client = "192.0.2.7".parse().unwrap();
        let path = dir.join("director.toml");
        let rtt = explain(&path, "rtt.example.com", client);
        let geo = explain(&path, "geo.example.com", client);
        let _ = std::fs::remove_dir_all(&dir);
        let (rtt, geo) = (rtt.unwrap(), geo.unwrap());
        let fra = &rtt.servers[0];
        let m = fra.rtt.as_ref().unwrap();
        assert_eq!(
            (m.ms, m.file.as_ref().unwrap().ends_with("rtt.csv")),
            (10.2, true)
        );
        let loc = fra.location.as_ref().unwrap();
        assert!(loc.file.as_ref().unwrap().ends_with("locations.csv"));
        let step = &rtt.sort.tiers[0].steps[0];
        assert_eq!((step.rtt_lowest, step.rtt_limit), (Some(10.2), Some(11.22)));
        let kept: Vec<_> = step.rows.iter().map(|r| r.result).collect();
        assert_eq!(
            kept,
            [
                api::RowResult::Kept,
                api::RowResult::Kept,
                api::RowResult::Out
            ]
        );
        assert_eq!(rtt.sort.draw, Some(engine::Metric::Portion));
        assert_eq!(rtt.pick.rule, api::PickRule::PortionDraw);
        let odds: Vec<(&str, f64)> = rtt
            .pick
            .odds
            .iter()
            .map(|o| (o.server.as_str(), o.share))
            .collect();
        assert_eq!(odds, [("fra-1", 0.25), ("ams-1", 0.75)]);
        let text = crate::cli::print::explain(&rtt);
        for want in [
            "up to 11.22 ms counts as 10.2",
            "rtt 10.2 ms for 192.0.2.0/24",
            "drawn per query by portion: fra-1 25.0%, ams-1 75.0%",
        ] {
            assert!(text.contains(want), "{want:?} not in\n{text}");
        }
        // No rtt in the policy: no tolerance; a tie without a draw: the client hash.
        assert_eq!(geo.sort.rtt_tolerance_percent, None);
        assert_eq!(geo.select, director_common::select::Mode::Client);
        assert_eq!(geo.pick.rule, api::PickRule::ClientHash);
        assert!(geo.pick.this_client.is_some());
        let text = crate::cli::print::explain(&geo);
        assert!(!text.contains("tolerance"), "{text}");
        assert!(
            text.contains("a hash of the client's address picks"),
            "{text}"
        );
    }
}
