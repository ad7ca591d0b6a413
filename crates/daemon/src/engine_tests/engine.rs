//! Engine unit tests: hand-built frames through a [`MemoryPort`], manual time.

use crate::datapath::engine::*;
use crate::datapath::flow_seed::FlowSeed;
use crate::datapath::flow_table::FlowTable;
use crate::driver::reload::test_engine;
use crate::ops::config::{Config, ReloadPlan};
use crate::ops::metrics::Metrics;
use etherparse::PacketBuilder;
use metronome_core::FlowId;
use metronome_core::{Duration, Timestamp};
use metronome_io::FramePool;
use metronome_io::{MemoryPort, MemoryPortConfig, PacketPort, RxFrame};
use metronome_packet::{parse, Parsed, Verdict};

mod bounds;
mod cluster;
mod fair;
mod flow_seed;
mod flow_table_full;
mod link;
mod live;
mod origin;
mod pace;
mod tree;
mod unclassified;

const BASE: &str = r#"
[interfaces]
inside = "in0"
outside = "out0"

[[class]]
name = "bulk"
match = { protocol = "tcp", dst_port = "5201-5216" }
rate = "100mbit"

[[class]]
name = "paced"
match = { protocol = "tcp", dst_port = "5301-5304" }
pacing = "12mbit"
"#;

/// Frame bytes of a full-size TCP segment: 1514 bytes on the wire.
const FULL: usize = 1514;

fn config(text: &str) -> Config {
    Config::from_toml_str(text, "test.toml").unwrap()
}

/// An Ethernet + IPv4 + TCP frame of `wire` bytes from `src_port` to `dst_port`, with ECN bits.
fn tcp(src_port: u16, dst_port: u16, wire: usize, ecn: u8) -> Vec<u8> {
    let payload = vec![0x42u8; wire.saturating_sub(14 + 20 + 20)];
    let b = PacketBuilder::ethernet2([2; 6], [4; 6])
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .tcp(src_port, dst_port, 1, 65535);
    let mut out = Vec::new();
    b.write(&mut out, &payload).unwrap();
    out[15] = (out[15] & !0b11) | ecn;
    let sum = metronome_packet::ipv4_header_checksum(&{
        let mut h = out[14..34].to_vec();
        h[10] = 0;
        h[11] = 0;
        h
    })
    .unwrap();
    out[24..26].copy_from_slice(&sum.to_be_bytes());
    out
}

struct Rig {
    engine: Engine,
    /// What the engine counts into.
    metrics: Metrics,
    /// The configuration in force.
    config: Config,
    pool: FramePool,
    inside: MemoryPort,
    outside: MemoryPort,
    now: Timestamp,
    sent: Vec<(Timestamp, Vec<u8>)>,
}

