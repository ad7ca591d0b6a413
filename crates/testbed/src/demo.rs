//! `metronome demo`: the daemon on a throwaway topology with real kernel TCP.
//!
//! With CAP_NET_ADMIN, [`run_real`] builds a [`Topology::bump_in_the_wire`], runs the daemon's
//! loop on AF_PACKET ports on `in0`/`out0` inside the shaper namespace with the embedded
//! [`DEMO_TOML`] (`examples/demo.toml`, interfaces rewritten to `in0`/`out0`), and drives the
//! trafficgen: class A (`bulk`, 16 TCP flows to port 5201, 200 Mbit/s together), class B
//! (`paced`, 4 flows to port 5301, each paced at 50 Mbit/s), one unshaped UDP flow to port 6000
//! at 100 Mbit/s ([`UNSHAPED_BPS`]) and an RTT probe. Every second it prints each class's rate
//! from the daemon's own class byte counters (bytes on the wire, Ethernet header included); at
//! the end a conformance table: per
//! class the target, the achieved rate and the deviation, the mean absolute deviation of 100 ms
//! windows from the target (Carousel §7.1.1), over the steady part of the run.
//!
//! Offloads ([`OffloadMode`]): by default the veths keep the host's offloads (TSO, GSO, GRO,
//! checksum offload), so the sender's TCP hands the daemon GSO super-frames, the way users run;
//! [`OffloadMode::Off`] gives one-MTU segments with the offloads off on all four veths. The
//! mode is printed with the table and is in the JSON report ([`DemoReport`]). The sender
//! namespace negotiates ECN (`net.ipv4.tcp_ecn = 1`) so that the bulk class's `ecn`
//! backpressure marks instead of only counting not-ECT packets.
//!
//! Without the privilege, [`run_simulated`] runs the closest scenario the simulator supports:
//! `metronome_sim` models one shaper per run, so class A and class B are two runs (16 Cubic
//! flows under a 200 Mbit/s aggregate; 4 flows each paced at 50 Mbit/s), each through the
//! daemon's own engine (`ShaperSpec::Daemon`) with the class's wheel and backpressure; the
//! unshaped traffic is not simulated.
//!
//! [`attach::run_attached`] (`--attach`) runs the daemon attached in place to a host's uplink
//! instead, with the host's TCP and two workloads' through it (see [`attach`]).

pub mod attach;

use crate::netns::{TopoError, Topology};
pub use crate::offloads::OffloadMode;
use crate::shaper::spawn_shaper;
use crate::trafficgen::{self, FlowGroup, TrafficError, TrafficPlan, Transport};
use metronome_daemon::driver::run::Control;
use metronome_daemon::ops::config::Config;
use metronome_daemon::ops::metrics::Metrics;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The demo's configuration, `examples/demo.toml`, embedded in the binary.
pub const DEMO_TOML: &str = include_str!("../../../examples/demo.toml");
/// Rate sampling window: 100 ms (Carousel §7.1.1).
pub const WINDOW: Duration = Duration::from_millis(100);
/// Skipped at the start of a run when computing conformance (TCP slow start).
pub const WARMUP: Duration = Duration::from_millis(500);
/// Prefix of the demo's namespaces.
pub const NS_PREFIX: &str = "mtr-demo";

/// Why the demo failed: the harness's error ([`crate::compare::CompareError`]; the simulator's
/// refusal is its `Sim`, a daemon that refused or stopped at once, `--attach`, its `Refused`).
pub type DemoError = crate::compare::CompareError;

/// One line of the conformance table (a class of the JSON report).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ClassRow {
    /// The class name.
    pub name: String,
    /// The class's target rate in bit/s (`None`: unshaped).
    pub target_bps: Option<f64>,
    /// Mean rate of the steady 100 ms windows, bit/s.
    pub achieved_bps: f64,
    /// Mean absolute deviation of the windows from the target, percent (Carousel §7.1.1).
    pub deviation_pct: Option<f64>,
}

/// Where the demo ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DemoMode {
    /// Real kernel TCP through the daemon on a topology ([`run_real`]).
    Real,
    /// The simulator, without CAP_NET_ADMIN ([`run_simulated`]).
    Simulated,
}

/// The conformance table as one document: what `metronome demo --json` prints.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DemoReport {
    /// Real traffic or the simulator.
    pub mode: DemoMode,
    /// The veths' offloads (`None` in the simulator, which has no veths).
    pub offloads: Option<OffloadMode>,
    /// The machine, one line (CPU model, cores, memory, kernel).
    pub machine: String,
    /// How long the traffic ran, seconds.
    pub duration_s: f64,
    /// Rate windows, milliseconds (Carousel §7.1.1).
    pub window_ms: u64,
    /// Skipped at the start before the windows count, milliseconds.
    pub warmup_ms: u64,
    /// One entry per class, in table order.
    pub classes: Vec<ClassRow>,
}

