//! Property tests of `SuperFrame::piece` (CONTRIBUTING.md §13): random TCP/IPv4 and TCP/IPv6
//! super-frames (payload, gso_size, flags, options, VLAN tag, ID, sequence number) with a
//! partial checksum, as a sender with TSO hands them to a packet socket, cut into pieces of at
//! most `N` segments. Checked: the pieces' payloads concatenate to the original byte stream;
//! sequence numbers are continuous; every piece's headers are consistent (lengths, IPv4 header
//! checksum, TCP checksum once the partial checksum is completed); CWR only on the first piece,
//! FIN/PSH only on the last; the bytes on the wire add up. Reference model: with `N = 1` every
//! piece equals a segment built independently with etherparse's header types and checksum
//! functions, as full software segmentation (the kernel's `tcp_gso_segment` with checksum
//! completion) gives. The same for UDP (`UDP_L4`) super-frames: UDP length, IP length and ID,
//! checksum start, against datagrams built with etherparse (`__udp_gso_segment`).

use etherparse::{Ipv4Header, Ipv6Header, TcpHeader, UdpHeader};
use metronome_packet::gso::{complete_partial_checksum, wire_bytes, RX_BYTES_FRAMING};
use metronome_packet::{
    ipv4_header_checksum, mark_ce, parse, EcnMark, GsoError, GsoType, SuperFrame, VnetHdr,
};
use proptest::prelude::*;

const CWR: u8 = 0x80;
const ECE: u8 = 0x40;
const ACK: u8 = 0x10;
const PSH: u8 = 0x08;
const FIN: u8 = 0x01;
/// IP protocol numbers (IANA).
const TCP: u8 = 6;
const UDP: u8 = 17;

#[derive(Clone, Debug)]
struct Spec {
    v6: bool,
    vlan: bool,
    /// TCP option words (NOPs), 0..=10.
    option_words: usize,
    payload: Vec<u8>,
    gso_size: u16,
    flags: u8,
    seq: u32,
    id: u16,
    tos: u8,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        any::<bool>(),
        any::<bool>(),
        0..=10usize,
        prop::collection::vec(any::<u8>(), 1..9000),
        1..=1600u16,
        prop::sample::subsequence(vec![CWR, ECE, PSH, FIN], 0..=4),
        any::<u32>(),
        any::<u16>(),
        any::<u8>(),
    )
        .prop_map(
            |(v6, vlan, option_words, payload, gso_size, flags, seq, id, tos)| Spec {
                v6,
                vlan,
                option_words,
                payload,
                gso_size,
                flags: flags.into_iter().fold(ACK, |a, f| a | f),
                seq,
                id,
                tos,
            },
        )
}

/// Folded (not complemented) pseudo-header sum, big-endian words: the independent oracle.
fn fold(mut sum: u64) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

fn words(bytes: &[u8]) -> u64 {
    bytes
        .chunks(2)
        .map(|w| u64::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)])))
        .sum()
}

