//! Topology tests. Those that build namespaces fail without CAP_NET_ADMIN, or skip saying why
//! under METRONOME_SKIP_PRIVILEGED=1; they send only between their own namespaces, for at most a
//! few seconds each.

use super::*;
use crate::trafficgen::{self, FlowGroup, TrafficPlan};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

fn privileged(test: &str) -> bool {
    match process::check_net_admin() {
        Ok(()) => true,
        Err(e) => {
            skip_unprivileged(test, &e);
            false
        }
    }
}

fn names(topo: &Topology) -> Vec<String> {
    topo.namespaces()
        .iter()
        .map(|n| n.name().to_owned())
        .collect()
}

#[test]
fn a_failing_netns_add_is_reported_with_its_cause() {
    if !privileged("a_failing_netns_add_is_reported_with_its_cause") {
        return;
    }
    let name = format!("mtr-dup-{}", std::process::id());
    process::register(&name);
    add_namespace(&name).unwrap();
    // The name is taken: `ip netns add` fails although the process holds CAP_NET_ADMIN.
    let again = add_namespace(&name);
    let _ = process::run("ip", &["netns", "del", &name]);
    process::unregister(&name);
    match again {
        Err(TopoError::Command { command, stderr }) => {
            assert!(command.contains(&name), "{command}");
            assert!(!stderr.is_empty());
        }
        other => panic!("expected the command's own error, got {other:?}"),
    }
}

#[test]
fn a_test_that_cannot_run_fails_unless_skipping_was_asked_for() {
    // Only the path of this run's environment is checked (the variable is read, not set: tests
    // share the process environment).
    let skip = std::env::var(SKIP_PRIVILEGED_ENV).as_deref() == Ok("1");
    let outcome = std::panic::catch_unwind(|| skip_unprivileged("t", &"no CAP_NET_ADMIN"));
    assert_eq!(outcome.is_ok(), skip);
    if let Err(panic) = outcome {
        let message = panic.downcast_ref::<String>().expect("a formatted message");
        assert!(
            message.contains("t cannot run: no CAP_NET_ADMIN"),
            "{message}"
        );
        assert!(message.contains(SKIP_PRIVILEGED_ENV), "{message}");
    }
}

#[test]
fn parses_proc_net_dev() {
    let text = "Inter-|   Receive |  Transmit\n face |bytes packets ...\n    lo: 1 2 0 0 0 0 0 0 3 4 0 0 0 0 0 0\n  rcv0: 1500 3 0 1 0 0 0 0 90 1 0 2 0 0 0 0\n";
    let s = parse_net_dev(text, "rcv0").expect("rcv0");
    assert_eq!((s.rx_bytes, s.rx_packets, s.rx_dropped), (1500, 3, 1));
    assert_eq!((s.tx_bytes, s.tx_packets, s.tx_dropped), (90, 1, 2));
    assert!(parse_net_dev(text, "rcv").is_none());
    assert!(parse_net_dev("garbage", "lo").is_none());
}

#[test]
fn tbf_default_bucket_holds_two_frames() {
    assert!(matches!(
        QdiscSpec::tbf(1_000_000),
        QdiscSpec::Tbf {
            burst_bytes: 3028,
            ..
        }
    ));
    assert!(matches!(
        QdiscSpec::tbf(1_000_000_000),
        QdiscSpec::Tbf {
            burst_bytes: 125_000,
            ..
        }
    ));
}

#[test]
fn missing_privilege_message_names_the_capability() {
    let e = TopoError::MissingPrivilege("Operation not permitted".into());
    assert!(e.to_string().contains("CAP_NET_ADMIN"));
}

