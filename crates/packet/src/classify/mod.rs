//! Classification: configured rules map an IP packet to a traffic class; first match wins.
//!
//! A [`ClassRule`] (`rule.rs`) is a conjunction of optional fields (destination and source prefix,
//! DSCP, protocol, ports, origin: the tag the receiving port gave the packet,
//! [`IpPacket::origin`]); rules have a first-match order and a [`RuleId`] each
//! ([`Classifier::new`], [`Classifier::push`], [`Classifier::remove`]; ids never reused).
//! [`Classifier::class_of`] gives the result of trying the rules in order: a linear scan up to
//! `LINEAR_MAX_RULES`, above it a tuple-space search as in Open vSwitch (`tuple_space.rs`,
//! `shape.rs`, `keyed.rs`) over randomly keyed SipHash maps, with an exact-match cache in front
//! ([`Classifier::classify`], `exact_cache.rs`). No allocation per packet; the index follows each
//! push and remove without a rebuild. How the search finds the first match and what each step
//! costs: ARCHITECTURE.md, "Classification".

mod exact_cache;
mod keyed;
mod rule;
mod rule_list;
mod shape;
#[cfg(test)]
mod tests;
mod tuple_space;

pub use rule::ClassRule;

use crate::flow_hash::{flow_id, DEFAULT_FLOW_SEED};
use crate::frame::{IpPacket, Malformed, Parsed};
use exact_cache::ExactCache;
use metronome_core::{ClassId, FlowId, PacketRef};
use rule_list::RuleList;
use std::fmt;
use tuple_space::TupleSpace;

/// Number of rules up to which [`Classifier::class_of`] scans the rules linearly instead of
/// searching the index (rules). At this size a scan is a few tens of compares, in the order of
/// the cost of hashing one key, so the index would not be faster, and it would be slower for
/// rules of many shapes; above it, the scan grows with every rule while the index does not.
/// A classifier that shrinks by removals keeps its index down to half of it (rules), so that one
/// at the boundary does not build and drop its index on every push and remove.
const LINEAR_MAX_RULES: usize = 16;

/// A rule's handle: its place in first-match order, stable while the rule exists. A rule with a
/// smaller id is tried first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleId(pub u32);

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
///
/// ```
/// use metronome_packet::{parse, mark_ce, ClassRule, Classifier, EcnMark, Verdict};
/// use metronome_core::ClassId;
///
/// // An Ethernet + IPv4 + UDP frame to 10.1.2.3:5001, ECT(0).
/// let mut frame = vec![0u8; 14 + 20 + 8];
/// frame[12..14].copy_from_slice(&[0x08, 0x00]);
/// frame[14..34].copy_from_slice(&[
///     0x45, 0x02, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 1, 2, 3,
/// ]);
/// let sum = metronome_packet::ipv4_header_checksum(&frame[14..34]).unwrap();
/// frame[24..26].copy_from_slice(&sum.to_be_bytes());
/// frame[34..42].copy_from_slice(&[0x13, 0x88, 0x13, 0x89, 0, 8, 0, 0]);
///
/// let tenant = ClassRule { dst: Some("10.1.0.0/16".parse().unwrap()), ..Default::default() };
/// let classifier = Classifier::new(vec![(tenant, ClassId(1))], ClassId(0));
/// let parsed = parse(&frame);
/// let Verdict::Shape { class, len, .. } = classifier.classify(&parsed) else { panic!() };
/// assert_eq!((class, len), (ClassId(1), 42));
///
/// assert_eq!(mark_ce(&mut frame, &parsed), EcnMark::Marked);
/// assert_eq!(frame[15] & 0b11, 0b11);
/// ```
#[derive(Clone)]
pub struct Classifier {
    rules: RuleList,
    /// The tuple-space index of `rules`; `None` while the classifier scans its rules.
    index: Option<TupleSpace>,
    /// The exact-match cache in front of the index (`exact_cache.rs`), made with it.
    cache: Option<ExactCache>,
    /// The id of the next rule pushed.
    next_id: u32,
    default: ClassId,
    flow_seed: u64,
}

impl fmt::Debug for Classifier {
    /// The rules with their ids, the default class and the seed; the index is derived from the
    /// rules.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rules: Vec<_> = self.rules_with_ids().collect();
        f.debug_struct("Classifier")
            .field("rules", &rules)
            .field("default", &self.default)
            .field("flow_seed", &self.flow_seed)
            .finish()
    }
}

impl Classifier {
    /// A classifier trying `rules` in order (ids 0, 1, ...), falling back to `default`, hashing
    /// flows with the public [`DEFAULT_FLOW_SEED`] (reproducible ids for tests and simulations;
    /// see [`Classifier::with_flow_seed`]).
    pub fn new(rules: Vec<(ClassRule, ClassId)>, default: ClassId) -> Self {
        let mut classifier = Classifier {
            rules: RuleList::default(),
            index: None,
            cache: None,
            next_id: 0,
            default,
            flow_seed: DEFAULT_FLOW_SEED,
        };
        for (rule, class) in rules {
            classifier.push(rule, class);
        }
        classifier
    }

