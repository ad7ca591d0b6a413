//! Fair queueing inside a rate-limited class (`fair = true`): the engine's part of
//! [`metronome_core::fair_queue`] (Carousel §5.1's aggregate timestamps, NicPic §3's on-demand
//! pulls with fair sharing, FlowBundler §IV's per-flow buckets).
//!
//! A packet of a fair class is **not stamped on arrival**. After classification and the flow
//! table, it joins its flow's queue in the class's [`FairQueue`] (the flow is its flow-table
//! entry; a packet with no entry goes to the class's overflow flow, counted under
//! `fair_overflow`). The class's aggregate policy still decides *when* the class may send its
//! next bytes: whenever it has credit (its earliest departure for a full frame,
//! `PolicyStack::peek`, is not after `now`), [`Engine::fair_pull`] asks deficit round robin
//! *which* flow's packet leaves — deficit round robin with rounds, a flow that comes back with
//! credit left in the current round first, so a sparse flow below its share waits for no
//! backlogged flow, not the class's whole backlog — and stamps it with the usual [`PolicyStack`]
//! (aggregate and, when the class paces, the flow's own pacing policy). Its EDT is normally due
//! at once; a flow's pacing may put it later, and then it waits in the wheel while the class
//! goes on with other flows. [`Engine::next_due`] includes each backlogged fair class's next
//! credit time, so the loop wakes for it (CONTRIBUTING.md §3).
//!
//! **Sparse packets leave at once.** Right after a pull the aggregate holds the class for the
//! pulled packet's wire time at the class's rate (a piece of up to `gso_burst`, about 1 ms at
//! 100 Mbit/s), so a sparse flow's packet arriving then would wait for it, however empty its own
//! queue. [`Engine::fair_send_sparse`] sends such a packet at once instead: a frame of at most
//! one quantum, of a flow with nothing in the fair queue or the wheel and credit left in the
//! class's round ([`FairQueue::charge_sparse`], so deficit round robin's bound per round holds
//! for it). Its bytes are charged to the aggregate, so the class's next pull moves later by its
//! wire time and the class's rate over any window longer than a piece is unchanged. At most
//! one quantum (one full frame) of such bytes per pull: a sparse packet that would pass it is
//! queued until the class's next pull, so at any moment the class is at most one frame ahead of
//! what its aggregate alone would send, however many sparse flows there are (`fq_codel` and
//! `fq` serve a new flow first; here it also skips the class's wait). Counted in
//! `fair_sparse_early`.
//!
//! **Stamping time.** A pulled packet is stamped as of the moment its class's fair queue last
//! became non-empty (the arrival of the packet that found it empty), not of the pull nor of its
//! own arrival: a loop that pulls late still gives the aggregate its full rate (the bytes of a
//! backlogged class follow each other at exactly the rate, from the aggregate's last timestamp),
//! also when the packet chosen arrived after others of the class (its flow was owed its share: a
//! stamp as of its own arrival would skip the time the class waited with older packets queued),
//! and an idle class's first packet gets its arrival time, as a FIFO class's does. The wheel is given the
//! real `now`.
//!
//! **Backpressure per flow.** `drop` counts the flow's packets in the fair queue and the wheel
//! against its `limit`, as for a FIFO class. `ecn` looks at the flow's *own* queueing delay: the
//! sojourn of the packet at the head of its flow's queue when this one arrives
//! ([`FairQueue::flow_sojourn`]); above `threshold` the arriving packet is marked CE. A sparse
//! flow, whose queue is empty, is never marked; a bulk flow with a standing queue is.
//! A packet waiting in the fair queue has no EDT yet, so the horizon cannot refuse it; instead
//! the class sheds from its **fattest flow** (the flow with the most bytes queued, from the head,
//! as `fq_codel` does) when the frame pool's small or large slots are nearly all in use, or,
//! under `horizon_policy = "reject"`, when the class's queued bytes would take longer than the
//! horizon at its rate. Refusing the arriving packet instead would hit a sparse flow as hard as
//! a bulk one, and a full pool refuses every arriving frame before the engine sees it. Counted
//! in `fair_dropped_fattest`.
//!
//! **Super-frames** are one unit of the fair queue (charged their wire bytes); when one is
//! pulled it is cut into pieces ([`crate::pieces`]) and every piece is stamped and put in the
//! wheel then. So a packet of another flow can wait behind the whole super-frame, at most its
//! wire time at the class's rate (the kernel sizes a TSO burst to about 1 ms of the flow's
//! pacing rate; `gso_burst` bounds a piece, not the frame).
//!
//! **Accounting** (CONTRIBUTING.md §11). A frame in a fair queue is counted under
//! `fair_enqueued`, then `fair_pulled` (into the wheel, where it counts as `enqueued`) or
//! `fair_discarded_at_stop` or `fair_dropped_fattest`; a sparse packet sent at once goes straight
//! into the wheel (`enqueued`), counted in `fair_sparse_early` and not in `fair_enqueued`.
//! [`Engine::invariants`] checks
//! `received = forwarded + enqueued frames + dropped + fair queued + fair discarded at stop`
//! (`dropped` includes `fair_dropped_fattest`) and
//! `fair_enqueued = fair_pulled + fair_discarded_at_stop + fair_dropped_fattest + fair queued`.
//! A pull needs room in the wheel for all its entries; without it the class waits for the next
//! release (the wheel is not empty), so nothing is dropped at a pull.
//!
//! **Reload.** `fair` may change live. Packets already in a class's fair queue stay there and are
//! pulled by deficit round robin until it is empty, whatever the class's new `fair`; packets in
//! the wheel leave at their EDT. With `fair = false` new packets are stamped on arrival.

