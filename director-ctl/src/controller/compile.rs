//! Decisions to kernel entries: the fewest LPM entries that give every address exactly the
//! decision computed for its most specific prefix, and the difference between two such
//! tables (what to rewrite when an input changes).
//!
//! Pure: no aya. `kernel::Maps::apply_decisions` writes what this produces.

use std::collections::HashMap;

use director_common::maps::Decision;

use super::sweep::sort_key;
use ipnet::IpNet;

/// What an entry answers, without the prefix length it is stored under (entries for
/// different prefixes with the same ranking are the same decision).
fn same_ranking(a: &Decision, b: &Decision) -> bool {
    let mut a = *a;
    a.prefix_len = b.prefix_len;
    a == *b
}

/// One service's table.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Table {
    /// Entries to write, in [`sort_key`] order; each value's `prefix_len` is its prefix's length.
    pub entries: Vec<(IpNet, Decision)>,
    /// Input prefixes left out because the entry covering them already gives their decision.
    pub saved: usize,
}

/// Compresses one service's decisions (prefix -> decision for that prefix). Prefixes must be
/// normalised (host bits zero). The decision's `prefix_len` is set to the prefix's length.
pub fn compress(mut decisions: Vec<(IpNet, Decision)>) -> Table {
    decisions.sort_unstable_by_key(|(p, _)| sort_key(p));
    decisions.dedup_by_key(|(p, _)| *p);
    let mut c = Compressor::default();
    for (p, d) in decisions {
        c.push(p, d);
    }
    c.finish()
}

/// [`compress`] for decisions that arrive already in [`sort_key`] order (the controller computes
/// them in that order), without holding the uncompressed table.
#[derive(Default)]
pub struct Compressor {
    /// Ancestors of the current prefix among the inputs, with their decisions: what an
    /// address would get from the entries written so far.
    stack: Vec<(IpNet, Decision)>,
    out: Table,
}

impl Compressor {
    /// Starts below `p`: what covers the prefixes pushed next. Not an entry itself.
    pub fn seed(&mut self, p: IpNet, mut d: Decision) {
        d.prefix_len = p.prefix_len();
        self.stack.push((p, d));
    }

    pub fn push(&mut self, p: IpNet, mut d: Decision) {
        while self.stack.last().is_some_and(|(a, _)| !a.contains(&p)) {
            self.stack.pop();
        }
        d.prefix_len = p.prefix_len();
        if self
            .stack
            .last()
            .is_some_and(|(_, ad)| same_ranking(ad, &d))
        {
            self.out.saved += 1;
        } else {
            self.out.entries.push((p, d));
        }
        // Pushed either way: its children compare with its decision, which is what
        // addresses under it get whether or not it was written.
        self.stack.push((p, d));
    }

    pub fn finish(self) -> Table {
        self.out
    }
}

/// What changes between two tables of one service.
#[derive(Debug, Default, PartialEq)]
pub struct Diff {
    /// Entries to insert or overwrite.
    pub put: Vec<(IpNet, Decision)>,
    /// Entries to delete.
    pub delete: Vec<IpNet>,
}

impl Diff {
    pub fn is_empty(&self) -> bool {
        self.put.is_empty() && self.delete.is_empty()
    }
}

/// Where the entries under `root` sit in a table (they are contiguous in its order).
pub fn subtree_range(entries: &[(IpNet, Decision)], root: &IpNet) -> std::ops::Range<usize> {
    let start = entries.partition_point(|(p, _)| sort_key(p) < sort_key(root));
    let end = start
        + entries[start..]
            .iter()
            .take_while(|(p, _)| root.contains(p))
            .count();
    start..end
}

pub fn diff(old: &[(IpNet, Decision)], new: &[(IpNet, Decision)]) -> Diff {
    let before: HashMap<IpNet, &Decision> = old.iter().map(|(p, d)| (*p, d)).collect();
    let mut out = Diff::default();
    let mut seen = std::collections::HashSet::with_capacity(new.len());
    for (p, d) in new {
        seen.insert(*p);
        if before.get(p) != Some(&d) {
            out.put.push((*p, *d));
        }
    }
    out.delete = old
        .iter()
        .map(|(p, _)| *p)
        .filter(|p| !seen.contains(p))
        .collect();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::sweep::lookup;
    use proptest::prelude::*;

    fn dec(server: u16) -> Decision {
        let mut d = Decision {
            count: 1,
            primary: 1,
            ..Default::default()
        };
        d.servers[0] = server;
        d.weights[0] = 1;
        d
    }

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    #[test]
    fn children_equal_to_their_parent_are_not_written() {
        let t = compress(vec![
            (net("0.0.0.0/0"), dec(1)),
            (net("10.0.0.0/8"), dec(1)),
            (net("10.1.0.0/16"), dec(2)),
            (net("10.1.2.0/24"), dec(1)),
            (net("10.1.3.0/24"), dec(2)),
        ]);
        let written: Vec<String> = t.entries.iter().map(|(p, _)| p.to_string()).collect();
        assert_eq!(written, ["0.0.0.0/0", "10.1.0.0/16", "10.1.2.0/24"]);
        assert_eq!(t.saved, 2);
        assert_eq!(t.entries[1].1.prefix_len, 16);
    }

    #[test]
    fn diff_puts_changed_and_deletes_gone() {
        let a = compress(vec![
            (net("0.0.0.0/0"), dec(1)),
            (net("192.0.2.0/24"), dec(2)),
        ])
        .entries;
        let b = compress(vec![
            (net("0.0.0.0/0"), dec(3)),
            (net("198.51.100.0/24"), dec(2)),
        ])
        .entries;
        let d = diff(&a, &b);
        assert_eq!(d.put.len(), 2);
        assert_eq!(d.delete, vec![net("192.0.2.0/24")]);
        assert!(diff(&b, &b).is_empty());
    }

    fn arb_prefix() -> impl Strategy<Value = IpNet> {
        // Small address space so prefixes nest often.
        (0u32..256, 0u8..=16).prop_map(|(a, len)| {
            let addr = std::net::Ipv4Addr::from(0x0a00_0000u32 | (a << 8));
            IpNet::V4(ipnet::Ipv4Net::new(addr, 8 + len).unwrap().trunc())
        })
    }

    proptest! {
        /// Every address resolves to the decision of its most specific input prefix.
        #[test]
        fn compressed_table_answers_like_the_full_one(
            input in proptest::collection::vec((arb_prefix(), 1u16..4), 1..60),
            probes in proptest::collection::vec(0u32..0x1_0000, 1..200),
        ) {
            let mut input: Vec<(IpNet, Decision)> =
                input.into_iter().map(|(p, s)| (p, dec(s))).collect();
            input.push((net("0.0.0.0/0"), dec(9)));
            let mut full = input.clone();
            full.sort_unstable_by_key(|(p, _)| sort_key(p));
            full.dedup_by_key(|(p, _)| *p);
            for (p, d) in full.iter_mut() {
                d.prefix_len = p.prefix_len();
            }
            let t = compress(input);
            prop_assert_eq!(t.entries.len() + t.saved, full.len());
            for x in probes {
                let addr = std::net::Ipv4Addr::from(0x0a00_0000u32 | x);
                let host = crate::controller::sweep::host(addr.into());
                let want = lookup(&full, &host).unwrap();
                let got = lookup(&t.entries, &host).unwrap();
                prop_assert!(same_ranking(want, got));
            }
        }
    }
}
