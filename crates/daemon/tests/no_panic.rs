//! No input makes the configuration loader panic: arbitrary text, and the demo configuration
//! with bytes replaced, inserted or removed (every such text either validates or gives an
//! error that names the file).

use metronome_daemon::ops::config::Config;
use proptest::prelude::*;

const DEMO: &str = include_str!("../../../examples/demo.toml");

fn check(text: &str) {
    if let Err(e) = Config::from_toml_str(text, "fuzz.toml") {
        assert!(e.to_string().starts_with("fuzz.toml"), "{e}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_text(text in "\\PC{0,200}") {
        check(&text);
    }

    #[test]
    fn mutated_demo(edits in prop::collection::vec((any::<prop::sample::Index>(), 0u8..3, "[ -~\n]{0,3}"), 1..6)) {
        let mut text = DEMO.to_string();
        for (at, op, s) in edits {
            let mut i = at.index(text.len() + 1);
            while !text.is_char_boundary(i) {
                i -= 1;
            }
            match op {
                0 => text.insert_str(i, &s),
                1 => {
                    let mut end = (i + s.len().max(1)).min(text.len());
                    while !text.is_char_boundary(end) {
                        end += 1;
                    }
                    text.replace_range(i..end, "");
                }
                _ => {
                    let mut end = (i + s.len()).min(text.len());
                    while !text.is_char_boundary(end) {
                        end += 1;
                    }
                    text.replace_range(i..end, &s);
                }
            }
        }
        check(&text);
    }
}
