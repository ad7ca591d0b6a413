//! Random rules and packets for the classifier's tests (`tests/classify.rs`,
//! `tests/classify_index.rs`): addresses near a few bases so that prefixes and packets meet,
//! every rule field, packets of both families with and without ports, and the reference model,
//! a linear first-match scan.

use super::*;
use metronome_core::ClassId;
use metronome_packet::{parse, ClassRule, IpPacket, Parsed};
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The reference model: the first rule, in order, that matches; else the default.
pub fn first_match(rules: &[(ClassRule, ClassId)], default: ClassId, ip: &IpPacket) -> ClassId {
    rules
        .iter()
        .find(|(rule, _)| rule.matches(ip))
        .map_or(default, |&(_, class)| class)
}

pub fn ip_of(frame: &[u8]) -> IpPacket {
    match parse(frame) {
        Parsed::Ip(ip) => ip,
        other => panic!("expected an IP packet, got {other:?}"),
    }
}

/// An address of a random case: one of a few bases of the family, its low `128 - keep` bits
/// (IPv6) or `32 - keep` bits (IPv4) replaced by noise, so that packets and prefixes land close
/// to one another.
#[derive(Clone, Copy, Debug)]
pub struct Addr {
    pub base: usize,
    pub keep: u32,
    pub noise: u128,
}

/// Few bases, close to each other, so that prefixes of one base contain addresses of another.
pub const V4_BASES: [u32; 3] = [0x0a01_0200, 0x0a01_0300, 0xc0a8_0001];
pub const V6_BASES: [u128; 3] = [
    0x2001_0db8_0000_0000_0000_0000_0000_0100,
    0x2001_0db8_0000_0001_0000_0000_0000_0100,
    0xfd00_0000_0000_0000_0000_0000_0000_0001,
];

impl Addr {
    pub fn v4(self) -> Ipv4Addr {
        let keep_mask = u32::MAX.checked_shl(32 - self.keep.min(32)).unwrap_or(0);
        Ipv4Addr::from((V4_BASES[self.base] & keep_mask) | (self.noise as u32 & !keep_mask))
    }

    pub fn v6(self) -> Ipv6Addr {
        let keep_mask = u128::MAX.checked_shl(128 - self.keep).unwrap_or(0);
        Ipv6Addr::from((V6_BASES[self.base] & keep_mask) | (self.noise & !keep_mask))
    }
}

pub fn addr() -> impl Strategy<Value = Addr> {
    // Mostly the exact base or noise in its last bits; sometimes anything.
    let keep = prop_oneof![3 => Just(128u32), 4 => 100u32..=128, 2 => 0u32..=128];
    (0..V4_BASES.len(), keep, any::<u128>()).prop_map(|(base, keep, noise)| Addr {
        base,
        keep,
        noise,
    })
}

/// A prefix of either family: an address and a length, /0 and full length included.
pub fn prefix() -> impl Strategy<Value = ipnet::IpNet> {
    let len = prop_oneof![1 => Just(0u8), 2 => Just(u8::MAX), 6 => 0u8..=128];
    (any::<bool>(), addr(), len).prop_map(|(v6, a, len)| {
        if v6 {
            let len = if len == u8::MAX { 128 } else { len.min(128) };
            ipnet::IpNet::new(IpAddr::V6(a.v6()), len).unwrap()
        } else {
            let len = if len == u8::MAX { 32 } else { len % 33 };
            ipnet::IpNet::new(IpAddr::V4(a.v4()), len).unwrap()
        }
    })
}

/// A port range over few ports, so that packets hit them; sometimes empty (unsatisfiable).
pub fn ports() -> impl Strategy<Value = Option<(u16, u16)>> {
    prop_oneof![
        3 => Just(None),
        2 => (0u16..6, 0u16..6).prop_map(Some),
        1 => Just(Some((0, u16::MAX))),
    ]
}

