//! GSO/GRO super-frames: the virtio-net header a packet socket exchanges with `PACKET_VNET_HDR`
//! ([`VnetHdr`], [`VnetHdr::parse`], [`VnetHdr::to_bytes`], [`VnetError`]; packet(7), virtio 1.x
//! §5.1.6, in the CPU's byte order), the bytes a super-frame occupies on the wire ([`wire_bytes`],
//! [`RX_BYTES_FRAMING`]), cutting a TCP or UDP super-frame into pieces ([`SuperFrame`],
//! [`SuperFrame::piece`], as the kernel's `tcp_gso_segment` and `__udp_gso_segment` do), and
//! [`complete_partial_checksum`]. No allocation, no panic on any input (fuzzed in `tests/fuzz.rs`).
//! Why the byte order is native: ARCHITECTURE.md, "GSO/GRO super-frames".

mod cut;

pub use cut::{Piece, SuperFrame};

/// Bytes of `struct virtio_net_hdr` (uapi `linux/virtio_net.h`): the header `PACKET_VNET_HDR`
/// prepends to every frame.
pub const VNET_HDR_LEN: usize = 10;

/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`: the L4 checksum is to be completed over the bytes from
/// `csum_start`, the result stored at `csum_start + csum_offset` (uapi `linux/virtio_net.h`).
pub const FLAG_NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_F_DATA_VALID`: the checksum was already verified (uapi `linux/virtio_net.h`).
pub const FLAG_DATA_VALID: u8 = 2;
/// `VIRTIO_NET_HDR_GSO_ECN`: bit of `gso_type` set when the TCP super-frame carries CWR, which
/// only its first segment may keep (uapi `linux/virtio_net.h`).
pub const GSO_ECN: u8 = 0x80;

/// Bytes per frame that `/proc/net/dev` `rx_bytes` adds to a frame's own bytes (from the
/// destination MAC to the end of the payload): 0. The kernel counts `skb->len` at the MAC
/// header, without preamble, FCS or inter-frame gap; the daemon's rate on the wire
/// (`compare`'s `WindowSampler` reads the receiver veth's `rx_bytes`) and its per-class byte
/// counters (frame lengths) use the same convention.
pub const RX_BYTES_FRAMING: u32 = 0;
/// Bytes per frame a physical Ethernet link adds beyond the frame from its MAC header: preamble
/// and start delimiter 8, FCS 4, minimum inter-frame gap 12 (IEEE 802.3 clause 4.4.2, 3.1.1).
pub const ETHERNET_PHY_FRAMING: u32 = 24;

/// `gso_type` of a [`VnetHdr`] without its ECN bit (uapi `linux/virtio_net.h`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum GsoType {
    /// `VIRTIO_NET_HDR_GSO_NONE` (0): one frame, not to be segmented.
    #[default]
    None,
    /// `VIRTIO_NET_HDR_GSO_TCPV4` (1): TCP over IPv4, segments of `gso_size` payload bytes.
    TcpV4,
    /// `VIRTIO_NET_HDR_GSO_UDP` (3): UDP fragmentation offload (IP fragments).
    Udp,
    /// `VIRTIO_NET_HDR_GSO_TCPV6` (4): TCP over IPv6.
    TcpV6,
    /// `VIRTIO_NET_HDR_GSO_UDP_L4` (5): UDP segmentation (one datagram per segment).
    UdpL4,
}

impl GsoType {
    /// The `gso_type` value, without the ECN bit.
    pub const fn value(self) -> u8 {
        match self {
            GsoType::None => 0,
            GsoType::TcpV4 => 1,
            GsoType::Udp => 3,
            GsoType::TcpV6 => 4,
            GsoType::UdpL4 => 5,
        }
    }

    /// The type of a `gso_type` value without the ECN bit; `None` for values virtio does not
    /// define.
    pub const fn from_value(v: u8) -> Option<GsoType> {
        match v {
            0 => Some(GsoType::None),
            1 => Some(GsoType::TcpV4),
            3 => Some(GsoType::Udp),
            4 => Some(GsoType::TcpV6),
            5 => Some(GsoType::UdpL4),
            _ => None,
        }
    }
}

