//! What the cluster agent and the shaping loops share per cluster class: the share in force (the
//! agent writes, the loops or the silos' coordinator read) and the class's demand (each loop
//! writes its own slot, the agent reads their sum): bytes sent, held and refused. Atomics only: a
//! loop touches its cell once per iteration (one load) and writes its slot at most every
//! [`DEMAND_PUBLISH`], as often as a silo publishes its demand to the allocator (the agent reads
//! it once per period).

use super::DEMAND_PUBLISH;
use crate::engine::Engine;
use metronome_core::cluster::UsageSample;
use metronome_core::{Rate, Timestamp};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// One loop's demand of one class.
#[derive(Debug, Default)]
struct DemandSlot {
    /// Bytes accepted and no longer held (sent, or expired after queueing), cumulative.
    sent: AtomicU64,
    /// Bytes held now.
    backlog: AtomicU64,
    /// Bytes refused before queueing, cumulative.
    refused: AtomicU64,
    /// Set once the loop has published.
    published: AtomicU64,
}

/// One cluster class's shared state.
#[derive(Debug)]
pub struct ClusterCell {
    class: String,
    limit: Rate,
    slots: Box<[DemandSlot]>,
    share: AtomicU64,
    epoch: AtomicU64,
}

impl ClusterCell {
    /// The cell of class `class` with cluster limit `limit`, for `loops` loops (silos), its share
    /// starting at `initial` (epoch 1, so every loop applies it at its first iteration).
    pub fn new(class: &str, limit: Rate, loops: usize, initial: Rate) -> ClusterCell {
        ClusterCell {
            class: class.to_string(),
            limit,
            slots: (0..loops.max(1)).map(|_| DemandSlot::default()).collect(),
            share: AtomicU64::new(initial.bps()),
            epoch: AtomicU64::new(1),
        }
    }

    /// The class's name.
    pub fn class(&self) -> &str {
        &self.class
    }

    /// The class's cluster limit.
    pub fn limit(&self) -> Rate {
        self.limit
    }

    /// Puts `bps` in force (a new epoch when it differs from the share in force).
    pub fn set_share(&self, bps: u64) {
        if self.share.load(Ordering::Relaxed) == bps {
            return;
        }
        self.share.store(bps, Ordering::Relaxed);
        self.epoch.fetch_add(1, Ordering::Release);
    }

    /// The share in force and its epoch. A share read with an older epoch than it was published
    /// with is read again at the next epoch: it is never older than its epoch.
    pub fn share(&self) -> (u64, u64) {
        let epoch = self.epoch.load(Ordering::Acquire);
        (self.share.load(Ordering::Relaxed), epoch)
    }

    /// Loop `slot`'s demand: `sent` bytes so far, `backlog` bytes held now, `refused` bytes
    /// dropped before queueing so far.
    pub fn publish_demand(&self, slot: usize, sent: u64, backlog: u64, refused: u64) {
        if let Some(s) = self.slots.get(slot) {
            s.sent.store(sent, Ordering::Relaxed);
            s.backlog.store(backlog, Ordering::Relaxed);
            s.refused.store(refused, Ordering::Relaxed);
            s.published.store(1, Ordering::Release);
        }
    }

    /// The class's demand summed over the loops, stamped `at` (the reader's clock); `None`
    /// before any loop has published.
    pub fn demand(&self, at: Timestamp) -> Option<UsageSample> {
        let mut any = false;
        let mut sample = UsageSample {
            at,
            sent_bytes: 0,
            backlog_bytes: 0,
            refused_bytes: 0,
        };
        for s in self.slots.iter() {
            if s.published.load(Ordering::Acquire) == 0 {
                continue;
            }
            any = true;
            sample.sent_bytes = sample
                .sent_bytes
                .saturating_add(s.sent.load(Ordering::Relaxed));
            sample.backlog_bytes = sample
                .backlog_bytes
                .saturating_add(s.backlog.load(Ordering::Relaxed));
            sample.refused_bytes = sample
                .refused_bytes
                .saturating_add(s.refused.load(Ordering::Relaxed));
        }
        any.then_some(sample)
    }
}

/// A loop's side of the cluster cells: publishes its demand of every cluster class and, when
/// the loop is the daemon's only one (`apply`), puts the share in force in its engine. With
/// silos the coordinator hands the share to its allocator instead
/// ([`super::Allocator`]).
#[derive(Debug)]
pub struct ClusterPort {
    slot: usize,
    apply: bool,
    classes: Vec<PortClass>,
    next_publish: Timestamp,
}

#[derive(Debug)]
struct PortClass {
    cell: Arc<ClusterCell>,
    index: Option<usize>,
    epoch: u64,
}

impl ClusterPort {
    /// Loop `slot`'s port to `cells`, whose classes it finds in `engine`.
    pub fn new(cells: &[Arc<ClusterCell>], slot: usize, apply: bool, engine: &Engine) -> Self {
        let mut port = ClusterPort {
            slot,
            apply,
            classes: cells
                .iter()
                .map(|c| PortClass {
                    cell: c.clone(),
                    index: None,
                    epoch: 0,
                })
                .collect(),
            next_publish: Timestamp::ZERO,
        };
        port.rebind(engine);
        port
    }

    /// After a reload (which puts the classes' whole rates back): finds the classes again and
    /// applies their shares at the next [`ClusterPort::poll`].
    pub fn rebind(&mut self, engine: &Engine) {
        for c in &mut self.classes {
            c.index = engine.class_index(c.cell.class());
            c.epoch = 0;
        }
    }

    /// Applies new shares (when `apply`) and publishes the demand when due.
    pub fn poll(&mut self, engine: &mut Engine, now: Timestamp) {
        if self.classes.is_empty() {
            return;
        }
        if self.apply {
            for c in &mut self.classes {
                let Some(index) = c.index else { continue };
                let (share, epoch) = c.cell.share();
                if epoch != c.epoch {
                    c.epoch = epoch;
                    apply_share(engine, index, share);
                }
            }
        }
        if now >= self.next_publish {
            self.next_publish = now.saturating_add(DEMAND_PUBLISH);
            for c in &self.classes {
                let Some(index) = c.index else { continue };
                let stamped = engine.class_stamped_bytes(index);
                let backlog = engine.class_backlog_bytes(index);
                let refused = engine.class_refused_bytes(index);
                c.cell
                    .publish_demand(self.slot, stamped.saturating_sub(backlog), backlog, refused);
            }
        }
    }
}

/// Puts share `bps` in force for class `index` of `engine`: its aggregate rate, or, for a zero
/// share (a zero `floor`: fail closed), the class closed (every frame refused at admission,
/// counted as `queue_full`) with its rate left as it was, so that the policy's clock is never
/// pushed to the end of time by a zero rate.
pub fn apply_share(engine: &mut Engine, index: usize, bps: u64) -> bool {
    if bps == 0 {
        return engine.set_class_closed(index, true);
    }
    engine.set_class_closed(index, false);
    engine.set_class_rate(index, Rate::from_bps(bps))
}
