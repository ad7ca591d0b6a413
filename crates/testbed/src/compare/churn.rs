//! `metronome compare churn`: classes added and deleted through the control socket while TCP
//! runs through other classes, against the target "1 000 `class add` / `class del` while TCP
//! runs through other classes: each applied within 1 ms of the request, those classes within 1 %
//! of their rate throughout, nothing dropped that was queued".
//!
//! One [`Topology::bump_in_the_wire`] with offloads off and one MTU per segment; in its shaper
//! namespace the real daemon with a control socket ([`AttachedDaemon::start_controlled`]) and
//! file classes for TCP ([`config_text`]); a paced UDP flow ([`udp`]) passes unshaped until a
//! churn class takes it. After a warm-up, a **calm** phase, then the **churn** phase:
//! [`ChurnOptions::ops`] `add`s and `del`s of class `churn-K`, one every [`ChurnOptions::pace`]
//! on a fixed schedule. What is measured is [`ChurnReport`]'s ([`report`]); the daemon's
//! counters come from its metrics ([`scraper`]). Where it departs from Carousel §7.1.1: the
//! windows' rates are frame bytes at the receiver's tap, timed by the kernel ([`TapClock::Kernel`]).

mod report;
mod scraper;
mod udp;

use udp::UdpFlow;

use super::attach::AttachedDaemon;
use super::CompareError;
use crate::flood::frames::classify_ipv4;
use crate::flood::{value_at, FloodError, Tap, TapClock};
use crate::netns::{TopoError, Topology};
use crate::stall::{self, StallProbe, Stalls};
use crate::stats::Spread;
use crate::trafficgen::{self, FlowGroup, TrafficError, TrafficPlan};
use metronome_daemon::ops::config::Config;
use metronome_daemon::ops::control::{ClassObject, Client, ClientError};
pub use report::{ChurnReport, MachineStalls, PhaseRate, SlowOp, TcpClassRow, UdpRow};
use scraper::{ClassCounts, Scraper, CHANGES_OK};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Prefix of the churn measurement's namespaces.
pub const NS_PREFIX: &str = "mtr-chn";
/// The first TCP class's first destination port.
pub const TCP_BASE_PORT: u16 = 5201;
/// Ports between two TCP classes' ports: class `i`'s connections go to [`TCP_BASE_PORT`]` + i ×
/// 16`.
pub const TCP_PORT_STRIDE: u16 = 16;
/// TCP connections per class at most (the trafficgen's [`trafficgen::MAX_FLOWS`] shared by
/// [`MAX_TCP_CLASSES`] classes).
pub const MAX_TCP_FLOWS: usize = trafficgen::MAX_FLOWS / MAX_TCP_CLASSES;
/// TCP classes at most (the tap's buckets).
pub const MAX_TCP_CLASSES: usize = 8;
/// The UDP flow's destination port, which no file class matches.
pub const UDP_PORT: u16 = 5400;
/// UDP datagram payload, bytes (a 1 042-byte frame).
pub const UDP_PAYLOAD: usize = 1000;
/// Datagrams the UDP sender sends back to back, every `UDP_BURST × payload / rate`: at the
/// default rates a burst takes 5.6 ms to leave a churn class, so a `del` finds datagrams queued.
pub const UDP_BURST: usize = 4;
/// Frame bytes of a UDP datagram of [`UDP_PAYLOAD`]: 14 Ethernet + 20 IPv4 + 8 UDP headers.
pub const UDP_FRAME: usize = UDP_PAYLOAD + 42;
/// The daemon's metrics endpoint, in the shaper namespace.
pub const METRICS_LISTEN: &str = "127.0.0.1:9188";
/// The target's bound on an operation's `applied_us`: 1 ms.
pub const APPLIED_TARGET_US: u64 = 1000;
/// Rate window: 100 ms (Carousel §7.1.1, as `metronome compare`).
pub const WINDOW: Duration = Duration::from_millis(100);
/// How often the daemon's metrics are scraped from the calm phase on.
pub const SCRAPE_EVERY: Duration = Duration::from_millis(100);
/// After the UDP sender stops, the sink reads until this long passes without a datagram: a
/// churn class's queue leaves within a few milliseconds at the default rates.
pub const DRAIN_QUIET: Duration = Duration::from_millis(300);
/// The defaults: 1 000 operations, one every 5 ms.
pub const DEFAULT_OPS: usize = 1000;
/// Time between two operations by default.
pub const DEFAULT_PACE: Duration = Duration::from_millis(5);
/// The TCP classes' rates by default, bit/s: 200 and 100 Mbit/s.
pub const DEFAULT_TCP_RATES_BPS: [u64; 2] = [200_000_000, 100_000_000];
/// TCP connections per class by default.
pub const DEFAULT_TCP_FLOWS: usize = 4;
/// The UDP flow's rate by default, bit/s of payload: 4 Mbit/s.
pub const DEFAULT_UDP_RATE_BPS: u64 = 4_000_000;
/// The churn classes' rate by default, bit/s: 6 Mbit/s, above the UDP flow's 4.17 Mbit/s on
/// the wire.
pub const DEFAULT_CHURN_RATE_BPS: u64 = 6_000_000;
/// How long the first TCP bytes may take to reach the receiver: the trafficgen's 5 s setup
/// timeout plus 1 s.
const START_TIMEOUT: Duration = Duration::from_secs(6);
/// Bytes at the receiver that mark the start of the TCP traffic: 64 KiB (as `metronome
/// compare`).
const START_BYTES: u64 = 64 << 10;
/// TCP runs this much longer than the nominal schedule of the operations, so that an operation
/// a loaded machine makes late still falls while TCP runs: a quarter, plus [`TCP_TAIL`].
const TCP_SLACK_DIVISOR: u32 = 4;
/// TCP keeps running after the last operation's nominal time, so no window of the churn phase
/// sees the flows stop.
const TCP_TAIL: Duration = Duration::from_secs(1);
/// How long the UDP flow goes on after the last operation: the last deleted class's queue
/// leaves meanwhile.
const UDP_AFTER: Duration = Duration::from_millis(200);
/// The UDP sink's read timeout (how often it looks at its stop flag).
const UDP_POLL: Duration = Duration::from_millis(20);
/// Operation errors kept in the report, the first ones.
const ERRORS_KEPT: usize = 5;
/// Operations kept in [`ChurnReport::slowest`].
pub const SLOWEST_KEPT: usize = 5;

