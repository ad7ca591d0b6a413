//! Real kernel TCP slowed by receiver-side ACK shaping in the daemon (Carousel §6): a sender,
//! shaper and receiver namespace, 4 TCP flows for 4 s into one class whose data is **not**
//! queued (no `rate`) and whose ACKs are released at 100 Mbit/s of payload
//! (`ack_shaping = { rate = "100mbit" }`), with one MTU per segment and `vnet_hdr = false`.
//! Asserts the payload rate on the receiver's veth over the steady part (after 1.5 s: the
//! senders' windows grow to the receiver's window first, see `metronome_core::ack_shaping`;
//! before the last 0.3 s; its bytes less one set of headers per packet it counted) at most
//! `OVER` above and `UNDER` below 100 Mbit/s in one attempt (the bounds and their measured
//! spread are at the constants), that the daemon rewrote, suppressed and generated ACKs and dropped
//! no data frame, and that every frame of both directions is accounted for, the suppressed ACKs
//! being exactly the reverse frames not sent. Skips,
//! saying why, without CAP_NET_ADMIN; the topology is removed on every path (its `Drop`).

mod common;

use metronome_daemon::driver::run::LoopReport;
use metronome_daemon::ops::config::{fixture, Config};
use metronome_daemon::ops::metrics::Metrics;
use metronome_testbed::netns::Topology;
use metronome_testbed::trafficgen::{FlowGroup, TrafficPlan};
use std::time::Duration;

/// Traffic duration.
const RUN: Duration = Duration::from_secs(4);
/// Skipped at the start: slow start until the senders' windows reach the receiver's window.
const WARMUP: Duration = Duration::from_millis(1500);
/// Skipped at the end (flows stopping one by one).
const COOLDOWN: Duration = Duration::from_millis(300);
/// How far above the ACK-shaping rate the payload may be: 3 %. Measured (`cargo test -p
/// metronome-testbed --test ack_real_traffic -- --nocapture`): -0.41 % to +0.02 % in five runs on
/// the idle machine, and never above +0.02 % under load. Above 3 % the ACKs did not hold the
/// senders (without ACK shaping they take the whole path, many times the rate).
const OVER: f64 = 0.03;
/// How far below it the payload may be: 25 %. The rate is ACK-clocked, so load from other
/// processes on this 2-core machine, which delays the senders, the receiver and the daemon, can
/// only lower it: measured under load (load average 5 to 13 from parallel builds) -0.6, -0.9,
/// -1.0, -1.5, -1.9, -2.2, -2.3, -3.6, -4.7, -5.7, -14.8, -17.2 and -17.9 %. 25 % is 1.4 times
/// the worst seen; ACKs released at half their rate or stalled fail.
const UNDER: f64 = 0.25;
/// The ACK-shaping rate: TCP payload bytes per second, in bit/s.
const TARGET_BPS: f64 = 100e6;
use common::WIRE_PER_PAYLOAD;

/// The class `incast` whose ACKs are shaped to 100 Mbit/s, and one frame per MTU without
/// virtio-net headers (see the test).
fn config() -> Config {
    let keys = "ack_shaping = { rate = \"100mbit\" }\n\n[daemon]\nvnet_hdr = false";
    let text = fixture::tcp_class("incast", "5201-5216", keys);
    Config::from_toml_str(&text, "ack_real_traffic.toml").unwrap()
}

/// One run; returns the payload rate achieved on the wire, bit/s.
fn ack_shaped_run(topo: &Topology) -> f64 {
    let metrics = Metrics::new();
    let config = config();
    let plan = TrafficPlan::new(
        topo.receiver_addr,
        vec![FlowGroup::tcp("incast", 5201, 4)],
        RUN,
    );
    let (report, samples, loop_report) = common::drive_shaped(topo, config, metrics.clone(), plan);
    // Payload on the receiver's veth over the steady part: its bytes less one set of headers
    // per packet it counted (a veth counts a super-frame's headers once, `common::payload_bps`).
    let veth = common::wire_bps(&samples, WARMUP, RUN.saturating_sub(COOLDOWN));
    let wire = common::wire_of_payload(common::payload_bps(
        &samples,
        WARMUP,
        RUN.saturating_sub(COOLDOWN),
    ));
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
         frames counted by the veth), goodput over the whole run {:.2} Mbit/s; ACKs rewritten {rewritten} \
         suppressed {suppressed} generated {generated} passthrough {}; engine dropped {}",
        TARGET_BPS / 1e6,
        wire / WIRE_PER_PAYLOAD / 1e6,
        veth / 1e6,
        report.groups[0].mean_bps() / 1e6,
        count("passthrough"),
        loop_report.engine.dropped(),
    );
    assert_eq!(
        loop_report.engine.dropped(),
        0,
        "data is never queued nor dropped"
    );
    assert!(
        rewritten > 0 && suppressed > 0 && generated > 0,
        "the daemon rewrote, suppressed and generated ACKs: {text}"
    );
    // Each reverse segment of a shaped flow gets one decision: passed, rewritten or suppressed
    // (or `unsupported`); none is counted twice.
    let decided = rewritten + suppressed + count("passthrough") + count("unsupported");
    assert!(
        decided <= loop_report.passed_back,
        "{decided} ACK decisions for {} reverse frames",
        loop_report.passed_back
    );
    assert_frames_accounted_both_ways(&loop_report, suppressed, generated);
    wire / WIRE_PER_PAYLOAD
}

/// Every frame of both directions is sent, dropped under a name, queued or pending at stop, or
/// (the reverse direction) a suppressed ACK; generated ACKs are frames sent that nobody
/// received. The suppressed count is exactly the reverse frames that were freed, not sent.
fn assert_frames_accounted_both_ways(l: &LoopReport, suppressed: u64, generated: u64) {
    common::assert_every_frame_accounted(l, "forward");
    assert_eq!(l.outside.rx_packets, l.passed_back, "{l:?}");
    let (inp, out) = (l.inside, l.outside);
    assert_eq!(
        inp.rx_packets + out.rx_packets + generated,
        out.tx_packets
            + out.tx_errors
            + inp.tx_packets
            + inp.tx_errors
            + l.engine.dropped()
            + l.queued_at_stop
            + l.pending_at_stop
            + l.tx_failed
            + suppressed,
        "received + generated = sent + named drops + queued + suppressed: {l:?}"
    );
}

#[test]
fn kernel_tcp_is_held_to_the_ack_shaping_rate() {
    let Some(topo) = common::topology("mtr-ack", "ack_real_traffic") else {
        return;
    };
    // Segments of one MTU and ports without virtio-net headers (explicit opt-ins). Measured on
    // this 2-core machine under load (load average about 5): with the host's default offloads
    // the ACK-clocked rate fell 4 to 15 % short of the ACK-shaping rate in every attempt; with
    // MTU segments and `vnet_hdr` on (GRO on or off) -0.1 to -27 %; with MTU segments and
    // `vnet_hdr = false` -1.0, -5.7, -1.5 %. ACK shaping with super-frames and with the
    // `vnet_hdr` receive path is an open problem.
    topo.one_mtu_segments().unwrap();
    let achieved = ack_shaped_run(&topo);
    topo.remove().unwrap();
    let deviation = achieved / TARGET_BPS - 1.0;
    assert!(
        (-UNDER..=OVER).contains(&deviation),
        "{:+.2} % off the ACK-shaping rate (bounds +{:.0} % / -{:.0} %)",
        deviation * 100.0,
        OVER * 100.0,
        UNDER * 100.0
    );
}
