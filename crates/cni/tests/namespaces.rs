//! `namespaceBandwidth` against the fake daemon (`common`, which refuses what the daemon refuses
//! of a class tree): the pods of a namespace share one aggregate per direction, made by the
//! first pod's ADD and deleted by the last pod's DEL; two namespaces get two; ADDs racing to
//! make it, and a DEL deleting it under an ADD; a pod above its namespace's limit; a changed
//! limit; namespaces of odd characters; classes of an aggregate's name that are not aggregates;
//! CHECK.

mod common;

use common::*;
use metronome_cni::classes::{class_name, state_path, Direction};
use metronome_cni::error::{ABOVE_NAMESPACE, CLASS_NOT_OWNED, INVALID_CONFIG, LIMITS_MISSING};
use metronome_cni::namespace::{aggregate_name, NS_PREFIX};
use metronome_daemon::ops::control::Request;
use serde_json::{json, Value};
use std::path::Path;

/// A pod: container ID, interface, host veth, namespace.
#[derive(Clone, Copy)]
struct Pod {
    id: &'static str,
    veth: &'static str,
    namespace: Option<&'static str>,
}

const fn pod(id: &'static str, veth: &'static str, namespace: &'static str) -> Pod {
    Pod {
        id,
        veth,
        namespace: Some(namespace),
    }
}

const A: Pod = pod("aaaa1111", "vetha", "team-a");
const B: Pod = pod("bbbb2222", "vethb", "team-a");
const C: Pod = pod("cccc3333", "vethc", "batch");

/// The configuration: each namespace 1 Gbit/s egress and 500 Mbit/s ingress, `batch` 2 Mbit/s
/// egress only, `kube-system` none; the pod's own `bandwidth` when given.
fn ns_conf(dir: &Path, bandwidth: Option<Value>) -> Value {
    let mut c = conf(dir, bandwidth);
    c["namespaceBandwidth"] = json!({"egressRate": 1_000_000_000u64, "ingressRate": 500_000_000,
        "namespaces": {"batch": {"egressRate": 2_000_000}, "kube-system": {}}});
    c
}

/// `command` for `pod` with `conf` (its host veth and namespace put in).
fn run(command: &str, pod: Pod, conf: &Value) -> metronome_cni::Outcome {
    let mut c = conf.clone();
    c["prevResult"] = bridge_result_with(pod.veth);
    let args = pod.namespace.map(|ns| {
        format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE={ns};K8S_POD_NAME={}",
            pod.id
        )
    });
    invoke_args(command, (pod.id, "eth0"), args.as_deref(), &c)
}

fn ok(command: &str, pod: Pod, conf: &Value) {
    let out = run(command, pod, conf);
    assert_eq!(out.exit_code, 0, "{command} {}: {out:?}", pod.id);
}

fn pod_class(pod: Pod, d: Direction) -> String {
    class_name(pod.id, "eth0", d)
}

fn aggregates(daemon: &FakeDaemon) -> Vec<String> {
    daemon
        .classes()
        .into_keys()
        .filter(|n| n.starts_with(NS_PREFIX))
        .collect()
}

#[test]
fn two_pods_of_a_namespace_share_one_aggregate_until_the_last_goes() {
    let dir = scratch();
    let daemon = FakeDaemon::start(&dir);
    let c = ns_conf(&dir, None);
    ok("ADD", A, &c);
    let egress = aggregate_name("team-a", Direction::Egress);
    let ingress = aggregate_name("team-a", Direction::Ingress);
    let classes = daemon.classes();
    assert_eq!(
        Value::Object(classes[&egress].clone()),
        json!({"name": egress, "gather": true, "rate": "1gbit", "burst": "1514b"})
    );
    assert_eq!(classes[&ingress]["rate"], json!("500mbit"));
    // The pod without a limit of its own: a class at the namespace's rate, its child.
    let a = &classes[&pod_class(A, Direction::Egress)];
    assert_eq!(
        (&a["parent"], &a["rate"], &a["match"]),
        (&json!(egress), &json!("1gbit"), &json!({"from": "vetha"}))
    );
    // The state file records the aggregates first, for the daemon's restore.
    let file: Value = serde_json::from_slice(
        &std::fs::read(state_path(&dir.join("state"), A.id, "eth0")).unwrap(),
    )
    .unwrap();
    let recorded: Vec<&str> = file["classes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        recorded,
        [
            egress.as_str(),
            ingress.as_str(),
            &pod_class(A, Direction::Egress),
            &pod_class(A, Direction::Ingress)
        ]
    );
    ok("ADD", B, &c);
    assert_eq!(aggregates(&daemon), [egress.clone(), ingress.clone()]);
    assert_eq!(daemon.classes().len(), 6);
    assert_eq!(
        daemon.classes()[&pod_class(B, Direction::Ingress)]["parent"],
        json!(ingress)
    );
    ok("CHECK", A, &c);
    ok("CHECK", B, &c);
    // A goes: B still uses the aggregates, and the refused delete is no error or note.
    let out = run("DEL", A, &c);
    assert_eq!((out.exit_code, out.notes.len()), (0, 0), "{out:?}");
    assert_eq!(aggregates(&daemon), [egress.clone(), ingress.clone()]);
    assert_eq!(daemon.classes().len(), 4);
    ok("CHECK", B, &c);
    // The last goes: so do they.
    ok("DEL", B, &c);
    assert!(daemon.classes().is_empty(), "{:?}", daemon.classes());
    ok("DEL", B, &c);
}

