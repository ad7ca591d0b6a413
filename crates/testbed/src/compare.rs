//! `metronome compare`: Metronome against the kernel's HTB and TBF on the same path with the same
//! traffic.
//!
//! One [`Topology::bump_in_the_wire`] serves every run. For each target rate and flow count, the
//! shapers take turns on the shaper namespace:
//!
//! * **metronome**: the daemon's loop ([`metronome_daemon::ops::service::run_with`]) on AF_PACKET
//!   ports on `in0`/`out0`, with a one-class configuration ([`metronome_config`]): all TCP to the
//!   receiver limited to the target as an aggregate, the default burst (one frame), `ecn`
//!   backpressure at 1 ms of queued delay (the sender negotiates ECN, as in the demo), and a hard
//!   limit: a 250 ms horizon with `horizon_policy = "reject"` (Carousel §5.1.2: dropping beyond
//!   the horizon suits a hard rate limit; clamping lets a full wheel overshoot, which 256 flows
//!   that ignore ECN — the host's default BBR — did, by 7 % at 100 Mbit/s);
//! * **metronome-fair**: the same daemon and class with `fair = true` ([`metronome_fair_config`]):
//!   the aggregate still decides when the class sends, a per-class flow scheduler decides which
//!   flow's packet leaves, new and sparse flows first, so the probe does not wait behind the bulk
//!   (and a sparse packet that finds the class holding for the piece it has just sent leaves at
//!   once, charged to the class's rate);
//!   with [`FAIR_GSO_SLOTS`] super-frame slots (queued super-frames wait for their flow's turn);
//! * **htb**: a Linux bridge joins `in0` and `out0` and `out0` gets one HTB class, rate = ceil =
//!   target, the `tc` default burst ([`QdiscSpec::Htb`]);
//! * **tbf**: the same bridge with a TBF whose bucket and queue [`QdiscSpec::tbf`] picks.
//!
//! `--ceiling` ([`CompareOptions::ceiling`]) measures the daemon's throughput ceiling instead: one
//! TCP flow at an unreachable target ([`CEILING_TARGET_BPS`]) through, in turn, the
//! `recvmmsg`/`sendmmsg` forwarder ([`crate::forwarder`]; with the host's offloads in its
//! `vnet_hdr` mode, which forwards super-frames with their virtio-net header, with offloads off
//! in its plain mode), the daemon with no class ([`passthrough_config`]) and the daemon shaping
//! at the target, three rounds.
//!
//! The daemon runs its single loop, or [`CompareOptions::daemon_cores`] silos
//! (`--daemon-cores`). With [`CompareOptions::isolate_daemon`] (`--isolate-daemon`) the
//! daemon's loop is pinned to CPU 0 and the end hosts' veth receive is steered to the other CPUs
//! for every shaper: a veth transmit otherwise runs the receiving end host's TCP in the
//! transmitting thread, so the daemon's thread would pay for both end hosts' stacks, which no
//! bump in the wire between separate hosts does.
//!
//! [`CompareOptions::daemon_loop`] (`--busy-poll`, `--timer-slack`) sets how the daemon rows'
//! loop waits for work ([`DaemonLoop`]); the defaults are the configuration's.
//!
//! `--link-sharing` ([`link_sharing`]) shares one link among weighted and priority classes
//! through the daemon's `[link]` and through kernel HTB instead.
//!
//! `--classes` ([`classes`]) holds thousands of classes, each to its own rate, through
//! `metronome run` and through kernel HTB with hashed u32 filters, measured class by class at the
//! receiver; `--packet-rate` ([`packet_rate`]) counts small frames per second through
//! `metronome run` with many classes against one.
//!
//! Offloads ([`CompareOptions::offloads`], [`OffloadMode`]): by default the veths keep the
//! host's offloads, so the sender's TCP hands the shapers GSO super-frames, as on the hosts
//! Metronome shapes; [`OffloadMode::Off`] gives one-MTU frames with offloads off on all four
//! veths. The mode is in every report.
//!
//! The traffic ([`crate::trafficgen`]): `flows` kernel TCP connections from the sender to one
//! port of the receiver plus the RTT probe (a TCP ping every 10 ms) to the next port; the probe
//! is TCP to the receiver too, so it waits in the same shaped queue as the bulk flows under all
//! three shapers. Each run is bounded in time (warm-up + measurement + [`TAIL`]) and volume (each
//! connection stops after the target's whole volume for the run, [`volume_cap`]).
//!
//! Measured per run (see [`measure`]): after [`CompareOptions::warmup`] counted from the first
//! bulk bytes at the receiver, `rcv0`'s bytes on the wire ([`measure::wire_bytes`]: every
//! segment's headers counted, also when the veth received a super-frame) in 100 ms windows for
//! [`CompareOptions::measure`]; the achieved rate is the windows' mean (bits on the wire,
//! Ethernet header included), the deviation their mean absolute deviation from the target
//! (Carousel §7.1.1), the p99 RTT of a probe connection opened when the windows start (so the
//! warm-up's slow-start queue is not in it; `None` when no ping was answered), and `cpu_pct`: the
//! **whole machine's** kernel time (system, irq, softirq) plus this process's user time over the
//! windows ([`MachineCpu`]), in percent of one CPU, per Gbit/s achieved. The kernel shapers work in
//! softirq context that no thread can be charged for, so only a machine-wide figure compares the
//! three; it includes the traffic generator's own TCP work, the same for all shapers, and leaves
//! out the user time of unrelated processes. For the daemon (metronome and pass-through runs) the
//! daemon thread's own CPU per Gbit/s is reported besides ([`Row::daemon_cpu_pct`], from that
//! thread's `schedstat`: the loop's user and kernel time, its `recvmmsg`/`sendmmsg` included, and
//! nothing else). The bulk connections' fairness is [`Row::jain_bulk`]: Jain's index of the bytes
//! each bulk connection delivered to the receiver over its whole run ([`crate::stats::jain_index`]).

