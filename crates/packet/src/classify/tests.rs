//! The index's own invariants under random pushes and removals: shapes in strictly increasing
//! order of their first rule, each shape's first rule exact, no empty shape, the index present
//! above `LINEAR_MAX_RULES` rules and absent at half of it; and every packet's class that of a
//! linear first-match scan of the rules left. The public behaviour is tested in
//! `crates/packet/tests/classify_index.rs`.

use super::*;
use crate::frame::{Ecn, FiveTuple, Fragment};
use proptest::prelude::*;
use std::net::IpAddr;

const DEFAULT: ClassId = ClassId(0);

/// Few values per field, so that rules share shapes and keys and packets hit them.
fn rule() -> impl Strategy<Value = ClassRule> {
    let dst = prop::sample::select(vec![
        None,
        Some("10.0.0.0/8"),
        Some("10.1.0.0/16"),
        Some("10.1.2.3/32"),
        Some("10.1.2.4/32"),
        Some("2001:db8::1/128"),
        Some("2001:db8::/64"),
    ]);
    let src = prop::sample::select(vec![None, None, Some("192.168.0.0/16"), Some("::/0")]);
    let small = |n: u8| prop_oneof![2 => Just(None), 1 => (0..n).prop_map(Some)];
    let port = prop_oneof![
        3 => Just(None),
        3 => (0u16..4).prop_map(|p| Some((p, p))),
        2 => (0u16..5, 0u16..5).prop_map(Some),
    ];
    let protocol = prop::sample::select(vec![None, Some(6), Some(17)]);
    let origin = prop_oneof![2 => Just(None), 1 => (0u16..3).prop_map(Some)];
    (dst, src, small(3), protocol, port.clone(), port, origin).prop_map(
        |(dst, src, dscp, protocol, dst_port, src_port, origin)| ClassRule {
            dst: dst.map(|s| s.parse().unwrap()),
            src: src.map(|s| s.parse().unwrap()),
            dscp,
            protocol,
            dst_port,
            src_port,
            origin,
        },
    )
}

fn packet() -> impl Strategy<Value = IpPacket> {
    let dst = prop::sample::select(vec!["10.1.2.3", "10.1.2.4", "10.9.9.9", "2001:db8::1"]);
    let src = prop::sample::select(vec!["192.168.1.1", "172.16.0.1", "2001:db8::2"]);
    (
        dst,
        src,
        0u8..3,
        any::<bool>(),
        0u16..5,
        0u16..5,
        0u16..3,
        any::<bool>(),
    )
        .prop_map(
            |(dst, src, dscp, tcp, dst_port, src_port, origin, has_ports)| {
                let dst: IpAddr = dst.parse().unwrap();
                let src: IpAddr = src.parse().unwrap();
                IpPacket {
                    tuple: FiveTuple {
                        // One family per packet: the source follows the destination's.
                        src: if src.is_ipv4() == dst.is_ipv4() {
                            src
                        } else {
                            dst
                        },
                        dst,
                        protocol: if tcp { 6 } else { 17 },
                        src_port: if has_ports { src_port } else { 0 },
                        dst_port: if has_ports { dst_port } else { 0 },
                    },
                    dscp,
                    ecn: Ecn::NotEct,
                    ip_offset: 14,
                    wire_len: 100,
                    fragment: Fragment::Whole,
                    has_ports,
                    vlan_tags: 0,
                    origin,
                }
            },
        )
}

#[derive(Clone, Debug)]
enum Op {
    Push(ClassRule),
    /// Removes the rule at this position (modulo the number of rules) of the live rules.
    Remove(usize),
    /// Removes an id never handed out.
    RemoveUnknown,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => rule().prop_map(Op::Push),
        4 => any::<usize>().prop_map(Op::Remove),
        1 => Just(Op::RemoveUnknown),
    ]
}

