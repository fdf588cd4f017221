//! `[metrics] listen = "ADDR:PORT"`: Prometheus exposition text at `GET /metrics`, built
//! at each scrape from the kernel's per-CPU counters and maps and from what the health
//! checks found. Served by `run` on a thread of its own (tokio, hyper), so a slow scraper
//! never delays a recompute.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Request, Response, StatusCode};
use prometheus::{Encoder, GaugeVec, IntCounterVec, Opts, Registry, TextEncoder};
use serde::Deserialize;

use crate::health::Shared;
use crate::kernel::Maps;

/// `[metrics]`: where `run` serves Prometheus text (`GET /metrics`).
#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// Loopback unless given: who may scrape from elsewhere is `[web]`'s to say.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
}

/// Where `[metrics]`, `[ui]` and an edge's `--metrics-listen` listen when they are not told:
/// loopback, the port the Debian package's config uses.
pub const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9273);

pub fn default_listen() -> SocketAddr {
    DEFAULT_LISTEN
}

/// What `run` knows of its table, for the metrics.
#[derive(Clone, Debug, Default)]
pub struct Table {
    pub entries: usize,
    /// Unix time of the last write of decisions, and how long its computation took.
    pub last_recompute: f64,
    pub last_recompute_seconds: f64,
    /// An edge of a fleet: the version it answers from, and since when the store has not
    /// confirmed that version is current.
    pub fleet: Option<FleetTable>,
    /// Live inputs, when `run` has them.
    pub live: Option<LiveTable>,
    /// The last demand cycle's rates, when `run` has had one.
    pub demand: Option<crate::api::Demand>,
    /// An edge of a fleet: what it refused, by (what, reason), since it started.
    pub refused: std::collections::BTreeMap<(String, String), u64>,
}

/// BMP sessions and agents' measurements, as `run` last looked.
#[derive(Clone, Debug, Default)]
pub struct LiveTable {
    /// Per router: its name (address, or sysName), connected, synced, routes held.
    pub routers: Vec<(String, bool, bool, usize)>,
    /// Bytes the routes and their interned attributes take.
    pub rib_bytes: usize,
    /// Per site: client prefixes with a live RTT.
    pub rtt: Vec<(String, usize)>,
    /// Agents whose last poll failed.
    pub agents_failing: usize,
    /// BMP sessions refused: (from an address not in `bmp_allow`, past `bmp_max_sessions`).
    pub bmp_refused: (u64, u64),
}

#[derive(Clone, Copy, Debug, Default)]
pub struct FleetTable {
    pub version: u64,
    /// Unix time of the last confirmation (0: none yet).
    pub confirmed: f64,
}

impl FleetTable {
    /// Seconds since the store last confirmed the version (0 while it keeps confirming).
    pub fn stale_seconds(&self) -> f64 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        (now - self.confirmed).max(0.0)
    }
}

pub type SharedTable = Arc<Mutex<Table>>;

#[derive(Clone)]
pub struct Sources {
    pub pin_dir: PathBuf,
    pub health: Shared,
    pub table: SharedTable,
    /// The zones' listeners, when `run` has zones.
    pub zones: Option<Arc<crate::dns::Stats>>,
    /// The HTTP redirector's counts, when `[http]` is configured.
    pub http: Option<Arc<crate::redirect::Counters>>,
    /// `run`'s loop, which answers `/explain` from the data it decides with (live routes
    /// and measurements included).
    pub explain: Option<ExplainAsk>,
    /// `run`'s loop again, for `/demand` and `/impact`.
    pub ask: Option<RunAsk>,
}

/// What `/demand` and `/impact` ask of `run`'s loop.
pub enum RunQuery {
    /// The last demand cycle's report (`demand --json`).
    Demand,
    /// The impact of a candidate config (`impact --json`), with the `top` moves. `config`
    /// is the candidate's text, sent in the request: a request never names a file.
    Impact { config: String, top: usize },
    /// The map page's feed for a service (the first one when `None`).
    Atlas { service: Option<String> },
}