pub mod attach;
pub mod churn;
pub mod classes;
pub mod cluster;
pub mod cni;
pub mod link_sharing;
pub mod measure;
pub mod packet_rate;

use crate::forwarder::ForwarderMode;
use crate::netns::{InterfaceCounters, QdiscSpec, TopoError, Topology};
pub use crate::offloads::OffloadMode;
use crate::stats::{jain_index, mean, mean_abs_deviation_pct};
use crate::trafficgen::sleep_until;
use crate::trafficgen::{self, FlowGroup, ProbeReport, TrafficError, TrafficPlan, TrafficReport};
use measure::{cpu_pct_per_gbit, MachineCpu};
use metronome_daemon::driver::run::Control;
use metronome_daemon::ops::config::Config;
use metronome_daemon::ops::metrics::Metrics;
use metronome_daemon::ops::service::run_with;
use metronome_io::ThreadCpu;
use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Prefix of the comparison's namespaces.
pub const NS_PREFIX: &str = "mtr-cmp";
/// Target rates of the full comparison, bits/s: 100 Mbit/s to 10 Gbit/s.
pub const FULL_TARGETS_BPS: [u64; 6] = [
    100_000_000,
    500_000_000,
    1_000_000_000,
    2_000_000_000,
    5_000_000_000,
    10_000_000_000,
];
/// Target rates of `--quick`, bits/s: 100 Mbit/s, 1 Gbit/s and 10 Gbit/s.
pub const QUICK_TARGETS_BPS: [u64; 3] = [100_000_000, 1_000_000_000, 10_000_000_000];
/// The unreachable target of `--ceiling`: 40 Gbit/s, ten times what one core forwards on veth.
pub const CEILING_TARGET_BPS: u64 = 40_000_000_000;
/// Flow counts of the full comparison: one flow, a few, many.
pub const FULL_FLOWS: [usize; 3] = [1, 16, 256];
/// Traffic kept running after the last window, so no flow stops inside it.
pub const TAIL: Duration = Duration::from_millis(300);
/// Bytes at the receiver, beyond the handshakes, that mark the start of the bulk traffic: 64 KiB
/// plus 200 bytes per connection (a SYN and an ACK, 74 + 66 bytes on the wire, rounded up).
const START_BYTES: u64 = 64 << 10;
/// Per-connection allowance of [`START_BYTES`], bytes.
const START_BYTES_PER_FLOW: u64 = 200;
/// How often the start of the traffic is polled for.
const START_POLL: Duration = Duration::from_millis(5);
/// How long the bulk bytes may take to appear: the trafficgen's 5 s setup timeout plus 1 s.
const START_TIMEOUT: Duration = Duration::from_secs(6);
/// First destination port; run `i` uses ports `BASE_PORT + 2i` (bulk) and `+ 1` (probe), so no
/// run meets a previous run's connections.
const BASE_PORT: u16 = 20_000;

/// One of the compared shapers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Shaper {
    /// The Metronome daemon.
    Metronome,
    /// The Metronome daemon, its class in the fair mode (`fair = true`).
    #[serde(rename = "metronome-fair")]
    MetronomeFair,
    /// Kernel HTB, one class.
    Htb,
    /// Kernel TBF.
    Tbf,
    /// The daemon with no class: every frame passes unshaped (`--ceiling` only).
    Passthrough,
    /// The `recvmmsg`/`sendmmsg` forwarder of [`crate::forwarder`] (`--ceiling` only).
    Forwarder,
}

impl Shaper {
    /// The four shapers of a comparison, in report order.
    pub const ALL: [Shaper; 4] = [
        Shaper::Metronome,
        Shaper::MetronomeFair,
        Shaper::Htb,
        Shaper::Tbf,
    ];

    /// The name used in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Shaper::Metronome => "metronome",
            Shaper::MetronomeFair => "metronome-fair",
            Shaper::Htb => "htb",
            Shaper::Tbf => "tbf",
            Shaper::Passthrough => "passthrough",
            Shaper::Forwarder => "forwarder",
        }
    }

    /// Whether the Metronome daemon runs this shaper (its thread's CPU is reported).
    pub fn is_daemon(self) -> bool {
        matches!(
            self,
            Shaper::Metronome | Shaper::MetronomeFair | Shaper::Passthrough
        )
    }
}

