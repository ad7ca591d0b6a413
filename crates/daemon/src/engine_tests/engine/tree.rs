//! The class tree ([`super::super::tree`]): a packet is charged to its class and every
//! ancestor; a parent's rate is shared among its busy children by weight, each within its own.

use super::*;

/// A parent of 300 Mbit/s over children `a`, `b` and `c` of up to 200 each (ports 9001-9003),
/// weights as given.
fn tree(weights: [u32; 3]) -> String {
    let mut text = String::from(
        "[interfaces]\ninside = \"in0\"\noutside = \"out0\"\n\n\
         [[class]]\nname = \"tenant\"\nrate = \"300mbit\"\n",
    );
    for (k, (name, w)) in ["a", "b", "c"].iter().zip(weights).enumerate() {
        text.push_str(&format!(
            "\n[[class]]\nname = \"{name}\"\nparent = \"tenant\"\nweight = {w}\n\
             match = {{ dst_port = {} }}\nrate = \"200mbit\"\n",
            9001 + k
        ));
    }
    text
}

/// Offers each port of `offered` (Mbit/s, 0 = silent) full frames for `run`, in steps of 20 µs;
/// returns the Mbit/s each port got over the last half of the run.
fn offer(rig: &mut Rig, offered: [u64; 3], run: Duration) -> [f64; 3] {
    let step = Duration::from_micros(20);
    let steps = run.as_nanos() / step.as_nanos();
    let mut owed = [0u64; 3];
    let mut bytes = [0u64; 3];
    for k in 0..steps {
        let mut frames = Vec::new();
        for (p, rate) in offered.iter().enumerate() {
            // Bits owed this step, in frames.
            owed[p] += rate * 1_000_000 * step.as_nanos() / 1_000_000_000;
            while owed[p] >= FULL as u64 * 8 {
                owed[p] -= FULL as u64 * 8;
                frames.push(tcp(40000 + p as u16, 9001 + p as u16, FULL, 0));
            }
        }
        rig.sent.clear();
        rig.push(&frames);
        rig.step(step);
        if k >= steps / 2 {
            for (_, f) in &rig.sent {
                let port = u16::from_be_bytes([f[36], f[37]]);
                if (9001..=9003).contains(&port) {
                    bytes[(port - 9001) as usize] += f.len() as u64;
                }
            }
        }
    }
    let half = run.as_nanos() as f64 / 2e9;
    bytes.map(|b| b as f64 * 8.0 / half / 1e6)
}

/// Lets every queue drain: the senders went quiet.
fn drain(rig: &mut Rig) {
    while rig.engine.queued() > 0 {
        offer(rig, [0, 0, 0], Duration::from_millis(10));
    }
}

fn within(got: f64, want: f64, tolerance: f64) -> bool {
    (got - want).abs() <= want * tolerance
}

#[test]
fn two_busy_children_share_their_parent_and_one_alone_takes_its_own_rate() {
    let mut rig = Rig::new(&tree([1, 1, 1]));
    let got = offer(&mut rig, [400, 400, 0], Duration::from_millis(400));
    let sum = got[0] + got[1];
    assert!(within(sum, 300.0, 0.01), "{got:?}");
    assert!(
        within(got[0], 150.0, 0.03) && within(got[1], 150.0, 0.03),
        "{got:?}"
    );
    drain(&mut rig);
    let alone = offer(&mut rig, [400, 0, 0], Duration::from_millis(400));
    assert!(within(alone[0], 200.0, 0.01), "{alone:?}");
    assert!(rig.engine.tree_passes() > 100);
    rig.engine.invariants();
}

#[test]
fn a_flooding_child_leaves_its_siblings_their_shares() {
    let mut rig = Rig::new(&tree([1, 1, 1]));
    let got = offer(&mut rig, [2000, 120, 150], Duration::from_millis(400));
    assert!(within(got[1], 100.0, 0.02), "{got:?}");
    assert!(within(got[2], 100.0, 0.02), "{got:?}");
    assert!(within(got.iter().sum(), 300.0, 0.01), "{got:?}");
}

#[test]
fn what_children_just_below_their_part_leave_goes_to_a_flooding_sibling() {
    let mut rig = Rig::new(&tree([1, 1, 1]));
    // Max-min: 90 and 90 as offered, the flood the 120 they leave.
    let got = offer(&mut rig, [90, 90, 2000], Duration::from_millis(400));
    assert!(within(got[0], 90.0, 0.02), "{got:?}");
    assert!(within(got[1], 90.0, 0.02), "{got:?}");
    assert!(within(got[2], 120.0, 0.03), "{got:?}");
    assert!(within(got.iter().sum(), 300.0, 0.01), "{got:?}");
}

#[test]
fn weights_share_the_parent_and_what_one_leaves_the_others_take() {
    let mut rig = Rig::new(&tree([1, 2, 1]));
    let got = offer(&mut rig, [400, 400, 0], Duration::from_millis(400));
    assert!(
        within(got[0], 100.0, 0.03) && within(got[1], 200.0, 0.03),
        "{got:?}"
    );
    // A child that sends less than its part leaves the rest to its sibling.
    drain(&mut rig);
    let got = offer(&mut rig, [50, 400, 0], Duration::from_millis(400));
    assert!(
        within(got[0], 50.0, 0.03) && within(got[1], 200.0, 0.01),
        "{got:?}"
    );
    assert_eq!(
        rig.engine.class_share("b").map(|r| r.bps()),
        Some(200_000_000)
    );
}

