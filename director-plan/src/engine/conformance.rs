//! The sort against Cisco DistributedDirector's configuration guide, one rule per test,
//! each quoting the sentence it checks.

use super::metric::Rtt as Ns;
use super::tests::{bgp, ms};
use super::Metric::{Admin, Ext, Geo, Int, Portion, Random, Rtt};
use super::*;
use proptest::prelude::*;

fn cand(server: u16, metrics: Metrics) -> Candidate {
    Candidate {
        server,
        portion: 0,
        metrics,
    }
}

fn rtt_admin(rtt: Ns, admin: u32) -> Metrics {
    Metrics {
        rtt: Some(rtt),
        admin: Some(admin),
        ..Metrics::default()
    }
}

fn tiers(p: &Policy, c: &[Candidate]) -> Vec<Vec<u16>> {
    rank(p, c)
        .tiers()
        .map(|t| t.iter().map(|&i| c[i].server).collect())
        .collect()
}

// DD: "the Director eliminates any server whose round-trip time is greater than 1.20 times
// the lowest reported round-trip time" (tolerance 20): a server exactly on the limit stays.
#[test]
fn rtt_exactly_on_the_limit_stays_in() {
    let p = Policy::new(&[(Rtt, 1), (Admin, 2)], &[], 10, false).unwrap();
    // 10.2 ms lowest, tolerance 10: 11.22 ms is on the limit (in f64, 10.2 * 1.1 is
    // 11.220000000000002 and 11.22 parses below it, which once put it out).
    let c = [
        cand(1, rtt_admin(ms(10.2), 5)),
        cand(2, rtt_admin(ms(11.22), 1)),
        cand(3, rtt_admin(Ns(11_220_001), 0)),
    ];
    assert_eq!(tiers(&p, &c), [vec![2], vec![1], vec![3]]);
    let e = explain(&p, &c);
    assert_eq!(e.tiers[0].steps[0].rtt_limit, Some(ms(11.22)));
    let p20 = Policy::new(&[(Rtt, 1)], &[], 20, false).unwrap();
    let c = [
        cand(1, rtt_admin(ms(100.0), 0)),
        cand(2, rtt_admin(ms(120.0), 0)),
    ];
    assert_eq!(tiers(&p20, &c), [vec![1, 2]]);
}

// DD accepts a tolerance from 0 to 100.
#[test]
fn rtt_tolerance_is_zero_to_one_hundred() {
    assert!(Policy::new(&[(Rtt, 1)], &[], 0, false).is_ok());
    assert!(Policy::new(&[(Rtt, 1)], &[], 100, false).is_ok());
    let e = Policy::new(&[(Rtt, 1)], &[], 101, false).unwrap_err();
    assert!(e.contains("101 is not from 0 to 100"), "{e}");
}

proptest! {
    /// "greater than 1.20 times the lowest": for any lowest rtt and tolerance, the highest
    /// nanosecond that is not greater stays in and the next one is out (over every rtt a
    /// file may hold: up to 100 s).
    #[test]
    fn rtt_boundary_is_exact(lowest in 0u64..=100_000_000_000, tol in 0u32..=100) {
        let p = Policy::new(&[(Rtt, 1)], &[], tol, false).unwrap();
        let limit = Ns(lowest).limit(tol);
        prop_assert!(u128::from(limit.0) * 100 <= u128::from(lowest) * u128::from(100 + tol));
        prop_assert!(
            u128::from(limit.0 + 1) * 100 > u128::from(lowest) * u128::from(100 + tol)
        );
        let c = [
            cand(1, rtt_admin(Ns(lowest), 0)),
            cand(2, rtt_admin(limit, 0)),
            cand(3, rtt_admin(Ns(limit.0 + 1), 0)),
        ];
        let t = tiers(&p, &c);
        prop_assert_eq!(&t[0], &vec![1, 2]);
        prop_assert!(!t[0].contains(&3));
    }
}

// DD: "If you do not use priority and multiple servers have the same metric value, the
// server whose last IP address was looked at will be returned … If you want to return a
// random IP address in the case of a tie, use metric priority with the random metric."
// Without random the ranking asks for no draw (the kernel hashes the client instead).
#[test]
fn a_tie_without_random_is_no_draw() {
    let c = [
        cand(1, rtt_admin(ms(10.0), 1)),
        cand(2, rtt_admin(ms(10.0), 1)),
    ];
    let p = Policy::new(&[(Admin, 1)], &[], 10, false).unwrap();
    let r = rank(&p, &c);
    assert_eq!((r.draw(), r.to_vecs()), (None, vec![vec![0, 1]]));
    assert_eq!(to_decision(&r, &c, 24).weights[..2], [1, 1]);
    let p = Policy::new(&[(Admin, 1), (Random, 2)], &[], 10, false).unwrap();
    assert_eq!(rank(&p, &c).draw(), Some(Random));
}

