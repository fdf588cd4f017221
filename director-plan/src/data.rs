//! Every input the config names, read and arranged for the sweep: sorted by prefix.

use std::{
    collections::HashMap,
    net::IpAddr,
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use ipnet::IpNet;

use crate::config::Config;
use crate::engine::Rtt;
use crate::inputs::{self, mrt::PeerSelector};
use crate::model::{GeoPoint, Location, Route};
use crate::prefix::order::{sort_key, sorted};
use crate::report;

/// A site's best route per prefix, sorted.
type Routes = Vec<(IpNet, Route)>;

#[derive(Clone)]
pub struct SiteData {
    /// The site's best route per prefix, sorted.
    pub routes: Vec<(IpNet, Route)>,
    pub igp: HashMap<IpAddr, u32>,
    /// The site's own AS when configured (else each route's peer AS stands for it).
    pub asn: Option<u32>,
    pub point: Option<GeoPoint>,
    /// Distance over the location graph from every node to this site (from where a client
    /// is to where the servers are), if there is a graph.
    pub graph: Option<HashMap<String, f64>>,
    /// Measured RTT from this site per client prefix, sorted.
    pub rtt: Vec<(IpNet, Rtt)>,
    /// Where the live ones among them came from (an agent's), sorted; for `explain`.
    pub rtt_live: Vec<(IpNet, crate::live::rtt::Source)>,
    /// The BMP router whose live routes lie over the files' (`bmp_router`).
    pub bmp_router: Option<String>,
}

/// Cloned for a fleet publisher's map page, which draws the table it published while the
/// publisher lays the next live change over its own copy.
#[derive(Clone)]
pub struct Data {
    pub sites: Vec<SiteData>,
    /// Client locations: the GeoIP database, with the operator's own list winning, sorted.
    pub locations: Vec<(IpNet, Location)>,
    /// Graph nodes with coordinates: a client located by a point is placed at the nearest.
    pub graph_points: Vec<(String, GeoPoint)>,
    /// What was read, as `check` reports it.
    pub summary: report::Inputs,
    pub load_time: Duration,
}

impl Data {
    pub fn load(cfg: &Config) -> Result<Data> {
        // The GeoIP database is read on a thread of its own while the BGP tables are read
        // here: the two are about even at full scale.
        std::thread::scope(|scope| {
            let geo = scope.spawn(|| {
                cfg.geo
                    .database
                    .as_deref()
                    .map(inputs::geo::load)
                    .transpose()
            });
            Data::load_with(cfg, || {
                geo.join().unwrap_or_else(|e| std::panic::resume_unwind(e))
            })
        })
    }

    /// [`Data::load`], with the GeoIP database (if the config names one) from `geo`.
    fn load_with(
        cfg: &Config,
        geo: impl FnOnce() -> Result<Option<inputs::geo::GeoTable>>,
    ) -> Result<Data> {
        let start = Instant::now();
        let mut summary = report::Inputs::default();
        let graph = match &cfg.geo.graph {
            Some(p) => Some(inputs::graph::load(p)?),
            None => None,
        };
        let mut sites = Vec::with_capacity(cfg.sites.len());
        // Sites often share a table (one RIB, a different peer each, or the same file):
        // read each (files, peer) once.
        let mut views: HashMap<(Vec<PathBuf>, Option<String>), Routes> = HashMap::new();
        for s in &cfg.sites {
            let at = || format!("site {:?}", s.name);
            let mut routes = Vec::new();
            let key = (s.bgp.clone(), s.bgp_peer.clone());
            if let Some(r) = views.get(&key) {
                routes = r.clone();
            } else if !s.bgp.is_empty() {
                let peer = s
                    .bgp_peer
                    .as_deref()
                    .map(str::parse::<PeerSelector>)
                    .transpose()
                    .with_context(at)?;
                let view = inputs::mrt::load(&s.bgp, peer.as_ref()).with_context(at)?;
                summary.bgp_records += view.records;
                summary.bgp_damaged_skipped += view.skipped;
                views.insert(key, view.routes.clone());
                routes = view.routes;
            }
            summary.bgp_routes.push(report::SiteRoutes {
                site: s.name.clone(),
                routes: routes.len(),
            });
            let igp = s
                .igp_cost
                .iter()
                .map(|(k, v)| {
                    Ok((
                        k.parse::<IpAddr>()
                            .with_context(|| format!("{}: igp_cost {k:?}", at()))?,
                        *v,
                    ))
                })
                .collect::<Result<_>>()?;
            let point = s.lat.zip(s.lon).map(|(lat, lon)| GeoPoint { lat, lon });
            let graph = match &graph {
                Some(g) => Some(
                    g.shortest_to(s.location.as_deref().unwrap_or(&s.name))
                        .with_context(at)?,
                ),
                None => None,
            };
            sites.push(SiteData {
                routes: sorted(routes),
                igp,
                asn: s.asn,
                point,
                graph,
                rtt: Vec::new(),
                rtt_live: Vec::new(),
                bmp_router: s.bmp_router.clone(),
            });
        }

        let mut locations = Vec::new();
        if let Some(t) = geo()? {
            summary.geo_networks = t.networks.len();
            summary.geo_without_location = t.without_location;
            locations = t
                .networks
                .into_iter()
                .map(|(n, g)| (n, Location::Point(g)))
                .collect();
        }
        if let Some(p) = &cfg.geo.locations {
            let own = inputs::csv::load_locations(p)?;
            summary.own_locations = own.len();
            for (n, l) in &own {
                if let (Location::Named(name), Some(g)) = (l, &graph) {
                    if g.node(name).is_none() {
                        bail!(
                            "{}: {n}: location {name:?} is not a node of the location graph",
                            p.display()
                        );
                    }
                }
            }
            // After the database: `sorted` keeps the last value of a prefix, so these win.
            locations.extend(own);
        }
        let locations = sorted(locations);

        let rtt = load_rtt(cfg)?;
        summary.rtt_measurements = rtt.iter().map(Vec::len).sum();
        for (s, r) in sites.iter_mut().zip(rtt) {
            s.rtt = r;
        }
        let graph_points = graph
            .map(|g| {
                g.nodes()
                    .iter()
                    .filter_map(|n| n.point.map(|p| (n.name.clone(), p)))
                    .collect()
            })
            .unwrap_or_default();
        Ok(Data {
            sites,
            locations,
            graph_points,
            summary,
            load_time: start.elapsed(),
        })
    }
}

/// RTT measurements per site (config order), each site's sorted.
pub type RttTables = Vec<Vec<(IpNet, Rtt)>>;

/// Every RTT file, per site (config order), sorted.
pub fn load_rtt(cfg: &Config) -> Result<RttTables> {
    let site_index: HashMap<&str, usize> = cfg
        .sites
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.as_str(), i))
        .collect();
    let mut rtt: Vec<Vec<(IpNet, Rtt)>> = vec![Vec::new(); cfg.sites.len()];
    for f in &cfg.rtt.files {
        for (net, site, ms) in inputs::csv::load_rtt(f)? {
            let Some(&i) = site_index.get(site.as_str()) else {
                bail!("{}: {net}: unknown site {site:?}", f.display());
            };
            rtt[i].push((net, ms));
        }
    }
    Ok(rtt.into_iter().map(sorted).collect())
}

