//! Operator operations on SYN steering: a service's VIPs (`service add --vip`), the hops
//! to its servers, and what `flows` shows.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use anyhow::{bail, Result};
use director_common::steer::{default_mss, Count, Forward, MAX_FLOWS};
use ipnet::IpNet;

use crate::api;
use crate::kernel::hops::{self, Want};
use crate::kernel::nexthop::Resolver;
use crate::kernel::steer::VipEntry;
use crate::kernel::Maps;

/// A service's VIPs as `service add` gives them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VipSettings {
    pub vips: Vec<SocketAddr>,
    pub mode: Forward,
    /// None: the mode's default per family.
    pub mss: Option<u16>,
    /// `ipip`'s outer source networks, at most one per family.
    pub sources: Vec<IpNet>,
}

impl VipSettings {
    /// The table entries for service `id`, checked before anything is written.
    pub fn entries(&self, id: u32) -> Result<Vec<VipEntry>> {
        if let Some(m) = self.mss {
            if m != 0 && !(536..=9000).contains(&m) {
                bail!("--mss {m}: 0 (no clamp) or from 536 to 9000");
            }
        }
        let mut out = Vec::new();
        for &addr in &self.vips {
            let v6 = addr.is_ipv6();
            let (source, source_bits) = match self.mode {
                Forward::L2 => (unspecified(v6), 0),
                Forward::Ipip => {
                    let Some(n) = self.sources.iter().find(|n| n.addr().is_ipv6() == v6) else {
                        bail!(
                            "--vip {addr}: --mode ipip needs --encap-source with an {} network \
                             (the outer source addresses)",
                            if v6 { "IPv6" } else { "IPv4" }
                        );
                    };
                    let bits = n.max_prefix_len() - n.prefix_len();
                    if bits > 32 {
                        bail!("--encap-source {n}: at most 32 bits can vary");
                    }
                    (n.network(), bits)
                }
            };
            out.push(VipEntry {
                addr,
                service: id,
                mode: self.mode,
                mss: self.mss.unwrap_or(default_mss(self.mode, v6)),
                source,
                source_bits,
            });
        }
        Ok(out)
    }
}

fn unspecified(v6: bool) -> IpAddr {
    if v6 {
        Ipv6Addr::UNSPECIFIED.into()
    } else {
        Ipv4Addr::UNSPECIFIED.into()
    }
}

/// Makes `entries` the VIPs of service `id`: its other VIPs go. Refused, with nothing
/// written, when one of them is another service's.
pub fn set_service_vips(m: &mut Maps, id: u32, entries: &[VipEntry]) -> Result<()> {
    let have = m.steer().vips()?;
    let names: HashMap<u32, String> = m.services()?.into_iter().map(|s| (s.id, s.name)).collect();
    for e in entries {
        if let Some(other) = have.iter().find(|v| v.addr == e.addr && v.service != id) {
            bail!(
                "VIP {} is already service {}'s",
                e.addr,
                names.get(&other.service).map_or("?", String::as_str)
            );
        }
    }
    for e in entries {
        m.steer_mut().put_vip(e)?;
    }
    for v in have.iter().filter(|v| v.service == id) {
        if !entries.iter().any(|e| e.addr == v.addr) {
            m.steer_mut().remove_vip(v.addr)?;
        }
    }
    Ok(())
}

/// Resolves the hops of every server for the VIPs in the table (waiting up to a second for
/// a neighbour); one line per server that cannot be reached the way its VIPs need.
pub fn refresh_hops(m: &mut Maps) -> Result<Vec<String>> {
    let want = Want::of(&m.steer().vips()?);
    if !want.any() {
        return Ok(Vec::new());
    }
    let mut r = Resolver::new()?;
    let servers = m.servers()?;
    hops::refresh(
        &mut r,
        m.steer_mut(),
        &servers,
        want,
        Duration::from_secs(1),
    )
}

/// Every VIP, with its service's name.
pub fn vips(m: &Maps) -> Result<Vec<api::ListedVip>> {
    let names: HashMap<u32, String> = m.services()?.into_iter().map(|s| (s.id, s.name)).collect();
    Ok(m.steer()
        .vips()?
        .into_iter()
        .map(|v| api::ListedVip {
            vip: v.addr,
            service: names.get(&v.service).cloned().unwrap_or_default(),
            mode: v.mode,
            mss: v.mss,
            encap_source: (v.mode == Forward::Ipip)
                .then(|| IpNet::new(v.source, max_len(v.source) - v.source_bits).ok())
                .flatten(),
        })
        .collect())
}

fn max_len(a: IpAddr) -> u8 {
    if a.is_ipv6() {
        128
    } else {
        32
    }
}

/// The pinned flows, of one service or all, oldest first.
pub fn flows(m: &Maps, service: Option<&str>) -> Result<api::FlowList> {
    let want = match service {
        Some(s) => Some(m.find_service(s)?.ok_or_else(|| {
            anyhow::anyhow!("unknown service {s:?} (see `director-ctl service list`)")
        })?),
        None => None,
    };
    let services: HashMap<u32, String> =
        m.services()?.into_iter().map(|s| (s.id, s.name)).collect();
    let servers: HashMap<u16, String> = m.servers()?.into_iter().map(|s| (s.id, s.name)).collect();
    let now = crate::kernel::maps::monotonic_ns();
    let mut list: Vec<_> = m
        .steer()
        .flows()?
        .into_iter()
        .filter(|f| want.is_none_or(|w| w == f.service))
        .collect();
    list.sort_by_key(|f| (f.since_ns, f.client));
    Ok(api::FlowList {
        version: api::VERSION,
        flows: list
            .into_iter()
            .map(|f| api::ListedFlow {
                client: f.client,
                vip: f.vip,
                service: services.get(&f.service).cloned().unwrap_or_default(),
                server: servers
                    .get(&f.server)
                    .cloned()
                    .unwrap_or_else(|| format!("#{}", f.server)),
                midstream: f.midstream,
                moved: f.moved,
                age_s: now.saturating_sub(f.since_ns) as f64 / 1e9,
            })
            .collect(),
    })
}

pub fn flow_stats(m: &Maps) -> Result<api::FlowStats> {
    let servers: HashMap<u16, String> = m.servers()?.into_iter().map(|s| (s.id, s.name)).collect();
    let counters: BTreeMap<String, u64> = m
        .steer()
        .counters()?
        .into_iter()
        .map(|(c, n): (Count, u64)| (c.name().to_string(), n))
        .collect();
    Ok(api::FlowStats {
        version: api::VERSION,
        flows: m.steer().flows()?.len(),
        capacity: MAX_FLOWS,
        counters,
        servers: m
            .steer()
            .server_flows()?
            .into_iter()
            .map(|(id, n)| {
                (
                    servers
                        .get(&id)
                        .cloned()
                        .unwrap_or_else(|| format!("#{id}")),
                    n,
                )
            })
            .collect(),
    })
}

/// The hop toward `addr` as VIP forwarding would resolve it.
pub fn nexthop(addr: IpAddr, wait: Duration) -> Result<api::Nexthop> {
    let h = Resolver::new()?.resolve_wait(addr, wait)?;
    Ok(api::Nexthop {
        version: 1,
        address: addr,
        ifindex: h.ifindex,
        iface: h.iface,
        src_mac: mac_text(h.src_mac),
        dst_mac: mac_text(h.dst_mac),
        gateway: h.gateway,
    })
}

fn mac_text(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}
