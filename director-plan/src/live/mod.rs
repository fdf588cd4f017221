//! Inputs that change while `run` runs: BGP from the sites' routers (BMP, in
//! [`crate::inputs::bmp`]) and RTT from the sites' agents ([`rtt`]). What is here is pure:
//! it keeps the live values beside the files' and patches [`crate::data::Data`] where they
//! changed, so that only the prefixes under a change are decided again.

pub mod rtt;

use std::net::IpAddr;

use sha2::{Digest, Sha256};

use crate::engine::Rtt;
use crate::model::{IpNet, Route};
use crate::prefix::order::sort_key;

/// Applies `changes` (prefix → new value, or `None`: gone) to a table sorted by
/// [`sort_key`], keeping it sorted; `changes` need not be. One pass over both, so a large
/// batch (a peer's whole table) costs what a rebuild costs, and a small one a copy.
pub fn patch<V: Clone>(table: &mut Vec<(IpNet, V)>, mut changes: Vec<(IpNet, Option<V>)>) {
    if changes.is_empty() {
        return;
    }
    changes.sort_by_key(|c| sort_key(&c.0));
    // The last change given for a prefix wins.
    changes.dedup_by(|later, earlier| {
        if later.0 == earlier.0 {
            std::mem::swap(later, earlier);
            true
        } else {
            false
        }
    });
    if changes.len() < 64 {
        for (p, v) in changes {
            match (
                table.binary_search_by_key(&sort_key(&p), |e| sort_key(&e.0)),
                v,
            ) {
                (Ok(i), Some(v)) => table[i].1 = v,
                (Ok(i), None) => {
                    table.remove(i);
                }
                (Err(i), Some(v)) => table.insert(i, (p, v)),
                (Err(_), None) => {}
            }
        }
        return;
    }
    let old = std::mem::take(table);
    let mut out = Vec::with_capacity(old.len() + changes.len());
    let mut changes = changes.into_iter().peekable();
    for e in old {
        while let Some(c) = changes.next_if(|c| sort_key(&c.0) < sort_key(&e.0)) {
            if let (p, Some(v)) = c {
                out.push((p, v));
            }
        }
        match changes.next_if(|c| c.0 == e.0) {
            Some((p, Some(v))) => out.push((p, v)),
            Some((_, None)) => {}
            None => out.push(e),
        }
    }
    out.extend(changes.filter_map(|(p, v)| v.map(|v| (p, v))));
    *table = out;
}

/// SHA-256 (hex) over sites' routes and RTT values in table order, each field as the
/// decisions use it: equal for equal tables, however and in whatever order the changes came
/// (a fleet's manifest names the live state it was decided with by it).
pub fn digest<'a>(
    sites: impl IntoIterator<Item = (&'a [(IpNet, Route)], &'a [(IpNet, Rtt)])>,
) -> String {
    fn net(h: &mut Sha256, p: &IpNet) {
        match p.addr() {
            IpAddr::V4(a) => h.update(a.octets()),
            IpAddr::V6(a) => h.update(a.octets()),
        }
        h.update([p.prefix_len()]);
    }
    let mut h = Sha256::new();
    for (i, (routes, rtt)) in sites.into_iter().enumerate() {
        // Lengths and the site's position frame each part: a route moving from one site's
        // table to the next changes the digest.
        h.update((i as u64).to_be_bytes());
        h.update((routes.len() as u64).to_be_bytes());
        for (p, r) in routes {
            net(&mut h, p);
            h.update(r.path_len.to_be_bytes());
            h.update(r.neighbor_as.to_be_bytes());
            h.update(r.peer_as.to_be_bytes());
            match r.next_hop {
                IpAddr::V4(a) => h.update(a.octets()),
                IpAddr::V6(a) => h.update(a.octets()),
            }
            h.update(r.med.map_or([0; 5], |m| {
                let b = m.to_be_bytes();
                [1, b[0], b[1], b[2], b[3]]
            }));
        }
        h.update((rtt.len() as u64).to_be_bytes());
        for (p, v) in rtt {
            net(&mut h, p);
            h.update(v.0.to_be_bytes());
        }
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prefix::order::sorted;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn net(i: u8, len: u8) -> IpNet {
        IpNet::new(std::net::Ipv4Addr::new(10, i, 0, 0).into(), len)
            .unwrap()
            .trunc()
    }

    proptest! {
        /// Patching gives what applying the changes to a map and sorting it gives, for
        /// small batches (in place) and large ones (merged).
        #[test]
        fn patch_is_a_sorted_map_update(
            start in proptest::collection::vec((any::<u8>(), 8u8..=24, any::<u16>()), 0..200),
            changes in proptest::collection::vec(
                (any::<u8>(), 8u8..=24, proptest::option::of(any::<u16>())), 0..200),
        ) {
            let table = sorted(start.iter().map(|&(i, l, v)| (net(i, l), v)).collect());
            let mut want: BTreeMap<_, _> =
                table.iter().map(|(p, v)| (sort_key(p), (*p, *v))).collect();
            let changes: Vec<(IpNet, Option<u16>)> =
                changes.iter().map(|&(i, l, v)| (net(i, l), v)).collect();
            for (p, v) in &changes {
                match v {
                    Some(v) => { want.insert(sort_key(p), (*p, *v)); }
                    None => { want.remove(&sort_key(p)); }
                }
            }
            let mut got = table.clone();
            patch(&mut got, changes);
            let want: Vec<_> = want.into_values().collect();
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn the_digest_follows_every_field_and_site() {
        let p: IpNet = "198.18.0.0/16".parse().unwrap();
        let r = Route {
            path_len: 2,
            neighbor_as: 64501,
            peer_as: 64500,
            next_hop: "203.0.113.2".parse().unwrap(),
            med: None,
        };
        let routes = [(p, r.clone())];
        let rtt = [(p, Rtt(40_000_000))];
        let base = digest([(&routes[..], &rtt[..]), (&[][..], &[][..])]);
        assert_eq!(base, digest([(&routes[..], &rtt[..]), (&[][..], &[][..])]));
        let med = [(p, Route { med: Some(0), ..r })];
        assert_ne!(base, digest([(&med[..], &rtt[..]), (&[][..], &[][..])]));
        let slower = [(p, Rtt(41_000_000))];
        assert_ne!(
            base,
            digest([(&routes[..], &slower[..]), (&[][..], &[][..])])
        );
        assert_ne!(base, digest([(&[][..], &[][..]), (&routes[..], &rtt[..])]));
    }

    /// The live state's digest for a fleet's manifest, over one site's full table from its
    /// router (577,703 routes) and as many RTT values: `cargo test --release -p
    /// director-plan digest_at_scale -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn digest_at_scale() {
        let n = 577_703u32;
        let routes: Vec<(IpNet, Route)> = (0..n)
            .map(|i| {
                let p = IpNet::V4(ipnet::Ipv4Net::new((i << 8).into(), 24).unwrap());
                let r = Route {
                    path_len: i % 9,
                    neighbor_as: 64_500 + i % 30,
                    peer_as: 64_500,
                    next_hop: "203.0.113.2".parse().unwrap(),
                    med: None,
                };
                (p, r)
            })
            .collect();
        let rtt: Vec<(IpNet, Rtt)> = routes
            .iter()
            .map(|(p, r)| (*p, Rtt(u64::from(r.path_len) * 1_000_000)))
            .collect();
        let t = std::time::Instant::now();
        let d = digest([(&routes[..], &rtt[..])]);
        eprintln!(
            "live digest: {:?} for {n} routes and {n} RTT values ({})",
            t.elapsed(),
            &d[..12]
        );
    }
}
