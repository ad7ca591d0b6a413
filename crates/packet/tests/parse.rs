//! Parser tests on hand-built frames: every layer, every malformed reason.

mod common;

use common::*;
use metronome_packet::{
    parse, proto, Ecn, Fragment, IpPacket, Malformed, Parsed, MAX_IP_PACKET_BYTES,
    MAX_SUPER_FRAME_BYTES,
};
use std::net::IpAddr;

fn ip(parsed: Parsed) -> IpPacket {
    match parsed {
        Parsed::Ip(ip) => ip,
        other => panic!("expected IP, got {other:?}"),
    }
}

fn malformed(frame: &[u8]) -> Malformed {
    match parse(frame) {
        Parsed::Malformed(m) => m,
        other => panic!("expected malformed, got {other:?}"),
    }
}

#[test]
fn tcp_v4_gives_five_tuple_dscp_ecn_offset_and_wire_length() {
    let frame = v4(
        [10, 0, 0, 1],
        [10, 1, 2, 3],
        L4::Tcp,
        40_000,
        443,
        (46 << 2) | 0b10,
    );
    let p = ip(parse(&frame));
    assert_eq!(p.tuple.src, IpAddr::from([10, 0, 0, 1]));
    assert_eq!(p.tuple.dst, IpAddr::from([10, 1, 2, 3]));
    assert_eq!(
        (p.tuple.protocol, p.tuple.src_port, p.tuple.dst_port),
        (proto::TCP, 40_000, 443)
    );
    assert_eq!((p.dscp, p.ecn), (46, Ecn::Ect0));
    assert_eq!((p.ip_offset, p.wire_len), (14, frame.len() as u16));
    assert_eq!(
        (p.fragment, p.has_ports, p.vlan_tags),
        (Fragment::Whole, true, 0)
    );
}

#[test]
fn udp_and_icmp_v4() {
    let u = ip(parse(&v4(
        [1, 1, 1, 1],
        [2, 2, 2, 2],
        L4::Udp,
        53,
        5353,
        0b01,
    )));
    assert_eq!(
        (u.tuple.protocol, u.tuple.src_port, u.tuple.dst_port),
        (17, 53, 5353)
    );
    assert_eq!(u.ecn, Ecn::Ect1);
    let i = ip(parse(&v4([1, 1, 1, 1], [2, 2, 2, 2], L4::Icmp, 0, 0, 0b11)));
    assert_eq!(
        (i.tuple.protocol, i.tuple.src_port, i.has_ports),
        (proto::ICMP, 0, false)
    );
    assert_eq!(i.ecn, Ecn::Ce);
}

#[test]
fn tcp_udp_icmp_v6_with_traffic_class() {
    let t = ip(parse(&v6(
        ip6(1),
        ip6(2),
        L4::Tcp,
        1234,
        80,
        (10 << 2) | 0b10,
    )));
    assert_eq!(t.tuple.src, IpAddr::from(ip6(1)));
    assert_eq!(t.tuple.dst, IpAddr::from(ip6(2)));
    assert_eq!(
        (t.tuple.protocol, t.tuple.src_port, t.tuple.dst_port),
        (6, 1234, 80)
    );
    assert_eq!((t.dscp, t.ecn, t.ip_offset), (10, Ecn::Ect0, 14));
    let u = ip(parse(&v6(ip6(1), ip6(2), L4::Udp, 9, 10, 0)));
    assert_eq!(
        (u.tuple.protocol, u.tuple.dst_port, u.ecn),
        (17, 10, Ecn::NotEct)
    );
    let i = ip(parse(&v6(ip6(1), ip6(2), L4::Icmp, 0, 0, 0)));
    assert_eq!((i.tuple.protocol, i.has_ports), (proto::ICMPV6, false));
}

#[test]
fn vlan_tags_8021q_8021ad_and_legacy_qinq() {
    let base = v4([10, 0, 0, 1], [10, 0, 0, 2], L4::Udp, 1, 2, 0);
    for (tags, offset) in [
        (&[(0x8100, 10)][..], 18),
        (&[(0x88a8, 100), (0x8100, 10)][..], 22),
        (&[(0x9100, 100), (0x8100, 10)][..], 22),
        (&[(0x8100, 100), (0x8100, 10)][..], 22),
    ] {
        let p = ip(parse(&with_vlans(&base, tags)));
        assert_eq!(p.ip_offset, offset);
        assert_eq!(usize::from(p.vlan_tags), tags.len());
        assert_eq!(p.tuple.dst_port, 2);
    }
    let v6tagged = with_vlans(&v6(ip6(1), ip6(2), L4::Tcp, 1, 2, 0), &[(0x8100, 7)]);
    assert_eq!(ip(parse(&v6tagged)).ip_offset, 18);

    let three = with_vlans(&base, &[(0x88a8, 1), (0x8100, 2), (0x8100, 3)]);
    assert_eq!(malformed(&three), Malformed::TooManyVlanTags);
    let tagged = with_vlans(&base, &[(0x8100, 10)]);
    assert_eq!(malformed(&tagged[..15]), Malformed::TruncatedVlan);
    assert_eq!(malformed(&tagged[..17]), Malformed::TruncatedVlan);
}

