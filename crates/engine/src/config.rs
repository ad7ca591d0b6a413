//! What the engine is configured with: a plain [`EngineConfig`] (classes, default policy,
//! `[link]`, wheel, frame size, unclassified frames, pool share) and the class types in it.
//! The daemon's TOML file (`metronome-config`) is validated into these and lowered into an
//! [`EngineConfig`]; the simulator and the benchmarks build them the same way.

pub mod link;
pub mod tree;

pub use link::{ClassLink, LinkConfig, LinkMarking, LinkMarkingRule, LinkScheduler};

use crate::unclassified::Unclassified;
use core::fmt;
use ipnet::IpNet;
use metronome_core::{ClassId, Duration, HorizonPolicy, Rate, TimingWheelConfig};
use metronome_packet::{ClassRule, Classifier};

/// Largest batch accepted, in packets: a sanity bound (FlowBundler's BESS pipeline moves 32).
pub const MAX_BATCH_SIZE: usize = 1024;
/// Bytes of an Ethernet header without VLAN tag: a full frame is `mtu + ETHERNET_HEADER`.
pub const ETHERNET_HEADER: u32 = 14;
/// Default `gso_burst` of a class: 1 ms at its rate, the bound the kernel's
/// `tcp_tso_autosize` (net/ipv4/tcp_output.c) puts on a sender's super-frames.
pub const DEFAULT_GSO_BURST: Duration = Duration::from_millis(1);
/// Most classes: 2^20 (1 048 576), past the tens of thousands of rate limiters a host needs
/// (NicPic §1). The engine numbers its class states with a `u32` ([`ClassId`]) and takes up to
/// `crate::engine::MAX_CLASS_STATES` over its life, so a configuration of this many
/// always gets its states, the default class's included.
pub const MAX_CLASSES: usize = 1 << 20;

/// One `[[class]]`.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassConfig {
    /// Unique name, used in metrics and logs.
    pub name: String,
    /// The packets it takes (all fields must match; an empty match takes everything).
    pub matcher: Match,
    /// What is done to them.
    pub policy: ClassPolicy,
    /// Its place in the class tree ([`Tree`]).
    pub tree: Tree,
    /// The line of the class's `name` in the file (for messages).
    pub line: usize,
}

/// Most levels of a class tree: a class and up to seven ancestors. A packet passes the policy
/// of every level (Carousel §5.1.1), so the depth bounds the per-packet cost.
pub const MAX_TREE_DEPTH: usize = 8;

/// Largest `weight` of a class among its siblings: 10 000, as on the `[link]`.
pub const MAX_TREE_WEIGHT: u32 = 10_000;

/// A class's place in the class tree (`parent`, `weight`): its packets are charged to it and to
/// every ancestor and leave at the latest of their EDTs; a parent's rate is shared among its
/// backlogged children by weight, each within its own rate (`crate::engine`'s tree).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tree {
    /// The parent class's name; `None`: a class at the top.
    pub parent: Option<String>,
    /// Its weight among its siblings, 1..=[`MAX_TREE_WEIGHT`] (default 1).
    pub weight: u32,
    /// It has no `match`: it takes no packet of its own and only gathers its children's (a
    /// class with no `match` and no children takes every packet, as before trees).
    pub gathers_only: bool,
}

impl Default for Tree {
    fn default() -> Self {
        Tree {
            parent: None,
            weight: 1,
            gathers_only: false,
        }
    }
}

/// A class's `match`: every field present must match; absent fields match anything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Match {
    /// Destination prefix.
    pub dst: Option<IpNet>,
    /// Source prefix.
    pub src: Option<IpNet>,
    /// DSCP, 0..=63.
    pub dscp: Option<u8>,
    /// IP protocol number (`tcp` = 6, `udp` = 17, `icmp` = 1, `icmpv6` = 58).
    pub protocol: Option<u8>,
    /// Destination ports, inclusive `(first, last)`.
    pub dst_port: Option<(u16, u16)>,
    /// Source ports, inclusive `(first, last)`.
    pub src_port: Option<(u16, u16)>,
    /// Attach mode: the interface the packet entered the host through.
    pub from: Option<String>,
    /// Attach mode: the interface the packet leaves the host through, a port of one of
    /// the bridges of `[interfaces] bridges`.
    pub to: Option<String>,
    /// Attach mode: the cgroup v2 (path below `/sys/fs/cgroup`) of the local socket that sent it,
    /// or one of its ancestors.
    pub cgroup: Option<String>,
    /// The origin tag of `from`, `to` or `cgroup`, set by validation
    /// (`metronome_config::origin_tags`) and kept while a class names it.
    pub origin: Option<u16>,
}

