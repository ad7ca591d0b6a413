//! Silo tests: the allocator's publishing, and two silos' engines sharing one aggregate limit in
//! simulated time through the real [`SiloExchange`] and [`Allocator`] (deterministic, no threads).

use super::*;
use etherparse::PacketBuilder;
use metronome_core::{Duration, Rate};
use metronome_io::{FramePool, RxFrame, DEFAULT_SLOT_SIZE};

/// A full-size (1514-byte) Ethernet + IPv4 + TCP frame from 10.1.0.`host`:`src` to
/// 10.2.0.1:`dst`.
fn tcp_frame(src: u16, dst: u16, host: u8) -> Vec<u8> {
    let payload = [0u8; 1514 - 14 - 20 - 20];
    let mut out = Vec::with_capacity(1514);
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4([10, 1, 0, host], [10, 2, 0, 1], 64)
        .tcp(src, dst, 1, 65_535)
        .write(&mut out, &payload)
        .expect("a valid frame");
    out
}

fn config(rate: &str) -> Config {
    let text = format!(
        "[interfaces]\ninside = \"a\"\noutside = \"b\"\n[daemon]\ncores = 2\n\
         [[class]]\nname = \"bulk\"\nmatch = {{ protocol = \"tcp\" }}\nrate = \"{rate}\"\n\
         burst = \"15k\"\n"
    );
    Config::from_toml_str(&text, "silo.toml").unwrap()
}

#[test]
fn the_allocator_starts_with_an_equal_split_and_water_fills() {
    let mut a = crate::driver::silo::allocator(&config("200mbit"), 2, &[]);
    let cells = a.cells();
    assert_eq!(cells.len(), 1);
    let x = &cells[0].exchange;
    assert_eq!(x.read_rate(0), (Rate::mbps(100), 1));
    assert_eq!(x.read_rate(1), (Rate::mbps(100), 1));
    // Silo 0 uses 30 Mbit/s, silo 1 all of its 100: silo 1 gets what silo 0 leaves.
    let ms = |n: u64| Timestamp::from_nanos(n * 1_000_000);
    x.publish_demand(0, 0, ms(1));
    x.publish_demand(1, 0, ms(1));
    a.step(ms(1)); // baseline
    x.publish_demand(0, 30_000_000 / 8 / 10, ms(101));
    x.publish_demand(1, 100_000_000 / 8 / 10, ms(101));
    a.step(ms(101));
    let (r0, e0) = x.read_rate(0);
    let (r1, e1) = x.read_rate(1);
    assert_eq!((e0, e1), (2, 2));
    assert_eq!(r0.bps() + r1.bps(), 200_000_000, "{r0} + {r1}");
    assert!(r0.bps() < 35_000_000 && r1.bps() > 165_000_000, "{r0} {r1}");
    assert_eq!(a.rates("bulk"), Some(&[r0, r1][..]));
    // A reload rescales and republishes with a later epoch.
    a.apply(config("100mbit").class_set());
    let (r0, e0) = x.read_rate(0);
    assert_eq!(e0, 3);
    assert_eq!(r0.bps() + x.read_rate(1).0.bps(), 100_000_000);
}

#[test]
fn with_bridges_a_from_class_is_shared_by_the_uplinks_and_a_to_class_by_the_bridges() {
    let text = "[interfaces]\nattach = [\"eth0\", \"eth1\"]\nbridges = [\"br0\"]\n\
                [[class]]\nname = \"out\"\nmatch = { from = \"veth-a\" }\nrate = \"20mbit\"\n\
                [[class]]\nname = \"in\"\nmatch = { to = \"veth-a\" }\nrate = \"30mbit\"\n\
                [[class]]\nname = \"any\"\nmatch = { protocol = \"udp\" }\nrate = \"30mbit\"\n";
    let config = Config::from_toml_str(text, "silo.toml").unwrap();
    let a = crate::driver::silo::allocator(&config, 3, &[]);
    let cells = a.cells();
    let rates = |name: &str| {
        let x = &cells.iter().find(|c| c.class == name).unwrap().exchange;
        (0..3).map(|s| x.read_rate(s).0.bps()).collect::<Vec<_>>()
    };
    // Split among the silos that see the class; the others get the 1 % floor beside it.
    assert_eq!(rates("out"), [10_000_000, 10_000_000, 200_000]);
    assert_eq!(rates("in"), [300_000, 300_000, 30_000_000]);
    assert_eq!(rates("any"), [10_000_000, 10_000_000, 10_000_000]);
    assert_eq!(a.rates("in").map(<[Rate]>::len), Some(1));
}

