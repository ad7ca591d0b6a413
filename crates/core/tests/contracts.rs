//! The documented promises of `metronome-core`'s public API, checked through that API alone:
//! zero rates (nothing leaves at 0, a restored rate takes effect from then on with no burst and no
//! stuck state) and counters that count only what their docs say, rejected packets included.

use metronome_core::mltw::{Mltw, MltwConfig};
use metronome_core::timestamp::{PolicyKind, Timestamper};
use metronome_core::{
    ClassId, Duration, EdtQueue, FlowId, HorizonPolicy, PacketRef, Rate, RejectReason, Timestamp,
    TimingWheel, TimingWheelConfig,
};

const MTU: u32 = 1500;

fn t(ns: u64) -> Timestamp {
    Timestamp::from_nanos(ns)
}

fn pkt(id: u32) -> PacketRef {
    PacketRef::new(id, FlowId(1), ClassId(0), 1500)
}

#[test]
fn a_zero_rate_policy_stamps_nothing_before_the_end_of_time() {
    let mut ts = Timestamper::new();
    let p = ts.add_policy(PolicyKind::Aggregate, Rate::gbps(1), 4 * MTU);
    ts.set_rate(p, Rate::from_bps(0)).unwrap();
    let edts: Vec<Timestamp> = (0..3).map(|i| ts.stamp(t(1_000 + i), MTU, &[p])).collect();
    assert_eq!(
        edts,
        vec![Timestamp::MAX; 3],
        "a paused policy releases nothing"
    );
}

#[test]
fn a_rate_restored_after_zero_resumes_from_then_on_without_burst() {
    let mut ts = Timestamper::new();
    let p = ts.add_policy(PolicyKind::Aggregate, Rate::gbps(1), MTU);
    ts.set_rate(p, Rate::from_bps(0)).unwrap();
    for i in 0..3 {
        ts.stamp(t(1_000 + i), MTU, &[p]);
    }
    ts.set_rate(p, Rate::gbps(1)).unwrap();
    let now = t(1_000_000);
    let edts: Vec<u64> = (0..3)
        .map(|_| ts.stamp(now, MTU, &[p]).as_nanos())
        .collect();
    // One MTU of burst, then 1 Gbit/s spacing (12 us per 1500 B), from the restore on.
    assert_eq!(edts, vec![1_000_000, 1_012_000, 1_024_000]);
}

#[test]
fn a_wheel_counts_no_placement_for_a_packet_it_hands_back() {
    // pool_packets = 1: two nodes, taken by two packets in two different slots.
    let mut w = TimingWheel::new(TimingWheelConfig {
        granularity: Duration::from_micros(2),
        horizon: Duration::from_micros(200),
        horizon_policy: HorizonPolicy::Clamp,
        pool_packets: 1,
    });
    let now = t(10_000);
    w.enqueue(now, t(20_000), pkt(0)).unwrap();
    w.enqueue(now, t(40_000), pkt(1)).unwrap();
    // Past due (would go to the empty front slot) and beyond the horizon (would go to the empty
    // last slot): both need a node the pool does not have.
    let past = w.enqueue(now, t(0), pkt(2)).unwrap_err();
    let far = w.enqueue(now, t(10_000_000), pkt(3)).unwrap_err();
    assert_eq!(past.reason, RejectReason::PoolExhausted);
    assert_eq!(far.reason, RejectReason::PoolExhausted);
    let c = w.counters();
    assert_eq!(c.rejected_pool_exhausted, 2);
    // past_due counts packets placed in the front slot, clamped_beyond_horizon packets placed
    // in the last slot: neither was placed.
    assert_eq!((c.past_due, c.clamped_beyond_horizon), (0, 0));
    assert_eq!(c.enqueued, 2);
}

