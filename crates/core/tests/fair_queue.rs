//! Property tests of the fair queue against a plain reference model (CONTRIBUTING.md §13).
//!
//! The reference keeps each flow's packets in a `VecDeque`, each class's new, old and next lists in
//! `VecDeque`s of flow indices and each flow's deficit and round tag in a `HashMap`, and runs
//! deficit round robin with explicit rounds over them (the module docs of `fair_queue`). The fair
//! queue must return exactly the same packets in the same order, and name the same fattest flow,
//! for any sequence of enqueues, dequeues and drops over several classes, and besides: nothing
//! lost or duplicated, packets of a flow leave in the order they came, the counters add up (and
//! count the packets that had no flow state), two continuously backlogged flows have sent the same
//! bytes within one packet at every round boundary, a flow that was idle is served before the
//! backlogged ones, a flow that sends one packet at a time (idle after each) gets no more than a
//! backlogged flow, and a sparse flow below its share waits for no backlogged flow.

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

#[derive(Default)]
struct RefFlow {
    packets: VecDeque<(u32, u32, u64)>,
    deficit: i64,
    round: u64,
    /// The class that last held the flow, and whether it is on one of its lists now.
    class: Option<u16>,
    listed: bool,
}

/// One class of the reference: its three lists and its round.
#[derive(Clone, Default)]
struct RefClass {
    new: VecDeque<u32>,
    old: VecDeque<u32>,
    next: VecDeque<u32>,
    round: u64,
}

/// The reference: DRR with explicit rounds over plain collections (see the module docs of
/// `fair_queue`).
struct Reference {
    flows: HashMap<u32, RefFlow>,
    classes: Vec<RefClass>,
    overflowed: u64,
}

impl Reference {
    fn new() -> Self {
        Reference {
            flows: HashMap::new(),
            classes: vec![RefClass::default(); usize::from(CLASSES)],
            overflowed: 0,
        }
    }

    fn flow(&mut self, f: u32) -> &mut RefFlow {
        self.flows.entry(f).or_insert_with(|| RefFlow {
            deficit: i64::from(Q),
            class: Some(0),
            ..RefFlow::default()
        })
    }

    fn enqueue(&mut self, now: u64, class: u16, flow: Option<u32>, id: u32, len: u32) -> u32 {
        let overflow = FLOWS + u32::from(class);
        let mut f = match flow {
            Some(f) if f < FLOWS => f,
            _ => overflow,
        };
        let st = self.flow(f);
        if st.listed && st.class != Some(class) {
            f = overflow;
        }
        if f == overflow {
            self.overflowed += 1;
        }
        let round = self.classes[usize::from(class)].round;
        self.flow(f);
        let st = self.flows.get_mut(&f).unwrap();
        st.packets.push_back((id, len, now));
        if !st.listed {
            st.listed = true;
            if st.class != Some(class) || st.round != round {
                st.deficit = st.deficit.min(0) + i64::from(Q);
                st.round = round;
                st.class = Some(class);
            }
            let c = &mut self.classes[usize::from(class)];
            if st.deficit > 0 {
                c.new.push_back(f);
            } else {
                st.deficit += i64::from(Q);
                st.round = round + 1;
                c.next.push_back(f);
            }
        }
        f
    }

    /// (id, flow, len, enqueued_at, from_new)
    fn dequeue(&mut self, class: u16) -> Option<(u32, u32, u32, u64, bool)> {
        let c = &mut self.classes[usize::from(class)];
        loop {
            let from_new = !c.new.is_empty();
            let f = if from_new {
                c.new[0]
            } else if !c.old.is_empty() {
                c.old[0]
            } else if !c.next.is_empty() {
                c.old = std::mem::take(&mut c.next);
                c.round += 1;
                continue;
            } else {
                return None;
            };
            let list = if from_new { &mut c.new } else { &mut c.old };
            let st = self.flows.get_mut(&f).unwrap();
            if st.packets.is_empty() {
                list.pop_front();
                st.listed = false;
                continue;
            }
            if st.deficit <= 0 {
                st.deficit += i64::from(Q);
                st.round = c.round + 1;
                list.pop_front();
                c.next.push_back(f);
                continue;
            }
            let (id, len, at) = st.packets.pop_front().unwrap();
            st.deficit -= i64::from(len);
            if st.packets.is_empty() {
                list.pop_front();
                st.listed = false;
            }
            return Some((id, f, len, at, from_new));
        }
    }

    /// The flow of `class` with the most bytes queued, first on a tie in list order.
    fn fattest(&self, class: u16) -> Option<u32> {
        let c = &self.classes[usize::from(class)];
        let mut best: Option<(u32, u64)> = None;
        for &f in c.new.iter().chain(&c.old).chain(&c.next) {
            let bytes: u64 = self.flows[&f].packets.iter().map(|p| u64::from(p.1)).sum();
            if bytes > best.map_or(0, |b| b.1) {
                best = Some((f, bytes));
            }
        }
        best.map(|b| b.0)
    }

