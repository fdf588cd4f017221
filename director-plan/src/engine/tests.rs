use std::net::{IpAddr, Ipv4Addr};

use super::metric::{MedRoute, Rtt as Ns};
use super::policy::Kind;
use super::rank::{bits_of, quantize, SortBuffers};
use super::Metric::Rtt;
use super::*;
use director_common::maps::MAX_CANDIDATES;
use proptest::prelude::*;
use Metric::*;

/// Milliseconds as the engine's nanoseconds.
pub(super) fn ms(v: f64) -> Ns {
    Ns((v * 1e6).round() as u64)
}

fn m() -> Metrics {
    Metrics::default()
}

fn cand(server: u16, metrics: Metrics) -> Candidate {
    Candidate {
        server,
        portion: 1,
        metrics,
    }
}

/// The servers of each tier.
fn tiers(p: &Policy, c: &[Candidate]) -> Vec<Vec<u16>> {
    rank(p, c)
        .tiers()
        .map(|t| t.iter().map(|&i| c[i].server).collect())
        .collect()
}

fn winners(p: &Policy, c: &[Candidate]) -> Vec<u16> {
    tiers(p, c).into_iter().next().unwrap_or_default()
}

fn pol(prio: &[(Metric, u32)], weights: &[(Metric, f64)]) -> Policy {
    Policy::new(prio, weights, 10, false).unwrap()
}

fn geo_admin(geo: f64, admin: u32) -> Metrics {
    Metrics {
        geo: Some(geo),
        admin: Some(admin),
        ..m()
    }
}

#[test]
fn priorities_order_decides_the_winner() {
    let c = [cand(1, geo_admin(100.0, 5)), cand(2, geo_admin(900.0, 1))];
    assert_eq!(
        tiers(&pol(&[(Geo, 1), (Admin, 2)], &[]), &c),
        [vec![1], vec![2]]
    );
    assert_eq!(
        tiers(&pol(&[(Admin, 1), (Geo, 2)], &[]), &c),
        [vec![2], vec![1]]
    );
}

#[test]
fn same_priority_metrics_add_by_weight() {
    // 1: geo 100, admin 50; 2: geo 300, admin 0.
    let c = [cand(1, geo_admin(100.0, 50)), cand(2, geo_admin(300.0, 0))];
    let prio = [(Geo, 1), (Admin, 1)];
    // 1*100 + 1*50 = 150 < 300.
    assert_eq!(winners(&pol(&prio, &[(Geo, 1.0), (Admin, 1.0)]), &c), [1]);
    // 1*100 + 10*50 = 600 > 300.
    assert_eq!(winners(&pol(&prio, &[(Geo, 1.0), (Admin, 10.0)]), &c), [2]);
    // No weights: each counts once.
    assert_eq!(winners(&pol(&prio, &[]), &c), [1]);
    // Equal composites tie: 0.5*100 + 1*50 = 100 = 0.5*200 + 0.
    let c2 = [cand(1, geo_admin(100.0, 50)), cand(2, geo_admin(200.0, 0))];
    assert_eq!(winners(&pol(&prio, &[(Geo, 0.5)]), &c2), [1, 2]);
}

#[test]
fn weighted_metric_without_priority_comes_after_all_priorities() {
    // geo has only a weight: priority 101, after admin even at priority 100.
    let p = pol(&[(Admin, 100)], &[(Geo, 5.0)]);
    assert_eq!(
        p.levels(),
        vec![(100, vec![(Admin, 1.0)]), (101, vec![(Geo, 5.0)])]
    );
    let c = [cand(1, geo_admin(10.0, 2)), cand(2, geo_admin(500.0, 1))];
    assert_eq!(winners(&p, &c), [2]);
    // And it decides among those admin leaves tied.
    let c = [
        cand(1, geo_admin(10.0, 1)),
        cand(2, geo_admin(500.0, 1)),
        cand(3, geo_admin(1.0, 2)),
    ];
    assert_eq!(tiers(&p, &c), [vec![1], vec![2], vec![3]]);
}

#[test]
fn without_priorities_all_weighted_metrics_make_one_composite() {
    let p = pol(&[], &[(Geo, 1.0), (Admin, 100.0), (Ser, 10.0)]);
    assert_eq!(
        p.levels(),
        vec![(101, vec![(Ser, 10.0), (Geo, 1.0), (Admin, 100.0)])]
    );
    let mk = |geo, admin, ser| Metrics {
        ser: Some(ser),
        ..geo_admin(geo, admin)
    };
    // 1: 50 + 100 + 10 = 160; 2: 0 + 0 + 200 = 200; 3: 150 + 0 + 0 = 150.
    let c = [
        cand(1, mk(50.0, 1, 1)),
        cand(2, mk(0.0, 0, 20)),
        cand(3, mk(150.0, 0, 0)),
    ];
    assert_eq!(tiers(&p, &c), [vec![3], vec![1], vec![2]]);
    // A lone metric with a weight and nothing else: still sorts.
    let p = pol(&[], &[(Geo, 2.0)]);
    assert_eq!(tiers(&p, &c), [vec![2], vec![1], vec![3]]);
}

