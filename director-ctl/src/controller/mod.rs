//! The controller: config and data in, kernel tables out, kept equal as inputs change.
//!
//! data (read every input the config names) → compute (per prefix, per service: metrics,
//! the engine's sort, a decision; compressed as it goes) → apply (the only part that
//! writes to the kernel, through `kernel::Maps`).

pub mod apply;
pub mod compute;
pub mod data;
mod sweep;
