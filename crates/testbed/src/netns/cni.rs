//! The CNI node topology: a Kubernetes-like node whose pods get their network from a chain of
//! CNI plugins ([`runtime`]), run the way a container runtime runs them through libcni.
//!
//! ```text
//!  pod ns p<i>                 node ns                             receiver ns
//!  eth0 (host-local) <-> veth.. ─┐
//!                              cni0 10.79.x.1 ─ forward ─ up0 10.78.x.1 <-> rcv0 10.78.x.2
//!                     (all prefixes /24; the receiver routes 10.79.x.0/24 via 10.78.x.1)
//! ```
//!
//! * The node and the receiver are an [`AttachTopology`] without workloads of its own and with
//!   its bridge named `cni0` ([`AttachTopology::with_bridge`]): the uplink `up0`, the receiver's
//!   `rcv0`, the route from the receiver to the pod subnet through the node's uplink address,
//!   forwarding in the node, and `cni0` made beforehand and up, holding the pod subnet's gateway
//!   address (`metronome run` attaches to it at start, `[interfaces] bridges`; the `bridge`
//!   plugin takes an existing bridge, and finds its gateway address there already), its MAC
//!   address set so that it stays as pods come and go (as the `bridge` plugin's CHECK expects).
//! * A pod is a network namespace `<base>-p<n>` with only `lo` ([`CniTopology::add_pod`]): the
//!   plugins give it its `eth0`, its host veth (named by the `bridge` plugin, `veth<random>`) and
//!   its address.
//! * The conflists ([`CniTopology::conflist`]): `bridge` on `cni0` with `isGateway: true`,
//!   `ipMasq: false` (pod traffic reaches the receiver with the pod's address), `host-local`
//!   over the topology's pod subnet from `.10`, a default route via the gateway (the pod's
//!   `routes`, as Kubernetes conflists give it), with its own `dataDir` in the topology's scratch
//!   directory ([`CniTopology::ipam_dir`]), so nothing lands in the machine's `/var/lib/cni` and
//!   a leftover lease can be counted ([`CniTopology::leases`]); then the limiting plugin: the
//!   containernetworking `bandwidth` plugin ([`CniTopology::bandwidth_conflist`]) or
//!   `metronome-cni` ([`CniTopology::metronome_conflist`]).
//!
//! Names and cleanup: namespaces carry the process id and a per-process sequence number as every
//! topology of [`super`] does, and the pod subnet's third octet is that sequence number (as the
//! attach topology's), so topologies of one process never share a subnet; those of other
//! processes live in other namespaces. Dropping the topology deletes the pods' namespaces (and
//! with them the pods' veths), then the node's and the receiver's (with them the bridge, the host
//! veths and whatever a plugin made in the node, an IFB of the `bandwidth` plugin), and the
//! scratch directory; also while unwinding from a panic, and on SIGINT/SIGTERM through
//! [`super::cleanup_on_signals`] (every namespace is registered).

pub mod runtime;

use super::attach::AttachTopology;
use super::{add_namespace, process, Namespace, TopoError, NETNS_RUN_DIR, SEQUENCE};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

pub use runtime::{Bandwidth, CniError, CniRuntime, Conflist, RuntimeConfig};

/// Name of the node's bridge, as the `bridge` plugin's configuration names it (`cni0`, the name
/// Kubernetes set-ups with the `bridge` plugin use).
pub const BRIDGE: &str = "cni0";

/// The pods' interface name, `CNI_IFNAME` (the name Kubernetes runtimes pass).
pub const POD_IFNAME: &str = "eth0";

/// Directory of the containernetworking plugins (Debian's `containernetworking-plugins`).
pub const PLUGIN_DIR: &str = "/usr/lib/cni";

/// Name of the conflists' network (`name`; `host-local` keeps its leases under
/// `<dataDir>/<name>`).
pub const NETWORK_NAME: &str = "mtr-cni";

/// First host number host-local hands out in the pod subnet (`rangeStart` = `.10`): `.1` is the
/// gateway on `cni0`.
const RANGE_START: u8 = 10;

/// Last host number host-local hands out (`rangeEnd` = `.250`): 241 addresses, more than any
/// test or comparison runs at once.
const RANGE_END: u8 = 250;

/// Sequence of the pods' container IDs within this process.
static CONTAINER_SEQ: AtomicU64 = AtomicU64::new(0);

/// One pod: a network namespace and the container ID its CNI calls carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pod {
    /// The pod's namespace (`<base>-p<n>`).
    pub ns: Namespace,
    /// Its container ID: 64 hexadecimal digits like a runtime's, unique in this process, the
    /// first 12 (what `metronome-cni` names classes by) too.
    pub container_id: String,
    /// Its interface, `CNI_IFNAME` ([`POD_IFNAME`]).
    pub ifname: String,
    /// Its address, from the last ADD's result (`None` before an ADD or after a DEL).
    pub addr: Option<Ipv4Addr>,
    /// Its host veth (the result's interface without `sandbox`), from the last ADD's result.
    pub host_if: Option<String>,
}

