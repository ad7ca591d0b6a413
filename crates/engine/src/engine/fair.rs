//! Fair queueing inside a rate-limited class (`fair = true`): the engine's part of
//! [`metronome_core::fair_queue`] (Carousel §5.1's aggregate timestamps, NicPic §3's on-demand
//! pulls with fair sharing, FlowBundler §IV's per-flow buckets). ARCHITECTURE.md ("The engine")
//! says why each rule is there.
//!
//! * **Enqueue, no stamp** ([`Engine::fair_enqueue`]): a packet of a fair class joins its flow's
//!   queue (its flow-table entry; none: the class's overflow flow, `fair_overflow`). A
//!   super-frame is one unit, its cut kept with its slot until it is pulled
//!   ([`super::slots::Slots::hold`]).
//! * **Pull** (module `pull`, [`Engine::fair_pull`]): whenever the class's aggregate has credit
//!   for a full frame, deficit round robin with rounds picks the flow; the packet is stamped
//!   (aggregate and the flow's pacing) as of the time the class's queue last became non-empty,
//!   and put in the wheel (a super-frame as its pieces, [`super::cut`]); a pull needs room in the
//!   wheel. [`Engine::next_due`] includes each backlogged class's next credit time.
//! * **Sparse flows** ([`Engine::fair_send_sparse`]): a frame of at most one quantum, of a flow
//!   with nothing queued and credit left in the class's round, leaves at once, charged to the
//!   aggregate; at most one quantum of such bytes per pull (`fair_sparse_early`).
//! * **Backpressure per flow:** `drop` counts the flow's packets in the fair queue and the wheel;
//!   `ecn` marks on the flow's own sojourn ([`FairQueue::flow_sojourn`]).
//! * **Shed from the fattest flow** ([`Engine::fair_shed`], `fair_dropped_fattest`) when the
//!   pool's small or large slots are nearly all in use, the class is past its `queue` bounds, or
//!   under `horizon_policy = "reject"` its bytes would outlast the horizon.
//! * **Accounting** (CONTRIBUTING.md §11): `fair_enqueued = fair_pulled + fair_discarded_at_stop +
//!   fair_dropped_fattest + fair queued` ([`Engine::invariants`]); a frame the wheel refuses at a
//!   pull (not expected) is a counted drop, its slot freed there.
//! * **Reload:** `fair` may change live; packets already in a class's fair queue are pulled until
//!   it is empty, packets in the wheel leave at their EDT.

mod pull;

use super::cut::cut_segments;
use super::slots::PendingCut;
use super::{clamp_u32, reject_reason, Engine};
use crate::config::{Backpressure, EngineConfig};
use crate::flow_table::FLOW_TABLE_CAPACITY;
use crate::stats::{DropReason, FairClassStats};
use metronome_core::timestamp::PolicyStack;
use metronome_core::{
    ClassId, EdtQueue, FairQueue, FairQueueConfig, FlowId, HorizonPolicy, PacketRef, Timestamp,
};
use metronome_io::FramePool;
use metronome_packet::{Parsed, SuperFrame};

/// Most packets one [`Engine::fair_pull`] takes from one class: a transmit batch.
const PULL_BATCH: usize = crate::config::MAX_BATCH_SIZE;

/// A fair class sheds from its fattest flow when fewer than 1/`POOL_RESERVE` of the frame
/// pool's small slots are free: the receive path then still finds slots for the
/// arriving packets of sparse flows (`fq_codel` drops from its fattest flow at its limit instead
/// of refusing the arriving packet). 1/8: one eighth of the pool's frames.
const POOL_RESERVE: usize = 8;

/// A fair class sheds from its fattest flow when fewer than 1/`LARGE_RESERVE` of the pool's
/// large slots are free: a queued super-frame holds its large slot until its flow's turn, so with
/// as many backlogged flows as large slots every slot is held and arriving super-frames are
/// refused (`rx_no_large_slot`) whatever their flow. 1/32 is 8 of the default 256 slots; how it
/// was chosen against 1/8 and against no large-slot shedding is in docs/results/daemon.md, "How
/// the fair mode's settings were chosen".
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

