//! Real kernel TCP through the attach topology (`metronome_testbed::netns::attach`) with the
//! kernel baselines of `metronome compare --attach`, no daemon: the topology routes the host's
//! own TCP and its workloads' TCP out of the uplink to the receiver, and each baseline limits
//! what it claims to.
//!
//! * HTB root and TBF root on the uplink at 100 Mbit/s: the host's 4 TCP flows, for 3 s, arrive
//!   within [`TOLERANCE`] of 100 Mbit/s on the receiver's veth (on the wire, the compare's
//!   measurement).
//! * Per-workload HTB (u32 source filters) and the `bandwidth` plugin's IFB+TBF, two workloads
//!   limited to 50 and 100 Mbit/s, 4 TCP flows each at once: each within [`TOLERANCE`] of its
//!   own limit (the median of its goodput windows scaled to the wire). Different limits, so a filter that put both
//!   workloads in one class, or a limit applied to the wrong workload, fails. Both with the
//!   workloads bridged and routed (`WorkloadLink`).
//! * Without a baseline, the host's traffic reaches the receiver well above 100 Mbit/s (so the
//!   limits above are the baselines' doing, not the path's).
//!
//! Fails without CAP_NET_ADMIN (skips, saying why, under METRONOME_SKIP_PRIVILEGED=1); the
//! topology is removed on every path (its `Drop`).

use metronome_testbed::compare::attach::{run_workloads, wire_windows, workload_rate};
use metronome_testbed::compare::measure::{self, WindowSampler};
use metronome_testbed::netns::attach::{attach_or_skip, AttachTopology, WorkloadLink};
use metronome_testbed::netns::QdiscSpec;
use metronome_testbed::trafficgen::{self, FlowGroup, TrafficPlan};
use std::time::{Duration, Instant};

/// Traffic duration of each run.
const RUN: Duration = Duration::from_secs(3);
/// Skipped at the start (slow start, the first queue).
const WARMUP: Duration = Duration::from_millis(800);
/// Measured after the warm-up.
const MEASURE: Duration = Duration::from_millis(1800);
/// Tolerance: 5 %, loose enough for kernel TCP on a shared 2-core machine.
const TOLERANCE: f64 = 0.05;
/// The host part's target, bits/s.
const TARGET_BPS: u64 = 100_000_000;
/// The two workloads' limits, bits/s.
const WORKLOAD_BPS: [u64; 2] = [50_000_000, 100_000_000];

/// The host's 4 TCP flows to the receiver for [`RUN`]; the mean rate on the wire at the
/// receiver's veth over [`MEASURE`] after [`WARMUP`], in 100 ms windows.
fn host_rate(topo: &AttachTopology, port: u16) -> f64 {
    let plan = TrafficPlan::new(
        topo.receiver_addr,
        vec![FlowGroup::tcp("host", port, 4)],
        RUN,
    );
    let mut counters = topo
        .receiver
        .interface_counters(&topo.receiver_if)
        .expect("receiver counters");
    let (snd, rcv) = (topo.host.clone(), topo.receiver.clone());
    let traffic = std::thread::spawn(move || trafficgen::run(&plan, Some(&snd), Some(&rcv)));
    std::thread::sleep(WARMUP);
    let mut sampler = WindowSampler::default();
    let start = Instant::now();
    let n = (MEASURE.as_millis() / measure::WINDOW.as_millis()) as u32;
    for k in 0..=n {
        let until = start + measure::WINDOW * k;
        if let Some(d) = until.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
        let s = counters.read().expect("read counters");
        sampler.push(
            Instant::now(),
            measure::wire_bytes(s.rx_bytes, s.rx_packets),
        );
    }
    let report = traffic
        .join()
        .expect("traffic thread")
        .expect("host traffic ran");
    assert!(report.groups[0].bytes > 0, "{report:?}");
    metronome_testbed::stats::mean(&sampler.rates())
}

fn assert_near(what: &str, achieved: f64, target: u64) {
    let err = (achieved - target as f64).abs() / target as f64;
    println!(
        "{what}: {:.2} Mbit/s (target {:.0}, {:+.2} %)",
        achieved / 1e6,
        target as f64 / 1e6,
        100.0 * (achieved / target as f64 - 1.0)
    );
    assert!(
        err <= TOLERANCE,
        "{what}: {:.2} Mbit/s is {:.1} % off {:.0} Mbit/s",
        achieved / 1e6,
        100.0 * err,
        target as f64 / 1e6
    );
}