/// An Ethernet header (with a VLAN tag when `vlan`) and an IPv4 or IPv6 header for a transport
/// segment of `l4_len` bytes of protocol `proto`, IPv4 header checksum filled in; returns the
/// bytes and the IP header offset.
fn eth_ip(v6: bool, vlan: bool, tos: u8, id: u16, proto: u8, l4_len: usize) -> (Vec<u8>, usize) {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
    if vlan {
        f.extend_from_slice(&[0x81, 0x00, 0x00, 0x2a]);
    }
    f.extend_from_slice(if v6 { &[0x86, 0xdd] } else { &[0x08, 0x00] });
    let l3 = f.len();
    if v6 {
        f.extend_from_slice(&[0x60 | (tos >> 4), tos << 4, 0x12, 0x34]);
        f.extend_from_slice(&(l4_len as u16).to_be_bytes());
        f.extend_from_slice(&[proto, 64]);
        f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8].repeat(4));
        f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb9].repeat(4));
    } else {
        f.extend_from_slice(&[0x45, tos]);
        f.extend_from_slice(&((20 + l4_len) as u16).to_be_bytes());
        f.extend_from_slice(&id.to_be_bytes());
        f.extend_from_slice(&[0x40, 0, 64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        let sum = ipv4_header_checksum(&f[l3..]).unwrap();
        f[l3 + 10..l3 + 12].copy_from_slice(&sum.to_be_bytes());
    }
    (f, l3)
}

/// The partial checksum a sender leaves: the folded pseudo-header sum of the addresses in the IP
/// header at `l3`, `proto` and the transport length `l4_len`.
fn pseudo_header_sum(f: &[u8], l3: usize, v6: bool, proto: u8, l4_len: usize) -> u16 {
    let addrs = if v6 {
        &f[l3 + 8..l3 + 40]
    } else {
        &f[l3 + 12..l3 + 20]
    };
    fold(words(addrs) + u64::from(proto) + l4_len as u64)
}

/// The super-frame of `s` with its partial checksum, and its virtio-net header.
fn build(s: &Spec) -> (Vec<u8>, VnetHdr) {
    let tcp_len = 20 + 4 * s.option_words + s.payload.len();
    let (mut f, l3) = eth_ip(s.v6, s.vlan, s.tos, s.id, TCP, tcp_len);
    let l4 = f.len();
    f.extend_from_slice(&[0x9c, 0x40, 0x14, 0x51]);
    f.extend_from_slice(&s.seq.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x10, 0]);
    f.push(((5 + s.option_words) as u8) << 4);
    f.push(s.flags);
    f.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
    f.extend(std::iter::repeat_n(1u8, 4 * s.option_words));
    f.extend_from_slice(&s.payload);
    let pseudo = pseudo_header_sum(&f, l3, s.v6, TCP, tcp_len);
    f[l4 + 16..l4 + 18].copy_from_slice(&pseudo.to_be_bytes());
    let hdr = VnetHdr {
        flags: metronome_packet::gso::FLAG_NEEDS_CSUM,
        gso_type: if s.v6 { GsoType::TcpV6 } else { GsoType::TcpV4 },
        ecn: s.flags & CWR != 0,
        hdr_len: 0,
        gso_size: s.gso_size,
        csum_start: l4 as u16,
        csum_offset: 16,
    };
    (f, hdr)
}

/// Segment `k` by full software segmentation, from etherparse's header types: lengths,
/// identification, sequence number, flags, IPv4 header checksum and full TCP checksum.
fn reference_segment(frame: &[u8], l3: usize, v6: bool, gso: usize, k: usize) -> Vec<u8> {
    let mut out = frame[..l3].to_vec();
    let (ip, rest) = Ip::from_slice(&frame[l3..], v6);
    let (mut tcp, payload) = TcpHeader::from_slice(rest).unwrap();
    let n = payload.len().div_ceil(gso);
    let seg = &payload[k * gso..((k + 1) * gso).min(payload.len())];
    tcp.sequence_number = tcp.sequence_number.wrapping_add((k * gso) as u32);
    tcp.cwr &= k == 0;
    tcp.fin &= k == n - 1;
    tcp.psh &= k == n - 1;
    let ip = ip.for_segment(k, tcp.header_len() + seg.len());
    tcp.checksum = match &ip {
        Ip::V4(ip) => tcp.calc_checksum_ipv4(ip, seg),
        Ip::V6(ip) => tcp.calc_checksum_ipv6(ip, seg),
    }
    .unwrap();
    out.extend_from_slice(&ip.to_bytes());
    out.extend_from_slice(&tcp.to_bytes());
    out.extend_from_slice(seg);
    out
}

/// An IP header parsed with etherparse: the independent oracle's view of a frame's layer 3.
enum Ip {
    V4(Ipv4Header),
    V6(Ipv6Header),
}

impl Ip {
    /// The IP header at the start of `bytes` and what follows it.
    fn from_slice(bytes: &[u8], v6: bool) -> (Ip, &[u8]) {
        if v6 {
            let (ip, rest) = Ipv6Header::from_slice(bytes).unwrap();
            (Ip::V6(ip), rest)
        } else {
            let (ip, rest) = Ipv4Header::from_slice(bytes).unwrap();
            (Ip::V4(ip), rest)
        }
    }

