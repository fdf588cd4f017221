//! End to end: director attached to a veth in a network namespace, queried by real clients
//! (dig, kdig) from another namespace, with Knot DNS as the authoritative server behind it
//! for every name director does not own.
//!
//! Run as root: `cargo test -p director-tests --test e2e_dns -- --test-threads=1`.

use std::process::Command;

use director_common::select::Mode;
use director_ctl::api;
use director_tests::netns::{
    describe, Lab, Reply, Zone, EDGE_V4, EDGE_V6, RESOLVER, RESOLVER_PORT,
};

const FRA_V4: &str = "198.51.100.10";
const FRA_V6: &str = "2001:db8:100::10";
const NYC_V4: &str = "198.51.100.20";
const NYC_V6: &str = "2001:db8:100::20";
const WWW: &str = "www.example.com";
/// Knot's own record for director's name: seeing it means director passed the query.
const KNOT_WWW: &str = "198.51.100.99";
const KNOT_OTHER: &str = "198.51.100.77";

/// The zones behind director: example.com (which also holds director's name, with a
/// different address) and example.net.
const ZONES: &[Zone<'_>] = &[
    Zone {
        origin: "example.com.",
        records: "www A 198.51.100.99\nother A 198.51.100.77",
    },
    Zone {
        origin: "example.net.",
        records: "www A 198.51.100.88",
    },
];

/// A lab with director attached, servers fra-1 and nyc-1 (both families), and
/// www.example.com (TTL 60): nyc-1 for 203.0.113.0/24 and 2001:db8:aaaa::/48, fra-1 for
/// everyone else.
fn www_lab() -> Lab {
    let lab = Lab::new();
    lab.attach();
    lab.ctl_ok(&["server", "add", "fra-1", "--ipv4", FRA_V4, "--ipv6", FRA_V6]);
    lab.ctl_ok(&["server", "add", "nyc-1", "--ipv4", NYC_V4, "--ipv6", NYC_V6]);
    lab.ctl_ok(&["service", "add", WWW, "--ttl", "60"]);
    for (prefix, servers) in [
        ("0.0.0.0/0", "fra-1"),
        ("203.0.113.0/24", "nyc-1"),
        ("::/0", "fra-1"),
        ("2001:db8:aaaa::/48", "nyc-1"),
    ] {
        lab.ctl_ok(&["route", "set", WWW, prefix, servers]);
    }
    lab
}

fn www_lab_with_knot() -> Lab {
    let mut lab = www_lab();
    lab.start_knot(ZONES);
    lab
}

/// How often each query of the answer-shape tests is asked. Whether director can grow a
/// packet into its answer depends on the room the kernel left after the frame, which
/// varies from packet to packet on veth; one lucky query would hide a failure.
const TRIES: usize = 5;

fn at(server: &str) -> String {
    format!("@{server}")
}

/// dig from the client; the reply parsed.
fn dig(lab: &Lab, args: &[&str]) -> Reply {
    Reply::parse(&lab.dig(args))
}

/// A reply that must come from director. Without one, director passed the query and
/// nothing behind it answered: name the pass counters so the failure says why.
fn expect_reply(lab: &Lab, text: String, query: &[&str]) -> Reply {
    let r = Reply::parse(&text);
    if r.status.is_none() {
        let s = lab.stats();
        let passes: Vec<_> = s
            .counters
            .iter()
            .filter(|(n, v)| n.starts_with("pass_") && *v > 0)
            .collect();
        panic!("no reply to {query:?}; director's non-zero pass counters: {passes:?}\n{text}");
    }
    r
}

/// dig that must be answered by director.
fn ask(lab: &Lab, args: &[&str]) -> Reply {
    expect_reply(lab, lab.dig(args), args)
}

/// kdig that must be answered by director.
fn kask(lab: &Lab, args: &[&str]) -> Reply {
    expect_reply(lab, lab.kdig(args), args)
}

