//! Whole operator operations on the pinned maps. Each validates everything it was given
//! before its first write, and orders its writes so the kernel never sees a half-made
//! object (a service before its name, a route to a server that does not exist).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use anyhow::{bail, Context, Result};
use director_common::{counters, maps::*, name, select::Mode};
use serde::Serialize;

use crate::input::{self, Prefix};
use crate::kernel::maps::{key4, key6, Maps};

#[derive(Serialize, Debug, Clone)]
pub struct ServerView {
    pub id: u16,
    pub name: String,
    pub ipv4: Option<Ipv4Addr>,
    pub ipv6: Option<Ipv6Addr>,
    pub up: bool,
}

#[derive(Serialize, Debug, Clone)]
pub struct ServiceView {
    pub id: u32,
    pub name: String,
    pub ttl: u32,
    pub answers: u8,
    pub select: &'static str,
}

#[derive(Serialize, Debug, Clone)]
pub struct RouteView {
    pub service: String,
    pub prefix: String,
    pub servers: Vec<(String, u16)>,
    /// How many of `servers` are equally good; the rest are fallbacks in order.
    pub primary: usize,
}

fn server_name_of(s: &Server) -> String {
    let end = s.name.iter().position(|&b| b == 0).unwrap_or(s.name.len());
    String::from_utf8_lossy(&s.name[..end]).into_owned()
}

fn view(id: u16, s: &Server) -> ServerView {
    ServerView {
        id,
        name: server_name_of(s),
        ipv4: (s.flags & SERVER_V4 != 0).then(|| Ipv4Addr::from(s.ipv4)),
        ipv6: (s.flags & SERVER_V6 != 0).then(|| Ipv6Addr::from(s.ipv6)),
        up: s.flags & SERVER_UP != 0,
    }
}

pub fn servers(m: &Maps) -> Result<Vec<ServerView>> {
    let mut out = Vec::new();
    for (i, s) in m.servers.iter().enumerate() {
        let s = s.context("reading the server table")?;
        if i > 0 && s.flags & SERVER_EXISTS != 0 {
            out.push(view(i as u16, &s));
        }
    }
    Ok(out)
}

fn find_server(m: &Maps, name: &str) -> Result<Option<ServerView>> {
    Ok(servers(m)?.into_iter().find(|s| s.name == name))
}

fn require_server(m: &Maps, name: &str) -> Result<ServerView> {
    find_server(m, name)?
        .with_context(|| format!("unknown server {name:?} (see `director-ctl server list`)"))
}

/// Adds a server, or changes the addresses of an existing one (its up/down state is kept).
pub fn server_add(
    m: &mut Maps,
    name: &str,
    v4: Option<Ipv4Addr>,
    v6: Option<Ipv6Addr>,
) -> Result<u16> {
    let name = input::server_name(name)?;
    if v4.is_none() && v6.is_none() {
        bail!("server {name:?} needs an address: give --ipv4 and/or --ipv6");
    }
    let existing = find_server(m, name)?;
    let (id, up) = match &existing {
        Some(s) => (s.id, s.up),
        None => {
            let mut free = None;
            for (i, s) in m.servers.iter().enumerate().skip(1) {
                if s?.flags & SERVER_EXISTS == 0 {
                    free = Some(i as u16);
                    break;
                }
            }
            (free.context("the server table is full")?, true)
        }
    };
    let mut s = Server {
        flags: SERVER_EXISTS,
        _pad: [0; 3],
        ipv4: [0; 4],
        ipv6: [0; 16],
        name: [0; SERVER_NAME_LEN],
    };
    s.name[..name.len()].copy_from_slice(name.as_bytes());
    if up {
        s.flags |= SERVER_UP;
    }
    if let Some(a) = v4 {
        s.flags |= SERVER_V4;
        s.ipv4 = a.octets();
    }
    if let Some(a) = v6 {
        s.flags |= SERVER_V6;
        s.ipv6 = a.octets();
    }
    m.servers
        .set(id as u32, s, 0)
        .context("writing the server table")?;
    Ok(id)
}

