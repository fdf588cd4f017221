//! The map page of a fleet, served by its publishers when the config has `[ui] listen`: the
//! cells of the table the fleet answers from, and the fleet panel: every edge with the
//! version it applied against the current one, its program, when it last reported, and the
//! publishers, as `fleet status` reads them.
//!
//! A publisher has the config and the inputs, which an edge lacks (it gets the table, never
//! the GeoIP data that places clients on the map): the page is the publisher's. The leader
//! draws the table it published, handed over with what it was compiled from. A standby
//! draws the current version's table as an edge takes it from the store (manifest and
//! chunks, checked; only the chunks it lacks fetched), over the client locations of its own
//! compile of the files: the leader's live routes and RTT are in that table, which a
//! standby's own compile would lack. Its explain lays the live inputs the publisher's
//! thread keeps over that compile's data. The feed is answered on a thread of its own, so a page
//! being looked at never delays a publish; the store is read for the panel (and a standby's
//! table) at most once a second however many pages poll.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use director_common::maps::Decision;
use director_plan::data::Data;
use director_plan::decide::{Ids, Unavailable};
use ipnet::IpNet;

use director_plan::fleet::chunks;

use super::status::status_with;
use super::store::Store;
use super::version::{self, compile, config_of};
use super::Options;
use crate::api::{self, Event};
use crate::controller::atlas::{feed, Cache, Inputs};
use crate::controller::config::Config;
use crate::controller::live::Snapshot as LiveSnapshot;
use crate::controller::run::{stamps, stopping, watched, Stamp};
use crate::health::{CheckState, Snapshot};
use crate::metrics::{self, ExplainQuery, RunAsked, RunQuery};

/// How old the fleet panel's read of the store may be when a page asks.
const FLEET_EVERY: Duration = Duration::from_secs(1);
/// One read of the store for the panel, all its requests together.
const FLEET_WITHIN: Duration = Duration::from_secs(3);

/// A table as the page draws it, with what it was compiled from.
pub struct Drawn {
    pub cfg: Config,
    /// Shared: a leader on live inputs hands over a new table with each version, and the
    /// data (hundreds of MB at full scale) only now and then.
    pub data: Arc<Data>,
    /// Per service id (the config's own: 1, 2, 3...), its entries.
    pub tables: Vec<(u32, Vec<(IpNet, Decision)>)>,
    /// The config and the inputs it names, and their stamps when read.
    files: Vec<PathBuf>,
    seen: Vec<Stamp>,
}

impl Drawn {
    pub fn new(
        cfg: Config,
        data: Arc<Data>,
        tables: Vec<(u32, Vec<(IpNet, Decision)>)>,
        files: Vec<PathBuf>,
    ) -> Drawn {
        let seen = stamps(&files);
        Drawn {
            cfg,
            data,
            tables,
            files,
            seen,
        }
    }
}

/// The publisher's side of the page.
#[derive(Clone)]
pub struct Page {
    drawn: Arc<Mutex<Option<Drawn>>>,
    leading: Arc<AtomicBool>,
    live: Arc<LiveAsk>,
}

/// Standing by, the page's explain asks the publisher's thread, which holds the live
/// inputs, for what they hold now; the answer lands here (None: no live inputs).
#[derive(Default)]
struct LiveAsk {
    wanted: AtomicBool,
    got: Mutex<Option<(Instant, Option<Arc<LiveSnapshot>>)>>,
}

/// How long a standby's explain waits for the publisher's thread (it looks every 200 ms).
const LIVE_WITHIN: Duration = Duration::from_secs(1);
/// A snapshot of the live inputs this recent serves the next explain too.
const LIVE_FRESH: Duration = Duration::from_secs(1);

