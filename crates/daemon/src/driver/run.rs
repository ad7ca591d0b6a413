//! The daemon's loop (`metronome run`): a shaping bump in the wire between two ports, as Carousel
//! §5 runs its shaper in a busy-polling software NIC.
//!
//! [`run_loop`] moves frames between two [`PacketPort`]s through the engine, each round: the
//! [`LoopHook`] (reloads, a silo's exchange, the control socket's operations), receive and stamp on
//! `inside` ([`Engine::receive`]), pass `outside`'s frames back ([`Engine::pass_through`], with ACK
//! shaping, [`Engine::shape_acks`], [`Engine::generate_acks`]), release what is due
//! ([`Engine::release`]) as one send batch (inter-flow batching, FlowBundler §IV-A), and, when
//! nothing happened, sleep in `ppoll(2)` until `wake_after` or [`MAX_SLEEP`] (CONTRIBUTING.md §3)
//! unless `busy_poll` spins. A partly taken batch is retried after [`TX_RETRY`]; a stop drains for
//! [`LoopOptions::drain`]; a link down waits ([`crate::driver::carrier`]); [`Control::stop`] ends
//! it. When a round reads a port and why: ARCHITECTURE.md, "The loop".

use crate::datapath::engine::{Engine, EngineCounters};
use crate::driver::carrier::Carrier;
use crate::ops::config::Config;
use crate::ops::metrics::Metrics;
use crate::ops::refused::{RefusalLog, Refusals};
use metronome_core::{Clock, Timestamp};
use metronome_io::{FramePool, PacketPort, PortCounters, PortError, RxFrame};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration as StdDuration;

mod pace;
mod side;
mod wait;

use side::Side;
pub use wait::Wake;
use wait::{sleep_time, wait, wake_after, Arrivals};

/// Longest sleep when idle: bounds how late a stop or reload request is noticed (50 ms).
pub const MAX_SLEEP: StdDuration = StdDuration::from_millis(50);
/// Wait before retrying a transmit batch the device refused as busy: 20 µs, about 250 full
/// frames at 100 Gbit/s or two at 1 Gbit/s.
pub const TX_RETRY: StdDuration = StdDuration::from_micros(20);
/// Shortest sleep while a port's link is down (1 ms): frames due for that port cannot leave,
/// so the loop must not spin on them.
const CARRIER_DOWN_WAKE: StdDuration = StdDuration::from_millis(1);
/// Longest time a port goes without a receive or a `ppoll` while every round finds work: the
/// loop asks a port for frames only when it may have some (`side::next_may_read`), so
/// frames that arrive from elsewhere while the loop is busy wait at most this long. 200 µs:
/// longer than the few rounds after a wake-up at 1 Gbit/s (each send runs the far end's
/// stack in this thread, tens of µs for a super-frame), and 250 KB at 10 Gbit/s, far below a
/// socket's receive buffer (16 MiB).
const UNREAD_MAX: metronome_core::Duration = metronome_core::Duration::from_micros(200);
/// How often the ports' kernel counters (RX ring drops) are read: every 100 ms (a
/// `getsockopt`, too costly per iteration).
const COUNTER_PERIOD_NS: u64 = 100_000_000;

/// The loop's two frame pools. The shaped direction's frames (received on `inside`, held by
/// the engine, sent on `outside`) and the reverse direction's (received on `outside`, passed
/// or ACK-shaped, sent on `inside`) live in pools of their own, so that however much the
/// shaped classes hold, the ACKs that clock their senders always find a slot
/// (`crate::os::ports::reverse_pool`).
pub struct Pools<'a> {
    /// The shaped direction's pool.
    pub shaped: &'a mut FramePool,
    /// The reverse direction's pool.
    pub reverse: &'a mut FramePool,
}

