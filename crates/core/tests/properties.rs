//! Property tests of every queue against a plain reference model (CONTRIBUTING.md §13).
//!
//! The reference is a stable sort: each accepted packet gets a release key and a sequence number,
//! and at every poll the reference releases, in (key, sequence) order, every packet whose key is
//! due. For the timing wheels the key is the packet's slot (its EDT rounded down to the
//! granularity, moved up to the front when past due, down to the last slot when clamped); for the
//! heap it is the EDT itself. Beyond exact agreement where the order is defined, every structure is
//! checked for: nothing lost or duplicated; nothing released before its EDT rounded down to the
//! granularity; when polled at every slot, nothing released more than one granularity late; per
//! flow order kept when a flow's EDTs do not decrease; every counter equal to what the trace says
//! it counts (placements of accepted packets only, rejections by reason), and a pool exhausted
//! only when the queue holds at least the packets its configuration promises to fit. The MLTW is
//! also driven with destination rates (zero included) changing between calls.

use metronome_core::binary_heap::BinaryHeapQueue;
use metronome_core::fq_tree::FqTree;
use metronome_core::mltw::{Mltw, MltwConfig};
use metronome_core::token_bucket_rr::{ClassConfig, TokenBucketRr};
use metronome_core::{
    ClassId, Duration, EdtQueue, FlowId, HorizonPolicy, PacketRef, Rate, RejectReason, Rejected,
    Timestamp, TimingWheel, TimingWheelConfig, TimingWheelList,
};
use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap};

/// Poll period and wheel granularity: 2 µs.
const G: u64 = 2_000;
/// Wheel horizon in slots.
const SLOTS: u64 = 64;
/// Start of time: not slot-aligned on purpose.
const T0: u64 = 1_000_000_777;

/// One packet to enqueue in a step: its flow and its EDT relative to `now`.
#[derive(Clone, Debug)]
struct Arrival {
    flow: u8,
    offset: i64,
}

/// Record of one accepted packet.
#[derive(Clone, Copy, Debug)]
struct Rec {
    edt: u64,
    enq_now: u64,
    flow: u32,
}

/// What a run produced.
#[derive(Debug, Default)]
struct Trace {
    accepted: BTreeMap<u32, Rec>,
    rejected: Vec<(u32, RejectReason)>,
    /// Per rejection: packets the queue held at that moment.
    len_at_rejection: Vec<usize>,
    /// Per poll: (now, ids released in order).
    polls: Vec<(u64, Vec<u32>)>,
    /// Calls to `dequeue` that returned at least one packet.
    nonempty_dequeues: u64,
}

impl Trace {
    fn releases(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.polls
            .iter()
            .flat_map(|(now, ids)| ids.iter().map(move |&id| (*now, id)))
    }
}

fn arrivals(max_offset: i64) -> impl Strategy<Value = Vec<Vec<Arrival>>> {
    let arrival =
        (0u8..6, -20_000i64..max_offset).prop_map(|(flow, offset)| Arrival { flow, offset });
    prop::collection::vec(prop::collection::vec(arrival, 0..6), 1..60)
}

/// Dequeues everything due at `now` in batches of 3 (to exercise partial dequeues) and records
/// the poll in `t`; checks that `next_due` agreed with what the dequeue found and that nothing
/// due is left.
fn poll_once<Q: EdtQueue>(q: &mut Q, now: u64, t: &mut Trace) {
    let mut out = [PacketRef::default(); 3];
    let mut ids = Vec::new();
    let due = check_next_due(q, now);
    loop {
        let n = q.dequeue(Timestamp::from_nanos(now), &mut out);
        ids.extend(out[..n].iter().map(|p| p.id));
        t.nonempty_dequeues += (n > 0) as u64;
        if n < out.len() {
            break;
        }
    }
    assert_eq!(
        !ids.is_empty(),
        due,
        "{}: next_due disagrees with dequeue at {now}",
        q.name()
    );
    assert!(
        !check_next_due(q, now),
        "{}: due packets left after a drain",
        q.name()
    );
    t.polls.push((now, ids));
}

