//! Property tests of the backpressure library (CONTRIBUTING.md §13): the paused-flows queue
//! against a plain reference model, zD over a small pfifo driven by a closed-loop source model,
//! and Deferred Completions with sources that obey `can_send`.

use metronome_core::completions::{Completion, CompletionMode, Deferred};
use metronome_core::paused_flows::{Discipline, PauseError, PausedFlows};
use metronome_core::zd::{Overflow, Pfifo, ScheduledBuffer, Zd, ZdConfig, ZdVerdict};
use metronome_core::{
    ClassId, Duration, FlowId, HorizonPolicy, PacketRef, RejectReason, Timestamp, TimingWheel,
    TimingWheelConfig,
};
use proptest::prelude::*;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, HashSet};

/// One operation on a paused-flows queue.
#[derive(Clone, Debug)]
enum Op {
    Pause(u32, u64),
    Pop,
    Remove(u32),
}

fn ops(flows: u32, keys: u64) -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            4 => (0..flows, 0..keys).prop_map(|(f, k)| Op::Pause(f, k)),
            3 => Just(Op::Pop),
            1 => (0..flows).prop_map(Op::Remove),
        ],
        0..400,
    )
}

/// Flows the paused-flows tests use.
const FLOWS: u32 = 24;
/// EDT base: far from zero, so the window moves around real slot numbers.
const BASE: u64 = 1 << 40;

/// Runs `ops` against `q` and a reference model keyed by `(key, sequence)`; `key_of` maps an op's
/// key to the model's key (constant for FIFO, the EDT for EDT order). Then drains both, checking
/// that every flow still paused is resumed exactly once.
fn check_against_model(
    q: &mut PausedFlows,
    ops: &[Op],
    key_of: impl Fn(u64) -> u64,
) -> Result<(), TestCaseError> {
    let mut model: BTreeMap<(u64, u64), u32> = BTreeMap::new();
    let mut where_: HashMap<u32, (u64, u64)> = HashMap::new();
    let mut seq = 0u64;
    let mut resumed = 0u64;
    for op in ops {
        match *op {
            Op::Pause(f, k) => {
                let r = q.pause(FlowId(f), Timestamp::from_nanos(BASE + k));
                if let Entry::Vacant(slot) = where_.entry(f) {
                    prop_assert_eq!(r, Ok(()));
                    let key = (key_of(k), seq);
                    seq += 1;
                    model.insert(key, f);
                    slot.insert(key);
                } else {
                    prop_assert_eq!(r, Err(PauseError::AlreadyPaused));
                }
            }
            Op::Pop => {
                let want = model.pop_first().map(|(_, f)| f);
                if let Some(f) = want {
                    where_.remove(&f);
                    resumed += 1;
                }
                prop_assert_eq!(q.pop().map(|f| f.0), want);
            }
            Op::Remove(f) => {
                let want = where_
                    .remove(&f)
                    .is_some_and(|k| model.remove(&k).is_some());
                prop_assert_eq!(q.remove(FlowId(f)), want);
            }
        }
        q.invariants();
        prop_assert_eq!(q.len(), model.len());
        for f in 0..FLOWS {
            prop_assert_eq!(q.contains(FlowId(f)), where_.contains_key(&f));
        }
    }
    // Drain: every paused flow comes out exactly once, in model order (non-decreasing key, FIFO
    // among equal keys).
    let mut last_key = 0;
    let mut seen = HashSet::new();
    while let Some(((key, _), f)) = model.pop_first() {
        prop_assert!(key >= last_key);
        last_key = key;
        prop_assert_eq!(q.pop(), Some(FlowId(f)));
        prop_assert!(seen.insert(f), "flow {} resumed twice", f);
        resumed += 1;
    }
    prop_assert_eq!(q.pop(), None);
    prop_assert_eq!(q.counters().resumed, resumed);
    Ok(())
}

