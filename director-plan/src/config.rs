//! What the planner needs of the config: where the data is, the sites, and each server's
//! and service's sort settings. director-ctl reads the file (every key in one place, its
//! `controller::config`, documented in docs/config.md) and hands this over. The sections
//! that are wholly the planner's (`[[site]]`, `[geo]`, `[rtt]`) are these types as the file
//! spells them; servers and services carry more than the sort needs, so director-ctl
//! copies the sort's part of each into [`Server`] and [`Service`].
//!
//! [`Config::validate`] checks what the planner relies on (names it can look up, policies
//! it can sort by); every error names the entry and the reason.

use std::{
    collections::{BTreeMap, HashSet},
    net::{IpAddr, SocketAddr},
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};
use director_common::select::Mode;
use ipnet::IpNet;
use serde::Deserialize;

use crate::engine::{Metric, Policy};

#[derive(Debug, Deserialize, Default, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Geo {
    /// MaxMind City schema, or a "flat" lat/lon database.
    pub database: Option<PathBuf>,
    /// `prefix,lat,lon` or `prefix,location` lines that win over the database.
    pub locations: Option<PathBuf>,
    /// A weighted directed location graph: geo becomes the shortest-path distance.
    pub graph: Option<PathBuf>,
}

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Site {
    pub name: String,
    pub lat: Option<f64>,
    pub lon: Option<f64>,
    /// The site's node in the location graph (default: its name).
    pub location: Option<String>,
    /// MRT RIB dumps and/or update files: this site's view of the Internet.
    #[serde(default)]
    pub bgp: Vec<PathBuf>,
    /// Which peer of a multi-peer RIB is this site's view (address or AS).
    pub bgp_peer: Option<String>,
    /// IGP cost from the site to BGP next hops (the `int` metric).
    #[serde(default)]
    pub igp_cost: BTreeMap<String, u32>,
    /// The site's own AS, for `med` (default: the AS of the BGP peer its routes come from).
    pub asn: Option<u32>,
    /// Live BGP: the router whose BMP session is this site's view (its address, or the
    /// sysName it sends); its routes win over `bgp` files for the prefixes it has.
    pub bmp_router: Option<String>,
    /// Which of that router's peers (address or AS); default: every peer, best route wins.
    pub bmp_peer: Option<String>,
    /// Which of the router's RIBs: "pre", "post" or "loc-rib"; default: what it sends
    /// (Loc-RIB, else post-policy, else pre-policy).
    pub bmp_policy: Option<String>,
    /// Answers plus new flows per second the site takes (default: the sum of its
    /// servers' `capacity`, if they all have one). Capacity spill reads it; the sort
    /// does not.
    pub capacity: Option<f64>,
}

/// Live BGP from the sites' routers (BMP, RFC 7854).
#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Bgp {
    /// Where routers' BMP sessions come in (TCP).
    pub bmp_listen: Option<SocketAddr>,
    /// Seconds a lost session's routes still count before they are removed.
    #[serde(default = "Bgp::default_hold")]
    pub hold: u64,
    /// Seconds without route messages after which a router that sends no End-of-RIB
    /// (GoBGP) counts as synced.
    #[serde(default = "Bgp::default_quiet")]
    pub quiet: u64,
    /// Routers (addresses or prefixes) whose BMP sessions are taken; any other is closed
    /// before its first message is read. Default: the sites' `bmp_router` addresses.
    #[serde(default, deserialize_with = "nets")]
    pub bmp_allow: Vec<IpNet>,
    /// BMP sessions at once at most; past it a new router's session is closed.
    #[serde(default = "Bgp::default_max_sessions")]
    pub bmp_max_sessions: usize,
}

/// Addresses or prefixes: an address alone is its /32 or /128.
fn nets<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Vec<IpNet>, D::Error> {
    let texts = Vec::<String>::deserialize(d)?;
    texts
        .iter()
        .map(|t| {
            t.parse::<IpNet>()
                .map(|n| n.trunc())
                .or_else(|_| t.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| serde::de::Error::custom(format!("{t:?} is not an address or prefix")))
        })
        .collect()
}

