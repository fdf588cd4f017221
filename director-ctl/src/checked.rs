//! Checked values that every layer shares: a server name that fits the kernel's table and a
//! client prefix without host bits. The CLI and the config check operator text with these;
//! ops, the controller and the kernel take the values they return. Every error names the
//! offending text and what is wrong.

use std::net::IpAddr;

use anyhow::{bail, Result};
use director_common::maps::SERVER_NAME_LEN;
use ipnet::IpNet;

/// A server name: 1 to 31 bytes of letters, digits, `-`, `_` and `.`.
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

/// One unicast address the edge may be sent queries on: not unspecified, multicast or
/// IPv4-mapped (the kernel never answers those, so adding one would do nothing).
pub fn address(text: &str) -> Result<IpAddr> {
    let Ok(a) = text.parse::<IpAddr>() else {
        bail!("malformed address {text:?}: expected an IPv4 or IPv6 address, e.g. 192.0.2.53");
    };
    let v4 = match a {
        IpAddr::V4(v4) => Some(v4),
        IpAddr::V6(v6) => {
            if v6.to_ipv4_mapped().is_some() {
                bail!("address {text:?} is IPv4-mapped: give the IPv4 address itself");
            }
            None
        }
    };
    if a.is_unspecified() || a.is_multicast() || v4.is_some_and(|v| v.octets()[0] >= 240) {
        bail!("address {text:?} is not a unicast address");
    }
    Ok(a)
}

/// A VIP: `ADDRESS:PORT` (`[ADDRESS]:PORT` for IPv6), a unicast address and a port
/// other than 0.
pub fn vip(text: &str) -> Result<std::net::SocketAddr> {
    let Ok(a) = text.parse::<std::net::SocketAddr>() else {
        bail!(
            "malformed VIP {text:?}: expected ADDRESS:PORT, e.g. 203.0.113.80:443 or \
             [2001:db8::80]:443"
        );
    };
    address(&a.ip().to_string())?;
    if a.port() == 0 {
        bail!("VIP {text:?}: port 0");
    }
    if let std::net::SocketAddr::V6(v6) = a {
        if v6.scope_id() != 0 || v6.flowinfo() != 0 {
            bail!("VIP {text:?}: a scope or flow label has no place in a VIP");
        }
    }
    Ok(a)
}

/// A network `ADDRESS/LENGTH` whose host bits are zero (a route for `192.0.2.1/24` is
/// refused rather than silently widened).
/// An IPv4-mapped IPv6 prefix (::ffff:0:0/96 and longer) as the IPv4 prefix it is: the
/// kernel's tables key both the same, and reading one back gives the IPv4 form.
pub fn canonical(net: IpNet) -> IpNet {
    match net {
        IpNet::V6(n) if n.prefix_len() >= 96 => match n.addr().to_ipv4_mapped() {
            Some(v4) => IpNet::new(IpAddr::V4(v4), n.prefix_len() - 96).unwrap_or(net),
            None => net,
        },
        _ => net,
    }
}

pub fn prefix(text: &str) -> Result<IpNet> {
    let Some((a, l)) = text.split_once('/') else {
        bail!(
            "malformed prefix {text:?}: expected ADDRESS/LENGTH, e.g. 192.0.2.0/24 or \
             2001:db8::/32"
        );
    };
    let Ok(addr) = a.parse::<IpAddr>() else {
        bail!("malformed prefix {text:?}: {a:?} is not an IPv4 or IPv6 address");
    };
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let net = match l.parse::<u8>() {
        Ok(len) if len <= max => IpNet::new(addr, len)?,
        _ => bail!("malformed prefix {text:?}: length {l:?} is not a number from 0 to {max}"),
    };
    if net.network() != addr {
        bail!(
            "malformed prefix {text:?}: host bits are set (the network is {})",
            net.trunc()
        );
    }
    Ok(net)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_prefixes_are_their_ipv4_prefix() {
        let c = |s: &str| canonical(prefix(s).unwrap()).to_string();
        assert_eq!(c("::ffff:192.0.2.0/120"), "192.0.2.0/24");
        assert_eq!(c("::ffff:0.0.0.0/96"), "0.0.0.0/0");
        assert_eq!(c("2001:db8::/32"), "2001:db8::/32");
        assert_eq!(c("::/0"), "::/0");
        assert_eq!(c("192.0.2.0/24"), "192.0.2.0/24");
    }

    #[test]
    fn prefixes() {
        assert_eq!(prefix("192.0.2.0/24").unwrap().to_string(), "192.0.2.0/24");
        assert_eq!(prefix("2001:db8::/32").unwrap().prefix_len(), 32);
        assert_eq!(prefix("0.0.0.0/0").unwrap().prefix_len(), 0);
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
    fn server_names() {
        assert!(server_name("fra-1.example_a").is_ok());
        assert!(server_name("").is_err());
        assert!(server_name(&"a".repeat(32)).is_err());
        assert!(server_name("a b")
            .unwrap_err()
            .to_string()
            .contains("letters, digits"));
    }
}