/// Drives `q`: each step advances `now` by `poll`, dequeues everything due (in batches of 3, to
/// exercise partial dequeues), then enqueues the step's arrivals. Afterwards it keeps polling until
/// the queue is empty.
fn drive<Q: EdtQueue>(q: &mut Q, steps: &[Vec<Arrival>], poll: u64, monotone: bool) -> Trace {
    let mut t = Trace::default();
    let mut now = T0;
    let mut id = 0u32;
    let mut last_edt: HashMap<u8, u64> = HashMap::new();
    for step in steps {
        now += poll;
        poll_once(q, now, &mut t);
        for a in step {
            let mut edt = (now as i64 + a.offset).max(0) as u64;
            if monotone {
                let l = last_edt.entry(a.flow).or_insert(0);
                edt = edt.max(*l);
                *l = edt;
            }
            let pkt = PacketRef::new(id, FlowId(a.flow as u32), ClassId(a.flow as u32), 1500);
            match q.enqueue(Timestamp::from_nanos(now), Timestamp::from_nanos(edt), pkt) {
                Ok(()) => {
                    t.accepted.insert(
                        id,
                        Rec {
                            edt,
                            enq_now: now,
                            flow: a.flow as u32,
                        },
                    );
                }
                Err(e) => {
                    assert_eq!(e.pkt, pkt, "a rejected packet comes back untouched");
                    t.rejected.push((id, e.reason));
                    t.len_at_rejection.push(q.len());
                }
            }
            id += 1;
        }
    }
    let mut guard = 0;
    while !q.is_empty() && guard < 1_000_000 {
        now += poll;
        poll_once(q, now, &mut t);
        guard += 1;
    }
    t
}

/// `next_due` is the earliest instant at which `dequeue` returns a packet: a dequeue at `now`
/// returns one exactly when `next_due` is at or before `now` (checked without dequeuing, on a
/// queue the caller is about to poll or has just drained), and it is `None` only when empty.
fn check_next_due<Q: EdtQueue>(q: &Q, now: u64) -> bool {
    let due = q.next_due();
    assert_eq!(
        due.is_none(),
        q.is_empty(),
        "next_due is None exactly when empty"
    );
    due.is_some_and(|d| d.as_nanos() <= now)
}

/// Nothing lost, nothing duplicated.
fn check_conservation(t: &Trace) {
    let mut seen: Vec<u32> = t.releases().map(|(_, id)| id).collect();
    seen.sort_unstable();
    let before = seen.len();
    seen.dedup();
    assert_eq!(before, seen.len(), "a packet was released twice");
    let accepted: Vec<u32> = t.accepted.keys().copied().collect();
    assert_eq!(seen, accepted, "released set differs from accepted set");
}

/// Nothing released before its EDT rounded down to `g(flow)`, nor more than `late` after
/// max(EDT, enqueue time).
fn check_timing(t: &Trace, g: impl Fn(u32) -> u64, late: u64) {
    for (now, id) in t.releases() {
        let r = t.accepted[&id];
        let gran = g(r.flow);
        assert!(
            now >= r.edt / gran * gran,
            "id {id} released at {now}, EDT {}",
            r.edt
        );
        let due = r.edt.max(r.enq_now);
        assert!(
            now <= due + late,
            "id {id} released at {now}, due {due}: too late"
        );
    }
}

/// Per flow, packets leave in enqueue order.
fn check_flow_order(t: &Trace) {
    let mut last: HashMap<u32, u32> = HashMap::new();
    for (_, id) in t.releases() {
        let f = t.accepted[&id].flow;
        if let Some(prev) = last.insert(f, id) {
            assert!(prev < id, "flow {f}: {id} left after {prev}");
        }
    }
}

