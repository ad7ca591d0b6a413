//! # metronome-io
//!
//! Everything around the core that touches the operating system. Today: the real monotonic
//! [`MonotonicClock`]. The packet I/O backends (AF_PACKET TPACKET_V3 rings, an in-memory port) will
//! live here too, behind one I/O trait, so the core stays free of I/O (STYLE.md §1).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod clock;

pub use clock::MonotonicClock;
