//! `mqecn`: ECN marking on a multi-queue switch port, per-queue with the standard threshold,
//! per-queue with the minimum threshold, per-port, and MQ-ECN (Bai et al., NSDI 2016: §2
//! Figures 1 and 3, §5.1 Figures 6-8, §5.2 Figures 9-10).
//!
//! One point is one port and one workload run under every scheme of `schemes`, each row also
//! compared with per-queue-standard (`*_vs_standard_pct`), on [`metronome_sim::switch`] (DCTCP
//! senders, a [`metronome_core::MqPort`] bottleneck): `long_lived` greedy flows per service, or
//! `poisson` web-search flows with FCT by size class.
//!
//! Where it departs from the paper: one switch port, exact line rate, new connections per flow,
//! the echoed-timestamp RTT. The reasons and what sets the small-flow tail:
//! `docs/design/mq-ecn.md`.

use metronome_sim::switch::{self, MarkingSpec, SwitchReport, SwitchScenario, Workload};
use metronome_sim::CongestionControl;

use super::rows::round;
use super::simulated::SPEED_COLUMN;
use crate::error::LabError;
use crate::point::{Point, Row};

/// The experiment's registered name.
pub const NAME: &str = "mqecn";

/// Nanoseconds per millisecond and per microsecond.
const MS: u64 = 1_000_000;
const US: f64 = 1_000.0;

/// The scheme every row is compared with (`*_vs_standard_pct`).
const STANDARD: &str = "per-queue-standard";

fn scheme(p: &Point, name: &str) -> Result<MarkingSpec, LabError> {
    Ok(match name {
        STANDARD => MarkingSpec::PerQueueStandard,
        "per-queue-min" => MarkingSpec::PerQueueMin,
        "per-port" => MarkingSpec::PerPort,
        "mq-ecn" => MarkingSpec::MqEcn,
        "none" => MarkingSpec::None,
        other => {
            return Err(LabError::param(
                p.index,
                "schemes",
                format!(
                    "unknown {other:?}; known: {STANDARD}, per-queue-min, per-port, mq-ecn, none"
                ),
            ))
        }
    })
}

fn schemes(p: &Point) -> Result<Vec<String>, LabError> {
    let bad = |why: &str| LabError::param(p.index, "schemes", why.to_string());
    let list = p
        .get("schemes")?
        .as_array()
        .ok_or_else(|| bad("must be a list of scheme names"))?;
    let names: Vec<String> = list
        .iter()
        .map(|v| v.as_str().map(str::to_string))
        .collect::<Option<_>>()
        .ok_or_else(|| bad("must be a list of strings"))?;
    if names.is_empty() {
        return Err(bad("must not be empty"));
    }
    Ok(names)
}

/// `"1+4"` -> `[1, 4]`.
fn flows(p: &Point) -> Result<Vec<u32>, LabError> {
    let text = p.str("flows")?;
    text.split('+')
        .map(|s| s.trim().parse::<u32>().ok())
        .collect::<Option<Vec<u32>>>()
        .filter(|v| !v.is_empty() && v.iter().any(|&n| n > 0))
        .ok_or_else(|| {
            LabError::param(
                p.index,
                "flows",
                format!("{text:?}: expected flows per service joined by '+', e.g. \"1+4\""),
            )
        })
}

/// `service_weights`: a list of numbers (empty: balanced traffic).
fn weights(p: &Point) -> Result<Vec<f64>, LabError> {
    let bad = || LabError::param(p.index, "service_weights", "must be a list of numbers");
    p.get("service_weights")?
        .as_array()
        .ok_or_else(bad)?
        .iter()
        .map(|v| v.as_float().or_else(|| v.as_integer().map(|i| i as f64)))
        .collect::<Option<Vec<f64>>>()
        .ok_or_else(bad)
}

/// The port and transport parameters every point sets, and the workload.
fn base(p: &Point) -> Result<SwitchScenario, LabError> {
    let mut sc = SwitchScenario {
        seed: p.u64("seed")?,
        line_rate_bps: p.positive("line_rate_bps")?,
        base_rtt_ns: (p.f64("base_rtt_us")? * US).round() as u64,
        buffer_bytes: p.positive("buffer_bytes")?,
        queues: p.positive_u32("queues")?,
        quantum_bytes: p.positive_u32("quantum_bytes")?,
        standard_threshold_bytes: p.positive("standard_threshold_bytes")?,
        beta: p.f64("beta")?,
        cc: CongestionControl::Dctcp,
        initial_cwnd: p.positive_u32("initial_cwnd")?,
        rto_min_ns: p.positive("rto_min_us")? * 1_000,
        ..SwitchScenario::default()
    };
    match p.str("workload")? {
        "long_lived" => {
            let host_per_flow = match p.str("senders")? {
                "per_flow" => true,
                "per_service" => false,
                other => {
                    return Err(LabError::param(
                        p.index,
                        "senders",
                        format!("unknown {other:?}; known: per_flow, per_service"),
                    ))
                }
            };
            sc.workload = Workload::LongLived {
                flows_per_service: flows(p)?,
                start_spread_ns: MS,
                host_per_flow,
            };
            sc.duration_ns = p.positive("duration_ms")? * MS;
            sc.warmup_ns = p.u64("warmup_ms")? * MS;
        }
        "poisson" => {
            sc.workload = Workload::Poisson {
                load: p.f64("load")?,
                flows: p.positive_u32("flow_count")?,
                services: p.positive_u32("services")?,
                service_weights: weights(p)?,
                hosts: p.positive_u32("hosts")?,
                cdf: None,
            };
            sc.duration_ns = p.positive("drain_ms")? * MS;
        }
        other => {
            return Err(LabError::param(
                p.index,
                "workload",
                format!("unknown {other:?}; known: long_lived, poisson"),
            ))
        }
    }
    Ok(sc)
}

