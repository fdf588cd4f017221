//! `run`'s guard against half-written and truncated inputs: a change that would remove more
//! than a share of what the last applied state had (services, servers, decisions, or the
//! records of an input) is refused until the operator confirms it.
//!
//! A config cut off at a line break is often still a valid config, only a shorter one, and
//! an RTT file emptied by a writer that has not finished is a valid empty file: neither is
//! an error a parser can see. What gives them away is how much they remove at once.

use std::collections::BTreeSet;
use std::fmt;

use ipnet::IpNet;

use crate::config::Config;
use crate::data::Data;
use crate::prefix::order::sort_key;

/// Something a change would remove part of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Removal {
    /// What is counted, plural: "services", "RTT measurements".
    pub what: String,
    pub removed: usize,
    pub of: usize,
    /// Names of what goes, where they are names (services, servers), at most a few.
    pub names: Vec<String>,
}

impl Removal {
    /// A count that went from `before` to `after` (records of an input).
    pub fn count(what: impl Into<String>, before: usize, after: usize) -> Removal {
        Removal {
            what: what.into(),
            removed: before.saturating_sub(after),
            of: before,
            names: Vec::new(),
        }
    }

    /// Named objects: those of `before` not in `after`.
    fn names(what: &str, before: &BTreeSet<String>, after: &BTreeSet<String>) -> Removal {
        let gone: Vec<String> = before.difference(after).cloned().collect();
        Removal {
            what: what.to_string(),
            removed: gone.len(),
            of: before.len(),
            names: gone,
        }
    }

    /// More than `share` of what there was; never for nothing removed.
    fn exceeds(&self, share: f64) -> bool {
        self.removed > 0 && self.removed as f64 > share * self.of as f64
    }
}

impl fmt::Display for Removal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} of {} {}", self.removed, self.of, self.what)?;
        if !self.names.is_empty() {
            const SHOWN: usize = 5;
            let mut list = self.names[..self.names.len().min(SHOWN)].join(", ");
            if self.names.len() > SHOWN {
                list.push_str(", ...");
            }
            write!(f, " ({list})")?;
        }
        Ok(())
    }
}

/// A change refused because it removes too much (an error `run` tells from the others:
/// it is not retried another way).
#[derive(Debug)]
pub struct Refusal {
    /// What goes beyond the share.
    pub removals: Vec<Removal>,
    pub share: f64,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list: Vec<String> = self.removals.iter().map(ToString::to_string).collect();
        write!(
            f,
            "it would remove {} (more than --max-removal-share {}); if that is meant, confirm \
             it with SIGUSR1 (kill -USR1 {})",
            list.join(", "),
            self.share,
            std::process::id()
        )
    }
}

impl std::error::Error for Refusal {}

/// Fails with a [`Refusal`] listing every removal beyond `share`; `None` (the operator
/// confirmed) lets anything through.
pub fn check(removals: &[Removal], share: Option<f64>) -> Result<(), Refusal> {
    let Some(share) = share else {
        return Ok(());
    };
    let over: Vec<Removal> = removals
        .iter()
        .filter(|r| r.exceeds(share))
        .cloned()
        .collect();
    if over.is_empty() {
        Ok(())
    } else {
        Err(Refusal {
            removals: over,
            share,
        })
    }
}

/// Only what removals amount to something (for the log of a confirmed change).
pub fn nonzero(removals: &[Removal]) -> Vec<String> {
    removals
        .iter()
        .filter(|r| r.removed > 0)
        .map(ToString::to_string)
        .collect()
}

/// Service names as DNS compares them: case and a trailing dot do not matter.
fn service_key(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

fn service_names(cfg: &Config) -> BTreeSet<String> {
    cfg.services.iter().map(|s| service_key(&s.name)).collect()
}

fn server_names(cfg: &Config) -> BTreeSet<String> {
    cfg.servers.iter().map(|s| s.name.clone()).collect()
}

/// The input records a state was computed from, by kind (and site for BGP).
fn input_counts(data: &Data) -> Vec<(String, usize)> {
    let s = &data.summary;
    let mut v = vec![
        ("RTT measurements".to_string(), s.rtt_measurements),
        ("client locations".to_string(), s.own_locations),
        ("GeoIP networks".to_string(), s.geo_networks),
    ];
    for r in &s.bgp_routes {
        v.push((format!("BGP routes of site {}", r.site), r.routes));
    }
    v
}

/// How many of `before` (sorted and without duplicates by `sort_key`, as
/// `Computed::all` is) are not in `after` (the same).
fn missing(before: &[IpNet], after: &[IpNet]) -> usize {
    let mut j = 0;
    let mut n = 0;
    for p in before {
        let k = sort_key(p);
        while j < after.len() && sort_key(&after[j]) < k {
            j += 1;
        }
        if j >= after.len() || sort_key(&after[j]) != k {
            n += 1;
        }
    }
    n
}

/// One applied (or candidate) state of `run`: its config, inputs and client prefixes.
pub struct State<'a> {
    pub cfg: &'a Config,
    pub data: &'a Data,
    /// Every client prefix decided (`Computed::all`).
    pub prefixes: &'a [IpNet],
}

