//! Floods for the real-traffic tests of a shaper under attack, and what measures them at the
//! receiver, second by second.
//!
//! A shaper must hold every class to its configured rate whatever one class is offered: a
//! flooded class delivers at most its limit, and the others keep theirs (the isolation of
//! Carousel §2, "each class gets its rate"; of NicPic §3). The tests that check this need
//! three kinds of flood and a way to see, per second, what each class delivered:
//!
//! * [`udp_flood`]: kernel UDP at a fixed offered rate from the sender to a sink in the receiver
//!   ([`crate::trafficgen`]'s paced UDP flows: a plain socket, one 5-tuple per flow);
//! * [`raw_flood`]: frames written on the sender's veth with a raw AF_PACKET socket at a fixed
//!   frame rate: garbage the parser must refuse ([`frames::garbage`]), or well-formed TCP/UDP
//!   frames whose 5-tuple is new with every frame ([`frames::Spoof`]);
//! * [`Tap`]: an AF_PACKET socket on the receiver's veth that counts the bytes of every frame
//!   the receiver got into buckets chosen by the caller (a class's protocol and port), read
//!   every [`TAP_SAMPLE_EVERY`]; its series, the receiver's veth counters ([`sample_link`]) and
//!   the TCP sinks' cumulative bytes ([`crate::trafficgen::GroupReport::received_at`]) become
//!   per-second rates with [`per_second_bps`], all on one time origin;
//! * [`spawn_checked_shaper`]: the daemon's loop as [`crate::shaper::spawn_shaper`] runs it,
//!   with a hook that checks the engine's invariants (CONTRIBUTING.md §10) every so often while
//!   the flood runs, and again at the end with the frame pool's slots all returned.
//!
//! Rates are in bits per second of frame bytes (Ethernet header included, no FCS: what a
//! veth's `rx_bytes` counts and what the shaper charges a class), except the TCP and UDP
//! sinks' goodput, which is payload.

pub mod frames;

use crate::netns::{Namespace, TopoError};
use crate::trafficgen::{self, FlowGroup, TrafficError, TrafficPlan, TrafficReport, Transport};
use frames::{Rng, Spoof};
use metronome_core::{Clock, Duration as CoreDuration, Timestamp};
use metronome_daemon::driver::run::{
    run_loop, Control, EarlyLoop, LoopHook, LoopOptions, LoopReport, Pools,
};
use metronome_daemon::ops::config::Config;
use metronome_daemon::ops::metrics::{Metrics, MetricsServer};
use metronome_daemon::os::ports::{enable_gro, frame_pool, open_ports, reverse_pool};
use metronome_engine::engine::Engine;
use metronome_io::{
    wait_readable, AfPacketConfig, AfPacketPort, FramePool, MonotonicClock, PacketPort,
    PortCounters, PortError, RxFrame,
};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often a [`Tap`] records its buckets' cumulative bytes: 10 ms, a hundredth of the
/// per-second windows the tests assert on (a boundary falls at most 5 ms from a sample, and
/// [`per_second_bps`] interpolates between the two around it).
pub const TAP_SAMPLE_EVERY: Duration = Duration::from_millis(10);
/// Frames per `sendmmsg` of [`raw_flood`] at most: 32, half of the port's batch
/// ([`metronome_io`]'s `SEND_BATCH`), so a batch is due every 0.25 ms at 130 000 frames/s and
/// the offered rate stays smooth at a millisecond's scale.
pub const RAW_BATCH: usize = 32;
/// How long [`raw_flood`] sleeps when it is ahead of its schedule, or the device is busy.
const RAW_PAUSE: Duration = Duration::from_micros(100);
/// Garbage frames made before a garbage flood starts and sent in turn (a multiple of the six
/// kinds that `frames::garbage` rotates through): making a frame fills it with random bytes,
/// which at 138 000 frames/s would take a good part of a core of this 2-core machine from the
/// traffic under test.
const GARBAGE_BANK: usize = 6 * 1024;
/// How long [`Tap`]'s thread waits for a frame before it looks at the clock and its stop flag.
const TAP_POLL: Duration = Duration::from_millis(2);
/// Frames per `recvmmsg` of a [`Tap`].
const TAP_BATCH: usize = 64;

