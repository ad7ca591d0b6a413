//! The daemon's Prometheus text endpoint: per class bytes, packets,
//! drops by reason, ECN marks and not-ECT fallbacks, queued packets; wheel occupancy; a lateness
//! histogram of actual against scheduled departure; TX batch sizes; RX ring drops; malformed
//! frames by reason; pass-through traffic. Served by [`http`], a small HTTP/1.1 server on
//! `std::net` that bounds what a client can make it hold (head size, no request body, read and
//! write timeouts, a deadline per connection, a cap on connections) and counts what it refuses
//! (`metronome_metrics_http_refused_total{reason}`); its accepting thread and its connection
//! threads are none of the shaping threads. On loopback unless configured otherwise
//! ([`crate::config::DEFAULT_METRICS_LISTEN`]; `metronome run` warns about any other address).
//!
//! The registry and the text encoding are `prometheus-client`'s (OpenMetrics text, which
//! Prometheus scrapes natively). The hot path never touches the registry: the daemon asks once,
//! at start-up and after each reload, for one [`ClassMetrics`] per class (a bundle of shared
//! atomics), and per packet or batch it does relaxed atomic adds only. Histograms are this
//! module's [`Pow2Histogram`] (atomic power-of-two buckets, O(1) index from a leading-zeros
//! count) rather than `prometheus-client`'s `Histogram`, which takes a lock per observation.
//! Malformed frames are counted through a label lookup (a read lock and a hash) because they
//! are rare and their reasons belong to the parser crate.
//!
//! **Silos** (`[daemon] cores > 1`, Carousel §5.3): every silo counts into series of its own,
//! so that no cache line is shared between cores on the data path. Every series then carries a
//! `silo` label (`metronome_class_bytes_total{class="bulk",silo="1"}`,
//! `metronome_wheel_occupancy_packets{silo="0"}`); the names stay those of one silo, and a sum by
//! `class` (or over `silo`) gives the daemon's total. With one silo there is no `silo` label and
//! the series are those of a daemon without silos. [`Metrics::with_silos`] builds the registry,
//! [`Metrics::for_silo`] the handle a silo counts through. `metronome_nba_rate_bps{class,silo}`
//! is the share of a class's aggregate rate the NIC-level bandwidth allocator gave each silo.
//!
//! `metronome stats` reads the endpoint back with [`fetch_and_format`] (see [`stats`]).

pub mod http;
pub mod link;
pub mod stats;

pub use http::HttpLimits;
pub use stats::{fetch_and_format, format_stats, scrape, scrape_bounded, MetricsError};

use prometheus_client::encoding::{
    EncodeLabel, EncodeLabelSet, EncodeMetric, LabelSetEncoder, MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Prefix of every metric name.
pub const PREFIX: &str = "metronome";
/// Lateness buckets: upper bounds 1 µs × 2^k for k = 0..=17, i.e. 1 µs to 131 ms (covers
/// 100 ms, the longest lateness worth telling apart; a departure later than that is in `+Inf`).
pub const LATENESS_BASE_NS: u64 = 1_000;
/// Number of finite lateness buckets (see [`LATENESS_BASE_NS`]).
pub const LATENESS_BUCKETS: usize = 18;
/// TX batch buckets: 1, 2, 4, ... 1024 packets (the config's largest batch is below 1024).
pub const BATCH_BUCKETS: usize = 11;

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
    /// EDT ([`crate::link`]).
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

/// `{class="...",outcome="..."}` of the ACK-shaping counters (one series per class and outcome,
/// summed over silos).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassOutcomeLabel {
    class: String,
    outcome: &'static str,
}

/// `{class="..."}`, plus `silo="i"` when the daemon runs several silos.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct ClassLabel {
    class: String,
    silo: Option<u16>,
}

impl EncodeLabelSet for ClassLabel {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        ("class", self.class.as_str()).encode(encoder.encode_label())?;
        SiloLabel { silo: self.silo }.encode(encoder)
    }
}

