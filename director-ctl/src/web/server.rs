//! One HTTP/1 listener behind a [`Guard`]: the TLS handshake (with client certificates when
//! `client_ca` is set) and the credential check come before a request's body is read or
//! anything is asked of the process.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};

use super::auth::{Auth, Verdict};
use super::config::WebConfig;

/// How long a client may take for the TLS handshake, and then to send a request's head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// What a listener refused, since it started.
#[derive(Debug, Default)]
pub struct Refusals {
    /// Requests without a valid credential (401).
    pub unauthorized: AtomicU64,
    /// TLS handshakes that failed: no client certificate, one from another CA, not TLS.
    pub handshakes: AtomicU64,
}

/// TLS and credentials for the listeners of one process.
pub struct Guard {
    tls: Option<tokio_rustls::TlsAcceptor>,
    client_certs: bool,
    auth: Auth,
    pub refused: Refusals,
}

impl Guard {
    /// From a `[web]` block: reads the certificate and key now, so a bad file is an error
    /// at start.
    pub fn new(w: &WebConfig) -> Result<Arc<Guard>> {
        Ok(Arc::new(Guard {
            tls: super::tls::server(w)?.map(tokio_rustls::TlsAcceptor::from),
            client_certs: w.client_ca.is_some(),
            auth: Auth::new(
                w.basic_auth.clone(),
                w.bearer_tokens.values().cloned().collect(),
            ),
            refused: Refusals::default(),
        }))
    }

    /// Plain HTTP, no credentials: what a listener was before `[web]`.
    pub fn open() -> Arc<Guard> {
        Arc::new(Guard {
            tls: None,
            client_certs: false,
            auth: Auth::default(),
            refused: Refusals::default(),
        })
    }

    /// `https` or `http`, for the log lines that say where a listener is.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// Whether a request needs a client certificate or a credential.
    pub fn authenticates(&self) -> bool {
        self.client_certs || self.auth.required()
    }

    /// Whether a client certificate or a credential sent only over TLS is required: what an
    /// agent listening beyond loopback must have.
    pub fn authenticates_over_tls(&self) -> bool {
        self.tls.is_some() && self.authenticates()
    }

    /// A warning for a listener on `listen` that anyone who reaches it may use, `None` when
    /// it is on loopback or takes credentials.
    pub fn exposure(&self, what: &str, listen: SocketAddr) -> Option<String> {
        (!listen.ip().is_loopback() && !self.authenticates()).then(|| {
            format!(
                "{what} {listen} is not on loopback and takes no credentials: anyone who \
                 reaches it may use it (set [web] basic_auth or client_ca; docs/security.md)"
            )
        })
    }
}

/// Serves `listener` until the runtime ends: each connection through `guard`, then
/// `respond` with the request's body read whole (413 past `limit` bytes).
pub async fn serve<R>(listener: std::net::TcpListener, guard: Arc<Guard>, limit: usize, respond: R)
where
    R: Fn(Request<Bytes>) -> Response<Full<Bytes>> + Clone + Send + Sync + 'static,
{
    crate::runtime::accept(listener, move |stream, _| {
        Some(connection(
            stream,
            Arc::clone(&guard),
            limit,
            respond.clone(),
        ))
    })
    .await;
}

async fn connection<R>(stream: tokio::net::TcpStream, guard: Arc<Guard>, limit: usize, respond: R)
where
    R: Fn(Request<Bytes>) -> Response<Full<Bytes>> + Clone + Send + Sync + 'static,
{
    let Some(tls) = guard.tls.clone() else {
        return http1(stream, guard, limit, respond).await;
    };
    match tokio::time::timeout(HEAD_TIMEOUT, tls.accept(stream)).await {
        Ok(Ok(s)) => http1(s, guard, limit, respond).await,
        Ok(Err(e)) => {
            guard.refused.handshakes.fetch_add(1, Ordering::Relaxed);
            log::debug!("TLS handshake refused: {e}");
        }
        Err(_) => {
            guard.refused.handshakes.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r
}

async fn http1<S, R>(stream: S, guard: Arc<Guard>, limit: usize, respond: R)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    R: Fn(Request<Bytes>) -> Response<Full<Bytes>> + Clone + Send + Sync + 'static,
{
    let io = hyper_util::rt::TokioIo::new(stream);
    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
        let (guard, respond) = (Arc::clone(&guard), respond.clone());
        async move {
            let verdict = guard
                .auth
                .check(req.headers().get(hyper::header::AUTHORIZATION))
                .await;
            let r = match verdict {
                Verdict::Allowed => {
                    let (parts, body) = req.into_parts();
                    match Limited::new(body, limit).collect().await {
                        Ok(b) => respond(Request::from_parts(parts, b.to_bytes())),
                        Err(_) => text(
                            StatusCode::PAYLOAD_TOO_LARGE,
                            format!("the request's body is over {limit} bytes, or was cut off\n"),
                        ),
                    }
                }
                Verdict::Refused => {
                    guard.refused.unauthorized.fetch_add(1, Ordering::Relaxed);
                    let mut r = text(
                        StatusCode::UNAUTHORIZED,
                        "credentials needed (basic auth or a bearer token)\n".into(),
                    );
                    r.headers_mut().insert(
                        hyper::header::WWW_AUTHENTICATE,
                        hyper::header::HeaderValue::from_static("Basic realm=\"director\""),
                    );
                    r
                }
                Verdict::Busy => text(
                    StatusCode::TOO_MANY_REQUESTS,
                    "too many credentials being checked at once; try again\n".into(),
                ),
            };
            Ok::<_, Infallible>(r)
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .serve_connection(io, svc)
        .await;
}
