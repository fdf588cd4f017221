//! The pure parts of a redirect: which name a request asks for (its Host), which client it
//! is for (the TCP peer, or what trusted proxies say in `X-Forwarded-For`), and the
//! `Location` it is sent to. No I/O here, so every rule is unit-tested.

use std::net::IpAddr;

use ipnet::IpNet;

/// What a request's Host (or absolute-form authority) names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    pub name: HostName,
    /// The port the client wrote, kept in the Location.
    pub port: Option<u16>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostName {
    /// A DNS name, lower-cased, without a trailing dot.
    Name(String),
    /// An address literal: never a service.
    Literal(IpAddr),
}

/// Parses a Host value: `name`, `name:port`, `[v6]`, `[v6]:port`, an IPv4 literal. The
/// name is compared as DNS compares (ASCII case-insensitively, a trailing dot the same
/// name), so it is lower-cased and the dot dropped. `None`: not a valid Host (RFC 9112
/// §3.2: 400).
pub fn parse_host(text: &str) -> Option<Host> {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let port = match after {
            "" => None,
            p => port(p.strip_prefix(':')?)?,
        };
        let v6: std::net::Ipv6Addr = inside.parse().ok()?;
        return Some(Host {
            name: HostName::Literal(IpAddr::V6(v6)),
            port,
        });
    } else {
        match text.rsplit_once(':') {
            Some((h, p)) => (h, port(p)?),
            None => (text, None),
        }
    };
    if let Ok(a) = host.parse::<std::net::Ipv4Addr>() {
        return Some(Host {
            name: HostName::Literal(IpAddr::V4(a)),
            port,
        });
    }
    let name = host.strip_suffix('.').unwrap_or(host);
    let valid = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    valid.then(|| Host {
        name: HostName::Name(name.to_ascii_lowercase()),
        port,
    })
}

/// A port after `:`: empty means none (RFC 3986 allows `host:`); otherwise 1 to 65535.
/// The outer `None` is a malformed port.
fn port(text: &str) -> Option<Option<u16>> {
    if text.is_empty() {
        return Some(None);
    }
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    match text.parse::<u16>() {
        Ok(0) | Err(_) => None,
        Ok(p) => Some(Some(p)),
    }
}

/// One `X-Forwarded-For` entry: an address, `v4:port`, `[v6]` or `[v6]:port` (some proxies
/// append the port). IPv4-mapped IPv6 becomes IPv4, as the kernel's tables key it.
fn forwarded_entry(text: &str) -> Option<IpAddr> {
    let t = text.trim();
    let a = if let Ok(a) = t.parse::<IpAddr>() {
        a
    } else if let Ok(sa) = t.parse::<std::net::SocketAddr>() {
        sa.ip()
    } else {
        t.strip_prefix('[')?.strip_suffix(']')?.parse().ok()?
    };
    Some(a.to_canonical())
}

/// The client a request is answered for. The TCP peer, unless it is a trusted proxy: then
/// `X-Forwarded-For` (every header of that name, in order, as one comma-separated chain;
/// each proxy appends the address it got the request from) is walked from the right, past
/// trusted proxies, to the first address that is not one: the last untrusted address.
/// Anything left of it could have been written by the client itself.
///
/// A chain of trusted proxies only: its leftmost address (the furthest hop known). An entry
/// that is not an address ends the walk at the hop to its right (it may be garbage from an
/// untrusted client, and what is right of it was written by trusted proxies).
pub fn client_address(peer: IpAddr, forwarded_for: &[&str], trusted: &[IpNet]) -> IpAddr {
    let is_trusted = |a: &IpAddr| trusted.iter().any(|n| n.contains(a));
    let peer = peer.to_canonical();
    if !is_trusted(&peer) {
        return peer;
    }
    let mut client = peer;
    let chain = forwarded_for
        .iter()
        .flat_map(|h| h.split(','))
        .filter(|e| !e.trim().is_empty());
    let entries: Vec<&str> = chain.collect();
    for e in entries.iter().rev() {
        let Some(a) = forwarded_entry(e) else {
            return client;
        };
        client = a;
        if !is_trusted(&a) {
            return a;
        }
    }
    client
}

/// The scheme the client used: `https` only when a trusted proxy (which terminated TLS)
/// says so in `X-Forwarded-Proto`; this listener itself speaks plain HTTP.
pub fn scheme(peer_trusted: bool, forwarded_proto: Option<&str>) -> &'static str {
    match forwarded_proto {
        Some(p) if peer_trusted && p.trim().eq_ignore_ascii_case("https") => "https",
        _ => "http",
    }
}

/// Where a client is sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A server's hostname, or the service's alternate domain.
    Name(String),
    /// A server's (or the origin's) address.
    Addr(IpAddr),
}

