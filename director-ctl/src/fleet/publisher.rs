//! `run --role publisher`: campaigns in the fleet's election; the leader compiles the config
//! and its inputs as standalone `run` does, and publishes a version when the table or what
//! it was compiled from changed: the chunks the store lacks, then the manifest, then a
//! compare-and-swap of `current` that holds only while this publisher still leads. Old
//! versions beyond `--keep-versions` are deleted with their chunks and the store compacted.
//! It also tallies the observers' votes into the health overlay.
//!
//! With `[bgp] bmp_listen` or `[rtt] agents` (or `from_store`) in the config, every
//! publisher (standing by too) listens for its routers and polls the agents (or reads their
//! reports from the store) from its start, so that one taking
//! over has their state already; the leader lays it over the files' data, and each live
//! change (debounced as `run` does) is decided again under the prefixes it touched and
//! published as the next version.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use director_plan::data::Data;
use director_plan::fleet::envelope::Kind;
use director_plan::fleet::manifest::{Manifest, Sources};

use super::keys::{Sealer, SignKey};
use super::page::{Drawn, Page};
use super::store::{now_ms, Busy, Deposed, Store};
use super::version::{self, Built, LiveTable};
use super::votes;
use super::Options;
use crate::api::Event;
use crate::controller::config::Config;
use crate::controller::live::{self, Live};
use crate::controller::run::{confirmation, stamps, stopping, watched, Stamp};

pub struct Publisher {
    pub config: PathBuf,
    /// `--sign-key`: the private key every manifest and overlay is signed with; `None`
    /// with `--insecure-unsigned`.
    pub sign_key: Option<PathBuf>,
    /// Versions kept in the store (the current one included).
    pub keep: u64,
    pub poll: Duration,
}

