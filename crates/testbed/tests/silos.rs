//! Real kernel TCP through two shaper silos (Carousel §5.3): a sender, shaper and
//! receiver namespace, `[daemon] cores = 2` (two AF_PACKET fanout-hashed socket pairs, two
//! engines, the NIC-level bandwidth allocator splitting one class's 200 Mbit/s between them), 16
//! TCP connections for 3 s with the host's default offloads.
//!
//! Asserts what the silos are about: that both silos carried shaped traffic, that every frame each
//! silo received is accounted for (`rx = tx + named drops + queued`), that the allocator's per-silo
//! rates are in the metrics and sum to the limit, and that the aggregate on the wire (the
//! receiver's payload on the receiver's veth with every full segment's headers) is within `OVER`
//! above and `UNDER` below 200 Mbit/s, in one attempt. The bounds are asymmetric because the errors
//! are: load from other processes on this 2-core machine (two silos pinned to both cores while the
//! namespaces' kernel TCP shares them) starves the senders and can only lower the rate, never make
//! the shaper release more. Accuracy figures belong to `metronome compare` and the benchmarks.
//! Fails without CAP_NET_ADMIN (skips, saying why, under METRONOME_SKIP_PRIVILEGED=1); the topology
//! (its own `mtr-sl` names) is removed on every path, panics included (its `Drop`).
mod common;

use metronome_daemon::driver::run::Control;
use metronome_daemon::driver::silo::run_silos;
use metronome_daemon::ops::config::Config;
use metronome_daemon::ops::metrics::Metrics;
use metronome_testbed::netns::Topology;
use metronome_testbed::shaper::spawn_daemon;
use metronome_testbed::trafficgen::{FlowGroup, TrafficPlan};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Traffic duration.
const RUN: Duration = Duration::from_secs(3);
/// Skipped at the start (TCP slow start, the allocator's first periods).
const WARMUP: Duration = Duration::from_millis(500);
/// Skipped at the end (flows stopping one by one).
const COOLDOWN: Duration = Duration::from_millis(300);
/// How far above the limit the wire may be: 3 %. Measured (`cargo test -p metronome-testbed
/// --test silos -- --nocapture`, 9 runs with a load average of 7 to 9 from other builds):
/// -3.06 % to +0.02 %; the idle machine -0.38 %; no run was ever above +0.02 %. Above 3 % a
/// limit broke (for example each silo shaping at the whole rate, +100 %).
const OVER: f64 = 0.03;
/// How far below the limit the wire may be: 15 %. The measured spread below is load: the same
/// 9 runs -0.46 % to -3.06 %, and first attempts in CI runs under heavier load -3.29 %, -6.15 %,
/// -6.99 % and -8.65 % (their second attempts -1.03 % and -1.49 %). 15 % is 1.7 times the worst
/// seen; a silo left without traffic or without a rate share costs about half the aggregate
/// (-50 %), and fails.
const UNDER: f64 = 0.15;
/// The class's aggregate limit, bit/s.
const TARGET_BPS: f64 = 200e6;
/// TCP connections: with 16 the kernel's flow hash leaves a silo empty with probability 2^-15.
const FLOWS: usize = 16;

fn config() -> Config {
    common::bulk_config("5201", "200mbit", "\n[daemon]\ncores = 2", "silos.toml")
}

