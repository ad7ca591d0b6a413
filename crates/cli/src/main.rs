//! `metronome`: one binary. Today it runs `metronome bench`; the daemon (`run`, `demo`,
//! `compare`) and the lab (`lab`) join it in later issues.

mod bench_cmd;
mod lab_cmd;

use clap::{Parser, Subcommand};

/// Metronome: a software traffic shaper for end hosts.
#[derive(Parser, Debug)]
#[command(name = "metronome", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Reproduce Carousel Table 1: steady-state ns per packet of every queue structure, memory
    /// footprints and inter-flow batching.
    Bench(bench_cmd::BenchArgs),
    /// Run an experiment plan (lab/plans/<experiment>.toml): sweep its parameters, write CSV, JSON
    /// and SVG plots, and print the paper's figures beside ours.
    Lab(lab_cmd::LabArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Bench(args) => bench_cmd::run(args),
        Command::Lab(args) => lab_cmd::run(args),
    }
}
