//! The pinned maps, opened by name from the pin directory, behind typed methods: the rest of
//! director-ctl never sees a map, a key layout or a flag bit. Each method writes in the order
//! that keeps the XDP program consistent (a service before its name, a name removed before
//! its service), because the program reads these maps while they are written.
//!
//! `Maps` is defined here and its methods are spread over one file per table family, each
//! an `impl Maps` block; the raw bpf(2) calls under them are in `syscall`. The values the
//! methods take and give live in `entries`, which imports no sibling, so that re-exporting
//! them here makes no import cycle.

mod choices;
mod clock;
mod compaction;
mod counters;
mod dec16;
mod decision_keys;
mod decisions;
mod demand;
mod entries;
mod front_slots;
mod generation;
mod health;
mod ifaces;
mod local;
mod rrl;
mod servers;
mod services;
mod syscall;
mod trie_writes;
mod write_order;

pub use clock::monotonic_ns;
pub use entries::{DecisionChange, Entries, ServerEntry, ServiceEntry, TableSource};
pub use write_order::update_order;

use std::path::Path;

use anyhow::{bail, Context, Result};
use aya::maps::{Array, HashMap, LpmTrie, MapData, PerCpuArray};
use director_common::{
    demand::{MAP_DEMAND, MAP_DEMAND_SAMPLE},
    maps::{
        Decision, DecisionKeyV4, DecisionKeyV6, DecisionRef, Fallback, FrontSwitch, HealthMask,
        Iface, LocalSlot, NameEntry, NameSlot, ServerRecord, ServiceRecord, TableSwitch,
        MAP_CHOICES, MAP_CHOICE_OWNER, MAP_CONFIG, MAP_COUNTERS, MAP_DEC4, MAP_DEC6, MAP_DEC_GEN,
        MAP_FALLBACK, MAP_FRONT, MAP_HEALTH, MAP_IFACES, MAP_LOCAL, MAP_LOCAL_SLOTS, MAP_NAMES,
        MAP_NAME_SLOTS, MAP_RRL, MAP_RRL_EXEMPT, MAP_SERVERS, MAP_SERVER_STATS, MAP_SERVICES,
        MAP_SERVICE_NAMES, MAP_SERVICE_STATS, MAX_CHOICES, NAME_BUF,
    },
    name,
    rrl::Limit,
};

use super::dec16_mmap::Dec16Mmap;
use super::pins::{check_layout, open, open_data};
use super::steer::SteerMaps;

type Dec4 = LpmTrie<MapData, DecisionKeyV4, DecisionRef>;
type Dec6 = LpmTrie<MapData, DecisionKeyV6, DecisionRef>;

pub struct Maps {
    names: HashMap<MapData, u64, NameEntry>,
    services: Array<MapData, ServiceRecord>,
    servers: Array<MapData, ServerRecord>,
    dec4: Dec4,
    dec6: Dec6,
    /// The same decision maps again, for batched writes (aya has no batch API).
    batch4: MapData,
    batch6: MapData,
    /// The stored decisions, by id (both halves), and the same map for batched writes.
    choices: Array<MapData, Decision>,
    batch_choices: MapData,
    /// `DIR_CHOICE_OWNER`: each stored decision's service (batched writes beside it).
    choice_owner: Array<MapData, u32>,
    batch_choice_owner: MapData,
    /// `DIR_DEMAND` (uses per choice index, per CPU), for single and batched reads, and
    /// `DIR_DEMAND_SAMPLE` (the sampling period).
    demand: PerCpuArray<MapData, u64>,
    batch_demand: MapData,
    demand_sample: Array<MapData, u32>,
    /// `DIR_DEC_GEN`: bumped after every write to the tries (the program's cache of trie
    /// results keeps only what was read at the current number).
    dec_gen: Array<MapData, u64>,
    /// `DIR_DEC16`: cleared where a trie write is about to land, set by `set_front16`.
    dec16: Dec16Mmap,
    config: Array<MapData, TableSwitch>,
    local: HashMap<MapData, [u8; 16], u32>,
    local_slots: Array<MapData, LocalSlot>,
    batch_local_slots: MapData,
    name_slots: Array<MapData, NameSlot>,
    batch_name_slots: MapData,
    service_names: Array<MapData, NameEntry>,
    front: Array<MapData, FrontSwitch>,
    /// Ids per table handed out before an update compacts (MAX_CHOICES; lower in tests).
    choice_limit: u32,
    /// `DIR_DEC_GEN` as this process left it: after its last write to the tries, or when
    /// it last set the /16 fronts from a table read from the kernel.
    gen_seen: Option<u64>,
    /// The tries may hold entries a table this process keeps lacks: another process wrote
    /// them (`DIR_DEC_GEN` moved without us), or a write of ours failed half way.
    tries_unknown: bool,
    ifaces: Array<MapData, Iface>,
    counters: PerCpuArray<MapData, u64>,
    service_stats: PerCpuArray<MapData, u64>,
    health: Array<MapData, HealthMask>,
    server_stats: PerCpuArray<MapData, u64>,
    /// `service_stats` for batched reads.
    batch_service_stats: MapData,
    fallback: Array<MapData, Fallback>,
    rrl: Array<MapData, Limit>,
    rrl_exempt: LpmTrie<MapData, [u8; 16], u32>,
    steer: SteerMaps,
}

