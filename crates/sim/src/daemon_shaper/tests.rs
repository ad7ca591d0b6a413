//! The daemon's engine as the simulator's shaper: same releases as the simulator's own timing
//! wheel on the same offers, rate conformance, and its backpressure in closed loop
//! (CONTRIBUTING.md §14).

use crate::run;
use crate::scenario::{
    BackpressureMode, CongestionControl, DaemonBackpressure, Scenario, ShaperSpec, SourceKind,
};
use crate::shaper::{Shaper, Verdict};
use crate::tests::{assert_200_mbit_fairly_shared, assert_500_mbit_conforms, run_ok};
use metronome_core::{ClassId, Duration, FlowId, PacketRef, Timestamp};

fn daemon(aggregate_bps: Option<u64>, per_flow_bps: Option<u64>, cap: u32) -> ShaperSpec {
    ShaperSpec::Daemon {
        granularity_ns: 2_000,
        horizon_ns: 1_000_000_000,
        aggregate_bps,
        per_flow_bps,
        capacity_packets: cap,
        backpressure: DaemonBackpressure::None,
        reject_beyond_horizon: false,
        fair: false,
    }
}

fn own_wheel(aggregate_bps: Option<u64>, per_flow_bps: Option<u64>, cap: u32) -> ShaperSpec {
    ShaperSpec::TimingWheel {
        granularity_ns: 2_000,
        horizon_ns: 1_000_000_000,
        aggregate_bps,
        per_flow_bps,
        capacity_packets: cap,
    }
}

/// The whole-system tests' short 1 Gbit/s run through `shaper`.
fn base(flows: u32, shaper: ShaperSpec) -> Scenario {
    Scenario {
        shaper,
        ..crate::tests::base(flows)
    }
}

/// Offers the same packets to `spec`'s shaper: every 3 µs one packet of flow `i % flows` (sizes
/// varying), and a NIC that takes a due packet every 10 µs. Returns `(release time, id)` of every
/// packet and the verdicts of the offers.
fn releases(spec: &ShaperSpec, flows: u32) -> (Vec<(Timestamp, u32)>, Vec<Verdict>) {
    let mut shaper = Shaper::new(spec, flows, 1500, None, false).expect("valid spec");
    let mut out = Vec::new();
    let mut verdicts = Vec::new();
    let mut resumed = Vec::new();
    let step = Duration::from_nanos(1_000);
    let mut now = Timestamp::ZERO;
    let mut offered = 0u32;
    while offered < 3_000 || !shaper.is_empty() {
        let t = now.as_nanos();
        if offered < 3_000 && t.is_multiple_of(3_000) {
            let len = 200 + (offered * 397) % 1_301;
            let pkt = PacketRef::new(offered, FlowId(offered % flows), ClassId(0), len as u16);
            verdicts.push(shaper.offer(now, pkt));
            offered += 1;
        }
        if t.is_multiple_of(10_000) && shaper.next_due().is_some_and(|d| d <= now) {
            if let Some((pkt, ce)) = shaper.dequeue_one(now, &mut resumed) {
                assert!(!ce);
                out.push((now, pkt.id));
            }
        }
        now += step;
        assert!(t < 10_000_000_000, "never drained");
    }
    if let Some(engine) = shaper.daemon_engine() {
        engine.invariants();
        assert_eq!(engine.counters().released, out.len() as u64);
    }
    (out, verdicts)
}

/// Both stamp with `PolicyStack` over one `Timestamper` (the aggregate, then the flow's pacing,
/// burst one 1500-byte segment) into a 2 µs wheel: the same packets leave at the same instants,
/// in the same order, and the full shaper refuses the same ones.
#[test]
fn the_engine_releases_what_the_own_wheel_releases_when_it_does() {
    for (agg, per_flow, cap) in [
        (Some(300_000_000), None, 10_000),
        (None, Some(50_000_000), 10_000),
        (Some(400_000_000), Some(100_000_000), 10_000),
        (Some(200_000_000), None, 100),
    ] {
        let (a, va) = releases(&own_wheel(agg, per_flow, cap), 7);
        let (b, vb) = releases(&daemon(agg, per_flow, cap), 7);
        assert_eq!(va, vb, "verdicts, {agg:?} {per_flow:?} {cap}");
        assert_eq!(a, b, "releases, {agg:?} {per_flow:?} {cap}");
        assert!(a.len() > 100);
        if cap == 100 {
            assert!(
                va.contains(&Verdict::Dropped),
                "a small shaper must overflow"
            );
        }
    }
}

