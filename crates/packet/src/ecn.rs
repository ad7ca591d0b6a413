//! ECN marking: set Congestion Experienced in place, with the RFC 1624 checksum update.
//! [`mark_ce`] marks only ECT(0) and ECT(1) packets and leaves CE as it is (RFC 3168 §5); the IPv4
//! header checksum is updated by RFC 1624 §3 equation 3, which equals a full recomputation; IPv6
//! has no header checksum. The frame is re-read at the parse's offset, so a second call gives
//! `AlreadyCe`. The codepoints and the arithmetic: ARCHITECTURE.md, "ECN marking".

use crate::frame::Parsed;
use core::net::IpAddr;

/// The outcome of [`mark_ce`]. Each is counted by the caller (see [`crate::EcnCounters`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EcnMark {
    /// The packet was ECT(0) or ECT(1) and now carries CE.
    Marked,
    /// The packet is not ECN-capable; untouched (the caller may drop it instead).
    NotEct,
    /// The packet already carried CE; untouched.
    AlreadyCe,
    /// Nothing to mark: the frame is not IP, or does not hold the IP header the parse recorded.
    NotIp,
}

/// IPv4 header checksum offset, bytes (RFC 791 §3.1).
const IPV4_CHECKSUM_OFFSET: usize = 10;
/// IPv4 minimum header, bytes (IHL = 5).
const IPV4_MIN_HEADER_BYTES: usize = 20;
/// IPv6 fixed header, bytes.
const IPV6_HEADER_BYTES: usize = 40;
/// CE in the low two bits of the TOS byte.
const CE: u8 = 0b11;

/// Sets CE on the IP packet `parsed` describes in `frame`, if it is ECN-capable.
///
/// `parsed` must come from [`crate::parse`] of this frame; a mismatched frame (shorter, or with
/// another IP version at the recorded offset) gives [`EcnMark::NotIp`], never a panic.
/// [`crate::IpPacket::ecn`] keeps the value read at parse time.
pub fn mark_ce(frame: &mut [u8], parsed: &Parsed) -> EcnMark {
    let Some(ip) = parsed.ip() else {
        return EcnMark::NotIp;
    };
    let Some(header) = frame.get_mut(usize::from(ip.ip_offset)..) else {
        return EcnMark::NotIp;
    };
    match ip.tuple.src {
        IpAddr::V4(_) => mark_ipv4(header),
        IpAddr::V6(_) => mark_ipv6(header),
    }
}

fn mark_ipv4(header: &mut [u8]) -> EcnMark {
    if header.len() < IPV4_MIN_HEADER_BYTES || header[0] >> 4 != 4 {
        return EcnMark::NotIp;
    }
    let tos = header[1];
    match tos & CE {
        0b00 => EcnMark::NotEct,
        CE => EcnMark::AlreadyCe,
        _ => {
            let old_word = u16::from_be_bytes([header[0], tos]);
            header[1] = tos | CE;
            let new_word = u16::from_be_bytes([header[0], header[1]]);
            let at = IPV4_CHECKSUM_OFFSET;
            let old_sum = u16::from_be_bytes([header[at], header[at + 1]]);
            let new_sum = checksum_update(old_sum, old_word, new_word);
            header[at..at + 2].copy_from_slice(&new_sum.to_be_bytes());
            EcnMark::Marked
        }
    }
}

fn mark_ipv6(header: &mut [u8]) -> EcnMark {
    if header.len() < IPV6_HEADER_BYTES || header[0] >> 4 != 6 {
        return EcnMark::NotIp;
    }
    // Traffic class = low nibble of byte 0, high nibble of byte 1; ECN = bits 5..4 of byte 1.
    match (header[1] >> 4) & CE {
        0b00 => EcnMark::NotEct,
        CE => EcnMark::AlreadyCe,
        _ => {
            header[1] |= CE << 4;
            EcnMark::Marked
        }
    }
}

/// The IPv4 header checksum after one 16-bit header word changes from `old_word` to
/// `new_word`: RFC 1624 §3, equation 3, `HC' = ~(~HC + ~m + m')`, one's-complement sums.
///
/// ```
/// use metronome_packet::checksum_update;
/// // RFC 1624 §4's example: HC = 0xDD2F, m = 0x5555 -> m' = 0x3285 gives HC' = 0x0000.
/// assert_eq!(checksum_update(0xDD2F, 0x5555, 0x3285), 0x0000);
/// ```
#[inline]
pub fn checksum_update(checksum: u16, old_word: u16, new_word: u16) -> u16 {
    let sum = u32::from(!checksum) + u32::from(!old_word) + u32::from(new_word);
    !fold_ones_complement(sum)
}

