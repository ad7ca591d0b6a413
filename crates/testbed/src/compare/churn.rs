//! `metronome compare --churn`: classes added and deleted through the control socket while TCP
//! runs through other classes. What it measures is the target "1 000 `class add` / `class del`
//! while TCP runs through other classes: each applied within 1 ms of the request, those classes
//! within 1 % of their rate throughout, nothing dropped that was queued".
//!
//! One [`Topology::bump_in_the_wire`], its veths' offloads off and its end hosts' TCP at one MTU
//! per segment ([`Topology::offloads_off`], [`Topology::one_mtu_segments`]), so that every frame
//! on the receiver's veth is one frame on a wire. In the shaper namespace the real daemon,
//! `metronome run --config FILE --control SOCKET` ([`AttachedDaemon::start_controlled`], the
//! binary in [`ChurnOptions::daemon_binary`]), its configuration ([`config_text`]):
//!
//! * one file class per entry of [`ChurnOptions::tcp_rates_bps`], `tcp0`, `tcp1`, ...: class `i`
//!   matches TCP to port [`TCP_BASE_PORT`]` + i × `[`TCP_PORT_STRIDE`] ([`tcp_port`]), at its
//!   rate as an aggregate, with the backpressure of
//!   `metronome compare`'s class (ECN at 1 ms of queued delay, a 250 ms horizon that rejects
//!   beyond it; the sender negotiates ECN); [`ChurnOptions::tcp_flows`] kernel TCP connections
//!   each;
//! * no class for UDP to [`UDP_PORT`]: a paced UDP flow ([`ChurnOptions::udp_rate_bps`] of
//!   payload, [`UDP_PAYLOAD`]-byte datagrams in bursts of [`UDP_BURST`]) passes unshaped in the
//!   default class until a churn class takes it;
//! * its control socket and metrics endpoint ([`METRICS_LISTEN`], in the shaper namespace).
//!
//! The run, from the first TCP bytes at the receiver: a warm-up ([`ChurnOptions::warmup`],
//! skipped), a **calm** phase ([`ChurnOptions::calm`]: no change), then the **churn** phase:
//! [`ChurnOptions::ops`] operations through the control socket's [`Client`], one every
//! [`ChurnOptions::pace`] on a fixed schedule (an operation that is late does not move the
//! next ones): `add` of class `churn-K` (UDP to [`UDP_PORT`] at [`ChurnOptions::churn_rate_bps`],
//! above the UDP flow's wire rate but low enough that each burst queues in it for a few
//! milliseconds), then `del` of it, alternating. A `del` thus finds datagrams queued in the class
//! it deletes, which must still leave (at its rate) and arrive.
//!
//! Measured ([`ChurnReport`]):
//!
//! * per operation, the daemon's own `applied_us` (from the request's arrival on the socket to
//!   the shaping loop applying it, docs/config.md "Live classes: the control socket") and the
//!   client's round trip; p50, p99, max, and how many took longer than [`APPLIED_TARGET_US`];
//!   the same for the `add`s and the `del`s apart (an `add` is validated on the control thread
//!   first, within `applied_us`), and the slowest operations with when they were sent;
//! * each TCP class's rate on the wire: an AF_PACKET [`Tap`] on the receiver's veth counts the
//!   frame bytes (Ethernet header included, no FCS: what the daemon charges a class) of the
//!   class's ports at the time the kernel received each frame ([`TapClock::Kernel`]: a tap
//!   thread that reads late on the loaded machine does not move bytes into the next window), in
//!   100 ms windows ([`WINDOW`]) over each phase; their mean, their mean absolute deviation from
//!   the class's rate (Carousel §7.1.1), the worst window and the worst of the windows in which
//!   no CPU stalled, calm and churn side by side;
//! * the machine's own stalls ([`crate::stall`]: a real-time thread per CPU that wakes every
//!   millisecond; a late wake-up is time no task of this machine could run there) in each phase,
//!   the hypervisor's steal time, and per operation the longest stall during its round trip
//!   ([`SlowOp::stall_us`]), so that an operation over the target is told apart from one the
//!   machine stopped ([`ChurnReport::applied_over_target_beyond_stalls`]);
//! * the UDP flow's datagrams sent and received (each carries its sequence number; the sink
//!   reads on after the sender stops until [`DRAIN_QUIET`] passes without one), and the
//!   daemon's `metronome_class_drops_total`, `metronome_class_packets_total` and the largest
//!   `metronome_class_queued_packets` of the churn classes, scraped every [`SCRAPE_EVERY`] (a
//!   deleted class's series goes once its queue has drained, so the scrapes see a lower bound;
//!   the datagram count is the exact figure), the drops of the TCP classes, and
//!   `metronome_class_changes_total` of the successful `add`s and `del`s.
//!
//! The machine's load is in every figure: the traffic, the tap, the daemon and the client share
//! its cores.

