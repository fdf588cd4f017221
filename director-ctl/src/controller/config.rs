//! The controller's config file (TOML), assembled from the parts each layer owns: the
//! planner's sites, inputs and sort settings (`director_plan::config`), the health checks'
//! (`health::config`), the redirector's (`redirect::config`), the zones (`dns::ZoneConfig`),
//! rate limits (`crate::rrl`) and the metrics listener (`metrics`). What only the controller
//! applies is its own: a server's addresses, a service's answers, fallback and VIPs, and
//! `[steer]`. Every key is documented in docs/config.md (a test keeps the two equal). Paths
//! are relative to the config file.
//!
//! Loading checks everything that can be checked without reading the data files: unknown
//! keys, duplicate names, references to unknown sites or servers, bad DNS names, metric
//! names, ranges. Each error names the file, the entry and the reason.

use std::{
    collections::{BTreeMap, HashSet},
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};
use director_common::maps::{MAX_CANDIDATES, MAX_SERVERS, MAX_SERVICES};
use director_common::select::Mode;
use director_common::steer::{default_mss, Forward};
use director_plan::config::{self as plan, Portions};
use serde::Deserialize;

use super::demand::config::DemandConfig;
use crate::health::config::{check_timing, Check, HealthDefaults, HttpUrl, LoadSource};
use crate::metrics::MetricsConfig;
use crate::redirect::config::{url_host, Http};
use crate::rrl;

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Server {
    pub name: String,
    pub site: String,
    pub ipv4: Option<Ipv4Addr>,
    pub ipv6: Option<Ipv6Addr>,
    /// Administrative cost, lower wins (`admin`).
    #[serde(default)]
    pub preference: u32,
    /// Share of answers among equals when a service sorts by `portion`; 0 (the default, as
    /// in DistributedDirector) is picked only while no usable equal has more.
    #[serde(default)]
    pub portion: u16,
    /// Distance from the server to its site's border (`ser`).
    #[serde(default)]
    pub agent_distance: u32,
    /// Where health checks connect (default: its ipv4, else its ipv6), for servers that
    /// answer checks on another address than clients use.
    pub check_address: Option<IpAddr>,
    /// Where the server publishes its load (polled at the `[health]` interval).
    pub load: Option<LoadSource>,
    /// The name HTTP redirects send clients to (DistributedDirector's `server-name`: the
    /// URL shows a name, not an address); without it, the address.
    pub hostname: Option<String>,
    /// Answers plus new flows per second it takes (capacity spill keeps its site under a
    /// share of the sum).
    pub capacity: Option<f64>,
}

impl Server {
    /// What the sort needs of it.
    fn plan(&self) -> plan::Server {
        plan::Server {
            name: self.name.clone(),
            site: self.site.clone(),
            preference: self.preference,
            portion: self.portion,
            agent_distance: self.agent_distance,
        }
    }
}

fn thirty() -> u32 {
    30
}
fn one_u8() -> u8 {
    1
}
fn ten() -> u32 {
    10
}

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Service {
    pub name: String,
    #[serde(default = "thirty")]
    pub ttl: u32,
    #[serde(default = "one_u8")]
    pub answers: u8,
    pub servers: Vec<String>,
    /// Metric priorities and weights; with neither, the top-level defaults apply.
    #[serde(default)]
    pub priority: BTreeMap<String, u32>,
    #[serde(default)]
    pub weights: BTreeMap<String, f64>,
    /// Percent (0 to 100): servers within it of the lowest RTT count as equal.
    #[serde(default = "ten")]
    pub rtt_tolerance: u32,
    /// DistributedDirector's MED step before the sort.
    #[serde(default)]
    pub med: bool,
    /// What picks among the final equals: see [`Service::select_mode`].
    pub select: Option<Mode>,
    /// Per server of this service: its `admin` preference here, instead of the server's.
    #[serde(default)]
    pub admin: BTreeMap<String, u32>,
    /// Per server of this service: its portion here, instead of the server's; or "auto":
    /// portions follow the servers' measured headroom under `load_threshold`.
    #[serde(default)]
    pub portion: Portions,
    /// How to tell whether a server serves this service; without it, only admin state.
    pub health: Option<Check>,
    /// When every server is down by its checks, answer with all of them (the default)
    /// rather than with none.
    #[serde(default = "yes")]
    pub fail_open: bool,
    /// Over this load a server gets no new clients for this service (the CDS service
    /// router's "next Service Engine in the list"), until it is under `load_resume`.
    pub load_threshold: Option<f64>,
    /// Default: 90 % of the threshold.
    pub load_resume: Option<f64>,
    /// When none of a client's servers can be answered: a CNAME to this domain (the CDS
    /// service router's alternate domain) ...
    pub alternate: Option<String>,
    /// ... else this address (one per family) ...
    #[serde(default)]
    pub origin: Vec<IpAddr>,
    /// ... with this TTL, also for fail-open answers. Default: the TTL, at most 10 s.
    pub degraded_ttl: Option<u32>,
    /// Response rate limiting: what it gives wins over `[rrl]`.
    pub rrl: Option<rrl::ServiceLimit>,
    /// Virtual IPs and ports ("203.0.113.80:443", "[2001:db8::80]:443"): new TCP
    /// connections to them go to the client's best server, their packets follow.
    #[serde(default)]
    pub vip: Vec<String>,
    /// How a VIP's packets reach the servers: "l2" (default) or "ipip".
    pub mode: Option<Forward>,
    /// SYNs to its VIPs get their MSS lowered to this; 0 leaves it. Default: what fits a
    /// 1500-byte path after the mode's header (ipip: 1440 for IPv4, 1400 for IPv6).
    pub mss: Option<u16>,
    /// Whether the name is answered in DNS too. Default: yes without VIPs; with VIPs
    /// the name only names the service (queries for it pass to the host).
    pub dns: Option<bool>,
    /// Servers that could serve it but do not hold it yet: each gets the demand's bonus
    /// and is copied to (a hook) when it crosses `[demand.replicas] threshold`. Listed
    /// with `servers` once the config is read; in answers only while a replica.
    #[serde(default)]
    pub replicas: Vec<String>,
}

