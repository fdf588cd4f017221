//! The fleet's keys in etcd, and the few operations on them the roles need. Nothing else in
//! director-ctl speaks to the store.
//!
//! Under `/<fleet>/`:
//! - `chunks/<sha256>`: a table chunk or a config, immutable (so read serializably: any
//!   member's copy is the right one, even one cut off from its quorum);
//! - `versions/<version, 20 digits>`: a manifest, immutable;
//! - `current`: the version edges answer from, flipped by compare-and-swap;
//! - `election`: the publishers' election (etcd's election API, under the leader's lease);
//! - `edges/<name>`, `publishers/<name>`: what each reports, under its lease;
//! - `votes/<service>/<server>/<edge>`: an observer's verdict, under its lease;
//! - `overlay`: the servers a quorum of observers found down.

use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, DeleteOptions, GetOptions, PutOptions, Txn, TxnOp,
};

/// Every request gives up after this: a store that does not answer is treated as gone.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// Bounds one request by [`REQUEST_TIMEOUT`].
pub async fn bounded<T>(
    what: impl FnOnce() -> String,
    f: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T> {
    match tokio::time::timeout(REQUEST_TIMEOUT, f).await {
        Ok(r) => r.map_err(|e| anyhow!("{}: {e}", what())),
        Err(_) => bail!(
            "{}: the store did not answer in {} s",
            what(),
            REQUEST_TIMEOUT.as_secs()
        ),
    }
}

/// A connection to the store and the fleet's key prefix.
#[derive(Clone)]
pub struct Store {
    client: Client,
    prefix: String,
    endpoints: Vec<String>,
}

/// `etcd://h1:2379,h2:2379` → the endpoints.
pub fn parse_url(url: &str) -> Result<Vec<String>> {
    let rest = url
        .strip_prefix("etcd://")
        .with_context(|| format!("--store {url:?}: expected etcd://HOST:PORT[,HOST:PORT...]"))?;
    let eps: Vec<String> = rest
        .split(',')
        .map(|e| e.trim().trim_end_matches('/'))
        .filter(|e| !e.is_empty())
        .map(|e| format!("http://{e}"))
        .collect();
    if eps.is_empty() {
        bail!("--store {url:?}: no endpoint");
    }
    for e in &eps {
        let hostport = &e["http://".len()..];
        let (_, port) = hostport
            .rsplit_once(':')
            .with_context(|| format!("--store {url:?}: {hostport:?} has no port"))?;
        port.parse::<u16>()
            .map_err(|_| anyhow!("--store {url:?}: {hostport:?}: port {port:?} is not a number"))?;
    }
    Ok(eps)
}

/// A fleet's name: the first part of every key.
pub fn check_fleet(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if !ok {
        bail!("--fleet {name:?}: use letters, digits, '-', '_' and '.'");
    }
    Ok(())
}

impl Store {
    /// Connects lazily: a store that is down now is not an error until it is asked.
    pub async fn connect(url: &str, fleet: &str) -> Result<Store> {
        check_fleet(fleet)?;
        let endpoints = parse_url(url)?;
        // No per-request timeout on the channel: a campaign waits as long as another leads
        // and a watch lasts; the short requests are bounded one by one with [`bounded`].
        let opts = ConnectOptions::new()
            .with_connect_timeout(REQUEST_TIMEOUT)
            .with_keep_alive(Duration::from_secs(1), Duration::from_secs(2))
            .with_keep_alive_while_idle(true);
        let client = Client::connect(&endpoints, Some(opts))
            .await
            .with_context(|| format!("connecting to the store at {url}"))?;
        Ok(Store {
            client,
            prefix: format!("/{fleet}/"),
            endpoints,
        })
    }

    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    pub fn key(&self, rest: &str) -> String {
        format!("{}{rest}", self.prefix)
    }

    pub fn chunk_key(&self, digest: &str) -> String {
        self.key(&format!("chunks/{digest}"))
    }

    pub fn version_key(&self, v: u64) -> String {
        self.key(&format!("versions/{v:020}"))
    }

    pub fn client(&mut self) -> &mut Client {
        &mut self.client
    }

    /// The current version and the store's revision then. `serializable`: from whichever
    /// member answers, even one without a quorum (may be behind).
    pub async fn current(&mut self, serializable: bool) -> Result<(Option<u64>, i64)> {
        let mut o = GetOptions::new();
        if serializable {
            o = o.with_serializable();
        }
        let key = self.key("current");
        let r = bounded(
            || format!("reading {key}"),
            self.client.get(key.as_str(), Some(o)),
        )
        .await?;
        let rev = r.header().map_or(0, etcd_client::ResponseHeader::revision);
        let v = match r.kvs().first() {
            Some(kv) => Some(
                kv.value_str()
                    .ok()
                    .and_then(|s| s.parse::<u64>().ok())
                    .with_context(|| format!("{key} holds {:?}, not a version", kv.value()))?,
            ),
            None => None,
        };
        Ok((v, rev))
    }

    /// A value by key, or `None`; serializable reads for what never changes once written.
    pub async fn get(&mut self, key: &str, serializable: bool) -> Result<Option<Vec<u8>>> {
        let mut o = GetOptions::new();
        if serializable {
            o = o.with_serializable();
        }
        let mut r = bounded(|| format!("reading {key}"), self.client.get(key, Some(o))).await?;
        Ok(r.take_kvs().pop().map(|kv| kv.into_key_value().1))
    }

    /// Every key and value under `rest` (small things: edges, votes).
    pub async fn list(&mut self, rest: &str) -> Result<Vec<(String, Vec<u8>)>> {
        let key = self.key(rest);
        let o = GetOptions::new().with_prefix();
        let mut r = bounded(
            || format!("listing {key}"),
            self.client.get(key.as_str(), Some(o)),
        )
        .await?;
        Ok(r.take_kvs()
            .into_iter()
            .map(|kv| {
                let (k, v) = kv.into_key_value();
                let k = String::from_utf8_lossy(&k[key.len()..]).into_owned();
                (k, v)
            })
            .collect())
    }

    /// The keys under `rest`, without values.
    pub async fn keys(&mut self, rest: &str) -> Result<Vec<String>> {
        let key = self.key(rest);
        let o = GetOptions::new().with_prefix().with_keys_only();
        let mut r = bounded(
            || format!("listing {key}"),
            self.client.get(key.as_str(), Some(o)),
        )
        .await?;
        Ok(r.take_kvs()
            .into_iter()
            .map(|kv| String::from_utf8_lossy(&kv.key()[key.len()..]).into_owned())
            .collect())
    }

    pub async fn put(&mut self, key: &str, value: Vec<u8>, lease: Option<i64>) -> Result<()> {
        let o = lease.map(|l| PutOptions::new().with_lease(l));
        bounded(|| format!("writing {key}"), self.client.put(key, value, o)).await?;
        Ok(())
    }

    pub async fn delete(&mut self, key: &str, prefix: bool) -> Result<()> {
        let o = prefix.then(|| DeleteOptions::new().with_prefix());
        bounded(|| format!("deleting {key}"), self.client.delete(key, o)).await?;
        Ok(())
    }

    /// Flips `current` from `from` to `to`, only while `leader` (the election key this
    /// publisher holds) still exists: a publisher that lost its lease flips nothing, and
    /// two cannot both move the pointer from the same version.
    pub async fn flip(&mut self, from: Option<u64>, to: u64, leader: &[u8]) -> Result<bool> {
        let key = self.key("current");
        let was = match from {
            Some(v) => Compare::value(key.as_str(), CompareOp::Equal, v.to_string()),
            None => Compare::version(key.as_str(), CompareOp::Equal, 0),
        };
        let leads = Compare::create_revision(leader.to_vec(), CompareOp::Greater, 0);
        let txn = Txn::new().when([was, leads]).and_then([TxnOp::put(
            key.as_str(),
            to.to_string(),
            None,
        )]);
        let r = bounded(|| format!("flipping {key} to {to}"), self.client.txn(txn)).await?;
        Ok(r.succeeded())
    }

    /// A lease of `ttl` seconds.
    pub async fn lease(&mut self, ttl: i64) -> Result<i64> {
        let r = bounded(
            || "taking a lease".to_string(),
            self.client.lease_grant(ttl, None),
        )
        .await?;
        Ok(r.id())
    }

    /// Compacts the store's history up to its current revision (after old versions were
    /// deleted, so its size stays bounded). Watchers behind it are cancelled and resync.
    pub async fn compact(&mut self) -> Result<()> {
        let o = GetOptions::new().with_count_only();
        let key = self.key("current");
        let r = bounded(
            || "reading the store's revision".to_string(),
            self.client.get(key, Some(o)),
        )
        .await?;
        let rev = r.header().map_or(0, etcd_client::ResponseHeader::revision);
        if rev > 1 {
            bounded(
                || format!("compacting the store at revision {rev}"),
                self.client.compact(rev, None),
            )
            .await?;
        }
        Ok(())
    }

    /// The answering member's database size in bytes: the file, and the part in use.
    pub async fn db_size(&mut self) -> Result<(i64, i64)> {
        let r = bounded(
            || "asking the store's status".to_string(),
            self.client.status(),
        )
        .await?;
        Ok((r.db_size(), r.raft_used_db_size()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            parse_url("etcd://198.51.100.1:2379,198.51.100.2:2379").unwrap(),
            ["http://198.51.100.1:2379", "http://198.51.100.2:2379"]
        );
        for bad in ["http://a:1", "etcd://", "etcd://host", "etcd://h:x"] {
            let e = parse_url(bad).unwrap_err().to_string();
            assert!(e.contains("--store"), "{e}");
        }
        assert!(check_fleet("prod-eu").is_ok());
        assert!(check_fleet("a/b").is_err());
        assert!(check_fleet("").is_err());
    }
}
