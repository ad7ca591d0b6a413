//! `metronome compare --cni`: pods limited through a chained CNI plugin, `metronome-cni` (its
//! classes on the node's `metronome run`) against the containernetworking `bandwidth` plugin
//! (an IFB with a TBF for egress, a TBF on the host veth for ingress), on one [`CniTopology`]
//! with the same conflist around them (`bridge` + `host-local`) and the same traffic.
//!
//! What is run for each rate and shaper, and measured, is [`run`]'s; a shaper that cannot run
//! gives its rows an error, never a number.

pub mod node;
pub mod traffic;

use crate::compare::Shaper;
use crate::compare::{volume_cap, CompareError, TAIL};
use crate::netns::cni::{Bandwidth, CniRuntime, CniTopology, RuntimeConfig};
use crate::netns::QdiscSpec;
use node::{runtime_for, Leftovers, NodeDaemon};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;
pub use traffic::Direction;
use traffic::{fair_probe, pod_rate, run_pods, PROBE_BULK_FLOWS};

/// Prefix of the comparison's namespaces.
pub const NS_PREFIX: &str = "mtr-cni";
/// Pods of the full comparison.
pub const PODS: usize = 8;
/// Rates of the full comparison, bits/s: 100 Mbit/s and 1 Gbit/s.
pub const RATES_BPS: [u64; 2] = [100_000_000, 1_000_000_000];
/// TCP connections per pod and direction.
pub const FLOWS: usize = 4;
/// ADD/DEL cycles of the cycle check: 100.
pub const CYCLES: usize = 100;
/// First destination port (each run takes the ports above the previous run's).
const BASE_PORT: u16 = 31_000;
/// Ports are taken up to this one and then again from [`BASE_PORT`].
const LAST_PORT: u16 = 60_000;

/// What the comparison runs.
#[derive(Clone, Debug, PartialEq)]
pub struct CniOptions {
    /// Pods.
    pub pods: usize,
    /// Rates, bits/s (every pod at the rate, both ways).
    pub rates_bps: Vec<u64>,
    /// TCP connections per pod and direction.
    pub flows: usize,
    /// Shapers, in this order.
    pub shapers: Vec<Shaper>,
    /// Skipped after the traffic starts.
    pub warmup: Duration,
    /// Measured after the warm-up, in 100 ms windows.
    pub measure: Duration,
    /// ADD/DEL cycles of the cycle check (0: none).
    pub cycles: usize,
    /// The `metronome` binary whose `run` is the node's daemon (`None`: the `metronome-cni`
    /// rows say there is none).
    pub daemon_binary: Option<PathBuf>,
    /// The `metronome-cni` plugin binary (`None`: likewise).
    pub plugin_binary: Option<PathBuf>,
}

impl CniOptions {
    /// The full comparison: [`PODS`] pods at each of [`RATES_BPS`], [`FLOWS`] connections,
    /// both shapers, 1 s warm-up, 3 s measured, [`CYCLES`] cycles.
    pub fn full() -> Self {
        CniOptions {
            pods: PODS,
            rates_bps: RATES_BPS.to_vec(),
            flows: FLOWS,
            shapers: Shaper::PODS.to_vec(),
            warmup: Duration::from_secs(1),
            measure: Duration::from_secs(3),
            cycles: CYCLES,
            daemon_binary: None,
            plugin_binary: None,
        }
    }

    /// `--quick`: 100 Mbit/s only, 2 s measured, 20 cycles.
    pub fn quick() -> Self {
        CniOptions {
            rates_bps: vec![100_000_000],
            measure: Duration::from_secs(2),
            cycles: 20,
            ..CniOptions::full()
        }
    }
}

