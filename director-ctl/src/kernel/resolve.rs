//! The kernel's policy, read from the pinned maps by userspace: which servers a query for a
//! service name gets. The userspace DNS listeners (TCP, and what the XDP program passes) and
//! the HTTP redirector answer with it, so a client gets the same servers there as from the
//! XDP program: the same maps, the same order of lookups and the same `select` code.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use anyhow::{Context, Result};
use aya::maps::{lpm_trie::Key, Array, HashMap, LpmTrie, MapData, MapError};
use director_common::{
    fallback::Kinds,
    maps::Decision,
    maps::{
        DecisionKeyV4, DecisionKeyV6, DecisionRef, Fallback, HealthMask, NameEntry, ServerRecord,
        ServiceRecord, KIND_DNS, MAP_CHOICES, MAP_DEC4, MAP_DEC6, MAP_FALLBACK, MAP_HEALTH,
        MAP_NAMES, MAP_SERVERS, MAP_SERVICES, MAX_CANDIDATES, NAME_BUF, SERVICE_ACTIVE,
        SERVICE_BITS,
    },
    name,
    select::{self, Mode},
};

use super::pins::open;

/// The client a query is answered for: the ECS address and its source length when the
/// query carries one, else the packet's source address at full length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Client {
    pub addr: IpAddr,
    pub bits: u8,
}

impl Client {
    pub fn host(addr: IpAddr) -> Client {
        let bits = if addr.is_ipv4() { 32 } else { 128 };
        Client { addr, bits }
    }

    /// The address as the kernel keys it: its bytes masked to `bits`, an IPv4 address in
    /// the first four bytes.
    fn key_bytes(&self) -> [u8; 16] {
        let mut out = [0u8; 16];
        let (octets, len): (&[u8], usize) = match &self.addr {
            IpAddr::V4(a) => (&a.octets()[..], 4),
            IpAddr::V6(a) => (&a.octets()[..], 16),
        };
        out[..len].copy_from_slice(&octets[..len]);
        let bits = (self.bits as usize).min(len * 8);
        for (i, b) in out.iter_mut().enumerate() {
            let from = i * 8;
            if from >= bits {
                *b = 0;
            } else if from + 8 > bits {
                *b &= 0xffu8 << (8 - (bits - from));
            }
        }
        out
    }
}

/// What the kernel's policy gives a query for a name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selected {
    /// No service has the name.
    NotAService,
    /// A service (with its TTL), and what it answers.
    Service {
        service: u32,
        ttl: u32,
        answer: Answer,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Addresses to answer with (of the asked family), in order; `servers` holds their ids
    /// (empty for the origin fallback).
    Addresses {
        addrs: Vec<IpAddr>,
        servers: Vec<u16>,
        ttl: u32,
        scope: u8,
    },
    /// A CNAME to the service's alternate (a wire name).
    Alternate {
        target: Vec<u8>,
        ttl: u32,
        scope: u8,
    },
    /// No decision covers the client.
    NoDecision,
    /// No server can be answered and there is no fallback of this family. `lacks_family`:
    /// none of the client's candidates has an address of the asked family at all (up or
    /// not), so the name has no data of this type for this client.
    NoServer { scope: u8, lacks_family: bool },
}

/// The maps the policy reads, opened read-only in spirit (nothing here writes).
pub struct Resolver {
    names: HashMap<MapData, u64, NameEntry>,
    services: Array<MapData, ServiceRecord>,
    servers: Array<MapData, ServerRecord>,
    dec4: LpmTrie<MapData, DecisionKeyV4, DecisionRef>,
    dec6: LpmTrie<MapData, DecisionKeyV6, DecisionRef>,
    choices: Array<MapData, Decision>,
    health: Array<MapData, HealthMask>,
    fallback: Array<MapData, Fallback>,
}

/// A random 32-bit key for the `random` mode, as the kernel's `bpf_get_prandom_u32`.
fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    // SAFETY: the buffer is 4 writable bytes.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != 4 {
        // getrandom cannot fail on 4 bytes after boot; a fixed key still answers.
        return 0;
    }
    u32::from_ne_bytes(b)
}

impl Resolver {
    pub fn open(dir: &Path) -> Result<Resolver> {
        Ok(Resolver {
            names: open(dir, MAP_NAMES)?,
            services: open(dir, MAP_SERVICES)?,
            servers: open(dir, MAP_SERVERS)?,
            dec4: open(dir, MAP_DEC4)?,
            dec6: open(dir, MAP_DEC6)?,
            choices: open(dir, MAP_CHOICES)?,
            health: open(dir, MAP_HEALTH)?,
            fallback: open(dir, MAP_FALLBACK)?,
        })
    }

    /// The service that owns a wire name (any case), if one does.
    pub fn service(&self, wire: &[u8]) -> Result<Option<(u32, ServiceRecord)>> {
        let lower: Vec<u8> = wire.iter().map(|&b| name::lower(b)).collect();
        let entry = match self.names.get(&name::hash(&lower), 0) {
            Ok(e) => e,
            Err(MapError::KeyNotFound) => return Ok(None),
            Err(e) => return Err(e).context("reading the name table"),
        };
        let len = (entry.len as usize).min(NAME_BUF);
        if entry.name[..len] != lower[..] {
            return Ok(None);
        }
        let svc = self
            .services
            .get(&entry.service, 0)
            .with_context(|| format!("reading service {}", entry.service))?;
        if svc.flags & SERVICE_ACTIVE == 0 || svc.kind != KIND_DNS {
            return Ok(None);
        }
        Ok(Some((entry.service, svc)))
    }

