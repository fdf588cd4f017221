//! Which client prefixes `run` asks the sites' agents to probe (`[rtt] probe`): those with
//! demand in the last cycle (the kernel's sampled records) for which a site with an agent
//! has no live handshake RTT, busiest first, at most `probe` prefixes per poll. A prefix is
//! asked of a site again only after [`reask_ms`] (a probe's RTT comes back a window and a
//! poll later, or not at all), and a probed value is refreshed before it expires.
//!
//! The host probed stands for its /24 (/48): `[rtt] probe_targets` names one per prefix
//! (`prefix,address` lines: a hitlist of hosts known to answer), else the prefix's first
//! host (x.y.z.1, or ::1), which is a router or gateway more often than any other.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};
use director_plan::prefix::order::sort_key;
use ipnet::IpNet;

use crate::api::ProbeTarget;

/// What the poller sends each agent before its next `GET`: the last choice replaces any
/// not yet sent, so it never piles up.
pub type Pending = Arc<Mutex<HashMap<String, Vec<ProbeTarget>>>>;

/// Takes what is pending for `agent`.
pub fn take(p: &Pending, agent: &str) -> Option<Vec<ProbeTarget>> {
    p.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .remove(agent)
}

/// `[rtt] probe_targets`: the host to probe per prefix.
#[derive(Clone, Debug, Default)]
pub struct Hitlist(BTreeMap<(u8, u128, u8), (IpNet, IpAddr)>);

impl Hitlist {
    pub fn read(path: &Path) -> Result<Hitlist> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("[rtt] probe_targets: reading {}", path.display()))?;
        Hitlist::parse(&text).with_context(|| format!("[rtt] probe_targets: {}", path.display()))
    }

    /// `prefix,address` lines; `#` starts a comment; the address must lie in its prefix.
    pub fn parse(text: &str) -> Result<Hitlist> {
        let mut m = BTreeMap::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let Some((p, a)) = line.split_once(',') else {
                bail!("line {}: {line:?} is not prefix,address", n + 1);
            };
            let p: IpNet = p
                .trim()
                .parse()
                .with_context(|| format!("line {}: prefix {p:?}", n + 1))?;
            let a: IpAddr = a
                .trim()
                .parse()
                .with_context(|| format!("line {}: address {a:?}", n + 1))?;
            if !p.contains(&a) {
                bail!("line {}: {a} is not in {p}", n + 1);
            }
            let p = p.trunc();
            m.insert(sort_key(&p), (p, a));
        }
        Ok(Hitlist(m))
    }

    /// The host to probe for `prefix`: the most specific listed prefix holding it, else a
    /// listed host inside it, else its first host. Lookups by key, not a walk: a hitlist
    /// may have millions of lines.
    pub fn target(&self, prefix: &IpNet) -> IpAddr {
        let p = prefix.trunc();
        let holding = (0..=p.prefix_len()).rev().find_map(|len| {
            let up = IpNet::new(p.addr(), len).ok()?.trunc();
            self.0.get(&sort_key(&up))
        });
        let inside = || {
            let (fam, lo, _) = sort_key(&p);
            let (_, hi, _) = sort_key(&IpNet::new(p.broadcast(), p.max_prefix_len()).ok()?);
            self.0
                .range((fam, lo, p.prefix_len())..=(fam, hi, u8::MAX))
                .next()
                .map(|e| e.1)
        };
        holding
            .or_else(inside)
            .map_or_else(|| first_host(&p), |e| e.1)
    }
}

/// The prefix's first host: its network address + 1 (a host route is its own).
pub fn first_host(p: &IpNet) -> IpAddr {
    match p.trunc() {
        IpNet::V4(n) if n.prefix_len() < 32 => {
            IpAddr::V4(std::net::Ipv4Addr::from(u32::from(n.network()) + 1))
        }
        IpNet::V6(n) if n.prefix_len() < 128 => {
            IpAddr::V6(std::net::Ipv6Addr::from(u128::from(n.network()) + 1))
        }
        n => n.addr(),
    }
}

/// How long before asking a site about a prefix again: twice the poll and an agent window
/// of up to 10 s, and at least half the expiry, so that a probed value is refreshed
/// before it goes and an unanswered one is not asked every poll.
pub fn reask_ms(poll_s: f64, expire_s: u64) -> u64 {
    let window = 2_000.0 * poll_s + 10_000.0;
    (window as u64).max(expire_s.saturating_mul(500))
}

/// The /24 (/48) a probe of `a` measures: agents keep RTTs per /24 and /48.
pub fn measured_prefix(a: IpAddr) -> IpNet {
    let len = if a.is_ipv4() { 24 } else { 48 };
    // A length within the family's bound: `new` cannot fail.
    IpNet::new(a, len).map_or_else(|_| IpNet::from(a), |n| n.trunc())
}

/// A site's state for a /24 (/48): `(probed, taken_ms)` of its live measurement.
pub type State<'a> = &'a dyn Fn(usize, &IpNet) -> Option<(bool, u64)>;

/// When each (site, /24) was asked last.
#[derive(Debug, Default)]
pub struct Asked {
    at: HashMap<(usize, IpNet), u64>,
    /// [`reask_ms`].
    pub reask: u64,
}

impl Asked {
    pub fn new(reask: u64) -> Asked {
        Asked {
            at: HashMap::new(),
            reask,
        }
    }

