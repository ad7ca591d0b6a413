//! TCP and UDP checksum completion for frames received with the checksum still to be computed.
//!
//! A frame sent by a local kernel TCP (or UDP) sender over a veth carries `CHECKSUM_PARTIAL`: the
//! kernel left the transport checksum to the "hardware" and only wrote the pseudo-header sum into
//! the checksum field. AF_PACKET reports such frames with `TP_STATUS_CSUMNOTREADY`
//! (`metronome_io::RxFrame::csum_not_ready`). Forwarded as they are by a bump in the wire, they
//! reach the receiver with a wrong checksum and are discarded there. [`fix_l4_checksum`] computes
//! the full checksum (RFC 793 §3.1 for TCP, RFC 768 for UDP, RFC 8200 §8.1 for IPv6's
//! pseudo-header) and writes it into the frame, which is what the NIC would have done.
//!
//! The sum itself is etherparse's (`etherparse::checksum::Sum16BitWords`), the IP header walk
//! (IPv4 options, IPv6 extension headers) too (`etherparse::IpSlice`). No allocation; the frame is
//! only written when the function returns [`L4Checksum::Fixed`].

use crate::frame::{proto, Fragment, Parsed};
use etherparse::checksum::Sum16BitWords;
use etherparse::IpSlice;

/// Offset of the checksum field in a TCP header, in bytes (RFC 793 §3.1).
pub(crate) const TCP_CHECKSUM_OFFSET: usize = 16;
/// Offset of the checksum field in a UDP header, in bytes (RFC 768).
pub(crate) const UDP_CHECKSUM_OFFSET: usize = 6;
/// Shortest TCP header in bytes (data offset 5).
pub(crate) const TCP_MIN_HEADER: usize = 20;
/// UDP header length in bytes.
pub(crate) const UDP_HEADER: usize = 8;

/// What [`fix_l4_checksum`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L4Checksum {
    /// The TCP or UDP checksum was computed and written.
    Fixed,
    /// Nothing to do: not IP, not TCP/UDP, or a fragment (a fragment's checksum covers the
    /// whole datagram, which a single frame does not hold; senders do not offload those).
    NotApplicable,
    /// The headers could not be walked (truncated or inconsistent); the frame is unchanged.
    Malformed,
}

