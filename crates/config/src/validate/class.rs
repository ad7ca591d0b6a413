//! Validation of a class and of the default class: the name (unique, plain, not `default`),
//! the match, and the policy (rate, burst, pacing, horizon policy, backpressure, queue bounds,
//! ACK shaping, fair queueing, the shared link's settings). A class with neither `rate` nor
//! `pacing` sets no `burst`, `horizon_policy` or `backpressure`, which would have no effect.

use super::{horizon_policy, Result, Validator};
use crate::error::ErrorKind;
use crate::raw::{
    RawAckPer, RawAckShaping, RawBackpressure, RawBackpressureMode, RawClass, RawQueue, Scalar,
};
use crate::{
    AckShapingPolicy, Backpressure, ClassConfig, ClassPolicy, LinkConfig, Match, QueueLimit, Tree,
    DEFAULT_ACK_SHAPING_FLOWS, MAX_ACK_SHAPING_FLOWS, MAX_QUEUE_PACKETS, MAX_TREE_WEIGHT,
};
use toml::Spanned;

/// Longest class name in bytes (it becomes a metrics label and a log field).
const MAX_CLASS_NAME: usize = 64;

impl Validator<'_> {
    pub(super) fn class(
        &self,
        spanned: &Spanned<RawClass>,
        path: &str,
        mtu: u32,
        link: Option<&LinkConfig>,
    ) -> Result<ClassConfig> {
        let raw = spanned.get_ref();
        let Some(name) = &raw.name else {
            return Err(self.invalid(
                spanned.span(),
                path,
                "missing field `name`: every class needs a unique name".to_string(),
            ));
        };
        let n = name.get_ref();
        let plain = n
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.');
        if n.is_empty() || n.len() > MAX_CLASS_NAME || !plain {
            return Err(self.invalid(
                name.span(),
                &format!("{path}.name"),
                format!("{n:?} is not a class name (1 to {MAX_CLASS_NAME} of A-Z a-z 0-9 _ - .)"),
            ));
        }
        if n == "default" {
            return Err(self.invalid(
                name.span(),
                &format!("{path}.name"),
                "\"default\" is reserved: configure the default class in [default]".to_string(),
            ));
        }
        let matcher = match &raw.matcher {
            Some(m) => self.matcher(m.get_ref(), &format!("{path}.match"))?,
            None => Match::default(),
        };
        let mut policy = self.policy(raw, path, mtu, link)?;
        if raw.pace_sockets.is_none() && (matcher.from.is_some() || matcher.to.is_some()) {
            // Forwarded traffic: no socket of the host sent it.
            policy.pace_sockets = false;
        }
        Ok(ClassConfig {
            name: n.clone(),
            matcher,
            policy,
            tree: self.tree_place(raw, path, n, link)?,
            line: self.site.line(name.span().start),
        })
    }

    /// A class's `parent`, `weight` (among its siblings, without a `[link]`) and `gather`; the
    /// tree as a whole is checked once every class is read (`super::tree`).
    fn tree_place(
        &self,
        raw: &RawClass,
        path: &str,
        name: &str,
        link: Option<&LinkConfig>,
    ) -> Result<Tree> {
        let mut tree = Tree::default();
        if let Some(p) = &raw.parent {
            if link.is_some() {
                return Err(self.invalid(
                    p.span(),
                    &format!("{path}.parent"),
                    "the classes on a [link] share it by weight at one level: a class tree \
                     goes without [link]"
                        .to_string(),
                ));
            }
            if p.get_ref() == name {
                return Err(self.invalid(
                    p.span(),
                    &format!("{path}.parent"),
                    "a class cannot be its own parent".to_string(),
                ));
            }
            tree.parent = Some(p.get_ref().clone());
            if let Some(w) = &raw.weight {
                tree.weight =
                    self.int_in(w, &format!("{path}.weight"), 1, i64::from(MAX_TREE_WEIGHT))?
                        as u32;
            }
        }
        if let Some(g) = &raw.gather {
            if let (true, Some(m)) = (*g.get_ref(), &raw.matcher) {
                return Err(self.invalid(
                    m.span(),
                    &format!("{path}.match"),
                    "a class with gather = true takes no packet of its own, only its \
                     children's: it takes no match"
                        .to_string(),
                ));
            }
            tree.gathers_only = *g.get_ref();
        }
        Ok(tree)
    }

    pub(super) fn default_class(
        &self,
        spanned: &Spanned<RawClass>,
        mtu: u32,
        link: Option<&LinkConfig>,
    ) -> Result<ClassPolicy> {
        let raw = spanned.get_ref();
        if let Some(name) = &raw.name {
            return Err(self.invalid(
                name.span(),
                "default.name",
                "the default class is named \"default\"; it takes no name".to_string(),
            ));
        }
        let tree_keys = [
            ("parent", raw.parent.as_ref().map(|s| s.span())),
            ("gather", raw.gather.as_ref().map(|s| s.span())),
        ];
        if let Some((field, Some(span))) = tree_keys.into_iter().find(|(_, s)| s.is_some()) {
            return Err(self.invalid(
                span,
                &format!("default.{field}"),
                "the default class takes what no class matched; it stands outside the class \
                 tree"
                    .to_string(),
            ));
        }
        if let Some(m) = &raw.matcher {
            return Err(self.invalid(
                m.span(),
                "default.match",
                "the default class takes what no class matched; it takes no match".to_string(),
            ));
        }
        self.policy(raw, "default", mtu, link)
    }

    fn policy(
        &self,
        raw: &RawClass,
        path: &str,
        mtu: u32,
        link: Option<&LinkConfig>,
    ) -> Result<ClassPolicy> {
        let rate = raw
            .rate
            .as_ref()
            .map(|r| self.rate(r, &format!("{path}.rate")))
            .transpose()?;
        let pacing = raw
            .pacing
            .as_ref()
            .map(|r| self.rate(r, &format!("{path}.pacing")))
            .transpose()?;
        let mut policy = ClassPolicy::unshaped(mtu);
        policy.rate = rate;
        policy.pacing = pacing;
        policy.link = self.class_link(raw, path, link)?;
        if !policy.is_shaped() {
            let idle = [
                ("burst", raw.burst.as_ref().map(|b| b.span())),
                (
                    "horizon_policy",
                    raw.horizon_policy.as_ref().map(|h| h.span()),
                ),
                ("backpressure", raw.backpressure.as_ref().map(|b| b.span())),
                ("gso_burst", raw.gso_burst.as_ref().map(|b| b.span())),
                ("fair", raw.fair.as_ref().map(|b| b.span())),
                ("queue", raw.queue.as_ref().map(|q| q.span())),
                ("pace_sockets", raw.pace_sockets.as_ref().map(|q| q.span())),
            ];
            if let Some((field, Some(span))) = idle.into_iter().find(|(_, s)| s.is_some()) {
                return Err(self.invalid(
                    span,
                    &format!("{path}.{field}"),
                    "has no effect on an unshaped class: set `rate` or `pacing`".to_string(),
                ));
            }
        }
        if let Some(b) = &raw.burst {
            policy.burst = self.burst(b, &format!("{path}.burst"), mtu)?;
        }
        if let Some(g) = &raw.gso_burst {
            policy.gso_burst = self.positive_duration(g, &format!("{path}.gso_burst"))?;
        }
        policy.horizon_policy = raw
            .horizon_policy
            .as_ref()
            .map(|h| horizon_policy(*h.get_ref()));
        if let Some(bp) = &raw.backpressure {
            policy.backpressure =
                self.backpressure(bp.get_ref(), &format!("{path}.backpressure"))?;
        }
        if let Some(fair) = &raw.fair {
            if *fair.get_ref() && policy.rate.is_none() {
                return Err(self.invalid(
                    fair.span(),
                    &format!("{path}.fair"),
                    "fair queueing shares the class's `rate` among its flows: set `rate`"
                        .to_string(),
                ));
            }
            policy.fair = *fair.get_ref();
        }
        if let Some(q) = &raw.queue {
            policy.queue = self.queue(q.get_ref(), &format!("{path}.queue"))?;
        }
        policy.pace_sockets = match &raw.pace_sockets {
            Some(p) if *p.get_ref() && policy.rate.is_none() => {
                return Err(self.invalid(
                    p.span(),
                    &format!("{path}.pace_sockets"),
                    "source pacing gives the class's flows shares of its `rate`: set `rate`"
                        .to_string(),
                ));
            }
            Some(p) => *p.get_ref(),
            None => policy.rate.is_some(),
        };
        if let Some(a) = &raw.ack_shaping {
            policy.ack_shaping =
                Some(self.ack_shaping(a.get_ref(), &format!("{path}.ack_shaping"))?);
        }
        Ok(policy)
    }

    fn queue(&self, raw: &RawQueue, path: &str) -> Result<QueueLimit> {
        let packets = match &raw.packets {
            Some(p) => {
                Some(self.int_in(p, &format!("{path}.packets"), 1, MAX_QUEUE_PACKETS)? as u64)
            }
            None => None,
        };
        let bytes = match &raw.bytes {
            Some(b) => Some(self.size(b, &format!("{path}.bytes"))?),
            None => None,
        };
        Ok(QueueLimit { packets, bytes })
    }

    fn ack_shaping(&self, raw: &RawAckShaping, path: &str) -> Result<AckShapingPolicy> {
        let flows = match &raw.flows {
            Some(f) => self.int_in(
                f,
                &format!("{path}.flows"),
                1,
                i64::from(MAX_ACK_SHAPING_FLOWS),
            )? as u32,
            None => DEFAULT_ACK_SHAPING_FLOWS,
        };
        Ok(AckShapingPolicy {
            rate: self.rate(&raw.rate, &format!("{path}.rate"))?,
            per_flow: matches!(
                raw.per.as_ref().map(|p| *p.get_ref()),
                Some(RawAckPer::Flow)
            ),
            flows,
        })
    }

    fn burst(&self, raw: &Spanned<Scalar>, field: &str, mtu: u32) -> Result<u32> {
        let bytes = self.size(raw, field)?;
        if bytes < u64::from(mtu) {
            return Err(self.site.at(
                raw.span(),
                field,
                ErrorKind::BurstBelowMtu {
                    burst: bytes,
                    mtu: u64::from(mtu),
                },
            ));
        }
        u32::try_from(bytes).map_err(|_| {
            self.invalid(
                raw.span(),
                field,
                format!("burst of {bytes} bytes is above 4 GiB"),
            )
        })
    }

    fn backpressure(&self, raw: &RawBackpressure, path: &str) -> Result<Backpressure> {
        let mode = *raw.mode.get_ref();
        let (wants_threshold, wants_limit) = match mode {
            RawBackpressureMode::None => (false, false),
            RawBackpressureMode::Ecn => (true, false),
            RawBackpressureMode::Drop => (false, true),
        };
        if let (Some(t), false) = (&raw.threshold, wants_threshold) {
            return Err(self.invalid(
                t.span(),
                &format!("{path}.threshold"),
                "only mode = \"ecn\" takes a threshold".to_string(),
            ));
        }
        if let (Some(l), false) = (&raw.limit, wants_limit) {
            return Err(self.invalid(
                l.span(),
                &format!("{path}.limit"),
                "only mode = \"drop\" takes a limit".to_string(),
            ));
        }
        match mode {
            RawBackpressureMode::None => Ok(Backpressure::None),
            RawBackpressureMode::Ecn => match &raw.threshold {
                Some(t) => Ok(Backpressure::Ecn {
                    threshold: self.positive_duration(t, &format!("{path}.threshold"))?,
                }),
                None => Err(self.invalid(
                    raw.mode.span(),
                    &format!("{path}.threshold"),
                    "mode = \"ecn\" needs a threshold of queued delay, e.g. \"500us\"".to_string(),
                )),
            },
            RawBackpressureMode::Drop => match &raw.limit {
                Some(l) => Ok(Backpressure::Drop {
                    limit: self.int_in(l, &format!("{path}.limit"), 1, i64::from(u32::MAX))? as u32,
                }),
                None => Err(self.invalid(
                    raw.mode.span(),
                    &format!("{path}.limit"),
                    "mode = \"drop\" needs a limit of queued packets per flow, e.g. 100"
                        .to_string(),
                )),
            },
        }
    }
}
