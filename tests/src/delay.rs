//! A delay line for tests, since this kernel has no netem: two namespaces, a TUN device in
//! each, and a relay thread in the test process that reads every packet from one TUN and
//! writes it to the other once its one-way delay has passed.
//!
//! ```text
//!   <tag>-c netns                                     <tag>-s netns
//!   client addresses (/32, /128) on <ci>  ──relay──  <si>: server addresses
//!   routes to the server addresses via <ci>         routes to the clients via <si>
//! ```
//!
//! Packets wait in a queue ordered by due time, so each one's delay runs from when it was
//! read, however many are in flight (no per-packet sleep). The delay (and a ± jitter) can
//! be changed while it runs, for step changes; a packet keeps the delay it was read with.
//! Names carry the pid and a counter (`ra-<pid>-<n>-c`); `Drop` stops the relay, closes the
//! TUNs (which removes them) and deletes the namespaces.

use std::collections::BinaryHeap;
use std::fs;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::pins;

/// Prefix of the namespaces a delay line makes.
pub const PREFIX: &str = "ra";

static NEXT: AtomicUsize = AtomicUsize::new(0);

pub struct DelayLink {
    pub client_ns: String,
    pub server_ns: String,
    pub client_if: String,
    pub server_if: String,
    delay_us: Arc<AtomicU64>,
    jitter_us: Arc<AtomicU64>,
    relayed: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// What a packet waits in: ordered by due time (then arrival), earliest first.
struct Pending {
    due: Instant,
    seq: u64,
    to: usize,
    data: Vec<u8>,
}

impl PartialEq for Pending {
    fn eq(&self, o: &Self) -> bool {
        (self.due, self.seq) == (o.due, o.seq)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Pending {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // Reversed: BinaryHeap pops the greatest, the queue wants the earliest.
        (o.due, o.seq).cmp(&(self.due, self.seq))
    }
}

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run ip {args:?}: {e}"));
    assert!(
        out.status.success(),
        "ip {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Moves the calling thread into the network namespace `ns` (its sockets and TUN devices
/// are made there from then on; other threads are not affected).
pub fn enter(ns: &str) -> std::io::Result<()> {
    let f = fs::File::open(format!("/run/netns/{ns}"))?;
    // SAFETY: setns on a namespace file this thread opened; only this thread moves.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `struct ifreq` as TUNSETIFF reads it: the name, then the flags (40 bytes in all).
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _rest: [u8; 22],
}

/// A TUN device `name` (IP packets, no packet-info header) made in `ns`, non-blocking.
/// Made on a thread of its own that enters the namespace: the device belongs to the
/// namespace its opener was in, and the descriptor works from any thread afterwards.
fn open_tun(ns: &str, name: &str) -> OwnedFd {
    let (ns, dev) = (ns.to_string(), name.to_string());
    std::thread::spawn(move || -> std::io::Result<OwnedFd> {
        enter(&ns)?;
        // SAFETY: a constant C string.
        let fd = unsafe { libc::open(c"/dev/net/tun".as_ptr(), libc::O_RDWR | libc::O_NONBLOCK) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a descriptor just opened, owned from here on.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut req = IfReq {
            name: [0; libc::IFNAMSIZ],
            flags: (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short,
            _rest: [0; 22],
        };
        req.name[..dev.len()].copy_from_slice(dev.as_bytes());
        // SAFETY: TUNSETIFF reads and writes an ifreq, which `req` is laid out as.
        if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut req) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(fd)
    })
    .join()
    .expect("the TUN thread panicked")
    .unwrap_or_else(|e| panic!("making the TUN device {name}: {e}"))
}

/// Namespaces of delay lines whose test process was killed (no `Drop` ran).
fn sweep_stale() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let Ok(list) = Command::new("ip").args(["netns", "list"]).output() else {
            return;
        };
        for line in String::from_utf8_lossy(&list.stdout).lines() {
            let name = line.split_whitespace().next().unwrap_or("");
            if pins::owner_is_gone(name, PREFIX) {
                let _ = Command::new("ip").args(["netns", "del", name]).output();
            }
        }
    });
}

fn host_prefix(a: &IpAddr) -> String {
    match a {
        IpAddr::V4(_) => format!("{a}/32"),
        IpAddr::V6(_) => format!("{a}/128"),
    }
}

impl DelayLink {
    /// Both namespaces, their TUNs, addresses and routes, and the relay running with
    /// `one_way` delay in each direction.
    pub fn new(clients: &[IpAddr], servers: &[IpAddr], one_way: Duration) -> DelayLink {
        sweep_stale();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id() % 10000;
        let mut link = DelayLink {
            client_ns: pins::name(PREFIX, format!("{n}-c")),
            server_ns: pins::name(PREFIX, format!("{n}-s")),
            // At most 15 bytes: "rc" + 4 + "x" + counter.
            client_if: format!("rc{pid}x{n}"),
            server_if: format!("rs{pid}x{n}"),
            delay_us: Arc::new(AtomicU64::new(one_way.as_micros() as u64)),
            jitter_us: Arc::new(AtomicU64::new(0)),
            relayed: Arc::new(AtomicU64::new(0)),
            stop: Arc::new(AtomicBool::new(false)),
            thread: None,
        };
        // The namespaces exist (and Drop removes them) before anything can fail.
        ip(&["netns", "add", &link.client_ns]);
        ip(&["netns", "add", &link.server_ns]);
        let c = open_tun(&link.client_ns, &link.client_if);
        let s = open_tun(&link.server_ns, &link.server_if);
        link.configure(&link.client_ns, &link.client_if, clients, servers);
        link.configure(&link.server_ns, &link.server_if, servers, clients);
        let (delay, jitter, relayed, stop) = (
            link.delay_us.clone(),
            link.jitter_us.clone(),
            link.relayed.clone(),
            link.stop.clone(),
        );
        link.thread = Some(
            std::thread::Builder::new()
                .name("delay-relay".into())
                .spawn(move || relay([c, s], &delay, &jitter, &relayed, &stop))
                .expect("starting the relay thread"),
        );
        link
    }