    /// The header of segment `k` of a super-frame with this header, carrying `l4_len` bytes:
    /// payload length, and for IPv4 the identification advanced by `k` and the header checksum.
    fn for_segment(self, k: usize, l4_len: usize) -> Ip {
        match self {
            Ip::V4(mut ip) => {
                ip.set_payload_len(l4_len).unwrap();
                ip.identification = ip.identification.wrapping_add(k as u16);
                ip.header_checksum = ip.calc_header_checksum();
                Ip::V4(ip)
            }
            Ip::V6(mut ip) => {
                ip.payload_length = l4_len as u16;
                Ip::V6(ip)
            }
        }
    }

    fn to_bytes(&self) -> Vec<u8> {
        match self {
            Ip::V4(ip) => ip.to_bytes().to_vec(),
            Ip::V6(ip) => ip.to_bytes().to_vec(),
        }
    }
}

/// A piece's IP header at `l3` (transport header at `l4`): its length field covers the piece;
/// for IPv4 its identification is `id` and its header checksum is right.
fn check_piece_ip(
    bytes: &[u8],
    l3: usize,
    l4: usize,
    v6: bool,
    id: u16,
) -> Result<(), TestCaseError> {
    if v6 {
        let len = u16::from_be_bytes([bytes[l3 + 4], bytes[l3 + 5]]) as usize;
        prop_assert_eq!(len, bytes.len() - l3 - 40);
    } else {
        let total = u16::from_be_bytes([bytes[l3 + 2], bytes[l3 + 3]]) as usize;
        prop_assert_eq!(total, bytes.len() - l3);
        prop_assert_eq!(u16::from_be_bytes([bytes[l3 + 4], bytes[l3 + 5]]), id);
        let sum = ipv4_header_checksum(&bytes[l3..l4]).unwrap();
        prop_assert_eq!(sum, u16::from_be_bytes([bytes[l3 + 10], bytes[l3 + 11]]));
    }
    Ok(())
}

