//! Cutting a TCP or UDP (`UDP_L4`) GSO super-frame into pieces of at most `N` segments, without
//! copying payload, each piece's headers rewritten as `tcp_gso_segment`, `__udp_gso_segment` and
//! `inet_gso_segment` / `ipv6_gso_segment` rewrite each segment: lengths, IPv4 identification and
//! checksum, TCP sequence and flags (CWR first, FIN and PSH last), a partial checksum with
//! `NEEDS_CSUM` in the piece's [`VnetHdr`]. [`SuperFrame::piece`] writes the headers into the
//! caller's scratch and returns the payload as a range of the frame. Field by field:
//! ARCHITECTURE.md, "Cutting a super-frame".

use super::{GsoError, GsoType, VnetHdr, FLAG_NEEDS_CSUM};
use crate::checksum::{TCP_CHECKSUM_OFFSET, TCP_MIN_HEADER, UDP_CHECKSUM_OFFSET, UDP_HEADER};
use crate::ecn::ipv4_header_checksum;
use crate::frame::{link_layer, proto, ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use core::ops::Range;

/// IPv4 minimum header, bytes.
const IPV4_MIN_HEADER: usize = 20;
/// IPv6 fixed header, bytes.
const IPV6_HEADER: usize = 40;
/// TCP flag bits in byte 13 of the header (RFC 9293 §3.1, RFC 3168 §6.1).
const TCP_FIN: u8 = 0x01;
const TCP_PSH: u8 = 0x08;
const TCP_CWR: u8 = 0x80;

/// A TCP or UDP (`UdpL4`) GSO frame with its headers walked: where they are and what the pieces
/// are cut from. `Copy`; borrows nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SuperFrame {
    hdr: VnetHdr,
    /// Offset of the IP header.
    l3: usize,
    /// Offset of the transport header.
    l4: usize,
    /// Bytes of all headers, Ethernet through transport (`H`).
    header_len: usize,
    /// End of the IP packet in the frame (bytes after it are ignored).
    end: usize,
    ipv6: bool,
    tcp: bool,
}

/// One piece of a [`SuperFrame`]: its headers are `scratch[..header_len]`, its payload
/// `frame[payload]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    /// The virtio-net header to send the piece with.
    pub vnet: VnetHdr,
    /// Bytes of rewritten headers at the start of the scratch buffer.
    pub header_len: usize,
    /// The piece's payload, a range of the original frame.
    pub payload: Range<usize>,
    /// Segments the piece becomes on the wire.
    pub segments: u32,
}

impl Piece {
    /// Bytes the piece occupies on the wire: `segments × (header_len + framing) + payload`
    /// (the convention of [`super::wire_bytes`]).
    pub fn wire_bytes(&self, framing: u32) -> u64 {
        let per_segment = self.header_len as u64 + u64::from(framing);
        u64::from(self.segments) * per_segment + self.payload.len() as u64
    }
}