fn rtt(v: f64) -> Metrics {
    Metrics {
        rtt: Some(ms(v)),
        ..m()
    }
}

#[test]
fn rtt_within_tolerance_ties() {
    let p = Policy::new(&[(Rtt, 1)], &[], 10, false).unwrap();
    let c = [
        cand(1, rtt(20.0)),
        cand(2, rtt(22.0)),
        cand(3, rtt(22.5)),
        cand(4, rtt(30.0)),
    ];
    // 22 is within 10% of 20; 22.5 is not. The rest re-sorted: 22.5 is the lowest, 30 is
    // beyond 24.75.
    assert_eq!(tiers(&p, &c), [vec![1, 2], vec![3], vec![4]]);
    // Tolerance 0: only equal rtts tie.
    let p0 = Policy::new(&[(Rtt, 1)], &[], 0, false).unwrap();
    let c0 = [cand(1, rtt(20.0)), cand(2, rtt(20.0)), cand(3, rtt(20.001))];
    assert_eq!(tiers(&p0, &c0), [vec![1, 2], vec![3]]);
    // Tolerance 50: 30 ties with 20.
    let p50 = Policy::new(&[(Rtt, 1)], &[], 50, false).unwrap();
    assert_eq!(tiers(&p50, &c), [vec![1, 2, 3, 4]]);
}

#[test]
fn rtt_ties_go_on_to_the_next_level() {
    let p = Policy::new(&[(Rtt, 1), (Admin, 2)], &[], 10, false).unwrap();
    let mk = |v, admin| Metrics {
        rtt: Some(ms(v)),
        admin: Some(admin),
        ..m()
    };
    let c = [
        cand(1, mk(20.0, 5)),
        cand(2, mk(21.0, 1)),
        cand(3, mk(40.0, 0)),
    ];
    assert_eq!(tiers(&p, &c), [vec![2], vec![1], vec![3]]);
}

#[test]
fn rtt_tolerance_in_a_composite_counts_as_the_lowest() {
    // rtt + admin at one priority, tolerance 10: 21 counts as 20.
    let p = Policy::new(&[(Rtt, 1), (Admin, 1)], &[], 10, false).unwrap();
    let mk = |v, admin| Metrics {
        rtt: Some(ms(v)),
        admin: Some(admin),
        ..m()
    };
    let c = [
        cand(1, mk(20.0, 1)),
        cand(2, mk(21.0, 1)),
        cand(3, mk(25.0, 0)),
    ];
    // 1: 21, 2: 21 (20 + 1), 3: 25.
    assert_eq!(tiers(&p, &c), [vec![1, 2], vec![3]]);
    let p0 = Policy::new(&[(Rtt, 1), (Admin, 1)], &[], 0, false).unwrap();
    assert_eq!(tiers(&p0, &c), [vec![1], vec![2], vec![3]]);
}

/// A route seen from a site in `site_as`, leaving through exit point 192.0.2.`exit`.
pub(super) fn bgp(ext: u32, int: u32, site_as: u32, exit: u8, med: u32) -> Metrics {
    Metrics {
        ext: Some(ext),
        int: Some(int),
        med: Some(MedRoute {
            site_as,
            exit: IpAddr::V4(Ipv4Addr::new(192, 0, 2, exit)),
            med,
        }),
        ..m()
    }
}

#[test]
fn bad_policies_are_refused_with_the_reason() {
    let err = |prio: &[(Metric, u32)], w: &[(Metric, f64)], tol: u32| {
        Policy::new(prio, w, tol, false).unwrap_err()
    };
    assert!(err(&[(Geo, 1), (Geo, 2)], &[], 10).contains("geo is given two priorities"));
    assert!(err(&[], &[(Geo, 1.0), (Geo, 2.0)], 10).contains("geo is given two weights"));
    assert!(err(&[(Geo, 0)], &[], 10).contains("priority 0 of geo is not from 1 to 100"));
    assert!(err(&[(Geo, 101)], &[], 10).contains("priority 101 of geo"));
    assert!(err(&[], &[(Geo, -1.0)], 10).contains("weight -1 of geo"));
    assert!(err(&[], &[(Geo, f64::NAN)], 10).contains("weight NaN of geo"));
    assert!(err(&[], &[(Geo, f64::INFINITY)], 10).contains("weight inf of geo"));
    assert!(err(&[(Geo, 1)], &[], 101).contains("rtt tolerance 101 is not from 0 to 100"));
    assert!(
        err(&[(Random, 1), (Geo, 1)], &[], 10).contains("random cannot share priority 1 with geo")
    );
    assert_eq!("geo".parse::<Metric>(), Ok(Geo));
    assert!("speed"
        .parse::<Metric>()
        .unwrap_err()
        .contains("unknown metric \"speed\""));
    assert_eq!(serde_json::to_string(&Admin).unwrap(), "\"admin\"");
    assert_eq!(serde_json::from_str::<Metric>("\"rtt\"").unwrap(), Rtt);
}

