//! `metronome compare [--quick] [--json]`: Metronome, kernel HTB and kernel TBF on the same
//! sender/shaper/receiver topology with the same kernel TCP traffic, at 100 Mbit/s, 500 Mbit/s,
//! 1 Gbit/s and 2 Gbit/s with 1, 16 and 256 flows (`--quick`: 100 Mbit/s and 1 Gbit/s with 16
//! flows). What is measured, and how, is documented in `metronome_testbed::compare`.
//!
//! Output: the side-by-side table ([`format_table`]: one line per (target, flows), the shapers
//! side by side, the metronome block with the daemon thread's own CPU besides), or with `--json`
//! exactly `{"rows": [{"shaper", "target_bps", "flows", "achieved_bps", "deviation_pct",
//! "rtt_p99_us", "cpu_pct"}, ...]}` on standard output. Progress lines go to standard error.
//! Without CAP_NET_ADMIN: one line naming the privilege, exit status 2. Everything created is
//! removed at the end, on an error and on Ctrl-C (`metronome_testbed::netns::cleanup_on_signals`,
//! installed by `main` before any thread starts).

use crate::compare_plot;
use clap::Args;
use metronome_testbed::compare::{self, CompareOptions, Row, RunReport, Shaper};
use std::fmt::Write;

/// Options of `metronome compare`.
#[derive(Args, Debug)]
pub struct CompareArgs {
    /// Only 100 Mbit/s and 1 Gbit/s with 16 flows (under a minute).
    #[arg(long)]
    quick: bool,
    /// Print `{"rows": [...]}` instead of the table.
    #[arg(long)]
    json: bool,
    /// Only these target rates, tc-like (`100mbit,1gbit`), instead of the grid's.
    #[arg(long, value_delimiter = ',')]
    target: Vec<metronome_core::Rate>,
    /// Only these flow counts (`1,16,256`), instead of the grid's.
    #[arg(long, value_delimiter = ',')]
    flows: Vec<usize>,
    /// Throughput ceiling instead: one TCP flow at an unreachable target (40 Gbit/s) through the
    /// plain recvmmsg/sendmmsg forwarder, the daemon passing everything, and the daemon shaping,
    /// three times in turn, with all offloads off.
    #[arg(long, conflicts_with = "quick")]
    ceiling: bool,
    /// Also draw SVG plots of the rows (deviation, achieved rate, probe RTT, CPU vs target) into DIR.
    #[arg(long, value_name = "DIR")]
    plot: Option<std::path::PathBuf>,
    /// Do not run: read the rows of a saved `--json` output and draw them (needs `--plot`).
    #[arg(long, value_name = "FILE", requires = "plot")]
    replot: Option<std::path::PathBuf>,
}

/// Width of one shaper's block, without the daemon column.
const BLOCK: usize = 35;
/// Width of the daemon-thread CPU column of the metronome block.
const DAEMON: usize = 8;

fn header(shapers: &[Shaper]) -> String {
    let mut top = format!("{:<17}", "");
    let mut sub = format!("{:<11}{:>6}", "target", "flows");
    for &s in shapers {
        let width = BLOCK + if s == Shaper::Metronome { DAEMON } else { 0 };
        let _ = write!(top, " | {:<width$}", s.name());
        let _ = write!(
            sub,
            " | {:>9} {:>7} {:>8} {:>8}",
            "Mbit/s", "dev %", "p99 us", "cpu %/G"
        );
        if s == Shaper::Metronome {
            let _ = write!(sub, " {:>7}", "daemon");
        }
    }
    format!("{}\n{}\n", top.trim_end(), sub)
}

fn block(report: Option<&RunReport>, shaper: Shaper) -> String {
    let Some(r) = report else {
        let width = BLOCK
            + if shaper == Shaper::Metronome {
                DAEMON
            } else {
                0
            };
        return format!(" | {:<width$}", "-");
    };
    let row = &r.row;
    let mut s = format!(
        " | {:>9.2} {:>7.2} {:>8} {:>8.1}",
        row.achieved_bps / 1e6,
        row.deviation_pct,
        row.rtt_p99_us,
        row.cpu_pct
    );
    if shaper == Shaper::Metronome {
        match r.daemon_cpu_pct {
            Some(d) => {
                let _ = write!(s, " {d:>7.1}");
            }
            None => s.push_str(&format!(" {:>7}", "-")),
        }
    }
    s
}

