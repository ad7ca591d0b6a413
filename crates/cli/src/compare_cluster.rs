//! `metronome compare cluster`: one limit enforced by three daemons together through etcd (a
//! cluster class), while the traffic moves between the sites, a daemon is killed and etcd fails
//! (what is run and measured: `metronome_testbed::compare::cluster`).
//!
//! Each site's daemon is this binary's `run`; the etcd members are Debian's `etcd` (or the
//! binary named by `METRONOME_ETCD`). `--per-host` runs the same sequence with a per-host class
//! of half the limit on each daemon instead (the static split a cluster class replaces).
//!
//! Output: one line per step of the sequence (the start, a site stopping and its return, a
//! daemon killed, an etcd member killed, etcd gone), each with its figures and the target it is
//! measured against, then the events' times. With `--json` a [`ClusterDocument`] (its schema:
//! `metronome compare schema cluster`); a step that failed carries its `"error"`. Progress lines
//! go to standard error. Without CAP_NET_ADMIN: one line naming the privilege, exit status 2.

use crate::compare_cmd::or_exit;
use metronome_testbed::compare::cluster::{self, ClusterOptions, ClusterReport, Enforcement};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The `--json` document.
#[derive(Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct ClusterDocument {
    pub(crate) machine: String,
    #[serde(flatten)]
    pub(crate) report: ClusterReport,
}

/// The options of a run: the scenario of the targets, with this binary as the daemons.
pub fn options(per_host: bool) -> ClusterOptions {
    ClusterOptions {
        enforcement: if per_host {
            Enforcement::PerHost
        } else {
            Enforcement::Cluster
        },
        daemon_binary: std::env::current_exe().ok(),
        ..ClusterOptions::default()
    }
}

/// The text output of `report`: its steps, then its events.
pub fn format_report(report: &ClusterReport) -> String {
    let mut out = format!(
        "{} sites ({} busy, {} TCP flows each), {} limit {:.0} Mbit/s, period {:.0} s, lease \
         {:.0} s, hold {:.0} s, floor {:.2} Mbit/s\n",
        report.sites.len(),
        report.busy.join(" and "),
        report.flows,
        report.enforcement.name(),
        report.limit_bps as f64 / 1e6,
        report.period_s,
        report.lease_s,
        report.hold_s,
        report.floor_bps as f64 / 1e6
    );
    for line in cluster::describe(report) {
        out += &line;
        out.push('\n');
    }
    let events: Vec<String> = report
        .events
        .iter()
        .map(|e| format!("{:.2} s {}", e.at_s, e.what))
        .collect();
    if !events.is_empty() {
        out += &format!("events: {}\n", events.join("; "));
    }
    out
}

/// Runs `metronome compare --cluster`.
pub fn run(per_host: bool, json: bool) -> anyhow::Result<()> {
    let options = options(per_host);
    let report = or_exit(cluster::run(&options, &mut std::io::stderr()));
    let machine = metronome_bench::machine::describe();
    if json {
        let doc = ClusterDocument { machine, report };
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    println!("metronome compare --cluster on {machine}");
    print!("{}", format_report(&report));
    println!(
        "rates: each site's bytes on the wire at its receiver in 100 ms windows, judged on the \
         median of three consecutive windows; shares: each daemon's \
         metronome_cluster_share_bps, scraped every 200 ms; times from the event to the end of \
         the first window from which the target holds (the first window that meets it in the \
         first span whose median does)"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> ClusterReport {
        let text = r#"{"enforcement": "cluster", "limit_bps": 300000000, "period_s": 1.0,
            "lease_s": 3.0, "hold_s": 3.0, "floor_bps": 3000000,
            "sites": ["site-a", "site-b", "site-c"], "busy": ["site-a", "site-b"], "flows": 4,
            "error": "site-a: the daemon refused", "start": null, "shift": null, "rejoin": null,
            "member_killed": null, "crash": null, "etcd_gone": null, "events": [],
            "stop_errors": [], "windows": [], "scrapes": []}"#;
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn an_error_is_said_and_no_figure_is_printed() {
        let text = format_report(&report());
        assert!(
            text.contains("not measured: site-a: the daemon refused"),
            "{text}"
        );
        assert!(text.contains("cluster limit 300 Mbit/s"), "{text}");
        assert!(!text.contains("a. start"), "{text}");
    }

    #[test]
    fn the_json_keeps_the_report_fields_beside_the_machine() {
        let doc = ClusterDocument {
            machine: "test".into(),
            report: report(),
        };
        let text = serde_json::to_string(&doc).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["machine"], "test");
        assert_eq!(v["enforcement"], "cluster");
        assert!(v["start"].is_null(), "{text}");
        let back: ClusterDocument = serde_json::from_str(&text).unwrap();
        assert_eq!(back, doc);
    }

    #[test]
    fn per_host_is_the_static_split() {
        assert_eq!(options(true).enforcement, Enforcement::PerHost);
        let o = options(false);
        assert_eq!(o.enforcement, Enforcement::Cluster);
        assert!(o.daemon_binary.is_some());
    }
}
