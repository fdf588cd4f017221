//! Demand: what the kernel's counters and samples say about where answers go, and the
//! closed loops built on it. The kernel counts answers and new flows per (service,
//! decision) — a [`Group`]: every entry of a service's table sharing one decision — and
//! samples (client prefix, service); the controller feeds both here every cycle.
//!
//! - [`spill`]: keeps each site under a share of its capacity by moving whole groups to
//!   their next site in DistributedDirector order, and back when the site has been quiet
//!   for a while (the state lives across cycles in [`spill::Spill`]);
//! - [`replicas`]: the DIY-CDN rule: visitors give a bonus to the places a resource could
//!   be copied to, fading with time; crossing a threshold copies it there;
//! - [`impact`]: what a policy change would move, per site, from per-prefix demand
//!   ([`PrefixDemand`]) and two decision tables.
//!
//! Pure and deterministic: time comes in as `now_s`, inputs are put in a canonical order
//! before anything is summed, and floats are ordered with `total_cmp`.

pub mod impact;
pub mod replicas;
pub mod spill;

use std::collections::BTreeMap;

use director_common::limits::MAX_CANDIDATES;
use director_common::maps::Decision;
use ipnet::IpNet;

use crate::prefix::order::sort_key;

/// All of a service's table entries that share one decision, with the demand they saw.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Group {
    pub service: u32,
    /// The decision the plan gave these entries, scope cleared ([`scope_cleared`]): the
    /// group's identity across cycles, whatever override the kernel holds meanwhile.
    pub planned: Decision,
    /// Answers plus new flows per second over the last window.
    pub rate: f64,
}

/// `d` without its ECS scope: entries for different prefixes with the same ranking are the
/// same decision (the kernel stores them once, with `prefix_len` 0).
pub fn scope_cleared(d: &Decision) -> Decision {
    Decision {
        prefix_len: 0,
        ..*d
    }
}

/// A total order on decisions (scope ignored): `Decision` has none, and maps keyed by it
/// must iterate the same way on every run.
pub(crate) type DecisionKey = (u8, u8, [u16; MAX_CANDIDATES], [u16; MAX_CANDIDATES]);

pub(crate) fn decision_key(d: &Decision) -> DecisionKey {
    (d.count, d.primary, d.servers, d.weights)
}

/// The candidates in use: `count` bounded by the array, so a malformed decision cannot
/// index past it.
pub(crate) fn in_use(d: &Decision) -> usize {
    usize::from(d.count).min(MAX_CANDIDATES)
}

/// How many leading candidates share answers: `primary` bounded by `count`; a decision with
/// candidates and `primary` 0 answers with its first one (the kernel's tier 0 is never
/// empty when there is a candidate).
pub(crate) fn primaries(d: &Decision) -> usize {
    let n = in_use(d);
    usize::from(d.primary).min(n).max(n.min(1))
}

/// Where a decision's answers go: its primaries share them by weight (evenly when every
/// weight is 0, as the kernel does; a weight-0 primary gets nothing while another has
/// more), summed per site, in site order, adding up to 1. Primaries without a site (ids the
/// caller does not place) are left out and the rest share everything; empty when no
/// primary has a site: such answers land nowhere this module measures. The next best
/// candidates get nothing: they answer only when the primaries are down, which the
/// controller turns into a new plan rather than a share here.
pub fn site_shares(d: &Decision, site_of: &dyn Fn(u16) -> Option<usize>) -> Vec<(usize, f64)> {
    let placed: Vec<(usize, u16)> = d.servers[..primaries(d)]
        .iter()
        .zip(&d.weights)
        .filter_map(|(&s, &w)| site_of(s).map(|site| (site, w)))
        .collect();
    let total: f64 = placed.iter().map(|&(_, w)| f64::from(w)).sum();
    let mut per: BTreeMap<usize, f64> = BTreeMap::new();
    for &(site, w) in &placed {
        let share = if total > 0.0 {
            f64::from(w) / total
        } else {
            1.0 / placed.len() as f64
        };
        *per.entry(site).or_default() += share;
    }
    per.into_iter().filter(|&(_, s)| s > 0.0).collect()
}

/// The share of `site` in [`site_shares`]' result.
pub(crate) fn share_at(shares: &[(usize, f64)], site: usize) -> f64 {
    shares
        .iter()
        .find(|&&(s, _)| s == site)
        .map_or(0.0, |&(_, v)| v)
}

/// A rate as this module uses it: a finite number of at least 0 (anything else, from a
/// counter glitch, counts as no demand rather than poisoning every sum it enters).
pub(crate) fn clean_rate(r: f64) -> f64 {
    if r.is_finite() && r > 0.0 {
        r
    } else {
        0.0
    }
}

/// Values per prefix, keyed in [`sort_key`] order (one slot per prefix while counting).
type ByPrefix<V> = BTreeMap<(u8, u128, u8), (IpNet, V)>;

/// Demand per client prefix, per service, from the kernel's samples scaled to its exact
/// counters.
///
/// Each service's list is in [`sort_key`] order with each prefix once. Sample prefixes can
/// nest (an ECS /20 from one resolver and a /24 inside it from another): both are kept, as
/// separate demand items. The /20's rate is demand from somewhere in the /20, not a part of
/// the /24's; consumers that need where the addresses are ([`impact`]) spread each item over
/// its own address space, which gives the same totals as splitting the /20 around the /24
/// would, without multiplying items.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PrefixDemand {
    services: BTreeMap<u32, Vec<(IpNet, f64)>>,
}

