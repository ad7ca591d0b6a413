//! A Kubernetes namespace's aggregates (`namespaceBandwidth`): one class per namespace and
//! direction, `gather = true` (it takes no packet of its own, only its children's) at the
//! namespace's rate, the `parent` of the classes of every pod of the namespace, so that the
//! daemon shares the namespace's rate among its busy pods by weight, each within its own limit.
//!
//! * **Names:** `cni-ns.<namespace>.<key>.<direction>`: `<namespace>` its first [`NS_CHARS`]
//!   characters for the reader (every character outside `A-Za-z0-9_-` replaced by `_`), `<key>`
//!   ([`namespace_key`]) 16 hexadecimal digits of the FNV-1a hash of the whole namespace, so any
//!   string gives a name the daemon takes (at most 64 bytes of `A-Za-z0-9_-.`) and two
//!   namespaces whose readable parts agree still get two. A pod's class starts `cni.`
//!   ([`crate::classes::class_name`]), an aggregate `cni-ns.`: neither is ever the other.
//! * **Whose it is:** a class is a namespace's aggregate ([`is_aggregate`]) when its name is the
//!   namespace's, it is a class of the API and it gathers with no `match`. A pod never changes
//!   or deletes a class of the name that is not one (a class of the file, a class with a match).
//! * **A pod's own limit** in a direction whose namespace has an aggregate must not be above the
//!   namespace's rate ([`above_namespace`]): the daemon would refuse a child above its parent.
//!   A pod without its own limit there gets a class at the namespace's rate, so that its
//!   traffic is in the aggregate too.

use crate::classes::{self, Direction};
use crate::netconf::{Bandwidth, NetConf};
use metronome_core::Rate;
use metronome_daemon::ops::control::ClassObject;
use serde_json::Value;
use std::hash::Hasher;

/// What every aggregate's name starts with: a pod's class names start `cni.`.
pub const NS_PREFIX: &str = "cni-ns.";
/// Characters of the namespace in an aggregate's name (32): the longest name is then 64 bytes,
/// the daemon's limit; Kubernetes namespaces have up to 63 and [`namespace_key`] tells longer
/// ones apart.
pub const NS_CHARS: usize = 32;

/// The namespace's key: the FNV-1a (64-bit) hash of its bytes, as 16 lowercase hexadecimal
/// digits (fixed by its definition: every run of the plugin computes the same).
pub fn namespace_key(namespace: &str) -> String {
    let mut h = fnv::FnvHasher::default();
    h.write(namespace.as_bytes());
    format!("{:016x}", h.finish())
}

/// The aggregate's name of `namespace` in `direction`.
pub fn aggregate_name(namespace: &str, direction: Direction) -> String {
    let readable: String = namespace.chars().take(NS_CHARS).collect();
    format!(
        "{NS_PREFIX}{}.{}.{}",
        classes::sanitized(&readable),
        namespace_key(namespace),
        direction.word()
    )
}

/// The aggregate of `namespace` in `direction` at `rate_bps` with `burst_bits`: `gather`, its
/// rate and its burst (bytes, at least one frame, as a pod's class).
pub fn aggregate_object(
    conf: &NetConf,
    namespace: &str,
    direction: Direction,
    (rate_bps, burst_bits): (u64, u64),
) -> ClassObject {
    let mut o = ClassObject::new();
    o.insert(
        "name".into(),
        Value::from(aggregate_name(namespace, direction)),
    );
    o.insert("gather".into(), Value::from(true));
    o.insert(
        "rate".into(),
        Value::from(Rate::from_bps(rate_bps).to_string()),
    );
    o.insert(
        "burst".into(),
        Value::from(format!("{}b", classes::burst_bytes(burst_bits, conf.mtu))),
    );
    o
}

/// The aggregates `conf` asks for `namespace` (none without a namespace or a limit for it).
pub fn wanted_aggregates(conf: &NetConf, namespace: Option<&str>) -> Vec<ClassObject> {
    let (Some(ns), Some(limits)) = (namespace, conf.namespace_limits(namespace)) else {
        return Vec::new();
    };
    Direction::BOTH
        .iter()
        .filter_map(|&d| d.limit(&limits).map(|l| aggregate_object(conf, ns, d, l)))
        .collect()
}

/// Whether `shown`, the daemon's class of the name `name`, is a namespace's aggregate: the name
/// is one ([`NS_PREFIX`]), the class is the API's, gathers and has no `match`.
pub fn is_aggregate(name: &str, shown: &ClassObject) -> bool {
    name.starts_with(NS_PREFIX)
        && shown.get("source").is_none_or(|s| s == "api")
        && shown.get("gather") == Some(&Value::Bool(true))
        && shown.get("match").is_none()
}

/// Whether the daemon's aggregate `shown` has the rate and burst of `wanted` (rates compared as
/// rates, bursts as written).
pub fn same_settings(wanted: &ClassObject, shown: &ClassObject) -> bool {
    let rate = |c: &ClassObject| {
        c.get("rate")
            .and_then(Value::as_str)
            .and_then(|r| r.parse::<Rate>().ok())
    };
    rate(wanted) == rate(shown) && wanted.get("burst") == shown.get("burst")
}

/// The classes of the pod `container_id`/`ifname` on `host_if` in `namespace`: in each
/// direction its own limit (`runtimeConfig.bandwidth`) or, without one, its namespace's rate,
/// with `parent` the namespace's aggregate when the namespace has one that way. None when
/// neither limits anything.
pub fn pod_classes(
    conf: &NetConf,
    (container_id, ifname, host_if): (&str, &str, &str),
    namespace: Option<&str>,
) -> Vec<ClassObject> {
    let own = conf.limits().unwrap_or_default();
    let ns_limits = conf.namespace_limits(namespace).unwrap_or_default();
    Direction::BOTH
        .iter()
        .filter_map(|&d| {
            let of_namespace = d.limit(&ns_limits).map(|(rate, _)| (rate, 0));
            let limit = d.limit(&own).or(of_namespace)?;
            let mut class = classes::class_object(conf, container_id, ifname, host_if, d, limit);
            if let (Some(ns), Some(_)) = (namespace, of_namespace) {
                class.insert("parent".into(), Value::from(aggregate_name(ns, d)));
            }
            Some(class)
        })
        .collect()
}

/// The first direction in which the pod's own limit is above its namespace's rate, with both
/// rates in bit/s.
pub fn above_namespace(conf: &NetConf, namespace: Option<&str>) -> Option<(Direction, u64, u64)> {
    let own: Bandwidth = conf.limits()?;
    let ns = conf.namespace_limits(namespace)?;
    Direction::BOTH.iter().find_map(|&d| {
        let (pod, _) = d.limit(&own)?;
        let (limit, _) = d.limit(&ns)?;
        (pod > limit).then_some((d, pod, limit))
    })
}

#[cfg(test)]
mod tests;
