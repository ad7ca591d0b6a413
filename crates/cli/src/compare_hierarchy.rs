//! `metronome compare hierarchy`: a class tree on a host's uplink through `metronome run`
//! attached in place and through the same tree in kernel HTB (what is run and measured:
//! `metronome_testbed::compare::hierarchy`).
//!
//! Output: per scenario, one line per busy child with its max-min fair share and each shaper's
//! rate and error from that share side by side, a line of their sum, a line of the CPU, and
//! which shaper came closer to each share; the errors of runs that could not run. With `--json`
//! a [`HierarchyDocument`] (its schema: `metronome compare schema hierarchy`). Progress lines go
//! to standard error. Without CAP_NET_ADMIN: one line naming the privilege, exit status 2.

use crate::compare_attach::write_not_measured;
use crate::compare_cmd::or_exit;
use crate::compare_table::{fixed, header, Block};
use metronome_testbed::compare::hierarchy::{
    self, HierarchyOptions, HierarchyOutcome, HierarchyRow, Load, Scenario,
};
use metronome_testbed::compare::Shaper;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt::Write;

/// The `--json` document.
#[derive(Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct HierarchyDocument {
    pub(crate) machine: String,
    /// The tree, in words.
    pub(crate) tree: String,
    pub(crate) runs: Vec<HierarchyOutcome>,
}

/// The columns of one shaper's block.
const COLUMNS: [(&str, usize); 2] = [("Mbit/s", 9), ("err %", 7)];

/// The tree and its traffic, in words.
pub fn describe_tree(o: &HierarchyOptions) -> String {
    format!(
        "{} at {:.0} Mbit/s over {} at {:.0} Mbit/s each, weight 1; {} TCP flows per busy TCP \
         child, a UDP flood of {:.0} Mbit/s ({} sockets) into c",
        hierarchy::PARENT,
        o.parent_bps as f64 / 1e6,
        hierarchy::CHILDREN.join(", "),
        o.child_bps as f64 / 1e6,
        o.flows,
        o.flood_bps as f64 / 1e6,
        o.flood_flows
    )
}

/// The measured row of `shaper` in `scenario`, if any.
fn row_of(
    outcomes: &[HierarchyOutcome],
    shaper: Shaper,
    scenario: Scenario,
) -> Option<&HierarchyRow> {
    outcomes.iter().find_map(|o| match o {
        HierarchyOutcome::Measured(r) if r.shaper == shaper && r.scenario == scenario => Some(r),
        _ => None,
    })
}

