//! `agent --store`: the agent's report written into a fleet's store, where the fleet's
//! publishers read it (`[rtt] from_store`) instead of polling every agent. One key per
//! agent, `rtt/<site>/<agent>`, written when a window closed with records other than the
//! last written, under a lease of a few windows that the agent's drain loop keeps alive:
//! a dead or wedged agent's records vanish on their own, and one that stops revokes it.
//!
//! A thread of its own with its own small runtime, so that a slow or absent store never
//! delays a drain; it takes only the newest report (an older one not yet written is
//! superseded, never queued).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::api::{RttRecord, RttReport};
use crate::fleet::store::{self, now_ms, Store};

/// Where the agent writes: the store's URL, the fleet and this agent's name in it.
#[derive(Clone, Debug)]
pub struct Target {
    /// `etcd://HOST:PORT[,HOST:PORT...]`, as `run --store` takes it.
    pub url: String,
    pub fleet: String,
    pub name: String,
}

/// Windows a lease outlives the agent's last turn, and the least seconds it lasts (etcd
/// refuses leases shorter than its election timeout allows).
const LEASE_WINDOWS: u64 = 3;
const LEASE_MIN_S: u64 = 3;

/// How long a stopping agent waits for its lease to be revoked.
const STOP_WAIT: Duration = Duration::from_secs(5);

pub fn lease_seconds(window_s: u64) -> i64 {
    (window_s.saturating_mul(LEASE_WINDOWS)).max(LEASE_MIN_S) as i64
}

/// What the drain loop hands the writer: the newest report not yet taken, and whether the
/// agent stops.
#[derive(Default)]
struct Slot {
    report: Mutex<Option<RttReport>>,
    stop: AtomicBool,
}

impl Slot {
    fn take(&self) -> Option<RttReport> {
        self.report
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}

pub struct Writer {
    slot: Arc<Slot>,
    progress: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

/// How often the writer looks for a new report (a window is a second or more).
const LOOK: Duration = Duration::from_millis(50);

impl Writer {
    /// Checks `t` and starts writing; the store is reached in the background (an agent
    /// whose store is down keeps measuring and serving `GET /rtt`).
    pub fn start(t: Target, site: &str, window_s: u64) -> Result<Writer> {
        store::parse_url(&t.url)?;
        store::check_fleet(&t.fleet)?;
        if t.name.is_empty() || t.name.contains(['/', ' ', '\t', '\n']) {
            bail!("--name {:?}: non-empty, without '/' or spaces", t.name);
        }
        let slot = Arc::new(Slot::default());
        let progress = Arc::new(AtomicU64::new(now_ms()));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the store writer's runtime")?;
        let job = Job {
            target: t,
            site: site.to_string(),
            ttl: lease_seconds(window_s),
            slot: slot.clone(),
            progress: progress.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("agent-store".into())
            .spawn(move || rt.block_on(write(&job)))
            .context("starting the store writer")?;
        Ok(Writer {
            slot,
            progress,
            thread: Some(thread),
        })
    }

    /// A window closed: its report is written if its records changed. Also what keeps the
    /// lease alive: an agent whose windows stop closing loses it.
    pub fn window(&self, doc: &RttReport) {
        self.progress.store(now_ms(), Ordering::Relaxed);
        *self
            .slot
            .report
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(doc.clone());
    }
}

impl Drop for Writer {
    /// The agent stops: its lease is revoked (its key goes at once), waited for a moment.
    fn drop(&mut self) {
        self.slot.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let t0 = Instant::now();
            while !t.is_finished() && t0.elapsed() < STOP_WAIT {
                std::thread::sleep(Duration::from_millis(20));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }
}

/// The writer's thread: where it writes, for how long a lease, and what the agent hands it.
struct Job {
    target: Target,
    site: String,
    ttl: i64,
    slot: Arc<Slot>,
    progress: Arc<AtomicU64>,
}

/// Sessions until the agent stops: a session takes a lease and writes under it; a store
/// that fails (or a lease lost) ends it, and the next starts a second later with the newest
/// report.
async fn write(job: &Job) {
    let (site, slot) = (&job.site, &job.slot);
    let mut said = String::new();
    // The newest report, kept until a session has written it.
    let mut pending: Option<RttReport> = None;
    loop {
        let alive = Arc::new(AtomicBool::new(true));
        let r = session(job, &alive, &mut pending, &mut said).await;
        // Whatever ended it, its keep-alive stops.
        alive.store(false, Ordering::Relaxed);
        match r {
            Ok(()) => return,
            Err(e) => {
                let text = format!("{e:#}");
                if text != said {
                    eprintln!("director-ctl agent: site {site}: the store: {text}; trying again");
                    said = text;
                }
            }
        }
        for _ in 0..20 {
            if slot.stop.load(Ordering::Relaxed) {
                return;
            }
            tokio::time::sleep(LOOK).await;
        }
    }
}

async fn session(
    job: &Job,
    alive: &Arc<AtomicBool>,
    pending: &mut Option<RttReport>,
    said: &mut String,
) -> Result<()> {
    let (t, site, ttl, slot) = (&job.target, &job.site, job.ttl, &job.slot);
    let mut st = Store::connect(&t.url, &t.fleet).await?;
    let key = st.rtt_key(site, &t.name);
    let lease = st.lease(ttl).await?;
    st.keep_alive(lease, ttl, alive.clone(), job.progress.clone());
    // Each session writes its first report whatever the last session wrote: the key may
    // have gone with the last lease.
    let mut written: Option<Vec<RttRecord>> = None;
    loop {
        if slot.stop.load(Ordering::Relaxed) {
            let _ = st.revoke(lease).await;
            return Ok(());
        }
        if !alive.load(Ordering::Relaxed) {
            bail!("its lease on {key} was lost");
        }
        if let Some(newer) = slot.take() {
            *pending = Some(newer);
        }
        if let Some(doc) = pending.as_mut() {
            if written.as_ref() != Some(&doc.records) {
                doc.now_ms = now_ms();
                let value = serde_json::to_vec(&*doc).context("the report as JSON")?;
                st.put(&key, value, Some(lease)).await?;
                if written.is_none() {
                    eprintln!(
                        "director-ctl agent: site {site}: writing its reports to {key} (a \
                         lease of {ttl} s)"
                    );
                    said.clear();
                }
                written = Some(doc.records.clone());
            }
        }
        tokio::time::sleep(LOOK).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_lasts_a_few_windows() {
        assert_eq!(lease_seconds(10), 30);
        assert_eq!(lease_seconds(1), 3);
    }

    #[test]
    fn targets_are_checked_at_start() {
        let t = |url: &str, fleet: &str, name: &str| Target {
            url: url.into(),
            fleet: fleet.into(),
            name: name.into(),
        };
        for (bad, what) in [
            (t("http://h:1", "f", "a"), "--store"),
            (t("etcd://h:1", "a/b", "a"), "--fleet"),
            (t("etcd://h:1", "f", "a/b"), "--name"),
            (t("etcd://h:1", "f", ""), "--name"),
        ] {
            let e = Writer::start(bad, "fra", 10).err().expect("refused");
            assert!(format!("{e:#}").contains(what), "{e:#}");
        }
    }
}