/// Every counter against the trace: `past_due` and `clamped_beyond_horizon` count accepted
/// packets only (`is_past_due` and `is_clamped` say which, from the queue's docs), each rejection
/// counts under its reason, and a [`RejectReason::PoolExhausted`] happens only when the queue
/// holds at least the `pool_packets` its configuration promises to fit.
fn check_counters(
    q: &impl EdtQueue,
    t: &Trace,
    is_past_due: impl Fn(u32, &Rec) -> bool,
    is_clamped: impl Fn(u32, &Rec) -> bool,
    pool_packets: usize,
) {
    let c = q.counters();
    let released = t.releases().count() as u64;
    let reasons = |r: RejectReason| t.rejected.iter().filter(|x| x.1 == r).count() as u64;
    assert_eq!(c.enqueued, t.accepted.len() as u64, "enqueued");
    assert_eq!(c.dequeued, released, "dequeued");
    assert_eq!(
        c.nonempty_dequeues, t.nonempty_dequeues,
        "nonempty_dequeues"
    );
    let count =
        |f: &dyn Fn(u32, &Rec) -> bool| t.accepted.iter().filter(|(&id, r)| f(id, r)).count();
    let (past_due, clamped) = (count(&is_past_due) as u64, count(&is_clamped) as u64);
    assert_eq!(c.past_due, past_due, "past_due");
    assert_eq!(c.clamped_beyond_horizon, clamped, "clamped_beyond_horizon");
    assert_eq!(
        c.rejected_beyond_horizon,
        reasons(RejectReason::BeyondHorizon)
    );
    assert_eq!(
        c.rejected_pool_exhausted,
        reasons(RejectReason::PoolExhausted)
    );
    assert_eq!(
        c.rejected_unknown_class,
        reasons(RejectReason::UnknownClass)
    );
    assert_eq!(c.rejected_full, reasons(RejectReason::Full));
    for (&(id, reason), &len) in t.rejected.iter().zip(&t.len_at_rejection) {
        if reason == RejectReason::PoolExhausted {
            assert!(
                len >= pool_packets,
                "id {id} handed back as PoolExhausted with {len} < {pool_packets} packets queued"
            );
        }
    }
}

/// The wheel's front at enqueue is the slot of `now` (the driver drains everything due first).
fn wheel_past_due(_: u32, r: &Rec) -> bool {
    r.edt / G < r.enq_now / G
}

fn wheel_beyond_horizon(_: u32, r: &Rec) -> bool {
    r.edt / G >= r.enq_now / G + SLOTS
}

/// The reference model: a stable sort by key, released when the key is due.
fn reference(
    t: &Trace,
    key: impl Fn(u32, &Rec) -> u64,
    due: impl Fn(u64, u64) -> bool,
) -> Vec<(u64, Vec<u32>)> {
    let mut pending: Vec<(u64, u32)> = t.accepted.iter().map(|(&id, r)| (key(id, r), id)).collect();
    pending.sort();
    t.polls
        .iter()
        .map(|(now, _)| {
            let mut ids = Vec::new();
            pending.retain(|&(k, id)| {
                // Only packets enqueued before this poll can leave at it.
                if t.accepted[&id].enq_now < *now && due(k, *now) {
                    ids.push(id);
                    false
                } else {
                    true
                }
            });
            (*now, ids)
        })
        .collect()
}

fn wheel_config(policy: HorizonPolicy) -> TimingWheelConfig {
    TimingWheelConfig {
        granularity: Duration::from_nanos(G),
        horizon: Duration::from_nanos(G * SLOTS),
        horizon_policy: policy,
        pool_packets: 1 << 12,
    }
}

/// The wheel's key: the slot, moved up to the front (the slot of `now` at enqueue, since the
/// driver polls just before enqueuing) and clamped to the last slot.
fn wheel_key(r: &Rec) -> u64 {
    let front = r.enq_now / G;
    (r.edt / G).max(front).min(front + SLOTS - 1)
}

