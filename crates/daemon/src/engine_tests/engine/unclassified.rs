//! Frames the classifier cannot place (`[daemon] malformed`, `non_ip`): by default charged to
//! the default class, so garbage cannot get past the configured limits.

use super::*;

/// `bulk` limited to 100 Mbit/s, the default class to 50 Mbit/s.
fn limited(extra: &str) -> String {
    format!(
        "[interfaces]\ninside = \"in0\"\noutside = \"out0\"\n[daemon]\n{extra}\n\
         [[class]]\nname = \"bulk\"\nmatch = {{ protocol = \"tcp\", dst_port = 5201 }}\n\
         rate = \"100mbit\"\n[default]\nrate = \"50mbit\"\n"
    )
}

/// Full-size garbage: a bad IHL, a truncated IPv4 header in a long frame, an unknown EtherType.
fn garbage(i: usize) -> Vec<u8> {
    let mut f = tcp(40000 + i as u16, 5201, FULL, 0);
    match i % 3 {
        0 => f[14] = 0x43,                             // IHL 3
        1 => f[16..18].copy_from_slice(&[0xff, 0xff]), // total length beyond the frame
        _ => f[12..14].copy_from_slice(&[0x88, 0xb5]), // local experimental EtherType
    }
    f
}

fn encoded(rig: &Rig, kind: &str, action: &str) -> u64 {
    rig.series(&format!(
        "metronome_unclassified_frames_total{{kind=\"{kind}\",action=\"{action}\"}}"
    ))
}

#[test]
fn garbage_alongside_tcp_stays_within_the_sum_of_the_limits() {
    let mut rig = Rig::new(&limited(""));
    let t0 = rig.now;
    let mut frames = Vec::new();
    for i in 0..300 {
        frames.push(tcp(40000 + (i % 8) as u16, 5201, FULL, 0));
        frames.push(garbage(i));
    }
    rig.push(&frames);
    rig.run_until_empty(Duration::from_micros(10));
    assert_eq!(rig.sent.len(), 600);
    // Every prefix of the departures: bytes <= (100 + 50) Mbit/s x elapsed + one frame of burst
    // per class + one 10 us step of both rates.
    let slack = 2 * FULL as u64 + 188;
    let mut bytes = 0u64;
    for (t, f) in &rig.sent {
        bytes += f.len() as u64;
        let elapsed = t.saturating_since(t0).as_nanos();
        let allowed = 150_000_000u64 * elapsed / 8 / 1_000_000_000 + slack;
        assert!(
            bytes <= allowed,
            "{bytes} bytes out by {elapsed} ns, limits allow {allowed}"
        );
    }
    let c = rig.engine.counters();
    assert_eq!((c.malformed, c.passed_non_ip), (200, 100));
    assert_eq!(c.unclassified_to_default, 300);
    assert_eq!(c.dropped(), 0);
    assert_eq!(rig.engine.class_queued("default"), 0);
    assert_eq!(encoded(&rig, "malformed", "default"), 200);
    assert_eq!(encoded(&rig, "non_ip", "default"), 100);
    let elapsed = rig
        .sent
        .last()
        .unwrap()
        .0
        .saturating_since(t0)
        .as_secs_f64();
    let garbage_bits = (300 * FULL * 8) as f64;
    // The garbage left at the default class's rate: 300 frames at 50 Mbit/s take 72.7 ms (less one
    // frame of burst); the TCP frames finish earlier at 100 Mbit/s.
    let want = (garbage_bits - (FULL * 8) as f64) / 50e6;
    assert!(
        (elapsed / want - 1.0).abs() < 0.001,
        "{elapsed} s, want {want} s"
    );
}

#[test]
fn pass_and_drop_actions_are_counted() {
    let mut rig = Rig::new(&limited("malformed = \"drop\"\nnon_ip = \"pass\""));
    let frames: Vec<Vec<u8>> = (0..30).map(garbage).collect();
    rig.push(&frames);
    // The non-IP frames left at once, unshaped; the malformed ones were freed.
    assert_eq!(rig.sent.len(), 10);
    assert!(rig
        .sent
        .iter()
        .all(|(t, f)| *t == rig.now && f[12..14] == [0x88, 0xb5]));
    let c = rig.engine.counters();
    assert_eq!(
        (c.dropped_unclassified, c.dropped(), c.forwarded),
        (20, 20, 10)
    );
    assert_eq!(c.unclassified_to_default, 0);
    assert_eq!(rig.pool.in_use(), 0);
    assert_eq!(encoded(&rig, "malformed", "drop"), 20);
    assert_eq!(encoded(&rig, "non_ip", "pass"), 10);
    rig.engine.invariants();
}

#[test]
fn arp_is_charged_to_an_unlimited_default_class_and_leaves_at_once() {
    let mut rig = Rig::new(BASE);
    let mut arp = vec![0u8; 60];
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    rig.push(&vec![arp; 5]);
    assert_eq!(rig.sent.len(), 5);
    assert_eq!(encoded(&rig, "non_ip", "default"), 5);
}

#[test]
fn an_unknown_action_is_refused() {
    let text = limited("malformed = \"forward\"");
    let err = Config::from_toml_str(&text, "t.toml")
        .unwrap_err()
        .to_string();
    assert!(err.contains("forward"), "{err}");
}
