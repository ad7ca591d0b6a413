//! `metronome compare attach`: the daemon attached in place to a host's uplink
//! (`[interfaces] attach`) against the kernel's qdiscs on the same uplink, on an
//! [`AttachTopology`] (a host, its bridged workloads, a receiver behind the uplink), in two
//! parts: **the host's own TCP** ([`HostRow`]: metronome, metronome-fair, HTB and TBF on the
//! uplink, measured as the kernel grid measures, `measure_run`) and **workloads**
//! ([`WorkloadRow`]: one class per workload matched by `from`, HTB with u32 source filters, the
//! `bandwidth` plugin's IFB+TBF; each workload's rate from its goodput windows,
//! [`workload_rate`]).
//!
//! The daemon is `metronome run` as a user runs it, a process of its own ([`AttachedDaemon`]);
//! a configuration it refuses, a start or a stop that fails gives the row an error, never a
//! number. Where it departs from the kernel grid: the daemon's CPU is the whole process's
//! (`/proc/PID/stat`), and the machine's CPU counts its user time too
//! (`MachineCpu::with_processes`).

mod daemon;

use super::measure;
use super::{
    endpoint_rps_mask, measure_run, volume_cap, CompareError, Row, Shaper, TrafficPath,
    FAIR_GSO_SLOTS, TAIL,
};
use crate::netns::attach::{AttachTopology, WorkloadLink};
use crate::netns::QdiscSpec;
use crate::stats::{mean, mean_abs_deviation_pct};
use crate::trafficgen::{self, FlowGroup, TrafficError, TrafficPlan, TrafficReport};
pub use daemon::{AttachedDaemon, READY_TIMEOUT, STOP_TIMEOUT};
use metronome_daemon::ops::config::Config;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

/// Prefix of the attach comparison's namespaces.
pub const NS_PREFIX: &str = "mtr-att";
/// Target rates of the host part, bits/s: 100 Mbit/s, 1 Gbit/s, 10 Gbit/s.
pub const FULL_TARGETS_BPS: [u64; 3] = [100_000_000, 1_000_000_000, 10_000_000_000];
/// Flow counts of the host part.
pub const FULL_FLOWS: [usize; 2] = [16, 256];
/// Workloads of the workload part.
pub const WORKLOADS: usize = 8;
/// TCP connections per workload.
pub const WORKLOAD_FLOWS: usize = 4;
/// Each workload's limit, bits/s: 100 Mbit/s.
pub const WORKLOAD_RATE_BPS: u64 = 100_000_000;
/// First destination port of the runs (each run takes ports above the previous run's, so no run
/// meets a previous run's connections).
const BASE_PORT: u16 = 30_000;
/// Ports are taken from [`BASE_PORT`] up to this one and then again from the start.
const LAST_PORT: u16 = 60_000;

/// What the attach comparison runs.
#[derive(Clone, Debug, PartialEq)]
pub struct AttachOptions {
    /// Target rates of the host part, bits/s.
    pub targets_bps: Vec<u64>,
    /// Flow counts of the host part.
    pub flows: Vec<usize>,
    /// Shapers of the host part ([`Shaper::Metronome`], [`Shaper::MetronomeFair`],
    /// [`Shaper::Htb`], [`Shaper::Tbf`]), run in this order for each (target, flows).
    pub host_shapers: Vec<Shaper>,
    /// Workloads of the workload part (0: no workload part).
    pub workloads: usize,
    /// TCP connections per workload.
    pub workload_flows: usize,
    /// Each workload's limit, bits/s.
    pub workload_rate_bps: u64,
    /// Shapers of the workload part, in this order.
    pub workload_shapers: Vec<Shaper>,
    /// Skipped after the bulk traffic starts.
    pub warmup: Duration,
    /// Measured after the warm-up, in 100 ms windows.
    pub measure: Duration,
    /// The daemon's loop on CPU 0, the end hosts' receive on the other CPUs (module docs).
    pub isolate_daemon: bool,
    /// How the workloads' veths join the host (a bridge, or routed).
    pub workload_link: WorkloadLink,
    /// The `metronome` binary whose `run` the daemon rows start (`metronome compare` passes its
    /// own); `None`: those rows report that there is none.
    pub daemon_binary: Option<PathBuf>,
    /// The host class's `pace_sockets` in the daemon rows (its default, `true`: the host's
    /// sockets are slowed at their source; `false`: they queue in the daemon).
    pub pace_sockets: bool,
    /// The host part's TCP congestion control (`TCP_CONGESTION` on every socket of a run);
    /// `None`: the host namespace's default.
    pub congestion: Option<String>,
    /// ECN on the senders and ECN backpressure at 1 ms in the daemon's host class (the
    /// default); `false`: neither.
    pub ecn: bool,
    /// How the daemon rows' loop waits for work (`[daemon] busy_poll`, `timer_slack`,
    /// `arrival_slack`); the defaults unless set.
    pub daemon_loop: crate::compare::DaemonLoop,
}