fn check_wheel<Q: EdtQueue>(mut q: Q, policy: HorizonPolicy, steps: &[Vec<Arrival>]) {
    let t = drive(&mut q, steps, G, false);
    check_conservation(&t);
    check_counters(&q, &t, wheel_past_due, wheel_beyond_horizon, usize::MAX);
    for &(id, reason) in &t.rejected {
        assert_eq!(policy, HorizonPolicy::Reject, "clamp never rejects");
        assert_eq!(reason, RejectReason::BeyondHorizon, "id {id}");
    }
    let want = reference(&t, |_, r| wheel_key(r), |k, now| k <= now / G);
    assert_eq!(t.polls, want, "{} differs from the reference", q.name());
    // Timing: clamped packets are late by design; check the others.
    let in_horizon = Trace {
        accepted: t
            .accepted
            .iter()
            .filter(|(_, r)| r.edt / G < r.enq_now / G + SLOTS)
            .map(|(&id, r)| (id, *r))
            .collect(),
        rejected: vec![],
        len_at_rejection: vec![],
        nonempty_dequeues: 0,
        polls: t
            .polls
            .iter()
            .map(|(now, ids)| {
                let kept = ids
                    .iter()
                    .copied()
                    .filter(|id| {
                        let r = t.accepted[id];
                        r.edt / G < r.enq_now / G + SLOTS
                    })
                    .collect();
                (*now, kept)
            })
            .collect(),
    };
    check_timing(&in_horizon, |_| G, G);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn timing_wheel_matches_reference_clamp(steps in arrivals(200_000)) {
        check_wheel(TimingWheel::new(wheel_config(HorizonPolicy::Clamp)), HorizonPolicy::Clamp, &steps);
    }

    #[test]
    fn timing_wheel_matches_reference_reject(steps in arrivals(200_000)) {
        let mut q = TimingWheel::new(wheel_config(HorizonPolicy::Reject));
        let t = drive(&mut q, &steps, G, false);
        check_conservation(&t);
        // Rejected exactly when the slot lies beyond the horizon from the front.
        let mut id = 0u32;
        let mut now = T0;
        for step in &steps {
            now += G;
            for a in step {
                let edt = (now as i64 + a.offset).max(0) as u64;
                let beyond = edt / G >= now / G + SLOTS;
                let rejected = t.rejected.iter().any(|&(r, _)| r == id);
                prop_assert_eq!(beyond, rejected, "id {} edt {} now {}", id, edt, now);
                id += 1;
            }
        }
        let want = reference(&t, |_, r| wheel_key(r), |k, now| k <= now / G);
        prop_assert_eq!(&t.polls, &want);
        check_timing(&t, |_| G, G);
        // Beyond the horizon is rejected, not clamped.
        check_counters(&q, &t, wheel_past_due, |_, _| false, usize::MAX);
    }

    #[test]
    fn timing_wheel_list_matches_reference(steps in arrivals(200_000)) {
        check_wheel(TimingWheelList::new(wheel_config(HorizonPolicy::Clamp)), HorizonPolicy::Clamp, &steps);
    }

    #[test]
    fn binary_heap_matches_reference(steps in arrivals(200_000)) {
        let mut q = BinaryHeapQueue::new();
        let t = drive(&mut q, &steps, G, false);
        check_conservation(&t);
        prop_assert!(t.rejected.is_empty());
        let want = reference(&t, |_, r| r.edt, |k, now| k <= now);
        prop_assert_eq!(&t.polls, &want);
        check_timing(&t, |_| 1, G);
    }

    #[test]
    fn fq_tree_releases_what_is_due_in_flow_order(steps in arrivals(200_000)) {
        let mut q = FqTree::new();
        let t = drive(&mut q, &steps, G, true);
        check_conservation(&t);
        prop_assert!(t.rejected.is_empty());
        check_flow_order(&t);
        // With non-decreasing EDTs per flow, each poll releases exactly the due set.
        let want = reference(&t, |_, r| r.edt, |k, now| k <= now);
        for ((now, got), (_, exp)) in t.polls.iter().zip(&want) {
            let mut a = got.clone();
            a.sort_unstable();
            let mut b = exp.clone();
            b.sort_unstable();
            prop_assert_eq!(a, b, "at {}", now);
        }
        check_timing(&t, |_| 1, G);
    }

    #[test]
    fn every_edt_structure_keeps_flow_order(steps in arrivals(100_000)) {
        let mut q1 = TimingWheel::new(wheel_config(HorizonPolicy::Clamp));
        check_flow_order(&drive(&mut q1, &steps, G, true));
        let mut q2 = TimingWheelList::new(wheel_config(HorizonPolicy::Clamp));
        check_flow_order(&drive(&mut q2, &steps, G, true));
        let mut q3 = BinaryHeapQueue::new();
        check_flow_order(&drive(&mut q3, &steps, G, true));
    }

    #[test]
    fn pool_exhaustion_hands_back_and_loses_nothing(steps in arrivals(200_000)) {
        let mut q = TimingWheel::new(TimingWheelConfig { pool_packets: 2, ..wheel_config(HorizonPolicy::Clamp) });
        let t = drive(&mut q, &steps, G, false);
        check_conservation(&t);
        for &(_, reason) in &t.rejected {
            prop_assert_eq!(reason, RejectReason::PoolExhausted);
        }
        // The accepted packets still follow the reference; the counters count only them.
        let want = reference(&t, |_, r| wheel_key(r), |k, now| k <= now / G);
        prop_assert_eq!(&t.polls, &want);
        check_counters(&q, &t, wheel_past_due, wheel_beyond_horizon, 2);
    }
}