pub struct RunAsked {
    pub what: RunQuery,
    pub reply: std::sync::mpsc::Sender<Result<String, String>>,
}

pub type RunAsk = std::sync::mpsc::Sender<RunAsked>;

/// `%XX` escapes decoded (query values are paths and addresses).
fn unescape(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b'+', _, _) => {
                out.push(b' ');
                i += 1;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `POST /impact[?top=N]` with the candidate config (TOML) as the body. A request that
/// names a file (`?config=`, from before) is refused: `run` reads no file a request names,
/// and the CLI's `impact` sends the file's text.
fn impact_query(req: &Request<Bytes>) -> Result<RunQuery, String> {
    if req.method() != hyper::Method::POST {
        return Err("impact takes the candidate config as a POST body \
                    (director-ctl impact --config FILE sends it)"
            .into());
    }
    let mut top = 20;
    for pair in req.uri().query().unwrap_or("").split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "top" => {
                top = v
                    .parse()
                    .map_err(|_| format!("top {:?} is not a number", unescape(v)))?;
            }
            "" => {}
            other => {
                return Err(format!(
                    "impact takes no parameter {:?}: only top=N, and the config as the body",
                    unescape(other)
                ))
            }
        }
    }
    let config = std::str::from_utf8(req.body())
        .map_err(|_| "the candidate config is not UTF-8 text".to_string())?;
    if config.trim().is_empty() {
        return Err("no candidate config: send its TOML as the POST body".into());
    }
    Ok(RunQuery::Impact {
        config: config.to_string(),
        top,
    })
}

/// Largest candidate config `POST /impact` takes (a full-scale config is a few KiB).
pub const IMPACT_BODY_LIMIT: usize = 1 << 20;

fn ask_run(ask: &RunAsk, req: &Request<Bytes>) -> (StatusCode, String) {
    let path = req.uri().path();
    let query = req.uri().query();
    let what = if path == "/demand" {
        RunQuery::Demand
    } else if path == "/ui/feed" {
        let service = query
            .unwrap_or("")
            .split('&')
            .find_map(|pair| pair.strip_prefix("service="))
            .map(unescape)
            .filter(|s| !s.is_empty());
        RunQuery::Atlas { service }
    } else {
        match impact_query(req) {
            Ok(q) => q,
            Err(e) => return (StatusCode::BAD_REQUEST, e + "\n"),
        }
    };
    let (tx, rx) = std::sync::mpsc::channel();
    if ask.send(RunAsked { what, reply: tx }).is_err() {
        return (StatusCode::SERVICE_UNAVAILABLE, "run is stopping\n".into());
    }
    match rx.recv_timeout(std::time::Duration::from_secs(60)) {
        Ok(Ok(json)) => (StatusCode::OK, json),
        Ok(Err(e)) => (StatusCode::UNPROCESSABLE_ENTITY, e + "\n"),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "run did not answer in 60 s (busy deciding)\n".into(),
        ),
    }
}

/// One `/explain` asked of `run`'s loop; the reply is the `explain --json` document, or
/// why there is none.
pub struct ExplainQuery {
    pub service: String,
    pub client: std::net::IpAddr,
    pub reply: std::sync::mpsc::Sender<Result<String, String>>,
}

pub type ExplainAsk = std::sync::mpsc::Sender<ExplainQuery>;

/// `service=S&client=A` from a query string.
fn explain_query(q: &str) -> Result<(String, std::net::IpAddr), String> {
    let mut service = None;
    let mut client = None;
    for pair in q.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = v.replace("%3A", ":").replace("%3a", ":");
        match k {
            "service" => service = Some(v),
            "client" => {
                client = Some(
                    v.parse()
                        .map_err(|_| format!("client {v:?} is not an IP address"))?,
                );
            }
            _ => {}
        }
    }
    match (service, client) {
        (Some(s), Some(c)) => Ok((s, c)),
        _ => Err("give ?service=NAME&client=ADDRESS".into()),
    }
}

