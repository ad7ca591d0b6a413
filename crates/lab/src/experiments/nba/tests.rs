//! The `nba` experiment at small scale: phases of 600 ms instead of 2 s.

use super::*;
use crate::experiments::rows::num;

fn point(allocator: &str, cores: u64, splits: &str, period_ms: u64) -> Point {
    let text = format!(
        "allocator = \"{allocator}\"\ncores = {cores}\nsplits = \"{splits}\"\n\
         aggregate_bps = 1_000_000_000\noffered_bps = 1_200_000_000\nperiod_ms = {period_ms}\n\
         phase_ms = 600\nshift_lag_ms = 37\npacket_bytes = 1500\ninflight_packets = 16\n\
         source_buffer_packets = 64\nconverge_pct = 2.0\ntrace = false\n"
    );
    Point::new(toml::from_str(&text).expect("test point parses"))
}

fn converged(row: &Row) -> bool {
    row.get("converged").and_then(|v| v.as_bool()) == Some(true)
}

const TWO: &str = "80/20,20/80,0/100";
const FOUR: &str = "40/40/10/10,10/10/40/40,0/0/0/100";

#[test]
fn nba_keeps_two_cores_within_two_percent_and_converges_in_three_periods() {
    let rows = run(&point("nba", 2, TWO, 100)).expect("runs");
    assert_eq!(rows.len(), 3);
    for row in &rows {
        assert!(converged(row), "{row:?}");
        assert!(num(row, "periods_to_converge") <= 3.0, "{row:?}");
        assert!(num(row, "deviation_pct") < 2.0, "{row:?}");
        // Conformance: never above the limit by more than one packet per window.
        assert!(num(row, "achieved_bps") <= 1e9 + 120_000.0, "{row:?}");
    }
    // The last phase gives core 0 only its idle floor (1 % of the aggregate, Carousel §5.3).
    assert_eq!(
        rows[2].get("rates_mbps").and_then(|v| v.as_str()),
        Some("10/990")
    );
}

#[test]
fn nba_converges_with_four_cores_and_idle_cores_keep_their_floor() {
    let rows = run(&point("nba", 4, FOUR, 100)).expect("runs");
    for row in &rows[..2] {
        assert!(converged(row), "{row:?}");
        assert!(num(row, "periods_to_converge") <= 3.0, "{row:?}");
        assert!(num(row, "deviation_pct") < 2.0, "{row:?}");
    }
    // 0/0/0/100: three idle cores keep 1 % each (Carousel §5.3), so the busy one gets 970 Mbit/s
    // and the aggregate cannot come within 2 % of the target.
    assert_eq!(
        rows[2].get("rates_mbps").and_then(|v| v.as_str()),
        Some("10/10/10/970")
    );
    assert!(!converged(&rows[2]), "{:?}", rows[2]);
}

#[test]
fn a_static_split_misses_the_target_when_demand_is_skewed() {
    let rows = run(&point("static", 2, TWO, 100)).expect("runs");
    // 20/80 of 1.2 Gbit/s against 500/500: 240 + 500 = 740 Mbit/s, 26 % short.
    assert!(!converged(&rows[1]), "{:?}", rows[1]);
    let dev = num(&rows[1], "deviation_pct");
    assert!((dev - 26.0).abs() < 1.0, "{:?}", rows[1]);
    assert_eq!(
        rows[1].get("rates_mbps").and_then(|v| v.as_str()),
        Some("500/500")
    );
}

#[test]
fn deterministic() {
    let a = run(&point("nba", 2, TWO, 50)).expect("runs");
    let b = run(&point("nba", 2, TWO, 50)).expect("runs");
    assert_eq!(a, b);
}

#[test]
fn bad_splits_are_refused() {
    for bad in ["80/20,10/80", "80/20/0", "x/100"] {
        let e = run(&point("nba", 2, bad, 100)).unwrap_err();
        assert!(e.is_bad_input() && e.to_string().contains("splits"), "{e}");
    }
    assert!(run(&point("magic", 2, TWO, 100)).is_err());
}

#[test]
fn trace_rows_show_the_aggregate_per_window() {
    let mut p = point("nba", 2, TWO, 100);
    let rows_of = |p: &Point| run(p).expect("runs");
    let phases = rows_of(&p);
    p.params.insert("trace".into(), toml::Value::Boolean(true));
    let trace = rows_of(&p);
    // 3 phases of 600 ms plus the 37 ms lag: 18 whole windows of 100 ms.
    assert_eq!(trace.len(), 18);
    assert_eq!(num(&trace[0], "time_ms"), 0.0);
    assert_eq!(num(&trace[17], "time_ms"), 1700.0);
    // Window 0 runs on the equal split: 500 + 240 Mbit/s.
    assert!(
        (num(&trace[0], "window_bps") - 740e6).abs() < 2e6,
        "{:?}",
        trace[0]
    );
    // The phase rows' settled mean is the mean of the trace's settled windows.
    let last: Vec<f64> = trace[14..].iter().map(|r| num(r, "window_bps")).collect();
    let mean = last.iter().sum::<f64>() / last.len() as f64;
    assert!(
        (mean - num(&phases[2], "achieved_bps")).abs() < 1.0,
        "{mean} vs {:?}",
        phases[2]
    );
}
