//! The classifier's index at scale and under single-rule updates: the large configurations a
//! host of many tenants has (exact ports, /32 destinations, origins, /24 sources with a
//! protocol, broad rules first and many exact ones after), and random sequences of
//! `Classifier::new`, `push` and `remove`, all against a linear first-match scan of the rules in
//! order (`common::rules::first_match`).

mod common;

use common::rules::*;
use metronome_core::ClassId;
use metronome_packet::{
    ClassRule, Classifier, Ecn, FiveTuple, Fragment, IpPacket, Parsed, RuleId, Verdict,
};
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr};

const DEFAULT: ClassId = ClassId(0);

/// Class `i` of a test, whatever the width of `ClassId`.
fn class_no(i: u32) -> ClassId {
    ClassId(i as _)
}

/// A UDP (`protocol` 17) or TCP (6) packet from `src`:`sport` to `dst`:`dport`, with ports.
fn packet4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, sport: u16, dport: u16) -> IpPacket {
    IpPacket {
        tuple: FiveTuple {
            src: IpAddr::V4(src),
            dst: IpAddr::V4(dst),
            protocol,
            src_port: sport,
            dst_port: dport,
        },
        dscp: 0,
        ecn: Ecn::NotEct,
        ip_offset: 14,
        wire_len: 100,
        fragment: Fragment::Whole,
        has_ports: true,
        vlan_tags: 0,
        origin: 0,
    }
}

const CLIENT: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const SERVER: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);

/// Address `i` of 10.0.0.0/8.
fn host(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(0x0a00_0000 | i)
}

fn slash(addr: Ipv4Addr, len: u8) -> Option<ipnet::IpNet> {
    Some(ipnet::IpNet::new(IpAddr::V4(addr), len).unwrap())
}

/// Checks `c` against the linear scan of `rules` for every packet.
fn agrees(c: &Classifier, rules: &[(ClassRule, ClassId)], packets: &[IpPacket]) {
    for ip in packets {
        assert_eq!(c.class_of(ip), first_match(rules, DEFAULT, ip), "{ip:?}");
    }
}

#[test]
fn ten_thousand_exact_source_ports_and_a_range_among_them() {
    // Rule i: UDP from port 20 001 + i; rule 5 000 is instead the range 25 000-30 000, which
    // takes the ports of the exact rules after it.
    let rules: Vec<_> = (0..10_000u32)
        .map(|i| {
            let src_port = if i == 5_000 {
                (25_000, 30_000)
            } else {
                let p = 20_001 + i as u16;
                (p, p)
            };
            let rule = ClassRule {
                protocol: Some(17),
                src_port: Some(src_port),
                ..Default::default()
            };
            (rule, class_no(1 + i))
        })
        .collect();
    let c = Classifier::new(rules.clone(), DEFAULT);
    for i in 0..10_000u32 {
        let port = 20_001 + i as u16;
        let udp = packet4(CLIENT, SERVER, 17, port, 53);
        let expected = if (25_000..=30_000).contains(&port) && i > 5_000 {
            class_no(5_001)
        } else {
            class_no(1 + i)
        };
        assert_eq!(c.class_of(&udp), expected, "port {port}");
    }
    let tcp = packet4(CLIENT, SERVER, 6, 20_001, 53);
    let mut no_ports = packet4(CLIENT, SERVER, 17, 20_001, 53);
    no_ports.has_ports = false;
    let above = packet4(CLIENT, SERVER, 17, 40_000, 53);
    agrees(&c, &rules, &[tcp, no_ports, above]);
    assert_eq!(c.class_of(&tcp), DEFAULT);
    assert_eq!(c.class_of(&no_ports), DEFAULT);
}

#[test]
fn exact_destination_ports_with_and_without_a_destination() {
    // Rule 2i: TCP to SERVER port p; rule 2i + 1: any destination, port p, UDP. Exact source and
    // destination port together in a few rules.
    let mut rules = Vec::new();
    for p in 1..=2_000u16 {
        let to_server = ClassRule {
            dst: slash(SERVER, 32),
            protocol: Some(6),
            dst_port: Some((p, p)),
            ..Default::default()
        };
        let udp = ClassRule {
            protocol: Some(17),
            dst_port: Some((p, p)),
            ..Default::default()
        };
        rules.push((to_server, class_no(2 * u32::from(p))));
        rules.push((udp, class_no(2 * u32::from(p) + 1)));
    }
    rules.push((
        ClassRule {
            src_port: Some((7, 7)),
            dst_port: Some((7, 7)),
            ..Default::default()
        },
        class_no(9_999),
    ));
    let c = Classifier::new(rules.clone(), DEFAULT);
    let mut packets = Vec::new();
    for p in (0..=2_100u16).step_by(7) {
        for protocol in [6, 17] {
            packets.push(packet4(CLIENT, SERVER, protocol, 7, p));
            packets.push(packet4(CLIENT, host(1), protocol, 7, p));
        }
    }
    agrees(&c, &rules, &packets);
    assert_eq!(
        c.class_of(&packet4(CLIENT, SERVER, 6, 1, 80)),
        class_no(160)
    );
    assert_eq!(
        c.class_of(&packet4(CLIENT, host(1), 6, 7, 7)),
        class_no(9_999)
    );
}

