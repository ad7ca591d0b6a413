//! A flooded class cannot take the others' rates: real kernel TCP (4 flows) into a class `tcp`
//! limited to 211 Mbit/s, and beside it, after a warm-up, one of three floods aimed at a class
//! limited to 50 Mbit/s:
//!
//! * UDP at 500 Mbit/s (ten times its class's rate) from a plain socket into class `udp`;
//! * malformed and non-IP frames from a raw socket at up to 138 000 frames/s (about 600 Mbit/s),
//!   charged by design to the default class (`[daemon] malformed` and `non_ip` at their default,
//!   `default`), limited to 50 Mbit/s;
//! * TCP segments of 118 bytes from a raw socket at up to 130 000 frames/s for 8 s, each from a
//!   5-tuple never seen before (about a million in all), into class `spoof`, limited to
//!   10 Mbit/s ([`SPOOFED_LIMIT_BPS`] says why not 50).
//!
//! The configuration is otherwise the daemon's defaults (no `burst`, `backpressure` or
//! `horizon_policy`). Asserted for every second of the flood, measured at the receiver
//! (`metronome_testbed::flood`): the TCP sinks' goodput within [`TOLERANCE`] of the `tcp`
//! class's rate in payload; the flooded class's frames, counted by a tap on the receiver's veth,
//! at most its limit plus [`TOLERANCE`]; the receiver's veth rx bytes at most the sum of the
//! limits plus [`WIRE_OVER`]. Also asserted: the flood reached the shaper (the flooded class
//! carried at least [`FLOODED_FULL`] of its rate), the tap missed no frame, the daemon's loop
//! stayed up, its engine's invariants held at every check while it ran (a failed check panics
//! the loop's thread), every frame is accounted for (`common::assert_every_frame_accounted`, the
//! frame pool's slots all returned, and each raw frame sent reached the loop or its socket's
//! drop counter), and the metrics endpoint, served in the shaper's namespace, answered a scrape
//! in each second of the flood within [`SCRAPE_WITHIN`] (the scraper gives up after it). Each
//! test prints its per-second figures (`--nocapture`).
//!
//! With `METRONOME_TEST_CPU_HOG=N` each attempt runs beside N threads that spin (an unrelated
//! CPU hog, `metronome_testbed::load`); every attempt's line names the machine's load average,
//! kernel time and steal time over it.
//!
//! Fails without CAP_NET_ADMIN (skips, saying why, under METRONOME_SKIP_PRIVILEGED=1); the topology
//! is removed on every path (its `Drop`).

mod common;