// DD: `weights [drp-ser] [drp-int] [drp-ext] [drp-rtt] [portion] [random] [admin]`:
// random and portion are metrics; they end the sort, so they stand alone at a priority.
#[test]
fn random_and_portion_are_metrics_that_end_the_sort() {
    let mut c = [
        cand(1, rtt_admin(ms(10.0), 1)),
        cand(2, rtt_admin(ms(10.0), 1)),
        cand(3, rtt_admin(ms(10.0), 2)),
    ];
    c[0].portion = 1;
    c[1].portion = 3;
    let p = Policy::new(&[(Admin, 1), (Portion, 2), (Geo, 3)], &[], 10, false).unwrap();
    let r = rank(&p, &c);
    assert_eq!(r.draw(), Some(Portion));
    let d = to_decision(&r, &c, 24);
    assert_eq!((d.primary, d.weights[..3].to_vec()), (2, vec![1, 3, 0]));
    // A weight on a draw standing alone only turns it on (0: off).
    let p = Policy::new(&[(Admin, 1), (Random, 2)], &[(Random, 5.0)], 10, false).unwrap();
    assert_eq!(p.draw(), Some(Random));
    let p = Policy::new(&[(Admin, 1)], &[(Random, 0.0)], 10, false).unwrap();
    assert_eq!(p.draw(), None);
    // Weights without priorities add into one composite: a draw cannot be in it.
    let e = Policy::new(&[], &[(Geo, 1.0), (Random, 1.0)], 10, false).unwrap_err();
    assert!(
        e.contains("random cannot share the weighted metrics' composite")
            && e.contains("no number to add into a composite computed beforehand"),
        "{e}"
    );
    let e = Policy::new(&[(Portion, 2), (Admin, 2)], &[], 10, false).unwrap_err();
    assert!(
        e.contains("portion cannot share priority 2 with admin"),
        "{e}"
    );
}

// DD on med: "is not weightable or prioritizable".
#[test]
fn med_is_no_metric_to_prioritise_or_weigh() {
    let e = "med".parse::<Metric>().unwrap_err();
    assert!(
        e.contains("not weightable or prioritizable") && e.contains("med = true"),
        "{e}"
    );
}

// DD: med "requires" int and ext.
#[test]
fn med_needs_ext_and_int() {
    let e = Policy::new(&[(Ext, 1)], &[], 10, true).unwrap_err();
    assert!(
        e.contains("med needs ext and int") && e.contains("int is not"),
        "{e}"
    );
    assert!(Policy::new(&[(Int, 1)], &[(Ext, 1.0)], 10, true).is_ok());
    assert!(Policy::new(&[(Int, 1)], &[(Ext, 0.0)], 10, true).is_err());
}

fn med_policy() -> Policy {
    // int before ext so that, without the med step, the higher-MED server would win.
    Policy::new(&[(Int, 1), (Ext, 2)], &[], 10, true).unwrap()
}

// DD: "If no two servers are in the same AS, regular address sorting proceeds."
#[test]
fn med_no_two_servers_in_the_same_as() {
    let c = [
        cand(1, bgp(2, 5, 64500, 1, 900)),
        cand(2, bgp(2, 9, 64501, 2, 0)),
    ];
    assert_eq!(tiers(&med_policy(), &c), [vec![1], vec![2]]);
}

// DD: "If both … share a common AS exit point, regular address sorting proceeds."
#[test]
fn med_same_as_and_a_common_exit_point() {
    let c = [
        cand(1, bgp(2, 5, 64500, 7, 900)),
        cand(2, bgp(2, 9, 64500, 7, 0)),
    ];
    assert_eq!(tiers(&med_policy(), &c), [vec![1], vec![2]]);
}

// DD: "If the Agents do not share a common AS exit point, the Director examines the BGP MED
// values … The distributed server associated with the DRP server agent with the lower BGP
// MED value is then selected as the best server."
#[test]
fn med_same_as_different_exit_points_lower_med_is_selected() {
    let c = [
        cand(1, bgp(2, 5, 64500, 1, 900)),
        cand(2, bgp(2, 9, 64500, 2, 0)),
    ];
    assert_eq!(tiers(&med_policy(), &c), [vec![2], vec![1]]);
    // Servers of other ASes are not touched and the regular sort goes on with them.
    let c = [
        cand(1, bgp(2, 5, 64500, 1, 900)),
        cand(2, bgp(2, 9, 64500, 2, 0)),
        cand(3, bgp(2, 1, 64999, 3, 5000)),
    ];
    assert_eq!(tiers(&med_policy(), &c), [vec![3], vec![2], vec![1]]);
    let e = explain(&med_policy(), &c);
    let step = e.tiers[0].med.as_ref().unwrap();
    let kept: Vec<bool> = step.rows.iter().map(|r| r.survived).collect();
    assert_eq!(kept, [false, true, true]);
}

// DD sorts the servers that are available: with tolerance 10 and RTTs A 100, B 109,
// C 115, the best set is {A, B}; over {B, C} both are kept (115 <= 119.9).
#[test]
fn failover_sorts_the_servers_left_again() {
    let p = Policy::new(&[(Rtt, 1), (Random, 2)], &[], 10, false).unwrap();
    let a = cand(1, rtt_admin(ms(100.0), 0));
    let b = cand(2, rtt_admin(ms(109.0), 0));
    let c = cand(3, rtt_admin(ms(115.0), 0));
    assert_eq!(tiers(&p, &[a, b, c]), [vec![1, 2], vec![3]]);
    assert_eq!(tiers(&p, &[b, c]), [vec![2, 3]]);
}
