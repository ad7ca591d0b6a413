//! The daemon's configuration (`metronome run --config FILE`): a TOML file, validated at
//! start-up into core types, with errors that name the field and the line.
//!
//! The daemon is a bump in the wire between two interfaces: frames received on
//! [`Interfaces::inside`] are classified, stamped with an Earliest Departure Time by their class's
//! policies (Carousel §5.1.1) and leave on [`Interfaces::outside`] from the timing wheel
//! ([`Config::wheel`], Carousel §5.1.2); frames received on `outside` pass to `inside` unshaped.
//! Classes are tried in file order and the first whose `match` fits takes the packet
//! (first match wins, like `tc` filters by priority); the rest goes to the default class, unshaped
//! unless `[default]` says otherwise. `docs/config.md` documents every field.
//!
//! ```
//! use metronome_config::Config;
//! let text = r#"
//! [interfaces]
//! inside = "veth-in"
//! outside = "veth-out"
//!
//! [[class]]
//! name = "bulk"
//! match = { protocol = "tcp", dst_port = "5201-5216" }
//! rate = "200mbit"
//! "#;
//! let config = Config::from_toml_str(text, "inline.toml").unwrap();
//! assert_eq!(config.classes[0].policy.rate, Some(metronome_core::Rate::mbps(200)));
//!
//! let err = Config::from_toml_str(&text.replace("200mbit", "200mbitz"), "inline.toml");
//! assert!(err.unwrap_err().to_string().starts_with("inline.toml:9: class[0].rate: unknown unit"));
//! ```
//!
//! Submodules: [`error`] (the error type and its format), [`reload`] (what a SIGHUP changes).

// A `ConfigError` (file, line, field, message) is built at most once per start-up or reload;
// its size on this cold path costs nothing, so it is not boxed.
#![allow(clippy::result_large_err)]

#[cfg(test)]
mod attach_tests;
pub mod cluster;
#[cfg(test)]
mod cluster_tests;
pub mod error;
pub mod fixture;
pub mod link;
#[cfg(test)]
mod link_tests;
pub mod origin_tags;
mod raw;
pub mod reload;
#[cfg(test)]
mod tests;
pub mod units;
mod validate;

pub use error::{ConfigError, ErrorKind};
pub use link::{ClassLink, LinkConfig, LinkMarking, LinkMarkingRule, LinkScheduler};
pub use metronome_engine::config::{
    AckShapingPolicy, Backpressure, ClassConfig, ClassPolicy, EngineConfig, Match, QueueLimit,
    Tree, DEFAULT_ACK_SHAPING_FLOWS, DEFAULT_GSO_BURST, ETHERNET_HEADER, MAX_ACK_SHAPING_FLOWS,
    MAX_BATCH_SIZE, MAX_CLASSES, MAX_TREE_DEPTH, MAX_TREE_WEIGHT, MIN_QUEUE_PACKETS,
};
pub use reload::{ClassChange, FieldChange, ReloadPlan};

use metronome_core::{ClassId, Duration, HorizonPolicy, TimingWheelConfig};
use metronome_packet::{ClassRule, Classifier};
use std::collections::BTreeMap;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::Path;