/// Requests to a running daemon, shared with signal handlers and other threads.
#[derive(Clone, Debug, Default)]
pub struct Control {
    /// Set to stop the loop or every silo (SIGINT, SIGTERM, or the caller).
    pub stop: Arc<AtomicBool>,
    /// Set to reload the configuration file (SIGHUP); whoever reloads clears it (the single
    /// loop's `reload::FileReload`, or the silos' coordinator).
    pub reload: Arc<AtomicBool>,
    /// The configuration a reload put in force, for whoever else follows it (attach mode's
    /// hooks, `crate::ops::service`); taken by them.
    pub applied: Arc<std::sync::Mutex<Option<crate::ops::config::Config>>>,
    /// Attach mode: a reload that changes the attached interfaces leaves its configuration here;
    /// the loops stop and start again on it (`crate::ops::service::attached`).
    pub reattach: Arc<std::sync::Mutex<Option<crate::ops::config::Config>>>,
    /// The control socket's classes and the loops' inboxes (`crate::ops::control`); `None`
    /// without a control socket.
    pub live: Option<Arc<crate::ops::control::Live>>,
    /// The cluster classes' cells, one per class with `scope = "cluster"`
    /// (`crate::ops::cluster`); empty without a `[cluster]`.
    pub cluster: Vec<Arc<crate::ops::cluster::ClusterCell>>,
    /// The receiving sockets' early filter (`crate::os::early`), which the loops feed; `None`:
    /// none.
    pub early: Option<Arc<crate::os::early::EarlyFilter>>,
    /// Attach mode's source pacing (`crate::os::pace`), which the loops feed; `None`: none.
    pub pace: Option<Arc<crate::os::pace::SocketPacing>>,
}

impl Control {
    /// This control with the early filter of `config` when it has none (it shares its
    /// requests; [`crate::os::early::load_logged`]).
    pub fn with_early(&self, config: &Config) -> Control {
        let mut control = self.clone();
        if control.early.is_none() {
            control.early = crate::os::early::load_logged(config);
        }
        control
    }

    /// The source pacing loop `index` feeds.
    pub fn pace_loop(&self, index: usize) -> Option<PaceLoop> {
        self.pace.as_ref().map(|pacing| PaceLoop {
            pacing: pacing.clone(),
            index,
        })
    }

    /// The [`EarlyLoop`] of loop `index`, which syncs the filter when `syncs`.
    pub fn early_loop(&self, index: usize, syncs: bool) -> Option<EarlyLoop> {
        self.early.as_ref().map(|filter| EarlyLoop {
            filter: filter.clone(),
            index,
            syncs,
        })
    }
}

/// What a loop does at the top of every iteration besides moving frames (see the module docs).
pub trait LoopHook {
    /// Called at the top of every iteration, `now` being the iteration's time. Returns the new
    /// `busy_poll` when a reload changed it.
    fn poll(&mut self, engine: &mut Engine, now: Timestamp) -> Option<bool>;

    /// Called between two chunks of a transmit batch (`side::TX_CHUNK`): applies the control
    /// socket's pending operations only (one atomic load when there are none), so that an
    /// operation waits for a chunk of frames, not for a whole round.
    fn poll_live(&mut self, _engine: &mut Engine) {}

    /// A descriptor that becomes readable when the hook has work for the loop (the control
    /// socket's operations, `crate::ops::control::LiveEndpoint`): the idle loop's `ppoll` waits
    /// on it too, so that it wakes at once. `None`: no such work.
    fn wake_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }
}

/// No hook: a loop without reloads or other silos.
impl LoopHook for () {
    fn poll(&mut self, _engine: &mut Engine, _now: Timestamp) -> Option<bool> {
        None
    }
}