use metronome_daemon::driver::run::Control;
use metronome_daemon::ops::config::Config;
use metronome_daemon::ops::metrics::stats::{scrape_bounded, MAX_RESPONSE_BYTES};
use metronome_daemon::ops::metrics::Metrics;
use metronome_testbed::flood::frames::{self, Spoof, SpoofProtocol};
use metronome_testbed::flood::{
    self, per_second_bps, shifted, CheckedReport, Classify, RawFlood, RawKind, RawReport, Tap,
    TapReport, UdpFlood,
};
use metronome_testbed::load::{describe, CpuHog, LoadSample};
use metronome_testbed::netns::Topology;
use metronome_testbed::trafficgen::{self, FlowGroup, TrafficPlan, TrafficReport};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The `tcp` class's rate, bit/s of frame bytes.
const TCP_LIMIT_BPS: f64 = 211e6;
/// The flooded class's rate, bit/s of frame bytes.
const FLOODED_LIMIT_BPS: f64 = 50e6;
/// The rate of the class the spoofed segments flood, bit/s of frame bytes: 10 Mbit/s, 10 600 of
/// its 118-byte frames a second. At 50 Mbit/s the class itself sends 53 000 frames a second,
/// and on this 2-core machine every one of them is also received by the receiving namespace's
/// stack and the tap, in the daemon's thread (a veth transmit runs the far end's receive): the
/// `tcp` class then measured -0.1 % to -5.0 % per second with the same 130 000 spoofed frames
/// a second offered, against -0.0 % to -0.8 % at 10 Mbit/s (docs/results/hardening.md): the
/// machine's packet rate, shared with the endpoints, not the spoofed tuples, sets that limit.
const SPOOFED_LIMIT_BPS: f64 = 10e6;
/// How far a well-behaved class's per-second rate may be from its target, and a flooded class's
/// above its limit: 2 %, the isolation the shaper is asked to keep under a flood. The second
/// before each flood (printed first) measured, for the `tcp` class's 201.8 Mbit/s of goodput:
/// 184.0 to 201.8 Mbit/s in 7 runs (debug build, load average 5 to 8 from other builds), all but
/// two within 0.5 %; so on a loaded machine a second of the flood can fall short through the
/// kernel TCP senders alone. With `[wheel] horizon_policy = "reject"` the UDP flood's TCP seconds
/// measured -0.8 % to +0.0 % (2 runs).
const TOLERANCE: f64 = 0.02;
/// How far above the sum of the limits the receiver's wire may be in a second: 1 %, the bound of
/// `garbage.rs` (measured there: -2.32 % to +0.00 % over 2.1 s, loaded machine).
const WIRE_OVER: f64 = 0.01;
/// The flood reached the shaper (a check of the harness, not a target): over the flood, the
/// flooded class carried at least this share of its rate at the receiver (it is offered ten
/// times that). Half, not all: with `[wheel] horizon_policy = "reject"` the flooded class
/// measured 37.9 to 50.4 Mbit/s per second of a 50 Mbit/s limit (3 floods, 2 runs), below its
/// rate after the first two seconds.
const FLOODED_FULL: f64 = 0.5;
/// TCP flows in the `tcp` class.
const TCP_FLOWS: usize = 4;
/// When the flood starts, from the start of the TCP run: TCP is past slow start and holds its
/// rate (about 1.5 s after its handshakes).
const FLOOD_FROM: Duration = Duration::from_millis(1600);
/// How long TCP runs after the flood ends.
const TCP_AFTER: Duration = Duration::from_millis(800);
/// How often the receiver's veth counters are read.
const LINK_SAMPLE_EVERY: Duration = Duration::from_millis(10);
/// How long a scrape may take before the scraper gives up: 1 s, the target that a scrape
/// answers within 1 s under every abuse.
const SCRAPE_WITHIN: Duration = Duration::from_secs(1);
/// The TCP ports of the `tcp` class.
const TCP_PORTS: std::ops::RangeInclusive<u16> = 5201..=5204;
/// The UDP flood's port (class `udp`).
const UDP_PORT: u16 = 6001;
/// The spoofed segments' port (class `spoof`).
const SPOOF_PORT: u16 = 6002;
/// The spoofed segments' frame length, bytes: 54 bytes of Ethernet, IPv4 and TCP headers and
/// 64 of data.
const SPOOF_FRAME_LEN: usize = 118;

/// The classes: `tcp` at 211 Mbit/s, then `extra` (the flooded class, or the default class).
fn config(extra: &str, file: &str) -> Config {
    let text = format!(
        "[interfaces]\ninside = \"in0\"\noutside = \"out0\"\n\n[[class]]\nname = \"tcp\"\n\
         match = {{ protocol = \"tcp\", dst_port = \"5201-5204\" }}\nrate = \"211mbit\"\n\n{extra}"
    );
    Config::from_toml_str(&text, file).unwrap()
}

/// Tap buckets: 0 the `tcp` class, 1 the flooded class, 2 the rest.
fn bucket(frame: &[u8], flooded: Option<(u8, u16)>) -> Option<usize> {
    let l4 = frames::classify_ipv4(frame);
    match l4 {
        Some((6, port)) if TCP_PORTS.contains(&port) => Some(0),
        _ if flooded.is_none() || l4 == flooded => Some(1),
        _ => Some(2),
    }
}

fn udp_bucket(frame: &[u8]) -> Option<usize> {
    bucket(frame, Some((17, UDP_PORT)))
}

