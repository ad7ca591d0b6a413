//! The parameters of one simulated run: hosts, transport, shaper under test, backpressure mode,
//! path and measurement.
//!
//! Every field has a default (`Scenario::default()` is a valid run), and every struct derives
//! serde `Deserialize` with `#[serde(default)]`, so a TOML plan (CONTRIBUTING.md §15) sets only
//! what it varies. [`Scenario::validate`] rejects parameters the simulator cannot run, with a
//! [`ScenarioError`] naming the field, instead of panicking.
//!
//! The defaults follow the papers' set-ups: 1500-byte MTU, a 1 Gbit/s NIC, greedy TCP Cubic flows
//! (Carousel §7.1.2: "Our experiments for Deferred Completions used TCP Cubic in Linux"), 100 ms
//! measurement windows (Carousel §7.1.1), a timing wheel of 2 µs slots (Carousel §7.1.3).

use metronome_core::{Duration, Rate};
use serde::{Deserialize, Serialize};

/// Ethernet MTU in bytes (the papers' set-ups use standard frames).
pub const DEFAULT_MTU: u32 = 1500;

/// Largest shaper packet in bytes: a TSO segment is at most 64 KB (Linux `GSO_MAX_SIZE`, 65 536,
/// capped here at the IPv4 total-length limit that [`metronome_core::PacketRef`] can carry).
pub const MAX_SEGMENT_BYTES: u32 = 65_535;

/// Linux `TCP_RTO_MIN`, 200 ms.
pub const LINUX_RTO_MIN: Duration = Duration::from_millis(200);

/// Initial RTO before any RTT sample, 1 s (RFC 6298 §2.1).
pub const INITIAL_RTO: Duration = Duration::from_secs(1);

/// Upper bound of the RTO after backoff, 60 s (RFC 6298 §2.5 allows "at least 60 seconds").
pub const MAX_RTO: Duration = Duration::from_secs(60);

/// The packets a flow may keep between the source and its completion under TSQ, Deferred
/// Completions and zD: two (zD §4.1: "Like TSQ, zD keeps the number of packets enqueued by a
/// single flow to a maximum of two packets"; Carousel §7.1.2 measures "approximately twice the
/// number of active flows").
pub const DEFAULT_PER_FLOW_LIMIT: u32 = 2;

/// Congestion-control algorithm of a TCP-like source.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CongestionControl {
    /// NewReno: AIMD with fast retransmit / fast recovery (RFC 5681, RFC 6582).
    Reno,
    /// CUBIC window growth (RFC 8312), Linux's default and Carousel §7.1.2's transport.
    #[default]
    Cubic,
    /// Vegas-like delay-based control (Carousel §5.2 "delay-based CC"): keeps between `alpha`
    /// and `beta` packets queued, estimated from the minimum RTT as the base.
    Vegas {
        /// Lower bound of the estimated queued packets; below it the window grows by one per RTT.
        alpha: u32,
        /// Upper bound; above it the window shrinks by one per RTT.
        beta: u32,
    },
    /// DCTCP (RFC 8257, Alizadeh et al. SIGCOMM 2010): ECN-capable packets, an estimate `alpha`
    /// of the fraction of marked bytes per window (gain `g = 1/16`) and a window cut by
    /// `alpha / 2` at most once per window; Reno growth and Reno's reaction to loss.
    Dctcp,
}

impl CongestionControl {
    /// Whether the transport sends ECN-capable (ECT) packets: DCTCP does (RFC 8257 §3.1);
    /// the others here are modelled as non-ECN TCP (an ECN echo still halves their window).
    pub fn ecn_capable(self) -> bool {
        matches!(self, CongestionControl::Dctcp)
    }
}

/// What one source sends.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    /// A TCP-like closed-loop transport with the given congestion control.
    Tcp(CongestionControl),
    /// An open-loop UDP-like source: `rate` bits per second, or greedy (as fast as it may) when
    /// `None`.
    Udp {
        /// Constant sending rate in bits per second; `None` sends whenever allowed.
        rate_bps: Option<u64>,
    },
}

impl Default for SourceKind {
    fn default() -> Self {
        SourceKind::Tcp(CongestionControl::default())
    }
}

