//! `wheel-granularity`: rate conformance of one timing wheel as its slot granularity grows
//! (Carousel §7.1.3, Figure 16, with the metric of §7.1.1), in simulated time with the daemon's own
//! engine ([`ShaperSpec::Daemon`]), deterministic: no TCP, no clock, no randomness.
//!
//! `flows` flows share one aggregate policy of `target_bps`, each keeping `packets_per_flow`
//! packets in the shaper; the NIC polls the wheel every `granularity_ns`; the deviation is the mean
//! of |achieved − target| over 100 ms windows.
//!
//! Where it departs from the paper: no TCP, congestion control or real NIC, so the wheel is the
//! only source of error. The model and the reasons: `docs/design/carousel.md`.

use std::collections::VecDeque;

use metronome_core::{ClassId, FlowId, PacketRef, Rate, Timestamp};
use metronome_sim::shaper::{Shaper, Verdict};
use metronome_sim::{DaemonBackpressure, ShaperSpec};

use super::rows::round;
use crate::error::LabError;
use crate::point::{Point, Row};

/// The experiment's registered name.
pub const NAME: &str = "wheel-granularity";

/// The only shaper modelled so far: Carousel's timing wheel with the Global Pool.
const SHAPER_TIMING_WHEEL: &str = "timing_wheel";

/// The parameters of one run, read from a [`Point`].
#[derive(Clone, Debug, PartialEq)]
struct Params {
    shaper: String,
    target_bps: u64,
    line_rate_bps: u64,
    flows: u32,
    packets_per_flow: u32,
    packet_bytes: u16,
    granularity_ns: u64,
    horizon_ns: u64,
    duration_ns: u64,
    window_ns: u64,
}

impl Params {
    fn read(p: &Point) -> Result<Self, LabError> {
        let small = |name: &str, max: u64| p.u64_in(name, 1, max);
        let shaper = p.str("shaper")?.to_string();
        if shaper != SHAPER_TIMING_WHEEL {
            return Err(LabError::param(
                p.index,
                "shaper",
                format!("unknown shaper {shaper:?}; known: {SHAPER_TIMING_WHEEL}"),
            ));
        }
        let ms = 1_000_000;
        let params = Params {
            shaper,
            target_bps: p.positive("target_bps")?,
            line_rate_bps: p.positive("line_rate_bps")?,
            flows: small("flows", 1 << 20)? as u32,
            packets_per_flow: small("packets_per_flow", 1 << 16)? as u32,
            packet_bytes: small("packet_bytes", u64::from(u16::MAX))? as u16,
            granularity_ns: p.positive("granularity_ns")?,
            horizon_ns: small("horizon_ms", 60_000)? * ms,
            duration_ns: small("duration_ms", 3_600_000)? * ms,
            window_ns: small("window_ms", 3_600_000)? * ms,
        };
        if params.duration_ns < params.window_ns {
            return Err(LabError::param(
                p.index,
                "duration_ms",
                "must cover at least one window_ms",
            ));
        }
        if u64::from(params.flows) * u64::from(params.packets_per_flow) > 1 << 24 {
            return Err(LabError::param(
                p.index,
                "packets_per_flow",
                "flows x packets_per_flow must be at most 16 Mi packets",
            ));
        }
        Ok(params)
    }
}

/// Runs one point: see the module documentation.
pub fn run(point: &Point) -> Result<Vec<Row>, LabError> {
    let p = Params::read(point)?;
    let windows = measure(&p, point.index)?;
    let target = p.target_bps as f64;
    let window_s = p.window_ns as f64 / 1e9;
    let rates: Vec<f64> = windows
        .iter()
        .map(|&bytes| bytes as f64 * 8.0 / window_s)
        .collect();
    let deviation_pct =
        rates.iter().map(|r| (r - target).abs()).sum::<f64>() / rates.len() as f64 / target * 100.0;
    let achieved_bps = rates.iter().sum::<f64>() / rates.len() as f64;
    Ok(vec![Row::new()
        .with("shaper", p.shaper.as_str())
        .with("target_bps", p.target_bps)
        .with("flows", p.flows)
        .with("granularity_ns", p.granularity_ns)
        .with("deviation_pct", round(deviation_pct, 4))
        .with("achieved_bps", achieved_bps.round() as u64)])
}