fn spoof_bucket(frame: &[u8]) -> Option<usize> {
    bucket(frame, Some((6, SPOOF_PORT)))
}

/// Everything that is not the `tcp` class is the default class's.
fn default_bucket(frame: &[u8]) -> Option<usize> {
    bucket(frame, None)
}

/// The flood of a scenario.
enum Flood {
    Udp(UdpFlood),
    Raw(RawFlood),
}

impl Flood {
    fn duration(&self) -> Duration {
        match self {
            Flood::Udp(u) => u.duration,
            Flood::Raw(r) => r.duration,
        }
    }
}

/// What a flood thread did: the UDP flood's report, or the raw one's.
enum Flooded {
    Udp(TrafficReport),
    Raw(RawReport),
}

impl Flooded {
    fn started(&self) -> Instant {
        match self {
            Flooded::Udp(r) => r.started,
            Flooded::Raw(r) => r.started,
        }
    }
}

/// What one scenario measured.
struct Run {
    tcp: TrafficReport,
    flooded: Flooded,
    tap: TapReport,
    wire: Vec<(Duration, u64)>,
    checked: CheckedReport,
    scrapes: Vec<Result<(Duration, String), String>>,
    /// The flood's start, from the origin of the tap's and the wire's series.
    flood_at: Duration,
    /// The TCP run's start, from the same origin.
    tcp_at: Duration,
    metrics: Metrics,
    /// The flooded class's rate, bit/s of frame bytes.
    flooded_limit_bps: f64,
}

/// Runs TCP into `tcp` and the flood `flood_of` makes for the topology beside it, through the
/// daemon's loop for `config` on a fresh topology; `None` when skipped without the privilege.
fn run(
    name: &str,
    prefix: &str,
    (config, flooded_limit_bps): (Config, f64),
    flood_of: impl FnOnce(&Topology) -> Flood,
    classify: Classify,
) -> Option<Run> {
    let topo = common::topology(prefix, name)?;
    let flood = flood_of(&topo);
    topo.one_mtu_segments().unwrap();
    let metrics = Metrics::new();
    let server = flood::serve_metrics(&topo.shaper, &metrics).unwrap();
    let control = Control::default();
    let shaper = common::checked_shaper(&topo, config, &metrics, &control);
    let origin = Instant::now();
    let tap = Tap::spawn(&topo.receiver, &topo.receiver_if, classify, 3, origin).unwrap();
    let tcp_run = FLOOD_FROM + flood.duration() + TCP_AFTER;
    let stop = AtomicBool::new(false);
    let (tcp, flooded, wire, scrapes) = std::thread::scope(|s| {
        let wire = s.spawn(|| {
            let (ns, iface) = (&topo.receiver, &topo.receiver_if);
            flood::sample_link(ns, iface, origin, LINK_SAMPLE_EVERY, &stop).unwrap()
        });
        let flooder = s.spawn(|| {
            std::thread::sleep(FLOOD_FROM);
            send_flood(&topo, &flood)
        });
        let scraper = s.spawn(|| {
            let mut scrapes = Vec::new();
            let seconds = flood.duration().as_secs();
            for i in 0..seconds {
                let at = FLOOD_FROM + Duration::from_millis(500 + 1000 * i);
                std::thread::sleep(at.saturating_sub(origin.elapsed()));
                let addr = server.addr();
                let asked = Instant::now();
                // The scraper gives up after 1 s: the target is that a scrape answers within
                // 1 s under every abuse, so a slower answer fails here, with no timed assert.
                let body = topo
                    .shaper
                    .run(move || scrape_bounded(addr, MAX_RESPONSE_BYTES, SCRAPE_WITHIN))
                    .unwrap();
                scrapes.push(
                    body.map(|b| (asked.elapsed(), b))
                        .map_err(|e| e.to_string()),
                );
            }
            scrapes
        });
        let plan = TrafficPlan::new(
            topo.receiver_addr,
            vec![FlowGroup::tcp("tcp", *TCP_PORTS.start(), TCP_FLOWS)],
            tcp_run,
        );
        let tcp =
            trafficgen::run(&plan, Some(&topo.sender), Some(&topo.receiver)).expect("TCP run");
        let flooded = flooder.join().unwrap();
        let scrapes = scraper.join().unwrap();
        stop.store(true, Ordering::Release);
        (tcp, flooded, wire.join().unwrap(), scrapes)
    });
    let tap = tap.finish().unwrap();
    let checked = common::stop_checked(shaper, &control);
    drop(server);
    let since = |t: Instant| t.saturating_duration_since(origin);
    Some(Run {
        flood_at: since(flooded.started()),
        tcp_at: since(tcp.started),
        tcp,
        flooded,
        tap,
        wire,
        checked,
        scrapes,
        metrics,
        flooded_limit_bps,
    })
}

