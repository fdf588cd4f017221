//! The only code that talks to the kernel: loading, attaching and pinning the program
//! ([`program`]) and the pinned maps behind typed methods ([`maps`]).

pub mod log;
pub mod maps;
pub mod program;

pub use maps::{DecisionChange, Entries, Maps, ServerEntry, ServiceEntry};
