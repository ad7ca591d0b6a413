//! Engine tests of GSO super-frames through the in-memory port: wire-byte charging, pieces cut
//! at the class's `gso_burst` with EDTs spaced at the class rate, pieces that reassemble to the
//! original byte stream, slots freed after the last piece, counters.

use crate::datapath::engine::*;
use crate::driver::reload::test_engine;
use crate::ops::config::Config;
use crate::ops::metrics::Metrics;
use etherparse::PacketBuilder;
use metronome_core::{Duration, Timestamp};
use metronome_io::FramePool;
use metronome_io::{MemoryPort, MemoryPortConfig, PacketPort, RxFrame, GSO_SLOT_SIZE};
use metronome_packet::gso::{GsoType, FLAG_NEEDS_CSUM};
use metronome_packet::VnetHdr;

/// Maximum segment size of the test super-frames.
const MSS: usize = 1448;
/// Ethernet + IPv4 + TCP headers.
const HEADERS: usize = 54;
/// Sequence number of a test super-frame's first byte.
const SEQ: u32 = 1_000_000;

/// One class `bulk` of `protocol` traffic to port 5201 at `rate` with `gso_burst`, then `extra`
/// class lines; a 1 µs wheel.
fn class_config(protocol: &str, rate: &str, gso_burst: &str, extra: &str) -> Config {
    let text = format!(
        "[interfaces]\ninside = \"in0\"\noutside = \"out0\"\n[wheel]\ngranularity = \"1us\"\n\
         [[class]]\nname = \"bulk\"\nmatch = {{ protocol = \"{protocol}\", dst_port = 5201 }}\n\
         rate = \"{rate}\"\ngso_burst = \"{gso_burst}\"\n{extra}"
    );
    Config::from_toml_str(&text, "gso.toml").unwrap()
}

fn config(rate: &str, gso_burst: &str) -> Config {
    class_config("tcp", rate, gso_burst, "")
}

/// `units` full segments of [`MSS`] payload bytes (byte `i` is `i % 251`).
fn payload(units: usize) -> Vec<u8> {
    (0..units * MSS).map(|i| (i % 251) as u8).collect()
}

/// The virtio-net header a local GSO sender hands over with an IPv4 super-frame of [`MSS`]
/// segments: partial checksum at the transport header (offset 34), `csum_offset` into it.
fn vnet(gso_type: GsoType, hdr_len: usize, csum_offset: u16) -> VnetHdr {
    VnetHdr {
        flags: FLAG_NEEDS_CSUM,
        gso_type,
        ecn: false,
        hdr_len: hdr_len as u16,
        gso_size: MSS as u16,
        csum_start: 34,
        csum_offset,
    }
}

/// A TCP super-frame of `segments` full segments (payload byte `i` is `i % 251`), and its
/// virtio-net header as a local TSO sender hands it over.
pub(super) fn superframe(segments: usize) -> (Vec<u8>, VnetHdr) {
    superframe_to(5201, segments)
}

/// [`superframe`] to destination port `port`.
fn superframe_to(port: u16, segments: usize) -> (Vec<u8>, VnetHdr) {
    let b = PacketBuilder::ethernet2([2; 6], [4; 6])
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .tcp(40000, port, SEQ, 65535);
    let mut frame = Vec::new();
    b.write(&mut frame, &payload(segments)).unwrap();
    (frame, vnet(GsoType::TcpV4, HEADERS, 16))
}

/// Bytes a super-frame of `segments` segments occupies on the wire (`rx_bytes` convention).
fn wire(segments: usize) -> u64 {
    (segments * (HEADERS + MSS)) as u64
}

struct Rig {
    engine: Engine,
    pool: FramePool,
    outside: MemoryPort,
    now: Timestamp,
    /// Sent frames with the time they were released.
    sent: Vec<(Timestamp, Vec<u8>)>,
}

impl Rig {
    fn new(config: &Config) -> Rig {
        let pool = FramePool::with_large(256, 2048, 16, GSO_SLOT_SIZE);
        Rig {
            engine: test_engine(config, pool.capacity(), &Metrics::new()),
            pool,
            outside: MemoryPort::new(MemoryPortConfig {
                capacity: 64,
                slot_size: GSO_SLOT_SIZE,
                keep_sent: true,
            }),
            now: Timestamp::from_nanos(1_000_000_000),
            sent: Vec::new(),
        }
    }

