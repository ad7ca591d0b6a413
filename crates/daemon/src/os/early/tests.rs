use super::*;
use metronome_core::Rate;

fn field<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    b[at..at + N].try_into().unwrap()
}

#[test]
fn a_rule_is_laid_out_as_the_program_reads_it() {
    let rule = ClassRule {
        dst: Some("10.1.2.0/24".parse().unwrap()),
        src: Some("2001:db8::/32".parse().unwrap()),
        dscp: Some(46),
        protocol: Some(17),
        dst_port: Some((5201, 5204)),
        src_port: Some((7, 7)),
        origin: Some(513),
    };
    let b = encode_rule(&rule, 9);
    assert_eq!(&b[0..4], &[10, 1, 2, 0]);
    assert_eq!(&b[16..20], &[255, 255, 255, 0]);
    assert_eq!(&b[20..32], &[0; 12]);
    assert_eq!(&b[32..36], &[0x20, 0x01, 0x0d, 0xb8]);
    assert_eq!(&b[48..52], &[255; 4]);
    assert_eq!(&b[52..64], &[0; 12]);
    let flags = u16::from_ne_bytes(field(&b, 64));
    assert_eq!(
        flags,
        F_DST | F_SRC | F_DSCP | F_PROTOCOL | F_DST_PORT | F_SRC_PORT | F_ORIGIN
    );
    assert_eq!((b[66], b[67], b[68], b[69]), (4, 6, 46, 17));
    assert_eq!(u16::from_ne_bytes(field(&b, 70)), 513);
    assert_eq!(u16::from_ne_bytes(field(&b, 72)), 5201);
    assert_eq!(u16::from_ne_bytes(field(&b, 74)), 5204);
    assert_eq!(u16::from_ne_bytes(field(&b, 76)), 7);
    assert_eq!(u16::from_ne_bytes(field(&b, 78)), 7);
    assert_eq!(u32::from_ne_bytes(field(&b, 80)), 9);
}

#[test]
fn an_empty_rule_has_no_fields() {
    let b = encode_rule(&ClassRule::default(), 0);
    assert_eq!(b, [0u8; RULE_BYTES]);
}

#[test]
fn a_bucket_holds_the_class_rate_and_its_queue_bound_as_time() {
    let class = |rate: Option<Rate>, queue_bytes| AdmittedClass {
        name: "c".into(),
        rate,
        queue_bytes,
    };
    // 10 Mbit/s: 800 000 ps a byte; 1 250 000 bytes take 1 s.
    assert_eq!(
        bucket_of(&class(Some(Rate::mbps(10)), 1_250_000)),
        [800_000, 1_000_000_000, 0]
    );
    assert_eq!(bucket_of(&class(None, 1000)), [0, 0, 0]);
    // No bound: the tolerance saturates, nothing is refused.
    assert_eq!(
        bucket_of(&class(Some(Rate::gbps(1)), u64::MAX))[1],
        u64::MAX / 1000
    );
    assert_eq!(ps_per_byte(u64::MAX), 1);
}

#[test]
fn a_loop_is_overloaded_when_it_drops_or_never_sleeps_and_recovers_with_headroom() {
    let mut j = OverloadJudge::default();
    let p = 100_000_000;
    assert!(!j.judge(p, p / 2, 0, false));
    assert!(j.judge(p, p / 100, 0, false));
    // Between 2 % and 10 % asleep: the judgement stays.
    assert!(j.judge(p, p / 20, 0, false));
    assert!(!j.judge(p, p / 5, 0, false));
    assert!(j.judge(p, p / 2, 3, false));
    assert!(!j.judge(p, p / 2, 0, false));
    // Busy polling never sleeps: only drops count.
    assert!(!j.judge(p, 0, 0, true));
    assert!(j.judge(p, 0, 1, true));
}

#[test]
fn reasons_have_the_programs_order_and_labels() {
    let labels: Vec<_> = Reason::ALL.iter().map(|r| r.label()).collect();
    assert_eq!(labels, ["over_rate", "malformed", "non_ip"]);
}

#[test]
fn the_engine_hands_over_its_first_rules_in_first_match_order() {
    let text = "[interfaces]\ninside = \"a\"\noutside = \"b\"\n\n[default]\nrate = \"5mbit\"\n\n\
                [[class]]\nname = \"x\"\nmatch = { protocol = \"udp\" }\nrate = \"10mbit\"\n\
                queue = { bytes = 100000 }\n\n[[class]]\nname = \"y\"\nmatch = { dst_port = \"80\" }\n";
    let config = Config::from_toml_str(text, "t.toml").unwrap();
    let engine = crate::driver::reload::test_engine(&config, 4096, &Metrics::new());
    let a = engine.admission(MAX_RULES);
    assert!(a.complete);
    assert_eq!(a.rules.len(), 2);
    assert_eq!(a.rules[0].0.protocol, Some(17));
    assert_eq!(a.rules[0].1.name, "x");
    assert_eq!(a.rules[0].1.rate, Some(Rate::mbps(10)));
    assert_eq!(a.rules[0].1.queue_bytes, 100_000);
    assert_eq!(a.rules[1].1.name, "y");
    assert_eq!(a.rules[1].1.rate, None);
    assert_eq!(a.default.name, "default");
    assert_eq!(a.default.rate, Some(Rate::mbps(5)));
    let first = engine.admission(1);
    assert!(!first.complete);
    assert_eq!(first.rules.len(), 1);
}
