//! `run --role edge`: answers from the fleet's current version. At start it applies its own
//! copy (`--state-dir`, checked against its trust file again), so a restart without the
//! store answers as before; then it reads `current`, opens the version's envelope (signed
//! by a key of its trust file, for this fleet, not older than what it holds: [`trusted`]),
//! fetches the chunks its copy lacks (serializable reads: chunks never change), checks
//! every digest and the table's, applies with `sync` (only the difference, in place),
//! records the copy, and watches `current` and the overlay (signed too). What it refuses
//! it says (log, metric, report) once, and answers on from what it holds.
//!
//! [`trusted`]: super::trusted Cut off from the store
//! it keeps answering, indefinitely, and says so: a log line, `director_table_stale_seconds`
//! and its report's age in `fleet status`. A watch cancelled by compaction, or any error,
//! starts again from reading `current`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use director_plan::decide::{Computed, Ids};
use director_plan::fleet::chunks;
use director_plan::fleet::envelope::Reason;
use director_plan::fleet::manifest::Manifest;
use etcd_client::{EventType, WatchOptions};
use serde::{Deserialize, Serialize};

use super::cache::Cache;
use super::keys::TrustFile;
use super::store::{now_ms, Busy, Store, REQUEST_TIMEOUT};
use super::trusted::{self, refusal, Refused};
use super::version::{self, computed_on, config_of};
use super::votes::{apply_overlay, live_edges, Observer, Overlay};
use super::Options;
use crate::api::{Event, Refusal};
use crate::controller::apply::{assign_ids, sync, update};
use crate::controller::config::Config;
use crate::controller::run::{follow_addresses, stopping, Hopper};
use crate::kernel::{Maps, WriteLock};
use crate::metrics::{self, FleetTable, SharedTable};

pub struct Edge {
    pub pin_dir: PathBuf,
    pub state_dir: PathBuf,
    pub site: String,
    pub metrics: Option<std::net::SocketAddr>,
    /// TLS and credentials for `metrics` (`--web-config`).
    pub web: crate::web::WebConfig,
    /// `--trust`: the publishers' public keys; `None` with `--insecure-unsigned`.
    pub trust: Option<PathBuf>,
}

/// `edges/<name>`: what an edge reports (kept after it goes: `fleet status` shows its age).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub site: String,
    pub version: Option<u64>,
    pub table: Option<String>,
    /// Unix ms: when it took its version, and when it last reported.
    pub since_ms: u64,
    pub reported_ms: u64,
    /// The program answering (`director 0.1.0`), so a rolling upgrade's progress shows;
    /// absent from an older edge's report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<String>,
    /// The last version or overlay this edge refused (absent from an older edge's report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<Refusal>,
}

/// What the edge answers from now.
struct Held {
    manifest: Option<Manifest>,
    cfg: Option<Config>,
    ids: Option<Ids>,
    /// The table as written (on the kernel's ids), so the next version's difference needs
    /// no read back of the kernel's table.
    computed: Option<Computed>,
    /// The manifest was checked against the store's (not only read from disk).
    verified: bool,
    since_ms: u64,
    overlay: Overlay,
}

struct EdgeState<'a> {
    o: &'a Options,
    e: &'a Edge,
    maps: Maps,
    cache: Cache,
    held: Held,
    table: SharedTable,
    /// Unix seconds of the store's last word that the held version is current.
    confirmed: f64,
    /// The checks of the servers this edge observes, for the held version's config.
    observer: Option<Observer>,
    /// VIP next hops, followed as standalone `run` does.
    hops: Hopper,
    /// A version that failed its checks (not fetched again).
    refused: Option<u64>,
    /// An overlay refused (its bytes: not said again when read again).
    refused_overlay: Option<Vec<u8>>,
    /// The last refusal, for the report.
    last_refusal: Option<Refusal>,
    /// The publishers' keys.
    trust: TrustFile,
    /// The trust file's last error, said once.
    trust_error: String,
    /// Unix ms of the main loop's last turn (the lease is renewed only while it turns).
    progress: Arc<AtomicU64>,
    /// The live edges (`live/<name>` = site), from one listing per session and the watch.
    live: BTreeMap<String, String>,
    /// The report last written this session: written again only when it changes, so an
    /// idle fleet writes nothing (its liveness is its lease, whose renewals are not
    /// writes), and the store's history stays flat.
    reported: Option<Report>,
    /// Where the observer's checks put their results, and the bell they ring.
    results: Arc<super::votes::Results>,
}

