//! `metronome compare` without a mode (the kernel grid) and `compare ceiling`: Metronome (its
//! class as one FIFO, and in the fair mode as `metronome-fair`), kernel HTB and kernel TBF on
//! the same sender/shaper/receiver topology with the same kernel TCP traffic, over a grid of
//! targets and flow counts (`--quick`: fewer); what is measured, and how, is documented in
//! `metronome_testbed::compare`. The other modes run from [`run`] too, each in its module
//! (`crate::compare_attach`, `compare_cni`, `compare_classes`, `compare_churn`,
//! `compare_cluster`, `compare_link`, `compare_hierarchy`); their options are in
//! [`crate::compare_args`].
//!
//! Output: the side-by-side table ([`format_table`]) or the ceiling's ([`format_ceiling`]), or
//! with `--json` the [`Document`] of [`Row`]s on standard output; progress lines go to standard
//! error. Without CAP_NET_ADMIN: one line naming the privilege, exit status 2. Everything
//! created is removed at the end, on an error and on Ctrl-C
//! (`metronome_testbed::netns::cleanup_on_signals`, installed by `main` before any thread).

use crate::compare_args::{CompareArgs, GridArgs, Mode};
use crate::compare_plot;
use crate::compare_table::{fixed, header, Block};
use metronome_testbed::compare::{
    self, format_rtt_us, CompareOptions, DaemonLoop, Row, RunReport, Shaper,
};
use metronome_testbed::forwarder::ForwarderMode;
use metronome_testbed::offloads::OffloadMode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt::Write;

/// The columns of one shaper's block of the grid's table.
const GRID_COLUMNS: [(&str, usize); 5] = [
    ("Mbit/s", 9),
    ("dev %", 7),
    ("p99 us", 9),
    ("cpu %/G", 9),
    ("jain", 6),
];
/// The daemon-thread CPU column of a daemon's block.
const DAEMON_COLUMN: (&str, usize) = ("daemon %/G", 10);

/// The block of `shaper` in the grid's table.
fn block_of(shaper: Shaper) -> Block {
    let mut block = Block::new(shaper.name(), &GRID_COLUMNS);
    if shaper.is_daemon() {
        block.columns.push(DAEMON_COLUMN);
    }
    block
}

/// The cells of one run in its shaper's block; one `-` over the block without a run.
fn block(report: Option<&RunReport>, shaper: Shaper) -> String {
    let block = block_of(shaper);
    let Some(r) = report else {
        return block.dash();
    };
    let row = &r.row;
    let mut cells = vec![
        fixed(row.achieved_bps / 1e6, 2),
        fixed(row.deviation_pct, 2),
        format_rtt_us(row.rtt_p99_us),
        fixed(row.cpu_pct, 1),
        row.jain_bulk.map_or("-".to_owned(), |j| fixed(j, 3)),
    ];
    if shaper.is_daemon() {
        cells.push(row.daemon_cpu_pct.map_or("-".to_owned(), |d| fixed(d, 1)));
    }
    block.cells(&cells)
}

