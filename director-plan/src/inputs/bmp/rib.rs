//! One peer view's routes, packed: this is where the memory goes (a full table is ~600 k
//! IPv4 routes per peer and view), so prefixes are integer keys and attributes an id into one
//! shared table of distinct attribute sets.

use std::collections::{HashMap, HashSet};
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::inputs::decision::Attrs;
use crate::model::IpNet;

/// An IPv4 prefix as one integer, `address << 8 | length`: ordering these is the table's
/// order (address, then length), and a map entry with a `u32` value is 16 bytes.
pub(super) type V4Key = u64;

/// An IPv6 prefix; 4-byte aligned (a `u128` would pad a map entry to 32 bytes, this is 24).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct V6Key {
    addr: [u32; 4],
    len: u8,
}

/// A route's value: the attribute id, and [`STALE`] while it awaits a refresh.
pub(super) const STALE: u32 = 1 << 31;
pub(super) const ID_MASK: u32 = STALE - 1;

pub(super) fn v4_key(p: &ipnet::Ipv4Net) -> V4Key {
    (u64::from(u32::from(p.network())) << 8) | u64::from(p.prefix_len())
}

pub(super) fn v4_net(k: V4Key) -> IpNet {
    let addr = Ipv4Addr::from((k >> 8) as u32);
    // The length came from a valid prefix.
    IpNet::V4(ipnet::Ipv4Net::new_assert(addr, (k & 0xff) as u8))
}

pub(super) fn v6_key(p: &ipnet::Ipv6Net) -> V6Key {
    let a = u128::from(p.network());
    V6Key {
        addr: [
            (a >> 96) as u32,
            (a >> 64) as u32,
            (a >> 32) as u32,
            a as u32,
        ],
        len: p.prefix_len(),
    }
}

impl V6Key {
    pub(super) fn addr(&self) -> u128 {
        self.addr
            .iter()
            .fold(0u128, |acc, w| (acc << 32) | u128::from(*w))
    }

    pub(super) fn net(&self) -> IpNet {
        IpNet::V6(ipnet::Ipv6Net::new_assert(
            Ipv6Addr::from(self.addr()),
            self.len,
        ))
    }

    pub(super) fn order(&self) -> (u128, u8) {
        (self.addr(), self.len)
    }
}

/// Heap bytes of a std `HashMap`/`HashSet` with `capacity` and entries of `entry` bytes:
/// hashbrown keeps a power-of-two number of buckets with 7/8 usable, one control byte each.
pub(super) fn table_bytes(capacity: usize, entry: usize) -> usize {
    if capacity == 0 {
        return 0;
    }
    let buckets = if capacity < 8 {
        (capacity + 1).next_power_of_two()
    } else {
        (capacity * 8 / 7).next_power_of_two()
    };
    buckets * (entry + 1) + 16
}

/// One (router, peer, view) RIB.
#[derive(Debug, Default)]
pub(super) struct Rib {
    pub v4: HashMap<V4Key, u32>,
    pub v6: HashMap<V6Key, u32>,
}

impl Rib {
    /// Stores `value` for `prefix`, returning what it replaces.
    pub fn insert(&mut self, prefix: &IpNet, value: u32) -> Option<u32> {
        match prefix {
            IpNet::V4(p) => self.v4.insert(v4_key(p), value),
            IpNet::V6(p) => self.v6.insert(v6_key(p), value),
        }
    }

    pub fn remove(&mut self, prefix: &IpNet) -> Option<u32> {
        match prefix {
            IpNet::V4(p) => self.v4.remove(&v4_key(p)),
            IpNet::V6(p) => self.v6.remove(&v6_key(p)),
        }
    }

    pub fn get(&self, prefix: &IpNet) -> Option<u32> {
        match prefix {
            IpNet::V4(p) => self.v4.get(&v4_key(p)).copied(),
            IpNet::V6(p) => self.v6.get(&v6_key(p)).copied(),
        }
    }

    pub fn len(&self) -> usize {
        self.v4.len() + self.v6.len()
    }