/// Why a flood or a measurement could not run.
#[derive(Debug, thiserror::Error)]
pub enum FloodError {
    /// Entering a namespace or reading its counters failed.
    #[error(transparent)]
    Namespace(#[from] TopoError),
    /// A packet socket could not be opened or used.
    #[error(transparent)]
    Port(#[from] PortError),
    /// The UDP flood's traffic run failed.
    #[error(transparent)]
    Traffic(#[from] TrafficError),
    /// A flood's thread panicked.
    #[error("a flood thread panicked")]
    ThreadPanicked,
    /// The metrics endpoint could not be served.
    #[error(transparent)]
    Metrics(#[from] metronome_daemon::ops::metrics::MetricsError),
}

/// The cumulative value of `series` (time, bytes; times ascending) at `t`, interpolated
/// linearly between the samples around it; the first or last sample's value outside them.
pub fn value_at(series: &[(Duration, u64)], t: Duration) -> f64 {
    let after = series.partition_point(|s| s.0 < t);
    match (after.checked_sub(1).map(|i| series[i]), series.get(after)) {
        (Some(a), Some(b)) if b.0 > a.0 => {
            let f = (t - a.0).as_secs_f64() / (b.0 - a.0).as_secs_f64();
            a.1 as f64 + f * (b.1 as f64 - a.1 as f64)
        }
        (_, Some(b)) => b.1 as f64,
        (Some(a), None) => a.1 as f64,
        (None, None) => 0.0,
    }
}

/// The rate of the cumulative byte counter `series` in each of `seconds` consecutive seconds
/// from `from`, bit/s (see [`value_at`] for the boundaries).
pub fn per_second_bps(series: &[(Duration, u64)], from: Duration, seconds: usize) -> Vec<f64> {
    (0..seconds as u32)
        .map(|i| {
            let a = value_at(series, from + Duration::from_secs(u64::from(i)));
            let b = value_at(series, from + Duration::from_secs(u64::from(i) + 1));
            (b - a) * 8.0
        })
        .collect()
}

/// `series` with `offset` added to every time: a series measured from another origin, moved to
/// the caller's (for example a [`TrafficReport`]'s, which starts at its `started`).
pub fn shifted(series: &[(Duration, u64)], offset: Duration) -> Vec<(Duration, u64)> {
    series.iter().map(|&(t, v)| (t + offset, v)).collect()
}

/// A UDP flood: `flows` connected UDP sockets, each sending `payload`-byte datagrams paced to
/// `rate_bps` (payload bits) for `duration`, to `port` of the receiver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpFlood {
    /// Destination port (the class's).
    pub port: u16,
    /// Sockets, each its own 5-tuple.
    pub flows: usize,
    /// Datagram payload, bytes.
    pub payload: usize,
    /// Offered rate of each flow, bit/s of payload.
    pub rate_bps: u64,
    /// How long it sends.
    pub duration: Duration,
}

impl UdpFlood {
    /// The offered rate of all flows on the wire, bit/s: payload plus the UDP, IPv4 and
    /// Ethernet headers (8 + 20 + 14 bytes) of each datagram (one frame each below the MTU).
    pub fn wire_bps(&self) -> f64 {
        let frame = (self.payload + 42) as f64;
        self.rate_bps as f64 * self.flows as f64 * frame / self.payload as f64
    }
}

/// Runs `flood` from `sender` to a sink on `receiver_addr` in `receiver`; returns the traffic
/// report of its one group (the sink's cumulative bytes per 100 ms window in `received_at`,
/// from the report's `started`).
pub fn udp_flood(
    sender: &Namespace,
    receiver: &Namespace,
    receiver_addr: Ipv4Addr,
    flood: UdpFlood,
) -> Result<TrafficReport, FloodError> {
    let mut group = FlowGroup::udp("udp-flood", flood.port, flood.flows);
    group.transport = Transport::Udp {
        payload: flood.payload,
        rate_bps: Some(flood.rate_bps),
    };
    let plan = TrafficPlan::new(receiver_addr, vec![group], flood.duration);
    Ok(trafficgen::run(&plan, Some(sender), Some(receiver))?)
}

/// What a [`raw_flood`] sends.
#[derive(Clone, Debug)]
pub enum RawKind {
    /// [`frames::garbage`] from a generator seeded with this.
    Garbage(u64),
    /// [`frames::Spoof`] frames, the `n`-th frame sent with the `n`-th 5-tuple.
    Spoofed(Spoof),
}

/// A raw flood: frames of `kind` written on an interface at `frames_per_s` for `duration`.
#[derive(Clone, Debug)]
pub struct RawFlood {
    /// What is sent.
    pub kind: RawKind,
    /// Offered frame rate, frames per second; the sender does what it can above its machine's
    /// speed (see [`RawReport::sent`]).
    pub frames_per_s: f64,
    /// How long it sends.
    pub duration: Duration,
}

/// What a [`raw_flood`] sent.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RawReport {
    /// When the first frame was handed to the socket.
    pub started: Instant,
    /// From `started` to the last send.
    pub elapsed: Duration,
    /// Frames the socket took (its `tx_packets`).
    pub sent: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Of `sent`: malformed garbage frames.
    pub malformed: u64,
    /// Of `sent`: non-IP garbage frames.
    pub non_ip: u64,
    /// Of `sent`: spoofed frames, each with its own 5-tuple (distinct by construction, see
    /// [`frames::Spoof::tuple`]).
    pub distinct_tuples: u64,
    /// Frames built but not taken by a busy device (freed, not sent again; `tx_busy`).
    pub refused: u64,
    /// Frames the socket refused for good (`tx_errors`).
    pub tx_errors: u64,
}

/// Sends `flood` on `iface` of `ns` from `src` to `dst` MAC, on a thread inside `ns`; returns
/// when it is done. The schedule is by frame count: the `k`-th frame is due at `k /
/// frames_per_s` after the start, sent in batches of at most [`RAW_BATCH`]; a batch the device
/// refuses is freed and counted, not sent again (the schedule goes on).
pub fn raw_flood(
    ns: &Namespace,
    iface: &str,
    macs: ([u8; 6], [u8; 6]),
    flood: RawFlood,
) -> Result<RawReport, FloodError> {
    let iface = iface.to_owned();
    ns.run(move || send_raw(&iface, macs, &flood))?
}

/// The body of [`raw_flood`], inside the namespace.
fn send_raw(
    iface: &str,
    (dst, src): ([u8; 6], [u8; 6]),
    flood: &RawFlood,
) -> Result<RawReport, FloodError> {
    let mut port = AfPacketPort::open(iface, &AfPacketConfig::default())?;
    let mut pool = FramePool::new(RAW_BATCH as u32, 2048);
    let mut rng = Rng(match &flood.kind {
        RawKind::Garbage(seed) => *seed | 1,
        RawKind::Spoofed(s) => s.seed | 1,
    });
    let mut r = RawReport {
        started: Instant::now(),
        elapsed: Duration::ZERO,
        sent: 0,
        bytes: 0,
        malformed: 0,
        non_ip: 0,
        distinct_tuples: 0,
        refused: 0,
        tx_errors: 0,
    };
    let bank: Vec<(Vec<u8>, bool)> = match &flood.kind {
        RawKind::Garbage(_) => (0..GARBAGE_BANK as u64)
            .map(|k| frames::garbage(&mut rng, k, dst, src))
            .collect(),
        RawKind::Spoofed(_) => Vec::new(),
    };
    r.started = Instant::now();
    let (mut n, mut buf) = (0u64, Vec::with_capacity(2048));
    let mut batch: Vec<(u32, usize, Option<bool>)> = Vec::with_capacity(RAW_BATCH);
    let mut ids = Vec::with_capacity(RAW_BATCH);
    while r.started.elapsed() < flood.duration {
        let due = (r.started.elapsed().as_secs_f64() * flood.frames_per_s) as u64;
        let want = due.saturating_sub(n).min(RAW_BATCH as u64) as usize;
        if want == 0 {
            std::thread::sleep(RAW_PAUSE);
            continue;
        }
        batch.clear();
        for _ in 0..want {
            let garbage = match &flood.kind {
                RawKind::Garbage(_) => {
                    let (f, malformed) = &bank[n as usize % GARBAGE_BANK];
                    buf.clear();
                    buf.extend_from_slice(f);
                    Some(*malformed)
                }
                RawKind::Spoofed(s) => {
                    s.frame(n, dst, src, &mut buf);
                    None
                }
            };
            n += 1;
            let id = pool.store(&buf).expect("a batch fits the pool");
            batch.push((id, buf.len(), garbage));
        }
        ids.clear();
        ids.extend(batch.iter().map(|b| b.0));
        let taken = port.send(&mut pool, &ids)?;
        for &(_, len, garbage) in &batch[..taken] {
            r.bytes += len as u64;
            match garbage {
                Some(true) => r.malformed += 1,
                Some(false) => r.non_ip += 1,
                None => r.distinct_tuples += 1,
            }
        }
        for &(id, _, _) in &batch[taken..] {
            pool.free(id);
            r.refused += 1;
        }
        if taken < batch.len() {
            std::thread::sleep(RAW_PAUSE);
        }
    }
    r.elapsed = r.started.elapsed();
    let c = port.counters();
    r.tx_errors = c.tx_errors;
    r.sent = c.tx_packets;
    // A frame refused for good was consumed but not sent: take it back out of the kinds.
    if c.tx_errors > 0 {
        r.distinct_tuples = r.distinct_tuples.min(c.tx_packets);
    }
    Ok(r)
}

/// Which bucket of a [`Tap`] a frame counts in (`None`: no bucket, not counted).
pub type Classify = fn(&[u8]) -> Option<usize>;

/// A counter of the frames a receiver gets, by bucket: an AF_PACKET socket on its interface
/// (promiscuous, ignoring what the receiver sends) on a thread inside its namespace, adding each
/// frame's length to its bucket ([`Classify`]) and recording every bucket's cumulative bytes
/// every [`TAP_SAMPLE_EVERY`] from a common origin. The socket sees every frame the interface
/// delivers; what its receive buffer could not hold is counted in the port's `rx_ring_drops`,
/// and a tap that missed frames undercounts, so callers check that it missed none.
pub struct Tap(Receiver<TapReport>);

/// A thread inside a namespace reading one interface's frames on an AF_PACKET socket until
/// [`Receiver::finish`]: what [`Tap`] and [`crate::class_traffic::ClassCounter`] count with.
pub struct Receiver<T> {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<Result<T, FloodError>, TopoError>>,
}

impl<T: Send + 'static> Receiver<T> {
    /// Opens the socket on `iface` of `ns` and runs `read` on it (with the stop flag it must
    /// watch) on a thread inside `ns`; returns once the socket is open (or failed), so that the
    /// caller's traffic starts after it.
    pub fn spawn<F>(ns: &Namespace, iface: &str, read: F) -> Result<Receiver<T>, FloodError>
    where
        F: FnOnce(AfPacketPort, &AtomicBool) -> Result<T, FloodError> + Send + 'static,
    {
        Receiver::spawn_with(ns, iface, AfPacketConfig::default(), read)
    }

    /// [`Receiver::spawn`] with the socket opened as `config` says.
    pub fn spawn_with<F>(
        ns: &Namespace,
        iface: &str,
        config: AfPacketConfig,
        read: F,
    ) -> Result<Receiver<T>, FloodError>
    where
        F: FnOnce(AfPacketPort, &AtomicBool) -> Result<T, FloodError> + Send + 'static,
    {
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, iface) = (stop.clone(), iface.to_owned());
        let (opened_tx, opened_rx) = std::sync::mpsc::channel();
        let thread = ns.spawn(move || {
            let port = AfPacketPort::open(&iface, &config);
            let _ = opened_tx.send(());
            read(port?, &flag)
        })?;
        let _ = opened_rx.recv();
        Ok(Receiver { stop, thread })
    }

