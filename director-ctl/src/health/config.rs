//! What the health checks and load polls take from the config: `[health]` (the defaults of
//! every check's timing), a service's `health = { ... }` check, and a server's `load`
//! source. Checked here, with each error naming the key; the controller's config puts them
//! in their places in the file.

use std::net::{IpAddr, SocketAddr};

use anyhow::{bail, Context, Result};
use serde::Deserialize;

/// `[[server]] load = { url = "http://ADDR:PORT/PATH", metric = "NAME" }`: the body is one
/// number, or Prometheus text holding `metric` (its samples summed).
#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LoadSource {
    pub url: String,
    pub metric: Option<String>,
}

/// An `http://` URL whose host is an address literal (no DNS lookup in the checks'
/// path): where to connect, the path and the Host header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpUrl {
    pub addr: SocketAddr,
    pub host: String,
    pub path: String,
}

impl HttpUrl {
    pub fn parse(url: &str) -> Result<HttpUrl> {
        let rest = url
            .strip_prefix("http://")
            .with_context(|| format!("url {url:?} must start with http://"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if path.chars().any(|c| c.is_whitespace() || c.is_control()) {
            bail!("url {url:?}: the path has spaces or control characters");
        }
        let addr: SocketAddr = match authority.parse() {
            Ok(a) => a,
            Err(_) => {
                let ip: IpAddr = authority
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse()
                    .with_context(|| {
                        format!("url {url:?}: the host must be an IP address (and :port)")
                    })?;
                SocketAddr::new(ip, 80)
            }
        };
        Ok(HttpUrl {
            addr,
            host: authority.to_string(),
            path: path.to_string(),
        })
    }
}

/// `[health]`: the defaults of every service's check.
#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HealthDefaults {
    /// Seconds between checks of one server (1 to 3600).
    #[serde(default = "ten_f")]
    pub interval: f64,
    /// Seconds a check may take (at most the interval).
    #[serde(default = "two_f")]
    pub timeout: f64,
    /// Consecutive successes to come back.
    #[serde(default = "two")]
    pub rise: u32,
    /// Consecutive failures to go down.
    #[serde(default = "three")]
    pub fall: u32,
    /// Each wait between checks is the interval times 1 plus or minus up to this share
    /// (0 to 0.5), so that checks do not synchronise.
    #[serde(default = "tenth")]
    pub jitter: f64,
}

impl Default for HealthDefaults {
    fn default() -> Self {
        HealthDefaults {
            interval: ten_f(),
            timeout: two_f(),
            rise: two(),
            fall: three(),
            jitter: tenth(),
        }
    }
}

fn ten_f() -> f64 {
    10.0
}
fn two_f() -> f64 {
    2.0
}
fn two() -> u32 {
    2
}
fn three() -> u32 {
    3
}
fn tenth() -> f64 {
    0.1
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum CheckKind {
    /// A TCP connection to the port (DistributedDirector's check).
    Tcp,
    /// An HTTP/1.1 GET of `path`, expecting `status` and, if given, `body` in the body.
    Http,
    /// A DNS query for `query` (type `qtype`), expecting a NOERROR answer.
    Dns,
}

/// `[[service]] health = { type = "http", port = 80, ... }`: the check of every server
/// of the service. Timing keys override `[health]`.
#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Check {
    #[serde(rename = "type")]
    pub kind: CheckKind,
    pub port: u16,
    pub path: Option<String>,
    pub status: Option<u16>,
    pub body: Option<String>,
    /// The Host header (default: the service's name).
    pub host: Option<String>,
    pub query: Option<String>,
    pub qtype: Option<String>,
    pub interval: Option<f64>,
    pub timeout: Option<f64>,
    pub rise: Option<u32>,
    pub fall: Option<u32>,
    pub jitter: Option<f64>,
}

/// A check's timing, the service's keys over `[health]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    pub interval: std::time::Duration,
    pub timeout: std::time::Duration,
    pub rise: u32,
    pub fall: u32,
    pub jitter: f64,
}

