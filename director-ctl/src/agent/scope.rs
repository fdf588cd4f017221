//! What an agent may probe: one host of a client prefix in global unicast space, asked as
//! its /24 (IPv4) or /48 (IPv6), the units the handshakes are kept in. Whoever may ask an
//! agent for probes must not be able to point it at a private network, its own host or
//! link, a multicast group, or a whole /8; so every other target is refused before a
//! packet is sent, and counted by why. `--probe-allow` lets a lab probe its documentation
//! or private ranges (off by default).

use std::net::IpAddr;

use ipnet::IpNet;

use crate::api::ProbeTarget;

/// Why a target was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Its prefix is not a /24 (IPv4) or a /48 (IPv6).
    NotAUnit,
    /// Its address is not in its prefix.
    Outside,
    /// Not global unicast: private, shared, loopback, link-local, multicast, reserved or
    /// documentation space (unless `--probe-allow` names it).
    NotGlobal,
}

/// Special-purpose space (RFC 6890 and the IANA registries): never probed, unless
/// `--probe-allow` names it.
const SPECIAL: &[&str] = &[
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.0.2.0/24",
    "192.88.99.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "224.0.0.0/4",
    "240.0.0.0/4",
    // IPv6 outside 2000::/3 is refused below; inside it, these are not global unicast.
    "2001::/23",
    "2001:db8::/32",
    "2002::/16",
    "3fff::/20",
];

/// Never probed, whatever `--probe-allow` says: this host, nobody, everybody.
fn never(a: IpAddr) -> bool {
    a.is_unspecified()
        || a.is_loopback()
        || a.is_multicast()
        || matches!(a, IpAddr::V4(v) if v.is_broadcast())
        || matches!(a, IpAddr::V6(v) if v.to_ipv4_mapped().is_some())
}

fn special(n: &IpNet) -> bool {
    if let IpNet::V6(v6) = n {
        // Global unicast is 2000::/3 (fc00::/7, fe80::/10, ff00::/8, ::/8 lie outside).
        if v6.network().segments()[0] & 0xe000 != 0x2000 {
            return true;
        }
    }
    SPECIAL.iter().any(|s| {
        s.parse::<IpNet>()
            .is_ok_and(|sp| sp.contains(n) || n.contains(&sp))
    })
}

/// Whether `t` may be probed; `allow` are the operator's `--probe-allow` prefixes.
pub fn check(t: &ProbeTarget, allow: &[IpNet]) -> Result<(), Refusal> {
    let unit = match t.prefix {
        IpNet::V4(_) => 24,
        IpNet::V6(_) => 48,
    };
    if t.prefix.prefix_len() != unit {
        return Err(Refusal::NotAUnit);
    }
    if !t.prefix.contains(&t.address) {
        return Err(Refusal::Outside);
    }
    let allowed = allow.iter().any(|a| a.contains(&t.prefix));
    if never(t.address) || (special(&t.prefix) && !allowed) {
        return Err(Refusal::NotGlobal);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(prefix: &str, address: &str) -> ProbeTarget {
        ProbeTarget {
            prefix: prefix.parse().unwrap(),
            address: address.parse().unwrap(),
        }
    }

    #[test]
    fn only_global_unicast_units_are_probed() {
        use Refusal::*;
        let none: &[IpNet] = &[];
        for (prefix, address, want) in [
            ("8.8.8.0/24", "8.8.8.8", Ok(())),
            ("2a00:1450:4001::/48", "2a00:1450:4001::1", Ok(())),
            ("10.0.0.0/8", "10.0.0.1", Err(NotAUnit)),
            ("10.1.2.0/24", "10.1.2.3", Err(NotGlobal)),
            ("172.16.5.0/24", "172.16.5.1", Err(NotGlobal)),
            ("172.31.255.0/24", "172.31.255.1", Err(NotGlobal)),
            ("172.32.0.0/24", "172.32.0.1", Ok(())),
            ("192.168.1.0/24", "192.168.1.1", Err(NotGlobal)),
            ("127.0.0.0/24", "127.0.0.1", Err(NotGlobal)),
            ("169.254.1.0/24", "169.254.1.1", Err(NotGlobal)),
            ("100.64.0.0/24", "100.64.0.1", Err(NotGlobal)),
            ("100.128.0.0/24", "100.128.0.1", Ok(())),
            ("0.1.2.0/24", "0.1.2.3", Err(NotGlobal)),
            ("224.0.0.0/24", "224.0.0.1", Err(NotGlobal)),
            ("239.1.1.0/24", "239.1.1.1", Err(NotGlobal)),
            ("250.0.0.0/24", "250.0.0.1", Err(NotGlobal)),
            ("255.255.255.0/24", "255.255.255.255", Err(NotGlobal)),
            ("203.0.113.0/24", "203.0.113.1", Err(NotGlobal)),
            ("2001:db8:5::/48", "2001:db8:5::1", Err(NotGlobal)),
            ("fc00::/48", "fc00::1", Err(NotGlobal)),
            ("fd12:3456:789a::/48", "fd12:3456:789a::1", Err(NotGlobal)),
            ("fe80::/48", "fe80::1", Err(NotGlobal)),
            ("fe80::/10", "fe80::1", Err(NotAUnit)),
            ("::/48", "::1", Err(NotGlobal)),
            ("ff02::/48", "ff02::1", Err(NotGlobal)),
            ("8.8.0.0/16", "8.8.8.8", Err(NotAUnit)),
            ("8.8.8.0/25", "8.8.8.8", Err(NotAUnit)),
            ("2a00:1450::/32", "2a00:1450::1", Err(NotAUnit)),
            ("2a00:1450:4001::/64", "2a00:1450:4001::1", Err(NotAUnit)),
            ("8.8.8.0/24", "8.8.4.4", Err(Outside)),
            ("8.8.8.0/24", "2a00:1450:4001::1", Err(Outside)),
        ] {
            assert_eq!(check(&t(prefix, address), none), want, "{prefix} {address}");
        }
    }

    #[test]
    fn a_lab_allows_its_own_ranges_but_never_loopback_or_a_wider_unit() {
        let lab: Vec<IpNet> = ["203.0.113.0/24", "2001:db8::/32", "127.0.0.0/8"]
            .iter()
            .map(|p| p.parse().unwrap())
            .collect();
        assert_eq!(check(&t("203.0.113.0/24", "203.0.113.1"), &lab), Ok(()));
        assert_eq!(check(&t("2001:db8:5::/48", "2001:db8:5::1"), &lab), Ok(()));
        assert_eq!(
            check(&t("198.51.100.0/24", "198.51.100.1"), &lab),
            Err(Refusal::NotGlobal)
        );
        assert_eq!(
            check(&t("127.0.0.0/24", "127.0.0.1"), &lab),
            Err(Refusal::NotGlobal)
        );
        assert_eq!(
            check(&t("203.0.0.0/16", "203.0.113.1"), &lab),
            Err(Refusal::NotAUnit)
        );
    }
}
