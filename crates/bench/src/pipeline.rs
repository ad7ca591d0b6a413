//! The in-memory pipeline benchmark (`metronome bench --daemon`): the daemon's whole per-packet
//! path on one core, against the project's target of [`TARGET_NS`] per packet.
//!
//! The real [`Engine`] runs between [`MemoryPort`]s in simulated time, and only the steps' wall
//! time is measured (CPU per packet, not a rate), on a workload of [`FLOWS`] TCP flows over four
//! classes offered at [`OFFERED_BPS`] ([`workload_config`], [`workload_frames`]). Cumulative
//! [`Stage`]s (port I/O, parse and classify, timestamping, the wheel, the engine) explain the
//! end-to-end figure; [`Stage::FairEngine`] runs it with `fair = true` ([`fair_workload_config`],
//! [`FAIR_TARGET_RATIO`]). The workload and the stages in full: ARCHITECTURE.md, "The pipeline
//! benchmark"; the results: docs/results/daemon.md.

use metronome_core::timestamp::{PolicyId, PolicyKind, Timestamper};
use metronome_core::{Duration, EdtQueue, PacketRef, Timestamp, TimingWheel, TimingWheelConfig};
use metronome_daemon::driver::silo::{LimitCell, SiloExchange};
use metronome_daemon::ops::config::{Config, MAX_BATCH_SIZE};
use metronome_daemon::ops::metrics::Metrics;
use metronome_engine::engine::Engine;
use metronome_engine::flow_table::{FlowTable, Lookup};
use metronome_io::{FramePool, MemoryPort, MemoryPortConfig, PacketPort, RxFrame};
use metronome_packet::{parse, Classifier, Verdict};
use std::time::Instant;

/// The daemon's engine for `config`, counting into `metrics` as a loop does (flows hashed with
/// the fixed seed, so runs are comparable).
pub(crate) fn daemon_engine(config: &Config, pool_slots: usize, metrics: &Metrics) -> Engine {
    let seed = metronome_engine::flow_seed::FlowSeed::FIXED;
    metronome_daemon::driver::reload::engine(config, pool_slots, metrics, seed)
}

pub mod classes;
pub mod scaling;

/// Flows in the workload: 1 000, a quarter per class.
pub const FLOWS: usize = 1_000;
/// Frame length in bytes: a full 1500-byte IPv4 TCP segment plus the Ethernet header.
pub const FRAME_LEN: usize = 1514;
/// Offered load in bit/s: 10 Gbit/s, 2.5 Gbit/s per class, so each limited class (2.6 Gbit/s)
/// and each paced flow (11 Mbit/s against 10 Mbit/s offered) keeps up and the backlog is steady.
pub const OFFERED_BPS: u64 = 10_000_000_000;
/// Frame pool slots: 16 384 (32 MiB), far above the steady backlog (about two batches).
const POOL_SLOTS: u32 = 16_384;

/// The workload's configuration: two aggregate-limited classes (one with ECN backpressure), one
/// paced class, and the default class unshaped; the daemon's 2 µs / 2 s wheel.
pub const WORKLOAD_TOML: &str = r#"
[interfaces]
inside = "bench-in"
outside = "bench-out"

[wheel]
granularity = "2us"
horizon = "2s"

[[class]]
name = "limited"
match = { protocol = "tcp", dst_port = "10000-10999" }
rate = "2600mbit"
burst = "15k"

[[class]]
name = "limited_ecn"
match = { protocol = "tcp", dst_port = "11000-11999" }
rate = "2600mbit"
burst = "15k"
backpressure = { mode = "ecn", threshold = "1ms" }

[[class]]
name = "paced"
match = { protocol = "tcp", dst_port = "12000-12999" }
pacing = "11mbit"
"#;

/// One cumulative stage of the breakdown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Port receive (copy into the pool) and transmit (free) only.
    Io,
    /// + parse and classify every frame.
    Classify,
    /// + flow-table lookup and timestamping by the class's policies.
    Stamp,
    /// + timing-wheel enqueue and dequeue of everything due: the pipeline without the engine's
    ///   bookkeeping.
    Wheel,
    /// The real [`Engine`]: the end-to-end figure.
    Engine,
    /// The real [`Engine`] with the aggregate-limited classes fair ([`fair_workload_config`]).
    FairEngine,
}

