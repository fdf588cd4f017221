//! The IPv4 /16 front of a service's table (`DIR_DEC16`, see `director_common::maps`):
//! which /16s one entry answers whole, so the program can read a slot instead of walking
//! the trie. Pure: director-ctl's `kernel::Maps::set_front16` writes it, with the trie's
//! own values.

use std::net::Ipv4Addr;

use director_common::maps::{dec16_range, DEC16_SLOTS};
use ipnet::{IpNet, Ipv4Net};

use super::order::{sort_key, subtree_range};

/// /16s in the IPv4 space.
pub const SLOTS: usize = DEC16_SLOTS as usize;

/// For each /16 (indexed by its first two bytes), the entry of length 16 or less that
/// covers it, where no longer entry lies inside it: then every address of the /16, and
/// every ECS source of 16 bits or more in it, gets that entry from the trie. `None` where
/// the trie must be asked: no entry covers the /16, or longer ones split it. IPv6 entries
/// are ignored.
pub fn covers<'a>(prefixes: impl IntoIterator<Item = &'a IpNet>) -> Vec<Option<Ipv4Net>> {
    let mut short: Vec<Ipv4Net> = Vec::new();
    let mut split = vec![false; SLOTS];
    for p in prefixes {
        let IpNet::V4(n) = p else { continue };
        if n.prefix_len() <= 16 {
            short.push(*n);
        } else {
            split[slot_of(n)] = true;
        }
    }
    // Shorter first: a nested entry paints over the one around it, as the trie prefers it.
    short.sort_by_key(Ipv4Net::prefix_len);
    let mut out: Vec<Option<Ipv4Net>> = vec![None; SLOTS];
    for n in short {
        for s in slots(&n) {
            out[s] = Some(n);
        }
    }
    for (o, split) in out.iter_mut().zip(split) {
        if split {
            *o = None;
        }
    }
    out
}

/// [`covers`] for one /16 (`slot`, its first two bytes) of a table sorted by
/// [`sort_key`]: a few binary searches instead of a pass over the whole table, for
/// updates that touched few /16s.
pub fn cover_of<V>(entries: &[(IpNet, V)], slot: u32) -> Option<Ipv4Net> {
    let net16 = Ipv4Net::new(Ipv4Addr::from(slot << 16), 16).ok()?;
    let find = |n: &Ipv4Net| {
        let key = sort_key(&IpNet::V4(*n));
        entries
            .binary_search_by(|(p, _)| sort_key(p).cmp(&key))
            .ok()
    };
    // Anything longer inside it.
    let inside = entries[subtree_range(entries, &IpNet::V4(net16))]
        .iter()
        .any(|(p, _)| p.prefix_len() > 16);
    if inside {
        return None;
    }
    (0..=16u8).rev().find_map(|len| {
        let n = Ipv4Net::new(net16.network(), len).ok()?.trunc();
        find(&n).map(|_| n)
    })
}

/// The /16 slot an address or prefix of 16 bits or more falls in.
pub fn slot_of(n: &Ipv4Net) -> usize {
    (u32::from(n.network()) >> 16) as usize
}

/// The /16 slots a prefix touches: those it covers, or the one it lies in.
fn slots(n: &Ipv4Net) -> std::ops::Range<usize> {
    let r = dec16_range(u32::from(n.network()), n.prefix_len());
    r.start as usize..r.end as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::IpAddr;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    /// The longest entry holding `a`, as the trie picks it.
    fn lookup(entries: &[(IpNet, u8)], a: Ipv4Addr) -> Option<IpNet> {
        entries
            .iter()
            .filter(|(p, _)| p.contains(&IpAddr::V4(a)))
            .max_by_key(|(p, _)| p.prefix_len())
            .map(|(p, _)| *p)
    }

    #[test]
    fn a_longer_entry_splits_its_16_and_only_that_one() {
        let t = [
            (net("0.0.0.0/0"), 1u8),
            (net("203.0.113.0/24"), 2),
            (net("198.51.0.0/16"), 3),
            (net("10.0.0.0/8"), 4),
            (net("2001:db8::/32"), 5),
        ];
        let c = covers(t.iter().map(|(p, _)| p));
        let at = |a: [u8; 2]| c[(a[0] as usize) << 8 | a[1] as usize];
        assert_eq!(at([203, 0]), None);
        assert_eq!(at([203, 1]), Some("0.0.0.0/0".parse().unwrap()));
        assert_eq!(at([198, 51]), Some("198.51.0.0/16".parse().unwrap()));
        assert_eq!(at([10, 200]), Some("10.0.0.0/8".parse().unwrap()));
        assert_eq!(c.iter().filter(|s| s.is_none()).count(), 1);
        assert!(covers(&[net("192.0.2.0/24")]).iter().all(Option::is_none));
    }

    fn arb_v4() -> impl Strategy<Value = IpNet> {
        // Prefixes around a few /16s, so that nesting and splits are common.
        (0u32..4, 0u8..=24, any::<u32>()).prop_map(|(hi, len, low)| {
            let a = (0xc633_0000 + (hi << 16)) | (low & 0xffff);
            let a = if len < 14 { low } else { a };
            IpNet::V4(Ipv4Net::new(Ipv4Addr::from(a), len).unwrap().trunc())
        })
    }

    proptest! {
        /// Wherever a slot is set, every address of its /16 (and the /16 itself as an ECS
        /// source) finds that entry in the trie; wherever one entry would answer the whole
        /// /16, the slot is set.
        #[test]
        fn a_set_slot_is_what_the_trie_answers_in_all_its_16(
            ps in proptest::collection::btree_set(arb_v4(), 0..24),
            probes in proptest::collection::vec(any::<u16>(), 8),
            others in proptest::collection::vec(any::<u16>(), 16),
        ) {
            let mut entries: Vec<(IpNet, u8)> = ps.into_iter().map(|p| (p, 0)).collect();
            entries.sort_by_key(|(p, _)| sort_key(p));
            let c = covers(entries.iter().map(|(p, _)| p));
            // The /16s the long prefixes fall in, their neighbours, and random others.
            let checked = (0xc632..0xc638).chain(others.into_iter().map(usize::from));
            for s in checked {
                let cover = &c[s];
                prop_assert_eq!(cover_of(&entries, s as u32), *cover, "slot {:#x}", s);
                let base = (s as u32) << 16;
                let inside_longer = entries.iter().any(|(p, _)| matches!(p,
                    IpNet::V4(n) if n.prefix_len() > 16 && slot_of(n) == s));
                let whole = lookup(&entries, Ipv4Addr::from(base));
                match cover {
                    Some(n) => {
                        prop_assert!(!inside_longer);
                        prop_assert_eq!(whole, Some(IpNet::V4(*n)));
                        for low in &probes {
                            let a = Ipv4Addr::from(base | u32::from(*low));
                            prop_assert_eq!(lookup(&entries, a), Some(IpNet::V4(*n)));
                        }
                    }
                    None => prop_assert!(inside_longer || whole.is_none()),
                }
            }
        }
    }
}
