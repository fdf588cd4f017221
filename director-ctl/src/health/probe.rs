//! One health check against one server: a TCP connect, an HTTP GET or a DNS query, each
//! bounded by the check's timeout. Returns why it failed, in words for the log.

use std::net::SocketAddr;
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

use super::config::HttpUrl;

/// What to ask a server, resolved from the config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Probe {
    Tcp,
    Http {
        path: String,
        host: String,
        status: u16,
        body: Option<String>,
    },
    Dns {
        name: String,
        qtype: RecordType,
    },
}

/// The most of an HTTP answer read: a health page, not a download.
const HTTP_READ_LIMIT: usize = 64 * 1024;

pub async fn run(probe: &Probe, addr: SocketAddr, timeout: Duration) -> Result<(), String> {
    match tokio::time::timeout(timeout, attempt(probe, addr)).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {} ms", timeout.as_millis())),
    }
}

async fn attempt(probe: &Probe, addr: SocketAddr) -> Result<(), String> {
    match probe {
        Probe::Tcp => TcpStream::connect(addr)
            .await
            .map(drop)
            .map_err(|e| format!("connect: {e}")),
        Probe::Http {
            path,
            host,
            status,
            body,
        } => http(addr, path, host, *status, body.as_deref()).await,
        Probe::Dns { name, qtype } => dns(addr, name, *qtype).await,
    }
}

async fn http(
    addr: SocketAddr,
    path: &str,
    host: &str,
    want: u16,
    body: Option<&str>,
) -> Result<(), String> {
    let (code, got) = get(addr, host, path, body.is_some()).await?;
    if code != want {
        return Err(format!("HTTP status {code}, expected {want}"));
    }
    if let Some(b) = body {
        if !got.windows(b.len().max(1)).any(|w| w == b.as_bytes()) {
            return Err(format!("body lacks {b:?}"));
        }
    }
    Ok(())
}

/// An HTTP/1.1 GET: the status and, when `want_body`, the body (up to the read limit).
async fn get(
    addr: SocketAddr,
    host: &str,
    path: &str,
    want_body: bool,
) -> Result<(u16, Vec<u8>), String> {
    let mut s = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: director-health\r\n\
         Connection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| format!("send: {e}"))?;
    let mut buf = Vec::with_capacity(4096);
    // Reads to the end (the server closes) or to the limit; the status needs only the
    // head.
    loop {
        if buf.len() >= HTTP_READ_LIMIT {
            break;
        }
        let mut chunk = [0u8; 4096];
        let n = s
            .read(&mut chunk)
            .await
            .map_err(|e| format!("receive: {e}"))?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if !want_body && head_end(&buf).is_some() {
            break;
        }
    }
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut headers);
    let head = match resp.parse(&buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Err("incomplete HTTP answer".into()),
        Err(e) => return Err(format!("bad HTTP answer: {e}")),
    };
    let code = resp.code.unwrap_or(0);
    buf.drain(..head);
    Ok((code, buf))
}

/// A server's load from `url`: the body as one number, or with `metric`, the sum of that
/// metric's samples in Prometheus text.
pub async fn load(url: &HttpUrl, metric: Option<&str>, timeout: Duration) -> Result<f64, String> {
    let fetch = get(url.addr, &url.host, &url.path, true);
    let (code, body) = match tokio::time::timeout(timeout, fetch).await {
        Ok(r) => r?,
        Err(_) => return Err(format!("no answer within {} ms", timeout.as_millis())),
    };
    if code != 200 {
        return Err(format!("HTTP status {code}"));
    }
    let text = String::from_utf8_lossy(&body);
    parse_load(&text, metric)
}

/// The load in a body (see [`load`]).
pub fn parse_load(text: &str, metric: Option<&str>) -> Result<f64, String> {
    let Some(name) = metric else {
        return text
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| format!("not a number: {:?}", text.trim()));
    };
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape =
        prometheus_parse::Scrape::parse(lines).map_err(|e| format!("not Prometheus text: {e}"))?;
    let mut found = None;
    for s in scrape.samples.iter().filter(|s| s.metric == name) {
        let (prometheus_parse::Value::Counter(v)
        | prometheus_parse::Value::Gauge(v)
        | prometheus_parse::Value::Untyped(v)) = s.value
        else {
            return Err(format!("{name} is a histogram or summary, not a number"));
        };
        found = Some(found.unwrap_or(0.0) + v);
    }
    found
        .filter(|v: &f64| v.is_finite())
        .ok_or_else(|| format!("no sample of {name}"))
}

fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n")
}

