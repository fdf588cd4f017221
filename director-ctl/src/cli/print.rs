//! Plain-text output: each command's [`crate::api`] document as an operator reads it.

use std::fmt::Write;
use std::path::Path;

use director_common::counters;

use crate::api;
use crate::api::Metric;

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
            director_plan::config::AUTO_PORTION_START
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
                let from = match &b.router {
                    Some(r) if files.is_empty() => format!("BMP router {r}"),
                    Some(r) => format!("BMP router {r}, else {}", files.join(", ")),
                    None => files.join(", "),
                };
                let _ = writeln!(
                    o,
                    "    bgp {} via next hop {}, exit AS {}, site AS {}, AS path {}, MED {med} \
                     ({from})",
                    b.prefix, b.next_hop, b.exit_as, b.site_as, b.as_path_len,
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
                    match &r.agent {
                        Some(a) => {
                            let _ = writeln!(
                                o,
                                "    rtt {} ms for {} (agent {}, {} from {} measured \
                                 prefixes, taken {:.0} s ago)",
                                r.ms,
                                r.prefix,
                                a.url,
                                rtt_counts(a.samples, a.probes),
                                a.measured.len(),
                                a.age_s
                            );
                        }
                        None => {
                            let _ = writeln!(o, "    rtt {} ms for {} ({file})", r.ms, r.prefix);
                        }
                    }
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
    for r in &e.replicas {
        let bonus = r.bonus.map_or(String::new(), |b| format!(", bonus {b:.0}"));
        let _ = writeln!(
            o,
            "  replica candidate {} ({}): {}{bonus}",
            r.server, r.site, r.state
        );
    }
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

/// `fleet status`.
pub fn fleet_status(s: &api::FleetStatus) -> String {
    let mut o = String::new();
    let cur = s.current.map_or("none".to_string(), |v| v.to_string());
    let _ = writeln!(
        o,
        "fleet {}: version {cur} current (by {}), leader {}, versions kept {:?}",
        s.fleet,
        s.published_by.as_deref().unwrap_or("-"),
        s.leader.as_deref().unwrap_or("none"),
        s.versions
    );
    let standby: Vec<&str> = s
        .publishers
        .iter()
        .filter(|p| !p.leader)
        .map(|p| p.name.as_str())
        .collect();
    if !standby.is_empty() {
        let _ = writeln!(o, "standing by: {}", standby.join(", "));
    }
    let signers = |ids: &[String]| {
        if ids.is_empty() {
            "nobody".to_string()
        } else {
            ids.join(", ")
        }
    };
    if s.current.is_some() {
        let _ = writeln!(
            o,
            "signed by key {}; overlay serial {} signed by key {}",
            signers(&s.signed_by),
            s.overlay_serial,
            signers(&s.overlay_signed_by)
        );
    }
    if let Some(l) = &s.live_inputs {
        let _ = writeln!(
            o,
            "live inputs: BMP routers [{}], RTT agents [{}]: {} routes, {} measurements \
             (digest {})",
            l.routers.join(", "),
            l.agents.join(", "),
            l.routes,
            l.measurements,
            l.digest.get(..12).unwrap_or(&l.digest)
        );
    }
    if !s.agents.is_empty() {
        let a: Vec<String> = s
            .agents
            .iter()
            .map(|a| format!("{}/{}", a.site, a.name))
            .collect();
        let _ = writeln!(o, "RTT agents in the store: {}", a.join(", "));
    }
    let _ = writeln!(
        o,
        "store: {} bytes ({} in use)",
        s.store_bytes, s.store_bytes_in_use
    );
    let _ = writeln!(
        o,
        "{:<16} {:<10} {:>8} {:<8} {:>5} {:>10} {:>10}  program",
        "edge", "site", "version", "state", "live", "report_s", "held_s"
    );
    for e in &s.edges {
        let v = e.version.map_or("-".to_string(), |v| v.to_string());
        let _ = writeln!(
            o,
            "{:<16} {:<10} {:>8} {:<8} {:>5} {:>10.1} {:>10.1}  {}",
            e.name,
            e.site,
            v,
            e.state,
            e.live,
            e.report_age_s,
            e.version_age_s,
            e.program.as_deref().unwrap_or("-")
        );
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    for e in &s.edges {
        if let Some(r) = &e.refused {
            let n = r.version.map_or(String::new(), |v| format!(" {v}"));
            let _ = writeln!(
                o,
                "{} refused {}{n} ({}) {:.0} s ago: {}",
                e.name,
                r.what,
                r.reason,
                now.saturating_sub(r.at_ms) as f64 / 1e3,
                r.error
            );
        }
    }
    if !s.overlay.is_empty() {
        let d: Vec<String> = s
            .overlay
            .iter()
            .map(|d| format!("{}/{}", d.service, d.server))
            .collect();
        let _ = writeln!(o, "down by quorum: {}", d.join(", "));
    }
    o
}

/// `demand`: per service its decisions, per site against capacity, spill and replicas.
pub fn demand(d: &api::Demand) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "demand over the last {:.1} s (answers + new flows per second; 1 in {} sampled)",
        d.window_s, d.sample
    );
    for s in &d.services {
        let _ = writeln!(o, "{}: {:.1}/s", s.service, s.rate);
        for dd in &s.decisions {
            let _ = writeln!(
                o,
                "  {:>10.1}/s  {} ({} entries){}",
                dd.rate,
                dd.servers.join(" > "),
                dd.entries,
                if dd.spilled { ", spilled" } else { "" }
            );
        }
    }
    let _ = writeln!(o, "sites:");
    for s in &d.sites {
        let cap = match (s.capacity, s.load) {
            (Some(c), Some(l)) => format!(" of {c:.0} ({:.0} %)", l * 100.0),
            _ => String::new(),
        };
        let _ = writeln!(o, "  {:<12} {:>10.1}/s{cap}", s.site, s.rate);
    }
    if d.spill.all_over {
        let _ = writeln!(
            o,
            "spill: every site with a capacity is over its target: nothing spills"
        );
    }
    for m in &d.spill.moved {
        let _ = writeln!(
            o,
            "spill: {} {} -> {} ({:.1}/s): {}",
            m.group.service,
            m.group.from,
            m.group.to,
            m.group.rate,
            m.group.servers.join(" > ")
        );
    }
    for r in &d.replicas {
        let _ = writeln!(
            o,
            "replica {} for {}: {} (bonus {:.0})",
            r.server, r.service, r.state, r.bonus
        );
    }
    if !d.prefixes.is_empty() {
        let _ = writeln!(o, "busiest client prefixes:");
        for p in d.prefixes.iter().take(10) {
            let _ = writeln!(
                o,
                "  {:<20} {:<9} {:>10.1}/s  {}",
                p.prefix.to_string(),
                p.by,
                p.rate,
                p.service
            );
        }
    }
    o
}

