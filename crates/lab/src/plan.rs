//! Experiment plans: the TOML files under `lab/plans/` (CONTRIBUTING.md §15, after s2n-quic-sim's
//! `plans/`). [`Plan`] documents the format with an annotated example. Unknown fields are
//! errors, so a typo cannot silently do nothing; parsing reports the `toml` crate's message with
//! line and column ([`LabError::PlanSyntax`]), the consistency checks after it name the field as a
//! dotted path ([`LabError::PlanField`]).

use std::path::Path;

use serde::Deserialize;

use crate::error::LabError;

/// A parsed and checked plan. The format:
///
/// ```toml
/// [experiment]
/// name = "wheel-granularity"            # the registered experiment function it runs
/// title = "Rate conformance vs slot granularity"
/// paper = "Carousel §7.1.3, Fig. 16"
/// description = "..."
/// keys = ["granularity_ns"]             # columns that identify a row; [[paper]] rows match on them
///
/// [columns]                             # every output column -> what it means (required)
/// granularity_ns = "Slot granularity, ns"
/// deviation_pct = "Mean absolute deviation from the target, % of target"
///
/// [base]                                # fixed parameters, free-form, handed to the experiment
/// target_bps = 5_000_000_000
///
/// [[sweep]]                             # one series of points; several [[sweep]] = several series
/// name = "granularity"
/// combine = "product"                   # or "zip"; default "product"
/// [sweep.params]                        # parameter -> list of values
/// granularity_ns = [1_000, 2_000, 4_000]
///
/// [quick]                               # what `--quick` changes
/// base = { duration_ms = 300 }
/// sweep.granularity = { granularity_ns = [2_000, 4_000] }
///
/// [[paper]]                             # reference values printed beside ours
/// granularity_ns = 4_000_000
/// deviation_pct = 6.0
/// note = "~300 Mbit/s off 5 Gbit/s"
///
/// [[plot]]
/// file = "deviation.svg"
/// title = "Deviation vs granularity"
/// x = "granularity_ns"
/// y = ["deviation_pct"]                 # one column or a list
/// series = "shaper"                     # optional: one line per value of this column
/// sweep = "granularity"                 # optional: only the rows of this sweep
/// log_x = true
/// ```
///
/// A sweep's `combine` says how its parameters vary together: `"product"` takes every
/// combination (the first parameter varies slowest, the last fastest); `"zip"` takes the i-th value
/// of every parameter together and requires lists of equal length. A plan without `[[sweep]]` runs
/// one point, `[base]` alone. Unknown fields are errors, so a typo cannot silently do nothing.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// `[experiment]`: what the plan runs and reproduces.
    pub experiment: ExperimentInfo,
    /// `[columns]`: every output column and its description, in output order.
    pub columns: toml::Table,
    /// `[base]`: fixed parameters.
    #[serde(default)]
    pub base: toml::Table,
    /// `[[sweep]]`: the series of points.
    #[serde(default, rename = "sweep")]
    pub sweeps: Vec<Sweep>,
    /// `[quick]`: the overrides `--quick` applies.
    #[serde(default)]
    pub quick: Quick,
    /// `[[paper]]`: the paper's reference rows.
    #[serde(default)]
    pub paper: Vec<toml::Table>,
    /// `[[plot]]`: the SVG plots to draw.
    #[serde(default, rename = "plot")]
    pub plots: Vec<PlotSpec>,
    /// Where the plan came from (a path or `embedded:<name>`); set by the loader, not the file.
    #[serde(skip)]
    pub source: String,
}

/// `[experiment]`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentInfo {
    /// Name of the registered experiment function (and of the embedded plan).
    pub name: String,
    /// One-line title, used in the table and as the default plot title.
    pub title: String,
    /// The paper figure or section it reproduces ("Carousel Fig. 16").
    #[serde(default)]
    pub paper: String,
    /// What the experiment models and how to read it.
    #[serde(default)]
    pub description: String,
    /// Columns that identify a row (its inputs); `[[paper]]` rows are matched to ours on these.
    #[serde(default)]
    pub keys: Vec<String>,
}

