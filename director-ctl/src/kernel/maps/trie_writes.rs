//! Writes into the decision tries, each after clearing the /16 front slots it touches:
//! entries put in the order `update_order` gives them (by two threads when there are
//! many), one deleted, or all of some services' entries removed.

use anyhow::{Context, Result};
use aya::maps::{MapData, MapError};
use director_common::maps::DecisionRef;
use ipnet::IpNet;

use super::decision_keys::{entry_of4, key, DecisionKey};
use super::syscall::{
    batch, batch_unsupported, delete_batched, pod_bytes, update_one, BPF_MAP_UPDATE_BATCH,
};
use super::write_order::{Halves, Put, SPLIT_FROM};
use super::Maps;

impl Maps {
    /// Removes the decisions whose service `which` selects. The two families' tries are
    /// emptied side by side (each has a lock of its own in the kernel).
    pub(super) fn remove_decisions(&mut self, which: impl Fn(u32) -> bool) -> Result<()> {
        let removed = self.remove_decisions_of(which);
        self.tries_unknown |= removed.is_err();
        removed
    }

    fn remove_decisions_of(&mut self, which: impl Fn(u32) -> bool) -> Result<()> {
        let keys4: Vec<_> = self
            .dec4
            .keys()
            .collect::<Result<Vec<_>, _>>()
            .context("listing IPv4 decisions")?
            .into_iter()
            .filter(|k| which(u32::from_be_bytes(k.data().service)))
            .collect();
        let keys6: Vec<_> = self
            .dec6
            .keys()
            .collect::<Result<Vec<_>, _>>()
            .context("listing IPv6 decisions")?
            .into_iter()
            .filter(|k| which(u32::from_be_bytes(k.data().service)))
            .collect();
        for k in &keys4 {
            if let Ok((service, net)) = entry_of4(k) {
                self.dec16.clear(service, &net);
            }
        }
        self.dec16.cleared();
        let (batched4, batched6) = side_by_side(
            || delete_batched(&self.batch4, &keys4),
            || delete_batched(&self.batch6, &keys6),
        );
        if !batched4? {
            for k in keys4 {
                self.dec4.remove(&k).context("removing an IPv4 decision")?;
            }
        }
        if !batched6? {
            for k in keys6 {
                self.dec6.remove(&k).context("removing an IPv6 decision")?;
            }
        }
        Ok(())
    }

    /// Writes entries, each family in the given order, by two threads when there are
    /// many: the kernel inserts into a trie one element at a time, but much of each insert
    /// (copying it in, allocating its node) happens outside the trie's lock, so two
    /// writers into the same trie finish in about 0.6 of the time. Each family is cut at
    /// an address into [`Halves`] that no entry of the other contains: one thread writes
    /// the lower halves, the other the upper ones, and the few entries across the cut
    /// follow once both are done. Every address's entries are then still written in the
    /// given order (see [`update_order`](super::update_order)), so answers stay old-or-new.
    pub(super) fn put_all(&mut self, entries: &[Put<'_>]) -> Result<()> {
        for (service, net, _) in entries {
            self.dec16.clear(*service, net);
        }
        self.dec16.cleared();
        let (v4, v6): (Vec<_>, Vec<_>) = entries
            .iter()
            .partition(|(_, net, _)| matches!(net, IpNet::V4(_)));
        // A small update (`run`'s RTT and health changes): no threads.
        if entries.len() < SPLIT_FROM {
            put_family(&self.batch4, &v4)?;
            return put_family(&self.batch6, &v6);
        }
        let (h4, h6) = (Halves::of(&v4), Halves::of(&v6));
        let (lower, upper) = side_by_side(
            || {
                put_family(&self.batch4, &h4.lower)?;
                put_family(&self.batch6, &h6.lower)
            },
            // The other family first, so the two threads share a trie's lock for less
            // of the time.
            || {
                put_family(&self.batch6, &h6.upper)?;
                put_family(&self.batch4, &h4.upper)
            },
        );
        lower.and(upper)?;
        put_family(&self.batch4, &h4.across)?;
        put_family(&self.batch6, &h6.across)
    }

    pub(super) fn delete(&mut self, service: u32, net: &IpNet) -> Result<()> {
        self.dec16.clear(service, net);
        self.dec16.cleared();
        let r = match key(service, net) {
            DecisionKey::V4(k) => self.dec4.remove(&k),
            DecisionKey::V6(k) => self.dec6.remove(&k),
        };
        match r {
            // A missing entry is already what a delete wants (LPM tries report it as a
            // syscall error).
            Ok(()) | Err(MapError::KeyNotFound | MapError::SyscallError(_)) => Ok(()),
            Err(e) => Err(e).with_context(|| format!("deleting the decision for {net}")),
        }
    }
}

/// Runs `a` here and `b` on a second thread; both results.
fn side_by_side<A: Send, B: Send>(
    a: impl FnOnce() -> A + Send,
    b: impl FnOnce() -> B + Send,
) -> (A, B) {
    std::thread::scope(|s| {
        let other = s.spawn(b);
        let first = a();
        let second = other
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e));
        (first, second)
    })
}

/// Writes one family's entries into its trie, in order: batched (BPF_MAP_UPDATE_BATCH, one
/// system call per chunk; the kernel still inserts them one at a time, in order), and one
/// by one where the kernel takes no batch.
fn put_family(map: &MapData, entries: &[&(u32, &IpNet, DecisionRef)]) -> Result<()> {
    const CHUNK: usize = 4096;
    for chunk in entries.chunks(CHUNK) {
        let (mut keys, mut values) = (Vec::new(), Vec::new());
        for (service, net, r) in chunk {
            match key(*service, net) {
                DecisionKey::V4(k) => keys.extend_from_slice(pod_bytes(&k)),
                DecisionKey::V6(k) => keys.extend_from_slice(pod_bytes(&k)),
            }
            values.extend_from_slice(pod_bytes(r));
        }
        let failed = |e: std::io::Error, n: usize, first: &IpNet| {
            anyhow::Error::from(e).context(format!("writing {n} decisions from {first}"))
        };
        match batch(
            BPF_MAP_UPDATE_BATCH,
            map,
            &keys,
            Some(&values),
            chunk.len() as u32,
        ) {
            Ok(()) => {}
            Err(e) if batch_unsupported(&e) => {
                let (k, v) = (keys.len() / chunk.len(), values.len() / chunk.len());
                for (i, (_, net, _)) in chunk.iter().enumerate() {
                    update_one(map, &keys[i * k..][..k], &values[i * v..][..v])
                        .map_err(|e| failed(e, 1, net))?;
                }
            }
            Err(e) => return Err(failed(e, chunk.len(), chunk[0].1)),
        }
    }
    Ok(())
}
