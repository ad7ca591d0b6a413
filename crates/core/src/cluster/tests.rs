use super::*;
use crate::nba::water_fill;
use proptest::prelude::*;

const S: u64 = 1_000_000_000;
const LIMIT: u64 = 300_000_000;

/// A record of `host` that offered `offered_bps` for one second while enforcing `enforced_bps`
/// (what it sent is the smaller of the two; the rest grew its backlog).
fn rec(host: u32, weight: u32, offered_bps: u64, enforced_bps: u64) -> HostRecord<u32> {
    let sent = offered_bps.min(enforced_bps) / 8;
    let backlog = offered_bps.saturating_sub(enforced_bps) / 8;
    HostRecord {
        host,
        weight,
        sample: UsageSample {
            at: Timestamp::from_nanos(2 * S),
            sent_bytes: 1_000 + sent,
            backlog_bytes: backlog,
            refused_bytes: 0,
        },
        previous: Some(UsageSample {
            at: Timestamp::from_nanos(S),
            sent_bytes: 1_000,
            backlog_bytes: 0,
            refused_bytes: 0,
        }),
        enforced_bps,
    }
}

fn share_list(s: &Shares<u32>) -> Vec<u64> {
    s.hosts.iter().map(|h| h.share_bps).collect()
}

fn limit() -> Rate {
    Rate::from_bps(LIMIT)
}

#[test]
fn busy_hosts_split_the_limit_by_weight() {
    let records = [
        rec(2, 3, LIMIT, LIMIT / 4),
        rec(1, 1, LIMIT, LIMIT / 4),
        rec(3, 0, 0, LIMIT / 2),
    ];
    let s = shares(limit(), &ClusterConfig::default(), &records);
    let hosts: Vec<u32> = s.hosts.iter().map(|h| h.host).collect();
    assert_eq!(hosts, [1, 2, 3], "sorted by host id");
    assert_eq!(s.hosts[0].demand, HostDemand::Capped);
    assert_eq!(s.hosts[2].demand, HostDemand::Idle);
    assert_eq!(s.counters.zero_weights, 1);
    let floor = LIMIT / 100 / 3;
    assert_eq!(
        s.hosts[2].share_bps, floor,
        "the idle host keeps its part of the 1 %"
    );
    let rest = LIMIT - floor;
    let (a, b) = (s.hosts[0].share_bps, s.hosts[1].share_bps);
    assert!(
        a.abs_diff(rest / 4) <= 3 && b.abs_diff(rest * 3 / 4) <= 3,
        "{a} {b}"
    );
    assert_eq!(share_list(&s).iter().sum::<u64>(), LIMIT);
}

#[test]
fn one_busy_host_among_many_idle_ones_gets_nearly_all() {
    let mut records: Vec<_> = (1..1000).map(|h| rec(h, 1, 0, LIMIT / 1000)).collect();
    records.push(rec(0, 1, LIMIT, LIMIT / 1000));
    let s = shares(limit(), &ClusterConfig::default(), &records);
    assert_eq!(s.share_of(&0), Some(LIMIT - 999 * (LIMIT / 100 / 1000)));
    assert!(s.share_of(&0).unwrap() >= LIMIT / 100 * 97);
}

#[test]
fn a_satisfied_host_gets_its_demand_plus_headroom() {
    let records = [
        rec(1, 1, 50_000_000, 150_000_000),
        rec(2, 1, LIMIT, 150_000_000),
    ];
    let s = shares(limit(), &ClusterConfig::default(), &records);
    assert_eq!(s.hosts[0].demand, HostDemand::Satisfied);
    assert_eq!(s.hosts[0].demand_bps, 52_500_000);
    assert_eq!(share_list(&s), [52_500_000, LIMIT - 52_500_000]);
}

