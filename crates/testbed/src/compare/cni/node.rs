//! The limiting side of a `compare --cni` run on a [`CniTopology`]: the conflist of the shaper
//! under test with its runtime, and for `metronome-cni` the node's `metronome run`; and what an
//! ADD/DEL leaves behind ([`Leftovers`]).
//!
//! The node's daemon ([`node_config_text`]) is `metronome run` in the node namespace in attach
//! mode, attached to the uplink (`[interfaces] attach = ["up0"]`, where the pods' `from`
//! classes shape what they send) and to the pods' bridge (`bridges = ["cni0"]`, through which
//! their `to` classes send what they receive), with `[daemon] class_dir` = the plugin's
//! `stateDir` (so a restarted daemon re-learns the pods) and its control socket in the
//! topology's scratch directory; [`FAIR_GSO_SLOTS`] large slots, as the fair rows of
//! `compare --attach` have. It is started and stopped as `compare --attach` starts its daemon
//! ([`AttachedDaemon`]).

use crate::compare::attach::{daemon_config, AttachedDaemon};
use crate::compare::Shaper;
use crate::compare::{CompareError, FAIR_GSO_SLOTS};
use crate::netns::cni::runtime::cni_path_with;
use crate::netns::cni::{CniRuntime, CniTopology, BRIDGE, PLUGIN_DIR};
use crate::netns::run_command;
use metronome_daemon::ops::control::Client;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// Sequence of the daemons' state directories and sockets within this process.
static NODE_SEQ: AtomicU32 = AtomicU32::new(0);

/// Prefix of the class names `metronome-cni` registers (`cni.<id>.<ifname>.<direction>`).
pub const CNI_CLASS_PREFIX: &str = "cni.";

/// The node daemon's configuration text (module docs).
pub fn node_config_text(topo: &CniTopology, class_dir: &Path, control: &Path) -> String {
    format!(
        "[interfaces]\nattach = [\"{}\"]\nbridges = [\"{BRIDGE}\"]\n\n\
         [daemon]\nclass_dir = \"{}\"\ncontrol = \"{}\"\ngso_slots = {FAIR_GSO_SLOTS}\n\n\
         [wheel]\nhorizon = \"250ms\"\n",
        topo.node.uplink,
        class_dir.display(),
        control.display()
    )
}

/// `metronome run` on the node with its class directory and control socket.
#[derive(Debug)]
pub struct NodeDaemon {
    /// The running daemon.
    pub daemon: AttachedDaemon,
    /// Its control socket.
    pub control: PathBuf,
    /// Its `class_dir`, the plugin's `stateDir`.
    pub state_dir: PathBuf,
}

impl NodeDaemon {
    /// Starts `binary run` on `topo`'s node with [`node_config_text`], a fresh state directory
    /// and socket in the topology's scratch directory. `Ok(Err(why))` when the daemon refuses
    /// the configuration or does not come up.
    pub fn start(
        topo: &CniTopology,
        binary: &Path,
    ) -> Result<Result<NodeDaemon, String>, CompareError> {
        let seq = NODE_SEQ.fetch_add(1, Ordering::Relaxed);
        let state_dir = topo.scratch().join(format!("state{seq}"));
        let control = topo.scratch().join(format!("control{seq}.sock"));
        std::fs::create_dir_all(&state_dir).map_err(crate::netns::TopoError::Io)?;
        Self::start_with(topo, binary, (state_dir, control))
    }

    /// [`NodeDaemon::start`] with a given state directory and socket (a restart re-learning the
    /// pods from the same directory).
    pub fn start_with(
        topo: &CniTopology,
        binary: &Path,
        (state_dir, control): (PathBuf, PathBuf),
    ) -> Result<Result<NodeDaemon, String>, CompareError> {
        let text = node_config_text(topo, &state_dir, &control);
        let config = match daemon_config(&text) {
            Ok(c) => c,
            Err(e) => return Ok(Err(e)),
        };
        let started = AttachedDaemon::start_controlled(
            topo.node_ns(),
            binary,
            (&text, &config),
            false,
            Some(&control),
        )?;
        Ok(started.map(|daemon| NodeDaemon {
            daemon,
            control,
            state_dir,
        }))
    }

    /// The names of the daemon's classes that `metronome-cni` registered (`class list`, names
    /// starting with [`CNI_CLASS_PREFIX`]).
    pub fn cni_classes(&self) -> Result<Vec<String>, String> {
        cni_classes(&self.control)
    }
}

/// The `cni.` classes of the daemon answering on `control`.
pub fn cni_classes(control: &Path) -> Result<Vec<String>, String> {
    let mut client = Client::connect(control).map_err(|e| e.to_string())?;
    let reply = client.list().map_err(|e| e.to_string())?;
    if !reply.ok {
        return Err(format!("class list refused: {:?}", reply.error));
    }
    Ok(reply
        .classes
        .unwrap_or_default()
        .iter()
        .filter_map(|c| c.get("name")?.as_str())
        .filter(|n| n.starts_with(CNI_CLASS_PREFIX))
        .map(str::to_owned)
        .collect())
}

