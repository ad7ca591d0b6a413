//! The entry point of `metronome run --config FILE [--cores N]` ([`run_daemon`]): load and
//! validate the configuration, install the logging and the signal handlers, open AF_PACKET ports
//! on the two interfaces, bind the control socket ([`crate::ops::control`], `[daemon] control`),
//! drop privileges ([`crate::os::privileges`]), start the metrics endpoint and the control
//! socket's thread, and run the loop until SIGINT or SIGTERM; SIGHUP re-reads the file.
//!
//! The privileges are dropped once every port is open and GRO is set up, while the daemon still
//! has one thread: capabilities belong to threads, so the metrics endpoint's threads and the
//! silos, started after, inherit the reduced sets. The metrics endpoint is therefore bound
//! without privilege: its port must be one any user may bind (1024 and above by default).
//!
//! Exit status ([`DaemonError::exit_code`]), chosen for a supervisor that restarts on failure
//! (`examples/metronome.service`: `Restart=on-failure`, `RestartPreventExitStatus=2`):
//!
//! | status | meaning | restart helps |
//! |---|---|---|
//! | 0 | stopped by SIGINT or SIGTERM | - |
//! | 2 | a start-up error the user must fix: a bad configuration (`FILE:LINE: FIELD: MESSAGE`), a missing interface or capability (named by [`metronome_io::PortError`]), a metrics address in use, a control socket a running daemon listens on (or that cannot be made), a bad `[daemon] user` | no |
//! | 1 | another start-up failure (installing the signal handlers) | maybe |
//! | 3 | a runtime failure ([`RuntimeError`]): a port error once the loop ran, a panic of the loop, of a silo or of any other thread; every loop and silo was stopped first | yes |
//!
//! With `[daemon] cores` (or `--cores`) above 1 it runs that many shaper silos
//! ([`crate::driver::silo::run_silos`], Carousel §5.3); with 1, one loop on the calling thread
//! ([`run_with`]).

pub mod attached;

pub use crate::os::early::load_logged as load_early;

use crate::driver::reload::{FileReload, Reloader};
use crate::driver::run::{run_loop, Control, LoopOptions, LoopReport, Pools};
use crate::driver::silo::{panic_message, run_silos_on, SiloReport};
use crate::ops::config::{Config, ConfigError, LogFormat};
use crate::ops::control::{ControlServer, Live};
use crate::ops::metrics::{Metrics, MetricsError};
use crate::os::attach::{AttachError, Attachment};
use crate::os::ports::open_attached_ports;
use crate::os::ports::{enable_gro, frame_pool, open_ports, open_silo_ports, reverse_pool};
use crate::os::privileges::{drop_privileges, PrivilegeError};
use metronome_io::{AfPacketPort, MonotonicClock, PortError};
use std::ffi::OsStr;
use std::io::IsTerminal;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Exit status of a start-up error a restart cannot fix (see the module docs).
pub const EXIT_USER_ERROR: i32 = 2;
/// Exit status of a start-up failure a restart may fix (see the module docs).
pub const EXIT_START_FAILED: i32 = 1;
/// Exit status of a failure once the daemon was shaping (see the module docs).
pub const EXIT_RUNTIME_FAILURE: i32 = 3;

