//! What the real-traffic tests share: the topology (without the privilege a failure, or a skip
//! under METRONOME_SKIP_PRIVILEGED=1), driving kernel TCP while sampling the receiver's wire
//! counter, the wire rate over the steady part, the frame accounting of a loop, and the two
//! attempts a rate gets on this shared machine.
#![allow(dead_code)] // each test binary uses a part

pub mod garbage;

use metronome_daemon::driver::run::{Control, LoopReport};
use metronome_daemon::ops::config::{fixture, Config};
use metronome_daemon::ops::metrics::Metrics;
pub use metronome_testbed::compare::measure::{FRAME_HEADERS, WIRE_PER_PAYLOAD};
use metronome_testbed::flood;
use metronome_testbed::netns::{TopoError, Topology};
use metronome_testbed::shaper::spawn_shaper;
use metronome_testbed::trafficgen::{self, TrafficPlan, TrafficReport};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How often a checked loop ([`checked_shaper`]) checks the frame pool and the engine's
/// invariants while it runs: every 100 ms.
pub const CHECK_EVERY: Duration = Duration::from_millis(100);

/// How often the receiver's rx byte counter is read while traffic runs.
const SAMPLE_EVERY: Duration = Duration::from_millis(20);

pub use metronome_testbed::netns::bump_in_the_wire_or_skip as topology;

/// Runs `plan` from the sender to the receiver of `topo`, reading the receiver's rx byte
/// and packet counters every 20 ms meanwhile (no sample while the receiver's veth is deleted);
/// returns the traffic report and the `(elapsed,
/// rx_bytes, rx_packets)` samples.
pub fn drive(topo: &Topology, plan: TrafficPlan) -> (TrafficReport, Vec<Sample>) {
    let mut counters = topo.receiver.interface_counters(&topo.receiver_if).unwrap();
    let (sender, receiver) = (topo.sender.clone(), topo.receiver.clone());
    let traffic =
        std::thread::spawn(move || trafficgen::run(&plan, Some(&sender), Some(&receiver)));
    let start = Instant::now();
    let mut samples = Vec::new();
    while !traffic.is_finished() {
        // While a test has deleted the receiver's veth there is nothing to read; a re-created
        // one counts from 0 again.
        match counters.read() {
            Ok(stats) => samples.push((start.elapsed(), stats.rx_bytes, stats.rx_packets)),
            Err(TopoError::NoSuchInterface { .. }) => {}
            Err(e) => panic!("reading the receiver's counters: {e}"),
        }
        std::thread::sleep(SAMPLE_EVERY);
    }
    (traffic.join().unwrap().unwrap(), samples)
}

/// The daemon's loop for `config` on the shaper of `topo` with its invariants checked every
/// [`CHECK_EVERY`] ([`flood::spawn_checked_shaper`]); returns once its ports are open (100 ms).
pub fn checked_shaper(
    topo: &Topology,
    config: Config,
    metrics: &Metrics,
    control: &Control,
) -> flood::CheckedThread {
    let (metrics, control) = (metrics.clone(), control.clone());
    let thread =
        flood::spawn_checked_shaper(&topo.shaper, config, metrics, control, CHECK_EVERY).unwrap();
    std::thread::sleep(Duration::from_millis(100)); // ports open
    thread
}

/// Stops the loop of [`checked_shaper`] and joins it: its report; panics (failing the test) when
/// the loop failed or an invariant did.
pub fn stop_checked(thread: flood::CheckedThread, control: &Control) -> flood::CheckedReport {
    control.stop.store(true, Ordering::Relaxed);
    thread
        .join()
        .expect("the loop's thread (an invariant failed if it panicked)")
        .unwrap()
        .expect("the daemon's loop stays up")
}

/// The daemon configuration (read as file `file`) of one class `bulk` of TCP to ports `ports`
/// (a port or a range `"A-B"`) at `rate` with a 15 kB burst, `extra` after those: more of the
/// class's keys, then any further tables ([`fixture::tcp_class`]).
pub fn bulk_config(ports: &str, rate: &str, extra: &str, file: &str) -> Config {
    let keys = format!("rate = \"{rate}\"\nburst = \"15k\"\n{extra}");
    Config::from_toml_str(&fixture::tcp_class("bulk", ports, &keys), file).unwrap()
}

/// Runs the daemon's loop for `config` (with `metrics`) on the shaper of `topo`, drives `plan`
/// through it once its ports are open and its rings mapped (100 ms), then stops it; returns the
/// traffic report, the receiver's samples ([`drive`]) and the loop's report.
pub fn drive_shaped(
    topo: &Topology,
    config: Config,
    metrics: Metrics,
    plan: TrafficPlan,
) -> (TrafficReport, Vec<Sample>, LoopReport) {
    let control = Control::default();
    let shaper = spawn_shaper(&topo.shaper, config, metrics, control.clone()).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let (report, samples) = drive(topo, plan);
    control.stop.store(true, Ordering::Relaxed);
    let loop_report = shaper.join().unwrap().unwrap().unwrap();
    (report, samples, loop_report)
}

