//! The operator's hooks: a replica to copy to, or to retire. Each runs on a thread of its
//! own (a copy may take minutes) and its outcome is logged; what a replica does next never
//! waits for it: it gets clients only once its health check passes, whatever the hook said.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::api::{Event, Log};
use crate::health::config::HttpUrl;

/// What a hook is told, as JSON (on the command's standard input, or as the POST body).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HookCall {
    /// "copy" or "retire".
    pub event: String,
    pub service: String,
    pub server: String,
    pub site: String,
    /// The server's bonus when the hook was called.
    pub bonus: f64,
    /// Unix time, seconds.
    pub time: f64,
}

/// One hook: a command, a URL, or both (both are called).
#[derive(Clone, Debug, Default)]
pub struct Hook {
    pub command: Vec<String>,
    pub url: Option<String>,
    pub timeout: Duration,
}

impl Hook {
    pub fn is_set(&self) -> bool {
        !self.command.is_empty() || self.url.is_some()
    }

    /// Calls the hook on a thread of its own and logs how it ended.
    pub fn call(&self, call: HookCall, log: Log) {
        if !self.is_set() {
            return;
        }
        let hook = self.clone();
        let spawned = std::thread::Builder::new()
            .name("demand-hook".into())
            .spawn(move || {
                let body = serde_json::to_vec(&call).unwrap_or_default();
                let mut errors = Vec::new();
                if !hook.command.is_empty() {
                    if let Err(e) = run_command(&hook.command, &call, &body, hook.timeout) {
                        errors.push(format!("{e:#}"));
                    }
                }
                if let Some(u) = &hook.url {
                    if let Err(e) = post(u, &body, hook.timeout) {
                        errors.push(format!("{u}: {e:#}"));
                    }
                }
                let error = (!errors.is_empty()).then(|| errors.join("; "));
                let message = match &error {
                    None => format!(
                        "replica hook {} for {} on {} done",
                        call.event, call.service, call.server
                    ),
                    Some(e) => format!(
                        "replica hook {} for {} on {} failed: {e}",
                        call.event, call.service, call.server
                    ),
                };
                log.event(
                    Event::ReplicaHook {
                        hook: call.event.clone(),
                        service: call.service.clone(),
                        server: call.server.clone(),
                        error,
                    },
                    message,
                );
            });
        if let Err(e) = spawned {
            log::error!("cannot start a replica hook: {e}");
        }
    }
}

/// Runs the program with the call as JSON on its standard input and as environment
/// variables; killed after `timeout`.
fn run_command(cmd: &[String], call: &HookCall, body: &[u8], timeout: Duration) -> Result<()> {
    let (program, args) = cmd.split_first().context("an empty command")?;
    let mut child = Command::new(program)
        .args(args)
        .env("DIRECTOR_HOOK", &call.event)
        .env("DIRECTOR_SERVICE", &call.service)
        .env("DIRECTOR_SERVER", &call.server)
        .env("DIRECTOR_SITE", &call.site)
        .env("DIRECTOR_BONUS", format!("{}", call.bonus))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {program}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A hook that does not read its input is fine.
        let _ = stdin.write_all(body);
    }
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            if !status.success() {
                bail!("{program} exited with {status}");
            }
            return Ok(());
        }
        if start.elapsed() >= timeout {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "{program} took more than {} s: killed",
                timeout.as_secs_f64()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// POSTs the body as JSON; any 2xx status is success.
fn post(url: &str, body: &[u8], timeout: Duration) -> Result<()> {
    let u = HttpUrl::parse(url)?;
    let t = timeout.max(Duration::from_millis(100));
    let mut s = TcpStream::connect_timeout(&u.addr, t).context("connecting")?;
    s.set_read_timeout(Some(t))?;
    s.set_write_timeout(Some(t))?;
    let mut req = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        u.path,
        u.host,
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    s.write_all(&req)?;
    let mut raw = Vec::new();
    s.take(65_536).read_to_end(&mut raw)?;
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut resp = httparse::Response::new(&mut headers);
    resp.parse(&raw).context("not an HTTP response")?;
    match resp.code {
        Some(c) if (200..300).contains(&c) => Ok(()),
        c => bail!("HTTP status {}", c.unwrap_or(0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call() -> HookCall {
        HookCall {
            event: "copy".into(),
            service: "www.example.".into(),
            server: "fra-2".into(),
            site: "fra".into(),
            bonus: 1234.5,
            time: 1.0,
        }
    }

    #[test]
    fn a_command_gets_the_call_on_stdin_and_in_its_environment() {
        let dir = std::env::temp_dir().join(format!("director-hook-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("out");
        let script = format!(
            "cat > {o}.json; echo \"$DIRECTOR_HOOK $DIRECTOR_SERVER\" > {o}.env",
            o = out.display()
        );
        let cmd = vec!["sh".to_string(), "-c".to_string(), script];
        let c = call();
        let body = serde_json::to_vec(&c).unwrap();
        run_command(&cmd, &c, &body, Duration::from_secs(5)).unwrap();
        let got: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.with_extension("json")).unwrap()).unwrap();
        assert_eq!(got["server"], "fra-2");
        assert_eq!(got["bonus"], 1234.5);
        let env = std::fs::read_to_string(out.with_extension("env")).unwrap();
        assert_eq!(env.trim(), "copy fra-2");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_failing_or_slow_command_is_an_error() {
        let c = call();
        let fail = vec!["sh".into(), "-c".into(), "exit 3".into()];
        let e = run_command(&fail, &c, b"{}", Duration::from_secs(5)).unwrap_err();
        assert!(format!("{e:#}").contains("exit status: 3"), "{e:#}");
        let slow = vec!["sleep".into(), "5".into()];
        let e = run_command(&slow, &c, b"{}", Duration::from_millis(200)).unwrap_err();
        assert!(format!("{e:#}").contains("killed"), "{e:#}");
    }

    #[test]
    fn a_post_reaches_a_listener_and_its_status_counts() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let mut got = Vec::new();
            for status in [200, 500] {
                let (mut s, _) = l.accept().unwrap();
                let mut req = Vec::new();
                let mut buf = [0u8; 4096];
                while !req.ends_with(b"}") {
                    let n = s.read(&mut buf).unwrap();
                    assert!(n > 0, "the request ended early");
                    req.extend_from_slice(&buf[..n]);
                }
                got.push(String::from_utf8_lossy(&req).to_string());
                write!(s, "HTTP/1.1 {status} X\r\nContent-Length: 0\r\n\r\n").unwrap();
            }
            got
        });
        let url = format!("http://{addr}/hook");
        post(&url, br#"{"a":1}"#, Duration::from_secs(2)).unwrap();
        assert!(post(&url, b"{}", Duration::from_secs(2)).is_err());
        let got = server.join().unwrap();
        assert!(got[0].starts_with("POST /hook HTTP/1.1"), "{}", got[0]);
        assert!(got[0].ends_with(r#"{"a":1}"#), "{}", got[0]);
    }
}