/// Asks `run`'s loop; it answers between its looks at the inputs (at most a poll later).
fn explain(ask: &ExplainAsk, query: Option<&str>) -> (StatusCode, String) {
    let (service, client) = match explain_query(query.unwrap_or("")) {
        Ok(q) => q,
        Err(e) => return (StatusCode::BAD_REQUEST, e + "\n"),
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let q = ExplainQuery {
        service,
        client,
        reply: tx,
    };
    if ask.send(q).is_err() {
        return (StatusCode::SERVICE_UNAVAILABLE, "run is stopping\n".into());
    }
    match rx.recv_timeout(std::time::Duration::from_secs(10)) {
        Ok(Ok(json)) => (StatusCode::OK, json),
        Ok(Err(e)) => (StatusCode::NOT_FOUND, e + "\n"),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "run did not answer in 10 s (busy deciding)\n".into(),
        ),
    }
}

/// What one listener serves: the metrics (with `/explain`, `/demand`, `/impact`), the map
/// page (with `/explain` and `/ui/feed`), or both when `[ui]` and `[metrics]` share an
/// address.
#[derive(Clone, Copy, Debug)]
pub struct Serves {
    pub metrics: bool,
    /// The page's poll interval, when the page is served here.
    pub ui: Option<f64>,
}

/// Binds `listen` now (so a taken port is an error at start) and serves from a thread,
/// each connection through `guard` (`[web]`: TLS, credentials).
pub fn serve(
    listen: SocketAddr,
    src: Sources,
    serves: Serves,
    guard: Arc<crate::web::Guard>,
) -> Result<()> {
    let section = if serves.metrics { "[metrics]" } else { "[ui]" };
    let std_listener = std::net::TcpListener::bind(listen)
        .with_context(|| format!("{section} listen {listen}: cannot bind"))?;
    std_listener.set_nonblocking(true)?;
    if let Some(w) = guard.exposure(&format!("{section} listen"), listen) {
        log::warn!("{w}");
    }
    let name = if serves.metrics { "metrics" } else { "ui" };
    crate::runtime::spawn(name, name, move || {
        let respond = move |req: Request<Bytes>| respond(&req, &src, serves);
        crate::web::server::serve(std_listener, guard, IMPACT_BODY_LIMIT, respond)
    })?;
    Ok(())
}