    /// Stores `frames` in the pool as a vnet_hdr port does and hands them to the engine.
    fn receive(&mut self, frames: &[(Vec<u8>, VnetHdr)]) {
        let mut rx = Vec::new();
        for (frame, hdr) in frames {
            let id = self.pool.store(frame).unwrap();
            self.pool.set_vnet(id, *hdr);
            rx.push(RxFrame {
                id,
                len: frame.len() as u32,
                csum_not_ready: false,
                stamp_ns: 0,
            });
        }
        let mut forward = Vec::new();
        self.engine
            .receive(self.now, &mut self.pool, &rx, &mut forward);
        self.transmit(&forward);
    }

    fn transmit(&mut self, ids: &[u32]) {
        let n = self.outside.send(&mut self.pool, ids).unwrap();
        assert_eq!(n, ids.len());
        while let Some(f) = self.outside.pop_sent() {
            self.sent.push((self.now, f));
        }
    }

    /// Releases what is due at `now` and sends it.
    fn release_now(&mut self) {
        let mut out = Vec::new();
        self.engine.release(self.now, &mut self.pool, &mut out, 64);
        self.transmit(&out);
    }

    /// Advances time in steps of `d` until the wheel is empty, releasing what is due.
    fn run_until_empty(&mut self, d: Duration) {
        while self.engine.queued() > 0 {
            self.now += d;
            self.release_now();
            self.engine.invariants();
        }
    }

    /// Releases what is due 1 ms on, checks that something is still queued, and discards the
    /// rest as at stop, checking that something was.
    fn stop_with_queued(&mut self) {
        self.now += Duration::from_millis(1);
        self.release_now();
        assert!(self.engine.queued() > 0);
        let discarded = self.engine.drain_all(&mut self.pool);
        assert!(discarded > 0);
    }

    /// Receives a super-frame of 2 units, which empties the bucket, then one of 40 (from
    /// `superframe`), whose pieces then all wait; checks that the 40 are cut into 5 pieces
    /// (1 ms at 100 Mbit/s) and runs until all have left. Returns the long super-frame.
    fn cut_into_five_pieces(&mut self, superframe: fn(usize) -> (Vec<u8>, VnetHdr)) -> Vec<u8> {
        let (frame, hdr) = superframe(40);
        self.receive(&[superframe(2)]);
        self.receive(&[(frame.clone(), hdr)]);
        let c = self.engine.counters();
        assert_eq!((c.superframes, c.enqueued, c.pieces_extra), (2, 6, 4));
        assert_eq!(self.pool.cut_counters().frames_cut, 1);
        self.run_until_empty(Duration::from_micros(1));
        assert_eq!(self.pieces().len(), 5);
        frame
    }

    /// The frames sent after the first one.
    fn pieces(&self) -> Vec<&Vec<u8>> {
        self.sent.iter().skip(1).map(|(_, f)| f).collect()
    }

    /// Consecutive frames after the first leave `want` ns apart (± a wheel slot and a step).
    fn assert_gaps(&self, want: u64) {
        for gap in self.gaps().iter().skip(1) {
            assert!(gap.abs_diff(want) <= 2_000, "gap {gap} ns, want {want}");
        }
    }

    fn gaps(&self) -> Vec<u64> {
        self.sent
            .windows(2)
            .map(|w| w[1].0.saturating_since(w[0].0).as_nanos())
            .collect()
    }
}

/// Nanoseconds `bytes` take at `bps`.
fn at_rate(bytes: u64, bps: u64) -> u64 {
    bytes * 8 * 1_000_000_000 / bps
}

#[test]
fn a_superframe_is_one_unit_charged_its_wire_bytes() {
    // 100 ms of burst bound: nothing is cut.
    let mut rig = Rig::new(&config("100mbit", "100ms"));
    let frames: Vec<_> = (0..3).map(|_| superframe(10)).collect();
    rig.receive(&frames);
    let c = rig.engine.counters();
    assert_eq!((c.received, c.superframes, c.pieces_extra), (3, 3, 0));
    let bulk = rig.engine.class_index("bulk").unwrap();
    // Each counts 10 segments' headers: 10 × 1502 bytes, not its 14 534-byte length.
    let queued_bytes = rig.engine.class_stamped_bytes(bulk);
    assert!(queued_bytes >= 2 * wire(10), "{queued_bytes}");
    rig.run_until_empty(Duration::from_micros(1));
    assert_eq!(rig.sent.len(), 3);
    for (_, f) in &rig.sent {
        assert_eq!(f.len(), HEADERS + 10 * MSS, "sent whole, not cut");
    }
    // Consecutive frames leave one wire-byte transmission time apart.
    rig.assert_gaps(at_rate(wire(10), 100_000_000));
    assert_eq!(rig.pool.in_use(), 0);
    rig.engine.invariants();
}