/// The 10-byte `struct virtio_net_hdr`, decoded. `Copy`, 12 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VnetHdr {
    /// [`FLAG_NEEDS_CSUM`] and/or [`FLAG_DATA_VALID`].
    pub flags: u8,
    /// Segmentation type.
    pub gso_type: GsoType,
    /// The [`GSO_ECN`] bit of `gso_type`.
    pub ecn: bool,
    /// Bytes of headers (Ethernet to the end of TCP), a hint. The packet socket fills it with the
    /// length of the skb's linear part (`skb_headlen`), which may include payload: never trust it
    /// as the header length ([`SuperFrame`] walks the headers itself).
    pub hdr_len: u16,
    /// Payload bytes per segment (the MSS); 0 when `gso_type` is `None`.
    pub gso_size: u16,
    /// With [`FLAG_NEEDS_CSUM`]: offset of the L4 header from the frame's first byte.
    pub csum_start: u16,
    /// With [`FLAG_NEEDS_CSUM`]: offset of the checksum field from `csum_start` (16 for TCP,
    /// 6 for UDP).
    pub csum_offset: u16,
}

/// Why bytes are not a [`VnetHdr`], or a header does not fit its frame. `Copy`; each has a name
/// for a counter label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum VnetError {
    /// Fewer than [`VNET_HDR_LEN`] bytes.
    #[error("virtio-net header of {len} bytes, {VNET_HDR_LEN} needed")]
    Short {
        /// Bytes available.
        len: usize,
    },
    /// A `gso_type` value (ECN bit removed) virtio does not define.
    #[error("unknown virtio-net gso_type {0}")]
    UnknownGsoType(u8),
    /// Flag bits other than NEEDS_CSUM and DATA_VALID.
    #[error("unknown virtio-net flags {0:#04x}")]
    UnknownFlags(u8),
    /// A segmentation type with `gso_size` 0.
    #[error("virtio-net gso_type set with gso_size 0")]
    ZeroGsoSize,
    /// NEEDS_CSUM with a checksum field (`csum_start + csum_offset + 2`) beyond the frame.
    #[error("virtio-net checksum field beyond the frame")]
    ChecksumOutOfFrame,
}

impl VnetError {
    /// Name for a counter label.
    pub const fn name(self) -> &'static str {
        match self {
            VnetError::Short { .. } => "short",
            VnetError::UnknownGsoType(_) => "unknown_gso_type",
            VnetError::UnknownFlags(_) => "unknown_flags",
            VnetError::ZeroGsoSize => "zero_gso_size",
            VnetError::ChecksumOutOfFrame => "checksum_out_of_frame",
        }
    }
}

impl VnetHdr {
    /// The all-zero header: a plain frame, checksum complete.
    pub const NONE: VnetHdr = VnetHdr {
        flags: 0,
        gso_type: GsoType::None,
        ecn: false,
        hdr_len: 0,
        gso_size: 0,
        csum_start: 0,
        csum_offset: 0,
    };

    /// Decodes the first [`VNET_HDR_LEN`] bytes of `bytes` (native-endian, see the module docs).
    /// Never panics.
    pub fn parse(bytes: &[u8]) -> Result<VnetHdr, VnetError> {
        let Some(b) = bytes.first_chunk::<VNET_HDR_LEN>() else {
            return Err(VnetError::Short { len: bytes.len() });
        };
        let flags = b[0];
        if flags & !(FLAG_NEEDS_CSUM | FLAG_DATA_VALID) != 0 {
            return Err(VnetError::UnknownFlags(flags));
        }
        let raw_type = b[1] & !GSO_ECN;
        let gso_type = GsoType::from_value(raw_type).ok_or(VnetError::UnknownGsoType(raw_type))?;
        let word = |i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
        let hdr = VnetHdr {
            flags,
            gso_type,
            ecn: b[1] & GSO_ECN != 0,
            hdr_len: word(2),
            gso_size: word(4),
            csum_start: word(6),
            csum_offset: word(8),
        };
        if hdr.is_gso() && hdr.gso_size == 0 {
            return Err(VnetError::ZeroGsoSize);
        }
        Ok(hdr)
    }

    /// The header as the 10 bytes a packet socket expects (native-endian).
    pub fn to_bytes(&self) -> [u8; VNET_HDR_LEN] {
        let mut b = [0u8; VNET_HDR_LEN];
        b[0] = self.flags;
        b[1] = self.gso_type.value() | if self.ecn { GSO_ECN } else { 0 };
        b[2..4].copy_from_slice(&self.hdr_len.to_ne_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_ne_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_ne_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_ne_bytes());
        b
    }

    /// True if the frame is to be segmented (`gso_type` other than `None`).
    pub const fn is_gso(&self) -> bool {
        !matches!(self.gso_type, GsoType::None)
    }