/// What to compare.
#[derive(Clone, Debug, PartialEq)]
pub struct CompareOptions {
    /// Target rates, bits/s.
    pub targets_bps: Vec<u64>,
    /// Flow counts.
    pub flows: Vec<usize>,
    /// The shapers, run in this order for each (target, flows).
    pub shapers: Vec<Shaper>,
    /// Skipped after the bulk traffic starts (slow start, the shaper's first queue).
    pub warmup: Duration,
    /// Measured after the warm-up, in 100 ms windows.
    pub measure: Duration,
    /// Times each (target, flows) point runs its shapers in turn (interleaved, so that a noisy
    /// moment of the shared machine does not fall on one shaper only).
    pub repetitions: usize,
    /// The veths' offloads: the host's (super-frames) or off (one-MTU frames).
    pub offloads: OffloadMode,
    /// Shaper silos of the daemon runs (`[daemon] cores`): 1 runs the single loop, more run
    /// [`metronome_daemon::driver::silo::run_silos`], one thread per silo with the flows hashed
    /// among them (their CPU is then not reported: [`Row::daemon_cpu_pct`] is `None`).
    pub daemon_cores: usize,
    /// Give the daemon a core of its own, as a bump in the wire between separate hosts has:
    /// its loop pinned to CPU 0, the end hosts' veth receive steered to the other CPUs
    /// ([`endpoint_rps_mask`]), for every shaper of the run. Without it a veth transmit runs
    /// the receiving end host's TCP in the transmitting thread, the daemon's.
    pub isolate_daemon: bool,
    /// How the daemon rows' loop waits for work: the configuration's defaults unless set.
    pub daemon_loop: DaemonLoop,
}

/// How the daemon's loop waits for work in the daemon rows (`--busy-poll`, `--timer-slack`):
/// `[daemon] busy_poll` and `[daemon] timer_slack` (docs/config.md), the defaults (sleep in
/// `ppoll`, 200 µs slack) unless set. The mode is named in every report that changes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DaemonLoop {
    /// Spin instead of sleeping when idle (Carousel's busy-polling mode: one core at 100 %).
    pub busy_poll: bool,
    /// The idle loop's timer slack instead of the default.
    pub timer_slack: Option<metronome_core::Duration>,
}

impl DaemonLoop {
    /// Sets `config`'s loop options to this mode.
    pub fn configure(&self, config: &mut Config) {
        config.daemon.busy_poll = self.busy_poll;
        if let Some(slack) = self.timer_slack {
            config.daemon.timer_slack = slack;
        }
    }

    /// The mode in words, `None` for the defaults.
    pub fn describe(&self) -> Option<String> {
        let mut parts = Vec::new();
        if self.busy_poll {
            parts.push("busy_poll = true".to_owned());
        }
        if let Some(slack) = self.timer_slack {
            parts.push(format!("timer_slack = {} us", slack.as_nanos() / 1_000));
        }
        (!parts.is_empty()).then(|| parts.join(", "))
    }
}

impl CompareOptions {
    /// The full comparison: 6 rates × 3 flow counts × 4 shapers, 1 s warm-up, 3 s measured, with
    /// the host's offloads.
    pub fn full() -> Self {
        CompareOptions {
            targets_bps: FULL_TARGETS_BPS.to_vec(),
            flows: FULL_FLOWS.to_vec(),
            shapers: Shaper::ALL.to_vec(),
            warmup: Duration::from_secs(1),
            measure: Duration::from_secs(3),
            repetitions: 1,
            offloads: OffloadMode::Host,
            daemon_cores: 1,
            isolate_daemon: false,
            daemon_loop: DaemonLoop::default(),
        }
    }

    /// `--ceiling`: throughput at an unreachable target ([`CEILING_TARGET_BPS`]) of one TCP
    /// flow through the forwarder, the daemon passing everything and the daemon shaping at the
    /// target, three times in turn, with the host's offloads.
    pub fn ceiling() -> Self {
        CompareOptions {
            targets_bps: vec![CEILING_TARGET_BPS],
            flows: vec![1],
            shapers: vec![Shaper::Forwarder, Shaper::Passthrough, Shaper::Metronome],
            repetitions: 3,
            ..CompareOptions::full()
        }
    }

    /// `--quick`: [`QUICK_TARGETS_BPS`] (100 Mbit/s, 1 and 10 Gbit/s) with 16 flows: 12 runs of
    /// 4.3 s, about a minute with the set-up.
    pub fn quick() -> Self {
        CompareOptions {
            targets_bps: QUICK_TARGETS_BPS.to_vec(),
            flows: vec![16],
            ..CompareOptions::full()
        }
    }

    /// The forwarder's mode for these offloads: `vnet_hdr` with the host's, plain with them off.
    pub fn forwarder_mode(&self) -> ForwarderMode {
        match self.offloads {
            OffloadMode::Host => ForwarderMode::VnetHdr,
            OffloadMode::Off => ForwarderMode::Plain,
        }
    }
}

/// One row of the report: exactly the fields of a row of `--json`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Row {
    /// Which shaper.
    pub shaper: Shaper,
    /// Target rate, bits/s.
    pub target_bps: u64,
    /// Bulk TCP connections.
    pub flows: usize,
    /// Mean rate on the wire at the receiver over the measured windows, bits/s.
    pub achieved_bps: f64,
    /// Mean absolute deviation of the windows from the target, percent (Carousel §7.1.1).
    pub deviation_pct: f64,
    /// 99th percentile RTT of the probe, microseconds; `None` (JSON `null`) when no ping was
    /// answered.
    pub rtt_p99_us: Option<u64>,
    /// Median RTT of the probe, microseconds; `None` (JSON `null`) when no ping was answered.
    /// With the 99th percentile it tells the path's floor from the queue's tail. Missing in
    /// documents of earlier runs, read as `None`.
    #[serde(default)]
    pub rtt_p50_us: Option<u64>,
    /// Whole-machine busy CPU, percent of one CPU, per Gbit/s achieved (see the module docs).
    pub cpu_pct: f64,
    /// The daemon thread's own CPU (its `schedstat`), percent of one CPU per Gbit/s achieved;
    /// `None` for the kernel shapers, the forwarder and daemon runs of more than one silo.
    pub daemon_cpu_pct: Option<f64>,
    /// Jain's fairness index of the bytes each bulk connection delivered over the run (1 = equal
    /// shares); `None` (JSON `null`) when no bulk bytes arrived. Missing in documents of earlier
    /// runs, read as `None`.
    #[serde(default)]
    pub jain_bulk: Option<f64>,
}

