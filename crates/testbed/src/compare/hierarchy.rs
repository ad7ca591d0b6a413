//! `metronome compare hierarchy`: a class tree on a host's uplink, through `metronome run`
//! attached in place (`[interfaces] attach`, classes with `parent` and `weight`) and through the
//! same tree in kernel HTB on the same uplink, with the same traffic; each class's rate beside
//! its max-min fair share (a parent's rate shared among its busy children by weight, each within
//! its own rate: the link sharing HTB implements).
//!
//! The tree ([`HierarchyOptions`]): a gathering parent `tenant` of [`HierarchyOptions::parent_bps`]
//! over three children `a`, `b` and `c` of [`HierarchyOptions::child_bps`] each, weight 1, matched
//! by destination port. The topology is [`AttachTopology`] with one workload: the host's own
//! TCP to the receiver leaves through `up0`, where both shapers sit, and so does the flood, sent
//! from the workload and forwarded by the host (the host's own UDP would be held back at its
//! socket by a qdisc on `up0`, not flood it). Each [`Scenario`] runs
//! each shaper in turn with fresh ports: `both` (8 TCP flows into `a` and 8 into `b`), `alone`
//! (only `a`'s), `flood` (`a` and `b` as in `both`, and a UDP flood into `c` at
//! [`HierarchyOptions::flood_bps`], ten times its limit).
//!
//! HTB's translation ([`htb_commands`]): the parent `rate = ceil =` its rate, each child `rate` =
//! its weight's part of the parent's rate (its guaranteed share: 100 Mbit/s for three children of
//! 300) and `ceil` = its own limit, u32 filters on the destination address and port, the default
//! class unlimited (ARP and anything else). What is measured, and how, is [`traffic`]'s.

mod traffic;

use super::{CompareError, Shaper};
use crate::compare::attach::{daemon_config, AttachedDaemon};
use crate::netns::attach::{AttachTopology, HTB_DEFAULT_BPS};
use crate::trafficgen::UDP_FULL_PAYLOAD;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;
pub use traffic::{fair_shares, Demand};

/// Prefix of the hierarchy comparison's namespaces.
pub const NS_PREFIX: &str = "mtr-hier";
/// The parent's rate, bits/s: 300 Mbit/s.
pub const PARENT_BPS: u64 = 300_000_000;
/// Each child's own limit, bits/s: 200 Mbit/s.
pub const CHILD_BPS: u64 = 200_000_000;
/// TCP connections of each busy TCP child.
pub const FLOWS: usize = 8;
/// The UDP flood into `c`, bits/s on the wire: 2 Gbit/s, ten times its limit.
pub const FLOOD_BPS: u64 = 2_000_000_000;
/// The flood's UDP sockets (each paced to its part of [`FLOOD_BPS`]).
pub const FLOOD_FLOWS: usize = 4;
/// The children's names, in order: `a` and `b` carry TCP, `c` the flood.
pub const CHILDREN: [&str; 3] = ["a", "b", "c"];
/// The parent's name in the daemon's configuration.
pub const PARENT: &str = "tenant";
/// First destination port; each run takes three above the previous run's.
const BASE_PORT: u16 = 31_000;
/// Frame bytes per payload byte of a full UDP datagram: 1472 bytes of payload in 1514.
pub const UDP_WIRE_PER_PAYLOAD: f64 = 1514.0 / UDP_FULL_PAYLOAD as f64;

/// What is busy in a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Scenario {
    /// `a` and `b` busy with TCP: each gets half the parent.
    Both,
    /// Only `a` busy: it gets its own limit.
    Alone,
    /// `a` and `b` busy with TCP, `c` flooded with UDP: a third each.
    Flood,
}

impl Scenario {
    /// All three, in report order.
    pub const ALL: [Scenario; 3] = [Scenario::Both, Scenario::Alone, Scenario::Flood];