proptest! {
    #[test]
    fn paused_flows_fifo_matches_a_deque(ops in ops(FLOWS, 1000)) {
        let mut q = PausedFlows::new(FLOWS as usize, Discipline::Fifo);
        check_against_model(&mut q, &ops, |_| 0)?;
    }

    /// Keys spread over less than the window: the order is exact (min key, FIFO among ties).
    #[test]
    fn paused_flows_edt_ordered_matches_a_sorted_map(ops in ops(FLOWS, 1 << 16), g in 1u64..6) {
        // Fold EDTs into 63 granularities: at most 64 distinct slots, one window.
        let ops: Vec<Op> = ops
            .into_iter()
            .map(|op| match op {
                Op::Pause(f, k) => Op::Pause(f, k % (63 * g)),
                op => op,
            })
            .collect();
        let mut q = PausedFlows::new(
            FLOWS as usize,
            Discipline::EdtOrdered { granularity: Duration::from_nanos(g), buckets: 64 },
        );
        // The model key is the slot: EDT rounded down to the granularity.
        check_against_model(&mut q, &ops, |k| (BASE + k) / g)?;
        prop_assert_eq!(q.counters().clamped_early + q.counters().clamped_late, 0);
    }

    /// Keys spread far wider than the window: clamping may reorder, but no flow is lost,
    /// duplicated or left behind.
    #[test]
    fn paused_flows_edt_ordered_wide_keys_lose_nothing(ops in ops(FLOWS, 1 << 20)) {
        let mut q = PausedFlows::new(
            FLOWS as usize,
            Discipline::EdtOrdered { granularity: Duration::from_nanos(1), buckets: 16 },
        );
        let mut queued = HashSet::new();
        for op in &ops {
            match *op {
                Op::Pause(f, k) => {
                    let ok = q.pause(FlowId(f), Timestamp::from_nanos(BASE + k)).is_ok();
                    prop_assert_eq!(ok, queued.insert(f));
                }
                Op::Pop => {
                    let f = q.pop();
                    prop_assert_eq!(f.is_some(), !queued.is_empty());
                    if let Some(f) = f {
                        prop_assert!(queued.remove(&f.0));
                    }
                }
                Op::Remove(f) => prop_assert_eq!(q.remove(FlowId(f)), queued.remove(&f)),
            }
            q.invariants();
        }
        while let Some(f) = q.pop() {
            prop_assert!(queued.remove(&f.0), "flow {} popped twice or never paused", f.0);
        }
        prop_assert!(queued.is_empty());
    }
}

/// A source in the closed-loop model: a backlog of packets, at most one held back while paused.
#[derive(Clone, Debug, Default)]
struct Source {
    backlog: u32,
    held: Option<PacketRef>,
    paused: bool,
}

/// The zD closed-loop world: sources, the controller, and the bookkeeping the checks need.
struct World {
    zd: Zd<Pfifo>,
    sources: Vec<Source>,
    next_id: u32,
    /// Packets in the buffer per the model, by id -> flow.
    in_shaper: HashMap<u32, u32>,
    delivered: HashSet<u32>,
    offered: u64,
    out: Vec<PacketRef>,
    resumed: Vec<FlowId>,
}

impl World {
    /// Source `f` offers its held packet or the next of its backlog, unless paused or empty.
    fn offer(&mut self, f: usize) -> Result<(), TestCaseError> {
        let src = &mut self.sources[f];
        if src.paused {
            return Ok(());
        }
        let pkt = match src.held.take() {
            Some(p) => p,
            None if src.backlog > 0 => {
                src.backlog -= 1;
                self.next_id += 1;
                PacketRef::new(self.next_id, FlowId(f as u32), ClassId(0), 1500)
            }
            None => return Ok(()),
        };
        self.offered += 1;
        let now = Timestamp::ZERO;
        match self.zd.offer(now, now, pkt) {
            ZdVerdict::Enqueued => {
                self.in_shaper.insert(pkt.id, f as u32);
            }
            ZdVerdict::Paused(back) => {
                prop_assert_eq!(back, pkt);
                let src = &mut self.sources[f];
                src.held = Some(back);
                src.paused = true;
            }
            other => prop_assert!(false, "unexpected {:?}", other),
        }
        Ok(())
    }

    /// The NIC takes up to `k` packets; each resumed source offers its held packet at once.
    fn drain(&mut self, k: usize) -> Result<usize, TestCaseError> {
        self.resumed.clear();
        let n = self
            .zd
            .dequeue(Timestamp::ZERO, &mut self.out[..k], &mut self.resumed);
        for p in &self.out[..n] {
            prop_assert!(
                self.in_shaper.remove(&p.id).is_some(),
                "released twice or never queued"
            );
            prop_assert!(self.delivered.insert(p.id));
        }
        prop_assert!(self.resumed.len() <= n, "more resumes than departures");
        let resumed = std::mem::take(&mut self.resumed);
        for f in &resumed {
            let src = &mut self.sources[f.0 as usize];
            prop_assert!(src.paused, "resumed a flow that was not paused");
            prop_assert!(src.held.is_some(), "a paused source holds its packet");
            src.paused = false;
        }
        for f in &resumed {
            self.offer(f.0 as usize)?;
        }
        self.resumed = resumed;
        Ok(n)
    }