/// Cuts `frame` into pieces of at most `n` segments; returns each piece as a whole frame (its
/// scratch headers followed by its payload slice) with its header and segment count.
fn cut(frame: &[u8], hdr: &VnetHdr, n: u32) -> Vec<(Vec<u8>, VnetHdr, u32)> {
    let sf = SuperFrame::parse(frame, hdr).unwrap();
    let mut scratch = [0u8; 256];
    (0..sf.pieces(n))
        .map(|k| {
            let p = sf.piece(frame, k, n, &mut scratch).unwrap();
            let mut bytes = scratch[..p.header_len].to_vec();
            bytes.extend_from_slice(&frame[p.payload.clone()]);
            (bytes, p.vnet, p.segments)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn pieces_are_consistent_and_reassemble(s in spec(), n in 1..=48u32) {
        let (frame, hdr) = build(&s);
        let sf = SuperFrame::parse(&frame, &hdr).unwrap();
        let (l3, l4) = (if s.vlan { 18 } else { 14 }, sf.transport_offset());
        let h = sf.header_len();
        prop_assert_eq!(h, l4 + 20 + 4 * s.option_words);
        let total_segments = s.payload.len().div_ceil(usize::from(s.gso_size));
        prop_assert_eq!(sf.segments() as usize, total_segments);
        let pieces = cut(&frame, &hdr, n);
        prop_assert_eq!(pieces.len(), total_segments.div_ceil(n as usize));

        let mut stream = Vec::new();
        let mut wire = 0u64;
        for (k, (bytes, vnet, segs)) in pieces.iter().enumerate() {
            let (first, last) = (k == 0, k == pieces.len() - 1);
            let payload = &bytes[h..];
            // Sequence numbers continuous: this piece starts where the previous ended.
            let seq = u32::from_be_bytes(bytes[l4 + 4..l4 + 8].try_into().unwrap());
            prop_assert_eq!(seq, s.seq.wrapping_add(stream.len() as u32));
            stream.extend_from_slice(payload);
            // Segment count, and the header: GSO with more than one segment, plain otherwise.
            let gso = usize::from(s.gso_size);
            prop_assert_eq!(*segs as usize, payload.len().div_ceil(gso));
            prop_assert!(*segs <= n);
            prop_assert!(last || payload.len() == *segs as usize * gso);
            prop_assert!(vnet.needs_csum());
            prop_assert_eq!((vnet.csum_start as usize, vnet.csum_offset), (l4, 16));
            if *segs > 1 {
                prop_assert_eq!((vnet.gso_type, vnet.gso_size), (hdr.gso_type, s.gso_size));
                prop_assert_eq!(vnet.ecn, first && s.flags & CWR != 0);
            } else {
                prop_assert_eq!((vnet.gso_type, vnet.gso_size, vnet.ecn), (GsoType::None, 0, false));
            }
            // Lengths and the IPv4 header checksum.
            let before = (stream.len() - payload.len()) / gso;
            check_piece_ip(bytes, l3, l4, s.v6, s.id.wrapping_add(before as u16))?;
            // Flags: CWR on the first piece only, FIN and PSH on the last only, the rest kept.
            let flags = bytes[l4 + 13];
            let mut expected = s.flags;
            if !first { expected &= !CWR; }
            if !last { expected &= !(FIN | PSH); }
            prop_assert_eq!(flags, expected);
            // The piece parses, and its completed checksum is the TCP checksum.
            prop_assert!(parse(bytes).ip().is_some());
            let mut done = bytes.clone();
            prop_assert!(complete_partial_checksum(&mut done, vnet.csum_start, vnet.csum_offset));
            let (ip, rest) = Ip::from_slice(&done[l3..], s.v6);
            let (tcp, tcp_payload) = TcpHeader::from_slice(rest).unwrap();
            let expected_sum = match &ip {
                Ip::V4(ip) => tcp.calc_checksum_ipv4(ip, tcp_payload),
                Ip::V6(ip) => tcp.calc_checksum_ipv6(ip, tcp_payload),
            };
            prop_assert_eq!(tcp.checksum, expected_sum.unwrap());
            let piece_wire = wire_bytes(bytes, vnet, RX_BYTES_FRAMING).unwrap();
            wire += piece_wire;
            let direct = sf.piece(&frame, k as u32, n, &mut [0u8; 256]).unwrap();
            prop_assert_eq!(direct.wire_bytes(RX_BYTES_FRAMING), piece_wire);
        }
        prop_assert_eq!(&stream, &s.payload);
        // The pieces occupy exactly the wire bytes of the super-frame.
        let expected_wire = (total_segments * h + s.payload.len()) as u64;
        prop_assert_eq!(wire_bytes(&frame, &hdr, RX_BYTES_FRAMING).unwrap(), expected_wire);
        prop_assert_eq!(wire, expected_wire);
    }

    /// `segments_within(budget)` pieces fit the budget (unless one segment alone exceeds it),
    /// and one more segment per piece would not.
    #[test]
    fn segments_within_a_budget(s in spec(), budget in 100..=65_535u64, framing in 0..=24u32) {
        let (frame, hdr) = build(&s);
        let sf = SuperFrame::parse(&frame, &hdr).unwrap();
        let n = sf.segments_within(budget, framing);
        prop_assert!(n >= 1 && n <= sf.segments());
        let per = (sf.header_len() + usize::from(s.gso_size)) as u64 + u64::from(framing);
        let mut scratch = [0u8; 256];
        for k in 0..sf.pieces(n) {
            let p = sf.piece(&frame, k, n, &mut scratch).unwrap();
            prop_assert!(p.wire_bytes(framing) <= budget.max(per));
        }
        if n < sf.segments() {
            prop_assert!((u64::from(n) + 1) * per > budget);
        }
    }

    /// With one segment per piece the pieces, checksums completed, are the segments of full
    /// software segmentation.
    #[test]
    fn single_segment_pieces_equal_software_segmentation(s in spec()) {
        let (frame, hdr) = build(&s);
        let l3 = if s.vlan { 18 } else { 14 };
        for (k, (mut bytes, vnet, segs)) in cut(&frame, &hdr, 1).into_iter().enumerate() {
            prop_assert_eq!(segs, 1);
            prop_assert!(complete_partial_checksum(&mut bytes, vnet.csum_start, vnet.csum_offset));
            let want = reference_segment(&frame, l3, s.v6, usize::from(s.gso_size), k);
            prop_assert_eq!(bytes, want, "segment {}", k);
        }
    }

    /// ECN marking a super-frame marks the IP header only; the partial TCP checksum is left as
    /// it is (TOS/Traffic Class is not in the pseudo-header), and every piece inherits CE.
    #[test]
    fn ce_marked_super_frames_cut_into_ce_pieces(mut s in spec(), n in 1..=8u32) {
        s.tos = (s.tos & !0b11) | 0b10; // ECT(0)
        let (mut frame, hdr) = build(&s);
        let l4 = usize::from(hdr.csum_start);
        let partial = [frame[l4 + 16], frame[l4 + 17]];
        let parsed = parse(&frame);
        prop_assert_eq!(mark_ce(&mut frame, &parsed), EcnMark::Marked);
        prop_assert_eq!([frame[l4 + 16], frame[l4 + 17]], partial);
        let l3 = if s.vlan { 18 } else { 14 };
        for (mut bytes, vnet, _) in cut(&frame, &hdr, n) {
            let ecn = if s.v6 { (bytes[l3 + 1] >> 4) & 0b11 } else { bytes[l3 + 1] & 0b11 };
            prop_assert_eq!(ecn, 0b11);
            complete_partial_checksum(&mut bytes, vnet.csum_start, vnet.csum_offset);
            let sliced = etherparse::SlicedPacket::from_ethernet(&bytes).unwrap();
            let Some(etherparse::TransportSlice::Tcp(tcp)) = sliced.transport else {
                panic!("not tcp")
            };
            let expected = match sliced.net {
                Some(etherparse::NetSlice::Ipv4(ip)) => tcp
                    .to_header()
                    .calc_checksum_ipv4(&ip.header().to_header(), tcp.payload()),
                Some(etherparse::NetSlice::Ipv6(ip)) => tcp
                    .to_header()
                    .calc_checksum_ipv6(&ip.header().to_header(), tcp.payload()),
                _ => panic!("not ip"),
            };
            prop_assert_eq!(tcp.checksum(), expected.unwrap());
        }
    }
}

#[test]
fn named_errors_for_frames_that_are_not_tcp_super_frames() {
    let s = Spec {
        v6: false,
        vlan: false,
        option_words: 0,
        payload: vec![7; 3000],
        gso_size: 1448,
        flags: ACK,
        seq: 1,
        id: 1,
        tos: 0,
    };
    let (frame, hdr) = build(&s);
    let plain = VnetHdr::NONE;
    assert_eq!(SuperFrame::parse(&frame, &plain), Err(GsoError::NotGso));
    let v6 = VnetHdr {
        gso_type: GsoType::TcpV6,
        ..hdr
    };
    assert_eq!(SuperFrame::parse(&frame, &v6), Err(GsoError::BadLinkLayer));
    let udp = VnetHdr {
        gso_type: GsoType::Udp,
        ..hdr
    };
    assert_eq!(
        SuperFrame::parse(&frame, &udp),
        Err(GsoError::Unsupported(GsoType::Udp))
    );
    assert_eq!(
        SuperFrame::parse(&frame[..60], &hdr),
        Err(GsoError::BadIpHeader)
    );
    let sf = SuperFrame::parse(&frame, &hdr).unwrap();
    assert_eq!(sf.segments(), 3);
    let mut small = [0u8; 40];
    assert_eq!(
        sf.piece(&frame, 0, 1, &mut small),
        Err(GsoError::ScratchTooSmall)
    );
    let mut scratch = [0u8; 64];
    assert_eq!(
        sf.piece(&frame, 3, 1, &mut scratch),
        Err(GsoError::PieceOutOfRange)
    );
    assert_eq!(
        sf.piece(&frame, 0, 0, &mut scratch),
        Err(GsoError::PieceOutOfRange)
    );
    assert_eq!(
        sf.piece(&frame[..100], 0, 1, &mut scratch),
        Err(GsoError::FrameMismatch)
    );
    // Whole in one piece: the frame itself, same header except what the cut always sets.
    let p = sf.piece(&frame, 0, 3, &mut scratch).unwrap();
    assert_eq!(p.payload, 54..frame.len());
    assert_eq!(&scratch[..54], &frame[..54]);
    assert_eq!((p.vnet.gso_type, p.vnet.gso_size), (GsoType::TcpV4, 1448));
}

/// A UDP (`UDP_L4`) super-frame: IPv4 or IPv6, an optional VLAN tag, its payload, segment size,
/// IPv4 identification and TOS.
#[derive(Clone, Debug)]
struct UdpSpec {
    v6: bool,
    vlan: bool,
    payload: Vec<u8>,
    gso_size: u16,
    id: u16,
    tos: u8,
}

fn udp_spec() -> impl Strategy<Value = UdpSpec> {
    (
        any::<bool>(),
        any::<bool>(),
        prop::collection::vec(any::<u8>(), 1..9000),
        1..=1600u16,
        any::<u16>(),
        any::<u8>(),
    )
        .prop_map(|(v6, vlan, payload, gso_size, id, tos)| UdpSpec {
            v6,
            vlan,
            payload,
            gso_size,
            id,
            tos,
        })
}

/// The UDP super-frame of `s` with its partial checksum (the pseudo-header sum of the whole UDP
/// length, as `udp_send_skb` leaves it), and its virtio-net header.
fn build_udp(s: &UdpSpec) -> (Vec<u8>, VnetHdr) {
    let udp_len = 8 + s.payload.len();
    let (mut f, l3) = eth_ip(s.v6, s.vlan, s.tos, s.id, UDP, udp_len);
    let l4 = f.len();
    f.extend_from_slice(&[0x9c, 0x40, 0x14, 0x51]);
    f.extend_from_slice(&(udp_len as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&s.payload);
    let pseudo = pseudo_header_sum(&f, l3, s.v6, UDP, udp_len);
    f[l4 + 6..l4 + 8].copy_from_slice(&pseudo.to_be_bytes());
    let hdr = VnetHdr {
        flags: metronome_packet::gso::FLAG_NEEDS_CSUM,
        gso_type: GsoType::UdpL4,
        ecn: false,
        hdr_len: 0,
        gso_size: s.gso_size,
        csum_start: l4 as u16,
        csum_offset: 6,
    };
    (f, hdr)
}

/// Datagram `k` by full software segmentation, from etherparse's header types: UDP length and
/// checksum, IP length, identification and header checksum.
fn reference_datagram(frame: &[u8], l3: usize, v6: bool, gso: usize, k: usize) -> Vec<u8> {
    let mut out = frame[..l3].to_vec();
    let (ip, rest) = Ip::from_slice(&frame[l3..], v6);
    let (mut udp, payload) = UdpHeader::from_slice(rest).unwrap();
    let seg = &payload[k * gso..((k + 1) * gso).min(payload.len())];
    udp.length = (8 + seg.len()) as u16;
    let ip = ip.for_segment(k, 8 + seg.len());
    udp.checksum = match &ip {
        Ip::V4(ip) => udp.calc_checksum_ipv4(ip, seg),
        Ip::V6(ip) => udp.calc_checksum_ipv6(ip, seg),
    }
    .unwrap();
    out.extend_from_slice(&ip.to_bytes());
    out.extend_from_slice(&udp.to_bytes());
    out.extend_from_slice(seg);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// UDP pieces: payloads re-assemble; each piece's UDP length, IP length, ID and header
    /// checksum are its own; its completed checksum is the UDP checksum; it is a `UDP_L4` GSO
    /// frame when it has more than one segment; the wire bytes add up.
    #[test]
    fn udp_pieces_are_consistent_and_reassemble(s in udp_spec(), n in 1..=48u32) {
        let (frame, hdr) = build_udp(&s);
        let sf = SuperFrame::parse(&frame, &hdr).unwrap();
        let l3 = if s.vlan { 18 } else { 14 };
        let l4 = sf.transport_offset();
        let h = sf.header_len();
        prop_assert_eq!(h, l4 + 8);
        let gso = usize::from(s.gso_size);
        let total_segments = s.payload.len().div_ceil(gso);
        let pieces = cut(&frame, &hdr, n);
        prop_assert_eq!(pieces.len(), total_segments.div_ceil(n as usize));
        let mut stream = Vec::new();
        let mut wire = 0u64;
        for (k, (bytes, vnet, segs)) in pieces.iter().enumerate() {
            let last = k == pieces.len() - 1;
            let payload = &bytes[h..];
            let before = stream.len() / gso;
            stream.extend_from_slice(payload);
            prop_assert_eq!(*segs as usize, payload.len().div_ceil(gso));
            prop_assert!(*segs <= n);
            prop_assert!(last || payload.len() == *segs as usize * gso);
            prop_assert!(vnet.needs_csum());
            prop_assert_eq!((vnet.csum_start as usize, vnet.csum_offset), (l4, 6));
            prop_assert!(!vnet.ecn);
            if *segs > 1 {
                prop_assert_eq!((vnet.gso_type, vnet.gso_size), (GsoType::UdpL4, s.gso_size));
            } else {
                prop_assert_eq!((vnet.gso_type, vnet.gso_size), (GsoType::None, 0));
            }
            let udp_len = u16::from_be_bytes([bytes[l4 + 4], bytes[l4 + 5]]) as usize;
            prop_assert_eq!(udp_len, bytes.len() - l4);
            check_piece_ip(bytes, l3, l4, s.v6, s.id.wrapping_add(before as u16))?;
            prop_assert!(parse(bytes).ip().is_some());
            let mut done = bytes.clone();
            prop_assert!(complete_partial_checksum(&mut done, vnet.csum_start, vnet.csum_offset));
            let (ip, rest) = Ip::from_slice(&done[l3..], s.v6);
            let (udp, udp_payload) = UdpHeader::from_slice(rest).unwrap();
            let expected = match &ip {
                Ip::V4(ip) => udp.calc_checksum_ipv4(ip, udp_payload),
                Ip::V6(ip) => udp.calc_checksum_ipv6(ip, udp_payload),
            };
            prop_assert_eq!(udp.checksum, expected.unwrap());
            wire += wire_bytes(bytes, vnet, RX_BYTES_FRAMING).unwrap();
        }
        prop_assert_eq!(&stream, &s.payload);
        let expected_wire = (total_segments * h + s.payload.len()) as u64;
        prop_assert_eq!(wire_bytes(&frame, &hdr, RX_BYTES_FRAMING).unwrap(), expected_wire);
        prop_assert_eq!(wire, expected_wire);
    }

    /// With one segment per piece the UDP pieces, checksums completed, are the datagrams of full
    /// software segmentation.
    #[test]
    fn single_segment_udp_pieces_equal_software_segmentation(s in udp_spec()) {
        let (frame, hdr) = build_udp(&s);
        let l3 = if s.vlan { 18 } else { 14 };
        for (k, (mut bytes, vnet, segs)) in cut(&frame, &hdr, 1).into_iter().enumerate() {
            prop_assert_eq!(segs, 1);
            prop_assert!(complete_partial_checksum(&mut bytes, vnet.csum_start, vnet.csum_offset));
            let want = reference_datagram(&frame, l3, s.v6, usize::from(s.gso_size), k);
            prop_assert_eq!(bytes, want, "datagram {}", k);
        }
    }
}