use super::attach::AttachedDaemon;
use super::CompareError;
use crate::flood::frames::classify_ipv4;
use crate::flood::{value_at, FloodError, Tap, TapClock};
use crate::netns::{Namespace, TopoError, Topology};
use crate::scrape::Scrape;
use crate::stall::{self, StallProbe, StallSummary, Stalls};
use crate::stats::{mean, mean_abs_deviation_pct, Spread};
use crate::trafficgen::{self, FlowGroup, TrafficError, TrafficPlan};
use metronome_daemon::ops::config::Config;
use metronome_daemon::ops::control::{ClassObject, Client, ClientError};
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
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

/// A class's rate on the wire over one phase, in [`WINDOW`]s.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PhaseRate {
    /// Windows in the phase.
    pub windows: usize,
    /// Their mean, bit/s.
    pub mean_bps: f64,
    /// Their mean absolute deviation from the class's rate, % of it.
    pub deviation_pct: f64,
    /// The window farthest from the rate, signed % of it.
    pub worst_window_pct: f64,
    /// When that window started, seconds from the phase's start.
    pub worst_window_at_s: f64,
    /// Windows in which a CPU of the machine stalled for more than 1 ms
    /// ([`crate::stall`]).
    pub stalled_windows: usize,
    /// The window farthest from the rate among the others (no CPU stalled over 1 ms in it),
    /// signed % of the rate.
    pub worst_unstalled_window_pct: f64,
}

impl PhaseRate {
    /// Of `windows` (bit/s) against `rate_bps`; `stalled[k]`: a CPU stalled over 1 ms in window
    /// `k` (missing entries: it did not).
    pub fn of(windows: &[f64], stalled: &[bool], rate_bps: f64) -> PhaseRate {
        let worst = |keep: &dyn Fn(usize) -> bool| {
            windows
                .iter()
                .map(|w| (w / rate_bps - 1.0) * 100.0)
                .enumerate()
                .filter(|&(k, _)| keep(k))
                .fold(
                    (0, 0.0f64),
                    |(i, a), (j, d)| {
                        if d.abs() > a.abs() {
                            (j, d)
                        } else {
                            (i, a)
                        }
                    },
                )
        };
        let stalled_at = |k: usize| stalled.get(k).copied().unwrap_or(false);
        let (at, worst_all) = worst(&|_| true);
        let (_, worst_unstalled) = worst(&|k| !stalled_at(k));
        PhaseRate {
            windows: windows.len(),
            mean_bps: mean(windows),
            deviation_pct: mean_abs_deviation_pct(windows, rate_bps).unwrap_or(0.0),
            worst_window_pct: worst_all,
            worst_window_at_s: WINDOW.as_secs_f64() * at as f64,
            stalled_windows: (0..windows.len()).filter(|&k| stalled_at(k)).count(),
            worst_unstalled_window_pct: worst_unstalled,
        }
    }
}

/// One TCP class: calm and churn side by side.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TcpClassRow {
    /// Its name in the file (`tcp0`, ...).
    pub name: String,
    /// Its rate, bit/s on the wire.
    pub rate_bps: u64,
    /// Its TCP connections.
    pub flows: usize,
    /// Over the calm phase.
    pub calm: PhaseRate,
    /// Over the churn phase.
    pub churn: PhaseRate,
    /// The daemon's drops of the class (`metronome_class_drops_total`, all reasons) at the
    /// last scrape: the horizon's rejects, not ECN marks.
    pub drops: u64,
}

