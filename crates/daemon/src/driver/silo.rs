//! Per-core shaper silos (`[daemon] cores = N`, `metronome run --cores N`): Carousel §5.3, "Scaling
//! Carousel with multiple cores".
//!
//! Each silo is one pinned thread with its own [`Engine`], [`metronome_io::FramePool`] and
//! AF_PACKET ports, flows spread by the kernel's `PACKET_FANOUT_HASH` ([`metronome_io::Fanout`]);
//! nothing is shared on the data path (each silo its own metric series, [`Metrics::for_silo`];
//! unpinned when CPUs are short, [`SiloReport::pinned`]). A class's `rate` spanning silos is split
//! by an [`Allocator`] on the coordinator thread (an [`metronome_core::nba::Nba`] and a
//! [`RateExchange`] per class, [`SiloExchange::poll`], [`Engine::set_class_rate`]). Reloads and
//! live classes go through the coordinator; a failed silo stops them all ([`run_silos_on`]). With
//! `cores = 1` the single loop runs instead. The exchange, the reload and the failure rules:
//! `docs/design/carousel.md`.

use crate::datapath::engine::Engine;
use crate::driver::reload::{install, Reloader};
use crate::driver::run::{run_loop, Control, LoopHook, LoopOptions, LoopReport, Pools};
use crate::ops::cluster::{apply_share, ClusterCell, ClusterPort};
use crate::ops::config::Config;
use crate::ops::control::LiveEndpoint;
use crate::ops::metrics::{Metrics, NbaRateGauge};
use crate::os::ports::{frame_pool, open_silo_ports, reverse_pool};
use metronome_core::rate_exchange::RateExchange;
use metronome_core::{Clock, Timestamp};
pub use metronome_engine::allocator::{fresh_rate, Allocator, LimitCell, DEMAND_PUBLISH};
use metronome_io::{MonotonicClock, PacketPort, PortError};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Longest coordinator sleep: bounds how late it notices a stop, a reload or a failed silo
/// (50 ms, as the loop's [`crate::driver::run::MAX_SLEEP`]).
const COORDINATOR_SLEEP: std::time::Duration = std::time::Duration::from_millis(50);

/// The allocator of `config`'s limited classes over `cores` silos (`[daemon] nba_period`, attach
/// mode's placement), the cluster classes' aggregates the shares in `cells`.
pub fn allocator(config: &Config, cores: usize, cells: &[Arc<ClusterCell>]) -> Allocator {
    Allocator::with_cluster(
        config.class_set(),
        config.nba_period(),
        config.placement(),
        cores,
        cells,
    )
}

/// What the coordinator hands a silo on reload, or when the control socket changed the
/// limited classes (the allocator's cells only).
#[derive(Debug, Default)]
struct ReloadBox {
    config: Option<(Config, Vec<LimitCell>)>,
    cells: Option<Vec<LimitCell>>,
}

/// A silo's exchange with the coordinator: its rate cells, its demand publishing, its reload inbox.
/// The silo loop's [`LoopHook`]: polled at the top of every iteration.
#[derive(Debug)]
pub struct SiloExchange {
    silo: usize,
    classes: Vec<ExchangedClass>,
    next_publish: Timestamp,
    reload: Arc<AtomicBool>,
    inbox: Arc<Mutex<ReloadBox>>,
    metrics: Metrics,
    /// Shares the engine refused (class without an aggregate policy, or a zero rate).
    pub refused_rates: u64,
    /// The silo's end of the control socket's inbox (`crate::ops::control`).
    live: Option<LiveEndpoint>,
    /// The silo's demand of the cluster classes (`crate::ops::cluster`).
    cluster: Option<ClusterPort>,
}

#[derive(Debug)]
struct ExchangedClass {
    /// Engine class state index; `None` if the engine has no such class.
    index: Option<usize>,
    exchange: Arc<RateExchange>,
    /// Epoch applied last (0: none yet).
    epoch: u64,
    /// The class's name, for its gauge.
    class: String,
    /// This silo's share of the class (`metronome_nba_rate_bps`): made when the first share is
    /// applied, so that no series says 0 before the allocator has given one.
    rate_gauge: Option<NbaRateGauge>,
}

