//! Helpers for the end-to-end tests.
pub mod bench;
pub mod browser;
pub mod config;
pub mod delay;
pub mod farm;
pub mod fixture;
pub mod fleet;
pub mod metrics;
pub mod netns;
pub mod nginx;
pub mod packets;
pub mod pins;
pub mod pki;
pub mod routers;
pub mod rtt;
pub mod tempdir;
pub mod vipnet;