#[test]
fn every_level_of_four_bounds_its_subtree() {
    let text = "[interfaces]\ninside = \"in0\"\noutside = \"out0\"\n\n\
        [[class]]\nname = \"l1\"\nrate = \"400mbit\"\n\n\
        [[class]]\nname = \"l2\"\nparent = \"l1\"\nrate = \"300mbit\"\n\n\
        [[class]]\nname = \"l3\"\nparent = \"l2\"\nrate = \"200mbit\"\n\n\
        [[class]]\nname = \"l4\"\nparent = \"l3\"\nmatch = { dst_port = 9001 }\n\n\
        [[class]]\nname = \"side\"\nparent = \"l1\"\nmatch = { dst_port = 9002 }\n";
    let mut rig = Rig::new(text);
    let got = offer(&mut rig, [1000, 1000, 0], Duration::from_millis(400));
    // l4 has no rate of its own: its ancestors' bound it (200), `side` takes the rest of l1.
    assert!(within(got[0], 200.0, 0.02), "{got:?}");
    assert!(within(got[0] + got[1], 400.0, 0.01), "{got:?}");
}

#[test]
fn a_parent_s_share_from_outside_bounds_its_subtree_and_a_closed_parent_closes_it() {
    let mut rig = Rig::new(&tree([1, 1, 1]));
    let tenant = rig.engine.class_index("tenant").unwrap();
    // A silo's or the cluster's share of the parent's rate: the children share that.
    assert!(rig
        .engine
        .set_class_rate(tenant, metronome_core::Rate::mbps(100)));
    let got = offer(&mut rig, [400, 400, 0], Duration::from_millis(400));
    assert!(within(got[0] + got[1], 100.0, 0.01), "{got:?}");
    assert!(within(got[0], 50.0, 0.03), "{got:?}");
    // Its subtree's demand is the parent's, as the allocators read it.
    assert!(rig.engine.class_stamped_bytes(tenant) > 0);
    assert!(rig.engine.class_backlog_bytes(tenant) > 0);
    drain(&mut rig);
    assert!(rig.engine.set_class_closed(tenant, true));
    let got = offer(&mut rig, [400, 0, 0], Duration::from_millis(20));
    assert_eq!(got[0], 0.0);
    rig.engine.set_class_closed(tenant, false);
    let got = offer(&mut rig, [400, 0, 0], Duration::from_millis(100));
    assert!(got[0] > 0.0);
    // Each class's share is a series; the parent's sent counts hold its subtree's.
    assert!(rig.series("metronome_class_share_bps{class=\"a\",parent=\"tenant\"}") > 0);
    let sent = |rig: &Rig, class: &str| {
        rig.series(&format!("metronome_class_bytes_total{{class=\"{class}\"}}"))
    };
    // A parent's counts follow its children's within a pass.
    drain(&mut rig);
    offer(&mut rig, [0, 0, 0], Duration::from_millis(10));
    assert_eq!(sent(&rig, "tenant"), sent(&rig, "a") + sent(&rig, "b"));
    assert!(sent(&rig, "a") > 0);
}

#[test]
fn a_class_added_live_under_a_parent_shares_it_and_its_rule_comes_first() {
    let text = "[interfaces]\ninside = \"in0\"\noutside = \"out0\"\n\n\
        [[class]]\nname = \"tenant\"\nmatch = { protocol = \"tcp\" }\nrate = \"300mbit\"\n";
    let mut rig = Rig::new(text);
    let child = |name: &str, port: u16| {
        let t = format!(
            "{text}\n[[class]]\nname = \"{name}\"\nparent = \"tenant\"\n\
             match = {{ dst_port = {port} }}\nrate = \"200mbit\"\n"
        );
        config(&t).classes.pop().unwrap()
    };
    rig.engine.add_class(&child("a", 9001)).unwrap();
    rig.engine.add_class(&child("b", 9002)).unwrap();
    // The parent's own match takes every TCP packet, yet its children's are tried first.
    let got = offer(&mut rig, [400, 400, 400], Duration::from_millis(400));
    assert!(within(got[0], 100.0, 0.03), "{got:?}");
    assert!(within(got[1], 100.0, 0.03), "{got:?}");
    assert!(within(got.iter().sum(), 300.0, 0.01), "{got:?}");
    assert!(matches!(
        rig.engine.delete_class("tenant"),
        Err(LiveError::Tree(TreeError::HasChildren { children: 2, .. }))
    ));
    rig.engine.invariants();
}

#[test]
fn a_reload_rebuilds_the_tree_and_names_what_changed() {
    // The same classes side by side; `tenant` (no children, so no longer gathering) matches
    // nothing of the traffic.
    let flat = tree([1, 1, 1])
        .replace("parent = \"tenant\"\nweight = 1\n", "")
        .replace(
            "rate = \"300mbit\"",
            "rate = \"300mbit\"\nmatch = { dst_port = 1 }",
        );
    let mut rig = Rig::new(&flat);
    let got = offer(&mut rig, [400, 400, 0], Duration::from_millis(200));
    assert!(
        within(got[0], 200.0, 0.01) && within(got[1], 200.0, 0.01),
        "{got:?}"
    );
    drain(&mut rig);
    let plan = rig.reload(&config(&tree([1, 2, 1]))).unwrap();
    let text = plan.to_string();
    assert!(text.contains("parent") && text.contains("weight"), "{text}");
    let got = offer(&mut rig, [400, 400, 0], Duration::from_millis(400));
    assert!(
        within(got[0], 100.0, 0.03) && within(got[1], 200.0, 0.03),
        "{got:?}"
    );
    drain(&mut rig);
    rig.reload(&config(&flat)).unwrap();
    let got = offer(&mut rig, [400, 400, 0], Duration::from_millis(200));
    assert!(
        within(got[0], 200.0, 0.01) && within(got[1], 200.0, 0.01),
        "{got:?}"
    );
    rig.engine.invariants();
}
