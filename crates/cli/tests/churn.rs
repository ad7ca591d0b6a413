//! Classes added and deleted through the control socket while TCP runs through other classes,
//! end to end with the built binary: `metronome_testbed::compare::churn` (what `metronome
//! compare --churn` runs) at a size CI can afford: [`OPS`] operations every [`PACE`] after a
//! calm phase of [`CALM`], two file classes of TCP (200 and 100 Mbit/s, 4 flows each), a 4
//! Mbit/s UDP flow that each added class (6 Mbit/s) takes and each deleted class lets go with
//! datagrams still queued in it.
//!
//! Asserted, in every attempt:
//! * every operation was carried out (`"ok": true`), and counted in
//!   `metronome_class_changes_total`;
//! * not one UDP datagram was lost, the churn classes did carry it and queue it (the scrapes saw
//!   their packets, and packets queued in them), and the scrapes saw no drop in a churn class;
//! * the tap missed no frame.
//!
//! Asserted with a tolerance, in at most two attempts (CONTRIBUTING.md, "Privileged tests": a
//! shared machine):
//! * each TCP class's mean absolute deviation from its rate in 100 ms windows during the churn
//!   is within [`CHURN_DEVIATION_PCT`] (the target's 1 %), or, when the calm phase itself is not
//!   (a loaded machine), not worse than the calm phase by more than [`CHURN_MARGIN_PCT`];
//! * the median of the daemon's own `applied_us` (request's arrival to the shaping loop applying
//!   it) is within [`APPLIED_P50_US`].
//!
//! Not asserted: the target's p99 of `applied_us` within 1 ms. It is a bound on wall-clock time
//! (CONTRIBUTING.md §15), and on the shared 2-core machine this was written on it did not hold
//! for this test's build while other builds ran beside it: with the binary the test runs
//! (dependencies such as `toml` and `serde_json` unoptimised: an `add`'s validation costs about
//! 0.2 ms more than a `del` here, against 0.03-0.05 ms with the release binary) the p99 was 1.0
//! to 8.5 ms in four such runs, the median 0.17 to 0.86 ms; on the machine at rest, p99 0.62 ms,
//! median 0.12 ms. With the release binary (`metronome compare --churn`, 1 000 operations every
//! 5 ms): p99 0.14 to 0.61 ms. The tail is the machine's scheduling, not the operation: the
//! engine's own `add_class` and `delete_class` take 3 us together there. The test prints the
//! figures; `metronome compare --churn` reports them.
//!
//! Needs root or CAP_NET_ADMIN and iproute2; fails otherwise (skips, saying why, under
//! `METRONOME_SKIP_PRIVILEGED=1`).

use metronome_testbed::compare::churn::{self, ChurnOptions, ChurnReport};
use metronome_testbed::netns;
use std::path::PathBuf;
use std::time::Duration;

/// Operations: 150 classes added and deleted.
const OPS: usize = 300;
/// One every 10 ms: 3 s of churn.
const PACE: Duration = Duration::from_millis(10);
/// The calm phase.
const CALM: Duration = Duration::from_secs(3);
/// The warm-up (slow start, the first ECN marks).
const WARMUP: Duration = Duration::from_secs(2);
/// The bound on the median `applied_us`: the target's 1 ms, which the median meets with room
/// (see the module docs).
const APPLIED_P50_US: u64 = churn::APPLIED_TARGET_US;
/// The target: a TCP class within 1 % of its rate throughout.
const CHURN_DEVIATION_PCT: f64 = 1.0;
/// How much worse than the calm phase the churn phase may be when the calm phase itself is not
/// within [`CHURN_DEVIATION_PCT`] (a loaded machine): half a percentage point of mean absolute
/// deviation.
const CHURN_MARGIN_PCT: f64 = 0.5;

/// Asserts what must hold in every attempt (see the module docs).
fn assert_nothing_lost(report: &ChurnReport) {
    assert_eq!(report.ops_ok, OPS, "{:?}", report.errors);
    assert_eq!(report.changes_counted, OPS as u64, "{report:#?}");
    let udp = &report.udp;
    assert!(udp.sent > 0 && udp.send_errors == 0, "{udp:?}");
    assert_eq!(udp.lost, 0, "{udp:?}");
    assert_eq!(udp.duplicates, 0, "{udp:?}");
    assert_eq!(udp.class_drops_seen, 0, "{udp:?}");
    // The churn classes did shape the flow: the scrapes saw their packets, and packets queued
    // in them (a scrape every 100 ms, a class queueing part of every 8 ms while it exists).
    assert!(udp.class_packets_seen > 0, "{udp:?}");
    assert!(udp.class_queued_max_seen > 0, "{udp:?}");
    assert_eq!(report.tap_missed, 0, "the tap missed frames");
    for class in &report.classes {
        assert!(
            class.calm.windows >= 25 && class.churn.windows >= 25,
            "{class:?}"
        );
    }
}

/// Whether the rates and the median applied time hold (see the module docs), printing why not.
fn conforms(report: &ChurnReport) -> bool {
    let mut ok = report.applied.p50_us <= APPLIED_P50_US;
    if !ok {
        println!("churn: applied p50 {} us", report.applied.p50_us);
    }
    for class in &report.classes {
        let bound = CHURN_DEVIATION_PCT.max(class.calm.deviation_pct + CHURN_MARGIN_PCT);
        println!(
            "churn: {}: deviation calm {:.2} %, churn {:.2} % (bound {bound:.2} %)",
            class.name, class.calm.deviation_pct, class.churn.deviation_pct
        );
        ok &= class.churn.deviation_pct <= bound;
    }
    ok
}

#[test]
fn classes_added_and_deleted_live_lose_nothing_and_leave_tcp_at_its_rate() {
    let Some(mut topo) = netns::bump_in_the_wire_or_skip(churn::NS_PREFIX, "churn") else {
        return;
    };
    let options = ChurnOptions {
        ops: OPS,
        pace: PACE,
        warmup: WARMUP,
        calm: CALM,
        daemon_binary: Some(PathBuf::from(env!("CARGO_BIN_EXE_metronome"))),
        ..ChurnOptions::full()
    };
    let held = (0..2).any(|attempt| {
        let report = churn::run_on(&mut topo, &options, &mut std::io::stderr())
            .unwrap_or_else(|e| panic!("the churn measurement failed: {e}"));
        println!("attempt {}: {report:#?}", attempt + 1);
        assert_nothing_lost(&report);
        conforms(&report)
    });
    assert!(
        held,
        "the TCP classes' rates or the median applied time did not hold in two attempts"
    );
}
