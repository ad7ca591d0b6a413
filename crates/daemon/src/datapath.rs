//! The data path: what happens to each packet, without I/O. Frames come in as pool slot ids and
//! leave as slot ids to send; `now` is an argument (CONTRIBUTING.md §1), so every test drives it
//! with in-memory ports and a manual clock.
//!
//! * [`engine`]: the per-packet pipeline: parse, classify, admit, timestamp, timing wheel,
//!   release; fair queues inside a class, the shared `[link]` stage, cutting super-frames.
//! * [`flow_table`]: the bounded per-flow pacing state.
//! * [`flow_seed`]: the secret keying the flow hash, drawn at every start.
//! * [`ack_shaping`]: the reverse direction's TCP ACK shaping (Carousel §6).
//! * [`unclassified`]: what happens to malformed and non-IP frames.

pub mod ack_shaping;
pub mod engine;
pub mod flow_seed;
pub mod flow_table;
pub mod unclassified;
