//! Plain-text output: each command's [`crate::api`] document as an operator reads it.

use std::fmt::Write;
use std::path::Path;

use director_common::counters;

use crate::api;
use crate::controller::engine::Metric;

pub fn servers(l: &api::ServerList) -> String {
    let mut o = String::new();
    for s in &l.servers {
        let v4 = s.ipv4.map_or("-".into(), |a| a.to_string());
        let v6 = s.ipv6.map_or("-".into(), |a| a.to_string());
        let state = if s.up { "up" } else { "down" };
        let _ = writeln!(o, "{:<20} {:<16} {:<40} {state}", s.name, v4, v6);
    }
    o
}

pub fn services(l: &api::ServiceList) -> String {
    let mut o = String::new();
    for s in &l.services {
        let _ = writeln!(
            o,
            "{:<40} ttl={:<6} answers={} select={}",
            s.name, s.ttl, s.answers, s.select
        );
    }
    o
}

/// A route's servers in the syntax `route set` takes: `a=2,b|c=1`.
fn server_list(r: &api::Route) -> String {
    let join = |v: &[api::RouteServer]| {
        v.iter()
            .map(|s| format!("{}={}", s.server, s.weight))
            .collect::<Vec<_>>()
            .join(",")
    };
    if r.fallback.is_empty() {
        join(&r.primary)
    } else {
        format!("{}|{}", join(&r.primary), join(&r.fallback))
    }
}

pub fn routes(l: &api::RouteList) -> String {
    let mut o = String::new();
    for r in &l.routes {
        let prefix = r.prefix.to_string();
        let _ = writeln!(o, "{:<40} {:<44} {}", r.service, prefix, server_list(r));
    }
    o
}

pub fn stats(s: &api::Stats) -> String {
    let mut o = String::new();
    // In the kernel's reason order, which groups the passes.
    for r in counters::ALL {
        let n = s.counters.get(r.name()).copied().unwrap_or(0);
        let _ = writeln!(o, "{:<32} {n}", r.name());
    }
    for (name, n) in &s.services {
        let _ = writeln!(o, "service {name:<24} {n}");
    }
    o
}

pub fn status(st: &api::Status) -> String {
    let mut o = String::new();
    if st.interfaces.is_empty() {
        let _ = writeln!(o, "not attached (pin directory {})", st.pin_dir.display());
    } else {
        let _ = writeln!(o, "attached to: {}", st.interfaces.join(", "));
    }
    if let Some(id) = st.program_id {
        let insns = st.verified_instructions.unwrap_or(0);
        let _ = writeln!(o, "program id {id}, {insns} instructions verified");
    }
    let _ = writeln!(
        o,
        "servers {}, services {}, routes {} IPv4 + {} IPv6",
        st.servers, st.services, st.routes_v4, st.routes_v6
    );
    o
}

pub fn check(path: &Path, s: &api::Check) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{}: OK", path.display());
    let _ = writeln!(
        o,
        "sites {}, servers {}, services {}",
        s.sites, s.servers, s.services
    );
    for r in &s.inputs.bgp_routes {
        let _ = writeln!(o, "  site {:<12} {} BGP routes", r.site, r.routes);
    }
    if s.inputs.bgp_damaged_skipped > 0 {
        let _ = writeln!(
            o,
            "  {} damaged MRT records skipped",
            s.inputs.bgp_damaged_skipped
        );
    }
    let _ = writeln!(
        o,
        "  geo: {} networks ({} without a location), {} own locations; {} RTT measurements",
        s.inputs.geo_networks,
        s.inputs.geo_without_location,
        s.inputs.own_locations,
        s.inputs.rtt_measurements
    );
    let _ = writeln!(
        o,
        "client prefixes {}, kernel entries {} ({} saved by compression)",
        s.prefixes, s.entries, s.saved
    );
    for t in &s.tables {
        let _ = writeln!(
            o,
            "  {:<40} {} entries, {} saved",
            t.service, t.entries, t.saved
        );
    }
    let _ = writeln!(
        o,
        "read inputs in {:.2} s, computed in {:.2} s",
        s.load_seconds, s.compute_seconds
    );
    o
}

