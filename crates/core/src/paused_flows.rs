//! The paused-flows queue of zD (zD §4.3): the flows that backpressure has paused, in the order in
//! which departures resume them, [`Discipline::Fifo`] or [`Discipline::EdtOrdered`].
//!
//! Each flow costs [`PER_FLOW_BYTES`] = 8 bytes (zD §4's memory budget), checked at compile time.
//! The EDT order is a small calendar queue over [`SlotClock::slot_of`] with an
//! [`OccupancyBitmap`]; `pause` and `pop` are O(1) plus a bitmap scan, nothing allocates after
//! construction.
//!
//! Where it departs from an exact priority queue (bounded memory, O(1) pause): keys beyond the
//! window are clamped to its last slot, keys before it clamped up to its start (`clamped_late`,
//! `clamped_early`). The layout and the reasons: `docs/design/zd.md`.

use crate::bitmap::OccupancyBitmap;
use crate::packet::FlowId;
use crate::time::{Duration, SlotClock, Timestamp};

/// Bytes of per-flow state (one `next` link and one key, both `u32`); checked at compile time.
/// zD §4 reports under 160 KB for 20 000 flows, i.e. 8 bytes per flow.
pub const PER_FLOW_BYTES: usize = 8;

/// Most flows a queue can index: flow indices must stay below the two `u32` sentinels.
pub const MAX_FLOWS: usize = (u32::MAX - 1) as usize;

/// Default EDT granularity of [`Discipline::EdtOrdered`]: 16 µs. Coarser than the timing wheel's
/// 2 µs (Carousel §7.1.3) because the paused order only has to follow the shaper's order to within
/// a few packet times at 1-10 Gbit/s (a 1500-byte packet takes 12 µs at 1 Gbit/s).
pub const DEFAULT_EDT_GRANULARITY: Duration = Duration::from_micros(16);

/// Default buckets of [`Discipline::EdtOrdered`]: 4096, a window of 65.5 ms at the default
/// granularity, which covers the gap between two 1500-byte packets of any flow paced at 185 kbit/s
/// or more; 32 KB of bucket heads plus a 520-byte bitmap.
pub const DEFAULT_EDT_BUCKETS: usize = 4096;

/// Most buckets an [`Discipline::EdtOrdered`] queue gets (requests are capped): 2^24, 128 MiB of
/// bucket heads, a bound that keeps a bad configuration from exhausting memory.
pub const MAX_EDT_BUCKETS: usize = 1 << 24;

/// `Entry::next` of a flow that is not in the queue.
const NOT_QUEUED: u32 = u32::MAX;
/// End of a list / empty bucket.
const NIL: u32 = u32::MAX - 1;

/// The order in which paused flows are resumed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Discipline {
    /// First paused, first resumed (zD §4.3, the FIFO discipline).
    Fifo,
    /// Earliest next EDT first, in slots of `granularity`, pause order within a slot.
    EdtOrdered {
        /// Width of one key slot.
        granularity: Duration,
        /// Buckets in the ring, rounded up to a power of two (1..=[`MAX_EDT_BUCKETS`]); the window
        /// of exact order is `buckets * granularity`.
        buckets: usize,
    },
}

impl Discipline {
    /// [`Discipline::EdtOrdered`] with [`DEFAULT_EDT_GRANULARITY`] and [`DEFAULT_EDT_BUCKETS`].
    pub const fn edt_ordered() -> Self {
        Discipline::EdtOrdered {
            granularity: DEFAULT_EDT_GRANULARITY,
            buckets: DEFAULT_EDT_BUCKETS,
        }
    }
}

/// Why `pause` did not append the flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum PauseError {
    /// The flow is already in the queue (a flow is queued at most once); nothing changed.
    #[error("flow already paused")]
    AlreadyPaused,
    /// The flow index is not below the queue's capacity.
    #[error("flow index beyond capacity")]
    UnknownFlow,
}