/// Transport parameters shared by all sources.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TransportConfig {
    /// Segment size in bytes (one MTU).
    pub mtu: u32,
    /// MTUs per segment handed to the shaper: 1 without TSO; `k > 1` makes each shaper packet
    /// `k * mtu` bytes, at most [`MAX_SEGMENT_BYTES`].
    pub tso_segments: u32,
    /// Initial congestion window in MTUs (RFC 6928: 10).
    pub initial_cwnd: u32,
    /// Socket-buffer-like cap on unacknowledged MTUs (Linux `tcp_wmem` max 4 MiB / 1500 B ~ 2800).
    pub sndbuf_mtus: u32,
    /// Optional per-flow pacing rate in bits per second, applied by the transport as the
    /// packet's earliest departure (Carousel §5.1.1), to every flow but [`Scenario::probe`];
    /// `None` for unpaced.
    pub pacing_bps: Option<u64>,
    /// Minimum retransmission timeout in nanoseconds (default [`LINUX_RTO_MIN`]).
    pub rto_min_ns: u64,
    /// Whether the receiver sends one ACK per two segments (RFC 1122 delayed ACK; an
    /// out-of-order or hole-filling segment is ACKed at once). Default: one ACK per segment.
    pub delayed_ack: bool,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            mtu: DEFAULT_MTU,
            tso_segments: 1,
            initial_cwnd: 10,
            sndbuf_mtus: 2800,
            pacing_bps: None,
            rto_min_ns: LINUX_RTO_MIN.as_nanos(),
            delayed_ack: false,
        }
    }
}

/// The backpressure the daemon's engine applies to a flow ([`ShaperSpec::Daemon`]), as its
/// configuration's `backpressure` spells it (`docs/config.md`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DaemonBackpressure {
    /// None: packets wait as long as their EDT says.
    #[default]
    None,
    /// Set CE on ECN-capable packets whose delay (EDT minus now) would exceed `threshold_ns`.
    Ecn {
        /// Delay threshold in nanoseconds.
        threshold_ns: u64,
    },
    /// Drop a flow's packets beyond `limit` queued packets.
    Drop {
        /// Packets a flow may have queued.
        limit: u32,
    },
}

/// The shaper or scheduled buffer between the sources and the NIC.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShaperSpec {
    /// Carousel's timing wheel (Carousel §5.1.2) with EDTs from the timestamper (§5.1.1).
    TimingWheel {
        /// Slot granularity in nanoseconds.
        granularity_ns: u64,
        /// Horizon in nanoseconds (EDTs beyond it are clamped to the last slot).
        horizon_ns: u64,
        /// Aggregate rate limit over all flows, bits per second.
        aggregate_bps: Option<u64>,
        /// Per-flow pacing rate, bits per second.
        per_flow_bps: Option<u64>,
        /// Packets the shaper holds at most; more are physically dropped.
        capacity_packets: u32,
    },
    /// The daemon's own shaping pipeline (`metronome_engine::engine::Engine`, the code of
    /// `metronome run`) with one class: Carousel's timing wheel (§5.1.2) fed by the class's
    /// aggregate policy and each flow's pacing policy (§5.1.1), real frames in a frame pool, the
    /// engine's backpressure. At least one of the two rates is set (an unshaped class forwards).
    Daemon {
        /// Slot granularity in nanoseconds.
        granularity_ns: u64,
        /// Horizon in nanoseconds (the engine clamps an EDT to the last slot).
        horizon_ns: u64,
        /// The class's aggregate rate, bits per second.
        aggregate_bps: Option<u64>,
        /// The class's per-flow pacing rate, bits per second.
        per_flow_bps: Option<u64>,
        /// Frames the engine's pool holds, the most packets it queues; more are physically dropped.
        capacity_packets: u32,
        /// The engine's backpressure.
        #[serde(default)]
        backpressure: DaemonBackpressure,
        /// Drop a packet whose delay would reach the horizon (the wheel's `horizon_policy =
        /// "reject"`) instead of clamping its EDT to the last slot.
        #[serde(default)]
        reject_beyond_horizon: bool,
        /// The class's fair mode (`fair = true`): the aggregate decides when the class sends,
        /// a per-class flow scheduler decides which flow's packet leaves; `false` is the single
        /// virtual FIFO of the aggregate's running departure time.
        #[serde(default)]
        fair: bool,
    },
    /// The `sch_fq` structure (per-flow FIFOs, tree of head EDTs) with the same timestamping.
    FqTree {
        /// Aggregate rate limit over all flows, bits per second.
        aggregate_bps: Option<u64>,
        /// Per-flow pacing rate, bits per second.
        per_flow_bps: Option<u64>,
        /// Packets the shaper holds at most.
        capacity_packets: u32,
    },
    /// One token bucket and FIFO (HTB without hierarchy), polled by a timer when idle (Carousel
    /// §2: HTB's watchdog).
    TokenBucketRr {
        /// Token rate, bits per second.
        rate_bps: u64,
        /// Bucket depth, bytes.
        burst_bytes: u32,
        /// Poll period in nanoseconds while waiting for tokens (HTB-like: 10 ms).
        timer_ns: u64,
        /// Packets the shaper holds at most.
        capacity_packets: u32,
    },
    /// A drop-tail FIFO of `capacity` packets (Linux `pfifo`), no rate: the NIC drains it.
    Pfifo {
        /// Packets it holds at most.
        capacity: u32,
    },
    /// A token bucket filter (Linux `tbf`): a FIFO of `capacity` packets released at `rate_bps`.
    Tbf {
        /// Token rate, bits per second.
        rate_bps: u64,
        /// Bucket depth, bytes.
        burst_bytes: u32,
        /// Packets it holds at most.
        capacity: u32,
    },
}