/// Default metrics address: loopback only (the endpoint is unauthenticated); 9187 is
/// unassigned in the Prometheus exporter port list.
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9187";
/// Default path of the control socket (`[daemon] control`, `metronome_daemon::ops::control`): under
/// `/run`, the runtime directory of the Filesystem Hierarchy Standard, cleared at boot.
pub const DEFAULT_CONTROL: &str = "/run/metronome/control.sock";
/// Default `daemon.max_api_classes`: 100 000 classes of the control socket, about 250 MB at the
/// 2.1 kB a class costs in the engine, the classifier and the metrics (docs/results/daemon.md)
/// plus the class's object as given.
pub const DEFAULT_MAX_API_CLASSES: usize = 100_000;
/// Default packets per receive or transmit batch: the reference `recvmmsg`/`sendmmsg` forwarder's
/// batch.
pub const DEFAULT_BATCH_SIZE: usize = 64;
/// Default MTU in bytes: Ethernet's.
pub const DEFAULT_MTU: u32 = 1500;
/// Most wheel slots accepted: 2^27 slots of 8-byte heads is 1 GiB (the wheel's measured memory
/// is in docs/results/bench.md).
pub const MAX_WHEEL_SLOTS: usize = 1 << 27;
/// Most pool packets accepted: the pool is preallocated at start-up and 2^28 packets take about
/// 4.9 GB at 18.3 bytes per packet (a full pool node, `metronome_core::pool`).
pub const MAX_POOL_PACKETS: usize = 1 << 28;
/// Most frames a class's `queue.packets` may name: the largest frame pool
/// ([`MAX_POOL_PACKETS`]).
pub const MAX_QUEUE_PACKETS: i64 = 1 << 28;
/// Default `daemon.pool_share`: 4, the dynamic threshold of shared-buffer switches (Choudhury
/// and Hahne, "Dynamic queue length thresholds for shared-memory packet switches", 1998),
/// whose α is usually 1 to 8. With 4 a class alone may take 80 % of the frame pool, two
/// flooding classes 44 % each, leaving at least 11 % free for every other class and the
/// receive path.
pub const DEFAULT_POOL_SHARE: u32 = 4;
/// Largest `daemon.pool_share`: 64 (a class alone may then take 98.5 % of the pool).
pub const MAX_POOL_SHARE: i64 = 64;
/// Default `daemon.early_multiple`: 2. A class's frames reach the loop at up to twice its rate
/// (after a burst of its queue bound), so a class that bursts above its rate still queues as
/// it did without the filter, and a flood costs the loop at most one refusal for each frame
/// the class forwards.
pub const DEFAULT_EARLY_MULTIPLE: u32 = 2;
/// Default `daemon.nice`: -10, about 9 times the CPU weight of an ordinary task (sched(7)).
pub const DEFAULT_NICE: i8 = -10;
/// Largest `daemon.early_multiple`: 100.
pub const MAX_EARLY_MULTIPLE: i64 = 100;
/// Largest `daemon.realtime_priority`: 99, `SCHED_FIFO`'s highest (sched(7)).
pub const MAX_REALTIME_PRIORITY: i64 = 99;
/// The daemon's `wheel.horizon_policy` when the file sets none: `reject`, as `sch_fq` drops
/// beyond its horizon by default. Under `clamp` a class that stays over its rate for longer
/// than the horizon would leave at its arrival rate, a horizon late: its limit would not hold.
pub const DEFAULT_HORIZON_POLICY: HorizonPolicy = HorizonPolicy::Reject;
/// Longest interface name in bytes: `IFNAMSIZ` (16) minus the terminating NUL.
pub const MAX_INTERFACE_NAME: usize = 15;
/// Most shaper silos (`[daemon] cores`): a sanity bound, well above the cores of one host's
/// NIC queues; each silo takes a thread, two AF_PACKET sockets with 16 MiB rings and a pool.
pub const MAX_CORES: usize = 256;
/// Default period of the NIC-level bandwidth allocator: Carousel §5.3, "we currently use
/// ≈ 100 ms".
pub const DEFAULT_NBA_PERIOD: Duration = Duration::from_millis(100);
/// Default large (super-frame) slots of the frame pool: 256 of
/// [`metronome_io::GSO_SLOT_SIZE`] bytes, 16.0 MiB; 256 super-frames of 64 KiB are 134 ms at
/// 1 Gbit/s, 13 ms at 10 Gbit/s.
pub const DEFAULT_GSO_SLOTS: u32 = 256;
/// Most large slots `daemon.gso_slots` may ask for: 4096 (256.5 MiB).
pub const MAX_GSO_SLOTS: u32 = 4096;
/// Longest time a stopping daemon keeps sending what is queued at its EDT: 200 ms (a
/// supervisor's stop timeout is seconds; a wheel holding more than 200 ms of traffic is
/// discarded and counted).
pub const DEFAULT_DRAIN: Duration = Duration::from_millis(200);
/// How long an outage of the outside link stops the shaping clock, so how late a frame queued
/// for it may still leave when it returns (`metronome_daemon::driver::carrier`): 1 s. Above the sub-second
/// flaps a link sees (a carrier blip, an interface set down and up, a veth or bridge reconfigured;
/// the 0.5 s flaps of the real-traffic tests), which then lose nothing: what was queued leaves
/// at its class's rate when the link returns, and TCP senders resume on its ACKs instead of
/// their backed-off retransmission timers (measured: `docs/config.md`, "Links going down and
/// coming back"). Not longer, because a frame sent later than that is mostly stale: by then a
/// TCP sender has mostly sent again what was in flight (Linux's minimum retransmission timeout
/// is 200 ms, `TCP_RTO_MIN`, and its initial one 1 s, `TCP_TIMEOUT_INIT`, RFC 6298 §2.1).
pub const DEFAULT_LINK_DOWN_GRACE: Duration = Duration::from_secs(1);
/// How long after the next departure the idle loop may sleep: 200 µs, so that frames due
/// within it leave in one batch (one wake-up and one `sendmmsg` for two super-frames or more at
/// 1 Gbit/s, where they are about 170 µs apart). A frame never leaves before its EDT. 200 µs is
/// a fifth of the default `gso_burst` (a burst the shaper already lets one super-frame make,
/// the kernel's `tcp_tso_autosize` bound); the rate over any window longer than it is
/// unchanged, as each frame's EDT comes from its class's rate, not from when the previous one
/// left. The daemon thread's CPU per Gbit/s with 0, 100, 200 and 400 µs is in
/// docs/results/daemon.md (`metronome compare --target 1gbit --flows 16`).
pub const DEFAULT_TIMER_SLACK: Duration = Duration::from_micros(200);
/// How long an arrival may wait before the loop reads it while the loop is about to wake for a
/// departure anyway: 400 µs, twice the default timer slack. While frames arrive at least two per
/// slack (over the last 10 ms), the wheel holds frames and the idle loop's sleep (until the next
/// departure plus the timer slack) is at most this long, arrivals do not wake it; it reads them
/// in the round it wakes for, so that one wake-up serves a departure and the arrivals before it
/// (at 1 Gbit/s, nine in ten wake-ups were an arrival's, each for about one frame). The
/// machine's CPU per Gbit/s and a probe's RTT with and without it are in
/// docs/results/attach.md ("Waking less").
pub const DEFAULT_ARRIVAL_SLACK: Duration = Duration::from_micros(400);