use super::{clamp_u32, cut_segments, Engine, NO_ENTRY};
use crate::config::{Backpressure, Config};
use crate::flow_table::FLOW_TABLE_CAPACITY;
use crate::metrics::{DropReason, FairClassMetrics};
use metronome_core::timestamp::PolicyStack;
use metronome_core::{
    ClassId, EdtQueue, FairQueue, FairQueueConfig, FlowId, HorizonPolicy, PacketRef, Timestamp,
};
use metronome_io::FramePool;
use metronome_packet::{Parsed, SuperFrame};

/// Most packets one [`Engine::fair_pull`] takes from one class: a transmit batch.
const PULL_BATCH: usize = crate::config::MAX_BATCH_SIZE;

/// `slot_step` of a pool slot whose super-frame waits in a fair queue with a cut in
/// `Fair::cuts` (a real step is a piece's spacing in ns, far below this).
const PENDING_CUT: u64 = u64::MAX;

/// A fair class sheds from its fattest flow when fewer than 1/`POOL_RESERVE` of the frame
/// pool's small slots are free: the receive path then still finds slots for the
/// arriving packets of sparse flows (`fq_codel` drops from its fattest flow at its limit instead
/// of refusing the arriving packet). 1/8: one eighth of the pool's frames.
const POOL_RESERVE: usize = 8;

/// A fair class sheds from its fattest flow when fewer than 1/`LARGE_RESERVE` of the pool's
/// large slots are free: a queued super-frame holds its large slot until its flow's turn, so with
/// as many backlogged flows as large slots every slot is held and arriving super-frames are
/// refused (`rx_no_large_slot`) whatever their flow. 1/32 is 8 of the default 256 slots;
/// measured with `metronome compare --target 100mbit,1gbit --flows 256` on a loaded 2-core
/// machine (docs/results/daemon.md): 1/8 gave the same Jain's index (0.997) and a lower rate at
/// 1 Gbit/s (938 against 990 Mbit/s), no large-slot shedding a Jain's index of 0.76-0.95.
const LARGE_RESERVE: usize = 32;

/// Most frames one [`Engine::fair_shed`] drops (`fq_codel`'s `drop_batch_size`: 64).
const SHED_BATCH: usize = 64;