/// A row and what else was seen during its run.
#[derive(Clone, Debug, PartialEq)]
pub struct RunReport {
    /// The reported row.
    pub row: Row,
    /// Rate windows measured.
    pub windows: usize,
    /// Probe pings answered.
    pub probe_samples: usize,
}

/// An RTT for the text reports: microseconds, or `no answer` when the probe got none.
pub fn format_rtt_us(rtt: Option<u64>) -> String {
    rtt.map_or_else(|| "no answer".to_owned(), |us| us.to_string())
}

/// Waits for the daemon's `thread` to open its ports and map its rings (100 ms); returns the
/// thread while its loop runs, or why the loop stopped by itself (its ports could not be
/// opened).
pub(crate) fn started(
    control: &Control,
    thread: crate::shaper::ShaperThread,
) -> Result<crate::shaper::ShaperThread, CompareError> {
    std::thread::sleep(Duration::from_millis(100));
    if control.stop.load(Ordering::Relaxed) {
        let result = thread
            .join()
            .map_err(|_| TopoError::ThreadPanicked("shaper".into()))??;
        return Err(match result {
            Err(e) => e.into(),
            Ok(_) => TopoError::Io(std::io::Error::other("the daemon stopped at once")).into(),
        });
    }
    Ok(thread)
}