    /// The name used in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Both => "both",
            Scenario::Alone => "alone",
            Scenario::Flood => "flood",
        }
    }

    /// What each child of [`CHILDREN`] carries in this scenario.
    pub fn load(self) -> [Load; 3] {
        match self {
            Scenario::Both => [Load::Tcp, Load::Tcp, Load::Idle],
            Scenario::Alone => [Load::Tcp, Load::Idle, Load::Idle],
            Scenario::Flood => [Load::Tcp, Load::Tcp, Load::Udp],
        }
    }
}

impl std::str::FromStr for Scenario {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Scenario::ALL
            .into_iter()
            .find(|x| x.name() == s)
            .ok_or_else(|| format!("unknown scenario {s:?}: both, alone or flood"))
    }
}

/// What one child carries in a scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Load {
    /// Nothing.
    Idle,
    /// [`HierarchyOptions::flows`] TCP connections.
    Tcp,
    /// The UDP flood.
    Udp,
}

/// What the hierarchy comparison runs.
#[derive(Clone, Debug, PartialEq)]
pub struct HierarchyOptions {
    /// The scenarios, in order.
    pub scenarios: Vec<Scenario>,
    /// The shapers, in turn in each scenario ([`Shaper::TREE`]).
    pub shapers: Vec<Shaper>,
    /// The parent's rate, bits/s.
    pub parent_bps: u64,
    /// Each child's limit, bits/s.
    pub child_bps: u64,
    /// TCP connections of each busy TCP child.
    pub flows: usize,
    /// The UDP flood, bits/s on the wire.
    pub flood_bps: u64,
    /// The flood's sockets.
    pub flood_flows: usize,
    /// Skipped after the traffic starts.
    pub warmup: Duration,
    /// Measured after the warm-up.
    pub measure: Duration,
    /// The `metronome` binary whose `run` the daemon rows start.
    pub daemon_binary: Option<PathBuf>,
}

impl HierarchyOptions {
    /// The full run: every scenario, both shapers, 2 s of warm-up and 10 s measured.
    pub fn full() -> Self {
        HierarchyOptions {
            scenarios: Scenario::ALL.to_vec(),
            shapers: Shaper::TREE.to_vec(),
            parent_bps: PARENT_BPS,
            child_bps: CHILD_BPS,
            flows: FLOWS,
            flood_bps: FLOOD_BPS,
            flood_flows: FLOOD_FLOWS,
            warmup: Duration::from_secs(2),
            measure: Duration::from_secs(10),
            daemon_binary: None,
        }
    }

    /// `--quick`: 4 s measured.
    pub fn quick() -> Self {
        HierarchyOptions {
            measure: Duration::from_secs(4),
            ..HierarchyOptions::full()
        }
    }
}

/// One child's figures in one run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ClassRate {
    /// Its name.
    pub class: String,
    /// What it carried.
    pub load: Load,
    /// Its own limit, bits/s.
    pub limit_bps: u64,
    /// What its senders offered over the measured interval, bits/s on the wire (UDP; `null`
    /// for TCP, which offers what its congestion control lets it, and for an idle class).
    pub offered_bps: Option<f64>,
    /// Its max-min fair share ([`fair_shares`]), bits/s.
    pub fair_share_bps: f64,
    /// Its rate over the measured interval, bits/s on the wire.
    pub achieved_bps: f64,
    /// `achieved / fair share - 1`, percent; `null` for an idle class.
    pub error_pct: Option<f64>,
    /// Frames the daemon dropped in this class over the run (`metronome_class_drops_total`);
    /// `null` for HTB or when its metrics could not be read.
    #[serde(default)]
    pub daemon_drops: Option<u64>,
}