/// What going from `old` to `new` removes: services, servers, decisions (one per service
/// and client prefix) and the records of each kind of input.
pub fn removals(old: &State<'_>, new: &State<'_>) -> Vec<Removal> {
    let (s0, s1) = (service_names(old.cfg), service_names(new.cfg));
    let services = Removal::names("services", &s0, &s1);
    let kept = s0.intersection(&s1).count();
    let gone_prefixes = missing(old.prefixes, new.prefixes);
    let decisions = Removal {
        what: "decisions (service x client prefix)".to_string(),
        removed: gone_prefixes * kept + old.prefixes.len() * services.removed,
        of: old.prefixes.len() * s0.len(),
        names: Vec::new(),
    };
    let mut out = vec![
        services,
        Removal::names("servers", &server_names(old.cfg), &server_names(new.cfg)),
        decisions,
    ];
    let after = input_counts(new.data);
    for (what, before) in input_counts(old.data) {
        let now = after.iter().find(|a| a.0 == what).map_or(0, |a| a.1);
        out.push(Removal::count(what, before, now));
    }
    out
}

/// What a first apply of `cfg` removes from what the kernel holds: its services and servers
/// (by name) that the config does not have (a restart on a truncated config).
pub fn removals_from_kernel(
    services: impl IntoIterator<Item = String>,
    servers: impl IntoIterator<Item = String>,
    cfg: &Config,
) -> Vec<Removal> {
    let services: BTreeSet<String> = services.into_iter().map(|s| service_key(&s)).collect();
    let servers: BTreeSet<String> = servers.into_iter().collect();
    vec![
        Removal::names("services", &services, &service_names(cfg)),
        Removal::names("servers", &servers, &server_names(cfg)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(v: &[&str]) -> Vec<IpNet> {
        let mut v: Vec<IpNet> = v.iter().map(|p| p.parse().unwrap()).collect();
        v.sort_unstable_by_key(sort_key);
        v
    }

    #[test]
    fn missing_counts_prefixes_gone() {
        let a = nets(&["0.0.0.0/0", "192.0.2.0/24", "198.51.100.0/24", "::/0"]);
        let b = nets(&["0.0.0.0/0", "198.51.100.0/24", "2001:db8::/32", "::/0"]);
        assert_eq!(missing(&a, &b), 1);
        assert_eq!(missing(&b, &a), 1);
        assert_eq!(missing(&a, &[]), 4);
        assert_eq!(missing(&a, &a), 0);
    }

    /// Strictly more than the share is refused; exactly the share, or nothing removed, is not.
    #[test]
    fn refuses_only_beyond_the_share() {
        let half = Removal::count("RTT measurements", 4, 2);
        assert!(check(std::slice::from_ref(&half), Some(0.5)).is_ok());
        let e = check(std::slice::from_ref(&half), Some(0.25)).unwrap_err();
        assert_eq!(e.removals, std::slice::from_ref(&half));
        assert!(e.to_string().contains("2 of 4 RTT measurements"), "{e}");
        assert!(check(&[Removal::count("x", 0, 0)], Some(0.0)).is_ok());
        assert!(check(&[Removal::count("x", 1, 0)], Some(0.0)).is_err());
        assert!(check(&[Removal::count("x", 1, 0)], None).is_ok());
        assert!(check(&[Removal::count("x", 1, 0)], Some(1.0)).is_ok());
    }

    #[test]
    fn names_what_goes() {
        let before: BTreeSet<String> = ["a", "b", "c"].map(String::from).into();
        let after: BTreeSet<String> = ["a"].map(String::from).into();
        let r = Removal::names("services", &before, &after);
        assert_eq!(r.to_string(), "2 of 3 services (b, c)");
    }
}