    /// Stops reading and returns what `read` returned.
    pub fn finish(self) -> Result<T, FloodError> {
        self.stop.store(true, Ordering::Release);
        self.thread
            .join()
            .map_err(|_| FloodError::ThreadPanicked)??
    }
}

/// Which time a [`Tap`] counts a frame at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TapClock {
    /// When the tap's thread read it.
    Read,
    /// When the kernel received it (a TPACKET_V3 ring's timestamps, `RxFrame::stamp_ns`): on a
    /// loaded machine the thread may read late, which would move bytes from one window of a
    /// rate to the next (a dip and a peak that the traffic did not have). The series' samples
    /// then fall on the [`TAP_SAMPLE_EVERY`] boundaries as the frames' times pass them.
    Kernel,
}

/// What a [`Tap`] counted.
#[derive(Clone, Debug)]
pub struct TapReport {
    /// Per bucket: cumulative bytes with the time since the origin: when they were read, or
    /// with [`TapClock::Kernel`] the time the kernel received the frames.
    pub series: Vec<Vec<(Duration, u64)>>,
    /// Frames per bucket.
    pub frames: Vec<u64>,
    /// Frames in no bucket.
    pub unclassified: u64,
    /// The tap socket's counters (`rx_ring_drops`: frames it missed).
    pub counters: PortCounters,
}

