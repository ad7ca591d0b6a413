//! What an operator sees and sets: the configuration, the metrics, the service's start-up,
//! errors and exit codes.
//!
//! * [`service`]: `metronome run`: configuration, logging, signals, metrics endpoint, then the
//!   single loop ([`service::run_with`]) or the silos; the errors and exit codes a user sees.
//! * [`config`]: the TOML configuration, validated at start-up into core types
//!   ([`metronome_core::Rate`], [`metronome_core::TimingWheelConfig`], ...), with errors of the
//!   form `FILE:LINE: FIELD: MESSAGE`, and the plan of what a SIGHUP reload changes.
//! * [`units`]: durations (`500us`) and tc-like byte sizes (`15k`); rates are parsed by the core.
//! * [`metrics`]: the Prometheus counters, gauges and histograms, their HTTP endpoint and
//!   `metronome stats`.
//! * [`control`]: the control socket: classes added, changed and deleted live, and its client.
//! * [`refused`]: frames the ports could not take, counted by reason and logged once.

pub mod cluster;
pub use metronome_config as config;
pub mod control;
pub mod metrics;
pub mod refused;
pub mod service;
pub use metronome_config::units;
