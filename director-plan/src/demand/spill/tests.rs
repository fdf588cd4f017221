//! Replay tests: a synthetic world of four sites and 200 groups, each ranking the sites in
//! its own DD order; a simulator measures each site's load from the decisions in force, the
//! way the kernel's counters would, and the loop runs on what it measures.

use super::*;
use proptest::prelude::*;

const CAPS: [f64; 4] = [1000.0, 800.0, 600.0, 1200.0];
const STEP_S: f64 = 5.0;

/// Site i has servers 10i+1 and 10i+2.
fn site_of(s: u16) -> Option<usize> {
    let site = usize::from(s / 10);
    (matches!(s % 10, 1 | 2) && site < 8).then_some(site)
}

/// A deterministic pseudo-random stream (an LCG; the tests must not depend on a seed file).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn unit(&mut self) -> f64 {
        self.next() as f64 / (1u64 << 31) as f64
    }
}

fn order_of(rng: &mut Lcg, n: usize) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = (rng.next() % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
    v
}

fn decision_for(order: &[usize], primary: u8, tag: u16) -> Decision {
    let mut d = Decision {
        count: (order.len() * 2) as u8,
        primary,
        ..Default::default()
    };
    for (k, &site) in order.iter().enumerate() {
        d.servers[2 * k] = (10 * site + 1) as u16;
        d.servers[2 * k + 1] = (10 * site + 2) as u16;
        d.weights[2 * k] = tag;
        d.weights[2 * k + 1] = tag;
    }
    d
}

/// The planned site order of a decision built by [`decision_for`].
fn planned_order(d: &Decision) -> Vec<usize> {
    d.servers[..usize::from(d.count)]
        .iter()
        .step_by(2)
        .filter_map(|&s| site_of(s))
        .collect()
}

struct World {
    groups: Vec<Group>,
}

/// 200 groups, mostly small, some large; every group's rate scaled so that the sites
/// measure `want[site]` under the plan.
fn world(want: [f64; 4]) -> World {
    let mut rng = Lcg(36);
    let mut groups = Vec::new();
    for i in 0..200u32 {
        let order = order_of(&mut rng, 4);
        let rate = if rng.unit() < 0.8 {
            0.5 + 4.5 * rng.unit()
        } else {
            10.0 + 50.0 * rng.unit()
        };
        // The weight makes each group's decision its own (same value for both servers, so
        // the share stays even).
        let tag = 1 + (i / 7) as u16;
        groups.push(Group {
            service: i % 7,
            planned: decision_for(&order, 2, tag),
            rate,
        });
    }
    let spill = Spill::new();
    let now = measure(&spill, &groups);
    for g in &mut groups {
        let first = planned_order(&g.planned)[0];
        g.rate *= want[first] / now[first];
    }
    World { groups }
}

/// What each site measures under the overrides of `spill`.
fn measure(spill: &Spill, groups: &[Group]) -> [f64; 4] {
    let mut load = [0.0; 4];
    for g in groups {
        let d = spill.effective(g.service, &g.planned).unwrap_or(g.planned);
        for (s, v) in site_shares(&d, &site_of) {
            load[s] += g.rate * v;
        }
    }
    load
}

fn sites(load: [f64; 4]) -> Vec<SiteLoad> {
    (0..4)
        .map(|s| SiteLoad {
            site: s,
            capacity: Some(CAPS[s]),
            load: load[s],
        })
        .collect()
}

/// The cost of moving: how far apart the sites are (any fixed table will do).
fn loss(_: &Group, from: usize, to: usize) -> f64 {
    const DIST: [[f64; 4]; 4] = [
        [0.0, 10.0, 30.0, 20.0],
        [10.0, 0.0, 15.0, 25.0],
        [30.0, 15.0, 0.0, 5.0],
        [20.0, 25.0, 5.0, 0.0],
    ];
    DIST[from][to]
}

fn run(spill: &mut Spill, now: &mut f64, groups: &[Group], s: &SpillSettings) -> Cycle {
    let load = measure(spill, groups);
    let c = spill.cycle(*now, &sites(load), groups, &site_of, &loss, s);
    *now += STEP_S;
    c
}

fn target(site: usize) -> f64 {
    SpillSettings::default().target * CAPS[site]
}

/// Site 0 at 150 % of its target, the others at half their capacity.
fn overloaded() -> World {
    world([1.5 * target(0), 0.5 * CAPS[1], 0.5 * CAPS[2], 0.5 * CAPS[3]])
}

