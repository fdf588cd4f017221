//! The DNS services (`DIR_SERVICES`) and the names that reach them (`DIR_NAMES`,
//! `DIR_SERVICE_NAMES`). The program may look a name up at any moment, so a service is
//! written before its name and its name removed before it.

use std::collections::HashSet;

use anyhow::{anyhow, bail, Context, Result};
use aya::maps::MapError;
use director_common::{
    maps::{
        Fallback, HealthMask, NameEntry, ServiceRecord, KIND_DNS, KIND_VIP, MAX_SERVERS,
        MAX_SERVICES, NAME_BUF, SERVICE_ACTIVE,
    },
    name,
    rrl::Limit,
    select::Mode,
};

use super::entries::ServiceEntry;
use super::servers::empty_server;
use super::Maps;

impl Maps {
    /// Every DNS service, by name.
    pub fn services(&self) -> Result<Vec<ServiceEntry>> {
        let mut out = Vec::new();
        for kv in self.names.iter() {
            let (_, e) = kv.context("reading the name table")?;
            let s = self
                .services
                .get(&e.service, 0)
                .with_context(|| format!("reading service {}", e.service))?;
            out.push(ServiceEntry {
                id: e.service,
                name: name::decode(&e.name[..e.len as usize])
                    .trim_end_matches('.')
                    .to_string(),
                ttl: s.ttl,
                answers: s.answers,
                select: Mode::from_u8(s.select),
                dns: s.kind == KIND_DNS,
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// The id of the service that owns the DNS name `text`, if one does.
    pub fn find_service(&self, text: &str) -> Result<Option<u32>> {
        let wire = wire_name(text)?;
        match self.names.get(&name::hash(&wire), 0) {
            Ok(e) if e.name[..e.len as usize] == wire[..] => Ok(Some(e.service)),
            Ok(e) => bail!(
                "{text:?} has the same hash as the service {}; rename one of them",
                name::decode(&e.name[..e.len as usize])
            ),
            Err(MapError::KeyNotFound) => Ok(None),
            Err(e) => Err(e).context("reading the name table"),
        }
    }

    /// The lowest service id no service has.
    pub fn free_service_id(&self) -> Result<u32> {
        for (i, s) in self.services.iter().enumerate().skip(1) {
            if s.context("reading the service table")?.flags & SERVICE_ACTIVE == 0 {
                return Ok(i as u32);
            }
        }
        bail!("the service table is full")
    }

    /// Writes a service and its name. The service first: the kernel must never find a name
    /// whose service is not there.
    pub fn put_service(&mut self, e: &ServiceEntry) -> Result<()> {
        self.put_services(std::slice::from_ref(e))
    }

    /// Writes services and their names (each service before its name), then publishes the
    /// names to the program's slots once.
    pub fn put_services(&mut self, all: &[ServiceEntry]) -> Result<()> {
        for e in all {
            let wire = wire_name(&e.name)?;
            let svc = ServiceRecord {
                ttl: e.ttl,
                flags: SERVICE_ACTIVE,
                kind: if e.dns { KIND_DNS } else { KIND_VIP },
                answers: e.answers,
                select: e.select as u8,
            };
            self.services
                .set(e.id, svc, 0)
                .context("writing the service table")?;
            let mut entry = NameEntry {
                service: e.id,
                len: wire.len() as u32,
                name: [0; NAME_BUF],
            };
            entry.name[..wire.len()].copy_from_slice(&wire);
            self.service_names
                .set(e.id, entry, 0)
                .context("writing the service names")?;
            self.names
                .insert(name::hash(&wire), entry, 0)
                .context("writing the name table")?;
        }
        self.sync_front()
    }

    /// Removes a service: its name first (queries for it then pass), then its decisions,
    /// then the service.
    pub fn remove_service(&mut self, id: u32, text: &str) -> Result<()> {
        let wire = wire_name(text)?;
        self.names
            .remove(&name::hash(&wire))
            .context("writing the name table")?;
        self.sync_front()?;
        let removed = self.remove_decisions(|s| s == id);
        self.tries_written()?;
        removed?;
        self.services
            .set(id, ServiceRecord::default(), 0)
            .context("writing the service table")?;
        self.clear_service_name(id)?;
        // A later service with this id starts unlimited.
        self.set_rrl(id, &Limit::unlimited())
    }

    /// Removes every service and server whose id is not kept: names first (queries for them
    /// then pass), then services, then servers. The caller makes sure no decision in use
    /// still refers to them.
    pub fn retain(&mut self, services: &HashSet<u32>, servers: &HashSet<u16>) -> Result<()> {
        let mut stale = Vec::new();
        for kv in self.names.iter() {
            let (k, e) = kv.context("reading the name table")?;
            if !services.contains(&e.service) {
                stale.push(k);
            }
        }
        for k in stale {
            self.names.remove(&k).context("writing the name table")?;
        }
        self.sync_front()?;
        for id in 1..MAX_SERVICES {
            if !services.contains(&id) && self.services.get(&id, 0)?.flags != 0 {
                self.services
                    .set(id, ServiceRecord::default(), 0)
                    .context("writing the service table")?;
                self.clear_service_name(id)?;
                // A later service with this id starts with no verdicts and no fallback.
                self.set_health(id, &HealthMask::all_in())?;
                self.set_fallback(id, &Fallback::none())?;
                self.set_rrl(id, &Limit::unlimited())?;
            }
        }
        for id in 1..MAX_SERVERS {
            if !servers.contains(&(id as u16)) && self.servers.get(&id, 0)?.flags != 0 {
                self.servers
                    .set(id, empty_server(), 0)
                    .context("writing the server table")?;
            }
        }
        Ok(())
    }

    /// Empties a removed service's entry in `DIR_SERVICE_NAMES` (its name is out of
    /// `DIR_NAMES` and the slots already).
    fn clear_service_name(&mut self, id: u32) -> Result<()> {
        let empty = NameEntry {
            service: 0,
            len: 0,
            name: [0; NAME_BUF],
        };
        self.service_names
            .set(id, empty, 0)
            .context("writing the service names")
    }
}

fn wire_name(text: &str) -> Result<Vec<u8>> {
    name::encode(text).map_err(|e| anyhow!("bad DNS name {text:?}: {e}"))
}
