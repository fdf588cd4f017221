//! `GET /rtt`: the agent's records as an [`RttReport`], served on a thread of its own
//! (the shared runtime: tokio, hyper), so a slow poller never delays a drain; and
//! `POST /probe`, the controller's prefixes to probe ([`super::probe`]).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};

use super::probe::Prober;
use crate::api::{ProbeRequest, RttReport, VERSION};

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

/// Binds `listen` now (a taken port is an error at start) and serves from a thread;
/// `POST /probe` goes to `prober` (`None`: probes are off, 404).
pub fn serve(listen: SocketAddr, shared: Shared, prober: Option<Arc<Prober>>) -> Result<()> {
    let l = std::net::TcpListener::bind(listen)
        .with_context(|| format!("--listen {listen}: cannot bind"))?;
    l.set_nonblocking(true)?;
    crate::runtime::spawn("agent-http", "the agent's HTTP server", move || {
        crate::runtime::accept(l, move |stream, _| {
            Some(connection(stream, shared.clone(), prober.clone()))
        })
    })
}

/// One connection; unlike `runtime::http1`, a request's body is read (`POST /probe`).
async fn connection(stream: tokio::net::TcpStream, shared: Shared, prober: Option<Arc<Prober>>) {
    let io = hyper_util::rt::TokioIo::new(stream);
    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
        let (shared, prober) = (shared.clone(), prober.clone());
        async move {
            let r = if req.uri().path() == "/probe" && req.method() == Method::POST {
                probe(req, prober.as_deref()).await
            } else {
                respond(&req, &shared)
            };
            Ok::<_, Infallible>(r)
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(io, svc)
        .await;
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r
}

async fn probe(req: Request<Incoming>, prober: Option<&Prober>) -> Response<Full<Bytes>> {
    let Some(p) = prober else {
        return text(
            StatusCode::NOT_FOUND,
            "probes are off (--probe-rate 0)\n".into(),
        );
    };
    let body = match Limited::new(req.into_body(), MAX_PROBE_BODY)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(e) => return text(StatusCode::BAD_REQUEST, format!("the body: {e}\n")),
    };
    let asked: ProbeRequest = match serde_json::from_slice(&body) {
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

fn respond(req: &Request<Incoming>, shared: &Shared) -> Response<Full<Bytes>> {
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
