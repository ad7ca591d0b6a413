//! `carousel-conformance`: rate conformance of Carousel's timing wheel, of the `sch_fq` tree
//! (FQ/pacing) and of an HTB-like token bucket driven by a 10 ms timer, against the target rate,
//! the number of flows and the wheel's slot granularity (Carousel §7.1.1 and §7.1.3, Figures 12, 13
//! and 16), on the simulator (`metronome-sim`).
//!
//! One point is one run of `flows` greedy TCP Cubic flows through the `shaper`: `timing_wheel` (the
//! daemon's engine, [`ShaperSpec::Daemon`], with Deferred Completions at the sources), `fq_tree`
//! (per-flow pacing, FQ's packet limit, TSQ) or `token_bucket_rr` (HTB's timer and default burst,
//! TSQ); the deviation is taken from 100 ms samples against `target_bps`.
//!
//! Where it departs from the paper: exact timers, no lock contention and no TSO, so only the errors
//! of each structure show. The paper's findings, the model and the reasons:
//! `docs/design/carousel.md`.

use metronome_sim::{
    BackpressureMode, CongestionControl, DaemonBackpressure, ShaperSpec, SourceKind,
};

use super::rows::round;
use super::simulated::{base_scenario, push_common, simulate};
use crate::error::LabError;
use crate::point::{Point, Row};

/// The experiment's registered name.
pub const NAME: &str = "carousel-conformance";

/// The shapers, as the `shaper` parameter spells them.
const SHAPERS: [&str; 3] = ["timing_wheel", "fq_tree", "token_bucket_rr"];

/// Runs one point: see the module documentation.
pub fn run(point: &Point) -> Result<Vec<Row>, LabError> {
    let shaper = point.str("shaper")?;
    let target_bps = point.positive("target_bps")?;
    let mut sc = base_scenario(point)?;
    sc.source = SourceKind::Tcp(CongestionControl::Cubic);
    let tsq = BackpressureMode::Tsq {
        limit: point.positive_u32("tsq_limit")?,
    };
    let mut granularity_ns = 0;
    (sc.shaper, sc.backpressure) = match shaper {
        "timing_wheel" => {
            granularity_ns = point.positive("granularity_ns")?;
            let spec = ShaperSpec::Daemon {
                granularity_ns,
                horizon_ns: point.positive("horizon_ms")? * 1_000_000,
                aggregate_bps: Some(target_bps),
                per_flow_bps: None,
                capacity_packets: point.positive_u32("wheel_capacity_packets")?,
                backpressure: DaemonBackpressure::None,
                reject_beyond_horizon: false,
                fair: false,
            };
            let dc = BackpressureMode::DeferredCompletions {
                limit: point.positive_u32("dc_limit")?,
            };
            (spec, dc)
        }
        "fq_tree" => {
            let spec = ShaperSpec::FqTree {
                aggregate_bps: None,
                per_flow_bps: Some((target_bps / u64::from(sc.flows)).max(1)),
                capacity_packets: point.positive_u32("fq_capacity_packets")?,
            };
            (spec, tsq)
        }
        "token_bucket_rr" => {
            let hz = point.positive("htb_hz")?;
            let burst = target_bps / 8 / hz + u64::from(sc.transport.mtu);
            let spec = ShaperSpec::TokenBucketRr {
                rate_bps: target_bps,
                burst_bytes: u32::try_from(burst).map_err(|_| {
                    LabError::param(point.index, "htb_hz", "rate / HZ over 4 GB: raise it")
                })?,
                timer_ns: point.positive("htb_timer_ms")? * 1_000_000,
                capacity_packets: point.positive_u32("htb_capacity_packets")?,
            };
            (spec, tsq)
        }
        other => {
            return Err(LabError::param(
                point.index,
                "shaper",
                format!("unknown shaper {other:?}; known: {}", SHAPERS.join(", ")),
            ))
        }
    };
    let r = simulate(point, &sc)?;
    let target = target_bps as f64;
    let windows = &r.throughput.windows_bps;
    let deviation_pct = windows.iter().map(|w| (w - target).abs()).sum::<f64>()
        / windows.len().max(1) as f64
        / target
        * 100.0;
    let mut row = Row::new()
        .with("shaper", shaper)
        .with("target_bps", target_bps)
        .with("flows", sc.flows)
        .with("granularity_ns", granularity_ns)
        .with("held_p99", r.shaper.held.p99);
    push_common(&mut row, &r);
    row.set("deviation_pct", round(deviation_pct, 4));
    Ok(vec![row])
}

