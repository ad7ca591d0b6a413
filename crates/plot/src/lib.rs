//! # metronome-plot
//!
//! The one plot style of Metronome's SVG figures, shared by `metronome bench` and `metronome lab`:
//! the bundled DejaVu Sans ([`register_font`], [`FONT`]; no system fonts or fontconfig), the line
//! chart ([`draw_lines`]) on linear ([`linear_range`]) or logarithmic ([`LogSpan`]) axes, and tick
//! labels ([`format_number`], [`si`]). Values an axis cannot show are the caller's to leave out;
//! the helpers never panic on them ([`LogSpan::covering`], [`min_max`]).

use std::fmt;
use std::io;
use std::ops::Range;
use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::prelude::*;
use plotters::style::FontStyle;

/// The bundled font file (DejaVu Sans 2.37, Bitstream Vera licence; see `assets/README.md`).
static FONT_BYTES: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

/// Family name every text style uses, and the name the bundled font is registered under.
pub const FONT: &str = "sans-serif";
/// Canvas of a chart, pixels (width, height); chosen to read at page width.
pub const CANVAS: (u32, u32) = (960, 600);
/// Title text size, pixels (plotters writes `size / 1.24` as the SVG `font-size`).
pub const TITLE_PX: u32 = 24;
/// Subtitle (paper, machine, values left out), pixels.
pub const SUBTITLE_PX: u32 = 15;
/// Tick labels and legend entries, pixels.
pub const LABEL_PX: u32 = 15;
/// Axis descriptions, pixels.
pub const AXIS_DESC_PX: u32 = 17;
/// Margin around each chart, pixels.
pub const MARGIN_PX: u32 = 16;
/// Width of the y tick label area, pixels (fits tick labels such as `12.5k` or `0.25` at
/// [`LABEL_PX`] beside the axis description).
pub const Y_LABEL_AREA_PX: u32 = 80;
/// Height of the x tick label area, pixels (tick labels plus the axis description).
pub const X_LABEL_AREA_PX: u32 = 50;
/// Headroom above the largest value on a linear axis: 10 % keeps the top point off the frame.
pub const LINEAR_HEADROOM: f64 = 1.1;

/// The Okabe–Ito palette (distinguishable with the common color-vision deficiencies): blue,
/// vermillion, bluish green, orange, reddish purple, sky blue, black.
pub const OKABE_ITO: [RGBColor; 7] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(230, 159, 0),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(0, 0, 0),
];

/// The bundled font could not be parsed by `ab_glyph`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FontError;

impl fmt::Display for FontError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the bundled font DejaVuSans.ttf could not be parsed")
    }
}

impl std::error::Error for FontError {}

/// Registers the bundled DejaVu Sans as plotters' [`FONT`] family, once per process.
///
/// Call it before drawing; later calls return the first call's outcome.
pub fn register_font() -> Result<(), FontError> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let registered = *REGISTERED.get_or_init(|| {
        plotters::style::register_font(FONT, FontStyle::Normal, FONT_BYTES).is_ok()
    });
    if registered {
        Ok(())
    } else {
        Err(FontError)
    }
}

/// Plotters' error for everything drawn on the SVG backend.
pub type DrawError = DrawingAreaErrorKind<io::Error>;

/// The texts and tick choices of one line chart.
pub struct LineChart<'a> {
    /// Above the chart, in [`TITLE_PX`].
    pub title: &'a str,
    /// Under the title, in [`SUBTITLE_PX`].
    pub subtitle: &'a str,
    /// The x axis description.
    pub x_desc: &'a str,
    /// The y axis description.
    pub y_desc: &'a str,
    /// Tick label of an x value.
    pub x_format: &'a dyn Fn(f64) -> String,
    /// Tick label of a y value.
    pub y_format: &'a dyn Fn(f64) -> String,
    /// How many x tick labels plotters aims for ([`LogSpan::ticks`] asks for exactly the powers of
    /// the base); `None` leaves plotters' default.
    pub x_labels: Option<usize>,
    /// Light grid lines between two labelled ones, on both axes (log2 axes look cluttered with
    /// plotters' default, and on a log10 axis fewer than 10 suppress the 2..9 lines of log paper);
    /// `None` leaves plotters' default.
    pub light_lines: Option<usize>,
}