/// One shaper's run of one scenario: exactly the fields of a row of `--json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HierarchyRow {
    /// Which shaper.
    pub shaper: Shaper,
    /// Which scenario.
    pub scenario: Scenario,
    /// The parent's rate, bits/s.
    pub parent_bps: u64,
    /// The children, in [`CHILDREN`] order.
    pub classes: Vec<ClassRate>,
    /// The children's rates added, bits/s.
    pub sum_bps: f64,
    /// Everything the receiver's veth took over the interval, bits/s on the wire (retransmitted
    /// segments too, which the children's goodput leaves out).
    pub receiver_bps: f64,
    /// Machine kernel time plus the user time of this process and the daemon, % of one CPU per
    /// Gbit/s of `receiver_bps`.
    pub cpu_pct: f64,
    /// The daemon process's own CPU (user + system), % of one CPU per Gbit/s; `null` for HTB.
    pub daemon_cpu_pct: Option<f64>,
    /// [`HierarchyRow::cpu_pct`] split by kind of time, per frame and KiB.
    pub cpu_account: Option<super::measure::CpuAccount>,
    /// Frames the daemon's sockets lost before it read them over the run
    /// (`metronome_rx_ring_drops_total`); `null` for HTB or when its metrics could not be read.
    #[serde(default)]
    pub daemon_socket_drops: Option<u64>,
}

impl HierarchyRow {
    /// The largest `|error_pct|` of the busy children.
    pub fn worst_error_pct(&self) -> f64 {
        self.classes
            .iter()
            .filter_map(|c| c.error_pct)
            .fold(0.0, |w: f64, e| w.max(e.abs()))
    }
}

/// One shaper's run of one scenario: its row, or why it has none.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum HierarchyOutcome {
    /// Measured.
    Measured(HierarchyRow),
    /// Not measured.
    Failed {
        /// Which shaper.
        shaper: Shaper,
        /// Which scenario.
        scenario: Scenario,
        /// Why, in one line.
        error: String,
    },
}

/// The destination ports of one run: `first + i` for child `i`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ports(pub u16);

impl Ports {
    /// Child `i`'s port.
    pub fn of(self, i: usize) -> u16 {
        self.0 + i as u16
    }
}

/// The daemon's configuration text: attached to `uplink`; the gathering parent [`PARENT`] at
/// `options.parent_bps`; each child of [`CHILDREN`] under it, matched by `receiver` and its
/// port, at `options.child_bps`, with the attach comparison's horizon, horizon policy and ECN
/// backpressure (`crate::compare::attach::host_config_text`).
pub fn daemon_config_text(
    options: &HierarchyOptions,
    (uplink, receiver): (&str, std::net::Ipv4Addr),
    ports: Ports,
) -> String {
    let mut text = format!(
        "[interfaces]\nattach = [\"{uplink}\"]\n\n[wheel]\nhorizon = \"250ms\"\n\n[[class]]\n\
         name = \"{PARENT}\"\nrate = {}\n",
        options.parent_bps
    );
    for (i, name) in CHILDREN.iter().enumerate() {
        let _ = write!(
            text,
            "\n[[class]]\nname = \"{name}\"\nparent = \"{PARENT}\"\nweight = 1\n\
             match = {{ dst = \"{receiver}\", dst_port = {} }}\nrate = {}\n\
             horizon_policy = \"reject\"\n\
             backpressure = {{ mode = \"ecn\", threshold = \"1ms\" }}\n",
            ports.of(i),
            options.child_bps
        );
    }
    text
}

/// The `tc` commands (arguments after `tc -n NS`) of HTB's tree on `dev` (see the module docs):
/// root `1:` defaulting to the unlimited `1:ffff`, the parent `1:1`, children `1:10`.. with
/// `rate` = a third of the parent's (weight 1 of 3) and `ceil` = their limit, and a u32 filter
/// per child on the receiver's address and its port.
pub fn htb_commands(
    options: &HierarchyOptions,
    (dev, receiver): (&str, std::net::Ipv4Addr),
    ports: Ports,
) -> Vec<Vec<String>> {
    let words = |s: &str| s.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    let guaranteed = options.parent_bps / CHILDREN.len() as u64;
    let mut commands = vec![
        words(&format!(
            "qdisc replace dev {dev} root handle 1: htb default ffff"
        )),
        words(&format!(
            "class add dev {dev} parent 1: classid 1:ffff htb rate {HTB_DEFAULT_BPS}bit ceil \
             {HTB_DEFAULT_BPS}bit"
        )),
        words(&format!(
            "class add dev {dev} parent 1: classid 1:1 htb rate {p}bit ceil {p}bit",
            p = options.parent_bps
        )),
    ];
    for i in 0..CHILDREN.len() {
        let class = format!("1:{:x}", 0x10 + i);
        commands.push(words(&format!(
            "class add dev {dev} parent 1:1 classid {class} htb rate {guaranteed}bit ceil {}bit",
            options.child_bps
        )));
        commands.push(words(&format!(
            "filter add dev {dev} parent 1: protocol ip prio 1 u32 match ip dst {receiver}/32 \
             match ip dport {} 0xffff flowid {class}",
            ports.of(i)
        )));
    }
    commands
}