impl AttachOptions {
    /// The full grid: 3 rates × 2 flow counts × 4 shapers for the host, 8 workloads × 3 shapers;
    /// 1 s warm-up, 3 s measured.
    pub fn full() -> Self {
        AttachOptions {
            targets_bps: FULL_TARGETS_BPS.to_vec(),
            flows: FULL_FLOWS.to_vec(),
            host_shapers: Shaper::ALL.to_vec(),
            workloads: WORKLOADS,
            workload_flows: WORKLOAD_FLOWS,
            workload_rate_bps: WORKLOAD_RATE_BPS,
            workload_shapers: Shaper::WORKLOADS.to_vec(),
            warmup: Duration::from_secs(1),
            measure: Duration::from_secs(3),
            isolate_daemon: false,
            workload_link: WorkloadLink::Bridge,
            daemon_binary: None,
            pace_sockets: true,
            congestion: None,
            ecn: true,
            daemon_loop: crate::compare::DaemonLoop::default(),
        }
    }

    /// `--quick`: the host at 100 Mbit/s and 1 Gbit/s with 16 flows, and the 8-workload point;
    /// 1 s warm-up, 2 s measured.
    pub fn quick() -> Self {
        AttachOptions {
            targets_bps: vec![100_000_000, 1_000_000_000],
            flows: vec![16],
            measure: Duration::from_secs(2),
            ..AttachOptions::full()
        }
    }
}

/// One run of the host part: its figures, or why it has none.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum HostRow {
    /// The run was measured ([`Row`], as the bump-in-the-wire comparison reports it).
    Measured(Row),
    /// The shaper could not run (the daemon refused the configuration or stopped at once).
    Failed {
        /// The shaper.
        shaper: Shaper,
        /// Target, bits/s.
        target_bps: u64,
        /// Bulk connections.
        flows: usize,
        /// Why, in one line.
        error: String,
    },
}

impl HostRow {
    /// The row's shaper.
    pub fn shaper(&self) -> Shaper {
        match self {
            HostRow::Measured(r) => r.shaper,
            HostRow::Failed { shaper, .. } => *shaper,
        }
    }

    /// The row's (target, flows).
    pub fn point(&self) -> (u64, usize) {
        match self {
            HostRow::Measured(r) => (r.target_bps, r.flows),
            HostRow::Failed {
                target_bps, flows, ..
            } => (*target_bps, *flows),
        }
    }
}

/// One workload under one shaper of the workload part.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WorkloadRow {
    /// The shaper.
    pub shaper: Shaper,
    /// The workload's host-side veth (`hv<i>`), which names it.
    pub workload: String,
    /// Its limit, bits/s.
    pub target_bps: u64,
    /// Its TCP connections.
    pub flows: usize,
    /// Mean rate on the wire over the measured windows, bits/s; `None` with `error`.
    pub achieved_bps: Option<f64>,
    /// Mean absolute deviation of the windows from the limit, percent; `None` with `error`.
    pub deviation_pct: Option<f64>,
    /// Why the shaper could not run; `None` when measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What `metronome compare --attach` reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AttachReport {
    /// The CPU steering of the run, in words (see the module docs).
    pub steering: String,
    /// How the workloads' veths joined the host.
    pub workload_link: WorkloadLink,
    /// The daemon rows' `pace_sockets` ([`AttachOptions::pace_sockets`]); documents of earlier
    /// runs, which had no source pacing, read as `false`.
    #[serde(default)]
    pub pace_sockets: bool,
    /// The host part's congestion control ([`AttachOptions::congestion`]); `None`: the host
    /// namespace's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion: Option<String>,
    /// ECN on the senders and in the host class ([`AttachOptions::ecn`]); documents of earlier
    /// runs, which always had it, read as `true`.
    #[serde(default = "ecn_default")]
    pub ecn: bool,
    /// The daemon rows' loop mode in words ([`AttachOptions::daemon_loop`]); `None`: the
    /// defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemon_loop: Option<String>,
    /// The host part's rows.
    pub host: Vec<HostRow>,
    /// The workload part's rows.
    pub workloads: Vec<WorkloadRow>,
}