#[test]
fn pods_of_two_namespaces_get_two_aggregates_and_others_none() {
    let dir = scratch();
    let daemon = FakeDaemon::start(&dir);
    let c = ns_conf(&dir, None);
    ok("ADD", A, &c);
    ok("ADD", C, &c);
    // `batch`'s own entry: egress only.
    let batch = aggregate_name("batch", Direction::Egress);
    assert_eq!(daemon.classes()[&batch]["rate"], json!("2mbit"));
    assert_eq!(aggregates(&daemon).len(), 3);
    assert!(!daemon
        .classes()
        .contains_key(&pod_class(C, Direction::Ingress)));
    // No namespace, or one whose entry limits nothing: no class, nothing written.
    let before = daemon.requests().len();
    for p in [
        Pod {
            namespace: None,
            ..pod("dddd", "vethd", "")
        },
        pod("eeee", "vethe", "kube-system"),
    ] {
        ok("ADD", p, &c);
        assert!(!state_path(&dir.join("state"), p.id, "eth0").exists());
    }
    assert_eq!(daemon.requests().len(), before);
    // The last pod of one namespace takes its aggregates, not the other's.
    ok("DEL", C, &c);
    assert_eq!(
        aggregates(&daemon),
        [
            aggregate_name("team-a", Direction::Egress),
            aggregate_name("team-a", Direction::Ingress)
        ]
    );
    ok("DEL", A, &c);
    assert!(daemon.classes().is_empty());
}

#[test]
fn adds_racing_to_make_the_aggregate_all_take_it() {
    let dir = scratch();
    let daemon = FakeDaemon::start(&dir);
    let c = ns_conf(&dir, None);
    const PODS: usize = 8;
    let ids: Vec<&'static str> = (0..PODS)
        .map(|i| &*Box::leak(format!("race{i}").into_boxed_str()))
        .collect();
    let veths: Vec<&'static str> = (0..PODS)
        .map(|i| &*Box::leak(format!("veth{i}").into_boxed_str()))
        .collect();
    let pods: Vec<Pod> = (0..PODS).map(|i| pod(ids[i], veths[i], "team-a")).collect();
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(PODS));
    let each = |command: &'static str| {
        let threads: Vec<_> = pods
            .iter()
            .map(|&p| {
                let (c, barrier) = (c.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    run(command, p, &c)
                })
            })
            .collect();
        for t in threads {
            let out = t.join().unwrap();
            assert_eq!(out.exit_code, 0, "{command}: {out:?}");
        }
    };
    each("ADD");
    assert_eq!(aggregates(&daemon).len(), 2);
    assert_eq!(daemon.classes().len(), 2 + 2 * PODS);
    for p in &pods {
        ok("CHECK", *p, &c);
    }
    each("DEL");
    assert!(daemon.classes().is_empty(), "{:?}", daemon.classes());
}