#[test]
fn with_bridges_a_gathering_class_is_on_the_silos_of_its_children() {
    let text = "[interfaces]\nattach = [\"eth0\"]\nbridges = [\"br0\"]\n\
                [[class]]\nname = \"ns-out\"\ngather = true\nrate = \"100mbit\"\n\
                [[class]]\nname = \"a\"\nparent = \"ns-out\"\nmatch = { from = \"veth-a\" }\n\
                rate = \"100mbit\"\n\
                [[class]]\nname = \"b\"\nparent = \"ns-out\"\nmatch = { from = \"veth-b\" }\n\
                [[class]]\nname = \"ns-in\"\ngather = true\nrate = \"30mbit\"\n\
                [[class]]\nname = \"mid\"\nparent = \"ns-in\"\ngather = true\n\
                [[class]]\nname = \"c\"\nparent = \"mid\"\nmatch = { to = \"veth-c\" }\n\
                [[class]]\nname = \"lonely\"\ngather = true\nrate = \"10mbit\"\n";
    let config = Config::from_toml_str(text, "silo.toml").unwrap();
    let a = crate::driver::silo::allocator(&config, 2, &[]);
    let cells = a.cells();
    let rates = |name: &str| {
        let x = &cells.iter().find(|c| c.class == name).unwrap().exchange;
        (0..2).map(|s| x.read_rate(s).0.bps()).collect::<Vec<_>>()
    };
    // Its children's packets are at the uplink only: all of its rate there.
    assert_eq!(rates("ns-out"), [100_000_000, 1_000_000]);
    // A grandchild's, at the bridge.
    assert_eq!(rates("ns-in"), [300_000, 30_000_000]);
    // No child: every silo.
    assert_eq!(rates("lonely"), [5_000_000, 5_000_000]);
}

/// One simulated silo: engine, pool, exchange and an offered load of `offered_bps` over `flows`.
struct SimSilo {
    engine: Engine,
    pool: FramePool,
    exchange: SiloExchange,
    frames: Vec<Vec<u8>>,
    offered_bps: u64,
    credit_bits: u64,
    next_flow: usize,
    released_bytes: u64,
}

impl SimSilo {
    fn new(
        silo: usize,
        config: &Config,
        cells: &[LimitCell],
        metrics: &Metrics,
        flows: u16,
    ) -> Self {
        let pool = FramePool::new(16_384, DEFAULT_SLOT_SIZE);
        let metrics = metrics.for_silo(silo);
        let engine = crate::driver::reload::test_engine(config, pool.capacity(), &metrics);
        let exchange = SiloExchange::new(silo, cells, &engine, metrics);
        let frames = (0..flows)
            .map(|f| tcp_frame(40_000 + f, 5201, silo as u8))
            .collect();
        SimSilo {
            engine,
            pool,
            exchange,
            frames,
            offered_bps: 0,
            credit_bits: 0,
            next_flow: 0,
            released_bytes: 0,
        }
    }

    /// One step of `dt` ending at `now`.
    fn step(&mut self, now: Timestamp, dt: Duration) {
        self.exchange.poll(&mut self.engine, now);
        self.credit_bits += self.offered_bps * dt.as_nanos() / 1_000_000_000;
        let mut rx = Vec::new();
        while self.credit_bits >= 1514 * 8 {
            self.credit_bits -= 1514 * 8;
            let frame = &self.frames[self.next_flow % self.frames.len()];
            self.next_flow += 1;
            let id = self.pool.store(frame).expect("pool room");
            rx.push(RxFrame {
                id,
                len: frame.len() as u32,
                csum_not_ready: false,
                stamp_ns: 0,
            });
        }
        let mut out = Vec::new();
        self.engine.receive(now, &mut self.pool, &rx, &mut out);
        assert!(out.is_empty(), "every frame is shaped");
        while self.engine.release(now, &mut self.pool, &mut out, 1024) == 1024 {}
        for id in out {
            self.released_bytes += self.pool.len(id) as u64;
            self.pool.free(id);
        }
    }
}

