//! Carousel's single time-indexed queue: a timing wheel (Carousel §5.1.2, Algorithm 1).
//!
//! `horizon / granularity` slots from the front to the horizon, slot `s` holding the packets whose
//! EDT rounds down to `s` ([`SlotClock::slot_of`]); O(1) insertion and extraction, FIFO within a
//! slot, the horizon's overflow per [`HorizonPolicy`]. Generic over the slot store ([`SlotStore`]):
//! [`TimingWheel`] uses [`PoolSlots`] (the Global Pool, [`crate::pool`]), [`TimingWheelList`] the
//! per-packet [`ListSlots`] of Carousel Table 1's STDLIST row.
//!
//! Where it departs from Algorithm 1: a batch per extraction, empty slots skipped with an
//! [`OccupancyBitmap`], the front never past the latest `now`'s slot, an empty wheel's front
//! jumping to `now`. The reasons: `docs/design/carousel.md`.

use crate::bitmap::OccupancyBitmap;
use crate::packet::PacketRef;
use crate::pool::{NodePool, SlotList, NODE_BYTES};
use crate::queue::{EdtQueue, HorizonPolicy, QueueCounters, RejectReason, Rejected};
use crate::time::{Duration, SlotClock, Timestamp};
use std::collections::LinkedList;

/// Configuration of a timing wheel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimingWheelConfig {
    /// Slot granularity g_min. Default 2 µs (Carousel §7.1.3, Figure 17 and Table 1).
    pub granularity: Duration,
    /// Time covered from the front to the last slot. Default 2 s (Carousel §7.1.3). The wheel has
    /// `ceil(horizon / granularity)` slots.
    pub horizon: Duration,
    /// What happens to an EDT beyond the horizon. Default: clamp to the last slot.
    pub horizon_policy: HorizonPolicy,
    /// Packets the preallocated pool must always hold, however they spread over slots (the pool
    /// gets [`NodePool::nodes_for`] nodes). Default 1 Mi packets. Ignored by [`ListSlots`].
    pub pool_packets: usize,
}

impl Default for TimingWheelConfig {
    fn default() -> Self {
        TimingWheelConfig {
            granularity: Duration::from_micros(2),
            horizon: Duration::from_secs(2),
            horizon_policy: HorizonPolicy::Clamp,
            pool_packets: 1 << 20,
        }
    }
}

impl TimingWheelConfig {
    /// Number of slots: `ceil(horizon / granularity)`, at least one.
    pub fn slots(&self) -> usize {
        let g = self.granularity.as_nanos().max(1);
        self.horizon.as_nanos().div_ceil(g).max(1) as usize
    }
}

/// How a wheel stores the references of each slot. Implemented by [`PoolSlots`] and
/// [`ListSlots`].
pub trait SlotStore {
    /// The structure's name in reports.
    const NAME: &'static str;
    /// A store of `slots` empty slots able to hold `pool_packets` packets.
    fn new(slots: usize, pool_packets: usize) -> Self;
    /// Appends `pkt` to slot `slot`, or hands it back when there is no room. `Ok(true)` when
    /// the slot was empty before (so the wheel marks it occupied only then).
    fn push(&mut self, slot: usize, pkt: PacketRef) -> Result<bool, PacketRef>;
    /// Moves up to `out.len()` references from the front of `slot` into `out`.
    fn drain(&mut self, slot: usize, out: &mut [PacketRef]) -> usize;
    /// True if `slot` holds nothing.
    fn slot_is_empty(&self, slot: usize) -> bool;
    /// Bytes held.
    fn memory_bytes(&self) -> usize;
    /// Bytes spent on the packets queued now.
    fn packet_bytes(&self) -> usize;
    /// Bytes of the slot array alone for `slots` slots, computed without building it.
    fn structure_bytes(slots: usize) -> usize;
}

/// Slots as chains of pooled multi-reference nodes: Carousel's Global Pool.
pub struct PoolSlots {
    slots: Vec<SlotList>,
    pool: NodePool,
}

impl SlotStore for PoolSlots {
    const NAME: &'static str = "timing_wheel";

