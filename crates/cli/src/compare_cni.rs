//! `metronome compare cni`: pods limited through a chained CNI plugin, `metronome-cni` against
//! the containernetworking `bandwidth` plugin (what is run and measured:
//! `metronome_testbed::compare::cni`).
//!
//! The `metronome-cni` rows run this binary's `run` as the node's daemon and the
//! `metronome-cni` binary next to it (`target/<profile>/metronome-cni`, as Cargo builds both).
//!
//! Output: per rate, one line per pod with each shaper's egress and ingress rate and deviation
//! side by side ([`format_pods`]), a summary line per shaper and direction, the errors; the fair
//! probe's RTT per shaper; the cycle check's leftovers per shaper. With `--json` a
//! [`CniDocument`] (its schema: `metronome compare schema cni`; a pod's rate is its windows'
//! median). Progress lines go to standard error. Without CAP_NET_ADMIN: one line naming the
//! privilege, exit status 2.

use crate::compare_attach::{largest_error_pct, write_not_measured};
use crate::compare_cmd::or_exit;
use crate::compare_table::{header, rate_cells, Block, RATE_COLUMNS};
use metronome_testbed::compare::cni::{
    self, CniOptions, CniReport, CycleRow, Direction, PodRow, ProbeRow,
};
use metronome_testbed::compare::Shaper;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt::Write;

/// What `--cni` was asked for on the command line (`None`/empty: the defaults of
/// [`CniOptions`]).
#[derive(Debug, Default)]
pub struct CniArgs {
    /// `--quick`.
    pub quick: bool,
    /// `--pods`.
    pub pods: Option<usize>,
    /// `--rates`, bits/s.
    pub rates_bps: Vec<u64>,
    /// `--flows`.
    pub flows: Option<usize>,
}

/// The `--json` document.
#[derive(Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct CniDocument {
    pub(crate) machine: String,
    #[serde(flatten)]
    pub(crate) report: CniReport,
}

/// The options of a run of `args`.
pub fn options(args: &CniArgs) -> CniOptions {
    let mut options = if args.quick {
        CniOptions::quick()
    } else {
        CniOptions::full()
    };
    if let Some(p) = args.pods {
        options.pods = p;
    }
    if !args.rates_bps.is_empty() {
        options.rates_bps = args.rates_bps.clone();
    }
    if let Some(f) = args.flows {
        options.flows = f;
    }
    let exe = std::env::current_exe().ok();
    options.plugin_binary = exe
        .as_ref()
        .and_then(|e| e.parent())
        .map(|d| d.join("metronome-cni"));
    options.daemon_binary = exe;
    options
}

/// The per-pod table of one rate: each pod's egress and ingress under each shaper, then a
/// summary per shaper and direction and the errors.
pub fn format_pods(rows: &[PodRow], rate_bps: u64) -> String {
    let rows: Vec<&PodRow> = rows.iter().filter(|r| r.target_bps == rate_bps).collect();
    let Some(first) = rows.first() else {
        return String::new();
    };
    let shapers: Vec<Shaper> = Shaper::PODS
        .into_iter()
        .filter(|s| rows.iter().any(|r| r.shaper == *s))
        .collect();
    let mut pods: Vec<&str> = Vec::new();
    for r in &rows {
        if !pods.contains(&r.pod.as_str()) {
            pods.push(&r.pod);
        }
    }
    let arms: Vec<(Shaper, Direction)> = shapers
        .iter()
        .flat_map(|&s| Direction::BOTH.map(|d| (s, d)))
        .collect();
    let blocks: Vec<Block> = arms
        .iter()
        .map(|(s, d)| Block::new(format!("{} {}", s.name(), d.name()), &RATE_COLUMNS))
        .collect();
    let (top, sub) = header(&format!("{:<5}", "pod"), &" ".repeat(5), &blocks);
    let mut out = format!(
        "{} pods at {:.0} Mbit/s each way, {} TCP flows per pod and direction\n{top}\n{sub}\n",
        pods.len(),
        rate_bps as f64 / 1e6,
        first.flows,
    );
    for pod in &pods {
        let _ = write!(out, "{pod:<5}");
        for (&(s, d), block) in arms.iter().zip(&blocks) {
            let row = rows
                .iter()
                .find(|r| r.shaper == s && r.direction == d && r.pod == *pod);
            out += &rate_cells(block, row.and_then(|r| r.achieved_bps.zip(r.deviation_pct)));
        }
        out.push('\n');
    }
    for s in &shapers {
        for d in Direction::BOTH {
            let measured: Vec<f64> = rows
                .iter()
                .filter(|r| r.shaper == *s && r.direction == d)
                .filter_map(|r| r.achieved_bps)
                .collect();
            if measured.is_empty() {
                continue;
            }
            let worst = largest_error_pct(measured.iter().map(|&a| (a, rate_bps)));
            let _ = writeln!(
                out,
                "{} {}: {} pods measured, largest error from the limit {:+.2} %",
                s.name(),
                d.name(),
                measured.len(),
                worst
            );
        }
    }
    write_not_measured(
        &mut out,
        rows.iter().map(|r| (r.shaper.name(), r.error.as_deref())),
    );
    out
}

