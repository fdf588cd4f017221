//! Helpers for the end-to-end tests.
pub mod netns;
pub mod fixture;
pub mod packets;