/// The event loop: returns the bytes sent in each measurement window.
fn measure(p: &Params, point: usize) -> Result<Vec<u64>, LabError> {
    let in_shaper = p.flows as usize * p.packets_per_flow as usize;
    let spec = ShaperSpec::Daemon {
        granularity_ns: p.granularity_ns,
        horizon_ns: p.horizon_ns,
        aggregate_bps: Some(p.target_bps),
        per_flow_bps: None,
        capacity_packets: in_shaper as u32, // at most 16 Mi: checked by `Params::read`
        backpressure: DaemonBackpressure::None,
        reject_beyond_horizon: true,
        fair: false,
    };
    let len = u32::from(p.packet_bytes);
    let mut shaper =
        Shaper::new(&spec, p.flows, len, None, false).map_err(|e| LabError::Experiment {
            point,
            message: format!("the daemon's engine cannot run this point: {e}"),
        })?;
    let line = Rate::from_bps(p.line_rate_bps);
    let tx_time = line.transmit_time(u64::from(p.packet_bytes));
    let g = p.granularity_ns;
    let end = Timestamp::from_nanos(p.duration_ns);

    let mut next_id: u32 = 0;
    let mut send = |shaper: &mut Shaper, now: Timestamp, flow: u32| -> Result<(), LabError> {
        let pkt = PacketRef::new(next_id, FlowId(flow), ClassId(0), p.packet_bytes);
        next_id = next_id.wrapping_add(1);
        match shaper.offer(now, pkt) {
            Verdict::Enqueued => Ok(()),
            _ => Err(LabError::Experiment {
                point,
                message: format!(
                    "the engine dropped a packet at {} ns (its delay reaches the horizon): \
                     raise horizon_ms",
                    now.as_nanos()
                ),
            }),
        }
    };
    for flow in 0..p.flows {
        for _ in 0..p.packets_per_flow {
            send(&mut shaper, Timestamp::ZERO, flow)?;
        }
    }

    let mut windows = vec![0u64; (p.duration_ns / p.window_ns) as usize];
    // Transmissions in flight, in order of completion (the NIC serialises them).
    let mut completions: VecDeque<(Timestamp, u32)> = VecDeque::with_capacity(in_shaper);
    let mut busy_until = Timestamp::ZERO;
    let mut next_tick = Timestamp::ZERO;
    // zD is off: nothing is ever resumed.
    let mut resumed = Vec::new();
    loop {
        let completion = completions.front().map(|&(t, _)| t);
        let poll = shaper.next_due().map(|due| due.max(next_tick));
        let now = match (completion, poll) {
            (Some(c), Some(q)) => c.min(q),
            (Some(t), None) | (None, Some(t)) => t,
            (None, None) => break,
        };
        if now >= end {
            break;
        }
        if completion == Some(now) {
            // A packet left the NIC: count it, and its flow hands the shaper its next packet.
            let (_, flow) = completions.pop_front().unwrap_or((now, 0));
            let w = (now.as_nanos() / p.window_ns) as usize;
            if let Some(bytes) = windows.get_mut(w) {
                *bytes += u64::from(p.packet_bytes);
            }
            send(&mut shaper, now, flow)?;
            continue;
        }
        // The NIC polls: everything due goes out back to back at line rate.
        while let Some((pkt, _)) = shaper.dequeue_one(now, &mut resumed) {
            busy_until = busy_until.max(now) + tx_time;
            completions.push_back((busy_until, pkt.flow.0));
        }
        next_tick = Timestamp::from_nanos((now.as_nanos() / g + 1) * g);
    }
    Ok(windows)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A point small enough for a debug build: 1 Gbit/s for 20 ms in 10 ms windows.
    fn tiny(granularity_ns: u64, flows: u64, packets_per_flow: u64) -> Point {
        let text = format!(
            "shaper = \"timing_wheel\"\ntarget_bps = 1_000_000_000\nline_rate_bps = 10_000_000_000\n\
             flows = {flows}\npackets_per_flow = {packets_per_flow}\npacket_bytes = 1500\n\
             granularity_ns = {granularity_ns}\nhorizon_ms = 100\nduration_ms = 20\nwindow_ms = 10\n"
        );
        Point::new(toml::from_str(&text).expect("test point parses"))
    }

    fn deviation(row: &Row) -> f64 {
        row.get("deviation_pct")
            .and_then(|v| v.as_f64())
            .expect("deviation is a number")
    }

    #[test]
    fn deterministic() {
        let point = tiny(2_000, 10, 4);
        let a = run(&point).expect("runs");
        let b = run(&point).expect("runs");
        assert_eq!(a, b);
        assert_eq!(
            a[0].columns().collect::<Vec<_>>(),
            [
                "shaper",
                "target_bps",
                "flows",
                "granularity_ns",
                "deviation_pct",
                "achieved_bps"
            ]
        );
    }

    #[test]
    fn fine_wheel_keeps_the_rate_coarse_wheel_with_few_packets_does_not() {
        let fine = run(&tiny(2_000, 10, 4)).expect("runs");
        assert!(deviation(&fine[0]) < 1.0, "{:?}", fine[0]);
        // 4 packets of 1500 B per 2 ms slot is 24 Mbit/s, far below 1 Gbit/s.
        let coarse = run(&tiny(2_000_000, 1, 4)).expect("runs");
        assert!(deviation(&coarse[0]) > 50.0, "{:?}", coarse[0]);
    }

    #[test]
    fn bad_parameters_are_named() {
        let mut point = tiny(2_000, 10, 4);
        point.params.insert("shaper".into(), "heap".into());
        let e = run(&point).unwrap_err().to_string();
        assert!(e.contains("`shaper`") && e.contains("heap"), "{e}");
        let mut point = tiny(0, 10, 4);
        point.params.insert("flows".into(), "many".into());
        let e = run(&point).unwrap_err().to_string();
        assert!(
            e.contains("`flows`") || e.contains("`granularity_ns`"),
            "{e}"
        );
        let mut point = tiny(2_000, 10, 4);
        point
            .params
            .insert("horizon_ms".into(), toml::Value::Integer(1));
        point
            .params
            .insert("flows".into(), toml::Value::Integer(1000));
        let e = run(&point).unwrap_err().to_string();
        assert!(e.contains("horizon_ms"), "{e}");
    }
}
