//! A switch egress port with several service queues, the set-up of MQ-ECN (Bai et al., NSDI
//! 2016): services mapped to the queues of a [`metronome_core::MqPort`] bottleneck of rate `C`,
//! DCTCP senders, a receiver echoing CE. [`Workload::LongLived`] (greedy flows per service, §2.2,
//! §2.3, §5.1.1) or [`Workload::Poisson`] (web-search sizes, [`workload::FlowSizeCdf`], §5.1.2).
//! Hosts' NICs keep two packets per flow; delays are set for an idle-path RTT of `base_rtt_ns`.
//! Deterministic: one seeded generator; the only wall-clock figure is [`SwitchReport::wall_ns`].
//!
//! Where it departs from the paper: the port serialises at exactly `C`, no persistent connections
//! (DCTCP's `alpha` starts at 1 per flow), FCT from arrival to the last ACK, one receiver, NewReno
//! without SACK. The topology and the reasons: `docs/design/mq-ecn.md`.

mod daemon_port;
mod event_loop;
mod events;
pub mod workload;

pub use workload::{FlowSizeCdf, WEBSEARCH_CDF};

use crate::scenario::CongestionControl;
use metronome_core::Duration;
use serde::{Deserialize, Serialize};

/// MQ-ECN's EWMA weight `beta` of the old `T_round` (MQ-ECN §5.3.3: 0.75 by default).
pub const MQ_ECN_BETA: f64 = 0.75;

/// The ECN marking rule of the port (MQ-ECN §2 and §3), with `standard_threshold_bytes` as
/// `K = C x RTT x lambda`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MarkingSpec {
    /// No marking (drop-tail only).
    None,
    /// `K` on every queue (MQ-ECN §2.2, "per-queue ECN with the standard threshold").
    PerQueueStandard,
    /// `K x w_i / sum(w)` on queue `i` (MQ-ECN §2.2 Equation 2, "minimum threshold").
    PerQueueMin,
    /// `K` on the port's total bytes (MQ-ECN §2.3).
    PerPort,
    /// MQ-ECN: `min(quantum_i / T_round, C) x RTT x lambda` (§3.2 Equation 5).
    #[default]
    MqEcn,
}

/// What the senders do.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Workload {
    /// Greedy flows, `flows_per_service[s]` of them in service `s` (queue `s`); they start
    /// uniformly within `start_spread_ns`.
    LongLived {
        /// Flows per service; its length is the number of active queues.
        flows_per_service: Vec<u32>,
        /// Start times are uniform in `[0, start_spread_ns)`.
        start_spread_ns: u64,
        /// Every flow has its own sending host (MQ-ECN Figure 1: 8 flows from 8 servers);
        /// `false`: all flows of service `s` share host `s` (Figures 3 and 6: two senders).
        host_per_flow: bool,
    },
    /// `flows` flows with sizes from `cdf`, Poisson arrivals at `load` of the line rate, each in a
    /// uniformly random service of `services` and sent by a uniformly random host of `hosts`.
    Poisson {
        /// Offered load, a fraction of the line rate in (0, 1].
        load: f64,
        /// Flows to generate.
        flows: u32,
        /// Services (queues) the flows spread over.
        services: u32,
        /// Probability of each service (normalised; MQ-ECN §5.1.2's unbalanced traffic:
        /// 10/20/30/40 %); empty: uniform (balanced traffic).
        service_weights: Vec<f64>,
        /// Sending hosts.
        hosts: u32,
        /// Text of the flow-size CDF ([`WEBSEARCH_CDF`] format); `None`: web search.
        cdf: Option<String>,
    },
}

impl Default for Workload {
    fn default() -> Self {
        Workload::LongLived {
            flows_per_service: vec![1, 4],
            start_spread_ns: 1_000_000,
            host_per_flow: false,
        }
    }
}

