//! `metronome compare attach`: the daemon attached in place to a host's uplink against the
//! kernel's qdiscs on the same uplink (what is run and measured:
//! `metronome_testbed::compare::attach`; the options: [`crate::compare_args::AttachArgs`]).
//!
//! Output: the host part as the side-by-side table of `metronome compare`
//! ([`crate::compare_cmd::format_table`]), a row whose shaper could not run shown as `-` and its
//! error listed under the table; then the workload part, one line per workload with each
//! shaper's rate and deviation, and a summary line per shaper. With `--json` an
//! [`AttachDocument`] on standard output (its schema: `metronome compare schema attach`); a row
//! that could not run carries its `"error"` and no figures. Progress lines go to standard error.
//! Without CAP_NET_ADMIN: one line naming the privilege, exit status 2.

use crate::compare_args::AttachArgs;
use crate::compare_cmd::{format_table, or_exit};
use crate::compare_table::{header, rate_cells, Block, RATE_COLUMNS};
use metronome_testbed::compare::attach::{self, AttachOptions, AttachReport, HostRow, WorkloadRow};
use metronome_testbed::compare::{RunReport, Shaper};
use metronome_testbed::offloads::OffloadMode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt::Write;

/// The `--json` document.
#[derive(Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct AttachDocument {
    pub(crate) machine: String,
    #[serde(flatten)]
    pub(crate) report: AttachReport,
}

/// The host part's table and the errors of the rows that could not run.
pub fn format_host(rows: &[HostRow]) -> String {
    let measured: Vec<RunReport> = rows
        .iter()
        .filter_map(|r| match r {
            HostRow::Measured(row) => Some(RunReport {
                row: row.clone(),
                windows: 0,
                probe_samples: 0,
            }),
            HostRow::Failed { .. } => None,
        })
        .collect();
    let mut out = String::from("the host's own TCP through the uplink\n");
    if !measured.is_empty() {
        out += &format_table(&measured, OffloadMode::Host);
        out += "here daemon %/G is the whole `metronome run` process's CPU (user + system time of \
                all its threads, /proc/PID/stat)\n";
        out += &format_queues(rows);
    }
    for r in rows {
        if let HostRow::Failed {
            shaper,
            target_bps,
            flows,
            error,
        } = r
        {
            let _ = writeln!(
                out,
                "{} at {:.0} Mbit/s with {flows} flows: not measured: {error}",
                shaper.name(),
                *target_bps as f64 / 1e6
            );
        }
    }
    out
}

/// What each measured row's shaper held and lost and what the host's sockets resent, a line
/// each ([`metronome_testbed::compare::measure::QueueAccount`]); empty when no row has it.
pub fn format_queues(rows: &[HostRow]) -> String {
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".to_owned());
    let mut lines = String::new();
    for r in rows {
        let HostRow::Measured(row) = r else { continue };
        let Some(q) = &row.queue else { continue };
        let _ = writeln!(
            lines,
            "{:<14} {:>6.0} Mbit/s {:>4} flows: {:>8} retransmitted, {:>6} dropped, {:>7} held \
             per flow, {:>6} sockets slowed",
            row.shaper.name(),
            row.target_bps as f64 / 1e6,
            row.flows,
            opt(q.retransmitted_segments.map(|v| v.to_string())),
            opt(q.shaper_drops.map(|v| v.to_string())),
            opt(q.held_per_flow.map(|v| format!("{v:.2}"))),
            opt(q.sockets_slowed.map(|v| format!("{v:.0}"))),
        );
    }
    if lines.is_empty() {
        return lines;
    }
    format!(
        "backpressure over each run: TCP segments the host retransmitted, frames the shaper \
         dropped, frames the daemon held per flow of a paced class and the sockets it slowed \
         (means of {} scrapes after the measured windows)\n{lines}",
        metronome_testbed::compare::measure::HELD_SAMPLES
    )
}

