//! The config's health checks and load polls as the health layer takes them: a plain
//! [`Plan`] of targets with kernel ids (health knows nothing of the config file or of how
//! ids are given).

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use director_plan::decide::Ids;
use hickory_proto::rr::RecordType;

use super::config::Config;
use crate::health::config::{CheckKind, HttpUrl};
use crate::health::probe::Probe;
use crate::health::{LoadTarget, Plan, Target, Watched};

/// What to watch for `cfg`, with the kernel ids `ids` gives its servers and services.
pub fn health_plan(cfg: &Config, ids: &Ids) -> Plan {
    let server_idx: HashMap<&str, usize> = cfg
        .servers
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.as_str(), i))
        .collect();
    let mut p = Plan {
        names: cfg
            .servers
            .iter()
            .zip(&ids.servers)
            .map(|(s, &id)| (id, s.name.clone()))
            .collect(),
        ..Plan::default()
    };
    let mut loaded = HashSet::new();
    for (si, svc) in cfg.services.iter().enumerate() {
        let members: Vec<usize> = svc.servers.iter().map(|n| server_idx[n.as_str()]).collect();
        p.services.push(Watched {
            id: ids.services[si],
            name: svc.name.trim_end_matches('.').to_string(),
            servers: members.iter().map(|&i| ids.servers[i]).collect(),
            checked: svc.health.is_some(),
            fail_open: svc.fail_open,
            load: svc.load_limits(),
            degraded_ttl: svc.degraded_ttl(),
            auto: svc.portion.auto,
            fallback: if svc.alternate.is_some() {
                "alternate"
            } else if !svc.origin.is_empty() {
                "origin"
            } else {
                "pass"
            },
        });
        if svc.load_limits().is_some() {
            loaded.extend(members.iter().copied());
        }
        let Some(check) = &svc.health else { continue };
        let probe = match check.kind {
            CheckKind::Tcp => Probe::Tcp,
            CheckKind::Http => Probe::Http {
                path: check.path.clone().unwrap_or_else(|| "/".into()),
                host: check
                    .host
                    .clone()
                    .unwrap_or_else(|| svc.name.trim_end_matches('.').to_string()),
                status: check.status.unwrap_or(200),
                body: check.body.clone(),
            },
            CheckKind::Dns => Probe::Dns {
                name: check.query.clone().unwrap_or_default(),
                qtype: check
                    .qtype
                    .as_deref()
                    .and_then(|t| t.to_ascii_uppercase().parse().ok())
                    .unwrap_or(RecordType::A),
            },
        };
        for &i in &members {
            let s = &cfg.servers[i];
            let Some(ip) = s
                .check_address
                .or(s.ipv4.map(IpAddr::V4))
                .or(s.ipv6.map(IpAddr::V6))
            else {
                continue;
            };
            p.targets.push(Target {
                service: ids.services[si],
                server: ids.servers[i],
                addr: SocketAddr::new(ip, check.port),
                probe: probe.clone(),
                timing: check.timing(&cfg.health),
            });
        }
    }
    let mut loaded: Vec<usize> = loaded.into_iter().collect();
    loaded.sort_unstable();
    for i in loaded {
        let s = &cfg.servers[i];
        let Some(l) = &s.load else { continue };
        let Ok(url) = HttpUrl::parse(&l.url) else {
            continue;
        };
        p.loads.push(LoadTarget {
            server: ids.servers[i],
            url,
            metric: l.metric.clone(),
            interval: Duration::from_secs_f64(cfg.health.interval),
            timeout: Duration::from_secs_f64(cfg.health.timeout),
        });
    }
    p
}
