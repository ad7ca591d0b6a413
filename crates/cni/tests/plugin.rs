//! The plugin's commands against a fake daemon: a thread serving a Unix socket that speaks the
//! control protocol (one JSON object per line each way, docs/config.md "Live classes: the
//! control socket") over an in-memory set of classes. No interface or privilege is needed: the
//! host veth is named by a fake [`Links`].

use metronome_cni::error::{
    DECODING_FAILURE, INCOMPATIBLE_VERSION, INVALID_CONFIG, INVALID_ENVIRONMENT, LIMITS_MISSING,
    TRY_AGAIN_LATER,
};
use metronome_cni::host::Links;
use metronome_cni::Outcome;
use metronome_daemon::ops::control::protocol::merged;
use metronome_daemon::ops::control::{ClassObject, Reply, ReplyError, Request};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The host veth of every pod in these tests, a bridge port for [`FakeLinks`].
const VETH: &str = "veth1a2b3c4d";
const CONTAINER: &str = "0123456789abcdef0123456789abcdef";

struct FakeLinks;

impl Links for FakeLinks {
    fn is_bridge_port(&self, name: &str) -> std::io::Result<bool> {
        Ok(name == VETH)
    }
    fn peer_of(&self, _netns: &Path, _ifname: &str) -> std::io::Result<String> {
        Err(std::io::Error::other("not asked in these tests"))
    }
}

/// A directory of its own for one test (the socket and the state directory), removed when the
/// test ends.
struct Scratch(PathBuf);

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

