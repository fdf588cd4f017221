//! The TLS settings of the listeners and of the clients that call them, from PEM files
//! (read with `rustls-pki-types`), on rustls with the `ring` provider.

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use super::config::WebConfig;

/// *ring*, as the store's client (etcd-client's `tls`) uses: aws-lc-rs, rustls's own
/// default, would bring a C build of its own. rustls 0.23.48 marks *ring*'s provider
/// deprecated for its lack of post-quantum key exchange, which neither side needs here.
#[allow(deprecated)]
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Every certificate in a PEM file (at least one).
pub fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let named = || path.display().to_string();
    let certs = CertificateDer::pem_file_iter(path)
        .with_context(named)?
        .collect::<std::result::Result<Vec<_>, _>>()
        .with_context(named)?;
    if certs.is_empty() {
        bail!("{}: no certificate (PEM)", path.display());
    }
    Ok(certs)
}

/// The private key in a PEM file.
pub fn key(path: &Path) -> Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path)
        .with_context(|| format!("{}: no private key (PEM)", path.display()))
}

fn roots(path: &Path) -> Result<RootCertStore> {
    let mut store = RootCertStore::empty();
    for c in certs(path)? {
        store
            .add(c)
            .with_context(|| format!("{}: not a CA certificate", path.display()))?;
    }
    Ok(store)
}

/// The listeners' TLS settings, `None` without `tls_cert`: the certificate and key, and
/// with `client_ca`, client certificates required.
pub fn server(w: &WebConfig) -> Result<Option<Arc<ServerConfig>>> {
    let (Some(cert), Some(key_file)) = (&w.tls_cert, &w.tls_key) else {
        return Ok(None);
    };
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .context("TLS versions")?;
    let builder = match &w.client_ca {
        Some(ca) => {
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots(ca)?), provider())
                    .build()
                    .with_context(|| format!("client_ca {}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut c = builder
        .with_single_cert(certs(cert)?, key(key_file)?)
        .with_context(|| {
            format!(
                "tls_cert {} with tls_key {}",
                cert.display(),
                key_file.display()
            )
        })?;
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Some(Arc::new(c)))
}

/// A client's TLS settings: servers verified against `ca`, and a client certificate when
/// `identity` gives one (certificate chain, key).
pub fn client(ca: &Path, identity: Option<(&Path, &Path)>) -> Result<Arc<ClientConfig>> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .context("TLS versions")?
        .with_root_certificates(roots(ca)?);
    let c = match identity {
        Some((cert, k)) => builder
            .with_client_auth_cert(certs(cert)?, key(k)?)
            .with_context(|| format!("client certificate {}", cert.display()))?,
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(c))
}
