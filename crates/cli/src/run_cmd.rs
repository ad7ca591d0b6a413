//! `metronome run --config FILE [--cores N] [--control PATH]`: the shaping daemon
//! (`metronome_daemon::ops::service::run_daemon`).
//!
//! Exit status (`metronome_daemon::ops::service`'s module docs have the table): 0 after a clean
//! stop (SIGINT or SIGTERM); 2 for a start-up error a restart cannot fix: a bad configuration (the
//! message names the file, line and field), a missing interface or capability, a metrics
//! address in use, a control socket a running daemon listens on, a bad `[daemon] user` (each named in the message); 3 for a failure once the
//! daemon was shaping (a port error, a panic of any of its threads), after every loop stopped;
//! 1 for another start-up failure. A supervisor restarts on anything but 0 and 2
//! (`examples/metronome.service`).

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
    /// Path of the control socket (`metronome class`), overriding `[daemon] control`; an
    /// empty path: no control socket.
    #[arg(long, value_name = "PATH")]
    control: Option<PathBuf>,
}

/// Runs the daemon until SIGINT or SIGTERM; on error prints it on one line and exits the
/// process with its status (`DaemonError::exit_code`).
pub fn run(args: RunArgs) -> anyhow::Result<()> {
    let cores = args.cores.map(usize::from);
    match metronome_daemon::ops::service::run_daemon(&args.config, cores, args.control.as_deref()) {
        Ok(_) => Ok(()),
        Err(e) => {
            eprintln!("metronome run: {e}");
            std::process::exit(e.exit_code());
        }
    }
}
