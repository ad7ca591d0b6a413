//! The shared link's series ([`crate::datapath::engine::link`]), like `tc -s class show` gives for
//! an HTB hierarchy: per class its bytes and packets on the link (its share), the bytes and packets
//! in its queue, the link's CE marks and not-ECT fallbacks, its queue's current marking threshold
//! and the delay from its EDT to its departure; for the link its rate, its bytes, and MQ-ECN's
//! measured round time (MQ-ECN §3.3.1). A link is drained by one silo (validation refuses a
//! `[link]` with `daemon.cores > 1`), so the series carry no `silo` label.
//!
//! | series | type | meaning |
//! |---|---|---|
//! | `metronome_link_class_bytes_total{class}` | counter | wire bytes the class sent on the link |
//! | `metronome_link_class_packets_total{class}` | counter | packets the class sent on the link |
//! | `metronome_link_class_marks_total{class}` | counter | CE marks the link's marking set |
//! | `metronome_link_class_not_ect_total{class}` | counter | not-ECT packets above the threshold, passed |
//! | `metronome_link_class_delay_ns_total{class}` | counter | sum of EDT-to-departure delays |
//! | `metronome_link_class_delay_max_ns{class}` | gauge | longest EDT-to-departure delay |
//! | `metronome_link_class_queue_bytes{class}` | gauge | bytes in the class's queue |
//! | `metronome_link_class_queue_packets{class}` | gauge | packets in the class's queue |
//! | `metronome_link_class_threshold_bytes{class}` | gauge | the queue's marking threshold `K_i` (-1: no marking) |
//! | `metronome_link_rate_bps` | gauge | the link's rate |
//! | `metronome_link_bytes_total` | counter | wire bytes sent on the link |
//! | `metronome_link_round_time_ns` | gauge | MQ-ECN's smoothed `T_round` (0 before a sample, or other rules) |
//!
//! Drops on the link are `metronome_class_drops_total{reason="link_buffer"|"link_not_ect"}`.

pub use metronome_engine::stats::LinkClassSnapshot;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LinkClassLabel {
    class: String,
}

/// The link's families, registered once with the registry.
#[derive(Clone, Debug, Default)]
pub(super) struct LinkFamilies {
    bytes: Family<LinkClassLabel, Counter>,
    packets: Family<LinkClassLabel, Counter>,
    marks: Family<LinkClassLabel, Counter>,
    not_ect: Family<LinkClassLabel, Counter>,
    delay_sum: Family<LinkClassLabel, Counter>,
    delay_max: Family<LinkClassLabel, Gauge>,
    queue_bytes: Family<LinkClassLabel, Gauge>,
    queue_packets: Family<LinkClassLabel, Gauge>,
    threshold: Family<LinkClassLabel, Gauge>,
    rate: Gauge,
    link_bytes: Counter,
    round_time: Gauge,
}

impl LinkFamilies {
    /// Registers the families (see the module docs for their names).
    pub(super) fn register(&self, r: &mut Registry) {
        let class = [
            (
                "link_class_bytes",
                "Wire bytes each class sent on the shared link",
                &self.bytes,
            ),
            (
                "link_class_packets",
                "Packets each class sent on the shared link",
                &self.packets,
            ),
            (
                "link_class_marks",
                "CE marks the link's marking set, per class",
                &self.marks,
            ),
            (
                "link_class_not_ect",
                "Not-ECN-capable packets above the link's threshold, passed, per class",
                &self.not_ect,
            ),
            (
                "link_class_delay_ns",
                "Sum of each class's delays from EDT to departure on the link, ns",
                &self.delay_sum,
            ),
        ];
        for (name, help, family) in class {
            r.register(name, help, family.clone());
        }
        let gauges = [
            (
                "link_class_delay_max_ns",
                "Longest delay from EDT to departure on the link per class, ns",
                &self.delay_max,
            ),
            (
                "link_class_queue_bytes",
                "Bytes in each class's link queue",
                &self.queue_bytes,
            ),
            (
                "link_class_queue_packets",
                "Packets in each class's link queue",
                &self.queue_packets,
            ),
            (
                "link_class_threshold_bytes",
                "Current ECN marking threshold of each class's link queue, bytes (-1: none)",
                &self.threshold,
            ),
        ];
        for (name, help, family) in gauges {
            r.register(name, help, family.clone());
        }
        r.register(
            "link_rate_bps",
            "The shared link's rate, bit/s",
            self.rate.clone(),
        );
        let bytes = self.link_bytes.clone();
        r.register("link_bytes", "Wire bytes sent on the shared link", bytes);
        let round = "MQ-ECN's smoothed round time of the link's queues, ns (0: none yet)";
        r.register("link_round_time_ns", round, self.round_time.clone());
    }

