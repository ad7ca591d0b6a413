//! Shapes and keys of the tuple-space index: which fields of a rule are compared exactly
//! ([`Shape`]), the packet's or the rule's values of those fields ([`Key`]), and what is left
//! to compare once a key matched ([`Entry`]: port ranges).
//!
//! Exact ports (a range `lo == hi`) are part of the shape and the key, so that rules differing
//! only in an exact port land on different keys of one shape; ranges stay in the entries.

use super::rule::{port_matches, ClassRule};
use crate::frame::IpPacket;
use ipnet::IpNet;
use metronome_core::ClassId;
use std::net::IpAddr;

/// The shape of a rule's address prefix: which family and how many bits, or none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum PrefixShape {
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

/// The port of a rule as part of its key: `Some(port)` for an exact port (`lo == hi`), `None`
/// for no port or a range (compared in the entry).
fn exact(range: Option<(u16, u16)>) -> Option<u16> {
    range.and_then(|(lo, hi)| (lo == hi).then_some(lo))
}

/// Which fields of a rule are compared exactly, and the prefix lengths: the rules of one shape
/// differ only in the values of those fields and in their port ranges.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Shape {
    dst: PrefixShape,
    src: PrefixShape,
    dscp: bool,
    protocol: bool,
    origin: bool,
    /// The destination port is one port (not a range).
    dst_port: bool,
    /// The source port is one port (not a range).
    src_port: bool,
}

impl Shape {
    pub(super) fn of(rule: &ClassRule) -> Self {
        Shape {
            dst: PrefixShape::of(rule.dst),
            src: PrefixShape::of(rule.src),
            dscp: rule.dscp.is_some(),
            protocol: rule.protocol.is_some(),
            origin: rule.origin.is_some(),
            dst_port: exact(rule.dst_port).is_some(),
            src_port: exact(rule.src_port).is_some(),
        }
    }

    /// The packet's key under this shape; `None` when an address family rules the shape out,
    /// or when the shape has an exact port and the packet has no ports.
    #[inline]
    pub(super) fn key(self, ip: &IpPacket) -> Option<Key> {
        if (self.dst_port || self.src_port) && !ip.has_ports {
            return None;
        }
        let t = &ip.tuple;
        Some(Key {
            dst: self.dst.masked(t.dst)?,
            src: self.src.masked(t.src)?,
            dscp: if self.dscp { ip.dscp } else { 0 },
            protocol: if self.protocol { t.protocol } else { 0 },
            origin: if self.origin { ip.origin } else { 0 },
            dst_port: if self.dst_port { t.dst_port } else { 0 },
            src_port: if self.src_port { t.src_port } else { 0 },
        })
    }
}

/// The fields a shape compares exactly, masked; absent fields are 0. Layout: two `u128`
/// addresses and 8 bytes of small fields, 48 bytes where `u128` is 16-byte aligned (x86-64);
/// hashed as five machine words ([`Hash`] below); the key of a map entry beside its rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Key {
    dst: u128,
    src: u128,
    dscp: u8,
    protocol: u8,
    origin: u16,
    dst_port: u16,
    src_port: u16,
}

impl std::hash::Hash for Key {
    /// One write of 40 bytes: the addresses and the small fields packed in one word. Keys are
    /// only compared with keys hashed the same way; one write of whole words is what keeps the
    /// hasher (SipHash) off its byte-by-byte path, which field-by-field writes (seven, of 1 to
    /// 16 bytes) took, about a third of a lookup's cost in a table of 100 000 keys.
    #[inline]
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let small = u64::from(self.dscp)
            | u64::from(self.protocol) << 8
            | u64::from(self.origin) << 16
            | u64::from(self.dst_port) << 32
            | u64::from(self.src_port) << 48;
        let mut bytes = [0u8; 40];
        bytes[..16].copy_from_slice(&self.dst.to_le_bytes());
        bytes[16..32].copy_from_slice(&self.src.to_le_bytes());
        bytes[32..].copy_from_slice(&small.to_le_bytes());
        state.write(&bytes);
    }
}

impl Key {
    /// The key of a satisfiable rule under its shape ([`Shape::of`]): the same value
    /// [`Shape::key`] gives every packet the rule's prefixes, DSCP, protocol, origin and exact
    /// ports match.
    pub(super) fn of_rule(rule: &ClassRule, shape: Shape) -> Self {
        let network = |net: Option<IpNet>, part: PrefixShape| {
            net.and_then(|n| part.masked(n.network())).unwrap_or(0)
        };
        Key {
            dst: network(rule.dst, shape.dst),
            src: network(rule.src, shape.src),
            dscp: rule.dscp.unwrap_or(0),
            protocol: rule.protocol.unwrap_or(0),
            origin: rule.origin.unwrap_or(0),
            dst_port: exact(rule.dst_port).unwrap_or(0),
            src_port: exact(rule.src_port).unwrap_or(0),
        }
    }
}

/// A rule under its key: what is left to compare once the key matched. Layout: the id, two
/// optional ranges of 6 bytes and the class: 20 bytes, with a class id of 16 or 32 bits.
#[derive(Clone, Debug)]
pub(super) struct Entry {
    /// The rule's id ([`super::RuleId`]): its place in first-match order.
    pub(super) id: u32,
    /// The destination port range, `None` when absent or exact (then in the key).
    dst_port: Option<(u16, u16)>,
    /// The source port range, `None` when absent or exact (then in the key).
    src_port: Option<(u16, u16)>,
    pub(super) class: ClassId,
}

impl Entry {
    pub(super) fn of_rule(id: u32, rule: &ClassRule, class: ClassId) -> Self {
        let range = |r: Option<(u16, u16)>| r.filter(|&(lo, hi)| lo != hi);
        Entry {
            id,
            dst_port: range(rule.dst_port),
            src_port: range(rule.src_port),
            class,
        }
    }

    /// Whether the packet's ports satisfy the rule's ranges, as in [`ClassRule::matches`].
    #[inline]
    pub(super) fn ports_match(&self, ip: &IpPacket) -> bool {
        port_matches(self.dst_port, ip, ip.tuple.dst_port)
            && port_matches(self.src_port, ip, ip.tuple.src_port)
    }
}
