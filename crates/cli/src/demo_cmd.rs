//! `metronome demo [--duration 10s]`: with CAP_NET_ADMIN, real kernel TCP through the daemon on
//! a throwaway sender/shaper/receiver topology, live per-class rates and a conformance table
//! (`metronome_testbed::demo::run_real`); without it, one line saying so and the same scenario in
//! the simulator (`metronome_testbed::demo::run_simulated`). Everything it creates is removed at
//! the end, on an error and on Ctrl-C (`metronome_testbed::netns::cleanup_on_signals`).

use clap::Args;
use metronome_testbed::demo::{run_real, run_simulated, DemoError};
use metronome_testbed::netns::TopoError;
use std::time::Duration;

/// Options of `metronome demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// How long the traffic runs (`10s`, `2500ms`).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    duration: Duration,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    metronome_daemon::units::parse_duration(s)
        .map(|d| Duration::from_nanos(d.as_nanos()))
        .map_err(|e| e.to_string())
}

/// Installs the Ctrl-C cleanup; call before any thread starts.
pub fn install_cleanup() {
    if let Err(e) = metronome_testbed::netns::cleanup_on_signals() {
        eprintln!("metronome demo: cannot install the Ctrl-C cleanup: {e}");
    }
}

/// Runs the demo.
pub fn run(args: DemoArgs) -> anyhow::Result<()> {
    metronome_daemon::service::init_logging(Default::default());
    let mut out = std::io::stdout();
    match run_real(args.duration, &mut out) {
        Ok(_) => Ok(()),
        Err(DemoError::Topo(TopoError::MissingPrivilege(_))) => {
            println!(
                "no CAP_NET_ADMIN (needed for network namespaces): running the same scenario in \
                 the simulator instead"
            );
            run_simulated(args.duration, &mut out)?;
            Ok(())
        }
        Err(e) => {
            eprintln!("metronome demo: {e}");
            std::process::exit(1);
        }
    }
}
