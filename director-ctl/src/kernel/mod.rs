//! Loading, attaching and pinning the program; opening its pinned maps.

pub mod maps;
pub mod program;

pub use maps::Maps;
