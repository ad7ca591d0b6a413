//! What the engine counts, as plain values: per class [`ClassStats`] (and [`FairClassStats`],
//! [`LinkClassSnapshot`]), engine-wide [`EngineGauges`], the lateness [`HistogramTally`]. They
//! are cumulative (gauges excepted) and handed to a [`Telemetry`] once per batch, for the
//! classes that changed: the daemon's metrics turn them into Prometheus series, the simulator
//! and the benchmarks pass [`NoTelemetry`].

/// Lateness buckets: upper bounds 1 µs × 2^k for k = 0..=17, i.e. 1 µs to 131 ms.
pub const LATENESS_BASE_NS: u64 = 1_000;
/// Number of finite lateness buckets (see [`LATENESS_BASE_NS`]).
pub const LATENESS_BUCKETS: usize = 18;

/// Outcome labels of ACK shaping (`metronome_ack_shaping_total{outcome}`), in the order of
/// [`Telemetry::ack_shaping`]'s counts.
pub const ACK_OUTCOMES: [&str; 6] = [
    "rewritten",
    "passthrough",
    "suppressed",
    "generated",
    "table_full",
    "unsupported",
];

/// Why the daemon dropped a packet (the `reason` label of `metronome_class_drops_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The departure time lay beyond the wheel's horizon under a reject policy.
    Horizon,
    /// The `drop` backpressure mode: the flow held its packet limit.
    FlowLimit,
    /// The packet pool had no free buffer.
    PoolExhausted,
    /// The class queue was full: the frame would have taken its class past its `queue` bounds.
    QueueFull,
    /// The class held more than its share of the frame pool (`daemon.pool_share`).
    PoolShare,
    /// The transmit path refused the frame.
    TxError,
    /// The shared link's buffer was full ([`crate::engine::link`]).
    LinkBuffer,
    /// Not ECN-capable above the link's marking threshold, under `non_ect = "drop"`.
    LinkNotEct,
    /// Queued while the outside link was down and more than `daemon.link_down_grace` past its
    /// EDT (the daemon's carrier watch).
    LinkDown,
}

impl DropReason {
    /// Every reason, in label order.
    pub const ALL: [DropReason; 9] = [
        DropReason::Horizon,
        DropReason::FlowLimit,
        DropReason::PoolExhausted,
        DropReason::QueueFull,
        DropReason::PoolShare,
        DropReason::TxError,
        DropReason::LinkBuffer,
        DropReason::LinkNotEct,
        DropReason::LinkDown,
    ];

    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            DropReason::Horizon => "horizon",
            DropReason::FlowLimit => "flow_limit",
            DropReason::PoolExhausted => "pool_exhausted",
            DropReason::QueueFull => "queue_full",
            DropReason::PoolShare => "pool_share",
            DropReason::TxError => "tx_error",
            DropReason::LinkBuffer => "link_buffer",
            DropReason::LinkNotEct => "link_not_ect",
            DropReason::LinkDown => "link_down",
        }
    }
}

/// One class's series on the shared link, as [`Telemetry::link_class`] gets them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkClassSnapshot {
    /// Cumulative wire bytes sent on the link.
    pub bytes: u64,
    /// Cumulative packets sent on the link.
    pub packets: u64,
    /// Cumulative CE marks.
    pub marks: u64,
    /// Cumulative not-ECT packets passed above the threshold.
    pub not_ect: u64,
    /// Cumulative delay, ns.
    pub delay_sum_ns: u64,
    /// Longest delay, ns.
    pub delay_max_ns: u64,
    /// Bytes queued now.
    pub queue_bytes: u64,
    /// Packets queued now.
    pub queue_packets: u64,
    /// Current threshold, bytes; `u64::MAX` without marking.
    pub threshold_bytes: u64,
}

/// A histogram with power-of-two buckets `base × 2^k` (k < `n`) and `+Inf` in plain integers, which
/// one thread fills per packet and a [`Telemetry`] merges once per batch (the per-packet path then
/// does no atomic read-modify-write).
#[derive(Clone, Debug)]
pub struct HistogramTally {
    base: u64,
    /// Non-cumulative counts; the last one is `+Inf`.
    pub buckets: Vec<u64>,
    /// Sum of the values.
    pub sum: u64,
    /// Values recorded.
    pub count: u64,
}

impl HistogramTally {
    /// An empty tally with `n` finite buckets of upper bounds `base × 2^k`.
    pub fn new(base: u64, n: usize) -> Self {
        HistogramTally {
            base: base.max(1),
            buckets: vec![0; n + 1],
            sum: 0,
            count: 0,
        }
    }

