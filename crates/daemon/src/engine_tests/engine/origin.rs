//! Origin tags: the engine classifies a frame with the origin its port gave its slot
//! ([`FramePool::origin`]), so a class can take the packets of one workload only.

use super::*;
use metronome_packet::{ClassRule, Classifier};

/// Two classes, `pod` and `rest`, at 1 Mbit/s each: a class's first frame leaves at once (a
/// burst of one), the others wait in its queue.
const TWO: &str = r#"
[interfaces]
inside = "in0"
outside = "out0"

[[class]]
name = "pod"
match = { dst_port = 1 }
rate = "1mbit"

[[class]]
name = "rest"
match = { dst_port = 2 }
rate = "1mbit"
"#;

#[test]
fn frames_of_an_origin_go_to_the_class_that_matches_it() {
    let mut rig = Rig::new(TWO);
    // The configuration's class ids, with rules built here: `pod` takes origin 5, `rest` the
    // rest, in this order.
    let ids = config(TWO).class_rules();
    let (pod, rest) = (ids[0].1, ids[1].1);
    let from_pod = ClassRule {
        origin: Some(5),
        ..ClassRule::default()
    };
    rig.engine.replace_classifier(Classifier::new(
        vec![(from_pod, pod), (ClassRule::default(), rest)],
        Config::DEFAULT_CLASS,
    ));
    // The same flows from the pod and from nowhere known; only the origin tells them apart.
    for port in 0..3 {
        let frame = tcp(40000 + port, 5201, FULL, 0);
        rig.inside.inject_with_origin(&frame, 5).unwrap();
        rig.inside.inject(&frame).unwrap();
    }
    rig.inside
        .inject_with_origin(&tcp(41000, 5201, FULL, 0), 6)
        .unwrap();
    rig.push(&[]);
    // Each class sent its first frame at once and queued the others.
    assert_eq!(rig.sent.len(), 2);
    assert_eq!(rig.engine.class_queued("pod"), 2);
    assert_eq!(rig.engine.class_queued("rest"), 3);
    assert_eq!(rig.engine.class_queued("default"), 0);
    assert_eq!(rig.engine.counters().received, 7);
}
