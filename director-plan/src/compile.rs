//! Decisions to kernel entries: the fewest LPM entries that give every address exactly the
//! decision computed for its most specific prefix ([`minimal`]), each with a true ECS
//! scope, and the difference between two such tables (what to rewrite when an input
//! changes).
//!
//! Pure: no aya. `kernel::Maps::apply_decisions` writes what this produces.

use director_common::maps::Decision;

use crate::minimal::{self, Interner};
use crate::prefix::order::{covers, sort_key, subtree_range};
use crate::prefix::sweep::Sweep;
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
    /// Entries to write, in [`sort_key`] order; each value's `prefix_len` is its ECS scope
    /// (see [`minimal`]).
    pub entries: Vec<(IpNet, Decision)>,
    /// Input prefixes (client networks with a decision of their own) minus entries.
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
        .expect("the minimal table answers like its inputs")
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
    pub fn push(&mut self, p: IpNet, mut d: Decision) {
        while self.stack.last().is_some_and(|(a, _)| !covers(a, &p)) {
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

    /// Takes `p`, decided `d`, as an ancestor already pushed before (by another run over
    /// the prefixes before this one's): compared with, never written.
    pub fn seed(&mut self, p: IpNet, mut d: Decision) {
        while self.stack.last().is_some_and(|(a, _)| !covers(a, &p)) {
            self.stack.pop();
        }
        d.prefix_len = p.prefix_len();
        self.stack.push((p, d));
    }

    /// What was kept so far (before the minimal construction).
    #[cfg(test)]
    pub fn kept(&self) -> &Table {
        &self.out
    }

    /// Appends what `next`, a run over the prefixes right after this one's, kept.
    pub fn append(&mut self, next: Compressor) {
        self.out.entries.extend(next.out.entries);
        self.out.saved += next.out.saved;
    }

    /// The minimal table for what was pushed (the entries kept so far already give every
    /// address its decision; the minimal construction merges what they leave apart).
    /// Checked against them before it is returned (see [`equivalent_by`]): a table that
    /// answered any address otherwise is an error, never written.
    pub fn finish(self) -> anyhow::Result<Table> {
        let interned = self.intern();
        let [v4, v6] = [0, 1].map(|f| interned.minimize(f));
        Ok(interned.assemble([v4?, v6?]))
    }

    /// The kept entries as small ids, split by family, for [`Interned::minimize`].
    pub fn intern(self) -> Interned {
        let inputs = self.out.entries.len() + self.out.saved;
        // Decisions become small ids first, and the full values are dropped: at full
        // scale that halves what each service's construction holds at once.
        let mut ids = Interner::default();
        let table: Vec<(IpNet, minimal::Id)> = self
            .out
            .entries
            .into_iter()
            .map(|(p, d)| (p, ids.id(&d)))
            .collect();
        let split = table.partition_point(|(p, _)| matches!(p, IpNet::V4(_)));
        let mut v4 = table;
        let v6 = v4.split_off(split);
        Interned {
            ids,
            parts: [v4, v6],
            inputs,
        }
    }
}

/// One service's kept entries as ids, IPv4 and IPv6 apart: the minimal construction works
/// on each family alone, so the parts of several services can be built side by side.
pub struct Interned {
    ids: Interner,
    parts: [Vec<(IpNet, minimal::Id)>; 2],
    inputs: usize,
}

impl Interned {
    /// How many kept entries family `f` (0: IPv4, 1: IPv6) has: its construction's size.
    pub fn part_len(&self, f: usize) -> usize {
        self.parts[f & 1].len()
    }

    /// The minimal entries of family `f` (0: IPv4, 1: IPv6) with their ECS scopes, checked
    /// to answer every address as the kept entries do.
    pub fn minimize(&self, f: usize) -> anyhow::Result<Vec<minimal::Entry>> {
        let part = &self.parts[f & 1];
        if part.is_empty() {
            return Ok(Vec::new());
        }
        let root: IpNet = if f & 1 == 0 { "0.0.0.0/0" } else { "::/0" }
            .parse()
            .expect("a root prefix");
        let mut e = minimal::minimize_under(root, part, u32::MAX);
        minimal::set_scopes(&mut e);
        let min: Vec<(IpNet, minimal::Id)> = e.iter().map(|(p, id, _)| (*p, *id)).collect();
        equivalent_by(part, &min, |a, b| a == b)
            .map_err(|e| anyhow::anyhow!("internal error in the minimal table: {e}"))?;
        Ok(e)
    }

    /// The service's table from its families' minimal entries (IPv4, IPv6).
    pub fn assemble(self, parts: [Vec<minimal::Entry>; 2]) -> Table {
        let entries: Vec<(IpNet, Decision)> = parts
            .into_iter()
            .flatten()
            .map(|(p, id, scope)| (p, self.ids.get(id, scope)))
            .collect();
        Table {
            saved: self.inputs.saturating_sub(entries.len()),
            entries,
        }
    }
}

/// Whether two tables (sorted) give every address the same answer (`same` says whether
/// two values answer alike). Every address has a
/// most specific prefix among both tables' prefixes, and gets from each table what that
/// table answers for the whole of that prefix; so it is enough to compare the tables at
/// every prefix that holds addresses no more specific prefix holds. Returns how many
/// prefixes were compared.
pub fn equivalent_by<V>(
    a: &[(IpNet, V)],
    b: &[(IpNet, V)],
    same: impl Fn(&V, &V) -> bool,
) -> Result<usize, String> {
    /// An open prefix: what each table answers for it, and how much of it (in addresses)
    /// more specific prefixes cover; `None` once that overflows (all of ::/0).
    struct Open {
        p: IpNet,
        same: bool,
        covered: Option<u128>,
    }
    let size = |p: &IpNet| 1u128.checked_shl(u32::from(p.max_prefix_len() - p.prefix_len()));
    let mut compared = 0;
    let mut close = |o: Open| -> Result<(), String> {
        let full = match (size(&o.p), o.covered) {
            (Some(s), Some(c)) => c >= s,
            (None, c) => c.is_none(),
            (Some(_), None) => true,
        };
        if !full {
            compared += 1;
            if !o.same {
                return Err(format!("{} is answered differently", o.p));
            }
        }
        Ok(())
    };
    let (mut sa, mut sb) = (Sweep::new(a), Sweep::new(b));
    let (mut i, mut j) = (0, 0);
    let mut stack: Vec<Open> = Vec::with_capacity(129);
    while i < a.len() || j < b.len() {
        let p = match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if sort_key(&x.0) <= sort_key(&y.0) => x.0,
            (Some(_) | None, Some(y)) => y.0,
            (Some(x), None) => x.0,
            (None, None) => unreachable!("loop condition"),
        };
        while a.get(i).is_some_and(|x| x.0 == p) {
            i += 1;
        }
        while b.get(j).is_some_and(|y| y.0 == p) {
            j += 1;
        }
        while stack.last().is_some_and(|t| !covers(&t.p, &p)) {
            close(stack.pop().expect("not empty"))?;
        }
        if let Some(t) = stack.last_mut() {
            t.covered = match (t.covered, size(&p)) {
                (Some(c), Some(s)) => c.checked_add(s),
                _ => None,
            };
        }
        let same = match (sa.at(&p), sb.at(&p)) {
            (Some(x), Some(y)) => same(x, y),
            (None, None) => true,
            _ => false,
        };
        stack.push(Open {
            p,
            same,
            covered: Some(0),
        });
    }
    while let Some(o) = stack.pop() {
        close(o)?;
    }
    Ok(compared)
}

