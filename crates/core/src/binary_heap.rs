//! A single EDT-ordered binary min-heap: the textbook priority-queue baseline of the EDT model
//! (Carousel §4, FlowBundler §II) at O(log n) per operation, which `metronome bench` measures
//! beside the timing wheel as Carousel Table 1 does.
//!
//! Where it departs from the wheel: no granularity (a packet leaves when `edt <= now`) and no
//! horizon (an optional count, [`BinaryHeapQueue::with_capacity_limit`], hands back with
//! [`RejectReason::Full`]). Equal EDTs leave FIFO by a sequence number. One `Vec` of 32-byte
//! entries that grows by doubling and never shrinks. The reasons: `docs/design/carousel.md`.

use crate::packet::PacketRef;
use crate::queue::{EdtQueue, QueueCounters, RejectReason, Rejected};
use crate::time::Timestamp;
use core::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

/// One queued packet with its ordering key.
#[derive(Clone, Copy, Debug)]
struct Entry {
    edt: Timestamp,
    /// Insertion order, so equal EDTs leave FIFO.
    seq: u64,
    pkt: PacketRef,
}

impl Entry {
    fn key(&self) -> (Timestamp, u64) {
        (self.edt, self.seq)
    }
}

// Ordering looks at the key only: sequence numbers are unique, so two entries compare equal only
// when they are the same entry.
impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

/// Bytes of one heap element: EDT, sequence number and packet reference, padded to 8-byte
/// alignment (computed from the layout; 32 on every 64-bit target).
const ENTRY_BYTES: usize = core::mem::size_of::<Reverse<Entry>>();

/// An EDT-ordered binary min-heap of packet references.
///
/// ```
/// use metronome_core::binary_heap::BinaryHeapQueue;
/// use metronome_core::{ClassId, EdtQueue, FlowId, PacketRef, Timestamp};
///
/// let mut q = BinaryHeapQueue::new();
/// let t = Timestamp::from_nanos(1_000);
/// q.enqueue(Timestamp::ZERO, t, PacketRef::new(1, FlowId(0), ClassId(0), 100)).unwrap();
/// let mut out = [PacketRef::default(); 4];
/// assert_eq!(q.dequeue(Timestamp::from_nanos(999), &mut out), 0);
/// assert_eq!(q.dequeue(t, &mut out), 1);
/// ```
#[derive(Debug)]
pub struct BinaryHeapQueue {
    heap: BinaryHeap<Reverse<Entry>>,
    /// Next sequence number to hand out.
    next_seq: u64,
    /// Most packets held at once; `usize::MAX` when unbounded.
    limit: usize,
    /// Latest `now` seen, to check that time never goes backwards.
    last_now: Timestamp,
    counters: QueueCounters,
}

impl Default for BinaryHeapQueue {
    fn default() -> Self {
        Self::new()
    }
}

impl BinaryHeapQueue {
    /// An empty, unbounded heap.
    pub fn new() -> Self {
        Self::with_capacity_limit(usize::MAX)
    }

    /// An empty heap that holds at most `limit` packets and hands further packets back with
    /// [`RejectReason::Full`]. Nothing is preallocated (see [`BinaryHeapQueue::reserve`]).
    pub fn with_capacity_limit(limit: usize) -> Self {
        BinaryHeapQueue {
            heap: BinaryHeap::new(),
            next_seq: 0,
            limit,
            last_now: Timestamp::ZERO,
            counters: QueueCounters::default(),
        }
    }

    /// Preallocates room for `additional` more packets, so that a benchmark measures the steady
    /// state rather than the heap's growth.
    pub fn reserve(&mut self, additional: usize) {
        self.heap.reserve(additional);
    }

    /// The packet limit, `usize::MAX` when unbounded.
    pub fn capacity_limit(&self) -> usize {
        self.limit
    }

    /// Records `now`; time never goes backwards.
    fn observe(&mut self, now: Timestamp) {
        debug_assert!(now >= self.last_now, "time went backwards");
        self.last_now = self.last_now.max(now);
    }

    /// Checks the executable invariants (CONTRIBUTING.md §10).
    #[cfg(test)]
    fn invariants(&self) {
        assert!(self.heap.len() <= self.limit);
        assert_eq!(
            self.counters.enqueued - self.counters.dequeued,
            self.heap.len() as u64
        );
    }
}

