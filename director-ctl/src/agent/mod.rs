//! `director-ctl agent`: RTT at a site. The sock_ops program (`kernel::rtt`) takes the
//! handshake RTT of every connection the site's servers accept, or the tc program that of
//! every handshake passing the interfaces of a host between them and the clients
//! (`--observe`); this loop drains its map every `--drain-ms`, adds the samples to
//! per-prefix windows ([`window`]) and publishes each prefix's last complete window at
//! `GET /rtt` ([`http`]), which the controller polls, and with `--store` into a fleet's
//! store ([`store`]). The controller may also ask for active probes of prefixes without
//! handshakes ([`probe`]). One log line per window. SIGINT/SIGTERM detach and end it.

pub mod http;
pub mod probe;
pub mod scope;
pub mod store;
pub mod window;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::controller::run::{install_signals, stopping};
use crate::kernel::rtt::{cgroup2_root, HandshakeRtt, Watch};
use window::{now_ms, Windows};

/// How long a drain waits after flipping the generation before it reads the old one: a
/// program run that read the old generation ends within microseconds.
const GRACE: Duration = Duration::from_millis(10);

pub struct Options {
    pub site: String,
    /// The cgroup v2 directory whose sockets (and its descendants') are measured; `None`:
    /// the cgroup2 root (every socket of the host).
    pub cgroup: Option<PathBuf>,
    /// Interfaces whose passing handshakes are measured instead (tc); empty: the cgroup.
    pub observe: Vec<String>,
    /// With `observe`: handshakes waiting for their ACK at once.
    pub max_pending: u32,
    pub listen: SocketAddr,
    pub window_s: u64,
    pub drain_ms: u64,
    pub min_samples: u64,
    pub max_prefixes: u32,
    /// A prefix's record is dropped once its window ended this long ago.
    pub retain_s: u64,
    /// A fleet's store the report is also written into (`--store`).
    pub store: Option<store::Target>,
    /// Active probes: targets per second (0: `POST /probe` is refused) and each try's wait.
    pub probe_rate: f64,
    pub probe_timeout_ms: u64,
    /// `--probe-allow`: special-purpose prefixes a lab may probe all the same.
    pub probe_allow: Vec<ipnet::IpNet>,
    /// `--web-config`: TLS and credentials for the listener.
    pub web: crate::web::WebConfig,
}

/// Targets waiting to be probed at most (a minute at a high rate; the controller asks
/// again for what was refused).
const PROBE_QUEUE: usize = 4096;

fn check(o: &Options) -> Result<()> {
    if o.site.is_empty() || o.site.contains(char::is_whitespace) {
        bail!("--site {:?}: a name without spaces", o.site);
    }
    if o.window_s == 0 {
        bail!("--window-s: at least 1");
    }
    if o.drain_ms < 50 || o.drain_ms > o.window_s * 1000 {
        bail!(
            "--drain-ms {}: from 50 to the window ({} ms)",
            o.drain_ms,
            o.window_s * 1000
        );
    }
    if o.max_prefixes < 16 {
        bail!("--max-prefixes {}: at least 16", o.max_prefixes);
    }
    if o.max_pending < 16 {
        bail!("--max-pending {}: at least 16", o.max_pending);
    }
    if o.cgroup.is_some() && !o.observe.is_empty() {
        bail!("--cgroup and --observe: one or the other");
    }
    if let Some(dup) = o
        .observe
        .iter()
        .enumerate()
        .find(|(i, n)| o.observe[..*i].contains(n))
    {
        bail!("--observe {}: given twice", dup.1);
    }
    Ok(())
}