impl DemoReport {
    /// A report of `classes` measured in `mode` over `duration`.
    pub fn new(
        mode: DemoMode,
        offloads: Option<OffloadMode>,
        machine: String,
        duration: Duration,
        classes: Vec<ClassRow>,
    ) -> Self {
        DemoReport {
            mode,
            offloads,
            machine,
            duration_s: duration.as_secs_f64(),
            window_ms: WINDOW.as_millis() as u64,
            warmup_ms: WARMUP.as_millis() as u64,
            classes,
        }
    }
}

/// The demo configuration with its interfaces rewritten to the topology's `in0` / `out0`.
pub fn demo_config() -> Config {
    let text = DEMO_TOML
        .replace("\"mtr-shp-in\"", "\"in0\"")
        .replace("\"mtr-shp-out\"", "\"out0\"");
    // The embedded file is tested (`demo_config_parses`); a failure here is a build defect.
    Config::from_toml_str(&text, "examples/demo.toml").expect("embedded demo.toml is valid")
}

/// Target rate of class `name` in the demo: its aggregate rate, else pacing × its flows.
fn target_bps(config: &Config, name: &str, flows: usize) -> Option<f64> {
    let class = config.classes.iter().find(|c| c.name == name)?;
    match (class.policy.rate, class.policy.pacing) {
        (Some(r), _) => Some(r.bps() as f64),
        (None, Some(p)) => Some(p.bps() as f64 * flows as f64),
        (None, None) => None,
    }
}

/// Mean and mean absolute deviation (percent of `target`) of `windows`.
pub fn conformance(windows: &[f64], target: Option<f64>) -> (f64, Option<f64>) {
    let dev = target.and_then(|t| crate::stats::mean_abs_deviation_pct(windows, t));
    (crate::stats::mean(windows), dev)
}

/// Per-class transmitted bytes from the daemon's metrics text.
pub fn class_bytes(text: &str) -> Vec<(String, u64)> {
    crate::scrape::Scrape::parse(text)
        .samples("metronome_class_bytes_total")
        .filter_map(|s| Some((s.label("class")?.to_owned(), s.value as u64)))
        .collect()
}

/// Formats the conformance table.
pub fn format_table(rows: &[ClassRow]) -> String {
    let mut s = format!(
        "{:<10} {:>14} {:>14} {:>10} {:>14}\n",
        "class", "target", "achieved", "mean", "deviation"
    );
    for r in rows {
        let (target, off, dev) = match (r.target_bps, r.deviation_pct) {
            (Some(t), Some(d)) => (
                format!("{:.1} Mbit/s", t / 1e6),
                format!("{:+.2} %", (r.achieved_bps / t - 1.0) * 100.0),
                format!("{d:.2} %"),
            ),
            _ => ("unshaped".into(), "-".into(), "-".into()),
        };
        s += &format!(
            "{:<10} {:>14} {:>14} {:>10} {:>14}\n",
            r.name,
            target,
            format!("{:.1} Mbit/s", r.achieved_bps / 1e6),
            off,
            dev
        );
    }
    s += "deviation: mean absolute deviation of 100 ms windows from the target (Carousel §7.1.1)\n";
    s
}

/// Rate of the demo's unshaped flow, bit/s: steady for the whole run, so the default class's
/// row shows what passes unshaped beside the two shaped classes.
pub const UNSHAPED_BPS: u64 = 100_000_000;

/// The unshaped flow: one UDP flow of full-MTU datagrams to port 6000 at [`UNSHAPED_BPS`] (an
/// unpaced TCP flow would send its whole volume at line rate in the first seconds and stop).
fn unshaped_flow() -> FlowGroup {
    let mut flow = FlowGroup::udp("default", 6000, 1);
    flow.transport = Transport::Udp {
        payload: trafficgen::UDP_FULL_PAYLOAD,
        rate_bps: Some(UNSHAPED_BPS),
    };
    flow
}

