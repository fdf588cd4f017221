//! The BGP decision process as far as a collector sees it, shared by the MRT reader
//! ([`super::mrt`]) and the live BMP collector ([`super::bmp`]), so that a site's best route is
//! the same whichever way its routes arrive. The steps are listed in [`super::mrt`]'s module doc.

use std::cmp::Reverse;
use std::net::IpAddr;

use bgpkit_parser::models::{
    AsPath, AsPathSegment, AttributeValue, Attributes, NextHopAddress, Origin,
};

/// A route's attributes as the decision process and the metrics need them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Attrs {
    /// [`crate::model::Route::path_len`].
    pub path_len: u32,
    /// The path's first AS (after a collector's own prepend is stripped), or the peer's AS for
    /// an empty path.
    pub neighbor_as: u32,
    pub next_hop: Option<IpAddr>,
    pub med: Option<u32>,
    pub local_pref: Option<u32>,
    /// ORIGIN as its wire value: IGP 0 < EGP 1 < INCOMPLETE 2.
    pub origin: u8,
}

/// One candidate as the decision process compares it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ranked<'a> {
    pub attrs: &'a Attrs,
    /// Tie-breaks (step 5): the peer's address, then the ADD-PATH path id.
    pub peer_ip: IpAddr,
    pub path_id: u32,
}

impl Ranked<'_> {
    /// Steps 1-3 then the tie-breaks; smaller is better.
    fn key(&self) -> (Reverse<u32>, u32, u8, IpAddr, u32) {
        (
            Reverse(self.attrs.local_pref.unwrap_or(100)),
            self.attrs.path_len,
            self.attrs.origin,
            self.peer_ip,
            self.path_id,
        )
    }

    /// The same with MED (step 4) between steps 3 and 5, for routes of one neighbour AS.
    fn key_with_med(&self) -> (Reverse<u32>, u32, u8, u32, IpAddr, u32) {
        let k = self.key();
        (k.0, k.1, k.2, self.attrs.med.unwrap_or(0), k.3, k.4)
    }
}