/// A frame of a fair class, classified and past its flow limit ([`Engine::fair_enqueue`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct FairArrival {
    /// Its pool slot.
    pub id: u32,
    /// Its class state index.
    pub index: usize,
    /// Its flow-table entry.
    pub entry: Option<u32>,
    /// The bytes it charges its class.
    pub wire: u64,
    /// Its walked headers, for a GSO super-frame.
    pub superframe: Option<SuperFrame>,
}

/// The engine's fair-queueing state: empty (nothing allocated) until a class is fair.
#[derive(Debug, Default)]
pub(super) struct Fair {
    queue: Option<FairQueue>,
    /// Class state indices that are fair or still hold packets in the fair queue.
    active: Vec<u32>,
    /// Packets of each class (by state index) that went to the overflow flow.
    overflowed: Vec<u64>,
    /// Per class (by state index): when its fair queue last went from empty to holding a
    /// packet (the arrival of that packet); the time its pulls are stamped as of.
    busy_since: Vec<Timestamp>,
    /// Each class (by state index) that is or was fair: its flow-queue counts are published.
    seen: Vec<bool>,
    /// Packets of each class (by state index) of sparse flows sent ahead of its next pull.
    sparse_early: Vec<u64>,
    /// Pool slots of the engine (the fair queue's packet ids).
    pool_slots: usize,
    /// Packets the wheel holds at most (its node pool's guarantee).
    wheel_packets: usize,
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
    pub(super) fn fair_configure(&mut self, config: &EngineConfig) {
        self.fair_configure_mtu(config.mtu);
    }

    /// [`Engine::fair_configure`] for frames of `mtu` bytes.
    pub(super) fn fair_configure_mtu(&mut self, mtu: u32) {
        let any_fair = self.classes.iter().any(|s| s.policy.fair);
        let f = &mut self.fair;
        if f.queue.is_none() && any_fair {
            let quantum = mtu.saturating_add(14).max(1);
            f.queue = FairQueue::new(FairQueueConfig {
                packets: u32::try_from(f.pool_slots).unwrap_or(u32::MAX - 2),
                flows: FLOW_TABLE_CAPACITY as u32,
                classes: 0,
                quantum,
            })
            .ok();
        }
        let Some(q) = f.queue.as_mut() else {
            return;
        };
        let n = u32::try_from(self.classes.len()).unwrap_or(u32::MAX);
        q.set_classes(n);
        f.overflowed.resize(self.classes.len(), 0);
        f.busy_since.resize(self.classes.len(), Timestamp::ZERO);
        f.sparse_bytes.resize(self.classes.len(), 0);
        f.seen.resize(self.classes.len(), false);
        f.sparse_early.resize(self.classes.len(), 0);
        f.active.clear();
        for (i, state) in self.classes.iter().enumerate() {
            let held = q.class_packets(ClassId(i as u32)) > 0;
            if (state.policy.fair && state.aggregate.is_some()) || held {
                f.active.push(i as u32);
                f.seen[i] = true;
            }
        }
    }

