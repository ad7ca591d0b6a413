//! The daemon's loop (`metronome run`): a shaping bump in the wire between two ports.
//!
//! Carousel §5 runs its shaper inside a busy-polling software NIC: each iteration takes a batch of
//! packets, timestamps them into the timing wheel and hands whatever the wheel says is due to the
//! NIC. [`run_loop`] does the same between two [`PacketPort`]s sharing one [`FramePool`]:
//!
//! 0. call the loop's [`LoopHook`]: the single loop's reloads (`reload::FileReload`), a
//!    silo's rate and demand exchange and reloads (`silo::SiloLink`), or nothing (`()`);
//! 1. receive a batch on `inside`, classify / stamp / queue it ([`Engine::receive`]); frames that
//!    are not shaped join the outgoing batch at once;
//! 2. receive a batch on `outside` and pass it to `inside` unshaped (checksums completed,
//!    [`Engine::pass_through`]), except the TCP ACKs of classes with `ack_shaping`, rewritten or
//!    suppressed ([`Engine::shape_acks`]); add the ACKs that ACK shaping generates now
//!    ([`Engine::generate_acks`], due at [`Engine::next_due`] like the wheel's packets);
//! 3. release everything due from the wheel ([`Engine::release`]) and send it together with the
//!    unshaped frames as **one** `send` batch per tick (inter-flow batching, FlowBundler §IV-A);
//! 4. when nothing happened, sleep in `ppoll(2)` on both ports' descriptors until the wheel's
//!    `next_due` plus `[daemon] timer_slack` ([`wake_after`]: frames due within the slack leave
//!    in one batch, none before its EDT) or [`MAX_SLEEP`] (CONTRIBUTING.md §3: no timer per
//!    packet), unless `busy_poll` keeps spinning (Carousel's mode; lowest lateness, one core at
//!    100 %). The thread's kernel timer slack is set to 1 ns so that the kernel does not round
//!    the sleep up by its default 50 µs: the loop's own slack is the only one.
//!    A round asks a port for frames only when it may have some: after a `ppoll` that
//!    reported it readable, after a receive that filled its batch, or after the previous round
//!    sent on it (the far end's answer is then already queued, see [`Readable::after_round`]);
//!    otherwise at least every [`UNREAD_MAX`] while the loop is busy. At 1 Gbit/s with
//!    super-frames most wake-ups are for one due frame, and a `recvmmsg` that finds nothing
//!    costs about as much as the frame's own work: the loop's cycle per frame is one `ppoll`,
//!    the send, the receive of the answer on that port, its send on the other port and the
//!    receive of the answer there. A round that did work is followed by another (no sleep
//!    before ACK shaping's generated ACKs); a round that did nothing goes to `ppoll`, which
//!    returns at once for frames that arrived meanwhile.
//!
//! A transmit batch the device only partly takes (`tx_busy`) stays pending and is retried first,
//! after [`TX_RETRY`]: nothing is dropped. When `stop` is set the loop receives no more and
//! sends what is queued at its EDT for at most [`LoopOptions::drain`]; the rest is discarded
//! and counted. A port whose link goes down (`ENETDOWN`, `ENXIO`) is
//! left alone until its link is back ([`crate::link`]): its frames wait. During an outage of
//! `outside` the engine's time (the link's [`Link::shaping_time`]) stands still for at most
//! `daemon.link_down_grace`, so what was queued leaves at its class's rate on the return, and
//! what would leave later than the grace after its EDT is dropped and counted. The loop keeps
//! running; when its
//! interface came back with a new index the port is opened again by name ([`PacketPort::reopen`]) and its
//! frames leave on the new socket. The loop stops when its `stop` flag
//! ([`Control::stop`]) is set.

use crate::config::Config;
use crate::engine::{Engine, EngineCounters};
use crate::link::{probe_interface, Link, LinkEvent};
use crate::metrics::Metrics;
use crate::ports::add_counters;
use crate::refused::{RefusalLog, Refusals};
use metronome_core::{Clock, Timestamp};
use metronome_io::{FramePool, PacketPort, PortCounters, PortError, RxFrame};
use nix::poll::{PollFd, PollFlags};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration as StdDuration;