/// (a), then (b) after convergence, then (c).
#[test]
fn spill_converges_then_holds_then_returns_without_flapping() {
    let s = SpillSettings::default();
    let mut w = overloaded();
    let mut spill = Spill::new();
    let mut now = 1000.0;
    let start = measure(&spill, &w.groups);
    assert!((start[0] / target(0) - 1.5).abs() < 1e-9);
    let excess = start[0] - target(0);

    // (a) Two cycles bring site 0 to its target ± 5 %.
    let mut moves = Vec::new();
    for _ in 0..2 {
        let c = run(&mut spill, &mut now, &w.groups, &s);
        assert_eq!(c.over, vec![0]);
        assert!(!c.all_over);
        assert!(c.returns.is_empty());
        moves.extend(c.moves);
    }
    let after = measure(&spill, &w.groups);
    assert!(
        (after[0] / target(0) - 1.0).abs() <= 0.05,
        "site 0 at {} of target",
        after[0] / target(0)
    );
    let moved: f64 = moves.iter().map(|m| m.rate).sum();
    assert!(
        moved >= excess * 0.95 && moved <= excess * 1.10,
        "{moved} for {excess}"
    );
    for (site, &load) in after.iter().enumerate().skip(1) {
        assert!(load <= target(site) + 1e-9);
    }
    // Every moved group went to its next DD site with room: the sites it walked past in its
    // planned order had none (receivers only gain during these cycles, so a site without
    // room at the move has none at the end either), and they are demoted with site 0.
    let mut second = 0;
    for m in &moves {
        assert_eq!(m.from, 0);
        let order = planned_order(&m.planned);
        assert_eq!(order[0], 0);
        let at = order.iter().position(|&s| s == m.to).unwrap();
        for &skipped in &order[1..at] {
            assert!(after[skipped] + m.rate > target(skipped), "{m:?}");
        }
        second += usize::from(at == 1);
        let o = spill
            .overrides()
            .find(|o| o.service == m.service && o.planned == m.planned)
            .unwrap();
        assert_eq!(o.away, order[..at].to_vec());
        // The demoted servers went to the end, in order.
        assert_eq!(o.effective.servers[0], (10 * m.to + 1) as u16);
        assert_eq!(&o.effective.servers[8 - 2 * at..8 - 2 * at + 2], &[1, 2]);
        assert_eq!(o.effective.primary, 2);
    }
    assert!(
        second * 2 > moves.len(),
        "most groups find room at their second site"
    );
    // Whole groups, once each.
    let mut keys: Vec<_> = moves
        .iter()
        .map(|m| (m.service, m.planned.weights))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), moves.len());

    // (b) Converged and steady: nothing moves for 30 cycles.
    for _ in 0..30 {
        let c = run(&mut spill, &mut now, &w.groups, &s);
        assert!(c.moves.is_empty() && c.returns.is_empty(), "{c:?}");
    }

    // (c) Demand falls to 40 %: site 0 sits below `low`; after the hold the groups come
    // back, once each, and nothing moves away again.
    for g in &mut w.groups {
        g.rate *= 0.4;
    }
    let overridden = spill.overrides().count();
    assert!(overridden > 0);
    let fell = now;
    let mut returned = Vec::new();
    for _ in 0..40 {
        let t = now;
        let c = run(&mut spill, &mut now, &w.groups, &s);
        assert!(c.moves.is_empty(), "{c:?}");
        if !c.returns.is_empty() {
            assert!(t - fell >= s.hold_s, "returned after {} s", t - fell);
        }
        returned.extend(c.returns);
    }
    assert_eq!(returned.len(), overridden);
    assert_eq!(spill.overrides().count(), 0);
    for r in &returned {
        assert_eq!(r.to, 0);
    }
    let back = measure(&spill, &w.groups);
    assert!(back[0] <= target(0));
    for _ in 0..30 {
        let c = run(&mut spill, &mut now, &w.groups, &s);
        assert!(c.moves.is_empty() && c.returns.is_empty(), "{c:?}");
    }
}

/// (b) from scratch: every site under target, no move and no return in 30 cycles.
#[test]
fn steady_demand_under_target_moves_nothing() {
    let s = SpillSettings::default();
    let w = world([
        0.8 * target(0),
        0.5 * CAPS[1],
        0.9 * target(2),
        0.3 * CAPS[3],
    ]);
    let mut spill = Spill::new();
    let mut now = 0.0;
    for _ in 0..30 {
        let c = run(&mut spill, &mut now, &w.groups, &s);
        assert_eq!(c, Cycle::default());
    }
}