/// MLTW with known per-flow rates: flow f is paced at `rate_of(f)`, so its level is fixed.
fn mltw_rate(flow: u32) -> Rate {
    Rate::mbps(100 * (1 << flow))
}

fn mltw_with_rates() -> Mltw {
    // Rates set explicitly and no estimation, so each flow's level stays fixed.
    let mut q = Mltw::new(MltwConfig {
        pool_packets: 1 << 12,
        estimate_every: 0,
        ..Default::default()
    });
    for f in 0..6 {
        q.set_rate(FlowId(f), mltw_rate(f));
    }
    q
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn mltw_conserves_and_is_never_early(steps in arrivals(400_000)) {
        let mut q = mltw_with_rates();
        let g: Vec<u64> = (0..6).map(|f| q.level_granularity_for(FlowId(f)).as_nanos()).collect();
        let t = drive(&mut q, &steps, G, false);
        check_conservation(&t);
        prop_assert!(t.rejected.is_empty());
        // The front at enqueue is `now` (the driver drains everything due first); the top level's
        // ring reaches far beyond these EDTs, so nothing is clamped.
        check_counters(&q, &t, |_, r| r.edt < r.enq_now, |_, _| false, usize::MAX);
        // A packet may ride in a coarser slot that starts at the same time (inter-flow
        // accumulation) or, far ahead, descend to a coarser level: it is never released before
        // its EDT rounded down to the granularity it was placed with, which is at least its
        // flow's level. Here EDTs stay within each level's ring, so that is the flow's level.
        check_timing(&t, |f| g[f as usize], G);
    }

    #[test]
    fn mltw_keeps_flow_order_when_levels_are_fixed(steps in arrivals(400_000)) {
        let mut q = mltw_with_rates();
        let t = drive(&mut q, &steps, G, true);
        check_conservation(&t);
        check_flow_order(&t);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]

    #[test]
    fn token_bucket_rr_conserves_conforms_and_keeps_class_order(steps in arrivals(1)) {
        // Six classes; EDTs are ignored by this architecture.
        let rates: Vec<Rate> = (0..6).map(|c| Rate::mbps(200 * (c + 1))).collect();
        let burst = 3_000u32;
        let mut q = TokenBucketRr::new(rates.iter().map(|&rate| ClassConfig { rate, burst }).collect());
        let t = drive(&mut q, &steps, G, false);
        check_conservation(&t);
        check_flow_order(&t);
        // Conformance: by any poll, a class has released at most burst + rate x elapsed bytes.
        let mut bytes = [0u64; 6];
        for (now, ids) in &t.polls {
            for id in ids {
                bytes[t.accepted[id].flow as usize] += 1500;
            }
            for c in 0..6 {
                let allowed = burst as u64 + rates[c].bytes_in(Duration::from_nanos(now - T0));
                prop_assert!(bytes[c] <= allowed, "class {} sent {} > {}", c, bytes[c], allowed);
            }
        }
    }
}

#[test]
fn token_bucket_rr_rejects_unknown_classes() {
    let mut q = TokenBucketRr::new(vec![ClassConfig {
        rate: Rate::gbps(1),
        burst: 1500,
    }]);
    let pkt = PacketRef::new(1, FlowId(0), ClassId(9), 1500);
    let e = q
        .enqueue(Timestamp::from_nanos(0), Timestamp::from_nanos(0), pkt)
        .unwrap_err();
    assert_eq!(e.reason, RejectReason::UnknownClass);
    assert_eq!(e.pkt, pkt);
}

/// Rates an MLTW destination is set to between steps: 0 (paused) up to 40 Gbit/s.
const MLTW_RATES: [Rate; 6] = [
    Rate::from_bps(0),
    Rate::kbps(10),
    Rate::mbps(100),
    Rate::gbps(1),
    Rate::gbps(10),
    Rate::gbps(40),
];

/// One step of the MLTW under rate changes: maybe set a flow's rate (flow, index into
/// [`MLTW_RATES`]) before the step's poll, then the arrivals.
type RateStep = (Option<(u8, usize)>, Vec<Arrival>);

