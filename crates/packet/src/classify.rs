//! Classification: configured rules map an IP packet to a traffic class; first match wins.
//!
//! What a configuration can say: classes match on destination prefix, source prefix, DSCP,
//! protocol, port and origin; first match wins; a default class; non-IP frames pass unshaped.
//!
//! The origin is not in the frame: it is the tag the receiving port gave the packet
//! ([`IpPacket::origin`], 0 for none; the daemon's attach mode sets it from the VLAN tag its
//! capture program pushed, naming the workload interface or cgroup the packet came from). A
//! rule's [`ClassRule::origin`] matches that tag exactly; `Some(0)` matches the packets of no
//! known origin.
//!
//! A [`ClassRule`] is a conjunction of optional fields; an absent field matches anything, so
//! `ClassRule::default()` matches every IP packet. Address prefixes carry their family: a rule
//! with an IPv4 prefix never matches an IPv6 packet and vice versa (an IPv4-mapped IPv6 address
//! is IPv6 here), while a rule without prefixes (only DSCP, protocol, ports or origin) matches both
//! families. A port range never matches a packet without ports (ICMP, a later fragment, a first
//! fragment cut before its transport header), even if the range contains 0.
//!
//! How a packet finds its rule ([`Classifier::class_of`]), with the same result as trying the
//! rules one by one in configuration order:
//!
//! * Up to 16 rules (`LINEAR_MAX_RULES`), a linear scan: for the few rules most shaper
//!   configurations hold, a handful of compares per rule costs less than hashing a key.
//! * Above it, a tuple-space search, as in Open vSwitch's classifier: the rules are grouped by
//!   their shape (destination prefix family and length or none, source prefix family and
//!   length or none, DSCP present, protocol present, origin present). Each shape holds a hash
//!   map from the masked key (destination, source, DSCP, protocol, origin; absent fields as 0)
//!   to its rules in
//!   configuration order, each with its port ranges. A packet costs one key and one lookup per
//!   shape, whatever the number of rules; in a shape the first rule whose port ranges match
//!   wins, and across shapes the smallest rule index wins.
//! * A shape with few keys (`FEW_KEYS`) compares them in turn instead of hashing: a
//!   configuration of many shapes with a few rules each costs about what scanning it would.
//! * Shapes are visited in the order of their first rule, and the search stops at the first
//!   shape whose first rule comes after the best match found: a configuration whose early
//!   rules match most traffic pays for few shapes.
//! * The maps use the standard library's `HashMap` with its default, randomly keyed SipHash
//!   ([`std::collections::hash_map::RandomState`]): the keys come from the packets of untrusted
//!   senders, who must not be able to compute colliding addresses that turn a lookup into a
//!   scan.
//! * Unsatisfiable rules ([`ClassRule::is_unsatisfiable`]) match nothing and are left out of
//!   the index; [`Classifier::rules`] still returns every rule, in order.
//!
//! Classifying reads only the classifier and the parsed packet: no allocation. The index is
//! built once, in [`Classifier::new`].

use crate::flow_hash::{flow_id, DEFAULT_FLOW_SEED};
use crate::frame::{IpPacket, Malformed, Parsed};
use ipnet::IpNet;
use metronome_core::{ClassId, FlowId, PacketRef};
use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;

/// Number of rules up to which [`Classifier::class_of`] scans the rules linearly instead of
/// searching the index (rules). At this size a scan is a few tens of compares, in the order of
/// the cost of hashing one key, so the index would not be faster, and it would be slower for
/// rules of many shapes; above it, the scan grows with every rule while the index does not.
const LINEAR_MAX_RULES: usize = 16;

/// One classification rule: every present field must match. `Default` matches all IP packets.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ClassRule {
    /// Destination address prefix.
    pub dst: Option<IpNet>,
    /// Source address prefix.
    pub src: Option<IpNet>,
    /// DSCP value (0..=63) of the TOS / Traffic Class byte.
    pub dscp: Option<u8>,
    /// IP protocol number (after IPv6 extension headers): 6 TCP, 17 UDP, 1 ICMP, 58 ICMPv6.
    pub protocol: Option<u8>,
    /// Destination port range, inclusive at both ends.
    pub dst_port: Option<(u16, u16)>,
    /// Source port range, inclusive at both ends.
    pub src_port: Option<(u16, u16)>,
    /// Origin tag, compared exactly with [`IpPacket::origin`] (0: no known origin).
    pub origin: Option<u16>,
}

