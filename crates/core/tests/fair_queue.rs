//! Property tests of the fair queue against a plain reference model (CONTRIBUTING.md §13).
//!
//! The reference keeps each flow's packets in a `VecDeque`, each class's new and old lists in a
//! `VecDeque` of flow indices and each flow's deficit in a `HashMap`, and runs `fq_codel`'s
//! dequeue loop over them. The fair queue must return exactly the same packets in the same order
//! for any sequence of enqueues and dequeues over several classes, and besides: nothing lost or
//! duplicated, packets of a flow leave in the order they came, the counters add up (and count the
//! packets that had no flow state), two continuously backlogged flows have sent the same bytes
//! within one packet at every round boundary, and a flow that was idle is served before the
//! backlogged ones.

use metronome_core::{ClassId, Duration, FairQueue, FairQueueConfig, FairRejectReason, Timestamp};
use proptest::prelude::*;
use std::collections::{HashMap, HashSet, VecDeque};

/// Quantum of the tests: one full Ethernet frame.
const Q: u32 = 1514;
/// Caller flow indices `0..FLOWS`; the tests also use `FLOWS..FLOWS + 2` (out of range).
const FLOWS: u32 = 12;
/// Packet ids.
const PACKETS: u32 = 256;
/// Classes.
const CLASSES: u16 = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum List {
    New,
    Old,
}

#[derive(Default)]
struct RefFlow {
    packets: VecDeque<(u32, u32, u64)>,
    deficit: i64,
    list: Option<(List, u16)>,
}

/// The reference: `fq_codel`'s flow scheduling over plain collections.
struct Reference {
    flows: HashMap<u32, RefFlow>,
    lists: Vec<(VecDeque<u32>, VecDeque<u32>)>,
    overflowed: u64,
}

impl Reference {
    fn new() -> Self {
        Reference {
            flows: HashMap::new(),
            lists: vec![(VecDeque::new(), VecDeque::new()); usize::from(CLASSES)],
            overflowed: 0,
        }
    }

    fn enqueue(&mut self, now: u64, class: u16, flow: Option<u32>, id: u32, len: u32) -> u32 {
        let overflow = FLOWS + u32::from(class);
        let mut f = match flow {
            Some(f) if f < FLOWS => f,
            _ => {
                self.overflowed += 1;
                overflow
            }
        };
        if let Some((_, c)) = self.flows.get(&f).and_then(|s| s.list) {
            if c != class {
                self.overflowed += 1;
                f = overflow;
            }
        }
        let st = self.flows.entry(f).or_default();
        st.packets.push_back((id, len, now));
        if st.list.is_none() {
            st.list = Some((List::New, class));
            st.deficit = i64::from(Q);
            self.lists[usize::from(class)].0.push_back(f);
        }
        f
    }

