//! The command line of `metronome compare [MODE]`: one subcommand per mode, each with only the
//! options it takes; without a mode, the kernel grid ([`crate::compare_cmd`]).
//!
//! The mode flags of the single-command spelling (`compare --attach`, `compare --classes 500`,
//! `compare --packet-rate --classes 100`, ...) stay accepted: [`with_mode_aliases`] rewrites
//! them into the subcommand before clap parses, so a second mode flag, or an option the mode
//! does not take, is refused as an unknown argument of that mode.

use clap::{Args, Subcommand};
use metronome_core::Rate;
use metronome_testbed::netns::attach::WorkloadLink;
use metronome_testbed::offloads::OffloadMode;
use std::ffi::OsString;
use std::path::PathBuf;

/// Options of `metronome compare`.
#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct CompareArgs {
    /// The mode; without one, the kernel grid.
    #[command(subcommand)]
    pub mode: Option<Mode>,
    /// The kernel grid's options (no mode given).
    #[command(flatten)]
    pub grid: KernelArgs,
}

impl CompareArgs {
    /// The mode to run: the one given, or the kernel grid.
    pub fn into_mode(self) -> Mode {
        self.mode.unwrap_or(Mode::Kernel(self.grid))
    }
}

/// The modes of `metronome compare`.
#[derive(Subcommand, Debug)]
pub enum Mode {
    /// The daemon against kernel HTB and TBF on a sender/shaper/receiver topology (the default).
    Kernel(KernelArgs),
    /// Throughput ceiling: one TCP flow at an unreachable target (40 Gbit/s) through the
    /// recvmmsg/sendmmsg forwarder (with virtio-net headers under the host's offloads), the
    /// daemon passing everything, and the daemon shaping, three times in turn.
    Ceiling(GridArgs),
    /// Weighted and priority classes on one 1 Gbit/s link through Metronome's `[link]` and
    /// kernel HTB (shares, borrowing, MQ-ECN marking, priority).
    LinkSharing(LinkArgs),
    /// The daemon attached in place to a host's uplink (`[interfaces] attach`): the host's own
    /// TCP at 100 Mbit/s, 1 and 10 Gbit/s with 16 and 256 flows (metronome, metronome-fair, HTB
    /// and TBF on the uplink), then 8 workloads of 4 TCP flows limited to 100 Mbit/s each. With
    /// `--quick`: 100 Mbit/s and 1 Gbit/s with 16 flows, and the workloads.
    Attach(AttachArgs),
    /// Pods limited through a chained CNI plugin: `metronome-cni` against the containernetworking
    /// `bandwidth` plugin, both after `bridge` + `host-local`; per pod the rate each way, the
    /// fair probe's RTT, and 100 ADD/DEL cycles' leftovers (`--quick`: 100 Mbit/s, 20 cycles).
    Cni(CniArgs),
    /// Many classes: N classes, one destination /32 each, every class over its rate with raw UDP
    /// in jumbo frames, each class's rate measured at the receiver, through `metronome run` and
    /// kernel HTB with hashed u32 filters.
    Classes(ClassesArgs),
    /// Packets per second: 64-byte UDP frames as fast as the sender goes through
    /// `metronome run` with one class and with many, and the daemon's CPU per frame.
    PacketRate(PacketRateArgs),
    /// Live classes added and deleted through the daemon's control socket while TCP runs
    /// through file classes and a UDP flow passes through each added class.
    Churn(ChurnArgs),
    /// One limit over three daemons through etcd (a cluster class of 300 Mbit/s, two sites busy,
    /// one idle): the start, a site stopping, a daemon killed, an etcd member killed, then every
    /// member. Needs `etcd`.
    Cluster(ClusterArgs),
    /// A class tree on a host's uplink, attached in place: a 300 Mbit/s parent over three
    /// children of 200 Mbit/s, through `metronome run` and the same tree in kernel HTB; both TCP
    /// children busy, one alone, and both beside a UDP flood into the third, each class's rate
    /// beside its max-min fair share (`--quick`: 4 s measured instead of 10).
    Hierarchy(HierarchyArgs),
    /// Print the JSON schema of MODE's `--json` document (generated from its types).
    Schema {
        /// The mode.
        #[arg(value_enum)]
        mode: crate::compare_schema::SchemaOf,
    },
}

