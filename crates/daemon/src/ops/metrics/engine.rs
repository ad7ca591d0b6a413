//! The engine's [`Telemetry`]: what an engine publishes once per batch ([`ClassStats`] and the
//! other snapshots of `metronome_engine::stats`), advanced into this silo's series. The
//! counters advance by what changed since the last publish; gauges take the value.

use super::class::{ClassMetrics, DropReason, FairClassMetrics};
use super::link::{LinkClassMetrics, LinkPortMetrics};
use super::Metrics;
use metronome_engine::stats::{
    ClassStats, EngineGauges, FairClassStats, HistogramTally, LinkClassSnapshot, Telemetry,
    ACK_OUTCOMES,
};
use metronome_engine::unclassified::{Unclassified, UnclassifiedKind};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use std::collections::HashMap;

/// One class state's series and what was published into them.
#[derive(Debug)]
struct Published<M, S> {
    metrics: M,
    last: S,
}

/// A named class state's series.
type ClassSeries = (Box<str>, Published<ClassMetrics, ClassStats>);

/// An ACK-shaping class's counters, by outcome, and what was published into them.
type AckSeries = Published<[Counter; ACK_OUTCOMES.len()], [u64; ACK_OUTCOMES.len()]>;

/// The series one engine (one loop or silo) publishes into. See the module docs.
#[derive(Debug)]
pub struct EngineMetrics {
    metrics: Metrics,
    /// By class state index: its name and series, from [`Telemetry::class_named`].
    classes: Vec<Option<ClassSeries>>,
    fair: Vec<Option<Published<FairClassMetrics, FairClassStats>>>,
    link: Vec<Option<LinkClassMetrics>>,
    /// By class state index: its parent, once it is in a tree, and its share gauge.
    shares: Vec<Option<(Box<str>, Gauge)>>,
    port: Option<LinkPortMetrics>,
    acks: HashMap<String, AckSeries>,
    unclassified: [[Counter; 3]; 2],
    last: EngineGauges,
}

impl EngineMetrics {
    /// The sink of an engine counting into `metrics` (one silo's handle).
    pub fn new(metrics: &Metrics) -> EngineMetrics {
        EngineMetrics {
            unclassified: UnclassifiedKind::ALL.map(|k| {
                Unclassified::ALL.map(|a| metrics.unclassified_counter(k.label(), a.label()))
            }),
            metrics: metrics.clone(),
            classes: Vec::new(),
            fair: Vec::new(),
            link: Vec::new(),
            shares: Vec::new(),
            port: None,
            acks: HashMap::new(),
            last: EngineGauges::default(),
        }
    }

    /// The name of class state `index`, once named.
    fn name(&self, index: usize) -> Option<&str> {
        self.classes.get(index)?.as_ref().map(|(n, _)| &**n)
    }
}

/// Grows `v` to hold index `index`.
fn slot<T>(v: &mut Vec<Option<T>>, index: usize) -> &mut Option<T> {
    if v.len() <= index {
        v.resize_with(index + 1, || None);
    }
    &mut v[index]
}

/// Advances `counter` by `to - from` (cumulative values that never go back).
fn advance(counter: &Counter, from: u64, to: u64) {
    if to > from {
        counter.inc_by(to - from);
    }
}

impl Telemetry for EngineMetrics {
    fn class_named(&mut self, index: usize, name: &str) {
        let class = Published {
            metrics: self.metrics.class(name),
            last: ClassStats::default(),
        };
        *slot(&mut self.classes, index) = Some((name.into(), class));
        *slot(&mut self.fair, index) = None;
        *slot(&mut self.link, index) = None;
        *slot(&mut self.shares, index) = None;
    }

    fn class_removed(&mut self, index: usize, name: &str) {
        self.metrics.remove_class(name);
        if let Some(s) = self.classes.get_mut(index) {
            *s = None;
        }
        if let Some(s) = self.fair.get_mut(index) {
            *s = None;
        }
        if let Some(s) = self.link.get_mut(index) {
            *s = None;
        }
        if let Some(Some((parent, _))) = self.shares.get_mut(index).map(Option::take) {
            self.metrics.remove_tree_share(name, &parent);
        }
    }