    fn configure(&self, ns: &str, dev: &str, own: &[IpAddr], peers: &[IpAddr]) {
        ip(&["-n", ns, "link", "set", "lo", "up"]);
        ip(&["-n", ns, "link", "set", dev, "up"]);
        for a in own {
            let mut args = vec!["-n", ns, "addr", "add"];
            let p = host_prefix(a);
            args.extend([p.as_str(), "dev", dev]);
            if a.is_ipv6() {
                // No duplicate address detection: nothing else can claim it, and it would
                // keep the address unusable for a second or more.
                args.push("nodad");
            }
            ip(&args);
        }
        for a in peers {
            let p = host_prefix(a);
            ip(&["-n", ns, "route", "add", &p, "dev", dev]);
        }
    }

    /// The one-way delay from now on (packets already queued keep theirs).
    pub fn set_delay(&self, one_way: Duration) {
        self.delay_us
            .store(one_way.as_micros() as u64, Ordering::Relaxed);
    }

    /// Each packet's delay varies uniformly by up to ± `jitter` (packets may reorder).
    pub fn set_jitter(&self, jitter: Duration) {
        self.jitter_us
            .store(jitter.as_micros() as u64, Ordering::Relaxed);
    }

    /// Packets relayed so far (both directions).
    pub fn relayed(&self) -> u64 {
        self.relayed.load(Ordering::Relaxed)
    }
}

impl Drop for DelayLink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            // Ends within one poll interval; it owns (and then closes) the TUNs.
            let _ = t.join();
        }
        for ns in [&self.client_ns, &self.server_ns] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

/// The longest the relay sleeps in poll, so that it sees `stop` soon.
const MAX_WAIT: Duration = Duration::from_millis(20);

