//! The only code that talks to the kernel: loading, attaching and pinning the program
//! ([`program`]), the pinned maps behind typed methods ([`maps`]) and the one-writer lock
//! ([`lock`]).

pub mod lock;
pub mod log;
pub mod maps;
pub mod program;

pub use lock::WriteLock;
pub use maps::{DecisionChange, Entries, Maps, ServerEntry, ServiceEntry};