/// Runs two silos offered `offered` bit/s under a 100 Mbit/s class for 1.5 s of simulated time;
/// returns each silo's released rate over the last second.
fn two_silos(offered: [u64; 2]) -> [f64; 2] {
    let config = config("100mbit");
    let metrics = Metrics::with_silos(2);
    let mut allocator = crate::driver::silo::allocator(&config, 2, &[]);
    let cells = allocator.cells();
    let mut silos = [
        SimSilo::new(0, &config, &cells, &metrics, 3),
        SimSilo::new(1, &config, &cells, &metrics, 1),
    ];
    for (s, o) in silos.iter_mut().zip(offered) {
        s.offered_bps = o;
    }
    let dt = Duration::from_micros(100);
    let mut now = Timestamp::from_nanos(1_000_000_000);
    let mut next_nba = now;
    let start = now;
    let mut at_half = [0u64; 2];
    for step in 0..15_000u32 {
        now = now.saturating_add(dt);
        if now >= next_nba {
            next_nba = allocator.step(now);
        }
        for s in silos.iter_mut() {
            s.step(now, dt);
        }
        if step == 5_000 {
            at_half = [silos[0].released_bytes, silos[1].released_bytes];
        }
    }
    assert!(now.saturating_since(start) >= Duration::from_millis(1_500));
    for s in &silos {
        s.engine.invariants();
        assert_eq!(s.engine.counters().dropped(), 0);
        assert_eq!(s.exchange.refused_rates, 0);
    }
    let secs = 1.0; // steps 5 000..15 000 of 100 us
    [0, 1].map(|i| (silos[i].released_bytes - at_half[i]) as f64 * 8.0 / secs)
}

#[test]
fn two_silos_at_their_cap_split_the_aggregate_and_hold_it() {
    let [a, b] = two_silos([80_000_000, 80_000_000]);
    let total = a + b;
    assert!((total / 100e6 - 1.0).abs() < 0.02, "total {total}");
    assert!((a / b - 1.0).abs() < 0.05, "{a} vs {b}");
}

#[test]
fn a_silo_below_its_share_leaves_the_rest_to_the_other() {
    // 20 Mbit/s: at 10 one frame per period is more than the allocator's 1 % margin between a
    // satisfied and a capped core (`NbaConfig::cap_threshold`), and the split flips to equal
    // now and then.
    let [a, b] = two_silos([150_000_000, 20_000_000]);
    let total = a + b;
    assert!(
        (b / 20e6 - 1.0).abs() < 0.02,
        "the light silo sends what it is offered: {b}"
    );
    assert!(
        (total / 100e6 - 1.0).abs() < 0.03,
        "total {total}: the aggregate is used"
    );
    assert!(a > 75e6, "the heavy silo gets the rest: {a}");
}

#[test]
fn one_silo_never_pins_beyond_the_mask_and_never_panics() {
    // Pinning is best effort: a silo index beyond the CPUs is refused with a warning.
    assert_eq!(pin(100_000), None);
}

/// The `nba_rate_bps` series of `bulk` for silo `silo` in `metrics`.
fn share(metrics: &Metrics, silo: usize) -> Option<u64> {
    let head = format!("metronome_nba_rate_bps{{class=\"bulk\",silo=\"{silo}\"}} ");
    metrics
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix(head.as_str())?.trim().parse().ok())
}

