//! What a run leaves behind: `rows.csv`, `rows.json` and the plots in the output directory, the
//! `--json` document, and the table on stdout with the paper's reference rows beside ours.
//!
//! The JSON document is `{"experiment": "<name>", "rows": [{...}, ...]}`; each row's keys are
//! columns of the plan's `[columns]`, in that order. The CSV has one column per documented column
//! that some row sets, in the same order; a row without a value leaves its cell empty.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use crate::error::LabError;
use crate::plan::Plan;
use crate::point::{toml_to_json, Row};
use crate::runner::Results;

/// File name of the CSV in the output directory.
pub const CSV_FILE: &str = "rows.csv";
/// File name of the JSON document in the output directory.
pub const JSON_FILE: &str = "rows.json";

/// The `--json` document (also written to `rows.json`): serialise it with `serde_json`. A struct
/// rather than a `serde_json::Value`, so each row keeps its column order.
#[derive(Debug, Serialize)]
pub struct JsonDocument<'a> {
    /// The experiment's name.
    pub experiment: &'a str,
    /// The rows, in point order.
    pub rows: Vec<&'a Row>,
}

/// The `--json` document of `results`.
pub fn json_document(results: &Results) -> JsonDocument<'_> {
    JsonDocument {
        experiment: &results.experiment,
        rows: results.rows().collect(),
    }
}

/// Writes `rows.csv`, `rows.json` and the plan's plots into `dir` (created if needed) and returns
/// the paths written.
pub fn write_all(plan: &Plan, results: &Results, dir: &Path) -> Result<Vec<PathBuf>, LabError> {
    std::fs::create_dir_all(dir).map_err(|source| LabError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let csv = dir.join(CSV_FILE);
    write_csv(plan, results, &csv)?;
    let json = dir.join(JSON_FILE);
    let text = serde_json::to_string_pretty(&json_document(results)).map_err(|e| LabError::Io {
        path: json.clone(),
        source: e.into(),
    })?;
    std::fs::write(&json, text + "\n").map_err(|source| LabError::Io {
        path: json.clone(),
        source,
    })?;
    let mut written = vec![csv, json];
    written.extend(crate::plot::write_plots(plan, results, dir)?);
    Ok(written)
}

/// The documented columns that at least one row sets, in `[columns]` order.
pub fn present_columns<'a>(plan: &'a Plan, results: &Results) -> Vec<&'a str> {
    plan.column_names()
        .filter(|c| results.rows().any(|r| r.get(c).is_some()))
        .collect()
}