/// Which classes have series of their own in a scrape (`[daemon] class_metrics`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ClassSeries {
    /// Every class.
    #[default]
    All,
    /// The classes with traffic or a queue, until the metrics' idle time after they went idle (`metronome_daemon::ops::metrics::ACTIVE_IDLE`).
    Active,
    /// The classes named (names of no class are ignored).
    Listed(HashSet<String>),
}

/// A validated configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The file the configuration came from (for messages).
    pub source_name: String,
    /// `[interfaces]`: where packets come from and go to.
    pub interfaces: Interfaces,
    /// `[wheel]`: the timing wheel's geometry and horizon policy, ready for
    /// [`metronome_core::TimingWheel::new`].
    pub wheel: TimingWheelConfig,
    /// `[daemon]`: the loop, the metrics endpoint and logs.
    pub daemon: DaemonConfig,
    /// `[[class]]` in file order: the first that matches a packet takes it.
    pub classes: Vec<ClassConfig>,
    /// `[default]`: the policy of packets no class matches (unshaped unless configured).
    pub default_class: ClassPolicy,
    /// `[link]`: the link the classes share ([`link`]); `None`: each class on its own.
    pub link: Option<LinkConfig>,
    /// `[cluster]` and its classes (`scope = "cluster"`, [`cluster`]); `None`: every limit is
    /// this daemon's own.
    pub cluster: Option<cluster::ClusterSection>,
}

/// Default `[interfaces] origin_mark`: 12 bits (4 095 `from` interfaces) above the low 16 that
/// kube-proxy (0x4000, 0x8000), flannel and Istio (0x539) use; docs/config.md lists who uses which.
pub const DEFAULT_ORIGIN_MARK: u32 = 0x0fff_0000;

/// Attach mode's origins by kind, each name with its tag ([`Config::origins`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Origins {
    /// `match.from` interfaces.
    pub from: BTreeMap<String, u16>,
    /// `match.to` interfaces.
    pub to: BTreeMap<String, u16>,
    /// `match.cgroup` paths.
    pub cgroups: BTreeMap<String, u16>,
}

