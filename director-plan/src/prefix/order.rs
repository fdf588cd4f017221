//! The one order every prefix list is kept in: sources, decision tables, the sweep. In it
//! a prefix comes before every prefix it covers, so the prefixes under one are contiguous.

use ipnet::IpNet;

/// The order prefixes are visited in: every prefix before the prefixes it covers, siblings
/// in address order, IPv4 first. Sources, compressed tables and the sweep all use it.
pub fn sort_key(p: &IpNet) -> (u8, u128, u8) {
    match p {
        IpNet::V4(n) => (4, u128::from(u32::from(n.network())), n.prefix_len()),
        IpNet::V6(n) => (6, u128::from(n.network()), n.prefix_len()),
    }
}

/// Sorts a source the way [`super::sweep::Sweep`] needs, keeping the last value given for a prefix.
pub fn sorted<V>(mut v: Vec<(IpNet, V)>) -> Vec<(IpNet, V)> {
    // Stable, so among duplicates the later one stays last; keep it.
    v.sort_by_key(|(p, _)| sort_key(p));
    let mut out: Vec<(IpNet, V)> = Vec::with_capacity(v.len());
    for e in v {
        match out.last_mut() {
            Some(last) if last.0 == e.0 => *last = e,
            _ => out.push(e),
        }
    }
    out
}

/// Where the entries under `root` sit in a table (they are contiguous in its order).
pub fn subtree_range<V>(entries: &[(IpNet, V)], root: &IpNet) -> std::ops::Range<usize> {
    let start = entries.partition_point(|(p, _)| sort_key(p) < sort_key(root));
    let end = start
        + entries[start..]
            .iter()
            .take_while(|(p, _)| root.contains(p))
            .count();
    start..end
}
