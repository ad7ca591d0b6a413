//! Measurement during a run: windowed throughput at the NIC (Carousel §7.1.1), packets held in
//! the shaper at each dequeue (Carousel §7.1.2), RTT, per-segment delivery latency (zD §2.3,
//! Figures 3 and 12) and queueing delay in HDR histograms.
//!
//! Samples count only after the warm-up. Histograms are sized up front (bounds below), so
//! recording never allocates; a value beyond the bound is saturated to it and counted in
//! `saturated` rather than lost.

use crate::report::{CountSummary, LatencySummary, ThroughputReport};
use hdrhistogram::Histogram;
use metronome_core::{Duration, Timestamp};

/// Significant decimal digits of every histogram: 3 (0.1% resolution).
const SIGFIG: u8 = 3;
/// Largest latency recorded, ns: 100 s, beyond any RTO backoff of a short run.
const MAX_LATENCY_NS: u64 = 100_000_000_000;
/// Largest occupancy recorded, packets: 2^26.
const MAX_HELD: u64 = 1 << 26;

/// Accumulators of one run.
pub struct Metrics {
    warmup: Timestamp,
    window: Duration,
    window_bytes: u64,
    windows_bps: Vec<f64>,
    held: Histogram<u64>,
    rtt: Histogram<u64>,
    delivery: Histogram<u64>,
    /// Each flow's largest delivery latency after the warm-up, ns (0: none yet); indexed by flow.
    flow_worst: Vec<u64>,
    qdelay: Histogram<u64>,
    probe: Histogram<u64>,
    /// Samples clamped to a histogram's bound.
    pub saturated: u64,
    /// Bytes delivered in order to receivers (goodput), whole run.
    pub delivered_bytes: u64,
}

fn histogram(max: u64) -> Histogram<u64> {
    // The bounds are constants that hdrhistogram accepts (1 <= low, high >= 2 * low, sigfig <= 5):
    // this cannot fail on any scenario.
    Histogram::new_with_bounds(1, max, SIGFIG).expect("constant histogram bounds are valid")
}

impl Metrics {
    /// Accumulators of `flows` flows measuring from `warmup`, in windows of `window`.
    pub fn new(warmup: Timestamp, window: Duration, expected_windows: usize, flows: usize) -> Self {
        Metrics {
            warmup,
            window,
            window_bytes: 0,
            windows_bps: Vec::with_capacity(expected_windows),
            held: histogram(MAX_HELD),
            rtt: histogram(MAX_LATENCY_NS),
            delivery: histogram(MAX_LATENCY_NS),
            flow_worst: vec![0; flows],
            qdelay: histogram(MAX_LATENCY_NS),
            probe: histogram(MAX_LATENCY_NS),
            saturated: 0,
            delivered_bytes: 0,
        }
    }

    /// True once measurement has started.
    #[inline]
    pub fn measuring(&self, now: Timestamp) -> bool {
        now >= self.warmup
    }

    #[inline]
    fn record(h: &mut Histogram<u64>, v: u64, saturated: &mut u64) {
        let high = h.high();
        if v > high {
            *saturated += 1;
        }
        // Cannot fail: the value is clamped into the histogram's range.
        let _ = h.record(v.min(high));
    }

    /// The NIC finished sending `bytes` at `now`.
    #[inline]
    pub fn on_transmit(&mut self, now: Timestamp, bytes: u64) {
        if self.measuring(now) {
            self.window_bytes += bytes;
        }
    }

    /// A packet left the shaper at `now` after `qdelay` in it; `held` packets remain.
    #[inline]
    pub fn on_dequeue(&mut self, now: Timestamp, held: usize, qdelay: Duration) {
        if self.measuring(now) {
            Self::record(&mut self.held, held as u64, &mut self.saturated);
            Self::record(&mut self.qdelay, qdelay.as_nanos(), &mut self.saturated);
        }
    }