    /// Queues packet `p` of a fair class in its flow's queue, after the flow-limit check; marks
    /// it CE when its flow's own queueing delay is above the `ecn` threshold. Called by
    /// `Engine::shape` instead of stamping; the next [`Engine::release`] pulls it (the loop
    /// releases after every receive).
    pub(super) fn fair_enqueue(
        &mut self,
        now: Timestamp,
        pool: &mut FramePool,
        p: FairArrival,
        parsed: &Parsed,
    ) {
        let FairArrival {
            id,
            index,
            entry,
            wire: len,
            superframe,
        } = p;
        let policy = self.classes[index].policy;
        if self.fair.queue.is_none() {
            // Not reachable: a fair class allocates the queue when installed.
            return self.drop_frame(pool, id, index, DropReason::QueueFull);
        }
        let class = ClassId(index as u32);
        if superframe.is_none() && self.fair_send_sparse(now, pool, &p) {
            return;
        }
        let Some(q) = self.fair.queue.as_mut() else {
            return self.drop_frame(pool, id, index, DropReason::QueueFull);
        };
        // No entry: the queue's own "no flow" index (the overflow flow).
        let flow_index = entry.unwrap_or(u32::MAX);
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
                    self.classes[index].touch(index, &mut self.dirty);
                }
            }
            Err(_) => return self.drop_frame(pool, id, index, DropReason::QueueFull),
        }
        self.counters.fair_enqueued += 1;
        self.classes[index].stamped_bytes += len;
        if let Some(e) = entry {
            self.flows.add_queued(e);
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
        self.slots.hold(id, len, entry, cut);
        self.fair_shed(now, pool, index);
    }

    /// Sends packet `p` (one frame) of a fair class at once when its flow
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
    fn fair_send_sparse(&mut self, now: Timestamp, pool: &mut FramePool, p: &FairArrival) -> bool {
        let (id, index, len) = (p.id, p.index, p.wire);
        let Some(e) = p.entry else {
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
        let class = ClassId(index as u32);
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
            self.fair_refused(pool, id, index, reject_reason(rejected.reason));
            return true;
        }
        if let Some(b) = self.fair.sparse_bytes.get_mut(index) {
            *b += len32;
        }
        self.counters.fair_sparse_early += 1;
        self.book_whole(pool, id, index, now, len, Some(e));
        if let Some(n) = self.fair.sparse_early.get_mut(index) {
            *n += 1;
            self.classes[index].touch(index, &mut self.dirty);
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
        let bytes = self.fair.queue.as_ref()?.class_bytes(ClassId(index as u32));
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
        let class = ClassId(index as u32);
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
        if let Some(e) = self.slots.discard_held(pool, id) {
            self.flows.remove_queued(e);
        }
        self.counters.fair_dropped_fattest += 1;
        self.class_count(index, |s| s.drops[DropReason::QueueFull as usize] += 1);
    }

    /// Publishes each fair class's flows with packets waiting and its queued packets, wheel and
    /// flow queues (with the other gauges, once per batch).
    pub(super) fn fair_publish(&mut self) {
        if self.fair.queue.is_none() {
            return;
        }
        for k in 0..self.fair.active.len() {
            self.publish_class(self.fair.active[k] as usize);
        }
    }

    /// Publishes class state `index`'s counts, its queued gauge counting its frames in the flow
    /// queues too, and a fair class's flow-queue counts.
    pub(super) fn publish_class(&mut self, index: usize) {
        let Some(state) = self.classes.get_mut(index) else {
            return;
        };
        let class = ClassId(index as u32);
        let q = self.fair.queue.as_ref();
        let held = q.map_or(0, |q| u64::from(q.class_packets(class)));
        state.stats.queued = state.queued + held;
        self.telemetry.class(index, &state.stats);
        if let (Some(q), Some(true)) = (q, self.fair.seen.get(index)) {
            let f = &self.fair;
            self.telemetry.fair_class(
                index,
                &FairClassStats {
                    flows: u64::from(q.backlogged_flows(class)),
                    overflow: f.overflowed.get(index).copied().unwrap_or(0),
                    sparse_early: f.sparse_early.get(index).copied().unwrap_or(0),
                },
            );
        }
    }

    /// Forgets the fair counts of class state `index` (freed for another class).
    pub(super) fn fair_forget(&mut self, index: usize) {
        let f = &mut self.fair;
        for v in [&mut f.overflowed, &mut f.sparse_early] {
            if let Some(n) = v.get_mut(index) {
                *n = 0;
            }
        }
        if let Some(s) = f.seen.get_mut(index) {
            *s = false;
        }
    }

    /// Frames and wire bytes class `index` holds in the fair queue (zeros when none).
    pub(super) fn fair_class_load(&self, index: usize) -> (u64, u64) {
        let Some(q) = self.fair.queue.as_ref() else {
            return (0, 0);
        };
        let class = ClassId(index as u32);
        (u64::from(q.class_packets(class)), q.class_bytes(class))
    }

    /// Frames in fair queues.
    pub(super) fn fair_held(&self) -> u64 {
        self.fair.len()
    }

    /// Flows of class `name` with packets in its fair queue (0 when not fair or unknown).
    pub fn class_fair_flows(&self, name: &str) -> u32 {
        let (Some(q), Some(i)) = (self.fair.queue.as_ref(), self.class_index(name)) else {
            return 0;
        };
        q.backlogged_flows(ClassId(i as u32))
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
        u64::from(q.class_packets(ClassId(i as u32)))
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