fn scratch() -> Scratch {
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

/// What the fake daemon holds and has seen.
#[derive(Default)]
struct Model {
    classes: BTreeMap<String, ClassObject>,
    requests: Vec<Request>,
    /// Refuse every `add` and `change` with this error.
    refuse: Option<ReplyError>,
    /// Refuse every `del` with this error.
    refuse_del: Option<ReplyError>,
}

#[derive(Clone)]
struct FakeDaemon {
    model: Arc<Mutex<Model>>,
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

impl Model {
    fn answer(&mut self, request: Request) -> Reply {
        self.requests.push(request.clone());
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
                self.classes.insert(name.clone(), new);
                applied(&name)
            }
            Request::Del { name } => {
                if let Some(e) = &self.refuse_del {
                    return Reply::refused(e.clone());
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
    /// A daemon listening on `dir/control.sock`, answering each connection in turn.
    fn start(dir: &Path) -> FakeDaemon {
        let socket = dir.join("control.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let daemon = FakeDaemon {
            model: Arc::default(),
        };
        let model = daemon.model.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
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
            }
        });
        daemon
    }

    fn classes(&self) -> BTreeMap<String, ClassObject> {
        self.model.lock().unwrap().classes.clone()
    }

    fn requests(&self) -> Vec<Request> {
        self.model.lock().unwrap().requests.clone()
    }
}

fn bridge_result() -> Value {
    json!({"cniVersion":"1.0.0",
        "interfaces":[
            {"name":"cni0","mac":"00:11:22:33:44:55"},
            {"name":VETH,"mac":"55:44:33:22:11:11"},
            {"name":"eth0","mac":"99:88:77:66:55:44","sandbox":"/var/run/netns/blue"}],
        "ips":[{"address":"10.22.0.5/24","gateway":"10.22.0.1","interface":2}],
        "dns":{}})
}

/// The configuration a runtime passes: the plugin's keys, `runtimeConfig.bandwidth` when given,
/// and the bridge plugin's result.
fn conf(dir: &Path, bandwidth: Option<Value>) -> Value {
    let mut c = json!({"cniVersion":"1.0.0","name":"pods","type":"metronome-cni",
        "socket": dir.join("control.sock"), "stateDir": dir.join("state"),
        "prevResult": bridge_result()});
    if let Some(b) = bandwidth {
        c["runtimeConfig"] = json!({ "bandwidth": b });
    }
    c
}

fn invoke_env(env: &[(&str, &str)], stdin: &[u8]) -> Outcome {
    let env: BTreeMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    metronome_cni::run(|k| env.get(k).cloned(), stdin, &FakeLinks)
}

fn invoke(command: &str, conf: &Value) -> Outcome {
    invoke_env(
        &[
            ("CNI_COMMAND", command),
            ("CNI_CONTAINERID", CONTAINER),
            ("CNI_NETNS", "/var/run/netns/blue"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", "/opt/cni/bin"),
        ],
        conf.to_string().as_bytes(),
    )
}

/// The error object of a failed invocation, checked for the specification's keys.
fn error_of(out: &Outcome) -> Value {
    assert_ne!(out.exit_code, 0, "{out:?}");
    let e: Value = serde_json::from_str(&out.stdout).unwrap();
    assert!(e["cniVersion"].is_string(), "{e}");
    assert!(e["code"].is_u64(), "{e}");
    assert!(e["msg"].is_string(), "{e}");
    e
}

const EGRESS: &str = "cni.0123456789ab.eth0.egress";
const INGRESS: &str = "cni.0123456789ab.eth0.ingress";

fn state_file(dir: &Path) -> PathBuf {
    dir.join("state").join(format!("{CONTAINER}-eth0.json"))
}

fn both_ways() -> Value {
    json!({"egressRate":100000000,"egressBurst":800000,
           "ingressRate":50000000,"ingressBurst":1000})
}

#[test]
fn version_lists_the_supported_versions() {
    let out = invoke_env(&[("CNI_COMMAND", "VERSION")], br#"{"cniVersion":"1.0.0"}"#);
    assert_eq!(out.exit_code, 0);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        v,
        json!({"cniVersion":"1.0.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0"]})
    );
    // Nothing on stdin is fine too.
    assert_eq!(invoke_env(&[("CNI_COMMAND", "VERSION")], b"").exit_code, 0);
}

#[test]
fn add_with_bandwidth_registers_both_classes_and_writes_the_state_file() {
    let dir = scratch();
    let daemon = FakeDaemon::start(&dir);
    let out = invoke("ADD", &conf(&dir, Some(both_ways())));
    assert_eq!(out.exit_code, 0, "{out:?}");
    // The result is prevResult, unchanged.
    let result: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(result, bridge_result());
    let classes = daemon.classes();
    assert_eq!(
        Value::Object(classes[EGRESS].clone()),
        json!({"name":EGRESS,"match":{"from":VETH},"rate":"100mbit","burst":"100000b",
               "fair":true})
    );
    // A burst below one frame is one frame (mtu 1500 + 14).
    assert_eq!(
        Value::Object(classes[INGRESS].clone()),
        json!({"name":INGRESS,"match":{"to":VETH},"rate":"50mbit","burst":"1514b","fair":true})
    );
    let state: Value = serde_json::from_slice(&std::fs::read(state_file(&dir)).unwrap()).unwrap();
    assert_eq!(state["interface"], json!(VETH));
    assert_eq!(state["container_id"], json!(CONTAINER));
    assert_eq!(state["ifname"], json!("eth0"));
    assert_eq!(state["netns"], json!("/var/run/netns/blue"));
    assert_eq!(
        state["classes"],
        json!([classes[EGRESS].clone(), classes[INGRESS].clone()])
    );
}

#[test]
fn add_with_ecn_and_without_fair_says_so_in_the_classes() {
    let dir = scratch();
    let daemon = FakeDaemon::start(&dir);
    let mut c = conf(&dir, Some(json!({"egressRate":1000000})));
    c["fair"] = json!(false);
    c["ecn"] = json!(true);
    c["ecnThreshold"] = json!("1ms");
    assert_eq!(invoke("ADD", &c).exit_code, 0);
    let classes = daemon.classes();
    assert_eq!(classes.len(), 1, "{classes:?}");
    assert_eq!(classes[EGRESS]["fair"], json!(false));
    assert_eq!(
        classes[EGRESS]["backpressure"],
        json!({"mode":"ecn","threshold":"1ms"})
    );
}

#[test]
fn add_without_bandwidth_passes_the_result_through_and_registers_nothing() {
    let dir = scratch();
    let daemon = FakeDaemon::start(&dir);
    for c in [
        conf(&dir, None),
        conf(&dir, Some(json!({"egressRate":0,"ingressRate":0}))),
    ] {
        let out = invoke("ADD", &c);
        assert_eq!(out.exit_code, 0, "{out:?}");
        assert_eq!(
            serde_json::from_str::<Value>(&out.stdout).unwrap(),
            bridge_result()
        );
    }
    assert!(daemon.requests().is_empty());
    assert!(!dir.join("state").exists());
}

#[test]
fn add_in_an_older_version_prints_the_result_in_that_version() {
    let dir = scratch();
    let _daemon = FakeDaemon::start(&dir);
    let mut c = conf(&dir, None);
    c["cniVersion"] = json!("0.4.0");
    c["prevResult"]["cniVersion"] = json!("0.4.0");
    let out = invoke("ADD", &c);
    let result: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(result["cniVersion"], json!("0.4.0"));
}

#[test]
fn add_without_a_prev_result_is_error_7() {
    let dir = scratch();
    let mut c = conf(&dir, Some(both_ways()));
    c.as_object_mut().unwrap().remove("prevResult");
    let e = error_of(&invoke("ADD", &c));
    assert_eq!(e["code"], json!(INVALID_CONFIG));
}

#[test]
fn add_when_the_daemon_does_not_answer_is_error_11_and_keeps_the_state_file() {
    let dir = scratch();
    let out = invoke("ADD", &conf(&dir, Some(both_ways())));
    let e = error_of(&out);
    assert_eq!(e["code"], json!(TRY_AGAIN_LATER));
    assert_eq!(e["cniVersion"], json!("1.0.0"));
    assert!(
        e["details"].as_str().unwrap().contains("control.sock"),
        "{e}"
    );
    // The daemon learns the pod from the state file when it comes.
    assert!(state_file(&dir).exists());
}

#[test]
fn a_refused_class_is_error_7_naming_the_field() {
    let dir = scratch();
    let daemon = FakeDaemon::start(&dir);
    daemon.model.lock().unwrap().refuse = Some(ReplyError::new(
        "burst",
        "burst of 8589934592 bytes is above 4 GiB",
    ));
    let e = error_of(&invoke("ADD", &conf(&dir, Some(both_ways()))));
    assert_eq!(e["code"], json!(INVALID_CONFIG));
    assert!(e["msg"].as_str().unwrap().contains(EGRESS), "{e}");
    assert!(e["details"].as_str().unwrap().starts_with("burst: "), "{e}");
    // A refusal about no field (the loops did not apply it in time): try again later.
    daemon.model.lock().unwrap().refuse = Some(ReplyError::new(
        "",
        "a shaping loop did not apply the change within 5 s",
    ));
    let e = error_of(&invoke("ADD", &conf(&dir, Some(both_ways()))));
    assert_eq!(e["code"], json!(TRY_AGAIN_LATER));
}

#[test]
fn add_of_a_name_that_exists_changes_it_to_the_new_class() {
    let dir = scratch();
    let daemon = FakeDaemon::start(&dir);
    let mut c = conf(&dir, Some(both_ways()));
    c["ecn"] = json!(true);
    assert_eq!(invoke("ADD", &c).exit_code, 0);
    assert!(daemon.classes()[EGRESS].contains_key("backpressure"));
    let c = conf(
        &dir,
        Some(json!({"egressRate":2000000,"ingressRate":3000000})),
    );
    assert_eq!(invoke("ADD", &c).exit_code, 0);
    let classes = daemon.classes();
    assert_eq!(classes[EGRESS]["rate"], json!("2mbit"));
    assert_eq!(classes[INGRESS]["rate"], json!("3mbit"));
    // The old object's keys the new one lacks are gone.
    assert!(!classes[EGRESS].contains_key("backpressure"), "{classes:?}");
}

#[test]
fn del_removes_the_classes_and_the_state_file_and_is_idempotent() {
    let dir = scratch();
    let daemon = FakeDaemon::start(&dir);
    let c = conf(&dir, Some(both_ways()));
    assert_eq!(invoke("ADD", &c).exit_code, 0);
    assert_eq!(daemon.classes().len(), 2);
    for _ in 0..2 {
        let out = invoke("DEL", &c);
        assert_eq!(out.exit_code, 0, "{out:?}");
        assert_eq!(out.stdout, "");
        assert!(daemon.classes().is_empty());
        assert!(!state_file(&dir).exists());
    }
    // Without prevResult, netns or runtimeConfig, as a runtime may call it.
    let mut bare = conf(&dir, None);
    bare.as_object_mut().unwrap().remove("prevResult");
    let out = invoke_env(
        &[
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", CONTAINER),
            ("CNI_IFNAME", "eth0"),
        ],
        bare.to_string().as_bytes(),
    );
    assert_eq!(out.exit_code, 0, "{out:?}");
}

#[test]
fn del_without_a_daemon_succeeds_and_removes_the_state_file() {
    let dir = scratch();
    let c = conf(&dir, Some(both_ways()));
    // ADD failed (no daemon) but left its state file.
    assert_eq!(error_of(&invoke("ADD", &c))["code"], json!(TRY_AGAIN_LATER));
    assert!(state_file(&dir).exists());
    for _ in 0..2 {
        let out = invoke("DEL", &c);
        assert_eq!(out.exit_code, 0, "{out:?}");
        assert!(
            !out.notes.is_empty(),
            "the missing daemon is noted on stderr"
        );
        assert!(!state_file(&dir).exists());
    }
}

#[test]
fn del_refused_for_no_field_is_error_11_and_keeps_the_state_file() {
    let dir = scratch();
    let daemon = FakeDaemon::start(&dir);
    let c = conf(&dir, Some(both_ways()));
    assert_eq!(invoke("ADD", &c).exit_code, 0);
    daemon.model.lock().unwrap().refuse_del = Some(ReplyError::new(
        "",
        "a shaping loop did not apply the change within 5 s",
    ));
    assert_eq!(error_of(&invoke("DEL", &c))["code"], json!(TRY_AGAIN_LATER));
    assert!(state_file(&dir).exists());
    daemon.model.lock().unwrap().refuse_del = None;
    assert_eq!(invoke("DEL", &c).exit_code, 0);
    assert!(daemon.classes().is_empty());
}

#[test]
fn check_passes_when_the_limits_are_in_force_and_says_what_is_missing() {
    let dir = scratch();
    let daemon = FakeDaemon::start(&dir);
    let c = conf(&dir, Some(both_ways()));
    assert_eq!(invoke("ADD", &c).exit_code, 0);
    let out = invoke("CHECK", &c);
    assert_eq!((out.exit_code, out.stdout.as_str()), (0, ""), "{out:?}");
    // A class deleted behind the plugin's back.
    daemon.model.lock().unwrap().classes.remove(INGRESS);
    let e = error_of(&invoke("CHECK", &c));
    assert_eq!(e["code"], json!(LIMITS_MISSING));
    let details = e["details"].as_str().unwrap();
    assert!(
        details.contains(INGRESS) && !details.contains(EGRESS),
        "{e}"
    );
    // A rate changed behind its back (rates compare as rates: 100mbit is 100000000bit).
    assert_eq!(invoke("ADD", &c).exit_code, 0);
    daemon
        .model
        .lock()
        .unwrap()
        .classes
        .get_mut(EGRESS)
        .unwrap()["rate"] = json!("100000000bit");
    assert_eq!(invoke("CHECK", &c).exit_code, 0);
    daemon
        .model
        .lock()
        .unwrap()
        .classes
        .get_mut(EGRESS)
        .unwrap()["rate"] = json!("1mbit");
    let e = error_of(&invoke("CHECK", &c));
    assert_eq!(e["code"], json!(LIMITS_MISSING));
    assert!(e["details"].as_str().unwrap().contains("rate"), "{e}");
    // No state file.
    assert_eq!(invoke("DEL", &c).exit_code, 0);
    let e = error_of(&invoke("CHECK", &c));
    assert_eq!(e["code"], json!(LIMITS_MISSING));
    assert!(e["details"].as_str().unwrap().contains("state file"), "{e}");
    // Nothing asked: nothing to check.
    assert_eq!(invoke("CHECK", &conf(&dir, None)).exit_code, 0);
}

#[test]
fn check_is_not_in_0_3() {
    let dir = scratch();
    let mut c = conf(&dir, Some(both_ways()));
    c["cniVersion"] = json!("0.3.1");
    let e = error_of(&invoke("CHECK", &c));
    assert_eq!(e["code"], json!(INCOMPATIBLE_VERSION));
    assert_eq!(e["cniVersion"], json!("0.3.1"));
}

#[test]
fn bad_input_gives_the_specifications_codes() {
    let dir = scratch();
    // Not JSON.
    let e = error_of(&invoke_env(
        &[
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", CONTAINER),
            ("CNI_NETNS", "/var/run/netns/blue"),
            ("CNI_IFNAME", "eth0"),
        ],
        b"{not json",
    ));
    assert_eq!(e["code"], json!(DECODING_FAILURE));
    // A key of the wrong type.
    let mut c = conf(&dir, None);
    c["runtimeConfig"] = json!({"bandwidth":{"egressRate":"fast"}});
    assert_eq!(
        error_of(&invoke("ADD", &c))["code"],
        json!(DECODING_FAILURE)
    );
    // No CNI_COMMAND.
    let e = error_of(&invoke_env(&[], conf(&dir, None).to_string().as_bytes()));
    assert_eq!(e["code"], json!(INVALID_ENVIRONMENT));
    assert!(
        e["details"].as_str().unwrap().contains("CNI_COMMAND"),
        "{e}"
    );
    // A version this plugin does not speak: the error is in the newest it does.
    let mut c = conf(&dir, None);
    c["cniVersion"] = json!("0.2.0");
    let e = error_of(&invoke("ADD", &c));
    assert_eq!(e["code"], json!(INCOMPATIBLE_VERSION));
    assert_eq!(e["cniVersion"], json!("1.0.0"));
    assert!(e["details"].as_str().unwrap().contains("0.2.0"), "{e}");
}
