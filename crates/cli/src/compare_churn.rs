//! `metronome compare churn`: classes added and deleted through the daemon's control socket
//! while TCP runs through other classes (what is run and measured:
//! `metronome_testbed::compare::churn`; the options: [`crate::compare_args::ChurnArgs`]). The
//! daemon is this very binary's `run`.
//!
//! Output ([`format_report`]): the operations (the daemon's `applied_us` p50/p99/max, how many
//! above 1 ms and how many of those the machine's own stalls do not account for, the client's
//! round trip), one line per TCP class with its calm and churn phases side by side, the
//! machine's stalls in each phase and the UDP flow. With `--json` a [`ChurnDocument`] on
//! standard output; its JSON schema, generated from the types, is what
//! `metronome compare schema churn` prints. Progress lines go to standard error. Without CAP_NET_ADMIN: one line naming the
//! privilege, exit status 2; options out of bounds: exit status 2.

use metronome_testbed::compare::churn::{self, ChurnError, ChurnOptions, ChurnReport};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt::Write;
use std::time::Duration;

/// The `--json` document: the machine, then the fields of [`ChurnReport`].
#[derive(Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct ChurnDocument {
    pub(crate) machine: String,
    #[serde(flatten)]
    pub(crate) report: ChurnReport,
}

/// What `--churn` takes from the command line; `None`: the default.
#[derive(Debug, Default)]
pub struct ChurnArgs {
    /// `--ops`.
    pub ops: Option<usize>,
    /// `--pace`.
    pub pace: Option<Duration>,
    /// `--target`: the TCP classes' rates, bit/s.
    pub rates_bps: Vec<u64>,
    /// `--flows`: TCP connections per class (one value).
    pub flows: Option<usize>,
    /// `--udp-rate`, bit/s.
    pub udp_rate_bps: Option<u64>,
    /// `--class-rate`, bit/s.
    pub class_rate_bps: Option<u64>,
    /// `--congestion`.
    pub congestion: Option<String>,
    /// `--realtime-priority`.
    pub realtime_priority: Option<u8>,
}

impl ChurnArgs {
    /// The options these arguments give.
    pub fn options(&self) -> ChurnOptions {
        let full = ChurnOptions::full();
        ChurnOptions {
            ops: self.ops.unwrap_or(full.ops),
            pace: self.pace.unwrap_or(full.pace),
            tcp_rates_bps: if self.rates_bps.is_empty() {
                full.tcp_rates_bps.clone()
            } else {
                self.rates_bps.clone()
            },
            tcp_flows: self.flows.unwrap_or(full.tcp_flows),
            udp_rate_bps: self.udp_rate_bps.unwrap_or(full.udp_rate_bps),
            churn_rate_bps: self.class_rate_bps.unwrap_or(full.churn_rate_bps),
            congestion: self.congestion.clone(),
            realtime_priority: self.realtime_priority,
            ..full
        }
    }
}

fn mbit(bps: f64) -> f64 {
    bps / 1e6
}

