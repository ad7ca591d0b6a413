//! Attach mode with a bridge (`[interfaces] bridges`, `match.to`, `crates/daemon/src/os/attach.rs`)
//! on real traffic, with the built `metronome` binary in the host namespace of an attach topology
//! (two workloads on the bridge `br0`, the uplink `up0` to the receiver,
//! `metronome_testbed::netns::attach`), the classes added live through the control socket:
//!
//! * a `to` class on workload 0's host veth holds its rate for TCP from the receiver to the
//!   workload, each packet shaped once and delivered once (the daemon sends it out of the
//!   bridge marked, the port's `capture` lets it pass: `already_shaped` counts as many packets
//!   as the workload's interface received of them, no loop and no copy); a `from` class on the
//!   same veth holds its rate for the other direction;
//! * deleting the `to` class takes its hook off the veth (`detached` event, no tcx program);
//! * a `to` class on an interface that is no listed bridge's port (the uplink) is refused,
//!   naming `match.to`, and nothing is hooked;
//! * `[daemon] class_dir`: a file whose interface exists gives its classes (hooked at start), a
//!   file whose interface is gone is removed.

mod common;

use common::{
    check_share, egress_programs, scrape_host, start_daemon_in_controlled, stop_cleanly,
    wait_until, Daemon, Scratch,
};
use metronome_daemon::ops::control::{ClassObject, Client};
use metronome_testbed::netns::attach::{attach_or_skip, AttachTopology, WorkloadLink};
use metronome_testbed::trafficgen::{self, FlowGroup, TrafficPlan};
use std::path::Path;
use std::time::Duration;

/// The `to` class's rate (receiver -> workload 0), bit/s.
const IN_BPS: u64 = 30_000_000;
/// The `from` class's rate (workload 0 -> receiver), bit/s.
const OUT_BPS: u64 = 20_000_000;

/// Sink ports: in the workload (the `to` direction), in the receiver (the `from` direction).
const PORTS: [u16; 2] = [5401, 5402];

/// Packets the workload's interface may receive beyond those the daemon sent it through the
/// bridge over one run: ARP and IPv6 neighbour discovery (not IP or multicast, passed on
/// unshaped), a few dozen at most in a few seconds.
const OTHER_PACKETS: u64 = 200;

