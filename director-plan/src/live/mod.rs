//! Inputs that change while `run` runs: BGP from the sites' routers (BMP, in
//! [`crate::inputs::bmp`]) and RTT from the sites' agents ([`rtt`]). What is here is pure:
//! it keeps the live values beside the files' and patches [`crate::data::Data`] where they
//! changed, so that only the prefixes under a change are decided again.

pub mod rtt;

use crate::model::IpNet;
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
}