/// Computes the TCP or UDP checksum of the IPv4 or IPv6 packet in `frame` and writes it in place.
/// `parsed` is [`crate::parse`]`(frame)`. Never panics; leaves the frame unchanged unless it
/// returns [`L4Checksum::Fixed`].
pub fn fix_l4_checksum(frame: &mut [u8], parsed: &Parsed) -> L4Checksum {
    let Some(ip) = parsed.ip() else {
        return L4Checksum::NotApplicable;
    };
    let (checksum_offset, min_header) = match ip.tuple.protocol {
        proto::TCP => (TCP_CHECKSUM_OFFSET, TCP_MIN_HEADER),
        proto::UDP => (UDP_CHECKSUM_OFFSET, UDP_HEADER),
        _ => return L4Checksum::NotApplicable,
    };
    if ip.fragment != Fragment::Whole {
        return L4Checksum::NotApplicable;
    }
    let ip_offset = usize::from(ip.ip_offset);
    let Some(ip_bytes) = frame.get(ip_offset..) else {
        return L4Checksum::Malformed;
    };
    // Find the transport segment (start and length within the frame) and the pseudo-header sum.
    let (l4_start, l4_len, pseudo) = match IpSlice::from_slice(ip_bytes) {
        Ok(slice) => {
            let payload = slice.payload();
            if payload.fragmented || payload.ip_number.0 != ip.tuple.protocol {
                return L4Checksum::NotApplicable;
            }
            let start = payload.payload.as_ptr() as usize - frame.as_ptr() as usize;
            let len = payload.payload.len();
            let Ok(len32) = u32::try_from(len) else {
                return L4Checksum::Malformed;
            };
            let sum = match &slice {
                IpSlice::Ipv4(v4) => {
                    let h = v4.header();
                    Sum16BitWords::new()
                        .add_4bytes(h.source())
                        .add_4bytes(h.destination())
                }
                IpSlice::Ipv6(v6) => {
                    let h = v6.header();
                    Sum16BitWords::new()
                        .add_16bytes(h.source())
                        .add_16bytes(h.destination())
                }
            };
            let sum = sum
                .add_2bytes([0, ip.tuple.protocol])
                .add_4bytes(len32.to_be_bytes());
            (start, len, sum)
        }
        Err(_) => return L4Checksum::Malformed,
    };
    if l4_len < min_header {
        return L4Checksum::Malformed;
    }
    let Some(segment) = frame.get_mut(l4_start..l4_start + l4_len) else {
        return L4Checksum::Malformed;
    };
    segment[checksum_offset..checksum_offset + 2].copy_from_slice(&[0, 0]);
    let sum = pseudo.add_slice(segment);
    // `Sum16BitWords` adds native-endian words, so its result is written back native-endian.
    let value = if ip.tuple.protocol == proto::UDP {
        // RFC 768: a computed zero is sent as all ones (zero means "no checksum").
        sum.to_ones_complement_with_no_zero()
    } else {
        sum.ones_complement()
    };
    segment[checksum_offset..checksum_offset + 2].copy_from_slice(&value.to_ne_bytes());
    L4Checksum::Fixed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse;
    use etherparse::PacketBuilder;

    fn tcp_v4(payload: &[u8]) -> Vec<u8> {
        let b = PacketBuilder::ethernet2([1; 6], [2; 6])
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(40000, 5201, 7, 65535);
        let mut out = Vec::new();
        b.write(&mut out, payload).unwrap();
        out
    }

    fn udp_v6(payload: &[u8]) -> Vec<u8> {
        let b = PacketBuilder::ethernet2([1; 6], [2; 6])
            .ipv6([0x20; 16], [0x21; 16], 64)
            .udp(4000, 5001);
        let mut out = Vec::new();
        b.write(&mut out, payload).unwrap();
        out
    }

    fn tcp_v6_vlan(payload: &[u8]) -> Vec<u8> {
        let b = PacketBuilder::ethernet2([1; 6], [2; 6])
            .single_vlan(etherparse::VlanId::try_new(5).unwrap())
            .ipv6([0xfe; 16], [0x01; 16], 64)
            .tcp(1, 2, 3, 4);
        let mut out = Vec::new();
        b.write(&mut out, payload).unwrap();
        out
    }

    fn udp_v4(payload: &[u8]) -> Vec<u8> {
        let b = PacketBuilder::ethernet2([1; 6], [2; 6])
            .ipv4([192, 168, 0, 1], [192, 168, 0, 2], 64)
            .udp(53, 5353);
        let mut out = Vec::new();
        b.write(&mut out, payload).unwrap();
        out
    }

    /// Corrupts the checksum field the way CHECKSUM_PARTIAL leaves it (any value), fixes it and
    /// compares with etherparse's own builder output.
    fn check(good: Vec<u8>, l4_checksum_at: usize) {
        let mut frame = good.clone();
        frame[l4_checksum_at] ^= 0x5a;
        frame[l4_checksum_at + 1] ^= 0xa5;
        let parsed = parse(&frame);
        assert_eq!(fix_l4_checksum(&mut frame, &parsed), L4Checksum::Fixed);
        assert_eq!(frame, good);
    }

    #[test]
    fn tcp_ipv4_matches_etherparse() {
        for len in [0, 1, 2, 3, 100, 1460] {
            let payload: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            check(tcp_v4(&payload), 14 + 20 + 16);
        }
    }

    #[test]
    fn udp_ipv6_matches_etherparse() {
        for len in [0, 1, 17, 1400] {
            let payload: Vec<u8> = (0..len).map(|i| (i * 13 + 1) as u8).collect();
            check(udp_v6(&payload), 14 + 40 + 6);
        }
    }

    #[test]
    fn tcp_ipv6_behind_a_vlan_tag_and_udp_ipv4() {
        check(tcp_v6_vlan(b"hello world"), 18 + 40 + 16);
        check(udp_v4(b"odd"), 14 + 20 + 6);
    }

    #[test]
    fn etherparse_agrees_on_the_value() {
        let mut frame = tcp_v4(b"abcdef");
        frame[50] = 0;
        frame[51] = 0;
        let parsed = parse(&frame);
        assert_eq!(fix_l4_checksum(&mut frame, &parsed), L4Checksum::Fixed);
        let sliced = etherparse::SlicedPacket::from_ethernet(&frame).unwrap();
        let Some(etherparse::TransportSlice::Tcp(tcp)) = sliced.transport else {
            panic!("not tcp")
        };
        let expected = tcp
            .to_header()
            .calc_checksum_ipv4_raw([10, 0, 0, 1], [10, 0, 0, 2], tcp.payload())
            .unwrap();
        assert_eq!(tcp.checksum(), expected);
    }

    #[test]
    fn non_ip_and_truncated_frames_are_left_alone() {
        let mut arp = vec![0u8; 60];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        let before = arp.clone();
        let parsed = parse(&arp);
        assert_eq!(
            fix_l4_checksum(&mut arp, &parsed),
            L4Checksum::NotApplicable
        );
        assert_eq!(arp, before);

        let good = tcp_v4(b"xyz");
        let parsed = parse(&good);
        // A parse result that does not fit a shorter buffer: no panic, nothing written.
        let mut short = good[..30].to_vec();
        assert_eq!(fix_l4_checksum(&mut short, &parsed), L4Checksum::Malformed);
        assert_eq!(short, good[..30]);
        for cut in 0..good.len() {
            let mut f = good[..cut].to_vec();
            let p = parse(&f);
            let _ = fix_l4_checksum(&mut f, &p);
        }
    }
}
