//! Fair classes (`fair = true`) in simulated time: a sparse flow beside bulk flows, the rate,
//! the shares, per-flow ECN, accounting at stop and reloads.

use super::*;

/// A 100 Mbit/s class on ports 5201-5216, fair when `fair`, with `extra` lines.
fn class(fair: bool, extra: &str) -> String {
    let keys = format!("rate = \"100mbit\"\nfair = {fair}\n{extra}");
    crate::ops::config::fixture::tcp_class("bulk", "5201-5216", &keys)
}

/// 1514 bytes at 100 Mbit/s, ns.
const FRAME_NS: u64 = 121_120;

/// The times (since `t0`) at which frames of source port `port` left.
fn times_of(rig: &Rig, port: u16, t0: Timestamp) -> Vec<u64> {
    rig.sent
        .iter()
        .filter(|(_, f)| f[34..36] == port.to_be_bytes())
        .map(|(t, _)| t.saturating_since(t0).as_nanos())
        .collect()
}

/// Eight bulk flows queue 50 frames each (48 ms at 100 Mbit/s); 5 ms later a sparse flow
/// sends one small packet. Returns how long that packet waited, in ns.
fn sparse_wait(fair: bool) -> u64 {
    let mut rig = Rig::new(&class(fair, ""));
    let frames: Vec<Vec<u8>> = (0..400)
        .map(|i| tcp(40000 + i % 8, 5201, FULL, 0))
        .collect();
    rig.push(&frames);
    for _ in 0..500 {
        rig.step(Duration::from_micros(10));
    }
    let t_sparse = rig.now;
    rig.push(&[tcp(50000, 5201, 100, 0)]);
    rig.run_until_empty(Duration::from_micros(10));
    let c = rig.engine.counters();
    assert_eq!(rig.sent.len(), 401, "{c:?}");
    assert_eq!(c.dropped(), 0);
    times_of(&rig, 50000, t_sparse)[0]
}

#[test]
fn a_sparse_flow_waits_about_one_round_not_the_class_backlog() {
    let fair = sparse_wait(true);
    let fifo = sparse_wait(false);
    // Fair: it is the next packet pulled, within one frame time plus the 10 us step.
    assert!(fair <= FRAME_NS + 10_000, "fair: {fair} ns");
    // FIFO: behind the ~43 ms of bulk still queued.
    assert!(fifo >= 40_000_000, "fifo: {fifo} ns");
}

#[test]
fn a_fair_class_holds_its_rate_and_shares_it_evenly() {
    let mut rig = Rig::new(&class(true, ""));
    let t0 = rig.now;
    // Flow 0 queues 300 frames, flows 1..4 100 each: while all are backlogged they alternate.
    let mut frames: Vec<Vec<u8>> = (0..300).map(|_| tcp(40000, 5201, FULL, 0)).collect();
    frames.extend((0..400).map(|i| tcp(40001 + i % 4, 5201, FULL, 0)));
    rig.push(&frames);
    rig.run_until_empty(Duration::from_micros(10));
    assert_eq!(rig.sent.len(), 700);
    let last = rig.sent.last().unwrap().0.saturating_since(t0);
    let bits = (699 * FULL * 8) as f64; // the first frame leaves at t0 (its burst)
    let achieved = bits / last.as_secs_f64();
    assert!((achieved / 100e6 - 1.0).abs() < 0.001, "{achieved} bit/s");
    // The first 500 frames: 100 of each flow, each within one quantum (one frame) of the others.
    let mut counts = [0i64; 5];
    for (_, f) in &rig.sent[..500] {
        let port = u16::from_be_bytes([f[34], f[35]]);
        counts[usize::from(port - 40000)] += 1;
    }
    let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
    assert!(hi - lo <= 1, "{counts:?}");
    // Flow 0 alone at the end.
    assert!(rig.sent[510..]
        .iter()
        .all(|(_, f)| f[34..36] == 40000u16.to_be_bytes()));
    let c = rig.engine.counters();
    assert_eq!(
        (c.fair_enqueued, c.fair_pulled, c.released),
        (700, 700, 700)
    );
}

