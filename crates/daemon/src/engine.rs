//! The daemon's per-packet shaping pipeline, without I/O: frames come in as pool slot ids, go out
//! as slot ids to transmit, and `now` is an argument (CONTRIBUTING.md §1). The loop (`run`) drives it
//! between two [`metronome_io::PacketPort`]s; the tests drive it with a
//! [`metronome_io::MemoryPort`].
//!
//! For each received frame ([`Engine::receive`]), Carousel §5.1 in order:
//! 1. **Checksum.** A frame received with `csum_not_ready` (a local sender's `CHECKSUM_PARTIAL`)
//!    gets its TCP/UDP checksum computed ([`metronome_packet::fix_l4_checksum`]), or the receiver
//!    would discard it.
//! 2. **Classify** ([`metronome_packet::parse`], [`metronome_packet::Classifier`]): packets of
//!    unshaped classes are forwarded at once. Non-IP frames (ARP, LLDP, ...) and malformed
//!    frames (counted under their named reason, `metronome_malformed_frames_total{reason}`) get
//!    the action of `[daemon] non_ip` / `malformed` ([`crate::unclassified`]): by default they
//!    are charged to the default class, so no frame escapes a configured limit; `pass` forwards
//!    them at once, `drop` frees them.
//! 3. **Admission** (`Engine::admit`): a frame that would take its class past its `queue`
//!    bounds (frames and wire bytes waiting, by default one horizon at its rate) is dropped
//!    under `queue_full`, and one of a class holding `daemon.pool_share` times the frame pool's
//!    free slots under `pool_share`, before it takes a flow-table entry; so one class's
//!    backlog cannot take the slots the others, and the receive path, need (a fair class sheds
//!    from its fattest flow instead, [`fair`]).
//!
//!    **Backpressure, before stamping** so that a dropped packet consumes no rate:
//!    `drop` discards a packet whose flow already has `limit` packets queued
//!    (`DropReason::FlowLimit`); `ecn` looks at the delay the packet would wait — the largest
//!    backlog of its policies, `Timestamper::backlog` — and above `threshold` sets CE on
//!    ECN-capable packets ([`metronome_packet::mark_ce`], IPv4 checksum fixed); a not-ECT packet
//!    is left untouched and queued, as `docs/config.md` specifies, and counted under
//!    `ecn_not_ect` (the fallback: such a flow gets no congestion signal from the shaper, only
//!    its delay). A class whose horizon policy is `reject` drops (`Horizon`) a packet
//!    whose delay would reach the wheel's horizon.
//! 4. **Timestamp** (Carousel §5.1.1): the EDT is the latest of the class's aggregate policy and,
//!    when the class paces, the flow's own pacing policy (kept in the bounded
//!    [`crate::flow_table`]; a packet whose flow finds no room there is paced and limited under
//!    its class's overflow entry, shared by all such packets of the class, and counted under
//!    `flow_table_full`). An EDT beyond the horizon is clamped to its last slot.
//! 5. **Queue** in the timing wheel (Carousel §5.1.2). A rejection (node pool exhausted) is a
//!    counted drop (`PoolExhausted`, or `Horizon`), its slot freed.
//!
//! **Super-frames** (ports with `vnet_hdr`; the header stays with the pool slot,
//! `FramePool::vnet`): a GSO frame is one unit for classification, the flow table and
//! backpressure, but it charges its class the bytes its segments occupy on the wire
//! (`metronome_packet::wire_bytes`), and one that would leave as a burst longer than the class's
//! `gso_burst` is cut into pieces, each with its own EDT and wheel entry ([`crate::pieces`],
//! NicPic §3); so is one above 65 535 wire bytes of a class on the link, whose port charges a
//! packet its `PacketRef` length ([`link`]). A frame with `NEEDS_CSUM` keeps it (the kernel or the device completes the
//! checksum when it leaves): no software checksum on this path. A CE mark set on a super-frame's
//! IP header is carried by every segment.
//!
//! [`Engine::release`] moves everything due into one transmit batch (inter-flow batching,
//! FlowBundler §IV-A) and observes each packet's lateness against its EDT, kept per pool slot.
//!
//! **Nothing is lost** (CONTRIBUTING.md §11): every received frame is forwarded at once, queued, released
//! or in a named drop counter; [`Engine::invariants`] checks
//! `received = forwarded + enqueued frames + dropped` and `enqueued = released + queued` (in
//! wheel entries: a cut super-frame has one per piece; entries dropped while the outside link
//! was down, [`Engine::expire`], and discarded at stop are on the released side).
//!
//! **Reload** ([`Engine::reload`]): classes are matched by name; an existing class keeps its
//! aggregate and pacing policies (`Timestamper::set_rate`, so no burst is granted) and its queued
//! packets leave at their EDT; a new classifier, hashing flows with the engine's seed
//! ([`crate::flow_seed`], so live flows keep their ids), takes the next packet. Changes that
//! need a restart (`ReloadPlan::restart_required`) are refused, the running configuration kept.

pub mod link;

use crate::ack_shaping::AckShaping;
use crate::config::{
    Backpressure, ClassPolicy, Config, ReloadPlan, ETHERNET_HEADER, MAX_BATCH_SIZE,
};
use crate::flow_seed::FlowSeed;
use crate::flow_table::{FlowTable, Lookup};
use crate::metrics::{ClassMetrics, DropReason, HistogramTally, Metrics};
use crate::pieces::{self, Cuts};
use crate::unclassified::{Unclassified, UnclassifiedKind};
use metronome_core::timestamp::{PolicyId, PolicyKind, PolicyStack, Timestamper};
use metronome_core::{
    ClassId, Duration, EdtQueue, FlowId, HorizonPolicy, PacketRef, RejectReason, Timestamp,
    TimingWheel, TimingWheelConfig,
};
use metronome_io::{FramePool, RxFrame};
use metronome_packet::gso::RX_BYTES_FRAMING;
use metronome_packet::{
    fix_l4_checksum, mark_ce, parse, Classifier, EcnMark, L4Checksum, ParseCounters, Parsed,
    SuperFrame, Verdict, VnetHdr,
};
use prometheus_client::metrics::counter::Counter;