/// The runtime of `shaper`'s conflist on `topo`: the `bandwidth` plugin's, or `metronome-cni`'s
/// (the plugin at `plugin`, with `daemon`'s socket and state directory, `fair = true`).
pub fn runtime_for(
    topo: &CniTopology,
    shaper: Shaper,
    metronome: Option<(&Path, &NodeDaemon)>,
) -> Result<CniRuntime, String> {
    match (shaper, metronome) {
        (Shaper::Bandwidth, _) => Ok(CniRuntime::new(
            topo.node_ns(),
            vec![PathBuf::from(PLUGIN_DIR)],
            topo.bandwidth_conflist(),
        )),
        (Shaper::MetronomeCni, Some((plugin, daemon))) => Ok(CniRuntime::new(
            topo.node_ns(),
            cni_path_with(plugin),
            topo.metronome_conflist(&daemon.control, &daemon.state_dir, true),
        )),
        (Shaper::MetronomeCni, None) => {
            Err("metronome-cni needs the plugin binary and the node's daemon".into())
        }
        (other, _) => Err(other.not_in("the CNI comparison")),
    }
}

/// What a node holds that ADD/DEL may leave behind, taken before and after a run of
/// operations ([`Leftovers::since`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Leftovers {
    /// The node's links.
    pub links: Vec<String>,
    /// host-local's leases.
    pub leases: Vec<String>,
    /// `tc filter show` of the uplink's ingress and egress hooks, and of its qdiscs (the
    /// daemon's own tcx programs show as `tc` filters only when attached through `clsact`;
    /// [`Leftovers::attachments`] lists tcx links).
    pub uplink_tc: String,
    /// The node's BPF attachments (`bpftool net show`), empty without `bpftool`.
    pub attachments: String,
    /// The files in the daemon's state directory (none without a daemon).
    pub state_files: Vec<String>,
    /// The daemon's `cni.` classes (none without a daemon).
    pub classes: Vec<String>,
}

impl Leftovers {
    /// What `topo` (and `daemon`, if any) holds now.
    pub fn take(topo: &CniTopology, daemon: Option<&NodeDaemon>) -> Result<Leftovers, String> {
        let node = topo.node_ns().name();
        let up = topo.node.uplink.as_str();
        let mut uplink_tc = String::new();
        for args in [
            ["-n", node, "filter", "show", "dev", up, "ingress"],
            ["-n", node, "filter", "show", "dev", up, "egress"],
        ] {
            uplink_tc += &run_command("tc", &args).unwrap_or_default();
        }
        uplink_tc += &run_command("tc", &["-n", node, "qdisc", "show", "dev", up])
            .map_err(|e| e.to_string())?;
        let attachments = run_command("ip", &["netns", "exec", node, "bpftool", "net", "show"])
            .unwrap_or_default();
        let (state_files, classes) = match daemon {
            Some(d) => (files_in(&d.state_dir)?, d.cni_classes()?),
            None => (Vec::new(), Vec::new()),
        };
        Ok(Leftovers {
            links: topo.node_links().map_err(|e| e.to_string())?,
            leases: topo.leases().map_err(|e| e.to_string())?,
            uplink_tc,
            attachments,
            state_files,
            classes,
        })
    }

    /// What `self` holds that `before` did not, one description each (empty: nothing left).
    pub fn since(&self, before: &Leftovers) -> Vec<String> {
        let mut left = Vec::new();
        for l in self.links.iter().filter(|l| !before.links.contains(l)) {
            left.push(format!("link {l}"));
        }
        for l in self.leases.iter().filter(|l| !before.leases.contains(l)) {
            left.push(format!("host-local lease {l}"));
        }
        if self.uplink_tc != before.uplink_tc {
            left.push(format!("uplink tc changed: {}", self.uplink_tc.trim()));
        }
        if self.attachments != before.attachments {
            left.push(format!(
                "BPF attachments changed: {}",
                self.attachments.trim()
            ));
        }
        for f in self
            .state_files
            .iter()
            .filter(|f| !before.state_files.contains(f))
        {
            left.push(format!("state file {f}"));
        }
        for c in self.classes.iter().filter(|c| !before.classes.contains(c)) {
            left.push(format!("class {c}"));
        }
        left
    }
}

/// The names of the files in `dir` (none when it does not exist).
pub fn files_in(dir: &Path) -> Result<Vec<String>, String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leftovers_name_what_is_new() {
        let before = Leftovers {
            links: vec!["lo".into(), "up0".into(), "cni0".into()],
            uplink_tc: "qdisc noqueue".into(),
            ..Leftovers::default()
        };
        assert!(before.since(&before).is_empty());
        let after = Leftovers {
            links: vec!["lo".into(), "up0".into(), "cni0".into(), "veth12".into()],
            leases: vec!["10.79.0.10".into()],
            uplink_tc: "qdisc noqueue\nfilter bpf".into(),
            state_files: vec!["abc-eth0.json".into()],
            classes: vec!["cni.abc.eth0.egress".into()],
            ..before.clone()
        };
        let left = after.since(&before);
        assert_eq!(left.len(), 5, "{left:?}");
        assert_eq!(left[0], "link veth12");
        assert_eq!(left[1], "host-local lease 10.79.0.10");
        assert!(left[2].starts_with("uplink tc changed"), "{left:?}");
        assert_eq!(left[3], "state file abc-eth0.json");
        assert_eq!(left[4], "class cni.abc.eth0.egress");
    }

    #[test]
    fn a_missing_directory_has_no_files() {
        assert_eq!(files_in(Path::new("/nonexistent/mtr")), Ok(Vec::new()));
    }
}