#[test]
fn an_mltw_destination_at_zero_rate_releases_nothing_before_its_edt() {
    let mut q = Mltw::new(MltwConfig {
        estimate_every: 0,
        pool_packets: 64,
        ..Default::default()
    });
    let flow = FlowId(1);
    q.set_rate(flow, Rate::from_bps(0));
    let now = t(1_000_000);
    q.enqueue(now, t(2_000_000), pkt(0)).unwrap();
    let mut out = [PacketRef::default(); 4];
    assert_eq!(q.dequeue(now, &mut out), 0, "released 1 ms before its EDT");
    // Level 0's ring (1024 slots of 1 ns) does not reach 1 ms ahead: the EDT descends to the
    // finest level that covers it, 1024 ns, and waits in the slot that starts at its EDT rounded
    // down to 1024 ns.
    assert_eq!(q.level_for(flow), 0);
    assert_eq!(q.next_due(), Some(t(2_000_000 / 1024 * 1024)));
    q.set_rate(flow, Rate::gbps(1));
    q.enqueue(now, t(3_000_000), pkt(1)).unwrap();
    assert_eq!(q.dequeue(t(2_000_000), &mut out), 1);
    assert_eq!(out[0].id, 0);
}

// ---------------------------------------------------------------------------------------------
// The Timestamper against a reference model written from its docs (CONTRIBUTING.md §13).
// ---------------------------------------------------------------------------------------------

use metronome_core::timestamp::{Paused, PolicyId};
use proptest::prelude::*;

/// Rates whose nanoseconds per byte are whole, so the model needs no rounding: 0 (paused),
/// 8 Gbit/s (1 ns/B), 4 (2), 2 (4), 1 (8), 0.5 (16), 0.1 Gbit/s (80).
const MODEL_RATES_BPS: [u64; 7] = [
    0,
    8_000_000_000,
    4_000_000_000,
    2_000_000_000,
    1_000_000_000,
    500_000_000,
    100_000_000,
];

fn ns_per_byte(bps: u64) -> u64 {
    8_000_000_000 / bps
}

/// Highest policy index the operations name; indices at or above the timestamper's policy count
/// are ids it never handed out.
const MODEL_IDS: u32 = 6;

#[derive(Clone, Debug)]
enum StampOp {
    Add {
        rate: usize,
        burst: u32,
    },
    SetRate {
        id: u32,
        rate: usize,
    },
    SetBurst {
        id: u32,
        burst: u32,
    },
    Stamp {
        dt: u64,
        len: u32,
        ids: Vec<u32>,
        /// The transport's timestamp, relative to `now`.
        earliest: Option<i64>,
    },
}

fn stamp_ops() -> impl Strategy<Value = Vec<StampOp>> {
    let burst = prop_oneof![Just(0u32), 1u32..6_000, Just(MTU), Just(10 * MTU)];
    let op = prop_oneof![
        1 => (0..MODEL_RATES_BPS.len(), burst.clone())
            .prop_map(|(rate, burst)| StampOp::Add { rate, burst }),
        2 => (0..MODEL_IDS, 0..MODEL_RATES_BPS.len())
            .prop_map(|(id, rate)| StampOp::SetRate { id, rate }),
        1 => (0..MODEL_IDS, burst).prop_map(|(id, burst)| StampOp::SetBurst { id, burst }),
        8 => (
            prop_oneof![Just(0u64), 0u64..50_000, Just(10_000_000)],
            prop_oneof![Just(MTU), 0u32..9_000],
            prop::collection::vec(0..MODEL_IDS, 0..4),
            prop::option::of(-5_000i64..30_000),
        )
            .prop_map(|(dt, len, ids, earliest)| StampOp::Stamp { dt, len, ids, earliest }),
    ];
    prop::collection::vec(op, 1..200)
}

/// One policy as the module docs describe it: a GCRA with theoretical arrival time `tat`.
#[derive(Clone, Debug, Default)]
struct ModelPolicy {
    bps: u64,
    burst: u32,
    tat: u64,
    packets: u64,
    bytes: u64,
    delayed: u64,
    paused: u64,
}

#[derive(Debug, Default)]
struct ModelStamper {
    policies: Vec<ModelPolicy>,
    stamped: u64,
    unshaped: u64,
    paused: u64,
    unknown: u64,
}