impl Rig {
    /// The value of the metrics' series `series` (its name and labels), 0 when absent.
    fn series(&self, series: &str) -> u64 {
        let key = format!("{series} ");
        let text = self.metrics.encode();
        text.lines()
            .find_map(|l| l.strip_prefix(key.as_str()))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    fn new(text: &str) -> Rig {
        let pool = FramePool::new(4096, 2048);
        let (config, metrics) = (config(text), Metrics::new());
        Rig {
            engine: test_engine(&config, pool.capacity(), &metrics),
            metrics,
            config,
            pool,
            inside: MemoryPort::new(MemoryPortConfig::default()),
            outside: MemoryPort::new(MemoryPortConfig::default()),
            now: Timestamp::from_nanos(1_000_000_000),
            sent: Vec::new(),
        }
    }

    /// Reloads `new` as the daemon does: refused when a change needs a restart.
    fn reload(&mut self, new: &Config) -> Result<ReloadPlan, String> {
        let plan = super::reload(&mut self.engine, &self.config, new)?;
        self.config = new.clone();
        Ok(plan)
    }

    /// Injects `frames` on the inside port and runs one receive + release step at `now`.
    fn push(&mut self, frames: &[Vec<u8>]) {
        for f in frames {
            self.inside.inject(f).unwrap();
        }
        let mut rx = [RxFrame::default(); 64];
        loop {
            let n = self.inside.recv(&mut self.pool, &mut rx).unwrap();
            if n == 0 {
                break;
            }
            let mut forward = Vec::new();
            self.engine
                .receive(self.now, &mut self.pool, &rx[..n], &mut forward);
            self.transmit(&forward);
        }
        self.step(Duration::ZERO);
    }

    fn transmit(&mut self, ids: &[u32]) {
        let n = self.outside.send(&mut self.pool, ids).unwrap();
        assert_eq!(n, ids.len());
        while let Some(f) = self.outside.pop_sent() {
            self.sent.push((self.now, f));
        }
    }

    /// Advances time by `d` and releases what is due.
    fn step(&mut self, d: Duration) {
        self.now += d;
        loop {
            let mut out = Vec::new();
            let n = self.engine.release(self.now, &mut self.pool, &mut out, 64);
            self.transmit(&out);
            if n < 64 {
                break;
            }
        }
        self.engine.invariants();
        assert_eq!(self.pool.in_use(), self.engine.queued());
    }

    fn run_until_empty(&mut self, step: Duration) {
        while self.engine.queued() > 0 {
            self.step(step);
        }
    }
}

#[test]
fn frames_go_to_their_classes_and_unshaped_ones_leave_at_once() {
    let mut rig = Rig::new(BASE);
    let mut arp = vec![0u8; 60];
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    rig.push(&[
        tcp(40000, 5201, FULL, 0),
        tcp(40001, 5301, FULL, 0),
        tcp(40002, 80, FULL, 0),
        arp.clone(),
    ]);
    // bulk and paced each have a burst of one frame: their first packets leave at once too.
    assert_eq!(rig.sent.len(), 4);
    rig.push(&[tcp(40000, 5201, FULL, 0), tcp(40001, 5301, FULL, 0)]);
    assert_eq!(rig.engine.class_queued("bulk"), 1);
    assert_eq!(rig.engine.class_queued("paced"), 1);
    assert_eq!(rig.engine.class_queued("default"), 0);
    let c = rig.engine.counters();
    assert_eq!((c.received, c.passed_non_ip, c.enqueued), (6, 1, 4));
    assert_eq!(c.forwarded, 2);
    rig.run_until_empty(Duration::from_micros(10));
    assert_eq!(rig.sent.len(), 6);
    assert!(rig.sent.iter().any(|(_, f)| f == &arp));
}

#[test]
fn a_paced_flow_leaves_one_packet_per_transmit_time() {
    let mut rig = Rig::new(BASE);
    let t0 = rig.now;
    rig.push(&vec![tcp(40000, 5301, FULL, 0); 5]);
    // And a second flow of the same class is paced on its own, not behind the first.
    rig.push(&[tcp(40001, 5301, FULL, 0)]);
    rig.run_until_empty(Duration::from_micros(2));
    // 1514 bytes at 12 Mbit/s: 1009.33 us apart.
    let gap = Rate::mbps(12).transmit_time(FULL as u64).as_nanos();
    let flow0: Vec<u64> = rig
        .sent
        .iter()
        .filter(|(_, f)| f[34..36] == 40000u16.to_be_bytes())
        .map(|(t, _)| t.saturating_since(t0).as_nanos())
        .collect();
    assert_eq!(flow0.len(), 5);
    for (k, t) in flow0.iter().enumerate() {
        let want = k as u64 * gap;
        assert!(
            t.abs_diff(want) <= 2_000,
            "packet {k} at {t} ns, want {want}"
        );
    }
    let other = rig
        .sent
        .iter()
        .filter(|(_, f)| f[34..36] == 40001u16.to_be_bytes());
    assert!(other.map(|(t, _)| *t).all(|t| t == t0));
}

#[test]
fn an_aggregate_holds_its_rate_over_many_flows() {
    let mut rig = Rig::new(BASE);
    let t0 = rig.now;
    let frames: Vec<Vec<u8>> = (0..1000)
        .map(|i| tcp(40000 + i % 16, 5201, FULL, 0))
        .collect();
    rig.push(&frames);
    rig.run_until_empty(Duration::from_micros(10));
    let last = rig.sent.last().unwrap().0.saturating_since(t0);
    let bits = (999 * FULL * 8) as f64; // the first frame leaves at t0 (its burst)
    let achieved = bits / last.as_secs_f64();
    assert!((achieved / 100e6 - 1.0).abs() < 0.001, "{achieved} bit/s");
    assert_eq!(rig.engine.counters().released, 1000);
}

#[test]
fn the_drop_mode_counts_what_it_drops() {
    let text = format!(
        "{BASE}\n[[class]]\nname = \"capped\"\nmatch = {{ dst_port = 9000 }}\nrate = \"10mbit\"\nbackpressure = {{ mode = \"drop\", limit = 4 }}\n"
    );
    let mut rig = Rig::new(&text);
    rig.push(&vec![tcp(40000, 9000, FULL, 0); 10]);
    // Four are queued (the limit), six dropped; the first, due at once, then leaves.
    let c = rig.engine.counters();
    assert_eq!((rig.sent.len(), rig.engine.queued()), (1, 3));
    assert_eq!(c.dropped_flow_limit, 6);
    let text = rig.metrics.encode();
    assert!(
        text.contains(r#"metronome_class_drops_total{class="capped",reason="flow_limit"} 6"#),
        "{text}"
    );
    rig.run_until_empty(Duration::from_micros(100));
    assert_eq!(rig.sent.len(), 4);
}

#[test]
fn the_ecn_mode_marks_capable_packets_and_counts_the_rest() {
    let text = format!(
        "{BASE}\n[[class]]\nname = \"ecn\"\nmatch = {{ dst_port = 9001 }}\nrate = \"12mbit\"\nbackpressure = {{ mode = \"ecn\", threshold = \"2500us\" }}\n"
    );
    let mut rig = Rig::new(&text);
    // ECT(0): packets 0..=3 wait at most 3 x 1009 us; from the 4th on the delay is above 2.5 ms.
    rig.push(&vec![tcp(40000, 9001, FULL, 0b10); 6]);
    rig.push(&vec![tcp(40001, 9001, FULL, 0b00); 2]);
    rig.run_until_empty(Duration::from_micros(50));
    let ce: Vec<bool> = rig.sent.iter().map(|(_, f)| f[15] & 0b11 == 0b11).collect();
    assert_eq!(ce, [false, false, false, true, true, true, false, false]);
    for (_, f) in &rig.sent {
        // The IPv4 header checksum still verifies after marking.
        let sliced = etherparse::Ipv4HeaderSlice::from_slice(&f[14..]).unwrap();
        let h = sliced.to_header();
        assert_eq!(h.header_checksum, h.calc_header_checksum());
    }
    let c = rig.engine.counters();
    assert_eq!((c.ecn_marked, c.ecn_not_ect), (3, 2));
    assert_eq!(c.dropped(), 0);
}

#[test]
fn malformed_frames_in_an_unshaped_default_class_leave_at_once_and_are_counted() {
    let mut rig = Rig::new(BASE);
    let mut bad = tcp(40000, 5201, FULL, 0);
    bad[14] = 0x43; // IHL 3: below the minimum header
    let truncated = tcp(40000, 5201, FULL, 0)[..30].to_vec();
    rig.push(&[bad, truncated]);
    assert_eq!(rig.sent.len(), 2);
    let c = rig.engine.counters();
    assert_eq!((c.malformed, c.forwarded), (2, 2));
    assert_eq!(rig.engine.parse_counters().malformed_total(), 2);
    let text = rig.metrics.encode();
    assert!(
        text.contains("metronome_malformed_frames_total{reason=\"bad_ihl\"} 1"),
        "{text}"
    );
}

#[test]
fn csum_not_ready_frames_leave_with_a_valid_checksum() {
    let mut rig = Rig::new(BASE);
    let good = tcp(40000, 80, 200, 0);
    let mut partial = good.clone();
    partial[50] = 0x12;
    partial[51] = 0x34;
    let id = rig.pool.store(&partial).unwrap();
    let rx = RxFrame {
        id,
        len: partial.len() as u32,
        csum_not_ready: true,
        stamp_ns: 0,
    };
    let mut forward = Vec::new();
    rig.engine
        .receive(rig.now, &mut rig.pool, &[rx], &mut forward);
    assert_eq!(rig.pool.frame(forward[0]), &good[..]);
    assert_eq!(rig.engine.counters().checksums_fixed, 1);
}

#[test]
fn nothing_is_lost_under_a_random_mix() {
    let text = format!(
        "{BASE}\n[[class]]\nname = \"capped\"\nmatch = {{ dst_port = 9000 }}\nrate = \"50mbit\"\nhorizon_policy = \"reject\"\nbackpressure = {{ mode = \"drop\", limit = 30 }}\n[wheel]\nhorizon = \"20ms\"\n"
    );
    let mut rig = Rig::new(&text);
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut injected = 0u64;
    for _ in 0..300 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let mut frames = Vec::new();
        for _ in 0..(rng % 40) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let port = [5201, 5301, 9000, 80, 9000][(rng % 5) as usize];
            let len = 60 + (rng >> 8) as usize % 1454;
            let mut f = tcp(
                40000 + (rng >> 20) as u16 % 8,
                port,
                len,
                (rng >> 30) as u8 & 3,
            );
            if rng.is_multiple_of(17) {
                f.truncate((rng >> 40) as usize % 40);
            }
            frames.push(f);
        }
        injected += frames.len() as u64;
        rig.push(&frames);
        rig.step(Duration::from_micros(rng % 500));
    }
    let c = rig.engine.counters();
    assert_eq!(c.received, injected);
    assert!(
        c.dropped_flow_limit > 0 || c.dropped_horizon > 0 || c.dropped_queue_full > 0,
        "{c:?}"
    );
    assert_eq!(
        rig.sent.len() as u64 + c.dropped() + rig.engine.queued() as u64,
        injected
    );
    rig.run_until_empty(Duration::from_micros(100));
    assert_eq!(rig.sent.len() as u64 + c.dropped(), injected);
    assert_eq!(rig.pool.in_use(), 0);
}

