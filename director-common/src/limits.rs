//! Bounds that several modules size their layouts, loops and hash slots by.
//!
//! A leaf: it imports nothing from the crate, so `maps`, `handover`, `name` and `peers` can
//! all depend on it without depending on each other.

/// Server ids are 1..MAX_SERVERS (they are u16 in decisions).
pub const MAX_SERVERS: u32 = 8192;

/// Candidates per decision.
pub const MAX_CANDIDATES: usize = 8;

/// Words of `Scratch::hidden` (a power of two: indexes are masked with `HIDDEN_WORDS - 1`).
pub const HIDDEN_WORDS: usize = 16;

/// Longest wire-format name, root label included (RFC 1035 §3.1).
pub const MAX_WIRE_LEN: usize = 255;

/// Slots per copy of `DIR_NAME_SLOTS` (`name::slot` picks one from the name's hash).
pub const NAME_SLOT_BITS: u32 = 10;
pub const NAME_SLOTS: u32 = 1 << NAME_SLOT_BITS;

/// Slots per copy of `DIR_LOCAL_SLOTS` (`peers::local_slot` picks one from the address).
pub const LOCAL_SLOT_BITS: u32 = 8;
pub const LOCAL_SLOTS: u32 = 1 << LOCAL_SLOT_BITS;