    /// An ACK carried an RTT sample at `now`.
    #[inline]
    pub fn on_rtt(&mut self, now: Timestamp, rtt: Duration) {
        if self.measuring(now) {
            Self::record(&mut self.rtt, rtt.as_nanos(), &mut self.saturated);
        }
    }

    /// An ACK of `flow` at `now` covered a segment first sent `latency` ago (see
    /// [`crate::report::SimReport::delivery_latency`]).
    #[inline]
    pub fn on_delivery(&mut self, now: Timestamp, flow: u32, latency: Duration) {
        if self.measuring(now) {
            let ns = latency.as_nanos();
            Self::record(&mut self.delivery, ns, &mut self.saturated);
            let worst = &mut self.flow_worst[flow as usize];
            *worst = (*worst).max(ns);
        }
    }

    /// A measurement window closed.
    pub fn close_window(&mut self) {
        let secs = self.window.as_secs_f64();
        self.windows_bps.push(self.window_bytes as f64 * 8.0 / secs);
        self.window_bytes = 0;
    }

    /// Packets held, summarized.
    pub fn held(&self) -> CountSummary {
        let h = &self.held;
        CountSummary {
            p50: h.value_at_quantile(0.5),
            p99: h.value_at_quantile(0.99),
            max: h.max(),
            mean: h.mean(),
            samples: h.len(),
        }
    }

    fn latency(h: &Histogram<u64>) -> LatencySummary {
        LatencySummary {
            p50_ns: h.value_at_quantile(0.5),
            p99_ns: h.value_at_quantile(0.99),
            p999_ns: h.value_at_quantile(0.999),
            max_ns: h.max(),
            mean_ns: h.mean(),
            samples: h.len(),
        }
    }

    /// RTT percentiles.
    pub fn rtt(&self) -> LatencySummary {
        Self::latency(&self.rtt)
    }

    /// Delivery-latency percentiles.
    pub fn delivery_latency(&self) -> LatencySummary {
        Self::latency(&self.delivery)
    }

    /// Percentiles over flows of each flow's worst delivery latency (see
    /// [`crate::report::SimReport::flow_delivery_latency`]). `oldest_unacked` gives, per flow in
    /// order, the first transmission time of its oldest unacknowledged segment at `end`: a segment
    /// still waiting counts with its age at `end` (a lower bound of its latency), so a flow stalled
    /// in RTO backoff past the end is not left out. Flows without any sample are left out.
    pub fn flow_delivery_latency(
        &self,
        end: Timestamp,
        oldest_unacked: impl Iterator<Item = Option<Timestamp>>,
    ) -> LatencySummary {
        let mut h = histogram(MAX_LATENCY_NS);
        let mut saturated = 0;
        for (&worst, oldest) in self.flow_worst.iter().zip(oldest_unacked) {
            let waiting = oldest.map_or(0, |t| end.saturating_since(t).as_nanos());
            let ns = worst.max(waiting);
            if ns > 0 {
                Self::record(&mut h, ns, &mut saturated);
            }
        }
        Self::latency(&h)
    }

    /// The sparse flow's response came back at `now`, `latency` after its request was offered.
    #[inline]
    pub fn on_probe(&mut self, now: Timestamp, latency: Duration) {
        if self.measuring(now) {
            Self::record(&mut self.probe, latency.as_nanos(), &mut self.saturated);
        }
    }

    /// The sparse flow's request-to-response percentiles.
    pub fn probe_latency(&self) -> LatencySummary {
        Self::latency(&self.probe)
    }

    /// Queueing-delay percentiles.
    pub fn queueing_delay(&self) -> LatencySummary {
        Self::latency(&self.qdelay)
    }