    fn new(slots: usize, pool_packets: usize) -> Self {
        PoolSlots {
            slots: vec![SlotList::EMPTY; slots],
            pool: NodePool::new(NodePool::nodes_for(pool_packets, slots)),
        }
    }
    #[inline(always)]
    fn push(&mut self, slot: usize, pkt: PacketRef) -> Result<bool, PacketRef> {
        let list = &mut self.slots[slot];
        let was_empty = list.is_empty();
        self.pool.push_back(list, pkt).map(|()| was_empty)
    }
    #[inline]
    fn drain(&mut self, slot: usize, out: &mut [PacketRef]) -> usize {
        self.pool.drain_into(&mut self.slots[slot], out)
    }
    #[inline]
    fn slot_is_empty(&self, slot: usize) -> bool {
        self.slots[slot].is_empty()
    }
    fn memory_bytes(&self) -> usize {
        self.slots.capacity() * core::mem::size_of::<SlotList>() + self.pool.memory_bytes()
    }
    fn packet_bytes(&self) -> usize {
        self.pool.nodes_in_use() * NODE_BYTES
    }
    fn structure_bytes(slots: usize) -> usize {
        slots * core::mem::size_of::<SlotList>()
    }
}

/// Bytes of one `LinkedList` node holding a [`PacketRef`]: two links and the reference, as
/// `std::collections::LinkedList` lays it out (allocator headers not counted).
pub const LIST_NODE_BYTES: usize = 2 * core::mem::size_of::<usize>() + 16;

/// Slots as linked lists that allocate a node per packet: Carousel Table 1's "STDLIST".
pub struct ListSlots {
    slots: Vec<LinkedList<PacketRef>>,
    len: usize,
}

impl SlotStore for ListSlots {
    const NAME: &'static str = "timing_wheel_list";

    fn new(slots: usize, _pool_packets: usize) -> Self {
        let mut v = Vec::with_capacity(slots);
        v.resize_with(slots, LinkedList::new);
        ListSlots { slots: v, len: 0 }
    }
    fn push(&mut self, slot: usize, pkt: PacketRef) -> Result<bool, PacketRef> {
        let list = &mut self.slots[slot];
        let was_empty = list.is_empty();
        list.push_back(pkt);
        self.len += 1;
        Ok(was_empty)
    }
    fn drain(&mut self, slot: usize, out: &mut [PacketRef]) -> usize {
        let list = &mut self.slots[slot];
        let mut n = 0;
        while n < out.len() {
            match list.pop_front() {
                Some(p) => {
                    out[n] = p;
                    n += 1;
                }
                None => break,
            }
        }
        self.len -= n;
        n
    }
    fn slot_is_empty(&self, slot: usize) -> bool {
        self.slots[slot].is_empty()
    }
    fn memory_bytes(&self) -> usize {
        self.slots.capacity() * core::mem::size_of::<LinkedList<PacketRef>>() + self.packet_bytes()
    }
    fn packet_bytes(&self) -> usize {
        self.len * LIST_NODE_BYTES
    }
    fn structure_bytes(slots: usize) -> usize {
        slots * core::mem::size_of::<LinkedList<PacketRef>>()
    }
}

/// A timing wheel over slot store `S`. Use it through [`TimingWheel`] (the global pool) or
/// [`TimingWheelList`] (per-packet lists).
///
/// Fields are grouped by access: the hot per-packet state (`front_slot`, `front_pos`, `slots`,
/// `len`) first, then the bitmap and the store.
pub struct GenericTimingWheel<S: SlotStore> {
    /// Absolute slot number of the front (the earliest slot that may hold packets).
    front_slot: u64,
    /// Ring position of the front: `front_slot % slots`.
    front_pos: usize,
    /// Ring size.
    slots: usize,
    /// Packets queued.
    len: usize,
    clock: SlotClock,
    policy: HorizonPolicy,
    occupied: OccupancyBitmap,
    store: S,
    counters: QueueCounters,
    /// Latest `now` seen, to check that time never goes backwards.
    last_now: Timestamp,
}

