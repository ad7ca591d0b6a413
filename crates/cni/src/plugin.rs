//! The four commands (CNI specification 1.0.0, "CNI operations"), as docs/cni.md describes them
//! to an operator:
//!
//! * **ADD**: with `runtimeConfig.bandwidth` or an aggregate for the pod's namespace
//!   ([`crate::namespace`]), refuse a pod above its namespace (error 103), check that no class
//!   of the pod's names is in the daemon unless it is the pod's own and none of its
//!   namespace's aggregate names unless it is an aggregate, write the state file, then put the
//!   aggregates in force (`aggregates`) and `add` each class (a name that exists and is the
//!   pod's: `change` to the new object); print `prevResult` unchanged. Without a limit: print
//!   `prevResult`, register nothing, write nothing. The daemon not answering is
//!   error 11 and the state file stays: the daemon adds its classes when it starts, and the
//!   runtime calls DEL after a failed ADD anyway.
//! * **DEL**: `del` each of the pod's two names that its state file records and the daemon shows
//!   with the recorded match (a name the daemon does not know is fine; one that is not the
//!   pod's is left and noted), then the aggregates it records when no other pod uses them, then
//!   remove the state file. The daemon not answering is success:
//!   the file is gone when it starts again. Nothing on stdout.
//! * **CHECK**: the state file lists the classes `runtimeConfig` and `namespaceBandwidth` ask
//!   for and the daemon `show`s each with that match, parent and rate, and each aggregate; else
//!   error 100 saying what is missing.
//! * **VERSION**: the supported versions.
//!
//! **Ownership.** A class is the pod's when its name is one of the pod's ([`classes::class_name`]
//! of its full container ID and interface name), the daemon shows it as a class of the API, and
//! the pod's state file (as it was before this command) records a class of that name with the
//! same `match`. The state directory is the plugin's alone ([`crate::state`]), so no other local
//! user can record a class for a pod. A class of the pod's name that is not the pod's is never
//! changed or deleted: ADD fails with error 102, DEL leaves it.

use crate::classes::{self, ClassFile, Direction};
use crate::error::{
    CniError, CLASS_NOT_OWNED, INCOMPATIBLE_VERSION, INVALID_CONFIG, IO_FAILURE, LIMITS_MISSING,
    TRY_AGAIN_LATER,
};
use crate::host::{self, Links};
use crate::invocation::{Command, Invocation};
use crate::namespace;
use crate::netconf::{NetConf, CURRENT_VERSION, SUPPORTED_VERSIONS};
use crate::state::{StateDir, StateDirError};
use metronome_core::Rate;
use metronome_daemon::ops::control::{ClassObject, Client, ClientError, Reply};
use serde_json::{Map, Value};

mod aggregates;

/// What one invocation prints and returns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// stdout: the result, the version object or the error object; empty for a DEL or CHECK
    /// that succeeded.
    pub stdout: String,
    /// Lines for stderr (unstructured, as the specification allows): what succeeded with a
    /// reservation (a DEL without a daemon).
    pub notes: Vec<String>,
    /// The exit status: 0, or 1 with an error object on stdout.
    pub exit_code: i32,
}

/// Runs one invocation: the environment through `var`, the configuration in `stdin`.
pub fn run(var: impl Fn(&str) -> Option<String>, stdin: &[u8], links: &dyn Links) -> Outcome {
    let mut notes = Vec::new();
    match dispatch(var, stdin, links, &mut notes) {
        Ok(stdout) => Outcome {
            stdout,
            notes,
            exit_code: 0,
        },
        Err(e) => Outcome {
            stdout: e.to_json(crate::netconf::error_version(stdin)),
            notes,
            exit_code: 1,
        },
    }
}