/// Why a fair class sheds ([`Engine::fair_pressure`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pressure {
    /// Few small slots free.
    Pool,
    /// Few large slots free (super-frames).
    Large,
    /// The class's queued bytes exceed the horizon at its rate (`horizon_policy = "reject"`).
    Horizon,
    /// The class holds more than its `queue` bounds (frames or wire bytes).
    Bound,
}

/// A super-frame's cut, kept while it waits in a fair queue.
#[derive(Clone, Copy, Debug)]
struct PendingCut {
    sf: SuperFrame,
    max_segments: u32,
    pieces: u32,
}

/// The engine's fair-queueing state: empty (nothing allocated) until a class is fair.
#[derive(Debug, Default)]
pub(super) struct Fair {
    queue: Option<FairQueue>,
    /// Class state indices that are fair or still hold packets in the fair queue.
    active: Vec<u16>,
    /// The cut of each pool slot's super-frame waiting in a fair queue.
    cuts: Vec<Option<PendingCut>>,
    /// Packets of each class (by state index) that went to the overflow flow.
    overflowed: Vec<u64>,
    /// Per class (by state index): when its fair queue last went from empty to holding a
    /// packet (the arrival of that packet); the time its pulls are stamped as of.
    busy_since: Vec<Timestamp>,
    /// The series of each class that is or was fair (by state index).
    metrics: Vec<Option<FairClassMetrics>>,
    /// Pool slots of the engine (the fair queue's packet ids).
    pool_slots: usize,
    /// Packets the wheel holds at most (its node pool's guarantee).
    wheel_packets: usize,
    /// Pulled frames the wheel refused, to free at the next call that holds the pool.
    orphans: Vec<u32>,
    /// Per class (by state index): bytes of sparse packets sent at once
    /// ([`Engine::fair_send_sparse`]) since the class's last pull, at most one quantum.
    sparse_bytes: Vec<u32>,
}

impl Fair {
    /// The state for an engine of `pool_slots` frames and a wheel of `wheel_packets` packets.
    pub(super) fn new(pool_slots: usize, wheel_packets: usize) -> Fair {
        Fair {
            pool_slots,
            wheel_packets,
            ..Fair::default()
        }
    }

    /// Frames held in fair queues.
    pub(super) fn len(&self) -> u64 {
        self.queue.as_ref().map_or(0, FairQueue::len)
    }
}

impl Engine {
    /// Sizes the fair queues for the installed classes (start-up and reload: allocates the first
    /// time a class is fair) and lists the classes to pull from.
    pub(super) fn fair_configure(&mut self, config: &Config) {
        let any_fair = self.classes.iter().any(|s| s.policy.fair);
        let f = &mut self.fair;
        if f.queue.is_none() && any_fair {
            let quantum = config.interfaces.mtu.saturating_add(14).max(1);
            f.queue = FairQueue::new(FairQueueConfig {
                packets: u32::try_from(f.pool_slots).unwrap_or(u32::MAX - 2),
                flows: FLOW_TABLE_CAPACITY as u32,
                classes: 0,
                quantum,
            })
            .ok();
            f.cuts = vec![None; f.pool_slots];
        }
        let Some(q) = f.queue.as_mut() else {
            return;
        };
        let n = u16::try_from(self.classes.len()).unwrap_or(u16::MAX);
        q.set_classes(n);
        f.overflowed.resize(self.classes.len(), 0);
        f.busy_since.resize(self.classes.len(), Timestamp::ZERO);
        f.sparse_bytes.resize(self.classes.len(), 0);
        f.metrics.resize(self.classes.len(), None);
        f.active.clear();
        for (i, state) in self.classes.iter().enumerate() {
            let held = q.class_packets(ClassId(i as u16)) > 0;
            if (state.policy.fair && state.aggregate.is_some()) || held {
                f.active.push(i as u16);
                if f.metrics[i].is_none() {
                    f.metrics[i] = Some(self.metrics.fair_class(&state.name));
                }
            }
        }
    }

