//! `[http] listen`: DistributedDirector's HTTP redirect mode. A request whose Host is a
//! service name gets `302 Found` to the best server for the client (chosen by the kernel's
//! own policy, see [`choose`]), path and query kept; other names 404. Served by `run` on a
//! thread of its own (tokio, hyper), like the metrics, so a slow client never delays a
//! recompute; `run` hands it the hostnames and trusted proxies again on every reload.
//!
//! Methods: GET and HEAD get 302; any other method gets `307 Temporary Redirect` to the
//! same place (the server, not the redirector, decides what it accepts, and 307 keeps the
//! method and body where 302 lets clients turn a POST into a GET); CONNECT names no path to
//! keep and gets 405.

mod choose;
pub mod config;
pub mod request;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::{Context, Result};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE, HOST, LOCATION};
use hyper::{Method, Request, Response, StatusCode};
use ipnet::IpNet;

use crate::kernel::resolve::Resolver;
use crate::kernel::Maps;
use choose::Choice;
use request::HostName;

/// Connections served at once; more are closed at accept (a flood of idle connections
/// must not exhaust the file descriptors `run` needs).
const MAX_CONNECTIONS: usize = 4096;

/// A client that sends no complete request head for this long is disconnected (slow
/// headers, and idle keep-alive connections).
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// Requests answered, by outcome, for the metrics.
#[derive(Debug, Default)]
pub struct Counters {
    redirect: AtomicU64,
    fallback: AtomicU64,
    not_found: AtomicU64,
    no_server: AtomicU64,
    bad_request: AtomicU64,
    error: AtomicU64,
}

impl Counters {
    /// `(outcome, requests)`: `redirect` to a server, `fallback` to the service's alternate
    /// or origin, `not_found` (no such service), `no_server` (503), `bad_request` (400,
    /// 405), `error` (the maps could not be read: 500).
    pub fn snapshot(&self) -> [(&'static str, u64); 6] {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        [
            ("redirect", g(&self.redirect)),
            ("fallback", g(&self.fallback)),
            ("not_found", g(&self.not_found)),
            ("no_server", g(&self.no_server)),
            ("bad_request", g(&self.bad_request)),
            ("error", g(&self.error)),
        ]
    }
}

/// What the redirector takes from the config, replaced by `run` on every reload.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Settings {
    /// Server name → the hostname its URLs show.
    pub hostnames: HashMap<String, String>,
    pub trusted: Vec<IpNet>,
}

impl Settings {
    /// From each server's `hostname` (by server name) and `[http]`, if configured.
    pub fn new(
        hostnames: HashMap<String, String>,
        http: Option<&config::Http>,
    ) -> Result<Settings> {
        let trusted = match http {
            Some(h) => h.trusted()?,
            None => Vec::new(),
        };
        Ok(Settings { hostnames, trusted })
    }
}

pub type SharedSettings = Arc<RwLock<Settings>>;

struct Redirector {
    resolver: Resolver,
    maps: Maps,
    settings: SharedSettings,
    counters: Arc<Counters>,
    active: AtomicUsize,
}

/// Binds every address now (so a taken port is an error at start) and serves from a thread.
pub fn serve(
    listen: &[SocketAddr],
    pin_dir: &Path,
    settings: SharedSettings,
    counters: Arc<Counters>,
) -> Result<()> {
    let mut listeners = Vec::new();
    for &a in listen {
        let l = std::net::TcpListener::bind(a)
            .with_context(|| format!("[http] listen {a}: cannot bind"))?;
        l.set_nonblocking(true)
            .with_context(|| format!("[http] listen {a}"))?;
        listeners.push(l);
    }
    let r = Arc::new(Redirector {
        resolver: Resolver::open(pin_dir)?,
        maps: Maps::open(pin_dir)?,
        settings,
        counters,
        active: AtomicUsize::new(0),
    });
    crate::runtime::spawn("http-redirect", "HTTP redirects", move || async move {
        let mut tasks = Vec::new();
        for l in listeners {
            tasks.push(tokio::spawn(accept(l, r.clone())));
        }
        for t in tasks {
            let _ = t.await;
        }
    })?;
    Ok(())
}

