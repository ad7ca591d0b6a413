//! `metronome compare link-sharing`: one 1 Gbit/s link shared by weighted and priority classes
//! through Metronome's `[link]` and through kernel HTB, side by side (what is run and measured:
//! `metronome_testbed::compare::link_sharing`).
//!
//! Output: a table with one line per (scenario, shaper, class), or with `--json` a
//! [`crate::compare_cmd::Document`] of `LinkRow`s (its schema:
//! `metronome compare schema link-sharing`; `null` where a field does not apply or was not
//! measured).

use crate::compare_cmd::Document;
use metronome_testbed::compare::link_sharing::{self, LinkOptions, LinkRow, Scenario};
use metronome_testbed::compare::{format_rtt_us, DaemonLoop};
use metronome_testbed::offloads::OffloadMode;
use std::fmt::Write;

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".to_owned(), |x| format!("{x:.digits$}"))
}

/// The table of `rows`, with a legend.
pub fn format_table(rows: &[LinkRow], link_bps: u64, offloads: OffloadMode) -> String {
    let mut out = format!(
        "link: {:.0} Mbit/s, senders TCP {} with ECN; offloads: {}\n",
        link_bps as f64 / 1e6,
        link_sharing::CONGESTION,
        offloads.describe()
    );
    let _ = writeln!(
        out,
        "{:<9} {:<20} {:<6} {:>4} {:>5} {:>9} {:>8} {:>8} {:>7} {:>10} {:>10} {:>8} {:>9} {:>7}",
        "scenario",
        "shaper",
        "class",
        "wt",
        "flows",
        "Mbit/s",
        "share %",
        "expect %",
        "link %",
        "q p99 B",
        "q avg B",
        "p99 us",
        "borrow ms",
        "after %"
    );
    for r in rows {
        let weight = if r.priority {
            "prio".to_owned()
        } else {
            r.weight.to_string()
        };
        let _ = writeln!(
            out,
            "{:<9} {:<20} {:<6} {:>4} {:>5} {:>9.2} {:>8} {:>8} {:>7.2} {:>10} {:>10} {:>8} {:>9} {:>7}",
            r.scenario.name(),
            r.shaper,
            r.class,
            weight,
            r.flows,
            r.achieved_bps / 1e6,
            opt(r.share_pct, 2),
            opt(r.expected_share_pct, 2),
            r.link_pct,
            r.queue_p99_bytes
                .map_or_else(|| "-".to_owned(), |b| b.to_string()),
            opt(r.queue_avg_bytes, 0),
            if r.priority {
                format_rtt_us(r.rtt_p99_us)
            } else {
                "-".to_owned()
            },
            opt(r.borrow_ms, 0),
            opt(r.after_stop_link_pct, 1),
        );
    }
    out += "Mbit/s: the class's mean rate on the wire (goodput windows of 20 ms at its sinks, in \
            full 1514-byte frames) over the measured interval (borrow: until the first class stops)\n\
            share %: its part of what the weighted classes achieved together; expect %: its \
            weight's part; link %: its rate in % of the link\n\
            q p99 / q avg: its queued bytes sampled every 10 ms (metronome: the link queue gauge) \
            or 50 ms (htb: the leaf's backlog)\n\
            p99 us: 99th percentile RTT of a TCP ping every 10 ms in the priority class\n\
            borrow ms: from the first class's stop until the others carry >= 98 % of the link \
            (end of the first 20 ms window); no value: they never did\n\
            after %: the remaining classes' mean rate from the stop to the end, in % of the link\n";
    out
}

/// `rows` as the `--json` document.
pub fn to_json(
    rows: &[LinkRow],
    link_bps: u64,
    offloads: OffloadMode,
    machine: &str,
) -> serde_json::Result<String> {
    let shared = (Some(link_bps), DaemonLoop::default());
    Document::json(offloads, machine, shared, rows.to_vec())
}

/// Runs the link-sharing comparison: `quick` or full, only `scenarios` when not empty, the
/// daemon's link RTT when given.
pub fn run(
    quick: bool,
    scenarios: &[Scenario],
    link_rtt: Option<std::time::Duration>,
    (offloads, json): (OffloadMode, bool),
) -> anyhow::Result<()> {
    let mut options = if quick {
        LinkOptions::quick()
    } else {
        LinkOptions::full()
    };
    options.offloads = offloads;
    if !scenarios.is_empty() {
        options.scenarios = scenarios.to_vec();
    }
    if let Some(rtt) = link_rtt {
        options.link_rtt = rtt;
    }
    let rows = crate::compare_cmd::or_exit(link_sharing::run(&options, &mut std::io::stderr()));
    let machine = metronome_bench::machine::describe();
    if json {
        println!("{}", to_json(&rows, options.link_bps, offloads, &machine)?);
    } else {
        println!("metronome compare --link-sharing on {machine}");
        print!("{}", format_table(&rows, options.link_bps, offloads));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(priority: bool) -> LinkRow {
        LinkRow {
            shaper: "htb".into(),
            scenario: Scenario::Priority,
            class: if priority { "probe" } else { "a" }.into(),
            weight: 1,
            priority,
            flows: if priority { 0 } else { 16 },
            expected_share_pct: (!priority).then_some(25.0),
            achieved_bps: 245e6,
            share_pct: (!priority).then_some(24.5),
            link_pct: 24.5,
            queue_p99_bytes: Some(30_000),
            queue_avg_bytes: Some(12_000.0),
            rtt_p99_us: priority.then_some(800),
            borrow_ms: None,
            after_stop_link_pct: None,
        }
    }

    #[test]
    fn json_rows_carry_the_documented_fields_and_round_trip() {
        let rows = [row(true), row(false)];
        let text = to_json(&rows, 1_000_000_000, OffloadMode::Host, "m").unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let first = v["rows"][0].as_object().unwrap();
        for key in [
            "shaper",
            "scenario",
            "class",
            "weight",
            "expected_share_pct",
            "achieved_bps",
            "share_pct",
            "queue_p99_bytes",
            "rtt_p99_us",
        ] {
            assert!(first.contains_key(key), "{key} missing: {text}");
        }
        assert_eq!(v["rows"][0]["scenario"], "priority");
        assert_eq!(v["rows"][0]["rtt_p99_us"], 800);
        assert!(v["rows"][0]["share_pct"].is_null());
        assert!(v["rows"][1]["rtt_p99_us"].is_null());
        assert_eq!(v["link_bps"], 1_000_000_000u64);
        let back: Document<LinkRow> = serde_json::from_str(&text).unwrap();
        assert_eq!(back.link_bps, Some(1_000_000_000));
        assert_eq!(back.rows, rows);
    }

    #[test]
    fn the_table_has_one_line_per_class_and_marks_priority() {
        let text = format_table(&[row(true), row(false)], 1_000_000_000, OffloadMode::Host);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("link: 1000 Mbit/s"), "{text}");
        assert!(
            lines[2].contains("prio") && lines[2].contains("800"),
            "{text}"
        );
        assert!(
            lines[3].contains("24.50") && lines[3].contains("25.00"),
            "{text}"
        );
        assert_eq!(lines[2].chars().count(), lines[3].chars().count(), "{text}");
    }
}