/// Longest sleep when idle: bounds how late a stop or reload request is noticed (50 ms).
pub const MAX_SLEEP: StdDuration = StdDuration::from_millis(50);
/// Wait before retrying a transmit batch the device refused as busy: 20 µs, about 250 full
/// frames at 100 Gbit/s or two at 1 Gbit/s.
pub const TX_RETRY: StdDuration = StdDuration::from_micros(20);
/// Shortest sleep while a port's link is down (1 ms): frames due for that port cannot leave,
/// so the loop must not spin on them.
const LINK_DOWN_WAKE: StdDuration = StdDuration::from_millis(1);
/// Longest time a port goes without a receive or a `ppoll` while every round finds work: the
/// loop asks a port for frames only when it may have some ([`Readable::after_round`]), so
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
/// (`crate::ports::reverse_pool`).
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
}

/// What a loop does at the top of every iteration besides moving frames (see the module docs).
pub trait LoopHook {
    /// Called at the top of every iteration, `now` being the iteration's time. Returns the new
    /// `busy_poll` when a reload changed it.
    fn poll(&mut self, engine: &mut Engine, now: Timestamp) -> Option<bool>;
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
    /// than `daemon.link_down_grace`, dropped ([`crate::link`]; the wheel's entries dropped for
    /// an outage are the engine's `dropped_link_down`).
    pub link_down_dropped_outside: u64,
    /// The same for `inside` (frames passed back and generated ACKs).
    pub link_down_dropped_inside: u64,
    /// Nanoseconds the loop ran, from its start until it was asked to stop (the drain after
    /// the stop is not in it).
    pub running_ns: u64,
    /// Of `running_ns`: nanoseconds it slept in `ppoll` waiting for frames or a due time
    /// (`metronome_loop_sleep_nanoseconds_total`).
    pub slept_ns: u64,
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
}

/// Options of [`run_loop`].
#[derive(Clone, Copy, Debug)]
pub struct LoopOptions {
    /// Frames per receive and transmit batch.
    pub batch_size: usize,
    /// Spin instead of sleeping when idle (a reload may change it, see [`LoopHook::poll`]).
    pub busy_poll: bool,
    /// On stop, how long queued packets are still sent at their EDT (`[daemon] drain`).
    pub drain: StdDuration,
    /// While a link is down, how far past its EDT a frame queued for it is kept
    /// (`[daemon] link_down_grace`, [`crate::link`]).
    pub link_down_grace: metronome_core::Duration,
    /// How long after the wheel's next departure the idle loop may sleep (`[daemon]
    /// timer_slack`, [`wake_after`]).
    pub timer_slack: metronome_core::Duration,
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
        }
    }
}

/// A batch of slot ids waiting to be sent on one port.
struct TxQueue {
    ids: Vec<u32>,
    tx_failed: u64,
}

impl TxQueue {
    fn with_capacity(n: usize) -> TxQueue {
        TxQueue {
            ids: Vec::with_capacity(n),
            tx_failed: 0,
        }
    }

    /// Sends what is pending as one batch; keeps what the port did not take, and everything
    /// while the port's link is down (sent when it returns, [`crate::link`]). The batch may
    /// hold pieces of cut super-frames (the shaped direction), which the port sends itself.
    fn flush<P: PacketPort>(
        &mut self,
        port: &mut P,
        pool: &mut FramePool,
        metrics: &Metrics,
        link: &mut Link,
        now: Timestamp,
    ) {
        if self.ids.is_empty() || !link.is_up() {
            return;
        }
        let sent = port.send(pool, &self.ids);
        match sent {
            Err(e) if link.on_error(now, &e) => {}
            Ok(n) => {
                if n > 0 {
                    metrics.observe_tx_batch(n as u64);
                }
                self.ids.drain(..n);
            }
            Err(e) => {
                tracing::error!(error = %e, frames = self.ids.len(), "transmit failed, frames freed");
                self.free_all(pool);
            }
        }
    }

    /// Frees what is pending without counting it as a transmit failure (the caller counts it).
    fn discard(&mut self, pool: &mut FramePool) -> u64 {
        let n = self.free_all(pool);
        self.tx_failed -= n;
        n
    }

