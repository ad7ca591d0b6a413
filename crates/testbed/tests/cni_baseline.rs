//! The CNI testbed with Debian's containernetworking plugins: the conflist `bridge` +
//! `host-local` + `bandwidth` run by the testbed's runtime (`metronome_testbed::netns::cni`), the
//! baseline of `metronome compare --cni`.
//!
//! * ADD of two pods: each gets an address in the topology's pod subnet and a host veth on
//!   `cni0`, the `bandwidth` plugin an IFB per pod; CHECK passes.
//! * Traffic, one direction at a time, both pods at once, 4 TCP flows each: pod -> receiver
//!   (egress) and receiver -> pod (ingress) each within [`TOLERANCE`] of that pod's limit in that
//!   direction (the median of its 100 ms goodput windows on the wire, the comparison's
//!   measurement). The limits differ per pod and per direction ([`LIMITS`]), so a limit applied
//!   to the other pod or the other direction fails.
//! * DEL (reverse order): no veth, no IFB, no host-local lease left; a second DEL succeeds (the
//!   spec's DEL is idempotent).
//!
//! Fails without CAP_NET_ADMIN (skips, saying why, under METRONOME_SKIP_PRIVILEGED=1); the
//! topology is removed on every path (its `Drop`).

use metronome_testbed::compare::cni::burst_bits;
use metronome_testbed::compare::cni::traffic::{pod_rate, run_pods, Direction};
use metronome_testbed::netns::cni::{
    cni_or_skip, Bandwidth, CniRuntime, CniTopology, RuntimeConfig, PLUGIN_DIR,
};
use std::path::PathBuf;
use std::time::Duration;

/// Traffic duration of each direction.
const RUN: Duration = Duration::from_secs(3);
/// Skipped at the start (slow start, the first queue).
const WARMUP: Duration = Duration::from_millis(800);
/// Measured after the warm-up.
const MEASURE: Duration = Duration::from_millis(1800);
/// Tolerance: 5 %, loose enough for kernel TCP on a shared 2-core machine (as the attach
/// topology's kernel baselines, `attach_kernel.rs`).
const TOLERANCE: f64 = 0.05;
/// Each pod's (egress, ingress) limit, bits/s.
const LIMITS: [(u64, u64); 2] = [(100_000_000, 60_000_000), (50_000_000, 100_000_000)];

fn runtime_config((egress, ingress): (u64, u64)) -> RuntimeConfig {
    RuntimeConfig::bandwidth(Bandwidth {
        ingress_rate: ingress,
        ingress_burst: burst_bits(ingress),
        egress_rate: egress,
        egress_burst: burst_bits(egress),
    })
}

/// Each pod's median rate in `direction`, both pods at once.
fn rates(topo: &CniTopology, direction: Direction, port: u16) -> Vec<f64> {
    let reports =
        run_pods(topo, &[0, 1], (4, direction), port, (RUN, u64::MAX)).expect("pod traffic ran");
    reports
        .iter()
        .zip(LIMITS)
        .map(|(r, (egress, ingress))| {
            let limit = match direction {
                Direction::Egress => egress,
                Direction::Ingress => ingress,
            };
            let rate = pod_rate(r, (WARMUP, MEASURE), limit).expect("windows measured");
            println!(
                "  {}: median {:.2} Mbit/s, mean {:.2}",
                direction.name(),
                rate.median_bps / 1e6,
                rate.mean_bps / 1e6
            );
            rate.median_bps
        })
        .collect()
}

/// Whether every pod is within [`TOLERANCE`] of its limit in `direction`; prints the figures.
fn within(topo: &CniTopology, direction: Direction, port: u16) -> bool {
    let mut ok = true;
    for (i, (rate, (egress, ingress))) in rates(topo, direction, port)
        .into_iter()
        .zip(LIMITS)
        .enumerate()
    {
        let limit = match direction {
            Direction::Egress => egress,
            Direction::Ingress => ingress,
        } as f64;
        let err = (rate - limit) / limit;
        println!(
            "pod {i} {}: {:.2} Mbit/s, limit {:.0} ({:+.2} %)",
            direction.name(),
            rate / 1e6,
            limit / 1e6,
            100.0 * err
        );
        ok &= err.abs() <= TOLERANCE;
    }
    ok
}

#[test]
fn the_bandwidth_plugin_chain_limits_each_pod_both_ways_and_del_leaves_nothing() {
    let Some(mut topo) = cni_or_skip("mtr-tcnb", LIMITS.len(), "cni_baseline") else {
        return;
    };
    let before = topo.node_links().expect("node links");
    assert!(before.contains(&"cni0".to_owned()), "{before:?}");
    let mut rt = CniRuntime::new(
        topo.node_ns(),
        vec![PathBuf::from(PLUGIN_DIR)],
        topo.bandwidth_conflist(),
    );
    let rcs: Vec<RuntimeConfig> = LIMITS.iter().map(|&l| runtime_config(l)).collect();
    for (i, rc) in rcs.iter().enumerate() {
        let result = rt.add(&mut topo.pods[i], rc).expect("ADD");
        let pod = &topo.pods[i];
        let addr = pod.addr.unwrap_or_else(|| panic!("no address in {result}"));
        let (net, _) = topo.pod_subnet();
        assert_eq!(addr.octets()[..3], net.octets()[..3], "{result}");
        let host_if = pod.host_if.clone().expect("host veth in the result");
        let links = topo.node_links().expect("node links");
        assert!(links.contains(&host_if), "{host_if} not in {links:?}");
    }
    let links = topo.node_links().expect("node links");
    let ifbs = links.iter().filter(|l| l.starts_with("bwp")).count();
    assert_eq!(ifbs, LIMITS.len(), "one IFB per pod: {links:?}");
    assert_eq!(topo.leases().expect("leases").len(), LIMITS.len());
    for (i, rc) in rcs.iter().enumerate() {
        rt.check(&topo.pods[i], rc).expect("CHECK after ADD");
    }

    // Two attempts per direction (CONTRIBUTING.md: rates measured on a shared machine).
    for (direction, ports) in [
        (Direction::Egress, [22_000, 22_010]),
        (Direction::Ingress, [22_020, 22_030]),
    ] {
        let ok = within(&topo, direction, ports[0]) || within(&topo, direction, ports[1]);
        assert!(
            ok,
            "{}: a pod is more than {:.0} % off its limit in both attempts",
            direction.name(),
            100.0 * TOLERANCE
        );
    }

    for (i, rc) in rcs.iter().enumerate().rev() {
        rt.del(&mut topo.pods[i], rc).expect("DEL");
    }
    let after = topo.node_links().expect("node links");
    assert_eq!(after, before, "links left by DEL");
    assert!(topo.leases().expect("leases").is_empty());
    for pod in &topo.pods {
        let links = pod.ns.ip(&["-o", "link", "show"]).expect("pod links");
        assert!(!links.contains("eth0"), "{}: {links}", pod.ns.name());
    }
    // DEL again: nothing to remove, and no error.
    for (i, rc) in rcs.iter().enumerate() {
        rt.del(&mut topo.pods[i], rc).expect("second DEL");
    }

    let names: Vec<String> = topo
        .node
        .namespaces()
        .iter()
        .map(|n| n.name().to_owned())
        .chain(topo.pods.iter().map(|p| p.ns.name().to_owned()))
        .collect();
    let scratch = topo.scratch().to_path_buf();
    topo.remove().expect("remove the topology");
    for n in names {
        assert!(!metronome_testbed::netns::namespace_exists(&n), "{n} left");
    }
    assert!(!scratch.exists(), "{} left", scratch.display());
}
