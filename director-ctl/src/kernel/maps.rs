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
        Ok((self
            .config
            .get(&0, 0)
            .context("reading the config map")?
            .active_table
            & 1) as usize)
    }

    pub fn server(&self, id: u16) -> Result<Server> {
        self.servers
            .get(&(id as u32), 0)
            .with_context(|| format!("reading server {id}"))
    }

    pub fn service(&self, id: u32) -> Result<Service> {
        self.services
            .get(&id, 0)
            .with_context(|| format!("reading service {id}"))
    }

    /// Sum over CPUs of a per-CPU counter.
    pub fn counter(map: &PerCpuArray<MapData, u64>, key: u32) -> Result<u64> {
        Ok(map
            .get(&key, 0)
            .with_context(|| format!("reading counter {key}"))?
            .iter()
            .sum())
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
    Key::new(
        SERVICE_BITS + len as u32,
        DecisionKeyV4 {
            service: service.to_be_bytes(),
            addr: addr.octets(),
        },
    )
}

pub fn key6(service: u32, addr: std::net::Ipv6Addr, len: u8) -> Key<DecisionKeyV6> {
    Key::new(
        SERVICE_BITS + len as u32,
        DecisionKeyV6 {
            service: service.to_be_bytes(),
            addr: addr.octets(),
        },
    )
}

/// One service's compressed decision entries, as `compile` produced them.
pub type Entries = [(ipnet::IpNet, Decision)];

impl Maps {
    /// Removes the decisions of table `t` whose service `which` selects.
    fn remove_decisions(&mut self, t: usize, which: impl Fn(u32) -> bool) -> Result<()> {
        let keys: Vec<_> = self.dec4[t]
            .keys()
            .collect::<Result<_, _>>()
            .context("listing IPv4 decisions")?;
        for k in keys
            .into_iter()
            .filter(|k| which(u32::from_be_bytes(k.data().service)))
        {
            self.dec4[t]
                .remove(&k)
                .context("removing an IPv4 decision")?;
        }
        let keys: Vec<_> = self.dec6[t]
            .keys()
            .collect::<Result<_, _>>()
            .context("listing IPv6 decisions")?;
        for k in keys
            .into_iter()
            .filter(|k| which(u32::from_be_bytes(k.data().service)))
        {
            self.dec6[t]
                .remove(&k)
                .context("removing an IPv6 decision")?;
        }
        Ok(())
    }

    fn clear_table(&mut self, t: usize) -> Result<()> {
        self.remove_decisions(t, |_| true)
    }

    /// Removes a service's decisions from both tables.
    pub fn remove_service_decisions(&mut self, service: u32) -> Result<()> {
        for t in 0..2 {
            self.remove_decisions(t, |s| s == service)?;
        }
        Ok(())
    }

    fn put(&mut self, t: usize, service: u32, net: &ipnet::IpNet, d: &Decision) -> Result<()> {
        match net {
            ipnet::IpNet::V4(n) => {
                self.dec4[t].insert(&key4(service, n.network(), n.prefix_len()), *d, 0)
            }
            ipnet::IpNet::V6(n) => {
                self.dec6[t].insert(&key6(service, n.network(), n.prefix_len()), *d, 0)
            }
        }
        .with_context(|| format!("writing the decision for {net}"))
    }

    fn delete(&mut self, t: usize, service: u32, net: &ipnet::IpNet) -> Result<()> {
        let r = match net {
            ipnet::IpNet::V4(n) => self.dec4[t].remove(&key4(service, n.network(), n.prefix_len())),
            ipnet::IpNet::V6(n) => self.dec6[t].remove(&key6(service, n.network(), n.prefix_len())),
        };
        match r {
            Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
            Err(e) => Err(e).with_context(|| format!("deleting the decision for {net}")),
        }
    }

    /// Replaces every decision at once: fills the table queries do not read, then flips
    /// `DIR_CONFIG` so that the next query reads the new one. A query sees the old table or
    /// the new one, never a mix. The old table is left as it was (it is cleared before its
    /// next use).
    pub fn replace_decisions(&mut self, tables: &[(u32, &Entries)]) -> Result<usize> {
        let spare = 1 - self.active_table()?;
        self.clear_table(spare)?;
        let mut n = 0;
        for (service, entries) in tables {
            for (net, d) in entries.iter() {
                self.put(spare, *service, net, d)?;
                n += 1;
            }
        }
        let mut c = self.config.get(&0, 0).context("reading the config map")?;
        c.active_table = spare as u32;
        self.config
            .set(0, c, 0)
            .context("switching to the new decision table")?;
        Ok(n)
    }

    /// Rewrites only what changed, in the table queries read. Each entry changes
    /// atomically; entries are written before deletions so no covered address loses its
    /// answer on the way.
    pub fn update_decisions(&mut self, service: u32, diff: &crate::compile::Diff) -> Result<()> {
        let t = self.active_table()?;
        for (net, d) in &diff.put {
            self.put(t, service, net, d)?;
        }
        for net in &diff.delete {
            self.delete(t, service, net)?;
        }
        Ok(())
    }
}
