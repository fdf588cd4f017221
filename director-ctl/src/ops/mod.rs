//! Whole operator operations on the pinned maps, as the CLI offers them. Each checks
//! everything it was given before its first write, so a refused command leaves the kernel
//! as it was, and orders its writes so the kernel never sees a half-made object (the
//! `kernel` methods keep a service before its name, a route to servers that exist).

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use anyhow::{bail, Context, Result};
use director_common::{
    maps::{Decision, LOCAL_CONFIGURED, LOCAL_HOST, MAX_CANDIDATES},
    rrl::Limit,
    select::Mode,
};
use ipnet::IpNet;

pub mod steer;

use crate::api;
use crate::checked;
use crate::kernel::{host, program, DecisionChange, Maps, ServerEntry, ServiceEntry, TableSource};
use director_plan::prefix::{cover16, order::sort_key, scopes::scopes};

/// A route's servers: the first `primary` are equally good and share answers by weight;
/// the rest are the next best, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerList {
    pub servers: Vec<(String, u16)>,
    pub primary: usize,
}

fn api_server(s: ServerEntry) -> api::ListedServer {
    api::ListedServer {
        id: s.id,
        name: s.name,
        ipv4: s.ipv4,
        ipv6: s.ipv6,
        up: s.up,
        drained: s.drained,
        load: s.load,
    }
}

/// Adds (`on`) or removes an address the operator configured.
pub fn address_set(m: &mut Maps, a: IpAddr, on: bool) -> Result<()> {
    if !on
        && !m
            .local_addresses()?
            .iter()
            .any(|(h, f)| *h == a && f & LOCAL_CONFIGURED != 0)
    {
        bail!("{a} was not added with `director-ctl address add` (see `address list`)");
    }
    m.set_configured_address(a, on)
}

/// Reads the host's addresses again into the kernel's table.
pub fn address_refresh(m: &mut Maps) -> Result<()> {
    m.set_host_addresses(&host::addresses()?)?;
    Ok(())
}

pub fn addresses(m: &Maps) -> Result<api::AddressList> {
    let addresses = m
        .local_addresses()?
        .into_iter()
        .map(|(address, f)| api::ListedAddress {
            address,
            host: f & LOCAL_HOST != 0,
            configured: f & LOCAL_CONFIGURED != 0,
        })
        .collect();
    Ok(api::AddressList {
        version: api::VERSION,
        addresses,
    })
}

pub fn servers(m: &Maps) -> Result<api::ServerList> {
    let servers = m.servers()?.into_iter().map(api_server).collect();
    Ok(api::ServerList {
        version: api::VERSION,
        servers,
    })
}

fn find_server(m: &Maps, name: &str) -> Result<Option<ServerEntry>> {
    Ok(m.servers()?.into_iter().find(|s| s.name == name))
}

fn require_server(m: &Maps, name: &str) -> Result<ServerEntry> {
    find_server(m, name)?
        .with_context(|| format!("unknown server {name:?} (see `director-ctl server list`)"))
}

/// Adds a server, or changes the addresses of an existing one (its up/down and drained
/// states are kept).
/// Returns its id.
pub fn server_add(
    m: &mut Maps,
    name: &str,
    ipv4: Option<Ipv4Addr>,
    ipv6: Option<Ipv6Addr>,
) -> Result<u16> {
    let name = checked::server_name(name)?;
    if ipv4.is_none() && ipv6.is_none() {
        bail!("server {name:?} needs an address: give --ipv4 and/or --ipv6");
    }
    let (id, up, drained, load) = match find_server(m, name)? {
        Some(s) => (s.id, s.up, s.drained, s.load),
        None => (m.free_server_id()?, true, false, None),
    };
    m.put_server(&ServerEntry {
        id,
        name: name.to_string(),
        ipv4,
        ipv6,
        up,
        drained,
        load,
    })?;
    Ok(id)
}

pub fn server_set(m: &mut Maps, name: &str, up: bool) -> Result<()> {
    let s = require_server(m, name)?;
    m.set_server_up(s.id, up)
}

/// `server drain` / `undrain`: no new clients for any service while drained.
pub fn server_drain(m: &mut Maps, name: &str, drained: bool) -> Result<()> {
    let s = require_server(m, name)?;
    m.set_server_drained(s.id, drained)
}

