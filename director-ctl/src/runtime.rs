//! How `run`'s listeners (metrics, HTTP redirects, the zones' DNS) serve: each on a
//! current-thread tokio runtime on a thread of its own, so none of them delays another or a
//! recompute, with one accept loop and one HTTP/1 connection server between them.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};

/// Starts a thread called `name` that runs the future `make` returns until it ends. `what`
/// names the server in the one line printed if the runtime cannot be built.
pub fn spawn<F, M>(name: &str, what: &'static str, make: M) -> Result<()>
where
    M: FnOnce() -> F + Send + 'static,
    F: Future<Output = ()>,
{
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt.block_on(make()),
                Err(e) => eprintln!("director-ctl: {what} cannot start: {e}"),
            }
        })
        .with_context(|| format!("starting the {name} thread"))?;
    Ok(())
}

/// Accepts connections on `listener` until the runtime ends, each handed to `admit`, which
/// returns the task that serves it, or `None` to close it at once (past a bound). A failed
/// accept (out of descriptors, most likely) waits a moment for connections to end instead
/// of spinning.
pub async fn accept<T>(
    listener: std::net::TcpListener,
    mut admit: impl FnMut(tokio::net::TcpStream, SocketAddr) -> Option<T>,
) where
    T: Future<Output = ()> + Send + 'static,
{
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    loop {
        let Ok((stream, peer)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        if let Some(task) = admit(stream, peer) {
            tokio::spawn(task);
        }
    }
}

/// Serves HTTP/1 on one connection with `respond` until the client closes it (or, with
/// `head_timeout`, sends no complete request head for that long).
pub async fn http1<R>(stream: tokio::net::TcpStream, head_timeout: Option<Duration>, respond: R)
where
    R: Fn(&Request<Incoming>) -> Response<Full<Bytes>> + Clone + Send + 'static,
{
    let io = hyper_util::rt::TokioIo::new(stream);
    let svc = hyper::service::service_fn(move |req| {
        let respond = respond.clone();
        async move { Ok::<_, Infallible>(respond(&req)) }
    });
    let mut b = hyper::server::conn::http1::Builder::new();
    if let Some(t) = head_timeout {
        b.timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(t);
    }
    let _ = b.serve_connection(io, svc).await;
}