/// The UDP flow and the churn classes.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct UdpRow {
    /// Its rate, bit/s of payload.
    pub rate_bps: u64,
    /// The churn classes' rate, bit/s.
    pub class_rate_bps: u64,
    /// Datagrams the sender's kernel took.
    pub sent: u64,
    /// Datagrams whose send failed (not in `sent`).
    pub send_errors: u64,
    /// Distinct datagrams the sink received.
    pub received: u64,
    /// `sent - received`.
    pub lost: u64,
    /// Datagrams received twice or more.
    pub duplicates: u64,
    /// Packets the churn classes counted (`metronome_class_packets_total`), as the scrapes saw
    /// them: a lower bound (a class's series goes once its queue drained).
    pub class_packets_seen: u64,
    /// Drops the churn classes counted (`metronome_class_drops_total`), the same way.
    pub class_drops_seen: u64,
    /// Churn classes the scrapes saw.
    pub classes_seen: usize,
    /// The most packets a scrape saw queued in a churn class (`metronome_class_queued_packets`):
    /// above 0, datagrams did wait in the classes being added and deleted.
    pub class_queued_max_seen: u64,
}

/// One operation of [`ChurnReport::slowest`].
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SlowOp {
    /// Its number, from 0.
    pub op: usize,
    /// `add` or `del`.
    pub kind: String,
    /// The daemon's `applied_us`.
    pub applied_us: u64,
    /// The client's round trip, microseconds.
    pub round_trip_us: u64,
    /// When it was sent, seconds from the churn phase's start.
    pub at_s: f64,
    /// The longest stall of a CPU of the machine between its request and its reply
    /// ([`crate::stall`]), microseconds.
    pub stall_us: u64,
}

/// The machine's own stalls ([`crate::stall`]) in each phase.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MachineStalls {
    /// Whether the probe ran at real-time priority (else its stalls include the scheduler's
    /// queueing).
    pub realtime: bool,
    /// CPUs probed.
    pub cpus: usize,
    /// In the calm phase.
    pub calm: StallSummary,
    /// In the churn phase.
    pub churn: StallSummary,
    /// The hypervisor's steal time in the calm phase (`/proc/stat`, whole 10 ms ticks), ms.
    pub steal_calm_ms: Option<f64>,
    /// The same in the churn phase.
    pub steal_churn_ms: Option<f64>,
}

/// What the churn measurement found.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ChurnReport {
    /// Operations sent.
    pub ops: usize,
    /// Operations the daemon carried out (`"ok": true`).
    pub ops_ok: usize,
    /// Time between two operations, microseconds.
    pub pace_us: u64,
    /// The first errors (refusals, or no reply), with the operation's number.
    pub errors: Vec<String>,
    /// The daemon's `applied_us` of the operations carried out.
    pub applied: Spread,
    /// The same of the `add`s only (the daemon validates the class first).
    pub applied_add: Spread,
    /// The same of the `del`s only.
    pub applied_del: Spread,
    /// Operations carried out whose `applied_us` was above [`APPLIED_TARGET_US`].
    pub applied_over_target: usize,
    /// Those of them still above it less the longest stall of a CPU during their round trip
    /// ([`SlowOp::stall_us`]): the ones the machine's stalls do not account for.
    pub applied_over_target_beyond_stalls: usize,
    /// The client's round trip (request written to reply read) of every operation.
    pub round_trip: Spread,
    /// The operations with the longest `applied_us`, longest first (at most [`SLOWEST_KEPT`]).
    pub slowest: Vec<SlowOp>,
    /// `metronome_class_changes_total{op="add"|"del",result="ok"}` at the end.
    pub changes_counted: u64,
    /// The calm phase's length, seconds.
    pub calm_s: f64,
    /// The churn phase's length (first operation sent to last reply), seconds.
    pub churn_s: f64,
    /// The TCP classes.
    pub classes: Vec<TcpClassRow>,
    /// The UDP flow.
    pub udp: UdpRow,
    /// Frames the tap missed (its socket's ring drops): its rates undercount by these.
    pub tap_missed: u64,
    /// The machine's own stalls, measured beside the run.
    pub stalls: MachineStalls,
    /// The TCP flows' congestion control, when the run set one ([`ChurnOptions::congestion`]).
    pub congestion: Option<String>,
    /// The daemon's `realtime_priority` ([`ChurnOptions::realtime_priority`]).
    pub realtime_priority: Option<u8>,
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

