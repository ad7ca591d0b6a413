//! `[link]` and the classes' `link`, `weight`, `priority` and `non_ect`: defaults, each error
//! with its field and line, and the reload plan.

use super::tests::{error_at, parse};
use super::*;
use metronome_core::{NonEctPolicy, Rate};

/// Lines 4-5.
const LINK: &str = "[link]\nrate = \"1gbit\"\n";

#[test]
fn defaults_put_every_class_on_the_link_with_weight_one() {
    let c = parse(&format!("{LINK}[[class]]\nname = \"a\"\n")).unwrap();
    let l = c.link.unwrap();
    assert_eq!(l.rate, Rate::gbps(1));
    assert_eq!(l.scheduler, LinkScheduler::Dwrr);
    assert_eq!(l.marking.rule, LinkMarkingRule::MqEcn);
    assert_eq!(l.marking.red, None);
    assert_eq!(l.marking.rtt, link::DEFAULT_LINK_RTT);
    assert_eq!(l.marking.lambda, link::DEFAULT_LINK_LAMBDA);
    assert_eq!(l.buffer_bytes, link::DEFAULT_LINK_BUFFER);
    // vnet_hdr is on by default: super-frames up to 64 KiB.
    assert_eq!(
        (l.max_frame_bytes, l.quantum_bytes, l.burst_bytes),
        (65_535, 65_535, 65_535)
    );
    let a = c.classes[0].policy.link;
    assert_eq!(
        a,
        ClassLink {
            on_link: true,
            weight: 1,
            priority: None,
            non_ect: NonEctPolicy::Pass
        }
    );
    assert!(c.default_class.link.on_link);
    // Without [link], nothing is on one.
    let c = parse("[[class]]\nname = \"a\"\n").unwrap();
    assert_eq!(c.classes[0].policy.link, ClassLink::OFF);
    assert!(c.link.is_none());
}

#[test]
fn marking_rules_and_red_parse() {
    let c = parse(&format!(
        "{LINK}marking = \"red-per-queue\"\nred_min = 0.25\nred_probability = 0.5\n\
         [daemon]\nvnet_hdr = false\n"
    ))
    .unwrap();
    let l = c.link.unwrap();
    assert_eq!(l.marking.rule, LinkMarkingRule::PerQueue);
    assert_eq!(l.marking.red, Some((0.25, 1.0, 0.5)));
    assert_eq!(l.max_frame_bytes, 1500 + 14 + 8);
    assert!(matches!(
        l.core_marking(),
        metronome_core::Marking::Red { .. }
    ));
    for (text, rule) in [
        ("none", LinkMarkingRule::None),
        ("per-queue-min", LinkMarkingRule::PerQueueMin),
        ("per-port", LinkMarkingRule::PerPort),
        ("mq-ecn", LinkMarkingRule::MqEcn),
    ] {
        let c = parse(&format!("{LINK}marking = \"{text}\"\n")).unwrap();
        assert_eq!(c.link.unwrap().marking.rule, rule);
    }
}

#[test]
fn link_errors_name_field_and_line() {
    error_at("[link]\nscheduler = \"wrr\"\n", 4, "link.rate");
    error_at(&format!("{LINK}scheduler = \"htb\"\n"), 6, "link.scheduler");
    error_at(&format!("{LINK}marking = \"ecn\"\n"), 6, "link.marking");
    error_at(
        &format!("{LINK}marking = \"red-none\"\n"),
        6,
        "link.marking",
    );
    error_at(&format!("{LINK}red_min = 0.2\n"), 6, "link.red_min");
    let red = "marking = \"red-mq-ecn\"\n";
    error_at(
        &format!("{LINK}{red}red_min = 0.9\nred_max = 0.5\n"),
        7,
        "link.red_min",
    );
    error_at(
        &format!("{LINK}{red}red_probability = 2.0\n"),
        7,
        "link.red_probability",
    );
    error_at(&format!("{LINK}lambda = -1.0\n"), 6, "link.lambda");
    error_at(&format!("{LINK}beta = 1.0\n"), 6, "link.beta");
    error_at(&format!("{LINK}rtt = \"0us\"\n"), 6, "link.rtt");
    error_at(&format!("{LINK}buffer = \"1k\"\n"), 6, "link.buffer");
    error_at(&format!("{LINK}quantum = 1500\n"), 6, "link.quantum");
    error_at(&format!("{LINK}burst = \"1x\"\n"), 6, "link.burst");
    error_at("[link]\nrate = \"0bit\"\n", 5, "link.rate");
    error_at(&format!("[daemon]\ncores = 2\n{LINK}"), 6, "link");
}

