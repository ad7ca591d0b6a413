//! Fuzz tests of the control socket's request parser (`metronome_daemon::ops::control::Request::
//! parse_bytes`, what the socket's reader hands each line to) and of the validation behind it,
//! with bolero, over the committed corpus `crates/daemon/corpus/control/`.
//!
//! Under `cargo test` (stable) bolero's test engine feeds each target a few thousand random
//! inputs (OS-seeded; a failure prints `BOLERO_RANDOM_SEED=...` to replay it). With
//! `cargo bolero test -p metronome-daemon --test control_fuzz <target>` on a nightly toolchain
//! the same targets run under libFuzzer. Corpus files are read as `common` describes (`\r`,
//! `\n`, `\t`, `\\` and `\xNN` escapes: a backslash of the JSON itself is written `\\`); the
//! `# expect: OUTCOME` line gives the request's `op`, or `error`. Targets:
//!
//! * `every_corpus_file_parses_as_expected`: each seed gives its outcome, and there is a seed
//!   of every `op`.
//! * `arbitrary_bytes`: any bytes as a line, alone and behind a request's start.
//! * `mutated_corpus_seeds`: the seeds with random byte flips, insertions and a truncation.
//!
//! Invariants for every input ([`check_invariants`]): no panic; a line that is not UTF-8 is an
//! error saying so; a request that parses is written back as JSON that parses to the same
//! request; an `add` or `change` class either validates or gives an error naming its field,
//! and an `add` goes through the model's checks (`Live::restore`) without a panic.

mod common;

use bolero::check;
use common::SeedMutation;
use metronome_daemon::ops::config::Config;
use metronome_daemon::ops::control::{protocol, Live, Request};
use metronome_daemon::ops::metrics::Metrics;
use std::sync::{Arc, OnceLock};

/// Random inputs per target under `cargo test`: a few thousand, as the metrics endpoint's fuzz
/// targets (`crates/daemon/tests/http_fuzz.rs`).
const ITERATIONS: usize = 4_000;

/// The configuration the live classes are validated against.
fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        Config::from_toml_str("[interfaces]\ninside = \"a\"\noutside = \"b\"\n", "t.toml").unwrap()
    })
}

/// One model shared by the targets' inputs (its class count is bounded by the default cap).
fn live() -> &'static Arc<Live> {
    static LIVE: OnceLock<Arc<Live>> = OnceLock::new();
    LIVE.get_or_init(|| Live::new(config(), 1, Metrics::new()).unwrap())
}

/// The outcome's name: the request's `op`, or `error`.
fn outcome(r: &Result<Request, protocol::ReplyError>) -> &'static str {
    match r {
        Ok(request) => request.op(),
        Err(_) => "error",
    }
}

fn check_invariants(line: &[u8]) {
    let parsed = Request::parse_bytes(line);
    if std::str::from_utf8(line).is_err() {
        let e = parsed
            .as_ref()
            .expect_err("a line that is not UTF-8 parsed");
        assert!(e.message.contains("UTF-8"), "{e}");
        return;
    }
    let Ok(request) = parsed else { return };
    let written = serde_json::to_string(&request).unwrap();
    assert_eq!(Request::parse(&written).as_ref(), Ok(&request), "{written}");
    match request {
        Request::Add { class } => {
            if let Ok(table) = protocol::toml_table(&class) {
                if let Err(e) = config().live_class(&table) {
                    assert!(!e.field.is_empty(), "{e}");
                }
            }
            let _ = live().restore(class);
        }
        Request::Change { class } => {
            if let Ok(table) = protocol::toml_table(&class) {
                let _ = config().live_class(&table);
            }
        }
        Request::Del { .. } | Request::List | Request::Show { .. } => {}
    }
}

#[test]
fn every_corpus_file_parses_as_expected() {
    let corpus = common::read_corpus("control");
    assert!(corpus.len() >= 10, "{} corpus files", corpus.len());
    let mut ops = std::collections::BTreeSet::new();
    for (path, line, expect) in &corpus {
        let expect = expect
            .as_deref()
            .unwrap_or_else(|| panic!("{path:?}: no `# expect:`"));
        let got = Request::parse_bytes(line);
        assert_eq!(outcome(&got), expect, "{path:?}: {got:?}");
        ops.insert(outcome(&got));
        check_invariants(line);
    }
    let all = ["add", "change", "del", "error", "list", "show"];
    assert_eq!(ops.into_iter().collect::<Vec<_>>(), all);
}

#[test]
fn arbitrary_bytes() {
    check!()
        .with_iterations(ITERATIONS)
        .with_max_len(256)
        .for_each(|bytes: &[u8]| {
            check_invariants(bytes);
            // Behind the start of an add, so that the bytes reach the class's fields.
            let mut line = br#"{"op":"add","class":{"name":"f","#.to_vec();
            line.extend_from_slice(bytes);
            check_invariants(&line);
        });
}

#[test]
fn mutated_corpus_seeds() {
    let seeds = common::seeds("control");
    check!()
        .with_iterations(ITERATIONS)
        .with_type::<SeedMutation>()
        .for_each(|m: &SeedMutation| {
            let line = m.apply(&seeds);
            check_invariants(&line);
        });
}