/// One pod, one direction, one shaper and rate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PodRow {
    /// The shaper.
    pub shaper: Shaper,
    /// The pod's limit, bits/s.
    pub target_bps: u64,
    /// The direction.
    pub direction: Direction,
    /// The pod (its namespace's index, `p<i>`).
    pub pod: String,
    /// TCP connections.
    pub flows: usize,
    /// The windows' median on the wire, bits/s; `None` with `error`.
    pub achieved_bps: Option<f64>,
    /// Their mean, bits/s; `None` with `error`.
    pub mean_bps: Option<f64>,
    /// Their mean absolute deviation from the limit, percent; `None` with `error`.
    pub deviation_pct: Option<f64>,
    /// Why there are no figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The fair probe under one shaper and rate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProbeRow {
    /// The shaper.
    pub shaper: Shaper,
    /// The pod's egress limit, bits/s.
    pub target_bps: u64,
    /// The pod's bulk connections besides the probe.
    pub bulk_flows: usize,
    /// RTT p50, microseconds; `None`: no answer, or `error`.
    pub rtt_p50_us: Option<u64>,
    /// RTT p99, microseconds; `None` likewise.
    pub rtt_p99_us: Option<u64>,
    /// Why there are no figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The cycle check of one shaper.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CycleRow {
    /// The shaper.
    pub shaper: Shaper,
    /// Cycles run (ADD then DEL of a new pod).
    pub cycles: usize,
    /// Operations (ADD or DEL) that failed.
    pub failed: usize,
    /// What was left, one description each ([`Leftovers::since`]).
    pub leftovers: Vec<String>,
    /// Why the check could not run (or the first failed operation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What `metronome compare --cni` reports.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CniReport {
    /// Per pod, direction, shaper and rate.
    pub pods: Vec<PodRow>,
    /// The fair probe per shaper and rate.
    pub probes: Vec<ProbeRow>,
    /// The cycle check per shaper.
    pub cycles: Vec<CycleRow>,
}

/// The bucket both shapers get, bits: [`QdiscSpec::tbf_burst_bytes`] of the rate (1 ms of it,
/// at least two full frames), in bits as `runtimeConfig.bandwidth` takes it.
pub fn burst_bits(rate_bps: u64) -> u64 {
    u64::from(QdiscSpec::tbf_burst_bytes(rate_bps)) * 8
}

/// `runtimeConfig.bandwidth` for `rate_bps` both ways with [`burst_bits`].
pub fn symmetric(rate_bps: u64) -> Bandwidth {
    Bandwidth {
        ingress_rate: rate_bps,
        ingress_burst: burst_bits(rate_bps),
        egress_rate: rate_bps,
        egress_burst: burst_bits(rate_bps),
    }
}

/// Hands out the runs' destination ports.
#[derive(Debug)]
pub struct Ports(u16);

impl Default for Ports {
    fn default() -> Self {
        Ports(BASE_PORT)
    }
}

impl Ports {
    /// `n` consecutive ports.
    pub fn take(&mut self, n: usize) -> u16 {
        let n = u16::try_from(n).unwrap_or(u16::MAX);
        if self.0.saturating_add(n) > LAST_PORT {
            self.0 = BASE_PORT;
        }
        let first = self.0;
        self.0 += n;
        first
    }
}

/// A shaper set up on the node: its runtime, and for `metronome-cni` the daemon.
struct Session {
    runtime: CniRuntime,
    daemon: Option<NodeDaemon>,
}

impl Session {
    /// Sets `shaper` up; `Ok(Err(why))` when it cannot run.
    fn start(
        topo: &CniTopology,
        options: &CniOptions,
        shaper: Shaper,
    ) -> Result<Result<Session, String>, CompareError> {
        if shaper == Shaper::Bandwidth {
            let runtime = runtime_for(topo, shaper, None);
            return Ok(runtime.map(|runtime| Session {
                runtime,
                daemon: None,
            }));
        }
        let (Some(binary), Some(plugin)) = (&options.daemon_binary, &options.plugin_binary) else {
            return Ok(Err("no `metronome` or `metronome-cni` binary".to_owned()));
        };
        let daemon = match NodeDaemon::start(topo, binary)? {
            Ok(d) => d,
            Err(e) => return Ok(Err(e)),
        };
        Ok(
            runtime_for(topo, shaper, Some((plugin, &daemon))).map(|runtime| Session {
                runtime,
                daemon: Some(daemon),
            }),
        )
    }

    /// Stops the daemon, if any; `Err(why)` when it did not stop cleanly.
    fn stop(self) -> Result<(), String> {
        match self.daemon {
            Some(d) => d.daemon.stop(),
            None => Ok(()),
        }
    }
}