/// Deletes a server that no route uses.
pub fn server_del(m: &mut Maps, name: &str) -> Result<()> {
    let s = require_server(m, name)?;
    let users: Vec<api::Route> = routes(m, None)?
        .routes
        .into_iter()
        .filter(|r| {
            r.primary
                .iter()
                .chain(&r.fallback)
                .any(|x| x.server == name)
        })
        .collect();
    if let Some(r) = users.first() {
        bail!(
            "server {name:?} is used by {} route(s), e.g. {} {}; delete or change them first",
            users.len(),
            r.service,
            r.prefix
        );
    }
    m.remove_server(s.id)
}

fn require_service(m: &Maps, dnsname: &str) -> Result<u32> {
    m.find_service(dnsname)?
        .with_context(|| format!("unknown service {dnsname:?} (see `director-ctl service list`)"))
}

/// Adds a DNS service, or changes the settings of an existing one. Returns its id.
pub fn service_add(
    m: &mut Maps,
    dnsname: &str,
    ttl: u32,
    answers: u8,
    select: Mode,
) -> Result<u32> {
    service_add_with(m, dnsname, ttl, answers, select, None, false)
}

/// As [`service_add`], with VIPs: `Some` makes them the service's (an empty list removes
/// them), `None` keeps those it has. A service with VIPs is answered in DNS only with
/// `dns`.
pub fn service_add_with(
    m: &mut Maps,
    dnsname: &str,
    ttl: u32,
    answers: u8,
    select: Mode,
    vips: Option<&steer::VipSettings>,
    dns: bool,
) -> Result<u32> {
    if !(1..=MAX_CANDIDATES as u8).contains(&answers) {
        bail!("--answers {answers} is not from 1 to {MAX_CANDIDATES}");
    }
    if ttl > i32::MAX as u32 {
        bail!("--ttl {ttl} is over 2147483647 (RFC 2181 §8)");
    }
    let id = match m.find_service(dnsname)? {
        Some(id) => id,
        None => m.free_service_id()?,
    };
    let name = dnsname.trim_end_matches('.').to_string();
    // Checked before the service is written.
    let entries = vips.map(|v| v.entries(id)).transpose()?;
    let has_vips = match &entries {
        Some(e) => !e.is_empty(),
        None => m.steer().vips()?.iter().any(|v| v.service == id),
    };
    m.put_service(&ServiceEntry {
        id,
        name,
        ttl,
        answers,
        select,
        dns: dns || !has_vips,
    })?;
    if let Some(e) = entries {
        steer::set_service_vips(m, id, &e)?;
    }
    Ok(id)
}

/// Deletes a service and its routes.
pub fn service_del(m: &mut Maps, dnsname: &str) -> Result<()> {
    let id = require_service(m, dnsname)?;
    m.remove_service(id, dnsname)
}

pub fn services(m: &Maps) -> Result<api::ServiceList> {
    let vips = steer::vips(m)?;
    let services = m
        .services()?
        .into_iter()
        .map(|s| {
            let l = m.rrl(s.id)?;
            let name = s.name.clone();
            Ok(api::ListedService {
                id: s.id,
                name: s.name,
                ttl: s.ttl,
                answers: s.answers,
                select: s.select,
                rrl: l.is_limited().then_some(api::RrlLimit {
                    rate: l.rate,
                    burst: l.burst,
                    slip: l.slip,
                    ipv4_prefix: l.v4_prefix,
                    ipv6_prefix: l.v6_prefix,
                }),
                dns: s.dns,
                vips: vips.iter().filter(|v| v.service == name).cloned().collect(),
            })
        })
        .collect::<Result<_>>()?;
    Ok(api::ServiceList {
        version: api::VERSION,
        services,
    })
}

/// A rate limit as the CLI gives it (`rrl set`, `service add --rrl-*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RrlSettings {
    /// Answers per second per source prefix; 0: no limit.
    pub rate: u32,
    /// 0: the rate.
    pub burst: u32,
    pub slip: u32,
    pub ipv4_prefix: u8,
    pub ipv6_prefix: u8,
}

impl RrlSettings {
    /// Checked before anything is written.
    pub fn limit(&self) -> Result<Limit> {
        crate::rrl::check_slip(self.slip)?;
        if self.ipv4_prefix > 32 || self.ipv6_prefix > 128 {
            bail!(
                "--ipv4-prefix is 0 to 32 and --ipv6-prefix 0 to 128 (got {} and {})",
                self.ipv4_prefix,
                self.ipv6_prefix
            );
        }
        Ok(Limit::new(
            self.rate,
            self.burst,
            self.slip,
            self.ipv4_prefix,
            self.ipv6_prefix,
        ))
    }
}

