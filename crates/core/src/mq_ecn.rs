//! ECN marking for a multi-queue port: the standard per-queue, minimum per-queue and per-port
//! thresholds the MQ-ECN paper measures, and MQ-ECN itself (Bai et al., NSDI '16, §2-§3).
//!
//! [`Marking::PerQueueStandard`] (§2.1, Equation 1), [`Marking::PerQueueMin`] (§2.2, Equation 2),
//! [`Marking::PerPort`] (§2.3), [`Marking::MqEcn`] (§3.2, Equation 5, with §3.3.1's `T_round`
//! average and idle decay; the sampling is in [`crate::mq_port`]) and [`Marking::Red`] (§3.3.2's
//! probabilistic marking). Strict-priority queues use the standard threshold (§3.3.2).
//!
//! Where it departs from the paper: the instantaneous queue length with the arriving packet
//! (DCTCP's setting), the standard threshold before the first `T_round` sample, RED's linear `p_b`
//! alone, a seeded SplitMix64 coin ([`Red::seed`]), marking at enqueue only. The reasons:
//! `docs/design/mq-ecn.md`.

use crate::rate::Rate;
use crate::time::Duration;

#[cfg(test)]
mod tests;

/// Default EWMA weight of the old `T_round` (MQ-ECN §5.3.3: "β is 0.75 ... by default").
pub const DEFAULT_BETA: f64 = 0.75;

/// How a [`crate::mq_port::MqPort`] decides to mark CE at enqueue.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Marking {
    /// No marking.
    #[default]
    None,
    /// `K = C x RTT x lambda` on every queue (MQ-ECN §2.1, Equation 1).
    PerQueueStandard {
        /// The base round-trip time the threshold is derived for.
        rtt: Duration,
        /// The transport's factor (DCTCP: about 0.17; 1 for ECN*).
        lambda: f64,
    },
    /// `K_i = C x RTT x lambda x w_i / sum(w)` over the weighted queues (MQ-ECN §2.2, Equation 2).
    PerQueueMin {
        /// The base round-trip time.
        rtt: Duration,
        /// The transport's factor.
        lambda: f64,
    },
    /// Mark when the port's total bytes exceed `C x RTT x lambda` (MQ-ECN §2.3).
    PerPort {
        /// The base round-trip time.
        rtt: Duration,
        /// The transport's factor.
        lambda: f64,
    },
    /// `K_i = min(quantum_i / T_round, C) x RTT x lambda` (MQ-ECN §3.2 Equation 5, §3.3).
    MqEcn {
        /// The base round-trip time.
        rtt: Duration,
        /// The transport's factor.
        lambda: f64,
        /// EWMA weight of the old `T_round`, in (0, 1); [`DEFAULT_BETA`].
        beta: f64,
        /// Port idleness after which `T_round` decays by `beta`; `None`: one MTU at line rate
        /// (MQ-ECN §5.3.3: "T_idle is 1.2µs (1.5KB/10Gbps) by default").
        t_idle: Option<Duration>,
    },
    /// RED-style probabilistic marking over one of the threshold rules above (MQ-ECN §3.3.2).
    Red {
        /// The threshold rule whose per-queue scale applies to `K_min` and `K_max`; not `None` or
        /// `Red`.
        base: Box<Marking>,
        /// The two thresholds and the maximum probability.
        red: Red,
    },
}

/// RED's parameters as fractions of the rule's standard threshold `C x RTT x lambda`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Red {
    /// `K_min = k_min_fraction x C x RTT x lambda`: no mark at or below.
    pub k_min_fraction: f64,
    /// `K_max = k_max_fraction x C x RTT x lambda`: every ECN-capable packet marked above.
    pub k_max_fraction: f64,
    /// Marking probability reached just below `K_max`, in [0, 1].
    pub p_max: f64,
    /// Seed of the port's SplitMix64 generator (the core reads no entropy source).
    pub seed: u64,
}

/// What happens to a packet that is not ECN-capable when the rule would have marked it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum NonEctPolicy {
    /// Enqueue it unmarked (counted in `non_ect_passes`).
    #[default]
    Pass,
    /// Hand it back as a drop (counted in `non_ect_drops`), as RED does to non-ECT traffic.
    Drop,
}