/// `impact`: per site what moves in and out and where it ends against capacity.
pub fn impact(i: &api::Impact) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{:.1}/s would move ({} prefixes answered differently), by the demand of the last \
         {:.1} s ({} sampled prefixes)",
        i.moved_rate, i.changed_ranges, i.window_s, i.demand_prefixes
    );
    let _ = writeln!(
        o,
        "  {:<12} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "site", "now/s", "out/s", "in/s", "then/s", "capacity"
    );
    for s in &i.sites {
        let cap = match (s.capacity, s.projected_share) {
            (Some(c), Some(p)) => format!("{c:.0} ({:.0} %)", p * 100.0),
            _ => "-".to_string(),
        };
        let _ = writeln!(
            o,
            "  {:<12} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10}",
            s.site, s.load, s.moving_out, s.moving_in, s.projected, cap
        );
    }
    for m in &i.moves {
        let _ = writeln!(
            o,
            "  {} {} {} -> {} ({:.1}/s)",
            m.service,
            m.prefix,
            m.from.join("+"),
            m.to.join("+"),
            m.rate
        );
    }
    o
}

/// `upgrade`: which interfaces now run which program, and how long the swap took.
pub fn upgraded(u: &crate::kernel::upgrade::Upgraded) -> String {
    let mut o = String::new();
    let mut old: Vec<u32> = u.old_programs.clone();
    old.dedup();
    let old: Vec<String> = old.iter().map(u32::to_string).collect();
    let _ = writeln!(
        o,
        "upgraded {}: program {} → {} (tag {:016x}{}), {} pinned maps kept",
        u.interfaces.join(", "),
        old.join(", "),
        u.program,
        u.tag,
        match u.old_tag {
            Some(t) if t == u.tag => ", the same code as before".to_string(),
            Some(t) => format!(", was {t:016x}"),
            None => String::new(),
        },
        u.maps
    );
    let _ = writeln!(
        o,
        "loaded and verified in {:.0} ms while the old one answered; every link swapped in \
         {:.1} ms",
        u.load_ms,
        u.swap_us / 1e3
    );
    o
}

