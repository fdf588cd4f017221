//! Map layouts and pure packet/selection logic shared by the XDP program and userspace.
//!
//! Everything here is `no_std` and allocation-free so the kernel program can call it; the
//! `user` feature adds host-only helpers (text names, full-message parsing for tests).
#![cfg_attr(not(any(feature = "user", test)), no_std)]

pub mod checksum;
pub mod counters;
pub mod dns;
pub mod handover;
pub mod headers;
pub mod fallback;
pub mod maps;
pub mod name;
pub mod peers;
pub mod limits;
pub mod rrl;
pub mod select;
pub mod steer;

#[cfg(feature = "user")]
pub mod query;
