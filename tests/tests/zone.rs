//! director as the complete authoritative server of a delegated zone: Knot serves the
//! parent (example.com, DNSSEC-signed) with a delegation of gslb.example.com to director's
//! two NS addresses on the edge; a validating unbound resolves through it; dig and kdig ask
//! director directly over UDP and TCP; the exported zone passes kzonecheck and Knot answers
//! it as director does, and refuses what Knot refuses (other opcodes, TSIG under an unknown
//! key, type 0) with Knot's rcodes; a fuzz never crashes, stalls or answers for another
//! zone.
//!
//! Run as root: `cargo test -p director-tests --test zone -- --test-threads=1`.

use std::path::Path;
use std::time::Duration;

use director_ctl::api;
use director_tests::metrics;
use director_tests::netns::{
    describe, Controller, KnotZone, Lab, Reply, EDGE_V4, RESOLVER, RESOLVER_PORT,
};
use director_tests::tempdir::TempDir;

const ZONE: &str = "gslb.example.com";
const NS1: &str = "192.0.2.53";
const NS2: &str = "192.0.2.54";
/// Servers a-1 and b-1; clients in 192.0.2.0/24 are nearer a, 198.51.100.0/24 nearer b.
const A1: &str = "203.0.113.10";
const B1: &str = "203.0.113.20";
/// A service name of 255 bytes on the wire: eight AAAA answers to it with ECS do not fit
/// 512 bytes, so the XDP program passes the query to the listeners, which set TC.
fn long_name() -> String {
    format!(
        "{}.{}.{}.{}.{ZONE}",
        "a".repeat(63),
        "b".repeat(63),
        "c".repeat(63),
        "d".repeat(44)
    )
}

fn config(rtt: &Path) -> String {
    let mut c = String::from(
        "[[site]]\nname = \"a\"\n[[site]]\nname = \"b\"\n\
         [[server]]\nname = \"a-1\"\nsite = \"a\"\nipv4 = \"203.0.113.10\"\n\
         [[server]]\nname = \"b-1\"\nsite = \"b\"\nipv4 = \"203.0.113.20\"\n",
    );
    let mut six = Vec::new();
    for i in 1..=8 {
        c.push_str(&format!(
            "[[server]]\nname = \"v6-{i}\"\nsite = \"a\"\nipv6 = \"2001:db8:100::{i}\"\n"
        ));
        six.push(format!("\"v6-{i}\""));
    }
    c.push_str(&format!(
        "[[service]]\nname = \"www.{ZONE}\"\nservers = [\"a-1\", \"b-1\"]\nttl = 30\n\
         priority = {{ rtt = 1 }}\n\
         [[service]]\nname = \"pool.{ZONE}\"\nservers = [\"a-1\", \"b-1\"]\n\
         select = \"client\"\npriority = {{ admin = 1 }}\n\
         [[service]]\nname = \"{}\"\nservers = [{}]\nanswers = 8\npriority = {{ admin = 1 }}\n\
         [rtt]\nfiles = [{:?}]\n[metrics]\nlisten = \"{METRICS}\"\n",
        long_name(),
        six.join(", "),
        rtt.display().to_string()
    ));
    let big: Vec<String> = (0..8)
        .map(|i| {
            format!(
                "{{ name = \"big\", type = \"TXT\", data = \"\\\"{i}{}\\\"\" }}",
                "x".repeat(200)
            )
        })
        .collect();
    c.push_str(&format!(
        "[[zone]]\norigin = \"{ZONE}\"\n\
         ns = [ {{ name = \"ns1.{ZONE}\", addresses = [\"{NS1}\"] }},\n\
         \x20      {{ name = \"ns2.{ZONE}\", addresses = [\"{NS2}\"] }} ]\n\
         records = [\n\
         \x20 {{ name = \"@\", type = \"MX\", data = \"10 mail\" }},\n\
         \x20 {{ name = \"mail\", type = \"A\", data = \"192.0.2.25\" }},\n\
         \x20 {{ name = \"info\", type = \"TXT\", data = \"\\\"director\\\"\" }},\n\
         \x20 {{ name = \"alias\", type = \"CNAME\", data = \"www\" }},\n\
         \x20 {},\n]\n",
        big.join(",\n  ")
    ));
    c
}

/// Where run serves its metrics, inside the edge namespace.
const METRICS: &str = "127.0.0.1:9153";

const RTT: &str =
    "192.0.2.0/24,a,10\n192.0.2.0/24,b,50\n198.51.100.0/24,a,50\n198.51.100.0/24,b,10\n";

/// A lab with director attached, its two NS addresses on the edge, and `run` answering
/// the zone; the config's directory is returned too (its files live as long as it).
fn start() -> (Lab, Controller, TempDir) {
    start_with("")
}