/// Carousel's timing wheel: slots of pooled multi-reference nodes.
///
/// ```
/// use metronome_core::{EdtQueue, TimingWheel, TimingWheelConfig, PacketRef, FlowId, ClassId,
///                      Timestamp, Duration};
///
/// let mut wheel = TimingWheel::new(TimingWheelConfig {
///     granularity: Duration::from_micros(2),
///     horizon: Duration::from_millis(10),
///     pool_packets: 1024,
///     ..Default::default()
/// });
/// let now = Timestamp::from_nanos(1_000_000);
/// let pkt = PacketRef::new(7, FlowId(1), ClassId(0), 1500);
/// wheel.enqueue(now, now + Duration::from_micros(30), pkt).unwrap();
/// assert_eq!(wheel.next_due(), Some(Timestamp::from_nanos(1_030_000)));
///
/// let mut out = [PacketRef::default(); 32];
/// assert_eq!(wheel.dequeue(now, &mut out), 0); // not yet
/// let later = now + Duration::from_micros(30);
/// assert_eq!(wheel.dequeue(later, &mut out), 1);
/// assert_eq!(out[0].id, 7);
/// ```
pub type TimingWheel = GenericTimingWheel<PoolSlots>;

/// The timing wheel with per-packet allocating lists (baseline).
pub type TimingWheelList = GenericTimingWheel<ListSlots>;

impl<S: SlotStore> GenericTimingWheel<S> {
    /// Builds a wheel. Allocates the slot array, the bitmap and the pool up front.
    pub fn new(config: TimingWheelConfig) -> Self {
        let slots = config.slots();
        GenericTimingWheel {
            front_slot: 0,
            front_pos: 0,
            slots,
            len: 0,
            clock: SlotClock::new(config.granularity),
            policy: config.horizon_policy,
            occupied: OccupancyBitmap::new(slots),
            store: S::new(slots, config.pool_packets),
            counters: QueueCounters::default(),
            last_now: Timestamp::ZERO,
        }
    }

    /// Bytes of the fixed structure (slot array and bitmap, no pool) for `config`, computed from
    /// the same layout as [`GenericTimingWheel::new`] without allocating it.
    pub fn structure_bytes(config: &TimingWheelConfig) -> usize {
        let slots = config.slots();
        S::structure_bytes(slots) + OccupancyBitmap::bytes_for(slots)
    }

    /// The slot granularity.
    pub fn granularity(&self) -> Duration {
        self.clock.granularity()
    }

    /// Number of slots.
    pub fn slot_count(&self) -> usize {
        self.slots
    }

    /// Ring position of absolute slot `slot`, which must lie in `[front_slot, front_slot + slots)`.
    #[inline]
    fn pos_of(&self, slot: u64) -> usize {
        let pos = self.front_pos + (slot - self.front_slot) as usize;
        if pos >= self.slots {
            pos - self.slots
        } else {
            pos
        }
    }

    /// Moves the front forward to absolute slot `slot` (all slots in between are empty).
    fn advance_front_to(&mut self, slot: u64) {
        if slot <= self.front_slot {
            return;
        }
        let delta = slot - self.front_slot;
        self.front_pos = if delta < self.slots as u64 {
            self.pos_of(slot)
        } else {
            ((self.front_pos as u64 + delta % self.slots as u64) % self.slots as u64) as usize
        };
        self.front_slot = slot;
    }

    /// The earliest occupied slot as (absolute slot, ring position).
    #[inline]
    fn first_occupied(&self) -> Option<(u64, usize)> {
        let pos = self.occupied.next_set_ring(self.front_pos)?;
        let dist = if pos >= self.front_pos {
            pos - self.front_pos
        } else {
            pos + self.slots - self.front_pos
        };
        Some((self.front_slot + dist as u64, pos))
    }

    /// Checks, in debug builds, that time never goes backwards (CONTRIBUTING.md §10). Release
    /// builds skip it: the wheel's behaviour does not depend on it.
    #[inline(always)]
    fn observe(&mut self, now: Timestamp) {
        if cfg!(debug_assertions) {
            debug_assert!(now >= self.last_now, "time went backwards");
            self.last_now = self.last_now.max(now);
        }
    }