/// The options of the kernel grid and of the ceiling.
#[derive(Args, Debug, Clone)]
pub struct GridArgs {
    /// The veths' offloads: `host` (the host's defaults: GSO super-frames reach the shapers) or
    /// `off` (one-MTU frames: TSO, GSO, GRO and checksum offload off).
    #[arg(long, default_value = "host")]
    pub offloads: OffloadMode,
    /// Print `{"offloads", "machine", "rows": [...]}` instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Only these target rates, tc-like (`100mbit,1gbit`), instead of the grid's.
    #[arg(long, value_delimiter = ',')]
    pub target: Vec<Rate>,
    /// Only these flow counts (`1,16,256`), instead of the grid's.
    #[arg(long, value_delimiter = ',')]
    pub flows: Vec<usize>,
    /// Run the daemon with this many shaper silos (`[daemon] cores`: one thread each, flows
    /// hashed among them) instead of its single loop; the daemon thread's CPU is then not
    /// reported.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u16).range(1..=256))]
    pub daemon_cores: u16,
    /// Give the daemon a core of its own, as between separate hosts: its loop pinned to CPU 0,
    /// the end hosts' veth receive steered to the other CPUs (`rps_cpus`), for every shaper.
    #[arg(long)]
    pub isolate_daemon: bool,
    /// The daemon rows' loop spins instead of sleeping when idle (`[daemon] busy_poll = true`,
    /// Carousel's busy-polling mode: the lowest latency, one core at 100 %).
    #[arg(long)]
    pub busy_poll: bool,
    #[command(flatten)]
    pub slack: SlackArgs,
    /// Also draw SVG plots of the rows (deviation, achieved rate, probe RTT, CPU vs target) into
    /// DIR.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Do not run: read the rows of a saved `--json` output and draw them (needs `--plot`).
    #[arg(long, value_name = "FILE", requires = "plot")]
    pub replot: Option<PathBuf>,
}

/// The kernel grid's options: the grid's and `--quick`.
#[derive(Args, Debug, Clone)]
pub struct KernelArgs {
    /// Only 100 Mbit/s, 1 Gbit/s and 10 Gbit/s with 16 flows (about a minute).
    #[arg(long)]
    pub quick: bool,
    #[command(flatten)]
    pub grid: GridArgs,
}

/// `--quick` and `--json`, as every mode but `churn` and `cluster` takes them.
#[derive(Args, Debug, Clone, Copy)]
pub struct RunArgs {
    /// The mode's short run: fewer rates, flow counts, classes or cycles (each mode's
    /// `quick()` options).
    #[arg(long)]
    pub quick: bool,
    #[command(flatten)]
    pub output: Output,
}

/// `--json`, as every mode takes it (`churn` and `cluster` alone, having no short run).
#[derive(Args, Debug, Clone, Copy)]
pub struct Output {
    /// Print the mode's JSON document instead of the table (`compare schema MODE`).
    #[arg(long)]
    pub json: bool,
}

/// `--classes [N]`: the class count of `classes` and `packet-rate`.
#[derive(Args, Debug, Clone, Copy)]
pub struct ClassCount {
    /// The class count (`classes`: default 10 000, with `--quick` 1 000; `packet-rate`: the
    /// large count, default 65 534).
    #[arg(long, value_name = "N", num_args = 0..=1,
          value_parser = clap::value_parser!(u64).range(1..=8_388_608))]
    pub classes: Option<Option<u64>>,
}

