//! Criterion benches of the steady state of Carousel Table 1: one enqueue plus one dequeue per
//! packet, for every structure, at 4 000 and 256 000 resident packets. `metronome bench` runs the
//! same workload over all of Table 1's resident counts; these give criterion's statistics.

use criterion::{criterion_group, criterion_main, Criterion};
use metronome_bench::suite::{measure_one, SuiteOptions, STRUCTURES};
use std::time::Duration;

fn steady_state(c: &mut Criterion) {
    let opts = SuiteOptions::new(true);
    for resident in [4_000u64, 256_000] {
        let mut group = c.benchmark_group(format!("steady_state_{resident}"));
        group.sample_size(10);
        group.measurement_time(Duration::from_secs(3));
        for name in STRUCTURES {
            group.bench_function(name, |b| {
                b.iter_custom(|iters| {
                    // One iteration = one packet released and replaced; the structure is filled
                    // and warmed up outside the timed region by `measure_one`'s own loop, so we
                    // time a fresh measurement of `iters` packets.
                    let mut o = opts.clone();
                    o.packets = iters.max(1);
                    o.repetitions = 1;
                    o.structures = vec![name.to_string()];
                    let row = measure_one(name, resident, &o).expect("known structure");
                    Duration::from_nanos((row.ns_per_packet * iters as f64) as u64)
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, steady_state);
criterion_main!(benches);