/// What a loop did, returned when it stops.
#[derive(Clone, Copy, Debug, Default)]
pub struct LoopReport {
    /// The engine's counters (inside -> outside direction).
    pub engine: EngineCounters,
    /// Counters of the inside port.
    pub inside: PortCounters,
    /// Counters of the outside port.
    pub outside: PortCounters,
    /// Frames passed from outside to inside.
    pub passed_back: u64,
    /// Packets still queued in the wheel when the loop stopped (their slots are freed).
    pub queued_at_stop: u64,
    /// Frames still waiting for a busy transmit when the loop stopped (freed).
    pub pending_at_stop: u64,
    /// Frames a port refused with an error (freed, logged).
    pub tx_failed: u64,
    /// Super-frames cut into pieces, pieces sent and failed.
    pub cuts: metronome_io::CutCounters,
    /// Frames waiting to be sent on `outside` when its link came back after an outage longer
    /// than `daemon.link_down_grace`, dropped ([`crate::driver::carrier`]; the wheel's entries
    /// dropped for an outage are the engine's `dropped_link_down`).
    pub link_down_dropped_outside: u64,
    /// The same for `inside` (frames passed back and generated ACKs).
    pub link_down_dropped_inside: u64,
    /// Nanoseconds the loop ran, from its start until it was asked to stop (the drain after
    /// the stop is not in it).
    pub running_ns: u64,
    /// Of `running_ns`: nanoseconds it slept in `ppoll` waiting for frames or a due time
    /// (`metronome_loop_sleep_nanoseconds_total`).
    pub slept_ns: u64,
    /// Of `running_ns`: the loop's time spent on shaped-direction frames its engine refused
    /// (every drop of [`EngineCounters::dropped`]): each receive batch's time, from the
    /// `recv` to the engine's admission, times the share of its frames refused. What a flood
    /// costs the loop beyond what its class forwards.
    pub refusing_ns: u64,
}

impl LoopReport {
    /// Percent of its running time the loop was busy (did not sleep): near 100 when the loop,
    /// not the traffic, sets the rate. 0 for a loop that did not run.
    pub fn busy_pct(&self) -> f64 {
        if self.running_ns == 0 {
            return 0.0;
        }
        let busy = self.running_ns.saturating_sub(self.slept_ns);
        100.0 * busy as f64 / self.running_ns as f64
    }

    /// Percent of its running time the loop spent on frames its engine refused
    /// ([`LoopReport::refusing_ns`]).
    pub fn refusing_pct(&self) -> f64 {
        if self.running_ns == 0 {
            return 0.0;
        }
        100.0 * self.refusing_ns as f64 / self.running_ns as f64
    }
}

/// The early filter a loop feeds ([`crate::os::early`]): its overload, and, for the one loop
/// that `syncs`, the engine's classes and the refusal counts every `COUNTER_PERIOD_NS`.
#[derive(Clone, Debug)]
pub struct EarlyLoop {
    /// The daemon's filter.
    pub filter: Arc<crate::os::early::EarlyFilter>,
    /// This loop's index among the loops (its overload bit).
    pub index: usize,
    /// Whether this loop puts its engine's classes in force in the filter (one loop does).
    pub syncs: bool,
}

/// The source pacing a loop feeds ([`crate::os::pace`]): its engine's new flows and ceilings.
#[derive(Clone, Debug)]
pub struct PaceLoop {
    /// The daemon's program.
    pub pacing: Arc<crate::os::pace::SocketPacing>,
    /// This loop's index among the loops (its slots in the program's maps).
    pub index: usize,
}

/// Options of [`run_loop`].
#[derive(Clone, Debug)]
pub struct LoopOptions {
    /// Frames per receive and transmit batch.
    pub batch_size: usize,
    /// Spin instead of sleeping when idle (a reload may change it, see [`LoopHook::poll`]).
    pub busy_poll: bool,
    /// On stop, how long queued packets are still sent at their EDT (`[daemon] drain`).
    pub drain: StdDuration,
    /// While a link is down, how far past its EDT a frame queued for it is kept
    /// (`[daemon] link_down_grace`, [`crate::driver::carrier`]).
    pub link_down_grace: metronome_core::Duration,
    /// How long after the wheel's next departure the idle loop may sleep (`[daemon]
    /// timer_slack`, `wake_after`).
    pub timer_slack: metronome_core::Duration,
    /// While frames arrive often and the wheel holds frames, the longest idle sleep arrivals do
    /// not end (`[daemon] arrival_slack`, `sleeps_through_arrivals`).
    pub arrival_slack: metronome_core::Duration,
    /// The receiving sockets' early filter this loop feeds; `None`: none.
    pub early: Option<EarlyLoop>,
    /// The source pacing this loop feeds; `None`: none.
    pub pace: Option<PaceLoop>,
    /// The configuration's inside and outside interfaces (the ports' own names win).
    pub interfaces: (String, String),
    /// Switch GRO on at the inside interface when it comes back
    /// ([`crate::os::ports::enable_gro`]).
    pub gro: bool,
}