/// What the churn measurement runs.
#[derive(Clone, Debug, PartialEq)]
pub struct ChurnOptions {
    /// Operations: `add` and `del` alternating (even, at least 2).
    pub ops: usize,
    /// Time between two operations.
    pub pace: Duration,
    /// One TCP class per rate, bit/s on the wire.
    pub tcp_rates_bps: Vec<u64>,
    /// TCP connections per class (1 to [`MAX_TCP_FLOWS`]).
    pub tcp_flows: usize,
    /// The UDP flow's rate, bit/s of payload.
    pub udp_rate_bps: u64,
    /// The churn classes' rate, bit/s on the wire (above the UDP flow's).
    pub churn_rate_bps: u64,
    /// Skipped after the first TCP bytes.
    pub warmup: Duration,
    /// The calm phase.
    pub calm: Duration,
    /// The `metronome` binary whose `run` is measured (`metronome compare` passes its own).
    pub daemon_binary: Option<PathBuf>,
    /// The TCP flows' congestion control (`TCP_CONGESTION`); `None`: the sender namespace's
    /// default (the host's).
    pub congestion: Option<String>,
    /// The daemon's `[daemon] realtime_priority` (`None`: its loop an ordinary task).
    pub realtime_priority: Option<u8>,
}

impl ChurnOptions {
    /// The target's measurement: [`DEFAULT_OPS`] operations every [`DEFAULT_PACE`], 2 s of
    /// warm-up, 5 s calm.
    pub fn full() -> Self {
        ChurnOptions {
            ops: DEFAULT_OPS,
            pace: DEFAULT_PACE,
            tcp_rates_bps: DEFAULT_TCP_RATES_BPS.to_vec(),
            tcp_flows: DEFAULT_TCP_FLOWS,
            udp_rate_bps: DEFAULT_UDP_RATE_BPS,
            churn_rate_bps: DEFAULT_CHURN_RATE_BPS,
            warmup: Duration::from_secs(2),
            calm: Duration::from_secs(5),
            daemon_binary: None,
            congestion: None,
            realtime_priority: None,
        }
    }