fn ecn_default() -> bool {
    true
}

/// The daemon's configuration text for the host part: attached to `uplink`, one class of all
/// TCP to `receiver` at `target_bps`, the class of the bump-in-the-wire comparison; with `fair`,
/// `fair = true` and [`FAIR_GSO_SLOTS`]; without `pace_sockets`, `pace_sockets = false`; with
/// `ecn`, ECN backpressure at 1 ms.
pub fn host_config_text(
    uplink: &str,
    receiver: std::net::Ipv4Addr,
    target_bps: u64,
    (fair, pace_sockets, ecn): (bool, bool, bool),
    daemon_loop: &crate::compare::DaemonLoop,
) -> String {
    let mut daemon = daemon_loop.toml_lines();
    let extra = if fair {
        daemon += &format!("gso_slots = {FAIR_GSO_SLOTS}\n");
        "fair = true\n"
    } else {
        ""
    };
    if !daemon.is_empty() {
        daemon = format!("[daemon]\n{daemon}\n");
    }
    let pace = if pace_sockets {
        ""
    } else {
        "pace_sockets = false\n"
    };
    let backpressure = if ecn {
        "backpressure = { mode = \"ecn\", threshold = \"1ms\" }\n"
    } else {
        ""
    };
    format!(
        "[interfaces]\nattach = [\"{uplink}\"]\n\n{daemon}[wheel]\nhorizon = \"250ms\"\n\n\
         [[class]]\nname = \"host\"\nmatch = {{ dst = \"{receiver}\", protocol = \"tcp\" }}\n\
         rate = {target_bps}\nhorizon_policy = \"reject\"\n{backpressure}{extra}{pace}"
    )
}

/// The daemon's configuration text for the workload part: attached to the topology's uplink, one
/// class `w<i>` per workload, `match = { from = "hv<i>" }`, at `rate_bps` each, with the host
/// part's horizon, horizon policy and backpressure.
pub fn workload_config_text(topo: &AttachTopology, rate_bps: u64) -> String {
    let mut text = format!(
        "[interfaces]\nattach = [\"{}\"]\n\n[wheel]\nhorizon = \"250ms\"\n",
        topo.uplink
    );
    for (i, w) in topo.workloads.iter().enumerate() {
        text += &format!(
            "\n[[class]]\nname = \"w{i}\"\nmatch = {{ from = \"{}\" }}\nrate = {rate_bps}\n\
             horizon_policy = \"reject\"\n\
             backpressure = {{ mode = \"ecn\", threshold = \"1ms\" }}\n",
            w.host_if
        );
    }
    text
}

/// Parses a configuration text as `metronome run` would, or says in one line why the daemon
/// refuses it.
pub fn daemon_config(text: &str) -> Result<Config, String> {
    Config::from_toml_str(text, "compare-attach.toml")
        .map_err(|e| format!("the daemon refused the attach configuration: {e}"))
}

/// Hands out the runs' destination ports.
struct Ports(u16);

impl Ports {
    /// `n` consecutive ports.
    fn take(&mut self, n: u16) -> u16 {
        if self.0.saturating_add(n) > LAST_PORT {
            self.0 = BASE_PORT;
        }
        let first = self.0;
        self.0 += n;
        first
    }
}

