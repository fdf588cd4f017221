//! The HTTP surfaces behind `[web]`: `run` in the edge namespace serves `/metrics`,
//! `/explain`, `/demand`, `/impact` and the map page (`/`) over TLS, with basic auth or
//! client certificates; real curl (and the CLI) ask with and without credentials.
//!
//! Run as root: `cargo test -p director-tests --test web -- --test-threads=1`.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use director_tests::config::Doc;
use director_tests::netns::{ctl_binary, describe, Controller, Lab};
use director_tests::pki::{hash_password, Pki};
use director_tests::tempdir::TempDir;

const WWW: &str = "www.example.com";
/// In the edge namespace: `[metrics]` and `[ui]` on one listener.
const LISTEN: &str = "127.0.0.1:9283";
const USER: &str = "prom";
const PASSWORD: &str = "correct horse battery staple";

fn config(dir: &TempDir, web: &str) -> String {
    let rtt = dir.path("rtt.csv");
    std::fs::write(&rtt, "198.51.100.0/24,a,10\n198.51.100.0/24,b,50\n").unwrap();
    let mut c = Doc::two_sites();
    c.add(&format!(
        "[metrics]\nlisten = {LISTEN:?}\n\n[ui]\nlisten = {LISTEN:?}\n\n\
         [demand]\ninterval = 1.0\nsample = 1\n\n\
         [rtt]\nfiles = [{:?}]\n\n{web}",
        rtt.display().to_string()
    ));
    c.text()
}

fn start(lab: &Lab, dir: &TempDir, web: &str) -> Controller {
    lab.attach();
    let cfg = dir.path("director.toml");
    std::fs::write(&cfg, config(dir, web)).unwrap();
    let mut run = Controller::start(lab, &cfg, &dir.path("run.log"));
    run.wait_for("entries written", 1, Duration::from_secs(60));
    run
}