/// Writes the rows as CSV to `path`.
pub fn write_csv(plan: &Plan, results: &Results, path: &Path) -> Result<(), LabError> {
    let error = |e: csv::Error| LabError::Csv {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let columns = present_columns(plan, results);
    let mut writer = csv::Writer::from_path(path).map_err(error)?;
    writer.write_record(&columns).map_err(error)?;
    for row in results.rows() {
        writer
            .write_record(columns.iter().map(|c| cell(row.get(c))))
            .map_err(error)?;
    }
    writer.flush().map_err(|source| LabError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// A value as CSV or table text: strings bare, numbers as JSON writes them, nothing as empty.
fn cell(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// A value for the table: floats with at most 4 decimals, the rest as in the CSV.
fn table_cell(value: Option<&Value>) -> String {
    match value {
        Some(Value::Number(n)) if n.is_f64() => {
            let f = n.as_f64().unwrap_or(f64::NAN);
            if f.fract() == 0.0 && f.abs() < 1e15 {
                format!("{f:.0}")
            } else {
                let text = format!("{f:.4}");
                text.trim_end_matches('0').trim_end_matches('.').to_string()
            }
        }
        other => cell(other),
    }
}

/// Prints the table of our rows, then each `[[paper]]` row with the rows of ours that match it on
/// the plan's `keys`.
pub fn print_table(plan: &Plan, results: &Results, out: &mut impl Write) -> io::Result<()> {
    let info = &plan.experiment;
    writeln!(out, "{}: {}", info.name, info.title)?;
    if !info.paper.is_empty() {
        writeln!(out, "reproduces {}", info.paper)?;
    }
    if results.quick {
        writeln!(
            out,
            "--quick: shorter runs and fewer points than the full plan"
        )?;
    }
    writeln!(out)?;
    let columns = present_columns(plan, results);
    let cells: Vec<Vec<String>> = results
        .rows()
        .map(|r| columns.iter().map(|c| table_cell(r.get(c))).collect())
        .collect();
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            cells
                .iter()
                .map(|r| r[i].len())
                .chain([c.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut sweep = None;
    for (line, origin) in cells.iter().zip(&results.rows) {
        if sweep != Some(&origin.sweep) {
            sweep = Some(&origin.sweep);
            writeln!(out, "sweep {}", origin.sweep)?;
            let header: Vec<String> = columns
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:>w$}"))
                .collect();
            writeln!(out, "  {}", header.join("  "))?;
        }
        let line: Vec<String> = line
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:>w$}"))
            .collect();
        writeln!(out, "  {}", line.join("  "))?;
    }
    if results.rows.is_empty() {
        writeln!(out, "(no rows)")?;
    }
    print_paper(plan, results, out)
}

/// The `[[paper]]` rows, each followed by our matching rows' values of the same columns.
fn print_paper(plan: &Plan, results: &Results, out: &mut impl Write) -> io::Result<()> {
    if plan.paper.is_empty() {
        return Ok(());
    }
    let source = if plan.experiment.paper.is_empty() {
        "the paper"
    } else {
        &plan.experiment.paper
    };
    writeln!(out, "\npaper ({source}) beside ours")?;
    let keys = &plan.experiment.keys;
    for reference in &plan.paper {
        let is_key = |k: &str| keys.iter().any(|key| key == k);
        let matching: Vec<(&String, Value)> = reference
            .iter()
            .filter(|(k, _)| is_key(k))
            .map(|(k, v)| (k, toml_to_json(v)))
            .collect();
        let values: Vec<&String> = reference
            .keys()
            .filter(|k| !is_key(k) && *k != "note")
            .collect();
        let described = |pairs: &mut dyn Iterator<Item = (&str, String)>| {
            pairs
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let at = described(
            &mut matching
                .iter()
                .map(|(k, v)| (k.as_str(), table_cell(Some(v)))),
        );
        let theirs = described(&mut values.iter().map(|k| {
            (
                k.as_str(),
                table_cell(reference.get(*k).map(toml_to_json).as_ref()),
            )
        }));
        write!(out, "  paper {at}:")?;
        if !theirs.is_empty() {
            write!(out, " {theirs}")?;
        }
        match reference.get("note").and_then(toml::Value::as_str) {
            Some(note) if theirs.is_empty() => writeln!(out, " {note}")?,
            Some(note) => writeln!(out, " ({note})")?,
            None => writeln!(out)?,
        }
        let ours: Vec<(&str, &Row)> = results
            .rows
            .iter()
            .filter(|r| {
                matching
                    .iter()
                    .all(|(k, v)| r.row.get(k).is_some_and(|o| same(o, v)))
            })
            .map(|r| (r.sweep.as_str(), &r.row))
            .collect();
        if ours.is_empty() {
            writeln!(out, "    ours: no row at these keys")?;
        }
        for (sweep, row) in ours {
            let other_keys = keys
                .iter()
                .filter(|k| !reference.contains_key(*k))
                .map(|k| (k.as_str(), table_cell(row.get(k))));
            let shown: Vec<&str> = if values.is_empty() {
                plan.column_names().filter(|c| !is_key(c)).collect()
            } else {
                values.iter().map(|k| k.as_str()).collect()
            };
            let mut pairs =
                other_keys.chain(shown.into_iter().map(|c| (c, table_cell(row.get(c)))));
            writeln!(out, "    ours  {} (sweep {sweep})", described(&mut pairs))?;
        }
    }
    Ok(())
}

/// Equal as values, numbers compared as numbers (`5000` matches `5000.0`).
fn same(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}