/// The rate on the wire, bit/s, between the first sample at or after `warmup` and the last at
/// or before `end`.
pub fn wire_bps(samples: &[Sample], warmup: Duration, end: Duration) -> f64 {
    let (first, last) = steady(samples, warmup, end);
    (last.1 - first.1) as f64 * 8.0 / (last.0 - first.0).as_secs_f64()
}

/// One reading of the receiver's counters: elapsed time, rx bytes, rx packets.
pub type Sample = (Duration, u64, u64);

/// The first sample at or after `warmup` and the last at or before `end`.
fn steady(samples: &[Sample], warmup: Duration, end: Duration) -> (Sample, Sample) {
    let first = samples.iter().find(|s| s.0 >= warmup).unwrap();
    let last = samples.iter().rev().find(|s| s.0 <= end).unwrap();
    (*first, *last)
}

/// The TCP payload rate the receiver's veth saw, bit/s, over the same steady part as
/// [`wire_bps`]: its bytes minus one set of headers per packet it counted. A veth counts a GSO
/// super-frame once with its length (`skb->len`: one set of headers for up to 45 segments), so
/// this is exact for MTU frames and super-frames alike (the few pure ACKs and handshake frames
/// of the data direction count as headers).
pub fn payload_bps(samples: &[Sample], warmup: Duration, end: Duration) -> f64 {
    let (first, last) = steady(samples, warmup, end);
    let bytes = (last.1 - first.1).saturating_sub(FRAME_HEADERS * (last.2 - first.2));
    bytes as f64 * 8.0 / (last.0 - first.0).as_secs_f64()
}

/// The rate on the wire of `payload_bps` of TCP payload in full segments. A veth counts a GSO
/// super-frame's length once (about 3.5 % below what a wire carries), so with the host's
/// default offloads the tests measure the payload ([`payload_bps`]) and add every full
/// segment's headers, as a wire (and a NIC's counters) would carry them.
pub fn wire_of_payload(payload_bps: f64) -> f64 {
    payload_bps * WIRE_PER_PAYLOAD
}

/// The loop of `metronome_testbed::flood::spawn_checked_shaper` stayed up and was checked
/// along the way: its engine's invariants at least every other period of `check_every` over
/// `ran`, no pool slot left in use, and every frame accounted for
/// ([`assert_every_frame_accounted`]). `who` names the loop in the failure message.
#[allow(dead_code)] // not every test that includes this module runs a checked loop
pub fn assert_checked_loop(
    checked: &metronome_testbed::flood::CheckedReport,
    (ran, check_every): (std::time::Duration, std::time::Duration),
    who: &str,
) {
    let expected = (ran.as_millis() / check_every.as_millis().max(1)) as u64 / 2;
    assert!(
        checked.checks >= expected,
        "{who}: {} checks",
        checked.checks
    );
    assert_eq!(checked.pool_in_use, 0, "{who}: pool slots left in use");
    assert_every_frame_accounted(&checked.report, who);
}

/// Every frame the loop's inside port delivered is sent, dropped under a name, or was queued:
/// nothing is lost silently. A super-frame cut into pieces is one frame received and one wheel
/// entry (and one transmitted frame) per piece, so the entries beyond the first
/// (`pieces_extra`) are added to the frames received. Frames still in a fair class's flow
/// queues at stop never entered the wheel: they are in `queued_at_stop` and
/// `fair_discarded_at_stop`. Frames that waited for a down outside link longer than
/// `daemon.link_down_grace` are dropped from the wheel (`dropped_link_down`) or from the
/// transmit batch (`link_down_dropped_outside`). `who` names the loop in the failure message.
pub fn assert_every_frame_accounted(l: &LoopReport, who: &str) {
    let e = &l.engine;
    assert_eq!(l.inside.rx_packets, e.received, "{who}");
    assert_eq!(
        e.received,
        e.forwarded + e.enqueued_frames() + e.dropped() + e.fair_discarded_at_stop,
        "{who}"
    );
    assert_eq!(
        e.enqueued + e.fair_discarded_at_stop,
        e.released + e.dropped_link_down + l.queued_at_stop,
        "{who}"
    );
    let out = l.outside;
    assert_eq!(
        l.inside.rx_packets + e.pieces_extra,
        out.tx_packets
            + out.tx_errors
            + l.cuts.pieces_failed
            + e.dropped()
            + e.dropped_link_down
            + l.link_down_dropped_outside
            + l.queued_at_stop
            + l.pending_at_stop
            + l.tx_failed,
        "{who}: {l:?}"
    );
}