impl LoopOptions {
    /// The options `config` asks for.
    pub fn from_config(config: &Config) -> LoopOptions {
        LoopOptions {
            batch_size: config.daemon.batch_size.max(1),
            busy_poll: config.daemon.busy_poll,
            drain: StdDuration::from_nanos(config.daemon.drain.as_nanos()),
            link_down_grace: config.daemon.link_down_grace,
            timer_slack: config.daemon.timer_slack,
            arrival_slack: config.daemon.arrival_slack,
            early: None,
            pace: None,
            interfaces: (
                config.interfaces.inside.clone(),
                config.interfaces.outside.clone(),
            ),
            gro: config.daemon.gro && config.daemon.vnet_hdr,
        }
    }

    /// These options feeding `pace`.
    pub fn with_pace(self, pace: Option<PaceLoop>) -> LoopOptions {
        LoopOptions { pace, ..self }
    }

    /// These options feeding `early`.
    pub fn with_early(self, early: Option<EarlyLoop>) -> LoopOptions {
        LoopOptions { early, ..self }
    }
}

/// Runs the loop until `stop` is set, calling `hook` at the top of every iteration. See the
/// module docs.
#[allow(clippy::too_many_arguments)] // the loop's whole world, passed once at start-up
pub fn run_loop<I: PacketPort, O: PacketPort, C: Clock, H: LoopHook>(
    inside: &mut I,
    outside: &mut O,
    pools: Pools<'_>,
    engine: &mut Engine,
    clock: &C,
    metrics: &Metrics,
    options: &LoopOptions,
    stop: &AtomicBool,
    hook: &mut H,
) -> Result<LoopReport, PortError> {
    let batch = options
        .batch_size
        .clamp(1, crate::ops::config::MAX_BATCH_SIZE);
    // The ports' own interfaces (attach mode's differ per silo), else the configuration's.
    let (inside_default, outside_default) = &options.interfaces;
    let inside_name = inside.interface().unwrap_or(inside_default).to_owned();
    let outside_name = outside.interface().unwrap_or(outside_default).to_owned();
    let grace = options.link_down_grace;
    // Each side sends from the pool of the direction that ends on it.
    let mut inn = Side::new(inside, pools.reverse, &inside_name, batch, grace, metrics);
    let mut out = Side::new(outside, pools.shaped, &outside_name, batch, grace, metrics);
    let mut rx = vec![RxFrame::default(); batch];
    let mut busy_poll = options.busy_poll;
    let mut watch = PortWatch::default();
    let mut arrivals = Arrivals::default();
    let started = clock.now();
    // When both ports were last read or polled (see UNREAD_MAX).
    let mut checked = started;
    let (mut slept_ns, mut passed_back, mut refusing_ns) = (0u64, 0u64, 0u64);
    // 1 ns timer slack: ppoll wakes when asked, not up to 50 µs later (prctl(2)). Also when the
    // loop starts busy polling: a reload may make it sleep.
    let _ = nix::sys::prctl::set_timerslack(1);
    let mut pacer = options
        .pace
        .as_ref()
        .map(|p| pace::Pacer::new(p, engine, started));
    while !stop.load(Ordering::Relaxed) {
        let now = clock.now();
        if let Some(b) = hook.poll(engine, now) {
            busy_poll = b;
        }
        if inn.watch_carrier(now)? && options.gro {
            // A re-created interface has the kernel's default offloads: GRO as at start.
            crate::os::ports::enable_gro_on(inside_default);
        }
        out.watch_carrier(now)?;
        if now.saturating_since(checked) >= UNREAD_MAX {
            (inn.may_read, out.may_read) = (true, true);
        }
        if inn.may_read && out.may_read {
            checked = now;
        }
        let moved = move_frames(engine, &mut inn, &mut out, &mut rx, (now, clock), batch)?;
        let (work, rx_back) = (moved.work, moved.back);
        arrivals.count(now, moved.ahead + moved.back, options.arrival_slack);
        passed_back += rx_back;
        refusing_ns += moved.refusing_ns;
        let before = inn.live() + out.live();
        out.flush(metrics, now, &mut || hook.poll_live(engine));
        inn.flush(metrics, now, &mut || hook.poll_live(engine));
        inn.end_round();
        out.end_round();
        let pending = inn.live() + out.live();
        watch.observe(now, &mut inn, &mut out, metrics);
        if let Some(early) = &options.early {
            watch.feed(now, engine, &mut inn, early, (slept_ns, busy_poll), metrics);
        }
        if let Some(p) = &mut pacer {
            p.tick(now, engine, metrics);
        }
        if work > 0 || pending < before {
            continue;
        }
        if busy_poll {
            // The spin stands for the `ppoll` it replaces: the next round asks both ports.
            (inn.may_read, out.may_read) = (true, true);
            std::hint::spin_loop();
            continue;
        }
        let mut timeout = idle_timeout(engine, &inn, &out, pending > 0, options, clock.now());
        if let Some(p) = &pacer {
            timeout = timeout.min(p.sleep_bound(clock.now()));
        }
        if timeout.is_zero() {
            continue;
        }
        let deaf = sleeps_through_arrivals(
            arrivals.frequent() && engine.next_due().is_some() && pending == 0,
            timeout,
            options.arrival_slack,
        );
        let before = clock.now();
        let woken = wait(&*inn.port, &*out.port, hook.wake_fd(), timeout, deaf);
        (inn.may_read, out.may_read) = (woken.inside, woken.outside);
        metrics.loop_woke(woken.by);
        checked = clock.now();
        let slept = checked.saturating_since(before).as_nanos();
        slept_ns += slept;
        metrics.loop_slept_ns(slept);
    }
    let running_ns = clock.now().saturating_since(started).as_nanos();
    if let Some(early) = options.early.as_ref().filter(|e| e.syncs) {
        // The refusals since the last period, exported before the loop reports.
        early.filter.sync(engine, metrics);
    }
    crate::os::notify::notify("STOPPING=1");
    drain(engine, &mut inn, &mut out, clock, options, metrics);
    let queued_at_stop = engine.drain_all(out.pool);
    let pending_at_stop = out.free_all() + inn.free_all();
    Ok(LoopReport {
        engine: engine.counters(),
        inside: inn.counters(),
        outside: out.counters(),
        passed_back,
        queued_at_stop,
        pending_at_stop,
        tx_failed: out.tx_failed + inn.tx_failed,
        cuts: out.pool.cut_counters(),
        link_down_dropped_outside: out.dropped,
        link_down_dropped_inside: inn.dropped,
        running_ns,
        slept_ns: slept_ns.min(running_ns),
        refusing_ns: refusing_ns.min(running_ns),
    })
}