impl Bgp {
    fn default_hold() -> u64 {
        300
    }
    fn default_quiet() -> u64 {
        5
    }
    fn default_max_sessions() -> usize {
        64
    }

    /// The routers whose sessions are taken: `bmp_allow`, else every site's `bmp_router`
    /// when each is an address. A site naming its router by sysName (known only once the
    /// session is open) leaves no address to allow: then `bmp_allow` must be given.
    pub fn allowed(&self, sites: &[Site]) -> Result<Vec<IpNet>> {
        if !self.bmp_allow.is_empty() {
            return Ok(self.bmp_allow.clone());
        }
        let mut nets = Vec::new();
        for s in sites {
            let Some(r) = &s.bmp_router else { continue };
            match r.parse::<IpAddr>() {
                Ok(a) => nets.push(IpNet::from(a.to_canonical())),
                Err(_) => bail!(
                    "[bgp]: set bmp_allow (the routers' addresses or prefixes): site {:?} \
                     names its bmp_router {r:?} by name, so its address is not known",
                    s.name
                ),
            }
        }
        if nets.is_empty() {
            bail!(
                "[bgp]: set bmp_allow (the routers' addresses or prefixes): bmp_listen takes \
                 sessions only from the routers it lists, or from the sites' bmp_router \
                 addresses, and no site names one"
            );
        }
        Ok(nets)
    }
}

impl Default for Bgp {
    fn default() -> Self {
        Bgp {
            bmp_listen: None,
            hold: Bgp::default_hold(),
            quiet: Bgp::default_quiet(),
            bmp_allow: Vec::new(),
            bmp_max_sessions: Bgp::default_max_sessions(),
        }
    }
}

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Rtt {
    #[serde(default)]
    pub files: Vec<PathBuf>,
    /// RTT agents at the sites (`director-ctl agent`): their `http://host:port/rtt` URLs.
    #[serde(default)]
    pub agents: Vec<String>,
    /// In a fleet: the agents' reports are read from the fleet's store, where they write
    /// them (`director-ctl agent --store`), at every poll, beside any `agents` polled.
    #[serde(default)]
    pub from_store: bool,
    /// Seconds between polls of each agent.
    #[serde(default = "Rtt::default_poll")]
    pub poll: f64,
    /// A window with fewer handshakes than this is ignored.
    #[serde(default = "Rtt::default_min_samples")]
    pub min_samples: u64,
    /// Seconds without a usable window after which an agent's measurement expires (then a
    /// file's, or the next metric, applies).
    #[serde(default = "Rtt::default_expire")]
    pub expire: u64,
    /// At most this many client prefixes with demand but without a live measurement at
    /// every site are asked of the agents per poll, to probe actively; 0: none.
    #[serde(default)]
    pub probe: usize,
    /// `prefix,address` lines: the host to probe for a prefix (else its first host).
    #[serde(default)]
    pub probe_targets: Option<PathBuf>,
    /// CA certificates (PEM) the `https://` agents' certificates are verified against.
    #[serde(default)]
    pub agent_ca: Option<PathBuf>,
    /// This controller's client certificate and key (PEM) for agents that require one.
    #[serde(default)]
    pub agent_cert: Option<PathBuf>,
    #[serde(default)]
    pub agent_key: Option<PathBuf>,
    /// A file whose first line is the bearer token the agents take (sent only over TLS).
    #[serde(default)]
    pub agent_token_file: Option<PathBuf>,
}

/// The most prefixes `[rtt] probe` may ask of the agents per poll (an agent takes at most
/// this many per request).
pub const MAX_PROBE: usize = 256;

impl Rtt {
    fn default_poll() -> f64 {
        2.0
    }
    fn default_min_samples() -> u64 {
        5
    }
    fn default_expire() -> u64 {
        120
    }
}

impl Default for Rtt {
    fn default() -> Self {
        Rtt {
            files: Vec::new(),
            agents: Vec::new(),
            from_store: false,
            poll: Rtt::default_poll(),
            min_samples: Rtt::default_min_samples(),
            expire: Rtt::default_expire(),
            probe: 0,
            probe_targets: None,
            agent_ca: None,
            agent_cert: None,
            agent_key: None,
            agent_token_file: None,
        }
    }
}