/// (d) Every site over target: nothing moves, and the cycle says so.
#[test]
fn all_over_moves_nothing() {
    let s = SpillSettings::default();
    let w = world([
        1.2 * target(0),
        1.1 * target(1),
        1.3 * target(2),
        1.05 * target(3),
    ]);
    let mut spill = Spill::new();
    let mut now = 0.0;
    for _ in 0..3 {
        let c = run(&mut spill, &mut now, &w.groups, &s);
        assert!(c.all_over);
        assert_eq!(c.over, vec![2, 0, 1, 3]);
        assert!(c.moves.is_empty() && c.returns.is_empty());
    }
    assert_eq!(spill.overrides().count(), 0);
}

/// (e) The same inputs in another order give the same moves.
#[test]
fn group_order_does_not_matter() {
    let s = SpillSettings::default();
    let w = overloaded();
    let load = sites(measure(&Spill::new(), &w.groups));
    let mut shuffled = w.groups.clone();
    let mut rng = Lcg(7);
    for i in (1..shuffled.len()).rev() {
        let j = (rng.next() % (i as u64 + 1)) as usize;
        shuffled.swap(i, j);
    }
    let mut rev_sites = load.clone();
    rev_sites.reverse();
    let mut a = Spill::new();
    let mut b = Spill::new();
    let ca = a.cycle(0.0, &load, &w.groups, &site_of, &loss, &s);
    let cb = b.cycle(0.0, &rev_sites, &shuffled, &site_of, &loss, &s);
    assert!(!ca.moves.is_empty());
    assert_eq!(ca, cb);
    let oa: Vec<_> = a.overrides().cloned().collect();
    let ob: Vec<_> = b.overrides().cloned().collect();
    assert_eq!(oa, ob);
}

/// The waterfall: when the next site has no room, the group goes on to the one after it,
/// and the full site is demoted too.
#[test]
fn a_full_next_site_is_walked_past() {
    let s = SpillSettings::default();
    let g = Group {
        service: 1,
        planned: decision_for(&[0, 1, 2, 3], 2, 1),
        rate: 10.0,
    };
    // Site 0 is 15 over, the group is 10 of it; site 1 is 5 under its target.
    let loads = vec![
        SiteLoad {
            site: 0,
            capacity: Some(100.0),
            load: 100.0,
        },
        SiteLoad {
            site: 1,
            capacity: Some(100.0),
            load: 80.0,
        },
        SiteLoad {
            site: 2,
            capacity: Some(1000.0),
            load: 0.0,
        },
        SiteLoad {
            site: 3,
            capacity: Some(1000.0),
            load: 0.0,
        },
    ];
    let settings = s;
    let mut spill = Spill::new();
    let c = spill.cycle(0.0, &loads, &[g], &site_of, &loss, &settings);
    assert_eq!(c.moves.len(), 1);
    assert_eq!((c.moves[0].from, c.moves[0].to), (0, 2));
    let o = spill.overrides().next().unwrap();
    assert_eq!(o.away, vec![0, 1]);
    assert_eq!(&o.effective.servers[..8], &[21, 22, 31, 32, 1, 2, 11, 12]);
}

#[test]
fn demote_keeps_remaining_primaries_or_takes_the_next_site() {
    // Primaries at two sites: demoting one leaves the other's as the equals.
    let mut d = decision_for(&[0, 1, 2], 2, 1);
    d.servers[1] = 11;
    d.servers[2] = 2;
    d.primary = 2;
    let e = demote(&d, &[0], &site_of).unwrap();
    assert_eq!(&e.servers[..6], &[11, 12, 21, 22, 1, 2]);
    assert_eq!(e.primary, 1);
    // Everything demoted: nowhere to go.
    assert!(demote(&d, &[0, 1, 2], &site_of).is_none());
}

fn arb_world() -> impl Strategy<Value = (Vec<f64>, Vec<(u64, f64, u8)>)> {
    (
        prop::collection::vec(50.0f64..1000.0, 2..=4),
        prop::collection::vec((any::<u64>(), 0.0f64..60.0, 1u8..=2), 1..40),
    )
}