#[test]
fn non_ip_frames_pass() {
    let a = arp();
    assert!(matches!(parse(&a), Parsed::NonIp(n) if n.ether_type == 0x0806 && n.wire_len == 60));
    let tagged_arp = with_vlans(&a, &[(0x8100, 5)]);
    assert!(matches!(parse(&tagged_arp), Parsed::NonIp(n) if n.ether_type == 0x0806));
    let mut llc = a.clone();
    llc[12..14].copy_from_slice(&46u16.to_be_bytes()); // 802.3 length field
    assert!(matches!(parse(&llc), Parsed::NonIp(n) if n.ether_type == 46));
    assert!(matches!(parse(&a[..14]), Parsed::NonIp(_)));
}

#[test]
fn ethernet_padding_after_the_ip_packet_is_accepted() {
    let mut frame = v4_len([10, 0, 0, 1], [10, 0, 0, 2], L4::Udp, 1, 2, 0, 0);
    assert_eq!(frame.len(), 42);
    frame.resize(60, 0);
    let p = ip(parse(&frame));
    assert_eq!((p.wire_len, p.tuple.dst_port), (60, 2));
}

#[test]
fn every_truncation_of_a_valid_frame_is_malformed_with_the_layer_it_cut() {
    let frame = v4([10, 0, 0, 1], [10, 0, 0, 2], L4::Tcp, 1, 2, 0);
    for cut in 0..frame.len() {
        let expected = match cut {
            0..14 => Malformed::TruncatedEthernet,
            14..34 => Malformed::TruncatedIpHeader,
            _ => Malformed::BadTotalLength,
        };
        assert_eq!(malformed(&frame[..cut]), expected, "cut at {cut}");
    }
    let frame6 = v6(ip6(1), ip6(2), L4::Udp, 1, 2, 0);
    for cut in 14..frame6.len() {
        let expected = match cut {
            14..54 => Malformed::TruncatedIpHeader,
            _ => Malformed::BadPayloadLength,
        };
        assert_eq!(malformed(&frame6[..cut]), expected, "cut at {cut}");
    }
}

#[test]
fn bogus_ipv4_header_fields() {
    let frame = v4([10, 0, 0, 1], [10, 0, 0, 2], L4::Udp, 1, 2, 0);
    let patched = |at: usize, bytes: &[u8]| {
        let mut f = frame.clone();
        f[at..at + bytes.len()].copy_from_slice(bytes);
        f
    };
    assert_eq!(malformed(&patched(14, &[0x44])), Malformed::BadIhl);
    assert_eq!(malformed(&patched(14, &[0x40])), Malformed::BadIhl);
    assert_eq!(malformed(&patched(14, &[0x65])), Malformed::BadIpVersion);
    // IHL 15 (60 bytes) but only 44 bytes of IP: the header is cut off.
    assert_eq!(
        malformed(&patched(14, &[0x4f])),
        Malformed::TruncatedIpHeader
    );
    // IHL 8 (32 bytes) > total length 19, frame long enough for the header.
    let mut f = patched(14, &[0x48]);
    f[16..18].copy_from_slice(&19u16.to_be_bytes());
    assert_eq!(malformed(&f), Malformed::BadTotalLength);
    assert_eq!(malformed(&patched(16, &[0, 19])), Malformed::BadTotalLength);
    assert_eq!(malformed(&patched(16, &[0, 0])), Malformed::BadTotalLength);
    assert_eq!(
        malformed(&patched(16, &[0xff, 0xff])),
        Malformed::BadTotalLength
    );
    // IPv6 EtherType, IPv4 packet.
    assert_eq!(
        malformed(&patched(12, &[0x86, 0xdd])),
        Malformed::BadIpVersion
    );
}

