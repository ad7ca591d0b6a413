//! Runs a plan: expands it into points ([`Plan::points`]), runs each through its experiment
//! function on up to `jobs` threads, checks every row's columns against `[columns]`, and returns
//! the rows in point order, whatever order the threads finished in.
//!
//! Progress goes to stderr through a [`Progress`]: an `indicatif` bar when stderr is a terminal,
//! one plain line per finished point otherwise (CI logs, `2> file`), nothing in tests. Stdout is
//! left to the caller, so `--json` prints exactly one document there.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use crate::error::LabError;
use crate::experiments::ExperimentFn;
use crate::plan::Plan;
use crate::point::{Point, Row};

/// How to run a plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunOptions {
    /// Apply the plan's `[quick]` overrides.
    pub quick: bool,
    /// Points run at once, at least 1. Default 2 (the lab machines have two cores).
    pub jobs: usize,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            quick: false,
            jobs: 2,
        }
    }
}

/// A row and the point it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct PointRow {
    /// Index of the point.
    pub point: usize,
    /// The sweep the point belongs to (plots may select rows by it).
    pub sweep: String,
    /// The row, its columns in the plan's `[columns]` order.
    pub row: Row,
}

/// The outcome of a plan.
#[derive(Clone, Debug, PartialEq)]
pub struct Results {
    /// The experiment's name.
    pub experiment: String,
    /// Whether `[quick]` was applied.
    pub quick: bool,
    /// Points run.
    pub points: usize,
    /// The rows, in point order (and in each point's own order).
    pub rows: Vec<PointRow>,
}

impl Results {
    /// The rows without their origin.
    pub fn rows(&self) -> impl Iterator<Item = &Row> {
        self.rows.iter().map(|r| &r.row)
    }
}

/// Where progress goes.
pub enum Progress {
    /// Nowhere (tests, library callers).
    Hidden,
    /// One line per finished point on stderr.
    Lines,
    /// An `indicatif` bar on stderr.
    Bar(ProgressBar),
}

impl Progress {
    /// A bar when stderr is a terminal, plain lines otherwise.
    pub fn stderr() -> Self {
        if std::io::stderr().is_terminal() {
            let bar = ProgressBar::new(0);
            if let Ok(style) = ProgressStyle::with_template(
                "lab {prefix} [{bar:30}] {pos}/{len} points {elapsed} {msg}",
            ) {
                bar.set_style(style.progress_chars("=> "));
            }
            Self::Bar(bar)
        } else {
            Self::Lines
        }
    }

    fn begin(&self, experiment: &str, total: usize) {
        match self {
            Self::Hidden => {}
            Self::Lines => eprintln!("lab {experiment}: {total} points"),
            Self::Bar(bar) => {
                bar.set_prefix(experiment.to_string());
                bar.set_length(total as u64);
            }
        }
    }

    fn point_done(&self, what: String, point: &Point, total: usize, took: Duration) {
        match self {
            Self::Hidden => {}
            Self::Lines => eprintln!(
                "lab: point {}/{total} ({what}) done in {:.2} s",
                point.index + 1,
                took.as_secs_f64()
            ),
            Self::Bar(bar) => {
                bar.set_message(what);
                bar.inc(1);
            }
        }
    }

    fn end(&self) {
        if let Self::Bar(bar) = self {
            bar.finish_and_clear();
        }
    }
}

/// `sweep flows: granularity_ns=2000 flows=10`: the point's sweep and the values it sweeps.
fn describe(plan: &Plan, point: &Point) -> String {
    let swept = plan.sweeps.iter().find(|s| s.name == point.sweep);
    let values: Vec<String> = swept
        .into_iter()
        .flat_map(|s| s.params.keys())
        .filter_map(|k| point.params.get(k).map(|v| format!("{k}={v}")))
        .collect();
    format!("sweep {}: {}", point.sweep, values.join(" "))
}

/// A point's index and what its experiment returned.
type PointOutcome = (usize, Result<Vec<Row>, LabError>);