    /// True if the L4 checksum is partial ([`FLAG_NEEDS_CSUM`]): the checksum field holds the
    /// pseudo-header sum and the device (or [`complete_partial_checksum`]) finishes it.
    pub const fn needs_csum(&self) -> bool {
        self.flags & FLAG_NEEDS_CSUM != 0
    }

    /// Checks the header against the `frame_len`-byte frame it describes: a NEEDS_CSUM
    /// checksum field must lie inside the frame.
    pub fn check_frame(&self, frame_len: usize) -> Result<(), VnetError> {
        if self.needs_csum() {
            let end = usize::from(self.csum_start) + usize::from(self.csum_offset) + 2;
            if end > frame_len {
                return Err(VnetError::ChecksumOutOfFrame);
            }
        }
        Ok(())
    }
}

/// Why a frame cannot be handled as a GSO super-frame. `Copy`; each has a name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum GsoError {
    /// The header says `GsoType::None`: a plain frame (nothing to cut).
    #[error("not a GSO frame")]
    NotGso,
    /// A type this module does not segment (`Udp` fragmentation).
    #[error("unsupported gso_type {0:?}")]
    Unsupported(GsoType),
    /// `gso_size` 0 on a GSO frame.
    #[error("gso_size 0")]
    ZeroGsoSize,
    /// The Ethernet/VLAN header is truncated or has too many tags, or the EtherType is not the
    /// IP version the gso_type names.
    #[error("link layer does not lead to the IP version of the gso_type")]
    BadLinkLayer,
    /// The IP header is truncated, has a bad version/IHL, or a length beyond the frame.
    #[error("bad IP header")]
    BadIpHeader,
    /// An IPv4 fragment, or an IPv6 packet with extension headers (not cut here).
    #[error("IP fragment or IPv6 extension headers")]
    UnsupportedIp,
    /// The IP protocol is not the transport the gso_type names.
    #[error("transport protocol does not match the gso_type")]
    WrongTransport,
    /// The TCP header is truncated or its data offset is below 5 words.
    #[error("bad TCP or UDP header")]
    BadTransportHeader,
    /// A GSO frame without payload.
    #[error("GSO frame without payload")]
    NoPayload,
    /// [`SuperFrame::piece`]: `max_segments` 0, or a piece index past the last piece.
    #[error("piece out of range")]
    PieceOutOfRange,
    /// [`SuperFrame::piece`]: the scratch buffer is shorter than the headers.
    #[error("scratch buffer shorter than the headers")]
    ScratchTooSmall,
    /// [`SuperFrame::piece`]: the frame is not the one the `SuperFrame` was parsed from (shorter).
    #[error("frame shorter than the parsed super-frame")]
    FrameMismatch,
}

impl GsoError {
    /// Name for a counter label.
    pub const fn name(self) -> &'static str {
        match self {
            GsoError::NotGso => "not_gso",
            GsoError::Unsupported(_) => "unsupported_gso_type",
            GsoError::ZeroGsoSize => "zero_gso_size",
            GsoError::BadLinkLayer => "bad_link_layer",
            GsoError::BadIpHeader => "bad_ip_header",
            GsoError::UnsupportedIp => "unsupported_ip",
            GsoError::WrongTransport => "wrong_transport",
            GsoError::BadTransportHeader => "bad_transport_header",
            GsoError::NoPayload => "no_payload",
            GsoError::PieceOutOfRange => "piece_out_of_range",
            GsoError::ScratchTooSmall => "scratch_too_small",
            GsoError::FrameMismatch => "frame_mismatch",
        }
    }
}

/// Bytes the frame's segments occupy on the wire, counted as the receiver counts them.
///
/// Convention (the daemon's): a frame counts its bytes from the destination MAC address to the
/// end of its payload, VLAN tags included, plus `framing` bytes per frame. Pass
/// [`RX_BYTES_FRAMING`] (0) to match `/proc/net/dev` `rx_bytes` — what the daemon's rate on the
/// wire and class byte counters use — or [`ETHERNET_PHY_FRAMING`] for a physical link's
/// occupancy. No padding to the 60-byte Ethernet minimum is added (a TCP segment with its
/// headers is at least 54 bytes; veth does not pad).
///
/// A plain frame (`hdr.gso_type` `None`) is `frame.len() + framing`. A TCP or UDP (`UdpL4`) GSO
/// frame of payload `P`, headers `H` (Ethernet through the transport header, walked from the
/// frame, not taken from `hdr.hdr_len`) and segment size `S = gso_size` is `ceil(P / S)`
/// segments of `H + ` their payload each: `ceil(P/S) × (H + framing) + P`. Errors as
/// [`SuperFrame::parse`].
pub fn wire_bytes(frame: &[u8], hdr: &VnetHdr, framing: u32) -> Result<u64, GsoError> {
    if !hdr.is_gso() {
        return Ok(frame.len() as u64 + u64::from(framing));
    }
    Ok(SuperFrame::parse(frame, hdr)?.wire_bytes(framing))
}

