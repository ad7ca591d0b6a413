//! The configuration as serde reads it, before validation: every leaf keeps its byte span
//! (`toml::Spanned`) so that validation can name the line, and every table denies unknown
//! fields. Values that tc writes as text (rates, sizes, durations, prefixes, port ranges) stay
//! text here; `validate` parses them.

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use toml::Spanned;

/// The whole document.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConfig {
    pub interfaces: Spanned<RawInterfaces>,
    #[serde(default)]
    pub wheel: RawWheel,
    #[serde(default)]
    pub daemon: RawDaemon,
    #[serde(default, rename = "class")]
    pub classes: Vec<Spanned<RawClass>>,
    #[serde(default, rename = "default")]
    pub default_class: Option<Spanned<RawClass>>,
    #[serde(default)]
    pub link: Option<Spanned<super::link::RawLink>>,
    #[serde(default)]
    pub cluster: Option<Spanned<super::cluster::RawCluster>>,
}

/// `[interfaces]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawInterfaces {
    pub inside: Option<Spanned<String>>,
    pub outside: Option<Spanned<String>>,
    pub attach: Option<Spanned<Vec<Spanned<String>>>>,
    pub bridges: Option<Spanned<Vec<Spanned<String>>>>,
    pub origin_mark: Option<Spanned<i64>>,
    pub mtu: Option<Spanned<i64>>,
}

/// `[wheel]`.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawWheel {
    pub granularity: Option<Spanned<String>>,
    pub horizon: Option<Spanned<String>>,
    pub horizon_policy: Option<Spanned<RawHorizonPolicy>>,
    pub pool_packets: Option<Spanned<i64>>,
}

/// `horizon_policy = "clamp" | "reject"`.
#[derive(Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RawHorizonPolicy {
    Clamp,
    Reject,
}

/// `[daemon]`.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDaemon {
    pub busy_poll: Option<bool>,
    pub realtime_priority: Option<Spanned<i64>>,
    pub batch_size: Option<Spanned<i64>>,
    pub metrics_listen: Option<Spanned<String>>,
    pub log_format: Option<Spanned<RawLogFormat>>,
    pub cores: Option<Spanned<i64>>,
    pub nba_period: Option<Spanned<String>>,
    pub vnet_hdr: Option<bool>,
    pub gso_slots: Option<Spanned<i64>>,
    pub gro: Option<bool>,
    pub malformed: Option<metronome_engine::unclassified::Unclassified>,
    pub non_ip: Option<metronome_engine::unclassified::Unclassified>,
    pub drain: Option<Spanned<String>>,
    pub link_down_grace: Option<Spanned<String>>,
    pub timer_slack: Option<Spanned<String>>,
    pub arrival_slack: Option<Spanned<String>>,
    pub pool_share: Option<Spanned<i64>>,
    pub early_refuse: Option<bool>,
    pub nice: Option<Spanned<i64>>,
    pub early_multiple: Option<Spanned<i64>>,
    pub user: Option<Spanned<String>>,
    pub control: Option<Spanned<String>>,
    pub class_dir: Option<Spanned<String>>,
    pub max_api_classes: Option<Spanned<i64>>,
    pub class_metrics: Option<Spanned<RawClassMetrics>>,
}

/// `class_metrics = "all" | "active" | ["name", ..]`.
#[derive(Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawClassMetrics {
    Word(String),
    Names(Vec<String>),
}

/// `log_format = "text" | "json"`.
#[derive(Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RawLogFormat {
    Text,
    Json,
}

/// A class of the control socket (`metronome_daemon::ops::control`): its `[[class]]` keys under `class`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLiveClass {
    pub class: Spanned<RawClass>,
}

/// One `[[class]]`, or `[default]` (which must not have `name` or `match`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawClass {
    pub name: Option<Spanned<String>>,
    #[serde(rename = "match")]
    pub matcher: Option<Spanned<RawMatch>>,
    pub rate: Option<Spanned<Scalar>>,
    pub pacing: Option<Spanned<Scalar>>,
    pub burst: Option<Spanned<Scalar>>,
    pub horizon_policy: Option<Spanned<RawHorizonPolicy>>,
    pub backpressure: Option<Spanned<RawBackpressure>>,
    pub ack_shaping: Option<Spanned<RawAckShaping>>,
    pub gso_burst: Option<Spanned<String>>,
    pub fair: Option<Spanned<bool>>,
    pub link: Option<Spanned<bool>>,
    pub weight: Option<Spanned<i64>>,
    pub priority: Option<Spanned<i64>>,
    pub non_ect: Option<Spanned<super::link::RawNonEct>>,
    pub queue: Option<Spanned<RawQueue>>,
    pub scope: Option<Spanned<String>>,
    pub parent: Option<Spanned<String>>,
    pub gather: Option<Spanned<bool>>,
    pub pace_sockets: Option<Spanned<bool>>,
}

/// A class's `queue` table: `{ packets = 10000, bytes = "12m" }`, either or both.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawQueue {
    pub packets: Option<Spanned<i64>>,
    pub bytes: Option<Spanned<Scalar>>,
}

/// A class's `ack_shaping` table: `{ rate = "1gbit", per = "class" | "flow", flows = 4096 }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAckShaping {
    pub rate: Spanned<Scalar>,
    pub per: Option<Spanned<RawAckPer>>,
    pub flows: Option<Spanned<i64>>,
}

/// `per = "class" | "flow"`.
#[derive(Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RawAckPer {
    Class,
    Flow,
}

/// A class's `match` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMatch {
    pub dst: Option<Spanned<String>>,
    pub src: Option<Spanned<String>>,
    pub dscp: Option<Spanned<i64>>,
    pub protocol: Option<Spanned<Scalar>>,
    pub dst_port: Option<Spanned<Scalar>>,
    pub src_port: Option<Spanned<Scalar>>,
    pub from: Option<Spanned<String>>,
    pub to: Option<Spanned<String>>,
    pub cgroup: Option<Spanned<String>>,
}

/// A class's `backpressure` table: `{ mode = "ecn", threshold = "500us" }`,
/// `{ mode = "drop", limit = 100 }` or `{ mode = "none" }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBackpressure {
    pub mode: Spanned<RawBackpressureMode>,
    pub threshold: Option<Spanned<String>>,
    pub limit: Option<Spanned<i64>>,
}

/// `mode = "none" | "ecn" | "drop"`.
#[derive(Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RawBackpressureMode {
    None,
    Ecn,
    Drop,
}

/// A value written either as text or as an integer (`rate = "100mbit"` or `rate = 100000000`,
/// `dst_port = "5201-5216"` or `dst_port = 5201`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Scalar {
    Text(String),
    Int(i128),
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ScalarVisitor)
    }
}

struct ScalarVisitor;

impl Visitor<'_> for ScalarVisitor {
    type Value = Scalar;

    fn expecting(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("a string or an integer")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
        Ok(Scalar::Text(v.to_string()))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
        Ok(Scalar::Int(i128::from(v)))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
        Ok(Scalar::Int(i128::from(v)))
    }
}
