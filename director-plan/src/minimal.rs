//! The smallest LPM table that gives every address the decision of its most specific input
//! prefix, and an ECS scope per entry that is true.
//!
//! The construction is ORTC (Draves, King, Venkatachary, Zill, "Constructing Optimal IP
//! Routing Tables", INFOCOM 1999), on a path-compressed binary trie of the inputs:
//!
//! 1. Every address gets the value of its most specific input (the "inherited" value of a
//!    part of the trie with no input of its own).
//! 2. Bottom up, each node gets the set of values that could be written at it without
//!    costing more below: a leaf has its own value; an inner node the intersection of its
//!    halves' sets if not empty, else their union.
//! 3. Top down, a node whose set holds the value it inherits from the entries above needs
//!    no entry; otherwise it gets an entry with a value from its set.
//!
//! The paper proves the result has the fewest entries of any table with the same lookups.
//! Chains of one-child nodes are not materialised: along such a chain the sibling halves
//! all inherit the same value, so the sets settle after two steps (see [`along_path`]).
//!
//! ECS scope: an answer from entry E holds for every address that E also answers, so
//! for a client address matched by E the answer holds over any of its networks that miss
//! E's directly nested entries. scope(E) = max(len(E), the longest directly nested entry)
//! is such a length for every address E answers: a network at least as long as a nested
//! entry either lies inside it or misses it.

use std::collections::HashMap;

use director_common::maps::Decision;
use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use crate::prefix::scopes::scopes;

/// A decision's index in an [`Interner`].
pub type Id = u32;
const NONE: u32 = u32::MAX;

/// A multiplicative hasher for the interner's keys: SipHash's resistance to chosen keys is
/// not needed for decisions the controller computed itself, and it cost a twentieth of a
/// full pass.
#[derive(Default)]
pub struct Mix(u64);

impl std::hash::Hasher for Mix {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(w));
        }
    }
    fn write_u8(&mut self, v: u8) {
        self.write_u64(u64::from(v));
    }
    fn write_u16(&mut self, v: u16) {
        self.write_u64(u64::from(v));
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// Distinct decisions (compared without their `prefix_len`), each stored once.
#[derive(Default)]
pub struct Interner {
    ids: HashMap<Decision, Id, std::hash::BuildHasherDefault<Mix>>,
    decisions: Vec<Decision>,
}

impl Interner {
    pub fn id(&mut self, d: &Decision) -> Id {
        let mut key = *d;
        key.prefix_len = 0;
        *self.ids.entry(key).or_insert_with(|| {
            self.decisions.push(key);
            (self.decisions.len() - 1) as Id
        })
    }

    /// The decision of `id`, with `scope` as its prefix length.
    pub fn get(&self, id: Id, scope: u8) -> Decision {
        let mut d = self.decisions[id as usize];
        d.prefix_len = scope;
        d
    }
}

/// A prefix as left-aligned bits: IPv4 in the top 32 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    bits: u128,
    len: u8,
}

impl Key {
    fn of(p: &IpNet) -> Key {
        match p {
            IpNet::V4(n) => Key {
                bits: u128::from(u32::from(n.network())) << 96,
                len: n.prefix_len(),
            },
            IpNet::V6(n) => Key {
                bits: u128::from(n.network()),
                len: n.prefix_len(),
            },
        }
    }

    fn net(self, v6: bool) -> IpNet {
        if v6 {
            IpNet::V6(Ipv6Net::new(self.bits.into(), self.len).expect("length <= 128"))
        } else {
            let a = ((self.bits >> 96) as u32).into();
            IpNet::V4(Ipv4Net::new(a, self.len).expect("length <= 32"))
        }
    }

    /// The bit after the first `d`.
    fn bit(self, d: u8) -> usize {
        ((self.bits >> (127 - u32::from(d))) & 1) as usize
    }

    fn truncated(self, len: u8) -> Key {
        let bits = if len == 0 {
            0
        } else {
            self.bits & (u128::MAX << (128 - u32::from(len)))
        };
        Key { bits, len }
    }

    fn contains(self, o: Key) -> bool {
        o.len >= self.len && o.truncated(self.len).bits == self.bits
    }

