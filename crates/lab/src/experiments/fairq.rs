//! `fairq`: a sparse request/response flow beside N bulk flows under one aggregate limit, the class
//! as one virtual FIFO (Carousel §5.1.1) against the class's fair mode (NicPic §3's pulls with fair
//! sharing), through the daemon's own engine ([`metronome_sim::ShaperSpec::Daemon`]).
//!
//! One point is one run: `flows` bulk TCP flows (`cc` = `cubic` or `paced`, a paced stand-in for
//! BBR) and one sparse flow ([`metronome_sim::ProbeSpec`]) through one class, `mode` = `fifo` or
//! `fair`; columns: the sparse flow's latency, the aggregate's deviation, Jain's index, drops and
//! marks.
//!
//! Where it departs from real traffic: completions at enqueue (a bump in the wire), no ECN in the
//! simulator's Cubic. The reasons: `docs/design/nicpic.md`.

use metronome_sim::{BackpressureMode, CongestionControl, ProbeSpec, SimReport, SourceKind};

use super::rows::round;
use super::simulated::{base_scenario, daemon_shaper, push_common, simulate};
use crate::error::LabError;
use crate::point::{Point, Row};

/// The experiment's registered name.
pub const NAME: &str = "fairq";

/// The modes, as the `mode` parameter spells them.
const MODES: [&str; 2] = ["fifo", "fair"];
/// The bulk senders, as the `cc` parameter spells them.
const SENDERS: [&str; 2] = ["cubic", "paced"];

/// Microseconds, rounded to 0.1 µs.
fn us(ns: u64) -> f64 {
    round(ns as f64 / 1e3, 1)
}

/// Runs one point: see the module documentation.
pub fn run(point: &Point) -> Result<Vec<Row>, LabError> {
    let mode = point.str("mode")?;
    let fair = match mode {
        "fifo" => false,
        "fair" => true,
        other => {
            return Err(LabError::param(
                point.index,
                "mode",
                format!("unknown mode {other:?}; known: {}", MODES.join(", ")),
            ))
        }
    };
    let cc = point.str("cc")?;
    let rate_bps = point.positive("rate_bps")?;
    let mut sc = base_scenario(point)?;
    sc.source = SourceKind::Tcp(CongestionControl::Cubic);
    sc.backpressure = BackpressureMode::None;
    match cc {
        "cubic" => {}
        "paced" => {
            let gain = point.f64("pacing_gain")?;
            if !(gain.is_finite() && gain > 0.0) {
                return Err(LabError::param(
                    point.index,
                    "pacing_gain",
                    format!("{gain} is not a positive number"),
                ));
            }
            let share = rate_bps as f64 / f64::from(sc.flows);
            sc.transport.pacing_bps = Some(((share * gain).round() as u64).max(1));
        }
        other => {
            return Err(LabError::param(
                point.index,
                "cc",
                format!("unknown sender {other:?}; known: {}", SENDERS.join(", ")),
            ))
        }
    }
    sc.probe = Some(ProbeSpec {
        request_bytes: point.positive_u32("request_bytes")?,
        interval_ns: point.positive("request_interval_us")? * 1_000,
    });
    sc.shaper = daemon_shaper(point, rate_bps, true, fair)?;
    let r = simulate(point, &sc)?;
    Ok(vec![row(mode, cc, rate_bps, sc.flows, &r)])
}

fn row(mode: &str, cc: &str, rate_bps: u64, flows: u32, r: &SimReport) -> Row {
    let mut row = Row::new()
        .with("mode", mode)
        .with("cc", cc)
        .with("flows", flows)
        .with("rate_bps", rate_bps)
        .with("variant", format!("{mode} {cc}"))
        .with("probe_p50_us", us(r.probe_latency.p50_ns))
        .with("probe_p99_us", us(r.probe_latency.p99_ns))
        .with("probe_samples", r.probe_latency.samples)
        .with("probe_lost", r.probe_lost)
        .with("jain_bulk", round(r.throughput.jain_fairness, 4))
        .with("ce_marked", r.drops.ce_marked)
        .with("retransmissions", r.drops.retransmissions)
        .with("bulk_rtt_p99_us", us(r.rtt.p99_ns));
    push_common(&mut row, r);
    row
}

#[cfg(test)]
mod tests {
    use super::super::rows::{int, num};
    use super::super::simulated::without_speed;
    use super::*;

    /// A point small enough for a debug build: 16 bulk flows and the sparse flow through a
    /// 100 Mbit/s class on a 1 Gbit/s NIC, 500 µs RTT, 600 ms of which 300 ms are measured.
    fn small(mode: &str, cc: &str) -> Point {
        let text = format!(
            "mode = \"{mode}\"\ncc = \"{cc}\"\nflows = 16\nrate_bps = 100_000_000\n\
             line_rate_bps = 1_000_000_000\ngranularity_ns = 10_000\nhorizon_ms = 250\n\
             capacity_packets = 8_192\nrequest_bytes = 128\nrequest_interval_us = 4_000\n\
             pacing_gain = 1.25\nbase_rtt_us = 500\nsndbuf_mtus = 2_800\nseed = 1\n\
             duration_ms = 600\nwarmup_ms = 300\nwindow_ms = 50\nstart_spread_ms = 5\n"
        );
        Point::new(toml::from_str(&text).expect("test point parses"))
    }

    #[test]
    fn deterministic_but_for_the_speed_column() {
        let point = small("fifo", "cubic");
        let a = run(&point).expect("runs");
        let b = run(&point).expect("runs");
        assert_eq!(without_speed(&a), without_speed(&b));
        assert!(int(&a[0], "probe_samples") > 20, "{a:?}");
    }

    /// The claim of the experiment in small form: at the same aggregate rate and deviation, the
    /// fair mode answers the sparse flow's requests with a p99 far below the single FIFO's.
    #[test]
    fn fair_mode_keeps_the_sparse_flow_out_of_the_bulk_queue() {
        for cc in SENDERS {
            let fifo = &run(&small("fifo", cc)).expect("runs")[0];
            let fair = &run(&small("fair", cc)).expect("runs")[0];
            // Behind the bulk flows' queue: tens of milliseconds at 100 Mbit/s.
            assert!(num(fifo, "probe_p99_us") > 10_000.0, "{fifo:?}");
            // The fair mode: base RTT + a few packet times of 120 µs each.
            assert!(
                num(fair, "probe_p99_us") * 10.0 < num(fifo, "probe_p99_us"),
                "{fair:?} vs {fifo:?}"
            );
            assert!(num(fair, "probe_p99_us") < 2_000.0, "{fair:?}");
            assert_eq!(int(fair, "probe_lost"), 0, "{fair:?}");
            for r in [fifo, fair] {
                assert!(num(r, "deviation_pct") < 1.0, "{r:?}");
            }
        }
    }

    #[test]
    fn unknown_mode_and_sender_are_named() {
        let e = run(&small("sfq", "cubic")).unwrap_err().to_string();
        assert!(e.contains("`mode`") && e.contains("fifo"), "{e}");
        let e = run(&small("fair", "bbr")).unwrap_err().to_string();
        assert!(e.contains("`cc`") && e.contains("paced"), "{e}");
    }
}
