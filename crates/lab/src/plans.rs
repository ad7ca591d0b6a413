//! The plans of `lab/plans/`, embedded in the binary at build time so that `metronome lab <name>`
//! works from any directory. `--plan FILE` reads a plan from disk instead
//! ([`crate::plan::Plan::from_file`]).
//!
//! Each embedded plan's file name is its experiment's name; a test checks that every entry parses
//! and names a registered experiment.

use crate::error::LabError;
use crate::plan::Plan;

/// One embedded plan: the experiment name and the TOML text of `lab/plans/<name>.toml`.
#[derive(Clone, Copy, Debug)]
pub struct EmbeddedPlan {
    /// The experiment name, which is also the file's stem.
    pub name: &'static str,
    /// The plan's text.
    pub text: &'static str,
}

/// `EmbeddedPlan`s of `lab/plans/<name>.toml` for each name given.
macro_rules! embedded {
    ($($name:literal),* $(,)?) => {
        &[$(EmbeddedPlan {
            name: $name,
            text: include_str!(concat!("../../../lab/plans/", $name, ".toml")),
        }),*]
    };
}

/// Every plan of `lab/plans/`, in the order `metronome lab --list` shows them.
pub const EMBEDDED: &[EmbeddedPlan] = embedded![
    "wheel-granularity",
    "carousel-backpressure",
    "carousel-conformance",
    "incast",
    "mqecn",
    "zd",
    "nicpic",
    "nba",
    "fairq",
    "cluster",
];

/// The embedded plan called `name`, parsed, or [`LabError::UnknownExperiment`] listing the
/// embedded names.
pub fn load(name: &str) -> Result<Plan, LabError> {
    let plan =
        EMBEDDED
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| LabError::UnknownExperiment {
                name: name.to_string(),
                known: names().map(str::to_string).collect(),
            })?;
    Plan::parse(plan.text, &format!("embedded:lab/plans/{name}.toml"))
}

/// The embedded plans' names.
pub fn names() -> impl Iterator<Item = &'static str> {
    EMBEDDED.iter().map(|p| p.name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments;

    #[test]
    fn every_embedded_plan_parses_and_has_an_experiment() {
        for embedded in EMBEDDED {
            let plan = load(embedded.name).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                plan.experiment.name, embedded.name,
                "file name and [experiment] name differ"
            );
            assert!(
                experiments::find(embedded.name).is_some(),
                "{} has no experiment",
                embedded.name
            );
            assert!(!plan.points(false).expect("full points").is_empty());
            assert!(!plan.points(true).expect("quick points").is_empty());
            assert!(!plan.plots.is_empty(), "{} draws no plot", embedded.name);
        }
    }

    #[test]
    fn every_plan_file_on_disk_is_embedded() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../lab/plans");
        for entry in std::fs::read_dir(dir).expect("lab/plans exists") {
            let path = entry.expect("directory entry").path();
            if path.extension().and_then(|e| e.to_str()) != Some("toml") {
                continue;
            }
            let stem = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default();
            assert!(
                names().any(|n| n == stem),
                "{} is not in plans::EMBEDDED",
                path.display()
            );
        }
    }

    #[test]
    fn unknown_plan_is_bad_input() {
        let e = load("nope").unwrap_err();
        assert!(e.is_bad_input());
        assert!(e.to_string().contains("wheel-granularity"));
    }
}
