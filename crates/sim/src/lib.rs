//! # metronome-sim
//!
//! A deterministic discrete-event simulator of an end host that shapes its traffic: sources (TCP
//! with Reno, CUBIC, Vegas or DCTCP, or open-loop UDP), the shaper or scheduled buffer under test,
//! a backpressure mode, a NIC at line rate, a path and receivers; it reproduces the set-ups of
//! Carousel §5.2 and §7.1 and of zD §4 and §6 at their scale, in seconds.
//!
//! [`scenario`] holds every parameter ([`Scenario`]), [`run`] makes one run ([`SimReport`]),
//! [`event`] the `(time, sequence)` event queue, [`incast`] and [`switch`] the incast and
//! switch-port models, [`tcp`], [`host`] and [`flows`] the transports, [`shaper`] the structure
//! under test (for [`ShaperSpec::Daemon`] the daemon's own `Engine`), [`metrics`] and [`report`]
//! the measurement. Deterministic (CONTRIBUTING.md §14): no wall clock except in [`report::Speed`].
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
///
/// ```
/// use metronome_sim::{run, Scenario};
///
/// let report = run(&Scenario {
///     flows: 2,
///     duration_ns: 40_000_000,
///     warmup_ns: 10_000_000,
///     window_ns: 10_000_000,
///     ..Scenario::default()
/// })
/// .unwrap();
/// assert!(report.throughput.aggregate_bps > 0.5e9);
/// ```
pub fn run(scenario: &Scenario) -> Result<SimReport, ScenarioError> {
    scenario.validate()?;
    let wall = std::time::Instant::now();
    let mut sim = event_loop::Sim::new(scenario)?;
    sim.run();
    Ok(sim.report(wall.elapsed()))
}

#[cfg(test)]
mod tests;