/// Runs the comparison: builds the topology, runs every rate and shaper, the cycle checks, and
/// removes everything. One progress line per row goes to `progress`.
///
/// For each rate and shaper, every pod is added through the shaper's conflist with
/// `runtimeConfig.bandwidth` = the rate both ways and a bucket of 1 ms of the rate, at least two
/// frames ([`burst_bits`], the bucket of [`crate::netns::QdiscSpec::tbf`]: the same for both
/// shapers, not a runtime's default), then:
///
/// * **per pod, each direction** ([`PodRow`]): [`CniOptions::flows`] TCP connections per pod,
///   all pods at once, egress (pod -> receiver) then ingress (receiver -> pod); each pod's rate
///   is the median of its 100 ms goodput windows after the warm-up, on the wire, with the mean
///   and the mean absolute deviation from the rate beside it ([`traffic`]);
/// * **the fair probe** ([`ProbeRow`]): the first pod sends [`traffic::PROBE_BULK_FLOWS`] bulk
///   connections at its egress limit and a sparse probe; its RTT p50/p99 (`metronome-cni`
///   registers the pod's classes with `fair = true`: the probe's packets do not wait behind the
///   bulk; the `bandwidth` plugin's TBF holds 25 ms in one FIFO);
///
/// then every pod is deleted. Last, **the cycle check** ([`CycleRow`]) per shaper:
/// [`CniOptions::cycles`] times a new pod is added and deleted; what the node holds afterwards
/// beyond what it held before is counted ([`node::Leftovers`]: links, host-local leases, the
/// uplink's `tc` filters and qdiscs, BPF attachments, the daemon's state files and `cni.`
/// classes).
///
/// The `metronome-cni` side runs `metronome run` in the node namespace ([`node::NodeDaemon`],
/// the binary of [`CniOptions::daemon_binary`]) and the plugin of
/// [`CniOptions::plugin_binary`]. A daemon that refuses its configuration or does not come up, a
/// plugin missing, or an ADD that fails gives that shaper's rows an error (`error`, no figures),
/// never a number; the other shaper runs regardless.
pub fn run(options: &CniOptions, progress: &mut dyn Write) -> Result<CniReport, CompareError> {
    let _ = crate::netns::remove_stale(NS_PREFIX);
    let mut topo = CniTopology::new(NS_PREFIX, options.pods)?;
    let mut ports = Ports::default();
    let mut report = CniReport::default();
    for &rate in &options.rates_bps {
        for &shaper in &options.shapers {
            let (rows, probe) = rate_run(&mut topo, options, (shaper, rate), &mut ports)?;
            for r in &rows {
                let _ = writeln!(progress, "{}", describe_pod_row(r));
            }
            let _ = writeln!(progress, "{}", describe_probe_row(&probe));
            report.pods.extend(rows);
            report.probes.push(probe);
        }
    }
    if options.cycles > 0 {
        for &shaper in &options.shapers {
            let row = cycle_check(&mut topo, options, shaper)?;
            let _ = writeln!(progress, "{}", describe_cycle_row(&row));
            report.cycles.push(row);
        }
    }
    topo.remove()?;
    Ok(report)
}