/// One switch-port run. Defaults: MQ-ECN's testbed port (§5.1): 1 Gbit/s, base RTT 250 µs,
/// 96 KB shared buffer, standard threshold 32 KB, 4 DWRR queues of 1 MTU quantum, DCTCP with
/// RTO_min 10 ms, initial window 10 (Linux 3.18's default).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SwitchScenario {
    /// Seed of the arrival, size, placement and start-time generator.
    pub seed: u64,
    /// Port (and host NIC) line rate `C`, bit/s.
    pub line_rate_bps: u64,
    /// RTT of an MTU packet over the idle path, ns.
    pub base_rtt_ns: u64,
    /// Shared buffer of the port, bytes (drop-tail beyond it).
    pub buffer_bytes: u64,
    /// Queues of the port (services map to the first ones).
    pub queues: u32,
    /// Quantum of every queue, bytes (DWRR; WRR serves `quantum / mtu` packets per turn).
    pub quantum_bytes: u32,
    /// Weighted round robin instead of DWRR.
    pub wrr: bool,
    /// The marking rule.
    pub marking: MarkingSpec,
    /// The standard threshold `K = C x RTT x lambda`, bytes.
    pub standard_threshold_bytes: u64,
    /// MQ-ECN's `beta` ([`MQ_ECN_BETA`]).
    pub beta: f64,
    /// MQ-ECN's `T_idle`, ns; `None`: one MTU at line rate.
    pub t_idle_ns: Option<u64>,
    /// Packet size on the wire, bytes (one MTU; every data packet is full-sized).
    pub mtu: u32,
    /// Congestion control of the senders (ECN-capable when DCTCP).
    pub cc: CongestionControl,
    /// Services whose flows use non-ECN Reno instead (their packets are not ECT).
    pub non_ecn_services: Vec<u32>,
    /// Initial congestion window, packets.
    pub initial_cwnd: u32,
    /// Minimum RTO, ns (MQ-ECN §5.1: 10 ms in the testbed; §5.2: 5 ms in simulations).
    pub rto_min_ns: u64,
    /// The senders' workload.
    pub workload: Workload,
    /// Long-lived: simulated duration, ns. Poisson: the run ends at the latest this long after
    /// the last arrival, or when every flow completed.
    pub duration_ns: u64,
    /// Long-lived: measurement starts after this, ns (ignored for Poisson: all flows count).
    pub warmup_ns: u64,
    /// The port is the daemon's own shared link (`[link]` of `metronome run`, one class per
    /// service) instead of the core's port: every packet goes through the daemon's engine as a
    /// real frame (`daemon_port`).
    pub daemon: bool,
}

impl Default for SwitchScenario {
    fn default() -> Self {
        SwitchScenario {
            seed: 1,
            line_rate_bps: 1_000_000_000,
            base_rtt_ns: 250_000,
            buffer_bytes: 96_000,
            queues: 4,
            quantum_bytes: 1500,
            wrr: false,
            marking: MarkingSpec::MqEcn,
            standard_threshold_bytes: 32_000,
            beta: MQ_ECN_BETA,
            t_idle_ns: None,
            mtu: 1500,
            cc: CongestionControl::Dctcp,
            non_ecn_services: Vec::new(),
            initial_cwnd: 10,
            rto_min_ns: 10_000_000,
            workload: Workload::default(),
            duration_ns: 1_000_000_000,
            warmup_ns: 200_000_000,
            daemon: false,
        }
    }
}

/// A switch scenario the simulator cannot run.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SwitchError {
    /// A parameter is out of range.
    #[error("`{field}`: {why}")]
    Param {
        /// The field.
        field: &'static str,
        /// What is wrong.
        why: String,
    },
}

fn bad(field: &'static str, why: impl Into<String>) -> SwitchError {
    SwitchError::Param {
        field,
        why: why.into(),
    }
}

impl SwitchScenario {
    /// Serialisation time of one MTU at line rate.
    pub fn mtu_time(&self) -> Duration {
        metronome_core::Rate::from_bps(self.line_rate_bps).transmit_time(u64::from(self.mtu))
    }

    /// Number of services (active queues) of the workload.
    pub fn services(&self) -> u32 {
        match &self.workload {
            Workload::LongLived {
                flows_per_service, ..
            } => flows_per_service.len() as u32,
            Workload::Poisson { services, .. } => *services,
        }
    }

    /// Checks the parameters the event loop relies on (the port checks its own).
    pub fn validate(&self) -> Result<(), SwitchError> {
        if self.line_rate_bps == 0 {
            return Err(bad("line_rate_bps", "must be positive"));
        }
        if !(64..=9000).contains(&self.mtu) || self.mtu <= 40 {
            return Err(bad("mtu", "must lie in 64..=9000 bytes"));
        }
        if self.base_rtt_ns <= 2 * self.mtu_time().as_nanos() {
            return Err(bad(
                "base_rtt_ns",
                "must exceed two MTU serialisation times",
            ));
        }
        if self.initial_cwnd == 0 || self.rto_min_ns == 0 || self.duration_ns == 0 {
            return Err(bad(
                "initial_cwnd/rto_min_ns/duration_ns",
                "must be positive",
            ));
        }
        let services = self.services();
        if services == 0 || services > self.queues {
            return Err(bad("workload", "needs 1..=queues services"));
        }
        match &self.workload {
            Workload::LongLived {
                flows_per_service, ..
            } => {
                if flows_per_service.iter().all(|&n| n == 0) {
                    return Err(bad("workload.flows_per_service", "no flow at all"));
                }
                if self.warmup_ns >= self.duration_ns {
                    return Err(bad("warmup_ns", "must be shorter than duration_ns"));
                }
            }
            Workload::Poisson {
                load,
                flows,
                services,
                service_weights,
                hosts,
                cdf,
            } => {
                if !(*load > 0.0 && *load <= 1.0) {
                    return Err(bad("workload.load", "must lie in (0, 1]"));
                }
                let usable = |w: &f64| w.is_finite() && *w >= 0.0;
                if !service_weights.is_empty()
                    && (service_weights.len() != *services as usize
                        || !service_weights.iter().all(usable)
                        || service_weights.iter().sum::<f64>() <= 0.0)
                {
                    return Err(bad(
                        "workload.service_weights",
                        "one non-negative weight per service, not all zero",
                    ));
                }
                if *flows == 0 || *hosts == 0 {
                    return Err(bad("workload.flows/hosts", "must be positive"));
                }
                if let Some(text) = cdf {
                    FlowSizeCdf::parse(text).map_err(|e| bad("workload.cdf", e.to_string()))?;
                }
            }
        }
        Ok(())
    }
}