impl Pod {
    /// `CNI_NETNS`: the path the runtime passes, `/var/run/netns/<pod>`.
    pub fn netns_path(&self) -> PathBuf {
        Path::new("/var/run/netns").join(self.ns.name())
    }
}

/// A node with a bridge `cni0`, an uplink to a receiver, and pods. Dropping it removes them all
/// (module docs).
#[derive(Debug)]
pub struct CniTopology {
    /// The node (its host namespace: `up0`, `cni0`, the pods' host veths) and the receiver.
    pub node: AttachTopology,
    /// The pods, in order of [`CniTopology::add_pod`] (removed ones taken out).
    pub pods: Vec<Pod>,
    base: String,
    next_pod: usize,
    scratch: PathBuf,
}

impl CniTopology {
    /// Creates the node and receiver (`<prefix>-<pid>-<seq>-{host,rcv}`) with `cni0`, the
    /// scratch directory and `pods` pod namespaces (no interface yet: the plugins make it). On any
    /// failure what was created is removed before the error is returned.
    pub fn new(prefix: &str, pods: usize) -> Result<CniTopology, TopoError> {
        let node = AttachTopology::with_bridge(prefix, 0, BRIDGE)?;
        let base = node
            .host
            .name()
            .strip_suffix("-host")
            .unwrap_or(node.host.name())
            .to_owned();
        let scratch = std::env::temp_dir().join(format!(
            "mtr-cni-{}-{}",
            std::process::id(),
            SEQUENCE.fetch_add(1, Ordering::Relaxed)
        ));
        let mut topo = CniTopology {
            node,
            pods: Vec::new(),
            base,
            next_pod: 0,
            scratch,
        };
        // From here on `topo`'s Drop removes whatever exists, also on the error paths below.
        topo.pin_bridge_mac()?;
        std::fs::create_dir_all(topo.ipam_dir())?;
        for _ in 0..pods {
            topo.add_pod()?;
        }
        Ok(topo)
    }

    /// Sets `cni0`'s MAC address to the one it has: a bridge whose address was never set takes
    /// the lowest of its ports' (`br_stp_recalculate_bridge_id` in `net/bridge/br_stp_if.c`),
    /// so it would change as pods come and go, and the `bridge` plugin's CHECK, which compares
    /// the bridge's address with the one in the ADD result, would fail for every pod added
    /// before.
    fn pin_bridge_mac(&self) -> Result<(), TopoError> {
        let mac = self.node.host.link_mac(BRIDGE)?.unwrap_or_default();
        self.node
            .host
            .ip(&["link", "set", "dev", BRIDGE, "address", &mac])
            .map(drop)
    }

    /// The node's namespace (where the plugins and the daemon run).
    pub fn node_ns(&self) -> &Namespace {
        &self.node.host
    }

    /// The pod subnet (network address, prefix length): the gateway's /24.
    pub fn pod_subnet(&self) -> (Ipv4Addr, u8) {
        self.node.workload_subnet()
    }

    /// The topology's scratch directory (removed on drop): host-local's `dataDir`
    /// ([`CniTopology::ipam_dir`]) and whatever a caller keeps with the topology (a daemon's
    /// class directory, its control socket).
    pub fn scratch(&self) -> &Path {
        &self.scratch
    }

    /// host-local's `dataDir`.
    pub fn ipam_dir(&self) -> PathBuf {
        self.scratch.join("ipam")
    }

    /// Creates one more pod namespace (`lo` up); returns its index in [`CniTopology::pods`].
    pub fn add_pod(&mut self) -> Result<usize, TopoError> {
        let n = self.next_pod;
        self.next_pod += 1;
        let ns = Namespace::new(format!("{}-p{n}", self.base));
        process::register(ns.name());
        add_namespace(ns.name())?;
        ns.ip(&["link", "set", "lo", "up"])?;
        let seq = CONTAINER_SEQ.fetch_add(1, Ordering::Relaxed);
        let pid = u64::from(std::process::id());
        self.pods.push(Pod {
            ns,
            container_id: format!("{seq:012x}{pid:052x}"),
            ifname: POD_IFNAME.to_owned(),
            addr: None,
            host_if: None,
        });
        Ok(self.pods.len() - 1)
    }

    /// Deletes pod `index`'s namespace (its veth goes with it) and takes it out of the list.
    pub fn remove_pod(&mut self, index: usize) -> Result<Pod, TopoError> {
        let pod = self.pods.remove(index);
        let r = delete_namespace(pod.ns.name());
        r.map(|()| pod)
    }

