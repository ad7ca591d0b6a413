//! Backpressure to the host's own senders in attach mode: 16 TCP flows of the host through an
//! attached uplink whose class (200 Mbit/s) marks CE above 1 ms of queue
//! (`backpressure = { mode = "ecn" }`), with ECN on in the host (`net.ipv4.tcp_ecn = 1`):
//!
//! * Cubic reacts to the marks: no drop, the rate held, and a probe in the same class sees a
//!   queue of a few milliseconds;
//! * BBR (v1) does not react to ECN: it paces at its estimate of the bottleneck, the class's
//!   rate; the test records its marks, drops and queue delay beside Cubic's, and checks the rate.
//!
//! The figures are printed (`-- --nocapture`) and kept in docs/results/attach.md.

mod common;

use common::{metric_total, scrape_host, start_attached, Scratch};
use metronome_testbed::netns::attach::{attach_or_skip, WorkloadLink};
use metronome_testbed::trafficgen::{self, FlowGroup, TrafficPlan};
use std::time::Duration;

/// The class's rate, bit/s.
const RATE_BPS: u64 = 200_000_000;

/// Goodput over the class's rate, as in `attach.rs`: headers take 4.4 %.
const GOODPUT_SHARE: std::ops::RangeInclusive<f64> = 0.90..=1.01;

struct Outcome {
    goodput_bps: f64,
    marked: u64,
    dropped: u64,
    probe_p50_us: u64,
    probe_p99_us: u64,
}

fn run(congestion: &str, backpressure: &str) -> Option<Outcome> {
    let test = "attach_ecn";
    let topo = attach_or_skip("mtr-ecn", (0, WorkloadLink::Bridge), test)?;
    topo.enable_sender_ecn();
    let dir = Scratch::new(&format!("attach-ecn-{congestion}"));
    let text = format!(
        "[interfaces]\nattach = [\"{}\"]\n\n[default]\nrate = \"{RATE_BPS}\"\nbackpressure = {backpressure}\npace_sockets = false\n",
        topo.uplink
    );
    let mut daemon = start_attached(&topo, &dir.0, &text, congestion);
    let plan = TrafficPlan::new(
        topo.receiver_addr,
        vec![FlowGroup::tcp("bulk", 5301, 16)],
        Duration::from_secs(4),
    )
    .with_probe(5302)
    .with_congestion(congestion);
    let report = trafficgen::run(&plan, Some(&topo.host), Some(&topo.receiver)).unwrap();
    let body = scrape_host(&topo);
    let _ = daemon.child.kill();
    let _ = daemon.child.wait();
    let probe = report.probe.expect("the probe ran");
    let outcome = Outcome {
        goodput_bps: report.groups[0].mean_bps(),
        marked: metric_total(
            &body,
            "metronome_class_ecn_marks_total",
            "class=\"default\"",
        ) as u64,
        dropped: metric_total(&body, "metronome_class_drops_total", "class=\"default\"") as u64,
        probe_p50_us: probe.p50_us,
        probe_p99_us: probe.p99_us,
    };
    println!(
        "{congestion:>5} backpressure {backpressure}: {:.1} Mbit/s goodput ({:.3} of the rate), \
         {} CE marks, {} drops, probe RTT p50 {} us p99 {} us",
        outcome.goodput_bps / 1e6,
        outcome.goodput_bps / RATE_BPS as f64,
        outcome.marked,
        outcome.dropped,
        outcome.probe_p50_us,
        outcome.probe_p99_us
    );
    topo.remove().unwrap();
    Some(outcome)
}

#[test]
fn cubic_slows_down_on_marks_and_bbr_holds_the_rate_regardless() {
    let ecn = "{ mode = \"ecn\", threshold = \"1ms\" }";
    let Some(cubic) = run("cubic", ecn) else {
        return;
    };
    let Some(bbr) = run("bbr", ecn) else {
        return;
    };
    let Some(cubic_none) = run("cubic", "{ mode = \"none\" }") else {
        return;
    };
    for (name, o) in [
        ("cubic", &cubic),
        ("bbr", &bbr),
        ("cubic, no ECN", &cubic_none),
    ] {
        let share = o.goodput_bps / RATE_BPS as f64;
        assert!(
            GOODPUT_SHARE.contains(&share),
            "{name}: {share:.3} of the rate"
        );
    }
    assert!(cubic.marked > 0, "Cubic's flows were never marked");
    assert_eq!(cubic.dropped, 0, "Cubic with ECN lost packets");
    assert_eq!(cubic_none.marked, 0, "marks without ECN backpressure");
    assert!(
        cubic.probe_p99_us < cubic_none.probe_p99_us,
        "ECN did not shorten the queue: p99 {} us with, {} us without",
        cubic.probe_p99_us,
        cubic_none.probe_p99_us
    );
}
