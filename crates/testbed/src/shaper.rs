//! The daemon on a topology: [`spawn_shaper`] runs [`metronome_daemon::ops::service::run_with`]
//! (the single loop) and [`spawn_silos`] runs [`metronome_daemon::driver::silo::run_silos`] on a
//! new thread inside a network namespace, so that the AF_PACKET ports open on that namespace's
//! interfaces (`in0` / `out0` of a [`crate::netns::Topology`]). `metronome demo`, `metronome
//! compare` and the integration tests use them.

use crate::netns::{Namespace, TopoError};
use metronome_daemon::driver::run::{Control, LoopReport};
use metronome_daemon::driver::silo::{run_silos, SiloReport};
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
/// The thread of [`spawn_silos`]: joins to every silo's report, or why they could not run.
pub type SilosThread = DaemonThread<Vec<SiloReport>>;

/// Runs the loop for `config` on a new thread inside namespace `ns` (ports are opened there).
/// Set `control.stop` and join the handle for the report.
pub fn spawn_shaper(
    ns: &Namespace,
    config: Config,
    metrics: Metrics,
    control: Control,
) -> Result<ShaperThread, TopoError> {
    spawn_in(ns, config, metrics, control, run_with)
}

/// Runs `config.daemon.cores` silos for `config` inside namespace `ns` (ports are opened
/// there; the calling thread of [`run_silos`] is the new one). `metrics` must have as many silos
/// ([`Metrics::with_silos`]). Set `control.stop` and join the handle for the reports.
pub fn spawn_silos(
    ns: &Namespace,
    config: Config,
    metrics: Metrics,
    control: Control,
) -> Result<SilosThread, TopoError> {
    spawn_in(ns, config, metrics, control, run_silos)
}

/// The entry point of the daemon's loop or silos, as [`spawn_in`] calls it.
type Entry<T> = fn(&Config, Option<&Path>, &Metrics, &Control) -> Result<T, PortError>;

/// Runs `entry` on a new thread inside `ns`; a loop that fails to start sets `control.stop`, so
/// that whatever waits on it stops too.
fn spawn_in<T: Send + 'static>(
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
