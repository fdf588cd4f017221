//! The sockets: UDP and TCP port 53 on every listen address of every zone, on one thread of
//! their own (tokio). TCP follows RFC 7766: several queries per connection, answered in
//! order as they come (pipelining), an idle timeout, and a bound on open connections.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;

use director_common::rrl::{user::Limiter, Verdict};

use super::answer::{respond_for, truncated, Outcome, Services, Transport, Zones};
use crate::kernel::{resolve::Resolver, Maps};

/// A TCP connection with no complete query for this long is closed (RFC 7766 §6.2.3 asks
/// for seconds, not minutes).
pub const TCP_IDLE: Duration = Duration::from_secs(10);
/// Open TCP connections at most; past it a new one is closed at once.
pub const TCP_MAX: usize = 256;
/// Open TCP connections from one address at most: one client cannot hold every slot.
pub const TCP_MAX_PER_PEER: usize = 16;

/// Answers by transport and outcome, for the metrics.
#[derive(Default, Debug)]
pub struct Stats {
    counts: [[AtomicU64; OUTCOMES.len()]; 2],
}

const OUTCOMES: [Outcome; 13] = [
    Outcome::Answered,
    Outcome::NoData,
    Outcome::NxDomain,
    Outcome::Refused,
    Outcome::NotImp,
    Outcome::FormErr,
    Outcome::ServFail,
    Outcome::BadVers,
    Outcome::NotAuth,
    Outcome::Truncated,
    Outcome::RateLimitedSlipped,
    Outcome::RateLimitedDropped,
    Outcome::Ignored,
];

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Answered => "answered",
            Outcome::NoData => "nodata",
            Outcome::NxDomain => "nxdomain",
            Outcome::Refused => "refused",
            Outcome::NotImp => "notimp",
            Outcome::FormErr => "formerr",
            Outcome::ServFail => "servfail",
            Outcome::BadVers => "badvers",
            Outcome::NotAuth => "notauth",
            Outcome::Truncated => "truncated",
            Outcome::RateLimitedSlipped => "truncated_rate_limited",
            Outcome::RateLimitedDropped => "drop_rate_limited",
            Outcome::Ignored => "ignored",
        }
    }
}

impl Stats {
    fn count(&self, t: Transport, o: Outcome) {
        let i = OUTCOMES.iter().position(|x| *x == o).unwrap_or(0);
        self.counts[(t == Transport::Tcp) as usize][i].fetch_add(1, Ordering::Relaxed);
    }

    /// (transport, outcome, count) for every pair.
    pub fn snapshot(&self) -> Vec<(&'static str, &'static str, u64)> {
        let mut out = Vec::new();
        for (t, name) in [(0, "udp"), (1, "tcp")] {
            for (i, o) in OUTCOMES.iter().enumerate() {
                out.push((name, o.name(), self.counts[t][i].load(Ordering::Relaxed)));
            }
        }
        out
    }
}

/// The running listeners. The zones can be replaced while they run (a config reload); the
/// addresses they listen on are those of the start.
pub struct Server {
    zones: Arc<RwLock<Arc<Zones>>>,
    pub stats: Arc<Stats>,
    pub addresses: Vec<SocketAddr>,
}

struct Shared {
    zones: Arc<RwLock<Arc<Zones>>>,
    resolver: Resolver,
    /// The kernel's rate limits and exemptions (read per answer: `rrl set` and `run`'s
    /// apply change them) ...
    maps: Maps,
    /// ... and this server's own buckets: the XDP program's are in the kernel, where
    /// userspace cannot take from them atomically.
    limiter: Mutex<Limiter>,
    clock: Instant,
    stats: Arc<Stats>,
    tcp_slots: Arc<Semaphore>,
    /// Open connections per peer address.
    tcp_peers: Mutex<std::collections::HashMap<IpAddr, usize>>,
}

/// Buckets the listeners keep at most (past it, idle ones are forgotten first).
const RRL_BUCKETS: usize = 65_536;