    /// Queues a packet of fair class `index` (slot `id`, `len` wire bytes) in its flow's queue,
    /// after the flow-limit check; marks it CE when its flow's own queueing delay is above the
    /// `ecn` threshold. Called by `Engine::shape` instead of stamping; the next
    /// [`Engine::release`] pulls it (the loop releases after every receive).
    pub(super) fn fair_enqueue(
        &mut self,
        now: Timestamp,
        pool: &mut FramePool,
        (id, index, entry): (u32, usize, Option<u32>),
        (len, superframe): (u64, Option<SuperFrame>),
        parsed: &Parsed,
    ) {
        let policy = self.classes[index].policy;
        if self.fair.queue.is_none() {
            // Not reachable: a fair class allocates the queue when installed.
            return self.drop(pool, id, index, DropReason::QueueFull);
        }
        let class = ClassId(index as u16);
        if superframe.is_none() && self.fair_send_sparse(now, (id, index, entry), len) {
            return;
        }
        let Some(q) = self.fair.queue.as_mut() else {
            return self.drop(pool, id, index, DropReason::QueueFull);
        };
        let flow_index = entry.unwrap_or(NO_ENTRY);
        if let Backpressure::Ecn { threshold } = policy.backpressure {
            if q.flow_sojourn(flow_index, now) > threshold {
                self.mark_ecn(pool, id, index, parsed);
            }
        }
        let q = self.fair.queue.as_mut().expect("checked above");
        if q.class_packets(class) == 0 {
            if let Some(b) = self.fair.busy_since.get_mut(index) {
                *b = now;
            }
        }
        let q = self.fair.queue.as_mut().expect("checked above");
        match q.enqueue(now, class, entry, id, clamp_u32(len)) {
            Ok(placed) => {
                if placed.overflow {
                    self.counters.fair_overflow += 1;
                    if let Some(o) = self.fair.overflowed.get_mut(index) {
                        *o += 1;
                    }
                    if let Some(Some(m)) = self.fair.metrics.get(index) {
                        m.overflowed();
                    }
                }
            }
            Err(_) => return self.drop(pool, id, index, DropReason::QueueFull),
        }
        self.counters.fair_enqueued += 1;
        self.classes[index].stamped_bytes += len;
        if let Some(e) = entry {
            self.flows.add_queued(e);
        }
        let i = id as usize;
        if let Some(slot) = self.slot_entry.get_mut(i) {
            *slot = entry.unwrap_or(NO_ENTRY);
        }
        if let Some(slot) = self.slot_wire.get_mut(i) {
            *slot = clamp_u32(len);
        }
        let cut = superframe.and_then(|sf| {
            let max_segments = cut_segments(&sf, &policy);
            let pieces = sf.pieces(max_segments);
            (pieces > 1).then_some(PendingCut {
                sf,
                max_segments,
                pieces,
            })
        });
        // Only a frame to cut touches `cuts`; its mark is in `slot_step`, which the pull writes
        // anyway (CONTRIBUTING.md §5: one cache line less per packet).
        if let (Some(cut), Some(slot)) = (cut, self.fair.cuts.get_mut(i)) {
            *slot = Some(cut);
            if let Some(step) = self.slot_step.get_mut(i) {
                *step = PENDING_CUT;
            }
        }
        self.fair_shed(now, pool, index);
    }