/// The workload part: one line per workload, each shaper's rate and deviation side by side, a
/// summary line per shaper (mean rate, the largest error from the limit), and the errors.
pub fn format_workloads(rows: &[WorkloadRow]) -> String {
    let Some(first) = rows.first() else {
        return String::new();
    };
    let shapers: Vec<Shaper> = Shaper::WORKLOADS
        .into_iter()
        .filter(|s| rows.iter().any(|r| r.shaper == *s))
        .collect();
    let mut names: Vec<&str> = Vec::new();
    for r in rows {
        if !names.contains(&r.workload.as_str()) {
            names.push(&r.workload);
        }
    }
    let blocks: Vec<Block> = shapers
        .iter()
        .map(|s| Block::new(s.name(), &RATE_COLUMNS))
        .collect();
    let (top, sub) = header(&format!("{:<9}", "workload"), &" ".repeat(9), &blocks);
    let mut out = format!(
        "workloads: {} x {} TCP flows, each limited to {:.0} Mbit/s\n{top}\n{sub}\n",
        names.len(),
        first.flows,
        first.target_bps as f64 / 1e6,
    );
    for name in &names {
        let _ = write!(out, "{name:<9}");
        for (s, block) in shapers.iter().zip(&blocks) {
            let row = rows.iter().find(|r| r.shaper == *s && r.workload == *name);
            out += &rate_cells(block, row.and_then(|r| r.achieved_bps.zip(r.deviation_pct)));
        }
        out.push('\n');
    }
    for s in &shapers {
        let measured: Vec<(f64, u64)> = rows
            .iter()
            .filter(|r| r.shaper == *s)
            .filter_map(|r| r.achieved_bps.map(|a| (a, r.target_bps)))
            .collect();
        if measured.is_empty() {
            continue;
        }
        let mean = measured.iter().map(|m| m.0).sum::<f64>() / measured.len() as f64;
        let worst = largest_error_pct(measured.iter().copied());
        let _ = writeln!(
            out,
            "{}: {} workloads measured, mean {:.2} Mbit/s, largest error from the limit {:+.2} %",
            s.name(),
            measured.len(),
            mean / 1e6,
            worst
        );
    }
    write_not_measured(
        &mut out,
        rows.iter().map(|r| (r.shaper.name(), r.error.as_deref())),
    );
    out += "Mbit/s: the workload's goodput at the receiver in 100 ms windows after the warm-up, \
            scaled to full segments on the wire; dev %: the windows' mean absolute deviation \
            from the limit\n\
            htb-u32: one HTB class per workload on the uplink, u32 filters on the source address; \
            ifb-tbf: the bandwidth plugin's IFB per workload (veth ingress redirected) with a TBF \
            holding 25 ms\n";
    out
}

/// The signed error from its limit, in percent, of the achieved rate farthest from its own
/// limit among `measured` (`(achieved bits/s, limit bits/s)`); 0 for none.
pub fn largest_error_pct(measured: impl Iterator<Item = (f64, u64)>) -> f64 {
    measured
        .map(|(a, t)| 100.0 * (a / t as f64 - 1.0))
        .fold(0.0_f64, |w, e| if e.abs() > w.abs() { e } else { w })
}

/// One line `SHAPER: not measured: WHY` per row of `rows` (`(shaper, its error)`) that has an
/// error, a run of the same line written once.
pub fn write_not_measured<'a>(
    out: &mut String,
    rows: impl Iterator<Item = (&'a str, Option<&'a str>)>,
) {
    let mut errors: Vec<String> = rows
        .filter_map(|(shaper, e)| e.map(|e| format!("{shaper}: not measured: {e}")))
        .collect();
    errors.dedup();
    for e in errors {
        let _ = writeln!(out, "{e}");
    }
}

/// The comparison's options from the command line's.
fn options(args: &AttachArgs) -> AttachOptions {
    let mut options = if args.run.quick {
        AttachOptions::quick()
    } else {
        AttachOptions::full()
    };
    options.isolate_daemon = args.isolate_daemon;
    options.workload_link = args.workload_link;
    options.pace_sockets = args.pace_sockets;
    options.congestion = args.congestion.clone();
    options.ecn = !args.no_ecn;
    options.daemon_loop = args.slack.daemon_loop(false);
    // The daemon rows run this very binary's `run`.
    options.daemon_binary = std::env::current_exe().ok();
    if !args.target.is_empty() {
        options.targets_bps = args.target.iter().map(|r| r.bps()).collect();
    }
    if !args.flows.is_empty() {
        options.flows = args.flows.clone();
    }
    if !args.shapers.is_empty() {
        options.host_shapers = args.shapers.clone();
    }
    if args.no_workloads {
        options.workloads = 0;
    }
    options
}

