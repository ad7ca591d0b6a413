//! What drives the data path: the loop that moves frames between two ports through the engine,
//! and what it waits out or is told.
//!
//! * [`run`]: the loop ([`run::run_loop`]): receive, shape, release, send, sleep; its two
//!   ports are two sides of one type.
//! * [`carrier`]: a port's link going down and coming back is an event the loop waits out; the
//!   outside link's outages stop the engine's clock for at most the grace.
//! * [`silo`]: `--cores N`, per-core loops sharing class limits through the NIC-level bandwidth
//!   allocator (Carousel §5.3).
//! * [`reload`]: SIGHUP reloads, one path for the single loop and the silos.
//!
//! Attach mode's run around these loops is start-up's ([`crate::ops::service::attached`]).

pub mod carrier;
pub mod reload;
pub mod run;
pub mod silo;
