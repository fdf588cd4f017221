//! The pinned maps, opened by name from the pin directory, behind typed methods: the rest of
//! director-ctl never sees a map, a key layout or a flag bit. Each method writes in the order
//! that keeps the XDP program consistent (a service before its name, a name removed before
//! its service), because the program reads these maps while they are written.

// hashbrown's maps hash with foldhash, not SipHash: a full table's apply looks up a
// decision's id for each of its entries (hundreds of thousands), and no key here comes
// from the network. (`HashMap` is aya's.)
use hashbrown::{HashMap as HashMap2, HashSet as HashSet2};
use std::collections::{BTreeMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use aya::maps::{lpm_trie::Key, Array, HashMap, LpmTrie, Map, MapData, MapError, PerCpuArray};
use director_common::{
    counters::{self, Reason},
    maps::{
        Decision, DecisionKeyV4, DecisionKeyV6, DecisionRef, Fallback, FrontSwitch, HealthMask,
        Iface, LocalSlot, NameEntry, NameSlot, ServerRecord, ServiceRecord, TableSwitch,
        DEC16_SLOTS, KIND_DNS, KIND_VIP, LAYOUT_VERSION, LOCAL_CONFIGURED, LOCAL_HOST, LOCAL_SLOTS,
        MAP_CHOICES, MAP_CONFIG, MAP_COUNTERS, MAP_DEC4, MAP_DEC6, MAP_DEC_GEN, MAP_FALLBACK,
        MAP_FRONT, MAP_HEALTH, MAP_IFACES, MAP_LAYOUT, MAP_LOCAL, MAP_LOCAL_SLOTS, MAP_NAMES,
        MAP_NAME_SLOTS, MAP_RRL, MAP_RRL_EXEMPT, MAP_SERVERS, MAP_SERVER_STATS, MAP_SERVICES,
        MAP_SERVICE_NAMES, MAP_SERVICE_STATS, MAX_CHOICES, MAX_IFACES, MAX_LOCAL, MAX_SERVERS,
        MAX_SERVICES, NAME_BUF, NAME_SLOTS, SERVER_DRAINED, SERVER_EXISTS, SERVER_NAME_LEN,
        SERVER_UP, SERVER_V4, SERVER_V6, SERVICE_ACTIVE, SERVICE_BITS, SLOT_OVERFLOW, SLOT_USED,
    },
    name,
    rrl::{Limit, EXEMPT_V4_MAPPED_BITS},
    select::Mode,
};
use ipnet::{IpNet, Ipv4Net};

type Dec4 = LpmTrie<MapData, DecisionKeyV4, DecisionRef>;
type Dec6 = LpmTrie<MapData, DecisionKeyV6, DecisionRef>;

/// A server as the kernel's table holds it.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerEntry {
    pub id: u16,
    pub name: String,
    pub ipv4: Option<Ipv4Addr>,
    pub ipv6: Option<Ipv6Addr>,
    pub up: bool,
    /// `server drain`: no new clients.
    pub drained: bool,
    /// Its last load read by `run`.
    pub load: Option<f64>,
}

/// A DNS service as the kernel's tables hold it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceEntry {
    pub id: u32,
    /// The DNS name as text, without the trailing dot.
    pub name: String,
    pub ttl: u32,
    pub answers: u8,
    pub select: Mode,
    /// Its name is answered in DNS (else the service is reached by its VIPs only, and the
    /// name passes to the host).
    pub dns: bool,
}

/// Where the table given to [`Maps::set_front16`] comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableSource {
    /// Read from the tries and written back whole: what they hold.
    Kernel,
    /// The caller's own record of what it wrote (`run` between full syncs): what the tries
    /// hold unless another process wrote them since, which `Maps` notices.
    Own,
}

/// One service's decision entries: (client prefix, ranked servers).
pub type Entries = [(IpNet, Decision)];

/// A change to the decision tables, applied by [`Maps::apply_decisions`], the one way
/// decisions reach the kernel: some entries of one service, written in place.
pub struct DecisionChange<'a> {
    pub service: u32,
    pub put: &'a Entries,
    pub delete: &'a [IpNet],
}

pub struct Maps {
    names: HashMap<MapData, u64, NameEntry>,
    services: Array<MapData, ServiceRecord>,
    servers: Array<MapData, ServerRecord>,
    dec4: Dec4,
    dec6: Dec6,
    /// The same decision maps again, for batched writes (aya has no batch API).
    batch4: MapData,
    batch6: MapData,
    /// The stored decisions, by id (both halves), and the same map for batched writes.
    choices: Array<MapData, Decision>,
    batch_choices: MapData,
    /// `DIR_DEC_GEN`: bumped after every write to the tries (the program's cache of trie
    /// results keeps only what was read at the current number).
    dec_gen: Array<MapData, u64>,
    /// `DIR_DEC16`: cleared where a trie write is about to land, set by `set_front16`.
    front16: super::front16::Front16,
    config: Array<MapData, TableSwitch>,
    local: HashMap<MapData, [u8; 16], u32>,
    local_slots: Array<MapData, LocalSlot>,
    batch_local_slots: MapData,
    name_slots: Array<MapData, NameSlot>,
    batch_name_slots: MapData,
    service_names: Array<MapData, NameEntry>,
    front: Array<MapData, FrontSwitch>,
    /// Ids per table handed out before an update compacts (MAX_CHOICES; lower in tests).
    choice_limit: u32,
    /// `DIR_DEC_GEN` as this process left it: after its last write to the tries, or when
    /// it last set the /16 fronts from a table read from the kernel.
    gen_seen: Option<u64>,
    /// The tries may hold entries a table this process keeps lacks: another process wrote
    /// them (`DIR_DEC_GEN` moved without us), or a write of ours failed half way.
    tries_unknown: bool,
    ifaces: Array<MapData, Iface>,
    counters: PerCpuArray<MapData, u64>,
    service_stats: PerCpuArray<MapData, u64>,
    health: Array<MapData, HealthMask>,
    server_stats: PerCpuArray<MapData, u64>,
    /// `service_stats` for batched reads.
    batch_service_stats: MapData,
    fallback: Array<MapData, Fallback>,
    rrl: Array<MapData, Limit>,
    rrl_exempt: LpmTrie<MapData, [u8; 16], u32>,
    steer: super::steer::SteerMaps,
}

pub(super) fn open<T: TryFrom<Map, Error = MapError>>(dir: &Path, name: &str) -> Result<T> {
    let data = open_pinned(dir, name)?;
    let path = dir.join(name);
    let map = Map::from_map_data(data).with_context(|| format!("reading {}", path.display()))?;
    T::try_from(map).with_context(|| format!("{} has an unexpected type", path.display()))
}

/// The pinned map `name`, untyped; a missing pin is named as "nothing attached" or as a
/// pin set of another version.
pub(super) fn open_pinned(dir: &Path, name: &str) -> Result<MapData> {
    let path = dir.join(name);
    if !path.exists() {
        // Other pins without this one: a build of director that did not have the map
        // (an upgrade over a running one), not a missing attach.
        if other_pins(dir) {
            bail!(
                "the maps pinned in {} are from another version of director (it has no map \
                 {name}): detach director from every interface and attach it again",
                dir.display()
            );
        }
        bail!(
            "nothing is attached: no map {name} pinned in {} (run `director-ctl attach --iface \
             IF` first)",
            dir.display()
        );
    }
    MapData::from_pin(&path).with_context(|| format!("opening {}", path.display()))
}

/// Refuses a pin set of another layout (`LAYOUT_VERSION`) before anything is opened or
/// written: its program would read this build's entries otherwise.
fn check_layout(dir: &Path) -> Result<()> {
    let map = open_pinned(dir, MAP_LAYOUT)?;
    let info = map
        .info()
        .with_context(|| format!("reading {}", dir.join(MAP_LAYOUT).display()))?;
    let have = info.max_entries();
    if have != LAYOUT_VERSION {
        bail!(
            "the maps pinned in {} have layout {have} and this director-ctl writes layout \
             {LAYOUT_VERSION} (another version of director): detach director from every \
             interface and attach it again",
            dir.display()
        );
    }
    Ok(())
}

/// Whether `dir` holds director's maps at all (every version has had `DIR_NAMES`).
fn other_pins(dir: &Path) -> bool {
    dir.join(MAP_NAMES).exists()
}

fn open_data(dir: &Path, name: &str) -> Result<MapData> {
    let path = dir.join(name);
    MapData::from_pin(&path).with_context(|| format!("opening {}", path.display()))
}

fn empty_server() -> ServerRecord {
    ServerRecord {
        flags: 0,
        _pad: [0; 3],
        ipv4: [0; 4],
        ipv6: [0; 16],
        name: [0; SERVER_NAME_LEN],
        load: f32::NAN.to_bits(),
        _pad2: 0,
    }
}

fn server_entry(id: u16, s: &ServerRecord) -> ServerEntry {
    let end = s.name.iter().position(|&b| b == 0).unwrap_or(s.name.len());
    ServerEntry {
        id,
        name: String::from_utf8_lossy(&s.name[..end]).into_owned(),
        ipv4: (s.flags & SERVER_V4 != 0).then(|| Ipv4Addr::from(s.ipv4)),
        ipv6: (s.flags & SERVER_V6 != 0).then(|| Ipv6Addr::from(s.ipv6)),
        up: s.flags & SERVER_UP != 0,
        drained: s.flags & SERVER_DRAINED != 0,
        load: Some(f32::from_bits(s.load))
            .filter(|l| !l.is_nan())
            .map(load_as_read),
    }
}

/// The kernel keeps a load as f32; widening it bit for bit would show 0.4 as
/// 0.4000000059604645. The shortest decimal that reads back as the same f32 is what the
/// operator wrote (or the load file said), so that is what JSON and text show.
fn load_as_read(load: f32) -> f64 {
    load.to_string().parse().unwrap_or(f64::from(load))
}

