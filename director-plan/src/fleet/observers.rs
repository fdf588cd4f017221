//! Health in a fleet: which edges observe a server, and when their votes take it out.
//!
//! Each server gets `k` observers chosen by rendezvous hashing over the live edges, spread
//! over sites first (one edge per site, the sites in the order of their best edge's score,
//! then a second per site, ...), so every edge and the publisher compute the same set from
//! the same list, and an edge joining or leaving moves only the servers it wins or loses.

use std::collections::{BTreeMap, HashMap};

/// An edge as the fleet lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edge {
    pub name: String,
    pub site: String,
}

fn score(server: &str, edge: &str) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in server.bytes().chain([0]).chain(edge.bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    // FNV's low bits mix poorly over similar names: finish with a 64-bit avalanche.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The names of `server`'s observers among `edges` (at most `k`, fewer when the fleet is
/// smaller), in the order they were chosen.
pub fn observers<'a>(server: &str, edges: &'a [Edge], k: usize) -> Vec<&'a str> {
    let mut by_site: BTreeMap<&str, Vec<(u64, &str)>> = BTreeMap::new();
    for e in edges {
        by_site
            .entry(e.site.as_str())
            .or_default()
            .push((score(server, &e.name), e.name.as_str()));
    }
    let mut sites: Vec<Vec<(u64, &str)>> = by_site
        .into_values()
        .map(|mut v| {
            // Highest score first; the name breaks ties so the order is total.
            v.sort_unstable_by(|a, b| b.cmp(a));
            v.dedup_by_key(|e| e.1);
            v
        })
        .collect();
    sites.sort_unstable_by(|a, b| b[0].cmp(&a[0]));
    let mut out = Vec::with_capacity(k);
    let mut round = 0;
    while out.len() < k {
        let before = out.len();
        for s in &sites {
            if let Some((_, name)) = s.get(round) {
                if out.len() < k {
                    out.push(*name);
                }
            }
        }
        if out.len() == before {
            break;
        }
        round += 1;
    }
    out
}

/// Votes needed to take a server out, of `n` observers: a strict majority.
pub fn majority(n: usize) -> usize {
    n / 2 + 1
}

/// Whether a server is out: at least `quorum(observers)` of its observers voted it down.
/// Votes of edges that are not its observers do not count, nor do missing ones.
pub fn is_down(observers: &[&str], down_votes: &HashMap<String, bool>, quorum: usize) -> bool {
    let down = observers
        .iter()
        .filter(|o| down_votes.get(**o).copied().unwrap_or(false))
        .count();
    !observers.is_empty() && down >= quorum
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fleet(spec: &[(&str, &str)]) -> Vec<Edge> {
        spec.iter()
            .map(|(n, s)| Edge {
                name: n.to_string(),
                site: s.to_string(),
            })
            .collect()
    }

    #[test]
    fn spreads_over_sites_first() {
        let edges = fleet(&[
            ("a1", "ams"),
            ("a2", "ams"),
            ("a3", "ams"),
            ("f1", "fra"),
            ("l1", "lon"),
        ]);
        for server in ["s1", "s2", "s3", "web-7"] {
            let o = observers(server, &edges, 3);
            assert_eq!(o.len(), 3);
            assert!(o.contains(&"f1") && o.contains(&"l1"), "{server}: {o:?}");
            // The same set whatever order the fleet is listed in.
            let mut rev = edges.clone();
            rev.reverse();
            assert_eq!(observers(server, &rev, 3), o);
        }
    }

    #[test]
    fn fewer_edges_than_k() {
        let edges = fleet(&[("e1", "x"), ("e2", "y")]);
        assert_eq!(observers("s", &edges, 3).len(), 2);
        assert!(observers("s", &[], 3).is_empty());
    }

    #[test]
    fn an_edge_leaving_moves_only_what_it_observed() {
        let edges = fleet(&[
            ("e1", "a"),
            ("e2", "b"),
            ("e3", "c"),
            ("e4", "d"),
            ("e5", "e"),
        ]);
        let without: Vec<Edge> = edges.iter().filter(|e| e.name != "e5").cloned().collect();
        for i in 0..50 {
            let s = format!("server-{i}");
            let before = observers(&s, &edges, 2);
            if !before.contains(&"e5") {
                assert_eq!(observers(&s, &without, 2), before, "{s}");
            }
        }
    }

    #[test]
    fn majority_of_observers() {
        let obs = ["e1", "e2", "e3"];
        let votes = |d: &[&str]| -> HashMap<String, bool> {
            obs.iter().map(|o| (o.to_string(), d.contains(o))).collect()
        };
        let q = majority(3);
        assert!(!is_down(&obs, &votes(&["e1"]), q));
        assert!(is_down(&obs, &votes(&["e1", "e3"]), q));
        // A non-observer's vote does not count.
        let mut v = votes(&["e1"]);
        v.insert("e9".into(), true);
        assert!(!is_down(&obs, &v, q));
        assert!(!is_down(&[], &v, 1));
    }
}
