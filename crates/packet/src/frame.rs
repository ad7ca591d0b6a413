//! Frame parsing: Ethernet II, IEEE 802.1Q / 802.1ad VLAN tags (up to [`MAX_VLAN_TAGS`]), IPv4 (RFC
//! 791, fragments without ports after the first), IPv6 (RFC 8200, extension headers), TCP, UDP,
//! ICMP and ICMPv6 (RFC 9293, 768, 792, 4443). Other EtherTypes are [`Parsed::NonIp`], other IP
//! protocols are shaped with ports 0, and anything that does not fit is [`Malformed`] with a named
//! reason. The link layer and ports are read by hand, the IP headers through etherparse; nothing
//! allocates and no input panics. The rules of each layer and the known limits: ARCHITECTURE.md,
//! "Frame parsing".

use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use etherparse::err::{ipv4 as ipv4_err, ipv6 as ipv6_err, Layer};
use etherparse::{Ipv4HeaderSlice, Ipv6ExtensionSlice, Ipv6Slice};

/// Largest frame length a parsed frame's `wire_len` holds, in bytes: the IP length limit, and
/// what a [`metronome_core::PacketRef`]'s `u16` length holds. A GSO/GRO super-frame may be
/// longer (up to [`MAX_SUPER_FRAME_BYTES`]); its `wire_len` is then this value, and the shaper
/// charges it the bytes of its segments ([`crate::gso::wire_bytes`]), not `wire_len`.
pub const MAX_FRAME_BYTES: usize = u16::MAX as usize;
/// Largest IP packet, header included, in bytes: the 16-bit IPv4 total length (RFC 791), and
/// the 16-bit IPv6 payload length plus the 40-byte header less what GRO allows (the kernel's
/// default `gro_max_size` of 65 536 bounds a GRO packet to 65 535 bytes from its IP header,
/// `skb_gro_receive` in net/core/gro.c). A longer packet is a BIG TCP one (IPv4 total length 0,
/// IPv6 payload length 0): [`Malformed::Oversized`].
pub const MAX_IP_PACKET_BYTES: usize = u16::MAX as usize;
/// Most VLAN tags read before the EtherType (one 802.1Q tag, or an 802.1ad S-tag and a C-tag).
pub const MAX_VLAN_TAGS: usize = 2;
/// Largest frame accepted, in bytes: an IP packet of [`MAX_IP_PACKET_BYTES`] behind an Ethernet
/// header and [`MAX_VLAN_TAGS`] tags, 65 557. A GRO frame of a 65 535-byte IPv4 packet is
/// 65 549 bytes. Longer frames are [`Malformed::Oversized`].
pub const MAX_SUPER_FRAME_BYTES: usize =
    MAX_IP_PACKET_BYTES + ETHERNET_HEADER_BYTES + MAX_VLAN_TAGS * VLAN_TAG_BYTES;
/// Ethernet II header: two MAC addresses (6 bytes each) and the EtherType (2 bytes).
const ETHERNET_HEADER_BYTES: usize = 14;
/// One VLAN tag: TPID already consumed as the previous EtherType, then TCI (2) and EtherType (2).
const VLAN_TAG_BYTES: usize = 4;
/// IEEE 802.1Q customer tag TPID.
const TPID_8021Q: u16 = 0x8100;
/// IEEE 802.1ad service tag TPID.
const TPID_8021AD: u16 = 0x88A8;
/// Pre-standard QinQ TPID (Cisco/Juniper legacy).
const TPID_QINQ_LEGACY: u16 = 0x9100;
/// EtherType of IPv4 (IANA).
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of IPv6 (IANA).
pub const ETHERTYPE_IPV6: u16 = 0x86DD;
/// IP protocol numbers (IANA "Assigned Internet Protocol Numbers").
pub mod proto {
    /// ICMP for IPv4.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// ICMP for IPv6.
    pub const ICMPV6: u8 = 58;
}
/// Fixed TCP header, bytes (RFC 9293 §3.1: data offset ≥ 5 words).
const TCP_MIN_HEADER_BYTES: usize = 20;
/// UDP header, bytes (RFC 768).
const UDP_HEADER_BYTES: usize = 8;
/// ICMP and ICMPv6 header: type, code, checksum and 4 bytes of rest-of-header (RFC 792, 4443).
const ICMP_HEADER_BYTES: usize = 8;