/// The report as text.
pub fn format_report(r: &ChurnReport) -> String {
    let mut out = String::new();
    if let Some(p) = r.realtime_priority {
        let _ = writeln!(out, "the daemon's loop: SCHED_FIFO priority {p}");
    }
    if let Some(c) = &r.congestion {
        let _ = writeln!(out, "TCP congestion control: {c}");
    }
    let _ = writeln!(
        out,
        "operations: {} of {} carried out ({} add, {} del alternating, one every {} us), \
         {} counted by the daemon",
        r.ops_ok,
        r.ops,
        r.ops / 2,
        r.ops / 2,
        r.pace_us,
        r.changes_counted
    );
    let _ = writeln!(
        out,
        "applied (the daemon's applied_us): p50 {} us, p99 {} us, max {} us; {} above {} us, \
         {} of them beyond a CPU stall of the machine",
        r.applied.p50_us,
        r.applied.p99_us,
        r.applied.max_us,
        r.applied_over_target,
        churn::APPLIED_TARGET_US,
        r.applied_over_target_beyond_stalls
    );
    let _ = writeln!(
        out,
        "  add: p50 {} us, p99 {} us, max {} us; del: p50 {} us, p99 {} us, max {} us",
        r.applied_add.p50_us,
        r.applied_add.p99_us,
        r.applied_add.max_us,
        r.applied_del.p50_us,
        r.applied_del.p99_us,
        r.applied_del.max_us
    );
    let _ = writeln!(
        out,
        "round trip (the client's): p50 {} us, p99 {} us, max {} us",
        r.round_trip.p50_us, r.round_trip.p99_us, r.round_trip.max_us
    );
    if let Some(s) = r.slowest.first() {
        let _ = writeln!(
            out,
            "slowest: {} (op {}, {:.3} s into the churn): applied in {} us, round trip {} us, \
             a CPU stalled {} us meanwhile",
            s.kind, s.op, s.at_s, s.applied_us, s.round_trip_us, s.stall_us
        );
    }
    for e in &r.errors {
        let _ = writeln!(out, "error: {e}");
    }
    let _ = writeln!(
        out,
        "\nTCP classes, 100 ms windows on the wire: calm {:.1} s | churn {:.1} s",
        r.calm_s, r.churn_s
    );
    let _ = writeln!(
        out,
        "{:<6} {:>8} {:>5} | {:>9} {:>7} {:>8} {:>8} | {:>9} {:>7} {:>8} {:>8} | {:>5}",
        "class",
        "Mbit/s",
        "flows",
        "Mbit/s",
        "dev %",
        "worst %",
        "unstall",
        "Mbit/s",
        "dev %",
        "worst %",
        "unstall",
        "drops"
    );
    for c in &r.classes {
        let _ = writeln!(
            out,
            "{:<6} {:>8.1} {:>5} | {:>9.2} {:>7.2} {:>+8.2} {:>+8.2} | {:>9.2} {:>7.2} {:>+8.2} \
             {:>+8.2} | {:>5}",
            c.name,
            mbit(c.rate_bps as f64),
            c.flows,
            mbit(c.calm.mean_bps),
            c.calm.deviation_pct,
            c.calm.worst_window_pct,
            c.calm.worst_unstalled_window_pct,
            mbit(c.churn.mean_bps),
            c.churn.deviation_pct,
            c.churn.worst_window_pct,
            c.churn.worst_unstalled_window_pct,
            c.drops
        );
    }
    let m = &r.stalls;
    let steal = |ms: Option<f64>| ms.map_or("unknown".to_string(), |ms| format!("{ms:.0} ms"));
    let windows = |f: fn(&metronome_testbed::compare::churn::TcpClassRow) -> usize| {
        r.classes.first().map_or(0, f)
    };
    let _ = writeln!(
        out,
        "machine stalls ({} probe on {} CPUs): calm {} over 1 ms (longest {} us, {} of {} \
         windows), steal {}; churn {} over 1 ms (longest {} us, {} of {} windows), steal {}",
        if m.realtime {
            "real-time"
        } else {
            "normal-priority"
        },
        m.cpus,
        m.calm.over_1ms,
        m.calm.longest_us,
        windows(|c| c.calm.stalled_windows),
        windows(|c| c.calm.windows),
        steal(m.steal_calm_ms),
        m.churn.over_1ms,
        m.churn.longest_us,
        windows(|c| c.churn.stalled_windows),
        windows(|c| c.churn.windows),
        steal(m.steal_churn_ms)
    );
    let u = &r.udp;
    let _ = writeln!(
        out,
        "\nUDP flow at {:.1} Mbit/s, churn classes at {:.1} Mbit/s: {} datagrams sent, {} \
         received, {} lost ({} duplicates, {} send errors)",
        mbit(u.rate_bps as f64),
        mbit(u.class_rate_bps as f64),
        u.sent,
        u.received,
        u.lost,
        u.duplicates,
        u.send_errors
    );
    let _ = writeln!(
        out,
        "churn classes seen by the scrapes: {}, their packets {}, their drops {}, most \
         queued in one {}",
        u.classes_seen, u.class_packets_seen, u.class_drops_seen, u.class_queued_max_seen
    );
    if r.tap_missed > 0 {
        let _ = writeln!(
            out,
            "the tap missed {} frames: the rates undercount",
            r.tap_missed
        );
    }
    out += "dev %: the windows' mean absolute deviation from the class's rate; worst %: the \
            window farthest from it; unstall: the same among the windows in which no CPU of the \
            machine stalled over 1 ms; drops: the daemon's drops of the class (horizon rejects)\n";
    out
}

