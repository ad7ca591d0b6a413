//! The namespace's aggregates on the daemon ([`crate::namespace`]): made by the first pod's
//! ADD, shared by the others, changed when the configuration's limit changed, deleted by the
//! DEL of the last pod.
//!
//! * **ADD** `add`s each aggregate; one there already (another pod's, or a racing ADD's) is
//!   taken when it is an aggregate, `change`d when its rate or burst differ from the
//!   configuration's. A pod's class that the daemon refuses for its `parent` (the last other
//!   pod's DEL deleted the aggregate in between) makes the aggregate again, up to
//!   [`ATTEMPTS`] times.
//! * **DEL** `del`s each aggregate the pod's state file records, after the pod's own classes:
//!   the daemon refuses it while another pod's class is its child, and that refusal (field
//!   `name`, as for a class already gone) is success.

use super::{name_of, not_answering, refused, shown};
use crate::classes::{ClassFile, Direction};
use crate::error::{CniError, ABOVE_NAMESPACE, CLASS_NOT_OWNED};
use crate::namespace;
use metronome_core::Rate;
use metronome_daemon::ops::control::{ClassObject, Client, Reply};
use serde_json::Value;

/// Tries of an aggregate's `add` and of a pod's class under it (3): each retry follows a DEL
/// that deleted the aggregate between two requests of this ADD, which needs the namespace's
/// last other pod to go at that moment; three in a row is a daemon that keeps refusing.
pub const ATTEMPTS: usize = 3;

/// Error 102 for the class `name` the daemon shows as `shown`, which is not an aggregate.
pub(super) fn not_aggregate(name: &str, shown: &ClassObject) -> CniError {
    CniError::new(
        CLASS_NOT_OWNED,
        format!("class {name} is not a namespace aggregate"),
        format!(
            "the daemon has a class {name} (match {}, gather {}, source {}) that is not the \
             namespace's aggregate (a class of the API with gather = true and no match): it is \
             left as it is; delete it (`metronome class del {name}`) if it is stale",
            shown.get("match").unwrap_or(&Value::Null),
            shown.get("gather").unwrap_or(&Value::Null),
            shown.get("source").unwrap_or(&Value::Null)
        ),
    )
}

/// Error 103: the pod's limit `pod_bps` in `direction` is above its namespace's `limit_bps`.
pub(super) fn above_namespace(
    namespace: &str,
    direction: Direction,
    pod_bps: u64,
    limit_bps: u64,
) -> CniError {
    let word = direction.word();
    CniError::new(
        ABOVE_NAMESPACE,
        format!("the pod's {word} limit is above its namespace's"),
        format!(
            "runtimeConfig.bandwidth.{word}Rate {} is above the {} of namespace {namespace:?} \
             (namespaceBandwidth), which limits all its pods together: lower the pod's \
             kubernetes.io/{word}-bandwidth or raise the namespace's limit",
            Rate::from_bps(pod_bps),
            Rate::from_bps(limit_bps)
        ),
    )
}

/// Whether the daemon's `reply` refused a class for its `field`.
fn refused_for(reply: &Reply, field: &str) -> bool {
    !reply.ok && reply.error.as_ref().is_some_and(|e| e.field == field)
}

/// Puts `aggregate` in force: `add`, or the aggregate of its name already there, changed to
/// `aggregate` when its rate or burst differ.
pub(super) fn ensure(client: &mut Client, aggregate: &ClassObject) -> Result<(), CniError> {
    let name = name_of(aggregate);
    for _ in 0..ATTEMPTS {
        let reply = client
            .add(aggregate.clone())
            .map_err(|e| not_answering(&e))?;
        if reply.ok {
            return Ok(());
        }
        if !refused_for(&reply, "name") {
            return Err(refused(name, &reply));
        }
        // There already, or deleted since (then added again).
        let Some(s) = shown(client, name)? else {
            continue;
        };
        if !namespace::is_aggregate(name, &s) {
            return Err(not_aggregate(name, &s));
        }
        if namespace::same_settings(aggregate, &s) {
            return Ok(());
        }
        let reply = client
            .change(aggregate.clone())
            .map_err(|e| not_answering(&e))?;
        if reply.ok {
            return Ok(());
        }
        if !refused_for(&reply, "name") {
            return Err(refused(name, &reply));
        }
    }
    Err(CniError::new(
        crate::error::TRY_AGAIN_LATER,
        format!("the daemon did not keep class {name}"),
        format!("the aggregate was deleted {ATTEMPTS} times while this ADD made it"),
    ))
}