impl PrefixDemand {
    /// `samples`: (service, client prefix, samples counted) from the last window, in any
    /// order, a prefix possibly more than once (counts add up); `service_rates`: each
    /// service's exact answers+flows per second over the same window. A prefix's rate is its
    /// share of the service's samples times the service's rate, so the rates add up to the
    /// counters' and not to the sampling's. Services without a rate, or without a sample,
    /// are left out; host bits of a prefix are cleared.
    pub fn from_samples(
        samples: impl Iterator<Item = (u32, IpNet, u64)>,
        service_rates: &BTreeMap<u32, f64>,
    ) -> PrefixDemand {
        let mut counts: BTreeMap<u32, ByPrefix<u64>> = BTreeMap::new();
        for (service, prefix, count) in samples {
            if count == 0 || !service_rates.contains_key(&service) {
                continue;
            }
            let p = prefix.trunc();
            let slot = counts
                .entry(service)
                .or_default()
                .entry(sort_key(&p))
                .or_insert((p, 0));
            slot.1 = slot.1.saturating_add(count);
        }
        let mut services = BTreeMap::new();
        for (service, per) in counts {
            let rate = service_rates.get(&service).copied().map_or(0.0, clean_rate);
            // Summed in f64: the u64 total could overflow where each count does not.
            let total: f64 = per.values().map(|&(_, c)| c as f64).sum();
            if total <= 0.0 {
                continue;
            }
            let items: Vec<(IpNet, f64)> = per
                .into_values()
                .map(|(p, c)| (p, c as f64 / total * rate))
                .collect();
            services.insert(service, items);
        }
        PrefixDemand { services }
    }

    /// Builds from per-prefix rates directly (tests, benches, a controller that already has
    /// them); same normalisation as [`Self::from_samples`], rates of one prefix added.
    pub fn from_rates(rates: impl Iterator<Item = (u32, IpNet, f64)>) -> PrefixDemand {
        let mut per: BTreeMap<u32, ByPrefix<f64>> = BTreeMap::new();
        for (service, prefix, rate) in rates {
            let p = prefix.trunc();
            let slot = per
                .entry(service)
                .or_default()
                .entry(sort_key(&p))
                .or_insert((p, 0.0));
            slot.1 += clean_rate(rate);
        }
        PrefixDemand {
            services: per
                .into_iter()
                .map(|(s, m)| (s, m.into_values().collect()))
                .collect(),
        }
    }

    /// One service's demand items, in [`sort_key`] order (empty when it has none).
    pub fn service(&self, service: u32) -> &[(IpNet, f64)] {
        self.services.get(&service).map_or(&[], Vec::as_slice)
    }

    /// Services with demand, in id order.
    pub fn services(&self) -> impl Iterator<Item = (u32, &[(IpNet, f64)])> + '_ {
        self.services.iter().map(|(&s, v)| (s, v.as_slice()))
    }

    /// Demand items over all services.
    pub fn len(&self) -> usize {
        self.services.values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(servers: &[u16], primary: u8, weights: &[u16]) -> Decision {
        let mut d = Decision {
            count: servers.len() as u8,
            primary,
            ..Default::default()
        };
        d.servers[..servers.len()].copy_from_slice(servers);
        d.weights[..weights.len()].copy_from_slice(weights);
        d
    }

    fn site_of(s: u16) -> Option<usize> {
        (s < 100).then_some(usize::from(s / 10))
    }

    #[test]
    fn shares_follow_primary_weights_per_site() {
        let d = dec(&[1, 2, 11, 21], 3, &[1, 1, 2, 5]);
        assert_eq!(site_shares(&d, &site_of), vec![(0, 0.5), (1, 0.5)]);
        let even = dec(&[1, 11, 12], 3, &[0, 0, 0]);
        let s = site_shares(&even, &site_of);
        assert_eq!(s.len(), 2);
        assert!((s[0].1 - 1.0 / 3.0).abs() < 1e-12 && (s[1].1 - 2.0 / 3.0).abs() < 1e-12);
        // A weight-0 primary gets nothing while another has a weight.
        assert_eq!(
            site_shares(&dec(&[1, 11], 2, &[0, 3]), &site_of),
            vec![(1, 1.0)]
        );
        // No primary with a site: nowhere.
        assert!(site_shares(&dec(&[200, 1], 1, &[1, 1]), &site_of).is_empty());
        assert!(site_shares(&Decision::default(), &site_of).is_empty());
    }

    #[test]
    fn prefix_demand_scales_samples_to_the_counters() {
        let net = |s: &str| s.parse::<IpNet>().unwrap();
        let rates = BTreeMap::from([(1, 100.0), (2, 10.0)]);
        let d = PrefixDemand::from_samples(
            [
                (1, net("10.0.0.0/20"), 2),
                (1, net("10.0.1.7/24"), 1),
                (1, net("10.0.1.0/24"), 1),
                (2, net("::/0"), 5),
                (3, net("1.0.0.0/8"), 5),
                (1, net("9.0.0.0/8"), 0),
            ]
            .into_iter(),
            &rates,
        );
        assert_eq!(
            d.service(1),
            &[(net("10.0.0.0/20"), 50.0), (net("10.0.1.0/24"), 50.0)]
        );
        assert_eq!(d.service(2), &[(net("::/0"), 10.0)]);
        assert!(d.service(3).is_empty());
        assert_eq!(d.len(), 3);
    }
}
