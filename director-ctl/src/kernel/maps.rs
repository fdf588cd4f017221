//! The pinned maps, opened by name from the pin directory, with typed access.

use std::path::Path;

use anyhow::{Context, Result};
use aya::maps::{lpm_trie::Key, Array, HashMap, LpmTrie, Map, MapData, PerCpuArray};
use director_common::maps::*;

pub type Dec4 = LpmTrie<MapData, DecisionKeyV4, Decision>;
pub type Dec6 = LpmTrie<MapData, DecisionKeyV6, Decision>;

pub struct Maps {
    pub names: HashMap<MapData, u64, NameEntry>,
    pub services: Array<MapData, Service>,
    pub servers: Array<MapData, Server>,
    pub dec4: [Dec4; 2],
    pub dec6: [Dec6; 2],
    pub config: Array<MapData, Config>,
    pub counters: PerCpuArray<MapData, u64>,
    pub service_stats: PerCpuArray<MapData, u64>,
}

fn open<T: TryFrom<Map, Error = aya::maps::MapError>>(dir: &Path, name: &str) -> Result<T> {
    let path = dir.join(name);
    if !path.exists() {
        anyhow::bail!(
            "nothing is attached: no map {name} pinned in {} (run `director-ctl attach --iface IF` first)",
            dir.display()
        );
    }
    let data = MapData::from_pin(&path).with_context(|| format!("opening {}", path.display()))?;
    let map = Map::from_map_data(data).with_context(|| format!("reading {}", path.display()))?;
    T::try_from(map).with_context(|| format!("{} has an unexpected type", path.display()))
}

impl Maps {
    pub fn open(dir: &Path) -> Result<Maps> {
        Ok(Maps {
            names: open(dir, MAP_NAMES)?,
            services: open(dir, MAP_SERVICES)?,
            servers: open(dir, MAP_SERVERS)?,
            dec4: [open(dir, MAP_DEC4[0])?, open(dir, MAP_DEC4[1])?],
            dec6: [open(dir, MAP_DEC6[0])?, open(dir, MAP_DEC6[1])?],
            config: open(dir, MAP_CONFIG)?,
            counters: open(dir, MAP_COUNTERS)?,
            service_stats: open(dir, MAP_SERVICE_STATS)?,
        })
    }

    pub fn active_table(&self) -> Result<usize> {
        Ok((self.config.get(&0, 0).context("reading the config map")?.active_table & 1) as usize)
    }

    pub fn server(&self, id: u16) -> Result<Server> {
        self.servers.get(&(id as u32), 0).with_context(|| format!("reading server {id}"))
    }

    pub fn service(&self, id: u32) -> Result<Service> {
        self.services.get(&id, 0).with_context(|| format!("reading service {id}"))
    }

    /// Sum over CPUs of a per-CPU counter.
    pub fn counter(map: &PerCpuArray<MapData, u64>, key: u32) -> Result<u64> {
        Ok(map.get(&key, 0).with_context(|| format!("reading counter {key}"))?.iter().sum())
    }

    /// Every decision of the active table: (service, family v6, prefix, prefix length, value).
    pub fn decisions(&self) -> Result<Vec<(u32, std::net::IpAddr, u8, Decision)>> {
        let t = self.active_table()?;
        let mut out = Vec::new();
        for kv in self.dec4[t].iter() {
            let (k, v) = kv.context("reading the IPv4 decision table")?;
            let d = k.data();
            out.push((
                u32::from_be_bytes(d.service),
                std::net::Ipv4Addr::from(d.addr).into(),
                (k.prefix_len() - SERVICE_BITS) as u8,
                v,
            ));
        }
        for kv in self.dec6[t].iter() {
            let (k, v) = kv.context("reading the IPv6 decision table")?;
            let d = k.data();
            out.push((
                u32::from_be_bytes(d.service),
                std::net::Ipv6Addr::from(d.addr).into(),
                (k.prefix_len() - SERVICE_BITS) as u8,
                v,
            ));
        }
        Ok(out)
    }
}

pub fn key4(service: u32, addr: std::net::Ipv4Addr, len: u8) -> Key<DecisionKeyV4> {
    Key::new(SERVICE_BITS + len as u32, DecisionKeyV4 { service: service.to_be_bytes(), addr: addr.octets() })
}

pub fn key6(service: u32, addr: std::net::Ipv6Addr, len: u8) -> Key<DecisionKeyV6> {
    Key::new(SERVICE_BITS + len as u32, DecisionKeyV6 { service: service.to_be_bytes(), addr: addr.octets() })
}