#[test]
fn a_hundred_thousand_host_destinations() {
    let rules: Vec<_> = (0..100_000u32)
        .map(|i| {
            let rule = ClassRule {
                dst: slash(host(i), 32),
                ..Default::default()
            };
            (rule, class_no(1 + i))
        })
        .collect();
    let c = Classifier::new(rules, DEFAULT);
    assert_eq!(c.len(), 100_000);
    for i in (0..100_000u32).step_by(7).chain([99_999]) {
        let ip = packet4(CLIENT, host(i), 6, 1, 80);
        assert_eq!(c.class_of(&ip), class_no(1 + i), "host {i}");
    }
    assert_eq!(
        c.class_of(&packet4(CLIENT, host(100_000), 6, 1, 80)),
        DEFAULT
    );
}

#[test]
fn sixty_thousand_origins() {
    // Origin tags are 16 bits: 60 000 workloads, one class each, and a catch-all last (a class
    // no origin rule has, whatever the width of class ids).
    let mut rules: Vec<_> = (1..=60_000u16)
        .map(|o| {
            let rule = ClassRule {
                origin: Some(o),
                ..Default::default()
            };
            (rule, class_no(u32::from(o)))
        })
        .collect();
    rules.push((ClassRule::default(), class_no(65_535)));
    let c = Classifier::new(rules, DEFAULT);
    for o in (1..=60_000u16).step_by(11).chain([60_000]) {
        let mut ip = packet4(CLIENT, SERVER, 6, 1, 80);
        ip.origin = o;
        assert_eq!(c.class_of(&ip), class_no(u32::from(o)), "origin {o}");
    }
    let mut unknown = packet4(CLIENT, SERVER, 6, 1, 80);
    unknown.origin = 60_001;
    assert_eq!(c.class_of(&unknown), class_no(65_535));
}

#[test]
fn source_slash_24_prefixes_with_a_protocol() {
    // Rule 2i: TCP from 10.i.0/24 (i in 16 bits); rule 2i + 1: UDP from the same /24.
    let mut rules = Vec::new();
    for i in 0..5_000u32 {
        let net = host(i << 8);
        for (k, protocol) in [(0, 6), (1, 17)] {
            let rule = ClassRule {
                src: slash(net, 24),
                protocol: Some(protocol),
                ..Default::default()
            };
            rules.push((rule, class_no(2 * i + k + 1)));
        }
    }
    let c = Classifier::new(rules.clone(), DEFAULT);
    for i in (0..5_000u32).step_by(13) {
        let src = host((i << 8) | 77);
        assert_eq!(
            c.class_of(&packet4(src, SERVER, 6, 1, 2)),
            class_no(2 * i + 1)
        );
        assert_eq!(
            c.class_of(&packet4(src, SERVER, 17, 1, 2)),
            class_no(2 * i + 2)
        );
        let mut icmp = packet4(src, SERVER, 1, 0, 0);
        icmp.has_ports = false;
        assert_eq!(c.class_of(&icmp), DEFAULT);
    }
}