/// Formats `reports` (run with `offloads`) as the side-by-side table, in the order the
/// (target, flows) pairs first appear, with a legend.
pub fn format_table(reports: &[RunReport], offloads: OffloadMode) -> String {
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
    let blocks: Vec<Block> = shapers.iter().map(|&s| block_of(s)).collect();
    let (top, sub) = header(
        &" ".repeat(17),
        &format!("{:<11}{:>6}", "target", "flows"),
        &blocks,
    );
    let mut out = format!(
        "offloads: {}\n{}\n{sub}\n",
        offloads.describe(),
        top.trim_end()
    );
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
            p99 us: 99th percentile RTT of a TCP ping every 10 ms through the same shaped queue, during the windows \
            (no answer: the probe got none)\n\
            cpu %/G: machine kernel time (system+irq+softirq, /proc/stat; incl. the traffic \
            generator's TCP) + this process's user time, in % of one CPU per Gbit/s achieved\n\
            jain: Jain's index of the bytes each bulk connection delivered over the run (1 = equal shares)\n\
            metronome-fair: the daemon's class with fair = true (a flow scheduler inside the aggregate)\n\
            daemon %/G: the Metronome daemon thread's own CPU (its schedstat: user + kernel time \
            of the loop thread, recvmmsg/sendmmsg included) in % of one CPU per Gbit/s achieved\n";
    out
}

/// `--ceiling` (run with `offloads`, the forwarder in `forwarder`): one line per run, then per
/// flow count the median throughput of each shaper and the ratios of the throughput target
/// (shaped vs the forwarder, shaped vs the daemon's pass-through).
pub fn format_ceiling(
    reports: &[RunReport],
    offloads: OffloadMode,
    forwarder: ForwarderMode,
) -> String {
    let mut out = format!(
        "offloads: {}\nforwarder: {} mode\n{:<12} {:>6} {:>10} {:>9} {:>11}\n",
        offloads.describe(),
        forwarder.name(),
        "shaper",
        "flows",
        "Gbit/s",
        "cpu %/G",
        "daemon %/G"
    );
    for r in reports {
        let daemon = r
            .row
            .daemon_cpu_pct
            .map_or("-".to_string(), |d| format!("{d:.1}"));
        let _ = writeln!(
            out,
            "{:<12} {:>6} {:>10.3} {:>9.1} {:>11}",
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
            let v: Vec<f64> = reports
                .iter()
                .filter(|r| r.row.shaper == s && r.row.flows == f)
                .map(|r| r.row.achieved_bps)
                .collect();
            metronome_testbed::stats::median(&v).unwrap_or(0.0)
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
             shaped = {:.1} % of the forwarder (target >= 90 %), {:.1} % of pass-through",
            fwd / 1e9,
            pass / 1e9,
            shaped / 1e9,
            ratio(shaped, fwd),
            ratio(shaped, pass)
        );
    }
    out += "Gbit/s: mean rate on the wire at the receiver's veth over 100 ms windows after a 1 s warm-up\n\
            forwarder: recvmmsg/sendmmsg AF_PACKET forwarder, batches of 64, no parsing \
            (vnet_hdr: super-frames forwarded with their virtio-net header; plain: 2 KiB frames)\n\
            passthrough: the daemon with no class; metronome: the daemon shaping at 40 Gbit/s (unreachable)\n\
            cpu %/G: machine kernel time + this process's user time; daemon %/G: the daemon \
            thread's own CPU (schedstat); both in % of one CPU per Gbit/s achieved\n";
    out
}

/// A `--json` document of `metronome compare`: the offload mode, the machine, the link's rate
/// (`--link-sharing` only), the daemon rows' loop mode (when not the defaults) and one row per
/// run ([`Row`], or
/// [`metronome_testbed::compare::link_sharing::LinkRow`] per class with `--link-sharing`).
#[derive(Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Document<R> {
    pub(crate) offloads: OffloadMode,
    pub(crate) machine: String,
    /// The shared link's rate, bit/s; absent without `--link-sharing`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) link_bps: Option<u64>,
    /// The daemon rows' loop mode when not the defaults (`--busy-poll`, `--timer-slack`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) daemon_loop: Option<String>,
    pub(crate) rows: Vec<R>,
}

impl<R: serde::Serialize> Document<R> {
    /// `rows` (run with `offloads` on `machine`, over a link of `link_bps` if shared, the daemon
    /// rows' loop in `daemon_loop`) as the `--json` text.
    pub(crate) fn json(
        offloads: OffloadMode,
        machine: &str,
        (link_bps, daemon_loop): (Option<u64>, DaemonLoop),
        rows: Vec<R>,
    ) -> serde_json::Result<String> {
        serde_json::to_string_pretty(&Document {
            offloads,
            machine: machine.to_owned(),
            link_bps,
            daemon_loop: daemon_loop.describe(),
            rows,
        })
    }
}