/// What [`parse`] found in a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// Not IP (ARP, LLDP, ...): pass unshaped.
    NonIp(NonIp),
    /// An IPv4 or IPv6 packet.
    Ip(IpPacket),
    /// A frame that cannot be read, with the reason.
    Malformed(Malformed),
}

impl Parsed {
    /// The IP packet, if this is one.
    pub fn ip(&self) -> Option<&IpPacket> {
        match self {
            Parsed::Ip(ip) => Some(ip),
            _ => None,
        }
    }
}

/// A non-IP frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NonIp {
    /// The EtherType after any VLAN tags (a value below 0x0600 is an 802.3 length).
    pub ether_type: u16,
    /// Bytes of the whole frame.
    pub wire_len: u16,
}

/// The fields of an IP packet the shaper needs. `Copy`, [`IP_PACKET_BYTES`] bytes, no borrow of
/// the frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpPacket {
    /// Addresses, protocol and ports (ports 0 when absent, see [`IpPacket::has_ports`]).
    pub tuple: FiveTuple,
    /// Differentiated Services Code Point, the upper 6 bits of the TOS / Traffic Class byte.
    pub dscp: u8,
    /// The ECN field at parse time (RFC 3168 §5).
    pub ecn: Ecn,
    /// Byte offset of the IP header in the frame (14, 18 or 22).
    pub ip_offset: u16,
    /// Bytes of the whole frame, Ethernet header and padding included: what the wire carries.
    pub wire_len: u16,
    /// Whether, and which, fragment this is.
    pub fragment: Fragment,
    /// True when the ports were read from a TCP or UDP header.
    pub has_ports: bool,
    /// VLAN tags before the IP header (0, 1 or 2).
    pub vlan_tags: u8,
    /// Where the packet came from, as the receiving port tells it: 0 for no known origin, else
    /// an origin tag the caller chose (the daemon's attach mode numbers the workload interfaces
    /// or cgroups it captures from). [`parse`] sets 0, since the frame does not carry it; the
    /// caller sets it after parsing, before classifying ([`crate::ClassRule::origin`]).
    pub origin: u16,
}

/// A flow's 5-tuple. Ports are 0 when the packet has none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FiveTuple {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// IP protocol number of the transport (after IPv6 extension headers).
    pub protocol: u8,
    /// Source port (TCP, UDP), else 0.
    pub src_port: u16,
    /// Destination port (TCP, UDP), else 0.
    pub dst_port: u16,
}

/// Fragmentation state of an IP packet (RFC 791 §3.2 flags and offset; RFC 8200 §4.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fragment {
    /// Not a fragment.
    Whole,
    /// Offset 0 with More Fragments set: holds the start of the transport header.
    First,
    /// Offset not 0: no transport header.
    Later,
}

/// The two-bit ECN field (RFC 3168 §5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Ecn {
    /// `00`: the transport is not ECN-capable.
    NotEct = 0b00,
    /// `01`: ECN-capable transport, ECT(1).
    Ect1 = 0b01,
    /// `10`: ECN-capable transport, ECT(0).
    Ect0 = 0b10,
    /// `11`: congestion experienced.
    Ce = 0b11,
}

impl Ecn {
    /// The codepoint in the low two bits of `bits` (a TOS or Traffic Class byte).
    pub const fn from_bits(bits: u8) -> Ecn {
        match bits & 0b11 {
            0b00 => Ecn::NotEct,
            0b01 => Ecn::Ect1,
            0b10 => Ecn::Ect0,
            _ => Ecn::Ce,
        }
    }
}

