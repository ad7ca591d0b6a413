use super::*;
use crate::packet::{ClassId, FlowId};

fn p(id: u32) -> PacketRef {
    PacketRef::new(id, FlowId(id % 3), ClassId(0), 1500)
}

fn t(ns: u64) -> Timestamp {
    Timestamp::from_nanos(ns)
}

fn wheel(policy: HorizonPolicy, pool_packets: usize) -> TimingWheel {
    TimingWheel::new(TimingWheelConfig {
        granularity: Duration::from_micros(2),
        horizon: Duration::from_micros(200),
        horizon_policy: policy,
        pool_packets,
    })
}

fn drain_all(w: &mut impl EdtQueue, now: Timestamp) -> Vec<u32> {
    let mut out = [PacketRef::default(); 4];
    let mut ids = Vec::new();
    loop {
        let n = w.dequeue(now, &mut out);
        ids.extend(out[..n].iter().map(|r| r.id));
        if n < out.len() {
            return ids;
        }
    }
}

#[test]
fn slot_count_is_horizon_over_granularity() {
    let c = TimingWheelConfig::default();
    assert_eq!(c.slots(), 1_000_000);
    assert_eq!(wheel(HorizonPolicy::Clamp, 0).slot_count(), 100);
}

#[test]
fn fifo_within_a_slot_and_slots_in_time_order() {
    let mut w = wheel(HorizonPolicy::Clamp, 64);
    let now = t(10_000);
    // Slot of 14 us: ids 0, 1, 2 in arrival order; slot of 12 us: id 3.
    w.enqueue(now, t(14_100), p(0)).unwrap();
    w.enqueue(now, t(15_900), p(1)).unwrap();
    w.enqueue(now, t(14_000), p(2)).unwrap();
    w.enqueue(now, t(12_500), p(3)).unwrap();
    assert_eq!(w.next_due(), Some(t(12_000)));
    assert!(drain_all(&mut w, t(11_999)).is_empty());
    assert_eq!(drain_all(&mut w, t(12_000)), vec![3]);
    assert_eq!(w.next_due(), Some(t(14_000)));
    assert_eq!(drain_all(&mut w, t(16_000)), vec![0, 1, 2]);
    assert_eq!(w.next_due(), None);
    w.invariants();
}

#[test]
fn past_due_goes_to_the_front_and_leaves_at_once() {
    let mut w = wheel(HorizonPolicy::Clamp, 64);
    w.enqueue(t(50_000), t(60_000), p(0)).unwrap();
    assert!(drain_all(&mut w, t(50_000)).is_empty());
    // EDT long past: due immediately, not one granularity later.
    w.enqueue(t(50_000), t(1_000), p(1)).unwrap();
    assert_eq!(w.counters().past_due, 1);
    assert_eq!(drain_all(&mut w, t(50_000)), vec![1]);
    // EDT inside the current slot: also due now.
    w.enqueue(t(50_500), t(50_900), p(2)).unwrap();
    assert_eq!(drain_all(&mut w, t(50_500)), vec![2]);
    assert_eq!(drain_all(&mut w, t(60_000)), vec![0]);
}

#[test]
fn beyond_horizon_clamps_or_rejects() {
    let now = t(0);
    let mut c = wheel(HorizonPolicy::Clamp, 64);
    c.enqueue(now, t(1_000_000), p(0)).unwrap();
    assert_eq!(c.counters().clamped_beyond_horizon, 1);
    // Last slot: 99 * 2 us.
    assert_eq!(c.next_due(), Some(t(198_000)));

    let mut r = wheel(HorizonPolicy::Reject, 64);
    let err = r.enqueue(now, t(200_000), p(7)).unwrap_err();
    assert_eq!(err.reason, RejectReason::BeyondHorizon);
    assert_eq!(err.pkt, p(7));
    assert_eq!(r.counters().rejected_beyond_horizon, 1);
    // The last slot itself is accepted.
    r.enqueue(now, t(199_999), p(8)).unwrap();
    assert_eq!(r.len(), 1);
}