impl SiloExchange {
    /// The exchange of silo number `silo`, whose engine is `engine`, to the limits `cells`
    /// ([`Allocator::cells`]); `metrics` is the silo's ([`Metrics::for_silo`]).
    pub fn new(
        silo: usize,
        cells: &[LimitCell],
        engine: &Engine,
        metrics: Metrics,
    ) -> SiloExchange {
        let mut exchange = SiloExchange {
            silo,
            classes: Vec::new(),
            next_publish: Timestamp::ZERO,
            reload: Arc::new(AtomicBool::new(false)),
            inbox: Arc::new(Mutex::new(ReloadBox::default())),
            metrics,
            refused_rates: 0,
            live: None,
            cluster: None,
        };
        exchange.rebind(cells, engine);
        exchange
    }

    fn rebind(&mut self, cells: &[LimitCell], engine: &Engine) {
        self.classes = cells
            .iter()
            .map(|c| ExchangedClass {
                index: engine.class_index(&c.class),
                exchange: c.exchange.clone(),
                epoch: 0,
                class: c.class.clone(),
                rate_gauge: None,
            })
            .collect();
    }

    /// Also applies the control socket's operations posted to `endpoint`.
    pub fn with_live(mut self, endpoint: Option<LiveEndpoint>) -> SiloExchange {
        self.live = endpoint;
        self
    }

    /// Also publishes the silo's demand of the cluster classes in `cells` (their shares come
    /// through the allocator).
    pub fn with_cluster(mut self, cells: &[Arc<ClusterCell>], engine: &Engine) -> SiloExchange {
        self.cluster =
            (!cells.is_empty()).then(|| ClusterPort::new(cells, self.silo, false, engine));
        self
    }

    /// Applies a pending reload, the control socket's operations, any new rate, and publishes
    /// the demand when due.
    pub fn poll(&mut self, engine: &mut Engine, now: Timestamp) {
        // Operations first: cells handed over after an add find its class.
        LoopHook::poll_live(self, engine);
        if self.reload.load(Ordering::Acquire) {
            self.take_reload(engine);
        }
        for c in &mut self.classes {
            let Some(index) = c.index else { continue };
            let Some(rate) = fresh_rate(&c.exchange, self.silo, &mut c.epoch) else {
                continue;
            };
            // A zero rate is a closed cluster class (`Limit::closed`).
            if apply_share(engine, index, rate.bps()) {
                let metrics = &self.metrics;
                let gauge = c
                    .rate_gauge
                    .get_or_insert_with(|| metrics.nba_rate(&c.class));
                gauge.set(rate.bps());
            } else {
                self.refused_rates += 1;
            }
        }
        if let Some(port) = &mut self.cluster {
            port.poll(engine, now);
        }
        if now >= self.next_publish {
            self.next_publish = now.saturating_add(DEMAND_PUBLISH);
            for c in &self.classes {
                if let Some(index) = c.index {
                    let bytes = engine.class_stamped_bytes(index);
                    c.exchange.publish_demand(self.silo, bytes, now);
                }
            }
        }
    }

    fn take_reload(&mut self, engine: &mut Engine) {
        self.reload.store(false, Ordering::Release);
        let (taken, cells) = {
            let mut inbox = self.inbox.lock().unwrap_or_else(PoisonError::into_inner);
            (inbox.config.take(), inbox.cells.take())
        };
        let Some((config, cells)) = taken else {
            // The control socket changed the limited classes: new shares, no reload.
            if let Some(cells) = cells {
                self.rebind(&cells, engine);
            }
            return;
        };
        if install(engine, &config) {
            tracing::info!(silo = self.silo, "reloaded");
        }
        // The engine put whole rates back: re-apply every share (epochs forgotten).
        self.rebind(&cells, engine);
        if let Some(port) = &mut self.cluster {
            port.rebind(engine);
        }
    }
}