macro_rules! malformed_reasons {
    ($($(#[$doc:meta])* $variant:ident => $name:literal;)*) => {
        /// Why a frame could not be read. `Copy`; each reason has a counter in
        /// [`crate::ParseCounters`] under [`Malformed::name`].
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Malformed {
            $($(#[$doc])* $variant,)*
        }

        impl Malformed {
            /// Every reason, in counter order ([`Malformed::index`]).
            pub const ALL: [Malformed; [$(Malformed::$variant),*].len()] =
                [$(Malformed::$variant),*];
            /// Number of reasons.
            pub const COUNT: usize = Self::ALL.len();
            /// The reason's snake_case name, used as its counter label.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Malformed::$variant => $name,)*
                }
            }
            /// `"malformed_"` followed by [`Malformed::name`]: the reason's name in
            /// [`crate::ParseCounters::iter`].
            pub const fn counter_name(self) -> &'static str {
                match self {
                    $(Malformed::$variant => concat!("malformed_", $name),)*
                }
            }
        }
    };
}

malformed_reasons! {
    /// Shorter than the 14-byte Ethernet header.
    TruncatedEthernet => "truncated_ethernet";
    /// A VLAN tag announced but cut off.
    TruncatedVlan => "truncated_vlan";
    /// More than [`MAX_VLAN_TAGS`] VLAN tags.
    TooManyVlanTags => "too_many_vlan_tags";
    /// The IP header (with IPv4 options) is cut off.
    TruncatedIpHeader => "truncated_ip_header";
    /// The version nibble disagrees with the EtherType.
    BadIpVersion => "bad_ip_version";
    /// IPv4 IHL below 5 words.
    BadIhl => "bad_ihl";
    /// IPv4 total length below the header length, or beyond the frame.
    BadTotalLength => "bad_total_length";
    /// IPv6 payload length beyond the frame.
    BadPayloadLength => "bad_payload_length";
    /// An IPv6 extension header (or the authentication header) is invalid or cut off.
    BadExtensionHeader => "bad_extension_header";
    /// The TCP, UDP or ICMP header of an unfragmented packet is cut off.
    TruncatedTransport => "truncated_transport";
    /// TCP data offset below 5 words.
    BadTcpDataOffset => "bad_tcp_data_offset";
    /// UDP length below 8 or beyond the IP payload.
    BadUdpLength => "bad_udp_length";
    /// Longer than [`MAX_SUPER_FRAME_BYTES`], or an IP packet longer than
    /// [`MAX_IP_PACKET_BYTES`] (a BIG TCP super-frame, whose IP length field cannot hold it).
    Oversized => "oversized";
}

impl Malformed {
    /// Position of the reason in [`Malformed::ALL`] (its counter slot).
    pub const fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::error::Error for Malformed {}

/// Parses one Ethernet frame. Never panics, never allocates.
///
/// ```
/// use metronome_packet::{parse, Parsed};
/// let mut arp = [0u8; 42];
/// arp[12..14].copy_from_slice(&[0x08, 0x06]);
/// assert!(matches!(parse(&arp), Parsed::NonIp(n) if n.ether_type == 0x0806));
/// assert!(matches!(parse(&arp[..10]), Parsed::Malformed(_)));
/// ```
pub fn parse(frame: &[u8]) -> Parsed {
    match parse_inner(frame) {
        Ok(parsed) => parsed,
        Err(reason) => Parsed::Malformed(reason),
    }
}

fn parse_inner(frame: &[u8]) -> Result<Parsed, Malformed> {
    if frame.len() > MAX_SUPER_FRAME_BYTES {
        return Err(Malformed::Oversized);
    }
    // A super-frame longer than MAX_FRAME_BYTES is charged from its segments (see there).
    let wire_len = frame.len().min(MAX_FRAME_BYTES) as u16;
    let (ether_type, ip_offset, vlan_tags) = link_layer(frame)?;
    if frame.len() - ip_offset > MAX_IP_PACKET_BYTES {
        return Err(Malformed::Oversized);
    }
    let l3 = Link {
        wire_len,
        ip_offset: ip_offset as u16, // at most 22
        vlan_tags,
    };
    let rest = &frame[ip_offset..]; // link_layer checked ip_offset <= len
    match ether_type {
        ETHERTYPE_IPV4 => ipv4(rest, l3).map(Parsed::Ip),
        ETHERTYPE_IPV6 => ipv6(rest, l3).map(Parsed::Ip),
        ether_type => Ok(Parsed::NonIp(NonIp {
            ether_type,
            wire_len,
        })),
    }
}

/// What the link layer tells the IP parsers.
#[derive(Clone, Copy)]
struct Link {
    wire_len: u16,
    ip_offset: u16,
    vlan_tags: u8,
}

/// Returns the EtherType after the VLAN tags (at most [`MAX_VLAN_TAGS`]), the offset of what
/// follows, and the tag count.
pub fn link_layer(frame: &[u8]) -> Result<(u16, usize, u8), Malformed> {
    let mut ether_type = read_u16(frame, 12).ok_or(Malformed::TruncatedEthernet)?;
    let mut offset = ETHERNET_HEADER_BYTES;
    let mut tags = 0u8;
    while matches!(ether_type, TPID_8021Q | TPID_8021AD | TPID_QINQ_LEGACY) {
        if usize::from(tags) == MAX_VLAN_TAGS {
            return Err(Malformed::TooManyVlanTags);
        }
        // TCI at `offset`, the inner EtherType at `offset + 2`.
        ether_type = read_u16(frame, offset + 2).ok_or(Malformed::TruncatedVlan)?;
        offset += VLAN_TAG_BYTES;
        tags += 1;
    }
    Ok((ether_type, offset, tags))
}

fn ipv4(packet: &[u8], link: Link) -> Result<IpPacket, Malformed> {
    use ipv4_err::{HeaderError, HeaderSliceError};
    let header = Ipv4HeaderSlice::from_slice(packet).map_err(|e| match e {
        HeaderSliceError::Len(_) => Malformed::TruncatedIpHeader,
        HeaderSliceError::Content(HeaderError::UnexpectedVersion { .. }) => Malformed::BadIpVersion,
        HeaderSliceError::Content(HeaderError::HeaderLengthSmallerThanHeader { .. }) => {
            Malformed::BadIhl
        }
    })?;
    let header_len = header.slice().len();
    let total_len = usize::from(header.total_len());
    if total_len < header_len || total_len > packet.len() {
        return Err(Malformed::BadTotalLength);
    }
    let fragment = match (header.fragments_offset().value(), header.more_fragments()) {
        (0, false) => Fragment::Whole,
        (0, true) => Fragment::First,
        _ => Fragment::Later,
    };
    let protocol = header.protocol().0;
    let ports = transport(protocol, &packet[header_len..total_len], fragment)?;
    let tos = packet[1]; // header_len >= 20
    Ok(ip_packet(
        IpAddr::V4(Ipv4Addr::from(header.source())),
        IpAddr::V4(Ipv4Addr::from(header.destination())),
        protocol,
        ports,
        tos,
        fragment,
        link,
    ))
}

fn ipv6(packet: &[u8], link: Link) -> Result<IpPacket, Malformed> {
    use ipv6_err::{HeaderError, SliceError};
    let slice = Ipv6Slice::from_slice(packet).map_err(|e| match e {
        SliceError::Len(len) => match len.layer {
            Layer::Ipv6Header => Malformed::TruncatedIpHeader,
            Layer::Ipv6Packet => Malformed::BadPayloadLength,
            _ => Malformed::BadExtensionHeader,
        },
        SliceError::Header(HeaderError::UnexpectedVersion { .. }) => Malformed::BadIpVersion,
        SliceError::Exts(_) => Malformed::BadExtensionHeader,
    })?;
    let payload = slice.payload();
    let fragment = if payload.fragmented {
        ipv6_fragment(&slice)
    } else {
        Fragment::Whole
    };
    let protocol = payload.ip_number.0;
    let ports = transport(protocol, payload.payload, fragment)?;
    let header = slice.header();
    Ok(ip_packet(
        IpAddr::V6(Ipv6Addr::from(header.source())),
        IpAddr::V6(Ipv6Addr::from(header.destination())),
        protocol,
        ports,
        header.traffic_class(),
        fragment,
        link,
    ))
}

/// First or later fragment, from the first Fragment header that fragments the payload.
fn ipv6_fragment(slice: &Ipv6Slice<'_>) -> Fragment {
    for ext in slice.extensions().clone().into_iter() {
        if let Ipv6ExtensionSlice::Fragment(frag) = ext {
            if frag.fragment_offset().value() != 0 {
                return Fragment::Later;
            }
            if frag.more_fragments() {
                return Fragment::First;
            }
        }
    }
    Fragment::First
}

fn ip_packet(
    src: IpAddr,
    dst: IpAddr,
    protocol: u8,
    ports: Option<(u16, u16)>,
    traffic_class: u8,
    fragment: Fragment,
    link: Link,
) -> IpPacket {
    let (src_port, dst_port) = ports.unwrap_or((0, 0));
    IpPacket {
        tuple: FiveTuple {
            src,
            dst,
            protocol,
            src_port,
            dst_port,
        },
        dscp: traffic_class >> 2,
        ecn: Ecn::from_bits(traffic_class),
        ip_offset: link.ip_offset,
        wire_len: link.wire_len,
        fragment,
        has_ports: ports.is_some(),
        vlan_tags: link.vlan_tags,
        origin: 0,
    }
}

/// Reads the ports of `payload` (the IP payload after extension headers).
///
/// A whole packet must carry a valid transport header for TCP, UDP and ICMP; a first fragment
/// gets ports only if the fixed header is complete (else none, not an error); a later fragment
/// never has ports.
fn transport(
    protocol: u8,
    payload: &[u8],
    fragment: Fragment,
) -> Result<Option<(u16, u16)>, Malformed> {
    let ports = || Some((read_u16(payload, 0)?, read_u16(payload, 2)?));
    match (fragment, protocol) {
        (Fragment::Later, _) => Ok(None),
        (Fragment::First, proto::TCP) if payload.len() >= TCP_MIN_HEADER_BYTES => Ok(ports()),
        (Fragment::First, proto::UDP) if payload.len() >= UDP_HEADER_BYTES => Ok(ports()),
        (Fragment::First, _) => Ok(None),
        (Fragment::Whole, proto::TCP) => {
            if payload.len() < TCP_MIN_HEADER_BYTES {
                return Err(Malformed::TruncatedTransport);
            }
            let header_len = usize::from(payload[12] >> 4) * 4;
            if header_len < TCP_MIN_HEADER_BYTES {
                return Err(Malformed::BadTcpDataOffset);
            }
            if header_len > payload.len() {
                return Err(Malformed::TruncatedTransport);
            }
            Ok(ports())
        }
        (Fragment::Whole, proto::UDP) => {
            if payload.len() < UDP_HEADER_BYTES {
                return Err(Malformed::TruncatedTransport);
            }
            let udp_len = usize::from(u16::from_be_bytes([payload[4], payload[5]]));
            if udp_len < UDP_HEADER_BYTES || udp_len > payload.len() {
                return Err(Malformed::BadUdpLength);
            }
            Ok(ports())
        }
        (Fragment::Whole, proto::ICMP | proto::ICMPV6) if payload.len() < ICMP_HEADER_BYTES => {
            Err(Malformed::TruncatedTransport)
        }
        (Fragment::Whole, _) => Ok(None),
    }
}

/// The big-endian `u16` at `offset`, if the slice holds it.
#[inline]
fn read_u16(bytes: &[u8], offset: usize) -> Option<u16> {
    let pair = bytes.get(offset..offset.checked_add(2)?)?;
    Some(u16::from_be_bytes([pair[0], pair[1]]))
}

/// Size of an [`IpPacket`] in bytes (checked at compile time): small enough to return by value.
pub const IP_PACKET_BYTES: usize = 52;
const _: () = assert!(core::mem::size_of::<IpPacket>() == IP_PACKET_BYTES);