/// curl in the edge namespace: (HTTP status, 0 when there was none; body; curl's exit).
fn curl(lab: &Lab, args: &[&str]) -> (u16, String, i32) {
    let out = Command::new("ip")
        .args(["netns", "exec", &lab.edge_ns, "curl", "-sS", "-m", "20"])
        .args(["-w", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("running curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (
        code.trim().parse().unwrap_or(0),
        body.to_string(),
        out.status.code().unwrap_or(-1),
    )
}

/// The CLI in the edge namespace, with `env` set.
fn ctl(lab: &Lab, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new("nsenter");
    c.arg(format!("--net=/run/netns/{}", lab.edge_ns))
        .arg(ctl_binary())
        .args(["--pin-dir"])
        .arg(&lab.pin_dir)
        .args(args)
        .env_remove("DIRECTOR_WEB_PASSWORD");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("running director-ctl")
}

fn url(path: &str) -> String {
    format!("https://{LISTEN}{path}")
}

fn explain_path() -> String {
    format!("/explain?service={WWW}&client=198.51.100.7")
}

/// Asks `path` with `auth` (curl's arguments) until it answers 200 (the first demand cycle
/// may still be running); panics after 15 s.
fn ok_within(lab: &Lab, ca: &Path, auth: &[&str], path: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    let ca = ca.display().to_string();
    loop {
        let mut args = vec!["--cacert", &ca];
        args.extend_from_slice(auth);
        let u = url(path);
        args.push(&u);
        let (code, body, _) = curl(lab, &args);
        if code == 200 {
            return body;
        }
        assert!(
            code != 401 && Instant::now() < deadline,
            "{path}: {code} {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn every_surface_needs_basic_auth_over_tls_when_web_asks_for_it() {
    let lab = Lab::new();
    let dir = TempDir::new("web", "basic");
    let pki = Pki::new(dir.root(), &[]);
    let web = format!(
        "[web]\ntls_cert = {:?}\ntls_key = {:?}\n[web.basic_auth]\n{USER} = {:?}\n",
        pki.server_cert.display().to_string(),
        pki.server_key.display().to_string(),
        hash_password(PASSWORD)
    );
    let mut run = start(&lab, &dir, &web);
    run.wait_for("the map page on https://", 1, Duration::from_secs(5));
    let ca = pki.ca.display().to_string();
    let good = format!("{USER}:{PASSWORD}");
    let wrong = format!("{USER}:{PASSWORD}!");
    let paths = ["/metrics", &explain_path(), "/demand", "/"];
    for path in paths {
        let u = url(path);
        let (code, body, _) = curl(&lab, &["--cacert", &ca, &u]);
        assert_eq!(code, 401, "{path} without credentials: {body}");
        let (code, body, _) = curl(&lab, &["--cacert", &ca, "-u", &wrong, &u]);
        assert_eq!(code, 401, "{path} with a wrong password: {body}");
        let (code, body, _) = curl(&lab, &["--cacert", &ca, "-u", "root:x", &u]);
        assert_eq!(code, 401, "{path} as an unknown user: {body}");
        let body = ok_within(&lab, &pki.ca, &["-u", &good], path);
        assert!(!body.is_empty(), "{path}");
    }
    // The page is the page, the metrics are Prometheus text.
    assert!(ok_within(&lab, &pki.ca, &["-u", &good], "/").contains("<html"));
    assert!(ok_within(&lab, &pki.ca, &["-u", &good], "/metrics").contains("director_answers_total"));

    // /impact: the candidate is not even read without credentials.
    let candidate = std::fs::read_to_string(dir.path("director.toml")).unwrap();
    let u = url("/impact");
    let post = ["-X", "POST", "--data-binary", candidate.as_str()];
    let mut args = vec!["--cacert", ca.as_str()];
    args.extend_from_slice(&post);
    args.push(&u);
    let (code, body, _) = curl(&lab, &args);
    assert_eq!(code, 401, "/impact without credentials: {body}");
    args.splice(2..2, ["-u", good.as_str()]);
    let (code, body, _) = curl(&lab, &args);
    assert_eq!(code, 200, "/impact with credentials: {body}");

    // Plain HTTP to the TLS listener gets no answer.
    let (code, _, exit) = curl(&lab, &[&format!("http://{LISTEN}/metrics")]);
    assert!(code != 200 && exit != 0, "plain HTTP answered {code}");

    // The CLI: refused without the password, answered with it (from the environment;
    // never on the command line).
    let demand = ["demand", "--run", LISTEN, "--json", "--web-ca", &ca];
    let out = ctl(&lab, &demand, &[]);
    assert!(!out.status.success());
    let mut with_user = demand.to_vec();
    with_user.extend(["--web-user", USER]);
    let out = ctl(&lab, &with_user, &[]);
    assert!(
        !out.status.success() && describe(&out).contains("DIRECTOR_WEB_PASSWORD"),
        "{}",
        describe(&out)
    );
    let out = ctl(&lab, &with_user, &[("DIRECTOR_WEB_PASSWORD", PASSWORD)]);
    assert!(out.status.success(), "demand: {}", describe(&out));
    let d: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(d.get("services").is_some(), "{d}");
    let out = ctl(&lab, &with_user, &[("DIRECTOR_WEB_PASSWORD", "nope")]);
    assert!(
        !out.status.success() && describe(&out).contains("401"),
        "{}",
        describe(&out)
    );
    // The password from a file, for explain and impact.
    let pw = dir.path("password");
    std::fs::write(&pw, format!("{PASSWORD}\n")).unwrap();
    let pw = pw.display().to_string();
    let auth = [
        "--web-ca",
        &ca,
        "--web-user",
        USER,
        "--web-password-file",
        &pw,
    ];
    let mut explain = vec![
        "explain",
        "--run",
        LISTEN,
        "--service",
        WWW,
        "--client",
        "198.51.100.7",
        "--json",
    ];
    explain.extend(auth);
    let out = ctl(&lab, &explain, &[]);
    assert!(out.status.success(), "explain: {}", describe(&out));
    let cfg = dir.path("director.toml").display().to_string();
    let mut impact = vec!["impact", "--run", LISTEN, "--config", &cfg, "--json"];
    impact.extend(auth);
    let out = ctl(&lab, &impact, &[]);
    assert!(out.status.success(), "impact: {}", describe(&out));
}

#[test]
fn client_certificates_from_another_ca_or_none_are_refused_at_the_handshake() {
    let lab = Lab::new();
    let dir = TempDir::new("web", "mtls");
    let pki = Pki::new(dir.root(), &[]);
    let web = format!(
        "[web]\ntls_cert = {:?}\ntls_key = {:?}\nclient_ca = {:?}\n",
        pki.server_cert.display().to_string(),
        pki.server_key.display().to_string(),
        pki.ca.display().to_string(),
    );
    let _run = start(&lab, &dir, &web);
    let s = |p: &Path| p.display().to_string();
    let (ca, cert, key) = (s(&pki.ca), s(&pki.client_cert), s(&pki.client_key));
    let (other_cert, other_key) = (s(&pki.other_client_cert), s(&pki.other_client_key));
    for path in ["/metrics", &explain_path(), "/demand", "/"] {
        let u = url(path);
        let (code, body, exit) = curl(&lab, &["--cacert", &ca, &u]);
        assert!(
            code == 0 && exit != 0,
            "{path} without a certificate: {code} {body}"
        );
        let (code, body, exit) = curl(
            &lab,
            &[
                "--cacert",
                &ca,
                "--cert",
                &other_cert,
                "--key",
                &other_key,
                &u,
            ],
        );
        assert!(
            code == 0 && exit != 0,
            "{path} with another CA's certificate: {code} {body}"
        );
        ok_within(&lab, &pki.ca, &["--cert", &cert, "--key", &key], path);
    }
    let demand = ["demand", "--run", LISTEN, "--json", "--web-ca", &ca];
    let out = ctl(&lab, &demand, &[]);
    assert!(!out.status.success(), "{}", describe(&out));
    let mut with_cert = demand.to_vec();
    with_cert.extend(["--web-cert", &cert, "--web-key", &key]);
    let out = ctl(&lab, &with_cert, &[]);
    assert!(out.status.success(), "demand: {}", describe(&out));
}