/// Like [`start`], with `extra` appended to the config.
fn start_with(extra: &str) -> (Lab, Controller, TempDir) {
    let lab = Lab::new();
    lab.add_edge_address(&format!("{NS1}/24"));
    lab.add_edge_address(&format!("{NS2}/24"));
    lab.attach();
    let dir = TempDir::new("zone", "config");
    let rtt = dir.path("rtt.csv");
    std::fs::write(&rtt, RTT).unwrap();
    let cfg = dir.path("director.toml");
    std::fs::write(&cfg, config(&rtt) + extra).unwrap();
    let mut ctl = Controller::start(&lab, &cfg, &dir.path("run.log"));
    ctl.wait_for("entries written", 1, Duration::from_secs(60));
    assert!(
        ctl.log()
            .contains(&format!("answering the zones on {NS1}:53, {NS2}:53")),
        "{}",
        ctl.log()
    );
    (lab, ctl, dir)
}

fn dig_at(lab: &Lab, server: &str, args: &[&str]) -> Reply {
    let at = format!("@{server}");
    let mut a = vec![at.as_str()];
    a.extend_from_slice(args);
    Reply::parse(&lab.dig(&a))
}

fn resolve(lab: &Lab, name: &str, rtype: &str) -> Reply {
    dig_at(
        lab,
        RESOLVER,
        &["-p", RESOLVER_PORT, "+dnssec", "+timeout=5", name, rtype],
    )
}

fn serial(r: &Reply, section_text: &str) -> u32 {
    let line = section_text
        .lines()
        .find(|l| l.contains("\tSOA\t") || l.contains(" SOA "))
        .unwrap_or_else(|| panic!("no SOA in:\n{}", r.text));
    line.split_whitespace()
        .nth(6)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no serial in {line:?}"))
}

/// The parent zone, signed by Knot, delegating ZONE to director's two addresses.
fn parent() -> KnotZone {
    KnotZone {
        origin: "example.com.".into(),
        text: format!(
            "$ORIGIN example.com.\n$TTL 300\n\
             @ SOA ns.example.com. hostmaster.example.com. 1 3600 600 86400 300\n\
             @ NS ns.example.com.\nns A {EDGE_V4}\nhost A 192.0.2.80\n\
             gslb NS ns1.gslb.example.com.\ngslb NS ns2.gslb.example.com.\n\
             ns1.gslb A {NS1}\nns2.gslb A {NS2}\n"
        ),
        signed: true,
    }
}