/// The Location: the target as the host (an IPv6 address in brackets), the port the
/// client's Host had, and the request's path and query unchanged (`/` when it had none).
pub fn location(scheme: &str, target: &Target, port: Option<u16>, path_and_query: &str) -> String {
    let host = match target {
        Target::Name(n) => n.clone(),
        Target::Addr(IpAddr::V4(a)) => a.to_string(),
        Target::Addr(IpAddr::V6(a)) => format!("[{a}]"),
    };
    let port = port.map_or(String::new(), |p| format!(":{p}"));
    let path = if path_and_query.starts_with('/') {
        path_and_query
    } else {
        "/"
    };
    format!("{scheme}://{host}{port}{path}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(n: &str, port: Option<u16>) -> Option<Host> {
        Some(Host {
            name: HostName::Name(n.into()),
            port,
        })
    }

    fn lit(a: &str, port: Option<u16>) -> Option<Host> {
        Some(Host {
            name: HostName::Literal(a.parse().unwrap()),
            port,
        })
    }

    #[test]
    fn host_is_lowered_its_dot_and_port_taken_off() {
        assert_eq!(parse_host("WWW.Example.COM"), name("www.example.com", None));
        assert_eq!(
            parse_host("www.example.com."),
            name("www.example.com", None)
        );
        assert_eq!(
            parse_host("www.example.com.:8080"),
            name("www.example.com", Some(8080))
        );
        assert_eq!(
            parse_host("www.example.com:"),
            name("www.example.com", None)
        );
        assert_eq!(parse_host("192.0.2.1:80"), lit("192.0.2.1", Some(80)));
        assert_eq!(parse_host("[2001:db8::1]"), lit("2001:db8::1", None));
        assert_eq!(
            parse_host("[2001:DB8::1]:8443"),
            lit("2001:db8::1", Some(8443))
        );
        for bad in [
            "",
            ".",
            "a..b",
            "www.example.com:http",
            "www.example.com:0",
            "www.example.com:65536",
            "www.example.com:+80",
            "user@www.example.com",
            "2001:db8::1",
            "[2001:db8::1",
            "[2001:db8::1]8080",
            "[www.example.com]",
            "www example.com",
            &format!("{}.com", "a".repeat(64)),
        ] {
            assert_eq!(parse_host(bad), None, "{bad:?}");
        }
    }

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|n| n.parse().unwrap()).collect()
    }

    fn ip(a: &str) -> IpAddr {
        a.parse().unwrap()
    }

    #[test]
    fn forwarded_for_counts_only_from_trusted_peers() {
        let trusted = nets(&["192.0.2.0/28", "2001:db8:1::/48"]);
        let xff = ["203.0.113.9"];
        // An untrusted peer's header is its own word: ignored.
        assert_eq!(
            client_address(ip("198.51.100.7"), &xff, &trusted),
            ip("198.51.100.7")
        );
        assert_eq!(
            client_address(ip("192.0.2.3"), &xff, &trusted),
            ip("203.0.113.9")
        );
        // Without the header, a trusted peer is the client.
        assert_eq!(
            client_address(ip("192.0.2.3"), &[], &trusted),
            ip("192.0.2.3")
        );
        // A dual-stack listener sees IPv4 peers as mapped addresses.
        assert_eq!(
            client_address(ip("::ffff:192.0.2.3"), &xff, &trusted),
            ip("203.0.113.9")
        );
        assert_eq!(
            client_address(ip("::ffff:198.51.100.7"), &xff, &[]),
            ip("198.51.100.7")
        );
    }

    #[test]
    fn forwarded_for_yields_the_last_untrusted_address() {
        let trusted = nets(&["192.0.2.0/28", "2001:db8:1::/48"]);
        let peer = ip("192.0.2.1");
        // The client forged the first entry; the trusted proxies appended the rest.
        let chain = ["198.51.100.66, 203.0.113.9", "192.0.2.5, 2001:db8:1::7"];
        assert_eq!(client_address(peer, &chain, &trusted), ip("203.0.113.9"));
        // Ports and brackets, as some proxies write them.
        assert_eq!(
            client_address(peer, &["[2001:db8:2::9]:4711, 192.0.2.4:80"], &trusted),
            ip("2001:db8:2::9")
        );
        assert_eq!(
            client_address(peer, &["203.0.113.9:1234"], &trusted),
            ip("203.0.113.9")
        );
        // Every hop trusted: the furthest one.
        assert_eq!(
            client_address(peer, &["192.0.2.9, 192.0.2.5"], &trusted),
            ip("192.0.2.9")
        );
        // Garbage ends the walk at the trusted hop right of it.
        assert_eq!(
            client_address(peer, &["203.0.113.9, unknown, 192.0.2.5"], &trusted),
            ip("192.0.2.5")
        );
        assert_eq!(client_address(peer, &["unknown"], &trusted), peer);
        assert_eq!(client_address(peer, &[" , "], &trusted), peer);
    }

    #[test]
    fn https_only_on_a_trusted_proxys_word() {
        assert_eq!(scheme(true, Some("HTTPS")), "https");
        assert_eq!(scheme(false, Some("https")), "http");
        assert_eq!(scheme(true, Some("http")), "http");
        assert_eq!(scheme(true, None), "http");
    }

    #[test]
    fn location_keeps_port_path_and_query() {
        let n = Target::Name("Fra-1.CDN.example.net".into());
        assert_eq!(
            location("http", &n, None, "/a/b?x=1&y=%20"),
            "http://Fra-1.CDN.example.net/a/b?x=1&y=%20"
        );
        assert_eq!(
            location("https", &n, Some(8443), "/"),
            "https://Fra-1.CDN.example.net:8443/"
        );
        let v4 = Target::Addr(ip("198.51.100.20"));
        assert_eq!(location("http", &v4, None, ""), "http://198.51.100.20/");
        let v6 = Target::Addr(ip("2001:db8:100::20"));
        assert_eq!(
            location("http", &v6, Some(8080), "/p?q"),
            "http://[2001:db8:100::20]:8080/p?q"
        );
        assert_eq!(
            location("http", &v6, None, "*"),
            "http://[2001:db8:100::20]/"
        );
    }
}