/// The only answer record's data, asserting a NOERROR reply with exactly one record.
fn single(r: &Reply) -> &str {
    assert_eq!(r.status.as_deref(), Some("NOERROR"), "{}", r.text);
    assert_eq!(r.answers.len(), 1, "expected one answer:\n{}", r.text);
    &r.answers[0].data
}

/// Asserts director's reply shape: NOERROR, qr and aa, and one `rtype` record for
/// www.example.com (in any case) with the service's TTL and `data`.
fn assert_director_answer(r: &Reply, rtype: &str, data: &str) {
    assert_eq!(r.status.as_deref(), Some("NOERROR"), "{}", r.text);
    assert!(
        r.has_flag("qr") && r.has_flag("aa"),
        "flags {:?}:\n{}",
        r.flags,
        r.text
    );
    assert_eq!(r.answers.len(), 1, "{}", r.text);
    let a = &r.answers[0];
    assert!(
        a.name.eq_ignore_ascii_case("www.example.com."),
        "{}",
        r.text
    );
    assert_eq!(
        (a.rtype.as_str(), a.ttl, a.data.as_str()),
        (rtype, 60, data),
        "{}",
        r.text
    );
}

#[test]
fn dig_and_kdig_get_a_and_aaaa_over_both_transports() {
    let lab = www_lab();
    let before = lab.stats().get("answered");
    let mut queries = 0;
    for _ in 0..TRIES {
        for server in [EDGE_V4, EDGE_V6] {
            for (rtype, want) in [("A", FRA_V4), ("AAAA", FRA_V6)] {
                let r = ask(&lab, &[&at(server), WWW, rtype]);
                assert_director_answer(&r, rtype, want);
                let r = kask(&lab, &[&at(server), WWW, rtype]);
                assert_director_answer(&r, rtype, want);
                queries += 2;
            }
        }
    }
    // Nothing else in the lab answers DNS: every reply came from director.
    let s = lab.stats();
    assert_eq!(s.get("answered") - before, queries);
    assert_eq!(s.service(WWW), queries);
}

#[test]
fn mixed_case_question_is_echoed() {
    let lab = www_lab();
    let name = "WwW.ExAmPlE.cOm";
    // dig only: kdig lower-cases the name before it sends the query (seen in its packets),
    // so its output cannot show whether the case came back.
    for server in [EDGE_V4, EDGE_V6] {
        for rtype in ["A", "AAAA"] {
            let r = ask(&lab, &[&at(server), name, rtype]);
            assert_eq!(
                r.question,
                vec![(format!("{name}."), rtype.to_string())],
                "{}",
                r.text
            );
            assert_director_answer(&r, rtype, if rtype == "A" { FRA_V4 } else { FRA_V6 });
        }
    }
}

#[test]
fn client_subnet_picks_the_route_and_echoes_its_scope() {
    let lab = www_lab();
    // (query type, client subnet, answer, CLIENT-SUBNET echoed with the route's length)
    let cases = [
        ("A", "203.0.113.0/24", NYC_V4, "203.0.113.0/24/24"),
        // A longer source prefix than the route: the scope is the route's /24.
        ("A", "203.0.113.7/32", NYC_V4, "203.0.113.7/32/24"),
        // No specific route: the default, scoped to /24 because 203.0.113.0/24 inside it
        // answers otherwise (a resolver must not reuse this answer for that network).
        ("A", "198.51.100.0/24", FRA_V4, "198.51.100.0/24/24"),
        ("A", "2001:db8:aaaa::/48", NYC_V4, "2001:db8:aaaa::/48/48"),
        (
            "AAAA",
            "2001:db8:aaaa::/48",
            NYC_V6,
            "2001:db8:aaaa::/48/48",
        ),
        (
            "AAAA",
            "2001:db8:bbbb::/48",
            FRA_V6,
            "2001:db8:bbbb::/48/48",
        ),
    ];
    for _ in 0..TRIES {
        for server in [EDGE_V4, EDGE_V6] {
            for (rtype, subnet, want, echo) in cases {
                let r = ask(
                    &lab,
                    &[&at(server), WWW, rtype, &format!("+subnet={subnet}")],
                );
                assert_director_answer(&r, rtype, want);
                assert_eq!(r.client_subnet.as_deref(), Some(echo), "{}", r.text);
            }
        }
    }
}

