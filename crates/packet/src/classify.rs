//! Classification: configured rules map an IP packet to a traffic class; first match wins.
//!
//! What a configuration can say: classes match on destination prefix, source prefix, DSCP,
//! protocol and port; first match wins; a default class; non-IP frames pass unshaped.
//!
//! A [`ClassRule`] is a conjunction of optional fields; an absent field matches anything, so
//! `ClassRule::default()` matches every IP packet. Address prefixes carry their family: a rule
//! with an IPv4 prefix never matches an IPv6 packet and vice versa (an IPv4-mapped IPv6 address
//! is IPv6 here), while a rule without prefixes (only DSCP, protocol or ports) matches both
//! families. A port range never matches a packet without ports (ICMP, a later fragment, a first
//! fragment cut before its transport header), even if the range contains 0.
//!
//! The scan is linear, rule by rule, in configuration order: for the tens of rules a shaper
//! configuration holds, a handful of compares per rule beats any index (a prefix trie or a
//! tuple-space search, as in Open vSwitch, pays off from hundreds of rules). The scan reads
//! only the rule slice and the parsed packet: no allocation.

use crate::flow_hash::{flow_id, DEFAULT_FLOW_SEED};
use crate::frame::{IpPacket, Malformed, Parsed};
use ipnet::IpNet;
use metronome_core::{ClassId, FlowId, PacketRef};

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

/// Ordered rules, a default class and the flow-hash seed.
#[derive(Clone, Debug)]
pub struct Classifier {
    rules: Vec<(ClassRule, ClassId)>,
    default: ClassId,
    flow_seed: u64,
}

impl Classifier {
    /// A classifier trying `rules` in order, falling back to `default`, hashing flows with the
    /// public [`DEFAULT_FLOW_SEED`] (reproducible ids for tests and simulations; see
    /// [`Classifier::with_flow_seed`]).
    pub fn new(rules: Vec<(ClassRule, ClassId)>, default: ClassId) -> Self {
        Classifier {
            rules,
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

    /// The verdict for a parsed frame. Allocation-free; linear in the number of rules.
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
        self.rules
            .iter()
            .find(|(rule, _)| rule.matches(ip))
            .map_or(self.default, |&(_, class)| class)
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