impl SuperFrame {
    /// Walks the headers of `frame`, which `hdr` describes: Ethernet (up to two VLAN tags), the
    /// IP version `hdr.gso_type` names (IPv4 with options, IPv6 without extension headers), TCP
    /// (or UDP for `UdpL4`). Never panics.
    pub fn parse(frame: &[u8], hdr: &VnetHdr) -> Result<SuperFrame, GsoError> {
        let (ipv6, tcp) = match hdr.gso_type {
            GsoType::None => return Err(GsoError::NotGso),
            GsoType::Udp => return Err(GsoError::Unsupported(GsoType::Udp)),
            GsoType::TcpV4 => (false, true),
            GsoType::TcpV6 => (true, true),
            GsoType::UdpL4 => (false, false),
        };
        if hdr.gso_size == 0 {
            return Err(GsoError::ZeroGsoSize);
        }
        let (ether_type, l3, _) = link_layer(frame).map_err(|_| GsoError::BadLinkLayer)?;
        let want = if ipv6 { ETHERTYPE_IPV6 } else { ETHERTYPE_IPV4 };
        // A UdpL4 frame behind VLAN tags: its version is read after the tags.
        let ipv6 = if tcp {
            ipv6
        } else {
            ether_type == ETHERTYPE_IPV6
        };
        if tcp && ether_type != want || !tcp && ether_type != ETHERTYPE_IPV4 && !ipv6 {
            return Err(GsoError::BadLinkLayer);
        }
        let ip = frame.get(l3..).ok_or(GsoError::BadIpHeader)?;
        let (l4, end, protocol) = if ipv6 {
            if ip.len() < IPV6_HEADER || ip[0] >> 4 != 6 {
                return Err(GsoError::BadIpHeader);
            }
            let payload = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
            (l3 + IPV6_HEADER, l3 + IPV6_HEADER + payload, ip[6])
        } else {
            if ip.len() < IPV4_MIN_HEADER || ip[0] >> 4 != 4 {
                return Err(GsoError::BadIpHeader);
            }
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
            if ihl < IPV4_MIN_HEADER || total < ihl {
                return Err(GsoError::BadIpHeader);
            }
            let fragment = u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff;
            if fragment != 0 {
                return Err(GsoError::UnsupportedIp);
            }
            (l3 + ihl, l3 + total, ip[9])
        };
        if end > frame.len() || l4 > end {
            return Err(GsoError::BadIpHeader);
        }
        let header_len = match (tcp, protocol) {
            (true, proto::TCP) => {
                let doff = frame
                    .get(l4 + 12)
                    .map(|b| usize::from(b >> 4) * 4)
                    .ok_or(GsoError::BadTransportHeader)?;
                if doff < TCP_MIN_HEADER {
                    return Err(GsoError::BadTransportHeader);
                }
                l4 + doff
            }
            (false, proto::UDP) => l4 + UDP_HEADER,
            (_, p) if ipv6 && is_ipv6_extension(p) => return Err(GsoError::UnsupportedIp),
            _ => return Err(GsoError::WrongTransport),
        };
        if header_len > end {
            return Err(GsoError::BadTransportHeader);
        }
        if header_len == end {
            return Err(GsoError::NoPayload);
        }
        Ok(SuperFrame {
            hdr: *hdr,
            l3,
            l4,
            header_len,
            end,
            ipv6,
            tcp,
        })
    }

    /// Bytes of headers each segment carries (`H`): Ethernet through the transport header.
    pub fn header_len(&self) -> usize {
        self.header_len
    }

    /// Payload bytes (`P`).
    pub fn payload_len(&self) -> usize {
        self.end - self.header_len
    }

    /// Offset of the transport header (the `csum_start` of every piece).
    pub fn transport_offset(&self) -> usize {
        self.l4
    }

    /// Payload bytes per segment (`S`, the header's `gso_size`, at least 1).
    pub fn gso_size(&self) -> usize {
        usize::from(self.hdr.gso_size)
    }

    /// Segments on the wire: `ceil(P / S)`, at least 1.
    pub fn segments(&self) -> u32 {
        // P < 64 KiB and S >= 1: fits a u32.
        self.payload_len().div_ceil(self.gso_size()) as u32
    }

    /// Bytes on the wire: `segments × (H + framing) + P` (see [`super::wire_bytes`]).
    pub fn wire_bytes(&self, framing: u32) -> u64 {
        let n = u64::from(self.segments());
        n * (self.header_len as u64 + u64::from(framing)) + self.payload_len() as u64
    }

    /// The most segments a piece may have for its bytes on the wire (see
    /// [`Piece::wire_bytes`]) to stay within `budget`: `floor(budget / (H + S + framing))`,
    /// between 1 (a segment is never cut further) and [`SuperFrame::segments`]. With
    /// `budget = 65 535` every piece fits the `u16` length of a `metronome_core::PacketRef`;
    /// a shaper may also bound it by about 1 ms of its rate, as `tcp_tso_autosize`
    /// (net/ipv4/tcp_output.c) bounds a sender's bursts.
    pub fn segments_within(&self, budget: u64, framing: u32) -> u32 {
        let per_segment = (self.header_len + self.gso_size()) as u64 + u64::from(framing);
        (budget / per_segment).clamp(1, u64::from(self.segments())) as u32
    }

    /// How many pieces of at most `max_segments` segments the frame is cut into (0 if
    /// `max_segments` is 0).
    pub fn pieces(&self, max_segments: u32) -> u32 {
        if max_segments == 0 {
            return 0;
        }
        self.segments().div_ceil(max_segments)
    }

