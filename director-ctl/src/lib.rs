//! director-ctl: attaches the XDP program and manages what it answers.
//!
//! `input` turns operator text (prefixes, server lists, names) into checked values;
//! `control` applies whole operations (validate everything, then write); `kernel` is the
//! only code that talks to the kernel.

pub mod control;
pub mod input;
pub mod kernel;

/// The XDP object, built by build.rs from director-ebpf.
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(env!("DIRECTOR_EBPF_OBJ"));
pub mod compile;
pub mod config;
pub mod controller;
pub mod engine;
pub mod inputs;
pub mod model;
