//! SVG plots of a bench [`Report`], one per report section: `ns_per_packet.svg` (Carousel Table 1's
//! steady state, [`crate::steady`]), `memory.svg` and `batching.svg`, in `metronome_plot`'s style.
//! Values an axis cannot show are left out visibly (the subtitle says how many), never by a panic;
//! [`write_plots`] returns the paths it wrote. The axes of each plot: ARCHITECTURE.md, "The bench's
//! plots".

use std::error::Error;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use metronome_plot::{
    draw_lines, format_number, linear_range, min_max, si, DrawError, FontError, LineChart, LogSpan,
    Series, AXIS_DESC_PX, CANVAS, FONT, LABEL_PX, MARGIN_PX, OKABE_ITO, SUBTITLE_PX, TITLE_PX,
    X_LABEL_AREA_PX,
};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::report::{BatchingRow, MemoryRow, Report, ResultRow};

/// Height of the memory plot per row, pixels; chosen so a bar and its label stay legible.
const MEMORY_ROW_PX: u32 = 30;
/// Height of the memory plot around its rows (title, subtitle, x axis), pixels.
const MEMORY_FRAME_PX: u32 = 170;

const NS_PER_PACKET_FILE: &str = "ns_per_packet.svg";
const MEMORY_FILE: &str = "memory.svg";
const BATCHING_FILE: &str = "batching.svg";

/// Why a plot could not be written.
#[derive(Debug)]
pub enum PlotError {
    /// The bundled font could not be parsed by `ab_glyph`.
    Font(FontError),
    /// The output directory could not be created.
    Io {
        /// The directory.
        path: PathBuf,
        /// What the file system said.
        source: io::Error,
    },
    /// Plotters failed to lay out, draw or write a plot.
    Draw {
        /// The plot being written.
        path: PathBuf,
        /// Plotters' error as text (its type is generic over the drawing backend).
        message: String,
    },
}

impl fmt::Display for PlotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Font(e) => write!(f, "{e}"),
            Self::Io { path, source } => write!(f, "cannot create {}: {source}", path.display()),
            Self::Draw { path, message } => write!(f, "cannot draw {}: {message}", path.display()),
        }
    }
}

impl Error for PlotError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            Self::Font(e) => Some(e),
            Self::Draw { .. } => None,
        }
    }
}

impl From<FontError> for PlotError {
    fn from(e: FontError) -> Self {
        Self::Font(e)
    }
}

/// Writes `ns_per_packet.svg`, `memory.svg` and `batching.svg` for `report` into `dir`, creating
/// `dir` if needed, and returns the paths written, in that order.
///
/// A plot whose section has no plottable row is skipped (no file, no error); an existing file of
/// that name is left as it was.
pub fn write_plots(report: &Report, dir: &Path) -> Result<Vec<PathBuf>, PlotError> {
    metronome_plot::register_font()?;
    std::fs::create_dir_all(dir).map_err(|source| PlotError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut written = Vec::new();

    let cost = cost_lines(&report.results);
    if !cost.lines.is_empty() {
        let plot = LinePlot {
            title: "Steady-state cost per packet (Carousel Table 1)",
            subtitle: subtitle(&report.machine, cost.left_out),
            x_desc: "Resident packets (log scale)",
            y_desc: "ns per packet (enqueue + dequeue, median)",
            log_base: 10.0,
            x_format: format_number,
            light_lines: 10,
        };
        written.push(write_one(dir, NS_PER_PACKET_FILE, |path| {
            draw_line_plot(path, &plot, &cost)
        })?);
    }

    if !report.memory.is_empty() {
        let machine = subtitle(&report.machine, 0);
        written.push(write_one(dir, MEMORY_FILE, |path| {
            draw_memory(path, &machine, &report.memory)
        })?);
    }

    let batching = batching_lines(&report.batching);
    if !batching.lines.is_empty() {
        let plot = LinePlot {
            title: "Packets released per dequeue call",
            subtitle: subtitle(&report.machine, batching.left_out),
            x_desc: "Destinations at equal rates (log2 scale)",
            y_desc: "Packets per dequeue call",
            log_base: 2.0,
            x_format: format_integer,
            light_lines: 1,
        };
        written.push(write_one(dir, BATCHING_FILE, |path| {
            draw_line_plot(path, &plot, &batching)
        })?);
    }
    Ok(written)
}

/// Plotters' error type for everything drawn on the SVG backend.
type DrawResult = Result<(), DrawError>;

/// Runs `draw` on `dir/name` and names the file in its error.
fn write_one(
    dir: &Path,
    name: &str,
    draw: impl FnOnce(&Path) -> DrawResult,
) -> Result<PathBuf, PlotError> {
    let path = dir.join(name);
    match draw(&path) {
        Ok(()) => Ok(path),
        Err(e) => Err(PlotError::Draw {
            message: e.to_string(),
            path,
        }),
    }
}

/// The machine line under a title, plus how many rows had no position.
fn subtitle(machine: &str, left_out: usize) -> String {
    let machine = if machine.trim().is_empty() {
        "machine not recorded"
    } else {
        machine.trim()
    };
    match left_out {
        0 => machine.to_string(),
        1 => format!("{machine} (1 row with a non-finite value not shown)"),
        n => format!("{machine} ({n} rows with a non-finite value not shown)"),
    }
}

/// One structure's points, sorted by x.
struct Line<'a> {
    name: &'a str,
    points: Vec<(f64, f64)>,
}