/// `reports` (run with `offloads` on `machine`) as the `--json` document.
fn to_json(
    reports: &[RunReport],
    (offloads, daemon_loop): (OffloadMode, DaemonLoop),
    machine: &str,
) -> serde_json::Result<String> {
    let rows = reports.iter().map(|r| r.row.clone()).collect();
    Document::<Row>::json(offloads, machine, (None, daemon_loop), rows)
}

/// What a comparison run returned; on an error, says it on stderr and exits with status 2 when
/// the run lacks privileges, 1 otherwise.
pub(crate) fn or_exit<T>(result: Result<T, compare::CompareError>) -> T {
    match result {
        Ok(value) => value,
        Err(e) => {
            eprintln!("metronome compare: {e}");
            std::process::exit(if e.is_missing_privilege() { 2 } else { 1 });
        }
    }
}

/// Installs the Ctrl-C cleanup; call before any thread starts.
pub fn install_cleanup() {
    if let Err(e) = metronome_testbed::netns::cleanup_on_signals() {
        eprintln!("metronome compare: cannot install the Ctrl-C cleanup: {e}");
    }
}

/// Runs the comparison `args` asks for.
pub fn run(args: CompareArgs) -> anyhow::Result<()> {
    let mode = args.into_mode();
    let replot = match &mode {
        Mode::Kernel(k) => Some(&k.grid),
        Mode::Ceiling(g) => Some(g),
        _ => None,
    };
    if let Some(GridArgs {
        replot: Some(file),
        plot: Some(dir),
        ..
    }) = replot
    {
        return replot_file(file, dir);
    }
    metronome_daemon::ops::service::init_logging(Default::default());
    match mode {
        Mode::Kernel(k) => run_grid(&k.grid, k.quick, false),
        Mode::Ceiling(g) => run_grid(&g, false, true),
        Mode::PacketRate(a) => crate::compare_classes::run_packet_rate(
            a.run.quick,
            class_count(a.count),
            a.run.output.json,
        ),
        Mode::Classes(a) => {
            let choice = crate::compare_classes::ClassesChoice {
                quick: a.run.quick,
                classes: class_count(a.count),
                rates_bps: a.class_rates.iter().map(|r| r.bps()).collect(),
                frame_bytes: a.frame_bytes.map(|b| b as usize),
            };
            crate::compare_classes::run_classes(choice, a.run.output.json)
        }
        Mode::Cluster(a) => crate::compare_cluster::run(a.per_host, a.output.json),
        Mode::Cni(a) => {
            if a.flows.len() > 1 || a.flows.contains(&0) {
                usage("--cni takes one --flows of at least 1");
            }
            let cni = crate::compare_cni::CniArgs {
                quick: a.run.quick,
                pods: a.pods.map(|p| usize::try_from(p).unwrap_or(usize::MAX)),
                rates_bps: a.rates.iter().map(|r| r.bps()).collect(),
                flows: a.flows.first().copied(),
            };
            crate::compare_cni::run(&cni, a.run.output.json)
        }
        Mode::Attach(a) => {
            if a.flows.contains(&0) {
                usage("--flows: a flow count must be at least 1");
            }
            crate::compare_attach::run(&a)
        }
        Mode::Schema { mode } => {
            println!("{}", crate::compare_schema::schema(mode)?);
            Ok(())
        }
        Mode::Churn(a) => {
            if a.flows.len() > 1 {
                usage("--churn takes one --flows (connections per class)");
            }
            let churn = crate::compare_churn::ChurnArgs {
                ops: a.ops,
                pace: a
                    .pace
                    .map(|d| std::time::Duration::from_nanos(d.as_nanos())),
                rates_bps: a.target.iter().map(|r| r.bps()).collect(),
                flows: a.flows.first().copied(),
                udp_rate_bps: a.udp_rate.map(|r| r.bps()),
                class_rate_bps: a.class_rate.map(|r| r.bps()),
                congestion: a.congestion,
                realtime_priority: a.realtime_priority,
            };
            crate::compare_churn::run(&churn, a.output.json)
        }
        Mode::Hierarchy(a) => {
            let args = crate::compare_hierarchy::HierarchyArgs {
                quick: a.run.quick,
                scenarios: a.scenario,
                flood_bps: a.flood_rate.map(|r| r.bps()),
            };
            crate::compare_hierarchy::run(args, a.run.output.json)
        }
        Mode::LinkSharing(a) => {
            let rtt = a.link_rtt_us.map(std::time::Duration::from_micros);
            let modes = (a.offloads, a.run.output.json);
            crate::compare_link::run(a.run.quick, &a.scenario, rtt, modes)
        }
    }
}