/// What one round's [`move_frames`] did.
struct Moved {
    /// Frames that moved.
    work: usize,
    /// Of them, those received on `inside`.
    ahead: u64,
    /// Of them, those received on `outside`.
    back: u64,
    /// The round's time spent on frames the engine refused ([`LoopReport::refusing_ns`]).
    refusing_ns: u64,
}

/// One round's frames at wall time `now` of `clock`, the engine's time being the outside
/// carrier's shaping time at `now` (the same for every engine call of the round): inside ->
/// engine (shaped, or passed at once), outside -> inside (passed, ACKs shaped), ACK shaping's
/// generated ACKs, and the wheel's release. Returns what moved ([`Moved`]).
fn move_frames<I, O, C: Clock>(
    engine: &mut Engine,
    inn: &mut Side<'_, I>,
    out: &mut Side<'_, O>,
    rx: &mut [RxFrame],
    (now, clock): (Timestamp, &C),
    batch: usize,
) -> Result<Moved, PortError>
where
    I: PacketPort,
    O: PacketPort,
{
    let t = out.carrier.shaping_time(now);
    let mut work = 0;
    let mut refusing_ns = 0;
    let mut ahead = 0;
    // Inside -> engine, only when the outgoing batch has room for what may pass at once.
    let dropped = engine.dropped();
    if let Some(n) = inn.recv(out.tx.len() < batch, out.pool, rx, now)? {
        engine.receive(t, out.pool, &rx[..n], &mut out.tx);
        let refused = engine.dropped() - dropped;
        if refused > 0 {
            let took = clock.now().saturating_since(now).as_nanos();
            refusing_ns = took * refused / (n as u64).max(refused);
        }
        ahead = n as u64;
        work += n;
    }
    let mut back = 0;
    if let Some(n) = out.recv(inn.tx.len() < batch, inn.pool, rx, now)? {
        let from = inn.tx.len();
        engine.pass_through(inn.pool, &rx[..n], &mut inn.tx);
        engine.shape_acks(t, inn.pool, &mut inn.tx, from);
        back = n as u64;
        work += n;
    }
    let room = inn.room();
    work += engine.generate_acks(t, inn.pool, &mut inn.tx, room);
    let room = out.room();
    work += release_shaped(engine, out.pool, &mut out.carrier, now, &mut out.tx, room);
    Ok(Moved {
        work,
        ahead,
        back,
        refusing_ns,
    })
}

