use super::*;
use proptest::prelude::*;

const MS: u64 = 1_000_000;

fn rate_vec(bps: &[u64]) -> Vec<Rate> {
    bps.iter().map(|b| Rate::from_bps(*b)).collect()
}

fn bps(rates: &[Rate]) -> Vec<u64> {
    rates.iter().map(|r| r.bps()).collect()
}

/// Reference water-filling in floating point: sort, then fill the smallest demands first.
fn reference(total: u64, demands: &[u64], floor: u64) -> Vec<f64> {
    let n = demands.len();
    let floor = floor.min(total / n as u64);
    let want: Vec<f64> = demands.iter().map(|d| (*d).max(floor) as f64).collect();
    let sum: f64 = want.iter().sum();
    let total = total as f64;
    if sum <= total {
        return want.iter().map(|w| w + (total - sum) / n as f64).collect();
    }
    let mut sorted = want.clone();
    sorted.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let mut remaining = total;
    let mut level = f64::INFINITY;
    for (k, w) in sorted.iter().enumerate() {
        let share = remaining / (n - k) as f64;
        if *w <= share {
            remaining -= w;
        } else {
            level = share;
            break;
        }
    }
    want.iter().map(|w| w.min(level)).collect()
}

fn fill(total: u64, demands: &[u64], floor: u64) -> Vec<u64> {
    let mut out = vec![Rate::from_bps(0); demands.len()];
    water_fill(
        Rate::from_bps(total),
        &rate_vec(demands),
        Rate::from_bps(floor),
        &mut out,
    );
    bps(&out)
}

#[test]
fn water_fill_examples() {
    // Carousel §5.3: the core using less than its fair share leaves the extra to the other.
    assert_eq!(fill(1000, &[800, 200], 10), [800, 200]);
    assert_eq!(fill(1000, &[900, 900], 10), [500, 500]);
    assert_eq!(fill(1000, &[1000, 300, 0], 10), [690, 300, 10]);
    // Below the total: everyone gets its demand and an equal share of the rest.
    assert_eq!(fill(1000, &[100, 200, 0], 10), [330, 430, 240]);
    // Rounding: 1000 / 3 leaves one bit/s, given to the first entry above the level.
    assert_eq!(fill(1000, &[1000, 1000, 1000], 0), [334, 333, 333]);
    // Floors that do not fit shrink to total / n.
    assert_eq!(fill(10, &[0, 0, 100], 9), [3, 3, 4]);
    assert_eq!(fill(0, &[5, 5], 1), [0, 0]);
}

proptest! {
    #[test]
    fn water_fill_matches_reference_and_properties(
        total in 0u64..2_000_000_000_000,
        demands in prop::collection::vec(
            prop_oneof![Just(0u64), 0u64..2_000_000_000_000, 0u64..1_000_000], 1..12),
        floor_fraction in 0.0f64..0.08,
    ) {
        let n = demands.len() as u64;
        let floor = (total as f64 * floor_fraction) as u64;
        let out = fill(total, &demands, floor);
        let eff_floor = floor.min(total / n);
        let want: Vec<u64> = demands.iter().map(|d| (*d).max(eff_floor)).collect();
        let sum_want: u128 = want.iter().map(|w| *w as u128).sum();
        // Work conservation: the shares sum to the total, never more.
        prop_assert_eq!(out.iter().map(|o| *o as u128).sum::<u128>(), total as u128);
        // Floors.
        prop_assert!(out.iter().all(|o| *o >= eff_floor));
        // Reference, within the rounding of integer shares.
        for (o, r) in out.iter().zip(reference(total, &demands, floor)) {
            prop_assert!((*o as f64 - r).abs() <= 1.0 + r * 1e-12, "{o} vs {r}");
        }
        if sum_want >= total as u128 {
            // Nobody beyond its demand; an unsatisfied entry gets at least anyone else's share.
            for (i, o) in out.iter().enumerate() {
                prop_assert!(*o <= want[i]);
                if *o < want[i] {
                    prop_assert!(out.iter().all(|other| *other <= o + 1), "max-min at {i}");
                }
            }
        } else {
            prop_assert!(out.iter().zip(&want).all(|(o, w)| o >= w));
        }
    }
}