    pub fn mark_stale(&mut self) {
        for v in self.v4.values_mut().chain(self.v6.values_mut()) {
            *v |= STALE;
        }
    }

    /// Removes the routes `doomed` picks (all, or the stale ones), handing each to `gone`.
    pub fn remove_where(&mut self, doomed: impl Fn(u32) -> bool, mut gone: impl FnMut(Gone)) {
        self.v4.retain(|k, v| {
            let d = doomed(*v);
            if d {
                gone(Gone::V4(*k, *v & ID_MASK));
            }
            !d
        });
        self.v6.retain(|k, v| {
            let d = doomed(*v);
            if d {
                gone(Gone::V6(*k, *v & ID_MASK));
            }
            !d
        });
    }

    pub fn heap_bytes(&self) -> usize {
        table_bytes(self.v4.capacity(), size_of::<(V4Key, u32)>())
            + table_bytes(self.v6.capacity(), size_of::<(V6Key, u32)>())
    }
}

/// A route removed by [`Rib::remove_where`]: its key and attribute id.
pub(super) enum Gone {
    V4(V4Key, u32),
    V6(V6Key, u32),
}

/// The distinct attribute sets, reference-counted so that the table does not grow with
/// churn: a full table from one peer has a few tens of thousands.
#[derive(Debug, Default)]
pub(super) struct Interner {
    sets: Vec<(Attrs, u32)>,
    index: HashMap<Attrs, u32>,
    free: Vec<u32>,
}

impl Interner {
    /// The id of `a`, counting one more user.
    pub fn intern(&mut self, a: Attrs) -> u32 {
        if let Some(&id) = self.index.get(&a) {
            self.sets[id as usize].1 += 1;
            return id;
        }
        let id = match self.free.pop() {
            Some(id) => {
                self.sets[id as usize] = (a, 1);
                id
            }
            None => {
                self.sets.push((a, 1));
                (self.sets.len() - 1) as u32
            }
        };
        self.index.insert(a, id);
        id
    }

    /// One user fewer; the set goes when it has none.
    pub fn release(&mut self, id: u32) {
        let e = &mut self.sets[id as usize];
        e.1 -= 1;
        if e.1 == 0 {
            let a = e.0;
            self.index.remove(&a);
            self.free.push(id);
        }
    }

    pub fn get(&self, id: u32) -> &Attrs {
        &self.sets[id as usize].0
    }

    /// Sets in use.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn heap_bytes(&self) -> usize {
        self.sets.capacity() * size_of::<(Attrs, u32)>()
            + table_bytes(self.index.capacity(), size_of::<(Attrs, u32)>())
            + self.free.capacity() * 4
    }
}

/// Prefixes whose candidates changed since the last [`Dirty::take`].
#[derive(Debug, Default)]
pub(super) struct Dirty {
    v4: HashSet<V4Key>,
    v6: HashSet<V6Key>,
}

impl Dirty {
    pub fn add(&mut self, prefix: &IpNet) {
        match prefix {
            IpNet::V4(p) => self.v4.insert(v4_key(p)),
            IpNet::V6(p) => self.v6.insert(v6_key(p)),
        };
    }

    pub fn add_gone(&mut self, g: &Gone) {
        match g {
            Gone::V4(k, _) => self.v4.insert(*k),
            Gone::V6(k, _) => self.v6.insert(*k),
        };
    }

    pub fn len(&self) -> usize {
        self.v4.len() + self.v6.len()
    }

    /// All of them in the planner's order ([`crate::prefix::order::sort_key`]), and clears.
    pub fn take(&mut self) -> Vec<IpNet> {
        let mut out: Vec<IpNet> = self
            .v4
            .drain()
            .map(v4_net)
            .chain(self.v6.drain().map(|k| k.net()))
            .collect();
        out.sort_unstable_by_key(crate::prefix::order::sort_key);
        // Free the sets' memory: after a full dump they held every prefix.
        self.v4.shrink_to_fit();
        self.v6.shrink_to_fit();
        out
    }

    pub fn heap_bytes(&self) -> usize {
        table_bytes(self.v4.capacity(), 8) + table_bytes(self.v6.capacity(), 20)
    }
}