fn rate_steps() -> impl Strategy<Value = Vec<RateStep>> {
    let arrival = (0u8..6, -20_000i64..400_000).prop_map(|(flow, offset)| Arrival { flow, offset });
    let set = prop::option::of((0u8..6, 0..MLTW_RATES.len()));
    prop::collection::vec((set, prop::collection::vec(arrival, 0..6)), 1..60)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Rates (zero included) change between calls. Every packet waits in the slot that
    /// [`Mltw::placement`] names, `floor(max(edt, front) / g) × g` at a level no finer than its
    /// bucket's, and leaves at the first poll at or after that start; packets leave earliest
    /// start first and FIFO within a start; a destination at zero rate rounds at level 0.
    #[test]
    fn mltw_under_rate_changes_releases_each_packet_at_its_placement(
        steps in rate_steps(),
        pool_packets in prop_oneof![Just(1usize << 12), 1usize..8],
        short in any::<bool>(),
        reject in any::<bool>(),
    ) {
        let policy = if reject { HorizonPolicy::Reject } else { HorizonPolicy::Clamp };
        // Short: 9 levels of 64 slots from 16 ns, a 262 µs horizon that many EDTs pass.
        let (min_granularity_log2, levels) = if short { (4, 9) } else { (0, 64) };
        let mut q = Mltw::new(MltwConfig {
            pool_packets,
            estimate_every: 0,
            slots_per_level: 64,
            min_granularity_log2,
            levels,
            horizon_policy: policy,
            ..Default::default()
        });
        let mut t = Trace::default();
        let mut start: HashMap<u32, u64> = HashMap::new();
        let mut clamped: HashMap<u32, bool> = HashMap::new();
        let mut now = T0;
        let mut id = 0u32;
        for (set, arrivals) in &steps {
            if let Some((flow, r)) = *set {
                let flow = FlowId(flow as u32);
                q.set_rate(flow, MLTW_RATES[r]);
                prop_assert_eq!(q.estimated_rate(flow), MLTW_RATES[r]);
                if MLTW_RATES[r].bps() == 0 {
                    prop_assert_eq!(q.level_for(flow), 0, "a paused destination rounds finest");
                }
            }
            now += G;
            poll_once(&mut q, now, &mut t);
            for a in arrivals {
                let edt = (now as i64 + a.offset).max(0) as u64;
                let flow = FlowId(a.flow as u32);
                let nowt = Timestamp::from_nanos(now);
                let edtt = Timestamp::from_nanos(edt);
                let pl = q.placement(nowt, flow, edtt);
                // Beyond the top level's ring from the front, which is `now` here (everything
                // due left at the poll).
                let top = q.granularity(levels - 1).as_nanos();
                let beyond = edt.max(now) / top - now / top >= 64;
                let pkt = PacketRef::new(id, flow, ClassId(0), 1500);
                let held = q.len();
                let got = q.enqueue(nowt, edtt, pkt);
                match pl {
                    Err(reason) => {
                        prop_assert!(beyond && reject, "{:?} within the horizon", reason);
                        prop_assert_eq!(reason, RejectReason::BeyondHorizon);
                        prop_assert_eq!(got, Err(Rejected { pkt, reason }));
                    }
                    Ok(pl) => {
                        prop_assert!(!(beyond && reject));
                        prop_assert_eq!(pl.clamped, beyond);
                        prop_assert!(pl.rounding_level >= q.level_for(flow));
                        prop_assert_eq!(pl.past_due, edt < now);
                        let g = pl.granularity.as_nanos();
                        if !pl.clamped {
                            prop_assert_eq!(pl.slot_start.as_nanos(), edt.max(now) / g * g);
                        }
                    }
                }
                match (got, pl) {
                    (Ok(()), Ok(pl)) => {
                        t.accepted.insert(id, Rec { edt, enq_now: now, flow: a.flow as u32 });
                        start.insert(id, pl.slot_start.as_nanos());
                        clamped.insert(id, pl.clamped);
                        prop_assert!(q.next_due().is_some_and(|d| d <= pl.slot_start));
                    }
                    (Ok(()), Err(_)) => prop_assert!(false, "accepted what placement rejects"),
                    (Err(e), _) => {
                        prop_assert_eq!(e.pkt, pkt);
                        if e.reason == RejectReason::PoolExhausted {
                            prop_assert!(held >= pool_packets, "{} < {} queued", held, pool_packets);
                        }
                        t.rejected.push((id, e.reason));
                        t.len_at_rejection.push(held);
                    }
                }
                id += 1;
            }
        }
        while !q.is_empty() {
            now += G;
            poll_once(&mut q, now, &mut t);
            prop_assert!(now < T0 + 1_000_000_000, "the MLTW never drained");
        }
        check_conservation(&t);
        check_counters(&q, &t, |_, r| r.edt < r.enq_now, |id, _| clamped[&id], pool_packets);
        let want = reference(&t, |id, _| start[&id], |k, now| k <= now);
        prop_assert_eq!(&t.polls, &want);
    }
}