/// The options of `compare link-sharing`.
#[derive(Args, Debug)]
pub struct LinkArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// The veths' offloads (`host` or `off`).
    #[arg(long, default_value = "host")]
    pub offloads: OffloadMode,
    /// Only these scenarios (`shares,borrow,marking,priority`).
    #[arg(long, value_delimiter = ',')]
    pub scenario: Vec<metronome_testbed::compare::link_sharing::Scenario>,
    /// The daemon's `[link] rtt` (the base RTT of its marking thresholds), microseconds.
    #[arg(long, value_name = "US")]
    pub link_rtt_us: Option<u64>,
}

/// The options of `compare hierarchy`.
#[derive(Args, Debug)]
pub struct HierarchyArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Only these scenarios (`both,alone,flood`).
    #[arg(long, value_delimiter = ',')]
    pub scenario: Vec<metronome_testbed::compare::hierarchy::Scenario>,
    /// The UDP flood into the third child, on the wire (default 2gbit).
    #[arg(long, value_name = "RATE")]
    pub flood_rate: Option<Rate>,
}

/// The options of `compare attach`.
#[derive(Args, Debug)]
pub struct AttachArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Only these target rates of the host part (`100mbit,1gbit`).
    #[arg(long, value_delimiter = ',')]
    pub target: Vec<Rate>,
    /// Only these flow counts of the host part.
    #[arg(long, value_delimiter = ',')]
    pub flows: Vec<usize>,
    /// The daemon's loop pinned to CPU 0, the end hosts' veth receive steered elsewhere.
    #[arg(long)]
    pub isolate_daemon: bool,
    /// How the workloads' veths join the host, `bridge` (enslaved to a bridge holding their
    /// gateway) or `routed` (no bridge, a /32 route per workload).
    #[arg(long, default_value = "bridge")]
    pub workload_link: WorkloadLink,
    /// Only these shapers in the host part, in this order (`metronome`, `metronome-fair`, `htb`,
    /// `tbf`; default all four).
    #[arg(long, value_delimiter = ',', value_parser = parse_host_shaper)]
    pub shapers: Vec<metronome_testbed::compare::Shaper>,
    /// The daemon rows' class with `pace_sockets = false`: the host's sockets are not slowed at
    /// their source and queue in the daemon (default `true`, the class's default).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub pace_sockets: bool,
    /// Leave out the workload part.
    #[arg(long)]
    pub no_workloads: bool,
    /// The host part's TCP congestion control (`TCP_CONGESTION`, for example `cubic`; default:
    /// the host namespace's, BBR on this project's machines).
    #[arg(long, value_name = "NAME")]
    pub congestion: Option<String>,
    /// No ECN: the host's senders without it and the daemon's host class without ECN
    /// backpressure (by default both, a 1 ms threshold).
    #[arg(long)]
    pub no_ecn: bool,
    #[command(flatten)]
    pub slack: SlackArgs,
}

/// How long the daemon rows' idle loop may sleep past a departure and through arrivals: the
/// options of the modes that start the daemon with a loop of their choosing.
#[derive(Args, Debug, Clone, Copy)]
pub struct SlackArgs {
    /// The daemon rows' `[daemon] timer_slack` instead of its default (200us): how long after a
    /// departure the idle loop may wake, e.g. `0us` (more wake-ups, less delay).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub timer_slack: Option<metronome_core::Duration>,
    /// The daemon rows' `[daemon] arrival_slack` instead of its default (400us): the longest idle
    /// sleep arrivals do not end while frames arrive often and the wheel holds frames, e.g. `0us`
    /// (every arrival wakes the loop).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub arrival_slack: Option<metronome_core::Duration>,
}

impl SlackArgs {
    /// The daemon rows' loop mode: these slacks, spinning when idle if `busy_poll`.
    pub fn daemon_loop(&self, busy_poll: bool) -> metronome_testbed::compare::DaemonLoop {
        metronome_testbed::compare::DaemonLoop {
            busy_poll,
            timer_slack: self.timer_slack,
            arrival_slack: self.arrival_slack,
        }
    }
}