/// Runs `options`: builds the topology, runs every scenario with each shaper in turn and removes
/// everything; one progress line per run to `progress`. Only a failure of the topology (also:
/// no CAP_NET_ADMIN) is an error; a shaper that could not run is a
/// [`HierarchyOutcome::Failed`].
pub fn run(
    options: &HierarchyOptions,
    progress: &mut dyn Write,
) -> Result<Vec<HierarchyOutcome>, CompareError> {
    let _ = crate::netns::remove_stale(NS_PREFIX);
    let mut topo = AttachTopology::new(NS_PREFIX, 1)?;
    topo.enable_sender_ecn();
    let mut outcomes = Vec::new();
    let mut port = BASE_PORT;
    for &scenario in &options.scenarios {
        for &shaper in &options.shapers {
            let ports = Ports(port);
            port += CHILDREN.len() as u16;
            let outcome = match run_one(&mut topo, options, (shaper, scenario), ports)? {
                Ok(row) => HierarchyOutcome::Measured(row),
                Err(error) => HierarchyOutcome::Failed {
                    shaper,
                    scenario,
                    error,
                },
            };
            let _ = writeln!(progress, "{}", describe(&outcome));
            outcomes.push(outcome);
        }
    }
    topo.remove()?;
    Ok(outcomes)
}

/// One line about `outcome`.
pub fn describe(outcome: &HierarchyOutcome) -> String {
    match outcome {
        HierarchyOutcome::Measured(r) => {
            let classes: Vec<String> = r
                .classes
                .iter()
                .filter(|c| c.load != Load::Idle)
                .map(|c| {
                    format!(
                        "{} {:.2} of {:.2}",
                        c.class,
                        c.achieved_bps / 1e6,
                        c.fair_share_bps / 1e6
                    )
                })
                .collect();
            format!(
                "{:<9} {:<5}: {} Mbit/s; sum {:.2}, receiver {:.2} Mbit/s; worst {:.2} % off \
                 its share; cpu {:.1} %/G{}",
                r.shaper.name(),
                r.scenario.name(),
                classes.join(", "),
                r.sum_bps / 1e6,
                r.receiver_bps / 1e6,
                r.worst_error_pct(),
                r.cpu_pct,
                super::format_cpu_account(r.cpu_account.as_ref())
            )
        }
        HierarchyOutcome::Failed {
            shaper,
            scenario,
            error,
        } => format!(
            "{:<9} {:<5}: not measured: {error}",
            shaper.name(),
            scenario.name()
        ),
    }
}

