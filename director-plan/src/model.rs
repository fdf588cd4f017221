//! The controller's data model: what the input readers produce and the engine consumes.
//! Plain data, no I/O, no aya.

use std::net::IpAddr;

pub use ipnet::IpNet;

/// A site's best BGP route to a prefix, as its MRT view shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// AS-path length (the `ext` metric); an AS_SET counts as one (RFC 4271 §9.1.2.2).
    pub path_len: u32,
    /// The neighbouring AS the route was learnt from (the path's first AS): its exit AS.
    pub neighbor_as: u32,
    /// The AS of the BGP peer whose view this is (the site's own AS unless configured).
    pub peer_as: u32,
    /// BGP next hop (the `int` metric is the site's IGP cost to it).
    pub next_hop: IpAddr,
    /// MULTI_EXIT_DISC, if the route carried one.
    pub med: Option<u32>,
}

/// A point on Earth, degrees.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GeoPoint {
    pub lat: f64,
    pub lon: f64,
}

impl GeoPoint {
    /// Great-circle distance in km (haversine, mean Earth radius).
    pub fn km_to(self, b: GeoPoint) -> f64 {
        let (la1, la2) = (self.lat.to_radians(), b.lat.to_radians());
        let dlat = la2 - la1;
        let dlon = (b.lon - self.lon).to_radians();
        let h = (dlat / 2.0).sin().powi(2) + la1.cos() * la2.cos() * (dlon / 2.0).sin().powi(2);
        2.0 * 6371.0 * h.sqrt().min(1.0).asin()
    }
}

/// Where a client network is: a point, or a node of the operator's location graph.
#[derive(Clone, Debug, PartialEq)]
pub enum Location {
    Point(GeoPoint),
    Named(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn great_circle_frankfurt_new_york() {
        let fra = GeoPoint {
            lat: 50.11,
            lon: 8.68,
        };
        let nyc = GeoPoint {
            lat: 40.71,
            lon: -74.01,
        };
        let d = fra.km_to(nyc);
        assert!((6150.0..6250.0).contains(&d), "{d}");
        assert_eq!(fra.km_to(fra), 0.0);
    }
}
