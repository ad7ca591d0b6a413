//! `metronome compare [--quick] [--offloads host|off] [--attach] [--json]`
//! (`--link-sharing`: [`crate::compare_link`]; `--attach`: [`crate::compare_attach`]; `--cni`:
//! [`crate::compare_cni`];
//! `--classes` and `--packet-rate`: [`crate::compare_classes`]; `--churn`:
//! [`crate::compare_churn`]; `--cluster`: [`crate::compare_cluster`]):
//! Metronome (its class as one FIFO, and in the
//! fair mode as `metronome-fair`), kernel HTB and kernel TBF on the same sender/shaper/receiver
//! topology with the same kernel TCP traffic, at
//! 100 Mbit/s, 500 Mbit/s, 1, 2, 5 and 10 Gbit/s with 1, 16 and 256 flows (`--quick`:
//! 100 Mbit/s, 1 Gbit/s and 10 Gbit/s with 16 flows). What is measured, and how, is documented
//! in `metronome_testbed::compare`. `--offloads host` (the default) keeps the host's offloads on
//! the veths (GSO super-frames reach the shapers, as on a user's host); `--offloads off` gives
//! one-MTU frames with the offloads off. `--busy-poll` and `--timer-slack` set how the daemon
//! rows' loop waits for work (`[daemon] busy_poll`, `[daemon] timer_slack`), named in the
//! output (`"daemon_loop"` in `--json`, absent with the defaults).
//!
//! Output: the side-by-side table ([`format_table`]: the offload mode, then one line per
//! (target, flows), the shapers side by side, the metronome block with the daemon thread's own
//! CPU besides), or with `--json` exactly `{"offloads": "host"|"off", "machine": "...",
//! "daemon_loop" (only when set), "rows": [{"shaper", "target_bps", "flows", "achieved_bps",
//! "deviation_pct", "rtt_p99_us", "rtt_p50_us" (both null: the probe got no answer),
//! "cpu_pct", "daemon_cpu_pct" (null: not the daemon), "jain_bulk" (null: no bulk bytes)},
//! ...]}`
//! on standard output. Progress lines go to standard error.
//! Without CAP_NET_ADMIN: one line naming the privilege, exit status 2. Everything created is
//! removed at the end, on an error and on Ctrl-C (`metronome_testbed::netns::cleanup_on_signals`,
//! installed by `main` before any thread starts).

use crate::compare_plot;
use clap::Args;
use metronome_testbed::compare::{
    self, format_rtt_us, CompareOptions, DaemonLoop, Row, RunReport, Shaper,
};
use metronome_testbed::forwarder::ForwarderMode;
use metronome_testbed::offloads::OffloadMode;
use std::fmt::Write;