/// No flow entry for a queued slot.
const NO_ENTRY: u32 = u32::MAX;
/// Name of the class state of packets no class matches (as in `Config::class_name`).
const DEFAULT_CLASS_NAME: &str = "default";

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

/// Segments per piece of `sf` for a class with `policy`: what leaves within the class's
/// `gso_burst` at its rate (the smaller of `rate` and `pacing`), at least two segments (as
/// `tcp_tso_autosize` keeps), and few enough for [`pieces::MAX_PIECES`] pieces. A frame within
/// the bound is not cut, however long, except on a link; the pieces of a cut frame have at most
/// 65 535 wire bytes (a `PacketRef`'s length).
fn cut_segments(sf: &SuperFrame, policy: &ClassPolicy) -> u32 {
    let total = sf.segments();
    let rate = match (policy.rate, policy.pacing) {
        (Some(a), Some(b)) => Some(if a.bps() <= b.bps() { a } else { b }),
        (a, b) => a.or(b),
    };
    let budget = rate.map_or(u64::MAX, |r| r.bytes_in(policy.gso_burst));
    let by_rate = sf.segments_within(budget, RX_BYTES_FRAMING).max(2);
    let by_len = sf.segments_within(u64::from(u16::MAX), RX_BYTES_FRAMING);
    if by_rate >= total {
        if policy.link.on_link && by_len < total {
            // The link's port charges DWRR deficits, its buffer and its marking thresholds a
            // packet's `PacketRef` length: a frame above 65 535 wire bytes goes as pieces of
            // equal segments within it, so that every queue pays its wire bytes exactly.
            return total.div_ceil(total.div_ceil(by_len));
        }
        // Within the bound: one unit, whatever its length (its wire bytes are kept per slot).
        return total;
    }
    by_rate
        .min(by_len)
        .max(total.div_ceil(pieces::MAX_PIECES))
        .min(total)
        .max(1)
}

/// The wire bytes of a queued entry: a piece's length, or the uncut frame's (`slot_wire`).
fn wire_of(cuts: &Cuts, slot_wire: &[u32], pkt: PacketRef) -> u64 {
    if cuts.is_piece(pkt.id) {
        return u64::from(pkt.len);
    }
    let (slot, _) = pieces::decode(pkt.id);
    slot_wire
        .get(slot as usize)
        .map_or(u64::from(pkt.len), |&w| u64::from(w))
}

/// Wire bytes of piece `k` of `sf` cut into pieces of `max_segments` segments (what
/// `metronome_packet::Piece::wire_bytes` reports, without writing its headers).
fn piece_wire_bytes(sf: &SuperFrame, k: u32, max_segments: u32) -> u64 {
    let s = sf.gso_size() as u64;
    let first = u64::from(k) * u64::from(max_segments);
    let segments = (u64::from(sf.segments()) - first.min(u64::from(sf.segments())))
        .min(u64::from(max_segments));
    let payload = (sf.payload_len() as u64)
        .saturating_sub(first * s)
        .min(segments * s);
    segments * (sf.header_len() as u64 + u64::from(RX_BYTES_FRAMING)) + payload
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
    /// outage had outlasted `daemon.link_down_grace` ([`Engine::expire`], [`crate::link`]).
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

/// A reload that the engine refused; the running configuration stays in force.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// Some changed field needs a restart (listed one per line).
    #[error("reload refused, these changes need a restart:\n{0}")]
    RestartRequired(ReloadPlan),
    /// More classes over the daemon's life than a `ClassId` can number.
    #[error(
        "reload refused: more than {} classes over the daemon's life",
        u16::MAX
    )]
    TooManyClasses,
}

/// What the engine keeps per class. Indexed by a *state* index that is stable across reloads
/// (a class keeps its state while it keeps its name); `PacketRef::class` holds that index.
#[derive(Debug)]
struct ClassState {
    name: String,
    policy: ClassPolicy,
    horizon_policy: HorizonPolicy,
    /// The class's aggregate rate policy, when it has a rate.
    aggregate: Option<PolicyId>,
    metrics: ClassMetrics,
    /// Packets and bytes sent since the last [`Engine::publish_gauges`], added to `metrics`
    /// there (once per batch, not per packet).
    unpublished: (u64, u64),
    /// Packets of this class in the wheel.
    queued: u64,
    /// Wire bytes of the class's entries in the wheel and on the link.
    queued_bytes: u64,
    /// Of `queued`: entries whose frame is in a large pool slot.
    queued_large: u64,
    /// The class's `queue` bounds in force, frames and wire bytes ([`QueueLimit::bounds`]).
    bound: (u64, u64),
    /// Bytes of this class accepted into the wheel, cumulative: the silo's demand that the
    /// NIC-level bandwidth allocator reads (Carousel §5.3, "byte count" samples).
    stamped_bytes: u64,
}