fn write_config(topo: &AttachTopology, dir: &Path, class_dir: Option<&Path>) -> std::path::PathBuf {
    let class_dir = class_dir.map_or(String::new(), |d| {
        format!("[daemon]\nclass_dir = \"{}\"\n", d.display())
    });
    let text = format!(
        "[interfaces]\nattach = [\"{up}\"]\nbridges = [\"{br}\"]\n\n{class_dir}",
        up = topo.uplink,
        br = topo.bridge,
    );
    let path = dir.join("bridge.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn start(topo: &AttachTopology, dir: &Path, config: &Path) -> Daemon {
    let socket = dir.join("notify");
    start_daemon_in_controlled(
        topo.host.name(),
        config,
        &dir.join("control.sock"),
        &socket,
        &dir.join("daemon.log"),
        "bridge",
        Duration::from_secs(10),
    )
}

fn object(v: serde_json::Value) -> ClassObject {
    match v {
        serde_json::Value::Object(o) => o,
        other => panic!("not an object: {other}"),
    }
}

/// The sum of the series of `body` whose line starts with `prefix`.
fn series(body: &str, prefix: &str) -> f64 {
    body.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn to_and_from_classes_added_live_shape_a_bridged_workload_once_each_way() {
    let test = "to_and_from_classes_added_live_shape_a_bridged_workload_once_each_way";
    let Some(topo) = attach_or_skip("mtr-abr", (2, WorkloadLink::Bridge), test) else {
        return;
    };
    let dir = Scratch::new("attach-bridge");
    let config = write_config(&topo, &dir.0, None);
    let mut daemon = start(&topo, &dir.0, &config);
    let hv0 = topo.workloads[0].host_if.clone();
    assert!(egress_programs(&topo, &hv0).is_empty());
    assert!(
        egress_programs(&topo, &topo.bridge).is_empty(),
        "no hook at the bridge's egress"
    );

    let mut client = Client::connect(&dir.0.join("control.sock")).unwrap();
    let r = client
        .add(object(serde_json::json!({
            "name": "w0.in", "match": {"to": hv0}, "rate": IN_BPS.to_string(), "fair": true})))
        .unwrap();
    assert!(r.ok, "{r:?}");
    let r = client
        .add(object(serde_json::json!({
            "name": "w0.out", "match": {"from": hv0}, "rate": OUT_BPS.to_string()})))
        .unwrap();
    assert!(r.ok, "{r:?}");
    wait_until("capture at the to port's egress", || {
        egress_programs(&topo, &hv0) == ["capture"]
    });

    // Receiver -> workload 0: the `to` class, shaped once, delivered once.
    let w0 = &topo.workloads[0];
    let mut rx = w0.ns.interface_counters(&w0.iface).unwrap();
    let before_rx = rx.read().unwrap().rx_packets;
    let before = scrape_host(&topo);
    let plan = TrafficPlan::new(
        w0.addr,
        vec![FlowGroup::tcp("w0.in", PORTS[0], 4)],
        Duration::from_secs(4),
    );
    let report = trafficgen::run(&plan, Some(&topo.receiver), Some(&w0.ns)).unwrap();
    check_share("w0.in", report.groups[0].mean_bps(), IN_BPS);
    // The BPF counters reach the metrics at the next refresh (250 ms).
    std::thread::sleep(Duration::from_millis(600));
    let after = scrape_host(&topo);
    let delivered = rx.read().unwrap().rx_packets - before_rx;
    let reason = |body: &str, r: &str| {
        series(
            body,
            &format!("metronome_attach_packets_total{{reason=\"{r}\"}}"),
        )
    };
    let passed = (reason(&after, "already_shaped") - reason(&before, "already_shaped")) as u64;
    let sent = (series(&after, "metronome_class_packets_total{class=\"w0.in\"")
        - series(&before, "metronome_class_packets_total{class=\"w0.in\"")) as u64;
    println!(
        "w0.in: class sent {sent}, passed at the port {passed}, the workload received {delivered}"
    );
    assert!(passed > 1000, "{after}");
    assert!(
        delivered >= passed && delivered <= passed + OTHER_PACKETS,
        "each shaped packet arrives once: {passed} passed, {delivered} received"
    );
    assert!(sent > 0, "{after}");

    // Workload 0 -> receiver: the `from` class on the uplink.
    let plan = TrafficPlan::new(
        topo.receiver_addr,
        vec![FlowGroup::tcp("w0.out", PORTS[1], 4)],
        Duration::from_secs(4),
    );
    let report = trafficgen::run(&plan, Some(&w0.ns), Some(&topo.receiver)).unwrap();
    check_share("w0.out", report.groups[0].mean_bps(), OUT_BPS);

    // Deleting the `to` class takes its hook off the veth.
    assert!(client.delete("w0.in").unwrap().ok);
    wait_until("the to hook removed", || {
        egress_programs(&topo, &hv0).is_empty()
    });
    let body = scrape_host(&topo);
    let detached =
        format!("metronome_attach_events_total{{interface=\"{hv0}\",event=\"detached\"}}");
    assert_eq!(series(&body, &detached), 1.0, "{body}");
    let came = format!("metronome_attach_events_total{{interface=\"{hv0}\",event=\"came\"}}");
    assert!(series(&body, &came) >= 1.0, "{body}");
    // A `to` on an existing interface no listed bridge holds is refused, naming the field:
    // nothing would capture what goes to it. Nothing is hooked.
    let r = client
        .add(object(
            serde_json::json!({"name": "up.in", "match": {"to": topo.uplink}}),
        ))
        .unwrap();
    assert!(!r.ok, "{r:?}");
    let error = r.error.expect("the refusal's error");
    assert_eq!(error.field, "match.to", "{error:?}");
    assert!(error.message.contains("[interfaces] bridges"), "{error:?}");
    assert_eq!(
        egress_programs(&topo, &topo.uplink),
        ["capture"],
        "only the daemon's own"
    );
    drop(client);
    stop_cleanly(&mut daemon);
    assert!(egress_programs(&topo, &hv0).is_empty());
}

#[test]
fn class_dir_restores_the_classes_of_present_interfaces_and_drops_the_files_of_gone_ones() {
    let test =
        "class_dir_restores_the_classes_of_present_interfaces_and_drops_the_files_of_gone_ones";
    let Some(topo) = attach_or_skip("mtr-acd", (2, WorkloadLink::Bridge), test) else {
        return;
    };
    let dir = Scratch::new("attach-class-dir");
    let classes = dir.0.join("classes");
    std::fs::create_dir_all(&classes).unwrap();
    let hv1 = topo.workloads[1].host_if.clone();
    let present = serde_json::json!({
    "interface": hv1, "container_id": "c1", "ifname": "eth0", "netns": "/run/netns/x",
    "classes": [
        {"name": "cni.c1.eth0.ingress", "match": {"to": hv1}, "rate": "10mbit", "fair": true},
        {"name": "cni.c1.eth0.egress", "match": {"from": hv1}, "rate": "10mbit"},
    ]});
    std::fs::write(classes.join("c1-eth0.json"), present.to_string()).unwrap();
    let gone = serde_json::json!({
        "interface": "vethgone0",
        "classes": [{"name": "cni.c2.eth0.egress", "match": {"from": "vethgone0"}, "rate": "10mbit"}]});
    std::fs::write(classes.join("c2-eth0.json"), gone.to_string()).unwrap();
    let config = write_config(&topo, &dir.0, Some(&classes));
    let mut daemon = start(&topo, &dir.0, &config);

    let mut client = Client::connect(&dir.0.join("control.sock")).unwrap();
    let list = client.list().unwrap();
    let names: Vec<String> = list
        .classes
        .unwrap_or_default()
        .iter()
        .filter_map(|c| c.get("name")?.as_str().map(str::to_string))
        .collect();
    assert_eq!(
        names,
        ["cni.c1.eth0.ingress", "cni.c1.eth0.egress"],
        "{}",
        daemon.log()
    );
    assert!(classes.join("c1-eth0.json").exists());
    assert!(!classes.join("c2-eth0.json").exists(), "{}", daemon.log());
    wait_until("the restored to class hooked", || {
        egress_programs(&topo, &hv1) == ["capture"]
    });
    let body = scrape_host(&topo);
    let restore = |result: &str| {
        series(
            &body,
            &format!("metronome_class_changes_total{{op=\"restore\",result=\"{result}\"}}"),
        )
    };
    assert_eq!((restore("ok"), restore("gone")), (2.0, 1.0), "{body}");
    drop(client);
    stop_cleanly(&mut daemon);
}