impl Shared {
    fn answer(&self, query: &[u8], peer: IpAddr, t: Transport) -> Option<Vec<u8>> {
        let zones = self
            .zones
            .read()
            .map(|z| Arc::clone(&z))
            .unwrap_or_default();
        let services: &dyn Services = &self.resolver;
        let (bytes, outcome, service) = respond_for(&zones, services, query, peer, t);
        let bytes = bytes?;
        // Over UDP only: a TCP peer has shown it owns its address, so it cannot be the
        // victim of a reflection.
        if t == Transport::Udp {
            match self.rate_limit(service.unwrap_or(0), peer) {
                Verdict::Answer => {}
                Verdict::Slip => {
                    self.stats.count(t, Outcome::RateLimitedSlipped);
                    return truncated(&bytes);
                }
                Verdict::Drop => {
                    self.stats.count(t, Outcome::RateLimitedDropped);
                    return None;
                }
            }
        }
        self.stats.count(t, outcome);
        Some(bytes)
    }

    /// The kernel's limit for `service` (0: answers of no service, the `[rrl]` default),
    /// applied to `peer`'s prefix with this server's buckets. If the maps cannot be read
    /// the answer goes out: a broken limiter must not silence the zone.
    fn rate_limit(&self, service: u32, peer: IpAddr) -> Verdict {
        let Ok(limit) = self.maps.rrl(service) else {
            return Verdict::Answer;
        };
        if !limit.is_limited() || self.maps.rrl_is_exempt(peer).unwrap_or(false) {
            return Verdict::Answer;
        }
        let now = self.clock.elapsed().as_nanos() as u64;
        match self.limiter.lock() {
            Ok(mut l) => l.check(service, peer, &limit, now),
            Err(_) => Verdict::Answer,
        }
    }
}

impl Server {
    /// Binds every zone's listen addresses on `port` now (so an address the host does not
    /// have, or a taken port, is an error at start) and serves from a thread.
    pub fn start(pin_dir: &Path, zones: Zones, port: u16) -> Result<Server> {
        let mut addrs: BTreeMap<SocketAddr, ()> = BTreeMap::new();
        for z in zones.all() {
            for a in &z.listen {
                addrs.insert(SocketAddr::new(*a, port), ());
            }
        }
        let mut udp = Vec::new();
        let mut tcp = Vec::new();
        for a in addrs.keys() {
            let u = std::net::UdpSocket::bind(a)
                .with_context(|| format!("zone listen {a} (UDP): cannot bind"))?;
            u.set_nonblocking(true)?;
            udp.push(u);
            let t = std::net::TcpListener::bind(a)
                .with_context(|| format!("zone listen {a} (TCP): cannot bind"))?;
            t.set_nonblocking(true)?;
            tcp.push(t);
        }
        let resolver = Resolver::open(pin_dir)?;
        let zones = Arc::new(RwLock::new(Arc::new(zones)));
        let stats = Arc::new(Stats::default());
        let shared = Arc::new(Shared {
            zones: Arc::clone(&zones),
            resolver,
            maps: Maps::open(pin_dir)?,
            limiter: Mutex::new(Limiter::new(RRL_BUCKETS)),
            clock: Instant::now(),
            stats: Arc::clone(&stats),
            tcp_slots: Arc::new(Semaphore::new(TCP_MAX)),
            tcp_peers: Mutex::new(std::collections::HashMap::new()),
        });
        crate::runtime::spawn("dns", "the DNS listeners", move || async move {
            let mut tasks = tokio::task::JoinSet::new();
            for u in udp {
                tasks.spawn(serve_udp(u, Arc::clone(&shared)));
            }
            for t in tcp {
                tasks.spawn(serve_tcp(t, Arc::clone(&shared)));
            }
            while tasks.join_next().await.is_some() {}
        })?;
        Ok(Server {
            zones,
            stats,
            addresses: addrs.into_keys().collect(),
        })
    }

