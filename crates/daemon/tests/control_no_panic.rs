//! No request line makes the control socket's parsing and validation panic: arbitrary text, and
//! a valid `add` with bytes replaced, inserted or removed (each either parses, validates or
//! gives an error).

use metronome_daemon::ops::config::Config;
use metronome_daemon::ops::control::{protocol, Request};
use proptest::prelude::*;

const ADD: &str = r#"{"op":"add","class":{"name":"t1","match":{"dst":"10.0.0.0/24","protocol":"tcp","dst_port":"5201-5204"},"rate":"10mbit","burst":"15k","fair":true}}"#;

fn check(line: &str) {
    let config =
        Config::from_toml_str("[interfaces]\ninside = \"a\"\noutside = \"b\"\n", "t.toml").unwrap();
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