    fn free_all(&mut self, pool: &mut FramePool) -> u64 {
        let n = self.ids.len() as u64;
        for &id in &self.ids {
            pool.free_entry(id);
        }
        self.ids.clear();
        self.tx_failed += n;
        n
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
    let Pools {
        shaped: pool,
        reverse: back,
    } = pools;
    let batch = options.batch_size.clamp(1, crate::config::MAX_BATCH_SIZE);
    let mut busy_poll = options.busy_poll;
    let mut rx = vec![RxFrame::default(); batch];
    let mut to_outside = TxQueue::with_capacity(2 * batch);
    let mut to_inside = TxQueue::with_capacity(2 * batch);
    let mut passed_back = 0u64;
    let grace = options.link_down_grace;
    let (mut dropped_out, mut dropped_in) = (0u64, 0u64);
    let mut last_ring_drops = 0u64;
    let mut refusals = RefusalLog::default();
    let mut next_counters = clock.now();
    let names = &engine.config().interfaces;
    let (in_probe, out_probe) = (
        probe_interface(&names.inside),
        probe_interface(&names.outside),
    );
    let mut in_link = Link::new(&names.inside, in_probe, grace, metrics);
    let mut out_link = Link::new(&names.outside, out_probe, grace, metrics);
    // Counters of the sockets a reopening closed, added to the ports' own.
    let (mut in_retired, mut out_retired) = (PortCounters::default(), PortCounters::default());
    // Whether each port (inside, outside) may have frames waiting: both, except right after a
    // `ppoll` that did not report a port readable, whose `recvmmsg` would return nothing.
    let mut readable = Readable::BOTH;
    // When both ports were last read or polled (see UNREAD_MAX).
    let mut checked = clock.now();
    let started = clock.now();
    let mut slept_ns = 0u64;
    // 1 ns timer slack: ppoll wakes when asked, not up to 50 µs later (prctl(2)). Also when the
    // loop starts busy polling: a reload may make it sleep.
    let _ = nix::sys::prctl::set_timerslack(1);
    while !stop.load(Ordering::Relaxed) {
        let now = clock.now();
        if let Some(b) = hook.poll(engine, now) {
            busy_poll = b;
        }
        if in_link.poll(now, probe_interface) == LinkEvent::Replaced {
            reopen(inside, &mut in_link, &mut in_retired, now)?;
            if in_link.is_up() {
                // A re-created interface has the kernel's default offloads: GRO as at start.
                crate::ports::enable_gro(engine.config());
            }
        }
        if out_link.poll(now, probe_interface) == LinkEvent::Replaced {
            reopen(outside, &mut out_link, &mut out_retired, now)?;
        }
        // Back after an outage longer than the grace: what waited in the transmit batch is
        // dropped and counted (`crate::link`).
        if out_link.returned().is_some_and(|d| d > grace) {
            let n = to_outside.discard(pool);
            out_link.count_dropped(n);
            dropped_out += n;
        }
        if in_link.returned().is_some_and(|d| d > grace) {
            let n = to_inside.discard(back);
            in_link.count_dropped(n);
            dropped_in += n;
        }
        // The engine's time: the wall's, less what outages of `outside` stopped it.
        let t = out_link.shaping_time(now);
        let mut work = 0;
        if now.saturating_since(checked) >= UNREAD_MAX {
            readable = Readable::BOTH;
        }
        if readable == Readable::BOTH {
            checked = now;
        }
        // What this round learns for the next one (see `Readable::after_round`).
        let mut round = RoundIo::default();
        // Inside -> engine, only when the outgoing batch has room for what may pass at once.
        if to_outside.ids.len() < batch && in_link.is_up() && readable.inside {
            let n = match inside.recv(pool, &mut rx) {
                Err(e) if in_link.on_error(now, &e) => 0,
                r => r?,
            };
            engine.receive(t, pool, &rx[..n], &mut to_outside.ids);
            work += n;
            round.read.inside = true;
            round.full.inside = n == rx.len();
        }
        if to_inside.ids.len() < batch && out_link.is_up() && readable.outside {
            let n = match outside.recv(back, &mut rx) {
                Err(e) if out_link.on_error(now, &e) => 0,
                r => r?,
            };
            let from = to_inside.ids.len();
            engine.pass_through(back, &rx[..n], &mut to_inside.ids);
            engine.shape_acks(t, back, &mut to_inside.ids, from);
            passed_back += n as u64;
            work += n;
            round.read.outside = true;
            round.full.outside = n == rx.len();
        }
        let ack_room = (2 * batch).saturating_sub(to_inside.ids.len());
        work += engine.generate_acks(t, back, &mut to_inside.ids, ack_room);
        let room = (2 * batch).saturating_sub(to_outside.ids.len());
        work += crate::link::release_outbound(
            engine,
            pool,
            &mut out_link,
            clock.now(),
            &mut to_outside.ids,
            room,
        );
        let live = |q: &TxQueue, l: &Link| if l.is_up() { q.ids.len() } else { 0 };
        let pending_before = live(&to_outside, &out_link) + live(&to_inside, &in_link);
        let queued = (to_inside.ids.len(), to_outside.ids.len());
        to_outside.flush(outside, pool, metrics, &mut out_link, now);
        to_inside.flush(inside, back, metrics, &mut in_link, now);
        round.sent.inside = to_inside.ids.len() < queued.0;
        round.sent.outside = to_outside.ids.len() < queued.1;
        readable = readable.after_round(&round);
        let pending = live(&to_outside, &out_link) + live(&to_inside, &in_link);
        if now >= next_counters {
            next_counters =
                now.saturating_add(metronome_core::Duration::from_nanos(COUNTER_PERIOD_NS));
            let ci = add_counters(inside.counters(), in_retired);
            let co = add_counters(outside.counters(), out_retired);
            let drops = ci.rx_ring_drops + co.rx_ring_drops;
            if drops > last_ring_drops {
                metrics.rx_ring_drops(drops - last_ring_drops);
                last_ring_drops = drops;
            }
            refusals.observe(Refusals::of(&ci, &co, &pool.cut_counters()), metrics);
        }
        if work > 0 || pending < pending_before {
            continue;
        }
        if busy_poll {
            // The spin stands for the `ppoll` it replaces: the next round asks both ports.
            readable = Readable::BOTH;
            std::hint::spin_loop();
            continue;
        }
        let timeout = if pending > 0 {
            TX_RETRY
        } else if in_link.is_up() && out_link.is_up() {
            wake_after(
                engine.next_due(),
                options.timer_slack,
                out_link.shaping_time(clock.now()),
            )
        } else {
            // A port is down: what is due may be unable to leave, so wake for it, for the
            // link's next probe, and at most every LINK_DOWN_WAKE, never spinning.
            // While the outside link is down the engine's clock stands still (or, past the
            // grace, drops what falls due): its probes wake the loop.
            let next = engine.next_due().filter(|_| out_link.is_up());
            let next = next.map(|t| out_link.wall_time(t));
            let due = [next, in_link.next_probe(), out_link.next_probe()];
            let due = due.into_iter().flatten().min();
            sleep_time(due, clock.now()).max(LINK_DOWN_WAKE)
        };
        if timeout.is_zero() {
            continue;
        }
        let before = clock.now();
        readable = wait(inside, outside, timeout);
        checked = clock.now();
        let slept = clock.now().saturating_since(before).as_nanos();
        slept_ns += slept;
        metrics.loop_slept_ns(slept);
    }
    let running_ns = clock.now().saturating_since(started).as_nanos();
    crate::notify::notify("STOPPING=1");
    // Stopping: nothing more is received; what is queued still leaves at its EDT for at most
    // `drain`, then the rest is discarded and counted (`discarded_at_stop`).
    let drain_ns = u64::try_from(options.drain.as_nanos()).unwrap_or(u64::MAX);
    let drain_end = clock
        .now()
        .saturating_add(metronome_core::Duration::from_nanos(drain_ns));
    // The same bound in wall time, should `clock` be a test's that does not move.
    let wall_end = std::time::Instant::now() + options.drain;
    loop {
        let now = clock.now();
        let room = (2 * batch).saturating_sub(to_outside.ids.len());
        let t = out_link.shaping_time(now);
        engine.release(t, pool, &mut to_outside.ids, room);
        to_outside.flush(outside, pool, metrics, &mut out_link, now);
        to_inside.flush(inside, back, metrics, &mut in_link, now);
        let left = engine.queued() + to_outside.ids.len() + to_inside.ids.len();
        let over = now >= drain_end || std::time::Instant::now() >= wall_end;
        if left == 0 || over || !(in_link.is_up() && out_link.is_up()) {
            break;
        }
        let pending = !to_outside.ids.is_empty() || !to_inside.ids.is_empty();
        let next = if pending { None } else { engine.next_due() };
        let next = next.map(|t| out_link.wall_time(t));
        let wake = next.map_or(drain_end, |t| t.min(drain_end));
        let sleep = if pending {
            TX_RETRY
        } else {
            sleep_time(Some(wake), now)
        };
        std::thread::sleep(sleep);
    }
    let queued_at_stop = engine.drain_all(pool);
    let pending_at_stop = to_outside.free_all(pool) + to_inside.free_all(back);
    Ok(LoopReport {
        engine: engine.counters(),
        inside: add_counters(inside.counters(), in_retired),
        outside: add_counters(outside.counters(), out_retired),
        passed_back,
        queued_at_stop,
        pending_at_stop,
        tx_failed: to_outside.tx_failed + to_inside.tx_failed - pending_at_stop,
        cuts: pool.cut_counters(),
        link_down_dropped_outside: dropped_out,
        link_down_dropped_inside: dropped_in,
        running_ns,
        slept_ns: slept_ns.min(running_ns),
    })
}

/// Opens `port` again after its interface came back with a new index; its closed socket's
/// counters go to `retired`. When the interface is gone again the link stays down (probed as
/// before); any other error ends the loop.
fn reopen<P: PacketPort>(
    port: &mut P,
    link: &mut Link,
    retired: &mut PortCounters,
    now: Timestamp,
) -> Result<(), PortError> {
    match port.reopen() {
        Ok(closed) => {
            *retired = add_counters(*retired, closed);
            link.reopened(now);
            Ok(())
        }
        Err(e) if link.on_error(now, &e) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Time until `next_due`, at most [`MAX_SLEEP`]; zero when due.
fn sleep_time(next_due: Option<Timestamp>, now: Timestamp) -> StdDuration {
    match next_due {
        Some(t) => StdDuration::from_nanos(t.saturating_since(now).as_nanos()).min(MAX_SLEEP),
        None => MAX_SLEEP,
    }
}

/// How long the idle loop sleeps when the wheel's next departure is `next_due`: until
/// `slack` after it (frames due within the slack then leave in one batch), at most
/// [`MAX_SLEEP`]. Never before `next_due`, so a frame woken for leaves at or after its EDT
/// ([`Engine::release`] takes only what is due) and, the machine's wake-up latency aside, at
/// most `slack` after it. A frame that arrives meanwhile wakes the loop at once, and the round
/// it starts releases whatever is due by then.
fn wake_after(
    next_due: Option<Timestamp>,
    slack: metronome_core::Duration,
    now: Timestamp,
) -> StdDuration {
    sleep_time(next_due.map(|t| t.saturating_add(slack)), now)
}

/// Which ports may have frames waiting (see [`wait`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Readable {
    inside: bool,
    outside: bool,
}

impl Readable {
    /// Unknown: ask both.
    const BOTH: Readable = Readable {
        inside: true,
        outside: true,
    };
    /// Neither.
    const NONE: Readable = Readable {
        inside: false,
        outside: false,
    };

    /// Which ports the round after `round` asks for frames without a `ppoll` in between: a
    /// port this round could not read (no room, link down) and was readable, a port whose
    /// receive filled its batch (more may wait), and a port this round sent on. The last is
    /// the frames' far end answering in this thread: a veth transmit runs the peer
    /// namespace's stack in the sender's context, so the receiver's ACKs (after a send on
    /// `outside`) and the sender's next segments (after a send on `inside`) are already in the
    /// socket when `sendmmsg` returns. Frames that arrive otherwise wait for the next `ppoll`
    /// (taken as soon as a round does nothing) or [`UNREAD_MAX`], whichever is first.
    fn after_round(self, round: &RoundIo) -> Readable {
        let next = |was: bool, read: bool, full: bool, sent: bool| (was && !read) || full || sent;
        Readable {
            inside: next(
                self.inside,
                round.read.inside,
                round.full.inside,
                round.sent.inside,
            ),
            outside: next(
                self.outside,
                round.read.outside,
                round.full.outside,
                round.sent.outside,
            ),
        }
    }
}

/// What one round of the loop did on each port (see [`Readable::after_round`]).
#[derive(Clone, Copy, Debug)]
struct RoundIo {
    /// The port was asked for frames.
    read: Readable,
    /// Its receive returned a whole batch.
    full: Readable,
    /// At least one frame was sent on it.
    sent: Readable,
}

impl Default for RoundIo {
    fn default() -> Self {
        RoundIo {
            read: Readable::NONE,
            full: Readable::NONE,
            sent: Readable::NONE,
        }
    }
}

/// Sleeps until either port is readable or `timeout` passes (ppoll(2), nanosecond timeout);
/// returns which ports `ppoll` reported readable (or in error: the receive reports it). A port
/// without a descriptor, or any `ppoll` failure (EINTR: a signal), counts as readable.
fn wait<I: PacketPort, O: PacketPort>(inside: &I, outside: &O, timeout: StdDuration) -> Readable {
    let events = PollFlags::POLLIN;
    let (fd_in, fd_out) = (inside.poll_fd(), outside.poll_fd());
    let ts = nix::sys::time::TimeSpec::from_duration(timeout);
    let ready = |fd: &PollFd<'_>| {
        fd.revents().is_none_or(|r| {
            r.intersects(PollFlags::POLLIN | PollFlags::POLLERR | PollFlags::POLLHUP)
        })
    };
    match (fd_in, fd_out) {
        (None, None) => {
            std::thread::sleep(timeout);
            Readable::BOTH
        }
        (Some(a), Some(b)) => {
            let mut fds = [PollFd::new(a, events), PollFd::new(b, events)];
            match nix::poll::ppoll(&mut fds, Some(ts), None) {
                Ok(_) => Readable {
                    inside: ready(&fds[0]),
                    outside: ready(&fds[1]),
                },
                Err(_) => Readable::BOTH,
            }
        }
        (Some(fd), None) | (None, Some(fd)) => {
            let mut fds = [PollFd::new(fd, events)];
            let ok = nix::poll::ppoll(&mut fds, Some(ts), None).is_ok();
            let r = !ok || ready(&fds[0]);
            Readable {
                inside: r || fd_in_missing(inside),
                outside: r || fd_in_missing(outside),
            }
        }
    }
}

/// True if `port` has no descriptor (`wait` cannot tell whether it is readable).
fn fd_in_missing<P: PacketPort>(port: &P) -> bool {
    port.poll_fd().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use metronome_core::{Duration, ManualClock};
    use metronome_io::{MemoryPort, MemoryPortConfig};

    /// Runs the loop between two memory ports until a thread sets the stop flag after `ms`
    /// milliseconds (memory ports have no descriptor: an idle loop sleeps, so the stop comes from
    /// outside), with no hook.
    fn run_stopped_after<C: Clock>(
        ms: u64,
        config: &Config,
        (inside, outside): (&mut MemoryPort, &mut MemoryPort),
        pool: &mut FramePool,
        (engine, metrics): (&mut Engine, &Metrics),
        clock: &C,
    ) -> LoopReport {
        let control = Control::default();
        let stop = control.stop.clone();
        let stopper = std::thread::spawn(move || {
            std::thread::sleep(StdDuration::from_millis(ms));
            stop.store(true, Ordering::Relaxed);
        });
        let options = LoopOptions::from_config(config);
        let mut back = FramePool::new(256, 2048);
        let pools = Pools {
            shaped: pool,
            reverse: &mut back,
        };
        let report = run_loop(
            inside,
            outside,
            pools,
            engine,
            clock,
            metrics,
            &options,
            &control.stop,
            &mut (),
        )
        .unwrap();
        stopper.join().unwrap();
        assert_eq!(
            back.in_use(),
            0,
            "the reverse direction's pool holds nothing at stop"
        );
        report
    }

    /// A loop's world for `text`: its configuration, metrics, a pool of 256 slots and the
    /// engine.
    fn loop_parts(text: &str) -> (Config, Metrics, FramePool, Engine) {
        let config = Config::from_toml_str(text, "t.toml").unwrap();
        let metrics = Metrics::new();
        let pool = FramePool::new(256, 2048);
        let engine = Engine::new(&config, pool.capacity(), metrics.clone());
        (config, metrics, pool, engine)
    }

    /// A `len`-byte ARP frame: non-IP, so the default class takes it.
    fn non_ip_frame(len: usize) -> Vec<u8> {
        let mut frame = vec![0u8; len];
        frame[12..14].copy_from_slice(&[0x08, 0x06]);
        frame
    }

    /// A clock that moves 1 ms at every reading.
    struct Stepping(std::sync::atomic::AtomicU64);

    impl Clock for Stepping {
        fn now(&self) -> Timestamp {
            Timestamp::from_nanos(self.0.fetch_add(1_000_000, Ordering::Relaxed))
        }
    }

    /// 20 full frames into a 1 Mbit/s class (12.1 ms each), the loop stopped 5 ms (real time)
    /// later with `drain`; returns (frames sent on outside, the loop's report).
    fn stop_with_drain(drain: &str) -> (usize, LoopReport) {
        let text = format!(
            "[interfaces]\ninside = \"a\"\noutside = \"b\"\n[daemon]\ndrain = \"{drain}\"\n\
             [default]\nrate = \"1mbit\"\n"
        );
        let (config, metrics, mut pool, mut engine) = loop_parts(&text);
        let mut inside = MemoryPort::new(MemoryPortConfig::default());
        let mut outside = MemoryPort::new(MemoryPortConfig::default());
        let frame = non_ip_frame(1514);
        for _ in 0..20 {
            inside.inject(&frame).unwrap();
        }
        let clock = Stepping(std::sync::atomic::AtomicU64::new(1_000_000_000));
        let ports = (&mut inside, &mut outside);
        let report = run_stopped_after(
            5,
            &config,
            ports,
            &mut pool,
            (&mut engine, &metrics),
            &clock,
        );
        engine.invariants();
        assert_eq!(pool.in_use(), 0);
        (outside.discard_sent(), report)
    }

    #[test]
    fn a_stop_sends_what_is_queued_within_the_drain_time_and_counts_the_rest() {
        let (sent, report) = stop_with_drain("10s");
        assert_eq!((sent, report.queued_at_stop), (20, 0), "{report:?}");
        let (sent, report) = stop_with_drain("0s");
        assert!(report.queued_at_stop > 0, "{report:?}");
        assert_eq!(sent as u64 + report.queued_at_stop, 20, "{report:?}");
        assert_eq!(report.engine.discarded_at_stop, report.queued_at_stop);
    }

    #[test]
    fn the_loop_reports_the_time_it_slept_within_its_running_time() {
        // Frames 12.1 ms apart on a clock that moves 1 ms per reading: the loop sleeps
        // between them, so it was neither always busy nor always asleep.
        let (_, report) = stop_with_drain("10s");
        assert!(report.slept_ns > 0, "{report:?}");
        assert!(report.slept_ns <= report.running_ns, "{report:?}");
        assert!(
            report.busy_pct() > 0.0 && report.busy_pct() < 100.0,
            "{report:?}"
        );
        assert_eq!(LoopReport::default().busy_pct(), 0.0);
    }

    /// A memory port whose one frame arrives when the shared flag is set (by a hook), while the
    /// loop is already spinning idle.
    struct LateFrame {
        port: MemoryPort,
        arrived: std::rc::Rc<std::cell::Cell<bool>>,
        frame: Option<Vec<u8>>,
    }

    impl PacketPort for LateFrame {
        fn recv(&mut self, pool: &mut FramePool, out: &mut [RxFrame]) -> Result<usize, PortError> {
            if self.arrived.get() {
                if let Some(f) = self.frame.take() {
                    self.port.inject(&f).unwrap();
                }
            }
            self.port.recv(pool, out)
        }
        fn send(&mut self, pool: &mut FramePool, ids: &[u32]) -> Result<usize, PortError> {
            self.port.send(pool, ids)
        }
        fn counters(&mut self) -> PortCounters {
            self.port.counters()
        }
        fn poll_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
            None
        }
        fn reopen(&mut self) -> Result<PortCounters, PortError> {
            self.port.reopen()
        }
    }