#[test]
fn a_new_host_asks_for_the_join_floor() {
    let mut new = rec(9, 1, LIMIT, LIMIT);
    new.previous = None;
    let records = [rec(1, 1, LIMIT, LIMIT), new];
    let cfg = ClusterConfig {
        join_floor: Floor::Bps(2_000_000),
        ..ClusterConfig::default()
    };
    let s = shares(limit(), &cfg, &records);
    assert_eq!(s.hosts[1].demand, HostDemand::Joining);
    assert_eq!(share_list(&s), [LIMIT - 2_000_000, 2_000_000]);
    // The default floor: 1 % of the limit.
    let s = shares(limit(), &ClusterConfig::default(), &records);
    assert_eq!(s.share_of(&9), Some(LIMIT / 100));
}

#[test]
fn backwards_samples_and_duplicates_are_counted() {
    let mut restarted = rec(1, 1, LIMIT, LIMIT);
    restarted.sample.sent_bytes = 0;
    let dup_old = rec(2, 1, 0, LIMIT);
    let mut dup_new = rec(2, 1, LIMIT, LIMIT);
    dup_new.sample.at = Timestamp::from_nanos(3 * S);
    dup_new.previous = Some(UsageSample {
        at: Timestamp::from_nanos(2 * S),
        ..dup_new.previous.unwrap()
    });
    for records in [
        vec![restarted.clone(), dup_old.clone(), dup_new.clone()],
        vec![dup_new.clone(), restarted.clone(), dup_old.clone()],
    ] {
        let s = shares(limit(), &ClusterConfig::default(), &records);
        assert_eq!(s.counters.unmeasurable, 1);
        assert_eq!(s.counters.duplicate_hosts, 1);
        assert_eq!(s.hosts.len(), 2);
        assert_eq!(s.hosts[0].demand, HostDemand::Unmeasurable);
        assert_eq!(
            s.hosts[1].demand,
            HostDemand::Capped,
            "the latest sample kept"
        );
    }
}

#[test]
fn own_share_lowers_for_a_host_that_went_idle_but_never_raises() {
    let cfg = ClusterConfig::default();
    let view = [rec(1, 1, LIMIT, LIMIT / 2), rec(2, 1, LIMIT, LIMIT / 2)];
    // Host 2 went idle after the revision: it takes its floor at once.
    let idle = rec(2, 1, 0, LIMIT / 2);
    assert_eq!(
        own_share(limit(), &cfg, &view, &idle),
        Some(LIMIT / 100 / 2)
    );
    // Host 1 was idle in the revision and is busy now: it keeps the revision's share.
    let view = [rec(1, 1, 0, LIMIT / 2), rec(2, 1, LIMIT, LIMIT / 2)];
    let busy = rec(1, 1, LIMIT, LIMIT / 2);
    assert_eq!(
        own_share(limit(), &cfg, &view, &busy),
        Some(LIMIT / 100 / 2)
    );
    // Not in the revision yet: no share (the caller keeps its join floor).
    assert_eq!(own_share(limit(), &cfg, &view, &rec(3, 1, LIMIT, 0)), None);
}

#[test]
fn no_host_no_share_and_a_zero_limit_gives_zeros() {
    let none: Vec<HostRecord<u32>> = Vec::new();
    assert!(shares(limit(), &ClusterConfig::default(), &none)
        .hosts
        .is_empty());
    let s = shares(
        Rate::from_bps(0),
        &ClusterConfig::default(),
        &[rec(1, 1, LIMIT, 0)],
    );
    assert_eq!(share_list(&s), [0]);
}

#[test]
fn bad_configurations_are_refused() {
    let ok = ClusterConfig::default();
    assert_eq!(ok.validate(), Ok(()));
    let cases = [
        (
            ClusterConfig {
                join_floor: Floor::FractionOfLimit(1.5),
                ..ok
            },
            ClusterConfigError::JoinFloor,
        ),
        (
            ClusterConfig {
                idle_reserve_fraction: f64::NAN,
                ..ok
            },
            ClusterConfigError::IdleReserve,
        ),
        (
            ClusterConfig {
                headroom: -0.1,
                ..ok
            },
            ClusterConfigError::Headroom,
        ),
        (
            ClusterConfig {
                cap_threshold: 0.9,
                ..ok
            },
            ClusterConfigError::CapThreshold,
        ),
        (
            ClusterConfig { max_hosts: 0, ..ok },
            ClusterConfigError::MaxHosts,
        ),
    ];
    for (cfg, err) in cases {
        assert_eq!(cfg.validate(), Err(err));
    }
}