#[test]
fn a_long_superframe_is_cut_into_pieces_spaced_at_the_class_rate_that_reassemble() {
    // 1 ms at 100 Mbit/s is 12 500 bytes: 8 segments of 1 502 wire bytes per piece.
    let mut rig = Rig::new(&config("100mbit", "1ms"));
    let frame = rig.cut_into_five_pieces(superframe);
    let pieces = rig.pieces();
    // Each piece is a valid frame: IPv4 total length and TCP sequence number rewritten.
    let mut stream = Vec::new();
    for (k, p) in pieces.iter().enumerate() {
        assert_eq!(p.len(), HEADERS + 8 * MSS);
        let total = u16::from_be_bytes([p[16], p[17]]) as usize;
        assert_eq!(total, p.len() - 14);
        let seq = u32::from_be_bytes([p[38], p[39], p[40], p[41]]);
        assert_eq!(seq, SEQ + (k * 8 * MSS) as u32);
        assert_eq!(&p[..12], &frame[..12]);
        stream.extend_from_slice(&p[HEADERS..]);
    }
    assert_eq!(stream, frame[HEADERS..], "pieces reassemble to the payload");
    // Pieces leave one piece's wire time apart at the class rate.
    rig.assert_gaps(at_rate(wire(8), 100_000_000));
    let cuts = rig.pool.cut_counters();
    assert_eq!((cuts.pieces_sent, cuts.pieces_failed), (5, 0));
    assert_eq!(
        rig.pool.in_use(),
        0,
        "the slot is freed after its last piece"
    );
    let c = rig.engine.counters();
    assert_eq!(c.released, 6);
    rig.engine.invariants();
}

#[test]
fn a_superframe_above_65535_wire_bytes_within_the_bound_leaves_whole_charged_in_full() {
    // 45 segments are 67 590 bytes on the wire, above a `PacketRef`'s u16 length; at 10 Gbit/s
    // 1 ms allows them all: one unit, charged and counted in full.
    let metrics = Metrics::new();
    let mut rig = Rig::new(&config("10gbit", "1ms"));
    rig.engine = test_engine(&config("10gbit", "1ms"), rig.pool.capacity(), &metrics);
    rig.receive(&[superframe(45), superframe(45)]);
    let c = rig.engine.counters();
    assert_eq!(c.pieces_extra, 0, "not cut");
    let bulk = rig.engine.class_index("bulk").unwrap();
    assert!(rig.engine.class_stamped_bytes(bulk) >= wire(45));
    rig.run_until_empty(Duration::from_micros(1));
    assert_eq!(rig.sent.len(), 2);
    assert!(rig.sent.iter().all(|(_, f)| f.len() == HEADERS + 45 * MSS));
    let text = metrics.encode();
    let want = format!(
        "metronome_class_bytes_total{{class=\"bulk\"}} {}",
        2 * wire(45)
    );
    assert!(text.lines().any(|l| l == want), "{want} not in\n{text}");
    // Cut when the bound is shorter: pieces then fit the u16 length.
    let mut rig = Rig::new(&config("10gbit", "50us"));
    rig.receive(&[superframe(45)]);
    assert!(rig.engine.counters().pieces_extra > 0);
    rig.run_until_empty(Duration::from_micros(1));
    let payload: usize = rig.sent.iter().map(|(_, f)| f.len() - HEADERS).sum();
    assert_eq!(payload, 45 * MSS);
    assert_eq!(rig.pool.in_use(), 0);
}

#[test]
fn a_cut_superframe_discarded_at_stop_frees_its_slot() {
    let mut rig = Rig::new(&config("100mbit", "1ms"));
    rig.receive(&[superframe(2), superframe(40)]);
    rig.stop_with_queued();
    assert_eq!(rig.pool.in_use(), 0);
    rig.engine.invariants();
}

#[test]
fn an_ecn_mark_on_a_superframe_is_carried_by_every_piece() {
    let text = "[interfaces]\ninside = \"in0\"\noutside = \"out0\"\n[[class]]\nname = \"bulk\"\n\
                match = { protocol = \"tcp\", dst_port = 5201 }\nrate = \"100mbit\"\n\
                backpressure = { mode = \"ecn\", threshold = \"100us\" }\n";
    let mut rig = Rig::new(&Config::from_toml_str(text, "ecn.toml").unwrap());
    let (mut frame, hdr) = superframe(40);
    frame[15] |= 0b10; // ECT(0)
    let (mut first, _) = superframe(2);
    first[15] |= 0b10;
    rig.receive(&[(first, hdr), (frame, hdr)]);
    assert_eq!(rig.engine.counters().ecn_marked, 1);
    rig.run_until_empty(Duration::from_micros(1));
    for (_, p) in rig.sent.iter().skip(1) {
        assert_eq!(p[15] & 0b11, 0b11, "CE in every piece");
    }
}