impl LoopHook for SiloExchange {
    fn wake_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.live.as_ref().map(LiveEndpoint::wake_fd)
    }

    fn poll(&mut self, engine: &mut Engine, now: Timestamp) -> Option<bool> {
        SiloExchange::poll(self, engine, now);
        None // silos keep their `busy_poll` until a restart
    }

    fn poll_live(&mut self, engine: &mut Engine) {
        // The operations only: rates and cells follow at the top of the next round, after them
        // as in `poll`.
        if let Some(live) = &mut self.live {
            live.poll(engine);
        }
    }
}

/// What one silo did.
#[derive(Clone, Copy, Debug)]
pub struct SiloReport {
    /// The silo's loop counters.
    pub report: LoopReport,
    /// The CPU the silo's thread was pinned to, `None` if it was not.
    pub pinned: Option<usize>,
    /// Allocator shares the engine refused.
    pub refused_rates: u64,
}

/// Pins the calling thread to the `silo`-th CPU of the process's affinity mask; `None` (with a
/// warning) when there are fewer CPUs than silos or the kernel refuses.
pub fn pin(silo: usize) -> Option<usize> {
    use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
    use nix::unistd::Pid;
    let allowed = match sched_getaffinity(Pid::from_raw(0)) {
        Ok(set) => (0..CpuSet::count())
            .filter(|&c| set.is_set(c).unwrap_or(false))
            .collect::<Vec<_>>(),
        Err(e) => {
            tracing::warn!(silo, error = %e, "silo not pinned: reading the affinity mask failed");
            return None;
        }
    };
    let Some(&cpu) = allowed.get(silo) else {
        tracing::warn!(
            silo,
            cpus = allowed.len(),
            "silo not pinned: more silos than CPUs in the affinity mask"
        );
        return None;
    };
    let mut set = CpuSet::new();
    if set.set(cpu).is_err() {
        return None;
    }
    match sched_setaffinity(Pid::from_raw(0), &set) {
        Ok(()) => Some(cpu),
        Err(e) => {
            tracing::warn!(silo, cpu, error = %e, "silo not pinned: sched_setaffinity failed");
            None
        }
    }
}

/// Runs `config.daemon.cores` silos (at least 2; see the module docs) until `control.stop` is
/// set; the calling thread coordinates. `metrics` must have been made by
/// [`Metrics::with_silos`] with as many silos. `config_path`: the file a reload re-reads. Opens
/// the ports, switches GRO on, then [`run_silos_on`] (which sends `READY=1` once every silo's
/// engine is built).
pub fn run_silos(
    config: &Config,
    config_path: Option<&Path>,
    metrics: &Metrics,
    control: &Control,
) -> Result<Vec<SiloReport>, PortError> {
    let mut ports = open_silo_ports(config, config.daemon.cores.max(1), None)?;
    // After the ports, so that frames arriving while the filter loads wait on the sockets.
    let control = &control.with_early(config);
    if let Some(early) = &control.early {
        for (inside, _) in &mut ports {
            inside.set_socket_filter(early.program_fd())?;
        }
    }
    crate::os::ports::enable_gro(config);
    run_silos_on(ports, config, config_path, metrics, control)
}

