use super::*;
use proptest::prelude::*;

fn decision(servers: &[(u16, u16)], primary: u8) -> Decision {
    let mut d = Decision {
        count: servers.len() as u8,
        primary,
        ..Decision::default()
    };
    for (i, (s, w)) in servers.iter().enumerate() {
        d.servers[i] = *s;
        d.weights[i] = *w;
    }
    d
}

#[test]
fn neg_log2_matches_floating_point() {
    for h in [
        0u32,
        1,
        2,
        1000,
        1 << 20,
        0x8000_0000,
        0xffff_0000,
        u32::MAX - 1,
        u32::MAX,
    ] {
        let want = -(((h as f64) + 1.0) / 4294967296.0).log2();
        let got = neg_log2(h) as f64 / (1u64 << LOG_FRACTION_BITS) as f64;
        assert!((want - got).abs() < 1e-3, "h={h}: {got} vs {want}");
    }
}

#[test]
fn shares_follow_weights() {
    let d = decision(&[(11, 1), (12, 2), (13, 5)], 3);
    let mut hits = [0u32; 3];
    let n = 80_000u32;
    for f in 0..n {
        hits[rendezvous(&d, 0b111, mix(f as u64) as u32).unwrap()] += 1;
    }
    for (i, w) in [1.0, 2.0, 5.0].iter().enumerate() {
        let share = hits[i] as f64 / n as f64;
        assert!((share - w / 8.0).abs() < 0.01, "candidate {i}: {share}");
    }
}

#[test]
fn zero_weights_share_evenly_or_lose() {
    let even = decision(&[(1, 0), (2, 0)], 2);
    let mut hits = [0u32; 2];
    for f in 0..20_000u32 {
        hits[rendezvous(&even, 0b11, mix(f as u64) as u32).unwrap()] += 1;
    }
    assert!(hits[0].abs_diff(hits[1]) < 1_000, "{hits:?}");
    let lopsided = decision(&[(1, 0), (2, 3)], 2);
    for f in 0..1_000u32 {
        assert_eq!(rendezvous(&lopsided, 0b11, f), Some(1));
    }
    // The weighted one gone: the weight-0 primary takes everything before any fallback.
    let with_fallback = decision(&[(1, 0), (2, 3), (3, 1)], 2);
    assert_eq!(rendezvous(&with_fallback, 0b101, 7), Some(0));
}

/// The winner by the weighted formula itself, for any weights: the lowest
/// -log2(u) / w, ties to the lower rank.
fn by_logarithm(d: &Decision, pool: u32, flow: u32) -> Option<usize> {
    (0..MAX_CANDIDATES)
        .filter(|i| pool >> i & 1 == 1)
        .min_by_key(|&i| {
            let w = u64::from(d.weights[i].max(1));
            ((neg_log2(candidate_hash(flow, d.servers[i])) << 40) / w, i)
        })
}

#[test]
fn the_choice_is_the_lowest_weighted_score() {
    for weights in [[5, 5, 5, 5], [1, 2, 3, 4], [7, 0, 7, 1]] {
        let servers: Vec<(u16, u16)> = [4, 9, 2, 7].into_iter().zip(weights).collect();
        let d = decision(&servers, 4);
        let pool = (0..4)
            .filter(|&i| weights[i] > 0)
            .fold(0, |m, i| m | 1 << i);
        for flow in 0..5_000u32 {
            let flow = flow.wrapping_mul(0x9e37_79b9);
            assert_eq!(
                rendezvous(&d, 0xf, flow),
                by_logarithm(&d, pool, flow),
                "weights {weights:?}, flow {flow}"
            );
        }
    }
}