/// The lines of one plot, in order of first appearance in the report, and the rows left out.
struct Lines<'a> {
    lines: Vec<Line<'a>>,
    left_out: usize,
}

impl<'a> Lines<'a> {
    /// Groups `(structure, x, y)` by structure. x (a count) is clamped to the log-axis floor 1, y
    /// to zero from below; a row with a non-finite y is counted in `left_out` instead.
    fn collect(rows: impl IntoIterator<Item = (&'a str, f64, f64)>) -> Self {
        let mut lines: Vec<Line<'a>> = Vec::new();
        let mut left_out = 0;
        for (name, x, y) in rows {
            if !x.is_finite() || !y.is_finite() {
                left_out += 1;
                continue;
            }
            let point = (x.max(1.0), y.max(0.0));
            match lines.iter_mut().find(|line| line.name == name) {
                Some(line) => line.points.push(point),
                None => lines.push(Line {
                    name,
                    points: vec![point],
                }),
            }
        }
        for line in &mut lines {
            line.points.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        Self { lines, left_out }
    }

    fn points(&self) -> impl Iterator<Item = (f64, f64)> + '_ {
        self.lines
            .iter()
            .flat_map(|line| line.points.iter().copied())
    }
}

fn cost_lines(rows: &[ResultRow]) -> Lines<'_> {
    Lines::collect(
        rows.iter()
            .map(|r| (r.structure.as_str(), r.resident as f64, r.ns_per_packet)),
    )
}

fn batching_lines(rows: &[BatchingRow]) -> Lines<'_> {
    Lines::collect(rows.iter().map(|r| {
        (
            r.structure.as_str(),
            f64::from(r.destinations),
            r.packets_per_dequeue,
        )
    }))
}

/// What differs between the two line plots.
struct LinePlot {
    title: &'static str,
    subtitle: String,
    x_desc: &'static str,
    y_desc: &'static str,
    /// Base of the log x axis; ticks sit on its powers.
    log_base: f64,
    x_format: fn(f64) -> String,
    /// Light grid lines between two labelled ones (see [`LineChart::light_lines`]).
    light_lines: usize,
}

/// A log-x, linear-y plot with one line (and its points) per structure and a legend.
fn draw_line_plot(path: &Path, plot: &LinePlot, lines: &Lines<'_>) -> DrawResult {
    let (x_lo, x_hi) = min_max(lines.points().map(|p| p.0));
    let x = LogSpan::covering(x_lo, x_hi, plot.log_base);
    let y_top = lines.points().map(|p| p.1).fold(0.0, f64::max);
    let chart = LineChart {
        title: plot.title,
        subtitle: &plot.subtitle,
        x_desc: plot.x_desc,
        y_desc: plot.y_desc,
        x_format: &plot.x_format,
        y_format: &format_number,
        x_labels: Some(x.ticks()),
        light_lines: Some(plot.light_lines),
    };
    let series = lines.lines.iter().map(|line| Series {
        label: line.name,
        color: structure_color(line.name),
        points: &line.points,
    });
    draw_lines(path, &chart, series, x.coord(), linear_range(0.0, y_top))
}

