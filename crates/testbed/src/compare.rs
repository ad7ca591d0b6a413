//! `metronome compare`: Metronome against the kernel's HTB and TBF on the same path with the
//! same traffic (the kernel grid), and the modes beside it: [`attach`], [`cni`], [`classes`],
//! [`hierarchy`], [`packet_rate`], [`churn`], [`cluster`], [`link_sharing`].
//!
//! One [`Topology::bump_in_the_wire`] serves every run; for each target rate and flow count the
//! shapers ([`Shaper`]) take turns on the shaper namespace: the daemon with one class
//! ([`metronome_config`], in the fair mode [`metronome_fair_config`]), HTB and TBF on a bridge
//! (`crate::netns::QdiscSpec`), and for the ceiling ([`CompareOptions::ceiling`]) the plain
//! forwarder ([`crate::forwarder`]) and the daemon passing everything ([`passthrough_config`]).
//! A run is kernel TCP bulk flows plus a TCP ping probe in the same shaped queue, bounded by
//! [`TAIL`] and [`volume_cap`]; what is measured, and how, is [`measure`]'s.
//!
//! Where it departs from Carousel §7.1.1: rates are bits on the wire at the receiver's veth,
//! and the CPU is the machine's, not a thread's ([`measure`]'s module docs say why).

mod arms;
pub mod attach;
pub mod churn;
pub mod classes;
pub mod cluster;
pub mod cni;
mod error;
pub mod hierarchy;
pub mod link_sharing;
pub mod measure;
pub mod packet_rate;
mod traffic_run;

use crate::forwarder::ForwarderMode;
use crate::netns::Topology;
pub use crate::offloads::OffloadMode;
use arms::run_one;
pub(crate) use arms::started;
pub use arms::{
    endpoint_rps_mask, metronome_config, metronome_fair_config, passthrough_config, FAIR_GSO_SLOTS,
};
pub use error::CompareError;
use metronome_daemon::ops::config::Config;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::time::Duration;
pub use traffic_run::answered;
pub(crate) use traffic_run::{measure_run, TrafficPath};

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
pub(crate) const START_BYTES: u64 = 64 << 10;
/// Per-connection allowance of [`START_BYTES`], bytes.
pub(crate) const START_BYTES_PER_FLOW: u64 = 200;
/// How often the start of the traffic is polled for.
pub(crate) const START_POLL: Duration = Duration::from_millis(5);
/// How long the bulk bytes may take to appear: the trafficgen's 5 s setup timeout plus 1 s.
pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(6);
/// First destination port; run `i` uses ports `BASE_PORT + 2i` (bulk) and `+ 1` (probe), so no
/// run meets a previous run's connections.
const BASE_PORT: u16 = 20_000;

/// A shaper under test, of any mode: the daemon in one of its configurations, a kernel qdisc
/// set-up, the CNI bandwidth plugin or the plain forwarder. Each mode runs the ones of its list
/// ([`Shaper::ALL`], [`Shaper::WORKLOADS`], [`Shaper::CLASSES`], [`Shaper::PODS`],
/// [`Shaper::LINK`]); its name is the same in every report and JSON document.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Shaper {
    /// The Metronome daemon (in `link-sharing`: its `[link]` with MQ-ECN marking).
    Metronome,
    /// The Metronome daemon, its class in the fair mode (`fair = true`).
    MetronomeFair,
    /// The daemon's `[link]` with per-queue standard marking (`link-sharing`).
    MetronomePerQueue,
    /// `metronome-cni`: two classes per pod on the node's daemon (`cni`).
    MetronomeCni,
    /// Kernel HTB (one class; in `link-sharing` a leaf per class).
    Htb,
    /// Kernel HTB, a leaf per class or workload, u32 filters (`classes`: hashed on the
    /// destination; `attach`: on the workloads' source addresses; `hierarchy`: a parent over
    /// leaves filtered on the destination port).
    HtbU32,
    /// Kernel TBF.
    Tbf,
    /// The `bandwidth` plugin's IFB with a TBF per workload (`attach`).
    IfbTbf,
    /// The containernetworking `bandwidth` plugin (`cni`).
    Bandwidth,
    /// The daemon with no class: every frame passes unshaped (`--ceiling` only).
    Passthrough,
    /// The `recvmmsg`/`sendmmsg` forwarder of [`crate::forwarder`] (`--ceiling` only).
    Forwarder,
}

