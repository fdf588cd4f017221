//! Where a client of a service goes: the kernel's own selection ([`Resolver`]), so an HTTP
//! client is sent to the server a DNS query from the same address would get, with the same
//! health and drains.

use std::collections::HashMap;
use std::net::IpAddr;

use anyhow::Result;
use director_common::name;

use super::request::Target;
use crate::kernel::resolve::{Answer, Client, Resolver, Selected};
use crate::kernel::Maps;

/// What a request for a name gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// A server of the service (`fallback` false), or its alternate domain or origin.
    Go {
        target: Target,
        fallback: bool,
        ttl: u32,
    },
    /// No service has the name.
    NotAService,
    /// A service with nothing to send this client to.
    NoServer,
}

/// The first answer of a family that names a server, or the fallback it gives instead.
enum Found {
    Server { addr: IpAddr, id: u16, ttl: u32 },
    Fallback { target: Target, ttl: u32 },
    Nothing,
}

fn found(answer: Answer) -> Found {
    match answer {
        Answer::Addresses {
            addrs,
            servers,
            ttl,
            ..
        } => match (addrs.first(), servers.first()) {
            (Some(&addr), Some(&id)) => Found::Server { addr, id, ttl },
            // The origin fallback carries no server id.
            (Some(&addr), None) => Found::Fallback {
                target: Target::Addr(addr),
                ttl,
            },
            _ => Found::Nothing,
        },
        // A wire name that cannot stand in a URL is no fallback for HTTP clients.
        Answer::Alternate { target, ttl, .. } => {
            let text = name::decode(&target);
            let text = text.trim_end_matches('.').to_string();
            match super::config::url_host(&text) {
                Ok(()) => Found::Fallback {
                    target: Target::Name(text),
                    ttl,
                },
                Err(_) => Found::Nothing,
            }
        }
        Answer::NoDecision | Answer::NoServer { .. } => Found::Nothing,
    }
}

/// Chooses for `wire` (a service's wire name) and `client`. The client's own family is
/// asked first (A for IPv4, AAAA for IPv6), as its resolver would; a server of the other
/// family comes before any fallback, since a URL is not bound to the family the request
/// came over (and a hostname is resolved by the client anyway). The fallback is the
/// client's family's, then the other's.
///
/// A server with a `hostname` in `hostnames` (by server name) is sent as that name,
/// otherwise as its address.
pub fn choose(
    resolver: &Resolver,
    maps: &Maps,
    hostnames: &HashMap<String, String>,
    wire: &[u8],
    client: IpAddr,
) -> Result<Choice> {
    let c = Client::host(client);
    let mut fallback = None;
    for aaaa in [client.is_ipv6(), !client.is_ipv6()] {
        let answer = match resolver.select(wire, aaaa, c)? {
            Selected::NotAService => return Ok(Choice::NotAService),
            Selected::Service { answer, .. } => answer,
        };
        match found(answer) {
            Found::Server { addr, id, ttl } => {
                let named = maps
                    .server(id)?
                    .and_then(|s| hostnames.get(&s.name).cloned());
                let target = named.map_or(Target::Addr(addr), Target::Name);
                return Ok(Choice::Go {
                    target,
                    fallback: false,
                    ttl,
                });
            }
            Found::Fallback { target, ttl } => {
                fallback.get_or_insert((target, ttl));
            }
            Found::Nothing => {}
        }
    }
    Ok(match fallback {
        Some((target, ttl)) => Choice::Go {
            target,
            fallback: true,
            ttl,
        },
        None => Choice::NoServer,
    })
}
