//! Pulling from the fair queues: [`Engine::fair_pull`] takes, from every backlogged fair class
//! whose aggregate has credit, the packets deficit round robin picks, stamps them and puts them
//! in the wheel; [`Engine::fair_next_due`] says when the next class gets credit, and
//! [`Engine::fair_drain_all`] empties the queues at stop.
//!
//! * **Credit:** the class's aggregate policy's earliest departure for a full frame
//!   (`PolicyStack::peek`) is not after `now`.
//! * **Stamping time:** as of the moment the class's fair queue last became non-empty (no later
//!   than the packet's arrival), so a loop that pulls late still gives the aggregate its full
//!   rate, and a packet that arrived late but leaves first does not skip the time the class was
//!   backlogged.
//! * **Room:** a pull needs room in the wheel for its entries (all the pieces of a cut
//!   super-frame, or it goes whole); without it the class waits for the next release.

use super::PULL_BATCH;
use crate::engine::cut::PieceRun;
use crate::engine::slots::Booking;
use crate::engine::{reject_reason, Engine};
use crate::stats::DropReason;
use metronome_core::timestamp::PolicyStack;
use metronome_core::{ClassId, EdtQueue, FlowId, PacketRef, Timestamp};
use metronome_io::FramePool;

impl Engine {
    /// Pulls, from every backlogged fair class whose aggregate has credit at `now`, the packets
    /// deficit round robin picks, stamps them and puts them in the wheel (at most
    /// [`PULL_BATCH`] a class per call). Returns how many frames it pulled.
    pub(in crate::engine) fn fair_pull(&mut self, now: Timestamp, pool: &mut FramePool) -> usize {
        let mut pulled = 0;
        for k in 0..self.fair.active.len() {
            let index = self.fair.active[k] as usize;
            for _ in 0..PULL_BATCH {
                if !self.fair_pull_one(now, pool, index) {
                    break;
                }
                pulled += 1;
            }
        }
        pulled
    }

    /// Pulls one packet of class `index` if it has one and its aggregate has credit at `now`
    /// and the wheel has room for it.
    fn fair_pull_one(&mut self, now: Timestamp, pool: &mut FramePool, index: usize) -> bool {
        let Some(q) = self.fair.queue.as_mut() else {
            return false;
        };
        let class = ClassId(index as u32);
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
        let entry = self.slots.entry(id);
        if let Some(e) = entry {
            self.flows.remove_queued(e);
        }
        let pacing = match (policy.pacing, entry) {
            (Some(rate), Some(e)) => {
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
        let cut = self.slots.take_pending(id);
        let flow = FlowId(entry.unwrap_or(dq.flow));
        if let Some(c) = cut {
            let room = self.fair.wheel_packets.saturating_sub(self.wheel.len());
            if room >= c.pieces as usize {
                let run = PieceRun {
                    now,
                    at,
                    id,
                    flow,
                    index,
                    max_segments: c.max_segments,
                    pieces: c.pieces,
                    policies,
                    entry,
                    wire: u64::from(dq.len),
                };
                if let Err(reason) = self.queue_pieces(pool, &c.sf, run) {
                    self.fair_refused(pool, id, index, reason);
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
                let booking = Booking {
                    edt,
                    last: edt,
                    wire: u64::from(len),
                    entry,
                    cut: None,
                };
                self.slots.book(pool, id, booking);
                if let Some(e) = entry {
                    self.flows.add_queued(e);
                }
            }
            Err(rejected) => self.fair_refused(pool, id, index, reject_reason(rejected.reason)),
        }
        true
    }

    /// A pulled frame the wheel refused (not expected: a pull checks the wheel's room first):
    /// counted as a drop, its slot freed.
    pub(super) fn fair_refused(
        &mut self,
        pool: &mut FramePool,
        id: u32,
        index: usize,
        reason: DropReason,
    ) {
        match reason {
            DropReason::Horizon => self.counters.dropped_horizon += 1,
            _ => self.counters.dropped_pool += 1,
        }
        self.class_count(index, |s| s.drops[reason as usize] += 1);
        pool.free(id);
    }

    /// When the next fair class gets credit for its next packet: the earliest over backlogged
    /// fair classes (`None` when none is backlogged, all are paused, or the wheel is full).
    pub(in crate::engine) fn fair_next_due(&self) -> Option<Timestamp> {
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
            let Some(state) = self.classes.get(index as usize) else {
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
    pub(in crate::engine) fn fair_drain_all(&mut self, pool: &mut FramePool) -> u64 {
        let Some(q) = self.fair.queue.as_mut() else {
            return 0;
        };
        let mut total = 0;
        for index in 0..q.classes() {
            while let Some(dq) = q.dequeue(Timestamp::MAX, ClassId(index as u32)) {
                if let Some(e) = self.slots.discard_held(pool, dq.id) {
                    self.flows.remove_queued(e);
                }
                total += 1;
            }
        }
        self.counters.fair_discarded_at_stop += total;
        total
    }
}
