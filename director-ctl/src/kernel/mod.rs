//! The only code that talks to the kernel: loading, attaching and pinning the program
//! ([`program`]), the pinned maps behind typed methods ([`maps`]), the one-writer lock
//! ([`lock`]), and the host facts the program needs: its addresses and interfaces
//! ([`host`]), and the policy read back for userspace answers ([`resolve`]).

pub mod host;
pub mod lock;
pub mod log;
pub mod maps;
pub mod program;
pub mod resolve;

pub use lock::WriteLock;
pub use maps::{DecisionChange, Entries, Maps, ServerEntry, ServiceEntry};
