//! The whole `metronome bench` run: every structure at every resident count, side by side in one
//! process, plus the memory footprints (FlowBundler §V-C) and the batching comparison
//! (FlowBundler §IV-A, §V-B).

use crate::batching::{self, BatchingParams};
use crate::floor::FifoFloor;
use crate::machine;
use crate::report::{FloorRow, MemoryRow, Report, ResultRow, WorkloadSummary};
use crate::steady::{SteadyParams, SteadyState};
use metronome_core::binary_heap::BinaryHeapQueue;
use metronome_core::fq_tree::FqTree;
use metronome_core::mltw::{Mltw, MltwConfig};
use metronome_core::token_bucket_rr::{ClassConfig, TokenBucketRr};
use metronome_core::{
    Duration, EdtQueue, FlowId, Rate, TimingWheel, TimingWheelConfig, TimingWheelList,
};

/// The structures, in report order. `mltw` estimates each destination's rate from its packets
/// (FlowBundler §IV-D); `mltw_set_rates` is the same MLTW told the flows' rates by the caller
/// (estimator off), which shows what the estimator costs.
pub const STRUCTURES: [&str; 7] = [
    "timing_wheel",
    "timing_wheel_list",
    "mltw",
    "mltw_set_rates",
    "binary_heap",
    "fq_tree",
    "token_bucket_rr",
];

/// Resident counts of Carousel Table 1.
pub const RESIDENT_FULL: [u64; 5] = [1_000, 4_000, 32_000, 256_000, 20_000_000];
/// Resident counts of `--quick`.
pub const RESIDENT_QUICK: [u64; 4] = [1_000, 4_000, 32_000, 256_000];

/// Options of a run.
#[derive(Clone, Debug)]
pub struct SuiteOptions {
    /// Resident counts to measure.
    pub resident: Vec<u64>,
    /// Structures to measure (names from [`STRUCTURES`]).
    pub structures: Vec<String>,
    /// The steady-state workload.
    pub steady: SteadyParams,
    /// Packets released per repetition (at least the resident count is used for warm-up).
    pub packets: u64,
    /// Repetitions per row; the median is reported.
    pub repetitions: usize,
    /// Timing wheel configuration (granularity, horizon) for the steady state.
    pub wheel: TimingWheelConfig,
}

impl SuiteOptions {
    /// The defaults of `metronome bench` (`quick` stops at 256 000 resident).
    pub fn new(quick: bool) -> Self {
        SuiteOptions {
            resident: if quick {
                RESIDENT_QUICK.to_vec()
            } else {
                RESIDENT_FULL.to_vec()
            },
            structures: STRUCTURES.iter().map(|s| s.to_string()).collect(),
            steady: SteadyParams::default(),
            packets: if quick { 1_000_000 } else { 2_000_000 },
            repetitions: 5,
            wheel: TimingWheelConfig::default(),
        }
    }
}

/// A structure filled and warmed up, ready for timed repetitions. Boxed so the suite can hold
/// every structure of one resident count at once and interleave their repetitions.
pub trait Prepared {
    /// Releases (and replaces) `packets` packets; returns ns per packet.
    fn measure(&mut self, packets: u64) -> f64;
    /// The result row, from the repetitions' samples.
    fn row(&self, name: &str, resident: u64, packets: u64, samples: &mut [f64]) -> ResultRow;
}

impl<Q: EdtQueue> Prepared for SteadyState<Q> {
    fn measure(&mut self, packets: u64) -> f64 {
        SteadyState::measure(self, packets)
    }
    fn row(&self, name: &str, resident: u64, packets: u64, samples: &mut [f64]) -> ResultRow {
        samples.sort_by(f64::total_cmp);
        ResultRow {
            structure: name.to_string(),
            resident,
            ns_per_packet: samples.get(samples.len() / 2).copied().unwrap_or(f64::NAN),
            ns_per_packet_min: samples.first().copied().unwrap_or(f64::NAN),
            packets_measured: packets,
            bytes_per_packet: self.bytes_per_packet(),
            memory_bytes: self.queue.memory_bytes() as u64,
            rejected: self.rejected,
        }
    }
}

/// Builds structure `name` (or the harness floor, `fifo_floor`), fills it with `resident`
/// packets and warms it up: one full turn of the resident packets, at least the measured count.
pub fn prepare(name: &str, resident: u64, opts: &SuiteOptions) -> Option<Box<dyn Prepared>> {
    fn warm<Q: EdtQueue + 'static>(q: Q, resident: u64, opts: &SuiteOptions) -> Box<dyn Prepared> {
        let mut s = SteadyState::new(q, opts.steady, resident);
        s.run(resident.max(opts.packets));
        Box::new(s)
    }
    let p = opts.steady;
    let pool = resident as usize + resident as usize / 4 + 4096;
    Some(match name {
        "fifo_floor" => warm(FifoFloor::new(), resident, opts),
        "timing_wheel" => warm(
            TimingWheel::new(TimingWheelConfig {
                pool_packets: pool,
                ..opts.wheel
            }),
            resident,
            opts,
        ),
        "timing_wheel_list" => warm(TimingWheelList::new(opts.wheel), resident, opts),
        "mltw" => warm(
            Mltw::new(MltwConfig {
                pool_packets: pool,
                ..Default::default()
            }),
            resident,
            opts,
        ),
        "mltw_set_rates" => {
            let mut q = Mltw::new(MltwConfig {
                pool_packets: pool,
                estimate_every: 0,
                ..Default::default()
            });
            for f in 0..p.flows {
                q.set_rate(FlowId(f), Rate::from_bps(p.flow_bps()));
            }
            warm(q, resident, opts)
        }
        "binary_heap" => warm(BinaryHeapQueue::new(), resident, opts),
        "fq_tree" => warm(FqTree::new(), resident, opts),
        "token_bucket_rr" => {
            let class = ClassConfig {
                rate: Rate::from_bps(p.flow_bps()),
                burst: p.packet_len as u32,
            };
            warm(
                TokenBucketRr::new(vec![class; p.flows as usize]),
                resident,
                opts,
            )
        }
        _ => return None,
    })
}