fn wire_name(text: &str) -> Result<Vec<u8>> {
    name::encode(text).map_err(|e| anyhow!("bad DNS name {text:?}: {e}"))
}

impl Maps {
    pub fn open(dir: &Path) -> Result<Maps> {
        check_layout(dir)?;
        let m = Maps {
            names: open(dir, MAP_NAMES)?,
            services: open(dir, MAP_SERVICES)?,
            servers: open(dir, MAP_SERVERS)?,
            dec4: open(dir, MAP_DEC4)?,
            dec6: open(dir, MAP_DEC6)?,
            batch4: open_data(dir, MAP_DEC4)?,
            batch6: open_data(dir, MAP_DEC6)?,
            choices: open(dir, MAP_CHOICES)?,
            batch_choices: open_data(dir, MAP_CHOICES)?,
            dec_gen: open(dir, MAP_DEC_GEN)?,
            front16: super::front16::Front16::open(dir)?,
            config: open(dir, MAP_CONFIG)?,
            local: open(dir, MAP_LOCAL)?,
            local_slots: open(dir, MAP_LOCAL_SLOTS)?,
            batch_local_slots: open_data(dir, MAP_LOCAL_SLOTS)?,
            name_slots: open(dir, MAP_NAME_SLOTS)?,
            batch_name_slots: open_data(dir, MAP_NAME_SLOTS)?,
            service_names: open(dir, MAP_SERVICE_NAMES)?,
            front: open(dir, MAP_FRONT)?,
            choice_limit: MAX_CHOICES,
            gen_seen: None,
            tries_unknown: false,
            ifaces: open(dir, MAP_IFACES)?,
            counters: open(dir, MAP_COUNTERS)?,
            service_stats: open(dir, MAP_SERVICE_STATS)?,
            health: open(dir, MAP_HEALTH)?,
            server_stats: open(dir, MAP_SERVER_STATS)?,
            batch_service_stats: open_data(dir, MAP_SERVICE_STATS)?,
            fallback: open(dir, MAP_FALLBACK)?,
            rrl: open(dir, MAP_RRL)?,
            rrl_exempt: open(dir, MAP_RRL_EXEMPT)?,
            steer: super::steer::SteerMaps::open(dir)?,
        };
        m.check_name_keys(dir)?;
        Ok(m)
    }

    /// Refuses maps whose names are keyed by another build's hash: the program that reads
    /// them would not find what this build writes, and the other way round. (The hash
    /// changed when the kernel began reading names a word at a time.)
    fn check_name_keys(&self, dir: &Path) -> Result<()> {
        for kv in self.names.iter() {
            let (key, e) = kv.context("reading the name table")?;
            let len = (e.len as usize).min(NAME_BUF);
            if name::hash(&e.name[..len]) != key {
                bail!(
                    "the maps in {} were written by another build of director (names keyed \
                     differently); detach it from every interface and attach again",
                    dir.display()
                );
            }
        }
        Ok(())
    }

    /// The SYN-steering maps: VIPs, hops, flows.
    pub fn steer(&self) -> &super::steer::SteerMaps {
        &self.steer
    }

    pub fn steer_mut(&mut self) -> &mut super::steer::SteerMaps {
        &mut self.steer
    }

    // --- servers -------------------------------------------------------------------------

    /// Every server in the table, by id.
    pub fn servers(&self) -> Result<Vec<ServerEntry>> {
        let mut out = Vec::new();
        for (i, s) in self.servers.iter().enumerate() {
            let s = s.context("reading the server table")?;
            if i > 0 && s.flags & SERVER_EXISTS != 0 {
                out.push(server_entry(i as u16, &s));
            }
        }
        Ok(out)
    }

    /// One server, if it exists.
    pub fn server(&self, id: u16) -> Result<Option<ServerEntry>> {
        let s = self
            .servers
            .get(&u32::from(id), 0)
            .with_context(|| format!("reading server {id}"))?;
        Ok((s.flags & SERVER_EXISTS != 0).then(|| server_entry(id, &s)))
    }

    /// The lowest server id no server has.
    pub fn free_server_id(&self) -> Result<u16> {
        for (i, s) in self.servers.iter().enumerate().skip(1) {
            if s.context("reading the server table")?.flags & SERVER_EXISTS == 0 {
                return Ok(i as u16);
            }
        }
        bail!("the server table is full")
    }

    /// Writes a server at its id (a new one, or new addresses or state for an existing one).
    pub fn put_server(&mut self, e: &ServerEntry) -> Result<()> {
        if e.name.len() >= SERVER_NAME_LEN {
            bail!(
                "server name {:?} is over {} bytes",
                e.name,
                SERVER_NAME_LEN - 1
            );
        }
        let mut s = empty_server();
        s.flags = SERVER_EXISTS;
        s.name[..e.name.len()].copy_from_slice(e.name.as_bytes());
        if e.up {
            s.flags |= SERVER_UP;
        }
        if e.drained {
            s.flags |= SERVER_DRAINED;
        }
        s.load = e.load.map_or(f32::NAN, |l| l as f32).to_bits();
        if let Some(a) = e.ipv4 {
            s.flags |= SERVER_V4;
            s.ipv4 = a.octets();
        }
        if let Some(a) = e.ipv6 {
            s.flags |= SERVER_V6;
            s.ipv6 = a.octets();
        }
        self.servers
            .set(u32::from(e.id), s, 0)
            .context("writing the server table")
    }

    pub fn set_server_up(&mut self, id: u16, up: bool) -> Result<()> {
        self.set_server_flag(id, SERVER_UP, up)
    }

    /// Records a server's load (for `status` and `server list`).
    pub fn set_server_load(&mut self, id: u16, load: f64) -> Result<()> {
        let key = u32::from(id);
        let mut s = self
            .servers
            .get(&key, 0)
            .with_context(|| format!("reading server {id}"))?;
        let bits = (load as f32).to_bits();
        if s.flags & SERVER_EXISTS == 0 || s.load == bits {
            return Ok(());
        }
        s.load = bits;
        self.servers
            .set(key, s, 0)
            .context("writing the server table")
    }

    pub fn set_server_drained(&mut self, id: u16, drained: bool) -> Result<()> {
        self.set_server_flag(id, SERVER_DRAINED, drained)
    }

    fn set_server_flag(&mut self, id: u16, flag: u8, on: bool) -> Result<()> {
        let key = u32::from(id);
        let mut s = self
            .servers
            .get(&key, 0)
            .with_context(|| format!("reading server {id}"))?;
        if on {
            s.flags |= flag;
        } else {
            s.flags &= !flag;
        }
        self.servers
            .set(key, s, 0)
            .context("writing the server table")
    }

    // --- health --------------------------------------------------------------------------

    /// The health checks' verdicts for one service's servers.
    pub fn health(&self, service: u32) -> Result<HealthMask> {
        self.health
            .get(&service, 0)
            .with_context(|| format!("reading the health of service {service}"))
    }

    pub fn fallback(&self, service: u32) -> Result<Fallback> {
        self.fallback
            .get(&service, 0)
            .with_context(|| format!("reading the fallback of service {service}"))
    }

    pub fn set_fallback(&mut self, service: u32, f: &Fallback) -> Result<()> {
        self.fallback
            .set(service, *f, 0)
            .with_context(|| format!("writing the fallback of service {service}"))
    }

    pub fn set_health(&mut self, service: u32, mask: &HealthMask) -> Result<()> {
        self.health
            .set(service, *mask, 0)
            .with_context(|| format!("writing the health of service {service}"))
    }

    // --- response rate limiting ------------------------------------------------------------

    /// A service's rate limit (unlimited unless one was set).
    pub fn rrl(&self, service: u32) -> Result<Limit> {
        self.rrl
            .get(&service, 0)
            .with_context(|| format!("reading the rate limit of service {service}"))
    }

    pub fn set_rrl(&mut self, service: u32, l: &Limit) -> Result<()> {
        self.rrl
            .set(service, *l, 0)
            .with_context(|| format!("writing the rate limit of service {service}"))
    }

    /// The source prefixes never rate limited.
    pub fn rrl_exempt(&self) -> Result<Vec<IpNet>> {
        let mut out = Vec::new();
        for k in self.rrl_exempt.keys() {
            let k = k.context("reading the rate-limit exemptions")?;
            let addr = Ipv6Addr::from(k.data());
            let bits = k.prefix_len();
            let net = match addr.to_ipv4_mapped() {
                Some(v4) if bits >= EXEMPT_V4_MAPPED_BITS => {
                    IpNet::new(IpAddr::V4(v4), (bits - EXEMPT_V4_MAPPED_BITS) as u8)?
                }
                _ => IpNet::new(IpAddr::V6(addr), bits as u8)?,
            };
            out.push(net);
        }
        out.sort();
        Ok(out)
    }

    /// Whether `source` lies in an exempt prefix (the kernel's own longest-prefix lookup).
    pub fn rrl_is_exempt(&self, source: IpAddr) -> Result<bool> {
        let (v6, lo, hi) = director_common::rrl::source_words(source);
        let key = Key::new(128, director_common::rrl::exempt_key(v6, lo, hi));
        match self.rrl_exempt.get(&key, 0) {
            Ok(_) => Ok(true),
            Err(MapError::KeyNotFound) => Ok(false),
            Err(e) => Err(e).context("reading the rate-limit exemptions"),
        }
    }

    /// Exempts a source prefix from rate limiting (`on`), or limits it again.
    pub fn set_rrl_exempt(&mut self, net: IpNet, on: bool) -> Result<()> {
        let key = match net {
            IpNet::V4(n) => Key::new(
                EXEMPT_V4_MAPPED_BITS + u32::from(n.prefix_len()),
                n.network().to_ipv6_mapped().octets(),
            ),
            IpNet::V6(n) => Key::new(u32::from(n.prefix_len()), n.network().octets()),
        };
        let r = if on {
            self.rrl_exempt.insert(&key, 1, 0)
        } else {
            match self.rrl_exempt.remove(&key) {
                Err(MapError::KeyNotFound) => Ok(()),
                r => r,
            }
        };
        r.with_context(|| format!("writing the rate-limit exemption {net}"))
    }

