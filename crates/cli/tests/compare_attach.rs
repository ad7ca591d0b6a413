//! `metronome compare --attach`'s runs end to end with the built binary as the daemon
//! (`metronome run` attached to the uplink of a `metronome_testbed::netns::attach` topology): the
//! host's own 16 TCP flows into one class at 100 Mbit/s (and HTB on the same uplink beside it),
//! then 8 workloads of 4 flows each, one class per workload by `from` at 100 Mbit/s.
//!
//! Asserted: every row was measured (a daemon that refused its configuration, did not come up
//! or did not stop cleanly would be a row with an error), the host's rate within
//! [`TOLERANCE`] of the target for both shapers and each workload's within [`TOLERANCE`] of its
//! limit; the topology's namespaces are gone afterwards. Prints the rows (`--nocapture`). Needs
//! CAP_NET_ADMIN; fails otherwise (skips, saying why, under `METRONOME_SKIP_PRIVILEGED=1`).

use metronome_testbed::compare::attach::{self, AttachOptions, HostRow, NS_PREFIX};
use metronome_testbed::compare::Shaper;
use metronome_testbed::netns;
use std::time::Duration;

/// Tolerance: 5 %, loose enough for kernel TCP on a shared 2-core machine.
const TOLERANCE: f64 = 0.05;
/// Target of the host part and limit of each workload, bits/s.
const RATE_BPS: u64 = 100_000_000;

#[test]
fn attached_daemon_and_kernel_rows_hold_their_rates() {
    let options = AttachOptions {
        targets_bps: vec![RATE_BPS],
        flows: vec![16],
        host_shapers: vec![Shaper::Metronome, Shaper::Htb],
        workload_rate_bps: RATE_BPS,
        workload_shapers: vec![Shaper::Metronome],
        warmup: Duration::from_secs(1),
        measure: Duration::from_secs(2),
        daemon_binary: Some(env!("CARGO_BIN_EXE_metronome").into()),
        ..AttachOptions::quick()
    };
    let report = match attach::run(&options, &mut std::io::stdout()) {
        Ok(r) => r,
        Err(e) if e.is_missing_privilege() => {
            netns::skip_unprivileged("compare_attach", &e);
            return;
        }
        Err(e) => panic!("compare --attach failed: {e}"),
    };
    assert_eq!(report.host.len(), 2, "{report:?}");
    for row in &report.host {
        let HostRow::Measured(r) = row else {
            panic!("not measured: {row:?}");
        };
        let err = (r.achieved_bps / RATE_BPS as f64 - 1.0).abs();
        assert!(err <= TOLERANCE, "{}: {r:?}", r.shaper.name());
        if r.shaper == Shaper::Metronome {
            assert!(r.daemon_cpu_pct.is_some(), "{r:?}");
        }
    }
    assert_eq!(report.workloads.len(), 8, "{report:?}");
    for w in &report.workloads {
        assert_eq!(w.error, None, "{w:?}");
        let achieved = w.achieved_bps.expect("measured");
        let err = (achieved / RATE_BPS as f64 - 1.0).abs();
        assert!(err <= TOLERANCE, "{w:?}");
    }
    let left: Vec<String> = std::fs::read_dir(netns::NETNS_RUN_DIR)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&format!("{NS_PREFIX}-{}-", std::process::id())))
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "namespaces left: {left:?}");
}