    /// The conflist `bridge` + `host-local` + `plugins` (each a plugin's configuration, `type`
    /// included), in the conflist's CNI version 1.0.0.
    pub fn conflist(&self, plugins: Vec<serde_json::Value>) -> Conflist {
        let (net, len) = self.pod_subnet();
        let [a, b, c, _] = net.octets();
        let gateway = self.node.gateway_addr.to_string();
        let bridge = serde_json::json!({
            "type": "bridge",
            "bridge": BRIDGE,
            "isGateway": true,
            "ipMasq": false,
            "ipam": {
                "type": "host-local",
                "dataDir": self.ipam_dir(),
                "ranges": [[{
                    "subnet": format!("{net}/{len}"),
                    "rangeStart": Ipv4Addr::new(a, b, c, RANGE_START).to_string(),
                    "rangeEnd": Ipv4Addr::new(a, b, c, RANGE_END).to_string(),
                    "gateway": gateway,
                }]],
                "routes": [{ "dst": "0.0.0.0/0" }],
            },
        });
        let mut all = vec![bridge];
        all.extend(plugins);
        Conflist {
            name: NETWORK_NAME.to_owned(),
            cni_version: "1.0.0".to_owned(),
            plugins: all,
        }
    }

    /// The baseline: `bridge` + `host-local` + the containernetworking `bandwidth` plugin (its
    /// IFB with a TBF for egress, a TBF on the host veth for ingress), which takes
    /// `runtimeConfig.bandwidth`.
    pub fn bandwidth_conflist(&self) -> Conflist {
        self.conflist(vec![serde_json::json!({
            "type": "bandwidth",
            "capabilities": { "bandwidth": true },
        })])
    }

    /// `bridge` + `host-local` + `metronome-cni` with its control `socket`, its `stateDir` and
    /// `fair`, taking `runtimeConfig.bandwidth`.
    pub fn metronome_conflist(&self, socket: &Path, state_dir: &Path, fair: bool) -> Conflist {
        self.conflist(vec![serde_json::json!({
            "type": "metronome-cni",
            "capabilities": { "bandwidth": true },
            "socket": socket,
            "stateDir": state_dir,
            "fair": fair,
        })])
    }

    /// The names of the node's links (`ip -o link show`, `@peer` suffixes cut).
    pub fn node_links(&self) -> Result<Vec<String>, TopoError> {
        Ok(link_names(&self.node.host.ip(&["-o", "link", "show"])?))
    }

    /// The leases host-local holds (files named by an address under its `dataDir`).
    pub fn leases(&self) -> Result<Vec<String>, TopoError> {
        let dir = self.ipam_dir().join(NETWORK_NAME);
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let mut leases = Vec::new();
        for entry in entries {
            let name = entry?.file_name().to_string_lossy().into_owned();
            if name.parse::<std::net::IpAddr>().is_ok() {
                leases.push(name);
            }
        }
        leases.sort();
        Ok(leases)
    }

    /// Deletes the pods' namespaces and the scratch directory now, reporting the first failure,
    /// then the node and the receiver (what `Drop` does; a failure there is logged, as the
    /// attach topology's `Drop` logs it).
    pub fn remove(mut self) -> Result<(), TopoError> {
        self.delete_pods()
    }

    fn delete_pods(&mut self) -> Result<(), TopoError> {
        let mut first = Ok(());
        for pod in std::mem::take(&mut self.pods) {
            let r = delete_namespace(pod.ns.name());
            if first.is_ok() {
                first = r;
            }
        }
        if self.scratch.exists() {
            let r = std::fs::remove_dir_all(&self.scratch).map_err(TopoError::from);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

impl Drop for CniTopology {
    fn drop(&mut self) {
        // The node and the receiver go with `self.node`'s own Drop, after this.
        if let Err(e) = self.delete_pods() {
            tracing::warn!("removing cni topology: {e}");
        }
    }
}

/// Deletes namespace `name` if it exists, and forgets it for the signal cleanup.
fn delete_namespace(name: &str) -> Result<(), TopoError> {
    let r = if Path::new(NETNS_RUN_DIR).join(name).exists() {
        process::run("ip", &["netns", "del", name]).map(drop)
    } else {
        Ok(())
    };
    process::unregister(name);
    r
}

/// The interface names of `ip -o link show` output (`2: up0@if3: <...> ...`).
pub fn link_names(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.split(':').nth(1))
        .map(|n| n.trim().split('@').next().unwrap_or("").to_owned())
        .filter(|n| !n.is_empty())
        .collect()
}

/// [`CniTopology::new`], or `None` after saying why privileged test `test` is skipped (no
/// CAP_NET_ADMIN and [`super::SKIP_PRIVILEGED_ENV`] set; without it,
/// [`super::skip_unprivileged`] panics). Any other failure panics.
pub fn cni_or_skip(prefix: &str, pods: usize, test: &str) -> Option<CniTopology> {
    match CniTopology::new(prefix, pods) {
        Ok(topo) => Some(topo),
        Err(e @ TopoError::MissingPrivilege(_)) => {
            super::skip_unprivileged(test, &e);
            None
        }
        Err(e) => panic!("building the cni topology failed: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_names_cut_the_peer_suffix() {
        let text = "1: lo: <LOOPBACK,UP> mtu 65536\n\
                    2: up0@if3: <BROADCAST> mtu 1500\n\
                    5: veth1a2b3c4d@if2: <BROADCAST> mtu 1500 master cni0\n";
        assert_eq!(link_names(text), ["lo", "up0", "veth1a2b3c4d"]);
    }
}
