//! What a policy change would move: per site, the demand leaving and arriving if the
//! candidate tables replaced the current ones, and the prefixes that move the most.
//!
//! Each demand item (a client prefix and its rate, [`PrefixDemand`]) is spread over its
//! address space: the table's entry covering it answers the part no more specific entry
//! inside it takes, and each entry inside it answers its own addresses less those of the
//! entries inside it. Sites get the item's rate times the address share of each decision
//! times that decision's [`site_shares`]. The rule assumes a prefix's clients are spread
//! evenly over its addresses, which is all a sample says.
//!
//! One sorted sweep per table and service: every entry's own address count (its size less
//! its direct children's) is computed once, an item's cover comes from [`Sweep`] and the
//! entries inside it from a binary search, so the work is the demand items plus the entries
//! inside each item (nested demand items visit the entries under them again; samples nest
//! little).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use director_common::maps::Decision;
use ipnet::IpNet;
use serde::Serialize;

use super::spill::SiteLoad;
use super::{clean_rate, scope_cleared, site_shares, PrefixDemand};
use crate::prefix::order::{sort_key, sorted, subtree_range};
use crate::prefix::sweep::Sweep;

/// One service's table, as [`impact`] takes it.
type Entries<'a> = &'a [(IpNet, Decision)];

/// One site's side of the change.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SiteImpact {
    pub site: usize,
    /// Measured now (0 for a site the caller did not list).
    pub load: f64,
    pub moving_in: f64,
    pub moving_out: f64,
    /// `load - moving_out + moving_in`.
    pub projected: f64,
    pub capacity: Option<f64>,
}

/// A demand item whose sites change.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PrefixMove {
    pub service: u32,
    pub prefix: IpNet,
    /// Sites losing some of its demand, in site order.
    pub from: Vec<usize>,
    /// Sites gaining, in site order.
    pub to: Vec<usize>,
    /// The demand that changes site (what the `to` sites gain, including demand that stops
    /// landing on any site: it is counted as leaving `from`).
    pub rate: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Impact {
    /// Every site listed or touched, in site order.
    pub sites: Vec<SiteImpact>,
    /// The `top` demand items by moved rate (ties by service, then prefix order).
    pub moves: Vec<PrefixMove>,
    /// Demand that changes site, over all items.
    pub moved_rate: f64,
    /// Prefixes of either table (per service) whose most specific entry answers differently
    /// in the two: the address ranges, as the tables cut them, whose answer changes.
    pub changed_ranges: usize,
}

/// The number of addresses in `p`, as a float (exact: a power of two).
fn size(p: &IpNet) -> f64 {
    let bits = match p {
        IpNet::V4(_) => 32,
        IpNet::V6(_) => 128,
    };
    2f64.powi(bits - i32::from(p.prefix_len()))
}

/// One table made ready for lookups.
struct Prepared {
    /// Entries in [`sort_key`] order, each prefix once, with its decision's index.
    entries: Vec<(IpNet, u32)>,
    /// Per entry: the addresses it answers itself (size less direct children).
    own: Vec<f64>,
    /// Per distinct decision (scope cleared): the decision and its site shares.
    decisions: Vec<(Decision, Vec<(usize, f64)>)>,
}

fn prepare(table: &[(IpNet, Decision)], site_of: &dyn Fn(u16) -> Option<usize>) -> Prepared {
    let ordered = table
        .windows(2)
        .all(|w| sort_key(&w[0].0) < sort_key(&w[1].0))
        && table.iter().all(|(p, _)| *p == p.trunc());
    let table: Cow<'_, [(IpNet, Decision)]> = if ordered {
        Cow::Borrowed(table)
    } else {
        Cow::Owned(sorted(table.iter().map(|(p, d)| (p.trunc(), *d)).collect()))
    };
    let mut index: HashMap<Decision, u32> = HashMap::new();
    let mut decisions = Vec::new();
    let mut entries = Vec::with_capacity(table.len());
    let mut own = Vec::with_capacity(table.len());
    let mut stack: Vec<usize> = Vec::with_capacity(129);
    for (i, (p, d)) in table.iter().enumerate() {
        let d = scope_cleared(d);
        let id = *index.entry(d).or_insert_with(|| {
            decisions.push((d, site_shares(&d, site_of)));
            (decisions.len() - 1) as u32
        });
        entries.push((*p, id));
        own.push(size(p));
        while stack.last().is_some_and(|&t| !table[t].0.contains(p)) {
            stack.pop();
        }
        if let Some(&parent) = stack.last() {
            own[parent] -= size(p);
        }
        stack.push(i);
    }
    Prepared {
        entries,
        own,
        decisions,
    }
}

