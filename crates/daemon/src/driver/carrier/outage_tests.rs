//! The shaped direction across an outage of the outside link, in simulated time: the engine
//! driven as the loop drives it (its time the link's [`Carrier::shaping_time`], its release
//! [`crate::driver::run::release_shaped`]), one tick per millisecond, each frame tagged with its
//! sequence number. An outage within the grace shifts every later departure by its length and drops
//! nothing; one beyond it drops what fell due past the grace and shifts the rest by the grace; in
//! neither does a class send more than its rate and its burst after the link's return.

use super::*;
use crate::ops::config::Config;
use metronome_io::FramePool;
use metronome_io::{PacketPort, RxFrame};

/// The default class's rate: one 1514-byte frame per millisecond.
const RATE: &str = "12112kbit";
const FRAME: usize = 1514;
/// The link goes down at this tick, is up again at `UP` less [`CARRIER_SETTLE`], and the loop
/// resumes at `UP` (probed every `CARRIER_POLL`).
const DOWN: u64 = 250;
const UP: u64 = 400;
/// Frames are offered at twice the rate from tick 0.
const PER_TICK: u32 = 2;

/// One scenario: the grace (`None`: the default), whether the link goes down at all, and until
/// which tick frames are offered.
struct Scenario {
    grace_ms: Option<u64>,
    outage: bool,
    offer_until: u64,
}

/// What a scenario did: (tick, sequence number) of every frame sent, in order, the engine's
/// counters, the metrics' text and the default class's burst (bytes).
struct Outcome {
    sent: Vec<(u64, u32)>,
    counters: crate::datapath::engine::EngineCounters,
    text: String,
    burst: usize,
}

impl Outcome {
    /// The tick at which frame `seq` was sent, if it was.
    fn tick_of(&self, seq: u32) -> Option<u64> {
        self.sent.iter().find(|&&(_, s)| s == seq).map(|&(t, _)| t)
    }

    /// Asserts that from `UP` to every later tick at most the class's rate and its burst left.
    fn assert_rate_after_up(&self) {
        let mut bytes = 0;
        for &(t, _) in self.sent.iter().filter(|&&(t, _)| t >= UP) {
            bytes += FRAME;
            let allowed = (t - UP + 1) as usize * FRAME + self.burst;
            assert!(
                bytes <= allowed,
                "{bytes} bytes from the return to tick {t}, {allowed} allowed"
            );
        }
    }
}

fn down() -> PortError {
    PortError::Io {
        op: "sendmmsg",
        ifname: "out0".into(),
        source: std::io::Error::from_raw_os_error(ENETDOWN),
    }
}

/// The value of the line of `text` that starts with `series ` (0 when absent).
fn value(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0, |v| v.trim().parse().unwrap())
}

fn run(s: &Scenario) -> Outcome {
    let grace = s
        .grace_ms
        .map_or(String::new(), |g| format!("link_down_grace = \"{g}ms\"\n"));
    let text = format!(
        "[interfaces]\ninside = \"in0\"\noutside = \"out0\"\n[daemon]\n{grace}\
         [default]\nrate = \"{RATE}\"\n"
    );
    let config = Config::from_toml_str(&text, "t.toml").unwrap();
    let metrics = Metrics::new();
    let mut pool = FramePool::new(4096, 2048);
    let mut engine = crate::driver::reload::test_engine(&config, pool.capacity(), &metrics);
    let mut inside = metronome_io::MemoryPort::new(Default::default());
    let grace = config.daemon.link_down_grace;
    let mut link = Carrier::new("out0", Some((7, true)), grace, &metrics);
    let mut frame = vec![0u8; FRAME];
    frame[12..14].copy_from_slice(&[0x08, 0x06]); // non-IP: the default class takes it
    let t0 = Timestamp::from_nanos(1_000_000_000);
    let mut rx = [RxFrame::default(); 64];
    let (mut out, mut sent) = (Vec::new(), Vec::new());
    let mut seq = 0u32;
    let mut ms = 0;
    while ms < s.offer_until || engine.queued() > 0 || !link.is_up() {
        let now = t0 + Duration::from_millis(ms);
        let outage = s.outage && (DOWN..UP).contains(&ms);
        if s.outage && ms == DOWN {
            assert!(link.on_error(now, &down()));
        }
        let back = ms + CARRIER_SETTLE.as_nanos() / 1_000_000 >= UP;
        link.poll(now, |_| Some((7, !outage || back)));
        assert_eq!(link.is_up(), !outage, "tick {ms}");
        if ms < s.offer_until {
            for _ in 0..PER_TICK {
                frame[14..18].copy_from_slice(&seq.to_be_bytes());
                seq += 1;
                inside.inject(&frame).unwrap();
                let n = inside.recv(&mut pool, &mut rx).unwrap();
                let mut forwarded = Vec::new();
                let t = link.shaping_time(now);
                engine.receive(t, &mut pool, &rx[..n], &mut forwarded);
                assert!(forwarded.is_empty());
            }
        }
        out.clear();
        crate::driver::run::release_shaped(&mut engine, &mut pool, &mut link, now, &mut out, 64);
        assert!(out.is_empty() || !outage, "sent at tick {ms}, link down");
        for &id in &out {
            let tag = pool.frame(id)[14..18].try_into().unwrap();
            sent.push((ms, u32::from_be_bytes(tag)));
            pool.free_entry(id);
        }
        engine.invariants();
        assert_eq!(pool.in_use(), engine.queued());
        ms += 1;
        assert!(ms < 10_000, "the wheel does not drain");
    }
    let counters = engine.counters();
    // Every frame accounted for: released or dropped for the outage.
    assert_eq!(counters.received, u64::from(seq), "{counters:?}");
    assert_eq!(
        counters.received,
        counters.enqueued_frames(),
        "{counters:?}"
    );
    assert_eq!(
        counters.enqueued,
        counters.released + counters.dropped_link_down,
        "{counters:?}"
    );
    assert_eq!(sent.len() as u64, counters.released);
    let text = metrics.encode();
    // The drops for the outage are counted per interface and per class.
    let per_link = "metronome_link_down_dropped_total{interface=\"out0\"}";
    assert_eq!(value(&text, per_link), counters.dropped_link_down, "{text}");
    let per_class = "metronome_class_drops_total{class=\"default\",reason=\"link_down\"}";
    assert_eq!(
        value(&text, per_class),
        counters.dropped_link_down,
        "{text}"
    );
    Outcome {
        sent,
        counters,
        text,
        burst: config.default_class.burst as usize,
    }
}