/// Checks `c` against the model: the live rules with their ids, in order.
fn check(c: &Classifier, model: &[(RuleId, ClassRule, ClassId)], packets: &[IpPacket]) {
    let rules: Vec<_> = c
        .rules_with_ids()
        .map(|(id, (r, k))| (id, r.clone(), *k))
        .collect();
    assert_eq!(rules, model);
    assert_eq!(c.len(), model.len());
    if model.len() > LINEAR_MAX_RULES {
        assert!(c.index.is_some(), "no index at {} rules", model.len());
    }
    if model.len() <= LINEAR_MAX_RULES / 2 {
        assert!(c.index.is_none(), "an index at {} rules", model.len());
    }
    if let Some(index) = &c.index {
        let live: Vec<_> = model.iter().map(|(id, r, _)| (id.0, r)).collect();
        index.check(&live);
    }
    for ip in packets {
        let expected = model
            .iter()
            .find(|(_, r, _)| r.matches(ip))
            .map_or(DEFAULT, |&(_, _, class)| class);
        assert_eq!(c.class_of(ip), expected, "{ip:?}");
    }
}

/// What a configuration costs a packet: its number of shapes and its longest list of one key.
fn shapes_and_longest_list(rules: Vec<(ClassRule, ClassId)>) -> (usize, usize) {
    let c = Classifier::new(rules, DEFAULT);
    c.index
        .as_ref()
        .expect("an index")
        .shapes_and_longest_list()
}

#[test]
fn exact_ports_are_keys_and_ranges_stay_in_the_lists() {
    let udp_from = |lo: u16, hi: u16| ClassRule {
        protocol: Some(17),
        src_port: Some((lo, hi)),
        ..Default::default()
    };
    let to = |port: u16| ClassRule {
        dst_port: Some((port, port)),
        ..Default::default()
    };
    let class = |i: u16| ClassId(i as _);
    let exact: Vec<_> = (0..10_000u16)
        .map(|i| (udp_from(20_001 + i, 20_001 + i), class(i)))
        .collect();
    assert_eq!(shapes_and_longest_list(exact.clone()), (1, 1));
    // Exact destination ports: a shape of their own; the same port twice shares a key.
    let mut mixed = exact;
    mixed.extend((0..100u16).map(|i| (to(i % 50), class(i))));
    assert_eq!(shapes_and_longest_list(mixed.clone()), (2, 2));
    // Ranges of one protocol: one key, a list in rule order.
    mixed.extend((0..30u16).map(|i| (udp_from(i, i + 1), class(i))));
    assert_eq!(shapes_and_longest_list(mixed), (3, 30));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn the_index_keeps_its_invariants_through_pushes_and_removals(
        initial in prop::collection::vec(rule(), 0..40),
        ops in prop::collection::vec(op(), 0..120),
        packets in prop::collection::vec(packet(), 24),
    ) {
        let mut model: Vec<(RuleId, ClassRule, ClassId)> = Vec::new();
        let mut next = 0u32;
        let mut class = 1u32;
        let mut new_class = || {
            class += 1;
            // Class ids cycle through few values so that the class alone cannot tell rules apart.
            ClassId((class % 7 + 1) as _)
        };
        let rules: Vec<_> = initial.into_iter().map(|r| (r, new_class())).collect();
        for (r, k) in &rules {
            model.push((RuleId(next), r.clone(), *k));
            next += 1;
        }
        let mut c = Classifier::new(rules, DEFAULT);
        check(&c, &model, &packets);
        for op in ops {
            match op {
                Op::Push(rule) => {
                    let k = new_class();
                    let id = c.push(rule.clone(), k);
                    prop_assert_eq!(id, RuleId(next));
                    next += 1;
                    model.push((id, rule, k));
                }
                Op::Remove(at) if !model.is_empty() => {
                    let (id, _, _) = model.remove(at % model.len());
                    prop_assert!(c.remove(id));
                    prop_assert!(!c.remove(id), "removed twice");
                }
                Op::Remove(_) => prop_assert!(!c.remove(RuleId(0))),
                Op::RemoveUnknown => prop_assert!(!c.remove(RuleId(next + 5))),
            }
            check(&c, &model, &packets);
        }
    }
}
