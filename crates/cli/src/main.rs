//! `metronome`: one binary: `bench`, `lab`, the daemon (`run`, `stats`, `class`, `demo`) and `compare`
//! (the daemon against kernel HTB and TBF).

mod bench_cmd;
mod class_cmd;
mod compare_args;
mod compare_attach;
mod compare_churn;
mod compare_classes;
mod compare_cluster;
mod compare_cmd;
mod compare_cni;
mod compare_hierarchy;
mod compare_link;
mod compare_plot;
mod compare_schema;
mod compare_table;
mod demo_cmd;
mod lab_cmd;
mod run_cmd;
mod stats_cmd;

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
    /// Run an experiment plan (`lab/plans/EXPERIMENT.toml`): sweep its parameters, write CSV, JSON
    /// and SVG plots, and print the paper's figures beside ours.
    Lab(lab_cmd::LabArgs),
    /// Shape real traffic between two interfaces (a bump in the wire) as FILE configures.
    Run(run_cmd::RunArgs),
    /// Print a running daemon's per-class counters and rates, like `tc -s class show`.
    Stats(stats_cmd::StatsArgs),
    /// Add, change, delete, list or show a running daemon's classes (its control socket).
    Class(class_cmd::ClassArgs),
    /// Build a throwaway sender/shaper/receiver topology, shape real kernel TCP through the
    /// daemon and print a conformance table (the simulator without CAP_NET_ADMIN).
    Demo(demo_cmd::DemoArgs),
    /// Shape the same kernel TCP on the same topology with Metronome, kernel HTB and kernel TBF
    /// and compare achieved rate, deviation, probe RTT and CPU (needs CAP_NET_ADMIN).
    Compare(compare_args::CompareArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse_from(compare_args::with_mode_aliases(
        std::env::args_os().collect(),
    ));
    if matches!(cli.command, Command::Demo(_)) {
        // Before any thread exists: SIGINT/SIGTERM then remove the demo's namespaces.
        demo_cmd::install_cleanup();
    }
    if matches!(cli.command, Command::Compare(_)) {
        // Likewise for the comparison's namespaces.
        compare_cmd::install_cleanup();
    }
    match cli.command {
        Command::Bench(args) => bench_cmd::run(args),
        Command::Lab(args) => lab_cmd::run(args),
        Command::Run(args) => run_cmd::run(args),
        Command::Stats(args) => stats_cmd::run(args),
        Command::Class(args) => class_cmd::run(args),
        Command::Demo(args) => demo_cmd::run(args),
        Command::Compare(args) => compare_cmd::run(args),
    }
}