    /// Sends packet `id` (`len` wire bytes, one frame) of fair class `index` at once when its flow
    /// is sparse and the class's aggregate would otherwise hold it: the flow has no packet in the
    /// fair queue or the wheel, has credit left in the class's round
    /// ([`FairQueue::charge_sparse`]), its own pacing (if any) lets it go now, the frame is at
    /// most one quantum, and with the sparse packets sent this way since the class's last pull
    /// it makes at most one quantum. Its bytes are charged to the aggregate (the class's next
    /// pull moves later by its wire time), so the class's rate over any window longer than a
    /// piece is unchanged, and the class sends at most one quantum beyond what the aggregate
    /// allows at any moment.
    /// It enters the wheel due at `now`, counted in `fair_sparse_early` (not in `fair_enqueued`).
    /// Returns false, changing nothing, when it must be queued.
    fn fair_send_sparse(
        &mut self,
        now: Timestamp,
        (id, index, entry): (u32, usize, Option<u32>),
        len: u64,
    ) -> bool {
        let Some(e) = entry else {
            return false;
        };
        let Some(q) = self.fair.queue.as_ref() else {
            return false;
        };
        let len32 = clamp_u32(len);
        let sent = self
            .fair
            .sparse_bytes
            .get(index)
            .copied()
            .unwrap_or(u32::MAX);
        if sent.saturating_add(len32) > q.quantum()
            || self.flows.queued(e) > 0
            || self.wheel.len() >= self.fair.wheel_packets
        {
            return false;
        }
        let Some(state) = self.classes.get(index) else {
            return false;
        };
        let (aggregate_id, policy) = (state.aggregate, state.policy);
        let aggregate = PolicyStack::new(aggregate_id, None);
        let due = aggregate.peek(&self.stamper, now, now, len32);
        // Due now: the usual pull sends it at once. Paused: nothing may leave.
        if due <= now || due == Timestamp::MAX {
            return false;
        }
        let pacing = match policy.pacing {
            Some(rate) => self
                .flows
                .pacing_policy(e, &mut self.stamper, rate, policy.burst),
            None => None,
        };
        if PolicyStack::new(None, pacing).peek(&self.stamper, now, now, len32) > now {
            return false;
        }
        let class = ClassId(index as u16);
        let Some(q) = self.fair.queue.as_mut() else {
            return false;
        };
        if !q.charge_sparse(class, e, len32) {
            return false;
        }
        // Charges the aggregate (and the flow's pacing) with the packet's bytes; it leaves now.
        PolicyStack::new(aggregate_id, pacing).stamp(&mut self.stamper, now, now, len32);
        let len16 = u16::try_from(len).unwrap_or(u16::MAX);
        let pkt = PacketRef::new(id, FlowId(e), class, len16);
        if let Err(rejected) = self.wheel.enqueue(now, now, pkt) {
            // Not expected (the wheel's room was checked): counted as a drop, as a refused pull.
            self.fair_orphan(id, index, super::reject_reason(rejected.reason));
            return true;
        }
        if let Some(b) = self.fair.sparse_bytes.get_mut(index) {
            *b += len32;
        }
        self.counters.fair_sparse_early += 1;
        self.book_whole(id, index, now, len, Some(e));
        if let Some(Some(m)) = self.fair.metrics.get(index) {
            m.sparse_early();
        }
        true
    }

    /// What class `index`'s fair backlog must shed now, if anything: the frame pool's small or
    /// large slots are nearly all in use, the class holds more than its `queue` bounds, or
    /// (under `horizon_policy = "reject"`) the class's queued bytes would take longer than the
    /// horizon at its rate.
    fn fair_pressure(&self, pool: &FramePool, index: usize) -> Option<Pressure> {
        if pool.available_small()
            < pool.capacity().saturating_sub(pool.large_capacity()) / POOL_RESERVE
        {
            return Some(Pressure::Pool);
        }
        if pool.large_capacity() > 0
            && pool.available_large() < pool.large_capacity() / LARGE_RESERVE
        {
            return Some(Pressure::Large);
        }
        let state = self.classes.get(index)?;
        let (packets, bytes) = self.class_held(index);
        if packets > state.bound.0 || bytes > state.bound.1 {
            return Some(Pressure::Bound);
        }
        let bytes = self.fair.queue.as_ref()?.class_bytes(ClassId(index as u16));
        match (state.horizon_policy, state.policy.rate) {
            (HorizonPolicy::Reject, Some(rate)) if rate.transmit_time(bytes) >= self.max_delay => {
                Some(Pressure::Horizon)
            }
            _ => None,
        }
    }