/// Sets a service's response rate limit (rate 0 removes it). Buckets already counting keep
/// their state; the new rate applies from the next response.
pub fn rrl_set(m: &mut Maps, dnsname: &str, r: &RrlSettings) -> Result<()> {
    let limit = r.limit()?;
    let id = require_service(m, dnsname)?;
    m.set_rrl(id, &limit)
}

/// Exempts a source prefix from rate limiting (`on`) or limits it again.
pub fn rrl_exempt(m: &mut Maps, net: IpNet, on: bool) -> Result<()> {
    let net = checked::canonical(net);
    if !on && !m.rrl_exempt()?.contains(&net) {
        bail!("{net} is not exempt (see `director-ctl rrl exempt list`)");
    }
    m.set_rrl_exempt(net, on)
}

pub fn rrl_exempt_list(m: &Maps) -> Result<api::RrlExemptList> {
    Ok(api::RrlExemptList {
        version: api::VERSION,
        exempt: m.rrl_exempt()?,
    })
}

/// Gives clients in `prefix` these servers for the service `dnsname`.
pub fn route_set(m: &mut Maps, dnsname: &str, prefix: IpNet, list: &ServerList) -> Result<()> {
    let service = require_service(m, dnsname)?;
    if list.servers.is_empty() || list.servers.len() > MAX_CANDIDATES {
        bail!("a route takes 1 to {MAX_CANDIDATES} servers");
    }
    let mut d = Decision {
        prefix_len: prefix.prefix_len(),
        count: list.servers.len() as u8,
        primary: list.primary.min(list.servers.len()) as u8,
        ..Default::default()
    };
    for (i, (name, weight)) in list.servers.iter().enumerate() {
        d.servers[i] = require_server(m, name)?.id;
        d.weights[i] = *weight;
    }
    write_routes(m, dnsname, service, Some((prefix, d)), None)
}

pub fn route_del(m: &mut Maps, dnsname: &str, prefix: IpNet) -> Result<()> {
    let service = require_service(m, dnsname)?;
    write_routes(m, dnsname, service, None, Some(prefix))
}

/// Puts and/or deletes one route of `service`, with every route's ECS scope kept true:
/// a route's answers hold over max(its length, its longest directly nested route), so a
/// route added or removed inside another changes the scope of the one around it.
/// Deleting a route that does not exist is refused.
fn write_routes(
    m: &mut Maps,
    dnsname: &str,
    service: u32,
    put: Option<(IpNet, Decision)>,
    delete: Option<IpNet>,
) -> Result<()> {
    let mut prefixes_of: BTreeMap<u32, Vec<IpNet>> = BTreeMap::new();
    let mut table: Vec<(IpNet, Decision)> = Vec::new();
    for (s, p, d) in m.decisions()? {
        if s == service {
            table.push((p, d));
        } else {
            prefixes_of.entry(s).or_default().push(p);
        }
    }
    if let Some(gone) = delete {
        if !table.iter().any(|(p, _)| *p == gone) {
            bail!("no route for {dnsname} {gone}");
        }
    }
    table.retain(|(p, _)| Some(*p) != delete && Some(*p) != put.map(|e| e.0));
    table.extend(put);
    table.sort_by_key(|(p, _)| sort_key(p));
    let prefixes: Vec<IpNet> = table.iter().map(|e| e.0).collect();
    let mut changed = Vec::new();
    for ((p, mut d), scope) in table.into_iter().zip(scopes(&prefixes)) {
        if d.prefix_len != scope || Some(p) == put.map(|e| e.0) {
            d.prefix_len = scope;
            changed.push((p, d));
        }
    }
    let delete: Vec<IpNet> = delete.into_iter().collect();
    m.apply_decisions(DecisionChange {
        service,
        put: &changed,
        delete: &delete,
    })?;
    // Every service's table is the kernel's, read above (the others unchanged; a
    // compaction the write needed moved their entries, not their prefixes): the /16
    // fronts follow them, all of them, since a compaction clears every service's slots.
    prefixes_of.insert(service, prefixes);
    for (s, prefixes) in &prefixes_of {
        m.set_front16(*s, &cover16::covers(prefixes), TableSource::Kernel)?;
    }
    Ok(())
}