/// A real ECS-caching resolver in front of director (unbound with subnetcache, RFC 7871
/// §7.3: an answer is cached for the network its scope names). Routes 0.0.0.0/0 -> fra-1
/// and 203.0.113.0/24 -> nyc-1: a client in 198.51.100.0/24 asks first and gets fra-1; a
/// client in 203.0.113.0/24 then asks the same resolver and must get nyc-1, not fra-1 from
/// the cache (with scope 0 on the first answer, it did).
#[test]
fn an_ecs_caching_resolver_gives_each_network_its_own_server() {
    let mut lab = www_lab();
    lab.start_unbound("example.com", WWW);
    let via_resolver = |subnet: &str| -> Reply {
        let out = lab.client(&[
            "dig",
            "+tries=1",
            "+timeout=3",
            &format!("@{RESOLVER}"),
            "-p",
            RESOLVER_PORT,
            WWW,
            "A",
            &format!("+subnet={subnet}"),
        ]);
        Reply::parse(&String::from_utf8_lossy(&out.stdout))
    };
    let answered = || lab.stats().get("answered");
    let before = answered();
    for (subnet, want) in [
        ("198.51.100.0/24", FRA_V4),
        ("203.0.113.0/24", NYC_V4),
        // Asked again: both from the cache now, each still its own.
        ("198.51.100.0/24", FRA_V4),
        ("203.0.113.0/24", NYC_V4),
        // Another network outside 203.0.113.0/24: the default's server.
        ("192.0.2.0/24", FRA_V4),
    ] {
        let r = via_resolver(subnet);
        assert_eq!(
            r.data("A"),
            vec![want.to_string()],
            "client in {subnet} via unbound:\n{}\nunbound's log:\n{}",
            r.text,
            lab.unbound_log()
        );
    }
    // Three networks, three answers from director: the repeats came from the cache.
    assert_eq!(
        answered() - before,
        3,
        "director answered other than once per network"
    );
}

#[test]
fn knot_answers_every_name_director_does_not_own() {
    let lab = www_lab_with_knot();
    let s0 = lab.stats();
    for server in [EDGE_V4, EDGE_V6] {
        let r = dig(&lab, &[&at(server), "other.example.com", "A"]);
        assert_eq!(single(&r), KNOT_OTHER);
        assert!(r.has_flag("aa"), "{}", r.text);
        let r = dig(&lab, &[&at(server), "example.net", "SOA"]);
        assert_eq!(r.data("SOA").len(), 1, "{}", r.text);
        // A type director does not serve, for the name it owns.
        let r = dig(&lab, &[&at(server), WWW, "MX"]);
        assert_eq!(r.status.as_deref(), Some("NOERROR"), "{}", r.text);
        assert!(r.answers.is_empty(), "{}", r.text);
    }
    let s1 = lab.stats();
    assert_eq!(
        s1.get("answered"),
        s0.get("answered"),
        "director answered a name it does not own"
    );
    // other.example.com A is a name director does not own; SOA and MX are refused by type
    // before the name is looked up (director-common's dns.rs checks the type first).
    let delta = |c: &str| s1.get(c) - s0.get(c);
    assert_eq!(delta("pass_unknown_name"), 2);
    assert_eq!(delta("pass_qtype_or_class"), 4);

    // Knot also has www.example.com (asked over loopback, where director is not attached);
    // from the client, director's answer must win.
    let direct = Reply::parse(&lab.dig_in_edge(&[&at(EDGE_V4), WWW, "A"]));
    assert_eq!(single(&direct), KNOT_WWW);
    for server in [EDGE_V4, EDGE_V6] {
        assert_eq!(single(&dig(&lab, &[&at(server), WWW, "A"])), FRA_V4);
    }
    let s2 = lab.stats();
    assert_eq!(s2.get("answered") - s1.get("answered"), 2);
    assert_eq!(s2.service(WWW) - s1.service(WWW), 2);
}