pub async fn run(o: &Options, e: &Edge) -> Result<()> {
    let trust = TrustFile::load(e.trust.as_deref())?;
    let maps = Maps::open(&e.pin_dir)?;
    let cache = Cache::open(&e.state_dir)?;
    let mut s = EdgeState {
        o,
        e,
        maps,
        cache,
        held: Held {
            manifest: None,
            cfg: None,
            ids: None,
            computed: None,
            verified: false,
            since_ms: 0,
            overlay: Overlay::default(),
        },
        table: SharedTable::default(),
        confirmed: 0.0,
        observer: None,
        hops: Hopper::default(),
        refused: None,
        refused_overlay: None,
        last_refusal: None,
        trust,
        trust_error: String::new(),
        progress: Arc::new(AtomicU64::new(now_ms())),
        live: BTreeMap::new(),
        reported: None,
        results: Arc::default(),
    };
    s.trusting();
    s.take_disk_copy();
    if let Some(listen) = e.metrics {
        metrics::serve(
            listen,
            metrics::Sources {
                pin_dir: e.pin_dir.clone(),
                health: Default::default(),
                table: s.table.clone(),
                zones: None,
                http: None,
                explain: None,
                ask: None,
            },
            metrics::Serves {
                metrics: true,
                ui: None,
            },
            crate::web::Guard::new(&e.web).context("--web-config")?,
        )?;
    }
    s.local();
    let mut reachable = true;
    while !stopping() {
        let err = match s.session(&mut reachable).await {
            Ok(()) => return Ok(()),
            Err(err) => err,
        };
        if reachable {
            let v = s.held.manifest.as_ref().map(|m| m.version);
            let at = v.map_or("its pinned maps".to_string(), |v| format!("version {v}"));
            o.log.event(
                Event::StoreUnreachable {
                    version: v,
                    error: format!("{err:#}"),
                },
                format!(
                    "edge {}: store unreachable, answering from {at}: {err:#}",
                    o.name
                ),
            );
            reachable = false;
        }
        tokio::task::block_in_place(|| s.local());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}

impl EdgeState<'_> {
    /// What standalone `run` follows on each poll, the store or not: the host's addresses
    /// (queries to them are answered) and the VIPs' next hops.
    fn local(&mut self) {
        if let Err(e) = follow_addresses(&mut self.maps, &self.e.pin_dir) {
            self.o.log.event(
                Event::Refused {
                    error: format!("{e:#}"),
                },
                format!(
                    "edge {}: updating the edge's addresses failed: {e:#}",
                    self.o.name
                ),
            );
        }
        self.hops
            .follow(&mut self.maps, &self.e.pin_dir, self.o.log, Duration::ZERO);
    }

    fn note(&self) {
        let mut t = self
            .table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // No version yet: nothing to be stale about.
        t.fleet = self.held.manifest.as_ref().map(|m| FleetTable {
            version: m.version,
            confirmed: self.confirmed,
        });
        t.entries = self
            .held
            .manifest
            .as_ref()
            .map_or(0, |m| m.entries as usize);
    }

    /// One connection's life: a lease, the edge's liveness under it, then catching up and
    /// following the watch. An error while the lease lives (a member died, a watch broke)
    /// starts again from reading `current` on the same lease (the same error said once);
    /// one that outlives it ends the session.
    async fn session(&mut self, reachable: &mut bool) -> Result<()> {
        let o = self.o;
        let mut st = Store::connect(&o.store, &o.fleet).await?;
        // Each edge starts on a member of its own, so the watches and leases of a fleet
        // are spread over the members rather than all on the first.
        st.spread(&o.name);
        let lease = st.lease(o.lease_ttl).await?;
        let alive = Arc::new(AtomicBool::new(true));
        self.progress.store(now_ms(), Ordering::Relaxed);
        st.keep_alive(lease, o.lease_ttl, alive.clone(), self.progress.clone());
        // A new lease holds no report of this edge's: the next one is written at once.
        self.reported = None;
        // The lease's renewals stop with the session, however it ends.
        struct Ends(Arc<AtomicBool>);
        impl Drop for Ends {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Relaxed);
            }
        }
        let _ends = Ends(alive.clone());
        let live = st.key(&format!("live/{}", o.name));
        st.put(&live, self.e.site.clone().into(), Some(lease))
            .await?;
        // Votes go under this lease from now on: each is written again at the next tick.
        if let Some(obs) = self.observer.as_mut() {
            obs.rebind();
        }
        let mut said = String::new();
        loop {
            let err = match self.follow(&mut st, lease, &alive, reachable).await {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            if !alive.load(Ordering::Relaxed) {
                return Err(err);
            }
            let reason = format!("{err:#}");
            if reason != said {
                o.log.event(
                    Event::Resync {
                        reason: reason.clone(),
                    },
                    format!(
                        "edge {}: {reason}: reading the current version again",
                        o.name
                    ),
                );
                said = reason;
            }
            self.progress.store(now_ms(), Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// The store said `current` is `v`: the held version is confirmed only if it is `v`.
    fn confirm(&mut self, v: Option<u64>) {
        if v.is_some() && v == self.held.manifest.as_ref().map(|m| m.version) {
            self.confirmed = now_ms() as f64 / 1e3;
        }
    }

    /// Catches up with `current`, then follows the watch until an error (or the watch is
    /// cancelled: an error too, so the caller reads `current` again).
    async fn follow(
        &mut self,
        st: &mut Store,
        lease: i64,
        alive: &AtomicBool,
        reachable: &mut bool,
    ) -> Result<()> {
        let o = self.o;
        let (current, rev) = st.current(false).await?;
        if !*reachable {
            o.log.event(
                Event::StoreReached {
                    version: self.held.manifest.as_ref().map(|m| m.version),
                },
                format!("edge {}: store reached again", o.name),
            );
            *reachable = true;
        }
        if let Some(v) = current {
            self.fetch_if_new(st, v).await?;
        }
        self.confirm(current);
        let ov = st.get(&st.key("overlay"), false).await?;
        self.overlay(ov)?;
        self.report(st).await?;
        self.note();
        // The live edges once, at this revision or later; the watch carries their changes
        // from there (one read per session, not one per second: a fleet's reads grow with
        // its size, not its square).
        self.live = live_edges(st)
            .await?
            .into_iter()
            .map(|e| (e.name, e.site))
            .collect();
        self.observe(o, st, lease).await?;
        let cur_key = st.key("current");
        let ov_key = st.key("overlay");
        let live_prefix = st.key("live/");
        let from = WatchOptions::new().with_start_revision(rev + 1);
        let mut c = st.client().clone();
        let w = tokio::time::timeout(
            REQUEST_TIMEOUT,
            c.watch(cur_key.as_str(), Some(from.clone())),
        )
        .await;
        let mut w = match w {
            Ok(Ok(w)) => w,
            Ok(Err(e)) => {
                st.next_member();
                bail!("watching the current version: {e}");
            }
            Err(_) => {
                st.next_member();
                bail!("watching the current version: no answer");
            }
        };
        match tokio::time::timeout(
            REQUEST_TIMEOUT,
            w.watch(ov_key.as_str(), Some(from.clone())),
        )
        .await
        {
            Ok(Ok(())) => {}
            _ => {
                st.next_member();
                bail!("watching the overlay failed");
            }
        }
        let live_from = from.with_prefix();
        match tokio::time::timeout(
            REQUEST_TIMEOUT,
            w.watch(live_prefix.as_str(), Some(live_from)),
        )
        .await
        {
            Ok(Ok(())) => {}
            _ => {
                st.next_member();
                bail!("watching the live edges failed");
            }
        }
        let bell = self.results.clone();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                msg = w.message() => {
                    let r = match msg {
                        Ok(Some(r)) => r,
                        Ok(None) => {
                            st.next_member();
                            bail!("the watch ended");
                        }
                        Err(err) => {
                            st.next_member();
                            bail!("the watch failed: {err}");
                        }
                    };
                    if r.compact_revision() > 0 || r.canceled() {
                        bail!(
                            "the watch was cancelled (compacted to revision {})",
                            r.compact_revision()
                        );
                    }
                    for ev in r.events() {
                        let Some(kv) = ev.kv() else { continue };
                        if kv.key() == cur_key.as_bytes() && ev.event_type() == EventType::Put {
                            let v: u64 = kv
                                .value_str()
                                .ok()
                                .and_then(|s| s.parse().ok())
                                .with_context(|| format!("{cur_key} holds {:?}", kv.value()))?;
                            self.fetch_if_new(st, v).await?;
                            self.confirm(Some(v));
                        } else if kv.key() == ov_key.as_bytes() {
                            let v = (ev.event_type() == EventType::Put).then(|| kv.value().to_vec());
                            self.overlay(v)?;
                        } else if let Some(name) = kv.key().strip_prefix(live_prefix.as_bytes()) {
                            let name = String::from_utf8_lossy(name).into_owned();
                            if ev.event_type() == EventType::Put {
                                self.live.insert(name, String::from_utf8_lossy(kv.value()).into_owned());
                            } else {
                                self.live.remove(&name);
                            }
                            self.observe(o, st, lease).await?;
                        }
                    }
                    self.note();
                }
                () = bell.bell.notified() => {
                    self.observe(o, st, lease).await?;
                }
                _ = tick.tick() => {
                    self.progress.store(now_ms(), Ordering::Relaxed);
                    if stopping() {
                        return Ok(());
                    }
                    if !alive.load(Ordering::Relaxed) {
                        bail!("the store stopped renewing this edge's lease");
                    }
                    tokio::task::block_in_place(|| self.local());
                    self.reread_trust(st).await?;
                    // The pointer read again: a missed event is caught here, and only a
                    // store that says the held version is current confirms it.
                    let (current, _) = st.current(false).await?;
                    if let Some(v) = current {
                        self.fetch_if_new(st, v).await?;
                    }
                    self.confirm(current);
                    self.report(st).await?;
                    self.observe(o, st, lease).await?;
                    self.note();
                }
            }
        }
    }

    async fn fetch_if_new(&mut self, st: &mut Store, v: u64) -> Result<()> {
        let held = self.held.manifest.as_ref().map(|m| m.version);
        if self.refused == Some(v) {
            return Ok(());
        }
        // `current` put back below the version held: refused before anything is read.
        if let Err(e) = trusted::older("version", v, held) {
            self.refused = Some(v);
            self.refuse(&e, None);
            return self.report(st).await;
        }
        if held == Some(v) {
            if self.held.verified {
                return Ok(());
            }
            // A copy from disk: the same number in this store must be the same version (a
            // store rebuilt or another fleet could reuse it).
            let b = st.get(&st.version_key(v), false).await?;
            let same = b
                .and_then(|b| {
                    trusted::version(&self.trust, &self.o.fleet, "version", v, held, &b).ok()
                })
                .zip(self.held.manifest.as_ref())
                .is_some_and(|(m, h)| m == *h);
            if same {
                self.held.verified = true;
                return Ok(());
            }
        }
        match self.fetch(st, v).await {
            Ok(()) => self.held.verified = true,
            // A version that fails its checks is refused once, not fetched again and again:
            // the edge answers from what it has until the pointer moves on.
            Err(e) if refusal(&e).is_some() => {
                self.refused = Some(v);
                self.refuse(&e, None);
            }
            Err(e) => return Err(e),
        }
        // `fleet status` shows the new version (or the refusal) at once.
        self.report(st).await
    }

    /// Says a refusal once: a log event, `director_fleet_refused_total{what,reason}`, and
    /// the report's last refusal (`fleet status`). `what` overrides the refusal's own (a
    /// disk copy's overlay is the copy's).
    fn refuse(&mut self, e: &anyhow::Error, what: Option<&'static str>) {
        let r = refusal(e).unwrap_or(Refused {
            what: "version",
            version: None,
            reason: Reason::Invalid,
        });
        let what = what.unwrap_or(r.what);
        let held = self.held.manifest.as_ref().map(|m| m.version);
        let at = held.map_or("its pinned maps".to_string(), |h| format!("version {h}"));
        let error = format!("{e:#}");
        self.o.log.event(
            Event::FleetRefused {
                what: what.to_string(),
                version: r.version,
                reason: r.reason.as_str().to_string(),
                error: error.clone(),
            },
            format!("edge {}: {error}; answering from {at}", self.o.name),
        );
        *self
            .table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .refused
            .entry((what.to_string(), r.reason.as_str().to_string()))
            .or_default() += 1;
        self.last_refusal = Some(Refusal {
            what: what.to_string(),
            version: r.version,
            reason: r.reason.as_str().to_string(),
            error,
            at_ms: now_ms(),
        });
    }

    /// Logs the keys taken from now on.
    fn trusting(&self) {
        let keys = self.trust.names();
        let text = if keys.is_empty() {
            "nothing is checked: --insecure-unsigned".to_string()
        } else {
            keys.join(", ")
        };
        self.o.log.event(
            Event::Trusting { keys },
            format!(
                "edge {}: taking versions and overlays signed by {text}",
                self.o.name
            ),
        );
    }

    /// The trust file read again when it changed: what was refused is tried again under
    /// the new keys (a key added at last), the overlay read anew. A file that no longer
    /// reads keeps the keys held, said once.
    async fn reread_trust(&mut self, st: &mut Store) -> Result<()> {
        match self.trust.reload() {
            Ok(false) => Ok(()),
            Ok(true) => {
                self.trust_error.clear();
                self.trusting();
                self.refused = None;
                self.refused_overlay = None;
                let ov = st.get(&st.key("overlay"), false).await?;
                self.overlay(ov)
            }
            Err(e) => {
                let text = format!("{e:#}");
                if text != self.trust_error {
                    self.o.log.event(
                        Event::Refused {
                            error: text.clone(),
                        },
                        format!("edge {}: keeping the keys it trusts: {text}", self.o.name),
                    );
                    self.trust_error = text;
                }
                Ok(())
            }
        }
    }

    /// At start: the overlay and the version this edge took last, from its copy, each
    /// checked against the trust file again (what a key removed since signed is no longer
    /// taken; the pinned maps answer meanwhile).
    fn take_disk_copy(&mut self) {
        let o = self.o;
        if let Some(b) = self.cache.overlay() {
            match trusted::overlay(&self.trust, &o.fleet, &Overlay::default(), &b) {
                Ok(ov) => self.held.overlay = ov.unwrap_or_default(),
                Err(e) => self.refuse(&e, Some("copy")),
            }
        }
        let Some(signed) = self.cache.signed() else {
            if let Some(m) = self.cache.legacy() {
                let e = trusted::refused(
                    "copy",
                    Some(m.version),
                    Reason::Unsigned,
                    "it was kept before versions were signed (manifest.json): not applied; \
                     the pinned maps answer until the store's current version is taken"
                        .into(),
                );
                self.refuse(&e, None);
            }
            return;
        };
        let v = version::manifest_unchecked(&signed).map_or(0, |m| m.version);
        let m = match trusted::version(&self.trust, &o.fleet, "copy", v, None, &signed) {
            Ok(m) => m,
            Err(e) => return self.refuse(&e, None),
        };
        let parts: Option<Vec<Vec<u8>>> = m.chunks.iter().map(|c| self.cache.chunk(c)).collect();
        let (Some(cfg), Some(parts)) = (self.cache.chunk(&m.sources.config), parts) else {
            o.log.event(
                Event::Refused {
                    error: "incomplete copy".into(),
                },
                format!("edge {}: its copy of version {v} lacks chunks", o.name),
            );
            return;
        };
        // The store said this version was current when the edge took it: stale since then
        // at most, until the store says more.
        self.confirmed = self.cache.taken_at().unwrap_or(0.0);
        let took =
            tokio::task::block_in_place(|| self.take(m, signed, cfg, parts, 0, 0, Instant::now()));
        if let Err(err) = took {
            o.log.event(
                Event::Refused {
                    error: format!("{err:#}"),
                },
                format!(
                    "edge {}: its copy of version {v} is unusable: {err:#}",
                    o.name
                ),
            );
        }
    }

    /// The observer's step: the live edges as the watch has them, the checks' results
    /// taken, changed votes written.
    async fn observe(&mut self, o: &Options, st: &mut Store, lease: i64) -> Result<()> {
        let Some(obs) = self.observer.as_mut() else {
            return Ok(());
        };
        obs.set_edges(
            self.live
                .iter()
                .map(|(name, site)| director_plan::fleet::observers::Edge {
                    name: name.clone(),
                    site: site.clone(),
                })
                .collect(),
        );
        obs.step(o, st, lease).await
    }

    /// Writes `edges/<name>` when what it says changed (or this session wrote none yet).
    async fn report(&mut self, st: &mut Store) -> Result<()> {
        let mut r = Report {
            site: self.e.site.clone(),
            version: self.held.manifest.as_ref().map(|m| m.version),
            table: self.held.manifest.as_ref().map(|m| m.table.clone()),
            since_ms: self.held.since_ms,
            reported_ms: 0,
            program: Some(version::program()),
            refused: self.last_refusal.clone(),
        };
        if self.reported.as_ref() == Some(&r) {
            return Ok(());
        }
        let unstamped = r.clone();
        r.reported_ms = now_ms();
        st.put(
            &st.key(&format!("edges/{}", self.o.name)),
            serde_json::to_vec(&r)?,
            None,
        )
        .await?;
        self.reported = Some(unstamped);
        Ok(())
    }

    /// The store's overlay (`None`: deleted), taken when signed and newer than the one held;
    /// anything else is refused once and the overlay held stays in the kernel.
    fn overlay(&mut self, v: Option<Vec<u8>>) -> Result<()> {
        let Some(b) = v else {
            // Only a signed overlay replaces the one held: a deletion is no overlay at all.
            if self.held.overlay != Overlay::default()
                && self.refused_overlay.as_deref() != Some(&[])
            {
                self.refused_overlay = Some(Vec::new());
                let e = trusted::refused(
                    "overlay",
                    None,
                    Reason::Unsigned,
                    "it was deleted from the store".into(),
                );
                self.refuse(&e, None);
            }
            return Ok(());
        };
        if self.refused_overlay.as_ref() == Some(&b) {
            return Ok(());
        }
        let ov = match trusted::overlay(&self.trust, &self.o.fleet, &self.held.overlay, &b) {
            Ok(None) => return Ok(()),
            Ok(Some(ov)) => ov,
            Err(e) => {
                self.refused_overlay = Some(b);
                self.refuse(&e, None);
                return Ok(());
            }
        };
        let changed = ov.down != self.held.overlay.down;
        if changed {
            if let (Some(cfg), Some(ids)) = (&self.held.cfg, &self.held.ids) {
                let _lock = WriteLock::take(&self.e.pin_dir)?;
                apply_overlay(&mut self.maps, cfg, ids, &ov)?;
            }
            let names: Vec<String> = ov
                .down
                .iter()
                .map(|d| format!("{}/{}", d.service, d.server))
                .collect();
            self.o.log.event(
                Event::Overlay {
                    down: ov.down.clone(),
                },
                format!(
                    "edge {}: servers down by quorum: [{}]",
                    self.o.name,
                    names.join(", ")
                ),
            );
        }
        self.held.overlay = ov;
        // Kept for the next start; the kernel has it, so a disk that fails is said only.
        if let Err(e) = self.cache.put_overlay(&b) {
            self.o.log.event(
                Event::Refused {
                    error: format!("{e:#}"),
                },
                format!("edge {}: keeping its overlay failed: {e:#}", self.o.name),
            );
        }
        Ok(())
    }

    /// Fetches version `v`: its manifest, then the chunks the copy lacks.
    async fn fetch(&mut self, st: &mut Store, v: u64) -> Result<()> {
        let t = Instant::now();
        let b = st
            .get(&st.version_key(v), true)
            .await?
            .with_context(|| format!("version {v} is current but has no manifest"))?;
        // Nothing of the version is read before its envelope is opened.
        let held = self.held.manifest.as_ref().map(|m| m.version);
        let m = trusted::version(&self.trust, &self.o.fleet, "version", v, held, &b)?;
        let (mut n, mut bytes) = (0, 0u64);
        let get = |r: director_plan::fleet::manifest::ChunkRef| {
            let cache = &self.cache;
            let mut st = st.clone();
            async move {
                if let Some(b) = cache.chunk(&r) {
                    return Ok::<_, anyhow::Error>((b, false));
                }
                let b = st
                    .get(&st.chunk_key(&r.digest), true)
                    .await?
                    .with_context(|| {
                        format!("chunk {} of version {v} is not in the store", r.digest)
                    })?;
                director_plan::fleet::manifest::check_chunk(&r, &b)
                    .with_context(|| format!("chunk {}", r.digest))
                    .context(Refused::invalid(v))?;
                cache.put_chunk(&r.digest, &b)?;
                Ok((b, true))
            }
        };
        let (config, fetched) = get(m.sources.config.clone()).await?;
        if fetched {
            n += 1;
            bytes += config.len() as u64;
        }
        let mut parts = Vec::with_capacity(m.chunks.len());
        for r in m.chunks.clone() {
            let (b, fetched) = get(r).await?;
            if fetched {
                n += 1;
                bytes += b.len() as u64;
            }
            parts.push(b);
        }
        // Seconds at full scale: other tasks (the lease) run on the other worker meanwhile.
        let _busy = Busy::start(&self.progress);
        tokio::task::block_in_place(|| self.take(m, b, config, parts, n, bytes, t))
    }

    /// Checks a whole version and brings the kernel to it. What fails the version's own
    /// checks (digests, format, config, ids) is marked [`Refused`]; the kernel, the lock or
    /// the disk failing is not (retried). Once writing began, a failure leaves the kernel
    /// between versions: the next apply then diffs against the kernel's table read back,
    /// never against a version it may no longer hold.
    #[allow(clippy::too_many_arguments)]
    fn take(
        &mut self,
        m: Manifest,
        signed: Vec<u8>,
        config: Vec<u8>,
        parts: Vec<Vec<u8>>,
        fetched_chunks: usize,
        fetched_bytes: u64,
        t: Instant,
    ) -> Result<()> {
        let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        let v = m.version;
        let checked = (|| {
            let text = m.check(&config, &refs)?;
            let cfg = config_of(text, &self.cache.config_path())?;
            let tables = chunks::decode(refs.iter().copied())?;
            anyhow::Ok((cfg, tables))
        })();
        let (cfg, tables) = checked.context(Refused::invalid(v))?;
        let lock = WriteLock::take(&self.e.pin_dir)?;
        let ids = assign_ids(&self.maps, &cfg).context(Refused::invalid(v))?;
        let c = computed_on(&cfg, tables, &ids).context(Refused::invalid(v))?;
        c.fits().context(Refused::invalid(v))?;
        // The difference to the version held when the kernel still has its ids (no CLI
        // writer changed servers or services since); else to the kernel's table read back.
        let before = self.held.computed.take();
        let written = match (&before, &self.held.ids) {
            (Some(before), Some(old)) if *old == ids => {
                update(&mut self.maps, &cfg, before, &c, &ids, &|_, _| None)?
            }
            _ => sync(&mut self.maps, &cfg, &c, &ids)?,
        };
        apply_overlay(&mut self.maps, &cfg, &ids, &self.held.overlay)?;
        drop(lock);
        let ms = t.elapsed().as_secs_f64() * 1e3;
        self.o.log.event(
            Event::Took {
                version: v,
                entries: m.entries,
                written,
                fetched_chunks,
                fetched_bytes,
                ms,
            },
            format!(
                "edge {}: answering from version {v}: {} entries, {written} written, \
                 {fetched_chunks} chunks ({fetched_bytes} bytes) fetched, in {ms:.0} ms",
                self.o.name, m.entries
            ),
        );
        let carried = self.observer.take();
        let mut observer = Observer::new(&cfg, &ids, self.results.clone());
        if let Some(old) = carried {
            observer.carry(old);
        }
        self.observer = Some(observer);
        self.held.cfg = Some(cfg);
        self.held.ids = Some(ids);
        self.held.computed = Some(c);
        self.held.since_ms = now_ms();
        // The kernel holds it now; a copy on disk that cannot be written is said, not fatal.
        if let Err(e) = self.cache.applied(&m, &signed, &config) {
            self.o.log.event(
                Event::Refused {
                    error: format!("{e:#}"),
                },
                format!(
                    "edge {}: keeping its copy of version {v} failed: {e:#}",
                    self.o.name
                ),
            );
        }
        self.held.manifest = Some(m);
        self.note();
        Ok(())
    }
}