/// Rates a token-bucket class is set to between steps: 0 (paused), 200 Mbit/s, 1 Gbit/s.
const BUCKET_RATES: [Rate; 3] = [Rate::from_bps(0), Rate::mbps(200), Rate::gbps(1)];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]

    /// Rates (zero included) change between calls. By every poll a class has released at most its
    /// burst plus what its rates allowed over time, nothing while its rate is zero, everything
    /// eventually once its rate is above zero, in FIFO order; `next_due` agrees with `dequeue`.
    #[test]
    fn token_bucket_rr_under_rate_changes_conforms_and_pauses_at_zero(
        steps in prop::collection::vec(
            (prop::option::of((0u8..3, 0..BUCKET_RATES.len())), prop::collection::vec(0u8..3, 0..4)),
            1..80,
        ),
    ) {
        let burst = 3_000u32;
        let mut rates = [Rate::mbps(200); 3];
        let mut q = TokenBucketRr::new(rates.iter().map(|&rate| ClassConfig { rate, burst }).collect());
        let mut now = T0;
        let mut id = 0u32;
        // Per class: bytes released, bytes allowed (the burst plus rate x time, in bit-ns), FIFO
        // of ids.
        let mut sent = [0u64; 3];
        let mut allowed_bit_ns = [burst as u128 * 8 * 1_000_000_000; 3];
        let mut fifo: Vec<std::collections::VecDeque<u32>> = vec![Default::default(); 3];
        let mut out = [PacketRef::default(); 2];
        let mut poll = |q: &mut TokenBucketRr, now: u64, rates: &[Rate; 3], sent: &mut [u64; 3],
                        fifo: &mut Vec<std::collections::VecDeque<u32>>| -> Result<(), TestCaseError> {
            let due = check_next_due(q, now);
            let mut any = false;
            loop {
                let n = q.dequeue(Timestamp::from_nanos(now), &mut out);
                for p in &out[..n] {
                    let c = p.class.0 as usize;
                    prop_assert!(rates[c].bps() > 0, "class {} released at zero rate", c);
                    prop_assert_eq!(fifo[c].pop_front(), Some(p.id));
                    sent[c] += u64::from(p.len);
                }
                any |= n > 0;
                if n < out.len() {
                    break;
                }
            }
            prop_assert_eq!(any, due, "next_due disagrees with dequeue at {}", now);
            prop_assert!(!check_next_due(q, now));
            Ok(())
        };
        for (set, arrivals) in &steps {
            let dt = G * 3;
            now += dt;
            for c in 0..3 {
                allowed_bit_ns[c] += u128::from(rates[c].bps()) * u128::from(dt);
            }
            poll(&mut q, now, &rates, &mut sent, &mut fifo)?;
            for c in 0..3 {
                prop_assert!(
                    u128::from(sent[c]) * 8 * 1_000_000_000 <= allowed_bit_ns[c],
                    "class {} sent {} B over its rates", c, sent[c]
                );
            }
            // Set right after a poll at `now`, so the old rate is credited up to `now`.
            if let Some((c, r)) = *set {
                rates[c as usize] = BUCKET_RATES[r];
                q.set_rate(ClassId(c as u32), BUCKET_RATES[r]).unwrap();
            }
            for &c in arrivals {
                let pkt = PacketRef::new(id, FlowId(c as u32), ClassId(c as u32), 1500);
                q.enqueue(Timestamp::from_nanos(now), Timestamp::from_nanos(now), pkt).unwrap();
                fifo[c as usize].push_back(id);
                id += 1;
            }
        }
        // Resume every class: everything leaves.
        for (c, rate) in rates.iter_mut().enumerate() {
            *rate = Rate::gbps(1);
            q.set_rate(ClassId(c as u32), *rate).unwrap();
        }
        let mut guard = 0;
        while !q.is_empty() {
            now += G;
            poll(&mut q, now, &rates, &mut sent, &mut fifo)?;
            guard += 1;
            prop_assert!(guard < 100_000, "never drained");
        }
        prop_assert!(fifo.iter().all(|f| f.is_empty()));
    }
}
