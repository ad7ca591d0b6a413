//! Classifier tests: every rule field, first match, default class, families, fragments, VLANs,
//! origin tags, and the rule index against a linear first-match scan (large and random rule
//! sets).

mod common;

use common::rules::*;
use common::*;
use metronome_core::{ClassId, FlowId};
use metronome_packet::{parse, ClassRule, Classifier, Malformed, Verdict};
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr};

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

/// The class of `frame` once its port gave it `origin`.
fn class_from(c: &Classifier, frame: &[u8], origin: u16) -> ClassId {
    let mut ip = ip_of(frame);
    ip.origin = origin;
    c.class_of(&ip)
}

#[test]
fn parse_gives_no_origin() {
    assert_eq!(ip_of(&tcp4([1, 1, 1, 1], [2, 2, 2, 2], 1, 2)).origin, 0);
}

#[test]
fn an_origin_rule_matches_only_its_origin() {
    let rule = ClassRule {
        origin: Some(7),
        ..Default::default()
    };
    // Alone (a linear scan), and behind enough rules of another shape, matching none of the
    // packets below, that the classifier searches its index.
    let fillers = (0..20u8).map(|i| {
        let rule = ClassRule {
            dst: net(&format!("172.16.{i}.0/24")),
            ..Default::default()
        };
        (rule, ClassId(100 + u32::from(i)))
    });
    let indexed: Vec<_> = fillers.chain([(rule.clone(), ClassId(1))]).collect();
    for c in [one_rule(rule), Classifier::new(indexed, DEFAULT)] {
        for frame in [
            tcp4([1, 1, 1, 1], [2, 2, 2, 2], 1, 2),
            v6(ip6(1), ip6(2), L4::Udp, 1, 2, 0),
        ] {
            assert_eq!(class_from(&c, &frame, 7), ClassId(1));
            for other in [0, 6, 8, 7 << 8, u16::MAX] {
                assert_eq!(class_from(&c, &frame, other), DEFAULT, "origin {other}");
            }
        }
    }
    // `Some(0)` is the packets of no known origin.
    let unknown = one_rule(ClassRule {
        origin: Some(0),
        ..Default::default()
    });
    let frame = tcp4([1, 1, 1, 1], [2, 2, 2, 2], 1, 2);
    assert_eq!(class(&unknown, &frame), ClassId(1));
    assert_eq!(class_from(&unknown, &frame, 3), DEFAULT);
}

