//! What the plugin's tests against a fake daemon share (`plugin.rs`, `namespaces.rs`): a
//! thread serving a Unix socket that speaks the control protocol (one JSON object per line each
//! way, docs/config.md "Live classes: the control socket") over an in-memory set of classes, a
//! thread per connection as the daemon's, and the runtime's side (the configuration, the
//! environment, the bridge plugin's result). No interface or privilege is needed: the host veth
//! is named by a fake [`Links`].
//!
//! The fake daemon refuses what the daemon's control socket refuses of a class tree, with the
//! same fields: a `parent` naming no class (`parent`), a `gather` class with a `match`
//! (`match`), a rate above the nearest ancestor's with a rate or below a child's (`rate`), and
//! the delete of a class with children (`name`, "class "X" has N children: ...").

#![allow(dead_code)]

use metronome_cni::classes::{class_name, state_path, Direction};
use metronome_cni::host::Links;
use metronome_cni::Outcome;
use metronome_core::Rate;
use metronome_daemon::ops::control::protocol::merged;
use metronome_daemon::ops::control::{ClassObject, Reply, ReplyError, Request};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The host veth of the pod of most of these tests; [`FakeLinks`] takes every `veth*` name as
/// a bridge port.
pub const VETH: &str = "veth1a2b3c4d";
pub const CONTAINER: &str = "0123456789abcdef0123456789abcdef";

pub struct FakeLinks;

impl Links for FakeLinks {
    fn is_bridge_port(&self, name: &str) -> std::io::Result<bool> {
        Ok(name.starts_with("veth"))
    }
    fn peer_of(&self, _netns: &Path, _ifname: &str) -> std::io::Result<String> {
        Err(std::io::Error::other("not asked in these tests"))
    }
}

