//! Classifier tests: every rule field, first match, default class, families, fragments, VLANs.

mod common;

use common::*;
use metronome_core::{ClassId, FlowId};
use metronome_packet::{parse, ClassRule, Classifier, Malformed, Verdict};

const DEFAULT: ClassId = ClassId(0);

fn net(s: &str) -> Option<ipnet::IpNet> {
    Some(s.parse().unwrap())
}

fn one_rule(rule: ClassRule) -> Classifier {
    Classifier::new(vec![(rule, ClassId(1))], DEFAULT)
}

fn class(c: &Classifier, frame: &[u8]) -> ClassId {
    match c.classify(&parse(frame)) {
        Verdict::Shape { class, .. } => class,
        other => panic!("expected Shape, got {other:?}"),
    }
}

fn flow(c: &Classifier, frame: &[u8]) -> FlowId {
    match c.classify(&parse(frame)) {
        Verdict::Shape { flow, .. } => flow,
        other => panic!("expected Shape, got {other:?}"),
    }
}

fn tcp4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
    v4(src, dst, L4::Tcp, sport, dport, 0)
}

#[test]
fn destination_prefix() {
    let c = one_rule(ClassRule {
        dst: net("10.1.0.0/16"),
        ..Default::default()
    });
    assert_eq!(
        class(&c, &tcp4([10, 0, 0, 1], [10, 1, 200, 3], 1, 2)),
        ClassId(1)
    );
    assert_eq!(
        class(&c, &tcp4([10, 1, 0, 1], [10, 2, 0, 3], 1, 2)),
        DEFAULT
    );
    // Host bits in the configured prefix do not matter.
    let host_bits = one_rule(ClassRule {
        dst: net("10.1.2.3/16"),
        ..Default::default()
    });
    assert_eq!(
        class(&host_bits, &tcp4([1, 1, 1, 1], [10, 1, 9, 9], 1, 2)),
        ClassId(1)
    );
}

#[test]
fn source_prefix() {
    let c = one_rule(ClassRule {
        src: net("192.168.7.0/24"),
        ..Default::default()
    });
    assert_eq!(
        class(&c, &tcp4([192, 168, 7, 99], [10, 0, 0, 1], 1, 2)),
        ClassId(1)
    );
    assert_eq!(
        class(&c, &tcp4([192, 168, 8, 99], [10, 0, 0, 1], 1, 2)),
        DEFAULT
    );
}

#[test]
fn dscp_ignores_the_ecn_bits() {
    let c = one_rule(ClassRule {
        dscp: Some(46),
        ..Default::default()
    });
    for ecn in 0..4 {
        let ef = v4([1, 1, 1, 1], [2, 2, 2, 2], L4::Udp, 1, 2, (46 << 2) | ecn);
        assert_eq!(class(&c, &ef), ClassId(1));
    }
    let af41 = v4([1, 1, 1, 1], [2, 2, 2, 2], L4::Udp, 1, 2, 34 << 2);
    assert_eq!(class(&c, &af41), DEFAULT);
    let ef6 = v6(ip6(1), ip6(2), L4::Udp, 1, 2, (46 << 2) | 1);
    assert_eq!(class(&c, &ef6), ClassId(1));
}

#[test]
fn protocol() {
    let c = one_rule(ClassRule {
        protocol: Some(17),
        ..Default::default()
    });
    assert_eq!(
        class(&c, &v4([1, 1, 1, 1], [2, 2, 2, 2], L4::Udp, 1, 2, 0)),
        ClassId(1)
    );
    assert_eq!(
        class(&c, &v4([1, 1, 1, 1], [2, 2, 2, 2], L4::Tcp, 1, 2, 0)),
        DEFAULT
    );
    assert_eq!(class(&c, &v6(ip6(1), ip6(2), L4::Udp, 1, 2, 0)), ClassId(1));
    let icmp = one_rule(ClassRule {
        protocol: Some(1),
        ..Default::default()
    });
    assert_eq!(
        class(&icmp, &v4([1, 1, 1, 1], [2, 2, 2, 2], L4::Icmp, 0, 0, 0)),
        ClassId(1)
    );
}