impl Tap {
    /// Opens the tap on `iface` of `ns` with `buckets` buckets and starts counting; times are
    /// measured from `origin`.
    pub fn spawn(
        ns: &Namespace,
        iface: &str,
        classify: Classify,
        buckets: usize,
        origin: Instant,
    ) -> Result<Tap, FloodError> {
        Tap::spawn_with(ns, iface, (classify, buckets), origin, TapClock::Read)
    }

    /// [`Tap::spawn`] with the times of `clock`.
    pub fn spawn_with(
        ns: &Namespace,
        iface: &str,
        (classify, buckets): (Classify, usize),
        origin: Instant,
        clock: TapClock,
    ) -> Result<Tap, FloodError> {
        let stamped = clock == TapClock::Kernel;
        let rx = if stamped {
            metronome_io::RxMode::Ring
        } else {
            AfPacketConfig::default().rx
        };
        let config = AfPacketConfig {
            rx,
            ..AfPacketConfig::default()
        };
        Receiver::spawn_with(ns, iface, config, move |port, stop| {
            count(port, classify, buckets, origin, stop, stamped)
        })
        .map(Tap)
    }

    /// Stops counting and returns what was counted.
    pub fn finish(self) -> Result<TapReport, FloodError> {
        self.0.finish()
    }
}