/// Takes one connection slot back when the connection ends, however it ends.
struct Slot(Arc<Redirector>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn accept(l: std::net::TcpListener, r: Arc<Redirector>) {
    crate::runtime::accept(l, move |stream, peer| {
        if r.active.fetch_add(1, Ordering::Relaxed) >= MAX_CONNECTIONS {
            r.active.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        let slot = Slot(r.clone());
        Some(async move {
            let r = slot.0.clone();
            let respond = move |req: &Request<hyper::body::Incoming>| respond(req, peer.ip(), &r);
            crate::runtime::http1(stream, Some(HEAD_TIMEOUT), respond).await;
            drop(slot);
        })
    })
    .await;
}

/// The status a found service's redirect has for a method; `None`: the method cannot be
/// redirected (405).
pub fn redirect_status(method: &Method) -> Option<StatusCode> {
    if method == Method::GET || method == Method::HEAD {
        Some(StatusCode::FOUND)
    } else if method == Method::CONNECT {
        None
    } else {
        Some(StatusCode::TEMPORARY_REDIRECT)
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// The Host a request names: the authority of an absolute-form target wins over the Host
/// header (RFC 9112 §3.2.2); no Host, two of them or a malformed one is a bad request.
fn request_host<B>(req: &Request<B>) -> Option<request::Host> {
    if let Some(a) = req.uri().authority() {
        return request::parse_host(a.as_str());
    }
    let mut hosts = req.headers().get_all(HOST).iter();
    let h = hosts.next()?;
    if hosts.next().is_some() {
        return None;
    }
    request::parse_host(h.to_str().ok()?)
}

fn respond<B>(req: &Request<B>, peer: IpAddr, r: &Redirector) -> Response<Full<Bytes>> {
    let count = |c: &AtomicU64| {
        c.fetch_add(1, Ordering::Relaxed);
    };
    let c = &r.counters;
    let Some(host) = request_host(req) else {
        count(&c.bad_request);
        return text(
            StatusCode::BAD_REQUEST,
            "bad request: no Host, or not a valid one\n".into(),
        );
    };
    // Held for this request only (map reads, no await): a reload waits microseconds.
    let settings = r
        .settings
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let wire = match &host.name {
        HostName::Name(n) => director_common::name::encode(n).ok(),
        HostName::Literal(_) => None,
    };
    let Some(wire) = wire else {
        count(&c.not_found);
        return text(StatusCode::NOT_FOUND, "not found: no such service\n".into());
    };
    let forwarded: Vec<&str> = req
        .headers()
        .get_all("x-forwarded-for")
        .iter()
        // A value that is not text is garbage: it ends the walk like one.
        .map(|v| v.to_str().unwrap_or("?"))
        .collect();
    let client = request::client_address(peer, &forwarded, &settings.trusted);
    let choice = choose::choose(&r.resolver, &r.maps, &settings.hostnames, &wire, client);
    let (target, fallback, ttl) = match choice {
        Ok(Choice::Go {
            target,
            fallback,
            ttl,
        }) => (target, fallback, ttl),
        Ok(Choice::NotAService) => {
            count(&c.not_found);
            return text(StatusCode::NOT_FOUND, "not found: no such service\n".into());
        }
        Ok(Choice::NoServer) => {
            count(&c.no_server);
            return text(
                StatusCode::SERVICE_UNAVAILABLE,
                "no server can take this client now\n".into(),
            );
        }
        Err(e) => {
            count(&c.error);
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("reading the maps failed: {e:#}\n"),
            );
        }
    };
    let Some(status) = redirect_status(req.method()) else {
        count(&c.bad_request);
        let mut resp = text(
            StatusCode::METHOD_NOT_ALLOWED,
            "CONNECT cannot be redirected\n".into(),
        );
        resp.headers_mut().insert(
            hyper::header::ALLOW,
            HeaderValue::from_static("GET, HEAD, OPTIONS, POST, PUT, PATCH, DELETE"),
        );
        return resp;
    };
    let peer_trusted = settings
        .trusted
        .iter()
        .any(|n| n.contains(&peer.to_canonical()));
    let proto = req
        .headers()
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok());
    let scheme = request::scheme(peer_trusted, proto);
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let loc = request::location(scheme, &target, host.port, path);
    let Ok(value) = HeaderValue::from_str(&loc) else {
        count(&c.error);
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the redirect target is not a valid URL\n".into(),
        );
    };
    count(if fallback { &c.fallback } else { &c.redirect });
    let mut resp = text(status, format!("{} {loc}\n", status.as_u16()));
    resp.headers_mut().insert(LOCATION, value);
    // The answer is this client's and lasts as long as the DNS answer would.
    if let Ok(v) = HeaderValue::from_str(&format!("private, max-age={ttl}")) {
        resp.headers_mut().insert(CACHE_CONTROL, v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_map_to_redirect_statuses() {
        assert_eq!(redirect_status(&Method::GET), Some(StatusCode::FOUND));
        assert_eq!(redirect_status(&Method::HEAD), Some(StatusCode::FOUND));
        assert_eq!(
            redirect_status(&Method::POST),
            Some(StatusCode::TEMPORARY_REDIRECT)
        );
        assert_eq!(
            redirect_status(&Method::DELETE),
            Some(StatusCode::TEMPORARY_REDIRECT)
        );
        assert_eq!(redirect_status(&Method::CONNECT), None);
    }

    #[test]
    fn the_host_comes_from_an_absolute_target_first_and_must_be_single() {
        let req = Request::builder()
            .uri("http://Video.Example.com:8080/x")
            .header(HOST, "www.example.com")
            .body(())
            .unwrap();
        let h = request_host(&req).unwrap();
        assert_eq!(
            (h.name, h.port),
            (HostName::Name("video.example.com".into()), Some(8080))
        );
        let two = Request::builder()
            .uri("/x")
            .header(HOST, "www.example.com")
            .header(HOST, "evil.example.net")
            .body(())
            .unwrap();
        assert_eq!(request_host(&two), None);
        let none = Request::builder().uri("/x").body(()).unwrap();
        assert_eq!(request_host(&none), None);
        let one = Request::builder()
            .uri("/x")
            .header(HOST, "WWW.example.com.")
            .body(())
            .unwrap();
        assert_eq!(
            request_host(&one).unwrap().name,
            HostName::Name("www.example.com".into())
        );
    }
}