/// Sends `flood` on `topo`'s sender.
fn send_flood(topo: &Topology, flood: &Flood) -> Flooded {
    match flood {
        Flood::Udp(u) => Flooded::Udp(
            flood::udp_flood(&topo.sender, &topo.receiver, topo.receiver_addr, *u).unwrap(),
        ),
        Flood::Raw(r) => {
            let dst = frames::mac_of(&topo.receiver, &topo.receiver_if).unwrap();
            let src = frames::mac_of(&topo.sender, &topo.sender_if).unwrap();
            let raw = flood::raw_flood(&topo.sender, &topo.sender_if, (dst, src), r.clone());
            Flooded::Raw(raw.unwrap())
        }
    }
}

/// The per-second figures of a run, over the flood (and the second before it, first).
struct PerSecond {
    /// TCP goodput of the `tcp` class's sinks, bit/s of payload.
    tcp: Vec<f64>,
    /// The flooded class's frames at the receiver, bit/s.
    flooded: Vec<f64>,
    /// The receiver's veth, bit/s.
    wire: Vec<f64>,
    /// The UDP sink's goodput (UDP flood only), bit/s of payload.
    udp: Option<Vec<f64>>,
}

impl PerSecond {
    fn of(r: &Run, seconds: usize) -> PerSecond {
        let from = r.flood_at.saturating_sub(Duration::from_secs(1));
        let n = seconds + 1;
        let tcp_series = shifted(&r.tcp.groups[0].received_at, r.tcp_at);
        let udp = match &r.flooded {
            Flooded::Udp(u) => {
                let series = shifted(&u.groups[0].received_at, r.flood_at);
                Some(per_second_bps(&series, from, n))
            }
            Flooded::Raw(_) => None,
        };
        PerSecond {
            tcp: per_second_bps(&tcp_series, from, n),
            flooded: per_second_bps(&r.tap.series[1], from, n),
            wire: per_second_bps(&r.wire, from, n),
            udp,
        }
    }

    /// One line per second, the second before the flood first.
    fn print(&self, name: &str) {
        println!("{name}: second, tcp goodput, flooded class at the receiver, wire (Mbit/s)");
        for i in 0..self.tcp.len() {
            let label = if i == 0 {
                "before".to_owned()
            } else {
                format!("flood {i}")
            };
            let udp = self.udp.as_ref().map_or(String::new(), |u| {
                format!(", udp goodput {:.2}", u[i] / 1e6)
            });
            println!(
                "{name}: {label:>8}: tcp {:.2}, flooded {:.2}, wire {:.2}{udp}",
                self.tcp[i] / 1e6,
                self.flooded[i] / 1e6,
                self.wire[i] / 1e6,
            );
        }
    }
}

