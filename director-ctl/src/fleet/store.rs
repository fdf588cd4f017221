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
//! - `votes/<edge>/<service>/<server>`: an observer's verdict, under its lease (under the
//!   edge's own prefix, so a role can grant an edge its votes alone);
//! - `overlay`: the servers a quorum of observers found down;
//! - `rtt/<site>/<agent>`: an RTT agent's report (`agent --store`), under its lease.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, DeleteOptions, GetOptions, PutOptions, Txn, TxnOp,
};

/// Under the fleet's prefix, where the RTT agents' reports are.
pub const RTT: &str = "rtt/";

/// Every request gives up after this: a store that does not answer is treated as gone.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// While it lives, tells [`Store::keep_alive`] its holder is at work (a compile, an apply
/// of seconds): long work is progress; a loop stuck elsewhere is not.
pub struct Busy(tokio::task::JoinHandle<()>);

impl Busy {
    pub fn start(progress: &Arc<AtomicU64>) -> Busy {
        let p = progress.clone();
        Busy(tokio::spawn(async move {
            loop {
                p.store(now_ms(), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Unix milliseconds now, for [`Store::keep_alive`]'s `progress`.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

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

/// A connection to the store and the fleet's key prefix: one client per member, and the
/// one in use. A request that fails or goes unanswered is tried on the next member, so a
/// dead member (or one without a leader) costs a request its time-out at most, once.
#[derive(Clone)]
pub struct Store {
    clients: Vec<Client>,
    at: usize,
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
        // and a watch lasts; the short requests are bounded one by one. HTTP/2 pings no
        // more often than etcd allows (its --grpc-keepalive-min-time is 5 s: a client
        // pinging faster has its connection closed, "too many pings"). No require-leader:
        // a member cut off from its quorum still serves serializable reads of the last data
        // (chunks and manifests, which never change), which is what an edge needs then.
        let opts = ConnectOptions::new()
            .with_connect_timeout(REQUEST_TIMEOUT)
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(3))
            .with_keep_alive_while_idle(true);
        let mut clients = Vec::with_capacity(endpoints.len());
        for e in &endpoints {
            let c = tokio::time::timeout(REQUEST_TIMEOUT, Client::connect([e], Some(opts.clone())))
                .await
                .map_err(|_| anyhow!("connecting to the store at {e}: no answer"))?
                .with_context(|| format!("connecting to the store at {e}"))?;
            clients.push(c);
        }
        Ok(Store {
            clients,
            at: 0,
            prefix: format!("/{fleet}/"),
            endpoints,
        })
    }

    pub fn key(&self, rest: &str) -> String {
        format!("{}{rest}", self.prefix)
    }

    pub fn chunk_key(&self, digest: &str) -> String {
        self.key(&format!("chunks/{digest}"))
    }

    /// Where the RTT agent `agent` of `site` writes its report (under `rtt/`).
    pub fn rtt_key(&self, site: &str, agent: &str) -> String {
        self.key(&format!("{RTT}{site}/{agent}"))
    }

    pub fn version_key(&self, v: u64) -> String {
        self.key(&format!("versions/{v:020}"))
    }

    /// The client of the member in use (for streams: campaign, watch).
    pub fn client(&mut self) -> &mut Client {
        &mut self.clients[self.at]
    }

    /// Starts on the member `name` hashes to: a fleet's edges spread over the members.
    pub fn spread(&mut self, name: &str) {
        let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        self.at = (h % self.clients.len() as u64) as usize;
    }

    /// The next member from now on (a stream on this one failed).
    pub fn next_member(&mut self) {
        self.at = (self.at + 1) % self.clients.len();
    }

    /// One request, on the member in use, then on each other once: every failure moves on.
    async fn call<T, Fut>(
        &mut self,
        what: impl Fn() -> String,
        f: impl Fn(Client) -> Fut,
    ) -> Result<T>
    where
        Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
    {
        let mut last = String::new();
        for _ in 0..self.clients.len() {
            let member = &self.endpoints[self.at];
            match tokio::time::timeout(REQUEST_TIMEOUT, f(self.clients[self.at].clone())).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) => last = format!("{member}: {e}"),
                Err(_) => last = format!("{member}: no answer in {} s", REQUEST_TIMEOUT.as_secs()),
            }
            self.next_member();
        }
        bail!("{}: no member answered (last: {last})", what())
    }

    /// One key's read, on whichever member answers. `serializable`: from that member's
    /// copy, even one without a quorum (may be behind).
    async fn read(&mut self, key: &str, serializable: bool) -> Result<etcd_client::GetResponse> {
        let k = key.to_string();
        self.call(
            || format!("reading {key}"),
            move |mut c| {
                let k = k.clone();
                let mut o = GetOptions::new();
                if serializable {
                    o = o.with_serializable();
                }
                async move { c.get(k, Some(o)).await }
            },
        )
        .await
    }

    /// The current version and the store's revision then.
    pub async fn current(&mut self, serializable: bool) -> Result<(Option<u64>, i64)> {
        let key = self.key("current");
        let r = self.read(&key, serializable).await?;
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
        let mut r = self.read(key, serializable).await?;
        Ok(r.take_kvs().pop().map(|kv| kv.into_key_value().1))
    }

    async fn range(&mut self, rest: &str, keys_only: bool) -> Result<Vec<(String, Vec<u8>)>> {
        let key = self.key(rest);
        let k = key.clone();
        let mut r = self
            .call(
                || format!("listing {key}"),
                move |mut c| {
                    let k = k.clone();
                    let mut o = GetOptions::new().with_prefix();
                    if keys_only {
                        o = o.with_keys_only();
                    }
                    async move { c.get(k, Some(o)).await }
                },
            )
            .await?;
        Ok(r.take_kvs()
            .into_iter()
            .map(|kv| {
                let (k, v) = kv.into_key_value();
                (String::from_utf8_lossy(&k[key.len()..]).into_owned(), v)
            })
            .collect())
    }

    /// Every key and value under `rest` (small things: edges, votes).
    pub async fn list(&mut self, rest: &str) -> Result<Vec<(String, Vec<u8>)>> {
        self.range(rest, false).await
    }

    /// The keys under `rest`, without values.
    pub async fn keys(&mut self, rest: &str) -> Result<Vec<String>> {
        Ok(self
            .range(rest, true)
            .await?
            .into_iter()
            .map(|(k, _)| k)
            .collect())
    }

    pub async fn put(&mut self, key: &str, value: Vec<u8>, lease: Option<i64>) -> Result<()> {
        let k = key.to_string();
        self.call(
            || format!("writing {key}"),
            move |mut c| {
                let (k, v) = (k.clone(), value.clone());
                let o = lease.map(|l| PutOptions::new().with_lease(l));
                async move { c.put(k, v, o).await }
            },
        )
        .await?;
        Ok(())
    }

    pub async fn delete(&mut self, key: &str, prefix: bool) -> Result<()> {
        let k = key.to_string();
        self.call(
            || format!("deleting {key}"),
            move |mut c| {
                let k = k.clone();
                let o = prefix.then(|| DeleteOptions::new().with_prefix());
                async move { c.delete(k, o).await }
            },
        )
        .await?;
        Ok(())
    }

    /// Publishes: writes `manifest` at `versions/<to>` and flips `current` from `from` to
    /// `to` in one transaction, only while `leader` (the election key this publisher holds)
    /// still exists. A publisher that lost its lease writes nothing, two cannot both move
    /// the pointer from the same version, and the manifest a version number names is the
    /// one made current with it. A retry after a lost answer finds the pointer moved and
    /// reports `false`: never a second flip.
    pub async fn flip(
        &mut self,
        from: Option<u64>,
        to: u64,
        manifest: Vec<u8>,
        leader: &[u8],
    ) -> Result<bool> {
        let key = self.key("current");
        let vkey = self.version_key(to);
        let (k, leader) = (key.clone(), leader.to_vec());
        let r = self
            .call(
                || format!("flipping {key} to {to}"),
                move |mut c| {
                    let was = match from {
                        Some(v) => Compare::value(k.as_str(), CompareOp::Equal, v.to_string()),
                        None => Compare::version(k.as_str(), CompareOp::Equal, 0),
                    };
                    let leads = Compare::create_revision(leader.clone(), CompareOp::Greater, 0);
                    let txn = Txn::new().when([was, leads]).and_then([
                        TxnOp::put(vkey.as_str(), manifest.clone(), None),
                        TxnOp::put(k.as_str(), to.to_string(), None),
                    ]);
                    async move { c.txn(txn).await }
                },
            )
            .await?;
        Ok(r.succeeded())
    }

    /// Writes (`Some`) or deletes (`None`) `key` only while `leader` exists; `false` when
    /// it no longer does.
    pub async fn leader_write(
        &mut self,
        key: &str,
        value: Option<Vec<u8>>,
        leader: &[u8],
    ) -> Result<bool> {
        let (k, leader) = (key.to_string(), leader.to_vec());
        let r = self
            .call(
                || format!("writing {key} as the leader"),
                move |mut c| {
                    let leads = Compare::create_revision(leader.clone(), CompareOp::Greater, 0);
                    let op = match &value {
                        Some(v) => TxnOp::put(k.as_str(), v.clone(), None),
                        None => TxnOp::delete(k.as_str(), None),
                    };
                    let txn = Txn::new().when([leads]).and_then([op]);
                    async move { c.txn(txn).await }
                },
            )
            .await?;
        Ok(r.succeeded())
    }

    /// A lease of `ttl` seconds.
    pub async fn lease(&mut self, ttl: i64) -> Result<i64> {
        let r = self
            .call(
                || "taking a lease".to_string(),
                move |mut c| async move { c.lease_grant(ttl, None).await },
            )
            .await?;
        Ok(r.id())
    }

    /// Gives the lease back (leaving: its keys go at once).
    pub async fn revoke(&mut self, lease: i64) -> Result<()> {
        self.call(
            || "revoking the lease".to_string(),
            move |mut c| async move { c.lease_revoke(lease).await },
        )
        .await?;
        Ok(())
    }

    /// Keeps `lease` alive from a task of its own, on whichever member answers, while its
    /// holder shows progress (`progress`: Unix ms of its main loop's last turn). `alive`
    /// turns false once the lease is gone for sure: the store said it expired, or no renewal
    /// went through for `ttl` seconds (past that the store has dropped it), or the holder
    /// stopped turning for `ttl` seconds: a wedged edge stops voting and a wedged publisher
    /// stops leading. A failed renewal moves to the next member at once: a member dying or
    /// hanging is no reason to give up leadership or liveness.
    pub fn keep_alive(
        &self,
        lease: i64,
        ttl: i64,
        alive: Arc<AtomicBool>,
        progress: Arc<AtomicU64>,
    ) {
        let mut store = self.clone();
        tokio::spawn(async move {
            let ttl_ms = ttl.max(1) as u64 * 1000;
            let every = Duration::from_millis((ttl_ms / 3).max(200));
            // Each try gets a third of the lease at most, so a hanging member leaves time
            // for the next one.
            let attempt = every.min(REQUEST_TIMEOUT);
            let mut last_ok = tokio::time::Instant::now();
            let mut keeper = None;
            while alive.load(Ordering::Relaxed) {
                if now_ms().saturating_sub(progress.load(Ordering::Relaxed)) >= ttl_ms {
                    alive.store(false, Ordering::Relaxed);
                    return;
                }
                if keeper.is_none() {
                    keeper = tokio::time::timeout(attempt, store.client().lease_keep_alive(lease))
                        .await
                        .ok()
                        .and_then(Result::ok);
                }
                let renewed = match keeper.as_mut() {
                    None => None,
                    Some((k, stream)) => {
                        let sent = tokio::time::timeout(attempt, k.keep_alive()).await;
                        if matches!(sent, Ok(Ok(()))) {
                            match tokio::time::timeout(attempt, stream.message()).await {
                                Ok(Ok(Some(r))) => Some(r.ttl() > 0),
                                _ => None,
                            }
                        } else {
                            None
                        }
                    }
                };
                match renewed {
                    Some(true) => last_ok = tokio::time::Instant::now(),
                    Some(false) => {
                        // The store says the lease is gone.
                        alive.store(false, Ordering::Relaxed);
                        return;
                    }
                    None => {
                        keeper = None;
                        store.next_member();
                    }
                }
                if last_ok.elapsed() >= Duration::from_millis(ttl_ms) {
                    alive.store(false, Ordering::Relaxed);
                    return;
                }
                if renewed.is_some() {
                    tokio::time::sleep(every).await;
                }
            }
        });
    }

    /// The store's revision now.
    pub async fn revision(&mut self) -> Result<i64> {
        Ok(self.current(false).await?.1)
    }

    /// Compacts the store's history up to `rev` (after old versions were deleted, so its
    /// size stays bounded). Watchers behind it are cancelled and resync.
    pub async fn compact(&mut self, rev: i64) -> Result<()> {
        if rev > 1 {
            self.call(
                || format!("compacting the store at revision {rev}"),
                move |mut c| async move { c.compact(rev, None).await },
            )
            .await?;
        }
        Ok(())
    }

    /// The answering member's database size in bytes: the file, and the part in use.
    pub async fn db_size(&mut self) -> Result<(i64, i64)> {
        let r = self
            .call(
                || "asking the store's status".to_string(),
                |mut c| async move { c.status().await },
            )
            .await?;
        Ok((r.db_size(), r.raft_used_db_size()))
    }
}

/// This publisher's election key is gone: it leads no more and campaigns again.
#[derive(Debug)]
pub struct Deposed;

impl std::fmt::Display for Deposed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("this publisher no longer leads")
    }
}

impl std::error::Error for Deposed {}

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
