//! Every configuration under the repository's `examples/` validates, and the demo configures
//! the scenario `metronome demo` runs.

use metronome_core::{ClassId, Rate};
use metronome_daemon::ops::config::{Backpressure, Config};
use std::path::PathBuf;

fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

#[test]
fn every_example_validates() {
    let mut seen = 0;
    let entries = std::fs::read_dir(examples_dir()).expect("examples/ exists");
    for entry in entries {
        let path = entry.expect("readable directory entry").path();
        if path.extension().is_some_and(|e| e == "toml") {
            if let Err(e) = Config::load(&path) {
                panic!("{e}");
            }
            seen += 1;
        }
    }
    assert!(
        seen >= 3,
        "expected demo, tenant-limits and pacing, saw {seen}"
    );
}

#[test]
fn demo_is_sixteen_bulk_flows_at_200_mbit_beside_a_paced_class() {
    let c = Config::load(examples_dir().join("demo.toml")).expect("demo validates");
    assert_eq!(c.classes.len(), 2);
    let bulk = &c.classes[0];
    assert_eq!(bulk.name, "bulk");
    assert_eq!(bulk.matcher.protocol, Some(6));
    assert_eq!(bulk.matcher.dst_port, Some((5201, 5216)), "16 flows");
    assert_eq!(bulk.policy.rate, Some(Rate::mbps(200)));
    let paced = &c.classes[1];
    assert_eq!(paced.matcher.dst_port, Some((5301, 5304)), "4 flows");
    assert_eq!(paced.policy.pacing, Some(Rate::mbps(50)));
    assert_eq!(paced.policy.rate, None);
    assert!(!c.default_class.is_shaped(), "the rest unshaped");
    assert_eq!(Config::class_id(0), ClassId(1));
    assert_eq!(c.class_name(Config::DEFAULT_CLASS), Some("default"));
}

#[test]
fn tenant_limits_use_ecn_and_a_limited_default() {
    let c = Config::load(examples_dir().join("tenant-limits.toml")).expect("validates");
    let a = &c.classes[0];
    assert_eq!(a.matcher.src, Some("10.1.0.0/16".parse().expect("prefix")));
    assert_eq!(a.policy.burst, 64 * 1024);
    assert!(matches!(a.policy.backpressure, Backpressure::Ecn { .. }));
    assert_eq!(c.default_class.rate, Some(Rate::mbps(100)));
    assert_eq!(
        c.default_class.backpressure,
        Backpressure::Drop { limit: 100 }
    );
}

#[test]
fn a_missing_file_names_the_path() {
    let err = Config::load("/nonexistent/metronome.toml").unwrap_err();
    assert!(err.line.is_none());
    assert!(
        err.to_string()
            .starts_with("/nonexistent/metronome.toml: cannot read the configuration"),
        "{err}"
    );
}

#[test]
fn silos_example_runs_two_silos_under_one_limit() {
    let c = Config::load(examples_dir().join("silos.toml")).expect("validates");
    assert_eq!(c.daemon.cores, 2);
    assert_eq!(
        c.daemon.nba_period,
        metronome_core::Duration::from_millis(100)
    );
    assert_eq!(c.classes[0].policy.rate, Some(Rate::gbps(2)));
}

#[test]
fn link_sharing_puts_every_class_but_management_on_the_link() {
    use metronome_daemon::ops::config::{LinkMarkingRule, LinkScheduler};
    let c = Config::load(examples_dir().join("link-sharing.toml")).expect("validates");
    let link = c.link.expect("a [link]");
    assert_eq!(link.rate, Rate::gbps(1));
    assert_eq!(link.scheduler, LinkScheduler::Dwrr);
    assert_eq!(link.marking.rule, LinkMarkingRule::MqEcn);
    assert_eq!(link.buffer_bytes, 2 << 20);
    let on: Vec<(&str, bool)> = c
        .classes
        .iter()
        .map(|k| (k.name.as_str(), k.policy.link.on_link))
        .collect();
    assert_eq!(
        on,
        [
            ("voice", true),
            ("bulk-a", true),
            ("bulk-b", true),
            ("management", false)
        ]
    );
    assert_eq!(c.classes[0].policy.link.priority, Some(0));
    assert_eq!(c.classes[0].policy.rate, Some(Rate::mbps(50)));
    assert_eq!(c.classes[2].policy.link.weight, 3);
    assert!(c.default_class.link.on_link);
}