/// Why the daemon could not start or stopped. Built once per run, on a cold path, so the
/// configuration error (file, line, field, message) is not boxed.
#[allow(clippy::result_large_err)]
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The configuration file is missing or invalid.
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// At start-up: an interface is missing, or the process lacks a capability.
    #[error("{0}")]
    Port(#[from] PortError),
    /// The metrics endpoint could not be bound.
    #[error("{0}")]
    Metrics(#[from] MetricsError),
    /// `[daemon] user` is unknown, or the privileges could not be dropped.
    #[error("{0}")]
    Privileges(#[from] PrivilegeError),
    /// `daemon.realtime_priority` cannot be had.
    #[error("{0}")]
    Realtime(#[from] crate::os::realtime::RealtimeError),
    /// Signal handlers could not be installed.
    #[error("installing signal handlers failed: {0}")]
    Signals(std::io::Error),
    /// Attach mode could not start (`crate::os::attach`).
    #[error("{0}")]
    Attach(#[from] AttachError),
    /// The control socket could not be opened, or a running daemon listens on it.
    #[error("{0}")]
    Control(#[from] crate::ops::control::ControlError),
    /// The cluster agent could not start (`crate::ops::cluster`).
    #[error("{0}")]
    Cluster(#[from] crate::ops::cluster::ClusterError),
    /// The inside and outside interfaces would make a loop (`crate::os::ports::refuse_loop`).
    #[error("{0}")]
    Loop(#[from] crate::os::ports::LoopError),
    /// The daemon was shaping and failed; everything was stopped.
    #[error("{0}")]
    Runtime(#[from] RuntimeError),
}

/// A failure once the loop or the silos ran: the daemon stopped all of them.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A port failed while the loop ran.
    #[error("stopped on a port error: {0}")]
    Port(PortError),
    /// A thread panicked (its name and message).
    #[error("stopped on a panic: {0}")]
    Panicked(String),
    /// Attach mode: moving the hooks to a reloaded list of interfaces failed.
    #[error("stopped: re-attaching failed: {0}")]
    Reattach(AttachError),
}

impl DaemonError {
    /// The process exit status: [`EXIT_USER_ERROR`] (2) for what the user must fix
    /// (configuration, interface, capability, metrics address, user), [`EXIT_RUNTIME_FAILURE`]
    /// (3) for a failure while shaping, [`EXIT_START_FAILED`] (1) otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            DaemonError::Config(_)
            | DaemonError::Port(_)
            | DaemonError::Metrics(_)
            | DaemonError::Privileges(_)
            | DaemonError::Realtime(_)
            | DaemonError::Attach(_)
            | DaemonError::Control(_)
            | DaemonError::Cluster(_)
            | DaemonError::Loop(_) => EXIT_USER_ERROR,
            DaemonError::Signals(_) => EXIT_START_FAILED,
            DaemonError::Runtime(_) => EXIT_RUNTIME_FAILURE,
        }
    }
}

/// Installs the global `tracing` subscriber on standard error: human-readable lines or one JSON
/// object per line, filtered by `RUST_LOG` (default `info`), with ANSI colour only where
/// [`log_ansi`] allows it. A second call changes nothing.
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = log_ansi(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Whether log lines may carry ANSI colour and styles: only when standard error, where they go,
/// is a terminal (a file, a pipe or the journal would keep the escape sequences as text), and
/// not when `NO_COLOR` is set to a non-empty value (<https://no-color.org>: set and not empty
/// turns colour off; set but empty counts as unset). `no_color` is the variable's value, if set.
pub fn log_ansi(stderr_is_terminal: bool, no_color: Option<&OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(OsStr::is_empty)
}

/// Runs the shaping loop for `config` on the calling thread until `control.stop` is set;
/// `control.reload` re-reads `config_path` (ignored when it is `None`). Loads the early filter
/// as the daemon does when `control` has none ([`crate::os::early::load_logged`]), opens the ports, switches GRO
/// on, then [`run_on`].
pub fn run_with(
    config: &Config,
    config_path: Option<&Path>,
    metrics: &Metrics,
    control: &Control,
) -> Result<LoopReport, PortError> {
    // The ports first, so that frames arriving while the filter loads wait on the socket.
    let (mut inside, outside) = open_ports(config, None)?;
    let control = &control.with_early(config);
    if let Some(early) = &control.early {
        inside.set_socket_filter(early.program_fd())?;
    }
    enable_gro(config);
    run_on(inside, outside, config, config_path, metrics, control)
}

/// The single loop of [`run_with`] on ports already open.
pub fn run_on(
    mut inside: AfPacketPort,
    mut outside: AfPacketPort,
    config: &Config,
    config_path: Option<&Path>,
    metrics: &Metrics,
    control: &Control,
) -> Result<LoopReport, PortError> {
    let mut pool = frame_pool(config);
    let mut back = reverse_pool(config);
    let seed = crate::datapath::flow_seed::FlowSeed::draw();
    // With a control socket, the engine starts with the API's classes too.
    let merged = control.live.as_ref().map(|l| l.merged(config));
    let config = merged.as_ref().unwrap_or(config);
    let mut engine = crate::driver::reload::engine(config, pool.capacity(), metrics, seed);
    let options = LoopOptions::from_config(config)
        .with_early(control.early_loop(0, true))
        .with_pace(control.pace_loop(0));
    let reloader = config_path.map(|p| {
        Reloader::new(p.to_path_buf(), config.clone())
            .selecting(metrics)
            .publishing(control.applied.clone())
            .reattaching(control.reattach.clone())
            .keeping(control.live.clone())
    });
    let endpoint = control.live.as_ref().and_then(|l| l.endpoint(0, 1));
    let cluster = (!control.cluster.is_empty())
        .then(|| crate::ops::cluster::ClusterPort::new(&control.cluster, 0, true, &engine));
    let mut hook = FileReload::new(control.reload.clone(), reloader)
        .with_live(endpoint)
        .with_cluster(cluster);
    tracing::info!(
        inside = %inside.ifname(),
        outside = %outside.ifname(),
        classes = config.classes.len(),
        frame_slots = pool.capacity(),
        busy_poll = options.busy_poll,
        "shaping"
    );
    // Ready once the engine is built: with many classes that takes a while, and a supervisor
    // (or a test) that sends traffic on READY=1 must find it shaped.
    crate::os::notify::notify("READY=1");
    crate::os::realtime::nice_logged(config.daemon.nice, "loop");
    crate::os::realtime::enter_logged(config.daemon.realtime_priority, "loop");
    run_loop(
        &mut inside,
        &mut outside,
        Pools {
            shaped: &mut pool,
            reverse: &mut back,
        },
        &mut engine,
        &MonotonicClock::new(),
        metrics,
        &options,
        &control.stop,
        &mut hook,
    )
}

/// The daemon's open ports: one pair for the single loop (boxed: a port is 272 bytes, and this
/// lives once, at start-up), or one per silo.
pub(crate) enum OpenPorts {
    Single(Box<(AfPacketPort, AfPacketPort)>),
    Silos(Vec<(AfPacketPort, AfPacketPort)>),
}

impl OpenPorts {
    pub(crate) fn open(
        config: &Config,
        attachment: Option<&Attachment>,
        early: Option<&crate::os::early::EarlyFilter>,
    ) -> Result<OpenPorts, PortError> {
        if let Some(a) = attachment {
            let pairs: Vec<(&str, &str, u32)> = a
                .uplinks()
                .iter()
                .map(|u| {
                    let mark = u.send_mark(a.origin_mark());
                    (u.recv.0.as_str(), u.name.as_str(), mark)
                })
                .collect();
            let mut ports = open_attached_ports(config, &pairs, early)?;
            return Ok(if ports.len() == 1 {
                OpenPorts::Single(Box::new(ports.remove(0)))
            } else {
                OpenPorts::Silos(ports)
            });
        }
        Ok(if config.daemon.cores > 1 {
            OpenPorts::Silos(open_silo_ports(config, config.daemon.cores, early)?)
        } else {
            OpenPorts::Single(Box::new(open_ports(config, early)?))
        })
    }

    /// Runs the loop or the silos on these ports and logs their reports.
    pub(crate) fn run(
        self,
        config: &Config,
        config_path: &Path,
        metrics: &Metrics,
        control: &Control,
    ) -> Result<(), PortError> {
        match self {
            OpenPorts::Single(pair) => {
                let (inside, outside) = *pair;
                let report = run_on(inside, outside, config, Some(config_path), metrics, control)?;
                log_report(&report);
            }
            OpenPorts::Silos(ports) => {
                let reports = run_silos_on(ports, config, Some(config_path), metrics, control)?;
                log_silos(&reports);
            }
        }
        Ok(())
    }
}

/// `metronome run --config FILE [--cores N] [--control PATH]`: `cores` overrides `[daemon]
/// cores`, `control` `[daemon] control` (an empty path: no control socket). See the module
/// docs.
#[allow(clippy::result_large_err)] // see `DaemonError`
pub fn run_daemon(
    config_path: &Path,
    cores: Option<usize>,
    control_path: Option<&Path>,
) -> Result<(), DaemonError> {
    let mut config = Config::load(config_path)?;
    if let Some(n) = cores {
        config.daemon.cores = n.clamp(1, crate::ops::config::MAX_CORES);
    }
    if let Some(p) = control_path {
        config.daemon.control = (!p.as_os_str().is_empty()).then(|| p.to_path_buf());
    }
    init_logging(config.daemon.log_format);
    if config.is_attach() {
        if config.daemon.cores > 1 {
            tracing::warn!(
                cores = config.daemon.cores,
                "attach mode runs one silo per attached interface and bridge: cores ignored"
            );
        }
        config.daemon.cores = config.attached_silos();
        if config.link.is_some() && config.daemon.cores > 1 {
            return Err(AttachError::Interface {
                ifname: [
                    &config.interfaces.attach[..],
                    &config.interfaces.bridges[..],
                ]
                .concat()
                .join(","),
                reason: "a [link] is one port: attach to one interface with it".to_string(),
            }
            .into());
        }
    }
    if config.link.is_some() && config.daemon.cores > 1 {
        // Validation refuses `cores > 1` with a `[link]` in the file; `--cores` comes after.
        tracing::warn!(
            cores = config.daemon.cores,
            "a [link] is drained by one silo: --cores ignored"
        );
        config.daemon.cores = 1;
    }
    let mut control = Control::default();
    // In attach mode a stop request goes to the hooks' watcher first, which detaches the capture
    // hooks before it stops the loops (`crate::ops::service::attached`).
    let quit = if config.is_attach() {
        Arc::new(AtomicBool::new(false))
    } else {
        control.stop.clone()
    };
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    for (signal, flag) in [(SIGHUP, &control.reload), (SIGINT, &quit), (SIGTERM, &quit)] {
        signal_hook::flag::register(signal, flag.clone()).map_err(DaemonError::Signals)?;
    }
    if config.is_attach() {
        return attached::run_attached(config, config_path, &mut control, &quit);
    }
    crate::os::ports::refuse_loop(&config)?;
    control.early = crate::os::early::load_logged(&config);
    let ports = OpenPorts::open(&config, None, control.early.as_deref())?;
    enable_gro(&config);
    let bound = bind_control(&config)?;
    let cluster = prepare_cluster(&config, &mut control)?;
    // The loops' nice value while it may still be lowered; later threads inherit it, and those
    // that do not shape make themselves ordinary again.
    crate::os::realtime::nice_logged(config.daemon.nice, "main");
    dropped_privileges(&config)?;
    let metrics = Metrics::with_silos(config.daemon.cores);
    let _agent = start_cluster(cluster, &control, &metrics)?;
    let server = serve_metrics(&config, &metrics)?;
    let _control_server = serve_control(bound, &config, &metrics, &mut control)?;
    let panicked = stop_on_panic(control.stop.clone());
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ports.run(&config, config_path, &metrics, &control)
    }));
    control.stop.store(true, Ordering::Relaxed);
    drop(server);
    let first_panic = panicked
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    runtime_outcome(run, first_panic)
}

/// With a `[cluster]`: the cells of its classes into `control` and what its agent needs from
/// the file system (TLS files, the etcd password), read before the privileges go.
#[allow(clippy::result_large_err)] // see `DaemonError`
pub(crate) fn prepare_cluster(
    config: &Config,
    control: &mut Control,
) -> Result<Option<crate::ops::cluster::Prepared>, DaemonError> {
    let Some(section) = &config.cluster else {
        return Ok(None);
    };
    let prepared = crate::ops::cluster::prepare(section)?;
    // A slot per possible silo, so that attach mode's re-attach (another silo count) keeps them.
    control.cluster = crate::ops::cluster::cells(config, crate::ops::config::MAX_CORES);
    Ok(Some(prepared))
}

/// Starts the cluster agent [`prepare_cluster`] prepared, counting into `metrics`.
#[allow(clippy::result_large_err)] // see `DaemonError`
pub(crate) fn start_cluster(
    prepared: Option<crate::ops::cluster::Prepared>,
    control: &Control,
    metrics: &Metrics,
) -> Result<Option<crate::ops::cluster::Agent>, DaemonError> {
    let Some(p) = prepared else {
        return Ok(None);
    };
    tracing::info!(host = p.host(), "cluster classes shared through etcd");
    Ok(Some(p.start(control.cluster.clone(), metrics.cluster())?))
}

/// Drops the privileges ([`drop_privileges`], `[daemon] user`) and logs what was kept.
#[allow(clippy::result_large_err)] // see `DaemonError`
pub(crate) fn dropped_privileges(config: &Config) -> Result<(), DaemonError> {
    let extra = match config.daemon.realtime_priority {
        Some(priority) => crate::os::realtime::prepare(priority)?,
        None => None,
    };
    let extra: Vec<_> = extra.into_iter().collect();
    let dropped = drop_privileges(config.daemon.user.as_deref(), &extra)?;
    tracing::info!(
        uid = dropped.uid,
        kept = %crate::os::privileges::names(&dropped.kept),
        bounding_trimmed = dropped.bounding_trimmed,
        "privileges dropped"
    );
    Ok(())
}

/// Binds the control socket of `daemon.control`, if any ([`ControlServer::bind`]), owned by
/// `daemon.user` when set: called before the privileges are dropped, as the socket's directory
/// (`/run/metronome` by default) needs root to be made.
#[allow(clippy::result_large_err)] // see `DaemonError`
pub(crate) fn bind_control(config: &Config) -> Result<Option<BoundControl>, DaemonError> {
    let Some(path) = &config.daemon.control else {
        return Ok(None);
    };
    // An unknown user is refused by the privilege drop that follows.
    let owner = config.daemon.user.as_deref().and_then(|name| {
        let user = nix::unistd::User::from_name(name).ok().flatten()?;
        Some((user.uid.as_raw(), user.gid.as_raw()))
    });
    let listener = ControlServer::bind(path, owner)?;
    // `class_dir` is read now, with the privileges the daemon started with: `metronome-cni`
    // writes it as root, mode 0600 in a directory of mode 0700 (docs/cni.md).
    let class_files = config.daemon.class_dir.as_ref().map(|dir| {
        let mut owners = vec![nix::unistd::geteuid().as_raw()];
        owners.extend(owner.map(|(uid, _)| uid));
        crate::ops::control::class_dir::load(
            dir,
            |name| nix::net::if_::if_nametoindex(name).is_ok(),
            &owners,
            config.daemon.max_api_classes,
        )
    });
    Ok(Some(BoundControl {
        listener,
        path: path.clone(),
        class_files,
    }))
}

/// The control socket [`bind_control`] bound, and the files of `[daemon] class_dir` it read.
#[derive(Debug)]
pub(crate) struct BoundControl {
    listener: std::os::unix::net::UnixListener,
    path: std::path::PathBuf,
    class_files: Option<crate::ops::control::class_dir::Loaded>,
}

/// Serves the socket [`bind_control`] bound, for `config.daemon.cores` loops, and puts its
/// model in `control` for the loops. With `[daemon] class_dir`, its files' classes are added
/// first (`crate::ops::control::class_dir::apply` of what [`bind_control`] read), before a client and before the loops,
/// whose engines start from the model.
#[allow(clippy::result_large_err)] // see `DaemonError`
pub(crate) fn serve_control(
    bound: Option<BoundControl>,
    config: &Config,
    metrics: &Metrics,
    control: &mut Control,
) -> Result<Option<ControlServer>, DaemonError> {
    let Some(BoundControl {
        listener,
        path,
        class_files,
    }) = bound
    else {
        if let Some(dir) = &config.daemon.class_dir {
            tracing::warn!(dir = %dir.display(), "class_dir needs the control socket: not read");
        }
        return Ok(None);
    };
    let live = Live::new(config, config.daemon.cores, metrics.clone()).map_err(|source| {
        crate::ops::control::ControlError::Io {
            path: path.clone(),
            op: "making the loops' eventfds",
            source,
        }
    })?;
    control.live = Some(live.clone());
    if let (Some(dir), Some(files)) = (&config.daemon.class_dir, class_files) {
        // Before the loops start: their engines take the restored classes from the model.
        let done = crate::ops::control::class_dir::apply(&live, files);
        tracing::info!(
            dir = %dir.display(),
            added = done.added,
            refused = done.refused,
            gone = done.gone,
            invalid = done.invalid,
            skipped = done.skipped,
            over_cap = done.over_cap,
            "class_dir restored"
        );
    }
    Ok(Some(ControlServer::serve(
        listener,
        &path,
        live,
        config.daemon.realtime_priority,
    )))
}

/// Starts the metrics endpoint of `metrics` on `daemon.metrics_listen`, warning when it is not
/// loopback.
#[allow(clippy::result_large_err)] // see `DaemonError`
pub(crate) fn serve_metrics(
    config: &Config,
    metrics: &Metrics,
) -> Result<crate::ops::metrics::MetricsServer, DaemonError> {
    if !is_loopback_listen(config.daemon.metrics_listen) {
        tracing::warn!(
            addr = %config.daemon.metrics_listen,
            "metrics endpoint listens beyond loopback: it has no authentication"
        );
    }
    let server = metrics.serve_with(
        config.daemon.metrics_listen,
        crate::ops::metrics::HttpLimits::default(),
        crate::os::realtime::ordinary,
    )?;
    tracing::info!(addr = %server.addr(), "metrics endpoint");
    Ok(server)
}

/// What the daemon's run comes to: a loop's error or any panic is a [`RuntimeError`];
/// `first_panic` is what [`stop_on_panic`] recorded (it names the thread, so it is preferred
/// to the payload that reached the caller).
#[allow(clippy::result_large_err)] // see `DaemonError`
pub fn runtime_outcome(
    run: std::thread::Result<Result<(), PortError>>,
    first_panic: Option<String>,
) -> Result<(), DaemonError> {
    let error = match (run, first_panic) {
        (Ok(Ok(())), None) => return Ok(()),
        (Ok(Err(e)), _) => RuntimeError::Port(e),
        (_, Some(recorded)) => RuntimeError::Panicked(recorded),
        (Err(payload), None) => RuntimeError::Panicked(panic_message(&*payload)),
    };
    tracing::error!(error = %error, "runtime failure: every loop stopped");
    Err(error.into())
}

/// Installs a panic hook that, after the default one has printed the panic, records the first
/// panic of any thread (its name, place and message) and sets `stop`: a panicking metrics or
/// other thread stops the loops too, and the daemon exits with [`EXIT_RUNTIME_FAILURE`].
/// Installed once per process, by [`run_daemon`], which the process ends after.
pub(crate) fn stop_on_panic(stop: Arc<AtomicBool>) -> Arc<Mutex<Option<String>>> {
    let first = Arc::new(Mutex::new(None));
    let record = first.clone();
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default(info);
        let thread = std::thread::current();
        let name = thread.name().unwrap_or("unnamed");
        let place = info
            .location()
            .map_or(String::new(), |l| format!(" at {}:{}", l.file(), l.line()));
        let message = panic_message(info.payload());
        let mut slot = record.lock().unwrap_or_else(PoisonError::into_inner);
        slot.get_or_insert_with(|| format!("thread '{name}' panicked{place}: {message}"));
        stop.store(true, Ordering::Relaxed);
    }));
    first
}

