//! The SYN-steering maps behind typed methods: VIPs, the hops to each server, the flood
//! guard, the flow table and the steering counters. Opened on their own (the DNS paths
//! never need them).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;

use anyhow::{Context, Result};
use aya::maps::{Array, HashMap, MapData, MapError, PerCpuArray};
use director_common::{
    maps::MAX_SERVERS,
    steer::{
        Count, Flow, FlowKey, Forward, GuardLimit, Hops, VipKey, VipRecord, ALL_COUNTS, FAMILY_V4,
        FAMILY_V6, MAP_FLOWS, MAP_HOPS, MAP_SERVER_FLOWS, MAP_STEER, MAP_STEER_COUNTERS, MAP_VIPS,
        TCP_PROTOCOL,
    },
};

use super::pins::open;

/// A VIP as the kernel's table holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VipEntry {
    pub addr: SocketAddr,
    pub service: u32,
    pub mode: Forward,
    /// SYNs' MSS is lowered to this; 0: left alone.
    pub mss: u16,
    /// `ipip`: the outer source's network and how many low bits each flow sets.
    pub source: IpAddr,
    pub source_bits: u8,
}

/// A pinned flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowEntry {
    pub client: SocketAddr,
    pub vip: SocketAddr,
    pub service: u32,
    pub server: u16,
    /// Recorded from a packet that was not a SYN (no entry: a restart or eviction).
    pub midstream: bool,
    /// Its server went down and it was moved.
    pub moved: bool,
    /// CLOCK_MONOTONIC ns when recorded.
    pub since_ns: u64,
}

pub struct SteerMaps {
    vips: HashMap<MapData, VipKey, VipRecord>,
    flows: HashMap<MapData, FlowKey, Flow>,
    hops: Array<MapData, Hops>,
    guard: Array<MapData, GuardLimit>,
    counters: PerCpuArray<MapData, u64>,
    server_flows: PerCpuArray<MapData, u64>,
}

fn addr_bytes(a: IpAddr) -> ([u8; 16], u8) {
    match a {
        IpAddr::V4(v4) => {
            let mut b = [0u8; 16];
            b[..4].copy_from_slice(&v4.octets());
            (b, FAMILY_V4)
        }
        IpAddr::V6(v6) => (v6.octets(), FAMILY_V6),
    }
}

fn addr_of(b: &[u8; 16], family: u8) -> IpAddr {
    if family == FAMILY_V6 {
        IpAddr::V6(Ipv6Addr::from(*b))
    } else {
        IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))
    }
}

pub fn vip_key(a: SocketAddr) -> VipKey {
    let (addr, family) = addr_bytes(a.ip());
    VipKey {
        addr,
        port: a.port().to_be_bytes(),
        family,
        proto: TCP_PROTOCOL,
    }
}

fn vip_record(v: &VipEntry) -> VipRecord {
    VipRecord {
        service: v.service,
        mode: v.mode as u8,
        _pad: 0,
        mss: v.mss,
        src_bits: u32::from(v.source_bits),
        _pad2: 0,
        src: addr_bytes(v.source).0,
    }
}

impl SteerMaps {
    pub fn open(dir: &Path) -> Result<SteerMaps> {
        // A pin directory from a build before steering has none of these: `open` names
        // such a pin set as another version's.
        Ok(SteerMaps {
            vips: open(dir, MAP_VIPS)?,
            flows: open(dir, MAP_FLOWS)?,
            hops: open(dir, MAP_HOPS)?,
            guard: open(dir, MAP_STEER)?,
            counters: open(dir, MAP_STEER_COUNTERS)?,
            server_flows: open(dir, MAP_SERVER_FLOWS)?,
        })
    }

    /// Every VIP, by address.
    pub fn vips(&self) -> Result<Vec<VipEntry>> {
        let mut out = Vec::new();
        for kv in self.vips.iter() {
            let (k, r) = kv.context("reading the VIP table")?;
            let Some(mode) = Forward::from_u8(r.mode) else {
                continue;
            };
            out.push(VipEntry {
                addr: SocketAddr::new(addr_of(&k.addr, k.family), u16::from_be_bytes(k.port)),
                service: r.service,
                mode,
                mss: r.mss,
                source: addr_of(&r.src, k.family),
                source_bits: r.src_bits as u8,
            });
        }
        out.sort_by_key(|v| v.addr);
        Ok(out)
    }

