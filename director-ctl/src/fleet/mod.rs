//! A fleet of directors on etcd (`run --store etcd://... --role publisher|edge`): one
//! elected publisher compiles and publishes versioned tables ([`publisher`]), every edge
//! fetches, checks and applies them and keeps answering through any store failure
//! ([`edge`]), and health is decided by a quorum of observers ([`votes`]). [`store`] is the
//! only code that speaks to etcd; [`version`] and [`cache`] hold a version's content;
//! [`keys`] the signing keys and trust files, [`trusted`] what an edge takes under them;
//! [`page`] is the map page a publisher serves with the fleet's edges on it; [`rtt`] reads
//! the reports RTT agents write into the store.

pub mod cache;
pub mod edge;
pub mod keys;
pub mod page;
pub mod publisher;
pub mod rtt;
pub mod status;
pub mod store;
pub mod trusted;
pub mod version;
pub mod votes;

use anyhow::{Context, Result};

use crate::api::Log;

/// What every role takes from the command line.
#[derive(Clone, Debug)]
pub struct Options {
    /// `etcd://HOST:PORT[,HOST:PORT...]`.
    pub store: String,
    /// The key prefix: several fleets can share one cluster.
    pub fleet: String,
    /// This process's name in the fleet (unique per role).
    pub name: String,
    /// Seconds a lease outlives its holder.
    pub lease_ttl: i64,
    /// Observers per server.
    pub observers: usize,
    /// Down votes that take a server out; default a majority of its observers.
    pub quorum: Option<usize>,
    pub log: Log,
}

/// Runs `fut` on a runtime of its own, until it returns (SIGINT/SIGTERM).
pub fn block_on<T>(fut: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    crate::controller::run::install_signals();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the fleet's runtime")?
        .block_on(fut)
}
