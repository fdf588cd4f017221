//! Who goes where, as a map draws it: every client network the GeoIP data (or the operator's
//! own list) places somewhere, laid over one service's decision table, summed per grid cell
//! into the share of that cell's clients each site receives.
//!
//! The table is read as the kernel reads it (longest prefix wins), and a location network
//! that the table splits is split too: the parts under a more specific entry go where that
//! entry says, the rest where the covering entry says. Clients are counted in networks of
//! the size resolvers and ECS use: IPv4 /24s and IPv6 /48s (a /16 weighs 256, a /26 a
//! quarter), so a cell's shares are shares of its clients, not of its GeoIP records.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use ipnet::IpNet;

use crate::model::{GeoPoint, Location};
use crate::prefix::order::subtree_range;
use crate::prefix::sweep::Sweep;

/// One grid cell with clients in it.
#[derive(Clone, Debug, PartialEq)]
pub struct Cell {
    /// The cell's south-west corner, in degrees.
    pub lat: f64,
    pub lon: f64,
    /// Clients per site index; the last slot is the clients no entry covers (the kernel
    /// passes or falls back for them).
    pub weights: Vec<f64>,
    /// The first address of the cell's largest client network: an address to `explain`
    /// that stands for the cell.
    pub sample: IpAddr,
    sample_weight: f64,
}

impl Cell {
    pub fn total(&self) -> f64 {
        self.weights.iter().sum()
    }

    /// The slot with the most clients (ties: the lower index, so the result is stable).
    pub fn dominant(&self) -> usize {
        let mut best = 0;
        for (i, w) in self.weights.iter().enumerate() {
            if *w > self.weights[best] {
                best = i;
            }
        }
        best
    }
}

/// Clients in a network, in /24s (IPv4) or /48s (IPv6).
pub fn clients(p: &IpNet) -> f64 {
    let unit = if matches!(p, IpNet::V4(_)) { 24 } else { 48 };
    2f64.powi(unit - i32::from(p.prefix_len()))
}

/// Lays `locations` (sorted by the table order) over `entries` (a service's table, sorted,
/// each prefix once). `shares[i]` says how entry `i`'s clients divide among the `sites`
/// (pairs of site index and share summing to 1; empty: nowhere, counted as uncovered).
/// `points` places named locations (graph nodes); a named location without a point is
/// left out. Cells are `grid` degrees square; the result is in (lat, lon) order.
pub fn atlas(
    locations: &[(IpNet, Location)],
    points: &[(String, GeoPoint)],
    entries: &[(IpNet, usize)],
    shares: &[Vec<(usize, f64)>],
    sites: usize,
    grid: f64,
) -> Vec<Cell> {
    let grid = if grid.is_finite() && grid > 0.0 {
        grid
    } else {
        1.0
    };
    let named: HashMap<&str, GeoPoint> = points.iter().map(|(n, p)| (n.as_str(), *p)).collect();
    let mut cells: BTreeMap<(i32, i32), Cell> = BTreeMap::new();
    let mut sweep = Sweep::new(entries);
    let mut parts: Vec<(Option<usize>, f64)> = Vec::new();
    for (net, loc) in locations {
        let point = match loc {
            Location::Point(p) => Some(*p),
            Location::Named(n) => named.get(n.as_str()).copied(),
        };
        // The sweep is called for every location, placed or not, to keep it in order.
        let base = sweep.at(net).copied();
        let Some(point) = point else { continue };
        split(net, base, entries, &mut parts);
        let key = (
            ((point.lat.clamp(-90.0, 89.999) + 90.0) / grid).floor() as i32,
            ((point.lon.clamp(-180.0, 179.999) + 180.0) / grid).floor() as i32,
        );
        let cell = cells.entry(key).or_insert_with(|| Cell {
            lat: f64::from(key.0) * grid - 90.0,
            lon: f64::from(key.1) * grid - 180.0,
            weights: vec![0.0; sites + 1],
            sample: net.network(),
            sample_weight: 0.0,
        });
        let w = clients(net);
        if w > cell.sample_weight
            || (w == cell.sample_weight && net.network().is_ipv4() && cell.sample.is_ipv6())
        {
            cell.sample = net.network();
            cell.sample_weight = w;
        }
        for (entry, w) in &parts {
            let to = entry.and_then(|e| shares.get(e)).filter(|s| !s.is_empty());
            match to {
                Some(s) => {
                    for (site, share) in s {
                        if let Some(slot) = cell.weights.get_mut((*site).min(sites)) {
                            *slot += w * share;
                        }
                    }
                }
                None => cell.weights[sites] += w,
            }
        }
    }
    cells.into_values().collect()
}