/// How the parameters of one sweep vary together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Combine {
    /// Every combination; the first parameter varies slowest.
    #[default]
    Product,
    /// The i-th values of all parameters together; the lists must have equal length.
    Zip,
}

/// One `[[sweep]]` entry: a named series of points.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sweep {
    /// Name of the series (plots and `[quick]` refer to it).
    pub name: String,
    /// How the parameters combine.
    #[serde(default)]
    pub combine: Combine,
    /// Parameter -> list of values.
    pub params: toml::Table,
}

/// `[quick]`: smaller sweeps and shorter runs for `--quick`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quick {
    /// Parameters laid over `[base]`.
    #[serde(default)]
    pub base: toml::Table,
    /// Sweep name -> parameter -> list of values replacing that parameter's list.
    #[serde(default)]
    pub sweep: toml::Table,
}

/// One `[[plot]]` entry.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlotSpec {
    /// File name inside the output directory (`*.svg`, no directory part).
    pub file: String,
    /// Title; the experiment's title when empty.
    #[serde(default)]
    pub title: String,
    /// Column on the x axis.
    pub x: String,
    /// Column(s) on the y axis: one line per column and series value.
    pub y: Columns,
    /// Column whose values split the rows into lines.
    #[serde(default)]
    pub series: Option<String>,
    /// Only the rows of this sweep.
    #[serde(default)]
    pub sweep: Option<String>,
    /// Logarithmic x axis.
    #[serde(default)]
    pub log_x: bool,
    /// Logarithmic y axis.
    #[serde(default)]
    pub log_y: bool,
    /// x axis description; the column's description when absent.
    #[serde(default)]
    pub x_label: Option<String>,
    /// y axis description; the first y column's description when absent.
    #[serde(default)]
    pub y_label: Option<String>,
}

/// One column name or a list of them.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Columns {
    /// A single column.
    One(String),
    /// Several columns.
    Many(Vec<String>),
}

impl Columns {
    /// The names, in order.
    pub fn names(&self) -> Vec<&str> {
        match self {
            Self::One(c) => vec![c.as_str()],
            Self::Many(cs) => cs.iter().map(String::as_str).collect(),
        }
    }
}

impl Plan {
    /// Parses and checks plan text; `source` names it in errors.
    pub fn parse(text: &str, source: &str) -> Result<Self, LabError> {
        let mut plan: Plan = toml::from_str(text).map_err(|e| LabError::PlanSyntax {
            plan: source.to_string(),
            message: e.to_string().trim_end().to_string(),
        })?;
        plan.source = source.to_string();
        plan.check()?;
        Ok(plan)
    }