/// Runs `metronome compare --churn`.
pub fn run(args: &ChurnArgs, json: bool) -> anyhow::Result<()> {
    let mut options = args.options();
    options.daemon_binary = std::env::current_exe().ok();
    let report = match churn::run(&options, &mut std::io::stderr()) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("metronome compare: {e}");
            let usage = e.is_missing_privilege() || matches!(e, ChurnError::Invalid(_));
            std::process::exit(if usage { 2 } else { 1 });
        }
    };
    let machine = metronome_bench::machine::describe();
    if json {
        let doc = ChurnDocument { machine, report };
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        println!("metronome compare --churn on {machine}");
        print!("{}", format_report(&report));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use metronome_testbed::compare::churn::{
        MachineStalls, PhaseRate, SlowOp, TcpClassRow, UdpRow,
    };
    use metronome_testbed::stats::Spread;

    fn report() -> ChurnReport {
        let phase = |mean_bps, deviation_pct, worst_window_pct| PhaseRate {
            windows: 50,
            mean_bps,
            deviation_pct,
            worst_window_pct,
            worst_window_at_s: 1.2,
            stalled_windows: 1,
            worst_unstalled_window_pct: worst_window_pct / 2.0,
        };
        ChurnReport {
            ops: 1000,
            ops_ok: 1000,
            pace_us: 5000,
            errors: Vec::new(),
            applied: Spread {
                p50_us: 40,
                p99_us: 300,
                max_us: 900,
            },
            applied_add: Spread {
                p50_us: 60,
                p99_us: 300,
                max_us: 900,
            },
            applied_del: Spread {
                p50_us: 20,
                p99_us: 200,
                max_us: 500,
            },
            applied_over_target: 0,
            applied_over_target_beyond_stalls: 0,
            round_trip: Spread {
                p50_us: 90,
                p99_us: 400,
                max_us: 1200,
            },
            slowest: vec![SlowOp {
                op: 7,
                kind: "del".into(),
                applied_us: 900,
                round_trip_us: 1200,
                at_s: 0.035,
                stall_us: 300,
            }],
            changes_counted: 1000,
            calm_s: 5.0,
            churn_s: 5.01,
            classes: vec![TcpClassRow {
                name: "tcp0".into(),
                rate_bps: 200_000_000,
                flows: 4,
                calm: phase(199.9e6, 0.4, -1.2),
                churn: phase(199.8e6, 0.5, 1.5),
                drops: 0,
            }],
            udp: UdpRow {
                rate_bps: 4_000_000,
                class_rate_bps: 6_000_000,
                sent: 2500,
                received: 2500,
                class_packets_seen: 900,
                classes_seen: 480,
                ..UdpRow::default()
            },
            tap_missed: 0,
            stalls: MachineStalls {
                realtime: true,
                cpus: 2,
                steal_calm_ms: Some(10.0),
                steal_churn_ms: Some(0.0),
                ..MachineStalls::default()
            },
            congestion: None,
            realtime_priority: Some(10),
        }
    }

    #[test]
    fn the_text_has_the_operations_the_phases_and_the_udp_flow() {
        let text = format_report(&report());
        assert!(text.contains("1000 of 1000 carried out"), "{text}");
        assert!(
            text.contains("p50 40 us, p99 300 us, max 900 us; 0 above 1000 us, 0 of them"),
            "{text}"
        );
        assert!(
            text.contains("tcp0      200.0     4 |    199.90    0.40    -1.20    -0.60 |"),
            "{text}"
        );
        assert!(
            text.contains("2500 datagrams sent, 2500 received, 0 lost"),
            "{text}"
        );
    }

    #[test]
    fn json_has_the_fields_of_its_schema_and_round_trips() {
        let doc = ChurnDocument {
            machine: "m".into(),
            report: report(),
        };
        let text = serde_json::to_string_pretty(&doc).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        let want = crate::compare_schema::fields(crate::compare_schema::SchemaOf::Churn);
        keys.sort_unstable();
        assert_eq!(keys, want);
        assert!(want.iter().any(|k| k == "realtime_priority"));
        assert_eq!(v["classes"][0]["churn"]["deviation_pct"], 0.5);
        assert_eq!(v["udp"]["lost"], 0);
        let back: ChurnDocument = serde_json::from_str(&text).unwrap();
        assert_eq!(back, doc);
    }

    #[test]
    fn defaults_are_the_targets_and_arguments_replace_them() {
        let o = ChurnArgs::default().options();
        assert_eq!((o.ops, o.pace), (1000, Duration::from_millis(5)));
        assert_eq!(o.tcp_rates_bps, [200_000_000, 100_000_000]);
        let o = ChurnArgs {
            ops: Some(10),
            rates_bps: vec![50_000_000],
            class_rate_bps: Some(8_000_000),
            ..ChurnArgs::default()
        }
        .options();
        assert_eq!(
            (o.ops, o.tcp_rates_bps.len(), o.churn_rate_bps),
            (10, 1, 8_000_000)
        );
    }
}
