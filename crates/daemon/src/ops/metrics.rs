//! The daemon's Prometheus text endpoint: per class bytes, packets, drops by reason, ECN marks
//! and not-ECT fallbacks, queued packets; wheel occupancy; a lateness histogram of actual
//! against scheduled departure; TX batch sizes; RX ring drops; malformed frames by reason;
//! pass-through traffic. Served by [`http`] on threads that are none of the shaping threads, on
//! loopback unless configured otherwise ([`crate::ops::config::DEFAULT_METRICS_LISTEN`]).
//!
//! The hot path never touches the registry (`prometheus-client`'s): it counts through one
//! [`ClassMetrics`] per class with relaxed atomic adds, and histograms are [`Pow2Histogram`]s,
//! not the lock-taking `Histogram`. With silos (Carousel §5.3) every silo counts into series of
//! its own under a `silo` label ([`Metrics::with_silos`], [`Metrics::for_silo`]). Why each, in
//! docs/deploy.md, "The metrics endpoint". `metronome stats` reads the endpoint back with
//! [`fetch_and_format`] (see [`stats`]).

mod class;
mod class_table;
pub mod cluster;
mod engine;
mod histogram;
pub mod http;
mod labels;
pub mod link;
mod pace;
mod server;
mod silo_series;
pub mod stats;

pub use class::{ClassMetrics, DropReason, FairClassMetrics, NbaRateGauge};
pub use class_table::{ClassSeries, ACTIVE_IDLE, ACTIVE_IDLE_SECS, CLASS_CELLS_BYTES};
pub use engine::EngineMetrics;
pub use histogram::{
    HistogramTally, Pow2Histogram, BATCH_BUCKETS, LATENESS_BASE_NS, LATENESS_BUCKETS,
};
pub use http::HttpLimits;
pub use server::MetricsServer;
pub use stats::{fetch_and_format, format_stats, scrape, scrape_bounded, MetricsError};

use labels::{
    ClassLabel, ClassOutcomeLabel, ClassReasonLabel, InterfaceEventLabel, InterfaceLabel,
    KindActionLabel, ReasonLabel,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use silo_series::{register_silo_families, register_silo_series, SiloSeries};
use std::sync::Arc;

/// Prefix of every metric name.
pub const PREFIX: &str = "metronome";

struct Inner {
    registry: Registry,
    classes: Arc<class_table::ClassTable>,
    fair_flows: Family<ClassLabel, Gauge>,
    fair_overflow: Family<ClassLabel, Counter>,
    fair_sparse_early: Family<ClassLabel, Counter>,
    nba_rate: Family<ClassLabel, Gauge>,
    tree_share: Family<labels::ClassParentLabel, Gauge>,
    malformed: Family<ReasonLabel, Counter>,
    refused: Family<ReasonLabel, Counter>,
    unclassified: Family<KindActionLabel, Counter>,
    link_down: Family<InterfaceLabel, Counter>,
    link_reopened: Family<InterfaceLabel, Counter>,
    link_down_dropped: Family<InterfaceLabel, Counter>,
    attach_events: Family<InterfaceEventLabel, Counter>,
    attach_packets: Family<ReasonLabel, Counter>,
    ack_shaping: Family<ClassOutcomeLabel, Counter>,
    class_changes: Family<labels::OpResultLabel, Counter>,
    control_refused: Family<ReasonLabel, Counter>,
    early_frames: Family<ClassReasonLabel, Counter>,
    early_bytes: Family<ClassReasonLabel, Counter>,
    early_overloaded: Gauge,
    early_active: Gauge,
    link: link::LinkFamilies,
    pace: pace::PaceFamilies,
    cluster: cluster::ClusterMetrics,
    http_refused: http::RefusalCounters,
    /// One entry per silo.
    silos: Vec<SiloSeries>,
}

/// What ended one of the loop's sleeps (`metronome_loop_wakeups_total{by}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// A port had frames to read (or `ppoll` failed: a signal).
    Frame = 0,
    /// The timeout ran out: the next departure's time.
    Due = 1,
    /// The loop hook's descriptor: an operation of the control socket.
    Control = 2,
}