    /// Checks the wheel's invariants (walks every slot: for tests).
    pub fn invariants(&self) {
        let mut total = 0;
        for pos in 0..self.slots {
            let empty = self.store.slot_is_empty(pos);
            assert_eq!(self.occupied.get(pos), !empty, "bitmap disagrees at {pos}");
            if !empty {
                total += 1;
            }
        }
        assert!(total <= self.len);
        assert!(self.front_pos < self.slots);
        assert_eq!(self.len == 0, self.occupied.is_empty());
    }
}

impl<S: SlotStore> EdtQueue for GenericTimingWheel<S> {
    fn name(&self) -> &'static str {
        S::NAME
    }

    // Inlined into the caller's loop so the reference travels in registers: passed through
    // memory, its 12 bytes are re-read right after being written field by field, and the failed
    // store-to-load forwarding costs more than the rest of the enqueue.
    #[inline(always)]
    fn enqueue(&mut self, now: Timestamp, edt: Timestamp, pkt: PacketRef) -> Result<(), Rejected> {
        self.observe(now);
        if self.len == 0 {
            self.advance_front_to(self.clock.slot_of(now));
        }
        let mut slot = self.clock.slot_of(edt);
        if slot < self.front_slot {
            slot = self.front_slot;
            self.counters.past_due += 1;
        } else if slot - self.front_slot >= self.slots as u64 {
            match self.policy {
                HorizonPolicy::Clamp => {
                    slot = self.front_slot + self.slots as u64 - 1;
                    self.counters.clamped_beyond_horizon += 1;
                }
                HorizonPolicy::Reject => {
                    let reason = RejectReason::BeyondHorizon;
                    self.counters.count_rejection(reason);
                    return Err(Rejected { pkt, reason });
                }
            }
        }
        let pos = self.pos_of(slot);
        match self.store.push(pos, pkt) {
            // Only a slot's first packet touches the bitmap.
            Ok(true) => self.occupied.set(pos),
            Ok(false) => {}
            Err(pkt) => {
                // A packet handed back was placed nowhere: its placement is not counted. Undone
                // here, on this rare path, so the accepted path counts in its branches only.
                let wanted = self.clock.slot_of(edt);
                if wanted < self.front_slot {
                    self.counters.past_due -= 1;
                } else if wanted - self.front_slot >= self.slots as u64 {
                    self.counters.clamped_beyond_horizon -= 1;
                }
                let reason = RejectReason::PoolExhausted;
                self.counters.count_rejection(reason);
                return Err(Rejected { pkt, reason });
            }
        }
        self.len += 1;
        self.counters.enqueued += 1;
        Ok(())
    }

    #[inline]
    fn dequeue(&mut self, now: Timestamp, out: &mut [PacketRef]) -> usize {
        self.observe(now);
        let now_slot = self.clock.slot_of(now);
        let mut n = 0;
        let mut stopped_full = false;
        while let Some((slot, pos)) = self.first_occupied() {
            if slot > now_slot {
                break;
            }
            if n == out.len() {
                stopped_full = true;
                break;
            }
            self.front_slot = slot;
            self.front_pos = pos;
            let k = self.store.drain(pos, &mut out[n..]);
            n += k;
            self.len -= k;
            if !self.store.slot_is_empty(pos) {
                stopped_full = true;
                break;
            }
            self.occupied.clear(pos);
        }
        if !stopped_full {
            // Everything due is out: the front moves up to now (never past it).
            self.advance_front_to(now_slot);
        }
        self.counters.dequeued += n as u64;
        if n > 0 {
            self.counters.nonempty_dequeues += 1;
        }
        n
    }

    fn next_due(&self) -> Option<Timestamp> {
        if self.len == 0 {
            return None;
        }
        self.first_occupied()
            .map(|(slot, _)| self.clock.start_of(slot))
    }

    fn len(&self) -> usize {
        self.len
    }

    fn memory_bytes(&self) -> usize {
        core::mem::size_of::<Self>() + self.occupied.memory_bytes() + self.store.memory_bytes()
    }

    fn packet_bytes(&self) -> usize {
        self.store.packet_bytes()
    }

    fn counters(&self) -> QueueCounters {
        self.counters
    }
}

#[cfg(test)]
mod tests;
