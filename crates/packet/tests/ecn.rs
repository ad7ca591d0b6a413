//! ECN marking on whole frames: RFC 3168 codepoints, the RFC 1624 checksum update checked
//! against etherparse's and our own full recomputation, VLANs, IPv4 options, IPv6.

mod common;

use common::*;
use etherparse::Ipv4HeaderSlice;
use metronome_packet::{mark_ce, parse, Ecn, EcnCounters, EcnMark, Parsed};

/// etherparse's independent checksum of the IPv4 header at `ip`.
fn etherparse_checksum_ok(frame: &[u8], ip: usize) -> bool {
    let h = Ipv4HeaderSlice::from_slice(&frame[ip..]).unwrap();
    h.header_checksum() == h.to_header().calc_header_checksum()
}

#[test]
fn ect0_and_ect1_v4_become_ce_with_a_valid_checksum() {
    for ecn in [0b01, 0b10] {
        for dscp in [0, 10, 46, 63] {
            let mut frame = v4(
                [10, 0, 0, 1],
                [10, 0, 0, 2],
                L4::Tcp,
                1,
                2,
                (dscp << 2) | ecn,
            );
            let before = frame.clone();
            let parsed = parse(&frame);
            assert_eq!(mark_ce(&mut frame, &parsed), EcnMark::Marked);
            assert!(v4_checksum_ok(&frame, ETH), "dscp {dscp} ecn {ecn}");
            assert!(etherparse_checksum_ok(&frame, ETH));
            let p = parse(&frame).ip().copied().unwrap();
            assert_eq!((p.ecn, p.dscp), (Ecn::Ce, dscp));
            // Only the TOS byte and the checksum changed.
            let changed: Vec<usize> = (0..frame.len())
                .filter(|&i| frame[i] != before[i])
                .collect();
            assert!(
                changed.iter().all(|&i| [15, 24, 25].contains(&i)),
                "{changed:?}"
            );
        }
    }
}

#[test]
fn not_ect_is_untouched_and_ce_is_already_ce() {
    let mut not_ect = v4([10, 0, 0, 1], [10, 0, 0, 2], L4::Udp, 1, 2, 46 << 2);
    let copy = not_ect.clone();
    let parsed = parse(&not_ect);
    assert_eq!(mark_ce(&mut not_ect, &parsed), EcnMark::NotEct);
    assert_eq!(not_ect, copy);

    let mut ce = v4([10, 0, 0, 1], [10, 0, 0, 2], L4::Udp, 1, 2, 0b11);
    let copy = ce.clone();
    let parsed = parse(&ce);
    assert_eq!(mark_ce(&mut ce, &parsed), EcnMark::AlreadyCe);
    assert_eq!(ce, copy);
}

#[test]
fn marking_twice_marks_once() {
    let mut frame = v4([10, 0, 0, 1], [10, 0, 0, 2], L4::Tcp, 1, 2, 0b10);
    let parsed = parse(&frame);
    let mut counters = EcnCounters::default();
    counters.record(mark_ce(&mut frame, &parsed));
    counters.record(mark_ce(&mut frame, &parsed)); // stale parse: the frame is re-read
    assert_eq!((counters.marked, counters.already_ce), (1, 1));
    assert!(v4_checksum_ok(&frame, ETH));
}

#[test]
fn vlan_tagged_and_optioned_ipv4_headers() {
    let plain = v4([10, 0, 0, 1], [10, 0, 0, 2], L4::Tcp, 1, 2, 0b01);
    let mut tagged = with_vlans(&plain, &[(0x88a8, 3), (0x8100, 4)]);
    let parsed = parse(&tagged);
    assert_eq!(mark_ce(&mut tagged, &parsed), EcnMark::Marked);
    assert!(v4_checksum_ok(&tagged, 22));
    assert_eq!(tagged[23] & 0b11, 0b11);

    // IHL 7: two words of options (NOP padding) inserted before the transport header.
    let mut optioned = plain[..34].to_vec();
    optioned.extend_from_slice(&[1; 8]);
    optioned.extend_from_slice(&plain[34..]);
    optioned[ETH] = 0x47;
    let total = u16::from_be_bytes([optioned[16], optioned[17]]) + 8;
    optioned[16..18].copy_from_slice(&total.to_be_bytes());
    fix_v4_checksum(&mut optioned, ETH);
    let parsed = parse(&optioned);
    assert_eq!(parsed.ip().unwrap().tuple.dst_port, 2);
    assert_eq!(mark_ce(&mut optioned, &parsed), EcnMark::Marked);
    assert!(v4_checksum_ok(&optioned, ETH));
    assert!(etherparse_checksum_ok(&optioned, ETH));
}

#[test]
fn ipv6_marks_the_traffic_class_and_keeps_dscp_and_flow_label() {
    for ecn in [0b01, 0b10] {
        let mut frame = v6(ip6(1), ip6(2), L4::Tcp, 1, 2, (46 << 2) | ecn);
        frame[ETH + 1] |= 0x0c; // flow label bits
        let before = frame.clone();
        let parsed = parse(&frame);
        assert_eq!(mark_ce(&mut frame, &parsed), EcnMark::Marked);
        let p = parse(&frame).ip().copied().unwrap();
        assert_eq!((p.ecn, p.dscp), (Ecn::Ce, 46));
        assert_eq!(frame[ETH + 1] & 0x0f, 0x0c);
        let changed: Vec<usize> = (0..frame.len())
            .filter(|&i| frame[i] != before[i])
            .collect();
        assert_eq!(changed, [ETH + 1]);
    }
    let mut not_ect = v6(ip6(1), ip6(2), L4::Udp, 1, 2, 46 << 2);
    let parsed = parse(&not_ect);
    assert_eq!(mark_ce(&mut not_ect, &parsed), EcnMark::NotEct);
    let mut ce = v6(ip6(1), ip6(2), L4::Udp, 1, 2, 3);
    let parsed = parse(&ce);
    assert_eq!(mark_ce(&mut ce, &parsed), EcnMark::AlreadyCe);
}

#[test]
fn non_ip_malformed_and_mismatched_frames_are_not_ip() {
    let mut a = arp();
    let parsed = parse(&a);
    assert_eq!(mark_ce(&mut a, &parsed), EcnMark::NotIp);
    let mut junk = [0u8; 3];
    assert_eq!(mark_ce(&mut junk, &parse(&[0u8; 3])), EcnMark::NotIp);

    // A parse of one frame applied to another: never a panic, never a wrong write.
    let v4frame = v4([10, 0, 0, 1], [10, 0, 0, 2], L4::Tcp, 1, 2, 0b10);
    let parsed_v4 = parse(&v4frame);
    assert!(matches!(parsed_v4, Parsed::Ip(_)));
    let mut short = v4frame[..20].to_vec();
    assert_eq!(mark_ce(&mut short, &parsed_v4), EcnMark::NotIp);
    let mut other = v6(ip6(1), ip6(2), L4::Tcp, 1, 2, 0b10);
    let copy = other.clone();
    assert_eq!(mark_ce(&mut other, &parsed_v4), EcnMark::NotIp);
    assert_eq!(other, copy);
}
