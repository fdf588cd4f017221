//! Map layouts and pure packet/selection logic shared by the XDP program and userspace.
//!
//! Everything here is `no_std` and allocation-free so the kernel program can call it. The
//! `host` feature adds std helpers (text names, full-message parsing for tests, serde, the
//! userspace rate limiter) for crates that never touch the kernel, such as the planner;
//! `user` adds aya's `Pod` impls on top, for the crates that read and write the maps.
#![cfg_attr(not(any(feature = "host", test)), no_std)]

pub mod checksum;
pub mod counters;
pub mod demand;
pub mod dns;
pub mod fallback;
pub mod handover;
pub mod hash;
pub mod headers;
pub mod limits;
pub mod maps;
pub mod name;
pub mod peers;
pub mod rrl;
pub mod rtt;
pub mod select;
pub mod signed;
pub mod steer;

#[cfg(feature = "host")]
pub mod query;
