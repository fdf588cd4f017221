//! What the HTTP redirector takes from the config: `[http]` (where it listens, whose
//! `X-Forwarded-For` it believes), and the rule for a server's `hostname` (a name that can
//! stand in a URL). Checked here; the controller's config puts them in their places.

use std::net::{IpAddr, SocketAddr};

use anyhow::{bail, Context, Result};
use serde::Deserialize;

/// `[http]`: where `run` answers HTTP requests for service names with redirects to their
/// best server. `listen` is one `ADDR:PORT` or a list; `trusted_proxies` are addresses or
/// prefixes whose `X-Forwarded-For` is believed.
#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Http {
    pub listen: OneOrMany,
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
}

/// A key that takes one string or a list of them.
#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub fn items(&self) -> &[String] {
        match self {
            OneOrMany::One(s) => std::slice::from_ref(s),
            OneOrMany::Many(v) => v,
        }
    }
}

impl Http {
    /// The listen addresses (checked at load, so later calls only fail on a config that was
    /// never loaded).
    pub fn addresses(&self) -> Result<Vec<SocketAddr>> {
        let mut out = Vec::new();
        for a in self.listen.items() {
            let addr = a.parse().map_err(|_| {
                anyhow::anyhow!("[http]: listen {a:?} is not ADDR:PORT (e.g. \"192.0.2.1:80\")")
            })?;
            if out.contains(&addr) {
                bail!("[http]: listen {a:?} is given twice");
            }
            out.push(addr);
        }
        if out.is_empty() {
            bail!("[http]: listen is an empty list");
        }
        Ok(out)
    }

    /// The trusted proxies as networks: a bare address is a network of its own.
    pub fn trusted(&self) -> Result<Vec<ipnet::IpNet>> {
        self.trusted_proxies
            .iter()
            .map(|t| {
                if t.contains('/') {
                    crate::checked::prefix(t)
                } else {
                    t.parse::<IpAddr>()
                        .map(ipnet::IpNet::from)
                        .map_err(|_| anyhow::anyhow!("{t:?} is not an address or a prefix"))
                }
                .with_context(|| format!("[http]: trusted_proxies {t:?}"))
            })
            .collect()
    }
}

/// Whether `text` can stand as the host of an `http://` URL: dot-separated labels of
/// letters, digits, `-` and `_`, none empty or over 63 bytes, at most 253 bytes in all (a
/// trailing dot, an absolute name, is allowed).
pub fn url_host(text: &str) -> Result<()> {
    let name = text.strip_suffix('.').unwrap_or(text);
    if name.is_empty() || name.len() > 253 {
        bail!("{text:?} must be 1 to 253 bytes");
    }
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            bail!("{text:?} has an empty label or one over 63 bytes");
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            bail!("{text:?} may only hold letters, digits, '-', '_' and dots");
        }
        if label.starts_with('-') || label.ends_with('-') {
            bail!("{text:?} has a label that starts or ends with '-'");
        }
    }
    Ok(())
}
