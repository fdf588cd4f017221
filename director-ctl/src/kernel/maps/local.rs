//! `DIR_LOCAL`: the addresses queries may be sent to, each marked as the host's own, as
//! configured by the operator, or both; it stays while either mark does.

use std::net::{IpAddr, Ipv6Addr};

use anyhow::{Context, Result};
use aya::maps::MapError;
use director_common::maps::{LOCAL_CONFIGURED, LOCAL_HOST, MAX_LOCAL};

use super::Maps;

impl Maps {
    /// Every address queries may be sent to, with where it came from (`LOCAL_HOST`,
    /// `LOCAL_CONFIGURED` bits).
    pub fn local_addresses(&self) -> Result<Vec<(IpAddr, u32)>> {
        let mut out = Vec::new();
        for kv in self.local.iter() {
            let (k, flags) = kv.context("reading the local address table")?;
            out.push((local_addr(k), flags));
        }
        out.sort();
        Ok(out)
    }

    /// Makes the host's addresses exactly `now`: new ones are added first (queries to them
    /// are answered from then on), then those gone lose their host mark (and are removed
    /// unless also configured). Returns whether anything changed.
    pub fn set_host_addresses(&mut self, now: &[IpAddr]) -> Result<bool> {
        let have = self.local_addresses()?;
        let mut changed = false;
        for a in now {
            let flags = have.iter().find(|(h, _)| h == a).map_or(0, |(_, f)| *f);
            if flags & LOCAL_HOST == 0 {
                self.put_local(*a, flags | LOCAL_HOST)?;
                changed = true;
            }
        }
        for (a, flags) in have {
            if flags & LOCAL_HOST != 0 && !now.contains(&a) {
                self.put_local(a, flags & !LOCAL_HOST)?;
                changed = true;
            }
        }
        // Always compared: a program loaded over older maps starts with empty slots.
        self.sync_front()?;
        Ok(changed)
    }

    /// Adds (`on`) or removes an address the operator configured; the host's own stay.
    pub fn set_configured_address(&mut self, a: IpAddr, on: bool) -> Result<()> {
        let flags = self
            .local_addresses()?
            .into_iter()
            .find(|(h, _)| *h == a)
            .map_or(0, |(_, f)| f);
        let flags = if on {
            flags | LOCAL_CONFIGURED
        } else {
            flags & !LOCAL_CONFIGURED
        };
        self.put_local(a, flags)?;
        self.sync_front()
    }

    fn put_local(&mut self, a: IpAddr, flags: u32) -> Result<()> {
        let key = local_key(a);
        if flags == 0 {
            return match self.local.remove(&key) {
                Ok(()) | Err(MapError::KeyNotFound) => Ok(()),
                Err(e) => Err(e).with_context(|| format!("removing local address {a}")),
            };
        }
        self.local
            .insert(key, flags, 0)
            .with_context(|| format!("writing local address {a} (at most {MAX_LOCAL})"))
    }
}

/// The `DIR_LOCAL` key of an address (IPv4 mapped into IPv6).
fn local_key(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v4) => director_common::peers::local_key_v4(v4.octets()),
        IpAddr::V6(v6) => v6.octets(),
    }
}

fn local_addr(k: [u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(k);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}
