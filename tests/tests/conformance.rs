//! DistributedDirector's documented behaviour, end to end: `director-ctl run` computes the
//! decisions, the kernel answers dig, and thousands of answers are judged against what the
//! DD configuration guide promises: determinism without `random` (a client keeps its
//! server, clients spread), the `portion` and `random` draws (chi-square at a fixed
//! significance, so the tests are not flaky), and convergence to the re-sorted answer after
//! a server goes down.
//!
//! Run as root: `cargo test -p director-tests --test conformance -- --test-threads=1`.

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use director_tests::netns::{describe, Controller, Lab, EDGE_V4};
use director_tests::tempdir::TempDir;

/// Queries per judged sample: enough for the chi-square test to see a 10 % deviation.
const QUERIES: usize = 2000;

/// Chi-square critical values at significance 0.001 for 1 and 2 degrees of freedom: a
/// correct kernel fails such a test once in a thousand runs.
const CHI2_P001: [f64; 2] = [10.828, 13.816];

const SERVERS: [(&str, &str); 3] = [
    ("s1", "198.51.100.11"),
    ("s2", "198.51.100.12"),
    ("s3", "198.51.100.13"),
];

/// Three sites a, b, c with one server each (s1, s2, s3), RTTs 100, 109 and 115 ms from
/// every client, and `services` appended.
fn config(dir: &TempDir, services: &str) -> PathBuf {
    let rtt = dir.path("rtt.csv");
    fs::write(
        &rtt,
        "prefix,site,rtt_ms\n0.0.0.0/0,a,100\n0.0.0.0/0,b,109\n0.0.0.0/0,c,115\n",
    )
    .unwrap();
    let mut text = String::new();
    for (i, ((name, v4), site)) in SERVERS.iter().zip(["a", "b", "c"]).enumerate() {
        text += &format!(
            "[[site]]\nname = {site:?}\nlat = {}.0\nlon = 0.0\n\n\
             [[server]]\nname = {name:?}\nsite = {site:?}\nipv4 = {v4:?}\n\n",
            i * 10
        );
    }
    text += &format!(
        "[rtt]\nfiles = [{:?}]\n\n{services}",
        rtt.display().to_string()
    );
    let path = dir.path("director.toml");
    fs::write(&path, text).unwrap();
    path
}

/// `dig -f`: one query per line of `lines` from the client, each answered address in
/// order (one per query; a query that gets no address fails the test).
fn ask_all(lab: &Lab, dir: &TempDir, lines: &[String]) -> Vec<String> {
    let batch = dir.path("batch.txt");
    fs::write(&batch, lines.join("\n") + "\n").unwrap();
    let at = format!("@{EDGE_V4}");
    let batch = batch.display().to_string();
    let out = lab.client(&["dig", &at, "+short", "+tries=1", "+timeout=2", "-f", &batch]);
    assert!(out.status.success(), "dig -f failed: {}", describe(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let got: Vec<String> = text.lines().map(str::to_string).collect();
    assert_eq!(
        got.len(),
        lines.len(),
        "expected one address per query; dig printed:\n{}",
        &text[..text.len().min(2000)]
    );
    for g in &got {
        assert!(
            SERVERS.iter().any(|(_, a)| a == g),
            "an answer that is no server's address: {g:?}"
        );
    }
    got
}

/// How many answers each server got, by name.
fn tally(answers: &[String]) -> BTreeMap<&'static str, usize> {
    let mut t: BTreeMap<&'static str, usize> = SERVERS.iter().map(|(n, _)| (*n, 0)).collect();
    for a in answers {
        let (name, _) = SERVERS.iter().find(|(_, x)| x == a).unwrap();
        *t.get_mut(name).unwrap() += 1;
    }
    t
}

/// Pearson's chi-square of `observed` against `share` (summing to 1); `share` 0 must see 0.
fn assert_distribution(what: &str, t: &BTreeMap<&'static str, usize>, share: &[(&str, f64)]) {
    let n: usize = t.values().sum();
    let mut chi2 = 0.0;
    let mut cells = 0;
    for (name, p) in share {
        let o = t[name] as f64;
        if *p == 0.0 {
            assert_eq!(o, 0.0, "{what}: {name} must get no answer: {t:?}");
            continue;
        }
        let e = p * n as f64;
        chi2 += (o - e) * (o - e) / e;
        cells += 1;
    }
    let critical = CHI2_P001[cells - 2];
    assert!(
        chi2 < critical,
        "{what}: {t:?} is not {share:?} (chi-square {chi2:.1} >= {critical} at p = 0.001)"
    );
    println!("{what}: {t:?}, chi-square {chi2:.2} (< {critical})");
}

fn start(lab: &Lab, dir: &TempDir, config: &Path) -> Controller {
    lab.attach();
    let mut run = Controller::start(lab, config, &dir.path("run.log"));
    run.wait_for("entries written", 1, Duration::from_secs(30));
    run
}

/// Distinct client subnets, one per query: ECS makes each the client the kernel decides for.
fn per_client(name: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("{name} A +subnet=10.{}.{}.0/24", (i / 256) % 256, i % 256))
        .collect()
}

