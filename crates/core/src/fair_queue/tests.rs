//! Unit tests of the fair queue with a manual clock.

use super::*;

const Q: u32 = 1514;

fn t(ns: u64) -> Timestamp {
    Timestamp::from_nanos(ns)
}

fn fq(packets: u32, flows: u32, classes: u32) -> FairQueue {
    FairQueue::new(FairQueueConfig {
        packets,
        flows,
        classes,
        quantum: Q,
    })
    .unwrap()
}

#[test]
fn a_sparse_flow_is_served_before_the_bulk_backlog() {
    let mut q = fq(1024, 16, 1);
    let c = ClassId(0);
    // Four bulk flows with 100 packets each.
    let mut id = 0;
    for _ in 0..100 {
        for f in 0..4 {
            q.enqueue(t(0), c, Some(f), id, Q).unwrap();
            id += 1;
        }
    }
    // Serve a few rounds so the bulk flows are on the old list.
    for _ in 0..8 {
        q.dequeue(t(1), c).unwrap();
    }
    let sparse = q.enqueue(t(2), c, Some(9), 999, 100).unwrap();
    assert!(sparse.new_flow);
    let next = q.dequeue(t(5), c).unwrap();
    assert_eq!(
        (next.id, next.flow, next.sojourn),
        (999, 9, Duration::from_nanos(3))
    );
    assert!(next.from_new);
    q.invariants();
}

#[test]
fn backlogged_flows_alternate_by_quantum() {
    let mut q = fq(64, 4, 1);
    let c = ClassId(0);
    for i in 0..10 {
        q.enqueue(t(0), c, Some(0), i, Q).unwrap();
        q.enqueue(t(0), c, Some(1), 10 + i, Q).unwrap();
    }
    let flows: Vec<u32> = (0..20).map(|_| q.dequeue(t(0), c).unwrap().flow).collect();
    assert_eq!(&flows[..6], &[0, 1, 0, 1, 0, 1]);
    assert_eq!(q.dequeue(t(0), c), None);
    q.invariants();
}

#[test]
fn no_flow_index_and_conflicts_go_to_the_overflow_flow() {
    let mut q = fq(16, 2, 2);
    let e = q.enqueue(t(0), ClassId(1), None, 0, 10).unwrap();
    assert_eq!((e.flow, e.overflow), (3, true));
    let e = q.enqueue(t(0), ClassId(1), Some(7), 1, 10).unwrap();
    assert!(e.overflow);
    q.enqueue(t(0), ClassId(0), Some(0), 2, 10).unwrap();
    let e = q.enqueue(t(0), ClassId(1), Some(0), 3, 10).unwrap();
    assert!(e.overflow);
    let c = q.counters();
    assert_eq!((c.overflowed, c.class_conflicts), (3, 1));
    assert_eq!(q.backlogged_flows(ClassId(1)), 1);
    q.invariants();
}

#[test]
fn bad_input_is_handed_back() {
    let mut q = fq(4, 2, 1);
    let r = q.enqueue(t(0), ClassId(0), Some(0), 4, 10).unwrap_err();
    assert_eq!(r.reason, FairRejectReason::PacketOutOfRange);
    let r = q.enqueue(t(0), ClassId(3), Some(0), 1, 10).unwrap_err();
    assert_eq!(r.reason, FairRejectReason::ClassOutOfRange);
    q.enqueue(t(0), ClassId(0), Some(0), 1, 10).unwrap();
    let r = q.enqueue(t(0), ClassId(0), Some(1), 1, 10).unwrap_err();
    assert_eq!(r.reason, FairRejectReason::AlreadyQueued);
    assert_eq!(q.counters().rejected, 3);
    assert_eq!(q.dequeue(t(0), ClassId(9)), None);
    assert!(FairQueue::new(FairQueueConfig {
        packets: 1,
        flows: 1,
        classes: 1,
        quantum: 0
    })
    .is_err());
    q.invariants();
}

#[test]
fn empty_flows_leave_the_lists_and_return_as_new() {
    let mut q = fq(8, 2, 1);
    let c = ClassId(0);
    q.enqueue(t(0), c, Some(0), 0, 10).unwrap();
    assert!(q.dequeue(t(0), c).is_some());
    assert_eq!(q.dequeue(t(0), c), None);
    q.invariants();
    let e = q.enqueue(t(0), c, Some(0), 0, 10).unwrap();
    assert!(e.new_flow);
    assert_eq!(q.flow_sojourn(0, t(40)), Duration::from_nanos(40));
    q.invariants();
}

#[test]
fn a_flow_back_without_credit_waits_for_the_next_round() {
    let mut q = fq(16, 4, 1);
    let c = ClassId(0);
    for i in 0..4 {
        q.enqueue(t(0), c, Some(0), i, Q).unwrap();
    }
    q.enqueue(t(0), c, Some(1), 4, Q).unwrap();
    // Flow 0 sends its quantum, then flow 1 sends its only packet and is detached.
    assert_eq!(q.dequeue(t(0), c).unwrap().flow, 0);
    assert_eq!(q.dequeue(t(0), c).unwrap().flow, 1);
    assert_eq!(q.backlogged_flows(c), 1);
    // Back in the same round with its credit used up: the next round, behind flow 0.
    let e = q.enqueue(t(0), c, Some(1), 5, 100).unwrap();
    assert!(e.next_round && !e.new_flow, "{e:?}");
    assert_eq!(q.dequeue(t(0), c).unwrap().flow, 0);
    assert_eq!(q.dequeue(t(0), c).unwrap().flow, 1);
    assert_eq!(q.counters().next_round_flows, 1);
    q.invariants();
}

#[test]
fn a_drop_takes_the_head_of_the_fattest_flow_and_the_flow_is_detached_later() {
    let mut q = fq(16, 4, 1);
    let c = ClassId(0);
    q.enqueue(t(0), c, Some(0), 0, 100).unwrap();
    q.enqueue(t(1), c, Some(1), 1, 900).unwrap();
    q.enqueue(t(2), c, Some(1), 2, 900).unwrap();
    assert_eq!(q.fattest_flow(c), Some(1));
    let d = q.drop_head(t(10), 1).unwrap();
    assert_eq!((d.id, d.len, d.sojourn), (1, 900, Duration::from_nanos(9)));
    q.drop_head(t(10), 1).unwrap();
    assert_eq!(q.drop_head(t(10), 1), None);
    assert_eq!(q.fattest_flow(c), Some(0));
    q.invariants();
    assert_eq!(q.dequeue(t(11), c).unwrap().id, 0);
    assert_eq!(q.dequeue(t(11), c), None);
    assert_eq!(q.counters().dropped, 2);
    assert_eq!(q.fattest_flow(c), None);
    q.invariants();
}
