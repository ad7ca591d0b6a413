//! `metronome compare classes`: N classes (default 10 000), each held to its own rate, measured
//! class by class at the receiver through `metronome run` and through kernel HTB with hashed u32
//! filters (`metronome_testbed::compare::classes`); and `metronome compare packet-rate`: small
//! UDP frames per second through `metronome run` with N classes (default 65 534) against one
//! (`metronome_testbed::compare::packet_rate`).
//!
//! Output of `classes`: one line per shaper (classes within the tolerance, deviations, the worst
//! class, rates, CPU), a failed shaper with its error; of `packet-rate`: a line per run, then the
//! medians per class count and their ratios, saying when the sender, not the daemon, limited.
//! With `--json` a [`ClassesDocument`] or a [`PacketRateDocument`] (their schemas:
//! `metronome compare schema classes`, `... packet-rate`). Progress lines go to standard error.
//! Without CAP_NET_ADMIN: one line naming the privilege, exit status 2.

use crate::compare_cmd::or_exit;
use metronome_testbed::compare::classes::{self, ClassesOptions, ClassesOutcome};
use metronome_testbed::compare::packet_rate::{
    self, medians, sender_limited, PacketRateOptions, PacketRateOutcome,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt::Write;
use std::time::Duration;

/// The `--json` document of `--classes`.
#[derive(Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct ClassesDocument {
    pub(crate) machine: String,
    pub(crate) classes: Vec<ClassesOutcome>,
}

/// The `--json` document of `--packet-rate`.
#[derive(Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct PacketRateDocument {
    pub(crate) machine: String,
    pub(crate) packet_rate: Vec<PacketRateOutcome>,
}

/// What `--classes` runs: the full or quick options with the command line's changes.
pub struct ClassesChoice {
    /// `--quick`.
    pub quick: bool,
    /// `--classes N`.
    pub classes: Option<usize>,
    /// `--class-rates MIN[,MAX]`, bit/s.
    pub rates_bps: Vec<u64>,
    /// `--frame-bytes`.
    pub frame_bytes: Option<usize>,
}

/// The lines of `--classes`: one per shaper, then the legend.
pub fn format_classes(outcomes: &[ClassesOutcome]) -> String {
    let mut out = String::new();
    for o in outcomes {
        match o {
            ClassesOutcome::Measured(r) => {
                let _ = writeln!(
                    out,
                    "{}: {} classes, {}/{} within {} % of their rate ({} measured); deviation \
                     mean {:.3} %, min {:+.3} %, max {:+.3} %",
                    r.shaper.name(),
                    r.classes,
                    r.within_tolerance,
                    r.classes,
                    r.tolerance_pct,
                    r.measured,
                    r.deviation_mean_pct,
                    r.deviation_min_pct,
                    r.deviation_max_pct
                );
                if let Some(w) = &r.worst {
                    let _ = writeln!(
                        out,
                        "  worst: class {} ({}) at {} Mbit/s: {}",
                        w.class,
                        w.dst,
                        w.target_bps as f64 / 1e6,
                        match (w.achieved_bps, w.deviation_pct) {
                            (Some(a), Some(d)) => format!("{:.4} Mbit/s, {d:+.3} %", a / 1e6),
                            _ => "fewer than two frames in the window".to_owned(),
                        }
                    );
                }
                let mut daemon = r
                    .daemon_cpu_pct
                    .map_or(String::new(), |d| format!(", daemon {d:.1} %/G"));
                if let Some(d) = r.daemon_socket_drops {
                    let _ = write!(daemon, ", {d} frames lost at the daemon's sockets");
                }
                let _ = writeln!(
                    out,
                    "  {:.3} Gbit/s delivered of {:.3} (offered {:.3}), {}-byte frames; cpu \
                     {:.1} %/G{daemon}; set-up {} ms; sender late by up to {:.1} ms; receiver \
                     missed {} frames",
                    r.achieved_bps / 1e9,
                    r.target_bps / 1e9,
                    r.offered_bps / 1e9,
                    r.frame_bytes,
                    r.cpu_pct,
                    r.setup_ms,
                    r.sender_lag_ms,
                    r.receiver_missed
                );
            }
            ClassesOutcome::Failed { .. } => {
                let _ = writeln!(out, "{}", classes::describe(o));
            }
        }
    }
    out += "rate of a class: its bytes after its first frame over the time from its first to its \
            last frame at the receiver, in the window after the warm-up\n\
            htb-u32: a leaf per class (rate = ceil, one-frame burst), u32 filters hashed on the \
            destination's third and fourth octets (tc -batch)\n\
            cpu %/G: machine kernel time + this process's and the daemon's user time; daemon \
            %/G: the `metronome run` process's user + system time; both in % of one CPU per \
            Gbit/s delivered\n";
    out
}

