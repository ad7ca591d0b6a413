//! The `[link]` section: one shared link of known rate whose classes share it by weight under a
//! strict-priority tier, each optionally under its own ceiling (`rate`), with ECN marking on the
//! link's queues (MQ-ECN §3; the datapath is [`metronome_engine::engine::link`]).
//!
//! When the section exists every class, `[default]` included, is on the link unless it says
//! `link = false` (what `tc ... htb` users expect: every class under the root shares its rate).
//! A class on the link has a `weight` (its guaranteed share is `weight / sum of weights` of what
//! the priority tier leaves) or a `priority` (0 to 7, served before every weighted class, the
//! lowest number first), and `non_ect` (what happens to its not-ECN-capable packets above the
//! marking threshold).

use super::raw::Scalar;
use super::validate::Validator;
use super::{ClassPolicy, ConfigError, DaemonConfig, ETHERNET_HEADER};
use crate::units::parse_size;
use metronome_core::mq_ecn::DEFAULT_BETA;
use metronome_core::{Duration, NonEctPolicy};
pub use metronome_engine::config::link::{
    ClassLink, LinkConfig, LinkMarking, LinkMarkingRule, LinkScheduler,
};
use serde::Deserialize;
use toml::Spanned;

/// Default base round-trip time of the marking thresholds: 500 µs, the order of a round trip
/// through two veth pairs and the daemon on this project's machine (the real-traffic tests'
/// topology); set it to the path's own.
pub const DEFAULT_LINK_RTT: Duration = Duration::from_micros(500);
/// Default `lambda`: 1, the ECN* setting of a loss-based transport with ECN (Reno, Cubic) whose
/// window halves on a mark (MQ-ECN §2.1: `K = C x RTT x lambda`); DCTCP takes about 0.17.
pub const DEFAULT_LINK_LAMBDA: f64 = 1.0;
/// Default shared buffer of the link in bytes: 1000 frames of 1514 bytes, the depth of the pfifo
/// an HTB leaf gets by default (`txqueuelen` 1000).
pub const DEFAULT_LINK_BUFFER: u64 = 1000 * 1514;
/// Default RED thresholds as fractions of the rule's threshold, and maximum probability: 0.5,
/// 1 and 0.1, the ratio `min_th = max_th / 2` and `max_p = 0.1` of Floyd & Jacobson's RED
/// guidelines.
pub const DEFAULT_RED: (f64, f64, f64) = (0.5, 1.0, 0.1);
/// Most classes a `dwrr` or `wrr` link holds: the port's queue count
/// ([`metronome_core::mq_port::MAX_QUEUES`]); `nicpic` has no such bound.
pub const MAX_MQ_LINK_CLASSES: usize = metronome_core::mq_port::MAX_QUEUES;
/// Highest `priority` of a class: 7, as tc's HTB `prio`.
pub const MAX_PRIORITY: u8 = 7;
/// Largest `weight` of a class: 10 000 (a quantum of `weight x quantum` bytes fits 32 bits).
pub const MAX_WEIGHT: u32 = 10_000;
/// Bytes of two 802.1Q tags: the longest frame without `vnet_hdr` is `mtu + 14 + 8`.
const VLAN_TAGS: u32 = 8;

/// `[link]` as serde reads it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLink {
    pub rate: Option<Spanned<Scalar>>,
    pub scheduler: Option<Spanned<String>>,
    pub marking: Option<Spanned<String>>,
    pub rtt: Option<Spanned<String>>,
    pub lambda: Option<Spanned<f64>>,
    pub beta: Option<Spanned<f64>>,
    pub red_min: Option<Spanned<f64>>,
    pub red_max: Option<Spanned<f64>>,
    pub red_probability: Option<Spanned<f64>>,
    pub buffer: Option<Spanned<Scalar>>,
    pub quantum: Option<Spanned<Scalar>>,
    pub burst: Option<Spanned<Scalar>>,
}

/// A class's `non_ect = "pass" | "drop"`.
#[derive(Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RawNonEct {
    Pass,
    Drop,
}

type Result<T> = core::result::Result<T, ConfigError>;

