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
