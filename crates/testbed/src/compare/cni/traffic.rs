//! The traffic of `compare --cni` and of the CNI tests: kernel TCP per pod in one direction at a
//! time, each pod's rate measured at the receiving end, and the fair probe.
//!
//! What each function runs and measures is on it: [`run_pods`] (every pod at once, one
//! direction), [`pod_rate`] (a pod's rate from its goodput windows: their median) and
//! [`fair_probe`]; the two directions run one after the other, since the ACKs of one travel in
//! the other.

use crate::compare::{answered, CompareError, TAIL};
use crate::netns::cni::CniTopology;
use crate::netns::TopoError;
use crate::stats::{mean, mean_abs_deviation_pct, median};
use crate::trafficgen::{self, FlowGroup, TrafficError, TrafficPlan, TrafficReport};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Bulk connections of the pod that carries the fair probe: 16, the bulk of the probe runs of
/// `metronome compare` (`FULL_FLOWS`' middle count).
pub const PROBE_BULK_FLOWS: usize = 16;

/// Which way a run's traffic goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Pod -> receiver (`egressRate`: what the pod sends).
    Egress,
    /// Receiver -> pod (`ingressRate`: what the pod receives).
    Ingress,
}

impl Direction {
    /// Both, in report order.
    pub const BOTH: [Direction; 2] = [Direction::Egress, Direction::Ingress];

    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Direction::Egress => "egress",
            Direction::Ingress => "ingress",
        }
    }
}

/// One pod's rate over the measured windows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PodRate {
    /// The windows' median on the wire, bits/s.
    pub median_bps: f64,
    /// Their mean on the wire, bits/s.
    pub mean_bps: f64,
    /// Their mean absolute deviation from the limit, percent.
    pub deviation_pct: f64,
}

/// Runs `flows` TCP connections per pod of `pods` (indices into [`CniTopology::pods`], each with
/// an address from its ADD) in `direction`, all pods at once, pod `k` of the list to port
/// `first_port + k`, for `duration`, each connection capped at `cap` bytes; returns each pod's
/// traffic report, in the list's order.
///
/// Every pod at once, [`Direction::Egress`] (the pod sends to the receiver: what
///   leaves the node through the uplink) or [`Direction::Ingress`] (the receiver sends to the
///   pod: what the node delivers through the pod's host veth), `flows` TCP connections per pod,
///   each pod to its own port. The sinks count per pod ([`crate::trafficgen`]).
///
/// The two directions run one after the other, not together: the ACKs of one direction travel
/// in the other, so a limit on what the pod sends would also carry the ACKs of what it receives,
/// and neither direction's figure would be the limit's alone.
pub fn run_pods(
    topo: &CniTopology,
    pods: &[usize],
    (flows, direction): (usize, Direction),
    first_port: u16,
    (duration, cap): (Duration, u64),
) -> Result<Vec<TrafficReport>, CompareError> {
    let mut threads = Vec::new();
    for (k, &i) in pods.iter().enumerate() {
        let pod = topo.pods.get(i).ok_or_else(|| no_pod(i))?;
        let addr = pod.addr.ok_or_else(|| no_pod(i))?;
        let port = first_port.saturating_add(u16::try_from(k).unwrap_or(u16::MAX));
        let mut group = FlowGroup::tcp(pod.ns.name(), port, flows);
        group.max_bytes_per_flow = cap;
        let receiver = topo.node.receiver.clone();
        let (snd, rcv, to) = match direction {
            Direction::Egress => (pod.ns.clone(), receiver, topo.node.receiver_addr),
            Direction::Ingress => (receiver, pod.ns.clone(), addr),
        };
        let plan = TrafficPlan::new(to, vec![group], duration);
        threads.push(std::thread::spawn(move || {
            trafficgen::run(&plan, Some(&snd), Some(&rcv))
        }));
    }
    crate::compare::attach::join_traffic(threads)
}

/// A pod without an address (never added, or deleted) or an index beyond the pods.
fn no_pod(i: usize) -> CompareError {
    CompareError::Topo(TopoError::Io(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("pod {i} has no address (no ADD result)"),
    )))
}

