//! Real kernel TCP through the daemon: a sender, shaper and receiver namespace, the daemon's loop
//! on AF_PACKET ports in the shaper, 4 TCP flows for 3 s into one class limited to 100 Mbit/s and
//! then 500 Mbit/s, with the host's default offloads (the sender's TSO/GSO super-frames reach the
//! daemon whole; it must receive some). Asserts the rate on the wire — the receiver's payload on
//! the receiver's veth with every full segment's headers (a veth counts a super-frame's headers
//! once, see `common::wire_of_payload`) — within 3 % of the target, and that every frame the daemon
//! received is accounted for: `rx = tx + named drops + queued`. Fails without CAP_NET_ADMIN (skips,
//! saying why, under METRONOME_SKIP_PRIVILEGED=1); the topology is removed on every path (its
//! `Drop`).

mod common;

use metronome_daemon::ops::config::Config;
use metronome_daemon::ops::metrics::Metrics;
use metronome_testbed::netns::Topology;
use metronome_testbed::trafficgen::{FlowGroup, TrafficPlan};
use std::time::Duration;

/// Traffic duration per rate.
const RUN: Duration = Duration::from_secs(3);
/// Skipped at the start (TCP slow start, the shaper's first burst).
const WARMUP: Duration = Duration::from_millis(500);
/// Skipped at the end (flows stopping one by one).
const COOLDOWN: Duration = Duration::from_millis(300);
/// Tolerance of the test: 3 %, loose enough for kernel TCP on a shared machine.
const TOLERANCE: f64 = 0.03;

fn config(rate: &str) -> Config {
    common::bulk_config("5201-5216", rate, "", "real_traffic.toml")
}

/// One run at `target_bps`; returns the achieved rate on the wire.
fn shaped_run(topo: &Topology, rate: &str, target_bps: f64, flows: usize) -> f64 {
    let plan = TrafficPlan::new(
        topo.receiver_addr,
        vec![FlowGroup::tcp("bulk", 5201, flows)],
        RUN,
    );
    let (report, samples, loop_report) =
        common::drive_shaped(topo, config(rate), Metrics::new(), plan);

    // The rate on the wire: the payload delivered with every full segment's headers
    // (`common::wire_of_payload`); the veth's own count (one set of headers per super-frame)
    // is printed.
    let veth = common::wire_bps(&samples, WARMUP, RUN.saturating_sub(COOLDOWN));
    let achieved = common::wire_of_payload(common::payload_bps(
        &samples,
        WARMUP,
        RUN.saturating_sub(COOLDOWN),
    ));
    let e = loop_report.engine;
    println!(
        "{rate}: achieved {:.2} Mbit/s on the wire (target {:.0}; the veth counted {:.2}), \
         goodput {:.2} Mbit/s; \
         received {} forwarded {} released {} dropped {} checksums fixed {} rx_oversize {} \
         ring drops {}",
        achieved / 1e6,
        target_bps / 1e6,
        veth / 1e6,
        report.groups[0].mean_bps() / 1e6,
        e.received,
        e.forwarded,
        e.released,
        e.dropped(),
        e.checksums_fixed,
        loop_report.inside.rx_oversize,
        loop_report.inside.rx_ring_drops,
    );
    println!(
        "{rate}: super-frames {} cut {} pieces sent {}; refused {:?}",
        e.superframes,
        loop_report.cuts.frames_cut,
        loop_report.cuts.pieces_sent,
        common::refused(&loop_report),
    );
    // Every frame the inside port delivered is sent, dropped under a name, or was queued.
    common::assert_every_frame_accounted(&loop_report, rate);
    // The sender's default offloads reached the daemon as super-frames.
    assert!(e.superframes > 0, "{rate}: no super-frame received: {e:?}");
    assert!(report.groups[0].bytes > 0);
    achieved
}

#[test]
fn kernel_tcp_through_the_daemon_holds_100_and_500_mbit() {
    let Some(topo) = common::topology("mtr-it", "real_traffic") else {
        return;
    };
    // The host's default offloads: the sender's TCP hands the shaper GSO super-frames.
    // Two attempts: on this shared 2-core machine a burst of load from another process can
    // starve the kernel TCP senders for part of one run (seen: -12 % while a benchmark ran).
    // Every attempt still asserts that each packet is accounted for; the rate must hold in at
    // least one of them.
    let failures = failed_rates(&topo, &[("100mbit", 100e6), ("500mbit", 500e6)], 4);
    topo.remove().unwrap();
    assert!(failures.is_empty(), "{failures:?}");
}

/// Runs [`shaped_run`] with `flows` flows at each of `rates` (`tc` spelling, bit/s) in up to two
/// attempts; returns the last attempt's failure of every rate that held in neither.
fn failed_rates(topo: &Topology, rates: &[(&str, f64)], flows: usize) -> Vec<String> {
    let mut failures = Vec::new();
    for &(rate, target) in rates {
        let label = format!("{rate}: ");
        let held = common::holds_in_two_attempts(&label, target, TOLERANCE, || {
            shaped_run(topo, rate, target, flows)
        });
        if let Err(last) = held {
            failures.push(last);
        }
    }
    failures
}

/// A measurement at higher rates, 8 flows at 2, 5 and 10 Gbit/s (run it fully optimised on an
/// idle machine: `cargo test --profile optimised -p metronome-testbed --test real_traffic --
/// --ignored --nocapture`). Asserts the accounting like the test above and the rate within the
/// same tolerance; ignored by default because a loaded 2-core machine cannot carry it.
#[test]
#[ignore]
fn kernel_tcp_through_the_daemon_at_2_5_and_10_gbit() {
    let Some(topo) = common::topology("mtr-hi", "real_traffic") else {
        return;
    };
    let failures = failed_rates(
        &topo,
        &[("2gbit", 2e9), ("5gbit", 5e9), ("10gbit", 10e9)],
        8,
    );
    topo.remove().unwrap();
    assert!(failures.is_empty(), "{failures:?}");
}
