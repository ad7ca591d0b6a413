//! What the simulator-backed experiments share: reading the run parameters every such plan sets
//! (duration, warm-up, window, path, socket buffer, seed) into a [`Scenario`], running it with
//! `metronome_sim::run`, and the columns every such row carries.
//!
//! The simulator (crate `metronome-sim`) is deterministic: one scenario, one report, except its
//! wall-clock [`metronome_sim::Speed`]. The `events_per_sec` column comes from there and is the
//! only column of these experiments that differs between two runs of the same plan; the
//! determinism tests compare rows without it ([`without_speed`]).

use metronome_sim::{DaemonBackpressure, Scenario, ShaperSpec, SimReport};

use super::rows::round;
use crate::error::LabError;
use crate::point::{Point, Row};

/// The one non-deterministic column: simulated events per wall-clock second.
pub const SPEED_COLUMN: &str = "events_per_sec";

/// Nanoseconds per millisecond and per microsecond.
const MS: u64 = 1_000_000;
const US: u64 = 1_000;

/// The daemon's engine as the shaper, limiting the aggregate to `rate_bps`, its wheel from the
/// point's `granularity_ns`, `horizon_ms` and `capacity_packets`, without backpressure.
pub fn daemon_shaper(
    p: &Point,
    rate_bps: u64,
    reject_beyond_horizon: bool,
    fair: bool,
) -> Result<ShaperSpec, LabError> {
    Ok(ShaperSpec::Daemon {
        granularity_ns: p.positive("granularity_ns")?,
        horizon_ns: p.positive("horizon_ms")? * MS,
        aggregate_bps: Some(rate_bps),
        per_flow_bps: None,
        capacity_packets: p.positive_u32("capacity_packets")?,
        backpressure: DaemonBackpressure::None,
        reject_beyond_horizon,
        fair,
    })
}

/// The scenario fields every simulated plan sets in `[base]`: `seed`, `duration_ms`,
/// `warmup_ms`, `window_ms`, `start_spread_ms`, `base_rtt_us`, `line_rate_bps`, `sndbuf_mtus`
/// and `flows`. The caller sets the source, shaper and backpressure.
pub fn base_scenario(p: &Point) -> Result<Scenario, LabError> {
    let mut sc = Scenario {
        seed: p.u64("seed")?,
        duration_ns: p.positive("duration_ms")? * MS,
        warmup_ns: p.u64("warmup_ms")? * MS,
        window_ns: p.positive("window_ms")? * MS,
        start_spread_ns: p.u64("start_spread_ms")? * MS,
        base_rtt_ns: p.positive("base_rtt_us")? * US,
        line_rate_bps: p.positive("line_rate_bps")?,
        flows: p.positive_u32("flows")?,
        ..Scenario::default()
    };
    sc.transport.sndbuf_mtus = p.positive_u32("sndbuf_mtus")?;
    Ok(sc)
}

/// Runs `sc`; a scenario the simulator refuses is a parameter error of the point.
pub fn simulate(p: &Point, sc: &Scenario) -> Result<SimReport, LabError> {
    metronome_sim::run(sc).map_err(|e| LabError::Experiment {
        point: p.index,
        message: format!("the simulator refused the scenario: {e}"),
    })
}

/// The columns every simulated row ends with: the achieved rate, the deviation from the target
/// (Carousel §7.1.1), physical drops and the simulator's speed.
pub fn push_common(row: &mut Row, r: &SimReport) {
    row.set("achieved_bps", r.throughput.aggregate_bps.round() as u64);
    row.set("deviation_pct", round(r.throughput.deviation_pct, 4));
    row.set("drops", r.drops.physical);
    row.set(SPEED_COLUMN, r.speed.events_per_second.round() as u64);
}

/// `rows` without the wall-clock column, for determinism checks.
#[cfg(test)]
pub fn without_speed(rows: &[Row]) -> Vec<Row> {
    rows.iter()
        .map(|r| {
            let mut out = Row::new();
            for (c, v) in r.iter().filter(|(c, _)| *c != SPEED_COLUMN) {
                out.set(c, v.clone());
            }
            out
        })
        .collect()
}
