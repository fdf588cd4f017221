//! Longest-prefix match for prefixes visited in order (every prefix before the prefixes it
//! covers): one pass over a sorted source, with a stack of the source's prefixes that cover
//! the current one. Linear, where a per-prefix trie lookup would be O(prefix length).

use ipnet::IpNet;

use super::order::{covers, sort_key};

pub struct Sweep<'a, V> {
    source: &'a [(IpNet, V)],
    next: usize,
    stack: Vec<&'a (IpNet, V)>,
}

impl<'a, V> Sweep<'a, V> {
    /// `source` must be sorted by [`sort_key`] and hold each prefix once.
    pub fn new(source: &'a [(IpNet, V)]) -> Self {
        Sweep {
            source,
            next: 0,
            stack: Vec::with_capacity(129),
        }
    }

    /// The value of the most specific source prefix covering `p`. Calls must come with `p`
    /// in `sort_key` order.
    pub fn at(&mut self, p: &IpNet) -> Option<&'a V> {
        let key = sort_key(p);
        while let Some(e) = self.source.get(self.next) {
            if sort_key(&e.0) > key {
                break;
            }
            while self.stack.last().is_some_and(|top| !covers(&top.0, &e.0)) {
                self.stack.pop();
            }
            self.stack.push(e);
            self.next += 1;
        }
        while self.stack.last().is_some_and(|top| !covers(&top.0, p)) {
            self.stack.pop();
        }
        self.stack.last().map(|e| &e.1)
    }
}

/// The entry of the most specific prefix of a sorted source covering `p` (a host prefix
/// for an address), by binary search at each shorter length: for a few lookups (a sweep is
/// linear for all of them).
pub fn covering<'a, V>(source: &'a [(IpNet, V)], p: &IpNet) -> Option<&'a (IpNet, V)> {
    (0..=p.prefix_len()).rev().find_map(|len| {
        let q = IpNet::new(p.addr(), len).ok()?.trunc();
        let i = source
            .binary_search_by_key(&sort_key(&q), |e| sort_key(&e.0))
            .ok()?;
        Some(&source[i])
    })
}

/// The value of [`covering`].
pub fn lookup<'a, V>(source: &'a [(IpNet, V)], p: &IpNet) -> Option<&'a V> {
    covering(source, p).map(|e| &e.1)
}

/// The host prefix of an address (/32 or /128).
pub fn host(addr: std::net::IpAddr) -> IpNet {
    IpNet::from(addr)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prefix::order::sorted;

    #[test]
    fn finds_the_most_specific_cover_in_one_pass() {
        let net = |s: &str| s.parse::<IpNet>().unwrap();
        let src = sorted(vec![
            (net("10.0.0.0/8"), 1),
            (net("10.1.0.0/16"), 2),
            (net("0.0.0.0/0"), 0),
            (net("10.1.0.0/16"), 3),
        ]);
        assert_eq!(src.len(), 3);
        let mut s = Sweep::new(&src);
        let probes = [
            "0.0.0.0/0",
            "9.0.0.0/8",
            "10.0.0.0/8",
            "10.0.0.0/24",
            "10.1.0.0/16",
            "10.1.2.0/24",
            "10.2.0.0/16",
            "11.0.0.0/8",
            "::/0",
        ];
        let got: Vec<Option<i32>> = probes.iter().map(|p| s.at(&net(p)).copied()).collect();
        assert_eq!(
            got,
            [
                Some(0),
                Some(0),
                Some(1),
                Some(1),
                Some(3),
                Some(3),
                Some(1),
                Some(0),
                None
            ]
        );
        let direct: Vec<Option<i32>> = probes
            .iter()
            .map(|p| lookup(&src, &net(p)).copied())
            .collect();
        assert_eq!(direct, got);
    }
}