/// A UDP (`UDP_L4`) super-frame of `datagrams` full datagrams of [`MSS`] payload bytes (byte `i`
/// is `i % 251`), and its virtio-net header.
fn udp_superframe(datagrams: usize) -> (Vec<u8>, VnetHdr) {
    let b = PacketBuilder::ethernet2([2; 6], [4; 6])
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .udp(40000, 5201);
    let mut frame = Vec::new();
    b.write(&mut frame, &payload(datagrams)).unwrap();
    (frame, vnet(GsoType::UdpL4, 42, 6))
}

#[test]
fn a_long_udp_superframe_is_cut_into_pieces_of_whole_datagrams_that_reassemble() {
    // 1 ms at 100 Mbit/s is 12 500 bytes: 8 datagrams of 1 490 wire bytes per piece.
    let mut rig = Rig::new(&class_config("udp", "100mbit", "1ms", ""));
    let frame = rig.cut_into_five_pieces(udp_superframe);
    let pieces = rig.pieces();
    let mut stream = Vec::new();
    for p in &pieces {
        assert_eq!(p.len(), 42 + 8 * MSS);
        let total = u16::from_be_bytes([p[16], p[17]]) as usize;
        assert_eq!(total, p.len() - 14);
        let udp_len = u16::from_be_bytes([p[38], p[39]]) as usize;
        assert_eq!(udp_len, p.len() - 34);
        stream.extend_from_slice(&p[42..]);
    }
    assert_eq!(stream, frame[42..], "pieces reassemble to the payload");
    rig.assert_gaps(at_rate(8 * (42 + MSS) as u64, 100_000_000));
    let cuts = rig.pool.cut_counters();
    assert_eq!((cuts.pieces_sent, cuts.pieces_failed), (5, 0));
    assert_eq!(rig.pool.in_use(), 0);
    rig.engine.invariants();
}

/// [`config`] with `fair = true`.
fn fair_config(rate: &str, gso_burst: &str) -> Config {
    class_config("tcp", rate, gso_burst, "fair = true\n")
}

#[test]
fn a_superframe_in_a_fair_class_is_cut_when_pulled_and_its_pieces_keep_the_rate() {
    let mut rig = Rig::new(&fair_config("100mbit", "1ms"));
    let (frame, hdr) = superframe(40);
    rig.receive(&[superframe(2)]);
    rig.receive(&[(frame.clone(), hdr)]);
    let c = rig.engine.counters();
    assert_eq!((c.superframes, c.fair_enqueued), (2, 2));
    // Both wait in the flow queue until a release pulls them.
    assert_eq!(rig.engine.class_fair_queued("bulk"), 2);
    rig.release_now();
    // The first frame was pulled at once (the bucket was full); the second waits its turn.
    assert_eq!(rig.engine.class_fair_queued("bulk"), 1);
    rig.run_until_empty(Duration::from_micros(1));
    assert_eq!(rig.pool.cut_counters().frames_cut, 1);
    let pieces = rig.pieces();
    assert_eq!(pieces.len(), 5);
    let mut stream = Vec::new();
    for p in &pieces {
        assert_eq!(p.len(), HEADERS + 8 * MSS);
        stream.extend_from_slice(&p[HEADERS..]);
    }
    assert_eq!(stream, frame[HEADERS..], "pieces reassemble to the payload");
    rig.assert_gaps(at_rate(wire(8), 100_000_000));
    let c = rig.engine.counters();
    assert_eq!((c.fair_pulled, c.released, c.pieces_extra), (2, 6, 4));
    assert_eq!(rig.pool.in_use(), 0);
    rig.engine.invariants();
}

#[test]
fn a_fair_class_discards_its_queued_superframes_at_stop() {
    let mut rig = Rig::new(&fair_config("100mbit", "1ms"));
    rig.receive(&[superframe(2), superframe(40), superframe(40)]);
    rig.stop_with_queued();
    assert_eq!(rig.engine.counters().fair_discarded_at_stop, 1);
    assert_eq!(rig.pool.in_use(), 0);
    rig.engine.invariants();
}

