//! The order an update writes its entries in, so that every address answers old or new
//! after every single write, and the cut of a family into halves for two writer threads.
//! Pure, so that the proofs of both run without a kernel.

use director_common::maps::{Decision, DecisionRef};
use ipnet::IpNet;

/// The order an in-place update writes in: each put before the puts of the prefixes that
/// cover it (more specific first), each deletion before the deletions of the prefixes it
/// covers (less specific first). Then every address gets its old answer or its new one
/// after every single write. Only the entries covering one address matter to it, and they
/// are nested, so for it the puts go from its most specific prefix to its least, then the
/// deletions from least to most. During the puts, an address whose most specific entry
/// already holds its new value has every more specific new entry written (they went
/// first), so that entry is its new answer; one whose most specific entry is not rewritten
/// yet still has all old entries, so that is its old answer. During the deletions every new
/// entry is in; an address's most specific entry is either new, or an old one going away
/// whose more specific old entries are all still there (they go later), so it is the old
/// answer.
///
/// Within that, entries go in address order (puts by their last address, so a prefix
/// follows what it covers; deletions by their first), one family after the other: the
/// kernel's trie inserts twice as fast along addresses as in a length-sorted order, which
/// jumps across the whole trie, and a batch holds one family. Puts that come in table
/// order (a diff of tables: each prefix before those it covers) are turned around with a
/// stack in one pass, not sorted: a first start puts a whole table.
pub fn update_order<'a>(
    put: &'a [(IpNet, Decision)],
    delete: &'a [IpNet],
) -> (Vec<&'a (IpNet, Decision)>, Vec<&'a IpNet>) {
    let family = |p: &IpNet| if p.addr().is_ipv4() { 4u8 } else { 6 };
    let first = |p: &IpNet| (family(p), span(p).0);
    let last = |p: &IpNet| (family(p), span(p).1);
    let mut put: Vec<&(IpNet, Decision)> = put.iter().collect();
    if put.is_sorted_by(|a, b| (first(&a.0), a.0.prefix_len()) < (first(&b.0), b.0.prefix_len())) {
        put = covered_first(put);
    } else {
        put.sort_by_key(|(p, _)| (last(p), std::cmp::Reverse(p.prefix_len())));
    }
    let mut delete: Vec<&IpNet> = delete.iter().collect();
    delete.sort_by_key(|p| (first(p), p.prefix_len()));
    (put, delete)
}

/// Entries in table order (by first address, then length; each prefix once) reordered so that each
/// comes after every entry it covers, siblings in address order: the order
/// [`update_order`] sorts puts into. An entry leaves the stack of open prefixes when the
/// first entry outside it arrives, by which time everything it covers has left.
fn covered_first<T>(table_order: Vec<&(IpNet, T)>) -> Vec<&(IpNet, T)> {
    let mut out = Vec::with_capacity(table_order.len());
    let mut open: Vec<&(IpNet, T)> = Vec::new();
    for e in table_order {
        while let Some(top) = open.pop_if(|top| !top.0.contains(&e.0)) {
            out.push(top);
        }
        open.push(e);
    }
    out.extend(open.into_iter().rev());
    out
}

/// A prefix's first and last address, as numbers.
fn span(p: &IpNet) -> (u128, u128) {
    match p {
        IpNet::V4(n) => (
            u128::from(u32::from(n.network())),
            u128::from(u32::from(n.broadcast())),
        ),
        IpNet::V6(n) => (u128::from(n.network()), u128::from(n.broadcast())),
    }
}

/// From this many entries, `Maps::put_all` writes with two threads.
pub(super) const SPLIT_FROM: usize = 8192;

/// One family's entries (in write order) cut at an address `cut`: those wholly below it,
/// those from it on, and those across it (the few prefixes holding `cut` and addresses
/// below it, at most one per length and service). No entry below contains one from
/// `cut` on, nor the other way round, so the two need no order between them; an entry
/// across may contain entries of both, so it goes after both.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Halves<'a> {
    pub(super) lower: Vec<&'a Put<'a>>,
    pub(super) upper: Vec<&'a Put<'a>>,
    pub(super) across: Vec<&'a Put<'a>>,
}