pub fn rule() -> impl Strategy<Value = ClassRule> {
    let dscp =
        prop_oneof![3 => Just(None), 3 => (0u8..3).prop_map(Some), 1 => (0u8..=70).prop_map(Some)];
    let protocols = prop::sample::select(vec![1u8, 6, 17, 58]);
    let protocol = prop_oneof![2 => Just(None), 1 => protocols.prop_map(Some)];
    let dst = prop_oneof![1 => Just(None), 2 => prefix().prop_map(Some)];
    let src = prop_oneof![2 => Just(None), 1 => prefix().prop_map(Some)];
    let origin = prop_oneof![3 => Just(None), 2 => (0u16..3).prop_map(Some)];
    (dst, src, dscp, protocol, ports(), ports(), origin).prop_map(
        |(dst, src, dscp, protocol, dst_port, src_port, origin)| ClassRule {
            dst,
            src,
            dscp,
            protocol,
            dst_port,
            src_port,
            origin,
        },
    )
}

/// A host rule: a full-length destination prefix, sometimes a port range, sometimes an origin.
/// Many of them share a shape, with more keys than a shape compares one by one.
pub fn host_rule() -> impl Strategy<Value = ClassRule> {
    let origin = prop_oneof![2 => Just(None), 1 => (0u16..3).prop_map(Some)];
    (any::<bool>(), addr(), ports(), origin).prop_map(|(v6, a, dst_port, origin)| ClassRule {
        dst: Some(if v6 {
            ipnet::IpNet::new(IpAddr::V6(a.v6()), 128).unwrap()
        } else {
            ipnet::IpNet::new(IpAddr::V4(a.v4()), 32).unwrap()
        }),
        dst_port,
        origin,
        ..Default::default()
    })
}

/// Rules with some duplicates: an entry `Err(k)` repeats the earlier rule `k` modulo its index.
pub fn rules() -> impl Strategy<Value = Vec<(ClassRule, ClassId)>> {
    let entry = prop_oneof![
        6 => rule().prop_map(Ok),
        3 => host_rule().prop_map(Ok),
        1 => any::<usize>().prop_map(Err),
    ];
    prop::collection::vec(entry, 0..=200).prop_map(|entries| {
        let mut rules: Vec<(ClassRule, ClassId)> = Vec::with_capacity(entries.len());
        for (i, entry) in entries.into_iter().enumerate() {
            let rule = match entry {
                Ok(rule) => rule,
                Err(k) if i > 0 => rules[k % i].0.clone(),
                Err(_) => ClassRule::default(),
            };
            rules.push((rule, ClassId((1 + i) as _)));
        }
        rules
    })
}

/// A packet of either family near the bases: TCP or UDP with ports, ICMP or an IPv4 later
/// fragment without; with the origin tag its port gave it (few values, so that rules hit them).
#[derive(Clone, Debug)]
pub struct Packet {
    pub v6: bool,
    pub src: Addr,
    pub dst: Addr,
    pub l4: u8,
    pub sport: u16,
    pub dport: u16,
    pub dscp: u8,
    pub origin: u16,
}

impl Packet {
    /// The parsed packet, its origin set as the daemon sets it after parsing.
    pub fn ip(&self) -> IpPacket {
        let mut ip = ip_of(&self.frame());
        ip.origin = self.origin;
        ip
    }

    pub fn frame(&self) -> Vec<u8> {
        let l4 = [L4::Tcp, L4::Udp, L4::Icmp, L4::Tcp][usize::from(self.l4)];
        let tos = self.dscp << 2;
        if self.v6 {
            let (src, dst) = (self.src.v6().octets(), self.dst.v6().octets());
            v6(src, dst, l4, self.sport, self.dport, tos)
        } else {
            let (src, dst) = (self.src.v4().octets(), self.dst.v4().octets());
            let frame = v4_len(src, dst, l4, self.sport, self.dport, tos, 64);
            if self.l4 == 3 {
                fragment_v4(&frame, 5, false, 40)
            } else {
                frame
            }
        }
    }
}

pub fn packet() -> impl Strategy<Value = Packet> {
    let dscp = prop_oneof![3 => 0u8..3, 1 => 0u8..64];
    (
        any::<bool>(),
        addr(),
        addr(),
        0u8..4,
        0u16..7,
        0u16..7,
        dscp,
        0u16..3,
    )
        .prop_map(|(v6, src, dst, l4, sport, dport, dscp, origin)| Packet {
            v6,
            src,
            dst,
            l4,
            sport,
            dport,
            dscp,
            origin,
        })
}