/// A server as the sort sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Server {
    pub name: String,
    pub site: String,
    /// Administrative cost, lower wins (`admin`).
    pub preference: u32,
    /// Share of answers among equals when a service sorts by `portion`.
    pub portion: u16,
    /// Distance from the server to its site's border (`ser`).
    pub agent_distance: u32,
}

/// A service as the sort sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Service {
    pub name: String,
    pub servers: Vec<String>,
    /// Metric priorities and weights; with neither, the config's defaults apply.
    pub priority: BTreeMap<String, u32>,
    pub weights: BTreeMap<String, f64>,
    /// Percent (0 to 100): servers within it of the lowest RTT count as equal.
    pub rtt_tolerance: u32,
    /// DistributedDirector's MED step before the sort.
    pub med: bool,
    /// What picks among the final equals: see [`Service::select_mode`].
    pub select: Option<Mode>,
    /// Per server of this service: its `admin` preference here, instead of the server's.
    pub admin: BTreeMap<String, u32>,
    /// Per server of this service: its portion here, or "auto".
    pub portion: Portions,
}

/// A service's `portion`: a table of server = portion, or `"auto"`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Portions {
    pub each: BTreeMap<String, u16>,
    pub auto: bool,
}

impl<'de> Deserialize<'de> for Portions {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Word(String),
            Each(BTreeMap<String, u16>),
        }
        match Raw::deserialize(d)? {
            Raw::Word(w) if w == "auto" => Ok(Portions {
                each: BTreeMap::new(),
                auto: true,
            }),
            Raw::Word(w) => Err(serde::de::Error::custom(format!(
                "portion {w:?}: give \"auto\" or a table of server = portion"
            ))),
            Raw::Each(each) => Ok(Portions { each, auto: false }),
        }
    }
}

/// An auto portion's target for a load under `threshold`: the headroom left, in percent
/// (1 to 100; an overloaded server gets no new clients anyway).
pub fn auto_portion_target(load: f64, threshold: f64) -> u16 {
    (100.0 * (threshold - load) / threshold)
        .round()
        .clamp(1.0, 100.0) as u16
}

/// Where an auto portion starts before any load is read, and how far it moves per reading.
pub const AUTO_PORTION_START: u16 = 50;
pub const AUTO_PORTION_STEP: u16 = 20;

impl Service {
    /// The service's sort policy: its own priorities and weights, or the config's defaults
    /// when it gives neither (DistributedDirector's `default-weights`, `default-priority`).
    pub fn policy(&self, cfg: &Config) -> Result<Policy> {
        let (prio, weights) = if self.priority.is_empty() && self.weights.is_empty() {
            (&cfg.default_priority, &cfg.default_weights)
        } else {
            (&self.priority, &self.weights)
        };
        policy_of(prio, weights, self.rtt_tolerance, self.med)
    }

    /// How the kernel picks among the final equals. With `random` ending the sort: a
    /// uniform draw per query (`select` may only say "random"). With `portion`: a draw by
    /// portion, per query by default, or keyed by the client or the name when `select`
    /// says so. Without a draw the answer must not change from query to query
    /// (DistributedDirector: a tie without the random metric is no random pick): a hash of
    /// the client's address by default, or of the name; `select = "random"` is refused.
    pub fn select_mode(&self, policy: &Policy) -> Result<Mode> {
        match (policy.draw(), self.select) {
            (Some(Metric::Random), None | Some(Mode::Random)) => Ok(Mode::Random),
            (Some(Metric::Random), Some(m)) => bail!(
                "select = {:?} contradicts the random metric, which draws per query: drop \
                 select or random",
                m.name()
            ),
            (Some(_), m) => Ok(m.unwrap_or(Mode::Random)),
            (None, None) => Ok(Mode::Client),
            (None, Some(Mode::Random)) => bail!(
                "select = \"random\" without the random (or portion) metric: \
                 DistributedDirector answers a tie deterministically unless the sort ends in \
                 random; add random to priority (e.g. after the last metric) or drop select"
            ),
            (None, Some(m)) => Ok(m),
        }
    }
}