impl Stage {
    /// Every stage, in breakdown order.
    pub const ALL: [Stage; 6] = [
        Stage::Io,
        Stage::Classify,
        Stage::Stamp,
        Stage::Wheel,
        Stage::Engine,
        Stage::FairEngine,
    ];

    /// The stage's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Io => "io",
            Stage::Classify => "parse_classify",
            Stage::Stamp => "timestamp",
            Stage::Wheel => "wheel",
            Stage::Engine => "engine",
            Stage::FairEngine => "engine_fair",
        }
    }

    /// What the stage does, for the table.
    pub fn describe(self) -> &'static str {
        match self {
            Stage::Io => "port recv (copy into pool) + tx (free)",
            Stage::Classify => "+ parse + classify",
            Stage::Stamp => "+ flow table + timestamp",
            Stage::Wheel => "+ wheel enqueue/dequeue (release)",
            Stage::Engine => "real Engine, end to end",
            Stage::FairEngine => "real Engine, limited classes fair = true",
        }
    }
}

/// Options of [`run`].
#[derive(Clone, Copy, Debug)]
pub struct PipelineOptions {
    /// Frames per receive batch.
    pub batch: usize,
    /// Packets timed per repetition of a stage.
    pub packets: u64,
    /// Repetitions per stage (the median is reported).
    pub repetitions: usize,
}

impl PipelineOptions {
    /// 64-frame batches (the daemon's default); 2 M packets × 5 repetitions, or 300 k × 3 when
    /// `quick`.
    pub fn new(quick: bool) -> Self {
        PipelineOptions {
            batch: 64,
            packets: if quick { 300_000 } else { 2_000_000 },
            repetitions: if quick { 3 } else { 5 },
        }
    }
}

/// One measured stage.
#[derive(Clone, Debug, serde::Serialize)]
pub struct StageRow {
    /// [`Stage::name`].
    pub stage: &'static str,
    /// Median ns per packet over the repetitions.
    pub ns_per_packet: f64,
    /// Every repetition's ns per packet.
    pub repetitions_ns: Vec<f64>,
}

/// What [`run`] measured.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PipelineReport {
    /// Flows in the workload.
    pub flows: usize,
    /// Frame length in bytes.
    pub frame_len: usize,
    /// Frames per batch.
    pub batch: usize,
    /// Offered load in simulated time, bit/s.
    pub offered_bps: u64,
    /// Packets timed per repetition.
    pub packets: u64,
    /// The stages, cumulative, in [`Stage::ALL`] order.
    pub stages: Vec<StageRow>,
    /// End to end (the engine stage), ns per packet, including the port copy.
    pub end_to_end_ns: f64,
    /// End to end minus the I/O stage: what the shaping pipeline itself costs per packet.
    pub pipeline_ns: f64,
    /// The target for the pipeline, ns per packet ([`TARGET_NS`]).
    pub target_ns: f64,
    /// Of the engine stage's last repetition: packets forwarded at once (unshaped class).
    pub forwarded: u64,
    /// Of the engine stage's last repetition: packets released from the wheel.
    pub released: u64,
    /// Of the engine stage's last repetition: drops (should be 0).
    pub dropped: u64,
    /// Of the engine stage's last repetition: packets still queued at the end.
    pub queued_at_end: usize,
    /// The engine with fair classes ([`Stage::FairEngine`]), ns per packet.
    pub fair_ns: f64,
    /// The median over repetitions of the fair stage's ns per packet over the engine stage's in
    /// the same repetition: the cost of fair queueing.
    pub fair_ratio: f64,
    /// The target for `fair_ratio` ([`FAIR_TARGET_RATIO`]).
    pub fair_target_ratio: f64,
    /// Of the fair stage's last repetition: drops (should be 0).
    pub fair_dropped: u64,
    /// One silo against two side by side ([`scaling`]).
    pub scaling: scaling::ScalingReport,
}

/// The project's target for the whole per-packet path on one core: 60 ns per packet.
pub const TARGET_NS: f64 = 60.0;

/// The target for fair queueing's per-packet cost: at most 1.3 times the single-FIFO engine's
/// (the project's goal for fair classes).
pub const FAIR_TARGET_RATIO: f64 = 1.3;

/// The workload configuration (parses [`WORKLOAD_TOML`]).
pub fn workload_config() -> Config {
    Config::from_toml_str(WORKLOAD_TOML, "pipeline_bench.toml")
        .expect("the embedded benchmark configuration is valid")
}

