//! Deterministic simulation tests of the switch-port scenario (small scale, ordinary `cargo test`).

use super::*;

const MS: u64 = 1_000_000;

/// The testbed port (1 Gbit/s, 250 µs, 96 KB, K = 32 KB, 4 DWRR queues) with long-lived flows.
fn long_lived(
    marking: MarkingSpec,
    flows_per_service: Vec<u32>,
    duration_ms: u64,
) -> SwitchScenario {
    SwitchScenario {
        marking,
        workload: Workload::LongLived {
            host_per_flow: flows_per_service.len() != 2,
            flows_per_service,
            start_spread_ns: MS,
        },
        duration_ns: duration_ms * MS,
        warmup_ns: duration_ms * MS / 4,
        ..SwitchScenario::default()
    }
}

fn poisson(marking: MarkingSpec, load: f64, flows: u32) -> SwitchScenario {
    SwitchScenario {
        marking,
        workload: Workload::Poisson {
            load,
            flows,
            services: 4,
            service_weights: Vec::new(),
            hosts: 8,
            cdf: None,
        },
        duration_ns: 2_000 * MS,
        ..SwitchScenario::default()
    }
}

/// Every packet sent is received, dropped with a reason, or still somewhere at the end; the
/// simulator's counts agree with the port's own counters.
fn conserved(r: &SwitchReport) {
    assert_eq!(r.ce_marked, r.port_marked);
    assert_eq!(r.buffer_drops, r.port_buffer_drops);
    assert_eq!(
        r.packets_sent,
        r.packets_received
            + r.buffer_drops
            + r.non_ect_drops
            + r.other_rejects
            + r.packets_in_flight_at_end,
        "{r:?}"
    );
}

#[test]
fn mq_ecn_shares_equally_between_one_and_four_flows() {
    let r = run(&long_lived(MarkingSpec::MqEcn, vec![1, 4], 400)).unwrap();
    conserved(&r);
    assert!(r.share_max_min_ratio < 1.1, "{:?}", r.service_goodput_bps);
    assert!(r.utilization > 0.95, "{}", r.utilization);
    assert!(r.ce_marked > 0);
    assert!(r.t_round_samples > 0);
}

#[test]
fn per_port_marking_favours_the_service_with_more_flows() {
    let r = run(&long_lived(MarkingSpec::PerPort, vec![1, 4], 400)).unwrap();
    conserved(&r);
    let g = &r.service_goodput_bps;
    assert!(
        g[1] > g[0] * 1.1,
        "per-port ECN over-marks the 1-flow queue: {g:?}"
    );
}

#[test]
fn standard_threshold_on_four_queues_queues_more_than_mq_ecn() {
    let flows = vec![2, 2, 2, 2];
    let std = run(&long_lived(
        MarkingSpec::PerQueueStandard,
        flows.clone(),
        300,
    ))
    .unwrap();
    let mq = run(&long_lived(MarkingSpec::MqEcn, flows, 300)).unwrap();
    conserved(&std);
    conserved(&mq);
    assert!(
        mq.avg_queue_bytes < 0.8 * std.avg_queue_bytes,
        "mq-ecn {} vs standard {}",
        mq.avg_queue_bytes,
        std.avg_queue_bytes
    );
    assert!(mq.rtt_p99_us < std.rtt_p99_us);
}

#[test]
fn minimum_threshold_underutilises_a_lone_queue_that_mq_ecn_fills() {
    // 8 queues: the minimum threshold is 32 KB / 8 = 4 KB, under three packets.
    let mut min = long_lived(MarkingSpec::PerQueueMin, vec![8], 300);
    min.queues = 8;
    let mut mq = min.clone();
    mq.marking = MarkingSpec::MqEcn;
    let (min, mq) = (run(&min).unwrap(), run(&mq).unwrap());
    assert!(mq.utilization > 0.98, "{}", mq.utilization);
    assert!(
        min.utilization + 0.005 < mq.utilization,
        "{} vs {}",
        min.utilization,
        mq.utilization
    );
}

#[test]
fn only_ect_packets_are_marked() {
    let mut sc = long_lived(MarkingSpec::PerQueueStandard, vec![2, 2], 200);
    sc.non_ecn_services = vec![1];
    let r = run(&sc).unwrap();
    conserved(&r);
    assert!(r.ce_marked > 0);
    assert_eq!(r.ce_on_non_ect, 0);
    assert!(
        r.non_ect_passes > 0,
        "the Reno service went over K unmarked"
    );
}