/// Registers the pod's `class` ([`super::register`]); refused for its `parent`, makes the
/// aggregate again (one of `aggregates`) and tries again; refused for its `rate` under a
/// parent, error 103 with the daemon's words.
pub(super) fn register_child(
    client: &mut Client,
    class: &ClassObject,
    aggregates: &[ClassObject],
    record: Option<&ClassFile>,
    namespace: &str,
) -> Result<(), CniError> {
    let name = name_of(class);
    let parent = class.get("parent").and_then(Value::as_str);
    let mut last = None;
    for _ in 0..ATTEMPTS {
        let Some(reply) = super::register(client, class, record)? else {
            return Ok(());
        };
        let aggregate = aggregates.iter().find(|a| Some(name_of(a)) == parent);
        match aggregate {
            Some(a) if refused_for(&reply, "parent") => ensure(client, a)?,
            Some(_) if refused_for(&reply, "rate") => {
                let details = reply.error.map(|e| e.to_string()).unwrap_or_default();
                return Err(CniError::new(
                    ABOVE_NAMESPACE,
                    format!("the daemon refused class {name} under namespace {namespace:?}"),
                    details,
                ));
            }
            _ => return Err(refused(name, &reply)),
        }
        last = Some(reply);
    }
    Err(last.map_or_else(
        || refused(name, &Reply::default()),
        |reply| refused(name, &reply),
    ))
}

/// The aggregates `record` lists (names with [`namespace::NS_PREFIX`] that gather).
pub(super) fn recorded(record: Option<&ClassFile>) -> Vec<String> {
    record
        .into_iter()
        .flat_map(|r| &r.classes)
        .filter(|c| {
            name_of(c).starts_with(namespace::NS_PREFIX)
                && c.get("gather") == Some(&Value::Bool(true))
        })
        .map(|c| name_of(c).to_owned())
        .collect()
}

/// `del`s each of `names` that the daemon shows as an aggregate: refused while it has children
/// (another pod of the namespace), or gone already, both fine; one that is not an aggregate is
/// left and noted. `Ok(false)`: the daemon went away (noted).
pub(super) fn delete(
    client: &mut Client,
    names: &[String],
    notes: &mut Vec<String>,
) -> Result<bool, CniError> {
    for name in names {
        let reply = match client.show(name) {
            Ok(r) => r,
            Err(e) => return super::daemon_gone(&e, notes),
        };
        let Some(s) = super::class_of(name, reply)? else {
            continue;
        };
        if !namespace::is_aggregate(name, &s) {
            notes.push(format!(
                "metronome-cni DEL: {}: left as it is",
                not_aggregate(name, &s).details
            ));
            continue;
        }
        match client.delete(name) {
            // Deleted, or still another pod's parent, or deleted meanwhile.
            Ok(reply) if reply.ok || refused_for(&reply, "name") => {}
            Ok(reply) => return Err(refused(name, &reply)),
            Err(e) => return super::daemon_gone(&e, notes),
        }
    }
    Ok(true)
}

/// What CHECK finds wrong with the aggregates `wanted`: not in the state file `file`, not in
/// the daemon, not an aggregate there, or at another rate.
pub(super) fn problems(
    client: &mut Client,
    wanted: &[ClassObject],
    file: &ClassFile,
) -> Result<Vec<String>, CniError> {
    let mut out = Vec::new();
    for aggregate in wanted {
        let name = name_of(aggregate);
        if !file.classes.iter().any(|c| name_of(c) == name) {
            out.push(format!("class {name} not in the state file"));
        }
        match shown(client, name)? {
            None => out.push(format!("class {name} not in the daemon")),
            Some(s) if !namespace::is_aggregate(name, &s) => {
                out.push(format!(
                    "class {name} in the daemon is not a namespace aggregate"
                ));
            }
            Some(s) => out.extend(super::differences(aggregate, &s)),
        }
    }
    Ok(out)
}