/// Where one demand item's addresses go in a table: (site, share of the item), merged by
/// site, written into `out`.
fn spread(t: &Prepared, sweep: &mut Sweep<'_, u32>, p: &IpNet, out: &mut Vec<(usize, f64)>) {
    out.clear();
    let whole = size(p);
    let range = subtree_range(&t.entries, p);
    let mut inside = 0.0;
    for i in range.clone() {
        let share = t.own[i] / whole;
        inside += share;
        for &(site, v) in &t.decisions[t.entries[i].1 as usize].1 {
            out.push((site, share * v));
        }
    }
    if let Some(&id) = sweep.at(p) {
        let rest = (1.0 - inside).max(0.0);
        if rest > 0.0 {
            for &(site, v) in &t.decisions[id as usize].1 {
                out.push((site, rest * v));
            }
        }
    }
    out.sort_by_key(|&(s, _)| s);
    out.dedup_by(|b, a| {
        if a.0 == b.0 {
            a.1 += b.1;
            true
        } else {
            false
        }
    });
}

/// Whether an item lands on the same decision in both tables with nothing inside it: the
/// common case, answered without spreading.
fn same_single(old: &Prepared, new: &Prepared, o: Option<u32>, n: Option<u32>, p: &IpNet) -> bool {
    let inside = |t: &Prepared| !subtree_range(&t.entries, p).is_empty();
    match (o, n) {
        (Some(o), Some(n)) => {
            old.decisions[o as usize].0 == new.decisions[n as usize].0
                && !inside(old)
                && !inside(new)
        }
        (None, None) => !inside(old) && !inside(new),
        _ => false,
    }
}