fn dispatch(
    var: impl Fn(&str) -> Option<String>,
    stdin: &[u8],
    links: &dyn Links,
    notes: &mut Vec<String>,
) -> Result<String, CniError> {
    let invocation = Invocation::from_env(var)?;
    if invocation.command == Command::Version {
        return Ok(version());
    }
    let conf = NetConf::parse(stdin)?;
    match invocation.command {
        Command::Add => add(&invocation, &conf, links),
        Command::Del => del(&invocation, &conf, notes).map(|()| String::new()),
        Command::Check => check(&invocation, &conf).map(|()| String::new()),
        Command::Version => Ok(version()),
    }
}

/// `{"cniVersion":"1.0.0","supportedVersions":[...]}`.
fn version() -> String {
    serde_json::json!({"cniVersion": CURRENT_VERSION, "supportedVersions": SUPPORTED_VERSIONS})
        .to_string()
}

fn prev_result(conf: &NetConf, command: Command) -> Result<&Map<String, Value>, CniError> {
    conf.prev_result.as_ref().ok_or_else(|| {
        CniError::new(
            INVALID_CONFIG,
            "no prevResult",
            format!(
                "{}: metronome-cni is a chained plugin: list it after the plugin that makes \
                 the pod's interface (bridge)",
                command.word()
            ),
        )
    })
}

/// `result` in the configuration's version (the runtime converted `prevResult` to it).
fn result_json(result: &Map<String, Value>, cni_version: &str) -> String {
    let mut r = result.clone();
    r.insert("cniVersion".into(), Value::from(cni_version));
    Value::Object(r).to_string()
}

fn connect(conf: &NetConf) -> Result<Client, CniError> {
    Client::connect(&conf.socket).map_err(|e| not_answering(&e))
}

fn not_answering(e: &ClientError) -> CniError {
    CniError::new(
        TRY_AGAIN_LATER,
        "the metronome daemon does not answer",
        e.to_string(),
    )
}

fn refused(name: &str, reply: &Reply) -> CniError {
    let error = reply
        .error
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_else(|| "refused without a reason".to_owned());
    let field = reply.error.as_ref().map(|e| e.field.as_str()).unwrap_or("");
    if field.is_empty() {
        // About no field: the daemon's loops did not apply it in time.
        CniError::new(
            TRY_AGAIN_LATER,
            format!("the daemon did not apply class {name}"),
            error,
        )
    } else {
        CniError::new(
            INVALID_CONFIG,
            format!("the daemon refused class {name}"),
            error,
        )
    }
}

fn io_failure(what: &str, path: &std::path::Path, e: std::io::Error) -> CniError {
    CniError::new(IO_FAILURE, what, format!("{}: {e}", path.display()))
}

fn state_dir_failure(e: StateDirError) -> CniError {
    CniError::new(
        IO_FAILURE,
        "the state directory cannot be used",
        e.to_string(),
    )
}

fn name_of(class: &ClassObject) -> &str {
    class.get("name").and_then(Value::as_str).unwrap_or("")
}

/// The pod's state file in `dir`, when it is there, readable and the pod's (its container ID
/// and interface name are the invocation's); else `None`, with a note saying why when it is
/// there but not taken.
fn record(dir: &StateDir, inv: &Invocation, notes: &mut Vec<String>) -> Option<ClassFile> {
    let name = classes::state_name(&inv.container_id, &inv.ifname);
    let path = dir.path().join(&name);
    match dir.read(&name) {
        Ok(Some(f)) if f.container_id == inv.container_id && f.ifname == inv.ifname => Some(f),
        Ok(Some(f)) => {
            notes.push(format!(
                "metronome-cni {}: state file {} is for container {:?} interface {:?}: not \
                 this pod's record",
                inv.command.word(),
                path.display(),
                f.container_id,
                f.ifname
            ));
            None
        }
        Ok(None) => None,
        Err(e) => {
            notes.push(format!(
                "metronome-cni {}: state file {} unreadable ({e}): not taken as the pod's record",
                inv.command.word(),
                path.display()
            ));
            None
        }
    }
}