/// Why a comparison or the demo failed.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// Building or using the topology failed (also: CAP_NET_ADMIN missing).
    #[error("{0}")]
    Topo(#[from] TopoError),
    /// The traffic generator failed.
    #[error("{0}")]
    Traffic(#[from] TrafficError),
    /// The daemon could not open its ports.
    #[error("{0}")]
    Port(#[from] metronome_io::PortError),
    /// An etcd cluster of the run could not be started or driven.
    #[error("{0}")]
    Etcd(#[from] crate::etcd::EtcdError),
    /// The simulator refused the scenario (the simulated `demo`).
    #[error("simulator: {0}")]
    Sim(#[from] metronome_sim::ScenarioError),
    /// The daemon refused the configuration or stopped at once (`demo --attach`).
    #[error("{0}")]
    Refused(String),
    /// No bulk traffic reached the receiver in time.
    #[error("{shaper} at {target_bps} bit/s with {flows} flows: no traffic reached the receiver within {START_TIMEOUT:?}")]
    NoTraffic {
        /// The shaper of the run.
        shaper: &'static str,
        /// Its target.
        target_bps: u64,
        /// Its flows.
        flows: usize,
    },
}

impl CompareError {
    /// Whether this is the missing CAP_NET_ADMIN (the CLI exits 2 with one line).
    pub fn is_missing_privilege(&self) -> bool {
        matches!(self, CompareError::Topo(TopoError::MissingPrivilege(_)))
    }
}

/// The daemon's configuration for a run: one class, all TCP to `receiver`, `target_bps`
/// aggregate, ECN backpressure at 1 ms, a 250 ms horizon that rejects beyond it (see the module
/// docs).
pub fn metronome_config(receiver: std::net::Ipv4Addr, target_bps: u64) -> Config {
    class_config(receiver, target_bps, "")
}

/// Large (super-frame) slots of the fair row's daemon: a fair class holds each backlogged flow's
/// queued super-frames until its turn, so 256 flows hold the default 256 slots and arriving
/// super-frames are refused. 1 024 (66 MiB): measured with `metronome compare --target
/// 100mbit,1gbit --flows 256` on a loaded 2-core machine, 256 slots gave 1.5-2.1 % below the
/// rate with 6 000-10 600 frames shed; 1 024 gave 0.6-1.2 % and 300-3 200.
pub const FAIR_GSO_SLOTS: u32 = 1024;

/// [`metronome_config`] with the class in the fair mode (`fair = true`) and
/// [`FAIR_GSO_SLOTS`] large slots.
pub fn metronome_fair_config(receiver: std::net::Ipv4Addr, target_bps: u64) -> Config {
    let mut c = class_config(receiver, target_bps, "fair = true\n");
    c.daemon.gso_slots = FAIR_GSO_SLOTS;
    c
}

/// The one-class configuration of the metronome runs, `extra` added to the class table.
fn class_config(receiver: std::net::Ipv4Addr, target_bps: u64, extra: &str) -> Config {
    let text = format!(
        "[interfaces]\ninside = \"in0\"\noutside = \"out0\"\n\n[wheel]\nhorizon = \"250ms\"\n\n[[class]]\nname = \"compare\"\n\
         match = {{ dst = \"{receiver}\", protocol = \"tcp\" }}\nrate = {target_bps}\n\
         horizon_policy = \"reject\"\n\
         backpressure = {{ mode = \"ecn\", threshold = \"1ms\" }}\n{extra}"
    );
    // Built from well-formed values; a failure would be a defect of this function, tested by
    // `the_metronome_config_is_valid`.
    Config::from_toml_str(&text, "compare.toml").expect("the compare config is valid")
}

/// The daemon's configuration for the pass-through runs of `--ceiling`: the same interfaces and
/// wheel, no class, so every frame is parsed, classified to the default and sent at once.
pub fn passthrough_config() -> Config {
    let text = "[interfaces]\ninside = \"in0\"\noutside = \"out0\"\n";
    // A constant, well-formed text; tested by `the_metronome_config_is_valid`.
    Config::from_toml_str(text, "passthrough.toml").expect("the pass-through config is valid")
}

/// Per-connection byte cap of a run: the target's whole volume over the run (a connection can
/// never need more), at least 1 MiB.
pub fn volume_cap(target_bps: u64, run: Duration) -> u64 {
    let bytes = u128::from(target_bps) * run.as_millis() / 8 / 1000;
    u64::try_from(bytes).unwrap_or(u64::MAX).max(1 << 20)
}

/// Runs the comparison: builds the topology, runs every (target, flows, shaper) and removes
/// everything. One progress line per run goes to `progress`.
pub fn run(
    options: &CompareOptions,
    progress: &mut dyn Write,
) -> Result<Vec<RunReport>, CompareError> {
    let _ = crate::netns::remove_stale(NS_PREFIX);

    let mut topo = Topology::bump_in_the_wire(NS_PREFIX)?;
    prepare(&mut topo, options)?;
    let mut reports = Vec::new();
    let mut index: u16 = 0;
    for &target in &options.targets_bps {
        for &flows in &options.flows {
            for shaper in
                (0..options.repetitions.max(1)).flat_map(|_| options.shapers.iter().copied())
            {
                let port = BASE_PORT.saturating_add(index.saturating_mul(2));
                index = index.wrapping_add(1) % 20_000;
                let report = run_one(&mut topo, options, shaper, target, flows, port)?;
                let r = &report.row;
                let _ = writeln!(
                    progress,
                    "{:<14} {:>6.0} Mbit/s {:>3} flows, offloads {}: {:>8.2} Mbit/s, deviation \
                     {:>6.2} %, RTT p50 {:>6} p99 {:>6} us, jain {}, machine cpu {:>6.1} %/Gbit/s{}",
                    shaper.name(),
                    target as f64 / 1e6,
                    flows,
                    options.offloads,
                    r.achieved_bps / 1e6,
                    r.deviation_pct,
                    format_rtt_us(report.row.rtt_p50_us),
                    format_rtt_us(r.rtt_p99_us),
                    r.jain_bulk.map_or("-".to_owned(), |j| format!("{j:.3}")),
                    r.cpu_pct,
                    r.daemon_cpu_pct
                        .map(|d| format!(", daemon thread {d:.1} %/Gbit/s"))
                        .unwrap_or_default()
                );
                reports.push(report);
            }
        }
    }
    topo.remove()?;
    Ok(reports)
}

/// The offload mode on the veths, ECN in the sender, and with
/// [`CompareOptions::isolate_daemon`] the end hosts' receive away from CPU 0.
fn prepare(topo: &mut Topology, options: &CompareOptions) -> Result<(), CompareError> {
    options.offloads.apply(topo)?;
    topo.enable_sender_ecn();
    if options.isolate_daemon {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        match endpoint_rps_mask(cpus) {
            Some(mask) => topo.steer_endpoint_receive(&mask),
            None => tracing::warn!("one CPU: the daemon cannot have a core of its own"),
        }
    }
    Ok(())
}

/// The `rps_cpus` mask of every CPU but CPU 0 on a machine of `cpus` CPUs (sysfs format:
/// hexadecimal, 32-bit words separated by commas, most significant first); `None` with fewer
/// than two CPUs.
pub fn endpoint_rps_mask(cpus: usize) -> Option<String> {
    if cpus < 2 {
        return None;
    }
    let word = |w: usize| -> u32 {
        let bits = (cpus - w * 32).min(32);
        let all = if bits == 32 {
            u32::MAX
        } else {
            (1u32 << bits) - 1
        };
        if w == 0 {
            all & !1
        } else {
            all
        }
    };
    let parts: Vec<String> = (0..cpus.div_ceil(32))
        .rev()
        .map(|w| format!("{:08x}", word(w)))
        .collect();
    Some(parts.join(","))
}

/// Pins the calling thread to CPU 0 (see [`CompareOptions::isolate_daemon`]); a failure is a
/// warning.
pub(crate) fn pin_to_cpu0() {
    let mut set = nix::sched::CpuSet::new();
    let pinned = set
        .set(0)
        .and_then(|()| nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set));
    if let Err(e) = pinned {
        tracing::warn!("could not pin the daemon to CPU 0: {e}");
    }
}

/// The shaper of one run, set up; [`ActiveShaper::stop`] tears it down.
enum ActiveShaper {
    Daemon {
        control: Control,
        thread: crate::shaper::ShaperThread,
        cpu: Option<ThreadCpu>,
        /// Silos; with more than one their reports are logged by the thread itself.
        cores: usize,
    },
    Kernel,
    Forwarder {
        stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
        thread: std::thread::JoinHandle<
            Result<Result<crate::forwarder::ForwarderReport, metronome_io::PortError>, TopoError>,
        >,
    },
}

fn start_shaper(
    topo: &mut Topology,
    shaper: Shaper,
    target: u64,
    (forwarder, offloads, cores, isolate): (ForwarderMode, OffloadMode, usize, bool),
    daemon_loop: DaemonLoop,
) -> Result<ActiveShaper, CompareError> {
    let out = topo.shaper_out.clone();
    match shaper {
        Shaper::Forwarder => {
            topo.remove_qdisc(&out)?;
            topo.unbridge_shaper()?;
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let s = stop.clone();
            let (inside, outside) = (topo.shaper_in.clone(), out.clone());
            let thread = topo
                .shaper
                .spawn(move || crate::forwarder::forward_with(&inside, &outside, forwarder, &s))?;
            std::thread::sleep(Duration::from_millis(100)); // sockets open
            Ok(ActiveShaper::Forwarder { stop, thread })
        }
        Shaper::Metronome | Shaper::MetronomeFair | Shaper::Passthrough => {
            topo.remove_qdisc(&out)?;
            topo.unbridge_shaper()?;
            let mut config = match shaper {
                Shaper::Passthrough => passthrough_config(),
                Shaper::MetronomeFair => metronome_fair_config(topo.receiver_addr, target),
                _ => metronome_config(topo.receiver_addr, target),
            };
            offloads.configure(&mut config);
            daemon_loop.configure(&mut config);
            let cores = cores.max(1);
            config.daemon.cores = cores;
            let control = Control::default();
            let (tx, rx) = std::sync::mpsc::channel();
            let c = control.clone();
            let thread = topo.shaper.spawn(move || {
                // The hook of `daemon_cpu_pct`: this thread's schedstat, read by the caller
                // (with silos this thread only coordinates: nothing to read).
                if isolate && cores == 1 {
                    // Silos pin themselves, one CPU each.
                    pin_to_cpu0();
                }
                let cpu = if cores == 1 {
                    ThreadCpu::of_current_thread().ok()
                } else {
                    None
                };
                let _ = tx.send(cpu);
                let result = if cores == 1 {
                    run_with(&config, None, &Metrics::new(), &c)
                } else {
                    let metrics = Metrics::with_silos(cores);
                    metronome_daemon::driver::silo::run_silos(&config, None, &metrics, &c).map(
                        |silos| {
                            for s in &silos {
                                metronome_daemon::ops::service::log_report(&s.report);
                            }
                            metronome_daemon::driver::run::LoopReport::default()
                        },
                    )
                };
                if result.is_err() {
                    c.stop.store(true, Ordering::Relaxed);
                }
                result
            })?;
            let cpu = rx.recv_timeout(Duration::from_secs(1)).ok().flatten();
            let thread = started(&control, thread)?;
            Ok(ActiveShaper::Daemon {
                control,
                thread,
                cpu,
                cores,
            })
        }
        Shaper::Htb | Shaper::Tbf => {
            topo.bridge_shaper()?;
            let spec = match shaper {
                Shaper::Htb => QdiscSpec::Htb {
                    rate_bps: target,
                    burst_bytes: None,
                },
                _ => QdiscSpec::tbf(target),
            };
            topo.install_qdisc(&out, &spec)?;
            Ok(ActiveShaper::Kernel)
        }
    }
}

impl ActiveShaper {
    fn stop(self, topo: &Topology) -> Result<(), CompareError> {
        match self {
            ActiveShaper::Daemon {
                control,
                thread,
                cores,
                ..
            } => {
                control.stop.store(true, Ordering::Relaxed);
                let report = thread
                    .join()
                    .map_err(|_| TopoError::ThreadPanicked("shaper".into()))???;
                if cores == 1 {
                    metronome_daemon::ops::service::log_report(&report);
                }
                Ok(())
            }
            ActiveShaper::Forwarder { stop, thread } => {
                stop.store(true, Ordering::Relaxed);
                let report = thread
                    .join()
                    .map_err(|_| TopoError::ThreadPanicked("forwarder".into()))???;
                tracing::info!(?report, "forwarder stopped");
                Ok(())
            }
            ActiveShaper::Kernel => {
                if let Ok(stats) = topo.qdisc_stats(&topo.shaper_out) {
                    tracing::debug!("{}", stats.trim());
                }
                Ok(topo.remove_qdisc(&topo.shaper_out)?)
            }
        }
    }

    fn cpu_ns(&mut self) -> Option<u64> {
        match self {
            ActiveShaper::Daemon { cpu: Some(c), .. } => c.read().ok(),
            _ => None,
        }
    }
}

/// One run: start the shaper, drive the traffic, measure, stop the shaper.
fn run_one(
    topo: &mut Topology,
    options: &CompareOptions,
    shaper: Shaper,
    target: u64,
    flows: usize,
    port: u16,
) -> Result<RunReport, CompareError> {
    let modes = (
        options.forwarder_mode(),
        options.offloads,
        options.daemon_cores,
        options.isolate_daemon,
    );
    let mut active = start_shaper(topo, shaper, target, modes, options.daemon_loop)?;
    let path = TrafficPath::of(topo);
    let timing = (options.warmup, options.measure);
    let mut cpu = || active.cpu_ns();
    let measured = measure_run(
        &path,
        timing,
        (&mut cpu, &[]),
        shaper,
        (target, flows),
        port,
    );
    let stopped = active.stop(topo);
    let report = measured?;
    stopped?;
    Ok(report)
}

/// What the measured part of a run saw.
struct Measured {
    /// Window rates on the wire, bits/s.
    rates: Vec<f64>,
    /// CPUs busy over the windows ([`MachineCpu`]).
    machine_cores: f64,
    /// The daemon thread's CPUs over the windows.
    daemon_cores: Option<f64>,
    /// The probe, run during the windows only.
    probe: ProbeReport,
}

/// Where a run's traffic goes: from `sender` to `receiver_addr` in `receiver`, measured on the
/// receiver's `receiver_if` (the bump in the wire's `snd0` -> `rcv0`, or the attach topology's
/// host -> `rcv0`, [`attach`]).
#[derive(Clone, Debug)]
pub(crate) struct TrafficPath {
    pub(crate) sender: crate::netns::Namespace,
    pub(crate) receiver: crate::netns::Namespace,
    pub(crate) receiver_if: String,
    pub(crate) receiver_addr: std::net::Ipv4Addr,
}

impl TrafficPath {
    fn of(topo: &Topology) -> Self {
        TrafficPath {
            sender: topo.sender.clone(),
            receiver: topo.receiver.clone(),
            receiver_if: topo.receiver_if.clone(),
            receiver_addr: topo.receiver_addr,
        }
    }
}

/// Drives the traffic of one run through the started shaper and measures it: `timing` is the
/// warm-up and the measured time; `daemon_cpu` reads the daemon's CPU time (ns), `None` when no
/// daemon runs, and `processes` are other processes whose user time the machine's CPU counts (a
/// daemon run as a process of its own).
pub(crate) fn measure_run(
    path: &TrafficPath,
    timing: (Duration, Duration),
    (daemon_cpu, processes): (&mut dyn FnMut() -> Option<u64>, &[u32]),
    shaper: Shaper,
    (target, flows): (u64, usize),
    port: u16,
) -> Result<RunReport, CompareError> {
    let (warmup, span) = timing;
    let duration = warmup + span + TAIL;
    let mut group = FlowGroup::tcp("bulk", port, flows);
    group.max_bytes_per_flow = volume_cap(target, duration);
    let plan = TrafficPlan::new(path.receiver_addr, vec![group], duration);
    let mut counters = path.receiver.interface_counters(&path.receiver_if)?;
    let mut machine = MachineCpu::with_processes(processes).map_err(TopoError::Io)?;
    let traffic = spawn_traffic(path, plan);

    // The bulk traffic starts after every connection is accepted: wait for its first bytes.
    let base = counters.read()?.rx_bytes;
    let threshold = START_BYTES + START_BYTES_PER_FLOW * flows as u64;
    let give_up = Instant::now() + START_TIMEOUT;
    let started = loop {
        if counters.read()?.rx_bytes.saturating_sub(base) > threshold {
            break Some(Instant::now());
        }
        if traffic.is_finished() || Instant::now() > give_up {
            break None;
        }
        std::thread::sleep(START_POLL);
    };
    let measured = match started {
        Some(t0) => Some(measure_windows(
            path,
            span,
            daemon_cpu,
            (&mut counters, &mut machine),
            t0 + warmup,
            port + 1,
        )?),
        None => None,
    };
    let bulk = traffic.join().map_err(|_| TrafficError::ThreadPanicked)??;
    let per_flow: Vec<f64> = bulk
        .groups
        .first()
        .map(|g| g.bytes_per_flow.iter().map(|&b| b as f64).collect())
        .unwrap_or_default();
    let Some(m) = measured else {
        return Err(CompareError::NoTraffic {
            shaper: shaper.name(),
            target_bps: target,
            flows,
        });
    };
    let achieved = mean(&m.rates);
    Ok(RunReport {
        row: Row {
            shaper,
            target_bps: target,
            flows,
            achieved_bps: achieved,
            deviation_pct: mean_abs_deviation_pct(&m.rates, target as f64).unwrap_or(100.0),
            rtt_p99_us: answered(&m.probe).map(|p| p.p99_us),
            rtt_p50_us: answered(&m.probe).map(|p| p.p50_us),
            cpu_pct: cpu_pct_per_gbit(m.machine_cores, achieved),
            daemon_cpu_pct: m.daemon_cores.map(|c| cpu_pct_per_gbit(c, achieved)),
            jain_bulk: jain_index(&per_flow),
        },
        windows: m.rates.len(),
        probe_samples: m.probe.samples,
    })
}

/// The probe's report if at least one ping was answered (its percentiles are then measured).
pub fn answered(probe: &ProbeReport) -> Option<&ProbeReport> {
    (probe.samples > 0).then_some(probe)
}

type TrafficThread = std::thread::JoinHandle<Result<TrafficReport, TrafficError>>;

fn spawn_traffic(path: &TrafficPath, plan: TrafficPlan) -> TrafficThread {
    let (snd, rcv) = (path.sender.clone(), path.receiver.clone());
    std::thread::spawn(move || trafficgen::run(&plan, Some(&snd), Some(&rcv)))
}

/// From `first` on: the probe (its own connection, so the warm-up's slow-start queue is not in
/// its percentiles), the rate windows, and the CPU over them.
fn measure_windows(
    path: &TrafficPath,
    span: Duration,
    daemon_cpu: &mut dyn FnMut() -> Option<u64>,
    (counters, machine): (&mut InterfaceCounters, &mut MachineCpu),
    first: Instant,
    probe_port: u16,
) -> Result<Measured, CompareError> {
    sleep_until(first);
    let probe_plan = TrafficPlan::new(path.receiver_addr, Vec::new(), span).with_probe(probe_port);
    let probe = spawn_traffic(path, probe_plan);
    let cpu0 = (machine.read().map_err(TopoError::Io)?, daemon_cpu());
    let mut sampler = measure::WindowSampler::default();
    let wire = |c: &mut InterfaceCounters| -> Result<u64, CompareError> {
        let l = c.read()?;
        Ok(measure::wire_bytes(l.rx_bytes, l.rx_packets))
    };
    sampler.push(Instant::now(), wire(counters)?);
    let n = (span.as_nanos() / measure::WINDOW.as_nanos()).max(1) as u32;
    for k in 1..=n {
        sleep_until(first + measure::WINDOW * k);
        sampler.push(Instant::now(), wire(counters)?);
    }
    let elapsed = Instant::now().saturating_duration_since(first);
    let cpu1 = (machine.read().map_err(TopoError::Io)?, daemon_cpu());
    let probe = probe.join().map_err(|_| TrafficError::ThreadPanicked)??;
    let daemon_cores = match (cpu0.1, cpu1.1) {
        (Some(a), Some(b)) if !elapsed.is_zero() => {
            Some(b.saturating_sub(a) as f64 / elapsed.as_nanos() as f64)
        }
        _ => None,
    };
    Ok(Measured {
        rates: sampler.rates(),
        machine_cores: cpu1.0.cores_since(&cpu0.0),
        daemon_cores,
        probe: probe.probe.unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_passthrough_config_has_no_class() {
        let c = passthrough_config();
        assert!(c.classes.is_empty());
        assert_eq!(c.interfaces.inside, "in0");
    }

    #[test]
    fn the_ceiling_runs_every_shaper_in_turn_with_the_hosts_offloads() {
        let o = CompareOptions::ceiling();
        assert_eq!(o.offloads, OffloadMode::Host);
        assert_eq!(o.forwarder_mode(), ForwarderMode::VnetHdr);
        assert!(o.repetitions >= 3);
        assert_eq!(o.flows, vec![1]);
        assert!(o.targets_bps.iter().all(|&t| t >= 10 * 4_000_000_000));
        for s in [Shaper::Forwarder, Shaper::Passthrough, Shaper::Metronome] {
            assert!(o.shapers.contains(&s), "{s:?}");
        }
    }

    #[test]
    fn the_metronome_config_is_valid() {
        let c = metronome_config(std::net::Ipv4Addr::new(10, 77, 3, 2), 2_000_000_000);
        assert_eq!(c.classes.len(), 1);
        assert_eq!(
            c.classes[0].policy.rate.map(|r| r.bps()),
            Some(2_000_000_000)
        );
        assert_eq!(
            (c.interfaces.inside.as_str(), c.interfaces.outside.as_str()),
            ("in0", "out0")
        );
        assert!(!c.classes[0].policy.fair);
        let fair = metronome_fair_config(std::net::Ipv4Addr::new(10, 77, 3, 2), 2_000_000_000);
        assert!(fair.classes[0].policy.fair);
        assert_eq!(fair.classes[0].policy.rate, c.classes[0].policy.rate);
        assert_eq!(
            fair.classes[0].policy.backpressure,
            c.classes[0].policy.backpressure
        );
    }

    #[test]
    fn options_cover_the_full_grid() {
        let full = CompareOptions::full();
        assert_eq!(
            full.targets_bps.len() * full.flows.len() * full.shapers.len(),
            72
        );
        for t in [
            100_000_000,
            1_000_000_000,
            2_000_000_000,
            5_000_000_000,
            10_000_000_000,
        ] {
            assert!(full.targets_bps.contains(&t), "{t}");
        }
        assert_eq!(full.offloads, OffloadMode::Host);
        assert_eq!(full.daemon_cores, 1);
        assert!(!full.isolate_daemon);
        let quick = CompareOptions::quick();
        assert_eq!(
            quick.targets_bps,
            [100_000_000, 1_000_000_000, 10_000_000_000]
        );
        assert_eq!(quick.flows, [16]);
        assert_eq!(quick.offloads, OffloadMode::Host);
        // 12 runs of warm-up + measurement + tail fit in 52 s, about a minute with the set-up.
        let runs = quick.targets_bps.len() * quick.flows.len() * quick.shapers.len();
        let per_run = quick.warmup + quick.measure + TAIL;
        assert!(per_run * runs as u32 <= Duration::from_millis(51_600));
    }

    #[test]
    fn offloads_off_forwards_with_the_plain_forwarder() {
        let o = CompareOptions {
            offloads: OffloadMode::Off,
            ..CompareOptions::ceiling()
        };
        assert_eq!(o.forwarder_mode(), ForwarderMode::Plain);
    }

    #[test]
    fn the_endpoint_mask_leaves_cpu0_to_the_daemon() {
        assert_eq!(endpoint_rps_mask(0), None);
        assert_eq!(endpoint_rps_mask(1), None);
        assert_eq!(endpoint_rps_mask(2).as_deref(), Some("00000002"));
        assert_eq!(endpoint_rps_mask(4).as_deref(), Some("0000000e"));
        assert_eq!(endpoint_rps_mask(32).as_deref(), Some("fffffffe"));
        assert_eq!(endpoint_rps_mask(33).as_deref(), Some("00000001,fffffffe"));
    }

    #[test]
    fn a_probe_without_answers_has_no_rtt() {
        let silent = ProbeReport::from_samples(Vec::new(), 12);
        assert!(answered(&silent).is_none());
        assert_eq!(
            format_rtt_us(answered(&silent).map(|p| p.p99_us)),
            "no answer"
        );
        let heard = ProbeReport::from_samples(vec![100, 300, 200], 0);
        assert_eq!(answered(&heard).map(|p| p.p99_us), Some(300));
        assert_eq!(format_rtt_us(Some(300)), "300");
    }

    #[test]
    fn volume_is_capped_at_the_runs_target_volume() {
        // 1 Gbit/s for 4.3 s is 537.5 MB.
        assert_eq!(
            volume_cap(1_000_000_000, Duration::from_millis(4300)),
            537_500_000
        );
        assert_eq!(volume_cap(1, Duration::from_secs(1)), 1 << 20);
    }
}
