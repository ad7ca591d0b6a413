//! Silo scaling (`metronome bench --daemon`): packets per second of the whole per-packet path with
//! one silo and with two silos side by side in the same run (Carousel §5.3: one independent shaper
//! per core), each silo a pinned thread running the benchmark's `Rig` on its own ports, pool and
//! traffic, the two-silo run with the daemon's [`metronome_daemon::driver::silo::SiloExchange`]
//! and [`Metrics::with_silos`]. The ratio of the medians is reported against [`TARGET_RATIO`], and
//! each thread's CPU time gives [`ScalingReport::cpu_ratio`]. The method: ARCHITECTURE.md, "Silo
//! scaling".

use super::{workload_config, workload_frames, Rig, Stage};
use metronome_daemon::driver::silo::pin;
use metronome_daemon::ops::config::Config;
use metronome_daemon::ops::metrics::Metrics;
use metronome_io::ThreadCpu;
use std::sync::{Arc, Barrier};
use std::time::Instant;

/// The target: two silos at least 1.8 times the packet rate of one.
pub const TARGET_RATIO: f64 = 1.8;

/// One configuration's measurement.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ScalingRow {
    /// Silos (threads) run side by side.
    pub silos: usize,
    /// Median over the repetitions of all silos' packets per second (wall time).
    pub packets_per_sec: f64,
    /// Every repetition's packets per second.
    pub repetitions_pps: Vec<f64>,
    /// Median over the repetitions of the silos' mean thread CPU time per packet, ns.
    pub cpu_ns_per_packet: f64,
    /// The CPU each silo was pinned to in the last repetition (`None`: not pinned).
    pub pinned: Vec<Option<usize>>,
}

/// One silo against two.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ScalingReport {
    /// Packets each silo processes per repetition.
    pub packets_per_silo: u64,
    /// One silo.
    pub one: ScalingRow,
    /// Two silos side by side.
    pub two: ScalingRow,
    /// `two.packets_per_sec / one.packets_per_sec`.
    pub ratio: f64,
    /// `2 × one.cpu_ns_per_packet / two.cpu_ns_per_packet`: the ratio with two whole cores.
    pub cpu_ratio: f64,
    /// [`TARGET_RATIO`].
    pub target_ratio: f64,
    /// Drops in any silo's engine during the runs (the workload has none; a non-zero value
    /// means the comparison is not like for like).
    pub dropped: u64,
}

/// The workload for `silos` silos: each class's aggregate rate multiplied by `silos` (the
/// allocator gives each silo its share), `[daemon] cores = silos`.
fn scaled_config(silos: usize) -> Config {
    let mut config = workload_config();
    config.daemon.cores = silos;
    for class in &mut config.classes {
        if let Some(rate) = class.policy.rate {
            class.policy.rate = Some(metronome_core::Rate::from_bps(rate.bps() * silos as u64));
        }
    }
    config
}

/// Warmed-up rigs for `silos` silos (linked to an allocator when more than one).
fn rigs(silos: usize, batch: usize) -> Vec<Rig> {
    let config = scaled_config(silos);
    let frames = workload_frames();
    let metrics = Metrics::with_silos(silos);
    let allocator = metronome_daemon::driver::silo::allocator(&config, silos, &[]);
    (0..silos)
        .map(|silo| {
            let m = metrics.for_silo(silo);
            let mut rig = Rig::with_metrics(&config, &frames, batch, Stage::Engine, m.clone());
            if silos > 1 {
                rig.join_silo(silo, &allocator.cells(), m);
            }
            rig.warm_up(config.wheel.horizon);
            rig
        })
        .collect()
}

/// One run of [`run_together`].
struct Together {
    rigs: Vec<Rig>,
    /// All packets over the wall time.
    pps: f64,
    /// The silos' mean thread CPU ns per packet (0 when schedstat is unreadable).
    cpu_ns: f64,
    pinned: Vec<Option<usize>>,
}

