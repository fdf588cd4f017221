//! One current-thread tokio runtime on a thread of its own: how `run`'s listeners
//! (metrics, HTTP redirects, the zones' DNS) serve, so none of them delays another or a
//! recompute.

use std::future::Future;

use anyhow::{Context, Result};

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