    /// The half of this prefix on `side`.
    fn half(self, side: usize) -> Key {
        Key {
            bits: self.bits | ((side as u128) << (127 - u32::from(self.len))),
            len: self.len + 1,
        }
    }
}

struct Node {
    key: Key,
    /// The input decision at this prefix, or NONE.
    value: Id,
    child: [u32; 2],
}

/// Sorted small sets of ids in one arena.
#[derive(Default)]
struct Sets {
    arena: Vec<Id>,
    /// Per node: start and length in `arena`.
    at: Vec<(u32, u32)>,
}

impl Sets {
    fn get(&self, node: u32) -> &[Id] {
        let (s, n) = self.at[node as usize];
        &self.arena[s as usize..(s + n) as usize]
    }
}

fn has(set: &[Id], v: Id) -> bool {
    set.binary_search(&v).is_ok()
}

fn union_into(a: &[Id], b: &[Id], out: &mut Vec<Id>) {
    out.clear();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        let x = match (a.get(i), b.get(j)) {
            (Some(&x), Some(&y)) if x == y => {
                i += 1;
                j += 1;
                x
            }
            (Some(&x), Some(&y)) if x < y => {
                i += 1;
                x
            }
            (Some(_) | None, Some(&y)) => {
                j += 1;
                y
            }
            (Some(&x), None) => {
                i += 1;
                x
            }
            (None, None) => unreachable!("loop condition"),
        };
        out.push(x);
    }
}

fn intersect_into(a: &[Id], b: &[Id], out: &mut Vec<Id>) {
    out.clear();
    out.extend(a.iter().copied().filter(|x| has(b, *x)));
}

/// The set of a chain node `steps` above a node whose set is `below`, when every sibling
/// half along the chain inherits `inh`: one step gives `below ∩ {inh}` or `below ∪ {inh}`;
/// a second step then always gives `{inh}`.
fn along_path(below: &[Id], steps: u32, inh: Id, out: &mut Vec<Id>) {
    out.clear();
    if steps == 0 {
        out.extend_from_slice(below);
    } else if has(below, inh) || steps >= 2 {
        out.push(inh);
    } else {
        union_into(below, &[inh], out);
    }
}

/// The value to write at a node whose set is `set`: its inherited input value when the set
/// allows (the table then follows the inputs' own shape), else the lowest id. Any member
/// gives the fewest entries.
fn pick(set: &[Id], inh: Id) -> Id {
    if has(set, inh) {
        inh
    } else {
        set[0]
    }
}

/// An entry of a minimal table: prefix, decision id, ECS scope.
pub type Entry = (IpNet, Id, u8);

