//! Deterministic incast runs at small scale (20 flows): ACK shaping holds the receiver's
//! aggregate at its target with an empty switch queue; the alternatives do not.

use super::*;

/// 4 machines x 5 flows into one receiver, 0.15 s, 50 ms warm-up, 8-MTU receive window (a
/// window the senders' congestion windows reach within the warm-up).
fn small(mode: IncastMode, target_bps: u64) -> IncastScenario {
    IncastScenario {
        senders: 4,
        flows_per_sender: 5,
        mode,
        target_bps,
        rwnd_mtus: 8,
        duration_ns: 150_000_000,
        warmup_ns: 50_000_000,
        window_ns: 10_000_000,
        ..IncastScenario::default()
    }
}

#[test]
fn ack_shaping_holds_the_aggregate_at_the_target() {
    for target in [500_000_000, 2_000_000_000] {
        let r = run_incast(&small(IncastMode::AckShaping, target)).unwrap();
        assert!(
            r.aggregate_deviation_pct < 1.0,
            "{target}: {} bit/s, {:.3} % off",
            r.throughput.aggregate_bps,
            r.aggregate_deviation_pct
        );
        assert_eq!(r.drops, 0);
        assert!(r.port_queue.p99 <= 4, "switch queue {:?}", r.port_queue);
        assert!(r.acks.rewritten > 0 && r.acks.generated > 0, "{:?}", r.acks);
        assert_eq!(r.acks.table_full, 0);
        assert!(r.held_at_receiver_max_bytes > 0, "nothing was held back");
    }
}

#[test]
fn without_a_limit_the_senders_take_the_line() {
    let r = run_incast(&small(IncastMode::Unshaped, 1_000_000_000)).unwrap();
    assert!(
        r.throughput.aggregate_bps > 9.0e9,
        "{}",
        r.throughput.aggregate_bps
    );
    assert_eq!(r.acks, AckReport::default());
}

#[test]
fn an_ingress_queue_holds_the_rate_by_queueing_data() {
    let q = run_incast(&small(IncastMode::IngressQueue, 1_000_000_000)).unwrap();
    let a = run_incast(&small(IncastMode::AckShaping, 1_000_000_000)).unwrap();
    assert!(
        q.aggregate_deviation_pct < 1.0,
        "{}",
        q.aggregate_deviation_pct
    );
    assert!(
        q.port_queue.p50 > 10 * a.port_queue.p99.max(1),
        "{:?} vs {:?}",
        q.port_queue,
        a.port_queue
    );
    assert!(q.queueing_delay.p50_ns > 10 * a.queueing_delay.p99_ns.max(1_000));
}

#[test]
fn same_scenario_same_report() {
    let sc = small(IncastMode::AckShaping, 1_000_000_000);
    assert_eq!(run_incast(&sc).unwrap(), run_incast(&sc).unwrap());
    let other = IncastScenario { seed: 2, ..sc };
    assert_ne!(
        run_incast(&sc).unwrap().events,
        run_incast(&other).unwrap().events
    );
}

#[test]
fn bad_scenarios_are_refused() {
    let sc = IncastScenario::default();
    for bad in [
        IncastScenario { senders: 0, ..sc },
        IncastScenario {
            target_bps: 0,
            ..sc
        },
        IncastScenario { mtu: 10, ..sc },
        IncastScenario { rwnd_mtus: 0, ..sc },
        IncastScenario {
            warmup_ns: sc.duration_ns,
            ..sc
        },
    ] {
        assert!(run_incast(&bad).is_err(), "{bad:?}");
    }
    assert_eq!(
        IncastMode::parse("ack-shaping"),
        Some(IncastMode::AckShaping)
    );
    assert_eq!(IncastMode::parse("nope"), None);
}