#[test]
fn class_link_errors_name_field_and_line() {
    let class = "[[class]]\nname = \"a\"\n"; // lines 6-7 after LINK
    error_at(
        "[[class]]\nname = \"a\"\nweight = 2\n",
        6,
        "class[0].weight",
    );
    error_at("[default]\npriority = 1\n", 5, "default.priority");
    error_at(&format!("{LINK}{class}weight = 0\n"), 8, "class[0].weight");
    error_at(
        &format!("{LINK}{class}priority = 8\n"),
        8,
        "class[0].priority",
    );
    error_at(
        &format!("{LINK}{class}weight = 2\npriority = 1\n"),
        8,
        "class[0].weight",
    );
    error_at(
        &format!("{LINK}{class}link = false\nweight = 2\n"),
        9,
        "class[0].weight",
    );
    let err = error_at(
        &format!("{LINK}{class}non_ect = \"mark\"\n"),
        8,
        "class[0].non_ect",
    );
    assert!(matches!(err.kind, ErrorKind::Schema(_)), "{err}");
    error_at(
        &format!("{LINK}scheduler = \"nicpic\"\n{class}priority = 0\n"),
        8,
        "class[0].priority",
    );
    // 65 classes on a DWRR link: the default and 64 more; the 64th class is one too many.
    let mut many = LINK.to_string();
    for i in 0..64 {
        many.push_str(&format!("[[class]]\nname = \"c{i}\"\n"));
    }
    error_at(&many, 6 + 2 * 63 + 1, "class[63]");
    // With link = false on one, they fit; with nicpic, any number fits.
    let fits = many.replacen("name = \"c0\"\n", "name = \"c0\"\nlink = false\n", 1);
    assert!(parse(&fits).is_ok());
    let nicpic = many.replacen("[link]\n", "[link]\nscheduler = \"nicpic\"\n", 1);
    assert!(parse(&nicpic).is_ok());
    error_at(
        &format!("{LINK}scheduler = \"nicpic\"\nmarking = \"red-per-queue\"\n"),
        7,
        "link.marking",
    );
    // Every class off the link.
    error_at(&format!("{LINK}[default]\nlink = false\n"), 4, "link");
}

#[test]
fn reload_applies_rate_weights_and_priorities_live_and_the_buffer_needs_a_restart() {
    let old = parse(&format!("{LINK}[[class]]\nname = \"a\"\nweight = 1\n")).unwrap();
    let new = parse("[link]\nrate = \"500mbit\"\n[[class]]\nname = \"a\"\npriority = 2\n").unwrap();
    let plan = old.diff(&new);
    assert!(!plan.needs_restart(), "{plan}");
    assert_eq!(plan.link.len(), 1, "{plan}");
    assert_eq!(plan.link[0].field, "link.rate");
    let text = plan.to_string();
    assert!(text.contains("class a: link: weight 1"), "{text}");
    let bigger = parse(&format!(
        "{LINK}buffer = \"4mb\"\n[[class]]\nname = \"a\"\nweight = 1\n"
    ))
    .unwrap();
    assert!(old.diff(&bigger).needs_restart());
    let none = parse("[[class]]\nname = \"a\"\n").unwrap();
    assert!(old.diff(&none).needs_restart());
}