#[test]
fn ecn_marks_the_bulk_flow_by_its_own_delay_and_not_the_sparse_one() {
    let extra = r#"backpressure = { mode = "ecn", threshold = "1ms" }"#;
    let mut rig = Rig::new(&class(true, extra));
    // A bulk flow queues 100 ECT(0) frames (12 ms); a sparse flow sends one every 2 ms.
    rig.push(&vec![tcp(40000, 5201, FULL, 0b10); 100]);
    for _ in 0..5 {
        for _ in 0..200 {
            rig.step(Duration::from_micros(10));
        }
        rig.push(&[tcp(40000, 5201, FULL, 0b10), tcp(50000, 5201, 200, 0b10)]);
    }
    rig.run_until_empty(Duration::from_micros(10));
    let ce = |port: u16| {
        rig.sent
            .iter()
            .filter(|(_, f)| f[34..36] == port.to_be_bytes())
            .filter(|(_, f)| f[15] & 0b11 == 0b11)
            .count()
    };
    // The bulk flow's later arrivals find its head waiting more than 1 ms: all five marked.
    assert_eq!(ce(40000), 5);
    assert_eq!(ce(50000), 0);
    assert_eq!(rig.engine.counters().ecn_marked, 5);
}

#[test]
fn the_drop_limit_counts_packets_in_the_fair_queue() {
    let extra = r#"backpressure = { mode = "drop", limit = 4 }"#;
    let mut rig = Rig::new(&class(true, extra));
    rig.push(&vec![tcp(40000, 5201, FULL, 0); 10]);
    rig.push(&vec![tcp(40001, 5201, FULL, 0); 2]);
    let c = rig.engine.counters();
    assert_eq!(c.dropped_flow_limit, 6);
    rig.run_until_empty(Duration::from_micros(10));
    assert_eq!(rig.sent.len(), 6);
}