    /// The UDP flow's rate on the wire, bit/s.
    pub fn udp_wire_bps(&self) -> f64 {
        self.udp_rate_bps as f64 * UDP_FRAME as f64 / UDP_PAYLOAD as f64
    }

    /// Why these options cannot run, if they cannot.
    pub fn validate(&self) -> Result<(), String> {
        if self.ops < 2 || !self.ops.is_multiple_of(2) {
            return Err(format!(
                "ops: {} is not an even number of at least 2 (add, del, ...)",
                self.ops
            ));
        }
        if self.pace.is_zero() {
            return Err("pace: must be above 0".into());
        }
        if self.tcp_rates_bps.is_empty() || self.tcp_rates_bps.len() > MAX_TCP_CLASSES {
            return Err(format!(
                "rates: 1 to {MAX_TCP_CLASSES} TCP classes, not {}",
                self.tcp_rates_bps.len()
            ));
        }
        if self.tcp_rates_bps.contains(&0) {
            return Err("rates: a TCP class's rate must be above 0".into());
        }
        if !(1..=MAX_TCP_FLOWS).contains(&self.tcp_flows) {
            return Err(format!(
                "flows: 1 to {MAX_TCP_FLOWS} per TCP class, not {}",
                self.tcp_flows
            ));
        }
        if self.udp_rate_bps == 0 {
            return Err("udp rate: must be above 0".into());
        }
        if (self.churn_rate_bps as f64) <= self.udp_wire_bps() {
            return Err(format!(
                "churn rate: {} bit/s is not above the UDP flow's {:.0} bit/s on the wire: its \
                 queue would grow without bound",
                self.churn_rate_bps,
                self.udp_wire_bps()
            ));
        }
        Ok(())
    }

    /// The churn phase's nominal length: `ops × pace`.
    pub fn churn_nominal(&self) -> Duration {
        self.pace * u32::try_from(self.ops).unwrap_or(u32::MAX)
    }
}