    /// The kernel's `policy::decide` for a query of `wire` (A, or AAAA when `aaaa`) from
    /// `client`.
    pub fn select(&self, wire: &[u8], aaaa: bool, client: Client) -> Result<Selected> {
        let Some((service, svc)) = self.service(wire)? else {
            return Ok(Selected::NotAService);
        };
        let lower: Vec<u8> = wire.iter().map(|&b| name::lower(b)).collect();
        let answer = self.answer(service, &svc, name::hash(&lower), aaaa, client)?;
        Ok(Selected::Service {
            service,
            ttl: svc.ttl,
            answer,
        })
    }

    fn answer(
        &self,
        service: u32,
        svc: &ServiceRecord,
        hash: u64,
        aaaa: bool,
        client: Client,
    ) -> Result<Answer> {
        let Some(found) = self.lookup(service, client)? else {
            return Ok(Answer::NoDecision);
        };
        let idx = found.id;
        let decision = self
            .choices
            .get(&idx, 0)
            .with_context(|| format!("reading decision {idx}"))?;
        let key = match Mode::from_u8(svc.select) {
            Mode::Random => random_u32(),
            Mode::Client => select::client_key(&client.key_bytes()),
            Mode::Name => select::name_key(hash),
        };
        let health = self
            .health
            .get(&service, 0)
            .with_context(|| format!("reading the health of service {service}"))?;
        let mut records = [None; MAX_CANDIDATES];
        for (i, id) in decision.servers.iter().enumerate().take(MAX_CANDIDATES) {
            if i < decision.count as usize {
                records[i] = Some(
                    self.servers
                        .get(&u32::from(*id), 0)
                        .with_context(|| format!("reading server {id}"))?,
                );
            }
        }
        let record = |id: u16| {
            decision
                .servers
                .iter()
                .position(|&s| s == id)
                .and_then(|i| records[i])
        };
        let usable = |id: u16| {
            record(id).is_some_and(|sv| sv.is_usable() && sv.has_family(aaaa)) && !health.is_out(id)
        };
        let mut addrs = Vec::new();
        let mut servers = Vec::new();
        select::select(&decision, key, svc.answers, usable, |id| {
            let Some(sv) = record(id) else { return false };
            addrs.push(if aaaa {
                IpAddr::V6(Ipv6Addr::from(sv.ipv6))
            } else {
                IpAddr::V4(Ipv4Addr::from(sv.ipv4))
            });
            servers.push(id);
            true
        });
        let ttl = if health.ttl != 0 { health.ttl } else { svc.ttl };
        let scope = found.scope;
        if !addrs.is_empty() {
            return Ok(Answer::Addresses {
                addrs,
                servers,
                ttl,
                scope,
            });
        }
        let fb = self
            .fallback
            .get(&service, 0)
            .with_context(|| format!("reading the fallback of service {service}"))?;
        if fb.kinds.contains(Kinds::ALTERNATE) {
            // The prebuilt record: 12 fixed bytes (owner pointer, type, class, TTL, length),
            // then the alternate's wire name.
            let end = (fb.cname_len as usize).min(fb.cname.len());
            return Ok(Answer::Alternate {
                target: fb.cname[12.min(end)..end].to_vec(),
                ttl: fb.ttl,
                scope,
            });
        }
        let origin = fb.kinds.contains(Kinds::origin(aaaa)).then(|| {
            if aaaa {
                IpAddr::V6(Ipv6Addr::from(fb.origin6))
            } else {
                IpAddr::V4(Ipv4Addr::from(fb.origin4))
            }
        });
        Ok(match origin {
            Some(a) => Answer::Addresses {
                addrs: vec![a],
                servers: Vec::new(),
                ttl: fb.ttl,
                scope,
            },
            None => Answer::NoServer {
                scope,
                lacks_family: !records.iter().flatten().any(|sv| sv.has_family(aaaa)),
            },
        })
    }

    fn lookup(&self, service: u32, client: Client) -> Result<Option<DecisionRef>> {
        let svc = service.to_be_bytes();
        let bits = SERVICE_BITS + u32::from(client.bits);
        let bytes = client.key_bytes();
        let got = match client.addr {
            IpAddr::V4(_) => {
                let addr = [bytes[0], bytes[1], bytes[2], bytes[3]];
                let key = Key::new(bits, DecisionKeyV4 { service: svc, addr });
                self.dec4.get(&key, 0)
            }
            IpAddr::V6(_) => {
                let key = Key::new(
                    bits,
                    DecisionKeyV6 {
                        service: svc,
                        addr: bytes,
                    },
                );
                self.dec6.get(&key, 0)
            }
        };
        match got {
            Ok(r) => Ok(Some(r)),
            Err(MapError::KeyNotFound) => Ok(None),
            Err(e) => Err(e).context("reading the decision table"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_keys_are_masked_to_their_source_length() {
        let c = Client {
            addr: "203.0.113.77".parse().unwrap(),
            bits: 20,
        };
        assert_eq!(&c.key_bytes()[..4], &[203, 0, 112, 0]);
        assert!(c.key_bytes()[4..].iter().all(|&b| b == 0));
        let h = Client::host("2001:db8::1".parse().unwrap());
        assert_eq!(h.bits, 128);
        assert_eq!(h.key_bytes()[15], 1);
        let z = Client {
            addr: "2001:db8::1".parse().unwrap(),
            bits: 0,
        };
        assert_eq!(z.key_bytes(), [0; 16]);
    }
}
