use super::*;
use std::net::SocketAddr;
use std::time::Duration;

#[test]
fn pow2_buckets_are_exact_at_the_bounds() {
    let h = Pow2Histogram::new(LATENESS_BASE_NS, LATENESS_BUCKETS);
    assert_eq!(h.bucket_index(0), 0);
    assert_eq!(h.bucket_index(1_000), 0);
    assert_eq!(h.bucket_index(1_001), 1);
    assert_eq!(h.bucket_index(2_000), 1);
    assert_eq!(h.bucket_index(2_001), 2);
    assert_eq!(h.bucket_index(1_000 << 17), 17);
    assert_eq!(h.bucket_index((1_000 << 17) + 1), LATENESS_BUCKETS);
    assert_eq!(h.bucket_index(u64::MAX), LATENESS_BUCKETS);
    let b = Pow2Histogram::new(1, BATCH_BUCKETS);
    assert_eq!(
        (b.bucket_index(1), b.bucket_index(3), b.bucket_index(64)),
        (0, 2, 6)
    );
    assert_eq!(b.bucket_index(1024), 10);
}

#[test]
fn every_wake_cause_sits_at_its_own_index() {
    for (i, w) in Wake::ALL.iter().enumerate() {
        assert_eq!(*w as usize, i, "{w:?}");
    }
}

