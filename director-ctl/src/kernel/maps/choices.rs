//! `DIR_CHOICES`, the stored decisions, in two halves of which `DIR_CONFIG` names the one
//! in use. An update never rewrites a stored decision (an entry may be reading it): it
//! stores the ones it lacks at fresh ids, until a compaction moves to the other half.

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

    /// What half `t` stores: every id below its `next_choice` by content.
    pub(super) fn store(&self, t: usize) -> Result<Store> {
        let next = self.switch()?.next_choice[t].clamp(1, MAX_CHOICES);
        let mut ids = HashMap2::with_capacity(next as usize);
        for id in 1..next {
            let d = self
                .choices
                .get(&choice_index(t, id), 0)
                .with_context(|| format!("reading stored decision {id}"))?;
            ids.entry(d).or_insert(id);
        }
        Ok(Store { half: t, ids, next })
    }

    /// Writes decisions `fresh` (not stored yet) at the next free ids of the store's half,
    /// then moves its `next_choice` past them. Ids at or above it are referenced by no
    /// entry, so writing them changes no answer.
    pub(super) fn store_choices(&mut self, store: &mut Store, fresh: &[Decision]) -> Result<()> {
        if fresh.is_empty() {
            return Ok(());
        }
        let t = store.half;
        let first = store.next;
        let (mut keys, mut values) = (Vec::new(), Vec::new());
        for (i, d) in fresh.iter().enumerate() {
            let id = first + i as u32;
            keys.extend_from_slice(&choice_index(t, id).to_ne_bytes());
            values.extend_from_slice(pod_bytes(d));
            store.ids.insert(*d, id);
        }
        store.next = first + fresh.len() as u32;
        match batch(
            BPF_MAP_UPDATE_BATCH,
            &self.batch_choices,
            &keys,
            Some(&values),
            fresh.len() as u32,
        ) {
            Ok(()) => {}
            Err(e) if batch_unsupported(&e) => {
                for (i, d) in fresh.iter().enumerate() {
                    self.choices
                        .set(choice_index(t, first + i as u32), *d, 0)
                        .context("storing a decision")?;
                }
            }
            Err(e) => return Err(e).context("storing decisions"),
        }
        let mut c = self.switch()?;
        c.next_choice[t] = store.next;
        self.set_switch(c)
    }
}

/// The decisions a half of `DIR_CHOICES` stores, by content (scope cleared), and its next
/// free id.
pub(super) struct Store {
    pub(super) half: usize,
    pub(super) ids: HashMap2<Decision, u32>,
    pub(super) next: u32,
}

impl Store {
    /// The distinct decisions of `ds` not stored yet, in first-seen order.
    pub(super) fn missing<'a>(&self, ds: impl Iterator<Item = &'a Decision>) -> Vec<Decision> {
        let mut seen = HashSet2::new();
        ds.map(stored)
            .filter(|d| !self.ids.contains_key(d) && seen.insert(*d))
            .collect()
    }

    /// The trie value for `d`, which must be stored.
    pub(super) fn reference(&self, d: &Decision) -> DecisionRef {
        DecisionRef {
            // Stored by `missing` + `store_choices` before any entry refers to it; the
            // empty decision (id 0, the reserved index) if it were not.
            id: choice_index(self.half, self.ids.get(&stored(d)).copied().unwrap_or(0)),
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