impl Default for ShaperSpec {
    fn default() -> Self {
        ShaperSpec::TimingWheel {
            granularity_ns: 2_000,
            horizon_ns: 2_000_000_000,
            aggregate_bps: None,
            per_flow_bps: None,
            capacity_packets: 70_000,
        }
    }
}

/// Order in which zD's paused-flows queue resumes flows (zD §4.3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ZdDiscipline {
    /// First paused, first resumed.
    #[default]
    Fifo,
    /// The flow whose next packet has the earliest EDT first.
    EdtOrdered,
}

/// How the shaper pushes back on the sources.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackpressureMode {
    /// Completion at enqueue: sources are limited only by cwnd and the socket buffer; the shaper
    /// fills to its capacity and drops physically (Carousel §5.2, Figure 11a).
    None,
    /// Completion at release from the shaper, at most `limit` packets per flow in the shaper
    /// (Carousel §5.2, Figure 11b).
    DeferredCompletions {
        /// Packets per flow between the source and its completion.
        limit: u32,
    },
    /// Vegas-like transport, completion at enqueue (Carousel §5.2, delay-based CC).
    DelayBased,
    /// TCP Small Queues: completion at NIC transmit, at most `limit` packets per flow below the
    /// socket; a full scheduled buffer drops (zD §5.1, the TSQ baselines of Figures 9–12).
    Tsq {
        /// Packets per flow between the source and its completion.
        limit: u32,
    },
    /// zD (zD §4): probe the scheduled buffer; a full buffer pauses the flow (a virtual drop),
    /// which is resumed when a packet leaves.
    Zd {
        /// Order of the paused-flows queue.
        discipline: ZdDiscipline,
    },
}

impl Default for BackpressureMode {
    fn default() -> Self {
        BackpressureMode::DeferredCompletions {
            limit: DEFAULT_PER_FLOW_LIMIT,
        }
    }
}

impl BackpressureMode {
    /// Packets a flow may keep between the source and its completion; `u32::MAX` when the
    /// completion comes at enqueue. zD keeps two (zD §4.1).
    pub fn per_flow_limit(&self) -> u32 {
        match *self {
            BackpressureMode::None | BackpressureMode::DelayBased => u32::MAX,
            BackpressureMode::DeferredCompletions { limit } | BackpressureMode::Tsq { limit } => {
                limit
            }
            BackpressureMode::Zd { .. } => DEFAULT_PER_FLOW_LIMIT,
        }
    }
}

/// A sparse request/response flow beside the bulk flows: every `interval_ns` it sends one request
/// of `request_bytes` through the shaper (open loop, no congestion control, no backpressure: an
/// RPC client or a ping); the response returns on the unshaped reverse path, base RTT / 2 after
/// the request arrived. Its request-to-response latency is [`crate::SimReport::probe_latency`].
/// It is flow number `flows` (after the bulk flows), left out of the bulk flows' fairness.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeSpec {
    /// Bytes of one request on the wire, 68 to one segment.
    pub request_bytes: u32,
    /// Time between two requests, ns.
    pub interval_ns: u64,
}