/// Runs `metronome compare --attach`.
pub fn run(args: &AttachArgs) -> anyhow::Result<()> {
    let options = options(args);
    let json = args.run.output.json;
    let report = or_exit(attach::run(&options, &mut std::io::stderr()));
    let machine = metronome_bench::machine::describe();
    if json {
        let doc = AttachDocument { machine, report };
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        println!("metronome compare --attach on {machine}");
        println!("steering: {}", report.steering);
        println!("workloads joined the host: {}", report.workload_link.name());
        println!(
            "the host's TCP: {}",
            report
                .congestion
                .as_deref()
                .unwrap_or("the host namespace's default congestion control")
        );
        println!(
            "ECN: {}",
            if report.ecn {
                "on the senders, and ECN backpressure at 1 ms in the daemon's host class"
            } else {
                "off"
            }
        );
        if let Some(mode) = &report.daemon_loop {
            println!("the daemon's loop: {mode}");
        }
        print!("{}", format_host(&report.host));
        println!();
        print!("{}", format_workloads(&report.workloads));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use metronome_testbed::compare::measure::QueueAccount;
    use metronome_testbed::compare::{Row, Shaper};
    use metronome_testbed::netns::attach::WorkloadLink;

    fn row(shaper: Shaper, achieved: f64) -> HostRow {
        HostRow::Measured(Row {
            shaper,
            target_bps: 100_000_000,
            flows: 16,
            achieved_bps: achieved,
            deviation_pct: 1.5,
            rtt_p99_us: Some(900),
            rtt_p50_us: Some(400),
            cpu_pct: 12.0,
            daemon_cpu_pct: None,
            jain_bulk: Some(0.99),
            cpu_account: None,
            queue: (shaper == Shaper::Htb).then_some(QueueAccount {
                retransmitted_segments: Some(3),
                shaper_drops: Some(0),
                held_per_flow: None,
                sockets_slowed: None,
            }),
        })
    }

    fn failed() -> HostRow {
        HostRow::Failed {
            shaper: Shaper::Metronome,
            target_bps: 100_000_000,
            flows: 16,
            error: "the daemon refused the attach configuration: unknown field `attach`".into(),
        }
    }

    fn workload(shaper: Shaper, name: &str, achieved: Option<f64>) -> WorkloadRow {
        WorkloadRow {
            shaper,
            workload: name.into(),
            target_bps: 100_000_000,
            flows: 4,
            achieved_bps: achieved,
            deviation_pct: achieved.map(|_| 2.0),
            error: achieved.is_none().then(|| "refused".to_owned()),
        }
    }

    #[test]
    fn a_failed_host_row_shows_its_error_and_no_figure() {
        let text = format_host(&[failed(), row(Shaper::Htb, 99_500_000.0)]);
        assert!(text.contains("99.50"), "{text}");
        assert!(
            text.contains(
                "metronome at 100 Mbit/s with 16 flows: not measured: the daemon refused"
            ),
            "{text}"
        );
        // The table has no metronome block: the failed row is not a figure.
        assert!(!text.contains("| metronome"), "{text}");
        assert!(
            text.contains("3 retransmitted,      0 dropped,       - held per flow"),
            "{text}"
        );
    }

    #[test]
    fn the_json_keeps_errors_and_figures_apart() {
        let doc = AttachDocument {
            machine: "test".into(),
            report: AttachReport {
                steering: "none".into(),
                workload_link: WorkloadLink::Routed,
                pace_sockets: true,
                congestion: None,
                ecn: true,
                daemon_loop: None,
                host: vec![failed(), row(Shaper::Tbf, 1e8)],
                workloads: vec![
                    workload(Shaper::Metronome, "hv0", None),
                    workload(Shaper::IfbTbf, "hv0", Some(1e8)),
                ],
            },
        };
        let text = serde_json::to_string(&doc).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["steering"], "none");
        assert_eq!(v["workload_link"], "routed");
        assert!(v["host"][0]["error"].is_string(), "{text}");
        assert!(v["host"][0].get("achieved_bps").is_none(), "{text}");
        assert_eq!(v["host"][1]["shaper"], "tbf");
        assert!(v["host"][1].get("error").is_none(), "{text}");
        assert!(v["workloads"][0]["achieved_bps"].is_null(), "{text}");
        assert_eq!(v["workloads"][1]["shaper"], "ifb-tbf");
        let back: AttachDocument = serde_json::from_str(&text).unwrap();
        assert_eq!(back, doc);
    }

    #[test]
    fn the_workload_table_has_one_line_per_workload_and_a_summary_per_shaper() {
        let rows = vec![
            workload(Shaper::HtbU32, "hv0", Some(99e6)),
            workload(Shaper::HtbU32, "hv1", Some(102e6)),
            workload(Shaper::IfbTbf, "hv0", Some(100e6)),
            workload(Shaper::IfbTbf, "hv1", Some(100e6)),
        ];
        let text = format_workloads(&rows);
        assert!(text.contains("workloads: 2 x 4 TCP flows"), "{text}");
        assert_eq!(text.lines().filter(|l| l.starts_with("hv")).count(), 2);
        let summary = "htb-u32: 2 workloads measured, mean 100.50 Mbit/s, largest error from the \
                       limit +2.00 %";
        assert!(text.contains(summary), "{text}");
    }

    #[test]
    fn the_table_is_the_golden_one_to_the_byte() {
        let rows = vec![
            workload(Shaper::Metronome, "hv0", Some(99.5e6)),
            workload(Shaper::HtbU32, "hv0", Some(101.25e6)),
            workload(Shaper::Metronome, "hv1", None),
            workload(Shaper::IfbTbf, "hv1", Some(97e6)),
        ];
        assert_eq!(
            format_workloads(&rows),
            include_str!("../tests/golden/compare_workloads.txt")
        );
    }
}
