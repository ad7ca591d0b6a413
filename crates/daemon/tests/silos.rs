//! Real kernel TCP through two shaper silos (issue 6, Carousel §5.3): a sender, shaper and
//! receiver namespace, `[daemon] cores = 2` (two AF_PACKET fanout-hashed socket pairs, two
//! engines, the NIC-level bandwidth allocator splitting one class's 200 Mbit/s between them), 16
//! TCP connections for 3 s. Asserts the aggregate on the wire — the receiver veth's rx byte
//! counter over the steady part — within 3 % of 200 Mbit/s, that both silos carried shaped
//! traffic, that every frame each silo received is accounted for (`rx = tx + named drops +
//! queued`), and that the allocator's per-silo rates are in the metrics and sum to the limit.
//! Skips, saying why, without CAP_NET_ADMIN; the topology (its own `mtr-sl` names) is removed on
//! every path, panics included (its `Drop`).

use metronome_daemon::config::Config;
use metronome_daemon::daemon::spawn_silos;
use metronome_daemon::metrics::Metrics;
use metronome_daemon::netns::{TopoError, Topology};
use metronome_daemon::run::Control;
use metronome_daemon::trafficgen::{self, FlowGroup, TrafficPlan};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Traffic duration.
const RUN: Duration = Duration::from_secs(3);
/// Skipped at the start (TCP slow start, the allocator's first periods).
const WARMUP: Duration = Duration::from_millis(500);
/// Skipped at the end (flows stopping one by one).
const COOLDOWN: Duration = Duration::from_millis(300);
/// Tolerance (the brief: within 3 %).
const TOLERANCE: f64 = 0.03;
/// The class's aggregate limit, bit/s.
const TARGET_BPS: f64 = 200e6;
/// TCP connections: with 16 the kernel's flow hash leaves a silo empty with probability 2^-15.
const FLOWS: usize = 16;

fn config() -> Config {
    let text = r#"
[interfaces]
inside = "in0"
outside = "out0"

[daemon]
cores = 2

[[class]]
name = "bulk"
match = { protocol = "tcp", dst_port = "5201" }
rate = "200mbit"
burst = "15k"
"#;
    Config::from_toml_str(text, "silos.toml").unwrap()
}

/// Builds the topology, or `None` (printing why) without the privilege.
fn topology() -> Option<Topology> {
    match Topology::bump_in_the_wire("mtr-sl") {
        Ok(topo) => Some(topo),
        Err(e @ TopoError::MissingPrivilege(_)) => {
            eprintln!("skipping silos: {e}");
            None
        }
        Err(e) => panic!("building the topology failed: {e}"),
    }
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
    let silos = spawn_silos(&topo.shaper, config(), metrics.clone(), control.clone()).unwrap();
    std::thread::sleep(Duration::from_millis(100)); // ports open, rings mapped
    let mut counters = topo.receiver.link_counters(&topo.receiver_if).unwrap();
    let plan = TrafficPlan::new(
        topo.receiver_addr,
        vec![FlowGroup::tcp("bulk", 5201, FLOWS)],
        RUN,
    );
    let (sender, receiver) = (topo.sender.clone(), topo.receiver.clone());
    let traffic =
        std::thread::spawn(move || trafficgen::run(&plan, Some(&sender), Some(&receiver)));
    let start = Instant::now();
    let mut samples = Vec::new();
    while !traffic.is_finished() {
        samples.push((start.elapsed(), counters.read().unwrap().rx_bytes));
        std::thread::sleep(Duration::from_millis(20));
    }
    let report = traffic.join().unwrap().unwrap();
    let (rate_sum, rate_silos) = nba_rates(&metrics);
    control.stop.store(true, Ordering::Relaxed);
    let reports = silos.join().unwrap().unwrap().unwrap();

    let end = RUN.saturating_sub(COOLDOWN);
    let first = samples.iter().find(|(t, _)| *t >= WARMUP).unwrap();
    let last = samples.iter().rev().find(|(t, _)| *t <= end).unwrap();
    let achieved = (last.1 - first.1) as f64 * 8.0 / (last.0 - first.0).as_secs_f64();
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
        assert_eq!(l.inside.rx_packets, e.received);
        assert_eq!(e.received, e.forwarded + e.enqueued + e.dropped());
        assert_eq!(e.enqueued, e.released + l.queued_at_stop);
        let out = l.outside;
        assert_eq!(
            l.inside.rx_packets,
            out.tx_packets
                + out.tx_errors
                + e.dropped()
                + l.queued_at_stop
                + l.pending_at_stop
                + l.tx_failed,
            "silo {silo}: {l:?}"
        );
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
    let Some(topo) = topology() else {
        return;
    };
    // Segments of one MTU: GSO/TSO would hand the shaper 64 KiB super-frames (see the demo).
    topo.one_mtu_segments().unwrap();
    // Two attempts, as in real_traffic.rs: on this shared 2-core machine a burst of load from
    // another process can starve the kernel TCP senders for part of one run. Every attempt
    // asserts the accounting; the rate must hold in one of them.
    let mut last = String::new();
    let held = (0..2).any(|attempt| {
        let achieved = shaped_run(&topo);
        let deviation = achieved / TARGET_BPS - 1.0;
        last = format!("{:.2} % off (attempt {})", deviation * 100.0, attempt + 1);
        eprintln!("{last}");
        deviation.abs() <= TOLERANCE
    });
    topo.remove().unwrap();
    assert!(held, "{last}");
}
