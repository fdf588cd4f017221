//! A TCP server for the RTT agent's tests: `accept_sink CGROUP ADDR:PORT...` moves itself
//! into the cgroup v2 directory CGROUP (before it makes a socket: a socket belongs to the
//! cgroup its maker was in), listens on every address, prints `ready`, and accepts and
//! closes connections until it is killed.

use std::io::Write;
use std::net::SocketAddr;

use anyhow::{Context, Result};
use socket2::{Domain, Socket, Type};

fn listen(addr: SocketAddr) -> Result<std::net::TcpListener> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    s.set_reuse_address(true)?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.bind(&addr.into())
        .with_context(|| format!("binding {addr}"))?;
    // Deep enough for the rate test's bursts: an overflow drops the ACK, and the
    // connection is established later without an RTT sample.
    s.listen(4096)?;
    Ok(s.into())
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let cgroup = args
        .next()
        .context("usage: accept_sink CGROUP ADDR:PORT...")?;
    std::fs::write(
        format!("{cgroup}/cgroup.procs"),
        std::process::id().to_string(),
    )
    .with_context(|| format!("joining the cgroup {cgroup}"))?;
    let mut threads = Vec::new();
    for a in args {
        let addr: SocketAddr = a.parse().with_context(|| format!("{a}: not ADDR:PORT"))?;
        let l = listen(addr)?;
        threads.push(std::thread::spawn(move || {
            // Dropping the stream closes it: the handshake is all that is measured.
            for s in l.incoming() {
                drop(s);
            }
        }));
    }
    println!("ready");
    std::io::stdout().flush()?;
    for t in threads {
        let _ = t.join();
    }
    Ok(())
}