#[test]
fn a_validating_resolver_resolves_the_zone_through_an_unsigned_delegation() {
    let (mut lab, ctl, _dir) = start();
    lab.start_knot_files(&[parent()]);
    // Knot signs at load; its keys are the resolver's trust anchor for example.com.
    let mut anchor = String::new();
    for _ in 0..100 {
        anchor = lab.dig_in_edge(&[
            &format!("@{EDGE_V4}"),
            "example.com",
            "DNSKEY",
            "+noall",
            "+answer",
        ]);
        if anchor.contains("DNSKEY") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(anchor.contains("DNSKEY"), "Knot did not sign example.com");
    lab.start_validating_unbound("example.com", &anchor, "host.example.com");

    // Validation is on: the signed parent's data is authenticated ...
    let host = resolve(&lab, "host.example.com", "A");
    assert_eq!(host.status.as_deref(), Some("NOERROR"), "{}", host.text);
    assert!(
        host.has_flag("ad"),
        "no AD for the signed parent:\n{}",
        host.text
    );
    // ... and director's names resolve through the provably unsigned delegation (no DS),
    // as insecure answers: not bogus, not authenticated.
    let www = resolve(&lab, &format!("www.{ZONE}"), "A");
    assert_eq!(
        www.status.as_deref(),
        Some("NOERROR"),
        "{}\n{}",
        www.text,
        ctl.log()
    );
    assert_eq!(www.data("A"), [A1], "{}", www.text);
    assert!(!www.has_flag("ad"), "{}", www.text);

    // SOA and NS, consistent with the parent's delegation and the config.
    let soa = resolve(&lab, ZONE, "SOA");
    assert_eq!(soa.status.as_deref(), Some("NOERROR"), "{}", soa.text);
    let zones: api::ZoneList = serde_json::from_str(&lab.ctl_ok(&[
        "zone",
        "list",
        "--config",
        &_dir.path("director.toml").display().to_string(),
        "--json",
    ]))
    .unwrap();
    assert_eq!(serial(&soa, &soa.text), zones.zones[0].serial);
    assert!(zones.zones[0].serial > 1_700_000_000, "{zones:?}");
    let mut ns = resolve(&lab, ZONE, "NS").data("NS");
    ns.sort();
    assert_eq!(ns, [format!("ns1.{ZONE}."), format!("ns2.{ZONE}.")]);
    // The parent's delegation (kdig, no recursion: its referral) names the same servers
    // with the same glue as director's own NS answer.
    let referral = lab.kdig(&[&format!("@{EDGE_V4}"), "+norec", ZONE, "NS"]);
    let child = lab.kdig(&[&format!("@{NS1}"), "+norec", ZONE, "NS"]);
    for text in [&referral, &child] {
        for want in [
            format!("ns1.{ZONE}."),
            format!("ns2.{ZONE}."),
            NS1.to_string(),
            NS2.to_string(),
        ] {
            assert!(text.contains(&want), "{want} missing from:\n{text}");
        }
    }

    // A missing name: NXDOMAIN with the SOA, which the resolver caches (the second answer
    // comes from its cache with a TTL that counts down from the SOA's).
    let nxdomains = || {
        let samples = metrics::scrape(&lab.edge_ns, METRICS).unwrap_or_else(|e| panic!("{e}"));
        ["udp", "tcp"]
            .iter()
            .map(|t| {
                metrics::value(
                    &samples,
                    "director_zone_queries_total",
                    &[("transport", t), ("outcome", "nxdomain")],
                )
                .unwrap_or(0.0)
            })
            .sum::<f64>()
    };
    let nx = resolve(&lab, &format!("nope.{ZONE}"), "A");
    assert_eq!(nx.status.as_deref(), Some("NXDOMAIN"), "{}", nx.text);
    assert!(nx.text.contains("AUTHORITY SECTION"), "{}", nx.text);
    let asked = nxdomains();
    assert!(asked >= 1.0);
    let again = resolve(&lab, &format!("nope.{ZONE}"), "A");
    assert_eq!(again.status.as_deref(), Some("NXDOMAIN"), "{}", again.text);
    assert_eq!(nxdomains(), asked, "the negative answer was not cached");
    // NODATA: a static name without the type, and a service of IPv4 servers asked AAAA
    // (its own short TTL on the SOA).
    let nodata = resolve(&lab, &format!("mail.{ZONE}"), "TXT");
    assert_eq!(nodata.status.as_deref(), Some("NOERROR"), "{}", nodata.text);
    assert!(nodata.answers.is_empty() && nodata.text.contains("AUTHORITY SECTION"));
    let direct = dig_at(&lab, NS1, &[&format!("www.{ZONE}"), "AAAA"]);
    assert_eq!(direct.status.as_deref(), Some("NOERROR"), "{}", direct.text);
    assert!(
        direct.answers.is_empty() && direct.has_flag("aa"),
        "{}",
        direct.text
    );
    let soa_ttl: u32 = direct
        .text
        .lines()
        .find(|l| l.contains("SOA"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or_else(|| panic!("no SOA:\n{}", direct.text));
    assert!(
        soa_ttl <= 30,
        "negative TTL {soa_ttl} for a service:\n{}",
        direct.text
    );
    // A static MX, a CNAME followed to a service.
    assert_eq!(
        resolve(&lab, ZONE, "MX").data("MX"),
        [format!("10 mail.{ZONE}.")]
    );
    let alias = resolve(&lab, &format!("alias.{ZONE}"), "A");
    assert_eq!(alias.data("A"), [A1], "{}", alias.text);
    // An answer that needs TCP: eight 200-byte strings, over the resolver's 1232 bytes.
    let big = resolve(&lab, &format!("big.{ZONE}"), "TXT");
    assert_eq!(big.data("TXT").len(), 8, "{}", big.text);
}

#[test]
fn director_answers_every_kind_of_query_directly_over_udp_and_tcp() {
    let (lab, ctl, _dir) = start();
    // TC over UDP, then the whole answer over TCP.
    let tc = dig_at(
        &lab,
        NS1,
        &["+notcp", "+ignore", &format!("big.{ZONE}"), "TXT"],
    );
    assert!(tc.has_flag("tc") && tc.answers.is_empty(), "{}", tc.text);
    let full = dig_at(&lab, NS1, &["+tcp", &format!("big.{ZONE}"), "TXT"]);
    assert_eq!(full.data("TXT").len(), 8, "{}", full.text);
    assert!(!full.has_flag("tc"));
    // Other zones reaching the listeners are refused; transfers are not offered.
    let other = dig_at(&lab, NS1, &["example.org", "A"]);
    assert_eq!(other.status.as_deref(), Some("REFUSED"), "{}", other.text);
    let axfr = lab.dig(&[&format!("@{NS1}"), ZONE, "AXFR"]);
    assert!(
        axfr.contains("Transfer failed") && !axfr.contains("SOA"),
        "{axfr}"
    );
    // EDNS: an unknown version gets BADVERS; the answer's OPT is always there.
    let v1 = dig_at(&lab, NS2, &["+edns=1", "+noednsnegotiation", ZONE, "SOA"]);
    assert_eq!(v1.status.as_deref(), Some("BADVERS"), "{}", v1.text);
    let soa1 = Reply::parse(&lab.kdig(&[&format!("@{NS1}"), ZONE, "SOA"]));
    let soa2 = Reply::parse(&lab.kdig(&[&format!("@{NS2}"), "+tcp", ZONE, "SOA"]));
    assert_eq!(
        soa1.data("SOA"),
        soa2.data("SOA"),
        "{}\n{}",
        soa1.text,
        soa2.text
    );
    assert!(!soa1.data("SOA").is_empty(), "{}", soa1.text);
    // ANY gets one RRset (RFC 8482).
    let any = dig_at(&lab, NS1, &["+tcp", ZONE, "ANY"]);
    let types: std::collections::BTreeSet<&str> =
        any.answers.iter().map(|r| r.rtype.as_str()).collect();
    assert_eq!(types.len(), 1, "{}", any.text);

    // Eight AAAA answers with ECS do not fit 512 bytes: the XDP program passes the query
    // and the listener answers TC; over TCP the eight come.
    let passed_before = lab.stats().get("pass_too_big");
    let long = long_name();
    let cut = dig_at(
        &lab,
        NS1,
        &[
            "+notcp",
            "+ignore",
            "+bufsize=512",
            "+subnet=198.51.100.0/24",
            &long,
            "AAAA",
        ],
    );
    assert!(cut.has_flag("tc") && cut.answers.is_empty(), "{}", cut.text);
    assert!(lab.stats().get("pass_too_big") > passed_before);
    let whole = dig_at(
        &lab,
        NS1,
        &["+bufsize=512", "+subnet=198.51.100.0/24", &long, "AAAA"],
    );
    assert_eq!(whole.data("AAAA").len(), 8, "{}\n{}", whole.text, ctl.log());
    // With room, the XDP program answers the same eight itself.
    let xdp = dig_at(&lab, NS1, &["+notcp", &long, "AAAA"]);
    let (mut a, mut b) = (xdp.data("AAAA"), whole.data("AAAA"));
    a.sort();
    b.sort();
    assert_eq!(a, b);
    // A service whose servers have no IPv4: NODATA, not NXDOMAIN.
    let v4 = dig_at(&lab, NS1, &["+tcp", &long, "A"]);
    assert_eq!(v4.status.as_deref(), Some("NOERROR"), "{}", v4.text);
    assert!(v4.answers.is_empty());

    // The listeners' outcomes are in the metrics.
    let samples = metrics::scrape(&lab.edge_ns, METRICS).unwrap_or_else(|e| panic!("{e}"));
    let n = |transport: &str, outcome: &str| {
        metrics::value(
            &samples,
            "director_zone_queries_total",
            &[("transport", transport), ("outcome", outcome)],
        )
        .unwrap_or(0.0)
    };
    assert!(n("udp", "truncated") >= 2.0, "{samples:?}");
    assert!(n("udp", "refused") >= 1.0 && n("udp", "badvers") >= 1.0);
    assert!(n("tcp", "answered") >= 3.0 && n("tcp", "nodata") >= 1.0);
    assert_eq!(n("udp", "formerr"), 0.0);
}

#[test]
fn tcp_and_udp_give_every_client_the_same_servers() {
    let (lab, _ctl, _dir) = start();
    let answered = lab.stats().get("answered");
    let mut seen = std::collections::BTreeSet::new();
    for i in 1..=48 {
        let subnet = format!("+subnet=198.51.100.{}/32", i * 5);
        let udp = dig_at(
            &lab,
            NS1,
            &["+notcp", &subnet, &format!("pool.{ZONE}"), "A"],
        );
        let tcp = dig_at(&lab, NS1, &["+tcp", &subnet, &format!("pool.{ZONE}"), "A"]);
        assert_eq!(udp.data("A").len(), 1, "{}", udp.text);
        assert_eq!(
            udp.data("A"),
            tcp.data("A"),
            "{subnet}:\n{}\n{}",
            udp.text,
            tcp.text
        );
        assert_eq!(udp.client_subnet, tcp.client_subnet, "{subnet}");
        seen.insert(udp.data("A")[0].clone());
        // The RTT-sorted service too: b-1 for this prefix on both.
        let www = dig_at(&lab, NS2, &["+tcp", &subnet, &format!("www.{ZONE}"), "A"]);
        assert_eq!(www.data("A"), [B1], "{}", www.text);
    }
    // Both servers were chosen (the equality above is not one constant answer), and the
    // UDP answers came from the XDP program.
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(lab.stats().get("answered") >= answered + 48);
}

/// Exports the zone, checks it with kzonecheck and starts Knot on it at EDGE_V4.
fn knot_serves_the_export(lab: &mut Lab, dir: &TempDir) {
    let cfg = dir.path("director.toml").display().to_string();
    let text = lab.ctl_ok(&["zone", "export", "--config", &cfg]);
    let file = dir.path("exported.zone");
    std::fs::write(&file, &text).unwrap();
    let check = std::process::Command::new("kzonecheck")
        .args(["-o", ZONE])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "kzonecheck: {}\n{text}",
        describe(&check)
    );
    lab.start_knot_files(&[KnotZone {
        origin: format!("{ZONE}."),
        text,
        signed: false,
    }]);
}

#[test]
fn the_exported_zone_checks_and_knot_answers_it_as_director_does() {
    let (mut lab, _ctl, dir) = start();
    knot_serves_the_export(&mut lab, &dir);
    let questions = [
        (ZONE.to_string(), "SOA"),
        (ZONE.to_string(), "NS"),
        (ZONE.to_string(), "MX"),
        (ZONE.to_string(), "TXT"),
        (format!("mail.{ZONE}"), "A"),
        (format!("mail.{ZONE}"), "TXT"),
        (format!("ns1.{ZONE}"), "A"),
        (format!("ns2.{ZONE}"), "AAAA"),
        (format!("info.{ZONE}"), "TXT"),
        (format!("big.{ZONE}"), "TXT"),
        (format!("alias.{ZONE}"), "CNAME"),
        (format!("nope.{ZONE}"), "A"),
        (format!("deep.nope.{ZONE}"), "MX"),
    ];
    for (name, rtype) in &questions {
        let ask = |server: &str| {
            let out = lab.dig(&[
                &format!("@{server}"),
                "+tcp",
                "+norec",
                "+noall",
                "+answer",
                "+authority",
                "+comments",
                name,
                rtype,
            ]);
            let r = Reply::parse(&out);
            let mut records: Vec<String> = out
                .lines()
                .filter(|l| !l.starts_with(';') && !l.trim().is_empty())
                .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
                .collect();
            records.sort();
            (r.has_flag("aa"), r.status, records)
        };
        let (knot, ours) = (ask(EDGE_V4), ask(NS1));
        assert_eq!(ours, knot, "{name} {rtype}: director vs Knot");
    }
}

/// A TSIG key neither server has (`dig -y`'s form; 32 bytes, base64).
const UNKNOWN_KEY: &str = "hmac-sha256:unknown-key.:c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3I=";

/// Probes of how a server refuses: other opcodes (dig +header-only +opcode=N), queries
/// signed with a TSIG key the server does not know, and type 0. director (NS1) must give
/// the rcode Knot gives on the same zone, with the same flags and section counts, the
/// TSIG error BADKEY in both; and the XDP program must pass every one of them, including
/// those for a service name, to the listeners.
#[test]
fn odd_queries_get_the_rcode_knot_gives() {
    let (mut lab, _ctl, dir) = start();
    knot_serves_the_export(&mut lab, &dir);
    let www = format!("www.{ZONE}");
    let mut probes: Vec<Vec<String>> = [1, 2, 3, 6, 15]
        .iter()
        .map(|op| vec!["+header-only".to_string(), format!("+opcode={op}")])
        .collect();
    for args in [
        vec!["-y", UNKNOWN_KEY, ZONE, "SOA"],
        vec!["-y", UNKNOWN_KEY, &www, "A"],
        vec!["+noedns", "-y", UNKNOWN_KEY, &www, "A"],
        vec!["-y", UNKNOWN_KEY, "+tcp", ZONE, "MX"],
        vec![ZONE, "TYPE0"],
        vec![&www, "TYPE0"],
        vec!["+noedns", &www, "TYPE0"],
    ] {
        probes.push(args.iter().map(ToString::to_string).collect());
    }
    let answered = lab.stats().get("answered");
    // Every probe is asked before anything is asserted, so a failure shows the whole table.
    let mut table = Vec::new();
    let mut wrong = Vec::new();
    for probe in &probes {
        let ask = |server: &str| {
            let mut args = vec![format!("@{server}")];
            args.extend(probe.iter().cloned());
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = lab.dig(&args);
            let r = Reply::parse(&out);
            // Flags and section counts: ";; flags: qr rd; QUERY: 1, ANSWER: 0, ...".
            let header = out
                .lines()
                .find(|l| l.starts_with(";; flags:"))
                .map(str::to_string);
            (r.status, header, out.contains(" BADKEY "), out)
        };
        let (knot, ours) = (ask(EDGE_V4), ask(NS1));
        let line = format!(
            "{probe:?}: Knot {:?} {:?} BADKEY={}; director {:?} {:?} BADKEY={}",
            knot.0, knot.1, knot.2, ours.0, ours.1, ours.2
        );
        let signed = probe.iter().any(|a| a == "-y");
        if knot.0.is_none() || (&ours.0, &ours.1, ours.2) != (&knot.0, &knot.1, knot.2) {
            wrong.push(format!(
                "{line}\n--- director:\n{}\n--- Knot:\n{}",
                ours.3, knot.3
            ));
        } else if signed && !ours.2 {
            wrong.push(format!("{line}: no BADKEY"));
        }
        table.push(line);
    }
    assert!(
        wrong.is_empty(),
        "director vs Knot:\n{}\n\n{}",
        table.join("\n"),
        wrong.join("\n\n")
    );
    // None of them was answered by the XDP program.
    assert_eq!(lab.stats().get("answered"), answered);
}

#[test]
fn a_fuzz_never_crashes_stalls_or_answers_for_another_zone() {
    let (lab, mut ctl, _dir) = start();
    let bin = env!("CARGO_BIN_EXE_dnsfuzz");
    for (server, seed) in [(NS1, "11"), (NS2, "12")] {
        let out = lab.client(&[bin, server, &format!("{ZONE}."), seed, "1500"]);
        assert!(out.status.success(), "dnsfuzz: {}", describe(&out));
        let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        // Most queries are answered (the rest are garbage, which gets nothing).
        assert!(summary["udp_answers"].as_u64().unwrap() > 300, "{summary}");
        assert!(summary["tcp_answers"].as_u64().unwrap() > 300, "{summary}");
    }
    ctl.assert_alive();
}

#[test]
fn serve_answers_a_zone_set_up_with_the_cli_alone() {
    let lab = Lab::new();
    lab.add_edge_address(&format!("{NS1}/24"));
    lab.add_edge_address(&format!("{NS2}/24"));
    lab.attach();
    let www = format!("www.{ZONE}");
    lab.ctl_ok(&["server", "add", "a-1", "--ipv4", A1]);
    lab.ctl_ok(&["service", "add", &www]);
    lab.ctl_ok(&["route", "set", &www, "0.0.0.0/0", "a-1"]);
    let dir = TempDir::new("zone", "cli");
    let zones = dir.path("zones.toml").display().to_string();
    let ns1 = format!("--ns=ns1.{ZONE}={NS1}");
    let ns2 = format!("--ns=ns2.{ZONE}={NS2}");
    // One NS is refused, and leaves no file behind.
    let one = lab.ctl(&["zone", "add", "--zones", &zones, ZONE, &ns1]);
    assert!(!one.status.success());
    assert!(
        describe(&one).contains("at least two NS"),
        "{}",
        describe(&one)
    );
    assert!(!Path::new(&zones).exists());
    lab.ctl_ok(&["zone", "add", "--zones", &zones, ZONE, &ns1, &ns2]);

    let mut serve =
        Controller::start_command(&lab, &["serve", "--zones", &zones], &dir.path("serve.log"));
    serve.wait_for("answering the zones", 1, Duration::from_secs(20));
    let soa = dig_at(&lab, NS1, &[ZONE, "SOA"]);
    assert_eq!(soa.status.as_deref(), Some("NOERROR"), "{}", soa.text);
    assert!(soa.data("SOA")[0].contains(&format!("hostmaster.{ZONE}.")));
    // The CLI's service, answered over TCP from the kernel's maps.
    assert_eq!(dig_at(&lab, NS2, &["+tcp", &www, "A"]).data("A"), [A1]);
    assert_eq!(
        dig_at(&lab, NS1, &["+tcp", &format!("nope.{ZONE}"), "A"])
            .status
            .as_deref(),
        Some("NXDOMAIN")
    );
    // The file changes: serve follows it (a new mailbox in the SOA) within its poll.
    lab.ctl_ok(&[
        "zone",
        "add",
        "--zones",
        &zones,
        ZONE,
        &ns1,
        &ns2,
        "--rname",
        "dns-admin.example.com",
    ]);
    let mut got = String::new();
    for _ in 0..50 {
        got = dig_at(&lab, NS1, &[ZONE, "SOA"]).data("SOA").join(" ");
        if got.contains("dns-admin.example.com.") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        got.contains("dns-admin.example.com."),
        "{got}\n{}",
        serve.log()
    );
    // A service deleted with the CLI is no longer one: its name is now missing.
    lab.ctl_ok(&["service", "del", &www]);
    let mut status = None;
    for _ in 0..50 {
        status = dig_at(&lab, NS1, &["+tcp", &www, "A"]).status;
        if status.as_deref() == Some("NXDOMAIN") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(status.as_deref(), Some("NXDOMAIN"), "{}", serve.log());
    let list: api::ZoneList =
        serde_json::from_str(&lab.ctl_ok(&["zone", "list", "--config", &zones, "--json"])).unwrap();
    assert_eq!(list.zones.len(), 1);
    assert_eq!(list.zones[0].listen.len(), 2);
    lab.ctl_ok(&["zone", "del", "--zones", &zones, ZONE]);
    let again = lab.ctl(&["zone", "del", "--zones", &zones, ZONE]);
    assert!(
        describe(&again).contains("has no zone"),
        "{}",
        describe(&again)
    );
    serve.assert_alive();
}

/// `udp_flood`'s tally.
#[derive(Debug, serde::Deserialize)]
struct Flood {
    sent: u64,
    answers: u64,
    truncated: u64,
    other: u64,
    span_s: f64,
}

fn flood(lab: &Lab, from: &str, name: &str, count: u64) -> std::process::Child {
    std::process::Command::new("ip")
        .args(["netns", "exec", &lab.client_ns])
        .arg(env!("CARGO_BIN_EXE_udp_flood"))
        .args([from, NS1, name, &count.to_string(), "2"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting udp_flood")
}

fn tally(child: std::process::Child) -> Flood {
    let out = child.wait_with_output().expect("waiting for udp_flood");
    assert!(out.status.success(), "udp_flood: {}", describe(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", describe(&out)))
}

#[test]
fn the_listeners_hold_a_flood_from_one_prefix_to_the_rate() {
    // [rrl] covers the answers of no service too: here a static record, which the XDP
    // program passes (not a service) and the listener answers.
    let (rate, burst) = (200u64, 20u64);
    let (lab, _ctl, _dir) = start_with(&format!(
        "[rrl]\nrate = {rate}\nburst = {burst}\nslip = 2\n"
    ));
    let other = "203.0.113.2";
    lab.client(&[
        "ip",
        "addr",
        "add",
        &format!("{other}/32"),
        "dev",
        &lab.client_if,
    ]);
    // The listener's answers go through the edge's routing table (the XDP program's do not).
    let route = std::process::Command::new("ip")
        .args(["-n", &lab.edge_ns, "route", "add", &format!("{other}/32")])
        .args(["dev", &lab.edge_if])
        .output()
        .unwrap();
    assert!(route.status.success(), "{}", describe(&route));
    let name = format!("mail.{ZONE}");
    let (f, o) = (
        flood(&lab, director_tests::netns::CLIENT_V4, &name, 1200),
        flood(&lab, other, &name, 150),
    );
    let (f, o) = (tally(f), tally(o));
    // The other prefix, under the rate: every query answered in full.
    assert_eq!((o.answers, o.truncated, o.other), (150, 0, 0), "{o:?}");
    // The flood: the burst, then the rate over the time it was sent, within 10 %.
    assert!(f.sent >= 1100 && f.other == 0, "{f:?}");
    let expected = burst as f64 + rate as f64 * f.span_s;
    assert!(
        (f.answers as f64 - expected).abs() <= expected * 0.10,
        "{f:?}: the limit allows {expected:.0}"
    );
    // Every second limited response slipped out truncated; the metrics count both kinds.
    let limited = f.sent - f.answers;
    assert!(f.truncated.abs_diff(limited / 2) <= 2, "{f:?}");
    let samples = metrics::scrape(&lab.edge_ns, METRICS).unwrap_or_else(|e| panic!("{e}"));
    let n = |outcome: &str| {
        metrics::value(
            &samples,
            "director_zone_queries_total",
            &[("transport", "udp"), ("outcome", outcome)],
        )
        .unwrap_or(0.0) as u64
    };
    assert_eq!(n("truncated_rate_limited"), f.truncated, "{f:?}");
    assert_eq!(
        n("truncated_rate_limited") + n("drop_rate_limited"),
        limited
    );
    // TCP is never limited: a resolver that got TC comes back and gets its answer.
    let tcp = dig_at(&lab, NS1, &["+tcp", &name, "A"]);
    assert_eq!(tcp.data("A"), ["192.0.2.25"], "{}", tcp.text);
}

/// A signed zone: a key made with `dnssec keygen`, its DS the resolver's trust anchor.
/// Returns the lab, run, the config's directory and the DS line.
fn start_signed() -> (Lab, Controller, TempDir, TempDir, String) {
    let keys = TempDir::new("zone", "keys");
    let lab0 = std::process::Command::new(director_tests::netns::ctl_binary())
        .args(["dnssec", "keygen", "--zone", ZONE, "--dir"])
        .arg(keys.root())
        .output()
        .unwrap();
    assert!(lab0.status.success(), "keygen: {}", describe(&lab0));
    let printed = String::from_utf8_lossy(&lab0.stdout).into_owned();
    let private = printed.lines().next().unwrap().to_string();
    let ds = printed
        .lines()
        .find(|l| l.contains(" DS "))
        .unwrap()
        .to_string();
    let (lab, ctl, dir) = start_with(&format!("dnssec = {{ keys = [{private:?}] }}\n"));
    (lab, ctl, dir, keys, ds)
}

#[test]
fn a_validating_resolver_authenticates_the_signed_zone() {
    let (mut lab, ctl, dir, _keys, ds) = start_signed();
    // The DS `dnssec ds` prints for the config is the one keygen printed.
    let cfg = dir.path("director.toml").display().to_string();
    let printed = lab.ctl_ok(&["dnssec", "ds", "--config", &cfg]);
    assert_eq!(printed.trim(), ds.trim());
    lab.start_validating_unbound_at(ZONE, &ds, &format!("mail.{ZONE}"), NS1);
    for (name, rtype, status) in [
        (ZONE.to_string(), "SOA", "NOERROR"),
        (ZONE.to_string(), "DNSKEY", "NOERROR"),
        (ZONE.to_string(), "MX", "NOERROR"),
        (format!("info.{ZONE}"), "TXT", "NOERROR"),
        (format!("MaIl.{ZONE}"), "A", "NOERROR"),
        (format!("mail.{ZONE}"), "TXT", "NOERROR"),
        (format!("nope.{ZONE}"), "A", "NXDOMAIN"),
        (format!("deep.nope.{ZONE}"), "MX", "NXDOMAIN"),
    ] {
        let r = resolve(&lab, &name, rtype);
        assert_eq!(
            r.status.as_deref(),
            Some(status),
            "{name} {rtype}:\n{}\n{}\n{}",
            r.text,
            lab.unbound_log(),
            ctl.log()
        );
        assert!(
            r.has_flag("ad"),
            "{name} {rtype}: not authenticated:\n{}\n{}",
            r.text,
            lab.unbound_log()
        );
    }
}

#[test]
fn the_signed_zone_dumps_and_checks_now_and_six_days_on_not_eight() {
    let (lab, _ctl, dir, _keys, _ds) = start_signed();
    let cfg = dir.path("director.toml").display().to_string();
    let text = lab.ctl_ok(&["dnssec", "dump", "--config", &cfg]);
    let file = dir.path("signed.zone");
    std::fs::write(&file, &text).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let check = |days: u64| {
        let at = (now + days * 86_400).to_string();
        let k = std::process::Command::new("kzonecheck")
            .args(["-o", ZONE, "-d", "on", "-t", &at])
            .arg(&file)
            .output()
            .unwrap();
        let l = std::process::Command::new("ldns-verify-zone")
            .args(["-t", &format!("+{}", days * 86_400)])
            .arg(&file)
            .output()
            .unwrap();
        (k, l)
    };
    // The service names' addresses are per-client sets, not in the file: their NSEC
    // bitmaps (A, AAAA) are kzonecheck's only finding allowed.
    let services = [format!("www.{ZONE}"), format!("pool.{ZONE}"), long_name()];
    let only_service_bitmaps = |k: &std::process::Output| {
        let out = String::from_utf8_lossy(&k.stdout);
        let findings: Vec<&str> = out.lines().filter(|l| l.starts_with('[')).collect();
        !findings.is_empty()
            && findings.iter().all(|l| {
                l.ends_with("wrong NSEC(3) bitmap ")
                    && services.iter().any(|s| l.starts_with(&format!("[{s}.]")))
            })
    };
    for days in [0, 6] {
        let (k, l) = check(days);
        assert!(
            k.status.success() || only_service_bitmaps(&k),
            "kzonecheck +{days}d: {}\n{text}",
            describe(&k)
        );
        assert!(
            l.status.success(),
            "ldns-verify-zone +{days}d: {}\n{text}",
            describe(&l)
        );
    }
    // kzonecheck stops at its first finding (a service's bitmap), so the expiry is
    // ldns-verify-zone's to see.
    let (_, l) = check(8);
    assert!(
        !l.status.success(),
        "ldns-verify-zone passed 8 days on:\n{text}"
    );
    assert!(text.contains(" DNSKEY ") && text.contains(" NSEC ") && text.contains(" CDS "));
}
