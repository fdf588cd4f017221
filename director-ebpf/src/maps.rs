//! The program's maps. Names, sizes and layouts come from director-common; maps are pinned
//! by name so the CLI and a controller share them and answering outlives any process.

use aya_ebpf::{
    bindings::BPF_F_MMAPABLE,
    macros::map,
    maps::{Array, HashMap, LpmTrie, LruHashMap, LruPerCpuHashMap, PerCpuArray, RingBuf},
};
use director_common::{
    counters::COUNTER_SLOTS,
    demand,
    maps::{
        DecCacheBlock, Decision, DecisionKeyV4, DecisionKeyV6, DecisionRef, Fallback, FrontSwitch,
        HealthMask, Iface, LocalSlot, NameEntry, NameSlot, Scratch, ServerRecord, ServiceRecord,
        TableSwitch, DEC16_LANES, DEC16_SLOTS, DEC_CACHE_BLOCKS, LAYOUT_VERSION, LOCAL_SLOTS,
        MAX_CHOICES, MAX_DECISIONS, MAX_IFACES, MAX_LOCAL, MAX_NAMES, MAX_RRL_EXEMPT, MAX_SERVERS,
        MAX_SERVICES, NAME_SLOTS, RRL_SLOTS,
    },
    rrl,
    rtt::{HandshakeKey, RttKey, RttStats, SynAckSeen, COUNT_SLOTS as RTT_COUNT_SLOTS},
    steer::{
        Flow, FlowKey, GuardLimit, Handover, Hops, VipKey, VipRecord, COUNT_SLOTS, MAX_FLOWS,
        MAX_VIPS,
    },
};

/// Never read by the program: its size says which layout the pinned maps have
/// (`director_common::maps::LAYOUT_VERSION`).
#[map]
pub static DIR_LAYOUT: Array<u8> = Array::pinned(LAYOUT_VERSION, 0);

/// Name hash → the owning service and its name: the whole truth, asked only for a slot of
/// `DIR_NAME_SLOTS` more than one name fell in.
#[map]
pub static DIR_NAMES: HashMap<u64, NameEntry> = HashMap::pinned(MAX_NAMES, 0);
/// The names by slot, two copies (see `NameSlot`); `DIR_FRONT` names the one read.
#[map]
pub static DIR_NAME_SLOTS: Array<NameSlot> = Array::pinned(2 * NAME_SLOTS, 0);
/// Per service id, its name, which the question is compared with.
#[map]
pub static DIR_SERVICE_NAMES: Array<NameEntry> = Array::pinned(MAX_SERVICES, 0);
#[map]
pub static DIR_SERVICES: Array<ServiceRecord> = Array::pinned(MAX_SERVICES, 0);
#[map]
pub static DIR_SERVERS: Array<ServerRecord> = Array::pinned(MAX_SERVERS, 0);
/// Per family, (service, client prefix) → the stored decision and the ECS scope. One trie
/// each: updates rewrite entries in place, so no spare table is ever filled.
#[map]
pub static DIR_DEC4: LpmTrie<DecisionKeyV4, DecisionRef> = LpmTrie::pinned(MAX_DECISIONS, 0);
#[map]
pub static DIR_DEC6: LpmTrie<DecisionKeyV6, DecisionRef> = LpmTrie::pinned(MAX_DECISIONS, 0);
/// The IPv4 front of `DIR_DEC4`: one `DecisionRef` word per /16 of the first services
/// (see `director_common::maps::DEC16_LANES`). Memory-mapped by the controller
/// (`BPF_F_MMAPABLE`), which writes its slots in place.
#[map]
pub static DIR_DEC16: Array<u64> = Array::pinned(DEC16_LANES * DEC16_SLOTS, BPF_F_MMAPABLE);
/// `DIR_DEC_GEN[0]`: bumped by the controller after every write to the tries, so that
/// `DIR_DEC_CACHE` entries read before it are no longer used.
#[map]
pub static DIR_DEC_GEN: Array<u64> = Array::pinned(1, 0);
/// Not pinned: per-CPU cache of trie results (`DecCacheBlock`), only this program uses it.
#[map]
pub static DIR_DEC_CACHE: PerCpuArray<DecCacheBlock> =
    PerCpuArray::with_max_entries(DEC_CACHE_BLOCKS, 0);