#[test]
fn config_is_validated() {
    let ok = NbaConfig::new(Rate::gbps(1), 4);
    assert_eq!(ok.validate(), Ok(()));
    let bad = |f: &dyn Fn(&mut NbaConfig)| {
        let mut c = ok;
        f(&mut c);
        Nba::new(c).err()
    };
    assert_eq!(bad(&|c| c.cores = 0), Some(NbaConfigError::NoCores));
    assert_eq!(
        bad(&|c| c.period = Duration::ZERO),
        Some(NbaConfigError::ZeroPeriod)
    );
    assert_eq!(
        bad(&|c| c.idle_floor_fraction = 0.3),
        Some(NbaConfigError::IdleFloor)
    );
    assert_eq!(
        bad(&|c| c.idle_floor_fraction = f64::NAN),
        Some(NbaConfigError::IdleFloor)
    );
    assert_eq!(bad(&|c| c.headroom = -0.1), Some(NbaConfigError::Headroom));
    assert_eq!(
        bad(&|c| c.cap_threshold = 0.97),
        Some(NbaConfigError::CapThreshold)
    );
    assert_eq!(
        bad(&|c| c.cap_threshold = 1.01),
        Some(NbaConfigError::CapThreshold)
    );
}

/// Feeds the allocator one period of a fluid model: each core sends `min(demand, rate)` bit/s for
/// one period, reports its cumulative bytes, and the allocator updates. Returns bits sent.
struct Fluid {
    nba: Nba,
    now: u64,
    bytes: Vec<u64>,
}

impl Fluid {
    fn new(cfg: NbaConfig) -> Self {
        let mut nba = Nba::new(cfg).unwrap();
        assert!(
            nba.update(Timestamp::ZERO).is_none(),
            "first update: baseline"
        );
        Fluid {
            nba,
            now: 0,
            bytes: vec![0; cfg.cores],
        }
    }

    fn period(&mut self, demands: &[u64]) -> u64 {
        let p = self.nba.config().period;
        let mut sent = 0;
        for (core, d) in demands.iter().enumerate() {
            let r = (*d).min(self.nba.rates()[core].bps());
            let b = Rate::from_bps(r).bytes_in(p);
            self.bytes[core] += b;
            sent += b * 8;
        }
        self.now += p.as_nanos();
        for (core, b) in self.bytes.iter().enumerate() {
            self.nba
                .record_demand(core, *b, Timestamp::from_nanos(self.now));
        }
        let at = Timestamp::from_nanos(self.now);
        assert_eq!(self.nba.next_update(), at);
        assert!(self.nba.update(at).is_some());
        self.nba.invariants();
        sent
    }
}

#[test]
fn first_update_takes_the_baseline_then_one_update_per_period() {
    let mut nba = Nba::new(NbaConfig::new(Rate::gbps(1), 2)).unwrap();
    assert_eq!(bps(nba.rates()), [500_000_000, 500_000_000]);
    assert_eq!(nba.next_update(), Timestamp::ZERO);
    assert!(nba.update(Timestamp::from_nanos(5 * MS)).is_none());
    assert_eq!(nba.next_update(), Timestamp::from_nanos(105 * MS));
    assert!(nba.update(Timestamp::from_nanos(104 * MS)).is_none());
    // Nothing recorded at all: both cores are stale and keep their (zero) demand.
    let rates = nba
        .update(Timestamp::from_nanos(130 * MS))
        .unwrap()
        .to_vec();
    assert_eq!(bps(&rates), [500_000_000, 500_000_000]);
    assert_eq!(nba.counters().stale_cores, 2);
    assert_eq!(
        nba.next_update(),
        Timestamp::from_nanos(230 * MS),
        "no catch-up burst"
    );
    assert_eq!(nba.epoch(), 1);
}

#[test]
fn satisfied_core_keeps_its_demand_plus_headroom_and_the_rest_goes_to_the_capped_one() {
    let mut f = Fluid::new(NbaConfig::new(Rate::gbps(1), 2));
    f.period(&[800_000_000, 200_000_000]);
    // Core 0 was held to 500 (capped), core 1 sent 200 of 500.
    assert_eq!(bps(f.nba.demands())[1], 204_000_000);
    assert_eq!(bps(f.nba.rates()), [796_000_000, 204_000_000]);
    let sent = f.period(&[800_000_000, 200_000_000]);
    assert_eq!(
        sent, 99_600_000,
        "996 Mbit/s for 100 ms: 0.4 % below the aggregate"
    );
    assert_eq!(bps(f.nba.rates()), [796_000_000, 204_000_000], "stable");
}

