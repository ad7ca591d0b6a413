//! The daemon's engines hash flows with a seed drawn at start-up ([`crate::datapath::flow_seed`]),
//! kept across reloads.

use super::*;

/// The flow id the engine's classifier gives `frame`.
fn flow_of(engine: &Engine, frame: &[u8]) -> FlowId {
    match engine.classifier().classify(&parse(frame)) {
        Verdict::Shape { flow, .. } => flow,
        other => panic!("not shaped: {other:?}"),
    }
}

#[test]
fn engines_built_the_daemons_way_hash_the_same_flow_apart() {
    let c = config(BASE);
    let frame = tcp(40000, 5301, FULL, 0);
    let seeded = || crate::driver::reload::engine(&c, 64, &Metrics::new(), FlowSeed::draw());
    let (a, b) = (seeded(), seeded());
    let fixed = test_engine(&c, 64, &Metrics::new());
    // Two 32-bit ids from independent seeds are equal with probability 2^-32.
    assert_ne!(flow_of(&a, &frame), flow_of(&b, &frame));
    assert_ne!(flow_of(&a, &frame), flow_of(&fixed, &frame));
    let tuple = match parse(&frame) {
        Parsed::Ip(ip) => ip.tuple,
        other => panic!("{other:?}"),
    };
    let expected = metronome_packet::flow_id(&tuple, metronome_packet::DEFAULT_FLOW_SEED);
    assert_eq!(flow_of(&fixed, &frame), expected);
}

/// A paced flow with frames queued keeps its id, its flow-table entry and its pacing across a
/// reload that rebuilds the classifier (a class added in front): the frame sent after the reload
/// leaves one pacing interval after the last one queued, not at once as a new flow's would.
#[test]
fn a_reload_keeps_the_seed_and_the_live_flows() {
    let mut rig = Rig::new(BASE);
    let seed = FlowSeed::draw();
    rig.engine =
        crate::driver::reload::engine(&config(BASE), rig.pool.capacity(), &Metrics::new(), seed);
    let t0 = rig.now;
    let frame = tcp(40000, 5301, FULL, 0);
    let before = flow_of(&rig.engine, &frame);
    let fixed = test_engine(&config(BASE), 64, &Metrics::new());
    assert_ne!(before, flow_of(&fixed, &frame), "the seed is in force");
    rig.push(&vec![frame.clone(); 3]);
    let new = BASE.replace(
        "[[class]]\nname = \"bulk\"",
        "[[class]]\nname = \"ssh\"\nmatch = { dst_port = 22 }\nrate = \"1mbit\"\n\n[[class]]\nname = \"bulk\"",
    );
    rig.reload(&config(&new)).unwrap();
    assert_eq!(flow_of(&rig.engine, &frame), before);
    assert_eq!(rig.engine.flow_seed(), seed);
    rig.push(std::slice::from_ref(&frame));
    assert_eq!(rig.engine.flow_table_stats(), (1, 0));
    rig.run_until_empty(Duration::from_micros(2));
    let gap = Rate::mbps(12).transmit_time(FULL as u64).as_nanos();
    let last = rig.sent.last().unwrap().0.saturating_since(t0).as_nanos();
    assert!(last.abs_diff(3 * gap) <= 2_000, "{last} ns");
}
