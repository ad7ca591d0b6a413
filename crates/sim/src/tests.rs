//! Whole-system tests: deterministic simulation runs as ordinary `cargo test`s
//! (CONTRIBUTING.md §14), each asserting on what Carousel §7.1 and zD §6 measure. Durations are
//! short (a few hundred simulated milliseconds at 1 Gbit/s) so the suite stays fast in debug
//! builds.

use crate::*;

/// A short 1 Gbit/s run with 100 ms of warm-up and 25 ms windows.
pub(crate) fn base(flows: u32) -> Scenario {
    Scenario {
        flows,
        duration_ns: 300_000_000,
        warmup_ns: 100_000_000,
        window_ns: 25_000_000,
        line_rate_bps: 1_000_000_000,
        ..Scenario::default()
    }
}

fn wheel(aggregate_bps: Option<u64>, capacity_packets: u32) -> ShaperSpec {
    ShaperSpec::TimingWheel {
        granularity_ns: 2_000,
        horizon_ns: 1_000_000_000,
        aggregate_bps,
        per_flow_bps: None,
        capacity_packets,
    }
}

pub(crate) fn run_ok(s: &Scenario) -> SimReport {
    match run(s) {
        Ok(r) => r,
        Err(e) => panic!("scenario rejected: {e}"),
    }
}

/// The aggregate within 2 % of 200 Mbit/s and the flows' shares fair (Jain's index above 0.99).
pub(crate) fn assert_200_mbit_fairly_shared(t: &ThroughputReport) {
    assert!(
        (t.aggregate_bps - 200e6).abs() / 200e6 < 0.02,
        "{}",
        t.aggregate_bps
    );
    assert!(t.jain_fairness > 0.99, "{}", t.jain_fairness);
}

/// Rate conformance at 500 Mbit/s: the windows' deviation below 1 %, the aggregate within 1 %
/// of 500 Mbit/s and the flows' shares fair (Jain's index above 0.95).
pub(crate) fn assert_500_mbit_conforms(t: &ThroughputReport) {
    assert!(t.deviation_pct < 1.0, "deviation {}%", t.deviation_pct);
    assert!(
        (t.aggregate_bps - 500e6).abs() / 500e6 < 0.01,
        "{}",
        t.aggregate_bps
    );
    assert!(t.jain_fairness > 0.95, "fairness {}", t.jain_fairness);
}

#[test]
fn same_seed_same_report_and_seeds_matter() {
    let s = Scenario {
        start_spread_ns: 5_000_000,
        shaper: wheel(Some(500_000_000), 70_000),
        backpressure: BackpressureMode::None,
        source: SourceKind::Tcp(CongestionControl::Reno),
        ..base(8)
    };
    let a = run_ok(&s);
    let b = run_ok(&s);
    assert_eq!(a.deterministic(), b.deterministic());
    let ja = serde_json::to_string(&a.deterministic()).unwrap_or_default();
    let jb = serde_json::to_string(&b.deterministic()).unwrap_or_default();
    assert_eq!(ja, jb, "byte-identical reports");
    let c = run_ok(&Scenario { seed: 2, ..s });
    assert_ne!(a.deterministic(), c.deterministic());
}

/// Slow start overshoots a 1000-packet pfifo and NewReno (no SACK) repairs one hole per RTT, so
/// the measurement starts after that recovery.
#[test]
fn single_reno_flow_fills_an_unshaped_nic() {
    let r = run_ok(&Scenario {
        source: SourceKind::Tcp(CongestionControl::Reno),
        shaper: ShaperSpec::Pfifo { capacity: 1000 },
        backpressure: BackpressureMode::None,
        duration_ns: 450_000_000,
        warmup_ns: 150_000_000,
        ..base(1)
    });
    let util = r.throughput.aggregate_bps / 1e9;
    assert!(util > 0.9, "utilization {util}");
}

#[test]
fn single_cubic_flow_with_tso_and_tsq_fills_the_nic() {
    let mut s = Scenario {
        shaper: ShaperSpec::Pfifo { capacity: 1000 },
        backpressure: BackpressureMode::Tsq { limit: 2 },
        ..base(1)
    };
    s.transport.tso_segments = 4;
    s.transport.delayed_ack = true;
    let r = run_ok(&s);
    assert!(
        r.throughput.aggregate_bps > 0.9e9,
        "{}",
        r.throughput.aggregate_bps
    );
    assert_eq!(r.drops.physical, 0);
}