impl Wake {
    /// Every cause, in the order of their values (each one's index in a silo's series).
    pub const ALL: [Wake; 3] = [Wake::Frame, Wake::Due, Wake::Control];

    /// The cause's `by` label.
    pub fn name(self) -> &'static str {
        match self {
            Wake::Frame => "frame",
            Wake::Due => "due",
            Wake::Control => "control",
        }
    }
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
        Self::build(silos, cluster::ClusterMetrics::default())
    }

    /// [`Metrics::with_silos`] keeping `old`'s cluster series (the cluster agent outlives attach
    /// mode's re-attach, which makes a new registry).
    pub fn with_silos_sharing_cluster(silos: usize, old: &Metrics) -> Self {
        Self::build(silos, old.cluster())
    }

    fn build(silos: usize, cluster: cluster::ClusterMetrics) -> Self {
        let n = silos.max(1);
        let mut registry = Registry::with_prefix(PREFIX);
        let mut inner = Inner {
            classes: Arc::default(),
            fair_flows: Family::default(),
            fair_overflow: Family::default(),
            fair_sparse_early: Family::default(),
            nba_rate: Family::default(),
            tree_share: Family::default(),
            malformed: Family::default(),
            refused: Family::default(),
            unclassified: Family::default(),
            link_down: Family::default(),
            link_reopened: Family::default(),
            link_down_dropped: Family::default(),
            attach_events: Family::default(),
            attach_packets: Family::default(),
            ack_shaping: Family::default(),
            early_frames: Family::default(),
            early_bytes: Family::default(),
            early_overloaded: Gauge::default(),
            early_active: Gauge::default(),
            class_changes: Family::default(),
            control_refused: Family::default(),
            link: link::LinkFamilies::default(),
            pace: pace::PaceFamilies::default(),
            cluster,
            http_refused: http::RefusalCounters::default(),
            silos: Vec::with_capacity(n),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register_collector(Box::new(inner.classes.clone()));
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
        let share = "Share of its parent's rate in force for a class in a class tree (its \
                     ceiling while idle), bit/s";
        r.register("class_share_bps", share, inner.tree_share.clone());
        r.register(
            "malformed_frames",
            "Malformed frames by reason",
            inner.malformed.clone(),
        );
        r.register(
            "rx_refused_frames",
            "Frames the daemon could not take, by reason (oversize, no_large_slot, \
             gso_truncated, vnet_error, piece_failed, untagged)",
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
        let events = "Attach mode: attached, from and to interfaces, bridges (and cgroups) that \
                      came, went, were re-created, or could not be hooked";
        r.register("attach_events", events, inner.attach_events.clone());
        let captured = "Attach mode: packets leaving attached interfaces and to ports, by what \
                        the hook did (captured for shaping; already_shaped passed on, sent by \
                        the daemon through a bridge; not_ip, tag_failed and not_unicast passed \
                        on unshaped)";
        r.register("attach_packets", captured, inner.attach_packets.clone());
        let acks = "TCP ACKs of ACK-shaped classes (reverse direction) per class and outcome";
        r.register("ack_shaping", acks, inner.ack_shaping.clone());
        let changes = "Requests of the control socket by op (add, change, del) and result (ok, \
                       refused), classes of the API dropped by a reload whose file defines \
                       their name (op reload, result shadowed), and classes of [daemon] \
                       class_dir added at start (op restore, result ok, refused; gone: a file \
                       whose interface went)";
        r.register("class_changes", changes, inner.class_changes.clone());
        let control_refused = "Connections and requests of the control socket refused, by reason \
                               (idle: an idle connection closed to make room for a new one; \
                               busy: every slot answering; deadline: no whole request within \
                               the read deadline; peer: a peer uid other than root and the \
                               socket's owner; malformed: a request that is not UTF-8 JSON of \
                               the protocol; too_long: a line over 64 KiB), and files of \
                               [daemon] class_dir skipped (file_symlink, file_owner, \
                               file_mode, file_size, file_not_regular)";
        r.register(
            "control_refused",
            control_refused,
            inner.control_refused.clone(),
        );
        let early = "Frames the receiving sockets' filter refused in the kernel before the loop \
                     read them, by class and reason (over_rate: beyond daemon.early_multiple \
                     times the class's rate after its queue bound; malformed, non_ip: \
                     unclassifiable frames beyond the default class's, or dropped by \
                     daemon.malformed / non_ip = \"drop\", class \"none\")";
        r.register("early_refused_frames", early, inner.early_frames.clone());
        let early_bytes = "Bytes of the frames counted in metronome_early_refused_frames_total";
        r.register(
            "early_refused_bytes",
            early_bytes,
            inner.early_bytes.clone(),
        );
        let overloaded = "1 while a shaping loop is overloaded and the early filter holds every \
                          class to its rate (daemon.early_multiple of 1), else 0";
        r.register(
            "early_overloaded",
            overloaded,
            inner.early_overloaded.clone(),
        );
        let active = "1 when the receiving sockets' early filter is in force, 0 when the loop \
                      reads every frame itself (daemon.early_refuse = false, or no BPF)";
        r.register("early_filter_active", active, inner.early_active.clone());
        inner.link.register(r);
        inner.pace.register(r);
        inner.cluster.register(r);
        inner.http_refused.register(r);
        inner.silos = if n == 1 {
            let mut one = SiloSeries::new();
            register_silo_series(r, &mut one);
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

    /// The cluster agent's series (`crate::ops::cluster`).
    pub fn cluster(&self) -> cluster::ClusterMetrics {
        self.inner.cluster.clone()
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
        ClassMetrics(self.inner.classes.cells(name, self.silo_label()))
    }

    /// Sets which classes have series of their own (`[daemon] class_metrics`); every class
    /// still counts into the `metronome_all_classes_*` totals.
    pub fn select_class_series(&self, selection: ClassSeries) {
        self.inner.classes.select(selection);
    }

    /// Classes (per silo) with counters in the registry, whether or not they have series.
    pub fn class_records(&self) -> usize {
        self.inner.classes.len()
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

    /// Adds `frames` and `bytes` refused early for `reason` to class `name`'s series
    /// (`metronome_early_refused_frames_total`, `_bytes_total`).
    pub fn early_refused(&self, name: &str, reason: &'static str, frames: u64, bytes: u64) {
        let label = ClassReasonLabel {
            class: name.to_owned(),
            reason,
        };
        self.inner.early_frames.get_or_create(&label).inc_by(frames);
        self.inner.early_bytes.get_or_create(&label).inc_by(bytes);
    }

    /// Sets `metronome_early_overloaded` and `metronome_early_filter_active`.
    pub fn early_state(&self, active: bool, overloaded: bool) {
        self.inner.early_active.set(i64::from(active));
        self.inner.early_overloaded.set(i64::from(overloaded));
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

    /// Removes every per-class series of class `name` of this handle's silo (a live class
    /// deleted and drained, `crate::datapath::engine`'s `live` module); the totals stay.
    pub fn remove_class(&self, name: &str) {
        let i = &self.inner;
        let silo = self.silo_label();
        i.classes.remove(name, silo);
        let l = ClassLabel {
            class: name.to_owned(),
            silo,
        };
        i.fair_overflow.remove(&l);
        i.fair_sparse_early.remove(&l);
        i.fair_flows.remove(&l);
        i.nba_rate.remove(&l);
    }

    /// The share gauge of class `name` under `parent` in a class tree
    /// (`metronome_class_share_bps{class, parent}`). Not per packet: the tree's pass changes it
    /// at most every millisecond.
    pub fn tree_share(&self, name: &str, parent: &str) -> Gauge {
        self.inner
            .tree_share
            .get_or_create(&self.parent_label(name, parent))
            .clone()
    }

    /// Removes class `name`'s share gauge under `parent` (it left the tree, moved or went).
    pub fn remove_tree_share(&self, name: &str, parent: &str) {
        self.inner
            .tree_share
            .remove(&self.parent_label(name, parent));
    }

    fn parent_label(&self, name: &str, parent: &str) -> labels::ClassParentLabel {
        labels::ClassParentLabel {
            class: name.to_owned(),
            parent: parent.to_owned(),
            silo: self.silo_label(),
        }
    }

    /// Counts one class change of the control socket: `op` (`add`, `change`, `del`, `reload`)
    /// and its `result` (`ok`, `refused`, `shadowed`).
    pub fn class_change(&self, op: &'static str, result: &'static str) {
        self.inner
            .class_changes
            .get_or_create(&labels::OpResultLabel { op, result })
            .inc();
    }

    /// Counts one refusal of the control socket or one skipped `class_dir` file, by `reason`
    /// (`metronome_control_refused_total`).
    pub fn control_refused(&self, reason: &str) {
        self.inner
            .control_refused
            .get_or_create(&ReasonLabel {
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// Source pacing of class `name` in this silo: the ceiling its sockets are given (wire
    /// bit/s), the flows seen in the period and the frames it holds (`crate::os::pace`).
    pub fn pace_class(&self, name: &str, ceiling_bps: f64, flows: u32, held: u64) {
        let l = ClassLabel {
            class: name.to_owned(),
            silo: self.silo_label(),
        };
        self.inner.pace.class(l, ceiling_bps, flows, held);
    }

    /// Source pacing's program: the sockets slowed now and its cumulative counts by event.
    pub fn pace_program(&self, slowed: u64, events: &[(&'static str, u64)]) {
        self.inner.pace.program(slowed, events);
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

    /// Counts one of the loop's sleeps that ended, by what ended it
    /// (`metronome_loop_wakeups_total{by}`).
    pub fn loop_woke(&self, by: Wake) {
        self.series().wakeups[by as usize].inc();
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

    /// Counts one attach-mode event of `interface` (or cgroup): `came`, `gone`, `recreated`,
    /// `attach_failed` (`metronome_attach_events_total`).
    pub fn attach_event(&self, interface: &str, event: &str) {
        let label = InterfaceEventLabel {
            interface: interface.to_owned(),
            event: event.to_owned(),
        };
        self.inner.attach_events.get_or_create(&label).inc();
    }

    /// Adds `packets` to what the attach hook did with packets leaving attached interfaces:
    /// `captured`, `not_ip` (passed on), `tag_failed` (passed on), `already_shaped` (passed on),
    /// `not_unicast` (passed on) (`metronome_attach_packets_total`).
    pub fn attach_packets(&self, result: &str, packets: u64) {
        let label = ReasonLabel {
            reason: result.to_owned(),
        };
        self.inner
            .attach_packets
            .get_or_create(&label)
            .inc_by(packets);
    }

    /// Counts one malformed frame for `reason` (cold path: a label lookup).
    pub fn malformed(&self, reason: &str) {
        let label = ReasonLabel {
            reason: reason.to_owned(),
        };
        self.inner.malformed.get_or_create(&label).inc();
    }

    /// Adds `frames` refused frames under `reason` (cold path: a label lookup; see
    /// [`crate::ops::refused`]).
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

    /// The whole registry in the OpenMetrics text format, written into `out` as it is encoded
    /// (the endpoint writes it to the socket in pieces, [`http`]). The per-class series are
    /// listed under a lock that only class creation takes and encoded after it is released.
    pub fn encode_into(&self, out: &mut impl std::fmt::Write) -> std::fmt::Result {
        prometheus_client::encoding::text::encode(out, &self.inner.registry)
    }
}

#[cfg(test)]
mod tests;
