//! Active RTT probes, DRP's `rttprobe`: the controller names prefixes that have demand but
//! no handshakes at this site (`POST /probe`), and the agent measures a host of each. A
//! bounded queue, a token bucket (`--probe-rate` targets per second) and at most
//! [`IN_FLIGHT`] probes at once, each on a short thread of its own: a TCP SYN to port 443,
//! then 80 (the SYN-ACK or the RST is the RTT; the connection is reset at once, so the
//! host keeps no state), else an ICMP echo on a raw socket (the agent runs as root); the
//! way that answered twice, the smaller RTT kept. The RTTs go to the same per-prefix
//! windows as the handshakes, marked as probed.

use std::collections::{HashSet, VecDeque};
use std::io;
use std::mem::size_of;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use ipnet::IpNet;

use super::scope::{self, Refusal};
use crate::api::{ProbeAccepted, ProbeTarget, RttCounters};

/// Targets one request may name (the controller sends at most `[rtt] probe`).
pub const MAX_REQUEST: usize = director_plan::config::MAX_PROBE;

/// Probes under way at once: with the default rate and timeout, about 15 are.
pub const IN_FLIGHT: usize = 64;

/// The TCP ports tried, in order: a web host answers on one, and any host's stack answers
/// a SYN to a closed port with a RST, which times the path as well.
const PORTS: [u16; 2] = [443, 80];

pub struct Options {
    /// Targets started per second.
    pub rate: f64,
    /// How long each of the three tries waits for an answer.
    pub timeout: Duration,
    /// Targets waiting at most; more are refused.
    pub queue: usize,
    /// `--probe-allow`: special-purpose prefixes that may be probed all the same.
    pub allow: Vec<IpNet>,
}

/// How a probe got its RTT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// A SYN-ACK from this port (something listens).
    SynAck(u16),
    /// A RST from this port (nothing listens).
    Reset(u16),
    Echo,
}

/// One probe's RTT, for the window of the /24 (/48) holding its target.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Probed {
    pub prefix: IpNet,
    pub address: IpAddr,
    pub rtt_us: u32,
    pub how: Method,
}

/// A token bucket: `per_s` tokens a second, at most `burst` saved up. The clock is passed
/// in, so that the bound is tested without sleeping.
#[derive(Debug)]
pub struct Limiter {
    per_s: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl Limiter {
    /// Starts with one token: the first target goes at once, the rest at the rate.
    pub fn new(per_s: f64, now: Instant) -> Limiter {
        let per_s = per_s.max(0.001);
        Limiter {
            per_s,
            // A tenth of a second's worth, so that a sleep's overshoot at high rates is
            // made up, and at low rates never more than one at once.
            burst: (per_s / 10.0).max(1.0),
            tokens: 1.0,
            at: now,
        }
    }

    /// Takes a token if there is one at `now`; else how long until there is.
    pub fn take(&mut self, now: Instant) -> std::result::Result<(), Duration> {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.at = self.at.max(now);
        self.tokens = (self.tokens + dt * self.per_s).min(self.burst);
        // Many small refills add up to a little under 1 in floating point.
        if self.tokens >= 1.0 - 1e-9 {
            self.tokens = (self.tokens - 1.0).max(0.0);
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.per_s))
        }
    }
}

/// The client prefix a probe of `a` measures: its /24 or /48, as the handshakes' are kept.
pub fn prefix_of(a: IpAddr) -> IpNet {
    let len = if a.is_ipv4() { 24 } else { 48 };
    // A length within the family's bound: `new` cannot fail.
    IpNet::new(a, len).map_or_else(|_| IpNet::from(a), |n| n.trunc())
}

/// Targets waiting, and every address queued or under way (asked again, it is not taken
/// twice).
#[derive(Debug)]
pub struct Queue {
    waiting: VecDeque<IpAddr>,
    busy: HashSet<IpAddr>,
    max: usize,
    /// `--probe-allow`: special-purpose prefixes a lab may probe.
    allow: Vec<IpNet>,
}

impl Queue {
    pub fn new(max: usize, allow: Vec<IpNet>) -> Queue {
        Queue {
            waiting: VecDeque::new(),
            busy: HashSet::new(),
            max,
            allow,
        }
    }

