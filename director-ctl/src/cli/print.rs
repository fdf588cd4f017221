//! Plain-text output: each command's [`crate::api`] document as an operator reads it.

use std::fmt::Write;
use std::path::Path;

use director_common::counters;

use crate::api;
use crate::controller::engine::Metric;

pub fn addresses(l: &api::AddressList) -> String {
    let mut o = String::new();
    for a in &l.addresses {
        let from = match (a.host, a.configured) {
            (true, true) => "host, added",
            (true, false) => "host",
            _ => "added",
        };
        let _ = writeln!(o, "{:<40} {from}", a.address);
    }
    o
}

pub fn servers(l: &api::ServerList) -> String {
    let mut o = String::new();
    for s in &l.servers {
        let v4 = s.ipv4.map_or("-".into(), |a| a.to_string());
        let v6 = s.ipv6.map_or("-".into(), |a| a.to_string());
        let state = match (s.up, s.drained) {
            (false, _) => "down",
            (true, true) => "drained",
            (true, false) => "up",
        };
        let load = s.load.map_or(String::new(), |l| format!(" load {l}"));
        let _ = writeln!(o, "{:<20} {:<16} {:<40} {state}{load}", s.name, v4, v6);
    }
    o
}

pub fn services(l: &api::ServiceList) -> String {
    let mut o = String::new();
    for s in &l.services {
        let rrl = s.rrl.as_ref().map_or(String::new(), |r| {
            format!(
                " rrl={}/s burst={} slip={} per /{} /{}",
                r.rate, r.burst, r.slip, r.ipv4_prefix, r.ipv6_prefix
            )
        });
        let dns = if s.dns { "" } else { " dns=no" };
        let _ = writeln!(
            o,
            "{:<40} ttl={:<6} answers={} select={}{rrl}{dns}",
            s.name, s.ttl, s.answers, s.select
        );
        for v in &s.vips {
            let _ = writeln!(o, "  {}", vip(v));
        }
    }
    o
}

fn vip(v: &api::ListedVip) -> String {
    let mss = if v.mss == 0 {
        "no clamp".to_string()
    } else {
        format!("mss {}", v.mss)
    };
    let src = v
        .encap_source
        .map_or(String::new(), |n| format!(", outer source {n}"));
    format!("vip {} mode {} ({mss}{src})", v.vip, v.mode)
}

pub fn flows(l: &api::FlowList) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{:<46} {:<46} {:<24} {:<16} {:>9}",
        "client", "vip", "service", "server", "age s"
    );
    for f in &l.flows {
        let mut note = String::new();
        if f.midstream {
            note.push_str(" midstream");
        }
        if f.moved {
            note.push_str(" moved");
        }
        let _ = writeln!(
            o,
            "{:<46} {:<46} {:<24} {:<16} {:>9.1}{note}",
            f.client.to_string(),
            f.vip.to_string(),
            f.service,
            f.server,
            f.age_s
        );
    }
    o
}

pub fn flow_stats(st: &api::FlowStats) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "flows pinned: {} of {}", st.flows, st.capacity);
    for (name, n) in &st.counters {
        let _ = writeln!(o, "{name:<20} {n}");
    }
    for (server, n) in &st.servers {
        let _ = writeln!(o, "server {server:<20} {n} connections");
    }
    o
}

pub fn rrl_exempt(l: &api::RrlExemptList) -> String {
    l.exempt.iter().map(|n| format!("{n}\n")).collect()
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
        "servers {}, services {}, routes {} IPv4 + {} IPv6, {} decisions stored",
        st.servers, st.services, st.routes_v4, st.routes_v6, st.stored_decisions
    );
    for v in &st.vips {
        let _ = writeln!(o, "{} → service {}", vip(v), v.service);
    }
    if !st.vips.is_empty() {
        let _ = writeln!(o, "flows pinned: {}", st.flows);
    }
    for (what, names) in [("set down", &st.admin_down), ("drained", &st.drained)] {
        if !names.is_empty() {
            let _ = writeln!(o, "{what}: {}", names.join(", "));
        }
    }
    if !st.load.is_empty() {
        let loads: Vec<String> = st.load.iter().map(|(n, l)| format!("{n} {l}")).collect();
        let _ = writeln!(o, "load: {}", loads.join(", "));
    }
    if !st.health.is_empty() {
        let _ = writeln!(
            o,
            "{:<40} {:<20} {:<10} answered",
            "service", "server", "health"
        );
        for h in &st.health {
            let state = match h.health {
                api::Health::Up => "up",
                api::Health::Down => "down",
                api::Health::Unchecked => "unchecked",
            };
            let answered = if h.out { "no" } else { "yes" };
            let _ = writeln!(
                o,
                "{:<40} {:<20} {state:<10} {answered}",
                h.service, h.server
            );
        }
    }
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

