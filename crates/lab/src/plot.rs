//! SVG line plots of a plan's results, one file per `[[plot]]` entry.
//!
//! A plot takes the rows of its sweep (or all rows), groups them into lines by y column and by the
//! value of its `series` column, sorts each line by x and draws points joined by lines, with a
//! legend. Axes are linear from zero, or logarithmic (base 10) when the spec says `log_x` /
//! `log_y`. The style (bundled font, sizes, palette, axes) is `metronome_plot`'s, the same as
//! `metronome bench`'s plots.
//!
//! Values an axis cannot show are left out visibly, never by a panic: a cell that is not a number,
//! or not positive on a log axis, has no position, and the subtitle says how many were left out.
//! A plot with no drawable point writes no file.

use std::path::{Path, PathBuf};

use metronome_plot::{
    draw_lines, format_number, linear_range, min_max, LineChart, LogSpan, Series, OKABE_ITO,
};

use crate::error::LabError;
use crate::plan::{Plan, PlotSpec};
use crate::runner::Results;

/// One line: its legend label and points sorted by x.
struct Line {
    label: String,
    points: Vec<(f64, f64)>,
}

/// Draws every `[[plot]]` of `plan` into `dir` and returns the paths written.
pub fn write_plots(plan: &Plan, results: &Results, dir: &Path) -> Result<Vec<PathBuf>, LabError> {
    let mut written = Vec::new();
    for spec in &plan.plots {
        let (lines, left_out) = collect(spec, results);
        if lines.is_empty() {
            continue;
        }
        metronome_plot::register_font().map_err(|e| LabError::Plot {
            file: spec.file.clone(),
            message: e.to_string(),
        })?;
        let path = dir.join(&spec.file);
        draw(plan, spec, &lines, left_out, &path).map_err(|e| LabError::Plot {
            file: spec.file.clone(),
            message: e.to_string(),
        })?;
        written.push(path);
    }
    Ok(written)
}

/// Groups the spec's rows into lines; returns them and the count of cells without a position.
fn collect(spec: &PlotSpec, results: &Results) -> (Vec<Line>, usize) {
    let ys = spec.y.names();
    let mut lines: Vec<Line> = Vec::new();
    let mut left_out = 0;
    let rows = results
        .rows
        .iter()
        .filter(|r| spec.sweep.as_ref().is_none_or(|s| *s == r.sweep));
    for origin in rows {
        let row = &origin.row;
        let series = spec.series.as_ref().map(|c| match row.get(c) {
            Some(serde_json::Value::String(s)) => format!("{c}={s}"),
            Some(v) => format!("{c}={v}"),
            None => format!("{c}=?"),
        });
        for y_column in &ys {
            let label = match (&series, ys.len()) {
                (Some(s), 1) => s.clone(),
                (Some(s), _) => format!("{y_column} {s}"),
                (None, _) => y_column.to_string(),
            };
            let x = row.get(&spec.x).and_then(serde_json::Value::as_f64);
            let y = row.get(y_column).and_then(serde_json::Value::as_f64);
            let drawable =
                |v: Option<f64>, log: bool| v.filter(|v| v.is_finite() && (!log || *v > 0.0));
            let (Some(x), Some(y)) = (drawable(x, spec.log_x), drawable(y, spec.log_y)) else {
                left_out += 1;
                continue;
            };
            match lines.iter_mut().find(|l| l.label == label) {
                Some(line) => line.points.push((x, y)),
                None => lines.push(Line {
                    label,
                    points: vec![(x, y)],
                }),
            }
        }
    }
    for line in &mut lines {
        line.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    (lines, left_out)
}

/// Plotters' error, as text (its type is generic over the backend).
type DrawResult = Result<(), String>;

fn draw(plan: &Plan, spec: &PlotSpec, lines: &[Line], left_out: usize, path: &Path) -> DrawResult {
    let points = || lines.iter().flat_map(|l| l.points.iter().copied());
    let (x_lo, x_hi) = min_max(points().map(|p| p.0));
    let (y_lo, y_hi) = min_max(points().map(|p| p.1));
    let title = if spec.title.is_empty() {
        &plan.experiment.title
    } else {
        &spec.title
    };
    let mut subtitle = plan.experiment.paper.clone();
    if left_out > 0 {
        subtitle.push_str(&format!(
            " ({left_out} values without a position not shown)"
        ));
    }
    let x_desc = spec
        .x_label
        .clone()
        .unwrap_or_else(|| axis_desc(plan, &spec.x, spec.log_x));
    let y_desc = spec
        .y_label
        .clone()
        .unwrap_or_else(|| axis_desc(plan, spec.y.names()[0], spec.log_y));
    let chart = LineChart {
        title,
        subtitle: &subtitle,
        x_desc: &x_desc,
        y_desc: &y_desc,
        x_format: &format_number,
        y_format: &format_number,
        x_labels: None,
        light_lines: None,
    };
    let series = lines.iter().enumerate().map(|(i, line)| Series {
        label: &line.label,
        color: OKABE_ITO[i % OKABE_ITO.len()],
        points: &line.points,
    });
    let log = |lo, hi| LogSpan::covering(lo, hi, 10.0).coord();
    let (x_lin, y_lin) = (linear_range(x_lo, x_hi), linear_range(y_lo, y_hi));
    let drawn = match (spec.log_x, spec.log_y) {
        (false, false) => draw_lines(path, &chart, series, x_lin, y_lin),
        (true, false) => draw_lines(path, &chart, series, log(x_lo, x_hi), y_lin),
        (false, true) => draw_lines(path, &chart, series, x_lin, log(y_lo, y_hi)),
        (true, true) => draw_lines(path, &chart, series, log(x_lo, x_hi), log(y_lo, y_hi)),
    };
    drawn.map_err(|e| e.to_string())
}

/// The column's description, `(log scale)` appended on a log axis.
fn axis_desc(plan: &Plan, column: &str, log: bool) -> String {
    let desc = plan.column_description(column).unwrap_or(column);
    if log {
        format!("{desc} (log scale)")
    } else {
        desc.to_string()
    }
}