    /// Piece `index` (from 0) of the cut into pieces of at most `max_segments` segments: writes
    /// its headers into `scratch[..H]` and returns them with the payload range of `frame`.
    /// `frame` must be the frame this was parsed from. Never panics, never allocates.
    pub fn piece(
        &self,
        frame: &[u8],
        index: u32,
        max_segments: u32,
        scratch: &mut [u8],
    ) -> Result<Piece, GsoError> {
        if index >= self.pieces(max_segments) {
            return Err(GsoError::PieceOutOfRange);
        }
        let h = self.header_len;
        let headers = frame.get(..h).ok_or(GsoError::FrameMismatch)?;
        if frame.len() < self.end {
            return Err(GsoError::FrameMismatch);
        }
        let out = scratch.get_mut(..h).ok_or(GsoError::ScratchTooSmall)?;
        out.copy_from_slice(headers);

        let s = self.gso_size();
        let first = index as usize * max_segments as usize;
        let segments = (self.segments() as usize - first).min(max_segments as usize);
        let start = h + first * s;
        let stop = (start + segments * s).min(self.end);
        let last = stop == self.end;
        let payload_len = stop - start;
        let l4_len = h - self.l4 + payload_len;

        // IP lengths, identification, checksum. All fit u16: at most the original's.
        let ip = &mut out[self.l3..self.l4];
        if self.ipv6 {
            let len = (h - self.l3 - IPV6_HEADER + payload_len) as u16;
            ip[4..6].copy_from_slice(&len.to_be_bytes());
        } else {
            let total = (h - self.l3 + payload_len) as u16;
            ip[2..4].copy_from_slice(&total.to_be_bytes());
            let id = u16::from_be_bytes([ip[4], ip[5]]).wrapping_add(first as u16);
            ip[4..6].copy_from_slice(&id.to_be_bytes());
            // The header was walked in `parse`: IHL >= 5 and inside `ip`.
            let sum = ipv4_header_checksum(ip).unwrap_or(0);
            ip[10..12].copy_from_slice(&sum.to_be_bytes());
        }

        // TCP sequence number and flags, or the UDP length; the pseudo-header checksum.
        let pseudo = self.pseudo_header_sum(frame, l4_len);
        let l4 = &mut out[self.l4..];
        let (cwr, csum_offset) = if self.tcp {
            let seq =
                u32::from_be_bytes([l4[4], l4[5], l4[6], l4[7]]).wrapping_add((first * s) as u32);
            l4[4..8].copy_from_slice(&seq.to_be_bytes());
            if index > 0 {
                l4[13] &= !TCP_CWR;
            }
            if !last {
                l4[13] &= !(TCP_FIN | TCP_PSH);
            }
            (l4[13] & TCP_CWR != 0, TCP_CHECKSUM_OFFSET)
        } else {
            // At most the original IP packet's length: fits.
            l4[4..6].copy_from_slice(&(l4_len as u16).to_be_bytes());
            (false, UDP_CHECKSUM_OFFSET)
        };
        l4[csum_offset..csum_offset + 2].copy_from_slice(&pseudo.to_be_bytes());

        let gso = segments > 1;
        let vnet = VnetHdr {
            flags: FLAG_NEEDS_CSUM,
            gso_type: if gso {
                self.hdr.gso_type
            } else {
                GsoType::None
            },
            ecn: gso && self.hdr.ecn && cwr,
            hdr_len: h as u16,
            gso_size: if gso { self.hdr.gso_size } else { 0 },
            csum_start: self.l4 as u16,
            csum_offset: csum_offset as u16, // 16 or 6
        };
        Ok(Piece {
            vnet,
            header_len: h,
            payload: start..stop,
            segments: segments as u32,
        })
    }

    /// The folded (not complemented) pseudo-header sum for a transport length of `l4_len`
    /// bytes: source and destination addresses, the protocol (6 or 17) and the length (RFC 9293
    /// §3.1, RFC 768; RFC 8200 §8.1 for IPv6). Read from `frame`'s IP header.
    fn pseudo_header_sum(&self, frame: &[u8], l4_len: usize) -> u16 {
        let addrs = if self.ipv6 {
            &frame[self.l3 + 8..self.l3 + 40]
        } else {
            &frame[self.l3 + 12..self.l3 + 20]
        };
        let protocol = if self.tcp { proto::TCP } else { proto::UDP };
        let proto_len = u32::from(protocol) + l4_len as u32;
        // Protocol and length add as 16-bit words; the length may exceed 16 bits only for a
        // jumbogram, which a frame of at most 64 KiB cannot hold.
        super::ones_complement_sum(addrs, proto_len)
    }
}

/// IPv6 extension header numbers (RFC 8200 §4.1; IANA "IPv6 Extension Header Types").
fn is_ipv6_extension(next: u8) -> bool {
    matches!(
        next,
        0 | 43 | 44 | 50 | 51 | 60 | 135 | 139 | 140 | 253 | 254
    )
}
