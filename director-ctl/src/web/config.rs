//! `[web]` (or the file `--web-config` names, for the roles without a config file): TLS
//! and credentials for every HTTP listener but the redirector, one block for all of them,
//! as Prometheus exporters' web config file is.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Deserialize;

/// One block for every listener of a process: the metrics, the map page, an edge's
/// `--metrics-listen`, an agent's `GET /rtt` and `POST /probe`.
#[derive(Debug, Deserialize, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct WebConfig {
    /// The listeners' certificate chain (PEM, leaf first); with `tls_key`, they serve
    /// HTTPS only.
    pub tls_cert: Option<PathBuf>,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub tls_key: Option<PathBuf>,
    /// CA certificates (PEM): a client must present a certificate one of them signed, or
    /// the TLS handshake is refused. Needs `tls_cert`.
    pub client_ca: Option<PathBuf>,
    /// User name → bcrypt hash of the password (`director-ctl web hash-password`, or
    /// `htpasswd -nB`): requests need HTTP basic auth as one of them.
    #[serde(default)]
    pub basic_auth: BTreeMap<String, String>,
    /// Token name → bcrypt hash of the token: requests may instead carry
    /// `Authorization: Bearer TOKEN`. Needs `tls_cert` (a token is never taken in clear).
    #[serde(default)]
    pub bearer_tokens: BTreeMap<String, String>,
}

impl WebConfig {
    /// A `--web-config` file: the keys of `[web]`, at its top level. Paths in it are
    /// relative to its directory.
    pub fn load(path: &Path) -> Result<WebConfig> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut w: WebConfig = toml::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{}", e.to_string().trim_end()))
            .with_context(|| path.display().to_string())?;
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        w.resolve_paths(&dir);
        w.validate().with_context(|| path.display().to_string())?;
        Ok(w)
    }

    /// Relative paths made relative to `dir` (the config file's directory).
    pub fn resolve_paths(&mut self, dir: &Path) {
        for p in [&mut self.tls_cert, &mut self.tls_key, &mut self.client_ca]
            .into_iter()
            .flatten()
        {
            if p.is_relative() {
                *p = dir.join(&*p);
            }
        }
    }

    /// Whether requests need a credential (basic auth or a token) or a client certificate.
    pub fn authenticates(&self) -> bool {
        self.client_ca.is_some() || !self.basic_auth.is_empty() || !self.bearer_tokens.is_empty()
    }

    pub fn tls(&self) -> bool {
        self.tls_cert.is_some()
    }

    /// What can be checked without reading the files.
    pub fn validate(&self) -> Result<()> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(_), None) => bail!("tls_cert needs tls_key"),
            (None, Some(_)) => bail!("tls_key needs tls_cert"),
            _ => {}
        }
        if self.client_ca.is_some() && self.tls_cert.is_none() {
            bail!("client_ca needs tls_cert and tls_key (client certificates are TLS)");
        }
        if !self.bearer_tokens.is_empty() && self.tls_cert.is_none() {
            bail!("bearer_tokens need tls_cert and tls_key: a token is never taken in clear");
        }
        for (table, entries) in [
            ("basic_auth", &self.basic_auth),
            ("bearer_tokens", &self.bearer_tokens),
        ] {
            for (name, hash) in entries {
                if name.is_empty() || name.contains(':') || name.chars().any(char::is_control) {
                    bail!("{table}: {name:?} is not a name (no ':' or control characters)");
                }
                check_hash(hash).with_context(|| format!("{table}: {name:?}"))?;
            }
        }
        Ok(())
    }
}

/// A bcrypt hash as `$2a$`, `$2b$` or `$2y$` with its cost and 53 characters of salt and
/// digest: a plain password put there by mistake is refused, not compared.
pub fn check_hash(hash: &str) -> Result<()> {
    let parts: Vec<&str> = hash.split('$').collect();
    let ok = parts.len() == 4
        && parts[0].is_empty()
        && matches!(parts[1], "2a" | "2b" | "2y")
        && parts[2].len() == 2
        && parts[2].parse::<u32>().is_ok_and(|c| (4..=31).contains(&c))
        && parts[3].len() == 53;
    if !ok {
        bail!(
            "not a bcrypt hash ($2b$COST$...): never a plain password; make one with \
             `director-ctl web hash-password`"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "$2b$04$abcdefghijklmnopqrstuu5Nt4sBz2SMD0Y0MRM1S5n7n7BrmOVLe";

    fn parse(text: &str) -> Result<WebConfig> {
        let w: WebConfig = toml::from_str(text)?;
        w.validate()?;
        Ok(w)
    }

    #[test]
    fn plain_passwords_and_half_tls_are_refused() {
        let e = parse("[basic_auth]\nprom = \"hunter2\"").unwrap_err();
        assert!(format!("{e:#}").contains("never a plain password"), "{e:#}");
        assert!(format!("{e:#}").contains("\"prom\""), "{e:#}");
        let e = parse("tls_cert = \"a.pem\"").unwrap_err();
        assert!(format!("{e:#}").contains("tls_cert needs tls_key"), "{e:#}");
        let e = parse("client_ca = \"ca.pem\"").unwrap_err();
        assert!(
            format!("{e:#}").contains("client_ca needs tls_cert"),
            "{e:#}"
        );
        let e = parse(&format!("[bearer_tokens]\nc = \"{HASH}\"")).unwrap_err();
        assert!(format!("{e:#}").contains("never taken in clear"), "{e:#}");
        let w = parse(&format!("[basic_auth]\nprom = \"{HASH}\"")).unwrap();
        assert!(w.authenticates() && !w.tls());
        assert!(!WebConfig::default().authenticates());
    }
}
