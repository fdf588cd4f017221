//! Reading the decision tries (`DIR_DEC4`, `DIR_DEC6`) back, and the one way decisions
//! reach them: a change to one service's entries, written in place.

use std::net::Ipv6Addr;

use anyhow::{Context, Result};
use aya::maps::{lpm_trie::Key, LpmTrie, MapData};
use director_common::maps::{Decision, DecisionRef, SERVICE_BITS};
use hashbrown::HashMap as HashMap2;
use ipnet::IpNet;

use super::decision_keys::entry_of4;
use super::entries::DecisionChange;
use super::syscall::read_batched;
use super::write_order::update_order;
use super::Maps;

impl Maps {
    /// Every entry as the tries hold it: (service id, client prefix, reference).
    pub(super) fn references(&self) -> Result<Vec<(u32, IpNet, DecisionRef)>> {
        let v4 = read_trie(&self.batch4, &self.dec4).context("reading the IPv4 decision table")?;
        let v6 = read_trie(&self.batch6, &self.dec6).context("reading the IPv6 decision table")?;
        let mut refs = Vec::with_capacity(v4.len() + v6.len());
        for (k, v) in v4 {
            let (service, net) = entry_of4(&k)?;
            refs.push((service, net, v));
        }
        for (k, v) in v6 {
            let len = (k.prefix_len() - SERVICE_BITS) as u8;
            let d = k.data();
            let net = IpNet::new(Ipv6Addr::from(d.addr).into(), len)?;
            refs.push((u32::from_be_bytes(d.service), net, v));
        }
        Ok(refs)
    }

    /// Every decision queries can get: (service id, client prefix, value with the entry's
    /// ECS scope in `prefix_len`).
    pub fn decisions(&self) -> Result<Vec<(u32, IpNet, Decision)>> {
        let refs = self.references()?;
        let contents = self.contents(refs.iter().map(|(_, _, r)| r.id))?;
        Ok(refs
            .into_iter()
            .map(|(service, net, r)| {
                let d = contents[&r.id];
                (
                    service,
                    net,
                    Decision {
                        prefix_len: r.scope,
                        ..d
                    },
                )
            })
            .collect())
    }

    /// The stored decision at each of `ids` (indexes into `DIR_CHOICES`), each read once
    /// however many prefixes share it.
    pub(super) fn contents(
        &self,
        ids: impl Iterator<Item = u32>,
    ) -> Result<HashMap2<u32, Decision>> {
        let mut stored = HashMap2::new();
        for id in ids {
            if let hashbrown::hash_map::Entry::Vacant(e) = stored.entry(id) {
                let d = self
                    .choices
                    .get(&id, 0)
                    .with_context(|| format!("reading stored decision {id}"))?;
                e.insert(d);
            }
        }
        Ok(stored)
    }

    /// Writes some entries of one service in place, each atomically, in an order that
    /// gives every address its old answer or its new one at every moment (so a controller
    /// killed half way leaves a table that answers correctly): decisions not stored yet
    /// first, at ids no entry uses, then the entries from the most specific prefix to the
    /// least, then deletions from the least specific to the most. Returns the number of
    /// entries written.
    pub fn apply_decisions(&mut self, change: DecisionChange<'_>) -> Result<usize> {
        let written = self.write_decisions(change);
        // Failed: the caller's table (what it meant to write) is not what the tries hold.
        self.tries_unknown |= written.is_err();
        // Also after a failed write: some entries may have changed.
        self.tries_written()?;
        written
    }

    fn write_decisions(&mut self, change: DecisionChange<'_>) -> Result<usize> {
        let DecisionChange {
            service,
            put,
            delete,
        } = change;
        let t = self.active_table()?;
        let mut store = self.store(t)?;
        let fresh = store.missing(put.iter().map(|(_, d)| (service, d)));
        if store.next as usize + fresh.len() > self.choice_limit as usize {
            self.compact_with(service, put, delete, usize::MAX)?;
            return Ok(put.len());
        }
        self.store_choices(&mut store, &fresh)?;
        let (put, delete) = update_order(put, delete);
        let put: Vec<(u32, &IpNet, DecisionRef)> = put
            .iter()
            .map(|(p, d)| (service, p, store.reference(service, d)))
            .collect();
        self.put_all(&put)?;
        for net in delete {
            self.delete(service, net)?;
        }
        Ok(put.len())
    }
}

/// Every entry of a decision trie: in batches (`batch` is the same map as `trie`), else
/// through aya's iterator.
fn read_trie<K: aya::Pod>(
    batch: &MapData,
    trie: &LpmTrie<MapData, K, DecisionRef>,
) -> Result<Vec<(Key<K>, DecisionRef)>> {
    match read_batched(batch)? {
        Some(all) => Ok(all),
        None => Ok(trie.iter().collect::<Result<_, _>>()?),
    }
}
