//! The `cluster` experiment at small scale: 3 and 10 hosts.

use super::*;
use crate::experiments::rows::num;

fn point(scenario: &str, hosts: u64, weights: &str, extra: &str) -> Point {
    let text = format!(
        "scenario = \"{scenario}\"\nhosts = {hosts}\nweights = \"{weights}\"\n\
         limit_bps = 300_000_000\nperiod_ms = 1000\nlease_ms = 3000\ncommit_us = 2000\n\
         watch_us = 1000\ntail_pct = 1.0\ntail_factor = 10\nbusy_factor = 2\nqueue_ms = 10\n\
         join_floor_pct = 1.0\nwarmup_periods = 4\nafter_periods = 8\nsum_pct = 1.0\n\
         fair_pct = 2.0\nhold_pct = 97.0\nseed = 1\n{extra}"
    );
    Point::new(toml::from_str(&text).expect("test point parses"))
}

fn one(scenario: &str, hosts: u64, weights: &str) -> Row {
    let rows = run(&point(scenario, hosts, weights, "")).expect("runs");
    assert_eq!(rows.len(), 1);
    rows.into_iter().next().unwrap()
}

fn settled(row: &Row) -> bool {
    row.get("settled").and_then(|v| v.as_bool()) == Some(true)
}

#[test]
fn busy_hosts_settle_within_three_periods() {
    for hosts in [3, 10] {
        for weights in ["1", "1,3"] {
            let row = one("start", hosts, weights);
            assert!(settled(&row), "{row:?}");
            assert!(num(&row, "periods_to_settle") <= 3.0, "{row:?}");
            assert!((num(&row, "final_sum_pct") - 100.0).abs() <= 1.0, "{row:?}");
            assert!(num(&row, "final_min_fair_pct") >= 98.0, "{row:?}");
            assert!(num(&row, "final_max_fair_pct") <= 102.0, "{row:?}");
        }
    }
}

#[test]
fn demand_moving_to_one_host_gives_it_97_percent_within_three_periods() {
    for hosts in [3, 10] {
        let row = one("shift", hosts, "1");
        assert!(settled(&row), "{row:?}");
        assert!(num(&row, "periods_to_settle") <= 3.0, "{row:?}");
        // The idle hosts keep 1 % of the limit together.
        assert!(num(&row, "final_host0_pct") >= 98.9, "{row:?}");
        // A host that went idle gives its share back before host 0 takes it (own_share).
        assert_eq!(num(&row, "max_overshoot_pct"), 0.0, "{row:?}");
    }
}

#[test]
fn a_departed_hosts_share_returns_within_lease_and_one_period() {
    let row = one("leave", 3, "1");
    assert!(settled(&row), "{row:?}");
    let deleted = num(&row, "deleted_after_periods");
    assert!(deleted > 0.0 && deleted <= 3.0, "{row:?}");
    assert!(num(&row, "periods_to_settle") > deleted, "{row:?}");
    assert!(
        num(&row, "periods_to_settle") <= num(&row, "bound_periods"),
        "{row:?}"
    );
}

#[test]
fn a_new_host_starts_at_the_floor_and_grows_to_its_share() {
    let row = one("join", 10, "1");
    assert_eq!(num(&row, "join_share_pct"), 1.0, "{row:?}");
    assert!(settled(&row), "{row:?}");
    assert!(num(&row, "periods_to_settle") <= 3.0, "{row:?}");
    // Until the others see it, the new host's floor comes on top of the limit.
    assert!(num(&row, "max_overshoot_pct") > 0.0, "{row:?}");
    assert!(num(&row, "max_overshoot_pct") <= 1.0 + 0.1, "{row:?}");
}

#[test]
fn writes_are_publishes_and_keep_alives() {
    let row = one("start", 10, "1");
    // 10 hosts x (1 publish + 1 keep-alive) per second, less the first period's partial ones.
    let w = num(&row, "writes_per_s");
    assert!((18.0..=20.0).contains(&w), "{row:?}");
}

#[test]
fn runs_are_reproducible() {
    let a = run(&point("join", 10, "1", "")).unwrap();
    let b = run(&point("join", 10, "1", "")).unwrap();
    assert_eq!(a, b);
}

#[test]
fn bad_parameters_are_errors() {
    let mut bad = point("start", 3, "1", "");
    for (key, value) in [
        ("scenario", toml::Value::from("nope")),
        ("weights", toml::Value::from("1,0")),
        ("join_floor_pct", toml::Value::from(150.0)),
        ("hosts", toml::Value::from(1)),
    ] {
        let mut p = point("start", 3, "1", "");
        p.params.insert(key.to_string(), value);
        assert!(run(&p).unwrap_err().is_bad_input(), "{key}");
    }
    bad.params
        .insert("scenario".into(), toml::Value::from("shift"));
    bad.params
        .insert("warmup_periods".into(), toml::Value::from(1));
    assert!(run(&bad).unwrap_err().is_bad_input());
}
