//! A class's `queue` bounds and its share of the frame pool: no class's backlog can take
//! another's buffer, whatever its horizon policy.

use super::*;

/// A class `flood` (TCP to port 9000) at `rate` with `extra` keys, beside BASE's classes.
fn with_flood(rate: &str, extra: &str, wheel: &str) -> String {
    format!(
        "{BASE}\n[[class]]\nname = \"flood\"\nmatch = {{ dst_port = 9000 }}\nrate = \"{rate}\"\n\
         {extra}\n{wheel}"
    )
}

/// `n` frames of `wire` bytes to port 9000, from eight source ports.
fn flood(n: usize, wire: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| tcp(40000 + (i % 8) as u16, 9000, wire, 0))
        .collect()
}

/// Frames admitted and frames dropped under `queue_full`.
fn admitted(rig: &Rig) -> (u64, u64) {
    let c = rig.engine.counters();
    (c.enqueued, c.dropped_queue_full)
}

#[test]
fn a_class_holds_no_more_than_its_queue_packets_and_bytes() {
    let mut rig = Rig::new(&with_flood("10mbit", "queue = { packets = 20 }", ""));
    rig.push(&flood(100, FULL));
    assert_eq!(admitted(&rig), (20, 80));

    let mut rig = Rig::new(&with_flood("10mbit", "queue = { bytes = \"10k\" }", ""));
    rig.push(&flood(100, FULL));
    // 6 full frames are 9 084 bytes, 7 would be 10 598 > 10 240.
    assert_eq!(admitted(&rig), (6, 94));
    // What is queued still leaves, and then the class takes frames again.
    rig.run_until_empty(Duration::from_millis(1));
    rig.push(&flood(3, FULL));
    assert_eq!(admitted(&rig), (9, 94));
}

#[test]
fn by_default_a_class_holds_one_horizon_at_its_rate_also_when_it_clamps() {
    // 10 Mbit/s over a 20 ms horizon: 25 000 bytes, max(17, 64) = 64 frames.
    let wheel = "[wheel]\nhorizon = \"20ms\"\n";
    for policy in ["", "horizon_policy = \"clamp\""] {
        let mut rig = Rig::new(&with_flood("10mbit", policy, wheel));
        rig.push(&flood(200, 100));
        assert_eq!(admitted(&rig), (64, 136), "{policy}");
        let mut rig = Rig::new(&with_flood("10mbit", policy, wheel));
        rig.push(&flood(200, FULL));
        // 16 full frames are 24 224 bytes, 17 would pass 25 000.
        assert_eq!(admitted(&rig), (16, 184), "{policy}");
    }
}

#[test]
fn a_flooded_class_leaves_the_frame_pool_to_the_others() {
    // Bounds and a horizon far above the pool (1 Gbit/s for 2 s is 165 000 full frames): only
    // the pool share holds the flood.
    let text = with_flood("1gbit", "queue = { packets = 1000000, bytes = \"1g\" }", "");
    let mut rig = Rig::new(&text);
    for _ in 0..8 {
        rig.push(&flood(1000, FULL));
    }
    let held = rig.engine.class_queued("flood");
    let slots = rig.pool.capacity() as u64;
    // At most `pool_share` (4) times what is left free: 4/5 of the pool, less a receive batch.
    let share = u64::from(crate::ops::config::DEFAULT_POOL_SHARE);
    assert!(held <= slots * share / (share + 1) + 1, "{held}");
    assert!(held >= slots * share / (share + 1) - 64, "{held}");
    assert!(rig.engine.counters().dropped_pool_share > 0);
    // Another class still finds slots, and nothing of it is dropped.
    let bulk: Vec<_> = (0..200).map(|i| tcp(41000 + i, 5201, FULL, 0)).collect();
    let before = rig.engine.counters();
    rig.push(&bulk);
    let after = rig.engine.counters();
    assert_eq!(after.enqueued - before.enqueued, 200);
    assert_eq!(after.dropped(), before.dropped());
}

#[test]
fn a_class_at_its_reject_horizon_keeps_its_rate_when_the_loop_releases_late() {
    // The loop receives at a later `now` than it last released (it slept, or served another
    // port), so the wheel's front lags `now`. A frame admitted at the horizon must still be
    // queued, never stamped and then refused: that would charge the class's rate for nothing.
    let text = with_flood(
        "10mbit",
        "horizon_policy = \"reject\"\nqueue = { packets = 1000, bytes = \"10m\" }",
        "[wheel]\nhorizon = \"20ms\"\n",
    );
    let mut rig = Rig::new(&text);
    let step = Duration::from_micros(100);
    let mut sent = 0;
    for k in 0..4000u64 {
        rig.now += step;
        // 20 Mbit/s offered: a full frame every 600 µs.
        if k % 6 == 0 {
            for f in flood(1, FULL) {
                rig.inside.inject(&f).unwrap();
            }
            let mut rx = [RxFrame::default(); 64];
            let n = rig.inside.recv(&mut rig.pool, &mut rx).unwrap();
            let mut forward = Vec::new();
            rig.engine
                .receive(rig.now, &mut rig.pool, &rx[..n], &mut forward);
            assert!(forward.is_empty());
        }
        // The loop releases every 500 µs only.
        if k % 5 == 0 {
            rig.sent.clear();
            rig.step(Duration::ZERO);
            if k >= 2000 {
                sent += rig.sent.iter().map(|(_, f)| f.len() as u64).sum::<u64>();
            }
        }
    }
    // Over the last 200 ms: 10 Mbit/s is 250 000 bytes.
    let rate = sent as f64 * 8.0 / 0.2;
    assert!((rate - 10e6).abs() <= 10e6 * 0.02, "{rate}");
    let c = rig.engine.counters();
    assert!(c.dropped_horizon > 0, "the flood reached its horizon");
}
