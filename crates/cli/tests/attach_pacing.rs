//! Source pacing in attach mode (`pace_sockets`, on by default): 16 TCP flows of the host through
//! an attached uplink whose default class is 100 Mbit/s, no ECN on the senders, with Cubic and
//! again with BBR. The daemon slows the sockets at their source: no segment is retransmitted,
//! the daemon drops nothing, every flow's socket carries a ceiling, the class holds its rate
//! and a probe in the same class waits a few milliseconds, where the same traffic without
//! source pacing queues 150 ms and retransmits (measured beside it, with kernel HTB on the
//! uplink: printed, the figures of docs/results/attach.md). And a SIGKILL leaves the sockets it
//! slowed able to send at full speed within 1 s.
//!
//! The figures are printed (`-- --nocapture`).

mod common;

use common::{metric_total, scrape_host, start_attached, Scratch};
use metronome_testbed::netns::attach::{attach_or_skip, AttachTopology, WorkloadLink};
use metronome_testbed::netns::QdiscSpec;
use metronome_testbed::stats::tcp_retransmitted_segments;
use metronome_testbed::trafficgen::{self, FlowGroup, TrafficPlan, TrafficReport};
use std::time::Duration;

/// The tests one at a time: each measures what the machine can do.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The class's rate, bit/s.
const RATE_BPS: u64 = 100_000_000;

/// The daemon's super-frame slots: 256 paced flows each hold a small super-frame at times, more
/// than the default 256 slots' share of a class (`pool_share` drops otherwise,
/// docs/results/attach.md).
const GSO_SLOTS: usize = 1024;

/// The bulk flows.
const FLOWS: usize = 16;

/// How long the flows send.
const RUN: Duration = Duration::from_secs(5);

/// What the test holds source pacing to: the probe's median (the target is 2 ms, measured
/// 1.6-4.0 ms in this debug build and 1.6 ms by the optimised `compare --attach`,
/// docs/results/attach.md; without source pacing 37-300 ms), and the goodput after the first
/// second against the rate (the target is 1 %; measured 0.2 to 0.9 % below, 2.1 % with a CPU
/// hog on one core).
const P50_MAX_US: u64 = 10_000;
const RATE_TOLERANCE: f64 = 0.025;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shaper {
    Metronome { pace: bool },
    Htb,
}

#[derive(Debug)]
struct Outcome {
    off_rate: f64,
    retransmits: u64,
    dropped: u64,
    probe_p50_us: u64,
    probe_p99_us: u64,
    slowed: f64,
    held_per_flow: f64,
    goodput_bps: f64,
}

fn retransmits(topo: &AttachTopology) -> u64 {
    topo.host
        .run(tcp_retransmitted_segments)
        .unwrap()
        .expect("/proc/thread-self/net/snmp")
}

/// A load: the class's rate and its bulk flows.
#[derive(Clone, Copy, Debug)]
struct Load {
    rate_bps: u64,
    flows: usize,
}

/// The first test's load.
const SMALL: Load = Load {
    rate_bps: RATE_BPS,
    flows: FLOWS,
};

fn plan(topo: &AttachTopology, congestion: &str, load: Load, run: Duration) -> TrafficPlan {
    TrafficPlan::new(
        topo.receiver_addr,
        vec![FlowGroup::tcp("bulk", 5311, load.flows)],
        run,
    )
    .with_probe(5312)
    .with_congestion(congestion)
}

/// Goodput after the first second (the flows' start and the ceilings' first steps left out)
/// over the rate's share of TCP payload (1448 bytes of a 1514-byte frame), minus one.
fn off_rate(report: &TrafficReport, rate_bps: u64) -> f64 {
    let windows = &report.groups[0].windows_bps;
    let skip = (Duration::from_secs(1).as_millis() / report_window_ms()) as usize;
    let steady = windows.get(skip..).unwrap_or_default();
    let mean = steady.iter().sum::<f64>() / steady.len().max(1) as f64;
    mean / (rate_bps as f64 * 1448.0 / 1514.0) - 1.0
}

/// The goodput windows' length, ms.
fn report_window_ms() -> u128 {
    trafficgen::DEFAULT_WINDOW.as_millis()
}