/// One simulated run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Scenario {
    /// Seed of the per-source random generators (start times).
    pub seed: u64,
    /// Simulated duration in nanoseconds.
    pub duration_ns: u64,
    /// Time in nanoseconds before measurement starts.
    pub warmup_ns: u64,
    /// Measurement window in nanoseconds (Carousel §7.1.1: 100 ms).
    pub window_ns: u64,
    /// Number of sources (flows).
    pub flows: u32,
    /// What every source sends.
    pub source: SourceKind,
    /// Flows start uniformly at random within this span, nanoseconds.
    pub start_spread_ns: u64,
    /// Transport parameters.
    pub transport: TransportConfig,
    /// The shaper or scheduled buffer under test.
    pub shaper: ShaperSpec,
    /// The backpressure between the sources and the shaper.
    pub backpressure: BackpressureMode,
    /// NIC line rate, bits per second.
    pub line_rate_bps: u64,
    /// Base round-trip time in nanoseconds (half on the way out, half back).
    pub base_rtt_ns: u64,
    /// Mark CE on packets enqueued while the shaper holds at least this many packets (an
    /// optional DCTCP-like threshold; `None` marks nothing).
    pub ecn_threshold_packets: Option<u32>,
    /// Whether the report lists every flow's throughput.
    pub per_flow_report: bool,
    /// An optional sparse request/response flow beside the `flows` bulk flows.
    pub probe: Option<ProbeSpec>,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            seed: 1,
            duration_ns: 2_000_000_000,
            warmup_ns: 500_000_000,
            window_ns: 100_000_000,
            flows: 10,
            source: SourceKind::default(),
            start_spread_ns: 1_000_000,
            transport: TransportConfig::default(),
            shaper: ShaperSpec::default(),
            backpressure: BackpressureMode::default(),
            line_rate_bps: 1_000_000_000,
            base_rtt_ns: 100_000,
            ecn_threshold_packets: None,
            per_flow_report: false,
            probe: None,
        }
    }
}

/// A parameter the simulator cannot run with.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScenarioError {
    /// A field that must be positive is zero.
    #[error("`{0}` must be positive")]
    Zero(&'static str),
    /// A field is out of its range.
    #[error("`{field}` out of range: {why}")]
    OutOfRange {
        /// The field.
        field: &'static str,
        /// What is wrong.
        why: &'static str,
    },
}

