//! ECS scopes: how far down a client's answer holds. An entry's answer holds for every
//! address under it but those of the entries nested in it, so its scope is the longest
//! prefix directly nested in it (or its own length).

use ipnet::IpNet;

/// Each prefix's scope: max(its length, its longest directly nested prefix). `prefixes`
/// are sorted by address then length (families apart: an IPv4 prefix never contains an
/// IPv6 one).
pub fn scopes(prefixes: &[IpNet]) -> Vec<u8> {
    let mut out: Vec<u8> = prefixes.iter().map(IpNet::prefix_len).collect();
    let mut stack: Vec<usize> = Vec::with_capacity(129);
    for (i, p) in prefixes.iter().enumerate() {
        while stack.last().is_some_and(|&t| !prefixes[t].contains(p)) {
            stack.pop();
        }
        if let Some(&t) = stack.last() {
            out[t] = out[t].max(p.prefix_len());
        }
        stack.push(i);
    }
    out
}
