//! The daemon's per-packet shaping pipeline, without I/O: frames come in as pool slot ids, go out
//! as entry ids to transmit (a slot, or a piece of a cut super-frame, [`metronome_io::piece`]),
//! and `now` is an argument (CONTRIBUTING.md §1). The loop (`run`) drives it between two
//! [`metronome_io::PacketPort`]s; the tests drive it with a [`metronome_io::MemoryPort`].
//! ARCHITECTURE.md ("The engine") says why it is built this way.
//!
//! **Contract: the loop's calling order.** Each iteration, with one `now` per call:
//! 1. [`Engine::receive`] the frames the inside port delivered: each is forwarded at once
//!    (pushed onto the caller's transmit batch), queued, or dropped and its slot freed
//!    ([`receive`]). [`Engine::pass_through`] and [`Engine::shape_acks`] take the reverse
//!    direction's frames.
//! 2. [`Engine::release`] what is due into the transmit batch ([`release`]), after every
//!    receive (a fair class's frames wait for it, [`fair`]); the caller hands the batch to the
//!    outside port's `send`, which sends pieces itself and frees every slot it consumes; what
//!    the port did not take stays the caller's, freed with `FramePool::free_entry`.
//! 3. Sleep until [`Engine::next_due`] (or a frame arrives).
//! 4. While the outside link has been down longer than its grace, [`Engine::expire`] what fell
//!    due. On SIGHUP, [`Engine::reload`] ([`classes`]). At stop, [`Engine::drain_all`]. Between
//!    two rounds, the control socket's [`Engine::add_class`], [`Engine::change_class`],
//!    [`Engine::delete_class`] and [`Engine::reap_drained`] ([`live`]).
//!
//! Every slot the engine holds is freed exactly once: by the port after the entry's release,
//! or by the engine at a drop, a discard or an expiry (through the pool, which frees a cut
//! frame's slot after its last piece).
//!
//! **Nothing is lost** (CONTRIBUTING.md §11): every received frame is forwarded at once, queued,
//! released or in a named drop counter; [`Engine::invariants`] checks
//! `received = forwarded + enqueued frames + dropped + fair queued + fair discarded at stop` and
//! `enqueued = released + queued` (in wheel entries: a cut super-frame has one per piece;
//! entries dropped while the outside link was down, [`Engine::expire`], dropped by the link and
//! discarded at stop are on the released side).
//!
//! The modules: [`classes`] (classes and reload), [`live`] (classes added, changed and deleted
//! live), [`receive`] (classify, admit, stamp, queue), [`cut`] (super-frames cut into pieces),
//! [`slots`] (what is kept per pool slot), [`release`] (the transmit batch, expiry, stop),
//! [`fair`] (fair queueing inside a class), [`link`] (the shared link), [`tree`] (classes
//! inside classes).

mod classes;
pub use classes::{Admission, AdmittedClass};
mod cut;
mod fair;
pub mod link;
mod live;
pub mod pace;
mod receive;
mod release;
mod slots;
mod tree;
pub use tree::{water_fill, TreeError, PASS_NS_PER_CLASS, TREE_PERIOD};

use crate::ack_shaping::AckShaping;
use crate::flow_seed::FlowSeed;
use crate::flow_table::FlowTable;

use crate::config::{EngineConfig, MAX_BATCH_SIZE};
use crate::stats::{
    DropReason, EngineGauges, HistogramTally, NoTelemetry, Telemetry, LATENESS_BASE_NS,
    LATENESS_BUCKETS,
};
pub use live::{live_unsupported, LiveError};
use metronome_core::timestamp::Timestamper;
use metronome_core::{
    Duration, EdtQueue, HorizonPolicy, PacketRef, RejectReason, Timestamp, TimingWheel,
    TimingWheelConfig,
};
use metronome_io::FramePool;
use metronome_packet::{Classifier, ParseCounters};

