//! The sampled records, aggregated per (service, client prefix, kind) over a cycle: the
//! finer picture of demand that `impact` weighs address ranges by and replicas place
//! visitors with. DNS demand is the resolver's unless the query carried ECS.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use director_common::demand::Sample;
use director_plan::demand::PrefixDemand;
use ipnet::IpNet;

use crate::api;

/// Whom a sampled prefix stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum By {
    Resolver,
    Ecs,
    Client,
}

impl By {
    pub fn name(self) -> &'static str {
        match self {
            By::Resolver => "resolver",
            By::Ecs => "ecs",
            By::Client => "client",
        }
    }
}

type Key = (u32, IpNet, By);

#[derive(Default)]
pub struct Samples {
    now: HashMap<Key, u64>,
    last: HashMap<Key, u64>,
    /// Since `run` started.
    all: HashMap<Key, u64>,
}

/// The prefix a record is counted under: the ECS subnet as the resolver sent it (at most
/// a /24 or /48: finer says no more about where clients are), else the source's /24 or
/// /48.
pub fn prefix_of(s: &Sample) -> (IpNet, By) {
    let by = if s.is_syn() {
        By::Client
    } else if s.has_ecs() {
        By::Ecs
    } else {
        By::Resolver
    };
    let a = s.aggregate();
    let net = if s.is_v6() {
        IpNet::new(IpAddr::V6(Ipv6Addr::from(a)), s.aggregate_len())
    } else {
        IpNet::new(
            IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3])),
            s.aggregate_len(),
        )
    };
    // Lengths are bounded above, so `new` cannot fail; a host route is the safe answer.
    let net = net.map_or_else(
        |_| IpNet::from(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
        |n| n.trunc(),
    );
    (net, by)
}

impl Samples {
    pub fn add(&mut self, got: &[Sample]) {
        for s in got {
            let (net, by) = prefix_of(s);
            *self.now.entry((s.service, net, by)).or_default() += 1;
            *self.all.entry((s.service, net, by)).or_default() += 1;
        }
    }

    /// Ends the window: its counts become the last window's.
    pub fn clear(&mut self) {
        self.last = std::mem::take(&mut self.now);
    }

    /// The window being counted.
    pub fn iter(&self) -> impl Iterator<Item = (&Key, &u64)> {
        self.now.iter()
    }

    /// The last window's prefixes, each with its share of its service's `rates`, most
    /// first; at most `top`.
    pub fn report(
        &self,
        service_name: &dyn Fn(u32) -> String,
        rates: &BTreeMap<u32, f64>,
        top: usize,
    ) -> Vec<api::PrefixDemand> {
        let totals = totals(&self.now);
        let mut out: Vec<api::PrefixDemand> = self
            .all
            .iter()
            .map(|(key @ (svc, net, by), all)| {
                let n = self.now.get(key).copied().unwrap_or(0);
                api::PrefixDemand {
                    service: service_name(*svc),
                    prefix: *net,
                    by: by.name().to_string(),
                    rate: rates.get(svc).copied().unwrap_or(0.0) * n as f64
                        / totals.get(svc).copied().unwrap_or(1).max(1) as f64,
                    samples: n,
                    total: *all,
                }
            })
            .collect();
        out.sort_by(|a, b| {
            b.samples
                .cmp(&a.samples)
                .then(b.total.cmp(&a.total))
                .then(a.service.cmp(&b.service))
                .then(a.prefix.cmp(&b.prefix))
        });
        out.truncate(top);
        out
    }

    /// The last whole window's demand per prefix, scaled to the services' `rates`.
    pub fn demand(&self, rates: &BTreeMap<u32, f64>) -> PrefixDemand {
        let mut merged: BTreeMap<(u32, IpNet), u64> = BTreeMap::new();
        for ((svc, net, _), n) in &self.last {
            *merged.entry((*svc, *net)).or_default() += n;
        }
        PrefixDemand::from_samples(merged.into_iter().map(|((s, p), n)| (s, p, n)), rates)
    }
}

fn totals(m: &HashMap<Key, u64>) -> HashMap<u32, u64> {
    let mut t = HashMap::new();
    for ((svc, _, _), n) in m {
        *t.entry(*svc).or_default() += n;
    }
    t
}