/// Replaces the entries under `root` (inclusive) in `table` by the minimal ones for the
/// client networks `inputs` under it (`root` among them, sorted), given what covers `root`,
/// and fixes the scope of the entry directly above. Returns what to write.
pub fn replace_subtree(table: &mut Table, root: &IpNet, inputs: &[(IpNet, Decision)]) -> Diff {
    let range = subtree_range(&table.entries, root);
    // What addresses under root get from the entries outside it: the nearest entry above.
    let above_at = (0..root.prefix_len()).rev().find_map(|len| {
        let q = IpNet::new(root.addr(), len).ok()?.trunc();
        table.entries[..range.start]
            .binary_search_by_key(&sort_key(&q), |e| sort_key(&e.0))
            .ok()
    });
    let mut ids = Interner::default();
    let above = above_at.map_or(u32::MAX, |i| ids.id(&table.entries[i].1));
    let ins: Vec<(IpNet, minimal::Id)> = inputs.iter().map(|(p, d)| (*p, ids.id(d))).collect();
    let mut e = minimal::minimize_under(*root, &ins, above);
    minimal::set_scopes(&mut e);
    let fresh: Vec<(IpNet, Decision)> = e
        .into_iter()
        .map(|(p, id, scope)| (p, ids.get(id, scope)))
        .collect();
    let mut d = diff(&table.entries[range.clone()], &fresh);
    table.entries.splice(range, fresh);
    if let Some(i) = above_at {
        let scope = direct_scope(&table.entries, i);
        if table.entries[i].1.prefix_len != scope {
            table.entries[i].1.prefix_len = scope;
            d.put.push(table.entries[i]);
        }
    }
    d
}