/// Runs one silo on each pair of `ports` (inside, outside) until `control.stop` is set; the
/// calling thread coordinates (see [`run_silos`]).
///
/// One silo that stops stops them all: its loop's error, or its panic, sets `control.stop`
/// (the coordinator notices a finished silo within `COORDINATOR_SLEEP`). Once every silo is
/// joined, the first error is returned; a panic goes on unwinding on the calling thread
/// (`std::panic::resume_unwind`, its message prefixed with the silo's number), so that no
/// caller takes a partly shaping run for a clean stop. A panic of the coordinator itself sets
/// `control.stop` too, on its way out.
pub fn run_silos_on<P>(
    ports: Vec<(P, P)>,
    config: &Config,
    config_path: Option<&Path>,
    metrics: &Metrics,
    control: &Control,
) -> Result<Vec<SiloReport>, PortError>
where
    P: PacketPort + Send + 'static,
{
    let n = ports.len();
    let _stop_on_unwind = StopOnUnwind(&control.stop);
    // With a control socket, the engines start with the API's classes too.
    let merged = control.live.as_ref().map(|l| l.merged(config));
    let config = merged.as_ref().unwrap_or(config);
    let clock = MonotonicClock::new();
    let mut allocator = allocator(config, n, &control.cluster);
    let options = LoopOptions::from_config(config);
    tracing::info!(
        inside = %config.interfaces.inside,
        outside = %config.interfaces.outside,
        attach = %config.interfaces.attach.join(","),
        silos = n,
        limits = allocator.limits(),
        nba_period = %allocator.period(),
        "shaping on silos"
    );
    let mut inboxes = Vec::with_capacity(n);
    let mut threads = Vec::with_capacity(n);
    for (silo, (mut inside, mut outside)) in ports.into_iter().enumerate() {
        let silo_stop = control.stop.clone();
        let metrics = metrics.for_silo(silo);
        let mut pool = frame_pool(config);
        let mut back = reverse_pool(config);
        let seed = crate::datapath::flow_seed::FlowSeed::draw();
        let mut engine = crate::driver::reload::engine(config, pool.capacity(), &metrics, seed);
        let endpoint = control.live.as_ref().and_then(|l| l.endpoint(silo, n));
        let mut exchange = SiloExchange::new(silo, &allocator.cells(), &engine, metrics.clone())
            .with_live(endpoint)
            .with_cluster(&control.cluster, &engine);
        inboxes.push((exchange.reload.clone(), exchange.inbox.clone()));
        let (realtime, nice) = (config.daemon.realtime_priority, config.daemon.nice);
        // Every silo feeds the early filter its overload; the first puts the classes in force.
        let options = options
            .clone()
            .with_early(control.early_loop(silo, silo == 0))
            .with_pace(control.pace_loop(silo));
        let thread = std::thread::Builder::new()
            .name(format!("silo-{silo}"))
            .spawn(move || {
                // Set on every way out, a panic included: one silo down stops all.
                let _stop_all = StopOnExit(&silo_stop);
                let pinned = pin(silo);
                crate::os::realtime::nice_logged(nice, &format!("silo-{silo}"));
                crate::os::realtime::enter_logged(realtime, &format!("silo-{silo}"));
                // Reloads come through the exchange, from the coordinator.
                let report = run_loop(
                    &mut inside,
                    &mut outside,
                    Pools {
                        shaped: &mut pool,
                        reverse: &mut back,
                    },
                    &mut engine,
                    &clock,
                    &metrics,
                    &options,
                    &silo_stop,
                    &mut exchange,
                )?;
                Ok(SiloReport {
                    report,
                    pinned,
                    refused_rates: exchange.refused_rates,
                })
            })
            .map_err(|e| PortError::Io {
                op: "spawn",
                ifname: config.interfaces.inside.clone(),
                source: e,
            });
        match thread {
            Ok(t) => threads.push(t),
            Err(e) => {
                // Stop the silos already running before reporting.
                control.stop.store(true, Ordering::Relaxed);
                join_all(threads)?;
                return Err(e);
            }
        }
    }
    // Every silo's engine is built (before its thread started): ready.
    crate::os::notify::notify("READY=1");
    let mut reloader = config_path.map(|p| {
        Reloader::new(p.to_path_buf(), config.clone())
            .selecting(metrics)
            .publishing(control.applied.clone())
            .reattaching(control.reattach.clone())
            .keeping(control.live.clone())
    });
    while !control.stop.load(Ordering::Relaxed) {
        if control.reload.swap(false, Ordering::Relaxed) {
            if let Some(reloader) = reloader.as_mut() {
                reload_silos(reloader, &mut allocator, &inboxes);
            }
        }
        if let Some(live) = control.live.as_ref().filter(|l| l.take_limits_changed()) {
            relimit_silos(&live.current(), &mut allocator, &inboxes);
        }
        let now = clock.now();
        let next = allocator.step(now);
        if threads.iter().any(|t| t.is_finished()) {
            control.stop.store(true, Ordering::Relaxed);
        }
        let wait = std::time::Duration::from_nanos(next.saturating_since(now).as_nanos());
        std::thread::sleep(wait.min(COORDINATOR_SLEEP));
    }
    join_all(threads)
}