/// Everything the planner reads: the sites, servers and services, and the input files.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Config {
    pub geo: Geo,
    pub sites: Vec<Site>,
    pub servers: Vec<Server>,
    pub services: Vec<Service>,
    pub rtt: Rtt,
    pub bgp: Bgp,
    /// Weights and priorities for services that give neither (DistributedDirector's
    /// `default-weights` and `default-priority`).
    pub default_weights: BTreeMap<String, f64>,
    pub default_priority: BTreeMap<String, u32>,
    /// The file it came from (for messages); its paths are already resolved against it.
    pub path: PathBuf,
}

impl Config {
    /// Resolves the input paths (relative to the config file's directory `dir`).
    pub fn resolve_paths(&mut self, dir: &Path) {
        let fix = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = dir.join(&*p);
            }
        };
        for p in [
            &mut self.geo.database,
            &mut self.geo.locations,
            &mut self.geo.graph,
        ]
        .into_iter()
        .flatten()
        {
            fix(p);
        }
        for s in &mut self.sites {
            s.bgp.iter_mut().for_each(fix);
        }
        self.rtt.files.iter_mut().for_each(fix);
        self.rtt.probe_targets.iter_mut().for_each(fix);
        for p in [
            &mut self.rtt.agent_ca,
            &mut self.rtt.agent_cert,
            &mut self.rtt.agent_key,
            &mut self.rtt.agent_token_file,
        ]
        .into_iter()
        .flatten()
        {
            fix(p);
        }
    }

    /// Every data file the config reads (after [`Config::resolve_paths`]).
    pub fn data_files(&self) -> std::collections::BTreeSet<PathBuf> {
        let geo = [&self.geo.database, &self.geo.locations, &self.geo.graph];
        geo.into_iter()
            .flatten()
            .chain(self.sites.iter().flat_map(|s| &s.bgp))
            .chain(&self.rtt.files)
            .chain(&self.rtt.probe_targets)
            .cloned()
            .collect()
    }

    /// What the planner relies on: unique site and server names, servers at known sites,
    /// services of known servers, per-service tables naming only the service's servers,
    /// and policies and select modes it can sort by.
    pub fn validate(&self) -> Result<()> {
        let mut sites = HashSet::new();
        for (i, s) in self.sites.iter().enumerate() {
            let at = || format!("[[site]] #{} ({:?})", i + 1, s.name);
            if s.name.is_empty() || !sites.insert(s.name.as_str()) {
                bail!("{}: site names must be unique and not empty", at());
            }
            match (s.lat, s.lon) {
                (Some(lat), Some(lon))
                    if !(-90.0..=90.0).contains(&lat) || !(-180.0..=180.0).contains(&lon) =>
                {
                    bail!("{}: lat/lon {lat},{lon} out of range", at())
                }
                (Some(_), None) | (None, Some(_)) => {
                    bail!("{}: give both lat and lon, or neither", at())
                }
                _ => {}
            }
            for hop in s.igp_cost.keys() {
                if hop.parse::<IpAddr>().is_err() {
                    bail!("{}: igp_cost key {hop:?} is not an IP address", at());
                }
            }
            if s.bmp_router.is_some() && self.bgp.bmp_listen.is_none() {
                bail!("{}: bmp_router needs [bgp] bmp_listen", at());
            }
            if s.bmp_router.is_none() && (s.bmp_peer.is_some() || s.bmp_policy.is_some()) {
                bail!("{}: bmp_peer and bmp_policy need bmp_router", at());
            }
            if let Some(p) = &s.bmp_peer {
                p.parse::<crate::inputs::mrt::PeerSelector>()
                    .with_context(|| format!("{}: bmp_peer", at()))?;
            }
            if let Some(p) = &s.bmp_policy {
                if !["pre", "post", "loc-rib"].contains(&p.as_str()) {
                    bail!(
                        "{}: bmp_policy {p:?} is not \"pre\", \"post\" or \"loc-rib\"",
                        at()
                    );
                }
            }
        }
        if self.bgp.hold == 0 || self.bgp.quiet == 0 {
            bail!("[bgp]: hold and quiet are seconds above 0");
        }
        for url in &self.rtt.agents {
            agent_url(url).with_context(|| format!("[rtt] agents: {url:?}"))?;
            let tls = url.starts_with("https://");
            if tls && self.rtt.agent_ca.is_none() {
                bail!("[rtt] agents: {url:?} is https: give agent_ca to verify it by");
            }
            if !tls && self.rtt.agent_token_file.is_some() {
                bail!(
                    "[rtt] agents: {url:?} is plain http, and agent_token_file is set: a token \
                     is sent only over TLS (https://)"
                );
            }
        }
        if self.rtt.agent_cert.is_some() != self.rtt.agent_key.is_some() {
            bail!("[rtt]: agent_cert and agent_key go together");
        }
        if self.bgp.bmp_listen.is_some() {
            self.bgp.allowed(&self.sites)?;
            if self.bgp.bmp_max_sessions == 0 {
                bail!("[bgp]: bmp_max_sessions is at least 1");
            }
        }
        if !(self.rtt.poll >= 0.1 && self.rtt.poll <= 3600.0) {
            bail!(
                "[rtt]: poll {} is not from 0.1 to 3600 seconds",
                self.rtt.poll
            );
        }
        if self.rtt.probe > MAX_PROBE {
            bail!(
                "[rtt]: probe {} is more than {MAX_PROBE} prefixes per poll",
                self.rtt.probe
            );
        }
        if self.rtt.expire == 0 {
            bail!("[rtt]: expire is seconds above 0");
        }
        let mut servers = HashSet::new();
        for (i, s) in self.servers.iter().enumerate() {
            let at = || format!("[[server]] #{} ({:?})", i + 1, s.name);
            if !servers.insert(s.name.as_str()) {
                bail!("{}: a server of that name is already defined", at());
            }
            if !sites.contains(s.site.as_str()) {
                bail!("{}: unknown site {:?}", at(), s.site);
            }
        }
        if !(self.default_priority.is_empty() && self.default_weights.is_empty()) {
            policy_of(&self.default_priority, &self.default_weights, 10, false)
                .context("default_priority and default_weights")?;
        }
        for (i, s) in self.services.iter().enumerate() {
            let at = || format!("[[service]] #{} ({:?})", i + 1, s.name);
            if s.servers.is_empty() {
                bail!("{}: lists no servers", at());
            }
            for n in &s.servers {
                if !servers.contains(n.as_str()) {
                    bail!("{}: unknown server {n:?}", at());
                }
            }
            for (what, names) in [
                ("admin", s.admin.keys().collect::<Vec<_>>()),
                ("portion", s.portion.each.keys().collect()),
            ] {
                for n in names {
                    if !s.servers.contains(n) {
                        bail!(
                            "{}: {what} names {n:?}, which is not one of its servers",
                            at()
                        );
                    }
                }
            }
            let policy = s.policy(self).with_context(at)?;
            s.select_mode(&policy).with_context(at)?;
        }
        Ok(())
    }
}

