//! Polls the sites' RTT agents (`[rtt] agents`) over HTTP on a thread of its own and hands
//! each report to `run`'s loop, which merges them (director-plan's `live::rtt`). A fleet's
//! publisher may add a [`Feed`] of its own: the reports the agents wrote into its store.
//!
//! One HTTP/1.1 request per poll (`web::client`), over TLS with the controller's token or
//! certificate for `https://` agents.

use std::net::SocketAddr;
use std::sync::mpsc::Sender;
use std::time::Duration;

use anyhow::{Context, Result};
use director_plan::live::rtt::Record;
use serde::Deserialize;

use crate::web::{Client, Credential};

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

/// Polls every agent each `every`, sending each outcome on `out` and calling `wake` after
/// a round; ends when `out`'s receiver is gone. Before an agent's poll, what `probes` holds
/// for it is posted to it (`POST /probe`).
pub fn start(
    agents: Vec<String>,
    every: Duration,
    out: Sender<Polled>,
    wake: impl Fn() + Send + 'static,
    probes: Option<super::probe::Pending>,
    client: Client,
) {
    std::thread::Builder::new()
        .name("rtt-agents".into())
        .spawn(move || loop {
            for agent in &agents {
                if let Some(t) = probes.as_ref().and_then(|p| super::probe::take(p, agent)) {
                    if let Err(e) = ask_probes(&client, agent, &t) {
                        log::warn!("{e:#}");
                    }
                }
                let report = fetch(&client, agent);
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

/// How the controller reaches its agents (`[rtt] agent_ca`, `agent_cert`, `agent_key`,
/// `agent_token_file`): over TLS for `https://` agents, with the client certificate and
/// the token when given.
pub fn client(rtt: &director_plan::config::Rtt) -> Result<Client> {
    let identity = match (&rtt.agent_cert, &rtt.agent_key) {
        (Some(c), Some(k)) => Some((c.as_path(), k.as_path())),
        _ => None,
    };
    let credential = match &rtt.agent_token_file {
        Some(f) => Credential::Bearer(
            crate::web::client::secret_file(f).context("[rtt] agent_token_file")?,
        ),
        None => Credential::None,
    };
    Client::new(rtt.agent_ca.as_deref(), identity, credential).context("[rtt] agent_ca")
}

/// The client for `url`: TLS for `https://`, plain (no credential sent) for `http://`.
fn for_url<'a>(client: &'a Client, plain: &'a Client, url: &str) -> &'a Client {
    if url.starts_with("https://") {
        client
    } else {
        plain
    }
}

/// GETs an agent's report.
pub fn fetch(client: &Client, url: &str) -> Result<Report> {
    let (addr, path) = director_plan::config::agent_url(url)?;
    let plain = Client::plain();
    let body = for_url(client, &plain, url)
        .request(addr, "GET", &path, &[], Duration::from_secs(3))
        .with_context(|| format!("agent {url}"))?;
    serde_json::from_slice(&body).with_context(|| format!("agent {url}: not an RTT report"))
}

/// `POST /probe` to the agent whose report is at `url` (the same host and port).
pub fn ask_probes(
    client: &Client,
    url: &str,
    targets: &[crate::api::ProbeTarget],
) -> Result<crate::api::ProbeAccepted> {
    let (addr, _) = director_plan::config::agent_url(url)?;
    let body = serde_json::to_vec(&crate::api::ProbeRequest {
        targets: targets.to_vec(),
    })?;
    let plain = Client::plain();
    let got = for_url(client, &plain, url)
        .request(addr, "POST", "/probe", &body, Duration::from_secs(3))
        .with_context(|| format!("agent {url}: asking for {} probes", targets.len()))?;
    serde_json::from_slice(&got).with_context(|| format!("agent {url}: not a probe answer"))
}

/// `explain` as a running `run` decides it (its `/explain` on the metrics listener).
pub fn explain_from(
    client: &Client,
    addr: SocketAddr,
    service: &str,
    who: std::net::IpAddr,
) -> Result<crate::api::Explain> {
    let path = format!("/explain?service={service}&client={who}");
    let body = client
        .request(addr, "GET", &path, &[], Duration::from_secs(3))
        .with_context(|| format!("asking run at {addr}"))?;
    serde_json::from_slice(&body).with_context(|| {
        format!(
            "run at {addr}: {}",
            String::from_utf8_lossy(&body).trim_end()
        )
    })
}

/// A JSON document from a running `run`'s metrics listener (`/demand`, `/impact`).
pub fn ask_run<T: serde::de::DeserializeOwned>(
    client: &Client,
    addr: SocketAddr,
    path: &str,
) -> Result<T> {
    // `impact` compiles a whole table first: seconds at full scale.
    let body = client
        .request(addr, "GET", path, &[], Duration::from_secs(120))
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
    client: &Client,
    addr: SocketAddr,
    path: &str,
    body: &[u8],
) -> Result<T> {
    let body = client
        .request(addr, "POST", path, body, Duration::from_secs(120))
        .with_context(|| format!("asking run at {addr}"))?;
    serde_json::from_slice(&body).with_context(|| {
        format!(
            "run at {addr}: {}",
            String::from_utf8_lossy(&body).trim_end()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

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
        let r = fetch(&Client::plain(), &format!("http://{addr}/rtt")).unwrap();
        assert_eq!(r.site, "fra");
        assert_eq!(r.records.len(), 1);
        assert_eq!(r.records[0].samples, 12);
        let e = fetch(&Client::plain(), "http://127.0.0.1:1/rtt").unwrap_err();
        assert!(
            format!("{e:#}").contains("agent http://127.0.0.1:1/rtt"),
            "{e:#}"
        );
    }
}