/// The IPv4 header checksum of `header` computed from scratch (RFC 791 §3.1: the one's
/// complement of the one's-complement sum of the header's 16-bit words, the checksum field
/// taken as zero). `None` if `header` is shorter than its IHL says or than 20 bytes.
pub fn ipv4_header_checksum(header: &[u8]) -> Option<u16> {
    let ihl_bytes = usize::from(*header.first()? & 0x0f) * 4;
    if ihl_bytes < IPV4_MIN_HEADER_BYTES {
        return None;
    }
    let words = header.get(..ihl_bytes)?.chunks_exact(2).enumerate();
    let sum = words
        .filter(|&(i, _)| i != IPV4_CHECKSUM_OFFSET / 2)
        .map(|(_, w)| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum::<u32>(); // at most 30 words of 0xFFFF: no overflow
    Some(!fold_ones_complement(sum))
}

/// Folds the carries of a 32-bit sum back into 16 bits (end-around carry).
#[inline]
fn fold_ones_complement(mut sum: u32) -> u16 {
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    sum as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plausible IPv4 header with the given TOS, checksum filled in.
    fn header(tos: u8, seed: u16) -> [u8; 20] {
        let mut h = [
            0x45, tos, 0x05, 0xdc, 0x1c, 0x46, 0x40, 0x00, 0x40, 0x06, 0, 0, 0xc0, 0xa8, 0x00,
            0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        h[4..6].copy_from_slice(&seed.to_be_bytes());
        let sum = ipv4_header_checksum(&h).unwrap();
        h[10..12].copy_from_slice(&sum.to_be_bytes());
        h
    }

    #[test]
    fn rfc1624_example() {
        assert_eq!(checksum_update(0xDD2F, 0x5555, 0x3285), 0x0000);
    }

    #[test]
    fn incremental_update_equals_recomputation_for_every_tos_and_many_headers() {
        for seed in (0..=u16::MAX).step_by(97) {
            for tos in 0..=u8::MAX {
                let mut h = header(tos, seed);
                let before = h;
                let outcome = mark_ipv4(&mut h);
                let expected = match tos & 0b11 {
                    0b00 => EcnMark::NotEct,
                    0b11 => EcnMark::AlreadyCe,
                    _ => EcnMark::Marked,
                };
                assert_eq!(outcome, expected);
                if outcome == EcnMark::Marked {
                    assert_eq!(h[1], tos | 0b11);
                    let recomputed = ipv4_header_checksum(&h).unwrap();
                    assert_eq!(u16::from_be_bytes([h[10], h[11]]), recomputed);
                } else {
                    assert_eq!(h, before);
                }
            }
        }
    }

    #[test]
    fn ipv6_mark_sets_only_the_ecn_bits() {
        for tc in 0..=u8::MAX {
            let mut h = [0u8; 40];
            h[0] = 0x60 | (tc >> 4);
            h[1] = (tc << 4) | 0x0a; // flow label bits below must survive
            let outcome = mark_ipv6(&mut h);
            let new_tc = (h[0] << 4) | (h[1] >> 4);
            match tc & 0b11 {
                0b00 | 0b11 => assert_eq!(new_tc, tc),
                _ => {
                    assert_eq!(outcome, EcnMark::Marked);
                    assert_eq!(new_tc, tc | 0b11);
                }
            }
            assert_eq!(h[1] & 0x0f, 0x0a);
        }
    }

    #[test]
    fn short_or_mismatched_headers_are_not_ip() {
        assert_eq!(mark_ipv4(&mut [0x45, 0x02]), EcnMark::NotIp);
        assert_eq!(mark_ipv4(&mut [0x65; 20]), EcnMark::NotIp);
        assert_eq!(mark_ipv6(&mut [0x60; 39]), EcnMark::NotIp);
        assert_eq!(mark_ipv6(&mut [0x45; 40]), EcnMark::NotIp);
        assert_eq!(ipv4_header_checksum(&[0x46; 20]), None);
        assert_eq!(ipv4_header_checksum(&[0x44; 20]), None);
    }
}