#[cfg(test)]
mod tests {
    use super::super::rows::num;
    use super::super::simulated::without_speed;
    use super::*;

    /// A point small enough for a debug build: `flows` flows, 1 Gbit/s target on a 2 Gbit/s NIC,
    /// 200 µs RTT, 300 ms of which 100 ms warm-up, 50 ms windows.
    fn tiny(shaper: &str, flows: u32, granularity_ns: u64) -> Point {
        let text = format!(
            "shaper = \"{shaper}\"\ntarget_bps = 1_000_000_000\nflows = {flows}\n\
             granularity_ns = {granularity_ns}\nline_rate_bps = 2_000_000_000\nhorizon_ms = 2_000\n\
             wheel_capacity_packets = 70_000\nfq_capacity_packets = 10_000\n\
             htb_capacity_packets = 16_000\nhtb_timer_ms = 10\nhtb_hz = 100\ndc_limit = 2\n\
             tsq_limit = 2\nbase_rtt_us = 200\nsndbuf_mtus = 2_800\nseed = 1\nduration_ms = 300\n\
             warmup_ms = 100\nwindow_ms = 50\nstart_spread_ms = 1\n"
        );
        Point::new(toml::from_str(&text).expect("test point parses"))
    }

    #[test]
    fn deterministic_but_for_the_speed_column() {
        let point = tiny("timing_wheel", 4, 2_000);
        let a = run(&point).expect("runs");
        let b = run(&point).expect("runs");
        assert_eq!(without_speed(&a), without_speed(&b));
        assert!(num(&a[0], "events_per_sec") > 0.0);
    }

    /// Carousel §7.1.1: the timing wheel stays within about 0.5 % of its target.
    #[test]
    fn timing_wheel_conforms_within_half_a_percent() {
        for flows in [1, 10] {
            let row = &run(&tiny("timing_wheel", flows, 2_000)).expect("runs")[0];
            assert!(num(row, "deviation_pct") <= 0.5, "{row:?}");
            assert_eq!(num(row, "drops"), 0.0, "{row:?}");
        }
    }

    /// The simulator's NIC takes a due packet as soon as it is free (a busy-polling Software
    /// NIC), so a slot 1 000 times coarser only makes bursts: with Deferred Completions the flows
    /// refill the current slot at once and the aggregate keeps its rate (see the module docs).
    #[test]
    fn coarse_wheel_bursts_but_keeps_the_rate() {
        let row = &run(&tiny("timing_wheel", 10, 2_000_000)).expect("runs")[0];
        assert!(num(row, "deviation_pct") <= 1.0, "{row:?}");
    }

    /// FQ paces each flow to its share of the target exactly; the HTB-like bucket, whose burst
    /// covers its 10 ms timer, loses no tokens to the timer but sends them in bursts, so its
    /// 50 ms samples scatter around the target.
    #[test]
    fn fq_and_htb_like_bucket_keep_their_rate_at_small_scale() {
        let fq = &run(&tiny("fq_tree", 10, 2_000)).expect("runs")[0];
        assert!(num(fq, "deviation_pct") <= 1.0, "{fq:?}");
        assert_eq!(num(fq, "granularity_ns"), 0.0, "{fq:?}");
        let htb = &run(&tiny("token_bucket_rr", 10, 2_000)).expect("runs")[0];
        let achieved = num(htb, "achieved_bps") / 1e9;
        assert!((0.95..1.1).contains(&achieved), "{htb:?}");
        assert!(
            num(htb, "deviation_pct") > num(fq, "deviation_pct"),
            "{htb:?}"
        );
    }

    #[test]
    fn unknown_shaper_is_named() {
        let e = run(&tiny("heap", 1, 2_000)).unwrap_err().to_string();
        assert!(e.contains("`shaper`") && e.contains("heap"), "{e}");
    }
}