/// The real demo (needs CAP_NET_ADMIN) with the veths' offloads in `offloads`. Prints live rates
/// and the table to `out`.
pub fn run_real(
    duration: Duration,
    offloads: OffloadMode,
    out: &mut dyn Write,
) -> Result<Vec<ClassRow>, DemoError> {
    let mut topo = Topology::bump_in_the_wire(NS_PREFIX)?;
    offloads.apply(&mut topo)?;
    topo.enable_sender_ecn();
    let mut config = demo_config();
    offloads.configure(&mut config);
    let metrics = Metrics::new();
    let control = Control::default();
    let shaper = spawn_shaper(
        &topo.shaper,
        config.clone(),
        metrics.clone(),
        control.clone(),
    )?;
    std::thread::sleep(Duration::from_millis(100));
    let groups = vec![
        FlowGroup::tcp("bulk", 5201, 16),
        FlowGroup::tcp("paced", 5301, 4),
        unshaped_flow(),
    ];
    let plan = TrafficPlan::new(topo.receiver_addr, groups, duration).with_probe(7000);
    let (snd, rcv) = (topo.sender.clone(), topo.receiver.clone());
    let _ = writeln!(out, "shaping real kernel TCP for {duration:?} (class A: 16 flows, 200 Mbit/s together; class B: 4 flows, 50 Mbit/s each; 1 unshaped UDP flow at 100 Mbit/s)");
    let _ = writeln!(out, "offloads: {}", offloads.describe());
    let traffic = std::thread::spawn(move || trafficgen::run(&plan, Some(&snd), Some(&rcv)));
    let names = ["bulk", "paced", "default"];
    let windows = sample_classes(
        &names,
        duration,
        || class_bytes(&metrics.encode()),
        || traffic.is_finished(),
        out,
    );
    let report = traffic.join().map_err(|_| TrafficError::ThreadPanicked)??;
    control.stop.store(true, Ordering::Relaxed);
    let loop_report = shaper
        .join()
        .map_err(|_| TopoError::ThreadPanicked("shaper".into()))???;
    let flows = [16, 4, 1];
    let rows: Vec<ClassRow> = names
        .iter()
        .zip(&windows)
        .zip(flows)
        .map(|((name, w), f)| {
            let target = target_bps(&config, name, f);
            let (achieved, dev) = conformance(w, target);
            ClassRow {
                name: (*name).to_owned(),
                target_bps: target,
                achieved_bps: achieved,
                deviation_pct: dev,
            }
        })
        .collect();
    let _ = write!(out, "\n{}", format_table(&rows));
    let _ = writeln!(out, "offloads: {}", offloads.describe());
    match report.probe.as_ref().filter(|p| p.samples > 0) {
        Some(p) => {
            let _ = writeln!(out, "probe RTT: p50 {} us, p99 {} us", p.p50_us, p.p99_us);
        }
        None => {
            let _ = writeln!(out, "probe RTT: no answer");
        }
    }
    let e = loop_report.engine;
    let _ = writeln!(
        out,
        "daemon: {} frames in, {} shaped, {} passed at once, {} dropped, {} ECN-marked, {} not-ECT",
        e.received,
        e.released,
        e.forwarded,
        e.dropped(),
        e.ecn_marked,
        e.ecn_not_ect
    );
    topo.remove()?;
    Ok(rows)
}

/// The demo in the simulator (no privilege needed). See the module docs for what it models.
pub fn run_simulated(duration: Duration, out: &mut dyn Write) -> Result<Vec<ClassRow>, DemoError> {
    use metronome_core::HorizonPolicy;
    use metronome_daemon::ops::config::Backpressure;
    use metronome_sim::{DaemonBackpressure, Scenario, ShaperSpec};
    let config = demo_config();
    let mut rows = Vec::new();
    for (name, flows) in [("bulk", 16u32), ("paced", 4)] {
        let class = config.classes.iter().find(|c| c.name == name);
        let policy = class.map(|c| c.policy);
        let scenario = Scenario {
            flows,
            duration_ns: duration.as_nanos().min(u128::from(u64::MAX)) as u64,
            warmup_ns: WARMUP.as_nanos() as u64,
            window_ns: WINDOW.as_nanos() as u64,
            shaper: ShaperSpec::Daemon {
                granularity_ns: config.wheel.granularity.as_nanos(),
                horizon_ns: config.wheel.horizon.as_nanos(),
                aggregate_bps: policy.and_then(|p| p.rate).map(|r| r.bps()),
                per_flow_bps: policy.and_then(|p| p.pacing).map(|r| r.bps()),
                capacity_packets: 70_000,
                backpressure: match policy.map(|p| p.backpressure) {
                    Some(Backpressure::Ecn { threshold }) => DaemonBackpressure::Ecn {
                        threshold_ns: threshold.as_nanos(),
                    },
                    Some(Backpressure::Drop { limit }) => DaemonBackpressure::Drop { limit },
                    _ => DaemonBackpressure::None,
                },
                fair: policy.is_some_and(|p| p.fair),
                reject_beyond_horizon: class.map_or(config.wheel.horizon_policy, |c| {
                    c.policy.effective_horizon_policy(&config.wheel)
                }) == HorizonPolicy::Reject,
            },
            ..Scenario::default()
        };
        let report = metronome_sim::run(&scenario)?;
        let target = target_bps(&config, name, flows as usize);
        let (achieved, dev) = conformance(&report.throughput.windows_bps, target);
        rows.push(ClassRow {
            name: name.to_owned(),
            target_bps: target,
            achieved_bps: achieved,
            deviation_pct: dev,
        });
    }
    let _ = write!(out, "{}", format_table(&rows));
    Ok(rows)
}

