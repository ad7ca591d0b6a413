//! The one error type of the lab: every way a plan, a point, an experiment or an output can fail,
//! each naming what it is about (the plan field, the parameter, the column, the file), so that
//! `metronome lab` reports a bad input in one line instead of panicking.
//!
//! [`LabError::is_bad_input`] tells the command line which errors are the user's input (an
//! unknown experiment, a malformed plan, a parameter of the wrong type: exit status 2) and which
//! happened while running or writing (exit status 1).

use std::io;
use std::path::PathBuf;

/// Why the lab could not run a plan or write its results.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// No embedded plan, or no registered experiment function, has this name.
    #[error("unknown experiment {name:?}; known experiments: {}", known.join(", "))]
    UnknownExperiment {
        /// The name asked for.
        name: String,
        /// The names that exist.
        known: Vec<String>,
    },
    /// The plan is not valid TOML or does not have the plan's shape (a missing section, a field
    /// of the wrong type, an unknown field). `message` is the `toml` crate's report, with the line
    /// and column where it gives them.
    #[error("plan {plan}: {message}")]
    PlanSyntax {
        /// Where the plan came from (a file path or `embedded:<name>`).
        plan: String,
        /// The parser's message.
        message: String,
    },
    /// The plan parses but one of its fields is inconsistent (a plot naming an undocumented
    /// column, a zipped sweep of unequal lengths, a quick override of a sweep that does not exist).
    #[error("plan {plan}: field `{field}`: {message}")]
    PlanField {
        /// Where the plan came from.
        plan: String,
        /// The field, as a dotted path (`sweep[1].params.flows`, `plot[0].y`).
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// A point lacks a parameter the experiment needs, or has it with the wrong type or range.
    #[error("point {point}: parameter `{name}`: {message}")]
    Param {
        /// Index of the point in the expanded plan.
        point: usize,
        /// The parameter.
        name: String,
        /// What is wrong with it.
        message: String,
    },
    /// An experiment returned a row with a column the plan's `[columns]` does not document.
    #[error(
        "experiment {experiment}: column `{column}` is not documented in the plan's [columns]"
    )]
    UndocumentedColumn {
        /// The experiment.
        experiment: String,
        /// The undocumented column.
        column: String,
    },
    /// An experiment failed on a point for a reason of its own.
    #[error("point {point}: {message}")]
    Experiment {
        /// Index of the point.
        point: usize,
        /// The experiment's message.
        message: String,
    },
    /// Reading a plan or writing an output failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the file system said.
        source: io::Error,
    },
    /// Writing the CSV file failed.
    #[error("{}: {message}", path.display())]
    Csv {
        /// The file.
        path: PathBuf,
        /// The `csv` crate's message.
        message: String,
    },
    /// A plot could not be drawn.
    #[error("plot {file}: {message}")]
    Plot {
        /// The plot's file name.
        file: String,
        /// What went wrong.
        message: String,
    },
}

impl LabError {
    /// True for errors in the user's input (experiment name, plan, parameters), which the command
    /// line reports with exit status 2; false for failures while running or writing.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            Self::UnknownExperiment { .. }
                | Self::PlanSyntax { .. }
                | Self::PlanField { .. }
                | Self::Param { .. }
        )
    }

    /// A [`LabError::Param`] for `point` and parameter `name`.
    pub fn param(point: usize, name: &str, message: impl Into<String>) -> Self {
        Self::Param {
            point,
            name: name.to_string(),
            message: message.into(),
        }
    }
}