#[test]
fn pool_exhaustion_hands_the_packet_back() {
    // pool_packets = 1 gives one node for one packet plus one spare node per occupied slot.
    let mut w = wheel(HorizonPolicy::Clamp, 1);
    let now = t(0);
    let mut accepted = 0;
    let mut rejected = None;
    for i in 0..100 {
        // One packet per slot: each takes a node of its own.
        match w.enqueue(now, t(i * 2_000), p(i as u32)) {
            Ok(()) => accepted += 1,
            Err(e) => {
                rejected = Some(e);
                break;
            }
        }
    }
    let e = rejected.expect("pool must run out");
    assert_eq!(e.reason, RejectReason::PoolExhausted);
    assert_eq!(e.pkt.id, accepted);
    assert_eq!(w.counters().rejected_pool_exhausted, 1);
    assert_eq!(w.len(), accepted as usize);
}

#[test]
fn partial_dequeue_resumes_where_it_stopped() {
    let mut w = wheel(HorizonPolicy::Clamp, 64);
    for i in 0..25 {
        w.enqueue(t(0), t(2_000 * (i % 3)), p(i as u32)).unwrap();
    }
    let mut out = [PacketRef::default(); 10];
    let mut ids = Vec::new();
    for _ in 0..3 {
        let n = w.dequeue(t(10_000), &mut out);
        ids.extend(out[..n].iter().map(|r| r.id));
    }
    let mut want: Vec<u32> = (0..25).filter(|i| i % 3 == 0).collect();
    want.extend((0..25).filter(|i| i % 3 == 1));
    want.extend((0..25).filter(|i| i % 3 == 2));
    assert_eq!(ids, want);
    assert!(w.is_empty());
    w.invariants();
}

#[test]
fn long_idle_gaps_and_wraps_keep_order() {
    let mut w = wheel(HorizonPolicy::Reject, 1024);
    let mut id = 0;
    for round in 0..50u64 {
        // Jump far ahead (many horizons), then fill across the wrap.
        let now = t(round * 10_000_000 + round * 1_234);
        for k in 0..30u64 {
            w.enqueue(now, now + Duration::from_nanos(k * 6_500), p(id))
                .unwrap();
            id += 1;
        }
        let first = id - 30;
        let got = drain_all(&mut w, now + Duration::from_micros(199));
        assert_eq!(got, (first..id).collect::<Vec<_>>());
        w.invariants();
    }
}

#[test]
fn list_store_behaves_the_same() {
    let mut a = wheel(HorizonPolicy::Clamp, 1 << 12);
    let mut b = TimingWheelList::new(TimingWheelConfig {
        granularity: Duration::from_micros(2),
        horizon: Duration::from_micros(200),
        horizon_policy: HorizonPolicy::Clamp,
        pool_packets: 0,
    });
    assert_eq!(b.name(), "timing_wheel_list");
    let mut x: u64 = 12345;
    for i in 0..2000u32 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let now = t(i as u64 * 500);
        let edt = now + Duration::from_nanos((x >> 33) % 300_000);
        a.enqueue(now, edt, p(i)).unwrap();
        b.enqueue(now, edt, p(i)).unwrap();
        if i % 7 == 0 {
            assert_eq!(drain_all(&mut a, now), drain_all(&mut b, now));
        }
    }
    assert_eq!(a.packet_bytes() > 0, b.packet_bytes() > 0);
}

#[test]
fn structure_bytes_match_the_real_allocation() {
    let c = TimingWheelConfig {
        pool_packets: 0,
        ..Default::default()
    };
    let w = TimingWheel::new(c);
    let fixed = TimingWheel::structure_bytes(&c);
    assert_eq!(
        w.memory_bytes(),
        fixed + core::mem::size_of::<TimingWheel>()
    );
    // Carousel's configuration: 1 M slots of 8 bytes plus a 1-bit-per-slot bitmap.
    assert!(fixed < 8_200_000, "{fixed}");
}

#[test]
fn dense_slots_cost_under_twenty_bytes_per_packet() {
    let mut w = TimingWheel::new(TimingWheelConfig {
        horizon: Duration::from_millis(2),
        pool_packets: 10_000,
        ..Default::default()
    });
    // 20 packets per 2 us slot, the bench's default density.
    for i in 0..10_000u32 {
        w.enqueue(t(0), t(i as u64 * 100), p(i)).unwrap();
    }
    assert_eq!(w.counters().clamped_beyond_horizon, 0);
    // Seven 16-byte references per 128-byte node: 18.3 bytes a packet in full nodes, 19.2 with
    // 20 packets a slot (three nodes a slot).
    let per_packet = w.packet_bytes() as f64 / w.len() as f64;
    assert!(per_packet <= 20.0, "{per_packet}");
}
