//! The entry point of `metronome run --config FILE [--cores N]` ([`run_daemon`]): load and
//! validate the configuration, install the logging and the signal handlers, start the metrics
//! endpoint, open AF_PACKET ports on the two interfaces and run the loop until SIGINT or SIGTERM;
//! SIGHUP re-reads the file.
//!
//! Errors a user can fix are one line and exit with status 2 ([`DaemonError::exit_code`]): a bad
//! configuration (`FILE:LINE: FIELD: MESSAGE`), a missing interface or a missing capability
//! (both named by [`metronome_io::PortError`]), a metrics address already in use.
//!
//! With `[daemon] cores` (or `--cores`) above 1 it runs that many shaper silos
//! ([`crate::silo::run_silos`], Carousel §5.3); with 1, one loop on the calling thread
//! ([`run_with`]).

use crate::config::{Config, ConfigError, LogFormat};
use crate::engine::Engine;
use crate::metrics::{Metrics, MetricsError};
use crate::ports::{enable_gro, frame_pool, open_ports, reverse_pool};
use crate::reload::{FileReload, Reloader};
use crate::run::{run_loop, Control, LoopOptions, LoopReport, Pools};
use crate::silo::run_silos;
use metronome_io::{MonotonicClock, PortError};
use std::path::Path;

/// Why the daemon could not start or stopped. Built once per run, on a cold path, so the
/// configuration error (file, line, field, message) is not boxed.
#[allow(clippy::result_large_err)]
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The configuration file is missing or invalid.
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// An interface is missing, or the process lacks a capability.
    #[error("{0}")]
    Port(#[from] PortError),
    /// The metrics endpoint could not be bound.
    #[error("{0}")]
    Metrics(#[from] MetricsError),
    /// Signal handlers could not be installed.
    #[error("installing signal handlers failed: {0}")]
    Signals(std::io::Error),
}

impl DaemonError {
    /// The process exit status: 2 for what the user must fix (configuration, interface,
    /// capability, metrics address), 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            DaemonError::Config(_) | DaemonError::Port(_) | DaemonError::Metrics(_) => 2,
            DaemonError::Signals(_) => 1,
        }
    }
}

/// Installs the global `tracing` subscriber: human-readable lines or one JSON object per line,
/// filtered by `RUST_LOG` (default `info`). A second call changes nothing.
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Runs the shaping loop for `config` on the calling thread until `control.stop` is set;
/// `control.reload` re-reads `config_path` (ignored when it is `None`).
pub fn run_with(
    config: &Config,
    config_path: Option<&Path>,
    metrics: &Metrics,
    control: &Control,
) -> Result<LoopReport, PortError> {
    let (mut inside, mut outside) = open_ports(config)?;
    enable_gro(config);
    crate::notify::notify("READY=1");
    let mut pool = frame_pool(config);
    let mut back = reverse_pool(config);
    let seed = crate::flow_seed::FlowSeed::draw();
    let mut engine = Engine::seeded(config, pool.capacity(), metrics.clone(), seed);
    let options = LoopOptions::from_config(config);
    let reloader = config_path.map(|p| Reloader::new(p.to_path_buf(), config.clone()));
    let mut hook = FileReload::new(control.reload.clone(), reloader);
    tracing::info!(
        inside = %config.interfaces.inside,
        outside = %config.interfaces.outside,
        classes = config.classes.len(),
        frame_slots = pool.capacity(),
        busy_poll = options.busy_poll,
        "shaping"
    );
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

/// `metronome run --config FILE [--cores N]`: `cores` overrides `[daemon] cores`. See the
/// module docs.
#[allow(clippy::result_large_err)] // see `DaemonError`
pub fn run_daemon(config_path: &Path, cores: Option<usize>) -> Result<(), DaemonError> {
    let mut config = Config::load(config_path)?;
    if let Some(n) = cores {
        config.daemon.cores = n.clamp(1, crate::config::MAX_CORES);
    }
    init_logging(config.daemon.log_format);
    if config.link.is_some() && config.daemon.cores > 1 {
        // Validation refuses `cores > 1` with a `[link]` in the file; `--cores` comes after.
        tracing::warn!(
            cores = config.daemon.cores,
            "a [link] is drained by one silo: --cores ignored"
        );
        config.daemon.cores = 1;
    }
    let control = Control::default();
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    for (signal, flag) in [
        (SIGHUP, &control.reload),
        (SIGINT, &control.stop),
        (SIGTERM, &control.stop),
    ] {
        signal_hook::flag::register(signal, flag.clone()).map_err(DaemonError::Signals)?;
    }
    let metrics = Metrics::with_silos(config.daemon.cores);
    if !is_loopback_listen(config.daemon.metrics_listen) {
        tracing::warn!(
            addr = %config.daemon.metrics_listen,
            "metrics endpoint listens beyond loopback: it has no authentication"
        );
    }
    let server = metrics.serve(config.daemon.metrics_listen)?;
    tracing::info!(addr = %server.addr(), "metrics endpoint");
    if config.daemon.cores > 1 {
        for (silo, r) in run_silos(&config, Some(config_path), &metrics, &control)?
            .iter()
            .enumerate()
        {
            tracing::info!(silo, pinned = ?r.pinned, refused_rates = r.refused_rates, "silo");
            log_report(&r.report);
        }
    } else {
        let report = run_with(&config, Some(config_path), &metrics, &control)?;
        log_report(&report);
    }
    Ok(())
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
    let refused = crate::refused::Refusals::of(&r.inside, &r.outside, &r.cuts);
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
        busy_pct = format_args!("{:.1}", r.busy_pct()),
        "stopped"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_interface_is_named_and_exits_2() {
        let text = "[interfaces]\ninside = \"mtr-nope0\"\noutside = \"mtr-nope1\"\n";
        let config = Config::from_toml_str(text, "t.toml").unwrap();
        let err = DaemonError::from(open_ports(&config).unwrap_err());
        assert_eq!(err.exit_code(), 2);
        let msg = err.to_string();
        // Without CAP_NET_RAW the capability is named instead; either way, one line.
        assert!(msg.contains("mtr-nope0"), "{msg}");
        assert!(!msg.contains('\n'));
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
        let err = run_daemon(&path, None).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(
            err.to_string().contains("bad.toml:6: class[0].rate"),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
