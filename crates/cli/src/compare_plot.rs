//! The plots of `metronome compare --plot DIR`: deviation, achieved rate, probe RTT, CPU and the
//! bulk connections' Jain's index against the target rate, one line per shaper, drawn by the lab's
//! plotter ([`metronome_lab::plot::write_plots`]) from the plan embedded below
//! (`crates/cli/plots/compare.toml`), whose sweeps only name the flow counts the plots select.
//!
//! The rows come from a comparison just run, or from a saved `--json` document
//! (`metronome compare --replot compare.json --plot DIR`), which needs no privilege.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use metronome_lab::runner::PointRow;
use metronome_lab::{Plan, Results, Row};
use metronome_testbed::compare::Row as CompareRow;

/// The plot plan (never run; see the module docs).
const PLAN: &str = include_str!("../plots/compare.toml");

/// The sweep a row with `flows` connections belongs to (the plan's sweep names).
fn sweep_of(flows: u64) -> String {
    format!("flows-{flows}")
}

/// One comparison row as a lab row, with the derived columns the plots use.
fn lab_row(shaper: &str, target_bps: u64, flows: u64, fields: [f64; 5]) -> PointRow {
    let [achieved_bps, deviation_pct, rtt_p99_us, cpu_pct, jain_bulk] = fields;
    let achieved_pct = if target_bps > 0 {
        100.0 * achieved_bps / target_bps as f64
    } else {
        f64::NAN
    };
    PointRow {
        point: 0,
        sweep: sweep_of(flows),
        row: Row::new()
            .with("shaper", shaper)
            .with("target_bps", target_bps)
            .with("target_mbps", target_bps as f64 / 1e6)
            .with("flows", flows)
            .with("achieved_bps", achieved_bps)
            .with("achieved_pct", achieved_pct)
            .with("deviation_pct", deviation_pct)
            .with("rtt_p99_us", rtt_p99_us)
            .with("cpu_pct", cpu_pct)
            .with("jain_bulk", jain_bulk),
    }
}

/// The lab rows of a comparison just run.
pub fn rows_of(rows: &[&CompareRow]) -> Vec<PointRow> {
    rows.iter()
        .map(|r| {
            lab_row(
                r.shaper.name(),
                r.target_bps,
                r.flows as u64,
                [
                    r.achieved_bps,
                    r.deviation_pct,
                    r.rtt_p99_us.map_or(f64::NAN, |us| us as f64),
                    r.cpu_pct,
                    r.jain_bulk.unwrap_or(f64::NAN),
                ],
            )
        })
        .collect()
}

/// The lab rows of a saved `--json` document (`{"rows": [...]}`); a field that is missing or of
/// the wrong type is an error naming the row and the field. An `rtt_p99_us` of `null` (no
/// answer) is drawn as a missing point.
pub fn rows_from_json(text: &str) -> anyhow::Result<Vec<PointRow>> {
    let doc: serde_json::Value = serde_json::from_str(text).context("not a JSON document")?;
    let Some(rows) = doc.get("rows").and_then(serde_json::Value::as_array) else {
        bail!("no \"rows\" array (expected the output of `metronome compare --json`)");
    };
    rows.iter()
        .enumerate()
        .map(|(i, r)| {
            let num = |f: &str| {
                r.get(f)
                    .and_then(serde_json::Value::as_f64)
                    .with_context(|| format!("rows[{i}].{f}: missing or not a number"))
            };
            let int = |f: &str| {
                r.get(f)
                    .and_then(serde_json::Value::as_u64)
                    .with_context(|| format!("rows[{i}].{f}: missing or not a whole number"))
            };
            // `null`: the probe got no answer; the point has no RTT.
            let rtt = |f: &str| match r.get(f) {
                Some(serde_json::Value::Null) => Ok(f64::NAN),
                _ => num(f),
            };
            // `null` or missing (a document of an earlier run): no fairness figure.
            let jain = match r.get("jain_bulk") {
                None | Some(serde_json::Value::Null) => f64::NAN,
                Some(_) => num("jain_bulk")?,
            };
            let shaper = r
                .get("shaper")
                .and_then(serde_json::Value::as_str)
                .with_context(|| format!("rows[{i}].shaper: missing or not a string"))?;
            Ok(lab_row(
                shaper,
                int("target_bps")?,
                int("flows")?,
                [
                    num("achieved_bps")?,
                    num("deviation_pct")?,
                    rtt("rtt_p99_us")?,
                    num("cpu_pct")?,
                    jain,
                ],
            ))
        })
        .collect()
}