/// A pod's rate from its goodput windows (100 ms) after the warm-up, scaled to
/// full segments on the wire ([`measure::WIRE_PER_PAYLOAD`], as `compare --attach` measures
/// its workloads, [`crate::compare::attach::workload_rate`]): the windows' **median** (a
/// receiver descheduled on a shared machine reads its socket late and puts a burst above the
/// limit into a later window without the limit having let more through; see
/// `crates/testbed/tests/attach_kernel.rs`), their mean beside it, and their mean absolute
/// deviation from the limit.
///
/// The rate of `report`'s first group over the windows from `warmup` on, `span` long, on the
/// wire, against `limit_bps` (above); `None` when no window falls in it.
pub fn pod_rate(
    report: &TrafficReport,
    (warmup, span): (Duration, Duration),
    limit_bps: u64,
) -> Option<PodRate> {
    let windows = crate::compare::attach::wire_windows(report, (warmup, span))?;
    let deviation_pct = mean_abs_deviation_pct(&windows, limit_bps as f64)?;
    let mean_bps = mean(&windows);
    Some(PodRate {
        median_bps: median(&windows)?,
        mean_bps,
        deviation_pct,
    })
}

/// What the fair probe measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeFigures {
    /// Pings answered.
    pub samples: usize,
    /// Median RTT, microseconds.
    pub p50_us: u64,
    /// 99th percentile RTT, microseconds.
    pub p99_us: u64,
}

/// A pod sending [`PROBE_BULK_FLOWS`] bulk TCP connections to the receiver at
/// its egress limit and, from the warm-up on, a sparse probe (an 8-byte TCP ping every 10 ms)
/// from the same pod: the probe's RTT p50/p99, as `compare --attach` measures its probe (a
/// connection of its own opened after the warm-up, so slow start's queue is not in it).
///
/// The fair probe (above) from pod `pod` (with an address): [`PROBE_BULK_FLOWS`]
/// connections to `port` of the receiver for the warm-up, `span` and [`crate::compare::TAIL`],
/// each capped at `cap` bytes, and the probe to `port + 1` for `span` from the warm-up on.
/// `Ok(None)` when no ping was answered.
pub fn fair_probe(
    topo: &CniTopology,
    pod: usize,
    port: u16,
    (warmup, span, cap): (Duration, Duration, u64),
) -> Result<Option<ProbeFigures>, CompareError> {
    let p = topo.pods.get(pod).ok_or_else(|| no_pod(pod))?;
    if p.addr.is_none() {
        return Err(no_pod(pod));
    }
    let (snd, rcv) = (p.ns.clone(), topo.node.receiver.clone());
    let to = topo.node.receiver_addr;
    let mut group = FlowGroup::tcp("bulk", port, PROBE_BULK_FLOWS);
    group.max_bytes_per_flow = cap;
    let bulk_plan = TrafficPlan::new(to, vec![group], warmup + span + TAIL);
    let (s, r) = (snd.clone(), rcv.clone());
    let bulk = std::thread::spawn(move || trafficgen::run(&bulk_plan, Some(&s), Some(&r)));
    std::thread::sleep(warmup);
    let probe_plan = TrafficPlan::new(to, Vec::new(), span).with_probe(port.saturating_add(1));
    let probe = trafficgen::run(&probe_plan, Some(&snd), Some(&rcv));
    let bulk = bulk.join().map_err(|_| TrafficError::ThreadPanicked)?;
    let probe = probe?.probe.unwrap_or_default();
    bulk?;
    Ok(answered(&probe).map(|p| ProbeFigures {
        samples: p.samples,
        p50_us: p.p50_us,
        p99_us: p.p99_us,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::measure;
    use crate::trafficgen::GroupReport;

    fn report(windows_bps: Vec<f64>) -> TrafficReport {
        TrafficReport {
            groups: vec![GroupReport {
                name: "p0".into(),
                port: 1,
                bytes: 1,
                sent_bytes: 1,
                bytes_per_flow: vec![1],
                windows_bps,
                received_at: Vec::new(),
            }],
            probe: None,
            elapsed: Duration::from_secs(1),
            started: std::time::Instant::now(),
        }
    }

    #[test]
    fn the_median_ignores_a_late_read_burst() {
        let payload = |wire: f64| wire / measure::WIRE_PER_PAYLOAD;
        // Warm-up window (skipped), then four windows, one of them a burst read late.
        let r = report(vec![
            payload(10e6),
            payload(100e6),
            payload(100e6),
            payload(180e6),
            payload(100e6),
        ]);
        let rate = pod_rate(
            &r,
            (Duration::from_millis(100), Duration::from_millis(400)),
            100_000_000,
        )
        .unwrap();
        assert!((rate.median_bps - 100e6).abs() < 1.0, "{rate:?}");
        assert!((rate.mean_bps - 120e6).abs() < 1.0, "{rate:?}");
        assert!((rate.deviation_pct - 20.0).abs() < 1e-6, "{rate:?}");
    }

    #[test]
    fn no_window_after_the_warm_up_is_no_rate() {
        let r = report(vec![1e6]);
        let timing = (Duration::from_millis(500), Duration::from_millis(400));
        assert_eq!(pod_rate(&r, timing, 1), None);
    }
}