/// One line of a chart: its legend entry, its color and its points, sorted by x.
pub struct Series<'a> {
    /// The legend entry.
    pub label: &'a str,
    /// The line's and its points' color.
    pub color: RGBColor,
    /// The points, in the order they are joined.
    pub points: &'a [(f64, f64)],
}

/// Draws `series` into the SVG file `path` on axes `x` and `y` (each [`linear_range`] or a
/// [`LogSpan::coord`]): each series a line of width 2 with a dot of radius 4 on every point, and a
/// legend in the upper left. Call [`register_font`] first.
pub fn draw_lines<'a, X, Y>(
    path: &Path,
    chart: &LineChart<'_>,
    series: impl IntoIterator<Item = Series<'a>>,
    x: X,
    y: Y,
) -> Result<(), DrawError>
where
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let root = SVGBackend::new(path, CANVAS).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(chart.title, (FONT, TITLE_PX))?;
    let mut ctx = ChartBuilder::on(&root)
        .caption(chart.subtitle, (FONT, SUBTITLE_PX))
        .margin(MARGIN_PX)
        .x_label_area_size(X_LABEL_AREA_PX)
        .y_label_area_size(Y_LABEL_AREA_PX)
        .build_cartesian_2d(x, y)?;
    let x_format = |v: &f64| (chart.x_format)(*v);
    let y_format = |v: &f64| (chart.y_format)(*v);
    let mut mesh = ctx.configure_mesh();
    mesh.x_desc(chart.x_desc)
        .y_desc(chart.y_desc)
        .x_label_formatter(&x_format)
        .y_label_formatter(&y_format)
        .label_style((FONT, LABEL_PX))
        .axis_desc_style((FONT, AXIS_DESC_PX));
    if let Some(n) = chart.x_labels {
        mesh.x_labels(n);
    }
    if let Some(n) = chart.light_lines {
        mesh.max_light_lines(n);
    }
    mesh.draw()?;

    for line in series {
        let style = line.color.stroke_width(2);
        ctx.draw_series(LineSeries::new(line.points.iter().copied(), style))?
            .label(line.label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        let dot = line.color.filled();
        ctx.draw_series(line.points.iter().map(|&p| Circle::new(p, 4, dot)))?;
    }
    ctx.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FONT, LABEL_PX))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()
}

/// A linear axis from zero (or from the smallest value when it is negative), with
/// [`LINEAR_HEADROOM`] beyond the extremes; `0..1` when nothing is above zero.
pub fn linear_range(lo: f64, hi: f64) -> Range<f64> {
    let top = if hi > 0.0 { hi * LINEAR_HEADROOM } else { 1.0 };
    let bottom = if lo < 0.0 { lo * LINEAR_HEADROOM } else { 0.0 };
    bottom..top
}

/// A log axis from the power of `base` at or below the smallest value to the one at or above the
/// largest, at least one step wide.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogSpan {
    /// The lower bound, a power of the base.
    pub lo: f64,
    /// The upper bound, a power of the base.
    pub hi: f64,
    base: f64,
    steps: usize,
}

impl LogSpan {
    /// The span covering `lo..=hi`. A bound that is not finite and positive is taken as 1, so the
    /// span is never empty or negative.
    pub fn covering(lo: f64, hi: f64, base: f64) -> Self {
        let log = |v: f64| {
            let v = if v.is_finite() && v > 0.0 { v } else { 1.0 };
            let e = v.log(base);
            // log10(1000) is 2.9999999999999996: snap near-integers so exact powers stay bounds.
            if (e - e.round()).abs() < 1e-9 {
                e.round()
            } else {
                e
            }
        };
        let e_lo = log(lo).floor();
        let e_hi = log(hi).ceil().max(e_lo + 1.0);
        Self {
            lo: base.powf(e_lo),
            hi: base.powf(e_hi),
            base,
            steps: (e_hi - e_lo) as usize,
        }
    }

    /// The axis, for [`draw_lines`] or a chart builder.
    pub fn coord(&self) -> LogCoord<f64> {
        (self.lo..self.hi).log_scale().base(self.base).into()
    }

    /// Tick count asking plotters for exactly the powers of the base (one per step, plus both
    /// ends).
    pub fn ticks(&self) -> usize {
        self.steps + 1
    }
}