/// An entry to write: service, prefix, value.
pub(super) type Put<'a> = (u32, &'a IpNet, DecisionRef);

impl<'a> Halves<'a> {
    /// Cut at the median first address, so the halves are about the same size.
    pub(super) fn of(entries: &[&'a Put<'a>]) -> Self {
        let mut h = Self::default();
        if entries.is_empty() {
            return h;
        }
        let mut firsts: Vec<u128> = entries.iter().map(|e| span(e.1).0).collect();
        let cut = *firsts.select_nth_unstable(entries.len() / 2).1;
        for e in entries {
            let (first, last) = span(e.1);
            if last < cut {
                h.lower.push(*e);
            } else if first >= cut {
                h.upper.push(*e);
            } else {
                h.across.push(*e);
            }
        }
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipnet::Ipv4Net;
    use proptest::prelude::*;
    use std::collections::BTreeMap;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    fn lookup(t: &BTreeMap<IpNet, u16>, a: u32) -> Option<u16> {
        let host = IpNet::from(IpAddr::V4(a.into()));
        t.iter()
            .filter(|(p, _)| p.contains(&host))
            .max_by_key(|(p, _)| p.prefix_len())
            .map(|(_, v)| *v)
    }

    /// Every probed address (one per /16 of 10.0.0.0/8) answers in `t` as in `old` or
    /// as in `new`.
    fn old_or_new(
        t: &BTreeMap<IpNet, u16>,
        old: &BTreeMap<IpNet, u16>,
        new: &BTreeMap<IpNet, u16>,
    ) -> Result<(), TestCaseError> {
        for a in (0..256u32).map(|i| 0x0a00_0000 | (i << 16)) {
            let got = lookup(t, a);
            prop_assert!(
                got == lookup(old, a) || got == lookup(new, a),
                "{}: {got:?}",
                Ipv4Addr::from(a)
            );
        }
        Ok(())
    }

    fn arb_table() -> impl Strategy<Value = BTreeMap<IpNet, u16>> {
        proptest::collection::btree_map(
            (0u32..64, 0u8..=6).prop_map(|(a, len)| {
                let addr = Ipv4Addr::from(0x0a00_0000u32 | (a << 18));
                IpNet::V4(Ipv4Net::new(addr, 8 + len).unwrap().trunc())
            }),
            1u16..4,
            0..12,
        )
    }

    proptest! {
        /// Written one entry at a time in this order, every address answers with its old
        /// or its new decision after every write.
        #[test]
        fn each_write_leaves_old_or_new_answers(old in arb_table(), new in arb_table()) {
            let dec = |s: u16| {
                let mut d = Decision { count: 1, primary: 1, ..Default::default() };
                d.servers[0] = s;
                d
            };
            let put: Vec<(IpNet, Decision)> = new
                .iter()
                .filter(|(p, v)| old.get(p) != Some(v))
                .map(|(p, v)| (*p, dec(*v)))
                .collect();
            let delete: Vec<IpNet> = old.keys().filter(|p| !new.contains_key(p)).copied().collect();
            let (put, delete) = update_order(&put, &delete);
            let mut t = old.clone();
            let check = |t: &BTreeMap<IpNet, u16>| old_or_new(t, &old, &new);
            for (p, d) in put {
                t.insert(*p, d.servers[0]);
                check(&t)?;
            }
            for p in delete {
                t.remove(p);
                check(&t)?;
            }
            prop_assert_eq!(t, new);
        }

        /// Cut into halves written by two threads in any interleaving, then the entries
        /// across the cut: every address still answers old or new after every write, and
        /// each part keeps the order it was given.
        #[test]
        fn halves_written_side_by_side_leave_old_or_new_answers(
            old in arb_table(),
            new in arb_table(),
            turns in proptest::collection::vec(any::<bool>(), 0..40),
        ) {
            let nets: Vec<IpNet> = new
                .iter()
                .filter(|(p, v)| old.get(p) != Some(v))
                .map(|(p, _)| *p)
                .collect();
            let put: Vec<(IpNet, Decision)> = nets.iter().map(|p| (*p, Decision::default())).collect();
            let (put, _) = update_order(&put, &[]);
            let refs: Vec<(u32, &IpNet, DecisionRef)> = put
                .iter()
                .map(|(p, _)| (1, p, DecisionRef { id: u32::from(new[p]), scope: 0, _pad: [0; 3] }))
                .collect();
            let order: Vec<&(u32, &IpNet, DecisionRef)> = refs.iter().collect();
            let h = Halves::of(&order);
            let position = |e: &&(u32, &IpNet, DecisionRef)| order.iter().position(|o| std::ptr::eq(*o, *e));
            for part in [&h.lower, &h.upper, &h.across] {
                let at: Vec<_> = part.iter().map(position).collect();
                prop_assert!(at.is_sorted(), "a part out of the given order: {at:?}");
            }
            prop_assert_eq!(h.lower.len() + h.upper.len() + h.across.len(), order.len());
            // Old entries the new table drops are left in place: this checks the puts.
            let mut t = old.clone();
            let mut after = old.clone();
            after.extend(new.iter().map(|(p, v)| (*p, *v)));
            let check = |t: &BTreeMap<IpNet, u16>| old_or_new(t, &old, &after);
            let (mut lower, mut upper) = (h.lower.iter(), h.upper.iter());
            let mut turns = turns.into_iter();
            loop {
                let next = match turns.next() {
                    Some(true) => lower.next().or_else(|| upper.next()),
                    Some(false) => upper.next().or_else(|| lower.next()),
                    None => lower.next().or_else(|| upper.next()),
                };
                let Some((_, p, r)) = next else { break };
                t.insert(**p, r.id as u16);
                check(&t)?;
            }
            for (_, p, r) in &h.across {
                t.insert(**p, r.id as u16);
                check(&t)?;
            }
            prop_assert_eq!(t, after);
        }
    }

    proptest! {
        /// Puts in table order take the one-pass path; it gives the order the sort does.
        #[test]
        fn table_order_puts_are_ordered_as_sorted_ones(
            nets in proptest::collection::btree_set(
                (0u32..64, 0u8..=6, any::<bool>()).prop_map(|(a, len, six)| if six {
                    IpNet::V6(ipnet::Ipv6Net::new(Ipv6Addr::from(0x2001_0db8u128 << 96 | u128::from(a) << 80), 32 + len).unwrap().trunc())
                } else {
                    IpNet::V4(Ipv4Net::new(Ipv4Addr::from(0x0a00_0000u32 | (a << 18)), 8 + len).unwrap().trunc())
                }),
                0..40,
            ),
        ) {
            let mut table: Vec<(IpNet, Decision)> = nets.into_iter().map(|p| (p, Decision::default())).collect();
            table.sort_by_key(|(p, _)| (p.network(), p.prefix_len()));
            let (fast, _) = update_order(&table, &[]);
            let mut shuffled = table.clone();
            shuffled.reverse();
            let (sorted, _) = update_order(&shuffled, &[]);
            let names = |v: Vec<&(IpNet, Decision)>| v.iter().map(|e| e.0).collect::<Vec<_>>();
            prop_assert_eq!(names(fast), names(sorted));
        }
    }

    #[test]
    fn halves_cut_at_an_address_and_keep_what_spans_it_for_last() {
        let nets: Vec<IpNet> = [
            "0.0.0.0/0",
            "10.0.0.0/8",
            "10.0.0.0/24",
            "10.1.0.0/16",
            "10.2.0.0/16",
            "192.0.2.0/24",
        ]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
        let refs: Vec<(u32, &IpNet, DecisionRef)> = nets
            .iter()
            .map(|p| (1, p, DecisionRef::default()))
            .collect();
        let order: Vec<_> = refs.iter().collect();
        let h = Halves::of(&order);
        let names = |v: &[&(u32, &IpNet, DecisionRef)]| {
            v.iter().map(|e| e.1.to_string()).collect::<Vec<_>>()
        };
        // The cut is the median first address, 10.1.0.0.
        assert_eq!(names(&h.lower), ["10.0.0.0/24"]);
        assert_eq!(
            names(&h.upper),
            ["10.1.0.0/16", "10.2.0.0/16", "192.0.2.0/24"]
        );
        assert_eq!(names(&h.across), ["0.0.0.0/0", "10.0.0.0/8"]);
        assert_eq!(Halves::of(&[]), Halves::default());
    }
}
