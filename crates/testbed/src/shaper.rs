//! The daemon on a topology: [`spawn_daemon`] runs an entry point of the daemon (the single
//! loop, [`metronome_daemon::ops::service::run_with`], which [`spawn_shaper`] runs, or the silos,
//! [`metronome_daemon::driver::silo::run_silos`]) on a new thread inside a network namespace, so
//! that the AF_PACKET ports open on that namespace's interfaces (`in0` / `out0` of a
//! [`crate::netns::Topology`]). `metronome demo`, `metronome compare` and the integration tests
//! use them.

use crate::netns::{Namespace, TopoError};
use metronome_daemon::driver::run::{Control, LoopReport};
use metronome_daemon::driver::silo::SiloReport;
use metronome_daemon::ops::config::Config;
use metronome_daemon::ops::metrics::Metrics;
use metronome_daemon::ops::service::run_with;
use metronome_io::PortError;
use std::path::Path;
use std::sync::atomic::Ordering;

/// A thread running the daemon inside a namespace: joins to its report `T`, or why it could
/// not run.
pub type DaemonThread<T> = std::thread::JoinHandle<Result<Result<T, PortError>, TopoError>>;
/// The thread of [`spawn_shaper`]: joins to the loop's report, or why it could not run.
pub type ShaperThread = DaemonThread<LoopReport>;
/// The thread of [`spawn_daemon`] with `run_silos`: joins to every silo's report, or why they
/// could not run.
pub type SilosThread = DaemonThread<Vec<SiloReport>>;

/// Runs the loop for `config` on a new thread inside namespace `ns` (ports are opened there).
/// Set `control.stop` and join the handle for the report.
pub fn spawn_shaper(
    ns: &Namespace,
    config: Config,
    metrics: Metrics,
    control: Control,
) -> Result<ShaperThread, TopoError> {
    spawn_daemon(ns, config, metrics, control, run_with)
}

/// An entry point of the daemon's loop or silos, as [`spawn_daemon`] calls it.
pub type Entry<T> = fn(&Config, Option<&Path>, &Metrics, &Control) -> Result<T, PortError>;

/// Runs `entry` for `config` on a new thread inside `ns` (ports are opened there; with
/// `run_silos`, `config.daemon.cores` silos, and `metrics` must have as many,
/// [`Metrics::with_silos`]); a loop that fails to start sets `control.stop`, so that whatever
/// waits on it stops too. Set `control.stop` and join the handle for the report.
pub fn spawn_daemon<T: Send + 'static>(
    ns: &Namespace,
    config: Config,
    metrics: Metrics,
    control: Control,
    entry: Entry<T>,
) -> Result<DaemonThread<T>, TopoError> {
    ns.spawn(move || {
        let result = entry(&config, None, &metrics, &control);
        if result.is_err() {
            control.stop.store(true, Ordering::Relaxed);
        }
        result
    })
}