#[test]
fn weight_zero_turns_a_metric_off() {
    let p = pol(&[(Geo, 1), (Admin, 1)], &[(Admin, 0.0)]);
    assert_eq!(p.levels(), vec![(1, vec![(Geo, 1.0)])]);
    // Missing admin does not count against a server when admin is off.
    let c = [
        cand(
            1,
            Metrics {
                geo: Some(1.0),
                ..m()
            },
        ),
        cand(2, geo_admin(2.0, 0)),
    ];
    assert_eq!(winners(&p, &c), [1]);
}

#[test]
fn missing_data_ranks_last_and_never_panics() {
    let p = pol(&[(Geo, 1), (Admin, 2)], &[]);
    // Some missing: after those that have it, then sorted among themselves by admin.
    let c = [
        cand(
            1,
            Metrics {
                admin: Some(1),
                ..m()
            },
        ),
        cand(2, geo_admin(500.0, 9)),
        cand(
            3,
            Metrics {
                geo: Some(f64::NAN),
                admin: Some(0),
                ..m()
            },
        ),
        cand(
            4,
            Metrics {
                geo: Some(f64::INFINITY),
                ..m()
            },
        ),
        cand(5, geo_admin(700.0, 0)),
    ];
    assert_eq!(tiers(&p, &c), [vec![2], vec![5], vec![3], vec![1], vec![4]]);
    // All missing: nobody is told apart.
    let c = [
        cand(1, m()),
        cand(2, m()),
        cand(
            3,
            Metrics {
                geo: Some(f64::NAN),
                ..m()
            },
        ),
    ];
    assert_eq!(tiers(&p, &c), [vec![1, 2, 3]]);
    let every = Policy::new(
        &[(Ext, 1), (Int, 3), (Rtt, 4), (Geo, 5), (Admin, 6)],
        &[(Ser, 1.0)],
        10,
        true,
    )
    .unwrap();
    assert_eq!(tiers(&every, &c), [vec![1, 2, 3]]);
    // Nothing to rank.
    assert_eq!(rank(&every, &[]).tier_count(), 0);
    assert_eq!(to_decision(&rank(&every, &[]), &[], 24).count, 0);
    // Extreme values: no overflow into NaN.
    let huge = Metrics {
        rtt: Some(Ns(u64::MAX - 1)),
        geo: Some(-f64::MAX),
        ..m()
    };
    let p = pol(&[(Rtt, 1), (Geo, 1)], &[(Rtt, 1e300), (Geo, 1e300)]);
    let c = [
        cand(1, huge),
        cand(2, rtt(1.0)),
        cand(
            3,
            Metrics {
                geo: Some(1.0),
                ..rtt(0.0)
            },
        ),
    ];
    let r = rank(&p, &c);
    assert_eq!(r.order().len(), 3);
}

#[test]
fn composite_missing_any_metric_ranks_after_complete_ones() {
    let p = pol(&[(Geo, 1), (Admin, 1)], &[]);
    let c = [
        cand(
            1,
            Metrics {
                geo: Some(1.0),
                ..m()
            },
        ),
        cand(2, geo_admin(1000.0, 1000)),
        cand(
            3,
            Metrics {
                admin: Some(0),
                ..m()
            },
        ),
    ];
    assert_eq!(tiers(&p, &c), [vec![2], vec![1, 3]]);
}

#[test]
fn ties_are_carried_to_the_next_level() {
    let p = pol(&[(Ext, 1), (Int, 2), (Admin, 3)], &[]);
    let mk = |ext, int, admin| Metrics {
        ext: Some(ext),
        int: Some(int),
        admin: Some(admin),
        ..m()
    };
    let c = [
        cand(1, mk(2, 10, 3)),
        cand(2, mk(2, 10, 1)),
        cand(3, mk(1, 99, 9)),
        cand(4, mk(1, 99, 9)),
        cand(5, mk(2, 20, 0)),
    ];
    assert_eq!(tiers(&p, &c), [vec![3, 4], vec![2], vec![1], vec![5]]);
}