impl ModelStamper {
    /// EDT = max(now, earliest, max over policies of tat - (burst - len) / R), then every policy
    /// moves `tat` to max(tat, now) + len / R. A policy at zero holds the packet: no EDT, no
    /// policy changes.
    fn stamp(&mut self, now: u64, earliest: u64, len: u32, ids: &[u32]) -> Result<u64, u32> {
        let n = self.policies.len();
        let known = |i: &u32| (*i as usize) < n;
        if let Some(&first) = ids
            .iter()
            .find(|i| known(i) && self.policies[**i as usize].bps == 0)
        {
            for i in ids.iter().filter(|i| known(i)) {
                let p = &mut self.policies[*i as usize];
                if p.bps == 0 {
                    p.paused += 1;
                }
            }
            self.paused += 1;
            return Err(first);
        }
        self.stamped += 1;
        let mut edt = earliest.max(now);
        let mut any = false;
        for &i in ids {
            let Some(p) = self.policies.get_mut(i as usize) else {
                self.unknown += 1;
                continue;
            };
            any = true;
            let r = ns_per_byte(p.bps);
            let slack = u64::from(p.burst.saturating_sub(len)) * r;
            let t = p.tat.saturating_sub(slack).max(now);
            if t > now {
                p.delayed += 1;
            }
            p.tat = p.tat.max(now) + u64::from(len) * r;
            p.packets += 1;
            p.bytes += u64::from(len);
            edt = edt.max(t);
        }
        if !any {
            self.unshaped += 1;
        }
        Ok(edt)
    }
}