/// What a class does to its packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassPolicy {
    /// Aggregate rate limit shared by all the class's flows; `None`: no aggregate limit.
    pub rate: Option<Rate>,
    /// Per-flow pacing rate; `None`: flows are not paced individually.
    pub pacing: Option<Rate>,
    /// Bytes that may leave back to back after an idle period (the policies' bucket depth,
    /// `metronome_core::timestamp`). Default one full frame, `mtu + 14`.
    pub burst: u32,
    /// Longest a super-frame may take to leave at the class's rate (or its flow's pacing
    /// rate) before it is cut into pieces, each with its own EDT (NicPic §3's per-class
    /// offset). A piece has at least two segments. Default [`DEFAULT_GSO_BURST`].
    pub gso_burst: Duration,
    /// Override of the wheel's horizon policy for this class; `None`: the wheel's.
    pub horizon_policy: Option<HorizonPolicy>,
    /// What happens when the class's flows queue too much.
    pub backpressure: Backpressure,
    /// Receiver-side ACK shaping of the class's TCP flows in the reverse direction (Carousel §6,
    /// `ack_shaping`); `None`: ACKs pass unchanged.
    pub ack_shaping: Option<AckShapingPolicy>,
    /// Fair queueing among the class's flows (`fair = true`): packets wait in per-flow queues
    /// and, each time the class's aggregate may send, deficit round robin picks the flow whose
    /// packet leaves, new flows first (`metronome_core::fair_queue`); backpressure looks at the
    /// flow's own queueing delay. `false`: the class is one FIFO, every packet stamped on
    /// arrival. Only with `rate`.
    pub fair: bool,
    /// Its place on the `[link]` ([`ClassLink::OFF`] without one).
    pub link: ClassLink,
    /// The most the class may hold waiting (`queue`); unset fields take their defaults
    /// ([`QueueLimit::bounds`]).
    pub queue: QueueLimit,
    /// Slow the host's own TCP sockets of the class at their source (`pace_sockets`): in attach
    /// mode the daemon gives each of the class's local TCP flows its share of the class's rate
    /// as its pacing ceiling (`metronome_daemon::os::pace`), so that they queue in the
    /// daemon no more than a few frames. The engine lists the class's new flows for it
    /// ([`crate::engine::pace::PacedFlow`]) and computes the ceiling ([`crate::engine::Engine::pace_pass`]).
    /// Only with `rate`; elsewhere inert.
    pub pace_sockets: bool,
}

/// A class's `queue = { packets = N, bytes = SIZE }`: the most frames and wire bytes the class
/// may hold waiting (in its fair queue, the wheel and the link's queue together). A frame that
/// would take the class past either bound is dropped from that class and counted under
/// `queue_full` (a fair class sheds from its fattest flow instead), so one class's backlog
/// cannot take another's buffer (HTB's one leaf queue per class, `sch_fq`'s `limit`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueLimit {
    /// Most frames waiting; `None`: the default of [`QueueLimit::bounds`].
    pub packets: Option<u64>,
    /// Most wire bytes waiting; `None`: the default of [`QueueLimit::bounds`].
    pub bytes: Option<u64>,
}

/// Fewest frames a class's default `queue.packets` allows: 64, one receive batch.
pub const MIN_QUEUE_PACKETS: u64 = 64;

impl QueueLimit {
    /// The bounds in force, `(packets, bytes)`, for a class of aggregate rate `rate` on a wheel
    /// of horizon `horizon` whose full frames have `frame_bytes` bytes. By default `bytes` is
    /// what the class sends in one horizon at its rate (no frame it holds could leave later
    /// than the horizon, whatever the horizon policy), and `packets` as many full frames, at
    /// least [`MIN_QUEUE_PACKETS`]: a class that sends small frames holds fewer bytes. Without
    /// a rate (pacing only) neither has a default (`u64::MAX`): the frame pool's share bounds
    /// such a class (`crate::engine`).
    pub fn bounds(&self, rate: Option<Rate>, horizon: Duration, frame_bytes: u32) -> (u64, u64) {
        let default_bytes = rate.map(|r| r.bytes_in(horizon));
        let bytes = self.bytes.or(default_bytes).unwrap_or(u64::MAX);
        let default_packets = default_bytes.map(|b| {
            b.div_ceil(u64::from(frame_bytes.max(1)))
                .max(MIN_QUEUE_PACKETS)
        });
        let packets = self.packets.or(default_packets).unwrap_or(u64::MAX);
        (packets, bytes)
    }
}