/// One shaper at one rate: ADD every pod, both directions, the probe, DEL every pod.
fn rate_run(
    topo: &mut CniTopology,
    options: &CniOptions,
    (shaper, rate): (Shaper, u64),
    ports: &mut Ports,
) -> Result<(Vec<PodRow>, ProbeRow), CompareError> {
    let names: Vec<String> = (0..topo.pods.len()).map(|i| format!("p{i}")).collect();
    let rows_with = |figures: &[(Direction, Vec<Option<traffic::PodRate>>)],
                     error: Option<&str>| {
        let mut rows = Vec::new();
        for direction in Direction::BOTH {
            for (i, name) in names.iter().enumerate() {
                let f = figures
                    .iter()
                    .find(|(d, _)| *d == direction)
                    .and_then(|(_, v)| v.get(i).copied().flatten());
                let error = match (error, f) {
                    (Some(e), _) => Some(e.to_owned()),
                    (None, None) => Some("no traffic in the measured windows".to_owned()),
                    (None, Some(_)) => None,
                };
                rows.push(PodRow {
                    shaper,
                    target_bps: rate,
                    direction,
                    pod: name.clone(),
                    flows: options.flows,
                    achieved_bps: f.filter(|_| error.is_none()).map(|f| f.median_bps),
                    mean_bps: f.filter(|_| error.is_none()).map(|f| f.mean_bps),
                    deviation_pct: f.filter(|_| error.is_none()).map(|f| f.deviation_pct),
                    error,
                });
            }
        }
        rows
    };
    let probe_failed = |e: &str| ProbeRow {
        shaper,
        target_bps: rate,
        bulk_flows: PROBE_BULK_FLOWS,
        rtt_p50_us: None,
        rtt_p99_us: None,
        error: Some(e.to_owned()),
    };
    let mut session = match Session::start(topo, options, shaper)? {
        Ok(s) => s,
        Err(e) => return Ok((rows_with(&[], Some(&e)), probe_failed(&e))),
    };
    let rc = RuntimeConfig::bandwidth(symmetric(rate));
    let mut added = Vec::new();
    let mut add_error = None;
    for i in 0..topo.pods.len() {
        match session.runtime.add(&mut topo.pods[i], &rc) {
            Ok(_) => added.push(i),
            Err(e) => {
                add_error = Some(format!("ADD of pod p{i}: {e}"));
                break;
            }
        }
    }
    let measured = match &add_error {
        Some(e) => Err(e.clone()),
        None => measure_pods(topo, options, rate, ports),
    };
    let mut del_error = None;
    for &i in added.iter().rev() {
        if let Err(e) = session.runtime.del(&mut topo.pods[i], &rc) {
            del_error.get_or_insert(format!("DEL of pod p{i}: {e}"));
        }
    }
    let stopped = session.stop();
    let result = match (measured, stopped) {
        (Ok(m), Ok(())) => Ok(m),
        (Err(e), _) | (Ok(_), Err(e)) => Err(e),
    };
    if let Some(e) = del_error {
        tracing::warn!("{} at {rate} bit/s: {e}", shaper.name());
    }
    Ok(match result {
        Ok((figures, probe)) => {
            let probe = match probe {
                Ok(p) => ProbeRow {
                    shaper,
                    target_bps: rate,
                    bulk_flows: PROBE_BULK_FLOWS,
                    rtt_p50_us: p.map(|p| p.p50_us),
                    rtt_p99_us: p.map(|p| p.p99_us),
                    error: None,
                },
                Err(e) => probe_failed(&e),
            };
            (rows_with(&figures, None), probe)
        }
        Err(e) => (rows_with(&[], Some(&e)), probe_failed(&e)),
    })
}

type Figures = Vec<(Direction, Vec<Option<traffic::PodRate>>)>;
type ProbeResult = Result<Option<traffic::ProbeFigures>, String>;

/// Both directions over every pod, then the probe from the first pod. `Err(why)` for traffic
/// that could not run.
fn measure_pods(
    topo: &CniTopology,
    options: &CniOptions,
    rate: u64,
    ports: &mut Ports,
) -> Result<(Figures, ProbeResult), String> {
    let duration = options.warmup + options.measure + TAIL;
    let cap = volume_cap(rate, duration);
    let timing = (options.warmup, options.measure);
    let all: Vec<usize> = (0..topo.pods.len()).collect();
    let mut figures = Vec::new();
    for direction in Direction::BOTH {
        let first = ports.take(all.len());
        let reports = run_pods(
            topo,
            &all,
            (options.flows, direction),
            first,
            (duration, cap),
        )
        .map_err(|e| format!("{} traffic: {e}", direction.name()))?;
        let rates = reports.iter().map(|r| pod_rate(r, timing, rate)).collect();
        figures.push((direction, rates));
    }
    let probe = if all.is_empty() {
        Ok(None)
    } else {
        let port = ports.take(2);
        let cap = volume_cap(rate, duration);
        fair_probe(topo, 0, port, (options.warmup, options.measure, cap)).map_err(|e| e.to_string())
    };
    Ok((figures, probe))
}

/// The cycle check of `shaper` (module docs).
fn cycle_check(
    topo: &mut CniTopology,
    options: &CniOptions,
    shaper: Shaper,
) -> Result<CycleRow, CompareError> {
    let mut row = CycleRow {
        shaper,
        cycles: 0,
        failed: 0,
        leftovers: Vec::new(),
        error: None,
    };
    let mut session = match Session::start(topo, options, shaper)? {
        Ok(s) => s,
        Err(e) => {
            row.error = Some(e);
            return Ok(row);
        }
    };
    let before = Leftovers::take(topo, session.daemon.as_ref());
    let rc = RuntimeConfig::bandwidth(symmetric(RATES_BPS[0]));
    for _ in 0..options.cycles {
        let i = topo.add_pod()?;
        let added = session.runtime.add(&mut topo.pods[i], &rc);
        let deleted = session.runtime.del(&mut topo.pods[i], &rc);
        for r in [added.map(drop), deleted] {
            if let Err(e) = r {
                row.failed += 1;
                row.error.get_or_insert(e.to_string());
            }
        }
        topo.remove_pod(i)?;
        row.cycles += 1;
    }
    let after = Leftovers::take(topo, session.daemon.as_ref());
    match (before, after) {
        (Ok(b), Ok(a)) => row.leftovers = a.since(&b),
        (Err(e), _) | (_, Err(e)) => {
            row.error.get_or_insert(e);
        }
    }
    if let Err(e) = session.stop() {
        row.error.get_or_insert(e);
    }
    Ok(row)
}