#[test]
fn a_reload_goes_through_the_coordinator_to_every_silo() {
    let dir = std::env::temp_dir().join(format!("mtr-silo-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("silos.toml");
    let text = |rate: &str| {
        format!(
            "[interfaces]\ninside = \"a\"\noutside = \"b\"\n[daemon]\ncores = 2\n\
             [[class]]\nname = \"bulk\"\nmatch = {{ protocol = \"tcp\" }}\nrate = \"{rate}\"\n"
        )
    };
    std::fs::write(&path, text("200mbit")).unwrap();
    let running = Config::load(&path).unwrap();
    let mut reloader = Reloader::new(path.clone(), running.clone());
    let metrics = Metrics::with_silos(2);
    let mut allocator = crate::driver::silo::allocator(&running, 2, &[]);
    let mut engines: Vec<Engine> = (0..2)
        .map(|i| crate::driver::reload::test_engine(&running, 64, &metrics.for_silo(i)))
        .collect();
    let mut exchanges: Vec<SiloExchange> = (0..2)
        .map(|i| SiloExchange::new(i, &allocator.cells(), &engines[i], metrics.for_silo(i)))
        .collect();
    let inboxes: Vec<Inbox> = exchanges
        .iter()
        .map(|l| (l.reload.clone(), l.inbox.clone()))
        .collect();
    let now = Timestamp::from_nanos(1);
    for (l, e) in exchanges.iter_mut().zip(&mut engines) {
        l.poll(e, now);
    }
    assert_eq!(
        (share(&metrics, 0), share(&metrics, 1)),
        (Some(100_000_000), Some(100_000_000))
    );

    // A live change: the allocator rescales, each silo reloads its engine and re-applies.
    std::fs::write(&path, text("300mbit")).unwrap();
    reload_silos(&mut reloader, &mut allocator, &inboxes);
    for (l, e) in exchanges.iter_mut().zip(&mut engines) {
        l.poll(e, now);
        assert_eq!(e.config().classes[0].policy.rate, Some(Rate::mbps(300)));
        assert_eq!(l.refused_rates, 0);
    }
    assert_eq!(
        (share(&metrics, 0), share(&metrics, 1)),
        (Some(150_000_000), Some(150_000_000))
    );

    // A change that needs a restart is refused before any silo hears of it.
    std::fs::write(
        &path,
        text("300mbit").replace("[daemon]", "[wheel]\ngranularity = \"4us\"\n[daemon]"),
    )
    .unwrap();
    reload_silos(&mut reloader, &mut allocator, &inboxes);
    assert!(inboxes
        .iter()
        .all(|(flag, _)| !flag.load(Ordering::Acquire)));
    assert_eq!(
        reloader.running().wheel.granularity,
        Duration::from_micros(2)
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A port of a silo thread for [`run_silos_on`]: it receives nothing; with `panic_after`, its
/// `recv` panics once the healthy silo's port has been polled that many times (so the healthy
/// silo is known to be shaping when its sibling fails).
struct FailingPort {
    polls: Arc<std::sync::atomic::AtomicUsize>,
    panic_after: Option<usize>,
}

impl PacketPort for FailingPort {
    fn recv(&mut self, _pool: &mut FramePool, _out: &mut [RxFrame]) -> Result<usize, PortError> {
        match self.panic_after {
            Some(n) if self.polls.load(Ordering::Relaxed) >= n => panic!("injected failure"),
            Some(_) => {}
            None => {
                self.polls.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(0)
    }
    fn send(&mut self, _pool: &mut FramePool, ids: &[u32]) -> Result<usize, PortError> {
        Ok(ids.len())
    }
    fn counters(&mut self) -> metronome_io::PortCounters {
        metronome_io::PortCounters::default()
    }
    fn poll_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }
    fn reopen(&mut self) -> Result<metronome_io::PortCounters, PortError> {
        Ok(metronome_io::PortCounters::default())
    }
}

#[test]
fn a_panicking_silo_stops_every_silo_and_the_panic_reaches_the_caller() {
    let text = "[interfaces]\ninside = \"a\"\noutside = \"b\"\n[daemon]\ncores = 2\n\
                vnet_hdr = false\n[wheel]\npool_packets = 1024\n";
    let config = Config::from_toml_str(text, "silo.toml").unwrap();
    let polls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let port = |panic_after| FailingPort {
        polls: polls.clone(),
        panic_after,
    };
    // Silo 0 is healthy; silo 1 panics once silo 0 has polled its ports a few times.
    let ports = vec![(port(None), port(None)), (port(Some(6)), port(Some(6)))];
    let control = Control::default();
    let metrics = Metrics::with_silos(2);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_silos_on(ports, &config, None, &metrics, &control)
    }));
    let payload = match outcome {
        Ok(r) => panic!(
            "a silo panicked but the silos returned {:?}",
            r.map(|v| v.len())
        ),
        Err(payload) => payload,
    };
    assert_eq!(
        panic_message(&*payload),
        "silo 1 panicked: injected failure"
    );
    // Every silo was joined before the panic went on, and the shared flag stopped them.
    assert!(control.stop.load(Ordering::Relaxed));
    assert!(polls.load(Ordering::Relaxed) >= 6);
}

#[test]
fn every_silo_applies_a_live_class_and_the_allocator_shares_its_rate() {
    let text = "[interfaces]\ninside = \"a\"\noutside = \"b\"\n[daemon]\ncores = 2\n\
                vnet_hdr = false\n[wheel]\npool_packets = 1024\n";
    let config = Config::from_toml_str(text, "silo.toml").unwrap();
    let polls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let port = || FailingPort {
        polls: polls.clone(),
        panic_after: None,
    };
    let ports = vec![(port(), port()), (port(), port())];
    let metrics = Metrics::with_silos(2);
    let mut control = Control::default();
    let live = crate::ops::control::Live::new(&config, 2, metrics.clone()).unwrap();
    control.live = Some(live.clone());
    let silos = {
        let (control, metrics) = (control.clone(), metrics.clone());
        std::thread::spawn(move || run_silos_on(ports, &config, None, &metrics, &control))
    };
    let add = r#"{"op":"add","class":{"name":"t","match":{"protocol":"udp"},"rate":"200mbit"}}"#;
    let reply = live.handle(
        crate::ops::control::Request::parse(add).unwrap(),
        std::time::Instant::now(),
    );
    assert!(reply.ok, "{reply:?}");
    assert_eq!(reply.loops, Some(2));
    // The coordinator gives the allocator the new limit; each silo's engine takes its share
    // (the gauge is set only when the silo's engine has the class). A guard against hanging,
    // not a measurement: the coordinator looks every 50 ms.
    let gauge = |silo: usize| {
        let head = format!("metronome_nba_rate_bps{{class=\"t\",silo=\"{silo}\"}} ");
        metrics
            .encode()
            .lines()
            .find_map(|l| l.strip_prefix(head.as_str())?.trim().parse::<u64>().ok())
    };
    let guard = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while (gauge(0).is_none() || gauge(1).is_none()) && std::time::Instant::now() < guard {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!((gauge(0), gauge(1)), (Some(100_000_000), Some(100_000_000)));
    control.stop.store(true, Ordering::Relaxed);
    let reports = silos.join().unwrap().unwrap();
    assert_eq!(reports.len(), 2);
    assert!(reports.iter().all(|r| r.refused_rates == 0));
}

#[test]
fn a_cluster_share_is_the_aggregate_the_allocator_splits_and_zero_closes_the_class() {
    use crate::ops::cluster::ClusterCell;
    let config = config("300mbit");
    let cell = Arc::new(ClusterCell::new("bulk", Rate::mbps(300), 2, Rate::mbps(3)));
    let mut a = allocator(&config, 2, std::slice::from_ref(&cell));
    let cells = a.cells();
    let x = &cells[0].exchange;
    // The floor, split: not the class's rate.
    assert_eq!(x.read_rate(0).0.bps() + x.read_rate(1).0.bps(), 3_000_000);
    // The agent puts a share in force: the next step makes it the aggregate.
    cell.set_share(150_000_000);
    let before = x.read_rate(0).1;
    a.step(Timestamp::from_nanos(1));
    let (r0, e0) = x.read_rate(0);
    assert!(e0 > before);
    assert_eq!(r0.bps() + x.read_rate(1).0.bps(), 150_000_000);
    // A reload keeps the share, not the file's rate.
    a.apply(config.class_set());
    assert_eq!(x.read_rate(0).0.bps() + x.read_rate(1).0.bps(), 150_000_000);
    // Zero: every silo gets a zero rate, which closes the class in its engine.
    cell.set_share(0);
    a.step(Timestamp::from_nanos(2));
    assert_eq!((x.read_rate(0).0.bps(), x.read_rate(1).0.bps()), (0, 0));
    cell.set_share(60_000_000);
    a.step(Timestamp::from_nanos(3));
    assert_eq!(x.read_rate(0).0.bps() + x.read_rate(1).0.bps(), 60_000_000);
}
