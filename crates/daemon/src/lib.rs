//! # metronome-daemon
//!
//! The daemon behind `metronome run --config FILE [--cores N]`: a shaping bump in the wire
//! between two interfaces. Its entry point is [`ops::service::run_daemon`].
//!
//! It runs the engine (`metronome-engine`, re-exported as [`datapath`]) on the configuration
//! of `metronome-config` (re-exported as [`ops::config`]). Its own modules form layers, each
//! importing only those below it (`tests/layers.rs` checks it), lowest first:
//!
//! 1. [`ops::metrics`]: the counters, the Prometheus endpoint, `metronome stats`.
//! 2. [`os`]: opening the ports, dropping privileges, the BPF programs, realtime priorities,
//!    service-manager notifications.
//! 3. The control plane: [`ops::refused`], [`ops::cluster`] (the etcd agent), [`ops::control`]
//!    (the control socket), in that order.
//! 4. [`driver`]: the loop that moves frames between two ports through the engine
//!    ([`driver::run`]), the carrier state it waits out, per-core silos, reloads.
//! 5. [`ops::service`]: `metronome run`'s start-up, attach mode, exit codes; it puts the
//!    layers together.
//!
//! Topologies, traffic generation, `metronome demo` and `metronome compare` live in
//! `metronome-testbed`, the pipeline benchmark in `metronome-bench`; this crate depends on
//! neither. Like the core, the engine reads no clock: the loop passes `now`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub use metronome_engine as datapath;
pub mod driver;
#[cfg(test)]
mod engine_tests;
pub mod ops;
pub mod os;

pub use ops::config::{Config, ConfigError};