#[test]
fn broad_rules_first_then_a_hundred_thousand_exact_ones() {
    // Rule 0: DSCP 46 anywhere; rule 1: TCP port 22; then 100 000 /32 destinations with UDP
    // port 53; and last a catch-all for 10/8. First match wins across all of them.
    let mut rules = vec![
        (
            ClassRule {
                dscp: Some(46),
                ..Default::default()
            },
            class_no(1),
        ),
        (
            ClassRule {
                protocol: Some(6),
                dst_port: Some((22, 22)),
                ..Default::default()
            },
            class_no(2),
        ),
    ];
    for i in 0..100_000u32 {
        let rule = ClassRule {
            dst: slash(host(i), 32),
            protocol: Some(17),
            dst_port: Some((53, 53)),
            ..Default::default()
        };
        rules.push((rule, class_no(10 + i)));
    }
    rules.push((
        ClassRule {
            dst: slash(host(0), 8),
            ..Default::default()
        },
        class_no(3),
    ));
    let c = Classifier::new(rules.clone(), DEFAULT);
    let mut packets = Vec::new();
    for i in (0..100_000u32).step_by(101).chain([99_999, 100_000]) {
        let dns = packet4(CLIENT, host(i), 17, 1_000, 53);
        let mut ef = dns;
        ef.dscp = 46;
        packets.extend([
            dns,
            ef,
            packet4(CLIENT, host(i), 6, 1_000, 22),
            packet4(CLIENT, host(i), 17, 1_000, 54),
        ]);
        let expected = if i < 100_000 { 10 + i } else { 3 };
        assert_eq!(c.class_of(&dns), class_no(expected));
        assert_eq!(c.class_of(&ef), class_no(1));
    }
    agrees(&c, &rules, &packets);
}

#[test]
fn a_pushed_rule_comes_after_every_older_one_and_a_removal_uncovers_it() {
    let web = ClassRule {
        dst: slash(SERVER, 32),
        protocol: Some(6),
        dst_port: Some((443, 443)),
        ..Default::default()
    };
    let server = ClassRule {
        dst: slash(SERVER, 32),
        ..Default::default()
    };
    // Enough other rules that the classifier searches its index.
    let fillers: Vec<_> = (0..40u32)
        .map(|i| {
            let rule = ClassRule {
                dst: slash(host(i), 32),
                ..Default::default()
            };
            (rule, class_no(100 + i))
        })
        .collect();
    for mut c in [
        Classifier::new(Vec::new(), DEFAULT),
        Classifier::new(fillers, DEFAULT),
    ] {
        let n = c.len();
        let https = packet4(CLIENT, SERVER, 6, 1, 443);
        let broad = c.push(server.clone(), class_no(1));
        assert_eq!(broad, RuleId(n as u32));
        let narrow = c.push(web.clone(), class_no(2));
        assert_eq!(narrow, RuleId(n as u32 + 1));
        assert_eq!(
            c.class_of(&https),
            class_no(1),
            "the older, broader rule wins"
        );
        assert!(c.remove(broad));
        assert_eq!(
            c.class_of(&https),
            class_no(2),
            "its removal uncovers the newer one"
        );
        assert!(!c.remove(broad));
        let again = c.push(server.clone(), class_no(3));
        assert_eq!(again, RuleId(n as u32 + 2), "ids are never reused");
        assert_eq!(c.class_of(&https), class_no(2));
        assert_eq!(c.rule(again), Some(&(server.clone(), class_no(3))));
        assert_eq!(c.rule(broad), None);
        let ids: Vec<_> = c.rules_with_ids().map(|(id, _)| id).collect();
        assert_eq!(&ids[n..], &[narrow, again]);
    }
}

#[test]
fn growing_past_the_scan_by_pushes_and_shrinking_back() {
    let mut c = Classifier::new(Vec::new(), DEFAULT);
    let mut rules = Vec::new();
    let mut ids = Vec::new();
    for i in 0..200u32 {
        let rule = ClassRule {
            dst: slash(host(i % 50), 32 - (i / 50) as u8),
            ..Default::default()
        };
        ids.push(c.push(rule.clone(), class_no(1 + i)));
        rules.push((rule, class_no(1 + i)));
    }
    let packets: Vec<_> = (0..60u32)
        .map(|i| packet4(CLIENT, host(i), 6, 1, 2))
        .collect();
    agrees(&c, &rules, &packets);
    // Remove from the front, checking on the way down to none.
    for (k, id) in ids.iter().enumerate() {
        assert!(c.remove(*id));
        agrees(&c, &rules[k + 1..], &packets);
    }
    assert!(c.is_empty());
}

/// A rule of many exact ports: few values, so that packets hit them; sometimes a range, a
/// prefix, a protocol or an origin beside them.
fn port_rule() -> impl Strategy<Value = ClassRule> {
    let port = prop_oneof![
        2 => Just(None),
        4 => (0u16..7).prop_map(|p| Some((p, p))),
        1 => (0u16..7, 0u16..7).prop_map(Some),
    ];
    let protocol = prop_oneof![2 => Just(None), 1 => Just(Some(6)), 1 => Just(Some(17))];
    let dst = prop_oneof![3 => Just(None), 1 => prefix().prop_map(Some)];
    let origin = prop_oneof![3 => Just(None), 1 => (0u16..3).prop_map(Some)];
    (dst, protocol, port.clone(), port, origin).prop_map(
        |(dst, protocol, dst_port, src_port, origin)| ClassRule {
            dst,
            protocol,
            dst_port,
            src_port,
            origin,
            ..Default::default()
        },
    )
}

