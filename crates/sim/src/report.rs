//! What a run reports: [`SimReport`], serde-serializable for plans that write JSON or CSV. All
//! but [`SimReport::speed`] (wall-clock figures) is a function of the scenario alone, so
//! determinism checks compare [`SimReport::deterministic`].
//!
//! The metrics follow the papers: rate conformance in 100 ms windows (Carousel §7.1.1), packets
//! held in the shaper (§7.1.2), drops, retransmissions and RTT (zD §6.2), with two latencies of
//! data: [`SimReport::rtt`] from echoed timestamps and [`SimReport::delivery_latency`] (with
//! [`SimReport::flow_delivery_latency`] per flow), which includes loss-recovery stalls as zD's
//! Figures 3 and 12 do. What each latency covers: ARCHITECTURE.md, "The simulator's report".

use crate::scenario::Scenario;
use serde::Serialize;

/// Percentiles of a distribution of counts (packets held).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct CountSummary {
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Maximum.
    pub max: u64,
    /// Mean.
    pub mean: f64,
    /// Samples taken.
    pub samples: u64,
}

/// Percentiles of a latency distribution, in nanoseconds (HDR histogram, 3 significant digits).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct LatencySummary {
    /// Median, ns.
    pub p50_ns: u64,
    /// 99th percentile, ns.
    pub p99_ns: u64,
    /// 99.9th percentile, ns.
    pub p999_ns: u64,
    /// Maximum, ns.
    pub max_ns: u64,
    /// Mean, ns.
    pub mean_ns: f64,
    /// Samples taken.
    pub samples: u64,
}

/// Throughput after the warm-up, measured at the NIC (the shaper's output, Carousel §7.1.1).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ThroughputReport {
    /// Mean aggregate rate over the measured windows, bits per second.
    pub aggregate_bps: f64,
    /// The target: the shaper's rate capped by the line rate, bits per second.
    pub target_bps: f64,
    /// Mean absolute deviation of the windowed rate from the target, percent of the target
    /// (Carousel §7.1.1).
    pub deviation_pct: f64,
    /// Aggregate rate of each window, bits per second.
    pub windows_bps: Vec<f64>,
    /// Jain's fairness index of the per-flow rates (1 = equal shares).
    pub jain_fairness: f64,
    /// Lowest per-flow rate, bits per second.
    pub min_flow_bps: f64,
    /// Highest per-flow rate, bits per second.
    pub max_flow_bps: f64,
    /// Every flow's rate, bits per second (only when the scenario asks for it).
    pub per_flow_bps: Vec<f64>,
    /// Bytes delivered in order to the receivers over the whole run (goodput).
    pub delivered_bytes: u64,
}

/// The shaper's occupancy and cost.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ShaperReport {
    /// The structure's name.
    pub name: String,
    /// Packets it holds at most.
    pub capacity: u64,
    /// Packets held, sampled at each dequeue after the warm-up.
    pub held: CountSummary,
    /// Packets accepted over the run.
    pub enqueued: u64,
    /// Packets released over the run.
    pub released: u64,
    /// Calls into the structure (enqueues, dequeues, probes) per released packet.
    pub operations_per_packet: f64,
}

/// Drops and the transport's reaction, over the whole run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct DropReport {
    /// Packets the shaper refused after the source handed them over: lost (a network loss).
    pub physical: u64,
    /// zD virtual drops: probes that found no room; the source kept the packet.
    pub virtual_drops: u64,
    /// zD flows resumed.
    pub resumes: u64,
    /// UDP packets dropped at a full socket buffer.
    pub source: u64,
    /// TCP segments sent again.
    pub retransmissions: u64,
    /// Fast retransmits (third duplicate ACK).
    pub fast_retransmits: u64,
    /// Retransmission timeouts.
    pub timeouts: u64,
    /// Window reductions on ECN echoes.
    pub ecn_reductions: u64,
    /// Packets CE-marked by the shaper's threshold.
    pub ce_marked: u64,
}

/// Wall-clock figures: the only non-deterministic part of a report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Speed {
    /// Wall time of the run, seconds.
    pub wall_seconds: f64,
    /// Simulated events per second of wall time.
    pub events_per_second: f64,
    /// Simulated seconds per wall second.
    pub speedup: f64,
}

/// Everything one run measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimReport {
    /// The scenario that ran.
    pub scenario: Scenario,
    /// Throughput and rate conformance.
    pub throughput: ThroughputReport,
    /// Shaper occupancy and cost.
    pub shaper: ShaperReport,
    /// Drops and retransmissions.
    pub drops: DropReport,
    /// RTT samples from ACKs after the warm-up: ACK time minus the echoed send time of the
    /// segment that triggered the ACK (shaper, NIC, path; no loss-recovery stalls), ns.
    pub rtt: LatencySummary,
    /// Per-segment delivery latency after the warm-up: time from a segment's first transmission
    /// to the first ACK covering it cumulatively (shaper, NIC, path, plus retransmission and RTO
    /// stalls and head-of-line blocking), ns. See the module documentation.
    pub delivery_latency: LatencySummary,
    /// Per-flow delivery latency: percentiles over flows of each flow's largest delivery latency
    /// after the warm-up, a segment still unacknowledged at the end counting with its age then
    /// (zD Figure 15 plots a "CDF of flow RTT"). Unlike [`SimReport::delivery_latency`], which
    /// weighs flows by the segments they deliver, a flow starved by RTO backoff counts as much as
    /// one that sends at line rate, ns.
    pub flow_delivery_latency: LatencySummary,
    /// Time from shaper enqueue to NIC start, after the warm-up, ns.
    pub queueing_delay: LatencySummary,
    /// The sparse flow's request-to-response latency after the warm-up (request offered to the
    /// shaper to response back at the requester), ns; empty without [`Scenario::probe`].
    pub probe_latency: LatencySummary,
    /// The sparse flow's requests the shaper dropped (never answered), whole run.
    pub probe_lost: u64,
    /// Simulated events processed.
    pub events: u64,
    /// Data packets sent to the shaper (first transmissions and retransmissions).
    pub packets_sent: u64,
    /// Wall-clock figures (non-deterministic).
    pub speed: Speed,
}

impl SimReport {
    /// The report without its wall-clock part: equal across runs of the same scenario.
    pub fn deterministic(&self) -> SimReport {
        SimReport {
            speed: Speed::default(),
            ..self.clone()
        }
    }
}