/// An agent's URL split into its address and path: only `http://IP:PORT/PATH`, since
/// agents are reached on the sites' own networks and a name would need a resolver here.
pub fn agent_url(url: &str) -> Result<(SocketAddr, String)> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .context("give http://address:port/path (or https://)")?;
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/rtt"),
    };
    let addr = host
        .parse::<SocketAddr>()
        .with_context(|| format!("{host:?} is not address:port (IPv6 in brackets)"))?;
    Ok((addr, path.to_string()))
}

/// A policy from priority and weight tables as the config spells them (metric names).
pub fn policy_of(
    priority: &BTreeMap<String, u32>,
    weights: &BTreeMap<String, f64>,
    rtt_tolerance: u32,
    med: bool,
) -> Result<Policy> {
    let metric = |m: &String| m.parse::<Metric>().map_err(|e| anyhow::anyhow!("{e}"));
    let prio = priority
        .iter()
        .map(|(m, p)| Ok((metric(m)?, *p)))
        .collect::<Result<Vec<_>>>()?;
    let weights = weights
        .iter()
        .map(|(m, w)| Ok((metric(m)?, *w)))
        .collect::<Result<Vec<_>>>()?;
    Policy::new(&prio, &weights, rtt_tolerance, med).map_err(|e| anyhow::anyhow!(e))
}