impl Scenario {
    /// Checks every parameter; the simulator runs only validated scenarios.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        let positive = [
            ("duration_ns", self.duration_ns),
            ("window_ns", self.window_ns),
            ("flows", u64::from(self.flows)),
            ("line_rate_bps", self.line_rate_bps),
            ("transport.mtu", u64::from(self.transport.mtu)),
            (
                "transport.tso_segments",
                u64::from(self.transport.tso_segments),
            ),
            (
                "transport.initial_cwnd",
                u64::from(self.transport.initial_cwnd),
            ),
            (
                "transport.sndbuf_mtus",
                u64::from(self.transport.sndbuf_mtus),
            ),
            ("transport.rto_min_ns", self.transport.rto_min_ns),
            (
                "backpressure.limit",
                u64::from(self.backpressure.per_flow_limit()),
            ),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(ScenarioError::Zero(name));
        }
        let range = |field, why| Err(ScenarioError::OutOfRange { field, why });
        if self.warmup_ns >= self.duration_ns {
            return range("warmup_ns", "must be shorter than duration_ns");
        }
        if self.window_ns > self.duration_ns - self.warmup_ns {
            return range("window_ns", "longer than the measured span");
        }
        if self.flows > 1 << 22 {
            return range("flows", "at most 4 Mi flows");
        }
        let seg = u64::from(self.transport.mtu) * u64::from(self.transport.tso_segments);
        if seg > u64::from(MAX_SEGMENT_BYTES) {
            return range(
                "transport.tso_segments",
                "mtu * tso_segments over 65535 bytes",
            );
        }
        if let Some(p) = self.probe {
            if p.interval_ns == 0 {
                return Err(ScenarioError::Zero("probe.interval_ns"));
            }
            if !(68..=seg).contains(&u64::from(p.request_bytes)) {
                return range("probe.request_bytes", "68 bytes to one segment");
            }
        }
        if self.transport.pacing_bps == Some(0) {
            return Err(ScenarioError::Zero("transport.pacing_bps"));
        }
        if let SourceKind::Udp { rate_bps: Some(0) } = self.source {
            return Err(ScenarioError::Zero("source.udp.rate_bps"));
        }
        if let SourceKind::Tcp(CongestionControl::Vegas { alpha, beta }) = self.source {
            if alpha > beta {
                return range("source.vegas", "alpha must not exceed beta");
            }
        }
        if self.backpressure == BackpressureMode::DelayBased
            && !matches!(
                self.source,
                SourceKind::Tcp(CongestionControl::Vegas { .. })
            )
        {
            return range("backpressure", "delay_based needs a Vegas TCP source");
        }
        self.validate_shaper()
    }

    fn validate_shaper(&self) -> Result<(), ScenarioError> {
        let zero_rate = |r: Option<u64>, f| match r {
            Some(0) => Err(ScenarioError::Zero(f)),
            _ => Ok(()),
        };
        match self.shaper {
            ShaperSpec::TimingWheel {
                granularity_ns,
                horizon_ns,
                aggregate_bps,
                per_flow_bps,
                capacity_packets,
            } => {
                wheel_fields_positive(granularity_ns, horizon_ns, capacity_packets)?;
                if horizon_ns / granularity_ns > 1 << 26 {
                    return Err(ScenarioError::OutOfRange {
                        field: "shaper.horizon_ns",
                        why: "more than 64 Mi slots",
                    });
                }
                zero_rate(aggregate_bps, "shaper.aggregate_bps")?;
                zero_rate(per_flow_bps, "shaper.per_flow_bps")
            }
            ShaperSpec::Daemon {
                granularity_ns,
                horizon_ns,
                aggregate_bps,
                per_flow_bps,
                capacity_packets,
                backpressure,
                ..
            } => {
                wheel_fields_positive(granularity_ns, horizon_ns, capacity_packets)?;
                if aggregate_bps.is_none() && per_flow_bps.is_none() {
                    return Err(ScenarioError::OutOfRange {
                        field: "shaper.aggregate_bps",
                        why: "the daemon's engine shapes a class with a rate or a pacing rate",
                    });
                }
                match backpressure {
                    DaemonBackpressure::Ecn { threshold_ns: 0 } => {
                        return Err(ScenarioError::Zero("shaper.backpressure.threshold_ns"))
                    }
                    DaemonBackpressure::Drop { limit: 0 } => {
                        return Err(ScenarioError::Zero("shaper.backpressure.limit"))
                    }
                    _ => {}
                }
                zero_rate(aggregate_bps, "shaper.aggregate_bps")?;
                zero_rate(per_flow_bps, "shaper.per_flow_bps")
            }
            ShaperSpec::FqTree {
                aggregate_bps,
                per_flow_bps,
                capacity_packets,
            } => {
                if capacity_packets == 0 {
                    return Err(ScenarioError::Zero("shaper.capacity_packets"));
                }
                zero_rate(aggregate_bps, "shaper.aggregate_bps")?;
                zero_rate(per_flow_bps, "shaper.per_flow_bps")
            }
            ShaperSpec::TokenBucketRr {
                rate_bps,
                timer_ns,
                capacity_packets,
                ..
            } => {
                zero_rate(Some(rate_bps), "shaper.rate_bps")?;
                zero_rate(Some(timer_ns), "shaper.timer_ns")?;
                zero_rate(Some(u64::from(capacity_packets)), "shaper.capacity_packets")
            }
            ShaperSpec::Pfifo { capacity } => {
                zero_rate(Some(u64::from(capacity)), "shaper.capacity")
            }
            ShaperSpec::Tbf {
                rate_bps, capacity, ..
            } => {
                zero_rate(Some(rate_bps), "shaper.rate_bps")?;
                zero_rate(Some(u64::from(capacity)), "shaper.capacity")
            }
        }
    }

    /// Bytes of one shaper packet: `mtu * tso_segments`.
    pub fn segment_bytes(&self) -> u32 {
        self.transport.mtu * self.transport.tso_segments
    }

    /// The rate the shaper should achieve: its configured aggregate rate, capped by the line rate;
    /// the line rate when it has none.
    pub fn target_rate(&self) -> Rate {
        let shaped = match self.shaper {
            ShaperSpec::TimingWheel { aggregate_bps, .. }
            | ShaperSpec::Daemon { aggregate_bps, .. }
            | ShaperSpec::FqTree { aggregate_bps, .. } => aggregate_bps,
            ShaperSpec::TokenBucketRr { rate_bps, .. } | ShaperSpec::Tbf { rate_bps, .. } => {
                Some(rate_bps)
            }
            ShaperSpec::Pfifo { .. } => None,
        };
        Rate::from_bps(shaped.unwrap_or(u64::MAX).min(self.line_rate_bps))
    }
}

/// The wheel's slot size, horizon and capacity of a timing-wheel shaper spec (the simulator's
/// own or the daemon's engine) must be positive.
fn wheel_fields_positive(
    granularity_ns: u64,
    horizon_ns: u64,
    capacity_packets: u32,
) -> Result<(), ScenarioError> {
    let fields = [
        ("shaper.granularity_ns", granularity_ns),
        ("shaper.horizon_ns", horizon_ns),
        ("shaper.capacity_packets", u64::from(capacity_packets)),
    ];
    match fields.iter().find(|(_, v)| *v == 0) {
        Some((name, _)) => Err(ScenarioError::Zero(name)),
        None => Ok(()),
    }
}