/// Runs the traffic; with a daemon, scrapes its metrics in the middle of the run.
fn traffic(topo: &AttachTopology, plan: TrafficPlan, daemon: bool) -> (TrafficReport, String) {
    let (host, receiver) = (topo.host.clone(), topo.receiver.clone());
    let half = plan.duration / 2;
    let load = std::thread::spawn(move || trafficgen::run(&plan, Some(&host), Some(&receiver)));
    std::thread::sleep(Duration::from_secs(1) + half);
    let body = match daemon {
        true => scrape_host(topo),
        false => String::new(),
    };
    (load.join().unwrap().unwrap(), body)
}

fn run(congestion: &str, shaper: Shaper, load: Load) -> Option<Outcome> {
    let test = "attach_pacing";
    let mut topo = attach_or_skip("mtr-pace", (0, WorkloadLink::Bridge), test)?;
    let dir = Scratch::new(&format!("attach-pace-{congestion}"));
    let mut daemon = None;
    match shaper {
        Shaper::Metronome { pace } => {
            let text = format!(
                "[interfaces]\nattach = [\"{}\"]\n\n[daemon]\ngso_slots = {GSO_SLOTS}\n\n\
                 [default]\nrate = \"{}\"\n\
                 pace_sockets = {pace}\n",
                topo.uplink, load.rate_bps
            );
            daemon = Some(start_attached(&topo, &dir.0, &text, congestion));
        }
        Shaper::Htb => topo
            .install_uplink_qdisc(&QdiscSpec::Htb {
                rate_bps: load.rate_bps,
                burst_bytes: None,
            })
            .unwrap(),
    }
    let before = retransmits(&topo);
    let (report, mid) = traffic(&topo, plan(&topo, congestion, load, RUN), daemon.is_some());
    let retransmitted = retransmits(&topo) - before;
    let body = match &daemon {
        Some(_) => scrape_host(&topo),
        None => String::new(),
    };
    if let Some(mut d) = daemon {
        let _ = d.child.kill();
        let _ = d.child.wait();
        for line in d.log().lines().filter(|l| l.contains("pacing")) {
            println!("  daemon: {line}");
        }
    }
    let probe = report.probe.clone().expect("the probe ran");
    let outcome = Outcome {
        off_rate: off_rate(&report, load.rate_bps),
        retransmits: retransmitted,
        dropped: metric_total(&body, "metronome_class_drops_total", "class=\"default\"") as u64,
        probe_p50_us: probe.p50_us,
        probe_p99_us: probe.p99_us,
        slowed: metric_total(&mid, "metronome_sockets_slowed", ""),
        held_per_flow: metric_total(&mid, "metronome_class_held_per_flow_millipackets", "")
            / 1000.0,
        goodput_bps: report.groups[0].mean_bps(),
    };
    println!(
        "{congestion:>5} {shaper:?} {load:?}: goodput {:.2} Mbit/s ({:+.2} % of the rate), {} \
         retransmitted segments, {} drops, probe RTT p50 {} us p99 {} us; mid-run {} sockets \
         slowed, {:.2} frames held per flow",
        outcome.goodput_bps / 1e6,
        100.0 * outcome.off_rate,
        outcome.retransmits,
        outcome.dropped,
        outcome.probe_p50_us,
        outcome.probe_p99_us,
        outcome.slowed,
        outcome.held_per_flow,
    );
    topo.remove().unwrap();
    Some(outcome)
}

/// The figures source pacing is held to (`p50_max_us`: the probe's median, where asserted).
fn check(name: &str, o: &Outcome, flows: usize, p50_max_us: Option<u64>, retransmits: u64) {
    let off = o.off_rate;
    assert!(
        off.abs() <= RATE_TOLERANCE,
        "{name}: {:+.2} % off the rate",
        100.0 * off
    );
    assert!(
        o.retransmits <= retransmits,
        "{name}: {} segments retransmitted",
        o.retransmits
    );
    assert_eq!(o.dropped, 0, "{name}: the daemon dropped");
    if let Some(max) = p50_max_us {
        assert!(
            o.probe_p50_us <= max,
            "{name}: probe p50 {} us",
            o.probe_p50_us
        );
    }
    assert!(
        o.slowed >= flows as f64,
        "{name}: {} sockets slowed",
        o.slowed
    );
}