/// Runs the attach comparison: builds the topology, runs the host part and the workload part and
/// removes everything. One progress line per run (per workload in the workload part) goes to
/// `progress`.
pub fn run(
    options: &AttachOptions,
    progress: &mut dyn Write,
) -> Result<AttachReport, CompareError> {
    let _ = crate::netns::remove_stale(NS_PREFIX);
    let mut topo = AttachTopology::with_link(NS_PREFIX, options.workloads, options.workload_link)?;
    if options.ecn {
        topo.enable_sender_ecn();
    }
    let steering = steer(&topo, options.isolate_daemon);
    let _ = writeln!(progress, "steering: {steering}");
    let mut ports = Ports(BASE_PORT);
    let mut host = Vec::new();
    for &target in &options.targets_bps {
        for &flows in &options.flows {
            for &shaper in &options.host_shapers {
                let row = host_run(&mut topo, options, shaper, (target, flows), &mut ports)?;
                let _ = writeln!(progress, "{}", describe_host_row(&row));
                host.push(row);
            }
        }
    }
    let mut workloads = Vec::new();
    if options.workloads > 0 {
        for &shaper in &options.workload_shapers {
            let rows = workload_run(&mut topo, options, shaper, &mut ports)?;
            for r in &rows {
                let _ = writeln!(progress, "{}", describe_workload_row(r));
            }
            workloads.extend(rows);
        }
    }
    topo.remove()?;
    Ok(AttachReport {
        steering,
        workload_link: options.workload_link,
        pace_sockets: options.pace_sockets,
        congestion: options.congestion.clone(),
        ecn: options.ecn,
        daemon_loop: options.daemon_loop.describe(),
        host,
        workloads,
    })
}

