//! TLS and credentials for the HTTP listeners other than the redirector (`[metrics]`,
//! `[ui]`, an edge's `--metrics-listen`, an agent's `GET /rtt` and `POST /probe`), from one
//! block shared by all of them (`[web]`, or `--web-config FILE`), and the client side the
//! CLI and the controller use to call them. docs/security.md says who may reach what.

pub mod auth;
pub mod client;
pub mod config;
pub mod server;
pub mod tls;

pub use client::{Client, Credential};
pub use config::WebConfig;
pub use server::Guard;

/// A bcrypt hash of `password` for `basic_auth` or `bearer_tokens` (cost 4 to 31; 10 takes
/// tens of milliseconds to verify, once per credential and process).
pub fn hash_password(password: &str, cost: u32) -> anyhow::Result<String> {
    if password.is_empty() {
        anyhow::bail!("an empty password");
    }
    if password.len() > 72 {
        anyhow::bail!("bcrypt takes at most 72 bytes of a password");
    }
    Ok(bcrypt::hash(password, cost)?)
}
