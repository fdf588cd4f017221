//! A real browser for the map page's test: Debian's headless Chromium, driven over
//! WebDriver (W3C) by its ChromeDriver, both inside a lab's namespace so the page is
//! fetched from `run`'s listener there. The WebDriver calls go through curl in the same
//! namespace, as the metrics tests read `/metrics`.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::tempdir::TempDir;

pub struct Browser {
    ns: String,
    port: u16,
    session: String,
    driver: Child,
    _profile: TempDir,
}

impl Browser {
    /// Starts ChromeDriver on `port` in `ns` and opens a session with a `width` x `height`
    /// window and a fresh profile.
    pub fn start(ns: &str, port: u16, width: u32, height: u32) -> Result<Browser, String> {
        let profile = TempDir::new("browser", "profile");
        let mut c = Command::new("nsenter");
        c.arg(format!("--net=/run/netns/{ns}"))
            .arg("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group, so Chromium's processes go with it.
            .process_group(0);
        let driver = c
            .spawn()
            .map_err(|e| format!("starting chromedriver (Debian's chromium-driver): {e}"))?;
        let mut b = Browser {
            ns: ns.to_string(),
            port,
            session: String::new(),
            driver,
            _profile: profile,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(v) = b.call("GET", "/status", None) {
                if v["value"]["ready"] == true {
                    break;
                }
            }
            if Instant::now() > deadline {
                return Err("chromedriver not ready after 20 s".into());
            }
            sleep(Duration::from_millis(100));
        }
        // The flags the machine's notes give for a closed network: no background
        // connections, no updates, no sync, no sandbox (root).
        let args = vec![
            "--headless=new".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-quic".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--disable-dev-shm-usage".into(),
            "--hide-scrollbars".into(),
            format!("--user-data-dir={}", b._profile.root().display()),
            format!("--window-size={width},{height}"),
        ];
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": args}
        }}});
        let v = b.call("POST", "/session", Some(&caps))?;
        b.session = v["value"]["sessionId"]
            .as_str()
            .ok_or_else(|| format!("no session id in {v}"))?
            .to_string();
        Ok(b)
    }

    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, String> {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net=/run/netns/{}", self.ns))
            .args(["curl", "-sS", "--max-time", "60", "-X", method])
            .arg(format!("http://127.0.0.1:{}{path}", self.port));
        if let Some(b) = body {
            c.args(["-H", "Content-Type: application/json", "--data-binary"])
                .arg(b.to_string());
        }
        let out = c.output().map_err(|e| format!("running curl: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "{method} {path}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let v: Value = serde_json::from_slice(&out.stdout).map_err(|e| {
            format!(
                "{method} {path}: not JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })?;
        if let Some(err) = v["value"]["error"].as_str() {
            return Err(format!(
                "{method} {path}: {err}: {}",
                v["value"]["message"].as_str().unwrap_or("")
            ));
        }
        Ok(v)
    }

    fn session_call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, String> {
        self.call(method, &format!("/session/{}{path}", self.session), body)
    }

    pub fn open(&self, url: &str) -> Result<(), String> {
        self.session_call("POST", "/url", Some(&json!({ "url": url })))
            .map(|_| ())
    }

    /// Runs `script` (a function body; `return` gives the value) in the page.
    pub fn eval(&self, script: &str) -> Result<Value, String> {
        let body = json!({"script": script, "args": []});
        self.session_call("POST", "/execute/sync", Some(&body))
            .map(|v| v["value"].clone())
    }

    /// Evaluates `script` until it returns something other than null/false, or `limit`.
    pub fn wait_for(&self, script: &str, limit: Duration) -> Result<Value, String> {
        let deadline = Instant::now() + limit;
        loop {
            let v = self.eval(script)?;
            if !(v.is_null() || v == false) {
                return Ok(v);
            }
            if Instant::now() > deadline {
                return Err(format!("not true after {limit:?}: {script}"));
            }
            sleep(Duration::from_millis(200));
        }
    }

    /// The viewport as PNG.
    pub fn screenshot(&self) -> Result<Vec<u8>, String> {
        let v = self.session_call("GET", "/screenshot", None)?;
        let b64 = v["value"].as_str().ok_or("no screenshot data")?;
        base64(b64)
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self.session_call("DELETE", "", None);
        }
        let pid = self.driver.id() as libc::pid_t;
        // The group we made: chromedriver and the Chromium it started.
        unsafe { libc::kill(-pid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.driver.try_wait() {
                break;
            }
            sleep(Duration::from_millis(50));
        }
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        let _ = self.driver.wait();
    }
}

/// Standard base64 (WebDriver's screenshots).
fn base64(s: &str) -> Result<Vec<u8>, String> {
    let val = |c: u8| -> Result<u32, String> {
        Ok(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return Err(format!("not base64: {:?}", c as char)),
        } as u32)
    };
    let bytes: Vec<u8> = s.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for chunk in bytes.chunks(4) {
        let pad = chunk.iter().rev().take_while(|c| **c == b'=').count();
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            let v = if *c == b'=' { 0 } else { val(*c)? };
            n |= v << (18 - 6 * i);
        }
        let got = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&got[..3 - pad.min(2)]);
    }
    Ok(out)
}

/// A PNG's width and height, from its header.
pub fn png_size(png: &[u8]) -> Option<(u32, u32)> {
    if png.len() < 24 || &png[..8] != b"\x89PNG\r\n\x1a\n" || &png[12..16] != b"IHDR" {
        return None;
    }
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    Some((be(&png[16..20]), be(&png[20..24])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_known_strings() {
        assert_eq!(base64("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(base64("aGVsbG8h").unwrap(), b"hello!");
        assert_eq!(base64("aGk=").unwrap(), b"hi");
        assert_eq!(base64("YQ==").unwrap(), b"a");
        assert!(base64("a*==").is_err());
    }
}
