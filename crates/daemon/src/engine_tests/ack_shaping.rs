//! ACK shaping on crafted frames: rewritten, suppressed and generated ACKs, checksums verified
//! with an RFC 1071 sum written here (independent of `metronome_packet`) and with etherparse.

use crate::datapath::ack_shaping::*;
use crate::datapath::flow_seed::FlowSeed;
use crate::ops::config::Config;
use crate::ops::metrics::{EngineMetrics, Metrics};
use etherparse::{PacketBuilder, TcpOptionElement};
use metronome_core::Timestamp;
use metronome_io::FramePool;
use metronome_packet::{proto, FiveTuple};
use std::net::IpAddr;

/// Data flows 10.0.0.1:40000 -> 10.0.0.2:5201 (inside -> outside); their ACKs come back.
const CONFIG: &str = r#"
[interfaces]
inside = "in0"
outside = "out0"

[[class]]
name = "incast"
match = { protocol = "tcp", dst_port = 5201 }
ack_shaping = { rate = "8mbit", per = "flow", flows = 16 }

[[class]]
name = "other"
match = { protocol = "tcp", dst_port = 5301 }
"#;

const BASE: u32 = 1_000_000;

fn config(text: &str) -> Config {
    Config::from_toml_str(text, "test.toml").unwrap()
}

fn us(n: u64) -> Timestamp {
    Timestamp::from_nanos(1_000_000_000 + n * 1_000)
}

/// An ACK from the receiver (10.0.0.2:`from_port`) to the sender, acknowledging `ack`, with a
/// timestamps option and `payload`.
fn ack_v4(from_port: u16, ack: u32, payload: &[u8]) -> Vec<u8> {
    let b = PacketBuilder::ethernet2([4; 6], [2; 6])
        .ipv4([10, 0, 0, 2], [10, 0, 0, 1], 64)
        .tcp(from_port, 40000, 777, 5000)
        .ack(ack)
        .options(&[TcpOptionElement::Timestamp(11, 22)])
        .unwrap();
    let mut out = Vec::new();
    b.write(&mut out, payload).unwrap();
    out
}

fn ack_v6(ack: u32) -> Vec<u8> {
    let b = PacketBuilder::ethernet2([4; 6], [2; 6])
        .ipv6([0x20; 16], [0x21; 16], 64)
        .tcp(5201, 40000, 777, 5000)
        .ack(ack);
    let mut out = Vec::new();
    b.write(&mut out, &[]).unwrap();
    out
}

