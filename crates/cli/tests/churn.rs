//! Classes added and deleted through the control socket while TCP runs through other classes,
//! end to end with the built binary: `metronome_testbed::compare::churn` (what `metronome
//! compare --churn` runs) at a size CI can afford: [`OPS`] operations every [`PACE`] after a
//! calm phase of [`CALM`], two file classes of TCP (200 and 100 Mbit/s, 4 flows each), a 4
//! Mbit/s UDP flow that each added class (6 Mbit/s) takes and each deleted class lets go with
//! datagrams still queued in it.
//!
//! Asserted:
//! * every operation was carried out (`"ok": true`), and counted in
//!   `metronome_class_changes_total`;
//! * the daemon's own `applied_us` (request's arrival to the shaping loop applying it) has its
//!   p99 within [`APPLIED_P99_US`];
//! * not one UDP datagram was lost, and the scrapes saw no drop in a churn class;
//! * each TCP class's mean absolute deviation from its rate in 100 ms windows during the churn
//!   is within [`CHURN_DEVIATION_PCT`], or not worse than in the calm phase by more than
//!   [`CHURN_MARGIN_PCT`] (the calm phase is what TCP holds on this machine with no change at
//!   all; see the constants).
//!
//! Needs root or CAP_NET_ADMIN and iproute2; skips, saying why, otherwise (a failure under
//! `METRONOME_REQUIRE_PRIVILEGED=1`).

use metronome_testbed::compare::churn::{self, ChurnOptions};
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
/// The target's bound on an operation's `applied_us`, at the 99th percentile.
const APPLIED_P99_US: u64 = churn::APPLIED_TARGET_US;
/// The target: a TCP class within 1 % of its rate throughout.
const CHURN_DEVIATION_PCT: f64 = 1.0;
/// How much worse than the calm phase the churn phase may be when the calm phase itself is not
/// within [`CHURN_DEVIATION_PCT`] (a loaded machine): half a percentage point of mean absolute
/// deviation.
const CHURN_MARGIN_PCT: f64 = 0.5;

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
    let report = churn::run_on(&mut topo, &options, &mut std::io::stderr())
        .unwrap_or_else(|e| panic!("the churn measurement failed: {e}"));
    println!("{report:#?}");

    assert_eq!(report.ops_ok, OPS, "{:?}", report.errors);
    assert_eq!(report.changes_counted, OPS as u64, "{report:#?}");
    assert!(
        report.applied.p99_us <= APPLIED_P99_US,
        "applied p99 {} us: {:?}",
        report.applied.p99_us,
        report.applied
    );
    let udp = &report.udp;
    assert!(udp.sent > 0 && udp.send_errors == 0, "{udp:?}");
    assert_eq!(udp.lost, 0, "{udp:?}");
    assert_eq!(udp.class_drops_seen, 0, "{udp:?}");
    // The churn classes did shape the flow: the scrapes saw their packets.
    assert!(udp.class_packets_seen > 0, "{udp:?}");
    assert_eq!(report.tap_missed, 0, "the tap missed frames");
    for class in &report.classes {
        assert!(
            class.calm.windows >= 20 && class.churn.windows >= 20,
            "{class:?}"
        );
        let bound = CHURN_DEVIATION_PCT.max(class.calm.deviation_pct + CHURN_MARGIN_PCT);
        assert!(
            class.churn.deviation_pct <= bound,
            "{}: churn {:.2} % (calm {:.2} %), bound {bound:.2} %",
            class.name,
            class.churn.deviation_pct,
            class.calm.deviation_pct
        );
    }
}
