//! A zone's signatures, made ahead where its key is (director-plan's `dnssec`): every
//! static RRset's RRSIG, the apex's DNSKEY, CDS and CDNSKEY sets, and the NSEC chain over
//! the zone's names (service names included), in one validity window. The listeners add
//! what a DO query's answer needs from here; nothing is signed while answering.

use std::collections::{BTreeMap, HashMap};

use anyhow::{anyhow, bail, Context, Result};
use director_plan::dnssec::{
    key::ZoneKey,
    nsec,
    sign::{self, Validity, Window},
    wire::{self, rtype},
};
use hickory_proto::rr::rdata::NULL;
use hickory_proto::rr::{Name, RData, Record, RecordType};
use hickory_proto::serialize::binary::{BinEncodable, BinEncoder};

pub use super::dnssec_config::DnssecConfig;

/// What a signed zone adds to its answers.
#[derive(Debug, Clone)]
pub struct Signed {
    pub window: Window,
    /// When the next window starts (Unix seconds): the zone is signed anew then.
    pub next_at: u64,
    /// Every RRSIG record by the owner (lower case) and type it covers.
    sigs: HashMap<(Name, RecordType), Vec<Record>>,
    /// The NSEC chain, for denials: by owner, and as the chain.
    nsec_at: HashMap<Name, Record>,
    chain: Vec<wire::Record>,
    /// The keys' tags, the signing one first.
    pub tags: Vec<u16>,
}

/// Unix seconds now.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// hickory's name as canonical wire form.
pub fn wire_name(n: &Name) -> Result<wire::Name> {
    let b = n
        .to_lowercase()
        .to_bytes()
        .map_err(|e| anyhow!("{n}: {e}"))?;
    wire::Name::from_wire(&b)
}

fn name_of(w: &wire::Name) -> Result<Name> {
    Name::from_ascii(w.text()).map_err(|e| anyhow!("{w}: {e}"))
}

/// A record's RDATA in canonical form (RFC 4034 §6.2): names in it lower case, whole.
fn canonical_rdata(r: &Record) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let name = |n: &Name, out: &mut Vec<u8>| -> Result<()> {
        out.extend_from_slice(wire_name(n)?.wire());
        Ok(())
    };
    match r.data() {
        Some(RData::NS(n)) => name(&n.0, &mut out)?,
        Some(RData::CNAME(n)) => name(&n.0, &mut out)?,
        Some(RData::MX(mx)) => {
            out.extend_from_slice(&mx.preference().to_be_bytes());
            name(mx.exchange(), &mut out)?;
        }
        Some(RData::SOA(soa)) => {
            name(soa.mname(), &mut out)?;
            name(soa.rname(), &mut out)?;
            for v in [
                soa.serial(),
                soa.refresh() as u32,
                soa.retry() as u32,
                soa.expire() as u32,
                soa.minimum(),
            ] {
                out.extend_from_slice(&v.to_be_bytes());
            }
        }
        Some(d) => {
            let mut e = BinEncoder::new(&mut out);
            d.emit(&mut e).map_err(|e| anyhow!("{}: {e}", r.name()))?;
        }
        None => bail!("{}: a record without data", r.name()),
    }
    Ok(out)
}

fn to_wire(r: &Record) -> Result<wire::Record> {
    Ok(wire::Record {
        owner: wire_name(r.name())?,
        rtype: u16::from(r.record_type()),
        ttl: r.ttl(),
        rdata: canonical_rdata(r)?,
    })
}

fn raw(owner: &Name, code: u16, ttl: u32, rdata: Vec<u8>) -> Record {
    Record::from_rdata(
        owner.clone(),
        ttl,
        RData::Unknown {
            code: RecordType::from(code),
            rdata: NULL::with(rdata),
        },
    )
}

/// The RRSIG record over `set` (hickory's records, one owner and type) by `key`.
fn rrsig_record(set: &[Record], key: &ZoneKey, origin: &wire::Name, w: Window) -> Result<Record> {
    let wires: Vec<wire::Record> = set.iter().map(to_wire).collect::<Result<_>>()?;
    let ttl = wires[0].ttl;
    let rdata = sign::rrsig(&wires, ttl, w, key, origin)?;
    Ok(raw(set[0].name(), rtype::RRSIG, ttl, rdata))
}

/// What signing needs of a zone: its origin and SOA, and its data, which gains the
/// apex's key sets (a view, so the zone's module and this one depend one way).
pub struct Apex<'a> {
    pub origin: &'a Name,
    pub soa: &'a Record,
    pub data: &'a mut BTreeMap<Name, Vec<Record>>,
}