/// The probe lines and the cycle lines.
pub fn format_probes_and_cycles(probes: &[ProbeRow], cycles: &[CycleRow]) -> String {
    let mut out = String::new();
    for p in probes {
        let _ = writeln!(out, "{}", cni::describe_probe_row(p));
    }
    for c in cycles {
        let _ = writeln!(out, "{}", cni::describe_cycle_row(c));
    }
    out
}

/// Runs `metronome compare --cni`.
pub fn run(args: &CniArgs, json: bool) -> anyhow::Result<()> {
    let options = options(args);
    let report = or_exit(cni::run(&options, &mut std::io::stderr()));
    let machine = metronome_bench::machine::describe();
    if json {
        let doc = CniDocument { machine, report };
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    println!("metronome compare --cni on {machine}");
    for &rate in &options.rates_bps {
        print!("{}", format_pods(&report.pods, rate));
        println!();
    }
    print!(
        "{}",
        format_probes_and_cycles(&report.probes, &report.cycles)
    );
    println!(
        "Mbit/s: the median of the pod's 100 ms goodput windows after the warm-up, scaled to \
         full segments on the wire; dev %: the windows' mean absolute deviation from the limit\n\
         metronome-cni: the pod's classes (`from` its host veth for egress, `to` it for ingress, \
         fair) on the node's daemon; bandwidth: the containernetworking plugin's IFB with a TBF \
         (egress) and a TBF on the host veth (ingress), each holding 25 ms"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(shaper: Shaper, direction: Direction, pod: &str, a: Option<f64>) -> PodRow {
        PodRow {
            shaper,
            target_bps: 100_000_000,
            direction,
            pod: pod.into(),
            flows: 4,
            achieved_bps: a,
            mean_bps: a,
            deviation_pct: a.map(|_| 1.0),
            error: a.is_none().then(|| "the daemon refused".to_owned()),
        }
    }

    #[test]
    fn the_table_has_one_line_per_pod_and_a_summary_per_shaper_and_direction() {
        let rows = vec![
            row(Shaper::Bandwidth, Direction::Egress, "p0", Some(99e6)),
            row(Shaper::Bandwidth, Direction::Ingress, "p0", Some(101e6)),
            row(Shaper::Bandwidth, Direction::Egress, "p1", Some(100e6)),
            row(Shaper::Bandwidth, Direction::Ingress, "p1", Some(100e6)),
            row(Shaper::MetronomeCni, Direction::Egress, "p0", None),
        ];
        let text = format_pods(&rows, 100_000_000);
        assert_eq!(
            text.lines().filter(|l| l.starts_with('p')).count(),
            3,
            "{text}"
        );
        assert!(
            text.contains(
                "bandwidth ingress: 2 pods measured, largest error from the limit +1.00 %"
            ),
            "{text}"
        );
        assert!(
            text.contains("metronome-cni: not measured: the daemon refused"),
            "{text}"
        );
        // Another rate has no rows.
        assert!(format_pods(&rows, 1).is_empty());
    }

    #[test]
    fn the_plugin_is_found_next_to_this_binary() {
        let o = options(&CniArgs {
            pods: Some(3),
            rates_bps: vec![5_000_000],
            ..CniArgs::default()
        });
        assert_eq!(
            (o.pods, o.rates_bps.clone(), o.flows),
            (3, vec![5_000_000], 4)
        );
        let (daemon, plugin) = (o.daemon_binary.unwrap(), o.plugin_binary.unwrap());
        assert_eq!(plugin.parent(), daemon.parent());
        assert_eq!(plugin.file_name().unwrap(), "metronome-cni");
    }

    #[test]
    fn the_json_keeps_errors_and_figures_apart() {
        let doc = CniDocument {
            machine: "test".into(),
            report: CniReport {
                pods: vec![
                    row(Shaper::MetronomeCni, Direction::Egress, "p0", None),
                    row(Shaper::Bandwidth, Direction::Ingress, "p0", Some(1e8)),
                ],
                probes: Vec::new(),
                cycles: vec![CycleRow {
                    shaper: Shaper::Bandwidth,
                    cycles: 100,
                    failed: 0,
                    leftovers: Vec::new(),
                    error: None,
                }],
            },
        };
        let text = serde_json::to_string(&doc).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert!(v["pods"][0]["achieved_bps"].is_null(), "{text}");
        assert!(v["pods"][0]["error"].is_string(), "{text}");
        assert_eq!(v["pods"][1]["direction"], "ingress");
        assert!(v["pods"][1].get("error").is_none(), "{text}");
        assert_eq!(v["cycles"][0]["cycles"], 100);
        let back: CniDocument = serde_json::from_str(&text).unwrap();
        assert_eq!(back, doc);
    }

    #[test]
    fn the_table_is_the_golden_one_to_the_byte() {
        let rows = vec![
            row(Shaper::Bandwidth, Direction::Egress, "p0", Some(99e6)),
            row(Shaper::Bandwidth, Direction::Ingress, "p0", Some(101e6)),
            row(
                Shaper::MetronomeCni,
                Direction::Ingress,
                "p1",
                Some(100.5e6),
            ),
            row(Shaper::MetronomeCni, Direction::Egress, "p0", None),
        ];
        assert_eq!(
            format_pods(&rows, 100_000_000),
            include_str!("../tests/golden/compare_pods.txt")
        );
    }
}