/// The lines of `--packet-rate`: one per run, the medians, their ratio to the first class count
/// and whether the sender limited.
pub fn format_packet_rate(outcomes: &[PacketRateOutcome]) -> String {
    let mut out = String::new();
    for o in outcomes {
        let round = match o {
            PacketRateOutcome::Measured(r) => r.round,
            PacketRateOutcome::Failed { round, .. } => *round,
        };
        let _ = writeln!(out, "round {round}: {}", packet_rate::describe(o));
    }
    let m = medians(outcomes);
    if let Some(&(base, base_fps, base_ns)) = m.first() {
        for &(n, fps, ns) in &m {
            let _ = writeln!(
                out,
                "{n} classes, medians: {fps:.0} frames/s delivered ({:.2}x {base} classes), {ns:.0} \
                 ns of daemon CPU per frame ({:.2}x)",
                fps / base_fps,
                ns / base_ns
            );
        }
    }
    let limited = outcomes
        .iter()
        .filter_map(|o| match o {
            PacketRateOutcome::Measured(r) => Some(r),
            PacketRateOutcome::Failed { .. } => None,
        })
        .filter(|r| sender_limited(r))
        .count();
    if limited > 0 {
        let _ = writeln!(
            out,
            "{limited} run(s) delivered at least {:.0} % of what was sent: there the sender, not \
             the daemon, limited, the frames/s ratio compares nothing and the CPU per frame is \
             the figure",
            packet_rate::SENDER_LIMITED * 100.0
        );
    }
    out += "frames/s: rx_packets of the receiver's veth over the window; daemon CPU: the \
            `metronome run` process's user + system time over the window per delivered frame\n";
    out
}

/// Runs `metronome compare --classes`.
pub fn run_classes(choice: ClassesChoice, json: bool) -> anyhow::Result<()> {
    let mut options = if choice.quick {
        ClassesOptions::quick()
    } else {
        ClassesOptions::full()
    };
    if let Some(n) = choice.classes {
        options.classes = n;
    }
    match choice.rates_bps[..] {
        [] => {}
        [r] => options.rates_bps = (r, r),
        [lo, hi] if lo <= hi => options.rates_bps = (lo, hi),
        _ => {
            eprintln!(
                "metronome compare: --class-rates: one rate, or the smallest and the largest"
            );
            std::process::exit(2);
        }
    }
    if let Some(b) = choice.frame_bytes {
        options.frame_bytes = b;
    }
    options.daemon_binary = std::env::current_exe().ok();
    let outcomes = or_exit(classes::run(&options, &mut std::io::stderr()));
    let machine = metronome_bench::machine::describe();
    if json {
        let doc = ClassesDocument {
            machine,
            classes: outcomes,
        };
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        println!("metronome compare --classes on {machine}");
        print!("{}", format_classes(&outcomes));
    }
    Ok(())
}

