//! Demand as the program counts it (`DIR_DEMAND`: uses per choice index, per CPU; see
//! `director_common::demand` for what a use is) and its sampling period
//! (`DIR_DEMAND_SAMPLE`). `choice_owners` (in `choices`) says which (service, decision)
//! each index is; the samples themselves are read by `kernel::demand_ring`.

use anyhow::{Context, Result};
use director_common::maps::MAX_CHOICES;

use super::syscall::{batch_unsupported, per_cpu_each};
use super::Maps;

impl Maps {
    /// Every choice index with uses counted, summed over CPUs, in index order. One batched
    /// read of the whole array (a system call per 1024 indexes; key by key where the
    /// kernel takes no batches). Counts only grow: the caller takes differences.
    pub fn demand_counts(&self) -> Result<Vec<(u32, u64)>> {
        let mut counts = Vec::new();
        let len = 2 * MAX_CHOICES;
        match per_cpu_each(&self.batch_demand, len, |i, n| {
            if n != 0 {
                counts.push((i, n));
            }
        }) {
            Ok(()) => {}
            Err(e) if batch_unsupported(&e) => {
                counts.clear();
                for i in 0..len {
                    let n: u64 = self
                        .demand
                        .get(&i, 0)
                        .with_context(|| format!("reading demand at {i}"))?
                        .iter()
                        .fold(0, |t, v| t.wrapping_add(*v));
                    if n != 0 {
                        counts.push((i, n));
                    }
                }
            }
            Err(e) => return Err(e).context("reading the demand counters"),
        }
        counts.sort_unstable_by_key(|(i, _)| *i);
        Ok(counts)
    }

    /// Samples one use in `n` (per CPU) into `DIR_DEMAND_RING`; 0 samples none.
    pub fn set_demand_sampling(&mut self, n: u32) -> Result<()> {
        self.demand_sample
            .set(0, n, 0)
            .context("writing the demand sampling period")
    }

    /// The sampling period in force (0: off).
    pub fn demand_sampling(&self) -> Result<u32> {
        self.demand_sample
            .get(&0, 0)
            .context("reading the demand sampling period")
    }
}