pub fn run(o: &Options) -> Result<()> {
    check(o)?;
    let guard = crate::web::Guard::new(&o.web).context("--web-config")?;
    http::exposed(o.listen, &guard)?;
    let watch = if !o.observe.is_empty() {
        Watch::Interfaces {
            names: o.observe.clone(),
            pending: o.max_pending,
        }
    } else {
        Watch::Cgroup(match &o.cgroup {
            Some(c) => c.clone(),
            None => cgroup2_root()?,
        })
    };
    install_signals();
    let mut handshakes = HandshakeRtt::attach(&watch, o.max_prefixes)?;
    let writer = match &o.store {
        Some(t) => Some(store::Writer::start(t.clone(), &o.site, o.window_s)?),
        None => None,
    };
    let shared = http::empty(&o.site, o.window_s);
    let prober = if o.probe_rate > 0.0 {
        let p = probe::Options {
            rate: o.probe_rate,
            timeout: Duration::from_millis(o.probe_timeout_ms),
            queue: PROBE_QUEUE,
            allow: o.probe_allow.clone(),
        };
        Some(probe::Prober::start(&p, stopping).context("starting the prober")?)
    } else {
        None
    };
    http::serve(o.listen, shared.clone(), prober.clone(), Arc::clone(&guard))?;
    eprintln!(
        "director-ctl agent: site {}: measuring {watch}; GET {}://{}/rtt{}",
        o.site,
        guard.scheme(),
        o.listen,
        if guard.authenticates() {
            " (credentials required)"
        } else {
            ""
        }
    );
    let mut windows = Windows::new(
        o.window_s * 1000,
        now_ms(),
        o.min_samples,
        o.retain_s * 1000,
    );
    let drain = Duration::from_millis(o.drain_ms);
    let mut counters = crate::api::RttCounters::default();
    let mut next_drain = Instant::now() + drain;
    while !stopping() {
        // The next drain: at its interval, or at the window's end if that comes first, so
        // that every sample is counted in the window it was taken in (to within the grace).
        let until_end = Duration::from_millis(windows.end_ms().saturating_sub(now_ms()));
        let due = next_drain.min(Instant::now() + until_end);
        if !sleep_until(due) {
            break;
        }
        next_drain = Instant::now() + drain;
        let d = handshakes.drain(GRACE).context("draining DIR_RTT")?;
        for (prefix, h) in &d.prefixes {
            windows.add(*prefix, h);
        }
        counters.samples = d.counted.samples;
        counters.no_rtt = d.counted.no_rtt;
        counters.no_entry = d.counted.no_entry;
        counters.syn_acks = d.counted.syn_acks;
        counters.lost += d.lost;
        counters.unauthorized = guard.refused.unauthorized.load(Ordering::Relaxed);
        counters.handshakes_refused = guard.refused.handshakes.load(Ordering::Relaxed);
        if let Some(p) = &prober {
            for r in p.take() {
                windows.add_probe(r.prefix, r.rtt_us);
            }
            p.count(&mut counters);
        }
        let now = now_ms();
        if now < windows.end_ms() {
            continue;
        }
        let c = windows.close(now);
        counters.windows += 1;
        eprintln!(
            "director-ctl agent: site {}: window {}..{}: {} samples, {} prefixes ({} reported), \
             {} lost, {} without rtt, {} probed",
            o.site,
            c.start_ms,
            c.end_ms,
            c.samples,
            c.prefixes,
            c.reported,
            counters.lost,
            counters.no_rtt,
            c.probed
        );
        let mut doc = shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        doc.records = windows.records();
        doc.counters = counters;
        if let Some(w) = &writer {
            w.window(&doc);
        }
    }
    drop(handshakes);
    // Its lease revoked: the store drops its records now rather than a few windows later.
    drop(writer);
    eprintln!(
        "director-ctl agent: site {}: stopped; detached ({watch})",
        o.site
    );
    Ok(())
}

/// Sleeps until `due` in short steps; false if a signal asked to stop meanwhile.
fn sleep_until(due: Instant) -> bool {
    loop {
        if stopping() {
            return false;
        }
        let now = Instant::now();
        if now >= due {
            return true;
        }
        std::thread::sleep((due - now).min(Duration::from_millis(100)));
    }
}
