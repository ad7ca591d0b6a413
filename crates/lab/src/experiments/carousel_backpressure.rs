//! `carousel-backpressure`: packets held in Carousel's shaper under three kinds of backpressure,
//! against the number of flows and against the aggregate rate (Carousel §5.2 and §7.1.2,
//! Figures 14 and 15), on the simulator (`metronome-sim`).
//!
//! One point is one run of `flows` greedy TCP flows through the daemon's engine
//! ([`metronome_sim::ShaperSpec::Daemon`]) with `mode` = `dc` (Deferred Completions at the sources,
//! Cubic), `vegas` (TCP Vegas) or `none` (completion at enqueue, a shaper of `capacity_packets`).
//!
//! Where it departs from the paper: no TSO and no TSQ above the shaper, greedy flows. The paper's
//! findings and the model: `docs/design/carousel.md`.

use metronome_sim::{BackpressureMode, CongestionControl, SourceKind};

use super::rows::round;
use super::simulated::{base_scenario, daemon_shaper, push_common, simulate};
use crate::error::LabError;
use crate::point::{Point, Row};

/// The experiment's registered name.
pub const NAME: &str = "carousel-backpressure";

/// The backpressure modes, as the `mode` parameter spells them.
const MODES: [&str; 3] = ["dc", "vegas", "none"];

/// Runs one point: see the module documentation.
pub fn run(point: &Point) -> Result<Vec<Row>, LabError> {
    let mode = point.str("mode")?;
    let rate_bps = point.positive("rate_bps")?;
    let mut sc = base_scenario(point)?;
    let cubic = SourceKind::Tcp(CongestionControl::Cubic);
    (sc.source, sc.backpressure) = match mode {
        "dc" => (
            cubic,
            BackpressureMode::DeferredCompletions {
                limit: point.positive_u32("dc_limit")?,
            },
        ),
        "vegas" => (
            SourceKind::Tcp(CongestionControl::Vegas {
                alpha: point.positive_u32("vegas_alpha")?,
                beta: point.positive_u32("vegas_beta")?,
            }),
            BackpressureMode::DelayBased,
        ),
        "none" => (cubic, BackpressureMode::None),
        other => {
            return Err(LabError::param(
                point.index,
                "mode",
                format!("unknown mode {other:?}; known: {}", MODES.join(", ")),
            ))
        }
    };
    sc.shaper = daemon_shaper(point, rate_bps, false, false)?;
    let r = simulate(point, &sc)?;
    // The histogram's 3 significant digits report a bucket's highest value (70 015 for a full
    // 70 000-packet shaper); the shaper never holds more than its capacity.
    let cap = r.shaper.capacity;
    let held = r.shaper.held;
    let (p50, p99, max) = (held.p50.min(cap), held.p99.min(cap), held.max.min(cap));
    let mut row = Row::new()
        .with("mode", mode)
        .with("flows", sc.flows)
        .with("rate_bps", rate_bps)
        .with("held_p50", p50)
        .with("held_p99", p99)
        .with("held_max", max)
        .with(
            "held_p99_per_flow",
            round(p99 as f64 / f64::from(sc.flows), 3),
        );
    push_common(&mut row, &r);
    Ok(vec![row])
}

#[cfg(test)]
mod tests {
    use super::super::rows::int;
    use super::super::simulated::without_speed;
    use super::*;

    /// A point small enough for a debug build: `flows` flows through a 500 Mbit/s limit on a
    /// 1 Gbit/s NIC, 200 µs RTT, 250 ms measured from the start in 50 ms windows.
    fn tiny(mode: &str, flows: u32, capacity_packets: u32) -> Point {
        let text = format!(
            "mode = \"{mode}\"\nflows = {flows}\nrate_bps = 500_000_000\n\
             line_rate_bps = 1_000_000_000\ngranularity_ns = 2_000\nhorizon_ms = 2_000\n\
             capacity_packets = {capacity_packets}\ndc_limit = 2\nvegas_alpha = 2\nvegas_beta = 4\n\
             base_rtt_us = 200\nsndbuf_mtus = 2_800\nseed = 1\nduration_ms = 250\nwarmup_ms = 0\n\
             window_ms = 50\nstart_spread_ms = 1\n"
        );
        Point::new(toml::from_str(&text).expect("test point parses"))
    }

    #[test]
    fn deterministic_but_for_the_speed_column() {
        let point = tiny("dc", 10, 70_000);
        let a = run(&point).expect("runs");
        let b = run(&point).expect("runs");
        assert_eq!(without_speed(&a), without_speed(&b));
        assert!(int(&a[0], "events_per_sec") > 0);
    }

    /// Carousel §7.1.2: Deferred Completions keep "approximately twice the number of active
    /// flows" in the shaper, without a drop, at the full rate.
    #[test]
    fn deferred_completions_hold_about_two_packets_per_active_flow() {
        let flows = 20;
        let row = &run(&tiny("dc", flows, 70_000)).expect("runs")[0];
        let p99 = int(row, "held_p99");
        assert!(p99 as f64 <= 2.2 * f64::from(flows), "{row:?}");
        assert!(p99 as f64 >= 1.5 * f64::from(flows), "{row:?}");
        assert_eq!(int(row, "drops"), 0, "{row:?}");
        assert!(int(row, "achieved_bps") as f64 > 0.99 * 500e6, "{row:?}");
    }

    /// Carousel Figure 15: without backpressure the flows fill the shaper to its memory cap and
    /// what is over is dropped; Vegas holds more than Deferred Completions but stays far below.
    #[test]
    fn without_backpressure_the_shaper_fills_to_its_cap() {
        let cap = 2_000;
        let none = &run(&tiny("none", 20, cap)).expect("runs")[0];
        assert!(int(none, "held_max") + 1 >= u64::from(cap), "{none:?}");
        assert!(
            int(none, "held_p99") as f64 >= 0.9 * f64::from(cap),
            "{none:?}"
        );
        assert!(int(none, "drops") > 0, "{none:?}");
        let vegas = &run(&tiny("vegas", 20, cap)).expect("runs")[0];
        assert_eq!(int(vegas, "drops"), 0, "{vegas:?}");
        assert!(int(vegas, "held_p99") < u64::from(cap) / 2, "{vegas:?}");
    }

    #[test]
    fn unknown_mode_is_named() {
        let e = run(&tiny("tsq", 2, 100)).unwrap_err().to_string();
        assert!(
            e.contains("`mode`") && e.contains("tsq") && e.contains("dc"),
            "{e}"
        );
    }
}
