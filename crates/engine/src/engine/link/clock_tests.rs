//! The link clock against a reference model (CONTRIBUTING.md §13): an ideal link that sends
//! each packet at `max(arrival, previous end)` and is busy for its exact transmission time,
//! in rational nanoseconds.

use super::LinkClock;
use metronome_core::{Rate, Timestamp};
use proptest::prelude::*;

/// Drives the clock like the engine does: a packet of `len` bytes arrives at `at` (a queue,
/// FIFO); at every `poll` instant the clock sends what it may. Returns each packet's departure.
fn drive(rate: Rate, burst: u64, arrivals: &[(u64, u64)], poll_ns: u64) -> Vec<u64> {
    let mut clock = LinkClock::new(rate, burst);
    let mut queue: std::collections::VecDeque<(u64, u64)> = Default::default();
    let mut out = Vec::new();
    let mut next = 0;
    let mut now = 0u64;
    while out.len() < arrivals.len() {
        while next < arrivals.len() && arrivals[next].0 <= now {
            if queue.is_empty() {
                clock.wake(Timestamp::from_nanos(now));
            }
            queue.push_back(arrivals[next]);
            next += 1;
        }
        while let Some(&(_, len)) = queue.front() {
            let t = Timestamp::from_nanos(now);
            if !clock.ready(t) {
                break;
            }
            out.push(clock.send(t, len).as_nanos());
            queue.pop_front();
        }
        now += poll_ns;
    }
    out
}

#[test]
fn back_to_back_frames_fill_the_link_exactly() {
    // 1514-byte frames at 1 Gbit/s: 12 112 ns each, no rounding drift over 10 000 frames.
    let mut clock = LinkClock::new(Rate::gbps(1), 1514);
    let t0 = Timestamp::from_nanos(1_000);
    clock.wake(t0);
    let mut last = t0;
    for _ in 0..10_000 {
        last = clock.send(clock.free_at(), 1514);
    }
    assert_eq!(last.as_nanos(), 1_000 + 9_999 * 12_112);
    // A rate with a fractional transmission time: 1500 bytes at 7 Mbit/s = 1 714 285.714 ns.
    let mut clock = LinkClock::new(Rate::mbps(7), 1500);
    clock.wake(Timestamp::ZERO);
    let mut t = Timestamp::ZERO;
    for _ in 0..7_000 {
        t = clock.send(clock.free_at(), 1500);
    }
    // 6 999 frames after the first: 11 999 999 999.something ns, never more than 1 ns off.
    let exact = 6_999u128 * 1500 * 8 * 1_000_000_000 / 7_000_000;
    assert!(
        (i128::from(t.as_nanos()) - exact as i128).abs() <= 1,
        "{t:?} vs {exact}"
    );
}

#[test]
fn an_idle_link_starts_again_at_the_next_packet() {
    let mut clock = LinkClock::new(Rate::mbps(100), 1514);
    clock.wake(Timestamp::from_nanos(0));
    clock.send(Timestamp::from_nanos(0), 1500);
    // Idle for a second: no credit for it beyond the catch-up allowance.
    let later = Timestamp::from_nanos(1_000_000_000);
    clock.wake(later);
    assert_eq!(clock.send(later, 1500), later);
    assert!(!clock.ready(later));
    assert_eq!(clock.free_at().as_nanos(), 1_000_000_000 + 120_000);
}

#[test]
fn a_late_loop_catches_up_by_at_most_the_burst() {
    let mut clock = LinkClock::new(Rate::mbps(100), 3000);
    clock.wake(Timestamp::ZERO);
    clock.send(Timestamp::ZERO, 1500); // busy until 120 µs
                                       // The loop wakes 10 ms late: the next departure is stamped
                                       // 3000 bytes (240 µs) back.
    let late = Timestamp::from_nanos(10_000_000);
    assert_eq!(clock.send(late, 1500).as_nanos(), 10_000_000 - 240_000);
    assert_eq!(clock.send(late, 1500).as_nanos(), 10_000_000 - 120_000);
    assert_eq!(clock.send(late, 1500).as_nanos(), 10_000_000);
    assert!(!clock.ready(late));
}

proptest! {
    /// Against the ideal link: no departure before its arrival minus the catch-up allowance,
    /// departures in order and at least one transmission time apart (the link never exceeds its
    /// rate, beyond the allowance), and, when the loop polls every nanosecond, exactly the
    /// ideal link's departures (work-conserving, no drift).
    #[test]
    fn departures_match_an_ideal_link(
        mbps in 1u64..10_000,
        gaps in prop::collection::vec((0u64..200_000, 64u64..9_000), 1..60),
        poll in 1u64..50_000,
    ) {
        let rate = Rate::mbps(mbps);
        let burst = 9_000;
        let mut at = 0;
        let arrivals: Vec<(u64, u64)> = gaps
            .iter()
            .map(|&(gap, len)| {
                at += gap;
                (at, len)
            })
            .collect();
        let tx = |len: u64| len as f64 * 8e9 / rate.bps() as f64;
        // The ideal link.
        let mut ideal = Vec::new();
        let mut end = 0.0f64;
        for &(a, len) in &arrivals {
            let start = end.max(a as f64);
            ideal.push(start);
            end = start + tx(len);
        }
        let allowance = tx(burst);
        let out = drive(rate, burst, &arrivals, poll);
        for (i, (&d, &(a, _))) in out.iter().zip(&arrivals).enumerate() {
            prop_assert!(d as f64 + allowance + 1.0 >= a as f64, "packet {i} before its arrival");
            if i > 0 {
                let prev = out[i - 1] as f64;
                let gap = tx(arrivals[i - 1].1);
                prop_assert!(d as f64 + 1.0 >= prev + gap, "packet {i} closer than its predecessor's transmission");
            }
        }
        let exact = drive(rate, burst, &arrivals, 1);
        for (i, (&d, &want)) in exact.iter().zip(&ideal).enumerate() {
            // The clock reports a departure floored to the nanosecond (under 1 ns) and the
            // ideal link sums its transmission times in f64 (its own rounding, far under 1 ns).
            prop_assert!((d as f64 - want).abs() < 2.0, "packet {i}: {d} vs ideal {want}");
        }
    }
}