#[test]
fn bogus_transport_headers() {
    let tcp = v4([10, 0, 0, 1], [10, 0, 0, 2], L4::Tcp, 1, 2, 0);
    let mut bad_doff = tcp.clone();
    bad_doff[34 + 12] = 4 << 4;
    assert_eq!(malformed(&bad_doff), Malformed::BadTcpDataOffset);
    let mut long_doff = tcp.clone();
    long_doff[34 + 12] = 15 << 4; // 60 bytes > 36 of segment
    assert_eq!(malformed(&long_doff), Malformed::TruncatedTransport);
    // IP total length says the TCP header is cut at 10 bytes.
    let short_tcp = fragment_v4(&tcp, 0, false, 10);
    assert_eq!(malformed(&short_tcp), Malformed::TruncatedTransport);

    let udp = v4([10, 0, 0, 1], [10, 0, 0, 2], L4::Udp, 1, 2, 0);
    for bad_len in [0u16, 7, 25, 0xffff] {
        let mut f = udp.clone();
        f[34 + 4..34 + 6].copy_from_slice(&bad_len.to_be_bytes());
        assert_eq!(
            malformed(&f),
            Malformed::BadUdpLength,
            "udp length {bad_len}"
        );
    }
    assert_eq!(
        malformed(&fragment_v4(&udp, 0, false, 7)),
        Malformed::TruncatedTransport
    );
    let icmp = v4([10, 0, 0, 1], [10, 0, 0, 2], L4::Icmp, 0, 0, 0);
    assert_eq!(
        malformed(&fragment_v4(&icmp, 0, false, 7)),
        Malformed::TruncatedTransport
    );
}

#[test]
fn oversized_frames_are_refused_before_anything_is_read() {
    let mut frame = v4([10, 0, 0, 1], [10, 0, 0, 2], L4::Udp, 1, 2, 0);
    frame.resize(MAX_SUPER_FRAME_BYTES, 0);
    // 65 557 bytes behind an untagged Ethernet header: an IP packet of 65 543 bytes.
    assert_eq!(malformed(&frame), Malformed::Oversized);
    frame.push(0);
    assert_eq!(malformed(&frame), Malformed::Oversized);
    // The longest frame: a 65 535-byte IP packet behind two VLAN tags.
    let mut tagged = with_vlans(&frame[..ETH + 28], &[(0x88a8, 1), (0x8100, 2)]);
    tagged.resize(MAX_SUPER_FRAME_BYTES, 0);
    assert!(matches!(parse(&tagged), Parsed::Ip(p) if p.wire_len == 65_535));
    tagged.push(0);
    assert_eq!(malformed(&tagged), Malformed::Oversized);
}

/// A GRO frame of a full-size IPv4 packet (total length 65 535: 65 549 bytes with its Ethernet
/// header) is an IP packet like any other, its `wire_len` held at 65 535 (the shaper charges a
/// super-frame from its segments); one whose IP packet is longer than an IP length field
/// can say (BIG TCP: IPv4 total length 0) is `Oversized`.
#[test]
fn gro_frames_above_65_535_bytes_parse_up_to_a_full_ip_packet() {
    for len in [65_536, 65_540, ETH + MAX_IP_PACKET_BYTES] {
        let frame = v4_len(
            [10, 0, 0, 1],
            [10, 0, 0, 2],
            L4::Tcp,
            1,
            2,
            0,
            len - ETH - 40,
        );
        assert_eq!(frame.len(), len);
        let p = ip(parse(&frame));
        assert_eq!((p.wire_len, p.tuple.dst_port), (65_535, 2), "{len}");
        let tagged = with_vlans(&frame, &[(0x8100, 7)]);
        assert_eq!(ip(parse(&tagged)).vlan_tags, 1, "{len}");
    }
    let mut big = v4_len([10, 0, 0, 1], [10, 0, 0, 2], L4::Tcp, 1, 2, 0, 1000);
    big.resize(ETH + MAX_IP_PACKET_BYTES + 1, 0xa5);
    big[ETH + 2..ETH + 4].copy_from_slice(&[0, 0]);
    fix_v4_checksum(&mut big, ETH);
    assert_eq!(malformed(&big), Malformed::Oversized);
    // A total length of 0 on a frame within the limit is a bad total length.
    big.truncate(ETH + MAX_IP_PACKET_BYTES);
    assert_eq!(malformed(&big), Malformed::BadTotalLength);
}

