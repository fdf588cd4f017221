//! HTTP redirect mode end to end: `director-ctl run` with `[http] listen` on the edge, two
//! client networks measured nearer different servers, and curl from addresses in each.
//! Checked: the 302 and its exact Location (a server's hostname as written, an address
//! otherwise, IPv6 in brackets, the Host's port, path and query kept), the same server as
//! a DNS answer for the same address, 404 for unknown hosts, X-Forwarded-For ignored from
//! an untrusted peer and honoured from a trusted one, 307 for POST, the fallback to the
//! alternate and 503 without servers, hostnames re-read on a reload, and the counters.
//!
//! Run as root: `cargo test -p director-tests --test redirect -- --test-threads=1`.

use std::{
    fs,
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use director_tests::config::Doc;
use director_tests::metrics;
use director_tests::netns::{describe, Controller, Lab, Reply, CLIENT_V4, EDGE_V4, EDGE_V6};
use director_tests::tempdir::{replace_file, TempDir};

const WWW: &str = "www.example.com";
const API: &str = "api.example.com";
const LONE: &str = "lone.example.com";
/// x's and y's addresses, as tests/data/two_sites.toml gives them.
const X_V4: &str = "198.51.100.10";
const Y_V4: &str = "198.51.100.20";
const Y_V6: &str = "2001:db8:100::20";
const X_HOST: &str = "X-1.CDN.Example.net";
/// A second client address, in the other half of the client network (and among the
/// trusted proxies).
const CLIENT_HIGH: &str = "192.0.2.200";
const METRICS: &str = "127.0.0.1:9273";

/// x is nearer 192.0.2.0/25, y nearer 192.0.2.128/25; elsewhere (no RTT) y's preference
/// wins. x has a hostname, y none. api falls back to an alternate domain; lone has no
/// fallback.
fn config(rtt: &Path, y_hostname: Option<&str>) -> String {
    let mut c = Doc::two_sites();
    c.set("server", "x", "hostname", X_HOST);
    if let Some(h) = y_hostname {
        c.set("server", "y", "hostname", h);
    }
    c.add(&format!(
        "[http]\nlisten = [\"{EDGE_V4}:80\", \"[{EDGE_V6}]:80\"]\n\
         trusted_proxies = [\"192.0.2.192/26\"]\n\n\
         [metrics]\nlisten = {METRICS:?}\n\n\
         [[service]]\nname = {API:?}\nservers = [\"y\"]\npriority = {{ admin = 1 }}\n\
         alternate = \"www.backup.example.net\"\n\n\
         [[service]]\nname = {LONE:?}\nservers = [\"y\"]\npriority = {{ admin = 1 }}\n\n\
         [rtt]\nfiles = [{:?}]\n",
        rtt.display().to_string()
    ));
    c.text()
}

/// What curl saw: the status and the Location header (if any).
#[derive(Debug, PartialEq)]
struct Seen {
    status: u16,
    location: Option<String>,
}

/// One request from the client namespace, from `source`, with these headers; bounded to 5 s.
fn curl(lab: &Lab, source: &str, url: &str, headers: &[&str], method: &str) -> Seen {
    let mut cmd = vec![
        "curl",
        "-sS",
        "--max-time",
        "5",
        "-o",
        "/dev/null",
        "-D",
        "-",
        "-X",
        method,
        "--interface",
        source,
    ];
    for h in headers {
        cmd.extend(["-H", h]);
    }
    cmd.extend(["-g", url]);
    let out = lab.client(&cmd);
    assert!(out.status.success(), "curl {cmd:?}: {}", describe(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let status = text
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let location = text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("location")
            .then(|| v.trim().to_string())
    });
    Seen { status, location }
}

fn get(lab: &Lab, source: &str, host: &str, path: &str, extra: &[&str]) -> Seen {
    let mut headers = vec![format!("Host: {host}")];
    headers.extend(extra.iter().map(ToString::to_string));
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
    curl(
        lab,
        source,
        &format!("http://{EDGE_V4}{path}"),
        &headers,
        "GET",
    )
}

fn redirect(location: &str) -> Seen {
    Seen {
        status: 302,
        location: Some(location.to_string()),
    }
}

/// The A record director's XDP program answers for `name` to a query from `source`.
fn dns_a(lab: &Lab, source: &str, name: &str) -> String {
    let r = Reply::parse(&lab.dig(&["-b", source, &format!("@{EDGE_V4}"), name, "A"]));
    assert_eq!(r.status.as_deref(), Some("NOERROR"), "{}", r.text);
    r.data("A").join(",")
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("running ip");
    assert!(out.status.success(), "ip {args:?}: {}", describe(&out));
}

/// Asks until `source` is redirected to `want` for `host`; fails after `within`.
fn until(lab: &Lab, ctl: &Controller, source: &str, host: &str, want: &Seen, within: Duration) {
    let t = Instant::now();
    loop {
        let got = get(lab, source, host, "/", &[]);
        if &got == want {
            return;
        }
        assert!(
            t.elapsed() < within,
            "{host} from {source}: {got:?}, not {want:?}, after {within:?}; run's log:\n{}",
            ctl.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn http_clients_are_redirected_to_their_best_server() {
    let lab = Lab::new();
    lab.attach();
    ip(&[
        "-n",
        &lab.client_ns,
        "addr",
        "add",
        &format!("{CLIENT_HIGH}/24"),
        "dev",
        &lab.client_if,
    ]);
    let dir = TempDir::new("redirect", "config");
    let rtt = dir.path("rtt.csv");
    fs::write(
        &rtt,
        "192.0.2.0/25,a,10\n192.0.2.0/25,b,50\n192.0.2.128/25,a,50\n192.0.2.128/25,b,10\n",
    )
    .unwrap();
    let cfg = dir.path("director.toml");
    fs::write(&cfg, config(&rtt, None)).unwrap();
    let mut ctl = Controller::start(&lab, &cfg, &dir.path("run.log"));
    ctl.wait_for("HTTP redirects on", 1, Duration::from_secs(60));

    // The low half gets x, by its hostname as written, path and query kept; the high half
    // y, by its address. DNS from the same addresses says the same.
    let path = "/a/b.html?x=1&y=%20z";
    assert_eq!(
        get(&lab, CLIENT_V4, WWW, path, &[]),
        redirect(&format!("http://{X_HOST}{path}"))
    );
    assert_eq!(
        get(&lab, CLIENT_HIGH, WWW, path, &[]),
        redirect(&format!("http://{Y_V4}{path}"))
    );
    assert_eq!(dns_a(&lab, CLIENT_V4, WWW), X_V4);
    assert_eq!(dns_a(&lab, CLIENT_HIGH, WWW), Y_V4);
    // Host case, a trailing dot and a port: the same service; the port stays in the URL.
    assert_eq!(
        get(&lab, CLIENT_V4, "WWW.Example.COM.:8080", "/", &[]),
        redirect(&format!("http://{X_HOST}:8080/"))
    );
    // An IPv6 client asks AAAA: y's IPv6 address, in brackets.
    let v6 = curl(
        &lab,
        "2001:db8::2",
        &format!("http://[{EDGE_V6}]/v6?q"),
        &[&format!("Host: {WWW}")],
        "GET",
    );
    assert_eq!(v6, redirect(&format!("http://[{Y_V6}]/v6?q")));

    // Unknown names and address literals are not services.
    assert_eq!(
        get(&lab, CLIENT_V4, "nowhere.example.com", "/", &[]).status,
        404
    );
    assert_eq!(get(&lab, CLIENT_V4, EDGE_V4, "/", &[]).status, 404);
    assert_eq!(get(&lab, CLIENT_V4, "bad host!", "/", &[]).status, 400);

    // X-Forwarded-For from an untrusted peer is the client's own claim: ignored.
    assert_eq!(
        get(&lab, CLIENT_V4, WWW, "/", &["X-Forwarded-For: 192.0.2.130"]),
        redirect(&format!("http://{X_HOST}/"))
    );
    // From a trusted proxy (192.0.2.192/26) it names the client: the last untrusted
    // address, past trusted hops, whatever the client wrote left of it.
    assert_eq!(
        get(&lab, CLIENT_HIGH, WWW, "/", &["X-Forwarded-For: 192.0.2.5"]),
        redirect(&format!("http://{X_HOST}/"))
    );
    assert_eq!(
        get(
            &lab,
            CLIENT_HIGH,
            WWW,
            "/",
            &["X-Forwarded-For: 192.0.2.130, 192.0.2.5, 192.0.2.201"]
        ),
        redirect(&format!("http://{X_HOST}/"))
    );
    assert_eq!(
        get(&lab, CLIENT_HIGH, WWW, "/", &[]),
        redirect(&format!("http://{Y_V4}/"))
    );

    // Other methods keep theirs: 307.
    let post = curl(
        &lab,
        CLIENT_V4,
        &format!("http://{EDGE_V4}/form"),
        &[&format!("Host: {WWW}")],
        "POST",
    );
    assert_eq!(
        post,
        Seen {
            status: 307,
            location: Some(format!("http://{X_HOST}/form")),
        }
    );

    // y down: api (only y) goes to its alternate, lone (no fallback) has nothing: 503;
    // www's high half goes to x at once, as the kernel's answers do.
    lab.ctl_ok(&["server", "set", "y", "--down"]);
    assert_eq!(
        get(&lab, CLIENT_V4, API, "/p?q=1", &[]),
        redirect("http://www.backup.example.net/p?q=1")
    );
    assert_eq!(get(&lab, CLIENT_V4, LONE, "/", &[]).status, 503);
    assert_eq!(
        get(&lab, CLIENT_HIGH, WWW, "/", &[]),
        redirect(&format!("http://{X_HOST}/"))
    );
    lab.ctl_ok(&["server", "set", "y", "--up"]);
    until(
        &lab,
        &ctl,
        CLIENT_HIGH,
        WWW,
        &redirect(&format!("http://{Y_V4}/")),
        Duration::from_secs(10),
    );

    // A hostname given to y in a reloaded config is used from then on.
    let updates = ctl.count("up to date again");
    replace_file(&cfg, &config(&rtt, Some("y.cdn.example.net")));
    ctl.wait_for("up to date again", updates + 1, Duration::from_secs(30));
    assert_eq!(
        get(&lab, CLIENT_HIGH, WWW, "/", &[]),
        redirect("http://y.cdn.example.net/")
    );

    // Every outcome counted.
    let samples = metrics::scrape(&lab.edge_ns, METRICS).unwrap_or_else(|e| panic!("{e}"));
    let n = |outcome: &str| {
        metrics::value(
            &samples,
            "director_http_requests_total",
            &[("outcome", outcome)],
        )
        .unwrap_or_else(|| panic!("no {outcome} count in {samples:?}"))
    };
    assert_eq!(n("not_found"), 2.0);
    assert_eq!(n("bad_request"), 1.0);
    assert_eq!(n("fallback"), 1.0);
    assert_eq!(n("no_server"), 1.0);
    assert!(n("redirect") >= 12.0, "{}", n("redirect"));
    assert_eq!(n("error"), 0.0);
    ctl.assert_alive();
    ctl.stop();
}
