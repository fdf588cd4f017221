//! The only code that talks to the kernel: loading, attaching and pinning the program
//! ([`program`]), the pinned maps behind typed methods ([`maps`]), and the host facts the
//! program needs: its addresses and interfaces ([`host`]).

pub mod host;
pub mod log;
pub mod maps;
pub mod program;

pub use maps::{DecisionChange, Entries, Maps, ServerEntry, ServiceEntry};
