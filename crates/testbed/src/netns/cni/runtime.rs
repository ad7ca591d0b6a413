//! A tiny container runtime's CNI side: runs a conflist's plugin chain the way libcni
//! (`github.com/containernetworking/cni/libcni`, which containerd and CRI-O use) runs it, as the
//! CNI specification 1.0.0 ("Execution of Network Configuration Lists") describes.
//!
//! * **ADD**: the plugins in order; each gets the conflist's `name` and `cniVersion` injected
//!   into its configuration, the previous plugin's result as `prevResult` (none for the first),
//!   and `runtimeConfig` with the runtime's arguments for each capability its `capabilities`
//!   asks for (`bandwidth`: `{ingressRate, ingressBurst, egressRate, egressBurst}`, bits/s and
//!   bits). The last result is the attachment's result, kept (libcni caches it on disk) for DEL
//!   and CHECK.
//! * **DEL**: the plugins in reverse order, each with the kept result as `prevResult` (none when
//!   there is none: the spec's DEL tolerates it); the kept result is dropped after success.
//! * **CHECK**: the plugins in order, each with the kept result as `prevResult`; without a kept
//!   result it fails as libcni does.
//!
//! Each plugin is executed inside the node's namespace (`ip netns exec NODE PLUGIN`, which also
//! mounts that namespace's `/sys`, as a plugin reading `/sys/class/net` needs) with
//! `CNI_COMMAND`, `CNI_CONTAINERID`, `CNI_NETNS` (`/var/run/netns/<pod>`), `CNI_IFNAME`,
//! `CNI_ARGS` and `CNI_PATH` (the runtime's plugin directories, searched in order for the
//! plugin's `type`), its configuration on standard input. Success: exit status 0 and, for ADD,
//! a result on standard output. Failure: the CNI error object the plugin printed
//! (`{"code", "msg", "details"}`, [`CniError::Plugin`]), or, when it printed none, its exit
//! status and standard error ([`CniError::Exec`]). A plugin that does not exit within
//! [`PLUGIN_TIMEOUT`] is killed ([`CniError::Timeout`]).
//!
//! Departures from libcni: no result cache on disk (the runtime object keeps it); no conversion
//! of a result between CNI versions (every plugin gets the conflist's `cniVersion` and answers
//! in it); no `args`/`portMappings` capabilities.

use super::Pod;
use crate::netns::Namespace;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// How long one plugin execution may take before it is killed: 30 s (the plugins of the tests
/// answer in milliseconds; `metronome-cni` gives up on a silent daemon well before).
pub const PLUGIN_TIMEOUT: Duration = Duration::from_secs(30);

/// A network configuration list: `name`, `cniVersion` and the plugins' configurations.
#[derive(Clone, Debug, PartialEq)]
pub struct Conflist {
    /// The network's name (injected into every plugin's configuration).
    pub name: String,
    /// The CNI version (injected into every plugin's configuration).
    pub cni_version: String,
    /// Each plugin's configuration, `type` included, in chain order.
    pub plugins: Vec<Value>,
}

impl Conflist {
    /// The conflist as a runtime reads it from a `.conflist` file.
    pub fn to_json(&self) -> Value {
        json!({ "cniVersion": self.cni_version, "name": self.name, "plugins": self.plugins })
    }

    /// The configuration plugin `index` gets on standard input: its own keys, `name`,
    /// `cniVersion`, `prevResult` when there is one, and `runtimeConfig` with the arguments of
    /// the capabilities it asks for that `rc` has (libcni's `buildOneConfig` and
    /// `injectRuntimeConfig`).
    pub fn plugin_config(&self, index: usize, prev: Option<&Value>, rc: &RuntimeConfig) -> Value {
        let mut config = match self.plugins.get(index) {
            Some(Value::Object(m)) => m.clone(),
            _ => Map::new(),
        };
        config.insert("name".into(), Value::String(self.name.clone()));
        config.insert("cniVersion".into(), Value::String(self.cni_version.clone()));
        if let Some(p) = prev {
            config.insert("prevResult".into(), p.clone());
        }
        let asked = config
            .get("capabilities")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let mut runtime = Map::new();
        for (capability, on) in asked {
            if on == Value::Bool(true) {
                if let Some(arg) = rc.args.get(&capability) {
                    runtime.insert(capability, arg.clone());
                }
            }
        }
        if !runtime.is_empty() {
            config.insert("runtimeConfig".into(), Value::Object(runtime));
        }
        Value::Object(config)
    }

    fn plugin_type(&self, index: usize) -> String {
        self.plugins
            .get(index)
            .and_then(|p| p.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    }
}

/// The `bandwidth` capability's arguments (what a runtime takes from a pod's
/// `kubernetes.io/ingress-bandwidth` and `egress-bandwidth` annotations): rates in bits/s,
/// bursts in bits, 0 for none (the `bandwidth` plugin then leaves that direction alone).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Bandwidth {
    /// What the pod receives, bits/s.
    pub ingress_rate: u64,
    /// Its bucket, bits.
    pub ingress_burst: u64,
    /// What the pod sends, bits/s.
    pub egress_rate: u64,
    /// Its bucket, bits.
    pub egress_burst: u64,
}