    /// One poll's choice: for each site of `sites` (those with an agent), the prefixes of
    /// `demand` (busiest first) to probe there; at most `limit` prefixes in all.
    pub fn choose(
        &mut self,
        demand: &[IpNet],
        sites: &[usize],
        state: State<'_>,
        hitlist: &Hitlist,
        now_ms: u64,
        limit: usize,
    ) -> Vec<(usize, ProbeTarget)> {
        let reask = self.reask;
        let mut out = Vec::new();
        let mut chosen = 0;
        for p in demand {
            if chosen >= limit {
                break;
            }
            let address = hitlist.target(p);
            let measured = measured_prefix(address);
            // A listed host of a shorter prefix may lie outside `p`: it then stands for
            // its own /24 (/48), which the agent checks it against.
            let prefix = if p.contains(&address) { *p } else { measured };
            let mut any = false;
            for &site in sites {
                let fresh = match state(site, &measured) {
                    // Handshakes: nothing to probe.
                    Some((false, _)) => true,
                    Some((true, taken)) => now_ms.saturating_sub(taken) < reask,
                    None => false,
                };
                let recent = self
                    .at
                    .get(&(site, measured))
                    .is_some_and(|&t| now_ms.saturating_sub(t) < reask);
                if fresh || recent {
                    continue;
                }
                self.at.insert((site, measured), now_ms);
                out.push((site, ProbeTarget { prefix, address }));
                any = true;
            }
            chosen += usize::from(any);
        }
        // Forget what is old enough to be asked again anyway.
        self.at.retain(|_, t| now_ms.saturating_sub(*t) < reask);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    #[test]
    fn a_prefix_is_probed_at_its_first_host_unless_the_hitlist_names_one() {
        let h = Hitlist::parse(
            "# prefix,address\n203.0.113.0/24, 203.0.113.77\n198.51.0.0/16,198.51.100.9\n\
             2001:db8::/32,2001:db8:0:1::5\n",
        )
        .unwrap();
        let t = |p: &str| h.target(&net(p)).to_string();
        assert_eq!(t("203.0.113.0/24"), "203.0.113.77");
        // A listed /16 holds the /24: its host, wherever it is in it.
        assert_eq!(t("198.51.7.0/24"), "198.51.100.9");
        // A /16 asked about holding a listed /24: that host.
        assert_eq!(t("203.0.0.0/16"), "203.0.113.77");
        assert_eq!(t("192.0.2.0/24"), "192.0.2.1");
        assert_eq!(t("2001:db8:5::/48"), "2001:db8:0:1::5");
        assert_eq!(t("2001:db9:5::/48"), "2001:db9:5::1");
        assert_eq!(first_host(&net("192.0.2.9/32")).to_string(), "192.0.2.9");
        assert!(Hitlist::parse("192.0.2.0/24,198.51.100.1\n").is_err());
        assert!(Hitlist::parse("192.0.2.0/24\n").is_err());
    }

    #[test]
    fn only_prefixes_a_site_lacks_are_chosen_busiest_first_and_bounded() {
        let demand: Vec<IpNet> = ["203.0.113.0/24", "198.51.100.0/24", "192.0.2.0/24"]
            .iter()
            .map(|s| net(s))
            .collect();
        // Site 0 measured 198.51.100.0/24 by handshakes, site 1 nothing; 192.0.2.0/24 was
        // probed at site 0 long ago, at site 1 just now.
        let state = |site: usize, p: &IpNet| match (site, p.to_string().as_str()) {
            (0, "198.51.100.0/24") => Some((false, 0)),
            (0, "192.0.2.0/24") => Some((true, 1_000)),
            (1, "192.0.2.0/24") => Some((true, 99_000)),
            _ => None,
        };
        let mut asked = Asked::new(30_000);
        let h = Hitlist::default();
        let got = asked.choose(&demand, &[0, 1], &state, &h, 100_000, 2);
        let names: Vec<(usize, String)> = got
            .iter()
            .map(|(s, t)| (*s, t.address.to_string()))
            .collect();
        assert_eq!(
            names,
            [
                (0, "203.0.113.1".into()),
                (1, "203.0.113.1".into()),
                (1, "198.51.100.1".into())
            ]
        );
        // The third prefix: beyond the bound this poll; the next poll takes it, and asks
        // nothing again that was just asked.
        let got = asked.choose(&demand, &[0, 1], &state, &h, 101_000, 2);
        let names: Vec<(usize, String)> = got
            .iter()
            .map(|(s, t)| (*s, t.address.to_string()))
            .collect();
        assert_eq!(names, [(0, "192.0.2.1".into())]);
        // A listed host outside the prefix asked about stands for its own /24.
        let h = Hitlist::parse("198.51.0.0/16,198.51.100.9\n").unwrap();
        let mut fresh = Asked::new(30_000);
        let got = fresh.choose(&[net("198.51.7.0/24")], &[0], &|_, _| None, &h, 0, 1);
        assert_eq!(got[0].1.prefix, net("198.51.100.0/24"));
        assert!(got[0].1.prefix.contains(&got[0].1.address));
        // Past the re-ask time, unanswered prefixes are asked again, and a probed value
        // before it expires.
        let got = asked.choose(&demand, &[0, 1], &state, &h, 131_000, 10);
        assert_eq!(got.len(), 5, "{got:?}");
        assert_eq!(reask_ms(2.0, 120), 60_000);
        assert_eq!(reask_ms(0.5, 30), 15_000);
    }
}