/// Options of `metronome compare`.
#[derive(Args, Debug)]
pub struct CompareArgs {
    /// Only 100 Mbit/s, 1 Gbit/s and 10 Gbit/s with 16 flows (about a minute).
    #[arg(long)]
    quick: bool,
    /// The veths' offloads: `host` (the host's defaults: GSO super-frames reach the shapers) or
    /// `off` (one-MTU frames: TSO, GSO, GRO and checksum offload off).
    #[arg(long, default_value = "host")]
    offloads: OffloadMode,
    /// Print `{"offloads", "machine", "rows": [...]}` instead of the table.
    #[arg(long)]
    json: bool,
    /// Only these target rates, tc-like (`100mbit,1gbit`), instead of the grid's.
    #[arg(long, value_delimiter = ',')]
    target: Vec<metronome_core::Rate>,
    /// Only these flow counts (`1,16,256`), instead of the grid's.
    #[arg(long, value_delimiter = ',')]
    flows: Vec<usize>,
    /// Run the daemon with this many shaper silos (`[daemon] cores`: one thread each, flows
    /// hashed among them) instead of its single loop; the daemon thread's CPU is then not
    /// reported.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u16).range(1..=256))]
    daemon_cores: u16,
    /// Give the daemon a core of its own, as between separate hosts: its loop pinned to CPU 0,
    /// the end hosts' veth receive steered to the other CPUs (`rps_cpus`), for every shaper.
    #[arg(long)]
    isolate_daemon: bool,
    /// The daemon rows' loop spins instead of sleeping when idle (`[daemon] busy_poll = true`,
    /// Carousel's busy-polling mode: the lowest latency, one core at 100 %).
    #[arg(long, conflicts_with = "link_sharing")]
    busy_poll: bool,
    /// The daemon rows' `[daemon] timer_slack` instead of its default (200us): how long after a
    /// departure the idle loop may wake, e.g. `0us` (more wake-ups, less delay).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration,
          conflicts_with = "link_sharing")]
    timer_slack: Option<metronome_core::Duration>,
    /// Throughput ceiling instead: one TCP flow at an unreachable target (40 Gbit/s) through the
    /// recvmmsg/sendmmsg forwarder (with virtio-net headers under the host's offloads), the
    /// daemon passing everything, and the daemon shaping, three times in turn.
    #[arg(long, conflicts_with = "quick")]
    ceiling: bool,
    /// Also draw SVG plots of the rows (deviation, achieved rate, probe RTT, CPU vs target) into
    /// DIR.
    #[arg(long, value_name = "DIR")]
    plot: Option<std::path::PathBuf>,
    /// Do not run: read the rows of a saved `--json` output and draw them (needs `--plot`).
    #[arg(long, value_name = "FILE", requires = "plot")]
    replot: Option<std::path::PathBuf>,
    /// Link sharing instead: weighted and priority classes on one 1 Gbit/s link through
    /// Metronome's `[link]` and kernel HTB (shares, borrowing, MQ-ECN marking, priority).
    #[arg(long, conflicts_with_all = ["ceiling", "target", "flows", "plot"])]
    link_sharing: bool,
    /// With `--link-sharing`: only these scenarios (`shares,borrow,marking,priority`).
    #[arg(long, value_delimiter = ',', requires = "link_sharing")]
    scenario: Vec<metronome_testbed::compare::link_sharing::Scenario>,
    /// With `--link-sharing`: the daemon's `[link] rtt` (the base RTT of its marking
    /// thresholds), microseconds.
    #[arg(long, value_name = "US", requires = "link_sharing")]
    link_rtt_us: Option<u64>,
    /// The daemon attached in place to a host's uplink instead (`[interfaces] attach`): the
    /// host's own TCP at 100 Mbit/s, 1 and 10 Gbit/s with 16 and 256 flows (metronome,
    /// metronome-fair, HTB and TBF on the uplink), then 8 workloads of 4 TCP flows limited to
    /// 100 Mbit/s each (metronome classes by `from`, HTB with u32 source filters, the bandwidth
    /// plugin's IFB+TBF). With `--quick`: 100 Mbit/s and 1 Gbit/s with 16 flows, and the
    /// workloads. The veths keep the host's offloads.
    #[arg(long, conflicts_with_all = ["ceiling", "link_sharing", "plot", "replot", "offloads",
          "daemon_cores", "busy_poll", "timer_slack"])]
    attach: bool,
    /// Pods limited through a chained CNI plugin instead: `metronome-cni` (classes on the node's
    /// `metronome run`, found next to this binary) against the containernetworking `bandwidth`
    /// plugin, both after `bridge` + `host-local`; per pod the rate each way (`--flows`
    /// connections per pod and direction, default 4), the fair probe's RTT, and 100 ADD/DEL
    /// cycles' leftovers. With `--quick`: 100 Mbit/s only and 20 cycles.
    #[arg(long, conflicts_with_all = ["ceiling", "link_sharing", "attach", "plot", "replot",
          "offloads", "daemon_cores", "isolate_daemon", "busy_poll", "timer_slack", "target",
          "classes", "packet_rate", "churn"])]
    cni: bool,
    /// With `--cni`: pods (default 8).
    #[arg(long, value_name = "N", requires = "cni",
          value_parser = clap::value_parser!(u64).range(1..=200))]
    pods: Option<u64>,
    /// With `--cni`: the pods' rates, each way (default 100mbit,1gbit).
    #[arg(long, value_delimiter = ',', requires = "cni")]
    rates: Vec<metronome_core::Rate>,
    /// With `--attach`: how the workloads' veths join the host, `bridge` (enslaved to a bridge
    /// holding their gateway) or `routed` (no bridge, a /32 route per workload).
    #[arg(long, default_value = "bridge", requires = "attach")]
    workload_link: metronome_testbed::netns::attach::WorkloadLink,
    /// Many classes instead: N classes (default 10 000; `--quick`: 1 000), one destination /32
    /// each, every class over its rate with raw UDP in jumbo frames, each class's rate measured
    /// at the receiver, through `metronome run` and kernel HTB with hashed u32 filters. With
    /// `--packet-rate`: the large class count (default 65 534).
    #[arg(long, value_name = "N", num_args = 0..=1,
          value_parser = clap::value_parser!(u64).range(1..=8_388_608),
          conflicts_with_all = ["ceiling", "link_sharing", "attach", "plot", "replot", "target",
          "flows"])]
    classes: Option<Option<u64>>,
    /// With `--classes`: the class rates, one for all or the smallest and the largest
    /// (`1mbit,10mbit`: spread linearly over the classes).
    #[arg(
        long,
        value_delimiter = ',',
        requires = "classes",
        conflicts_with = "packet_rate"
    )]
    class_rates: Vec<metronome_core::Rate>,
    /// With `--classes`: frame length in bytes, Ethernet header included (default 9014, an MTU
    /// of 9000); the veths' and the daemon's MTU follow.
    #[arg(long, value_name = "BYTES", requires = "classes", conflicts_with = "packet_rate",
          value_parser = clap::value_parser!(u64).range(64..=65_549))]
    frame_bytes: Option<u64>,
    /// Packets per second instead: 64-byte UDP frames as fast as the sender goes through
    /// `metronome run` with one class and with many (`--classes`, default 65 534), and the
    /// daemon's CPU per frame.
    #[arg(long, conflicts_with_all = ["ceiling", "link_sharing", "attach", "plot", "replot",
          "target", "flows"])]
    packet_rate: bool,
    /// Live classes instead: classes added and deleted through the daemon's control socket
    /// (`--ops`, one every `--pace`) while TCP runs through file classes (`--target`: their
    /// rates, default 200mbit,100mbit; `--flows`: connections per class, default 4) and a UDP
    /// flow (`--udp-rate`) passes through each added class: the operations' applied time, the
    /// TCP classes' rates calm and during the churn, the datagrams lost.
    #[arg(long, conflicts_with_all = ["ceiling", "link_sharing", "attach", "plot", "replot",
          "offloads", "daemon_cores", "isolate_daemon", "busy_poll", "timer_slack", "quick",
          "classes", "packet_rate"])]
    churn: bool,
    /// With `--churn`: operations, `add` and `del` alternating (even; default 1000).
    #[arg(long, value_name = "N", requires = "churn")]
    ops: Option<usize>,
    /// With `--churn`: time between two operations (default 5ms).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "churn")]
    pace: Option<metronome_core::Duration>,
    /// With `--churn`: the UDP flow's rate of payload (default 4mbit).
    #[arg(long, value_name = "RATE", requires = "churn")]
    udp_rate: Option<metronome_core::Rate>,
    /// With `--churn`: the added classes' rate, above the UDP flow's on the wire (default
    /// 6mbit).
    #[arg(long, value_name = "RATE", requires = "churn")]
    class_rate: Option<metronome_core::Rate>,
    /// With `--churn`: the TCP flows' congestion control (`TCP_CONGESTION`, for example
    /// `cubic`; default: the sender namespace's, the host's).
    #[arg(long, value_name = "NAME", requires = "churn")]
    congestion: Option<String>,
    /// With `--churn`: the daemon's `[daemon] realtime_priority` (its loop `SCHED_FIFO` at this
    /// priority, 1..=99; default: an ordinary task).
    #[arg(long, value_name = "N", requires = "churn",
          value_parser = clap::value_parser!(u8).range(1..=99))]
    realtime_priority: Option<u8>,
    /// One limit over three daemons through etcd instead (a cluster class of 300 Mbit/s, two
    /// sites busy, one idle): the start, a site stopping, a daemon killed, an etcd member
    /// killed, then every member; each step's time and rates against its target. Needs `etcd`.
    #[arg(long, conflicts_with_all = ["quick", "ceiling", "link_sharing", "attach", "cni",
          "plot", "replot", "offloads", "daemon_cores", "isolate_daemon", "busy_poll",
          "timer_slack", "target", "flows", "classes", "packet_rate", "churn"])]
    cluster: bool,
    /// With `--cluster`: a per-host class of half the limit on each daemon instead of the
    /// cluster class (the static split).
    #[arg(long, requires = "cluster")]
    per_host: bool,
}

