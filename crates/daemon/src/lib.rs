//! # metronome-daemon
//!
//! The daemon behind `metronome run --config FILE [--cores N]`: a shaping bump in the wire
//! between two interfaces. Its entry point is [`ops::service::run_daemon`].
//!
//! Its modules are grouped by layer:
//!
//! * [`datapath`]: the per-packet pipeline without I/O ([`datapath::engine`]) and its per-flow
//!   state.
//! * [`driver`]: the loop that moves frames between two ports through the engine
//!   ([`driver::run`]), the carrier state it waits out, per-core silos, reloads.
//! * [`os`]: opening the ports, dropping privileges, service-manager notifications.
//! * [`ops`]: the configuration, the metrics and their endpoint, `metronome run`'s start-up and
//!   exit codes ([`ops::service`]).
//!
//! The data path does no I/O and reads no clock; of the other layers it uses only the
//! configuration's types and the metrics' handles (both in [`ops`]). The driver runs it over the
//! ports [`os`] opens, and [`ops::service`] puts the layers together at start-up.
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