impl Service {
    /// Its VIPs, parsed (checked when the config loaded).
    pub fn vips(&self) -> Vec<SocketAddr> {
        self.vip.iter().filter_map(|v| v.parse().ok()).collect()
    }

    pub fn forward(&self) -> Forward {
        self.mode.unwrap_or_default()
    }

    pub fn answers_dns(&self) -> bool {
        self.dns.unwrap_or(self.vip.is_empty())
    }

    /// The MSS clamp for its VIPs of one family.
    pub fn mss_for(&self, v6: bool) -> u16 {
        self.mss.unwrap_or(default_mss(self.forward(), v6))
    }

    pub fn degraded_ttl(&self) -> u32 {
        self.degraded_ttl.unwrap_or(self.ttl.min(10))
    }

    /// The load threshold and the level under which an overloaded server is back.
    pub fn load_limits(&self) -> Option<(f64, f64)> {
        self.load_threshold
            .map(|t| (t, self.load_resume.unwrap_or(t * 0.9)))
    }
}

fn yes() -> bool {
    true
}

impl Service {
    /// What the sort needs of it.
    fn plan(&self) -> plan::Service {
        plan::Service {
            name: self.name.clone(),
            servers: self.servers.clone(),
            priority: self.priority.clone(),
            weights: self.weights.clone(),
            rtt_tolerance: self.rtt_tolerance,
            med: self.med,
            select: self.select,
            admin: self.admin.clone(),
            portion: self.portion.clone(),
        }
    }
}

#[derive(Debug, Deserialize, Default, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Steer {
    /// `ipip` outer sources: each flow takes an address of this network (its low bits
    /// from the flow's hash), so the server's NIC spreads flows over its queues. The
    /// servers must accept it (rp_filter: a route to it back over the same interface).
    pub encap_source4: Option<ipnet::Ipv4Net>,
    /// As `encap_source4`; at most 32 bits vary (a prefix of /96 or longer).
    pub encap_source6: Option<ipnet::Ipv6Net>,
    /// The flood guard: new flow entries per second per CPU; past it packets are still
    /// steered (same choice) but not recorded. 0: no limit.
    #[serde(default)]
    pub flow_rate: u32,
    /// New entries at once after a quiet spell. Default: `flow_rate`.
    pub flow_burst: Option<u32>,
}

impl Steer {
    /// The outer source network for a family: (base address, bits from the flow).
    pub fn source(&self, v6: bool) -> Option<(IpAddr, u8)> {
        if v6 {
            self.encap_source6
                .map(|n| (IpAddr::V6(n.network()), 128 - n.prefix_len()))
        } else {
            self.encap_source4
                .map(|n| (IpAddr::V4(n.network()), 32 - n.prefix_len()))
        }
    }

    pub fn guard(&self) -> director_common::steer::GuardLimit {
        if self.flow_rate == 0 {
            return director_common::rrl::Limit::unlimited();
        }
        let burst = self.flow_burst.unwrap_or(self.flow_rate).max(1);
        director_common::rrl::Limit::new(self.flow_rate, burst, 0, 32, 128)
    }

    fn validate(&self) -> Result<()> {
        if let Some(n) = self.encap_source6 {
            if n.prefix_len() < 96 {
                bail!("[steer]: encap_source6 {n}: at most 32 bits can vary (use /96 or longer)");
            }
        }
        if self.flow_burst.is_some() && self.flow_rate == 0 {
            bail!("[steer]: flow_burst without flow_rate");
        }
        Ok(())
    }
}

/// Checks each service's `replicas` and lists them with its servers: from here on they
/// are its servers (ids, health checks, the sort), held out of its answers by `run`
/// until they hold it.
fn add_replicas(f: &mut File) -> Result<()> {
    for (i, s) in f.service.iter_mut().enumerate() {
        let at = || format!("[[service]] #{} ({:?})", i + 1, s.name);
        let mut seen = HashSet::new();
        for r in &s.replicas {
            if !f.server.iter().any(|sv| &sv.name == r) {
                bail!("{}: replicas: no [[server]] is named {r:?}", at());
            }
            if s.servers.contains(r) {
                bail!(
                    "{}: replicas: {r:?} already serves it (it is in servers)",
                    at()
                );
            }
            if !seen.insert(r) {
                bail!("{}: replicas: {r:?} is listed twice", at());
            }
        }
        if !s.replicas.is_empty() && s.health.is_none() {
            bail!(
                "{}: replicas need a health check: a replica gets clients only once its \
                 check passes, so that a failed copy never does",
                at()
            );
        }
        let extra = s.replicas.clone();
        s.servers.extend(extra);
    }
    Ok(())
}

/// The file as written: every section, in the order of the reference.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    geo: plan::Geo,
    #[serde(default)]
    site: Vec<plan::Site>,
    #[serde(default)]
    server: Vec<Server>,
    #[serde(default)]
    service: Vec<Service>,
    #[serde(default)]
    rtt: plan::Rtt,
    /// Live BGP over BMP.
    #[serde(default)]
    bgp: plan::Bgp,
    #[serde(default)]
    health: HealthDefaults,
    metrics: Option<MetricsConfig>,
    /// The map page.
    ui: Option<crate::ui::UiConfig>,
    /// TLS and credentials of the metrics and map page listeners.
    #[serde(default)]
    web: crate::web::WebConfig,
    /// Zones answered in full (SOA, NS, other types, TCP) by `run`'s own listeners.
    #[serde(default)]
    zone: Vec<crate::dns::ZoneConfig>,
    http: Option<Http>,
    /// Response rate limiting defaults and exemptions.
    #[serde(default)]
    rrl: rrl::Defaults,
    /// SYN steering: outer sources for `ipip` and the flood guard.
    #[serde(default)]
    steer: Steer,
    /// Demand: counters, capacity spill, replicas.
    #[serde(default)]
    demand: DemandConfig,
    /// Weights and priorities for services that give neither (DistributedDirector's
    /// `default-weights` and `default-priority`).
    #[serde(default)]
    default_weights: BTreeMap<String, f64>,
    #[serde(default)]
    default_priority: BTreeMap<String, u32>,
}

