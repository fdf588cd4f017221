//! `cargo xtask demo`: director answering real dig queries in namespaces of its own.
//!
//! Builds nothing itself (cargo did), creates a client and an edge namespace, attaches
//! director to the edge, configures three sites' servers, a service and routes, then asks
//! from several client subnets (the packet's own source, and EDNS Client Subnet as a
//! resolver would send) and prints which server each got. Everything is removed at the end.

use director_tests::netns::{Lab, Reply, CLIENT_V4, CLIENT_V6, EDGE_V4, EDGE_V6};

const SERVERS: [(&str, &str, &str); 3] = [
    ("fra-1", "198.51.100.10", "2001:db8:f::10"),
    ("nyc-1", "198.51.100.20", "2001:db8:f::20"),
    ("sin-1", "198.51.100.30", "2001:db8:f::30"),
];

const ROUTES: [(&str, &str); 5] = [
    ("0.0.0.0/0", "fra-1"),
    ("203.0.113.0/25", "sin-1|nyc-1"),
    ("203.0.113.128/25", "nyc-1=2,fra-1"),
    ("::/0", "fra-1"),
    ("2001:db8:a::/48", "sin-1|fra-1"),
];

struct Ask {
    who: String,
    server: &'static str,
    name: &'static str,
    rtype: &'static str,
    subnet: Option<&'static str>,
}

fn server_of(addr: &str) -> &'static str {
    SERVERS.iter().find(|s| s.1 == addr || s.2 == addr).map_or("?", |s| s.0)
}

fn ask(lab: &Lab, a: &Ask) {
    let mut args = vec![format!("@{}", a.server), a.name.to_string(), a.rtype.to_string()];
    if let Some(s) = a.subnet {
        args.push(format!("+subnet={s}"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = Reply::parse(&lab.dig(&args));
    let got: Vec<String> = r
        .answers
        .iter()
        .map(|rr| format!("{} ({})", rr.data, server_of(&rr.data)))
        .collect();
    let answer = match &r.status {
        None => "no answer (passed to the host, where nothing listens)".to_string(),
        Some(s) if got.is_empty() => s.clone(),
        Some(_) => got.join(", "),
    };
    println!(
        "  {:<38} {:<20} {:<5} {:<40} {}",
        &a.who,
        r.question.first().map_or(a.name, |q| q.0.as_str()),
        a.rtype,
        answer,
        r.client_subnet.as_deref().map_or(String::new(), |s| format!("ECS {s}")),
    );
}

fn main() {
    let lab = Lab::new();
    println!("director demo: client namespace {} <-> edge namespace {}", lab.client_ns, lab.edge_ns);
    lab.attach();
    println!("attached director to {} (edge, {EDGE_V4} / {EDGE_V6})\n", lab.edge_if);

    for (name, v4, v6) in SERVERS {
        lab.ctl_ok(&["server", "add", name, "--ipv4", v4, "--ipv6", v6]);
    }
    lab.ctl_ok(&["service", "add", "www.example.com", "--ttl", "30", "--select", "client"]);
    for (prefix, servers) in ROUTES {
        lab.ctl_ok(&["route", "set", "www.example.com", prefix, servers]);
    }
    println!("$ director-ctl route list");
    print!("{}", lab.ctl_ok(&["route", "list"]));

    let asks = [
        ask_from(CLIENT_V4, EDGE_V4, "www.example.com", "A", None),
        ask_from("203.0.113.7/32", EDGE_V4, "www.example.com", "A", Some("203.0.113.7/32")),
        ask_from("203.0.113.200/32", EDGE_V4, "www.example.com", "A", Some("203.0.113.200/32")),
        ask_from(CLIENT_V6, EDGE_V6, "WwW.ExAmPlE.cOm", "AAAA", None),
        ask_from("2001:db8:a:1::/64", EDGE_V6, "www.example.com", "AAAA", Some("2001:db8:a:1::/64")),
        ask_from(CLIENT_V4, EDGE_V4, "other.example.com", "A", None),
    ];
    println!("\nqueries (dig from the client namespace):");
    for a in &asks {
        ask(&lab, a);
    }

    println!("\n$ director-ctl server set sin-1 --down");
    lab.ctl_ok(&["server", "set", "sin-1", "--down"]);
    ask(&lab, &asks[1]);
    ask(&lab, &asks[4]);

    println!("\n$ director-ctl stats");
    for line in lab.ctl_ok(&["stats"]).lines().filter(|l| !l.trim_end().ends_with(" 0")) {
        println!("  {line}");
    }
    println!("\ncleaning up namespaces and pins");
}

/// A query from the client itself (`subnet` None) or from a resolver on behalf of a subnet.
fn ask_from(who: &str, server: &'static str, name: &'static str, rtype: &'static str, subnet: Option<&'static str>) -> Ask {
    let who = match subnet {
        Some(_) => format!("resolver for {who} (ECS)"),
        None => format!("client {who}"),
    };
    Ask { who, server, name, rtype, subnet }
}
