//! Compaction: when the half of `DIR_CHOICES` in use has too few ids left for an update,
//! every entry moves onto the other half, where each decision is stored once again.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use director_common::maps::{Decision, MAX_CHOICES};
use hashbrown::HashMap as HashMap2;
use ipnet::IpNet;

use super::choices::{choice_index, stored, Store};
use super::entries::Entries;
use super::write_order::update_order;
use super::Maps;

impl Maps {
    /// Moves every entry onto the other half of `DIR_CHOICES`, each decision stored there
    /// once (what running out of ids does; the bench times it at full scale). Returns the
    /// number of entries rewritten.
    pub fn compact(&mut self) -> Result<usize> {
        let moved = self.compact_with(0, &[], &[], usize::MAX);
        self.tries_unknown |= moved.is_err();
        self.tries_written()?;
        moved
    }

    /// A compaction killed after rewriting `entries` entries (tests: what a controller
    /// killed half way leaves): the decisions stored in the other half, that many entries
    /// moved onto it, no flip.
    pub fn compact_cut_short(&mut self, entries: usize) -> Result<usize> {
        let moved = self.compact_with(0, &[], &[], entries);
        self.tries_written()?;
        moved
    }

    /// When an update needs more ids than the half in use has free: every entry, with the
    /// update applied, rewritten in place onto the other half, where each decision is
    /// stored once again; then the flip. Entries are rewritten, never added beside a copy,
    /// so the tries never hold two tables (kernel memory stays that of one). Rewriting an
    /// entry onto a copy of its decision changes no answer, so only the update's own
    /// entries need `update_order`; the rest go in any order.
    pub(super) fn compact_with(
        &mut self,
        service: u32,
        put: &Entries,
        delete: &[IpNet],
        stop_after: usize,
    ) -> Result<usize> {
        let from = self.active_table()?;
        let to = 1 - from;
        let refs = self.references()?;
        let contents = self.contents(refs.iter().map(|(_, _, r)| r.id))?;
        // A compaction cut short (a killed controller) leaves entries on the target half:
        // their ids are kept as they are (where the entry's service owns the id), and new
        // ones start above them.
        let mut store = Store {
            half: to,
            ids: HashMap2::new(),
            next: 1,
        };
        let mut owners = HashMap2::new();
        for (s, _, r) in &refs {
            if let Some(id) =
                r.id.checked_sub(choice_index(to, 0))
                    .filter(|&i| i > 0 && i < MAX_CHOICES)
            {
                let owner = match owners.get(&r.id) {
                    Some(o) => *o,
                    None => *owners.entry(r.id).or_insert(self.owner(r.id)?),
                };
                if owner == *s {
                    store.ids.insert((*s, contents[&r.id]), id);
                }
                store.next = store.next.max(id + 1);
            }
        }
        let mut table: BTreeMap<(u32, IpNet), Decision> = refs
            .iter()
            .map(|(s, p, r)| ((*s, *p), contents[&r.id]))
            .collect();
        let gone: Vec<IpNet> = delete
            .iter()
            .filter(|p| table.remove(&(service, **p)).is_some())
            .copied()
            .collect();
        for (p, d) in put {
            table.insert((service, *p), stored(d));
        }
        let scopes: HashMap2<(u32, IpNet), u8> = refs
            .iter()
            .map(|(s, p, r)| ((*s, *p), r.scope))
            .chain(put.iter().map(|(p, d)| ((service, *p), d.prefix_len)))
            .collect();
        let fresh = store.missing(table.iter().map(|((s, _), d)| (*s, d)));
        if store.next as usize + fresh.len() > self.choice_limit as usize {
            bail!(
                "{} distinct decisions, more than the kernel stores ({})",
                store.ids.len() + fresh.len(),
                self.choice_limit - 1
            );
        }
        self.store_choices(&mut store, &fresh)?;
        // Per service, its entries as one update: the updated service's in its safe
        // order with its deletions, every other one a plain move.
        let mut by_service: BTreeMap<u32, Vec<(IpNet, Decision)>> = BTreeMap::new();
        for ((s, p), d) in &table {
            by_service.entry(*s).or_default().push((
                *p,
                Decision {
                    prefix_len: scopes[&(*s, *p)],
                    ..*d
                },
            ));
        }
        let mut moves = Vec::with_capacity(table.len());
        let mut deletions = Vec::new();
        for (s, entries) in &by_service {
            let none: &[IpNet] = &[];
            let (ordered, del) = update_order(entries, if *s == service { &gone } else { none });
            moves.extend(ordered.iter().map(|(p, d)| (*s, p, store.reference(*s, d))));
            deletions.extend(del.iter().map(|p| (*s, *p)));
        }
        if !by_service.contains_key(&service) {
            deletions.extend(update_order(&[], &gone).1.iter().map(|p| (service, *p)));
        }
        if stop_after < moves.len() {
            self.put_all(&moves[..stop_after])?;
            return Ok(stop_after);
        }
        self.put_all(&moves)?;
        for (s, net) in &deletions {
            self.delete(*s, net)?;
        }
        let mut c = self.switch()?;
        c.active_table = to as u32;
        // The half left behind is referenced by no entry now; it is written again only at
        // the next compaction, from id 1.
        c.next_choice[from] = 1;
        self.set_switch(c)
            .context("switching decision ids to the other half")?;
        // A query that read an entry just before it moved may still be reading the old
        // half; programs run for microseconds, so this pause outlasts any of them before
        // a later compaction can write that half again.
        std::thread::sleep(std::time::Duration::from_millis(20));
        Ok(moves.len())
    }
}