impl Data {
    /// Takes RTT measurements read again with [`load_rtt`] (looked at before they replace
    /// the old ones); returns the prefixes whose measurement changed at some site (added,
    /// removed or different).
    pub fn replace_rtt(&mut self, new: RttTables) -> Vec<IpNet> {
        let mut changed = Vec::new();
        for (site, fresh) in self.sites.iter_mut().zip(new) {
            let old: HashMap<IpNet, Rtt> = site.rtt.iter().copied().collect();
            let now: HashMap<IpNet, Rtt> = fresh.iter().copied().collect();
            changed.extend(
                fresh
                    .iter()
                    .filter(|(p, v)| old.get(p) != Some(v))
                    .map(|e| e.0),
            );
            changed.extend(
                site.rtt
                    .iter()
                    .filter(|(p, _)| !now.contains_key(p))
                    .map(|e| e.0),
            );
            site.rtt = fresh;
        }
        self.summary.rtt_measurements = self.sites.iter().map(|s| s.rtt.len()).sum();
        changed.sort_unstable_by_key(sort_key);
        changed.dedup();
        changed
    }
}

impl Data {
    /// The `geo` metric from a site to a client location: over the graph when there is one
    /// (a point is placed at the nearest node with coordinates), else the map distance.
    pub fn geo_km(&self, site: &SiteData, loc: &Location) -> Option<f64> {
        match (&site.graph, loc) {
            (Some(g), Location::Named(n)) => g.get(n).copied(),
            (Some(g), Location::Point(p)) => {
                let nearest = self
                    .graph_points
                    .iter()
                    .min_by(|a, b| a.1.km_to(*p).total_cmp(&b.1.km_to(*p)))?;
                g.get(&nearest.0).copied()
            }
            (None, Location::Point(p)) => site.point.map(|s| s.km_to(*p)),
            (None, Location::Named(_)) => None,
        }
    }
}
