//! The loop between memory ports: forwarding, stop and drain, sleeping and busy polling.

use super::*;
use metronome_core::{Duration, ManualClock};
use metronome_io::PortCounters;
use metronome_io::{MemoryPort, MemoryPortConfig};

/// Runs the loop between two memory ports until a thread sets the stop flag after `ms`
/// milliseconds (memory ports have no descriptor: an idle loop sleeps, so the stop comes from
/// outside), with no hook.
fn run_stopped_after<C: Clock>(
    ms: u64,
    parts: &mut Parts,
    inside: &mut MemoryPort,
    outside: &mut MemoryPort,
    clock: &C,
) -> LoopReport {
    let Parts {
        config,
        metrics,
        pool,
        engine,
    } = parts;
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

/// A loop's world: its configuration, metrics, the shaped direction's pool and the engine.
struct Parts {
    config: Config,
    metrics: Metrics,
    pool: FramePool,
    engine: Engine,
}

/// The loop's world for `text`, with a pool of 256 slots.
fn loop_parts(text: &str) -> Parts {
    let config = Config::from_toml_str(text, "t.toml").unwrap();
    let metrics = Metrics::new();
    let pool = FramePool::new(256, 2048);
    let engine = crate::driver::reload::test_engine(&config, pool.capacity(), &metrics);
    Parts {
        config,
        metrics,
        pool,
        engine,
    }
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
    let mut parts = loop_parts(&text);
    let mut inside = MemoryPort::new(MemoryPortConfig::default());
    let mut outside = MemoryPort::new(MemoryPortConfig::default());
    let frame = non_ip_frame(1514);
    for _ in 0..20 {
        inside.inject(&frame).unwrap();
    }
    let clock = Stepping(std::sync::atomic::AtomicU64::new(1_000_000_000));
    let report = run_stopped_after(5, &mut parts, &mut inside, &mut outside, &clock);
    parts.engine.invariants();
    assert_eq!(parts.pool.in_use(), 0);
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
/// loop is already spinning idle; it records how many frames each `send` was given.
struct LateFrame {
    port: MemoryPort,
    arrived: std::rc::Rc<std::cell::Cell<bool>>,
    frame: Option<Vec<u8>>,
    sends: std::rc::Rc<std::cell::RefCell<Vec<usize>>>,
}

impl LateFrame {
    /// A plain memory port (no late frame) that records its sends in `sends`.
    fn recording(sends: std::rc::Rc<std::cell::RefCell<Vec<usize>>>) -> LateFrame {
        LateFrame {
            port: MemoryPort::new(MemoryPortConfig::default()),
            arrived: std::rc::Rc::new(std::cell::Cell::new(false)),
            frame: None,
            sends,
        }
    }
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
        self.sends.borrow_mut().push(ids.len());
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
    let Parts {
        config,
        metrics,
        mut pool,
        mut engine,
    } = loop_parts(text);
    let arrived = std::rc::Rc::new(std::cell::Cell::new(false));
    let mut inside = LateFrame {
        port: MemoryPort::new(MemoryPortConfig::default()),
        arrived: arrived.clone(),
        frame: Some(non_ip_frame(60)),
        sends: Default::default(),
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
    use side::next_may_read;
    // (was readable, read, full, sent) -> read again without a ppoll.
    // Read, nothing full, nothing sent: the next round waits for ppoll.
    assert!(!next_may_read(true, true, false, false));
    // Sent on it: the far end's answer is read next; a full batch is read again.
    assert!(next_may_read(true, true, false, true));
    assert!(next_may_read(true, true, true, false));
    assert!(next_may_read(false, false, false, true));
    // A readable port this round did not read (no room, link down) stays readable; one that
    // was not readable and was not read stays so.
    assert!(next_may_read(true, false, false, false));
    assert!(!next_may_read(false, false, false, false));
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
    let mut parts = loop_parts(text);
    let mut inside = MemoryPort::new(MemoryPortConfig::default());
    let mut outside = MemoryPort::new(MemoryPortConfig::default());
    let arp = non_ip_frame(60);
    inside.inject(&arp).unwrap();
    outside.inject(&arp).unwrap();
    let clock = ManualClock::new(Timestamp::from_nanos(1));
    let report = run_stopped_after(20, &mut parts, &mut inside, &mut outside, &clock);
    assert_eq!(outside.pop_sent().unwrap(), arp);
    assert_eq!(inside.pop_sent().unwrap(), arp);
    assert_eq!((report.engine.received, report.passed_back), (1, 1));
    assert_eq!(parts.pool.in_use(), 0);
}

#[test]
fn an_idle_loop_applies_the_control_socket_s_operations() {
    let text = "[interfaces]\ninside = \"a\"\noutside = \"b\"\n";
    let config = Config::from_toml_str(text, "t.toml").unwrap();
    let live = crate::ops::control::Live::new(&config, 1, Metrics::new()).unwrap();
    let control = Control::default();
    let endpoint = live.endpoint(0, 1);
    let stop = control.stop.clone();
    // The loop idles between memory ports (no descriptor): it sleeps in ppoll on the inbox's
    // eventfd alone.
    let looping = std::thread::spawn(move || {
        let mut parts = loop_parts(text);
        let mut hook = crate::driver::reload::FileReload::new(control.reload.clone(), None)
            .with_live(endpoint);
        let mut back = FramePool::new(256, 2048);
        let options = LoopOptions::from_config(&parts.config);
        run_loop(
            &mut MemoryPort::new(MemoryPortConfig::default()),
            &mut MemoryPort::new(MemoryPortConfig::default()),
            Pools {
                shaped: &mut parts.pool,
                reverse: &mut back,
            },
            &mut parts.engine,
            &metronome_io::MonotonicClock::new(),
            &parts.metrics,
            &options,
            &control.stop,
            &mut hook,
        )
        .unwrap();
        parts.engine
    });
    let send = |line: &str| {
        let request = crate::ops::control::Request::parse(line).unwrap();
        live.handle(request, std::time::Instant::now())
    };
    let added = send(r#"{"op":"add","class":{"name":"t","match":{"dscp":10},"rate":"1mbit"}}"#);
    assert!(added.ok, "{added:?}");
    assert_eq!(added.loops, Some(1));
    assert!(send(r#"{"op":"add","class":{"name":"u","rate":"2mbit"}}"#).ok);
    assert!(send(r#"{"op":"del","name":"t"}"#).ok);
    stop.store(true, Ordering::Relaxed);
    let engine = looping.join().unwrap();
    assert_eq!(engine.class_index("t"), None);
    assert!(engine.class_index("u").is_some());
    engine.invariants();
}

/// Counts the calls between two chunks of a transmit batch; stops the loop after 1 000 rounds.
struct Between {
    rounds: u64,
    between: u64,
    stop: Arc<AtomicBool>,
}

impl LoopHook for Between {
    fn poll(&mut self, _engine: &mut Engine, _now: Timestamp) -> Option<bool> {
        self.rounds += 1;
        if self.rounds >= 1_000 {
            self.stop.store(true, Ordering::Relaxed);
        }
        None
    }
    fn poll_live(&mut self, _engine: &mut Engine) {
        self.between += 1;
    }
}

#[test]
fn a_batch_leaves_in_chunks_with_the_live_operations_polled_between_them() {
    // Unshaped frames (the default class of a daemon without classes passes them) fill one
    // outgoing batch of 64: it leaves in chunks of TX_CHUNK, the hook polled between two.
    let text = "[interfaces]\ninside = \"a\"\noutside = \"b\"\n[daemon]\nbusy_poll = true\n";
    let Parts {
        config,
        metrics,
        mut pool,
        mut engine,
    } = loop_parts(text);
    let mut inside = MemoryPort::new(MemoryPortConfig::default());
    let frames = 64;
    for _ in 0..frames {
        inside.inject(&non_ip_frame(60)).unwrap();
    }
    let sends = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let mut outside = LateFrame::recording(sends.clone());
    let control = Control::default();
    let mut hook = Between {
        rounds: 0,
        between: 0,
        stop: control.stop.clone(),
    };
    let clock = ManualClock::new(Timestamp::from_nanos(1_000_000_000));
    let options = LoopOptions::from_config(&config);
    let mut back = FramePool::new(64, 2048);
    run_loop(
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
        &control.stop,
        &mut hook,
    )
    .unwrap();
    assert_eq!(outside.port.discard_sent(), frames);
    let sends = sends.borrow();
    assert_eq!(sends.iter().sum::<usize>(), frames, "{sends:?}");
    assert!(sends.iter().all(|&n| n <= side::TX_CHUNK), "{sends:?}");
    assert_eq!(sends.len(), frames / side::TX_CHUNK, "{sends:?}");
    assert_eq!(hook.between, sends.len() as u64 - 1);
}

#[test]
fn arrivals_wake_an_idle_loop_and_one_far_from_a_departure_but_not_one_about_to_wake_anyway() {
    let slack = Duration::from_micros(400);
    let us = StdDuration::from_micros;
    // Frames queued, the sleep within the slack: arrivals wait for the wake-up.
    assert!(sleeps_through_arrivals(true, us(400), slack));
    assert!(sleeps_through_arrivals(true, us(1), slack));
    // Nothing queued (a sparse flow's packet must not wait), or the departure further away.
    assert!(!sleeps_through_arrivals(false, us(100), slack));
    assert!(!sleeps_through_arrivals(true, us(401), slack));
    assert!(!sleeps_through_arrivals(true, MAX_SLEEP, slack));
    // A zero slack: every arrival wakes the loop.
    assert!(!sleeps_through_arrivals(true, us(1), Duration::ZERO));
    assert!(!sleeps_through_arrivals(true, StdDuration::ZERO, slack));
}

/// A port whose descriptor is one end of a socket pair: readable once the other end wrote.
struct SocketPort(std::os::unix::net::UnixDatagram);

impl PacketPort for SocketPort {
    fn recv(&mut self, _: &mut FramePool, _: &mut [RxFrame]) -> Result<usize, PortError> {
        Ok(0)
    }
    fn send(&mut self, _: &mut FramePool, ids: &[u32]) -> Result<usize, PortError> {
        Ok(ids.len())
    }
    fn counters(&mut self) -> PortCounters {
        PortCounters::default()
    }
    fn poll_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        Some(self.0.as_fd())
    }
}

#[test]
fn a_sleep_says_what_ended_it_and_a_deaf_one_ignores_frames_but_not_the_control_socket() {
    use std::os::fd::AsFd;
    let (inside, inside_peer) = std::os::unix::net::UnixDatagram::pair().unwrap();
    let (outside, _outside_peer) = std::os::unix::net::UnixDatagram::pair().unwrap();
    let (wake, wake_peer) = std::os::unix::net::UnixDatagram::pair().unwrap();
    let (inside, outside) = (SocketPort(inside), SocketPort(outside));
    let short = StdDuration::from_millis(20);
    // Nothing readable: the timeout ends it, and no port is to be read.
    let woken = wait(&inside, &outside, Some(wake.as_fd()), short, false);
    assert_eq!(
        (woken.inside, woken.outside, woken.by),
        (false, false, Wake::Due)
    );
    // A frame on the inside port ends it at once.
    inside_peer.send(b"frame").unwrap();
    let started = std::time::Instant::now();
    let woken = wait(&inside, &outside, Some(wake.as_fd()), MAX_SLEEP, false);
    assert_eq!(
        (woken.inside, woken.outside, woken.by),
        (true, false, Wake::Frame)
    );
    assert!(started.elapsed() < MAX_SLEEP);
    // Deaf: the same readable port does not end it; both ports are read after it.
    let started = std::time::Instant::now();
    let woken = wait(&inside, &outside, Some(wake.as_fd()), short, true);
    assert_eq!(
        (woken.inside, woken.outside, woken.by),
        (true, true, Wake::Due)
    );
    assert!(started.elapsed() >= short);
    // An operation of the control socket ends even a deaf sleep.
    wake_peer.send(b"op").unwrap();
    let woken = wait(&inside, &outside, Some(wake.as_fd()), MAX_SLEEP, true);
    assert_eq!(woken.by, Wake::Control);
}

#[test]
fn the_loop_sleeps_through_arrivals_only_while_several_come_within_the_slack() {
    let slack = Duration::from_micros(400);
    let mut arrivals = wait::Arrivals::default();
    let start = Timestamp::from_nanos(1_000_000_000);
    assert!(!arrivals.frequent());
    // One frame every 250 µs (100 Mbit/s of 3 KB frames): 1.6 per slack, not enough.
    let mut t = start;
    for _ in 0..80 {
        t += Duration::from_micros(250);
        arrivals.count(t, 1, slack);
    }
    assert!(!arrivals.frequent());
    // One every 100 µs: 4 per slack, from the end of the window on.
    for _ in 0..200 {
        t += Duration::from_micros(100);
        arrivals.count(t, 1, slack);
    }
    assert!(arrivals.frequent());
    // Rounds that read nothing still close the window: quiet again.
    for _ in 0..30 {
        t += Duration::from_millis(1);
        arrivals.count(t, 0, slack);
    }
    assert!(!arrivals.frequent());
    // A zero slack never counts as frequent.
    let mut none = wait::Arrivals::default();
    for k in 0..100 {
        none.count(start + Duration::from_micros(k * 10), 64, Duration::ZERO);
    }
    assert!(!none.frequent());
}
