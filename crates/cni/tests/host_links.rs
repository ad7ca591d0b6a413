//! Privileged: [`SystemLinks`] on real interfaces, in the testbed's attach topology (a host
//! namespace with a bridge `br0` and workloads whose host-side veths are its ports). Without
//! CAP_NET_ADMIN the test fails, or says why and passes under METRONOME_SKIP_PRIVILEGED=1.

use metronome_cni::host::{host_interface, Links, SystemLinks};
use metronome_testbed::netns::attach::{attach_or_skip, WorkloadLink};
use metronome_testbed::netns::NETNS_RUN_DIR;
use serde_json::json;
use std::path::Path;

#[test]
fn the_host_veth_is_found_as_a_bridge_port_and_as_the_pods_peer() {
    let test = "the_host_veth_is_found_as_a_bridge_port_and_as_the_pods_peer";
    let Some(topo) = attach_or_skip("cnilinks", (2, WorkloadLink::Bridge), test) else {
        return;
    };
    let pod = topo.workloads[1].clone();
    let bridge = topo.bridge.clone();
    let answers = topo
        .host
        .run(move || {
            let netns = Path::new(NETNS_RUN_DIR).join(pod.ns.name());
            let port = SystemLinks.is_bridge_port(&pod.host_if).unwrap();
            let bridge_itself = SystemLinks.is_bridge_port(&bridge).unwrap();
            let peer = SystemLinks.peer_of(&netns, &pod.iface).unwrap();
            // What the bridge plugin's prevResult lists: the bridge, the host veth, the pod's.
            let Ok(serde_json::Value::Object(result)) = serde_json::from_value::<serde_json::Value>(
                json!({"interfaces":[{"name":bridge},{"name":pod.host_if},
                    {"name":pod.iface,"sandbox":netns}]}),
            ) else {
                unreachable!()
            };
            let chosen = host_interface(Some(&result), Some(&netns), &pod.iface, &SystemLinks);
            // A result without interfaces: the peer.
            let fallback = host_interface(None, Some(&netns), &pod.iface, &SystemLinks);
            (port, bridge_itself, peer, chosen, fallback, pod.host_if)
        })
        .unwrap();
    let (port, bridge_itself, peer, chosen, fallback, host_if) = answers;
    assert!(port, "{host_if} is a port of the bridge");
    assert!(!bridge_itself, "the bridge is no port");
    assert_eq!(peer, host_if);
    assert_eq!(chosen.unwrap(), host_if);
    assert_eq!(fallback.unwrap(), host_if);
}