/// The paced UDP flow: a sender in the sender namespace, a sink in the receiver's, each on a
/// thread of its own; every datagram carries its sequence number (8 bytes, big-endian).
struct UdpFlow {
    stop: Arc<AtomicBool>,
    sender: std::thread::JoinHandle<(u64, u64)>,
    sink: std::thread::JoinHandle<Result<(u64, u64), TrafficError>>,
}

impl UdpFlow {
    fn start(topo: &Topology, options: &ChurnOptions) -> Result<UdpFlow, ChurnError> {
        let sink = topo
            .receiver
            .run(|| UdpSocket::bind((Ipv4Addr::UNSPECIFIED, UDP_PORT)))?
            .map_err(TopoError::Io)?;
        let to = SocketAddr::from((topo.receiver_addr, UDP_PORT));
        let socket = topo
            .sender
            .run(move || {
                let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
                s.connect(to)?;
                Ok::<_, std::io::Error>(s)
            })?
            .map_err(TopoError::Io)?;
        sink.set_read_timeout(Some(UDP_POLL))
            .map_err(TopoError::Io)?;
        let stop = Arc::new(AtomicBool::new(false));
        let every = Duration::from_secs_f64(
            (UDP_BURST * UDP_PAYLOAD * 8) as f64 / options.udp_rate_bps as f64,
        );
        let flag = stop.clone();
        let sender = std::thread::Builder::new()
            .name("churn-udp".into())
            .spawn(move || send_udp(&socket, every, &flag))
            .map_err(TopoError::Io)?;
        let flag = stop.clone();
        let sink = std::thread::Builder::new()
            .name("churn-udp-sink".into())
            .spawn(move || read_udp(&sink, &flag))
            .map_err(TopoError::Io)?;
        Ok(UdpFlow { stop, sender, sink })
    }

    /// Stops the sender, lets the sink drain, and returns the counts.
    fn finish(self) -> Result<UdpRow, ChurnError> {
        self.stop.store(true, Ordering::Release);
        let (sent, send_errors) = self
            .sender
            .join()
            .map_err(|_| TrafficError::ThreadPanicked)?;
        let (received, duplicates) = self
            .sink
            .join()
            .map_err(|_| TrafficError::ThreadPanicked)??;
        Ok(UdpRow {
            sent,
            send_errors,
            received,
            duplicates,
            ..UdpRow::default()
        })
    }
}

/// Sends [`UDP_BURST`] datagrams every `every` until `stop`; returns (sent, failed).
fn send_udp(socket: &UdpSocket, every: Duration, stop: &AtomicBool) -> (u64, u64) {
    let mut buf = [0u8; UDP_PAYLOAD];
    let (mut seq, mut failed) = (0u64, 0u64);
    let start = Instant::now();
    let mut bursts = 0u32;
    while !stop.load(Ordering::Acquire) {
        for _ in 0..UDP_BURST {
            buf[..8].copy_from_slice(&seq.to_be_bytes());
            match socket.send(&buf) {
                Ok(_) => seq += 1,
                Err(_) => failed += 1,
            }
        }
        bursts += 1;
        if let Some(wait) = (start + every * bursts).checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    (seq, failed)
}

/// Reads the sink until `stop` is set and then [`DRAIN_QUIET`] passes without a datagram;
/// returns (distinct datagrams, duplicates).
fn read_udp(socket: &UdpSocket, stop: &AtomicBool) -> Result<(u64, u64), TrafficError> {
    let mut buf = [0u8; 2048];
    let mut seen: Vec<bool> = Vec::new();
    let (mut distinct, mut duplicates) = (0u64, 0u64);
    let mut last = Instant::now();
    loop {
        match socket.recv(&mut buf) {
            Ok(n) if n >= 8 => {
                last = Instant::now();
                let mut seq = [0u8; 8];
                seq.copy_from_slice(&buf[..8]);
                let Ok(seq) = usize::try_from(u64::from_be_bytes(seq)) else {
                    continue;
                };
                if seq >= seen.len() {
                    seen.resize(seq + 1, false);
                }
                if std::mem::replace(&mut seen[seq], true) {
                    duplicates += 1;
                } else {
                    distinct += 1;
                }
            }
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(source) => {
                return Err(TrafficError::Io {
                    what: "UDP sink read".into(),
                    source,
                })
            }
        }
        if stop.load(Ordering::Acquire) && last.elapsed() >= DRAIN_QUIET {
            return Ok((distinct, duplicates));
        }
    }
}

/// A class's counters as the scrapes saw them (the largest value of each).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct ClassCounts {
    packets: u64,
    drops: u64,
    /// `metronome_class_queued_packets`, the largest a scrape saw.
    queued: u64,
}