#[test]
fn server_down_moves_the_answer_and_up_restores_it() {
    let lab = www_lab_with_knot();
    lab.ctl_ok(&[
        "service",
        "add",
        WWW,
        "--ttl",
        "60",
        "--answers",
        "1",
        "--select",
        "client",
    ]);
    lab.ctl_ok(&["route", "set", WWW, "0.0.0.0/0", "fra-1,nyc-1"]);
    let answer = || single(&dig(&lab, &[&at(EDGE_V4), WWW, "A"])).to_string();

    // select client: this client always gets the same one of the two.
    let first = answer();
    assert_eq!(answer(), first);
    let (first_name, second_name, second) = match first.as_str() {
        FRA_V4 => ("fra-1", "nyc-1", NYC_V4),
        NYC_V4 => ("nyc-1", "fra-1", FRA_V4),
        other => panic!("answer {other} is neither server"),
    };
    lab.ctl_ok(&["server", "set", first_name, "--down"]);
    assert_eq!(answer(), second, "{first_name} is down");
    lab.ctl_ok(&["server", "set", first_name, "--up"]);
    assert_eq!(answer(), first, "{first_name} is up again");

    // Every server of the route down: director passes and knot answers with its record.
    lab.ctl_ok(&["server", "set", first_name, "--down"]);
    lab.ctl_ok(&["server", "set", second_name, "--down"]);
    let s0 = lab.stats();
    assert_eq!(answer(), KNOT_WWW);
    let s1 = lab.stats();
    assert_eq!(s1.get("pass_no_server") - s0.get("pass_no_server"), 1);
    assert_eq!(s1.get("answered"), s0.get("answered"));

    lab.ctl_ok(&["server", "set", second_name, "--up"]);
    assert_eq!(answer(), second);
}

#[test]
fn two_answers_per_reply() {
    let lab = www_lab();
    lab.ctl_ok(&["service", "add", WWW, "--ttl", "60", "--answers", "2"]);
    lab.ctl_ok(&["route", "set", WWW, "0.0.0.0/0", "fra-1,nyc-1"]);
    lab.ctl_ok(&["route", "set", WWW, "::/0", "fra-1,nyc-1"]);
    for _ in 0..TRIES {
        for server in [EDGE_V4, EDGE_V6] {
            for (rtype, want) in [("A", [FRA_V4, NYC_V4]), ("AAAA", [FRA_V6, NYC_V6])] {
                let r = ask(&lab, &[&at(server), WWW, rtype]);
                assert_eq!(r.status.as_deref(), Some("NOERROR"), "{}", r.text);
                assert!(r.has_flag("aa"), "{}", r.text);
                assert_eq!(r.data(rtype), want, "{}", r.text);
                assert!(r.answers.iter().all(|a| a.ttl == 60), "{}", r.text);
            }
        }
    }
}

/// `server list`, `service list` and `route list` as JSON: the whole configuration.
fn config(lab: &Lab) -> [String; 3] {
    ["server", "service", "route"].map(|what| lab.ctl_ok(&[what, "list", "--json"]))
}

/// Asserts director-ctl refuses `args` with a non-zero exit and exactly one stderr line
/// that contains `problem`.
fn assert_refused(lab: &Lab, args: &[&str], problem: &str) {
    let out = lab.ctl(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "{args:?} was accepted: {}",
        describe(&out)
    );
    assert_eq!(
        err.lines().count(),
        1,
        "{args:?}: expected one line on stderr: {}",
        describe(&out)
    );
    assert!(
        err.contains(problem),
        "{args:?}: stderr does not name {problem:?}: {err}"
    );
}