/// Named counters of a [`PausedFlows`] queue. Monotonic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PausedCounters {
    /// Flows appended by `pause`.
    pub paused: u64,
    /// Flows taken out by `pop`.
    pub resumed: u64,
    /// Flows taken out by `remove`.
    pub removed: u64,
    /// `pause` of a flow already queued (no-op).
    pub already_paused: u64,
    /// `pause` of a flow index beyond capacity (refused).
    pub unknown_flow: u64,
    /// EDT keys earlier than the window that could not move it: placed at the window's start.
    pub clamped_early: u64,
    /// EDT keys later than the window: placed at its last slot.
    pub clamped_late: u64,
}

/// Per-flow state: 8 bytes.
#[derive(Clone, Copy, Debug)]
struct Entry {
    /// Next flow in the bucket, [`NIL`] at the tail, [`NOT_QUEUED`] when not queued.
    next: u32,
    /// Low 32 bits of the flow's (clamped) EDT slot; 0 for FIFO.
    key: u32,
}
const _: () = assert!(core::mem::size_of::<Entry>() == PER_FLOW_BYTES);

/// One FIFO list of flows.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    head: u32,
    tail: u32,
}

impl Bucket {
    const EMPTY: Bucket = Bucket {
        head: NIL,
        tail: NIL,
    };
}

/// The queue of paused flows (zD §4.3). See the module docs.
///
/// ```
/// use metronome_core::paused_flows::{Discipline, PausedFlows};
/// use metronome_core::{FlowId, Timestamp};
///
/// let mut q = PausedFlows::new(16, Discipline::edt_ordered());
/// q.pause(FlowId(3), Timestamp::from_nanos(900_000)).unwrap();
/// q.pause(FlowId(5), Timestamp::from_nanos(100_000)).unwrap();
/// assert!(q.pause(FlowId(5), Timestamp::ZERO).is_err()); // queued at most once
/// assert_eq!(q.pop(), Some(FlowId(5))); // earliest EDT first
/// assert_eq!(q.pop(), Some(FlowId(3)));
/// assert_eq!(q.pop(), None);
/// ```
#[derive(Clone, Debug)]
pub struct PausedFlows {
    // Hot: touched by every pause and pop.
    entries: Vec<Entry>,
    buckets: Vec<Bucket>,
    /// `buckets.len() - 1` (a power of two minus one; 0 for FIFO).
    mask: u64,
    /// Lower bound of the keys present (absolute slot); every key lies in `[lo, lo + buckets)`.
    lo: u64,
    /// Upper bound of the keys present (absolute slot).
    hi: u64,
    len: usize,
    occupied: OccupancyBitmap,
    /// `None` for FIFO.
    clock: Option<SlotClock>,
    discipline: Discipline,
    counters: PausedCounters,
}

impl PausedFlows {
    /// A queue for flow indices `0..flows` (capped at [`MAX_FLOWS`]). Allocates everything now.
    pub fn new(flows: usize, discipline: Discipline) -> Self {
        let flows = flows.min(MAX_FLOWS);
        let (nbuckets, clock) = match discipline {
            Discipline::Fifo => (1, None),
            Discipline::EdtOrdered {
                granularity,
                buckets,
            } => (
                buckets.clamp(1, MAX_EDT_BUCKETS).next_power_of_two(),
                Some(SlotClock::new(granularity)),
            ),
        };
        PausedFlows {
            entries: vec![
                Entry {
                    next: NOT_QUEUED,
                    key: 0
                };
                flows
            ],
            buckets: vec![Bucket::EMPTY; nbuckets],
            mask: nbuckets as u64 - 1,
            lo: 0,
            hi: 0,
            len: 0,
            occupied: OccupancyBitmap::new(nbuckets),
            clock,
            discipline,
            counters: PausedCounters::default(),
        }
    }