/// max(length of entry `i`, its longest directly nested entry), walking its direct
/// children and skipping their subtrees.
fn direct_scope(entries: &[(IpNet, Decision)], i: usize) -> u8 {
    let top = entries[i].0;
    let mut scope = top.prefix_len();
    let mut k = i + 1;
    while k < entries.len() && top.contains(&entries[k].0) {
        let child = entries[k].0;
        scope = scope.max(child.prefix_len());
        k += subtree_range(&entries[k..], &child).len();
    }
    scope
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

/// What turns `old` into `new`: both in [`sort_key`] order, each prefix once (as tables
/// are), so one merge walk finds it, with no hashing: a full table is hundreds of
/// thousands of entries, and a first start diffs it against an empty kernel.
pub fn diff(old: &[(IpNet, Decision)], new: &[(IpNet, Decision)]) -> Diff {
    debug_assert!(old.is_sorted_by_key(|(p, _)| sort_key(p)));
    debug_assert!(new.is_sorted_by_key(|(p, _)| sort_key(p)));
    let mut out = Diff::default();
    let (mut o, mut n) = (old.iter().peekable(), new.iter().peekable());
    loop {
        match (o.peek(), n.peek()) {
            (Some(a), Some(b)) => match sort_key(&a.0).cmp(&sort_key(&b.0)) {
                std::cmp::Ordering::Less => {
                    out.delete.push(a.0);
                    o.next();
                }
                std::cmp::Ordering::Greater => {
                    out.put.push(**b);
                    n.next();
                }
                std::cmp::Ordering::Equal => {
                    if a.1 != b.1 {
                        out.put.push(**b);
                    }
                    o.next();
                    n.next();
                }
            },
            (Some(a), None) => {
                out.delete.push(a.0);
                o.next();
            }
            (None, Some(b)) => {
                out.put.push(**b);
                n.next();
            }
            (None, None) => return out,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prefix::sweep::lookup;
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
        // The /16 holds a /24 that answers otherwise: its answers are scoped to /24.
        assert_eq!(t.entries[1].1.prefix_len, 24);
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

    /// The resolver case: routes 0.0.0.0/0 -> 1 and 203.0.113.0/24 -> 2; a client
    /// in 203.0.0.0/16 gets 1, scoped to /24, not 0 (a resolver would serve 1 to
    /// 203.0.113.0/24 too).
    #[test]
    fn an_answer_from_a_broad_entry_is_scoped_to_its_nested_entries() {
        let t = compress(vec![
            (net("0.0.0.0/0"), dec(1)),
            (net("203.0.113.0/24"), dec(2)),
        ]);
        let host = crate::prefix::sweep::host("203.0.0.1".parse().unwrap());
        let d = lookup(&t.entries, &host).unwrap();
        assert_eq!((d.servers[0], d.prefix_len), (1, 24));
    }

    #[test]
    fn equivalence_is_judged_where_addresses_are() {
        // 10.0.0.0/16 is covered by its two halves: what a table says for it as a whole
        // answers no address.
        let a = vec![
            (net("0.0.0.0/0"), dec(9)),
            (net("10.0.0.0/16"), dec(2)),
            (net("10.0.0.0/17"), dec(1)),
        ];
        let b = vec![(net("0.0.0.0/0"), dec(9)), (net("10.0.128.0/17"), dec(2))];
        assert!(
            equivalent_by(&a, &b, same_ranking).is_err(),
            "10.0.0.0/17 differs"
        );
        let b = vec![
            (net("0.0.0.0/0"), dec(9)),
            (net("10.0.0.0/17"), dec(1)),
            (net("10.0.128.0/17"), dec(2)),
        ];
        assert_eq!(equivalent_by(&a, &b, same_ranking), Ok(3));
        let c = vec![
            (net("::/0"), dec(1)),
            (net("::/1"), dec(1)),
            (net("8000::/1"), dec(1)),
        ];
        assert_eq!(equivalent_by(&c, &c[..1], same_ranking), Ok(2));
    }

    proptest! {
        /// After a subtree's decisions change, replacing it gives the same lookups as
        /// building the table again, scopes stay true, and the diff turns the old table
        /// into the new one.
        #[test]
        fn replacing_a_subtree_equals_rebuilding(
            input in proptest::collection::vec((arb_prefix(), 1u16..4), 1..50),
            changed in proptest::collection::vec((arb_prefix(), 1u16..4), 0..10),
            root_at in 0u32..256,
            root_len in 8u8..=16,
            probes in proptest::collection::vec(0u32..0x1_0000, 1..100),
        ) {
            let root = IpNet::V4(ipnet::Ipv4Net::new(
                std::net::Ipv4Addr::from(0x0a00_0000u32 | (root_at << 8)), 8 + root_len,
            ).unwrap().trunc());
            let mut before: Vec<(IpNet, Decision)> =
                input.into_iter().map(|(p, s)| (p, dec(s))).collect();
            before.push((net("0.0.0.0/0"), dec(9)));
            before.push((root, dec(5)));
            let norm = |mut v: Vec<(IpNet, Decision)>| {
                v.sort_by_key(|(p, _)| sort_key(p));
                v.dedup_by_key(|(p, _)| *p);
                v
            };
            let before = norm(before);
            let mut after = before.clone();
            after.retain(|(p, _)| !root.contains(p) || changed.iter().all(|(c, _)| c != p));
            after.extend(changed.into_iter().filter(|(p, _)| root.contains(p)).map(|(p, s)| (p, dec(s))));
            let after = norm(after);
            let mut table = compress(before.clone());
            let old = table.entries.clone();
            let under: Vec<(IpNet, Decision)> =
                after.iter().filter(|(p, _)| root.contains(p)).copied().collect();
            let d = replace_subtree(&mut table, &root, &under);
            // The diff applied to the old entries gives the new ones.
            let mut applied: std::collections::BTreeMap<_, _> =
                old.iter().map(|(p, d)| (sort_key(p), (*p, *d))).collect();
            for p in &d.delete {
                applied.remove(&sort_key(p));
            }
            for (p, x) in &d.put {
                applied.insert(sort_key(p), (*p, *x));
            }
            let applied: Vec<(IpNet, Decision)> = applied.into_values().collect();
            prop_assert_eq!(&applied, &table.entries);
            for x in probes {
                let a = std::net::Ipv4Addr::from(0x0a00_0000u32 | x);
                let host = crate::prefix::sweep::host(a.into());
                let want = lookup(&after, &host).unwrap();
                let got = lookup(&table.entries, &host).unwrap();
                prop_assert!(same_ranking(want, got), "{a}: {got:?} != {want:?}");
                // The scope is true: the network of that length around the address agrees.
                let span = 1u64 << (32 - u32::from(got.prefix_len));
                let first = u64::from(u32::from(a)) & !(span - 1);
                for k in 0..16u64 {
                    let b = (first + (span - 1) * k / 15) as u32;
                    let hb = crate::prefix::sweep::host(std::net::Ipv4Addr::from(b).into());
                    prop_assert!(same_ranking(lookup(&table.entries, &hb).unwrap(), got));
                }
            }
        }

        /// The diff of any two tables turns the first into the second, putting only
        /// entries that are new or changed and deleting only ones that are gone.
        #[test]
        fn a_diff_turns_one_table_into_the_other(
            a in proptest::collection::vec((arb_prefix(), 1u16..4), 0..40),
            b in proptest::collection::vec((arb_prefix(), 1u16..4), 0..40),
        ) {
            // Every address needs a decision, as in a real table: a default route.
            let table = |v: Vec<(IpNet, u16)>| {
                let mut v: Vec<(IpNet, Decision)> = v.into_iter().map(|(p, s)| (p, dec(s))).collect();
                v.push((net("0.0.0.0/0"), dec(9)));
                compress(v).entries
            };
            let (a, b) = (table(a), table(b));
            let d = diff(&a, &b);
            let mut applied: std::collections::BTreeMap<_, _> =
                a.iter().map(|(p, d)| (sort_key(p), (*p, *d))).collect();
            for p in &d.delete {
                prop_assert!(b.iter().all(|(q, _)| q != p), "{p} deleted but kept");
                prop_assert!(applied.remove(&sort_key(p)).is_some(), "{p} deleted but absent");
            }
            for (p, x) in &d.put {
                prop_assert!(!a.contains(&(*p, *x)), "{p} put unchanged");
                applied.insert(sort_key(p), (*p, *x));
            }
            let applied: Vec<(IpNet, Decision)> = applied.into_values().collect();
            prop_assert_eq!(&applied, &b);
        }

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
                let host = crate::prefix::sweep::host(addr.into());
                let want = lookup(&full, &host).unwrap();
                let got = lookup(&t.entries, &host).unwrap();
                prop_assert!(same_ranking(want, got));
            }
        }
    }
}
