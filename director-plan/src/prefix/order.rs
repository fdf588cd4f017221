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

/// Whether `a` covers `b` (`IpNet::contains`, without its masks: the sweeps ask this
/// for every prefix of a full pass and every source, a twentieth of the pass).
#[inline]
pub fn covers(a: &IpNet, b: &IpNet) -> bool {
    let (x, y, width) = match (a, b) {
        (IpNet::V4(a), IpNet::V4(b)) => (
            u128::from(u32::from(a.addr())),
            u128::from(u32::from(b.addr())),
            32,
        ),
        (IpNet::V6(a), IpNet::V6(b)) => (u128::from(a.addr()), u128::from(b.addr()), 128),
        _ => return false,
    };
    let len = u32::from(a.prefix_len());
    len <= u32::from(b.prefix_len()) && (x ^ y).checked_shr(width - len).unwrap_or(0) == 0
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

#[cfg(test)]
mod covers_tests {
    use super::covers;
    use ipnet::{IpNet, Ipv4Net, Ipv6Net};
    use proptest::prelude::*;

    fn net() -> impl Strategy<Value = IpNet> {
        prop_oneof![
            // Few distinct high bits, so that covering pairs are common.
            (0u32..16, any::<u32>(), 0u8..=32).prop_map(|(hi, lo, len)| {
                IpNet::V4(Ipv4Net::new((hi << 28 | lo >> 4).into(), len).unwrap())
            }),
            (0u128..16, any::<u128>(), 0u8..=128).prop_map(|(hi, lo, len)| {
                IpNet::V6(Ipv6Net::new((hi << 124 | lo >> 4).into(), len).unwrap())
            }),
        ]
    }

    proptest! {
        #[test]
        fn covers_is_contains(a in net(), b in net()) {
            prop_assert_eq!(covers(&a, &b), a.contains(&b));
            let t = a.trunc();
            prop_assert_eq!(covers(&t, &b), t.contains(&b));
            if let Ok(s) = IpNet::new(b.addr(), a.prefix_len()) {
                prop_assert_eq!(covers(&s, &b), s.contains(&b));
            }
        }
    }
}