/// Runs `metronome compare --packet-rate`.
pub fn run_packet_rate(quick: bool, classes: Option<usize>, json: bool) -> anyhow::Result<()> {
    let mut options = PacketRateOptions::full();
    if quick {
        options.rounds = 1;
        options.measure = Duration::from_secs(3);
    }
    if let Some(n) = classes {
        options.class_counts = vec![1, n];
    }
    options.daemon_binary = std::env::current_exe().ok();
    let outcomes = or_exit(packet_rate::run(&options, &mut std::io::stderr()));
    let machine = metronome_bench::machine::describe();
    if json {
        let doc = PacketRateDocument {
            machine,
            packet_rate: outcomes,
        };
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        println!("metronome compare --packet-rate on {machine}");
        print!("{}", format_packet_rate(&outcomes));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use metronome_testbed::compare::classes::{ClassesRow, WorstClass};
    use metronome_testbed::compare::packet_rate::PacketRateRow;
    use metronome_testbed::compare::Shaper;

    fn row() -> ClassesRow {
        ClassesRow {
            shaper: Shaper::Metronome,
            classes: 1000,
            frame_bytes: 9014,
            target_bps: 1.5e9,
            offered_bps: 1.575e9,
            achieved_bps: 1.499e9,
            measured: 1000,
            within_tolerance: 999,
            tolerance_pct: 2.0,
            deviation_mean_pct: 0.1,
            deviation_min_pct: -2.5,
            deviation_max_pct: 0.3,
            worst: Some(WorstClass {
                class: 17,
                dst: "10.128.0.17".into(),
                target_bps: 1_017_017,
                achieved_bps: Some(991_591.0),
                deviation_pct: Some(-2.5),
            }),
            cpu_pct: 40.0,
            daemon_cpu_pct: Some(12.0),
            setup_ms: 150,
            sender_lag_ms: 0.4,
            receiver_missed: 0,
            daemon_socket_drops: Some(5),
        }
    }

    #[test]
    fn the_classes_lines_name_the_worst_class_and_a_failure() {
        let failed = ClassesOutcome::Failed {
            shaper: Shaper::HtbU32,
            classes: 1000,
            error: "tc -batch: RTNETLINK answers: File exists".into(),
        };
        let text = format_classes(&[ClassesOutcome::Measured(row()), failed]);
        assert!(
            text.contains("metronome: 1000 classes, 999/1000 within 2 %"),
            "{text}"
        );
        assert!(text.contains("worst: class 17 (10.128.0.17)"), "{text}");
        assert!(text.contains("-2.500 %"), "{text}");
        assert!(
            text.contains("daemon 12.0 %/G, 5 frames lost at the daemon's sockets"),
            "{text}"
        );
        assert!(text.contains("htb-u32: not measured: tc -batch"), "{text}");
    }

    #[test]
    fn the_json_keeps_errors_and_figures_apart() {
        let doc = ClassesDocument {
            machine: "test".into(),
            classes: vec![
                ClassesOutcome::Measured(row()),
                ClassesOutcome::Failed {
                    shaper: Shaper::HtbU32,
                    classes: 1000,
                    error: "x".into(),
                },
            ],
        };
        let text = serde_json::to_string(&doc).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["classes"][0]["shaper"], "metronome");
        assert_eq!(v["classes"][0]["worst"]["class"], 17);
        assert_eq!(v["classes"][1]["shaper"], "htb-u32");
        assert!(v["classes"][1].get("achieved_bps").is_none(), "{text}");
        let back: ClassesDocument = serde_json::from_str(&text).unwrap();
        assert_eq!(back, doc);
    }

    #[test]
    fn the_packet_rate_lines_give_ratios_and_name_a_sender_limit() {
        let run = |classes, round, delivered_fps, ns| {
            PacketRateOutcome::Measured(PacketRateRow {
                classes,
                round,
                frame_bytes: 64,
                sent_fps: 400_000.0,
                delivered_fps,
                daemon_cpus: 0.9,
                daemon_ns_per_frame: ns,
                setup_ms: 10,
                daemon_socket_drops: Some(0),
            })
        };
        let text =
            format_packet_rate(&[run(1, 0, 399_000.0, 2000.0), run(100, 0, 200_000.0, 4000.0)]);
        assert!(
            text.contains("100 classes, medians: 200000 frames/s delivered (0.50x 1 classes)"),
            "{text}"
        );
        assert!(text.contains("(2.00x)"), "{text}");
        assert!(text.contains("1 run(s) delivered at least 95 %"), "{text}");
    }
}