/// The preview: `current` and `candidate` tables per service (entries in any order; each
/// entry's scope is ignored), `demand` per prefix, `sites` as measured; the `top` moves
/// are kept. A service in one list only has an empty table in the other (all its demand
/// moves to no site, or from none).
pub fn impact(
    current: &[(u32, &[(IpNet, Decision)])],
    candidate: &[(u32, &[(IpNet, Decision)])],
    demand: &PrefixDemand,
    site_of: &dyn Fn(u16) -> Option<usize>,
    sites: &[SiteLoad],
    top: usize,
) -> Impact {
    // Per service: (current, candidate); a service listed twice keeps its last table.
    let mut services: BTreeMap<u32, (Entries<'_>, Entries<'_>)> = BTreeMap::new();
    for &(s, t) in current {
        services.entry(s).or_insert((&[], &[])).0 = t;
    }
    for &(s, t) in candidate {
        services.entry(s).or_insert((&[], &[])).1 = t;
    }

    let mut flows: BTreeMap<usize, (f64, f64)> = BTreeMap::new();
    let mut moves: Vec<PrefixMove> = Vec::new();
    let mut moved_rate = 0.0;
    let mut changed_ranges = 0;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for (&service, &(old_t, new_t)) in &services {
        let old = prepare(old_t, site_of);
        let new = prepare(new_t, site_of);
        changed_ranges += changed(&old, &new);
        let mut so = Sweep::new(&old.entries);
        let mut sn = Sweep::new(&new.entries);
        for &(p, rate) in demand.service(service) {
            let rate = clean_rate(rate);
            let o = so.at(&p).copied();
            let n = sn.at(&p).copied();
            if rate <= 0.0 || same_single(&old, &new, o, n, &p) {
                continue;
            }
            // `spread` asks the sweeps again for the same prefix: they answer from their
            // stacks without moving on.
            spread(&old, &mut so, &p, &mut a);
            spread(&new, &mut sn, &p, &mut b);
            let mut d: BTreeMap<usize, f64> = BTreeMap::new();
            for &(s, v) in &b {
                *d.entry(s).or_default() += v;
            }
            for &(s, v) in &a {
                *d.entry(s).or_default() -= v;
            }
            let (mut from, mut to) = (Vec::new(), Vec::new());
            let (mut gain, mut loss) = (0.0, 0.0);
            for (&s, &v) in &d {
                // Below this the difference is rounding of address shares, not a move.
                if v.abs() <= 1e-12 {
                    continue;
                }
                let f = flows.entry(s).or_default();
                if v > 0.0 {
                    f.0 += v * rate;
                    gain += v;
                    to.push(s);
                } else {
                    f.1 -= v * rate;
                    loss -= v;
                    from.push(s);
                }
            }
            let r = gain.max(loss) * rate;
            if r > 0.0 {
                moved_rate += r;
                moves.push(PrefixMove {
                    service,
                    prefix: p,
                    from,
                    to,
                    rate: r,
                });
            }
        }
    }
    // Services with demand but in neither list have nothing to compare.

    moves.sort_by(|x, y| {
        y.rate
            .total_cmp(&x.rate)
            .then(x.service.cmp(&y.service))
            .then(sort_key(&x.prefix).cmp(&sort_key(&y.prefix)))
    });
    moves.truncate(top);

    let mut listed: BTreeMap<usize, SiteLoad> = BTreeMap::new();
    for s in sites {
        listed.insert(s.site, *s);
    }
    let all: std::collections::BTreeSet<usize> =
        listed.keys().chain(flows.keys()).copied().collect();
    let sites = all
        .into_iter()
        .map(|site| {
            let (moving_in, moving_out) = flows.get(&site).copied().unwrap_or((0.0, 0.0));
            let load = listed.get(&site).map_or(0.0, |s| clean_rate(s.load));
            SiteImpact {
                site,
                load,
                moving_in,
                moving_out,
                projected: load - moving_out + moving_in,
                capacity: listed.get(&site).and_then(|s| s.capacity),
            }
        })
        .collect();
    Impact {
        sites,
        moves,
        moved_rate,
        changed_ranges,
    }
}

