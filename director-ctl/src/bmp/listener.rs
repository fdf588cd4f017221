//! Accepts routers' BMP connections and feeds each one's messages to the collector.

use std::collections::HashMap;
use std::io::{ErrorKind, Read};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Instant;

use anyhow::{Context, Result};
use director_plan::inputs::bmp::{Collector, Framer};
use ipnet::IpNet;

use crate::api::{Event, Log};

/// Bytes asked of each read(); the collector's lock is taken once per read, and
/// `on_change` called once, so this also bounds how often a dump takes the lock.
const READ_CHUNK: usize = 1 << 16;

type OnChange = Box<dyn Fn() + Send + Sync>;

struct Shared {
    collector: Arc<Mutex<Collector>>,
    on_change: OnChange,
    log: Log,
    stop: AtomicBool,
    /// Each router's current connection (id, a handle to shut it down): a router that
    /// reconnects replaces its old connection, which then ends without touching the session.
    conns: Mutex<HashMap<IpAddr, (u64, TcpStream)>>,
    next_id: AtomicU64,
    admit: Admit,
    /// Sessions refused: from an address not allowed, past the cap.
    refused_not_allowed: AtomicU64,
    refused_over_cap: AtomicU64,
}

/// Who may open a session: `[bgp] bmp_allow` (or the sites' `bmp_router` addresses) and
/// `bmp_max_sessions`. BMP has no authentication of its own, so the address is all there
/// is to go by; a router's routes decide answers, so nobody else may send any.
#[derive(Clone, Debug)]
pub struct Admit {
    pub allow: Vec<IpNet>,
    pub max_sessions: usize,
}

/// Why a session was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    NotAllowed,
    OverCap,
}

impl Refused {
    pub fn reason(self) -> &'static str {
        match self {
            Refused::NotAllowed => "not_allowed",
            Refused::OverCap => "over_cap",
        }
    }
}

impl Shared {
    fn collector(&self) -> MutexGuard<'_, Collector> {
        // A reader that panicked left the state as consistent as any message boundary.
        self.collector
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn conns(&self) -> MutexGuard<'_, HashMap<IpAddr, (u64, TcpStream)>> {
        self.conns.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn is_current(&self, router: IpAddr, id: u64) -> bool {
        self.conns().get(&router).is_some_and(|c| c.0 == id)
    }

    /// Logs the sync ends the collector recorded.
    fn log_synced(&self, c: &mut Collector) {
        for s in c.take_synced() {
            self.log.event(
                Event::BmpSynced {
                    router: s.router,
                    peers: s.peers,
                    routes: s.routes,
                    ms: s.ms,
                },
                format!(
                    "BMP router {} synced: {} routes from {} peers in {} ms",
                    s.router, s.routes, s.peers, s.ms
                ),
            );
        }
    }
}