/// The routes of every service, or of `only`, by service then prefix.
pub fn routes(m: &Maps, only: Option<&str>) -> Result<api::RouteList> {
    let only_id = only.map(|n| require_service(m, n)).transpose()?;
    let services: HashMap<u32, String> =
        m.services()?.into_iter().map(|s| (s.id, s.name)).collect();
    let servers: HashMap<u16, String> = m.servers()?.into_iter().map(|s| (s.id, s.name)).collect();
    let mut out = Vec::new();
    for (svc, prefix, d) in m.decisions()? {
        if only_id.is_some_and(|id| id != svc) {
            continue;
        }
        let count = usize::from(d.count).min(MAX_CANDIDATES);
        let ranked: Vec<api::RouteServer> = (0..count)
            .map(|i| {
                let id = d.servers[i];
                api::RouteServer {
                    server: servers
                        .get(&id)
                        .cloned()
                        .unwrap_or_else(|| format!("#{id}")),
                    weight: d.weights[i],
                }
            })
            .collect();
        let (primary, fallback) = ranked.split_at(usize::from(d.primary).min(count));
        out.push(api::Route {
            service: services
                .get(&svc)
                .cloned()
                .unwrap_or_else(|| format!("#{svc}")),
            prefix,
            primary: primary.to_vec(),
            fallback: fallback.to_vec(),
        });
    }
    // By text, as operators read them.
    out.sort_by_cached_key(|r| (r.service.clone(), r.prefix.to_string()));
    Ok(api::RouteList {
        version: api::VERSION,
        routes: out,
    })
}

pub fn stats(m: &Maps) -> Result<api::Stats> {
    let counters = m
        .counters()?
        .into_iter()
        .map(|(r, n)| (r.name().to_string(), n))
        .collect();
    let mut services = BTreeMap::new();
    for s in m.services()? {
        services.insert(s.name, m.service_answers(s.id)?);
    }
    Ok(api::Stats {
        version: api::VERSION,
        counters,
        services,
    })
}

pub fn status(dir: &Path) -> Result<api::Status> {
    let info = program::program_info(dir)?;
    let mut st = api::Status {
        version: api::VERSION,
        pin_dir: dir.to_path_buf(),
        interfaces: program::attached(dir)?,
        program_id: info.as_ref().map(aya::programs::ProgramInfo::id),
        verified_instructions: info
            .as_ref()
            .and_then(aya::programs::ProgramInfo::verified_instruction_count),
        servers: 0,
        services: 0,
        routes_v4: 0,
        routes_v6: 0,
        stored_decisions: 0,
        active_table: None,
        drained: Vec::new(),
        admin_down: Vec::new(),
        health: Vec::new(),
        load: Default::default(),
        vips: Vec::new(),
        flows: 0,
    };
    if let Ok(m) = Maps::open(dir) {
        let servers = m.servers()?;
        let mut services = m.services()?;
        services.sort_by(|a, b| a.name.cmp(&b.name));
        st.servers = servers.len();
        st.services = services.len();
        st.drained = servers
            .iter()
            .filter(|s| s.drained)
            .map(|s| s.name.clone())
            .collect();
        st.load = servers
            .iter()
            .filter_map(|s| s.load.map(|l| (s.name.clone(), l)))
            .collect();
        st.admin_down = servers
            .iter()
            .filter(|s| !s.up)
            .map(|s| s.name.clone())
            .collect();
        let mut by_name: Vec<&ServerEntry> = servers.iter().collect();
        by_name.sort_by(|a, b| a.name.cmp(&b.name));
        for svc in &services {
            let mask = m.health(svc.id)?;
            for s in &by_name {
                let out = mask.is_out(s.id);
                let health = match mask.verdict(s.id) {
                    None if !out => continue,
                    None => api::Health::Unchecked,
                    Some(true) => api::Health::Up,
                    Some(false) => api::Health::Down,
                };
                st.health.push(api::ServiceHealth {
                    service: svc.name.clone(),
                    server: s.name.clone(),
                    health,
                    out,
                });
            }
        }
        let routes = m.decisions()?;
        st.routes_v4 = routes
            .iter()
            .filter(|r| matches!(r.1, IpNet::V4(_)))
            .count();
        st.routes_v6 = routes.len() - st.routes_v4;
        st.stored_decisions = m.stored_decisions()?;
        st.vips = steer::vips(&m)?;
        st.flows = m.steer().flows()?.len();
        st.active_table = Some(match m.active_table()? {
            0 => api::DecisionTable::A,
            _ => api::DecisionTable::B,
        });
    }
    Ok(st)
}