    /// Throughput figures against `target_bps`, given each flow's bytes after the warm-up and the
    /// measured span.
    pub fn throughput(
        &self,
        target_bps: f64,
        flow_bytes: impl Iterator<Item = u64>,
        measured: Duration,
        per_flow: bool,
    ) -> ThroughputReport {
        let w = &self.windows_bps;
        let n = w.len().max(1) as f64;
        let aggregate_bps = w.iter().sum::<f64>() / n;
        let deviation_pct = if target_bps > 0.0 {
            w.iter().map(|r| (r - target_bps).abs()).sum::<f64>() / n / target_bps * 100.0
        } else {
            0.0
        };
        let secs = measured.as_secs_f64().max(1e-12);
        let rates: Vec<f64> = flow_bytes.map(|b| b as f64 * 8.0 / secs).collect();
        let sum: f64 = rates.iter().sum();
        let sq: f64 = rates.iter().map(|r| r * r).sum();
        let jain_fairness = if sq > 0.0 {
            sum * sum / (rates.len() as f64 * sq)
        } else {
            0.0
        };
        ThroughputReport {
            aggregate_bps,
            target_bps,
            deviation_pct,
            windows_bps: w.clone(),
            jain_fairness,
            min_flow_bps: rates.iter().copied().fold(f64::INFINITY, f64::min).min(sum),
            max_flow_bps: rates.iter().copied().fold(0.0, f64::max),
            per_flow_bps: if per_flow { rates } else { Vec::new() },
            delivered_bytes: self.delivered_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_and_deviation() {
        let mut m = Metrics::new(Timestamp::from_nanos(10), Duration::from_millis(100), 4, 2);
        m.on_transmit(Timestamp::from_nanos(5), 1_000_000); // warm-up: ignored
        m.on_transmit(Timestamp::from_nanos(20), 1_250_000); // 100 Mbit/s over 100 ms
        m.close_window();
        m.on_transmit(Timestamp::from_nanos(30), 1_375_000); // 110 Mbit/s
        m.close_window();
        let t = m.throughput(100e6, [1, 1].into_iter(), Duration::from_millis(200), false);
        assert!((t.aggregate_bps - 105e6).abs() < 1.0);
        assert!((t.deviation_pct - 5.0).abs() < 1e-9);
        assert!((t.jain_fairness - 1.0).abs() < 1e-12);
    }

    #[test]
    fn histograms_saturate_instead_of_failing() {
        let mut m = Metrics::new(Timestamp::ZERO, Duration::from_millis(100), 1, 1);
        m.on_rtt(Timestamp::ZERO, Duration::from_secs(1_000));
        assert_eq!(m.saturated, 1);
        assert_eq!(m.rtt().samples, 1);
        m.on_dequeue(Timestamp::ZERO, 0, Duration::ZERO);
        assert_eq!(m.held().p50, 0);
    }

    #[test]
    fn delivery_latency_counts_after_the_warmup_only() {
        let ms = |m: u64| Timestamp::from_nanos(m * 1_000_000);
        let mut m = Metrics::new(ms(10), Duration::from_millis(100), 1, 3);
        m.on_delivery(ms(5), 0, Duration::from_secs(3)); // warm-up: ignored
        m.on_delivery(ms(20), 0, Duration::from_millis(250));
        m.on_delivery(ms(20), 0, Duration::from_millis(1));
        let d = m.delivery_latency();
        assert_eq!(d.samples, 2);
        assert!(d.max_ns.abs_diff(250_000_000) < 250_000, "{d:?}");
        assert_eq!(m.rtt().samples, 0, "delivery samples are not RTT samples");
        // Flow 0: worst 250 ms; flow 1: nothing delivered, a segment waiting since 0 at 2 s;
        // flow 2: nothing at all, left out.
        let f =
            m.flow_delivery_latency(ms(2_000), [Some(ms(1_990)), Some(ms(0)), None].into_iter());
        assert_eq!(f.samples, 2);
        assert!(f.p50_ns.abs_diff(250_000_000) < 250_000, "{f:?}");
        assert!(f.max_ns.abs_diff(2_000_000_000) < 2_000_000, "{f:?}");
    }
}
