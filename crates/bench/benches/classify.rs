//! Criterion benchmark of [`metronome_packet::Classifier::class_of`] against the number of rules,
//! and of single-rule updates ([`metronome_packet::Classifier::push`],
//! [`metronome_packet::Classifier::remove`]) at 100 000 rules: `classify/last_rule`,
//! `classify/no_match`, `classify_src_port/last_rule`, `classify_origin/last_rule`,
//! `update/push_remove_last`, `update/remove_oldest_push`. Timing lives here, never in tests
//! (CONTRIBUTING.md §15). What each configuration holds: ARCHITECTURE.md, "The classifier
//! benchmark".

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ipnet::{IpNet, Ipv4Net};
use metronome_core::ClassId;
use metronome_packet::{ClassRule, Classifier, Ecn, FiveTuple, Fragment, IpPacket};
use std::collections::VecDeque;
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

/// Rule counts: one, a handful, and the scales of many tenants.
const RULES: [u32; 6] = [1, 10, 100, 1_000, 10_000, 100_000];

/// Rule counts of fields of 16 bits (ports, origin tags).
const RULES_16_BITS: [u32; 5] = [1, 100, 1_000, 10_000, 60_000];

/// The class of rule `i`: 1 000 classes in turn (the width of `ClassId` left to inference).
fn class(i: u32) -> ClassId {
    ClassId((1 + i % 1000) as _)
}

/// The destination address of rule `i`: 10.0.0.0 plus `i`.
fn addr(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(0x0a00_0000 + i)
}

/// Rule `i` of the destination configuration: `addr(i)`/32, TCP, destination port 80.
fn host_rule(i: u32) -> ClassRule {
    ClassRule {
        dst: Some(IpNet::V4(Ipv4Net::new(addr(i), 32).expect("a /32"))),
        protocol: Some(6),
        dst_port: Some((80, 80)),
        ..ClassRule::default()
    }
}

fn classifier(n: u32, rule: impl Fn(u32) -> ClassRule) -> Classifier {
    let rules = (0..n).map(|i| (rule(i), class(i))).collect();
    Classifier::new(rules, ClassId(0))
}

/// The source port of rule `i` of the port configuration.
fn src_port(i: u32) -> u16 {
    1 + u16::try_from(i).expect("at most 65 535 rules of ports")
}

fn src_port_rule(i: u32) -> ClassRule {
    let port = src_port(i);
    ClassRule {
        protocol: Some(17),
        src_port: Some((port, port)),
        ..ClassRule::default()
    }
}

fn origin_rule(i: u32) -> ClassRule {
    ClassRule {
        origin: Some(1 + u16::try_from(i).expect("at most 65 535 origins")),
        ..ClassRule::default()
    }
}

/// A packet of `protocol` from 192.168.0.1:`sport` to `dst`:80.
fn packet(dst: Ipv4Addr, protocol: u8, sport: u16) -> IpPacket {
    IpPacket {
        tuple: FiveTuple {
            src: IpAddr::V4(Ipv4Addr::new(192, 168, 0, 1)),
            dst: IpAddr::V4(dst),
            protocol,
            src_port: sport,
            dst_port: 80,
        },
        dscp: 0,
        ecn: Ecn::NotEct,
        ip_offset: 14,
        wire_len: 1514,
        fragment: Fragment::Whole,
        has_ports: true,
        vlan_tags: 0,
        origin: 0,
    }
}

fn classify(c: &mut Criterion) {
    let mut group = c.benchmark_group("classify");
    group.throughput(Throughput::Elements(1));
    group.measurement_time(Duration::from_secs(2));
    for n in RULES {
        let classifier = classifier(n, host_rule);
        let last = packet(addr(n - 1), 6, 40_000);
        let none = packet(Ipv4Addr::new(172, 16, 0, 1), 6, 40_000);
        group.bench_with_input(BenchmarkId::new("last_rule", n), &last, |b, p| {
            b.iter(|| classifier.class_of(black_box(p)))
        });
        group.bench_with_input(BenchmarkId::new("no_match", n), &none, |b, p| {
            b.iter(|| classifier.class_of(black_box(p)))
        });
    }
    group.finish();
}

fn classify_16_bits(c: &mut Criterion) {
    for (name, rule) in [
        ("classify_src_port", src_port_rule as fn(u32) -> ClassRule),
        ("classify_origin", origin_rule),
    ] {
        let mut group = c.benchmark_group(name);
        group.throughput(Throughput::Elements(1));
        group.measurement_time(Duration::from_secs(2));
        for n in RULES_16_BITS {
            let classifier = classifier(n, rule);
            let mut last = packet(addr(0), 17, src_port(n - 1));
            last.origin = 1 + u16::try_from(n - 1).expect("16 bits");
            group.bench_with_input(BenchmarkId::new("last_rule", n), &last, |b, p| {
                b.iter(|| classifier.class_of(black_box(p)))
            });
        }
        group.finish();
    }
}

fn update(c: &mut Criterion) {
    const N: u32 = 100_000;
    let mut group = c.benchmark_group("update");
    group.throughput(Throughput::Elements(1));
    group.measurement_time(Duration::from_secs(2));
    let mut growing = classifier(N, host_rule);
    group.bench_function(BenchmarkId::new("push_remove_last", N), |b| {
        b.iter(|| {
            let id = growing.push(host_rule(N), class(N));
            growing.remove(black_box(id))
        })
    });
    let mut rotating = classifier(N, host_rule);
    let mut ids: VecDeque<_> = rotating.rules_with_ids().map(|(id, _)| id).collect();
    let mut i = 0u32;
    group.bench_function(BenchmarkId::new("remove_oldest_push", N), |b| {
        b.iter(|| {
            let oldest = ids.pop_front().expect("N rules");
            rotating.remove(black_box(oldest));
            ids.push_back(rotating.push(host_rule(i % N), class(i)));
            i += 1;
        })
    });
    group.finish();
}

criterion_group!(benches, classify, classify_16_bits, update);
criterion_main!(benches);
