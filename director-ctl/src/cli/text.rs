//! Operator text that only the CLI reads: a route's server list. Every error names the
//! offending text and what is wrong.

use anyhow::{bail, Result};
use director_common::maps::MAX_CANDIDATES;

use crate::checked::server_name;
use crate::ops::ServerList;

/// `NAME[=WEIGHT],...` optionally followed by `|NAME[=WEIGHT],...`: servers before the `|`
/// are equally good and share answers by weight; those after it are the next best, in
/// order.
pub fn server_list(text: &str) -> Result<ServerList> {
    let (first, rest) = match text.split_once('|') {
        Some((a, b)) => (a, Some(b)),
        None => (text, None),
    };
    let mut out: Vec<(String, u16)> = Vec::new();
    for (tier, part) in [Some(first), rest].into_iter().flatten().enumerate() {
        if tier == 1 && part.contains('|') {
            bail!("more than one '|' in {text:?}: a route has equal servers, then fallbacks");
        }
        for item in part.split(',') {
            let (name, weight) = match item.split_once('=') {
                Some((n, w)) => match w.parse::<u16>() {
                    Ok(w) if w > 0 => (n, w),
                    _ => bail!("weight {w:?} of server {n:?} is not a number from 1 to 65535"),
                },
                None => (item, 1),
            };
            let name = server_name(name)?;
            if out.iter().any(|(n, _)| n == name) {
                bail!("server {name:?} is listed twice in {text:?}");
            }
            out.push((name.to_string(), weight));
        }
    }
    if out.len() > MAX_CANDIDATES {
        bail!(
            "{} servers in {text:?}: a route takes at most {MAX_CANDIDATES}",
            out.len()
        );
    }
    let primary = first.split(',').count();
    Ok(ServerList {
        servers: out,
        primary,
    })
}

/// `NAME` or `NAME=ADDR[,ADDR]`: a name server of `zone add`, with its addresses.
pub fn name_server(text: &str) -> Result<crate::dns::zone::NsConfig> {
    let (name, addrs) = match text.split_once('=') {
        Some((n, a)) => (n, Some(a)),
        None => (text, None),
    };
    let addresses = addrs
        .map(|a| {
            a.split(',')
                .map(|x| {
                    x.trim()
                        .parse::<std::net::IpAddr>()
                        .map_err(|_| anyhow::anyhow!("--ns {text:?}: {x:?} is not an IP address"))
                })
                .collect::<Result<Vec<_>>>()
        })
        .transpose()?
        .unwrap_or_default();
    if name.trim().is_empty() {
        anyhow::bail!("--ns {text:?}: no name");
    }
    Ok(crate::dns::zone::NsConfig {
        name: name.trim().to_string(),
        addresses,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_lists() {
        let l = server_list("a=2,b").unwrap();
        assert_eq!(l.servers, vec![("a".into(), 2), ("b".into(), 1)]);
        assert_eq!(l.primary, 2);
        let l = server_list("a|b,c").unwrap();
        assert_eq!((l.servers.len(), l.primary), (3, 1));
        assert!(server_list("a|b|c").is_err());
        assert!(server_list("a|").is_err());
        assert!(server_list("a,a").is_err());
        assert!(server_list("a=0").is_err());
        assert!(server_list("a=x").is_err());
        assert!(server_list("").is_err());
        let many = server_list("a,b,c,d,e,f,g,h,i").unwrap_err().to_string();
        assert!(many.contains("at most 8"));
    }
}