    /// A sparse packet sent at once: the flow is detached with credit left in the current
    /// round (as an enqueue would find it), and its length is taken from that credit.
    fn charge_sparse(&mut self, class: u16, flow: u32, len: u32) -> bool {
        if flow >= FLOWS {
            return false;
        }
        let round = self.classes[usize::from(class)].round;
        let st = self.flow(flow);
        if st.listed || !st.packets.is_empty() {
            return false;
        }
        let deficit = if st.class != Some(class) || st.round != round {
            st.deficit.min(0) + i64::from(Q)
        } else {
            st.deficit
        };
        if deficit <= 0 {
            return false;
        }
        st.deficit = deficit - i64::from(len);
        st.round = round;
        st.class = Some(class);
        true
    }

    fn drop_head(&mut self, flow: u32) -> Option<u32> {
        self.flows.get_mut(&flow)?.packets.pop_front().map(|p| p.0)
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
    /// Drop up to `n` packets from the head of the class's fattest flow.
    DropFattest { class: u16, n: u8 },
    /// Send a packet of `len` bytes of `flow` at once if the flow is sparse.
    ChargeSparse { class: u16, flow: u32, len: u32 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0..CLASSES, prop::option::weighted(0.9, 0..FLOWS + 2), 1u32..9000)
            .prop_map(|(class, flow, len)| Op::Enqueue { class, flow, len }),
        3 => (0..CLASSES, 1u8..8).prop_map(|(class, n)| Op::Dequeue { class, n }),
        1 => any::<u16>().prop_map(Op::Wait),
        1 => (0..CLASSES, 1u8..4).prop_map(|(class, n)| Op::DropFattest { class, n }),
        2 => (0..CLASSES, 0..FLOWS + 2, 1u32..9000)
            .prop_map(|(class, flow, len)| Op::ChargeSparse { class, flow, len }),
    ]
}

fn new_queue() -> FairQueue {
    FairQueue::new(FairQueueConfig {
        packets: PACKETS,
        flows: FLOWS,
        classes: u32::from(CLASSES),
        quantum: Q,
    })
    .unwrap()
}

