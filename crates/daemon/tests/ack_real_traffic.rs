//! Real kernel TCP slowed by receiver-side ACK shaping in the daemon (Carousel §6): a sender,
//! shaper and receiver namespace, 4 TCP flows for 4 s into one class whose data is **not**
//! queued (no `rate`) and whose ACKs are released at 100 Mbit/s of payload
//! (`ack_shaping = { rate = "100mbit" }`). Asserts the data rate on the receiver's veth over the
//! steady part (after 1.5 s: the senders' windows grow to the receiver's window first, see
//! `metronome_core::ack_shaping`; before the last 0.3 s) within 3 % of 100 Mbit/s of payload
//! (measured: -0.41 % to +0.02 % in five runs; -4.0 % once while other builds loaded the machine),
//! and that the daemon rewrote, suppressed and generated ACKs and dropped no data frame. Skips,
//! saying why, without CAP_NET_ADMIN; the topology is removed on every path (its `Drop`).

use metronome_daemon::config::Config;
use metronome_daemon::daemon::spawn_shaper;
use metronome_daemon::metrics::Metrics;
use metronome_daemon::netns::{TopoError, Topology};
use metronome_daemon::run::Control;
use metronome_daemon::trafficgen::{self, FlowGroup, TrafficPlan};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Traffic duration.
const RUN: Duration = Duration::from_secs(4);
/// Skipped at the start: slow start until the senders' windows reach the receiver's window.
const WARMUP: Duration = Duration::from_millis(1500);
/// Skipped at the end (flows stopping one by one).
const COOLDOWN: Duration = Duration::from_millis(300);
/// Tolerance (a loose bound for a shared 2-core machine; the lab measures the model's accuracy).
const TOLERANCE: f64 = 0.03;
/// The ACK-shaping rate: TCP payload bytes per second, in bit/s.
const TARGET_BPS: f64 = 100e6;
/// Frame bytes per payload byte of a full segment: 1448 B of payload (MSS with the timestamps
/// option) in a 1514-byte frame (14 Ethernet + 20 IPv4 + 32 TCP), as the veth counts it.
const WIRE_PER_PAYLOAD: f64 = 1514.0 / 1448.0;

const CONFIG: &str = r#"
[interfaces]
inside = "in0"
outside = "out0"

[[class]]
name = "incast"
match = { protocol = "tcp", dst_port = "5201-5216" }
ack_shaping = { rate = "100mbit" }
"#;

fn topology() -> Option<Topology> {
    match Topology::bump_in_the_wire("mtr-ack") {
        Ok(topo) => Some(topo),
        Err(e @ TopoError::MissingPrivilege(_)) => {
            eprintln!("skipping ack_real_traffic: {e}");
            None
        }
        Err(e) => panic!("building the topology failed: {e}"),
    }
}

/// One run; returns the payload rate achieved on the wire, bit/s.
fn ack_shaped_run(topo: &Topology) -> f64 {
    let metrics = Metrics::new();
    let control = Control::default();
    let config = Config::from_toml_str(CONFIG, "ack_real_traffic.toml").unwrap();
    let shaper = spawn_shaper(&topo.shaper, config, metrics.clone(), control.clone()).unwrap();
    std::thread::sleep(Duration::from_millis(100)); // ports open, rings mapped
    let mut counters = topo.receiver.link_counters(&topo.receiver_if).unwrap();
    let plan = TrafficPlan::new(
        topo.receiver_addr,
        vec![FlowGroup::tcp("incast", 5201, 4)],
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
    control.stop.store(true, Ordering::Relaxed);
    let loop_report = shaper.join().unwrap().unwrap().unwrap();
    let end = RUN.saturating_sub(COOLDOWN);
    let first = samples.iter().find(|(t, _)| *t >= WARMUP).unwrap();
    let last = samples.iter().rev().find(|(t, _)| *t <= end).unwrap();
    let wire = (last.1 - first.1) as f64 * 8.0 / (last.0 - first.0).as_secs_f64();
    let text = metrics.encode();
    let count = |outcome: &str| -> u64 {
        let key = format!("metronome_ack_shaping_total{{class=\"incast\",outcome=\"{outcome}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(key.as_str()))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    let (rewritten, suppressed, generated) =
        (count("rewritten"), count("suppressed"), count("generated"));
    println!(
        "ACK shaping at {:.0} Mbit/s: {:.2} Mbit/s of payload on the wire ({:.2} Mbit/s of \
         frames), goodput over the whole run {:.2} Mbit/s; ACKs rewritten {rewritten} \
         suppressed {suppressed} generated {generated} passthrough {}; engine dropped {}",
        TARGET_BPS / 1e6,
        wire / WIRE_PER_PAYLOAD / 1e6,
        wire / 1e6,
        report.groups[0].mean_bps() / 1e6,
        count("passthrough"),
        loop_report.engine.dropped(),
    );
    assert_eq!(
        loop_report.engine.dropped(),
        0,
        "data is never queued nor dropped"
    );
    assert!(rewritten > 0 && generated > 0, "{text}");
    wire / WIRE_PER_PAYLOAD
}

#[test]
fn kernel_tcp_is_held_to_the_ack_shaping_rate() {
    let Some(topo) = topology() else {
        return;
    };
    // Segments of one MTU: the payload-per-frame ratio above holds for every frame.
    topo.one_mtu_segments().unwrap();
    // Two attempts, as in real_traffic.rs: a burst of load from another process on this shared
    // machine can starve the kernel senders for part of one run. Each attempt still checks the
    // counters; the rate must hold in at least one.
    let mut last = String::new();
    let held = (0..2).any(|attempt| {
        let achieved = ack_shaped_run(&topo);
        let deviation = achieved / TARGET_BPS - 1.0;
        last = format!("{:.2} % off (attempt {})", deviation * 100.0, attempt + 1);
        eprintln!("{last}");
        deviation.abs() <= TOLERANCE
    });
    topo.remove().unwrap();
    assert!(held, "{last}");
}