/// Moves packets between the two TUNs until `stop`: reads everything readable into the
/// queue, due `delay ± jitter` from now, then writes everything due. Both directions share
/// one queue and one thread; `ppoll` waits to the nanosecond until the next is due.
fn relay(
    fds: [OwnedFd; 2],
    delay: &AtomicU64,
    jitter: &AtomicU64,
    relayed: &AtomicU64,
    stop: &AtomicBool,
) {
    let mut queue: BinaryHeap<Pending> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut buf = vec![0u8; 65536];
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let wait = queue.peek().map_or(MAX_WAIT, |p| {
            p.due.saturating_duration_since(now).min(MAX_WAIT)
        });
        let mut pfd = [0, 1].map(|i| libc::pollfd {
            fd: fds[i].as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        let ts = libc::timespec {
            tv_sec: wait.as_secs() as libc::time_t,
            tv_nsec: wait.subsec_nanos() as libc::c_long,
        };
        // SAFETY: two pollfds and a timespec that live across the call.
        unsafe { libc::ppoll(pfd.as_mut_ptr(), 2, &ts, std::ptr::null()) };
        for (i, p) in pfd.iter().enumerate() {
            if p.revents & libc::POLLIN == 0 {
                continue;
            }
            loop {
                // SAFETY: reads into a buffer of the given length.
                let n = unsafe { libc::read(p.fd, buf.as_mut_ptr().cast(), buf.len()) };
                if n <= 0 {
                    break;
                }
                let read_at = Instant::now();
                let base = delay.load(Ordering::Relaxed) as i64;
                let j = jitter.load(Ordering::Relaxed) as i64;
                let off = if j > 0 {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    (rng % (2 * j as u64 + 1)) as i64 - j
                } else {
                    0
                };
                let us = (base + off).max(0) as u64;
                queue.push(Pending {
                    due: read_at + Duration::from_micros(us),
                    seq,
                    to: 1 - i,
                    data: buf[..n as usize].to_vec(),
                });
                seq += 1;
            }
        }
        let now = Instant::now();
        while queue.peek().is_some_and(|p| p.due <= now) {
            let Some(p) = queue.pop() else { break };
            // SAFETY: writes a whole packet from a buffer of its length. A TUN write never
            // blocks; a refused packet is lost, as on a real path.
            unsafe { libc::write(fds[p.to].as_raw_fd(), p.data.as_ptr().cast(), p.data.len()) };
            relayed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A host behind the delay line's server namespace, which becomes a gateway: the server
/// addresses move from its TUN to a third namespace, reached over a veth pair, and it
/// forwards between the two. So the handshakes between the clients and the host pass the
/// gateway without ending there (what `agent --observe` measures).
///
/// ```text
///   <tag>-c ──relay── <tag>-s (gateway: <si>, <gateway_if>) ──veth── rg-<pid>-<n> (<host_if>)
/// ```
///
/// Each server address goes on the host's veth in a /24 (IPv4) or /64 (IPv6); the gateway
/// takes .254 (::fe) of it and is the host's default route. `Drop` deletes the host's
/// namespace (and with it the pair); the delay line keeps its own.
pub struct HostBehind {
    pub host_ns: String,
    /// The gateway's end of the pair (in the delay line's server namespace).
    pub gateway_if: String,
    pub host_if: String,
}

/// Prefix of the namespaces of hosts behind a gateway.
pub const HOST_PREFIX: &str = "rg";

fn gateway_side(a: &IpAddr) -> (String, String) {
    match a {
        IpAddr::V4(v) => {
            let o = v.octets();
            (
                format!("{a}/24"),
                format!("{}.{}.{}.254/24", o[0], o[1], o[2]),
            )
        }
        IpAddr::V6(v) => {
            let mut s = v.segments();
            s[4..].copy_from_slice(&[0, 0, 0, 0xfe]);
            (
                format!("{a}/64"),
                format!("{}/64", std::net::Ipv6Addr::from(s)),
            )
        }
    }
}

impl DelayLink {
    /// Moves `servers` (addresses given to [`DelayLink::new`] as servers) to a host behind
    /// this line's server namespace, which then forwards (see [`HostBehind`]).
    pub fn host_behind(&self, servers: &[IpAddr]) -> HostBehind {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            if let Ok(list) = Command::new("ip").args(["netns", "list"]).output() {
                for line in String::from_utf8_lossy(&list.stdout).lines() {
                    let name = line.split_whitespace().next().unwrap_or("");
                    if pins::owner_is_gone(name, HOST_PREFIX) {
                        let _ = Command::new("ip").args(["netns", "del", name]).output();
                    }
                }
            }
        });
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id() % 10000;
        let h = HostBehind {
            host_ns: pins::name(HOST_PREFIX, n),
            gateway_if: format!("rg{pid}g{n}"),
            host_if: format!("rg{pid}h{n}"),
        };
        let (gw, host) = (self.server_ns.as_str(), h.host_ns.as_str());
        ip(&["netns", "add", host]);
        // No duplicate address detection on the pair's link-local addresses: while they
        // are tentative, neighbour discovery across the pair fails, and an IPv6 handshake
        // meanwhile takes a retransmission (a second SYN-ACK).
        for ns in [gw, host] {
            sysctl(
                ns,
                &[
                    "net.ipv6.conf.default.accept_dad=0",
                    "net.ipv6.conf.all.accept_dad=0",
                ],
            );
        }
        ip(&[
            "-n",
            gw,
            "link",
            "add",
            &h.gateway_if,
            "type",
            "veth",
            "peer",
            "name",
            &h.host_if,
            "netns",
            host,
        ]);
        ip(&["-n", host, "link", "set", "lo", "up"]);
        ip(&["-n", host, "link", "set", &h.host_if, "up"]);
        ip(&["-n", gw, "link", "set", &h.gateway_if, "up"]);
        for a in servers {
            if let IpAddr::V4(v) = a {
                // The kernel flushes a device's IPv4 routes (those to the clients) with its
                // last IPv4 address: the TUN keeps one of the gateway's own.
                let o = v.octets();
                let keep = format!("{}.{}.{}.253/32", o[0], o[1], o[2]);
                ip(&["-n", gw, "addr", "add", &keep, "dev", &self.server_if]);
            }
            ip(&[
                "-n",
                gw,
                "addr",
                "del",
                &host_prefix(a),
                "dev",
                &self.server_if,
            ]);
            let (own, gateway) = gateway_side(a);
            let v6: &[&str] = if a.is_ipv6() { &["nodad"] } else { &[] };
            let mut args = vec!["-n", host, "addr", "add", &own, "dev", &h.host_if];
            args.extend(v6);
            ip(&args);
            let mut args = vec!["-n", gw, "addr", "add", &gateway, "dev", &h.gateway_if];
            args.extend(v6);
            ip(&args);
            let via = gateway.split('/').next().unwrap_or_default();
            let family = if a.is_ipv6() { "-6" } else { "-4" };
            ip(&["-n", host, family, "route", "add", "default", "via", via]);
        }
        sysctl(
            gw,
            &["net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"],
        );
        h
    }
}

fn sysctl(ns: &str, settings: &[&str]) {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "sysctl", "-q", "-w"])
        .args(settings)
        .output()
        .expect("running sysctl");
    assert!(out.status.success(), "sysctl {settings:?} in {ns}: {out:?}");
}

impl Drop for HostBehind {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.host_ns])
            .output();
    }
}
