//! # metronome-sim
//!
//! A deterministic discrete-event simulator of an end host that shapes its traffic: N sources
//! (TCP-like with Reno, CUBIC or Vegas; or open-loop UDP-like), the shaper or scheduled buffer
//! under test, a backpressure mode between them, a NIC serializing at line rate, a path of fixed
//! delay and receivers answering with cumulative ACKs.
//!
//! It reproduces the set-ups of Carousel §5.2 and §7.1.1–7.1.2 (Deferred Completions vs
//! delay-based backpressure, rate conformance, packets held in the shaper, Figures 12–16) and of
//! zD §4 and §6 (TSQ + pfifo vs zD, drops, retransmissions and RTT, Figures 9–12), at the scale of
//! those papers (16 000 flows) in seconds.
//!
//! * [`scenario`]: every parameter ([`Scenario`], serde `Deserialize` for TOML plans).
//! * [`run`]: one run, returning a [`SimReport`].
//! * [`event`]: the `(time, sequence)` event queue; simulated time jumps to the next event.
//! * [`incast`]: many senders into one receiver, with Carousel §6's receiver-side ACK shaping.
//! * [`tcp`], [`host`]: transports, sources and receivers.
//! * [`flows`]: the descriptor slab and the TCP sender's event handling every scenario shares.
//! * [`shaper`]: the shaper under test, wrapping `metronome_core`'s structures or, for
//!   [`ShaperSpec::Daemon`], the daemon's own `Engine` (the code of `metronome run`) fed with real
//!   frames in simulated time.
//! * [`metrics`], [`report`]: measurement and the report.
//!
//! Determinism: one seeded generator per source, events ordered by `(time, sequence)`, no hash
//! maps in outputs, no wall clock except in [`report::Speed`].
//!
//! ```
//! use metronome_sim::{run, Scenario};
//!
//! let report = run(&Scenario {
//!     flows: 2,
//!     duration_ns: 40_000_000,
//!     warmup_ns: 10_000_000,
//!     window_ns: 10_000_000,
//!     ..Scenario::default()
//! })
//! .unwrap();
//! assert!(report.throughput.aggregate_bps > 0.5e9);
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod daemon_shaper;
pub mod event;
mod event_loop;
pub mod flows;
pub mod host;
pub mod incast;
pub mod metrics;
pub mod report;
pub mod scenario;
pub mod shaper;
pub mod switch;
pub mod tcp;

pub use report::{
    CountSummary, DropReport, LatencySummary, ShaperReport, SimReport, Speed, ThroughputReport,
};
pub use scenario::{
    BackpressureMode, CongestionControl, DaemonBackpressure, ProbeSpec, Scenario, ScenarioError,
    ShaperSpec, SourceKind, TransportConfig, ZdDiscipline,
};

/// Runs `scenario` to its end and reports what it measured. Parameters are validated first: a
/// bad scenario returns an error, never a panic.
pub fn run(scenario: &Scenario) -> Result<SimReport, ScenarioError> {
    scenario.validate()?;
    let wall = std::time::Instant::now();
    let mut sim = event_loop::Sim::new(scenario)?;
    sim.run();
    Ok(sim.report(wall.elapsed()))
}

#[cfg(test)]
mod tests;
