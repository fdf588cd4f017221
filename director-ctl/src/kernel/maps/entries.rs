//! The values `Maps` takes and gives. They sit apart from the methods so that `maps`
//! re-exports them from a file that imports none of its siblings.

use std::net::{Ipv4Addr, Ipv6Addr};

use director_common::{maps::Decision, select::Mode};
use ipnet::IpNet;

/// A server as the kernel's table holds it.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerEntry {
    pub id: u16,
    pub name: String,
    pub ipv4: Option<Ipv4Addr>,
    pub ipv6: Option<Ipv6Addr>,
    pub up: bool,
    /// `server drain`: no new clients.
    pub drained: bool,
    /// Its last load read by `run`.
    pub load: Option<f64>,
}

/// A DNS service as the kernel's tables hold it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceEntry {
    pub id: u32,
    /// The DNS name as text, without the trailing dot.
    pub name: String,
    pub ttl: u32,
    pub answers: u8,
    pub select: Mode,
    /// Its name is answered in DNS (else the service is reached by its VIPs only, and the
    /// name passes to the host).
    pub dns: bool,
}

/// Where the table given to [`Maps::set_front16`](super::Maps::set_front16) comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableSource {
    /// Read from the tries and written back whole: what they hold.
    Kernel,
    /// The caller's own record of what it wrote (`run` between full syncs): what the tries
    /// hold unless another process wrote them since, which `Maps` notices.
    Own,
}

/// One service's decision entries: (client prefix, ranked servers).
pub type Entries = [(IpNet, Decision)];

/// A change to the decision tables, applied by [`Maps::apply_decisions`], the one way
/// decisions reach the kernel: some entries of one service, written in place.
///
/// [`Maps::apply_decisions`]: super::Maps::apply_decisions
pub struct DecisionChange<'a> {
    pub service: u32,
    pub put: &'a Entries,
    pub delete: &'a [IpNet],
}