#[test]
fn an_outage_within_the_grace_shifts_what_was_queued_by_its_length_and_drops_nothing() {
    // Offered before the outage only: each frame's departure is comparable with a run
    // without the outage.
    let offer_until = DOWN - 50;
    let reference = run(&Scenario {
        grace_ms: None,
        outage: false,
        offer_until,
    });
    let flap = run(&Scenario {
        grace_ms: None,
        outage: true,
        offer_until,
    });
    assert_eq!(flap.counters.dropped_link_down, 0, "{}", flap.text);
    assert_eq!(flap.sent.len(), reference.sent.len());
    let mut shifted = 0;
    for &(t, seq) in &reference.sent {
        let want = if t >= DOWN { t + (UP - DOWN) } else { t };
        assert_eq!(flap.tick_of(seq), Some(want), "frame {seq}");
        shifted += u64::from(t >= DOWN);
    }
    assert!(shifted > 100, "{shifted} frames waited for the link");
    flap.assert_rate_after_up();
}

#[test]
fn frames_arriving_during_an_outage_are_queued_and_leave_at_the_rate_after_it() {
    let flap = run(&Scenario {
        grace_ms: None,
        outage: true,
        offer_until: UP + 200,
    });
    assert_eq!(flap.counters.dropped_link_down, 0, "{}", flap.text);
    flap.assert_rate_after_up();
    // The backlogged class sends at its rate from the return on: one frame per tick.
    let after: Vec<u64> = flap
        .sent
        .iter()
        .map(|&(t, _)| t)
        .filter(|&t| t >= UP)
        .collect();
    assert!(after.len() > 400, "{} frames after the return", after.len());
    for (k, &t) in after.iter().enumerate() {
        assert_eq!(t, UP + k as u64, "the {k}th frame after the return");
    }
}

#[test]
fn an_outage_beyond_the_grace_drops_what_fell_due_past_it_and_nothing_bursts() {
    const GRACE_MS: u64 = 50;
    let offer_until = DOWN - 50;
    let reference = run(&Scenario {
        grace_ms: Some(GRACE_MS),
        outage: false,
        offer_until,
    });
    let flap = run(&Scenario {
        grace_ms: Some(GRACE_MS),
        outage: true,
        offer_until,
    });
    // Before the outage as without it; after it, the grace after the departure without it
    // (and a tick: the boundary frame, due while the link was down and not yet past the
    // grace, leaves at the return); in between, dropped.
    let mut dropped = 0;
    for &(t, seq) in &reference.sent {
        match flap.tick_of(seq) {
            Some(at) if t < DOWN => assert_eq!(at, t, "frame {seq}"),
            Some(at) => assert!(
                (t + GRACE_MS..=t + GRACE_MS + 1).contains(&at) && at >= UP,
                "frame {seq} sent at {at}, {t} without the outage"
            ),
            None => {
                assert!((DOWN..UP - GRACE_MS).contains(&t), "frame {seq} ({t})");
                dropped += 1;
            }
        }
    }
    assert_eq!(dropped, flap.counters.dropped_link_down);
    assert!(dropped >= UP - DOWN - GRACE_MS - 2, "{dropped} dropped");
    flap.assert_rate_after_up();
    // With frames arriving throughout: what falls due past the grace is dropped, the rest
    // leaves at the rate after the return.
    let busy = run(&Scenario {
        grace_ms: Some(GRACE_MS),
        outage: true,
        offer_until: UP + 200,
    });
    assert!(busy.counters.dropped_link_down >= UP - DOWN - GRACE_MS - 2);
    busy.assert_rate_after_up();
}