/// Whether `shown`, the daemon's class of the name `name`, is the pod's: a class of the API that
/// `record` lists under that name with the same `match`.
fn owned(name: &str, shown: &ClassObject, record: Option<&ClassFile>) -> bool {
    let api = shown.get("source").is_none_or(|s| s == "api");
    let recorded = record
        .into_iter()
        .flat_map(|r| &r.classes)
        .find(|c| name_of(c) == name);
    api && recorded
        .is_some_and(|c| c.get("match").is_some() && c.get("match") == shown.get("match"))
}

fn not_owned(name: &str, shown: &ClassObject) -> CniError {
    CniError::new(
        CLASS_NOT_OWNED,
        format!("class {name} is not this pod's"),
        format!(
            "the daemon has a class {name} (match {}, source {}) that the pod's state file does \
             not record with that match: it is left as it is; delete it (`metronome class del \
             {name}`) if it is stale",
            shown.get("match").unwrap_or(&Value::Null),
            shown.get("source").unwrap_or(&Value::Null)
        ),
    )
}

/// The daemon's class `name`: `None` when it has none.
fn shown(client: &mut Client, name: &str) -> Result<Option<ClassObject>, CniError> {
    let reply = client.show(name).map_err(|e| not_answering(&e))?;
    class_of(name, reply)
}

/// The class of `show`'s `reply`: `None` when the daemon has no class `name`.
fn class_of(name: &str, reply: Reply) -> Result<Option<ClassObject>, CniError> {
    if reply.ok {
        if let Some(c) = reply.class {
            return Ok(Some(c));
        }
    }
    if reply.error.as_ref().is_some_and(|e| e.field == "name") {
        Ok(None)
    } else {
        Err(refused(name, &reply))
    }
}

fn add(inv: &Invocation, conf: &NetConf, links: &dyn Links) -> Result<String, CniError> {
    let prev = prev_result(conf, Command::Add)?;
    let output = result_json(prev, &conf.cni_version);
    let ns = inv.pod_namespace.as_deref();
    if conf.limits().is_none() && conf.namespace_limits(ns).is_none() {
        return Ok(output);
    }
    if let Some((direction, pod, limit)) = namespace::above_namespace(conf, ns) {
        return Err(aggregates::above_namespace(
            ns.unwrap_or_default(),
            direction,
            pod,
            limit,
        ));
    }
    let host_if = host::host_interface(Some(prev), inv.netns.as_deref(), &inv.ifname, links)?;
    let pod = (
        inv.container_id.as_str(),
        inv.ifname.as_str(),
        host_if.as_str(),
    );
    let wanted = namespace::pod_classes(conf, pod, ns);
    let parents = namespace::wanted_aggregates(conf, ns);
    let dir = StateDir::make(&conf.state_dir).map_err(state_dir_failure)?;
    let name = classes::state_name(&inv.container_id, &inv.ifname);
    let path = dir.path().join(&name);
    let before = record(&dir, inv, &mut Vec::new());
    // The aggregates first: the daemon's `class_dir` adds a file's classes in order.
    let file = ClassFile {
        interface: host_if.clone(),
        container_id: inv.container_id.clone(),
        ifname: inv.ifname.clone(),
        netns: inv
            .netns
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        classes: parents.iter().chain(&wanted).cloned().collect(),
    };
    let write = || {
        dir.write(&name, &file)
            .map_err(|e| io_failure("writing the state file", &path, e))
    };
    let mut client = match connect(conf) {
        Ok(c) => c,
        Err(e) => {
            write()?;
            return Err(e);
        }
    };
    // Before anything is written: no class of the pod's names but its own, and none of its
    // namespace's aggregate names but an aggregate.
    for class in &wanted {
        let n = name_of(class);
        if let Some(s) = shown(&mut client, n)? {
            if !owned(n, &s, before.as_ref()) {
                return Err(not_owned(n, &s));
            }
        }
    }
    for aggregate in &parents {
        let n = name_of(aggregate);
        if let Some(s) = shown(&mut client, n)? {
            if !namespace::is_aggregate(n, &s) {
                return Err(aggregates::not_aggregate(n, &s));
            }
        }
    }
    write()?;
    for aggregate in &parents {
        aggregates::ensure(&mut client, aggregate)?;
    }
    for class in &wanted {
        let ns = ns.unwrap_or_default();
        aggregates::register_child(&mut client, class, &parents, before.as_ref(), ns)?;
    }
    Ok(output)
}

