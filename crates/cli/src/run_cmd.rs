//! `metronome run --config FILE [--cores N]`: the shaping daemon (`metronome_daemon::service::run_daemon`).
//!
//! Exit status: 0 after a clean stop (SIGINT or SIGTERM); 2 for a bad configuration (the message
//! names the file, line and field), a missing interface or a missing capability (the message
//! names it) or a metrics address in use; 1 for anything else.

use clap::Args;
use std::path::PathBuf;

/// Options of `metronome run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The daemon's TOML configuration (see docs/config.md and examples/).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Shaper silos, one thread and timing wheel each, flows spread by the kernel's flow hash
    /// (overrides `[daemon] cores`; default: the file's, else 1).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
    cores: Option<u16>,
}

/// Runs the daemon until SIGINT or SIGTERM; exits the process with status 2 or 1 on error.
pub fn run(args: RunArgs) -> anyhow::Result<()> {
    match metronome_daemon::service::run_daemon(&args.config, args.cores.map(usize::from)) {
        Ok(_) => Ok(()),
        Err(e) => {
            eprintln!("metronome run: {e}");
            std::process::exit(e.exit_code());
        }
    }
}
