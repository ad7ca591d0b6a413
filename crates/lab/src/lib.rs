//! # metronome-lab
//!
//! The lab behind `metronome lab <experiment>`: experiments are declarative plans
//! (CONTRIBUTING.md §15, after s2n-quic-sim's `plans/`), TOML files under `lab/plans/` that name
//! an experiment function, document its output columns, fix base parameters, sweep others, give
//! the paper's reference values and the plots to draw. The lab expands a plan into points, runs
//! them (two at a time), and writes `rows.csv`, `rows.json` and SVG plots, with a table that puts
//! the paper's numbers beside ours.
//!
//! * [`plan`]: the plan format and its checks; [`sweep`]: expansion into [`Point`]s.
//! * [`plans`]: the plans embedded in the binary.
//! * [`experiments`]: the registry of experiment functions (`fn(&Point) -> Result<Vec<Row>,
//!   LabError>`).
//! * [`runner`]: runs a plan, with progress on stderr; [`output`] and [`plot`]: what it writes.
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
