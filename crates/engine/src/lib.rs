//! # metronome-engine
//!
//! The per-packet shaping pipeline, without I/O: frames come in as pool slot ids and leave as
//! slot ids to send; `now` is an argument (CONTRIBUTING.md §1), so every test drives it with
//! in-memory ports and a manual clock. It is configured by a plain [`config::EngineConfig`] and
//! counts into plain values that a [`stats::Telemetry`] collects; it depends on no runtime,
//! metrics library or kernel interface (the daemon, `metronome-daemon`, brings those).
//!
//! * [`engine`]: the pipeline: parse, classify, admit, timestamp, timing wheel, release; fair
//!   queues inside a class, the shared `[link]` stage, cutting super-frames.
//! * [`config`]: what it is configured with; [`stats`]: what it counts.
//! * [`flow_table`]: the bounded per-flow pacing state; [`flow_seed`]: the secret keying the
//!   flow hash, drawn at every start.
//! * [`ack_shaping`]: the reverse direction's TCP ACK shaping (Carousel §6).
//! * [`unclassified`]: what happens to malformed and non-IP frames.
//! * [`allocator`]: the silos' NIC-level bandwidth allocator (Carousel §5.3) and the cells a
//!   cluster class's share travels in.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod ack_shaping;
pub mod allocator;
pub mod config;
pub mod engine;
pub mod flow_seed;
pub mod flow_table;
pub mod stats;
pub mod unclassified;