impl ClassRule {
    /// Whether `ip` satisfies every field of the rule.
    #[inline]
    pub fn matches(&self, ip: &IpPacket) -> bool {
        let t = &ip.tuple;
        self.dst.is_none_or(|net| net.contains(&t.dst))
            && self.src.is_none_or(|net| net.contains(&t.src))
            && self.dscp.is_none_or(|d| d == ip.dscp)
            && self.protocol.is_none_or(|p| p == t.protocol)
            && self
                .dst_port
                .is_none_or(|(lo, hi)| ip.has_ports && (lo..=hi).contains(&t.dst_port))
            && self
                .src_port
                .is_none_or(|(lo, hi)| ip.has_ports && (lo..=hi).contains(&t.src_port))
            && self.origin.is_none_or(|o| o == ip.origin)
    }

    /// Whether the rule can never match anything: an IPv4 and an IPv6 prefix together, a DSCP
    /// above 63, or an empty port range (`lo > hi`). The configuration loader should reject
    /// such a rule with the field's name; the classifier accepts it and it matches nothing.
    pub fn is_unsatisfiable(&self) -> bool {
        let mixed = matches!(
            (self.dst, self.src),
            (Some(IpNet::V4(_)), Some(IpNet::V6(_))) | (Some(IpNet::V6(_)), Some(IpNet::V4(_)))
        );
        let empty = |r: Option<(u16, u16)>| r.is_some_and(|(lo, hi)| lo > hi);
        mixed || self.dscp.is_some_and(|d| d > 63) || empty(self.dst_port) || empty(self.src_port)
    }
}

/// What the shaper does with a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// An IP packet: shape it in `class`, as part of `flow`, `len` bytes on the wire.
    Shape {
        /// The first matching rule's class, or the default class.
        class: ClassId,
        /// The 5-tuple hash ([`crate::flow_id`]).
        flow: FlowId,
        /// Bytes of the whole frame.
        len: u16,
    },
    /// Not IP: forward unshaped.
    PassNonIp,
    /// Unreadable: the daemon forwards it unshaped or drops it, and counts it under the reason.
    Malformed(Malformed),
}

impl Verdict {
    /// The queue handle of a shaped packet with the caller's index `id`; `None` otherwise.
    pub fn packet_ref(&self, id: u32) -> Option<PacketRef> {
        match *self {
            Verdict::Shape { class, flow, len } => Some(PacketRef::new(id, flow, class, len)),
            _ => None,
        }
    }
}

/// A rule's handle: its place in first-match order, stable while the rule exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RuleId(pub u32);

/// Ordered rules, a default class and the flow-hash seed.
#[derive(Clone)]
pub struct Classifier {
    rules: Vec<(ClassRule, ClassId)>,
    /// The handle of each rule of `rules`, in the same order.
    ids: Vec<RuleId>,
    /// The handle the next [`Classifier::push`] gives.
    next_id: u32,
    /// The tuple-space index of `rules`; `None` up to [`LINEAR_MAX_RULES`] rules.
    index: Option<TupleSpace>,
    default: ClassId,
    flow_seed: u64,
}

impl fmt::Debug for Classifier {
    /// The rules, the default class and the seed; the index is derived from the rules.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Classifier")
            .field("rules", &self.rules)
            .field("default", &self.default)
            .field("flow_seed", &self.flow_seed)
            .finish()
    }
}

impl Classifier {
    /// A classifier trying `rules` in order, falling back to `default`, hashing flows with the
    /// public [`DEFAULT_FLOW_SEED`] (reproducible ids for tests and simulations; see
    /// [`Classifier::with_flow_seed`]).
    pub fn new(rules: Vec<(ClassRule, ClassId)>, default: ClassId) -> Self {
        let index = (rules.len() > LINEAR_MAX_RULES).then(|| TupleSpace::new(&rules));
        let n = u32::try_from(rules.len()).unwrap_or(u32::MAX);
        Classifier {
            rules,
            ids: (0..n).map(RuleId).collect(),
            next_id: n,
            index,
            default,
            flow_seed: DEFAULT_FLOW_SEED,
        }
    }

    /// The same classifier hashing flows with `seed`. The daemon passes a secret seed drawn
    /// from the OS at start-up and keeps it across reloads, so senders cannot compute tuples
    /// that collide with a victim flow's id or flow-table bucket ([`crate::flow_hash`]).
    pub fn with_flow_seed(mut self, seed: u64) -> Self {
        self.flow_seed = seed;
        self
    }

    /// The verdict for a parsed frame. Allocation-free; beyond a few rules its cost does not grow
    /// with the number of rules (see the module documentation).
    #[inline]
    pub fn classify(&self, parsed: &Parsed) -> Verdict {
        match parsed {
            Parsed::Ip(ip) => Verdict::Shape {
                class: self.class_of(ip),
                flow: flow_id(&ip.tuple, self.flow_seed),
                len: ip.wire_len,
            },
            Parsed::NonIp(_) => Verdict::PassNonIp,
            Parsed::Malformed(reason) => Verdict::Malformed(*reason),
        }
    }