/// What a live RTT stands for: handshakes, probes (`probed`), or both.
fn rtt_counts(handshakes: u64, probes: u64) -> String {
    match (handshakes, probes) {
        (h, 0) => format!("{h} handshakes"),
        (0, p) => format!("probed: {p} probes"),
        (h, p) => format!("{h} handshakes and {p} probes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::explain;

    /// The geo metric over a directed graph runs from the client's node to the site's
    /// (DIY-CDN: "from all vertices of the graph (where visitors of our site can be
    /// located) to the locations of resources"): on one-way edges the nearer site by that
    /// direction wins, whatever the way back costs.
    #[test]
    fn graph_distance_runs_from_the_client_to_the_site() {
        let dir = std::env::temp_dir().join(format!("director-graph-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();
        write(
            "graph.toml",
            "[[node]]\nname = \"ams\"\n[[node]]\nname = \"fra\"\n[[node]]\nname = \"nyc\"\n\
             [[edge]]\nfrom = \"ams\"\nto = \"fra\"\ncost = 50\n\
             [[edge]]\nfrom = \"fra\"\nto = \"ams\"\ncost = 1\n\
             [[edge]]\nfrom = \"ams\"\nto = \"nyc\"\ncost = 10\n\
             [[edge]]\nfrom = \"nyc\"\nto = \"ams\"\ncost = 100\n",
        );
        write("locations.csv", "192.0.2.0/24,ams\n");
        write(
            "director.toml",
            "[geo]\ngraph = \"graph.toml\"\nlocations = \"locations.csv\"\n\
             [[site]]\nname = \"fra\"\n[[site]]\nname = \"nyc\"\n\
             [[server]]\nname = \"fra-1\"\nsite = \"fra\"\nipv4 = \"198.51.100.10\"\n\
             [[server]]\nname = \"nyc-1\"\nsite = \"nyc\"\nipv4 = \"198.51.100.20\"\n\
             [[service]]\nname = \"www.example.com\"\nservers = [\"fra-1\", \"nyc-1\"]\n\
             priority = { geo = 1 }\n",
        );
        let client = "192.0.2.7".parse().unwrap();
        let e = explain(&dir.join("director.toml"), "www.example.com", client);
        let _ = std::fs::remove_dir_all(&dir);
        let e = e.unwrap();
        let geo: Vec<(&str, Option<f64>)> = e
            .servers
            .iter()
            .map(|s| (s.server.as_str(), s.metrics.geo))
            .collect();
        assert_eq!(geo, [("fra-1", Some(50.0)), ("nyc-1", Some(10.0))]);
        let winners: Vec<&str> = e.sort.tiers[0]
            .chosen
            .iter()
            .map(|c| c.server.as_str())
            .collect();
        assert_eq!(winners, ["nyc-1"]);
    }

    /// explain shows every value with its source, the true rtt limit (10.2 ms, tolerance
    /// 10: 11.22 ms, which keeps the row beneath it), the pick and its odds, and nothing
    /// that does not apply (no rtt tolerance for a service without rtt).
    #[test]
    fn explain_shows_sources_true_limits_and_the_pick() {
        let dir = std::env::temp_dir().join(format!("director-explain-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();
        write("locations.csv", "192.0.2.0/24,50.0,8.0\n");
        write(
            "rtt.csv",
            "192.0.2.0/24,fra,10.2\n192.0.2.0/24,ams,11.22\n192.0.2.0/24,nyc,11.220001\n",
        );
        write(
            "director.toml",
            "[geo]\nlocations = \"locations.csv\"\n[rtt]\nfiles = [\"rtt.csv\"]\n\
             [[site]]\nname = \"fra\"\nlat = 50.1\nlon = 8.7\n\
             [[site]]\nname = \"ams\"\nlat = 52.4\nlon = 4.9\n\
             [[site]]\nname = \"nyc\"\nlat = 40.7\nlon = -74.0\n\
             [[server]]\nname = \"fra-1\"\nsite = \"fra\"\nipv4 = \"198.51.100.10\"\n\
             [[server]]\nname = \"ams-1\"\nsite = \"ams\"\nipv4 = \"198.51.100.20\"\n\
             [[server]]\nname = \"nyc-1\"\nsite = \"nyc\"\nipv4 = \"198.51.100.30\"\n\
             [[service]]\nname = \"rtt.example.com\"\nservers = [\"fra-1\", \"ams-1\", \"nyc-1\"]\n\
             priority = { rtt = 1, portion = 2 }\nportion = { \"fra-1\" = 1, \"ams-1\" = 3 }\n\
             [[service]]\nname = \"geo.example.com\"\nservers = [\"fra-1\", \"ams-1\"]\n\
             priority = { admin = 1 }\n",
        );
        let client = "192.0.2.7".parse().unwrap();
        let path = dir.join("director.toml");
        let rtt = explain(&path, "rtt.example.com", client);
        let geo = explain(&path, "geo.example.com", client);
        let _ = std::fs::remove_dir_all(&dir);
        let (rtt, geo) = (rtt.unwrap(), geo.unwrap());
        let fra = &rtt.servers[0];
        let m = fra.rtt.as_ref().unwrap();
        assert_eq!(
            (m.ms, m.file.as_ref().unwrap().ends_with("rtt.csv")),
            (10.2, true)
        );
        let loc = fra.location.as_ref().unwrap();
        assert!(loc.file.as_ref().unwrap().ends_with("locations.csv"));
        let step = &rtt.sort.tiers[0].steps[0];
        assert_eq!((step.rtt_lowest, step.rtt_limit), (Some(10.2), Some(11.22)));
        let kept: Vec<_> = step.rows.iter().map(|r| r.result).collect();
        assert_eq!(
            kept,
            [
                api::RowResult::Kept,
                api::RowResult::Kept,
                api::RowResult::Out
            ]
        );
        assert_eq!(rtt.sort.draw, Some(Metric::Portion));
        assert_eq!(rtt.pick.rule, api::PickRule::PortionDraw);
        let odds: Vec<(&str, f64)> = rtt
            .pick
            .odds
            .iter()
            .map(|o| (o.server.as_str(), o.share))
            .collect();
        assert_eq!(odds, [("fra-1", 0.25), ("ams-1", 0.75)]);
        let text = super::explain(&rtt);
        for want in [
            "up to 11.22 ms counts as 10.2",
            "rtt 10.2 ms for 192.0.2.0/24",
            "drawn per query by portion: fra-1 25.0%, ams-1 75.0%",
        ] {
            assert!(text.contains(want), "{want:?} not in\n{text}");
        }
        // No rtt in the policy: no tolerance; a tie without a draw: the client hash.
        assert_eq!(geo.sort.rtt_tolerance_percent, None);
        assert_eq!(geo.select, director_common::select::Mode::Client);
        assert_eq!(geo.pick.rule, api::PickRule::ClientHash);
        assert!(geo.pick.this_client.is_some());
        let text = super::explain(&geo);
        assert!(!text.contains("tolerance"), "{text}");
        assert!(
            text.contains("a hash of the client's address picks"),
            "{text}"
        );
    }
    /// The engine's replay of a sort as `explain` prints it: the policy line, tiers, the
    /// med step's exit points, missing data, the rtt tolerance and the winner, with
    /// whatever names the caller gives the servers.
    #[test]
    fn a_replayed_sort_prints_readably() {
        use director_plan::engine::{self, Candidate, MedRoute, Metric::*, Metrics, Policy};
        let ms = |v: f64| engine::Rtt((v * 1e6).round() as u64);
        let bgp = |ext: u32, int: u32, site_as: u32, exit: u8, med: u32| Metrics {
            ext: Some(ext),
            int: Some(int),
            med: Some(MedRoute {
                site_as,
                exit: std::net::Ipv4Addr::new(192, 0, 2, exit).into(),
                med,
            }),
            ..Metrics::default()
        };
        let cand = |server: u16, metrics: Metrics| Candidate {
            server,
            portion: 1,
            metrics,
        };
        let p = Policy::new(&[(Ext, 1), (Int, 3)], &[(Rtt, 2.0), (Geo, 0.1)], 10, true).unwrap();
        let mut c = [
            cand(
                1,
                Metrics {
                    rtt: Some(ms(20.0)),
                    geo: Some(100.0),
                    ..bgp(2, 5, 64500, 1, 50)
                },
            ),
            cand(
                2,
                Metrics {
                    rtt: Some(ms(21.0)),
                    geo: Some(300.0),
                    ..bgp(2, 5, 64501, 2, 10)
                },
            ),
            cand(
                3,
                Metrics {
                    rtt: Some(ms(10.0)),
                    geo: Some(10.0),
                    ..bgp(3, 5, 64502, 3, 0)
                },
            ),
            cand(4, Metrics::default()),
        ];
        c[1].portion = 2;
        let e = engine::explain(&p, &c);
        let sort = director_plan::explain::sort(&e, &|id| format!("#{id}"));
        let text = super::sort(&sort);
        for want in [
            "sort by 1: ext, 3: int, 101: 2*rtt + 0.1*geo, after the med step (rtt tolerance 10%)",
            "tier 0",
            "exit point",
            "out (no data)",
            "lowest rtt 20 ms, up to 22 ms counts as 20",
            "=> #1",
        ] {
            assert!(text.contains(want), "{want:?} not in\n{text}");
        }
        let named = director_plan::explain::sort(&e, &|id| format!("srv-{id}"));
        let named = super::sort(&named);
        assert!(named.contains("srv-2"), "{named}");
        let json = serde_json::to_value(&sort).unwrap();
        assert_eq!(json["levels"][1]["metrics"][0]["metric"], "int");
        assert_eq!(json["med"], true);
    }

    /// `fleet status` says what the current version took from live inputs, and nothing of
    /// them for a version without.
    #[test]
    fn fleet_status_names_the_live_inputs() {
        let mut s = api::FleetStatus {
            version: api::VERSION,
            fleet: "director".into(),
            current: Some(4),
            published_by: Some("p1".into()),
            published_ms: Some(1),
            leader: Some("p1".into()),
            publishers: Vec::new(),
            versions: vec![2, 3, 4],
            edges: Vec::new(),
            signed_by: Vec::new(),
            overlay: Vec::new(),
            overlay_serial: 0,
            overlay_signed_by: Vec::new(),
            store_bytes: 0,
            store_bytes_in_use: 0,
            live_inputs: None,
            agents: Vec::new(),
        };
        assert!(!fleet_status(&s).contains("live inputs"));
        assert!(!fleet_status(&s).contains("RTT agents in the store"));
        s.live_inputs = Some(director_plan::fleet::manifest::LiveSources {
            routers: vec!["fra=203.0.113.1".into()],
            agents: vec!["http://198.51.100.5:9470/rtt".into()],
            routes: 577_703,
            measurements: 12,
            digest: "0123456789abcdef".into(),
        });
        let text = fleet_status(&s);
        assert!(
            text.contains(
                "live inputs: BMP routers [fra=203.0.113.1], RTT agents \
                 [http://198.51.100.5:9470/rtt]: 577703 routes, 12 measurements (digest \
                 0123456789ab)"
            ),
            "{text}"
        );
        s.agents = vec![
            api::FleetAgent {
                site: "fra".into(),
                name: "s1".into(),
            },
            api::FleetAgent {
                site: "fra".into(),
                name: "s2".into(),
            },
        ];
        let text = fleet_status(&s);
        assert!(
            text.contains("RTT agents in the store: fra/s1, fra/s2\n"),
            "{text}"
        );
    }
}
