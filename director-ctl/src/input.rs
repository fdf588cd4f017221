//! Operator text to checked values. Every error names the offending text and what is wrong.

use std::net::IpAddr;

use anyhow::{bail, Result};
use director_common::maps::{MAX_CANDIDATES, SERVER_NAME_LEN};

/// A network: address with host bits zero, and its length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Prefix {
    pub addr: IpAddr,
    pub len: u8,
}

impl std::fmt::Display for Prefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

fn mask(addr: IpAddr, len: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = if len == 0 {
                0
            } else {
                u32::MAX << (32 - len as u32)
            };
            IpAddr::V4((u32::from(a) & m).into())
        }
        IpAddr::V6(a) => {
            let m = if len == 0 {
                0
            } else {
                u128::MAX << (128 - len as u32)
            };
            IpAddr::V6((u128::from(a) & m).into())
        }
    }
}

pub fn prefix(text: &str) -> Result<Prefix> {
    let Some((a, l)) = text.split_once('/') else {
        bail!("malformed prefix {text:?}: expected ADDRESS/LENGTH, e.g. 192.0.2.0/24 or 2001:db8::/32");
    };
    let Ok(addr) = a.parse::<IpAddr>() else {
        bail!("malformed prefix {text:?}: {a:?} is not an IPv4 or IPv6 address");
    };
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let len: u8 = match l.parse::<u8>() {
        Ok(n) if n <= max => n,
        _ => bail!("malformed prefix {text:?}: length {l:?} is not a number from 0 to {max}"),
    };
    let net = mask(addr, len);
    if net != addr {
        bail!("malformed prefix {text:?}: host bits are set (the network is {net}/{len})");
    }
    Ok(Prefix { addr, len })
}

pub fn server_name(text: &str) -> Result<&str> {
    if text.is_empty() || text.len() >= SERVER_NAME_LEN {
        bail!(
            "server name {text:?} must be 1 to {} bytes",
            SERVER_NAME_LEN - 1
        );
    }
    if !text
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        bail!("server name {text:?} may only hold letters, digits, '-', '_' and '.'");
    }
    Ok(text)
}

/// A route's servers: `NAME[=WEIGHT],...` optionally followed by `|NAME,...`. Servers
/// before the `|` are equally good and share answers by weight; those after it are the next
/// best, in order, answered only when the first are down (or for more answers).
#[derive(Debug, PartialEq, Eq)]
pub struct ServerList {
    pub servers: Vec<(String, u16)>,
    pub primary: usize,
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes() {
        assert_eq!(prefix("192.0.2.0/24").unwrap().to_string(), "192.0.2.0/24");
        assert_eq!(prefix("2001:db8::/32").unwrap().len, 32);
        assert_eq!(prefix("0.0.0.0/0").unwrap().len, 0);
        assert!(prefix("192.0.2.1/24")
            .unwrap_err()
            .to_string()
            .contains("192.0.2.0/24"));
        assert!(prefix("192.0.2.0/33").is_err());
        assert!(prefix("192.0.2.0").is_err());
        assert!(prefix("example/8").is_err());
        assert!(prefix("2001:db8::/129").is_err());
    }

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
        assert!(server_list("a,b,c,d,e,f,g,h,i")
            .unwrap_err()
            .to_string()
            .contains("at most 8"));
    }
}