async fn dns(addr: SocketAddr, name: &str, qtype: RecordType) -> Result<(), String> {
    let bind: SocketAddr = if addr.is_ipv4() {
        "0.0.0.0:0".parse().expect("a literal address")
    } else {
        "[::]:0".parse().expect("a literal address")
    };
    let sock = UdpSocket::bind(bind)
        .await
        .map_err(|e| format!("socket: {e}"))?;
    sock.connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let id = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
        & 0xffff) as u16;
    let name = Name::from_ascii(name).map_err(|e| format!("query name: {e}"))?;
    let mut q = Message::new();
    q.set_id(id)
        .set_message_type(MessageType::Query)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(false)
        .add_query(Query::query(name, qtype));
    let wire = q.to_vec().map_err(|e| format!("query: {e}"))?;
    sock.send(&wire).await.map_err(|e| format!("send: {e}"))?;
    let mut buf = [0u8; 4096];
    loop {
        let n = sock
            .recv(&mut buf)
            .await
            .map_err(|e| format!("receive: {e}"))?;
        // Not ours (a late answer to an earlier check): keep waiting within the timeout.
        let Ok(r) = Message::from_vec(&buf[..n]) else {
            continue;
        };
        if r.id() != id || r.message_type() != MessageType::Response {
            continue;
        }
        return match r.response_code() {
            ResponseCode::NoError => Ok(()),
            rc => Err(format!("DNS answer {rc}")),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// A one-shot HTTP server on loopback answering `reply` to every connection.
    async fn serve(reply: &'static str) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut c, _)) = l.accept().await {
                let mut b = [0u8; 1024];
                let _ = c.read(&mut b).await;
                let _ = c.write_all(reply.as_bytes()).await;
            }
        });
        addr
    }

    fn http_probe(status: u16, body: Option<&str>) -> Probe {
        Probe::Http {
            path: "/health".into(),
            host: "www.example.com".into(),
            status,
            body: body.map(str::to_string),
        }
    }

    #[test]
    fn http_checks_status_and_body() {
        rt().block_on(async {
            let t = Duration::from_secs(2);
            let ok = serve("HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nfra-1 ok").await;
            assert_eq!(run(&http_probe(200, None), ok, t).await, Ok(()));
            assert_eq!(run(&http_probe(200, Some("1 ok")), ok, t).await, Ok(()));
            let e = run(&http_probe(200, Some("healthy")), ok, t).await;
            assert!(e.unwrap_err().contains("lacks"));
            let e = run(&http_probe(204, None), ok, t).await;
            assert!(e.unwrap_err().contains("status 200, expected 204"));
            let bad = serve("SMTP ready\r\n\r\n").await;
            assert!(run(&http_probe(200, None), bad, t)
                .await
                .unwrap_err()
                .contains("bad HTTP"));
            assert_eq!(run(&Probe::Tcp, ok, t).await, Ok(()));
        });
    }

    #[test]
    fn load_is_a_number_or_a_prometheus_metric() {
        assert_eq!(parse_load(" 0.75\n", None), Ok(0.75));
        assert!(parse_load("high", None)
            .unwrap_err()
            .contains("not a number"));
        let text = "# HELP node_load1 1m load average.\n# TYPE node_load1 gauge\n\
                    node_load1 0.93\n# TYPE conns gauge\nconns{port=\"80\"} 10\n\
                    conns{port=\"443\"} 32\n";
        assert_eq!(parse_load(text, Some("node_load1")), Ok(0.93));
        assert_eq!(parse_load(text, Some("conns")), Ok(42.0));
        assert!(parse_load(text, Some("cpu"))
            .unwrap_err()
            .contains("no sample of cpu"));
    }

    /// A DNS server on loopback that answers NOERROR, or REFUSED for refused.example.
    async fn dns_server() -> SocketAddr {
        let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = sock.local_addr().unwrap();
        tokio::spawn(async move {
            let mut buf = [0u8; 512];
            while let Ok((n, from)) = sock.recv_from(&mut buf).await {
                let Ok(q) = Message::from_vec(&buf[..n]) else {
                    continue;
                };
                let refused = q.queries()[0].name().to_ascii() == "refused.example.";
                let mut r = Message::new();
                r.set_id(q.id())
                    .set_message_type(MessageType::Response)
                    .set_op_code(OpCode::Query)
                    .set_response_code(if refused {
                        ResponseCode::Refused
                    } else {
                        ResponseCode::NoError
                    })
                    .add_queries(q.queries().to_vec());
                let _ = sock.send_to(&r.to_vec().unwrap(), from).await;
            }
        });
        addr
    }

    #[test]
    fn dns_checks_want_a_noerror_answer() {
        rt().block_on(async {
            let addr = dns_server().await;
            let t = Duration::from_secs(2);
            let ok = Probe::Dns {
                name: "example.com".into(),
                qtype: RecordType::SOA,
            };
            assert_eq!(run(&ok, addr, t).await, Ok(()));
            let refused = Probe::Dns {
                name: "refused.example".into(),
                qtype: RecordType::A,
            };
            let e = run(&refused, addr, t).await.unwrap_err();
            assert!(e.starts_with("DNS answer"), "{e}");
        });
    }

    #[test]
    fn refused_and_silent_servers_fail() {
        rt().block_on(async {
            let t = Duration::from_millis(300);
            // A port nothing listens on: refused at once.
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let closed = l.local_addr().unwrap();
            drop(l);
            assert!(run(&Probe::Tcp, closed, t)
                .await
                .unwrap_err()
                .contains("connect"));
            // A UDP socket that never answers: the DNS check times out.
            let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let probe = Probe::Dns {
                name: "example.com".into(),
                qtype: RecordType::SOA,
            };
            let e = run(&probe, silent.local_addr().unwrap(), t).await;
            assert!(e.unwrap_err().contains("no answer within 300 ms"));
        });
    }
}
