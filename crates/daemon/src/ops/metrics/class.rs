//! What the data path counts per class: [`ClassMetrics`] (bytes, packets, drops by
//! [`DropReason`], ECN marks and fallbacks, queued packets, flow-table overflow),
//! [`FairClassMetrics`] for a fair class's flow queues and [`NbaRateGauge`] for a silo's share
//! of a class's aggregate rate. Each is a bundle of shared atomics taken from the registry once
//! ([`super::Metrics::class`] and its siblings) and updated with relaxed atomic operations only.

use super::class_table::ClassCells;
pub use metronome_engine::stats::DropReason;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// The counters of one class in one silo, shared with the registry's collector
/// ([`super::class_table`]). Clone it into the packet loop; every method is one relaxed atomic
/// operation on the class's one record.
#[derive(Clone, Debug)]
pub struct ClassMetrics(pub(super) Arc<ClassCells>);

/// A silo's share of one class's aggregate rate (`metronome_nba_rate_bps{class,silo}`).
#[derive(Clone, Debug)]
pub struct NbaRateGauge(pub(super) Gauge);

impl NbaRateGauge {
    /// Sets the share the allocator gave this silo, bit/s.
    pub fn set(&self, bps: u64) {
        self.0.set(i64::try_from(bps).unwrap_or(i64::MAX));
    }
}

impl ClassMetrics {
    /// Counts `packets` packets of `bytes` bytes transmitted.
    pub fn sent(&self, packets: u64, bytes: u64) {
        self.0.packets.fetch_add(packets, Relaxed);
        self.0.bytes.fetch_add(bytes, Relaxed);
    }

    /// Counts `n` packets dropped for `reason`.
    pub fn dropped_n(&self, reason: DropReason, n: u64) {
        if n > 0 {
            self.0.drops[reason as usize].fetch_add(n, Relaxed);
        }
    }

    /// Counts `n` packets marked CE.
    pub fn ecn_marked_n(&self, n: u64) {
        if n > 0 {
            self.0.ecn_marked.fetch_add(n, Relaxed);
        }
    }

    /// Counts `n` packets that should have been marked but were not ECN-capable (not-ECT), so
    /// the `ecn` mode fell back to its drop rule.
    pub fn ecn_not_ect_n(&self, n: u64) {
        if n > 0 {
            self.0.ecn_not_ect.fetch_add(n, Relaxed);
        }
    }

    /// Counts `n` packets that found their flow's bucket of the flow table full and were shaped
    /// under the class's overflow entry ([`crate::datapath::flow_table`]).
    pub fn flow_table_overflow_n(&self, n: u64) {
        if n > 0 {
            self.0.flow_table_overflow.fetch_add(n, Relaxed);
        }
    }

    /// Sets the number of packets of this class waiting in the wheel.
    pub fn set_queued(&self, packets: u64) {
        self.0
            .queued
            .store(i64::try_from(packets).unwrap_or(i64::MAX), Relaxed);
    }
}

/// The series of one fair class (`fair = true`): its flows with packets waiting, and packets that
/// found no flow-table entry and waited in its overflow flow.
#[derive(Clone, Debug)]
pub struct FairClassMetrics {
    pub(super) flows: Gauge,
    pub(super) overflow: Counter,
    pub(super) sparse_early: Counter,
}

impl FairClassMetrics {
    /// Sets the number of the class's flows with packets in its fair queue.
    pub fn set_flows(&self, flows: u64) {
        self.flows.set(i64::try_from(flows).unwrap_or(i64::MAX));
    }

    /// Counts `n` packets queued in the class's overflow flow.
    pub fn overflowed_n(&self, n: u64) {
        if n > 0 {
            self.overflow.inc_by(n);
        }
    }

    /// Counts `n` packets of sparse flows sent at once, ahead of the class's next pull.
    pub fn sparse_early_n(&self, n: u64) {
        if n > 0 {
            self.sparse_early.inc_by(n);
        }
    }
}