#[test]
fn the_engine_shaper_conforms_to_its_aggregate_rate() {
    let r = run_ok(&Scenario {
        backpressure: BackpressureMode::DeferredCompletions { limit: 2 },
        ..base(10, daemon(Some(500_000_000), None, 70_000))
    });
    assert_500_mbit_conforms(&r.throughput);
    assert_eq!(r.shaper.name, "daemon_engine");
}

/// In closed loop, too, the engine and the simulator's own wheel give the same run.
#[test]
fn a_closed_loop_run_is_the_same_through_the_engine_and_the_own_wheel() {
    for bp in [
        BackpressureMode::DeferredCompletions { limit: 2 },
        BackpressureMode::None,
    ] {
        let a = run_ok(&Scenario {
            backpressure: bp,
            ..base(8, own_wheel(Some(300_000_000), None, 500))
        });
        let b = run_ok(&Scenario {
            backpressure: bp,
            ..base(8, daemon(Some(300_000_000), None, 500))
        });
        assert_eq!(a.throughput, b.throughput, "{bp:?}");
        assert_eq!(a.drops, b.drops, "{bp:?}");
        assert_eq!(a.shaper.held, b.shaper.held, "{bp:?}");
    }
}

#[test]
fn the_engine_paces_each_flow() {
    let r = run_ok(&Scenario {
        backpressure: BackpressureMode::DeferredCompletions { limit: 2 },
        ..base(4, daemon(None, Some(50_000_000), 1_000))
    });
    assert_200_mbit_fairly_shared(&r.throughput);
}

/// DCTCP's ECT(0) frames above the engine's 1 ms delay threshold are marked CE by the daemon's
/// code; the marks reach the receiver and cut the windows, so nothing overflows.
#[test]
fn the_engines_ecn_backpressure_marks_and_dctcp_backs_off() {
    let mut spec = daemon(Some(200_000_000), None, 70_000);
    if let ShaperSpec::Daemon { backpressure, .. } = &mut spec {
        *backpressure = DaemonBackpressure::Ecn {
            threshold_ns: 1_000_000,
        };
    }
    let r = run_ok(&Scenario {
        source: SourceKind::Tcp(CongestionControl::Dctcp),
        backpressure: BackpressureMode::None,
        ..base(4, spec)
    });
    assert!(r.drops.ce_marked > 0);
    assert!(r.drops.ecn_reductions > 0);
    assert_eq!(r.drops.physical, 0);
    // 1 ms at 200 Mbit/s is about 17 packets; DCTCP keeps the shaper near that.
    assert!(r.shaper.held.p99 < 200, "p99 held {}", r.shaper.held.p99);
    // Cubic sends not-ECT frames: never marked, so the shaper fills.
    let mut cubic_spec = spec;
    if let ShaperSpec::Daemon {
        capacity_packets, ..
    } = &mut cubic_spec
    {
        *capacity_packets = 500;
    }
    let c = run_ok(&Scenario {
        backpressure: BackpressureMode::None,
        ..base(4, cubic_spec)
    });
    assert_eq!(c.drops.ce_marked, 0);
    assert!(c.drops.physical > 0);
}

/// The engine's per-flow drop limit: a flow over 5 queued packets loses the excess.
#[test]
fn the_engines_drop_backpressure_bounds_each_flow() {
    let mut spec = daemon(Some(200_000_000), None, 70_000);
    if let ShaperSpec::Daemon { backpressure, .. } = &mut spec {
        *backpressure = DaemonBackpressure::Drop { limit: 5 };
    }
    let flows = 4;
    let r = run_ok(&Scenario {
        backpressure: BackpressureMode::None,
        warmup_ns: 1_000_000,
        ..base(flows, spec)
    });
    assert!(r.drops.physical > 0);
    assert!(r.drops.retransmissions > 0);
    assert!(
        r.shaper.held.max <= 5 * u64::from(flows),
        "{:?}",
        r.shaper.held
    );
}