/// The config, each part where its layer takes it.
#[derive(Debug, Default, Clone)]
pub struct Config {
    /// What the planner reads: sites, inputs, and each server's and service's sort
    /// settings (in the order of `servers` and `services`).
    pub plan: plan::Config,
    pub servers: Vec<Server>,
    pub services: Vec<Service>,
    pub health: HealthDefaults,
    pub metrics: Option<MetricsConfig>,
    pub ui: Option<crate::ui::UiConfig>,
    /// `[web]`: TLS and credentials for `[metrics]` and `[ui]`.
    pub web: crate::web::WebConfig,
    pub zones: Vec<crate::dns::ZoneConfig>,
    pub http: Option<Http>,
    pub rrl: rrl::Defaults,
    pub steer: Steer,
    pub demand: DemandConfig,
    /// The file it came from; paths in it are relative to its directory.
    pub path: PathBuf,
}

impl Config {
    pub fn load(path: &Path) -> Result<Config> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut c = Config::parse(&text).with_context(|| format!("{}", path.display()))?;
        c.path = path.to_path_buf();
        c.plan.path = path.to_path_buf();
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        c.plan.resolve_paths(&dir);
        c.web.resolve_paths(&dir);
        Ok(c)
    }

    /// The config file at `path` as a candidate for `impact` on a running `run`: checked as
    /// [`Config::load`] checks it, and its text with every data file's path made absolute
    /// (the running `run` reads the text, not the file, and takes relative paths from its
    /// own config's directory).
    pub fn candidate_text(path: &Path) -> Result<String> {
        Config::load(path)?;
        let named = || path.display().to_string();
        let text = std::fs::read_to_string(path).with_context(named)?;
        let mut doc: toml::Table = toml::from_str(&text).with_context(named)?;
        let dir = std::fs::canonicalize(path)
            .with_context(named)?
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let fix = |v: &mut toml::Value| {
            if let toml::Value::String(p) = v {
                if Path::new(p.as_str()).is_relative() {
                    *p = dir.join(&*p).display().to_string();
                }
            }
        };
        let fix_all = |v: &mut toml::Value| match v {
            toml::Value::Array(a) => a.iter_mut().for_each(fix),
            other => fix(other),
        };
        let section = |doc: &mut toml::Table, name: &str, keys: &[&str]| {
            let tables: Vec<&mut toml::Table> = match doc.get_mut(name) {
                Some(toml::Value::Table(t)) => vec![t],
                Some(toml::Value::Array(a)) => {
                    a.iter_mut().filter_map(|v| v.as_table_mut()).collect()
                }
                _ => Vec::new(),
            };
            for t in tables {
                for k in keys {
                    t.get_mut(*k).map(fix_all);
                }
            }
        };
        section(&mut doc, "geo", &["database", "locations", "graph"]);
        section(&mut doc, "site", &["bgp"]);
        section(&mut doc, "rtt", &["files", "probe_targets"]);
        Ok(toml::to_string(&doc)?)
    }

    pub fn parse(text: &str) -> Result<Config> {
        let mut f: File =
            toml::from_str(text).map_err(|e| anyhow::anyhow!("{}", e.to_string().trim_end()))?;
        add_replicas(&mut f)?;
        let c = Config {
            plan: plan::Config {
                geo: f.geo,
                sites: f.site,
                servers: f.server.iter().map(Server::plan).collect(),
                services: f.service.iter().map(Service::plan).collect(),
                rtt: f.rtt,
                bgp: f.bgp,
                default_weights: f.default_weights,
                default_priority: f.default_priority,
                path: PathBuf::new(),
            },
            servers: f.server,
            services: f.service,
            health: f.health,
            metrics: f.metrics,
            ui: f.ui,
            web: f.web,
            zones: f.zone,
            http: f.http,
            rrl: f.rrl,
            steer: f.steer,
            demand: f.demand,
            path: PathBuf::new(),
        };
        c.validate()?;
        Ok(c)
    }

    /// What the HTTP redirector takes: the servers' hostnames and `[http]`.
    pub fn redirect(&self) -> Result<crate::redirect::Settings> {
        let hostnames = self
            .servers
            .iter()
            .filter_map(|s| Some((s.name.clone(), s.hostname.clone()?)))
            .collect();
        crate::redirect::Settings::new(hostnames, self.http.as_ref())
    }

    /// How the kernel picks among the final equals of service `i` (by the planner's rule).
    pub fn select_mode(&self, i: usize) -> Result<Mode> {
        let s = &self.plan.services[i];
        s.select_mode(&s.policy(&self.plan)?)
    }

    fn validate(&self) -> Result<()> {
        // Sites, server sites, service server lists and policies: the planner's rules.
        self.plan.validate()?;
        if self.servers.len() >= MAX_SERVERS as usize {
            bail!(
                "{} servers: at most {} fit the kernel's table",
                self.servers.len(),
                MAX_SERVERS - 1
            );
        }
        for (i, s) in self.servers.iter().enumerate() {
            let at = || format!("[[server]] #{} ({:?})", i + 1, s.name);
            crate::checked::server_name(&s.name).with_context(at)?;
            if s.ipv4.is_none() && s.ipv6.is_none() {
                bail!("{}: needs ipv4 and/or ipv6", at());
            }
            if let Some(h) = &s.hostname {
                url_host(h).with_context(|| format!("{}: hostname", at()))?;
            }
            if let Some(l) = &s.load {
                HttpUrl::parse(&l.url).with_context(|| format!("{}: load", at()))?;
                if l.metric.as_deref() == Some("") {
                    bail!("{}: load metric is empty", at());
                }
            }
        }
        // A file caught half-written (or emptied) must not take every service away.
        if self.services.is_empty() {
            bail!("no [[service]]: a config must define at least one service");
        }
        if self.services.len() >= MAX_SERVICES as usize {
            bail!(
                "{} services: at most {}",
                self.services.len(),
                MAX_SERVICES - 1
            );
        }
        self.steer.validate()?;
        self.demand.validate()?;
        for (i, s) in self.servers.iter().enumerate() {
            if let Some(c) = s.capacity {
                if !(c.is_finite() && c > 0.0) {
                    bail!(
                        "[[server]] #{} ({:?}): capacity {c} must be above 0",
                        i + 1,
                        s.name
                    );
                }
            }
        }
        for (i, s) in self.plan.sites.iter().enumerate() {
            if let Some(c) = s.capacity {
                if !(c.is_finite() && c > 0.0) {
                    bail!(
                        "[[site]] #{} ({:?}): capacity {c} must be above 0",
                        i + 1,
                        s.name
                    );
                }
            }
        }
        let mut vips = HashSet::new();
        let d = &self.health;
        check_timing(d.interval, d.timeout, d.rise, d.fall, d.jitter).context("[health]")?;
        let mut names = HashSet::new();
        self.rrl.validate()?;
        for (i, s) in self.services.iter().enumerate() {
            let at = || format!("[[service]] #{} ({:?})", i + 1, s.name);
            if let Some(r) = &s.rrl {
                r.validate()
                    .map_err(|e| anyhow::anyhow!("{}: rrl: {e}", at()))?;
            }
            let wire = director_common::name::encode(&s.name)
                .map_err(|e| anyhow::anyhow!("{}: {e}", at()))?;
            if !names.insert(wire) {
                bail!("{}: the name is already a service", at());
            }
            if !(1..=MAX_CANDIDATES as u8).contains(&s.answers) {
                bail!(
                    "{}: answers {} is not from 1 to {MAX_CANDIDATES}",
                    at(),
                    s.answers
                );
            }
            if let Some(c) = &s.health {
                c.validate(&self.health).with_context(at)?;
            }
            if let Some((t, r)) = s.load_limits() {
                if !(t.is_finite() && t > 0.0) {
                    bail!("{}: load_threshold {t} must be above 0", at());
                }
                if !(r.is_finite() && (0.0..t).contains(&r)) {
                    bail!(
                        "{}: load_resume {r} must be from 0 to below load_threshold {t}",
                        at()
                    );
                }
                let publish = s.servers.iter().any(|n| {
                    self.servers
                        .iter()
                        .any(|sv| &sv.name == n && sv.load.is_some())
                });
                if !publish {
                    bail!(
                        "{}: load_threshold, but none of its servers has load (a url)",
                        at()
                    );
                }
            } else if s.load_resume.is_some() {
                bail!("{}: load_resume without load_threshold", at());
            }
            if s.portion.auto && s.load_threshold.is_none() {
                bail!(
                    "{}: portion = \"auto\" needs load_threshold (shares follow the headroom \
                     under it)",
                    at()
                );
            }
            if let Some(a) = &s.alternate {
                let target = director_common::name::encode(a)
                    .map_err(|e| anyhow::anyhow!("{}: alternate {a:?}: {e}", at()))?;
                let own = director_common::name::encode(&s.name).unwrap_or_default();
                if target.eq_ignore_ascii_case(&own) {
                    bail!(
                        "{}: alternate is the service's own name (a CNAME loop)",
                        at()
                    );
                }
            }
            self.validate_vips(s, &mut vips).with_context(at)?;
            let v4 = s.origin.iter().filter(|a| a.is_ipv4()).count();
            if v4 > 1 || s.origin.len() - v4 > 1 {
                bail!("{}: origin takes at most one address per family", at());
            }
        }
        self.build_zones(0)?;
        self.validate_http(&names)
    }

    /// A service's VIPs: addresses a client can reach, each in one service only, and
    /// what `ipip` needs for each family.
    fn validate_vips(&self, s: &Service, seen: &mut HashSet<SocketAddr>) -> Result<()> {
        if s.vip.is_empty() {
            if s.mode.is_some() || s.mss.is_some() {
                bail!("mode and mss are for VIPs, and it has no vip");
            }
            if s.dns == Some(false) {
                bail!("dns = false and no vip: nothing would reach it");
            }
            return Ok(());
        }
        if s.vip.len() > director_common::steer::MAX_VIPS as usize {
            bail!(
                "{} VIPs: at most {}",
                s.vip.len(),
                director_common::steer::MAX_VIPS
            );
        }
        for v in &s.vip {
            let a = crate::checked::vip(v).with_context(|| format!("vip {v:?}"))?;
            if !seen.insert(a) {
                bail!("vip {v:?} is already another service's (or listed twice)");
            }
            let v6 = a.is_ipv6();
            if s.forward() == Forward::Ipip && self.steer.source(v6).is_none() {
                bail!(
                    "vip {v:?}: mode ipip needs [steer] encap_source{} (the outer source \
                     addresses)",
                    if v6 { 6 } else { 4 }
                );
            }
            let family = s.servers.iter().any(|n| {
                self.servers.iter().any(|sv| {
                    &sv.name == n
                        && if v6 {
                            sv.ipv6.is_some()
                        } else {
                            sv.ipv4.is_some()
                        }
                })
            });
            if !family {
                bail!(
                    "vip {v:?}: none of its servers has an {} address",
                    if v6 { "ipv6" } else { "ipv4" }
                );
            }
        }
        if let Some(m) = s.mss {
            if m != 0 && !(536..=9000).contains(&m) {
                bail!("mss {m}: 0 (no clamp) or from 536 to 9000");
            }
        }
        Ok(())
    }

    /// `[http]` and the servers' hostnames: a hostname that is a service name would send
    /// its clients back to the redirector, round and round.
    fn validate_http(&self, services: &HashSet<Vec<u8>>) -> Result<()> {
        for (i, s) in self.servers.iter().enumerate() {
            let Some(h) = &s.hostname else { continue };
            let wire = director_common::name::encode(h).unwrap_or_default();
            if services.contains(&wire) {
                bail!(
                    "[[server]] #{} ({:?}): hostname {h:?} is a service name (redirects to it \
                     would come back to the redirector)",
                    i + 1,
                    s.name
                );
            }
        }
        if let Some(u) = &self.ui {
            u.validate()?;
        }
        self.web.validate().context("[web]")?;
        let Some(h) = &self.http else { return Ok(()) };
        let listen = h.addresses()?;
        h.trusted()?;
        if let Some(m) = &self.metrics {
            if listen.contains(&m.listen) {
                bail!("[http]: listen {} is also [metrics] listen", m.listen);
            }
        }
        if let Some(u) = &self.ui {
            if listen.contains(&u.listen) {
                bail!("[http]: listen {} is also [ui] listen", u.listen);
            }
        }
        Ok(())
    }

    /// The `[[zone]]`s built, with `serial` where they give none, and those with `dnssec`
    /// signed in the validity window of `now` (Unix seconds); every error names its zone.
    pub fn build_zones_at(&self, serial: u32, now: u64) -> Result<crate::dns::Zones> {
        let services: Vec<String> = self.services.iter().map(|s| s.name.clone()).collect();
        let mut origins = HashSet::new();
        let mut zones = Vec::new();
        let dir = self
            .path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        for (i, z) in self.zones.iter().enumerate() {
            let at = || format!("[[zone]] #{} ({:?})", i + 1, z.origin);
            let mut built = z.build(&services, serial).with_context(at)?;
            if let Some(d) = &z.dnssec {
                let keys = d.load_keys(&dir).with_context(at)?;
                let types = self.service_types(&built.origin)?;
                built.signed = Some(
                    crate::dns::signed::Signed::sign(
                        built.apex(),
                        &keys,
                        d.validity()?,
                        now,
                        &types,
                    )
                    .with_context(at)?,
                );
            }
            if !origins.insert(built.origin.clone()) {
                bail!("{}: another [[zone]] has that origin", at());
            }
            zones.push(built);
        }
        Ok(crate::dns::Zones::new(zones))
    }

    /// [`Config::build_zones_at`] now.
    pub fn build_zones(&self, serial: u32) -> Result<crate::dns::Zones> {
        self.build_zones_at(serial, crate::dns::signed::unix_now())
    }

    /// The service names under `origin`, with the types their answers can have: A where
    /// a server (or the origin fallback) has an IPv4 address, AAAA where one has IPv6. A
    /// fallback CNAME is not listed: an NSEC that listed it would deny every NODATA.
    fn service_types(
        &self,
        origin: &hickory_proto::rr::Name,
    ) -> Result<BTreeMap<hickory_proto::rr::Name, Vec<hickory_proto::rr::RecordType>>> {
        use hickory_proto::rr::RecordType;
        let mut out = BTreeMap::new();
        for s in &self.services {
            let n = crate::dns::zone::absolute(&s.name)?;
            if !origin.zone_of(&n) {
                continue;
            }
            let addrs: Vec<IpAddr> = self
                .servers
                .iter()
                .filter(|v| s.servers.contains(&v.name))
                .flat_map(|v| [v.ipv4.map(IpAddr::V4), v.ipv6.map(IpAddr::V6)])
                .flatten()
                .chain(s.origin.iter().copied())
                .collect();
            let mut t = Vec::new();
            if addrs.iter().any(IpAddr::is_ipv4) {
                t.push(RecordType::A);
            }
            if addrs.iter().any(IpAddr::is_ipv6) {
                t.push(RecordType::AAAA);
            }
            out.insert(n, t);
        }
        Ok(out)
    }

    /// The zones' serial when they give none: the time of the last change to the config,
    /// its mtime in seconds (RFC 1982 arithmetic is happy with it until 2106).
    pub fn zone_serial(&self) -> u32 {
        crate::dns::file::mtime_serial(&self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[[site]]
name = "fra"
lat = 50.11
lon = 8.68
igp_cost = { "192.0.2.1" = 10 }

[[server]]
name = "fra-1"
site = "fra"
ipv4 = "192.0.2.10"

[[service]]
name = "www.example.com"
servers = ["fra-1"]
priority = { geo = 1, admin = 2 }
"#;

    #[test]
    fn good_config_loads_with_defaults() {
        let c = Config::parse(GOOD).unwrap();
        assert_eq!(c.services[0].ttl, 30);
        assert_eq!(c.services[0].rtt_tolerance, 10);
        assert_eq!(c.servers[0].portion, 0);
    }

    fn refused(text: &str) -> String {
        format!("{:#}", Config::parse(text).unwrap_err())
    }

    /// The shipped examples stay valid, and every file they name is where they say.
    #[test]
    fn example_configs_load_and_name_existing_files() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
        for name in ["director.toml", "real-data.toml"] {
            let c = Config::load(&dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e:#}"));
            let files = c
                .plan
                .geo
                .database
                .iter()
                .chain(&c.plan.geo.locations)
                .chain(&c.plan.geo.graph);
            let files = files
                .chain(c.plan.sites.iter().flat_map(|s| &s.bgp))
                .chain(&c.plan.rtt.files);
            for f in files {
                assert!(
                    f.is_file(),
                    "{name} names {}, which is not a file",
                    f.display()
                );
            }
        }
    }

    #[test]
    fn bad_configs_are_refused_with_the_entry_and_reason() {
        assert!(refused(&GOOD.replace("site = \"fra\"", "site = \"ams\""))
            .contains("unknown site \"ams\""));
        assert!(
            refused(&GOOD.replace("servers = [\"fra-1\"]", "servers = [\"nyc-1\"]"))
                .contains("unknown server \"nyc-1\"")
        );
        let unknown_metric = refused(&GOOD.replace("geo = 1", "speed = 1"));
        assert!(unknown_metric.contains("unknown metric \"speed\""));
        assert!(refused(&GOOD.replace("www.example.com", "a..b")).contains("[[service]] #1"));
        assert!(refused(&GOOD.replace("lat = 50.11", "lat = 150.0")).contains("out of range"));
        assert!(
            refused(&GOOD.replace("ipv4 = \"192.0.2.10\"", "ipv4 = \"192.0.2\"")).contains("line")
        );
        assert!(refused(&format!("{GOOD}\nbogus = 1\n")).contains("bogus"));
        assert!(refused("").contains("at least one service"));
    }

    #[test]
    fn health_checks_are_checked_and_default_from_the_health_block() {
        let svc = |check: &str| {
            with_service(&format!(
                "priority = {{ admin = 1 }}\nhealth = {{ {check} }}"
            ))
        };
        let c = Config::parse(&format!(
            "[health]\ninterval = 5\nfall = 4\n{}",
            svc("type = \"http\", port = 80, path = \"/health\", rise = 3")
        ))
        .unwrap();
        let check = c.services[0].health.as_ref().unwrap();
        let t = check.timing(&c.health);
        assert_eq!(
            (t.interval.as_secs(), t.timeout.as_secs(), t.rise, t.fall),
            (5, 2, 3, 4)
        );
        assert!(c.services[0].fail_open);
        for (check, why) in [
            ("type = \"tcp\", port = 0", "port 0"),
            (
                "type = \"tcp\", port = 80, path = \"/\"",
                "path is only for http",
            ),
            (
                "type = \"http\", port = 80, path = \"health\"",
                "must start with /",
            ),
            (
                "type = \"http\", port = 80, status = 999",
                "not an HTTP status",
            ),
            ("type = \"dns\", port = 53", "needs query"),
            (
                "type = \"dns\", port = 53, query = \"a..b\"",
                "query \"a..b\"",
            ),
            (
                "type = \"dns\", port = 53, query = \"x.org\", qtype = \"PTR\"",
                "qtype \"PTR\"",
            ),
            (
                "type = \"tcp\", port = 80, interval = 0.5",
                "interval 0.5 s",
            ),
            (
                "type = \"tcp\", port = 80, timeout = 20",
                "at most the interval",
            ),
            (
                "type = \"tcp\", port = 80, fall = 0",
                "must be from 1 to 100",
            ),
            ("type = \"tcp\", port = 80, jitter = 0.9", "jitter 0.9"),
            ("type = \"ping\", port = 80", "unknown variant `ping`"),
        ] {
            let e = refused(&svc(check));
            assert!(e.contains(why), "{check}: {e}");
            if !why.contains("variant") {
                assert!(e.contains("[[service]] #1"), "{check}: {e}");
            }
        }
        let e = refused(&format!("[health]\ntimeout = 0\n{GOOD}"));
        assert!(e.contains("[health]") && e.contains("timeout 0"), "{e}");
    }

    #[test]
    fn load_sources_and_thresholds_are_checked() {
        let load = |url: &str| {
            GOOD.replace(
                "ipv4 = \"192.0.2.10\"",
                &format!("ipv4 = \"192.0.2.10\"\nload = {{ url = \"{url}\" }}"),
            )
        };
        let ok = load("http://192.0.2.10:9100/load").replace(
            "priority = { geo = 1, admin = 2 }",
            "priority = { geo = 1, admin = 2 }\nload_threshold = 0.8",
        );
        let c = Config::parse(&ok).unwrap();
        assert_eq!(c.services[0].load_limits(), Some((0.8, 0.8 * 0.9)));
        let auto =
            Config::parse(&ok.replace("load_threshold", "portion = \"auto\"\nload_threshold"))
                .unwrap();
        assert!(auto.services[0].portion.auto);
        assert_eq!(director_plan::config::auto_portion_target(0.2, 0.8), 75);
        assert_eq!(director_plan::config::auto_portion_target(0.9, 0.8), 1);
        assert_eq!(director_plan::config::auto_portion_target(0.0, 0.8), 100);
        let u = HttpUrl::parse("http://[2001:db8::1]:8080/m?x=1").unwrap();
        assert_eq!((u.addr.port(), u.path.as_str()), (8080, "/m?x=1"));
        assert_eq!(HttpUrl::parse("http://192.0.2.1").unwrap().addr.port(), 80);
        for (text, why) in [
            (load("https://192.0.2.10/load"), "must start with http://"),
            (load("http://lb.example.com/load"), "must be an IP address"),
            (ok.replace("0.8", "0"), "must be above 0"),
            (
                ok.replace(
                    "load_threshold = 0.8",
                    "load_threshold = 0.8\nload_resume = 0.9",
                ),
                "load_resume 0.9",
            ),
            (
                GOOD.replace(
                    "priority = { geo = 1, admin = 2 }",
                    "priority = { geo = 1 }\nload_threshold = 1",
                ),
                "none of its servers has load",
            ),
            (
                GOOD.replace(
                    "priority = { geo = 1, admin = 2 }",
                    "priority = { portion = 1 }\nportion = \"auto\"",
                ),
                "needs load_threshold",
            ),
            (
                GOOD.replace(
                    "priority = { geo = 1, admin = 2 }",
                    "priority = { portion = 1 }\nportion = \"most\"",
                ),
                "give \"auto\" or a table",
            ),
        ] {
            let e = refused(&text);
            assert!(e.contains(why), "{e}");
        }
    }

    #[test]
    fn fallbacks_are_checked() {
        let svc = |extra: &str| with_service(&format!("priority = {{ admin = 1 }}\n{extra}"));
        let c = Config::parse(&svc(
            "alternate = \"www.cdn-b.example.net\"\norigin = [\"192.0.2.99\", \"2001:db8::99\"]",
        ))
        .unwrap();
        assert_eq!(c.services[0].degraded_ttl(), 10, "the TTL (30), at most 10");
        for (extra, why) in [
            ("alternate = \"WWW.example.com.\"", "a CNAME loop"),
            ("alternate = \"a..b\"", "alternate \"a..b\""),
            (
                "origin = [\"192.0.2.1\", \"192.0.2.2\"]",
                "one address per family",
            ),
            ("origin = [\"192.0.2\"]", "origin"),
        ] {
            let e = refused(&svc(extra));
            assert!(e.contains(why), "{extra}: {e}");
        }
    }

    #[test]
    fn http_and_hostnames_are_checked() {
        let named = GOOD.replace(
            "ipv4 = \"192.0.2.10\"",
            "ipv4 = \"192.0.2.10\"\nhostname = \"Fra-1.CDN.example.net\"",
        );
        let http = |keys: &str| format!("[http]\n{keys}\n{named}");
        let c = Config::parse(&http("listen = \"192.0.2.1:80\"")).unwrap();
        let h = c.http.as_ref().unwrap();
        assert_eq!(h.addresses().unwrap(), ["192.0.2.1:80".parse().unwrap()]);
        assert!(h.trusted().unwrap().is_empty());
        assert_eq!(
            c.servers[0].hostname.as_deref(),
            Some("Fra-1.CDN.example.net")
        );
        let c = Config::parse(&http(
            "listen = [\"192.0.2.1:80\", \"[2001:db8::1]:8080\"]\n\
             trusted_proxies = [\"192.0.2.0/24\", \"2001:db8::7\"]",
        ))
        .unwrap();
        let h = c.http.as_ref().unwrap();
        assert_eq!(h.addresses().unwrap().len(), 2);
        assert_eq!(
            h.trusted().unwrap(),
            [
                "192.0.2.0/24".parse::<ipnet::IpNet>().unwrap(),
                "2001:db8::7/128".parse().unwrap()
            ]
        );
        for (text, why) in [
            (
                http("listen = \"192.0.2.1\""),
                "listen \"192.0.2.1\" is not ADDR:PORT",
            ),
            (http("listen = []"), "listen is an empty list"),
            (
                http("listen = [\"192.0.2.1:80\", \"192.0.2.1:80\"]"),
                "given twice",
            ),
            (
                http("listen = \"192.0.2.1:80\"\ntrusted_proxies = [\"192.0.2.1/24\"]"),
                "trusted_proxies \"192.0.2.1/24\"",
            ),
            (
                http("listen = \"192.0.2.1:80\"\ntrusted_proxies = [\"proxy\"]"),
                "trusted_proxies \"proxy\"",
            ),
            (
                format!(
                    "[metrics]\nlisten = \"192.0.2.1:80\"\n{}",
                    http("listen = \"192.0.2.1:80\"")
                ),
                "also [metrics] listen",
            ),
            (
                http("listen = \"192.0.2.1:80\"\nport = 1"),
                "unknown field `port`",
            ),
            (
                named.replace("Fra-1.CDN.example.net", "fra 1.example.net"),
                "[[server]] #1 (\"fra-1\"): hostname",
            ),
            (
                named.replace("Fra-1.CDN.example.net", "-fra.example.net"),
                "starts or ends with '-'",
            ),
            (
                named.replace("Fra-1.CDN.example.net", "WWW.example.com."),
                "hostname \"WWW.example.com.\" is a service name",
            ),
        ] {
            let e = refused(&text);
            assert!(e.contains(why), "{why}: {e}");
        }
    }

    fn with_service(extra: &str) -> String {
        GOOD.replace("priority = { geo = 1, admin = 2 }", extra)
    }

    /// DD: "If you want to return a random IP address in the case of a tie, use metric
    /// priority with the random metric": without it the pick must not be random.
    #[test]
    fn select_follows_the_policy() {
        let mode = |extra: &str| {
            let c = Config::parse(&with_service(extra)).unwrap();
            c.select_mode(0).unwrap()
        };
        assert_eq!(mode("priority = { geo = 1 }"), Mode::Client);
        assert_eq!(
            mode("priority = { geo = 1 }\nselect = \"name\""),
            Mode::Name
        );
        assert_eq!(mode("priority = { geo = 1, random = 2 }"), Mode::Random);
        assert_eq!(mode("priority = { geo = 1, portion = 2 }"), Mode::Random);
        let sticky = "priority = { geo = 1, portion = 2 }\nselect = \"client\"";
        assert_eq!(mode(sticky), Mode::Client);
        let e = refused(&with_service("priority = { geo = 1 }\nselect = \"random\""));
        assert!(
            e.contains("[[service]] #1") && e.contains("add random to priority"),
            "{e}"
        );
        let e = refused(&with_service(
            "priority = { geo = 1, random = 2 }\nselect = \"client\"",
        ));
        assert!(e.contains("contradicts the random metric"), "{e}");
    }

    #[test]
    fn defaults_and_per_service_overrides() {
        // No priority or weights: the top-level defaults.
        let text = format!(
            "default_weights = {{ geo = 2 }}\n{}",
            with_service("admin = { \"fra-1\" = 7 }\nportion = { \"fra-1\" = 3 }")
        );
        let c = Config::parse(&text).unwrap();
        let p = c.plan.services[0].policy(&c.plan).unwrap();
        assert_eq!(
            p.levels(),
            vec![(101, vec![(director_plan::engine::Metric::Geo, 2.0)])]
        );
        assert_eq!(c.services[0].admin["fra-1"], 7);
        assert_eq!(c.services[0].portion.each["fra-1"], 3);
        let e = refused(&with_service("admin = { \"nyc-1\" = 7 }"));
        assert!(
            e.contains("admin names \"nyc-1\", which is not one of its servers"),
            "{e}"
        );
        let e = refused(&format!("default_weights = {{ speed = 1 }}\n{GOOD}"));
        assert!(
            e.contains("default_weights") && e.contains("unknown metric"),
            "{e}"
        );
    }

    #[test]
    fn policy_errors_name_the_entry_and_reason() {
        let cases = [
            ("priority = { med = 1 }", "not weightable or prioritizable"),
            (
                "priority = { geo = 1 }\nrtt_tolerance = 101",
                "not from 0 to 100",
            ),
            (
                "priority = { geo = 1 }\nrtt_tolerance = 12.5",
                "rtt_tolerance",
            ),
            (
                "priority = { geo = 1 }\nmed = true",
                "med needs ext and int",
            ),
            (
                "weights = { geo = 1, random = 1 }",
                "give random a priority of its own",
            ),
        ];
        for (extra, want) in cases {
            let e = refused(&with_service(extra));
            assert!(e.contains(want), "{extra}: {e}");
        }
        // Through load, the file is named first.
        let dir = std::env::temp_dir().join(format!("director-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.toml");
        std::fs::write(&path, with_service("priority = { med = 1 }")).unwrap();
        let e = format!("{:#}", Config::load(&path).unwrap_err());
        let _ = std::fs::remove_dir_all(&dir);
        assert!(e.starts_with(&path.display().to_string()) && e.contains("[[service]] #1"));
    }

    const RRL_CONFIG: &str = r#"
[rrl]
rate = 50
slip = 3
ipv4_prefix = 22
exempt = ["192.0.2.0/24", "2001:db8::/32"]

[[site]]
name = "fra"
lat = 50.11
lon = 8.68

[[server]]
name = "fra-1"
site = "fra"
ipv4 = "192.0.2.10"

[[service]]
name = "www.example.com"
servers = ["fra-1"]
priority = { geo = 1 }
rrl = { rate = 100, burst = 200 }

[[service]]
name = "api.example.com"
servers = ["fra-1"]
priority = { geo = 1 }
"#;

    #[test]
    fn the_rrl_keys_reach_the_limits() {
        let c = Config::parse(RRL_CONFIG).unwrap();
        let www = c.rrl.limit(c.services[0].rrl.as_ref());
        assert_eq!(
            (www.rate, www.burst, www.slip, www.v4_prefix),
            (100, 200, 3, 22)
        );
        let api = c.rrl.limit(c.services[1].rrl.as_ref());
        assert_eq!((api.rate, api.burst, api.v6_prefix), (50, 50, 56));
        assert_eq!(c.rrl.exempt_prefixes().unwrap().len(), 2);
        let bad = RRL_CONFIG.replace("slip = 3", "slip = 300");
        let e = Config::parse(&bad).unwrap_err();
        assert!(format!("{e:#}").contains("slip 300"), "{e:#}");
        let unknown = RRL_CONFIG.replace("burst = 200", "bursts = 200");
        assert!(Config::parse(&unknown).is_err());
    }
    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 256,
            ..proptest::prelude::ProptestConfig::default()
        })]

        /// Mutation fuzzing of the config reader, as director-plan's inputs::fuzz does the
        /// input readers: the example config with bytes flipped, replaced, inserted,
        /// removed or cut off is read or refused with a message, never a panic.
        #[test]
        fn config_reader_never_panics(
            edits in proptest::collection::vec(
                (proptest::prelude::any::<usize>(), proptest::prelude::any::<u8>(), 0u8..5),
                1..6,
            )
        ) {
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/director.toml");
            let mut b = std::fs::read(path).unwrap();
            for (i, v, kind) in edits {
                if b.is_empty() {
                    break;
                }
                let i = i % b.len();
                match kind {
                    0 => b[i] ^= 1 << (v % 8),
                    1 => b[i] = v,
                    2 => b.insert(i, v),
                    3 => {
                        b.remove(i);
                    }
                    _ => b.truncate(i),
                }
            }
            if let Err(e) = Config::parse(&String::from_utf8_lossy(&b)) {
                proptest::prop_assert!(!format!("{e:#}").is_empty(), "an error without a message");
            }
        }
    }

    #[test]
    fn listeners_default_to_loopback_and_bmp_takes_only_listed_routers() {
        let c = Config::parse(&format!("{GOOD}\n[metrics]\n[ui]\n")).unwrap();
        let lo: SocketAddr = "127.0.0.1:9273".parse().unwrap();
        assert_eq!(c.metrics.unwrap().listen, lo);
        assert_eq!(c.ui.unwrap().listen, lo);
        // The routers of bmp_listen: the sites' bmp_router addresses, unless listed.
        let bmp = format!("{GOOD}\n[bgp]\nbmp_listen = \"192.0.2.1:5000\"\n");
        let e = format!("{:#}", Config::parse(&bmp).unwrap_err());
        assert!(e.contains("set bmp_allow"), "{e}");
        let by_address = bmp.replace("lon = 8.68\n", "lon = 8.68\nbmp_router = \"192.0.2.254\"\n");
        let c = Config::parse(&by_address).unwrap();
        assert_eq!(
            c.plan.bgp.allowed(&c.plan.sites).unwrap(),
            vec!["192.0.2.254/32".parse::<ipnet::IpNet>().unwrap()]
        );
        assert_eq!(c.plan.bgp.bmp_max_sessions, 64);
        let by_name = bmp.replace("lon = 8.68\n", "lon = 8.68\nbmp_router = \"edge-r1\"\n");
        let e = format!("{:#}", Config::parse(&by_name).unwrap_err());
        assert!(
            e.contains("set bmp_allow") && e.contains("\"edge-r1\""),
            "{e}"
        );
        let listed = format!("{by_name}bmp_allow = [\"192.0.2.254\", \"2001:db8:ff::/64\"]\n");
        let c = Config::parse(&listed).unwrap();
        assert_eq!(c.plan.bgp.allowed(&c.plan.sites).unwrap().len(), 2);
        let e = format!(
            "{:#}",
            Config::parse(&format!("{by_name}bmp_allow = [\"r1\"]\n")).unwrap_err()
        );
        assert!(e.contains("\"r1\" is not an address or prefix"), "{e}");
    }

    #[test]
    fn agents_over_https_need_a_ca_and_a_token_never_goes_in_clear() {
        let rtt = |keys: &str| format!("{GOOD}\n[rtt]\n{keys}\n");
        let e = format!(
            "{:#}",
            Config::parse(&rtt("agents = [\"https://192.0.2.5:9470/rtt\"]")).unwrap_err()
        );
        assert!(e.contains("give agent_ca"), "{e}");
        let e = format!(
            "{:#}",
            Config::parse(&rtt(
                "agents = [\"http://192.0.2.5:9470/rtt\"]\nagent_token_file = \"t\""
            ))
            .unwrap_err()
        );
        assert!(e.contains("sent only over TLS"), "{e}");
        Config::parse(&rtt(
            "agents = [\"https://192.0.2.5:9470/rtt\"]\nagent_ca = \"ca.pem\"\n\
             agent_token_file = \"t\"",
        ))
        .unwrap();
        let e = format!(
            "{:#}",
            Config::parse(&format!("{GOOD}\n[web]\n[web.basic_auth]\nprom = \"pw\"\n"))
                .unwrap_err()
        );
        assert!(
            e.contains("[web]") && e.contains("never a plain password"),
            "{e}"
        );
    }
}