    /// The bucket of `v`: the smallest k with `v <= base × 2^k`, or the `+Inf` bucket.
    pub fn bucket_index(&self, v: u64) -> usize {
        let q = v.saturating_sub(1) / self.base;
        ((u64::BITS - q.leading_zeros()) as usize).min(self.buckets.len() - 1)
    }

    /// Records one value.
    pub fn observe(&mut self, v: u64) {
        let k = self.bucket_index(v);
        self.buckets[k] += 1;
        self.sum = self.sum.wrapping_add(v);
        self.count += 1;
    }

    /// Empties the tally.
    pub fn clear(&mut self) {
        self.buckets.iter_mut().for_each(|b| *b = 0);
        self.sum = 0;
        self.count = 0;
    }
}

/// One class's counts (cumulative since the class took its state) and its queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassStats {
    /// Packets transmitted.
    pub sent_packets: u64,
    /// Wire bytes transmitted.
    pub sent_bytes: u64,
    /// Packets dropped, by [`DropReason`] (indexed `reason as usize`).
    pub drops: [u64; DropReason::ALL.len()],
    /// Packets marked CE.
    pub ecn_marked: u64,
    /// Packets above the ECN threshold that were not ECN-capable.
    pub ecn_not_ect: u64,
    /// Packets that found their flow's bucket of the flow table full.
    pub flow_table_overflow: u64,
    /// Packets waiting now (wheel, link and fair queue): a gauge.
    pub queued: u64,
    /// A class in a tree: the share of its parent in force, bits per second (0 outside a
    /// tree; `crate::engine`'s tree): a gauge.
    pub share_bps: u64,
}

/// A fair class's flow-queue counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FairClassStats {
    /// Flows with packets in the class's fair queue now: a gauge.
    pub flows: u64,
    /// Packets queued in the class's overflow flow, cumulative.
    pub overflow: u64,
    /// Packets of sparse flows sent ahead of the class's next pull, cumulative.
    pub sparse_early: u64,
}

/// Engine-wide values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineGauges {
    /// Packets in the timing wheel now.
    pub wheel_occupancy: u64,
    /// Frames passed unshaped in the reverse direction, cumulative.
    pub pass_packets: u64,
    /// Their bytes, cumulative.
    pub pass_bytes: u64,
    /// Unclassified frames by kind (malformed, non-IP) and action (pass, default, drop),
    /// cumulative (`crate::unclassified`).
    pub unclassified: [[u64; 3]; 2],
}

/// Where an engine publishes what it counted. Every method has an empty default, so a sink
/// implements what it keeps; [`NoTelemetry`] keeps nothing.
pub trait Telemetry: Send {
    /// Class state `index` now holds class `name` (a new class, or a freed state taken again):
    /// its [`ClassStats`] count from zero.
    fn class_named(&mut self, _index: usize, _name: &str) {}
    /// The class of state `index`, `name`, was deleted.
    fn class_removed(&mut self, _index: usize, _name: &str) {}
    /// Class state `index` is in a class tree under `parent`, or left it (`None`): published
    /// when it changes, with the class's share in [`ClassStats::share_bps`].
    fn class_parent(&mut self, _index: usize, _parent: Option<&str>) {}
    /// Class state `index`'s counts, after a batch that changed them.
    fn class(&mut self, _index: usize, _stats: &ClassStats) {}
    /// Fair class state `index`'s flow-queue counts.
    fn fair_class(&mut self, _index: usize, _stats: &FairClassStats) {}
    /// Class state `index`'s series on the shared link.
    fn link_class(&mut self, _index: usize, _snapshot: &LinkClassSnapshot) {}
    /// The shared link's rate, its cumulative bytes and its round time (ns, 0 for none).
    fn link_port(&mut self, _rate_bps: u64, _bytes: u64, _round_time_ns: u64) {}
    /// ACK shaping's cumulative counts of class `name`, in [`ACK_OUTCOMES`] order.
    fn ack_shaping(&mut self, _name: &str, _counts: &[u64; ACK_OUTCOMES.len()]) {}
    /// Engine-wide values, once per batch.
    fn engine(&mut self, _gauges: &EngineGauges) {}
    /// The lateness of the packets released since the last call ([`LATENESS_BASE_NS`] layout):
    /// the sink takes what it keeps and empties `tally`.
    fn lateness(&mut self, tally: &mut HistogramTally) {
        tally.clear();
    }
    /// One malformed frame, by the parser's reason (rare: not batched).
    fn malformed(&mut self, _reason: &'static str) {}
}

/// A [`Telemetry`] that keeps nothing: the simulator's, the benchmarks'.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoTelemetry;

impl Telemetry for NoTelemetry {}
