//! `DIR_DEC_GEN`, bumped after every write to the tries, so the program drops what it
//! cached from them; and what it tells this process: whether the tries hold only what it
//! wrote, the condition for setting /16 fronts from its own table.

use anyhow::{Context, Result};

use super::entries::TableSource;
use super::Maps;

impl Maps {
    /// After any write to the tries (done or failed half way): the program stops using
    /// what it cached from earlier reads of them.
    pub(super) fn tries_written(&mut self) -> Result<()> {
        let gen = self.dec_gen_now()?;
        self.note_gen(gen);
        self.dec_gen
            .set(0, gen.wrapping_add(1), 0)
            .context("bumping the decision generation")?;
        self.gen_seen = Some(gen.wrapping_add(1));
        Ok(())
    }

    fn dec_gen_now(&self) -> Result<u64> {
        self.dec_gen
            .get(&0, 0)
            .context("reading the decision generation")
    }

    /// Notes whether `DIR_DEC_GEN` moved since this process last left it.
    fn note_gen(&mut self, gen: u64) {
        if self.gen_seen.is_some_and(|g| g != gen) {
            self.tries_unknown = true;
        }
    }

    /// Before /16 slots are set from a table (`from` says where it came from): whether
    /// that table is what the tries hold, so that slots may be set from it. A table read
    /// from the kernel is; this process's own is while nothing else wrote the tries since
    /// it last knew them (and it never knew them: as if something had).
    pub fn front16_source(&mut self, from: TableSource) -> Result<bool> {
        let gen = self.dec_gen_now()?;
        match from {
            TableSource::Kernel => {
                self.tries_unknown = false;
                self.gen_seen = Some(gen);
            }
            TableSource::Own if self.gen_seen.is_none() => self.tries_unknown = true,
            TableSource::Own => self.note_gen(gen),
        }
        Ok(!self.tries_unknown)
    }
}