#[test]
fn an_aggregate_made_or_deleted_between_two_requests_of_an_add_is_taken_or_made_again() {
    let dir = scratch();
    let daemon = FakeDaemon::start(&dir);
    let c = ns_conf(&dir, None);
    let egress = aggregate_name("team-a", Direction::Egress);
    // Another pod's ADD makes it, at another limit, between this ADD's `show` and its `add`.
    let name = egress.clone();
    daemon.model.lock().unwrap().interpose = Some(Box::new(move |r, classes| {
        if matches!(r, Request::Add { class } if class["name"] == json!(name))
            && !classes.contains_key(&name)
        {
            let Value::Object(o) = json!({"name": name, "gather": true, "rate": "3gbit"}) else {
                unreachable!()
            };
            classes.insert(name.clone(), o);
        }
    }));
    ok("ADD", A, &c);
    assert_eq!(daemon.classes()[&egress]["rate"], json!("1gbit"));
    let changed = daemon
        .requests()
        .iter()
        .any(|r| matches!(r, Request::Change { class } if class["name"] == json!(egress)));
    assert!(changed, "the other ADD's limit is changed to this one's");
    ok("CHECK", A, &c);
    // The last other pod's DEL deletes it between this ADD's making it and its pod's class.
    let name = egress.clone();
    let mut once = true;
    daemon.model.lock().unwrap().interpose = Some(Box::new(move |r, classes| {
        let child =
            matches!(r, Request::Add { class } if class.get("parent") == Some(&json!(name)));
        if child && once {
            once = false;
            classes.remove(&name);
        }
    }));
    ok("ADD", B, &c);
    let b = pod_class(B, Direction::Egress);
    let adds = daemon
        .requests()
        .iter()
        .filter(|r| matches!(r, Request::Add { class } if class["name"] == json!(b)))
        .count();
    assert_eq!(adds, 2, "refused for its parent once, then added");
    let classes = daemon.classes();
    assert!(classes.contains_key(&egress), "{classes:?}");
    assert_eq!(
        classes[&pod_class(B, Direction::Egress)]["parent"],
        json!(egress)
    );
}

#[test]
fn a_pod_above_its_namespaces_limit_is_error_103() {
    let dir = scratch();
    let daemon = FakeDaemon::start(&dir);
    let c = ns_conf(&dir, Some(json!({"egressRate": 100_000_000})));
    let e = error_of(&run("ADD", C, &c));
    assert_eq!(e["code"], json!(ABOVE_NAMESPACE));
    assert!(e["msg"].as_str().unwrap().contains("egress"), "{e}");
    let details = e["details"].as_str().unwrap();
    assert!(
        details.contains("\"batch\"") && details.contains("100mbit") && details.contains("2mbit"),
        "{e}"
    );
    assert!(daemon.requests().is_empty());
    assert!(!state_path(&dir.join("state"), C.id, "eth0").exists());
    // Within its namespace's: its own limit, under the aggregate.
    ok("ADD", A, &c);
    let a = &daemon.classes()[&pod_class(A, Direction::Egress)];
    assert_eq!(
        (&a["rate"], &a["parent"]),
        (
            &json!("100mbit"),
            &json!(aggregate_name("team-a", Direction::Egress))
        )
    );
    // The daemon's aggregate lowered behind the plugin's back as the pod's class is added:
    // refused for its rate, error 103 in the daemon's words.
    let name = aggregate_name("team-a", Direction::Egress);
    daemon.model.lock().unwrap().interpose = Some(Box::new(move |r, classes| {
        if matches!(r, Request::Add { class } if class.get("parent") == Some(&json!(name))) {
            classes.get_mut(&name).unwrap()["rate"] = json!("1mbit");
        }
    }));
    let e = error_of(&run("ADD", B, &c));
    assert_eq!(e["code"], json!(ABOVE_NAMESPACE));
    assert!(e["details"].as_str().unwrap().starts_with("rate: "), "{e}");
}

#[test]
fn a_changed_namespace_limit_changes_the_aggregate() {
    let dir = scratch();
    let daemon = FakeDaemon::start(&dir);
    let old = ns_conf(&dir, Some(json!({"egressRate": 100_000_000})));
    ok("ADD", A, &old);
    let egress = aggregate_name("team-a", Direction::Egress);
    let mut new = ns_conf(&dir, None);
    new["namespaceBandwidth"]["egressRate"] = json!(2_000_000_000u64);
    ok("ADD", B, &new);
    assert_eq!(daemon.classes()[&egress]["rate"], json!("2gbit"));
    ok("CHECK", B, &new);
    let e = error_of(&run("CHECK", A, &old));
    assert_eq!(e["code"], json!(LIMITS_MISSING));
    assert!(e["details"].as_str().unwrap().contains(&egress), "{e}");
    // Below a pod's own limit: the daemon refuses it, error 7 naming the aggregate.
    new["namespaceBandwidth"]["egressRate"] = json!(50_000_000);
    let e = error_of(&run("ADD", pod("ffff", "vethf", "team-a"), &new));
    assert_eq!(e["code"], json!(INVALID_CONFIG));
    assert!(e["msg"].as_str().unwrap().contains(&egress), "{e}");
    assert!(e["details"].as_str().unwrap().starts_with("rate: "), "{e}");
    assert_eq!(daemon.classes()[&egress]["rate"], json!("2gbit"));
}

