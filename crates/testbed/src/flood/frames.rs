//! The frames of the raw floods ([`super::RawFlood`]), built byte by byte from a deterministic
//! generator so that a run can be repeated: garbage the parser must refuse (bad IHL, bad total
//! length, VLAN stacks, a cut-off IPv6 extension chain, truncated headers) and non-IP frames
//! ([`garbage`]), and well-formed IPv4 TCP or UDP frames whose 5-tuple is new with every frame
//! ([`Spoof`]). [`classify_ipv4`] reads the protocol and destination port back, for the
//! receiver's tap ([`super::Tap`]).

use crate::netns::{Namespace, TopoError};
use std::net::Ipv4Addr;

/// A small deterministic random number generator (xorshift64*, Marsaglia 2003 with Vigna's
/// multiplier): enough to vary frames, not for anything that needs unpredictability.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (`n` > 0; modulo bias is of no concern here).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Fills `buf` with random bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            *b = self.next_u64() as u8;
        }
    }
}

/// Shortest garbage frame, bytes: the Ethernet minimum without FCS (IEEE 802.3).
const GARBAGE_MIN: usize = 64;
/// Longest garbage frame, bytes: a 1500-byte MTU frame without FCS.
const GARBAGE_MAX: usize = 1514;

/// One garbage frame from `src` to `dst` MAC: `(frame, malformed)`, `malformed` false for the
/// non-IP kind. The kinds rotate with `n` (six kinds, five of them malformed); the rest of each
/// frame is random, its length uniform in 64..=1514 bytes except the two kinds that are cut
/// short on purpose.
pub fn garbage(rng: &mut Rng, n: u64, dst: [u8; 6], src: [u8; 6]) -> (Vec<u8>, bool) {
    let len = GARBAGE_MIN + rng.below(GARBAGE_MAX - GARBAGE_MIN + 1);
    let mut f = vec![0u8; len];
    rng.fill(&mut f);
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    let malformed = match n % 6 {
        // IPv4, IHL 2 words.
        0 => {
            f[12..14].copy_from_slice(&[0x08, 0x00]);
            f[14] = 0x42;
            true
        }
        // IPv4, total length 9000 in a shorter frame.
        1 => {
            f[12..14].copy_from_slice(&[0x08, 0x00]);
            f[14] = 0x45;
            f[16..18].copy_from_slice(&9000u16.to_be_bytes());
            true
        }
        // Three stacked VLAN tags (the parser reads two), then IPv4 with a bad IHL.
        2 => {
            for t in 0..3 {
                let at = 12 + 4 * t;
                f[at..at + 2].copy_from_slice(&[0x81, 0x00]);
            }
            f[24..26].copy_from_slice(&[0x08, 0x00]);
            f[26] = 0x41;
            true
        }
        // IPv6: hop-by-hop, destination options, then a routing header claiming 1 608 bytes,
        // cut off by the frame.
        3 => {
            f.resize(14 + 40 + 24, 0);
            f[12..14].copy_from_slice(&[0x86, 0xdd]);
            f[14] = 0x60;
            f[18..20].copy_from_slice(&24u16.to_be_bytes()); // payload length: the frame's
            f[20] = 0; // hop-by-hop
            f[54] = 60; // then destination options
            f[55] = 0;
            f[62] = 43; // then routing
            f[63] = 0;
            f[70] = 17;
            f[71] = 200; // (200 + 1) * 8 bytes
            true
        }
        // IPv4 cut off after 10 bytes of its header.
        4 => {
            f.resize(24, 0);
            f[12..14].copy_from_slice(&[0x08, 0x00]);
            f[14] = 0x45;
            true
        }
        // Not IP: the local experimental EtherType 0x88b5 (IEEE 802).
        _ => {
            f[12..14].copy_from_slice(&[0x88, 0xb5]);
            false
        }
    };
    (f, malformed)
}

/// The transport of spoofed frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpoofProtocol {
    /// TCP segments with ACK and PSH set and no SYN: data of a connection nobody opened.
    Tcp,
    /// UDP datagrams.
    Udp,
}