#[test]
fn cli_refuses_bad_input_and_changes_nothing() {
    let lab = www_lab();
    let nine: Vec<String> = (1..=9).map(|i| format!("s{i}")).collect();
    for (i, s) in nine.iter().enumerate() {
        lab.ctl_ok(&[
            "server",
            "add",
            s,
            "--ipv4",
            &format!("198.51.100.{}", 100 + i),
        ]);
    }
    let nine = nine.join(",");
    let label63 = "a".repeat(63);
    // Four 63-byte labels: 4 * 64 + 1 = 257 bytes in wire format.
    let long_name = [label63.as_str(); 4].join(".");
    let long_label = format!("{}.example.com", "b".repeat(64));
    let before = config(&lab);

    let cases: &[(&[&str], &str)] = &[
        (
            &["route", "set", WWW, "192.0.2.0", "fra-1"],
            "malformed prefix",
        ),
        (
            &["route", "set", WWW, "192.0.2.0/33", "fra-1"],
            "malformed prefix",
        ),
        (
            &["route", "set", WWW, "192.0.2.x/24", "fra-1"],
            "malformed prefix",
        ),
        (&["route", "set", WWW, "192.0.2.1/24", "fra-1"], "host bits"),
        (
            &["route", "set", WWW, "2001:db8::1/32", "fra-1"],
            "host bits",
        ),
        (
            &["route", "set", WWW, "192.0.2.0/24", "fra-1,nosuch"],
            "unknown server",
        ),
        (&["server", "set", "nosuch", "--down"], "unknown server"),
        (&["server", "del", "nosuch"], "unknown server"),
        (
            &[
                "route",
                "set",
                "nosuch.example.com",
                "192.0.2.0/24",
                "fra-1",
            ],
            "unknown service",
        ),
        (&["service", "del", "nosuch.example.com"], "unknown service"),
        (&["service", "add", &long_name], "over the limit of 255"),
        (&["service", "add", &long_label], "over the limit of 63"),
        (&["route", "set", WWW, "192.0.2.0/24", &nine], "at most 8"),
        (&["server", "del", "fra-1"], "used by"),
    ];
    for (args, problem) in cases {
        assert_refused(&lab, args, problem);
    }
    assert_eq!(
        config(&lab),
        before,
        "a refused command changed the configuration"
    );
}

#[test]
fn map_commands_refused_when_nothing_is_attached() {
    let lab = Lab::new();
    let cases: &[&[&str]] = &[
        &["server", "add", "fra-1", "--ipv4", FRA_V4],
        &["server", "set", "fra-1", "--down"],
        &["server", "del", "fra-1"],
        &["server", "list", "--json"],
        &["service", "add", WWW],
        &["service", "del", WWW],
        &["service", "list", "--json"],
        &["route", "set", WWW, "0.0.0.0/0", "fra-1"],
        &["route", "del", WWW, "0.0.0.0/0"],
        &["route", "list", "--json"],
        &["stats", "--json"],
    ];
    for args in cases {
        assert_refused(&lab, args, "nothing is attached");
    }
    assert!(
        !lab.pin_dir.exists(),
        "a refused command created {}",
        lab.pin_dir.display()
    );
}