    /// The class of an IP packet: the first matching rule's, else the default.
    #[inline]
    pub fn class_of(&self, ip: &IpPacket) -> ClassId {
        match &self.index {
            None => self
                .rules
                .iter()
                .find(|(rule, _)| rule.matches(ip))
                .map_or(self.default, |&(_, class)| class),
            Some(index) => index.find(ip).unwrap_or(self.default),
        }
    }

    /// Appends `rule` after every rule present (last in first-match order); returns its handle.
    /// This version rebuilds the index: its cost grows with the number of rules.
    pub fn push(&mut self, rule: ClassRule, class: ClassId) -> RuleId {
        let id = RuleId(self.next_id);
        self.next_id = self.next_id.wrapping_add(1);
        self.rules.push((rule, class));
        self.ids.push(id);
        self.rebuild_index();
        id
    }

    /// Removes rule `id`; returns whether it was there. This version rebuilds the index: its
    /// cost grows with the number of rules.
    pub fn remove(&mut self, id: RuleId) -> bool {
        let Some(at) = self.ids.iter().position(|&i| i == id) else {
            return false;
        };
        self.rules.remove(at);
        self.ids.remove(at);
        self.rebuild_index();
        true
    }

    fn rebuild_index(&mut self) {
        self.index = (self.rules.len() > LINEAR_MAX_RULES).then(|| TupleSpace::new(&self.rules));
    }

    /// The rules, in matching order.
    pub fn rules(&self) -> &[(ClassRule, ClassId)] {
        &self.rules
    }

    /// The class of IP packets no rule matches.
    pub fn default_class(&self) -> ClassId {
        self.default
    }

    /// The flow-hash seed.
    pub fn flow_seed(&self) -> u64 {
        self.flow_seed
    }
}

/// The shape of a rule's address prefix: which family and how many bits, or none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum PrefixShape {
    /// No prefix: any address of either family.
    Any,
    /// An IPv4 prefix of this length (0..=32).
    V4(u8),
    /// An IPv6 prefix of this length (0..=128).
    V6(u8),
}

impl PrefixShape {
    fn of(net: Option<IpNet>) -> Self {
        match net {
            None => PrefixShape::Any,
            Some(IpNet::V4(n)) => PrefixShape::V4(n.prefix_len()),
            Some(IpNet::V6(n)) => PrefixShape::V6(n.prefix_len()),
        }
    }

    /// The address's bits under this shape's mask, as the key part; 0 for `Any`; `None` when the
    /// address is of the other family, which no rule of this shape matches.
    #[inline]
    fn masked(self, addr: IpAddr) -> Option<u128> {
        match (self, addr) {
            (PrefixShape::Any, _) => Some(0),
            (PrefixShape::V4(len), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
                Some(u128::from(u32::from(a) & mask))
            }
            (PrefixShape::V6(len), IpAddr::V6(a)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
                Some(u128::from(a) & mask)
            }
            _ => None,
        }
    }
}

/// Which fields of a rule are present, and the prefix lengths: the rules of one shape differ
/// only in the values of those fields and in their port ranges.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Shape {
    dst: PrefixShape,
    src: PrefixShape,
    dscp: bool,
    protocol: bool,
    origin: bool,
}

impl Shape {
    fn of(rule: &ClassRule) -> Self {
        Shape {
            dst: PrefixShape::of(rule.dst),
            src: PrefixShape::of(rule.src),
            dscp: rule.dscp.is_some(),
            protocol: rule.protocol.is_some(),
            origin: rule.origin.is_some(),
        }
    }

    /// The packet's key under this shape; `None` when an address family rules the shape out.
    #[inline]
    fn key(self, ip: &IpPacket) -> Option<Key> {
        Some(Key {
            dst: self.dst.masked(ip.tuple.dst)?,
            src: self.src.masked(ip.tuple.src)?,
            dscp: if self.dscp { ip.dscp } else { 0 },
            protocol: if self.protocol { ip.tuple.protocol } else { 0 },
            origin: if self.origin { ip.origin } else { 0 },
        })
    }
}

/// The fields a shape compares exactly, masked; absent fields are 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Key {
    dst: u128,
    src: u128,
    dscp: u8,
    protocol: u8,
    origin: u16,
}

impl Key {
    /// The key of a satisfiable rule of `shape`: the same value [`Shape::key`] gives every
    /// packet the rule's prefixes, DSCP, protocol and origin match.
    fn of_rule(rule: &ClassRule, shape: Shape) -> Self {
        let network = |net: Option<IpNet>, part: PrefixShape| {
            net.and_then(|n| part.masked(n.network())).unwrap_or(0)
        };
        Key {
            dst: network(rule.dst, shape.dst),
            src: network(rule.src, shape.src),
            dscp: rule.dscp.unwrap_or(0),
            protocol: rule.protocol.unwrap_or(0),
            origin: rule.origin.unwrap_or(0),
        }
    }
}

