//! `GET /rtt`: the agent's records as an [`RttReport`], served on a thread of its own
//! (the shared runtime: tokio, hyper), so a slow poller never delays a drain; and
//! `POST /probe`, the controller's prefixes to probe ([`super::probe`]).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};

use super::probe::Prober;
use crate::api::{ProbeRequest, RttReport, VERSION};
use crate::web::Guard;

/// The largest `POST /probe` body taken: [`super::probe::MAX_REQUEST`] targets are a few
/// tens of kB.
const MAX_PROBE_BODY: usize = 256 << 10;

const NOT_A_REQUEST: &str = r#"not a probe request ({"targets": [{"prefix", "address"}]})"#;

/// What the drain loop publishes at each window's end; `now_ms` is set per request.
pub type Shared = Arc<Mutex<RttReport>>;

pub fn empty(site: &str, window_s: u64) -> Shared {
    Arc::new(Mutex::new(RttReport {
        version: VERSION,
        site: site.to_string(),
        window_s,
        now_ms: 0,
        records: Vec::new(),
        counters: Default::default(),
    }))
}

/// Refuses `listen` beyond loopback unless `guard` takes a client certificate or a
/// credential over TLS.
pub fn exposed(listen: SocketAddr, guard: &Guard) -> Result<()> {
    if !listen.ip().is_loopback() && !guard.authenticates_over_tls() {
        bail!(
            "--listen {listen} is not loopback: beyond it the agent answers only over TLS \
             with a client certificate or a bearer token; give --web-config FILE with \
             tls_cert, tls_key and client_ca or bearer_tokens (docs/security.md), or listen \
             on 127.0.0.1"
        );
    }
    Ok(())
}

/// Binds `listen` now (a taken port is an error at start) and serves from a thread, each
/// connection through `guard` (`--web-config`); `POST /probe` goes to `prober` (`None`:
/// probes are off, 404). Beyond loopback the agent serves only over TLS with a client
/// certificate or a credential: whoever reaches it could otherwise read what its site
/// measures and make it probe.
pub fn serve(
    listen: SocketAddr,
    shared: Shared,
    prober: Option<Arc<Prober>>,
    guard: Arc<Guard>,
) -> Result<()> {
    exposed(listen, &guard)?;
    let l = std::net::TcpListener::bind(listen)
        .with_context(|| format!("--listen {listen}: cannot bind"))?;
    l.set_nonblocking(true)?;
    crate::runtime::spawn("agent-http", "the agent's HTTP server", move || {
        let respond = move |req: Request<Bytes>| {
            if req.uri().path() == "/probe" && req.method() == Method::POST {
                probe(req.body(), prober.as_deref())
            } else {
                respond(&req, &shared)
            }
        };
        crate::web::server::serve(l, guard, MAX_PROBE_BODY, respond)
    })
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r
}

fn probe(body: &Bytes, prober: Option<&Prober>) -> Response<Full<Bytes>> {
    let Some(p) = prober else {
        return text(
            StatusCode::NOT_FOUND,
            "probes are off (--probe-rate 0)\n".into(),
        );
    };
    let asked: ProbeRequest = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => return text(StatusCode::BAD_REQUEST, format!("{NOT_A_REQUEST}: {e}\n")),
    };
    match serde_json::to_string(&p.offer(&asked.targets)) {
        Ok(t) => json(t),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
    }
}

fn json(body: String) -> Response<Full<Bytes>> {
    let mut r = text(StatusCode::OK, body);
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

fn respond(req: &Request<Bytes>, shared: &Shared) -> Response<Full<Bytes>> {
    let (status, body) = if req.uri().path() != "/rtt" || req.method() != Method::GET {
        (
            StatusCode::NOT_FOUND,
            "not found: GET /rtt, POST /probe\n".to_string(),
        )
    } else {
        let doc = {
            // A poisoned lock still holds the last whole document (it is replaced whole).
            let mut d = shared
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            d.now_ms = super::window::now_ms();
            d
        };
        match serde_json::to_string(&doc) {
            Ok(t) => (StatusCode::OK, t),
            Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
        }
    };
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    if status == StatusCode::OK {
        r.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/json"),
        );
    }
    r
}
