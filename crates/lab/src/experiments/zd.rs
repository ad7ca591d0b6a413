//! `zd`: many TCP flows through one small scheduled buffer at 10 Gbit/s, TCP Small Queues over a
//! drop-tail pfifo vs zD over the same pfifo (zD §2.3–2.4, Figure 3; §6.2, Figures 9–12; Table 1).
//!
//! One point is one run of [`metronome_sim::run`]: `flows` greedy TCP flows through one pfifo,
//! `mode` = `tsq_pfifo_<N>` (TSQ over a pfifo of `N` packets, a full one drops) or `zd` (zD over a
//! pfifo of `zd_pfifo_slots`). The RTT columns are per-segment delivery latency
//! ([`metronome_sim::SimReport::delivery_latency`]), `flow_rtt_*` per flow
//! ([`metronome_sim::SimReport::flow_delivery_latency`]), `echo_rtt_*` the echoed timestamps.
//!
//! Where it departs from the paper: no CPU model and one host queue, one MTU per packet. The
//! paper's setup, the columns and the reasons: `docs/design/zd.md`.

use metronome_sim::{
    BackpressureMode, CongestionControl, LatencySummary, ShaperSpec, SimReport, SourceKind,
    ZdDiscipline,
};

use super::rows::round;
use super::simulated::{base_scenario, simulate, SPEED_COLUMN};
use crate::error::LabError;
use crate::point::{Point, Row};

/// The experiment's registered name.
pub const NAME: &str = "zd";

/// Mode prefix of TSQ over a pfifo of the number of slots that follows.
const TSQ_PFIFO: &str = "tsq_pfifo_";
/// Mode of zD over a pfifo of `zd_pfifo_slots`.
const ZD: &str = "zd";

/// Nanoseconds per millisecond.
const MS: u64 = 1_000_000;

/// Reads one point into its mode and scenario: the shared simulated parameters
/// ([`base_scenario`]) plus `mode`, `zd_pfifo_slots`, `tsq_limit`, `cc`, `mtu` and `rto_min_ms`.
fn scenario(p: &Point) -> Result<(String, metronome_sim::Scenario), LabError> {
    let bad = |name: &str, why: String| LabError::param(p.index, name, why);
    let mode = p.str("mode")?.to_string();
    let (shaper, backpressure) = if mode == ZD {
        let capacity = p.positive_u32("zd_pfifo_slots")?;
        let discipline = ZdDiscipline::Fifo;
        (
            ShaperSpec::Pfifo { capacity },
            BackpressureMode::Zd { discipline },
        )
    } else if let Some(slots) = mode.strip_prefix(TSQ_PFIFO) {
        let capacity = slots
            .parse::<u32>()
            .ok()
            .filter(|&s| s > 0)
            .ok_or_else(|| bad("mode", format!("{mode:?}: no slot count after {TSQ_PFIFO}")))?;
        let limit = p.positive_u32("tsq_limit")?;
        (
            ShaperSpec::Pfifo { capacity },
            BackpressureMode::Tsq { limit },
        )
    } else {
        return Err(bad(
            "mode",
            format!("unknown mode {mode:?}; known: {ZD}, {TSQ_PFIFO}<slots>"),
        ));
    };
    let cc = match p.str("cc")? {
        "cubic" => CongestionControl::Cubic,
        "reno" => CongestionControl::Reno,
        other => return Err(bad("cc", format!("unknown {other:?}; known: cubic, reno"))),
    };
    let mut sc = base_scenario(p)?;
    sc.source = SourceKind::Tcp(cc);
    sc.shaper = shaper;
    sc.backpressure = backpressure;
    sc.transport.mtu = p.positive_u32("mtu")?;
    sc.transport.rto_min_ns = u64::from(p.positive_u32("rto_min_ms")?) * MS;
    Ok((mode, sc))
}

/// Runs one point: see the module documentation.
pub fn run(point: &Point) -> Result<Vec<Row>, LabError> {
    let (mode, sc) = scenario(point)?;
    let report = simulate(point, &sc)?;
    Ok(vec![row(&mode, &report)])
}

/// Microseconds, rounded to 0.1 µs (the histograms resolve 0.1 % of the value).
fn us(ns: u64) -> f64 {
    round(ns as f64 / 1e3, 1)
}

fn latency(row: &mut Row, prefix: &str, l: &LatencySummary) {
    row.set(&format!("{prefix}_p50_us"), us(l.p50_ns));
    row.set(&format!("{prefix}_p99_us"), us(l.p99_ns));
    row.set(&format!("{prefix}_p999_us"), us(l.p999_ns));
}

fn row(mode: &str, r: &SimReport) -> Row {
    let slots = match r.scenario.shaper {
        ShaperSpec::Pfifo { capacity } => capacity,
        _ => 0,
    };
    let mut row = Row::new()
        .with("mode", mode)
        .with("flows", r.scenario.flows)
        .with("pfifo_slots", slots)
        .with("throughput_bps", r.throughput.aggregate_bps.round() as u64)
        .with("jain_fairness", round(r.throughput.jain_fairness, 4))
        .with("physical_drops", r.drops.physical)
        .with("virtual_drops", r.drops.virtual_drops)
        .with("retransmissions", r.drops.retransmissions)
        .with("timeouts", r.drops.timeouts);
    latency(&mut row, "rtt", &r.delivery_latency);
    row.set("rtt_max_us", us(r.delivery_latency.max_ns));
    latency(&mut row, "flow_rtt", &r.flow_delivery_latency);
    latency(&mut row, "echo_rtt", &r.rtt);
    row.set("held_p99", r.shaper.held.p99);
    row.set(SPEED_COLUMN, r.speed.events_per_second.round() as u64);
    row
}

#[cfg(test)]
mod tests;
