//! Live classes ([`super::super::live`]): added, changed and deleted between two packets; a
//! deleted class's queue leaves at its rate, then its state serves the next class.

use super::*;

/// The class `table` (a `[[class]]` table's keys) as the control socket hands it over.
fn class(table: &str) -> crate::ops::config::ClassConfig {
    let text = format!("{BASE}\n[[class]]\n{table}\n");
    config(&text).classes.pop().unwrap()
}

fn tenant(rate: &str) -> crate::ops::config::ClassConfig {
    class(&format!(
        "name = \"tenant\"\nmatch = {{ dst_port = 9000 }}\nrate = \"{rate}\""
    ))
}

/// Times (ns after `t0`) of the frames sent to port 9000.
fn departures(rig: &Rig, t0: Timestamp) -> Vec<u64> {
    rig.sent
        .iter()
        .filter(|(_, f)| f[36..38] == 9000u16.to_be_bytes())
        .map(|(t, _)| t.saturating_since(t0).as_nanos())
        .collect()
}

/// Whether consecutive departures are `gap` apart (within the 2 µs steps of the rig).
fn spaced(times: &[u64], gap: u64) -> bool {
    times
        .windows(2)
        .all(|w| (w[1] - w[0]).abs_diff(gap) <= 2_000)
}

#[test]
fn an_added_class_takes_the_next_packet_at_its_rate() {
    let mut rig = Rig::new(BASE);
    // Before the add, port 9000 is the default class's: unshaped, sent at once.
    rig.push(&vec![tcp(40000, 9000, FULL, 0); 3]);
    assert_eq!(rig.sent.len(), 3);
    let index = rig.engine.add_class(&tenant("12mbit")).unwrap();
    assert_eq!(rig.engine.class_index("tenant"), Some(index));
    rig.sent.clear();
    let t0 = rig.now;
    rig.push(&vec![tcp(40000, 9000, FULL, 0); 5]);
    assert_eq!(rig.engine.class_queued("tenant"), 4);
    rig.run_until_empty(Duration::from_micros(2));
    let times = departures(&rig, t0);
    assert_eq!(times.len(), 5);
    assert!(
        spaced(&times, Rate::mbps(12).transmit_time(FULL as u64).as_nanos()),
        "{times:?}"
    );
    assert_eq!(
        rig.engine.add_class(&tenant("1mbit")),
        Err(LiveError::Exists("tenant".into()))
    );
    rig.engine.invariants();
}

#[test]
fn a_change_applies_its_rate_from_the_next_packet() {
    let mut rig = Rig::new(BASE);
    rig.engine.add_class(&tenant("12mbit")).unwrap();
    rig.engine.change_class(&tenant("24mbit"), false).unwrap();
    let t0 = rig.now;
    rig.push(&vec![tcp(40000, 9000, FULL, 0); 5]);
    rig.run_until_empty(Duration::from_micros(2));
    let times = departures(&rig, t0);
    assert!(
        spaced(&times, Rate::mbps(24).transmit_time(FULL as u64).as_nanos()),
        "{times:?}"
    );
    let missing = class("name = \"nobody\"\nrate = \"1mbit\"");
    assert_eq!(
        rig.engine.change_class(&missing, false),
        Err(LiveError::Unknown("nobody".into()))
    );
    // A new match moves the class: port 9001 is its now, 9000 the default's.
    let moved = class("name = \"tenant\"\nmatch = { dst_port = 9001 }\nrate = \"24mbit\"");
    rig.engine.change_class(&moved, true).unwrap();
    rig.sent.clear();
    rig.push(&vec![tcp(40000, 9000, FULL, 0); 3]);
    assert_eq!(rig.sent.len(), 3);
    rig.push(&vec![tcp(40000, 9001, FULL, 0); 3]);
    assert_eq!(rig.engine.class_queued("tenant"), 3);
    rig.run_until_empty(Duration::from_micros(2));
}