    /// Reads, parses and checks the plan file at `path`.
    pub fn from_file(path: &Path) -> Result<Self, LabError> {
        let text = std::fs::read_to_string(path).map_err(|source| LabError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// The column names, in the plan's order.
    pub fn column_names(&self) -> impl Iterator<Item = &str> {
        self.columns.keys().map(String::as_str)
    }

    /// The description of `column`, if documented.
    pub fn column_description(&self, column: &str) -> Option<&str> {
        self.columns.get(column).and_then(toml::Value::as_str)
    }

    /// A [`LabError::PlanField`] about `field` of this plan.
    pub fn field_error(&self, field: impl Into<String>, message: impl Into<String>) -> LabError {
        LabError::PlanField {
            plan: self.source.clone(),
            field: field.into(),
            message: message.into(),
        }
    }

    /// The consistency checks that serde's shape cannot express.
    fn check(&self) -> Result<(), LabError> {
        if self.experiment.name.trim().is_empty() {
            return Err(self.field_error("experiment.name", "must not be empty"));
        }
        if self.columns.is_empty() {
            return Err(self.field_error("columns", "must document at least one column"));
        }
        for (name, description) in &self.columns {
            if !description.is_str() {
                return Err(self.field_error(
                    format!("columns.{name}"),
                    format!(
                        "expected a description string, found {}",
                        description.type_str()
                    ),
                ));
            }
        }
        for (i, key) in self.experiment.keys.iter().enumerate() {
            self.documented(&format!("experiment.keys[{i}]"), key)?;
        }
        for (i, sweep) in self.sweeps.iter().enumerate() {
            if self.sweeps[..i].iter().any(|s| s.name == sweep.name) {
                return Err(self.field_error(
                    format!("sweep[{i}].name"),
                    format!("sweep name {:?} is used twice", sweep.name),
                ));
            }
            self.check_sweep_params(&format!("sweep[{i}]"), sweep.combine, &sweep.params)?;
        }
        self.check_quick()?;
        for (i, row) in self.paper.iter().enumerate() {
            for key in row.keys().filter(|k| *k != "note") {
                self.documented(&format!("paper[{i}].{key}"), key)?;
            }
        }
        self.check_plots()
    }

    /// `column` must be documented in `[columns]`; `field` names where it was used.
    fn documented(&self, field: &str, column: &str) -> Result<(), LabError> {
        if self.columns.contains_key(column) {
            Ok(())
        } else {
            Err(self.field_error(
                field,
                format!("column {column:?} is not documented in [columns]"),
            ))
        }
    }

    /// Every parameter is a non-empty list; zipped lists have equal lengths.
    pub(crate) fn check_sweep_params(
        &self,
        field: &str,
        combine: Combine,
        params: &toml::Table,
    ) -> Result<(), LabError> {
        if params.is_empty() {
            return Err(self.field_error(
                format!("{field}.params"),
                "must name at least one parameter",
            ));
        }
        let mut len = None;
        for (name, values) in params {
            let field = format!("{field}.params.{name}");
            let n = match values {
                toml::Value::Array(a) if !a.is_empty() => a.len(),
                toml::Value::Array(_) => {
                    return Err(self.field_error(field, "the list of values is empty"))
                }
                other => {
                    return Err(self.field_error(
                        field,
                        format!("expected a list of values, found {}", other.type_str()),
                    ))
                }
            };
            if combine == Combine::Zip && *len.get_or_insert(n) != n {
                return Err(self.field_error(
                    field,
                    format!("combine = \"zip\" needs lists of equal length: {n} values, the first list has {}", len.unwrap_or(n)),
                ));
            }
        }
        Ok(())
    }

    fn check_quick(&self) -> Result<(), LabError> {
        for (name, overrides) in &self.quick.sweep {
            let field = format!("quick.sweep.{name}");
            let Some(sweep) = self.sweeps.iter().find(|s| &s.name == name) else {
                return Err(
                    self.field_error(field, format!("there is no [[sweep]] named {name:?}"))
                );
            };
            let Some(overrides) = overrides.as_table() else {
                return Err(self.field_error(field, "expected a table of parameter lists"));
            };
            for param in overrides.keys() {
                if !sweep.params.contains_key(param) {
                    return Err(self.field_error(
                        format!("{field}.{param}"),
                        format!("sweep {name:?} has no parameter {param:?}"),
                    ));
                }
            }
            self.check_sweep_params(&field, Combine::Product, overrides)?;
        }
        Ok(())
    }

    fn check_plots(&self) -> Result<(), LabError> {
        for (i, plot) in self.plots.iter().enumerate() {
            let field = |f: &str| format!("plot[{i}].{f}");
            let bare = Path::new(&plot.file).file_name().and_then(|f| f.to_str());
            if bare != Some(plot.file.as_str()) || !plot.file.ends_with(".svg") {
                return Err(
                    self.field_error(field("file"), "must be a bare file name ending in .svg")
                );
            }
            if self.plots[..i].iter().any(|p| p.file == plot.file) {
                return Err(
                    self.field_error(field("file"), format!("{:?} is used twice", plot.file))
                );
            }
            self.documented(&field("x"), &plot.x)?;
            if plot.y.names().is_empty() {
                return Err(self.field_error(field("y"), "must name at least one column"));
            }
            for y in plot.y.names() {
                self.documented(&field("y"), y)?;
            }
            if let Some(series) = &plot.series {
                self.documented(&field("series"), series)?;
            }
            if let Some(sweep) = &plot.sweep {
                if !self.sweeps.iter().any(|s| &s.name == sweep) {
                    return Err(self.field_error(
                        field("sweep"),
                        format!("there is no [[sweep]] named {sweep:?}"),
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[experiment]
name = "t"
title = "T"
keys = ["x"]

[columns]
x = "X"
y = "Y"

[[sweep]]
name = "s"
[sweep.params]
x = [1, 2]

[[plot]]
file = "y.svg"
x = "x"
y = "y"
"#;

    fn error(text: &str) -> String {
        let e = Plan::parse(text, "test.toml").unwrap_err();
        assert!(e.is_bad_input(), "{e}");
        e.to_string()
    }

    #[test]
    fn good_plan_parses_in_order() {
        let plan = Plan::parse(GOOD, "test.toml").expect("plan parses");
        assert_eq!(plan.column_names().collect::<Vec<_>>(), ["x", "y"]);
        assert_eq!(plan.column_description("y"), Some("Y"));
        assert_eq!(plan.sweeps[0].combine, Combine::Product);
        assert_eq!(plan.plots[0].y.names(), ["y"]);
        assert_eq!(plan.source, "test.toml");
    }

    #[test]
    fn syntax_error_gives_the_line() {
        let e = error(&GOOD.replace("x = [1, 2]", "x = [1, 2"));
        assert!(e.contains("test.toml") && e.contains("line 16"), "{e}");
    }

    #[test]
    fn missing_section_is_named() {
        let e = error(&GOOD.replace("[columns]\nx = \"X\"\ny = \"Y\"\n", ""));
        assert!(e.contains("columns"), "{e}");
    }

    #[test]
    fn wrong_type_is_named_with_its_line() {
        let e = error(&GOOD.replace("title = \"T\"", "title = 3"));
        assert!(e.contains("title") && e.contains("line 4"), "{e}");
        let e = error(&GOOD.replace("x = [1, 2]", "x = 1"));
        assert!(e.contains("sweep[0].params.x") && e.contains("list"), "{e}");
        let e = error(&GOOD.replace("y = \"Y\"", "y = 2"));
        assert!(e.contains("columns.y"), "{e}");
    }

    #[test]
    fn unknown_field_is_named() {
        let e = error(&GOOD.replace("file = \"y.svg\"", "file = \"y.svg\"\nlogx = true"));
        assert!(e.contains("logx"), "{e}");
    }

    #[test]
    fn undocumented_columns_are_named() {
        let e = error(&GOOD.replace("y = \"y\"", "y = [\"y\", \"z\"]"));
        assert!(e.contains("plot[0].y") && e.contains("\"z\""), "{e}");
        let e = error(&format!("{GOOD}\n[[paper]]\nw = 1\nnote = \"n\"\n"));
        assert!(e.contains("paper[0].w"), "{e}");
        let e = error(&GOOD.replace("keys = [\"x\"]", "keys = [\"k\"]"));
        assert!(e.contains("experiment.keys[0]"), "{e}");
    }

    #[test]
    fn quick_must_name_an_existing_sweep_and_parameter() {
        let e = error(&format!("{GOOD}\n[quick]\nsweep.other = {{ x = [1] }}\n"));
        assert!(e.contains("quick.sweep.other"), "{e}");
        let e = error(&format!("{GOOD}\n[quick]\nsweep.s = {{ q = [1] }}\n"));
        assert!(e.contains("quick.sweep.s.q"), "{e}");
    }

    #[test]
    fn plot_file_must_be_a_bare_svg_name() {
        let e = error(&GOOD.replace("file = \"y.svg\"", "file = \"../y.svg\""));
        assert!(e.contains("plot[0].file"), "{e}");
    }
}