/// A shaper of the attach comparison's host part, by its row name.
fn parse_host_shaper(name: &str) -> Result<metronome_testbed::compare::Shaper, String> {
    metronome_testbed::compare::Shaper::ALL
        .into_iter()
        .find(|s| s.name() == name)
        .ok_or_else(|| {
            let names: Vec<&str> = metronome_testbed::compare::Shaper::ALL
                .iter()
                .map(|s| s.name())
                .collect();
            format!("`{name}` is not one of {}", names.join(", "))
        })
}

/// The options of `compare cni`.
#[derive(Args, Debug)]
pub struct CniArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Connections per pod and direction (one value, default 4).
    #[arg(long, value_delimiter = ',')]
    pub flows: Vec<usize>,
    /// Pods (default 8).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=200))]
    pub pods: Option<u64>,
    /// The pods' rates, each way (default 100mbit,1gbit).
    #[arg(long, value_delimiter = ',')]
    pub rates: Vec<Rate>,
}

/// The options of `compare classes`.
#[derive(Args, Debug)]
pub struct ClassesArgs {
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub count: ClassCount,
    /// The class rates, one for all or the smallest and the largest (`1mbit,10mbit`: spread
    /// linearly over the classes).
    #[arg(long, value_delimiter = ',')]
    pub class_rates: Vec<Rate>,
    /// Frame length in bytes, Ethernet header included (default 9014, an MTU of 9000); the
    /// veths' and the daemon's MTU follow.
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(64..=65_549))]
    pub frame_bytes: Option<u64>,
}

/// The options of `compare packet-rate`.
#[derive(Args, Debug)]
pub struct PacketRateArgs {
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub count: ClassCount,
}

/// The options of `compare churn`.
#[derive(Args, Debug)]
pub struct ChurnArgs {
    #[command(flatten)]
    pub output: Output,
    /// The TCP file classes' rates (default 200mbit,100mbit).
    #[arg(long, value_delimiter = ',')]
    pub target: Vec<Rate>,
    /// Connections per TCP class (one value, default 4).
    #[arg(long, value_delimiter = ',')]
    pub flows: Vec<usize>,
    /// Operations, `add` and `del` alternating (even; default 1000).
    #[arg(long, value_name = "N")]
    pub ops: Option<usize>,
    /// Time between two operations (default 5ms).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub pace: Option<metronome_core::Duration>,
    /// The UDP flow's rate of payload (default 4mbit).
    #[arg(long, value_name = "RATE")]
    pub udp_rate: Option<Rate>,
    /// The added classes' rate, above the UDP flow's on the wire (default 6mbit).
    #[arg(long, value_name = "RATE")]
    pub class_rate: Option<Rate>,
    /// The TCP flows' congestion control (`TCP_CONGESTION`, for example `cubic`; default: the
    /// sender namespace's, the host's).
    #[arg(long, value_name = "NAME")]
    pub congestion: Option<String>,
    /// The daemon's `[daemon] realtime_priority` (its loop `SCHED_FIFO` at this priority,
    /// 1..=99; default: an ordinary task).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(1..=99))]
    pub realtime_priority: Option<u8>,
}

/// The options of `compare cluster`.
#[derive(Args, Debug)]
pub struct ClusterArgs {
    #[command(flatten)]
    pub output: Output,
    /// A per-host class of half the limit on each daemon instead of the cluster class (the
    /// static split).
    #[arg(long)]
    pub per_host: bool,
}

/// A duration as the configuration writes them (`200us`, `0us`, `5ms`).
pub fn parse_duration(text: &str) -> Result<metronome_core::Duration, String> {
    metronome_daemon::ops::units::parse_duration(text).map_err(|e| e.to_string())
}