#[test]
fn a_peer_of_weight_u32_max_is_not_counted_and_leaves_the_others_their_fair_share() {
    let cfg = ClusterConfig::default();
    let own = rec(1, 1, LIMIT, LIMIT / 3);
    let honest = rec(2, 1, LIMIT, LIMIT / 3);
    let evil = rec(3, u32::MAX, LIMIT, LIMIT / 3);
    let records = [own.clone(), honest.clone(), evil.clone()];
    let s = shares(limit(), &cfg, &records);
    assert_eq!(s.counters.overweight, 1);
    assert_eq!(s.share_of(&3), None, "not counted");
    assert_eq!(share_list(&s), [LIMIT / 2, LIMIT / 2]);
    // The fair share of two busy hosts of equal weight, as if the bad record were not there.
    assert_eq!(own_share(limit(), &cfg, &records, &own), Some(LIMIT / 2));
    assert_eq!(
        own_share(limit(), &cfg, &[own.clone(), evil.clone()], &own),
        Some(LIMIT)
    );
    // The greatest weight a daemon can be configured with is counted.
    let heavy = HostRecord {
        weight: MAX_WEIGHT,
        ..evil
    };
    let s = shares(limit(), &cfg, &[own.clone(), heavy.clone()]);
    assert_eq!(s.counters.overweight, 0);
    assert_eq!(s.hosts.len(), 2);
    assert!(
        own_share(limit(), &cfg, &[own.clone(), heavy], &own).unwrap()
            >= least_share(limit(), &cfg)
    );
}

/// Records of `n` hosts from `first` on, each busy at the limit with weight `weight`.
fn fakes(first: u32, n: u32, weight: u32) -> Vec<HostRecord<u32>> {
    (first..first + n)
        .map(|h| rec(h, weight, LIMIT, LIMIT / 100_000))
        .collect()
}

#[test]
fn a_hundred_thousand_fake_hosts_leave_an_honest_host_its_share_among_the_hosts_it_counts() {
    let cfg = ClusterConfig::default();
    let max = DEFAULT_MAX_HOSTS as u64;
    // Two honest busy hosts, 0 and 200 000: one below the fakes' ids, one above.
    for own_id in [0, 200_000] {
        let own = rec(own_id, 1, LIMIT, LIMIT / 2);
        let mut records = fakes(1, 100_000, 1);
        records.push(rec(100_001, 1, LIMIT, LIMIT / 2));
        records.push(own.clone());
        let s = shares(limit(), &cfg, &records);
        assert_eq!(s.hosts.len(), DEFAULT_MAX_HOSTS);
        assert_eq!(s.counters.beyond_max_hosts, 100_002 - max);
        // Every counted host busy with weight 1: a 1 / max_hosts share, where without the bound
        // it would be 1 / 100 002.
        let got = own_share(limit(), &cfg, &records, &own).unwrap();
        assert!(got >= LIMIT / max, "{got}");
        // An idle honest host keeps the idle floor of max_hosts hosts.
        let idle = rec(own_id, 1, 0, LIMIT / 2);
        records.retain(|r| r.host != own_id);
        records.push(idle.clone());
        let got = own_share(limit(), &cfg, &records, &idle).unwrap();
        assert!(got >= LIMIT / 100 / max, "{got}");
        assert_eq!(least_share(limit(), &cfg), LIMIT / 100 / max);
    }
}