/// The fewest entries under `root` (inclusive) that give every address under it the value
/// of its most specific prefix in `inputs`, given that addresses under `root` get `above`
/// from entries outside it (NONE: nothing). `inputs` are in one family, inside `root`,
/// sorted by address then length, without repeats; addresses no input covers must not
/// exist (give `root` a value, or `above`). Scopes are filled in by [`set_scopes`].
pub fn minimize_under(root: IpNet, inputs: &[(IpNet, Id)], above: Id) -> Vec<Entry> {
    let v6 = matches!(root, IpNet::V6(_));
    let root_key = Key::of(&root);
    // Each input adds at most two nodes (itself and a branch): reserved once rather than
    // copied as it grows (a full-scale trie has millions).
    let mut nodes = Vec::with_capacity(2 * inputs.len() + 1);
    nodes.push(Node {
        key: root_key,
        value: NONE,
        child: [NONE; 2],
    });
    // Build the path-compressed trie: inputs come in pre-order, so the stack holds the
    // chain of nodes containing the current one.
    let mut stack: Vec<u32> = vec![0];
    for (p, v) in inputs {
        let k = Key::of(p);
        debug_assert!(root_key.contains(k), "{p} is not under {root}");
        if k == root_key {
            nodes[0].value = *v;
            continue;
        }
        while stack.len() > 1
            && !nodes[*stack.last().expect("len > 1") as usize]
                .key
                .contains(k)
        {
            stack.pop();
        }
        let t = *stack.last().expect("the root stays") as usize;
        let new = nodes.len() as u32;
        nodes.push(Node {
            key: k,
            value: *v,
            child: [NONE; 2],
        });
        let side = k.bit(nodes[t].key.len);
        let q = nodes[t].child[side];
        if q == NONE {
            nodes[t].child[side] = new;
        } else {
            // q is an earlier sibling under t that does not contain k: branch where they
            // part.
            let qk = nodes[q as usize].key;
            let common = ((qk.bits ^ k.bits).leading_zeros() as u8)
                .min(qk.len)
                .min(k.len);
            let b = nodes.len() as u32;
            let mut child = [NONE; 2];
            child[qk.bit(common)] = q;
            child[k.bit(common)] = new;
            nodes.push(Node {
                key: k.truncated(common),
                value: NONE,
                child,
            });
            nodes[t].child[side] = b;
            stack.push(b);
        }
        stack.push(new);
    }

    // Pre-order, with each node's inherited input value.
    let n = nodes.len();
    let mut order = Vec::with_capacity(n);
    let mut inh = vec![NONE; n];
    let mut st = vec![(0u32, above)];
    while let Some((x, up)) = st.pop() {
        let node = &nodes[x as usize];
        let me = if node.value != NONE { node.value } else { up };
        inh[x as usize] = me;
        order.push(x);
        for c in node.child.into_iter().rev() {
            if c != NONE {
                st.push((c, me));
            }
        }
    }

    // Bottom up: each node's set.
    let mut sets = Sets {
        arena: Vec::with_capacity(n * 2),
        at: vec![(0, 0); n],
    };
    let (mut halves, mut tmp, mut out) = ([Vec::new(), Vec::new()], Vec::new(), Vec::new());
    for &x in order.iter().rev() {
        let node = &nodes[x as usize];
        let me = inh[x as usize];
        for (side, c) in node.child.into_iter().enumerate() {
            if c == NONE {
                halves[side].clear();
                halves[side].push(me);
            } else {
                let gap = u32::from(nodes[c as usize].key.len - node.key.len - 1);
                along_path(sets.get(c), gap, me, &mut halves[side]);
            }
        }
        intersect_into(&halves[0], &halves[1], &mut tmp);
        if tmp.is_empty() {
            union_into(&halves[0], &halves[1], &mut out);
        } else {
            std::mem::swap(&mut tmp, &mut out);
        }
        sets.at[x as usize] = (sets.arena.len() as u32, out.len() as u32);
        sets.arena.extend_from_slice(&out);
    }

    // Top down: write where the value from above is not in the set.
    let mut entries: Vec<(Key, Id)> = Vec::new();
    let mut emit = |k: Key, v: Id| {
        if v != NONE {
            entries.push((k, v));
        }
    };
    let mut st = vec![(0u32, above)];
    let mut chain = Vec::new();
    while let Some((x, from_above)) = st.pop() {
        let node = &nodes[x as usize];
        let me = inh[x as usize];
        let set = sets.get(x);
        let got = if has(set, from_above) {
            from_above
        } else {
            let v = pick(set, me);
            emit(node.key, v);
            v
        };
        for (side, c) in node.child.into_iter().enumerate() {
            if c == NONE {
                if got != me {
                    emit(node.key.half(side), me);
                }
                continue;
            }
            let ck = nodes[c as usize].key;
            let gap = ck.len - node.key.len - 1;
            let mut cur = got;
            for j in 0..gap {
                let d = node.key.len + 1 + j;
                let z = ck.truncated(d);
                along_path(sets.get(c), u32::from(gap - j), me, &mut chain);
                if !has(&chain, cur) {
                    cur = pick(&chain, me);
                    emit(z, cur);
                }
                // The half of z away from the child inherits `me`.
                if cur != me {
                    emit(z.half(1 - ck.bit(d)), me);
                }
            }
            st.push((c, cur));
        }
    }
    entries.sort_unstable_by_key(|(k, _)| *k);
    entries
        .into_iter()
        .map(|(k, v)| (k.net(v6), v, k.len))
        .collect()
}