impl fmt::Display for QueueLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.packets {
            Some(p) => write!(f, "{p} packets")?,
            None => write!(f, "default packets")?,
        }
        match self.bytes {
            Some(b) => write!(f, ", {b} bytes"),
            None => write!(f, ", default bytes"),
        }
    }
}

/// Default flows one class's ACK shaper tracks: 4096 (80-byte core slot plus a 160-byte header
/// template each, about 1 MB per class).
pub const DEFAULT_ACK_SHAPING_FLOWS: u32 = 4096;
/// Most flows one class's ACK shaper may track: 2^20 (about 250 MB per class).
pub const MAX_ACK_SHAPING_FLOWS: u32 = 1 << 20;

/// A class's `ack_shaping`: the rate at which the ACKs of its TCP flows are released.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckShapingPolicy {
    /// The rate: shared by the class's active flows, or each flow's when `per_flow`.
    pub rate: Rate,
    /// `rate` applies to each flow (`per = "flow"`) rather than to the class (`per = "class"`).
    pub per_flow: bool,
    /// Most flows tracked; ACKs of further flows pass unchanged (counted).
    pub flows: u32,
}

impl fmt::Display for AckShapingPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let per = if self.per_flow { "flow" } else { "class" };
        write!(f, "{} per {per}, {} flows", self.rate, self.flows)
    }
}

impl ClassPolicy {
    /// The policy of a class with nothing configured: unshaped, burst of one full frame.
    pub fn unshaped(mtu: u32) -> Self {
        ClassPolicy {
            rate: None,
            pacing: None,
            burst: mtu.saturating_add(ETHERNET_HEADER),
            gso_burst: DEFAULT_GSO_BURST,
            horizon_policy: None,
            backpressure: Backpressure::None,
            ack_shaping: None,
            fair: false,
            link: ClassLink::OFF,
            queue: QueueLimit::default(),
            pace_sockets: false,
        }
    }

    /// True if the class has a rate or a pacing rate (its packets get a later EDT than `now`).
    pub fn is_shaped(&self) -> bool {
        self.rate.is_some() || self.pacing.is_some()
    }

    /// The horizon policy that applies to the class: its override, else the wheel's.
    pub fn effective_horizon_policy(&self, wheel: &TimingWheelConfig) -> HorizonPolicy {
        self.horizon_policy.unwrap_or(wheel.horizon_policy)
    }
}

/// What a class does when its flows queue too much (`backpressure.mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backpressure {
    /// Nothing: packets wait as long as their EDT says.
    #[default]
    None,
    /// Set CE on ECN-capable packets of a flow whose queued delay exceeds `threshold`.
    Ecn {
        /// Queued delay (EDT minus now) above which packets are marked.
        threshold: Duration,
    },
    /// Drop (and count) a flow's packets beyond `limit` queued packets.
    Drop {
        /// Packets a flow may have queued.
        limit: u32,
    },
}

impl fmt::Display for Backpressure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Backpressure::None => write!(f, "none"),
            Backpressure::Ecn { threshold } => write!(f, "ecn above {threshold}"),
            Backpressure::Drop { limit } => write!(f, "drop beyond {limit} packets per flow"),
        }
    }
}

impl Match {
    /// The classifier's rule for this match (`metronome_packet::ClassRule`, same fields; any
    /// origin).
    pub fn to_rule(&self) -> ClassRule {
        ClassRule {
            dst: self.dst,
            src: self.src,
            dscp: self.dscp,
            protocol: self.protocol,
            dst_port: self.dst_port,
            src_port: self.src_port,
            origin: self.origin,
        }
    }
}

impl fmt::Display for Match {
    /// `dst 10.0.0.0/8 protocol 6 dst_port 5201-5216`, or `any`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(p) = self.dst {
            parts.push(format!("dst {p}"));
        }
        if let Some(p) = self.src {
            parts.push(format!("src {p}"));
        }
        if let Some(d) = self.dscp {
            parts.push(format!("dscp {d}"));
        }
        if let Some(p) = self.protocol {
            parts.push(format!("protocol {p}"));
        }
        for (name, range) in [("dst_port", self.dst_port), ("src_port", self.src_port)] {
            match range {
                Some((a, b)) if a == b => parts.push(format!("{name} {a}")),
                Some((a, b)) => parts.push(format!("{name} {a}-{b}")),
                None => {}
            }
        }
        if let Some(name) = &self.from {
            parts.push(format!("from {name}"));
        }
        if let Some(name) = &self.to {
            parts.push(format!("to {name}"));
        }
        if let Some(path) = &self.cgroup {
            parts.push(format!("cgroup {path}"));
        }
        if parts.is_empty() {
            write!(f, "any")
        } else {
            write!(f, "{}", parts.join(" "))
        }
    }
}