/// The table of `outcomes` (see the module docs), with a legend.
pub fn format_runs(outcomes: &[HierarchyOutcome]) -> String {
    let mut shapers: Vec<Shaper> = Vec::new();
    let mut scenarios: Vec<Scenario> = Vec::new();
    for o in outcomes {
        let (s, sc) = match o {
            HierarchyOutcome::Measured(r) => (r.shaper, r.scenario),
            HierarchyOutcome::Failed {
                shaper, scenario, ..
            } => (*shaper, *scenario),
        };
        if !shapers.contains(&s) {
            shapers.push(s);
        }
        if !scenarios.contains(&sc) {
            scenarios.push(sc);
        }
    }
    let blocks: Vec<Block> = shapers
        .iter()
        .map(|s| Block::new(s.name(), &COLUMNS))
        .collect();
    let key = |a: &str, b: &str, c: &str, d: &str| format!("{a:<9}{b:<9}{c:<5}{d:>9}");
    let (top, sub) = header(
        &key("", "", "", "share"),
        &key("scenario", "class", "load", "Mbit/s"),
        &blocks,
    );
    let mut out = format!("{}\n{sub}\n", top.trim_end());
    for &scenario in &scenarios {
        let rows: Vec<Option<&HierarchyRow>> = shapers
            .iter()
            .map(|&s| row_of(outcomes, s, scenario))
            .collect();
        let Some(first) = rows.iter().flatten().next() else {
            continue;
        };
        let mut closer = vec![0usize; shapers.len()];
        let mut busy = 0;
        for (i, class) in first.classes.iter().enumerate() {
            if class.load == Load::Idle {
                continue;
            }
            busy += 1;
            let load = if class.load == Load::Tcp {
                "tcp"
            } else {
                "udp"
            };
            out += &key(
                scenario.name(),
                &class.class,
                load,
                &fixed(class.fair_share_bps / 1e6, 2),
            );
            let errors: Vec<Option<f64>> = rows
                .iter()
                .map(|r| r.and_then(|r| r.classes.get(i)).and_then(|c| c.error_pct))
                .collect();
            for ((row, block), _) in rows.iter().zip(&blocks).zip(&errors) {
                out += &match row.and_then(|r| r.classes.get(i)) {
                    Some(c) => block.cells(&[
                        fixed(c.achieved_bps / 1e6, 2),
                        c.error_pct.map_or("-".to_owned(), |e| format!("{e:+.2}")),
                    ]),
                    None => block.dashes(),
                };
            }
            out.push('\n');
            let best = errors
                .iter()
                .map(|e| e.map_or(f64::INFINITY, f64::abs))
                .fold(f64::INFINITY, f64::min);
            for (k, e) in errors.iter().enumerate() {
                closer[k] += usize::from(e.is_some_and(|e| e.abs() <= best));
            }
        }
        let shares: f64 = first.classes.iter().map(|c| c.fair_share_bps).sum();
        out += &key(scenario.name(), "sum", "", &fixed(shares / 1e6, 2));
        for (row, block) in rows.iter().zip(&blocks) {
            out += &match row {
                Some(r) => block.cells(&[
                    fixed(r.sum_bps / 1e6, 2),
                    format!("{:+.2}", (r.sum_bps / shares - 1.0) * 100.0),
                ]),
                None => block.dashes(),
            };
        }
        out.push('\n');
        let mut cpu = Vec::new();
        for ((row, s), n) in rows.iter().zip(&shapers).zip(&closer) {
            let Some(r) = row else { continue };
            let mut daemon = r
                .daemon_cpu_pct
                .map_or(String::new(), |d| format!(", daemon {d:.1}"));
            if let Some(lost) = r.daemon_socket_drops {
                let drops: Vec<String> = r
                    .classes
                    .iter()
                    .map(|c| c.daemon_drops.map_or("-".to_owned(), |d| d.to_string()))
                    .collect();
                let _ = write!(
                    daemon,
                    ", dropped {} by class, {lost} lost at its sockets",
                    drops.join("/")
                );
            }
            cpu.push(format!(
                "{} receiver {:.2} Mbit/s, cpu {:.1} %/G{daemon}{}, closest to {n}/{busy} shares",
                s.name(),
                r.receiver_bps / 1e6,
                r.cpu_pct,
                metronome_testbed::compare::format_cpu_account(r.cpu_account.as_ref())
            ));
        }
        let _ = writeln!(out, "  {}", cpu.join("; "));
    }
    write_not_measured(
        &mut out,
        outcomes.iter().map(|o| match o {
            HierarchyOutcome::Measured(r) => (r.shaper.name(), None),
            HierarchyOutcome::Failed { shaper, error, .. } => (shaper.name(), Some(error.as_str())),
        }),
    );
    out += "share: the class's max-min fair share (the parent's rate water-filled among the busy \
            children by weight, each within its own rate and its offer)\n\
            Mbit/s: the class's goodput at the receiver over the measured interval, in full \
            1514-byte frames; err %: its error from the share\n\
            htb-u32: the same tree in HTB (parent rate = ceil; each child rate = its weight's part \
            of the parent, ceil = its own rate), u32 filters on destination address and port\n\
            cpu %/G: machine kernel time + this process's and the daemon's user time, % of one CPU \
            per Gbit/s at the receiver (user, system, softirq; ns per 1514-byte frame); daemon: \
            the `metronome run` process's user + system time; dropped: the daemon's drops of each \
            class over the run (metronome_class_drops_total)\n";
    out
}

/// What `compare hierarchy` takes from its command line.
pub struct HierarchyArgs {
    /// `--quick`.
    pub quick: bool,
    /// `--scenario`.
    pub scenarios: Vec<Scenario>,
    /// `--flood-rate`, bit/s.
    pub flood_bps: Option<u64>,
}