/// [`workload_config`] with both aggregate-limited classes `fair = true`.
pub fn fair_workload_config() -> Config {
    let text = WORKLOAD_TOML.replace("burst = \"15k\"\n", "burst = \"15k\"\nfair = true\n");
    Config::from_toml_str(&text, "pipeline_bench_fair.toml")
        .expect("the embedded benchmark configuration is valid")
}

/// [`FLOWS`] IPv4 TCP frames of [`FRAME_LEN`] bytes, ECT(0), valid IPv4 checksum; flow `i` is
/// in class `i % 4` (destination port `10000 + 1000 × (i % 4) + i / 4`) so that a batch mixes
/// all classes.
pub fn workload_frames() -> Vec<Vec<u8>> {
    (0..FLOWS)
        .map(|i| {
            let dst_port = 10_000 + 1_000 * (i % 4) as u16 + (i / 4) as u16;
            tcp_frame(40_000 + (i % 20_000) as u16, dst_port, i as u16)
        })
        .collect()
}

/// An Ethernet II + IPv4 + TCP frame of [`FRAME_LEN`] bytes from 10.1.x.y:`src` to 10.2.0.1:`dst`.
pub(crate) fn tcp_frame(src: u16, dst: u16, host: u16) -> Vec<u8> {
    let mut f = vec![0u8; FRAME_LEN];
    let [hh, hl] = host.to_be_bytes();
    let spec = metronome_packet::build::TcpFrame {
        src_ip: [10, 1, hh, hl],
        dst_ip: [10, 2, 0, 1],
        src_port: src,
        dst_port: dst,
        ecn: metronome_packet::Ecn::Ect0,
        seq: 1,
    };
    // FRAME_LEN holds the headers and is below the frame limit, so this cannot fail.
    let _ = metronome_packet::build::write_tcp_frame(&mut f, &spec);
    f
}

/// Runs every stage and reports ns per packet. Progress goes to `progress`.
pub fn run(options: &PipelineOptions, mut progress: impl FnMut(&str)) -> PipelineReport {
    let (config, fair_config) = (workload_config(), fair_workload_config());
    let frames = workload_frames();
    let batch = options.batch.clamp(1, MAX_BATCH_SIZE);
    // One rig per stage, warmed up over one wheel horizon of simulated time, so that every
    // wheel slot and pool page has been touched (a running daemon's steady state). The
    // repetitions then take the stages in turn, so that load from other processes on a shared
    // machine falls on every stage alike and the ratios between stages hold.
    let mut rigs: Vec<(Stage, Rig)> = Stage::ALL
        .iter()
        .map(|&stage| {
            progress(stage.describe());
            let config = match stage {
                Stage::FairEngine => &fair_config,
                _ => &config,
            };
            let mut rig = Rig::new(config, &frames, batch, stage);
            rig.warm_up(config.wheel.horizon);
            (stage, rig)
        })
        .collect();
    progress("repetitions, the stages in turn");
    let mut reps = vec![Vec::new(); rigs.len()];
    for _ in 0..options.repetitions.max(1) {
        for (k, (_, rig)) in rigs.iter_mut().enumerate() {
            let start = Instant::now();
            let done = rig.steps(options.packets);
            reps[k].push(start.elapsed().as_nanos() as f64 / done.max(1) as f64);
        }
    }
    let median = |v: &[f64]| {
        let mut sorted = v.to_vec();
        sorted.sort_by(f64::total_cmp);
        sorted[sorted.len() / 2]
    };
    let totals = |want: Stage| {
        rigs.iter()
            .find(|(s, _)| *s == want)
            .map_or(Totals::default(), |(_, r)| r.totals())
    };
    let (last, fair_last) = (totals(Stage::Engine), totals(Stage::FairEngine));
    let position = |want: Stage| Stage::ALL.iter().position(|s| *s == want).unwrap_or(0);
    let ratios: Vec<f64> = reps[position(Stage::FairEngine)]
        .iter()
        .zip(&reps[position(Stage::Engine)])
        .map(|(fair, fifo)| fair / fifo.max(1e-9))
        .collect();
    let fair_ratio = median(&ratios);
    let stages: Vec<StageRow> = rigs
        .drain(..)
        .zip(reps)
        .map(|((stage, _), repetitions_ns)| StageRow {
            stage: stage.name(),
            ns_per_packet: median(&repetitions_ns),
            repetitions_ns,
        })
        .collect();
    progress("silos: one, then two side by side");
    let scaling = scaling::run(batch, options.packets, options.repetitions);
    let ns = |s: Stage| {
        stages
            .iter()
            .find(|r| r.stage == s.name())
            .map_or(0.0, |r| r.ns_per_packet)
    };
    let (engine_ns, fair_ns) = (ns(Stage::Engine), ns(Stage::FairEngine));
    PipelineReport {
        flows: FLOWS,
        frame_len: FRAME_LEN,
        batch,
        offered_bps: OFFERED_BPS,
        packets: options.packets,
        end_to_end_ns: engine_ns,
        pipeline_ns: engine_ns - ns(Stage::Io),
        target_ns: TARGET_NS,
        stages,
        forwarded: last.forwarded,
        released: last.released,
        dropped: last.dropped,
        queued_at_end: last.queued,
        fair_ns,
        fair_ratio,
        fair_target_ratio: FAIR_TARGET_RATIO,
        fair_dropped: fair_last.dropped,
        scaling,
    }
}

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Totals {
    forwarded: u64,
    released: u64,
    dropped: u64,
    queued: usize,
}

