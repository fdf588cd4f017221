//! `DIR_CHOICES`, the stored decisions, in two halves of which `DIR_CONFIG` names the one
//! in use. An update never rewrites a stored decision (an entry may be reading it): it
//! stores the ones it lacks at fresh ids, until a compaction moves to the other half.
//!
//! Every stored decision belongs to one service (`DIR_CHOICE_OWNER`, written with it), so
//! that a choice index names a (service, decision) pair: the program counts demand per
//! choice index (`DIR_DEMAND`), and two services with the same ranked list are counted
//! apart. The controller alone reads the owners.

// hashbrown's maps hash with foldhash, not SipHash: a full table's apply looks up a
// decision's id for each of its entries (hundreds of thousands), and no key here comes
// from the network.
use hashbrown::{HashMap as HashMap2, HashSet as HashSet2};

use anyhow::{Context, Result};
use director_common::maps::{Decision, DecisionRef, TableSwitch, MAX_CHOICES};

use super::syscall::{batch, batch_unsupported, pod_bytes, BPF_MAP_UPDATE_BATCH};
use super::Maps;

impl Maps {
    /// The half of `DIR_CHOICES` (0 = A, 1 = B) new decision ids come from. At rest every
    /// entry refers to it; a compaction moves them all to the other half and flips it.
    pub fn active_table(&self) -> Result<usize> {
        Ok((self.switch()?.active_table & 1) as usize)
    }

    pub(super) fn switch(&self) -> Result<TableSwitch> {
        self.config.get(&0, 0).context("reading the config map")
    }

    pub(super) fn set_switch(&mut self, c: TableSwitch) -> Result<()> {
        self.config
            .set(0, c, 0)
            .context("writing the config map (decision ids)")
    }

    /// Hands out at most `n - 1` decision ids per half before compacting (at most
    /// MAX_CHOICES): lets a test reach the compaction that 2^17 updates would.
    pub fn limit_stored_decisions(&mut self, n: u32) {
        self.choice_limit = n.clamp(2, MAX_CHOICES);
    }

    /// How many decisions the half in use stores (ids handed out since it was last taken
    /// into use; an update never rewrites a stored one, it adds one).
    pub fn stored_decisions(&self) -> Result<u32> {
        let c = self.switch()?;
        Ok(c.next_choice[(c.active_table & 1) as usize].clamp(1, MAX_CHOICES) - 1)
    }

    /// What half `t` stores: every id below its `next_choice` by owner and content. An id
    /// without an owner (0) matches no service: it is never handed out again.
    pub(super) fn store(&self, t: usize) -> Result<Store> {
        let next = self.switch()?.next_choice[t].clamp(1, MAX_CHOICES);
        let mut ids = HashMap2::with_capacity(next as usize);
        for id in 1..next {
            let (owner, d) = self.stored_at(choice_index(t, id))?;
            if owner != 0 {
                ids.entry((owner, d)).or_insert(id);
            }
        }
        Ok(Store { half: t, ids, next })
    }

    /// The owner and decision stored at choice index `index`.
    pub(super) fn stored_at(&self, index: u32) -> Result<(u32, Decision)> {
        let d = self
            .choices
            .get(&index, 0)
            .with_context(|| format!("reading stored decision {index}"))?;
        Ok((self.owner(index)?, d))
    }

    /// The service that owns choice index `index` (0: none).
    pub(super) fn owner(&self, index: u32) -> Result<u32> {
        self.choice_owner
            .get(&index, 0)
            .with_context(|| format!("reading the owner of stored decision {index}"))
    }

    /// Every stored decision of both halves (ids below each half's `next_choice`), with
    /// its choice index and its owning service (0: none): what `demand_counts`' indexes
    /// mean. The half not in use holds decisions only while a compaction is moving onto
    /// it, or before one flipped away from it (then `next_choice` is back at 1).
    pub fn choice_owners(&self) -> Result<Vec<(u32, u32, Decision)>> {
        let c = self.switch()?;
        let mut all = Vec::new();
        for t in 0..2 {
            for id in 1..c.next_choice[t].clamp(1, MAX_CHOICES) {
                let index = choice_index(t, id);
                let (owner, d) = self.stored_at(index)?;
                all.push((index, owner, d));
            }
        }
        Ok(all)
    }