/// Runs `metronome compare hierarchy`.
pub fn run(args: HierarchyArgs, json: bool) -> anyhow::Result<()> {
    let mut options = if args.quick {
        HierarchyOptions::quick()
    } else {
        HierarchyOptions::full()
    };
    if !args.scenarios.is_empty() {
        options.scenarios = args.scenarios;
    }
    if let Some(f) = args.flood_bps {
        options.flood_bps = f;
    }
    options.daemon_binary = std::env::current_exe().ok();
    let runs = or_exit(hierarchy::run(&options, &mut std::io::stderr()));
    let machine = metronome_bench::machine::describe();
    let tree = describe_tree(&options);
    if json {
        let doc = HierarchyDocument {
            machine,
            tree,
            runs,
        };
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        println!("metronome compare --hierarchy on {machine}");
        println!("tree: {tree}");
        print!("{}", format_runs(&runs));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use metronome_testbed::compare::hierarchy::ClassRate;

    fn class(name: &str, load: Load, share: f64, achieved: f64) -> ClassRate {
        ClassRate {
            class: name.into(),
            load,
            limit_bps: 200_000_000,
            offered_bps: (load == Load::Udp).then_some(2e9),
            fair_share_bps: share,
            achieved_bps: achieved,
            error_pct: (share > 0.0).then(|| (achieved / share - 1.0) * 100.0),
            daemon_drops: Some(if load == Load::Udp { 7 } else { 0 }),
        }
    }

    fn row(shaper: Shaper, a: f64, b: f64) -> HierarchyOutcome {
        HierarchyOutcome::Measured(HierarchyRow {
            shaper,
            scenario: Scenario::Flood,
            parent_bps: 300_000_000,
            classes: vec![
                class("a", Load::Tcp, 100e6, a),
                class("b", Load::Tcp, 100e6, b),
                class("c", Load::Udp, 100e6, 100e6),
            ],
            sum_bps: a + b + 100e6,
            receiver_bps: a + b + 101e6,
            cpu_pct: 80.0,
            daemon_cpu_pct: (shaper == Shaper::Metronome).then_some(30.0),
            cpu_account: None,
            daemon_socket_drops: (shaper == Shaper::Metronome).then_some(0),
        })
    }

    #[test]
    fn the_table_puts_each_share_beside_both_shapers_and_counts_the_closer() {
        let failed = HierarchyOutcome::Failed {
            shaper: Shaper::HtbU32,
            scenario: Scenario::Both,
            error: "tc: RTNETLINK answers: Invalid argument".into(),
        };
        let text = format_runs(&[
            row(Shaper::Metronome, 99.5e6, 100.2e6),
            row(Shaper::HtbU32, 90e6, 110e6),
            failed,
        ]);
        let line = text.lines().find(|l| l.starts_with("flood    a ")).unwrap();
        assert!(
            line.contains("100.00 |     99.50   -0.50 |     90.00  -10.00"),
            "{text}"
        );
        assert!(text.contains("flood    sum"), "{text}");
        assert!(
            text.contains("metronome receiver 300.70 Mbit/s, cpu 80.0 %/G, daemon 30.0"),
            "{text}"
        );
        assert!(text.contains("closest to 3/3 shares; htb-u32"), "{text}");
        assert!(
            text.contains("htb-u32: not measured: tc: RTNETLINK"),
            "{text}"
        );
    }

    #[test]
    fn the_json_keeps_errors_and_figures_apart() {
        let doc = HierarchyDocument {
            machine: "test".into(),
            tree: describe_tree(&HierarchyOptions::full()),
            runs: vec![
                row(Shaper::Metronome, 1e8, 1e8),
                HierarchyOutcome::Failed {
                    shaper: Shaper::HtbU32,
                    scenario: Scenario::Alone,
                    error: "x".into(),
                },
            ],
        };
        let text = serde_json::to_string(&doc).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["runs"][0]["scenario"], "flood");
        assert_eq!(v["runs"][0]["classes"][2]["load"], "udp");
        assert_eq!(v["runs"][1]["shaper"], "htb-u32");
        assert!(v["runs"][1].get("classes").is_none(), "{text}");
        assert!(
            doc.tree
                .contains("tenant at 300 Mbit/s over a, b, c at 200"),
            "{}",
            doc.tree
        );
        let back: HierarchyDocument = serde_json::from_str(&text).unwrap();
        assert_eq!(back, doc);
    }
}