impl EdtQueue for BinaryHeapQueue {
    fn name(&self) -> &'static str {
        "binary_heap"
    }

    fn enqueue(&mut self, now: Timestamp, edt: Timestamp, pkt: PacketRef) -> Result<(), Rejected> {
        self.observe(now);
        if self.heap.len() >= self.limit {
            let reason = RejectReason::Full;
            self.counters.count_rejection(reason);
            return Err(Rejected { pkt, reason });
        }
        let seq = self.next_seq;
        // 2^64 insertions never happen; wrapping keeps release builds free of overflow checks.
        self.next_seq = self.next_seq.wrapping_add(1);
        self.heap.push(Reverse(Entry { edt, seq, pkt }));
        self.counters.enqueued += 1;
        Ok(())
    }

    fn dequeue(&mut self, now: Timestamp, out: &mut [PacketRef]) -> usize {
        self.observe(now);
        let mut n = 0;
        while n < out.len() {
            match self.heap.peek() {
                Some(Reverse(e)) if e.edt <= now => {}
                _ => break,
            }
            let Some(Reverse(e)) = self.heap.pop() else {
                break;
            };
            out[n] = e.pkt;
            n += 1;
        }
        self.counters.dequeued += n as u64;
        if n > 0 {
            self.counters.nonempty_dequeues += 1;
        }
        n
    }

    fn next_due(&self) -> Option<Timestamp> {
        self.heap.peek().map(|Reverse(e)| e.edt)
    }

    fn len(&self) -> usize {
        self.heap.len()
    }

    fn memory_bytes(&self) -> usize {
        self.heap.capacity() * ENTRY_BYTES
    }

    fn packet_bytes(&self) -> usize {
        self.heap.len() * ENTRY_BYTES
    }

    fn counters(&self) -> QueueCounters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{ClassId, FlowId};
    use crate::time::Duration;
    use proptest::prelude::*;

    fn pkt(id: u32) -> PacketRef {
        PacketRef::new(id, FlowId(id % 3), ClassId(0), 100)
    }

    fn ts(n: u64) -> Timestamp {
        Timestamp::from_nanos(n)
    }

    #[test]
    fn equal_edts_leave_fifo() {
        let mut q = BinaryHeapQueue::new();
        for id in 0..100 {
            q.enqueue(ts(0), ts(500), pkt(id)).unwrap();
        }
        let mut out = [PacketRef::default(); 128];
        assert_eq!(q.dequeue(ts(500), &mut out), 100);
        let ids: Vec<u32> = out[..100].iter().map(|p| p.id).collect();
        assert_eq!(ids, (0..100).collect::<Vec<_>>());
        q.invariants();
    }

    #[test]
    fn nothing_leaves_before_its_edt() {
        let mut q = BinaryHeapQueue::new();
        q.enqueue(ts(0), ts(1_000), pkt(1)).unwrap();
        q.enqueue(ts(0), ts(999), pkt(2)).unwrap();
        let mut out = [PacketRef::default(); 4];
        assert_eq!(q.dequeue(ts(998), &mut out), 0);
        assert_eq!(q.dequeue(ts(999), &mut out), 1);
        assert_eq!(out[0].id, 2);
        assert_eq!(q.dequeue(ts(999), &mut out), 0);
        assert_eq!(q.dequeue(ts(1_000), &mut out), 1);
        assert_eq!(out[0].id, 1);
        assert!(q.is_empty());
        q.invariants();
    }

    #[test]
    fn earlier_edt_leaves_first_regardless_of_arrival() {
        let mut q = BinaryHeapQueue::new();
        for (id, edt) in [(1, 300), (2, 100), (3, 200)] {
            q.enqueue(ts(0), ts(edt), pkt(id)).unwrap();
        }
        let mut out = [PacketRef::default(); 4];
        assert_eq!(q.dequeue(ts(1_000), &mut out), 3);
        assert_eq!([out[0].id, out[1].id, out[2].id], [2, 3, 1]);
    }

    #[test]
    fn out_buffer_limit_respected() {
        let mut q = BinaryHeapQueue::new();
        for id in 0..10 {
            q.enqueue(ts(0), ts(10 + u64::from(id)), pkt(id)).unwrap();
        }
        let mut out = [PacketRef::default(); 4];
        assert_eq!(q.dequeue(ts(100), &mut out), 4);
        assert_eq!(out.map(|p| p.id), [0, 1, 2, 3]);
        assert_eq!(q.len(), 6);
        assert_eq!(q.next_due(), Some(ts(14)));
        assert_eq!(q.dequeue(ts(100), &mut out), 4);
        assert_eq!(out.map(|p| p.id), [4, 5, 6, 7]);
        assert_eq!(q.dequeue(ts(100), &mut out), 2);
        assert_eq!(q.dequeue(ts(100), &mut []), 0);
        let c = q.counters();
        assert_eq!((c.enqueued, c.dequeued, c.nonempty_dequeues), (10, 10, 3));
    }

    #[test]
    fn next_due_tracks_the_earliest() {
        let mut q = BinaryHeapQueue::new();
        assert_eq!(q.next_due(), None);
        q.enqueue(ts(0), ts(50), pkt(1)).unwrap();
        q.enqueue(ts(0), ts(20), pkt(2)).unwrap();
        assert_eq!(q.next_due(), Some(ts(20)));
        let mut out = [PacketRef::default(); 1];
        assert_eq!(q.dequeue(ts(19), &mut out), 0);
        assert_eq!(q.dequeue(ts(20), &mut out), 1);
        assert_eq!(q.next_due(), Some(ts(50)));
        assert_eq!(q.dequeue(ts(60), &mut out), 1);
        assert_eq!(q.next_due(), None);
    }

    #[test]
    fn capacity_limit_hands_packets_back() {
        let mut q = BinaryHeapQueue::with_capacity_limit(2);
        q.enqueue(ts(0), ts(5), pkt(1)).unwrap();
        q.enqueue(ts(0), ts(5), pkt(2)).unwrap();
        let err = q.enqueue(ts(0), ts(5), pkt(3)).unwrap_err();
        assert_eq!(err.pkt, pkt(3));
        assert_eq!(err.reason, RejectReason::Full);
        assert_eq!(q.counters().rejected_full, 1);
        let mut out = [PacketRef::default(); 1];
        assert_eq!(q.dequeue(ts(5), &mut out), 1);
        q.enqueue(ts(5), ts(5), pkt(3)).unwrap();
        q.invariants();

        let mut zero = BinaryHeapQueue::with_capacity_limit(0);
        assert!(zero.enqueue(ts(0), ts(0), pkt(1)).is_err());
    }

    #[test]
    fn memory_accounting() {
        let mut q = BinaryHeapQueue::new();
        assert_eq!(ENTRY_BYTES, 32);
        q.reserve(16);
        assert!(q.memory_bytes() >= 16 * ENTRY_BYTES);
        for id in 0..5 {
            q.enqueue(ts(0), ts(1), pkt(id)).unwrap();
        }
        assert_eq!(q.packet_bytes(), 5 * ENTRY_BYTES);
        assert!(q.memory_bytes() >= q.packet_bytes());
        assert_eq!(q.name(), "binary_heap");
    }

    #[test]
    fn extreme_timestamps_do_not_panic() {
        let mut q = BinaryHeapQueue::new();
        q.enqueue(ts(0), Timestamp::MAX, pkt(1)).unwrap();
        q.enqueue(ts(0), Timestamp::ZERO, pkt(2)).unwrap();
        let mut out = [PacketRef::default(); 2];
        assert_eq!(q.dequeue(ts(0) + Duration::from_secs(1), &mut out), 1);
        assert_eq!(q.dequeue(Timestamp::MAX, &mut out), 1);
    }

    proptest! {
        /// Differential test against the reference model: a `Vec` stably sorted by EDT.
        #[test]
        fn matches_sorted_vec(
            edts in proptest::collection::vec(0u64..1_000, 0..200),
            steps in proptest::collection::vec(1u64..100, 1..40),
            batch in 1usize..8,
        ) {
            let mut q = BinaryHeapQueue::new();
            let mut model: Vec<(u64, u32)> = Vec::new();
            for (i, &e) in edts.iter().enumerate() {
                q.enqueue(ts(0), ts(e), pkt(i as u32)).unwrap();
                model.push((e, i as u32));
            }
            model.sort_by_key(|&(e, _)| e);
            let mut expected = model.into_iter().peekable();
            let mut out = vec![PacketRef::default(); batch];
            let mut now = 0;
            for step in steps.iter().chain(core::iter::once(&2_000)) {
                now += step;
                loop {
                    let n = q.dequeue(ts(now), &mut out);
                    for p in &out[..n] {
                        let (_, id) = expected.next().unwrap();
                        prop_assert_eq!(p.id, id);
                    }
                    if n < batch {
                        break;
                    }
                }
                prop_assert!(expected.peek().is_none_or(|&(e, _)| e > now));
                q.invariants();
            }
            prop_assert!(q.is_empty());
        }
    }
}