pub fn server_set(m: &mut Maps, name: &str, up: bool) -> Result<()> {
    let v = require_server(m, name)?;
    let mut s = m.server(v.id)?;
    if up {
        s.flags |= SERVER_UP;
    } else {
        s.flags &= !SERVER_UP;
    }
    m.servers
        .set(v.id as u32, s, 0)
        .context("writing the server table")
}

pub fn server_del(m: &mut Maps, name: &str) -> Result<()> {
    let v = require_server(m, name)?;
    let users: Vec<RouteView> = routes(m, None)?
        .into_iter()
        .filter(|r| r.servers.iter().any(|(n, _)| n == name))
        .collect();
    if let Some(r) = users.first() {
        bail!(
            "server {name:?} is used by {} route(s), e.g. {} {}; delete or change them first",
            users.len(),
            r.service,
            r.prefix
        );
    }
    let empty = Server {
        flags: 0,
        _pad: [0; 3],
        ipv4: [0; 4],
        ipv6: [0; 16],
        name: [0; SERVER_NAME_LEN],
    };
    m.servers
        .set(v.id as u32, empty, 0)
        .context("writing the server table")
}

fn find_service(m: &Maps, dnsname: &str) -> Result<Option<(u32, Vec<u8>)>> {
    let wire =
        name::encode(dnsname).map_err(|e| anyhow::anyhow!("bad DNS name {dnsname:?}: {e}"))?;
    let h = name::hash(&wire);
    match m.names.get(&h, 0) {
        Ok(e) if e.name[..e.len as usize] == wire[..] => Ok(Some((e.service, wire))),
        Ok(e) => bail!(
            "{dnsname:?} has the same hash as the service {}; rename one of them",
            name::decode(&e.name[..e.len as usize])
        ),
        Err(aya::maps::MapError::KeyNotFound) => Ok(None),
        Err(e) => Err(e).context("reading the name table"),
    }
}

fn require_service(m: &Maps, dnsname: &str) -> Result<u32> {
    Ok(find_service(m, dnsname)?
        .with_context(|| format!("unknown service {dnsname:?} (see `director-ctl service list`)"))?
        .0)
}

/// Adds a DNS service, or changes the settings of an existing one.
pub fn service_add(
    m: &mut Maps,
    dnsname: &str,
    ttl: u32,
    answers: u8,
    select: Mode,
) -> Result<u32> {
    if !(1..=MAX_CANDIDATES as u8).contains(&answers) {
        bail!("--answers {answers} is not from 1 to {MAX_CANDIDATES}");
    }
    if ttl > i32::MAX as u32 {
        bail!("--ttl {ttl} is over 2147483647 (RFC 2181 §8)");
    }
    let found = find_service(m, dnsname)?;
    let svc = Service {
        ttl,
        flags: SERVICE_ACTIVE,
        kind: KIND_DNS,
        answers,
        select: select as u8,
    };
    if let Some((id, _)) = found {
        m.services
            .set(id, svc, 0)
            .context("writing the service table")?;
        return Ok(id);
    }
    let wire =
        name::encode(dnsname).map_err(|e| anyhow::anyhow!("bad DNS name {dnsname:?}: {e}"))?;
    let mut free = None;
    for (i, s) in m.services.iter().enumerate().skip(1) {
        if s?.flags & SERVICE_ACTIVE == 0 {
            free = Some(i as u32);
            break;
        }
    }
    let id = free.context("the service table is full")?;
    let mut entry = NameEntry {
        service: id,
        len: wire.len() as u32,
        name: [0; NAME_BUF],
    };
    entry.name[..wire.len()].copy_from_slice(&wire);
    // The service first: the kernel must never find a name whose service is not there.
    m.services
        .set(id, svc, 0)
        .context("writing the service table")?;
    m.names
        .insert(name::hash(&wire), entry, 0)
        .context("writing the name table")?;
    Ok(id)
}

pub fn service_del(m: &mut Maps, dnsname: &str) -> Result<()> {
    let (id, wire) = find_service(m, dnsname)?.with_context(|| {
        format!("unknown service {dnsname:?} (see `director-ctl service list`)")
    })?;
    m.names
        .remove(&name::hash(&wire))
        .context("writing the name table")?;
    m.remove_service_decisions(id)?;
    m.services
        .set(id, Service::default(), 0)
        .context("writing the service table")
}

