//! The report `metronome bench --json` prints: one JSON document with the machine, the steady-state
//! cost per packet of every structure, the memory footprints and the batching figures.

use serde::Serialize;

/// The whole report.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    /// The machine the figures come from (CPU model, cores, memory).
    pub machine: String,
    /// Parameters of the steady-state workload.
    pub workload: WorkloadSummary,
    /// Steady-state cost per packet, one row per structure and resident count.
    pub results: Vec<ResultRow>,
    /// The loop's own cost per packet at each resident count, measured with a trivial FIFO
    /// ([`crate::floor::FifoFloor`]) in the same run.
    pub harness_floor: Vec<FloorRow>,
    /// Memory footprints of fixed configurations.
    pub memory: Vec<MemoryRow>,
    /// Packets returned per dequeue call with several destinations.
    pub batching: Vec<BatchingRow>,
}

/// The workload parameters, echoed in the report.
#[derive(Clone, Debug, Default, Serialize)]
pub struct WorkloadSummary {
    /// Departure rate of the steady state, packets per second.
    pub departure_pps: u64,
    /// Flows the packets belong to.
    pub flows: u32,
    /// Packet length in bytes.
    pub packet_len: u16,
    /// Time advanced per step, nanoseconds.
    pub step_ns: u64,
    /// Timing wheel granularity, nanoseconds.
    pub wheel_granularity_ns: u64,
    /// Timing wheel horizon, seconds.
    pub wheel_horizon_s: f64,
    /// Seed of the workload's random jitter.
    pub seed: u64,
}

/// Steady-state cost of one structure at one resident count.
#[derive(Clone, Debug, Serialize)]
pub struct ResultRow {
    /// `timing_wheel`, `timing_wheel_list`, `mltw`, `binary_heap`, `fq_tree`, `token_bucket_rr`.
    pub structure: String,
    /// Packets resident in the structure during the measurement.
    pub resident: u64,
    /// Nanoseconds per packet: one enqueue plus one dequeue, median of the repetitions.
    pub ns_per_packet: f64,
    /// Lowest of the repetitions.
    pub ns_per_packet_min: f64,
    /// Packets measured per repetition.
    pub packets_measured: u64,
    /// Bytes spent on queued packets divided by the resident count.
    pub bytes_per_packet: f64,
    /// All bytes the structure held at the end (fixed arrays, pools, allocations).
    pub memory_bytes: u64,
    /// Packets handed back during the run (must be zero for a valid row).
    pub rejected: u64,
}

/// The harness floor at one resident count.
#[derive(Clone, Debug, Serialize)]
pub struct FloorRow {
    /// Packets resident.
    pub resident: u64,
    /// Nanoseconds per packet of the loop around a trivial FIFO, median of the repetitions.
    pub ns_per_packet: f64,
}

/// Memory footprint of one configuration, with no packet queued.
#[derive(Clone, Debug, Serialize)]
pub struct MemoryRow {
    /// The structure.
    pub structure: String,
    /// Human-readable configuration, e.g. `2us x 2s` or `1ns x 64 x 1024`.
    pub config: String,
    /// Finest granularity, nanoseconds.
    pub granularity_ns: f64,
    /// Time covered, seconds.
    pub horizon_s: f64,
    /// Bytes of the structure (slot arrays, bitmaps, tables; the per-packet pool not included).
    pub bytes: u64,
    /// Where the configuration comes from.
    pub source: String,
}

/// Packets per dequeue call with `destinations` destinations at equal rates.
#[derive(Clone, Debug, Serialize)]
pub struct BatchingRow {
    /// The structure.
    pub structure: String,
    /// Number of destinations (flows) at equal rates.
    pub destinations: u32,
    /// Packets released divided by dequeue calls that released at least one packet.
    pub packets_per_dequeue: f64,
    /// Dequeue calls made.
    pub dequeue_calls: u64,
    /// Largest lateness of a release behind its EDT, nanoseconds.
    pub max_late_ns: u64,
    /// Largest earliness of a release before its EDT, nanoseconds.
    pub max_early_ns: u64,
}