/// A class's policies in the breakdown stages.
#[derive(Clone, Copy)]
struct ClassPieces {
    aggregate: Option<PolicyId>,
    /// Per-flow pacing rate and burst.
    pacing: Option<(metronome_core::Rate, u32)>,
    shaped: bool,
}

/// The breakdown stages' own pipeline: the engine's pieces without its bookkeeping.
struct Pieces {
    classifier: Classifier,
    stamper: Timestamper,
    flows: FlowTable,
    /// Per config class id.
    classes: Vec<ClassPieces>,
    wheel: TimingWheel,
    max_delay: Duration,
    out: Vec<PacketRef>,
}

impl Pieces {
    fn new(config: &Config) -> Pieces {
        let mut stamper = Timestamper::new();
        let policies =
            std::iter::once(config.default_class).chain(config.classes.iter().map(|c| c.policy));
        let classes = policies
            .map(|p| {
                let agg = p
                    .rate
                    .map(|r| stamper.add_policy(PolicyKind::Aggregate, r, p.burst));
                ClassPieces {
                    aggregate: agg,
                    pacing: p.pacing.map(|r| (r, p.burst)),
                    shaped: p.is_shaped(),
                }
            })
            .collect();
        let wheel_config = TimingWheelConfig {
            pool_packets: config.wheel.pool_packets.min(POOL_SLOTS as usize),
            ..config.wheel
        };
        let max_delay = wheel_config.horizon.as_nanos() - wheel_config.granularity.as_nanos();
        Pieces {
            classifier: config.classifier(),
            stamper,
            flows: FlowTable::new(),
            classes,
            wheel: TimingWheel::new(wheel_config),
            max_delay: Duration::from_nanos(max_delay),
            out: vec![PacketRef::default(); MAX_BATCH_SIZE],
        }
    }

    /// Processes `frames` up to `stage`; ids to send now go onto `tx`.
    fn receive(
        &mut self,
        stage: Stage,
        now: Timestamp,
        pool: &FramePool,
        frames: &[RxFrame],
        tx: &mut Vec<u32>,
    ) {
        for rx in frames {
            let parsed = parse(pool.frame(rx.id));
            let Verdict::Shape { class, flow, len } = self.classifier.classify(&parsed) else {
                tx.push(rx.id);
                continue;
            };
            let Some(&ClassPieces {
                aggregate: agg,
                pacing,
                shaped,
            }) = self.classes.get(class.index())
            else {
                tx.push(rx.id);
                continue;
            };
            if stage == Stage::Classify || !shaped {
                tx.push(rx.id);
                continue;
            }
            let mut policies = [agg, None];
            if let Some((rate, burst)) = pacing {
                if let Lookup::Entry(e) = self.flows.lookup(class.0, flow, now, &self.stamper) {
                    policies[1] = self.flows.pacing_policy(e, &mut self.stamper, rate, burst);
                }
            }
            let edt = match policies {
                [Some(a), Some(b)] => self.stamper.stamp(now, u32::from(len), &[a, b]),
                [Some(p), None] | [None, Some(p)] => self.stamper.stamp(now, u32::from(len), &[p]),
                [None, None] => now,
            };
            if stage == Stage::Stamp {
                tx.push(rx.id);
                continue;
            }
            let edt = edt.min(now.saturating_add(self.max_delay));
            let pkt = PacketRef::new(rx.id, flow, class, len);
            if self.wheel.enqueue(now, edt, pkt).is_err() {
                tx.push(rx.id); // never happens in this workload; the engine stage counts drops
            }
        }
    }