/// The loop of a [`Tap`]'s thread.
fn count(
    mut port: AfPacketPort,
    classify: Classify,
    buckets: usize,
    origin: Instant,
    stop: &AtomicBool,
    stamped: bool,
) -> Result<TapReport, FloodError> {
    // The origin on the kernel's clock of frame times (CLOCK_REALTIME), for `stamped`.
    let origin_real_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .saturating_sub(origin.elapsed())
        .as_nanos();
    let mut pool = FramePool::new(TAP_BATCH as u32, 2048);
    let mut out = [RxFrame::default(); TAP_BATCH];
    let mut bytes = vec![0u64; buckets];
    let mut report = TapReport {
        series: vec![Vec::new(); buckets],
        frames: vec![0; buckets],
        unclassified: 0,
        counters: PortCounters::default(),
    };
    let mut next_sample = Instant::now();
    // With `stamped`: the next boundary, from the origin, that the frames' times will pass.
    let mut next_boundary = origin.elapsed();
    loop {
        let now = Instant::now();
        let stopping = stop.load(Ordering::Acquire);
        if (!stamped && now >= next_sample) || stopping {
            let t = now.saturating_duration_since(origin);
            for (series, &b) in report.series.iter_mut().zip(&bytes) {
                series.push((t, b));
            }
            next_sample += TAP_SAMPLE_EVERY;
            if stopping {
                break;
            }
        }
        let n = port.recv(&mut pool, &mut out)?;
        for rx in &out[..n] {
            if stamped && rx.stamp_ns != 0 {
                let at = u128::from(rx.stamp_ns).saturating_sub(origin_real_ns);
                let at = Duration::from_nanos(u64::try_from(at).unwrap_or(u64::MAX));
                while at >= next_boundary {
                    for (series, &b) in report.series.iter_mut().zip(&bytes) {
                        series.push((next_boundary, b));
                    }
                    next_boundary += TAP_SAMPLE_EVERY;
                }
            }
            match classify(pool.frame(rx.id)).filter(|&b| b < buckets) {
                Some(b) => {
                    bytes[b] += u64::from(rx.len);
                    report.frames[b] += 1;
                }
                None => report.unclassified += 1,
            }
            pool.free(rx.id);
        }
        if n == 0 {
            if let Some(fd) = port.poll_fd() {
                wait_readable(fd, TAP_POLL).map_err(|source| PortError::Io {
                    op: "poll",
                    ifname: port.ifname().to_owned(),
                    source,
                })?;
            }
        }
    }
    report.counters = port.counters();
    Ok(report)
}