/// The servers' data with its sources, the sort in the manner of Cisco's `debug ip
/// director sort`, then the kernel's pick among the winners.
pub fn explain(e: &api::Explain) -> String {
    // Only what the sort looks at: no route for a geo-only service, no portion without
    // the portion draw.
    let used: Vec<Metric> = e
        .sort
        .levels
        .iter()
        .flat_map(|l| l.metrics.iter().map(|t| t.metric))
        .collect();
    let uses = |m: Metric| used.contains(&m);
    let bgp_used = e.sort.med || uses(Metric::Ext) || uses(Metric::Int);
    let mut o = String::new();
    let _ = writeln!(o, "{} for {}", e.service, e.client);
    if let Some(mode) = e.mode {
        let vips: Vec<String> = e.vips.iter().map(ToString::to_string).collect();
        let _ = writeln!(
            o,
            "  VIPs {} ({}): a new connection gets one of the final equals by weighted \
             rendezvous hash of its addresses and ports, and keeps it{}",
            vips.join(", "),
            mode.name(),
            if e.dns {
                ""
            } else {
                "; the name is not answered in DNS"
            }
        );
    }
    if uses(Metric::Geo) {
        match e.servers.iter().find_map(|s| s.location.as_ref()) {
            Some(l) => {
                let at = match (l.lat, l.lon) {
                    (Some(lat), Some(lon)) => format!("({lat:.2},{lon:.2})"),
                    _ => format!("node {}", l.node.as_deref().unwrap_or("?")),
                };
                let file = l
                    .file
                    .as_ref()
                    .map_or("-".into(), |f| f.display().to_string());
                let _ = writeln!(o, "  client located by {} at {at}, from {file}", l.prefix);
            }
            None => o.push_str("  client location unknown\n"),
        }
    }
    if e.portion_auto {
        let _ = writeln!(
            o,
            "  portion = \"auto\": shares start at {} and follow each server's headroom under \
             the load threshold in a running controller (director_auto_portion)",
            crate::controller::config::AUTO_PORTION_START
        );
    }
    for s in &e.servers {
        let _ = write!(o, "  {} (site {}", s.server, s.site);
        if e.sort.draw == Some(Metric::Portion) {
            let _ = write!(o, ", portion {}", s.portion);
        }
        o.push_str(")\n");
        match &s.bgp {
            Some(b) if bgp_used => {
                let med = b.med.map_or("none (counts as 0)".into(), |m| m.to_string());
                let files: Vec<String> = b.files.iter().map(|f| f.display().to_string()).collect();
                let _ = writeln!(
                    o,
                    "    bgp {} via next hop {}, exit AS {}, site AS {}, AS path {}, MED {med} \
                     ({})",
                    b.prefix,
                    b.next_hop,
                    b.exit_as,
                    b.site_as,
                    b.as_path_len,
                    files.join(", ")
                );
            }
            None if bgp_used => o.push_str("    bgp: no route\n"),
            _ => {}
        }
        if uses(Metric::Rtt) {
            match &s.rtt {
                Some(r) => {
                    let file = r
                        .file
                        .as_ref()
                        .map_or("-".into(), |f| f.display().to_string());
                    let _ = writeln!(o, "    rtt {} ms for {} ({file})", r.ms, r.prefix);
                }
                None => o.push_str("    rtt: not measured\n"),
            }
        }
        let m = &s.metrics;
        let v = |x: Option<u32>| x.map_or("-".into(), |x| x.to_string());
        let values: Vec<String> = used
            .iter()
            .filter_map(|&metric| {
                let text = match metric {
                    Metric::Ext => v(m.ext),
                    Metric::Int => v(m.int),
                    Metric::Ser => v(m.ser),
                    Metric::Rtt => m.rtt.map_or("-".into(), |r| r.to_string()),
                    Metric::Geo => opt(m.geo),
                    Metric::Admin => v(m.admin),
                    Metric::Portion | Metric::Random => return None,
                };
                Some(format!("{metric} {text}"))
            })
            .collect();
        if !values.is_empty() {
            let _ = writeln!(o, "    {}", values.join(", "));
        }
    }
    o += &sort(&e.sort);
    o += &pick(&e.pick, e.select);
    o
}