    fn class(&mut self, index: usize, stats: &ClassStats) {
        let Some(Some((_, p))) = self.classes.get_mut(index) else {
            return;
        };
        let (m, last) = (&p.metrics, &p.last);
        let packets = stats.sent_packets.saturating_sub(last.sent_packets);
        let bytes = stats.sent_bytes.saturating_sub(last.sent_bytes);
        if packets > 0 || bytes > 0 {
            m.sent(packets, bytes);
        }
        for reason in DropReason::ALL {
            let k = reason as usize;
            m.dropped_n(reason, stats.drops[k].saturating_sub(last.drops[k]));
        }
        m.ecn_marked_n(stats.ecn_marked.saturating_sub(last.ecn_marked));
        m.ecn_not_ect_n(stats.ecn_not_ect.saturating_sub(last.ecn_not_ect));
        m.flow_table_overflow_n(
            stats
                .flow_table_overflow
                .saturating_sub(last.flow_table_overflow),
        );
        m.set_queued(stats.queued);
        let share = stats.share_bps;
        let changed = share != p.last.share_bps;
        p.last = *stats;
        if let (true, Some(Some((_, gauge)))) = (changed, self.shares.get(index)) {
            gauge.set(i64::try_from(share).unwrap_or(i64::MAX));
        }
    }

    fn class_parent(&mut self, index: usize, parent: Option<&str>) {
        let Some(name) = self.name(index).map(str::to_owned) else {
            return;
        };
        if let Some((old, _)) = slot(&mut self.shares, index).take() {
            self.metrics.remove_tree_share(&name, &old);
        }
        if let Some(parent) = parent {
            let gauge = self.metrics.tree_share(&name, parent);
            if let Some(Some((_, p))) = self.classes.get(index) {
                gauge.set(i64::try_from(p.last.share_bps).unwrap_or(i64::MAX));
            }
            self.shares[index] = Some((parent.into(), gauge));
        }
    }

    fn fair_class(&mut self, index: usize, stats: &FairClassStats) {
        let Some(name) = self.name(index).map(str::to_owned) else {
            return;
        };
        let p = slot(&mut self.fair, index).get_or_insert_with(|| Published {
            metrics: self.metrics.fair_class(&name),
            last: FairClassStats::default(),
        });
        p.metrics.set_flows(stats.flows);
        p.metrics
            .overflowed_n(stats.overflow.saturating_sub(p.last.overflow));
        p.metrics
            .sparse_early_n(stats.sparse_early.saturating_sub(p.last.sparse_early));
        p.last = *stats;
    }

    fn link_class(&mut self, index: usize, snapshot: &LinkClassSnapshot) {
        let Some(name) = self.name(index).map(str::to_owned) else {
            return;
        };
        slot(&mut self.link, index)
            .get_or_insert_with(|| self.metrics.link_class(&name))
            .publish(snapshot);
    }

    fn link_port(&mut self, rate_bps: u64, bytes: u64, round_time_ns: u64) {
        self.port
            .get_or_insert_with(|| self.metrics.link_port())
            .publish(rate_bps, bytes, round_time_ns);
    }

    fn ack_shaping(&mut self, name: &str, counts: &[u64; ACK_OUTCOMES.len()]) {
        let metrics = &self.metrics;
        let p = self
            .acks
            .entry(name.to_owned())
            .or_insert_with(|| Published {
                metrics: ACK_OUTCOMES.map(|o| metrics.ack_shaping_counter(name, o)),
                last: [0; ACK_OUTCOMES.len()],
            });
        for (k, c) in p.metrics.iter().enumerate() {
            advance(c, p.last[k], counts[k]);
        }
        p.last = *counts;
    }

    fn engine(&mut self, g: &EngineGauges) {
        self.metrics.set_wheel_occupancy(g.wheel_occupancy);
        let packets = g.pass_packets.saturating_sub(self.last.pass_packets);
        if packets > 0 {
            self.metrics
                .pass_through(packets, g.pass_bytes.saturating_sub(self.last.pass_bytes));
        }
        for (kind, row) in self.unclassified.iter().enumerate() {
            for (action, c) in row.iter().enumerate() {
                advance(
                    c,
                    self.last.unclassified[kind][action],
                    g.unclassified[kind][action],
                );
            }
        }
        self.last = *g;
    }

    fn lateness(&mut self, tally: &mut HistogramTally) {
        self.metrics.merge_lateness(tally);
    }

    fn malformed(&mut self, reason: &'static str) {
        self.metrics.malformed(reason);
    }
}