/// One flood test at a time in this binary: the tests would share the machine's two cores and
/// measure each other (run together, the TCP senders fell 9 % to 63 % short).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `attempt` (one whole run, making every assertion of [`assert_held`] but the `tcp`
/// class's shortfall, and returning the `tcp` class's deviation in each second of the flood;
/// `None` when skipped) at most twice, one flood test at a time: it holds when every second is
/// within [`TOLERANCE`]. A second run is made only when the first fell short by at most
/// `common::RETRY_BOUND_TOLERANCES` tolerances (load on this shared machine slows the kernel
/// TCP senders, it never makes the shaper send more; CONTRIBUTING.md, privileged tests); every
/// attempt's line goes to standard error, uncaptured.
fn tcp_holds_in_two_attempts(name: &str, mut attempt: impl FnMut() -> Option<Vec<f64>>) {
    let _one = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut lines = Vec::new();
    for k in 1..=2 {
        let hog = CpuHog::from_env();
        let before = LoadSample::now();
        let Some(deviations) = attempt() else {
            return;
        };
        let load = describe(&before, &LoadSample::now(), hog.threads());
        drop(hog);
        let worst = deviations.iter().copied().fold(0.0f64, f64::min);
        let line = format!(
            "{name}: tcp's worst second {:+.2} % off (attempt {k}, tolerance {:.1} %; {load})",
            worst * 100.0,
            TOLERANCE * 100.0
        );
        common::uncaptured(&line);
        lines.push(line);
        if worst >= -TOLERANCE {
            return;
        }
        assert!(
            worst >= -common::RETRY_BOUND_TOLERANCES * TOLERANCE,
            "{} (no retry: more than {} tolerances short)",
            lines.join("; "),
            common::RETRY_BOUND_TOLERANCES
        );
    }
    panic!("{}", lines.join("; "));
}

/// The per-second targets, the frame accounting and the scrapes of a run; returns the `tcp`
/// class's deviation from its target in each second of the flood (its shortfall is asserted by
/// [`tcp_holds_in_two_attempts`], a second above the tolerance here).
fn assert_held(name: &str, r: &Run, seconds: usize) -> Vec<f64> {
    let p = PerSecond::of(r, seconds);
    p.print(name);
    let l = &r.checked.report;
    println!(
        "{name}: tap {:?} frames, {} unclassified, missed {}; loop busy {:.0} %, {} invariant \
         checks; {l:?}",
        r.tap.frames,
        r.tap.unclassified,
        r.tap.counters.rx_ring_drops,
        l.busy_pct(),
        r.checked.checks
    );
    common::uncaptured(&format!(
        "{name}: loop busy {:.1} % of its time, {:.2} % on frames it refused ({} refused in the \
         loop, {:?} refused early by the kernel's filter: over rate, malformed, non-IP)",
        l.busy_pct(),
        l.refusing_pct(),
        l.engine.dropped(),
        r.checked.early_refused,
    ));
    for s in &r.scrapes {
        match s {
            Ok((took, body)) => {
                println!("{name}: scrape answered in {took:?}, {} bytes", body.len())
            }
            Err(e) => println!("{name}: scrape failed: {e}"),
        }
    }
    let tcp_target = TCP_LIMIT_BPS / common::WIRE_PER_PAYLOAD;
    let limits = TCP_LIMIT_BPS + r.flooded_limit_bps;
    let flood = 1..p.tcp.len();
    let off = |v: &[f64], target: f64| -> Vec<String> {
        v[flood.clone()]
            .iter()
            .map(|x| format!("{:+.1} %", (x / target - 1.0) * 100.0))
            .collect()
    };
    common::uncaptured(&format!(
        "{name}: per flood second: tcp {:?} of {:.1} Mbit/s goodput; flooded class {:?} of its \
         limit; wire {:?} of the limits' sum",
        off(&p.tcp, tcp_target),
        tcp_target / 1e6,
        off(&p.flooded, r.flooded_limit_bps),
        off(&p.wire, limits),
    ));

    // The measurement is sound: the tap saw every frame, the loop stayed up and was checked.
    assert_eq!(
        r.tap.counters.rx_ring_drops, 0,
        "{name}: the tap missed frames"
    );
    // Checked along the way, and every frame accounted for.
    let ran = Duration::from_secs(seconds as u64);
    common::assert_checked_loop(&r.checked, (ran, common::CHECK_EVERY), name);
    // The metrics endpoint answered during the flood.
    assert_eq!(r.scrapes.len(), seconds, "{name}");
    for s in &r.scrapes {
        let (_, body) = s.as_ref().expect("a scrape during the flood");
        assert!(
            body.contains("metronome_class_bytes_total{class=\"tcp\"}"),
            "{body}"
        );
    }
    // The flood reached the shaper and filled its class.
    let mean_flooded = p.flooded[flood.clone()].iter().sum::<f64>() / seconds as f64;
    assert!(
        mean_flooded >= FLOODED_FULL * r.flooded_limit_bps,
        "{name}: the flooded class carried {:.2} Mbit/s",
        mean_flooded / 1e6
    );
    // Per second of the flood: the well-behaved class holds its rate, the flooded one its limit,
    // the wire the sum of the limits.
    let mut deviations = Vec::new();
    for i in flood {
        let tcp = p.tcp[i] / tcp_target - 1.0;
        deviations.push(tcp);
        assert!(
            tcp <= TOLERANCE,
            "{name}: flood second {i}: tcp goodput {:.2} Mbit/s, {:+.2} % off {:.2}",
            p.tcp[i] / 1e6,
            tcp * 100.0,
            tcp_target / 1e6
        );
        assert!(
            p.flooded[i] <= r.flooded_limit_bps * (1.0 + TOLERANCE),
            "{name}: flood second {i}: the flooded class delivered {:.2} Mbit/s",
            p.flooded[i] / 1e6
        );
        assert!(
            p.wire[i] <= limits * (1.0 + WIRE_OVER),
            "{name}: flood second {i}: wire {:.2} Mbit/s",
            p.wire[i] / 1e6
        );
    }
    deviations
}