/// Both workloads at once, 4 flows each; the median of each one's 100 ms windows, on the wire.
///
/// The median, not the mean: the windows are goodput at the receiving application, and a
/// receiver descheduled on the shared machine reads its socket buffer late, adding a burst above
/// the limit to a later window without the limit having let more through (a 50 Mbit/s TBF can
/// measure 52.9 by the mean). The mean is printed beside it.
fn workload_rates(topo: &AttachTopology, first_port: u16) -> Vec<f64> {
    let reports =
        run_workloads(topo, 4, first_port, (RUN, u64::MAX)).expect("workload traffic ran");
    reports
        .iter()
        .zip(WORKLOAD_BPS)
        .map(|(r, target)| {
            let (mean, _) = workload_rate(r, (WARMUP, MEASURE), target).expect("windows measured");
            let mut windows = wire_windows(r, (WARMUP, MEASURE)).expect("windows measured");
            windows.sort_by(f64::total_cmp);
            let median = windows[windows.len() / 2];
            println!(
                "  windows' mean {:.2} Mbit/s, median {:.2}",
                mean / 1e6,
                median / 1e6
            );
            median
        })
        .collect()
}

/// The per-workload baselines on `topo`: HTB with u32 source filters, then IFB+TBF, each
/// workload within [`TOLERANCE`] of its own limit; `ports` for the two runs.
fn check_per_workload_baselines(topo: &mut AttachTopology, ports: [u16; 2]) {
    let link = topo.link.name();
    topo.install_workload_htb(&WORKLOAD_BPS)
        .expect("per-workload htb");
    for (i, (rate, target)) in workload_rates(topo, ports[0])
        .into_iter()
        .zip(WORKLOAD_BPS)
        .enumerate()
    {
        assert_near(&format!("{link}: htb-u32 workload {i}"), rate, target);
    }
    topo.remove_baselines().expect("remove per-workload htb");

    topo.install_workload_ifb_tbf(&WORKLOAD_BPS)
        .expect("per-workload ifb+tbf");
    for (i, (rate, target)) in workload_rates(topo, ports[1])
        .into_iter()
        .zip(WORKLOAD_BPS)
        .enumerate()
    {
        assert_near(&format!("{link}: ifb-tbf workload {i}"), rate, target);
    }
    topo.remove_baselines().expect("remove ifb+tbf");
    // The IFBs are gone with the baselines.
    let links = topo.host.ip(&["-o", "link", "show"]).expect("links");
    assert!(!links.contains("ifb0"), "{links}");
}

#[test]
fn kernel_baselines_limit_what_they_claim_on_the_attach_topology() {
    let workloads = (WORKLOAD_BPS.len(), WorkloadLink::Bridge);
    let Some(mut topo) = attach_or_skip("mtr-tatk", workloads, "attach_kernel") else {
        return;
    };

    let unshaped = host_rate(&topo, 21_000);
    println!("no baseline: {:.2} Mbit/s", unshaped / 1e6);
    assert!(
        unshaped > 2.0 * TARGET_BPS as f64,
        "the path without a baseline carries only {:.2} Mbit/s",
        unshaped / 1e6
    );

    topo.install_uplink_qdisc(&QdiscSpec::Htb {
        rate_bps: TARGET_BPS,
        burst_bytes: None,
    })
    .expect("htb on the uplink");
    assert_near("htb root", host_rate(&topo, 21_010), TARGET_BPS);
    topo.remove_baselines().expect("remove htb");

    topo.install_uplink_qdisc(&QdiscSpec::tbf(TARGET_BPS))
        .expect("tbf on the uplink");
    assert_near("tbf root", host_rate(&topo, 21_020), TARGET_BPS);
    topo.remove_baselines().expect("remove tbf");

    check_per_workload_baselines(&mut topo, [21_100, 21_200]);

    let names: Vec<String> = topo
        .namespaces()
        .iter()
        .map(|n| n.name().to_owned())
        .collect();
    topo.remove().expect("remove the topology");
    for n in names {
        assert!(!metronome_testbed::netns::namespace_exists(&n), "{n} left");
    }
}

#[test]
fn per_workload_baselines_hold_with_routed_workloads() {
    let workloads = (WORKLOAD_BPS.len(), WorkloadLink::Routed);
    let test = "attach_kernel routed";
    let Some(mut topo) = attach_or_skip("mtr-tatr", workloads, test) else {
        return;
    };
    // No bridge: the workloads reach the receiver through their own veths.
    let links = topo.host.ip(&["-o", "link", "show"]).expect("links");
    assert!(!links.contains(&topo.bridge), "{links}");
    check_per_workload_baselines(&mut topo, [21_300, 21_400]);
}