/// The candidates' scores tie (equal `neg_log2`) although their hashes differ: the scores'
/// tie-break (the lower rank) must decide, as it did before the highest-hash shortcut.
#[test]
fn near_ties_of_hashes_choose_as_the_scores() {
    let servers: Vec<(u16, u16)> = (1..=8u16).map(|s| (s * 7, 4)).collect();
    let d = decision(&servers, 8);
    let (mut tied, mut near, mut fast) = (0, 0, 0);
    for flow in 0..400_000u32 {
        let flow = mix(flow as u64) as u32;
        let mut h: Vec<(u32, usize)> = (0..8)
            .map(|i| (candidate_hash(flow, d.servers[i]), i))
            .collect();
        h.sort_unstable_by(|a, b| b.cmp(a));
        if neg_log2(h[0].0) == neg_log2(h[1].0) {
            tied += 1;
        }
        match highest_hash(&d, 0xff, flow) {
            Some(i) => {
                fast += 1;
                assert_eq!(Some(i), scored(&d, 0xff, false, flow), "flow {flow}");
            }
            None => near += 1,
        }
        assert_eq!(
            rendezvous(&d, 0xff, flow),
            by_logarithm(&d, 0xff, flow),
            "flow {flow}"
        );
    }
    // The cases this test is for happened, and the shortcut took most flows.
    assert!(tied > 10, "{tied} tied scores");
    assert!(near < 400_000 / 50, "{near} of 400,000 left to the scores");
    assert!(fast + near == 400_000);
}

#[test]
fn one_usable_primary_takes_every_flow() {
    let d = decision(&[(4, 1), (9, 3), (2, 1)], 3);
    for flow in 0..1000 {
        assert_eq!(rendezvous(&d, 0b010, flow), Some(1));
    }
}

#[test]
fn falls_back_in_rank_order() {
    let d = decision(&[(1, 1), (2, 1), (3, 1), (4, 1)], 2);
    assert_eq!(rendezvous(&d, 0b1100, 5), Some(2));
    assert_eq!(rendezvous(&d, 0b1000, 5), Some(3));
    assert_eq!(rendezvous(&d, 0, 5), None);
    // Bits past `count` are never taken.
    assert_eq!(rendezvous(&d, 0b1_0000, 5), None);
}

#[test]
fn outer_source_keeps_the_prefix() {
    let mut base = [0u8; 16];
    base[..4].copy_from_slice(&[172, 16, 0, 0]);
    let s = outer_source(&base, 16, false, 0xabcd_1234);
    assert_eq!(&s[..4], &[172, 16, 0x12, 0x34]);
    assert_eq!(&s[4..], &[0u8; 12]);
    let mut b6 = [0u8; 16];
    b6[0] = 0xfd;
    let s6 = outer_source(&b6, 32, true, 0xabcd_1234);
    assert_eq!(s6[0], 0xfd);
    assert_eq!(&s6[12..], &[0xab, 0xcd, 0x12, 0x34]);
    assert_eq!(outer_source(&base, 0, false, 0xffff_ffff), base);
}

#[test]
fn default_mss_fits_1500_after_encapsulation() {
    assert_eq!(default_mss(Forward::L2, false), 0);
    assert_eq!(default_mss(Forward::Ipip, false), 1440);
    assert_eq!(default_mss(Forward::Ipip, true), 1400);
    assert_eq!(clamp_mss(1460, 1440), 1440);
    assert_eq!(clamp_mss(1200, 1440), 1200);
    assert_eq!(clamp_mss(1460, 0), 1460);
}