#[test]
fn timing_wheel_aggregate_limit_conforms() {
    let r = run_ok(&Scenario {
        shaper: wheel(Some(500_000_000), 70_000),
        backpressure: BackpressureMode::DeferredCompletions { limit: 2 },
        ..base(10)
    });
    assert_500_mbit_conforms(&r.throughput);
}

#[test]
fn deferred_completions_hold_about_two_packets_per_flow() {
    let flows = 20;
    let r = run_ok(&Scenario {
        shaper: wheel(Some(500_000_000), 70_000),
        backpressure: BackpressureMode::DeferredCompletions { limit: 2 },
        ..base(flows)
    });
    let held = r.shaper.held;
    assert!(held.samples > 1000);
    assert!(
        held.p99 as f64 <= 2.2 * flows as f64,
        "p99 held {}",
        held.p99
    );
    assert!(held.max <= 2 * u64::from(flows), "max held {}", held.max);
    assert_eq!(r.drops.physical, 0);
}

#[test]
fn no_backpressure_fills_the_shaper_to_its_cap() {
    let cap = 500;
    // Measure from the start: Carousel Figure 15's "flows continually send until all of the
    // memory in the shaper is filled" happens in slow start.
    let r = run_ok(&Scenario {
        shaper: wheel(Some(200_000_000), cap),
        backpressure: BackpressureMode::None,
        warmup_ns: 1_000_000,
        ..base(20)
    });
    assert!(
        r.shaper.held.max + 1 >= u64::from(cap),
        "max {}",
        r.shaper.held.max
    );
    assert!(r.drops.physical > 0);
    assert!(r.drops.retransmissions > 0);
}

/// zD §6.2's comparison at small scale: many flows through a small pfifo. TSQ keeps two packets
/// per flow below each socket, which overflows the buffer: flows that start into a full pfifo
/// lose their whole initial window and wait for an RTO (1 s before any RTT sample), so some
/// flows starve. zD pauses flows instead: no drop, no retransmission, fair shares (zD Table 1).
#[test]
fn tsq_with_a_small_pfifo_drops_and_zd_does_not() {
    let flows = 200;
    let s = Scenario {
        shaper: ShaperSpec::Pfifo { capacity: 100 },
        backpressure: BackpressureMode::Tsq { limit: 2 },
        start_spread_ns: 10_000_000,
        duration_ns: 1_500_000_000,
        ..base(flows)
    };
    let tsq = run_ok(&s);
    assert!(tsq.drops.physical > 0, "TSQ + pfifo should overflow");
    assert!(tsq.drops.retransmissions > 0 && tsq.drops.timeouts > 0);
    for discipline in [ZdDiscipline::Fifo, ZdDiscipline::EdtOrdered] {
        let zd = run_ok(&Scenario {
            backpressure: BackpressureMode::Zd { discipline },
            ..s.clone()
        });
        assert_eq!(zd.drops.physical, 0, "{discipline:?}");
        assert_eq!(zd.drops.retransmissions, 0, "{discipline:?}");
        assert!(zd.drops.virtual_drops > 0);
        assert!(zd.shaper.held.max <= 100);
        assert!(
            zd.throughput.aggregate_bps > 0.9e9,
            "{}",
            zd.throughput.aggregate_bps
        );
        assert!(zd.drops.timeouts == 0);
        assert!(
            zd.throughput.jain_fairness > tsq.throughput.jain_fairness,
            "{} vs {}",
            zd.throughput.jain_fairness,
            tsq.throughput.jain_fairness
        );
    }
}

#[test]
fn zd_over_a_rate_limited_wheel_conforms_without_drops() {
    let r = run_ok(&Scenario {
        shaper: wheel(Some(500_000_000), 64),
        backpressure: BackpressureMode::Zd {
            discipline: ZdDiscipline::EdtOrdered,
        },
        ..base(100)
    });
    assert_eq!(r.drops.physical, 0);
    assert!(
        r.throughput.deviation_pct < 1.0,
        "{}",
        r.throughput.deviation_pct
    );
}

#[test]
fn vegas_keeps_queueing_delay_bounded() {
    let vegas = SourceKind::Tcp(CongestionControl::Vegas { alpha: 2, beta: 4 });
    let s = Scenario {
        source: vegas,
        shaper: wheel(Some(500_000_000), 70_000),
        backpressure: BackpressureMode::DelayBased,
        ..base(10)
    };
    let v = run_ok(&s);
    // Ten flows keeping 2-4 packets each queued: tens of packets at 24 us each, under 5 ms.
    assert!(
        v.queueing_delay.p99_ns < 5_000_000,
        "p99 {} ns",
        v.queueing_delay.p99_ns
    );
    assert!(
        v.throughput.aggregate_bps > 0.95 * 500e6,
        "{}",
        v.throughput.aggregate_bps
    );
    let cubic = run_ok(&Scenario {
        source: SourceKind::Tcp(CongestionControl::Cubic),
        backpressure: BackpressureMode::None,
        ..s
    });
    assert!(cubic.queueing_delay.p99_ns > 4 * v.queueing_delay.p99_ns);
}