/// The BMP listener: one accept thread, one reader thread per router. Dropping it stops
/// accepting and closes the connections (their routes turn stale, as on any disconnect).
pub struct Listener {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl Listener {
    /// Binds `addr` and serves routers. `on_change` is called after each batch of messages
    /// (one read) that was applied, and after a session ends: the caller debounces and then
    /// reads [`Collector::take_dirty`]. Only routers should reach this port; there is no
    /// authentication in BMP.
    pub fn start(
        addr: SocketAddr,
        admit: Admit,
        collector: Arc<Mutex<Collector>>,
        on_change: impl Fn() + Send + Sync + 'static,
        log: Log,
    ) -> Result<Listener> {
        let socket =
            TcpListener::bind(addr).with_context(|| format!("cannot listen for BMP on {addr}"))?;
        let addr = socket.local_addr().context("the BMP listener's address")?;
        let shared = Arc::new(Shared {
            collector,
            on_change: Box::new(on_change),
            log,
            stop: AtomicBool::new(false),
            conns: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            admit,
            refused_not_allowed: AtomicU64::new(0),
            refused_over_cap: AtomicU64::new(0),
        });
        let s = Arc::clone(&shared);
        let accept = std::thread::Builder::new()
            .name("bmp-accept".into())
            .spawn(move || accept_loop(&socket, &s))
            .context("starting the BMP accept thread")?;
        Ok(Listener {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    /// Sessions refused since the start: (from an address not allowed, past the cap).
    pub fn refused(&self) -> (u64, u64) {
        (
            self.shared.refused_not_allowed.load(Ordering::Relaxed),
            self.shared.refused_over_cap.load(Ordering::Relaxed),
        )
    }

    /// The address bound (with the port chosen, if 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The collector's timers (quiet-period sync ends, hold-time expiry), with their log
    /// lines and `on_change` if prefixes changed; call it about once a second.
    pub fn tick(&self) {
        let changed = {
            let mut c = self.shared.collector();
            c.tick(Instant::now());
            self.shared.log_synced(&mut c);
            c.dirty_len() > 0
        };
        if changed {
            (self.shared.on_change)();
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept() with a connection of our own.
        let wake = match self.addr.ip() {
            IpAddr::V4(a) if a.is_unspecified() => {
                SocketAddr::new(Ipv4Addr::LOCALHOST.into(), self.addr.port())
            }
            IpAddr::V6(a) if a.is_unspecified() => {
                SocketAddr::new(Ipv6Addr::LOCALHOST.into(), self.addr.port())
            }
            _ => self.addr,
        };
        let _ = TcpStream::connect(wake);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        for (_, (_, s)) in self.shared.conns().drain() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

fn accept_loop(socket: &TcpListener, shared: &Arc<Shared>) {
    loop {
        let (stream, from) = match socket.accept() {
            Ok(c) => c,
            Err(e) => {
                if shared.stop.load(Ordering::SeqCst) {
                    return;
                }
                // Out of descriptors, most likely: wait for connections to end, do not spin.
                log::warn!("BMP accept: {e}");
                std::thread::sleep(std::time::Duration::from_millis(100));
                continue;
            }
        };
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        // An IPv4 router on a dual-stack socket shows as ::ffff:a.b.c.d; it is a.b.c.d.
        let router = from.ip().to_canonical();
        if let Some(why) = refuse(shared, router) {
            // Closed before a byte of it is read: nothing it sent reaches the collector.
            let _ = stream.shutdown(std::net::Shutdown::Both);
            drop(stream);
            let (count, text) = match why {
                Refused::NotAllowed => (
                    &shared.refused_not_allowed,
                    format!("BMP session from {router} refused: not in [bgp] bmp_allow"),
                ),
                Refused::OverCap => (
                    &shared.refused_over_cap,
                    format!(
                        "BMP session from {router} refused: {} sessions already \
                         ([bgp] bmp_max_sessions)",
                        shared.admit.max_sessions
                    ),
                ),
            };
            count.fetch_add(1, Ordering::Relaxed);
            shared.log.event(
                Event::BmpRefused {
                    router,
                    reason: why.reason().into(),
                },
                text,
            );
            continue;
        }
        if let Err(e) = super::socket::keepalive(&stream) {
            log::warn!("BMP router {router}: {e:#} (a dead router may go unnoticed)");
        }
        let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
        let handle = match stream.try_clone() {
            Ok(h) => h,
            Err(e) => {
                log::warn!("BMP router {router}: cannot keep a handle on its connection: {e}");
                continue;
            }
        };
        if let Some((_, old)) = shared.conns().insert(router, (id, handle)) {
            // The router reconnected: its old connection is over.
            let _ = old.shutdown(std::net::Shutdown::Both);
        }
        let s = Arc::clone(shared);
        let spawned = std::thread::Builder::new()
            .name(format!("bmp-{router}"))
            .spawn(move || serve(&s, stream, router, id));
        if let Err(e) = spawned {
            log::warn!("BMP router {router}: cannot start its reader: {e}");
            shared.conns().remove(&router);
        }
    }
}

/// Why `router`'s new session is refused, if it is: its address is not allowed, or the
/// cap is reached (a router replacing its own session does not count twice).
fn refuse(shared: &Shared, router: IpAddr) -> Option<Refused> {
    if !shared.admit.allow.iter().any(|n| n.contains(&router)) {
        return Some(Refused::NotAllowed);
    }
    let conns = shared.conns();
    if !conns.contains_key(&router) && conns.len() >= shared.admit.max_sessions {
        return Some(Refused::OverCap);
    }
    None
}

/// One router's connection, from session up to session down.
fn serve(shared: &Shared, stream: TcpStream, router: IpAddr, id: u64) {
    shared.collector().session_up(router, Instant::now());
    let result = read_loop(shared, stream, router, id);
    // Only the current connection ends the session; a replaced one just goes.
    let current = {
        let mut conns = shared.conns();
        let current = conns.get(&router).is_some_and(|c| c.0 == id);
        if current {
            conns.remove(&router);
        }
        current
    };
    if !current {
        return;
    }
    shared.collector().session_down(router, Instant::now());
    (shared.on_change)();
    let error = result.err().map(|e| format!("{e:#}"));
    let text = match &error {
        Some(e) => format!("BMP router {router} lost: {e}; its routes are stale"),
        None => format!("BMP router {router} closed its session; its routes are stale"),
    };
    shared.log.event(Event::BmpDown { router, error }, text);
}

/// Reads until EOF (`Ok`) or an error: the socket's, a broken frame, a message that does not
/// parse.
fn read_loop(shared: &Shared, mut stream: TcpStream, router: IpAddr, id: u64) -> Result<()> {
    let mut framer = Framer::new();
    let mut buf = vec![0u8; READ_CHUNK];
    let mut announced = false;
    loop {
        let n = match stream.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).context("reading"),
        };
        framer.push(&buf[..n]);
        let mut applied = 0usize;
        let outcome = {
            let mut c = shared.collector();
            // Checked under the collector's lock: once replaced, nothing more of ours lands.
            if !shared.is_current(router, id) {
                return Ok(());
            }
            let now = Instant::now();
            let outcome = loop {
                match framer.next_message() {
                    Ok(Some(m)) => match c.message(router, m, now) {
                        Ok(()) => applied += 1,
                        Err(e) => break Err(e),
                    },
                    Ok(None) => break Ok(()),
                    Err(e) => break Err(e).context("BMP framing"),
                }
            };
            if !announced && applied > 0 {
                announced = true;
                let name = c.router_name(router).map(str::to_string);
                let text = format!(
                    "BMP router {router}{} connected",
                    name.as_deref()
                        .map(|n| format!(" ({n})"))
                        .unwrap_or_default()
                );
                shared.log.event(Event::BmpUp { router, name }, text);
            }
            shared.log_synced(&mut c);
            outcome
        };
        if applied > 0 {
            (shared.on_change)();
        }
        outcome?;
    }
}
