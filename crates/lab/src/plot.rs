//! SVG line plots of a plan's results, one file per `[[plot]]` entry.
//!
//! A plot takes the rows of its sweep (or all rows), groups them into lines by y column and by the
//! value of its `series` column, sorts each line by x and draws points joined by lines, with a
//! legend. Axes are linear from zero, or logarithmic (base 10) when the spec says `log_x` /
//! `log_y`. Text uses the DejaVu Sans bundled with `metronome-bench`
//! ([`metronome_bench::plot::register_font`]), never the system's fonts.
//!
//! Values an axis cannot show are left out visibly, never by a panic: a cell that is not a number,
//! or not positive on a log axis, has no position, and the subtitle says how many were left out.
//! A plot with no drawable point writes no file.

use std::io;
use std::path::{Path, PathBuf};

use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::prelude::*;

use crate::error::LabError;
use crate::plan::{Plan, PlotSpec};
use crate::runner::Results;

/// Font family registered by `metronome_bench::plot::register_font`.
const FONT: &str = "sans-serif";
/// Canvas, pixels; the same as `metronome bench`'s line plots.
const CANVAS: (u32, u32) = (960, 600);
/// Text sizes, pixels: title, subtitle, tick labels and legend, axis descriptions.
const TITLE_PX: u32 = 24;
const SUBTITLE_PX: u32 = 15;
const LABEL_PX: u32 = 15;
const AXIS_DESC_PX: u32 = 17;
/// Margin and label areas, pixels (as in `metronome bench`'s plots).
const MARGIN_PX: u32 = 16;
const Y_LABEL_AREA_PX: u32 = 80;
const X_LABEL_AREA_PX: u32 = 50;
/// Headroom above the largest value on a linear axis: 10 % keeps the top point off the frame.
const LINEAR_HEADROOM: f64 = 1.1;
/// The Okabe–Ito palette (distinguishable with the common color-vision deficiencies), by line.
const PALETTE: [RGBColor; 7] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(230, 159, 0),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(0, 0, 0),
];

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
        metronome_bench::plot::register_font().map_err(|e| LabError::Plot {
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
    let text = Texts {
        title,
        subtitle: &subtitle,
        x_desc: &x_desc,
        y_desc: &y_desc,
    };
    match (spec.log_x, spec.log_y) {
        (false, false) => chart(path, &text, lines, linear(x_lo, x_hi), linear(y_lo, y_hi)),
        (true, false) => chart(path, &text, lines, log(x_lo, x_hi), linear(y_lo, y_hi)),
        (false, true) => chart(path, &text, lines, linear(x_lo, x_hi), log(y_lo, y_hi)),
        (true, true) => chart(path, &text, lines, log(x_lo, x_hi), log(y_lo, y_hi)),
    }
}

/// The texts around a chart.
struct Texts<'a> {
    title: &'a str,
    subtitle: &'a str,
    x_desc: &'a str,
    y_desc: &'a str,
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

/// A linear axis from zero (or from the smallest value when it is negative) with headroom.
fn linear(lo: f64, hi: f64) -> std::ops::Range<f64> {
    let top = if hi > 0.0 { hi * LINEAR_HEADROOM } else { 1.0 };
    let bottom = if lo < 0.0 { lo * LINEAR_HEADROOM } else { 0.0 };
    bottom..top
}

/// A base-10 log axis from the power of ten at or below the smallest value to the one at or above
/// the largest, at least one decade wide.
fn log(lo: f64, hi: f64) -> LogCoord<f64> {
    let e_lo = lo.log10().floor();
    let e_hi = hi.log10().ceil().max(e_lo + 1.0);
    (10f64.powf(e_lo)..10f64.powf(e_hi)).log_scale().into()
}

/// Smallest and largest of `values`; `(1, 1)` for none.
fn min_max(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if lo <= hi {
        (lo, hi)
    } else {
        (1.0, 1.0)
    }
}

/// Draws the lines on axes `x` and `y` (each linear or log).
fn chart<X, Y>(path: &Path, text: &Texts<'_>, lines: &[Line], x: X, y: Y) -> DrawResult
where
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let err = |e: DrawingAreaErrorKind<io::Error>| e.to_string();
    let root = SVGBackend::new(path, CANVAS).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(text.title, (FONT, TITLE_PX)).map_err(err)?;
    let mut ctx = ChartBuilder::on(&root)
        .caption(text.subtitle, (FONT, SUBTITLE_PX))
        .margin(MARGIN_PX)
        .x_label_area_size(X_LABEL_AREA_PX)
        .y_label_area_size(Y_LABEL_AREA_PX)
        .build_cartesian_2d(x, y)
        .map_err(err)?;
    ctx.configure_mesh()
        .x_desc(text.x_desc)
        .y_desc(text.y_desc)
        .x_label_formatter(&|v| format_number(*v))
        .y_label_formatter(&|v| format_number(*v))
        .label_style((FONT, LABEL_PX))
        .axis_desc_style((FONT, AXIS_DESC_PX))
        .draw()
        .map_err(err)?;
    for (i, line) in lines.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let style = color.stroke_width(2);
        ctx.draw_series(LineSeries::new(line.points.iter().copied(), style))
            .map_err(err)?
            .label(line.label.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        ctx.draw_series(
            line.points
                .iter()
                .map(|&p| Circle::new(p, 4, color.filled())),
        )
        .map_err(err)?;
    }
    ctx.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FONT, LABEL_PX))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

/// `4000000` → `4M`, `0.25` → `0.25`: at most three significant figures with an SI prefix.
pub fn format_number(v: f64) -> String {
    const PREFIXES: [(f64, &str); 4] = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")];
    let (scaled, prefix) = PREFIXES
        .iter()
        .find(|(scale, _)| v.abs() >= *scale)
        .map_or((v, ""), |&(scale, prefix)| (v / scale, prefix));
    let decimals = match scaled.abs() {
        a if a >= 100.0 => 0,
        a if a >= 10.0 => 1,
        _ => 2,
    };
    let text = format!("{scaled:.decimals$}");
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        &text
    };
    format!("{text}{prefix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_short() {
        assert_eq!(format_number(4_000_000.0), "4M");
        assert_eq!(format_number(5e9), "5G");
        assert_eq!(format_number(0.25), "0.25");
        assert_eq!(format_number(125_000.0), "125k");
        assert_eq!(format_number(0.0), "0");
    }

    #[test]
    fn log_axis_covers_whole_decades() {
        let axis = log(1_000.0, 4_000_000.0);
        assert_eq!(axis.range(), 1_000.0..10_000_000.0);
        assert_eq!(linear(0.0, 10.0), 0.0..11.0);
    }
}