#[test]
fn random_is_recorded_and_ends_the_sort() {
    let p = pol(&[(Geo, 1), (Random, 2), (Admin, 3)], &[]);
    let c = [
        cand(1, geo_admin(10.0, 5)),
        cand(2, geo_admin(10.0, 1)),
        cand(3, geo_admin(50.0, 0)),
    ];
    let r = rank(&p, &c);
    assert!(r.draw() == Some(Random) && p.draw() == Some(Random));
    // Admin would split 1 and 2; after random it is not reached.
    assert_eq!(r.to_vecs(), vec![vec![0, 1], vec![2]]);
    assert_eq!(rank(&pol(&[(Geo, 1)], &[]), &c).draw(), None);
    let e = explain(&p, &c);
    assert_eq!(e.tiers[0].steps[1].outcome, Outcome::Draw);
    assert_eq!(e.tiers[0].steps[2].outcome, Outcome::NotReached);
}

#[test]
fn empty_policy_makes_everyone_equal() {
    let p = pol(&[], &[]);
    let c = [cand(1, m()), cand(2, geo_admin(1.0, 1))];
    assert_eq!(tiers(&p, &c), [vec![1, 2]]);
}

#[test]
fn portions_become_weights_when_the_sort_ends_in_portion() {
    let p = pol(&[(Geo, 1), (Portion, 2)], &[]);
    let mut c = [
        cand(7, geo_admin(1.0, 0)),
        cand(8, geo_admin(1.0, 0)),
        cand(9, geo_admin(5.0, 0)),
    ];
    c[0].portion = 3;
    c[1].portion = 0;
    c[2].portion = 40;
    let d = to_decision(&rank(&p, &c), &c, 24);
    assert_eq!((d.prefix_len, d.count, d.primary), (24, 3, 2));
    assert_eq!(d.servers[..3], [7, 8, 9]);
    assert_eq!(d.weights[..3], [3, 0, 40]);
    assert_eq!(decide(&p, &c, 24, &mut Ranking::new()), d);
    // Without portion in the policy the portions do not count: an even share.
    let d = to_decision(&rank(&pol(&[(Geo, 1)], &[]), &c), &c, 24);
    assert_eq!(d.weights[..3], [1, 1, 1]);
}

#[test]
fn fallback_tiers_follow_in_rank_order_and_at_most_eight() {
    let p = pol(&[(Admin, 1)], &[]);
    // 12 servers, admin 11 - i: server 11 is best.
    let c: Vec<Candidate> = (0..12)
        .map(|i| {
            cand(
                100 + i,
                Metrics {
                    admin: Some(11 - i as u32),
                    ..m()
                },
            )
        })
        .collect();
    let r = rank(&p, &c);
    assert_eq!(r.tier_count(), 12);
    let d = to_decision(&r, &c, 16);
    assert_eq!((d.count, d.primary), (8, 1));
    assert_eq!(d.servers, [111, 110, 109, 108, 107, 106, 105, 104]);
    // A tier 0 of 10 keeps 8, all primary.
    let c: Vec<Candidate> = (0..10)
        .map(|i| {
            cand(
                i,
                Metrics {
                    admin: Some(0),
                    ..m()
                },
            )
        })
        .collect();
    let d = to_decision(&rank(&p, &c), &c, 16);
    assert_eq!((d.count, d.primary), (8, 8));
    assert_eq!(d.servers, [0, 1, 2, 3, 4, 5, 6, 7]);
    // Tier 0 of 6 then a tier of 4: 8, 6 of them primary.
    let c: Vec<Candidate> = (0..10)
        .map(|i| {
            cand(
                i,
                Metrics {
                    admin: Some((i >= 6) as u32),
                    ..m()
                },
            )
        })
        .collect();
    let d = to_decision(&rank(&p, &c), &c, 16);
    assert_eq!((d.count, d.primary), (8, 6));
}