/// `add`s `class`; when its name exists and the class is the pod's (`record`), `change`s it to
/// `class`. `Ok(Some(reply))`: the daemon refused it so (the caller says what it means).
fn register(
    client: &mut Client,
    class: &ClassObject,
    record: Option<&ClassFile>,
) -> Result<Option<Reply>, CniError> {
    let name = name_of(class);
    let reply = client.add(class.clone()).map_err(|e| not_answering(&e))?;
    if reply.ok {
        return Ok(None);
    }
    let exists = reply.error.as_ref().is_some_and(|e| e.field == "name");
    if !exists {
        return Ok(Some(reply));
    }
    // Made since the check of `add`: the pod's only if its record says so.
    if let Some(s) = shown(client, name)? {
        if !owned(name, &s, record) {
            return Err(not_owned(name, &s));
        }
    }
    let reply = client
        .change(classes::as_change(class))
        .map_err(|e| not_answering(&e))?;
    Ok((!reply.ok).then_some(reply))
}

fn del(inv: &Invocation, conf: &NetConf, notes: &mut Vec<String>) -> Result<(), CniError> {
    let Some(dir) = StateDir::open(&conf.state_dir).map_err(state_dir_failure)? else {
        // No state directory: no state file, so no class recorded as the pod's.
        return Ok(());
    };
    let name = classes::state_name(&inv.container_id, &inv.ifname);
    let path = dir.path().join(&name);
    let record = record(&dir, inv, notes);
    // The pod's names that its record lists: nothing else is deleted.
    let names: Vec<String> = Direction::BOTH
        .iter()
        .map(|&d| classes::class_name(&inv.container_id, &inv.ifname, d))
        .filter(|n| {
            record
                .iter()
                .flat_map(|r| &r.classes)
                .any(|c| name_of(c) == n)
        })
        .collect();
    // Its namespace's aggregates, after its own classes (their children).
    let parents = aggregates::recorded(record.as_ref());
    if !names.is_empty() || !parents.is_empty() {
        match Client::connect(&conf.socket) {
            Err(e) => notes.push(format!(
                "metronome-cni DEL: {e}: the state file is removed, so a daemon starting again \
                 does not restore the pod's classes"
            )),
            Ok(mut client) => {
                if delete_owned(&mut client, &names, record.as_ref(), notes)? {
                    aggregates::delete(&mut client, &parents, notes)?;
                }
            }
        }
    }
    dir.remove(&name)
        .map_err(|e| io_failure("removing the state file", &path, e))
}

/// Notes that the daemon went away during a DEL (`Ok(false)`: the caller stops deleting and the
/// state file is removed).
fn daemon_gone(e: &ClientError, notes: &mut Vec<String>) -> Result<bool, CniError> {
    notes.push(format!(
        "metronome-cni DEL: {e}: the daemon went away; the state file is removed"
    ));
    Ok(false)
}

