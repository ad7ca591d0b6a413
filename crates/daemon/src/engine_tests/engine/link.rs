//! The shared link through the engine, in simulated time: shares by weight, borrowing, the link
//! rate and the classes' ceilings held, the priority tier's wait, reload without loss, MQ-ECN
//! marking and the not-ECT policy. Greedy sources keep every active class backlogged.

use super::*;

/// A 100 Mbit/s link without super-frames (frames of at most 1514 + 8 bytes).
const LINK: &str = r#"
[interfaces]
inside = "in0"
outside = "out0"

[daemon]
vnet_hdr = false

[link]
rate = "100mbit"
buffer = "512kb"
marking = "none"

[[class]]
name = "a"
match = { protocol = "tcp", dst_port = 5001 }
weight = 1

[[class]]
name = "b"
match = { protocol = "tcp", dst_port = 5002 }
weight = 3
"#;

/// The simulation step: the loop wakes every 100 µs.
const STEP: Duration = Duration::from_micros(100);

/// Runs `rig` for `steps` steps, topping up before each the classes whose destination ports
/// `active(step)` returns to `backlog` frames (of `ecn` bits) in the engine.
fn run(
    rig: &mut Rig,
    steps: u64,
    backlog: u64,
    ecn: u8,
    active: impl Fn(u64) -> Vec<(u16, &'static str)>,
) {
    for s in 0..steps {
        let mut frames = Vec::new();
        for (port, name) in active(s) {
            let queued = rig.engine.class_queued(name);
            for _ in queued..backlog {
                frames.push(tcp(40_000, port, FULL, ecn));
            }
        }
        rig.push(&frames);
        rig.step(STEP);
    }
}

/// Wire bytes sent to each of `ports` in `[from, to)`.
fn bytes_by_port(rig: &Rig, ports: &[u16], from: Timestamp, to: Timestamp) -> Vec<u64> {
    ports
        .iter()
        .map(|&p| {
            rig.sent
                .iter()
                .filter(|(t, f)| *t >= from && *t < to && f[36..38] == p.to_be_bytes())
                .map(|(_, f)| f.len() as u64)
                .sum()
        })
        .collect()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn two_classes_share_the_link_one_to_three_and_the_link_rate_holds() {
    let mut rig = Rig::new(LINK);
    let start = rig.now;
    run(&mut rig, 5_000, 40, 0, |_| vec![(5001, "a"), (5002, "b")]);
    let (from, to) = (start + ms(100), start + ms(500));
    let b = bytes_by_port(&rig, &[5001, 5002], from, to);
    let total = (b[0] + b[1]) as f64;
    let share_a = b[0] as f64 / total;
    assert!(
        (share_a - 0.25).abs() < 0.02,
        "a's share {share_a:.4} (bytes {b:?})"
    );
    // The link is saturated and never above its rate: 100 Mbit/s over 400 ms is 5 MB, within
    // one burst (a quantum) and one step.
    let link_bytes = Rate::mbps(100).bytes_in(ms(400));
    assert!(total as u64 <= link_bytes + 1522 + Rate::mbps(100).bytes_in(STEP));
    assert!(
        total as u64 >= link_bytes * 99 / 100,
        "{total} of {link_bytes}"
    );
    let l = rig.engine.link().unwrap();
    assert_eq!(l.counters().dropped(), 0);
}

#[test]
fn when_a_class_stops_the_other_takes_the_link_within_200ms() {
    let mut rig = Rig::new(LINK);
    let start = rig.now;
    // a (weight 1) stops at 300 ms; b (weight 3) keeps sending.
    run(&mut rig, 8_000, 40, 0, |s| {
        if s < 3_000 {
            vec![(5001, "a"), (5002, "b")]
        } else {
            vec![(5002, "b")]
        }
    });
    let stop = start + ms(300);
    let b = bytes_by_port(&rig, &[5001, 5002], stop + ms(200), stop + ms(500));
    let link_bytes = Rate::mbps(100).bytes_in(ms(300));
    assert!(
        b[1] as f64 >= 0.98 * link_bytes as f64,
        "b sent {} of the link's {link_bytes} bytes after a stopped",
        b[1]
    );
    // And the borrowing is immediate: b has the whole link from the step after a's last frame.
    let last_a = rig
        .sent
        .iter()
        .filter(|(_, f)| f[36..38] == 5001u16.to_be_bytes())
        .map(|(t, _)| *t)
        .max()
        .unwrap();
    assert!(last_a < stop + ms(200), "a still sent at {last_a:?}");
    let early = bytes_by_port(&rig, &[5002], last_a + STEP, last_a + STEP + ms(10));
    let ten = Rate::mbps(100).bytes_in(ms(10));
    assert!(early[0] as f64 >= 0.98 * ten as f64, "{early:?} of {ten}");
}

#[test]
fn a_class_ceiling_holds_on_the_link_and_the_rest_goes_to_the_others() {
    // a has weight 3 but a ceiling of 20 Mbit/s: b gets the other 80.
    let text = LINK.replace("weight = 1", "weight = 3\nrate = \"20mbit\"");
    let text = text.replacen(
        "dst_port = 5002 }\nweight = 3",
        "dst_port = 5002 }\nweight = 1",
        1,
    );
    let mut rig = Rig::new(&text);
    let start = rig.now;
    run(&mut rig, 5_000, 40, 0, |_| vec![(5001, "a"), (5002, "b")]);
    let b = bytes_by_port(&rig, &[5001, 5002], start + ms(100), start + ms(500));
    let a_bps = b[0] as f64 * 8.0 / 0.4;
    let b_bps = b[1] as f64 * 8.0 / 0.4;
    assert!(a_bps <= 20e6 * 1.01, "a at {a_bps} bit/s above its ceiling");
    assert!(a_bps >= 20e6 * 0.97, "a at {a_bps} bit/s");
    assert!(b_bps >= 80e6 * 0.97, "b at {b_bps} bit/s");
}

#[test]
fn a_priority_class_waits_under_a_millisecond_while_the_others_saturate() {
    let text = format!(
        "{LINK}\n[[class]]\nname = \"probe\"\nmatch = {{ protocol = \"tcp\", dst_port = 5003 }}\n\
         priority = 0\nrate = \"10mbit\"\n"
    );
    let mut rig = Rig::new(&text);
    // The probe sends one frame every 10 ms; a and b saturate the link.
    run(&mut rig, 5_000, 40, 0, |s| {
        let mut v = vec![(5001, "a"), (5002, "b")];
        if s % 100 == 0 {
            v.push((5003, "probe"));
        }
        v
    });
    let probe = rig.engine.class_index("probe").unwrap();
    let l = rig.engine.link().unwrap();
    let c = l.class_counters(probe);
    assert!(c.packets >= 49, "{c:?}");
    assert!(
        c.delay_max_ns < 1_000_000,
        "the probe waited up to {} ns",
        c.delay_max_ns
    );
    let a = l.class_counters(rig.engine.class_index("a").unwrap());
    assert!(a.delay_max_ns > 1_000_000, "a did not saturate: {a:?}");
}

#[test]
fn reload_changes_weights_and_the_link_rate_without_losing_queued_packets() {
    let mut rig = Rig::new(LINK);
    let start = rig.now;
    run(&mut rig, 2_000, 40, 0, |_| vec![(5001, "a"), (5002, "b")]);
    let queued = rig.engine.queued();
    assert!(queued >= 60, "{queued}");
    let swapped = LINK
        .replace("weight = 3", "weight = X")
        .replace("weight = 1", "weight = 3")
        .replace("weight = X", "weight = 1")
        .replace("rate = \"100mbit\"", "rate = \"50mbit\"");
    let plan = rig.reload(&config(&swapped)).unwrap();
    assert_eq!(plan.link.len(), 1, "{plan}");
    assert_eq!(
        rig.engine.queued(),
        queued,
        "the reload lost queued packets"
    );
    rig.engine.invariants();
    let l = rig.engine.link().unwrap();
    assert_eq!(l.counters().moved_by_reload, queued as u64);
    let at = rig.now;
    run(&mut rig, 5_000, 40, 0, |_| vec![(5001, "a"), (5002, "b")]);
    let b = bytes_by_port(&rig, &[5001, 5002], at + ms(100), at + ms(500));
    let total = (b[0] + b[1]) as f64;
    assert!((b[0] as f64 / total - 0.75).abs() < 0.02, "{b:?}");
    let link_bytes = Rate::mbps(50).bytes_in(ms(400));
    assert!(total as u64 <= link_bytes + 1522 + Rate::mbps(50).bytes_in(STEP));
    assert!(total as u64 >= link_bytes * 99 / 100);
    // Every frame received is accounted for, none dropped.
    let c = rig.engine.counters();
    assert_eq!(c.link_dropped, 0);
    assert!(rig.now > start);
}

#[test]
fn mq_ecn_marks_ect_packets_and_a_drop_class_drops_not_ect_ones() {
    let text = LINK
        .replace("marking = \"none\"", "marking = \"mq-ecn\"\nrtt = \"1ms\"")
        .replacen(
            "dst_port = 5002 }\nweight = 3",
            "dst_port = 5002 }\nweight = 3\nnon_ect = \"drop\"",
            1,
        );
    let mut rig = Rig::new(&text);
    // a is ECT(0), b is not ECN-capable: a's packets above the threshold are marked, b's dropped.
    for _ in 0..3_000 {
        let mut frames = Vec::new();
        for _ in rig.engine.class_queued("a")..60 {
            frames.push(tcp(40_000, 5001, FULL, 0b10));
        }
        for _ in rig.engine.class_queued("b")..60 {
            frames.push(tcp(40_000, 5002, FULL, 0));
        }
        rig.push(&frames);
        rig.step(STEP);
    }
    let l = rig.engine.link().unwrap();
    let (ia, ib) = (
        rig.engine.class_index("a").unwrap(),
        rig.engine.class_index("b").unwrap(),
    );
    let (a, b) = (l.class_counters(ia), l.class_counters(ib));
    assert!(a.marked > 0, "{a:?}");
    assert!(b.dropped_not_ect > 0, "{b:?}");
    assert_eq!(b.marked, 0);
    // MQ-ECN's threshold follows the measured round: K = 100 Mbit/s x 1 ms = 12 500 bytes for
    // a lone queue; with both backlogged, a's quantum is a quarter of a round.
    assert!(l.round_time().is_some());
    let ka = l.class_threshold_bytes(ia);
    assert!(ka < 12_500 && ka > 1_500, "K_a = {ka}");
    let marked_frames = rig
        .sent
        .iter()
        .filter(|(_, f)| f[36..38] == 5001u16.to_be_bytes() && f[15] & 0b11 == 0b11)
        .count() as u64;
    // Marked on entering the link: those sent, plus at most a's 60 still queued.
    assert!(marked_frames <= a.marked && a.marked - marked_frames <= 60);
    assert_eq!(rig.engine.counters().link_dropped, b.dropped_not_ect);
}

#[test]
fn stop_discards_what_the_link_holds_and_counts_it() {
    let mut rig = Rig::new(LINK);
    run(&mut rig, 100, 40, 0, |_| vec![(5001, "a"), (5002, "b")]);
    let queued = rig.engine.queued() as u64;
    assert!(queued > 0);
    assert_eq!(rig.engine.drain_all(&mut rig.pool), queued);
    assert_eq!(rig.engine.queued(), 0);
    assert_eq!(rig.pool.in_use(), 0);
    rig.engine.invariants();
}

#[test]
fn metrics_and_stats_show_each_class_share_backlog_and_threshold() {
    let text = LINK.replace("marking = \"none\"", "marking = \"mq-ecn\"\nrtt = \"1ms\"");
    let mut rig = Rig::new(&text);
    run(&mut rig, 1_000, 40, 0b10, |_| {
        vec![(5001, "a"), (5002, "b")]
    });
    let first = rig.metrics.encode();
    run(&mut rig, 2_000, 40, 0b10, |_| {
        vec![(5001, "a"), (5002, "b")]
    });
    let second = rig.metrics.encode();
    for series in [
        "metronome_link_class_bytes_total{class=\"a\"}",
        "metronome_link_class_queue_bytes{class=\"b\"}",
        "metronome_link_class_threshold_bytes{class=\"a\"}",
        "metronome_link_class_marks_total{class=\"a\"}",
        "metronome_link_round_time_ns",
        "metronome_link_rate_bps 100000000",
    ] {
        assert!(second.contains(series), "{series} missing:\n{second}");
    }
    let stats =
        crate::ops::metrics::format_stats(&first, &second, std::time::Duration::from_millis(200));
    let line = |name: &str| {
        stats
            .lines()
            .find(|l| {
                l.trim_start().starts_with(&format!("class {name}: sent")) && l.contains("share")
            })
            .unwrap_or_else(|| panic!("no link line for {name}:\n{stats}"))
            .to_owned()
    };
    assert!(stats.contains("link: rate 100.0Mbit"), "{stats}");
    assert!(line("a").contains("share 25."), "{stats}");
    assert!(line("b").contains("share 75."), "{stats}");
    assert!(!line("a").contains("threshold none"), "{stats}");
}

#[test]
fn nicpic_shares_a_link_among_hundreds_of_classes_by_weight() {
    // 300 classes on one link: one of weight 3 and one of weight 1 carry traffic, with 298 idle
    // classes configured around them; then a third of weight 2 joins.
    let mut text = LINK
        .replace(
            "buffer = \"512kb\"",
            "buffer = \"512kb\"\nscheduler = \"nicpic\"",
        )
        .replace("marking = \"none\"", "marking = \"mq-ecn\"\nrtt = \"1ms\"");
    for i in 0..298 {
        text.push_str(&format!(
            "[[class]]\nname = \"idle{i}\"\nmatch = {{ protocol = \"udp\", dst_port = {} }}\n",
            10_000 + i
        ));
    }
    text.push_str(
        "[[class]]\nname = \"c\"\nmatch = { protocol = \"tcp\", dst_port = 5003 }\nweight = 2\n",
    );
    let mut rig = Rig::new(&text);
    let start = rig.now;
    run(&mut rig, 4_000, 40, 0b10, |s| {
        let mut v = vec![(5001, "a"), (5002, "b")];
        if s >= 2_000 {
            v.push((5003, "c"));
        }
        v
    });
    let two = bytes_by_port(&rig, &[5001, 5002], start + ms(50), start + ms(200));
    let total = (two[0] + two[1]) as f64;
    assert!((two[0] as f64 / total - 0.25).abs() < 0.02, "{two:?}");
    let link_bytes = Rate::mbps(100).bytes_in(ms(150));
    assert!(
        total as u64 <= link_bytes + 2 * 1522,
        "{total} above {link_bytes}"
    );
    assert!(
        total as u64 >= link_bytes * 98 / 100,
        "{total} of {link_bytes}"
    );
    // With c (weight 2) too: 1/6, 3/6, 2/6.
    let three = bytes_by_port(&rig, &[5001, 5002, 5003], start + ms(250), start + ms(400));
    let total: u64 = three.iter().sum();
    for (got, want) in three.iter().zip([1.0 / 6.0, 0.5, 1.0 / 3.0]) {
        let share = *got as f64 / total as f64;
        assert!((share - want).abs() < 0.02, "{three:?}");
    }
    let l = rig.engine.link().unwrap();
    assert!(
        l.class_counters(rig.engine.class_index("a").unwrap())
            .marked
            > 0
    );
    assert_eq!(l.counters().dropped(), 0);
}

#[test]
fn reload_changes_a_priority_and_a_ceiling_without_losing_queued_packets() {
    let mut rig = Rig::new(LINK);
    run(&mut rig, 1_000, 40, 0, |_| vec![(5001, "a"), (5002, "b")]);
    let queued = rig.engine.queued();
    // a becomes a priority class under a 20 Mbit/s ceiling; b keeps its weight.
    let new = LINK.replace("weight = 1", "priority = 0\nrate = \"20mbit\"");
    let plan = rig.reload(&config(&new)).unwrap();
    assert!(
        plan.to_string().contains("class a: link: weight 1"),
        "{plan}"
    );
    assert_eq!(
        rig.engine.queued(),
        queued,
        "the reload lost queued packets"
    );
    rig.engine.invariants();
    let at = rig.now;
    run(&mut rig, 4_000, 40, 0, |_| vec![(5001, "a"), (5002, "b")]);
    let b = bytes_by_port(&rig, &[5001, 5002], at + ms(100), at + ms(400));
    let a_bps = b[0] as f64 * 8.0 / 0.3;
    let b_bps = b[1] as f64 * 8.0 / 0.3;
    assert!((19.4e6..=20.2e6).contains(&a_bps), "a at {a_bps} bit/s");
    assert!(b_bps >= 79e6, "b at {b_bps} bit/s");
    // a's packets no longer wait for the link: priority, and its ceiling keeps its queue short.
    let ia = rig.engine.class_index("a").unwrap();
    let (a_packets, _) = rig.engine.link().unwrap().class_queued(ia);
    assert!(a_packets <= 1, "{a_packets}");
    assert_eq!(rig.engine.counters().link_dropped, 0);
}