impl ClassState {
    /// Takes one entry of `wire` bytes, in a large slot or not, off the class's counts.
    fn left(&mut self, wire: u64, large: bool) {
        self.queued = self.queued.saturating_sub(1);
        self.queued_bytes = self.queued_bytes.saturating_sub(wire);
        self.queued_large = self.queued_large.saturating_sub(u64::from(large));
    }
}

/// The shaping pipeline. See the module docs.
pub struct Engine {
    // Hot, per packet.
    classifier: Classifier,
    /// The flow-hashing keys, fixed for the engine's life ([`crate::flow_seed`]).
    flow_seed: FlowSeed,
    /// Config class id (0 = default, i + 1 = `classes[i]`) -> class state index.
    class_map: Vec<u16>,
    classes: Vec<ClassState>,
    stamper: Timestamper,
    wheel: TimingWheel,
    flows: FlowTable,
    /// EDT of the packet in each pool slot (valid while it is queued): lateness at release.
    slot_edt: Vec<Timestamp>,
    /// Flow entry of the packet in each pool slot, or [`NO_ENTRY`].
    slot_entry: Vec<u32>,
    /// Nanoseconds between the EDTs of consecutive pieces of a cut super-frame in each pool
    /// slot (its first piece's EDT is in `slot_edt`): lateness of every piece at release.
    slot_step: Vec<u64>,
    /// Wire bytes of the uncut frame in each pool slot (a `PacketRef`'s `u16` length saturates
    /// for a super-frame above 65 535 wire bytes): the class byte count at release.
    slot_wire: Vec<u32>,
    /// Cut super-frames ([`crate::pieces`]).
    cuts: Cuts,
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
    metrics: Metrics,
    /// Lateness of released packets since the last [`Engine::publish_gauges`].
    lateness: HistogramTally,
    /// Frames passed unshaped (packets, bytes) since the last [`Engine::publish_gauges`].
    unpublished_pass: (u64, u64),
    /// `metronome_unclassified_frames_total`, by [`UnclassifiedKind::index`] and
    /// [`Unclassified::index`].
    unclassified: [[Counter; 3]; 2],
    /// The shared link, with `[link]` ([`link`]).
    link: Option<link::LinkStage>,
    config: Config,
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
    /// An engine for `config`, whose frames live in a pool of `pool_slots` slots, counting into
    /// `metrics`, hashing flows with [`FlowSeed::FIXED`] (tests, the simulator, the
    /// benchmarks; the daemon uses [`Engine::seeded`]). The wheel's node pool holds at most
    /// `min(wheel.pool_packets, pool_slots)` packets: no more frames can wait than the frame
    /// pool holds.
    pub fn new(config: &Config, pool_slots: usize, metrics: Metrics) -> Engine {
        Self::seeded(config, pool_slots, metrics, FlowSeed::FIXED)
    }

    /// [`Engine::new`] hashing flows with `seed` ([`crate::flow_seed`]: the daemon draws one at
    /// start-up), kept across reloads.
    pub fn seeded(config: &Config, pool_slots: usize, metrics: Metrics, seed: FlowSeed) -> Engine {
        let wheel_config = TimingWheelConfig {
            pool_packets: config.wheel.pool_packets.min(pool_slots.max(1)),
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
            stamper: Timestamper::new(),
            wheel: TimingWheel::new(wheel_config),
            flows: FlowTable::new(),
            slot_edt: vec![Timestamp::ZERO; pool_slots],
            slot_entry: vec![NO_ENTRY; pool_slots],
            slot_step: vec![0; pool_slots],
            slot_wire: vec![0; pool_slots],
            cuts: Cuts::new(pool_slots),
            batch: vec![PacketRef::default(); MAX_BATCH_SIZE],
            large_from: u32::MAX,
            max_delay: Duration::from_nanos(max_delay),
            acks: AckShaping::new(config, &metrics, seed),
            fair: fair::Fair::new(pool_slots, wheel_config.pool_packets),
            counters: EngineCounters::default(),
            parse_counters: ParseCounters::new(),
            lateness: metrics.lateness_tally(),
            unpublished_pass: (0, 0),
            unclassified: UnclassifiedKind::ALL.map(|k| {
                Unclassified::ALL.map(|a| metrics.unclassified_counter(k.label(), a.label()))
            }),
            metrics,
            link: None,
            config: config.clone(),
        };
        // A fresh engine has no state, so this cannot run out of class ids (validation caps
        // the classes at `MAX_CLASSES`).
        let _ = engine.install_classes(config);
        engine.fair_configure(config);
        engine
    }

    /// Maps every class of `config` to a state, creating or updating states by name.
    fn install_classes(&mut self, config: &Config) -> Result<(), ReloadError> {
        let mut wanted: Vec<(&str, ClassPolicy)> = vec![(DEFAULT_CLASS_NAME, config.default_class)];
        wanted.extend(config.classes.iter().map(|c| (c.name.as_str(), c.policy)));
        let new_names = wanted
            .iter()
            .filter(|(n, _)| !self.classes.iter().any(|s| s.name == *n))
            .count();
        if self.classes.len() + new_names > usize::from(u16::MAX) {
            return Err(ReloadError::TooManyClasses);
        }
        let mut map = Vec::with_capacity(wanted.len());
        for (name, policy) in wanted {
            let index = match self.classes.iter().position(|s| s.name == name) {
                Some(i) => i,
                None => {
                    self.classes.push(ClassState {
                        name: name.to_owned(),
                        policy: ClassPolicy::unshaped(config.interfaces.mtu),
                        horizon_policy: config.wheel.horizon_policy,
                        aggregate: None,
                        metrics: self.metrics.class(name),
                        unpublished: (0, 0),
                        queued: 0,
                        queued_bytes: 0,
                        queued_large: 0,
                        bound: (u64::MAX, u64::MAX),
                        stamped_bytes: 0,
                    });
                    self.classes.len() - 1
                }
            };
            self.apply_policy(index, policy, config);
            map.push(index as u16); // < u16::MAX: checked above
        }
        self.configure_link(config, &map);
        self.class_map = map;
        self.flows.set_classes(self.classes.len());
        self.classifier = config.classifier_seeded(self.flow_seed.flow_hash());
        Ok(())
    }