    fn check(&self, capacity: usize) -> Result<(), TestCaseError> {
        self.zd.invariants();
        prop_assert!(self.zd.buffer().len() <= capacity);
        prop_assert_eq!(self.zd.buffer().len(), self.in_shaper.len());
        let mut per_flow: HashMap<u32, u32> = HashMap::new();
        for &f in self.in_shaper.values() {
            *per_flow.entry(f).or_default() += 1;
        }
        for (&f, &n) in &per_flow {
            prop_assert!(n <= 2, "flow {} holds {} packets", f, n);
        }
        for (f, s) in self.sources.iter().enumerate() {
            prop_assert_eq!(s.paused, self.zd.is_paused(FlowId(f as u32)));
        }
        prop_assert_eq!(self.zd.counters().physical_drops, 0);
        prop_assert_eq!(self.zd.buffer().counters().physical_drops, 0);
        prop_assert_eq!(self.zd.counters().already_paused, 0);
        Ok(())
    }
}

proptest! {
    #[test]
    fn zd_over_small_pfifo_never_drops_and_resumes_everyone(
        flows in 1usize..40,
        capacity in 1usize..8,
        edt_order in any::<bool>(),
        backlogs in prop::collection::vec(0u32..12, 40),
        actions in prop::collection::vec(any::<u8>(), 0..600),
    ) {
        let discipline = if edt_order { Discipline::edt_ordered() } else { Discipline::Fifo };
        let mut w = World {
            // Drop on overflow: zD must keep it from ever happening.
            zd: Zd::new(Pfifo::new(capacity, Overflow::Drop), ZdConfig {
                flows,
                discipline,
                per_flow_limit: 2,
            }),
            sources: backlogs[..flows]
                .iter()
                .map(|&backlog| Source { backlog, ..Default::default() })
                .collect(),
            next_id: 0,
            in_shaper: HashMap::new(),
            delivered: HashSet::new(),
            offered: 0,
            out: vec![PacketRef::default(); 4],
            resumed: Vec::new(),
        };
        let total: u64 = w.sources.iter().map(|s| u64::from(s.backlog)).sum();
        for a in actions {
            if a % 3 == 0 {
                w.drain(usize::from(a / 3 % 3) + 1)?;
            } else {
                w.offer(usize::from(a) % flows)?;
            }
            w.check(capacity)?;
        }
        // Wind down: the NIC drains one packet at a time; unpaused sources keep sending.
        let mut rounds = 0;
        loop {
            for f in 0..flows {
                w.offer(f)?;
            }
            w.check(capacity)?;
            if w.drain(1)? == 0 {
                break;
            }
            rounds += 1;
            prop_assert!(rounds < 10_000, "no progress");
        }
        prop_assert_eq!(w.zd.paused_len(), 0, "a paused flow was never resumed");
        prop_assert!(w.sources.iter().all(|s| !s.paused && s.held.is_none() && s.backlog == 0));
        prop_assert_eq!(w.delivered.len() as u64, total, "every packet delivered exactly once");
        let c = w.zd.counters();
        prop_assert_eq!(c.offers, w.offered);
        prop_assert_eq!(c.enqueued + c.virtual_drops, c.offers);
        prop_assert_eq!(c.paused, c.resumed);
        prop_assert_eq!(c.enqueued, total);
    }
}

/// A send in the Deferred Completions model: which flow, and how far ahead its EDT lies (µs).
#[derive(Clone, Debug)]
enum DcOp {
    Send(u32, u64),
    Advance(u64),
}

fn dc_ops(flows: u32) -> impl Strategy<Value = Vec<DcOp>> {
    prop::collection::vec(
        prop_oneof![
            3 => (0..flows, 0u64..120).prop_map(|(f, d)| DcOp::Send(f, d)),
            1 => (0u64..40).prop_map(DcOp::Advance),
        ],
        0..500,
    )
}