#[test]
fn per_flow_pacing_in_the_wheel_the_fq_tree_and_the_transport() {
    let paced = |shaper, pacing_bps| {
        let mut s = Scenario {
            shaper,
            backpressure: BackpressureMode::DeferredCompletions { limit: 2 },
            ..base(4)
        };
        s.transport.pacing_bps = pacing_bps;
        run_ok(&s).throughput
    };
    let wheel_paced = ShaperSpec::TimingWheel {
        granularity_ns: 2_000,
        horizon_ns: 1_000_000_000,
        aggregate_bps: None,
        per_flow_bps: Some(50_000_000),
        capacity_packets: 1_000,
    };
    let fq_paced = ShaperSpec::FqTree {
        aggregate_bps: Some(1_000_000_000),
        per_flow_bps: Some(50_000_000),
        capacity_packets: 1_000,
    };
    for t in [
        paced(wheel_paced, None),
        paced(fq_paced, None),
        paced(wheel(None, 1_000), Some(50_000_000)),
    ] {
        assert_200_mbit_fairly_shared(&t);
    }
}

#[test]
fn ecn_marks_reduce_the_window() {
    let r = run_ok(&Scenario {
        shaper: wheel(Some(200_000_000), 70_000),
        backpressure: BackpressureMode::None,
        ecn_threshold_packets: Some(50),
        ..base(4)
    });
    assert!(r.drops.ce_marked > 0);
    assert!(r.drops.ecn_reductions > 0);
    assert_eq!(r.drops.physical, 0);
    assert!(r.shaper.held.p99 < 200, "p99 held {}", r.shaper.held.p99);
}

#[test]
fn constant_rate_udp_gets_its_rate() {
    let r = run_ok(&Scenario {
        source: SourceKind::Udp {
            rate_bps: Some(100_000_000),
        },
        shaper: ShaperSpec::Pfifo { capacity: 1000 },
        backpressure: BackpressureMode::None,
        ..base(3)
    });
    let got = r.throughput.aggregate_bps;
    assert!((got - 300e6).abs() / 300e6 < 0.02, "{got}");
}

#[test]
fn htb_like_bucket_and_tbf_shape_to_their_rate() {
    for shaper in [
        ShaperSpec::TokenBucketRr {
            rate_bps: 200_000_000,
            // A burst of one timer period at the rate (250 KB per 10 ms): HTB's burst must cover
            // its timer, or the rate falls to burst / timer.
            burst_bytes: 250_000,
            timer_ns: 10_000_000,
            capacity_packets: 16_000,
        },
        ShaperSpec::Tbf {
            rate_bps: 200_000_000,
            burst_bytes: 3_000,
            capacity: 1_000,
        },
    ] {
        let r = run_ok(&Scenario {
            shaper,
            backpressure: BackpressureMode::DeferredCompletions { limit: 2 },
            ..base(5)
        });
        let got = r.throughput.aggregate_bps;
        // Up to one burst (250 KB) above the rate over the 200 ms measured: 5%.
        assert!(got < 200e6 * 1.06 && got > 200e6 * 0.9, "{shaper:?}: {got}");
    }
}

#[test]
fn bad_parameters_are_errors_not_panics() {
    let bad = [
        Scenario {
            flows: 0,
            ..base(1)
        },
        Scenario {
            warmup_ns: 400_000_000,
            ..base(1)
        },
        Scenario {
            shaper: wheel(Some(0), 10),
            ..base(1)
        },
        Scenario {
            shaper: ShaperSpec::FqTree {
                aggregate_bps: None,
                per_flow_bps: None,
                capacity_packets: 10,
            },
            backpressure: BackpressureMode::Zd {
                discipline: ZdDiscipline::Fifo,
            },
            ..base(1)
        },
        Scenario {
            backpressure: BackpressureMode::DelayBased,
            ..base(1)
        },
        Scenario {
            window_ns: 250_000_000,
            ..base(1)
        },
        Scenario {
            backpressure: BackpressureMode::Tsq { limit: 70_000 },
            ..base(1)
        },
    ];
    let mut tso = base(1);
    tso.transport.tso_segments = 50;
    for s in bad.iter().chain([&tso]) {
        assert!(run(s).is_err(), "{s:?}");
    }
}