/// Why a marking configuration was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum MarkingConfigError {
    /// `lambda` is negative or not finite.
    #[error("lambda must be finite and >= 0")]
    Lambda,
    /// `beta` is outside (0, 1).
    #[error("beta must lie in (0, 1)")]
    Beta,
    /// `t_idle` is zero.
    #[error("t_idle must be positive")]
    TIdle,
    /// RED fractions not `0 <= k_min <= k_max`, or `p_max` outside [0, 1].
    #[error("RED needs 0 <= k_min_fraction <= k_max_fraction and 0 <= p_max <= 1")]
    RedParameters,
    /// `Red` over `None` or over another `Red`.
    #[error("RED's base must be a threshold rule")]
    RedBase,
}

/// Which occupancy a rule compares and how it scales the standard threshold per queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rule {
    None,
    Standard,
    Min,
    Port,
    MqEcn,
}

/// The marking state of one port: the standard threshold, per-queue scales, the smoothed
/// `T_round` and RED's generator. Fields grouped by use: read at every enqueue first.
#[derive(Clone, Debug)]
pub(crate) struct EcnState {
    pub(crate) rule: Rule,
    /// `C x RTT x lambda` in bytes.
    k_std: f64,
    /// Per queue: the static scale of `k_std` (minimum rule), 1 otherwise.
    static_scale: Vec<f64>,
    /// Per queue: `quantum_i / C` in ns (MQ-ECN); strict-priority queues hold `f64::INFINITY`
    /// so their scale is always 1.
    quantum_time_ns: Vec<f64>,
    /// Smoothed round time in ns; `None` before the first sample.
    t_round_ns: Option<f64>,
    beta: f64,
    t_idle: Duration,
    red: Option<Red>,
    rng: SplitMix64,
}

impl EcnState {
    /// Builds the state for queues of the given quanta (bytes per round; `strict[i]` marks the
    /// strict-priority ones) on a link of `line_rate` with `mtu_bytes` packets.
    pub(crate) fn new(
        marking: &Marking,
        line_rate: Rate,
        mtu_bytes: u32,
        quanta: &[u64],
        strict: &[bool],
    ) -> Result<Self, MarkingConfigError> {
        let (base, red) = match marking {
            Marking::Red { base, red } => {
                if matches!(**base, Marking::None | Marking::Red { .. }) {
                    return Err(MarkingConfigError::RedBase);
                }
                let ok = red.k_min_fraction >= 0.0
                    && red.k_min_fraction <= red.k_max_fraction
                    && red.k_max_fraction.is_finite()
                    && (0.0..=1.0).contains(&red.p_max);
                if !ok {
                    return Err(MarkingConfigError::RedParameters);
                }
                (&**base, Some(*red))
            }
            m => (m, None),
        };
        let default_idle = line_rate.transmit_time(u64::from(mtu_bytes));
        let (rule, rtt, lambda, beta, t_idle) = match *base {
            Marking::None => (Rule::None, Duration::ZERO, 0.0, DEFAULT_BETA, default_idle),
            Marking::PerQueueStandard { rtt, lambda } => {
                (Rule::Standard, rtt, lambda, DEFAULT_BETA, default_idle)
            }
            Marking::PerQueueMin { rtt, lambda } => {
                (Rule::Min, rtt, lambda, DEFAULT_BETA, default_idle)
            }
            Marking::PerPort { rtt, lambda } => {
                (Rule::Port, rtt, lambda, DEFAULT_BETA, default_idle)
            }
            Marking::MqEcn {
                rtt,
                lambda,
                beta,
                t_idle,
            } => (
                Rule::MqEcn,
                rtt,
                lambda,
                beta,
                t_idle.unwrap_or(default_idle),
            ),
            Marking::Red { .. } => unreachable!("checked above"),
        };
        if !(lambda.is_finite() && lambda >= 0.0) {
            return Err(MarkingConfigError::Lambda);
        }
        if !(beta > 0.0 && beta < 1.0) {
            return Err(MarkingConfigError::Beta);
        }
        if t_idle == Duration::ZERO {
            return Err(MarkingConfigError::TIdle);
        }
        let k_std = line_rate.bytes_in(rtt) as f64 * lambda;
        let weight_sum: u64 = quanta
            .iter()
            .zip(strict)
            .filter(|(_, &s)| !s)
            .map(|(&q, _)| q)
            .sum();
        let static_scale = quanta
            .iter()
            .zip(strict)
            .map(|(&q, &s)| match rule {
                Rule::Min if !s && weight_sum > 0 => q as f64 / weight_sum as f64,
                _ => 1.0,
            })
            .collect();
        let quantum_time_ns = quanta
            .iter()
            .zip(strict)
            .map(|(&q, &s)| {
                if s {
                    f64::INFINITY
                } else {
                    q as f64 * 8e9 / line_rate.bps() as f64
                }
            })
            .collect();
        Ok(EcnState {
            rule,
            k_std,
            static_scale,
            quantum_time_ns,
            t_round_ns: None,
            beta,
            t_idle,
            red,
            rng: SplitMix64(red.map_or(0, |r| r.seed)),
        })
    }