#[test]
fn paced_sockets_queue_a_few_frames_and_lose_none_with_cubic_and_bbr() {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut paced = Vec::new();
    for congestion in ["cubic", "bbr"] {
        let Some(o) = run(congestion, Shaper::Metronome { pace: true }, SMALL) else {
            return;
        };
        // Beside it, for the record: the daemon without source pacing, and HTB.
        let unpaced = run(congestion, Shaper::Metronome { pace: false }, SMALL).unwrap();
        run(congestion, Shaper::Htb, SMALL);
        paced.push((congestion, o, unpaced));
    }
    for (name, o, unpaced) in &paced {
        check(name, o, FLOWS, Some(P50_MAX_US), 0);
        assert!(
            o.probe_p50_us < unpaced.probe_p50_us,
            "{name}: the probe waited {} us paced, {} us not",
            o.probe_p50_us,
            unpaced.probe_p50_us
        );
    }
}

#[test]
fn two_hundred_and_fifty_six_paced_flows_at_a_gigabit_hold_a_few_frames_each() {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let load = Load {
        rate_bps: 1_000_000_000,
        flows: 256,
    };
    let Some(o) = run("bbr", Shaper::Metronome { pace: true }, load) else {
        return;
    };
    let unpaced = run("bbr", Shaper::Metronome { pace: false }, load).unwrap();
    run("bbr", Shaper::Htb, load);
    // The probe is not held to a bound here: on this 2-core machine the loop is busy at
    // 1 Gbit/s with 256 flows (17 ms measured, docs/results/attach.md).
    // Nor its retransmissions to none: with a CPU hog on one core one segment of 256 flows was
    // retransmitted once; without source pacing there are thousands.
    check("256 flows", &o, load.flows, None, unpaced.retransmits / 100);
}

#[test]
fn a_killed_daemon_leaves_the_sockets_it_slowed_at_full_speed_within_a_second() {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let test = "attach_pacing_kill";
    let Some(topo) = attach_or_skip("mtr-pkil", (0, WorkloadLink::Bridge), test) else {
        return;
    };
    let dir = Scratch::new("attach-pace-kill");
    let text = format!(
        "[interfaces]\nattach = [\"{}\"]\n\n[default]\nrate = \"{RATE_BPS}\"\n",
        topo.uplink
    );
    let mut daemon = start_attached(&topo, &dir.0, &text, "kill");
    let run = Duration::from_secs(5);
    let plan = TrafficPlan::new(
        topo.receiver_addr,
        vec![FlowGroup::tcp("bulk", 5321, 4)],
        run,
    );
    let (host, receiver) = (topo.host.clone(), topo.receiver.clone());
    let load = std::thread::spawn(move || trafficgen::run(&plan, Some(&host), Some(&receiver)));
    std::thread::sleep(Duration::from_millis(2000));
    let slowed = metric_total(&scrape_host(&topo), "metronome_sockets_slowed", "");
    daemon.child.kill().unwrap();
    let killed = std::time::Instant::now();
    let _ = daemon.child.wait();
    let report = load.join().unwrap().unwrap();
    // Windows that end more than 1 s after the kill.
    let windows = &report.groups[0].windows_bps;
    let window = trafficgen::DEFAULT_WINDOW;
    let first = (killed + Duration::from_secs(1)).saturating_duration_since(report.started);
    let first = (first.as_millis() / window.as_millis()) as usize + 1;
    let after = windows.get(first..).unwrap_or_default();
    let before = windows.get(5..15).unwrap_or_default();
    let mean = |w: &[f64]| w.iter().sum::<f64>() / w.len().max(1) as f64;
    println!(
        "{slowed} sockets slowed; goodput {:.1} Mbit/s before the kill, {:.1} Mbit/s from 1 s \
         after it ({} windows)",
        mean(before) / 1e6,
        mean(after) / 1e6,
        after.len()
    );
    assert!(
        slowed >= 4.0,
        "{slowed} sockets slowed before the kill; the daemon logged:\n{}",
        daemon.log()
    );
    assert!(!after.is_empty(), "no window after the kill");
    assert!(
        after.iter().all(|w| *w > 3.0 * RATE_BPS as f64),
        "a window from 1 s after the kill below three times the class's rate: {after:?}"
    );
    topo.remove().unwrap();
}