/// Runs every rig on its own pinned thread for `packets` packets each, together.
fn run_together(rigs: Vec<Rig>, packets: u64) -> Together {
    let n = rigs.len();
    let barrier = Arc::new(Barrier::new(n + 1));
    let threads: Vec<_> = rigs
        .into_iter()
        .enumerate()
        .map(|(silo, mut rig)| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let pinned = pin(silo);
                let mut cpu = ThreadCpu::of_current_thread().ok();
                let mut cpu_ns = || cpu.as_mut().and_then(|c| c.read().ok()).unwrap_or(0);
                barrier.wait();
                let cpu_start = cpu_ns();
                let done = rig.steps(packets);
                let finished = Instant::now();
                let cpu_used = cpu_ns().saturating_sub(cpu_start);
                (
                    rig,
                    done,
                    finished,
                    pinned,
                    cpu_used as f64 / done.max(1) as f64,
                )
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    let mut out = Vec::with_capacity(n);
    let (mut total, mut end, mut pinned, mut cpu) = (0u64, start, Vec::with_capacity(n), 0.0);
    for t in threads {
        let (rig, done, finished, p, cpu_ns) = t.join().expect("a benchmark silo panicked");
        total += done;
        end = end.max(finished);
        pinned.push(p);
        cpu += cpu_ns / n as f64;
        out.push(rig);
    }
    let secs = end.duration_since(start).as_secs_f64().max(1e-9);
    Together {
        rigs: out,
        pps: total as f64 / secs,
        cpu_ns: cpu,
        pinned,
    }
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[s.len() / 2]
}

/// Measures one silo and two silos, `repetitions` times each, interleaved.
pub fn run(batch: usize, packets: u64, repetitions: usize) -> ScalingReport {
    let mut one = rigs(1, batch);
    let mut two = rigs(2, batch);
    let (mut one_pps, mut two_pps) = (Vec::new(), Vec::new());
    let (mut one_cpu, mut two_cpu) = (Vec::new(), Vec::new());
    let (mut one_pin, mut two_pin) = (Vec::new(), Vec::new());
    for _ in 0..repetitions.max(1) {
        let t = run_together(one, packets);
        (one, one_pin) = (t.rigs, t.pinned);
        one_pps.push(t.pps);
        one_cpu.push(t.cpu_ns);
        let t = run_together(two, packets);
        (two, two_pin) = (t.rigs, t.pinned);
        two_pps.push(t.pps);
        two_cpu.push(t.cpu_ns);
    }
    let dropped = one.iter().chain(&two).map(|r| r.totals().dropped).sum();
    let (a, b) = (median(&one_pps), median(&two_pps));
    let (ca, cb) = (median(&one_cpu), median(&two_cpu));
    ScalingReport {
        packets_per_silo: packets,
        one: ScalingRow {
            silos: 1,
            packets_per_sec: a,
            repetitions_pps: one_pps,
            cpu_ns_per_packet: ca,
            pinned: one_pin,
        },
        two: ScalingRow {
            silos: 2,
            packets_per_sec: b,
            repetitions_pps: two_pps,
            cpu_ns_per_packet: cb,
            pinned: two_pin,
        },
        ratio: b / a.max(1e-9),
        cpu_ratio: if cb > 0.0 { 2.0 * ca / cb } else { 0.0 },
        target_ratio: TARGET_RATIO,
        dropped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaled_silos_shape_what_one_silo_shapes_and_drop_nothing() {
        let report = run(32, 5_000, 1);
        assert_eq!(report.dropped, 0);
        assert_eq!((report.one.silos, report.two.silos), (1, 2));
        assert_eq!(report.two.pinned.len(), 2);
        assert!(report.one.packets_per_sec > 0.0 && report.two.packets_per_sec > 0.0);
        let c = scaled_config(2);
        assert_eq!(
            c.classes[0].policy.rate,
            Some(metronome_core::Rate::mbps(5_200))
        );
        assert_eq!(c.classes[2].policy.rate, None); // the paced class has no aggregate
    }
}