#[test]
fn port_ranges_are_inclusive_at_both_ends() {
    let c = one_rule(ClassRule {
        dst_port: Some((5000, 5010)),
        ..Default::default()
    });
    for (port, expected) in [
        (4999, DEFAULT),
        (5000, ClassId(1)),
        (5010, ClassId(1)),
        (5011, DEFAULT),
    ] {
        assert_eq!(
            class(&c, &tcp4([1, 1, 1, 1], [2, 2, 2, 2], 1, port)),
            expected,
            "{port}"
        );
    }
    let src = one_rule(ClassRule {
        src_port: Some((22, 22)),
        ..Default::default()
    });
    assert_eq!(
        class(&src, &tcp4([1, 1, 1, 1], [2, 2, 2, 2], 22, 9)),
        ClassId(1)
    );
    assert_eq!(
        class(&src, &tcp4([1, 1, 1, 1], [2, 2, 2, 2], 9, 22)),
        DEFAULT
    );
}

#[test]
fn a_port_range_containing_zero_never_matches_a_packet_without_ports() {
    let c = one_rule(ClassRule {
        dst_port: Some((0, 100)),
        ..Default::default()
    });
    assert_eq!(
        class(&c, &v4([1, 1, 1, 1], [2, 2, 2, 2], L4::Icmp, 0, 0, 0)),
        DEFAULT
    );
    let tcp = v4_len([1, 1, 1, 1], [2, 2, 2, 2], L4::Tcp, 50, 50, 0, 64);
    assert_eq!(class(&c, &fragment_v4(&tcp, 5, false, 40)), DEFAULT);
    assert_eq!(class(&c, &tcp), ClassId(1));
}

#[test]
fn all_fields_must_match_and_the_first_matching_rule_wins() {
    let web = ClassRule {
        dst: net("10.0.0.0/8"),
        protocol: Some(6),
        dst_port: Some((443, 443)),
        ..Default::default()
    };
    let tenant = ClassRule {
        dst: net("10.0.0.0/8"),
        ..Default::default()
    };
    let c = Classifier::new(
        vec![(web.clone(), ClassId(1)), (tenant.clone(), ClassId(2))],
        DEFAULT,
    );
    assert_eq!(
        class(&c, &tcp4([1, 1, 1, 1], [10, 0, 0, 1], 9, 443)),
        ClassId(1)
    );
    assert_eq!(
        class(&c, &tcp4([1, 1, 1, 1], [10, 0, 0, 1], 9, 80)),
        ClassId(2)
    );
    assert_eq!(
        class(&c, &v4([1, 1, 1, 1], [10, 0, 0, 1], L4::Udp, 9, 443, 0)),
        ClassId(2)
    );
    assert_eq!(
        class(&c, &tcp4([1, 1, 1, 1], [11, 0, 0, 1], 9, 443)),
        DEFAULT
    );
    // Reversed order: the broad rule shadows the narrow one.
    let reversed = Classifier::new(vec![(tenant, ClassId(2)), (web, ClassId(1))], DEFAULT);
    assert_eq!(
        class(&reversed, &tcp4([1, 1, 1, 1], [10, 0, 0, 1], 9, 443)),
        ClassId(2)
    );
}

#[test]
fn default_class_and_the_empty_rule() {
    let none = Classifier::new(Vec::new(), ClassId(9));
    assert_eq!(
        class(&none, &tcp4([1, 1, 1, 1], [2, 2, 2, 2], 1, 2)),
        ClassId(9)
    );
    assert_eq!(none.default_class(), ClassId(9));
    let all = one_rule(ClassRule::default());
    assert_eq!(
        class(&all, &tcp4([1, 1, 1, 1], [2, 2, 2, 2], 1, 2)),
        ClassId(1)
    );
    assert_eq!(
        class(&all, &v6(ip6(1), ip6(2), L4::Icmp, 0, 0, 0)),
        ClassId(1)
    );
}