#[test]
fn detach_hands_owned_names_back_to_knot() {
    let lab = www_lab_with_knot();
    assert_eq!(single(&dig(&lab, &[&at(EDGE_V4), WWW, "A"])), FRA_V4);
    lab.ctl_ok(&["detach", "--iface", &lab.edge_if]);
    assert!(
        !lab.pin_dir.exists(),
        "{} still exists after the last detach",
        lab.pin_dir.display()
    );
    let link = Command::new("ip")
        .args(["-n", &lab.edge_ns, "link", "show", "dev", &lab.edge_if])
        .output()
        .unwrap();
    let link = String::from_utf8_lossy(&link.stdout);
    assert!(
        !link.contains("xdp"),
        "an XDP program is still on {}: {link}",
        lab.edge_if
    );
    for server in [EDGE_V4, EDGE_V6] {
        let r = dig(&lab, &[&at(server), WWW, "A"]);
        assert_eq!(
            single(&r),
            KNOT_WWW,
            "knot should answer once director is gone"
        );
        let r = dig(&lab, &[&at(server), WWW, "AAAA"]);
        assert_eq!(r.status.as_deref(), Some("NOERROR"), "{}", r.text);
        assert!(
            r.answers.is_empty(),
            "knot has no AAAA for www:\n{}",
            r.text
        );
    }
}

/// A `--json` document parsed into the type director-ctl prints it from.
fn json<T: serde::de::DeserializeOwned>(lab: &Lab, args: &[&str]) -> T {
    let text = lab.ctl_ok(args);
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{args:?} printed no such document ({e}):\n{text}"))
}

#[test]
fn list_commands_print_typed_json_documents() {
    let lab = www_lab();
    lab.ctl_ok(&["route", "set", WWW, "198.51.100.0/24", "nyc-1=3|fra-1=2"]);
    lab.ctl_ok(&["server", "set", "nyc-1", "--down"]);
    lab.ctl_ok(&[
        "service",
        "add",
        "video.example.com",
        "--answers",
        "2",
        "--select",
        "client",
    ]);

    let servers: api::ServerList = json(&lab, &["server", "list", "--json"]);
    assert_eq!(servers.version, api::VERSION);
    let by_name = |n: &str| servers.servers.iter().find(|s| s.name == n).cloned();
    let fra = by_name("fra-1").expect("fra-1 is listed");
    assert_eq!(fra.ipv4, Some(FRA_V4.parse().unwrap()));
    assert_eq!(fra.ipv6, Some(FRA_V6.parse().unwrap()));
    assert!(fra.up);
    assert!(!by_name("nyc-1").expect("nyc-1 is listed").up);

    let services: api::ServiceList = json(&lab, &["service", "list", "--json"]);
    let names: Vec<(&str, u32, u8, Mode)> = services
        .services
        .iter()
        .map(|s| (s.name.as_str(), s.ttl, s.answers, s.select))
        .collect();
    assert_eq!(
        names,
        [
            ("video.example.com", 30, 2, Mode::Client),
            (WWW, 60, 1, Mode::Random)
        ]
    );

    let routes: api::RouteList = json(&lab, &["route", "list", WWW, "--json"]);
    let route = routes
        .routes
        .iter()
        .find(|r| r.prefix.to_string() == "198.51.100.0/24")
        .unwrap_or_else(|| panic!("no route for 198.51.100.0/24: {routes:?}"));
    let server = |s: &str, weight| api::RouteServer {
        server: s.to_string(),
        weight,
    };
    assert_eq!(route.service, WWW);
    assert_eq!(route.primary, [server("nyc-1", 3)]);
    assert_eq!(route.fallback, [server("fra-1", 2)]);
    assert_eq!(routes.routes.len(), 5, "{routes:?}");

    let status: api::Status = json(&lab, &["status", "--json"]);
    assert_eq!(status.interfaces, std::slice::from_ref(&lab.edge_if));
    assert_eq!((status.servers, status.services), (2, 2));
    assert_eq!((status.routes_v4, status.routes_v6), (3, 2));
    // Five prefixes, three ranked lists (fra-1; nyc-1; nyc-1=3 then fra-1=2): each list is
    // stored once, however many prefixes and ECS scopes use it.
    assert_eq!(status.stored_decisions, 3, "{status:?}");
    assert!(status.active_table.is_some() && status.verified_instructions.unwrap_or(0) > 0);

    // One query, counted by reason and by service.
    let before: api::Stats = json(&lab, &["stats", "--json"]);
    ask(&lab, &[&at(EDGE_V4), WWW, "A"]);
    let after: api::Stats = json(&lab, &["stats", "--json"]);
    assert_eq!(after.counters["answered"], before.counters["answered"] + 1);
    assert_eq!(after.services[WWW], before.services[WWW] + 1);
    assert_eq!(after.services["video.example.com"], 0);
}