/// The key under which [`Scraper`] keeps `metronome_class_changes_total{op="add"|"del",
/// result="ok"}` (in `packets`): no class has this name (names are not empty).
const CHANGES_OK: &str = "";

/// Scrapes the daemon's metrics every [`SCRAPE_EVERY`] on a thread of its own.
struct Scraper {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<BTreeMap<String, ClassCounts>>,
}

impl Scraper {
    fn start(shaper: &Namespace) -> Result<Scraper, ChurnError> {
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, ns) = (stop.clone(), shaper.clone());
        let thread = std::thread::Builder::new()
            .name("churn-scrape".into())
            .spawn(move || {
                let mut seen = BTreeMap::new();
                loop {
                    let last = flag.load(Ordering::Acquire);
                    if let Some(body) = scrape(&ns) {
                        merge_counts(&body, &mut seen);
                    }
                    if last {
                        return seen;
                    }
                    std::thread::sleep(SCRAPE_EVERY);
                }
            })
            .map_err(TopoError::Io)?;
        Ok(Scraper { stop, thread })
    }

    /// One last scrape, and what they all saw.
    fn finish(self) -> BTreeMap<String, ClassCounts> {
        self.stop.store(true, Ordering::Release);
        self.thread.join().unwrap_or_default()
    }
}

/// The daemon's metrics text, from inside the shaper namespace; `None` when it did not answer.
fn scrape(ns: &Namespace) -> Option<String> {
    Scrape::fetch_text(ns, METRICS_LISTEN.parse().ok()?)
}

/// Adds one scrape's class packets and drops (all reasons summed) and the successful changes
/// to `seen`, keeping the largest value of each (the counters only grow while a class exists).
fn merge_counts(body: &str, seen: &mut BTreeMap<String, ClassCounts>) {
    let scrape = Scrape::parse(body);
    let mut now: BTreeMap<String, ClassCounts> = BTreeMap::new();
    let per_class = |name: &'static str| {
        scrape
            .samples(name)
            .filter_map(|s| Some((s.label("class")?.to_owned(), s.value as u64)))
    };
    for (class, value) in per_class("metronome_class_packets_total") {
        now.entry(class).or_default().packets += value;
    }
    for (class, value) in per_class("metronome_class_queued_packets") {
        now.entry(class).or_default().queued += value;
    }
    for (class, value) in per_class("metronome_class_drops_total") {
        now.entry(class).or_default().drops += value;
    }
    let changes_ok = scrape
        .samples("metronome_class_changes_total")
        .filter(|s| s.label("result") == Some("ok") && matches!(s.label("op"), Some("add" | "del")))
        .map(|s| s.value as u64);
    for value in changes_ok {
        now.entry(CHANGES_OK.to_owned()).or_default().packets += value;
    }
    for (class, c) in now {
        let e = seen.entry(class).or_default();
        e.packets = e.packets.max(c.packets);
        e.drops = e.drops.max(c.drops);
        e.queued = e.queued.max(c.queued);
    }
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

    #[test]
    fn scrapes_keep_the_largest_counts_of_each_class() {
        let mut seen = BTreeMap::new();
        let first = "metronome_class_packets_total{class=\"churn-1\"} 5\n\
                     metronome_class_drops_total{class=\"churn-1\",reason=\"horizon\"} 1\n\
                     metronome_class_drops_total{class=\"churn-1\",reason=\"queue_full\"} 2\n\
                     metronome_class_queued_packets{class=\"churn-1\"} 3\n\
                     metronome_class_changes_total{op=\"add\",result=\"ok\"} 3\n\
                     metronome_class_changes_total{op=\"del\",result=\"ok\"} 2\n\
                     metronome_class_changes_total{op=\"del\",result=\"refused\"} 9\n";
        merge_counts(first, &mut seen);
        merge_counts(
            "metronome_class_packets_total{class=\"churn-1\"} 4\n",
            &mut seen,
        );
        assert_eq!(
            seen["churn-1"],
            ClassCounts {
                packets: 5,
                drops: 3,
                queued: 3
            }
        );
        assert_eq!(seen[CHANGES_OK].packets, 5);
    }
}