/// `--timer-slack`'s value, as the configuration writes durations (`200us`, `0us`).
fn parse_duration(text: &str) -> Result<metronome_core::Duration, String> {
    metronome_daemon::ops::units::parse_duration(text).map_err(|e| e.to_string())
}

/// Width of one shaper's block, without the daemon column.
const BLOCK: usize = 44;
/// Width of the daemon-thread CPU column of the metronome block.
const DAEMON: usize = 11;

fn header(shapers: &[Shaper], offloads: OffloadMode) -> String {
    let mut top = format!("{:<17}", "");
    let mut sub = format!("{:<11}{:>6}", "target", "flows");
    for &s in shapers {
        let width = BLOCK + if s.is_daemon() { DAEMON } else { 0 };
        let _ = write!(top, " | {:<width$}", s.name());
        let _ = write!(
            sub,
            " | {:>9} {:>7} {:>9} {:>9} {:>6}",
            "Mbit/s", "dev %", "p99 us", "cpu %/G", "jain"
        );
        if s.is_daemon() {
            let _ = write!(sub, " {:>10}", "daemon %/G");
        }
    }
    format!(
        "offloads: {}\n{}\n{}\n",
        offloads.describe(),
        top.trim_end(),
        sub
    )
}

fn block(report: Option<&RunReport>, shaper: Shaper) -> String {
    let Some(r) = report else {
        let width = BLOCK + if shaper.is_daemon() { DAEMON } else { 0 };
        return format!(" | {:<width$}", "-");
    };
    let row = &r.row;
    let mut s = format!(
        " | {:>9.2} {:>7.2} {:>9} {:>9.1} {:>6}",
        row.achieved_bps / 1e6,
        row.deviation_pct,
        format_rtt_us(row.rtt_p99_us),
        row.cpu_pct,
        row.jain_bulk.map_or("-".to_owned(), |j| format!("{j:.3}"))
    );
    if shaper.is_daemon() {
        match row.daemon_cpu_pct {
            Some(d) => {
                let _ = write!(s, " {d:>10.1}");
            }
            None => s.push_str(&format!(" {:>10}", "-")),
        }
    }
    s
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
    let mut out = header(&shapers, offloads);
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
#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
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

/// Runs the comparison.
pub fn run(args: CompareArgs) -> anyhow::Result<()> {
    if let (Some(file), Some(dir)) = (&args.replot, &args.plot) {
        return replot(file, dir);
    }
    metronome_daemon::ops::service::init_logging(Default::default());
    let classes = args
        .classes
        .flatten()
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    if args.packet_rate {
        return crate::compare_classes::run_packet_rate(args.quick, classes, args.json);
    }
    if args.classes.is_some() {
        let choice = crate::compare_classes::ClassesChoice {
            quick: args.quick,
            classes,
            rates_bps: args.class_rates.iter().map(|r| r.bps()).collect(),
            frame_bytes: args.frame_bytes.map(|b| b as usize),
        };
        return crate::compare_classes::run_classes(choice, args.json);
    }
    if args.cluster {
        return crate::compare_cluster::run(args.per_host, args.json);
    }
    if args.cni {
        if args.flows.len() > 1 || args.flows.contains(&0) {
            eprintln!("metronome compare: --cni takes one --flows of at least 1");
            std::process::exit(2);
        }
        let cni = crate::compare_cni::CniArgs {
            quick: args.quick,
            pods: args.pods.map(|p| usize::try_from(p).unwrap_or(usize::MAX)),
            rates_bps: args.rates.iter().map(|r| r.bps()).collect(),
            flows: args.flows.first().copied(),
        };
        return crate::compare_cni::run(&cni, args.json);
    }
    if args.attach {
        if args.flows.contains(&0) {
            eprintln!("metronome compare: --flows: a flow count must be at least 1");
            std::process::exit(2);
        }
        let targets = args.target.iter().map(|r| r.bps()).collect();
        let grid = (targets, args.flows.clone());
        let modes = (args.isolate_daemon, args.workload_link, args.json);
        return crate::compare_attach::run(args.quick, grid, modes);
    }
    if args.churn {
        if args.flows.len() > 1 {
            eprintln!("metronome compare: --churn takes one --flows (connections per class)");
            std::process::exit(2);
        }
        let churn = crate::compare_churn::ChurnArgs {
            ops: args.ops,
            pace: args
                .pace
                .map(|d| std::time::Duration::from_nanos(d.as_nanos())),
            rates_bps: args.target.iter().map(|r| r.bps()).collect(),
            flows: args.flows.first().copied(),
            udp_rate_bps: args.udp_rate.map(|r| r.bps()),
            class_rate_bps: args.class_rate.map(|r| r.bps()),
            congestion: args.congestion.clone(),
            realtime_priority: args.realtime_priority,
        };
        return crate::compare_churn::run(&churn, args.json);
    }
    if args.link_sharing {
        let rtt = args.link_rtt_us.map(std::time::Duration::from_micros);
        let modes = (args.offloads, args.json);
        return crate::compare_link::run(args.quick, &args.scenario, rtt, modes);
    }
    let mut options = if args.ceiling {
        CompareOptions::ceiling()
    } else if args.quick {
        CompareOptions::quick()
    } else {
        CompareOptions::full()
    };
    options.offloads = args.offloads;
    options.daemon_cores = usize::from(args.daemon_cores);
    options.isolate_daemon = args.isolate_daemon;
    options.daemon_loop = DaemonLoop {
        busy_poll: args.busy_poll,
        timer_slack: args.timer_slack,
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
    let reports = or_exit(compare::run(&options, &mut std::io::stderr()));
    let machine = metronome_bench::machine::describe();
    if args.json {
        let modes = (options.offloads, options.daemon_loop);
        println!("{}", to_json(&reports, modes, &machine)?);
    } else {
        println!("metronome compare on {machine}");
        if let Some(mode) = options.daemon_loop.describe() {
            println!("daemon loop: {mode}");
        }
        if args.ceiling {
            print!(
                "{}",
                format_ceiling(&reports, options.offloads, options.forwarder_mode())
            );
        } else {
            print!("{}", format_table(&reports, options.offloads));
        }
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
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        compare: CompareArgs,
    }

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
            },
            windows: 30,
            probe_samples: 400,
        }
    }

    #[test]
    fn offloads_default_to_the_hosts_and_parse() {
        let a = Cli::try_parse_from(["compare"]).unwrap().compare;
        assert_eq!(a.offloads, OffloadMode::Host);
        let a = Cli::try_parse_from(["compare", "--ceiling", "--offloads", "off"])
            .unwrap()
            .compare;
        assert_eq!(a.offloads, OffloadMode::Off);
        assert!(a.ceiling);
        let a = Cli::try_parse_from(["compare", "--quick", "--offloads=host", "--json"])
            .unwrap()
            .compare;
        assert_eq!(a.offloads, OffloadMode::Host);
        assert!(a.quick && a.json);
        assert!(Cli::try_parse_from(["compare", "--offloads", "tso"]).is_err());
        assert!(Cli::try_parse_from(["compare", "--quick", "--ceiling"]).is_err());
    }

    #[test]
    fn churn_takes_its_options_the_rates_and_one_flow_count_but_no_other_mode() {
        let a = Cli::try_parse_from([
            "compare",
            "--churn",
            "--ops",
            "300",
            "--pace",
            "10ms",
            "--target",
            "50mbit,20mbit",
            "--flows",
            "2",
            "--udp-rate",
            "2mbit",
            "--class-rate",
            "3mbit",
            "--congestion",
            "cubic",
            "--realtime-priority",
            "10",
            "--json",
        ])
        .unwrap()
        .compare;
        assert!(a.churn && a.json);
        assert_eq!(a.ops, Some(300));
        assert_eq!(a.pace.map(|d| d.as_nanos()), Some(10_000_000));
        assert_eq!(a.target.len(), 2);
        assert_eq!(a.udp_rate.map(|r| r.bps()), Some(2_000_000));
        assert_eq!(a.class_rate.map(|r| r.bps()), Some(3_000_000));
        assert_eq!(a.congestion.as_deref(), Some("cubic"));
        assert_eq!(a.realtime_priority, Some(10));
        assert!(Cli::try_parse_from(["compare", "--churn", "--realtime-priority", "0"]).is_err());
        assert!(Cli::try_parse_from(["compare", "--ops", "10"]).is_err());
        assert!(Cli::try_parse_from(["compare", "--congestion", "cubic"]).is_err());
        assert!(Cli::try_parse_from(["compare", "--churn", "--attach"]).is_err());
        assert!(Cli::try_parse_from(["compare", "--churn", "--offloads", "off"]).is_err());
    }

    #[test]
    fn attach_takes_the_grid_and_the_steering_but_no_other_mode() {
        let a = Cli::try_parse_from([
            "compare",
            "--attach",
            "--quick",
            "--json",
            "--target",
            "100mbit",
            "--flows",
            "16",
            "--isolate-daemon",
        ])
        .unwrap()
        .compare;
        assert!(a.attach && a.quick && a.json && a.isolate_daemon);
        assert_eq!(
            a.workload_link,
            metronome_testbed::netns::attach::WorkloadLink::Bridge
        );
        assert_eq!(a.flows, [16]);
        assert_eq!(
            a.target.iter().map(|r| r.bps()).collect::<Vec<_>>(),
            [100_000_000]
        );
        let routed = ["compare", "--attach", "--workload-link", "routed"];
        let a = Cli::try_parse_from(routed).unwrap().compare;
        assert_eq!(
            a.workload_link,
            metronome_testbed::netns::attach::WorkloadLink::Routed
        );
        assert!(Cli::try_parse_from(["compare", "--workload-link", "routed"]).is_err());
        assert!(Cli::try_parse_from(["compare", "--attach", "--workload-link", "nat"]).is_err());
        for other in [
            &["--ceiling"][..],
            &["--link-sharing"],
            &["--offloads", "off"],
            &["--daemon-cores", "2"],
            &["--busy-poll"],
            &["--plot", "dir"],
        ] {
            let mut args = vec!["compare", "--attach"];
            args.extend_from_slice(other);
            assert!(Cli::try_parse_from(&args).is_err(), "{args:?}");
        }
    }

    #[test]
    fn link_sharing_takes_scenarios_and_a_link_rtt_and_nothing_of_the_grid() {
        use metronome_testbed::compare::link_sharing::Scenario;
        let a = Cli::try_parse_from([
            "compare",
            "--link-sharing",
            "--quick",
            "--scenario",
            "shares,marking",
            "--link-rtt-us",
            "4000",
        ])
        .unwrap()
        .compare;
        assert!(a.link_sharing && a.quick);
        assert_eq!(a.scenario, [Scenario::Shares, Scenario::Marking]);
        assert_eq!(a.link_rtt_us, Some(4000));
        assert!(Cli::try_parse_from(["compare", "--scenario", "shares"]).is_err());
        assert!(Cli::try_parse_from(["compare", "--link-sharing", "--scenario", "x"]).is_err());
        assert!(Cli::try_parse_from(["compare", "--link-sharing", "--ceiling"]).is_err());
        assert!(Cli::try_parse_from(["compare", "--link-sharing", "--flows", "4"]).is_err());
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
        };
        let report = report(Shaper::MetronomeFair, 100_000_000, 99.0e6);
        let text = to_json(&[report], (OffloadMode::Host, spin), "m").unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v["daemon_loop"], "busy_poll = true, timer_slack = 0 us",
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
    fn classes_takes_an_optional_count_rates_and_a_frame_size() {
        let parse = |args: &[&str]| Cli::try_parse_from(args).map(|c| c.compare);
        let a = parse(&["compare", "--classes"]).unwrap();
        assert_eq!(a.classes, Some(None));
        let a = parse(&[
            "compare",
            "--classes",
            "500",
            "--class-rates",
            "1mbit,10mbit",
            "--frame-bytes",
            "1514",
            "--json",
        ])
        .unwrap();
        assert_eq!(a.classes, Some(Some(500)));
        let rates: Vec<u64> = a.class_rates.iter().map(|r| r.bps()).collect();
        assert_eq!(rates, [1_000_000, 10_000_000]);
        assert_eq!(a.frame_bytes, Some(1514));
        let a = parse(&["compare", "--packet-rate", "--classes", "100", "--quick"]).unwrap();
        assert!(a.packet_rate && a.quick);
        assert_eq!(a.classes, Some(Some(100)));
        assert!(parse(&["compare", "--classes", "--attach"]).is_err());
        assert!(parse(&["compare", "--class-rates", "1mbit"]).is_err());
        assert!(parse(&["compare", "--classes", "0"]).is_err());
        assert!(parse(&["compare", "--packet-rate", "--frame-bytes", "64"]).is_err());
    }

    #[test]
    fn cluster_takes_per_host_and_json_but_no_other_mode() {
        let parse = |args: &[&str]| Cli::try_parse_from(args).map(|c| c.compare);
        let a = parse(&["compare", "--cluster"]).unwrap();
        assert!(a.cluster && !a.per_host && !a.json);
        let a = parse(&["compare", "--cluster", "--per-host", "--json"]).unwrap();
        assert!(a.cluster && a.per_host && a.json);
        assert!(parse(&["compare", "--per-host"]).is_err());
        assert!(parse(&["compare", "--cluster", "--cni"]).is_err());
        assert!(parse(&["compare", "--cluster", "--quick"]).is_err());
        assert!(parse(&["compare", "--cluster", "--flows", "2"]).is_err());
    }

    #[test]
    fn cni_takes_pods_rates_flows_quick_and_json_but_no_other_mode() {
        let parse = |args: &[&str]| Cli::try_parse_from(args).map(|c| c.compare);
        let a = parse(&["compare", "--cni"]).unwrap();
        assert!(a.cni && a.pods.is_none() && a.rates.is_empty());
        let a = parse(&[
            "compare",
            "--cni",
            "--pods",
            "3",
            "--rates",
            "100mbit,1gbit",
            "--flows",
            "2",
            "--quick",
            "--json",
        ])
        .unwrap();
        assert_eq!(a.pods, Some(3));
        let rates: Vec<u64> = a.rates.iter().map(|r| r.bps()).collect();
        assert_eq!(rates, [100_000_000, 1_000_000_000]);
        assert_eq!(a.flows, [2]);
        assert!(a.quick && a.json);
        assert!(parse(&["compare", "--cni", "--attach"]).is_err());
        assert!(parse(&["compare", "--cni", "--churn"]).is_err());
        assert!(parse(&["compare", "--pods", "3"]).is_err());
        assert!(parse(&["compare", "--rates", "1mbit"]).is_err());
        assert!(parse(&["compare", "--cni", "--pods", "0"]).is_err());
    }
}