#[test]
fn heavy_fake_hosts_never_push_a_share_below_the_least_share() {
    let cfg = ClusterConfig::default();
    let own = rec(0, 1, LIMIT, LIMIT / 2);
    let mut records = fakes(1, 100_000, MAX_WEIGHT);
    records.push(own.clone());
    let least = least_share(limit(), &cfg);
    assert!(least > 0);
    assert_eq!(own_share(limit(), &cfg, &records, &own), Some(least));
    // With equal weights the least share never binds: the shares still sum to the limit.
    let records: Vec<_> = (0..DEFAULT_MAX_HOSTS as u32)
        .map(|h| rec(h, 1, if h % 2 == 0 { LIMIT } else { 0 }, LIMIT / 2))
        .collect();
    let s = shares(limit(), &cfg, &records);
    assert!(s.hosts.iter().all(|h| h.share_bps >= least));
    assert_eq!(share_list(&s).iter().sum::<u64>(), LIMIT);
}

/// Plain weighted max-min water-filling in floating point: entries whose demand fits under the
/// level are given it, the rest share what is left by weight; leftover capacity goes by weight.
fn reference(total: u64, want: &[u64], weights: &[u32]) -> Vec<f64> {
    let w: Vec<f64> = weights.iter().map(|w| f64::from((*w).max(1))).collect();
    let sum: f64 = want.iter().map(|d| *d as f64).sum();
    let total = total as f64;
    let wsum: f64 = w.iter().sum();
    if sum <= total {
        return want
            .iter()
            .zip(&w)
            .map(|(d, w)| *d as f64 + (total - sum) * w / wsum)
            .collect();
    }
    let mut out = vec![f64::NAN; want.len()];
    let mut open: Vec<usize> = (0..want.len()).collect();
    let mut remaining = total;
    loop {
        let wopen: f64 = open.iter().map(|&i| w[i]).sum();
        let level = remaining / wopen;
        let fits: Vec<usize> = open
            .iter()
            .copied()
            .filter(|&i| want[i] as f64 <= w[i] * level)
            .collect();
        if fits.is_empty() {
            for &i in &open {
                out[i] = w[i] * level;
            }
            return out;
        }
        for &i in &fits {
            out[i] = want[i] as f64;
            remaining -= want[i] as f64;
        }
        open.retain(|i| !fits.contains(i));
    }
}