/// Logs each silo's pinning and counters.
fn log_silos(reports: &[SiloReport]) {
    for (silo, r) in reports.iter().enumerate() {
        tracing::info!(silo, pinned = ?r.pinned, refused_rates = r.refused_rates, "silo");
        log_report(&r.report);
    }
}

/// Whether `addr` can only be reached from this host: a loopback address, IPv4-mapped IPv6
/// included (`::ffff:127.0.0.1`). The metrics endpoint has no authentication, so any other
/// address (`0.0.0.0` and `::` too) is warned about.
fn is_loopback_listen(addr: std::net::SocketAddr) -> bool {
    addr.ip().to_canonical().is_loopback()
}

/// Logs the counters of a stopped loop.
pub fn log_report(r: &LoopReport) {
    let e = &r.engine;
    let refused = crate::ops::refused::Refusals::of(&r.inside, &r.outside, &r.cuts);
    tracing::info!(
        received = e.received,
        forwarded = e.forwarded,
        shaped = e.released,
        dropped = e.dropped(),
        malformed = e.malformed,
        ecn_marked = e.ecn_marked,
        passed_back = r.passed_back,
        rx_ring_drops = r.inside.rx_ring_drops + r.outside.rx_ring_drops,
        rx_oversize = r.inside.rx_oversize + r.outside.rx_oversize,
        queued_at_stop = r.queued_at_stop,
        link_down_dropped =
            e.dropped_link_down + r.link_down_dropped_outside + r.link_down_dropped_inside,
        superframes = e.superframes,
        refused = refused.total(),
        no_large_slot = refused.no_large_slot,
        gso_truncated = refused.gso_truncated,
        vnet_error = refused.vnet_error,
        piece_failed = refused.piece_failed,
        untagged = refused.untagged,
        busy_pct = format_args!("{:.1}", r.busy_pct()),
        "stopped"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_are_coloured_only_on_a_terminal_without_no_color() {
        fn set(v: &str) -> Option<&OsStr> {
            Some(OsStr::new(v))
        }
        assert!(log_ansi(true, None));
        // NO_COLOR set to an empty value counts as unset (no-color.org).
        assert!(log_ansi(true, set("")));
        assert!(!log_ansi(true, set("1")));
        assert!(
            !log_ansi(true, set("0")),
            "any non-empty value turns colour off"
        );
        for no_color in [None, set(""), set("1")] {
            assert!(!log_ansi(false, no_color), "not a terminal: {no_color:?}");
        }
    }

    #[test]
    fn a_missing_interface_is_named_and_exits_2() {
        let text = "[interfaces]\ninside = \"mtr-nope0\"\noutside = \"mtr-nope1\"\n";
        let config = Config::from_toml_str(text, "t.toml").unwrap();
        let err = DaemonError::from(open_ports(&config, None).unwrap_err());
        assert_eq!(err.exit_code(), 2);
        let msg = err.to_string();
        // Without CAP_NET_RAW the capability is named instead; either way, one line.
        assert!(msg.contains("mtr-nope0"), "{msg}");
        assert!(!msg.contains('\n'));
    }

    fn port_error() -> PortError {
        PortError::Io {
            op: "sendmmsg",
            ifname: "out0".into(),
            source: std::io::Error::other("network is down"),
        }
    }

    #[test]
    fn start_up_errors_exit_2_and_runtime_failures_3() {
        // The same port error is a start-up error (nothing to retry) before the loop, and a
        // runtime failure (restart) from it.
        assert_eq!(DaemonError::from(port_error()).exit_code(), EXIT_USER_ERROR);
        let runtime = DaemonError::from(RuntimeError::Port(port_error()));
        assert_eq!(runtime.exit_code(), EXIT_RUNTIME_FAILURE);
        assert!(
            runtime.to_string().starts_with("stopped on a port error: "),
            "{runtime}"
        );
        let user = PrivilegeError::NoSuchUser { user: "x".into() };
        assert_eq!(DaemonError::from(user).exit_code(), EXIT_USER_ERROR);
        let panicked = DaemonError::from(RuntimeError::Panicked("silo 1 panicked: x".into()));
        assert_eq!(panicked.exit_code(), EXIT_RUNTIME_FAILURE);
        let signals = DaemonError::Signals(std::io::Error::from_raw_os_error(1));
        assert_eq!(signals.exit_code(), EXIT_START_FAILED);
        assert_ne!(EXIT_RUNTIME_FAILURE, EXIT_USER_ERROR);
    }

    #[test]
    fn a_loop_error_or_any_panic_is_a_runtime_failure() {
        assert!(runtime_outcome(Ok(Ok(())), None).is_ok());
        let err = runtime_outcome(Ok(Err(port_error())), None).unwrap_err();
        assert!(
            matches!(err, DaemonError::Runtime(RuntimeError::Port(_))),
            "{err}"
        );
        // A panic that reached the caller, without the hook's record: its payload.
        let payload: Box<dyn std::any::Any + Send> = Box::new("silo 0 panicked: boom");
        let err = runtime_outcome(Err(payload), None).unwrap_err();
        assert_eq!(err.to_string(), "stopped on a panic: silo 0 panicked: boom");
        assert_eq!(err.exit_code(), EXIT_RUNTIME_FAILURE);
        // A thread that panicked while the loop stopped cleanly (the metrics endpoint's): still
        // a failure, named by the record.
        let recorded = Some("thread 'metrics-http' panicked: boom".to_owned());
        let err = runtime_outcome(Ok(Ok(())), recorded).unwrap_err();
        assert!(err.to_string().contains("metrics-http"), "{err}");
        assert_eq!(err.exit_code(), EXIT_RUNTIME_FAILURE);
    }

    #[test]
    fn only_loopback_metrics_addresses_pass_without_a_warning() {
        for (addr, loopback) in [
            ("127.0.0.1:9187", true),
            ("127.8.9.10:1", true),
            ("[::1]:9187", true),
            ("[::ffff:127.0.0.1]:9187", true),
            ("0.0.0.0:9187", false),
            ("[::]:9187", false),
            ("192.0.2.1:9187", false),
            ("[2001:db8::1]:9187", false),
        ] {
            let parsed = addr.parse().unwrap();
            assert_eq!(is_loopback_listen(parsed), loopback, "{addr}");
        }
    }

    #[test]
    fn a_bad_config_exits_2_naming_the_line() {
        let dir = std::env::temp_dir().join(format!("mtr-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.toml");
        std::fs::write(
            &path,
            "[interfaces]\ninside = \"a\"\noutside = \"b\"\n[[class]]\nname = \"x\"\nrate = \"1zbit\"\n",
        )
        .unwrap();
        let err = run_daemon(&path, None, None).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(
            err.to_string().contains("bad.toml:6: class[0].rate"),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
