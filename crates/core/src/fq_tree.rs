//! The structure of Linux `sch_fq` (FQ/pacing): per-flow FIFOs plus an ordered tree of the
//! backlogged flows keyed by the EDT of each flow's head packet (Carousel §2.3, FlowBundler §II), a
//! baseline `metronome bench` measures beside the timing wheel as Carousel Table 1 does.
//!
//! A `HashMap` from [`FlowId`] to a slab of flows, and a `BTreeSet` of `(head EDT, flow)` for
//! `sch_fq`'s throttled tree. Where it departs from `sch_fq`: no DRR round (a pure EDT queue behind
//! [`EdtQueue`], the cost model kept), ties in flow-index order, an empty flow collected at once,
//! optional limits ([`FqTree::with_limits`]), no granularity or horizon. The mapping and the
//! reasons: `docs/design/carousel.md`.

use crate::packet::{FlowId, PacketRef};
use crate::queue::{EdtQueue, QueueCounters, RejectReason, Rejected};
use crate::time::Timestamp;
use std::collections::{BTreeSet, HashMap, VecDeque};

/// Default global packet limit of `sch_fq`, in packets (`fq_init`: `sch->limit = 10000`; also the
/// global limit of Carousel §7's FQ/pacing baseline).
pub const SCH_FQ_DEFAULT_LIMIT: usize = 10_000;

/// Default per-flow packet limit of `sch_fq`, in packets (`fq_init`: `q->flow_plimit = 100`;
/// Carousel §7 raised it to 1000 for its baseline).
pub const SCH_FQ_DEFAULT_FLOW_LIMIT: usize = 100;

/// Bytes one queued packet occupies in its flow's FIFO: an EDT and a [`PacketRef`], padded to
/// 8-byte alignment (computed from the layout; 24 on every 64-bit target).
pub const FQ_PACKET_BYTES: usize = core::mem::size_of::<(Timestamp, PacketRef)>();

/// Estimated bytes of `BTreeSet` node memory per backlogged flow, for `BTreeSet<(Timestamp,
/// u32)>` on x86-64: a leaf is 192 bytes holding up to 11 keys and a split leaves 5 or 6, so a
/// key costs 17 to 38 bytes of leaf; 32 is the estimate for leaves about six keys full.
const BTREE_BYTES_PER_KEY: usize = 32;

/// Width of a hashbrown control group in bytes (16 with SSE2, the x86-64 build; 8 elsewhere, where
/// this slightly overestimates).
const HASH_GROUP_WIDTH: usize = 16;

/// One flow: the slot's current owner and its FIFO of `(EDT, packet)`.
#[derive(Debug, Default)]
struct Flow {
    /// The flow that owns the slot; stale while the slot is on the free list.
    id: FlowId,
    packets: VecDeque<(Timestamp, PacketRef)>,
}

/// The `sch_fq` structure: per-flow FIFOs and a tree of backlogged flows by head EDT.
///
/// ```
/// use metronome_core::fq_tree::FqTree;
/// use metronome_core::{ClassId, EdtQueue, FlowId, PacketRef, Timestamp};
///
/// let mut q = FqTree::new();
/// let p = |id, flow| PacketRef::new(id, FlowId(flow), ClassId(0), 100);
/// q.enqueue(Timestamp::ZERO, Timestamp::from_nanos(20), p(1, 7)).unwrap();
/// q.enqueue(Timestamp::ZERO, Timestamp::from_nanos(10), p(2, 8)).unwrap();
/// assert_eq!(q.next_due(), Some(Timestamp::from_nanos(10)));
/// let mut out = [PacketRef::default(); 4];
/// assert_eq!(q.dequeue(Timestamp::from_nanos(20), &mut out), 2);
/// assert_eq!((out[0].id, out[1].id), (2, 1));
/// ```
#[derive(Debug)]
pub struct FqTree {
    // Touched on every dequeue: the tree, the slab, the packet count.
    /// Backlogged flows keyed by `(head EDT, flow index)`; one entry per non-empty flow.
    backlog: BTreeSet<(Timestamp, u32)>,
    flows: Vec<Flow>,
    len: usize,
    // Touched when a flow opens or closes.
    index: HashMap<FlowId, u32>,
    /// Slab slots whose flow emptied, reused before the slab grows.
    free: Vec<u32>,
    // Configuration and statistics.
    limit: usize,
    flow_limit: usize,
    last_now: Timestamp,
    counters: QueueCounters,
    rejected_flow_limit: u64,
}