    pub fn remove_server(&mut self, id: u16) -> Result<()> {
        self.servers
            .set(u32::from(id), empty_server(), 0)
            .context("writing the server table")
    }

    // --- services ------------------------------------------------------------------------

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

    // --- decisions -----------------------------------------------------------------------

    /// The half of `DIR_CHOICES` (0 = A, 1 = B) new decision ids come from. At rest every
    /// entry refers to it; a compaction moves them all to the other half and flips it.
    pub fn active_table(&self) -> Result<usize> {
        Ok((self.switch()?.active_table & 1) as usize)
    }

    fn switch(&self) -> Result<TableSwitch> {
        self.config.get(&0, 0).context("reading the config map")
    }

    fn set_switch(&mut self, c: TableSwitch) -> Result<()> {
        self.config
            .set(0, c, 0)
            .context("writing the config map (decision ids)")
    }

    /// Hands out at most `n - 1` decision ids per half before compacting (at most
    /// MAX_CHOICES): lets a test reach the compaction that 2^17 updates would.
    pub fn limit_stored_decisions(&mut self, n: u32) {
        self.choice_limit = n.clamp(2, MAX_CHOICES);
    }

    /// How many decisions the half in use stores (ids handed out since it was last taken
    /// into use; an update never rewrites a stored one, it adds one).
    pub fn stored_decisions(&self) -> Result<u32> {
        let c = self.switch()?;
        Ok(c.next_choice[(c.active_table & 1) as usize].clamp(1, MAX_CHOICES) - 1)
    }

    /// Every entry as the tries hold it: (service id, client prefix, reference).
    fn references(&self) -> Result<Vec<(u32, IpNet, DecisionRef)>> {
        let v4 = read_trie(&self.batch4, &self.dec4).context("reading the IPv4 decision table")?;
        let v6 = read_trie(&self.batch6, &self.dec6).context("reading the IPv6 decision table")?;
        let mut refs = Vec::with_capacity(v4.len() + v6.len());
        for (k, v) in v4 {
            let (service, net) = entry_of4(&k)?;
            refs.push((service, net, v));
        }
        for (k, v) in v6 {
            let len = (k.prefix_len() - SERVICE_BITS) as u8;
            let d = k.data();
            let net = IpNet::new(Ipv6Addr::from(d.addr).into(), len)?;
            refs.push((u32::from_be_bytes(d.service), net, v));
        }
        Ok(refs)
    }

    /// Every decision queries can get: (service id, client prefix, value with the entry's
    /// ECS scope in `prefix_len`).
    pub fn decisions(&self) -> Result<Vec<(u32, IpNet, Decision)>> {
        let refs = self.references()?;
        let contents = self.contents(refs.iter().map(|(_, _, r)| r.id))?;
        Ok(refs
            .into_iter()
            .map(|(service, net, r)| {
                let d = contents[&r.id];
                (
                    service,
                    net,
                    Decision {
                        prefix_len: r.scope,
                        ..d
                    },
                )
            })
            .collect())
    }

    /// The stored decision at each of `ids` (indexes into `DIR_CHOICES`), each read once
    /// however many prefixes share it.
    fn contents(&self, ids: impl Iterator<Item = u32>) -> Result<HashMap2<u32, Decision>> {
        let mut stored = HashMap2::new();
        for id in ids {
            if let hashbrown::hash_map::Entry::Vacant(e) = stored.entry(id) {
                let d = self
                    .choices
                    .get(&id, 0)
                    .with_context(|| format!("reading stored decision {id}"))?;
                e.insert(d);
            }
        }
        Ok(stored)
    }

    /// Writes some entries of one service in place, each atomically, in an order that
    /// gives every address its old answer or its new one at every moment (so a controller
    /// killed half way leaves a table that answers correctly): decisions not stored yet
    /// first, at ids no entry uses, then the entries from the most specific prefix to the
    /// least, then deletions from the least specific to the most. Returns the number of
    /// entries written.
    pub fn apply_decisions(&mut self, change: DecisionChange<'_>) -> Result<usize> {
        let written = self.write_decisions(change);
        // Failed: the caller's table (what it meant to write) is not what the tries hold.
        self.tries_unknown |= written.is_err();
        // Also after a failed write: some entries may have changed.
        self.tries_written()?;
        written
    }

    /// After any write to the tries (done or failed half way): the program stops using
    /// what it cached from earlier reads of them.
    fn tries_written(&mut self) -> Result<()> {
        let gen = self.dec_gen_now()?;
        self.note_gen(gen);
        self.dec_gen
            .set(0, gen.wrapping_add(1), 0)
            .context("bumping the decision generation")?;
        self.gen_seen = Some(gen.wrapping_add(1));
        Ok(())
    }

    fn dec_gen_now(&self) -> Result<u64> {
        self.dec_gen
            .get(&0, 0)
            .context("reading the decision generation")
    }

    /// Notes whether `DIR_DEC_GEN` moved since this process last left it.
    fn note_gen(&mut self, gen: u64) {
        if self.gen_seen.is_some_and(|g| g != gen) {
            self.tries_unknown = true;
        }
    }

    /// Before /16 slots are set from a table (`from` says where it came from): whether
    /// that table is what the tries hold, so that slots may be set from it. A table read
    /// from the kernel is; this process's own is while nothing else wrote the tries since
    /// it last knew them (and it never knew them: as if something had).
    pub fn front16_source(&mut self, from: TableSource) -> Result<bool> {
        let gen = self.dec_gen_now()?;
        match from {
            TableSource::Kernel => {
                self.tries_unknown = false;
                self.gen_seen = Some(gen);
            }
            TableSource::Own if self.gen_seen.is_none() => self.tries_unknown = true,
            TableSource::Own => self.note_gen(gen),
        }
        Ok(!self.tries_unknown)
    }

    fn write_decisions(&mut self, change: DecisionChange<'_>) -> Result<usize> {
        let DecisionChange {
            service,
            put,
            delete,
        } = change;
        let t = self.active_table()?;
        let mut store = self.store(t)?;
        let fresh = store.missing(put.iter().map(|(_, d)| d));
        if store.next as usize + fresh.len() > self.choice_limit as usize {
            self.compact_with(service, put, delete, usize::MAX)?;
            return Ok(put.len());
        }
        self.store_choices(&mut store, &fresh)?;
        let (put, delete) = update_order(put, delete);
        let put: Vec<(u32, &IpNet, DecisionRef)> = put
            .iter()
            .map(|(p, d)| (service, p, store.reference(d)))
            .collect();
        self.put_all(&put)?;
        for net in delete {
            self.delete(service, net)?;
        }
        Ok(put.len())
    }

    /// Moves every entry onto the other half of `DIR_CHOICES`, each decision stored there
    /// once (what running out of ids does; the bench times it at full scale). Returns the
    /// number of entries rewritten.
    pub fn compact(&mut self) -> Result<usize> {
        let moved = self.compact_with(0, &[], &[], usize::MAX);
        self.tries_unknown |= moved.is_err();
        self.tries_written()?;
        moved
    }

    /// A compaction killed after rewriting `entries` entries (tests: what a controller
    /// killed half way leaves): the decisions stored in the other half, that many entries
    /// moved onto it, no flip.
    pub fn compact_cut_short(&mut self, entries: usize) -> Result<usize> {
        let moved = self.compact_with(0, &[], &[], entries);
        self.tries_written()?;
        moved
    }

    /// When an update needs more ids than the half in use has free: every entry, with the
    /// update applied, rewritten in place onto the other half, where each decision is
    /// stored once again; then the flip. Entries are rewritten, never added beside a copy,
    /// so the tries never hold two tables (kernel memory stays that of one). Rewriting an
    /// entry onto a copy of its decision changes no answer, so only the update's own
    /// entries need `update_order`; the rest go in any order.
    fn compact_with(
        &mut self,
        service: u32,
        put: &Entries,
        delete: &[IpNet],
        stop_after: usize,
    ) -> Result<usize> {
        let from = self.active_table()?;
        let to = 1 - from;
        let refs = self.references()?;
        let contents = self.contents(refs.iter().map(|(_, _, r)| r.id))?;
        // A compaction cut short (a killed controller) leaves entries on the target half:
        // their ids are kept as they are, and new ones start above them.
        let mut store = Store {
            half: to,
            ids: HashMap2::new(),
            next: 1,
        };
        for (_, _, r) in &refs {
            if let Some(id) =
                r.id.checked_sub(choice_index(to, 0))
                    .filter(|&i| i > 0 && i < MAX_CHOICES)
            {
                store.ids.insert(contents[&r.id], id);
                store.next = store.next.max(id + 1);
            }
        }
        let mut table: BTreeMap<(u32, IpNet), Decision> = refs
            .iter()
            .map(|(s, p, r)| ((*s, *p), contents[&r.id]))
            .collect();
        let gone: Vec<IpNet> = delete
            .iter()
            .filter(|p| table.remove(&(service, **p)).is_some())
            .copied()
            .collect();
        for (p, d) in put {
            table.insert((service, *p), stored(d));
        }
        let scopes: HashMap2<(u32, IpNet), u8> = refs
            .iter()
            .map(|(s, p, r)| ((*s, *p), r.scope))
            .chain(put.iter().map(|(p, d)| ((service, *p), d.prefix_len)))
            .collect();
        let fresh = store.missing(table.values());
        if store.next as usize + fresh.len() > self.choice_limit as usize {
            bail!(
                "{} distinct decisions, more than the kernel stores ({})",
                store.ids.len() + fresh.len(),
                self.choice_limit - 1
            );
        }
        self.store_choices(&mut store, &fresh)?;
        // Per service, its entries as one update: the updated service's in its safe
        // order with its deletions, every other one a plain move.
        let mut by_service: BTreeMap<u32, Vec<(IpNet, Decision)>> = BTreeMap::new();
        for ((s, p), d) in &table {
            by_service.entry(*s).or_default().push((
                *p,
                Decision {
                    prefix_len: scopes[&(*s, *p)],
                    ..*d
                },
            ));
        }
        let mut moves = Vec::with_capacity(table.len());
        let mut deletions = Vec::new();
        for (s, entries) in &by_service {
            let none: &[IpNet] = &[];
            let (ordered, del) = update_order(entries, if *s == service { &gone } else { none });
            moves.extend(ordered.iter().map(|(p, d)| (*s, p, store.reference(d))));
            deletions.extend(del.iter().map(|p| (*s, *p)));
        }
        if !by_service.contains_key(&service) {
            deletions.extend(update_order(&[], &gone).1.iter().map(|p| (service, *p)));
        }
        if stop_after < moves.len() {
            self.put_all(&moves[..stop_after])?;
            return Ok(stop_after);
        }
        self.put_all(&moves)?;
        for (s, net) in &deletions {
            self.delete(*s, net)?;
        }
        let mut c = self.switch()?;
        c.active_table = to as u32;
        // The half left behind is referenced by no entry now; it is written again only at
        // the next compaction, from id 1.
        c.next_choice[from] = 1;
        self.set_switch(c)
            .context("switching decision ids to the other half")?;
        // A query that read an entry just before it moved may still be reading the old
        // half; programs run for microseconds, so this pause outlasts any of them before
        // a later compaction can write that half again.
        std::thread::sleep(std::time::Duration::from_millis(20));
        Ok(moves.len())
    }