/// `net`'s clients by the entry that answers them: those under entries inside `net` by
/// each such entry (less what its own more specific entries take), the rest by `base`,
/// the entry covering `net`.
fn split(
    net: &IpNet,
    base: Option<usize>,
    entries: &[(IpNet, usize)],
    out: &mut Vec<(Option<usize>, f64)>,
) {
    out.clear();
    let inside = subtree_range(entries, net);
    let inside = &entries[inside];
    // An entry equal to `net` is `base` already.
    let inside = match inside.first() {
        Some((p, _)) if p == net => &inside[1..],
        _ => inside,
    };
    if inside.is_empty() {
        out.push((base, clients(net)));
        return;
    }
    // Table order puts a prefix before those it covers: a stack of open entries with what
    // their children have taken so far gives each entry's own share.
    let mut stack: Vec<(&IpNet, usize, f64)> = Vec::new();
    let mut top_level = 0.0;
    for (p, e) in inside {
        while let Some((q, qe, taken)) = stack.last().copied() {
            if q.contains(p) {
                break;
            }
            out.push((Some(qe), clients(q) - taken));
            stack.pop();
        }
        match stack.last_mut() {
            Some(parent) => parent.2 += clients(p),
            None => top_level += clients(p),
        }
        stack.push((p, *e, 0.0));
    }
    while let Some((q, qe, taken)) = stack.pop() {
        out.push((Some(qe), clients(q) - taken));
    }
    out.push((base, clients(net) - top_level));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    fn at(lat: f64, lon: f64) -> Location {
        Location::Point(GeoPoint { lat, lon })
    }

    #[test]
    fn a_location_takes_the_covering_entrys_sites() {
        let locations = vec![(net("192.0.2.0/24"), at(50.1, 8.6))];
        let entries = vec![(net("0.0.0.0/0"), 0), (net("192.0.0.0/16"), 1)];
        let shares = vec![vec![(0, 1.0)], vec![(1, 1.0)]];
        let cells = atlas(&locations, &[], &entries, &shares, 2, 1.0);
        assert_eq!(cells.len(), 1);
        assert_eq!(cells[0].weights, vec![0.0, 1.0, 0.0]);
        assert_eq!(cells[0].lat, 50.0);
        assert_eq!(cells[0].lon, 8.0);
        assert_eq!(cells[0].dominant(), 1);
        assert_eq!(cells[0].sample, "192.0.2.0".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn a_location_the_table_splits_is_split() {
        // A /22 location; the table sends one /24 inside it elsewhere, and a /25 inside
        // that /24 back again.
        let locations = vec![(net("198.51.100.0/22"), at(40.7, -74.0))];
        let entries = vec![
            (net("198.51.0.0/16"), 0),
            (net("198.51.101.0/24"), 1),
            (net("198.51.101.0/25"), 0),
        ];
        let shares = vec![vec![(0, 1.0)], vec![(1, 1.0)]];
        let cells = atlas(&locations, &[], &entries, &shares, 2, 1.0);
        assert_eq!(cells[0].weights, vec![3.5, 0.5, 0.0]);
        assert_eq!(cells[0].total(), 4.0);
    }

    #[test]
    fn uncovered_clients_and_shared_decisions() {
        let locations = vec![
            (net("203.0.113.0/24"), at(35.6, 139.7)),
            (net("2001:db8::/47"), at(35.7, 139.8)),
        ];
        // Only IPv4 has a table; its one entry shares answers between two sites.
        let entries = vec![(net("203.0.113.0/24"), 0)];
        let shares = vec![vec![(0, 0.75), (1, 0.25)]];
        let cells = atlas(&locations, &[], &entries, &shares, 2, 1.0);
        assert_eq!(cells.len(), 1);
        assert_eq!(cells[0].weights, vec![0.75, 0.25, 2.0]);
        assert_eq!(cells[0].dominant(), 2);
        // The IPv6 /47 holds more clients, so it stands for the cell.
        assert_eq!(cells[0].sample, "2001:db8::".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn named_locations_use_the_graphs_points_and_cells_follow_the_grid() {
        let locations = vec![
            (net("192.0.2.0/25"), Location::Named("fra".into())),
            (net("192.0.2.128/25"), Location::Named("nowhere".into())),
            (net("198.51.100.0/24"), at(-33.9, 151.2)),
        ];
        let points = vec![(
            "fra".to_string(),
            GeoPoint {
                lat: 50.1,
                lon: 8.7,
            },
        )];
        let entries = vec![(net("0.0.0.0/0"), 0)];
        let shares = vec![vec![(0, 1.0)]];
        let cells = atlas(&locations, &points, &entries, &shares, 1, 10.0);
        assert_eq!(cells.len(), 2);
        // South first.
        assert_eq!((cells[0].lat, cells[0].lon), (-40.0, 150.0));
        assert_eq!((cells[1].lat, cells[1].lon), (50.0, 0.0));
        assert_eq!(cells[1].weights, vec![0.5, 0.0]);
    }

    #[test]
    fn shares_are_conserved() {
        // Whatever the table, every location's clients land in exactly one cell's slots.
        let locations: Vec<(IpNet, Location)> = (0..64u32)
            .map(|i| {
                let n = IpNet::new(std::net::Ipv4Addr::from(0xC000_0000 + (i << 12)).into(), 20)
                    .unwrap();
                (n, at(f64::from(i) - 30.0, f64::from(i) * 2.0))
            })
            .collect();
        let entries: Vec<(IpNet, usize)> = vec![
            (net("192.0.0.0/12"), 0),
            (net("192.0.16.0/21"), 1),
            (net("192.0.17.0/24"), 2),
            (net("192.0.64.0/18"), 1),
        ];
        let shares = vec![vec![(0, 1.0)], vec![(1, 1.0)], vec![(2, 0.5), (0, 0.5)]];
        let cells = atlas(&locations, &[], &entries, &shares, 3, 3.0);
        let total: f64 = cells.iter().map(Cell::total).sum();
        assert_eq!(total, 64.0 * 16.0);
        let site1: f64 = cells.iter().map(|c| c.weights[1]).sum();
        // 192.0.16.0/21 less its /24, and the /18 (4 locations of /20).
        assert_eq!(site1, 8.0 - 1.0 + 64.0);
    }
}