fn respond(req: &Request<Bytes>, src: &Sources, serves: Serves) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    if let Some((kind, body)) = serves
        .ui
        .and_then(|refresh| crate::ui::asset(path, refresh))
    {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        r.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static(kind),
        );
        return r;
    }
    let json = path == "/ui/feed";
    let (status, body) = if json && serves.ui.is_some() {
        match &src.ask {
            Some(ask) => ask_run(ask, req),
            None => (StatusCode::NOT_FOUND, "no run here\n".to_string()),
        }
    } else if !serves.metrics && path != "/explain" {
        (
            StatusCode::NOT_FOUND,
            "not found: the map is at / (its feed at /ui/feed, explain at /explain)\n".to_string(),
        )
    } else if path == "/explain" {
        match &src.explain {
            Some(ask) => explain(ask, req.uri().query()),
            None => (StatusCode::NOT_FOUND, "no explain here\n".to_string()),
        }
    } else if path == "/demand" || path == "/impact" {
        match &src.ask {
            Some(ask) => ask_run(ask, req),
            None => (StatusCode::NOT_FOUND, "no run here\n".to_string()),
        }
    } else if req.uri().path() != "/metrics" {
        (
            StatusCode::NOT_FOUND,
            "not found: the metrics are at /metrics (and explain at /explain)\n".to_string(),
        )
    } else {
        match render(src) {
            Ok(t) => (StatusCode::OK, t),
            Err(e) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("reading the maps failed: {e:#}\n"),
            ),
        }
    };
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    let kind = if json && status == StatusCode::OK {
        "application/json"
    } else {
        prometheus::TEXT_FORMAT
    };
    if let Ok(v) = hyper::header::HeaderValue::from_str(kind) {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

fn counter(reg: &Registry, name: &str, help: &str, labels: &[&str]) -> Result<IntCounterVec> {
    let c = IntCounterVec::new(Opts::new(name, help), labels)?;
    reg.register(Box::new(c.clone()))?;
    Ok(c)
}

fn gauge(reg: &Registry, name: &str, help: &str, labels: &[&str]) -> Result<GaugeVec> {
    let g = GaugeVec::new(Opts::new(name, help), labels)?;
    reg.register(Box::new(g.clone()))?;
    Ok(g)
}

fn single(reg: &Registry, name: &str, help: &str, value: f64) -> Result<()> {
    let g = prometheus::Gauge::new(name, help)?;
    g.set(value);
    reg.register(Box::new(g))?;
    Ok(())
}

/// The exposition text now. A fresh registry per scrape: the values are the kernel's
/// and the checks', read at this moment.
pub fn render(src: &Sources) -> Result<String> {
    let m = Maps::open(&src.pin_dir)?;
    let reg = Registry::new();
    let answers = counter(
        &reg,
        "director_answers_total",
        "DNS answers sent by the XDP program, by service.",
        &["service"],
    )?;
    for s in m.services()? {
        answers
            .with_label_values(&[s.name.as_str()])
            .inc_by(m.service_answers(s.id)?);
    }
    let to_server = counter(
        &reg,
        "director_server_answers_total",
        "DNS answers that sent the client to a server (its address first), by server.",
        &["server"],
    )?;
    for s in m.servers()? {
        to_server
            .with_label_values(&[s.name.as_str()])
            .inc_by(m.server_answers(s.id)?);
    }
    let packets = counter(
        &reg,
        "director_packets_total",
        "Packets the XDP program saw, by verdict reason (answered, pass_*, drop_*).",
        &["reason"],
    )?;
    for (reason, n) in m.counters()? {
        packets.with_label_values(&[reason.name()]).inc_by(n);
    }
    if let Some(z) = &src.zones {
        let zone = counter(
            &reg,
            "director_zone_queries_total",
            "Queries the zones' userspace listeners handled, by transport and outcome.",
            &["transport", "outcome"],
        )?;
        for (transport, outcome, n) in z.snapshot() {
            zone.with_label_values(&[transport, outcome]).inc_by(n);
        }
    }
    let up = gauge(
        &reg,
        "director_health_up",
        "1 when the service's health check says the server is up, 0 when down or not yet checked.",
        &["service", "server"],
    )?;
    let out = gauge(
        &reg,
        "director_health_out",
        "1 when the server gets no answers for the service (down, unchecked, overloaded).",
        &["service", "server"],
    )?;
    let took = gauge(
        &reg,
        "director_health_check_seconds",
        "How long the last health check of the server for the service took.",
        &["service", "server"],
    )?;
    let load = gauge(
        &reg,
        "director_server_load",
        "The server's last load read.",
        &["server"],
    )?;
    let auto = gauge(
        &reg,
        "director_auto_portion",
        "portion = \"auto\": the server's share weight for the service now.",
        &["service", "server"],
    )?;
    let open = gauge(
        &reg,
        "director_fail_open",
        "1 while every server of the service is down by its checks and all are answered.",
        &["service"],
    )?;
    let opened = counter(
        &reg,
        "director_fail_open_total",
        "Times the service went fail-open.",
        &["service"],
    )?;
    {
        let h = src
            .health
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for ((svc, srv), c) in &h.checks {
            let l = [svc.as_str(), srv.as_str()];
            up.with_label_values(&l)
                .set(f64::from(u8::from(c.verdict == Some(true))));
            out.with_label_values(&l).set(f64::from(u8::from(c.out)));
            if let Some(s) = c.seconds {
                took.with_label_values(&l).set(s);
            }
        }
        for (srv, v) in &h.load {
            load.with_label_values(&[srv.as_str()]).set(*v);
        }
        for ((svc, srv), p) in &h.auto_named {
            auto.with_label_values(&[svc.as_str(), srv.as_str()])
                .set(f64::from(*p));
        }
        for (svc, (times, now)) in &h.fail_open {
            open.with_label_values(&[svc.as_str()])
                .set(f64::from(u8::from(*now)));
            opened.with_label_values(&[svc.as_str()]).inc_by(*times);
        }
    }
    let (done, failed) = {
        let h = src
            .health
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (h.checks_done, h.checks_failed)
    };
    let checks = counter(
        &reg,
        "director_health_checks_total",
        "Health checks finished, by result.",
        &["result"],
    )?;
    checks.with_label_values(&["ok"]).inc_by(done - failed);
    checks.with_label_values(&["failed"]).inc_by(failed);
    let t = src
        .table
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    single(
        &reg,
        "director_decision_entries",
        "Entries in the kernel's decision table (all services).",
        t.entries as f64,
    )?;
    let front = gauge(
        &reg,
        "director_decision_front16_slots",
        "IPv4 /16s the kernel answers from one array slot instead of the trie, by service \
         (at most 65536; only the first 8 service ids have slots).",
        &["service"],
    )?;
    for s in m.services()? {
        front
            .with_label_values(&[s.name.as_str()])
            .set(m.front16_slots(s.id) as f64);
    }
    single(
        &reg,
        "director_last_recompute_timestamp_seconds",
        "Unix time decisions were last written.",
        t.last_recompute,
    )?;
    single(
        &reg,
        "director_last_recompute_seconds",
        "How long the last computation of decisions took.",
        t.last_recompute_seconds,
    )?;
    if let Some(f) = t.fleet {
        single(
            &reg,
            "director_table_version",
            "The fleet's table version this edge answers from.",
            f.version as f64,
        )?;
        single(
            &reg,
            "director_table_stale_seconds",
            "Seconds since the store last confirmed this edge's table is the fleet's current \
             one (it keeps answering from it meanwhile).",
            f.stale_seconds(),
        )?;
    }
    if !t.refused.is_empty() {
        let refused = counter(
            &reg,
            "director_fleet_refused_total",
            "Versions, overlays and disk copies this edge refused, by what and why (unsigned, \
             unknown_key, bad_signature, other_fleet, wrong_type, malformed, rollback, \
             invalid); it answers on from what it holds.",
            &["what", "reason"],
        )?;
        for ((what, reason), n) in &t.refused {
            refused
                .with_label_values(&[what.as_str(), reason.as_str()])
                .inc_by(*n);
        }
    }
    if let Some(d) = &t.demand {
        demand_gauges(&reg, d)?;
    }
    if let Some(l) = &t.live {
        let up = gauge(
            &reg,
            "director_bmp_session_up",
            "1 while a router's BMP session is up (0: lost, its routes kept for the hold time).",
            &["router"],
        )?;
        let synced = gauge(
            &reg,
            "director_bmp_synced",
            "1 once a router has sent its whole table in its current session.",
            &["router"],
        )?;
        let routes = gauge(
            &reg,
            "director_bmp_routes",
            "Routes held from a router (all its peers and RIBs).",
            &["router"],
        )?;
        for (name, c, s, n) in &l.routers {
            up.with_label_values(&[name.as_str()])
                .set(f64::from(u8::from(*c)));
            synced
                .with_label_values(&[name.as_str()])
                .set(f64::from(u8::from(*s)));
            routes.with_label_values(&[name.as_str()]).set(*n as f64);
        }
        let refused = counter(
            &reg,
            "director_bmp_refused_total",
            "BMP sessions closed before their first message, by reason (not_allowed: not in \
             [bgp] bmp_allow; over_cap: bmp_max_sessions reached).",
            &["reason"],
        )?;
        for (reason, n) in [
            ("not_allowed", l.bmp_refused.0),
            ("over_cap", l.bmp_refused.1),
        ] {
            refused.with_label_values(&[reason]).inc_by(n);
        }
        single(
            &reg,
            "director_bmp_rib_bytes",
            "Memory the BMP routes and their interned attributes take.",
            l.rib_bytes as f64,
        )?;
        let rtt = gauge(
            &reg,
            "director_rtt_live_prefixes",
            "Client prefixes with an RTT from an agent, by site (after the roll-up).",
            &["site"],
        )?;
        for (site, n) in &l.rtt {
            rtt.with_label_values(&[site.as_str()]).set(*n as f64);
        }
        single(
            &reg,
            "director_rtt_agents_failing",
            "RTT agents whose last poll failed.",
            l.agents_failing as f64,
        )?;
    }
    let steered = counter(
        &reg,
        "director_steer_packets_total",
        "TCP packets to VIPs and ICMP errors about them, by what the XDP program did \
         (new_flows, pinned, moved, forwarded_l2, drop_*...).",
        &["event"],
    )?;
    for (c, n) in m.steer().counters()? {
        steered.with_label_values(&[c.name()]).inc_by(n);
    }
    let names: std::collections::HashMap<u16, String> =
        m.servers()?.into_iter().map(|s| (s.id, s.name)).collect();
    let connections = counter(
        &reg,
        "director_server_connections_total",
        "TCP connections to VIPs steered to a server (new and moved flows), by server.",
        &["server"],
    )?;
    for (id, n) in m.steer().server_flows()? {
        if let Some(name) = names.get(&id) {
            connections.with_label_values(&[name.as_str()]).inc_by(n);
        }
    }
    single(
        &reg,
        "director_flows",
        "TCP flows pinned in the kernel's flow table.",
        m.steer().flows()?.len() as f64,
    )?;
    if let Some(h) = &src.http {
        let redirects = counter(
            &reg,
            "director_http_requests_total",
            "HTTP requests to the [http] listeners, by outcome (redirect, fallback, not_found, \
             no_server, bad_request, error).",
            &["outcome"],
        )?;
        for (outcome, n) in h.snapshot() {
            redirects.with_label_values(&[outcome]).inc_by(n);
        }
    }
    let mut buf = Vec::new();
    TextEncoder::new().encode(&reg.gather(), &mut buf)?;
    Ok(String::from_utf8(buf)?)
}

/// The last demand cycle as gauges: per service and per site, and the replicas' bonuses.
fn demand_gauges(reg: &Registry, d: &crate::api::Demand) -> Result<()> {
    let svc = gauge(
        reg,
        "director_demand_rate",
        "Answers plus new flows per second, by service, over the last demand cycle.",
        &["service"],
    )?;
    for s in &d.services {
        svc.with_label_values(&[s.service.as_str()]).set(s.rate);
    }
    let site = gauge(
        reg,
        "director_demand_site_rate",
        "Answers plus new flows per second sent to a site's servers.",
        &["site"],
    )?;
    let load = gauge(
        reg,
        "director_demand_site_load",
        "A site's demand as a share of its capacity (sites with a capacity).",
        &["site"],
    )?;
    for s in &d.sites {
        site.with_label_values(&[s.site.as_str()]).set(s.rate);
        if let Some(l) = s.load {
            load.with_label_values(&[s.site.as_str()]).set(l);
        }
    }
    single(
        reg,
        "director_spill_groups",
        "Groups of client prefixes capacity spill has moved to another site now.",
        d.spill.moved.len() as f64,
    )?;
    let bonus = gauge(
        reg,
        "director_replica_bonus",
        "A replica candidate's bonus (k / distance per visitor, fading).",
        &["service", "server", "state"],
    )?;
    for r in &d.replicas {
        bonus
            .with_label_values(&[r.service.as_str(), r.server.as_str(), r.state.as_str()])
            .set(r.bonus);
    }
    Ok(())
}
