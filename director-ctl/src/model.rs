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

/// Where a client network is: a point, or a node of the operator's location graph.
#[derive(Clone, Debug, PartialEq)]
pub enum Location {
    Point(GeoPoint),
    Named(String),
}
