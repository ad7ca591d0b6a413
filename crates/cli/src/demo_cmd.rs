//! `metronome demo [--duration 10s] [--offloads host|off] [--attach] [--json]`: with
//! CAP_NET_ADMIN, real kernel TCP through the daemon on a throwaway sender/shaper/receiver topology
//! (`metronome_testbed::demo::run_real`); without it, one line saying so and the same scenario in
//! the simulator (`metronome_testbed::demo::run_simulated`); everything removed at the end, on an
//! error and on Ctrl-C (`metronome_testbed::netns::cleanup_on_signals`). `--attach` runs
//! `metronome_testbed::demo::attach` instead; `--json` prints one [`DemoReport`] on standard
//! output. The options, the exit statuses and the JSON document: docs/cli.md ("metronome demo").

use clap::Args;
use metronome_testbed::demo::attach::run_attached;
use metronome_testbed::demo::{
    run_real, run_simulated, ClassRow, DemoError, DemoMode, DemoReport, OffloadMode,
};
use metronome_testbed::netns::attach::WorkloadLink;
use metronome_testbed::netns::TopoError;
use std::io::Write;
use std::time::Duration;

/// Options of `metronome demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// How long the traffic runs (`10s`, `2500ms`).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    duration: Duration,
    /// The veths' offloads: `host` (the host's defaults: GSO super-frames reach the daemon) or
    /// `off` (one-MTU frames: TSO, GSO, GRO and checksum offload off).
    #[arg(long, default_value = "host")]
    offloads: OffloadMode,
    /// Print the conformance table as one JSON document on standard output (the live lines go
    /// to standard error).
    #[arg(long)]
    json: bool,
    /// The daemon attached in place to a host's uplink instead (`[interfaces] attach`): the
    /// host's own TCP and two workloads' through it, each its own class (the workloads' by
    /// `from`, their host-side veth). Needs CAP_NET_ADMIN (no simulator fallback); keeps the
    /// host's offloads.
    #[arg(long, conflicts_with = "offloads")]
    attach: bool,
    /// With `--attach`: how the workloads' veths join the host, `bridge` (enslaved to a bridge
    /// holding their gateway) or `routed` (no bridge, a /32 route per workload).
    #[arg(long, default_value = "bridge", requires = "attach")]
    workload_link: WorkloadLink,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    metronome_daemon::ops::units::parse_duration(s)
        .map(|d| Duration::from_nanos(d.as_nanos()))
        .map_err(|e| e.to_string())
}

/// Installs the Ctrl-C cleanup; call before any thread starts.
pub fn install_cleanup() {
    if let Err(e) = metronome_testbed::netns::cleanup_on_signals() {
        eprintln!("metronome demo: cannot install the Ctrl-C cleanup: {e}");
    }
}

/// The `--json` document of `report`.
fn to_json(report: &DemoReport) -> serde_json::Result<String> {
    serde_json::to_string_pretty(report)
}

/// Runs the demo.
pub fn run(args: DemoArgs) -> anyhow::Result<()> {
    metronome_daemon::ops::service::init_logging(Default::default());
    let machine = metronome_bench::machine::describe();
    let (mut stdout, mut stderr) = (std::io::stdout(), std::io::stderr());
    let out: &mut dyn Write = if args.json { &mut stderr } else { &mut stdout };
    let _ = writeln!(out, "metronome demo on {machine}");
    if args.attach {
        // The daemon is this very binary's `run`.
        let binary = std::env::current_exe()?;
        let classes = match run_attached(args.duration, (args.workload_link, &binary), out) {
            Ok(rows) => rows,
            Err(e) => {
                eprintln!("metronome demo --attach: {e}");
                let missing = matches!(e, DemoError::Topo(TopoError::MissingPrivilege(_)));
                std::process::exit(if missing { 2 } else { 1 });
            }
        };
        if args.json {
            let offloads = Some(OffloadMode::Host);
            let report = DemoReport::new(DemoMode::Real, offloads, machine, args.duration, classes);
            println!("{}", to_json(&report)?);
        }
        return Ok(());
    }
    let (mode, offloads, classes): (DemoMode, Option<OffloadMode>, Vec<ClassRow>) =
        match run_real(args.duration, args.offloads, out) {
            Ok(rows) => (DemoMode::Real, Some(args.offloads), rows),
            Err(DemoError::Topo(TopoError::MissingPrivilege(_))) => {
                let _ = writeln!(
                    out,
                    "no CAP_NET_ADMIN (needed for network namespaces): running the same scenario \
                     in the simulator instead"
                );
                let rows = run_simulated(args.duration, out)?;
                (DemoMode::Simulated, None, rows)
            }
            Err(e) => {
                eprintln!("metronome demo: {e}");
                std::process::exit(1);
            }
        };
    if args.json {
        let report = DemoReport::new(mode, offloads, machine, args.duration, classes);
        println!("{}", to_json(&report)?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        demo: DemoArgs,
    }

    #[test]
    fn offloads_default_to_the_hosts_and_parse() {
        let a = Cli::try_parse_from(["demo"]).unwrap().demo;
        assert_eq!(a.offloads, OffloadMode::Host);
        assert!(!a.json);
        assert_eq!(a.duration, Duration::from_secs(10));
        let a = Cli::try_parse_from(["demo", "--offloads", "off", "--json", "--duration", "5s"])
            .unwrap()
            .demo;
        assert_eq!(a.offloads, OffloadMode::Off);
        assert!(a.json);
        assert_eq!(a.duration, Duration::from_secs(5));
        assert!(Cli::try_parse_from(["demo", "--offloads", "on"]).is_err());
    }

    #[test]
    fn json_is_one_document_with_the_classes_and_round_trips() {
        let report = DemoReport::new(
            DemoMode::Real,
            Some(OffloadMode::Host),
            "CPU X, 2 cores, 8 GiB, Linux 6.1".into(),
            Duration::from_secs(5),
            vec![
                ClassRow {
                    name: "bulk".into(),
                    target_bps: Some(200e6),
                    achieved_bps: 198.5e6,
                    deviation_pct: Some(1.25),
                },
                ClassRow {
                    name: "default".into(),
                    target_bps: None,
                    achieved_bps: 3.5e9,
                    deviation_pct: None,
                },
            ],
        );
        let text = to_json(&report).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "classes",
                "duration_s",
                "machine",
                "mode",
                "offloads",
                "warmup_ms",
                "window_ms"
            ]
        );
        assert_eq!(v["mode"], "real");
        assert_eq!(v["offloads"], "host");
        assert_eq!(v["classes"][0]["name"], "bulk");
        assert_eq!(v["classes"][0]["target_bps"], 200e6);
        assert_eq!(v["classes"][0]["achieved_bps"], 198.5e6);
        assert_eq!(v["classes"][0]["deviation_pct"], 1.25);
        assert!(v["classes"][1]["target_bps"].is_null());
        assert!(v["classes"][1]["deviation_pct"].is_null());
        let back: DemoReport = serde_json::from_str(&text).unwrap();
        assert_eq!(back, report);
        let simulated = DemoReport::new(
            DemoMode::Simulated,
            None,
            String::new(),
            Duration::from_secs(1),
            Vec::new(),
        );
        let v: serde_json::Value = serde_json::from_str(&to_json(&simulated).unwrap()).unwrap();
        assert_eq!(v["mode"], "simulated");
        assert!(v["offloads"].is_null());
    }
}