/// Reads `iface`'s rx byte counter in `ns` every `every` until `stop`; returns `(time since
/// origin, rx bytes)` samples.
pub fn sample_link(
    ns: &Namespace,
    iface: &str,
    origin: Instant,
    every: Duration,
    stop: &AtomicBool,
) -> Result<Vec<(Duration, u64)>, TopoError> {
    let mut counters = ns.interface_counters(iface)?;
    let mut samples = Vec::new();
    loop {
        let done = stop.load(Ordering::Acquire);
        samples.push((origin.elapsed(), counters.read()?.rx_bytes));
        if done {
            return Ok(samples);
        }
        std::thread::sleep(every);
    }
}

/// What a [`spawn_checked_shaper`] loop reports: the loop's report, how many times the engine's
/// invariants were checked while it ran (each check that fails panics the loop's thread), and
/// the frame pool's slots still in use after the loop stopped (0: every frame's slot returned).
#[derive(Clone, Copy, Debug)]
pub struct CheckedReport {
    /// The loop's report.
    pub report: LoopReport,
    /// Checks of [`Engine::invariants`] while the loop ran (one more at the end is not counted).
    pub checks: u64,
    /// Pool slots in use after the loop stopped.
    pub pool_in_use: usize,
    /// Frames the early filter refused in the kernel, by reason (over rate, malformed,
    /// non-IP; `metronome_daemon::os::early::Reason`); `None`: no filter was loaded.
    pub early_refused: Option<[u64; 3]>,
}

/// Serves `metrics` on an ephemeral port of the loopback of namespace `ns` (where the daemon's
/// loop runs), as `metronome run` serves its endpoint; the server stops when dropped.
pub fn serve_metrics(ns: &Namespace, metrics: &Metrics) -> Result<MetricsServer, FloodError> {
    let m = metrics.clone();
    Ok(ns.run(move || m.serve(std::net::SocketAddr::from(([127, 0, 0, 1], 0))))??)
}

/// The thread of [`spawn_checked_shaper`].
pub type CheckedThread = JoinHandle<Result<Result<CheckedReport, PortError>, TopoError>>;

/// Runs the daemon's loop for `config` on a new thread inside `ns` the way
/// [`metronome_daemon::ops::service::run_with`] does (its ports, GRO, frame pool, engine and loop
/// options), without reloads, with a hook that calls [`Engine::invariants`] every
/// `check_every`; at the end the invariants are checked once more. Set `control.stop` and join
/// the handle for the report. A loop that fails to start sets `control.stop`.
pub fn spawn_checked_shaper(
    ns: &Namespace,
    config: Config,
    metrics: Metrics,
    control: Control,
    check_every: Duration,
) -> Result<CheckedThread, TopoError> {
    ns.spawn(move || {
        let result = checked_loop(&config, &metrics, &control, check_every);
        if result.is_err() {
            control.stop.store(true, Ordering::Relaxed);
        }
        result
    })
}