/// A silo thread: its report, or the error its loop stopped on.
type SiloThread = std::thread::JoinHandle<Result<SiloReport, PortError>>;

/// Joins every silo (all of them, whatever the first one gives): their reports, else the first
/// error; the first panic goes on unwinding here once all are joined.
fn join_all(threads: Vec<SiloThread>) -> Result<Vec<SiloReport>, PortError> {
    let mut reports = Vec::with_capacity(threads.len());
    let mut first_error = None;
    let mut first_panic = None;
    for (silo, t) in threads.into_iter().enumerate() {
        match t.join() {
            Ok(Ok(r)) => reports.push(r),
            Ok(Err(e)) => first_error = first_error.or(Some(e)),
            Err(payload) => first_panic = first_panic.or(Some((silo, payload))),
        }
    }
    if let Some((silo, payload)) = first_panic {
        let message = format!("silo {silo} panicked: {}", panic_message(&*payload));
        tracing::error!(silo, "{message}; every silo stopped");
        std::panic::resume_unwind(Box::new(message));
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(reports),
    }
}

/// The message of a panic's payload (`panic!` gives a `&str` or a `String`).
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    match (
        payload.downcast_ref::<&str>(),
        payload.downcast_ref::<String>(),
    ) {
        (Some(s), _) => (*s).to_owned(),
        (None, Some(s)) => s.clone(),
        (None, None) => "a panic without a message".to_owned(),
    }
}

/// Sets the flag when dropped: a silo's way out, however it leaves.
struct StopOnExit<'a>(&'a AtomicBool);

impl Drop for StopOnExit<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Sets the flag when dropped while unwinding: the coordinator's panic stops its silos.
struct StopOnUnwind<'a>(&'a AtomicBool);

impl Drop for StopOnUnwind<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Relaxed);
        }
    }
}

type Inbox = (Arc<AtomicBool>, Arc<Mutex<ReloadBox>>);

/// The control socket changed the classes in force, now `current`: the allocator takes their
/// limits and every silo its new cells (a silo gave an added or changed class the equal split
/// meanwhile, `crate::ops::control::LiveEndpoint`).
fn relimit_silos(current: &Config, allocator: &mut Allocator, inboxes: &[Inbox]) {
    allocator.apply(current.class_set());
    let cells = allocator.cells();
    for (flag, inbox) in inboxes {
        inbox.lock().unwrap_or_else(PoisonError::into_inner).cells = Some(cells.clone());
        flag.store(true, Ordering::Release);
    }
}

/// Reloads the file once ([`Reloader::reload`]: validated, refused if it needs a restart),
/// updates the allocators and hands the configuration to every silo.
fn reload_silos(reloader: &mut Reloader, allocator: &mut Allocator, inboxes: &[Inbox]) {
    reloader.reload(|new, plan| {
        if let Some(b) = plan.busy_poll {
            tracing::warn!(
                busy_poll = b,
                "busy_poll changes need a restart with silos; kept"
            );
        }
        allocator.apply(new.class_set());
        let cells = allocator.cells();
        for (flag, inbox) in inboxes {
            inbox.lock().unwrap_or_else(PoisonError::into_inner).config =
                Some((new.clone(), cells.clone()));
            flag.store(true, Ordering::Release);
        }
        true
    });
}

#[cfg(test)]
mod tests;