/// Flows `0..bulk` backlogged with `bulk_lens` packets each, and flow `bulk` (the trickle)
/// with exactly one packet queued at a time, its lengths cycling through `trickle_lens`; with
/// `sparse`, each trickle packet is first offered to `charge_sparse` and queued only when
/// refused. Dequeues until a backlogged flow runs dry, checking after each that the trickle
/// has sent less than every backlogged flow plus one quantum plus one packet, the queue's
/// invariants, and that `sparse_charged` counts the packets sent at once. Returns the trickle
/// packets offered and how many of them were queued.
fn trickle_against_bulk(
    bulk: u32,
    bulk_lens: &[u32],
    trickle_lens: &[u32],
    sparse: bool,
) -> Result<(u64, u64), TestCaseError> {
    let mut q = new_queue();
    let c = ClassId(0);
    let t = Timestamp::from_nanos(0);
    let trickle = bulk;
    let mut id = 0;
    for &len in bulk_lens {
        for f in 0..bulk {
            q.enqueue(t, c, Some(f), id, len).unwrap();
            id += 1;
        }
    }
    let mut sent = vec![0u64; bulk as usize + 1];
    let (mut offered, mut queued) = (0u64, 0u64);
    while (0..bulk).all(|f| q.flow_packets(f) > 0) {
        if q.flow_packets(trickle) == 0 {
            let len = trickle_lens[offered as usize % trickle_lens.len()];
            offered += 1;
            if sparse && q.charge_sparse(c, trickle, len) {
                sent[trickle as usize] += u64::from(len);
            } else {
                queued += 1;
                q.enqueue(t, c, Some(trickle), id, len).unwrap();
                id = (id + 1) % PACKETS;
                while q.contains(id) {
                    id = (id + 1) % PACKETS;
                }
            }
        }
        let d = q.dequeue(t, c).unwrap();
        sent[d.flow as usize] += u64::from(d.len);
        for f in 0..bulk as usize {
            prop_assert!(
                sent[trickle as usize] < sent[f] + 2 * u64::from(Q),
                "trickle {} vs flow {f} {}: {sent:?}",
                sent[trickle as usize],
                sent[f]
            );
        }
        q.invariants();
    }
    prop_assert_eq!(q.counters().sparse_charged, offered - queued);
    Ok((offered, queued))
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
        let (mut enqueued, mut dequeued, mut dropped, mut no_state) = (0u64, 0u64, 0u64, 0u64);
        let mut charged = 0u64;
        for op in ops {
            match op {
                Op::Enqueue { class, flow, len } => {
                    let Some(id) = free.pop() else { continue };
                    let got = q.enqueue(Timestamp::from_nanos(now), ClassId(u32::from(class)), flow, id, len)
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
                        let got = q.dequeue(Timestamp::from_nanos(now), ClassId(u32::from(class)));
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
                Op::ChargeSparse { class, flow, len } => {
                    let got = q.charge_sparse(ClassId(u32::from(class)), flow, len);
                    prop_assert_eq!(got, r.charge_sparse(class, flow, len));
                    if got {
                        prop_assert_eq!(q.flow_packets(flow), 0);
                        charged += 1;
                    }
                }
                Op::Wait(ns) => now += u64::from(ns),
                Op::DropFattest { class, n } => {
                    for _ in 0..n {
                        let got = q.fattest_flow(ClassId(u32::from(class)));
                        prop_assert_eq!(got, r.fattest(class));
                        let Some(f) = got else { break };
                        let d = q.drop_head(Timestamp::from_nanos(now), f).unwrap();
                        prop_assert_eq!(Some(d.id), r.drop_head(f));
                        prop_assert!(in_queue.remove(&d.id));
                        prop_assert_eq!(order.get_mut(&f).and_then(VecDeque::pop_front), Some(d.id));
                        free.push(d.id);
                        dropped += 1;
                    }
                }
            }
            q.invariants();
        }
        let c = q.counters();
        prop_assert_eq!((c.enqueued, c.dequeued, c.dropped), (enqueued, dequeued, dropped));
        prop_assert_eq!(c.sparse_charged, charged);
        prop_assert_eq!(q.len(), in_queue.len() as u64);
        prop_assert_eq!(c.overflowed, r.overflowed);
        prop_assert!(c.overflowed >= no_state);
        prop_assert_eq!(c.overflowed - c.class_conflicts, no_state);
        // Drain everything: nothing lost.
        for class in 0..CLASSES {
            while let Some(d) = q.dequeue(Timestamp::from_nanos(now), ClassId(u32::from(class))) {
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// A flow that always has exactly one packet queued (it sends the next one as soon as the
    /// last has left, so it goes idle after each) against backlogged flows: at every moment it
    /// has sent less than any backlogged flow plus one quantum plus one packet. A flow that took
    /// a fresh quantum each time it came back would not.
    #[test]
    fn a_flow_sending_one_packet_at_a_time_gets_no_more_than_its_share(
        bulk in 1u32..6,
        bulk_lens in prop::collection::vec(64u32..=Q, 40),
        trickle_lens in prop::collection::vec(64u32..=Q, 1..40),
    ) {
        let (offered, _) = trickle_against_bulk(bulk, &bulk_lens, &trickle_lens, false)?;
        prop_assert!(offered > 1);
    }

    /// The same trickle, but each of its packets is first offered to `charge_sparse` (sent at
    /// once when its flow has credit left in the round) and queued only when refused: it still
    /// never gets ahead of a backlogged flow by more than one quantum plus one packet.
    #[test]
    fn a_flow_charged_as_sparse_gets_no_more_than_its_share(
        bulk in 1u32..6,
        bulk_lens in prop::collection::vec(64u32..=Q, 40),
        trickle_lens in prop::collection::vec(64u32..=Q, 1..40),
    ) {
        let (offered, _) = trickle_against_bulk(bulk, &bulk_lens, &trickle_lens, true)?;
        prop_assert!(offered > 1);
    }

    /// `bulk` backlogged flows of full-quantum packets (a round is one packet of each) and a
    /// sparse flow sending a packet of at most a quarter quantum every `gap` dequeues, at least
    /// half a round apart: it uses at most three quarters of its quantum a round, so each of its
    /// packets leaves at the very next dequeue, from the new list, ahead of every backlogged
    /// flow (once the backlogged flows have left the new list after their first quantum).
    #[test]
    fn a_sparse_flow_below_its_share_waits_for_no_backlogged_flow(
        bulk in 2u32..10,
        extra_gap in 0u32..4,
        lens in prop::collection::vec(64u32..=Q / 4, 1..20),
    ) {
        let mut q = new_queue();
        let c = ClassId(2);
        let t = Timestamp::from_nanos(0);
        let sparse = bulk;
        let gap = bulk / 2 + 1 + extra_gap;
        let mut id = 0;
        for _ in 0..20 {
            for f in 0..bulk {
                q.enqueue(t, c, Some(f), id, Q).unwrap();
                id += 1;
            }
        }
        let mut checked = 0;
        for n in 0..(10 * bulk) {
            let mut sent_sparse = None;
            if n >= 2 * bulk && n % gap == 0 {
                prop_assert_eq!(q.flow_packets(sparse), 0);
                let len = lens[n as usize % lens.len()];
                let placed = q.enqueue(t, c, Some(sparse), id, len).unwrap();
                prop_assert!(placed.new_flow, "{placed:?}");
                sent_sparse = Some(id);
                id += 1;
            }
            let d = q.dequeue(t, c).unwrap();
            if let Some(want) = sent_sparse {
                prop_assert_eq!(d.id, want);
                prop_assert!(d.from_new);
                checked += 1;
            }
        }
        prop_assert!(checked >= 2);
        q.invariants();
    }
}