fn check_stamper(ts: &Timestamper, m: &ModelStamper, ids: &[PolicyId], now: u64) {
    assert_eq!(ts.len(), m.policies.len());
    let c = ts.counters();
    assert_eq!(
        (c.stamped, c.unshaped, c.paused, c.unknown_policy),
        (m.stamped, m.unshaped, m.paused, m.unknown)
    );
    for (i, mp) in m.policies.iter().enumerate() {
        let p = ts.policy(ids[i]).expect("a policy it handed out");
        assert_eq!(p.rate().bps(), mp.bps);
        assert_eq!(p.burst(), mp.burst);
        assert_eq!(p.is_paused(), mp.bps == 0);
        assert_eq!(p.last_timestamp().as_nanos(), mp.tat, "policy {i}");
        assert_eq!(
            (p.packets, p.bytes, p.delayed, p.paused),
            (mp.packets, mp.bytes, mp.delayed, mp.paused),
            "policy {i}"
        );
        assert_eq!(
            ts.backlog(ids[i], t(now)),
            Some(Duration::from_nanos(mp.tat.saturating_sub(now)))
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Any sequence of adds, rate changes (zero included), burst changes and stamps gives the
    /// model's EDTs and counters: the burst and spacing rules, a rate change from the next packet,
    /// the pause at zero and the resume without burst or stuck state.
    #[test]
    fn timestamper_matches_the_model(ops in stamp_ops(), t0 in 0u64..1_000_000_000) {
        let mut ts = Timestamper::new();
        let mut m = ModelStamper::default();
        // Ids 0..MODEL_IDS as handed out by some timestamper: known here once added.
        let mut foreign = Timestamper::new();
        let ids: Vec<PolicyId> = (0..MODEL_IDS)
            .map(|_| foreign.add_policy(PolicyKind::Pacing, Rate::gbps(1), MTU))
            .collect();
        let mut now = t0;
        for op in ops {
            match op {
                StampOp::Add { rate, burst } => {
                    if m.policies.len() < MODEL_IDS as usize {
                        let bps = MODEL_RATES_BPS[rate];
                        let id = ts.add_policy(PolicyKind::Aggregate, Rate::from_bps(bps), burst);
                        prop_assert_eq!(id, ids[m.policies.len()]);
                        m.policies.push(ModelPolicy { bps, burst, ..Default::default() });
                    }
                }
                StampOp::SetRate { id, rate } => {
                    let bps = MODEL_RATES_BPS[rate];
                    let r = ts.set_rate(ids[id as usize], Rate::from_bps(bps));
                    match m.policies.get_mut(id as usize) {
                        Some(p) => { prop_assert!(r.is_ok()); p.bps = bps; }
                        None => prop_assert!(r.is_err()),
                    }
                }
                StampOp::SetBurst { id, burst } => {
                    let r = ts.set_burst(ids[id as usize], burst);
                    match m.policies.get_mut(id as usize) {
                        Some(p) => { prop_assert!(r.is_ok()); p.burst = burst; }
                        None => prop_assert!(r.is_err()),
                    }
                }
                StampOp::Stamp { dt, len, ids: which, earliest } => {
                    now += dt;
                    let earliest = earliest.map_or(now, |e| (now as i64 + e).max(0) as u64);
                    let pids: Vec<PolicyId> = which.iter().map(|&i| ids[i as usize]).collect();
                    let want = m.stamp(now, earliest, len, &which);
                    // Half the stamps through the Timestamp::MAX form, half through the named one.
                    if len % 2 == 0 {
                        let got = ts.stamp_after(t(now), t(earliest), len, &pids);
                        prop_assert_eq!(got.as_nanos(), want.unwrap_or(u64::MAX));
                    } else {
                        let got = ts.try_stamp_after(t(now), t(earliest), len, &pids);
                        prop_assert_eq!(
                            got.map(|e| e.as_nanos()),
                            want.map_err(|i| Paused(ids[i as usize]))
                        );
                    }
                }
            }
            check_stamper(&ts, &m, &ids, now);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Rates and the NBA's shares.
// ---------------------------------------------------------------------------------------------

use metronome_core::{Nba, NbaConfig};

proptest! {
    /// `transmit_time` is `bytes × 8e9 / bps` rounded to the nearest nanosecond, up to the fixed
    /// point's error of at most 2^-25 ns per byte (the module docs' bound): |t - exact| <= 1/2 +
    /// bytes × 2^-25.
    #[test]
    fn transmit_time_is_the_exact_time_within_the_documented_error(
        bps in 1_000u64..u64::MAX,
        bytes in 0u64..(1 << 32),
    ) {
        let got = Rate::from_bps(bps).transmit_time(bytes).as_nanos() as u128;
        let exact_num = bytes as u128 * 8_000_000_000; // exact = exact_num / bps
        let err = (got * bps as u128).abs_diff(exact_num);
        prop_assert!(
            (err << 25) <= bps as u128 * ((1 << 24) + bytes as u128),
            "{} B at {} bit/s: {} ns", bytes, bps, got
        );
    }

    /// Every rate prints as a tc rate that parses back to itself.
    #[test]
    fn every_rate_round_trips_through_display_and_parse(bps in any::<u64>()) {
        let r = Rate::from_bps(bps);
        prop_assert_eq!(r.to_string().parse::<Rate>(), Ok(r));
    }
}

#[test]
fn a_zero_rate_has_no_transmit_time_and_carries_no_bytes() {
    let zero = Rate::from_bps(0);
    assert_eq!(zero.transmit_time(1), Duration::MAX);
    assert_eq!(zero.transmit_time(0), Duration::MAX);
    assert_eq!(zero.bytes_in(Duration::from_secs(3600)), 0);
}

#[test]
fn the_nba_shares_a_zero_aggregate_as_zero_and_a_restored_one_from_the_restore() {
    let mut nba = Nba::new(NbaConfig::new(Rate::from_bps(0), 3)).unwrap();
    assert!(nba.rates().iter().all(|r| r.bps() == 0));
    let period = nba.config().period;
    let mut now = t(0);
    nba.update(now);
    for step in 1..4u64 {
        now += period;
        for core in 0..3 {
            nba.record_demand(core, step * 1_000_000, now);
        }
        let rates = nba.update(now).expect("one update per period");
        assert!(rates.iter().all(|r| r.bps() == 0), "{rates:?}");
        nba.invariants();
    }
    // Restored: an equal split at once, then rates that sum to the aggregate, none left at zero.
    nba.set_aggregate(Rate::gbps(3));
    assert_eq!(nba.rates(), &[Rate::gbps(1); 3]);
    for step in 4..8u64 {
        now += period;
        for core in 0..3 {
            nba.record_demand(core, step * 1_000_000, now);
        }
        let rates = nba.update(now).expect("one update per period");
        let total: u64 = rates.iter().map(|r| r.bps()).sum();
        assert_eq!(total, 3_000_000_000);
        assert!(rates.iter().all(|r| r.bps() > 0), "{rates:?}");
        nba.invariants();
    }
}