/// First host number of the spoofed sources in the /24: `.1` and `.2` are the topology's
/// sender and receiver ([`crate::netns::Topology::bump_in_the_wire`]), so they are left out.
const FIRST_HOST: u32 = 3;
/// Spoofed hosts: `.3` to `.254` (`.255` is the subnet's broadcast address).
const HOSTS: u32 = 252;
/// First spoofed source port: the registered and dynamic ports, 1024 to 65535.
const FIRST_PORT: u32 = 1024;
/// Spoofed source ports.
const PORTS: u32 = 65536 - FIRST_PORT;
/// Distinct (source address, source port) pairs of a [`Spoof`]: 16 257 024.
pub const SPOOF_SPACE: u64 = HOSTS as u64 * PORTS as u64;
/// The step of the permutation of [`Spoof::tuple`]: a prime that divides none of 2, 3 and 7,
/// the prime factors of [`SPOOF_SPACE`] (2^12 · 3^4 · 7^2), so `n ↦ n · STEP + offset mod
/// SPOOF_SPACE` is a bijection. 2 654 435 761 is Knuth's multiplicative-hashing prime (close to
/// 2^32 / φ), which scatters consecutive `n` across the space.
const STEP: u64 = 2_654_435_761;

/// IPv4 TCP or UDP frames from ever-new 5-tuples: the `n`-th frame's source address and port are
/// the `n`-th element of a seeded permutation of the sender's /24 (hosts `.3` to `.254`) × ports
/// 1024..=65535, so the first [`SPOOF_SPACE`] frames all carry distinct 5-tuples by
/// construction; destination, destination port and protocol are fixed, so the frames match the
/// shaper's class for that destination and port.
///
/// The IPv4 header checksum is right (the shaper and the receiver read the header). The TCP or
/// UDP checksum is deliberately wrong unless `valid_l4_checksum`: the receiver's stack then drops
/// every frame at its checksum check (counted in its `TcpInCsumErrors` / `UdpInCsumErrors`)
/// instead of answering each with a RST or an ICMP port unreachable to an address nobody holds,
/// which would send an ARP request through the shaper's reverse path for each new source, a
/// load unrelated to what is measured. The shaper does not verify transport checksums of frames
/// that arrive complete, so its view is the same either way.
#[derive(Clone, Debug)]
pub struct Spoof {
    /// The sender's /24 (any address in it; the last octet is replaced).
    pub source_net: Ipv4Addr,
    /// The destination address (the receiver's).
    pub dst: Ipv4Addr,
    /// The destination port (the class's).
    pub dst_port: u16,
    /// TCP or UDP.
    pub protocol: SpoofProtocol,
    /// Frame length, bytes (Ethernet header included, no FCS); at least the headers' 54 (TCP)
    /// or 42 (UDP) bytes.
    pub frame_len: usize,
    /// Seeds the permutation's offset and the sequence numbers.
    pub seed: u64,
    /// Whether the TCP/UDP checksum is right (see the type's docs).
    pub valid_l4_checksum: bool,
}

/// Ethernet header, bytes.
const ETH: usize = 14;
/// IPv4 header without options, bytes.
const IPV4: usize = 20;
/// TCP header without options, bytes.
const TCP: usize = 20;
/// UDP header, bytes.
const UDP: usize = 8;

impl Spoof {
    /// The headers' length, bytes: the shortest frame this spoofer builds.
    pub fn headers_len(&self) -> usize {
        ETH + IPV4
            + match self.protocol {
                SpoofProtocol::Tcp => TCP,
                SpoofProtocol::Udp => UDP,
            }
    }

    /// The `n`-th frame's source address and port (distinct for distinct `n` below
    /// [`SPOOF_SPACE`]).
    pub fn tuple(&self, n: u64) -> (Ipv4Addr, u16) {
        let offset = Rng(self.seed | 1).next_u64() % SPOOF_SPACE;
        let i = ((n % SPOOF_SPACE) as u128 * STEP as u128 + offset as u128) % SPOOF_SPACE as u128;
        let i = i as u64;
        let host = FIRST_HOST + (i % HOSTS as u64) as u32;
        let port = FIRST_PORT + (i / HOSTS as u64) as u32;
        let [a, b, c, _] = self.source_net.octets();
        (Ipv4Addr::new(a, b, c, host as u8), port as u16)
    }

