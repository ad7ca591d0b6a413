//! `[daemon] class_dir`: a directory of JSON files, one per workload interface, each naming the
//! classes the control socket registers for it (docs/config.md, "Live classes: the control
//! socket"). `metronome-cni` writes them; [`ClassFile`] is the format both sides share. At start,
//! before the loops ([`restore`]), the daemon adds every file's classes as classes of the API, in
//! name order; a file whose interface is gone is removed, a refused class skipped, an unreadable
//! file left, each counted or logged as that page says.

use super::protocol::ClassObject;
use super::Live;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One file of `class_dir`: the host interface the classes are for, where the workload is, and
/// its classes as the control protocol carries them (the keys and words of a `[[class]]`
/// table). Unknown top-level keys are ignored.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClassFile {
    /// The host's interface of the workload (a pod's host veth): a file whose interface no
    /// longer exists at the daemon's start is removed, its classes not added.
    pub interface: String,
    /// The container runtime's id of the workload (informational).
    #[serde(default)]
    pub container_id: String,
    /// The interface's name inside the workload (informational).
    #[serde(default)]
    pub ifname: String,
    /// The workload's network namespace path (informational).
    #[serde(default)]
    pub netns: String,
    /// The classes, added as classes of the API in this order.
    #[serde(default)]
    pub classes: Vec<ClassObject>,
}

/// What [`restore`] did, by file and class.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Restored {
    /// Classes added.
    pub added: usize,
    /// Classes refused (logged).
    pub refused: usize,
    /// Files removed: their interface is gone.
    pub gone: usize,
    /// Files left: unreadable or invalid (logged).
    pub invalid: usize,
}

/// Adds the classes of the files of `dir` to `live` (see the module docs). `exists` says
/// whether an interface exists (the daemon asks the kernel, the tests a list).
pub fn restore(live: &Live, dir: &Path, exists: impl Fn(&str) -> bool) -> Restored {
    let mut done = Restored::default();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "class_dir: not read");
            return done;
        }
    };
    let mut paths: Vec<std::path::PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json") && p.is_file())
        .collect();
    paths.sort();
    for path in paths {
        let file = std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|text| serde_json::from_str::<ClassFile>(&text).map_err(|e| e.to_string()));
        let file = match file {
            Ok(f) => f,
            Err(error) => {
                tracing::warn!(file = %path.display(), %error, "class_dir: a file is not a class file; left");
                done.invalid += 1;
                continue;
            }
        };
        if !exists(&file.interface) {
            tracing::info!(
                file = %path.display(),
                interface = %file.interface,
                "class_dir: the interface is gone (its workload went while the daemon was down): \
                 the file is removed, its classes not added"
            );
            if let Err(e) = std::fs::remove_file(&path) {
                tracing::warn!(file = %path.display(), error = %e, "class_dir: removing a file failed");
            }
            live.metrics.class_change("restore", "gone");
            done.gone += 1;
            continue;
        }
        for class in file.classes {
            let name = class.get("name").cloned().unwrap_or_default();
            match live.restore(class) {
                Ok(name) => {
                    tracing::info!(file = %path.display(), class = %name, "class_dir: restored");
                    live.metrics.class_change("restore", "ok");
                    done.added += 1;
                }
                Err(error) => {
                    tracing::warn!(file = %path.display(), class = %name, %error, "class_dir: a class was not restored");
                    live.metrics.class_change("restore", "refused");
                    done.refused += 1;
                }
            }
        }
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::config::Config;
    use crate::ops::metrics::Metrics;

    #[test]
    fn restore_adds_the_classes_of_live_interfaces_and_removes_the_files_of_gone_ones() {
        let dir = std::env::temp_dir().join(format!("metronome-class-dir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = |interface: &str, classes: serde_json::Value| {
            serde_json::json!({"interface": interface, "container_id": "c", "classes": classes})
                .to_string()
        };
        let a = serde_json::json!([
            {"name":"pod-a.egress","match":{"from":"veth-a"},"rate":"10mbit","fair":true},
            {"name":"pod-a.ingress","match":{"to":"veth-a"},"rate":"20mbit"},
        ]);
        std::fs::write(dir.join("a.json"), file("veth-a", a)).unwrap();
        // Same name again, and a bad rate: both refused, the rest of the file kept.
        let b = serde_json::json!([
            {"name":"pod-a.egress","match":{"from":"veth-b"},"rate":"10mbit"},
            {"name":"pod-b.bad","rate":"fast"},
            {"name":"pod-b.egress","match":{"from":"veth-b"},"rate":"1mbit"},
        ]);
        std::fs::write(dir.join("b.json"), file("veth-b", b)).unwrap();
        let gone =
            serde_json::json!([{"name":"pod-c.egress","match":{"from":"veth-c"},"rate":"1mbit"}]);
        std::fs::write(dir.join("c.json"), file("veth-c", gone)).unwrap();
        std::fs::write(dir.join("d.json"), "{not json").unwrap();
        std::fs::write(
            dir.join("e.json.tmp"),
            file("veth-a", serde_json::json!([])),
        )
        .unwrap();
        let config = Config::from_toml_str(
            "[interfaces]\nattach = [\"eth0\"]\nbridges = [\"br0\"]\n",
            "test.toml",
        )
        .unwrap();
        let metrics = Metrics::new();
        let live = Live::new(&config, 1, metrics.clone()).unwrap();
        let done = restore(&live, &dir, |i| i == "veth-a" || i == "veth-b");
        assert_eq!(
            done,
            Restored {
                added: 3,
                refused: 2,
                gone: 1,
                invalid: 1
            }
        );
        let names: Vec<String> = live
            .current()
            .classes
            .iter()
            .map(|c| c.name.clone())
            .collect();
        assert_eq!(names, ["pod-a.egress", "pod-a.ingress", "pod-b.egress"]);
        let o = live.current().origin_set();
        assert_eq!((o.from.len(), o.to.len()), (2, 1));
        assert!(live.take_origins_changed());
        assert!(!dir.join("c.json").exists());
        assert!(dir.join("d.json").exists() && dir.join("a.json").exists());
        let text = metrics.encode();
        assert!(
            text.contains(r#"metronome_class_changes_total{op="restore",result="ok"} 3"#),
            "{text}"
        );
        assert!(text.contains(r#"op="restore",result="gone"} 1"#), "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn reads_the_documented_format_and_ignores_unknown_keys() {
        let text = r#"{"interface":"veth1a2b3c4d","container_id":"abc","ifname":"eth0",
            "netns":"/var/run/netns/x","future":1,
            "classes":[{"name":"cni.abc.eth0.egress","match":{"from":"veth1a2b3c4d"},
                        "rate":"100000000bit","burst":"1514b","fair":true}]}"#;
        let file: ClassFile = serde_json::from_str(text).unwrap();
        assert_eq!(file.interface, "veth1a2b3c4d");
        assert_eq!(file.container_id, "abc");
        assert_eq!(file.classes.len(), 1);
        assert_eq!(file.classes[0]["rate"], "100000000bit");
        let back: ClassFile = serde_json::from_str(&serde_json::to_string(&file).unwrap()).unwrap();
        assert_eq!(back, file);
        let bare: ClassFile = serde_json::from_str(r#"{"interface":"v"}"#).unwrap();
        assert!(bare.classes.is_empty() && bare.netns.is_empty());
        assert!(serde_json::from_str::<ClassFile>(r#"{"classes":[]}"#).is_err());
    }
}