/// `{class="...",reason="..."}`, plus `silo="i"` when the daemon runs several silos.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct ClassReasonLabel {
    class: String,
    reason: &'static str,
    silo: Option<u16>,
}

impl EncodeLabelSet for ClassReasonLabel {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        ("class", self.class.as_str()).encode(encoder.encode_label())?;
        ("reason", self.reason).encode(encoder.encode_label())?;
        SiloLabel { silo: self.silo }.encode(encoder)
    }
}

/// `{silo="i"}`, or nothing with one silo.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
struct SiloLabel {
    silo: Option<u16>,
}

impl EncodeLabelSet for SiloLabel {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        match self.silo {
            Some(s) => ("silo", s).encode(encoder.encode_label()),
            None => Ok(()),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InterfaceLabel {
    interface: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindActionLabel {
    kind: String,
    action: String,
}

/// A histogram with power-of-two buckets `base × 2^k` (k < `n`) and `+Inf`, updated with relaxed
/// atomics. Encoded as a Prometheus histogram.
#[derive(Debug)]
pub struct Pow2Histogram {
    base: u64,
    // Non-cumulative counts; the last one is `+Inf`.
    buckets: Box<[AtomicU64]>,
    sum: AtomicU64,
    count: AtomicU64,
}

impl Pow2Histogram {
    /// A histogram with `n` finite buckets of upper bounds `base × 2^k`.
    pub fn new(base: u64, n: usize) -> Self {
        Pow2Histogram {
            base: base.max(1),
            buckets: (0..=n).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    /// The bucket of `v`: the smallest k with `v <= base × 2^k`, or the `+Inf` bucket.
    pub fn bucket_index(&self, v: u64) -> usize {
        // v <= base·2^k  <=>  (v-1)/base < 2^k (integer division), so k = bit length of q.
        let q = v.saturating_sub(1) / self.base;
        let k = (u64::BITS - q.leading_zeros()) as usize;
        k.min(self.buckets.len() - 1)
    }

    /// Records one value.
    pub fn observe(&self, v: u64) {
        self.buckets[self.bucket_index(v)].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(v, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Values recorded so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Values recorded in the buckets above the one of `v`: all of them greater than `v`.
    pub fn count_above(&self, v: u64) -> u64 {
        let k = self.bucket_index(v);
        self.buckets[k + 1..]
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .sum()
    }

    /// An empty per-thread tally with this histogram's buckets.
    pub fn tally(&self) -> HistogramTally {
        HistogramTally {
            base: self.base,
            buckets: vec![0; self.buckets.len()],
            sum: 0,
            count: 0,
        }
    }

    /// Adds `tally` (of this histogram's layout) with one atomic add per non-empty bucket, and
    /// empties it.
    pub fn merge(&self, tally: &mut HistogramTally) {
        if tally.count == 0 {
            return;
        }
        for (b, t) in self.buckets.iter().zip(tally.buckets.iter_mut()) {
            if *t > 0 {
                b.fetch_add(std::mem::take(t), Ordering::Relaxed);
            }
        }
        self.sum
            .fetch_add(std::mem::take(&mut tally.sum), Ordering::Relaxed);
        self.count
            .fetch_add(std::mem::take(&mut tally.count), Ordering::Relaxed);
    }
}

/// Values of a [`Pow2Histogram`] counted by one thread in plain integers, merged into the shared
/// histogram once per batch ([`Pow2Histogram::merge`]): the per-packet path then does no atomic
/// read-modify-write (each costs about as much as the rest of a wheel insert).
#[derive(Clone, Debug)]
pub struct HistogramTally {
    base: u64,
    buckets: Vec<u64>,
    sum: u64,
    count: u64,
}

impl HistogramTally {
    /// Records one value (bucket as [`Pow2Histogram::bucket_index`]).
    pub fn observe(&mut self, v: u64) {
        let q = v.saturating_sub(1) / self.base;
        let k = ((u64::BITS - q.leading_zeros()) as usize).min(self.buckets.len() - 1);
        self.buckets[k] += 1;
        self.sum = self.sum.wrapping_add(v);
        self.count += 1;
    }
}

impl EncodeMetric for Pow2Histogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let n = self.buckets.len() - 1;
        let buckets: Vec<(f64, u64)> = self
            .buckets
            .iter()
            .enumerate()
            .map(|(k, c)| {
                let le = if k == n {
                    f64::INFINITY
                } else {
                    (self.base << k) as f64
                };
                (le, c.load(Ordering::Relaxed))
            })
            .collect();
        // Count from the buckets so that one scrape is self-consistent.
        let count = buckets.iter().map(|b| b.1).sum();
        let sum = self.sum.load(Ordering::Relaxed) as f64;
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// The counters of one class, shared with the registry. Clone it into the packet loop; every
/// method is one or a few relaxed atomic operations.
#[derive(Clone, Debug)]
pub struct ClassMetrics {
    bytes: Counter,
    packets: Counter,
    drops: [Counter; DropReason::ALL.len()],
    ecn_marked: Counter,
    ecn_not_ect: Counter,
    queued: Gauge,
    flow_table_overflow: Counter,
}

/// A silo's share of one class's aggregate rate (`metronome_nba_rate_bps{class,silo}`).
#[derive(Clone, Debug)]
pub struct NbaRateGauge(Gauge);

impl NbaRateGauge {
    /// Sets the share the allocator gave this silo, bit/s.
    pub fn set(&self, bps: u64) {
        self.0.set(i64::try_from(bps).unwrap_or(i64::MAX));
    }
}

impl ClassMetrics {
    /// Counts `packets` packets of `bytes` bytes transmitted.
    pub fn sent(&self, packets: u64, bytes: u64) {
        self.packets.inc_by(packets);
        self.bytes.inc_by(bytes);
    }

    /// Counts one packet dropped for `reason`.
    pub fn dropped(&self, reason: DropReason) {
        self.drops[reason as usize].inc();
    }

    /// Counts one packet marked CE.
    pub fn ecn_marked(&self) {
        self.ecn_marked.inc();
    }

    /// Counts one packet that should have been marked but was not ECN-capable (not-ECT), so the
    /// `ecn` mode fell back to its drop rule.
    pub fn ecn_not_ect(&self) {
        self.ecn_not_ect.inc();
    }

    /// Counts one packet that found its flow's bucket of the flow table full and was shaped
    /// under the class's overflow entry ([`crate::flow_table`]).
    pub fn flow_table_overflow(&self) {
        self.flow_table_overflow.inc();
    }

    /// Sets the number of packets of this class waiting in the wheel.
    pub fn set_queued(&self, packets: u64) {
        self.queued.set(i64::try_from(packets).unwrap_or(i64::MAX));
    }
}

/// The series of one fair class (`fair = true`): its flows with packets waiting, and packets that
/// found no flow-table entry and waited in its overflow flow.
#[derive(Clone, Debug)]
pub struct FairClassMetrics {
    flows: Gauge,
    overflow: Counter,
    sparse_early: Counter,
}

impl FairClassMetrics {
    /// Sets the number of the class's flows with packets in its fair queue.
    pub fn set_flows(&self, flows: u64) {
        self.flows.set(i64::try_from(flows).unwrap_or(i64::MAX));
    }

    /// Counts one packet queued in the class's overflow flow.
    pub fn overflowed(&self) {
        self.overflow.inc();
    }

    /// Counts one packet of a sparse flow sent at once, ahead of the class's next pull.
    pub fn sparse_early(&self) {
        self.sparse_early.inc();
    }
}

/// The series one silo updates outside its classes.
#[derive(Clone, Debug)]
struct SiloSeries {
    wheel_occupancy: Gauge,
    lateness: ArcMetric,
    tx_batch: ArcMetric,
    rx_ring_drops: Counter,
    loop_sleep_ns: Counter,
    pass_through_packets: Counter,
    pass_through_bytes: Counter,
}

impl SiloSeries {
    fn new() -> Self {
        SiloSeries {
            wheel_occupancy: Gauge::default(),
            lateness: ArcMetric::lateness(),
            tx_batch: ArcMetric::tx_batch(),
            rx_ring_drops: Counter::default(),
            loop_sleep_ns: Counter::default(),
            pass_through_packets: Counter::default(),
            pass_through_bytes: Counter::default(),
        }
    }
}

struct Inner {
    registry: Registry,
    bytes: Family<ClassLabel, Counter>,
    packets: Family<ClassLabel, Counter>,
    drops: Family<ClassReasonLabel, Counter>,
    ecn_marked: Family<ClassLabel, Counter>,
    ecn_not_ect: Family<ClassLabel, Counter>,
    queued: Family<ClassLabel, Gauge>,
    flow_table_overflow: Family<ClassLabel, Counter>,
    fair_flows: Family<ClassLabel, Gauge>,
    fair_overflow: Family<ClassLabel, Counter>,
    fair_sparse_early: Family<ClassLabel, Counter>,
    nba_rate: Family<ClassLabel, Gauge>,
    malformed: Family<ReasonLabel, Counter>,
    refused: Family<ReasonLabel, Counter>,
    unclassified: Family<KindActionLabel, Counter>,
    link_down: Family<InterfaceLabel, Counter>,
    link_reopened: Family<InterfaceLabel, Counter>,
    link_down_dropped: Family<InterfaceLabel, Counter>,
    ack_shaping: Family<ClassOutcomeLabel, Counter>,
    link: link::LinkFamilies,
    http_refused: http::RefusalCounters,
    /// One entry per silo.
    silos: Vec<SiloSeries>,
}

/// The daemon's metrics: a cheap, clonable handle to the registry and to the series of one
/// silo (silo 0 unless made by [`Metrics::for_silo`]).
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
    silo: usize,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// An empty registry with every metric family registered, for one silo (no `silo` label).
    pub fn new() -> Self {
        Self::with_silos(1)
    }

    /// An empty registry for `silos` silos (at least 1): with more than one, every series has a
    /// `silo` label (see the module docs).
    pub fn with_silos(silos: usize) -> Self {
        let n = silos.max(1);
        let mut registry = Registry::with_prefix(PREFIX);
        let mut inner = Inner {
            bytes: Family::default(),
            packets: Family::default(),
            drops: Family::default(),
            ecn_marked: Family::default(),
            ecn_not_ect: Family::default(),
            queued: Family::default(),
            flow_table_overflow: Family::default(),
            fair_flows: Family::default(),
            fair_overflow: Family::default(),
            fair_sparse_early: Family::default(),
            nba_rate: Family::default(),
            malformed: Family::default(),
            refused: Family::default(),
            unclassified: Family::default(),
            link_down: Family::default(),
            link_reopened: Family::default(),
            link_down_dropped: Family::default(),
            ack_shaping: Family::default(),
            link: link::LinkFamilies::default(),
            http_refused: http::RefusalCounters::default(),
            silos: Vec::with_capacity(n),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register(
            "class_bytes",
            "Bytes transmitted per class",
            inner.bytes.clone(),
        );
        r.register(
            "class_packets",
            "Packets transmitted per class",
            inner.packets.clone(),
        );
        r.register(
            "class_drops",
            "Packets dropped per class and reason",
            inner.drops.clone(),
        );
        r.register(
            "class_ecn_marks",
            "Packets marked CE per class",
            inner.ecn_marked.clone(),
        );
        let not_ect = "Packets due for a CE mark that were not ECN-capable, per class";
        r.register("class_ecn_not_ect", not_ect, inner.ecn_not_ect.clone());
        r.register(
            "class_queued_packets",
            "Packets queued per class",
            inner.queued.clone(),
        );
        let overflow = "Packets whose flow found its flow-table bucket full of active flows, \
                        paced and limited together under the class's overflow entry";
        r.register(
            "class_flow_table_overflow",
            overflow,
            inner.flow_table_overflow.clone(),
        );
        r.register(
            "class_fair_flows",
            "Flows with packets waiting in a fair class's flow queues",
            inner.fair_flows.clone(),
        );
        let overflow = "Packets of a fair class that found no flow-table entry and waited in \
                        the class's overflow flow";
        r.register("class_fair_overflow", overflow, inner.fair_overflow.clone());
        let sparse = "Packets of a sparse flow of a fair class sent at once, ahead of the \
                      class's next pull, their bytes charged to its rate";
        r.register(
            "class_fair_sparse_early",
            sparse,
            inner.fair_sparse_early.clone(),
        );
        let nba = "Share of the class's aggregate rate given to each silo by the NIC-level \
                   bandwidth allocator, bit/s";
        r.register("nba_rate_bps", nba, inner.nba_rate.clone());
        r.register(
            "malformed_frames",
            "Malformed frames by reason",
            inner.malformed.clone(),
        );
        r.register(
            "rx_refused_frames",
            "Frames the daemon could not take, by reason (oversize, no_large_slot, \
             gso_truncated, vnet_error, piece_failed)",
            inner.refused.clone(),
        );
        let unclassified = "Malformed and non-IP frames by the action `[daemon] malformed` or \
                            `non_ip` took: charged to the default class, passed or dropped";
        r.register(
            "unclassified_frames",
            unclassified,
            inner.unclassified.clone(),
        );
        let link_down = "Transitions of an interface's link to down (ENETDOWN, ENXIO, gone)";
        r.register("link_down", link_down, inner.link_down.clone());
        let reopened =
            "Times an interface came back with a new index and its sockets were reopened";
        r.register("link_reopened", reopened, inner.link_reopened.clone());
        let expired = "Frames that waited for an interface's down link longer than \
                       daemon.link_down_grace past their departure time, dropped";
        r.register(
            "link_down_dropped",
            expired,
            inner.link_down_dropped.clone(),
        );
        let acks = "TCP ACKs of ACK-shaped classes (reverse direction) per class and outcome";
        r.register("ack_shaping", acks, inner.ack_shaping.clone());
        inner.link.register(r);
        inner.http_refused.register(r);
        inner.silos = if n == 1 {
            let one = SiloSeries::new();
            register_silo_series(r, &one);
            vec![one]
        } else {
            register_silo_families(r, n)
        };
        Metrics {
            inner: Arc::new(Inner { registry, ..inner }),
            silo: 0,
        }
    }

    /// The handle silo `silo` counts through (same registry; its own series). Panics if
    /// `silo` is not below the registry's silo count (a start-up bug).
    pub fn for_silo(&self, silo: usize) -> Metrics {
        assert!(
            silo < self.inner.silos.len(),
            "silo {silo} of {}",
            self.inner.silos.len()
        );
        Metrics {
            inner: self.inner.clone(),
            silo,
        }
    }

    /// Silos the registry has series for.
    pub fn silos(&self) -> usize {
        self.inner.silos.len()
    }

    /// The `silo` label value of this handle's series (`None` with one silo).
    fn silo_label(&self) -> Option<u16> {
        (self.inner.silos.len() > 1).then_some(self.silo as u16)
    }

    fn series(&self) -> &SiloSeries {
        &self.inner.silos[self.silo]
    }

    /// The counters of class `name` (created at zero, or the existing ones after a reload, so
    /// series continue). Call at start-up and after reloads, not per packet.
    pub fn class(&self, name: &str) -> ClassMetrics {
        let i = &self.inner;
        let silo = self.silo_label();
        let l = ClassLabel {
            class: name.to_owned(),
            silo,
        };
        let drop_of = |reason: DropReason| {
            let label = ClassReasonLabel {
                class: name.to_owned(),
                reason: reason.label(),
                silo,
            };
            i.drops.get_or_create(&label).clone()
        };
        ClassMetrics {
            bytes: i.bytes.get_or_create(&l).clone(),
            packets: i.packets.get_or_create(&l).clone(),
            drops: DropReason::ALL.map(drop_of),
            ecn_marked: i.ecn_marked.get_or_create(&l).clone(),
            ecn_not_ect: i.ecn_not_ect.get_or_create(&l).clone(),
            queued: i.queued.get_or_create(&l).clone(),
            flow_table_overflow: i.flow_table_overflow.get_or_create(&l).clone(),
        }
    }

    /// The shared link's series of class `name` ([`link`]); call at start-up and after
    /// reloads, not per packet.
    pub fn link_class(&self, name: &str) -> link::LinkClassMetrics {
        self.inner.link.class(name)
    }

    /// The shared link's own series ([`link`]).
    pub fn link_port(&self) -> link::LinkPortMetrics {
        self.inner.link.port()
    }

    /// The fair-queueing series of class `name` (created at zero, or the existing ones after a
    /// reload); only fair classes ask for them. Not per packet.
    pub fn fair_class(&self, name: &str) -> FairClassMetrics {
        let l = ClassLabel {
            class: name.to_owned(),
            silo: self.silo_label(),
        };
        FairClassMetrics {
            flows: self.inner.fair_flows.get_or_create(&l).clone(),
            overflow: self.inner.fair_overflow.get_or_create(&l).clone(),
            sparse_early: self.inner.fair_sparse_early.get_or_create(&l).clone(),
        }
    }

    /// The ACK-shaping counter of class `name` for `outcome` (see `ack_shaping`), shared
    /// by the silos; call at start-up and after reloads, not per packet.
    pub fn ack_shaping_counter(&self, name: &str, outcome: &'static str) -> Counter {
        let label = ClassOutcomeLabel {
            class: name.to_owned(),
            outcome,
        };
        self.inner.ack_shaping.get_or_create(&label).clone()
    }

    /// The gauge of this silo's share of class `name`'s aggregate rate; the series appears
    /// when first asked for (only classes with a cross-silo limit have one).
    pub fn nba_rate(&self, name: &str) -> NbaRateGauge {
        let l = ClassLabel {
            class: name.to_owned(),
            silo: self.silo_label(),
        };
        NbaRateGauge(self.inner.nba_rate.get_or_create(&l).clone())
    }

    /// Sets the number of packets in the timing wheel.
    pub fn set_wheel_occupancy(&self, packets: u64) {
        let v = i64::try_from(packets).unwrap_or(i64::MAX);
        self.series().wheel_occupancy.set(v);
    }

    /// Records one departure `ns` nanoseconds after its scheduled time (0 if on time or early).
    pub fn observe_lateness_ns(&self, ns: u64) {
        self.series().lateness.0.observe(ns);
    }

    /// An empty tally for this silo's lateness histogram, to merge with
    /// [`Metrics::merge_lateness`].
    pub fn lateness_tally(&self) -> HistogramTally {
        self.series().lateness.0.tally()
    }

    /// Adds (and empties) a tally made by [`Metrics::lateness_tally`].
    pub fn merge_lateness(&self, tally: &mut HistogramTally) {
        self.series().lateness.0.merge(tally);
    }

    /// Records one transmit batch of `packets` packets.
    pub fn observe_tx_batch(&self, packets: u64) {
        self.series().tx_batch.0.observe(packets);
    }

    /// Adds `frames` to the RX ring drop counter (from `tp_drops` of TPACKET_V3 block headers or
    /// `PACKET_STATISTICS`).
    pub fn rx_ring_drops(&self, frames: u64) {
        self.series().rx_ring_drops.inc_by(frames);
    }

    /// Adds `ns` nanoseconds the loop slept waiting for frames or a due time
    /// (`metronome_loop_sleep_nanoseconds_total`): one minus its rate in seconds per second is
    /// the share of a core the loop is busy, 1 when the loop is the bottleneck.
    pub fn loop_slept_ns(&self, ns: u64) {
        self.series().loop_sleep_ns.inc_by(ns);
    }

    /// The counter of frames of `kind` (`malformed`, `non_ip`) that met `action` (`default`,
    /// `pass`, `drop`): the engine takes it once at start-up and increments it per frame.
    pub fn unclassified_counter(&self, kind: &str, action: &str) -> Counter {
        let label = KindActionLabel {
            kind: kind.to_owned(),
            action: action.to_owned(),
        };
        self.inner.unclassified.get_or_create(&label).clone()
    }

    /// The counter of link-down transitions of `interface` (`metronome_link_down_total`).
    pub fn link_down_counter(&self, interface: &str) -> Counter {
        let label = InterfaceLabel {
            interface: interface.to_owned(),
        };
        self.inner.link_down.get_or_create(&label).clone()
    }

    /// The counter of socket reopenings on `interface` after it came back with a new index
    /// (`metronome_link_reopened_total`).
    pub fn link_reopened_counter(&self, interface: &str) -> Counter {
        let label = InterfaceLabel {
            interface: interface.to_owned(),
        };
        self.inner.link_reopened.get_or_create(&label).clone()
    }

    /// The counter of frames dropped because they waited for `interface`'s down link longer
    /// than `daemon.link_down_grace` (`metronome_link_down_dropped_total`).
    pub fn link_down_dropped_counter(&self, interface: &str) -> Counter {
        let label = InterfaceLabel {
            interface: interface.to_owned(),
        };
        self.inner.link_down_dropped.get_or_create(&label).clone()
    }

    /// Counts one malformed frame for `reason` (cold path: a label lookup).
    pub fn malformed(&self, reason: &str) {
        let label = ReasonLabel {
            reason: reason.to_owned(),
        };
        self.inner.malformed.get_or_create(&label).inc();
    }

    /// Adds `frames` refused frames under `reason` (cold path: a label lookup; see
    /// [`crate::refused`]).
    pub fn rx_refused(&self, reason: &str, frames: u64) {
        let label = ReasonLabel {
            reason: reason.to_owned(),
        };
        self.inner.refused.get_or_create(&label).inc_by(frames);
    }

    /// Counts `packets` packets of `bytes` bytes forwarded without shaping.
    pub fn pass_through(&self, packets: u64, bytes: u64) {
        let series = self.series();
        series.pass_through_packets.inc_by(packets);
        series.pass_through_bytes.inc_by(bytes);
    }

    /// This silo's lateness histogram (for tests and end-of-run summaries).
    pub fn lateness(&self) -> &Pow2Histogram {
        &self.series().lateness.0
    }

    /// The whole registry in the OpenMetrics text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Encoding into a String cannot fail: fmt::Write for String is infallible.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.inner.registry);
        out
    }

    /// Serves `GET /metrics` on `addr` from a background thread until the returned server is
    /// dropped, under the default [`HttpLimits`]. Port 0 picks a free port
    /// ([`MetricsServer::addr`] tells which).
    pub fn serve(&self, addr: SocketAddr) -> Result<MetricsServer, MetricsError> {
        self.serve_with(addr, HttpLimits::default())
    }

    /// [`Metrics::serve`] under `limits` ([`http`]).
    pub fn serve_with(
        &self,
        addr: SocketAddr,
        limits: HttpLimits,
    ) -> Result<MetricsServer, MetricsError> {
        let bind = |e: std::io::Error| MetricsError::Bind {
            addr,
            source: Box::new(e),
        };
        let listener = TcpListener::bind(addr).map_err(bind)?;
        let local = listener.local_addr().map_err(bind)?;
        let stop = Arc::new(AtomicBool::new(false));
        let (metrics, flag) = (self.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("metrics-http".into())
            .spawn(move || http::accept_loop(&listener, metrics, limits, flag))
            .map_err(bind)?;
        Ok(MetricsServer {
            addr: local,
            stop,
            thread: Some(thread),
        })
    }
}

/// Lets the registry hold a histogram that [`Metrics`] also holds.
#[derive(Clone, Debug)]
struct ArcMetric(Arc<Pow2Histogram>);

impl ArcMetric {
    fn lateness() -> Self {
        ArcMetric(Arc::new(Pow2Histogram::new(
            LATENESS_BASE_NS,
            LATENESS_BUCKETS,
        )))
    }

    fn tx_batch() -> Self {
        ArcMetric(Arc::new(Pow2Histogram::new(1, BATCH_BUCKETS)))
    }
}

impl TypedMetric for ArcMetric {
    const TYPE: MetricType = MetricType::Histogram;
}

const OCCUPANCY_HELP: &str = "Packets held in the timing wheel";
const LATENESS_HELP: &str = "Actual minus scheduled departure time, nanoseconds";
const TX_BATCH_HELP: &str = "Packets per transmit batch";
const RING_DROPS_HELP: &str = "Frames the RX ring dropped (overruns)";
const LOOP_SLEEP_HELP: &str =
    "Nanoseconds the loop slept waiting for frames or a due time (busy = 1 - rate / 1e9)";
const PASS_PACKETS_HELP: &str = "Packets forwarded unshaped (non-IP, reverse direction)";
const PASS_BYTES_HELP: &str = "Bytes forwarded unshaped";

/// Registers one silo's series without labels (the one-silo daemon).
fn register_silo_series(r: &mut Registry, s: &SiloSeries) {
    let occ = s.wheel_occupancy.clone();
    r.register("wheel_occupancy_packets", OCCUPANCY_HELP, occ);
    r.register("lateness_ns", LATENESS_HELP, s.lateness.clone());
    r.register("tx_batch_packets", TX_BATCH_HELP, s.tx_batch.clone());
    r.register("rx_ring_drops", RING_DROPS_HELP, s.rx_ring_drops.clone());
    let sleep = s.loop_sleep_ns.clone();
    r.register("loop_sleep_nanoseconds", LOOP_SLEEP_HELP, sleep);
    let pt = s.pass_through_packets.clone();
    r.register("pass_through_packets", PASS_PACKETS_HELP, pt);
    let ptb = s.pass_through_bytes.clone();
    r.register("pass_through_bytes", PASS_BYTES_HELP, ptb);
}

/// Registers the same series as families with a `silo` label; returns each silo's series.
fn register_silo_families(r: &mut Registry, n: usize) -> Vec<SiloSeries> {
    let occupancy = Family::<SiloLabel, Gauge>::default();
    let lateness = Family::<SiloLabel, ArcMetric, fn() -> ArcMetric>::new_with_constructor(
        ArcMetric::lateness as fn() -> ArcMetric,
    );
    let tx_batch = Family::<SiloLabel, ArcMetric, fn() -> ArcMetric>::new_with_constructor(
        ArcMetric::tx_batch as fn() -> ArcMetric,
    );
    let ring_drops = Family::<SiloLabel, Counter>::default();
    let loop_sleep = Family::<SiloLabel, Counter>::default();
    let pass_packets = Family::<SiloLabel, Counter>::default();
    let pass_bytes = Family::<SiloLabel, Counter>::default();
    let series = (0..n)
        .map(|i| {
            let l = SiloLabel {
                silo: Some(i as u16),
            };
            SiloSeries {
                wheel_occupancy: occupancy.get_or_create(&l).clone(),
                lateness: lateness.get_or_create(&l).clone(),
                tx_batch: tx_batch.get_or_create(&l).clone(),
                rx_ring_drops: ring_drops.get_or_create(&l).clone(),
                loop_sleep_ns: loop_sleep.get_or_create(&l).clone(),
                pass_through_packets: pass_packets.get_or_create(&l).clone(),
                pass_through_bytes: pass_bytes.get_or_create(&l).clone(),
            }
        })
        .collect();
    r.register("wheel_occupancy_packets", OCCUPANCY_HELP, occupancy);
    r.register("lateness_ns", LATENESS_HELP, lateness);
    r.register("tx_batch_packets", TX_BATCH_HELP, tx_batch);
    r.register("rx_ring_drops", RING_DROPS_HELP, ring_drops);
    r.register("loop_sleep_nanoseconds", LOOP_SLEEP_HELP, loop_sleep);
    r.register("pass_through_packets", PASS_PACKETS_HELP, pass_packets);
    r.register("pass_through_bytes", PASS_BYTES_HELP, pass_bytes);
    series
}

impl EncodeMetric for ArcMetric {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        self.0.metric_type()
    }
}

/// The running endpoint. Dropping it stops the accepting thread (within [`http::ACCEPT_POLL`])
/// and joins it; connections being served end within their deadline.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// The address actually bound.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests;
