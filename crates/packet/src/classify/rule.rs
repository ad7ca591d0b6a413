//! One classification rule ([`ClassRule`]): a conjunction of optional fields, and the reference
//! meaning of a match ([`ClassRule::matches`]) that the index of [`super::Classifier`] must
//! agree with.

use crate::frame::IpPacket;
use ipnet::IpNet;

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
            && port_matches(self.dst_port, ip, t.dst_port)
            && port_matches(self.src_port, ip, t.src_port)
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

/// Whether a packet's `port` satisfies an optional inclusive `range`: no range matches anything;
/// a range never matches a packet without ports.
#[inline]
pub(super) fn port_matches(range: Option<(u16, u16)>, ip: &IpPacket, port: u16) -> bool {
    range.is_none_or(|(lo, hi)| ip.has_ports && (lo..=hi).contains(&port))
}