/// The runtime's capability arguments (libcni's `RuntimeConf.CapabilityArgs`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RuntimeConfig {
    /// Capability name -> its argument.
    pub args: Map<String, Value>,
}

impl RuntimeConfig {
    /// No capability arguments (a pod without limits).
    pub fn none() -> Self {
        RuntimeConfig::default()
    }

    /// The `bandwidth` capability with `bw`.
    pub fn bandwidth(bw: Bandwidth) -> Self {
        let mut args = Map::new();
        // A struct of four integers always serializes.
        args.insert(
            "bandwidth".into(),
            serde_json::to_value(bw).unwrap_or(Value::Null),
        );
        RuntimeConfig { args }
    }
}

/// Why a CNI operation failed.
#[derive(Debug, thiserror::Error)]
pub enum CniError {
    /// A plugin answered with a CNI error object.
    #[error(
        "{plugin} {command}: CNI error {code}: {msg}{}",
        details_suffix(details)
    )]
    Plugin {
        /// The plugin's `type`.
        plugin: String,
        /// ADD, DEL or CHECK.
        command: &'static str,
        /// The error's `code`.
        code: u64,
        /// Its `msg`.
        msg: String,
        /// Its `details` (empty when absent).
        details: String,
    },
    /// A plugin failed without an error object (or its output could not be read).
    #[error("{plugin} {command}: {why}")]
    Exec {
        /// The plugin's `type` (or its path).
        plugin: String,
        /// ADD, DEL or CHECK.
        command: &'static str,
        /// What went wrong: the exit status and standard error, or the I/O error.
        why: String,
    },
    /// No plugin of that `type` in any `CNI_PATH` directory.
    #[error("no plugin `{0}` in CNI_PATH")]
    NotFound(String),
    /// A plugin did not exit within [`PLUGIN_TIMEOUT`] and was killed.
    #[error("{plugin} {command}: no answer within {PLUGIN_TIMEOUT:?}, killed")]
    Timeout {
        /// The plugin's `type`.
        plugin: String,
        /// ADD, DEL or CHECK.
        command: &'static str,
    },
    /// CHECK of an attachment without a kept ADD result.
    #[error("CHECK {0}: no result of an ADD kept for this attachment")]
    NoResult(String),
}

impl CniError {
    /// The CNI error code when a plugin answered with an error object.
    pub fn code(&self) -> Option<u64> {
        match self {
            CniError::Plugin { code, .. } => Some(*code),
            _ => None,
        }
    }
}

fn details_suffix(details: &str) -> String {
    if details.is_empty() {
        String::new()
    } else {
        format!(" ({details})")
    }
}

/// Runs one conflist for the pods of a node (module docs).
#[derive(Debug)]
pub struct CniRuntime {
    node: Namespace,
    cni_path: Vec<PathBuf>,
    conflist: Conflist,
    results: HashMap<String, Value>,
}

impl CniRuntime {
    /// A runtime executing `conflist`'s plugins inside `node`, found in `cni_path` (in order).
    pub fn new(node: &Namespace, cni_path: Vec<PathBuf>, conflist: Conflist) -> Self {
        CniRuntime {
            node: node.clone(),
            cni_path,
            conflist,
            results: HashMap::new(),
        }
    }

    /// The conflist run.
    pub fn conflist(&self) -> &Conflist {
        &self.conflist
    }

    /// ADD: the chain in order; returns the last result and records the pod's address and host
    /// veth from it ([`Pod::addr`], [`Pod::host_if`]).
    pub fn add(&mut self, pod: &mut Pod, rc: &RuntimeConfig) -> Result<Value, CniError> {
        let mut prev: Option<Value> = None;
        for i in 0..self.conflist.plugins.len() {
            let config = self.conflist.plugin_config(i, prev.as_ref(), rc);
            let out = self.exec(i, "ADD", pod, &config)?;
            let plugin = self.conflist.plugin_type(i);
            let result = out.ok_or_else(|| CniError::Exec {
                plugin,
                command: "ADD",
                why: "no result on standard output".into(),
            })?;
            prev = Some(result);
        }
        let result = prev.unwrap_or_else(|| json!({ "cniVersion": self.conflist.cni_version }));
        pod.addr = result_ipv4(&result);
        pod.host_if = result_host_if(&result);
        self.results.insert(key(pod), result.clone());
        Ok(result)
    }

    /// CHECK: the chain in order, each plugin with the kept ADD result.
    pub fn check(&self, pod: &Pod, rc: &RuntimeConfig) -> Result<(), CniError> {
        let prev = self
            .results
            .get(&key(pod))
            .ok_or_else(|| CniError::NoResult(key(pod)))?;
        for i in 0..self.conflist.plugins.len() {
            let config = self.conflist.plugin_config(i, Some(prev), rc);
            self.exec(i, "CHECK", pod, &config)?;
        }
        Ok(())
    }

