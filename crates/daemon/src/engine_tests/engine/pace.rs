//! Source pacing's part in the engine (`metronome_engine::engine::pace`): the new TCP flows of a
//! paced class are listed once, and the class's ceiling is an equal share of its rate that falls
//! while its flows send more than the rate and rises while they send less.

use super::*;
use metronome_engine::engine::pace::{
    Ceiling, PacedFlow, PACE_FLOOR_SHARE, PACE_HEADROOM, PACE_PERIOD,
};

/// BASE with a class that does not pace its sockets.
fn with_unpaced() -> String {
    format!(
        "{BASE}\n[[class]]\nname = \"quiet\"\nmatch = {{ dst_port = 7000 }}\nrate = \"10mbit\"\n\
         pace_sockets = false\n"
    )
}

fn listed(rig: &mut Rig) -> Vec<PacedFlow> {
    let mut out = Vec::new();
    assert_eq!(rig.engine.take_paced_flows(&mut out), 0, "none lost");
    out
}

#[test]
fn the_new_tcp_flows_of_a_paced_class_are_listed_once() {
    let mut rig = Rig::new(&with_unpaced());
    rig.push(&[tcp(40000, 5201, FULL, 0)]);
    assert!(
        listed(&mut rig).is_empty(),
        "nothing before source pacing is on"
    );
    rig.engine.enable_source_pacing();
    let frames: Vec<Vec<u8>> = (0..4).map(|i| tcp(41000 + i, 5201, FULL, 0)).collect();
    rig.push(&frames);
    let flows = listed(&mut rig);
    let mut ports: Vec<u16> = flows.iter().map(|f| f.tuple.src_port).collect();
    ports.sort_unstable();
    assert_eq!(ports, [41000, 41001, 41002, 41003]);
    let f = flows[0];
    assert_eq!(rig.engine.class_state_name(f.class), Some("bulk"));
    assert_eq!(f.tuple.dst_port, 5201);
    assert_eq!(f.tuple.src, std::net::IpAddr::from([10, 0, 0, 1]));
    assert_eq!(f.tuple.dst, std::net::IpAddr::from([10, 0, 0, 2]));
    // The same flows again, a class with pacing only (no rate: not paced) and one with
    // `pace_sockets = false`: nothing new.
    rig.push(&frames);
    rig.push(&[tcp(42000, 5301, FULL, 0), tcp(42001, 7000, FULL, 0)]);
    assert!(listed(&mut rig).is_empty());
}

/// Runs `periods` pass periods in which four flows of `bulk` (100 Mbit/s) send `share` of its
/// rate together; returns the ceilings of the last pass.
fn drive(rig: &mut Rig, periods: usize, share: f64) -> Ceiling {
    // 100 Mbit/s is 12 500 000 bytes a second, 125 000 bytes (about 82.6 full frames) a period.
    let frames = (82.6 * share).round() as usize;
    let mut last = None;
    let mut out = Vec::new();
    for _ in 0..periods {
        let batch: Vec<Vec<u8>> = (0..frames)
            .map(|i| tcp(43000 + (i % 4) as u16, 5201, FULL, 0))
            .collect();
        rig.push(&batch);
        rig.step(PACE_PERIOD);
        if rig.engine.pace_pass(rig.now, &mut out) {
            last = out.first().copied().or(last);
        }
    }
    last.expect("a pass with the class")
}

#[test]
fn the_ceiling_falls_while_the_flows_send_too_much_and_rises_while_they_send_too_little() {
    let mut rig = Rig::new(BASE);
    rig.engine.enable_source_pacing();
    let rate = 12_500_000.0;
    let share = rate / 4.0;
    let first = drive(&mut rig, 2, 1.0);
    assert_eq!(first.flows, 4);
    assert!(
        (first.bytes_per_sec - share).abs() < 0.15 * share,
        "{first:?}"
    );
    let over = drive(&mut rig, 30, 2.0);
    assert!(over.bytes_per_sec < 0.5 * share, "{over:?}");
    assert!(
        over.bytes_per_sec >= PACE_FLOOR_SHARE * share * 0.999,
        "{over:?}"
    );
    assert!(over.held_frames > 0);
    rig.run_until_empty(Duration::from_millis(1));
    let under = drive(&mut rig, 60, 0.5);
    assert!(under.bytes_per_sec > 1.5 * share, "{under:?}");
    assert!(
        under.bytes_per_sec <= rate * PACE_HEADROOM * 1.000_001,
        "{under:?}"
    );
}

#[test]
fn without_source_pacing_no_pass_runs() {
    let mut rig = Rig::new(BASE);
    rig.push(&[tcp(40000, 5201, FULL, 0)]);
    rig.step(PACE_PERIOD);
    let mut out = Vec::new();
    assert!(!rig.engine.pace_pass(rig.now, &mut out));
    assert!(out.is_empty());
}

#[test]
fn a_queue_that_stands_while_starting_flows_send_the_rate_brings_an_open_ceiling_down_to_a_share() {
    let mut rig = Rig::new(BASE);
    rig.engine.enable_source_pacing();
    let share = 12_500_000.0 / 4.0;
    // The flows send half the rate: the factor opens up (fast while they start).
    let open = drive(&mut rig, 30, 0.5);
    assert!(open.bytes_per_sec > 1.5 * share, "{open:?}");
    // 400 frames beyond what the rate drains (48 ms at 100 Mbit/s), then the rate itself: the
    // flows are ACK-clocked by the class, their ceilings slow nothing, and once the burst's
    // arrivals are behind only the standing queue says so.
    let backlog: Vec<Vec<u8>> = (0..400)
        .map(|i| tcp(43000 + (i % 4) as u16, 5201, FULL, 0))
        .collect();
    rig.push(&backlog);
    let burst = drive(&mut rig, 1, 1.0);
    let after = drive(&mut rig, 12, 1.0);
    assert!(after.held_frames > 300, "{after:?}");
    assert!(
        after.bytes_per_sec <= share,
        "{open:?}, {burst:?} then {after:?}"
    );
    // Not much lower than an equal share less the queue's own 20 % (the slow terms go on).
    assert!(after.bytes_per_sec >= 0.7 * share, "{after:?}");
}