    /// (id, flow, len, enqueued_at, from_new)
    fn dequeue(&mut self, class: u16) -> Option<(u32, u32, u32, u64, bool)> {
        let c = usize::from(class);
        loop {
            let (new, old) = &mut self.lists[c];
            let from_new = !new.is_empty();
            let f = if from_new {
                *new.front()?
            } else {
                *old.front()?
            };
            let st = self.flows.get_mut(&f).unwrap();
            if st.deficit <= 0 {
                st.deficit += i64::from(Q);
                st.list = Some((List::Old, class));
                if from_new {
                    new.pop_front()
                } else {
                    old.pop_front()
                };
                old.push_back(f);
                continue;
            }
            match st.packets.pop_front() {
                Some((id, len, at)) => {
                    st.deficit -= i64::from(len);
                    return Some((id, f, len, at, from_new));
                }
                None => {
                    if from_new {
                        new.pop_front();
                    } else {
                        old.pop_front();
                    }
                    if from_new && !old.is_empty() {
                        st.list = Some((List::Old, class));
                        old.push_back(f);
                    } else {
                        st.list = None;
                    }
                }
            }
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    /// Enqueue a packet of `len` bytes of `class` to `flow` (`None`: no flow state).
    Enqueue {
        class: u16,
        flow: Option<u32>,
        len: u32,
    },
    /// Dequeue up to `n` packets of `class`.
    Dequeue { class: u16, n: u8 },
    /// Advance time.
    Wait(u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0..CLASSES, prop::option::weighted(0.9, 0..FLOWS + 2), 1u32..9000)
            .prop_map(|(class, flow, len)| Op::Enqueue { class, flow, len }),
        3 => (0..CLASSES, 1u8..8).prop_map(|(class, n)| Op::Dequeue { class, n }),
        1 => any::<u16>().prop_map(Op::Wait),
    ]
}

fn new_queue() -> FairQueue {
    FairQueue::new(FairQueueConfig {
        packets: PACKETS,
        flows: FLOWS,
        classes: CLASSES,
        quantum: Q,
    })
    .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_fair_queue_matches_the_reference(ops in prop::collection::vec(op(), 1..400)) {
        let mut q = new_queue();
        let mut r = Reference::new();
        let mut free: Vec<u32> = (0..PACKETS).rev().collect();
        let mut now = 1_000u64;
        let mut in_queue = HashSet::new();
        // Per flow index: ids in enqueue order, to check per-flow FIFO.
        let mut order: HashMap<u32, VecDeque<u32>> = HashMap::new();
        let (mut enqueued, mut dequeued, mut no_state) = (0u64, 0u64, 0u64);
        for op in ops {
            match op {
                Op::Enqueue { class, flow, len } => {
                    let Some(id) = free.pop() else { continue };
                    let got = q.enqueue(Timestamp::from_nanos(now), ClassId(class), flow, id, len)
                        .unwrap();
                    let want = r.enqueue(now, class, flow, id, len);
                    prop_assert_eq!(got.flow, want);
                    if flow.is_none_or(|f| f >= FLOWS) {
                        no_state += 1;
                        prop_assert!(got.overflow);
                    }
                    prop_assert!(in_queue.insert(id));
                    order.entry(got.flow).or_default().push_back(id);
                    enqueued += 1;
                }
                Op::Dequeue { class, n } => {
                    for _ in 0..n {
                        let got = q.dequeue(Timestamp::from_nanos(now), ClassId(class));
                        let want = r.dequeue(class);
                        let got_t = got.map(|d| {
                            (d.id, d.flow, d.len, d.enqueued_at.as_nanos(), d.from_new)
                        });
                        prop_assert_eq!(got_t, want);
                        let Some(d) = got else { break };
                        prop_assert_eq!(d.sojourn, Duration::from_nanos(now - d.enqueued_at.as_nanos()));
                        prop_assert!(in_queue.remove(&d.id), "duplicate {}", d.id);
                        prop_assert_eq!(order.get_mut(&d.flow).and_then(VecDeque::pop_front), Some(d.id));
                        free.push(d.id);
                        dequeued += 1;
                    }
                }
                Op::Wait(ns) => now += u64::from(ns),
            }
            q.invariants();
        }
        let c = q.counters();
        prop_assert_eq!((c.enqueued, c.dequeued), (enqueued, dequeued));
        prop_assert_eq!(q.len(), in_queue.len() as u64);
        prop_assert_eq!(c.overflowed, r.overflowed);
        prop_assert!(c.overflowed >= no_state);
        prop_assert_eq!(c.overflowed - c.class_conflicts, no_state);
        // Drain everything: nothing lost.
        for class in 0..CLASSES {
            while let Some(d) = q.dequeue(Timestamp::from_nanos(now), ClassId(class)) {
                prop_assert!(in_queue.remove(&d.id));
                prop_assert_eq!(r.dequeue(class).map(|t| t.0), Some(d.id));
            }
        }
        prop_assert!(in_queue.is_empty());
        prop_assert!(q.is_empty());
        q.invariants();
    }

    #[test]
    fn two_backlogged_flows_share_within_one_packet_per_round(
        a in prop::collection::vec(64u32..=Q, 40..120),
        b in prop::collection::vec(64u32..=Q, 40..120),
    ) {
        let mut q = new_queue();
        let c = ClassId(0);
        let t = Timestamp::from_nanos(0);
        let mut id = 0;
        for (&la, &lb) in a.iter().zip(b.iter().chain(std::iter::repeat(&Q))) {
            q.enqueue(t, c, Some(0), id, la).unwrap();
            q.enqueue(t, c, Some(1), id + 1, lb).unwrap();
            id += 2;
        }
        for &lb in b.iter().skip(a.len()) {
            q.enqueue(t, c, Some(1), id, lb).unwrap();
            id += 1;
        }
        let mut sent = [0u64; 2];
        let mut last = None;
        while q.flow_packets(0) > 0 && q.flow_packets(1) > 0 {
            let d = q.dequeue(t, c).unwrap();
            // A round ends when flow 1 hands over to flow 0: both had the same number of quanta.
            if last == Some(1) && d.flow == 0 {
                prop_assert!(sent[0].abs_diff(sent[1]) < u64::from(Q), "{sent:?}");
            }
            prop_assert!(sent[0].abs_diff(sent[1]) < 2 * u64::from(Q), "{sent:?}");
            sent[d.flow as usize] += u64::from(d.len);
            last = Some(d.flow);
        }
    }

    #[test]
    fn idle_flows_are_served_before_the_backlog(
        bulk in 1u32..6,
        sparse in 1u32..5,
        served in 0usize..30,
        len in 64u32..=Q,
    ) {
        let mut q = new_queue();
        let c = ClassId(1);
        let t = Timestamp::from_nanos(0);
        let mut id = 0;
        for _ in 0..20 {
            for f in 0..bulk {
                q.enqueue(t, c, Some(f), id, Q).unwrap();
                id += 1;
            }
        }
        // Every bulk flow stays backlogged (20 packets each, at most half served).
        for _ in 0..served % (10 * bulk as usize) {
            q.dequeue(t, c).unwrap();
        }
        // Each idle flow sends one packet: they leave in the next `sparse + bulk` dequeues (a
        // bulk flow may still be on the new list from its own first round, but each new flow is
        // served once before any old flow is).
        let mut want = HashSet::new();
        for k in 0..sparse {
            q.enqueue(t, c, Some(bulk + k), id, len).unwrap();
            want.insert(id);
            id += 1;
        }
        let mut seen = 0;
        for _ in 0..(sparse + bulk) {
            let d = q.dequeue(t, c).unwrap();
            if want.remove(&d.id) {
                seen += 1;
                prop_assert!(d.from_new);
            }
        }
        prop_assert_eq!(seen, sparse);
        q.invariants();
    }
}

#[test]
fn a_full_flow_state_is_counted_and_bad_ids_are_handed_back() {
    let mut q = new_queue();
    let t = Timestamp::from_nanos(5);
    for id in 0..10 {
        let placed = q.enqueue(t, ClassId(2), None, id, 100).unwrap();
        assert!(placed.overflow);
        assert_eq!(placed.flow, q.overflow_flow(ClassId(2)));
    }
    assert_eq!(q.counters().overflowed, 10);
    assert_eq!(q.backlogged_flows(ClassId(2)), 1);
    let r = q.enqueue(t, ClassId(0), Some(1), PACKETS, 100).unwrap_err();
    assert_eq!(r.reason, FairRejectReason::PacketOutOfRange);
    q.invariants();
}