    /// Appends `flow`, whose next packet has EDT `next_edt` (ignored by FIFO). A flow already
    /// queued stays where it is ([`PauseError::AlreadyPaused`], counted).
    pub fn pause(&mut self, flow: FlowId, next_edt: Timestamp) -> Result<(), PauseError> {
        let i = flow.0 as usize;
        let Some(entry) = self.entries.get(i) else {
            self.counters.unknown_flow += 1;
            return Err(PauseError::UnknownFlow);
        };
        if entry.next != NOT_QUEUED {
            self.counters.already_paused += 1;
            return Err(PauseError::AlreadyPaused);
        }
        let slot = self.place(next_edt);
        let b = (slot & self.mask) as usize;
        let bucket = &mut self.buckets[b];
        if bucket.tail == NIL {
            bucket.head = flow.0;
            self.occupied.set(b);
        } else {
            self.entries[bucket.tail as usize].next = flow.0;
        }
        bucket.tail = flow.0;
        self.entries[i] = Entry {
            next: NIL,
            key: slot as u32,
        };
        self.len += 1;
        self.counters.paused += 1;
        Ok(())
    }

    /// The absolute slot a pause at `edt` is filed under, moving the window when it may.
    fn place(&mut self, edt: Timestamp) -> u64 {
        let Some(clock) = self.clock else {
            return 0;
        };
        let s = clock.slot_of(edt);
        let span = self.mask + 1;
        if self.len == 0 {
            self.lo = s;
            self.hi = s;
            return s;
        }
        if s < self.lo {
            if self.hi - s < span {
                self.lo = s;
                return s;
            }
            self.counters.clamped_early += 1;
            return self.lo;
        }
        let s = if s - self.lo >= span {
            self.counters.clamped_late += 1;
            self.lo + span - 1
        } else {
            s
        };
        self.hi = self.hi.max(s);
        s
    }

    /// The first non-empty bucket in key order as (bucket, absolute slot).
    fn first(&self) -> Option<(usize, u64)> {
        if self.len == 0 {
            return None;
        }
        let start = (self.lo & self.mask) as usize;
        let b = self.occupied.next_set_ring(start)?;
        let dist = (b as u64).wrapping_sub(start as u64) & self.mask;
        Some((b, self.lo.saturating_add(dist)))
    }

    /// The flow `pop` would resume, without taking it out.
    pub fn peek(&self) -> Option<FlowId> {
        self.first().map(|(b, _)| FlowId(self.buckets[b].head))
    }

    /// Takes out the head flow: the one to resume.
    pub fn pop(&mut self) -> Option<FlowId> {
        let (b, slot) = self.first()?;
        self.lo = slot;
        let head = self.buckets[b].head;
        let next = self.entries.get(head as usize).map_or(NIL, |e| e.next);
        self.unlink(b, NIL, head, next);
        self.counters.resumed += 1;
        Some(FlowId(head))
    }

    /// Takes `flow` out wherever it is (a flow that went away). False if it was not queued.
    pub fn remove(&mut self, flow: FlowId) -> bool {
        let Some(&entry) = self.entries.get(flow.0 as usize) else {
            return false;
        };
        if entry.next == NOT_QUEUED {
            return false;
        }
        let b = (u64::from(entry.key) & self.mask) as usize;
        let mut prev = NIL;
        let mut cur = self.buckets[b].head;
        while cur != flow.0 {
            match self.entries.get(cur as usize) {
                Some(e) => {
                    prev = cur;
                    cur = e.next;
                }
                None => {
                    debug_assert!(false, "queued flow missing from its bucket");
                    return false;
                }
            }
        }
        self.unlink(b, prev, flow.0, entry.next);
        self.counters.removed += 1;
        true
    }

    /// Unlinks `cur` (followed by `next`, preceded by `prev` or [`NIL`]) from bucket `b`.
    fn unlink(&mut self, b: usize, prev: u32, cur: u32, next: u32) {
        if let Some(p) = self.entries.get_mut(prev as usize) {
            p.next = next;
        } else {
            self.buckets[b].head = next;
        }
        let bucket = &mut self.buckets[b];
        if bucket.tail == cur {
            bucket.tail = prev;
        }
        if bucket.head == NIL {
            self.occupied.clear(b);
        }
        if let Some(e) = self.entries.get_mut(cur as usize) {
            e.next = NOT_QUEUED;
        }
        self.len -= 1;
    }

