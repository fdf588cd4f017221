//! The only code that talks to the kernel: loading, attaching and pinning the program
//! ([`program`]), the pinned maps behind typed methods ([`maps`], opened through [`pins`];
//! the memory-mapped /16 front of the IPv4 decisions in [`dec16_mmap`]), the one-writer lock
//! ([`lock`]), and the host facts the program needs: its addresses and interfaces
//! ([`host`]), and the policy read back for userspace answers ([`resolve`]). SYN steering's maps
//! ([`steer`]) and the hops to its servers ([`hops`], resolved by [`nexthop`]). Demand
//! samples ([`demand_ring`]; the counters are read through [`maps`]). Another build's
//! program swapped in on the pinned links and maps, without a gap ([`upgrade`]).

pub mod dec16_mmap;
pub mod demand_ring;
pub mod hops;
pub mod host;
pub mod lock;
pub mod log;
pub mod maps;
pub mod nexthop;
pub mod pins;
pub mod program;
pub mod resolve;
pub mod rtt;
pub mod steer;
pub mod tick;
pub mod upgrade;

pub use demand_ring::DemandRing;
pub use lock::WriteLock;
pub use maps::{DecisionChange, Entries, Maps, ServerEntry, ServiceEntry, TableSource};