    /// Builds or reconfigures the link stage for `config`, whose classes have the state indices
    /// `map` (default first).
    fn configure_link(&mut self, config: &Config, map: &[u16]) {
        let Some(link_config) = &config.link else {
            self.link = None;
            return;
        };
        let policies =
            std::iter::once(&config.default_class).chain(config.classes.iter().map(|c| &c.policy));
        let members: Vec<_> = map
            .iter()
            .zip(policies)
            .map(|(&state, policy)| (usize::from(state), policy.link))
            .collect();
        let stage = match &mut self.link {
            Some(stage) => {
                stage.configure(link_config, &members);
                stage
            }
            None => {
                let mut stage = link::LinkStage::new(link_config, &members);
                stage.set_port_metrics(self.metrics.link_port());
                self.link.insert(stage)
            }
        };
        for (state, l) in members {
            if l.on_link {
                stage.set_class_metrics(state, self.metrics.link_class(&self.classes[state].name));
            }
        }
    }

    fn apply_policy(&mut self, index: usize, policy: ClassPolicy, config: &Config) {
        let wheel_horizon = config.wheel.horizon_policy;
        let frame = config.interfaces.mtu.saturating_add(ETHERNET_HEADER);
        let state = &mut self.classes[index];
        state.bound = policy
            .queue
            .bounds(policy.rate, config.wheel.horizon, frame);
        state.aggregate = match (policy.rate, state.aggregate) {
            (Some(rate), Some(p)) => {
                let _ = self.stamper.set_rate(p, rate);
                let _ = self.stamper.set_burst(p, policy.burst);
                Some(p)
            }
            (Some(rate), None) => Some(self.stamper.add_policy(
                PolicyKind::Aggregate,
                rate,
                policy.burst,
            )),
            (None, _) => None,
        };
        if let Some(pacing) = policy.pacing {
            self.flows
                .set_class_pacing(index as u32, &mut self.stamper, pacing, policy.burst);
        }
        state.policy = policy;
        state.horizon_policy = policy.horizon_policy.unwrap_or(wheel_horizon);
    }

    /// Applies `new`'s classes, rates and default policy live (SIGHUP). Queued packets stay and
    /// leave at their EDT. Returns what changed; refuses (changing nothing) when a change needs a
    /// restart.
    pub fn reload(&mut self, new: &Config) -> Result<ReloadPlan, ReloadError> {
        let plan = self.config.diff(new);
        if plan.needs_restart() {
            return Err(ReloadError::RestartRequired(plan));
        }
        self.install_classes(new)?;
        self.fair_configure(new);
        self.acks.reload(new);
        self.config = new.clone();
        Ok(plan)
    }

    /// Processes received frames (slots of `pool`): pushes the ids to transmit at once onto
    /// `forward`, queues shaped packets, frees the slots of dropped ones.
    pub fn receive(
        &mut self,
        now: Timestamp,
        pool: &mut FramePool,
        frames: &[RxFrame],
        forward: &mut Vec<u32>,
    ) {
        self.fair_free_orphans(pool);
        self.large_from = u32::try_from(pool.capacity() - pool.large_capacity()).unwrap_or(0);
        for rx in frames {
            self.counters.received += 1;
            let vnet = pool.vnet(rx.id);
            if vnet.is_gso() {
                self.counters.superframes += 1;
            }
            let frame = pool.frame_mut(rx.id);
            let parsed = parse(frame);
            if rx.csum_not_ready {
                match fix_l4_checksum(frame, &parsed) {
                    L4Checksum::Fixed => self.counters.checksums_fixed += 1,
                    L4Checksum::Malformed => self.counters.checksum_failed += 1,
                    L4Checksum::NotApplicable => {}
                }
            }
            let verdict = self.classifier.classify(&parsed);
            self.parse_counters.record(&verdict);
            match verdict {
                Verdict::Shape { class, flow, len } => {
                    let (wire, frame) = self.charge(pool, rx.id, &vnet, u32::from(len));
                    self.shape(now, pool, rx.id, class, flow, wire, frame, &parsed, forward)
                }
                Verdict::PassNonIp => {
                    self.counters.passed_non_ip += 1;
                    let kind = UnclassifiedKind::NonIp;
                    self.unclassified(now, pool, rx, kind, &parsed, forward);
                }
                Verdict::Malformed(reason) => {
                    self.counters.malformed += 1;
                    self.metrics.malformed(reason.name());
                    let kind = UnclassifiedKind::Malformed;
                    self.unclassified(now, pool, rx, kind, &parsed, forward);
                }
            }
        }
        self.publish_gauges();
    }