/// [`Impact::changed_ranges`] for one service: a merge of the two tables' prefixes, each
/// looked up in both.
fn changed(old: &Prepared, new: &Prepared) -> usize {
    let (mut i, mut j) = (0, 0);
    let mut so = Sweep::new(&old.entries);
    let mut sn = Sweep::new(&new.entries);
    let mut n = 0;
    loop {
        let p = match (old.entries.get(i), new.entries.get(j)) {
            (None, None) => break,
            (Some(x), None) => {
                i += 1;
                x.0
            }
            (None, Some(y)) => {
                j += 1;
                y.0
            }
            (Some(x), Some(y)) => match sort_key(&x.0).cmp(&sort_key(&y.0)) {
                std::cmp::Ordering::Less => {
                    i += 1;
                    x.0
                }
                std::cmp::Ordering::Greater => {
                    j += 1;
                    y.0
                }
                std::cmp::Ordering::Equal => {
                    i += 1;
                    j += 1;
                    x.0
                }
            },
        };
        let a = so.at(&p).map(|&d| &old.decisions[d as usize].0);
        let b = sn.at(&p).map(|&d| &new.decisions[d as usize].0);
        n += usize::from(a != b);
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    fn dec(servers: &[u16]) -> Decision {
        let mut d = Decision {
            count: servers.len() as u8,
            primary: 1,
            prefix_len: 7,
            ..Default::default()
        };
        d.servers[..servers.len()].copy_from_slice(servers);
        d.weights[..servers.len()].fill(1);
        d
    }

    /// Server s is at site s / 10.
    fn site_of(s: u16) -> Option<usize> {
        Some(usize::from(s / 10))
    }

    fn site(i: &Impact, s: usize) -> &SiteImpact {
        i.sites.iter().find(|x| x.site == s).unwrap()
    }

    #[test]
    fn a_demand_24_split_by_a_25_entry_moves_half() {
        let cur = vec![(net("10.0.0.0/8"), dec(&[1]))];
        let cand = vec![
            (net("10.0.0.0/8"), dec(&[1])),
            (net("10.0.0.128/25"), dec(&[11])),
        ];
        let demand = PrefixDemand::from_rates(
            [
                (5, net("10.0.0.0/24"), 100.0),
                (5, net("10.0.1.0/24"), 50.0),
            ]
            .into_iter(),
        );
        let sites = [
            SiteLoad {
                site: 0,
                capacity: Some(1000.0),
                load: 150.0,
            },
            SiteLoad {
                site: 1,
                capacity: None,
                load: 0.0,
            },
        ];
        let i = impact(&[(5, &cur)], &[(5, &cand)], &demand, &site_of, &sites, 10);
        assert_eq!(i.moves.len(), 1);
        let m = &i.moves[0];
        assert_eq!(
            (m.prefix, m.from.clone(), m.to.clone()),
            (net("10.0.0.0/24"), vec![0], vec![1])
        );
        assert!((m.rate - 50.0).abs() < 1e-9);
        assert!((i.moved_rate - 50.0).abs() < 1e-9);
        assert!((site(&i, 0).moving_out - 50.0).abs() < 1e-9);
        assert!((site(&i, 0).projected - 100.0).abs() < 1e-9);
        assert!((site(&i, 1).moving_in - 50.0).abs() < 1e-9);
        assert_eq!(site(&i, 1).capacity, None);
        assert_eq!(i.changed_ranges, 1);

        // A demand /25 inside an entry of its own, and a /23 over the /24s: exact shares.
        let demand = PrefixDemand::from_rates(
            [
                (5, net("10.0.0.128/25"), 8.0),
                (5, net("10.0.0.0/23"), 40.0),
            ]
            .into_iter(),
        );
        let i = impact(&[(5, &cur)], &[(5, &cand)], &demand, &site_of, &sites, 10);
        assert!((i.moved_rate - (8.0 + 40.0 / 4.0)).abs() < 1e-9);
        assert_eq!(i.moves[0].prefix, net("10.0.0.0/23"));
    }

    #[test]
    fn a_service_in_one_table_moves_all_of_its_demand() {
        let t = vec![(net("::/0"), dec(&[21])), (net("0.0.0.0/0"), dec(&[22]))];
        let demand = PrefixDemand::from_rates(
            [
                (1, net("2001:db8::/48"), 3.0),
                (1, net("192.0.2.0/24"), 1.0),
            ]
            .into_iter(),
        );
        let gone = impact(&[(1, &t)], &[], &demand, &site_of, &[], 1);
        assert!((gone.moved_rate - 4.0).abs() < 1e-9);
        assert_eq!(gone.moves.len(), 1);
        assert_eq!(gone.moves[0].prefix, net("2001:db8::/48"));
        assert!(gone.moves[0].to.is_empty());
        assert!((site(&gone, 2).moving_out - 4.0).abs() < 1e-9);
        assert_eq!(gone.changed_ranges, 2);
        let new = impact(&[], &[(1, &t)], &demand, &site_of, &[], 5);
        assert!((site(&new, 2).moving_in - 4.0).abs() < 1e-9);
        assert_eq!(new.moves.len(), 2);
    }

    #[test]
    fn no_change_moves_nothing() {
        let t = vec![
            (net("10.0.0.0/8"), dec(&[1])),
            (net("10.1.0.0/16"), dec(&[11])),
            (net("10.1.2.0/24"), dec(&[1, 11])),
        ];
        // The same table in another order, with other scopes.
        let mut u: Vec<_> = t
            .iter()
            .rev()
            .map(|&(p, d)| {
                (
                    p,
                    Decision {
                        prefix_len: 30,
                        ..d
                    },
                )
            })
            .collect();
        u.rotate_left(1);
        let demand = PrefixDemand::from_rates(
            [
                (1, net("10.0.0.0/8"), 10.0),
                (1, net("10.1.0.0/20"), 5.0),
                (1, net("10.1.2.0/24"), 1.0),
            ]
            .into_iter(),
        );
        let sites = [SiteLoad {
            site: 0,
            capacity: Some(10.0),
            load: 7.0,
        }];
        let i = impact(&[(1, &t)], &[(1, &u)], &demand, &site_of, &sites, 10);
        assert_eq!(i.moved_rate, 0.0);
        assert!(i.moves.is_empty());
        assert_eq!(i.changed_ranges, 0);
        assert_eq!(
            i.sites,
            vec![SiteImpact {
                site: 0,
                load: 7.0,
                moving_in: 0.0,
                moving_out: 0.0,
                projected: 7.0,
                capacity: Some(10.0)
            }]
        );
        let json = serde_json::to_value(&i).unwrap();
        assert_eq!(json["changed_ranges"], 0);
    }

    /// A world the size the controller sees: ~750 k entries over 4 services and 1 M demand
    /// prefixes. Run with `cargo test --release -p director-plan impact_at_scale -- --ignored
    /// --nocapture` for the time; [`scale_world`] is there for a bench.
    #[test]
    #[ignore]
    fn impact_at_scale() {
        let (cur, cand, demand) = scale_world(750_000, 1_000_000);
        let c: Vec<(u32, &[(IpNet, Decision)])> =
            cur.iter().map(|(s, t)| (*s, t.as_slice())).collect();
        let n: Vec<(u32, &[(IpNet, Decision)])> =
            cand.iter().map(|(s, t)| (*s, t.as_slice())).collect();
        let started = std::time::Instant::now();
        let i = impact(&c, &n, &demand, &site_of, &[], 20);
        eprintln!(
            "impact: {:?} for {} entries, {} demand items; moved {:.1}, {} changed ranges",
            started.elapsed(),
            cur.iter().map(|(_, t)| t.len()).sum::<usize>(),
            demand.len(),
            i.moved_rate,
            i.changed_ranges
        );
        assert!(i.moved_rate > 0.0);
    }

    type Tables = Vec<(u32, Vec<(IpNet, Decision)>)>;

    /// Tables of /16s, /20s and /24s with a /8 default per service, the candidate changing
    /// one entry in 50, and /24 plus some /22 demand.
    pub(crate) fn scale_world(entries: usize, items: usize) -> (Tables, Tables, PrefixDemand) {
        let mut x: u64 = 1;
        let mut next = move || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            x >> 33
        };
        let per = entries / 4;
        let mut cur = Vec::new();
        let mut cand = Vec::new();
        for s in 1..=4u32 {
            let mut t = vec![(net("0.0.0.0/0"), dec(&[1]))];
            for _ in 0..per {
                let addr = (next() as u32) << 1;
                let len = [16u8, 20, 24][(next() % 3) as usize];
                let p = IpNet::new(std::net::IpAddr::from(addr.to_be_bytes()), len)
                    .unwrap()
                    .trunc();
                t.push((p, dec(&[(next() % 40) as u16])));
            }
            let t = sorted(t);
            let c: Vec<_> = t
                .iter()
                .map(|&(p, d)| {
                    if next() % 50 == 0 {
                        (p, dec(&[(next() % 40) as u16]))
                    } else {
                        (p, d)
                    }
                })
                .collect();
            cur.push((s, t));
            cand.push((s, c));
        }
        let demand = PrefixDemand::from_rates((0..items).map(|_| {
            let addr = (next() as u32) << 1;
            let len = if next() % 10 == 0 { 22 } else { 24 };
            let p = IpNet::new(std::net::IpAddr::from(addr.to_be_bytes()), len).unwrap();
            (1 + (next() % 4) as u32, p, 1.0 + (next() % 100) as f64)
        }));
        (cur, cand, demand)
    }
}