impl Validator<'_> {
    /// Validates `[link]`.
    pub(super) fn link(
        &self,
        spanned: &Spanned<RawLink>,
        mtu: u32,
        daemon: &DaemonConfig,
    ) -> Result<LinkConfig> {
        let raw = spanned.get_ref();
        let Some(rate) = &raw.rate else {
            return Err(self.invalid(
                spanned.span(),
                "link.rate",
                "missing field `rate`: the link's rate, e.g. \"1gbit\"".to_string(),
            ));
        };
        let rate = self.rate(rate, "link.rate")?;
        let scheduler = match &raw.scheduler {
            None => LinkScheduler::Dwrr,
            Some(s) => match s.get_ref().as_str() {
                "dwrr" => LinkScheduler::Dwrr,
                "wrr" => LinkScheduler::Wrr,
                "nicpic" => LinkScheduler::NicPic,
                other => {
                    return Err(self.invalid(
                        s.span(),
                        "link.scheduler",
                        format!("{other:?} is not \"dwrr\", \"wrr\" or \"nicpic\""),
                    ))
                }
            },
        };
        let marking = self.link_marking(raw)?;
        let max_frame_bytes = if daemon.vnet_hdr {
            u32::from(u16::MAX)
        } else {
            (mtu + ETHERNET_HEADER + VLAN_TAGS).min(u32::from(u16::MAX))
        };
        let buffer_bytes = match &raw.buffer {
            None => DEFAULT_LINK_BUFFER,
            Some(b) => {
                let bytes = self.size(b, "link.buffer")?;
                let max = metronome_core::mq_port::MAX_BUFFER_BYTES;
                if bytes < u64::from(max_frame_bytes) || bytes > max {
                    return Err(self.invalid(
                        b.span(),
                        "link.buffer",
                        format!(
                            "{bytes} bytes is outside {max_frame_bytes}..={max}: the buffer \
                             holds at least the longest frame ({max_frame_bytes} bytes)"
                        ),
                    ));
                }
                bytes
            }
        };
        let quantum_bytes = match &raw.quantum {
            None => max_frame_bytes,
            Some(q) => {
                let bytes = self.size(q, "link.quantum")?;
                let cap = u64::from(u32::MAX) / u64::from(MAX_WEIGHT);
                if bytes < u64::from(max_frame_bytes) || bytes > cap {
                    return Err(self.invalid(
                        q.span(),
                        "link.quantum",
                        format!(
                            "{bytes} bytes is outside {max_frame_bytes}..={cap}: a turn sends \
                             at least the longest frame"
                        ),
                    ));
                }
                bytes as u32
            }
        };
        let burst_bytes = match &raw.burst {
            None => quantum_bytes,
            Some(b) => {
                let bytes = self.size(b, "link.burst")?;
                if bytes < u64::from(max_frame_bytes) || bytes > u64::from(u32::MAX) {
                    return Err(self.invalid(
                        b.span(),
                        "link.burst",
                        format!(
                            "{bytes} bytes is outside {max_frame_bytes}..={}: the link sends \
                             at least one frame",
                            u32::MAX
                        ),
                    ));
                }
                bytes as u32
            }
        };
        if daemon.cores > 1 {
            return Err(self.invalid(
                spanned.span(),
                "link",
                format!(
                    "a link is drained by one silo; with daemon.cores = {} each would send at \
                     its rate: set cores = 1",
                    daemon.cores
                ),
            ));
        }
        if let (LinkScheduler::NicPic, Some(_), Some(m)) = (scheduler, marking.red, &raw.marking) {
            return Err(self.invalid(
                m.span(),
                "link.marking",
                "scheduler = \"nicpic\" takes no RED marking: use a threshold rule".to_string(),
            ));
        }
        let t_idle = rate.transmit_time(u64::from(mtu + ETHERNET_HEADER));
        Ok(LinkConfig {
            rate,
            scheduler,
            marking,
            buffer_bytes,
            quantum_bytes,
            max_frame_bytes,
            burst_bytes,
            t_idle: t_idle.max(Duration::from_nanos(1)),
        })
    }

    fn link_marking(&self, raw: &RawLink) -> Result<LinkMarking> {
        let (rule, red) = match &raw.marking {
            None => (LinkMarkingRule::MqEcn, false),
            Some(m) => {
                let text = m.get_ref().as_str();
                let (base, red) = match text.strip_prefix("red-") {
                    Some(base) => (base, true),
                    None => (text, false),
                };
                let rule = match base {
                    "none" if !red => LinkMarkingRule::None,
                    "mq-ecn" => LinkMarkingRule::MqEcn,
                    "per-queue" => LinkMarkingRule::PerQueue,
                    "per-queue-min" => LinkMarkingRule::PerQueueMin,
                    "per-port" => LinkMarkingRule::PerPort,
                    _ => {
                        return Err(self.invalid(
                            m.span(),
                            "link.marking",
                            format!(
                                "{text:?} is not one of \"mq-ecn\", \"per-queue\", \
                                 \"per-queue-min\", \"per-port\", \"none\", or a rule \
                                 prefixed with \"red-\""
                            ),
                        ))
                    }
                };
                (rule, red)
            }
        };
        let fraction = |f: &Option<Spanned<f64>>, field: &str, default: f64, max: f64| {
            let Some(v) = f else { return Ok(default) };
            if !red {
                return Err(self.invalid(
                    v.span(),
                    field,
                    "only a \"red-...\" marking takes RED parameters".to_string(),
                ));
            }
            let x = *v.get_ref();
            if !(x.is_finite() && (0.0..=max).contains(&x)) {
                return Err(self.invalid(v.span(), field, format!("{x} is outside 0..={max}")));
            }
            Ok(x)
        };
        let (d_min, d_max, d_p) = DEFAULT_RED;
        let red_min = fraction(&raw.red_min, "link.red_min", d_min, 1e6)?;
        let red_max = fraction(&raw.red_max, "link.red_max", d_max, 1e6)?;
        let red_p = fraction(&raw.red_probability, "link.red_probability", d_p, 1.0)?;
        if red && red_min > red_max {
            let span = raw.red_min.as_ref().map_or(0..0, |s| s.span());
            return Err(self.invalid(
                span,
                "link.red_min",
                format!("{red_min} is above red_max ({red_max})"),
            ));
        }
        let rtt = match &raw.rtt {
            None => DEFAULT_LINK_RTT,
            Some(r) => self.positive_duration(r, "link.rtt")?,
        };
        let lambda = match &raw.lambda {
            None => DEFAULT_LINK_LAMBDA,
            Some(l) => {
                let x = *l.get_ref();
                if !(x.is_finite() && x > 0.0 && x <= 100.0) {
                    return Err(self.invalid(
                        l.span(),
                        "link.lambda",
                        format!("{x} is outside (0, 100]"),
                    ));
                }
                x
            }
        };
        let beta = match &raw.beta {
            None => DEFAULT_BETA,
            Some(b) => {
                let x = *b.get_ref();
                if !(x > 0.0 && x < 1.0) {
                    return Err(self.invalid(
                        b.span(),
                        "link.beta",
                        format!("{x} is outside (0, 1)"),
                    ));
                }
                x
            }
        };
        Ok(LinkMarking {
            rule,
            red: red.then_some((red_min, red_max, red_p)),
            rtt,
            lambda,
            beta,
        })
    }

    /// A size in bytes: tc-like text (`15k`) or an integer.
    pub(super) fn size(&self, raw: &Spanned<Scalar>, field: &str) -> Result<u64> {
        match raw.get_ref() {
            Scalar::Text(t) => parse_size(t).map_err(|error| {
                self.site.at(
                    raw.span(),
                    field,
                    super::ErrorKind::Size {
                        value: t.clone(),
                        error,
                    },
                )
            }),
            Scalar::Int(n) => u64::try_from(*n).map_err(|_| {
                self.invalid(raw.span(), field, format!("{n} is not a size in bytes"))
            }),
        }
    }

    /// A class's `link`, `weight`, `priority` and `non_ect`, given whether a `[link]` exists.
    pub(super) fn class_link(
        &self,
        raw: &super::raw::RawClass,
        path: &str,
        link: Option<&LinkConfig>,
    ) -> Result<super::link::ClassLink> {
        // Under a parent, `weight` is the class's share among its siblings (the tree's).
        let link_weight = raw.weight.as_ref().filter(|_| raw.parent.is_none());
        let fields = [
            ("link", raw.link.as_ref().map(|s| s.span())),
            ("weight", link_weight.map(|s| s.span())),
            ("priority", raw.priority.as_ref().map(|s| s.span())),
            ("non_ect", raw.non_ect.as_ref().map(|s| s.span())),
        ];
        let first = fields.iter().find_map(|(f, s)| s.clone().map(|s| (*f, s)));
        if link.is_none() {
            return match first {
                Some(("weight", span)) => Err(self.invalid(
                    span,
                    &format!("{path}.weight"),
                    "needs a `parent` (its share among its siblings) or a [link] section (its \
                     share of the link)"
                        .to_string(),
                )),
                Some((field, span)) => Err(self.invalid(
                    span,
                    &format!("{path}.{field}"),
                    "needs a [link] section: the link this class would share".to_string(),
                )),
                None => Ok(ClassLink::OFF),
            };
        }
        if raw.link.as_ref().is_some_and(|l| !*l.get_ref()) {
            let other = fields
                .iter()
                .skip(1)
                .find_map(|(f, s)| s.clone().map(|s| (*f, s)));
            if let Some((field, span)) = other {
                return Err(self.invalid(
                    span,
                    &format!("{path}.{field}"),
                    "has no effect on a class with link = false".to_string(),
                ));
            }
            return Ok(ClassLink::OFF);
        }
        if let (Some(w), Some(_)) = (&raw.weight, &raw.priority) {
            return Err(self.invalid(
                w.span(),
                &format!("{path}.weight"),
                "a priority class is served before every weighted class; it takes no weight"
                    .to_string(),
            ));
        }
        let weight = match &raw.weight {
            Some(w) => self.int_in(w, &format!("{path}.weight"), 1, i64::from(MAX_WEIGHT))? as u32,
            None => 1,
        };
        let priority = match &raw.priority {
            Some(p) => {
                Some(self.int_in(p, &format!("{path}.priority"), 0, i64::from(MAX_PRIORITY))? as u8)
            }
            None => None,
        };
        let non_ect = match raw.non_ect.as_ref().map(|n| *n.get_ref()) {
            Some(RawNonEct::Drop) => NonEctPolicy::Drop,
            Some(RawNonEct::Pass) | None => NonEctPolicy::Pass,
        };
        Ok(ClassLink {
            on_link: true,
            weight,
            priority,
            non_ect,
        })
    }
}