/// Formats `reports` as the side-by-side table, in the order the (target, flows) pairs first
/// appear, with a legend.
pub fn format_table(reports: &[RunReport]) -> String {
    let mut shapers: Vec<Shaper> = Vec::new();
    let mut keys: Vec<(u64, usize)> = Vec::new();
    for r in reports {
        if !shapers.contains(&r.row.shaper) {
            shapers.push(r.row.shaper);
        }
        let key = (r.row.target_bps, r.row.flows);
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    let mut out = header(&shapers);
    for (target, flows) in keys {
        let _ = write!(
            out,
            "{:<11}{:>6}",
            format!("{:.0} Mbit/s", target as f64 / 1e6),
            flows
        );
        for &s in &shapers {
            let found = reports
                .iter()
                .find(|r| r.row.shaper == s && r.row.target_bps == target && r.row.flows == flows);
            out += &block(found, s);
        }
        out.push('\n');
    }
    out +=
        "Mbit/s: mean rate on the wire at the receiver's veth (Ethernet header included), 100 ms \
            windows after a 1 s warm-up\n\
            dev %: mean absolute deviation of the windows from the target (Carousel §7.1.1)\n\
            p99 us: 99th percentile RTT of a TCP ping every 10 ms through the same shaped queue, during the windows\n\
            cpu %/G: machine kernel time (system+irq+softirq, /proc/stat; incl. the traffic \
            generator's TCP) + this process's user time, in % of one CPU per Gbit/s achieved\n\
            daemon: the Metronome daemon thread's own CPU (schedstat) in % of one CPU per Gbit/s\n";
    out
}

/// The median of `values` (0 when empty).
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// `--ceiling`: one line per run, then per flow count the median throughput of each shaper and
/// the two ratios of the throughput target (shaped vs the daemon's pass-through, shaped vs the plain forwarder).
pub fn format_ceiling(reports: &[RunReport]) -> String {
    let mut out = format!(
        "{:<12} {:>6} {:>10} {:>9} {:>8}\n",
        "shaper", "flows", "Gbit/s", "cpu %/G", "daemon"
    );
    for r in reports {
        let daemon = r
            .daemon_cpu_pct
            .map_or("-".to_string(), |d| format!("{d:.1}"));
        let _ = writeln!(
            out,
            "{:<12} {:>6} {:>10.3} {:>9.1} {:>8}",
            r.row.shaper.name(),
            r.row.flows,
            r.row.achieved_bps / 1e9,
            r.row.cpu_pct,
            daemon
        );
    }
    let mut flows: Vec<usize> = reports.iter().map(|r| r.row.flows).collect();
    flows.dedup();
    for f in flows {
        let med = |s: Shaper| {
            let mut v: Vec<f64> = reports
                .iter()
                .filter(|r| r.row.shaper == s && r.row.flows == f)
                .map(|r| r.row.achieved_bps)
                .collect();
            median(&mut v)
        };
        let (fwd, pass, shaped) = (
            med(Shaper::Forwarder),
            med(Shaper::Passthrough),
            med(Shaper::Metronome),
        );
        let ratio = |a: f64, b: f64| if b > 0.0 { 100.0 * a / b } else { f64::NAN };
        let _ = writeln!(
            out,
            "{f} flow(s), medians: forwarder {:.3} Gbit/s, pass-through {:.3}, shaped {:.3}; \
             shaped = {:.1} % of pass-through (target >= 95 %), {:.1} % of the forwarder \
             (target >= 100 %)",
            fwd / 1e9,
            pass / 1e9,
            shaped / 1e9,
            ratio(shaped, pass),
            ratio(shaped, fwd)
        );
    }
    out += "Gbit/s: mean rate on the wire at the receiver's veth over 100 ms windows after a 1 s warm-up\n\
            forwarder: plain recvmmsg/sendmmsg AF_PACKET forwarder, batches of 64, no parsing\n\
            passthrough: the daemon with no class; metronome: the daemon shaping at 40 Gbit/s (unreachable)\n\
            offloads (tx checksum, TSO, GSO, GRO) off on all four veths\n";
    out
}

/// `reports` as the `--json` document: `{"rows": [Row, ...]}`.
fn to_json(reports: &[RunReport]) -> serde_json::Result<String> {
    let rows: Vec<&Row> = reports.iter().map(|r| &r.row).collect();
    serde_json::to_string_pretty(&serde_json::json!({ "rows": rows }))
}

/// Installs the Ctrl-C cleanup; call before any thread starts.
pub fn install_cleanup() {
    if let Err(e) = metronome_testbed::netns::cleanup_on_signals() {
        eprintln!("metronome compare: cannot install the Ctrl-C cleanup: {e}");
    }
}

/// Runs the comparison.
pub fn run(args: CompareArgs) -> anyhow::Result<()> {
    if let (Some(file), Some(dir)) = (&args.replot, &args.plot) {
        return replot(file, dir);
    }
    metronome_daemon::service::init_logging(Default::default());
    let mut options = if args.ceiling {
        CompareOptions::ceiling()
    } else if args.quick {
        CompareOptions::quick()
    } else {
        CompareOptions::full()
    };
    if !args.target.is_empty() {
        options.targets_bps = args.target.iter().map(|r| r.bps()).collect();
    }
    if !args.flows.is_empty() {
        if args.flows.contains(&0) {
            eprintln!("metronome compare: --flows: a flow count must be at least 1");
            std::process::exit(2);
        }
        options.flows = args.flows.clone();
    }
    let reports = match compare::run(&options, &mut std::io::stderr()) {
        Ok(reports) => reports,
        Err(e) if e.is_missing_privilege() => {
            eprintln!("metronome compare: {e}");
            std::process::exit(2);
        }
        Err(e) => {
            eprintln!("metronome compare: {e}");
            std::process::exit(1);
        }
    };
    if args.json {
        println!("{}", to_json(&reports)?);
    } else if args.ceiling {
        print!("{}", format_ceiling(&reports));
    } else {
        print!("{}", format_table(&reports));
    }
    if let Some(dir) = &args.plot {
        let rows: Vec<&Row> = reports.iter().map(|r| &r.row).collect();
        report_plots(compare_plot::write(compare_plot::rows_of(&rows), dir)?);
    }
    Ok(())
}

/// `--replot FILE --plot DIR`: the plots of a saved `--json` document.
fn replot(file: &std::path::Path, dir: &std::path::Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", file.display()))?;
    let rows = compare_plot::rows_from_json(&text)
        .map_err(|e| anyhow::anyhow!("{}: {e:#}", file.display()))?;
    report_plots(compare_plot::write(rows, dir)?);
    Ok(())
}

/// Names the plots written on standard error (standard output stays the table or the JSON).
fn report_plots(written: Vec<std::path::PathBuf>) {
    for path in written {
        eprintln!("wrote {}", path.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(shaper: Shaper, target_bps: u64, achieved_bps: f64) -> RunReport {
        RunReport {
            row: Row {
                shaper,
                target_bps,
                flows: 16,
                achieved_bps,
                deviation_pct: 0.5,
                rtt_p99_us: 1234,
                cpu_pct: 80.0,
            },
            daemon_cpu_pct: (shaper == Shaper::Metronome).then_some(12.5),
            windows: 30,
            probe_samples: 400,
            rtt_p50_us: 500,
        }
    }

    #[test]
    fn shapers_sit_side_by_side_per_target_and_flows() {
        let reports = [
            report(Shaper::Metronome, 100_000_000, 99.9e6),
            report(Shaper::Htb, 100_000_000, 95.0e6),
            report(Shaper::Tbf, 100_000_000, 97.0e6),
            report(Shaper::Metronome, 1_000_000_000, 999e6),
        ];
        let text = format_table(&reports);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("metronome") && lines[0].contains("htb"));
        assert!(lines[2].starts_with("100 Mbit/s"), "{text}");
        assert!(
            lines[2].contains("99.90") && lines[2].contains("95.00"),
            "{text}"
        );
        assert!(lines[2].contains("12.5"), "{text}");
        // The 1 Gbit/s line has no kernel runs: dashes, same width.
        assert!(
            lines[3].contains("999.00") && lines[3].trim_end().ends_with('-'),
            "{text}"
        );
        assert_eq!(lines[2].chars().count(), lines[3].chars().count(), "{text}");
    }

    #[test]
    fn json_has_exactly_the_issue_fields() {
        let report = RunReport {
            row: Row {
                shaper: Shaper::Htb,
                target_bps: 500_000_000,
                flows: 16,
                achieved_bps: 499.5e6,
                deviation_pct: 0.75,
                rtt_p99_us: 2100,
                cpu_pct: 90.5,
            },
            daemon_cpu_pct: None,
            windows: 30,
            probe_samples: 380,
            rtt_p50_us: 900,
        };
        let text = to_json(&[report]).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let obj = v.as_object().unwrap();
        assert_eq!(obj.keys().collect::<Vec<_>>(), ["rows"]);
        let rows = v["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 1);
        let mut keys: Vec<&str> = rows[0]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "achieved_bps",
                "cpu_pct",
                "deviation_pct",
                "flows",
                "rtt_p99_us",
                "shaper",
                "target_bps"
            ]
        );
        assert_eq!(rows[0]["shaper"], "htb");
        assert_eq!(rows[0]["target_bps"], 500_000_000);
        assert_eq!(rows[0]["flows"], 16);
        assert_eq!(rows[0]["rtt_p99_us"], 2100);
        assert_eq!(rows[0]["deviation_pct"], 0.75);
        let names: Vec<String> = Shaper::ALL
            .iter()
            .map(|s| {
                serde_json::to_value(s)
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(names, ["metronome", "htb", "tbf"]);
    }
}
