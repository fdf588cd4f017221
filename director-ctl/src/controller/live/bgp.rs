//! `run`'s side of the BMP collector: the listener (director-ctl's `bmp`), the collector
//! state it feeds (director-plan's `inputs::bmp`) and each site's view of it.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use director_plan::config::Config;
use director_plan::inputs::bmp::{Collector, RouterRef, RouterStatus, Settings, ViewSpec};
use director_plan::model::Route;
use ipnet::IpNet;

use super::wake::Wake;
use crate::api::Log;
use crate::bmp::{Admit, Listener};

pub struct Bgp {
    collector: Arc<Mutex<Collector>>,
    listener: Listener,
    /// Per site (config order): its view, if it has a `bmp_router`.
    views: Vec<Option<ViewSpec>>,
    started: Instant,
    hold: Duration,
    last_tick: Instant,
}

fn views(cfg: &Config) -> Result<Vec<Option<ViewSpec>>> {
    cfg.sites
        .iter()
        .map(|s| {
            s.bmp_router
                .as_deref()
                .map(|r| {
                    ViewSpec::parse(r, s.bmp_peer.as_deref(), s.bmp_policy.as_deref())
                        .with_context(|| format!("[[site]] {:?}", s.name))
                })
                .transpose()
        })
        .collect()
}

impl Bgp {
    /// Listens on `[bgp] bmp_listen`, if the config has it.
    pub fn start(cfg: &Config, log: Log, wake: Arc<Wake>) -> Result<Option<Bgp>> {
        let Some(addr) = cfg.bgp.bmp_listen else {
            return Ok(None);
        };
        let hold = Duration::from_secs(cfg.bgp.hold);
        let collector = Arc::new(Mutex::new(Collector::new(Settings {
            hold,
            quiet: Duration::from_secs(cfg.bgp.quiet),
        })));
        let admit = Admit {
            allow: cfg.bgp.allowed(&cfg.sites)?,
            max_sessions: cfg.bgp.bmp_max_sessions,
        };
        let listener = Listener::start(
            addr,
            admit,
            Arc::clone(&collector),
            move || wake.notify(),
            log,
        )
        .context("[bgp] bmp_listen")?;
        Ok(Some(Bgp {
            collector,
            listener,
            views: views(cfg)?,
            started: Instant::now(),
            hold,
            last_tick: Instant::now(),
        }))
    }

    fn collector(&self) -> MutexGuard<'_, Collector> {
        self.collector
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A reloaded config's views (the listener and the timers are the start's).
    pub fn reconfigure(&mut self, cfg: &Config) {
        match views(cfg) {
            Ok(v) => self.views = v,
            // The config was validated; a view it cannot give is left as it was.
            Err(e) => log::warn!("BMP views kept: {e:#}"),
        }
    }

    /// Every site's router has sent its table in its current session, or the hold time
    /// since `run` started has passed (a router that never comes is not waited for longer
    /// than its routes would have been kept).
    pub fn all_synced(&mut self, now: Instant) -> bool {
        if now.saturating_duration_since(self.started) >= self.hold {
            return true;
        }
        let status = self.collector().status(now);
        self.views
            .iter()
            .flatten()
            .all(|v| status.iter().any(|r| is(r, &v.router) && r.synced))
    }

    /// No connected router is in the middle of sending its table.
    pub fn settled(&self) -> bool {
        self.collector().all_synced()
    }

    /// Sessions refused since the start: (not allowed, past the cap).
    pub fn refused(&self) -> (u64, u64) {
        self.listener.refused()
    }

    /// Runs the collector's timers (about once a second).
    pub fn tick(&mut self, now: Instant) {
        if now.saturating_duration_since(self.last_tick) >= Duration::from_secs(1) {
            self.last_tick = now;
            self.listener.tick();
        }
    }

    /// Every site's router has lost every BGP peer it had (and had some), or the router
    /// itself is gone: then the sites' whole live tables would go at once.
    pub fn every_view_lost_its_peers(&self) -> bool {
        let status = self.status();
        let mut any = false;
        for v in self.views.iter().flatten() {
            any = true;
            let lost = status
                .iter()
                .filter(|r| is(r, &v.router))
                .all(|r| !r.peers.is_empty() && r.peers.iter().all(|p| !p.up));
            if !lost || !status.iter().any(|r| is(r, &v.router)) {
                return false;
            }
        }
        any
    }

    pub fn dirty(&self) -> bool {
        self.collector().dirty_len() > 0
    }

    pub fn take_dirty(&mut self) -> Vec<IpNet> {
        self.collector().take_dirty()
    }

    /// How many sites the config has (each with a view or not).
    pub fn sites(&self) -> usize {
        self.views.len()
    }

    pub fn has_view(&self, site: usize) -> bool {
        self.views.get(site).is_some_and(Option::is_some)
    }

    /// The site's live best route for each of `prefixes` (one look at the collector).
    pub fn best_of(&self, site: usize, prefixes: &[IpNet]) -> Vec<Option<Route>> {
        let Some(v) = self.views.get(site).and_then(Option::as_ref) else {
            return vec![None; prefixes.len()];
        };
        let c = self.collector();
        prefixes.iter().map(|p| c.best(v, p)).collect()
    }

    /// The site's whole live table.
    pub fn table(&self, site: usize) -> Vec<(IpNet, Route)> {
        match self.views.get(site).and_then(Option::as_ref) {
            Some(v) => self.collector().table(v),
            None => Vec::new(),
        }
    }

    /// Every router's state.
    pub fn status(&self) -> Vec<RouterStatus> {
        self.collector().status(Instant::now())
    }

    /// Routes held and bytes of memory they take (the RIBs and interned attributes).
    pub fn size(&self) -> (usize, usize) {
        let c = self.collector();
        (c.routes(), c.heap_bytes())
    }
}

fn is(r: &RouterStatus, want: &RouterRef) -> bool {
    match want {
        RouterRef::Addr(a) => r.address == *a,
        RouterRef::Name(n) => r.name.as_deref() == Some(n.as_str()),
    }
}
