//! director-plan: from a config and its data to each service's decision table, with no
//! kernel in sight (no aya, no build script, no root): `cargo test -p director-plan` runs
//! on a stock stable toolchain.
//!
//! Data flows one way: [`config`] (what the planner needs of the file) and [`inputs`]
//! (MRT, GeoIP, CSV and graph readers → [`model`] types) → [`data`] (everything arranged
//! by prefix) → [`decide`] (per prefix and service: metrics and the [`engine`]'s sort) →
//! [`compile`] (decisions to the fewest LPM entries, via [`minimal`], and diffs). [`explain`]
//! replays one client's sort, [`guard`] measures what a change would remove, and
//! [`report`] holds the `--json` documents these build. [`prefix`] is the prefix algebra
//! (table order, longest-prefix sweeps, ECS scopes, the /16 cover rule) everything here and
//! director-ctl's operations share.

pub mod atlas;
pub mod compile;
pub mod config;
pub mod data;
pub mod decide;
pub mod demand;
pub mod dnssec;
pub mod engine;
pub mod explain;
pub mod fleet;
pub mod guard;
pub mod inputs;
pub mod live;
pub mod minimal;
pub mod model;
pub mod prefix;
pub mod report;

pub use config::Config;
