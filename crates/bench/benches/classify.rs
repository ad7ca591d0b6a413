//! Criterion benchmark of [`metronome_packet::Classifier::class_of`] against the number of
//! rules: N rules of one destination address each (`/32`) and destination port 80, the packet
//! matching the last rule (the worst case of a scan in configuration order), and a packet that
//! matches none. Below `LINEAR_MAX_RULES` (16) the classifier scans; above, it searches its
//! shape index (crates/packet/src/classify.rs). Timing lives here, never in tests
//! (CONTRIBUTING.md §15).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ipnet::{IpNet, Ipv4Net};
use metronome_core::ClassId;
use metronome_packet::{ClassRule, Classifier, Ecn, FiveTuple, Fragment, IpPacket};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

/// Rule counts: one, a handful, and the scales of many tenants.
const RULES: [u32; 6] = [1, 10, 100, 1_000, 10_000, 100_000];

/// The destination address of rule `i`: 10.0.0.0 plus `i`.
fn addr(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(0x0a00_0000 + i)
}

/// `n` rules, rule `i` for destination `addr(i)`/32, TCP, destination port 80.
fn classifier(n: u32) -> Classifier {
    let rules = (0..n)
        .map(|i| {
            let rule = ClassRule {
                dst: Some(IpNet::V4(Ipv4Net::new(addr(i), 32).expect("a /32"))),
                protocol: Some(6),
                dst_port: Some((80, 80)),
                ..ClassRule::default()
            };
            (rule, ClassId(1 + i % 1000))
        })
        .collect();
    Classifier::new(rules, ClassId(0))
}

/// A TCP packet to `dst`, port 80.
fn packet(dst: Ipv4Addr) -> IpPacket {
    IpPacket {
        tuple: FiveTuple {
            src: IpAddr::V4(Ipv4Addr::new(192, 168, 0, 1)),
            dst: IpAddr::V4(dst),
            protocol: 6,
            src_port: 40_000,
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
        let classifier = classifier(n);
        let last = packet(addr(n - 1));
        let none = packet(Ipv4Addr::new(172, 16, 0, 1));
        group.bench_with_input(BenchmarkId::new("last_rule", n), &last, |b, p| {
            b.iter(|| classifier.class_of(black_box(p)))
        });
        group.bench_with_input(BenchmarkId::new("no_match", n), &none, |b, p| {
            b.iter(|| classifier.class_of(black_box(p)))
        });
    }
    group.finish();
}

criterion_group!(benches, classify);
criterion_main!(benches);