#[test]
fn scenarios_load_from_toml() {
    let text = r#"
        seed = 7
        flows = 3
        duration_ns = 50_000_000
        warmup_ns = 10_000_000
        window_ns = 10_000_000
        source = { tcp = "reno" }
        backpressure = { tsq = { limit = 2 } }
        shaper = { pfifo = { capacity = 100 } }
        [transport]
        tso_segments = 2
    "#;
    let s: Scenario = match toml::from_str(text) {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(s.flows, 3);
    assert_eq!(s.transport.tso_segments, 2);
    assert_eq!(s.transport.mtu, 1500, "unset fields keep their defaults");
    assert_eq!(s.backpressure, BackpressureMode::Tsq { limit: 2 });
    assert!(run_ok(&s).throughput.aggregate_bps > 0.5e9);
}

/// The delivery latency sees what the echoed RTT hides (zD Figure 12): TSQ over a small pfifo
/// loses whole initial windows, which wait for an RTO; their segments are delivered more than an
/// RTO after they were first sent, while every ACK's echoed RTT stays a queue plus a base RTT.
/// zD, which loses nothing, keeps both near the queueing delay.
#[test]
fn delivery_latency_shows_rto_stalls_that_the_echoed_rtt_hides() {
    let rto_min = crate::scenario::LINUX_RTO_MIN.as_nanos();
    let s = Scenario {
        shaper: ShaperSpec::Pfifo { capacity: 50 },
        backpressure: BackpressureMode::Tsq { limit: 2 },
        start_spread_ns: 10_000_000,
        duration_ns: 1_500_000_000,
        ..base(100)
    };
    let tsq = run_ok(&s);
    assert!(tsq.drops.timeouts > 0, "{:?}", tsq.drops);
    assert!(tsq.rtt.max_ns < rto_min, "{:?}", tsq.rtt);
    assert!(
        tsq.delivery_latency.max_ns > rto_min,
        "{:?}",
        tsq.delivery_latency
    );
    assert!(tsq.flow_delivery_latency.max_ns > rto_min);
    assert!(tsq.delivery_latency.samples > 0 && tsq.flow_delivery_latency.samples <= 100);
    let zd = run_ok(&Scenario {
        backpressure: BackpressureMode::Zd {
            discipline: ZdDiscipline::Fifo,
        },
        ..s
    });
    assert_eq!(zd.drops.retransmissions, 0);
    assert!(
        zd.delivery_latency.max_ns < 10_000_000,
        "{:?}",
        zd.delivery_latency
    );
    assert_eq!(
        zd.flow_delivery_latency.samples, 100,
        "every flow delivered"
    );
    assert!(zd.flow_delivery_latency.max_ns < 10_000_000);
}

/// The sparse flow alone beside a light UDP flow: each response comes back one base RTT plus
/// the request's serialization after the request; it adds to the aggregate but not to the bulk
/// flows' fairness; a bad request size is refused.
#[test]
fn probe_measures_request_to_response_latency() {
    let s = Scenario {
        source: SourceKind::Udp {
            rate_bps: Some(10_000_000),
        },
        shaper: wheel(Some(500_000_000), 1_000),
        probe: Some(ProbeSpec {
            request_bytes: 200,
            interval_ns: 1_000_000,
        }),
        ..base(1)
    };
    let r = run_ok(&s);
    // 200 measured ms, one request per ms.
    assert!((195..=201).contains(&r.probe_latency.samples), "{r:?}");
    assert_eq!(r.probe_lost, 0);
    let base_rtt = s.base_rtt_ns;
    // At most one bulk packet (12 µs at 1 Gbit/s) ahead of a request, plus its own 1.6 µs and
    // the wheel's 2 µs slot.
    assert!(r.probe_latency.p50_ns >= base_rtt, "{:?}", r.probe_latency);
    assert!(
        r.probe_latency.max_ns <= base_rtt + 20_000,
        "{:?}",
        r.probe_latency
    );
    assert_eq!(r.throughput.jain_fairness, 1.0, "one bulk flow");
    let bad = Scenario {
        probe: Some(ProbeSpec {
            request_bytes: 20,
            interval_ns: 1_000_000,
        }),
        ..s
    };
    assert!(matches!(
        run(&bad),
        Err(ScenarioError::OutOfRange {
            field: "probe.request_bytes",
            ..
        })
    ));
}