impl Default for FqTree {
    fn default() -> Self {
        Self::new()
    }
}

impl FqTree {
    /// An empty tree without packet limits.
    pub fn new() -> Self {
        Self::with_limits(usize::MAX, usize::MAX)
    }

    /// An empty tree holding at most `limit` packets in all and `flow_limit` per flow, as
    /// `sch_fq`'s `limit` and `flow_limit` (see [`SCH_FQ_DEFAULT_LIMIT`] and
    /// [`SCH_FQ_DEFAULT_FLOW_LIMIT`]). Packets over either are handed back with
    /// [`RejectReason::Full`].
    pub fn with_limits(limit: usize, flow_limit: usize) -> Self {
        FqTree {
            backlog: BTreeSet::new(),
            flows: Vec::new(),
            len: 0,
            index: HashMap::new(),
            free: Vec::new(),
            limit,
            flow_limit,
            last_now: Timestamp::ZERO,
            counters: QueueCounters::default(),
            rejected_flow_limit: 0,
        }
    }

    /// Flows currently backlogged (holding at least one packet).
    pub fn backlogged_flows(&self) -> usize {
        self.backlog.len()
    }

    /// Of the [`QueueCounters::rejected_full`] rejections, those caused by the per-flow limit
    /// (`sch_fq`'s `flows_plimit`).
    pub fn rejected_flow_limit(&self) -> u64 {
        self.rejected_flow_limit
    }

    /// Records `now`; time never goes backwards.
    fn observe(&mut self, now: Timestamp) {
        debug_assert!(now >= self.last_now, "time went backwards");
        self.last_now = self.last_now.max(now);
    }

    fn reject(&mut self, pkt: PacketRef, flow_limit: bool) -> Result<(), Rejected> {
        let reason = RejectReason::Full;
        self.counters.count_rejection(reason);
        if flow_limit {
            self.rejected_flow_limit += 1;
        }
        Err(Rejected { pkt, reason })
    }

    /// Gives `id` a slab slot, a free one first; `None` when `u32` flow indices run out.
    fn open_flow(&mut self, id: FlowId) -> Option<u32> {
        let idx = match self.free.pop() {
            Some(idx) => idx,
            None => {
                let idx = u32::try_from(self.flows.len()).ok()?;
                self.flows.push(Flow::default());
                idx
            }
        };
        self.flows.get_mut(idx as usize)?.id = id;
        self.index.insert(id, idx);
        Some(idx)
    }

    /// Checks the executable invariants (CONTRIBUTING.md §10).
    #[cfg(test)]
    fn invariants(&self) {
        let mut held = 0;
        for (&id, &idx) in &self.index {
            let flow = &self.flows[idx as usize];
            assert_eq!(flow.id, id);
            let (head, _) = flow.packets.front().expect("an indexed flow is backlogged");
            assert!(self.backlog.contains(&(*head, idx)));
            held += flow.packets.len();
        }
        for &idx in &self.free {
            assert!(self.flows[idx as usize].packets.is_empty());
        }
        assert_eq!(self.backlog.len(), self.index.len());
        assert_eq!(self.index.len() + self.free.len(), self.flows.len());
        assert_eq!(held, self.len);
        assert_eq!(
            self.counters.enqueued - self.counters.dequeued,
            self.len as u64
        );
    }
}

/// Estimated bytes of a `HashMap<FlowId, u32>` of `capacity`: hashbrown allocates a power-of-two
/// number of buckets with at most 7/8 of them usable, each bucket one `(key, value)` plus one
/// control byte, plus one trailing control group. Matches a counting allocator exactly on x86-64.
fn hash_map_bytes(capacity: usize) -> usize {
    if capacity == 0 {
        return 0;
    }
    let buckets = (capacity.saturating_mul(8) / 7).next_power_of_two();
    let bucket_bytes = core::mem::size_of::<(FlowId, u32)>() + 1;
    buckets * bucket_bytes + HASH_GROUP_WIDTH
}