/// Build, check links, fail to cross without forwarding, bridge, run 4 TCP flows and the probe
/// for 1 s, shape with HTB and TBF at 50 Mbit/s for 1 s each, tear down.
#[test]
fn topology_carries_traffic_through_a_bridge_and_cleans_up() {
    if !privileged("topology_carries_traffic_through_a_bridge_and_cleans_up") {
        return;
    }
    let mut topo = Topology::bump_in_the_wire("mtr-test").expect("topology");
    let ns_names = names(&topo);
    assert!(ns_names.iter().all(|n| namespace_exists(n)));
    for (ns, iface) in topo.interfaces() {
        let out = ns.ip(&["-o", "link", "show", iface]).expect("link show");
        assert!(
            out.contains("state UP") || out.contains(",UP"),
            "{iface}: {out}"
        );
        assert!(iface.len() <= 15);
    }
    let addr = SocketAddr::from((topo.receiver_addr, 9));
    let crossed = topo
        .sender
        .run(move || TcpStream::connect_timeout(&addr, Duration::from_millis(300)).is_ok())
        .expect("run in sender");
    assert!(!crossed, "nothing forwards between in0 and out0 yet");

    topo.bridge_shaper().expect("bridge");
    let mut rx = topo
        .receiver
        .interface_counters(&topo.receiver_if)
        .expect("counters");
    let before = rx.read().expect("read");
    let groups = vec![FlowGroup::tcp("bulk", 5201, 4)];
    let plan =
        TrafficPlan::new(topo.receiver_addr, groups, Duration::from_secs(1)).with_probe(5299);
    let report = trafficgen::run(&plan, Some(&topo.sender), Some(&topo.receiver)).expect("run");
    let bulk = &report.groups[0];
    assert_eq!(bulk.bytes_per_flow.len(), 4);
    assert!(bulk.bytes_per_flow.iter().all(|&b| b > 0), "{bulk:?}");
    assert_eq!(bulk.windows_bps.len(), 10);
    let after = rx.read().expect("read");
    assert!(
        after.rx_bytes - before.rx_bytes >= bulk.bytes,
        "{before:?} {after:?} {bulk:?}"
    );
    let probe = report.probe.expect("probe");
    assert!(probe.samples >= 20 && probe.p50_us > 0, "{probe:?}");

    for spec in [
        QdiscSpec::Htb {
            rate_bps: 50_000_000,
            burst_bytes: None,
        },
        QdiscSpec::tbf(50_000_000),
    ] {
        topo.install_qdisc(&topo.shaper_out, &spec).expect("qdisc");
        let groups = vec![FlowGroup::tcp("shaped", 5202, 4)];
        let plan = TrafficPlan::new(topo.receiver_addr, groups, Duration::from_secs(1));
        let report = trafficgen::run(&plan, Some(&topo.sender), Some(&topo.receiver)).expect("run");
        // Skip the first 200 ms (slow start fills the queue); loose bounds, the tight ones are
        // `compare`'s.
        let w = &report.groups[0].windows_bps[2..];
        let mean = w.iter().sum::<f64>() / w.len() as f64;
        eprintln!("{spec:?}: mean goodput {:.1} Mbit/s", mean / 1e6);
        assert!((30e6..55e6).contains(&mean), "{spec:?}: {mean} bit/s {w:?}");
        assert!(topo
            .qdisc_stats(&topo.shaper_out)
            .expect("stats")
            .contains("Sent"));
        topo.remove_qdisc(&topo.shaper_out).expect("remove");
    }
    topo.unbridge_shaper().expect("unbridge");
    topo.remove().expect("remove");
    assert!(ns_names.iter().all(|n| !namespace_exists(n)));
}

#[test]
fn topology_is_removed_after_a_panic() {
    if !privileged("topology_is_removed_after_a_panic") {
        return;
    }
    let result = std::panic::catch_unwind(|| {
        let topo = Topology::bump_in_the_wire("mtr-panic").expect("topology");
        let n = names(&topo);
        std::panic::panic_any(n);
    });
    let payload = result.expect_err("the closure panics");
    let ns_names = payload.downcast::<Vec<String>>().expect("names");
    assert_eq!(ns_names.len(), 3);
    assert!(
        ns_names.iter().all(|n| !namespace_exists(n)),
        "{ns_names:?}"
    );
}

#[test]
fn stale_namespaces_of_dead_processes_are_removed() {
    if !privileged("stale_namespaces_of_dead_processes_are_removed") {
        return;
    }
    // A pid above the kernel's pid_max ceiling (2^22) never runs.
    let prefix = format!("mtr-stale{}", std::process::id());
    let name = format!("{prefix}-4194305-0-snd");
    process::run("ip", &["netns", "add", &name]).expect("add");
    let removed = remove_stale(&prefix).expect("remove_stale");
    assert_eq!(removed, vec![name.clone()]);
    assert!(!namespace_exists(&name));
}