    /// Counts the loop's iterations: the frame arrives at the 100th, the loop stops at the
    /// 100 000th.
    struct Iterations {
        n: u64,
        arrived: std::rc::Rc<std::cell::Cell<bool>>,
        stop: Arc<AtomicBool>,
    }

    impl LoopHook for Iterations {
        fn poll(&mut self, _engine: &mut Engine, _now: Timestamp) -> Option<bool> {
            self.n += 1;
            self.arrived.set(self.n >= 100);
            if self.n >= 100_000 {
                self.stop.store(true, Ordering::Relaxed);
            }
            None
        }
    }

    #[test]
    fn a_busy_polling_loop_reads_a_frame_that_arrives_while_it_spins() {
        // The clock stands still, so only the spin itself can make the loop read again.
        let text = "[interfaces]\ninside = \"a\"\noutside = \"b\"\n[daemon]\nbusy_poll = true\n";
        let (config, metrics, mut pool, mut engine) = loop_parts(text);
        let arrived = std::rc::Rc::new(std::cell::Cell::new(false));
        let mut inside = LateFrame {
            port: MemoryPort::new(MemoryPortConfig::default()),
            arrived: arrived.clone(),
            frame: Some(non_ip_frame(60)),
        };
        let mut outside = MemoryPort::new(MemoryPortConfig::default());
        let control = Control::default();
        let mut hook = Iterations {
            n: 0,
            arrived,
            stop: control.stop.clone(),
        };
        let clock = ManualClock::new(Timestamp::from_nanos(1_000_000_000));
        let options = LoopOptions::from_config(&config);
        assert!(options.busy_poll);
        let mut back = FramePool::new(64, 2048);
        let pools = Pools {
            shaped: &mut pool,
            reverse: &mut back,
        };
        let report = run_loop(
            &mut inside,
            &mut outside,
            pools,
            &mut engine,
            &clock,
            &metrics,
            &options,
            &control.stop,
            &mut hook,
        )
        .unwrap();
        assert_eq!(outside.discard_sent(), 1, "{report:?}");
        assert_eq!(pool.in_use(), 0);
        // Ready to sleep without the kernel's default 50 µs slack should a reload ask for it.
        assert_eq!(nix::sys::prctl::get_timerslack(), Ok(1));
    }