impl Shaper {
    /// The four shapers of the kernel grid, in report order.
    pub const ALL: [Shaper; 4] = [
        Shaper::Metronome,
        Shaper::MetronomeFair,
        Shaper::Htb,
        Shaper::Tbf,
    ];
    /// The shapers of `attach`'s workload part, in report order.
    pub const WORKLOADS: [Shaper; 3] = [Shaper::Metronome, Shaper::HtbU32, Shaper::IfbTbf];
    /// The shapers of `classes`, in report order.
    pub const CLASSES: [Shaper; 2] = [Shaper::Metronome, Shaper::HtbU32];
    /// The shapers of `cni`, in report order.
    pub const PODS: [Shaper; 2] = [Shaper::MetronomeCni, Shaper::Bandwidth];
    /// The shapers of `link-sharing`, in report order.
    pub const LINK: [Shaper; 3] = [Shaper::Metronome, Shaper::MetronomePerQueue, Shaper::Htb];
    /// The shapers of `hierarchy`, in report order.
    pub const TREE: [Shaper; 2] = [Shaper::Metronome, Shaper::HtbU32];

    /// The name used in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Shaper::Metronome => "metronome",
            Shaper::MetronomeFair => "metronome-fair",
            Shaper::MetronomePerQueue => "metronome-per-queue",
            Shaper::MetronomeCni => "metronome-cni",
            Shaper::Htb => "htb",
            Shaper::HtbU32 => "htb-u32",
            Shaper::Tbf => "tbf",
            Shaper::IfbTbf => "ifb-tbf",
            Shaper::Bandwidth => "bandwidth",
            Shaper::Passthrough => "passthrough",
            Shaper::Forwarder => "forwarder",
        }
    }

    /// Whether the Metronome daemon runs this shaper in the kernel grid (its thread's CPU is
    /// reported).
    pub fn is_daemon(self) -> bool {
        matches!(
            self,
            Shaper::Metronome | Shaper::MetronomeFair | Shaper::Passthrough
        )
    }

    /// Why this shaper cannot run in `mode` (a shaper of another mode's list).
    pub fn not_in(self, mode: &str) -> String {
        format!("{} is not a shaper of {mode}", self.name())
    }

    /// The marking of the daemon's `[link]` this shaper runs (`link-sharing`); `None` for the
    /// kernel's.
    pub fn link_marking(self) -> Option<link_sharing::Marking> {
        match self {
            Shaper::Metronome => Some(link_sharing::Marking::MqEcn),
            Shaper::MetronomePerQueue => Some(link_sharing::Marking::PerQueue),
            _ => None,
        }
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
    /// The idle loop's arrival slack instead of the default.
    pub arrival_slack: Option<metronome_core::Duration>,
}

impl DaemonLoop {
    /// Sets `config`'s loop options to this mode.
    pub fn configure(&self, config: &mut Config) {
        config.daemon.busy_poll = self.busy_poll;
        if let Some(slack) = self.timer_slack {
            config.daemon.timer_slack = slack;
        }
        if let Some(slack) = self.arrival_slack {
            config.daemon.arrival_slack = slack;
        }
    }

    /// The mode as lines of a configuration's `[daemon]` section (nothing for the defaults).
    pub fn toml_lines(&self) -> String {
        let mut lines = String::new();
        if self.busy_poll {
            lines += "busy_poll = true\n";
        }
        for (key, slack) in self.slacks() {
            lines += &format!("{key} = \"{}ns\"\n", slack.as_nanos());
        }
        lines
    }

    /// The slacks set, by their `[daemon]` key.
    fn slacks(&self) -> impl Iterator<Item = (&'static str, metronome_core::Duration)> {
        [
            ("timer_slack", self.timer_slack),
            ("arrival_slack", self.arrival_slack),
        ]
        .into_iter()
        .filter_map(|(key, slack)| Some((key, slack?)))
    }

    /// The mode in words, `None` for the defaults.
    pub fn describe(&self) -> Option<String> {
        let mut parts = Vec::new();
        if self.busy_poll {
            parts.push("busy_poll = true".to_owned());
        }
        for (key, slack) in self.slacks() {
            parts.push(format!("{key} = {} us", slack.as_nanos() / 1_000));
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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
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
    /// [`Row::cpu_pct`] split into user, system and softirq time, and per frame and KiB
    /// delivered ([`measure::CpuAccount`]); `None` when nothing was achieved. Missing in
    /// documents of earlier runs, read as `None`.
    #[serde(default)]
    pub cpu_account: Option<measure::CpuAccount>,
    /// What the shaper held and lost and what the senders resent ([`measure::QueueAccount`]):
    /// the attach comparison's host part only; `None` elsewhere and in documents of earlier
    /// runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<measure::QueueAccount>,
}

/// The text reports' words for `account`: `(user U, system S, softirq Q; N ns/frame)`, empty
/// without one.
pub fn format_cpu_account(account: Option<&measure::CpuAccount>) -> String {
    account.map_or_else(String::new, |a| {
        format!(
            " (user {:.1}, system {:.1}, softirq {:.1}; {:.0} ns/frame)",
            a.user_pct, a.system_pct, a.softirq_pct, a.ns_per_frame
        )
    })
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
                     {:>6.2} %, RTT p50 {:>6} p99 {:>6} us, jain {}, machine cpu {:>6.1} %/Gbit/s{}{}",
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
                    format_cpu_account(r.cpu_account.as_ref()),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trafficgen::ProbeReport;

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