    /// Writes decisions `fresh` (service, decision; not stored yet) at the next free ids
    /// of the store's half, each with its owner, then moves its `next_choice` past them.
    /// Ids at or above it are referenced by no entry, so writing them changes no answer.
    pub(super) fn store_choices(
        &mut self,
        store: &mut Store,
        fresh: &[(u32, Decision)],
    ) -> Result<()> {
        if fresh.is_empty() {
            return Ok(());
        }
        let t = store.half;
        let first = store.next;
        let (mut keys, mut values, mut owners) = (Vec::new(), Vec::new(), Vec::new());
        for (i, (s, d)) in fresh.iter().enumerate() {
            let id = first + i as u32;
            keys.extend_from_slice(&choice_index(t, id).to_ne_bytes());
            values.extend_from_slice(pod_bytes(d));
            owners.extend_from_slice(&s.to_ne_bytes());
            store.ids.insert((*s, *d), id);
        }
        store.next = first + fresh.len() as u32;
        let n = fresh.len() as u32;
        match batch(
            BPF_MAP_UPDATE_BATCH,
            &self.batch_choices,
            &keys,
            Some(&values),
            n,
        )
        .and_then(|()| {
            batch(
                BPF_MAP_UPDATE_BATCH,
                &self.batch_choice_owner,
                &keys,
                Some(&owners),
                n,
            )
        }) {
            Ok(()) => {}
            Err(e) if batch_unsupported(&e) => {
                for (i, (s, d)) in fresh.iter().enumerate() {
                    let index = choice_index(t, first + i as u32);
                    self.choices
                        .set(index, *d, 0)
                        .context("storing a decision")?;
                    self.choice_owner
                        .set(index, *s, 0)
                        .context("storing a decision's owner")?;
                }
            }
            Err(e) => return Err(e).context("storing decisions"),
        }
        let mut c = self.switch()?;
        c.next_choice[t] = store.next;
        self.set_switch(c)
    }
}

/// The decisions a half of `DIR_CHOICES` stores, by owning service and content (scope
/// cleared), and its next free id.
pub(super) struct Store {
    pub(super) half: usize,
    pub(super) ids: HashMap2<(u32, Decision), u32>,
    pub(super) next: u32,
}

impl Store {
    /// The distinct (service, decision) pairs of `ds` not stored yet, in first-seen order.
    pub(super) fn missing<'a>(
        &self,
        ds: impl Iterator<Item = (u32, &'a Decision)>,
    ) -> Vec<(u32, Decision)> {
        let mut seen = HashSet2::new();
        ds.map(|(s, d)| (s, stored(d)))
            .filter(|k| !self.ids.contains_key(k) && seen.insert(*k))
            .collect()
    }

    /// The trie value for `service`'s `d`, which must be stored.
    pub(super) fn reference(&self, service: u32, d: &Decision) -> DecisionRef {
        let id = self.ids.get(&(service, stored(d))).copied();
        DecisionRef {
            // Stored by `missing` + `store_choices` before any entry refers to it; the
            // empty decision (id 0, the reserved index) if it were not.
            id: choice_index(self.half, id.unwrap_or(0)),
            scope: d.prefix_len,
            _pad: [0; 3],
        }
    }
}

/// Where half `t`'s decision `id` sits in `DIR_CHOICES`.
pub(super) fn choice_index(t: usize, id: u32) -> u32 {
    t as u32 * MAX_CHOICES + id
}

/// A decision as the kernel stores it: the scope belongs to the entry, not the decision.
pub(super) fn stored(d: &Decision) -> Decision {
    Decision {
        prefix_len: 0,
        ..*d
    }
}