/// Runs one point under every scheme: see the module documentation.
pub fn run(point: &Point) -> Result<Vec<Row>, LabError> {
    let base = base(point)?;
    let names = schemes(point)?;
    let mut runs: Vec<(String, SwitchReport)> = Vec::with_capacity(names.len());
    for name in names {
        let sc = SwitchScenario {
            marking: scheme(point, &name)?,
            ..base.clone()
        };
        let report = switch::run(&sc).map_err(|e| LabError::Experiment {
            point: point.index,
            message: format!("the simulator refused the scenario: {e}"),
        })?;
        runs.push((name, report));
    }
    let standard = runs
        .iter()
        .find(|(n, _)| n == STANDARD)
        .map(|(_, r)| r.clone());
    let port = point.str("port")?;
    runs.iter()
        .map(|(name, r)| row(point, port, name, &base, r, standard.as_ref()))
        .collect()
}

/// `(ours / standard - 1) x 100`, rounded to 0.1 %; `None` without a usable baseline.
fn vs(ours: f64, standard: Option<f64>) -> Option<f64> {
    standard
        .filter(|s| *s > 0.0 && s.is_finite())
        .map(|s| round((ours / s - 1.0) * 100.0, 1))
}

fn row(
    p: &Point,
    port: &str,
    name: &str,
    sc: &SwitchScenario,
    r: &SwitchReport,
    standard: Option<&SwitchReport>,
) -> Result<Row, LabError> {
    let mut row = Row::new()
        .with("port", port)
        .with("scheme", name)
        .with("seed", sc.seed)
        .with("queues", sc.queues)
        .with("queues_active", sc.services())
        .with("avg_queue_bytes", round(r.avg_queue_bytes, 0))
        .with("max_queue_bytes", r.max_queue_bytes)
        .with("utilization", round(r.utilization, 4))
        .with("buffer_drops", r.buffer_drops)
        .with("timeouts", r.timeouts)
        .with("ce_marked", r.ce_marked);
    if let Some(v) = vs(r.avg_queue_bytes, standard.map(|s| s.avg_queue_bytes)) {
        row.set("avg_queue_vs_standard_pct", v);
    }
    match &sc.workload {
        Workload::LongLived { .. } => {
            row.set("workload", "long_lived");
            row.set("flows", p.str("flows")?);
            row.set("flows_total", flows(p)?.iter().sum::<u32>());
            row.set("share_max_min_ratio", round(r.share_max_min_ratio, 3));
            let g = &r.service_goodput_bps;
            row.set("service1_goodput_bps", g[0].round() as u64);
            if let Some(g2) = g.get(1) {
                row.set("service2_goodput_bps", g2.round() as u64);
            }
            row.set("rtt_mean_us", round(r.rtt_mean_us, 1));
            row.set("rtt_p50_us", round(r.rtt_p50_us, 1));
            row.set("rtt_p99_us", round(r.rtt_p99_us, 1));
            if let Some(v) = vs(r.rtt_p99_us, standard.map(|s| s.rtt_p99_us)) {
                row.set("rtt_p99_vs_standard_pct", v);
            }
            row.set("mq_threshold_q0_bytes", round(r.mean_threshold_q0_bytes, 0));
        }
        Workload::Poisson {
            load,
            service_weights,
            ..
        } => {
            row.set("workload", "poisson");
            let traffic = if service_weights.is_empty() {
                "balanced"
            } else {
                "unbalanced"
            };
            row.set("traffic", traffic);
            row.set("load", *load);
            row.set("fct_all_avg_us", round(r.fct_all.mean_us, 1));
            row.set("fct_small_avg_us", round(r.fct_small.mean_us, 1));
            row.set("fct_small_p99_us", round(r.fct_small.p99_us, 1));
            row.set("fct_medium_avg_us", round(r.fct_medium.mean_us, 1));
            row.set("fct_large_avg_us", round(r.fct_large.mean_us, 1));
            row.set("small_flows", r.fct_small.flows);
            let timed_out = r.small_flows_timed_out as f64 / r.fct_small.flows.max(1) as f64;
            row.set("small_timeout_pct", round(timed_out * 100.0, 2));
            row.set(
                "fct_small_p99_no_timeout_us",
                round(r.fct_small_p99_no_timeout_us, 1),
            );
            row.set("large_flows", r.fct_large.flows);
            row.set("unfinished_flows", r.unfinished_flows);
            let st = |f: fn(&SwitchReport) -> f64| standard.map(f);
            if let Some(v) = vs(r.fct_small.p99_us, st(|s| s.fct_small.p99_us)) {
                row.set("fct_small_p99_vs_standard_pct", v);
            }
            if let Some(v) = vs(r.fct_large.mean_us, st(|s| s.fct_large.mean_us)) {
                row.set("fct_large_avg_vs_standard_pct", v);
            }
        }
    }
    let events_per_sec = r.events as f64 / (r.wall_ns.max(1) as f64 / 1e9);
    row.set(SPEED_COLUMN, events_per_sec.round() as u64);
    Ok(row)
}

#[cfg(test)]
mod tests;
