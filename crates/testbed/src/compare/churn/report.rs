//! What `compare churn` reports ([`ChurnReport`]): per phase the TCP classes' rates, the UDP
//! flow's datagrams, the operations' applied times and the machine's stalls.

use super::WINDOW;
use crate::stall::StallSummary;
use crate::stats::{mean, mean_abs_deviation_pct, Spread};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A class's rate on the wire over one phase, in [`WINDOW`]s.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
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
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
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
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
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

/// What the churn measurement found:
///
/// * per operation, the daemon's own `applied_us` (from the request's arrival on the socket to
///   the shaping loop applying it, docs/config.md "Live classes: the control socket") and the
///   client's round trip; p50, p99, max, and how many took longer than [`APPLIED_TARGET_US`];
///   the same for the `add`s and the `del`s apart (an `add` is validated on the control thread
///   first, within `applied_us`), and the slowest operations with when they were sent;
/// * each TCP class's rate on the wire: an AF_PACKET [`Tap`] on the receiver's veth counts the
///   frame bytes (Ethernet header included, no FCS: what the daemon charges a class) of the
///   class's ports at the time the kernel received each frame ([`TapClock::Kernel`]: a tap
///   thread that reads late on the loaded machine does not move bytes into the next window), in
///   100 ms windows ([`WINDOW`]) over each phase; their mean, their mean absolute deviation from
///   the class's rate (Carousel §7.1.1), the worst window and the worst of the windows in which
///   no CPU stalled, calm and churn side by side;
/// * the machine's own stalls ([`crate::stall`]: a real-time thread per CPU that wakes every
///   millisecond; a late wake-up is time no task of this machine could run there) in each phase,
///   the hypervisor's steal time, and per operation the longest stall during its round trip
///   ([`SlowOp::stall_us`]), so that an operation over the target is told apart from one the
///   machine stopped ([`ChurnReport::applied_over_target_beyond_stalls`]);
/// * the UDP flow's datagrams sent and received (each carries its sequence number; the sink
///   reads on after the sender stops until [`DRAIN_QUIET`] passes without one), and the
///   daemon's `metronome_class_drops_total`, `metronome_class_packets_total` and the largest
///   `metronome_class_queued_packets` of the churn classes, scraped every [`SCRAPE_EVERY`] (a
///   deleted class's series goes once its queue has drained, so the scrapes see a lower bound;
///   the datagram count is the exact figure), the drops of the TCP classes, and
///   `metronome_class_changes_total` of the successful `add`s and `del`s.
///
/// The machine's load is in every figure: the traffic, the tap, the daemon and the client share
/// its cores.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
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