impl Page {
    /// Serves the page when `config` has `[ui]`; `None` when it has not (or cannot be read
    /// now: the publisher says why when it compiles).
    pub fn start(o: &Options, config: &Path) -> Result<Option<Page>> {
        let Ok(cfg) = Config::load(config) else {
            return Ok(None);
        };
        let Some(ui) = cfg.ui.clone() else {
            return Ok(None);
        };
        let page = Page {
            drawn: Arc::new(Mutex::new(None)),
            leading: Arc::new(AtomicBool::new(false)),
            live: Arc::new(LiveAsk::default()),
        };
        let (explain, explains) = std::sync::mpsc::channel();
        let (ask, asked) = std::sync::mpsc::channel();
        // No kernel here: the listener serves the page, its feed and explain, never
        // `/metrics` (a publisher has no maps to count), also on `[metrics] listen`.
        metrics::serve(
            ui.listen,
            metrics::Sources {
                pin_dir: PathBuf::new(),
                health: Default::default(),
                table: Default::default(),
                zones: None,
                http: None,
                explain: Some(explain),
                ask: Some(ask),
            },
            metrics::Serves {
                metrics: false,
                ui: Some(ui.refresh),
            },
            crate::web::Guard::new(&cfg.web).context("[web]")?,
        )?;
        let mut answers = Answers {
            page: page.clone(),
            config: config.to_path_buf(),
            store: o.store.clone(),
            fleet: o.fleet.clone(),
            runtime: tokio::runtime::Handle::current(),
            conn: None,
            status: None,
            read: None,
            error: None,
            cache: Cache::default(),
            current: None,
            overlaid: None,
        };
        std::thread::Builder::new()
            .name("fleet-page".into())
            .spawn(move || answers.serve(&asked, &explains))
            .context("starting the map page's thread")?;
        o.log.event(
            Event::UiListening { listen: ui.listen },
            format!(
                "publisher {}: the map page on http://{}/",
                o.name, ui.listen
            ),
        );
        Ok(Some(page))
    }

    /// The table just published (or found already current), for the page to draw.
    pub fn published(&self, d: Drawn) {
        *self.lock() = Some(d);
    }

    /// While this publisher leads it hands over every table it publishes; standing by, the
    /// page compiles the config itself when the files change.
    pub fn leading(&self, yes: bool) {
        self.leading.store(yes, Ordering::Relaxed);
    }

    /// Whether the page asked for the live inputs since the last answer.
    pub fn wants_live(&self) -> bool {
        self.live.wanted.swap(false, Ordering::Relaxed)
    }