/// A rule in its shape's map: what is left to compare once the key matched.
#[derive(Clone, Debug)]
struct Entry {
    /// Position of the rule in the configuration.
    index: usize,
    dst_port: Option<(u16, u16)>,
    src_port: Option<(u16, u16)>,
    class: ClassId,
}

impl Entry {
    /// Whether the packet's ports satisfy the rule's ranges, as in [`ClassRule::matches`].
    #[inline]
    fn ports_match(&self, ip: &IpPacket) -> bool {
        let t = &ip.tuple;
        self.dst_port
            .is_none_or(|(lo, hi)| ip.has_ports && (lo..=hi).contains(&t.dst_port))
            && self
                .src_port
                .is_none_or(|(lo, hi)| ip.has_ports && (lo..=hi).contains(&t.src_port))
    }
}

/// Number of distinct keys up to which a shape keeps its keys in a list compared one by one
/// (keys): comparing a few keys costs less than hashing one, so a configuration of many shapes
/// with few rules each costs about what a linear scan of its rules costs. Above it, a hash map.
const FEW_KEYS: usize = 8;

/// The rules of one shape by key, each list in configuration order. A list ends at its first
/// rule without port ranges: the rules after it could never be the first match.
#[derive(Clone, Debug)]
enum Keyed {
    /// Up to [`FEW_KEYS`] keys, compared in turn.
    Few(Vec<(Key, Vec<Entry>)>),
    /// More keys, hashed.
    Many(HashMap<Key, Vec<Entry>>),
}

impl Keyed {
    fn new(mut rules: HashMap<Key, Vec<Entry>>) -> Self {
        for list in rules.values_mut() {
            list.shrink_to_fit();
        }
        if rules.len() <= FEW_KEYS {
            Keyed::Few(rules.into_iter().collect())
        } else {
            rules.shrink_to_fit();
            Keyed::Many(rules)
        }
    }

    #[inline]
    fn get(&self, key: &Key) -> Option<&[Entry]> {
        match self {
            Keyed::Few(list) => list.iter().find(|(k, _)| k == key).map(|(_, e)| &e[..]),
            Keyed::Many(map) => map.get(key).map(|e| &e[..]),
        }
    }
}

/// The rules of one shape.
#[derive(Clone, Debug)]
struct ShapeTable {
    shape: Shape,
    /// The smallest rule index of the shape.
    first: usize,
    rules: Keyed,
}

/// The tuple-space index: shapes in increasing order of their first rule.
#[derive(Clone, Debug)]
struct TupleSpace {
    tables: Vec<ShapeTable>,
}

impl TupleSpace {
    fn new(rules: &[(ClassRule, ClassId)]) -> Self {
        let mut tables: Vec<(Shape, usize, HashMap<Key, Vec<Entry>>)> = Vec::new();
        let mut table_of: HashMap<Shape, usize> = HashMap::new();
        for (index, (rule, class)) in rules.iter().enumerate() {
            if rule.is_unsatisfiable() {
                continue;
            }
            let shape = Shape::of(rule);
            // Rules come in increasing index order, so a shape's table is created at its
            // smallest index and the tables are in increasing order of `first`.
            let t = *table_of.entry(shape).or_insert_with(|| {
                tables.push((shape, index, HashMap::new()));
                tables.len() - 1
            });
            let list = tables[t].2.entry(Key::of_rule(rule, shape)).or_default();
            let shadowed = list
                .last()
                .is_some_and(|e| e.dst_port.is_none() && e.src_port.is_none());
            if !shadowed {
                list.push(Entry {
                    index,
                    dst_port: rule.dst_port,
                    src_port: rule.src_port,
                    class: *class,
                });
            }
        }
        let tables = tables
            .into_iter()
            .map(|(shape, first, rules)| ShapeTable {
                shape,
                first,
                rules: Keyed::new(rules),
            })
            .collect();
        TupleSpace { tables }
    }

    /// The class of the first rule, in configuration order, that matches `ip`. Kept out of line
    /// so that [`Classifier::class_of`], inlined into the per-packet path, stays as small as the
    /// linear scan alone for configurations of few rules.
    #[inline(never)]
    fn find(&self, ip: &IpPacket) -> Option<ClassId> {
        let mut best: Option<&Entry> = None;
        for table in &self.tables {
            if best.is_some_and(|b| b.index < table.first) {
                break;
            }
            let Some(key) = table.shape.key(ip) else {
                continue;
            };
            let Some(list) = table.rules.get(&key) else {
                continue;
            };
            if let Some(e) = list.iter().find(|e| e.ports_match(ip)) {
                if best.is_none_or(|b| e.index < b.index) {
                    best = Some(e);
                }
            }
        }
        best.map(|e| e.class)
    }
}
