//! No request line makes the control socket's parsing and validation panic: arbitrary text, and
//! a valid `add` with bytes replaced, inserted or removed (each either parses, validates or
//! gives an error). The seed is checked first to be that valid `add`, as the socket's reader
//! hands it to the parser (`crates/daemon/src/ops/control.rs`: the line with its newline), so
//! that the mutations start from a request the daemon takes.

use metronome_daemon::ops::config::Config;
use metronome_daemon::ops::control::{protocol, Request};
use proptest::prelude::*;
use std::sync::Once;

/// Set once `mutated_add` has checked its seed.
static SEED_CHECKED: Once = Once::new();

const ADD: &str = r#"{"op":"add","class":{"name":"t1","match":{"dst":"10.0.0.0/24","protocol":"tcp","dst_port":"5201-5204"},"rate":"10mbit","burst":"15k","fair":true}}"#;

/// The configuration the live classes are validated against.
fn config() -> Config {
    Config::from_toml_str("[interfaces]\ninside = \"a\"\noutside = \"b\"\n", "t.toml").unwrap()
}

/// Panics unless [`ADD`], as the socket's reader passes it on (with its newline), parses as an
/// `add` of class `t1`, becomes a `[[class]]` table and validates as a live class with the
/// seed's match, rate and `fair`.
fn assert_seed_is_a_valid_add() {
    let class = match Request::parse(&format!("{ADD}\n")) {
        Ok(Request::Add { class }) => class,
        other => panic!("the seed does not parse as an add: {other:?}"),
    };
    let table = protocol::toml_table(&class)
        .unwrap_or_else(|e| panic!("the seed's class is not a [[class]] table: {e:?}"));
    let live = config()
        .live_class(&table)
        .unwrap_or_else(|e| panic!("the seed's class does not validate: {e}"));
    assert_eq!(live.name, "t1");
    assert_eq!(live.matcher.dst, Some("10.0.0.0/24".parse().unwrap()));
    assert_eq!(live.matcher.protocol, Some(6));
    assert_eq!(live.matcher.dst_port, Some((5201, 5204)));
    assert!(live.policy.rate.is_some(), "{live:?}");
    assert!(live.policy.fair, "{live:?}");
}

#[test]
fn the_seed_is_a_valid_add() {
    assert_seed_is_a_valid_add();
}

fn check(line: &str) {
    let config = config();
    let class = match Request::parse(line) {
        Ok(Request::Add { class }) | Ok(Request::Change { class }) => class,
        Ok(_) | Err(_) => return,
    };
    if let Ok(table) = protocol::toml_table(&class) {
        let _ = config.live_class(&table);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_lines(line in "\\PC{0,200}") {
        check(&line);
    }

    #[test]
    fn mutated_add(edits in prop::collection::vec((any::<prop::sample::Index>(), 0u8..2, "[ -~]{0,3}"), 1..6)) {
        SEED_CHECKED.call_once(assert_seed_is_a_valid_add);
        let mut line = ADD.to_string();
        for (at, op, s) in edits {
            let i = at.index(line.len() + 1);
            if op == 0 {
                line.insert_str(i, &s);
            } else {
                let end = (i + s.len().max(1)).min(line.len());
                line.replace_range(i..end, &s);
            }
        }
        check(&line);
    }
}
