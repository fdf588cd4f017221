//! Prefix algebra shared by the planner and the CLI's operations (director-ctl's `ops`):
//! the table order ([`order`]), longest-prefix match over prefixes in that order
//! ([`sweep`]), ECS scopes ([`scopes`]) and which IPv4 /16s one entry answers whole
//! ([`cover16`]). A leaf: it uses nothing else of this crate, so both sides can lean on it.

pub mod cover16;
pub mod order;
pub mod scopes;
pub mod sweep;