/// Horizontal bars of bytes (log axis), one per row, first row on top, value written after the bar
/// (the recorded value, also for a row of 0 bytes, whose bar sits at the axis floor of 1 byte).
fn draw_memory(path: &Path, subtitle: &str, rows: &[MemoryRow]) -> DrawResult {
    let n = rows.len();
    let height =
        MEMORY_FRAME_PX + MEMORY_ROW_PX * u32::try_from(n).unwrap_or(u32::MAX / MEMORY_ROW_PX);
    let root = SVGBackend::new(path, (CANVAS.0, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled("Memory footprint with no packet queued", (FONT, TITLE_PX))?;

    let labels: Vec<String> = rows
        .iter()
        .map(|r| format!("{} {}", r.structure, r.config))
        .collect();
    let label_style = TextStyle::from((FONT, LABEL_PX).into_font());
    let mut label_width = 0;
    for label in &labels {
        label_width = label_width.max(root.estimate_text_size(label, &label_style)?.0);
    }
    let bytes = |r: &MemoryRow| r.bytes.max(1) as f64;
    let (lo, hi) = min_max(rows.iter().map(bytes));
    // One more decade on the right leaves room for the value written after the longest bar.
    let x = LogSpan::covering(lo, hi * 10.0, 10.0);
    // Row i sits at y = n - 1 - i so the report's first row is on top; integers carry the labels.
    let row_y = |i: usize| (n - 1 - i) as f64;

    let mut ctx = ChartBuilder::on(&root)
        .caption(subtitle, (FONT, SUBTITLE_PX))
        .margin(MARGIN_PX)
        .x_label_area_size(X_LABEL_AREA_PX)
        .y_label_area_size(label_width.min(CANVAS.0 / 2) + 12)
        .build_cartesian_2d(x.coord(), -0.5..(n as f64 - 0.5))?;
    ctx.configure_mesh()
        .disable_y_mesh()
        .x_desc("Bytes (log scale)")
        .x_labels(x.ticks())
        .x_label_formatter(&|v| format_bytes(*v))
        .y_labels(n)
        .y_label_formatter(&|v| category_label(&labels, *v))
        .label_style((FONT, LABEL_PX))
        .axis_desc_style((FONT, AXIS_DESC_PX))
        .draw()?;

    ctx.draw_series(rows.iter().enumerate().map(|(i, r)| {
        let y = row_y(i);
        let corners = [(x.lo, y - 0.35), (bytes(r), y + 0.35)];
        Rectangle::new(corners, structure_color(&r.structure).filled())
    }))?;
    let value_style = label_style.pos(Pos::new(HPos::Left, VPos::Center));
    ctx.draw_series(rows.iter().enumerate().map(|(i, r)| {
        EmptyElement::at((bytes(r), row_y(i)))
            + Text::new(format_bytes(r.bytes as f64), (6, 0), value_style.clone())
    }))?;
    root.present()
}

/// The label of the row at integer position `v` (row i sits at `labels.len() - 1 - i`), else
/// nothing.
fn category_label(labels: &[String], v: f64) -> String {
    let position = v.round();
    if (v - position).abs() > 1e-6 || position < 0.0 {
        return String::new();
    }
    let from_top = (labels.len() as f64 - 1.0 - position) as usize;
    labels.get(from_top).cloned().unwrap_or_default()
}

/// `4194304` → `4.19 MB`: decimal (SI) units, matching the decade ticks of the bytes axis.
fn format_bytes(v: f64) -> String {
    let (number, prefix) = si(v);
    format!("{number} {prefix}B")
}

/// Whole numbers as they are (destinations: `1`, `2`, …, `1024`).
fn format_integer(v: f64) -> String {
    format!("{v:.0}")
}

/// A fixed color per structure so it looks the same in every plot and every report, from the
/// Okabe–Ito palette ([`OKABE_ITO`]). Unknown names get one of the remaining colors by a stable
/// hash (FNV-1a) of the name.
fn structure_color(name: &str) -> RGBColor {
    match name {
        "timing_wheel" => OKABE_ITO[0],
        "timing_wheel_list" => OKABE_ITO[5],
        "mltw" => OKABE_ITO[2],
        "binary_heap" => OKABE_ITO[1],
        "fq_tree" => OKABE_ITO[3],
        "token_bucket_rr" => OKABE_ITO[4],
        other => {
            const OTHERS: [RGBColor; 3] =
                [OKABE_ITO[6], RGBColor(160, 140, 0), RGBColor(120, 120, 120)];
            let hash = other.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            });
            OTHERS[(hash % OTHERS.len() as u64) as usize]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::WorkloadSummary;

    fn result(structure: &str, resident: u64, ns_per_packet: f64) -> ResultRow {
        ResultRow {
            structure: structure.to_string(),
            resident,
            ns_per_packet,
            ns_per_packet_min: ns_per_packet,
            packets_measured: 1000,
            bytes_per_packet: 24.0,
            memory_bytes: 1 << 20,
            rejected: 0,
        }
    }

    fn memory(structure: &str, config: &str, bytes: u64) -> MemoryRow {
        MemoryRow {
            structure: structure.to_string(),
            config: config.to_string(),
            granularity_ns: 2000.0,
            horizon_s: 2.0,
            bytes,
            source: "test".to_string(),
        }
    }

    fn batching(structure: &str, destinations: u32, packets_per_dequeue: f64) -> BatchingRow {
        BatchingRow {
            structure: structure.to_string(),
            destinations,
            packets_per_dequeue,
            dequeue_calls: 100,
            max_late_ns: 0,
            max_early_ns: 0,
        }
    }

    fn synthetic_report() -> Report {
        let mut results = Vec::new();
        for resident in [1_000, 100_000, 10_000_000] {
            let r = resident as f64;
            results.push(result("timing_wheel", resident, 12.0));
            results.push(result("binary_heap", resident, 8.0 * r.log2()));
            results.push(result("fq_tree", resident, 10.0 * r.log2()));
        }
        // Edge cases: a zero count on a log axis, a negative and a non-finite cost.
        results.push(result("mltw", 0, -1.0));
        results.push(result("mltw", 1_000, f64::NAN));
        Report {
            machine: "test machine, 4 cores".to_string(),
            workload: WorkloadSummary::default(),
            results,
            harness_floor: Vec::new(),
            memory: vec![
                memory("timing_wheel", "2us x 2s", 8 << 20),
                memory("mltw", "1ns x 64 x 1024", 3 << 10),
                memory("token_bucket_rr", "empty", 0),
            ],
            batching: [1, 4, 64]
                .into_iter()
                .flat_map(|d| {
                    [
                        batching("timing_wheel", d, f64::from(d)),
                        batching("fq_tree", d, 1.0),
                    ]
                })
                .collect(),
        }
    }

    fn scratch_dir(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("metronome-plot-{name}-{}", std::process::id()))
    }

    #[test]
    fn writes_three_svgs_with_text() {
        let dir = scratch_dir("all");
        let written = write_plots(&synthetic_report(), &dir).expect("plots are written");
        let names: Vec<_> = written
            .iter()
            .filter_map(|p| p.file_name()?.to_str())
            .collect();
        assert_eq!(names, [NS_PER_PACKET_FILE, MEMORY_FILE, BATCHING_FILE]);
        for (path, structure) in written
            .iter()
            .zip(["binary_heap", "token_bucket_rr", "fq_tree"])
        {
            let svg = std::fs::read_to_string(path).expect("plot is readable");
            assert!(svg.contains("<svg"), "{} is not an SVG", path.display());
            assert!(
                svg.contains(structure),
                "{} lacks the text {structure}",
                path.display()
            );
        }
        let cost = std::fs::read_to_string(&written[0]).expect("plot is readable");
        assert!(cost.contains("Carousel Table 1") && cost.contains("test machine, 4 cores"));
        assert!(cost.contains("1 row with a non-finite value not shown"));
        std::fs::remove_dir_all(&dir).expect("scratch directory is removed");
    }

    #[test]
    fn empty_sections_write_nothing() {
        let dir = scratch_dir("empty");
        let _ = std::fs::remove_dir_all(&dir);
        let written = write_plots(&Report::default(), &dir).expect("nothing to draw is no error");
        assert!(written.is_empty());
        assert_eq!(
            std::fs::read_dir(&dir).expect("directory exists").count(),
            0
        );
        std::fs::remove_dir_all(&dir).expect("scratch directory is removed");
    }

    #[test]
    fn labels_are_short() {
        assert_eq!(format_bytes(4_194_304.0), "4.19 MB");
        assert_eq!(format_bytes(512.0), "512 B");
    }
}