    /// DEL: the chain in reverse order, each plugin with the kept ADD result (if any); forgets
    /// it and the pod's address after success.
    pub fn del(&mut self, pod: &mut Pod, rc: &RuntimeConfig) -> Result<(), CniError> {
        let prev = self.results.get(&key(pod)).cloned();
        for i in (0..self.conflist.plugins.len()).rev() {
            let config = self.conflist.plugin_config(i, prev.as_ref(), rc);
            self.exec(i, "DEL", pod, &config)?;
        }
        self.results.remove(&key(pod));
        pod.addr = None;
        pod.host_if = None;
        Ok(())
    }

    /// The plugin binary of `plugin_type`: the first `CNI_PATH` directory holding it.
    pub fn find_plugin(&self, plugin_type: &str) -> Result<PathBuf, CniError> {
        let not_found = || CniError::NotFound(plugin_type.to_owned());
        if plugin_type.is_empty() || plugin_type.contains('/') {
            return Err(not_found());
        }
        self.cni_path
            .iter()
            .map(|d| d.join(plugin_type))
            .find(|p| p.is_file())
            .ok_or_else(not_found)
    }

    /// Executes plugin `index` for `command`; its parsed standard output (`None` when empty).
    fn exec(
        &self,
        index: usize,
        command: &'static str,
        pod: &Pod,
        config: &Value,
    ) -> Result<Option<Value>, CniError> {
        let plugin = self.conflist.plugin_type(index);
        let binary = self.find_plugin(&plugin)?;
        let exec_error = |why: String| CniError::Exec {
            plugin: plugin.clone(),
            command,
            why,
        };
        let cni_path = std::env::join_paths(&self.cni_path)
            .map_err(|e| exec_error(format!("CNI_PATH: {e}")))?;
        let mut child = Command::new("ip")
            .args(["netns", "exec", self.node.name()])
            .arg(&binary)
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", &pod.container_id)
            .env("CNI_NETNS", pod.netns_path())
            .env("CNI_IFNAME", &pod.ifname)
            .env(
                "CNI_ARGS",
                format!(
                    "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={}",
                    pod.ns.name()
                ),
            )
            .env("CNI_PATH", cni_path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| exec_error(format!("cannot run {}: {e}", binary.display())))?;
        let input = config.to_string();
        if let Some(mut stdin) = child.stdin.take() {
            // A plugin that exits without reading its input closes the pipe: its exit status
            // and output say why, below.
            let _ = stdin.write_all(input.as_bytes());
        }
        let pid = child.id();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        let output = match rx.recv_timeout(PLUGIN_TIMEOUT) {
            Ok(Ok(o)) => o,
            Ok(Err(e)) => return Err(exec_error(format!("waiting for it: {e}"))),
            Err(_) => {
                // The pid is the plugin's until the waiting thread reaps it, which it has not.
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
                return Err(CniError::Timeout { plugin, command });
            }
        };
        let stdout = String::from_utf8_lossy(&output.stdout);
        let parsed: Option<Value> = serde_json::from_str(stdout.trim()).ok();
        if output.status.success() {
            if stdout.trim().is_empty() {
                return Ok(None);
            }
            return parsed
                .map(Some)
                .ok_or_else(|| exec_error(format!("unreadable result: {}", stdout.trim())));
        }
        if let Some(code) = parsed.as_ref().and_then(|v| v.get("code")?.as_u64()) {
            let text = |k: &str| {
                parsed
                    .as_ref()
                    .and_then(|v| v.get(k)?.as_str())
                    .unwrap_or("")
                    .to_owned()
            };
            return Err(CniError::Plugin {
                plugin,
                command,
                code,
                msg: text("msg"),
                details: text("details"),
            });
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        Err(exec_error(format!(
            "{}: {} {}",
            output.status,
            stdout.trim(),
            stderr.trim()
        )))
    }
}

/// The key of an attachment: container ID and interface.
fn key(pod: &Pod) -> String {
    format!("{}/{}", pod.container_id, pod.ifname)
}

/// The first IPv4 address of a CNI result's `ips` (without its prefix length).
pub fn result_ipv4(result: &Value) -> Option<Ipv4Addr> {
    result
        .get("ips")?
        .as_array()?
        .iter()
        .filter_map(|ip| ip.get("address")?.as_str())
        .find_map(|a| a.split('/').next()?.parse().ok())
}

/// The host veth of a CNI result: the first interface without `sandbox` that is not the
/// node's bridge [`super::BRIDGE`] (the `bridge` plugin lists the bridge, the host veth, then
/// the pod's interface with its `sandbox`).
pub fn result_host_if(result: &Value) -> Option<String> {
    let interfaces = result.get("interfaces")?.as_array()?;
    interfaces
        .iter()
        .filter(|i| {
            i.get("sandbox")
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
        })
        .filter_map(|i| i.get("name")?.as_str())
        .find(|name| *name != super::BRIDGE)
        .map(str::to_owned)
}

/// `CNI_PATH` for `metronome-cni` at `plugin` (its directory first, then [`super::PLUGIN_DIR`]).
pub fn cni_path_with(plugin: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(dir) = plugin.parent() {
        dirs.push(dir.to_path_buf());
    }
    dirs.push(PathBuf::from(super::PLUGIN_DIR));
    dirs
}

#[cfg(test)]
mod tests;