    /// Drops from the head of class `index`'s flow with the most bytes queued while the class is
    /// under [`Engine::fair_pressure`], as `fq_codel` drops from its fattest flow: at most half
    /// of that flow's bytes and [`SHED_BATCH`] frames a call, then the pressure is looked at
    /// again at the next arrival. The arriving packet's flow may be the one (counted alike).
    /// Each drop is counted in `fair_dropped_fattest` and as the class's `queue_full` drop.
    fn fair_shed(&mut self, now: Timestamp, pool: &mut FramePool, index: usize) {
        let Some(mut pressure) = self.fair_pressure(pool, index) else {
            return;
        };
        let class = ClassId(index as u16);
        let Some(q) = self.fair.queue.as_ref() else {
            return;
        };
        let Some(flow) = q.fattest_flow(class) else {
            return;
        };
        let keep = q.flow_bytes(flow) / 2;
        for _ in 0..SHED_BATCH {
            let Some(q) = self.fair.queue.as_mut() else {
                return;
            };
            if q.flow_bytes(flow) <= keep {
                break;
            }
            let Some(dq) = q.drop_head(now, flow) else {
                break;
            };
            let large = pool.is_large(dq.id);
            self.fair_free_dropped(pool, dq.id, index);
            // Large-slot pressure is relieved only by a large slot.
            if pressure == Pressure::Large && !large {
                continue;
            }
            match self.fair_pressure(pool, index) {
                Some(p) => pressure = p,
                None => break,
            }
        }
    }

    /// Frees a frame [`Engine::fair_shed`] took out of a fair queue, and counts it.
    fn fair_free_dropped(&mut self, pool: &mut FramePool, id: u32, index: usize) {
        let i = id as usize;
        if let Some(&e) = self.slot_entry.get(i) {
            if e != NO_ENTRY {
                self.flows.remove_queued(e);
            }
        }
        if let Some(c) = self.fair.cuts.get_mut(i) {
            *c = None;
        }
        if let Some(step) = self.slot_step.get_mut(i) {
            *step = 0;
        }
        self.counters.fair_dropped_fattest += 1;
        if let Some(state) = self.classes.get(index) {
            state.metrics.dropped(DropReason::QueueFull);
        }
        pool.free(id);
    }

    /// Pulls, from every backlogged fair class whose aggregate has credit at `now`, the packets
    /// deficit round robin picks, stamps them and puts them in the wheel (at most
    /// [`PULL_BATCH`] a class per call). Returns how many frames it pulled.
    pub(super) fn fair_pull(&mut self, now: Timestamp) -> usize {
        let mut pulled = 0;
        for k in 0..self.fair.active.len() {
            let index = usize::from(self.fair.active[k]);
            for _ in 0..PULL_BATCH {
                if !self.fair_pull_one(now, index) {
                    break;
                }
                pulled += 1;
            }
        }
        pulled
    }