/// Why the churn measurement could not run.
#[derive(Debug, thiserror::Error)]
pub enum ChurnError {
    /// The options are out of bounds.
    #[error("--churn: {0}")]
    Invalid(String),
    /// Building or using the topology failed (also: CAP_NET_ADMIN missing).
    #[error("{0}")]
    Topo(#[from] TopoError),
    /// The tap failed.
    #[error("{0}")]
    Flood(#[from] FloodError),
    /// The traffic generator failed.
    #[error("{0}")]
    Traffic(#[from] TrafficError),
    /// The daemon did not start or did not stop cleanly.
    #[error("{0}")]
    Daemon(String),
    /// The control socket did not answer.
    #[error("{0}")]
    Control(#[from] ClientError),
    /// No TCP bytes reached the receiver in time.
    #[error("no TCP traffic reached the receiver within {START_TIMEOUT:?}")]
    NoTraffic,
    /// The operations took longer than the TCP traffic ran.
    #[error(
        "the operations ended {0:?} after the TCP traffic: the machine is too loaded for this \
         pace (a longer --pace or fewer --ops)"
    )]
    Outlasted(Duration),
}

impl From<CompareError> for ChurnError {
    fn from(e: CompareError) -> Self {
        match e {
            CompareError::Topo(t) => ChurnError::Topo(t),
            CompareError::Traffic(t) => ChurnError::Traffic(t),
            other => ChurnError::Daemon(other.to_string()),
        }
    }
}

impl ChurnError {
    /// Whether this is the missing CAP_NET_ADMIN (the CLI exits 2 with one line).
    pub fn is_missing_privilege(&self) -> bool {
        matches!(self, ChurnError::Topo(TopoError::MissingPrivilege(_)))
    }
}

/// The daemon's configuration for `options` on `topo` (see the module docs).
pub fn config_text(topo: &Topology, options: &ChurnOptions) -> String {
    config_text_for(&topo.shaper_in, &topo.shaper_out, options)
}

/// [`config_text`] between the interfaces `inside` and `outside`.
pub fn config_text_for(inside: &str, outside: &str, options: &ChurnOptions) -> String {
    let mut text = format!(
        "[interfaces]\ninside = \"{inside}\"\noutside = \"{outside}\"\n\n[daemon]\nmetrics_listen = \
         \"{METRICS_LISTEN}\"\ngro = false\n"
    );
    if let Some(p) = options.realtime_priority {
        text += &format!("realtime_priority = {p}\n");
    }
    text += "\n[wheel]\nhorizon = \"250ms\"\n";
    for (i, rate) in options.tcp_rates_bps.iter().enumerate() {
        let port = tcp_port(i);
        text += &format!(
            "\n[[class]]\nname = \"tcp{i}\"\nmatch = {{ protocol = \"tcp\", dst_port = \
             {port} }}\nrate = {rate}\nhorizon_policy = \"reject\"\n\
             backpressure = {{ mode = \"ecn\", threshold = \"1ms\" }}\n"
        );
    }
    text
}

/// The destination port of TCP class `i`'s connections (a trafficgen group's connections all
/// go to its one port).
pub fn tcp_port(i: usize) -> u16 {
    TCP_BASE_PORT + TCP_PORT_STRIDE * u16::try_from(i).unwrap_or(0)
}

/// The class `add`ed by operation `2k`: UDP to [`UDP_PORT`] at `rate_bps`.
pub fn churn_class(name: &str, rate_bps: u64) -> ClassObject {
    let value = serde_json::json!({
        "name": name,
        "match": { "protocol": "udp", "dst_port": UDP_PORT },
        "rate": rate_bps,
    });
    match value {
        serde_json::Value::Object(map) => map,
        _ => ClassObject::new(),
    }
}

/// The tap's bucket of a frame: TCP class `i` by its destination port.
fn tcp_bucket(frame: &[u8]) -> Option<usize> {
    match classify_ipv4(frame) {
        Some((6, port)) if port >= TCP_BASE_PORT => {
            let i = usize::from((port - TCP_BASE_PORT) / TCP_PORT_STRIDE);
            (i < MAX_TCP_CLASSES).then_some(i)
        }
        _ => None,
    }
}

/// Sequence number of the measurement's scratch directories within this process.
static SEQ: AtomicU32 = AtomicU32::new(0);

/// Builds a topology, runs [`run_on`] and removes everything.
pub fn run(
    options: &ChurnOptions,
    progress: &mut dyn std::io::Write,
) -> Result<ChurnReport, ChurnError> {
    options.validate().map_err(ChurnError::Invalid)?;
    let _ = crate::netns::remove_stale(NS_PREFIX);
    let mut topo = Topology::bump_in_the_wire(NS_PREFIX)?;
    let report = run_on(&mut topo, options, progress);
    topo.remove()?;
    report
}

/// Runs the measurement on `topo` (a fresh bump in the wire; its offloads are turned off).
pub fn run_on(
    topo: &mut Topology,
    options: &ChurnOptions,
    progress: &mut dyn std::io::Write,
) -> Result<ChurnReport, ChurnError> {
    options.validate().map_err(ChurnError::Invalid)?;
    let binary = options
        .daemon_binary
        .clone()
        .ok_or_else(|| ChurnError::Daemon("no `metronome` binary to run the daemon with".into()))?;
    topo.one_mtu_segments()?;
    topo.offloads_off()?;
    topo.enable_sender_ecn();
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("mtr-churn-{}-{seq}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(TopoError::Io)?;
    let control = dir.join("control.sock");
    let text = config_text(topo, options);
    let config = Config::from_toml_str(&text, "compare-churn.toml")
        .map_err(|e| ChurnError::Daemon(format!("the daemon refused the configuration: {e}")))?;
    let control_path = Some(control.as_path());
    let started = AttachedDaemon::start_controlled(
        &topo.shaper,
        &binary,
        (&text, &config),
        false,
        control_path,
    )?;
    let daemon = match started {
        Ok(d) => d,
        Err(why) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(ChurnError::Daemon(why));
        }
    };
    let _ = writeln!(
        progress,
        "churn: `metronome run` ready (pid {})",
        daemon.pid()
    );
    let result = measure(topo, options, &control, progress);
    let stopped = daemon.stop();
    let _ = std::fs::remove_dir_all(&dir);
    let report = result?;
    stopped.map_err(ChurnError::Daemon)?;
    Ok(report)
}

/// What the operations gave.
#[derive(Default)]
struct Ops {
    ok: usize,
    errors: Vec<String>,
    applied_us: Vec<u64>,
    round_trip_us: Vec<u64>,
    /// Every operation carried out.
    carried: Vec<SlowOp>,
}

/// The traffic, the operations and the measurement, with the daemon running.
fn measure(
    topo: &Topology,
    options: &ChurnOptions,
    control: &Path,
    progress: &mut dyn std::io::Write,
) -> Result<ChurnReport, ChurnError> {
    let origin = Instant::now();
    let probe = StallProbe::spawn(origin).map_err(TopoError::Io)?;
    let tap = Tap::spawn_with(
        &topo.receiver,
        &topo.receiver_if,
        (tcp_bucket, MAX_TCP_CLASSES),
        origin,
        TapClock::Kernel,
    )?;
    let mut client = connect(control)?;

    let groups = (0..options.tcp_rates_bps.len())
        .map(|i| FlowGroup::tcp(&format!("tcp{i}"), tcp_port(i), options.tcp_flows))
        .collect();
    let nominal = options.churn_nominal();
    let tcp_run = whole_windows(
        options.warmup + options.calm + nominal + nominal / TCP_SLACK_DIVISOR + TCP_TAIL,
    );
    let mut plan = TrafficPlan::new(topo.receiver_addr, groups, tcp_run);
    if let Some(name) = &options.congestion {
        plan = plan.with_congestion(name);
    }
    let (sender, receiver) = (topo.sender.clone(), topo.receiver.clone());
    let traffic = std::thread::Builder::new()
        .name("churn-tcp".into())
        .spawn(move || trafficgen::run(&plan, Some(&sender), Some(&receiver)))
        .map_err(TopoError::Io)?;

    let running = wait_for_bytes(topo).and_then(|t0| {
        let udp = UdpFlow::start(topo, options)?;
        match Scraper::start(&topo.shaper) {
            Ok(scraper) => Ok((t0, udp, scraper)),
            Err(e) => {
                let _ = udp.finish();
                Err(e)
            }
        }
    });
    let (t0, udp, scraper) = match running {
        Ok(r) => r,
        Err(e) => {
            // The traffic stops at its deadline (or failed: its error says more than
            // `NoTraffic`); the tap when told.
            let joined = traffic.join();
            let _ = tap.finish();
            let _ = probe.finish();
            if let Ok(Err(failed)) = joined {
                return Err(failed.into());
            }
            return Err(e);
        }
    };

    let calm_start = t0 + options.warmup;
    let churn_start = calm_start + options.calm;
    let _ = writeln!(
        progress,
        "churn: TCP running; calm for {:?}, then {} operations every {:?}",
        options.calm, options.ops, options.pace
    );
    let steal_at_calm = steal_at(calm_start);
    let steal_at_churn = steal_at(churn_start);
    let ops = churn(&mut client, options, churn_start);
    let churn_end = Instant::now();
    let steal_at_end = stall::steal_ms();
    let _ = writeln!(
        progress,
        "churn: {} of {} operations carried out in {:.2} s",
        ops.ok,
        options.ops,
        (churn_end - churn_start).as_secs_f64()
    );
    std::thread::sleep(UDP_AFTER);
    // Every thread is stopped and joined before any error is returned.
    let udp = udp.finish();
    let traffic = traffic.join().map_err(|_| TrafficError::ThreadPanicked);
    let scraped = scraper.finish();
    let tapped = tap.finish();
    let stalls = probe.finish();
    let (udp, traffic, tapped) = (udp?, traffic??, tapped?);

    let tcp_end = traffic.started + tcp_run;
    if churn_end > tcp_end {
        return Err(ChurnError::Outlasted(churn_end - tcp_end));
    }
    let since = |t: Instant| t.saturating_duration_since(origin);
    let classes = options
        .tcp_rates_bps
        .iter()
        .enumerate()
        .map(|(i, &rate)| {
            let series = &tapped.series[i];
            let name = format!("tcp{i}");
            let phase = |from: Instant, to: Instant| {
                let (from, to) = (since(from), since(to));
                let windows = windows_bps(series, from, to);
                PhaseRate::of(
                    &windows,
                    &stalled_windows(&stalls, from, windows.len()),
                    rate as f64,
                )
            };
            TcpClassRow {
                calm: phase(calm_start, churn_start),
                churn: phase(churn_start, churn_end),
                drops: scraped.get(&name).map_or(0, |c| c.drops),
                name,
                rate_bps: rate,
                flows: options.tcp_flows,
            }
        })
        .collect();
    let churned: Vec<&ClassCounts> = scraped
        .iter()
        .filter(|(name, _)| name.starts_with("churn-"))
        .map(|(_, c)| c)
        .collect();
    let udp = UdpRow {
        rate_bps: options.udp_rate_bps,
        class_rate_bps: options.churn_rate_bps,
        lost: udp.sent.saturating_sub(udp.received),
        class_packets_seen: churned.iter().map(|c| c.packets).sum(),
        class_drops_seen: churned.iter().map(|c| c.drops).sum(),
        classes_seen: churned.len(),
        class_queued_max_seen: churned.iter().map(|c| c.queued).max().unwrap_or(0),
        ..udp
    };
    let applied_over_target = ops
        .applied_us
        .iter()
        .filter(|&&us| us > APPLIED_TARGET_US)
        .count();
    let applied_of = |kind: &str| {
        Spread::of(
            &ops.carried
                .iter()
                .filter(|o| o.kind == kind)
                .map(|o| o.applied_us)
                .collect::<Vec<_>>(),
        )
    };
    let (applied_add, applied_del) = (applied_of("add"), applied_of("del"));
    let mut slowest = ops.carried;
    let churn_from = since(churn_start);
    for o in &mut slowest {
        let sent = churn_from + Duration::from_secs_f64(o.at_s);
        let stalled = stalls.longest_in(sent, sent + Duration::from_micros(o.round_trip_us));
        o.stall_us = u64::try_from(stalled.as_micros()).unwrap_or(u64::MAX);
    }
    let applied_over_target_beyond_stalls = slowest
        .iter()
        .filter(|o| o.applied_us.saturating_sub(o.stall_us) > APPLIED_TARGET_US)
        .count();
    slowest.sort_by_key(|o| std::cmp::Reverse(o.applied_us));
    slowest.truncate(SLOWEST_KEPT);
    Ok(ChurnReport {
        slowest,
        ops: options.ops,
        ops_ok: ops.ok,
        pace_us: u64::try_from(options.pace.as_micros()).unwrap_or(u64::MAX),
        errors: ops.errors,
        applied: Spread::of(&ops.applied_us),
        applied_add,
        applied_del,
        applied_over_target,
        applied_over_target_beyond_stalls,
        round_trip: Spread::of(&ops.round_trip_us),
        changes_counted: scraped.get(CHANGES_OK).map_or(0, |c| c.packets),
        calm_s: options.calm.as_secs_f64(),
        churn_s: (churn_end - churn_start).as_secs_f64(),
        classes,
        udp,
        tap_missed: tapped.counters.rx_ring_drops,
        stalls: MachineStalls {
            realtime: stalls.realtime,
            cpus: stalls.cpus,
            calm: stalls.summary(since(calm_start), since(churn_start)),
            churn: stalls.summary(since(churn_start), since(churn_end)),
            steal_calm_ms: steal_at_calm.zip(steal_at_churn).map(|(a, b)| b - a),
            steal_churn_ms: steal_at_churn.zip(steal_at_end).map(|(a, b)| b - a),
        },
        congestion: options.congestion.clone(),
        realtime_priority: options.realtime_priority,
    })
}

/// The machine's steal time ([`stall::steal_ms`]) at `t`: sleeps until then.
fn steal_at(t: Instant) -> Option<f64> {
    trafficgen::sleep_until(t);
    stall::steal_ms()
}

/// For each of `n` [`WINDOW`]s from `from`: whether a CPU stalled for more than 1 ms in it.
fn stalled_windows(stalls: &Stalls, from: Duration, n: usize) -> Vec<bool> {
    (0..u32::try_from(n).unwrap_or(u32::MAX))
        .map(|k| {
            let start = from + WINDOW * k;
            stalls.longest_in(start, start + WINDOW) > Duration::from_millis(1)
        })
        .collect()
}

/// `d` rounded up to whole trafficgen windows: the sinks stop after the last whole window, and a
/// writer still writing then would see its connection closed before its deadline.
fn whole_windows(d: Duration) -> Duration {
    let window = trafficgen::DEFAULT_WINDOW.as_nanos();
    let n = d.as_nanos().div_ceil(window);
    trafficgen::DEFAULT_WINDOW * u32::try_from(n).unwrap_or(u32::MAX)
}

/// Connects to the daemon's control socket (it is bound before the metrics endpoint answers,
/// which [`AttachedDaemon::start_controlled`] waited for).
fn connect(control: &Path) -> Result<Client, ChurnError> {
    Ok(Client::connect(control)?)
}

/// Waits for [`START_BYTES`] at the receiver's veth: the TCP flows have started.
fn wait_for_bytes(topo: &Topology) -> Result<Instant, ChurnError> {
    let mut counters = topo.receiver.interface_counters(&topo.receiver_if)?;
    let base = counters.read()?.rx_bytes;
    let give_up = Instant::now() + START_TIMEOUT;
    loop {
        if counters.read()?.rx_bytes >= base + START_BYTES {
            return Ok(Instant::now());
        }
        if Instant::now() > give_up {
            return Err(ChurnError::NoTraffic);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The churn phase: `add` and `del` alternating, operation `i` at `start + i × pace` (or at
/// once when late).
fn churn(client: &mut Client, options: &ChurnOptions, start: Instant) -> Ops {
    let mut ops = Ops::default();
    for i in 0..options.ops {
        let due = start + options.pace * u32::try_from(i).unwrap_or(u32::MAX);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let name = format!("churn-{}", i / 2);
        let sent = Instant::now();
        let reply = if i % 2 == 0 {
            client.add(churn_class(&name, options.churn_rate_bps))
        } else {
            client.delete(&name)
        };
        let round_trip_us = u64::try_from(sent.elapsed().as_micros()).unwrap_or(u64::MAX);
        ops.round_trip_us.push(round_trip_us);
        let op = if i % 2 == 0 { "add" } else { "del" };
        let error = match reply {
            Ok(r) if r.ok => {
                ops.ok += 1;
                let applied_us = r.applied_us.unwrap_or(0);
                ops.applied_us.push(applied_us);
                ops.carried.push(SlowOp {
                    op: i,
                    kind: op.into(),
                    applied_us,
                    round_trip_us,
                    at_s: sent.saturating_duration_since(start).as_secs_f64(),
                    stall_us: 0,
                });
                None
            }
            Ok(r) => Some(
                r.error
                    .map(|e| format!("{}: {}", e.field, e.message))
                    .unwrap_or_else(|| "refused".into()),
            ),
            Err(e) => Some(e.to_string()),
        };
        if let Some(e) = error {
            if ops.errors.len() < ERRORS_KEPT {
                ops.errors.push(format!("operation {i} ({op} {name}): {e}"));
            }
        }
    }
    ops
}

/// The rates of consecutive [`WINDOW`]s of the cumulative byte series `series` from `from`
/// while whole windows fit before `to`, bit/s.
pub fn windows_bps(series: &[(Duration, u64)], from: Duration, to: Duration) -> Vec<f64> {
    let n = to.saturating_sub(from).as_nanos() / WINDOW.as_nanos();
    (0..u32::try_from(n).unwrap_or(0))
        .map(|k| {
            let a = value_at(series, from + WINDOW * k);
            let b = value_at(series, from + WINDOW * (k + 1));
            (b - a) * 8.0 / WINDOW.as_secs_f64()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_out_of_bounds_are_refused() {
        assert!(ChurnOptions::full().validate().is_ok());
        let bad = [
            ChurnOptions {
                ops: 3,
                ..ChurnOptions::full()
            },
            ChurnOptions {
                pace: Duration::ZERO,
                ..ChurnOptions::full()
            },
            ChurnOptions {
                tcp_rates_bps: Vec::new(),
                ..ChurnOptions::full()
            },
            ChurnOptions {
                tcp_flows: MAX_TCP_FLOWS + 1,
                ..ChurnOptions::full()
            },
            ChurnOptions {
                churn_rate_bps: 4_100_000,
                ..ChurnOptions::full()
            },
        ];
        for o in bad {
            assert!(o.validate().is_err(), "{o:?}");
        }
    }

    #[test]
    fn the_config_is_valid_and_the_churn_class_is_a_class() {
        let options = ChurnOptions {
            realtime_priority: Some(10),
            ..ChurnOptions::full()
        };
        let config = Config::from_toml_str(&config_text_for("a", "b", &options), "t.toml").unwrap();
        assert_eq!(config.daemon.realtime_priority, Some(10));
        let text = config_text_for("in0", "out0", &ChurnOptions::full());
        let config = Config::from_toml_str(&text, "churn.toml").unwrap();
        assert_eq!(config.classes.len(), 2);
        assert_eq!(config.classes[0].name, "tcp0");
        assert!(!config.daemon.gro);
        let object = churn_class("churn-3", DEFAULT_CHURN_RATE_BPS);
        assert_eq!(object["name"], "churn-3");
        assert_eq!(object["match"]["dst_port"], u64::from(UDP_PORT));
    }

    #[test]
    fn frames_go_to_their_tcp_class() {
        assert_eq!(tcp_port(1), 5217);
        let frame = |proto: u8, port: u16| {
            let mut f = vec![0u8; 60];
            f[12..14].copy_from_slice(&[0x08, 0x00]);
            f[14] = 0x45;
            f[16..18].copy_from_slice(&46u16.to_be_bytes());
            f[23] = proto;
            f[36..38].copy_from_slice(&port.to_be_bytes());
            f
        };
        assert_eq!(tcp_bucket(&frame(6, 5201)), Some(0));
        assert_eq!(tcp_bucket(&frame(6, 5217)), Some(1));
        assert_eq!(tcp_bucket(&frame(17, 5201)), None);
        assert_eq!(tcp_bucket(&frame(6, 80)), None);
        assert_eq!(tcp_bucket(&frame(17, UDP_PORT)), None);
    }

    #[test]
    fn windows_and_their_deviation() {
        // 1 250 000 bytes per 100 ms: 100 Mbit/s, then one window at 99.
        let mut series: Vec<(Duration, u64)> = (0..=10u64)
            .map(|k| (Duration::from_millis(100 * k), k * 1_250_000))
            .collect();
        series.push((Duration::from_millis(1100), 10 * 1_250_000 + 1_237_500));
        let w = windows_bps(&series, Duration::ZERO, Duration::from_millis(1150));
        assert_eq!(w.len(), 11);
        let r = PhaseRate::of(&w, &[], 100e6);
        assert!((r.worst_window_pct + 1.0).abs() < 1e-9, "{r:?}");
        assert!((r.deviation_pct - 1.0 / 11.0).abs() < 1e-9, "{r:?}");
    }
}