    /// Queues what a request names, up to [`MAX_REQUEST`] of it and the queue's bound,
    /// and only what [`scope::check`] lets be probed.
    pub fn offer(&mut self, targets: &[ProbeTarget]) -> ProbeAccepted {
        let mut a = ProbeAccepted::default();
        for (i, t) in targets.iter().enumerate() {
            if let Err(why) = scope::check(t, &self.allow) {
                a.refused += 1;
                *match why {
                    Refusal::NotAUnit => &mut a.refused_not_unit,
                    Refusal::Outside => &mut a.refused_outside,
                    Refusal::NotGlobal => &mut a.refused_not_global,
                } += 1;
            } else if i >= MAX_REQUEST || self.waiting.len() >= self.max {
                a.refused += 1;
                a.refused_bound += 1;
            } else if !self.busy.insert(t.address) {
                a.duplicate += 1;
            } else {
                self.waiting.push_back(t.address);
                a.accepted += 1;
            }
        }
        a.queued = self.waiting.len();
        a
    }

    fn pop(&mut self) -> Option<IpAddr> {
        self.waiting.pop_front()
    }

    fn done(&mut self, a: &IpAddr) {
        self.busy.remove(a);
    }

    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }
}

/// What the HTTP server, the probing thread and the drain loop share.
pub struct Prober {
    queue: Mutex<Queue>,
    results: Mutex<Vec<Probed>>,
    in_flight: AtomicUsize,
    probed: AtomicU64,
    syn_ack: AtomicU64,
    reset: AtomicU64,
    echo: AtomicU64,
    failed: AtomicU64,
    refused: AtomicU64,
    /// By reason: not a unit, outside its prefix, not global, past a bound.
    refused_by: [AtomicU64; 4],
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere leaves the queue or results whole (each change is one call).
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Prober {
    /// Starts the probing thread; `stopping` ends it.
    pub fn start(o: &Options, stopping: fn() -> bool) -> Result<Arc<Prober>> {
        if !(o.rate > 0.0 && o.rate <= 10_000.0) {
            bail!("--probe-rate {}: above 0, at most 10000", o.rate);
        }
        if o.timeout < Duration::from_millis(10) || o.timeout > Duration::from_secs(10) {
            bail!(
                "--probe-timeout-ms {}: from 10 to 10000",
                o.timeout.as_millis()
            );
        }
        let p = Arc::new(Prober {
            queue: Mutex::new(Queue::new(o.queue.max(1), o.allow.clone())),
            results: Mutex::new(Vec::new()),
            in_flight: AtomicUsize::new(0),
            probed: AtomicU64::new(0),
            syn_ack: AtomicU64::new(0),
            reset: AtomicU64::new(0),
            echo: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            refused_by: Default::default(),
        });
        let (me, rate, timeout) = (Arc::clone(&p), o.rate, o.timeout);
        std::thread::Builder::new()
            .name("agent-probe".into())
            .spawn(move || me.pace(rate, timeout, stopping))?;
        Ok(p)
    }

    /// `POST /probe`.
    pub fn offer(&self, targets: &[ProbeTarget]) -> ProbeAccepted {
        let a = lock(&self.queue).offer(targets);
        self.refused.fetch_add(a.refused as u64, Ordering::Relaxed);
        let by = [
            a.refused_not_unit,
            a.refused_outside,
            a.refused_not_global,
            a.refused_bound,
        ];
        for (n, c) in by.iter().zip(&self.refused_by) {
            c.fetch_add(*n as u64, Ordering::Relaxed);
        }
        a
    }

    /// The RTTs measured since the last call.
    pub fn take(&self) -> Vec<Probed> {
        std::mem::take(&mut *lock(&self.results))
    }

    /// Adds the probes' totals to the report's counters.
    pub fn count(&self, c: &mut RttCounters) {
        c.probed = self.probed.load(Ordering::Relaxed);
        c.probe_syn_ack = self.syn_ack.load(Ordering::Relaxed);
        c.probe_reset = self.reset.load(Ordering::Relaxed);
        c.probe_echo = self.echo.load(Ordering::Relaxed);
        c.probe_failed = self.failed.load(Ordering::Relaxed);
        c.probe_refused = self.refused.load(Ordering::Relaxed);
        let by = |i: usize| self.refused_by[i].load(Ordering::Relaxed);
        c.probe_refused_not_unit = by(0);
        c.probe_refused_outside = by(1);
        c.probe_refused_not_global = by(2);
        c.probe_refused_bound = by(3);
    }

    /// Starts a probe per token while targets wait and fewer than [`IN_FLIGHT`] run.
    fn pace(self: Arc<Self>, rate: f64, timeout: Duration, stopping: fn() -> bool) {
        let mut limit = Limiter::new(rate, Instant::now());
        while !stopping() {
            if self.in_flight.load(Ordering::Relaxed) >= IN_FLIGHT
                || lock(&self.queue).waiting() == 0
            {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            if let Err(wait) = limit.take(Instant::now()) {
                std::thread::sleep(wait.min(Duration::from_millis(100)));
                continue;
            }
            let Some(address) = lock(&self.queue).pop() else {
                continue;
            };
            self.probed.fetch_add(1, Ordering::Relaxed);
            self.in_flight.fetch_add(1, Ordering::Relaxed);
            let me = Arc::clone(&self);
            let started = std::thread::Builder::new()
                .name("agent-probe-1".into())
                .spawn(move || me.finish(address, probe(address, timeout)));
            if started.is_err() {
                self.finish(address, None);
            }
        }
    }

    fn finish(&self, address: IpAddr, got: Option<(Duration, Method)>) {
        match got {
            Some((rtt, how)) => {
                let n = match how {
                    Method::SynAck(_) => &self.syn_ack,
                    Method::Reset(_) => &self.reset,
                    Method::Echo => &self.echo,
                };
                n.fetch_add(1, Ordering::Relaxed);
                lock(&self.results).push(Probed {
                    prefix: prefix_of(address),
                    address,
                    rtt_us: u32::try_from(rtt.as_micros()).unwrap_or(u32::MAX).max(1),
                    how,
                });
            }
            None => {
                self.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
        lock(&self.queue).done(&address);
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One target: TCP to each of [`PORTS`], else an ICMP echo; the way that answers is tried
/// once more and the smaller RTT kept: the first packet on a path (or of a process that
/// just woke a core) is often late by milliseconds, and one probe is all a window may hold.
pub fn probe(a: IpAddr, timeout: Duration) -> Option<(Duration, Method)> {
    for port in PORTS {
        let to = SocketAddr::new(a, port);
        if let Some((rtt, how)) = syn(to, timeout) {
            let again = syn(to, timeout).filter(|g| g.1 == how).map(|g| g.0);
            return Some((again.map_or(rtt, |r| r.min(rtt)), how));
        }
    }
    let rtt = echo(a, timeout).ok().flatten()?;
    let again = echo(a, timeout).ok().flatten();
    Some((again.map_or(rtt, |r| r.min(rtt)), Method::Echo))
}

/// A connect's handshake: the time to the SYN-ACK (connected) or the RST (refused). An ICMP
/// error (unreachable) is a router's answer, not the host's: no RTT. The timeout stays
/// under the kernel's first SYN retransmission (1 s), whose answer would time two tries.
fn syn(to: SocketAddr, timeout: Duration) -> Option<(Duration, Method)> {
    let t0 = Instant::now();
    match TcpStream::connect_timeout(&to, timeout) {
        Ok(s) => {
            let rtt = t0.elapsed();
            reset_on_close(&s);
            Some((rtt, Method::SynAck(to.port())))
        }
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            Some((t0.elapsed(), Method::Reset(to.port())))
        }
        Err(_) => None,
    }
}

/// SO_LINGER 0: closing sends a RST, so neither side keeps the connection (no FIN
/// exchange, no TIME_WAIT here).
fn reset_on_close(s: &TcpStream) {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt reads a `linger` of the size given from a valid pointer.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            std::ptr::from_ref(&l).cast(),
            size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

/// Echo ids, distinct per probe of this process (every raw socket sees every reply).
static NEXT_ID: AtomicU16 = AtomicU16::new(0);

/// The echo request: type, code, checksum, id, sequence, and a payload naming the sender.
fn echo_request(v6: bool, id: u16) -> [u8; 16] {
    let mut p = [0u8; 16];
    p[0] = if v6 { 128 } else { 8 };
    p[4..6].copy_from_slice(&id.to_be_bytes());
    p[6..8].copy_from_slice(&1u16.to_be_bytes());
    p[8..16].copy_from_slice(b"director");
    if !v6 {
        // ICMPv6's checksum covers a pseudo-header: the kernel fills it in for raw
        // ICMPv6 sockets. ICMP's is ours.
        let c = director_common::checksum::finish_ip(director_common::checksum::sum_bytes(&p));
        p[2..4].copy_from_slice(&c.to_be_bytes());
    }
    p
}

/// Whether `got` (an IPv4 raw socket's packet with its IP header, or an ICMPv6 message) is
/// the echo reply to `id` from `from`.
fn is_reply(got: &[u8], v6: bool, id: u16) -> bool {
    let icmp = if v6 {
        got
    } else {
        let ihl = usize::from(got.first().map_or(0, |b| b & 0x0f)) * 4;
        got.get(ihl..).unwrap_or(&[])
    };
    let want = if v6 { 129 } else { 0 };
    icmp.len() >= 8 && icmp[0] == want && icmp[1] == 0 && icmp[4..6] == id.to_be_bytes()
}

fn sockaddr(a: IpAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match a {
        IpAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: 0,
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write(std::ptr::from_mut(&mut ss).cast(), sin) };
            size_of::<libc::sockaddr_in>()
        }
        IpAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: 0,
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.octets(),
                },
                sin6_scope_id: 0,
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write(std::ptr::from_mut(&mut ss).cast(), sin6) };
            size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

/// The address a received packet came from.
fn source(ss: &libc::sockaddr_storage) -> Option<IpAddr> {
    match i32::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: the kernel wrote a sockaddr_in (its family says so).
            let sin: libc::sockaddr_in = unsafe { std::ptr::read(std::ptr::from_ref(ss).cast()) };
            Some(IpAddr::from(sin.sin_addr.s_addr.to_ne_bytes()))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, a sockaddr_in6.
            let sin6: libc::sockaddr_in6 = unsafe { std::ptr::read(std::ptr::from_ref(ss).cast()) };
            Some(IpAddr::from(sin6.sin6_addr.s6_addr))
        }
        _ => None,
    }
}

/// An ICMP echo to `a` on a raw socket; the time to its reply, `None` without one within
/// `timeout`.
pub fn echo(a: IpAddr, timeout: Duration) -> io::Result<Option<Duration>> {
    let v6 = a.is_ipv6();
    let (domain, proto) = if v6 {
        (libc::AF_INET6, libc::IPPROTO_ICMPV6)
    } else {
        (libc::AF_INET, libc::IPPROTO_ICMP)
    };
    // SAFETY: socket(2) with constant arguments.
    let fd = unsafe { libc::socket(domain, libc::SOCK_RAW | libc::SOCK_CLOEXEC, proto) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor just made, owned from here on.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let id = NEXT_ID
        .fetch_add(1, Ordering::Relaxed)
        .wrapping_add(std::process::id() as u16);
    let req = echo_request(v6, id);
    let (to, to_len) = sockaddr(a);
    let t0 = Instant::now();
    // SAFETY: sendto reads `req` and the address of the lengths given.
    let sent = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            req.as_ptr().cast(),
            req.len(),
            0,
            std::ptr::from_ref(&to).cast(),
            to_len,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let deadline = t0 + timeout;
    let mut buf = [0u8; 1500];
    // Bounded by the deadline: each wait is at most what is left of it.
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = i32::try_from(left.as_millis().max(1)).unwrap_or(i32::MAX);
        // SAFETY: poll on one pollfd that lives across the call.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            continue;
        }
        // SAFETY: all-zero is a valid sockaddr_storage.
        let mut from: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut from_len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: recvfrom writes at most the lengths given into `buf` and `from`.
        let got = unsafe {
            libc::recvfrom(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
                std::ptr::from_mut(&mut from).cast(),
                &mut from_len,
            )
        };
        let Ok(got) = usize::try_from(got) else {
            continue;
        };
        if source(&from) == Some(a) && is_reply(&buf[..got], v6, id) {
            return Ok(Some(t0.elapsed()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(prefix: &str, address: &str) -> ProbeTarget {
        ProbeTarget {
            prefix: prefix.parse().unwrap(),
            address: address.parse().unwrap(),
        }
    }

    #[test]
    fn the_bucket_holds_its_rate_over_a_simulated_minute() {
        let t0 = Instant::now();
        let mut l = Limiter::new(10.0, t0);
        // Asked every millisecond for 60 s: 600 tokens and the first.
        let mut taken = 0;
        for ms in 0..60_000u64 {
            if l.take(t0 + Duration::from_millis(ms)).is_ok() {
                taken += 1;
            }
        }
        assert!((600..=601).contains(&taken), "{taken}");
        // Idle for a minute, it saves up one burst (1 token at 10/s), not a minute's.
        let later = t0 + Duration::from_secs(120);
        assert!(l.take(later).is_ok());
        let wait = l.take(later).unwrap_err();
        assert!(
            wait > Duration::from_millis(90) && wait <= Duration::from_millis(100),
            "{wait:?}"
        );
    }

    #[test]
    fn a_fast_bucket_saves_a_tenth_of_a_second() {
        let t0 = Instant::now();
        let mut l = Limiter::new(1000.0, t0);
        let later = t0 + Duration::from_secs(5);
        let burst = (0..1000).take_while(|_| l.take(later).is_ok()).count();
        assert_eq!(burst, 100);
    }

    #[test]
    fn the_queue_takes_each_address_once_and_refuses_past_its_bounds() {
        let lab: Vec<IpNet> = [
            "192.0.2.0/24",
            "198.51.100.0/24",
            "203.0.113.0/24",
            "2001:db8::/32",
        ]
        .iter()
        .map(|p| p.parse().unwrap())
        .collect();
        let mut q = Queue::new(3, lab.clone());
        let a = q.offer(&[
            target("192.0.2.0/24", "192.0.2.1"),
            target("192.0.2.0/24", "192.0.2.1"),
            target("192.0.2.0/24", "198.51.100.1"),
            target("127.0.0.0/24", "127.0.0.1"),
            target("0.0.0.0/0", "0.0.0.0"),
            target("203.0.113.0/24", "203.0.113.1"),
            target("2001:db8::/48", "2001:db8::1"),
            target("2001:db8:1::/48", "2001:db8:1::1"),
        ]);
        assert_eq!(
            (a.accepted, a.duplicate, a.refused, a.queued),
            (3, 1, 4, 3),
            "{a:?}"
        );
        assert_eq!(
            (
                a.refused_outside,
                a.refused_not_global,
                a.refused_not_unit,
                a.refused_bound
            ),
            (1, 1, 1, 1),
            "{a:?}"
        );
        let first = q.pop().unwrap();
        assert_eq!(first, "192.0.2.1".parse::<IpAddr>().unwrap());
        // Under way, it is still not taken twice; done, it may be asked again.
        assert_eq!(q.offer(&[target("192.0.2.0/24", "192.0.2.1")]).duplicate, 1);
        q.done(&first);
        assert_eq!(q.offer(&[target("192.0.2.0/24", "192.0.2.1")]).accepted, 1);
        let many: Vec<ProbeTarget> = (0..MAX_REQUEST + 10)
            .map(|i| {
                target(
                    &format!("198.51.{}.0/24", i / 250),
                    &format!("198.51.{}.{}", i / 250, i % 250 + 1),
                )
            })
            .collect();
        let mut big = Queue::new(10_000, vec!["198.51.0.0/16".parse().unwrap()]);
        let a = big.offer(&many);
        assert_eq!(
            (a.accepted, a.refused, a.refused_bound),
            (MAX_REQUEST, 10, 10)
        );
        // Without the lab's override the documentation ranges are not probed.
        let mut strict = Queue::new(10, Vec::new());
        let a = strict.offer(&[target("192.0.2.0/24", "192.0.2.1")]);
        assert_eq!((a.accepted, a.refused_not_global), (0, 1));
    }

    #[test]
    fn echo_packets_are_built_and_matched() {
        let p = echo_request(false, 0x1234);
        assert_eq!(p[0], 8);
        // A correct checksum sums to all ones.
        assert_eq!(
            director_common::checksum::fold(director_common::checksum::sum_bytes(&p)),
            0xffff
        );
        let mut reply = vec![0x45u8; 1];
        reply.extend_from_slice(&[0; 19]);
        reply.extend_from_slice(&[0, 0, 0, 0, 0x12, 0x34, 0, 1]);
        assert!(is_reply(&reply, false, 0x1234));
        assert!(!is_reply(&reply, false, 0x1235));
        reply[20] = 8;
        assert!(!is_reply(&reply, false, 0x1234), "a request is no reply");
        assert!(is_reply(&[129, 0, 0, 0, 0, 7, 0, 1], true, 7));
        assert!(!is_reply(&[129, 0, 0], true, 7));
    }

    #[test]
    fn probes_count_for_their_hosts_slash24_or_slash48() {
        assert_eq!(
            prefix_of("203.0.113.77".parse().unwrap()).to_string(),
            "203.0.113.0/24"
        );
        assert_eq!(
            prefix_of("2001:db8:5:6::1".parse().unwrap()).to_string(),
            "2001:db8:5::/48"
        );
    }

    #[test]
    fn a_closed_port_on_loopback_answers_with_a_reset_at_once() {
        // Nothing listens on a port just released: the RST is the answer (real sockets).
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let got = syn(
            SocketAddr::from(([127, 0, 0, 1], port)),
            Duration::from_millis(500),
        );
        assert!(
            got.is_some_and(|(d, how)| d < Duration::from_millis(100)
                && how == Method::Reset(port)),
            "{got:?}"
        );
        // A listener: the SYN-ACK.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let to = l.local_addr().unwrap();
        let got = syn(to, Duration::from_millis(500));
        assert_eq!(got.map(|g| g.1), Some(Method::SynAck(to.port())));
    }
}
