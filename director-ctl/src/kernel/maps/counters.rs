//! The per-CPU counters the program keeps, summed: verdicts (`DIR_COUNTERS`), and answers
//! per service and per server.

use anyhow::{Context, Result};
use aya::maps::{MapData, PerCpuArray};
use director_common::{
    counters::{self, Reason},
    maps::MAX_SERVICES,
};

use super::syscall::{batch_unsupported, per_cpu_total};
use super::Maps;

impl Maps {
    /// Every verdict counter, summed over CPUs, in `counters::ALL` order. `Answered` is the
    /// sum of every service id's answers: the program counts an answer once, for its
    /// service, which saves each answer a counter update (ids are never reset, so the sum
    /// only grows).
    pub fn counters(&self) -> Result<Vec<(Reason, u64)>> {
        counters::ALL
            .iter()
            .map(|&r| {
                let n = if r == Reason::Answered {
                    self.all_service_answers()?
                } else {
                    per_cpu_sum(&self.counters, r as u32)?
                };
                Ok((r, n))
            })
            .collect()
    }

    /// Answers of all service ids, summed over CPUs: one batched read of the whole array
    /// (key by key where the kernel takes no batches).
    fn all_service_answers(&self) -> Result<u64> {
        match per_cpu_total(&self.batch_service_stats, MAX_SERVICES) {
            Ok(n) => Ok(n),
            Err(e) if batch_unsupported(&e) => (0..MAX_SERVICES)
                .map(|id| per_cpu_sum(&self.service_stats, id))
                .sum(),
            Err(e) => Err(e).context("reading the services' answer counters"),
        }
    }

    /// Answers sent for a service, summed over CPUs.
    pub fn service_answers(&self, id: u32) -> Result<u64> {
        per_cpu_sum(&self.service_stats, id)
    }

    /// Answers that sent clients to a server (its address first).
    pub fn server_answers(&self, id: u16) -> Result<u64> {
        per_cpu_sum(&self.server_stats, u32::from(id))
    }
}

fn per_cpu_sum(map: &PerCpuArray<MapData, u64>, key: u32) -> Result<u64> {
    Ok(map
        .get(&key, 0)
        .with_context(|| format!("reading counter {key}"))?
        .iter()
        .sum())
}
