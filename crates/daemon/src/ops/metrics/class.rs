//! What the data path counts per class: [`ClassMetrics`] (bytes, packets, drops by
//! [`DropReason`], ECN marks and fallbacks, queued packets, flow-table overflow),
//! [`FairClassMetrics`] for a fair class's flow queues and [`NbaRateGauge`] for a silo's share
//! of a class's aggregate rate. Each is a bundle of shared atomics taken from the registry once
//! ([`super::Metrics::class`] and its siblings) and updated with relaxed atomic operations only.

use super::class_table::ClassCells;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

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
    /// The shared link's buffer was full ([`crate::datapath::engine::link`]).
    LinkBuffer,
    /// Not ECN-capable above the link's marking threshold, under `non_ect = "drop"`.
    LinkNotEct,
    /// Queued while the outside link was down and more than `daemon.link_down_grace` past its
    /// EDT ([`crate::driver::carrier`]).
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

    /// Counts one packet dropped for `reason`.
    pub fn dropped(&self, reason: DropReason) {
        self.0.drops[reason as usize].fetch_add(1, Relaxed);
    }

    /// Counts one packet marked CE.
    pub fn ecn_marked(&self) {
        self.0.ecn_marked.fetch_add(1, Relaxed);
    }

    /// Counts one packet that should have been marked but was not ECN-capable (not-ECT), so the
    /// `ecn` mode fell back to its drop rule.
    pub fn ecn_not_ect(&self) {
        self.0.ecn_not_ect.fetch_add(1, Relaxed);
    }

    /// Counts one packet that found its flow's bucket of the flow table full and was shaped
    /// under the class's overflow entry ([`crate::datapath::flow_table`]).
    pub fn flow_table_overflow(&self) {
        self.0.flow_table_overflow.fetch_add(1, Relaxed);
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

    /// Counts one packet queued in the class's overflow flow.
    pub fn overflowed(&self) {
        self.overflow.inc();
    }

    /// Counts one packet of a sparse flow sent at once, ahead of the class's next pull.
    pub fn sparse_early(&self) {
        self.sparse_early.inc();
    }
}