proptest! {
    // A retransmitted SYN, or a packet of a forgotten flow, gets the same server.
    #[test]
    fn choice_is_deterministic(flow in any::<u32>(), ok in 0u32..256) {
        let d = decision(&[(5, 1), (6, 2), (7, 3), (8, 1), (9, 1)], 3);
        prop_assert_eq!(rendezvous(&d, ok, flow), rendezvous(&d, ok, flow));
    }

    // Taking one candidate out moves only the flows it held; putting it back restores them.
    #[test]
    fn a_departure_moves_only_its_flows(flows in prop::collection::vec(any::<u32>(), 1..200), gone in 0usize..4) {
        let d = decision(&[(21, 3), (22, 1), (23, 2), (24, 5)], 4);
        let all = 0b1111u32;
        let less = all & !(1 << gone);
        for f in flows {
            let before = rendezvous(&d, all, f).unwrap();
            let after = rendezvous(&d, less, f).unwrap();
            if before != gone {
                prop_assert_eq!(before, after);
            } else {
                prop_assert_ne!(after, gone);
            }
        }
    }

    // The branch-free loop chooses as the rule reads, written the plain way: usable
    // primaries by weighted score (all weights 0: evenly), else the first usable of the
    // rest; for any candidates, weights (extremes included), counts and usable sets.
    #[test]
    fn the_choice_follows_the_rule_for_any_decision(
        servers in prop::collection::vec((1u16..2000, prop_oneof![Just(0u16), Just(u16::MAX), any::<u16>()]), 0..=MAX_CANDIDATES),
        primary in 0u8..10,
        ok in 0u32..256,
        flow in any::<u32>(),
    ) {
        let d = decision(&servers, primary);
        let count = servers.len();
        let usable = |i: &usize| ok >> i & 1 == 1;
        let primaries: Vec<usize> = (0..count.min(primary as usize)).filter(usable).collect();
        let want = if primaries.is_empty() {
            (0..count).find(usable)
        } else {
            let weighted: Vec<usize> =
                primaries.iter().copied().filter(|&i| d.weights[i] > 0).collect();
            let pool = if weighted.is_empty() { primaries } else { weighted };
            by_logarithm(&d, pool.iter().fold(0, |m, i| m | 1 << i), flow)
        };
        prop_assert_eq!(rendezvous(&d, ok, flow), want);
    }

    // Equal weights take the highest-hash shortcut, a pool of one wins outright: the same
    // choice as the scores for any pool, weight and flow.
    #[test]
    fn the_shortcuts_choose_as_the_scores(
        servers in prop::collection::vec(1u16..2000, 1..=MAX_CANDIDATES),
        weight in prop_oneof![Just(0u16), Just(1u16), Just(u16::MAX), any::<u16>()],
        ok in 1u32..256,
        flow in any::<u32>(),
    ) {
        let servers: Vec<(u16, u16)> = servers.into_iter().map(|s| (s, weight)).collect();
        let d = decision(&servers, servers.len() as u8);
        let pool = ok & ((1 << servers.len()) - 1);
        prop_assume!(pool != 0);
        prop_assert_eq!(rendezvous(&d, pool, flow), scored(&d, pool, weight == 0, flow));
        if let Some(i) = highest_hash(&d, pool, flow) {
            prop_assert_eq!(Some(i), by_logarithm(&d, pool, flow));
        }
    }

    #[test]
    fn flow_hash_depends_on_every_field(c in any::<[u32; 4]>(), v in any::<[u32; 4]>(), p in any::<u32>(), i in 0usize..9) {
        let h = flow_hash(&c, &v, p);
        let (mut c2, mut v2, mut p2) = (c, v, p);
        match i {
            0..=3 => c2[i] ^= 1,
            4..=7 => v2[i - 4] ^= 1,
            _ => p2 ^= 1,
        }
        // A one-bit change must change the hash (a collision here has odds 2^-32).
        prop_assert_ne!(h, flow_hash(&c2, &v2, p2));
    }
}

#[test]
fn layouts_have_no_hidden_padding() {
    use core::mem::size_of;
    assert_eq!(size_of::<VipKey>(), 20);
    assert_eq!(size_of::<VipRecord>(), 32);
    assert_eq!(size_of::<FlowKey>(), 40);
    assert_eq!(size_of::<Flow>(), 16);
    assert_eq!(size_of::<Hop>(), 16);
    assert_eq!(size_of::<Hops>(), 48);
    assert_eq!(size_of::<Handover>(), 88);
}