#[test]
fn encoding_holds_every_family() {
    let m = Metrics::new();
    let a = m.class("A");
    a.sent(3, 4_500);
    a.dropped_n(DropReason::FlowLimit, 1);
    a.ecn_marked_n(1);
    a.ecn_not_ect_n(1);
    a.set_queued(12);
    m.set_wheel_occupancy(40);
    m.observe_lateness_ns(1_500);
    m.observe_tx_batch(64);
    m.rx_ring_drops(2);
    m.loop_slept_ns(7_000);
    m.loop_woke(Wake::Due);
    m.loop_woke(Wake::Due);
    m.loop_woke(Wake::Frame);
    m.malformed("truncated_ipv4");
    m.pass_through(5, 300);
    let text = m.encode();
    for needle in [
        r#"metronome_class_bytes_total{class="A"} 4500"#,
        r#"metronome_class_packets_total{class="A"} 3"#,
        r#"metronome_class_drops_total{class="A",reason="flow_limit"} 1"#,
        r#"metronome_class_drops_total{class="A",reason="horizon"} 0"#,
        r#"metronome_class_ecn_marks_total{class="A"} 1"#,
        r#"metronome_class_ecn_not_ect_total{class="A"} 1"#,
        r#"metronome_class_queued_packets{class="A"} 12"#,
        "metronome_wheel_occupancy_packets 40",
        r#"metronome_lateness_ns_bucket{le="1000.0"} 0"#,
        r#"metronome_lateness_ns_bucket{le="2000.0"} 1"#,
        "metronome_lateness_ns_count 1",
        r#"metronome_tx_batch_packets_bucket{le="64.0"} 1"#,
        "metronome_rx_ring_drops_total 2",
        "metronome_loop_sleep_nanoseconds_total 7000",
        r#"metronome_loop_wakeups_total{by="frame"} 1"#,
        r#"metronome_loop_wakeups_total{by="due"} 2"#,
        r#"metronome_loop_wakeups_total{by="control"} 0"#,
        r#"metronome_malformed_frames_total{reason="truncated_ipv4"} 1"#,
        "metronome_pass_through_packets_total 5",
        "metronome_pass_through_bytes_total 300",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
}

#[test]
fn class_handles_survive_a_reload() {
    let m = Metrics::new();
    m.class("A").sent(1, 100);
    m.class("A").sent(1, 100);
    assert!(m
        .encode()
        .contains(r#"metronome_class_bytes_total{class="A"} 200"#));
}

#[test]
fn a_listed_selection_hides_the_other_classes_and_the_totals_count_them() {
    let m = Metrics::new();
    m.class("a").sent(2, 3_000);
    m.class("b").sent(5, 7_000);
    m.class("b").dropped_n(DropReason::QueueFull, 1);
    m.class("c").set_queued(4);
    let all = m.encode();
    assert!(
        all.contains(r#"metronome_class_bytes_total{class="b"} 7000"#),
        "{all}"
    );
    assert!(all.contains("metronome_class_series_hidden 0"), "{all}");
    m.select_class_series(ClassSeries::Listed(["a".to_owned()].into()));
    let text = m.encode();
    assert!(
        text.contains(r#"metronome_class_bytes_total{class="a"} 3000"#),
        "{text}"
    );
    assert!(!text.contains(r#"class="b""#), "{text}");
    assert!(!text.contains(r#"class="c""#), "{text}");
    for needle in [
        "metronome_all_classes_bytes_total 10000",
        "metronome_all_classes_packets_total 7",
        r#"metronome_all_classes_drops_total{reason="queue_full"} 1"#,
        "metronome_all_classes_queued_packets 4",
        "metronome_class_series_hidden 2",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
}

#[test]
fn the_active_selection_shows_classes_with_traffic_or_a_queue() {
    let m = Metrics::new();
    m.select_class_series(ClassSeries::Active);
    let (idle, busy, queued) = (m.class("idle"), m.class("busy"), m.class("queued"));
    busy.sent(1, 100);
    queued.set_queued(1);
    let text = m.encode();
    assert!(
        text.contains(r#"metronome_class_bytes_total{class="busy"} 100"#),
        "{text}"
    );
    assert!(
        text.contains(r#"metronome_class_queued_packets{class="queued"} 1"#),
        "{text}"
    );
    assert!(!text.contains(r#"class="idle""#), "{text}");
    assert!(text.contains("metronome_class_series_hidden 1"), "{text}");
    // Idle from now on, but within `ACTIVE_IDLE` of its traffic: still shown.
    queued.set_queued(0);
    let text = m.encode();
    assert!(
        text.contains(r#"metronome_class_bytes_total{class="busy"} 100"#),
        "{text}"
    );
    assert!(
        text.contains(r#"metronome_class_queued_packets{class="queued"} 0"#),
        "{text}"
    );
    idle.dropped_n(DropReason::Horizon, 1);
    assert!(m.encode().contains(r#"class="idle""#));
}

#[test]
fn silos_sum_into_totals_of_their_own() {
    let m = Metrics::with_silos(2);
    m.for_silo(0).class("a").sent(1, 10);
    m.for_silo(1).class("a").sent(2, 20);
    m.for_silo(1).class("b").sent(3, 30);
    m.for_silo(1).loop_woke(Wake::Control);
    let text = m.encode();
    assert!(
        text.contains(r#"metronome_all_classes_bytes_total{silo="0"} 10"#),
        "{text}"
    );
    assert!(
        text.contains(r#"metronome_loop_wakeups_total{by="control",silo="1"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"metronome_loop_wakeups_total{by="control",silo="0"} 0"#),
        "{text}"
    );
    assert!(
        text.contains(r#"metronome_all_classes_bytes_total{silo="1"} 50"#),
        "{text}"
    );
}

#[test]
fn a_removed_class_leaves_the_scrape_and_its_counts_stay_in_the_totals() {
    let m = Metrics::new();
    m.class("gone").sent(3, 300);
    m.class("gone").dropped_n(DropReason::QueueFull, 1);
    m.class("kept").sent(1, 100);
    m.remove_class("gone");
    m.remove_class("never-there");
    let text = m.encode();
    assert!(!text.contains(r#"class="gone""#), "{text}");
    assert!(
        text.contains(r#"metronome_class_bytes_total{class="kept"} 100"#),
        "{text}"
    );
    assert!(
        text.contains("metronome_all_classes_bytes_total 400"),
        "{text}"
    );
    assert!(
        text.contains("metronome_all_classes_packets_total 4"),
        "{text}"
    );
    assert!(
        text.contains(r#"metronome_all_classes_drops_total{reason="queue_full"} 1"#),
        "{text}"
    );
    // A class of the name made again starts from zero.
    m.class("gone").sent(1, 5);
    let text = m.encode();
    assert!(
        text.contains(r#"metronome_class_bytes_total{class="gone"} 5"#),
        "{text}"
    );
    assert!(
        text.contains("metronome_all_classes_bytes_total 405"),
        "{text}"
    );
}

#[test]
fn server_serves_and_stats_format() {
    let m = Metrics::new();
    let a = m.class("A");
    let b = m.class("B");
    a.sent(789, 123_456);
    a.ecn_marked_n(1);
    b.dropped_n(DropReason::Horizon, 1);
    let server = m
        .serve(SocketAddr::from(([127, 0, 0, 1], 0)))
        .expect("bind loopback");
    assert!(server.addr().ip().is_loopback() && server.addr().port() != 0);
    let body = scrape(server.addr()).expect("scrape");
    assert!(
        body.contains(r#"metronome_class_bytes_total{class="A"} 123456"#),
        "{body}"
    );

    // A 404 for anything else.
    let mut s = TcpStream::connect(server.addr()).expect("connect");
    let _ = s.write_all(b"GET /nope HTTP/1.0\r\n\r\n");
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    assert!(
        reply.starts_with("HTTP/1.0 404") || reply.starts_with("HTTP/1.1 404"),
        "{reply}"
    );

    // Rate from two scrapes: 25 000 bytes more over the interval.
    let first = scrape(server.addr()).expect("first");
    a.sent(10, 25_000);
    a.set_queued(12);
    let second = scrape(server.addr()).expect("second");
    let out = format_stats(&first, &second, Duration::from_millis(1));
    let line_a = out
        .lines()
        .find(|l| l.starts_with("class A:"))
        .expect("class A line");
    assert_eq!(
        line_a,
        "class A: sent 148456 bytes 799 pkt (dropped 0, ecn marked 1) rate 200.0Mbit queued 12"
    );
    assert!(
        out.contains("class B: sent 0 bytes 0 pkt (dropped 1, ecn marked 0) rate 0bit queued 0"),
        "{out}"
    );
    assert!(out.contains("wheel: occupancy 0 pkt"), "{out}");

    let live = fetch_and_format(server.addr()).expect("fetch_and_format");
    assert!(
        live.contains("class A: sent 148456 bytes") && live.contains("rate 0bit"),
        "{live}"
    );
    drop(server);
    assert!(scrape(SocketAddr::from(([127, 0, 0, 1], 1))).is_err());
}

use std::io::{Read, Write};
use std::net::TcpStream;

#[test]
fn silos_label_their_series_and_stats_sum_them() {
    let m = Metrics::with_silos(2);
    assert_eq!(m.silos(), 2);
    let (s0, s1) = (m.for_silo(0), m.for_silo(1));
    let (a0, a1) = (s0.class("A"), s1.class("A"));
    a0.sent(1, 1_000);
    a1.sent(2, 3_000);
    s0.nba_rate("A").set(60_000_000);
    s1.nba_rate("A").set(140_000_000);
    s0.set_wheel_occupancy(5);
    s1.set_wheel_occupancy(7);
    s0.observe_lateness_ns(1_500);
    s1.observe_lateness_ns(1_500);
    s1.rx_ring_drops(3);
    s1.loop_slept_ns(9);
    let text = m.encode();
    for needle in [
        r#"metronome_class_bytes_total{class="A",silo="0"} 1000"#,
        r#"metronome_class_bytes_total{class="A",silo="1"} 3000"#,
        r#"metronome_class_drops_total{class="A",reason="horizon",silo="1"} 0"#,
        r#"metronome_nba_rate_bps{class="A",silo="1"} 140000000"#,
        r#"metronome_wheel_occupancy_packets{silo="0"} 5"#,
        r#"metronome_lateness_ns_bucket{le="2000.0",silo="1"} 1"#,
        r#"metronome_rx_ring_drops_total{silo="1"} 3"#,
        r#"metronome_loop_sleep_nanoseconds_total{silo="1"} 9"#,
        r#"metronome_pass_through_packets_total{silo="0"} 0"#,
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
    // One silo: no silo label.
    let one = Metrics::new();
    one.class("A").sent(1, 1);
    assert!(!one.encode().contains("silo"));

    let first = m.encode();
    a1.sent(1, 1_000);
    let out = format_stats(&first, &m.encode(), Duration::from_secs(1));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "class A: sent 5000 bytes 4 pkt (dropped 0, ecn marked 0) rate 8.0Kbit queued 0"
    );
    assert!(lines[1].starts_with("wheel: occupancy 12 pkt, lateness p99 <= 2us; rx ring drops 3"));
    assert_eq!(
        lines[2],
        "silo 0: sent 1000 bytes 1 pkt rate 0bit, nba A 60.0Mbit"
    );
    assert_eq!(
        lines[3],
        "silo 1: sent 4000 bytes 3 pkt rate 8.0Kbit, nba A 140.0Mbit"
    );
    // Only classes with a cross-silo limit have an allocator series.
    s0.class("B").sent(1, 10);
    let text = m.encode();
    assert!(text.contains(r#"metronome_class_bytes_total{class="B",silo="0"} 10"#));
    assert!(!text.contains(r#"nba_rate_bps{class="B""#));
}

#[test]
fn a_merged_tally_equals_observing_each_value() {
    let direct = Pow2Histogram::new(1_000, 8);
    let batched = Pow2Histogram::new(1_000, 8);
    let mut tally = batched.tally();
    for v in [0, 1, 999, 1_000, 1_001, 64_000, 10_000_000, 7] {
        direct.observe(v);
        tally.observe(v);
    }
    assert_eq!(batched.count(), 0, "nothing published before the merge");
    batched.merge(&mut tally);
    batched.merge(&mut tally); // empty now: adds nothing
    let encode = |h: Pow2Histogram| {
        let mut r = prometheus_client::registry::Registry::default();
        r.register("h", "h", h);
        let mut s = String::new();
        prometheus_client::encoding::text::encode(&mut s, &r).unwrap();
        s
    };
    assert_eq!(batched.count(), 8);
    assert_eq!(encode(direct), encode(batched));
}