#[test]
fn poisson_flows_complete_and_are_deterministic() {
    let sc = poisson(MarkingSpec::MqEcn, 0.5, 150);
    let a = run(&sc).unwrap();
    let b = run(&sc).unwrap();
    conserved(&a);
    assert_eq!(a.unfinished_flows, 0, "{a:?}");
    assert_eq!(a.fct_all.flows, 150);
    assert!(a.fct_small.flows > 40, "{}", a.fct_small.flows);
    // A small flow takes at least one base RTT.
    assert!(a.fct_small.p50_us >= 250.0, "{}", a.fct_small.p50_us);
    let strip = |mut r: SwitchReport| {
        r.wall_ns = 0;
        r
    };
    assert_eq!(strip(a), strip(b));
}

#[test]
fn unbalanced_weights_steer_flows_to_services() {
    let mut sc = poisson(MarkingSpec::MqEcn, 0.3, 400);
    if let Workload::Poisson {
        service_weights, ..
    } = &mut sc.workload
    {
        *service_weights = vec![0.0, 0.0, 1.0, 3.0];
    }
    let r = run(&sc).unwrap();
    conserved(&r);
    let g = &r.service_goodput_bps;
    assert_eq!((g[0], g[1]), (0.0, 0.0), "{g:?}");
    assert!(g[3] > 1.5 * g[2], "{g:?}");
    if let Workload::Poisson {
        service_weights, ..
    } = &mut sc.workload
    {
        *service_weights = vec![1.0, 2.0];
    }
    assert!(run(&sc).is_err(), "one weight per service");
}

#[test]
fn bad_scenarios_are_refused() {
    let sc = SwitchScenario {
        queues: 1,
        ..SwitchScenario::default()
    };
    assert!(run(&sc).is_err(), "two services on one queue");
    let mut sc = poisson(MarkingSpec::MqEcn, 1.5, 10);
    assert!(run(&sc).is_err());
    sc = poisson(MarkingSpec::MqEcn, 0.5, 10);
    sc.base_rtt_ns = 1_000;
    assert!(run(&sc).is_err());
}

#[test]
fn small_flow_timeouts_are_counted_and_set_the_tail() {
    let sc = poisson(MarkingSpec::PerQueueStandard, 0.8, 400);
    let r = run(&sc).unwrap();
    conserved(&r);
    let small = r.fct_small.flows;
    // Four queues of 32 KB in a 96 KB buffer at 80 % load: over 1 % of small flows time out.
    assert!(r.small_flows_timed_out * 100 > small, "{r:?}");
    assert!(r.small_flows_timed_out <= small.min(r.timeouts));
    assert!(r.fct_small_p99_no_timeout_us > 0.0);
    // A timed-out flow took at least RTO_min; with more than 1 % of them, so does the p99.
    let rto_min_us = sc.rto_min_ns as f64 / 1e3;
    assert!(r.fct_small.p99_us >= rto_min_us, "{r:?}");
    // Without timeouts the small-flow p99 stays below RTO_min plus a few base RTTs of queueing.
    let mut sc = sc;
    sc.rto_min_ns = 1_000 * MS;
    let r = run(&sc).unwrap();
    assert!(r.fct_small_p99_no_timeout_us < rto_min_us);
}

/// Four services of equal weight with 1, 2, 4 and 8 DCTCP flows through `port` (the core's or
/// the daemon's link) under `marking`.
fn four_services(marking: MarkingSpec, daemon: bool) -> SwitchReport {
    let sc = SwitchScenario {
        daemon,
        ..long_lived(marking, vec![1, 2, 4, 8], 400)
    };
    let r = run(&sc).unwrap();
    conserved(&r);
    r
}

#[test]
fn the_daemons_link_shares_equally_and_mq_ecn_keeps_its_queue_30_percent_below_per_queue() {
    let mq = four_services(MarkingSpec::MqEcn, true);
    let std = four_services(MarkingSpec::PerQueueStandard, true);
    for r in [&mq, &std] {
        let total: f64 = r.service_goodput_bps.iter().sum();
        for (s, g) in r.service_goodput_bps.iter().enumerate() {
            let share = g / total;
            assert!(
                (share - 0.25).abs() < 0.02,
                "service {s}: share {share:.4} ({r:?})"
            );
        }
        assert!(r.utilization > 0.95, "{r:?}");
    }
    assert!(
        mq.avg_queue_bytes <= 0.7 * std.avg_queue_bytes,
        "MQ-ECN {} bytes against per-queue {} bytes",
        mq.avg_queue_bytes,
        std.avg_queue_bytes
    );
    // The core's port, same scenario: the daemon's link behaves like it.
    let core = four_services(MarkingSpec::MqEcn, false);
    let ratio = mq.avg_queue_bytes / core.avg_queue_bytes;
    assert!(
        (0.5..2.0).contains(&ratio),
        "daemon {} core {}",
        mq.avg_queue_bytes,
        core.avg_queue_bytes
    );
}