#[test]
fn reload_changes_rates_live_and_refuses_restart_changes() {
    let mut rig = Rig::new(BASE);
    rig.push(&vec![tcp(40000, 5201, FULL, 0); 20]);
    assert_eq!(rig.engine.queued(), 19);
    // Halve bulk's rate, add a class in front: queued packets stay and keep their EDT.
    let new = BASE
        .replace("100mbit", "50mbit")
        .replace("[[class]]\nname = \"bulk\"", "[[class]]\nname = \"ssh\"\nmatch = { dst_port = 22 }\nrate = \"1mbit\"\n\n[[class]]\nname = \"bulk\"");
    let plan = rig.reload(&config(&new)).unwrap();
    assert!(!plan.is_empty());
    assert_eq!(rig.engine.class_queued("bulk"), 19);
    let t_switch = rig.now;
    rig.run_until_empty(Duration::from_micros(10));
    // 19 packets stamped at 100 Mbit/s: the last leaves 19 x 121 us after the first.
    let last = rig
        .sent
        .last()
        .unwrap()
        .0
        .saturating_since(t_switch)
        .as_nanos();
    assert!(last.abs_diff(19 * 121_120) < 20_000, "{last}");
    // After an idle millisecond, the next packets get 50 Mbit/s.
    rig.step(Duration::from_millis(1));
    rig.sent.clear();
    let t1 = rig.now;
    rig.push(&vec![tcp(40000, 5201, FULL, 0); 3]);
    rig.run_until_empty(Duration::from_micros(10));
    let last = rig.sent.last().unwrap().0.saturating_since(t1).as_nanos();
    assert!(last.abs_diff(2 * 242_240) < 20_000, "{last}");
    // Interfaces need a restart: refused, nothing changed.
    let err = rig
        .reload(&config(&new.replace("in0", "eth9")))
        .unwrap_err();
    assert!(err.to_string().contains("interfaces.inside"), "{err}");
    assert_eq!(rig.config.interfaces.inside, "in0");
}

use metronome_core::Rate;
