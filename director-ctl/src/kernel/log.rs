//! The XDP program's aya-log records, printed as they come.

use std::path::Path;

use anyhow::{Context, Result};

use super::program;

/// Prints what the program logs (attached with a log level above off) until Ctrl-C.
pub fn follow(dir: &Path) -> Result<()> {
    let info = program::program_info(dir)?.context("nothing is attached")?;
    // Only what the XDP program logs, not aya's own chatter.
    env_logger::Builder::new()
        .filter_module("director", log::LevelFilter::Trace)
        .init();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let logger = aya_log::EbpfLogger::init_from_id(info.id())
            .context("the program has no log buffer")?;
        // The logger owns its ring buffer fd and keeps it open while registered.
        #[allow(deprecated)]
        let mut fd =
            tokio::io::unix::AsyncFd::with_interest(logger, tokio::io::Interest::READABLE)?;
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => return Ok(()),
                guard = fd.readable_mut() => {
                    let mut guard = guard?;
                    guard.get_inner_mut().flush();
                    guard.clear_ready();
                }
            }
        }
    })
}