/// Draws the plots of `rows` into `dir` (created if missing) and returns the files written.
pub fn write(rows: Vec<PointRow>, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let plan = Plan::parse(PLAN, "embedded:crates/cli/plots/compare.toml")?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let results = Results {
        experiment: plan.experiment.name.clone(),
        quick: false,
        points: rows.len(),
        rows,
    };
    Ok(metronome_lab::plot::write_plots(&plan, &results, dir)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = r#"{"rows": [
        {"shaper": "metronome", "target_bps": 100000000, "flows": 16, "achieved_bps": 99.0e6,
         "deviation_pct": 0.5, "rtt_p99_us": 900, "cpu_pct": 40.0},
        {"shaper": "htb", "target_bps": 100000000, "flows": 16, "achieved_bps": 97.0e6,
         "deviation_pct": 3.0, "rtt_p99_us": 4000, "cpu_pct": 30.0},
        {"shaper": "metronome", "target_bps": 1000000000, "flows": 16, "achieved_bps": 0.99e9,
         "deviation_pct": 1.1, "rtt_p99_us": 800, "cpu_pct": 45.0},
        {"shaper": "htb", "target_bps": 1000000000, "flows": 16, "achieved_bps": 0.9e9,
         "deviation_pct": 10.0, "rtt_p99_us": 3000, "cpu_pct": 35.0}
    ]}"#;

    #[test]
    fn the_embedded_plan_parses() {
        Plan::parse(PLAN, "test").unwrap();
    }

    #[test]
    fn saved_rows_become_lab_rows_with_derived_columns() {
        let rows = rows_from_json(DOC).unwrap();
        assert_eq!(rows.len(), 4);
        assert_eq!(rows[0].sweep, "flows-16");
        let pct = rows[3].row.get("achieved_pct").unwrap().as_f64().unwrap();
        assert!((pct - 90.0).abs() < 1e-9, "{pct}");
        assert_eq!(
            rows[2].row.get("target_mbps").unwrap().as_f64(),
            Some(1000.0)
        );
    }

    #[test]
    fn a_bad_document_names_the_row_and_field() {
        let e = rows_from_json(r#"{"rows": [{"shaper": "htb", "target_bps": 1}]}"#).unwrap_err();
        assert!(e.to_string().contains("rows[0].flows"), "{e}");
        let e = rows_from_json("[]").unwrap_err();
        assert!(e.to_string().contains("rows"), "{e}");
    }

    #[test]
    fn a_probe_without_answers_is_a_missing_rtt_not_zero() {
        let doc = DOC.replace(r#""rtt_p99_us": 4000"#, r#""rtt_p99_us": null"#);
        let rows = rows_from_json(&doc).unwrap();
        let rtt = rows[1].row.get("rtt_p99_us").unwrap().as_f64();
        assert!(rtt.is_none_or(f64::is_nan), "{rtt:?}");
        let dir = std::env::temp_dir().join(format!(
            "metronome-compare-plot-null-{}",
            std::process::id()
        ));
        let written = write(rows, &dir).unwrap();
        assert!(!written.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn plots_are_written_for_the_flow_counts_present() {
        let dir =
            std::env::temp_dir().join(format!("metronome-compare-plot-{}", std::process::id()));
        let written = write(rows_from_json(DOC).unwrap(), &dir).unwrap();
        let names: Vec<_> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert!(
            names.contains(&"deviation_16_flows.svg".to_string()),
            "{names:?}"
        );
        assert!(
            !names.contains(&"deviation_1_flow.svg".to_string()),
            "{names:?}"
        );
        let svg = std::fs::read_to_string(dir.join("deviation_16_flows.svg")).unwrap();
        assert!(svg.contains("metronome") && svg.contains("htb"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