#[test]
fn frames_held_at_stop_are_counted_and_freed() {
    let mut rig = Rig::new(&class(true, ""));
    rig.push(&vec![tcp(40000, 5201, FULL, 0); 30]);
    assert_eq!(rig.engine.class_fair_queued("bulk"), 29);
    assert_eq!(rig.engine.class_fair_flows("bulk"), 1);
    let text = rig.metrics.encode();
    assert!(
        text.contains(r#"metronome_class_fair_flows{class="bulk"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"metronome_class_queued_packets{class="bulk"} 29"#),
        "{text}"
    );
    assert!(
        text.contains(r#"metronome_class_fair_overflow_total{class="bulk"} 0"#),
        "{text}"
    );
    assert!(
        !text.contains(r#"metronome_class_fair_flows{class="default"}"#),
        "{text}"
    );
    let n = rig.engine.drain_all(&mut rig.pool);
    assert_eq!(n, 29);
    let c = rig.engine.counters();
    assert_eq!(c.fair_discarded_at_stop, 29);
    rig.engine.invariants();
    assert_eq!(rig.pool.in_use(), 0);
}

#[test]
fn reload_toggles_fair_and_keeps_the_queued_packets() {
    let mut rig = Rig::new(&class(true, ""));
    rig.push(&vec![tcp(40000, 5201, FULL, 0); 20]);
    let plan = rig.reload(&config(&class(false, ""))).unwrap();
    assert!(plan.to_string().contains("fair"), "{plan}");
    // New packets are stamped on arrival; the fair queue still drains.
    rig.push(&vec![tcp(40001, 5201, FULL, 0); 5]);
    rig.run_until_empty(Duration::from_micros(10));
    assert_eq!(rig.sent.len(), 25);
    rig.reload(&config(&class(true, ""))).unwrap();
    rig.push(&vec![tcp(40002, 5201, FULL, 0); 5]);
    rig.run_until_empty(Duration::from_micros(10));
    assert_eq!(rig.sent.len(), 30);
    assert_eq!(rig.engine.counters().dropped(), 0);
}

#[test]
fn lateness_of_the_loop_does_not_cost_the_fair_class_rate() {
    let mut rig = Rig::new(&class(true, ""));
    let t0 = rig.now;
    rig.push(&vec![tcp(40000, 5201, FULL, 0); 200]);
    // Released only every 1 ms (about 8 frame times): the pulls catch up, stamped as of arrival.
    rig.run_until_empty(Duration::from_millis(1));
    let sent = rig.sent.len();
    assert_eq!(sent, 200);
    let last = rig.sent.last().unwrap().0.saturating_since(t0).as_nanos();
    let want = 199 * FRAME_NS;
    assert!(
        last >= want && last < want + 1_000_000,
        "{last} ns, want {want}"
    );
}

#[test]
fn per_flow_pacing_still_applies_in_a_fair_class() {
    let mut rig = Rig::new(&class(true, r#"pacing = "12mbit""#));
    let t0 = rig.now;
    rig.push(&vec![tcp(40000, 5201, FULL, 0); 5]);
    rig.push(&vec![tcp(40001, 5201, FULL, 0); 5]);
    rig.run_until_empty(Duration::from_micros(2));
    // 1514 bytes at 12 Mbit/s: packet k of each flow leaves no earlier than k x 1009.33 us (less
    // a 2 us step) and no later than that plus one frame at the aggregate's 100 Mbit/s (the two
    // flows are due together; one of them goes first). As in a FIFO class, each policy keeps
    // its own timestamps (Carousel §5.1.1), so the pacing times count from the arrival.
    let gap = Rate::mbps(12).transmit_time(FULL as u64).as_nanos();
    for port in [40000, 40001] {
        let times = times_of(&rig, port, t0);
        assert_eq!(times.len(), 5);
        for (k, t) in times.iter().enumerate() {
            let earliest = k as u64 * gap;
            assert!(
                *t + 2_000 >= earliest && *t <= earliest + FRAME_NS + 2_000,
                "{port}: packet {k} at {t} ns, paced at {earliest}: {times:?}"
            );
        }
    }
}

/// Frames of source port `port` that left.
fn count_of(rig: &Rig, port: u16) -> usize {
    rig.sent
        .iter()
        .filter(|(_, f)| f[34..36] == port.to_be_bytes())
        .count()
}

#[test]
fn a_nearly_full_pool_sheds_from_the_fattest_flow_not_the_arrivals() {
    let mut rig = Rig::new(&class(true, ""));
    // One bulk flow queues 3 800 frames, another 200, all at one instant: more than the 4 096-slot
    // pool less its one-eighth reserve.
    for _ in 0..38 {
        rig.push(&vec![tcp(40000, 5201, FULL, 0); 100]);
    }
    rig.push(&vec![tcp(40001, 5201, FULL, 0); 200]);
    rig.push(&[tcp(50000, 5201, 100, 0)]);
    let c = rig.engine.counters();
    assert!(c.fair_dropped_fattest > 0, "{c:?}");
    assert!(
        rig.pool.available() >= 4096 / 8 - 1,
        "{}",
        rig.pool.available()
    );
    rig.run_until_empty(Duration::from_micros(100));
    let c = rig.engine.counters();
    // Only the fattest flow lost frames: every frame of the others left.
    assert_eq!(count_of(&rig, 40001), 200);
    assert_eq!(count_of(&rig, 50000), 1);
    assert_eq!(
        count_of(&rig, 40000) as u64,
        3800 - c.fair_dropped_fattest,
        "{c:?}"
    );
    assert_eq!(c.dropped(), c.fair_dropped_fattest, "{c:?}");
    let text = rig.metrics.encode();
    assert!(text.contains("queue_full"), "{text}");
}

#[test]
fn under_a_reject_horizon_the_fair_backlog_is_bounded_by_the_horizon() {
    let extra = "horizon_policy = \"reject\"\n[wheel]\nhorizon = \"20ms\"\n";
    let mut rig = Rig::new(&class(true, extra));
    // 400 frames of one flow: 48 ms at 100 Mbit/s, more than the 20 ms horizon.
    for _ in 0..4 {
        rig.push(&vec![tcp(40000, 5201, FULL, 0); 100]);
    }
    rig.push(&[tcp(50000, 5201, 100, 0)]);
    let c = rig.engine.counters();
    assert!(c.fair_dropped_fattest >= 400 - 166, "{c:?}");
    // At most the horizon's bytes stay queued: 20 ms at 100 Mbit/s is 165 full frames.
    assert!(rig.engine.class_fair_queued("bulk") <= 166);
    rig.run_until_empty(Duration::from_micros(100));
    assert_eq!(count_of(&rig, 50000), 1);
    assert_eq!(
        count_of(&rig, 40000) as u64,
        400 - rig.engine.counters().fair_dropped_fattest
    );
}

#[test]
fn a_late_pull_of_a_newer_flows_packet_does_not_cost_the_rate() {
    let mut rig = Rig::new(&class(true, ""));
    let t0 = rig.now;
    rig.push(&vec![tcp(40000, 5201, FULL, 0); 200]);
    // Released only every 1 ms; each time a second flow's frame arrives first and is served
    // first (its flow is owed its share), though older frames of the class were waiting.
    let mut pushed = 0;
    while rig.engine.queued() > 0 {
        if pushed < 20 {
            // The frame is received 1 ms after the last release, then the release runs.
            rig.now += Duration::from_millis(1);
            rig.push(&[tcp(40001, 5201, FULL, 0)]);
            pushed += 1;
        } else {
            rig.step(Duration::from_millis(1));
        }
    }
    assert_eq!(rig.sent.len(), 220);
    let last = rig.sent.last().unwrap().0.saturating_since(t0).as_nanos();
    let want = 219 * FRAME_NS;
    assert!(
        last >= want && last < want + 1_000_000,
        "{last} ns, want {want}"
    );
}

/// Steps the rig by `step` until a frame of the bulk ports (below 50000) leaves; returns the
/// class's frames sent so far.
fn step_to_bulk_departure(rig: &mut Rig, step: Duration) -> usize {
    let bulk = |rig: &Rig| {
        rig.sent
            .iter()
            .filter(|(_, f)| u16::from_be_bytes([f[34], f[35]]) < 50000)
            .count()
    };
    let before = bulk(rig);
    while bulk(rig) == before {
        rig.step(step);
    }
    rig.sent.len()
}

#[test]
fn a_sparse_packet_leaves_at_once_and_the_class_keeps_its_rate() {
    const STEP: Duration = Duration::from_micros(2);
    const SPARSE: usize = 600;
    let mut rig = Rig::new(&class(true, ""));
    // Four bulk flows queue 25 frames each: 12 ms of backlog at 100 Mbit/s.
    let frames: Vec<Vec<u8>> = (0..100)
        .map(|i| tcp(40000 + i % 4, 5201, FULL, 0))
        .collect();
    rig.push(&frames);
    let mut waits = Vec::new();
    for k in 0..8u16 {
        for _ in 0..4 {
            step_to_bulk_departure(&mut rig, STEP);
        }
        // A bulk frame has just left: the class's next slot is about one frame time away.
        let t = rig.now;
        rig.push(&[tcp(50000 + k, 5201, SPARSE, 0)]);
        waits.push(times_of(&rig, 50000 + k, t).first().copied());
    }
    // It left at the moment it arrived, not at the class's next slot (~121 us later).
    assert!(waits.iter().all(|w| *w == Some(0)), "{waits:?}");
    // Three sparse packets at once right after a bulk departure: the two small ones go early,
    // the full frame would pass one quantum of early bytes and waits for the next pull.
    step_to_bulk_departure(&mut rig, STEP);
    let t = rig.now;
    rig.push(&[
        tcp(50100, 5201, SPARSE, 0),
        tcp(50101, 5201, SPARSE, 0),
        tcp(50102, 5201, FULL, 0),
    ]);
    assert_eq!(times_of(&rig, 50100, t), [0]);
    assert_eq!(times_of(&rig, 50101, t), [0]);
    assert!(times_of(&rig, 50102, t).is_empty());
    rig.run_until_empty(STEP);
    let c = rig.engine.counters();
    assert_eq!(c.fair_sparse_early, 10, "{c:?}");
    assert_eq!(rig.sent.len(), 111);
    assert_eq!((c.fair_enqueued, c.fair_pulled), (101, 101), "{c:?}");
    let text = rig.metrics.encode();
    assert!(
        text.contains(r#"metronome_class_fair_sparse_early_total{class="bulk"} 10"#),
        "{text}"
    );
    // Over every window, the class sent at most its rate's bytes plus its first frame (its
    // burst), one quantum (a full frame) of sparse bytes sent early, and the bytes of one step
    // of release granularity.
    let rate_bpns = 100e6 / 8.0 / 1e9;
    let slack = 2 * FULL as u64 + (rate_bpns * STEP.as_nanos() as f64).ceil() as u64;
    for (i, (start, _)) in rig.sent.iter().enumerate() {
        let mut sum = 0;
        for (j, (end, f)) in rig.sent.iter().enumerate().skip(i) {
            sum += f.len() as u64;
            let window = end.saturating_since(*start).as_nanos();
            let allowed = (rate_bpns * window as f64) as u64 + slack;
            assert!(
                sum <= allowed,
                "frames {i}..={j}: {sum} bytes in {window} ns, allowed {allowed}"
            );
        }
    }
}
