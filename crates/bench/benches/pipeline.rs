//! Criterion benchmark of the daemon's per-packet path through in-memory ports: the same
//! workload and cumulative stages as `metronome bench --daemon`
//! ([`metronome_bench::pipeline`]). Timing lives here, never in tests (CONTRIBUTING.md §15).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use metronome_bench::pipeline::{Stage, StageRunner};
use std::time::{Duration, Instant};

/// Frames per receive batch: the daemon's default `batch_size`.
const BATCH: usize = 64;

fn pipeline(c: &mut Criterion) {
    let mut group = c.benchmark_group("pipeline");
    group.throughput(Throughput::Elements(1));
    group.measurement_time(Duration::from_secs(3));
    for stage in Stage::ALL {
        let mut runner = StageRunner::new(stage, BATCH);
        // One "iteration" is one packet: run `iters` packets and time them together.
        group.bench_function(stage.name(), |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                let done = runner.run(iters);
                start.elapsed().mul_f64(iters as f64 / done.max(1) as f64)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, pipeline);
criterion_main!(benches);
