//! Demand: what the kernel counted, turned into rates per (service, decision), per server
//! and site, and per sampled client prefix; capacity spill and replica placement decided
//! on them each cycle (director-plan's `demand`), and the hooks replicas run.

pub mod config;
pub mod engine;
pub mod hooks;
pub mod impact;
pub mod samples;

pub use engine::{Ctx, Demand, Outcome};