/// `[interfaces]`: the two sides of the bump in the wire, or the interfaces attached to in place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interfaces {
    /// Frames received here are shaped and sent on [`Interfaces::outside`] (empty in attach
    /// mode).
    pub inside: String,
    /// Frames received here pass unshaped to [`Interfaces::inside`] (empty in attach mode).
    pub outside: String,
    /// Attach mode: the interfaces whose outgoing IP traffic is shaped in place
    /// (`metronome_daemon::os::attach`); empty in the bump in the wire.
    pub attach: Vec<String>,
    /// Attach mode: the bridges whose ports a class may name with `match.to`; each gets a silo
    /// of its own, whose shaped frames are sent out of the bridge itself, which forwards them
    /// to the port (`metronome_daemon::os::attach`).
    pub bridges: Vec<String>,
    /// Attach mode: the contiguous bits of a packet's mark that carry its origin from a `from`
    /// interface to the attached one (`metronome_daemon::os::attach`); 0: the mark is left alone. Default
    /// [`DEFAULT_ORIGIN_MARK`].
    pub origin_mark: u32,
    /// The largest IP packet in bytes; bursts must hold at least one. Default [`DEFAULT_MTU`].
    pub mtu: u32,
}

/// Output format of the daemon's structured logs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// `[daemon]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DaemonConfig {
    /// Keep polling when idle (lowest lateness, one core at 100 %) instead of sleeping until the
    /// wheel's next due time. Default false.
    pub busy_poll: bool,
    /// Packets per receive and transmit batch. Default [`DEFAULT_BATCH_SIZE`].
    pub batch_size: usize,
    /// Address of the Prometheus text endpoint. Default [`DEFAULT_METRICS_LISTEN`].
    pub metrics_listen: SocketAddr,
    /// Path of the control socket (`metronome_daemon::ops::control`); `None` (`control = ""`): none.
    /// Default [`DEFAULT_CONTROL`].
    pub control: Option<std::path::PathBuf>,
    /// A directory of `metronome_daemon::ops::control::ClassFile`s whose classes the control socket
    /// adds at start (`metronome_daemon::ops::control::class_dir`); `None`: none. Default `None`.
    pub class_dir: Option<std::path::PathBuf>,
    /// Most classes the control socket (and `class_dir`) may hold at once, 0..=[`MAX_CLASSES`];
    /// an `add` past it is refused naming `max_api_classes`. Read at each `add`, so a reload
    /// changes it live (classes already there stay). Default [`DEFAULT_MAX_API_CLASSES`].
    pub max_api_classes: usize,
    /// Log format. Default text.
    pub log_format: LogFormat,
    /// Shaper silos (Carousel §5.3): one thread, engine and pair of fanout sockets each. Default 1.
    pub cores: usize,
    /// How often the NIC-level bandwidth allocator redistributes each class's aggregate `rate`
    /// among the silos (only with `cores > 1`). Default [`DEFAULT_NBA_PERIOD`].
    pub nba_period: Duration,
    /// Open both ports with `PACKET_VNET_HDR`: receive the host's GSO/GRO super-frames whole
    /// (up to 64 KiB) and send them with their virtio-net header. Default true.
    pub vnet_hdr: bool,
    /// Large slots of the frame pool for super-frames (only with `vnet_hdr`). Default
    /// [`DEFAULT_GSO_SLOTS`], at most [`MAX_GSO_SLOTS`].
    pub gso_slots: u32,
    /// Switch GRO on on the inside interface at start (`ethtool -K IF gro on`), so that MTU
    /// senders' frames reach the daemon as super-frames too. Left on at exit. Default true.
    pub gro: bool,
    /// What happens to malformed frames ([`metronome_engine::unclassified`]). Default: charged to
    /// the default class.
    pub malformed: metronome_engine::unclassified::Unclassified,
    /// What happens to non-IP frames ([`metronome_engine::unclassified`]). Default: charged to the
    /// default class.
    pub non_ip: metronome_engine::unclassified::Unclassified,
    /// On stop, how long queued packets are still sent at their EDT before the rest is
    /// discarded and counted (`discarded_at_stop`). Default [`DEFAULT_DRAIN`].
    pub drain: Duration,
    /// The longest an outage of the outside link stops the shaping clock: what is queued for a
    /// down link leaves within its EDT plus this, or is dropped and counted
    /// (`metronome_daemon::driver::carrier`). Default [`DEFAULT_LINK_DOWN_GRACE`].
    pub link_down_grace: Duration,
    /// How long after the wheel's next departure the idle loop may sleep, so that frames due
    /// close together leave in one batch: a frame leaves at or after its EDT and, the
    /// machine's own wake-up latency aside, at most this much after it. `"0s"`: wake for each
    /// departure. Default [`DEFAULT_TIMER_SLACK`].
    pub timer_slack: Duration,
    /// While frames arrive at least two per slack (over the last 10 ms) and the wheel holds
    /// frames, the longest idle sleep through which arrivals do not wake the loop: a frame that arrives then waits at most this much before the loop reads it (the
    /// machine's own wake-up latency aside). `"0s"`: every arrival wakes the loop. Default
    /// [`DEFAULT_ARRIVAL_SLACK`].
    pub arrival_slack: Duration,
    /// The user the daemon switches to once its ports are open, keeping only CAP_NET_RAW and
    /// CAP_NET_ADMIN (`metronome_daemon::os::privileges`); `None`: it stays the user it was started as.
    /// Resolved (`getpwnam`) at start-up, not here. Default `None`.
    pub user: Option<String>,
    /// A class may hold at most this many times the frame pool's free slots
    /// (`metronome_engine::engine`'s admission); 0: no share, only the classes' `queue` bounds.
    /// Default [`DEFAULT_POOL_SHARE`].
    pub pool_share: u32,
    /// Refuse in the kernel, before the loop reads them, the frames a class could not take
    /// anyway (`metronome_daemon::os::early`: a socket filter on the receiving sockets with a bucket per
    /// class at `early_multiple` times its rate). Default true.
    pub early_refuse: bool,
    /// The early buckets' multiple of a class's rate, 1..=[`MAX_EARLY_MULTIPLE`] (1 while the
    /// loop is overloaded). Default [`DEFAULT_EARLY_MULTIPLE`].
    pub early_multiple: u32,
    /// The shaping loops' nice value, -20..=19 (`metronome_daemon::os::realtime::nice_logged`): their
    /// weight among the host's ordinary tasks, so that on a busy host the loops get the CPU
    /// they need before bulk work does, as a kernel qdisc's softirq work would; the threads that
    /// do not shape stay at 0. Set while the daemon still has its privileges (no capability is
    /// kept for it). Default [`DEFAULT_NICE`].
    pub nice: i8,
    /// The shaping loops' real-time priority (`SCHED_FIFO`, 1..=[`MAX_REALTIME_PRIORITY`]):
    /// each loop (the single loop, each silo) runs above every ordinary task of the host, as a
    /// kernel qdisc's softirq work does, so that its senders cannot hold it back
    /// (`metronome_daemon::os::realtime`). `None`: the loops stay ordinary tasks. Default `None`.
    pub realtime_priority: Option<u8>,
    /// Which classes have series of their own in the metrics (`"all"`, `"active"` or a list of
    /// class names; [`crate::ClassSeries`]); the totals over all classes count
    /// every class whatever this says. Default all.
    pub class_metrics: crate::ClassSeries,
}

