//! The zones director owns, answered in userspace: everything the XDP program does not
//! answer for them (other types, TCP, what it passes) on UDP and TCP port 53 of each zone's
//! listen addresses (its NS addresses). `zone` holds the static data, `answer` turns a query
//! into an answer (service addresses through the kernel's own policy, `kernel::resolve`),
//! `listen` runs the sockets. Started by `run` (zones from its config) and by `serve`.

pub mod answer;
mod dnssec_config;
pub mod file;
pub mod keys;
pub mod listen;
mod outcome;
mod presentation;
mod prove;
pub mod signed;
mod tsig;
pub mod zone;

pub use answer::{Outcome, Transport, Zones};
pub use listen::{Server, Stats};
pub use zone::ZoneConfig;

/// DNS's port; the listeners answer on it only.
pub const PORT: u16 = 53;

use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use hickory_proto::rr::{RData, RecordType};

use crate::api;
use crate::kernel::Maps;

/// `zone list`: what each zone holds.
pub fn zone_list(zones: &Zones) -> api::ZoneList {
    api::ZoneList {
        zones: zones
            .all()
            .iter()
            .map(|z| api::ListedZone {
                origin: z.origin.to_string(),
                serial: z.serial(),
                ns: z
                    .ns
                    .iter()
                    .filter_map(|r| match r.data() {
                        Some(RData::NS(n)) => Some(n.0.to_string()),
                        _ => None,
                    })
                    .collect(),
                listen: z.listen.clone(),
                records: z
                    .data
                    .values()
                    .flatten()
                    .filter(|r| r.record_type() != RecordType::SOA || r.name() == &z.origin)
                    .count(),
            })
            .collect(),
    }
}

/// How often `serve` looks at its zones file and the kernel's services.
const SERVE_POLL: Duration = Duration::from_secs(1);

/// `director-ctl serve`: the zones of `file` with the kernel's services, until killed. A
/// changed file or service list is served from the next poll on; a file that does not
/// build is refused (logged) and the last good zones stay.
pub fn serve(pin_dir: &Path, file: &Path) -> Result<()> {
    let services = |m: &Maps| -> Result<Vec<String>> {
        Ok(m.services()?.into_iter().map(|s| s.name).collect())
    };
    let m = Maps::open(pin_dir)?;
    let known = services(&m)?;
    let f = file::ZoneFile::load(file)?;
    if f.zones.is_empty() {
        anyhow::bail!(
            "{} has no [[zone]] (add one with `zone add`)",
            file.display()
        );
    }
    let server = Server::start(pin_dir, f.build(&known)?, PORT)?;
    let addrs: Vec<String> = server.addresses.iter().map(ToString::to_string).collect();
    eprintln!(
        "director-ctl serve: answering the zones of {} on {} (UDP, TCP)",
        file.display(),
        addrs.join(", ")
    );
    // The file's mtime in full (two edits in one second are two changes) and the services.
    let stamp = || std::fs::metadata(file).and_then(|m| m.modified()).ok();
    let mut last = (known, stamp());
    loop {
        std::thread::sleep(SERVE_POLL);
        let now = (services(&m).unwrap_or_else(|_| last.0.clone()), stamp());
        if now == last {
            continue;
        }
        match file::ZoneFile::load(file).and_then(|f| f.build(&now.0)) {
            Ok(z) => server.set_zones(z),
            Err(e) => eprintln!("director-ctl serve: keeping the last good zones: {e:#}"),
        }
        last = now;
    }
}