    /// Writes the `n`-th frame, from `src` to `dst` MAC, into `f` (resized to `frame_len`, or
    /// to the headers' length if that is longer).
    pub fn frame(&self, n: u64, dst: [u8; 6], src: [u8; 6], f: &mut Vec<u8>) {
        let len = self.frame_len.max(self.headers_len());
        f.clear();
        f.resize(len, 0);
        let (saddr, sport) = self.tuple(n);
        f[..6].copy_from_slice(&dst);
        f[6..12].copy_from_slice(&src);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let ip_len = (len - ETH) as u16;
        let proto = match self.protocol {
            SpoofProtocol::Tcp => 6,
            SpoofProtocol::Udp => 17,
        };
        let ip = &mut f[ETH..ETH + IPV4];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
        ip[4..6].copy_from_slice(&(n as u16).to_be_bytes());
        ip[6] = 0x40; // don't fragment
        ip[8] = 64;
        ip[9] = proto;
        ip[12..16].copy_from_slice(&saddr.octets());
        ip[16..20].copy_from_slice(&self.dst.octets());
        let sum = checksum(0, ip);
        ip[10..12].copy_from_slice(&sum.to_be_bytes());
        let l4_len = len - ETH - IPV4;
        let l4 = &mut f[ETH + IPV4..];
        l4[0..2].copy_from_slice(&sport.to_be_bytes());
        l4[2..4].copy_from_slice(&self.dst_port.to_be_bytes());
        let at = match self.protocol {
            SpoofProtocol::Tcp => {
                let mut rng = Rng(self.seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
                let (seq, ack) = (rng.next_u64() as u32, rng.next_u64() as u32);
                l4[4..8].copy_from_slice(&seq.to_be_bytes());
                l4[8..12].copy_from_slice(&ack.to_be_bytes());
                l4[12] = 5 << 4; // data offset: 5 words
                l4[13] = 0x18; // ACK | PSH
                l4[14..16].copy_from_slice(&512u16.to_be_bytes()); // window
                16
            }
            SpoofProtocol::Udp => {
                l4[4..6].copy_from_slice(&(l4_len as u16).to_be_bytes());
                6
            }
        };
        // The pseudo-header: source, destination, protocol, transport length (RFC 793 §3.1,
        // RFC 768).
        let mut pseudo = [0u8; 12];
        pseudo[0..4].copy_from_slice(&saddr.octets());
        pseudo[4..8].copy_from_slice(&self.dst.octets());
        pseudo[9] = proto;
        pseudo[10..12].copy_from_slice(&(l4_len as u16).to_be_bytes());
        let mut sum = checksum(sum_words(0, &pseudo), l4);
        if !self.valid_l4_checksum {
            // Any other value is wrong; 0 would mean "no checksum" for UDP.
            sum = if sum == 0x1234 { 0x4321 } else { 0x1234 };
        }
        l4[at..at + 2].copy_from_slice(&sum.to_be_bytes());
    }
}

/// Adds `bytes` as big-endian 16-bit words (an odd last byte padded with zero) to `acc`.
fn sum_words(acc: u32, bytes: &[u8]) -> u32 {
    let mut acc = acc;
    let mut chunks = bytes.chunks_exact(2);
    for w in &mut chunks {
        acc += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u32::from(*last) << 8;
    }
    acc
}

/// The Internet checksum (RFC 1071) of `bytes` after `acc` (a partial sum); the checksum field
/// in `bytes` must be zero.
fn checksum(acc: u32, bytes: &[u8]) -> u16 {
    let mut sum = sum_words(acc, bytes);
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The IPv4 protocol number and destination port of an untagged IPv4 TCP or UDP frame with a
/// plausible header (version 4, IHL at least 5 words, total length within the frame and
/// covering the ports), or `None` for anything else (non-IP, IPv6, VLAN-tagged, malformed,
/// fragments past the first).
pub fn classify_ipv4(frame: &[u8]) -> Option<(u8, u16)> {
    if frame.len() < ETH + IPV4 || frame[12..14] != [0x08, 0x00] {
        return None;
    }
    let ip = &frame[ETH..];
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    if ip[0] >> 4 != 4 || ihl < IPV4 || total < ihl + 4 || total > ip.len() {
        return None;
    }
    let fragment_offset = u16::from_be_bytes([ip[6], ip[7]]) & 0x1fff;
    let proto = ip[9];
    if fragment_offset != 0 || (proto != 6 && proto != 17) {
        return None;
    }
    Some((proto, u16::from_be_bytes([ip[ihl + 2], ip[ihl + 3]])))
}

/// The MAC address of `iface` in `ns` (from `ip -o link show`).
pub fn mac_of(ns: &Namespace, iface: &str) -> Result<[u8; 6], TopoError> {
    let shown = ns.link_mac(iface)?;
    let bad = || TopoError::Command {
        command: format!("ip -n {} -o link show dev {iface}", ns.name()),
        stderr: format!("no link/ether address: {shown:?}"),
    };
    let text = shown.as_deref().ok_or_else(bad)?;
    let mut mac = [0u8; 6];
    let mut parts = text.split(':');
    for m in mac.iter_mut() {
        let part = parts.next().ok_or_else(bad)?;
        *m = u8::from_str_radix(part, 16).map_err(|_| bad())?;
    }
    Ok(mac)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn spoof(protocol: SpoofProtocol, valid: bool) -> Spoof {
        Spoof {
            source_net: Ipv4Addr::new(10, 77, 5, 1),
            dst: Ipv4Addr::new(10, 77, 5, 2),
            dst_port: 6002,
            protocol,
            frame_len: 118,
            seed: 42,
            valid_l4_checksum: valid,
        }
    }

    #[test]
    fn a_million_spoofed_frames_carry_a_million_distinct_tuples_inside_the_subnet() {
        let s = spoof(SpoofProtocol::Tcp, false);
        let mut seen = HashSet::with_capacity(1 << 20);
        for n in 0..1_000_000 {
            let (addr, port) = s.tuple(n);
            let [a, b, c, d] = addr.octets();
            assert_eq!([a, b, c], [10, 77, 5]);
            assert!((3..=254).contains(&d) && port >= 1024, "{addr}:{port}");
            assert!(seen.insert((addr, port)), "{n}: {addr}:{port} again");
        }
    }

    /// The checksums a receiver computes: the IPv4 header's sums to 0xffff, and the transport
    /// one too when it is valid, not when it is meant to be wrong.
    #[test]
    fn spoofed_frames_parse_and_their_checksums_are_as_asked() {
        for protocol in [SpoofProtocol::Tcp, SpoofProtocol::Udp] {
            for valid in [true, false] {
                let s = spoof(protocol, valid);
                let mut f = Vec::new();
                s.frame(7, [2; 6], [4; 6], &mut f);
                assert_eq!(f.len(), 118);
                let proto = if protocol == SpoofProtocol::Tcp {
                    6
                } else {
                    17
                };
                assert_eq!(classify_ipv4(&f), Some((proto, 6002)));
                assert_eq!(checksum(0, &f[ETH..ETH + IPV4]), 0);
                let mut pseudo = [0u8; 12];
                pseudo[0..8].copy_from_slice(&f[ETH + 12..ETH + 20]);
                pseudo[9] = proto;
                pseudo[10..12].copy_from_slice(&((118 - 34) as u16).to_be_bytes());
                let l4 = checksum(sum_words(0, &pseudo), &f[ETH + IPV4..]);
                assert_eq!(l4 == 0, valid, "{protocol:?} valid {valid}");
            }
        }
    }

    #[test]
    fn garbage_rotates_its_kinds_and_none_classifies_as_tcp_or_udp() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut kinds = [0u32; 2];
        for n in 0..600 {
            let (f, malformed) = garbage(&mut rng, n, [2; 6], [4; 6]);
            assert!(f.len() >= 24 && f.len() <= GARBAGE_MAX);
            kinds[usize::from(malformed)] += 1;
            assert_eq!(classify_ipv4(&f), None, "{n}");
        }
        assert_eq!(kinds, [100, 500]);
    }
}
