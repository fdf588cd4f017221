//! Response rate limiting: each service's limit (`DIR_RRL`) and the source prefixes never
//! limited (`DIR_RRL_EXEMPT`, IPv4 mapped into IPv6 so one trie holds both).

use std::net::{IpAddr, Ipv6Addr};

use anyhow::{Context, Result};
use aya::maps::{lpm_trie::Key, MapError};
use director_common::maps::MAX_SERVICES;
use director_common::rrl::{Limit, EXEMPT_V4_MAPPED_BITS};
use ipnet::IpNet;

use super::Maps;

impl Maps {
    /// A service's rate limit (unlimited unless one was set), as it was set: the
    /// `exemptions` flag is this module's, kept with the exemption list.
    pub fn rrl(&self, service: u32) -> Result<Limit> {
        let mut l = self.stored_rrl(service)?;
        l.exemptions = 0;
        Ok(l)
    }

    fn stored_rrl(&self, service: u32) -> Result<Limit> {
        self.rrl
            .get(&service, 0)
            .with_context(|| format!("reading the rate limit of service {service}"))
    }

    pub fn set_rrl(&mut self, service: u32, l: &Limit) -> Result<()> {
        let mut l = *l;
        l.exemptions = self.any_exempt()? as u8;
        self.rrl
            .set(service, l, 0)
            .with_context(|| format!("writing the rate limit of service {service}"))
    }

    /// Whether any source prefix is exempt.
    fn any_exempt(&self) -> Result<bool> {
        match self.rrl_exempt.keys().next() {
            None => Ok(false),
            Some(k) => k.map(|_| true).context("reading the rate-limit exemptions"),
        }
    }

    /// Keeps every limit's `exemptions` flag equal to whether the list has any (the
    /// kernel asks the trie only where it is set).
    fn flag_exemptions(&mut self) -> Result<()> {
        let any = self.any_exempt()? as u8;
        for service in 0..MAX_SERVICES {
            let mut l = self.stored_rrl(service)?;
            if l.is_limited() && l.exemptions != any {
                l.exemptions = any;
                self.rrl
                    .set(service, l, 0)
                    .with_context(|| format!("writing the rate limit of service {service}"))?;
            }
        }
        Ok(())
    }

    /// The source prefixes never rate limited.
    pub fn rrl_exempt(&self) -> Result<Vec<IpNet>> {
        let mut out = Vec::new();
        for k in self.rrl_exempt.keys() {
            let k = k.context("reading the rate-limit exemptions")?;
            let addr = Ipv6Addr::from(k.data());
            let bits = k.prefix_len();
            let net = match addr.to_ipv4_mapped() {
                Some(v4) if bits >= EXEMPT_V4_MAPPED_BITS => {
                    IpNet::new(IpAddr::V4(v4), (bits - EXEMPT_V4_MAPPED_BITS) as u8)?
                }
                _ => IpNet::new(IpAddr::V6(addr), bits as u8)?,
            };
            out.push(net);
        }
        out.sort();
        Ok(out)
    }

    /// Whether `source` lies in an exempt prefix (the kernel's own longest-prefix lookup).
    pub fn rrl_is_exempt(&self, source: IpAddr) -> Result<bool> {
        let (v6, lo, hi) = director_common::rrl::source_words(source);
        let key = Key::new(128, director_common::rrl::exempt_key(v6, lo, hi));
        match self.rrl_exempt.get(&key, 0) {
            Ok(_) => Ok(true),
            Err(MapError::KeyNotFound) => Ok(false),
            Err(e) => Err(e).context("reading the rate-limit exemptions"),
        }
    }

    /// Exempts a source prefix from rate limiting (`on`), or limits it again.
    pub fn set_rrl_exempt(&mut self, net: IpNet, on: bool) -> Result<()> {
        let had_any = self.any_exempt()?;
        let key = match net {
            IpNet::V4(n) => Key::new(
                EXEMPT_V4_MAPPED_BITS + u32::from(n.prefix_len()),
                n.network().to_ipv6_mapped().octets(),
            ),
            IpNet::V6(n) => Key::new(u32::from(n.prefix_len()), n.network().octets()),
        };
        let r = if on {
            self.rrl_exempt.insert(&key, 1, 0)
        } else {
            match self.rrl_exempt.remove(&key) {
                Err(MapError::KeyNotFound) => Ok(()),
                r => r,
            }
        };
        r.with_context(|| format!("writing the rate-limit exemption {net}"))?;
        // Every limit is rewritten only when the list turns empty or stops being: a config
        // with many exemptions adds them one by one.
        if self.any_exempt()? != had_any {
            self.flag_exemptions()?;
        }
        Ok(())
    }
}