/// Runs `plan` through `experiment`. The first error in point order wins, so a failing plan
/// reports the same error on every run.
pub fn run_plan(
    plan: &Plan,
    experiment: ExperimentFn,
    options: &RunOptions,
    progress: &Progress,
) -> Result<Results, LabError> {
    let points = plan.points(options.quick)?;
    let total = points.len();
    progress.begin(&plan.experiment.name, total);
    let next = AtomicUsize::new(0);
    let done: Mutex<Vec<PointOutcome>> = Mutex::new(Vec::with_capacity(total));
    let workers = options.jobs.clamp(1, total.max(1));
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(point) = points.get(i) else { break };
                let started = Instant::now();
                let outcome = experiment(point);
                progress.point_done(describe(plan, point), point, total, started.elapsed());
                let failed = outcome.is_err();
                done.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((i, outcome));
                if failed {
                    // Stop handing out points; those already running finish.
                    next.store(total, Ordering::Relaxed);
                }
            });
        }
    });
    progress.end();
    let mut done = done.into_inner().unwrap_or_else(|e| e.into_inner());
    done.sort_by_key(|(i, _)| *i);
    let mut rows = Vec::new();
    for (i, outcome) in done {
        let point = &points[i];
        for row in outcome? {
            if let Some(column) = row.columns().find(|c| !plan.columns.contains_key(*c)) {
                return Err(LabError::UndocumentedColumn {
                    experiment: plan.experiment.name.clone(),
                    column: column.to_string(),
                });
            }
            rows.push(PointRow {
                point: i,
                sweep: point.sweep.clone(),
                row: row.ordered_by(plan.column_names()),
            });
        }
    }
    Ok(Results {
        experiment: plan.experiment.name.clone(),
        quick: options.quick,
        points: total,
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAN: &str = r#"
        [experiment]
        name = "echo"
        title = "Echo"
        [columns]
        x = "The parameter"
        y = "Twice the parameter"
        [[sweep]]
        name = "s"
        [sweep.params]
        x = [1, 2, 3, 4, 5, 6, 7]
    "#;

    /// Pushes `y` before `x` (the runner reorders) and sleeps less for later points, so threads
    /// finish out of order.
    fn echo(p: &Point) -> Result<Vec<Row>, LabError> {
        let x = p.u64("x")?;
        std::thread::sleep(Duration::from_millis(8 - x));
        Ok(vec![Row::new().with("y", 2 * x).with("x", x)])
    }

    fn undocumented(_: &Point) -> Result<Vec<Row>, LabError> {
        Ok(vec![Row::new().with("x", 1).with("z", 2)])
    }

    fn fails_on_odd(p: &Point) -> Result<Vec<Row>, LabError> {
        match p.u64("x")? {
            x if x % 2 == 1 => Err(LabError::Experiment {
                point: p.index,
                message: format!("odd {x}"),
            }),
            x => Ok(vec![Row::new().with("x", x)]),
        }
    }

    #[test]
    fn rows_come_back_in_point_order_and_column_order() {
        let plan = Plan::parse(PLAN, "test").expect("plan parses");
        let options = RunOptions {
            quick: false,
            jobs: 3,
        };
        let results = run_plan(&plan, echo, &options, &Progress::Hidden).expect("runs");
        let xs: Vec<u64> = results
            .rows()
            .map(|r| r.get("x").and_then(|v| v.as_u64()).unwrap_or(0))
            .collect();
        assert_eq!(xs, [1, 2, 3, 4, 5, 6, 7]);
        assert!(results
            .rows()
            .all(|r| r.columns().collect::<Vec<_>>() == ["x", "y"]));
        assert_eq!(results.points, 7);
    }

    #[test]
    fn undocumented_column_is_named() {
        let plan = Plan::parse(PLAN, "test").expect("plan parses");
        let e = run_plan(
            &plan,
            undocumented,
            &RunOptions::default(),
            &Progress::Hidden,
        )
        .unwrap_err();
        assert!(
            matches!(&e, LabError::UndocumentedColumn { column, .. } if column == "z"),
            "{e}"
        );
    }

    #[test]
    fn first_error_in_point_order_wins() {
        let plan = Plan::parse(PLAN, "test").expect("plan parses");
        let e = run_plan(
            &plan,
            fails_on_odd,
            &RunOptions {
                quick: false,
                jobs: 2,
            },
            &Progress::Hidden,
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "point 0: odd 1");
    }
}