impl Config {
    /// The class id of packets no class matches.
    pub const DEFAULT_CLASS: ClassId = EngineConfig::DEFAULT_CLASS;

    /// Its classes, borrowed (what the silos' allocator reads).
    pub fn class_set(&self) -> metronome_engine::config::ClassSet<'_> {
        metronome_engine::config::ClassSet {
            default_class: &self.default_class,
            classes: &self.classes,
        }
    }

    /// What the engine takes of this configuration.
    pub fn engine(&self) -> EngineConfig {
        EngineConfig {
            classes: self.classes.clone(),
            default_class: self.default_class,
            link: self.link,
            wheel: self.wheel,
            mtu: self.interfaces.mtu,
            malformed: self.daemon.malformed,
            non_ip: self.daemon.non_ip,
            pool_share: self.daemon.pool_share,
        }
    }

    /// Attach mode's `from` and `cgroup` origins: each interface and cgroup of the classes
    /// with its tag (set by validation, see [`Match::origin`]).
    pub fn origins(&self) -> (BTreeMap<String, u16>, BTreeMap<String, u16>) {
        let o = self.origin_set();
        (o.from, o.cgroups)
    }

    /// Attach mode's origins of every kind: each `from` interface, `to` interface and `cgroup`
    /// of the classes with its tag (set by validation, see [`Match::origin`]).
    pub fn origin_set(&self) -> Origins {
        let mut out = Origins::default();
        for c in &self.classes {
            if let Some((key, tag)) = origin_tags::key_of(&c.matcher).zip(c.matcher.origin) {
                let map = match key {
                    origin_tags::OriginKey::From(_) => &mut out.from,
                    origin_tags::OriginKey::To(_) => &mut out.to,
                    origin_tags::OriginKey::Cgroup(_) => &mut out.cgroups,
                };
                map.insert(key.name().to_string(), tag);
            }
        }
        out
    }

    /// The NIC-level bandwidth allocator's period (`[daemon] nba_period`; 0 takes
    /// [`DEFAULT_NBA_PERIOD`]).
    pub fn nba_period(&self) -> Duration {
        if self.daemon.nba_period == Duration::ZERO {
            DEFAULT_NBA_PERIOD
        } else {
            self.daemon.nba_period
        }
    }

    /// Where the silos capture packets (attach mode's attached interfaces, then bridges).
    pub fn placement(&self) -> metronome_engine::allocator::Placement {
        metronome_engine::allocator::Placement {
            attached: self.interfaces.attach.len(),
            bridges: self.interfaces.bridges.len(),
        }
    }

    /// True in attach mode (`[interfaces] attach` or `bridges`).
    pub fn is_attach(&self) -> bool {
        !self.interfaces.attach.is_empty() || !self.interfaces.bridges.is_empty()
    }

    /// Attach mode: the interfaces that get a silo each, the attached ones then the bridges.
    pub fn attached_silos(&self) -> usize {
        self.interfaces.attach.len() + self.interfaces.bridges.len()
    }

    /// Parses and validates `text`; `source_name` names it in errors (usually its path).
    pub fn from_toml_str(text: &str, source_name: &str) -> Result<Config, ConfigError> {
        validate::parse(text, source_name)
    }

    /// Validates `class`, the keys of one `[[class]]` table (`name`, `match`, `rate`, ...), as
    /// a class of this configuration (its MTU and `[link]`); the error's `field` is the class's
    /// own (`rate`, `match.dst`). The control socket's classes come this way
    /// (`metronome_daemon::ops::control`).
    pub fn live_class(&self, class: &toml::Table) -> Result<ClassConfig, ConfigError> {
        let mut doc = toml::Table::new();
        doc.insert("class".to_owned(), toml::Value::Table(class.clone()));
        let text = toml::to_string(&doc).map_err(|e| ConfigError {
            source_name: "control".to_owned(),
            line: None,
            field: String::new(),
            kind: error::ErrorKind::Invalid(e.to_string()),
        })?;
        validate::parse_live_class(&text, self)
    }

    /// Reads and validates the file at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        match std::fs::read_to_string(path) {
            Ok(text) => Self::from_toml_str(&text, &name),
            Err(e) => Err(ConfigError {
                source_name: name,
                line: None,
                field: String::new(),
                kind: ErrorKind::Io(e.to_string()),
            }),
        }
    }

    /// The class id of `classes[index]`: classes are numbered from 1 in file order, 0 being
    /// [`Config::DEFAULT_CLASS`]. Validation caps the classes at [`MAX_CLASSES`].
    pub fn class_id(index: usize) -> ClassId {
        EngineConfig::class_id(index)
    }

    /// The policy of class `id` ([`Config::DEFAULT_CLASS`] gives the default class's).
    pub fn policy(&self, id: ClassId) -> Option<&ClassPolicy> {
        match id.index() {
            0 => Some(&self.default_class),
            i => self.classes.get(i - 1).map(|c| &c.policy),
        }
    }

    /// The name of class `id` (`"default"` for [`Config::DEFAULT_CLASS`]).
    pub fn class_name(&self, id: ClassId) -> Option<&str> {
        metronome_engine::config::class_name(&self.classes, id)
    }

    /// The classifier's rules in file order, class `i` as [`Config::class_id`]`(i)`.
    pub fn class_rules(&self) -> Vec<(ClassRule, ClassId)> {
        metronome_engine::config::class_rules(&self.classes)
    }

    /// A classifier for these classes (first match wins), falling back to
    /// [`Config::DEFAULT_CLASS`], hashing flows with the public
    /// [`metronome_packet::DEFAULT_FLOW_SEED`]: for tests, the simulator and the benchmarks. The
    /// daemon's engine uses [`Config::classifier_seeded`] with the seed it drew at start-up
    /// ([`metronome_engine::flow_seed`]).
    pub fn classifier(&self) -> Classifier {
        metronome_engine::config::classifier(&self.classes)
    }

    /// [`Config::classifier`] hashing flows with `flow_seed` (a reload passes the running
    /// engine's seed, so live flows keep their ids).
    pub fn classifier_seeded(&self, flow_seed: u64) -> Classifier {
        self.classifier().with_flow_seed(flow_seed)
    }

    /// What changes if the daemon running `self` reloads `new` (SIGHUP).
    pub fn diff(&self, new: &Config) -> ReloadPlan {
        reload::plan(self, new)
    }
}
