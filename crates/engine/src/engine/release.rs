//! Releasing: what is due leaves the engine as one transmit batch, and what will not be sent is
//! freed and counted.
//!
//! * [`Engine::release`] pulls the fair classes with credit ([`super::fair`]), then moves every
//!   wheel entry due at `now` into the batch (inter-flow batching, FlowBundler §IV-A), or into
//!   the link for a class on it ([`super::link`]), whose own clock releases it; again while a
//!   pull brought something due and the batch has room. Each departure observes its lateness
//!   against its EDT ([`super::slots::Slots::depart`]).
//! * [`Engine::next_due`]: the earliest of the tree's next pass while a class is busy, the wheel's next entry, ACK shaping's next ACK, a
//!   backlogged fair class's next credit and the link's next departure.
//! * [`Engine::expire`] drops the entries due more than a grace ago while the outside link is
//!   down; [`Engine::drain_all`] frees everything at stop. Both free through the pool
//!   ([`metronome_io::FramePool::free_entry`], after a cut frame's last piece).
//! * Gauges and per-class sent counts are published once per batch
//!   ([`Engine::publish_gauges`]), not per packet.

use super::Engine;
use crate::stats::DropReason;
use metronome_core::{Duration, EdtQueue, PacketRef, Timestamp};
use metronome_io::piece::decode;
use metronome_io::FramePool;

impl Engine {
    /// Moves up to `max` packets due at `now` (at most [`crate::config::MAX_BATCH_SIZE`]) onto
    /// `out`, as one transmit batch; returns how many. Observes each one's lateness
    /// (`now - EDT`). Fair classes with credit at `now` are pulled first, and again while what
    /// they pull is due and the batch has room ([`super::fair`]). Packets of classes on the
    /// `[link]` go from the wheel into the link ([`super::link`]), which marks them in `pool` or
    /// drops them (freeing their slots), and leave when the link is free.
    pub fn release(
        &mut self,
        now: Timestamp,
        pool: &mut FramePool,
        out: &mut Vec<u32>,
        max: usize,
    ) -> usize {
        let max = max.min(self.batch.len());
        self.tree_due(now);
        let mut total = 0;
        loop {
            let pulled = self.fair_pull(now, pool);
            let n = self.release_due(now, pool, out, max - total);
            total += n;
            if pulled == 0 || n == 0 || total >= max {
                return total;
            }
        }
    }

    /// [`Engine::release`] of what the wheel and the link hold.
    fn release_due(
        &mut self,
        now: Timestamp,
        pool: &mut FramePool,
        out: &mut Vec<u32>,
        max: usize,
    ) -> usize {
        let mut sent = 0;
        loop {
            let n = self.wheel.dequeue(now, &mut self.batch[..max - sent]);
            let mut held = 0;
            for k in 0..n {
                let mut pkt = self.batch[k];
                if self.tree.any {
                    match self.tree_stage(now, pkt) {
                        Some(p) => pkt = p,
                        None => {
                            held += 1;
                            continue;
                        }
                    }
                }
                if self.on_link(pkt) {
                    self.link_enqueue(now, pool, pkt);
                } else {
                    self.depart(now, pkt, out);
                    sent += 1;
                }
            }
            if n == 0 || sent == max || (self.link.is_none() && held == 0) {
                break;
            }
        }
        sent += self.link_release(now, out, max - sent);
        if sent > 0 {
            self.publish_gauges();
        }
        sent
    }

    /// The bookkeeping of a packet leaving the engine onto `out`: its lateness against its EDT,
    /// its flow's and class's queued counts, its class's sent bytes. Returns its EDT.
    pub(super) fn depart(
        &mut self,
        now: Timestamp,
        pkt: PacketRef,
        out: &mut Vec<u32>,
    ) -> Timestamp {
        let d = self.slots.depart(pkt, now);
        self.lateness
            .observe(now.saturating_since(d.edt).as_nanos());
        if let Some(e) = d.entry {
            self.flows.remove_queued(e);
        }
        let (slot, _) = decode(pkt.id);
        let large = slot >= self.large_from;
        let index = pkt.class.index();
        if let Some(state) = self.classes.get_mut(index) {
            state.left(d.wire, large);
            state.stats.sent_packets += 1;
            state.stats.sent_bytes += d.wire;
            state.touch(index, &mut self.dirty);
        }
        out.push(pkt.id);
        self.counters.released += 1;
        d.edt
    }