pub fn services(m: &Maps) -> Result<Vec<ServiceView>> {
    let mut out = Vec::new();
    for kv in m.names.iter() {
        let (_, e) = kv.context("reading the name table")?;
        let s = m.service(e.service)?;
        out.push(ServiceView {
            id: e.service,
            name: name::decode(&e.name[..e.len as usize])
                .trim_end_matches('.')
                .to_string(),
            ttl: s.ttl,
            answers: s.answers,
            select: Mode::from_u8(s.select).name(),
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

pub fn route_set(m: &mut Maps, dnsname: &str, prefix: &str, list: &str) -> Result<()> {
    let service = require_service(m, dnsname)?;
    let p = input::prefix(prefix)?;
    let list = input::server_list(list)?;
    let mut d = Decision {
        prefix_len: p.len,
        count: list.servers.len() as u8,
        primary: list.primary as u8,
        ..Default::default()
    };
    for (i, (n, w)) in list.servers.iter().enumerate() {
        d.servers[i] = require_server(m, n)?.id;
        d.weights[i] = *w;
    }
    let t = m.active_table()?;
    match p.addr {
        IpAddr::V4(a) => m.dec4[t].insert(&key4(service, a, p.len), d, 0),
        IpAddr::V6(a) => m.dec6[t].insert(&key6(service, a, p.len), d, 0),
    }
    .context("writing the decision table")
}

pub fn route_del(m: &mut Maps, dnsname: &str, prefix: &str) -> Result<()> {
    let service = require_service(m, dnsname)?;
    let p: Prefix = input::prefix(prefix)?;
    let t = m.active_table()?;
    let r = match p.addr {
        IpAddr::V4(a) => m.dec4[t].remove(&key4(service, a, p.len)),
        IpAddr::V6(a) => m.dec6[t].remove(&key6(service, a, p.len)),
    };
    match r {
        Ok(()) => Ok(()),
        Err(aya::maps::MapError::KeyNotFound) | Err(aya::maps::MapError::SyscallError(_)) => {
            bail!("no route for {dnsname} {p}")
        }
        Err(e) => Err(e).context("writing the decision table"),
    }
}

pub fn routes(m: &Maps, only: Option<&str>) -> Result<Vec<RouteView>> {
    let only_id = only.map(|n| require_service(m, n)).transpose()?;
    let names: std::collections::HashMap<u32, String> =
        services(m)?.into_iter().map(|s| (s.id, s.name)).collect();
    let servers: std::collections::HashMap<u16, String> =
        servers(m)?.into_iter().map(|s| (s.id, s.name)).collect();
    let mut out = Vec::new();
    for (svc, addr, len, d) in m.decisions()? {
        if only_id.is_some_and(|id| id != svc) {
            continue;
        }
        out.push(RouteView {
            service: names
                .get(&svc)
                .cloned()
                .unwrap_or_else(|| format!("#{svc}")),
            prefix: format!("{addr}/{len}"),
            primary: d.primary as usize,
            servers: (0..d.count as usize)
                .map(|i| {
                    let id = d.servers[i];
                    (
                        servers
                            .get(&id)
                            .cloned()
                            .unwrap_or_else(|| format!("#{id}")),
                        d.weights[i],
                    )
                })
                .collect(),
        });
    }
    out.sort_by(|a, b| (&a.service, &a.prefix).cmp(&(&b.service, &b.prefix)));
    Ok(out)
}

#[derive(Serialize, Debug)]
pub struct Stats {
    pub counters: Vec<(&'static str, u64)>,
    pub services: Vec<(String, u64)>,
}

pub fn stats(m: &Maps) -> Result<Stats> {
    let mut c = Vec::new();
    for r in counters::ALL {
        c.push((r.name(), Maps::counter(&m.counters, r as u32)?));
    }
    let mut s = Vec::new();
    for v in services(m)? {
        s.push((v.name, Maps::counter(&m.service_stats, v.id)?));
    }
    Ok(Stats {
        counters: c,
        services: s,
    })
}