    /// Pulls one packet of class `index` if it has one and its aggregate has credit at `now`
    /// and the wheel has room for it.
    fn fair_pull_one(&mut self, now: Timestamp, index: usize) -> bool {
        let Some(q) = self.fair.queue.as_mut() else {
            return false;
        };
        let class = ClassId(index as u16);
        if q.class_packets(class) == 0 {
            return false;
        }
        let Some(state) = self.classes.get(index) else {
            return false;
        };
        let (aggregate_id, policy) = (state.aggregate, state.policy);
        let aggregate = PolicyStack::new(aggregate_id, None);
        if aggregate.peek(&self.stamper, now, now, q.quantum()) > now {
            return false;
        }
        // Room for one entry at least, so that the pull cannot fail.
        if self.wheel.len() >= self.fair.wheel_packets {
            return false;
        }
        let Some(dq) = q.dequeue(now, class) else {
            return false;
        };
        self.counters.fair_pulled += 1;
        if let Some(b) = self.fair.sparse_bytes.get_mut(index) {
            *b = 0;
        }
        let id = dq.id;
        let i = id as usize;
        let entry = self.slot_entry.get(i).copied().unwrap_or(NO_ENTRY);
        if entry != NO_ENTRY {
            self.flows.remove_queued(entry);
        }
        let pacing = match (policy.pacing, entry) {
            (Some(rate), e) if e != NO_ENTRY => {
                self.flows
                    .pacing_policy(e, &mut self.stamper, rate, policy.burst)
            }
            _ => None,
        };
        let policies = PolicyStack::new(aggregate_id, pacing);
        // As of when the class's queue last became non-empty: no later than any queued packet's
        // arrival, so a packet that arrived late but leaves first (its flow was owed its share)
        // does not skip the time the class was backlogged.
        let busy_since = self.fair.busy_since.get(index).copied().unwrap_or(now);
        let at = busy_since.min(dq.enqueued_at).min(now);
        let cut = match self.slot_step.get(i) {
            Some(&PENDING_CUT) => self.fair.cuts.get_mut(i).and_then(Option::take),
            _ => None,
        };
        let flow = FlowId(if entry == NO_ENTRY { dq.flow } else { entry });
        if let Some(c) = cut {
            let room = self.fair.wheel_packets.saturating_sub(self.wheel.len());
            if room >= c.pieces as usize {
                let r = self.queue_pieces(
                    (now, at),
                    (id, flow, index),
                    &c.sf,
                    (c.max_segments, c.pieces),
                    policies,
                    entry,
                );
                if let Err(reason) = r {
                    self.fair_orphan(id, index, reason);
                }
                return true;
            }
            // No room for every piece: sent whole (the wheel has room for one entry).
        }
        let len = dq.len;
        let edt = policies
            .stamp(&mut self.stamper, at, at, len)
            .min(now.saturating_add(self.max_delay));
        let len16 = u16::try_from(len).unwrap_or(u16::MAX);
        let pkt = PacketRef::new(id, flow, class, len16);
        match self.wheel.enqueue(now, edt, pkt) {
            Ok(()) => {
                self.counters.enqueued += 1;
                self.count_queued(index, id, u64::from(len));
                if let Some(slot) = self.slot_edt.get_mut(i) {
                    *slot = edt;
                }
                if let Some(slot) = self.slot_step.get_mut(i) {
                    *slot = 0;
                }
                if entry != NO_ENTRY {
                    self.flows.add_queued(entry);
                }
            }
            Err(rejected) => self.fair_orphan(id, index, super::reject_reason(rejected.reason)),
        }
        true
    }

    /// A pulled frame the wheel refused (not expected: a pull checks the wheel's room first):
    /// counted as a drop now, its slot freed at the next call that holds the pool.
    fn fair_orphan(&mut self, id: u32, index: usize, reason: DropReason) {
        match reason {
            DropReason::Horizon => self.counters.dropped_horizon += 1,
            _ => self.counters.dropped_pool += 1,
        }
        if let Some(state) = self.classes.get(index) {
            state.metrics.dropped(reason);
        }
        self.fair.orphans.push(id);
    }

    /// Frees the slots of [`Engine::fair_orphan`]s.
    pub(super) fn fair_free_orphans(&mut self, pool: &mut FramePool) {
        for id in self.fair.orphans.drain(..) {
            pool.free(id);
        }
    }

    /// When the next fair class gets credit for its next packet: the earliest over backlogged
    /// fair classes (`None` when none is backlogged, all are paused, or the wheel is full).
    pub(super) fn fair_next_due(&self) -> Option<Timestamp> {
        let q = self.fair.queue.as_ref()?;
        if self.wheel.len() >= self.fair.wheel_packets {
            // No pull can happen before the wheel releases something: its own deadline wakes
            // the loop (a class's past credit time here would make it spin).
            return None;
        }
        let mut due: Option<Timestamp> = None;
        for &index in &self.fair.active {
            if q.class_packets(ClassId(index)) == 0 {
                continue;
            }
            let Some(state) = self.classes.get(usize::from(index)) else {
                continue;
            };
            let t = PolicyStack::new(state.aggregate, None).peek(
                &self.stamper,
                Timestamp::ZERO,
                Timestamp::ZERO,
                q.quantum(),
            );
            if t != Timestamp::MAX {
                due = Some(due.map_or(t, |d| d.min(t)));
            }
        }
        due
    }