/// Reads the classes' byte counters (`bytes`) every [`WINDOW`] until `finished`: writes each
/// second's mean rate of every class in `names` to `out`, and returns each class's rates (bit/s)
/// over the windows after [`WARMUP`] that end within `duration`, for the conformance table.
pub(crate) fn sample_classes(
    names: &[&str],
    duration: Duration,
    mut bytes: impl FnMut() -> Vec<(String, u64)>,
    mut finished: impl FnMut() -> bool,
    out: &mut dyn Write,
) -> Vec<Vec<f64>> {
    let get = |v: &[(String, u64)], n: &str| v.iter().find(|(k, _)| k == n).map_or(0, |x| x.1);
    let mut windows: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    let start = Instant::now();
    let mut last = (Instant::now(), bytes());
    let mut next = start + WINDOW;
    let mut second: Vec<Vec<f64>> = Vec::new();
    while !finished() {
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        next += WINDOW;
        let now = (Instant::now(), bytes());
        let dt = now.0.duration_since(last.0).as_secs_f64();
        let rates: Vec<f64> = names
            .iter()
            .map(|n| get(&now.1, n).saturating_sub(get(&last.1, n)) as f64 * 8.0 / dt)
            .collect();
        let t = now.0.duration_since(start);
        if t >= WARMUP && t + WINDOW <= duration {
            for (w, r) in windows.iter_mut().zip(&rates) {
                w.push(*r);
            }
        }
        second.push(rates);
        if second.len() == 10 {
            let mut line = format!("{:>4.0}s", t.as_secs_f64());
            for (i, name) in names.iter().enumerate() {
                let mean = second.iter().map(|r| r[i]).sum::<f64>() / 10.0 / 1e6;
                line.push_str(&format!("  {name} {mean:>7.1} Mbit/s"));
            }
            let _ = writeln!(out, "{line}");
            second.clear();
        }
        last = now;
    }
    windows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demo_config_parses_with_the_topology_interfaces() {
        let c = demo_config();
        assert_eq!(
            (c.interfaces.inside.as_str(), c.interfaces.outside.as_str()),
            ("in0", "out0")
        );
        assert_eq!(target_bps(&c, "bulk", 16), Some(200e6));
        assert_eq!(target_bps(&c, "paced", 4), Some(200e6));
    }

    #[test]
    fn the_report_records_its_windows_and_warm_up() {
        let report = DemoReport::new(
            DemoMode::Real,
            Some(OffloadMode::Host),
            "test machine".into(),
            Duration::from_secs(5),
            vec![ClassRow {
                name: "bulk".into(),
                target_bps: Some(200e6),
                achieved_bps: 199e6,
                deviation_pct: Some(0.5),
            }],
        );
        assert_eq!((report.window_ms, report.warmup_ms), (100, 500));
        assert_eq!(report.duration_s, 5.0);
    }

    #[test]
    fn conformance_is_the_mean_absolute_deviation() {
        let (mean, dev) = conformance(&[90.0, 110.0, 100.0, 100.0], Some(100.0));
        assert_eq!(mean, 100.0);
        assert_eq!(dev, Some(5.0));
        assert_eq!(conformance(&[], Some(1.0)), (0.0, None));
    }

    #[test]
    fn class_bytes_reads_the_metrics_text() {
        let m = Metrics::new();
        m.class("bulk").sent(2, 3000);
        m.class("paced").sent(1, 1514);
        let mut v = class_bytes(&m.encode());
        v.sort();
        assert_eq!(v, [("bulk".to_owned(), 3000), ("paced".to_owned(), 1514)]);
    }

    #[test]
    fn the_simulated_demo_holds_its_targets() {
        let mut out = Vec::new();
        let rows = run_simulated(Duration::from_secs(2), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        for r in &rows {
            assert!(r.deviation_pct.unwrap() < 3.0, "{text}");
        }
    }
}