#[test]
fn a_deleted_class_drains_at_its_rate_then_its_state_serves_the_next_class() {
    let mut rig = Rig::new(BASE);
    let index = rig.engine.add_class(&tenant("12mbit")).unwrap();
    let t0 = rig.now;
    rig.push(&vec![tcp(40000, 9000, FULL, 0); 6]);
    rig.engine.publish_gauges();
    assert!(rig.metrics.encode().contains("class=\"tenant\""));
    rig.engine.delete_class("tenant").unwrap();
    assert!(rig.engine.class_draining("tenant"));
    assert_eq!(rig.engine.class_queued("tenant"), 5);
    // The next packet of port 9000 is the default class's: sent at once.
    rig.push(&[tcp(40001, 9000, FULL, 0)]);
    assert_eq!(departures(&rig, t0).len(), 2);
    // What was queued leaves at the class's rate; nothing is lost (the rig checks the
    // invariants at every step).
    rig.run_until_empty(Duration::from_micros(2));
    let times: Vec<u64> = departures(&rig, t0)
        .into_iter()
        .filter(|&t| t > 0)
        .collect();
    assert_eq!(times.len(), 5);
    assert!(
        spaced(&times, Rate::mbps(12).transmit_time(FULL as u64).as_nanos()),
        "{times:?}"
    );
    assert_eq!(rig.engine.counters().dropped(), 0);
    // Drained: the state is freed, its series gone, its index taken by the next class.
    assert_eq!(rig.engine.reap_drained(), 1);
    assert_eq!(rig.engine.class_index("tenant"), None);
    assert!(!rig.metrics.encode().contains("class=\"tenant\""));
    let other = class("name = \"other\"\nmatch = { dst_port = 9002 }\nrate = \"6mbit\"");
    assert_eq!(rig.engine.add_class(&other), Ok(index));
    assert_eq!(
        rig.engine.delete_class("tenant"),
        Err(LiveError::Unknown("tenant".into()))
    );
    rig.engine.invariants();
}

#[test]
fn a_class_re_added_while_draining_takes_its_state_and_queue_back() {
    let mut rig = Rig::new(BASE);
    let index = rig.engine.add_class(&tenant("12mbit")).unwrap();
    rig.push(&vec![tcp(40000, 9000, FULL, 0); 6]);
    rig.engine.delete_class("tenant").unwrap();
    assert_eq!(rig.engine.add_class(&tenant("12mbit")), Ok(index));
    assert!(!rig.engine.class_draining("tenant"));
    assert_eq!(rig.engine.class_queued("tenant"), 5);
    rig.push(&[tcp(40000, 9000, FULL, 0)]);
    assert_eq!(rig.engine.class_queued("tenant"), 6);
    rig.run_until_empty(Duration::from_micros(2));
    assert_eq!(rig.engine.reap_drained(), 0);
    assert_eq!(rig.engine.class_index("tenant"), Some(index));
}

#[test]
fn a_reload_keeps_the_live_classes_it_is_given() {
    let mut rig = Rig::new(BASE);
    rig.engine.add_class(&tenant("12mbit")).unwrap();
    // What the reloader hands over: the file's classes, then the API's.
    let mut merged = config(BASE);
    merged.classes.push(tenant("12mbit"));
    rig.reload(&merged).unwrap();
    rig.push(&vec![tcp(40000, 9000, FULL, 0); 3]);
    assert_eq!(rig.engine.class_queued("tenant"), 2);
    // Its rule is the reload's: a delete still finds it.
    rig.engine.delete_class("tenant").unwrap();
    rig.run_until_empty(Duration::from_micros(2));
    assert_eq!(rig.engine.reap_drained(), 1);
}

#[test]
fn settings_live_classes_do_not_take_are_refused_naming_the_field() {
    let mut rig = Rig::new(BASE);
    let acks = class(
        "name = \"acks\"\nmatch = { protocol = \"tcp\" }\nrate = \"10mbit\"\n\
         ack_shaping = { rate = \"10mbit\" }",
    );
    let e = rig.engine.add_class(&acks).unwrap_err();
    assert_eq!(e.field(), "ack_shaping");
    assert_eq!(rig.engine.class_index("acks"), None);
}
