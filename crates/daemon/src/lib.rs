//! # metronome-daemon
//!
//! The daemon behind `metronome run --config FILE` (issue 4): a shaping bump in the wire between
//! two interfaces. Today this crate holds its configuration; the packet loop joins it later.
//!
//! * [`config`]: the TOML configuration, validated at start-up into core types
//!   ([`metronome_core::Rate`], [`metronome_core::TimingWheelConfig`], ...), with errors of the
//!   form `FILE:LINE: FIELD: MESSAGE`, and the plan of what a SIGHUP reload changes.
//! * [`units`]: durations (`500us`) and tc-like byte sizes (`15k`); rates are parsed by the core.
//! * [`silo`]: `--cores N`, per-core shaper silos sharing class limits through the NIC-level
//!   bandwidth allocator (Carousel §5.3).
//!
//! Like the core it reads no clock; unlike the core it may read files ([`config::Config::load`]).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod ack_shaping;
pub mod compare;
pub mod config;
pub mod daemon;
pub mod demo;
pub mod engine;
pub mod flow_table;
pub mod forwarder;
pub mod metrics;
pub mod netns;
pub mod pipeline_bench;
pub mod run;
pub mod silo;
pub mod trafficgen;
pub mod units;

pub use config::{Config, ConfigError};