    fn release(&mut self, now: Timestamp, tx: &mut Vec<u32>) {
        loop {
            let n = self.wheel.dequeue(now, &mut self.out);
            tx.extend(self.out[..n].iter().map(|p| p.id));
            if n < self.out.len() {
                break;
            }
        }
    }
}

enum Pipeline {
    Pieces(Box<Pieces>),
    Engine(Box<Engine>),
}

/// One stage's world: ports, pool, pipeline and the virtual clock.
pub(crate) struct Rig {
    stage: Stage,
    pipeline: Pipeline,
    pool: FramePool,
    inside: MemoryPort,
    outside: MemoryPort,
    rx: Vec<RxFrame>,
    tx: Vec<u32>,
    now: Timestamp,
    /// Simulated time per step: one batch at [`OFFERED_BPS`].
    step: Duration,
    /// As one silo of several: its exchange with the allocator, polled every step.
    exchange: Option<Box<SiloExchange>>,
}

impl Rig {
    fn new(config: &Config, frames: &[Vec<u8>], batch: usize, stage: Stage) -> Rig {
        Rig::with_metrics(config, frames, batch, stage, Metrics::new())
    }

    /// A rig counting into `metrics` (a silo's handle in the scaling benchmark).
    pub(crate) fn with_metrics(
        config: &Config,
        frames: &[Vec<u8>],
        batch: usize,
        stage: Stage,
        metrics: Metrics,
    ) -> Rig {
        let pool = FramePool::new(POOL_SLOTS, metronome_io::DEFAULT_SLOT_SIZE);
        let pipeline = match stage {
            Stage::Engine | Stage::FairEngine => {
                Pipeline::Engine(Box::new(daemon_engine(config, pool.capacity(), &metrics)))
            }
            _ => Pipeline::Pieces(Box::new(Pieces::new(config))),
        };
        let port = |keep_sent| {
            MemoryPort::new(MemoryPortConfig {
                capacity: 4096,
                slot_size: metronome_io::DEFAULT_SLOT_SIZE,
                keep_sent,
            })
        };
        let mut inside = port(false);
        inside.set_replay(frames.to_vec());
        let step_ns = (batch * FRAME_LEN * 8) as u64 * 1_000_000_000 / OFFERED_BPS;
        Rig {
            stage,
            pipeline,
            pool,
            inside,
            outside: port(false),
            rx: vec![RxFrame::default(); batch],
            tx: Vec::with_capacity(4 * MAX_BATCH_SIZE),
            now: Timestamp::from_nanos(1_000_000_000),
            step: Duration::from_nanos(step_ns.max(1)),
            exchange: None,
        }
    }

    /// Joins the rig's engine to an allocator's cells as silo `silo` (engine stage only).
    pub(crate) fn join_silo(&mut self, silo: usize, cells: &[LimitCell], metrics: Metrics) {
        if let Pipeline::Engine(e) = &self.pipeline {
            self.exchange = Some(Box::new(SiloExchange::new(silo, cells, e, metrics)));
        }
    }

    /// Runs steps until `span` of simulated time has passed.
    pub(crate) fn warm_up(&mut self, span: Duration) {
        let until = self.now.saturating_add(span);
        while self.now < until {
            self.steps(1);
        }
    }

    /// Runs steps until at least `packets` were received; returns how many were.
    pub(crate) fn steps(&mut self, packets: u64) -> u64 {
        let mut done = 0u64;
        while done < packets {
            self.now = self.now.saturating_add(self.step);
            let n = self.inside.recv(&mut self.pool, &mut self.rx).unwrap_or(0);
            done += n as u64;
            let now = self.now;
            match &mut self.pipeline {
                Pipeline::Engine(e) => {
                    if let Some(exchange) = self.exchange.as_deref_mut() {
                        exchange.poll(e, now);
                    }
                    e.receive(now, &mut self.pool, &self.rx[..n], &mut self.tx);
                    while e.release(now, &mut self.pool, &mut self.tx, MAX_BATCH_SIZE)
                        == MAX_BATCH_SIZE
                    {}
                }
                Pipeline::Pieces(p) => {
                    if self.stage != Stage::Io {
                        p.receive(self.stage, now, &self.pool, &self.rx[..n], &mut self.tx);
                    } else {
                        self.tx.extend(self.rx[..n].iter().map(|f| f.id));
                    }
                    if self.stage == Stage::Wheel {
                        p.release(now, &mut self.tx);
                    }
                }
            }
            let sent = self.outside.send(&mut self.pool, &self.tx).unwrap_or(0);
            self.tx.drain(..sent);
        }
        done
    }