fn ip_ok(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("running ip");
    assert!(out.status.success(), "ip {args:?}: {}", describe(&out));
}

/// Answered only on the edge's own addresses: the host's (read at attach, again by
/// `address refresh`, as `run` does at every poll) and ones added by the operator. A query
/// routed to the edge for any other address is left to the host.
#[test]
fn only_the_edges_own_addresses_are_answered() {
    let lab = www_lab();
    let list: api::AddressList = json(&lab, &["address", "list", "--json"]);
    for a in [EDGE_V4, EDGE_V6] {
        assert!(
            list.addresses
                .iter()
                .any(|l| l.address.to_string() == a && l.host && !l.configured),
            "{a} not listed as the host's: {list:?}"
        );
    }

    // Two addresses routed to the edge that are not on it.
    const ON_LO: &str = "203.0.113.200";
    const ADDED: &str = "203.0.113.201";
    for a in [ON_LO, ADDED] {
        let route = format!("{a}/32");
        ip_ok(&["-n", &lab.client_ns, "route", "add", &route, "via", EDGE_V4]);
    }
    let not_for_us = |lab: &Lab| {
        let s: api::Stats = json(lab, &["stats", "--json"]);
        s.counters["pass_not_for_us"]
    };
    let passed_to_host = |server: &str| {
        let before = not_for_us(&lab);
        let r = dig(&lab, &[&at(server), WWW, "A"]);
        assert!(r.status.is_none(), "answered on {server}:\n{}", r.text);
        assert_eq!(not_for_us(&lab), before + 1, "the pass was not counted");
    };
    passed_to_host(ON_LO);
    passed_to_host(ADDED);

    // The host gains an address (on lo, as anycast DNS addresses are): answered after a
    // refresh, from that address.
    let host_route = format!("{ON_LO}/32");
    ip_ok(&["-n", &lab.edge_ns, "addr", "add", &host_route, "dev", "lo"]);
    lab.ctl_ok(&["address", "refresh"]);
    assert_director_answer(&ask(&lab, &[&at(ON_LO), WWW, "A"]), "A", FRA_V4);
    ip_ok(&["-n", &lab.edge_ns, "addr", "del", &host_route, "dev", "lo"]);
    lab.ctl_ok(&["address", "refresh"]);
    passed_to_host(ON_LO);

    // An address added by the operator stays until deleted.
    lab.ctl_ok(&["address", "add", ADDED]);
    lab.ctl_ok(&["address", "refresh"]);
    assert_director_answer(&ask(&lab, &[&at(ADDED), WWW, "A"]), "A", FRA_V4);
    let list: api::AddressList = json(&lab, &["address", "list", "--json"]);
    assert!(
        list.addresses
            .iter()
            .any(|l| l.address.to_string() == ADDED && l.configured && !l.host),
        "{list:?}"
    );
    lab.ctl_ok(&["address", "del", ADDED]);
    passed_to_host(ADDED);

    // Refused, naming the problem: a host address was not added by hand, a group address
    // is never answered.
    for (args, problem) in [
        (vec!["address", "del", EDGE_V4], "was not added"),
        (vec!["address", "add", "224.0.0.1"], "not a unicast address"),
        (vec!["address", "add", "192.0.2"], "malformed address"),
    ] {
        let out = lab.ctl(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(problem),
            "{args:?}: {}",
            describe(&out)
        );
    }
    assert_director_answer(&ask(&lab, &[&at(EDGE_V4), WWW, "A"]), "A", FRA_V4);
}