    #[test]
    fn a_round_reads_again_only_the_ports_that_may_have_frames() {
        let r = |inside, outside| Readable { inside, outside };
        let io = |read, full, sent| RoundIo { read, full, sent };
        let none = Readable::NONE;
        // Both read, nothing full, nothing sent: the next round waits for ppoll.
        let round = io(Readable::BOTH, none, none);
        assert_eq!(Readable::BOTH.after_round(&round), none);
        // Sent on outside: its answer is read next; a full inside batch is read again.
        let round = io(Readable::BOTH, r(true, false), r(false, true));
        assert_eq!(Readable::BOTH.after_round(&round), Readable::BOTH);
        let round = io(Readable::BOTH, none, r(true, false));
        assert_eq!(Readable::BOTH.after_round(&round), r(true, false));
        // A readable port this round did not read (no room, link down) stays readable.
        let round = io(r(false, true), none, none);
        assert_eq!(Readable::BOTH.after_round(&round), r(true, false));
        assert_eq!(r(false, true).after_round(&round), none);
    }

    #[test]
    fn the_loop_wakes_never_before_the_next_departure_and_at_most_the_slack_after_it() {
        let now = Timestamp::from_nanos(1_000_000_000);
        let max = Duration::from_nanos(MAX_SLEEP.as_nanos() as u64);
        for slack_us in [0, 1, 50, 100, 1_000, 60_000] {
            let slack = Duration::from_micros(slack_us);
            for ahead_ns in [
                0,
                1,
                999,
                170_000,
                10_000_000,
                49_999_999,
                50_000_000,
                3_000_000_000,
            ] {
                let due = now + Duration::from_nanos(ahead_ns);
                let sleep = wake_after(Some(due), slack, now);
                let wake = now + Duration::from_nanos(sleep.as_nanos() as u64);
                // Never before the departure, unless MAX_SLEEP wakes the loop earlier (it then
                // sleeps again); never more than the slack after it.
                assert!(wake >= due || wake == now + max, "{slack_us} {ahead_ns}");
                assert!(wake <= due.saturating_add(slack), "{slack_us} {ahead_ns}");
                assert!(sleep <= MAX_SLEEP);
            }
            // Already due: at most the slack, minus what has passed since.
            let past = Timestamp::from_nanos(now.as_nanos() - 30_000);
            let sleep = wake_after(Some(past), slack, now);
            let over = Duration::from_nanos(sleep.as_nanos() as u64);
            assert!(
                now + over <= past.saturating_add(slack).max(now),
                "{slack_us}"
            );
            assert_eq!(wake_after(None, slack, now), MAX_SLEEP);
        }
        assert_eq!(
            wake_after(Some(now + Duration::from_micros(170)), Duration::ZERO, now),
            StdDuration::from_micros(170)
        );
    }