/// Largest value of a `u32` byte count.
fn clamp_u32(bytes: u64) -> u32 {
    u32::try_from(bytes).unwrap_or(u32::MAX)
}

/// The drop reason of a wheel rejection.
fn reject_reason(reason: RejectReason) -> DropReason {
    match reason {
        RejectReason::BeyondHorizon => DropReason::Horizon,
        RejectReason::PoolExhausted => DropReason::PoolExhausted,
        _ => DropReason::QueueFull,
    }
}

/// The engine's own counters, cumulative. Every received frame ends in exactly one of
/// `forwarded`, `enqueued` (then `released` or still queued) or a drop counter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineCounters {
    /// Frames handed to [`Engine::receive`].
    pub received: u64,
    /// Frames forwarded at once: unshaped classes, and the non-IP and malformed frames passed
    /// or charged to an unshaped default class.
    pub forwarded: u64,
    /// Non-IP frames received (handled per `daemon.non_ip`).
    pub passed_non_ip: u64,
    /// Malformed frames received (by reason in [`Engine::parse_counters`]; handled per
    /// `daemon.malformed`).
    pub malformed: u64,
    /// Of `passed_non_ip + malformed`: charged to the default class (then forwarded, queued or
    /// dropped like its packets).
    pub unclassified_to_default: u64,
    /// Drops: non-IP or malformed frames under a `drop` action.
    pub dropped_unclassified: u64,
    /// Packets put into the wheel.
    pub enqueued: u64,
    /// Packets released from the wheel.
    pub released: u64,
    /// Drops: the flow held its `drop` limit.
    pub dropped_flow_limit: u64,
    /// Drops: beyond the horizon under a `reject` policy.
    pub dropped_horizon: u64,
    /// Drops: the wheel's node pool was exhausted.
    pub dropped_pool: u64,
    /// Drops: the frame would have taken its class past its `queue` bounds.
    pub dropped_queue_full: u64,
    /// Drops: the class held more than its share of the frame pool (`daemon.pool_share`).
    pub dropped_pool_share: u64,
    /// Packets above the ECN threshold that were not ECN-capable: queued unmarked (fallback).
    pub ecn_not_ect: u64,
    /// Packets marked CE.
    pub ecn_marked: u64,
    /// Packets above the ECN threshold that already carried CE (left as they are).
    pub ecn_already_ce: u64,
    /// Packets of a paced or limited class that found no room in the flow table, shaped under
    /// their class's overflow entry ([`crate::flow_table`]).
    pub flow_table_full: u64,
    /// Packets still queued when the loop stopped, freed by [`Engine::drain_all`].
    pub discarded_at_stop: u64,
    /// Wheel entries dropped while the outside link was down, for falling due after the
    /// outage had outlasted `daemon.link_down_grace` ([`Engine::expire`]).
    pub dropped_link_down: u64,
    /// Frames whose TCP/UDP checksum was completed (both directions).
    pub checksums_fixed: u64,
    /// Frames flagged `csum_not_ready` whose headers could not be walked (forwarded unchanged).
    pub checksum_failed: u64,
    /// GSO super-frames received (with `vnet_hdr`), whatever became of them.
    pub superframes: u64,
    /// Wheel entries beyond the first of super-frames cut into pieces: `enqueued` counts
    /// entries, a frame is one unit of `received`.
    pub pieces_extra: u64,
    /// Pieces of a cut super-frame that found no room in the wheel after its first pieces
    /// were queued, dropped (the class's `pool_exhausted` drops count them too).
    pub pieces_dropped: u64,
    /// Super-frames whose headers could not be walked for cutting (`SuperFrame::parse`):
    /// queued whole, charged the bytes their GSO header implies (or their length).
    pub gso_uncut: u64,
    /// Frames put into a fair class's flow queues ([`fair`]).
    pub fair_enqueued: u64,
    /// Frames pulled from the fair queues into the wheel (then counted in `enqueued`).
    pub fair_pulled: u64,
    /// Frames still in fair queues when the loop stopped, freed by [`Engine::drain_all`].
    pub fair_discarded_at_stop: u64,
    /// Frames of fair classes with no flow-table entry: queued in their class's overflow flow.
    pub fair_overflow: u64,
    /// Frames of sparse flows of fair classes sent at once instead of waiting for their class's
    /// next pull, their bytes charged to the class's rate (counted in `enqueued`, not in
    /// `fair_enqueued`; [`fair`]).
    pub fair_sparse_early: u64,
    /// Drops: frames a fair class shed from the head of its flow with the most bytes queued
    /// (frame pool nearly full, or its backlog beyond the horizon; [`fair`]).
    pub fair_dropped_fattest: u64,
    /// Wheel entries of classes on the `[link]` that the link dropped (its buffer, a not-ECT
    /// packet under `non_ect = "drop"`, a refused frame; by reason in [`Engine::link`]).
    pub link_dropped: u64,
}