/// DNS types a `dns` check may ask for.
pub const CHECK_QTYPES: [&str; 6] = ["A", "AAAA", "SOA", "NS", "TXT", "MX"];

impl Check {
    pub fn timing(&self, d: &HealthDefaults) -> Timing {
        Timing {
            interval: std::time::Duration::from_secs_f64(self.interval.unwrap_or(d.interval)),
            timeout: std::time::Duration::from_secs_f64(self.timeout.unwrap_or(d.timeout)),
            rise: self.rise.unwrap_or(d.rise),
            fall: self.fall.unwrap_or(d.fall),
            jitter: self.jitter.unwrap_or(d.jitter),
        }
    }

    /// Checks the check's keys against its kind, with `d` for the timing it leaves out.
    pub fn validate(&self, d: &HealthDefaults) -> Result<()> {
        check_timing(
            self.interval.unwrap_or(d.interval),
            self.timeout.unwrap_or(d.timeout),
            self.rise.unwrap_or(d.rise),
            self.fall.unwrap_or(d.fall),
            self.jitter.unwrap_or(d.jitter),
        )?;
        if self.port == 0 {
            bail!("health: port 0");
        }
        let only = |key: &str, set: bool, kind: &str| -> Result<()> {
            if set {
                bail!("health: {key} is only for {kind} checks");
            }
            Ok(())
        };
        let http = self.kind == CheckKind::Http;
        only("path", !http && self.path.is_some(), "http")?;
        only("status", !http && self.status.is_some(), "http")?;
        only("body", !http && self.body.is_some(), "http")?;
        only("host", !http && self.host.is_some(), "http")?;
        let dns = self.kind == CheckKind::Dns;
        only("query", !dns && self.query.is_some(), "dns")?;
        only("qtype", !dns && self.qtype.is_some(), "dns")?;
        if let Some(p) = &self.path {
            if !p.starts_with('/') || p.chars().any(|c| c.is_whitespace() || c.is_control()) {
                bail!("health: path {p:?} must start with / and have no spaces");
            }
        }
        if let Some(h) = &self.host {
            if h.is_empty() || h.chars().any(|c| c.is_whitespace() || c.is_control()) {
                bail!("health: host {h:?} is not a host name");
            }
        }
        if let Some(s) = self.status {
            if !(100..=599).contains(&s) {
                bail!("health: status {s} is not an HTTP status");
            }
        }
        if dns {
            let q = self
                .query
                .as_deref()
                .context("health: a dns check needs query (the name to ask for)")?;
            director_common::name::encode(q)
                .map_err(|e| anyhow::anyhow!("health: query {q:?}: {e}"))?;
            if let Some(t) = &self.qtype {
                if !CHECK_QTYPES.contains(&t.to_ascii_uppercase().as_str()) {
                    bail!(
                        "health: qtype {t:?} is not one of {}",
                        CHECK_QTYPES.join(", ")
                    );
                }
            }
        }
        Ok(())
    }
}

/// The ranges a check's timing must keep (`[health]` and each service's own keys).
pub fn check_timing(interval: f64, timeout: f64, rise: u32, fall: u32, jitter: f64) -> Result<()> {
    if !(1.0..=3600.0).contains(&interval) {
        bail!("health: interval {interval} s is not from 1 to 3600");
    }
    if !(timeout > 0.0 && timeout <= interval) {
        bail!(
            "health: timeout {timeout} s must be above 0 and at most the interval ({interval} s)"
        );
    }
    if !(1..=100).contains(&rise) || !(1..=100).contains(&fall) {
        bail!("health: rise {rise} and fall {fall} must be from 1 to 100");
    }
    if !(0.0..=0.5).contains(&jitter) {
        bail!("health: jitter {jitter} is not from 0 to 0.5");
    }
    Ok(())
}
