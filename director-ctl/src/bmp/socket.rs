//! TCP keepalive on a router's connection: BMP has no keepalive of its own and a monitored
//! router is silent while its routes are stable, so without it a router that vanished (power,
//! link) would keep its session, and its routes fresh, forever.

use std::net::TcpStream;
use std::os::fd::AsRawFd;

use anyhow::{Context, Result};

/// Idle seconds before the first probe, seconds between probes, probes before giving up:
/// a dead router is noticed after about two minutes.
const IDLE_S: libc::c_int = 60;
const INTERVAL_S: libc::c_int = 10;
const PROBES: libc::c_int = 6;

pub fn keepalive(stream: &TcpStream) -> Result<()> {
    let fd = stream.as_raw_fd();
    for (level, name, value, what) in [
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1, "SO_KEEPALIVE"),
        (
            libc::IPPROTO_TCP,
            libc::TCP_KEEPIDLE,
            IDLE_S,
            "TCP_KEEPIDLE",
        ),
        (
            libc::IPPROTO_TCP,
            libc::TCP_KEEPINTVL,
            INTERVAL_S,
            "TCP_KEEPINTVL",
        ),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT, PROBES, "TCP_KEEPCNT"),
    ] {
        // SAFETY: fd is an open socket owned by `stream` for the duration of the call;
        // the option value is a c_int whose size is passed along.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                (&value as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error()).with_context(|| format!("setting {what}"));
        }
    }
    Ok(())
}