/// A 1 Gbit/s link shared by four classes of weight 1, `f1`..`f4` on ports 5201..5204, no
/// ceiling and no marking: only the port's DWRR divides the link.
const FOUR_ON_A_LINK: &str = "[interfaces]\ninside = \"in0\"\noutside = \"out0\"\n\
     [link]\nrate = \"1gbit\"\nbuffer = \"4mb\"\nmarking = \"none\"\n\
     [[class]]\nname = \"f1\"\nmatch = { protocol = \"tcp\", dst_port = 5201 }\n\
     [[class]]\nname = \"f2\"\nmatch = { protocol = \"tcp\", dst_port = 5202 }\n\
     [[class]]\nname = \"f3\"\nmatch = { protocol = \"tcp\", dst_port = 5203 }\n\
     [[class]]\nname = \"f4\"\nmatch = { protocol = \"tcp\", dst_port = 5204 }\n";

/// [`Rig::new`] with room for four classes' backlogs of super-frames.
fn link_rig(config: &Config) -> Rig {
    let pool = FramePool::with_large(256, 2048, 160, GSO_SLOT_SIZE);
    Rig {
        engine: test_engine(config, pool.capacity(), &Metrics::new()),
        pool,
        ..Rig::new(config)
    }
}

#[test]
fn a_superframe_above_65535_wire_bytes_on_a_link_leaves_as_equal_pieces_within_it() {
    // 45 segments are 67 590 wire bytes: two pieces of 23 and 22 segments, each charged to the
    // link's port its exact wire bytes.
    let config = Config::from_toml_str(FOUR_ON_A_LINK, "link.toml").unwrap();
    let mut rig = link_rig(&config);
    let (frame, hdr) = superframe(45);
    rig.receive(&[(frame.clone(), hdr), superframe(43)]);
    let c = rig.engine.counters();
    assert_eq!(
        (c.superframes, c.pieces_extra),
        (2, 1),
        "43 segments fit: not cut"
    );
    rig.run_until_empty(Duration::from_micros(1));
    let lens: Vec<usize> = rig.sent.iter().map(|(_, f)| f.len()).collect();
    assert_eq!(
        lens,
        [HEADERS + 23 * MSS, HEADERS + 22 * MSS, HEADERS + 43 * MSS]
    );
    let stream: Vec<u8> = rig.sent[..2]
        .iter()
        .flat_map(|(_, f)| f[HEADERS..].to_vec())
        .collect();
    assert_eq!(stream, frame[HEADERS..], "pieces reassemble to the payload");
    let l = rig.engine.link().unwrap();
    assert_eq!(l.counters().dequeued_bytes, wire(45) + wire(43));
    assert_eq!(rig.pool.in_use(), 0);
    rig.engine.invariants();
}

#[test]
fn four_equal_classes_of_different_superframe_sizes_share_the_link_equally_in_wire_bytes() {
    // One class sends 45-segment super-frames (above a `PacketRef`'s 65 535 bytes), the others
    // 20, 6 and 2 segments, as TSO senders of 1 to 8 flows at a quarter of 1 Gbit/s do. Each
    // is kept backlogged with about 200 kB (entries: a 45-segment frame is two pieces), more
    // than a DWRR quantum; the link's DWRR must give each a quarter of the wire bytes.
    let config = Config::from_toml_str(FOUR_ON_A_LINK, "link.toml").unwrap();
    let mut rig = link_rig(&config);
    let classes = [
        ("f1", 5201, 45, 6),
        ("f2", 5202, 20, 8),
        ("f3", 5203, 6, 24),
        ("f4", 5204, 2, 64),
    ];
    let step = Duration::from_micros(100);
    let start = rig.now;
    for _ in 0..5_000 {
        let mut frames = Vec::new();
        for (name, port, segments, backlog) in classes {
            for _ in rig.engine.class_queued(name)..backlog {
                frames.push(superframe_to(port, segments));
            }
        }
        rig.receive(&frames);
        rig.now += step;
        rig.release_now();
    }
    rig.engine.invariants();
    // Wire bytes per class from 50 ms on (all full segments: headers counted per segment).
    let from = start + Duration::from_millis(50);
    let mut bytes = [0u64; 4];
    for (_, f) in rig.sent.iter().filter(|(t, _)| *t >= from) {
        let port = u16::from_be_bytes([f[36], f[37]]);
        let segments = (f.len() - HEADERS).div_ceil(MSS);
        bytes[usize::from(port - 5201)] += wire(segments);
    }
    let total: u64 = bytes.iter().sum();
    // 450 ms at 1 Gbit/s: the link was full.
    assert!(total >= 56_000_000 * 99 / 100, "{total} bytes");
    for (i, b) in bytes.iter().enumerate() {
        let share = *b as f64 / total as f64 * 100.0;
        assert!(
            (share - 25.0).abs() < 0.25,
            "{}: {share:.3} % of the link (bytes {bytes:?})",
            classes[i].0
        );
    }
}