#[test]
fn idle_cores_keep_one_percent_and_ramp_in_one_period() {
    let mut f = Fluid::new(NbaConfig::new(Rate::gbps(1), 3));
    f.period(&[2_000_000_000, 0, 0]);
    assert_eq!(
        bps(f.nba.rates()),
        [980_000_000, 10_000_000, 10_000_000],
        "1 % floors (Carousel §5.3)"
    );
    assert_eq!(f.nba.counters().floored_cores, 2);
    // Core 2 wakes up with a big demand: it is at its floor, so it is capped and gets half.
    f.period(&[2_000_000_000, 0, 2_000_000_000]);
    assert_eq!(bps(f.nba.rates()), [495_000_000, 10_000_000, 495_000_000]);
}

#[test]
fn a_restarted_counter_restarts_the_measurement_and_unknown_cores_are_ignored() {
    let mut f = Fluid::new(NbaConfig::new(Rate::gbps(1), 2));
    f.period(&[800_000_000, 200_000_000]);
    assert_eq!(bps(f.nba.rates()), [796_000_000, 204_000_000]);
    // Core 0's silo restarts: its counter starts from zero again.
    let at = |ms: u64| Timestamp::from_nanos(f.now + ms * MS);
    f.nba.record_demand(0, 1_000, at(0));
    f.nba.record_demand(7, 200, at(0));
    assert_eq!(f.nba.counters().regressed_samples, 1);
    assert_eq!(f.nba.counters().unknown_core_samples, 1);
    f.nba.invariants();
    // At the next update core 0 has only its fresh baseline: stale, previous demand kept.
    f.nba.record_demand(1, f.bytes[1] + 2_500_000, at(100));
    let stale = f.nba.counters().stale_cores;
    assert!(f.nba.update(at(100)).is_some());
    assert_eq!(f.nba.counters().stale_cores, stale + 1);
    assert_eq!(bps(f.nba.rates()), [796_000_000, 204_000_000]);
    // A period later it is measured again from the new counter: 19.8 MB in 200 ms = 792 Mbit/s,
    // 99.5 % of its rate: at its cap.
    f.nba.record_demand(0, 1_000 + 19_800_000, at(200));
    f.nba.record_demand(1, f.bytes[1] + 5_000_000, at(200));
    assert!(f.nba.update(at(200)).is_some());
    assert_eq!(bps(f.nba.demands())[0], 1_000_000_000, "capped: unbounded");
    assert_eq!(bps(f.nba.rates()), [796_000_000, 204_000_000]);
}

#[test]
fn set_aggregate_rescales_the_rates() {
    let mut f = Fluid::new(NbaConfig::new(Rate::gbps(1), 2));
    f.period(&[800_000_000, 200_000_000]);
    f.nba.set_aggregate(Rate::gbps(2));
    assert_eq!(bps(f.nba.rates()), [1_592_000_000, 408_000_000]);
    f.nba.invariants();
}

proptest! {
    /// Closed loop: fixed demands, any starting split. After 4 periods the allocation is max-min
    /// fair among the cores it holds back and wastes at most the headroom of the satisfied cores
    /// and the floors of the nearly idle ones.
    #[test]
    fn closed_loop_converges_to_a_fair_work_conserving_split(
        aggregate in 10_000_000u64..10_000_000_000,
        shares in prop::collection::vec(prop_oneof![Just(0.0f64), 0.0f64..1.2], 1..6),
        warmup in prop::collection::vec(0.0f64..1.2, 6),
    ) {
        let n = shares.len();
        let mut f = Fluid::new(NbaConfig::new(Rate::from_bps(aggregate), n));
        let start: Vec<u64> = warmup[..n].iter().map(|s| (s * aggregate as f64) as u64).collect();
        f.period(&start);
        let demands: Vec<u64> = shares.iter().map(|s| (s * aggregate as f64) as u64).collect();
        for _ in 0..4 {
            f.period(&demands);
        }
        let rates = bps(f.nba.rates());
        let achieved: u64 = demands.iter().zip(&rates).map(|(d, r)| *d.min(r)).sum();
        let floor = aggregate / 100;
        let small = demands.iter().filter(|d| (**d as f64 * 1.02) < floor as f64).count() as u64;
        let want = demands.iter().sum::<u64>().min(aggregate);
        let bound = want as f64 - 0.02 * aggregate as f64 - (small * floor) as f64 - n as f64;
        prop_assert!(achieved as f64 >= bound, "achieved {achieved} < {bound}, rates {rates:?}");
        for (i, (d, r)) in demands.iter().zip(&rates).enumerate() {
            if r < d {
                prop_assert!(rates.iter().all(|o| *o <= r + 1), "core {i} held back unfairly: {rates:?}");
            }
        }
    }
}
