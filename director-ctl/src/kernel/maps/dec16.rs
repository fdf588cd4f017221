//! Setting each service's /16 front (`DIR_DEC16`, mapped in `dec16_mmap`) after the
//! tries are written: only from the tries' own values, and only while this process knows
//! what they hold.

use anyhow::{Context, Result};
use aya::maps::MapError;
use director_common::maps::DEC16_SLOTS;
use hashbrown::HashMap as HashMap2;
use ipnet::{IpNet, Ipv4Net};

use super::decision_keys::{key, DecisionKey};
use super::entries::TableSource;
use super::Maps;

impl Maps {
    /// Sets `service`'s /16 front from `covers` (see `director_plan::prefix::cover16::covers`,
    /// of the table just written; `from` says where that table came from): a /16 that one
    /// entry answers whole gets that entry's value as the trie holds it; any other is
    /// cleared. A slot already set is left as it is: no trie write has touched its /16
    /// since it was set (each clears it first), so it still holds the trie's answer there.
    /// Call only after the table is in the tries. Returns the number of slots written.
    pub fn set_front16(
        &mut self,
        service: u32,
        covers: &[Option<Ipv4Net>],
        from: TableSource,
    ) -> Result<usize> {
        use director_common::maps::dec16_index;
        // Entries the caller's table lacks (a `route` command while `run` runs, a write
        // that failed half way) could split a /16 it calls whole: slots are only cleared
        // then, until a table read from the kernel.
        let fill = self.front16_source(from)?;
        if dec16_index(service, 0).is_none() {
            return Ok(0);
        }
        self.dec16.take_touched(service);
        let mut values = HashMap2::new();
        let mut written = 0;
        for (net16, cover) in covers.iter().enumerate() {
            written +=
                usize::from(self.set_slot(service, net16 as u32, cover, fill, &mut values)?);
        }
        Ok(written)
    }

    /// [`Self::set_front16`] for the /16s this process's writes cleared since: the only
    /// ones an update can have changed. `cover_of` gives a slot's cover (see
    /// `director_plan::prefix::cover16::cover_of`).
    pub fn set_front16_touched(
        &mut self,
        service: u32,
        cover_of: impl Fn(u32) -> Option<Ipv4Net>,
        from: TableSource,
    ) -> Result<usize> {
        let fill = self.front16_source(from)?;
        let mut values = HashMap2::new();
        let mut written = 0;
        for net16 in self.dec16.take_touched(service) {
            let cover = cover_of(net16);
            written += usize::from(self.set_slot(service, net16, &cover, fill, &mut values)?);
        }
        Ok(written)
    }

    /// Sets one slot from its cover (cleared where it has none); whether it was written.
    /// `values` keeps the trie values read, by cover.
    fn set_slot(
        &mut self,
        service: u32,
        net16: u32,
        cover: &Option<Ipv4Net>,
        fill: bool,
        values: &mut HashMap2<Ipv4Net, u64>,
    ) -> Result<bool> {
        let now = self.dec16.get(service, net16);
        let want = match cover {
            None => 0,
            Some(_) if now != 0 || !fill => return Ok(false),
            Some(n) => match values.get(n) {
                Some(w) => *w,
                None => {
                    let w = self.trie_value(service, n)?;
                    values.insert(*n, w);
                    w
                }
            },
        };
        if now == want {
            return Ok(false);
        }
        self.dec16.set(service, net16, want);
        Ok(true)
    }

    /// The trie's value for the entry `n` of `service`, as a `DIR_DEC16` word (0: none).
    fn trie_value(&self, service: u32, n: &Ipv4Net) -> Result<u64> {
        let net = IpNet::V4(*n);
        let DecisionKey::V4(k) = key(service, &net) else {
            return Ok(0);
        };
        match self.dec4.get(&k, 0) {
            // The longest entry of at most `n`'s length over it: `n` itself, as the table
            // was just written.
            Ok(r) => Ok(r.to_word()),
            Err(MapError::KeyNotFound) => Ok(0),
            Err(e) => Err(e).with_context(|| format!("reading the decision for {n}")),
        }
    }

    /// `service`'s /16 front as words (tests and the bench).
    pub fn front16_word(&self, service: u32, net16: u32) -> u64 {
        self.dec16.get(service, net16)
    }

    /// How many of `service`'s /16 slots are set (0 for a service without a lane).
    pub fn front16_slots(&self, service: u32) -> usize {
        (0..DEC16_SLOTS)
            .filter(|&n| self.dec16.get(service, n) != 0)
            .count()
    }
}