/// One's-complement sum of big-endian 16-bit words (RFC 1071), folded.
fn ones_sum(bytes: &[u8], mut sum: u32) -> u32 {
    for w in bytes.chunks(2) {
        sum += u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum
}

/// True when the TCP checksum of the untagged Ethernet frame verifies (sum over pseudo-header
/// and segment is 0xFFFF), and, for IPv4, the header checksum too.
fn checksums_valid(frame: &[u8]) -> bool {
    let ip = &frame[14..];
    let (pseudo, segment) = if ip[0] >> 4 == 4 {
        let ihl = usize::from(ip[0] & 15) * 4;
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        if ones_sum(&ip[..ihl], 0) != 0xffff {
            return false;
        }
        let seg = &ip[ihl..total];
        let mut p = ip[12..20].to_vec();
        p.extend_from_slice(&[0, 6]);
        p.extend_from_slice(&(seg.len() as u16).to_be_bytes());
        (p, seg)
    } else {
        let len = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
        let seg = &ip[40..40 + len];
        let mut p = ip[8..40].to_vec();
        p.extend_from_slice(&(seg.len() as u32).to_be_bytes());
        p.extend_from_slice(&[0, 0, 0, 6]);
        (p, seg)
    };
    ones_sum(segment, ones_sum(&pseudo, 0)) == 0xffff
}

fn ack_of(frame: &[u8]) -> u32 {
    let sliced = etherparse::SlicedPacket::from_ethernet(frame).unwrap();
    let Some(etherparse::TransportSlice::Tcp(tcp)) = sliced.transport else {
        panic!("not tcp")
    };
    tcp.acknowledgment_number()
}

struct Rig {
    acks: AckShaping,
    pool: FramePool,
    metrics: Metrics,
    /// Where `acks` publishes, into `metrics`.
    sink: EngineMetrics,
}

impl Rig {
    fn new(text: &str) -> Rig {
        Self::seeded(text, FlowSeed::FIXED)
    }

    fn seeded(text: &str, seed: FlowSeed) -> Rig {
        let metrics = Metrics::new();
        Rig {
            acks: AckShaping::new(&config(text).engine(), seed),
            pool: FramePool::new(64, 2048),
            sink: EngineMetrics::new(&metrics),
            metrics,
        }
    }

    /// Passes `frame` through at `t`: the frame as it leaves, or `None` if suppressed.
    fn reverse(&mut self, t: Timestamp, frame: &[u8]) -> Option<Vec<u8>> {
        let id = self.pool.store(frame).unwrap();
        let mut ids = vec![id];
        self.acks.on_reverse(t, &mut self.pool, &mut ids, 0);
        self.acks.publish(&mut self.sink);
        let out = ids.first().map(|&i| self.pool.frame(i).to_vec());
        for &i in &ids {
            self.pool.free(i);
        }
        out
    }

    fn generate(&mut self, t: Timestamp) -> Vec<Vec<u8>> {
        let mut ids = Vec::new();
        let n = self.acks.generate(t, &mut self.pool, &mut ids, 8);
        assert_eq!(n, ids.len());
        let out = ids.iter().map(|&i| self.pool.frame(i).to_vec()).collect();
        for &i in &ids {
            self.pool.free(i);
        }
        out
    }
}

#[test]
fn rewritten_acks_carry_a_valid_checksum() {
    let mut r = Rig::new(CONFIG);
    let first = ack_v4(5201, BASE, &[]);
    assert!(checksums_valid(&first), "the crafted frame itself");
    assert_eq!(
        r.reverse(us(0), &first).unwrap(),
        first,
        "a new flow's first ACK passes"
    );
    // 8 Mbit/s = 1 byte/us: 500 us later 500 of the 10 000 received bytes are acknowledged.
    let out = r
        .reverse(us(500), &ack_v4(5201, BASE + 10_000, &[]))
        .unwrap();
    assert_eq!(ack_of(&out), BASE + 500);
    assert!(checksums_valid(&out));
    let sliced = etherparse::SlicedPacket::from_ethernet(&out).unwrap();
    let Some(etherparse::TransportSlice::Tcp(tcp)) = sliced.transport else {
        panic!("not tcp")
    };
    let expected = tcp
        .to_header()
        .calc_checksum_ipv4_raw([10, 0, 0, 2], [10, 0, 0, 1], tcp.payload())
        .unwrap();
    assert_eq!(tcp.checksum(), expected, "etherparse agrees");
    // A data-carrying segment is never suppressed; its checksum covers the payload.
    let out = r
        .reverse(us(500), &ack_v4(5201, BASE + 10_000, b"reply"))
        .unwrap();
    assert_eq!(ack_of(&out), BASE + 500);
    assert!(checksums_valid(&out));
    assert_eq!(&out[out.len() - 5..], b"reply");
}

#[test]
fn duplicates_are_suppressed_and_due_acks_generated() {
    let mut r = Rig::new(CONFIG);
    r.reverse(us(0), &ack_v4(5201, BASE, &[]));
    r.reverse(us(500), &ack_v4(5201, BASE + 10_000, &[]));
    assert!(r
        .reverse(us(500), &ack_v4(5201, BASE + 10_000, &[]))
        .is_none());
    assert_eq!(r.pool.in_use(), 0, "the suppressed frame's slot is freed");
    // Due one MTU (1500 B) time after the last ACK left.
    assert_eq!(r.acks.next_due(), Some(us(2000)));
    assert!(r.generate(us(1999)).is_empty());
    let gen = r.generate(us(2000));
    assert_eq!(gen.len(), 1);
    let g = &gen[0];
    assert_eq!(ack_of(g), BASE + 2000);
    assert!(checksums_valid(g));
    let sliced = etherparse::SlicedPacket::from_ethernet(g).unwrap();
    let Some(etherparse::TransportSlice::Tcp(tcp)) = sliced.transport else {
        panic!("not tcp")
    };
    assert!(tcp.ack() && !tcp.fin() && !tcp.syn() && !tcp.psh() && tcp.payload().is_empty());
    assert_eq!((tcp.source_port(), tcp.destination_port()), (5201, 40000));
    assert_eq!(tcp.window_size(), 5000, "the receiver's window is kept");
    assert_eq!(
        g.len(),
        14 + 20 + 32,
        "headers only: timestamps option kept"
    );
    let c = r.acks.class_counters("incast").unwrap();
    assert_eq!((c.rewritten, c.suppressed, c.generated), (1, 1, 1));
}

#[test]
fn a_generated_ack_drops_the_payload_of_its_template() {
    let mut r = Rig::new(CONFIG);
    r.reverse(us(0), &ack_v4(5201, BASE, &[]));
    r.reverse(us(0), &ack_v4(5201, BASE + 50_000, b"some reply data"));
    let gen = r.generate(us(1500));
    assert_eq!(gen.len(), 1);
    assert!(checksums_valid(&gen[0]));
    assert_eq!(gen[0].len(), 14 + 20 + 32);
    assert_eq!(ack_of(&gen[0]), BASE + 1500);
}

#[test]
fn ipv6_acks_are_rewritten_with_a_valid_checksum() {
    let text = CONFIG.replace(
        "dst_port = 5201 }",
        "dst_port = 5201, dst = \"2020::/16\" }",
    );
    let mut r = Rig::new(&text);
    r.reverse(us(0), &ack_v6(BASE));
    let out = r.reverse(us(700), &ack_v6(BASE + 9_000)).unwrap();
    assert_eq!(ack_of(&out), BASE + 700);
    assert!(checksums_valid(&out));
    let gen = r.generate(us(700 + 1500));
    assert_eq!(ack_of(&gen[0]), BASE + 2200);
    assert!(checksums_valid(&gen[0]));
}

#[test]
fn acks_of_other_classes_pass_untouched() {
    let mut r = Rig::new(CONFIG);
    for (t, ack) in [(0, BASE), (10, BASE + 50_000), (20, BASE + 90_000)] {
        let f = ack_v4(5301, ack, &[]);
        assert_eq!(r.reverse(us(t), &f).unwrap(), f);
    }
    assert_eq!(r.acks.next_due(), None);
    let no_acks = CONFIG.replace(
        "ack_shaping = { rate = \"8mbit\", per = \"flow\", flows = 16 }",
        "",
    );
    let r2 = Rig::new(&no_acks);
    assert!(!r2.acks.is_active());
}

#[test]
fn counters_reach_the_prometheus_endpoint() {
    let mut r = Rig::new(CONFIG);
    r.reverse(us(0), &ack_v4(5201, BASE, &[]));
    r.reverse(us(500), &ack_v4(5201, BASE + 10_000, &[]));
    r.reverse(us(500), &ack_v4(5201, BASE + 10_000, &[]));
    let text = r.metrics.encode();
    for line in [
        "metronome_ack_shaping_total{class=\"incast\",outcome=\"rewritten\"} 1",
        "metronome_ack_shaping_total{class=\"incast\",outcome=\"suppressed\"} 1",
        "metronome_ack_shaping_total{class=\"incast\",outcome=\"passthrough\"} 1",
    ] {
        assert!(text.contains(line), "{line} missing from\n{text}");
    }
}

#[test]
fn reload_keeps_flows_and_applies_the_new_rate() {
    let mut r = Rig::new(CONFIG);
    r.reverse(us(0), &ack_v4(5201, BASE, &[]));
    let faster = config(&CONFIG.replace("8mbit", "16mbit"));
    let plan = config(CONFIG).diff(&faster);
    assert!(plan.to_string().contains("ack_shaping"), "{plan}");
    r.acks.reload(&faster.engine());
    // 2 bytes/us now, and the flow's state survived (no new first-ACK pass).
    let out = r
        .reverse(us(500), &ack_v4(5201, BASE + 10_000, &[]))
        .unwrap();
    assert_eq!(ack_of(&out), BASE + 1000);
}

#[test]
fn the_configuration_is_checked() {
    let c = config(CONFIG);
    let a = c.classes[0].policy.ack_shaping.unwrap();
    assert_eq!((a.rate.bps(), a.per_flow, a.flows), (8_000_000, true, 16));
    let shared = config(&CONFIG.replace(", per = \"flow\", flows = 16", ""));
    let a = shared.classes[0].policy.ack_shaping.unwrap();
    assert_eq!(
        (a.per_flow, a.flows),
        (false, crate::ops::config::DEFAULT_ACK_SHAPING_FLOWS)
    );
    for (bad, why) in [
        ("rate = \"0bit\"", "zero rate"),
        ("rate = \"fast\"", "unit"),
        ("rate = \"1gbit\", per = \"tenant\"", "per"),
        ("rate = \"1gbit\", flows = 0", "flows"),
    ] {
        let text = CONFIG.replace("rate = \"8mbit\", per = \"flow\", flows = 16", bad);
        let e = Config::from_toml_str(&text, "t.toml");
        assert!(e.is_err(), "{why}: accepted");
        assert!(e.unwrap_err().to_string().contains("ack_shaping"), "{why}");
    }
}

/// The data direction's tuple of `ack_v4(5201, ..)`, as `flow_key` sees the ACK.
fn ack_tuple() -> FiveTuple {
    FiveTuple {
        src: IpAddr::V4([10, 0, 0, 2].into()),
        dst: IpAddr::V4([10, 0, 0, 1].into()),
        protocol: proto::TCP,
        src_port: 5201,
        dst_port: 40000,
    }
}

#[test]
fn flows_are_keyed_by_the_seed_and_keep_their_key_across_a_reload() {
    let seed = FlowSeed::from_parts(1, [0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210]);
    let mut rig = Rig::seeded(CONFIG, seed);
    assert!(rig.reverse(us(0), &ack_v4(5201, BASE, &[])).is_some());
    let (keyed, fixed) = (
        flow_key(&ack_tuple(), seed),
        flow_key(&ack_tuple(), FlowSeed::FIXED),
    );
    assert_ne!(keyed, fixed);
    let state = |rig: &Rig, key| rig.acks.class_shaper("incast").unwrap().flow_state(key);
    assert!(state(&rig, keyed).is_some());
    assert!(state(&rig, fixed).is_none());
    // A reload that keeps the class keeps its flows under the same keys.
    let slower = CONFIG.replace("8mbit", "4mbit");
    rig.acks.reload(&config(&slower).engine());
    assert!(rig
        .reverse(us(10), &ack_v4(5201, BASE + 1448, &[]))
        .is_some());
    assert!(state(&rig, keyed).is_some());
    let shaper = rig.acks.class_shaper("incast").unwrap();
    assert_eq!(shaper.counters().table_full, 0);
    assert_eq!(shaper.flows(), 1);
}