    /// The live inputs as they are now (None: the publisher has none), for the page.
    pub fn live_now(&self, s: Option<LiveSnapshot>) {
        *self
            .live
            .got
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some((Instant::now(), s.map(Arc::new)));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Drawn>> {
        self.drawn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The page's thread: answers the feed and explain.
struct Answers {
    page: Page,
    config: PathBuf,
    store: String,
    fleet: String,
    runtime: tokio::runtime::Handle,
    conn: Option<Store>,
    status: Option<api::FleetStatus>,
    /// When the store was last asked (answered or not).
    read: Option<Instant>,
    error: Option<String>,
    cache: Cache,
    /// Standing by: the current version's table as read from the store.
    current: Option<Current>,
    /// Standing by: the page's data with the live inputs laid over it, when the snapshot
    /// was asked for and which data it was laid over.
    overlaid: Option<Overlaid>,
}

struct Overlaid {
    at: Instant,
    base: Arc<Data>,
    data: Arc<Data>,
}

/// Per service id (the config's own: 1, 2, 3...), its entries.
type Tables = Vec<(u32, Vec<(IpNet, Decision)>)>;

/// The table of a version the fleet answers from, on the config's own ids, and the chunks
/// it was made of (the next version fetches only the others).
struct Current {
    version: u64,
    tables: Tables,
    /// The published config's services and servers, in order: its ids are positions in
    /// them, which must be the page's own config's for the table to be drawn on it.
    names: (Vec<String>, Vec<String>),
    chunks: HashMap<String, Vec<u8>>,
}

impl Answers {
    fn serve(&mut self, asked: &Receiver<RunAsked>, explains: &Receiver<ExplainQuery>) {
        while !stopping() {
            match asked.recv_timeout(Duration::from_millis(50)) {
                Ok(q) => {
                    let r = match &q.what {
                        RunQuery::Atlas { service } => self
                            .atlas(service.as_deref())
                            .and_then(|a| Ok(serde_json::to_string(&a)?))
                            .map_err(|e| format!("{e:#}")),
                        _ => Err("a fleet's publisher counts no demand: ask an edge's \
                                  run, or `fleet status`"
                            .to_string()),
                    };
                    let _ = q.reply.send(r);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            while let Ok(q) = explains.try_recv() {
                let r = self
                    .explain(&q.service, q.client)
                    .map_err(|e| format!("{e:#}"));
                let _ = q.reply.send(r);
            }
        }
    }

    /// The fleet as the store says, read again when the last read is older than
    /// [`FLEET_EVERY`]; a failed read keeps the last status and says why. Standing by, the
    /// current version's table too, when it moved.
    fn fleet(&mut self) {
        if self.read.is_some_and(|t| t.elapsed() < FLEET_EVERY) {
            return;
        }
        self.read = Some(Instant::now());
        let (store, fleet) = (self.store.clone(), self.fleet.clone());
        let mut conn = self.conn.take();
        let standby = !self.page.leading.load(Ordering::Relaxed);
        let mut current = self.current.take();
        let (r, conn, current) = self.runtime.block_on(async move {
            let read = async {
                if conn.is_none() {
                    conn = Some(Store::connect(&store, &fleet).await?);
                }
                let st = conn.as_mut().ok_or_else(|| anyhow!("no store"))?;
                let s = status_with(st, &fleet).await?;
                if let (true, Some(v)) = (standby, s.current) {
                    if current.as_ref().is_none_or(|c| c.version != v) {
                        current = Some(fetch(st, v, current.take()).await?);
                    }
                }
                Ok(s)
            };
            let r = match tokio::time::timeout(FLEET_WITHIN, read).await {
                Ok(r) => r,
                Err(_) => Err(anyhow!(
                    "the store did not answer in {} s",
                    FLEET_WITHIN.as_secs()
                )),
            };
            (r, conn, current)
        });
        self.current = current;
        match r {
            Ok(s) => {
                self.conn = conn;
                self.status = Some(s);
                self.error = None;
            }
            Err(e) => {
                // A fresh connection next time: this one may be to a member that is gone.
                self.conn = None;
                self.error = Some(format!("{e:#}"));
            }
        }
    }

    /// Standing by, the page compiles the config itself: at the first look, and when a
    /// file it was compiled from changed. Leading, the publisher's own compile is used.
    fn table(&mut self) -> Result<()> {
        let stale = match &*self.page.lock() {
            None => true,
            Some(d) => stamps(&d.files) != d.seen,
        };
        if !stale || self.page.leading.load(Ordering::Relaxed) {
            return Ok(());
        }
        let cfg = Config::load(&self.config)?;
        let files = watched(&self.config, &cfg);
        let c = compile(&self.config, &cfg)?;
        self.page
            .published(Drawn::new(cfg, Arc::new(c.data), c.tables, files));
        Ok(())
    }

    fn atlas(&mut self, service: Option<&str>) -> Result<api::Atlas> {
        self.fleet();
        self.table()?;
        let guard = self.page.lock();
        let d = guard
            .as_ref()
            .ok_or_else(|| anyhow!("no table yet: the publisher is compiling"))?;
        let ids = Ids::positional(&d.cfg.plan);
        let (health, down) = quorum(&d.cfg, &ids, self.status.as_ref());
        let inputs = Inputs {
            cfg: &d.cfg,
            data: &d.data,
            ids: &ids,
            down: &down,
            health: &health,
            demand: None,
            fleet_version: self.status.as_ref().and_then(|s| s.current),
            grid: d.cfg.ui.as_ref().map_or(2.0, |u| u.grid),
        };
        let leading = self.page.leading.load(Ordering::Relaxed);
        let (tables, note) = drawn_tables(self.current.as_ref(), leading, d);
        let mut a = feed(&inputs, tables, service, &mut self.cache)?;
        a.fleet = self.status.clone();
        a.fleet_error = self.error.clone().or(note);
        Ok(a)
    }

    fn explain(&mut self, service: &str, client: std::net::IpAddr) -> Result<String> {
        self.table()?;
        let live = if self.page.leading.load(Ordering::Relaxed) {
            None
        } else {
            self.live_data()
        };
        let guard = self.page.lock();
        let d = guard
            .as_ref()
            .ok_or_else(|| anyhow!("no table yet: the publisher is compiling"))?;
        let data = live.as_deref().unwrap_or(&d.data);
        let e = crate::controller::explain_with(&d.cfg, data, service, client)?;
        Ok(serde_json::to_string_pretty(&e)?)
    }

    /// Standing by: the page's own compile of the files with the routers' routes and the
    /// agents' measurements laid over it, as the leader decides with them (the publisher's
    /// thread holds them and is asked). None when there are none, or no answer came.
    fn live_data(&mut self) -> Option<Arc<Data>> {
        let base = Arc::clone(&self.page.lock().as_ref()?.data);
        if let Some(o) = &self.overlaid {
            if o.at.elapsed() < LIVE_FRESH && Arc::ptr_eq(&o.base, &base) {
                return Some(Arc::clone(&o.data));
            }
        }
        let asked = Instant::now();
        self.page.live.wanted.store(true, Ordering::Relaxed);
        let snapshot = loop {
            let got = self
                .page
                .live
                .got
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            match got {
                Some((at, s)) if at >= asked => break s?,
                _ if asked.elapsed() > LIVE_WITHIN => return None,
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        let mut data = Data::clone(&base);
        snapshot.lay_over(&mut data);
        let data = Arc::new(data);
        self.overlaid = Some(Overlaid {
            at: asked,
            base,
            data: Arc::clone(&data),
        });
        Some(data)
    }
}

/// The table to draw: the leader's own; standing by, the current version's when its config
/// has the page's services and servers in the same order (else the page's own compile, and
/// why).
fn drawn_tables<'a>(
    current: Option<&'a Current>,
    leading: bool,
    d: &'a Drawn,
) -> (&'a Tables, Option<String>) {
    let Some(c) = current.filter(|_| !leading) else {
        return (&d.tables, None);
    };
    if c.names != names(&d.cfg) {
        let note = format!(
            "version {} was published from a config with other services or servers than \
             this publisher's: its own compile is drawn",
            c.version
        );
        return (&d.tables, Some(note));
    }
    (&c.tables, None)
}

/// A config's services and servers, in order (a version's ids are their positions).
fn names(cfg: &Config) -> (Vec<String>, Vec<String>) {
    (
        cfg.services.iter().map(|s| s.name.clone()).collect(),
        cfg.servers.iter().map(|s| s.name.clone()).collect(),
    )
}

/// Version `v` from the store as an edge takes it: the manifest, the chunks (those of
/// `before` kept, the others fetched), every digest checked, the table decoded.
async fn fetch(st: &mut Store, v: u64, before: Option<Current>) -> Result<Current> {
    let b = st
        .get(&st.version_key(v), true)
        .await?
        .with_context(|| format!("version {v} is current but has no manifest"))?;
    let m = version::manifest_unchecked(&b).with_context(|| format!("version {v}"))?;
    let mut have = before.map(|c| c.chunks).unwrap_or_default();
    let mut chunks = HashMap::new();
    for r in std::iter::once(&m.sources.config).chain(&m.chunks) {
        let bytes = match have.remove(&r.digest) {
            Some(b) => b,
            None => st
                .get(&st.chunk_key(&r.digest), true)
                .await?
                .with_context(|| {
                    format!("chunk {} of version {v} is not in the store", r.digest)
                })?,
        };
        chunks.insert(r.digest.clone(), bytes);
    }
    let part = |d: &str| chunks.get(d).map_or(&[][..], Vec::as_slice);
    let parts: Vec<&[u8]> = m.chunks.iter().map(|r| part(&r.digest)).collect();
    let text = m
        .check(part(&m.sources.config.digest), &parts)
        .with_context(|| format!("version {v}"))?;
    let cfg = config_of(text, Path::new("the current version's config"))?;
    let tables = chunks::decode(parts.iter().copied())
        .with_context(|| format!("version {v}"))?
        .into_iter()
        .map(|t| (u32::from(t.service) + 1, t.entries))
        .collect();
    Ok(Current {
        version: v,
        tables,
        names: names(&cfg),
        chunks,
    })
}

/// The servers' health as the fleet decides it: a checked server is down when a quorum of
/// its observers says so (the overlay), up otherwise; unchecked servers are unwatched.
fn quorum(cfg: &Config, ids: &Ids, status: Option<&api::FleetStatus>) -> (Snapshot, Unavailable) {
    let mut health = Snapshot::default();
    let mut down = Unavailable::default();
    let Some(status) = status else {
        return (health, down);
    };
    let out: HashSet<(&str, &str)> = status
        .overlay
        .iter()
        .map(|d| (d.service.trim_end_matches('.'), d.server.as_str()))
        .collect();
    let id_of: HashMap<&str, u16> = cfg
        .servers
        .iter()
        .zip(&ids.servers)
        .map(|(s, id)| (s.name.as_str(), *id))
        .collect();
    let mut checks = BTreeMap::new();
    for (svc, sid) in cfg.services.iter().zip(&ids.services) {
        if svc.health.is_none() {
            continue;
        }
        for server in &svc.servers {
            let is_out = out.contains(&(svc.name.trim_end_matches('.'), server.as_str()));
            checks.insert(
                (svc.name.clone(), server.clone()),
                CheckState {
                    verdict: Some(!is_out),
                    out: is_out,
                    seconds: None,
                },
            );
            if let (true, Some(id)) = (is_out, id_of.get(server.as_str())) {
                down.health.entry(*sid).or_default().insert(*id);
            }
        }
    }
    health.checks = checks;
    (health, down)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(down: &[(&str, &str)]) -> api::FleetStatus {
        api::FleetStatus {
            version: api::VERSION,
            fleet: "director".into(),
            current: Some(1),
            published_by: None,
            published_ms: None,
            leader: None,
            publishers: Vec::new(),
            versions: vec![1],
            edges: Vec::new(),
            signed_by: Vec::new(),
            overlay_serial: 0,
            overlay_signed_by: Vec::new(),
            overlay: down
                .iter()
                .map(|(service, server)| api::ServiceServer {
                    service: service.to_string(),
                    server: server.to_string(),
                })
                .collect(),
            store_bytes: 0,
            store_bytes_in_use: 0,
            live_inputs: None,
            agents: Vec::new(),
        }
    }

    #[test]
    fn a_quorums_overlay_is_the_pages_health() {
        let cfg = Config::parse(
            "[[site]]\nname = \"a\"\n\n\
             [[server]]\nname = \"x\"\nsite = \"a\"\nipv4 = \"192.0.2.10\"\n\n\
             [[server]]\nname = \"y\"\nsite = \"a\"\nipv4 = \"192.0.2.11\"\n\n\
             [[service]]\nname = \"www.example.com\"\nservers = [\"x\", \"y\"]\n\
             priority = { admin = 1 }\nhealth = { type = \"tcp\", port = 80 }\n\n\
             [[service]]\nname = \"img.example.com\"\nservers = [\"x\"]\n\
             priority = { admin = 1 }\n",
        )
        .unwrap();
        let ids = Ids::positional(&cfg.plan);
        // The overlay names services as the config does, a trailing dot or not.
        let st = status(&[("www.example.com.", "y")]);
        let (health, down) = quorum(&cfg, &ids, Some(&st));
        let www = |s: &str| health.checks[&("www.example.com".to_string(), s.to_string())];
        assert_eq!((www("x").verdict, www("x").out), (Some(true), false));
        assert_eq!((www("y").verdict, www("y").out), (Some(false), true));
        // A service without checks has no verdicts: its servers are unwatched.
        assert_eq!(health.checks.len(), 2);
        assert!(down.contains(1, 2) && !down.contains(1, 1) && !down.contains(2, 1));
        // No read of the store yet: nothing is claimed.
        let (health, down) = quorum(&cfg, &ids, None);
        assert!(health.checks.is_empty() && down.health.is_empty());
    }

    #[test]
    fn an_edge_is_current_lagging_or_silent() {
        let e = api::FleetEdge {
            name: "e1".into(),
            site: "a".into(),
            live: true,
            version: Some(3),
            current: true,
            report_age_s: 0.4,
            version_age_s: 10.0,
            state: String::new(),
            program: None,
            refused: None,
        };
        assert_eq!(e.judge(), "current");
        let behind = api::FleetEdge {
            version: Some(2),
            current: false,
            ..e.clone()
        };
        assert_eq!(behind.judge(), "lagging");
        // Gone (or wedged: its lease is renewed only while its loop turns): no lease.
        let gone = api::FleetEdge {
            live: false,
            ..e.clone()
        };
        assert_eq!(gone.judge(), "silent");
        // An idle edge writes no report: an old one with a lease is not silent.
        let idle = api::FleetEdge {
            report_age_s: 3600.0,
            ..behind
        };
        assert_eq!(idle.judge(), "lagging");
    }
}