    /// Frames received on the outside port, passed to the inside unshaped: completes their
    /// checksums (a local receiver's ACKs are `CHECKSUM_PARTIAL` too), counts them and pushes
    /// their ids onto `out`.
    pub fn pass_through(&mut self, pool: &mut FramePool, frames: &[RxFrame], out: &mut Vec<u32>) {
        for rx in frames {
            if rx.csum_not_ready {
                let frame = pool.frame_mut(rx.id);
                let parsed = parse(frame);
                match fix_l4_checksum(frame, &parsed) {
                    L4Checksum::Fixed => self.counters.checksums_fixed += 1,
                    L4Checksum::Malformed => self.counters.checksum_failed += 1,
                    L4Checksum::NotApplicable => {}
                }
            }
            let vnet = pool.vnet(rx.id);
            if vnet.needs_csum() && !vnet.is_gso() && self.acks.is_active() {
                // ACK shaping updates the TCP checksum incrementally (RFC 1624), which is only
                // right for a complete checksum, not for the pseudo-header sum of NEEDS_CSUM.
                let frame = pool.frame_mut(rx.id);
                if metronome_packet::gso::complete_partial_checksum(
                    frame,
                    vnet.csum_start,
                    vnet.csum_offset,
                ) {
                    self.counters.checksums_fixed += 1;
                    let flags = vnet.flags & !metronome_packet::gso::FLAG_NEEDS_CSUM;
                    pool.set_vnet(rx.id, VnetHdr { flags, ..vnet });
                } else {
                    self.counters.checksum_failed += 1;
                }
            }
            let (wire, _) = self.charge(pool, rx.id, &vnet, rx.len);
            self.tally_pass_through(wire);
            out.push(rx.id);
        }
        self.publish_gauges();
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
                let pkt = self.batch[k];
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
    /// `daemon.link_down_grace` ([`crate::link`]); entries due later stay in the wheel with
    /// their EDT. Returns how many entries it dropped. One entry per dequeue, so that nothing
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
            let pkt = self.batch[0];
            if let Some(state) = self.classes.get(usize::from(pkt.class.0)) {
                state.metrics.dropped(DropReason::LinkDown);
            }
            self.discard(pool, pkt);
            total += 1;
        }
        if total > 0 {
            self.counters.dropped_link_down += total;
            self.publish_gauges();
        }
        total
    }

    /// Frees a queued entry that will not be sent and takes it off its flow's and class's
    /// queued counts (the caller counts it).
    fn discard(&mut self, pool: &mut FramePool, pkt: PacketRef) {
        let wire = self.wire_bytes(pkt);
        self.cuts.finish(pool, pkt.id);
        self.count_left(pkt, wire);
        let (slot, _) = pieces::decode(pkt.id);
        if let Some(&e) = self.slot_entry.get(slot as usize) {
            if e != NO_ENTRY {
                self.flows.remove_queued(e);
            }
        }
    }

    /// A frame the classifier could not place: the action `[daemon] malformed` / `non_ip` names
    /// ([`crate::unclassified`]), counted.
    fn unclassified(
        &mut self,
        now: Timestamp,
        pool: &mut FramePool,
        rx: &RxFrame,
        kind: UnclassifiedKind,
        parsed: &Parsed,
        forward: &mut Vec<u32>,
    ) {
        let action = match kind {
            UnclassifiedKind::Malformed => self.config.daemon.malformed,
            UnclassifiedKind::NonIp => self.config.daemon.non_ip,
        };
        self.unclassified[kind.index()][action.index()].inc();
        match action {
            Unclassified::Pass => {
                self.forward(rx.id, forward);
                self.tally_pass_through(u64::from(rx.len));
            }
            Unclassified::Drop => {
                self.counters.dropped_unclassified += 1;
                pool.free(rx.id);
            }
            Unclassified::Default => {
                self.counters.unclassified_to_default += 1;
                let class = self.classifier.default_class();
                self.shape(
                    now,
                    pool,
                    rx.id,
                    class,
                    kind.flow(),
                    u64::from(rx.len),
                    None,
                    parsed,
                    forward,
                );
            }
        }
    }

    fn forward(&mut self, id: u32, forward: &mut Vec<u32>) {
        self.counters.forwarded += 1;
        forward.push(id);
    }

    #[allow(clippy::too_many_arguments)]
    fn shape(
        &mut self,
        now: Timestamp,
        pool: &mut FramePool,
        id: u32,
        class: ClassId,
        flow: FlowId,
        len: u64,
        superframe: Option<SuperFrame>,
        parsed: &Parsed,
        forward: &mut Vec<u32>,
    ) {
        let index = usize::from(
            self.class_map
                .get(usize::from(class.0))
                .copied()
                .unwrap_or(0),
        );
        let Some(state) = self.classes.get(index) else {
            return self.forward(id, forward);
        };
        if !state.policy.is_shaped() && !state.policy.link.on_link {
            let state = &mut self.classes[index];
            state.unpublished.0 += 1;
            state.unpublished.1 += len;
            return self.forward(id, forward);
        }
        let (policy, horizon_policy, aggregate) =
            (state.policy, state.horizon_policy, state.aggregate);
        let fair = policy.fair && aggregate.is_some();
        // Before the flow table: a frame its class cannot hold takes no flow entry.
        if !fair {
            if let Err(reason) = self.admit(pool, index, id, len) {
                return self.drop(pool, id, index, reason);
            }
        }
        let entry = match self.flows.lookup(index as u32, flow, now, &self.stamper) {
            Lookup::Entry(e) => Some(e),
            // The bucket is full of active flows: the class's overflow entry paces and limits
            // this packet with the others that found no way (`crate::flow_table`).
            Lookup::Overflow(e) => {
                self.counters.flow_table_full += 1;
                self.classes[index].metrics.flow_table_overflow();
                Some(e)
            }
            // Not reached: `install_classes` gives every class an overflow entry.
            Lookup::Full => {
                self.counters.flow_table_full += 1;
                None
            }
        };
        if let (Backpressure::Drop { limit }, Some(e)) = (policy.backpressure, entry) {
            if self.flows.queued(e) >= limit {
                return self.drop(pool, id, index, DropReason::FlowLimit);
            }
        }
        if fair {
            let packet = (id, index, entry);
            return self.fair_enqueue(now, pool, packet, (len, superframe), parsed);
        }
        let pacing = match (policy.pacing, entry) {
            (Some(rate), Some(e)) => {
                self.flows
                    .pacing_policy(e, &mut self.stamper, rate, policy.burst)
            }
            _ => None,
        };
        let policies = PolicyStack::new(aggregate, pacing);
        // The delay this packet will wait: the largest backlog among its policies.
        let delay = policies.backlog(&self.stamper, now);
        if let Backpressure::Ecn { threshold } = policy.backpressure {
            if delay > threshold {
                self.mark_ecn(pool, id, index, parsed);
            }
        }
        if horizon_policy == HorizonPolicy::Reject && delay >= self.max_delay {
            return self.drop(pool, id, index, DropReason::Horizon);
        }
        let entry_id = entry.unwrap_or(NO_ENTRY);
        if let Some(sf) = superframe {
            let max_segments = cut_segments(&sf, &policy);
            let n = sf.pieces(max_segments);
            if n > 1 {
                let queued = self.queue_pieces(
                    (now, now),
                    (id, flow, index),
                    &sf,
                    (max_segments, n),
                    policies,
                    entry_id,
                );
                if let Err(reason) = queued {
                    self.drop(pool, id, index, reason);
                }
                return;
            }
        }
        let edt = policies.stamp(&mut self.stamper, now, now, clamp_u32(len));
        let edt = edt.min(now.saturating_add(self.max_delay));
        let len16 = u16::try_from(len).unwrap_or(u16::MAX);
        let pkt = PacketRef::new(id, flow, ClassId(index as u16), len16);
        match self.wheel.enqueue(now, edt, pkt) {
            Ok(()) => self.book_whole(id, index, edt, len, entry),
            Err(rejected) => self.drop(pool, id, index, reject_reason(rejected.reason)),
        }
    }

    /// Books a frame the wheel took whole (one entry, not cut into pieces): slot `id` of class
    /// `index`, `len` bytes stamped, departing at `edt`, of flow-table entry `entry`.
    fn book_whole(&mut self, id: u32, index: usize, edt: Timestamp, len: u64, entry: Option<u32>) {
        self.counters.enqueued += 1;
        self.count_queued(index, id, len);
        self.classes[index].stamped_bytes += len;
        let i = id as usize;
        if let Some(slot) = self.slot_edt.get_mut(i) {
            *slot = edt;
        }
        if let Some(slot) = self.slot_step.get_mut(i) {
            *slot = 0;
        }
        if let Some(slot) = self.slot_wire.get_mut(i) {
            *slot = clamp_u32(len);
        }
        if let Some(slot) = self.slot_entry.get_mut(i) {
            *slot = entry.unwrap_or(NO_ENTRY);
        }
        if let Some(e) = entry {
            self.flows.add_queued(e);
        }
    }

    /// Queues the `n` pieces of `max_segments` segments of the super-frame `sf` in slot `id`,
    /// each with its own EDT at the class's rate (NicPic §3), one wheel entry each
    /// ([`crate::pieces`]), stamped as of `at` (`now`, or a fair packet's arrival). A piece
    /// that finds the wheel full drops the pieces after it; when the first one does, nothing is
    /// queued and the reason comes back for the caller to drop the frame.
    fn queue_pieces(
        &mut self,
        (now, at): (Timestamp, Timestamp),
        (id, flow, index): (u32, FlowId, usize),
        sf: &SuperFrame,
        (max_segments, n): (u32, u32),
        policies: PolicyStack,
        entry: u32,
    ) -> Result<(), DropReason> {
        let latest = now.saturating_add(self.max_delay);
        let (mut first, mut last) = (Timestamp::ZERO, Timestamp::ZERO);
        let mut queued = 0;
        for k in 0..n {
            let wire = piece_wire_bytes(sf, k, max_segments);
            let edt = policies
                .stamp(&mut self.stamper, at, at, clamp_u32(wire))
                .min(latest);
            let len16 = u16::try_from(wire).unwrap_or(u16::MAX);
            let pkt = PacketRef::new(pieces::encode(id, k), flow, ClassId(index as u16), len16);
            match self.wheel.enqueue(now, edt, pkt) {
                Ok(()) => {
                    if k == 0 {
                        first = edt;
                        self.cuts.start(id, max_segments, n);
                    }
                    last = edt;
                    queued += 1;
                    self.count_queued(index, id, wire);
                    self.classes[index].stamped_bytes += wire;
                    if entry != NO_ENTRY {
                        self.flows.add_queued(entry);
                    }
                }
                Err(rejected) => {
                    let reason = reject_reason(rejected.reason);
                    if k == 0 {
                        return Err(reason);
                    }
                    let lost = u64::from(n - k);
                    self.counters.pieces_dropped += lost;
                    if let Some(state) = self.classes.get(index) {
                        for _ in 0..lost {
                            state.metrics.dropped(reason);
                        }
                    }
                    self.cuts.truncate(id, k);
                    break;
                }
            }
        }
        self.counters.enqueued += queued;
        self.counters.pieces_extra += queued - 1;
        let i = id as usize;
        if let Some(slot) = self.slot_edt.get_mut(i) {
            *slot = first;
        }
        if let Some(slot) = self.slot_step.get_mut(i) {
            *slot = last.saturating_since(first).as_nanos() / (queued - 1).max(1);
        }
        if let Some(slot) = self.slot_entry.get_mut(i) {
            *slot = entry;
        }
        Ok(())
    }

    /// Counts an entry of class `index` into the wheel: its frame in pool slot `slot`, `wire`
    /// bytes (the class's `queued`, `queued_bytes`, `queued_large`).
    fn count_queued(&mut self, index: usize, slot: u32, wire: u64) {
        let large = slot >= self.large_from;
        if let Some(state) = self.classes.get_mut(index) {
            state.queued += 1;
            state.queued_bytes += wire;
            state.queued_large += u64::from(large);
        }
    }

    /// Takes entry `pkt` (`wire` bytes) off its class's counts when it leaves the wheel or the
    /// link, discarded or dropped ([`Engine::depart`] counts a sent one).
    fn count_left(&mut self, pkt: PacketRef, wire: u64) {
        let (slot, _) = pieces::decode(pkt.id);
        let large = slot >= self.large_from;
        if let Some(state) = self.classes.get_mut(usize::from(pkt.class.0)) {
            state.left(wire, large);
        }
    }

    /// Frames and wire bytes class `index` holds waiting, what its `queue` bounds count: its
    /// entries in the wheel and on the link, and its frames in the fair queue.
    fn class_held(&self, index: usize) -> (u64, u64) {
        let (fair_packets, fair_bytes) = self.fair_class_load(index);
        self.classes.get(index).map_or((0, 0), |s| {
            (s.queued + fair_packets, s.queued_bytes + fair_bytes)
        })
    }

    /// Whether class `index` may take one more frame, in pool slot `id`, of `len` wire bytes:
    /// within its `queue` bounds (frames and bytes waiting in its fair queue, the wheel and on
    /// the link; [`DropReason::QueueFull`]) and within its share of the frame pool
    /// ([`DropReason::PoolShare`]): the class holds fewer slots of the frame's size class than
    /// `daemon.pool_share` (α) times the slots still free. A class alone can take most of the
    /// pool; with N classes over their share each holds at most `α / (1 + N α)` of it, and the
    /// rest stays free for the others and for the receive path (the dynamic threshold of
    /// shared-buffer switches, `crate::config::DEFAULT_POOL_SHARE`). α = 0: no share.
    fn admit(&self, pool: &FramePool, index: usize, id: u32, len: u64) -> Result<(), DropReason> {
        let Some(s) = self.classes.get(index) else {
            return Ok(());
        };
        let (packets, bytes) = self.class_held(index);
        if packets >= s.bound.0 || bytes.saturating_add(len) > s.bound.1 {
            return Err(DropReason::QueueFull);
        }
        let share = u64::from(self.config.daemon.pool_share);
        if share == 0 {
            return Ok(());
        }
        let (held, free) = if id >= self.large_from {
            (s.queued_large, pool.available_large())
        } else {
            (s.queued - s.queued_large, pool.available_small())
        };
        if held >= share.saturating_mul(free as u64) {
            return Err(DropReason::PoolShare);
        }
        Ok(())
    }

    /// The bytes a received frame in slot `id` charges its class: for a GSO super-frame the
    /// bytes its segments occupy on the wire (`metronome_packet::wire_bytes`, the `rx_bytes`
    /// convention), with its walked headers for cutting; else `len`.
    fn charge(
        &mut self,
        pool: &FramePool,
        id: u32,
        vnet: &VnetHdr,
        len: u32,
    ) -> (u64, Option<SuperFrame>) {
        if !vnet.is_gso() {
            return (u64::from(len), None);
        }
        let frame = pool.frame(id);
        match SuperFrame::parse(frame, vnet) {
            Ok(sf) => (sf.wire_bytes(RX_BYTES_FRAMING), Some(sf)),
            Err(_) => {
                self.counters.gso_uncut += 1;
                let wire = metronome_packet::wire_bytes(frame, vnet, RX_BYTES_FRAMING)
                    .unwrap_or(u64::from(len));
                (wire, None)
            }
        }
    }

    /// Marks packet `id` of class `class` CE (ECN backpressure) and counts the outcome: marked,
    /// already CE, or not ECN-capable (CONTRIBUTING.md §11).
    fn mark_ecn(&mut self, pool: &mut FramePool, id: u32, class: usize, parsed: &Parsed) {
        match mark_ce(pool.frame_mut(id), parsed) {
            EcnMark::Marked => {
                self.counters.ecn_marked += 1;
                self.classes[class].metrics.ecn_marked();
            }
            EcnMark::AlreadyCe => self.counters.ecn_already_ce += 1,
            EcnMark::NotEct | EcnMark::NotIp => {
                self.counters.ecn_not_ect += 1;
                self.classes[class].metrics.ecn_not_ect();
            }
        }
    }

    fn drop(&mut self, pool: &mut FramePool, id: u32, class: usize, reason: DropReason) {
        match reason {
            DropReason::FlowLimit => self.counters.dropped_flow_limit += 1,
            DropReason::Horizon => self.counters.dropped_horizon += 1,
            DropReason::QueueFull => self.counters.dropped_queue_full += 1,
            DropReason::PoolShare => self.counters.dropped_pool_share += 1,
            _ => self.counters.dropped_pool += 1,
        }
        if let Some(state) = self.classes.get(class) {
            state.metrics.dropped(reason);
        }
        pool.free(id);
    }

    /// Moves up to `max` packets due at `now` (at most [`MAX_BATCH_SIZE`]) onto `out`, as one
    /// transmit batch; returns how many. Observes each one's lateness (`now - EDT`). Fair
    /// classes with credit at `now` are pulled first, and again while what they pull is due
    /// and the batch has room ([`fair`]). Packets of classes on the `[link]` go from the wheel
    /// into the link ([`link`]), which marks them in `pool` or drops them (freeing their
    /// slots), and leave when the link is free.
    pub fn release(
        &mut self,
        now: Timestamp,
        pool: &mut FramePool,
        out: &mut Vec<u32>,
        max: usize,
    ) -> usize {
        let max = max.min(self.batch.len());
        let mut total = 0;
        loop {
            let pulled = self.fair_pull(now);
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
            for k in 0..n {
                let pkt = self.batch[k];
                if self.on_link(pkt) {
                    self.link_enqueue(now, pool, pkt);
                } else {
                    self.depart(now, pkt, out);
                    sent += 1;
                }
            }
            if n == 0 || sent == max || self.link.is_none() {
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
    fn depart(&mut self, now: Timestamp, pkt: PacketRef, out: &mut Vec<u32>) -> Timestamp {
        let (slot, piece) = pieces::decode(pkt.id);
        let i = slot as usize;
        let mut edt = now;
        if let (Some(&first), Some(&step)) = (self.slot_edt.get(i), self.slot_step.get(i)) {
            edt = first.saturating_add(Duration::from_nanos(step * u64::from(piece)));
            self.lateness.observe(now.saturating_since(edt).as_nanos());
        }
        if let Some(&e) = self.slot_entry.get(i) {
            if e != NO_ENTRY {
                self.flows.remove_queued(e);
            }
        }
        let wire = self.wire_bytes(pkt);
        let large = slot >= self.large_from;
        if let Some(state) = self.classes.get_mut(usize::from(pkt.class.0)) {
            state.left(wire, large);
            state.unpublished.0 += 1;
            state.unpublished.1 += wire;
        }
        out.push(pkt.id);
        self.counters.released += 1;
        edt
    }

    /// The wire bytes of a queued entry: a piece's length, or the uncut frame's (`slot_wire`).
    fn wire_bytes(&self, pkt: PacketRef) -> u64 {
        wire_of(&self.cuts, &self.slot_wire, pkt)
    }

    /// Counts a frame passed unshaped; published with the gauges.
    fn tally_pass_through(&mut self, len: u64) {
        self.unpublished_pass.0 += 1;
        self.unpublished_pass.1 += len;
    }

    /// Publishes the gauges and what was tallied since the last call (sent packets and bytes per
    /// class, pass-through, lateness): once per batch, so the per-packet path does no atomic
    /// read-modify-write on shared metrics.
    fn publish_gauges(&mut self) {
        self.metrics.set_wheel_occupancy(self.wheel.len() as u64);
        for state in &mut self.classes {
            state.metrics.set_queued(state.queued);
            let (packets, bytes) = std::mem::take(&mut state.unpublished);
            if packets > 0 {
                state.metrics.sent(packets, bytes);
            }
        }
        let (packets, bytes) = std::mem::take(&mut self.unpublished_pass);
        if packets > 0 {
            self.metrics.pass_through(packets, bytes);
        }
        self.metrics.merge_lateness(&mut self.lateness);
        if let Some(l) = &mut self.link {
            l.publish();
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
        ]
        .into_iter()
        .flatten()
        .min()
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
        self.acks.generate(now, pool, out, room)
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

    /// Packets of class `name` waiting in the wheel or on the link (0 for an unknown name).
    pub fn class_queued(&self, name: &str) -> u64 {
        self.classes
            .iter()
            .find(|s| s.name == name)
            .map_or(0, |s| s.queued)
    }

    /// The state index of class `name` (stable across reloads while the name stays), for
    /// [`Engine::set_class_rate`] and [`Engine::class_stamped_bytes`].
    pub fn class_index(&self, name: &str) -> Option<usize> {
        self.classes.iter().position(|s| s.name == name)
    }

    /// Bytes of class `index` accepted into the wheel so far (0 for an unknown index).
    pub fn class_stamped_bytes(&self, index: usize) -> u64 {
        self.classes.get(index).map_or(0, |s| s.stamped_bytes)
    }

    /// Sets the rate of class `index`'s aggregate policy to `rate` from the next packet on, as a
    /// silo's share of the class's `rate` (Carousel §5.3); no burst is granted
    /// (`Timestamper::set_rate`). The configuration keeps the class's whole rate, which a reload
    /// puts back. Returns false when the class has no aggregate policy.
    pub fn set_class_rate(&mut self, index: usize, rate: metronome_core::Rate) -> bool {
        match self.classes.get(index).and_then(|s| s.aggregate) {
            Some(p) => self.stamper.set_rate(p, rate).is_ok(),
            None => false,
        }
    }

    /// The cut super-frames, for the loop's transmit ([`Cuts::send`]) and discards
    /// ([`Cuts::finish`]).
    pub fn cuts_mut(&mut self) -> &mut Cuts {
        &mut self.cuts
    }

    /// Counters of super-frames cut into pieces.
    pub fn cut_counters(&self) -> crate::pieces::CutCounters {
        self.cuts.counters()
    }

    /// The engine's counters.
    pub fn counters(&self) -> EngineCounters {
        self.counters
    }

    /// Frames by verdict and malformed reason.
    pub fn parse_counters(&self) -> &ParseCounters {
        &self.parse_counters
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Flows holding a flow-table entry and evictions so far.
    pub fn flow_table_stats(&self) -> (usize, u64) {
        (self.flows.occupied(), self.flows.evictions)
    }

    /// Checks the accounting identities (CONTRIBUTING.md §10, §11); panics with the counters if broken.
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
    }
}

mod fair;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod gso_tests;