/// `--classes [N]` as a count (`None`: the mode's default).
fn class_count(count: crate::compare_args::ClassCount) -> Option<usize> {
    count
        .classes
        .flatten()
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
}

/// Says why the options are refused and exits with status 2.
fn usage(why: &str) -> ! {
    eprintln!("metronome compare: {why}");
    std::process::exit(2);
}

/// The kernel grid (`quick` or full) or, with `ceiling`, the ceiling, with the options of `g`.
fn run_grid(g: &GridArgs, quick: bool, ceiling: bool) -> anyhow::Result<()> {
    let mut options = if ceiling {
        CompareOptions::ceiling()
    } else if quick {
        CompareOptions::quick()
    } else {
        CompareOptions::full()
    };
    options.offloads = g.offloads;
    options.daemon_cores = usize::from(g.daemon_cores);
    options.isolate_daemon = g.isolate_daemon;
    options.daemon_loop = g.slack.daemon_loop(g.busy_poll);
    if !g.target.is_empty() {
        options.targets_bps = g.target.iter().map(|r| r.bps()).collect();
    }
    if !g.flows.is_empty() {
        if g.flows.contains(&0) {
            usage("--flows: a flow count must be at least 1");
        }
        options.flows = g.flows.clone();
    }
    let reports = or_exit(compare::run(&options, &mut std::io::stderr()));
    let machine = metronome_bench::machine::describe();
    if g.json {
        let modes = (options.offloads, options.daemon_loop);
        println!("{}", to_json(&reports, modes, &machine)?);
    } else {
        println!("metronome compare on {machine}");
        if let Some(mode) = options.daemon_loop.describe() {
            println!("daemon loop: {mode}");
        }
        if ceiling {
            print!(
                "{}",
                format_ceiling(&reports, options.offloads, options.forwarder_mode())
            );
        } else {
            print!("{}", format_table(&reports, options.offloads));
        }
    }
    if let Some(dir) = &g.plot {
        let rows: Vec<&Row> = reports.iter().map(|r| &r.row).collect();
        report_plots(compare_plot::write(compare_plot::rows_of(&rows), dir)?);
    }
    Ok(())
}

