//! The hops the XDP program forwards a VIP's packets through, per server: resolved from the
//! kernel's route and neighbour tables ([`super::nexthop`]) and written to `DIR_HOPS`
//! where they changed. A hop that cannot be resolved now keeps what the table holds, so a
//! neighbour entry being refreshed never stops traffic.

use std::net::IpAddr;
use std::time::Duration;

use anyhow::Result;
use director_common::steer::{Forward, Hop, Hops};

use super::nexthop::{self, Resolved, Resolver};
use super::steer::{SteerMaps, VipEntry};
use super::ServerEntry;

/// Which hops the VIPs in the table need.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Want {
    pub l2: bool,
    pub ipip4: bool,
    pub ipip6: bool,
}

impl Want {
    pub fn of(vips: &[VipEntry]) -> Want {
        let mut w = Want::default();
        for v in vips {
            match (v.mode, v.addr.is_ipv6()) {
                (Forward::L2, _) => w.l2 = true,
                (Forward::Ipip, false) => w.ipip4 = true,
                (Forward::Ipip, true) => w.ipip6 = true,
            }
        }
        w
    }

    pub fn any(self) -> bool {
        self.l2 || self.ipip4 || self.ipip6
    }
}

/// Resolves and writes every server's hops; a neighbour not yet known is waited for up to
/// `wait`. Returns one line per hop that could not be resolved (the caller warns).
pub fn refresh(
    r: &mut Resolver,
    sm: &mut SteerMaps,
    servers: &[ServerEntry],
    want: Want,
    wait: Duration,
) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    for s in servers {
        let old = sm.hops(s.id)?;
        let mut new = Hops::default();
        let mut slot = |addr: Option<IpAddr>, on_link: bool, old: Hop, what: &str| -> Hop {
            let Some(a) = addr else { return Hop::default() };
            match resolve(r, a, wait) {
                Ok(h) if on_link && h.gateway.is_some() => {
                    problems.push(format!(
                        "server {} ({a}): {what} needs it on a segment of this host, and it is \
                         reached via {}",
                        s.name,
                        h.gateway.map(|g| g.to_string()).unwrap_or_default()
                    ));
                    Hop::default()
                }
                Ok(h) => Hop {
                    dst_mac: h.dst_mac,
                    src_mac: h.src_mac,
                    ifindex: h.ifindex,
                },
                Err(e) => {
                    problems.push(format!("server {} ({a}): {what}: {e:#}", s.name));
                    old
                }
            }
        };
        if want.l2 {
            let a = s.ipv4.map(IpAddr::V4).or(s.ipv6.map(IpAddr::V6));
            new.l2 = slot(a, true, old.l2, "mode l2");
        }
        if want.ipip4 {
            new.ipip4 = slot(s.ipv4.map(IpAddr::V4), false, old.ipip4, "mode ipip");
        }
        if want.ipip6 {
            new.ipip6 = slot(s.ipv6.map(IpAddr::V6), false, old.ipip6, "mode ipip");
        }
        if new != old {
            sm.set_hops(s.id, &new)?;
        }
    }
    Ok(problems)
}

fn resolve(r: &mut Resolver, a: IpAddr, wait: Duration) -> Result<nexthop::Hop> {
    if wait.is_zero() {
        match r.resolve(a)? {
            Resolved::Ready(h) => Ok(h),
            Resolved::Pending { .. } => anyhow::bail!("its neighbour entry is being resolved"),
        }
    } else {
        r.resolve_wait(a, wait)
    }
}