#[test]
fn a_namespace_of_odd_characters_gets_a_name_of_its_own() {
    let dir = scratch();
    let daemon = FakeDaemon::start(&dir);
    let c = ns_conf(&dir, None);
    let odd = pod("odd1", "vetho", "Team A/é=x..");
    let plain = pod("odd2", "vethp", "Team_A__=x..");
    ok("ADD", odd, &c);
    ok("ADD", plain, &c);
    let names = aggregates(&daemon);
    assert_eq!(names.len(), 4, "{names:?}");
    for n in &names {
        assert!(n.len() <= 64, "{n}");
        assert!(
            n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')),
            "{n}"
        );
    }
    let parent = &daemon.classes()[&pod_class(odd, Direction::Egress)]["parent"];
    assert_eq!(
        parent,
        &json!(aggregate_name("Team A/é=x..", Direction::Egress))
    );
    ok("CHECK", odd, &c);
    ok("DEL", odd, &c);
    ok("DEL", plain, &c);
    assert!(daemon.classes().is_empty());
}

#[test]
fn a_class_of_an_aggregates_name_that_is_not_one_is_left_alone() {
    let dir = scratch();
    let daemon = FakeDaemon::start(&dir);
    let c = ns_conf(&dir, None);
    let egress = aggregate_name("team-a", Direction::Egress);
    for foreign in [
        json!({"name": egress, "match": {"from": "vethx"}, "rate": "1mbit"}),
        json!({"name": egress, "rate": "1gbit"}),
    ] {
        daemon.model.lock().unwrap().classes.clear();
        daemon.insert(foreign.clone());
        let e = error_of(&run("ADD", A, &c));
        assert_eq!(e["code"], json!(CLASS_NOT_OWNED), "{foreign}");
        assert!(e["msg"].as_str().unwrap().contains(&egress), "{e}");
        assert_eq!(Value::Object(daemon.classes()[&egress].clone()), foreign);
        assert_eq!(daemon.classes().len(), 1);
        assert!(!state_path(&dir.join("state"), A.id, "eth0").exists());
    }
    // Made an aggregate by A's ADD, then replaced behind its back: A's DEL leaves it, noted.
    daemon.model.lock().unwrap().classes.clear();
    ok("ADD", A, &c);
    daemon
        .model
        .lock()
        .unwrap()
        .classes
        .retain(|n, _| !n.contains(A.id));
    let foreign = json!({"name": egress, "match": {"from": "vethx"}, "rate": "1mbit"});
    daemon.insert(foreign.clone());
    let out = run("DEL", A, &c);
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert!(out.notes.iter().any(|n| n.contains(&egress)), "{out:?}");
    assert_eq!(Value::Object(daemon.classes()[&egress].clone()), foreign);
}

#[test]
fn check_says_when_an_aggregate_or_a_pods_parent_is_not_in_force() {
    let dir = scratch();
    let daemon = FakeDaemon::start(&dir);
    let c = ns_conf(&dir, None);
    ok("ADD", A, &c);
    let ingress = aggregate_name("team-a", Direction::Ingress);
    daemon.model.lock().unwrap().classes.remove(&ingress);
    let e = error_of(&run("CHECK", A, &c));
    assert_eq!(e["code"], json!(LIMITS_MISSING));
    assert!(
        e["details"]
            .as_str()
            .unwrap()
            .contains(&format!("class {ingress} not in the daemon")),
        "{e}"
    );
    ok("ADD", A, &c);
    ok("CHECK", A, &c);
    let class = pod_class(A, Direction::Egress);
    daemon
        .model
        .lock()
        .unwrap()
        .classes
        .get_mut(&class)
        .unwrap()
        .remove("parent");
    let e = error_of(&run("CHECK", A, &c));
    assert!(e["details"].as_str().unwrap().contains("parent"), "{e}");
}