/// Runs one structure at one resident count on its own; returns its row.
pub fn measure_one(name: &str, resident: u64, opts: &SuiteOptions) -> Option<ResultRow> {
    let mut s = prepare(name, resident, opts)?;
    let mut samples: Vec<f64> = (0..opts.repetitions.max(1))
        .map(|_| s.measure(opts.packets))
        .collect();
    Some(s.row(name, resident, opts.packets, &mut samples))
}

/// Measures `names` at one resident count side by side: all are prepared first, then each
/// repetition runs every structure once, in turn, so a burst of noise on this shared machine
/// falls on all of them rather than on one. Returns the rows in `names` order.
pub fn measure_interleaved(
    names: &[&str],
    resident: u64,
    opts: &SuiteOptions,
    progress: &mut dyn FnMut(&str),
) -> Vec<ResultRow> {
    let mut prepared: Vec<(&str, Box<dyn Prepared>)> = Vec::new();
    for &name in names {
        progress(&format!("preparing {name} with {resident} resident"));
        if let Some(p) = prepare(name, resident, opts) {
            prepared.push((name, p));
        }
    }
    let mut samples = vec![Vec::new(); prepared.len()];
    for rep in 0..opts.repetitions.max(1) {
        progress(&format!(
            "repetition {} of {} with {resident} resident",
            rep + 1,
            opts.repetitions.max(1)
        ));
        for (i, (_, p)) in prepared.iter_mut().enumerate() {
            samples[i].push(p.measure(opts.packets));
        }
    }
    prepared
        .iter()
        .zip(samples.iter_mut())
        .map(|((name, p), s)| p.row(name, resident, opts.packets, s))
        .collect()
}

/// The memory rows: Carousel's configuration, FlowBundler's comparison points, the MLTW.
pub fn memory_rows() -> Vec<MemoryRow> {
    let flat = [
        (2_000u64, 2u64, "Carousel §7.1.3 / Table 1"),
        (1_000, 10, "FlowBundler §V-C (1 µs, 10 s)"),
        (100, 10, "FlowBundler §V-C (0.1 µs, 10 s)"),
    ];
    let mut rows = Vec::new();
    for (g, h, source) in flat {
        let c = TimingWheelConfig {
            granularity: Duration::from_nanos(g),
            horizon: Duration::from_secs(h),
            ..Default::default()
        };
        let config = format!("{} x {}", c.granularity, c.horizon);
        rows.push(MemoryRow {
            structure: "timing_wheel".into(),
            config: config.clone(),
            granularity_ns: g as f64,
            horizon_s: h as f64,
            bytes: TimingWheel::structure_bytes(&c) as u64,
            source: source.into(),
        });
        rows.push(MemoryRow {
            structure: "timing_wheel_list".into(),
            config,
            granularity_ns: g as f64,
            horizon_s: h as f64,
            bytes: TimingWheelList::structure_bytes(&c) as u64,
            source: source.into(),
        });
    }
    let m = MltwConfig {
        pool_packets: 0,
        ..Default::default()
    };
    let horizon = Mltw::new(m).horizon();
    rows.push(MemoryRow {
        structure: "mltw".into(),
        config: format!(
            "{}ns x {} x {}",
            m.min_granularity().as_nanos(),
            m.levels,
            m.slots_per_level
        ),
        granularity_ns: m.min_granularity().as_nanos() as f64,
        horizon_s: horizon.as_secs_f64(),
        bytes: metronome_core::mltw::structure_bytes(&m) as u64,
        source: "FlowBundler §V-A parameters".into(),
    });
    rows
}

/// Runs everything `opts` asks for, calling `progress` before each measurement.
pub fn run_suite(opts: &SuiteOptions, mut progress: impl FnMut(&str)) -> Report {
    let mut results = Vec::new();
    let mut harness_floor = Vec::new();
    for &n in &opts.resident {
        let mut names: Vec<&str> = vec!["fifo_floor"];
        names.extend(opts.structures.iter().map(String::as_str));
        for row in measure_interleaved(&names, n, opts, &mut progress) {
            if row.structure == "fifo_floor" {
                harness_floor.push(FloorRow {
                    resident: n,
                    ns_per_packet: row.ns_per_packet,
                });
            } else {
                results.push(row);
            }
        }
    }
    progress("batching with 1 to 64 destinations");
    let batching = batching::run(&BatchingParams::default());
    let p = opts.steady;
    Report {
        machine: machine::describe(),
        workload: WorkloadSummary {
            departure_pps: p.departure_pps,
            flows: p.flows,
            packet_len: p.packet_len,
            step_ns: p.step_ns,
            wheel_granularity_ns: opts.wheel.granularity.as_nanos(),
            wheel_horizon_s: opts.wheel.horizon.as_secs_f64(),
            seed: p.seed,
        },
        results,
        harness_floor,
        memory: memory_rows(),
        batching,
    }
}