/// Completes a partial (`NEEDS_CSUM`) checksum in place as a device does: the one's complement
/// of the one's-complement sum of `frame[csum_start..]`, the checksum field holding the
/// pseudo-header sum, written at `csum_start + csum_offset` (big-endian, like every Internet
/// checksum). Returns `false` (frame unchanged) if the field is not inside the frame. For UDP a
/// result of 0 is written as 0xFFFF (RFC 768).
pub fn complete_partial_checksum(frame: &mut [u8], csum_start: u16, csum_offset: u16) -> bool {
    let start = usize::from(csum_start);
    let at = start + usize::from(csum_offset);
    if at + 2 > frame.len() {
        return false;
    }
    let sum = !ones_complement_sum(&frame[start..], 0);
    let sum = if csum_offset == 6 && sum == 0 {
        0xffff
    } else {
        sum
    };
    frame[at..at + 2].copy_from_slice(&sum.to_be_bytes());
    true
}

/// The one's-complement sum (RFC 1071) of `bytes` as big-endian 16-bit words (an odd last byte
/// padded with zero), added to `initial`, folded to 16 bits.
pub(crate) fn ones_complement_sum(bytes: &[u8], initial: u32) -> u16 {
    let mut sum = u64::from(initial);
    let mut words = bytes.chunks_exact(2);
    for w in &mut words {
        sum += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        sum += u64::from(*last) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_named_errors() {
        let h = VnetHdr {
            flags: FLAG_NEEDS_CSUM,
            gso_type: GsoType::TcpV6,
            ecn: true,
            hdr_len: 86,
            gso_size: 1428,
            csum_start: 54,
            csum_offset: 16,
        };
        let b = h.to_bytes();
        assert_eq!(b[1], 0x84);
        assert_eq!(VnetHdr::parse(&b), Ok(h));
        assert_eq!(VnetHdr::parse(&[0; 10]), Ok(VnetHdr::NONE));
        assert_eq!(VnetHdr::parse(&b[..9]), Err(VnetError::Short { len: 9 }));
        let mut bad = b;
        bad[1] = 2;
        assert_eq!(VnetHdr::parse(&bad), Err(VnetError::UnknownGsoType(2)));
        bad[1] = 1;
        bad[0] = 4;
        assert_eq!(VnetHdr::parse(&bad), Err(VnetError::UnknownFlags(4)));
        bad[0] = 1;
        bad[4..6].copy_from_slice(&[0, 0]);
        assert_eq!(VnetHdr::parse(&bad), Err(VnetError::ZeroGsoSize));
        assert_eq!(h.check_frame(72), Ok(()));
        assert_eq!(h.check_frame(71), Err(VnetError::ChecksumOutOfFrame));
    }

    #[test]
    fn native_endian_like_the_kernel_on_this_host() {
        // On a little-endian host (every target this runs on in CI) gso_size 1448 = 0x05a8
        // is the bytes a8 05.
        let h = VnetHdr {
            gso_type: GsoType::TcpV4,
            gso_size: 1448,
            ..VnetHdr::NONE
        };
        let b = h.to_bytes();
        assert_eq!(&b[4..6], &1448u16.to_ne_bytes());
        #[cfg(target_endian = "little")]
        assert_eq!(&b[4..6], &[0xa8, 0x05]);
    }

    #[test]
    fn plain_frames_count_their_length_plus_framing() {
        let f = [0u8; 100];
        assert_eq!(wire_bytes(&f, &VnetHdr::NONE, RX_BYTES_FRAMING), Ok(100));
        assert_eq!(
            wire_bytes(&f, &VnetHdr::NONE, ETHERNET_PHY_FRAMING),
            Ok(124)
        );
    }

    #[test]
    fn completion_matches_rfc1071_example() {
        // RFC 1071 §3: words 0001 f203 f4f5 f6f7 sum to ddf2 (folded).
        assert_eq!(
            ones_complement_sum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7], 0),
            0xddf2
        );
        let mut f = [0u8; 4];
        assert!(!complete_partial_checksum(&mut f, 2, 2));
        assert!(complete_partial_checksum(&mut f, 0, 2));
        assert_eq!(f, [0, 0, 0xff, 0xff]);
    }
}