/// The mode flags of the single-command spelling and their subcommands, `--packet-rate` before
/// `--classes` (with it, `--classes N` is the packet-rate mode's class count).
const MODE_FLAGS: [(&str, &str); 9] = [
    ("--packet-rate", "packet-rate"),
    ("--classes", "classes"),
    ("--cluster", "cluster"),
    ("--cni", "cni"),
    ("--attach", "attach"),
    ("--churn", "churn"),
    ("--link-sharing", "link-sharing"),
    ("--hierarchy", "hierarchy"),
    ("--ceiling", "ceiling"),
];

/// `args` (a whole command line, the program's name first) with `compare`'s mode flag, if any,
/// turned into its subcommand: `metronome compare --attach --quick` is
/// `metronome compare attach --quick`. `--classes [N]` stays as the mode's option.
pub fn with_mode_aliases(args: Vec<OsString>) -> Vec<OsString> {
    if args.get(1).and_then(|a| a.to_str()) != Some("compare") {
        return args;
    }
    let mut out = args[..2].to_vec();
    out.extend(mode_aliased(&args[2..]));
    out
}

/// The arguments after `compare`, with their mode flag turned into the subcommand.
fn mode_aliased(rest: &[OsString]) -> Vec<OsString> {
    let flag_at = |flag: &str| {
        rest.iter().position(|a| {
            a.to_str()
                .is_some_and(|a| a == flag || a.starts_with(&format!("{flag}=")))
        })
    };
    let already = rest
        .first()
        .and_then(|a| a.to_str())
        .is_some_and(|a| !a.starts_with('-'));
    let found = MODE_FLAGS
        .iter()
        .find_map(|&(flag, mode)| Some((flag_at(flag)?, flag, mode)));
    let Some((at, flag, mode)) = found.filter(|_| !already) else {
        return rest.to_vec();
    };
    let mut out = vec![OsString::from(mode)];
    out.extend(
        rest.iter()
            .enumerate()
            .filter(|&(i, _)| i != at || flag == "--classes")
            .map(|(_, a)| a.clone()),
    );
    out
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

    /// `compare ARGS...` as `main` parses it: aliases first.
    fn parse(args: &[&str]) -> Result<Mode, clap::Error> {
        let mut full = vec![OsString::from("metronome"), OsString::from("compare")];
        full.extend(args[1..].iter().map(OsString::from));
        let rewritten = with_mode_aliases(full);
        Cli::try_parse_from(&rewritten[1..]).map(|c| c.compare.into_mode())
    }

    #[test]
    fn the_kernel_grid_is_the_default_and_the_ceiling_a_mode() {
        let Ok(Mode::Kernel(a)) = parse(&["compare"]) else {
            panic!()
        };
        assert_eq!(a.grid.offloads, OffloadMode::Host);
        for args in [
            &["compare", "--ceiling", "--offloads", "off"][..],
            &["compare", "ceiling", "--offloads", "off"],
        ] {
            let Ok(Mode::Ceiling(a)) = parse(args) else {
                panic!("{args:?}")
            };
            assert_eq!(a.offloads, OffloadMode::Off);
        }
        let Ok(Mode::Kernel(a)) = parse(&["compare", "--quick", "--offloads=host", "--json"])
        else {
            panic!()
        };
        assert!(a.quick && a.grid.json);
        assert!(parse(&["compare", "--offloads", "tso"]).is_err());
        assert!(parse(&["compare", "--quick", "--ceiling"]).is_err());
        assert!(parse(&["compare", "--replot", "f"]).is_err());
    }

    #[test]
    fn churn_takes_its_options_the_rates_and_one_flow_count_but_no_other_mode() {
        let args = [
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
        ];
        let Ok(Mode::Churn(a)) = parse(&args) else {
            panic!()
        };
        assert!(a.output.json);
        assert_eq!(a.ops, Some(300));
        assert_eq!(a.pace.map(|d| d.as_nanos()), Some(10_000_000));
        assert_eq!(a.target.len(), 2);
        assert_eq!(a.udp_rate.map(|r| r.bps()), Some(2_000_000));
        assert_eq!(a.class_rate.map(|r| r.bps()), Some(3_000_000));
        assert_eq!(a.congestion.as_deref(), Some("cubic"));
        assert_eq!(a.realtime_priority, Some(10));
        assert!(matches!(
            parse(&["compare", "churn", "--ops", "2"]),
            Ok(Mode::Churn(_))
        ));
        assert!(parse(&["compare", "--churn", "--realtime-priority", "0"]).is_err());
        assert!(parse(&["compare", "--ops", "10"]).is_err());
        assert!(parse(&["compare", "--congestion", "cubic"]).is_err());
        assert!(parse(&["compare", "--churn", "--attach"]).is_err());
        assert!(parse(&["compare", "--churn", "--offloads", "off"]).is_err());
    }

    #[test]
    fn attach_takes_the_grid_and_the_steering_but_no_other_mode() {
        let args = [
            "compare",
            "--attach",
            "--quick",
            "--json",
            "--target",
            "100mbit",
            "--flows",
            "16",
            "--isolate-daemon",
        ];
        let Ok(Mode::Attach(a)) = parse(&args) else {
            panic!()
        };
        assert!(a.run.quick && a.run.output.json && a.isolate_daemon);
        assert_eq!(a.workload_link, WorkloadLink::Bridge);
        assert_eq!(a.flows, [16]);
        let bps: Vec<u64> = a.target.iter().map(|r| r.bps()).collect();
        assert_eq!(bps, [100_000_000]);
        for routed in [
            &["compare", "--attach", "--workload-link", "routed"][..],
            &["compare", "attach", "--workload-link", "routed"],
        ] {
            let Ok(Mode::Attach(a)) = parse(routed) else {
                panic!()
            };
            assert_eq!(a.workload_link, WorkloadLink::Routed);
        }
        assert!(parse(&["compare", "--workload-link", "routed"]).is_err());
        assert!(parse(&["compare", "--attach", "--workload-link", "nat"]).is_err());
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
            assert!(parse(&args).is_err(), "{args:?}");
        }
    }

    #[test]
    fn link_sharing_takes_scenarios_and_a_link_rtt_and_nothing_of_the_grid() {
        use metronome_testbed::compare::link_sharing::Scenario;
        let args = [
            "compare",
            "--link-sharing",
            "--quick",
            "--scenario",
            "shares,marking",
            "--link-rtt-us",
            "4000",
        ];
        let Ok(Mode::LinkSharing(a)) = parse(&args) else {
            panic!()
        };
        assert!(a.run.quick);
        assert_eq!(a.scenario, [Scenario::Shares, Scenario::Marking]);
        assert_eq!(a.link_rtt_us, Some(4000));
        assert!(parse(&["compare", "--scenario", "shares"]).is_err());
        assert!(parse(&["compare", "--link-sharing", "--scenario", "x"]).is_err());
        assert!(parse(&["compare", "--link-sharing", "--ceiling"]).is_err());
        assert!(parse(&["compare", "--link-sharing", "--flows", "4"]).is_err());
    }

    #[test]
    fn hierarchy_takes_scenarios_and_a_flood_rate_and_nothing_of_the_grid() {
        use metronome_testbed::compare::hierarchy::Scenario;
        let args = [
            "compare",
            "--hierarchy",
            "--quick",
            "--scenario",
            "both,flood",
            "--flood-rate",
            "1gbit",
            "--json",
        ];
        let Ok(Mode::Hierarchy(a)) = parse(&args) else {
            panic!()
        };
        assert!(a.run.quick && a.run.output.json);
        assert_eq!(a.scenario, [Scenario::Both, Scenario::Flood]);
        assert_eq!(a.flood_rate.map(|r| r.bps()), Some(1_000_000_000));
        assert!(matches!(
            parse(&["compare", "hierarchy"]),
            Ok(Mode::Hierarchy(_))
        ));
        assert!(parse(&["compare", "--flood-rate", "1gbit"]).is_err());
        assert!(parse(&["compare", "--hierarchy", "--scenario", "x"]).is_err());
        assert!(parse(&["compare", "--hierarchy", "--attach"]).is_err());
        assert!(parse(&["compare", "--hierarchy", "--flows", "4"]).is_err());
    }

    #[test]
    fn classes_takes_an_optional_count_rates_and_a_frame_size() {
        let Ok(Mode::Classes(a)) = parse(&["compare", "--classes"]) else {
            panic!()
        };
        assert_eq!(a.count.classes, Some(None));
        let args = [
            "compare",
            "--classes",
            "500",
            "--class-rates",
            "1mbit,10mbit",
            "--frame-bytes",
            "1514",
            "--json",
        ];
        let Ok(Mode::Classes(a)) = parse(&args) else {
            panic!()
        };
        assert_eq!(a.count.classes, Some(Some(500)));
        let rates: Vec<u64> = a.class_rates.iter().map(|r| r.bps()).collect();
        assert_eq!(rates, [1_000_000, 10_000_000]);
        assert_eq!(a.frame_bytes, Some(1514));
        let Ok(Mode::Classes(a)) = parse(&["compare", "classes", "--classes=20"]) else {
            panic!()
        };
        assert_eq!(a.count.classes, Some(Some(20)));
        let args = ["compare", "--packet-rate", "--classes", "100", "--quick"];
        let Ok(Mode::PacketRate(a)) = parse(&args) else {
            panic!()
        };
        assert!(a.run.quick);
        assert_eq!(a.count.classes, Some(Some(100)));
        assert!(parse(&["compare", "--classes", "--attach"]).is_err());
        assert!(parse(&["compare", "--class-rates", "1mbit"]).is_err());
        assert!(parse(&["compare", "--classes", "0"]).is_err());
        assert!(parse(&["compare", "--packet-rate", "--frame-bytes", "64"]).is_err());
    }

    #[test]
    fn cluster_takes_per_host_and_json_but_no_other_mode() {
        let Ok(Mode::Cluster(a)) = parse(&["compare", "--cluster"]) else {
            panic!()
        };
        assert!(!a.per_host && !a.output.json);
        let Ok(Mode::Cluster(a)) = parse(&["compare", "cluster", "--per-host", "--json"]) else {
            panic!()
        };
        assert!(a.per_host && a.output.json);
        assert!(parse(&["compare", "--per-host"]).is_err());
        assert!(parse(&["compare", "--cluster", "--cni"]).is_err());
        assert!(parse(&["compare", "--cluster", "--quick"]).is_err());
        assert!(parse(&["compare", "--cluster", "--flows", "2"]).is_err());
    }

    #[test]
    fn cni_takes_pods_rates_flows_quick_and_json_but_no_other_mode() {
        let Ok(Mode::Cni(a)) = parse(&["compare", "--cni"]) else {
            panic!()
        };
        assert!(a.pods.is_none() && a.rates.is_empty());
        let args = [
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
        ];
        let Ok(Mode::Cni(a)) = parse(&args) else {
            panic!()
        };
        assert_eq!(a.pods, Some(3));
        let rates: Vec<u64> = a.rates.iter().map(|r| r.bps()).collect();
        assert_eq!(rates, [100_000_000, 1_000_000_000]);
        assert_eq!(a.flows, [2]);
        assert!(a.run.quick && a.run.output.json);
        assert!(parse(&["compare", "--cni", "--attach"]).is_err());
        assert!(parse(&["compare", "--cni", "--churn"]).is_err());
        assert!(parse(&["compare", "--pods", "3"]).is_err());
        assert!(parse(&["compare", "--rates", "1mbit"]).is_err());
        assert!(parse(&["compare", "--cni", "--pods", "0"]).is_err());
    }
}
