//! Polls the sites' RTT agents (`[rtt] agents`) over HTTP on a thread of its own and hands
//! each report to `run`'s loop, which merges them (director-plan's `live::rtt`). A fleet's
//! publisher may add a [`Feed`] of its own: the reports the agents wrote into its store.
//!
//! A plain HTTP/1.1 GET per poll, connection closed after it: agents are few, polls are
//! seconds apart, and a client library would bring a second HTTP stack for one request.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc::Sender;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use director_plan::live::rtt::Record;
use serde::Deserialize;

/// What an agent serves at its URL (`director-ctl agent`'s `GET /rtt`); fields the merge
/// does not use are ignored, so agents may say more.
#[derive(Debug, Deserialize)]
pub struct Report {
    pub site: String,
    pub records: Vec<Record>,
}

/// One poll's outcome for one agent.
pub struct Polled {
    pub agent: String,
    pub report: Result<Report>,
}

/// Another source of reports than the URLs, started with the channel the polls go into and
/// the call that wakes the loop after a round: a fleet's publisher reads them from its store
/// (`[rtt] from_store`), which the controller knows nothing of.
pub type Feed = Box<dyn FnOnce(Sender<Polled>, Box<dyn Fn() + Send + Sync>) + Send>;

/// How an agent whose reports come from the store is named (`store:<site>/<agent>`), in
/// `explain`, the log and a manifest's live sources.
pub const FROM_STORE: &str = "store:";

/// The largest report taken: 64 MiB is over a million records, far beyond what a site's
/// agent holds for one window.
const MAX_BODY: u64 = 64 << 20;

/// Polls every agent each `every`, sending each outcome on `out` and calling `wake` after
/// a round; ends when `out`'s receiver is gone. Before an agent's poll, what `probes` holds
/// for it is posted to it (`POST /probe`).
pub fn start(
    agents: Vec<String>,
    every: Duration,
    out: Sender<Polled>,
    wake: impl Fn() + Send + 'static,
    probes: Option<super::probe::Pending>,
) {
    std::thread::Builder::new()
        .name("rtt-agents".into())
        .spawn(move || loop {
            for agent in &agents {
                if let Some(t) = probes.as_ref().and_then(|p| super::probe::take(p, agent)) {
                    if let Err(e) = ask_probes(agent, &t) {
                        log::warn!("{e:#}");
                    }
                }
                let report = fetch(agent);
                if out
                    .send(Polled {
                        agent: agent.clone(),
                        report,
                    })
                    .is_err()
                {
                    return;
                }
            }
            wake();
            std::thread::sleep(every);
        })
        .map(drop)
        .unwrap_or_else(|e| log::error!("cannot start the RTT agents' poller: {e}"));
}

/// GETs an agent's report.
pub fn fetch(url: &str) -> Result<Report> {
    let (addr, path) = director_plan::config::agent_url(url)?;
    let body = get(addr, &path).with_context(|| format!("agent {url}"))?;
    serde_json::from_slice(&body).with_context(|| format!("agent {url}: not an RTT report"))
}

/// `POST /probe` to the agent whose report is at `url` (the same host and port).
pub fn ask_probes(
    url: &str,
    targets: &[crate::api::ProbeTarget],
) -> Result<crate::api::ProbeAccepted> {
    let (addr, _) = director_plan::config::agent_url(url)?;
    let body = serde_json::to_vec(&crate::api::ProbeRequest {
        targets: targets.to_vec(),
    })?;
    let got = request(addr, "POST", "/probe", &body, Duration::from_secs(3))
        .with_context(|| format!("agent {url}: asking for {} probes", targets.len()))?;
    serde_json::from_slice(&got).with_context(|| format!("agent {url}: not a probe answer"))
}

/// `explain` as a running `run` decides it (its `/explain` on the metrics listener).
pub fn explain_from(
    addr: SocketAddr,
    service: &str,
    client: std::net::IpAddr,
) -> Result<crate::api::Explain> {
    let body = get(addr, &format!("/explain?service={service}&client={client}"))
        .with_context(|| format!("asking run at {addr}"))?;
    serde_json::from_slice(&body).with_context(|| {
        format!(
            "run at {addr}: {}",
            String::from_utf8_lossy(&body).trim_end()
        )
    })
}

/// A JSON document from a running `run`'s metrics listener (`/demand`, `/impact`).
pub fn ask_run<T: serde::de::DeserializeOwned>(addr: SocketAddr, path: &str) -> Result<T> {
    // `impact` compiles a whole table first: seconds at full scale.
    let body = get_within(addr, path, Duration::from_secs(120))
        .with_context(|| format!("asking run at {addr}"))?;
    serde_json::from_slice(&body).with_context(|| {
        format!(
            "run at {addr}: {}",
            String::from_utf8_lossy(&body).trim_end()
        )
    })
}

/// A JSON document from a running `run`'s metrics listener for a POSTed body (`/impact`).
pub fn post_run<T: serde::de::DeserializeOwned>(
    addr: SocketAddr,
    path: &str,
    body: &[u8],
) -> Result<T> {
    let body = request(addr, "POST", path, body, Duration::from_secs(120))
        .with_context(|| format!("asking run at {addr}"))?;
    serde_json::from_slice(&body).with_context(|| {
        format!(
            "run at {addr}: {}",
            String::from_utf8_lossy(&body).trim_end()
        )
    })
}

fn get(addr: SocketAddr, path: &str) -> Result<Vec<u8>> {
    get_within(addr, path, Duration::from_secs(3))
}

fn get_within(addr: SocketAddr, path: &str, wait: Duration) -> Result<Vec<u8>> {
    request(addr, "GET", path, &[], wait)
}

fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
    wait: Duration,
) -> Result<Vec<u8>> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    s.set_read_timeout(Some(wait))?;
    s.set_write_timeout(Some(Duration::from_secs(1)))?;
    let length = if method == "GET" {
        String::new()
    } else {
        format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        )
    };
    // One write: `write!` on the socket itself sends each piece of the format as it
    // comes, so the head would go out in a dozen small segments.
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\n{length}Connection: close\r\n\r\n"
    )
    .into_bytes();
    head.extend_from_slice(body);
    s.write_all(&head)?;
    let mut raw = Vec::new();
    s.take(MAX_BODY + 65_536).read_to_end(&mut raw)?;
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut resp = httparse::Response::new(&mut headers);
    let start = match resp.parse(&raw)? {
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
    fn a_report_is_fetched_from_a_local_server() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            // The whole head, however the client's segments arrive.
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = c.read(&mut buf).unwrap();
                assert!(n > 0, "the request ended inside its head");
                head.extend_from_slice(&buf[..n]);
            }
            assert!(String::from_utf8_lossy(&head).starts_with("GET /rtt HTTP/1.1"));
            let body = r#"{"site":"fra","window_s":10,"records":[{"prefix":"198.51.100.0/24",
                "min_ms":40.6,"median_ms":41.0,"samples":12,"window_start_ms":1,"window_end_ms":2}]}"#;
            write!(
                c,
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
        });
        let r = fetch(&format!("http://{addr}/rtt")).unwrap();
        assert_eq!(r.site, "fra");
        assert_eq!(r.records.len(), 1);
        assert_eq!(r.records[0].samples, 12);
        let e = fetch("http://127.0.0.1:1/rtt").unwrap_err();
        assert!(
            format!("{e:#}").contains("agent http://127.0.0.1:1/rtt"),
            "{e:#}"
        );
    }
}
