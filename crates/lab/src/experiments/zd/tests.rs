//! The `zd` experiment at small scale, fast enough for a debug build: 200 flows through a 50-slot
//! pfifo at 1 Gbit/s (zD §6.2's comparison scaled down by 20 in flows and buffer).

use super::*;
use crate::experiments::rows::num;
use crate::experiments::simulated::without_speed;

/// A point of 200 flows at 1 Gbit/s for 1.5 s, 0.5 s of warm-up.
fn small(mode: &str) -> Point {
    let text = format!(
        "mode = \"{mode}\"\nflows = 200\nzd_pfifo_slots = 50\ntsq_limit = 2\ncc = \"cubic\"\n\
         line_rate_bps = 1_000_000_000\nbase_rtt_us = 100\nmtu = 1500\nrto_min_ms = 200\n\
         sndbuf_mtus = 2800\nduration_ms = 1500\nwarmup_ms = 500\nwindow_ms = 100\n\
         start_spread_ms = 10\nseed = 1\n"
    );
    Point::new(toml::from_str(&text).expect("test point parses"))
}

fn one(mode: &str) -> Row {
    run(&small(mode)).expect("runs").remove(0)
}

#[test]
fn zd_never_drops_and_cuts_retransmissions_and_the_latency_tail() {
    let tsq_small = one("tsq_pfifo_50");
    let tsq_large = one("tsq_pfifo_2000");
    let zd = one("zd");
    assert_eq!(num(&zd, "physical_drops"), 0.0, "{zd:?}");
    assert!(num(&zd, "virtual_drops") > 0.0, "{zd:?}");
    assert!(num(&tsq_small, "physical_drops") > 0.0, "{tsq_small:?}");
    // Far fewer retransmissions than TSQ over the same pfifo (the paper: about 1000x).
    let retx = num(&tsq_small, "retransmissions");
    assert!(
        num(&zd, "retransmissions") * 100.0 <= retx && retx >= 100.0,
        "zD {zd:?} vs TSQ {tsq_small:?}"
    );
    // A lower latency tail than TSQ with a pfifo large enough not to drop (bufferbloat, Fig. 3).
    assert_eq!(num(&tsq_large, "physical_drops"), 0.0, "{tsq_large:?}");
    assert!(
        num(&zd, "rtt_p99_us") * 2.0 < num(&tsq_large, "rtt_p99_us"),
        "zD {zd:?} vs TSQ 2000 {tsq_large:?}"
    );
    // TSQ's losses show up in the delivery latency (RTO stalls), not in the echoed RTT.
    assert!(num(&tsq_small, "rtt_max_us") > 200_000.0, "{tsq_small:?}");
    assert!(num(&zd, "throughput_bps") > 0.9e9, "{zd:?}");
}

#[test]
fn deterministic_except_speed() {
    let a = run(&small("zd")).expect("runs");
    let b = run(&small("zd")).expect("runs");
    assert_eq!(without_speed(&a), without_speed(&b));
    assert_eq!(a[0].get("mode").and_then(|v| v.as_str()), Some("zd"));
    assert_eq!(num(&a[0], "pfifo_slots"), 50.0);
}

#[test]
fn bad_parameters_are_named() {
    for (mode, needle) in [("fq", "unknown mode"), ("tsq_pfifo_", "slot count")] {
        let e = run(&small(mode)).unwrap_err().to_string();
        assert!(e.contains("`mode`") && e.contains(needle), "{e}");
    }
    let mut point = small("zd");
    point.params.insert("cc".into(), "bbr".into());
    let e = run(&point).unwrap_err().to_string();
    assert!(e.contains("`cc`") && e.contains("bbr"), "{e}");
}