    /// The same classifier hashing flows with `seed`. The daemon passes a secret seed drawn
    /// from the OS at start-up and keeps it across reloads, so senders cannot compute tuples
    /// that collide with a victim flow's id or flow-table bucket ([`crate::flow_hash`]).
    pub fn with_flow_seed(mut self, seed: u64) -> Self {
        self.flow_seed = seed;
        self
    }

    /// Appends `rule` after every rule present (last in first-match order) and returns its id.
    /// O(1) amortized; the push that takes the classifier past `LINEAR_MAX_RULES` (16) rules
    /// also builds the index from them.
    ///
    /// # Panics
    /// When [`Classifier::can_push`] is false: the classifier has handed out all its ids
    /// (4 294 967 295 pushes in its life: one every millisecond for 49 days); a classifier made
    /// again with [`Classifier::new`] starts from 0. The daemon checks `can_push` first.
    pub fn push(&mut self, rule: ClassRule, class: ClassId) -> RuleId {
        let id = RuleId(self.next_id);
        self.next_id = self
            .next_id
            .checked_add(1)
            .expect("a classifier hands out at most 2^32 rule ids");
        if let Some(index) = &mut self.index {
            index.insert(id.0, &rule, class);
        }
        self.rules.push(id, (rule, class));
        if self.index.is_none() && self.rules.len() > LINEAR_MAX_RULES {
            let mut index = TupleSpace::default();
            for slot in self.rules.iter() {
                index.insert(slot.id.0, &slot.rule.0, slot.rule.1);
            }
            self.index = Some(index);
            self.cache = Some(ExactCache::new());
        }
        if let Some(cache) = &mut self.cache {
            cache.invalidate();
        }
        id
    }

    /// Whether [`Classifier::push`] can hand out another id: false once the classifier has
    /// handed out 2^32 - 1 of them in its life (a classifier made again with
    /// [`Classifier::new`] numbers from 0).
    pub fn can_push(&self) -> bool {
        self.next_id < u32::MAX
    }

    /// Removes rule `id` and returns whether it was there; the other rules keep their ids and
    /// order. Costs the rules of its key, not the number of rules (see the module
    /// documentation); at half of `LINEAR_MAX_RULES` rules left, the index is dropped.
    pub fn remove(&mut self, id: RuleId) -> bool {
        let Some((rule, _)) = self.rules.remove(id) else {
            return false;
        };
        if let Some(cache) = &mut self.cache {
            cache.invalidate();
        }
        if self.rules.len() <= LINEAR_MAX_RULES / 2 {
            if self.index.take().is_some() {
                self.cache = None;
                self.rules.compact();
            }
        } else if let Some(index) = &mut self.index {
            let rules = &self.rules;
            index.remove(id.0, &rule, |i| rules.contains(RuleId(i)));
        }
        true
    }

    /// The verdict for a parsed frame. Allocation-free; beyond a few rules its cost does not grow
    /// with the number of rules (see the module documentation).
    #[inline]
    pub fn classify(&self, parsed: &Parsed) -> Verdict {
        match parsed {
            Parsed::Ip(ip) => {
                let flow = flow_id(&ip.tuple, self.flow_seed);
                let class = match (&self.index, &self.cache) {
                    (Some(index), Some(cache)) => {
                        cache.class_of(ip, flow, || index.find(ip).unwrap_or(self.default))
                    }
                    _ => self.class_of(ip),
                };
                Verdict::Shape {
                    class,
                    flow,
                    len: ip.wire_len,
                }
            }
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
                .find(|slot| slot.rule.0.matches(ip))
                .map_or(self.default, |slot| slot.rule.1),
            Some(index) => index.find(ip).unwrap_or(self.default),
        }
    }

    /// The rules, in first-match order.
    pub fn rules(&self) -> impl Iterator<Item = &(ClassRule, ClassId)> + '_ {
        self.rules.iter().map(|slot| &slot.rule)
    }

    /// The rules with their ids, in first-match order (increasing id).
    pub fn rules_with_ids(&self) -> impl Iterator<Item = (RuleId, &(ClassRule, ClassId))> + '_ {
        self.rules.iter().map(|slot| (slot.id, &slot.rule))
    }

    /// Rule `id` and its class, if present.
    pub fn rule(&self, id: RuleId) -> Option<&(ClassRule, ClassId)> {
        self.rules.get(id)
    }

    /// The number of rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether the classifier has no rule (every IP packet goes to the default class).
    pub fn is_empty(&self) -> bool {
        self.rules.len() == 0
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
