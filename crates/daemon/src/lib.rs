//! # metronome-daemon
//!
//! The daemon behind `metronome run --config FILE [--cores N]`: a shaping bump in the wire
//! between two interfaces. Its entry point is [`service::run_daemon`].
//!
//! * [`service`]: `metronome run`: configuration, logging, signals, metrics endpoint, then the
//!   single loop ([`service::run_with`]) or the silos; the errors and exit codes a user sees.
//! * [`config`]: the TOML configuration, validated at start-up into core types
//!   ([`metronome_core::Rate`], [`metronome_core::TimingWheelConfig`], ...), with errors of the
//!   form `FILE:LINE: FIELD: MESSAGE`, and the plan of what a SIGHUP reload changes.
//! * [`units`]: durations (`500us`) and tc-like byte sizes (`15k`); rates are parsed by the core.
//! * [`engine`]: the per-packet pipeline without I/O: parse, classify, timestamp, timing wheel,
//!   release, ECN backpressure ([`flow_table`] holds the per-flow pacing state, [`ack_shaping`]
//!   the reverse direction's TCP ACK shaping, [`flow_seed`] the secret keying both).
//! * [`run`]: the loop that moves frames between two ports through the engine, with a
//!   per-iteration [`run::LoopHook`].
//! * [`link`]: a port's link going down and coming back is an event the loop waits out.
//! * [`notify`]: systemd-style readiness, reload and stop notifications (`NOTIFY_SOCKET`).
//! * [`ports`]: opening the AF_PACKET ports (fanned out per silo) and sizing the frame pool.
//! * [`privileges`]: once the ports are open, only CAP_NET_RAW and CAP_NET_ADMIN are kept, and
//!   the daemon switches to `[daemon] user`.
//! * [`reload`]: SIGHUP reloads, one path for the single loop and the silos.
//! * [`silo`]: `--cores N`, per-core shaper silos sharing class limits through the NIC-level
//!   bandwidth allocator (Carousel §5.3).
//! * [`unclassified`]: what happens to malformed and non-IP frames (`[daemon] malformed`,
//!   `non_ip`).
//! * [`metrics`]: the Prometheus counters, gauges and histograms, their HTTP endpoint and
//!   `metronome stats`.
//!
//! Topologies, traffic generation, `metronome demo` and `metronome compare` live in
//! `metronome-testbed`, the pipeline benchmark in `metronome-bench`; this crate depends on
//! neither. Like the core, the engine reads no clock: the loop passes `now`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod ack_shaping;
pub mod carrier;
pub mod config;
pub mod engine;
pub mod flow_seed;
pub mod flow_table;
pub mod metrics;
pub mod notify;
pub mod ports;
pub mod privileges;
pub mod refused;
pub mod reload;
pub mod run;
pub mod service;
pub mod silo;
pub mod unclassified;
pub mod units;

pub use config::{Config, ConfigError};