/// The body of [`spawn_checked_shaper`]'s thread.
fn checked_loop(
    config: &Config,
    metrics: &Metrics,
    control: &Control,
    check_every: Duration,
) -> Result<CheckedReport, PortError> {
    let (mut inside, mut outside) = open_ports(config, None)?;
    // The daemon's early filter (`[daemon] early_refuse`), attached once the ports are open.
    let early = metronome_daemon::ops::service::load_early(config);
    if let Some(filter) = &early {
        inside.set_socket_filter(filter.program_fd())?;
    }
    // The loop's thread as the daemon's: `[daemon] nice`, `realtime_priority`.
    metronome_daemon::os::realtime::nice_logged(config.daemon.nice, "loop");
    metronome_daemon::os::realtime::enter_logged(config.daemon.realtime_priority, "loop");
    enable_gro(config);
    let mut pool = frame_pool(config);
    let mut back = reverse_pool(config);
    // A seed drawn as the daemon draws it: the spoofed flows cannot be aimed at a bucket.
    let seed = metronome_engine::flow_seed::FlowSeed::draw();
    let mut engine =
        metronome_daemon::driver::reload::engine(config, pool.capacity(), metrics, seed);
    let clock = MonotonicClock::new();
    let mut hook = InvariantsHook {
        every: CoreDuration::from_nanos(check_every.as_nanos() as u64),
        next: clock.now(),
        checks: 0,
    };
    let early_loop = early.clone().map(|filter| EarlyLoop {
        filter,
        index: 0,
        syncs: true,
    });
    let report = run_hooked(
        (&mut inside, &mut outside),
        (&mut pool, &mut back),
        (&mut engine, &clock),
        (config, metrics, control),
        early_loop,
        &mut hook,
    )?;
    engine.invariants();
    Ok(CheckedReport {
        report,
        checks: hook.checks,
        pool_in_use: pool.in_use() + back.in_use(),
        early_refused: early.map(|f| f.refused()),
    })
}

/// Runs the daemon's loop (`metronome_daemon::driver::run::run_loop`) on AF_PACKET `ports` with
/// `pools`, `engine` on `clock`, the loop options of `config` (feeding `early`, when given) and
/// `hook`, until `control.stop` is set.
pub fn run_hooked<H: LoopHook>(
    (inside, outside): (&mut AfPacketPort, &mut AfPacketPort),
    (shaped, reverse): (&mut FramePool, &mut FramePool),
    (engine, clock): (&mut Engine, &MonotonicClock),
    (config, metrics, control): (&Config, &Metrics, &Control),
    early: Option<EarlyLoop>,
    hook: &mut H,
) -> Result<LoopReport, PortError> {
    let pools = Pools { shaped, reverse };
    let options = LoopOptions::from_config(config).with_early(early);
    run_loop(
        inside,
        outside,
        pools,
        engine,
        clock,
        metrics,
        &options,
        &control.stop,
        hook,
    )
}

/// The hook of [`spawn_checked_shaper`]: the engine's invariants every `every`.
struct InvariantsHook {
    every: CoreDuration,
    next: Timestamp,
    checks: u64,
}

impl LoopHook for InvariantsHook {
    fn poll(&mut self, engine: &mut Engine, now: Timestamp) -> Option<bool> {
        if now >= self.next {
            self.next = now + self.every;
            engine.invariants();
            self.checks += 1;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn per_second_rates_interpolate_between_samples() {
        // 1 000 bytes every 100 ms from 50 ms on: 80 000 bit/s.
        let series: Vec<_> = (0..40).map(|k| (ms(50 + 100 * k), 1000 * k)).collect();
        let rates = per_second_bps(&series, ms(200), 3);
        assert_eq!(rates.len(), 3);
        for r in rates {
            assert!((r - 80_000.0).abs() < 1e-6, "{r}");
        }
        // Outside the samples, the first or last value: nothing counted there.
        assert_eq!(value_at(&series, ms(0)), 0.0);
        assert_eq!(value_at(&series, ms(10_000)), 39_000.0);
        assert_eq!(value_at(&[], ms(1)), 0.0);
        let moved = shifted(&series, ms(1000));
        assert_eq!(value_at(&moved, ms(1150)), 1000.0);
    }

    #[test]
    fn a_udp_flood_offers_its_headers_too() {
        let f = UdpFlood {
            port: 6001,
            flows: 2,
            payload: 1472,
            rate_bps: 100_000_000,
            duration: ms(1),
        };
        assert!((f.wire_bps() - 200e6 * 1514.0 / 1472.0).abs() < 1.0);
    }
}