impl EngineCounters {
    /// Every drop, whatever the reason.
    pub fn dropped(&self) -> u64 {
        self.dropped_flow_limit
            + self.dropped_horizon
            + self.dropped_pool
            + self.dropped_queue_full
            + self.dropped_pool_share
            + self.dropped_unclassified
            + self.fair_dropped_fattest
    }

    /// Frames (not pieces) that entered the wheel.
    pub fn enqueued_frames(&self) -> u64 {
        self.enqueued - self.pieces_extra
    }
}

/// Most class states an engine holds (a state is kept while its name is, reloads only add
/// states, and a live class's state serves the next class once it is deleted and drained):
/// 2^24 (16 777 216), sixteen times [`crate::config::MAX_CLASSES`], a bound on the
/// per-class tables (see `classes::ClassState` for what one costs) well inside the `u32` of a
/// `ClassId` and the 2^30 classes of a fair queue (`metronome_core::fair_queue::MAX_FAIR_CLASSES`).
pub const MAX_CLASS_STATES: usize = 1 << 24;

/// A reload that the engine refused; the running configuration stays in force.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// More class states over the daemon's life than [`MAX_CLASS_STATES`].
    #[error("reload refused: more than {MAX_CLASS_STATES} classes over the daemon's life")]
    TooManyClasses,
}

/// The shaping pipeline. See the module docs.
pub struct Engine {
    // Hot, per packet.
    classifier: Classifier,
    /// The flow-hashing keys, fixed for the engine's life ([`crate::flow_seed`]).
    flow_seed: FlowSeed,
    /// Config class id (0 = default, i + 1 = `classes[i]`) -> class state index.
    class_map: Vec<u32>,
    classes: Vec<classes::ClassState>,
    /// Class state index by name.
    class_index: std::collections::HashMap<String, usize>,
    /// States, class ids and policies that deleted classes left free ([`live`]).
    live: live::Live,
    /// Indices of the classes whose gauges or tallies changed since the last
    /// [`Engine::publish_gauges`] (each flagged `ClassState::dirty`), so that publishing costs
    /// what changed, not the number of classes.
    dirty: Vec<usize>,
    stamper: Timestamper,
    wheel: TimingWheel,
    flows: FlowTable,
    /// What the engine keeps per pool slot while its frame is queued ([`slots`]).
    slots: slots::Slots,
    /// Dequeue buffer, [`MAX_BATCH_SIZE`] references.
    batch: Vec<PacketRef>,
    /// The first large slot of the frame pool (`FramePool::is_large`), learnt at each
    /// [`Engine::receive`]; `u32::MAX` before the first.
    large_from: u32,
    /// Longest delay the wheel holds: horizon minus one slot.
    max_delay: Duration,
    /// Receiver-side ACK shaping of the reverse direction ([`crate::ack_shaping`]).
    acks: AckShaping,
    /// Flow queues of the fair classes ([`fair`]).
    fair: fair::Fair,
    // Cold.
    counters: EngineCounters,
    parse_counters: ParseCounters,
    /// Where the engine publishes its counts ([`crate::stats`]).
    telemetry: Box<dyn Telemetry>,
    /// Lateness of released packets since the last [`Engine::publish_gauges`].
    lateness: HistogramTally,
    /// Engine-wide values published with every batch: pass-through and unclassified frames.
    gauges: EngineGauges,
    /// The shared link, with `[link]` ([`link`]).
    link: Option<link::LinkStage>,
    /// The class tree's allocation ([`tree`]).
    tree: tree::TreeTable,
    /// Source pacing's flows and periods ([`pace`]).
    pace: pace::Pace,
    config: EngineConfig,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("classes", &self.classes.len())
            .field("queued", &self.wheel.len())
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// An engine for `config`, whose frames live in a pool of `pool_slots` slots, publishing to
    /// no [`Telemetry`] and hashing flows with [`FlowSeed::FIXED`] (tests, the simulator, the
    /// benchmarks; the daemon uses [`Engine::seeded`]). The wheel's node pool holds at most
    /// `min(wheel.pool_packets, pool_slots)` packets: no more frames can wait than the frame
    /// pool holds.
    pub fn new(config: &EngineConfig, pool_slots: usize) -> Engine {
        Self::seeded(config, pool_slots, Box::new(NoTelemetry), FlowSeed::FIXED)
    }