/// The frames the loop's ports refused on receive, each under its named counter (they never
/// reached the engine): `(reason, frames)` with a non-zero count.
pub fn refused(l: &LoopReport) -> Vec<(&'static str, u64)> {
    metronome_daemon::ops::refused::Refusals::of(&l.inside, &l.outside, &l.cuts)
        .by_reason()
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// How far below its target a failed first attempt may be for a second to be allowed: 10 times
/// the tolerance (30 % for 3 %). Load from other processes on this shared 2-core machine can
/// starve the kernel TCP senders and the daemon for part of a run. Measured with a load
/// average of 4-5 from other builds (debug builds): 100 Mbit/s 0.0 to -0.4 %; 500 Mbit/s -4 %
/// to -52 % (the debug-built loop is CPU-bound there under such load); ACK shaping -0.2 % to
/// -15.9 %; two silos -1.9 % to -5.4 %; after a link flap 0.0 to -2.5 %. On the idle machine:
/// 100 Mbit/s +0.01 %, 500 Mbit/s +0.00 %, ACK shaping -0.12 %, two silos -0.38 %, after a flap
/// -0.00 %. An attempt further off is taken as a fault.
pub const RETRY_BOUND_TOLERANCES: f64 = 10.0;

/// Runs `run` (which returns an achieved rate, bit/s) up to twice and returns `Ok` when an
/// attempt is within `tolerance` of `target`. A second attempt is made only when the first fell
/// **short** of the target by at most [`RETRY_BOUND_TOLERANCES`] tolerances: load can slow the
/// kernel senders, never make the shaper release more, so a first attempt above the tolerance,
/// or further below than the bound, fails at once. Each attempt still makes its own assertions.
///
/// Every attempt's line goes to the process's standard error directly, not through the test
/// harness's capture, so a retry shows in `cargo test`'s output (and `.ci/run`'s log) also when
/// the second attempt holds; the error names every attempt.
pub fn holds_in_two_attempts(
    label: &str,
    target: f64,
    tolerance: f64,
    run: impl FnMut() -> f64,
) -> Result<(), String> {
    attempts_reported(label, target, tolerance, run, uncaptured)
}

/// [`holds_in_two_attempts`], each line passed to `report`.
fn attempts_reported(
    label: &str,
    target: f64,
    tolerance: f64,
    mut run: impl FnMut() -> f64,
    mut report: impl FnMut(&str),
) -> Result<(), String> {
    let mut lines = Vec::new();
    for attempt in 1..=2 {
        let deviation = run() / target - 1.0;
        let line = format!(
            "{label}{:+.2} % off (attempt {attempt}, tolerance {:.1} %)",
            deviation * 100.0,
            tolerance * 100.0
        );
        report(&line);
        lines.push(line);
        if deviation.abs() <= tolerance {
            if attempt > 1 {
                report(&format!("{label}held on a retry: {}", lines.join("; ")));
            }
            return Ok(());
        }
        if deviation > tolerance || deviation < -RETRY_BOUND_TOLERANCES * tolerance {
            return Err(format!(
                "{} (no retry: over the limit, or more than {RETRY_BOUND_TOLERANCES} tolerances \
                 short)",
                lines.join("; ")
            ));
        }
    }
    Err(lines.join("; "))
}

/// Writes `line` to the process's standard error, bypassing the test harness's capture (which
/// takes only `print!`/`eprint!`).
pub fn uncaptured(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempts(values: &[f64]) -> (Result<(), String>, usize) {
        let mut it = values.iter().copied();
        let mut calls = 0;
        let mut reported = Vec::new();
        let r = attempts_reported(
            "t: ",
            100.0,
            0.03,
            || {
                calls += 1;
                it.next().unwrap()
            },
            |l| reported.push(l.to_owned()),
        );
        // Every attempt is reported, and a retry that held says so.
        assert!(reported.len() >= calls, "{reported:?}");
        if calls == 2 && r.is_ok() {
            assert!(reported.last().unwrap().contains("held on a retry"));
        }
        (r, calls)
    }

    #[test]
    fn a_retry_is_bounded_and_named() {
        assert_eq!(attempts(&[101.0]), (Ok(()), 1));
        assert_eq!(attempts(&[90.0, 99.0]), (Ok(()), 2));
        // Over the limit: no retry.
        let (r, calls) = attempts(&[104.0, 100.0]);
        assert_eq!(calls, 1);
        assert!(r.unwrap_err().contains("+4.00 %"));
        // Beyond the bound below: no retry.
        let (r, calls) = attempts(&[65.0, 100.0]);
        assert_eq!(calls, 1);
        assert!(r.unwrap_err().contains("-35.00 %"));
        // Both attempts failing: both named.
        let (r, calls) = attempts(&[95.0, 96.0]);
        assert_eq!(calls, 2);
        let e = r.unwrap_err();
        assert!(e.contains("-5.00 %") && e.contains("-4.00 %"), "{e}");
    }
}
