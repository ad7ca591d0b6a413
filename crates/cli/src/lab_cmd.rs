//! `metronome lab <experiment>`: runs an experiment plan of `metronome-lab` (an embedded
//! `lab/plans/<experiment>.toml`, or `--plan FILE`), writes `rows.csv`, `rows.json` and the plan's
//! SVG plots into `--out` (default `out/lab/<experiment>/`), and prints a table with the paper's
//! reference values beside ours, or with `--json` exactly one JSON document
//! `{"experiment": ..., "rows": [...]}`. Progress goes to stderr.
//!
//! Exit status: 0 on success; 2 for bad input (an unknown experiment, whose message lists the
//! known ones; a malformed plan, whose message names the field and the line; a parameter of the
//! wrong type); 1 when running or writing fails.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use metronome_lab::output::{json_document, print_table, write_all};
use metronome_lab::{experiments, plans, run_plan, LabError, Plan, Progress, RunOptions};

/// Options of `metronome lab`.
#[derive(Args, Debug)]
pub struct LabArgs {
    /// The experiment to run (its embedded plan); see `--list`.
    experiment: Option<String>,
    /// Run this plan file instead of the embedded plan.
    #[arg(long, value_name = "FILE")]
    plan: Option<PathBuf>,
    /// Apply the plan's `[quick]` overrides (finishes in under a minute).
    #[arg(long)]
    quick: bool,
    /// Print exactly one JSON document on stdout (progress goes to stderr).
    #[arg(long)]
    json: bool,
    /// Directory for rows.csv, rows.json and the plots (default: `out/lab/EXPERIMENT`).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Points run in parallel.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..))]
    jobs: u16,
    /// List the experiments and exit.
    #[arg(long)]
    list: bool,
}

/// Runs the command. Bad input ends the process with status 2 after printing the error.
pub fn run(args: LabArgs) -> anyhow::Result<()> {
    if args.list {
        return list();
    }
    let plan = match load_plan(&args) {
        Ok(plan) => plan,
        Err(e) => bad_input(&e),
    };
    let experiment = match experiments::lookup(&plan.experiment.name) {
        Ok(experiment) => experiment,
        Err(e) => bad_input(&e),
    };
    let options = RunOptions {
        quick: args.quick,
        jobs: usize::from(args.jobs),
    };
    let results = match run_plan(&plan, experiment.run, &options, &Progress::stderr()) {
        Ok(results) => results,
        Err(e) if e.is_bad_input() => bad_input(&e),
        Err(e) => return Err(e.into()),
    };
    let dir = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("out/lab").join(&plan.experiment.name));
    let written = write_all(&plan, &results, &dir)
        .with_context(|| format!("writing the results into {}", dir.display()))?;
    for path in written {
        eprintln!("lab: wrote {}", path.display());
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer(&mut out, &json_document(&results))?;
        writeln!(out)?;
    } else {
        print_table(&plan, &results, &mut out)?;
    }
    out.flush()?;
    Ok(())
}

/// The plan named on the command line: `--plan FILE`, else the embedded plan of the experiment.
fn load_plan(args: &LabArgs) -> Result<Plan, LabError> {
    match (&args.plan, &args.experiment) {
        (Some(path), name) => {
            let plan = Plan::from_file(path)?;
            match name {
                Some(name) if *name != plan.experiment.name => Err(plan.field_error(
                    "experiment.name",
                    format!(
                        "the plan runs {:?}, the command line asked for {name:?}",
                        plan.experiment.name
                    ),
                )),
                _ => Ok(plan),
            }
        }
        (None, Some(name)) => plans::load(name),
        (None, None) => Err(LabError::UnknownExperiment {
            name: String::new(),
            known: plans::names().map(str::to_string).collect(),
        }),
    }
}

/// Prints `e` and ends the process with status 2.
fn bad_input(e: &LabError) -> ! {
    match e {
        LabError::UnknownExperiment { name, known } if name.is_empty() => {
            eprintln!(
                "metronome lab: name an experiment (or --plan FILE); known experiments: {}",
                known.join(", ")
            );
        }
        _ => eprintln!("metronome lab: {e}"),
    }
    std::process::exit(2)
}

/// `--list`: every embedded plan with its title and paper figure.
fn list() -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    for name in plans::names() {
        let plan = plans::load(name)?;
        writeln!(
            out,
            "{name:<24} {} ({})",
            plan.experiment.title, plan.experiment.paper
        )?;
    }
    Ok(())
}
