//! The BMP listener (RFC 7854): routers connect and stream their peers' routes into
//! director-plan's [`Collector`](director_plan::inputs::bmp::Collector). This is the only
//! BMP socket code; the routing state and its rules are director-plan's.
//!
//! Plain threads, not the tokio runtime of [`crate::runtime`]: a handful of long-lived
//! connections whose work is parsing under the collector's lock (CPU, not waiting), so one
//! blocking reader per router is simpler and would need `spawn_blocking` under tokio anyway;
//! it also keeps a 500 k-route dump from delaying the runtime's listeners.

mod listener;
mod socket;

#[cfg(test)]
mod tests;

pub use listener::{Admit, Listener, Refused};