/// `del`s each of `names` that the daemon shows as the pod's (`record`); one it does not know is
/// fine, one that is not the pod's is left and noted. `Ok(false)`: the daemon went away
/// (noted).
fn delete_owned(
    client: &mut Client,
    names: &[String],
    record: Option<&ClassFile>,
    notes: &mut Vec<String>,
) -> Result<bool, CniError> {
    for name in names {
        let reply = match client.show(name) {
            Ok(r) => r,
            Err(e) => return daemon_gone(&e, notes),
        };
        // No such class (never added, deleted already): nothing to delete.
        let Some(shown) = class_of(name, reply)? else {
            continue;
        };
        if !owned(name, &shown, record) {
            notes.push(format!(
                "metronome-cni DEL: {}: left as it is",
                not_owned(name, &shown).details
            ));
            continue;
        }
        match client.delete(name) {
            Ok(reply) if reply.ok => {}
            // Deleted meanwhile.
            Ok(reply) if reply.error.as_ref().is_some_and(|e| e.field == "name") => {}
            Ok(reply) => return Err(refused(name, &reply)),
            Err(e) => return daemon_gone(&e, notes),
        }
    }
    Ok(true)
}

fn check(inv: &Invocation, conf: &NetConf) -> Result<(), CniError> {
    if !conf.has_check() {
        return Err(CniError::new(
            INCOMPATIBLE_VERSION,
            "CHECK is not in this cniVersion",
            format!(
                "cniVersion {} has no CHECK (0.4.0 and later)",
                conf.cni_version
            ),
        ));
    }
    prev_result(conf, Command::Check)?;
    let ns = inv.pod_namespace.as_deref();
    if conf.limits().is_none() && conf.namespace_limits(ns).is_none() {
        return Ok(());
    }
    let path = classes::state_path(&conf.state_dir, &inv.container_id, &inv.ifname);
    let dir = StateDir::open(&conf.state_dir).map_err(state_dir_failure)?;
    let read = match &dir {
        Some(d) => d.read(&classes::state_name(&inv.container_id, &inv.ifname)),
        None => Ok(None),
    };
    let file = match read {
        Ok(Some(f)) => f,
        Ok(None) => return Err(missing(vec![format!("no state file {}", path.display())])),
        Err(e) => {
            return Err(missing(vec![format!(
                "state file {} unreadable: {e}",
                path.display()
            )]))
        }
    };
    let pod = (
        inv.container_id.as_str(),
        inv.ifname.as_str(),
        file.interface.as_str(),
    );
    let wanted = namespace::pod_classes(conf, pod, ns);
    let mut client = connect(conf)?;
    let parents = namespace::wanted_aggregates(conf, ns);
    let mut problems = aggregates::problems(&mut client, &parents, &file)?;
    for class in &wanted {
        let name = name_of(class);
        if !file.classes.iter().any(|c| name_of(c) == name) {
            problems.push(format!("class {name} not in the state file"));
        }
        let reply = client.show(name).map_err(|e| not_answering(&e))?;
        match reply.class.filter(|_| reply.ok) {
            None => problems.push(format!("class {name} not in the daemon")),
            Some(shown) => problems.extend(differences(class, &shown)),
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(missing(problems))
    }
}

fn missing(problems: Vec<String>) -> CniError {
    CniError::new(
        LIMITS_MISSING,
        "the pod's limits are not in force",
        problems.join("; "),
    )
}

/// How the daemon's `shown` class differs from `wanted` in its match, its parent and its rate
/// (rates compared as rates: `100mbit` is `100000000bit`).
fn differences(wanted: &ClassObject, shown: &ClassObject) -> Vec<String> {
    let name = name_of(wanted);
    let mut out = Vec::new();
    for key in ["match", "parent"] {
        if wanted.get(key) != shown.get(key) {
            out.push(format!(
                "class {name}: {key} {} in the daemon, {} wanted",
                shown.get(key).unwrap_or(&Value::Null),
                wanted.get(key).unwrap_or(&Value::Null)
            ));
        }
    }
    let rate = |c: &ClassObject| {
        c.get("rate")
            .and_then(Value::as_str)
            .and_then(|r| r.parse::<Rate>().ok())
    };
    if rate(wanted) != rate(shown) {
        out.push(format!(
            "class {name}: rate {} in the daemon, {} wanted",
            shown.get("rate").unwrap_or(&Value::Null),
            wanted.get("rate").unwrap_or(&Value::Null)
        ));
    }
    out
}