#[test]
fn explain_replays_the_sort_readably() {
    let p = Policy::new(&[(Ext, 1), (Int, 3)], &[(Rtt, 2.0), (Geo, 0.1)], 10, true).unwrap();
    let mut c = [
        cand(
            1,
            Metrics {
                rtt: Some(ms(20.0)),
                geo: Some(100.0),
                ..bgp(2, 5, 64500, 1, 50)
            },
        ),
        cand(
            2,
            Metrics {
                rtt: Some(ms(21.0)),
                geo: Some(300.0),
                ..bgp(2, 5, 64501, 2, 10)
            },
        ),
        cand(
            3,
            Metrics {
                rtt: Some(ms(10.0)),
                geo: Some(10.0),
                ..bgp(3, 5, 64502, 3, 0)
            },
        ),
        cand(4, m()),
    ];
    c[1].portion = 2;
    let e = explain(&p, &c);
    let got: Vec<Vec<usize>> = e
        .tiers
        .iter()
        .map(|t| t.chosen.iter().map(|c| c.index).collect())
        .collect();
    assert_eq!(got, rank(&p, &c).to_vecs());
    // 1: 2*20 + 10 = 50; 2: 2*20 (21 counts as 20) + 30 = 70.
    let sum = &e.tiers[0].steps[2];
    assert_eq!(sum.rtt_lowest, Some(ms(20.0)));
    assert_eq!(
        sum.rows.iter().map(|r| r.key).collect::<Vec<_>>(),
        [Some(50.0), Some(70.0)]
    );
    // How the replay is reported and printed: director-ctl's cli::print tests.
}

// ---- properties --------------------------------------------------------------------

/// A straightforward re-implementation of the rules, from the policy's public levels.
/// Returns the tiers and, for tier 0, the set compared at each level.
fn naive(p: &Policy, c: &[Candidate]) -> (Vec<Vec<usize>>, Vec<Vec<usize>>) {
    let val = |i: usize, m: Metric| -> Option<f64> {
        let x = &c[i].metrics;
        let v = match m {
            Ext => x.ext.map(|v| v as f64),
            Int => x.int.map(|v| v as f64),
            Ser => x.ser.map(|v| v as f64),
            Rtt => x.rtt.map(Ns::ms),
            Geo => x.geo,
            Admin => x.admin.map(|v| v as f64),
            Portion | Random => unreachable!(),
        };
        v.filter(|v| v.is_finite())
    };
    let mut left: Vec<usize> = (0..c.len()).collect();
    let mut out = Vec::new();
    let mut compared0 = Vec::new();
    while !left.is_empty() {
        let mut set = left.clone();
        if p.med() {
            // DD: same AS, different exit points: the lower MED is selected.
            let routed: Vec<(usize, MedRoute)> = set
                .iter()
                .filter_map(|&i| c[i].metrics.med.map(|m| (i, m)))
                .collect();
            set.retain(|&i| {
                let Some(me) = c[i].metrics.med else {
                    return true;
                };
                let peers = routed.iter().filter(|(_, m)| m.site_as == me.site_as);
                let differ = peers.clone().any(|(_, m)| m.exit != me.exit);
                let lowest = peers.map(|(_, m)| m.med).min().unwrap();
                !(differ && me.med > lowest)
            });
        }
        for (_, ms) in p.levels() {
            if out.is_empty() {
                compared0.push(set.clone());
            }
            if ms[0].0.is_draw() {
                break;
            }
            let complete: Vec<usize> = set
                .iter()
                .copied()
                .filter(|&i| ms.iter().all(|&(m, _)| val(i, m).is_some()))
                .collect();
            if complete.is_empty() {
                continue;
            }
            let low = complete.iter().filter_map(|&i| c[i].metrics.rtt).min();
            let tol = u128::from(p.rtt_tolerance_percent());
            let within =
                |v: Ns| low.is_some_and(|l| v.0 as u128 * 100 <= l.0 as u128 * (100 + tol));
            // The other metrics in order, then rtt (the engine's order of additions).
            let key = |i: usize| -> f64 {
                let others: f64 = ms
                    .iter()
                    .filter(|(m, _)| *m != Rtt)
                    .map(|&(m, w)| w * val(i, m).unwrap())
                    .sum();
                let rtt = ms.iter().find(|(m, _)| *m == Rtt).map(|&(_, w)| {
                    let v = c[i].metrics.rtt.unwrap();
                    w * if within(v) { low.unwrap() } else { v }.ms()
                });
                others + rtt.unwrap_or(0.0)
            };
            // Equal: the same after rounding to 40 significant bits.
            let round = |v: f64| {
                let r = f64::from_bits((v.to_bits() + (1 << 11)) & !((1 << 12) - 1)) + 0.0;
                r.is_finite().then_some(r)
            };
            let min = complete
                .iter()
                .filter_map(|&i| round(key(i)))
                .fold(f64::INFINITY, f64::min);
            if min == f64::INFINITY {
                // Every sum overflowed: as if missing.
                continue;
            }
            set = complete
                .into_iter()
                .filter(|&i| round(key(i)) == Some(min))
                .collect();
        }
        left.retain(|i| !set.contains(i));
        out.push(set);
    }
    (out, compared0)
}