/// The servers' data, then the sort in the manner of Cisco's `debug ip director sort`.
pub fn explain(e: &api::Explain) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{} for {}", e.service, e.client);
    for s in &e.servers {
        let bgp = s.bgp_prefix.map_or("-".to_string(), |p| p.to_string());
        let location = s
            .location
            .as_ref()
            .map_or("-".to_string(), |l| match (l.lat, l.lon) {
                (Some(lat), Some(lon)) => format!("{} ({lat:.2},{lon:.2})", l.prefix),
                _ => format!("{} ({})", l.prefix, l.node.as_deref().unwrap_or("?")),
            });
        let rtt = s
            .rtt
            .as_ref()
            .map_or("-".to_string(), |r| format!("{} ({} ms)", r.prefix, r.ms));
        let _ = writeln!(
            o,
            "  {:<12} site {:<8} bgp {bgp:<20} location {location:<20} rtt {rtt:<20}",
            s.server, s.site
        );
    }
    o += &sort(&e.sort);
    o
}

/// A number as an operator reads it: integers without decimals, others to 3 places.
fn num(v: f64) -> String {
    if v != 0.0 && !(1e-3..1e15).contains(&v.abs()) {
        format!("{v:.1e}")
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), num)
}

fn terms(ts: &[api::Term]) -> String {
    match ts {
        [t] if t.weight == 1.0 => t.metric.to_string(),
        _ => ts
            .iter()
            .map(|t| format!("{}*{}", num(t.weight), t.metric))
            .collect::<Vec<_>>()
            .join(" + "),
    }
}

pub fn sort(s: &api::Sort) -> String {
    let mut o = String::new();
    let order: Vec<String> = s
        .levels
        .iter()
        .map(|l| format!("{}: {}", l.priority, terms(&l.metrics)))
        .collect();
    let by = if order.is_empty() {
        "nothing: all equal".to_string()
    } else {
        order.join(", ")
    };
    let _ = writeln!(
        o,
        "sort by {by} (rtt tolerance {}%)",
        num(s.rtt_tolerance_percent)
    );
    for t in &s.tiers {
        let _ = writeln!(o, "tier {}", t.tier);
        for st in &t.steps {
            step(&mut o, st);
        }
        let chosen: Vec<String> = t
            .chosen
            .iter()
            .map(|c| format!("{} (portion {})", c.server, c.portion.max(1)))
            .collect();
        let _ = writeln!(o, "  => {}", chosen.join(", "));
    }
    o
}

fn step(o: &mut String, st: &api::Step) {
    let _ = write!(o, "  priority {} {}", st.priority, terms(&st.metrics));
    match st.outcome {
        api::Outcome::NotReached => {
            o.push_str(": not reached (after random)\n");
            return;
        }
        api::Outcome::Random => {
            o.push_str(": the kernel picks among these at random, by portion\n");
            return;
        }
        api::Outcome::Compared => {}
    }
    if let (Some(lo), Some(lim)) = (st.rtt_lowest, st.rtt_limit) {
        let (lo, lim) = (num(lo), num(lim));
        let _ = write!(o, "  (lowest rtt {lo}, up to {lim} counts as {lo})");
    }
    o.push('\n');
    let med = st.metrics.iter().any(|m| m.metric == Metric::Med);
    let mut head = vec![format!("{:<16}", "server")];
    if med {
        head.push(format!("{:>10}", "exit AS"));
        head.push(format!("{:>10}", "MED"));
    } else {
        head.extend(
            st.metrics
                .iter()
                .map(|m| format!("{:>10}", m.metric.name())),
        );
        head.push(format!(
            "{:>10}",
            if st.metrics.len() > 1 { "sum" } else { "key" }
        ));
    }
    let _ = writeln!(o, "    {}  result", head.join(" "));
    for r in &st.rows {
        let mut cols = vec![format!("{:<16}", r.server)];
        if med {
            let (a, m) = r.med.map_or(("-".into(), "-".into()), |m| {
                (m.exit_as.to_string(), m.med.to_string())
            });
            cols.push(format!("{a:>10}"));
            cols.push(format!("{m:>10}"));
        } else {
            let value = |m: Metric| r.values.get(&m).copied().flatten();
            cols.extend(
                st.metrics
                    .iter()
                    .map(|t| format!("{:>10}", opt(value(t.metric)))),
            );
            cols.push(format!("{:>10}", opt(r.key)));
        }
        let result = match r.result {
            api::RowResult::Kept => "kept",
            api::RowResult::Out => "out",
            api::RowResult::OutNoData => "out (no data)",
        };
        let _ = writeln!(o, "    {}  {result}", cols.join(" "));
    }
}