    /// [`Engine::new`] hashing flows with `seed` ([`crate::flow_seed`]: the daemon draws
    /// one at start-up), kept across reloads.
    /// Its counts go to `telemetry`.
    pub fn seeded(
        config: &EngineConfig,
        pool_slots: usize,
        telemetry: Box<dyn Telemetry>,
        seed: FlowSeed,
    ) -> Engine {
        // The wheel itself clamps: a class under `horizon_policy = "reject"` refuses a frame
        // before its policies stamp it (`receive`), so that a refused frame consumes no rate.
        // Rejected by the wheel after the stamp, whenever its front lags `now` by more than a
        // slot, the frame would have been charged to its class's rate and never sent.
        let wheel_config = TimingWheelConfig {
            pool_packets: config.wheel.pool_packets.min(pool_slots.max(1)),
            horizon_policy: HorizonPolicy::Clamp,
            ..config.wheel
        };
        let max_delay = wheel_config
            .horizon
            .as_nanos()
            .saturating_sub(wheel_config.granularity.as_nanos());
        let mut engine = Engine {
            classifier: config.classifier_seeded(seed.flow_hash()),
            flow_seed: seed,
            class_map: Vec::new(),
            classes: Vec::new(),
            class_index: std::collections::HashMap::new(),
            live: live::Live::default(),
            dirty: Vec::new(),
            stamper: Timestamper::new(),
            wheel: TimingWheel::new(wheel_config),
            flows: FlowTable::new(),
            slots: slots::Slots::new(pool_slots),
            batch: vec![PacketRef::default(); MAX_BATCH_SIZE],
            large_from: u32::MAX,
            max_delay: Duration::from_nanos(max_delay),
            acks: AckShaping::new(config, seed),
            fair: fair::Fair::new(pool_slots, wheel_config.pool_packets),
            counters: EngineCounters::default(),
            parse_counters: ParseCounters::new(),
            telemetry,
            lateness: HistogramTally::new(LATENESS_BASE_NS, LATENESS_BUCKETS),
            gauges: EngineGauges::default(),
            link: None,
            tree: tree::TreeTable::default(),
            pace: pace::Pace::default(),
            config: config.clone(),
        };
        // A fresh engine has no state, so this does not run out of class states: validation
        // caps the classes at `MAX_CLASSES`, below `MAX_CLASS_STATES` with the default class.
        if let Err(e) = engine.install_classes(config) {
            tracing::error!(error = %e, "the engine could not take the configuration's classes");
        }
        engine.fair_configure(config);
        engine
    }