/// The best of `candidates` ("deterministic MED": the best of each neighbour AS with MED,
/// then those winners without it). `candidates` is walked several times (O(n²) for n
/// candidates, which are a prefix's few peers), so that no allocation is made per prefix.
pub(crate) fn best<'a, T, I>(candidates: I) -> Option<T>
where
    I: Iterator<Item = (T, Ranked<'a>)> + Clone,
{
    let mut it = candidates.clone();
    let first = it.next()?;
    if it.next().is_none() {
        return Some(first.0);
    }
    // A candidate is its neighbour AS's winner when no other of that AS beats it with MED;
    // keys are unique (peer address and path id), so each AS has exactly one winner.
    let winners = candidates.clone().filter(|(_, c)| {
        let mine = c.key_with_med();
        !candidates
            .clone()
            .any(|(_, o)| o.attrs.neighbor_as == c.attrs.neighbor_as && o.key_with_med() < mine)
    });
    winners.min_by_key(|(_, c)| c.key()).map(|(t, _)| t)
}

/// The attributes of a route. `peer_as` stands in for the neighbour AS of an empty path;
/// `strip_as`, when given, is removed once from the front of the path (FRR prepends the
/// monitored router's own AS in BMP route monitoring; see [`path_metrics`]).
pub(crate) fn attrs_of(attributes: &Attributes, peer_as: u32, strip_as: Option<u32>) -> Attrs {
    let mut as_path: Option<&AsPath> = None;
    let mut as4_path: Option<&AsPath> = None;
    let mut next_hop = None;
    let mut mp_next_hop = None;
    let mut med = None;
    let mut local_pref = None;
    let mut origin = Origin::INCOMPLETE;
    for attr in attributes.iter() {
        match attr {
            AttributeValue::AsPath(p) => as_path = Some(p),
            AttributeValue::As4Path(p) => as4_path = Some(p),
            AttributeValue::NextHop(a) => next_hop = Some(*a),
            AttributeValue::MpReachNlri(n) => {
                mp_next_hop = n.next_hop.as_ref().map(NextHopAddress::global_addr);
            }
            AttributeValue::MultiExitDiscriminator(m) => med = Some(*m),
            AttributeValue::LocalPreference(l) => local_pref = Some(*l),
            AttributeValue::Origin(o) => origin = *o,
            _ => {}
        }
    }
    let merged;
    let path = match (as_path, as4_path) {
        (Some(p), Some(p4)) => {
            merged = AsPath::merge_aspath_as4path(p, p4);
            Some(&merged)
        }
        (p, p4) => p.or(p4),
    };
    let (path_len, first_as) = path.map_or((0, None), |p| path_metrics(p, strip_as));
    Attrs {
        path_len,
        neighbor_as: first_as.unwrap_or(peer_as),
        next_hop: next_hop.or(mp_next_hop),
        med,
        local_pref,
        origin: origin as u8,
    }
}

/// The path's length (an AS_SET counts one, confederation segments nothing) and its first AS
/// (of a sequence or set), after removing `strip_as` once if the path starts with it.
///
/// Only one copy is removed, and only from the front of a leading AS_SEQUENCE: that is where
/// a prepend lands. Removing it is harmless on routers that do not prepend, because a
/// received path never starts with the receiving router's own AS: an eBGP peer puts its own
/// AS first, and an iBGP peer (whose AS is the router's) sends the path as it learnt it, which
/// cannot contain the router's AS without being a loop. So for an iBGP route that FRR shows
/// as `[own, X, …]` this gives `[X, …]`, and for one originated inside the AS (`[own]`) the
/// empty path, whose neighbour is then the peer's AS: the router's own, as it should be.
pub(crate) fn path_metrics(path: &AsPath, strip_as: Option<u32>) -> (u32, Option<u32>) {
    let mut len = 0u32;
    let mut first = None;
    for (i, seg) in path.iter_segments().enumerate() {
        match seg {
            AsPathSegment::AsSequence(v) => {
                let skip = usize::from(
                    i == 0 && strip_as.is_some() && v.first().map(|a| u32::from(*a)) == strip_as,
                );
                let rest = &v[skip.min(v.len())..];
                len += rest.len() as u32;
                first = first.or(rest.first().map(|a| u32::from(*a)));
            }
            AsPathSegment::AsSet(v) => {
                len += 1;
                first = first.or(v.first().map(|a| u32::from(*a)));
            }
            AsPathSegment::ConfedSequence(_) | AsPathSegment::ConfedSet(_) => {}
        }
    }
    (len, first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The process as mrt.rs first wrote it (groups per neighbour AS, then the winners): the
    /// reference the allocation-free [`best`] must agree with.
    fn reference(c: &[(usize, Attrs, IpAddr, u32)]) -> Option<usize> {
        let r = |x: &(usize, Attrs, IpAddr, u32)| Ranked {
            attrs: &c[x.0].1,
            peer_ip: x.2,
            path_id: x.3,
        };
        let mut groups: Vec<&(usize, Attrs, IpAddr, u32)> = Vec::new();
        for x in c {
            match groups
                .iter_mut()
                .find(|g| g.1.neighbor_as == x.1.neighbor_as)
            {
                None => groups.push(x),
                Some(g) => {
                    if r(x).key_with_med() < r(g).key_with_med() {
                        *g = x;
                    }
                }
            }
        }
        groups.into_iter().min_by_key(|x| r(x).key()).map(|x| x.0)
    }

    fn arb_attrs() -> impl Strategy<Value = Attrs> {
        (
            0u32..4,
            1u32..4,
            prop::option::of(0u32..3),
            prop::option::of(prop_oneof![Just(50u32), Just(100), Just(200)]),
            0u8..3,
        )
            .prop_map(|(path_len, neighbor_as, med, local_pref, origin)| Attrs {
                path_len,
                neighbor_as,
                next_hop: None,
                med,
                local_pref,
                origin,
            })
    }

    proptest! {
        /// Small value ranges so that ties, shared neighbour ASes and MED matter often.
        #[test]
        fn inputs_decision_best_matches_grouped_reference(
            raw in prop::collection::vec((arb_attrs(), 0u8..4, 0u32..2), 0..7)
        ) {
            // Keys must be unique, as (peer, path id) are in both users.
            let mut seen = std::collections::HashSet::new();
            let c: Vec<(usize, Attrs, IpAddr, u32)> = raw
                .into_iter()
                .filter(|(_, p, id)| seen.insert((*p, *id)))
                .enumerate()
                .map(|(i, (a, p, id))| (i, a, IpAddr::from([10, 0, 0, p]), id))
                .collect();
            let got = best(c.iter().map(|x| (x.0, Ranked { attrs: &x.1, peer_ip: x.2, path_id: x.3 })));
            prop_assert_eq!(got, reference(&c));
        }
    }

    #[test]
    fn inputs_decision_strip_once_from_the_front() {
        let p = |segs: Vec<AsPathSegment>| AsPath::from_segments(segs);
        let seq = |v: &[u32]| AsPathSegment::sequence(v);
        // eBGP peer 65001 of router 65000, FRR's prepend in front.
        assert_eq!(
            path_metrics(&p(vec![seq(&[65000, 65001, 7])]), Some(65000)),
            (2, Some(65001))
        );
        // iBGP (peer AS = router AS): only the prepended copy goes.
        assert_eq!(
            path_metrics(&p(vec![seq(&[65000, 65000, 7])]), Some(65000)),
            (2, Some(65000))
        );
        assert_eq!(
            path_metrics(&p(vec![seq(&[65000])]), Some(65000)),
            (0, None)
        );
        // No prepend (GoBGP): nothing removed.
        assert_eq!(
            path_metrics(&p(vec![seq(&[65001, 7])]), Some(65000)),
            (2, Some(65001))
        );
        // Not in front, or not a sequence: untouched.
        assert_eq!(
            path_metrics(&p(vec![seq(&[7, 65000])]), Some(65000)),
            (2, Some(7))
        );
        assert_eq!(
            path_metrics(&p(vec![AsPathSegment::set([65000, 7])]), Some(65000)),
            (1, Some(65000))
        );
        assert_eq!(
            path_metrics(&p(vec![seq(&[65000, 7])]), None),
            (2, Some(65000))
        );
    }
}
