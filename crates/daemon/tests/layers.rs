//! The daemon's layers, as `src/lib.rs` states them, are the real ones: every path into another
//! layer of the crate (`crate::...` outside comments) in the non-test code goes down the order
//! below, never up, so no two layers import each other. And the engine's crate, which sits under
//! all of them, names the daemon nowhere in its code or its manifest.

use std::path::{Path, PathBuf};

/// The layers, lowest first: a module path prefix under `crate::` and its rank. The engine
/// (`datapath`) and the configuration (`ops::config`, `ops::units`, the `Config` re-export) are
/// crates of their own, under everything here.
const LAYERS: [(&str, u8); 12] = [
    ("datapath", 0),
    ("ops::config", 0),
    ("ops::units", 0),
    ("Config", 0),
    ("ConfigError", 0),
    ("ops::metrics", 1),
    ("os", 2),
    ("ops::refused", 3),
    ("ops::cluster", 4),
    ("ops::control", 5),
    ("driver", 6),
    ("ops::service", 7),
];

/// The rank of the module path `path` (`ops::metrics::Metrics`, `driver::run`), `None` for a
/// path of no layer (`crate::ops` itself).
fn rank_of_path(path: &str) -> Option<u8> {
    LAYERS
        .iter()
        .filter(|(prefix, _)| {
            path == *prefix
                || path
                    .strip_prefix(prefix)
                    .is_some_and(|rest| rest.starts_with("::"))
        })
        .map(|&(_, rank)| rank)
        .next()
}

/// The rank of the source file at `rel` (relative to `src/`, `/`-separated).
fn rank_of_file(rel: &str) -> Option<u8> {
    let module = rel.trim_end_matches(".rs").replace('/', "::");
    rank_of_path(&module)
}

/// True for a file that holds tests only (`tests.rs`, `*_tests.rs`, a `tests/` folder, the
/// engine's tests): tests may reach across layers.
fn is_test_file(rel: &str) -> bool {
    rel.split('/').any(|part| {
        part == "tests"
            || part == "tests.rs"
            || part.ends_with("_tests.rs")
            || part.starts_with("engine_tests")
    })
}

/// The code of `text`, comments dropped (line comments, doc comments; the daemon writes no
/// block comments).
fn code_of(text: &str) -> String {
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `crate::a::b::c` path in `code`, as `a::b::c` (a braced `use crate::{..}` is not
/// written in this crate; the test fails on one).
fn crate_paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let tail = &rest[at + "crate::".len()..];
        let end = tail
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(tail.len());
        let path = tail[..end].trim_end_matches(':');
        assert!(!tail.starts_with('{'), "a braced `use crate::{{..}}`");
        out.push(path.to_string());
        rest = &tail[end..];
    }
    out
}

/// The `.rs` files below `dir`, relative to `dir`.
fn sources(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::from(dir)];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("a source folder") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(dir).expect("below the folder");
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    out.sort();
    out
}

/// Every path of `files` (relative name, text) that goes up the layers, as
/// `file (rank) -> crate::path (rank)`.
fn upward(files: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for (rel, text) in files {
        if is_test_file(rel) {
            continue;
        }
        let Some(from) = rank_of_file(rel) else {
            continue;
        };
        for path in crate_paths(&code_of(text)) {
            if let Some(to) = rank_of_path(&path).filter(|&to| to > from) {
                out.push(format!("{rel} ({from}) -> crate::{path} ({to})"));
            }
        }
    }
    out
}

#[test]
fn no_layer_imports_a_layer_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files: Vec<(String, String)> = sources(&src)
        .into_iter()
        .map(|rel| {
            let text = std::fs::read_to_string(src.join(&rel)).expect("a source file");
            (rel, text)
        })
        .collect();
    assert!(files.len() > 50, "found the sources: {}", files.len());
    let ranked = files.iter().filter(|(r, _)| rank_of_file(r).is_some());
    assert!(ranked.count() > 40, "most files belong to a layer");
    let up = upward(&files);
    assert!(
        up.is_empty(),
        "imports up the layers (lib.rs states the order):\n  {}",
        up.join("\n  ")
    );
}

#[test]
fn the_engine_crate_names_the_daemon_nowhere() {
    let engine = Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine");
    let manifest = std::fs::read_to_string(engine.join("Cargo.toml")).expect("its manifest");
    assert!(!manifest.contains("metronome-daemon"), "{manifest}");
    let src = engine.join("src");
    let files = sources(&src);
    assert!(files.len() > 10, "found the engine's sources");
    for rel in files {
        let text = std::fs::read_to_string(src.join(&rel)).expect("a source file");
        assert!(
            !code_of(&text).contains("metronome_daemon"),
            "crates/engine/src/{rel} names the daemon"
        );
    }
}

#[test]
fn the_check_sees_an_upward_import_and_passes_a_downward_one() {
    let file = |rel: &str, text: &str| (rel.to_string(), text.to_string());
    let files = [
        file("os/early.rs", "use crate::ops::metrics::Metrics;\n"),
        file("os/attach.rs", "// crate::driver::run in a comment\n"),
        file("os/ports.rs", "let x = crate::driver::carrier::probe(a);\n"),
        file("driver/run/tests.rs", "use crate::ops::service::run;\n"),
        file("ops/metrics.rs", "use crate::ops::control::Live;\n"),
    ];
    assert_eq!(
        upward(&files),
        [
            "os/ports.rs (2) -> crate::driver::carrier::probe (6)",
            "ops/metrics.rs (1) -> crate::ops::control::Live (5)",
        ]
    );
    assert_eq!(rank_of_path("ops::metrics::cluster::AgentState"), Some(1));
    assert_eq!(rank_of_path("ops::metricsx"), None);
    assert_eq!(rank_of_file("ops/service/attached.rs"), Some(7));
}