/// One group per spec, each its own service, ranking `n` sites in the spec's order.
fn groups_of(specs: &[(u64, f64, u8)], n: usize) -> Vec<Group> {
    specs
        .iter()
        .enumerate()
        .map(|(i, &(seed, rate, primary))| {
            let order = order_of(&mut Lcg(seed), n);
            Group {
                service: i as u32,
                planned: decision_for(&order, primary, 1),
                rate,
            }
        })
        .collect()
}

proptest! {
    /// One cycle on any world: what leaves an over site is at most 110 % of its excess
    /// (and `max_step` of its load), and no site that takes spill ends over its target.
    #[test]
    fn moves_stay_within_the_excess_and_the_receivers_target((caps, specs) in arb_world()) {
        let s = SpillSettings::default();
        let n = caps.len();
        let groups = groups_of(&specs, n);
        let measure_n = |spill: &Spill| measure_in(spill, &groups, n);
        let mut spill = Spill::new();
        let before = measure_n(&spill);
        let sites = sites_in(&caps, &before);
        let c = spill.cycle(0.0, &sites, &groups, &site_of, &|_, a, b| (a as f64 - b as f64).abs(), &s);
        let after = measure_n(&spill);
        for site in 0..n {
            let out: f64 = c.moves.iter().filter(|m| m.from == site).map(|m| m.rate).sum();
            let excess = (before[site] - s.target * caps[site]).max(0.0);
            prop_assert!(out <= excess * 1.10 + 1e-9);
            prop_assert!(out <= s.max_step * before[site] + 1e-9);
            if c.moves.iter().any(|m| m.to == site) || after[site] > before[site] + 1e-9 {
                prop_assert!(after[site] <= s.target * caps[site] + 1e-6,
                    "site {} took spill to {} of {}", site, after[site], caps[site]);
            }
        }
        if c.all_over {
            prop_assert!(c.moves.is_empty());
        }
    }
}

/// What each of `n` sites measures under the overrides of `spill`.
fn measure_in(spill: &Spill, groups: &[Group], n: usize) -> Vec<f64> {
    let mut load = vec![0.0; n];
    for g in groups {
        let d = spill.effective(g.service, &g.planned).unwrap_or(g.planned);
        for (site, v) in site_shares(&d, &site_of) {
            load[site] += g.rate * v;
        }
    }
    load
}

fn sites_in(caps: &[f64], load: &[f64]) -> Vec<SiteLoad> {
    caps.iter()
        .zip(load)
        .enumerate()
        .map(|(site, (&c, &load))| SiteLoad {
            site,
            capacity: Some(c),
            load,
        })
        .collect()
}

/// One closed-loop cycle over sites of capacity `caps`, `step_s` long.
fn run_in(
    spill: &mut Spill,
    now: &mut f64,
    caps: &[f64],
    groups: &[Group],
    s: &SpillSettings,
    step_s: f64,
) -> Cycle {
    let load = measure_in(spill, groups, caps.len());
    let c = spill.cycle(*now, &sites_in(caps, &load), groups, &site_of, &loss, s);
    *now += step_s;
    c
}

fn is(m: &Move, g: &Group) -> bool {
    m.service == g.service && m.planned == g.planned
}