/// Smallest and largest of `values` (ignoring NaN); `(1, 1)` for none.
pub fn min_max(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if lo <= hi {
        (lo, hi)
    } else {
        (1.0, 1.0)
    }
}

/// `4000000` → `4M`, `0.25` → `0.25`: at most three significant figures with an SI prefix.
pub fn format_number(v: f64) -> String {
    let (number, prefix) = si(v);
    format!("{number}{prefix}")
}

/// Splits `v` into a number of at most three significant figures and an SI prefix (`k`, `M`, `G`,
/// `T`, or none below 1000).
pub fn si(v: f64) -> (String, &'static str) {
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
    (text.to_string(), prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_short() {
        assert_eq!(format_number(4_000_000.0), "4M");
        assert_eq!(format_number(30_000_000.0), "30M");
        assert_eq!(format_number(5e9), "5G");
        assert_eq!(format_number(1_000.0), "1k");
        assert_eq!(format_number(0.25), "0.25");
        assert_eq!(format_number(125_000.0), "125k");
        assert_eq!(format_number(0.0), "0");
        assert_eq!(si(4_194_304.0), ("4.19".to_string(), "M"));
    }

    #[test]
    fn log_span_covers_the_data_in_whole_powers() {
        let span = LogSpan::covering(1_000.0, 3e7, 10.0);
        assert_eq!((span.lo, span.hi, span.steps), (1e3, 1e8, 5));
        let span = LogSpan::covering(1_000.0, 4_000_000.0, 10.0);
        assert_eq!(span.coord().range(), 1_000.0..10_000_000.0);
        let span = LogSpan::covering(0.0, f64::NAN, 2.0);
        assert_eq!((span.lo, span.hi, span.steps), (1.0, 2.0, 1));
        let span = LogSpan::covering(64.0, 64.0, 2.0);
        assert_eq!((span.lo, span.hi), (64.0, 128.0));
        let span = LogSpan::covering(0.25, 0.5, 10.0);
        assert_eq!((span.lo, span.hi), (0.1, 1.0));
    }

    #[test]
    fn linear_axes_start_at_zero_with_headroom() {
        assert_eq!(linear_range(0.0, 10.0), 0.0..11.0);
        assert_eq!(linear_range(3.0, 10.0), 0.0..11.0);
        assert_eq!(linear_range(-10.0, 10.0), -11.0..11.0);
        assert_eq!(linear_range(0.0, 0.0), 0.0..1.0);
        assert_eq!(linear_range(1.0, f64::NAN), 0.0..1.0);
    }

    #[test]
    fn min_max_ignores_nan_and_defaults_to_one() {
        assert_eq!(min_max([3.0, f64::NAN, -1.0].into_iter()), (-1.0, 3.0));
        assert_eq!(min_max(std::iter::empty()), (1.0, 1.0));
    }

    #[test]
    fn font_registration_is_idempotent() {
        register_font().expect("first registration");
        register_font().expect("second registration");
    }

    #[test]
    fn draws_a_line_chart_with_its_texts() {
        register_font().expect("font");
        let path = std::env::temp_dir().join(format!("metronome-plot-{}.svg", std::process::id()));
        let points = [(1.0, 2.0), (10.0, 3.0), (100.0, 5.0)];
        let chart = LineChart {
            title: "A title",
            subtitle: "a subtitle",
            x_desc: "x things",
            y_desc: "y things",
            x_format: &format_number,
            y_format: &format_number,
            x_labels: Some(3),
            light_lines: Some(1),
        };
        let series = [Series {
            label: "line one",
            color: OKABE_ITO[0],
            points: &points,
        }];
        let x = LogSpan::covering(1.0, 100.0, 10.0);
        draw_lines(&path, &chart, series, x.coord(), linear_range(2.0, 5.0)).expect("drawn");
        let svg = std::fs::read_to_string(&path).expect("readable");
        std::fs::remove_file(&path).expect("removed");
        for text in [
            "<svg",
            "A title",
            "a subtitle",
            "x things",
            "y things",
            "line one",
        ] {
            assert!(svg.contains(text), "the chart lacks {text}");
        }
        // The title's size: plotters writes `TITLE_PX / 1.24`.
        let title_size = format!("font-size=\"{}\"", TITLE_PX as f64 / 1.24);
        assert!(svg.contains(&title_size), "no text of {title_size}");
    }
}
