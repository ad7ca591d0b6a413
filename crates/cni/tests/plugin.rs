//! The plugin's commands against a fake daemon (`common`: a Unix socket speaking the control
//! protocol over an in-memory set of classes). Besides the commands: a link planted in the state
//! directory is never followed, a state directory others could write in is refused, pods whose
//! names agree in part keep their own state files and classes, and no pod changes or deletes a
//! class that is not its own.

mod common;

use common::*;
use metronome_cni::classes::{class_name, state_name, state_path, Direction};
use metronome_cni::error::{
    CLASS_NOT_OWNED, DECODING_FAILURE, INCOMPATIBLE_VERSION, INVALID_CONFIG, INVALID_ENVIRONMENT,
    IO_FAILURE, LIMITS_MISSING, TRY_AGAIN_LATER,
};
use metronome_daemon::ops::control::{ClassObject, ReplyError, Request};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

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
        Value::Object(classes[egress().as_str()].clone()),
        json!({"name":egress().as_str(),"match":{"from":VETH},"rate":"100mbit","burst":"100000b",
               "fair":true})
    );
    // A burst below one frame is one frame (mtu 1500 + 14).
    assert_eq!(
        Value::Object(classes[ingress().as_str()].clone()),
        json!({"name":ingress().as_str(),"match":{"to":VETH},"rate":"50mbit","burst":"1514b","fair":true})
    );
    let state: Value = serde_json::from_slice(&std::fs::read(state_file(&dir)).unwrap()).unwrap();
    assert_eq!(state["interface"], json!(VETH));
    assert_eq!(state["container_id"], json!(CONTAINER));
    assert_eq!(state["ifname"], json!("eth0"));
    assert_eq!(state["netns"], json!("/var/run/netns/blue"));
    assert_eq!(
        state["classes"],
        json!([
            classes[egress().as_str()].clone(),
            classes[ingress().as_str()].clone()
        ])
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
    assert_eq!(classes[egress().as_str()]["fair"], json!(false));
    assert_eq!(
        classes[egress().as_str()]["backpressure"],
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
    assert!(
        e["msg"].as_str().unwrap().contains(egress().as_str()),
        "{e}"
    );
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
    assert!(daemon.classes()[egress().as_str()].contains_key("backpressure"));
    let c = conf(
        &dir,
        Some(json!({"egressRate":2000000,"ingressRate":3000000})),
    );
    assert_eq!(invoke("ADD", &c).exit_code, 0);
    let classes = daemon.classes();
    assert_eq!(classes[egress().as_str()]["rate"], json!("2mbit"));
    assert_eq!(classes[ingress().as_str()]["rate"], json!("3mbit"));
    // The old object's keys the new one lacks are gone.
    assert!(
        !classes[egress().as_str()].contains_key("backpressure"),
        "{classes:?}"
    );
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
    let out = invoke("DEL", &c);
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert!(
        out.notes.iter().any(|n| n.contains("control.sock")),
        "the missing daemon is noted on stderr: {out:?}"
    );
    assert!(!state_file(&dir).exists());
    // Again: no state file records a class of the pod's, so there is nothing to ask the daemon.
    let out = invoke("DEL", &c);
    assert_eq!((out.exit_code, out.notes.len()), (0, 0), "{out:?}");
    assert!(!state_file(&dir).exists());
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
    daemon
        .model
        .lock()
        .unwrap()
        .classes
        .remove(ingress().as_str());
    let e = error_of(&invoke("CHECK", &c));
    assert_eq!(e["code"], json!(LIMITS_MISSING));
    let details = e["details"].as_str().unwrap();
    assert!(
        details.contains(ingress().as_str()) && !details.contains(egress().as_str()),
        "{e}"
    );
    // A rate changed behind its back (rates compare as rates: 100mbit is 100000000bit).
    assert_eq!(invoke("ADD", &c).exit_code, 0);
    daemon
        .model
        .lock()
        .unwrap()
        .classes
        .get_mut(egress().as_str())
        .unwrap()["rate"] = json!("100000000bit");
    assert_eq!(invoke("CHECK", &c).exit_code, 0);
    daemon
        .model
        .lock()
        .unwrap()
        .classes
        .get_mut(egress().as_str())
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

fn mode_of(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn a_link_planted_at_the_temporary_or_the_state_files_name_is_not_followed() {
    let dir = scratch();
    let daemon = FakeDaemon::start(&dir);
    let state = dir.join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    // A file of someone else's, outside the state directory: a link must not reach it.
    let victim = dir.join("victim");
    std::fs::write(&victim, "secret").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    let name = state_name(CONTAINER, "eth0");
    // The temporary name a scheme without randomness would use (the process id), and the
    // state file's own name.
    let tmp = state.join(format!(".{name}.tmp-{}", std::process::id()));
    std::os::unix::fs::symlink(&victim, &tmp).unwrap();
    std::os::unix::fs::symlink(&victim, state.join(&name)).unwrap();
    let c = conf(&dir, Some(both_ways()));
    let out = invoke("ADD", &c);
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "secret");
    assert_eq!(mode_of(&victim), 0o600);
    // The link at the state file's name is replaced by the file, made 0600.
    let meta = std::fs::symlink_metadata(state_file(&dir)).unwrap();
    assert!(meta.is_file(), "{meta:?}");
    assert_eq!(mode_of(&state_file(&dir)), 0o600);
    let text = std::fs::read_to_string(state_file(&dir)).unwrap();
    let recorded: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(recorded["container_id"], json!(CONTAINER));
    // A link put in place of the state file, to a copy of it: CHECK does not read through it.
    let copy = dir.join("copy.json");
    std::fs::write(&copy, &text).unwrap();
    std::fs::remove_file(state_file(&dir)).unwrap();
    std::os::unix::fs::symlink(&copy, state_file(&dir)).unwrap();
    let e = error_of(&invoke("CHECK", &c));
    assert_eq!(e["code"], json!(LIMITS_MISSING));
    assert!(
        e["details"].as_str().unwrap().contains("symbolic link"),
        "{e}"
    );
    // DEL removes the link, not its target, and takes no record from it: the classes stay.
    let out = invoke("DEL", &c);
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert!(std::fs::symlink_metadata(state_file(&dir)).is_err());
    assert_eq!(std::fs::read_to_string(&copy).unwrap(), text);
    assert!(
        out.notes.iter().any(|n| n.contains("symbolic link")),
        "{out:?}"
    );
    assert_eq!(daemon.classes().len(), 2);
    // The planted temporary link is as it was.
    assert_eq!(std::fs::read_link(&tmp).unwrap(), victim);
}

#[test]
fn a_state_directory_others_can_write_in_or_a_link_is_refused() {
    let dir = scratch();
    let daemon = FakeDaemon::start(&dir);
    let state = dir.join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
    let c = conf(&dir, Some(both_ways()));
    for command in ["ADD", "DEL", "CHECK"] {
        let e = error_of(&invoke(command, &c));
        assert_eq!(e["code"], json!(IO_FAILURE), "{command}: {e}");
        let details = e["details"].as_str().unwrap();
        assert!(
            details.contains(&state.display().to_string()) && details.contains("0777"),
            "{command}: {e}"
        );
    }
    assert_eq!(std::fs::read_dir(&state).unwrap().count(), 0);
    assert!(daemon.requests().is_empty());
    // A link to a good directory.
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    let link = dir.join("link");
    std::os::unix::fs::symlink(&state, &link).unwrap();
    let mut c = conf(&dir, Some(both_ways()));
    c["stateDir"] = json!(link);
    let e = error_of(&invoke("ADD", &c));
    assert_eq!(e["code"], json!(IO_FAILURE));
    assert!(
        e["details"].as_str().unwrap().contains("symbolic link"),
        "{e}"
    );
    assert_eq!(std::fs::read_dir(&state).unwrap().count(), 0);
    // One the plugin makes is 0700.
    let made = dir.join("made/state");
    c["stateDir"] = json!(made);
    assert_eq!(invoke("ADD", &c).exit_code, 0);
    assert_eq!(mode_of(&made), 0o700);
}

#[test]
fn a_state_directory_of_another_user_is_refused() {
    if !nix::unistd::geteuid().is_root() {
        metronome_testbed::netns::skip_unprivileged(
            "a_state_directory_of_another_user_is_refused",
            &"giving a directory to another user needs root (CAP_CHOWN)",
        );
        return;
    }
    let dir = scratch();
    let daemon = FakeDaemon::start(&dir);
    let state = dir.join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    nix::unistd::chown(&state, Some(nix::unistd::Uid::from_raw(64_123)), None).unwrap();
    let e = error_of(&invoke("ADD", &conf(&dir, Some(both_ways()))));
    assert_eq!(e["code"], json!(IO_FAILURE));
    let details = e["details"].as_str().unwrap();
    assert!(
        details.contains(&state.display().to_string()) && details.contains("uid 64123"),
        "{e}"
    );
    assert_eq!(std::fs::read_dir(&state).unwrap().count(), 0);
    assert!(daemon.requests().is_empty());
}

/// The configuration of a pod whose host veth is `veth`.
fn conf_with(dir: &Path, veth: &str) -> Value {
    let mut c = conf(dir, Some(both_ways()));
    c["prevResult"] = bridge_result_with(veth);
    c
}

/// The daemon's classes of pod `(id, ifname)`: egress and ingress, when there.
fn classes_of(daemon: &FakeDaemon, (id, ifname): (&str, &str)) -> Vec<ClassObject> {
    let all = daemon.classes();
    Direction::BOTH
        .iter()
        .filter_map(|&d| all.get(&class_name(id, ifname, d)).cloned())
        .collect()
}

#[test]
fn pods_whose_names_agree_in_part_keep_their_own_state_files_and_classes() {
    for (a, b) in [
        (("ab-c", "d"), ("ab", "c-d")),
        (("0123456789abX", "eth0"), ("0123456789abY", "eth0")),
    ] {
        let dir = scratch();
        let daemon = FakeDaemon::start(&dir);
        let (conf_a, conf_b) = (conf_with(&dir, "vethaaaa"), conf_with(&dir, "vethbbbb"));
        assert_eq!(invoke_pod("ADD", a, &conf_a).exit_code, 0);
        assert_eq!(invoke_pod("ADD", b, &conf_b).exit_code, 0);
        assert_eq!(daemon.classes().len(), 4, "{a:?} {b:?}");
        assert_eq!(std::fs::read_dir(dir.join("state")).unwrap().count(), 2);
        // A's classes still match A's veth: B's ADD changed nothing of A's.
        let of_a = classes_of(&daemon, a);
        assert_eq!(of_a[0]["match"], json!({"from":"vethaaaa"}), "{a:?} {b:?}");
        assert_eq!(of_a[1]["match"], json!({"to":"vethaaaa"}), "{a:?} {b:?}");
        let out = invoke_pod("DEL", a, &conf_a);
        assert_eq!(out.exit_code, 0, "{out:?}");
        assert!(classes_of(&daemon, a).is_empty());
        assert_eq!(classes_of(&daemon, b).len(), 2, "{a:?} {b:?}");
        assert!(state_path(&dir.join("state"), b.0, b.1).exists());
        let out = invoke_pod("CHECK", b, &conf_b);
        assert_eq!(out.exit_code, 0, "{a:?} {b:?}: {out:?}");
        // And the other way round.
        assert_eq!(invoke_pod("ADD", a, &conf_a).exit_code, 0);
        assert_eq!(invoke_pod("DEL", b, &conf_b).exit_code, 0);
        assert_eq!(invoke_pod("CHECK", a, &conf_a).exit_code, 0, "{a:?} {b:?}");
    }
}

#[test]
fn a_pod_neither_changes_nor_deletes_a_class_of_its_name_that_is_not_its_own() {
    let dir = scratch();
    let daemon = FakeDaemon::start(&dir);
    let other = |name: &str| -> ClassObject {
        let Value::Object(o) = json!({"name":name,"match":{"from":"vethother"},"rate":"1mbit"})
        else {
            unreachable!()
        };
        o
    };
    // A class of the pod's egress name that no ADD of this pod made.
    let foreign = other(&egress());
    daemon
        .model
        .lock()
        .unwrap()
        .classes
        .insert(egress(), foreign.clone());
    let c = conf(&dir, Some(both_ways()));
    let e = error_of(&invoke("ADD", &c));
    assert_eq!(e["code"], json!(CLASS_NOT_OWNED));
    assert!(e["msg"].as_str().unwrap().contains(&egress()), "{e}");
    assert_eq!(daemon.classes()[egress().as_str()], foreign);
    assert_eq!(daemon.classes().len(), 1);
    assert!(!state_file(&dir).exists());
    let changes = |d: &FakeDaemon| {
        d.requests()
            .iter()
            .filter(|r| !matches!(r, Request::Show { .. }))
            .count()
    };
    assert_eq!(changes(&daemon), 0, "{:?}", daemon.requests());
    let out = invoke("DEL", &c);
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(daemon.classes()[egress().as_str()], foreign);
    assert_eq!(changes(&daemon), 0, "{:?}", daemon.requests());
    // The pod's own classes, then its egress name taken by another class behind its back: ADD
    // refuses it, DEL deletes the pod's ingress class only.
    daemon.model.lock().unwrap().classes.clear();
    assert_eq!(invoke("ADD", &c).exit_code, 0);
    daemon
        .model
        .lock()
        .unwrap()
        .classes
        .insert(egress(), foreign.clone());
    let e = error_of(&invoke("ADD", &c));
    assert_eq!(e["code"], json!(CLASS_NOT_OWNED));
    assert_eq!(daemon.classes()[egress().as_str()], foreign);
    let out = invoke("DEL", &c);
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert!(out.notes.iter().any(|n| n.contains(&egress())), "{out:?}");
    let left = daemon.classes();
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[egress().as_str()], foreign);
    assert!(!state_file(&dir).exists());
}