impl Maps {
    pub fn open(dir: &Path) -> Result<Maps> {
        check_layout(dir)?;
        let m = Maps {
            names: open(dir, MAP_NAMES)?,
            services: open(dir, MAP_SERVICES)?,
            servers: open(dir, MAP_SERVERS)?,
            dec4: open(dir, MAP_DEC4)?,
            dec6: open(dir, MAP_DEC6)?,
            batch4: open_data(dir, MAP_DEC4)?,
            batch6: open_data(dir, MAP_DEC6)?,
            choices: open(dir, MAP_CHOICES)?,
            batch_choices: open_data(dir, MAP_CHOICES)?,
            choice_owner: open(dir, MAP_CHOICE_OWNER)?,
            batch_choice_owner: open_data(dir, MAP_CHOICE_OWNER)?,
            demand: open(dir, MAP_DEMAND)?,
            batch_demand: open_data(dir, MAP_DEMAND)?,
            demand_sample: open(dir, MAP_DEMAND_SAMPLE)?,
            dec_gen: open(dir, MAP_DEC_GEN)?,
            dec16: Dec16Mmap::open(dir)?,
            config: open(dir, MAP_CONFIG)?,
            local: open(dir, MAP_LOCAL)?,
            local_slots: open(dir, MAP_LOCAL_SLOTS)?,
            batch_local_slots: open_data(dir, MAP_LOCAL_SLOTS)?,
            name_slots: open(dir, MAP_NAME_SLOTS)?,
            batch_name_slots: open_data(dir, MAP_NAME_SLOTS)?,
            service_names: open(dir, MAP_SERVICE_NAMES)?,
            front: open(dir, MAP_FRONT)?,
            choice_limit: MAX_CHOICES,
            gen_seen: None,
            tries_unknown: false,
            ifaces: open(dir, MAP_IFACES)?,
            counters: open(dir, MAP_COUNTERS)?,
            service_stats: open(dir, MAP_SERVICE_STATS)?,
            health: open(dir, MAP_HEALTH)?,
            server_stats: open(dir, MAP_SERVER_STATS)?,
            batch_service_stats: open_data(dir, MAP_SERVICE_STATS)?,
            fallback: open(dir, MAP_FALLBACK)?,
            rrl: open(dir, MAP_RRL)?,
            rrl_exempt: open(dir, MAP_RRL_EXEMPT)?,
            steer: SteerMaps::open(dir)?,
        };
        m.check_name_keys(dir)?;
        Ok(m)
    }

    /// Refuses maps whose names are keyed by another build's hash: the program that reads
    /// them would not find what this build writes, and the other way round. (The hash
    /// changed when the kernel began reading names a word at a time.)
    fn check_name_keys(&self, dir: &Path) -> Result<()> {
        for kv in self.names.iter() {
            let (key, e) = kv.context("reading the name table")?;
            let len = (e.len as usize).min(NAME_BUF);
            if name::hash(&e.name[..len]) != key {
                bail!(
                    "the maps in {} were written by another build of director (names keyed \
                     differently); detach it from every interface and attach again",
                    dir.display()
                );
            }
        }
        Ok(())
    }

    /// The SYN-steering maps: VIPs, hops, flows.
    pub fn steer(&self) -> &SteerMaps {
        &self.steer
    }

    pub fn steer_mut(&mut self) -> &mut SteerMaps {
        &mut self.steer
    }
}