/// A directory of its own for one test (the socket and the state directory), removed when the
/// test ends.
pub struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn scratch() -> Scratch {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "metronome-cni-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

/// Called with each request and the classes before the request is answered: what another
/// client did between two requests of the plugin.
pub type Interpose = Box<dyn FnMut(&Request, &mut BTreeMap<String, ClassObject>) + Send>;

/// What the fake daemon holds and has seen.
#[derive(Default)]
pub struct Model {
    pub classes: BTreeMap<String, ClassObject>,
    pub requests: Vec<Request>,
    /// Refuse every `add` and `change` with this error.
    pub refuse: Option<ReplyError>,
    /// Refuse every `del` with this error.
    pub refuse_del: Option<ReplyError>,
    pub interpose: Option<Interpose>,
}

#[derive(Clone)]
pub struct FakeDaemon {
    pub model: Arc<Mutex<Model>>,
}

fn refused(field: &str, message: String) -> Reply {
    Reply::refused(ReplyError::new(field, message))
}

fn applied(name: &str) -> Reply {
    Reply {
        ok: true,
        name: Some(name.to_owned()),
        applied_us: Some(1),
        loops: Some(1),
        ..Reply::default()
    }
}

fn rate_of(class: &ClassObject) -> Option<Rate> {
    class.get("rate")?.as_str()?.parse().ok()
}

fn parent_of(class: &ClassObject) -> Option<&str> {
    class.get("parent")?.as_str()
}

/// What the daemon refuses of `class` (named `name`) in the tree of `classes`.
fn tree_refusal(
    classes: &BTreeMap<String, ClassObject>,
    name: &str,
    class: &ClassObject,
) -> Option<Reply> {
    if class.get("gather") == Some(&Value::Bool(true)) && class.contains_key("match") {
        return Some(refused(
            "match",
            "a class with gather = true takes no packet of its own, only its children's: it \
             takes no match"
                .into(),
        ));
    }
    let rate = rate_of(class);
    if let Some(p) = parent_of(class) {
        if p == name {
            return Some(refused(
                "parent",
                format!("{name:?} would be its own ancestor"),
            ));
        }
        let Some(mut at) = classes.get(p) else {
            return Some(refused(
                "parent",
                format!("no class {p:?} to be the parent"),
            ));
        };
        let mut at_name = p.to_owned();
        loop {
            if let (Some(r), Some(limit)) = (rate, rate_of(at)) {
                if r.bps() > limit.bps() {
                    return Some(refused(
                        "rate",
                        format!(
                            "{r} is above the {limit} of its ancestor {at_name:?}: a limit that \
                             could never apply"
                        ),
                    ));
                }
                break;
            }
            let Some(next) = parent_of(at).and_then(|n| classes.get(n).map(|c| (n, c))) else {
                break;
            };
            at_name = next.0.to_owned();
            at = next.1;
        }
    }
    if let Some(r) = rate {
        for (child, c) in classes.iter().filter(|(_, c)| parent_of(c) == Some(name)) {
            if let Some(cr) = rate_of(c).filter(|cr| cr.bps() > r.bps()) {
                return Some(refused(
                    "rate",
                    format!(
                        "{r} is below the {cr} of its child {child:?}: the child's limit could \
                         never apply"
                    ),
                ));
            }
        }
    }
    None
}

impl Model {
    fn answer(&mut self, request: Request) -> Reply {
        self.requests.push(request.clone());
        if let Some(f) = &mut self.interpose {
            f(&request, &mut self.classes);
        }
        match request {
            Request::Add { class } => {
                let name = class["name"].as_str().unwrap().to_owned();
                if self.classes.contains_key(&name) {
                    return refused(
                        "name",
                        format!("class {name:?} exists: change or delete it"),
                    );
                }
                if let Some(e) = &self.refuse {
                    return Reply::refused(e.clone());
                }
                if let Some(r) = tree_refusal(&self.classes, &name, &class) {
                    return r;
                }
                self.classes.insert(name.clone(), class);
                applied(&name)
            }
            Request::Change { class } => {
                let name = class["name"].as_str().unwrap().to_owned();
                let Some(old) = self.classes.get(&name) else {
                    return refused("name", format!("no class {name:?}"));
                };
                if let Some(e) = &self.refuse {
                    return Reply::refused(e.clone());
                }
                let new = merged(old, &class);
                if let Some(r) = tree_refusal(&self.classes, &name, &new) {
                    return r;
                }
                self.classes.insert(name.clone(), new);
                applied(&name)
            }
            Request::Del { name } => {
                if let Some(e) = &self.refuse_del {
                    return Reply::refused(e.clone());
                }
                let children = self
                    .classes
                    .values()
                    .filter(|c| parent_of(c) == Some(name.as_str()))
                    .count();
                if children > 0 {
                    return refused(
                        "name",
                        format!(
                            "class {name:?} has {children} children: delete them or move them \
                             to another parent first"
                        ),
                    );
                }
                match self.classes.remove(&name) {
                    Some(_) => applied(&name),
                    None => refused("name", format!("no class {name:?}")),
                }
            }
            Request::Show { name } => match self.classes.get(&name) {
                Some(c) => {
                    let mut c = c.clone();
                    c.insert("source".into(), "api".into());
                    Reply {
                        ok: true,
                        class: Some(c),
                        ..Reply::default()
                    }
                }
                None => refused("name", format!("no class {name:?}")),
            },
            Request::List => Reply {
                ok: true,
                classes: Some(self.classes.values().cloned().collect()),
                ..Reply::default()
            },
        }
    }
}

impl FakeDaemon {
    /// A daemon listening on `dir/control.sock`, answering each connection on a thread of its
    /// own (requests one at a time, under the model's lock, as the daemon's model).
    pub fn start(dir: &Path) -> FakeDaemon {
        let socket = dir.join("control.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let daemon = FakeDaemon {
            model: Arc::default(),
        };
        let model = daemon.model.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let model = model.clone();
                std::thread::spawn(move || {
                    let mut writer = stream.try_clone().unwrap();
                    for line in BufReader::new(stream).lines() {
                        let Ok(line) = line else { break };
                        let reply = match Request::parse(&line) {
                            Ok(r) => model.lock().unwrap().answer(r),
                            Err(e) => Reply::refused(e),
                        };
                        if writeln!(writer, "{}", reply.to_line()).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        daemon
    }

    pub fn classes(&self) -> BTreeMap<String, ClassObject> {
        self.model.lock().unwrap().classes.clone()
    }

    pub fn requests(&self) -> Vec<Request> {
        self.model.lock().unwrap().requests.clone()
    }

    /// Puts `class` in the daemon behind the plugin's back.
    pub fn insert(&self, class: Value) {
        let Value::Object(o) = class else {
            panic!("a class is an object")
        };
        let name = o["name"].as_str().unwrap().to_owned();
        self.model.lock().unwrap().classes.insert(name, o);
    }
}

pub fn bridge_result() -> Value {
    bridge_result_with(VETH)
}

/// The bridge plugin's result for a pod whose host veth is `veth`.
pub fn bridge_result_with(veth: &str) -> Value {
    json!({"cniVersion":"1.0.0",
        "interfaces":[
            {"name":"cni0","mac":"00:11:22:33:44:55"},
            {"name":veth,"mac":"55:44:33:22:11:11"},
            {"name":"eth0","mac":"99:88:77:66:55:44","sandbox":"/var/run/netns/blue"}],
        "ips":[{"address":"10.22.0.5/24","gateway":"10.22.0.1","interface":2}],
        "dns":{}})
}

/// The configuration a runtime passes: the plugin's keys, `runtimeConfig.bandwidth` when given,
/// and the bridge plugin's result.
pub fn conf(dir: &Path, bandwidth: Option<Value>) -> Value {
    let mut c = json!({"cniVersion":"1.0.0","name":"pods","type":"metronome-cni",
        "socket": dir.join("control.sock"), "stateDir": dir.join("state"),
        "prevResult": bridge_result()});
    if let Some(b) = bandwidth {
        c["runtimeConfig"] = json!({ "bandwidth": b });
    }
    c
}

pub fn invoke_env(env: &[(&str, &str)], stdin: &[u8]) -> Outcome {
    let env: BTreeMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    metronome_cni::run(|k| env.get(k).cloned(), stdin, &FakeLinks)
}

pub fn invoke(command: &str, conf: &Value) -> Outcome {
    invoke_pod(command, (CONTAINER, "eth0"), conf)
}

/// `command` for the pod of container `id` and interface `ifname`.
pub fn invoke_pod(command: &str, pod: (&str, &str), conf: &Value) -> Outcome {
    invoke_args(command, pod, None, conf)
}

/// `command` for the pod of container `id` and interface `ifname`, with `args` as `CNI_ARGS`.
pub fn invoke_args(
    command: &str,
    (id, ifname): (&str, &str),
    args: Option<&str>,
    conf: &Value,
) -> Outcome {
    let mut env = vec![
        ("CNI_COMMAND", command),
        ("CNI_CONTAINERID", id),
        ("CNI_NETNS", "/var/run/netns/blue"),
        ("CNI_IFNAME", ifname),
        ("CNI_PATH", "/opt/cni/bin"),
    ];
    env.extend(args.map(|a| ("CNI_ARGS", a)));
    invoke_env(&env, conf.to_string().as_bytes())
}

/// The error object of a failed invocation, checked for the specification's keys.
pub fn error_of(out: &Outcome) -> Value {
    assert_ne!(out.exit_code, 0, "{out:?}");
    let e: Value = serde_json::from_str(&out.stdout).unwrap();
    assert!(e["cniVersion"].is_string(), "{e}");
    assert!(e["code"].is_u64(), "{e}");
    assert!(e["msg"].is_string(), "{e}");
    e
}

pub fn egress() -> String {
    class_name(CONTAINER, "eth0", Direction::Egress)
}

pub fn ingress() -> String {
    class_name(CONTAINER, "eth0", Direction::Ingress)
}

pub fn state_file(dir: &Path) -> PathBuf {
    state_path(&dir.join("state"), CONTAINER, "eth0")
}

pub fn both_ways() -> Value {
    json!({"egressRate":100000000,"egressBurst":800000,
           "ingressRate":50000000,"ingressBurst":1000})
}
