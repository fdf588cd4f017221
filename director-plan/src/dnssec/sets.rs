//! The address sets the kernel can answer a decision with, so each can be signed ahead:
//! `select` starts at one usable primary (by weight or hash) and takes the usable
//! candidates in rotation from it, so a decision, its servers' health and a family give at
//! most one set per usable primary (one when none is usable), whatever the key. Signing
//! them all keeps DistributedDirector's sharing for DO clients too (most resolvers set
//! DO), instead of serving them one set.

use std::net::IpAddr;

use director_common::maps::Decision;
use director_common::select::{emit_ranked, primaries, usable_mask};

use super::key::ZoneKey;
use super::sign::{rrsig, Window};
use super::wire::{rtype, Name, Record};

/// Each set `select` can draw from `d` with `answers` answers, given which servers are
/// `usable`, with the candidate index it starts at: the sets a DO answer may need signed.
/// Empty when nothing is usable.
pub fn drawable(d: &Decision, answers: u8, usable: impl Fn(u16) -> bool) -> Vec<(u8, Vec<u16>)> {
    let (ok, _) = usable_mask(d, &usable);
    if ok == 0 {
        return Vec::new();
    }
    let want = usize::from(answers).clamp(1, director_common::limits::MAX_CANDIDATES);
    let mut starts: Vec<usize> = (0..primaries(d)).filter(|j| ok & (1 << j) != 0).collect();
    if starts.is_empty() {
        // No usable primary: `pick_start` gives 0, and the fallbacks answer.
        starts.push(0);
    }
    starts
        .into_iter()
        .map(|s| {
            let mut v = Vec::new();
            emit_ranked(d, ok, s, |id| {
                v.push(id);
                v.len() >= want
            });
            (s as u8, v)
        })
        .collect()
}

/// The A or AAAA RRset of `owner` with `addrs` and its RRSIG RDATA: what a DO answer
/// carries, the records in any order (the signature covers the set).
pub fn sign_addresses(
    owner: &Name,
    addrs: &[IpAddr],
    ttl: u32,
    w: Window,
    key: &ZoneKey,
    signer: &Name,
) -> anyhow::Result<Vec<u8>> {
    let set: Vec<Record> = addrs
        .iter()
        .map(|a| match a {
            IpAddr::V4(v4) => Record {
                owner: owner.clone(),
                rtype: rtype::A,
                ttl,
                rdata: v4.octets().to_vec(),
            },
            IpAddr::V6(v6) => Record {
                owner: owner.clone(),
                rtype: rtype::AAAA,
                ttl,
                rdata: v6.octets().to_vec(),
            },
        })
        .collect();
    rrsig(&set, ttl, w, key, signer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use director_common::select::select;
    use proptest::prelude::*;

    fn decision(n: usize, primary: u8, weights: &[u16]) -> Decision {
        let mut d = Decision {
            prefix_len: 24,
            count: n as u8,
            primary,
            ..Default::default()
        };
        for i in 0..n {
            d.servers[i] = i as u16 + 1;
            d.weights[i] = weights[i % weights.len()];
        }
        d
    }

    proptest! {
        /// Whatever the key, the set `select` answers with is one of the drawable sets.
        #[test]
        fn every_selection_is_a_drawable_set(
            n in 1usize..=8,
            primary in 1u8..=8,
            weights in proptest::collection::vec(0u16..5, 1..8),
            answers in 1u8..=8,
            down in 0u16..256,
            key: u32,
        ) {
            let d = decision(n, primary.min(n as u8), &weights);
            let usable = |id: u16| down & (1 << (id - 1)) == 0;
            let mut got = Vec::new();
            select(&d, key, answers, usable, |id| { got.push(id); true });
            let sets = drawable(&d, answers, usable);
            if got.is_empty() {
                prop_assert!(sets.is_empty());
            } else {
                let mut g = got.clone();
                g.sort_unstable();
                prop_assert!(
                    sets.iter().any(|(_, s)| { let mut s = s.clone(); s.sort_unstable(); s == g }),
                    "{got:?} not in {sets:?}"
                );
            }
        }
    }

    #[test]
    fn one_set_per_usable_primary() {
        let d = decision(4, 3, &[1]);
        // Primaries 1, 2, 3 (2 down), fallback 4; two answers.
        let sets = drawable(&d, 2, |id| id != 2);
        assert_eq!(sets, vec![(0, vec![1, 3]), (2, vec![3, 1])]);
        // Nothing usable among the primaries: the fallback alone.
        assert_eq!(drawable(&d, 2, |id| id == 4), vec![(0, vec![4])]);
        assert!(drawable(&d, 2, |_| false).is_empty());
    }
}