    /// Frees every frame still in a fair queue at shutdown, counted under
    /// `fair_discarded_at_stop`. Returns how many.
    pub(super) fn fair_drain_all(&mut self, pool: &mut FramePool) -> u64 {
        self.fair_free_orphans(pool);
        let Some(q) = self.fair.queue.as_mut() else {
            return 0;
        };
        let mut total = 0;
        for index in 0..q.classes() {
            while let Some(dq) = q.dequeue(Timestamp::MAX, ClassId(index as u16)) {
                let i = dq.id as usize;
                if let Some(&e) = self.slot_entry.get(i) {
                    if e != NO_ENTRY {
                        self.flows.remove_queued(e);
                    }
                }
                if let Some(c) = self.fair.cuts.get_mut(i) {
                    *c = None;
                }
                if let Some(step) = self.slot_step.get_mut(i) {
                    *step = 0;
                }
                pool.free(dq.id);
                total += 1;
            }
        }
        self.counters.fair_discarded_at_stop += total;
        total
    }

    /// Publishes each fair class's flows with packets waiting and its queued packets, wheel and
    /// flow queues (with the other gauges, once per batch).
    pub(super) fn fair_publish(&self) {
        let Some(q) = self.fair.queue.as_ref() else {
            return;
        };
        for &index in &self.fair.active {
            let class = ClassId(index);
            if let Some(Some(m)) = self.fair.metrics.get(usize::from(index)) {
                m.set_flows(u64::from(q.backlogged_flows(class)));
            }
            // The class's queued gauge counts its packets in the flow queues too.
            if let Some(state) = self.classes.get(usize::from(index)) {
                let held = u64::from(q.class_packets(class));
                state.metrics.set_queued(state.queued + held);
            }
        }
    }

    /// Frames and wire bytes class `index` holds in the fair queue (zeros when none).
    pub(super) fn fair_class_load(&self, index: usize) -> (u64, u64) {
        let Some(q) = self.fair.queue.as_ref() else {
            return (0, 0);
        };
        let class = ClassId(index as u16);
        (u64::from(q.class_packets(class)), q.class_bytes(class))
    }

    /// Frames in fair queues plus pulled frames waiting to be freed.
    pub(super) fn fair_held(&self) -> u64 {
        self.fair.len() + self.fair.orphans.len() as u64
    }

    /// Flows of class `name` with packets in its fair queue (0 when not fair or unknown).
    pub fn class_fair_flows(&self, name: &str) -> u32 {
        let (Some(q), Some(i)) = (self.fair.queue.as_ref(), self.class_index(name)) else {
            return 0;
        };
        q.backlogged_flows(ClassId(i as u16))
    }

    /// Packets of class `name` that found no flow state and went to its overflow flow.
    pub fn class_fair_overflowed(&self, name: &str) -> u64 {
        self.class_index(name)
            .and_then(|i| self.fair.overflowed.get(i).copied())
            .unwrap_or(0)
    }

    /// Packets of class `name` waiting in its fair queue.
    pub fn class_fair_queued(&self, name: &str) -> u64 {
        let (Some(q), Some(i)) = (self.fair.queue.as_ref(), self.class_index(name)) else {
            return 0;
        };
        u64::from(q.class_packets(ClassId(i as u16)))
    }

    /// The fair queues' own counters (zero when no class was ever fair).
    pub fn fair_counters(&self) -> metronome_core::FairQueueCounters {
        self.fair
            .queue
            .as_ref()
            .map(FairQueue::counters)
            .unwrap_or_default()
    }

    /// Checks the fair-queue identities (CONTRIBUTING.md §10, §11).
    pub(super) fn fair_invariants(&self) {
        let c = &self.counters;
        assert_eq!(
            c.fair_enqueued,
            c.fair_pulled + c.fair_discarded_at_stop + c.fair_dropped_fattest + self.fair.len(),
            "{c:?}"
        );
        if let Some(q) = &self.fair.queue {
            q.invariants();
        }
    }
}