#[test]
fn an_origin_narrows_a_rule_and_the_first_match_still_wins() {
    let pod_web = ClassRule {
        origin: Some(5),
        dst_port: Some((443, 443)),
        ..Default::default()
    };
    let pod = ClassRule {
        origin: Some(5),
        ..Default::default()
    };
    let c = Classifier::new(
        vec![
            (pod_web, ClassId(1)),
            (pod, ClassId(2)),
            (ClassRule::default(), ClassId(3)),
        ],
        DEFAULT,
    );
    let https = tcp4([1, 1, 1, 1], [2, 2, 2, 2], 9, 443);
    let http = tcp4([1, 1, 1, 1], [2, 2, 2, 2], 9, 80);
    assert_eq!(class_from(&c, &https, 5), ClassId(1));
    assert_eq!(class_from(&c, &http, 5), ClassId(2));
    assert_eq!(class_from(&c, &https, 4), ClassId(3));
    assert_eq!(class_from(&c, &http, 0), ClassId(3));
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

// The rule index: large and random rule sets against a linear first-match scan.

#[test]
fn ten_thousand_host_rules_each_packet_finds_its_own() {
    let host = |i: u32| (Ipv4Addr::from(0x0a00_0000 | i)).octets();
    let rules: Vec<_> = (0..10_000u32)
        .map(|i| {
            let dst = IpAddr::from(host(i));
            let rule = ClassRule {
                dst: Some(ipnet::IpNet::new(dst, 32).unwrap()),
                ..Default::default()
            };
            (rule, ClassId(1 + i))
        })
        .collect();
    let c = Classifier::new(rules, DEFAULT);
    assert_eq!(c.len(), 10_000);
    for i in 0..10_000u32 {
        let frame = tcp4([192, 0, 2, 1], host(i), 1000, 80);
        assert_eq!(class(&c, &frame), ClassId(1 + i), "rule {i}");
    }
    assert_eq!(class(&c, &tcp4([1, 1, 1, 1], host(10_000), 1, 2)), DEFAULT);
    assert_eq!(
        class(&c, &v6(ip6(1), ip6(2), L4::Tcp, 1, 2, 0)),
        DEFAULT,
        "an IPv6 packet never matches an IPv4 prefix"
    );
}

#[test]
fn first_match_wins_across_rules_of_different_shapes() {
    // Enough rules of their own shapes, matching none of the packets below, that the classifier
    // searches its index rather than scanning.
    let mut rules: Vec<(ClassRule, ClassId)> = (0..24u8)
        .map(|i| {
            let rule = ClassRule {
                dst: net(&format!("172.16.{i}.0/{}", 24 + i % 8)),
                protocol: (i % 2 == 0).then_some(6),
                ..Default::default()
            };
            (rule, ClassId(100 + u32::from(i)))
        })
        .collect();
    let mut push = |rule: ClassRule, class: u32| rules.push((rule, ClassId(class)));
    // 24: the most specific rule comes first for HTTPS to 10.1/16 from 192.168/16.
    push(
        ClassRule {
            dst: net("10.1.0.0/16"),
            src: net("192.168.0.0/16"),
            protocol: Some(6),
            dst_port: Some((443, 443)),
            ..Default::default()
        },
        1,
    );
    // 25: any source in 192.168/16.
    push(
        ClassRule {
            src: net("192.168.0.0/16"),
            ..Default::default()
        },
        2,
    );
    // 26: DSCP 46 anywhere; shadowed by 25 for sources in 192.168/16.
    push(
        ClassRule {
            dscp: Some(46),
            ..Default::default()
        },
        3,
    );
    // 27: the shape of the fillers (destination /24, TCP): found in the first shape visited,
    // yet later than 25 and 26.
    push(
        ClassRule {
            dst: net("10.1.2.0/24"),
            protocol: Some(6),
            ..Default::default()
        },
        4,
    );
    // 28: an unsatisfiable rule that would match everything else.
    push(
        ClassRule {
            dst_port: Some((9, 8)),
            ..Default::default()
        },
        5,
    );
    // 29: everything in 10/8.
    push(
        ClassRule {
            dst: net("10.0.0.0/8"),
            ..Default::default()
        },
        6,
    );
    let c = Classifier::new(rules.clone(), DEFAULT);
    let udp = |src, dst, tos| v4(src, dst, L4::Udp, 5, 443, tos);
    let cases = [
        (tcp4([192, 168, 1, 1], [10, 1, 2, 3], 5, 443), 1),
        (tcp4([192, 168, 1, 1], [10, 1, 2, 3], 5, 80), 2),
        (udp([192, 168, 1, 1], [10, 1, 2, 3], 46 << 2), 2),
        (udp([192, 0, 2, 1], [10, 1, 2, 3], 46 << 2), 3),
        (tcp4([192, 0, 2, 1], [10, 1, 2, 3], 5, 443), 4),
        (udp([192, 0, 2, 1], [10, 1, 2, 3], 0), 6),
        (tcp4([192, 0, 2, 1], [10, 9, 2, 3], 5, 443), 6),
        (tcp4([192, 0, 2, 1], [11, 1, 2, 3], 5, 443), 0),
        (tcp4([172, 16, 3, 1], [172, 16, 3, 1], 5, 443), 103),
    ];
    for (frame, expected) in &cases {
        let ip = ip_of(frame);
        assert_eq!(class(&c, frame), ClassId(*expected), "{ip:?}");
        assert_eq!(first_match(&rules, DEFAULT, &ip), ClassId(*expected));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The classifier gives every packet the class of the first matching rule, as a linear scan
    /// does, whatever the rules: prefixes of both families and every length, DSCP, protocol,
    /// port ranges, origin tags, overlaps, duplicates and unsatisfiable rules.
    #[test]
    fn the_classifier_agrees_with_a_linear_first_match_scan(
        rules in rules(),
        packets in prop::collection::vec(packet(), 64),
    ) {
        let c = Classifier::new(rules.clone(), DEFAULT);
        prop_assert!(c.rules().eq(&rules));
        for p in &packets {
            let ip = p.ip();
            prop_assert_eq!(c.class_of(&ip), first_match(&rules, DEFAULT, &ip), "{:?}", ip);
        }
    }
}

#[test]
fn pushed_rules_match_after_the_others_and_removed_ones_match_nothing() {
    use metronome_packet::RuleId;
    // Over the linear scan's size too, where the index answers.
    for n in [2u16, 40] {
        let port = |i: u16| ClassRule {
            protocol: Some(6),
            dst_port: Some((1000 + i, 1000 + i)),
            ..Default::default()
        };
        let mut c = Classifier::new(
            (0..n)
                .map(|i| (port(i), ClassId(u32::from(i) + 1)))
                .collect(),
            DEFAULT,
        );
        let frame = |dport| tcp4([10, 0, 0, 1], [10, 0, 0, 2], 4000, dport);
        // A pushed rule comes last: an overlapping rule before it still wins.
        let all = ClassRule::default();
        let pushed = c.push(all, ClassId(100));
        assert_eq!(pushed, RuleId(u32::from(n)));
        assert_eq!(class(&c, &frame(1000)), ClassId(1));
        assert_eq!(class(&c, &frame(9)), ClassId(100));
        // Removing the first rule hands its packets to the next match.
        assert!(c.remove(RuleId(0)));
        assert!(!c.remove(RuleId(0)));
        assert_eq!(class(&c, &frame(1000)), ClassId(100));
        assert!(c.remove(pushed));
        assert_eq!(class(&c, &frame(1000)), DEFAULT);
        assert_eq!(class(&c, &frame(1001)), ClassId(2));
        assert_eq!(c.len(), usize::from(n) - 1);
    }
}