    /// The scale `s_i` of the standard threshold for queue `i` now.
    fn scale(&self, queue: usize) -> f64 {
        match (self.rule, self.t_round_ns) {
            (Rule::MqEcn, Some(t)) if t > 0.0 => (self.quantum_time_ns[queue] / t).min(1.0),
            _ => self.static_scale[queue],
        }
    }

    /// The current threshold `K_i` in bytes (rounded to nearest); with RED, `K_i,max`'s base
    /// (the rule's threshold before RED's fractions). `u64::MAX` when nothing is marked.
    pub(crate) fn threshold_bytes(&self, queue: usize) -> u64 {
        match self.rule {
            Rule::None => u64::MAX,
            _ => (self.k_std * self.scale(queue)).round() as u64,
        }
    }

    /// Decides whether a packet joining `queue` is over the threshold, given the occupancy with
    /// the packet in it (the queue's, or the port's under [`Marking::PerPort`]). Draws from the
    /// generator only between RED's two thresholds.
    #[inline]
    pub(crate) fn over_threshold(
        &mut self,
        queue: usize,
        queue_bytes: u64,
        port_bytes: u64,
    ) -> bool {
        let occupancy = match self.rule {
            Rule::None => return false,
            Rule::Port => port_bytes,
            _ => queue_bytes,
        } as f64;
        let k = self.k_std * self.scale(queue);
        match self.red {
            None => occupancy > k.round(),
            Some(red) => {
                let (k_min, k_max) = (k * red.k_min_fraction, k * red.k_max_fraction);
                if occupancy <= k_min {
                    false
                } else if occupancy > k_max {
                    true
                } else {
                    let p = red.p_max * (occupancy - k_min) / (k_max - k_min);
                    self.rng.next_unit() < p
                }
            }
        }
    }

    /// Feeds one round-time sample (MQ-ECN §3.3.1, Equation 6). The first sample initialises.
    #[inline]
    pub(crate) fn sample_round(&mut self, sample: Duration) {
        let s = sample.as_nanos() as f64;
        self.t_round_ns = Some(match self.t_round_ns {
            None => s,
            Some(t) => self.beta * t + (1.0 - self.beta) * s,
        });
    }

    /// Applies the idle decay for a port idle for `idle`: `T_round x beta^k`, `k` the whole
    /// `T_idle` periods elapsed (MQ-ECN §3.3.1). Returns `k`.
    pub(crate) fn decay_idle(&mut self, idle: Duration) -> u64 {
        let k = idle.as_nanos() / self.t_idle.as_nanos();
        if k > 0 {
            if let Some(t) = self.t_round_ns.as_mut() {
                // beta^k underflows to 0 for large k: a full reset.
                *t *= self.beta.powf(k.min(i32::MAX as u64) as f64);
            }
        }
        k
    }

    /// The smoothed round time, `None` before the first sample.
    pub(crate) fn t_round(&self) -> Option<Duration> {
        self.t_round_ns
            .map(|t| Duration::from_nanos(t.round() as u64))
    }

    /// The idle period after which `T_round` decays.
    pub(crate) fn t_idle(&self) -> Duration {
        self.t_idle
    }

    /// True when the rule samples `T_round` (only MQ-ECN needs it).
    pub(crate) fn samples_rounds(&self) -> bool {
        self.rule == Rule::MqEcn
    }
}

/// SplitMix64 (Steele, Lea, Flood, OOPSLA '14): a 64-bit state, one add and three xor-multiply
/// steps per draw. Deterministic; RED's only randomness.
#[derive(Clone, Copy, Debug)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1) with 53 bits.
    fn next_unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}