/// Mean and percentiles of a set of flow completion times, µs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct FctSummary {
    /// Completed flows in the class.
    pub flows: u64,
    /// Mean FCT, µs.
    pub mean_us: f64,
    /// Median FCT, µs.
    pub p50_us: f64,
    /// 99th percentile FCT (nearest rank), µs.
    pub p99_us: f64,
}

/// What one switch run measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SwitchReport {
    /// Goodput of each service after the warm-up (in-order payload at the receiver), bit/s.
    pub service_goodput_bps: Vec<f64>,
    /// Largest over smallest service goodput (services with flows; 1 = equal shares).
    pub share_max_min_ratio: f64,
    /// Bytes the port transmitted over line rate times the measured time.
    pub utilization: f64,
    /// Time-averaged bytes in the port over the measured time.
    pub avg_queue_bytes: f64,
    /// Largest number of bytes in the port during the measured time.
    pub max_queue_bytes: u64,
    /// Echoed-timestamp RTT samples of ACKs in the measured time: mean, µs.
    pub rtt_mean_us: f64,
    /// Median RTT, µs.
    pub rtt_p50_us: f64,
    /// 99th percentile RTT, µs.
    pub rtt_p99_us: f64,
    /// FCT of every completed flow (Poisson).
    pub fct_all: FctSummary,
    /// FCT of flows of at most 100 KB (MQ-ECN Figures 7-8 (b, c)).
    pub fct_small: FctSummary,
    /// Small flows (at most 100 KB) that suffered at least one retransmission timeout: when
    /// they exceed 1 % of the small flows, the small-flow p99 is at least `RTO_min`.
    pub small_flows_timed_out: u64,
    /// 99th percentile FCT of the small flows without a timeout (nearest rank), µs.
    pub fct_small_p99_no_timeout_us: f64,
    /// FCT of flows of 100 KB to 10 MB.
    pub fct_medium: FctSummary,
    /// FCT of flows above 10 MB (MQ-ECN Figures 7-8 (d)).
    pub fct_large: FctSummary,
    /// Flows that had not completed when the run ended.
    pub unfinished_flows: u64,
    /// Data packets the hosts sent (new and retransmitted).
    pub packets_sent: u64,
    /// Data packets that reached the receiver.
    pub packets_received: u64,
    /// Packets the port accepted with a CE mark.
    pub ce_marked: u64,
    /// CE marks found on packets that were not ECN-capable (must be 0).
    pub ce_on_non_ect: u64,
    /// Packets dropped because the shared buffer was full.
    pub buffer_drops: u64,
    /// Non-ECT packets dropped instead of marked (the port's non-ECT policy).
    pub non_ect_drops: u64,
    /// Packets the port refused for another reason (unknown queue, longer than the MTU).
    pub other_rejects: u64,
    /// Packets still in hosts, on links or in the port when the run ended.
    pub packets_in_flight_at_end: u64,
    /// TCP retransmissions.
    pub retransmits: u64,
    /// TCP retransmission timeouts.
    pub timeouts: u64,
    /// The port's own count of packets it marked (core counter; equals `ce_marked`).
    pub port_marked: u64,
    /// The port's own count of packets refused for a full buffer (core counter).
    pub port_buffer_drops: u64,
    /// Non-ECT packets the rule would have marked and the port passed unmarked (core counter).
    pub non_ect_passes: u64,
    /// `T_round` samples the port took (MQ-ECN §3.3.1; core counter).
    pub t_round_samples: u64,
    /// Idle decays of `T_round` (MQ-ECN §3.3.1, after `T_idle` of idleness; core counter).
    pub idle_decays: u64,
    /// Mean of the port's MQ-ECN threshold of queue 0 sampled at each enqueue, bytes.
    pub mean_threshold_q0_bytes: f64,
    /// Simulated time of the run, ns.
    pub simulated_ns: u64,
    /// Events processed.
    pub events: u64,
    /// Wall-clock time of the run, ns (the only non-deterministic field).
    pub wall_ns: u64,
}

/// Runs `sc` to its end.
pub fn run(sc: &SwitchScenario) -> Result<SwitchReport, SwitchError> {
    sc.validate()?;
    let wall = std::time::Instant::now();
    let mut sim = event_loop::SwitchSim::new(sc)?;
    sim.run();
    let mut report = sim.report();
    report.wall_ns = wall.elapsed().as_nanos() as u64;
    Ok(report)
}

#[cfg(test)]
mod tests;