fn opt_u32(max: u32) -> impl Strategy<Value = Option<u32>> {
    prop_oneof![1 => Just(None), 6 => (0..=max).prop_map(Some)]
}
fn opt_rtt() -> impl Strategy<Value = Option<Ns>> {
    let ns = vec![
        0,
        10_000_000,
        10_200_000,
        10_500_000,
        11_000_000,
        11_000_001,
        11_220_000,
        11_220_001,
        12_000_000,
        20_000_000,
        21_900_000,
        22_000_000,
        22_000_001,
        25_000_000,
        100_000_000,
    ];
    prop_oneof![1 => Just(None), 6 => prop::sample::select(ns).prop_map(|v| Some(Ns(v)))]
}
fn opt_f64() -> impl Strategy<Value = Option<f64>> {
    prop_oneof![
        1 => Just(None),
        1 => Just(Some(f64::NAN)),
        6 => prop::sample::select(vec![0.0, 10.0, 10.5, 11.0, 12.0, 20.0, 21.9, 22.0, 25.0, 100.0])
            .prop_map(Some),
    ]
}
fn metrics() -> impl Strategy<Value = Metrics> {
    (
        opt_u32(3),
        opt_u32(3),
        opt_u32(3),
        opt_rtt(),
        prop::option::of((0..3u32, 0..3u8, 0..3u32)),
        opt_f64(),
        opt_u32(3),
    )
        .prop_map(|(ext, int, ser, rtt, med, geo, admin)| Metrics {
            ext,
            int,
            ser,
            rtt,
            med: med.map(|(site_as, exit, med)| MedRoute {
                site_as,
                exit: IpAddr::V4(Ipv4Addr::new(192, 0, 2, exit)),
                med,
            }),
            geo,
            admin,
        })
}
fn candidates() -> impl Strategy<Value = Vec<Candidate>> {
    candidates_in(0..12)
}
fn candidates_in(n: std::ops::Range<usize>) -> impl Strategy<Value = Vec<Candidate>> {
    prop::collection::vec((0..4u16, metrics()), n).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (portion, metrics))| Candidate {
                server: i as u16,
                portion,
                metrics,
            })
            .collect()
    })
}
fn policy() -> impl Strategy<Value = Policy> {
    let plain = [Ext, Int, Ser, Rtt, Geo, Admin];
    (
        prop::collection::vec(
            (
                prop::option::of(1..5u32),
                prop::option::of(prop::sample::select(vec![0.0, 0.5, 1.0, 3.0])),
            ),
            6,
        ),
        any::<bool>(),
        prop::option::of(1..8u32),
        prop::option::of(1..8u32),
        prop::sample::select(vec![0, 10, 50, 100]),
    )
        .prop_filter_map(
            "not a valid policy",
            move |(pw, med, random, portion, tol)| {
                let prio: Vec<(Metric, u32)> = plain
                    .iter()
                    .zip(&pw)
                    .filter_map(|(m, (p, _))| p.map(|p| (*m, p)))
                    .chain(random.map(|p| (Random, p)))
                    .chain(portion.map(|p| (Portion, p)))
                    .collect();
                let w: Vec<(Metric, f64)> = plain
                    .iter()
                    .zip(&pw)
                    .filter_map(|(m, (_, w))| w.map(|w| (*m, w)))
                    .collect();
                Policy::new(&prio, &w, tol, med).ok()
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn ranking_is_a_permutation_and_matches_the_rules(p in policy(), c in candidates()) {
        let r = rank(&p, &c);
        let mut all = r.order().to_vec();
        all.sort_unstable();
        prop_assert_eq!(all, (0..c.len()).collect::<Vec<_>>());
        prop_assert!(r.tiers().all(|t| !t.is_empty()));
        prop_assert_eq!(r.tier_count() == 0, c.is_empty());
        prop_assert_eq!(r.draw(), p.draw());
        let (want, _) = naive(&p, &c);
        prop_assert_eq!(r.to_vecs(), want);
        // Reusing a buffer gives the same.
        let mut buf = rank(&p, &c[..c.len() / 2]);
        rank_into(&p, &c, &mut buf);
        prop_assert_eq!(&buf, &r);
        // explain agrees.
        let e = explain(&p, &c);
        let got: Vec<Vec<usize>> = e
            .tiers
            .iter()
            .map(|t| t.chosen.iter().map(|c| c.index).collect())
            .collect();
        prop_assert_eq!(got, r.to_vecs());
        // The decision holds the ranking's first 8, tier 0 as primary.
        let d = to_decision(&r, &c, 20);
        let n = c.len().min(MAX_CANDIDATES);
        prop_assert_eq!(d.count as usize, n);
        prop_assert_eq!(d.primary as usize, r.tier(0).len().min(n));
        for (k, &i) in r.order().iter().take(n).enumerate() {
            prop_assert_eq!(d.servers[k], c[i].server);
            let w = if p.draw() == Some(Portion) { c[i].portion } else { 1 };
            prop_assert_eq!(d.weights[k], w);
        }
    }

    #[test]
    fn tier_zero_servers_are_equal_under_the_policy(p in policy(), c in candidates()) {
        let r = rank(&p, &c);
        let t0 = r.tier(0).to_vec();
        let (_, compared) = naive(&p, &c);
        let levels = p.levels();
        // At every level reached, the tier's servers were all kept: all have the data or
        // none of the compared did; equal keys (rtt within tolerance of the compared
        // set's lowest); none beaten on MED.
        for (set, (_, ms)) in compared.iter().zip(&levels) {
            for &i in &t0 {
                prop_assert!(set.contains(&i));
            }
            if ms[0].0.is_draw() {
                continue;
            }
            let mut s = SortBuffers::default();
            s.prepare(&p, &c);
            let l = levels.iter().position(|(_, x)| x == ms).unwrap();
            let n = c.len();
            let base = &s.base[l * n..(l + 1) * n];
            let rtt = match &p.levels[l].kind {
                Kind::Sum { rtt, .. } => rtt.map(|w| {
                    let set_bits = bits_of(n, set.iter().copied());
                    (w, s.rtt_cut(base, &set_bits, p.rtt_tolerance_percent()))
                }),
                _ => None,
            };
            let keys: Vec<u64> = t0.iter().map(|&i| quantize(s.key(base, i, rtt))).collect();
            prop_assert!(keys.windows(2).all(|w| w[0] == w[1]), "{:?}", keys);
        }
        // Without rtt mixed into a composite, tier 0 is a fixed point: ranked alone it
        // stays one tier. (With it, the lowest rtt that set the tolerance may be gone.)
        let rtt_mixed =
            levels.iter().any(|(_, ms)| ms.len() > 1 && ms.iter().any(|(m, _)| *m == Rtt));
        if !rtt_mixed && !t0.is_empty() {
            let sub: Vec<Candidate> = t0.iter().map(|&i| c[i]).collect();
            prop_assert_eq!(rank(&p, &sub).tier_count(), 1);
        }
    }

    #[test]
    fn ranking_does_not_depend_on_input_order(
        p in policy(),
        (c, perm) in candidates().prop_flat_map(|c| {
            let n = c.len();
            (Just(c), Just((0..n).collect::<Vec<_>>()).prop_shuffle())
        }),
    ) {
        let shuffled: Vec<Candidate> = perm.iter().map(|&i| c[i]).collect();
        let sets = |r: &Ranking, c: &[Candidate]| -> Vec<Vec<u16>> {
            r.tiers().map(|t| {
                let mut v: Vec<u16> = t.iter().map(|&i| c[i].server).collect();
                v.sort_unstable();
                v
            }).collect()
        };
        prop_assert_eq!(sets(&rank(&p, &c), &c), sets(&rank(&p, &shuffled), &shuffled));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Over 64 candidates sets take more than one word.
    #[test]
    fn many_candidates_rank_like_the_rules(p in policy(), c in candidates_in(60..140)) {
        let r = rank(&p, &c);
        prop_assert_eq!(r.to_vecs(), naive(&p, &c).0);
        let mut rev = c.clone();
        rev.reverse();
        let back: Vec<Vec<usize>> = rank(&p, &rev)
            .tiers()
            .map(|t| {
                let mut v: Vec<usize> = t.iter().map(|&i| c.len() - 1 - i).collect();
                v.sort_unstable();
                v
            })
            .collect();
        prop_assert_eq!(back, r.to_vecs());
    }
}

/// The controller ranks prefixes on several threads: one shared policy, a ranking each.
#[test]
fn policies_are_shared_and_rankings_sent_between_threads() {
    fn shared<T: Send + Sync>() {}
    shared::<Policy>();
    shared::<Ranking>();
    shared::<Explanation>();
}

#[test]
fn quantize_keeps_order_and_ties_rounding_errors() {
    assert_eq!(quantize(0.1 * 3.0), quantize(0.3));
    assert_ne!(0.1 * 3.0, 0.3);
    assert_eq!(quantize(-0.0), quantize(0.0));
    assert!(quantize(4e9) < quantize(4e9 + 1.0));
    assert!(quantize(-2.0) < quantize(-1.0) && quantize(-1.0) < quantize(0.0));
    assert!(quantize(1e-300) > quantize(0.0) && quantize(1e300) < u64::MAX);
    for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, f64::MAX] {
        assert_eq!(quantize(v), u64::MAX, "{v}");
    }
}

#[test]
fn rtt_first_with_extreme_values_ranks_like_the_rules() {
    let p = Policy::new(&[(Rtt, 1), (Admin, 2)], &[(Rtt, 10.0)], 10, false).unwrap();
    let values = [
        0,
        1,
        1_000_000,
        1_050_000,
        1_100_000,
        1_100_001,
        1_200_000,
        100_000_000_000,
        u64::MAX - 1,
    ];
    let c: Vec<Candidate> = values
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            cand(
                i as u16,
                Metrics {
                    rtt: Some(Ns(v)),
                    admin: Some((i % 3 == 2) as u32),
                    ..m()
                },
            )
        })
        .collect();
    let r = rank(&p, &c);
    assert_eq!(r.to_vecs(), naive(&p, &c).0);
    // 0 ties only with 0, and 1 ns only with itself (10 % of it is below a nanosecond).
    assert_eq!(r.to_vecs()[..2], [vec![0], vec![1]]);
    // 1 ms: 1.1 ms ties, 1.100001 ms does not; admin then splits the tie.
    assert_eq!(r.to_vecs()[2..6], [vec![3, 4], vec![2], vec![6], vec![5]]);
}