    /// ACK shaping of the frames `ids[from..]` that [`Engine::pass_through`] just pushed
    /// ([`AckShaping::on_reverse`]): rewrites ACKs in place, frees and removes suppressed ones.
    pub fn shape_acks(
        &mut self,
        now: Timestamp,
        pool: &mut FramePool,
        ids: &mut Vec<u32>,
        from: usize,
    ) {
        self.acks.on_reverse(now, pool, ids, from);
        self.acks.publish(&mut *self.telemetry);
    }

    /// Pushes the ACKs that ACK shaping generates at `now` onto `out` (bound for `inside`), at
    /// most `room`; returns how many ([`AckShaping::generate`]).
    pub fn generate_acks(
        &mut self,
        now: Timestamp,
        pool: &mut FramePool,
        out: &mut Vec<u32>,
        room: usize,
    ) -> usize {
        let sent = self.acks.generate(now, pool, out, room);
        if sent > 0 {
            self.acks.publish(&mut *self.telemetry);
        }
        sent
    }

    /// The ACK-shaping state (counters).
    pub fn ack_shaping(&self) -> &AckShaping {
        &self.acks
    }

    /// Packets waiting in the wheel, in the fair classes' flow queues and on the link.
    pub fn queued(&self) -> usize {
        self.wheel.len() + self.fair_held() as usize + self.link.as_ref().map_or(0, |l| l.len())
    }

    /// The shared link, with `[link]`.
    pub fn link(&self) -> Option<&link::LinkStage> {
        self.link.as_ref()
    }

    /// The engine's counters.
    pub fn counters(&self) -> EngineCounters {
        self.counters
    }

    /// Every drop so far ([`EngineCounters::dropped`]), read in place: for the loop's round,
    /// which should not copy the whole counter set twice.
    pub fn dropped(&self) -> u64 {
        self.counters.dropped()
    }

    /// Frames by verdict and malformed reason.
    pub fn parse_counters(&self) -> &ParseCounters {
        &self.parse_counters
    }

    /// The configuration in force.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// The flow-hashing keys, fixed for the engine's life.
    pub fn flow_seed(&self) -> FlowSeed {
        self.flow_seed
    }

    /// The classifier in force.
    pub fn classifier(&self) -> &Classifier {
        &self.classifier
    }

    /// Puts `classifier` in force in place of the configuration's (a harness that builds its
    /// own rules; they must number the classes as [`EngineConfig::class_id`] does).
    pub fn replace_classifier(&mut self, classifier: Classifier) {
        self.classifier = classifier;
    }

    /// Flows holding a flow-table entry and evictions so far.
    pub fn flow_table_stats(&self) -> (usize, u64) {
        (self.flows.occupied(), self.flows.evictions)
    }

    /// Checks the accounting identities (CONTRIBUTING.md §10, §11); panics with the counters if
    /// broken.
    pub fn invariants(&self) {
        let c = &self.counters;
        assert_eq!(
            c.received,
            c.forwarded
                + c.enqueued_frames()
                + c.dropped()
                + self.fair.len()
                + c.fair_discarded_at_stop,
            "a received frame is unaccounted for: {c:?}"
        );
        let on_link = self.link.as_ref().map_or(0, |l| l.len() as u64);
        assert_eq!(
            c.enqueued,
            c.released
                + c.discarded_at_stop
                + c.dropped_link_down
                + c.link_dropped
                + self.wheel.len() as u64
                + on_link,
            "a wheel entry is unaccounted for: {c:?}"
        );
        let per_class: u64 = self.classes.iter().map(|s| s.queued).sum();
        assert_eq!(per_class, self.wheel.len() as u64 + on_link);
        if let Some(l) = &self.link {
            l.invariants();
            assert_eq!(l.counters().dropped(), c.link_dropped, "link drops: {c:?}");
        }
        assert!(self.flows.total_queued() <= per_class + self.fair.len());
        self.fair_invariants();
        self.live_invariants();
    }
}