/// The sum of `metronome_nba_rate_bps{class="bulk",silo=...}` and how many silos have one.
fn nba_rates(metrics: &Metrics) -> (f64, usize) {
    let text = metrics.encode();
    let values: Vec<f64> = text
        .lines()
        .filter(|l| l.starts_with("metronome_nba_rate_bps{class=\"bulk\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    (values.iter().sum(), values.len())
}

/// One run; returns the achieved rate on the wire.
fn shaped_run(topo: &Topology) -> f64 {
    let metrics = Metrics::with_silos(2);
    let control = Control::default();
    let silos = spawn_daemon(
        &topo.shaper,
        config(),
        metrics.clone(),
        control.clone(),
        run_silos,
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(100)); // ports open, rings mapped
    let plan = TrafficPlan::new(
        topo.receiver_addr,
        vec![FlowGroup::tcp("bulk", 5201, FLOWS)],
        RUN,
    );
    let (report, samples) = common::drive(topo, plan);
    let (rate_sum, rate_silos) = nba_rates(&metrics);
    control.stop.store(true, Ordering::Relaxed);
    let reports = silos.join().unwrap().unwrap().unwrap();

    // The rate on the wire: payload on the receiver's veth with every full segment's headers (a
    // veth counts a super-frame's headers once, `common::wire_of_payload`); the veth's count is
    // printed.
    let veth = common::wire_bps(&samples, WARMUP, RUN.saturating_sub(COOLDOWN));
    println!("the receiver's veth counted {:.2} Mbit/s", veth / 1e6);
    let achieved = common::wire_of_payload(common::payload_bps(
        &samples,
        WARMUP,
        RUN.saturating_sub(COOLDOWN),
    ));
    println!(
        "achieved {:.2} Mbit/s on the wire (target {:.0}), goodput {:.2} Mbit/s; allocator rates \
         sum {:.2} Mbit/s over {rate_silos} silos",
        achieved / 1e6,
        TARGET_BPS / 1e6,
        report.groups[0].mean_bps() / 1e6,
        rate_sum / 1e6,
    );
    assert_eq!(reports.len(), 2);
    for (silo, r) in reports.iter().enumerate() {
        let (l, e) = (&r.report, &r.report.engine);
        println!(
            "silo {silo} (cpu {:?}): received {} forwarded {} released {} dropped {} passed back \
             {} ring drops {} refused rates {}",
            r.pinned,
            e.received,
            e.forwarded,
            e.released,
            e.dropped(),
            l.passed_back,
            l.inside.rx_ring_drops + l.outside.rx_ring_drops,
            r.refused_rates,
        );
        // Both silos carried shaped traffic: the kernel's hash spread the flows.
        assert!(e.released > 100, "silo {silo} shaped nothing: {e:?}");
        assert_eq!(r.refused_rates, 0);
        // Every frame the silo's inside port delivered is sent, dropped under a name, or was
        // queued; nothing is lost silently.
        common::assert_every_frame_accounted(l, &format!("silo {silo}"));
        assert_eq!(l.outside.rx_packets, l.passed_back);
    }
    // The allocator's shares are in the metrics, one per silo, and add up to the limit. Each
    // silo sets its own gauge when it picks a new share up (at its next loop pass), so when the
    // loops stop, one silo may show the newest period's share and the other the previous one:
    // the sum is the limit only within what one update moves (the allocator's exact sum is a
    // property test of `metronome_core::nba`). Seen: 199.80 Mbit/s for 200.
    assert_eq!(rate_silos, 2);
    assert!(
        (rate_sum - TARGET_BPS).abs() <= 0.02 * TARGET_BPS,
        "{rate_sum}"
    );
    assert!(report.groups[0].bytes > 0);
    achieved
}

#[test]
fn two_silos_share_one_aggregate_limit_on_real_tcp() {
    let Some(topo) = common::topology("mtr-sl", "silos") else {
        return;
    };
    // The host's default offloads: the sender's TCP hands the shaper GSO super-frames.
    let achieved = shaped_run(&topo);
    topo.remove().unwrap();
    let deviation = achieved / TARGET_BPS - 1.0;
    common::uncaptured(&format!(
        "two silos: {:+.2} % off (bounds +{:.0} % / -{:.0} %)",
        deviation * 100.0,
        OVER * 100.0,
        UNDER * 100.0
    ));
    assert!(
        (-UNDER..=OVER).contains(&deviation),
        "two silos: {:+.2} % off the limit, outside +{:.0} % / -{:.0} %",
        deviation * 100.0,
        OVER * 100.0,
        UNDER * 100.0
    );
}