    /// True if `flow` is queued (paused).
    pub fn contains(&self, flow: FlowId) -> bool {
        self.entries
            .get(flow.0 as usize)
            .is_some_and(|e| e.next != NOT_QUEUED)
    }

    /// Flows queued.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no flow is paused.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Flow indices the queue can hold: `0..capacity()`.
    pub fn capacity(&self) -> usize {
        self.entries.len()
    }

    /// The discipline chosen at construction.
    pub fn discipline(&self) -> Discipline {
        self.discipline
    }

    /// Buckets in the ring (1 for FIFO).
    pub fn bucket_count(&self) -> usize {
        self.buckets.len()
    }

    /// Bytes held: per-flow entries, bucket heads and the bitmap.
    pub fn memory_bytes(&self) -> usize {
        self.entries.capacity() * PER_FLOW_BYTES
            + self.buckets.capacity() * core::mem::size_of::<Bucket>()
            + self.occupied.memory_bytes()
    }

    /// Bytes of state per flow: [`PER_FLOW_BYTES`].
    pub const fn bytes_per_flow() -> usize {
        PER_FLOW_BYTES
    }

    /// The named counters.
    pub fn counters(&self) -> PausedCounters {
        self.counters
    }

    /// Checks the invariants (walks every bucket: for tests): lists well formed and acyclic,
    /// bitmap agrees, every key in its bucket and inside the window, count matches.
    pub fn invariants(&self) {
        let span = self.mask + 1;
        let mut total = 0;
        for (b, bucket) in self.buckets.iter().enumerate() {
            assert_eq!(self.occupied.get(b), bucket.head != NIL, "bitmap at {b}");
            let mut cur = bucket.head;
            let mut last = NIL;
            while cur != NIL {
                let e = self.entries[cur as usize];
                assert_ne!(e.next, NOT_QUEUED, "listed flow marked not queued");
                assert_eq!(
                    u64::from(e.key) & self.mask,
                    b as u64,
                    "key in wrong bucket"
                );
                let off = e.key.wrapping_sub(self.lo as u32);
                assert!(u64::from(off) < span, "key outside the window");
                total += 1;
                assert!(total <= self.len, "cycle or miscount");
                last = cur;
                cur = e.next;
            }
            assert_eq!(bucket.tail, last, "tail");
        }
        assert_eq!(total, self.len);
        let queued = self.entries.iter().filter(|e| e.next != NOT_QUEUED).count();
        assert_eq!(queued, self.len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ns: u64) -> Timestamp {
        Timestamp::from_nanos(ns)
    }

    fn drain(q: &mut PausedFlows) -> Vec<u32> {
        let mut v = Vec::new();
        while let Some(f) = q.pop() {
            q.invariants();
            v.push(f.0);
        }
        v
    }

    #[test]
    fn fifo_resumes_in_pause_order() {
        let mut q = PausedFlows::new(8, Discipline::Fifo);
        for f in [4, 1, 7, 0] {
            q.pause(FlowId(f), t(100 - u64::from(f))).unwrap();
        }
        q.invariants();
        assert_eq!(q.len(), 4);
        assert_eq!(q.peek(), Some(FlowId(4)));
        assert_eq!(drain(&mut q), vec![4, 1, 7, 0]);
        assert!(q.is_empty());
    }

    #[test]
    fn edt_order_with_fifo_ties() {
        let g = 1_000;
        let mut q = PausedFlows::new(
            8,
            Discipline::EdtOrdered {
                granularity: Duration::from_nanos(g),
                buckets: 16,
            },
        );
        q.pause(FlowId(0), t(5 * g)).unwrap();
        q.pause(FlowId(1), t(2 * g + 10)).unwrap();
        q.pause(FlowId(2), t(5 * g + 999)).unwrap(); // same slot as flow 0
        q.pause(FlowId(3), t(g)).unwrap(); // earlier than lo: window moves back
        q.invariants();
        assert_eq!(drain(&mut q), vec![3, 1, 0, 2]);
        assert_eq!(q.counters().clamped_early + q.counters().clamped_late, 0);
    }

    #[test]
    fn pause_twice_and_unknown_flows_are_counted_no_ops() {
        let mut q = PausedFlows::new(2, Discipline::Fifo);
        q.pause(FlowId(1), t(0)).unwrap();
        assert_eq!(q.pause(FlowId(1), t(0)), Err(PauseError::AlreadyPaused));
        assert_eq!(q.pause(FlowId(2), t(0)), Err(PauseError::UnknownFlow));
        assert_eq!(
            q.pause(FlowId(u32::MAX), t(0)),
            Err(PauseError::UnknownFlow)
        );
        assert!(!q.remove(FlowId(u32::MAX)));
        assert!(!q.contains(FlowId(u32::MAX)));
        let c = q.counters();
        assert_eq!((c.paused, c.already_paused, c.unknown_flow), (1, 1, 2));
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn remove_from_middle_head_and_tail() {
        let mut q = PausedFlows::new(8, Discipline::Fifo);
        for f in 0..5 {
            q.pause(FlowId(f), t(0)).unwrap();
        }
        assert!(q.remove(FlowId(2)));
        assert!(q.remove(FlowId(0)));
        assert!(q.remove(FlowId(4)));
        assert!(!q.remove(FlowId(4)));
        q.invariants();
        q.pause(FlowId(6), t(0)).unwrap();
        assert_eq!(drain(&mut q), vec![1, 3, 6]);
        assert_eq!(q.counters().removed, 3);
    }

    #[test]
    fn window_clamps_are_counted_and_nothing_is_lost() {
        let mut q = PausedFlows::new(
            8,
            Discipline::EdtOrdered {
                granularity: Duration::from_nanos(1),
                buckets: 4,
            },
        );
        q.pause(FlowId(0), t(10)).unwrap();
        q.pause(FlowId(1), t(100)).unwrap(); // beyond the window: slot 13
        q.pause(FlowId(2), t(0)).unwrap(); // window cannot move back: slot 10, behind flow 0
        q.pause(FlowId(3), t(12)).unwrap();
        q.invariants();
        let c = q.counters();
        assert_eq!((c.clamped_late, c.clamped_early), (1, 1));
        assert_eq!(drain(&mut q), vec![0, 2, 3, 1]);
    }

    #[test]
    fn bytes_per_flow_and_memory() {
        assert_eq!(PausedFlows::bytes_per_flow(), 8);
        let q = PausedFlows::new(20_000, Discipline::Fifo);
        assert!(q.memory_bytes() < 160_000 + 64, "{}", q.memory_bytes());
        let q = PausedFlows::new(20_000, Discipline::edt_ordered());
        assert_eq!(q.bucket_count(), DEFAULT_EDT_BUCKETS);
        assert_eq!(
            q.memory_bytes(),
            20_000 * 8 + DEFAULT_EDT_BUCKETS * 8 + OccupancyBitmap::bytes_for(DEFAULT_EDT_BUCKETS)
        );
    }

    #[test]
    fn degenerate_configurations_do_not_panic() {
        let mut q = PausedFlows::new(
            0,
            Discipline::EdtOrdered {
                granularity: Duration::ZERO,
                buckets: 0,
            },
        );
        assert_eq!(
            q.pause(FlowId(0), Timestamp::MAX),
            Err(PauseError::UnknownFlow)
        );
        assert_eq!(q.pop(), None);
        let mut q = PausedFlows::new(
            2,
            Discipline::EdtOrdered {
                granularity: Duration::from_nanos(1),
                buckets: 3,
            },
        );
        assert_eq!(q.bucket_count(), 4);
        q.pause(FlowId(0), Timestamp::MAX).unwrap();
        q.pause(FlowId(1), Timestamp::ZERO).unwrap();
        q.invariants();
        assert_eq!(drain(&mut q), vec![0, 1]);
    }
}