#[map]
pub static DIR_CHOICES: Array<Decision> = Array::pinned(2 * MAX_CHOICES, 0);
/// Per choice index, the service whose decision `DIR_CHOICES` holds there (0: none).
/// Written by the controller with the decision; never read here.
#[map]
pub static DIR_CHOICE_OWNER: Array<u32> = Array::pinned(2 * MAX_CHOICES, 0);
/// Uses of each stored decision, per choice index (`director_common::demand`).
#[map]
pub static DIR_DEMAND: PerCpuArray<u64> = PerCpuArray::pinned(2 * MAX_CHOICES, 0);
/// `[0]`: one use in N is sampled into `DIR_DEMAND_RING`; 0: none.
#[map]
pub static DIR_DEMAND_SAMPLE: Array<u32> = Array::pinned(1, 0);
/// Sampled uses (`demand::Sample`), drained by the controller.
#[map]
pub static DIR_DEMAND_RING: RingBuf = RingBuf::pinned(demand::RING_BYTES, 0);
/// The edge's addresses (keys: `peers::local_key_v4` for IPv4, as two native words).
#[map]
pub static DIR_LOCAL: HashMap<[u64; 2], u32> = HashMap::pinned(MAX_LOCAL, 0);
/// The same addresses by slot, two copies (see `LocalSlot`); `DIR_FRONT` names the one read.
#[map]
pub static DIR_LOCAL_SLOTS: Array<LocalSlot> = Array::pinned(2 * LOCAL_SLOTS, 0);
#[map]
pub static DIR_FRONT: Array<FrontSwitch> = Array::pinned(1, 0);
#[map]
pub static DIR_IFACES: Array<Iface> = Array::pinned(MAX_IFACES, 0);
#[map]
pub static DIR_CONFIG: Array<TableSwitch> = Array::pinned(1, 0);
#[map]
pub static DIR_COUNTERS: PerCpuArray<u64> = PerCpuArray::pinned(COUNTER_SLOTS, 0);
#[map]
pub static DIR_SVC_STATS: PerCpuArray<u64> = PerCpuArray::pinned(MAX_SERVICES, 0);
/// Answers per server (the first address of each answer: where the client was sent).
#[map]
pub static DIR_SRV_STATS: PerCpuArray<u64> = PerCpuArray::pinned(MAX_SERVERS, 0);
/// Per service, the servers its health checks keep out of answers.
#[map]
pub static DIR_HEALTH: Array<HealthMask> = Array::pinned(MAX_SERVICES, 0);
/// Per service, what to answer when none of a decision's servers can be.
#[map]
pub static DIR_FALLBACK: Array<Fallback> = Array::pinned(MAX_SERVICES, 0);
/// Per service, its response rate limit (`rrl::Limit`; rate 0: none).
#[map]
pub static DIR_RRL: Array<rrl::Limit> = Array::pinned(MAX_SERVICES, 0);
/// One bucket per (service, source prefix), shared by the CPUs: per-CPU buckets would let
/// a source whose packets land on N queues through at N times the rate.
#[map]
pub static DIR_RRL_SLOTS: Array<rrl::Slot> = Array::pinned(RRL_SLOTS, 0);
/// Source prefixes never limited, IPv4 as IPv4-mapped (`rrl::exempt_key`).
#[map]
pub static DIR_RRL_EXEMPT: LpmTrie<[u8; 16], u32> = LpmTrie::pinned(MAX_RRL_EXEMPT, 0);
/// Not pinned: per-CPU working memory only this program uses.
#[map]
pub static DIR_SCRATCH: PerCpuArray<Scratch> = PerCpuArray::with_max_entries(1, 0);
/// Not pinned: a VIP's packet between `steer::packet` and `steer::fresh` (one run, one CPU).
#[map]
pub static DIR_HANDOVER: PerCpuArray<Handover> = PerCpuArray::with_max_entries(1, 0);

/// VIPs (address, port, family, protocol) → their service and how to forward.
#[map]
pub static DIR_VIPS: HashMap<VipKey, VipRecord> = HashMap::pinned(MAX_VIPS, 0);
/// Pinned TCP flows to VIPs → their server. One table for all CPUs, so a flow whose
/// packets change queue keeps its server.
#[map]
pub static DIR_FLOWS: LruHashMap<FlowKey, Flow> = LruHashMap::pinned(MAX_FLOWS, 0);
/// Per server id, the Ethernet addresses and interface to forward through.
#[map]
pub static DIR_HOPS: Array<Hops> = Array::pinned(MAX_SERVERS, 0);
/// `DIR_STEER[0]`: the flood guard's limit on new flow entries (per CPU).
#[map]
pub static DIR_STEER: Array<GuardLimit> = Array::pinned(1, 0);
/// The flood guard's bucket, one per CPU: no sharing, no lost updates.
#[map]
pub static DIR_FLOW_GUARD: PerCpuArray<rrl::Bucket> = PerCpuArray::pinned(1, 0);
#[map]
pub static DIR_STEER_COUNTERS: PerCpuArray<u64> = PerCpuArray::pinned(COUNT_SLOTS, 0);
/// Connections steered per server (new and moved flows).
#[map]
pub static DIR_SRV_FLOWS: PerCpuArray<u64> = PerCpuArray::pinned(MAX_SERVERS, 0);

/// `director_rtt`'s maps, none pinned: each agent loads its own copy and reads it itself.
/// Client prefix → this CPU's handshake RTTs (`director_common::rtt`). One entry here, so
/// that loading the object for the XDP program allocates nothing for it; the agent sets
/// the size at load (`--max-prefixes`, default `MAX_RTT_PREFIXES`).
#[map]
pub static DIR_RTT: LruPerCpuHashMap<RttKey, RttStats> = LruPerCpuHashMap::with_max_entries(1, 0);
/// `[0]`: the generation new samples go under (the agent flips it before each drain).
#[map]
pub static DIR_RTT_GEN: Array<u32> = Array::with_max_entries(1, 0);
/// Never written: the zero value new `DIR_RTT` entries start from.
#[map]
pub static DIR_RTT_ZERO: Array<RttStats> = Array::with_max_entries(1, 0);
/// Samples per generation, handshakes without an RTT, inserts refused (`rtt::Count`).
#[map]
pub static DIR_RTT_COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(RTT_COUNT_SLOTS, 0);
/// `director_rtt_tc`'s handshakes between the SYN-ACK and its ACK. One entry here, as
/// `DIR_RTT`; the agent sizes it (`--max-pending`). Shared by the CPUs (not per-CPU): the
/// two packets of a handshake may be taken on different ones.
#[map]
pub static DIR_RTT_SYNACK: LruHashMap<HandshakeKey, SynAckSeen> =
    LruHashMap::with_max_entries(1, 0);
