//! # metronome-lab
//!
//! The lab behind `metronome lab <experiment>`: declarative plans (CONTRIBUTING.md §15; [`plan`],
//! expanded into [`Point`]s by [`sweep`], embedded by [`plans`]) run through the registered
//! experiment functions ([`experiments`]) by the [`runner`], which writes `rows.csv`, `rows.json`
//! and SVG plots ([`output`], [`plot`]) with the paper's numbers beside ours.
//!
//! ```
//! use metronome_lab::{experiments, plans, runner};
//!
//! let plan = plans::load("wheel-granularity")?;
//! let experiment = experiments::lookup(&plan.experiment.name)?;
//! assert!(plan.points(true)?.len() < plan.points(false)?.len());
//! # let _ = (experiment, runner::RunOptions::default());
//! # Ok::<(), metronome_lab::LabError>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod error;
pub mod experiments;
pub mod output;
pub mod plan;
pub mod plans;
pub mod plot;
pub mod point;
pub mod runner;
pub mod sweep;

pub use error::LabError;
pub use plan::Plan;
pub use point::{Point, Row};
pub use runner::{run_plan, Progress, Results, RunOptions};