    /// What half `t` stores: every id below its `next_choice` by content.
    fn store(&self, t: usize) -> Result<Store> {
        let next = self.switch()?.next_choice[t].clamp(1, MAX_CHOICES);
        let mut ids = HashMap2::with_capacity(next as usize);
        for id in 1..next {
            let d = self
                .choices
                .get(&choice_index(t, id), 0)
                .with_context(|| format!("reading stored decision {id}"))?;
            ids.entry(d).or_insert(id);
        }
        Ok(Store { half: t, ids, next })
    }

    /// Writes decisions `fresh` (not stored yet) at the next free ids of the store's half,
    /// then moves its `next_choice` past them. Ids at or above it are referenced by no
    /// entry, so writing them changes no answer.
    fn store_choices(&mut self, store: &mut Store, fresh: &[Decision]) -> Result<()> {
        if fresh.is_empty() {
            return Ok(());
        }
        let t = store.half;
        let first = store.next;
        let (mut keys, mut values) = (Vec::new(), Vec::new());
        for (i, d) in fresh.iter().enumerate() {
            let id = first + i as u32;
            keys.extend_from_slice(&choice_index(t, id).to_ne_bytes());
            values.extend_from_slice(pod_bytes(d));
            store.ids.insert(*d, id);
        }
        store.next = first + fresh.len() as u32;
        match batch(
            BPF_MAP_UPDATE_BATCH,
            &self.batch_choices,
            &keys,
            Some(&values),
            fresh.len() as u32,
        ) {
            Ok(()) => {}
            Err(e) if batch_unsupported(&e) => {
                for (i, d) in fresh.iter().enumerate() {
                    self.choices
                        .set(choice_index(t, first + i as u32), *d, 0)
                        .context("storing a decision")?;
                }
            }
            Err(e) => return Err(e).context("storing decisions"),
        }
        let mut c = self.switch()?;
        c.next_choice[t] = store.next;
        self.set_switch(c)
    }

    /// Removes the decisions whose service `which` selects. The two families' tries are
    /// emptied side by side (each has a lock of its own in the kernel).
    fn remove_decisions(&mut self, which: impl Fn(u32) -> bool) -> Result<()> {
        let removed = self.remove_decisions_of(which);
        self.tries_unknown |= removed.is_err();
        removed
    }

    fn remove_decisions_of(&mut self, which: impl Fn(u32) -> bool) -> Result<()> {
        let keys4: Vec<_> = self
            .dec4
            .keys()
            .collect::<Result<Vec<_>, _>>()
            .context("listing IPv4 decisions")?
            .into_iter()
            .filter(|k| which(u32::from_be_bytes(k.data().service)))
            .collect();
        let keys6: Vec<_> = self
            .dec6
            .keys()
            .collect::<Result<Vec<_>, _>>()
            .context("listing IPv6 decisions")?
            .into_iter()
            .filter(|k| which(u32::from_be_bytes(k.data().service)))
            .collect();
        for k in &keys4 {
            if let Ok((service, net)) = entry_of4(k) {
                self.front16.clear(service, &net);
            }
        }
        self.front16.cleared();
        let (batched4, batched6) = side_by_side(
            || delete_batched(&self.batch4, &keys4),
            || delete_batched(&self.batch6, &keys6),
        );
        if !batched4? {
            for k in keys4 {
                self.dec4.remove(&k).context("removing an IPv4 decision")?;
            }
        }
        if !batched6? {
            for k in keys6 {
                self.dec6.remove(&k).context("removing an IPv6 decision")?;
            }
        }
        Ok(())
    }