/// `--replot FILE --plot DIR`: the plots of a saved `--json` document.
fn replot_file(file: &std::path::Path, dir: &std::path::Path) -> anyhow::Result<()> {
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
    use crate::compare_args::parse_duration;

    fn report(shaper: Shaper, target_bps: u64, achieved_bps: f64) -> RunReport {
        RunReport {
            row: Row {
                shaper,
                target_bps,
                flows: 16,
                achieved_bps,
                deviation_pct: 0.5,
                rtt_p99_us: Some(1234),
                rtt_p50_us: Some(500),
                cpu_pct: 80.0,
                daemon_cpu_pct: shaper.is_daemon().then_some(12.5),
                jain_bulk: Some(0.995),
                cpu_account: None,
                queue: None,
            },
            windows: 30,
            probe_samples: 400,
        }
    }

    #[test]
    fn shapers_sit_side_by_side_per_target_and_flows() {
        let reports = [
            report(Shaper::Metronome, 100_000_000, 99.9e6),
            report(Shaper::MetronomeFair, 100_000_000, 99.8e6),
            report(Shaper::Htb, 100_000_000, 95.0e6),
            report(Shaper::Tbf, 100_000_000, 97.0e6),
            report(Shaper::Metronome, 1_000_000_000, 999e6),
        ];
        let text = format_table(&reports, OffloadMode::Host);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("offloads: host"), "{text}");
        assert!(lines[1].contains("metronome") && lines[1].contains("htb"));
        assert!(lines[2].contains("daemon %/G"), "{text}");
        assert!(lines[3].starts_with("100 Mbit/s"), "{text}");
        assert!(
            lines[3].contains("99.90") && lines[3].contains("95.00"),
            "{text}"
        );
        assert!(lines[3].contains("12.5"), "{text}");
        // The fair mode's block, with its daemon column, and every block's Jain's index.
        assert!(lines[1].contains("metronome-fair"), "{text}");
        assert!(lines[3].contains("99.80"), "{text}");
        assert_eq!(lines[3].matches("0.995").count(), 4, "{text}");
        assert_eq!(lines[3].matches("12.5").count(), 2, "{text}");
        // The 1 Gbit/s line has no kernel runs: dashes, same width.
        assert!(
            lines[4].contains("999.00") && lines[4].trim_end().ends_with('-'),
            "{text}"
        );
        assert_eq!(lines[3].chars().count(), lines[4].chars().count(), "{text}");
        assert!(format_table(&reports, OffloadMode::Off).starts_with("offloads: off"));
    }

    #[test]
    fn a_probe_without_answers_prints_no_answer_not_zero() {
        let mut silent = report(Shaper::Htb, 100_000_000, 95.0e6);
        silent.row.rtt_p99_us = None;
        silent.row.rtt_p50_us = None;
        silent.probe_samples = 0;
        let heard = report(Shaper::Metronome, 100_000_000, 99.0e6);
        let text = format_table(&[heard, silent.clone()], OffloadMode::Host);
        let line = text.lines().nth(3).unwrap();
        assert!(line.contains("no answer"), "{text}");
        assert!(line.contains("1234"), "{text}");
        assert!(!line.contains(" 0 "), "{text}");
        let v: serde_json::Value = serde_json::from_str(
            &to_json(&[silent], (OffloadMode::Host, DaemonLoop::default()), "m").unwrap(),
        )
        .unwrap();
        assert!(v["rows"][0]["rtt_p99_us"].is_null(), "{v}");
        assert!(
            v.get("daemon_loop").is_none(),
            "the defaults are not named: {v}"
        );
    }

    #[test]
    fn the_daemon_loop_mode_is_named_in_the_json_and_parsed_like_the_config() {
        let spin = DaemonLoop {
            busy_poll: true,
            timer_slack: Some(parse_duration("0us").unwrap()),
            arrival_slack: Some(parse_duration("400us").unwrap()),
        };
        let report = report(Shaper::MetronomeFair, 100_000_000, 99.0e6);
        let text = to_json(&[report], (OffloadMode::Host, spin), "m").unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v["daemon_loop"], "busy_poll = true, timer_slack = 0 us, arrival_slack = 400 us",
            "{v}"
        );
        assert_eq!(
            parse_duration("50us").unwrap(),
            metronome_core::Duration::from_micros(50)
        );
        assert!(parse_duration("fast").is_err());
        let mut config = metronome_testbed::compare::passthrough_config();
        spin.configure(&mut config);
        assert!(config.daemon.busy_poll);
        assert_eq!(config.daemon.timer_slack, metronome_core::Duration::ZERO);
        assert_eq!(
            config.daemon.arrival_slack,
            metronome_core::Duration::from_micros(400)
        );
    }

    #[test]
    fn the_ceiling_names_the_forwarder_and_the_ratio_to_it() {
        let mut fwd = report(Shaper::Forwarder, 40_000_000_000, 14e9);
        fwd.row.flows = 1;
        let mut pass = report(Shaper::Passthrough, 40_000_000_000, 13e9);
        pass.row.flows = 1;
        pass.row.daemon_cpu_pct = Some(7.0);
        let mut shaped = report(Shaper::Metronome, 40_000_000_000, 12.6e9);
        shaped.row.flows = 1;
        let text = format_ceiling(
            &[fwd, pass, shaped],
            OffloadMode::Host,
            ForwarderMode::VnetHdr,
        );
        assert!(text.starts_with("offloads: host"), "{text}");
        assert!(text.contains("forwarder: vnet_hdr mode"), "{text}");
        assert!(
            text.contains("shaped = 90.0 % of the forwarder (target >= 90 %)"),
            "{text}"
        );
        assert!(text.contains("96.9 % of pass-through"), "{text}");
    }

    #[test]
    fn json_has_exactly_the_documented_fields_and_round_trips() {
        let report = RunReport {
            row: Row {
                shaper: Shaper::Htb,
                target_bps: 500_000_000,
                flows: 16,
                achieved_bps: 499.5e6,
                deviation_pct: 0.75,
                rtt_p99_us: Some(2100),
                rtt_p50_us: Some(900),
                cpu_pct: 90.5,
                daemon_cpu_pct: None,
                jain_bulk: Some(0.98),
                cpu_account: None,
                queue: None,
            },
            windows: 30,
            probe_samples: 380,
        };
        let text = to_json(
            std::slice::from_ref(&report),
            (OffloadMode::Off, DaemonLoop::default()),
            "a machine",
        )
        .unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let obj = v.as_object().unwrap();
        let mut top: Vec<&str> = obj.keys().map(String::as_str).collect();
        top.sort_unstable();
        assert_eq!(top, ["machine", "offloads", "rows"]);
        assert_eq!(v["offloads"], "off");
        assert_eq!(v["machine"], "a machine");
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
                "cpu_account",
                "cpu_pct",
                "daemon_cpu_pct",
                "deviation_pct",
                "flows",
                "jain_bulk",
                "rtt_p50_us",
                "rtt_p99_us",
                "shaper",
                "target_bps"
            ]
        );
        assert_eq!(rows[0]["shaper"], "htb");
        assert_eq!(rows[0]["target_bps"], 500_000_000);
        assert_eq!(rows[0]["flows"], 16);
        assert_eq!(rows[0]["rtt_p99_us"], 2100);
        assert_eq!(rows[0]["rtt_p50_us"], 900);
        assert_eq!(rows[0]["deviation_pct"], 0.75);
        assert!(rows[0]["daemon_cpu_pct"].is_null());
        assert_eq!(rows[0]["jain_bulk"], 0.98);
        let back: Document<Row> = serde_json::from_str(&text).unwrap();
        assert_eq!(
            back,
            Document {
                offloads: OffloadMode::Off,
                machine: "a machine".into(),
                link_bps: None,
                daemon_loop: None,
                rows: vec![report.row],
            }
        );
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
        assert_eq!(names, ["metronome", "metronome-fair", "htb", "tbf"]);
    }

    #[test]
    fn the_table_is_the_golden_one_to_the_byte() {
        let mut slow = report(Shaper::Tbf, 1_000_000_000, 950e6);
        slow.row.rtt_p99_us = None;
        slow.row.jain_bulk = None;
        let mut silos = report(Shaper::Metronome, 1_000_000_000, 990e6);
        silos.row.daemon_cpu_pct = None;
        let reports = [
            report(Shaper::Metronome, 100_000_000, 99.9e6),
            report(Shaper::MetronomeFair, 100_000_000, 99.8e6),
            report(Shaper::Htb, 100_000_000, 95.0e6),
            silos,
            slow,
        ];
        assert_eq!(
            format_table(&reports, OffloadMode::Off),
            include_str!("../tests/golden/compare_grid.txt")
        );
    }
}