/// Sets every entry's scope to max(its length, its longest directly nested entry).
/// `entries` are sorted by address then length.
pub fn set_scopes(entries: &mut [Entry]) {
    let prefixes: Vec<IpNet> = entries.iter().map(|e| e.0).collect();
    for (e, s) in entries.iter_mut().zip(scopes(&prefixes)) {
        e.2 = s;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    /// The value the most specific covering prefix of `table` gives `addr` (a /32).
    fn lookup<V: Copy>(table: &[(IpNet, V)], addr: u32) -> Option<V> {
        let a = IpNet::V4(Ipv4Net::new(addr.into(), 32).unwrap());
        table
            .iter()
            .filter(|(p, _)| p.contains(&a))
            .max_by_key(|(p, _)| p.prefix_len())
            .map(|e| e.1)
    }

    fn full(inputs: &[(IpNet, Id)]) -> Vec<Entry> {
        let mut e = minimize_under(net("0.0.0.0/0"), inputs, NONE);
        set_scopes(&mut e);
        e
    }

    #[test]
    fn siblings_with_one_decision_become_their_parent() {
        // Two halves of 10.0.0.0/8 with decision 2 under a default of 1: one /8 entry.
        let e = full(&[
            (net("0.0.0.0/0"), 1),
            (net("10.0.0.0/9"), 2),
            (net("10.128.0.0/9"), 2),
        ]);
        let got: Vec<(String, Id)> = e.iter().map(|(p, v, _)| (p.to_string(), *v)).collect();
        assert_eq!(got, [("0.0.0.0/0".into(), 1), ("10.0.0.0/8".into(), 2)]);
    }

    #[test]
    fn a_majority_below_moves_the_default() {
        // The paper's point: 0/1 and 128/1 both 2, except one /24 with 1: two entries, not
        // three (default 2, the /24 1).
        let e = full(&[
            (net("0.0.0.0/0"), 1),
            (net("0.0.0.0/1"), 2),
            (net("128.0.0.0/1"), 2),
            (net("192.0.2.0/24"), 1),
        ]);
        let got: Vec<(String, Id)> = e.iter().map(|(p, v, _)| (p.to_string(), *v)).collect();
        assert_eq!(got, [("0.0.0.0/0".into(), 2), ("192.0.2.0/24".into(), 1)]);
    }

    /// The example: 0.0.0.0/0 -> 1 and 203.0.113.0/24 -> 2. An answer from the
    /// default must not claim scope 0: the default entry's scope is 24.
    #[test]
    fn the_default_entry_is_scoped_to_what_is_nested_in_it() {
        let e = full(&[(net("0.0.0.0/0"), 1), (net("203.0.113.0/24"), 2)]);
        assert_eq!(e[0].2, 24);
        assert_eq!(e[1].2, 24);
    }

    fn arb_prefix() -> impl Strategy<Value = IpNet> {
        // 16 bits of address space under 10.0.0.0/8, so that prefixes nest often.
        (0u32..0x1_0000, 0u8..=16).prop_map(|(a, len)| {
            let addr = std::net::Ipv4Addr::from(0x0a00_0000u32 | a);
            IpNet::V4(Ipv4Net::new(addr, 16 + len).unwrap().trunc())
        })
    }

    fn sorted_inputs(raw: Vec<(IpNet, Id)>) -> Vec<(IpNet, Id)> {
        let mut v = raw;
        v.push((net("0.0.0.0/0"), 0));
        v.sort_by_key(|(p, _)| Key::of(p));
        v.dedup_by_key(|(p, _)| *p);
        v
    }

    /// The minimum for small inputs, by trying every subset of candidate prefixes.
    fn brute_force_size(inputs: &[(IpNet, Id)], values: Id) -> usize {
        // Candidates: every prefix of length 16..=19 under 10.0.0.0/16 plus the root, with
        // inputs restricted to those lengths by the caller.
        let mut cands = vec![net("0.0.0.0/0")];
        for len in 16u8..=19 {
            for i in 0..(1u32 << (len - 16)) {
                let a = 0x0a00_0000u32 | (i << (32 - len));
                cands.push(IpNet::V4(Ipv4Net::new(a.into(), len).unwrap()));
            }
        }
        let probes: Vec<u32> = (0..16u32).map(|i| 0x0a00_0000 | (i << 12)).collect();
        let want: Vec<Option<Id>> = probes.iter().map(|&a| lookup(inputs, a)).collect();
        let outside = lookup(inputs, 0x0b00_0000);
        let mut best = usize::MAX;
        // Small search: the root plus up to 3 other entries, each with any value.
        let m = cands.len();
        let mut try_table = |t: &[(IpNet, Id)]| {
            let ok = probes.iter().zip(&want).all(|(&a, w)| lookup(t, a) == *w)
                && lookup(t, 0x0b00_0000) == outside;
            if ok {
                best = best.min(t.len());
            }
        };
        for r in 0..values {
            try_table(&[(cands[0], r)]);
            for i in 1..m {
                for vi in 0..values {
                    try_table(&[(cands[0], r), (cands[i], vi)]);
                    for j in i + 1..m {
                        for vj in 0..values {
                            try_table(&[(cands[0], r), (cands[i], vi), (cands[j], vj)]);
                        }
                    }
                }
            }
        }
        best
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        /// Every address gets its most specific input's value, and every answer's scope is
        /// a network over which every address gets that same value.
        #[test]
        fn lookups_equal_the_inputs_and_scopes_are_true(
            raw in proptest::collection::vec((arb_prefix(), 1u32..4), 0..40),
            probes in proptest::collection::vec(0u32..0x1_0000, 1..60),
        ) {
            let inputs = sorted_inputs(raw);
            let e = full(&inputs);
            prop_assert!(e.len() <= inputs.len());
            let table: Vec<(IpNet, (Id, u8))> = e.iter().map(|(p, v, s)| (*p, (*v, *s))).collect();
            for x in probes {
                let a = 0x0a00_0000u32 | x;
                let (v, scope) = lookup(&table, a).unwrap();
                prop_assert_eq!(Some(v), lookup(&inputs, a));
                // Every address in a/scope (sampled: its first, last and 30 spread) agrees.
                let span = 1u64 << (32 - u32::from(scope));
                let first = u64::from(a) & !(span - 1);
                for k in 0..32u64 {
                    let b = (first + (span - 1) * k / 31) as u32;
                    prop_assert_eq!(lookup(&table, b).map(|x| x.0), Some(v), "{} in {}/{}",
                        std::net::Ipv4Addr::from(b), std::net::Ipv4Addr::from(a), scope);
                }
            }
        }

        /// As few entries as any table with the same lookups (small cases, brute force).
        #[test]
        fn no_table_is_smaller(
            raw in proptest::collection::vec(
                ((0u32..16), 16u8..=19, 0u32..3).prop_map(|(i, len, v)| {
                    let a = 0x0a00_0000u32 | (i << 12);
                    (IpNet::V4(Ipv4Net::new(a.into(), len).unwrap().trunc()), v)
                }),
                0..5,
            ),
        ) {
            let inputs = sorted_inputs(raw);
            let e = full(&inputs);
            let best = brute_force_size(&inputs, 3);
            if best != usize::MAX {
                prop_assert!(e.len() <= best, "{} entries, {} possible: {:?}", e.len(), best, e);
            }
        }

        /// A subtree minimized under the value its cover gives equals, by lookup, the
        /// inputs.
        #[test]
        fn a_subtree_fits_under_its_cover(
            raw in proptest::collection::vec((arb_prefix(), 1u32..4), 0..40),
            above in 1u32..4,
            probes in proptest::collection::vec(0u32..0x100, 1..40),
        ) {
            let root = net("10.0.0.0/24");
            let mut inputs: Vec<(IpNet, Id)> =
                raw.into_iter().filter(|(p, _)| root.contains(p)).collect();
            inputs.push((root, above));
            inputs.sort_by_key(|(p, _)| Key::of(p));
            inputs.dedup_by_key(|(p, _)| *p);
            let e = minimize_under(root, &inputs, above);
            let mut table: Vec<(IpNet, Id)> = vec![(net("0.0.0.0/0"), above)];
            table.extend(e.iter().map(|(p, v, _)| (*p, *v)));
            for x in probes {
                let a = 0x0a00_0000u32 | x;
                prop_assert_eq!(lookup(&table, a), lookup(&inputs, a));
            }
        }
    }
}