    /// The series of class `name`.
    pub(super) fn class(&self, name: &str) -> LinkClassMetrics {
        let l = LinkClassLabel {
            class: name.to_owned(),
        };
        LinkClassMetrics {
            bytes: self.bytes.get_or_create(&l).clone(),
            packets: self.packets.get_or_create(&l).clone(),
            marks: self.marks.get_or_create(&l).clone(),
            not_ect: self.not_ect.get_or_create(&l).clone(),
            delay_sum: self.delay_sum.get_or_create(&l).clone(),
            delay_max: self.delay_max.get_or_create(&l).clone(),
            queue_bytes: self.queue_bytes.get_or_create(&l).clone(),
            queue_packets: self.queue_packets.get_or_create(&l).clone(),
            threshold: self.threshold.get_or_create(&l).clone(),
        }
    }

    /// The link-wide series.
    pub(super) fn port(&self) -> LinkPortMetrics {
        LinkPortMetrics {
            rate: self.rate.clone(),
            bytes: self.link_bytes.clone(),
            round_time: self.round_time.clone(),
        }
    }
}

fn gauge_value(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// One class's link series. Cumulative values are published as they stand: the counters are
/// advanced to them (they never go back).
#[derive(Clone, Debug)]
pub struct LinkClassMetrics {
    bytes: Counter,
    packets: Counter,
    marks: Counter,
    not_ect: Counter,
    delay_sum: Counter,
    delay_max: Gauge,
    queue_bytes: Gauge,
    queue_packets: Gauge,
    threshold: Gauge,
}

impl LinkClassMetrics {
    /// Publishes `s`: counters advance to its cumulative values, gauges take its values.
    pub fn publish(&self, s: &LinkClassSnapshot) {
        let advance = |c: &Counter, to: u64| {
            let now = c.get();
            if to > now {
                c.inc_by(to - now);
            }
        };
        advance(&self.bytes, s.bytes);
        advance(&self.packets, s.packets);
        advance(&self.marks, s.marks);
        advance(&self.not_ect, s.not_ect);
        advance(&self.delay_sum, s.delay_sum_ns);
        self.delay_max.set(gauge_value(s.delay_max_ns));
        self.queue_bytes.set(gauge_value(s.queue_bytes));
        self.queue_packets.set(gauge_value(s.queue_packets));
        self.threshold.set(match s.threshold_bytes {
            u64::MAX => -1,
            k => gauge_value(k),
        });
    }
}

/// The link-wide series.
#[derive(Clone, Debug)]
pub struct LinkPortMetrics {
    rate: Gauge,
    bytes: Counter,
    round_time: Gauge,
}

impl LinkPortMetrics {
    /// Publishes the link's rate, its cumulative bytes and its round time (ns, 0 for none).
    pub fn publish(&self, rate_bps: u64, bytes: u64, round_time_ns: u64) {
        self.rate.set(gauge_value(rate_bps));
        let now = self.bytes.get();
        if bytes > now {
            self.bytes.inc_by(bytes - now);
        }
        self.round_time.set(gauge_value(round_time_ns));
    }
}