fn arb_record() -> impl Strategy<Value = HostRecord<u32>> {
    (
        0u32..64,
        0u32..5,
        prop_oneof![Just(0u64), 1u64..LIMIT, Just(2 * LIMIT)],
        0u64..LIMIT,
        any::<bool>(),
    )
        .prop_map(|(host, weight, offered, enforced, joined)| {
            let mut r = rec(host, weight, offered, enforced);
            if !joined {
                r.previous = None;
            }
            r
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn weighted_filling_matches_the_reference(
        entries in prop::collection::vec((0u64..2_000_000, 1u32..8), 1..12),
        total in 0u64..10_000_000,
        floor in 0u64..100_000,
    ) {
        let demands: Vec<Rate> = entries.iter().map(|e| Rate::from_bps(e.0)).collect();
        let weights: Vec<u32> = entries.iter().map(|e| e.1).collect();
        let mut out = vec![Rate::from_bps(0); entries.len()];
        water_fill_weighted(Rate::from_bps(total), &demands, &weights, Rate::from_bps(floor), &mut out);
        let got: Vec<u64> = out.iter().map(|r| r.bps()).collect();
        prop_assert_eq!(got.iter().sum::<u64>(), total);
        let floor = floor.min(total / entries.len() as u64);
        let want: Vec<u64> = entries.iter().map(|e| e.0.max(floor)).collect();
        let expect = reference(total, &want, &weights);
        let wsum: u64 = weights.iter().map(|w| u64::from(*w)).sum();
        for (g, e) in got.iter().zip(&expect) {
            // Integer rounding: at most one level step (a weight) plus one bit/s.
            prop_assert!((*g as f64 - e).abs() <= wsum as f64 + 1.0, "{:?} vs {:?}", got, expect);
        }
    }

    #[test]
    fn unit_weights_are_the_nba_filling(
        demands in prop::collection::vec(0u64..5_000_000, 1..12),
        total in 0u64..20_000_000,
        floor in 0u64..1_000_000,
    ) {
        let demands: Vec<Rate> = demands.iter().map(|d| Rate::from_bps(*d)).collect();
        let mut a = vec![Rate::from_bps(0); demands.len()];
        let mut b = a.clone();
        water_fill(Rate::from_bps(total), &demands, Rate::from_bps(floor), &mut a);
        water_fill_weighted(
            Rate::from_bps(total), &demands, &vec![1; demands.len()], Rate::from_bps(floor), &mut b,
        );
        prop_assert_eq!(a, b);
    }

    #[test]
    fn shares_are_fair_bounded_and_order_free(
        records in prop::collection::vec(arb_record(), 0..24),
        seed in any::<u64>(),
    ) {
        let cfg = ClusterConfig::default();
        let s = shares(limit(), &cfg, &records);
        // Any permutation gives the same output.
        let mut shuffled = records.clone();
        let mut x = seed | 1;
        for i in (1..shuffled.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            shuffled.swap(i, (x % (i as u64 + 1)) as usize);
        }
        prop_assert_eq!(&shares(limit(), &cfg, &shuffled), &s);
        if s.hosts.is_empty() {
            return Ok(());
        }
        let got = share_list(&s);
        prop_assert!(got.iter().sum::<u64>() <= LIMIT);
        prop_assert_eq!(got.iter().sum::<u64>(), LIMIT, "work conserving");
        // Max-min fair over the demands it read, with the idle floor.
        let floor = (LIMIT / 100 / s.hosts.len() as u64).min(LIMIT / s.hosts.len() as u64);
        let want: Vec<u64> = s.hosts.iter().map(|h| h.demand_bps.max(floor)).collect();
        let weights: Vec<u32> = s.hosts.iter().map(|h| h.weight).collect();
        let satisfied_all = want.iter().sum::<u64>() <= LIMIT;
        let expect = reference(LIMIT, &want, &weights);
        let wsum: u64 = weights.iter().map(|w| u64::from((*w).max(1))).sum();
        for ((g, e), d) in got.iter().zip(&expect).zip(&want) {
            prop_assert!((*g as f64 - e).abs() <= wsum as f64 + 1.0, "{:?} vs {:?}", got, expect);
            if !satisfied_all {
                prop_assert!(g <= d, "a host gets at most its demand when the limit binds");
            }
        }
    }
}

#[test]
fn a_host_at_a_small_share_is_at_its_cap_within_two_frames_or_when_it_refused_bytes() {
    let one_mbit = 1_000_000;
    // Two busy hosts hold the limit; the third, just back at 1 Mbit/s, sent 95 % of it.
    let mut small = rec(2, 1, one_mbit * 95 / 100, one_mbit);
    let busy = [rec(0, 1, LIMIT, LIMIT / 2), rec(1, 1, LIMIT, LIMIT / 2)];
    let records = [busy[0].clone(), busy[1].clone(), small.clone()];
    let s = shares(limit(), &ClusterConfig::default(), &records);
    assert_eq!(s.hosts[2].demand, HostDemand::Capped, "{s:?}");
    assert_eq!(share_list(&s), vec![LIMIT / 3; 3]);
    // Without the slack, 95 % reads as satisfied.
    let strict = ClusterConfig {
        cap_slack_bytes: 0,
        ..ClusterConfig::default()
    };
    let s = shares(limit(), &strict, &records);
    assert_eq!(s.hosts[2].demand, HostDemand::Satisfied, "{s:?}");
    // Sending half of it while its shaper refused as much again: at its cap.
    small.sample.sent_bytes = small.previous.unwrap().sent_bytes + one_mbit / 16;
    small.sample.refused_bytes = one_mbit / 16;
    let records = [busy[0].clone(), busy[1].clone(), small];
    let s = shares(limit(), &strict, &records);
    assert_eq!(s.hosts[2].demand, HostDemand::Capped, "{s:?}");
}