/// Applies [`AttachOptions::isolate_daemon`]'s steering; returns it in words.
fn steer(topo: &AttachTopology, isolate: bool) -> String {
    if !isolate {
        return "none (the daemon and every receive run where the scheduler puts them)".into();
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    match endpoint_rps_mask(cpus) {
        Some(mask) => {
            let failed = topo.steer_endpoint_receive(&mask);
            let mut s = format!(
                "daemon pinned to CPU 0; receive of the receiver's veth and the workloads' \
                 eth0 steered to CPUs {mask} (rps_cpus); the host's own TCP unpinned"
            );
            if !failed.is_empty() {
                s += &format!(" ({} steering failures, see the log)", failed.len());
            }
            s
        }
        None => "none: one CPU, the daemon cannot have a core of its own".into(),
    }
}

/// One line for the progress output.
pub fn describe_host_row(row: &HostRow) -> String {
    match row {
        HostRow::Measured(r) => format!(
            "{:<14} {:>6.0} Mbit/s {:>3} flows: {:>8.2} Mbit/s, deviation {:>6.2} %, RTT p50 {:>6} \
             p99 {:>6} us, machine cpu {:>6.1} %/Gbit/s{}{}{}",
            r.shaper.name(),
            r.target_bps as f64 / 1e6,
            r.flows,
            r.achieved_bps / 1e6,
            r.deviation_pct,
            super::format_rtt_us(r.rtt_p50_us),
            super::format_rtt_us(r.rtt_p99_us),
            r.cpu_pct,
            super::format_cpu_account(r.cpu_account.as_ref()),
            r.daemon_cpu_pct
                .map(|d| format!(", daemon process {d:.1} %/Gbit/s"))
                .unwrap_or_default(),
            r.queue.map(describe_queue).unwrap_or_default()
        ),
        HostRow::Failed {
            shaper,
            target_bps,
            flows,
            error,
        } => format!(
            "{:<14} {:>6.0} Mbit/s {:>3} flows: error: {error}",
            shaper.name(),
            *target_bps as f64 / 1e6,
            flows
        ),
    }
}

/// The progress line's words for `q`.
fn describe_queue(q: measure::QueueAccount) -> String {
    let mut s = String::new();
    if let Some(n) = q.retransmitted_segments {
        s += &format!(", {n} retransmitted");
    }
    if let Some(n) = q.shaper_drops {
        s += &format!(", {n} dropped");
    }
    if let Some(h) = q.held_per_flow {
        s += &format!(", {h:.2} held per flow");
    }
    s
}

/// One line for the progress output.
pub fn describe_workload_row(row: &WorkloadRow) -> String {
    match (&row.error, row.achieved_bps, row.deviation_pct) {
        (None, Some(a), Some(d)) => format!(
            "{:<9} {:<5} {:>6.0} Mbit/s {} flows: {:>8.2} Mbit/s, deviation {:>6.2} %",
            row.shaper.name(),
            row.workload,
            row.target_bps as f64 / 1e6,
            row.flows,
            a / 1e6,
            d
        ),
        (error, _, _) => format!(
            "{:<9} {:<5} {:>6.0} Mbit/s {} flows: error: {}",
            row.shaper.name(),
            row.workload,
            row.target_bps as f64 / 1e6,
            row.flows,
            error.as_deref().unwrap_or("not measured")
        ),
    }
}

/// The traffic path of the host part: the host's own TCP to the receiver.
fn host_path(topo: &AttachTopology, congestion: Option<&str>) -> TrafficPath {
    TrafficPath {
        sender: topo.host.clone(),
        receiver: topo.receiver.clone(),
        receiver_if: topo.receiver_if.clone(),
        receiver_addr: topo.receiver_addr,
        congestion: congestion.map(str::to_owned),
    }
}

fn host_run(
    topo: &mut AttachTopology,
    options: &AttachOptions,
    shaper: Shaper,
    (target, flows): (u64, usize),
    ports: &mut Ports,
) -> Result<HostRow, CompareError> {
    let port = ports.take(2);
    let timing = (options.warmup, options.measure);
    let path = host_path(topo, options.congestion.as_deref());
    let failed = |error: String| HostRow::Failed {
        shaper,
        target_bps: target,
        flows,
        error,
    };
    match shaper {
        Shaper::Htb | Shaper::Tbf => {
            let spec = if shaper == Shaper::Htb {
                QdiscSpec::Htb {
                    rate_bps: target,
                    burst_bytes: None,
                }
            } else {
                QdiscSpec::tbf(target)
            };
            topo.install_uplink_qdisc(&spec)?;
            let retransmitted = Retransmissions::start(topo);
            let measured = measure_run(
                &path,
                timing,
                (&mut || None, &[]),
                &mut || {},
                shaper,
                (target, flows),
                port,
            );
            let stats = topo.qdisc_stats();
            if let Ok(stats) = &stats {
                tracing::debug!("{}", stats.trim());
            }
            let queue = measure::QueueAccount {
                retransmitted_segments: retransmitted.since(topo),
                shaper_drops: stats.ok().map(|s| measure::qdisc_drops(&s)),
                held_per_flow: None,
                sockets_slowed: None,
            };
            let removed = topo.remove_baselines();
            let row = with_queue(row_of(measured, failed)?, queue);
            removed?;
            Ok(row)
        }
        Shaper::Metronome | Shaper::MetronomeFair => {
            let text = host_config_text(
                &topo.uplink,
                topo.receiver_addr,
                target,
                (
                    shaper == Shaper::MetronomeFair,
                    options.pace_sockets,
                    options.ecn,
                ),
                &options.daemon_loop,
            );
            let daemon = match start_daemon(topo, options, &text)? {
                Ok(d) => d,
                Err(e) => return Ok(failed(e)),
            };
            let mut cpu = || daemon.cpu_ns();
            // The daemon is a process of its own: its user time counts in the machine's CPU.
            let pids = [daemon.pid()];
            let retransmitted = Retransmissions::start(topo);
            let drops = || {
                let m = daemon.metrics()?;
                for d in m.samples("metronome_class_drops_total") {
                    if d.value > 0.0 {
                        tracing::debug!(labels = ?d.labels, frames = d.value, "daemon drops");
                    }
                }
                Some(m.sum("metronome_class_drops_total") as u64)
            };
            let drops_before = drops();
            let mut held = Vec::new();
            let mut slowed = Vec::new();
            let mut sample = || {
                for k in 0..measure::HELD_SAMPLES {
                    if k > 0 {
                        std::thread::sleep(measure::HELD_EVERY);
                    }
                    if let Some(m) = daemon.metrics() {
                        let flows = m.sum("metronome_class_paced_flows");
                        if flows > 0.0 {
                            held.push(m.sum("metronome_class_held_per_flow_millipackets") / 1000.0);
                        }
                        slowed.push(m.sum("metronome_sockets_slowed"));
                    }
                }
            };
            let measured = measure_run(
                &path,
                timing,
                (&mut cpu, &pids),
                &mut sample,
                shaper,
                (target, flows),
                port,
            );
            let queue = measure::QueueAccount {
                retransmitted_segments: retransmitted.since(topo),
                shaper_drops: drops_before.zip(drops()).map(|(a, b)| b.saturating_sub(a)),
                held_per_flow: (!held.is_empty()).then(|| mean(&held)),
                sockets_slowed: (!slowed.is_empty()).then(|| mean(&slowed)),
            };
            let stopped = daemon.stop();
            let row = with_queue(row_of(measured, failed)?, queue);
            // A daemon that did not stop cleanly may have failed during the run: no figures.
            Ok(match stopped {
                Ok(()) => row,
                Err(e) => failed(e),
            })
        }
        other => Ok(failed(other.not_in("the attach comparison"))),
    }
}

/// The host namespace's TCP retransmissions at a run's start.
struct Retransmissions(Option<u64>);

impl Retransmissions {
    fn start(topo: &AttachTopology) -> Self {
        Retransmissions(Self::read(topo))
    }

    fn read(topo: &AttachTopology) -> Option<u64> {
        topo.host
            .run(crate::stats::tcp_retransmitted_segments)
            .ok()
            .flatten()
    }

    /// The segments retransmitted since the start.
    fn since(&self, topo: &AttachTopology) -> Option<u64> {
        Some(Self::read(topo)?.saturating_sub(self.0?))
    }
}

/// `row` with `queue`, if it was measured.
fn with_queue(mut row: HostRow, queue: measure::QueueAccount) -> HostRow {
    if let HostRow::Measured(r) = &mut row {
        r.queue = Some(queue);
    }
    row
}

/// The row of a measured run; a run whose traffic never reached the receiver is a row with that
/// error (the grid goes on), any other failure the comparison's error.
fn row_of(
    measured: Result<super::RunReport, CompareError>,
    failed: impl FnOnce(String) -> HostRow,
) -> Result<HostRow, CompareError> {
    match measured {
        Ok(report) => Ok(HostRow::Measured(report.row)),
        // A run whose traffic could not be set up (the probe's connection not accepted behind
        // a full queue, say) is that row's error; the grid goes on.
        Err(e @ (CompareError::NoTraffic { .. } | CompareError::Traffic(_))) => {
            Ok(failed(e.to_string()))
        }
        Err(e) => Err(e),
    }
}

/// Parses `text` and starts `metronome run` with it in the host namespace
/// ([`AttachOptions::daemon_binary`]); `Ok(Err(why))` when there is no binary, the daemon refuses
/// the configuration or does not come up.
fn start_daemon(
    topo: &AttachTopology,
    options: &AttachOptions,
    text: &str,
) -> Result<Result<AttachedDaemon, String>, CompareError> {
    let Some(binary) = &options.daemon_binary else {
        return Ok(Err(
            "no `metronome` binary to run the daemon with".to_owned()
        ));
    };
    let config = match daemon_config(text) {
        Ok(c) => c,
        Err(e) => return Ok(Err(e)),
    };
    AttachedDaemon::start(&topo.host, binary, (text, &config), options.isolate_daemon)
}

/// Runs every workload's flows at once, each towards its own port of the receiver, for the
/// warm-up, the measured time and [`TAIL`]; returns each workload's traffic report, in order.
pub fn run_workloads(
    topo: &AttachTopology,
    flows: usize,
    first_port: u16,
    (duration, cap): (Duration, u64),
) -> Result<Vec<TrafficReport>, CompareError> {
    let threads: Vec<_> = topo
        .workloads
        .iter()
        .enumerate()
        .map(|(i, w)| {
            // `i` < MAX_WORKLOADS (200), so the port stays below first_port + 200.
            let mut group = FlowGroup::tcp(&w.host_if, first_port + i as u16, flows);
            group.max_bytes_per_flow = cap;
            let plan = TrafficPlan::new(topo.receiver_addr, vec![group], duration);
            let (snd, rcv) = (w.ns.clone(), topo.receiver.clone());
            std::thread::spawn(move || trafficgen::run(&plan, Some(&snd), Some(&rcv)))
        })
        .collect();
    join_traffic(threads)
}

/// Waits for every traffic thread of `threads`; their reports in order, or the first error
/// (the others are still waited for, so that no thread outlives its topology).
pub(crate) fn join_traffic(
    threads: Vec<std::thread::JoinHandle<Result<TrafficReport, TrafficError>>>,
) -> Result<Vec<TrafficReport>, CompareError> {
    let mut reports = Vec::new();
    let mut first_error = None;
    for t in threads {
        match t.join().map_err(|_| TrafficError::ThreadPanicked) {
            Ok(Ok(r)) => reports.push(r),
            Ok(Err(e)) | Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e.into()),
        None => Ok(reports),
    }
}

/// A workload's rate on the wire and its deviation from `target_bps` (percent) over the windows
/// of `report`'s first group from `warmup` on, `measure` long: the goodput windows scaled to full
/// segments on the wire ([`measure::WIRE_PER_PAYLOAD`]). `None` when no window falls in it.
pub fn workload_rate(
    report: &TrafficReport,
    (warmup, span): (Duration, Duration),
    target_bps: u64,
) -> Option<(f64, f64)> {
    let windows = wire_windows(report, (warmup, span))?;
    let deviation = mean_abs_deviation_pct(&windows, target_bps as f64)?;
    Some((mean(&windows), deviation))
}

/// The goodput windows of `report`'s first group from `warmup` on, `span` long, scaled to full
/// segments on the wire ([`measure::WIRE_PER_PAYLOAD`]), bits/s; `None` when none falls in it.
pub fn wire_windows(
    report: &TrafficReport,
    (warmup, span): (Duration, Duration),
) -> Option<Vec<f64>> {
    let group = report.groups.first()?;
    let skip = (warmup.as_nanos() / measure::WINDOW.as_nanos()) as usize;
    let take = (span.as_nanos() / measure::WINDOW.as_nanos()).max(1) as usize;
    let windows: Vec<f64> = group
        .windows_bps
        .iter()
        .skip(skip)
        .take(take)
        .map(|w| w * measure::WIRE_PER_PAYLOAD)
        .collect();
    (!windows.is_empty()).then_some(windows)
}

fn workload_run(
    topo: &mut AttachTopology,
    options: &AttachOptions,
    shaper: Shaper,
    ports: &mut Ports,
) -> Result<Vec<WorkloadRow>, CompareError> {
    let rate = options.workload_rate_bps;
    let names: Vec<String> = topo.workloads.iter().map(|w| w.host_if.clone()).collect();
    // Each workload's (rate, deviation), `None` where no window was measured; or why the shaper
    // could not run.
    let rows_with = |result: Result<Vec<Option<(f64, f64)>>, String>| -> Vec<WorkloadRow> {
        names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let (figures, error) = match &result {
                    Ok(figures) => match figures.get(i).copied().flatten() {
                        Some(f) => (Some(f), None),
                        None => (None, Some("no traffic in the measured windows".to_owned())),
                    },
                    Err(e) => (None, Some(e.clone())),
                };
                WorkloadRow {
                    shaper,
                    workload: name.clone(),
                    target_bps: rate,
                    flows: options.workload_flows,
                    achieved_bps: figures.map(|f| f.0),
                    deviation_pct: figures.map(|f| f.1),
                    error,
                }
            })
            .collect()
    };
    let rates = vec![rate; topo.workloads.len()];
    let mut daemon = None;
    match shaper {
        Shaper::HtbU32 => topo.install_workload_htb(&rates)?,
        Shaper::IfbTbf => topo.install_workload_ifb_tbf(&rates)?,
        Shaper::Metronome => {
            match start_daemon(topo, options, &workload_config_text(topo, rate))? {
                Ok(d) => daemon = Some(d),
                Err(e) => return Ok(rows_with(Err(e))),
            }
        }
        other => return Ok(rows_with(Err(other.not_in("the workload part")))),
    }
    let duration = options.warmup + options.measure + TAIL;
    let first_port = ports.take(u16::try_from(topo.workloads.len()).unwrap_or(u16::MAX));
    let cap = volume_cap(rate, duration);
    let traffic = run_workloads(topo, options.workload_flows, first_port, (duration, cap));
    if let Ok(stats) = topo.qdisc_stats() {
        tracing::debug!("{}", stats.trim());
    }
    let stopped = match daemon {
        Some(d) => d.stop(),
        None => {
            topo.remove_baselines()?;
            Ok(())
        }
    };
    let reports = traffic?;
    if let Err(e) = stopped {
        // A daemon that did not stop cleanly may have failed during the run: no figures.
        return Ok(rows_with(Err(e)));
    }
    let timing = (options.warmup, options.measure);
    let figures: Vec<Option<(f64, f64)>> = reports
        .iter()
        .map(|r| workload_rate(r, timing, rate))
        .collect();
    Ok(rows_with(Ok(figures)))
}

#[cfg(test)]
mod tests;