    pub(crate) fn totals(&self) -> Totals {
        match &self.pipeline {
            Pipeline::Engine(e) => {
                let c = e.counters();
                Totals {
                    forwarded: c.forwarded,
                    released: c.released,
                    dropped: c.dropped(),
                    queued: e.queued(),
                }
            }
            Pipeline::Pieces(p) => Totals {
                queued: p.wheel.len(),
                ..Totals::default()
            },
        }
    }
}

/// One stage of the workload, warmed up, for criterion: the caller times [`StageRunner::run`].
pub struct StageRunner(Rig);

impl StageRunner {
    /// A warmed-up rig of `stage` with `batch`-frame batches.
    pub fn new(stage: Stage, batch: usize) -> StageRunner {
        let config = match stage {
            Stage::FairEngine => fair_workload_config(),
            _ => workload_config(),
        };
        let mut rig = Rig::new(
            &config,
            &workload_frames(),
            batch.clamp(1, MAX_BATCH_SIZE),
            stage,
        );
        rig.warm_up(config.wheel.horizon);
        StageRunner(rig)
    }

    /// Processes at least `packets` packets; returns how many.
    pub fn run(&mut self, packets: u64) -> u64 {
        self.0.steps(packets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs 200 000 frames of the workload through the engine of `stage` under `config`, batches
    /// of 64; checks the engine's invariants and that nothing was dropped. Returns the rig, the
    /// frame count and the totals.
    fn steady_run(config: &Config, stage: Stage) -> (Rig, u64, Totals) {
        let mut rig = Rig::new(config, &workload_frames(), 64, stage);
        let n = rig.steps(200_000);
        let t = rig.totals();
        engine(&rig).invariants();
        assert_eq!(t.dropped, 0);
        (rig, n, t)
    }

    fn engine(rig: &Rig) -> &Engine {
        let Pipeline::Engine(e) = &rig.pipeline else {
            unreachable!()
        };
        e
    }

    #[test]
    fn the_workload_is_steady_and_loses_nothing() {
        let (rig, n, t) = steady_run(&workload_config(), Stage::Engine);
        let e = engine(&rig);
        // A quarter of the frames are unshaped; the rest leave the wheel within about a step.
        assert!(
            t.forwarded >= n / 4 - 64 && t.forwarded <= n / 4 + 64,
            "{t:?}"
        );
        assert!(t.queued < 4 * 64, "the backlog must stay steady: {t:?}");
        assert_eq!(t.forwarded + t.released + t.queued as u64, n);
        assert_eq!(rig.pool.in_use(), t.queued + rig.tx.len());
        assert_eq!(e.counters().malformed, 0);
    }

    #[test]
    fn the_fair_workload_is_steady_and_loses_nothing() {
        let config = fair_workload_config();
        assert!(config.classes.iter().filter(|c| c.policy.fair).count() == 2);
        let (rig, n, t) = steady_run(&config, Stage::FairEngine);
        let e = engine(&rig);
        assert!(e.counters().fair_pulled > n / 4, "{:?}", e.counters());
        assert!(t.queued < 4 * 64, "the backlog must stay steady: {t:?}");
        assert_eq!(t.forwarded + t.released + t.queued as u64, n);
    }

    #[test]
    fn every_class_gets_its_share() {
        let config = workload_config();
        let classifier = config.classifier();
        let mut per_class = [0usize; 4];
        for f in workload_frames() {
            let Verdict::Shape { class, .. } = classifier.classify(&parse(&f)) else {
                panic!("workload frame not IP")
            };
            per_class[class.index()] += 1;
        }
        assert_eq!(per_class, [FLOWS / 4; 4]);
    }

    #[test]
    fn every_stage_runs() {
        let report = run(
            &PipelineOptions {
                batch: 32,
                packets: 2_000,
                repetitions: 1,
            },
            |_| {},
        );
        assert_eq!(report.stages.len(), Stage::ALL.len());
        assert_eq!(report.dropped, 0);
    }
}
