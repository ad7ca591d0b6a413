//! The shared link's configuration (`[link]`) and a class's place on it; the stage is
//! [`crate::engine::link`] (MQ-ECN §3).

use metronome_core::mq_ecn::{Marking, Red};
use metronome_core::{Duration, NonEctPolicy, Rate};
use std::fmt;

/// How the link shares its rate among the weighted classes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LinkScheduler {
    /// Deficit weighted round robin in bytes (MQ-ECN §4.2's scheduler).
    #[default]
    Dwrr,
    /// Weighted round robin in frames.
    Wrr,
    /// NicPic's virtual-time scheduler, 32 bytes per class (NicPic §3.2), for thousands of classes.
    NicPic,
}

impl fmt::Display for LinkScheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LinkScheduler::Dwrr => "dwrr",
            LinkScheduler::Wrr => "wrr",
            LinkScheduler::NicPic => "nicpic",
        })
    }
}

/// The threshold rule of the link's ECN marking (MQ-ECN §2-§3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LinkMarkingRule {
    /// No marking.
    None,
    /// MQ-ECN: `K_i = min(quantum_i / T_round, C) x RTT x lambda` (§3.2).
    #[default]
    MqEcn,
    /// Every queue against `K = C x RTT x lambda` (§2.1).
    PerQueue,
    /// Queue `i` against `K x w_i / sum(w)` (§2.2).
    PerQueueMin,
    /// The link's total against `K` (§2.3).
    PerPort,
}

/// `[link] marking` and its parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkMarking {
    /// The threshold rule.
    pub rule: LinkMarkingRule,
    /// RED's `(k_min, k_max, p_max)` over the rule (`red-...` values), `None` for a hard threshold.
    pub red: Option<(f64, f64, f64)>,
    /// The base round-trip time `RTT`.
    pub rtt: Duration,
    /// The transport's factor `lambda`.
    pub lambda: f64,
    /// MQ-ECN's EWMA weight of the old round time.
    pub beta: f64,
}

impl fmt::Display for LinkMarking {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rule = match self.rule {
            LinkMarkingRule::None => "none",
            LinkMarkingRule::MqEcn => "mq-ecn",
            LinkMarkingRule::PerQueue => "per-queue",
            LinkMarkingRule::PerQueueMin => "per-queue-min",
            LinkMarkingRule::PerPort => "per-port",
        };
        if let Some((lo, hi, p)) = self.red {
            write!(f, "red-{rule} ({lo}, {hi}, {p})")?;
        } else {
            write!(f, "{rule}")?;
        }
        write!(
            f,
            " rtt {} lambda {} beta {}",
            self.rtt, self.lambda, self.beta
        )
    }
}

/// The validated `[link]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkConfig {
    /// The link's rate: what leaves on it never exceeds it.
    pub rate: Rate,
    /// The weighted scheduler.
    pub scheduler: LinkScheduler,
    /// ECN marking on the link's queues.
    pub marking: LinkMarking,
    /// Shared buffer in bytes; a frame that does not fit is dropped (counted).
    pub buffer_bytes: u64,
    /// Bytes a class of weight 1 sends per DWRR turn (frames per WRR turn: `weight`); at least
    /// the longest frame. Default: the longest frame (65 535 with `vnet_hdr`, else `mtu + 22`).
    pub quantum_bytes: u32,
    /// Longest frame the link takes, bytes (the port's MTU).
    pub max_frame_bytes: u32,
    /// Bytes the link may send back to back to catch up after the loop woke late. Default
    /// [`LinkConfig::quantum_bytes`].
    pub burst_bytes: u32,
    /// Port idleness after which MQ-ECN's round time decays: one `mtu + 14` frame at `rate`.
    pub t_idle: Duration,
}

impl LinkConfig {
    /// The core's marking rule.
    pub fn core_marking(&self) -> Marking {
        let m = self.marking;
        let (rtt, lambda) = (m.rtt, m.lambda);
        let base = match m.rule {
            LinkMarkingRule::None => return Marking::None,
            LinkMarkingRule::MqEcn => Marking::MqEcn {
                rtt,
                lambda,
                beta: m.beta,
                t_idle: Some(self.t_idle),
            },
            LinkMarkingRule::PerQueue => Marking::PerQueueStandard { rtt, lambda },
            LinkMarkingRule::PerQueueMin => Marking::PerQueueMin { rtt, lambda },
            LinkMarkingRule::PerPort => Marking::PerPort { rtt, lambda },
        };
        match m.red {
            None => base,
            Some((k_min_fraction, k_max_fraction, p_max)) => Marking::Red {
                base: Box::new(base),
                red: Red {
                    k_min_fraction,
                    k_max_fraction,
                    p_max,
                    seed: 0x6d65_7472_6f6e_6f6d,
                },
            },
        }
    }
}

/// A class's place on the link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassLink {
    /// The class's packets go through the link after their ceiling.
    pub on_link: bool,
    /// Its share among the weighted classes (ignored with a `priority`).
    pub weight: u32,
    /// Strict-priority tier, lowest first; `None`: weighted.
    pub priority: Option<u8>,
    /// Its not-ECN-capable packets above the marking threshold: passed or dropped (counted).
    pub non_ect: NonEctPolicy,
}

impl ClassLink {
    /// Not on a link.
    pub const OFF: ClassLink = ClassLink {
        on_link: false,
        weight: 1,
        priority: None,
        non_ect: NonEctPolicy::Pass,
    };
}

impl fmt::Display for ClassLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.on_link {
            return write!(f, "off the link");
        }
        match self.priority {
            Some(p) => write!(f, "priority {p}")?,
            None => write!(f, "weight {}", self.weight)?,
        }
        let non_ect = match self.non_ect {
            NonEctPolicy::Pass => "pass",
            NonEctPolicy::Drop => "drop",
        };
        write!(f, ", non-ECT {non_ect}")
    }
}