/// The value of the first line of the metrics `text` starting with `prefix`, 0 when absent.
fn metric(text: &str, prefix: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// The frames the daemon's early filter refused in the kernel, by reason (over rate,
/// malformed, non-IP); the filter must have been loaded (`[daemon] early_refuse` is on by
/// default) and must have refused some of the flood.
fn early_refused(r: &Run) -> [u64; 3] {
    let refused = r
        .checked
        .early_refused
        .expect("the daemon's early filter was loaded");
    assert!(
        refused.iter().sum::<u64>() > 0,
        "the early filter refused nothing"
    );
    refused
}

/// Every raw frame sent reached the loop (received, counted in its socket's drops, or refused
/// by its socket's filter).
fn assert_raw_reached(name: &str, r: &Run, raw: &RawReport) {
    let l = &r.checked.report;
    println!(
        "{name}: raw flood: {} frames sent in {:?} ({:.0} frames/s, {:.1} Mbit/s), {} refused \
         by the device, {} malformed, {} non-IP, {} distinct 5-tuples",
        raw.sent,
        raw.elapsed,
        raw.sent as f64 / raw.elapsed.as_secs_f64(),
        raw.bytes as f64 * 8.0 / raw.elapsed.as_secs_f64() / 1e6,
        raw.refused,
        raw.malformed,
        raw.non_ip,
        raw.distinct_tuples,
    );
    assert_eq!(raw.tx_errors, 0, "{name}");
    let early: u64 = early_refused(r).iter().sum();
    assert!(
        l.inside.rx_packets + l.inside.rx_ring_drops + early >= raw.sent,
        "{name}: sent {}, the loop received {}, its socket dropped {} and its filter refused {}",
        raw.sent,
        l.inside.rx_packets,
        l.inside.rx_ring_drops,
        early
    );
}

#[test]
fn a_udp_flood_at_ten_times_its_rate_stays_in_its_class() {
    let extra = "[[class]]\nname = \"udp\"\nmatch = { protocol = \"udp\", dst_port = \"6001\" }\n\
                 rate = \"50mbit\"\n";
    let flood = |_: &Topology| {
        Flood::Udp(UdpFlood {
            port: UDP_PORT,
            flows: 1,
            payload: trafficgen::UDP_FULL_PAYLOAD,
            rate_bps: 500_000_000,
            duration: Duration::from_secs(4),
        })
    };
    tcp_holds_in_two_attempts("flood_udp", || {
        let config = config(extra, "flood_udp.toml");
        let r = run(
            "flood_udp",
            "mtr-fu",
            (config, FLOODED_LIMIT_BPS),
            flood,
            udp_bucket,
        )?;
        if let Flooded::Udp(u) = &r.flooded {
            let g = &u.groups[0];
            println!(
                "flood_udp: UDP offered {:.1} Mbit/s of payload, received {:.1}",
                g.sent_bytes as f64 * 8.0 / u.elapsed.as_secs_f64() / 1e6,
                g.bytes as f64 * 8.0 / u.elapsed.as_secs_f64() / 1e6
            );
        }
        Some(assert_held("flood_udp", &r, 4))
    });
}

#[test]
fn malformed_frames_at_138_000_a_second_stay_in_the_default_class() {
    let extra = "[default]\nrate = \"50mbit\"\n";
    let flood = |_: &Topology| {
        Flood::Raw(RawFlood {
            kind: RawKind::Garbage(0x9e37_79b9_7f4a_7c15),
            frames_per_s: 138_000.0,
            duration: Duration::from_secs(4),
        })
    };
    tcp_holds_in_two_attempts("flood_garbage", || {
        let config = config(extra, "flood_garbage.toml");
        let r = run(
            "flood_garbage",
            "mtr-fg",
            (config, FLOODED_LIMIT_BPS),
            flood,
            default_bucket,
        )?;
        let Flooded::Raw(raw) = &r.flooded else {
            unreachable!()
        };
        assert_raw_reached("flood_garbage", &r, raw);
        // Each garbage frame counted once by kind (the non-IP count has the hosts' own ARP too).
        let text = r.metrics.encode();
        let l = &r.checked.report;
        let counted = |kind: &str| {
            let prefix = format!(
                "metronome_unclassified_frames_total{{kind=\"{kind}\",action=\"default\"}} "
            );
            metric(&text, &prefix)
        };
        let [_, early_m, early_n] = early_refused(&r);
        let (m, n, drops) = (
            counted("malformed"),
            counted("non_ip"),
            l.inside.rx_ring_drops,
        );
        println!(
            "flood_garbage: counted malformed {m}, non-IP {n}; refused early malformed \
             {early_m}, non-IP {early_n}; socket drops {drops}"
        );
        assert!(
            m <= raw.malformed && m + early_m + drops >= raw.malformed,
            "{text}"
        );
        assert!(n + early_n + drops >= raw.non_ip, "{text}");
        Some(assert_held("flood_garbage", &r, 4))
    });
}

#[test]
fn a_million_spoofed_5_tuples_stay_in_their_class() {
    let extra =
        "[[class]]\nname = \"spoof\"\nmatch = { protocol = \"tcp\", dst_port = \"6002\" }\n\
                 rate = \"10mbit\"\n";
    let flood = |topo: &Topology| {
        Flood::Raw(RawFlood {
            kind: RawKind::Spoofed(Spoof {
                source_net: topo.sender_addr,
                dst: topo.receiver_addr,
                dst_port: SPOOF_PORT,
                protocol: SpoofProtocol::Tcp,
                frame_len: SPOOF_FRAME_LEN,
                seed: 0x2545_f491_4f6c_dd1d,
                valid_l4_checksum: false,
            }),
            frames_per_s: 130_000.0,
            duration: Duration::from_secs(8),
        })
    };
    tcp_holds_in_two_attempts("flood_spoofed", || {
        let config = config(extra, "flood_spoofed.toml");
        let r = run(
            "flood_spoofed",
            "mtr-fs",
            (config, SPOOFED_LIMIT_BPS),
            flood,
            spoof_bucket,
        )?;
        let Flooded::Raw(raw) = &r.flooded else {
            unreachable!()
        };
        assert_raw_reached("flood_spoofed", &r, raw);
        assert_eq!(raw.distinct_tuples, raw.sent);
        Some(assert_held("flood_spoofed", &r, 8))
    });
}