/// Everything an [`crate::engine::Engine`] is configured with. The daemon lowers its validated
/// file into one (`metronome_config::Config::engine`); a reload hands the engine a new one.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineConfig {
    /// The classes, in match order (class `i` has the class id [`EngineConfig::class_id`]`(i)`).
    pub classes: Vec<ClassConfig>,
    /// The policy of packets no class matches.
    pub default_class: ClassPolicy,
    /// The shared link, if any.
    pub link: Option<LinkConfig>,
    /// The timing wheel.
    pub wheel: TimingWheelConfig,
    /// The interfaces' MTU: a full frame is `mtu + ETHERNET_HEADER` bytes.
    pub mtu: u32,
    /// What happens to malformed frames.
    pub malformed: Unclassified,
    /// What happens to non-IP frames.
    pub non_ip: Unclassified,
    /// α of the frame pool's dynamic threshold per class (0: no share bound).
    pub pool_share: u32,
}

/// A configuration's classes, borrowed: what the silos' allocator reads
/// ([`crate::allocator::Allocator`]) without a copy of the whole configuration.
#[derive(Clone, Copy, Debug)]
pub struct ClassSet<'a> {
    /// The policy of packets no class matches.
    pub default_class: &'a ClassPolicy,
    /// The classes, in match order.
    pub classes: &'a [ClassConfig],
}

impl EngineConfig {
    /// The class id of packets no class matches.
    pub const DEFAULT_CLASS: ClassId = ClassId(0);

    /// The class id of `classes[index]`: classes are numbered from 1 in match order, 0 being
    /// [`EngineConfig::DEFAULT_CLASS`]; validation caps the classes at [`MAX_CLASSES`].
    pub fn class_id(index: usize) -> ClassId {
        ClassId(u32::try_from(index + 1).unwrap_or(u32::MAX))
    }

    /// The policy of class `id` ([`EngineConfig::DEFAULT_CLASS`] gives the default class's).
    pub fn policy(&self, id: ClassId) -> Option<&ClassPolicy> {
        match id.index() {
            0 => Some(&self.default_class),
            i => self.classes.get(i - 1).map(|c| &c.policy),
        }
    }

    /// The name of class `id` (`"default"` for [`EngineConfig::DEFAULT_CLASS`]).
    pub fn class_name(&self, id: ClassId) -> Option<&str> {
        class_name(&self.classes, id)
    }

    /// A classifier for these classes (first match wins, a class before its ancestors), falling
    /// back to [`EngineConfig::DEFAULT_CLASS`], hashing flows with `flow_seed`.
    pub fn classifier_seeded(&self, flow_seed: u64) -> Classifier {
        classifier(&self.classes).with_flow_seed(flow_seed)
    }
}

/// The name of class `id` among `classes` (`"default"` for [`EngineConfig::DEFAULT_CLASS`]).
pub fn class_name(classes: &[ClassConfig], id: ClassId) -> Option<&str> {
    match id.index() {
        0 => Some("default"),
        i => classes.get(i - 1).map(|c| c.name.as_str()),
    }
}

/// The classifier's rules of `classes` in first-match order ([`tree::rule_order`]: the file's,
/// a class after its descendants), class `i` as [`EngineConfig::class_id`]`(i)`. A class that
/// only gathers its children ([`Tree::gathers_only`]) has no rule.
pub fn class_rules(classes: &[ClassConfig]) -> Vec<(ClassRule, ClassId)> {
    tree::rule_order(classes)
        .into_iter()
        .map(|i| (classes[i].matcher.to_rule(), EngineConfig::class_id(i)))
        .collect()
}

/// A classifier for `classes` (first match wins), falling back to
/// [`EngineConfig::DEFAULT_CLASS`], hashing flows with the public
/// [`metronome_packet::DEFAULT_FLOW_SEED`].
pub fn classifier(classes: &[ClassConfig]) -> Classifier {
    Classifier::new(class_rules(classes), EngineConfig::DEFAULT_CLASS)
}