/// Issue 51: a group bigger than `max_step` of its site's target load. Site a (0, capacity
/// 100) at 150 %: the big group and 100 small ones; b and c (capacity 1000) at 30 %. a
/// spills the big group first (same loss, larger rate), then a's own groups fall to 20 % of
/// its capacity: the big group must be back within one hold of a going under `low`, and
/// then stay. It sorts after the small groups a also spilled, so they come back first in
/// the same cycle: the big one must not be shut out by them either.
fn big_group_comes_back(s: SpillSettings, step_s: f64, big_rate: f64) {
    const A: usize = 0;
    let caps = [100.0, 1000.0, 1000.0];
    let mut groups = vec![Group {
        service: 9,
        planned: decision_for(&[0, 1, 2], 2, 1),
        rate: big_rate,
    }];
    for tag in 1..=100 {
        groups.push(Group {
            service: 1,
            planned: decision_for(&[0, 1, 2], 2, tag),
            rate: (1.5 * caps[A] - big_rate) / 100.0,
        });
    }
    for tag in 1..=30 {
        for (service, order) in [(2, [1, 2, 0]), (3, [2, 1, 0])] {
            groups.push(Group {
                service,
                planned: decision_for(&order, 2, tag),
                rate: 10.0,
            });
        }
    }
    let big = groups[0];
    let mut spill = Spill::new();
    let mut now = 0.0;

    // Phase 1: a spills down to its target; the big group is among the first to go.
    let mut big_moves = 0;
    for _ in 0..10 {
        let c = run_in(&mut spill, &mut now, &caps, &groups, &s, step_s);
        big_moves += c.moves.iter().filter(|m| is(m, &big)).count();
    }
    assert_eq!(big_moves, 1, "the {big_rate}/s group spilled once");
    assert!(spill.effective(big.service, &big.planned).is_some());
    // Whole groups: a ends within one small group of its target, above `low`.
    let load = measure_in(&spill, &groups, caps.len());
    assert!(
        load[A] <= s.target * caps[A] + groups[1].rate,
        "a at {}",
        load[A]
    );
    assert!(load[A] > s.low * caps[A], "a at {}", load[A]);

    // Phase 2: a's own groups (those spilled too) fall so that a measures 20 %.
    let scale = 0.2 * caps[A] / load[A];
    for g in groups.iter_mut().filter(|g| g.service == 1) {
        g.rate *= scale;
    }
    let fell = now;
    let mut back_at = None;
    let cycles = (4.0 * s.hold_s / step_s) as usize + 50;
    for _ in 0..cycles {
        let t = now;
        let load = measure_in(&spill, &groups, caps.len());
        assert!(load[A] <= s.target * caps[A], "a at {} at {t}", load[A]);
        let c = run_in(&mut spill, &mut now, &caps, &groups, &s, step_s);
        assert!(c.moves.is_empty(), "moved at {t}: {c:?}");
        let back = c.returns.iter().filter(|m| is(m, &big)).count();
        assert!(back <= 1 && (back == 0 || back_at.is_none()), "flap at {t}");
        if back == 1 {
            back_at = Some(t);
        }
    }
    let Some(back_at) = back_at else {
        panic!(
            "the {big_rate}/s group never came back to a (max_step {})",
            s.max_step
        );
    };
    assert!(
        back_at - fell <= s.hold_s + 2.0 * step_s,
        "the {big_rate}/s group came back {} s after a fell under low",
        back_at - fell
    );
    assert!(spill.effective(big.service, &big.planned).is_none());
    assert_eq!(spill.overrides().count(), 0, "everything a spilled is back");
}

/// The measurement: max_step 0.4, hold 5 s, a 43.3/s group.
#[test]
fn a_group_bigger_than_the_return_step_comes_back() {
    let s = SpillSettings {
        hold_s: 5.0,
        max_step: 0.4,
        ..SpillSettings::default()
    };
    big_group_comes_back(s, 1.0, 43.3);
}

/// The defaults: max_step 0.25 returns at most 21.25 % of capacity a cycle; a 30 % group.
#[test]
fn a_group_bigger_than_the_default_return_step_comes_back() {
    big_group_comes_back(SpillSettings::default(), STEP_S, 30.0);
}

proptest! {
    /// Issue 51: once every site is idle, a group that moved out comes back, whatever its
    /// size, when it fits under its home site's target (one that does not would only
    /// spill again). Each moved group is tested alone: every other group falls to 0.
    #[test]
    fn a_moved_group_returns_once_the_sites_are_idle((caps, specs) in arb_world()) {
        let s = SpillSettings::default();
        let n = caps.len();
        let groups = groups_of(&specs, n);
        let mut spill = Spill::new();
        let mut now = 0.0;
        for _ in 0..4 {
            run_in(&mut spill, &mut now, &caps, &groups, &s, STEP_S);
        }
        // The hold, then one cycle per site the waterfall demoted, and a spare.
        let cycles = (s.hold_s / STEP_S) as usize + n + 2;
        for g in &groups {
            if spill.effective(g.service, &g.planned).is_none() {
                continue;
            }
            let home = planned_order(&g.planned)[0];
            if g.rate > s.target * caps[home] {
                continue;
            }
            let idle: Vec<Group> = groups
                .iter()
                .map(|h| Group { rate: if h.service == g.service { h.rate } else { 0.0 }, ..*h })
                .collect();
            let mut alone = spill.clone();
            let mut t = now;
            for _ in 0..cycles {
                run_in(&mut alone, &mut t, &caps, &idle, &s, STEP_S);
            }
            prop_assert!(
                alone.effective(g.service, &g.planned).is_none(),
                "a {}/s group stayed away from site {} (capacity {})", g.rate, home, caps[home]
            );
        }
    }
}