/// The release of shaped frames for the outside port, whose carrier is `carrier`, at wall
/// time `now`: while the link is up, [`Engine::release`] of what is due at its shaping time
/// ([`Carrier::shaping_time`]) into `out` (at most `room`); while it is down, nothing: the
/// frames keep their place and EDT in the wheel, and once the outage outlasts the grace,
/// every entry that falls due is dropped ([`Engine::expire`]) and counted with
/// [`Carrier::count_dropped`] ([`crate::driver::carrier`]). Returns how many frames were released.
pub(crate) fn release_shaped(
    engine: &mut Engine,
    pool: &mut FramePool,
    carrier: &mut Carrier,
    now: Timestamp,
    out: &mut Vec<u32>,
    room: usize,
) -> usize {
    let t = carrier.shaping_time(now);
    if carrier.is_up() {
        return engine.release(t, pool, out, room);
    }
    if carrier.outlasted_grace(now) {
        carrier.count_dropped(engine.expire(t, metronome_core::Duration::ZERO, pool));
    }
    0
}

/// How long the loop sleeps at wall time `now` after a round that did nothing: [`TX_RETRY`]
/// when frames wait for a busy device; with both carriers up until the wheel's next departure
/// plus the slack ([`wake_after`]); with one down until what is due, the carrier's next probe
/// or [`CARRIER_DOWN_WAKE`], whichever is later, never spinning (while the outside carrier is
/// down the engine's clock stands still, or past the grace drops what falls due: its probes
/// wake the loop).
fn idle_timeout<I, O>(
    engine: &Engine,
    inn: &Side<'_, I>,
    out: &Side<'_, O>,
    pending: bool,
    options: &LoopOptions,
    now: Timestamp,
) -> StdDuration {
    let due = engine.next_due().map(|t| out.carrier.wall_time(t));
    if pending {
        TX_RETRY
    } else if inn.carrier.is_up() && out.carrier.is_up() {
        wake_after(due, options.timer_slack, now)
    } else {
        let due = due.filter(|_| out.carrier.is_up());
        let due = [due, inn.carrier.next_probe(), out.carrier.next_probe()];
        sleep_time(due.into_iter().flatten().min(), now).max(CARRIER_DOWN_WAKE)
    }
}

/// Whether the idle loop's sleep of `timeout` ignores arrivals: when frames arrive often (at
/// least two per `arrival_slack` over the last 10 ms, `wait::Arrivals`) and the wheel holds
/// frames (`queued`: both; the loop wakes for the next departure anyway, none waiting for the
/// device), and the sleep is at most `arrival_slack` (`[daemon] arrival_slack`). The round it
/// wakes for then reads whatever arrived meanwhile: one wake-up for a departure and the
/// arrivals before it, each arrival read at most `arrival_slack` after it came. An idle loop (nothing queued), or
/// one whose next departure is further away, wakes for an arrival at once.
fn sleeps_through_arrivals(
    queued: bool,
    timeout: StdDuration,
    arrival_slack: metronome_core::Duration,
) -> bool {
    queued && !timeout.is_zero() && timeout <= StdDuration::from_nanos(arrival_slack.as_nanos())
}