    pub fn put_vip(&mut self, v: &VipEntry) -> Result<()> {
        self.vips
            .insert(vip_key(v.addr), vip_record(v), 0)
            .with_context(|| format!("writing VIP {} to the VIP table", v.addr))
    }

    pub fn remove_vip(&mut self, a: SocketAddr) -> Result<()> {
        match self.vips.remove(&vip_key(a)) {
            Ok(()) | Err(MapError::KeyNotFound) => Ok(()),
            Err(e) => Err(e).with_context(|| format!("removing VIP {a}")),
        }
    }

    pub fn hops(&self, server: u16) -> Result<Hops> {
        self.hops
            .get(&u32::from(server), 0)
            .with_context(|| format!("reading the hops of server {server}"))
    }

    pub fn set_hops(&mut self, server: u16, h: &Hops) -> Result<()> {
        self.hops
            .set(u32::from(server), *h, 0)
            .with_context(|| format!("writing the hops of server {server}"))
    }

    pub fn guard(&self) -> Result<GuardLimit> {
        self.guard.get(&0, 0).context("reading the flood guard")
    }

    pub fn set_guard(&mut self, l: &GuardLimit) -> Result<()> {
        self.guard.set(0, *l, 0).context("writing the flood guard")
    }

    /// Every pinned flow (the table is an LRU: at most `MAX_FLOWS`).
    pub fn flows(&self) -> Result<Vec<FlowEntry>> {
        let mut out = Vec::new();
        for kv in self.flows.iter() {
            // A flow evicted while the table is walked is skipped, not an error.
            let Ok((k, f)) = kv else { continue };
            out.push(FlowEntry {
                client: SocketAddr::new(
                    addr_of(&k.client, k.family),
                    u16::from_be_bytes(k.client_port),
                ),
                vip: SocketAddr::new(addr_of(&k.vip, k.family), u16::from_be_bytes(k.vip_port)),
                service: f.service,
                server: f.server,
                midstream: f.flags & director_common::steer::FLOW_FROM_MIDSTREAM != 0,
                moved: f.flags & director_common::steer::FLOW_MOVED != 0,
                since_ns: f.since_ns,
            });
        }
        Ok(out)
    }

    /// Every steering counter, summed over CPUs.
    pub fn counters(&self) -> Result<Vec<(Count, u64)>> {
        ALL_COUNTS
            .iter()
            .map(|&c| Ok((c, sum(&self.counters, c as u32)?)))
            .collect()
    }

    /// Connections steered to each server that got any (new and moved flows), by id.
    pub fn server_flows(&self) -> Result<BTreeMap<u16, u64>> {
        let mut out = BTreeMap::new();
        for id in 1..MAX_SERVERS {
            let n = sum(&self.server_flows, id)?;
            if n != 0 {
                out.insert(id as u16, n);
            }
        }
        Ok(out)
    }
}

fn sum(map: &PerCpuArray<MapData, u64>, key: u32) -> Result<u64> {
    Ok(map
        .get(&key, 0)
        .with_context(|| format!("reading steering counter {key}"))?
        .iter()
        .sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vip_keys_round_trip() {
        for a in ["203.0.113.80:443", "[2001:db8::80]:8443"] {
            let a: SocketAddr = a.parse().unwrap();
            let k = vip_key(a);
            let back = SocketAddr::new(addr_of(&k.addr, k.family), u16::from_be_bytes(k.port));
            assert_eq!(back, a);
        }
        // IPv4 fills the first 4 bytes, the rest stays zero (the kernel's key has it so).
        let k = vip_key("203.0.113.80:443".parse().unwrap());
        assert_eq!(&k.addr[..4], &[203, 0, 113, 80]);
        assert!(k.addr[4..].iter().all(|&b| b == 0));
        assert_eq!(k.port, [1, 187]);
    }
}
