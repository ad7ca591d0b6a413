//! `[daemon] class_dir`: a directory of JSON files, one per workload interface, each naming the
//! classes the control socket registers for it (docs/config.md, "Live classes: the control
//! socket"). `metronome-cni` writes them (one per pod interface, atomically, mode 0644) so that
//! a daemon started after the pods learns their classes again; [`ClassFile`] is the format both
//! sides share, so the plugin writes exactly what the daemon reads.

use super::protocol::ClassObject;
use serde::{Deserialize, Serialize};

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

#[cfg(test)]
mod tests {
    use super::*;

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