    #[test]
    fn sleep_is_bounded_and_zero_when_due() {
        let now = Timestamp::from_nanos(1_000);
        assert_eq!(sleep_time(None, now), MAX_SLEEP);
        assert_eq!(sleep_time(Some(now), now), StdDuration::ZERO);
        let later = now + Duration::from_micros(30);
        assert_eq!(sleep_time(Some(later), now), StdDuration::from_micros(30));
        let far = now + Duration::from_secs(3);
        assert_eq!(sleep_time(Some(far), now), MAX_SLEEP);
    }

    #[test]
    fn the_loop_forwards_both_ways_and_stops() {
        let text = "[interfaces]\ninside = \"a\"\noutside = \"b\"\n";
        let (config, metrics, mut pool, mut engine) = loop_parts(text);
        let mut inside = MemoryPort::new(MemoryPortConfig::default());
        let mut outside = MemoryPort::new(MemoryPortConfig::default());
        let arp = non_ip_frame(60);
        inside.inject(&arp).unwrap();
        outside.inject(&arp).unwrap();
        let clock = ManualClock::new(Timestamp::from_nanos(1));
        let ports = (&mut inside, &mut outside);
        let report = run_stopped_after(
            20,
            &config,
            ports,
            &mut pool,
            (&mut engine, &metrics),
            &clock,
        );
        assert_eq!(outside.pop_sent().unwrap(), arp);
        assert_eq!(inside.pop_sent().unwrap(), arp);
        assert_eq!((report.engine.received, report.passed_back), (1, 1));
        assert_eq!(pool.in_use(), 0);
    }
}
