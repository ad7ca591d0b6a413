//! Building frames in place: an Ethernet II + IPv4 + TCP frame of a given wire length, for the
//! simulator (which hands the daemon's engine real frames) and the benchmarks. Writes into the
//! caller's buffer, never allocates (CONTRIBUTING.md §5).

use crate::ecn::ipv4_header_checksum;
use crate::frame::{Ecn, ETHERTYPE_IPV4, MAX_FRAME_BYTES};

/// Bytes of the headers [`write_tcp_frame`] writes: Ethernet II (14), IPv4 without options (20),
/// TCP without options (20).
pub const TCP_FRAME_HEADERS: usize = 14 + 20 + 20;

/// The fields of a frame [`write_tcp_frame`] builds; the payload is left as the buffer holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpFrame {
    /// IPv4 source address.
    pub src_ip: [u8; 4],
    /// IPv4 destination address.
    pub dst_ip: [u8; 4],
    /// TCP source port.
    pub src_port: u16,
    /// TCP destination port.
    pub dst_port: u16,
    /// The ECN codepoint of the IPv4 header (DSCP 0).
    pub ecn: Ecn,
    /// TCP sequence number.
    pub seq: u32,
}

/// Why [`write_tcp_frame`] wrote nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// The buffer is shorter than the headers or longer than [`MAX_FRAME_BYTES`].
    #[error("a {len}-byte frame cannot hold Ethernet + IPv4 + TCP headers or exceeds {MAX_FRAME_BYTES} bytes")]
    Length {
        /// The buffer's length in bytes.
        len: usize,
    },
}

/// Writes an Ethernet II + IPv4 + TCP (ACK set) frame filling all of `frame`: its wire length is
/// `frame.len()`, the IPv4 total length the rest after the Ethernet header, the IPv4 header
/// checksum valid. The TCP checksum is left zero (the shaper does not read it).
///
/// ```
/// use metronome_packet::build::{write_tcp_frame, TcpFrame};
/// use metronome_packet::{parse, Ecn, Parsed};
/// let mut frame = [0u8; 1500];
/// let t = TcpFrame {
///     src_ip: [10, 0, 0, 1], dst_ip: [10, 0, 0, 2], src_port: 40_000, dst_port: 5201,
///     ecn: Ecn::Ect0, seq: 1,
/// };
/// write_tcp_frame(&mut frame, &t).unwrap();
/// let Parsed::Ip(ip) = parse(&frame) else { panic!() };
/// assert_eq!((ip.wire_len, ip.ecn), (1500, Ecn::Ect0));
/// ```
pub fn write_tcp_frame(frame: &mut [u8], t: &TcpFrame) -> Result<(), BuildError> {
    let len = frame.len();
    if !(TCP_FRAME_HEADERS..=MAX_FRAME_BYTES).contains(&len) {
        return Err(BuildError::Length { len });
    }
    frame[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    frame[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    frame[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
    let ip_len = (len - 14) as u16; // fits: len <= MAX_FRAME_BYTES
    let ip = &mut frame[14..34];
    ip.fill(0);
    ip[0] = 0x45;
    ip[1] = t.ecn as u8;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[6] = 0x40; // DF
    ip[8] = 64;
    ip[9] = 6; // TCP
    ip[12..16].copy_from_slice(&t.src_ip);
    ip[16..20].copy_from_slice(&t.dst_ip);
    let sum = ipv4_header_checksum(ip).unwrap_or(0);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    let tcp = &mut frame[34..54];
    tcp.fill(0);
    tcp[0..2].copy_from_slice(&t.src_port.to_be_bytes());
    tcp[2..4].copy_from_slice(&t.dst_port.to_be_bytes());
    tcp[4..8].copy_from_slice(&t.seq.to_be_bytes());
    tcp[12] = 5 << 4; // data offset: 5 words
    tcp[13] = 0x10; // ACK
    tcp[14..16].copy_from_slice(&65_535u16.to_be_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{parse, Parsed};

    fn spec(ecn: Ecn) -> TcpFrame {
        TcpFrame {
            src_ip: [10, 0, 0, 1],
            dst_ip: [10, 0, 0, 2],
            src_port: 7,
            dst_port: 9,
            ecn,
            seq: 3,
        }
    }

    #[test]
    fn every_length_from_headers_to_the_maximum_parses() {
        let mut buf = vec![0u8; MAX_FRAME_BYTES];
        for len in [TCP_FRAME_HEADERS, 60, 1500, 9000, MAX_FRAME_BYTES] {
            write_tcp_frame(&mut buf[..len], &spec(Ecn::NotEct)).expect("fits");
            let Parsed::Ip(ip) = parse(&buf[..len]) else {
                panic!("{len}: {:?}", parse(&buf[..len]))
            };
            assert_eq!(usize::from(ip.wire_len), len);
            assert_eq!((ip.tuple.src_port, ip.tuple.dst_port), (7, 9));
        }
    }

    #[test]
    fn too_short_or_too_long_is_refused() {
        let mut buf = vec![0u8; MAX_FRAME_BYTES + 1];
        for len in [0, TCP_FRAME_HEADERS - 1, MAX_FRAME_BYTES + 1] {
            assert_eq!(
                write_tcp_frame(&mut buf[..len], &spec(Ecn::Ect0)),
                Err(BuildError::Length { len })
            );
        }
    }
}
