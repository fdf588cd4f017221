//! `GET /rtt`: the agent's records as an [`RttReport`], served on a thread of its own
//! (the shared runtime: tokio, hyper), so a slow poller never delays a drain.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};

use crate::api::{RttReport, VERSION};

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

/// Binds `listen` now (a taken port is an error at start) and serves from a thread.
pub fn serve(listen: SocketAddr, shared: Shared) -> Result<()> {
    let l = std::net::TcpListener::bind(listen)
        .with_context(|| format!("--listen {listen}: cannot bind"))?;
    l.set_nonblocking(true)?;
    crate::runtime::spawn("agent-http", "the agent's HTTP server", move || {
        crate::runtime::accept(l, move |stream, _| {
            let shared = shared.clone();
            let respond = move |req: &Request<Incoming>| respond(req, &shared);
            Some(crate::runtime::http1(stream, None, respond))
        })
    })
}

fn respond(req: &Request<Incoming>, shared: &Shared) -> Response<Full<Bytes>> {
    let (status, body) = if req.uri().path() != "/rtt" || req.method() != Method::GET {
        (StatusCode::NOT_FOUND, "not found: GET /rtt\n".to_string())
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