/// Runs until SIGINT/SIGTERM: a lost store or lease starts the campaign again.
pub async fn run(o: &Options, p: &Publisher) -> Result<()> {
    let mut sealer = Sealer::new(p.sign_key.as_deref().map(SignKey::load).transpose()?);
    o.log.event(
        Event::Signing {
            key: sealer.id().to_string(),
        },
        format!(
            "publisher {}: signing versions and overlays with key {}",
            o.name,
            sealer.id()
        ),
    );
    let page = Page::start(o, &p.config)?;
    // Before the campaign: a router sends to every publisher (BMP has one collector per
    // target, so each router is configured with one target per publisher), and a standby
    // that takes over decides with the tables it has kept since.
    let mut live = None;
    start_live(o, &p.config, &mut live);
    let mut last_error = String::new();
    while !stopping() {
        let led = lead(o, p, page.as_ref(), &mut live, &mut sealer).await;
        if let Some(page) = &page {
            page.leading(false);
        }
        match led {
            Ok(()) => return Ok(()),
            // The same failure again (a store still down) is said once.
            Err(e) if format!("{e:#}") == last_error => {}
            Err(e) => {
                last_error = format!("{e:#}");
                o.log.event(
                    Event::StoreUnreachable {
                        version: None,
                        error: format!("{e:#}"),
                    },
                    format!("publisher {}: {e:#}; campaigning again", o.name),
                );
            }
        }
        // The agents' reports would pile up in memory while the store is away (and the
        // collector's hold timers stand still): kept up meanwhile.
        for _ in 0..5 {
            if let Some(l) = live.as_mut() {
                l.keep_up();
            }
            answer_page(page.as_ref(), live.as_ref());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(())
}

/// Standing by, the page's explain asks for the live inputs this thread holds.
fn answer_page(page: Option<&Page>, live: Option<&Live>) {
    if let Some(p) = page.filter(|p| p.wants_live()) {
        p.live_now(live.map(Live::snapshot));
    }
}

/// Starts the live inputs `config` asks for, unless they run already; a config that cannot
/// be read now is tried again at the next compile (which says what is wrong with it).
fn start_live(o: &Options, config: &Path, live: &mut Option<Live>) {
    if live.is_some() {
        return;
    }
    let Ok(cfg) = Config::load(config) else {
        return;
    };
    let every = Duration::from_secs_f64(cfg.plan.rtt.poll);
    let store = super::rtt::feed(o.store.clone(), o.fleet.clone(), every);
    match Live::start_with(&cfg.plan, o.log, Some(store)) {
        Ok(l) => *live = l,
        Err(e) => o.log.event(
            Event::Refused {
                error: format!("{e:#}"),
            },
            format!("publisher {}: live inputs not started: {e:#}", o.name),
        ),
    }
}

/// Whether a version is current already: then a first table waits for the routers (as a
/// restarted `run` keeps the kernel's decisions), rather than replacing one made with
/// them by one made without.
async fn has_current(st: &mut Store) -> Result<bool> {
    Ok(st.current(false).await?.0.is_some())
}

async fn lead(
    o: &Options,
    p: &Publisher,
    page: Option<&Page>,
    live: &mut Option<Live>,
    sealer: &mut Sealer,
) -> Result<()> {
    let mut st = Store::connect(&o.store, &o.fleet).await?;
    let lease = st.lease(o.lease_ttl).await?;
    let alive = Arc::new(AtomicBool::new(true));
    let progress = Arc::new(AtomicU64::new(now_ms()));
    st.keep_alive(lease, o.lease_ttl, alive.clone(), progress.clone());
    let election = st.key("election");
    // Waits while another leads; given up when the lease is lost meanwhile. A campaign
    // that fails (its member died, or the history it waited on was compacted) is made
    // again on the same lease: its key in the election stays where it was.
    let leader = loop {
        let mut c = st.client().clone();
        let failed = tokio::select! {
            r = c.campaign(election.as_str(), o.name.as_str(), lease) => match r {
                Ok(r) => break r.leader().map(|l| l.key().to_vec()).context("campaign without a key")?,
                Err(_) => true,
            },
            () = async {
                while alive.load(Ordering::Relaxed) && !stopping() {
                    progress.store(now_ms(), Ordering::Relaxed);
                    if let Some(l) = live.as_mut() {
                        l.keep_up();
                    }
                    answer_page(page, live.as_ref());
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            } => false,
        };
        if !alive.load(Ordering::Relaxed) {
            bail!("lost the lease while waiting to lead");
        }
        if stopping() {
            return Ok(());
        }
        if failed {
            st.next_member();
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    if let Some(page) = page {
        page.leading(true);
    }
    o.log.event(
        Event::Leading {
            publisher: o.name.clone(),
        },
        format!("publisher {}: leading the fleet {}", o.name, o.fleet),
    );
    let mut seen: Option<Vec<Stamp>> = None;
    let mut files = vec![p.config.clone()];
    let mut cfg: Option<Config> = None;
    // A compiled version not yet published (the store failed meanwhile): retried on every
    // poll while this publisher leads, never half-published (current flips last). With it,
    // the map page's copy of what it was compiled from, handed over once published.
    let mut pending: Option<(Built, f64, Option<Drawn>)> = None;
    // With live inputs: the table kept between versions, each live change laid over it.
    let mut table: Option<LiveTable> = None;
    let mut current: Option<bool> = None;
    let mut waiting = false;
    let mut last_error = String::new();
    let mut last_step: Option<Instant> = None;
    let mut last_publish: Option<Instant> = None;
    // The last version this publisher made current (or found current), but its live state.
    let mut published: Option<(String, Sources)> = None;
    let mut compact = Compaction::default();
    // The map page's copy of the live table's data, and when it was made.
    let mut page_data: Option<(Arc<Data>, Instant)> = None;
    let mut key_error = String::new();
    while !stopping() {
        progress.store(now_ms(), Ordering::Relaxed);
        if !alive.load(Ordering::Relaxed) {
            bail!("lost the lease: no longer leading");
        }
        // A key switched in place (a rotation): what is current is signed again under it,
        // through the compile and publish below; a key file that no longer reads keeps
        // the key held.
        match sealer.reload() {
            Ok(false) => {}
            Ok(true) => {
                key_error.clear();
                o.log.event(
                    Event::Signing {
                        key: sealer.id().to_string(),
                    },
                    format!(
                        "publisher {}: signing with key {} from now on",
                        o.name,
                        sealer.id()
                    ),
                );
                seen = None;
            }
            Err(e) => {
                let text = format!("{e:#}");
                if text != key_error {
                    o.log.event(
                        Event::Refused {
                            error: text.clone(),
                        },
                        format!(
                            "publisher {}: still signing with key {}: {text}",
                            o.name,
                            sealer.id()
                        ),
                    );
                    key_error = text;
                }
            }
        }
        if confirmation() {
            // SIGUSR1: the loss of every site's peers that was refused is taken.
            if let Some(l) = live.as_mut() {
                l.confirmed = true;
            }
        }
        let now = stamps(&files);
        if seen.as_ref() != Some(&now) {
            start_live(o, &p.config, live);
            let unsynced =
                seen.is_none() && live.as_mut().is_some_and(|l| l.has_bgp() && !l.bgp_ready());
            if unsynced && current.is_none() {
                current = Some(has_current(&mut st).await?);
            }
            let hold = unsynced && current == Some(true);
            if hold {
                if cfg.is_none() {
                    // The votes are counted meanwhile (a server may go down while the
                    // routers resend).
                    cfg = Config::load(&p.config).ok();
                }
                if !waiting {
                    waiting = true;
                    o.log.event(
                        Event::Refused {
                            error: "waiting for BMP routers".into(),
                        },
                        format!(
                            "publisher {}: the current version stands until the BMP routers \
                             have sent their tables (at most [bgp] hold)",
                            o.name
                        ),
                    );
                }
            } else {
                // A file still being written is read once it stayed the same a moment.
                tokio::time::sleep(Duration::from_millis(200)).await;
                let t = Instant::now();
                let busy = Busy::start(&progress);
                let compiled = match live.as_mut() {
                    Some(l) => tokio::task::block_in_place(|| compile_live(&p.config, l)),
                    None => compile(&p.config).await,
                };
                drop(busy);
                match compiled {
                    Ok(Compiled::Files(c, w, config)) => {
                        let drawn = page.map(|_| {
                            Drawn::new(config.clone(), Arc::new(c.data), c.tables, w.clone())
                        });
                        files = w;
                        cfg = Some(config);
                        table = None;
                        pending = Some((c.built, t.elapsed().as_secs_f64(), drawn));
                    }
                    Ok(Compiled::Live(lt, w)) => {
                        let l = live.as_ref().context("live inputs without their state")?;
                        // New files: the page's copy of the data is made again.
                        page_data = None;
                        let drawn = page.map(|_| drawn(&lt, &w, &mut page_data));
                        pending = Some((lt.built(l), t.elapsed().as_secs_f64(), drawn));
                        files = w;
                        cfg = Some(lt.cfg.clone());
                        table = Some(lt);
                    }
                    Err(e) => o.log.event(
                        Event::Refused {
                            error: format!("{e:#}"),
                        },
                        format!("publisher {}: nothing published: {e:#}", o.name),
                    ),
                }
                seen = Some(stamps(&files));
            }
        }
        match (live.as_mut(), table.as_mut()) {
            (Some(l), Some(lt)) => {
                let t = Instant::now();
                let busy = Busy::start(&progress);
                let followed = tokio::task::block_in_place(|| lt.follow(l));
                drop(busy);
                match followed {
                    Ok(None) => {}
                    Ok(Some(f)) => {
                        let b = lt.built(l);
                        let ms = t.elapsed().as_secs_f64() * 1e3;
                        o.log.event(
                            Event::Live {
                                bgp: f.bgp,
                                rtt: f.rtt,
                                prefixes: f.prefixes,
                                full: f.full,
                                entries: f.entries,
                                ms,
                            },
                            format!(
                                "publisher {}: live inputs changed ({} routes, {} RTT \
                                 measurements): {} prefixes decided again{}, {} entries \
                                 changed in {ms:.0} ms",
                                o.name,
                                f.bgp,
                                f.rtt,
                                f.prefixes,
                                if f.full { " (all of them)" } else { "" },
                                f.entries
                            ),
                        );
                        // A route or measurement that changed no decision is no new
                        // version: the one published stands (its sources name the live
                        // state it was decided with, and this state gives the same). A
                        // change undone before it was published leaves nothing to publish.
                        pending = if published.as_ref() == Some(&identity(&b)) {
                            None
                        } else {
                            let drawn = page.map(|_| drawn(lt, &files, &mut page_data));
                            Some((b, ms / 1e3, drawn))
                        };
                    }
                    Err(e) => {
                        o.log.event(
                            Event::Refused {
                                error: format!("{e:#}"),
                            },
                            format!(
                                "publisher {}: a live change could not be decided, compiling \
                                 again: {e:#}",
                                o.name
                            ),
                        );
                        table = None;
                        seen = None;
                    }
                }
            }
            // Reports and timers keep up while nothing is decided from them.
            (Some(l), None) => l.keep_up(),
            _ => {}
        }
        // Published as soon as there is something (a live change is not held back by the
        // poll); the votes and a failed publish's retry at the poll's pace.
        let due = last_step.is_none_or(|t| t.elapsed() >= p.poll)
            || (pending.is_some()
                && last_error.is_empty()
                && last_publish.is_none_or(|t| t.elapsed() >= PUBLISH_GAP));
        if due {
            last_step = Some(Instant::now());
            let busy = Busy::start(&progress);
            let step = async {
                if let Some((b, compile_s, _)) = &pending {
                    last_publish = Some(Instant::now());
                    publish(o, p, &mut st, &leader, b, *compile_s, &mut compact, sealer).await?;
                    published = Some(identity(b));
                }
                if let (Some(page), Some((_, _, Some(d)))) = (page, pending.take()) {
                    page.published(d);
                }
                if let Some(cfg) = &cfg {
                    votes::tally(o, &mut st, cfg, &leader, sealer).await?;
                }
                compact.on_timer(&mut st).await?;
                anyhow::Ok(())
            };
            let stepped = step.await;
            drop(busy);
            match stepped {
                Ok(()) => last_error.clear(),
                Err(e) if e.is::<Deposed>() => return Err(e),
                Err(e) => {
                    let text = format!("{e:#}");
                    if text != last_error {
                        o.log.event(
                            Event::StoreUnreachable {
                                version: None,
                                error: text.clone(),
                            },
                            format!(
                                "publisher {}: publishing failed, will retry: {text}",
                                o.name
                            ),
                        );
                        last_error = text;
                    }
                }
            }
        }
        // With live inputs the loop turns at the debounce's pace, so that a change is
        // decided and published within a few of them.
        let pause = if live.is_some() {
            live::DEBOUNCE.min(p.poll) / 2
        } else {
            p.poll
        };
        tokio::time::sleep(pause).await;
    }
    let _ = st.revoke(lease).await;
    Ok(())
}

/// A version as published, but for what it says of the live state: two that differ only
/// there hold the same table from the same config and files.
fn identity(b: &Built) -> (String, Sources) {
    let sources = Sources {
        live: None,
        ..b.sources.clone()
    };
    (b.table.clone(), sources)
}

/// The least time between two versions: routes that keep changing are folded into one
/// version at most this often (the newest table wins), not one per debounce.
const PUBLISH_GAP: Duration = Duration::from_millis(250);

/// A compile's outcome: from the files alone, or the live table.
enum Compiled {
    Files(version::Compiled, Vec<PathBuf>, Config),
    Live(LiveTable, Vec<PathBuf>),
}

/// The map page's copy of the live table: its entries with every version, the data (copied,
/// since the next live change is laid over the publisher's own; hundreds of MB at full
/// scale) at most every [`PAGE_DATA_EVERY`]. The map draws the table from the entries; only
/// the page's explain reads the routes and measurements, up to that much older.
fn drawn(lt: &LiveTable, files: &[PathBuf], data: &mut Option<(Arc<Data>, Instant)>) -> Drawn {
    let shared = match data {
        Some((d, at)) if at.elapsed() < PAGE_DATA_EVERY => Arc::clone(d),
        _ => {
            let d = Arc::new(lt.data.clone());
            *data = Some((Arc::clone(&d), Instant::now()));
            d
        }
    };
    Drawn::new(lt.cfg.clone(), shared, lt.tables(), files.to_vec())
}

/// How old the map page's copy of the live data may grow while versions come.
const PAGE_DATA_EVERY: Duration = Duration::from_secs(10);

/// Compiles with the live inputs laid over the files (on this thread: `live` is the
/// publisher's, kept across compiles and leaderships).
fn compile_live(path: &Path, live: &mut Live) -> Result<Compiled> {
    let cfg = Config::load(path)?;
    let files = watched(path, &cfg);
    Ok(Compiled::Live(LiveTable::compile(path, cfg, live)?, files))
}

/// Compiles on a blocking thread (seconds at full scale), with the files to watch.
async fn compile(path: &Path) -> Result<Compiled> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let cfg = Config::load(&path)?;
        let files = watched(&path, &cfg);
        Ok(Compiled::Files(version::compile(&path, &cfg)?, files, cfg))
    })
    .await
    .context("the compile thread")?
}

/// Publishes `b` unless the current version already holds it, signed by this publisher's
/// key: one signed by another key (another publisher's, a rotated one) or none is signed
/// again as the next version, so what edges hold is always under the key in use.
#[allow(clippy::too_many_arguments)]
async fn publish(
    o: &Options,
    p: &Publisher,
    st: &mut Store,
    leader: &[u8],
    b: &Built,
    compile_s: f64,
    compact: &mut Compaction,
    sealer: &Sealer,
) -> Result<()> {
    let t = Instant::now();
    let (current, _) = st.current(false).await?;
    // Publishers only move `current` forward: one below a version in the store was put back
    // behind their backs (a rollback, which edges refuse), so the table is published again
    // above every number there, and never under a number already signed.
    let highest = st
        .keys("versions/")
        .await?
        .iter()
        .filter_map(|k| k.parse::<u64>().ok())
        .max()
        .unwrap_or(0);
    let put_back = current.is_some_and(|v| v < highest);
    if put_back {
        o.log.event(
            Event::Refused {
                error: format!("current is below version {highest}"),
            },
            format!(
                "publisher {}: current version {} is below version {highest} in the store \
                 (put back): publishing again as version {}",
                o.name,
                current.unwrap_or(0),
                highest + 1
            ),
        );
    }
    if let Some(v) = current.filter(|_| !put_back) {
        if let Some(env) = st.get(&st.version_key(v), true).await? {
            let same = |m: &Manifest| m.table == b.table && m.sources == b.sources;
            let mine = sealer
                .mine(&env, Kind::Manifest, &o.fleet)
                .and_then(|p| Manifest::parse(&p).ok());
            if mine.as_ref().is_some_and(same) {
                o.log.event(
                    Event::Unchanged { version: v },
                    format!("publisher {}: version {v} is already this table", o.name),
                );
                return Ok(());
            }
            if version::manifest_unchecked(&env).is_ok_and(|m| same(&m)) {
                o.log.event(
                    Event::Signing {
                        key: sealer.id().to_string(),
                    },
                    format!(
                        "publisher {}: version {v} is this table but not signed by key {}: \
                         signing it again as the next version",
                        o.name,
                        sealer.id()
                    ),
                );
            }
        }
    }
    let have: HashSet<String> = st.keys("chunks/").await?.into_iter().collect();
    let (mut new_chunks, mut new_bytes) = (0, 0);
    for c in std::iter::once(&b.config).chain(&b.chunks) {
        if !have.contains(&c.digest) {
            st.put(&st.chunk_key(&c.digest), c.bytes.clone(), None)
                .await?;
            new_chunks += 1;
            new_bytes += c.bytes.len() as u64;
        }
    }
    let next = current.unwrap_or(0).max(highest) + 1;
    let m = b.manifest(next, &o.name);
    let sealed = sealer.seal(Kind::Manifest, &o.fleet, &m.to_json());
    if !st.flip(current, next, sealed, leader).await? {
        if st
            .get(&String::from_utf8_lossy(leader), false)
            .await?
            .is_none()
        {
            return Err(anyhow::Error::new(Deposed));
        }
        bail!("version {next} not published: the current version moved meanwhile");
    }
    let ms = t.elapsed().as_secs_f64() * 1e3;
    o.log.event(
        Event::Published {
            version: next,
            compile_s,
            entries: m.entries,
            chunks: m.chunks.len(),
            new_chunks,
            bytes: m.bytes(),
            new_bytes,
            ms,
        },
        format!(
            "publisher {}: version {next} is current: {} entries in {} chunks, {new_chunks} \
             new ({new_bytes} bytes), in {ms:.0} ms after {compile_s:.1} s compiling",
            o.name,
            m.entries,
            m.chunks.len()
        ),
    );
    collect(st, next, p.keep, leader, compact).await
}

/// Where the history is compacted to: the revision noted at the previous compaction (a
/// publish's clean-up, or [`COMPACT_EVERY`] without one), one step behind, so that a watch
/// or campaign begun just now is not cancelled by it. On the timer too, so the store's
/// history stays bounded while nothing is published (edges' reports, votes and agents'
/// reports still write).
#[derive(Default)]
struct Compaction {
    next: Option<i64>,
    noted: Option<Instant>,
}

/// How often the leader compacts the store's history when no publish did.
pub const COMPACT_EVERY: Duration = Duration::from_secs(60);

impl Compaction {
    /// Compacts to the revision noted last time, and notes the store's revision now.
    async fn step(&mut self, st: &mut Store) -> Result<()> {
        if let Some(rev) = self.next {
            st.compact(rev).await?;
        }
        self.next = Some(st.revision().await?);
        self.noted = Some(Instant::now());
        Ok(())
    }

    /// [`Compaction::step`] when the last was [`COMPACT_EVERY`] ago or more.
    async fn on_timer(&mut self, st: &mut Store) -> Result<()> {
        if self.noted.is_none_or(|t| t.elapsed() >= COMPACT_EVERY) {
            self.step(st).await?;
        }
        Ok(())
    }
}

/// Deletes the versions older than the last `keep`, then the chunks none of those kept
/// names, then compacts the store's history.
async fn collect(
    st: &mut Store,
    current: u64,
    keep: u64,
    leader: &[u8],
    compact: &mut Compaction,
) -> Result<()> {
    let oldest = current.saturating_sub(keep.max(1) - 1).max(1);
    let mut kept = HashSet::new();
    // Linearizable reads, and a kept version that cannot be read stops the clean-up: a
    // chunk is deleted only when every kept version was read and none names it.
    for k in st.keys("versions/").await? {
        let Ok(v) = k.parse::<u64>() else { continue };
        if v < oldest {
            if !st.leader_write(&st.version_key(v), None, leader).await? {
                return Err(anyhow::Error::new(Deposed));
            }
            continue;
        }
        let b = st
            .get(&st.version_key(v), false)
            .await?
            .with_context(|| format!("version {v} vanished during the clean-up"))?;
        let m = version::manifest_unchecked(&b).with_context(|| format!("version {v}"))?;
        kept.extend(m.digests().map(str::to_string));
    }
    for d in st.keys("chunks/").await? {
        if !kept.contains(&d) && !st.leader_write(&st.chunk_key(&d), None, leader).await? {
            return Err(anyhow::Error::new(Deposed));
        }
    }
    compact.step(st).await
}