    /// Serves `zones` from the next query on.
    /// The zones answered now.
    pub fn zones(&self) -> Arc<Zones> {
        self.zones
            .read()
            .map(|z| Arc::clone(&z))
            .unwrap_or_default()
    }

    pub fn set_zones(&self, zones: Zones) {
        if let Ok(mut z) = self.zones.write() {
            *z = Arc::new(zones);
        }
    }
}

async fn serve_udp(sock: std::net::UdpSocket, shared: Arc<Shared>) {
    let Ok(sock) = tokio::net::UdpSocket::from_std(sock) else {
        return;
    };
    // Bigger than any UDP query director answers: a longer one is cut and gets FORMERR.
    let mut buf = vec![0u8; 4096];
    loop {
        let Ok((n, peer)) = sock.recv_from(&mut buf).await else {
            continue;
        };
        // A dual-stack socket hands IPv4 clients over as ::ffff:a.b.c.d: keyed as IPv6
        // they would find no decision and share one rate-limit bucket.
        if let Some(out) = shared.answer(&buf[..n], peer.ip().to_canonical(), Transport::Udp) {
            let _ = sock.send_to(&out, peer).await;
        }
    }
}

async fn serve_tcp(l: std::net::TcpListener, shared: Arc<Shared>) {
    crate::runtime::accept(l, move |stream, peer| {
        let peer = peer.ip().to_canonical();
        // Past the bounds the connection is closed at once: the client retries elsewhere or
        // later, and the connections already open keep being served.
        let permit = Arc::clone(&shared.tcp_slots).try_acquire_owned().ok()?;
        if !shared.peer_open(peer) {
            return None;
        }
        let shared = Arc::clone(&shared);
        Some(async move {
            let _permit = permit;
            let _ = connection(stream, peer, &shared).await;
            shared.peer_closed(peer);
        })
    })
    .await;
}

impl Shared {
    /// Counts a connection from `peer`, unless it has [`TCP_MAX_PER_PEER`] open already.
    fn peer_open(&self, peer: IpAddr) -> bool {
        let Ok(mut open) = self.tcp_peers.lock() else {
            return true;
        };
        let n = open.entry(peer).or_insert(0);
        if *n >= TCP_MAX_PER_PEER {
            return false;
        }
        *n += 1;
        true
    }

    fn peer_closed(&self, peer: IpAddr) {
        if let Ok(mut open) = self.tcp_peers.lock() {
            if let Some(n) = open.get_mut(&peer) {
                *n -= 1;
                if *n == 0 {
                    open.remove(&peer);
                }
            }
        }
    }
}

/// Reads length-prefixed queries until the peer closes, stays idle too long, or sends
/// something that is not DNS; each answer is written before the next query is read.
async fn connection(
    mut stream: tokio::net::TcpStream,
    peer: IpAddr,
    shared: &Shared,
) -> std::io::Result<()> {
    let mut len = [0u8; 2];
    let mut buf = Vec::new();
    loop {
        match tokio::time::timeout(TCP_IDLE, stream.read_exact(&mut len)).await {
            Ok(Ok(_)) => {}
            _ => return Ok(()),
        }
        let n = u16::from_be_bytes(len) as usize;
        buf.resize(n, 0);
        match tokio::time::timeout(TCP_IDLE, stream.read_exact(&mut buf)).await {
            Ok(Ok(_)) => {}
            _ => return Ok(()),
        }
        let Some(out) = shared.answer(&buf, peer, Transport::Tcp) else {
            // Not a query: nothing sensible follows on this stream.
            return Ok(());
        };
        let mut framed = Vec::with_capacity(out.len() + 2);
        framed.extend_from_slice(&(out.len() as u16).to_be_bytes());
        framed.extend_from_slice(&out);
        // A peer that does not read its answers would hold the connection (and its slot)
        // for ever: it gets as long as an idle one.
        match tokio::time::timeout(TCP_IDLE, stream.write_all(&framed)).await {
            Ok(r) => r?,
            Err(_) => return Ok(()),
        }
    }
}