/// Stopping: nothing more is received; what is queued still leaves at its EDT for at most
/// `drain` (also in wall time, should `clock` be a test's that does not move), or until a
/// carrier is down; the caller then discards the rest and counts it (`discarded_at_stop`).
fn drain<I, O, C: Clock>(
    engine: &mut Engine,
    inn: &mut Side<'_, I>,
    out: &mut Side<'_, O>,
    clock: &C,
    options: &LoopOptions,
    metrics: &Metrics,
) where
    I: PacketPort,
    O: PacketPort,
{
    let drain_ns = u64::try_from(options.drain.as_nanos()).unwrap_or(u64::MAX);
    let drain_end = clock
        .now()
        .saturating_add(metronome_core::Duration::from_nanos(drain_ns));
    let wall_end = std::time::Instant::now() + options.drain;
    loop {
        let now = clock.now();
        let room = out.room();
        let t = out.carrier.shaping_time(now);
        engine.release(t, out.pool, &mut out.tx, room);
        out.flush(metrics, now, &mut || {});
        inn.flush(metrics, now, &mut || {});
        let left = engine.queued() + out.tx.len() + inn.tx.len();
        let over = now >= drain_end || std::time::Instant::now() >= wall_end;
        if left == 0 || over || !(inn.carrier.is_up() && out.carrier.is_up()) {
            return;
        }
        let sleep = if !out.tx.is_empty() || !inn.tx.is_empty() {
            TX_RETRY
        } else {
            let next = engine.next_due().map(|t| out.carrier.wall_time(t));
            sleep_time(Some(next.map_or(drain_end, |t| t.min(drain_end))), now)
        };
        std::thread::sleep(sleep);
    }
}

/// The ports' kernel counters, read every [`COUNTER_PERIOD_NS`]: RX ring drops into their
/// metric, refusals logged ([`crate::ops::refused`]).
#[derive(Default)]
struct PortWatch {
    next: Timestamp,
    ring_drops: u64,
    refusals: RefusalLog,
    /// The early filter's period: its next end, the loop's sleep and the inside socket's
    /// drops at its start, and the overload judgement.
    early_next: Timestamp,
    early_from: (Timestamp, u64, u64),
    judge: crate::os::early::OverloadJudge,
}

impl PortWatch {
    fn observe<I, O>(
        &mut self,
        now: Timestamp,
        inn: &mut Side<'_, I>,
        out: &mut Side<'_, O>,
        metrics: &Metrics,
    ) where
        I: PacketPort,
        O: PacketPort,
    {
        if now < self.next {
            return;
        }
        self.next = now.saturating_add(metronome_core::Duration::from_nanos(COUNTER_PERIOD_NS));
        let (ci, co) = (inn.counters(), out.counters());
        let drops = ci.rx_ring_drops + co.rx_ring_drops;
        if drops > self.ring_drops {
            metrics.rx_ring_drops(drops - self.ring_drops);
            self.ring_drops = drops;
        }
        let cuts = out.pool.cut_counters();
        self.refusals
            .observe(Refusals::of(&ci, &co, &cuts), metrics);
    }

    /// Every [`COUNTER_PERIOD_NS`]: the loop's overload (`crate::os::early::OverloadJudge`,
    /// from the period's sleep, of `slept_ns` so far, and the inside socket's drops) for
    /// `early`, and, when this loop syncs, the engine's classes and the refusal counts.
    fn feed<I: PacketPort>(
        &mut self,
        now: Timestamp,
        engine: &Engine,
        inn: &mut Side<'_, I>,
        early: &EarlyLoop,
        (slept_ns, busy_poll): (u64, bool),
        metrics: &Metrics,
    ) {
        if now < self.early_next {
            return;
        }
        let drops = inn.counters().rx_ring_drops;
        let (from, slept_from, drops_from) = self.early_from;
        if self.early_next != Timestamp::ZERO {
            let period = now.saturating_since(from).as_nanos();
            let slept = slept_ns.saturating_sub(slept_from);
            let dropped = drops.saturating_sub(drops_from);
            let overloaded = self.judge.judge(period, slept, dropped, busy_poll);
            early.filter.set_overloaded(early.index, overloaded);
        }
        if early.syncs {
            early.filter.sync(engine, metrics);
        }
        self.early_from = (now, slept_ns, drops);
        self.early_next =
            now.saturating_add(metronome_core::Duration::from_nanos(COUNTER_PERIOD_NS));
    }
}

#[cfg(test)]
mod tests;