    /// Writes entries, each family in the given order, by two threads when there are
    /// many: the kernel inserts into a trie one element at a time, but much of each insert
    /// (copying it in, allocating its node) happens outside the trie's lock, so two
    /// writers into the same trie finish in about 0.6 of the time. Each family is cut at
    /// an address into [`Halves`] that no entry of the other contains: one thread writes
    /// the lower halves, the other the upper ones, and the few entries across the cut
    /// follow once both are done. Every address's entries are then still written in the
    /// given order (see [`update_order`]), so answers stay old-or-new.
    fn put_all(&mut self, entries: &[Put<'_>]) -> Result<()> {
        for (service, net, _) in entries {
            self.front16.clear(*service, net);
        }
        self.front16.cleared();
        let (v4, v6): (Vec<_>, Vec<_>) = entries
            .iter()
            .partition(|(_, net, _)| matches!(net, IpNet::V4(_)));
        // A small update (`run`'s RTT and health changes): no threads.
        if entries.len() < SPLIT_FROM {
            put_family(&self.batch4, &v4)?;
            return put_family(&self.batch6, &v6);
        }
        let (h4, h6) = (Halves::of(&v4), Halves::of(&v6));
        let (lower, upper) = side_by_side(
            || {
                put_family(&self.batch4, &h4.lower)?;
                put_family(&self.batch6, &h6.lower)
            },
            // The other family first, so the two threads share a trie's lock for less
            // of the time.
            || {
                put_family(&self.batch6, &h6.upper)?;
                put_family(&self.batch4, &h4.upper)
            },
        );
        lower.and(upper)?;
        put_family(&self.batch4, &h4.across)?;
        put_family(&self.batch6, &h6.across)
    }

    fn delete(&mut self, service: u32, net: &IpNet) -> Result<()> {
        self.front16.clear(service, net);
        self.front16.cleared();
        let r = match key(service, net) {
            DecisionKey::V4(k) => self.dec4.remove(&k),
            DecisionKey::V6(k) => self.dec6.remove(&k),
        };
        match r {
            // A missing entry is already what a delete wants (LPM tries report it as a
            // syscall error).
            Ok(()) | Err(MapError::KeyNotFound | MapError::SyscallError(_)) => Ok(()),
            Err(e) => Err(e).with_context(|| format!("deleting the decision for {net}")),
        }
    }

    /// Sets `service`'s /16 front from `covers` (see `controller::front16::covers`, of the
    /// table just written; `from` says where that table came from): a /16 that one entry
    /// answers whole gets that entry's value as the trie holds it; any other is cleared. A
    /// slot already set is left as it is: no trie write has touched its /16 since it was
    /// set (each clears it first), so it still holds the trie's answer there. Call only
    /// after the table is in the tries. Returns the number of slots written.
    pub fn set_front16(
        &mut self,
        service: u32,
        covers: &[Option<Ipv4Net>],
        from: TableSource,
    ) -> Result<usize> {
        use director_common::maps::dec16_index;
        // Entries the caller's table lacks (a `route` command while `run` runs, a write
        // that failed half way) could split a /16 it calls whole: slots are only cleared
        // then, until a table read from the kernel.
        let fill = self.front16_source(from)?;
        if dec16_index(service, 0).is_none() {
            return Ok(0);
        }
        self.front16.take_touched(service);
        let mut values = HashMap2::new();
        let mut written = 0;
        for (net16, cover) in covers.iter().enumerate() {
            written +=
                usize::from(self.set_slot(service, net16 as u32, cover, fill, &mut values)?);
        }
        Ok(written)
    }

    /// [`Self::set_front16`] for the /16s this process's writes cleared since: the only
    /// ones an update can have changed. `cover_of` gives a slot's cover (see
    /// `controller::front16::cover_of`).
    pub fn set_front16_touched(
        &mut self,
        service: u32,
        cover_of: impl Fn(u32) -> Option<Ipv4Net>,
        from: TableSource,
    ) -> Result<usize> {
        let fill = self.front16_source(from)?;
        let mut values = HashMap2::new();
        let mut written = 0;
        for net16 in self.front16.take_touched(service) {
            let cover = cover_of(net16);
            written += usize::from(self.set_slot(service, net16, &cover, fill, &mut values)?);
        }
        Ok(written)
    }

    /// Sets one slot from its cover (cleared where it has none); whether it was written.
    /// `values` keeps the trie values read, by cover.
    fn set_slot(
        &mut self,
        service: u32,
        net16: u32,
        cover: &Option<Ipv4Net>,
        fill: bool,
        values: &mut HashMap2<Ipv4Net, u64>,
    ) -> Result<bool> {
        let now = self.front16.get(service, net16);
        let want = match cover {
            None => 0,
            Some(_) if now != 0 || !fill => return Ok(false),
            Some(n) => match values.get(n) {
                Some(w) => *w,
                None => {
                    let w = self.trie_value(service, n)?;
                    values.insert(*n, w);
                    w
                }
            },
        };
        if now == want {
            return Ok(false);
        }
        self.front16.set(service, net16, want);
        Ok(true)
    }

    /// The trie's value for the entry `n` of `service`, as a `DIR_DEC16` word (0: none).
    fn trie_value(&self, service: u32, n: &Ipv4Net) -> Result<u64> {
        let net = IpNet::V4(*n);
        let DecisionKey::V4(k) = key(service, &net) else {
            return Ok(0);
        };
        match self.dec4.get(&k, 0) {
            // The longest entry of at most `n`'s length over it: `n` itself, as the table
            // was just written.
            Ok(r) => Ok(r.to_word()),
            Err(MapError::KeyNotFound) => Ok(0),
            Err(e) => Err(e).with_context(|| format!("reading the decision for {n}")),
        }
    }

    /// `service`'s /16 front as words (tests and the bench).
    pub fn front16_word(&self, service: u32, net16: u32) -> u64 {
        self.front16.get(service, net16)
    }

    /// How many of `service`'s /16 slots are set (0 for a service without a lane).
    pub fn front16_slots(&self, service: u32) -> usize {
        (0..DEC16_SLOTS)
            .filter(|&n| self.front16.get(service, n) != 0)
            .count()
    }

    // --- the edge's own addresses and interfaces -----------------------------------------

    /// Every address queries may be sent to, with where it came from (`LOCAL_HOST`,
    /// `LOCAL_CONFIGURED` bits).
    pub fn local_addresses(&self) -> Result<Vec<(IpAddr, u32)>> {
        let mut out = Vec::new();
        for kv in self.local.iter() {
            let (k, flags) = kv.context("reading the local address table")?;
            out.push((local_addr(k), flags));
        }
        out.sort();
        Ok(out)
    }

    /// Makes the host's addresses exactly `now`: new ones are added first (queries to them
    /// are answered from then on), then those gone lose their host mark (and are removed
    /// unless also configured). Returns whether anything changed.
    pub fn set_host_addresses(&mut self, now: &[IpAddr]) -> Result<bool> {
        let have = self.local_addresses()?;
        let mut changed = false;
        for a in now {
            let flags = have.iter().find(|(h, _)| h == a).map_or(0, |(_, f)| *f);
            if flags & LOCAL_HOST == 0 {
                self.put_local(*a, flags | LOCAL_HOST)?;
                changed = true;
            }
        }
        for (a, flags) in have {
            if flags & LOCAL_HOST != 0 && !now.contains(&a) {
                self.put_local(a, flags & !LOCAL_HOST)?;
                changed = true;
            }
        }
        // Always compared: a program loaded over older maps starts with empty slots.
        self.sync_front()?;
        Ok(changed)
    }

    /// Adds (`on`) or removes an address the operator configured; the host's own stay.
    pub fn set_configured_address(&mut self, a: IpAddr, on: bool) -> Result<()> {
        let flags = self
            .local_addresses()?
            .into_iter()
            .find(|(h, _)| *h == a)
            .map_or(0, |(_, f)| f);
        let flags = if on {
            flags | LOCAL_CONFIGURED
        } else {
            flags & !LOCAL_CONFIGURED
        };
        self.put_local(a, flags)?;
        self.sync_front()
    }

    /// Brings the program's front slots (`DIR_LOCAL_SLOTS`, `DIR_NAME_SLOTS`) in line with
    /// the tables they front (`DIR_LOCAL`, `DIR_NAMES`) when they differ: the copies not in
    /// use are rewritten whole, then `DIR_FRONT` flips to them. An address or name added
    /// is answered once the flip is done; one removed is refused from then on. Queries
    /// read one copy or the other, never a slot being written: the copy rewritten was last
    /// read before the previous flip, at least `FRONT_GRACE` ago. Also makes sure every
    /// name's service has it in `DIR_SERVICE_NAMES` (maps pinned by an older build lack it).
    fn sync_front(&mut self) -> Result<()> {
        let mut keys: Vec<[u8; 16]> = self
            .local
            .keys()
            .collect::<Result<_, _>>()
            .context("reading the local address table")?;
        keys.sort_unstable();
        let mut names: Vec<(u64, NameEntry)> = self
            .names
            .iter()
            .collect::<Result<_, _>>()
            .context("reading the name table")?;
        names.sort_unstable_by_key(|(h, _)| *h);
        for (_, e) in &names {
            let have = self
                .service_names
                .get(&e.service, 0)
                .context("reading the service names")?;
            if have != *e {
                self.service_names
                    .set(e.service, *e, 0)
                    .context("writing the service names")?;
            }
        }
        let want_local = local_slots(&keys);
        let want_names = name_slots(&names);
        let sw = self.front.get(&0, 0).context("reading the front switch")?;
        let active = sw.active & 1;
        if self.front_is(active, &want_local, &want_names)? {
            return Ok(());
        }
        let since = monotonic_ns().saturating_sub(sw.published_ns);
        if since < FRONT_GRACE.as_nanos() as u64 {
            std::thread::sleep(FRONT_GRACE - std::time::Duration::from_nanos(since));
        }
        let spare = 1 - active;
        write_copy(
            &self.batch_local_slots,
            &mut self.local_slots,
            spare * LOCAL_SLOTS,
            &want_local,
        )
        .context("writing the local address slots")?;
        write_copy(
            &self.batch_name_slots,
            &mut self.name_slots,
            spare * NAME_SLOTS,
            &want_names,
        )
        .context("writing the name slots")?;
        let flipped = FrontSwitch {
            active: spare,
            _pad: 0,
            published_ns: monotonic_ns(),
        };
        self.front
            .set(0, flipped, 0)
            .context("writing the front switch")
    }

    /// Whether copy `c` of the front slots holds exactly these.
    fn front_is(&self, c: u32, local: &[LocalSlot], names: &[NameSlot]) -> Result<bool> {
        Ok(copy_is(&self.local_slots, c * LOCAL_SLOTS, local)
            .context("reading the local address slots")?
            && copy_is(&self.name_slots, c * NAME_SLOTS, names)
                .context("reading the name slots")?)
    }

    fn put_local(&mut self, a: IpAddr, flags: u32) -> Result<()> {
        let key = local_key(a);
        if flags == 0 {
            return match self.local.remove(&key) {
                Ok(()) | Err(MapError::KeyNotFound) => Ok(()),
                Err(e) => Err(e).with_context(|| format!("removing local address {a}")),
            };
        }
        self.local
            .insert(key, flags, 0)
            .with_context(|| format!("writing local address {a} (at most {MAX_LOCAL})"))
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

    /// Records the MAC of an interface director is attached to: queries arriving there
    /// must be sent to it.
    pub fn put_iface(&mut self, ifindex: u32, mac: [u8; 6]) -> Result<()> {
        if ifindex >= MAX_IFACES {
            bail!("interface index {ifindex} is beyond what director records ({MAX_IFACES})");
        }
        let v = Iface {
            mac,
            attached: 1,
            _pad: 0,
        };
        self.ifaces
            .set(ifindex, v, 0)
            .context("writing the interface table")
    }

    pub fn remove_iface(&mut self, ifindex: u32) -> Result<()> {
        if ifindex >= MAX_IFACES {
            return Ok(());
        }
        self.ifaces
            .set(ifindex, Iface::default(), 0)
            .context("writing the interface table")
    }

    // --- counters ------------------------------------------------------------------------

    /// Every verdict counter, summed over CPUs, in `counters::ALL` order. `Answered` is the
    /// sum of every service id's answers: the program counts an answer once, for its
    /// service, which saves each answer a counter update (ids are never reset, so the sum
    /// only grows).
    pub fn counters(&self) -> Result<Vec<(Reason, u64)>> {
        counters::ALL
            .iter()
            .map(|&r| {
                let n = if r == Reason::Answered {
                    self.all_service_answers()?
                } else {
                    per_cpu_sum(&self.counters, r as u32)?
                };
                Ok((r, n))
            })
            .collect()
    }

    /// Answers of all service ids, summed over CPUs: one batched read of the whole array
    /// (key by key where the kernel takes no batches).
    fn all_service_answers(&self) -> Result<u64> {
        match per_cpu_total(&self.batch_service_stats, MAX_SERVICES) {
            Ok(n) => Ok(n),
            Err(e) if batch_unsupported(&e) => (0..MAX_SERVICES)
                .map(|id| per_cpu_sum(&self.service_stats, id))
                .sum(),
            Err(e) => Err(e).context("reading the services' answer counters"),
        }
    }

    /// Answers sent for a service, summed over CPUs.
    pub fn service_answers(&self, id: u32) -> Result<u64> {
        per_cpu_sum(&self.service_stats, id)
    }

    /// Answers that sent clients to a server (its address first).
    pub fn server_answers(&self, id: u16) -> Result<u64> {
        per_cpu_sum(&self.server_stats, u32::from(id))
    }
}

fn per_cpu_sum(map: &PerCpuArray<MapData, u64>, key: u32) -> Result<u64> {
    Ok(map
        .get(&key, 0)
        .with_context(|| format!("reading counter {key}"))?
        .iter()
        .sum())
}

enum DecisionKey {
    V4(Key<DecisionKeyV4>),
    V6(Key<DecisionKeyV6>),
}

/// The decisions a half of `DIR_CHOICES` stores, by content (scope cleared), and its next
/// free id.
struct Store {
    half: usize,
    ids: HashMap2<Decision, u32>,
    next: u32,
}

impl Store {
    /// The distinct decisions of `ds` not stored yet, in first-seen order.
    fn missing<'a>(&self, ds: impl Iterator<Item = &'a Decision>) -> Vec<Decision> {
        let mut seen = HashSet2::new();
        ds.map(stored)
            .filter(|d| !self.ids.contains_key(d) && seen.insert(*d))
            .collect()
    }

    /// The trie value for `d`, which must be stored.
    fn reference(&self, d: &Decision) -> DecisionRef {
        DecisionRef {
            // Stored by `missing` + `store_choices` before any entry refers to it; the
            // empty decision (id 0, the reserved index) if it were not.
            id: choice_index(self.half, self.ids.get(&stored(d)).copied().unwrap_or(0)),
            scope: d.prefix_len,
            _pad: [0; 3],
        }
    }
}

/// How long a copy of the front slots stays untouched after queries stop being sent to it:
/// programs run for microseconds, so none still reads it by then.
const FRONT_GRACE: std::time::Duration = std::time::Duration::from_millis(20);

/// CLOCK_MONOTONIC in ns: one clock for every process that flips `DIR_FRONT`, and the one
/// the kernel stamps flows with.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The `DIR_LOCAL_SLOTS` copy for `keys` (sorted, so the same addresses always give the
/// same slots): each address in its slot, the first come keeping it; a slot claimed
/// again is marked so the program asks `DIR_LOCAL` for the others.
fn local_slots(keys: &[[u8; 16]]) -> Vec<LocalSlot> {
    let mut slots = vec![LocalSlot::default(); LOCAL_SLOTS as usize];
    for k in keys {
        let words = director_common::peers::local_words(k);
        let slot = &mut slots[director_common::peers::local_slot(words) as usize];
        if slot.flags & SLOT_USED == 0 {
            slot.key = words;
            slot.flags |= SLOT_USED;
        } else {
            slot.flags |= SLOT_OVERFLOW;
        }
    }
    slots
}

/// The `DIR_NAME_SLOTS` copy for `names` (sorted by hash): as `local_slots`.
fn name_slots(names: &[(u64, NameEntry)]) -> Vec<NameSlot> {
    let mut slots = vec![NameSlot::default(); NAME_SLOTS as usize];
    for (hash, e) in names {
        let slot = &mut slots[name::slot(*hash) as usize];
        if slot.flags & SLOT_USED == 0 {
            slot.hash = *hash;
            slot.service = e.service;
            slot.flags |= SLOT_USED;
        } else {
            slot.flags |= SLOT_OVERFLOW;
        }
    }
    slots
}

/// Whether an array holds `values` at consecutive indexes from `first`.
fn copy_is<T: Copy + PartialEq + aya::Pod>(
    map: &Array<MapData, T>,
    first: u32,
    values: &[T],
) -> Result<bool> {
    for (i, w) in values.iter().enumerate() {
        if map.get(&(first + i as u32), 0)? != *w {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Writes `values` at consecutive indexes of an array from `first`: one batch, or one by
/// one where the kernel takes no batch.
fn write_copy<T: Copy + aya::Pod>(
    batch_map: &MapData,
    map: &mut Array<MapData, T>,
    first: u32,
    values: &[T],
) -> Result<()> {
    let (mut k, mut v) = (Vec::new(), Vec::new());
    for (i, w) in values.iter().enumerate() {
        k.extend_from_slice(&(first + i as u32).to_ne_bytes());
        v.extend_from_slice(pod_bytes(w));
    }
    match batch(
        BPF_MAP_UPDATE_BATCH,
        batch_map,
        &k,
        Some(&v),
        values.len() as u32,
    ) {
        Ok(()) => Ok(()),
        Err(e) if batch_unsupported(&e) => {
            for (i, w) in values.iter().enumerate() {
                map.set(first + i as u32, *w, 0)?;
            }
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// The `DIR_LOCAL` key of an address (IPv4 mapped into IPv6).
fn local_key(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v4) => director_common::peers::local_key_v4(v4.octets()),
        IpAddr::V6(v6) => v6.octets(),
    }
}

fn local_addr(k: [u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(k);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// The service and client prefix of an IPv4 trie key.
fn entry_of4(k: &Key<DecisionKeyV4>) -> Result<(u32, IpNet)> {
    let len = (k.prefix_len() - SERVICE_BITS) as u8;
    let d = k.data();
    let net = IpNet::new(Ipv4Addr::from(d.addr).into(), len)?;
    Ok((u32::from_be_bytes(d.service), net))
}

/// Where half `t`'s decision `id` sits in `DIR_CHOICES`.
fn choice_index(t: usize, id: u32) -> u32 {
    t as u32 * MAX_CHOICES + id
}

/// A decision as the kernel stores it: the scope belongs to the entry, not the decision.
fn stored(d: &Decision) -> Decision {
    Decision {
        prefix_len: 0,
        ..*d
    }
}

/// The trie key of a service's decision for `net`: the service id, always matched in full,
/// then the client prefix.
fn key(service: u32, net: &IpNet) -> DecisionKey {
    let bits = SERVICE_BITS + u32::from(net.prefix_len());
    let service = service.to_be_bytes();
    match net {
        IpNet::V4(n) => DecisionKey::V4(Key::new(
            bits,
            DecisionKeyV4 {
                service,
                addr: n.network().octets(),
            },
        )),
        IpNet::V6(n) => DecisionKey::V6(Key::new(
            bits,
            DecisionKeyV6 {
                service,
                addr: n.network().octets(),
            },
        )),
    }
}

/// The order an in-place update writes in: each put before the puts of the prefixes that
/// cover it (more specific first), each deletion before the deletions of the prefixes it
/// covers (less specific first). Then every address gets its old answer or its new one
/// after every single write. Only the entries covering one address matter to it, and they
/// are nested, so for it the puts go from its most specific prefix to its least, then the
/// deletions from least to most. During the puts, an address whose most specific entry
/// already holds its new value has every more specific new entry written (they went
/// first), so that entry is its new answer; one whose most specific entry is not rewritten
/// yet still has all old entries, so that is its old answer. During the deletions every new
/// entry is in; an address's most specific entry is either new, or an old one going away
/// whose more specific old entries are all still there (they go later), so it is the old
/// answer.
///
/// Within that, entries go in address order (puts by their last address, so a prefix
/// follows what it covers; deletions by their first), one family after the other: the
/// kernel's trie inserts twice as fast along addresses as in a length-sorted order, which
/// jumps across the whole trie, and a batch holds one family. Puts that come in table
/// order (a diff of tables: each prefix before those it covers) are turned around with a
/// stack in one pass, not sorted: a first start puts a whole table.
pub fn update_order<'a>(
    put: &'a [(IpNet, Decision)],
    delete: &'a [IpNet],
) -> (Vec<&'a (IpNet, Decision)>, Vec<&'a IpNet>) {
    let family = |p: &IpNet| if p.addr().is_ipv4() { 4u8 } else { 6 };
    let first = |p: &IpNet| (family(p), span(p).0);
    let last = |p: &IpNet| (family(p), span(p).1);
    let mut put: Vec<&(IpNet, Decision)> = put.iter().collect();
    if put.is_sorted_by(|a, b| (first(&a.0), a.0.prefix_len()) < (first(&b.0), b.0.prefix_len())) {
        put = covered_first(put);
    } else {
        put.sort_by_key(|(p, _)| (last(p), std::cmp::Reverse(p.prefix_len())));
    }
    let mut delete: Vec<&IpNet> = delete.iter().collect();
    delete.sort_by_key(|p| (first(p), p.prefix_len()));
    (put, delete)
}

/// Entries in table order (by first address, then length; each prefix once) reordered so that each
/// comes after every entry it covers, siblings in address order: the order
/// [`update_order`] sorts puts into. An entry leaves the stack of open prefixes when the
/// first entry outside it arrives, by which time everything it covers has left.
fn covered_first<T>(table_order: Vec<&(IpNet, T)>) -> Vec<&(IpNet, T)> {
    let mut out = Vec::with_capacity(table_order.len());
    let mut open: Vec<&(IpNet, T)> = Vec::new();
    for e in table_order {
        while let Some(top) = open.pop_if(|top| !top.0.contains(&e.0)) {
            out.push(top);
        }
        open.push(e);
    }
    out.extend(open.into_iter().rev());
    out
}

/// A prefix's first and last address, as numbers.
fn span(p: &IpNet) -> (u128, u128) {
    match p {
        IpNet::V4(n) => (
            u128::from(u32::from(n.network())),
            u128::from(u32::from(n.broadcast())),
        ),
        IpNet::V6(n) => (u128::from(n.network()), u128::from(n.broadcast())),
    }
}

/// From this many entries, [`Maps::put_all`] writes with two threads.
const SPLIT_FROM: usize = 8192;

/// One family's entries (in write order) cut at an address `cut`: those wholly below it,
/// those from it on, and those across it (the few prefixes holding `cut` and addresses
/// below it, at most one per length and service). No entry below contains one from
/// `cut` on, nor the other way round, so the two need no order between them; an entry
/// across may contain entries of both, so it goes after both.
#[derive(Debug, Default, PartialEq)]
struct Halves<'a> {
    lower: Vec<&'a Put<'a>>,
    upper: Vec<&'a Put<'a>>,
    across: Vec<&'a Put<'a>>,
}

/// An entry to write: service, prefix, value.
type Put<'a> = (u32, &'a IpNet, DecisionRef);

impl<'a> Halves<'a> {
    /// Cut at the median first address, so the halves are about the same size.
    fn of(entries: &[&'a Put<'a>]) -> Self {
        let mut h = Self::default();
        if entries.is_empty() {
            return h;
        }
        let mut firsts: Vec<u128> = entries.iter().map(|e| span(e.1).0).collect();
        let cut = *firsts.select_nth_unstable(entries.len() / 2).1;
        for e in entries {
            let (first, last) = span(e.1);
            if last < cut {
                h.lower.push(*e);
            } else if first >= cut {
                h.upper.push(*e);
            } else {
                h.across.push(*e);
            }
        }
        h
    }
}

/// Runs `a` here and `b` on a second thread; both results.
fn side_by_side<A: Send, B: Send>(
    a: impl FnOnce() -> A + Send,
    b: impl FnOnce() -> B + Send,
) -> (A, B) {
    std::thread::scope(|s| {
        let other = s.spawn(b);
        let first = a();
        let second = other
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e));
        (first, second)
    })
}

/// Writes one family's entries into its trie, in order: batched (BPF_MAP_UPDATE_BATCH, one
/// system call per chunk; the kernel still inserts them one at a time, in order), and one
/// by one where the kernel takes no batch.
fn put_family(map: &MapData, entries: &[&(u32, &IpNet, DecisionRef)]) -> Result<()> {
    const CHUNK: usize = 4096;
    for chunk in entries.chunks(CHUNK) {
        let (mut keys, mut values) = (Vec::new(), Vec::new());
        for (service, net, r) in chunk {
            match key(*service, net) {
                DecisionKey::V4(k) => keys.extend_from_slice(pod_bytes(&k)),
                DecisionKey::V6(k) => keys.extend_from_slice(pod_bytes(&k)),
            }
            values.extend_from_slice(pod_bytes(r));
        }
        let failed = |e: std::io::Error, n: usize, first: &IpNet| {
            anyhow::Error::from(e).context(format!("writing {n} decisions from {first}"))
        };
        match batch(
            BPF_MAP_UPDATE_BATCH,
            map,
            &keys,
            Some(&values),
            chunk.len() as u32,
        ) {
            Ok(()) => {}
            Err(e) if batch_unsupported(&e) => {
                let (k, v) = (keys.len() / chunk.len(), values.len() / chunk.len());
                for (i, (_, net, _)) in chunk.iter().enumerate() {
                    update_one(map, &keys[i * k..][..k], &values[i * v..][..v])
                        .map_err(|e| failed(e, 1, net))?;
                }
            }
            Err(e) => return Err(failed(e, chunk.len(), chunk[0].1)),
        }
    }
    Ok(())
}

/// One BPF_MAP_UPDATE_ELEM (any flags: insert or replace).
fn update_one(map: &MapData, key: &[u8], value: &[u8]) -> std::io::Result<()> {
    use std::os::fd::{AsFd, AsRawFd};
    /// The map-element member of `union bpf_attr`.
    #[repr(C)]
    struct ElemAttr {
        map_fd: u32,
        _pad: u32,
        key: u64,
        value: u64,
        flags: u64,
    }
    let mut attr = ElemAttr {
        map_fd: map.fd().as_fd().as_raw_fd() as u32,
        _pad: 0,
        key: key.as_ptr() as u64,
        value: value.as_ptr() as u64,
        flags: 0,
    };
    // SAFETY: key and value hold one element of the map's key and value sizes and
    // outlive the call.
    unsafe { sys_bpf(BPF_MAP_UPDATE_ELEM, &mut attr) }
}

/// bpf(2) with `attr`, a prefix of `union bpf_attr` for `cmd`.
///
/// # Safety
/// Every pointer in `attr` must be valid for what `cmd` reads and writes through it.
unsafe fn sys_bpf<A>(cmd: libc::c_long, attr: &mut A) -> std::io::Result<()> {
    // SAFETY: attr is `size_of::<A>()` bytes the kernel may read and write back; the
    // pointers in it are the caller's to vouch for.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *mut A, size_of::<A>()) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The bytes of a plain-old-data value (map keys and values are `#[repr(C)]`).
fn pod_bytes<T: Copy>(v: &T) -> &[u8] {
    // SAFETY: T is a repr(C) map key or value without padding bytes that could be
    // uninitialised (the layouts spell their padding out), read as bytes for its size.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }
}

const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
const BPF_MAP_UPDATE_BATCH: libc::c_long = 26;
const BPF_MAP_DELETE_BATCH: libc::c_long = 27;

/// Deletes keys (all present) in batches; false when the kernel takes no batch (then
/// nothing was deleted).
fn delete_batched<K: Copy>(map: &MapData, keys: &[K]) -> Result<bool> {
    for (i, chunk) in keys.chunks(4096).enumerate() {
        let bytes: Vec<u8> = chunk.iter().flat_map(|k| pod_bytes(k).to_vec()).collect();
        match batch(BPF_MAP_DELETE_BATCH, map, &bytes, None, chunk.len() as u32) {
            Ok(()) => {}
            // Only the first call can find batches unsupported: nothing is deleted yet.
            Err(e) if i == 0 && batch_unsupported(&e) => return Ok(false),
            Err(e) => return Err(e).context("deleting decisions"),
        }
    }
    Ok(true)
}

/// The `batch` member of `union bpf_attr`, for the BPF_MAP_*_BATCH commands.
#[repr(C)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// A batch command (`cmd`) over `count` keys (and values) laid out back to back.
fn batch(
    cmd: libc::c_long,
    map: &MapData,
    keys: &[u8],
    values: Option<&[u8]>,
    count: u32,
) -> std::io::Result<()> {
    use std::os::fd::{AsFd, AsRawFd};
    let mut attr = BatchAttr {
        in_batch: 0,
        out_batch: 0,
        keys: keys.as_ptr() as u64,
        values: values.map_or(0, |v| v.as_ptr() as u64),
        count,
        map_fd: map.fd().as_fd().as_raw_fd() as u32,
        elem_flags: 0,
        flags: 0,
    };
    // SAFETY: keys and values hold `count` elements of the map's key and value sizes and
    // outlive the call.
    unsafe { sys_bpf(cmd, &mut attr) }?;
    if attr.count != count {
        return Err(std::io::Error::other(format!(
            "the kernel took {} of {count} decisions",
            attr.count
        )));
    }
    Ok(())
}

/// The sum of every entry of a per-CPU array of `u64` with `len` entries over all CPUs,
/// read with BPF_MAP_LOOKUP_BATCH.
fn per_cpu_total(map: &MapData, len: u32) -> std::io::Result<u64> {
    use std::os::fd::{AsFd, AsRawFd};
    const CHUNK: u32 = 1024;
    let cpus = aya::util::nr_cpus().map_err(|(what, e)| std::io::Error::new(e.kind(), what))?;
    let mut keys = vec![0u32; CHUNK as usize];
    let mut values = vec![0u64; CHUNK as usize * cpus];
    let (mut cursor, mut next) = (0u32, 0u32);
    let (mut total, mut seen) = (0u64, 0u32);
    while seen < len {
        let mut attr = BatchAttr {
            // The first call starts at the beginning (no batch position yet).
            in_batch: if seen == 0 {
                0
            } else {
                &mut cursor as *mut u32 as u64
            },
            out_batch: &mut next as *mut u32 as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count: CHUNK,
            map_fd: map.fd().as_fd().as_raw_fd() as u32,
            elem_flags: 0,
            flags: 0,
        };
        // SAFETY: keys and values have room for CHUNK keys and CHUNK values of `cpus`
        // 8-byte slots each (a per-CPU value of u64 per possible CPU), and the batch
        // positions are u32 for an array; all outlive the call.
        let r = unsafe { sys_bpf(BPF_MAP_LOOKUP_BATCH, &mut attr) };
        let got = attr.count.min(CHUNK) as usize;
        total = values[..got * cpus]
            .iter()
            .fold(total, |t, v| t.wrapping_add(*v));
        seen += got as u32;
        match r {
            Ok(()) => cursor = next,
            // The end of the array: the last entries came with it.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => break,
            Err(e) => return Err(e),
        }
        if got == 0 {
            break;
        }
    }
    Ok(total)
}

/// Every entry of a decision trie: in batches (`batch` is the same map as `trie`), else
/// through aya's iterator.
fn read_trie<K: aya::Pod>(
    batch: &MapData,
    trie: &LpmTrie<MapData, K, DecisionRef>,
) -> Result<Vec<(Key<K>, DecisionRef)>> {
    match read_batched(batch)? {
        Some(all) => Ok(all),
        None => Ok(trie.iter().collect::<Result<_, _>>()?),
    }
}

/// Every key and value of `map`, read with BPF_MAP_LOOKUP_BATCH: a system call per
/// `CHUNK` entries, where an iterator makes two per entry (a restart's first sync and a
/// compaction read the whole table back). `None` where the kernel takes no batches for
/// it. Like any walk of a map, it must not race a writer (the caller holds the write
/// lock).
fn read_batched<K: aya::Pod, V: aya::Pod>(map: &MapData) -> std::io::Result<Option<Vec<(K, V)>>> {
    use std::os::fd::{AsFd, AsRawFd};
    const CHUNK: usize = 8192;
    let (ks, vs) = (size_of::<K>(), size_of::<V>());
    let mut keys = vec![0u8; CHUNK * ks];
    let mut values = vec![0u8; CHUNK * vs];
    // Where the next call goes on from: the kernel writes its position to `next`.
    let (mut cursor, mut next) = (vec![0u8; ks], vec![0u8; ks]);
    let mut all = Vec::new();
    let mut first = true;
    loop {
        let mut attr = BatchAttr {
            in_batch: if first { 0 } else { cursor.as_mut_ptr() as u64 },
            out_batch: next.as_mut_ptr() as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count: CHUNK as u32,
            map_fd: map.fd().as_fd().as_raw_fd() as u32,
            elem_flags: 0,
            flags: 0,
        };
        // SAFETY: keys and values have room for CHUNK keys and values of the map's sizes
        // (the caller's K and V), the positions for one key; all outlive the call.
        let r = unsafe { sys_bpf(BPF_MAP_LOOKUP_BATCH, &mut attr) };
        let got = (attr.count as usize).min(CHUNK);
        for i in 0..got {
            // SAFETY: the kernel wrote `got` keys and values back to back; K and V are
            // plain data of those sizes.
            all.push(unsafe {
                (
                    std::ptr::read_unaligned(keys[i * ks..].as_ptr().cast::<K>()),
                    std::ptr::read_unaligned(values[i * vs..].as_ptr().cast::<V>()),
                )
            });
        }
        match r {
            Ok(()) if got > 0 => {}
            // The end of the map: the last entries came with it.
            Ok(()) => return Ok(Some(all)),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(Some(all)),
            Err(e) if first && batch_unsupported(&e) => return Ok(None),
            Err(e) => return Err(e),
        }
        cursor.copy_from_slice(&next);
        first = false;
    }
}

/// Whether a batch call failed because the kernel or map takes no batches.
fn batch_unsupported(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        // 524: the kernel's own ENOTSUPP, which bpf(2) lets through.
        Some(libc::EINVAL | libc::EOPNOTSUPP | libc::ENOSYS | 524)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn a_load_reads_back_as_written_not_as_the_widened_f32() {
        assert_eq!(load_as_read(0.4), 0.4);
        assert_eq!(load_as_read(0.75), 0.75);
        assert_eq!(load_as_read(12.3), 12.3);
        assert_ne!(f64::from(0.4f32), 0.4, "the defect this guards against");
    }

    proptest! {
        #[test]
        fn a_load_keeps_its_f32_value(bits in any::<u32>()) {
            let l = f32::from_bits(bits);
            prop_assume!(l.is_finite());
            prop_assert_eq!(load_as_read(l) as f32, l);
        }
    }

    #[test]
    fn a_pin_set_of_another_version_is_named_as_such() {
        let dir = std::env::temp_dir().join(format!("director-pins-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = |dir: &Path| {
            open::<Array<MapData, u64>>(dir, MAP_DEC_GEN)
                .err()
                .map(|e| format!("{e:#}"))
                .unwrap_or_default()
        };
        let empty = missing(&dir);
        std::fs::write(dir.join(MAP_NAMES), b"").unwrap();
        let partial = missing(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            empty.starts_with("nothing is attached: no map DIR_DEC_GEN"),
            "{empty}"
        );
        assert!(partial.contains("another version of director"), "{partial}");
        assert!(partial.contains("DIR_DEC_GEN"), "{partial}");
    }

    fn lookup(t: &BTreeMap<IpNet, u16>, a: u32) -> Option<u16> {
        let host = IpNet::from(IpAddr::V4(a.into()));
        t.iter()
            .filter(|(p, _)| p.contains(&host))
            .max_by_key(|(p, _)| p.prefix_len())
            .map(|(_, v)| *v)
    }

    /// Every probed address (one per /16 of 10.0.0.0/8) answers in `t` as in `old` or
    /// as in `new`.
    fn old_or_new(
        t: &BTreeMap<IpNet, u16>,
        old: &BTreeMap<IpNet, u16>,
        new: &BTreeMap<IpNet, u16>,
    ) -> Result<(), TestCaseError> {
        for a in (0..256u32).map(|i| 0x0a00_0000 | (i << 16)) {
            let got = lookup(t, a);
            prop_assert!(
                got == lookup(old, a) || got == lookup(new, a),
                "{}: {got:?}",
                Ipv4Addr::from(a)
            );
        }
        Ok(())
    }

    fn arb_table() -> impl Strategy<Value = BTreeMap<IpNet, u16>> {
        proptest::collection::btree_map(
            (0u32..64, 0u8..=6).prop_map(|(a, len)| {
                let addr = Ipv4Addr::from(0x0a00_0000u32 | (a << 18));
                IpNet::V4(Ipv4Net::new(addr, 8 + len).unwrap().trunc())
            }),
            1u16..4,
            0..12,
        )
    }

    proptest! {
        /// Written one entry at a time in this order, every address answers with its old
        /// or its new decision after every write.
        #[test]
        fn each_write_leaves_old_or_new_answers(old in arb_table(), new in arb_table()) {
            let dec = |s: u16| {
                let mut d = Decision { count: 1, primary: 1, ..Default::default() };
                d.servers[0] = s;
                d
            };
            let put: Vec<(IpNet, Decision)> = new
                .iter()
                .filter(|(p, v)| old.get(p) != Some(v))
                .map(|(p, v)| (*p, dec(*v)))
                .collect();
            let delete: Vec<IpNet> = old.keys().filter(|p| !new.contains_key(p)).copied().collect();
            let (put, delete) = update_order(&put, &delete);
            let mut t = old.clone();
            let check = |t: &BTreeMap<IpNet, u16>| old_or_new(t, &old, &new);
            for (p, d) in put {
                t.insert(*p, d.servers[0]);
                check(&t)?;
            }
            for p in delete {
                t.remove(p);
                check(&t)?;
            }
            prop_assert_eq!(t, new);
        }

        /// Cut into halves written by two threads in any interleaving, then the entries
        /// across the cut: every address still answers old or new after every write, and
        /// each part keeps the order it was given.
        #[test]
        fn halves_written_side_by_side_leave_old_or_new_answers(
            old in arb_table(),
            new in arb_table(),
            turns in proptest::collection::vec(any::<bool>(), 0..40),
        ) {
            let nets: Vec<IpNet> = new
                .iter()
                .filter(|(p, v)| old.get(p) != Some(v))
                .map(|(p, _)| *p)
                .collect();
            let put: Vec<(IpNet, Decision)> = nets.iter().map(|p| (*p, Decision::default())).collect();
            let (put, _) = update_order(&put, &[]);
            let refs: Vec<(u32, &IpNet, DecisionRef)> = put
                .iter()
                .map(|(p, _)| (1, p, DecisionRef { id: u32::from(new[p]), scope: 0, _pad: [0; 3] }))
                .collect();
            let order: Vec<&(u32, &IpNet, DecisionRef)> = refs.iter().collect();
            let h = Halves::of(&order);
            let position = |e: &&(u32, &IpNet, DecisionRef)| order.iter().position(|o| std::ptr::eq(*o, *e));
            for part in [&h.lower, &h.upper, &h.across] {
                let at: Vec<_> = part.iter().map(position).collect();
                prop_assert!(at.is_sorted(), "a part out of the given order: {at:?}");
            }
            prop_assert_eq!(h.lower.len() + h.upper.len() + h.across.len(), order.len());
            // Old entries the new table drops are left in place: this checks the puts.
            let mut t = old.clone();
            let mut after = old.clone();
            after.extend(new.iter().map(|(p, v)| (*p, *v)));
            let check = |t: &BTreeMap<IpNet, u16>| old_or_new(t, &old, &after);
            let (mut lower, mut upper) = (h.lower.iter(), h.upper.iter());
            let mut turns = turns.into_iter();
            loop {
                let next = match turns.next() {
                    Some(true) => lower.next().or_else(|| upper.next()),
                    Some(false) => upper.next().or_else(|| lower.next()),
                    None => lower.next().or_else(|| upper.next()),
                };
                let Some((_, p, r)) = next else { break };
                t.insert(**p, r.id as u16);
                check(&t)?;
            }
            for (_, p, r) in &h.across {
                t.insert(**p, r.id as u16);
                check(&t)?;
            }
            prop_assert_eq!(t, after);
        }
    }

    proptest! {
        /// Puts in table order take the one-pass path; it gives the order the sort does.
        #[test]
        fn table_order_puts_are_ordered_as_sorted_ones(
            nets in proptest::collection::btree_set(
                (0u32..64, 0u8..=6, any::<bool>()).prop_map(|(a, len, six)| if six {
                    IpNet::V6(ipnet::Ipv6Net::new(Ipv6Addr::from(0x2001_0db8u128 << 96 | u128::from(a) << 80), 32 + len).unwrap().trunc())
                } else {
                    IpNet::V4(Ipv4Net::new(Ipv4Addr::from(0x0a00_0000u32 | (a << 18)), 8 + len).unwrap().trunc())
                }),
                0..40,
            ),
        ) {
            let mut table: Vec<(IpNet, Decision)> = nets.into_iter().map(|p| (p, Decision::default())).collect();
            table.sort_by_key(|(p, _)| (p.network(), p.prefix_len()));
            let (fast, _) = update_order(&table, &[]);
            let mut shuffled = table.clone();
            shuffled.reverse();
            let (sorted, _) = update_order(&shuffled, &[]);
            let names = |v: Vec<&(IpNet, Decision)>| v.iter().map(|e| e.0).collect::<Vec<_>>();
            prop_assert_eq!(names(fast), names(sorted));
        }
    }

    #[test]
    fn halves_cut_at_an_address_and_keep_what_spans_it_for_last() {
        let nets: Vec<IpNet> = [
            "0.0.0.0/0",
            "10.0.0.0/8",
            "10.0.0.0/24",
            "10.1.0.0/16",
            "10.2.0.0/16",
            "192.0.2.0/24",
        ]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
        let refs: Vec<(u32, &IpNet, DecisionRef)> = nets
            .iter()
            .map(|p| (1, p, DecisionRef::default()))
            .collect();
        let order: Vec<_> = refs.iter().collect();
        let h = Halves::of(&order);
        let names = |v: &[&(u32, &IpNet, DecisionRef)]| {
            v.iter().map(|e| e.1.to_string()).collect::<Vec<_>>()
        };
        // The cut is the median first address, 10.1.0.0.
        assert_eq!(names(&h.lower), ["10.0.0.0/24"]);
        assert_eq!(
            names(&h.upper),
            ["10.1.0.0/16", "10.2.0.0/16", "192.0.2.0/24"]
        );
        assert_eq!(names(&h.across), ["0.0.0.0/0", "10.0.0.0/8"]);
        assert_eq!(Halves::of(&[]), Halves::default());
    }
}
