//! director-ctl: attaches the XDP program and manages what it answers.
//!
//! Layers, each depending only on those after it (see ARCHITECTURE.md):
//! [`cli`] (arguments, operator text, printing) → [`ops`] (whole operator operations) and
//! [`controller`] (config, inputs, engine, compile) → [`kernel`] (the only code that talks
//! to the kernel). [`api`] holds the `--json` documents and [`checked`] the values every
//! layer checks the same way.

pub mod agent;
pub mod api;
pub mod bmp;
pub mod checked;
pub mod cli;
pub mod controller;
pub mod dns;
pub mod fleet;
pub mod health;
pub mod kernel;
pub mod metrics;
pub mod ops;
pub mod redirect;
pub mod rrl;
pub mod runtime;
pub mod ui;
pub mod web;

/// The XDP object, built by build.rs from director-ebpf.
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(env!("DIRECTOR_EBPF_OBJ"));