/// One shaper's run of one scenario; `Ok(Err(why))` when the shaper could not be set up, its
/// traffic could not run or the daemon did not stop cleanly.
fn run_one(
    topo: &mut AttachTopology,
    options: &HierarchyOptions,
    (shaper, scenario): (Shaper, Scenario),
    ports: Ports,
) -> Result<Result<HierarchyRow, String>, CompareError> {
    let ends = (topo.uplink.clone(), topo.receiver_addr);
    match shaper {
        Shaper::Metronome => {
            let Some(binary) = &options.daemon_binary else {
                return Ok(Err(
                    "no `metronome` binary to run the daemon with".to_owned()
                ));
            };
            let text = daemon_config_text(options, (&ends.0, ends.1), ports);
            let config = match daemon_config(&text) {
                Ok(c) => c,
                Err(e) => return Ok(Err(e)),
            };
            let daemon = match AttachedDaemon::start(&topo.host, binary, (&text, &config), false)? {
                Ok(d) => d,
                Err(why) => return Ok(Err(why)),
            };
            let mut cpu = || daemon.cpu_ns();
            let measured = traffic::measure(
                topo,
                options,
                (shaper, scenario),
                ports,
                (&mut cpu, &[daemon.pid()]),
            );
            let scrape = daemon.metrics_text();
            let stopped = daemon.stop();
            Ok(measured.map_err(|e| e.to_string()).and_then(|m| {
                stopped?;
                let mut row = m.row(shaper, scenario, options);
                if let Some(text) = scrape {
                    with_daemon_counters(&mut row, &crate::scrape::Scrape::parse(&text));
                }
                Ok(row)
            }))
        }
        Shaper::HtbU32 => {
            let installed =
                topo.install_uplink_tc(&htb_commands(options, (&ends.0, ends.1), ports));
            let measured = match installed {
                Ok(()) => traffic::measure(
                    topo,
                    options,
                    (shaper, scenario),
                    ports,
                    (&mut || None, &[]),
                )
                .map(|m| m.row(shaper, scenario, options))
                .map_err(|e| e.to_string()),
                Err(e) => Err(format!("tc: {e}")),
            };
            if let Ok(stats) = topo.qdisc_stats() {
                tracing::debug!("{}", stats.trim());
            }
            topo.remove_baselines()?;
            Ok(measured)
        }
        other => Ok(Err(other.not_in("the hierarchy comparison"))),
    }
}

/// Adds the daemon's counters at the end of the run to `row`: frames its sockets lost before it
/// read them, and each child's drops.
fn with_daemon_counters(row: &mut HierarchyRow, scrape: &crate::scrape::Scrape) {
    row.daemon_socket_drops = Some(scrape.sum("metronome_rx_ring_drops_total") as u64);
    for c in &mut row.classes {
        c.daemon_drops = scrape
            .value("metronome_class_drops_total", Some(("class", &c.class)))
            .map(|v| v as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const RCV: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 2);

    #[test]
    fn the_daemon_configuration_is_a_tree_the_daemon_reads() {
        let o = HierarchyOptions::full();
        let text = daemon_config_text(&o, ("up0", RCV), Ports(31_000));
        let config = daemon_config(&text).unwrap();
        assert_eq!(config.classes.len(), 4);
        assert!(
            text.contains(
                "name = \"c\"\nparent = \"tenant\"\nweight = 1\nmatch = { dst = \
                           \"10.78.0.2\", dst_port = 31002 }\nrate = 200000000\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("name = \"tenant\"\nrate = 300000000\n"),
            "{text}"
        );
    }

    #[test]
    fn htb_guarantees_each_child_a_third_and_caps_it_at_its_limit() {
        let o = HierarchyOptions::full();
        let c = htb_commands(&o, ("up0", RCV), Ports(31_003));
        let lines: Vec<String> = c.iter().map(|w| w.join(" ")).collect();
        assert_eq!(lines.len(), 3 + 2 * CHILDREN.len());
        assert_eq!(
            lines[2],
            "class add dev up0 parent 1: classid 1:1 htb rate 300000000bit ceil 300000000bit"
        );
        assert!(lines.contains(
            &"class add dev up0 parent 1:1 classid 1:11 htb rate 100000000bit ceil 200000000bit"
                .to_owned()
        ));
        assert!(
            lines.contains(
                &"filter add dev up0 parent 1: protocol ip prio 1 u32 match ip dst 10.78.0.2/32 \
                  match ip dport 31005 0xffff flowid 1:12"
                    .to_owned()
            ),
            "{lines:?}"
        );
    }

    #[test]
    fn scenarios_read_back_by_name() {
        for s in Scenario::ALL {
            assert_eq!(s.name().parse::<Scenario>(), Ok(s));
        }
        assert!("x".parse::<Scenario>().is_err());
        assert_eq!(Scenario::Flood.load()[2], Load::Udp);
    }
}