impl Signed {
    /// Signs `zone` at `now` with `keys` (the first signs every set; all sign the apex's
    /// key sets, so a resolver that trusts either key during a roll finds a path), and adds
    /// the DNSKEY, CDS, CDNSKEY and NSEC records to its data. `services` are the zone's
    /// service names with the types they answer (A, AAAA, CNAME for a fallback).
    pub fn sign(
        zone: Apex<'_>,
        keys: &[ZoneKey],
        validity: Validity,
        now: u64,
        services: &BTreeMap<Name, Vec<RecordType>>,
    ) -> Result<Signed> {
        let Some(active) = keys.first() else {
            bail!("no key to sign with");
        };
        let origin = wire_name(zone.origin)?;
        let w = validity.window(now);
        let ttl = zone.soa.ttl();
        let apex = zone.origin.clone();
        let mut added = Vec::new();
        for k in keys {
            added.push(raw(&apex, rtype::DNSKEY, ttl, k.dnskey_rdata()));
            added.push(raw(&apex, rtype::CDNSKEY, ttl, k.dnskey_rdata()));
            added.push(raw(&apex, rtype::CDS, ttl, k.ds_rdata(&origin)));
        }
        zone.data.entry(apex.clone()).or_default().extend(added);

        // The chain: every owner of data and every service name, with its types.
        let mut names: BTreeMap<wire::Name, Vec<u16>> = BTreeMap::new();
        for (owner, set) in zone.data.iter() {
            let types = names.entry(wire_name(owner)?).or_default();
            types.extend(set.iter().map(|r| u16::from(r.record_type())));
        }
        for (n, types) in services {
            let e = names.entry(wire_name(n)?).or_default();
            e.extend(types.iter().map(|t| u16::from(*t)));
        }
        let negative = match zone.soa.data() {
            Some(RData::SOA(s)) => s.minimum().min(ttl),
            _ => ttl,
        };
        let chain = nsec::chain(&names, negative);
        let mut nsec_at = HashMap::new();
        for r in &chain {
            let owner = name_of(&r.owner)?;
            nsec_at.insert(
                owner.clone(),
                raw(&owner, rtype::NSEC, r.ttl, r.rdata.clone()),
            );
        }

        let mut sigs: HashMap<(Name, RecordType), Vec<Record>> = HashMap::new();
        for (owner, set) in zone.data.iter() {
            let mut by_type: BTreeMap<u16, Vec<Record>> = BTreeMap::new();
            for r in set {
                by_type
                    .entry(u16::from(r.record_type()))
                    .or_default()
                    .push(r.clone());
            }
            for (t, rs) in by_type {
                let key_set = matches!(t, rtype::DNSKEY | rtype::CDS | rtype::CDNSKEY);
                let signers: &[ZoneKey] = if key_set { keys } else { &keys[..1] };
                let mut out = Vec::new();
                for k in signers {
                    out.push(
                        rrsig_record(&rs, k, &origin, w)
                            .with_context(|| format!("signing {owner} type {t}"))?,
                    );
                }
                sigs.insert((owner.clone(), RecordType::from(t)), out);
            }
        }
        for (owner, r) in &nsec_at {
            let s = rrsig_record(std::slice::from_ref(r), active, &origin, w)
                .with_context(|| format!("signing the NSEC of {owner}"))?;
            sigs.insert((owner.clone(), RecordType::NSEC), vec![s]);
        }
        let refresh = u64::from(validity.refresh_s.max(1));
        Ok(Signed {
            window: w,
            next_at: now - now % refresh + refresh,
            sigs,
            nsec_at,
            chain,
            tags: keys.iter().map(ZoneKey::tag).collect(),
        })
    }

    /// The RRSIGs over the set of `owner` (lower case) and `t`, with `ttl` as served.
    pub fn rrsigs(&self, owner: &Name, t: RecordType, ttl: u32) -> Vec<Record> {
        self.sigs
            .get(&(owner.to_lowercase(), t))
            .map(|v| {
                v.iter()
                    .map(|r| {
                        let mut r = r.clone();
                        r.set_ttl(ttl);
                        r
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The NSEC owned by `name`, if it has one.
    pub fn nsec(&self, name: &Name) -> Option<&Record> {
        self.nsec_at.get(&name.to_lowercase())
    }

    /// The NSEC whose span covers `name` (which has none of its own).
    pub fn covering(&self, name: &Name) -> Option<&Record> {
        let w = wire_name(name).ok()?;
        let r = nsec::covering(&self.chain, &w)?;
        self.nsec_at.get(&name_of(&r.owner).ok()?)
    }

    /// Every signature in it, for `dnssec dump`: by owner and type.
    pub fn all_sigs(&self) -> impl Iterator<Item = &Record> {
        self.sigs.values().flatten()
    }

    pub fn all_nsec(&self) -> impl Iterator<Item = &Record> {
        self.nsec_at.values()
    }
}