/// Checks what involves the classes together: a `dwrr`/`wrr` link holds at most
/// [`MAX_MQ_LINK_CLASSES`] classes; `nicpic` has no priority tier. `policies` are in config
/// order (`[default]` first) with the line of each class's name.
pub(super) fn check_classes(
    v: &Validator<'_>,
    link: &LinkConfig,
    link_span: core::ops::Range<usize>,
    policies: &[(&ClassPolicy, String, core::ops::Range<usize>)],
) -> Result<()> {
    let on: Vec<_> = policies.iter().filter(|(p, _, _)| p.link.on_link).collect();
    if link.scheduler != LinkScheduler::NicPic && on.len() > MAX_MQ_LINK_CLASSES {
        let (_, path, span) = on[MAX_MQ_LINK_CLASSES];
        return Err(v.invalid(
            span.clone(),
            path,
            format!(
                "more than {MAX_MQ_LINK_CLASSES} classes on a {} link: use \
                 scheduler = \"nicpic\", or link = false on some",
                link.scheduler
            ),
        ));
    }
    if link.scheduler == LinkScheduler::NicPic {
        if let Some((_, path, span)) = on.iter().find(|(p, _, _)| p.link.priority.is_some()) {
            return Err(v.invalid(
                span.clone(),
                &format!("{path}.priority"),
                "scheduler = \"nicpic\" has no priority tier: use \"dwrr\" or \"wrr\"".to_string(),
            ));
        }
    }
    if on.is_empty() {
        return Err(v.invalid(
            link_span,
            "link",
            "no class is on the link: every class says link = false".to_string(),
        ));
    }
    Ok(())
}