#[test]
fn engine_specs_it_cannot_run_are_errors() {
    let bad = [
        daemon(None, None, 100),
        daemon(Some(1), None, 0),
        ShaperSpec::Daemon {
            granularity_ns: 2_000_000,
            horizon_ns: 1_000,
            aggregate_bps: Some(1_000_000),
            per_flow_bps: None,
            capacity_packets: 10,
            backpressure: DaemonBackpressure::None,
            reject_beyond_horizon: false,
            fair: false,
        },
    ];
    for spec in bad {
        let s = base(2, spec);
        assert!(run(&s).is_err(), "{spec:?}");
    }
    let zd = Scenario {
        backpressure: BackpressureMode::Zd {
            discipline: Default::default(),
        },
        ..base(2, daemon(Some(1_000_000), None, 10))
    };
    assert!(run(&zd).is_err());
}

/// At 12 Mbit/s a 1500-byte packet takes 1 ms: with a 5 ms horizon, the engine clamps the
/// packets beyond it to the last slot, or drops them under `reject_beyond_horizon`.
#[test]
fn the_engine_clamps_or_rejects_beyond_its_horizon() {
    let verdicts = |reject: bool| {
        let spec = ShaperSpec::Daemon {
            granularity_ns: 100_000,
            horizon_ns: 5_000_000,
            aggregate_bps: Some(12_000_000),
            per_flow_bps: None,
            capacity_packets: 100,
            backpressure: DaemonBackpressure::None,
            reject_beyond_horizon: reject,
            fair: false,
        };
        let mut shaper = Shaper::new(&spec, 1, 1500, None, false).expect("valid spec");
        let v: Vec<Verdict> = (0..10)
            .map(|i| {
                let pkt = PacketRef::new(i, FlowId(0), ClassId(0), 1500);
                shaper.offer(Timestamp::ZERO, pkt)
            })
            .collect();
        shaper.daemon_engine().expect("engine").invariants();
        v
    };
    assert!(verdicts(false).iter().all(|v| *v == Verdict::Enqueued));
    let rejected = verdicts(true);
    assert_eq!(rejected[0], Verdict::Enqueued);
    assert_eq!(rejected[9], Verdict::Dropped);
}

/// The class in the fair mode (`fair = true`): every offered packet is queued and released once
/// (none lost, the engine's accounting holds), and the released bytes never run ahead of the
/// aggregate rate by more than one segment, while the backlog keeps the class busy at that rate.
#[test]
fn the_fair_class_releases_every_packet_at_its_aggregate_rate() {
    let rate = 200_000_000u64;
    let ShaperSpec::Daemon {
        granularity_ns,
        horizon_ns,
        capacity_packets,
        backpressure,
        reject_beyond_horizon,
        ..
    } = daemon(Some(rate), None, 10_000)
    else {
        unreachable!("daemon() builds a daemon spec")
    };
    let fair = ShaperSpec::Daemon {
        granularity_ns,
        horizon_ns,
        aggregate_bps: Some(rate),
        per_flow_bps: None,
        capacity_packets,
        backpressure,
        reject_beyond_horizon,
        fair: true,
    };
    let (out, verdicts) = releases(&fair, 7);
    assert!(
        verdicts.iter().all(|v| *v == Verdict::Enqueued),
        "all queued"
    );
    let mut ids: Vec<u32> = out.iter().map(|&(_, id)| id).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..3_000).collect::<Vec<u32>>(), "each released once");
    let len = |id: u32| u64::from(200 + (id * 397) % 1_301);
    let first = out[0].0;
    let mut bytes = 0u64;
    for &(t, id) in &out {
        // Bytes released before this packet fit in the rate since the first release, plus one
        // segment of burst and one 10 µs NIC poll.
        let allowed =
            (t.as_nanos() - first.as_nanos() + 10_000) as f64 * rate as f64 / 8e9 + 1_500.0;
        assert!(
            (bytes as f64) <= allowed,
            "{bytes} B by {t:?}, allowed {allowed}"
        );
        bytes += len(id);
    }
    // Offered at about 2 Gbit/s, so the class is backlogged: it drains at the aggregate rate.
    let span = (out[out.len() - 1].0.as_nanos() - first.as_nanos()) as f64;
    let achieved = (bytes - len(out[out.len() - 1].1)) as f64 * 8e9 / span;
    assert!(
        (achieved - rate as f64).abs() / (rate as f64) < 0.01,
        "{achieved}"
    );
}