// DD: "If you do not use priority and multiple servers have the same metric value, the
// server whose last IP address was looked at will be returned … If you want to return a
// random IP address in the case of a tie, use metric priority with the random metric."
// Without random a client's answer never changes; a hash of the client spreads clients.
#[test]
fn a_tie_without_random_answers_each_client_the_same_and_spreads_clients() {
    let dir = TempDir::new("dconf", "tie");
    let config = config(
        &dir,
        "[[service]]\nname = \"tie.example.com\"\nservers = [\"s1\", \"s2\", \"s3\"]\n\
         priority = { admin = 1 }\n",
    );
    let lab = Lab::new();
    let _run = start(&lab, &dir, &config);
    // One client (no ECS: the source address) asks many times: one answer.
    let same: Vec<String> = (0..QUERIES / 4)
        .map(|_| "tie.example.com A".to_string())
        .collect();
    let got = ask_all(&lab, &dir, &same);
    assert!(
        got.iter().all(|g| *g == got[0]),
        "one client got different servers: {:?}",
        tally(&got)
    );
    // Many clients: each again gets what it got the first time, and together they spread
    // evenly over the three equal servers.
    let clients = per_client("tie.example.com", QUERIES);
    let first = ask_all(&lab, &dir, &clients);
    let again = ask_all(&lab, &dir, &clients);
    let changed = first.iter().zip(&again).filter(|(a, b)| a != b).count();
    assert_eq!(
        changed, 0,
        "{changed} clients got another server the second time"
    );
    assert_distribution(
        "clients over a three-way tie",
        &tally(&first),
        &[("s1", 1.0 / 3.0), ("s2", 1.0 / 3.0), ("s3", 1.0 / 3.0)],
    );
}

// DD's weights syntax lists `portion` and `random` as metrics: "portion" shares answers
// among the equally good by each server's portion ("The default metric value is zero":
// a server with portion 0 gets nothing while one with more is usable); "random" draws
// uniformly. Both draw per query, so one client sees the distribution.
#[test]
fn portion_and_random_draw_per_query_as_documented() {
    let dir = TempDir::new("dconf", "draws");
    let config = config(
        &dir,
        "[[service]]\nname = \"portion.example.com\"\nservers = [\"s1\", \"s2\", \"s3\"]\n\
         priority = { admin = 1, portion = 2 }\nportion = { \"s1\" = 1, \"s2\" = 3 }\n\n\
         [[service]]\nname = \"random.example.com\"\nservers = [\"s1\", \"s2\", \"s3\"]\n\
         priority = { admin = 1, random = 2 }\n",
    );
    let lab = Lab::new();
    let _run = start(&lab, &dir, &config);
    let q = |name: &str| -> Vec<String> { (0..QUERIES).map(|_| format!("{name} A")).collect() };
    let got = ask_all(&lab, &dir, &q("portion.example.com"));
    assert_distribution(
        "portion 1 : 3 : 0 from one client",
        &tally(&got),
        &[("s1", 0.25), ("s2", 0.75), ("s3", 0.0)],
    );
    let got = ask_all(&lab, &dir, &q("random.example.com"));
    assert_distribution(
        "random from one client",
        &tally(&got),
        &[("s1", 1.0 / 3.0), ("s2", 1.0 / 3.0), ("s3", 1.0 / 3.0)],
    );
    // Only the portion-0 server left usable: it answers rather than nobody.
    lab.ctl_ok(&["server", "set", "s1", "--down"]);
    lab.ctl_ok(&["server", "set", "s2", "--down"]);
    let got = ask_all(&lab, &dir, &q("portion.example.com")[..50]);
    assert!(got.iter().all(|g| g == SERVERS[2].1), "{:?}", tally(&got));
}

// DD sorts the servers that are available. Tolerance 10, RTTs A 100, B 109, C 115: the best
// set is {A, B}; when A goes down, the sort over {B, C} keeps both (115 <= 119.9) and
// random draws between them. Precomputed fallback order alone would give B only.
#[test]
fn after_a_server_goes_down_answers_converge_to_the_re_sorted_set() {
    let dir = TempDir::new("dconf", "failover");
    let config = config(
        &dir,
        "[[service]]\nname = \"fail.example.com\"\nservers = [\"s1\", \"s2\", \"s3\"]\n\
         priority = { rtt = 1, random = 2 }\nrtt_tolerance = 10\n",
    );
    let lab = Lab::new();
    let mut run = start(&lab, &dir, &config);
    let q: Vec<String> = (0..QUERIES).map(|_| "fail.example.com A".into()).collect();
    let got = ask_all(&lab, &dir, &q);
    assert_distribution(
        "{A, B} before",
        &tally(&got),
        &[("s1", 0.5), ("s2", 0.5), ("s3", 0.0)],
    );

    let t = Instant::now();
    lab.ctl_ok(&["server", "set", "s1", "--down"]);
    // The kernel skips s1 from the next query on (its fallback, s2, answers)...
    let first = ask_all(&lab, &dir, &q[..1]);
    assert_ne!(first[0], SERVERS[0].1);
    // ...and run re-sorts without it.
    run.wait_for("re-sorted", 1, Duration::from_secs(10));
    let converged = t.elapsed();
    let got = ask_all(&lab, &dir, &q);
    assert_distribution(
        "{B, C} after A went down",
        &tally(&got),
        &[("s1", 0.0), ("s2", 0.5), ("s3", 0.5)],
    );
    println!("server set --down to re-sorted table: {converged:?}");

    // Back up: the sort over all three again.
    lab.ctl_ok(&["server", "set", "s1", "--up"]);
    run.wait_for("re-sorted", 2, Duration::from_secs(10));
    let got = ask_all(&lab, &dir, &q);
    assert_distribution(
        "{A, B} after A came back",
        &tally(&got),
        &[("s1", 0.5), ("s2", 0.5), ("s3", 0.0)],
    );
    run.assert_alive();
}