/// One line for the progress output.
pub fn describe_pod_row(r: &PodRow) -> String {
    let head = format!(
        "{:<13} {:>6.0} Mbit/s {:<7} {:<4} {} flows",
        r.shaper.name(),
        r.target_bps as f64 / 1e6,
        r.direction.name(),
        r.pod,
        r.flows
    );
    match (&r.error, r.achieved_bps, r.deviation_pct) {
        (None, Some(a), Some(d)) => format!(
            "{head}: {:>8.2} Mbit/s ({:+.2} %), mean {:.2}, deviation {:.2} %",
            a / 1e6,
            100.0 * (a / r.target_bps as f64 - 1.0),
            r.mean_bps.unwrap_or(0.0) / 1e6,
            d
        ),
        (e, _, _) => format!("{head}: error: {}", e.as_deref().unwrap_or("not measured")),
    }
}

/// One line for the progress output.
pub fn describe_probe_row(r: &ProbeRow) -> String {
    let head = format!(
        "{:<13} {:>6.0} Mbit/s probe beside {} bulk flows",
        r.shaper.name(),
        r.target_bps as f64 / 1e6,
        r.bulk_flows
    );
    match (&r.error, r.rtt_p50_us, r.rtt_p99_us) {
        (Some(e), _, _) => format!("{head}: error: {e}"),
        (None, Some(p50), Some(p99)) => format!("{head}: RTT p50 {p50} us, p99 {p99} us"),
        _ => format!("{head}: no ping answered"),
    }
}

/// One line for the progress output.
pub fn describe_cycle_row(r: &CycleRow) -> String {
    let mut s = format!(
        "{:<13} {} ADD/DEL cycles: {} failed operations, {} leftovers",
        r.shaper.name(),
        r.cycles,
        r.failed,
        r.leftovers.len()
    );
    if let Some(e) = &r.error {
        s += &format!(" (error: {e})");
    }
    for l in &r.leftovers {
        s += &format!("\n  left: {l}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_is_the_tbf_default_in_bits() {
        // 100 Mbit/s: 1 ms is 12 500 bytes.
        assert_eq!(burst_bits(100_000_000), 100_000);
        // 1 Mbit/s: 125 bytes, raised to two full frames.
        assert_eq!(burst_bits(1_000_000), 2 * 1514 * 8);
        let bw = symmetric(100_000_000);
        assert_eq!(
            (bw.ingress_rate, bw.egress_rate),
            (100_000_000, 100_000_000)
        );
    }

    #[test]
    fn the_quick_run_is_a_subset_of_the_full_one() {
        let (full, quick) = (CniOptions::full(), CniOptions::quick());
        assert!(quick.rates_bps.iter().all(|r| full.rates_bps.contains(r)));
        assert_eq!(full.pods, 8);
        assert_eq!(full.flows, 4);
        assert_eq!(full.cycles, 100);
        assert_eq!(full.shapers, Shaper::PODS);
    }

    #[test]
    fn ports_wrap_before_the_last_port() {
        let mut p = Ports(LAST_PORT - 3);
        assert_eq!(p.take(2), LAST_PORT - 3);
        assert_eq!(p.take(2), BASE_PORT);
    }

    #[test]
    fn an_error_row_has_no_figures() {
        let r = PodRow {
            shaper: Shaper::MetronomeCni,
            target_bps: 100_000_000,
            direction: Direction::Ingress,
            pod: "p3".into(),
            flows: 4,
            achieved_bps: None,
            mean_bps: None,
            deviation_pct: None,
            error: Some("the daemon refused".into()),
        };
        let line = describe_pod_row(&r);
        assert!(line.contains("ingress p3"), "{line}");
        assert!(line.ends_with("error: the daemon refused"), "{line}");
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["shaper"], "metronome-cni");
        assert_eq!(v["direction"], "ingress");
        assert!(v["achieved_bps"].is_null());
    }
}