impl EdtQueue for FqTree {
    fn name(&self) -> &'static str {
        "fq_tree"
    }

    fn enqueue(&mut self, now: Timestamp, edt: Timestamp, pkt: PacketRef) -> Result<(), Rejected> {
        self.observe(now);
        if self.len >= self.limit {
            return self.reject(pkt, false);
        }
        let idx = match self.index.get(&pkt.flow) {
            Some(&idx) => idx,
            None if self.flow_limit == 0 => return self.reject(pkt, true),
            None => match self.open_flow(pkt.flow) {
                Some(idx) => idx,
                None => return self.reject(pkt, false),
            },
        };
        let Some(flow) = self.flows.get_mut(idx as usize) else {
            return self.reject(pkt, false);
        };
        if flow.packets.len() >= self.flow_limit {
            return self.reject(pkt, true);
        }
        let was_idle = flow.packets.is_empty();
        flow.packets.push_back((edt, pkt));
        if was_idle {
            self.backlog.insert((edt, idx));
        }
        self.len += 1;
        self.counters.enqueued += 1;
        Ok(())
    }

    fn dequeue(&mut self, now: Timestamp, out: &mut [PacketRef]) -> usize {
        self.observe(now);
        let mut n = 0;
        while n < out.len() {
            let Some(&(head, idx)) = self.backlog.first() else {
                break;
            };
            if head > now {
                break;
            }
            self.backlog.pop_first();
            let Some(flow) = self.flows.get_mut(idx as usize) else {
                continue;
            };
            let Some((_, pkt)) = flow.packets.pop_front() else {
                continue;
            };
            out[n] = pkt;
            n += 1;
            match flow.packets.front() {
                Some(&(next, _)) => {
                    self.backlog.insert((next, idx));
                }
                None => {
                    // Collected at once (module docs); the slot keeps its buffer for reuse.
                    self.index.remove(&flow.id);
                    self.free.push(idx);
                }
            }
        }
        self.len -= n;
        self.counters.dequeued += n as u64;
        if n > 0 {
            self.counters.nonempty_dequeues += 1;
        }
        n
    }

    fn next_due(&self) -> Option<Timestamp> {
        self.backlog.first().map(|&(head, _)| head)
    }

    fn len(&self) -> usize {
        self.len
    }

    /// The slab and every FIFO's buffer (exact), the free list (exact), the flow map (hashbrown's
    /// layout, see `hash_map_bytes`) and the tree (`BTREE_BYTES_PER_KEY` per backlogged flow, an
    /// estimate). Walks the slab: O(flows), for reports, not for the hot path.
    fn memory_bytes(&self) -> usize {
        let slab = self.flows.capacity() * core::mem::size_of::<Flow>();
        let fifos: usize = self
            .flows
            .iter()
            .map(|f| f.packets.capacity() * FQ_PACKET_BYTES)
            .sum();
        let free = self.free.capacity() * core::mem::size_of::<u32>();
        let tree = self.backlog.len() * BTREE_BYTES_PER_KEY;
        slab + fifos + free + hash_map_bytes(self.index.capacity()) + tree
    }

    /// [`FQ_PACKET_BYTES`] per queued packet: the FIFO entries in use. Per-flow and tree overhead
    /// is in [`EdtQueue::memory_bytes`] only.
    fn packet_bytes(&self) -> usize {
        self.len * FQ_PACKET_BYTES
    }

    fn counters(&self) -> QueueCounters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::ClassId;
    use proptest::prelude::*;

    fn pkt(id: u32, flow: u32) -> PacketRef {
        PacketRef::new(id, FlowId(flow), ClassId(0), 100)
    }

    fn ts(n: u64) -> Timestamp {
        Timestamp::from_nanos(n)
    }

    fn drain(q: &mut FqTree, now: u64, batch: usize) -> Vec<u32> {
        let mut out = vec![PacketRef::default(); batch];
        let mut ids = Vec::new();
        loop {
            let n = q.dequeue(ts(now), &mut out);
            ids.extend(out[..n].iter().map(|p| p.id));
            q.invariants();
            if n < batch {
                return ids;
            }
        }
    }

    #[test]
    fn equal_edts_leave_fifo_within_a_flow() {
        let mut q = FqTree::new();
        for id in 0..50 {
            q.enqueue(ts(0), ts(100), pkt(id, 3)).unwrap();
        }
        assert_eq!(drain(&mut q, 100, 7), (0..50).collect::<Vec<_>>());
        assert!(q.is_empty());
    }

    #[test]
    fn equal_edts_across_flows_leave_in_flow_index_order() {
        let mut q = FqTree::new();
        // Flow 9 opens first (index 0), flow 4 second (index 1).
        q.enqueue(ts(0), ts(10), pkt(1, 9)).unwrap();
        q.enqueue(ts(0), ts(10), pkt(2, 4)).unwrap();
        q.enqueue(ts(0), ts(10), pkt(3, 9)).unwrap();
        assert_eq!(drain(&mut q, 10, 8), [1, 3, 2]);
    }

    #[test]
    fn nothing_leaves_before_its_edt() {
        let mut q = FqTree::new();
        q.enqueue(ts(0), ts(1_000), pkt(1, 1)).unwrap();
        q.enqueue(ts(0), ts(500), pkt(2, 2)).unwrap();
        assert_eq!(drain(&mut q, 499, 4), Vec::<u32>::new());
        assert_eq!(drain(&mut q, 500, 4), [2]);
        assert_eq!(drain(&mut q, 999, 4), Vec::<u32>::new());
        assert_eq!(drain(&mut q, 1_000, 4), [1]);
    }

    #[test]
    fn flow_is_fifo_even_when_a_later_packet_has_an_earlier_edt() {
        let mut q = FqTree::new();
        q.enqueue(ts(0), ts(300), pkt(1, 5)).unwrap();
        q.enqueue(ts(0), ts(100), pkt(2, 5)).unwrap(); // waits behind its head
        q.enqueue(ts(0), ts(200), pkt(3, 6)).unwrap();
        assert_eq!(q.next_due(), Some(ts(200)));
        assert_eq!(drain(&mut q, 250, 4), [3]);
        assert_eq!(q.next_due(), Some(ts(300)));
        assert_eq!(drain(&mut q, 300, 4), [1, 2]);
    }

    #[test]
    fn flows_interleave_by_head_edt() {
        let mut q = FqTree::new();
        for i in 0..5u32 {
            let t = 10 * u64::from(i);
            q.enqueue(ts(0), ts(t), pkt(100 + i, 1)).unwrap();
            q.enqueue(ts(0), ts(t + 5), pkt(200 + i, 2)).unwrap();
        }
        assert_eq!(q.backlogged_flows(), 2);
        assert_eq!(
            drain(&mut q, 1_000, 3),
            [100, 200, 101, 201, 102, 202, 103, 203, 104, 204]
        );
        assert_eq!(q.backlogged_flows(), 0);
    }

    #[test]
    fn out_buffer_limit_respected() {
        let mut q = FqTree::new();
        for id in 0..10 {
            q.enqueue(ts(0), ts(u64::from(id)), pkt(id, id % 2))
                .unwrap();
        }
        let mut out = [PacketRef::default(); 4];
        assert_eq!(q.dequeue(ts(100), &mut out), 4);
        assert_eq!(out.map(|p| p.id), [0, 1, 2, 3]);
        assert_eq!(q.len(), 6);
        assert_eq!(q.next_due(), Some(ts(4)));
        assert_eq!(q.dequeue(ts(100), &mut out), 4);
        assert_eq!(out.map(|p| p.id), [4, 5, 6, 7]);
        assert_eq!(q.dequeue(ts(100), &mut out[..0]), 0);
        assert_eq!(q.dequeue(ts(100), &mut out), 2);
        let c = q.counters();
        assert_eq!((c.enqueued, c.dequeued, c.nonempty_dequeues), (10, 10, 3));
        q.invariants();
    }

    #[test]
    fn next_due_is_the_earliest_head() {
        let mut q = FqTree::new();
        assert_eq!(q.next_due(), None);
        q.enqueue(ts(0), ts(70), pkt(1, 1)).unwrap();
        q.enqueue(ts(0), ts(40), pkt(2, 2)).unwrap();
        q.enqueue(ts(0), ts(10), pkt(3, 1)).unwrap(); // behind a head at 70
        assert_eq!(q.next_due(), Some(ts(40)));
        assert_eq!(drain(&mut q, 40, 4), [2]);
        assert_eq!(q.next_due(), Some(ts(70)));
        assert_eq!(drain(&mut q, 70, 1), [1, 3]);
        assert_eq!(q.next_due(), None);
    }

    #[test]
    fn limits_hand_packets_back() {
        let mut q = FqTree::with_limits(3, 2);
        q.enqueue(ts(0), ts(1), pkt(1, 1)).unwrap();
        q.enqueue(ts(0), ts(1), pkt(2, 1)).unwrap();
        let err = q.enqueue(ts(0), ts(1), pkt(3, 1)).unwrap_err();
        assert_eq!((err.pkt, err.reason), (pkt(3, 1), RejectReason::Full));
        assert_eq!(q.rejected_flow_limit(), 1);
        q.enqueue(ts(0), ts(1), pkt(4, 2)).unwrap();
        assert!(q.enqueue(ts(0), ts(1), pkt(5, 3)).is_err()); // global limit
        assert_eq!(q.counters().rejected_full, 2);
        assert_eq!(q.rejected_flow_limit(), 1);
        q.invariants();

        let mut none = FqTree::with_limits(10, 0);
        assert!(none.enqueue(ts(0), ts(1), pkt(1, 1)).is_err());
        assert_eq!(none.rejected_flow_limit(), 1);
        none.invariants();
    }

    #[test]
    fn empty_flows_are_collected_and_slots_reused() {
        let mut q = FqTree::new();
        for round in 0..100u32 {
            let t = u64::from(round);
            for f in 0..4 {
                q.enqueue(ts(t), ts(t), pkt(f, round * 4 + f)).unwrap();
            }
            assert_eq!(drain(&mut q, t, 16).len(), 4);
        }
        assert_eq!(q.flows.len(), 4, "slab holds the high-water mark");
        let mem = q.memory_bytes();
        for f in 0..4 {
            q.enqueue(ts(100), ts(100), pkt(f, 1_000 + f)).unwrap();
        }
        drain(&mut q, 100, 16);
        assert_eq!(q.memory_bytes(), mem, "steady state does not grow");
    }

    #[test]
    fn memory_accounting() {
        let mut q = FqTree::new();
        assert_eq!(q.memory_bytes(), 0);
        assert_eq!(FQ_PACKET_BYTES, 24);
        for id in 0..100 {
            q.enqueue(ts(0), ts(5), pkt(id, id % 10)).unwrap();
        }
        assert_eq!(q.packet_bytes(), 100 * FQ_PACKET_BYTES);
        assert!(q.memory_bytes() > q.packet_bytes());
        assert_eq!(hash_map_bytes(14), 16 * 9 + HASH_GROUP_WIDTH);
        assert_eq!(q.name(), "fq_tree");
    }

    proptest! {
        /// Differential test against a reference model: per-flow FIFOs scanned exhaustively for
        /// the smallest `(head EDT, flow index)`.
        #[test]
        fn matches_per_flow_fifo_model(
            ops in proptest::collection::vec((0u32..6, 0u64..200, 0u64..30), 1..300),
            batch in 1usize..6,
        ) {
            let mut q = FqTree::new();
            let mut model: Vec<(u32, VecDeque<(u64, u32)>)> = Vec::new();
            let mut out = vec![PacketRef::default(); batch];
            let mut now = 0;
            for (id, &(flow, delay, advance)) in ops.iter().enumerate() {
                q.enqueue(ts(now), ts(now + delay), pkt(id as u32, flow)).unwrap();
                match model.iter_mut().find(|(f, _)| *f == flow) {
                    Some((_, fifo)) => fifo.push_back((now + delay, id as u32)),
                    None => model.push((flow, VecDeque::from([(now + delay, id as u32)]))),
                }
                now += advance;
                let n = q.dequeue(ts(now), &mut out);
                for p in &out[..n] {
                    // Ties between flows break by slab index, which the model does not track:
                    // accept the flow whose head is this packet and check that head is earliest.
                    let best = model
                        .iter()
                        .filter_map(|(_, fifo)| fifo.front().map(|&(e, _)| e))
                        .min()
                        .unwrap();
                    prop_assert!(best <= now);
                    let slot = model
                        .iter_mut()
                        .find(|(_, fifo)| fifo.front().is_some_and(|&(_, i)| i == p.id))
                        .unwrap();
                    prop_assert_eq!(slot.1.pop_front().unwrap().0, best);
                }
                if n < batch {
                    let due = model.iter().filter_map(|(_, f)| f.front()).any(|&(e, _)| e <= now);
                    prop_assert!(!due);
                }
                model.retain(|(_, fifo)| !fifo.is_empty());
                q.invariants();
                let next = model.iter().filter_map(|(_, f)| f.front().map(|&(e, _)| e)).min();
                prop_assert_eq!(q.next_due(), next.map(ts));
            }
        }
    }
}