#[test]
fn ipv4_fragments_first_with_ports_first_without_and_later() {
    let tcp = v4_len([10, 0, 0, 1], [10, 0, 0, 2], L4::Tcp, 7, 8, 0, 64);
    let first = ip(parse(&fragment_v4(&tcp, 0, true, 48)));
    assert_eq!(
        (first.fragment, first.has_ports, first.tuple.dst_port),
        (Fragment::First, true, 8)
    );
    let first_short = ip(parse(&fragment_v4(&tcp, 0, true, 16)));
    assert_eq!(
        (first_short.fragment, first_short.has_ports),
        (Fragment::First, false)
    );
    assert_eq!(
        (first_short.tuple.src_port, first_short.tuple.dst_port),
        (0, 0)
    );
    let later = ip(parse(&fragment_v4(&tcp, 6, false, 40)));
    assert_eq!(
        (later.fragment, later.has_ports, later.tuple.dst_port),
        (Fragment::Later, false, 0)
    );
    assert_eq!(later.tuple.protocol, proto::TCP);
    let middle = ip(parse(&fragment_v4(&tcp, 6, true, 40)));
    assert_eq!(middle.fragment, Fragment::Later);
    // UDP length covers the whole datagram, beyond the first fragment: not an error.
    let udp = v4_len([10, 0, 0, 1], [10, 0, 0, 2], L4::Udp, 7, 8, 0, 64);
    let first_udp = ip(parse(&fragment_v4(&udp, 0, true, 16)));
    assert_eq!((first_udp.has_ports, first_udp.tuple.src_port), (true, 7));
}

#[test]
fn ipv6_extension_headers_and_fragments() {
    // Hop-by-Hop, Destination Options, then TCP.
    let mut chain = v6_options_header(60).to_vec();
    chain.extend_from_slice(&v6_options_header(proto::TCP));
    chain.extend_from_slice(&tcp_header(1000, 2000));
    let p = ip(parse(&v6_raw(ip6(1), ip6(2), 0, &chain)));
    assert_eq!(
        (p.tuple.protocol, p.tuple.src_port, p.tuple.dst_port),
        (6, 1000, 2000)
    );
    assert_eq!(p.fragment, Fragment::Whole);

    let mut first = v6_frag_header(proto::TCP, 0, true).to_vec();
    first.extend_from_slice(&tcp_header(1000, 2000));
    let f = ip(parse(&v6_raw(ip6(1), ip6(2), 44, &first)));
    assert_eq!(
        (f.fragment, f.has_ports, f.tuple.dst_port),
        (Fragment::First, true, 2000)
    );

    let mut first_short = v6_frag_header(proto::TCP, 0, true).to_vec();
    first_short.extend_from_slice(&[0; 8]);
    let fs = ip(parse(&v6_raw(ip6(1), ip6(2), 44, &first_short)));
    assert_eq!((fs.fragment, fs.has_ports), (Fragment::First, false));

    let mut later = v6_frag_header(proto::TCP, 3, false).to_vec();
    later.extend_from_slice(&[0xee; 24]);
    let l = ip(parse(&v6_raw(ip6(1), ip6(2), 44, &later)));
    assert_eq!(
        (l.fragment, l.has_ports, l.tuple.protocol),
        (Fragment::Later, false, 6)
    );

    // An atomic fragment (offset 0, no MF) is a whole packet (RFC 8200 §4.5).
    let mut atomic = v6_frag_header(proto::TCP, 0, false).to_vec();
    atomic.extend_from_slice(&tcp_header(1, 2));
    assert_eq!(
        ip(parse(&v6_raw(ip6(1), ip6(2), 44, &atomic))).fragment,
        Fragment::Whole
    );

    // Hop-by-Hop anywhere but first, or cut off: bad extension header.
    let mut late_hbh = v6_options_header(0).to_vec();
    late_hbh.extend_from_slice(&v6_options_header(proto::TCP));
    let frame = v6_raw(ip6(1), ip6(2), 60, &late_hbh);
    assert_eq!(malformed(&frame), Malformed::BadExtensionHeader);
    let frame = v6_raw(ip6(1), ip6(2), 0, &[proto::TCP, 1, 0, 0]);
    assert_eq!(malformed(&frame), Malformed::BadExtensionHeader);
}

#[test]
fn other_ip_protocols_are_shaped_without_ports() {
    let gre = v6_raw(ip6(1), ip6(2), 47, &[0; 8]);
    let p = ip(parse(&gre));
    assert_eq!((p.tuple.protocol, p.has_ports), (47, false));
    let no_next = v6_raw(ip6(1), ip6(2), 59, &[]);
    assert_eq!(ip(parse(&no_next)).tuple.protocol, 59);
}
