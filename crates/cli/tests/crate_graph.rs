//! The crate graph written in ARCHITECTURE.md ("The crates") is the real one: its fenced block of
//! `CRATE -> DEP, DEP, ...` lines lists, for every package of the workspace, the workspace
//! packages among its normal dependencies (not dev- or build-dependencies), exactly as
//! `cargo metadata` reads them from the `Cargo.toml` files.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// One edge: a package and a workspace package it depends on.
type Edge = (String, String);

/// The heading of the section whose first fenced block is the graph.
const SECTION: &str = "## The crates";

/// The workspace root (this crate is `crates/cli`).
fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// The workspace's packages and the edges between them, from `cargo metadata`.
fn manifest_graph() -> (BTreeSet<String>, BTreeSet<Edge>) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let output = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .arg("--manifest-path")
        .arg(root().join("Cargo.toml"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON");
    let packages = metadata["packages"]
        .as_array()
        .expect("cargo metadata lists packages");
    let name = |v: &serde_json::Value| v["name"].as_str().expect("a name").to_string();
    let names: BTreeSet<String> = packages.iter().map(name).collect();
    let mut edges = BTreeSet::new();
    for package in packages {
        let dependencies = package["dependencies"].as_array().expect("dependencies");
        for dependency in dependencies {
            // `kind` is null for a normal dependency, "dev" or "build" otherwise.
            if dependency["kind"].is_null() && names.contains(&name(dependency)) {
                edges.insert((name(package), name(dependency)));
            }
        }
    }
    (names, edges)
}

/// The packages and edges of the first fenced block after [`SECTION`] in `doc`: one line per
/// package, `NAME -> DEP, DEP` (nothing after `->` for a package with no dependency of ours).
fn doc_graph(doc: &str) -> Result<(BTreeSet<String>, BTreeSet<Edge>), String> {
    let section = doc
        .find(SECTION)
        .ok_or_else(|| format!("no section {SECTION:?}"))?;
    let mut lines = doc[section..].lines();
    lines
        .by_ref()
        .find(|l| l.starts_with("```"))
        .ok_or_else(|| format!("no fenced block after {SECTION:?}"))?;
    let mut names = BTreeSet::new();
    let mut edges = BTreeSet::new();
    for line in lines.take_while(|l| !l.starts_with("```")) {
        if line.trim().is_empty() {
            continue;
        }
        let (from, to) = line
            .split_once("->")
            .ok_or_else(|| format!("not `CRATE -> DEP, DEP`: {line:?}"))?;
        let from = from.trim().to_string();
        if !names.insert(from.clone()) {
            return Err(format!("{from} has two lines"));
        }
        for dep in to.split(',').map(str::trim).filter(|d| !d.is_empty()) {
            edges.insert((from.clone(), dep.to_string()));
        }
    }
    Ok((names, edges))
}

/// What differs between the manifests' graph and the doc's, one line per difference; empty if
/// they are the same.
fn differences(
    manifests: &(BTreeSet<String>, BTreeSet<Edge>),
    doc: &(BTreeSet<String>, BTreeSet<Edge>),
) -> Vec<String> {
    let edge = |(a, b): &Edge| format!("{a} -> {b}");
    let mut out = Vec::new();
    for name in manifests.0.difference(&doc.0) {
        out.push(format!("package {name} has no line in ARCHITECTURE.md"));
    }
    for name in doc.0.difference(&manifests.0) {
        out.push(format!(
            "ARCHITECTURE.md has a line for {name}, not a workspace package"
        ));
    }
    for e in manifests.1.difference(&doc.1) {
        out.push(format!(
            "in Cargo.toml, not in ARCHITECTURE.md: {}",
            edge(e)
        ));
    }
    for e in doc.1.difference(&manifests.1) {
        out.push(format!(
            "in ARCHITECTURE.md, not in Cargo.toml: {}",
            edge(e)
        ));
    }
    out
}

#[test]
fn architecture_md_states_the_real_crate_graph() {
    let doc = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let written = doc_graph(&doc).unwrap_or_else(|e| panic!("ARCHITECTURE.md: {e}"));
    let real = manifest_graph();
    let differences = differences(&real, &written);
    assert!(
        differences.is_empty(),
        "the crate graph in ARCHITECTURE.md ({SECTION}) differs from the Cargo.toml files \
         (normal dependencies between workspace packages):\n  {}",
        differences.join("\n  ")
    );
}

#[test]
fn the_comparison_names_each_differing_edge() {
    let doc = "## The crates\n\n```text\na -> b, c\nb  -> c\nc ->\n```\n";
    let written = doc_graph(doc).expect("parses");
    let edge = |a: &str, b: &str| (a.to_string(), b.to_string());
    let names = |ns: &[&str]| ns.iter().map(|n| n.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(written.0, names(&["a", "b", "c"]));
    assert_eq!(
        written.1,
        BTreeSet::from([edge("a", "b"), edge("a", "c"), edge("b", "c")])
    );
    let real = (
        names(&["a", "b", "c", "d"]),
        BTreeSet::from([edge("a", "b"), edge("b", "c"), edge("c", "a")]),
    );
    assert_eq!(
        differences(&real, &written),
        [
            "package d has no line in ARCHITECTURE.md",
            "in Cargo.toml, not in ARCHITECTURE.md: c -> a",
            "in ARCHITECTURE.md, not in Cargo.toml: a -> c",
        ]
    );
    assert!(doc_graph("## The crates\n```\na b\n```\n").is_err());
    assert!(doc_graph("## The crates\n```\na ->\na -> b\n```\n").is_err());
}