fn any_rule() -> impl Strategy<Value = ClassRule> {
    prop_oneof![3 => rule(), 2 => port_rule(), 1 => host_rule()]
}

#[derive(Clone, Debug)]
enum Op {
    Push(ClassRule),
    /// Removes the live rule at this position, modulo their number.
    Remove(usize),
    /// Removes an id that is not there: never handed out or already removed.
    RemoveAbsent(u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => any_rule().prop_map(Op::Push),
        4 => any::<usize>().prop_map(Op::Remove),
        1 => any::<u32>().prop_map(Op::RemoveAbsent),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Rules of many exact ports, ranges beside them, against the linear scan.
    #[test]
    fn exact_ports_and_ranges_agree_with_a_linear_scan(
        rules in prop::collection::vec(any_rule(), 0..=150),
        packets in prop::collection::vec(packet(), 64),
    ) {
        let rules: Vec<_> = rules
            .into_iter()
            .enumerate()
            .map(|(i, r)| (r, class_no(1 + i as u32)))
            .collect();
        let c = Classifier::new(rules.clone(), DEFAULT);
        for p in &packets {
            let ip = p.ip();
            prop_assert_eq!(c.class_of(&ip), first_match(&rules, DEFAULT, &ip), "{:?}", ip);
        }
    }

    /// `new`, then pushes and removals in any order: the rules left, their ids and every
    /// packet's class are those of the model, a list the pushes append to.
    #[test]
    fn pushes_and_removals_agree_with_a_linear_scan_of_the_rules_left(
        initial in prop::collection::vec(any_rule(), 0..=40),
        ops in prop::collection::vec(op(), 0..=150),
        packets in prop::collection::vec(packet(), 32),
    ) {
        let mut model: Vec<(RuleId, (ClassRule, ClassId))> = Vec::new();
        let mut handed_out = 0u32;
        let mut next_class = 1u32;
        let mut fresh = |rule: ClassRule| {
            next_class += 1;
            (rule, class_no(next_class))
        };
        let initial: Vec<_> = initial.into_iter().map(&mut fresh).collect();
        for rule in &initial {
            model.push((RuleId(handed_out), rule.clone()));
            handed_out += 1;
        }
        let mut c = Classifier::new(initial, DEFAULT);
        for op in ops {
            match op {
                Op::Push(rule) => {
                    let (rule, class) = fresh(rule);
                    let id = c.push(rule.clone(), class);
                    prop_assert_eq!(id, RuleId(handed_out));
                    handed_out += 1;
                    model.push((id, (rule, class)));
                }
                Op::Remove(at) if !model.is_empty() => {
                    let (id, _) = model.remove(at % model.len());
                    prop_assert!(c.remove(id));
                }
                Op::Remove(_) => {}
                Op::RemoveAbsent(id) => {
                    let id = RuleId(id);
                    let present = model.iter().any(|(m, _)| *m == id);
                    if !present {
                        prop_assert!(!c.remove(id));
                    }
                }
            }
            let rules: Vec<_> = model.iter().map(|(_, r)| r.clone()).collect();
            prop_assert!(c.rules().eq(&rules));
            prop_assert!(c.rules_with_ids().map(|(id, _)| id).eq(model.iter().map(|(id, _)| *id)));
            prop_assert_eq!(c.len(), model.len());
            for p in &packets {
                let ip = p.ip();
                let expected = first_match(&rules, DEFAULT, &ip);
                prop_assert_eq!(c.class_of(&ip), expected, "{:?}", ip);
                // Through the exact-match cache too: the same packets after every change, so
                // an entry of the rules before the change must not answer.
                prop_assert_eq!(verdict_class(&c, ip), expected, "cached {:?}", ip);
            }
        }
    }
}

/// The class `classify` gives `ip` (through the exact-match cache when the index is in use).
fn verdict_class(c: &Classifier, ip: IpPacket) -> ClassId {
    match c.classify(&Parsed::Ip(ip)) {
        Verdict::Shape { class, .. } => class,
        other => panic!("an IP packet classified as {other:?}"),
    }
}