    /// Publishes the gauges and what was tallied since the last call (sent packets and bytes per
    /// class, pass-through, lateness): once per batch, so the per-packet path does no atomic
    /// read-modify-write on shared metrics.
    pub fn publish_gauges(&mut self) {
        let mut dirty = std::mem::take(&mut self.dirty);
        for &index in &dirty {
            if let Some(state) = self.classes.get_mut(index) {
                state.dirty = false;
            }
            self.publish_class(index);
        }
        dirty.clear();
        self.dirty = dirty;
        self.gauges.wheel_occupancy = self.wheel.len() as u64;
        self.telemetry.engine(&self.gauges);
        self.telemetry.lateness(&mut self.lateness);
        if let Some(l) = &mut self.link {
            l.publish(&mut *self.telemetry);
        }
        self.fair_publish();
    }

    /// When the next queued packet is due (the loop sleeps until then), `None` when empty.
    pub fn next_due(&self) -> Option<Timestamp> {
        let link = self.link.as_ref().and_then(|l| l.next_due());
        [
            self.wheel.next_due(),
            self.acks.next_due(),
            self.fair_next_due(),
            link,
            self.tree_next_due(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Empties the wheel and the fair queues at shutdown: frees every queued packet's slot
    /// without sending it and counts it under `discarded_at_stop` (wheel entries) or
    /// `fair_discarded_at_stop` (frames). Returns how many.
    pub fn drain_all(&mut self, pool: &mut FramePool) -> u64 {
        let mut total = 0;
        loop {
            let n = self.wheel.dequeue(Timestamp::MAX, &mut self.batch);
            if n == 0 {
                break;
            }
            for k in 0..n {
                let pkt = super::tree::unstaged(self.batch[k]);
                self.discard(pool, pkt);
            }
            total += n as u64;
        }
        let mut left = Vec::new();
        if let Some(l) = &mut self.link {
            l.drain(&mut left);
        }
        for pkt in left {
            self.discard(pool, pkt);
            total += 1;
        }
        self.counters.discarded_at_stop += total;
        total += self.fair_drain_all(pool);
        self.publish_gauges();
        total
    }

    /// Drops every wheel entry whose slot lies wholly more than `grace` before `now` (its EDT
    /// more than `grace` past, to the wheel's granularity) without sending it: its slot is freed,
    /// and it is counted under `dropped_link_down` and its class's `link_down` drops. The loop
    /// calls it, with a `grace` of zero, while the outside link has been down longer than
    /// `daemon.link_down_grace` (the daemon's carrier watch); entries due later stay in the wheel
    /// with their EDT. Returns how many entries it dropped. One entry per dequeue, so that nothing
    /// due within the grace leaves the wheel.
    pub fn expire(&mut self, now: Timestamp, grace: Duration, pool: &mut FramePool) -> u64 {
        let width = self.config.wheel.granularity;
        let mut total = 0;
        while let Some(due) = self.wheel.next_due() {
            if due.saturating_add(width).saturating_add(grace) > now
                || self.wheel.dequeue(now, &mut self.batch[..1]) == 0
            {
                break;
            }
            let pkt = super::tree::unstaged(self.batch[0]);
            self.class_count(pkt.class.index(), |s| {
                s.drops[DropReason::LinkDown as usize] += 1;
            });
            self.discard(pool, pkt);
            total += 1;
        }
        if total > 0 {
            self.counters.dropped_link_down += total;
            self.publish_gauges();
        }
        total
    }

    /// Frees a queued entry that will not be sent (through the pool, which knows pieces) and
    /// takes it off its flow's and class's queued counts (the caller counts it).
    pub(super) fn discard(&mut self, pool: &mut FramePool, pkt: PacketRef) {
        let d = self.slots.discard(pool, pkt);
        self.count_left(pkt, d.wire);
        if let Some(e) = d.entry {
            self.flows.remove_queued(e);
        }
    }
}