proptest! {
    #[test]
    fn deferred_completions_match_releases(
        ops in dc_ops(12),
        at_release in any::<bool>(),
        limit in 1u16..4,
        pool_packets in prop_oneof![Just(1024usize), 1usize..6],
    ) {
        let mode = if at_release { CompletionMode::AtRelease } else { CompletionMode::AtEnqueue };
        // Horizon 100 µs, EDTs up to 120 µs ahead: some packets are handed back, and with a
        // small pool some find it exhausted.
        let wheel = TimingWheel::new(TimingWheelConfig {
            granularity: Duration::from_micros(1),
            horizon: Duration::from_micros(100),
            horizon_policy: HorizonPolicy::Reject,
            pool_packets,
        });
        let mut d = Deferred::new(wheel, mode, 12, limit);
        let mut now = Timestamp::from_nanos(1_000_777);
        let mut in_flight = [0u16; 12];
        let mut queued = 0u64;
        let mut next_id = 0;
        let mut completions: Vec<Completion> = Vec::new();
        let mut at_enqueue: Vec<Completion> = Vec::new();
        let mut out = [PacketRef::default(); 8];
        let mut step = |d: &mut Deferred<TimingWheel>,
                        now: Timestamp,
                        in_flight: &mut [u16; 12],
                        queued: &mut u64,
                        completions: &mut Vec<Completion>|
         -> Result<(), TestCaseError> {
            loop {
                let before = completions.len();
                let n = d.dequeue(now, &mut out, completions);
                let released: Vec<Completion> = out[..n].iter().map(Completion::of).collect();
                *queued -= n as u64;
                if mode == CompletionMode::AtRelease {
                    prop_assert_eq!(&completions[before..], &released[..]);
                    for c in &released {
                        in_flight[c.flow.0 as usize] -= 1;
                    }
                } else {
                    prop_assert_eq!(completions.len(), before);
                }
                if n < out.len() {
                    return Ok(());
                }
            }
        };
        for op in ops {
            match op {
                DcOp::Send(f, ahead) => {
                    let flow = FlowId(f);
                    if !d.can_send(flow) {
                        prop_assert_eq!(mode, CompletionMode::AtRelease);
                        prop_assert!(in_flight[f as usize] >= limit);
                        continue;
                    }
                    next_id += 1;
                    let pkt = PacketRef::new(next_id, flow, ClassId(0), 1500);
                    // Every due packet left at the last poll, so the wheel's front is the slot of
                    // `now` and its horizon 100 slots from there.
                    let edt = now + Duration::from_micros(ahead);
                    let beyond = edt.as_nanos() / 1_000 - now.as_nanos() / 1_000 >= 100;
                    let held = d.len();
                    match d.enqueue(now, edt, pkt) {
                        Ok(Some(c)) => {
                            prop_assert!(!beyond, "accepted beyond the horizon");
                            prop_assert_eq!(mode, CompletionMode::AtEnqueue);
                            prop_assert_eq!(c, Completion::of(&pkt));
                            at_enqueue.push(c);
                            queued += 1;
                        }
                        Ok(None) => {
                            prop_assert!(!beyond, "accepted beyond the horizon");
                            prop_assert_eq!(mode, CompletionMode::AtRelease);
                            in_flight[f as usize] += 1;
                            queued += 1;
                        }
                        Err(r) => {
                            prop_assert_eq!(r.pkt, pkt);
                            match r.reason {
                                RejectReason::BeyondHorizon => prop_assert!(beyond),
                                RejectReason::PoolExhausted => prop_assert!(
                                    !beyond && held >= pool_packets,
                                    "pool exhausted with {} < {} packets queued", held, pool_packets
                                ),
                                other => prop_assert!(false, "unexpected {:?}", other),
                            }
                        }
                    }
                }
                DcOp::Advance(us) => {
                    now += Duration::from_micros(us);
                    step(&mut d, now, &mut in_flight, &mut queued, &mut completions)?;
                }
            }
            for f in 0..12 {
                prop_assert_eq!(d.in_flight(FlowId(f)), in_flight[f as usize]);
                prop_assert!(in_flight[f as usize] <= limit, "over the limit");
            }
            prop_assert_eq!(d.len() as u64, queued);
            d.inflight().invariants();
        }
        now += Duration::from_millis(1);
        step(&mut d, now, &mut in_flight, &mut queued, &mut completions)?;
        prop_assert!(d.is_empty());
        prop_assert_eq!(d.inflight().total(), 0);
        let c = d.counters();
        prop_assert_eq!(c.enqueued, d.queue_counters().dequeued);
        match mode {
            CompletionMode::AtRelease => {
                prop_assert_eq!(c.completions_at_release, c.enqueued);
                prop_assert_eq!(completions.len() as u64, c.enqueued);
            }
            CompletionMode::AtEnqueue => {
                prop_assert_eq!(c.completions_at_enqueue, c.enqueued);
                prop_assert_eq!(at_enqueue.len() as u64, c.enqueued);
            }
        }
        let q = d.queue_counters();
        prop_assert_eq!(c.handed_back, q.rejected_beyond_horizon + q.rejected_pool_exhausted);
    }
}
