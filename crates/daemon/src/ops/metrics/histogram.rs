//! The daemon's histograms: [`Pow2Histogram`], power-of-two buckets `base × 2^k` and `+Inf`
//! updated with relaxed atomics, so that the data path never takes a lock to observe a value
//! (`prometheus-client`'s `Histogram` takes one per observation); [`HistogramTally`], the same
//! buckets in plain integers that one thread fills per packet and merges once per batch; and the
//! bucket layouts of the lateness and TX batch histograms.

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use metronome_engine::stats::{HistogramTally, LATENESS_BASE_NS, LATENESS_BUCKETS};

/// TX batch buckets: 1, 2, 4, ... 1024 packets (the config's largest batch is below 1024).
pub const BATCH_BUCKETS: usize = 11;

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
        HistogramTally::new(self.base, self.buckets.len() - 1)
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

/// Lets the registry hold a histogram that [`Metrics`] also holds.
#[derive(Clone, Debug)]
pub(super) struct ArcMetric(pub(super) Arc<Pow2Histogram>);

impl ArcMetric {
    pub(super) fn lateness() -> Self {
        ArcMetric(Arc::new(Pow2Histogram::new(
            LATENESS_BASE_NS,
            LATENESS_BUCKETS,
        )))
    }

    pub(super) fn tx_batch() -> Self {
        ArcMetric(Arc::new(Pow2Histogram::new(1, BATCH_BUCKETS)))
    }
}

impl TypedMetric for ArcMetric {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for ArcMetric {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        self.0.metric_type()
    }
}
