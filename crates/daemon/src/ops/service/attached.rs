//! Attach mode's run (`[interfaces] attach` and `bridges`, [`run_attached`]): the hooks and
//! capture pairs of [`crate::os::attach`] around the same loops as the bump in the wire, one per
//! attached interface and bridge (one loop, or silos sharing the classes' rates).
//!
//! A watcher thread ([`watch`]) owns the [`Attachment`]: every [`crate::os::attach::REFRESH`] it
//! follows interfaces and origins; at a stop it detaches the capture hooks first, waits
//! [`RELEASE_SETTLE`], then stops the loops, which drain. A reload that changes only
//! `[interfaces] attach` re-attaches in place (`Attachment::retarget`) and restarts the loops. The
//! order of a stop and of a re-attach: docs/deploy.md, "Attach mode's run".

use crate::driver::run::Control;
use crate::ops::config::Config;
use crate::ops::metrics::Metrics;
use crate::ops::service::{
    bind_control, dropped_privileges, runtime_outcome, serve_control, serve_metrics, stop_on_panic,
    DaemonError, OpenPorts,
};
use crate::os::attach::{AttachError, Attachment};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

/// How long the watcher lets the loops read what was captured before the capture hooks went,
/// before it stops them: a packet redirected just before is in the capture socket within
/// microseconds; 20 ms is far beyond.
pub const RELEASE_SETTLE: Duration = Duration::from_millis(20);

/// How often the watcher looks at the stop and re-attach requests between two refreshes.
const WATCH_TICK: Duration = Duration::from_millis(10);

/// Runs attach mode until `quit` (SIGINT, SIGTERM) or a failure: prepares the hooks, opens the
/// ports, attaches, drops privileges (once), serves metrics, runs the loops; again on every
/// re-attach (see the module docs). `config` has `daemon.cores` = the number of attached
/// interfaces.
#[allow(clippy::result_large_err)] // see `DaemonError`
pub fn run_attached(
    config: Config,
    config_path: &Path,
    control: &mut Control,
    quit: &Arc<AtomicBool>,
) -> Result<(), DaemonError> {
    let metrics = Metrics::with_silos(config.daemon.cores);
    let attachment = Attachment::prepare(&config, &metrics)?;
    control.early = crate::os::early::load_logged(&config);
    control.pace = crate::os::pace::load_logged(&config);
    let result = attached_loops(config, config_path, control, quit, attachment, metrics);
    if let Some(pacing) = control.pace.take() {
        let slowed = pacing.release();
        if slowed > 0 {
            tracing::warn!(
                slowed,
                pins = %pacing.dir().display(),
                "source pacing: sockets still slowed at the stop get their own pacing back when \
                 they next send; the program stays pinned until then, and the next start \
                 removes it"
            );
        }
    }
    result
}

/// The loops of [`run_attached`], again on every re-attach.
#[allow(clippy::result_large_err)] // see `DaemonError`
fn attached_loops(
    mut config: Config,
    config_path: &Path,
    control: &mut Control,
    quit: &Arc<AtomicBool>,
    mut attachment: Attachment,
    mut metrics: Metrics,
) -> Result<(), DaemonError> {
    let mut bound = None;
    let mut _control_server = None;
    let mut _agent = None;
    let mut first = true;
    let panicked = stop_on_panic(control.stop.clone());
    loop {
        let ports = OpenPorts::open(&config, Some(&attachment), control.early.as_deref());
        let ports = match (ports, first) {
            (Ok(p), _) => p,
            (Err(e), true) => return Err(e.into()),
            (Err(e), false) => return runtime_outcome(Ok(Err(e)), None),
        };
        attachment.engage()?;
        if first {
            bound = bind_control(&config)?;
            let cluster = crate::ops::service::prepare_cluster(&config, control)?;
            crate::os::realtime::nice_logged(config.daemon.nice, "main");
            dropped_privileges(&config)?;
            _agent = crate::ops::service::start_cluster(cluster, control, &metrics)?;
        }
        let server = serve_metrics(&config, &metrics)?;
        if first {
            _control_server = serve_control(bound.take(), &config, &metrics, control)?;
        } else if let Some(live) = &control.live {
            if let Err(e) = live.set_loops(config.daemon.cores) {
                tracing::error!(error = %e, "the control socket's inboxes could not be remade");
            }
        }
        first = false;
        let watcher = spawn_watcher(attachment, quit.clone(), control.clone())?;
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ports.run(&config, config_path, &metrics, control)
        }));
        control.stop.store(true, Ordering::Relaxed);
        // The loops are done: the watcher hands the attachment back.
        let back = watcher.join();
        drop(server);
        let first_panic = panicked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let reattach = control
            .reattach
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        attachment = match back {
            Ok(a) => a,
            // The watcher panicked: the hook recorded it and set the stop.
            Err(payload) => return runtime_outcome(Err(payload), first_panic),
        };
        let new = match (run, first_panic, reattach, quit.load(Ordering::Relaxed)) {
            (Ok(Ok(())), None, Some(new), false) => new,
            (run, first_panic, _, _) => return runtime_outcome(run, first_panic),
        };
        metrics = Metrics::with_silos_sharing_cluster(new.daemon.cores, &metrics);
        if let Err(e) = attachment.retarget(&new, &metrics) {
            tracing::error!(error = %e, "re-attaching failed");
            return Err(crate::ops::service::RuntimeError::Reattach(e).into());
        }
        tracing::info!(
            attach = %new.interfaces.attach.join(","),
            bridges = %new.interfaces.bridges.join(","),
            "re-attached"
        );
        config = new;
        control.stop.store(false, Ordering::Relaxed);
    }
}

/// Starts the watcher thread ([`watch`]).
#[allow(clippy::result_large_err)] // see `DaemonError`
fn spawn_watcher(
    attachment: Attachment,
    quit: Arc<AtomicBool>,
    control: Control,
) -> Result<std::thread::JoinHandle<Attachment>, DaemonError> {
    std::thread::Builder::new()
        .name("attach".to_string())
        .spawn(move || {
            crate::os::realtime::ordinary();
            watch(attachment, &quit, &control)
        })
        .map_err(|e| AttachError::Watcher(e.to_string()).into())
}

/// The watcher (see the module docs): follows interfaces and reloads until a stop; on `quit` or
/// a re-attach request it detaches the capture hooks first, waits [`RELEASE_SETTLE`], then
/// stops the loops. Returns the attachment.
pub fn watch(mut attachment: Attachment, quit: &AtomicBool, control: &Control) -> Attachment {
    let mut next_refresh = Instant::now();
    while !control.stop.load(Ordering::Relaxed) {
        let reattach = control
            .reattach
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some();
        if quit.load(Ordering::Relaxed) || reattach {
            attachment.release();
            std::thread::sleep(RELEASE_SETTLE);
            control.stop.store(true, Ordering::Relaxed);
            break;
        }
        let applied = control
            .applied
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(config) = applied {
            attachment.set_origins(&config);
        }
        // A live class that names an origin: hooked or unhooked within this tick.
        if let Some(live) = control.live.as_ref().filter(|l| l.take_origins_changed()) {
            attachment.set_origins(&live.current());
        }
        if Instant::now() >= next_refresh {
            attachment.refresh();
            next_refresh = Instant::now() + crate::os::attach::REFRESH;
        }
        std::thread::sleep(WATCH_TICK);
    }
    attachment
}
