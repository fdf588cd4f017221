//! The HTTP client of the CLI (`explain --run`, `demand --run`, `impact --run`) and of the
//! controller polling agents: one HTTP/1.1 request per connection, over TLS when a CA is
//! given, with a credential when one is. Plain blocking sockets: agents are few, polls are
//! seconds apart, and a client library would bring a second HTTP stack for one request.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use base64::Engine;
use rustls::pki_types::ServerName;

/// The largest answer taken: 64 MiB is over a million RTT records, far beyond what a
/// site's agent holds for one window.
const MAX_BODY: u64 = 64 << 20;

/// What a client presents: none, HTTP basic auth, or a bearer token.
#[derive(Clone, Default)]
pub enum Credential {
    #[default]
    None,
    Basic {
        user: String,
        password: String,
    },
    Bearer(String),
}

impl std::fmt::Debug for Credential {
    // Never the secret itself, in a log or an error.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::None => write!(f, "none"),
            Credential::Basic { user, .. } => write!(f, "basic auth as {user}"),
            Credential::Bearer(_) => write!(f, "a bearer token"),
        }
    }
}

/// How to reach a listener: TLS (the server verified against a CA, and a client
/// certificate if one is given) or plain, and the credential.
#[derive(Clone, Default)]
pub struct Client {
    tls: Option<Arc<rustls::ClientConfig>>,
    credential: Credential,
}

/// A secret read from a file: its first line, without its line end.
pub fn secret_file(path: &Path) -> Result<String> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let line = text.lines().next().unwrap_or("").trim_end().to_string();
    if line.is_empty() {
        bail!("{}: empty", path.display());
    }
    Ok(line)
}

impl Client {
    /// Plain HTTP without a credential.
    pub fn plain() -> Client {
        Client::default()
    }

    /// Over TLS when `ca` is given (with a client certificate when `identity` is); a bearer
    /// token is refused without TLS, since it would cross the network in clear.
    pub fn new(
        ca: Option<&Path>,
        identity: Option<(&Path, &Path)>,
        credential: Credential,
    ) -> Result<Client> {
        let tls = match ca {
            Some(ca) => Some(super::tls::client(ca, identity)?),
            None if identity.is_some() => bail!("a client certificate needs the server's CA"),
            None => None,
        };
        if tls.is_none() && matches!(credential, Credential::Bearer(_)) {
            bail!("a bearer token is only sent over TLS: give the server's CA too");
        }
        Ok(Client { tls, credential })
    }

    pub fn tls(&self) -> bool {
        self.tls.is_some()
    }

    /// One request; the body of a 200 answer, else an error with the status and the text.
    pub fn request(
        &self,
        addr: SocketAddr,
        method: &str,
        path: &str,
        body: &[u8],
        wait: Duration,
    ) -> Result<Vec<u8>> {
        let tcp = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
        tcp.set_read_timeout(Some(wait))?;
        tcp.set_write_timeout(Some(Duration::from_secs(1)))?;
        let head = self.head(addr, method, path, body);
        let raw = match &self.tls {
            None => exchange(tcp, &head)?,
            Some(cfg) => {
                // The certificate must name the address dialled (an IP SAN).
                let name = ServerName::IpAddress(addr.ip().into());
                let conn =
                    rustls::ClientConnection::new(Arc::clone(cfg), name).context("starting TLS")?;
                exchange(rustls::StreamOwned::new(conn, tcp), &head)
                    .context("over TLS (the certificate must have the address as an IP SAN)")?
            }
        };
        parse(&raw)
    }

    fn head(&self, addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Vec<u8> {
        let length = if method == "GET" {
            String::new()
        } else {
            format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            )
        };
        let auth = match &self.credential {
            Credential::None => String::new(),
            Credential::Basic { user, password } => format!(
                "Authorization: Basic {}\r\n",
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
            ),
            Credential::Bearer(t) => format!("Authorization: Bearer {t}\r\n"),
        };
        // One write: `write!` on the socket itself sends each piece of the format as it
        // comes, so the head would go out in a dozen small segments.
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\n{auth}{length}Connection: close\r\n\r\n"
        )
        .into_bytes();
        head.extend_from_slice(body);
        head
    }
}

fn exchange(mut s: impl Read + Write, request: &[u8]) -> Result<Vec<u8>> {
    s.write_all(request)?;
    s.flush()?;
    let mut raw = Vec::new();
    match s.take(MAX_BODY + 65_536).read_to_end(&mut raw) {
        Ok(_) => {}
        // A server that closes without TLS's close_notify: what came is whole if its
        // length says so, which the parse checks.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
        Err(e) => return Err(e.into()),
    }
    Ok(raw)
}

fn parse(raw: &[u8]) -> Result<Vec<u8>> {
    if raw.is_empty() {
        bail!("the connection closed without an answer");
    }
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut resp = httparse::Response::new(&mut headers);
    let start = match resp.parse(raw)? {
        httparse::Status::Complete(n) => n,
        httparse::Status::Partial => bail!("the response ended inside its headers"),
    };
    if resp.code != Some(200) {
        bail!(
            "HTTP status {}: {}",
            resp.code.unwrap_or(0),
            String::from_utf8_lossy(&raw[start..]).trim_end()
        );
    }
    let chunked = resp.headers.iter().any(|h| {
        h.name.eq_ignore_ascii_case("transfer-encoding")
            && String::from_utf8_lossy(h.value).contains("chunked")
    });
    let body = &raw[start..];
    if chunked {
        dechunk(body)
    } else {
        Ok(body.to_vec())
    }
}

/// A chunked body's data (RFC 9112 §7.1), trailers ignored.
fn dechunk(mut b: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = b.windows(2).position(|w| w == b"\r\n") else {
            bail!("a chunk size line without its end");
        };
        let line = std::str::from_utf8(&b[..eol])?;
        let size = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
            .with_context(|| format!("bad chunk size {line:?}"))?;
        b = &b[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if b.len() < size + 2 {
            bail!("a chunk cut short");
        }
        out.extend_from_slice(&b[..size]);
        b = &b[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_bodies_are_joined() {
        assert_eq!(
            dechunk(b"3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n").unwrap(),
            b"abcde"
        );
        assert!(dechunk(b"5\r\nab").is_err());
        assert!(dechunk(b"zz\r\n").is_err());
    }

    #[test]
    fn a_token_never_goes_in_clear_and_secrets_never_print() {
        let e = Client::new(None, None, Credential::Bearer("t0k".into()))
            .err()
            .expect("refused");
        assert!(format!("{e:#}").contains("only sent over TLS"), "{e:#}");
        let c = Credential::Basic {
            user: "prom".into(),
            password: "hunter2".into(),
        };
        assert_eq!(format!("{c:?}"), "basic auth as prom");
    }
}