fn pick(p: &api::Pick, select: director_common::select::Mode) -> String {
    let odds: Vec<String> = p
        .odds
        .iter()
        .map(|x| format!("{} {:.1}%", x.server, x.share * 100.0))
        .collect();
    let odds = odds.join(", ");
    let this = p.this_client.as_deref().unwrap_or("-");
    match p.rule {
        api::PickRule::Single => format!("answer: {odds}\n"),
        api::PickRule::UniformDraw => {
            format!("answer: drawn per query, uniformly (random): {odds}\n")
        }
        api::PickRule::PortionDraw => format!("answer: drawn per query by portion: {odds}\n"),
        api::PickRule::ClientHash => format!(
            "answer: a hash of the client's address picks (select {select}), so a client \
             keeps its server; shares of clients: {odds}; this address (no ECS) gets {this}\n"
        ),
        api::PickRule::NameHash => format!(
            "answer: a hash of the name picks (select {select}): every client gets {this}\n"
        ),
    }
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
    let _ = write!(o, "sort by {by}");
    if s.med {
        o.push_str(", after the med step");
    }
    if let Some(t) = s.rtt_tolerance_percent {
        let _ = write!(o, " (rtt tolerance {t}%)");
    }
    o.push('\n');
    for t in &s.tiers {
        let _ = writeln!(o, "tier {}", t.tier);
        if let Some(rows) = &t.med {
            med_step(&mut o, rows);
        }
        for st in &t.steps {
            step(&mut o, st);
        }
        let chosen: Vec<String> = t.chosen.iter().map(|c| c.server.clone()).collect();
        let _ = writeln!(o, "  => {}", chosen.join(", "));
    }
    o
}

fn med_step(o: &mut String, rows: &[api::MedRow]) {
    o.push_str("  med: servers of one AS with different exit points keep only the lowest MED\n");
    let _ = writeln!(
        o,
        "    {:<16} {:>10} {:>24} {:>10}  result",
        "server", "site AS", "exit point", "MED"
    );
    for r in rows {
        let v = |x: Option<u32>| x.map_or("-".into(), |x| x.to_string());
        let exit = r.exit_point.map_or("-".into(), |e| e.to_string());
        let result = match r.result {
            api::RowResult::Kept => "kept",
            _ => "out",
        };
        let _ = writeln!(
            o,
            "    {:<16} {:>10} {exit:>24} {:>10}  {result}",
            r.server,
            v(r.site_as),
            v(r.med)
        );
    }
}

fn step(o: &mut String, st: &api::Step) {
    let _ = write!(o, "  priority {} {}", st.priority, terms(&st.metrics));
    match st.outcome {
        api::Outcome::NotReached => {
            o.push_str(": not reached (after a draw)\n");
            return;
        }
        api::Outcome::Draw => {
            o.push_str(": ends the sort; the kernel picks among these (see answer)\n");
            return;
        }
        api::Outcome::Compared => {}
    }
    // RTTs print exactly (shortest form of the nanosecond value), so the limit never
    // reads as below a row it keeps.
    if let (Some(lo), Some(lim)) = (st.rtt_lowest, st.rtt_limit) {
        let _ = write!(o, "  (lowest rtt {lo} ms, up to {lim} ms counts as {lo})");
    }
    o.push('\n');
    let mut head = vec![format!("{:<16}", "server")];
    head.extend(
        st.metrics
            .iter()
            .map(|m| format!("{:>10}", m.metric.name())),
    );
    head.push(format!(
        "{:>10}",
        if st.metrics.len() > 1 { "sum" } else { "key" }
    ));
    let _ = writeln!(o, "    {}  result", head.join(" "));
    for r in &st.rows {
        let mut cols = vec![format!("{:<16}", r.server)];
        let value = |m: Metric| r.values.get(&m).copied().flatten();
        cols.extend(st.metrics.iter().map(|t| {
            let v = value(t.metric);
            let text = match t.metric {
                Metric::Rtt => v.map_or("-".into(), |v| v.to_string()),
                _ => opt(v),
            };
            format!("{text:>10}")
        }));
        cols.push(format!("{:>10}", opt(r.key)));
        let result = match r.result {
            api::RowResult::Kept => "kept",
            api::RowResult::Out => "out",
            api::RowResult::OutNoData => "out (no data)",
        };
        let _ = writeln!(o, "    {}  {result}", cols.join(" "));
    }
}

pub fn zones(l: &api::ZoneList) -> String {
    let mut o = String::new();
    for z in &l.zones {
        let listen: Vec<String> = z.listen.iter().map(ToString::to_string).collect();
        let _ = writeln!(
            o,
            "{:<32} serial {:<10} ns {} listen {} ({} records)",
            z.origin,
            z.serial,
            z.ns.join(","),
            listen.join(","),
            z.records
        );
    }
    o
}

pub fn nexthop(h: &api::Nexthop) -> String {
    let via = h.gateway.map(|g| format!(" via {g}")).unwrap_or_default();
    format!(
        "{}{via} dev {} (ifindex {}) {} -> {}\n",
        h.address, h.iface, h.ifindex, h.src_mac, h.dst_mac
    )
}
