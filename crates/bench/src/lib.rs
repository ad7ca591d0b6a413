//! # metronome-bench
//!
//! The benchmark harness behind `metronome bench` and `cargo bench`: the steady-state workload of
//! Carousel Table 1 ([`steady`]), the inter-flow batching comparison of FlowBundler ([`batching`]),
//! the memory footprints, the JSON report ([`report`]) and its SVG plots ([`plot`]); and the
//! daemon's in-memory per-packet pipeline with its silo scaling ([`pipeline`], `metronome bench
//! --daemon`).
//!
//! Timings come from benchmarks only; tests here check the harness, never a speed.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod batching;
pub mod floor;
pub mod machine;
pub mod pipeline;
pub mod plot;
pub mod report;
pub mod steady;
pub mod suite;