#[test]
fn prefixes_never_cross_families_but_port_rules_match_both() {
    let v4_any = one_rule(ClassRule {
        dst: net("0.0.0.0/0"),
        ..Default::default()
    });
    let v6_any = one_rule(ClassRule {
        src: net("::/0"),
        ..Default::default()
    });
    let p4 = tcp4([1, 1, 1, 1], [2, 2, 2, 2], 1, 2);
    let p6 = v6(ip6(1), ip6(2), L4::Tcp, 1, 2, 0);
    assert_eq!(
        (class(&v4_any, &p4), class(&v4_any, &p6)),
        (ClassId(1), DEFAULT)
    );
    assert_eq!(
        (class(&v6_any, &p4), class(&v6_any, &p6)),
        (DEFAULT, ClassId(1))
    );
    let v6_net = one_rule(ClassRule {
        dst: net("2001:db8::/112"),
        ..Default::default()
    });
    assert_eq!(class(&v6_net, &p6), ClassId(1));
    let ports = one_rule(ClassRule {
        dst_port: Some((2, 2)),
        ..Default::default()
    });
    assert_eq!(
        (class(&ports, &p4), class(&ports, &p6)),
        (ClassId(1), ClassId(1))
    );
    let mixed = ClassRule {
        dst: net("10.0.0.0/8"),
        src: net("::/0"),
        ..Default::default()
    };
    assert!(mixed.is_unsatisfiable());
    assert!(ClassRule {
        dst_port: Some((9, 8)),
        ..Default::default()
    }
    .is_unsatisfiable());
    assert!(!ClassRule::default().is_unsatisfiable());
}

#[test]
fn vlan_tagged_frames_classify_and_hash_like_untagged_ones() {
    let c = one_rule(ClassRule {
        dst: net("10.1.0.0/16"),
        dst_port: Some((80, 80)),
        ..Default::default()
    });
    let plain = tcp4([10, 0, 0, 1], [10, 1, 0, 1], 1234, 80);
    for tags in [&[(0x8100, 10)][..], &[(0x88a8, 1), (0x8100, 10)][..]] {
        let tagged = with_vlans(&plain, tags);
        assert_eq!(class(&c, &tagged), ClassId(1));
        assert_eq!(flow(&c, &tagged), flow(&c, &plain));
    }
}

#[test]
fn first_fragment_by_its_ports_later_fragments_by_addresses_only() {
    let c = one_rule(ClassRule {
        dst_port: Some((443, 443)),
        ..Default::default()
    });
    let tcp = v4_len([1, 1, 1, 1], [2, 2, 2, 2], L4::Tcp, 9, 443, 0, 64);
    assert_eq!(class(&c, &fragment_v4(&tcp, 0, true, 48)), ClassId(1));
    assert_eq!(class(&c, &fragment_v4(&tcp, 6, false, 40)), DEFAULT);
    assert_eq!(class(&c, &fragment_v4(&tcp, 0, true, 16)), DEFAULT);
}

#[test]
fn non_ip_passes_and_malformed_carries_its_reason() {
    let c = one_rule(ClassRule::default());
    assert_eq!(c.classify(&parse(&arp())), Verdict::PassNonIp);
    assert_eq!(
        c.classify(&parse(&[0u8; 5])),
        Verdict::Malformed(Malformed::TruncatedEthernet)
    );
    assert_eq!(Verdict::PassNonIp.packet_ref(3), None);
}

#[test]
fn flows_follow_the_five_tuple_and_the_seed() {
    let c = Classifier::new(Vec::new(), DEFAULT);
    let a = v4_len([1, 1, 1, 1], [2, 2, 2, 2], L4::Tcp, 1000, 80, 0, 10);
    let a_longer = v4_len([1, 1, 1, 1], [2, 2, 2, 2], L4::Tcp, 1000, 80, 46 << 2, 900);
    let b = v4_len([1, 1, 1, 1], [2, 2, 2, 2], L4::Tcp, 1001, 80, 0, 10);
    assert_eq!(flow(&c, &a), flow(&c, &a_longer));
    assert_ne!(flow(&c, &a), flow(&c, &b));
    let seeded = c.clone().with_flow_seed(42);
    assert_eq!(seeded.flow_seed(), 42);
    assert_ne!(flow(&seeded, &a), flow(&c, &a));

    let Verdict::Shape { class, flow, len } = c.classify(&parse(&a_longer)) else {
        panic!()
    };
    assert_eq!(usize::from(len), a_longer.len());
    let r = c.classify(&parse(&a_longer)).packet_ref(77).unwrap();
    assert_eq!((r.id, r.flow, r.class, r.len), (77, flow, class, len));
}