// ---- timing ------------------------------------------------------------------------

/// The policies timed: every kind of level, and a short everyday one.
fn bench_policies() -> [(&'static str, Policy); 2] {
    [
        (
            "med step, ext, int, 0.1*geo + rtt (10%), admin, random",
            Policy::new(
                &[
                    (Ext, 1),
                    (Int, 3),
                    (Geo, 4),
                    (Rtt, 4),
                    (Admin, 5),
                    (Random, 6),
                ],
                &[(Geo, 0.1), (Rtt, 1.0)],
                10,
                true,
            )
            .unwrap(),
        ),
        (
            "geo, admin",
            Policy::new(&[(Geo, 1), (Admin, 2)], &[], 10, false).unwrap(),
        ),
    ]
}

fn bench(p: &Policy, n_cands: usize) -> std::time::Duration {
    // 1024 different candidate sets, cycled.
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    let sets: Vec<Vec<Candidate>> = (0..1024)
        .map(|_| {
            (0..n_cands)
                .map(|s| Candidate {
                    server: s as u16 + 1,
                    portion: 1,
                    metrics: Metrics {
                        ext: Some(1 + next(4) as u32),
                        int: Some(next(50) as u32),
                        ser: None,
                        rtt: if next(10) == 0 {
                            None
                        } else {
                            Some(ms(5.0 + next(200) as f64))
                        },
                        med: Some(MedRoute {
                            site_as: 64500 + next(3) as u32,
                            exit: IpAddr::V4(Ipv4Addr::new(192, 0, 2, next(3) as u8)),
                            med: next(3) as u32,
                        }),
                        geo: Some(next(10000) as f64),
                        admin: Some(next(3) as u32),
                    },
                })
                .collect()
        })
        .collect();
    let mut buf = Ranking::new();
    let mut sum = 0u64;
    let t = std::time::Instant::now();
    let iters: usize = std::env::var("ENGINE_BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    for k in 0..iters {
        let c = &sets[k & 1023];
        let d = decide(p, c, 24, &mut buf);
        sum += d.servers[0] as u64 + d.count as u64;
    }
    let el = t.elapsed();
    std::hint::black_box(sum);
    el
}

/// `cargo test --release -p director-ctl engine::tests::bench -- --ignored --nocapture`
/// (`ENGINE_BENCH_N=5,10`, `ENGINE_BENCH_POLICY=0|1`, `ENGINE_BENCH_ITERS` choose what
/// runs). Each call ranks one of 1024 random candidate sets and builds the decision.
#[test]
#[ignore]
fn bench_one_million_ranks() {
    let ns: Vec<usize> = match std::env::var("ENGINE_BENCH_N") {
        Ok(v) => v.split(',').filter_map(|x| x.parse().ok()).collect(),
        Err(_) => vec![5, 10],
    };
    let only: Option<usize> = std::env::var("ENGINE_BENCH_POLICY")
        .ok()
        .and_then(|v| v.parse().ok());
    for (k, (name, p)) in bench_policies().iter().enumerate() {
        if only.is_some_and(|o| o != k) {
            continue;
        }
        for &n in &ns {
            let el = bench(p, n);
            println!(
                "1M rank+decision calls, {n} candidates, policy {name}: {el:?} ({:.0} ns/call)",
                el.as_nanos() as f64 / 1e6
            );
        }
    }
}
